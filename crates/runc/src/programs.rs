//! Finding the host's programs (runc, mkfs.ext4, and the network's ip, nft and nsenter): a
//! module of its own, below both `config` and `network`, which both need it.

use std::path::{Path, PathBuf};

/// A program on `PATH`, or in the sbin directories a non-root `PATH` often lacks.
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
