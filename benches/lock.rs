//! Micro benchmarks against a real server (`$REDIS_URL`, default `redis://127.0.0.1:6379`;
//! `make criterion` starts a private one).
//!
//! - `floor/evalsha`: one bare EVALSHA round trip of `return 1` on a `ConnectionManager`, the
//!   physical limit of any script-based lock operation;
//! - `uncontended/lock_unlock`: one task, lock + unlock one key (two round trips);
//! - `contended/handoff_8_tasks`: 8 tasks, one lock, 50 acquisitions each per iteration;
//! - `many_keys/64_tasks_64_keys`: 64 tasks, each its own key, 20 lock+unlock each.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use redlease::Client;
use tokio::runtime::Runtime;

fn url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let (client, conn) = rt.block_on(async {
        let client = Client::connect(&url())
            .await
            .expect("connect to $REDIS_URL");
        let raw = redis::Client::open(url()).expect("url");
        let conn = raw
            .get_connection_manager()
            .await
            .expect("connection manager");
        (client, conn)
    });
    let script = redis::Script::new("return 1");

    let mut floor = c.benchmark_group("floor");
    floor.bench_function("evalsha", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            let script = &script;
            async move {
                let one: i64 = script.invoke_async(&mut conn).await.expect("evalsha");
                one
            }
        })
    });
    floor.finish();

    let mut uncontended = c.benchmark_group("uncontended");
    let lock = client.lock("bench:uncontended").expect("name");
    uncontended.bench_function("lock_unlock", |b| {
        b.to_async(&rt).iter(|| async {
            let guard = lock.lock().await.expect("lock");
            guard.unlock().await.expect("unlock");
        })
    });
    uncontended.finish();

    let mut contended = c.benchmark_group("contended");
    contended.throughput(Throughput::Elements(8 * 50));
    contended
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    let names = vec!["bench:contended".to_string(); 8];
    contended.bench_function("handoff_8_tasks", |b| {
        b.to_async(&rt)
            .iter(|| tasks_lock_unlock(client.clone(), &names, 50))
    });
    contended.finish();

    let mut many = c.benchmark_group("many_keys");
    many.throughput(Throughput::Elements(64 * 20));
    many.sample_size(10);
    let names: Vec<String> = (0..64).map(|i| format!("bench:many:{i}")).collect();
    many.bench_function("64_tasks_64_keys", |b| {
        b.to_async(&rt)
            .iter(|| tasks_lock_unlock(client.clone(), &names, 20))
    });
    many.finish();
    rt.block_on(client.shutdown()).expect("shutdown");
}

/// One task per name, each doing `rounds` lock+unlock pairs on its lock; waits for all.
async fn tasks_lock_unlock(client: Client, names: &[String], rounds: usize) {
    let tasks: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = client.lock(name).expect("name");
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.lock().await.expect("lock");
                    guard.unlock().await.expect("unlock");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
}

criterion_group!(lock_benches, benches);
criterion_main!(lock_benches);
