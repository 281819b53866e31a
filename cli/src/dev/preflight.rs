//! What `threadbox dev` needs from the machine, checked before anything is created, so a missing
//! piece is one clear message with the fix instead of a failure halfway through start-up.

use std::path::PathBuf;

use anyhow::bail;
use threadbox_runc::host_can_run_sandboxes;

/// The runc binary, on a machine where we may use it (as root, or rootless where the kernel
/// allows unprivileged user namespaces); otherwise an error saying how to fix it.
pub fn check() -> anyhow::Result<PathBuf> {
    if !cfg!(target_os = "linux") {
        return explain(Err(format!(
            "runc sandboxes need Linux; this is {}",
            std::env::consts::OS
        )));
    }
    explain(host_can_run_sandboxes())
}

/// What `check` says: the runc binary, or why not with the fix, and E2B as the way round.
fn explain(found: Result<PathBuf, String>) -> anyhow::Result<PathBuf> {
    const E2B: &str = "Or run the sandboxes on E2B, with no runc here: \
                       THREADBOX_PROVIDER=e2b E2B_API_KEY=... threadbox dev";
    match found {
        Ok(runc) => Ok(runc),
        Err(why) if why.contains("not installed") => bail!(
            "runc is not installed; threadbox dev runs every sandbox as a runc container. \
             Install it with: sudo apt-get install runc\n{E2B}"
        ),
        Err(why) => bail!("runc sandboxes cannot run here: {why}\n{E2B}"),
    }
}

/// Whether the sandboxes will run rootless (this process is not root).
pub fn rootless() -> bool {
    !rustix::process::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_that_cannot_run_sandboxes_gets_one_message_with_the_way_round() {
        let said = explain(Err("this kernel forbids unprivileged user namespaces \
                                (sysctl kernel.unprivileged_userns_clone=0)"
            .into()))
        .unwrap_err()
        .to_string();
        assert!(
            said.starts_with("runc sandboxes cannot run here: "),
            "{said}"
        );
        assert!(
            said.contains("kernel.unprivileged_userns_clone=0"),
            "{said}"
        );
        assert!(
            said.contains("THREADBOX_PROVIDER=e2b E2B_API_KEY="),
            "{said}"
        );
        assert_eq!(said.lines().count(), 2, "{said}");
        let said = explain(Err("runc is not installed (apt-get install runc)".into()))
            .unwrap_err()
            .to_string();
        assert!(said.contains("sudo apt-get install runc"), "{said}");
        assert!(said.contains("THREADBOX_PROVIDER=e2b"), "{said}");
    }
}
