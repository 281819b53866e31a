//! What `threadbox dev` needs from the machine, checked before anything is created, so a missing
//! piece is one clear message with the fix instead of a failure halfway through start-up.

use std::path::PathBuf;

use anyhow::{bail, Context};
use threadbox_shared::adapters::runc::find_runc;

/// The runc binary, on a machine where we may use it; otherwise an error saying how to fix it.
pub fn check() -> anyhow::Result<PathBuf> {
    let status = std::fs::read_to_string("/proc/self/status")
        .context("reading /proc/self/status to check for root")?;
    match effective_uid(&status) {
        Some(0) => {}
        Some(uid) => bail!(
            "threadbox dev runs sandboxes as runc containers, which needs root (it creates \
             cgroups and mounts); you are uid {uid}. Run it with sudo, or use scripts/dev.sh"
        ),
        None => bail!("cannot tell the effective user from /proc/self/status"),
    }
    find_runc().context(
        "runc is not installed; threadbox dev runs every sandbox as a runc container. \
         Install it with: sudo apt-get install runc",
    )
}

/// The effective uid from `/proc/self/status` ("Uid:\treal\teffective\tsaved\tfs").
fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_uid() {
        let status = "Name:\tthreadbox\nUmask:\t0022\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(effective_uid(status), Some(0));
        assert_eq!(effective_uid("Uid:\t1000\t1001\t1000\t1000\n"), Some(1001));
        assert_eq!(effective_uid("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_has_an_effective_uid() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(effective_uid(&status).is_some());
    }
}
