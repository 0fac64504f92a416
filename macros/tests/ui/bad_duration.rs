use redlease::{Client, locked};

#[locked(key = "job", client = client, wait = "5 parsecs", busy = error)]
async fn job(client: &Client) -> redlease::Result<()> {
    Ok(())
}

fn main() {}
