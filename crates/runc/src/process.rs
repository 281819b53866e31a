//! Host-side handling of a sandbox's processes: killing a command's tree, killing a container's
//! init, and reaping what runc leaves to its caller's reaper.
//!
//! # Why we reap
//!
//! `runc run --detach` and `runc exec --detach` exit once their process has started, so the
//! container's init and each command's wrapper are orphaned: the kernel hands them to the
//! nearest child subreaper, else to the host's pid 1. Until that reaper collects a dead one, it
//! is a zombie, and a zombie command wrapper keeps its pid namespace alive: a killed
//! container's init cannot finish dying, so `runc delete` waits. With a prompt pid 1 (systemd)
//! that costs nothing; with a lazy one (some CI and container hosts reap every second or two) a
//! kill takes seconds, and where our own process is pid 1 (a container without an init)
//! nothing reaps at all. So the provider makes its process a child subreaper (see
//! [`become_subreaper`]) and reaps exactly the pids it knows are its own: never `waitpid(-1)`,
//! which would steal the exit statuses of children that tokio or others wait for.

use std::fs;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{
    kill_process, kill_process_group, set_child_subreaper, waitpid, Pid, Signal, WaitOptions,
};

use super::cgroup::ContainerCgroup;

/// Make this process the reaper of orphans among its descendants (`PR_SET_CHILD_SUBREAPER`).
/// Process-wide and inherited by nothing: it affects only orphans of our own descendants.
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    set_child_subreaper(Some(rustix::process::getpid())).map_err(Into::into)
}

/// Reap `pid` if it is our child and has exited, waiting up to `patience` for it to exit.
/// Not our child (made by an earlier process, or no subreaper): nothing to do.
pub(crate) fn reap(pid: i32, patience: Duration) {
    let Some(target) = Pid::from_raw(pid) else {
        return;
    };
    let deadline = Instant::now() + patience;
    loop {
        match waitpid(Some(target), WaitOptions::NOHANG) {
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Err(Errno::INTR) => continue,
            _ => return,
        }
    }
}

/// SIGKILL a container's init and wait until it is dead: reaped by us, or (not our child) a
/// zombie or gone. In a pid namespace the init only gets that far once every other process in
/// it has died. True if that happened within `limit`.
pub(crate) fn kill_and_wait(pid: i32, limit: Duration) -> bool {
    let Some(target) = Pid::from_raw(pid) else {
        return true;
    };
    let _ = kill_process(target, Signal::KILL);
    let deadline = Instant::now() + limit;
    loop {
        let dead = match waitpid(Some(target), WaitOptions::NOHANG) {
            Ok(Some(_)) => true,
            Ok(None) => false,
            Err(Errno::INTR) => continue,
            // Not our child: look at it instead.
            Err(_) => matches!(process_state(pid), None | Some('Z') | Some('X')),
        };
        if dead {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Kill a command's whole process tree: its process group, then anything in the container that
/// descends from the group's leader but left the group (a `setsid` child whose parent is still
/// alive). Repeated a few times, since a dying tree can still be forking.
pub(crate) fn kill_tree(leader: i32, cgroup: Option<&ContainerCgroup>) {
    let Some(leader_pid) = Pid::from_raw(leader) else {
        return;
    };
    // ESRCH: the group is already gone, which is what we want.
    let _ = kill_process_group(leader_pid, Signal::KILL);
    let Some(cgroup) = cgroup else {
        return;
    };
    for _ in 0..5 {
        let Ok(procs) = cgroup.procs() else {
            return;
        };
        let stats: Vec<(i32, i32, i32)> = procs
            .iter()
            .filter(|&&pid| pid != cgroup.init_pid)
            .filter_map(|&pid| parent_and_group(pid).map(|(ppid, pgid)| (pid, ppid, pgid)))
            .collect();
        let mut doomed = vec![leader];
        let mut grew = true;
        while grew {
            grew = false;
            for &(pid, ppid, pgid) in &stats {
                if !doomed.contains(&pid) && (pgid == leader || doomed.contains(&ppid)) {
                    doomed.push(pid);
                    grew = true;
                }
            }
        }
        let alive: Vec<Pid> = doomed
            .into_iter()
            .filter(|pid| stats.iter().any(|s| s.0 == *pid))
            .filter_map(Pid::from_raw)
            .collect();
        if alive.is_empty() {
            return;
        }
        for pid in alive {
            let _ = kill_process(pid, Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The state letter of `/proc/<pid>/stat` (R, S, Z...), `None` if there is no such process.
fn process_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// `(ppid, pgid)` from `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so parse from the last `)`.
fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some((ppid, pgid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_stat_parses() {
        let me = std::process::id() as i32;
        let (ppid, _pgid) = parent_and_group(me).unwrap();
        assert_eq!(ppid, std::os::unix::process::parent_id() as i32);
        assert!(matches!(process_state(me), Some('R') | Some('S')));
    }

    #[test]
    // Reaping the child is what is under test, so it is not waited for here.
    #[allow(clippy::zombie_processes)]
    fn a_killed_child_is_reaped() {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(kill_and_wait(pid, Duration::from_secs(5)));
        // Reaped by kill_and_wait: no zombie is left behind.
        assert_eq!(process_state(pid), None);
    }
}
