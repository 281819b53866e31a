//! Credentials at egress: headers an operator attaches to a sandbox's requests to one host
//! (`Authorization: Bearer …` for `api.github.com`, say), added by the egress proxy on the way
//! out so that code in the sandbox can use an API without ever holding its key.
//!
//! Only an operator sets them (a file or a deployment secret, read at start); no API caller
//! can. The text is JSON, one entry per host, exact or `*.suffix` as in an allowlist:
//!
//! ```json
//! { "api.github.com": { "Authorization": "Bearer ghp_…" },
//!   "*.internal.example": { "X-Api-Key": "…" } }
//! ```
//!
//! The values are secrets: `Debug` shows hosts and header names only, and errors name the
//! entry and the header, never a value.

use std::collections::BTreeMap;
use std::fmt;

use super::network::AllowEntry;

/// Entries at most: credentials are a handful of APIs, not a list to grow without bound.
pub const MAX_ENTRIES: usize = 1000;
/// Headers per entry at most.
pub const MAX_HEADERS: usize = 32;
/// A header value's length at most (a long JWT fits; a mistaken file does not).
pub const MAX_VALUE_LEN: usize = 8 * 1024;

/// Headers that say how a message is framed or routed: the proxy must not let an operator
/// setting change them (a wrong `Content-Length` would desynchronise the connection).
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

/// A header value that is a secret: never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderSecret(String);

impl HeaderSecret {
    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for HeaderSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The headers for one host (or every host under a suffix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCredentials {
    /// A [`AllowEntry::Domain`] or [`AllowEntry::Suffix`], never an address.
    pub host: AllowEntry,
    /// Header names in lowercase, each once.
    pub headers: BTreeMap<String, HeaderSecret>,
}

/// Every host's credentials; empty when the operator set none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressCredentials {
    entries: Vec<HostCredentials>,
}

/// What is wrong with the credentials text: the entry (a host as written, or `(the document)`)
/// and why, never a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("egress credentials: entry {entry:?}: {reason}")]
pub struct EgressCredentialsError {
    pub entry: String,
    pub reason: String,
}

fn invalid(entry: &str, reason: impl Into<String>) -> EgressCredentialsError {
    EgressCredentialsError {
        entry: entry.to_owned(),
        reason: reason.into(),
    }
}

impl EgressCredentials {
    /// Parse the JSON text described in the module docs.
    pub fn parse_json(text: &str) -> Result<Self, EgressCredentialsError> {
        // Parsed as a value first: serde's own messages may quote the input, which holds secrets.
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            invalid(
                "(the document)",
                format!("not valid JSON (line {}, column {})", e.line(), e.column()),
            )
        })?;
        let serde_json::Value::Object(hosts) = value else {
            return Err(invalid(
                "(the document)",
                "expected an object of hosts, each an object of header names to values",
            ));
        };
        if hosts.len() > MAX_ENTRIES {
            return Err(invalid(
                "(the document)",
                format!("{} entries; at most {MAX_ENTRIES}", hosts.len()),
            ));
        }
        let mut entries: Vec<HostCredentials> = Vec::with_capacity(hosts.len());
        for (written, headers) in hosts {
            let host = match AllowEntry::parse(&written) {
                Ok(AllowEntry::Net(_)) => {
                    return Err(invalid(
                        &written,
                        "credentials attach to names (exact or *.suffix), not addresses: the \
                         proxy sees a name in every request it can add headers to",
                    ))
                }
                Ok(host) => host,
                Err(why) => return Err(invalid(&written, why)),
            };
            if entries.iter().any(|e| e.host == host) {
                return Err(invalid(&written, "this host is listed twice"));
            }
            let serde_json::Value::Object(headers) = headers else {
                return Err(invalid(
                    &written,
                    "expected an object of header names to values",
                ));
            };
            if headers.is_empty() {
                return Err(invalid(&written, "no headers"));
            }
            if headers.len() > MAX_HEADERS {
                return Err(invalid(
                    &written,
                    format!("{} headers; at most {MAX_HEADERS}", headers.len()),
                ));
            }
            let mut parsed = BTreeMap::new();
            for (name, value) in headers {
                let lower = header_name(&written, &name)?;
                let serde_json::Value::String(value) = value else {
                    return Err(invalid(
                        &written,
                        format!("header {name:?}: the value must be a string"),
                    ));
                };
                header_value(&written, &name, &value)?;
                if parsed.insert(lower, HeaderSecret(value)).is_some() {
                    return Err(invalid(
                        &written,
                        format!("header {name:?} is given twice (names ignore case)"),
                    ));
                }
            }
            entries.push(HostCredentials {
                host,
                headers: parsed,
            });
        }
        Ok(Self { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[HostCredentials] {
        &self.entries
    }

    /// The credentials for the host name `host` (lowercase, no trailing dot, as the allowlist
    /// compares names): an exact entry wins over a suffix, a longer suffix over a shorter one.
    pub fn for_host(&self, host: &str) -> Option<&HostCredentials> {
        let host = super::network::normalize(host);
        let exact = self
            .entries
            .iter()
            .find(|e| matches!(&e.host, AllowEntry::Domain(d) if *d == host));
        exact.or_else(|| {
            self.entries
                .iter()
                .filter_map(|e| match &e.host {
                    AllowEntry::Suffix(s) if is_under(&host, s) => Some((s.len(), e)),
                    _ => None,
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, e)| e)
        })
    }
}

/// Whether `name` is a name under `suffix` (not the suffix itself), as `*.suffix` matches.
fn is_under(name: &str, suffix: &str) -> bool {
    name.strip_suffix(suffix)
        .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
}

/// A header name: an HTTP token, not one that frames or routes the message. Lowercased.
fn header_name(entry: &str, name: &str) -> Result<String, EgressCredentialsError> {
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(invalid(
            entry,
            format!("{name:?} is not a header name (letters, digits and !#$%&'*+-.^_`|~)"),
        ));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err(invalid(
            entry,
            format!("header {name:?} frames or routes the request; it cannot be set here"),
        ));
    }
    Ok(lower)
}

/// A header value: visible ASCII, spaces and tabs, not blank and not too long. The reason names
/// the header, never the value.
fn header_value(entry: &str, name: &str, value: &str) -> Result<(), EgressCredentialsError> {
    if value.trim().is_empty() {
        return Err(invalid(
            entry,
            format!("header {name:?}: the value is empty"),
        ));
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(invalid(
            entry,
            format!("header {name:?}: the value is longer than {MAX_VALUE_LEN} bytes"),
        ));
    }
    if !value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return Err(invalid(
            entry,
            format!(
                "header {name:?}: the value holds a control character or non-ASCII text \
                 (a line break would start another header)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "Bearer tb-secret-0123456789";

    fn parse(text: &str) -> Result<EgressCredentials, EgressCredentialsError> {
        EgressCredentials::parse_json(text)
    }

    #[test]
    fn hosts_match_exactly_or_under_a_suffix_the_closest_winning() {
        let creds = parse(
            r#"{"api.github.com": {"Authorization": "Bearer a"},
                "*.example.com": {"X-Key": "b"},
                "*.deep.example.com": {"X-Key": "c"},
                "Exact.Example.com.": {"X-Key": "d"}}"#,
        )
        .unwrap();
        let value = |host: &str, header: &str| {
            creds
                .for_host(host)
                .map(|c| c.headers[header].expose().to_owned())
        };
        assert_eq!(
            value("API.github.com", "authorization").unwrap(),
            "Bearer a"
        );
        assert_eq!(value("a.example.com", "x-key").unwrap(), "b");
        assert_eq!(value("x.deep.example.com", "x-key").unwrap(), "c");
        assert_eq!(value("exact.example.com", "x-key").unwrap(), "d");
        assert!(
            creds.for_host("example.com").is_none(),
            "*. is not the suffix itself"
        );
        assert!(creds.for_host("github.com").is_none());
        assert!(creds.for_host("evilexample.com").is_none());
    }

    #[test]
    fn debug_never_shows_a_value() {
        let creds = parse(&format!(
            r#"{{"pkg.test": {{"Authorization": "{SECRET}"}}}}"#
        ))
        .unwrap();
        let shown = format!("{creds:?}");
        assert!(!shown.contains("tb-secret"), "{shown}");
        assert!(
            shown.contains("pkg.test") && shown.contains("authorization"),
            "{shown}"
        );
    }

    #[test]
    fn bad_entries_are_named_without_their_values() {
        let cases = [
            (
                r#"{"pkg.test": {"Authorization": "x"}"#.to_owned(),
                "(the document)",
                "JSON",
            ),
            (
                r#"["pkg.test"]"#.to_owned(),
                "(the document)",
                "object of hosts",
            ),
            (
                format!(r#"{{"10.0.0.1": {{"X-Key": "{SECRET}"}}}}"#),
                "10.0.0.1",
                "not addresses",
            ),
            (
                format!(r#"{{"a.*.test": {{"X-Key": "{SECRET}"}}}}"#),
                "a.*.test",
                "wildcard",
            ),
            (
                r#"{"pkg.test": "Bearer x"}"#.to_owned(),
                "pkg.test",
                "object of header",
            ),
            (r#"{"pkg.test": {}}"#.to_owned(), "pkg.test", "no headers"),
            (
                format!(r#"{{"pkg.test": {{"Bad Name": "{SECRET}"}}}}"#),
                "pkg.test",
                "not a header name",
            ),
            (
                format!(r#"{{"pkg.test": {{"Content-Length": "{SECRET}"}}}}"#),
                "pkg.test",
                "frames or routes",
            ),
            (
                r#"{"pkg.test": {"X-Key": 42}}"#.to_owned(),
                "pkg.test",
                "must be a string",
            ),
            (
                r#"{"pkg.test": {"X-Key": "Bearer tb-secret\r\nX-Evil: 1"}}"#.to_owned(),
                "pkg.test",
                "control character",
            ),
            (
                r#"{"pkg.test": {"X-Key": "  "}}"#.to_owned(),
                "pkg.test",
                "empty",
            ),
            (
                format!(r#"{{"pkg.test": {{"X-Key": "a", "x-key": "{SECRET}"}}}}"#),
                "pkg.test",
                "twice",
            ),
            (
                r#"{"pkg.test": {"X-Key": "a"}, "pkg.test.": {"X-Key": "b"}}"#.to_owned(),
                "pkg.test.",
                "listed twice",
            ),
        ];
        for (text, entry, reason) in cases {
            let err = parse(&text).unwrap_err();
            assert_eq!(err.entry, entry, "{text}: {err}");
            assert!(err.reason.contains(reason), "{text}: {err}");
            assert!(!err.to_string().contains("tb-secret"), "{err}");
        }
        let long = "v".repeat(MAX_VALUE_LEN + 1);
        let err = parse(&format!(r#"{{"pkg.test": {{"X-Key": "{long}"}}}}"#)).unwrap_err();
        assert!(err.reason.contains("longer than"), "{err}");
        assert!(parse("{}").unwrap().is_empty());
    }
}
