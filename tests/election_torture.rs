//! The randomized fault run (`support::torture`) with an election workload: tasks of three
//! clients campaign for three elections and write to the fenced resource with their term while
//! the server is killed and restarted, frozen, or paused at random. The run's oracle is the
//! term's promise: no term is given to two leaders, no two leaderships that were not lost
//! overlap while valid, and (the server keeps every write: an fsynced append-only file) terms
//! only increase, so the resource never refuses a leader that was not told it lost.

mod support;

use std::time::Duration;

use redlease::Client;
use support::torture::{self, Dice, Fault, Fences};
use support::{Server, unique_names};

const NAMES: usize = 3;
const CLIENTS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_keep_the_term_oracle_under_random_server_faults() {
    let mut server = Server::builder().appendonly(true).start();
    let names = unique_names("torture-elect", NAMES);
    let mut clients = Vec::new();
    let mut candidates = Vec::new();
    for c in 0..CLIENTS {
        let client = Client::builder(server.url())
            .watchdog_lease(Duration::from_secs(2))
            .timeout(Duration::from_millis(500))
            .build()
            .await
            .unwrap();
        let (campaigner, names) = (client.clone(), names.clone());
        candidates.push(torture::acquire(move |i| {
            let election = campaigner.election(&names[i]);
            async move {
                let value = format!("client-{c}");
                election?
                    .try_campaign_for(&value, Duration::from_secs(2))
                    .await
            }
        }));
        clients.push(client);
    }
    // A crash and restart, a frozen process, or paused writes, each for about 300 ms.
    let fault = move |dice: &mut Dice| {
        let outage = Duration::from_millis(300);
        match dice.below(3) {
            0 => {
                server.kill();
                std::thread::sleep(outage);
                server.restart();
            }
            1 => {
                server.pause();
                std::thread::sleep(outage);
                server.resume();
            }
            _ => server.client_pause(outage.as_millis() as u64, false),
        }
        Fault::KeepsWrites
    };
    torture::run("elections", Fences::Durable, names, candidates, fault).await;
    for client in clients {
        let _ = client.shutdown().await;
    }
}
