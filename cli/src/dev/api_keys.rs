//! Where `threadbox dev`'s API keys come from: `THREADBOX_API_KEYS` or a file
//! (`--api-keys-file`, `THREADBOX_API_KEYS_FILE`), never the command line, which any local user
//! can read in `ps`. Keys follow [`ApiAuth::parse`]'s rules (at least 32 characters each). No
//! keys at all is a choice made by setting neither; a variable that is set but blank is a
//! mistake (an unexpanded `$KEY`, say), and quietly turning authentication off would hide it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{bail, Context};
use threadbox_api::http::ApiAuth;

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

/// The client's variable: `threadbox threads …`, `threadbox mcp` and the banner's examples send
/// it as `Authorization: Bearer $THREADBOX_API_KEY`.
pub const CLIENT_KEY_ENV: &str = "THREADBOX_API_KEY";

/// A shell line that sets [`CLIENT_KEY_ENV`] to the first of the server's keys, read from where
/// the server read them (so it works pasted into the shell that started the server), or `None`
/// when no such line gives a key the server takes (keys split by line breaks in the variable, a
/// path that needs quoting). Checked against the keys themselves, never printed.
pub fn client_export(
    from_env: Option<&str>,
    file: Option<&Path>,
    auth: &ApiAuth,
) -> Option<String> {
    let (first, line) = match (from_env, file) {
        (Some(value), None) => (
            // What `${VAR%%,*}` leaves: everything before the first comma.
            value.split(',').next()?.to_owned(),
            format!("export {CLIENT_KEY_ENV}=\"${{{KEYS_ENV}%%,*}}\""),
        ),
        (None, Some(path)) => {
            let path_text = path.to_str().filter(|p| !p.contains('\''))?;
            let text = std::fs::read_to_string(path).ok()?;
            // What `head -n 1 | cut -d, -f1` leaves (the command substitution drops the newline).
            let first = text.lines().next()?.split(',').next()?.to_owned();
            let line =
                format!("export {CLIENT_KEY_ENV}=\"$(head -n 1 '{path_text}' | cut -d, -f1)\"");
            (first, line)
        }
        _ => return None,
    };
    auth.accepts(first.as_bytes()).then_some(line)
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

    /// What bash makes of `line` with `env` set: the client key it exports.
    fn exported_by_bash(line: &str, env: &[(&str, &str)]) -> String {
        let output = std::process::Command::new("bash")
            .args(["-c", &format!("{line}; printf %s \"${CLIENT_KEY_ENV}\"")])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(output.status.success(), "{line}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    #[test]
    fn the_client_line_exports_a_key_the_server_takes_from_where_the_server_read_it() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let list = format!("{a},{b}");
        let auth = load(Some(&list), None).unwrap();
        let line = client_export(Some(&list), None, &auth).unwrap();
        assert!(
            !line.contains(&a),
            "the key itself is never printed: {line}"
        );
        assert_eq!(exported_by_bash(&line, &[(KEYS_ENV, &list)]), a);

        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("keys");
        std::fs::write(&file, format!("{b}\n{a}\n")).unwrap();
        let auth = load(None, Some(&file)).unwrap();
        let line = client_export(None, Some(&file), &auth).unwrap();
        assert!(!line.contains(&b), "{line}");
        assert_eq!(exported_by_bash(&line, &[]), b);

        // Keys the shell line would cut wrong: no line rather than a wrong key.
        let spaced = format!(" {a} ,{b}");
        let auth = load(Some(&spaced), None).unwrap();
        assert_eq!(client_export(Some(&spaced), None, &auth), None);
        assert_eq!(client_export(None, None, &ApiAuth::disabled()), None);
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
