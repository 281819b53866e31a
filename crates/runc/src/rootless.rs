//! Rootless mode: the provider run by an ordinary user, as on a developer's laptop.
//!
//! runc runs unprivileged (`runc` notices a non-root caller and works rootless), inside a user
//! namespace it makes itself that maps one id, the caller's: runc needs the sandbox's root
//! mapped, and an unprivileged process may map only its own id (subordinate ranges through
//! `newuidmap` would put the root elsewhere, where runc cannot chown its files). So the sandbox's
//! user is its namespace's uid 0, named `user`, with no capabilities and no new privileges: it
//! owns its home and nothing of the host's (every other host id shows as `nobody`). What root
//! gives and rootless cannot, and what stands in for it:
//!
//! - **cgroups**: none (a cgroup subtree delegated to the user would allow limits; the provider
//!   does not set one up), so no memory, CPU or process limits, and no cgroup freezer. Pause
//!   stops every process of the sandbox with `SIGSTOP` instead ([`stop_all`]), and resume
//!   continues them; a marker file says the sandbox is paused, since runc still sees it
//!   running.
//! - **mounts on the host**: none, so no disk quota (the home is a plain directory) and the
//!   root filesystem is a plain directory rather than a tmpfs of its own.
//! - **host ids**: every sandbox's user is the caller, so sandboxes are not apart from each
//!   other by host uid (the namespaces still keep them apart).
//!
//! [`WEAKER`] says this to the user (the `threadbox dev` banner, `docs/runc.md`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a rootless sandbox lacks, one line each, for banners and docs.
pub const WEAKER: &[&str] = &[
    "no memory, CPU or process-count limits (no cgroups without root)",
    "pause stops processes with SIGSTOP instead of the cgroup freezer",
    "no disk quota (a plain directory for /home/user)",
    "every sandbox's user is your uid on the host, and uid 0 (without capabilities) inside",
];

/// Whether this process runs rootless.
pub fn is_rootless() -> bool {
    !rustix::process::geteuid().is_root()
}

/// Can an unprivileged process here make the user namespace a rootless sandbox needs? `Err`
/// says why not, naming the setting.
pub fn check_host() -> Result<(), String> {
    check_host_at(Path::new("/proc/sys"))
}

fn check_host_at(proc_sys: &Path) -> Result<(), String> {
    let read = |name: &str| {
        fs::read_to_string(proc_sys.join(name))
            .ok()
            .map(|v| v.trim().to_owned())
    };
    if read("kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Err("this kernel forbids unprivileged user namespaces \
                    (sysctl kernel.unprivileged_userns_clone=0)"
            .into());
    }
    if read("user/max_user_namespaces").as_deref() == Some("0") {
        return Err(
            "this host allows no user namespaces (sysctl user.max_user_namespaces=0)".into(),
        );
    }
    if read("kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Err("AppArmor restricts unprivileged user namespaces here \
                    (sysctl kernel.apparmor_restrict_unprivileged_userns=1)"
            .into());
    }
    Ok(())
}

/// Where the pause markers live: one empty file per paused sandbox.
pub fn paused_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("paused")
}

/// Host pids of every process in the pid namespace whose init is `init` (init included).
fn processes_of(init: i32) -> io::Result<Vec<i32>> {
    let namespace = fs::read_link(format!("/proc/{init}/ns/pid"))?;
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let Some(pid) = entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        else {
            continue;
        };
        // Processes of other users cannot be read; they are not the sandbox's.
        if fs::read_link(format!("/proc/{pid}/ns/pid")).ok().as_ref() == Some(&namespace) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// The state letter of `/proc/<pid>/stat` (after the command name, which may hold anything);
/// `None` once the process is gone.
fn state_of(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rfind(')')?;
    stat[after + 1..].trim_start().chars().next()
}

fn signal(pid: i32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        // Gone meanwhile is fine: there is nothing left to stop.
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Stop every process of the sandbox whose init is `init`, until none is left running: a
/// process that forks while the others stop is caught by the next round.
pub fn stop_all(init: i32) -> io::Result<()> {
    for _ in 0..200 {
        let mut running = 0;
        for pid in processes_of(init)? {
            // T: stopped; t: stopped by a tracer; Z and X: dead, nothing to stop.
            if !matches!(state_of(pid), None | Some('T' | 't' | 'Z' | 'X')) {
                running += 1;
                signal(pid, rustix::process::Signal::STOP);
            }
        }
        if running == 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Err(io::Error::other(
        "the sandbox's processes kept multiple stops from settling; it was left running",
    ))
}

/// Continue every process of the sandbox whose init is `init`.
pub fn continue_all(init: i32) -> io::Result<()> {
    for pid in processes_of(init)? {
        signal(pid, rustix::process::Signal::CONT);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_check_names_the_setting_that_forbids_user_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_host_at(dir.path()).is_ok(), "nothing set: allowed");
        fs::create_dir_all(dir.path().join("kernel")).unwrap();
        fs::write(dir.path().join("kernel/unprivileged_userns_clone"), "0\n").unwrap();
        let why = check_host_at(dir.path()).unwrap_err();
        assert!(why.contains("unprivileged_userns_clone"), "{why}");
        fs::write(dir.path().join("kernel/unprivileged_userns_clone"), "1\n").unwrap();
        fs::write(
            dir.path()
                .join("kernel/apparmor_restrict_unprivileged_userns"),
            "1\n",
        )
        .unwrap();
        let why = check_host_at(dir.path()).unwrap_err();
        assert!(why.contains("AppArmor"), "{why}");
    }

    #[test]
    fn a_process_state_is_read_past_any_command_name() {
        let me = std::process::id() as i32;
        assert!(matches!(state_of(me), Some('R' | 'S')));
        assert_eq!(state_of(i32::MAX), None);
    }
}
