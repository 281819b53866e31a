//! `DynamoSessionStore`: the session store port on two DynamoDB tables.
//!
//! Every write is conditional: a new session on `attribute_not_exists(thread_id)`, every later
//! one on `version = :expected`. A write that carries events is one `TransactWriteItems` (the
//! session, each event on `attribute_not_exists`, and each event id's guard item), so a session
//! never moves without its events and no event is written by a loser. A write without events is
//! a single conditional `PutItem`, half the cost of a transaction, which keeps resolving an
//! active thread at two requests: one `GetItem`, one `PutItem`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use aws_sdk_dynamodb::Client;
use futures::StreamExt;

use super::config::DynamoConfig;

use super::errors::{cancellation_reasons, classify, unavailable, Cancelled};
use super::items::{
    decode_event, decode_session, encode, EventIdGuard, EventItem, Item, SessionItem,
};
use super::lost_answers::{put_landed, request_token, stamped, transaction_landed};
use super::schema::{attr, DUE_INDEX, LIST_INDEX, SESSION_KIND, UNSENT_INDEX};
use super::ttl::{expiry_in, now_secs};
use threadbox_core::domain::{LifecycleEvent, Millis, Session, ThreadId};
use threadbox_core::ports::{
    Page, SessionStore, StatsCounter, StoreError, StoreKind, StoreStats, WriteCondition,
};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::Session;

/// `TransactWriteItems` takes at most 100 items: the session plus two per event.
const MAX_EVENTS_PER_WRITE: usize = 49;
/// `BatchGetItem` takes at most 100 keys, so a listing page is at most that long.
const MAX_LIST_PAGE: usize = 100;
/// How many `mark_sent` updates run at once.
const MARK_SENT_CONCURRENCY: usize = 8;

/// The session store on DynamoDB. Cheap to clone; build one per process.
#[derive(Clone)]
pub struct DynamoSessionStore {
    client: Client,
    config: Arc<DynamoConfig>,
    counters: Arc<StatsCounter>,
}

impl DynamoSessionStore {
    pub fn new(client: Client, mut config: DynamoConfig) -> Self {
        config.shards = config.shards.max(1);
        Self {
            client,
            config: Arc::new(config),
            counters: Arc::default(),
        }
    }

    /// A store whose client is built from the SDK configuration (see `adapters::aws::load_config`).
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig, config: DynamoConfig) -> Self {
        Self::new(Client::new(sdk), config)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn config(&self) -> &DynamoConfig {
        &self.config
    }

    pub(super) fn count_read(&self, rows: usize) {
        self.counters.read(rows);
    }

    pub(super) fn count_write(&self) {
        self.counters.write();
    }

    /// When history written now may be removed by TTL (epoch seconds), if ever.
    fn expiry(&self) -> Option<i64> {
        self.config.retention.map(expiry_in)
    }

    /// The session's item. A destroyed or expired record carries a TTL, a live one none: the
    /// write that retires a thread also writes (or follows) its last event, so the record
    /// expires after every event it has, and a later resolve that finds no record starts over
    /// at seq 1 while leftover expired events, which TTL may take days to delete, are treated
    /// as absent (see `event_puts` and `events_after`). A retired record brought back to life
    /// is written again without one.
    /// The item is stamped with a write id of its own, so a resend that finds it knows it is
    /// its own (`lost_answers`).
    fn session_item(&self, session: &Session) -> Result<Item, StoreError> {
        let expires_at = session.status.is_retired().then(|| self.expiry()).flatten();
        encode(
            "session",
            &SessionItem::from_session(session, self.config.shards, expires_at),
        )
        .map(stamped)
    }

    /// The puts for `events` and their id guards, each only if its key is free.
    pub(super) fn event_puts(
        &self,
        events: &[LifecycleEvent],
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        if events.len() > MAX_EVENTS_PER_WRITE {
            return Err(StoreError::unavailable(STORE, format!(
                "{} events in one write; DynamoDB's transaction limit allows {MAX_EVENTS_PER_WRITE}",
                events.len()
            )));
        }
        let expires_at = self.expiry();
        let mut puts = Vec::with_capacity(events.len() * 2);
        for event in events {
            let item = encode(
                "event",
                &EventItem::unsent(event, self.config.shards, expires_at),
            )?;
            let guard = encode(
                "event id guard",
                &EventIdGuard::for_event(event, expires_at),
            )?;
            for item in [item, guard] {
                puts.push(self.put_new(&self.config.events_table, item)?);
            }
        }
        Ok(puts)
    }

    /// A put that succeeds only where no live item has the key: an item whose TTL has passed
    /// (an earlier life's event, not yet deleted by DynamoDB) counts as absent.
    fn put_new(&self, table: &str, item: Item) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#t) OR #e < :now")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .expression_attribute_names("#t", attr::THREAD_ID)
            .expression_attribute_names("#e", attr::EXPIRES_AT)
            .expression_attribute_values(":now", number(now_secs()))
            .build()
            .map_err(|e| StoreError::unavailable(STORE, format!("cannot build a put: {e}")))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// Write `session` under `condition`, alone or with its events in one transaction. `Ok(false)`
    /// when the condition (or an event's) failed: someone else wrote first. A write of ours that
    /// landed but whose answer was lost reads as written (`lost_answers`).
    async fn conditional_write(
        &self,
        session: &Session,
        events: &[LifecycleEvent],
        condition: WriteCondition,
    ) -> Result<bool, StoreError> {
        let item = self.session_item(session)?;
        let (expression, names, values) = condition_parts(condition);
        self.count_write();
        if events.is_empty() {
            let result = self
                .client
                .put_item()
                .table_name(&self.config.sessions_table)
                .set_item(Some(item.clone()))
                .condition_expression(expression)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            return put_landed(STORE, "PutItem", &item, result);
        }
        let mut items = vec![conditional_put(
            &self.config.sessions_table,
            item,
            (expression, names, values),
        )?];
        items.extend(self.event_puts(events)?);
        let sent = sent_items(&items);
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(request_token())
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) => {
                let reasons = cancellation_reasons(STORE, e)?;
                if transaction_landed(&reasons, &sent_refs(&sent)) {
                    return Ok(true);
                }
                match classify(&reasons) {
                    Cancelled::Conflict => Ok(false),
                    Cancelled::Other(codes) => Err(StoreError::unavailable(
                        STORE,
                        format!(
                            "DynamoDB cancelled the write of thread {} ({codes})",
                            session.thread_id
                        ),
                    )),
                }
            }
        }
    }

    /// `session`'s item as one write of a transaction, only if the stored item meets `condition`.
    pub(super) fn session_put(
        &self,
        session: &Session,
        condition: WriteCondition,
    ) -> Result<TransactWriteItem, StoreError> {
        conditional_put(
            &self.config.sessions_table,
            self.session_item(session)?,
            condition_parts(condition),
        )
    }

    /// One page of a query; returns the items and where the next page starts.
    pub(super) async fn query_page(
        &self,
        query: QueryPage<'_>,
    ) -> Result<(Vec<Item>, Option<Item>), StoreError> {
        let mut request = self
            .client
            .query()
            .table_name(query.table)
            .key_condition_expression(query.condition)
            .set_expression_attribute_names(Some(query.names))
            .set_expression_attribute_values(Some(query.values))
            .set_exclusive_start_key(query.start)
            .limit(i32::try_from(query.limit.max(1)).unwrap_or(i32::MAX))
            .scan_index_forward(true);
        match query.index {
            Some(index) => request = request.index_name(index),
            // Base-table reads can be strongly consistent; index reads cannot.
            None => request = request.consistent_read(true),
        }
        let output = request
            .send()
            .await
            .map_err(|e| unavailable(STORE, "Query", e))?;
        self.count_read(usize::try_from(output.scanned_count).unwrap_or(0));
        Ok((output.items.unwrap_or_default(), output.last_evaluated_key))
    }

    async fn mark_one_sent(&self, event: &LifecycleEvent) -> Result<(), StoreError> {
        self.count_write();
        let result = self
            .client
            .update_item()
            .table_name(&self.config.events_table)
            .key(attr::THREAD_ID, string(event.thread_id.as_str()))
            .key(attr::SEQ, number(event.seq))
            .update_expression("REMOVE #s, #a")
            .condition_expression("attribute_exists(#t)")
            .set_expression_attribute_names(Some(names(&[
                ("#s", attr::UNSENT_SHARD),
                ("#a", attr::UNSENT_AT),
                ("#t", attr::THREAD_ID),
            ])))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(unavailable(STORE, "UpdateItem", e)),
        }
    }

    /// Fetch whole session items by key (the listing index holds keys only), in `ids` order.
    async fn get_sessions(&self, ids: &[String]) -> Result<Vec<Session>, StoreError> {
        let mut found = self.get_items(ids).await?;
        // A session deleted between the index read and the get is simply not listed.
        ids.iter()
            .filter_map(|id| found.remove(id))
            .map(decode_session)
            .collect()
    }

    /// Fetch whole items of the sessions table by partition key (at most 100, strongly
    /// consistent), keyed by it; a key with no item is absent from the map.
    pub(super) async fn get_items(
        &self,
        ids: &[String],
    ) -> Result<HashMap<String, Item>, StoreError> {
        let mut found: HashMap<String, Item> = HashMap::with_capacity(ids.len());
        let mut pending: Vec<Item> = ids.iter().map(|id| session_key(id)).collect();
        let mut attempt = 0u32;
        while !pending.is_empty() {
            let keys = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut pending)))
                .consistent_read(true)
                .build()
                .map_err(|e| {
                    StoreError::unavailable(STORE, format!("cannot build a batch get: {e}"))
                })?;
            let output = self
                .client
                .batch_get_item()
                .request_items(&self.config.sessions_table, keys)
                .send()
                .await
                .map_err(|e| unavailable(STORE, "BatchGetItem", e))?;
            let items = output
                .responses
                .and_then(|mut r| r.remove(&self.config.sessions_table))
                .unwrap_or_default();
            self.count_read(items.len());
            for item in items {
                if let Some(AttributeValue::S(id)) = item.get(attr::THREAD_ID) {
                    found.insert(id.clone(), item);
                }
            }
            pending = output
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.config.sessions_table))
                .map(|k| k.keys)
                .unwrap_or_default();
            if !pending.is_empty() {
                // DynamoDB throttled part of the batch: back off before asking for the rest.
                attempt += 1;
                if attempt > 5 {
                    return Err(StoreError::unavailable(
                        STORE,
                        format!(
                        "DynamoDB left {} keys of a batch get unprocessed after {attempt} tries",
                        pending.len()
                    ),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(25 << attempt)).await;
            }
        }
        Ok(found)
    }
}

pub(super) type Names = HashMap<String, String>;
pub(super) type Values = Option<HashMap<String, AttributeValue>>;

/// A session write's condition as DynamoDB's condition expression, names and values.
pub(super) fn condition_parts(condition: WriteCondition) -> (&'static str, Names, Values) {
    match condition {
        WriteCondition::Absent => (
            "attribute_not_exists(#t)",
            HashMap::from([("#t".to_owned(), attr::THREAD_ID.to_owned())]),
            None,
        ),
        WriteCondition::Version(expected) => (
            "#v = :expected",
            HashMap::from([("#v".to_owned(), attr::VERSION.to_owned())]),
            Some(HashMap::from([(":expected".to_owned(), number(expected))])),
        ),
    }
}

pub(super) struct QueryPage<'a> {
    pub(super) table: &'a str,
    pub(super) index: Option<&'a str>,
    pub(super) condition: &'a str,
    pub(super) names: Names,
    pub(super) values: HashMap<String, AttributeValue>,
    pub(super) start: Option<Item>,
    pub(super) limit: usize,
}

/// A put of `item` into `table` as one write of a transaction, under `condition` (expression,
/// names, values).
pub(super) fn conditional_put(
    table: &str,
    item: Item,
    (expression, names, values): (&str, Names, Values),
) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(expression)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(values)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| StoreError::unavailable(STORE, format!("cannot build a put: {e}")))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// The item each write of a transaction puts, in order (`None` for writes that put nothing),
/// to recognise them in a resend's cancellation reasons.
pub(super) fn sent_items(items: &[TransactWriteItem]) -> Vec<Option<Item>> {
    items
        .iter()
        .map(|write| write.put().map(|put| put.item().clone()))
        .collect()
}

/// `sent_items` as the references `transaction_landed` takes.
pub(super) fn sent_refs(sent: &[Option<Item>]) -> Vec<Option<&Item>> {
    sent.iter().map(Option::as_ref).collect()
}

/// Whether `item`'s TTL has passed: DynamoDB deletes such items when it gets to them (within
/// days), and until then they are history of a thread's earlier life, never to be read.
fn expired(item: &Item, now: i64) -> bool {
    matches!(item.get(attr::EXPIRES_AT), Some(AttributeValue::N(at)) if at.parse::<i64>().is_ok_and(|at| at < now))
}

fn number(n: impl ToString) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

pub(super) fn string(s: impl Into<String>) -> AttributeValue {
    AttributeValue::S(s.into())
}

fn session_key(thread_id: &str) -> Item {
    HashMap::from([(attr::THREAD_ID.to_owned(), string(thread_id))])
}

pub(super) fn names(pairs: &[(&str, &str)]) -> Names {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn bad_cursor(cursor: &str) -> StoreError {
    StoreError::unavailable(STORE, format!("malformed cursor {cursor:?}"))
}

/// Keyset cursor for the due index, "next_action_at:thread_id", as in the SQLite store. It is
/// turned back into the index's start key (shard, due_at, thread_id).
fn due_start_key(shard: u32, cursor: Option<String>) -> Result<Option<Item>, StoreError> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let (at, id) = cursor.split_once(':').ok_or_else(|| bad_cursor(&cursor))?;
    let at: i64 = at.parse().map_err(|_| bad_cursor(&cursor))?;
    Ok(Some(HashMap::from([
        (attr::DUE_SHARD.to_owned(), number(shard)),
        (attr::DUE_AT.to_owned(), number(at)),
        (attr::THREAD_ID.to_owned(), string(id)),
    ])))
}

#[async_trait]
impl SessionStore for DynamoSessionStore {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<Session>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.config.sessions_table)
            .set_key(Some(session_key(thread_id.as_str())))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable(STORE, "GetItem", e))?;
        self.count_read(usize::from(output.item.is_some()));
        output.item.map(decode_session).transpose()
    }

    async fn write_if(
        &self,
        session: &Session,
        events: &[LifecycleEvent],
        condition: WriteCondition,
    ) -> Result<bool, StoreError> {
        self.conditional_write(session, events, condition).await
    }

    async fn due(
        &self,
        shard: u32,
        due_by: Millis,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<Page<Session>, StoreError> {
        let (items, last) = self
            .query_page(QueryPage {
                table: &self.config.sessions_table,
                index: Some(DUE_INDEX),
                condition: "#s = :shard AND #d <= :due_by",
                names: names(&[("#s", attr::DUE_SHARD), ("#d", attr::DUE_AT)]),
                values: HashMap::from([
                    (":shard".to_owned(), number(shard)),
                    (":due_by".to_owned(), number(due_by.0)),
                ]),
                start: due_start_key(shard, cursor)?,
                limit,
            })
            .await?;
        let items = items
            .into_iter()
            .map(decode_session)
            .collect::<Result<Vec<_>, _>>()?;
        // DynamoDB says whether more may follow; the cursor is rebuilt from the last session.
        let next = match (last, items.last()) {
            (Some(_), Some(s)) => s
                .next_action_at
                .map(|at| format!("{}:{}", at.0, s.thread_id)),
            _ => None,
        };
        Ok(Page { items, next })
    }

    async fn events_after(
        &self,
        thread_id: &ThreadId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError> {
        let mut events = Vec::new();
        let mut start = None;
        let now = now_secs();
        // Pages end early at 1 MB, so keep reading until `limit` events or the end.
        while events.len() < limit {
            let (items, last) = self
                .query_page(QueryPage {
                    table: &self.config.events_table,
                    index: None,
                    condition: "#t = :thread AND #s > :after",
                    names: names(&[("#t", attr::THREAD_ID), ("#s", attr::SEQ)]),
                    values: HashMap::from([
                        (":thread".to_owned(), string(thread_id.as_str())),
                        (":after".to_owned(), number(after_seq)),
                    ]),
                    start,
                    limit: limit - events.len(),
                })
                .await?;
            for item in items.into_iter().filter(|item| !expired(item, now)) {
                events.push(decode_event(item)?);
            }
            match last {
                Some(key) => start = Some(key),
                None => break,
            }
        }
        Ok(events)
    }

    /// One query per shard of the unsent index, run together and merged oldest first.
    /// The index is eventually consistent: an event marked sent a moment ago may be listed once
    /// more, which only re-sends it under the same deduplication id.
    async fn unsent_events(
        &self,
        written_before: Millis,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let queries = (0..self.config.shards).map(|shard| {
            self.query_page(QueryPage {
                table: &self.config.events_table,
                index: Some(UNSENT_INDEX),
                condition: "#s = :shard AND #a <= :before",
                names: names(&[("#s", attr::UNSENT_SHARD), ("#a", attr::UNSENT_AT)]),
                values: HashMap::from([
                    (":shard".to_owned(), number(shard)),
                    (":before".to_owned(), number(written_before.0)),
                ]),
                start: None,
                limit,
            })
        });
        let mut events = Vec::new();
        let now = now_secs();
        for page in futures::future::join_all(queries).await {
            let (items, _) = page?;
            for item in items.into_iter().filter(|item| !expired(item, now)) {
                events.push(decode_event(item)?);
            }
        }
        events.sort_by(|a, b| (a.at, &a.thread_id, a.seq).cmp(&(b.at, &b.thread_id, b.seq)));
        events.truncate(limit);
        Ok(events)
    }

    /// Drop each event from the unsent index by removing its index attributes. An event that is
    /// no longer there (garbage-collected) is skipped rather than re-created as a stub.
    async fn mark_sent(&self, events: &[LifecycleEvent]) -> Result<(), StoreError> {
        // Collected first: a lazy `map` over borrowed events trips the `Send` check of the
        // boxed trait future.
        let updates: Vec<_> = events.iter().map(|e| self.mark_one_sent(e)).collect();
        let results: Vec<Result<(), StoreError>> = futures::stream::iter(updates)
            .buffer_unordered(MARK_SENT_CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// The operator listing: a query of the keys-only listing index (one partition, sorted by
    /// thread id) and a `BatchGetItem` for the page's items. Not a scan: pages come in thread-id
    /// order, as the port promises, and each costs two requests whatever the table's size. The
    /// index holds keys only, so session writes never touch its single partition; only a new
    /// thread's first write does.
    async fn list(
        &self,
        limit: usize,
        after: Option<&ThreadId>,
    ) -> Result<Page<Session>, StoreError> {
        let cursor = after.map(ThreadId::to_string);
        let limit = limit.clamp(1, MAX_LIST_PAGE);
        let (condition, mut values) = (
            if cursor.is_some() {
                "#k = :kind AND #t > :after"
            } else {
                "#k = :kind"
            },
            HashMap::from([(":kind".to_owned(), string(SESSION_KIND))]),
        );
        let mut query_names = names(&[("#k", attr::KIND)]);
        if let Some(after) = &cursor {
            values.insert(":after".to_owned(), string(after.as_str()));
            query_names.insert("#t".to_owned(), attr::THREAD_ID.to_owned());
        }
        let (keys, last) = self
            .query_page(QueryPage {
                table: &self.config.sessions_table,
                index: Some(LIST_INDEX),
                condition,
                names: query_names,
                values,
                start: None,
                limit,
            })
            .await?;
        let ids: Vec<String> = keys
            .iter()
            .filter_map(|k| match k.get(attr::THREAD_ID) {
                Some(AttributeValue::S(id)) => Some(id.clone()),
                _ => None,
            })
            .collect();
        let next = last.and(ids.last().cloned());
        let items = if ids.is_empty() {
            Vec::new()
        } else {
            self.get_sessions(&ids).await?
        };
        Ok(Page { items, next })
    }

    fn shard_count(&self) -> u32 {
        self.config.shards
    }

    fn stats(&self) -> StoreStats {
        self.counters.stats()
    }
}
