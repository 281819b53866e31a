//! The Slack signing secret for `threadbox dev` and `threadbox slack send`.
//!
//! `SLACK_SIGNING_SECRET` wins: with a real Slack app it must be the app's secret. Without it,
//! `threadbox dev` makes one on first start in `<data dir>/slack-signing-secret` (owner-only),
//! so the Slack flow can be tried at once with `threadbox slack send`, which reads the same
//! file. Real Slack requests will not match a made-up secret; dev warns when a bot token is set
//! without the real secret.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use threadbox_shared::slack::SigningSecret;

pub const SECRET_ENV: &str = "SLACK_SIGNING_SECRET";
pub const SECRET_FILE: &str = "slack-signing-secret";

/// Where the secret came from, for the banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    Environment,
    File(PathBuf),
    Created(PathBuf),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Environment => write!(f, "{SECRET_ENV}"),
            SecretSource::File(path) => write!(f, "{}", path.display()),
            SecretSource::Created(path) => write!(f, "{} (new)", path.display()),
        }
    }
}

/// For `threadbox dev`: the environment's secret, else the data directory's (made if missing).
pub fn load_or_create(
    data_dir: &Path,
    from_env: Option<&str>,
) -> anyhow::Result<(SigningSecret, SecretSource)> {
    if let Some(secret) = from_env.and_then(SigningSecret::new) {
        return Ok((secret, SecretSource::Environment));
    }
    let path = data_dir.join(SECRET_FILE);
    if let Some(secret) = read(&path)? {
        return Ok((secret, SecretSource::File(path)));
    }
    // 244 random bits from the OS, as hex, via two v4 UUIDs (uuid is built already).
    let value = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    match created {
        Ok(mut file) => {
            file.write_all(value.as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("writing {}", path.display()))?;
            let secret = SigningSecret::new(&value).expect("a generated secret is not blank");
            Ok((secret, SecretSource::Created(path)))
        }
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read(&path)? {
            Some(secret) => Ok((secret, SecretSource::File(path))),
            None => bail!(
                "{} appeared empty while being created; try again",
                path.display()
            ),
        },
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
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
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(SigningSecret::new(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
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
        assert_eq!(source, SecretSource::Environment);
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
