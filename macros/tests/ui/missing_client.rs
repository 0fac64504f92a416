use redlease::locked;

#[locked(key = "job")]
async fn job() -> redlease::Result<()> {
    Ok(())
}

fn main() {}
