//! The Slack signing secret for `threadbox dev` and `threadbox slack send`.
//!
//! `SLACK_SIGNING_SECRET` wins: with a real Slack app it must be the app's secret. Without it,
//! `threadbox dev` makes one on first start in `<data dir>/slack-signing-secret` (owner-only),
//! so the Slack flow can be tried at once with `threadbox slack send`, which reads the same
//! file. Real Slack requests will not match a made-up secret; dev warns when a bot token is set
//! without the real secret.

use std::path::Path;

use anyhow::Context;
use threadbox_slack::SigningSecret;

use crate::secret_file::{self, SecretSource};

pub const SECRET_ENV: &str = "SLACK_SIGNING_SECRET";
pub const SECRET_FILE: &str = "slack-signing-secret";

/// For `threadbox dev`: the environment's secret, else the data directory's (made if missing).
pub fn load_or_create(
    data_dir: &Path,
    from_env: Option<&str>,
) -> anyhow::Result<(SigningSecret, SecretSource)> {
    if let Some(secret) = from_env.and_then(SigningSecret::new) {
        return Ok((secret, SecretSource::Environment(SECRET_ENV)));
    }
    let path = data_dir.join(SECRET_FILE);
    // 244 random bits from the OS, as hex, via two v4 UUIDs (uuid is built already).
    let generate = || {
        Ok(format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        ))
    };
    let (text, source) = secret_file::read_or_create(&path, generate)?;
    let secret = SigningSecret::new(&text)
        .with_context(|| format!("{} does not hold a signing secret", path.display()))?;
    Ok((secret, source))
}

/// For `threadbox slack send`: the given secret, else the data directory's.
pub fn load(data_dir: &Path, given: Option<&str>) -> anyhow::Result<SigningSecret> {
    if let Some(secret) = given.and_then(SigningSecret::new) {
        return Ok(secret);
    }
    let path = data_dir.join(SECRET_FILE);
    read(&path)?.with_context(|| {
        format!(
            "no signing secret: set {SECRET_ENV} (as for threadbox dev), or point --data-dir at \
             the directory where threadbox dev keeps {SECRET_FILE} (looked in {})",
            path.display()
        )
    })
}

fn read(path: &Path) -> anyhow::Result<Option<SigningSecret>> {
    Ok(secret_file::read(path)?.and_then(|text| SigningSecret::new(&text)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn dev_makes_one_secret_and_send_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        let (made, source) = load_or_create(dir.path(), None).unwrap();
        assert!(matches!(source, SecretSource::Created(_)));
        let mode = std::fs::metadata(dir.path().join(SECRET_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, source) = load_or_create(dir.path(), Some("  ")).unwrap();
        assert!(matches!(source, SecretSource::File(_)));
        let found = load(dir.path(), None).unwrap();
        for s in [&again, &found] {
            assert_eq!(s.sign(1, b"x"), made.sign(1, b"x"));
        }
    }

    #[test]
    fn the_environment_wins_and_a_missing_secret_says_where_it_looked() {
        let dir = tempfile::tempdir().unwrap();
        let (secret, source) = load_or_create(dir.path(), Some("from-env")).unwrap();
        assert_eq!(source, SecretSource::Environment(SECRET_ENV));
        assert_eq!(
            secret.sign(1, b"x"),
            SigningSecret::new("from-env").unwrap().sign(1, b"x")
        );
        assert!(!dir.path().join(SECRET_FILE).exists());
        let err = load(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains(SECRET_ENV) && err.contains(SECRET_FILE),
            "{err}"
        );
    }
}
