//! Which network profile a new thread gets when its creator names none: the operator's default,
//! overridden per Slack workspace and per Slack channel. Read from the thread id alone, so every
//! path that creates a sandbox (a resolve, a Slack message's first command, a recreate) agrees.
//!
//! Settings are written compactly, for a flag or an environment variable:
//! - a profile: `restricted`, `networked` (every public address) or
//!   `networked:pypi.org,*.pythonhosted.org,203.0.113.0/24`;
//! - per Slack scope: `T0123=networked:pypi.org;T0123/C0456=restricted` (a workspace, or a
//!   workspace's channel; the channel wins).

use super::network::{Allowlist, NetworkProfile};
use super::slack_scoped::SlackScoped;

/// A setting that could not be read; says which part and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NetworkSettingError(String);

/// The profiles new threads get: the default, and per Slack scope (`SlackScoped`'s
/// `for_thread`, `for_scope`, `scopes`).
pub type NetworkDefaults = SlackScoped<NetworkProfile>;

impl SlackScoped<NetworkProfile> {
    /// Every distinct profile these defaults give a new thread: the ones the warm pool keeps
    /// sandboxes ready for.
    pub fn profiles(&self) -> Vec<&NetworkProfile> {
        self.distinct()
    }

    /// Add the per-scope setting (`T1=profile;T1/C1=profile`); an empty one adds nothing.
    pub fn with_slack_setting(self, setting: &str) -> Result<Self, NetworkSettingError> {
        self.with_setting(setting, "PROFILE", |value| {
            parse_profile(value).map_err(|e| e.0)
        })
        .map_err(NetworkSettingError)
    }

    /// One line per rule, for a start-up banner: `default restricted; T1 networked (...)`.
    pub fn describe(&self) -> String {
        let mut parts = vec![self.default.describe()];
        parts.extend(
            self.overrides()
                .map(|(scope, profile)| format!("Slack {scope}: {}", profile.describe())),
        );
        parts.join("; ")
    }
}

/// Read a profile setting: `restricted`, `networked` or `networked:ENTRY,ENTRY,...`; a bad
/// allowlist entry is named.
pub fn parse_profile(setting: &str) -> Result<NetworkProfile, NetworkSettingError> {
    let setting = setting.trim();
    let (kind, entries) = match setting.split_once(':') {
        Some((kind, entries)) => (kind.trim(), Some(entries)),
        None => (setting, None),
    };
    match (kind, entries) {
        ("restricted", None) => Ok(NetworkProfile::Restricted),
        ("restricted", Some(_)) => Err(NetworkSettingError(
            "`restricted` takes no allowlist (it reaches nothing); use networked:ENTRY,..."
                .to_owned(),
        )),
        ("networked", None) => Ok(NetworkProfile::Networked {
            allow: Allowlist::everything_public(),
        }),
        ("networked", Some(entries)) => {
            let entries: Vec<&str> = entries.split(',').map(str::trim).collect();
            if entries.iter().all(|e| e.is_empty()) {
                return Err(NetworkSettingError(
                    "`networked:` names no entry; write `networked` for every public address"
                        .to_owned(),
                ));
            }
            Allowlist::parse(entries)
                .map(|allow| NetworkProfile::Networked { allow })
                .map_err(|e| NetworkSettingError(e.to_string()))
        }
        _ => Err(NetworkSettingError(format!(
            "unknown network profile {kind:?}: expected restricted, networked or \
             networked:ENTRY,ENTRY,..."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ThreadId;

    fn thread(id: &str) -> ThreadId {
        ThreadId::parse(id).unwrap()
    }

    #[test]
    fn profiles_read_in_their_three_forms() {
        assert_eq!(
            parse_profile("restricted").unwrap(),
            NetworkProfile::Restricted
        );
        assert_eq!(
            parse_profile(" networked ").unwrap(),
            NetworkProfile::Networked {
                allow: Allowlist::everything_public()
            }
        );
        let listed =
            parse_profile("networked:pypi.org, *.pythonhosted.org,203.0.113.0/24").unwrap();
        assert_eq!(
            listed.describe(),
            "networked (allow: pypi.org, *.pythonhosted.org, 203.0.113.0/24)"
        );
    }

    #[test]
    fn bad_profiles_say_what_is_wrong() {
        let cases = [
            ("open", "unknown network profile \"open\""),
            ("restricted:a.test", "takes no allowlist"),
            ("networked:", "names no entry"),
            ("networked:ok.test,a.*.test", "entry 2 (\"a.*.test\")"),
            ("networked:10.0.0.0/33", "entry 1"),
        ];
        for (setting, expected) in cases {
            let err = parse_profile(setting).unwrap_err().to_string();
            assert!(err.contains(expected), "{setting}: {err}");
        }
    }

    #[test]
    fn a_channel_beats_its_workspace_which_beats_the_default() {
        let defaults = NetworkDefaults::new(NetworkProfile::Restricted)
            .with_slack_setting("T1=networked:pypi.org; T1/C9=restricted;T2=networked")
            .unwrap();
        let of = |id: &str| defaults.for_thread(&thread(id)).describe();
        assert_eq!(
            of("slack:T1:C1:1767225600.000100"),
            "networked (allow: pypi.org)"
        );
        assert_eq!(of("slack:T1:D1"), "networked (allow: pypi.org)");
        assert_eq!(of("slack:T1:C9:1767225600.000100"), "restricted");
        assert_eq!(
            of("slack:T2:C9:1767225600.000100"),
            "networked (every public address)"
        );
        assert_eq!(of("slack:T3:C1:1767225600.000100"), "restricted");
        assert_eq!(of("api-thread-1"), "restricted");
        assert!(defaults.describe().contains("Slack T1/C9: restricted"));
    }

    #[test]
    fn bad_scope_settings_name_the_scope() {
        let base = NetworkDefaults::default();
        let cases = [
            ("T1", "expected TEAM=PROFILE"),
            ("T1=open", "Slack scope T1: unknown network profile"),
            ("T-1=restricted", "Slack scope \"T-1\""),
            ("T1/=restricted", "Slack scope \"T1/\""),
            ("T1=restricted;T1=networked", "named twice"),
        ];
        for (setting, expected) in cases {
            let err = base
                .clone()
                .with_slack_setting(setting)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{setting}: {err}");
        }
        assert_eq!(base.clone().with_slack_setting(" ; ").unwrap(), base);
    }
}
