//! Turns in Slack, over the embedded adapters (SQLite store, queues, dedupe and checkpoint
//! records), the in-memory provider (which keeps checkpoints like a provider with them) and the
//! Slack fake: a checkpoint before each code block and the Undo button on its reply; Undo asking
//! in a modal, acting once however often it is delivered, for members of the channel only;
//! turns switched off; and `/sandbox fork`.

#[path = "support/slack.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use threadbox_core::domain::{Cause, CheckpointRetention, ThreadId};
use threadbox_core::ports::{DurableQueue, RecordOutcome, SystemClock};
use threadbox_core::usecases::Threadbox;
use threadbox_slack::{
    router, IncomingMessage, SigningSecret, SlackIngress, SlackWorker, SlackWorkerConfig, WorkItem,
    COMMANDS_PATH, INTERACTIONS_PATH,
};
use threadbox_sqlite::{SqliteCheckpointStore, SqliteQueue};
use threadbox_testing::slack_fake::{Fault, SlackFake};
use threadbox_testing::InMemoryProvider;
use tower::ServiceExt;

use support::{client, embedded, fake};

const SECRET: &str = "checkpoints-signing-secret";
const THREAD_TS: &str = "1767225600.000100";
const THREAD: &str = "slack:T1:C1:1767225600.000100";
const FILE: &str = "/home/user/state.txt";

struct World {
    fake: SlackFake,
    provider: Arc<InMemoryProvider>,
    tb: Threadbox,
    work: Arc<SqliteQueue>,
    worker: SlackWorker,
    app: axum::Router,
    _dir: tempfile::TempDir,
}

async fn world_with(config: SlackWorkerConfig) -> World {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let e = embedded(&db).await;
    let checkpoints = Arc::new(SqliteCheckpointStore::open(&db).unwrap());
    let tb =
        e.tb.with_checkpoints(checkpoints, CheckpointRetention::default());
    let worker = SlackWorker::new(
        tb.clone(),
        client(&fake),
        e.dedupe.clone(),
        e.work.clone(),
        config,
    );
    let ingress = SlackIngress::new(
        SigningSecret::new(SECRET),
        e.dedupe,
        e.work.clone(),
        Arc::new(SystemClock),
    )
    .with_api(client(&fake));
    fake.set_members("C1", &["U1"]);
    World {
        fake,
        provider: e.provider,
        tb,
        work: e.work,
        worker,
        app: router(ingress),
        _dir: dir,
    }
}

fn thread(id: &str) -> ThreadId {
    ThreadId::parse(id).unwrap()
}

fn signed(path: &str, body: &str) -> Request<Body> {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let signature = SigningSecret::new(SECRET)
        .unwrap()
        .sign(ts, body.as_bytes());
    Request::post(path)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature)
        .body(Body::from(body.to_owned()))
        .unwrap()
}

impl World {
    async fn post(&self, request: Request<Body>) -> (StatusCode, String) {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    async fn interaction(&self, payload: &Value) -> (StatusCode, String) {
        let body = serde_urlencoded::to_string([("payload", payload.to_string())]).unwrap();
        self.post(signed(INTERACTIONS_PATH, &body)).await
    }

    async fn drain(&self) -> Vec<WorkItem> {
        let mut handled = Vec::new();
        loop {
            let batch = self
                .work
                .receive(10, Duration::from_secs(30))
                .await
                .unwrap();
            if batch.is_empty() {
                return handled;
            }
            for message in batch {
                let outcome = self.worker.handle_body(&message.body).await;
                assert_eq!(outcome, RecordOutcome::Delivered, "{}", message.body);
                self.work.ack(&message.receipt).await.unwrap();
                handled.push(serde_json::from_str(&message.body).unwrap());
            }
        }
    }

    async fn mention(&self, ts: &str, text: &str) {
        let item = WorkItem::Message(IncomingMessage {
            event_id: format!("Ev{ts}"),
            thread_id: thread(THREAD),
            channel: "C1".into(),
            ts: ts.into(),
            reply_thread_ts: Some(THREAD_TS.into()),
            user: "U1".into(),
            text: text.into(),
            files: Vec::new(),
            addressed: true,
        });
        let outcome = self
            .worker
            .handle_body(&serde_json::to_string(&item).unwrap())
            .await;
        assert_eq!(outcome, RecordOutcome::Delivered);
    }

    async fn write(&self, text: &str) {
        self.tb
            .write_file(&thread(THREAD), FILE, text.as_bytes())
            .await
            .unwrap();
    }

    async fn read(&self, thread_id: &str) -> String {
        let bytes = self.tb.read_file(&thread(thread_id), FILE).await.unwrap();
        String::from_utf8(bytes).unwrap()
    }

    /// The Undo buttons on replies in the thread, oldest first.
    fn undo_buttons(&self) -> Vec<Value> {
        self.fake
            .messages()
            .into_iter()
            .filter(|m| m.thread_ts.as_deref() == Some(THREAD_TS))
            .filter_map(|m| m.blocks)
            .flatten()
            .filter(|b| b["type"] == "actions")
            .flat_map(|b| b["elements"].as_array().unwrap().clone())
            .filter(|e| e["action_id"] == "undo")
            .collect()
    }
}

fn click_undo(value: &str, user: &str, action_ts: &str, trigger: &str) -> Value {
    json!({
        "type": "block_actions",
        "team": {"id": "T1", "domain": "acme"},
        "user": {"id": user},
        "trigger_id": trigger,
        "channel": {"id": "C1", "name": "general"},
        "actions": [{"type": "button", "action_id": "undo", "block_id": "undo", "value": value, "action_ts": action_ts}],
    })
}

fn submission(view: &Value, user: &str, view_id: &str) -> Value {
    json!({
        "type": "view_submission",
        "team": {"id": "T1"},
        "user": {"id": user},
        "view": {
            "id": view_id,
            "type": "modal",
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {"values": {}},
        },
    })
}

#[tokio::test]
async fn each_code_block_gets_an_undo_that_asks_then_restores_once() {
    let w = world_with(SlackWorkerConfig::default()).await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    w.write("before\n").await;
    w.mention("1767225601.000001", "```bash\necho one\n```")
        .await;
    // What the block did to the files (the in-memory provider runs nothing).
    w.write("after the block\n").await;

    let undo = w.undo_buttons();
    assert_eq!(undo.len(), 1, "{:?}", w.fake.messages());
    let value = undo[0]["value"].as_str().unwrap().to_owned();
    let (checkpoint, named) = value.split_once('@').unwrap();
    assert_eq!(named, THREAD);
    let listed = w.tb.list_checkpoints(&thread(THREAD)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id.as_str(), checkpoint);
    assert_eq!(listed[0].label.as_deref(), Some("before code block 1"));

    // The click only asks.
    let trigger = w.fake.issue_trigger();
    let (status, body) = w
        .interaction(&click_undo(&value, "U1", "1767225700.000001", &trigger))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(w.drain().await.is_empty());
    assert_eq!(w.read(THREAD).await, "after the block\n");
    let opened = w.fake.opened_views();
    assert_eq!(opened.len(), 1);
    let modal = opened[0].view.clone();
    assert_eq!(modal["callback_id"], "undo_confirm");
    assert!(modal.to_string().contains("stopped"), "{modal}");

    // Confirmed, delivered twice: one restore.
    let confirm = submission(&modal, "U1", "V0001");
    w.interaction(&confirm).await;
    w.interaction(&confirm).await;
    let handled = w.drain().await;
    assert_eq!(handled.len(), 1, "{handled:?}");
    assert_eq!(w.read(THREAD).await, "before\n");
    let answers = w.fake.ephemerals();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(answers[0].text.contains("Undone"), "{}", answers[0].text);

    // The queue hands the same work out again (a worker died before acknowledging it): the
    // files are not put back a second time.
    w.write("changed since\n").await;
    let again = w
        .worker
        .handle_body(&serde_json::to_string(&handled[0]).unwrap())
        .await;
    assert_eq!(again, RecordOutcome::Delivered);
    assert_eq!(w.read(THREAD).await, "changed since\n");
    assert!(w.fake.rejections().is_empty(), "{:?}", w.fake.rejections());
}

#[tokio::test]
async fn only_members_of_the_channel_can_undo_and_bad_buttons_are_refused() {
    let w = world_with(SlackWorkerConfig::default()).await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    w.write("before\n").await;
    w.mention("1767225601.000002", "```bash\necho one\n```")
        .await;
    w.write("after\n").await;
    let value = w.undo_buttons()[0]["value"].as_str().unwrap().to_owned();

    let trigger = w.fake.issue_trigger();
    w.interaction(&click_undo(&value, "U2", "1767225700.000002", &trigger))
        .await;
    let modal = w.fake.opened_views()[0].view.clone();
    w.interaction(&submission(&modal, "U2", "V0002")).await;
    w.drain().await;
    assert_eq!(
        w.read(THREAD).await,
        "after\n",
        "an outsider changed nothing"
    );
    let events =
        w.tb.store
            .events_after(&thread(THREAD), 0, 1000)
            .await
            .unwrap();
    assert!(
        events.iter().all(|e| e.cause != Cause::Restore),
        "{events:?}"
    );

    // A button naming another workspace's thread, or no checkpoint, or a bad one.
    let checkpoint = value.split_once('@').unwrap().0;
    for bad in [
        format!("{checkpoint}@slack:T9:C1:1767225600.000100"),
        THREAD.to_owned(),
        format!("cp-nope@{THREAD}"),
    ] {
        let (status, body) = w
            .interaction(&click_undo(&bad, "U1", "1767225700.000003", "t-x"))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    assert!(w.drain().await.is_empty());
}

#[tokio::test]
async fn with_turns_off_a_block_takes_no_checkpoint_and_has_no_undo() {
    let w = world_with(SlackWorkerConfig {
        checkpoint_turns: false,
        ..SlackWorkerConfig::default()
    })
    .await;
    w.mention("1767225601.000003", "```bash\necho one\n```")
        .await;
    assert!(w.undo_buttons().is_empty());
    assert!(w
        .tb
        .list_checkpoints(&thread(THREAD))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(w.provider.checkpoint_copies(), 0);
}

#[tokio::test]
async fn sandbox_fork_starts_a_new_thread_with_the_files_and_links_the_two() {
    let w = world_with(SlackWorkerConfig::default()).await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    w.write("shared start\n").await;
    let form = serde_urlencoded::to_string([
        ("team_id", "T1"),
        ("channel_id", "C1"),
        ("user_id", "U1"),
        ("command", "/sandbox"),
        ("text", &format!("fork {THREAD_TS}")),
        ("trigger_id", "t-fork-1"),
    ])
    .unwrap();
    let (status, body) = w.post(signed(COMMANDS_PATH, &form)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    w.drain().await;

    let top: Vec<_> = w
        .fake
        .messages()
        .into_iter()
        .filter(|m| m.channel == "C1" && m.thread_ts.is_none())
        .collect();
    assert_eq!(top.len(), 1, "{top:?}");
    let new_thread = format!("slack:T1:C1:{}", top[0].ts);
    assert_eq!(w.read(&new_thread).await, "shared start\n");
    let linked = w
        .fake
        .messages()
        .into_iter()
        .any(|m| m.thread_ts.as_deref() == Some(THREAD_TS) && m.text.contains("Forked into"));
    assert!(linked, "{:?}", w.fake.messages());
    let answers = w.fake.ephemerals();
    assert!(
        answers.iter().any(|a| a.text.starts_with("Forked")),
        "{answers:?}"
    );
    // The source is untouched and the two are apart.
    w.tb.write_file(&thread(&new_thread), FILE, b"only in the fork\n")
        .await
        .unwrap();
    assert_eq!(w.read(THREAD).await, "shared start\n");
}

#[tokio::test]
async fn a_reply_a_rate_limit_held_back_keeps_its_undo() {
    let w = world_with(SlackWorkerConfig::default()).await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    w.write("before\n").await;
    // Slack refuses the block's reply for longer than the worker waits inline: it is queued.
    w.fake.fail_next(
        "chat.postMessage",
        Fault::RateLimited {
            retry_after_secs: 30,
        },
    );
    w.mention("1767225601.000001", "```bash\necho one\n```")
        .await;
    assert!(w.undo_buttons().is_empty(), "{:?}", w.fake.messages());
    w.write("after the block\n").await;

    let handled = w.drain().await;
    let [WorkItem::Reply(reply)] = &handled[..] else {
        panic!("the held-back reply, alone: {handled:?}");
    };
    assert!(reply.blocks.is_some(), "{reply:?}");
    let undo = w.undo_buttons();
    assert_eq!(
        undo.len(),
        1,
        "the reply kept its Undo: {:?}",
        w.fake.messages()
    );
    let value = undo[0]["value"].as_str().unwrap().to_owned();
    let listed = w.tb.list_checkpoints(&thread(THREAD)).await.unwrap();
    assert_eq!(value, format!("{}@{THREAD}", listed[0].id));

    // And it works as any Undo does.
    let trigger = w.fake.issue_trigger();
    w.interaction(&click_undo(&value, "U1", "1767225700.000001", &trigger))
        .await;
    let modal = w.fake.opened_views()[0].view.clone();
    w.interaction(&submission(&modal, "U1", "V0001")).await;
    assert_eq!(w.drain().await.len(), 1);
    assert_eq!(w.read(THREAD).await, "before\n");
}

#[tokio::test]
async fn without_checkpoints_a_block_has_no_undo_and_a_fork_posts_nothing() {
    let w = world_with(SlackWorkerConfig::default()).await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    // As E2B: the provider has no checkpoints.
    w.provider.refuse_checkpoints(true);
    w.mention("1767225601.000001", "```bash\necho one\n```")
        .await;
    assert!(w.undo_buttons().is_empty(), "{:?}", w.fake.messages());
    assert!(
        !w.fake.messages().is_empty(),
        "the block still ran and replied"
    );

    let form = serde_urlencoded::to_string([
        ("team_id", "T1"),
        ("channel_id", "C1"),
        ("user_id", "U1"),
        ("command", "/sandbox"),
        ("text", &format!("fork {THREAD_TS}")),
        ("trigger_id", "t-fork-2"),
    ])
    .unwrap();
    let (status, body) = w.post(signed(COMMANDS_PATH, &form)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    w.drain().await;
    let top: Vec<_> = w
        .fake
        .messages()
        .into_iter()
        .filter(|m| m.thread_ts.is_none())
        .collect();
    assert!(top.is_empty(), "no thread was started: {top:?}");
    let answers = w.fake.ephemerals();
    assert!(
        answers
            .iter()
            .any(|a| a.text.starts_with(":x: The fork failed: ")
                && a.text.contains("the memory provider cannot")),
        "{answers:?}"
    );
}
