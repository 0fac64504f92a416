//! A graceful stop of a leader: the term it ends is recorded as resigned (not expired) even
//! when the client shuts down at once, and a leader process that gets SIGTERM hands over to the
//! next candidate process in milliseconds, not after its lease.
//!
//! The multi-process test re-runs this test binary as children that execute only the
//! `#[ignore]`d `leader_process` test (the SIGTERM-aware leader of
//! `examples/graceful_leader.rs`), configured through `REDLEASE_LEADER_*` variables; a child's
//! lines of interest start with `LEADER `.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redlease::{ChangeCause, Client};
use support::{Server, client, unique_name};

const SECOND: Duration = Duration::from_secs(1);

/// The run of the issue: `lead` dropped (its task aborted) and `shutdown()` called at once.
/// It recorded "expired" in 3 runs of 3 before, since the background resignation found the
/// client shut down and said nothing; the lock then lingered until its lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_dropped_then_shut_down_at_once_records_resigned() {
    support::init_tracing();
    let server = Server::start();
    let observer = client(&server).await;
    for run in 0..3 {
        let name = unique_name("stop");
        let leader = client(&server).await;
        let election = leader.election(&name).unwrap();
        let (led, mut leads) = tokio::sync::mpsc::unbounded_channel();
        let lead = election.lead("a", |leading| {
            let _ = led.send(leading.term());
            std::future::pending::<()>()
        });
        // The `lead` future is dropped as soon as the body runs, as a `select!` on a signal
        // would drop it; the shutdown follows at once.
        let term = tokio::select! {
            _ = lead => panic!("the body never finishes"),
            term = leads.recv() => term.unwrap(),
            () = tokio::time::sleep(5 * SECOND) => panic!("no lead within 5 s"),
        };
        leader.shutdown().await.unwrap();
        let status = observer.election(&name).unwrap().status().await.unwrap();
        assert_eq!(status.leader, None, "run {run}: term {term}");
        assert_eq!(
            status.last_change,
            Some(ChangeCause::Resigned),
            "run {run}: term {term}"
        );
        assert_eq!(
            status.remaining_lease, None,
            "run {run}: the lock was released"
        );
    }
}

/// The same with a `Leadership` dropped (not resigned) just before the shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_dropped_then_shut_down_at_once_records_resigned() {
    support::init_tracing();
    let server = Server::start();
    let observer = client(&server).await;
    let name = unique_name("stop");
    let leader = client(&server).await;
    let leadership = leader.election(&name).unwrap().campaign("a").await.unwrap();
    drop(leadership);
    leader.shutdown().await.unwrap();
    let status = observer.election(&name).unwrap().status().await.unwrap();
    assert_eq!(status.leader, None);
    assert_eq!(status.last_change, Some(ChangeCause::Resigned));
}
