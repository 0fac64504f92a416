use redlease::{Client, locked};

#[locked(key = "job", client = client)]
async fn job(client: &Client) {}

fn main() {}
