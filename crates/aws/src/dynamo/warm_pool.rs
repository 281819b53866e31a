//! The warm pool store on the sessions table: one item per member beside the sessions, so a
//! claim is one `TransactWriteItems` over the member and the thread it binds.
//!
//! A member's partition key is `#pool#{member_id}` (a thread id never contains `#`, so it can
//! never be a session's). While the member is `creating` or `ready` its `kind` is
//! `pool#{pool}#{state}`, which puts its key in the keys-only listing index under a partition of
//! its own: [`WarmPoolStore::unclaimed`] is a `Query` of the two partitions and a consistent
//! `BatchGetItem` of the keys, as the operator listing is, and [`WarmPoolStore::ready`] (what a
//! new thread's create pays) queries the ready partition's keys and reads only the few it picks.
//! A claimed member has no `kind`, so it leaves the index; it has no `due_shard`/`due_at`, so it is never in the due index.
//!
//! Every change is conditional on the stored `state`: the janitor retiring a member and a thread
//! claiming it cannot both win.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure,
};
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::from_item;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;

use super::errors::{
    cancellation_reasons, condition_held, first_failure, reason_codes, unavailable,
};
use super::items::{encode, Item};
use super::lost_answers::{put_landed, request_token, stamped, transaction_landed};
use super::schema::{attr, LIST_INDEX};
use super::session_store::{
    conditional_put, names, sent_items, sent_refs, string, DynamoSessionStore, Names, QueryPage,
};
use threadbox_core::domain::{
    ImageName, LifecycleEvent, MemberClaim, MemberState, Millis, NetworkProfile, PoolMember,
    Session, ThreadId,
};
use threadbox_core::ports::{PoolClaim, StoreError, StoreKind, WarmPoolStore, WriteCondition};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::WarmPool;

/// Partition-key prefix of a member's item in the sessions table.
const MEMBER_KEY_PREFIX: &str = "#pool#";
/// Prefix of `kind` on an unclaimed member: its pool's and state's partition of the listing
/// index.
const POOL_KIND_PREFIX: &str = "pool#";
/// The member attribute the conditions read.
const STATE: &str = "state";
/// `BatchGetItem` takes at most 100 keys.
const MAX_BATCH_GET: usize = 100;

fn member_key(member_id: &str) -> String {
    format!("{MEMBER_KEY_PREFIX}{member_id}")
}

fn pool_kind(pool: &str, state: MemberState) -> String {
    format!("{POOL_KIND_PREFIX}{pool}#{}", state.as_str())
}

/// One warm pool member's row of the sessions table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PoolMemberItem {
    /// `#pool#{member_id}`.
    thread_id: String,
    /// `pool#{pool}#{state}` while unclaimed, absent once claimed: the listing index's partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    member_id: String,
    pool: String,
    network: NetworkProfile,
    /// Absent on members from before images, which are of the host image.
    #[serde(default)]
    image: ImageName,
    state: MemberState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sandbox_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    provider_session_id: Option<String>,
    created_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claimed: Option<ClaimItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ClaimItem {
    thread_id: ThreadId,
    generation: u64,
    at: Millis,
}

impl PoolMemberItem {
    fn from_member(m: &PoolMember) -> Self {
        Self {
            thread_id: member_key(&m.member_id),
            kind: (m.state != MemberState::Claimed).then(|| pool_kind(&m.pool, m.state)),
            member_id: m.member_id.clone(),
            pool: m.pool.clone(),
            network: m.network.clone(),
            image: m.image.clone(),
            state: m.state,
            sandbox_id: m.sandbox_id.clone(),
            provider_session_id: m.provider_session_id.clone(),
            created_at: m.created_at,
            claimed: m.claimed.as_ref().map(|c| ClaimItem {
                thread_id: c.thread_id.clone(),
                generation: c.generation,
                at: c.at,
            }),
        }
    }

    fn into_member(self) -> PoolMember {
        PoolMember {
            member_id: self.member_id,
            pool: self.pool,
            network: self.network,
            image: self.image,
            state: self.state,
            sandbox_id: self.sandbox_id,
            provider_session_id: self.provider_session_id,
            created_at: self.created_at,
            claimed: self.claimed.map(|c| MemberClaim {
                thread_id: c.thread_id,
                generation: c.generation,
                at: c.at,
            }),
        }
    }
}

/// A member's item, stamped with a write id of its own so a resend that finds it knows it is
/// its own (`lost_answers`).
fn encode_member(member: &PoolMember) -> Result<Item, StoreError> {
    encode("pool member", &PoolMemberItem::from_member(member)).map(stamped)
}

fn decode_member(item: Item) -> Result<PoolMember, StoreError> {
    let key = match item.get(attr::THREAD_ID) {
        Some(AttributeValue::S(key)) => key.clone(),
        _ => "<item without a thread_id>".to_owned(),
    };
    from_item::<PoolMemberItem>(item)
        .map(PoolMemberItem::into_member)
        .map_err(|e| StoreError::corrupt(STORE, format!("pool member item {key}: {e}")))
}

/// The condition "the stored state is `state`" (as `#state = :state`).
fn state_is(state: MemberState) -> (&'static str, Names, Item) {
    (
        "#state = :state",
        names(&[("#state", STATE)]),
        HashMap::from([(":state".to_owned(), string(state.as_str()))]),
    )
}

/// What a cancelled claim means. The member's put is item 0, the session's item 1, its events
/// the rest; the first item whose condition failed decides, as the SQLite store checks the
/// member first. A `TransactionConflict` (another transaction on one of the items) reads as the
/// member taken: the claimer tries another, and its next write learns whether its session moved.
fn claim_outcome(reasons: &[CancellationReason]) -> Result<PoolClaim, StoreError> {
    if reasons
        .iter()
        .any(|r| r.code() == Some("TransactionConflict"))
    {
        return Ok(PoolClaim::MemberTaken);
    }
    match first_failure(reasons) {
        Some((0, "ConditionalCheckFailed")) => Ok(PoolClaim::MemberTaken),
        Some((_, "ConditionalCheckFailed")) => Ok(PoolClaim::SessionChanged),
        _ => Err(StoreError::unavailable(
            STORE,
            format!(
                "DynamoDB cancelled a warm pool claim ({})",
                reason_codes(reasons)
            ),
        )),
    }
}

impl DynamoSessionStore {
    /// Put `member`'s item, only if `condition` holds; `Ok(false)` when it did not (a write of
    /// ours whose answer was lost counts as written).
    async fn put_member(
        &self,
        member: &PoolMember,
        (expression, names, values): (&str, Names, Item),
    ) -> Result<bool, StoreError> {
        let item = encode_member(member)?;
        self.count_write();
        let result = self
            .client()
            .put_item()
            .table_name(&self.config().sessions_table)
            .set_item(Some(item.clone()))
            .condition_expression(expression)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        put_landed(STORE, "PutItem", &item, result)
    }

    /// Every key in the partition of the listing index of `pool`'s members in `state`, in
    /// member-id order.
    async fn pool_keys(&self, pool: &str, state: MemberState) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        let mut start = None;
        loop {
            let (keys, last) = self
                .query_page(QueryPage {
                    table: &self.config().sessions_table,
                    index: Some(LIST_INDEX),
                    condition: "#k = :kind",
                    names: names(&[("#k", attr::KIND)]),
                    values: HashMap::from([(":kind".to_owned(), string(pool_kind(pool, state)))]),
                    start,
                    limit: 1_000,
                })
                .await?;
            ids.extend(keys.iter().filter_map(|k| match k.get(attr::THREAD_ID) {
                Some(AttributeValue::S(id)) => Some(id.clone()),
                _ => None,
            }));
            match last {
                Some(key) => start = Some(key),
                None => return Ok(ids),
            }
        }
    }
}

#[async_trait]
impl WarmPoolStore for DynamoSessionStore {
    async fn add_member(&self, member: &PoolMember) -> Result<(), StoreError> {
        let fresh = self
            .put_member(
                member,
                (
                    "attribute_not_exists(#t)",
                    names(&[("#t", attr::THREAD_ID)]),
                    Item::new(),
                ),
            )
            .await?;
        if fresh {
            Ok(())
        } else {
            Err(StoreError::unavailable(
                STORE,
                format!("pool member {} already has a record", member.member_id),
            ))
        }
    }

    async fn update_member(
        &self,
        member: &PoolMember,
        expected: MemberState,
    ) -> Result<bool, StoreError> {
        self.put_member(member, state_is(expected)).await
    }

    async fn remove_member(
        &self,
        member_id: &str,
        expected: MemberState,
    ) -> Result<bool, StoreError> {
        let (expression, names, values) = state_is(expected);
        self.count_write();
        let result = self
            .client()
            .delete_item()
            .table_name(&self.config().sessions_table)
            .key(attr::THREAD_ID, string(member_key(member_id)))
            .condition_expression(expression)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        condition_held(
            STORE,
            "DeleteItem",
            result,
            DeleteItemError::is_conditional_check_failed_exception,
        )
    }

    async fn member(&self, member_id: &str) -> Result<Option<PoolMember>, StoreError> {
        let output = self
            .client()
            .get_item()
            .table_name(&self.config().sessions_table)
            .key(attr::THREAD_ID, string(member_key(member_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable(STORE, "GetItem", e))?;
        self.count_read(usize::from(output.item.is_some()));
        output.item.map(decode_member).transpose()
    }

    /// All of the pool's keys from the listing index (a claimed member is not there; the pool is
    /// small, so this is one page), then the items by consistent `BatchGetItem`s of at most 100
    /// keys: a member claimed or removed since the index saw it is left out.
    async fn unclaimed(&self, pool: &str, limit: usize) -> Result<Vec<PoolMember>, StoreError> {
        let mut keys = self.pool_keys(pool, MemberState::Creating).await?;
        keys.extend(self.pool_keys(pool, MemberState::Ready).await?);
        let mut members = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_BATCH_GET) {
            for item in self.get_items(chunk).await?.into_values() {
                let member = decode_member(item)?;
                if member.state != MemberState::Claimed {
                    members.push(member);
                }
            }
        }
        members.sort_by(|a, b| (a.created_at, &a.member_id).cmp(&(b.created_at, &b.member_id)));
        members.truncate(limit);
        Ok(members)
    }

    /// The ready partition's keys (one keys-only page: a pool is at most 64), `limit` of them
    /// from a random place, then those items by one consistent `BatchGetItem`: a member claimed
    /// since the index saw it is left out.
    async fn ready(&self, pool: &str, limit: usize) -> Result<Vec<PoolMember>, StoreError> {
        let mut keys = self.pool_keys(pool, MemberState::Ready).await?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let start = (uuid::Uuid::new_v4().as_u128() % keys.len() as u128) as usize;
        keys.rotate_left(start);
        keys.truncate(limit.clamp(1, MAX_BATCH_GET));
        let mut members = Vec::with_capacity(keys.len());
        for item in self.get_items(&keys).await?.into_values() {
            let member = decode_member(item)?;
            if member.state == MemberState::Ready {
                members.push(member);
            }
        }
        Ok(members)
    }

    /// One `TransactWriteItems`: the member on `state = ready`, the session on its version, and
    /// the events (each on its key being free).
    async fn claim_member(
        &self,
        member: &PoolMember,
        session: &Session,
        expected_version: u64,
        events: &[LifecycleEvent],
    ) -> Result<PoolClaim, StoreError> {
        debug_assert_eq!(member.state, MemberState::Claimed);
        let (expression, names, values) = state_is(MemberState::Ready);
        let mut items = vec![
            conditional_put(
                &self.config().sessions_table,
                encode_member(member)?,
                (expression, names, Some(values)),
            )?,
            self.session_put(session, WriteCondition::read_at(session, expected_version))?,
        ];
        items.extend(self.event_puts(events)?);
        let sent = sent_items(&items);
        self.count_write();
        match self
            .client()
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(request_token())
            .send()
            .await
        {
            Ok(_) => Ok(PoolClaim::Bound),
            Err(e) => {
                let reasons = cancellation_reasons(STORE, e)?;
                // An earlier attempt of this very claim landed and its answer was lost.
                if transaction_landed(&reasons, &sent_refs(&sent)) {
                    return Ok(PoolClaim::Bound);
                }
                claim_outcome(&reasons)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str) -> CancellationReason {
        CancellationReason::builder().code(code).build()
    }

    #[test]
    fn a_claim_is_decided_by_the_first_failed_write() {
        let ccf = || reason("ConditionalCheckFailed");
        let none = || reason("None");
        assert_eq!(
            claim_outcome(&[ccf(), none(), none()]).unwrap(),
            PoolClaim::MemberTaken
        );
        assert_eq!(
            claim_outcome(&[ccf(), ccf()]).unwrap(),
            PoolClaim::MemberTaken
        );
        assert_eq!(
            claim_outcome(&[none(), ccf(), none()]).unwrap(),
            PoolClaim::SessionChanged
        );
        assert_eq!(
            claim_outcome(&[none(), none(), ccf()]).unwrap(),
            PoolClaim::SessionChanged,
            "an event's key taken means the thread moved on"
        );
        assert_eq!(
            claim_outcome(&[none(), reason("TransactionConflict")]).unwrap(),
            PoolClaim::MemberTaken
        );
        let err = claim_outcome(&[reason("ThrottlingError"), none()]).unwrap_err();
        assert!(
            matches!(&err, StoreError::Unavailable(m) if m.detail.contains("ThrottlingError, None")),
            "{err:?}"
        );
    }

    #[test]
    fn a_member_round_trips_and_leaves_the_index_when_claimed() {
        let mut member = PoolMember::creating(NetworkProfile::Restricted, Millis(1_000));
        let item = encode_member(&member).unwrap();
        assert_eq!(
            item.get(attr::THREAD_ID),
            Some(&string(format!("#pool#{}", member.member_id)))
        );
        assert!(ThreadId::parse(&member_key(&member.member_id)).is_err());
        assert_eq!(
            item.get(attr::KIND),
            Some(&string("pool#restricted#creating"))
        );
        assert_eq!(item.get(STATE), Some(&string("creating")));
        assert!(!item.contains_key(attr::DUE_SHARD) && !item.contains_key(attr::DUE_AT));
        assert!(item.values().all(|v| !v.is_null()), "absent, not null");
        assert_eq!(decode_member(item).unwrap(), member);

        member.state = MemberState::Claimed;
        member.sandbox_id = Some("sb-1".into());
        member.claimed = Some(MemberClaim {
            thread_id: ThreadId::parse("api:t1").unwrap(),
            generation: 1,
            at: Millis(2_000),
        });
        let item = encode_member(&member).unwrap();
        assert!(!item.contains_key(attr::KIND));
        assert_eq!(item.get(STATE), Some(&string("claimed")));
        assert_eq!(decode_member(item).unwrap(), member);
    }
}
