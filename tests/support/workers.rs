//! Test binaries that re-run themselves as worker processes: a test spawns children that run
//! only its file's `#[ignore]`d worker test (configured through environment variables), waits
//! for them with a bound, and can freeze or kill them by pid.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Spawns this test binary as a child that runs only the ignored test `worker`, with `envs`;
/// its stdout goes to `stdout`, its stderr to ours.
pub fn spawn_worker(worker: &str, envs: &[(&str, String)], stdout: Stdio) -> Child {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", worker, "--ignored", "--nocapture"])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawning a worker process")
}

/// Waits for a child at most `limit`, killing it (by its own pid) if it overstays.
pub fn wait_child(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    for _ in 0..(limit.as_millis() / 20 + 1) {
        if let Some(status) = child.try_wait().expect("polling a worker") {
            return status;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("worker {} did not finish within {limit:?}", child.id());
}

/// Waits (off the runtime's threads) for every worker, at most 120 s each; each must succeed.
pub async fn all_succeed(mut children: Vec<Child>) {
    let statuses = tokio::task::spawn_blocking(move || {
        children
            .iter_mut()
            .map(|child| wait_child(child, Duration::from_secs(120)))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for status in statuses {
        assert!(status.success(), "a worker failed: {status}");
    }
}

/// Sends `signal` (`STOP`, `KILL`) to our own unreaped child, by its pid.
pub fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
}
