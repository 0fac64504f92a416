//! Leader election against a real server: terms, hand-over by resignation, proclaim, the lead
//! helper, cancelled campaigns, and candidate processes killed (-9) or frozen (SIGSTOP) while
//! an observer process watches every term.
//!
//! The multi-process tests re-run this test binary as children that execute only the
//! `#[ignore]`d `worker_process` test, configured through `REDLEASE_WORKER*` variables; a
//! child's lines of interest start with `EL `.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redlease::{ChangeCause, Client, LeadOptions, LeaderChange};
use support::{Server, client, client_with_lease, exists, key_of, numsub, unique_name};

const SECOND: Duration = Duration::from_secs(1);

/// The fenced resource of these tests: a write carrying `term` is accepted only if no greater
/// term was accepted before; accepted writes are logged as `<term>:<writer>`.
const FENCED_WRITE: &str = "\
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local term = tonumber(ARGV[1])
if term < last then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ':' .. ARGV[2])
return 1";

async fn fenced_write(client: &Client, resource: &str, term: u64, writer: &str) -> bool {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(FENCED_WRITE)
        .arg(2)
        .arg(resource)
        .arg(format!("{resource}:log"))
        .arg(term)
        .arg(writer);
    client.query::<i64>(&cmd).await.unwrap() == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_wins_and_leader_names_value_term_and_process() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("elect");
    let election = a.election(&name).unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    let leadership = election.campaign("10.0.0.7:8080").await.unwrap();
    let term = leadership.term();
    assert!(term > 0);
    assert!(!leadership.is_lost());
    let leader = b
        .election(&name)
        .unwrap()
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!(leader.value, "10.0.0.7:8080");
    assert_eq!(leader.term, term);
    assert_eq!(leader.process.pid, std::process::id());
    assert_eq!(leader.process.id, a.id().to_string());
    assert!(!leader.process.host.is_empty());
    let status = b.election(&name).unwrap().status().await.unwrap();
    assert_eq!(status.transitions, 1);
    assert_eq!(status.last_change, Some(ChangeCause::Elected));
    assert!(status.remaining_lease.is_some());
    // Another candidate does not win while the leader leads.
    let other = b.election(&name).unwrap();
    assert!(
        other
            .try_campaign_for("other", Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );
    leadership.resign().await.unwrap();
    assert_eq!(b.election(&name).unwrap().leader().await.unwrap(), None);
    let status = b.election(&name).unwrap().status().await.unwrap();
    assert_eq!(status.last_change, Some(ChangeCause::Resigned));
    assert!(!exists(&server, &key_of(&name)), "the lock is released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_hands_over_at_once_without_waiting_for_the_lease() {
    support::init_tracing();
    let server = Server::start();
    let lease = Duration::from_secs(20);
    let a = client_with_lease(&server, lease).await;
    let b = client_with_lease(&server, lease).await;
    let name = unique_name("resign");
    let first = a.election(&name).unwrap().campaign("a").await.unwrap();
    let election_b = b.election(&name).unwrap();
    let waiting = tokio::spawn(async move {
        let leadership = election_b.campaign("b").await.unwrap();
        (Instant::now(), leadership)
    });
    // B waits, subscribed to the lock's release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "b won while a led");
    let resigned_at = Instant::now();
    let first_term = first.term();
    first.resign().await.unwrap();
    let (won_at, second) = tokio::time::timeout(5 * SECOND, waiting)
        .await
        .expect("b won after the resignation")
        .unwrap();
    let took = won_at.duration_since(resigned_at);
    assert!(
        took < Duration::from_millis(1000),
        "b took {took:?} to win after a resigned; the lease is {lease:?}"
    );
    assert!(second.term() > first_term);
    let leader = a.election(&name).unwrap().leader().await.unwrap().unwrap();
    assert_eq!((leader.value.as_str(), leader.term), ("b", second.term()));
    second.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proclaim_changes_the_value_but_not_the_term() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("proclaim");
    let leadership = a.election(&name).unwrap().campaign("v1").await.unwrap();
    let mut changes = b.election(&name).unwrap().observe();
    let first = next_change(&mut changes).await;
    assert!(first.initial);
    leadership.proclaim("v2").await.unwrap();
    let change = next_change(&mut changes).await;
    assert_eq!(change.cause, Some(ChangeCause::Proclaimed));
    assert_eq!(change.revision, first.revision + 1);
    let leader = change.leader.expect("still leading");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("v2", leadership.term())
    );
    assert_eq!(leadership.value(), "v2");
    let term = leadership.term();
    leadership.resign().await.unwrap();
    let change = next_change(&mut changes).await;
    assert_eq!(change.cause, Some(ChangeCause::Resigned));
    assert_eq!(change.leader, None);
    // A resigned leader's term can no longer publish.
    let again = a.election(&name).unwrap().campaign("v3").await.unwrap();
    assert!(again.term() > term);
    again.resign().await.unwrap();
}

async fn next_change(changes: &mut redlease::LeaderChanges) -> LeaderChange {
    tokio::time::timeout(5 * SECOND, changes.next())
        .await
        .expect("a change within 5 s")
        .expect("the stream goes on")
        .expect("no error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_campaign_leaves_nothing_behind() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("cancel");
    let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
    let election_b = b.election(&name).unwrap();
    // Cancelled while waiting.
    let waited = tokio::time::timeout(Duration::from_millis(300), election_b.campaign("b")).await;
    assert!(waited.is_err(), "b cannot win while a leads");
    assert_eq!(b.held_count(), 0);
    let unlock = support::unlock_channel(&key_of(&name));
    assert!(
        support::eventually(2 * SECOND, || numsub(&server, &unlock) == 0),
        "the cancelled campaign's subscription is gone"
    );
    let term = leadership.term();
    leadership.resign().await.unwrap();
    // Cancelled at every point of a win: after any of these, nothing is left once things
    // settle, and the next campaign wins at once with a greater term.
    let mut last = term;
    for delay_us in [0u64, 50, 200, 500, 1000, 2000, 5000] {
        let cancelled =
            tokio::time::timeout(Duration::from_micros(delay_us), election_b.campaign("b")).await;
        drop(cancelled);
        assert!(
            support::eventually_async(2 * SECOND, || async {
                b.held_count() == 0 && !exists(&server, &key_of(&name))
            })
            .await,
            "a campaign cancelled after {delay_us} µs left its hold behind"
        );
        let next = election_b
            .try_campaign_for("b", 2 * SECOND)
            .await
            .unwrap()
            .expect("free again");
        assert!(next.term() > last);
        last = next.term();
        next.resign().await.unwrap();
    }
    assert_eq!(
        a.election(&name).unwrap().leader().await.unwrap(),
        None,
        "no leader is left recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_cancels_the_body_when_leadership_is_lost_and_rejoins_when_asked() {
    support::init_tracing();
    let server = Server::start();
    let lease = Duration::from_millis(600);
    let a = client_with_lease(&server, lease).await;
    let operator = client(&server).await;
    let name = unique_name("lead");
    let election = a.election(&name).unwrap();

    // Without rejoin: the loss ends `lead` with LeaseLost; the body never finishes.
    let finished = Arc::new(AtomicU32::new(0));
    let body_finished = finished.clone();
    let lead = tokio::spawn({
        let election = election.clone();
        async move {
            election
                .lead("a", move |_leading| {
                    let finished = body_finished.clone();
                    async move {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        finished.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .await
        }
    });
    let observer = operator.election(&name).unwrap();
    assert!(
        support::eventually_async(5 * SECOND, || async {
            observer.leader().await.unwrap().is_some()
        })
        .await
    );
    assert!(operator.lock(&name).unwrap().force_unlock().await.unwrap());
    let ended = tokio::time::timeout(5 * SECOND, lead)
        .await
        .expect("lead ended after the loss")
        .unwrap();
    assert!(ended.unwrap_err().is_lease_lost());
    assert_eq!(finished.load(Ordering::SeqCst), 0);

    // With rejoin: the body runs again in a new, greater term.
    let terms = Arc::new(parking_lot_free::Terms::default());
    let seen = terms.clone();
    let lead = tokio::spawn({
        let election = election.clone();
        async move {
            election
                .lead_with(LeadOptions::new().rejoin(true), "a", move |leading| {
                    let seen = seen.clone();
                    async move {
                        seen.push(leading.term());
                        if seen.len() >= 2 {
                            return leading.term();
                        }
                        std::future::pending().await
                    }
                })
                .await
        }
    });
    assert!(
        support::eventually_async(5 * SECOND, || async { terms.len() == 1 }).await,
        "the body runs in the first term"
    );
    assert!(operator.lock(&name).unwrap().force_unlock().await.unwrap());
    let last = tokio::time::timeout(5 * SECOND, lead)
        .await
        .expect("the second body finished")
        .unwrap()
        .unwrap();
    let all = terms.all();
    assert_eq!(all.len(), 2);
    assert!(all[1] > all[0], "terms {all:?}");
    assert_eq!(last, all[1]);
    // The finished body resigned.
    assert!(
        support::eventually_async(2 * SECOND, || async {
            observer.leader().await.unwrap().is_none()
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_finds_its_lease_lost_says_so() {
    support::init_tracing();
    let server = Server::start();
    let lease = Duration::from_millis(600);
    let a = client_with_lease(&server, lease).await;
    let operator = client(&server).await;
    let name = unique_name("lost");
    let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
    assert!(operator.lock(&name).unwrap().force_unlock().await.unwrap());
    tokio::time::timeout(2 * SECOND, leadership.lost())
        .await
        .expect("the watchdog found the lock gone");
    assert!(leadership.is_lost());
    // Its report is one round trip behind the signal.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = operator.election(&name).unwrap().status().await.unwrap();
    assert_eq!(status.leader, None);
    assert_eq!(status.last_change, Some(ChangeCause::Lost));
    let term = leadership.term();
    assert!(
        leadership
            .proclaim("late")
            .await
            .unwrap_err()
            .is_lease_lost()
    );
    assert!(leadership.resign().await.unwrap_err().is_lease_lost());
    let next = operator
        .election(&name)
        .unwrap()
        .campaign("b")
        .await
        .unwrap();
    assert!(next.term() > term);
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observing_ends_when_the_client_shuts_down_and_leaves_no_subscription() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("shutdown");
    let mut changes = b.election(&name).unwrap().observe();
    assert!(next_change(&mut changes).await.initial);
    let channel = format!("{}:election:changed", key_of(&name));
    assert_eq!(numsub(&server, &channel), 1);
    b.shutdown().await.unwrap();
    let ended = tokio::time::timeout(3 * SECOND, changes.next())
        .await
        .expect("woken by the shutdown");
    assert!(ended.expect("one last item").unwrap_err().is_shutdown());
    assert!(changes.next().await.is_none(), "then the stream ends");
    drop(changes);
    assert!(
        support::eventually(2 * SECOND, || numsub(&server, &channel) == 0),
        "no subscription is left"
    );
    // Dropping a live stream unsubscribes too.
    let mut changes = a.election(&name).unwrap().observe();
    assert!(next_change(&mut changes).await.initial);
    assert_eq!(numsub(&server, &channel), 1);
    drop(changes);
    assert!(support::eventually(2 * SECOND, || numsub(
        &server, &channel
    ) == 0));
}

/// The election's metrics, through a Prometheus recorder installed for this test binary (other
/// tests may add to the counts, never take from them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_terms_campaign_waits_and_takeovers() {
    support::init_tracing();
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("metrics");
    let first = a.election(&name).unwrap().campaign("a").await.unwrap();
    let election_b = b.election(&name).unwrap();
    let waiting = tokio::spawn(async move { election_b.campaign("b").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.resign().await.unwrap();
    let second = tokio::time::timeout(5 * SECOND, waiting)
        .await
        .expect("b won")
        .unwrap()
        .unwrap();
    second.resign().await.unwrap();
    let text = handle.render();
    let value = |metric: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(metric) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {metric} in\n{text}"))
    };
    assert!(value("redlease_election_terms_total") >= 2.0, "{text}");
    assert!(
        value("redlease_election_campaign_wait_seconds_count") >= 2.0,
        "{text}"
    );
    // b's win came after a's recorded resignation.
    assert!(
        value("redlease_election_takeover_seconds_count") >= 1.0,
        "{text}"
    );
}

/// A small shared list without a lock crate.
mod parking_lot_free {
    #[derive(Default)]
    pub struct Terms(std::sync::Mutex<Vec<u64>>);
    impl Terms {
        pub fn push(&self, term: u64) {
            self.0.lock().unwrap().push(term);
        }
        pub fn len(&self) -> usize {
            self.0.lock().unwrap().len()
        }
        pub fn all(&self) -> Vec<u64> {
            self.0.lock().unwrap().clone()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_reports_a_gap_when_the_log_cannot_cover_it() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("gap");
    let mut changes = b.election(&name).unwrap().observe();
    let first = next_change(&mut changes).await;
    assert!(first.initial && first.leader.is_none() && first.revision == 0);
    let leadership = a.election(&name).unwrap().campaign("0").await.unwrap();
    let elected = next_change(&mut changes).await;
    assert_eq!(elected.cause, Some(ChangeCause::Elected));
    assert_eq!(
        elected.leader.as_ref().map(|l| l.term),
        Some(leadership.term())
    );
    assert!(!elected.is_gap());
    // 100 changes while the stream is not polled: more than the 64 kept.
    for i in 1..=100 {
        leadership.proclaim(&i.to_string()).await.unwrap();
    }
    let mut items = Vec::new();
    while items
        .last()
        .is_none_or(|c: &LeaderChange| c.revision < elected.revision + 100)
    {
        items.push(next_change(&mut changes).await);
        assert!(items.len() <= 100, "bounded");
    }
    assert_eq!(items.len(), 64, "the log keeps 64");
    assert_eq!(items[0].missed, 36);
    assert!(items[0].is_gap());
    assert!(items[1..].iter().all(|c| !c.is_gap()));
    let values: Vec<String> = items
        .iter()
        .map(|c| c.leader.as_ref().unwrap().value.clone())
        .collect();
    assert_eq!(values.first().map(String::as_str), Some("37"));
    assert_eq!(values.last().map(String::as_str), Some("100"));
    leadership.resign().await.unwrap();
}

/// The rights of docs/acl.md for one server (as in tests/acl.rs): an election needs no more.
const LEAST: &str = "resetkeys resetchannels ~redlease:* &redlease:* -@all \
    +evalsha +script|load +publish +subscribe +unsubscribe \
    +get +hget +hmget +hgetall +hset +hmset +pexpire +exists +del \
    +hsetnx +hexists +hincrby +hdel +set +incr +incrby +decr +decrby \
    +rpush +lindex +lrem +lpop +type +pttl +time +pubsub|numsub";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_runs_with_the_least_privileges_of_docs_acl() {
    support::init_tracing();
    let server = Server::start();
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg("elector")
        .arg("reset")
        .arg("on")
        .arg(">pw");
    for rule in LEAST.split_whitespace() {
        cmd.arg(rule);
    }
    let _: () = cmd.query(&mut server.conn()).unwrap();
    let url = format!("redis://elector:pw@127.0.0.1:{}", server.port());
    let a = support::connect(&url).await;
    let b = support::connect(&url).await;
    let name = unique_name("acl");
    let mut changes = b.election(&name).unwrap().observe();
    assert!(next_change(&mut changes).await.initial);
    let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
    leadership.proclaim("a2").await.unwrap();
    let leader = b.election(&name).unwrap().leader().await.unwrap().unwrap();
    assert_eq!(leader.value, "a2");
    leadership.resign().await.unwrap();
    let causes: Vec<Option<ChangeCause>> = [
        next_change(&mut changes).await,
        next_change(&mut changes).await,
        next_change(&mut changes).await,
    ]
    .iter()
    .map(|c| c.cause)
    .collect();
    assert_eq!(
        causes,
        [
            Some(ChangeCause::Elected),
            Some(ChangeCause::Proclaimed),
            Some(ChangeCause::Resigned)
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Processes.

const MARK: &str = "EL ";
const WORKER_LEASE: Duration = Duration::from_secs(1);

/// One line of a child, with who said it.
#[derive(Debug, Clone)]
struct Line {
    who: usize,
    words: Vec<String>,
}

struct Workers {
    children: Vec<Child>,
    lines: mpsc::Receiver<Line>,
    sender: mpsc::Sender<Line>,
    seen: Vec<Line>,
}

impl Workers {
    fn new() -> Workers {
        let (sender, lines) = mpsc::channel();
        Workers {
            children: Vec::new(),
            lines,
            sender,
            seen: Vec::new(),
        }
    }

    /// Starts a worker; its index is its `who`.
    fn spawn(&mut self, envs: &[(&str, String)]) -> usize {
        let who = self.children.len();
        let exe = std::env::current_exe().expect("path of the test binary");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", "worker_process", "--ignored", "--nocapture"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env("REDLEASE_WORKER_WHO", who.to_string());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawning a worker process");
        let stdout = child.stdout.take().expect("piped stdout");
        let sender = self.sender.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix(MARK) {
                    let words = rest.split_whitespace().map(str::to_owned).collect();
                    if sender.send(Line { who, words }).is_err() {
                        return;
                    }
                }
            }
        });
        self.children.push(child);
        who
    }

    /// Waits at most `within` for a line matching `wanted`; every line read is kept.
    fn wait_for(&mut self, within: Duration, wanted: impl Fn(&Line) -> bool) -> Option<Line> {
        if let Some(line) = self.seen.iter().find(|l| wanted(l)) {
            return Some(line.clone());
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let line = self.lines.recv_timeout(left).ok()?;
            self.seen.push(line.clone());
            if wanted(&line) {
                return Some(line);
            }
        }
    }

    /// Reads whatever arrived meanwhile.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    fn signal(&self, who: usize, sig: &str) {
        let pid = self.children[who].id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{sig}"), pid.as_str()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{sig} {pid}");
    }

    fn kill(&mut self, who: usize) {
        let _ = self.children[who].kill();
        let _ = self.children[who].wait();
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn is(line: &Line, word: &str) -> bool {
    line.words.first().map(String::as_str) == Some(word)
}

fn term_of(line: &Line) -> u64 {
    line.words[1].parse().expect("a term")
}

fn candidate_env(url: &str, name: &str, resource: &str, mode: &str) -> Vec<(&'static str, String)> {
    vec![
        ("REDLEASE_WORKER", mode.into()),
        ("REDLEASE_WORKER_URL", url.into()),
        ("REDLEASE_WORKER_NAME", name.into()),
        ("REDLEASE_WORKER_RESOURCE", resource.into()),
    ]
}

/// Three candidates and an observer; kill -9 of the leader, then SIGSTOP of the next one past
/// its lease: each time a new leader with a greater term within the lease + 1 s, the frozen one
/// told it lost when it resumes and its late writes refused, and the observer sees every term
/// in order with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_processes_killed_or_frozen_hand_over_with_greater_terms() {
    support::init_tracing();
    let server = Server::start();
    killed_and_frozen_leaders(&server.url()).await;
}

/// [`candidate_processes_killed_or_frozen_hand_over_with_greater_terms`] on a Redis Cluster of
/// three primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_processes_killed_or_frozen_on_a_3_primary_cluster() {
    support::init_tracing();
    let cluster = tokio::task::block_in_place(support::Cluster::start);
    killed_and_frozen_leaders(&cluster.url()).await;
}

/// [`candidate_processes_killed_or_frozen_hand_over_with_greater_terms`] behind Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_processes_killed_or_frozen_behind_sentinel() {
    support::init_tracing();
    let group = tokio::task::block_in_place(support::sentinel::SentinelGroup::start);
    killed_and_frozen_leaders(&group.url()).await;
}

async fn killed_and_frozen_leaders(url: &str) {
    let name = unique_name("procs");
    // One hash tag: the resource and its log share a cluster slot.
    let resource = format!("{{{}}}", unique_name("resource"));
    let mut workers = Workers::new();
    let observer = workers.spawn(&candidate_env(url, &name, &resource, "observer"));
    workers
        .wait_for(20 * SECOND, |l| l.who == observer && is(l, "INITIAL"))
        .expect("the observer started");
    let candidates: Vec<usize> = (0..3)
        .map(|_| workers.spawn(&candidate_env(url, &name, &resource, "candidate")))
        .collect();
    let first = workers
        .wait_for(20 * SECOND, |l| is(l, "LEADING"))
        .expect("a candidate leads");
    let (x, t1) = (first.who, term_of(&first));
    assert!(candidates.contains(&x));

    // The watchdog keeps it: nobody else leads over two leases.
    std::thread::sleep(2 * WORKER_LEASE);
    workers.drain();
    let leaders: Vec<&Line> = workers.seen.iter().filter(|l| is(l, "LEADING")).collect();
    assert_eq!(leaders.len(), 1, "one leader while it lives: {leaders:?}");

    // kill -9: a new leader within the lease + 1 s.
    workers.kill(x);
    let killed_at = Instant::now();
    let second = workers
        .wait_for(WORKER_LEASE + SECOND, |l| is(l, "LEADING") && l.who != x)
        .unwrap_or_else(|| {
            panic!(
                "no new leader within {:?} of kill -9",
                WORKER_LEASE + SECOND
            )
        });
    eprintln!("took over {:?} after kill -9", killed_at.elapsed());
    let (y, t2) = (second.who, term_of(&second));
    assert!(t2 > t1, "term {t2} after {t1}");

    // SIGSTOP past the lease: a new leader; the frozen one, resumed, is told it lost.
    std::thread::sleep(Duration::from_millis(300));
    workers.signal(y, "STOP");
    let stopped_at = Instant::now();
    let third = workers
        .wait_for(WORKER_LEASE + SECOND, |l| {
            is(l, "LEADING") && l.who != y && l.who != x
        })
        .unwrap_or_else(|| {
            panic!(
                "no new leader within {:?} of SIGSTOP",
                WORKER_LEASE + SECOND
            )
        });
    eprintln!("took over {:?} after SIGSTOP", stopped_at.elapsed());
    let (z, t3) = (third.who, term_of(&third));
    assert!(t3 > t2, "term {t3} after {t2}");
    // Let the new leader write with its term before the old one resumes.
    std::thread::sleep(Duration::from_millis(500));
    workers.signal(y, "CONT");
    let told = workers
        .wait_for(3 * SECOND, |l| {
            l.who == y && (is(l, "LOST") || is(l, "REFUSED"))
        })
        .expect("the resumed leader was told it lost");
    assert_eq!(term_of(&told), t2);
    if is(&told, "REFUSED") {
        // Told by the resource, not by the library: only right for a write that was already
        // past its check when the process froze.
        let ms: u128 = told.words[2].parse().unwrap();
        assert!(
            ms >= WORKER_LEASE.as_millis(),
            "the resumed leader wrote without being told it lost: {told:?}"
        );
    }

    // The resource: terms never went back, and nothing of term t2 was accepted after t3's
    // first write.
    std::thread::sleep(Duration::from_millis(300));
    let reader = support::connect(url).await;
    let log: Vec<String> = reader
        .query(
            redis::cmd("LRANGE")
                .arg(format!("{resource}:log"))
                .arg(0)
                .arg(-1),
        )
        .await
        .unwrap();
    let accepted: Vec<(u64, usize)> = log
        .iter()
        .map(|e| {
            let (term, who) = e.split_once(':').unwrap();
            (term.parse().unwrap(), who.parse().unwrap())
        })
        .collect();
    assert!(
        accepted.windows(2).all(|w| w[0].0 <= w[1].0),
        "accepted terms went back: {accepted:?}"
    );
    for (term, who) in [(t1, x), (t2, y), (t3, z)] {
        assert!(
            accepted.contains(&(term, who)),
            "term {term} of worker {who} wrote nothing: {accepted:?}"
        );
    }

    // The observer: every term, in order, each revision one more than the last.
    std::thread::sleep(Duration::from_millis(500));
    workers.drain();
    let changes: Vec<&Line> = workers
        .seen
        .iter()
        .filter(|l| l.who == observer && is(l, "CHANGE"))
        .collect();
    let mut revision = 0u64;
    let mut elected = Vec::new();
    for change in &changes {
        // CHANGE <revision> <cause> <term or -> <missed> <restarted>
        let rev: u64 = change.words[1].parse().unwrap();
        assert_eq!(rev, revision + 1, "revisions skip: {changes:?}");
        assert_eq!(change.words[4], "0", "a gap: {changes:?}");
        assert_eq!(change.words[5], "false", "a restart: {changes:?}");
        revision = rev;
        if change.words[2] == "elected" {
            elected.push(change.words[3].parse::<u64>().unwrap());
        }
    }
    assert_eq!(elected, [t1, t2, t3], "observed terms: {changes:?}");
}

/// With a lock-delay, a killed leader is replaced only after its lease and the delay: the
/// old leader's writes in flight land first. (A resignation still hands over at once: see
/// `a_resignation_hands_over_at_once_despite_a_lock_delay`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_the_next_leader_back_after_a_kill() {
    support::init_tracing();
    let server = Server::start();
    let name = unique_name("delay");
    let resource = unique_name("delay-resource");
    let delay = Duration::from_millis(1500);
    let mut env = candidate_env(&server.url(), &name, &resource, "candidate");
    env.push((
        "REDLEASE_WORKER_LOCK_DELAY_MS",
        delay.as_millis().to_string(),
    ));
    let mut workers = Workers::new();
    let a = workers.spawn(&env);
    let first = workers
        .wait_for(20 * SECOND, |l| l.who == a && is(l, "LEADING"))
        .expect("a leads");
    let b = workers.spawn(&env);
    std::thread::sleep(Duration::from_millis(1500));
    workers.kill(a);
    let killed_at = Instant::now();
    let second = workers
        .wait_for(WORKER_LEASE + delay + SECOND, |l| {
            l.who == b && is(l, "LEADING")
        })
        .expect("b leads after the lease and the delay");
    let took = killed_at.elapsed();
    eprintln!("took over {took:?} after kill -9 with a {delay:?} lock-delay");
    // The lease ran out between 2/3 of it and all of it after the kill; then the delay.
    assert!(
        took >= WORKER_LEASE * 2 / 3 + delay - Duration::from_millis(50),
        "b led {took:?} after the kill: the delay was not kept"
    );
    assert!(term_of(&second) > term_of(&first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_hands_over_at_once_despite_a_lock_delay() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("delay-resign");
    let delay = Duration::from_secs(10);
    let first = a
        .election(&name)
        .unwrap()
        .lock_delay(delay)
        .campaign("a")
        .await
        .unwrap();
    let election_b = b.election(&name).unwrap().lock_delay(delay);
    let waiting = tokio::spawn(async move { election_b.campaign("b").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.resign().await.unwrap();
    let second = tokio::time::timeout(2 * SECOND, waiting)
        .await
        .expect("b won at once")
        .unwrap()
        .unwrap();
    second.resign().await.unwrap();
}

/// Three processes take five terms each and increment a counter with a non-atomic GET/SET
/// while they lead: the counter counts every increment, and the terms strictly increase in
/// the order the resource accepted them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_take_turns_and_a_non_atomic_counter_counts_every_increment() {
    support::init_tracing();
    let server = Server::start();
    let name = unique_name("turns");
    let resource = unique_name("turns-resource");
    let mut workers = Workers::new();
    // A long lease: this test is about exclusion, and a worker stalled past a short lease on
    // a loaded machine would lose it (one did, with a 1 s lease, while other tests ran).
    let mut env = candidate_env(&server.url(), &name, &resource, "rounds");
    env.push(("REDLEASE_WORKER_LEASE_MS", "10000".into()));
    let all: Vec<usize> = (0..3).map(|_| workers.spawn(&env)).collect();
    for who in all {
        workers
            .wait_for(60 * SECOND, |l| l.who == who && is(l, "DONE"))
            .unwrap_or_else(|| panic!("worker {who} did not finish its rounds"));
    }
    assert_eq!(
        support::read_counter(&server, &format!("{resource}:count")),
        3 * 5 * 10
    );
    let log: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{resource}:log"))
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap();
    let terms: Vec<u64> = log
        .iter()
        .map(|e| e.split_once(':').unwrap().0.parse().unwrap())
        .collect();
    let mut distinct = terms.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 15, "fifteen terms: {terms:?}");
    assert!(
        distinct.windows(2).all(|w| w[0] < w[1]),
        "terms {distinct:?}"
    );
}

/// The child side of the multi-process tests; does nothing unless run as a worker.
#[test]
#[ignore = "run as a child process by the tests above"]
fn worker_process() {
    let Ok(mode) = std::env::var("REDLEASE_WORKER") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is set"));
    let url = var("REDLEASE_WORKER_URL");
    let name = var("REDLEASE_WORKER_NAME");
    let resource = var("REDLEASE_WORKER_RESOURCE");
    let who = var("REDLEASE_WORKER_WHO");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let lease = std::env::var("REDLEASE_WORKER_LEASE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(WORKER_LEASE, Duration::from_millis);
        let client = Client::builder(url.as_str())
            .watchdog_lease(lease)
            .build()
            .await
            .unwrap();
        let mut election = client.election(&name).unwrap();
        if let Some(ms) = std::env::var("REDLEASE_WORKER_LOCK_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
        {
            election = election.lock_delay(Duration::from_millis(ms));
        }
        let say = |line: String| {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{MARK}{line}");
            let _ = out.flush();
        };
        match mode.as_str() {
            "observer" => {
                let mut changes = election.observe();
                // Bounded: the test kills the observer long before.
                for _ in 0..10_000 {
                    let Some(change) = changes.next().await else {
                        return;
                    };
                    let change = change.unwrap();
                    let term = change
                        .leader
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |l| l.term.to_string());
                    let cause = change.cause.map_or("none", |c| c.as_str());
                    let kind = if change.initial { "INITIAL" } else { "CHANGE" };
                    say(format!(
                        "{kind} {} {cause} {term} {} {}",
                        change.revision, change.missed, change.restarted
                    ));
                }
            }
            "candidate" => {
                // Campaign, write with the term every 50 ms while leading; when lost, say so
                // and campaign again. Bounded: the test kills it long before.
                for _ in 0..100 {
                    let leadership = election.campaign(&who).await.unwrap();
                    let term = leadership.term();
                    say(format!("LEADING {term}"));
                    for _ in 0..100_000 {
                        if leadership.is_lost() {
                            say(format!("LOST {term}"));
                            break;
                        }
                        let checked = Instant::now();
                        if !fenced_write(&client, &resource, term, &who).await {
                            // How long since the check: a write frozen in flight took long.
                            let ms = checked.elapsed().as_millis();
                            say(format!("REFUSED {term} {ms}"));
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    drop(leadership);
                }
            }
            "rounds" => {
                let counter = format!("{resource}:count");
                for _ in 0..5 {
                    let leadership = election.campaign(&who).await.unwrap();
                    for _ in 0..10 {
                        support::increment_unprotected(&client, &counter).await;
                        assert!(fenced_write(&client, &resource, leadership.term(), &who).await);
                    }
                    if let Err(e) = leadership.resign().await {
                        panic!("worker {who} could not resign: {e}");
                    }
                }
                say("DONE".into());
            }
            other => panic!("unknown worker mode {other}"),
        }
    });
}

/// A term is over for every handle the moment its leader resigns or drops its leadership:
/// work handed to other tasks sees it lost, and no later than the resignation, before another
/// candidate can win. Before, a `Leading` kept reporting a valid term for up to a lease after
/// the next leader won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigned_term_is_over_for_every_handle() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = support::clients(&server).await;
    let name = unique_name("term-over");
    let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
    let leading = leadership.leading();
    let over = leading.lost();
    leadership.resign().await.unwrap();
    assert!(leading.is_lost(), "a resigned term still looks valid");
    assert!(leading.valid_until() <= Instant::now());
    let told = tokio::time::timeout(Duration::from_millis(200), over).await;
    assert!(told.is_ok(), "lost() did not resolve when the term ended");
    // Dropped rather than resigned: over by the time the next candidate wins.
    let dropped = a.election(&name).unwrap().campaign("a").await.unwrap();
    let leading = dropped.leading();
    drop(dropped);
    let next = b.election(&name).unwrap().campaign("b").await.unwrap();
    assert!(
        leading.is_lost(),
        "a dropped term still looks valid under the next leader"
    );
    assert!(leading.valid_until() <= Instant::now());
    next.resign().await.unwrap();
}

/// A leadership found lost and dropped before its monitor said so is recorded as lost, not as
/// a resignation: the monitor goes with it. (One thread: the monitor cannot run between the
/// renewal that finds the loss and the drop.)
#[tokio::test]
async fn a_lost_leadership_dropped_at_once_is_recorded_as_lost() {
    support::init_tracing();
    let server = Server::start();
    let a = support::client_with(&server, |b| b.loss_notice(false)).await;
    let operator = client(&server).await;
    let name = unique_name("lost-dropped");
    let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
    assert!(operator.lock(&name).unwrap().force_unlock().await.unwrap());
    assert_eq!(a.renew_now().await.unwrap().lost, 1);
    assert!(leadership.is_lost());
    drop(leadership);
    // The recording runs in the background, one round trip away (a status read before it
    // would find the lock free and record the term expired).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = operator.election(&name).unwrap().status().await.unwrap();
    assert_eq!(status.last_change, Some(ChangeCause::Lost));
}

/// The election's state can lose a live leader's record (a failover that lost the win's
/// write, or the key deleted): its leader records itself again, at its next `proclaim` and at
/// its monitor's first refresh a lease after the win, rather than staying invisible (no leader
/// for observers) and being told `LeaseLost` by `proclaim` while its lease holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_record_went_records_itself_again() {
    support::init_tracing();
    let server = Server::start();
    let a = client_with_lease(&server, Duration::from_millis(600)).await;
    let name = unique_name("record-again");
    let state = format!("{}:election", key_of(&name));
    let election = a.election(&name).unwrap();
    let leadership = election.campaign("a").await.unwrap();
    let forget = || {
        redis::cmd("DEL")
            .arg(&state)
            .query::<()>(&mut server.conn())
            .unwrap()
    };
    // Its monitor looks a lease after the win, without a call of the leader's.
    forget();
    assert_eq!(election.leader().await.unwrap(), None);
    let mut found = None;
    for _ in 0..40 {
        found = election.leader().await.unwrap();
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader = found.expect("the monitor never recorded the leader again");
    assert_eq!(leader.term, leadership.term());
    // And `proclaim` at once (the monitor's next look is 15 min away).
    forget();
    leadership.proclaim("a2").await.unwrap();
    let leader = election.leader().await.unwrap().expect("recorded again");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("a2", leadership.term())
    );
    assert!(!leadership.is_lost());
    leadership.resign().await.unwrap();
}

/// A rejoining `lead_with` with a zero retry pause is refused before it campaigns: while Redis
/// was down, each failed campaign came straight back and the next began at once, a loop without
/// a pause (one warning per turn). Before, it campaigned and ran the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_retry_pause_is_refused_before_campaigning() {
    let server = Server::start();
    let client = client(&server).await;
    let election = client.election(&unique_name("zero-pause")).unwrap();
    let options = LeadOptions::new().rejoin(true).retry_after(Duration::ZERO);
    let outcome = election.lead_with(options, "a", |_| async { 1 }).await;
    assert!(
        matches!(outcome, Err(redlease::Error::InvalidDuration { .. })),
        "{outcome:?}"
    );
    assert!(election.leader().await.unwrap().is_none());
    // Without `rejoin` the pause is never used, so any is fine.
    let once = LeadOptions::new().retry_after(Duration::ZERO);
    assert_eq!(
        election
            .lead_with(once, "a", |_| async { 2 })
            .await
            .unwrap(),
        2
    );
}

/// An election's records whose connection drops (the proxy cuts the request before the server,
/// `cut_at`, or forwards it and drops the reply, `cut_after`) are sent again: a campaign that won
/// the lock is recorded and returns its leadership, and a resignation is recorded as one, so
/// observers see `Resigned`. Before, `campaign` failed (and the won term was given back) and
/// `resign` failed, the next reader recording the term as `Expired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_records_whose_connection_drops_are_sent_again() {
    let server = Server::start();
    let proxy = support::proxy::Proxy::start(server.port()).await;
    let candidate = support::client_at(proxy.url(), |b| b).await;
    let watcher = client(&server).await;
    for forwarded in [false, true] {
        let name = unique_name("election-cut");
        let election = candidate.election(&name).unwrap();
        proxy.cut_op("won", forwarded);
        let leadership = election.campaign("a").await;
        let leadership =
            leadership.unwrap_or_else(|e| panic!("forwarded {forwarded}: campaign: {e}"));
        proxy
            .assert_cut(&format!("win's record, forwarded {forwarded}"))
            .await;
        let leader = watcher.election(&name).unwrap().leader().await.unwrap();
        let recorded = leader.map(|l| l.term);
        assert_eq!(recorded, Some(leadership.term()), "forwarded {forwarded}");
        proxy.cut_op("resign", forwarded);
        let resigned = leadership.resign().await;
        assert!(
            resigned.is_ok(),
            "forwarded {forwarded}: resign: {resigned:?}"
        );
        proxy
            .assert_cut(&format!("resignation's record, forwarded {forwarded}"))
            .await;
        let status = watcher.election(&name).unwrap().status().await.unwrap();
        let cause = status.last_change;
        assert_eq!(cause, Some(ChangeCause::Resigned), "forwarded {forwarded}");
    }
}
