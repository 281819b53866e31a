//! Checkpoints: point-in-time copies of a thread's `/home/user`, kept per thread within an
//! operator's limits (the last N, and a byte cap), oldest dropped first.
//!
//! A checkpoint's id is threadbox's own (`cp-` and 20 lowercase hex digits, from a random
//! source), never the caller's: it names the copy on the provider's side too, so it must be
//! safe as a file name and unguessable across threads. A checkpoint belongs to one thread; the
//! store finds it only under that thread, so another thread's checkpoint is unknown there.

use serde::{Deserialize, Serialize};

use super::{Millis, ThreadId};

/// The longest label a checkpoint may carry, in characters.
pub const MAX_LABEL_CHARS: usize = 200;
/// The most checkpoints an operator may keep per thread.
pub const MAX_CHECKPOINTS_PER_THREAD: u32 = 100;
/// The default of how many checkpoints a thread keeps.
pub const DEFAULT_CHECKPOINTS_KEPT: u32 = 20;
/// The default byte cap of a thread's checkpoints together: 2 GiB.
pub const DEFAULT_CHECKPOINT_BYTES: u64 = 2 << 30;
/// The variables setting the limits.
pub const CHECKPOINTS_KEPT_VAR: &str = "THREADBOX_CHECKPOINTS_KEPT";
pub const CHECKPOINT_BYTES_VAR: &str = "THREADBOX_CHECKPOINT_BYTES";

const ID_PREFIX: &str = "cp-";
const ID_HEX: usize = 20;

/// A checkpoint's id: `cp-` and 20 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CheckpointId(String);

impl CheckpointId {
    /// A fresh random id.
    pub fn generate() -> Self {
        let mut hex = uuid::Uuid::new_v4().simple().to_string();
        hex.truncate(ID_HEX);
        Self(format!("{ID_PREFIX}{hex}"))
    }

    /// `text` as an id, or what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let valid = text.strip_prefix(ID_PREFIX).is_some_and(|hex| {
            hex.len() == ID_HEX
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if valid {
            Ok(Self(text.to_owned()))
        } else {
            let shown: String = text.chars().take(40).collect();
            Err(format!(
                "{shown:?} is not a checkpoint id (cp- and {ID_HEX} lowercase hex digits)"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CheckpointId {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text)
    }
}

impl From<CheckpointId> for String {
    fn from(id: CheckpointId) -> String {
        id.0
    }
}

impl std::fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a checkpoint was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointCause {
    /// Someone asked for it (the API, MCP's `checkpoint` tool).
    User,
    /// Taken before a turn ran: a Slack code block, an exec with `"checkpoint": true`.
    Turn,
}

/// One checkpoint as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub id: CheckpointId,
    pub thread_id: ThreadId,
    pub created_at: Millis,
    /// The bytes the copy holds (its files' allocated size).
    pub bytes: u64,
    /// The files, directories and links it holds.
    pub files: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub cause: CheckpointCause,
}

/// A label checked: at most [`MAX_LABEL_CHARS`] characters, no control characters. An empty
/// label is no label.
pub fn check_label(label: Option<&str>) -> Result<Option<String>, String> {
    let Some(label) = label.map(str::trim).filter(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let chars = label.chars().count();
    if chars > MAX_LABEL_CHARS {
        return Err(format!(
            "the label is {chars} characters; at most {MAX_LABEL_CHARS}"
        ));
    }
    if label.chars().any(char::is_control) {
        return Err("the label may not contain control characters".into());
    }
    Ok(Some(label.to_owned()))
}

/// How many checkpoints a thread keeps, and how many bytes they may hold together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointRetention {
    /// 1..=[`MAX_CHECKPOINTS_PER_THREAD`].
    pub keep: u32,
    pub max_bytes: u64,
}

impl Default for CheckpointRetention {
    fn default() -> Self {
        Self {
            keep: DEFAULT_CHECKPOINTS_KEPT,
            max_bytes: DEFAULT_CHECKPOINT_BYTES,
        }
    }
}

impl CheckpointRetention {
    /// Limits checked: at least one checkpoint of at least one MiB, at most
    /// [`MAX_CHECKPOINTS_PER_THREAD`].
    pub fn new(keep: u32, max_bytes: u64) -> Result<Self, String> {
        if !(1..=MAX_CHECKPOINTS_PER_THREAD).contains(&keep) {
            return Err(format!(
                "checkpoints kept per thread must be 1 to {MAX_CHECKPOINTS_PER_THREAD}, not {keep}"
            ));
        }
        if max_bytes < 1 << 20 {
            return Err(format!(
                "the checkpoint byte cap must be at least 1048576 (1 MiB), not {max_bytes}"
            ));
        }
        Ok(Self { keep, max_bytes })
    }

    /// Of a thread's checkpoints (any order), the ones to drop so that what stays is within
    /// these limits: oldest first (by `created_at`, then id), never `keep_id` (the one just
    /// taken, which the caller has checked fits on its own).
    pub fn to_drop<'a>(
        &self,
        checkpoints: &'a [Checkpoint],
        keep_id: Option<&CheckpointId>,
    ) -> Vec<&'a Checkpoint> {
        let mut oldest_first: Vec<&Checkpoint> = checkpoints.iter().collect();
        oldest_first.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        let mut count = oldest_first.len();
        let mut bytes: u64 = oldest_first.iter().map(|c| c.bytes).sum();
        let mut dropped = Vec::new();
        for checkpoint in oldest_first {
            if count <= self.keep as usize && bytes <= self.max_bytes {
                break;
            }
            if Some(&checkpoint.id) == keep_id {
                continue;
            }
            count -= 1;
            bytes -= checkpoint.bytes;
            dropped.push(checkpoint);
        }
        dropped
    }
}

/// Newest first (by `created_at`, then id descending): the order every listing shows.
pub fn newest_first(checkpoints: &mut [Checkpoint]) {
    checkpoints.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(n: i64, bytes: u64) -> Checkpoint {
        Checkpoint {
            id: CheckpointId::parse(&format!("cp-{n:020x}")).unwrap(),
            thread_id: ThreadId::parse("t-1").unwrap(),
            created_at: Millis(n),
            bytes,
            files: 1,
            label: None,
            cause: CheckpointCause::User,
        }
    }

    #[test]
    fn ids_are_checked() {
        let id = CheckpointId::generate();
        assert_eq!(CheckpointId::parse(id.as_str()).unwrap(), id);
        for bad in [
            "",
            "cp-",
            "cp-ABCDEF0123456789abcd",
            "cp-../../../etc/passwd",
            "x",
        ] {
            assert!(CheckpointId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn labels_are_checked() {
        assert_eq!(check_label(Some("  ")).unwrap(), None);
        assert_eq!(check_label(Some(" a ")).unwrap().as_deref(), Some("a"));
        assert!(check_label(Some("a\nb")).is_err());
        assert!(check_label(Some(&"é".repeat(201))).is_err());
    }

    #[test]
    fn retention_drops_oldest_first_by_count_and_bytes() {
        let limits = CheckpointRetention::new(2, 1 << 20).unwrap();
        let all = [cp(3, 10), cp(1, 10), cp(2, 10)];
        let dropped: Vec<i64> = limits
            .to_drop(&all, None)
            .iter()
            .map(|c| c.created_at.0)
            .collect();
        assert_eq!(dropped, vec![1]);
        let big = [cp(1, 600 << 10), cp(2, 300 << 10), cp(3, 600 << 10)];
        let dropped: Vec<i64> = limits
            .to_drop(&big, None)
            .iter()
            .map(|c| c.created_at.0)
            .collect();
        assert_eq!(dropped, vec![1], "bytes: the oldest go until the rest fits");
        let keep = big[0].id.clone();
        let dropped: Vec<i64> = limits
            .to_drop(&big, Some(&keep))
            .iter()
            .map(|c| c.created_at.0)
            .collect();
        assert_eq!(dropped, vec![2, 3], "the kept one is never dropped");
        assert!(CheckpointRetention::new(0, 1 << 20).is_err());
        assert!(CheckpointRetention::new(101, 1 << 20).is_err());
        assert!(CheckpointRetention::new(5, 10).is_err());
    }
}
