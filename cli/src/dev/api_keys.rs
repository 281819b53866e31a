//! Where `threadbox dev`'s API keys come from: `THREADBOX_API_KEYS` or a file
//! (`--api-keys-file`, `THREADBOX_API_KEYS_FILE`), never the command line, which any local user
//! can read in `ps`. Keys follow [`ApiAuth::parse`]'s rules (at least 32 characters each). No
//! keys at all is a choice made by setting neither; a variable that is set but blank is a
//! mistake (an unexpanded `$KEY`, say), and quietly turning authentication off would hide it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{bail, Context};
use threadbox_shared::http::ApiAuth;

pub const KEYS_ENV: &str = "THREADBOX_API_KEYS";

/// The keys from the environment's value or the file; disabled when neither is given.
pub fn load(from_env: Option<&str>, file: Option<&Path>) -> anyhow::Result<ApiAuth> {
    match (from_env, file) {
        (Some(_), Some(path)) => bail!(
            "{KEYS_ENV} is set and so is --api-keys-file ({}): give the keys one way",
            path.display()
        ),
        (Some(value), None) => ApiAuth::parse(value).with_context(|| {
            format!(
                "{KEYS_ENV} is set but not usable (unset it to run without keys, for this \
                 machine only)"
            )
        }),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the API keys file {}", path.display()))?;
            if let Ok(meta) = std::fs::metadata(path) {
                if meta.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(
                        path = %path.display(),
                        "the API keys file is readable by other users; chmod 600 it"
                    );
                }
            }
            ApiAuth::parse(&text)
                .with_context(|| format!("the API keys file {} is not usable", path.display()))
        }
        (None, None) => Ok(ApiAuth::disabled()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(from_env: Option<&str>, file: Option<&Path>) -> String {
        format!("{:#}", load(from_env, file).unwrap_err())
    }

    #[test]
    fn keys_come_from_the_variable_or_a_file() {
        let key = "k".repeat(40);
        assert!(load(Some(&key), None).unwrap().accepts(key.as_bytes()));
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("keys");
        std::fs::write(&file, format!("{key}\n{}\n", "m".repeat(32))).unwrap();
        let auth = load(None, Some(&file)).unwrap();
        assert!(auth.accepts(key.as_bytes()) && auth.accepts("m".repeat(32).as_bytes()));
        assert!(!load(None, None).unwrap().is_enabled(), "neither: no keys");
    }

    #[test]
    fn blank_short_or_doubled_keys_are_refused_naming_the_rule() {
        let blank = error(Some("  "), None);
        assert!(
            blank.contains("THREADBOX_API_KEYS is set but not usable"),
            "{blank}"
        );
        assert!(blank.contains("holds no key"), "{blank}");
        let short = error(Some("short-dev-key"), None);
        assert!(short.contains("at least 32"), "{short}");
        assert!(
            !short.contains("short-dev-key"),
            "the key is never shown: {short}"
        );
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("keys");
        std::fs::write(&file, "\n").unwrap();
        assert!(error(None, Some(&file)).contains("holds no key"));
        assert!(error(Some(&"k".repeat(40)), Some(&file)).contains("one way"));
        assert!(error(None, Some(&tmp.path().join("missing"))).contains("reading"));
    }
}
