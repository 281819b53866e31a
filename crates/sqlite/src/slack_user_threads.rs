//! `SqliteSlackUserThreads`: which threads each Slack user used recently, in the shared file.
//!
//! One row per (team, user, thread). A touch is an upsert keeping the later `last_used`, then a
//! delete of whatever falls beyond the user's newest `MAX_USER_THREADS`, in one transaction so
//! a user's rows never exceed the bound as another process sees them.

use std::path::Path;

use async_trait::async_trait;
use rusqlite::{params, TransactionBehavior};

use super::database::{store_error, Database};
use threadbox_core::domain::{Millis, ThreadId};
use threadbox_core::ports::{check_slack_user, SlackUserThreads, UserThread, MAX_USER_THREADS};
use threadbox_core::ports::{StoreError, StoreKind};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::SlackUserThreads;

/// The index serves `recent` and the trim: a user's rows, newest first (ties by thread id, the
/// order the port documents).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slack_user_threads (
    team      TEXT NOT NULL,
    user      TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    last_used INTEGER NOT NULL,
    PRIMARY KEY (team, user, thread_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS slack_user_threads_recent
    ON slack_user_threads (team, user, last_used DESC, thread_id);
";

#[derive(Clone, Debug)]
pub struct SqliteSlackUserThreads {
    db: Database,
}

impl SqliteSlackUserThreads {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(Self {
            db: Database::open(path, SCHEMA).map_err(store_error(STORE))?,
        })
    }
}

#[async_trait]
impl SlackUserThreads for SqliteSlackUserThreads {
    async fn touch(
        &self,
        team: &str,
        user: &str,
        thread_id: &ThreadId,
        at: Millis,
    ) -> Result<(), StoreError> {
        check_slack_user(team, user)?;
        let (team, user, id) = (team.to_owned(), user.to_owned(), thread_id.to_string());
        self.db
            .call(move |conn| {
                // IMMEDIATE: take the write lock up front, so two processes touching the same
                // user cannot both read the old rows and then trim on a stale view.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute(
                    "INSERT INTO slack_user_threads (team, user, thread_id, last_used)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (team, user, thread_id) DO UPDATE
                     SET last_used = MAX(slack_user_threads.last_used, excluded.last_used)",
                    params![team, user, id, at.0],
                )?;
                tx.execute(
                    "DELETE FROM slack_user_threads
                     WHERE team = ?1 AND user = ?2 AND thread_id NOT IN (
                         SELECT thread_id FROM slack_user_threads
                         WHERE team = ?1 AND user = ?2
                         ORDER BY last_used DESC, thread_id
                         LIMIT ?3)",
                    params![team, user, MAX_USER_THREADS as i64],
                )?;
                tx.commit()
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn recent(
        &self,
        team: &str,
        user: &str,
        limit: usize,
    ) -> Result<Vec<UserThread>, StoreError> {
        check_slack_user(team, user)?;
        let limit = limit.min(MAX_USER_THREADS) as i64;
        let (team, user) = (team.to_owned(), user.to_owned());
        let rows: Vec<(String, i64)> = self
            .db
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT thread_id, last_used FROM slack_user_threads
                     WHERE team = ?1 AND user = ?2
                     ORDER BY last_used DESC, thread_id
                     LIMIT ?3",
                )?;
                let rows = statement
                    .query_map(params![team, user, limit], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })?
                    .collect::<Result<_, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_error(STORE))?;
        // Parsed outside the closure so a bad row is reported as corrupt data, naming it,
        // rather than as an SQL failure.
        rows.into_iter()
            .map(|(id, last_used)| {
                let thread_id = ThreadId::parse(&id).map_err(|e| {
                    StoreError::corrupt(
                        STORE,
                        format!("slack_user_threads holds an invalid thread id {id:?}: {e}"),
                    )
                })?;
                Ok(UserThread {
                    thread_id,
                    last_used: Millis(last_used),
                })
            })
            .collect()
    }
}
