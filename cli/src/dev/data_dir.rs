//! The data directory is private: it holds the sessions, their events, queued Slack text and
//! code, command output kept for the dashboard's Slack sink, and the secrets tokens are signed
//! with. So everything directly in it is 0600, whatever the umask, and nobody else may list or
//! write it or its folders. The directory and its folders keep one permission for others, to
//! pass through (0711): each sandbox's root is an unprivileged host uid of its own (its user
//! namespace), and it must reach its bundle under `sandboxes/` to mount its root filesystem. New SQLite files are made owner-only by the adapter (and SQLite gives its `-wal` and
//! `-shm` files the database's mode); what an earlier version or a loose umask left is fixed here
//! at start-up, with a warning naming each file. A file someone else owns is refused: we cannot
//! make it private, and a file planted by another user is not ours to trust.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Owner everything, others only passing through (see the module docs).
const PRIVATE_DIR: u32 = 0o711;
const PRIVATE_FILE: u32 = 0o600;

/// Create the directory if needed, make it and its entries private, and return its canonical path.
pub fn prepare(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    make_private(&dir, me)?;
    // Exactly 0711, not only at most: the sandboxes must pass through it (see the module docs).
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(PRIVATE_DIR))
        .with_context(|| format!("setting {}'s mode", dir.display()))?;
    let entries = std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        make_private(&path, me)?;
    }
    Ok(dir)
}

/// Tighten one entry's mode (never following a symlink, whose own mode means nothing), warning
/// when it was looser.
fn make_private(path: &Path, me: u32) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("inspecting {}", path.display()))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    if meta.uid() != me {
        bail!(
            "{} belongs to uid {}, not to this user (uid {me}): the data directory must be \
             private to threadbox; move it away or choose another --data-dir",
            path.display(),
            meta.uid()
        );
    }
    let wanted = if meta.is_dir() {
        PRIVATE_DIR
    } else {
        PRIVATE_FILE
    };
    let mode = meta.mode() & 0o7777;
    if mode & !wanted != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & wanted))
            .with_context(|| format!("making {} private", path.display()))?;
        tracing::warn!(
            path = %path.display(),
            was = format!("{mode:04o}"),
            now = format!("{:04o}", mode & wanted),
            "made a data file private: others could read it"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_directory_an_earlier_run_made_0700_can_be_passed_through_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        prepare(&dir).unwrap();
        assert_eq!(mode(&dir), 0o711);
    }

    #[test]
    fn a_new_directory_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = prepare(&tmp.path().join("a/b")).unwrap();
        assert_eq!(mode(&dir), 0o711);
    }

    #[test]
    fn loose_entries_are_tightened_and_tight_ones_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let db = dir.join("threadbox.db");
        std::fs::write(&db, b"x").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        let secret = dir.join("token-secret");
        std::fs::write(&secret, b"s").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o400)).unwrap();
        let sub = dir.join("sandboxes");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o775)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("link")).unwrap();

        prepare(&dir).unwrap();
        assert_eq!(mode(&dir), 0o711);
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&secret), 0o400, "already private: unchanged");
        assert_eq!(mode(&sub), 0o711);
        assert_eq!(
            mode(Path::new("/etc/hostname")) & 0o004,
            0o004,
            "links not followed"
        );
    }
}
