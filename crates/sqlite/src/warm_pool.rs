//! The warm pool store on the session store's own SQLite file: one row per member, beside the
//! sessions it is claimed by, so a claim is one transaction over both tables.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::database::store_error;
use super::session_store::{decode, encode, SessionWrite, SqliteSessionStore};
use threadbox_core::domain::{LifecycleEvent, MemberState, PoolMember, Session};
use threadbox_core::ports::{PoolClaim, StoreError, StoreKind, WarmPoolStore, WriteCondition};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::WarmPool;

impl SqliteSessionStore {
    /// The members `query` selects (`member_id, record`) with `?1` the pool and `?2` a limit.
    async fn select_members(
        &self,
        query: &'static str,
        pool: &str,
        limit: usize,
    ) -> Result<Vec<PoolMember>, StoreError> {
        let pool = pool.to_owned();
        let limit = limit.max(1) as i64;
        let rows: Vec<(String, String)> = self
            .database()
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(query)?;
                let rows = stmt
                    .query_map(params![pool, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_error(STORE))?;
        self.count_read(rows.len());
        rows.iter()
            .map(|(id, json)| decode(STORE, &format!("pool member {id}"), json))
            .collect()
    }
}

#[async_trait]
impl WarmPoolStore for SqliteSessionStore {
    async fn add_member(&self, member: &PoolMember) -> Result<(), StoreError> {
        let json = encode(STORE, member)?;
        let m = member.clone();
        self.count_write();
        self.database()
            .call(move |conn| {
                conn.execute(
                    "INSERT INTO pool_members (member_id, pool, state, created_at, record)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![m.member_id, m.pool, m.state.as_str(), m.created_at.0, json],
                )
            })
            .await
            .map_err(store_error(STORE))?;
        Ok(())
    }

    async fn update_member(
        &self,
        member: &PoolMember,
        expected: MemberState,
    ) -> Result<bool, StoreError> {
        let json = encode(STORE, member)?;
        let m = member.clone();
        self.count_write();
        let changed = self
            .database()
            .call(move |conn| {
                conn.execute(
                    "UPDATE pool_members SET state = ?2, record = ?3
                     WHERE member_id = ?1 AND state = ?4",
                    params![m.member_id, m.state.as_str(), json, expected.as_str()],
                )
            })
            .await
            .map_err(store_error(STORE))?;
        Ok(changed == 1)
    }

    async fn remove_member(
        &self,
        member_id: &str,
        expected: MemberState,
    ) -> Result<bool, StoreError> {
        let id = member_id.to_owned();
        self.count_write();
        let changed = self
            .database()
            .call(move |conn| {
                conn.execute(
                    "DELETE FROM pool_members WHERE member_id = ?1 AND state = ?2",
                    params![id, expected.as_str()],
                )
            })
            .await
            .map_err(store_error(STORE))?;
        Ok(changed == 1)
    }

    async fn member(&self, member_id: &str) -> Result<Option<PoolMember>, StoreError> {
        let id = member_id.to_owned();
        let row: Option<String> = self
            .database()
            .call(move |conn| {
                conn.query_row(
                    "SELECT record FROM pool_members WHERE member_id = ?1",
                    params![id],
                    |r| r.get(0),
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))?;
        self.count_read(usize::from(row.is_some()));
        row.map(|json| decode(STORE, &format!("pool member {member_id}"), &json))
            .transpose()
    }

    async fn unclaimed(&self, pool: &str, limit: usize) -> Result<Vec<PoolMember>, StoreError> {
        self.select_members(
            "SELECT member_id, record FROM pool_members
             WHERE pool = ?1 AND state <> 'claimed'
             ORDER BY created_at, member_id LIMIT ?2",
            pool,
            limit,
        )
        .await
    }

    async fn ready(&self, pool: &str, limit: usize) -> Result<Vec<PoolMember>, StoreError> {
        self.select_members(
            "SELECT member_id, record FROM pool_members
             WHERE pool = ?1 AND state = 'ready' ORDER BY random() LIMIT ?2",
            pool,
            limit,
        )
        .await
    }

    async fn claim_member(
        &self,
        member: &PoolMember,
        session: &Session,
        expected_version: u64,
        events: &[LifecycleEvent],
    ) -> Result<PoolClaim, StoreError> {
        debug_assert_eq!(member.state, MemberState::Claimed);
        let json = encode(STORE, member)?;
        let member_id = member.member_id.clone();
        let write = SessionWrite::prepare(session, events, self.shards())?;
        self.count_write();
        self.database()
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let claimed = tx.execute(
                    "UPDATE pool_members SET state = 'claimed', record = ?2
                     WHERE member_id = ?1 AND state = 'ready'",
                    params![member_id, json],
                )?;
                if claimed == 0 {
                    return Ok(PoolClaim::MemberTaken);
                }
                if !write.apply(&tx, WriteCondition::Version(expected_version))? {
                    return Ok(PoolClaim::SessionChanged);
                }
                tx.commit()?;
                Ok(PoolClaim::Bound)
            })
            .await
            .map_err(store_error(STORE))
    }
}
