//! The command line: subcommands, options and their help texts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Used when neither `--url` nor `$REDIS_URL` is given.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

const MAIN_EXAMPLES: &str = "\
Examples:
  # Run a nightly job at most once at a time across the fleet:
  redlease run nightly-report -- ./report.sh --date today

  # Run the scheduler on one host at a time; another takes over when it dies:
  redlease elect --rejoin scheduler -- ./scheduler

  # Who holds it, and for how long:
  redlease status nightly-report

  # Free a lock whose holder is stuck (the holder is stopped at its next renewal):
  redlease unlock --force nightly-report

  # Over TLS, trusting a private CA (add --tls-cert/--tls-key for mutual TLS):
  redlease status --url rediss://redis.internal:6380 --tls-ca ca.crt nightly-report

The Redis URL comes from --url, else $REDIS_URL, else redis://127.0.0.1:6379.
Several --url options name independent masters and use the Redlock algorithm.";

const RUN_EXAMPLES: &str = "\
Examples:
  # Wait as long as it takes, then run the migration under the lock:
  redlease run db-migrate -- ./migrate.sh up

  # Cron: skip this run if another host is still busy (exit 75):
  redlease run --wait 0 nightly-report -- ./report.sh

  # Cron on every host of a fleet, clocks a few seconds apart: the job runs once per round,
  # and the hosts that find the lock taken exit 75 without a word (so cron mails nothing):
  redlease run --wait 0 --quiet --hold-at-least 5m nightly-report -- ./report.sh

  # Give up after 2 minutes; renew a 10 s lease every ~3 s while it runs:
  redlease run --wait 2m --lease 10s import -- python3 import.py

  # Hand a fencing token to the job; the storage rejects writes with older tokens:
  redlease run --fenced orders-export -- sh -c 'export.sh --token \"$REDLEASE_TOKEN\"'

  # Redlock over three independent masters:
  redlease run --url redis://a:6379 --url redis://b:6379 --url redis://c:6379 job -- ./job.sh

Environment of the command:
  REDLEASE_LOCK   the lock name
  REDLEASE_TOKEN  the fencing token (only with --fenced): server microseconds, such as
                  1796468123456789; store it in a 64-bit integer (BIGINT)

Exit status:
  the command's own status (128+N when it was killed by signal N), or
  64  usage error            65  the lock key holds another Redis type
  69  Redis unreachable, or refused us (auth, replica), or no majority of --url nodes
  70  the lease was lost while the command ran; it was stopped
  71  internal error         75  the lock was not acquired within --wait (silent with --quiet)
  76  Redis sent a reply this version does not understand
  77  the Redis user (ACL) lacks a right redlease needs; the message names it
  78  the TLS handshake failed (untrusted server certificate, refused client certificate)
  126 the command could not be executed    127 the command was not found";

const STATUS_EXAMPLES: &str = "\
Examples:
  redlease status nightly-report
  redlease status --json nightly-report | jq .held
  REDIS_URL=redis://cache:6379/2 redlease status --prefix myapp orders:42

Exit status: 0 when the lock could be inspected (held or free), 69 when Redis is unreachable.";

const UNLOCK_EXAMPLES: &str = "\
Examples:
  redlease unlock --force nightly-report
  redlease unlock --force --url redis://a:6379 --url redis://b:6379 --url redis://c:6379 job

The holder is not told at once: its watchdog finds the lock gone at the next renewal (within a
third of its lease), and `redlease run` then stops its command and exits 70. A fenced lock's
counter is kept, so the next holder still gets a greater token.";

const LIST_EXAMPLES: &str = "\
Examples:
  redlease list
  redlease list 'orders:*'
  redlease list --json | jq '.locks[] | {name, host: .holders[0].client.host}'

Scans the server (every primary of a cluster) for held locks; on a busy server the scan is
not a snapshot. Exit status: 0, or 69 when Redis is unreachable.";

const WATCH_EXAMPLES: &str = "\
Examples:
  redlease watch nightly-report
  redlease watch --json --count 2 nightly-report    # stop after two events

The first line is the state at the start (free or held); then one line per change, seen by
looking every --interval. A lease that expires shows as `released`: from outside, a lost
lease and a release look the same. Exit status: 0, or 69 when Redis is unreachable.";

const ELECT_EXAMPLES: &str = "\
Examples:
  # Run the scheduler on exactly one host; the others stand by and take over:
  redlease elect --value \"$(hostname):8080\" scheduler -- ./scheduler

  # Stand by again after losing the leadership (the command is stopped each time):
  redlease elect --rejoin --lease 10s compactor -- ./compact --loop

  # Pass the term to the command's writes, so storage refuses a deposed leader's:
  redlease elect reports -- sh -c 'report.sh --fence \"$REDLEASE_TERM\"'

Environment of the command:
  REDLEASE_ELECTION  the election's name
  REDLEASE_TERM      the term: greater than every earlier leader's (a fencing token, such
                     as 1796468123456789; store it in a 64-bit integer, BIGINT)
  REDLEASE_LOCK, REDLEASE_TOKEN  the same, as `redlease run --fenced` names them

Exit status:
  the command's own status (128+N when it was killed by signal N), or
  70  the leadership was lost while the command ran (without --rejoin); it was stopped
  64, 65, 69, 71, 76, 77, 78, 126, 127 as for `redlease run`";

const LEADER_EXAMPLES: &str = "\
Examples:
  redlease leader scheduler
  redlease leader --json scheduler | jq -r .leader.value

Exit status: 0 when the election could be read (with or without a leader), 69 when Redis is
unreachable.";

const OBSERVE_EXAMPLES: &str = "\
Examples:
  redlease observe scheduler
  redlease observe --json --count 2 scheduler    # the state now, then the next change

The first line is the state at the start; then one line per change (elected, proclaimed,
resigned, lost, expired), woken by the election's messages. A line says so when changes were
missed. Exit status: 0, or 69 when Redis is unreachable at the start.";

/// Distributed locks on Redis from the shell: run a command under a lock, inspect or free one.
#[derive(Debug, Parser)]
#[command(name = "redlease", version, after_help = MAIN_EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lock; exit with the command's status.
    ///
    /// Waits for the lock (forever unless --wait), runs COMMAND with the lock held, keeps the
    /// lease renewed while it runs, and releases the lock when it exits. If the lease is lost
    /// (Redis unreachable past the lease, the key deleted or expired), the command gets SIGTERM,
    /// then SIGKILL after --grace, and redlease exits 70.
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Show whether a lock is held, by whom, for how long, and its fencing counter.
    #[command(after_help = STATUS_EXAMPLES)]
    Status(StatusArgs),
    /// Delete a lock whoever holds it (for operators).
    #[command(after_help = UNLOCK_EXAMPLES)]
    Unlock(UnlockArgs),
    /// List the locks held now: holder (host, pid, program), holds, lease left, waiting
    /// clients, fence.
    #[command(after_help = LIST_EXAMPLES)]
    List(ListArgs),
    /// Print one line per change of a lock's state (held, released, handed over, recounted).
    #[command(after_help = WATCH_EXAMPLES)]
    Watch(WatchArgs),
    /// Run a command only while this process leads an election; stand by until then.
    ///
    /// Campaigns for the election NAME (waiting, without polling, while another process
    /// leads), runs COMMAND while leading with the term in $REDLEASE_TERM, and resigns when it
    /// exits, which hands over to the next candidate at once. If the leadership is lost, the
    /// command gets SIGTERM, then SIGKILL after --grace; with --rejoin redlease then campaigns
    /// again and runs the command anew in its next term.
    #[command(after_help = ELECT_EXAMPLES)]
    Elect(ElectArgs),
    /// Show who leads an election: value, term, host, pid, program.
    #[command(after_help = LEADER_EXAMPLES)]
    Leader(LeaderArgs),
    /// Print one line per change of an election's leader, as it happens.
    #[command(after_help = OBSERVE_EXAMPLES)]
    Observe(ObserveArgs),
}

/// Where the locks live; shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Redis URL (redis://[user:pass@]host:port[/db]); repeat for Redlock over independent
    /// masters. Defaults to $REDIS_URL, else redis://127.0.0.1:6379.
    #[arg(long = "url", value_name = "URL")]
    pub urls: Vec<String>,
    /// Prefix of the lock's Redis keys.
    #[arg(
        long,
        value_name = "PREFIX",
        env = "REDLEASE_PREFIX",
        default_value = "redlease"
    )]
    pub prefix: String,
    /// Limit for connecting and for each Redis round trip (not for waiting for the lock: that
    /// is `run --wait`).
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = parse_positive)]
    pub redis_timeout: Duration,
    /// Wait by polling (pauses from 5 ms up to 500 ms) instead of pub/sub, for proxies and
    /// services without SUBSCRIBE.
    #[arg(long, env = "REDLEASE_POLL")]
    pub poll: bool,
    /// Take (and renew) the lock only once replicas acknowledged it (WAIT): `off`, `N` replicas,
    /// or `auto` (every replica connected), each with an optional `:DUR` timeout (default
    /// 100ms), e.g. `1:50ms`. Too few acknowledgements give the lock back and fail (exit 69).
    #[arg(
        long,
        value_name = "SPEC",
        env = "REDLEASE_REPLICAS",
        default_value = "off",
        value_parser = parse_replicas
    )]
    pub replicas: redlease::Replicas,
    /// Trust the CA certificate(s) in this PEM file for `rediss://` URLs, instead of the
    /// system's trust store.
    #[arg(long, value_name = "FILE", env = "REDLEASE_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Present this client certificate (PEM, with --tls-key) to servers that require one.
    #[arg(
        long,
        value_name = "FILE",
        env = "REDLEASE_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        env = "REDLEASE_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
}

impl Target {
    /// The URLs to use: `--url`s, else `$REDIS_URL`, else [`DEFAULT_URL`].
    pub fn urls(&self) -> Vec<String> {
        if !self.urls.is_empty() {
            return self.urls.clone();
        }
        match std::env::var("REDIS_URL") {
            Ok(url) if !url.trim().is_empty() => vec![url.trim().to_owned()],
            _ => vec![DEFAULT_URL.to_owned()],
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: Target,
    /// Give up when the lock is not acquired within DUR (exit 75); 0 tries once. Default: wait
    /// forever. `-w` and `--timeout` as in flock(1).
    #[arg(
        short = 'w',
        long,
        visible_alias = "timeout",
        value_name = "DUR",
        value_parser = parse_duration
    )]
    pub wait: Option<Duration>,
    /// Lease of the lock, renewed every third of it while the command runs. A paused or killed
    /// redlease frees the lock at most this long after its last renewal.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_lease)]
    pub lease: Duration,
    /// After a lost lease, how long the command may take to exit after SIGTERM before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Hand out a fencing token in $REDLEASE_TOKEN: greater than every earlier token of this
    /// lock name (server microseconds, ~1.8e15: a 64-bit integer).
    #[arg(long)]
    pub fenced: bool,
    /// After a lease that ran out without a release (redlease killed or paused), keep the lock
    /// refused for DUR more, so the old command's writes in flight land first. Every run of
    /// this lock should pass the same value. Default: none.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub lock_delay: Option<Duration>,
    /// Keep the command in redlease's process group, so it can read the terminal. Then SIGINT
    /// and SIGQUIT are not forwarded (the terminal sends them to the command itself), and only
    /// the command, not its children, is signalled when the lease is lost. On by itself when
    /// redlease runs in the foreground of a terminal.
    #[arg(long)]
    pub foreground: bool,
    /// Keep the lock until DUR after it was acquired, even if the command ended sooner
    /// (ShedLock's lockAtLeastFor): a fleet whose crons fire a little apart runs a short job
    /// once. After the command exits, redlease waits with the lock held until then, releases
    /// it and exits with the command's status.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub hold_at_least: Option<Duration>,
    /// Print nothing when the lock is busy (not acquired within --wait): just exit 75, so
    /// cron mails nothing. Other failures are still reported.
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Report acquisition, token and release on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// Name of the lock.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The command and its arguments (put `--` before it when it starts with `-`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Name of the lock.
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    pub target: Target,
    /// Required: delete the lock even though this process does not hold it.
    #[arg(long, required = true)]
    pub force: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Name of the lock.
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// List at most N locks.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,
    /// Only locks whose names match this glob (`*`, `?`, `[abc]`).
    #[arg(value_name = "PATTERN", default_value = "*")]
    pub pattern: String,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print one JSON object per event instead of text.
    #[arg(long)]
    pub json: bool,
    /// Time between two looks at the lock.
    #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = parse_positive)]
    pub interval: Duration,
    /// Stop after N events (the first line counts).
    #[arg(long, value_name = "N")]
    pub count: Option<usize>,
    /// Stop after DUR. Default: until Ctrl-C.
    #[arg(long = "for", value_name = "DUR", value_parser = parse_positive)]
    pub duration: Option<Duration>,
    /// Name of the lock.
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    #[command(flatten)]
    pub target: Target,
    /// The value this candidate publishes while it leads (an address, an id), for
    /// `redlease leader` and observers.
    #[arg(long, value_name = "VALUE", default_value = "")]
    pub value: String,
    /// Lease of the leadership, renewed every third of it. A leader that dies (or freezes) is
    /// replaced at most this long after its last renewal.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_lease)]
    pub lease: Duration,
    /// After losing the leadership, campaign again and rerun the command when leading again.
    #[arg(long)]
    pub rejoin: bool,
    /// After a leader whose lease ran out without resigning (it crashed or froze), keep the
    /// election closed for DUR more, so the old command's writes in flight land first. Every
    /// candidate should pass the same value. Default: none.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub lock_delay: Option<Duration>,
    /// After a lost leadership, how long the command may take to exit after SIGTERM before
    /// SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Keep the command in redlease's process group (see `redlease run --foreground`).
    #[arg(long)]
    pub foreground: bool,
    /// Report terms won, lost and resigned on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// Name of the election.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The command and its arguments (put `--` before it when it starts with `-`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Name of the election.
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct ObserveArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print one JSON object per change instead of text.
    #[arg(long)]
    pub json: bool,
    /// Stop after N lines (the first line counts).
    #[arg(long, value_name = "N")]
    pub count: Option<usize>,
    /// Stop after DUR. Default: until Ctrl-C.
    #[arg(long = "for", value_name = "DUR", value_parser = parse_positive)]
    pub duration: Option<Duration>,
    /// Name of the election.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// A human duration: `500ms`, `30s`, `2m`, `1h 30m`; a bare `0` is zero.
/// A duration flag, at most the library's bound on every duration (365 days): a longer one
/// would be refused by the library or overflow a clock (`--grace`, `watch --for`: a panic).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(text.trim()).map_err(|e| format!("{e} (try 500ms, 30s, 2m)"))?;
    if d > redlease::MAX_DURATION {
        return Err(format!(
            "must be at most {}",
            humantime::format_duration(redlease::MAX_DURATION)
        ));
    }
    Ok(d)
}

fn parse_positive(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// The watchdog renews every third of the lease; below this it cannot keep up with Redis
/// round trips and scheduling delays.
const MIN_LEASE: Duration = Duration::from_millis(100);

fn parse_lease(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < MIN_LEASE {
        return Err(format!(
            "must be at least {}",
            humantime::format_duration(MIN_LEASE)
        ));
    }
    Ok(d)
}

/// `off`, `auto[:DUR]` or `N[:DUR]` (N ≥ 1; DUR > 0, default 100ms).
fn parse_replicas(text: &str) -> Result<redlease::Replicas, String> {
    use redlease::Replicas;
    let (what, timeout) = match text.split_once(':') {
        Some((what, dur)) => (what, parse_positive(dur)?),
        None => (text, Duration::from_millis(100)),
    };
    match what {
        "off" if text == "off" => Ok(Replicas::Off),
        "auto" => Ok(Replicas::Auto { timeout }),
        n => match n.parse::<u32>() {
            Ok(replicas) if replicas > 0 => Ok(Replicas::Wait { replicas, timeout }),
            _ => Err("expected off, auto[:DUR] or a replica count N[:DUR] (N >= 1)".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_are_human() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("30").is_err());
        assert!(parse_lease("50ms").is_err());
        assert!(parse_positive("0s").is_err());
    }

    /// A huge duration is refused at parsing: `--hold-at-least`, `--grace` and `watch --for`
    /// overflowed the clock (a panic; after a lost lock, `--grace`'s left the command running).
    #[test]
    fn durations_are_bounded() {
        assert_eq!(parse_duration("365days"), Ok(redlease::MAX_DURATION));
        assert!(parse_duration("366days").is_err());
        assert!(parse_positive("18446744073709551615s").is_err());
        for (sub, flag) in [
            ("run", "--hold-at-least"),
            ("run", "--grace"),
            ("elect", "--grace"),
        ] {
            let cli = Cli::try_parse_from(["redlease", sub, flag, "500000000years", "L", "true"]);
            assert!(cli.is_err(), "{sub} {flag}");
        }
        let cli = Cli::try_parse_from(["redlease", "watch", "--for", "500000000years", "L"]);
        assert!(cli.is_err(), "watch --for");
    }

    #[test]
    fn run_takes_the_command_after_the_name() {
        let cli = Cli::try_parse_from([
            "redlease", "run", "--wait", "1s", "L", "--", "sh", "-c", "exit 3",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.name, "L");
        assert_eq!(run.wait, Some(Duration::from_secs(1)));
        assert_eq!(run.command, ["sh", "-c", "exit 3"]);
    }

    #[test]
    fn run_accepts_a_command_without_double_dash() {
        let cli = Cli::try_parse_from(["redlease", "run", "L", "ls", "-l"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["ls", "-l"]);
    }

    #[test]
    fn replicas_are_off_auto_or_a_count() {
        use redlease::Replicas;
        let ms = Duration::from_millis;
        assert_eq!(parse_replicas("off"), Ok(Replicas::Off));
        assert_eq!(
            parse_replicas("auto"),
            Ok(Replicas::Auto { timeout: ms(100) })
        );
        assert_eq!(
            parse_replicas("2:50ms"),
            Ok(Replicas::Wait {
                replicas: 2,
                timeout: ms(50)
            })
        );
        for bad in ["0", "1:0s", "off:1s", "many", "1:"] {
            assert!(parse_replicas(bad).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from(["redlease", "run", "--replicas", "auto", "L", "true"]);
        let Command::Run(run) = cli.unwrap().command else {
            panic!("not run")
        };
        assert_eq!(run.target.replicas, Replicas::Auto { timeout: ms(100) });
    }

    #[test]
    fn elect_takes_options_then_the_command() {
        let cli = Cli::try_parse_from([
            "redlease", "elect", "--value", "a:1", "--lease", "2s", "--rejoin", "E", "--", "sh",
            "-c", "exit 3",
        ])
        .unwrap();
        let Command::Elect(elect) = cli.command else {
            panic!("not elect")
        };
        assert_eq!((elect.name.as_str(), elect.value.as_str()), ("E", "a:1"));
        assert_eq!(elect.lease, Duration::from_secs(2));
        assert!(elect.rejoin);
        assert_eq!(elect.command, ["sh", "-c", "exit 3"]);
        assert!(Cli::try_parse_from(["redlease", "elect", "E"]).is_err());
    }

    #[test]
    fn unlock_requires_force() {
        assert!(Cli::try_parse_from(["redlease", "unlock", "L"]).is_err());
        assert!(Cli::try_parse_from(["redlease", "unlock", "--force", "L"]).is_ok());
    }

    /// `--timeout` bounds the wait for the lock, as flock's does; the Redis round trip has its
    /// own name, so a flock user's `--timeout 10s` never means "wait forever".
    #[test]
    fn timeout_means_the_wait_and_redis_timeout_the_round_trip() {
        for flag in ["-w", "--wait", "--timeout"] {
            let cli = Cli::try_parse_from(["redlease", "run", flag, "10s", "L", "true"]).unwrap();
            let Command::Run(run) = cli.command else {
                panic!("not run")
            };
            assert_eq!(run.wait, Some(Duration::from_secs(10)), "{flag}");
            assert_eq!(run.target.redis_timeout, Duration::from_secs(2), "{flag}");
        }
        let cli =
            Cli::try_parse_from(["redlease", "status", "--redis-timeout", "5s", "L"]).unwrap();
        let Command::Status(status) = cli.command else {
            panic!("not status")
        };
        assert_eq!(status.target.redis_timeout, Duration::from_secs(5));
        assert!(Cli::try_parse_from(["redlease", "status", "--timeout", "5s", "L"]).is_err());
    }
}
