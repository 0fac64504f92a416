//! A Spring-style service whose methods run under distributed locks, the Rust way:
//!
//! ```java
//! @Service
//! class OrderService {
//!     @RedisLock(key = "'order:' + #order.id", waitTime = 5, leaseTime = 30)
//!     public Receipt pay(Order order) { ... }
//!
//!     @Scheduled(cron = "0 0 2 * * *")
//!     @RedisLock(key = "'report:' + #day", waitTime = 0)   // other instances skip it
//!     public void nightlyReport(String day) { ... }
//! }
//! ```
//!
//! Run with `bash scripts/with-redis.sh cargo run -p redlease-macros --example order_service`
//! (starts a private redis-server when `$REDIS_URL` is unset) or
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redlease-macros --example order_service`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use redlease::{Client, HeldLock, locked};

/// The service's error type: lock errors come in through `From`.
#[derive(Debug)]
enum OrderError {
    Lock(redlease::Error),
    AlreadyPaid(u64),
}

impl From<redlease::Error> for OrderError {
    fn from(e: redlease::Error) -> Self {
        OrderError::Lock(e)
    }
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrderError::Lock(e) => write!(f, "lock: {e}"),
            OrderError::AlreadyPaid(id) => write!(f, "order {id} is already paid"),
        }
    }
}

struct Order {
    id: u64,
    amount_cents: u64,
}

struct OrderService {
    client: Client,
    /// Stands in for the database: how many times each order was charged.
    charges: AtomicU32,
    reports: AtomicU32,
}

impl OrderService {
    /// One payment per order at a time across every instance. Waits up to 5 s; the lock is
    /// held at most 30 s (no renewal), like `leaseTime = 30`. `held` names the lock inside.
    #[locked(key = "order:{order.id}", client = self.client, wait = "5s", lease = "30s",
             busy = error, held = lock)]
    async fn pay(&self, order: &Order, first_try: bool) -> Result<String, OrderError> {
        if !first_try {
            return Err(OrderError::AlreadyPaid(order.id));
        }
        // A read-modify-write that must not interleave with another payment of this order.
        let before = self.charges.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.charges.store(before + 1, Ordering::SeqCst);
        Ok(receipt(&lock, order))
    }

    /// Runs on one instance only: every other caller skips it at once (`waitTime = 0`) and gets
    /// `Ok(false)`. The watchdog keeps the lease while the report runs.
    #[locked(key = "report:{day}", client = self.client, busy = skip(Ok(false)))]
    async fn nightly_report(&self, day: &str) -> Result<bool, OrderError> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.reports.fetch_add(1, Ordering::SeqCst);
        Ok(true)
    }
}

fn receipt(lock: &HeldLock, order: &Order) -> String {
    format!("paid {} cents under `{}`", order.amount_cents, lock.name())
}

#[tokio::main]
async fn main() -> Result<(), OrderError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let (charges, reports) = run(&url).await?;
    println!("{charges} charges, {reports} nightly report(s)");
    Ok(())
}

/// The example's run against the server at `url`: the charges and reports recorded.
async fn run(url: &str) -> Result<(u32, u32), OrderError> {
    let service = Arc::new(OrderService {
        client: Client::connect(url).await?,
        charges: AtomicU32::new(0),
        reports: AtomicU32::new(0),
    });

    // Eight payments of one order at once: they take turns, none is lost.
    let start = Instant::now();
    let payments: Vec<_> = (0..8)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                let order = Order {
                    id: 42,
                    amount_cents: 1999,
                };
                service.pay(&order, true).await
            })
        })
        .collect();
    for payment in payments {
        match payment.await {
            Ok(Ok(receipt)) => println!("{receipt}"),
            Ok(Err(e)) => println!("payment failed: {e}"),
            Err(e) => println!("payment task failed: {e}"),
        }
    }
    println!(
        "8 payments, {} charges recorded, in {:?} (one at a time)",
        service.charges.load(Ordering::SeqCst),
        start.elapsed()
    );
    let order = Order {
        id: 42,
        amount_cents: 1999,
    };
    match service.pay(&order, false).await {
        Ok(receipt) => println!("unexpected: {receipt}"),
        Err(e) => println!("a body's own error passes through: {e}"),
    }

    // Three "instances" fire the nightly report together: one runs it, two skip.
    let (a, b, c) = tokio::join!(
        service.nightly_report("2026-11-25"),
        service.nightly_report("2026-11-25"),
        service.nightly_report("2026-11-25"),
    );
    println!(
        "nightly report ran: {:?} {:?} {:?}; reports written: {}",
        a,
        b,
        c,
        service.reports.load(Ordering::SeqCst)
    );

    service.client.shutdown().await?;
    Ok((
        service.charges.load(Ordering::SeqCst),
        service.reports.load(Ordering::SeqCst),
    ))
}

#[cfg(test)]
#[path = "../../tests/support/mod.rs"]
mod support;

#[cfg(test)]
mod tests {
    use super::*;

    /// The example's own run, against a private server: eight concurrent payments of one order
    /// charge once each, one at a time, and of three simultaneous nightly reports one runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_example_charges_each_payment_once_and_reports_once() {
        let server = support::Server::start();
        let (charges, reports) = run(&server.url()).await.expect("the example ran");
        assert_eq!(charges, 8);
        assert_eq!(reports, 1);
    }
}
