//! The secret live-events tokens are signed with, for `threadbox dev` and `threadbox token`.
//!
//! `THREADBOX_TOKEN_SECRET` wins when set (at least 32 bytes; the same value the Lambda
//! functions are given). Otherwise the secret lives in `<data dir>/token-secret`, made on first
//! use from 32 random bytes and readable by its owner only, so tokens stay valid across restarts
//! and the `token` command signs exactly what the running server verifies. Delete the file to
//! revoke every token issued so far.
//!
//! The secret is read from the environment, never from a flag: command lines show up in `ps`.

use std::path::Path;

use anyhow::Context;
use threadbox_api::live::TokenSecret;

use crate::secret_file;
pub use crate::secret_file::SecretSource;

pub const SECRET_ENV: &str = "THREADBOX_TOKEN_SECRET";
pub const SECRET_FILE: &str = "token-secret";

/// The secret from the environment, else from the data directory (created there if missing).
pub fn load(data_dir: &Path) -> anyhow::Result<(TokenSecret, SecretSource)> {
    load_with(data_dir, std::env::var(SECRET_ENV).ok().as_deref())
}

fn load_with(
    data_dir: &Path,
    from_env: Option<&str>,
) -> anyhow::Result<(TokenSecret, SecretSource)> {
    if let Some(value) = from_env.filter(|v| !v.trim().is_empty()) {
        let secret =
            TokenSecret::new(value).with_context(|| format!("{SECRET_ENV} is not usable"))?;
        return Ok((secret, SecretSource::Environment(SECRET_ENV)));
    }
    let path = data_dir.join(SECRET_FILE);
    let generate = || {
        TokenSecret::generate()
            .map(|secret| secret.expose().to_owned())
            .context("generating a token secret")
    };
    let (text, source) = secret_file::read_or_create(&path, generate)?;
    let secret = TokenSecret::new(text)
        .with_context(|| format!("{} does not hold a usable token secret", path.display()))?;
    Ok((secret, source))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_file_is_made_once_owner_only_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (first, source) = load_with(dir.path(), None).unwrap();
        let path = dir.path().join(SECRET_FILE);
        assert_eq!(source, SecretSource::Created(path.clone()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, source) = load_with(dir.path(), None).unwrap();
        assert_eq!(source, SecretSource::File(path));
        assert_eq!(first.expose(), again.expose());
    }

    #[test]
    fn the_environment_wins_and_must_be_long_enough() {
        let dir = tempfile::tempdir().unwrap();
        let value = "an-environment-secret-of-32-bytes-or-more";
        let (secret, source) = load_with(dir.path(), Some(value)).unwrap();
        assert_eq!(source, SecretSource::Environment(SECRET_ENV));
        assert_eq!(secret.expose(), value);
        assert!(!dir.path().join(SECRET_FILE).exists());
        let err = load_with(dir.path(), Some("short")).unwrap_err();
        assert!(format!("{err:#}").contains("at least 32"), "{err:#}");
    }

    #[test]
    fn a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SECRET_FILE), "too-short").unwrap();
        let err = load_with(dir.path(), None).unwrap_err();
        assert!(format!("{err:#}").contains("token-secret"), "{err:#}");
    }
}
