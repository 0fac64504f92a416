use redlease::locked;

#[locked(key = "job:{id}", client = id)]
async fn job(id: u32) -> redlease::Result<()> {
    Ok(())
}

fn main() {}
