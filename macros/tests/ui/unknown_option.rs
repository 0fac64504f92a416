use redlease::{Client, locked};

#[locked(key = "job", client = client, timeout = "5s")]
async fn job(client: &Client) -> redlease::Result<()> {
    Ok(())
}

fn main() {}
