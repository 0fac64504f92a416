use redlease::{Client, locked};

#[derive(Debug)]
struct MyError;

#[locked(key = "job", client = client, busy = error)]
async fn job(client: &Client) -> Result<(), MyError> {
    Ok(())
}

fn main() {}
