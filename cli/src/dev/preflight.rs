//! What `threadbox dev` needs from the machine, checked before anything is created, so a missing
//! piece is one clear message with the fix instead of a failure halfway through start-up.

use std::path::PathBuf;

use anyhow::bail;
use threadbox_shared::adapters::runc::host_can_run_sandboxes;

/// The runc binary, on a machine where we may use it (as root, or rootless where the kernel
/// allows unprivileged user namespaces); otherwise an error saying how to fix it.
pub fn check() -> anyhow::Result<PathBuf> {
    if !cfg!(target_os = "linux") {
        bail!(
            "runc sandboxes need Linux; this is {}",
            std::env::consts::OS
        );
    }
    match host_can_run_sandboxes() {
        Ok(runc) => Ok(runc),
        Err(why) if why.contains("not installed") => bail!(
            "runc is not installed; threadbox dev runs every sandbox as a runc container. \
             Install it with: sudo apt-get install runc"
        ),
        Err(why) => bail!("runc sandboxes cannot run here: {why}"),
    }
}

/// Whether the sandboxes will run rootless (this process is not root).
pub fn rootless() -> bool {
    !rustix::process::geteuid().is_root()
}
