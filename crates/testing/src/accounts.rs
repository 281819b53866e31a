//! Host accounts for tests and benchmarks that run part of themselves as an ordinary user
//! (rootless sandboxes): made once, kept, and never given a home or a login.

use std::process::Command;

/// Make the system account `name` unless it exists; why not, when it could not be made.
pub fn ensure_system_account(name: &str) -> Result<(), String> {
    let made = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ])
        .output()
        .map_err(|e| format!("cannot run useradd: {e}"))?;
    // 9: the account exists already.
    if made.status.success() || made.status.code() == Some(9) {
        Ok(())
    } else {
        Err(format!(
            "cannot make the account {name}: {}",
            String::from_utf8_lossy(&made.stderr).trim()
        ))
    }
}
