//! Where `threadbox dev`'s credentials at egress come from: a JSON file the operator names
//! (`--egress-credentials-file`, `THREADBOX_EGRESS_CREDENTIALS_FILE`; the format is
//! `EgressCredentials`'s), read once at start. The egress proxy adds its headers to networked
//! sandboxes' requests to the hosts it names (runc), or E2B's egress proxy does (E2B); no API
//! caller can set them, and no sandbox sees them.
//!
//! The file holds secrets, so one that other users can read is refused, not just warned about:
//! its values would already be exposed on this machine.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{bail, Context};
use threadbox_core::domain::EgressCredentials;

/// The credentials in `path`, or none when no file is named.
pub fn load(path: Option<&Path>) -> anyhow::Result<EgressCredentials> {
    let Some(path) = path else {
        return Ok(EgressCredentials::default());
    };
    let meta = std::fs::metadata(path)
        .with_context(|| format!("reading the egress credentials file {}", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        bail!(
            "the egress credentials file {} is readable or writable by other users (mode {:o}); \
             it holds secrets: chmod 600 it",
            path.display(),
            mode & 0o777
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the egress credentials file {}", path.display()))?;
    EgressCredentials::parse_json(&text).with_context(|| {
        format!(
            "the egress credentials file {} is not usable",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, text: &str, mode: u32) -> std::path::PathBuf {
        let path = dir.join("credentials.json");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn an_owner_only_file_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let path = file(
            tmp.path(),
            r#"{"pkg.test": {"Authorization": "Bearer tb-secret"}}"#,
            0o600,
        );
        let credentials = load(Some(&path)).unwrap();
        assert!(credentials.for_host("pkg.test").is_some());
        assert!(load(None).unwrap().is_empty());
    }

    #[test]
    fn a_shared_missing_or_bad_file_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = file(tmp.path(), r#"{"pkg.test": {"X-Key": "tb-secret"}}"#, 0o644);
        let err = format!("{:#}", load(Some(&shared)).unwrap_err());
        assert!(
            err.contains("credentials.json") && err.contains("chmod 600"),
            "{err}"
        );
        assert!(err.contains("644"), "{err}");

        let missing = format!(
            "{:#}",
            load(Some(&tmp.path().join("nope.json"))).unwrap_err()
        );
        assert!(missing.contains("nope.json"), "{missing}");

        let bad = file(
            tmp.path(),
            r#"{"pkg.test": {"Bad Name": "tb-secret"}}"#,
            0o600,
        );
        let err = format!("{:#}", load(Some(&bad)).unwrap_err());
        assert!(err.contains("credentials.json"), "{err}");
        assert!(
            err.contains("\"pkg.test\"") && err.contains("Bad Name"),
            "{err}"
        );
        assert!(!err.contains("tb-secret"), "{err}");
    }
}
