use redlease::{Client, locked};

#[locked(key = "job", client = client)]
fn job(client: &Client) -> redlease::Result<()> {
    Ok(())
}

fn main() {}
