//! Which threads a live-events subscriber may watch: the scope a subscription token grants.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

use super::ThreadId;

/// How many threads one scope may name. A dashboard watching more than this wants `Any`; the
/// bound keeps tokens short enough for a query string.
pub const MAX_SCOPE_THREADS: usize = 50;

/// The wildcard, as it is written in tokens and in `POST /v1/tokens`. `*` is not a valid
/// thread-id character, so it cannot be mistaken for a thread.
pub const ANY_THREAD: &str = "*";

/// The threads a token holder may subscribe to.
///
/// Serialized as `"*"` for [`ThreadScope::Any`] and as a JSON array of thread ids otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThreadScope {
    /// Every thread: for operators and dashboards.
    Any,
    /// Exactly these threads (1 to [`MAX_SCOPE_THREADS`], no repeats).
    Only(Vec<ThreadId>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidScope {
    #[error("a token must name at least one thread (or \"*\" for all)")]
    Empty,
    #[error("a token may name at most {MAX_SCOPE_THREADS} threads; got {0} (use \"*\" for all)")]
    TooMany(usize),
}

impl ThreadScope {
    /// A scope of exactly `threads`; repeats are dropped, order is kept.
    pub fn only(threads: impl IntoIterator<Item = ThreadId>) -> Result<Self, InvalidScope> {
        let mut unique: Vec<ThreadId> = Vec::new();
        for thread in threads {
            if !unique.contains(&thread) {
                unique.push(thread);
            }
        }
        match unique.len() {
            0 => Err(InvalidScope::Empty),
            n if n > MAX_SCOPE_THREADS => Err(InvalidScope::TooMany(n)),
            _ => Ok(Self::Only(unique)),
        }
    }

    pub fn allows(&self, thread: &ThreadId) -> bool {
        match self {
            Self::Any => true,
            Self::Only(threads) => threads.contains(thread),
        }
    }
}

impl fmt::Display for ThreadScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("all threads"),
            Self::Only(threads) => {
                for (i, t) in threads.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(t.as_str())?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for ThreadScope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Any => serializer.serialize_str(ANY_THREAD),
            Self::Only(threads) => {
                let mut seq = serializer.serialize_seq(Some(threads.len()))?;
                for t in threads {
                    seq.serialize_element(t)?;
                }
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ThreadScope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScopeVisitor;

        impl<'de> Visitor<'de> for ScopeVisitor {
            type Value = ThreadScope;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"*\" or a list of thread ids")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ThreadScope, E> {
                if v == ANY_THREAD {
                    Ok(ThreadScope::Any)
                } else {
                    Err(E::custom(format!(
                        "threads must be \"*\" or a list of thread ids, not the string {v:?}"
                    )))
                }
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ThreadScope, A::Error> {
                let mut threads = Vec::new();
                while let Some(t) = seq.next_element::<ThreadId>()? {
                    // Bound the work a hostile list can cause before the length check below.
                    if threads.len() > MAX_SCOPE_THREADS {
                        return Err(de::Error::custom(InvalidScope::TooMany(threads.len() + 1)));
                    }
                    threads.push(t);
                }
                ThreadScope::only(threads).map_err(de::Error::custom)
            }
        }

        deserializer.deserialize_any(ScopeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn t(s: &str) -> ThreadId {
        ThreadId::parse(s).unwrap()
    }

    #[test]
    fn serializes_as_star_or_list() {
        assert_eq!(serde_json::to_value(ThreadScope::Any).unwrap(), json!("*"));
        let only = ThreadScope::only([t("a"), t("b"), t("a")]).unwrap();
        assert_eq!(serde_json::to_value(&only).unwrap(), json!(["a", "b"]));
        for scope in [ThreadScope::Any, only] {
            let text = serde_json::to_string(&scope).unwrap();
            assert_eq!(serde_json::from_str::<ThreadScope>(&text).unwrap(), scope);
        }
    }

    #[test]
    fn bad_scopes_are_refused_with_a_reason() {
        for (raw, why) in [
            (json!([]), "at least one thread"),
            (json!("all"), "not the string \"all\""),
            (json!(["ok", "bad id"]), "thread id contains ' '"),
            (json!(42), "\"*\" or a list"),
        ] {
            let err = serde_json::from_value::<ThreadScope>(raw.clone()).unwrap_err();
            assert!(err.to_string().contains(why), "{raw}: {err}");
        }
        let many: Vec<String> = (0..=MAX_SCOPE_THREADS).map(|i| format!("t{i}")).collect();
        let err = serde_json::from_value::<ThreadScope>(json!(many)).unwrap_err();
        assert!(err.to_string().contains("at most 50"), "{err}");
    }

    #[test]
    fn allows_only_what_it_names() {
        let only = ThreadScope::only([t("a")]).unwrap();
        assert!(only.allows(&t("a")));
        assert!(!only.allows(&t("b")));
        assert!(ThreadScope::Any.allows(&t("b")));
        assert_eq!(only.to_string(), "a");
    }
}
