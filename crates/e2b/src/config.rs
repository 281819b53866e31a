//! E2B settings, typed and validated once from the environment.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `E2B_API_KEY` | required | the team's API key, sent as `X-API-Key` |
//! | `E2B_TEMPLATE` | `base` | template id or alias of the `host` image, every sandbox's unless its thread chose another |
//! | `THREADBOX_E2B_TEMPLATES` | none | more images, `NAME=TEMPLATE_ID,NAME=TEMPLATE_ID` (names as `domain::ImageName`; `host` is `E2B_TEMPLATE`) |
//! | `E2B_TIMEOUT_SECS` | `900` | sandbox timeout when a caller gives none, and on resume |
//! | `E2B_DOMAIN` | `e2b.app` | the domain the API and sandbox hosts live under |
//! | `E2B_API_URL` | `https://api.<domain>` | control-plane base URL |
//! | `E2B_SANDBOX_URL` | per sandbox: `https://49983-<id>.<domain>` | one envd base URL for every sandbox (routing by header), as E2B's SDK allows |
//! | `E2B_REQUEST_TIMEOUT_SECS` | `60` | whole-request limit for control-plane and file calls, and the retry budget |
//! | `E2B_RETRIES` | `3` | control-plane retries after the first attempt; `0` turns them off |
//! | `THREADBOX_EGRESS_CREDENTIALS` | none | operator credentials at egress (JSON, see `domain::EgressCredentials`), sent as the `rules` of a networked sandbox's `network`; a secret (on Lambda, by reference) |

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use threadbox_core::domain::ImageName;

use super::retry::RetryPolicy;

/// The images besides `host`, each an E2B template: `NAME=TEMPLATE_ID,...`.
pub const TEMPLATES_VAR: &str = "THREADBOX_E2B_TEMPLATES";

/// The most images [`TEMPLATES_VAR`] may name.
pub const MAX_TEMPLATES: usize = 100;

/// Operator credentials at egress, JSON (a secret: on Lambda it is given by reference).
pub const EGRESS_CREDENTIALS_VAR: &str = "THREADBOX_EGRESS_CREDENTIALS";

/// The port envd listens on inside every sandbox (part of its host name, and a header).
pub(crate) const ENVD_PORT: u16 = 49983;
use threadbox_core::config::{ConfigError, Env};

/// A credential. It prints as `[redacted]` in `Debug` and `Display`, so it cannot reach a log
/// line or an error message by accident; [`Secret::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one header that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

pub const DEFAULT_DOMAIN: &str = "e2b.app";
pub const DEFAULT_TEMPLATE: &str = "base";
/// E2B caps a sandbox's life at 24 h on Pro plans (1 h on Hobby); larger timeouts get a 400.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Debug)]
pub struct E2bConfig {
    pub api_key: Secret,
    /// The `host` image's template.
    pub template: String,
    /// The other images' templates, by name ([`TEMPLATES_VAR`]).
    pub templates: BTreeMap<ImageName, String>,
    /// Used when a create asks for no timeout, and as the timeout a resume (connect) grants.
    pub default_timeout: Duration,
    pub domain: String,
    /// The control plane, without a trailing slash.
    pub api_url: String,
    /// One envd base for every sandbox; `None` means the per-sandbox host `49983-<id>.<domain>`.
    pub sandbox_url: Option<String>,
    /// TCP and TLS set-up limit for every request.
    pub connect_timeout: Duration,
    /// Whole-request limit for control-plane and file calls (commands have their own).
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    /// Headers E2B's egress proxy adds to a networked sandbox's requests (its `network.rules`);
    /// `Debug` redacts the values.
    pub egress_credentials: threadbox_core::domain::EgressCredentials,
}

impl E2bConfig {
    /// Defaults for everything but the key: E2B's public cloud, template `base`.
    pub fn new(api_key: Secret) -> Self {
        let request_timeout = Duration::from_secs(60);
        Self {
            api_key,
            template: DEFAULT_TEMPLATE.to_owned(),
            templates: BTreeMap::new(),
            default_timeout: Duration::from_secs(900),
            domain: DEFAULT_DOMAIN.to_owned(),
            api_url: format!("https://api.{DEFAULT_DOMAIN}"),
            sandbox_url: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout,
            retry: RetryPolicy {
                budget: request_timeout,
                ..RetryPolicy::default()
            },
            egress_credentials: threadbox_core::domain::EgressCredentials::default(),
        }
    }

    /// Read every `E2B_*` setting from `env`. Empty values count as unset.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let get = |name: &str| env.raw(name).filter(|v| !v.trim().is_empty());

        let key = get("E2B_API_KEY").ok_or(ConfigError::Missing("E2B_API_KEY"))?;
        if key.trim() != key || key.chars().any(|c| c.is_control() || c == ' ') {
            return Err(ConfigError::Invalid {
                variable: "E2B_API_KEY",
                reason: "contains whitespace or control characters".into(),
            });
        }
        let mut config = Self::new(Secret::new(key));

        if let Some(template) = get("E2B_TEMPLATE") {
            config.template = template.trim().to_owned();
        }
        if let Some(setting) = get(TEMPLATES_VAR) {
            config.templates =
                parse_templates(&setting).map_err(|reason| ConfigError::Invalid {
                    variable: TEMPLATES_VAR,
                    reason,
                })?;
        }
        if let Some(domain) = get("E2B_DOMAIN") {
            let domain = domain.trim().trim_end_matches('.').to_owned();
            if domain.contains('/') || domain.contains(':') {
                return Err(ConfigError::Invalid {
                    variable: "E2B_DOMAIN",
                    reason: "expected a bare domain such as e2b.app, not a URL".into(),
                });
            }
            config.domain = domain;
        }
        config.api_url = match get("E2B_API_URL") {
            Some(url) => parse_base_url("E2B_API_URL", &url)?,
            None => format!("https://api.{}", config.domain),
        };
        config.sandbox_url = get("E2B_SANDBOX_URL")
            .map(|url| parse_base_url("E2B_SANDBOX_URL", &url))
            .transpose()?;
        if let Some(secs) = parse_secs(&get, "E2B_TIMEOUT_SECS")? {
            if secs > MAX_TIMEOUT {
                return Err(ConfigError::Invalid {
                    variable: "E2B_TIMEOUT_SECS",
                    reason: format!("at most {} (24 h)", MAX_TIMEOUT.as_secs()),
                });
            }
            config.default_timeout = secs;
        }
        if let Some(secs) = parse_secs(&get, "E2B_REQUEST_TIMEOUT_SECS")? {
            config.request_timeout = secs;
            config.retry.budget = secs;
        }
        if let Some(retries) = get("E2B_RETRIES") {
            config.retry.max_retries = retries
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= 10)
                .ok_or_else(|| ConfigError::Invalid {
                    variable: "E2B_RETRIES",
                    reason: "expected a whole number from 0 to 10".into(),
                })?;
        }
        if let Some(text) = get(EGRESS_CREDENTIALS_VAR) {
            config.egress_credentials =
                threadbox_core::domain::EgressCredentials::parse_json(&text).map_err(|e| {
                    ConfigError::Invalid {
                        variable: EGRESS_CREDENTIALS_VAR,
                        reason: e.to_string(),
                    }
                })?;
        }
        Ok(config)
    }

    /// The template an image's sandboxes start from: `host`'s is [`E2bConfig::template`].
    pub fn template_for(&self, image: &ImageName) -> Option<&str> {
        if image.is_host() {
            Some(&self.template)
        } else {
            self.templates.get(image).map(String::as_str)
        }
    }

    /// Where envd answers for this sandbox. `sandbox_domain` is the `domain` E2B returned for
    /// it, when it returned one (sandboxes outside the default cluster).
    pub fn envd_url(&self, sandbox_id: &str, sandbox_domain: Option<&str>) -> String {
        match &self.sandbox_url {
            Some(url) => url.clone(),
            None => format!(
                "https://{}-{sandbox_id}.{}",
                ENVD_PORT,
                sandbox_domain.unwrap_or(&self.domain)
            ),
        }
    }
}

/// Read `NAME=TEMPLATE_ID,NAME=TEMPLATE_ID`: valid names, each once, never `host` (that is
/// `E2B_TEMPLATE`), template ids or aliases as E2B spells them.
pub fn parse_templates(setting: &str) -> Result<BTreeMap<ImageName, String>, String> {
    let mut templates = BTreeMap::new();
    for (i, part) in setting
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        if i >= MAX_TEMPLATES {
            return Err(format!("at most {MAX_TEMPLATES} images may be named"));
        }
        let (name, template) = part
            .split_once('=')
            .ok_or_else(|| format!("entry {}: expected NAME=TEMPLATE_ID, got {part:?}", i + 1))?;
        let name = ImageName::parse(name.trim()).map_err(|e| format!("entry {}: {e}", i + 1))?;
        if name.is_host() {
            return Err(format!(
                "entry {}: `host` is the deployment's own template (E2B_TEMPLATE); name this \
                 one otherwise",
                i + 1
            ));
        }
        let template = template.trim();
        let valid = !template.is_empty()
            && template.len() <= 128
            && template
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':'));
        if !valid {
            return Err(format!(
                "entry {} ({name}): {template:?} is not an E2B template id or alias",
                i + 1
            ));
        }
        if templates
            .insert(name.clone(), template.to_owned())
            .is_some()
        {
            return Err(format!("{name} is named twice"));
        }
    }
    Ok(templates)
}

fn parse_base_url(variable: &'static str, raw: &str) -> Result<String, ConfigError> {
    let url = raw.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(url.to_owned()),
        _ => Err(ConfigError::Invalid {
            variable,
            reason: "expected an http:// or https:// URL".into(),
        }),
    }
}

fn parse_secs(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
) -> Result<Option<Duration>, ConfigError> {
    let Some(raw) = get(variable) else {
        return Ok(None);
    };
    match raw.trim().parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Some(Duration::from_secs(secs))),
        _ => Err(ConfigError::Invalid {
            variable,
            reason: "expected a whole number of seconds greater than 0".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs)
    }

    #[test]
    fn the_key_is_required_and_named() {
        let err = E2bConfig::from_env(&lookup(&[])).unwrap_err();
        assert_eq!(err, ConfigError::Missing("E2B_API_KEY"));
        assert_eq!(err.to_string(), "E2B_API_KEY is not set");
    }

    #[test]
    fn defaults_follow_the_sdk() {
        let c = E2bConfig::from_env(&lookup(&[("E2B_API_KEY", "e2b_abc")])).unwrap();
        assert_eq!(c.api_url, "https://api.e2b.app");
        assert_eq!(c.template, "base");
        assert_eq!(c.envd_url("i123", None), "https://49983-i123.e2b.app");
        assert_eq!(
            c.envd_url("i123", Some("eu.e2b.dev")),
            "https://49983-i123.eu.e2b.dev"
        );
        assert_eq!(c.retry.max_retries, 3);
    }

    #[test]
    fn image_templates_are_read_by_name_and_host_is_e2b_template() {
        let c = E2bConfig::from_env(&lookup(&[
            ("E2B_API_KEY", "k"),
            ("E2B_TEMPLATE", "tpl-base"),
            (TEMPLATES_VAR, " python=tpl-py312 , node-22=team/node:22,"),
        ]))
        .unwrap();
        let name = |n: &str| ImageName::parse(n).unwrap();
        assert_eq!(c.template_for(&ImageName::host()), Some("tpl-base"));
        assert_eq!(c.template_for(&name("python")), Some("tpl-py312"));
        assert_eq!(c.template_for(&name("node-22")), Some("team/node:22"));
        assert_eq!(c.template_for(&name("ruby")), None);
        let unset = E2bConfig::from_env(&lookup(&[("E2B_API_KEY", "k")])).unwrap();
        assert!(unset.templates.is_empty());

        let cases = [
            ("python", "entry 1: expected NAME=TEMPLATE_ID"),
            ("Python=tpl", "entry 1: \"Python\" is not an image name"),
            (
                "host=tpl",
                "entry 1: `host` is the deployment's own template",
            ),
            ("py=tpl,py=other", "py is named twice"),
            ("py=", "entry 1 (py): \"\" is not an E2B template id"),
            ("py=a b", "is not an E2B template id"),
        ];
        for (setting, expected) in cases {
            let err =
                E2bConfig::from_env(&lookup(&[("E2B_API_KEY", "k"), (TEMPLATES_VAR, setting)]))
                    .unwrap_err();
            let text = err.to_string();
            assert!(text.contains(TEMPLATES_VAR), "{setting}: {text}");
            assert!(text.contains(expected), "{setting}: {text}");
        }
    }

    #[test]
    fn the_domain_moves_both_planes_and_urls_override_it() {
        let c = E2bConfig::from_env(&lookup(&[
            ("E2B_API_KEY", "k"),
            ("E2B_DOMAIN", "example.test"),
        ]))
        .unwrap();
        assert_eq!(c.api_url, "https://api.example.test");
        assert_eq!(c.envd_url("i1", None), "https://49983-i1.example.test");

        let c = E2bConfig::from_env(&lookup(&[
            ("E2B_API_KEY", "k"),
            ("E2B_API_URL", "http://127.0.0.1:9000/"),
            ("E2B_SANDBOX_URL", "http://127.0.0.1:9001"),
        ]))
        .unwrap();
        assert_eq!(c.api_url, "http://127.0.0.1:9000");
        assert_eq!(c.envd_url("i1", None), "http://127.0.0.1:9001");
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (var, value) in [
            ("E2B_API_URL", "api.e2b.app"),
            ("E2B_SANDBOX_URL", "ftp://x"),
            ("E2B_TIMEOUT_SECS", "ten"),
            ("E2B_TIMEOUT_SECS", "0"),
            ("E2B_TIMEOUT_SECS", "90000"),
            ("E2B_REQUEST_TIMEOUT_SECS", "-1"),
            ("E2B_RETRIES", "many"),
            ("E2B_DOMAIN", "https://e2b.app"),
        ] {
            let err =
                E2bConfig::from_env(&lookup(&[("E2B_API_KEY", "k"), (var, value)])).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("{var} is invalid")),
                "{var}={value}: {err}"
            );
        }
    }

    #[test]
    fn the_key_never_prints() {
        let c = E2bConfig::from_env(&lookup(&[("E2B_API_KEY", "e2b_supersecret")])).unwrap();
        let shown = format!("{c:?} {}", c.api_key);
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(shown.contains("[redacted]"));
        assert_eq!(c.api_key.expose(), "e2b_supersecret");
    }
}
