//! Starting the command and signalling it.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use humantime::format_duration;

use crate::exit::{self, Failure};
use crate::signals;

/// The command, running.
pub struct Child {
    process: tokio::process::Child,
    pid: i32,
    /// True when the command leads its own process group, so signals reach its children too.
    group: bool,
}

/// What the command is started with.
pub struct Launch<'a> {
    pub command: &'a [OsString],
    pub lock: &'a str,
    pub token: Option<u64>,
    /// More variables for the command's environment (`redlease elect`: the term).
    pub env: &'a [(&'a str, String)],
    /// Keep the command in our process group (it may then use the terminal).
    pub foreground: bool,
}

impl Launch<'_> {
    pub fn spawn(&self) -> Result<Child, Failure> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| Failure::new(exit::USAGE, "no command given"))?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).env("REDLEASE_LOCK", self.lock);
        match self.token {
            Some(token) => cmd.env("REDLEASE_TOKEN", token.to_string()),
            // A token inherited from an outer `redlease run --fenced` belongs to another lock.
            None => cmd.env_remove("REDLEASE_TOKEN"),
        };
        for (key, value) in self.env {
            cmd.env(key, value);
        }
        if !self.foreground {
            cmd.process_group(0);
        }
        stop_with_parent(&mut cmd);
        let process = cmd.spawn().map_err(|e| {
            let shown = program.to_string_lossy();
            match e.kind() {
                io::ErrorKind::NotFound => {
                    Failure::new(exit::NOT_FOUND, format!("{shown}: command not found"))
                }
                _ => Failure::new(exit::CANNOT_EXECUTE, format!("cannot run {shown}: {e}")),
            }
        })?;
        let pid = process
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| Failure::new(exit::INTERNAL, "the command's pid is unknown"))?;
        Ok(Child {
            process,
            pid,
            group: !self.foreground,
        })
    }
}

impl Child {
    /// Sends `signal` to the command (and, unless `--foreground`, to its process group).
    /// Call only before [`Child::wait`] has returned: after that the pid may be reused.
    pub fn signal(&self, signal: i32) {
        if let Err(e) = signals::send(self.pid, self.group, signal) {
            eprintln!(
                "redlease: could not send {} to the command (pid {}): {e}",
                signals::name(signal),
                self.pid
            );
        }
    }

    /// After the command exited: SIGKILL whatever is left of its process group (children
    /// that ignored SIGTERM). The group id cannot be reused while any member lives.
    pub fn kill_leftovers(&self) {
        if self.group {
            let _ = signals::send(self.pid, true, libc::SIGKILL);
        }
    }

    /// Waits for the command to exit. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.process.wait().await
    }
}

/// Whether redlease runs in the foreground of a terminal (stdin is a terminal whose foreground
/// process group is ours): then the command must stay in our group, or it would be stopped by
/// SIGTTIN the moment it reads the terminal.
pub fn in_terminal_foreground() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read process state.
    unsafe {
        libc::isatty(libc::STDIN_FILENO) == 1
            && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp()
    }
}

/// If redlease dies without a chance to stop the command (SIGKILL, a crash), the command gets
/// SIGTERM from the kernel, so it does not go on after the lease has expired.
#[cfg(target_os = "linux")]
fn stop_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then nobody would tell us.
            if libc::getppid() != parent {
                // from_raw_os_error does not allocate (malloc is unsafe after fork).
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn stop_with_parent(_cmd: &mut tokio::process::Command) {}

/// What happened while the command ran.
pub struct Outcome {
    pub status: io::Result<ExitStatus>,
    /// Set when what the command ran under was lost: the signal that stopped it.
    pub stopped_with: Option<i32>,
}

/// Waits for the command, forwarding signals, and stops it when `lost` resolves: SIGTERM (after
/// printing `why`), then SIGKILL if it has not exited within `grace`. Shared by `run` (a lost
/// lease) and `elect` (a lost leadership).
pub async fn supervise(
    child: &mut Child,
    incoming: &mut signals::Incoming,
    foreground: bool,
    grace: Duration,
    lost: impl Future<Output = ()>,
    why: impl Fn() -> String,
) -> Outcome {
    tokio::pin!(lost);
    let mut stopped_with = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let status = loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => break status,
            () = &mut lost, if stopped_with.is_none() => {
                eprintln!("redlease: {}; stopping the command with SIGTERM", why());
                child.signal(libc::SIGTERM);
                stopped_with = Some(libc::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + grace);
            }
            () = kill_timer => {
                eprintln!(
                    "redlease: the command did not exit within {} of SIGTERM; sending SIGKILL",
                    format_duration(grace)
                );
                child.signal(libc::SIGKILL);
                stopped_with = Some(libc::SIGKILL);
                kill_at = None;
            }
            signal = incoming.recv() => {
                if signals::should_forward(signal, foreground) {
                    child.signal(signal);
                }
            }
        }
    };
    Outcome {
        status,
        stopped_with,
    }
}
