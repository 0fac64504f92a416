//! `redlease`: distributed locks on Redis from the shell.
//!
//! `redlease run NAME -- CMD` runs a command while holding a lock (renewed by the watchdog,
//! stopped when the lease is lost), `status` shows a lock, `unlock --force` frees one;
//! `redlease elect NAME -- CMD` runs a command only while leading an election, `leader` and
//! `observe` show who leads. See
//! `redlease --help` and `docs/cli.md`.

#[cfg(not(unix))]
compile_error!("the redlease command needs Unix signals and process groups");

mod args;
mod child;
mod elect;
mod exit;
mod holder;
mod leader;
mod list;
mod nodes;
mod output;
mod run;
mod signals;
mod status;
mod tls;
mod unlock;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" that print to stdout and succeed.
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_tracing();
    // One thread: the command is spawned from it, and the kernel's parent-death signal (see
    // child.rs) is tied to the thread that spawned.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redlease: cannot start the async runtime: {e}");
            return ExitCode::from(exit::INTERNAL);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Unlock(args) => unlock::unlock(args).await,
            Command::List(args) => list::list(args).await,
            Command::Watch(args) => watch::watch(args).await,
            Command::Elect(args) => elect::elect(args).await,
            Command::Leader(args) => leader::leader(args).await,
            Command::Observe(args) => leader::observe(args).await,
        }
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("redlease: {}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}

/// Library diagnostics on stderr when `REDLEASE_LOG` asks for them; silent by default, since
/// redlease reports what matters. `REDLEASE_LOG=debug` prints one line per finished acquire,
/// watchdog renewal round and release (the library's spans, with their fields and timings),
/// plus retries and warnings.
fn init_tracing() {
    let Ok(filter) = std::env::var("REDLEASE_LOG") else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .init();
}
