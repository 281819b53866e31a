//! What the DynamoDB session store needs to know: its table names, the shard count of the due-work
//! index and how long history is kept.

use std::time::Duration;

use threadbox_core::config::{ConfigError, Env};

/// Default number of due-work shards: enough to spread the janitor's queries over partitions,
/// few enough that a sweep's one query per shard stays cheap.
pub const DEFAULT_SHARDS: u32 = 8;
/// Default time history is kept for DynamoDB's TTL to remove (see [`DynamoConfig::retention`]):
/// far longer than any WebSocket replay or outbox re-drive needs it.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamoConfig {
    pub sessions_table: String,
    pub events_table: String,
    /// Shards of the due-work and unsent-event indexes. Only ever raise it on a live table:
    /// an item stays in the shard it was written with until its next write, and shards at or
    /// above a lowered count are never queried again.
    pub shards: u32,
    /// How long history is kept: an event may be removed by TTL this long after it is written,
    /// a destroyed or expired thread's record this long after it was last written (so never
    /// before any of its events), and a Slack status row this long after its last update.
    /// `None` keeps everything forever.
    pub retention: Option<Duration>,
}

impl DynamoConfig {
    pub const SESSIONS_TABLE_VAR: &'static str = "THREADBOX_SESSIONS_TABLE";
    pub const EVENTS_TABLE_VAR: &'static str = "THREADBOX_EVENTS_TABLE";
    pub const SHARDS_VAR: &'static str = "THREADBOX_DUE_SHARDS";
    pub const RETENTION_DAYS_VAR: &'static str = "THREADBOX_RECORD_RETENTION_DAYS";

    pub fn new(sessions_table: impl Into<String>, events_table: impl Into<String>) -> Self {
        Self {
            sessions_table: sessions_table.into(),
            events_table: events_table.into(),
            shards: DEFAULT_SHARDS,
            retention: Some(DEFAULT_RETENTION),
        }
    }

    /// From `THREADBOX_SESSIONS_TABLE` and `THREADBOX_EVENTS_TABLE` (required), and
    /// `THREADBOX_DUE_SHARDS` and `THREADBOX_RECORD_RETENTION_DAYS` (optional; see
    /// [`Self::retention_from_env`]).
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mut config = Self::new(
            env.required(Self::SESSIONS_TABLE_VAR)?,
            env.required(Self::EVENTS_TABLE_VAR)?,
        );
        config.shards =
            env.whole_number(Self::SHARDS_VAR, u64::from(DEFAULT_SHARDS), 1..=1024)? as u32;
        config.retention = Self::retention_from_env(env)?;
        Ok(config)
    }

    /// `THREADBOX_RECORD_RETENTION_DAYS`: a whole number of days (0: history goes as soon as
    /// TTL gets to it), `never` to keep it forever, or unset for [`DEFAULT_RETENTION`].
    pub fn retention_from_env(env: &Env) -> Result<Option<Duration>, ConfigError> {
        let Some(value) = env.get(Self::RETENTION_DAYS_VAR) else {
            return Ok(Some(DEFAULT_RETENTION));
        };
        match value.as_str() {
            "never" => Ok(None),
            days => match days.parse::<u64>() {
                Ok(days) if days <= 36_500 => Ok(Some(Duration::from_secs(days * 24 * 60 * 60))),
                _ => Err(ConfigError::Invalid {
                    variable: Self::RETENTION_DAYS_VAR,
                    reason: format!("expected a whole number of days, or `never`, got {value:?}"),
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs)
    }

    #[test]
    fn table_names_are_required_and_named_when_missing() {
        let err = DynamoConfig::from_env(&lookup(&[("THREADBOX_EVENTS_TABLE", "ev")])).unwrap_err();
        assert_eq!(err, ConfigError::Missing("THREADBOX_SESSIONS_TABLE"));
        assert!(err.to_string().contains("THREADBOX_SESSIONS_TABLE"));
    }

    #[test]
    fn optional_settings_have_defaults_and_are_checked() {
        let base = [
            ("THREADBOX_SESSIONS_TABLE", "s"),
            ("THREADBOX_EVENTS_TABLE", "e"),
        ];
        let config = DynamoConfig::from_env(&lookup(&base)).unwrap();
        assert_eq!(config, DynamoConfig::new("s", "e"));

        let mut with = base.to_vec();
        with.extend([
            ("THREADBOX_DUE_SHARDS", "16"),
            ("THREADBOX_RECORD_RETENTION_DAYS", "never"),
        ]);
        let config = DynamoConfig::from_env(&lookup(&with)).unwrap();
        assert_eq!((config.shards, config.retention), (16, None));
        with.pop();
        with.push(("THREADBOX_RECORD_RETENTION_DAYS", "0"));
        let config = DynamoConfig::from_env(&lookup(&with)).unwrap();
        assert_eq!(config.retention, Some(Duration::ZERO));

        let mut bad = base.to_vec();
        bad.push(("THREADBOX_RECORD_RETENTION_DAYS", "30d"));
        let err = DynamoConfig::from_env(&lookup(&bad)).unwrap_err();
        assert!(err.to_string().contains("or `never`"), "{err}");

        let mut bad = base.to_vec();
        bad.push(("THREADBOX_DUE_SHARDS", "0"));
        let err = DynamoConfig::from_env(&lookup(&bad)).unwrap_err();
        assert!(err.to_string().contains("THREADBOX_DUE_SHARDS"), "{err}");
    }
}
