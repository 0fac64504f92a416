use redlease::{Client, locked};

#[locked(key = "job", client = client, on_lost = report)]
async fn job(client: &Client) -> redlease::Result<()> {
    Ok(())
}

fn main() {}
