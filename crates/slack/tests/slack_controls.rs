//! The interactive Slack app, from a signed request to what Slack shows, over the embedded
//! adapters (SQLite store, queues, dedupe, user threads), the in-memory provider and the Slack
//! fake (which checks every Block Kit payload against Slack's limits): the status card and its
//! buttons, clicks acting once however often they arrive, the reset modal, `/sandbox`, the App
//! Home, and long output shared as a file.

#[path = "support/slack.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use threadbox_core::domain::{Cause, Status, ThreadId};
use threadbox_core::fanout::FanoutTarget;
use threadbox_core::ports::{DurableQueue, RecordOutcome, SystemClock};
use threadbox_core::usecases::Threadbox;
use threadbox_slack::{
    router, IncomingMessage, SigningSecret, SlackIngress, SlackStatusTarget, SlackWorker,
    SlackWorkerConfig, WorkItem, COMMANDS_PATH, EVENTS_PATH, INTERACTIONS_PATH,
};
use threadbox_sqlite::{SqliteQueue, SqliteSlackStatusStore, SqliteSlackUserThreads};
use threadbox_testing::slack_fake::SlackFake;
use threadbox_testing::InMemoryProvider;
use tower::ServiceExt;

use support::{client, event, fake};

const SECRET: &str = "controls-signing-secret";
const THREAD_TS: &str = "1767225600.000100";
const THREAD: &str = "slack:T1:C1:1767225600.000100";
const OTHER_THREAD: &str = "slack:T1:C1:1767225700.000200";

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
    let s = support::worker_setup(config).await;
    let worker = s
        .worker
        .with_user_threads(Arc::new(SqliteSlackUserThreads::open(&s.db).unwrap()));
    let ingress = SlackIngress::new(
        SigningSecret::new(SECRET),
        s.dedupe,
        s.work.clone(),
        Arc::new(SystemClock),
    )
    .with_api(client(&s.fake));
    s.fake.set_members("C1", &["U1", "U3"]);
    World {
        fake: s.fake,
        provider: s.provider,
        tb: s.tb,
        work: s.work,
        worker,
        app: router(ingress),
        _dir: s.dir,
    }
}

async fn world() -> World {
    world_with(SlackWorkerConfig::default()).await
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn thread(id: &str) -> ThreadId {
    ThreadId::parse(id).unwrap()
}

/// A request to `path` signed with `secret`, as Slack sends it.
fn signed(path: &str, content_type: &str, body: &str, secret: &str) -> Request<Body> {
    let ts = now_secs();
    let signature = SigningSecret::new(secret)
        .unwrap()
        .sign(ts, body.as_bytes());
    Request::post(path)
        .header("content-type", content_type)
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature)
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// An interaction payload as Slack's form body.
fn interaction(payload: &Value) -> String {
    serde_urlencoded::to_string([("payload", payload.to_string())]).unwrap()
}

/// A click on a button of a message in thread [`THREAD`].
fn click(action_id: &str, value: &str, user: &str, action_ts: &str, trigger: &str) -> Value {
    json!({
        "type": "block_actions",
        "team": {"id": "T1", "domain": "acme"},
        "user": {"id": user},
        "api_app_id": "A1",
        "container": {"type": "message", "message_ts": "1767225601.000001", "channel_id": "C1", "is_ephemeral": false},
        "trigger_id": trigger,
        "channel": {"id": "C1", "name": "general"},
        "message": {"ts": "1767225601.000001", "thread_ts": THREAD_TS},
        "response_url": "https://hooks.slack.com/actions/T1/1/x",
        "actions": [{
            "type": "button",
            "action_id": action_id,
            "block_id": "sandbox",
            "value": value,
            "action_ts": action_ts,
        }],
    })
}

impl World {
    async fn post(&self, request: Request<Body>) -> (StatusCode, String) {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// `/sandbox {text}` typed by `user`, signed as Slack sends it.
    async fn command(&self, text: &str, user: &str, trigger: &str) -> (StatusCode, String) {
        self.post(signed(
            COMMANDS_PATH,
            "application/x-www-form-urlencoded",
            &slash(text, user, trigger),
            SECRET,
        ))
        .await
    }

    async fn click(&self, payload: &Value) -> (StatusCode, String) {
        self.post(signed(
            INTERACTIONS_PATH,
            "application/x-www-form-urlencoded",
            &interaction(payload),
            SECRET,
        ))
        .await
    }

    /// Hand everything on the work queue to the worker, as the work loop does; the items.
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

    async fn status(&self, id: &str) -> Status {
        self.tb.session(&thread(id)).await.unwrap().unwrap().status
    }

    /// `user` says `text` to the app in `thread_id` (a mention the worker runs).
    async fn mention(&self, thread_id: &str, user: &str, ts: &str, text: &str) {
        let thread_ts = thread_id.rsplit(':').next().unwrap().to_owned();
        let item = WorkItem::Message(IncomingMessage {
            event_id: format!("Ev{ts}"),
            thread_id: thread(thread_id),
            channel: "C1".into(),
            ts: ts.into(),
            reply_thread_ts: Some(thread_ts),
            user: user.into(),
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
}

/// The action ids of every button in `blocks`.
fn buttons(blocks: &[Value]) -> Vec<String> {
    blocks
        .iter()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().unwrap().clone())
        .map(|e| e["action_id"].as_str().unwrap().to_owned())
        .collect()
}

fn all_text(blocks: &[Value]) -> String {
    serde_json::to_string(blocks).unwrap()
}

#[tokio::test]
async fn the_status_card_is_posted_once_and_edited_with_the_buttons_of_each_state() {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSlackStatusStore::open(dir.path().join("s.db")).unwrap();
    let target = SlackStatusTarget::new(client(&fake), Arc::new(store));
    let steps = [
        (Status::Creating, &[][..]),
        (Status::Active, &["pause", "reset"][..]),
        (Status::Paused, &["resume", "reset"][..]),
        (Status::Expired, &["reset"][..]),
    ];
    for (seq, (to, expected)) in steps.iter().enumerate() {
        let event = event(&format!("e{seq}"), THREAD, seq as u64 + 1, *to, Cause::User);
        target.deliver(&event).await.unwrap();
        let cards: Vec<_> = fake
            .messages()
            .into_iter()
            .filter(|m| m.blocks.is_some())
            .collect();
        assert_eq!(cards.len(), 1, "one card, edited in place");
        let blocks = cards[0].blocks.clone().unwrap();
        assert_eq!(buttons(&blocks), *expected, "{to:?}");
        assert!(
            all_text(&blocks).contains(to.as_str()),
            "the card names the state: {blocks:?}"
        );
        // Every button names the thread it acts on.
        for block in blocks.iter().filter(|b| b["type"] == "actions") {
            for button in block["elements"].as_array().unwrap() {
                assert_eq!(button["value"], THREAD);
            }
        }
        // The fallback text stays, for notifications and screen readers.
        assert!(cards[0].text.contains("Sandbox"), "{}", cards[0].text);
    }
    assert!(fake.rejections().is_empty(), "{:?}", fake.rejections());
}

#[tokio::test]
async fn a_signed_pause_click_pauses_the_thread_exactly_once_however_often_it_arrives() {
    let w = world().await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    let payload = click("pause", THREAD, "U1", "1767225700.000001", "t-none");

    let (status, _) = w.click(&payload).await;
    assert_eq!(status, StatusCode::OK);
    // Slack retries a request it thinks was lost: acknowledged, not queued again.
    let (status, _) = w.click(&payload).await;
    assert_eq!(status, StatusCode::OK);
    let handled = w.drain().await;
    assert_eq!(handled.len(), 1, "{handled:?}");
    assert_eq!(w.status(THREAD).await, Status::Paused);
    assert_eq!(w.provider.pauses(), 1);

    // Someone resumes the thread; then the queue hands the old click out again (a worker died
    // before acknowledging it). It was acted on: the thread is not paused a second time.
    w.tb.resume(&thread(THREAD)).await.unwrap();
    let again = w
        .worker
        .handle_body(&serde_json::to_string(&handled[0]).unwrap())
        .await;
    assert_eq!(again, RecordOutcome::Delivered);
    assert_eq!(w.status(THREAD).await, Status::Active);
    assert_eq!(w.provider.pauses(), 1);
    // A button's success is the card's change; nobody is told twice.
    assert!(w.fake.ephemerals().is_empty(), "{:?}", w.fake.ephemerals());
    assert!(w.fake.rejections().is_empty(), "{:?}", w.fake.rejections());
}

#[tokio::test]
async fn a_click_with_a_bad_signature_is_refused_and_changes_nothing() {
    let w = world().await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    let payload = click("pause", THREAD, "U1", "1767225700.000002", "t-none");
    let forged = signed(
        INTERACTIONS_PATH,
        "application/x-www-form-urlencoded",
        &interaction(&payload),
        "not-the-secret",
    );
    let (status, body) = w.post(forged).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    // Signed, but not a form Slack would send.
    let (status, body) = w
        .post(signed(
            INTERACTIONS_PATH,
            "application/x-www-form-urlencoded",
            "payload=%7Bnot-json",
            SECRET,
        ))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Signed, naming another workspace's thread.
    let (status, body) = w
        .click(&click(
            "pause",
            "slack:T9:C1:1767225600.000100",
            "U1",
            "1767225700.000003",
            "t-none",
        ))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(w.drain().await.is_empty());
    assert_eq!(w.status(THREAD).await, Status::Active);
}

#[tokio::test]
async fn only_members_of_the_threads_channel_can_act() {
    let w = world().await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    w.click(&click("pause", THREAD, "U2", "1767225700.000004", "t-none"))
        .await;
    w.drain().await;
    assert_eq!(w.status(THREAD).await, Status::Active);
    assert_eq!(w.provider.pauses(), 0);
}

#[tokio::test]
async fn reset_asks_in_a_modal_and_resets_once_when_confirmed() {
    let w = world().await;
    let first = w.tb.resolve(&thread(THREAD)).await.unwrap();
    let trigger = w.fake.issue_trigger();
    let (status, body) = w
        .click(&click("reset", THREAD, "U1", "1767225700.000005", &trigger))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Nothing is reset by the click itself: it only asks.
    assert!(w.drain().await.is_empty());
    let opened = w.fake.opened_views();
    assert_eq!(opened.len(), 1);
    let modal = &opened[0].view;
    assert_eq!(modal["type"], "modal");
    assert_eq!(modal["callback_id"], "reset_confirm");
    assert!(all_text(modal["blocks"].as_array().unwrap()).contains("files"));

    let submission = json!({
        "type": "view_submission",
        "team": {"id": "T1"},
        "user": {"id": "U1"},
        "trigger_id": "t-submit",
        "view": {
            "id": "V0001",
            "type": "modal",
            "callback_id": modal["callback_id"],
            "private_metadata": modal["private_metadata"],
            "hash": "1.abc",
            "state": {"values": {}},
        },
    });
    let (status, body) = w.click(&submission).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.is_empty(), "an empty answer closes the modal: {body}");
    // A second delivery of the same submission is the same reset.
    w.click(&submission).await;
    assert_eq!(w.drain().await.len(), 1);
    let session = w.tb.session(&thread(THREAD)).await.unwrap().unwrap();
    assert_eq!(session.status, Status::Active);
    assert_eq!(session.generation, first.generation + 1);
    assert!(w.fake.rejections().is_empty(), "{:?}", w.fake.rejections());
}

#[tokio::test]
async fn a_click_on_a_thread_whose_sandbox_is_gone_gets_an_explanation_only_the_clicker_sees() {
    let w = world().await;
    w.tb.resolve(&thread(THREAD)).await.unwrap();
    w.tb.destroy(&thread(THREAD), Cause::Retention)
        .await
        .unwrap();
    w.click(&click(
        "resume",
        THREAD,
        "U1",
        "1767225700.000006",
        "t-none",
    ))
    .await;
    w.drain().await;
    let answers = w.fake.ephemerals();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].user, "U1");
    assert_eq!(answers[0].channel, "C1");
    assert_eq!(answers[0].thread_ts.as_deref(), Some(THREAD_TS));
    assert!(answers[0].text.contains("gone"), "{}", answers[0].text);
    assert_eq!(w.status(THREAD).await, Status::Destroyed);
}

fn slash(text: &str, user: &str, trigger: &str) -> String {
    serde_urlencoded::to_string([
        ("token", "legacy-ignored"),
        ("team_id", "T1"),
        ("team_domain", "acme"),
        ("channel_id", "C1"),
        ("channel_name", "general"),
        ("user_id", user),
        ("user_name", "ada"),
        ("command", "/sandbox"),
        ("text", text),
        ("api_app_id", "A1"),
        ("response_url", "https://hooks.slack.com/commands/T1/1/x"),
        ("trigger_id", trigger),
    ])
    .unwrap()
}

#[tokio::test]
async fn sandbox_list_shows_the_callers_threads_in_the_channel_with_their_buttons() {
    let w = world().await;
    w.mention(THREAD, "U1", "1767225600.000100", "```echo one```")
        .await;
    w.mention(OTHER_THREAD, "U1", "1767225700.000200", "```echo two```")
        .await;
    // Someone else's thread is not the caller's.
    w.mention(
        "slack:T1:C1:1767225800.000300",
        "U3",
        "1767225800.000300",
        "```echo three```",
    )
    .await;
    w.tb.pause(&thread(THREAD)).await.unwrap();

    let (status, body) = w.command("list", "U1", "trig-1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    w.drain().await;
    let answers = w.fake.ephemerals();
    assert_eq!(answers.len(), 1, "{answers:?}");
    let blocks = answers[0].blocks.clone().unwrap();
    let text = all_text(&blocks);
    assert!(
        text.contains("1767225700") && text.contains("1767225600"),
        "{text}"
    );
    assert!(
        !text.contains("1767225800"),
        "another person's thread: {text}"
    );
    // Most recently used first: the other thread (active), then the paused one.
    assert_eq!(
        buttons(&blocks),
        ["pause#0", "reset#0", "resume#1", "reset#1"]
    );

    // Without a thread named, a command acts on the caller's latest thread.
    w.command("pause", "U1", "trig-2").await;
    w.drain().await;
    assert_eq!(w.status(OTHER_THREAD).await, Status::Paused);
    // `help` is answered at once, in the HTTP response, seen only by the caller.
    let (_, body) = w.command("help", "U1", "trig-3").await;
    let help: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(help["response_type"], "ephemeral");
    assert!(w.fake.rejections().is_empty(), "{:?}", w.fake.rejections());
}

#[tokio::test]
async fn the_app_home_lists_the_persons_threads_when_they_open_it() {
    let w = world().await;
    w.mention(THREAD, "U1", "1767225600.000100", "```echo one```")
        .await;
    let event = json!({
        "type": "event_callback",
        "team_id": "T1",
        "api_app_id": "A1",
        "event_id": "EvHome1",
        "event_time": now_secs(),
        "event": {"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "home", "event_ts": "1767225900.000001"},
    });
    let (status, body) = w
        .post(signed(
            EVENTS_PATH,
            "application/json",
            &event.to_string(),
            SECRET,
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    w.drain().await;
    let home = w.fake.published_view("U1").expect("the Home was published");
    assert_eq!(home["type"], "home");
    let blocks = home["blocks"].as_array().unwrap();
    assert!(all_text(blocks).contains("1767225600"), "{home}");
    assert_eq!(buttons(blocks), ["pause#0", "reset#0"]);

    // Pausing from the Home publishes it again, showing the new state.
    w.click(&json!({
        "type": "block_actions",
        "team": {"id": "T1"},
        "user": {"id": "U1"},
        "container": {"type": "view", "view_id": "VHOME"},
        "trigger_id": "t-none",
        "view": {"id": "VHOME", "type": "home"},
        "actions": [{"type": "button", "action_id": "pause#0", "block_id": "thread-0", "value": THREAD, "action_ts": "1767225900.000002"}],
    }))
    .await;
    w.drain().await;
    assert_eq!(w.status(THREAD).await, Status::Paused);
    assert_eq!(w.fake.publish_count("U1"), 2);
    let home = w.fake.published_view("U1").unwrap();
    assert_eq!(
        buttons(home["blocks"].as_array().unwrap()),
        ["resume#0", "reset#0"]
    );
    assert!(w.fake.rejections().is_empty(), "{:?}", w.fake.rejections());
}

#[tokio::test]
async fn a_long_output_is_shared_as_a_file_with_its_first_lines_inline() {
    let w = world_with(SlackWorkerConfig {
        max_code_chars_per_message: 200_000,
        ..SlackWorkerConfig::default()
    })
    .await;
    // The in-memory sandbox prints the command it ran: 100 KB of numbered lines.
    let code: String = (0..10_000).map(|n| format!("line {n:05}\n")).collect();
    assert!(code.len() >= 100_000);
    w.mention(THREAD, "U1", "1767225600.000100", &format!("```{code}```"))
        .await;
    let uploads = w.fake.uploads();
    assert_eq!(uploads.len(), 1, "{:?}", w.fake.calls());
    let upload = &uploads[0];
    assert!(upload.completed);
    assert_eq!(upload.channel.as_deref(), Some("C1"));
    assert_eq!(upload.thread_ts.as_deref(), Some(THREAD_TS));
    let bytes = upload.bytes.clone().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("line 00000") && text.contains("line 09999"));
    let comment = upload.initial_comment.clone().unwrap();
    assert!(comment.contains("line 00000"), "{comment}");
    assert!(
        !comment.contains("line 09999"),
        "only the first lines inline"
    );
    assert!(comment.contains("attached"), "{comment}");
    // No cut reply besides: the file is the answer.
    assert!(w.fake.messages().iter().all(|m| !m.text.contains("cut")));
    assert!(w.fake.rejections().is_empty(), "{:?}", w.fake.rejections());
}

#[tokio::test]
async fn a_long_command_shows_live_and_its_message_becomes_the_reply() {
    let w = world().await;
    // Longer than the live threshold: a message appears while it runs, then turns into the
    // reply, in place.
    w.provider.set_exec_delay(Duration::from_millis(3_500));
    w.mention(THREAD, "U1", "1767225600.000100", "```echo slow```")
        .await;
    let replies = w.fake.messages();
    assert_eq!(replies.len(), 1, "one message, edited: {replies:#?}");
    let reply = &replies[0];
    assert!(reply.text.contains("exited 0"), "{}", reply.text);
    assert!(
        reply.history.iter().any(|t| t.contains("running for")),
        "{:#?}",
        reply.history
    );
    // A quick command never shows a live message.
    w.provider.set_exec_delay(Duration::ZERO);
    w.mention(THREAD, "U1", "1767225600.000200", "```echo quick```")
        .await;
    let replies = w.fake.messages();
    assert_eq!(replies.len(), 2);
    assert!(replies[1].history.is_empty(), "{:#?}", replies[1]);
    assert!(w.fake.rejections().is_empty(), "{:?}", w.fake.rejections());
}
