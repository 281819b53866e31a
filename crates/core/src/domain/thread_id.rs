//! The stable, provider-independent key of a session.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest id accepted. Slack ids are short (`slack:T0123:C0456:1712345678.123456` is 36 chars);
/// 128 leaves room for caller-chosen ids while keeping keys cheap in DynamoDB and in URLs.
pub const MAX_THREAD_ID_LEN: usize = 128;

/// Identifies one chat thread and therefore one sandbox.
///
/// Three shapes are accepted:
/// - `slack:{team}:{channel}:{thread_ts}` for a Slack thread,
/// - `slack:{team}:{channel}` for a DM or an unthreaded channel,
/// - any other caller-chosen id of 1 to 128 characters from `A-Z a-z 0-9 . _ - :`,
///   not starting with `slack:` (that prefix is reserved for the validated Slack forms) or
///   `pool:` (reserved for the tags of warm pool members, which no caller may name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ThreadId(String);

/// Why a string is not a thread id. The message names the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidThreadId {
    #[error("thread id is empty")]
    Empty,
    #[error("thread id is {len} characters long; the limit is {MAX_THREAD_ID_LEN}")]
    TooLong { len: usize },
    #[error("thread id contains {found:?} at position {position}; allowed are A-Z, a-z, 0-9, '.', '_', '-' and ':'")]
    BadCharacter { found: char, position: usize },
    #[error("Slack thread id {id:?} must look like slack:TEAM:CHANNEL or slack:TEAM:CHANNEL:THREAD_TS ({reason})")]
    BadSlackForm { id: String, reason: &'static str },
    #[error(
        "thread id {0:?} starts with {POOL_PREFIX:?}, which is reserved for warm pool members"
    )]
    Reserved(String),
}

/// The prefix of a warm pool member's tag ([`ThreadId::pool_member`]).
const POOL_PREFIX: &str = "pool:";

impl ThreadId {
    pub fn parse(raw: &str) -> Result<Self, InvalidThreadId> {
        if raw.is_empty() {
            return Err(InvalidThreadId::Empty);
        }
        let len = raw.chars().count();
        if len > MAX_THREAD_ID_LEN {
            return Err(InvalidThreadId::TooLong { len });
        }
        if let Some((position, found)) = raw
            .chars()
            .enumerate()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
        {
            return Err(InvalidThreadId::BadCharacter { found, position });
        }
        if let Some(rest) = raw.strip_prefix("slack:") {
            validate_slack_parts(raw, rest)?;
        }
        if raw.starts_with(POOL_PREFIX) {
            return Err(InvalidThreadId::Reserved(raw.to_owned()));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The tag a warm pool member's sandbox carries where a thread's would (`domain::warm_pool`).
    /// Never a thread with a record: [`ThreadId::parse`] refuses the prefix, so no caller can
    /// name one, and the tag is read back only through [`ThreadId::from_tag`].
    pub fn pool_member(member_id: &str) -> Self {
        Self(format!("{POOL_PREFIX}{member_id}"))
    }

    /// Read a sandbox's owner tag: a thread id, or a warm pool member's tag.
    pub fn from_tag(raw: &str) -> Result<Self, InvalidThreadId> {
        match raw.strip_prefix(POOL_PREFIX) {
            Some(member_id) if valid_member_id(member_id) => Ok(Self::pool_member(member_id)),
            _ => Self::parse(raw),
        }
    }

    /// The member id when this is a warm pool member's tag.
    pub fn pool_member_id(&self) -> Option<&str> {
        self.0.strip_prefix(POOL_PREFIX)
    }

    /// The id of a Slack thread, or of a DM / unthreaded channel when `thread_ts` is `None`.
    pub fn slack(
        team: &str,
        channel: &str,
        thread_ts: Option<&str>,
    ) -> Result<Self, InvalidThreadId> {
        match thread_ts {
            Some(ts) => Self::parse(&format!("slack:{team}:{channel}:{ts}")),
            None => Self::parse(&format!("slack:{team}:{channel}")),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_slack(&self) -> bool {
        self.0.starts_with("slack:")
    }

    /// The Slack workspace (team id) a Slack thread belongs to.
    pub fn slack_team(&self) -> Option<&str> {
        self.0.strip_prefix("slack:")?.split(':').next()
    }

    /// The Slack channel (or DM conversation) a Slack thread belongs to.
    pub fn slack_channel(&self) -> Option<&str> {
        self.0.strip_prefix("slack:")?.split(':').nth(1)
    }

    /// The janitor's index shard for this thread: a stable FNV-1a hash, so every process and
    /// every backend agrees without coordination.
    pub fn shard(&self, shard_count: u32) -> u32 {
        let mut hash: u32 = 0x811c_9dc5;
        for byte in self.0.bytes() {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
        hash % shard_count.max(1)
    }
}

/// Whether `id` has the shape of a warm pool member's id (`domain::warm_pool`): 32 lower-case hex
/// digits, a UUID's simple form.
pub fn valid_member_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn validate_slack_parts(raw: &str, rest: &str) -> Result<(), InvalidThreadId> {
    let bad = |reason| InvalidThreadId::BadSlackForm {
        id: raw.to_owned(),
        reason,
    };
    let parts: Vec<&str> = rest.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return Err(bad("expected two or three parts after 'slack:'"));
    }
    let is_slack_id = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    if !is_slack_id(parts[0]) {
        return Err(bad("team id must be upper-case letters and digits"));
    }
    if !is_slack_id(parts[1]) {
        return Err(bad("channel id must be upper-case letters and digits"));
    }
    if let Some(ts) = parts.get(2) {
        let (secs, micros) = ts
            .split_once('.')
            .ok_or_else(|| bad("thread_ts must be SECONDS.MICROS"))?;
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        if !digits(secs) || !digits(micros) {
            return Err(bad("thread_ts must be SECONDS.MICROS"));
        }
    }
    Ok(())
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ThreadId {
    type Error = InvalidThreadId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<ThreadId> for String {
    fn from(value: ThreadId) -> Self {
        value.0
    }
}

impl std::str::FromStr for ThreadId {
    type Err = InvalidThreadId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_caller_can_name_a_pool_member() {
        let id = "pool:0123456789abcdef0123456789abcdef";
        assert!(matches!(
            ThreadId::parse(id),
            Err(InvalidThreadId::Reserved(_))
        ));
        assert!(serde_json::from_str::<ThreadId>(&format!("{id:?}")).is_err());
        let tag = ThreadId::from_tag(id).unwrap();
        assert_eq!(
            tag.pool_member_id(),
            Some("0123456789abcdef0123456789abcdef")
        );
        assert!(ThreadId::from_tag("pool:../x").is_err(), "only member ids");
        assert_eq!(ThreadId::from_tag("api:t1").unwrap().pool_member_id(), None);
    }

    #[test]
    fn accepts_the_three_shapes() {
        for ok in [
            "slack:T0123:C0456:1712345678.123456",
            "slack:T0123:D0456",
            "agent-42",
            "tenant:a.b_c-d",
        ] {
            assert_eq!(ThreadId::parse(ok).unwrap().as_str(), ok);
        }
        assert!(ThreadId::parse("slack:T1:C2").unwrap().is_slack());
        assert_eq!(
            ThreadId::slack("T1", "C2", Some("1.2")).unwrap().as_str(),
            "slack:T1:C2:1.2"
        );
    }

    #[test]
    fn rejections_name_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("a/b", "'/' at position 1"),
            ("../etc", "'/' at position 2"),
            ("has space", "' ' at position 3"),
            ("slack:T1", "two or three parts"),
            ("slack:t1:C2", "team id"),
            ("slack:T1:", "channel id"),
            ("slack:T1:C2:notats", "SECONDS.MICROS"),
            ("slack:T1:C2:1.2:3", "two or three parts"),
        ];
        for (raw, needle) in cases {
            let err = ThreadId::parse(raw).unwrap_err().to_string();
            assert!(
                err.contains(needle),
                "{raw:?}: {err:?} should mention {needle:?}"
            );
        }
        let long = "x".repeat(MAX_THREAD_ID_LEN + 1);
        assert_eq!(
            ThreadId::parse(&long).unwrap_err(),
            InvalidThreadId::TooLong {
                len: MAX_THREAD_ID_LEN + 1
            }
        );
        assert!(ThreadId::parse(&"x".repeat(MAX_THREAD_ID_LEN)).is_ok());
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<ThreadId>("\"a b\"").is_err());
        assert_eq!(
            serde_json::from_str::<ThreadId>("\"ok\"").unwrap().as_str(),
            "ok"
        );
    }

    #[test]
    fn shards_are_stable_and_spread() {
        let id = ThreadId::parse("agent-1").unwrap();
        assert_eq!(id.shard(16), id.shard(16));
        let mut seen = std::collections::HashSet::new();
        for i in 0..200 {
            seen.insert(ThreadId::parse(&format!("t{i}")).unwrap().shard(8));
        }
        assert_eq!(seen.len(), 8, "200 ids should reach all 8 shards");
        assert_eq!(id.shard(0), 0, "a zero shard count is treated as one");
    }
}
