use redlease::{Client, locked};

#[locked(key = "job", client = client, lease = "500us")]
async fn short_lease(client: &Client) -> redlease::Result<()> {
    Ok(())
}

#[locked(key = "job", client = client, wait = "400days", busy = error)]
async fn long_wait(client: &Client) -> redlease::Result<()> {
    Ok(())
}

#[locked(key = "}}job", client = client)]
async fn bad_name(client: &Client) -> redlease::Result<()> {
    Ok(())
}

fn main() {}
