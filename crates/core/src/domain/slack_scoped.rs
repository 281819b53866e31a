//! A setting chosen per Slack scope: the operator's default, overridden per Slack workspace and
//! per Slack channel (the channel wins), read from a thread's id alone, so every path that makes
//! a thread agrees. Network profiles (`network_defaults`) and images (`image_defaults`) are
//! both this, with their own value and error.
//!
//! Written compactly, for a flag or an environment variable: `T0123=VALUE;T0123/C0456=VALUE`.

use std::collections::BTreeMap;

use super::thread_id::ThreadId;

/// The most Slack scopes one setting may name.
pub const MAX_SLACK_SCOPES: usize = 1000;

/// A value for every new thread, and the ones Slack scopes override it with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlackScoped<T> {
    /// For every thread no scope below names (API threads included).
    pub default: T,
    /// Keyed `TEAM` or `TEAM/CHANNEL`.
    slack: BTreeMap<String, T>,
}

impl<T: PartialEq> SlackScoped<T> {
    pub fn new(default: T) -> Self {
        Self {
            default,
            slack: BTreeMap::new(),
        }
    }

    /// Add the per-scope setting (`T1=VALUE;T1/C1=VALUE`, each value read by `parse`); an empty
    /// one adds nothing. `what` names the value in messages (`PROFILE`, `IMAGE`).
    pub(super) fn with_setting(
        mut self,
        setting: &str,
        what: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Self, String> {
        for (i, part) in setting
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .enumerate()
        {
            if i >= MAX_SLACK_SCOPES {
                return Err(format!(
                    "at most {MAX_SLACK_SCOPES} Slack scopes may be named"
                ));
            }
            let (scope, value) = part.split_once('=').ok_or_else(|| {
                format!(
                    "Slack scope {}: expected TEAM={what} or TEAM/CHANNEL={what}, got {part:?}",
                    i + 1
                )
            })?;
            let scope = scope.trim();
            if !valid_scope(scope) {
                return Err(format!(
                    "Slack scope {scope:?}: expected a team id (T0123) or TEAM/CHANNEL \
                     (T0123/C0456), letters and digits only"
                ));
            }
            let value = parse(value).map_err(|why| format!("Slack scope {scope}: {why}"))?;
            if self.slack.insert(scope.to_owned(), value).is_some() {
                return Err(format!("Slack scope {scope} is named twice"));
            }
        }
        Ok(self)
    }

    /// The value for a new thread `thread_id`.
    pub fn for_thread(&self, thread_id: &ThreadId) -> &T {
        match (thread_id.slack_team(), thread_id.slack_channel()) {
            (Some(team), Some(channel)) => self.for_scope(&format!("{team}/{channel}")),
            _ => &self.default,
        }
    }

    /// The value of a Slack scope (`TEAM` or `TEAM/CHANNEL`): its own, else its workspace's,
    /// else the default.
    pub fn for_scope(&self, scope: &str) -> &T {
        let team = scope.split_once('/').map_or(scope, |(team, _)| team);
        self.slack
            .get(scope)
            .or_else(|| self.slack.get(team))
            .unwrap_or(&self.default)
    }

    /// The Slack scopes named.
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        self.slack.keys().map(String::as_str)
    }

    /// Every distinct value a new thread can get, the default first.
    pub fn distinct(&self) -> Vec<&T> {
        let mut values = vec![&self.default];
        for value in self.slack.values() {
            if !values.contains(&value) {
                values.push(value);
            }
        }
        values
    }

    /// Each scope's override, by scope.
    pub(super) fn overrides(&self) -> impl Iterator<Item = (&str, &T)> {
        self.slack
            .iter()
            .map(|(scope, value)| (scope.as_str(), value))
    }
}

/// A Slack team id, or `TEAM/CHANNEL`: letters and digits, at most 32 each.
fn valid_scope(scope: &str) -> bool {
    let id =
        |s: &str| !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_alphanumeric());
    match scope.split_once('/') {
        Some((team, channel)) => id(team) && id(channel),
        None => id(scope),
    }
}
