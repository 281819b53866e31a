//! `SqliteSlackSink`: the `SlackApi` port without Slack. `threadbox dev` with no bot token keeps
//! the messages it would have posted (and their edits) in the shared SQLite file, where the
//! dashboard and `GET /v1/slack/sink` show them.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::params;

use super::database::{Database, DatabaseError};
use crate::domain::Millis;
use crate::ports::StoreError;
use crate::ports::{
    ApiErrorCode, PostMessage, Posted, SinkMessage, SinkQuery, SlackApi, SlackError, SlackFile,
    SlackSink, UpdateMessage,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slack_sink (
    ts         TEXT PRIMARY KEY,
    channel    TEXT NOT NULL,
    thread_ts  TEXT,
    text       TEXT NOT NULL,
    posted_ms  INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    edits      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS slack_sink_thread ON slack_sink (channel, thread_ts);
CREATE INDEX IF NOT EXISTS slack_sink_age ON slack_sink (updated_ms);
";

#[derive(Clone, Debug)]
pub struct SqliteSlackSink {
    db: Database,
}

fn unavailable(err: DatabaseError) -> StoreError {
    match err {
        DatabaseError::Corrupt { .. } => StoreError::Corrupt(err.to_string()),
        other => StoreError::Unavailable(other.to_string()),
    }
}

fn sink_error(method: &str, err: DatabaseError) -> SlackError {
    SlackError::Transport {
        method: method.to_owned(),
        detail: format!("local sink: {err}"),
    }
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as i64
}

/// Slack's `ts` shape: seconds, a dot, six digits of microseconds.
fn ts_of(micros: i64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

impl SqliteSlackSink {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(Self {
            db: Database::open(path, SCHEMA).map_err(unavailable)?,
        })
    }
}

#[async_trait]
impl SlackSink for SqliteSlackSink {
    async fn list(&self, query: SinkQuery) -> Result<Vec<SinkMessage>, StoreError> {
        let limit = query.limit.clamp(1, 1000) as i64;
        self.db
            .call(move |conn| {
                let mut statement = conn.prepare(
                    "SELECT ts, channel, thread_ts, text, posted_ms, updated_ms, edits
                     FROM slack_sink
                     WHERE (?1 IS NULL OR channel = ?1)
                       AND (?2 IS NULL OR thread_ts = ?2 OR ts = ?2)
                     ORDER BY posted_ms DESC, ts DESC
                     LIMIT ?3",
                )?;
                let mut messages = statement
                    .query_map(params![query.channel, query.thread_ts, limit], |row| {
                        Ok(SinkMessage {
                            ts: row.get(0)?,
                            channel: row.get(1)?,
                            thread_ts: row.get(2)?,
                            text: row.get(3)?,
                            posted_at: Millis(row.get(4)?),
                            updated_at: Millis(row.get(5)?),
                            edits: row.get::<_, i64>(6)? as u32,
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                messages.reverse();
                Ok(messages)
            })
            .await
            .map_err(unavailable)
    }
}

#[async_trait]
impl SlackApi for SqliteSlackSink {
    async fn post_message(&self, message: &PostMessage) -> Result<Posted, SlackError> {
        let message = message.clone();
        self.db
            .call(move |conn| {
                let now = now_micros();
                // Unique like Slack's: the next free microsecond.
                let mut micros = now;
                loop {
                    let ts = ts_of(micros);
                    let inserted = conn.execute(
                        "INSERT INTO slack_sink (ts, channel, thread_ts, text, posted_ms, updated_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT (ts) DO NOTHING",
                        params![ts, message.channel, message.thread_ts, message.text, now / 1000],
                    )?;
                    if inserted == 1 {
                        return Ok(Posted {
                            channel: message.channel,
                            ts,
                        });
                    }
                    micros += 1;
                }
            })
            .await
            .map_err(|e| sink_error("chat.postMessage", e))
    }

    async fn update_message(&self, update: &UpdateMessage) -> Result<(), SlackError> {
        let update = update.clone();
        let changed = self
            .db
            .call(move |conn| {
                conn.execute(
                    "UPDATE slack_sink SET text = ?1, updated_ms = ?2, edits = edits + 1
                     WHERE ts = ?3 AND channel = ?4",
                    params![update.text, now_micros() / 1000, update.ts, update.channel],
                )
            })
            .await
            .map_err(|e| sink_error("chat.update", e))?;
        if changed == 0 {
            return Err(SlackError::Api {
                method: "chat.update".into(),
                code: ApiErrorCode::MessageNotFound,
            });
        }
        Ok(())
    }

    async fn file_info(&self, file_id: &str) -> Result<SlackFile, SlackError> {
        Err(SlackError::Unsupported(format!(
            "file {file_id} is in Slack, and without SLACK_BOT_TOKEN threadbox cannot fetch it"
        )))
    }

    async fn download_file(&self, _url: &str, _max_bytes: u64) -> Result<Vec<u8>, SlackError> {
        Err(SlackError::Unsupported(
            "files are in Slack, and without SLACK_BOT_TOKEN threadbox cannot download them".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn posts_and_edits_are_kept_and_listed_by_thread() {
        let dir = tempfile::tempdir().unwrap();
        let sink = SqliteSlackSink::open(dir.path().join("s.db")).unwrap();
        let post = |thread: Option<&str>, text: &str| PostMessage {
            channel: "C1".into(),
            thread_ts: thread.map(str::to_owned),
            text: text.into(),
        };
        let a = sink
            .post_message(&post(Some("1.000001"), "status: creating"))
            .await
            .unwrap();
        let b = sink
            .post_message(&post(Some("1.000001"), "hello"))
            .await
            .unwrap();
        sink.post_message(&post(Some("2.000001"), "elsewhere"))
            .await
            .unwrap();
        assert_ne!(a.ts, b.ts);
        sink.update_message(&UpdateMessage {
            channel: "C1".into(),
            ts: a.ts.clone(),
            text: "status: active".into(),
        })
        .await
        .unwrap();

        let thread = sink
            .list(SinkQuery {
                thread_ts: Some("1.000001".into()),
                limit: 10,
                ..SinkQuery::default()
            })
            .await
            .unwrap();
        let texts: Vec<_> = thread.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["status: active", "hello"]);
        assert_eq!(thread[0].edits, 1);
        let all = sink
            .list(SinkQuery {
                limit: 2,
                ..SinkQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(all.len(), 2, "the most recent two");
        assert_eq!(all[1].text, "elsewhere");

        let missing = sink
            .update_message(&UpdateMessage {
                channel: "C1".into(),
                ts: "9.000009".into(),
                text: "x".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), Some(&ApiErrorCode::MessageNotFound));
        assert!(matches!(
            sink.download_file("https://files.slack.com/x", 10).await,
            Err(SlackError::Unsupported(_))
        ));
    }
}
