use redlease::{Client, locked};

struct Order {
    id: u64,
}

#[locked(key = "order:{ordr.id}", client = client)]
async fn pay(client: &Client, order: &Order) -> redlease::Result<u64> {
    Ok(order.id)
}

fn main() {}
