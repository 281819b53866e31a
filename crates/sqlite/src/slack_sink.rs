//! `SqliteSlackSink`: the `SlackApi` port without Slack. `threadbox dev` with no bot token keeps
//! what it would have shown in Slack in the shared SQLite file, where the dashboard and
//! `GET /v1/slack/sink` show it: messages with their Block Kit blocks (and their edits),
//! ephemeral messages, shared files, modals and App Home views.
//!
//! Tables: `slack_sink` (messages), `slack_sink_files` (a shared file's bytes, deleted with its
//! message by a foreign key, so housekeeping that ages messages out takes the files too) and
//! `slack_sink_views` (modals and home views). Files made before blocks existed gain the new
//! columns when opened (`migrate`), so an existing `threadbox dev` data directory keeps working.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;

use super::database::{store_error, Database, DatabaseError};
use threadbox_core::domain::Millis;
use threadbox_core::ports::{
    ApiErrorCode, EphemeralMessage, FileUpload, PostMessage, Posted, SinkFile, SinkMessage,
    SinkQuery, SinkView, SinkViewKind, SinkViewState, SlackApi, SlackError, SlackFile, SlackSink,
    UpdateMessage, FILE_PREVIEW_BYTES,
};
use threadbox_core::ports::{StoreError, StoreKind};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::SlackSink;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slack_sink (
    ts           TEXT PRIMARY KEY,
    channel      TEXT NOT NULL,
    thread_ts    TEXT,
    text         TEXT NOT NULL,
    posted_ms    INTEGER NOT NULL,
    updated_ms   INTEGER NOT NULL,
    edits        INTEGER NOT NULL DEFAULT 0,
    blocks       TEXT,
    ephemeral_to TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS slack_sink_thread ON slack_sink (channel, thread_ts);
CREATE INDEX IF NOT EXISTS slack_sink_age ON slack_sink (updated_ms);
CREATE TABLE IF NOT EXISTS slack_sink_files (
    id         TEXT PRIMARY KEY,
    message_ts TEXT NOT NULL UNIQUE REFERENCES slack_sink (ts) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    title      TEXT NOT NULL,
    size       INTEGER NOT NULL,
    bytes      BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS slack_sink_views (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    trigger_id TEXT,
    user       TEXT,
    view       TEXT NOT NULL,
    state      TEXT NOT NULL,
    opened_ms  INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS slack_sink_home ON slack_sink_views (user) WHERE kind = 'home';
CREATE INDEX IF NOT EXISTS slack_sink_modals ON slack_sink_views (kind, opened_ms);
";

/// Columns added to `slack_sink` after its first release (Block Kit, ephemeral messages): an
/// older file gains each one it lacks when opened. Adding a nullable column keeps every row.
const ADDED_COLUMNS: [(&str, &str); 2] = [
    ("blocks", "ALTER TABLE slack_sink ADD COLUMN blocks TEXT"),
    (
        "ephemeral_to",
        "ALTER TABLE slack_sink ADD COLUMN ephemeral_to TEXT",
    ),
];

/// The largest file the sink keeps. Slack itself takes up to 1 GB, but these bytes sit in the
/// developer's SQLite file and threadbox shares command output (capped well below this), so
/// anything larger is refused with `file_too_large` rather than silently cut.
pub const MAX_FILE_BYTES: usize = 50 * 1024 * 1024;

/// How many modals the sink remembers, open or not; older ones are forgotten as new ones open.
const MAX_MODALS: i64 = 200;

/// `SELECT … FROM` for messages with their file, if any (only the preview's bytes are read).
fn select_messages() -> String {
    format!(
        "SELECT s.ts, s.channel, s.thread_ts, s.text, s.posted_ms, s.updated_ms, s.edits,
                s.blocks, s.ephemeral_to, f.id, f.name, f.title, f.size,
                substr(f.bytes, 1, {FILE_PREVIEW_BYTES})
         FROM slack_sink s LEFT JOIN slack_sink_files f ON f.message_ts = s.ts"
    )
}
const VIEW_COLUMNS: &str = "id, kind, trigger_id, user, view, state, opened_ms, updated_ms";

#[derive(Clone, Debug)]
pub struct SqliteSlackSink {
    db: Database,
}

fn sink_error(method: &str, err: DatabaseError) -> SlackError {
    SlackError::Transport {
        method: method.to_owned(),
        detail: format!("local sink: {err}"),
    }
}

fn api_error(method: &str, code: &str) -> SlackError {
    SlackError::Api {
        method: method.to_owned(),
        code: ApiErrorCode::parse(code),
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

/// A Slack-shaped id: the prefix (`F` for files, `V` for views) and 10 upper-case characters.
fn slack_id(prefix: char) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string().to_uppercase();
    format!("{prefix}{}", &random[..10])
}

/// Blocks as stored: the JSON array, or NULL for none (an empty array shows nothing either).
fn blocks_json(blocks: Option<&Vec<Value>>) -> Option<String> {
    blocks
        .filter(|b| !b.is_empty())
        .map(|b| Value::Array(b.clone()).to_string())
}

/// The first bytes of a file as text: invalid UTF-8 becomes U+FFFD, and a character cut in
/// half by the preview's end is dropped rather than shown as garbage.
fn preview_of(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(FILE_PREVIEW_BYTES)];
    let head = match std::str::from_utf8(head) {
        Err(e) if e.error_len().is_none() => &head[..e.valid_up_to()],
        _ => head,
    };
    String::from_utf8_lossy(head).into_owned()
}

fn message_of(row: &Row<'_>) -> rusqlite::Result<SinkMessage> {
    let blocks: Option<String> = row.get(7)?;
    let file = match row.get::<_, Option<String>>(9)? {
        None => None,
        Some(id) => Some(SinkFile {
            id,
            name: row.get(10)?,
            title: row.get(11)?,
            size: row.get::<_, i64>(12)?.max(0) as u64,
            preview: preview_of(&row.get::<_, Vec<u8>>(13)?),
        }),
    };
    Ok(SinkMessage {
        ts: row.get(0)?,
        channel: row.get(1)?,
        thread_ts: row.get(2)?,
        text: row.get(3)?,
        posted_at: Millis(row.get(4)?),
        updated_at: Millis(row.get(5)?),
        edits: row.get::<_, i64>(6)? as u32,
        // Written by this adapter from a `Value`, so it parses; a hand-edited row shows as text.
        blocks: blocks.and_then(|b| serde_json::from_str(&b).ok()),
        ephemeral_to: row.get(8)?,
        file,
    })
}

fn view_of(row: &Row<'_>) -> rusqlite::Result<SinkView> {
    let kind: String = row.get(1)?;
    let state: String = row.get(5)?;
    let view: String = row.get(4)?;
    Ok(SinkView {
        id: row.get(0)?,
        kind: if kind == "home" {
            SinkViewKind::Home
        } else {
            SinkViewKind::Modal
        },
        trigger_id: row.get(2)?,
        user: row.get(3)?,
        view: serde_json::from_str(&view).unwrap_or(Value::Null),
        state: SinkViewState::parse(&state).unwrap_or(SinkViewState::Closed),
        opened_at: Millis(row.get(6)?),
        updated_at: Millis(row.get(7)?),
    })
}

/// Add the columns an older file lacks (see [`ADDED_COLUMNS`]).
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    for (column, statement) in ADDED_COLUMNS {
        let present = conn
            .prepare("SELECT 1 FROM pragma_table_info('slack_sink') WHERE name = ?1")?
            .exists([column])?;
        if !present {
            conn.execute_batch(statement)?;
        }
    }
    Ok(())
}

/// One new message, at the next free microsecond (unique like Slack's ts). Returns its ts.
fn insert_message(
    conn: &Connection,
    channel: &str,
    thread_ts: Option<&str>,
    text: &str,
    blocks: Option<&str>,
    ephemeral_to: Option<&str>,
) -> rusqlite::Result<String> {
    let now = now_micros();
    let mut micros = now;
    loop {
        let ts = ts_of(micros);
        let inserted = conn.execute(
            "INSERT INTO slack_sink
                 (ts, channel, thread_ts, text, posted_ms, updated_ms, blocks, ephemeral_to)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7) ON CONFLICT (ts) DO NOTHING",
            params![
                ts,
                channel,
                thread_ts,
                text,
                now / 1000,
                blocks,
                ephemeral_to
            ],
        )?;
        if inserted == 1 {
            return Ok(ts);
        }
        micros += 1;
    }
}

impl SqliteSlackSink {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let db = Database::open(path, SCHEMA).map_err(store_error(STORE))?;
        db.call_blocking(migrate).map_err(store_error(STORE))?;
        Ok(Self { db })
    }
}

#[async_trait]
impl SlackSink for SqliteSlackSink {
    async fn list(&self, query: SinkQuery) -> Result<Vec<SinkMessage>, StoreError> {
        let limit = query.limit.clamp(1, 1000) as i64;
        self.db
            .call(move |conn| {
                let mut statement = conn.prepare(&format!(
                    "{}
                     WHERE (?1 IS NULL OR s.channel = ?1)
                       AND (?2 IS NULL OR s.thread_ts = ?2 OR s.ts = ?2)
                     ORDER BY s.posted_ms DESC, s.ts DESC
                     LIMIT ?3",
                    select_messages()
                ))?;
                let mut messages = statement
                    .query_map(params![query.channel, query.thread_ts, limit], message_of)?
                    .collect::<Result<Vec<_>, _>>()?;
                messages.reverse();
                Ok(messages)
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn message(&self, ts: &str) -> Result<Option<SinkMessage>, StoreError> {
        let ts = ts.to_owned();
        self.db
            .call(move |conn| {
                conn.query_row(
                    &format!("{} WHERE s.ts = ?1", select_messages()),
                    [ts],
                    message_of,
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn views(&self, limit: usize) -> Result<Vec<SinkView>, StoreError> {
        let limit = limit.clamp(1, 1000) as i64;
        self.db
            .call(move |conn| {
                let mut statement = conn.prepare(&format!(
                    "SELECT {VIEW_COLUMNS}, rowid AS seq FROM slack_sink_views WHERE kind = 'home'
                     UNION ALL
                     SELECT * FROM (SELECT {VIEW_COLUMNS}, rowid AS seq FROM slack_sink_views
                                    WHERE kind = 'modal' ORDER BY opened_ms DESC, rowid DESC
                                    LIMIT ?1)
                     ORDER BY opened_ms DESC, seq DESC"
                ))?;
                let views = statement
                    .query_map([limit], view_of)?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(views)
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn view(&self, id: &str) -> Result<Option<SinkView>, StoreError> {
        let id = id.to_owned();
        self.db
            .call(move |conn| {
                conn.query_row(
                    &format!("SELECT {VIEW_COLUMNS} FROM slack_sink_views WHERE id = ?1"),
                    [id],
                    view_of,
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn finish_view(&self, id: &str, to: SinkViewState) -> Result<bool, StoreError> {
        let id = id.to_owned();
        let changed = self
            .db
            .call(move |conn| {
                conn.execute(
                    "UPDATE slack_sink_views SET state = ?1, updated_ms = ?2
                     WHERE id = ?3 AND kind = 'modal' AND state = 'open'",
                    params![to.as_str(), now_micros() / 1000, id],
                )
            })
            .await
            .map_err(store_error(STORE))?;
        Ok(changed == 1)
    }

    async fn replace_view(&self, id: &str, view: &Value) -> Result<bool, StoreError> {
        let (id, view) = (id.to_owned(), view.to_string());
        let changed = self
            .db
            .call(move |conn| {
                conn.execute(
                    "UPDATE slack_sink_views SET view = ?1, updated_ms = ?2
                     WHERE id = ?3 AND kind = 'modal' AND state = 'open'",
                    params![view, now_micros() / 1000, id],
                )
            })
            .await
            .map_err(store_error(STORE))?;
        Ok(changed == 1)
    }
}

#[async_trait]
impl SlackApi for SqliteSlackSink {
    async fn post_message(&self, message: &PostMessage) -> Result<Posted, SlackError> {
        let message = message.clone();
        let blocks = blocks_json(message.blocks.as_ref());
        self.db
            .call(move |conn| {
                let ts = insert_message(
                    conn,
                    &message.channel,
                    message.thread_ts.as_deref(),
                    &message.text,
                    blocks.as_deref(),
                    None,
                )?;
                Ok(Posted {
                    channel: message.channel,
                    ts,
                })
            })
            .await
            .map_err(|e| sink_error("chat.postMessage", e))
    }

    /// Like Slack: `blocks: None` keeps the message's blocks, an empty list removes them, and
    /// ephemeral messages cannot be edited (`message_not_found`).
    async fn update_message(&self, update: &UpdateMessage) -> Result<(), SlackError> {
        let update = update.clone();
        let keep_blocks = update.blocks.is_none();
        let blocks = blocks_json(update.blocks.as_ref());
        let changed = self
            .db
            .call(move |conn| {
                conn.execute(
                    "UPDATE slack_sink SET text = ?1, updated_ms = ?2, edits = edits + 1,
                         blocks = CASE WHEN ?5 THEN blocks ELSE ?6 END
                     WHERE ts = ?3 AND channel = ?4 AND ephemeral_to IS NULL",
                    params![
                        update.text,
                        now_micros() / 1000,
                        update.ts,
                        update.channel,
                        keep_blocks,
                        blocks
                    ],
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

    /// Kept as a message marked with the one user who would see it.
    async fn post_ephemeral(&self, message: &EphemeralMessage) -> Result<(), SlackError> {
        if message.user.trim().is_empty() {
            return Err(api_error("chat.postEphemeral", "user_not_in_channel"));
        }
        let message = message.clone();
        let blocks = blocks_json(message.blocks.as_ref());
        self.db
            .call(move |conn| {
                insert_message(
                    conn,
                    &message.channel,
                    message.thread_ts.as_deref(),
                    &message.text,
                    blocks.as_deref(),
                    Some(&message.user),
                )
                .map(drop)
            })
            .await
            .map_err(|e| sink_error("chat.postEphemeral", e))
    }

    /// Kept as an open modal. The sink shows one modal at a time (one developer, one dialog):
    /// opening one closes any other still open. Only the newest [`MAX_MODALS`] are remembered.
    async fn open_view(&self, trigger_id: &str, view: &Value) -> Result<(), SlackError> {
        if trigger_id.trim().is_empty() {
            return Err(api_error("views.open", "invalid_trigger_id"));
        }
        if !view.is_object() {
            return Err(api_error("views.open", "invalid_arguments"));
        }
        let (trigger_id, view) = (trigger_id.to_owned(), view.to_string());
        self.db
            .call(move |conn| {
                let tx = conn.transaction()?;
                let now = now_micros() / 1000;
                tx.execute(
                    "UPDATE slack_sink_views SET state = 'closed', updated_ms = ?1
                     WHERE kind = 'modal' AND state = 'open'",
                    [now],
                )?;
                tx.execute(
                    "INSERT INTO slack_sink_views
                         (id, kind, trigger_id, view, state, opened_ms, updated_ms)
                     VALUES (?1, 'modal', ?2, ?3, 'open', ?4, ?4)",
                    params![slack_id('V'), trigger_id, view, now],
                )?;
                tx.execute(
                    "DELETE FROM slack_sink_views WHERE kind = 'modal' AND id NOT IN
                        (SELECT id FROM slack_sink_views WHERE kind = 'modal'
                         ORDER BY opened_ms DESC, rowid DESC LIMIT ?1)",
                    [MAX_MODALS],
                )?;
                tx.commit()
            })
            .await
            .map_err(|e| sink_error("views.open", e))
    }

    /// The user's App Home: the latest view replaces the one before.
    async fn publish_view(&self, user: &str, view: &Value) -> Result<(), SlackError> {
        if user.trim().is_empty() {
            return Err(api_error("views.publish", "invalid_arguments"));
        }
        if !view.is_object() {
            return Err(api_error("views.publish", "invalid_arguments"));
        }
        let (user, view) = (user.to_owned(), view.to_string());
        self.db
            .call(move |conn| {
                let now = now_micros() / 1000;
                conn.execute(
                    "INSERT INTO slack_sink_views (id, kind, user, view, state, opened_ms, updated_ms)
                     VALUES (?1, 'home', ?2, ?3, 'open', ?4, ?4)
                     ON CONFLICT (user) WHERE kind = 'home'
                     DO UPDATE SET view = excluded.view, opened_ms = excluded.opened_ms,
                         updated_ms = excluded.updated_ms",
                    params![slack_id('V'), user, view, now],
                )
                .map(drop)
            })
            .await
            .map_err(|e| sink_error("views.publish", e))
    }

    /// The file's bytes (up to [`MAX_FILE_BYTES`]) and a message in the channel or thread with
    /// the initial comment and the file, as Slack shows a shared file.
    async fn upload_file(&self, upload: &FileUpload) -> Result<String, SlackError> {
        const METHOD: &str = "files.completeUploadExternal";
        if upload.bytes.len() > MAX_FILE_BYTES {
            return Err(api_error("files.getUploadURLExternal", "file_too_large"));
        }
        if upload.filename.trim().is_empty() {
            return Err(api_error("files.getUploadURLExternal", "invalid_arguments"));
        }
        let upload = upload.clone();
        self.db
            .call(move |conn| {
                let tx = conn.transaction()?;
                let ts = insert_message(
                    &tx,
                    &upload.channel,
                    upload.thread_ts.as_deref(),
                    &upload.initial_comment,
                    None,
                    None,
                )?;
                let id = slack_id('F');
                tx.execute(
                    "INSERT INTO slack_sink_files (id, message_ts, name, title, size, bytes)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        id,
                        ts,
                        upload.filename,
                        upload.title,
                        upload.bytes.len() as i64,
                        upload.bytes
                    ],
                )?;
                tx.commit()?;
                Ok(id)
            })
            .await
            .map_err(|e| sink_error(METHOD, e))
    }

    /// Always true: the local sink is one developer's own workspace, where whoever clicks or
    /// types is the developer, who is in every channel.
    async fn is_member(&self, _channel: &str, _user: &str) -> Result<bool, SlackError> {
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn open(dir: &tempfile::TempDir) -> SqliteSlackSink {
        SqliteSlackSink::open(dir.path().join("s.db")).unwrap()
    }

    fn query(thread_ts: Option<&str>) -> SinkQuery {
        SinkQuery {
            thread_ts: thread_ts.map(str::to_owned),
            limit: 10,
            ..SinkQuery::default()
        }
    }

    #[tokio::test]
    async fn posts_and_edits_are_kept_and_listed_by_thread() {
        let dir = tempfile::tempdir().unwrap();
        let sink = open(&dir);
        let post = |thread: Option<&str>, text: &str| PostMessage {
            channel: "C1".into(),
            thread_ts: thread.map(str::to_owned),
            text: text.into(),
            blocks: None,
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
            blocks: None,
        })
        .await
        .unwrap();

        let thread = sink.list(query(Some("1.000001"))).await.unwrap();
        let texts: Vec<_> = thread.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["status: active", "hello"]);
        assert_eq!(thread[0].edits, 1);
        assert_eq!(thread[0].blocks, None);
        assert_eq!(thread[0].ephemeral_to, None);
        assert_eq!(thread[0].file, None);
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
                blocks: None,
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), Some(&ApiErrorCode::MessageNotFound));
        assert!(matches!(
            sink.download_file("https://files.slack.com/x", 10).await,
            Err(SlackError::Unsupported(_))
        ));
    }

    #[tokio::test]
    async fn blocks_are_kept_with_posts_and_edits_as_slack_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let sink = open(&dir);
        let card = |state: &str| {
            vec![
                json!({"type": "section", "text": {"type": "mrkdwn", "text": state}}),
                json!({"type": "actions", "block_id": "controls", "elements": [
                    {"type": "button", "action_id": "pause", "value": "slack:T1:C1:1.000001",
                     "text": {"type": "plain_text", "text": "Pause"}}
                ]}),
            ]
        };
        let posted = sink
            .post_message(&PostMessage {
                channel: "C1".into(),
                thread_ts: Some("1.000001".into()),
                text: "creating".into(),
                blocks: Some(card(":large_yellow_circle: creating")),
            })
            .await
            .unwrap();
        let read = |sink: SqliteSlackSink, ts: String| async move {
            sink.message(&ts).await.unwrap().expect("the message")
        };
        let first = read(sink.clone(), posted.ts.clone()).await;
        assert_eq!(
            first.blocks,
            Some(Value::Array(card(":large_yellow_circle: creating")))
        );

        // New blocks replace the old; none given keeps them; an empty list removes them.
        let update = |text: &str, blocks: Option<Vec<Value>>| UpdateMessage {
            channel: "C1".into(),
            ts: posted.ts.clone(),
            text: text.into(),
            blocks,
        };
        sink.update_message(&update("active", Some(card(":large_green_circle: active"))))
            .await
            .unwrap();
        sink.update_message(&update("active again", None))
            .await
            .unwrap();
        let edited = read(sink.clone(), posted.ts.clone()).await;
        assert_eq!(edited.text, "active again");
        assert_eq!(edited.edits, 2);
        assert_eq!(
            edited.blocks,
            Some(Value::Array(card(":large_green_circle: active")))
        );
        sink.update_message(&update("plain", Some(vec![])))
            .await
            .unwrap();
        assert_eq!(read(sink.clone(), posted.ts.clone()).await.blocks, None);
        assert_eq!(sink.message("9.999999").await.unwrap(), None);
    }

    #[tokio::test]
    async fn ephemeral_messages_are_marked_and_cannot_be_edited() {
        let dir = tempfile::tempdir().unwrap();
        let sink = open(&dir);
        sink.post_ephemeral(&EphemeralMessage {
            channel: "C1".into(),
            user: "U1".into(),
            thread_ts: Some("1.000001".into()),
            text: "only you".into(),
            blocks: Some(vec![json!({"type": "divider"})]),
        })
        .await
        .unwrap();
        let listed = sink.list(query(Some("1.000001"))).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].ephemeral_to.as_deref(), Some("U1"));
        assert_eq!(listed[0].blocks, Some(json!([{"type": "divider"}])));
        let edit = sink
            .update_message(&UpdateMessage {
                channel: "C1".into(),
                ts: listed[0].ts.clone(),
                text: "changed".into(),
                blocks: None,
            })
            .await
            .unwrap_err();
        assert_eq!(edit.code(), Some(&ApiErrorCode::MessageNotFound));
        assert!(sink.is_member("C1", "U1").await.unwrap());
    }

    #[tokio::test]
    async fn files_are_kept_with_a_message_and_a_preview_and_go_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let sink = open(&dir);
        // Long output whose preview ends in the middle of a two-byte character.
        let mut bytes = vec![b'a'; FILE_PREVIEW_BYTES - 1];
        bytes.extend("é and more".as_bytes());
        let upload = FileUpload {
            channel: "C1".into(),
            thread_ts: Some("1.000001".into()),
            filename: "output.txt".into(),
            title: "Output of ls".into(),
            initial_comment: ":paperclip: the whole output".into(),
            bytes: bytes.clone(),
        };
        let id = sink.upload_file(&upload).await.unwrap();
        assert!(id.starts_with('F') && id.len() == 11, "{id}");
        let listed = sink.list(query(Some("1.000001"))).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].text, ":paperclip: the whole output");
        let file = listed[0].file.as_ref().expect("the file");
        assert_eq!(file.id, id);
        assert_eq!(file.name, "output.txt");
        assert_eq!(file.title, "Output of ls");
        assert_eq!(file.size, bytes.len() as u64);
        assert_eq!(file.preview, "a".repeat(FILE_PREVIEW_BYTES - 1));

        // Not UTF-8 at all: shown lossily.
        let binary = FileUpload {
            bytes: vec![0xff, b'o', b'k'],
            ..upload.clone()
        };
        sink.upload_file(&binary).await.unwrap();
        let listed = sink.list(query(Some("1.000001"))).await.unwrap();
        assert_eq!(listed[1].file.as_ref().unwrap().preview, "\u{fffd}ok");

        let huge = FileUpload {
            bytes: vec![0; MAX_FILE_BYTES + 1],
            ..upload
        };
        let refused = sink.upload_file(&huge).await.unwrap_err();
        assert_eq!(refused.code().map(|c| c.as_str()), Some("file_too_large"));

        // Housekeeping deletes aged messages; their files go with them.
        sink.db
            .call(|conn| conn.execute("DELETE FROM slack_sink", []))
            .await
            .unwrap();
        let files: i64 = sink
            .db
            .call(|conn| conn.query_row("SELECT count(*) FROM slack_sink_files", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(files, 0);
    }

    #[tokio::test]
    async fn modals_open_finish_once_and_home_views_keep_the_latest_per_user() {
        let dir = tempfile::tempdir().unwrap();
        let sink = open(&dir);
        let modal = |title: &str| {
            json!({"type": "modal", "callback_id": "reset_confirm",
                   "private_metadata": "slack:T1:C1:1.000001",
                   "title": {"type": "plain_text", "text": title}, "blocks": []})
        };
        sink.open_view("1.2.first", &modal("First")).await.unwrap();
        sink.open_view("1.2.second", &modal("Reset?"))
            .await
            .unwrap();
        assert_eq!(
            sink.open_view("", &modal("x")).await.unwrap_err().code(),
            Some(&ApiErrorCode::Other("invalid_trigger_id".into()))
        );
        let views = sink.views(10).await.unwrap();
        assert_eq!(views.len(), 2);
        let (newest, older) = (&views[0], &views[1]);
        assert_eq!(newest.kind, SinkViewKind::Modal);
        assert_eq!(newest.trigger_id.as_deref(), Some("1.2.second"));
        assert_eq!(newest.view["title"]["text"], "Reset?");
        assert_eq!(newest.state, SinkViewState::Open);
        assert!(newest.id.starts_with('V'));
        assert_eq!(older.state, SinkViewState::Closed, "one modal at a time");

        let replaced = modal("Resetting…");
        assert!(sink.replace_view(&newest.id, &replaced).await.unwrap());
        assert!(sink
            .finish_view(&newest.id, SinkViewState::Submitted)
            .await
            .unwrap());
        assert!(!sink
            .finish_view(&newest.id, SinkViewState::Closed)
            .await
            .unwrap());
        assert!(!sink.replace_view(&newest.id, &replaced).await.unwrap());
        let done = sink.view(&newest.id).await.unwrap().unwrap();
        assert_eq!(done.state, SinkViewState::Submitted);
        assert_eq!(done.view["title"]["text"], "Resetting…");
        assert_eq!(sink.view("VNOPE").await.unwrap(), None);

        let home = |text: &str| {
            json!({"type": "home", "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}}]})
        };
        sink.publish_view("U1", &home("one")).await.unwrap();
        sink.publish_view("U1", &home("two")).await.unwrap();
        sink.publish_view("U2", &home("other")).await.unwrap();
        let homes: Vec<_> = sink
            .views(10)
            .await
            .unwrap()
            .into_iter()
            .filter(|v| v.kind == SinkViewKind::Home)
            .collect();
        assert_eq!(homes.len(), 2);
        let u1 = homes
            .iter()
            .find(|v| v.user.as_deref() == Some("U1"))
            .unwrap();
        assert_eq!(u1.view["blocks"][0]["text"]["text"], "two");
        assert_eq!(u1.state, SinkViewState::Open);
        assert!(!sink
            .finish_view(&u1.id, SinkViewState::Closed)
            .await
            .unwrap());
    }

    /// A data directory from before Block Kit: the table without the new columns, with a
    /// message in it. Opening it adds them and keeps the message.
    #[tokio::test]
    async fn an_older_sink_file_gains_the_new_columns_and_keeps_its_messages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE slack_sink (
                    ts TEXT PRIMARY KEY, channel TEXT NOT NULL, thread_ts TEXT,
                    text TEXT NOT NULL, posted_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
                    edits INTEGER NOT NULL DEFAULT 0
                 ) WITHOUT ROWID;
                 INSERT INTO slack_sink (ts, channel, thread_ts, text, posted_ms, updated_ms)
                 VALUES ('1.000002', 'C1', '1.000001', 'from before', 1, 1);",
            )
            .unwrap();
        }
        let sink = SqliteSlackSink::open(&path).unwrap();
        // Opening twice is harmless.
        let sink2 = SqliteSlackSink::open(&path).unwrap();
        let listed = sink.list(query(Some("1.000001"))).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].text, "from before");
        assert_eq!(listed[0].blocks, None);
        sink2
            .update_message(&UpdateMessage {
                channel: "C1".into(),
                ts: "1.000002".into(),
                text: "after".into(),
                blocks: Some(vec![json!({"type": "divider"})]),
            })
            .await
            .unwrap();
        sink.post_ephemeral(&EphemeralMessage {
            channel: "C1".into(),
            user: "U1".into(),
            thread_ts: Some("1.000001".into()),
            text: "new".into(),
            blocks: None,
        })
        .await
        .unwrap();
        let listed = sink.list(query(Some("1.000001"))).await.unwrap();
        assert_eq!(listed[0].blocks, Some(json!([{"type": "divider"}])));
        assert_eq!(listed[1].ephemeral_to.as_deref(), Some("U1"));
    }
}
