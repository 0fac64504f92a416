//! CPU placement of the redis-servers and the measuring processes.
//!
//! Unpinned, on a 2-vCPU VM, a whole run sometimes comes out 4-6× slower than
//! the next: when client and server threads sit on different vCPUs, every
//! hop of a round trip waits for an idle vCPU to wake up (~40-50 µs here).
//! `Same` (the default) puts everything on one CPU: hops are context switches,
//! runs agree within a few percent, and the client's own CPU time shows in
//! full. `Split` gives the servers one CPU and the clients the others.

use std::io;

/// CPUs this process may run on.
fn allowed() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is valid; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size is that of `set`.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads within the set for cpu < CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Restricts the calling thread (and what it spawns afterwards) to `cpus`.
pub fn pin(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: as above; CPU_SET writes within the set for cpu < CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is this thread; the size is that of `set`.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Placement {
    Same,
    Split,
    None,
}

/// (server CPUs, client CPUs) for `placement`, or None for no pinning.
pub fn cpus(placement: Placement) -> Option<(Vec<usize>, Vec<usize>)> {
    let cpus = allowed().ok()?;
    let last = *cpus.last()?;
    match placement {
        Placement::Same => Some((vec![last], vec![last])),
        Placement::Split if cpus.len() >= 2 => Some((cpus[..1].to_vec(), cpus[1..].to_vec())),
        Placement::Split | Placement::None => None,
    }
}
