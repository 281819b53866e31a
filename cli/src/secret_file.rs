//! Secrets kept in a file of the data directory: what `threadbox dev` falls back to when the
//! environment does not give a secret (the Slack signing secret, the live-events token secret),
//! so the other commands (`slack send`, `token`) can read the same one.
//!
//! The file is created owner-only (0600) on first use. When two processes start at once, the one
//! that loses the create reads the winner's file, so both end up with the same secret.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Where a secret came from, for the start-up banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The environment variable of this name.
    Environment(&'static str),
    File(PathBuf),
    /// Made just now, in this file.
    Created(PathBuf),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Environment(variable) => f.write_str(variable),
            SecretSource::File(path) => write!(f, "{}", path.display()),
            SecretSource::Created(path) => write!(f, "{} (new)", path.display()),
        }
    }
}

/// The file's text, or `None` when it is missing or blank.
pub fn read(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The file's text, or else `generate()`'s, written to a new owner-only file. The source says
/// which happened.
pub fn read_or_create(
    path: &Path,
    generate: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<(String, SecretSource)> {
    if let Some(text) = read(path)? {
        return Ok((text, SecretSource::File(path.to_path_buf())));
    }
    let value = generate()?;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(mut file) => {
            file.write_all(value.as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("writing {}", path.display()))?;
            Ok((value, SecretSource::Created(path.to_path_buf())))
        }
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read(path)? {
            Some(text) => Ok((text, SecretSource::File(path.to_path_buf()))),
            None => bail!(
                "{} appeared empty while being created; try again",
                path.display()
            ),
        },
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_file_is_made_once_owner_only_and_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let (first, source) = read_or_create(&path, || Ok("generated".into())).unwrap();
        assert_eq!(
            (first.as_str(), source),
            ("generated", SecretSource::Created(path.clone()))
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, source) = read_or_create(&path, || bail!("must not generate twice")).unwrap();
        assert_eq!(
            (again.as_str(), source),
            ("generated", SecretSource::File(path))
        );
    }

    #[test]
    fn a_blank_file_counts_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "  \n").unwrap();
        assert_eq!(read(&path).unwrap(), None);
        assert_eq!(read(&dir.path().join("absent")).unwrap(), None);
    }
}
