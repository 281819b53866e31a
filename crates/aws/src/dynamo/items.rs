//! Storage records: what a session and an event look like as DynamoDB items.
//!
//! These structs are the table layout, kept apart from the domain types so the domain can change
//! shape without silently changing what is stored (and the other way round). `serde_dynamo` maps
//! them to items; nothing is mapped by hand. Index attributes (`due_shard`/`due_at`,
//! `unsent_shard`/`unsent_at`) are derived here from the domain values and are absent, not null,
//! when they do not apply: that is what makes the indexes sparse.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::{from_item, to_item};

use super::schema::{attr, EVENT_ID_GUARD_PREFIX, SESSION_KIND};
use threadbox_core::domain::{
    Cause, Hold, ImageName, LifecycleEvent, Millis, NetworkProfile, Session, Status, ThreadId,
};
use threadbox_core::ports::{StoreError, StoreKind};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::Session;

pub(super) type Item = HashMap<String, AttributeValue>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct HoldItem {
    hold_id: String,
    owner: String,
    expires_at: Millis,
}

/// One row of the sessions table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct SessionItem {
    thread_id: ThreadId,
    /// Always [`SESSION_KIND`]: the partition key of the listing index.
    kind: String,
    provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sandbox_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    provider_session_id: Option<String>,
    status: Status,
    generation: u64,
    version: u64,
    last_seq: u64,
    holds: Vec<HoldItem>,
    last_activity_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_action_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_until: Option<Millis>,
    created_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resumed_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    destroyed_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    /// The thread's network profile, as its JSON shape; absent on records older than profiles,
    /// which read as restricted.
    #[serde(default)]
    network: NetworkProfile,
    /// The thread's image; absent on records older than images, which read as `host`.
    #[serde(default)]
    image: ImageName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pool_member: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forked_from: Option<ThreadId>,
    /// Partition key of the due-work index; present exactly when `next_action_at` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due_shard: Option<u32>,
    /// Sort key of the due-work index: `next_action_at` in epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due_at: Option<i64>,
    /// DynamoDB TTL (epoch seconds), only on a destroyed or expired record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
}

impl SessionItem {
    pub(super) fn from_session(s: &Session, shards: u32, expires_at: Option<i64>) -> Self {
        let due = s.next_action_at.map(|at| (s.thread_id.shard(shards), at.0));
        Self {
            thread_id: s.thread_id.clone(),
            kind: SESSION_KIND.to_owned(),
            provider: s.provider.clone(),
            sandbox_id: s.sandbox_id.clone(),
            provider_session_id: s.provider_session_id.clone(),
            status: s.status,
            generation: s.generation,
            version: s.version,
            last_seq: s.last_seq,
            holds: s
                .holds
                .iter()
                .map(|h| HoldItem {
                    hold_id: h.hold_id.clone(),
                    owner: h.owner.clone(),
                    expires_at: h.expires_at,
                })
                .collect(),
            last_activity_at: s.last_activity_at,
            next_action_at: s.next_action_at,
            lease_until: s.lease_until,
            created_at: s.created_at,
            paused_at: s.paused_at,
            resumed_at: s.resumed_at,
            destroyed_at: s.destroyed_at,
            last_error: s.last_error.clone(),
            network: s.network.clone(),
            image: s.image.clone(),
            pool_member: s.pool_member.clone(),
            labels: s.labels.clone(),
            env: s.env.clone(),
            forked_from: s.forked_from.clone(),
            due_shard: due.map(|(shard, _)| shard),
            due_at: due.map(|(_, at)| at),
            expires_at,
        }
    }

    pub(super) fn into_session(self) -> Session {
        Session {
            thread_id: self.thread_id,
            provider: self.provider,
            sandbox_id: self.sandbox_id,
            provider_session_id: self.provider_session_id,
            status: self.status,
            generation: self.generation,
            version: self.version,
            last_seq: self.last_seq,
            holds: self
                .holds
                .into_iter()
                .map(|h| Hold {
                    hold_id: h.hold_id,
                    owner: h.owner,
                    expires_at: h.expires_at,
                })
                .collect(),
            last_activity_at: self.last_activity_at,
            next_action_at: self.next_action_at,
            lease_until: self.lease_until,
            created_at: self.created_at,
            paused_at: self.paused_at,
            resumed_at: self.resumed_at,
            destroyed_at: self.destroyed_at,
            last_error: self.last_error,
            network: self.network,
            image: self.image,
            pool_member: self.pool_member,
            labels: self.labels,
            env: self.env,
            forked_from: self.forked_from,
        }
    }
}

/// One row of the events table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct EventItem {
    thread_id: ThreadId,
    seq: u64,
    event_id: String,
    generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<Status>,
    to: Status,
    cause: Cause,
    at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sandbox_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    /// Partition key of the unsent-events index; removed by `mark_sent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unsent_shard: Option<u32>,
    /// Sort key of the unsent-events index: the event's time in epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unsent_at: Option<i64>,
    /// DynamoDB TTL (epoch seconds): when the event may be garbage-collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
}

impl EventItem {
    /// A freshly written event: unsent, so it is in the unsent index.
    pub(super) fn unsent(e: &LifecycleEvent, shards: u32, expires_at: Option<i64>) -> Self {
        Self {
            thread_id: e.thread_id.clone(),
            seq: e.seq,
            event_id: e.event_id.clone(),
            generation: e.generation,
            from: e.from,
            to: e.to,
            cause: e.cause,
            at: e.at,
            sandbox_id: e.sandbox_id.clone(),
            detail: e.detail.clone(),
            unsent_shard: Some(e.thread_id.shard(shards)),
            unsent_at: Some(e.at.0),
            expires_at,
        }
    }

    pub(super) fn into_event(self) -> LifecycleEvent {
        LifecycleEvent {
            event_id: self.event_id,
            thread_id: self.thread_id,
            seq: self.seq,
            generation: self.generation,
            from: self.from,
            to: self.to,
            cause: self.cause,
            at: self.at,
            sandbox_id: self.sandbox_id,
            detail: self.detail,
        }
    }
}

/// A marker in the events table that claims an event id, so that two events can never share one
/// (consumers deduplicate on it; a repeat would make them drop a real event). It lives under a
/// partition key no thread id can have (thread ids never contain `#`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct EventIdGuard {
    thread_id: String,
    seq: u64,
    /// The thread whose event holds the id, for operators reading the table.
    owner: ThreadId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
}

impl EventIdGuard {
    pub(super) fn for_event(e: &LifecycleEvent, expires_at: Option<i64>) -> Self {
        Self {
            thread_id: format!("{EVENT_ID_GUARD_PREFIX}{}", e.event_id),
            seq: 0,
            owner: e.thread_id.clone(),
            expires_at,
        }
    }
}

pub(super) fn encode<T: Serialize>(what: &str, value: &T) -> Result<Item, StoreError> {
    to_item(value).map_err(|e| StoreError::corrupt(STORE, format!("cannot encode {what}: {e}")))
}

/// The thread an item belongs to, for error messages about items that failed to decode.
fn named_thread(item: &Item) -> String {
    match item.get(attr::THREAD_ID) {
        Some(AttributeValue::S(id)) => id.clone(),
        _ => "<item without a thread_id>".to_owned(),
    }
}

pub(super) fn decode_session(item: Item) -> Result<Session, StoreError> {
    let thread = named_thread(&item);
    from_item::<SessionItem>(item)
        .map(SessionItem::into_session)
        .map_err(|e| StoreError::corrupt(STORE, format!("session item of thread {thread}: {e}")))
}

pub(super) fn decode_event(item: Item) -> Result<LifecycleEvent, StoreError> {
    let thread = named_thread(&item);
    let seq = match item.get(attr::SEQ) {
        Some(AttributeValue::N(n)) => n.clone(),
        _ => "?".to_owned(),
    };
    from_item::<EventItem>(item)
        .map(EventItem::into_event)
        .map_err(|e| {
            StoreError::corrupt(STORE, format!("event item {seq} of thread {thread}: {e}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::{Change, Timers};

    fn session(next: Option<i64>) -> Session {
        let (mut s, _) = Session::new_creating(
            ThreadId::parse("slack:T1:C1:1700000000.000100").unwrap(),
            "test",
            Change {
                event_id: "e1".into(),
                now: Millis(1_000),
                detail: None,
            },
            &Timers::default(),
        );
        s.holds.push(Hold {
            hold_id: "h1".into(),
            owner: "exec".into(),
            expires_at: Millis(9_000),
        });
        s.next_action_at = next.map(Millis);
        s
    }

    #[test]
    fn a_session_round_trips_through_its_item() {
        let s = session(Some(5_000));
        let item = encode("session", &SessionItem::from_session(&s, 8, None)).unwrap();
        assert_eq!(
            item.get(attr::DUE_AT),
            Some(&AttributeValue::N("5000".into()))
        );
        assert_eq!(
            item.get(attr::DUE_SHARD),
            Some(&AttributeValue::N(s.thread_id.shard(8).to_string()))
        );
        assert_eq!(
            item.get(attr::KIND),
            Some(&AttributeValue::S(SESSION_KIND.into()))
        );
        assert_eq!(decode_session(item).unwrap(), s);
    }

    #[test]
    fn a_network_profile_round_trips_and_an_old_item_reads_as_restricted() {
        use threadbox_core::domain::Allowlist;
        for network in [
            NetworkProfile::Networked {
                allow: Allowlist::parse(["pkg.test", "*.example.org", "203.0.113.0/24"]).unwrap(),
            },
            NetworkProfile::Networked {
                allow: Allowlist::everything_public(),
            },
        ] {
            let mut s = session(Some(5_000));
            s.network = network;
            let item = encode("session", &SessionItem::from_session(&s, 8, None)).unwrap();
            assert_eq!(decode_session(item).unwrap(), s);
        }
        let s = session(None);
        let mut item = encode("session", &SessionItem::from_session(&s, 8, None)).unwrap();
        assert!(item.remove("network").is_some(), "{item:?}");
        assert_eq!(
            decode_session(item).unwrap().network,
            NetworkProfile::Restricted
        );
    }

    #[test]
    fn an_image_round_trips_and_an_old_item_reads_as_host() {
        let mut s = session(Some(5_000));
        s.image = ImageName::parse("python-3.12").unwrap();
        let item = encode("session", &SessionItem::from_session(&s, 8, None)).unwrap();
        assert_eq!(
            item.get("image"),
            Some(&AttributeValue::S("python-3.12".into()))
        );
        assert_eq!(decode_session(item.clone()).unwrap(), s);
        let mut old = item;
        assert!(old.remove("image").is_some());
        assert!(decode_session(old.clone()).unwrap().image.is_host());
        old.insert("image".into(), AttributeValue::S("../etc".into()));
        assert!(
            decode_session(old).is_err(),
            "a bad name is a corrupt record"
        );
    }

    #[test]
    fn nothing_due_means_no_index_attributes_at_all() {
        let s = session(None);
        let item = encode("session", &SessionItem::from_session(&s, 8, None)).unwrap();
        assert!(!item.contains_key(attr::DUE_SHARD), "{item:?}");
        assert!(!item.contains_key(attr::DUE_AT), "{item:?}");
        assert!(
            item.values().all(|v| !v.is_null()),
            "absent, not null: {item:?}"
        );
        assert_eq!(decode_session(item).unwrap(), s);
    }

    /// The first event of thread `t-1`, created at 2,000 ms.
    fn first_event(detail: Option<&str>) -> LifecycleEvent {
        let (_, e) = Session::new_creating(
            ThreadId::parse("t-1").unwrap(),
            "test",
            Change {
                event_id: "ev-1".into(),
                now: Millis(2_000),
                detail: detail.map(Into::into),
            },
            &Timers::default(),
        );
        e
    }

    #[test]
    fn an_event_round_trips_and_starts_unsent() {
        let e = first_event(Some("why"));
        let item = encode("event", &EventItem::unsent(&e, 4, Some(99))).unwrap();
        assert_eq!(
            item.get(attr::UNSENT_AT),
            Some(&AttributeValue::N("2000".into()))
        );
        assert_eq!(
            item.get(attr::EXPIRES_AT),
            Some(&AttributeValue::N("99".into()))
        );
        assert!(
            !item.contains_key("from"),
            "a first event has no from state"
        );
        assert_eq!(decode_event(item).unwrap(), e);
    }

    #[test]
    fn a_guard_key_can_never_be_a_thread_id() {
        let e = first_event(None);
        let guard = EventIdGuard::for_event(&e, None);
        assert!(ThreadId::parse(&guard.thread_id).is_err());
    }

    #[test]
    fn a_session_item_missing_a_field_is_corrupt_and_named() {
        let s = session(None);
        let mut item = encode("session", &SessionItem::from_session(&s, 8, None)).unwrap();
        item.remove("provider");
        let err = decode_session(item).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("slack:T1:C1:1700000000.000100"), "{text}");
        assert!(text.contains("provider"), "{text}");
    }
}
