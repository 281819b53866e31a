//! Checkpoints on the AWS stack: the functions built by their own `build` (what each `main`
//! serves) from the environment `infra/template.yaml` gives them, with the template's
//! `CheckpointsKept` and `CheckpointBytes`, their records on moto's sessions table, and every AWS
//! call each function makes checked against its role (as `iam.rs` does).
//!
//! - On E2B (its contract fake), which has no checkpoints: sandbox-api's router answers taking,
//!   restoring and forking 501 `unsupported` naming E2B, and nothing is written or made (no
//!   thread for the fork, no event, no sandbox); a Slack code block runs without an Undo.
//! - On runc (root, like the other sandbox tests): sandbox-api takes, lists, restores, forks and
//!   deletes, its records on DynamoDB within the template's limits; the worker checkpoints a
//!   Slack code block, and its Undo (the click, the modal, the confirmation, through
//!   slack-events and the work queue) puts the files back; the janitor's retention, carried out
//!   by pause-queue, forgets every destroyed thread's checkpoints.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use threadbox_aws::dynamo::{DynamoCheckpointStore, DynamoConfig, DynamoSessionStore};
use threadbox_core::domain::{CheckpointRetention, Status, ThreadId};
use threadbox_core::ports::{CheckpointStore, SessionStore};
use threadbox_lambda::Setup;
use threadbox_runc::{find_runc, host_can_run_sandboxes};
use threadbox_testing::e2b_fake::E2bFake;
use threadbox_testing::slack_fake::SlackFake;
use threadbox_tests::iam::{IamStack, StackSecrets};
use threadbox_tests::lambda::{
    assert_ok, fixture_json, http_event, invoke_http, scheduled_now, signed, ApiAnswer,
};

const BOT_TOKEN: &str = "xoxb-checkpoints-token";
const SIGNING_SECRET: &str = "checkpoints-signing-secret-not-real";
/// The Slack thread of the mention fixture.
const SLACK_THREAD: &str = "slack:T0001:C0001:1767225590.000100";

/// The template's checkpoint limits, small enough to see retention; the idle pause and
/// retention short enough for one sweep to destroy what the test leaves.
const PARAMETERS: &[(&str, &str)] = &[
    ("CheckpointsKept", "2"),
    ("CheckpointBytes", "64MiB"),
    ("IdlePauseSeconds", "1"),
    ("RetentionSeconds", "3"),
];

fn secrets(e2b_api_key: String) -> StackSecrets {
    StackSecrets {
        e2b_api_key,
        slack_bot_token: BOT_TOKEN.to_owned(),
        slack_signing_secret: SIGNING_SECRET.to_owned(),
    }
}

/// What `main` hands a function's `build`: its recorded SDK config, its environment, its
/// secrets.
async fn setup(stack: &IamStack, function: &str, overrides: &[(String, String)]) -> Setup {
    let (sdk, env, secrets) = stack.start(function, overrides).await;
    Setup { sdk, env, secrets }
}

/// The stores, read with the unrecorded config (the test's own look, not a function's call).
fn stores(stack: &IamStack) -> (DynamoSessionStore, DynamoCheckpointStore) {
    let config = DynamoConfig::new(&stack.sessions_table, format!("{}-events", stack.prefix));
    (
        DynamoSessionStore::from_sdk_config(&stack.sdk, config),
        DynamoCheckpointStore::from_sdk_config(&stack.sdk, &stack.sessions_table),
    )
}

fn thread(id: &str) -> ThreadId {
    ThreadId::parse(id).unwrap()
}

async fn call(router: &axum::Router, method: &str, path: &str, body: Option<Value>) -> ApiAnswer {
    invoke_http(router.clone(), &http_event(method, path, "", body)).await
}

async fn exec(router: &axum::Router, thread: &str, cmd: &str) -> String {
    let path = format!("/v1/threads/{thread}/exec");
    let answer = call(router, "POST", &path, Some(json!({ "cmd": cmd }))).await;
    assert_ok(&answer, cmd);
    let out = answer.json();
    assert_eq!(out["exit_code"], 0, "{cmd}: {out}");
    out["stdout"].as_str().unwrap().to_owned()
}

/// A mention in the fixture's Slack thread whose text is `text`, signed now.
fn mention(event_id: &str, ts: &str, text: &str) -> Value {
    let mut event = fixture_json("apigw-http-slack-app-mention.json");
    let mut body: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
    body["event_id"] = json!(event_id);
    body["event"]["thread_ts"] = json!("1767225590.000100");
    body["event"]["ts"] = json!(ts);
    body["event"]["text"] = json!(format!("<@U0BOT> {text}"));
    event["body"] = json!(body.to_string());
    signed(event, SIGNING_SECRET)
}

/// An interaction (a click, a modal's submission) as Slack posts it, signed now.
fn interaction(payload: &Value) -> Value {
    let mut event = fixture_json("apigw-http-slack-interaction.json");
    let form = serde_urlencoded::to_string([("payload", payload.to_string())]).unwrap();
    event["body"] = json!(form);
    event["isBase64Encoded"] = json!(false);
    signed(event, SIGNING_SECRET)
}

/// Hand everything on the work queue to the worker, as Lambda's poller would.
async fn work(stack: &IamStack, worker: &worker::WorkHandler) -> usize {
    let mut handled = 0;
    while let Some(event) = stack.drain(&stack.work.queue_url).await {
        handled += event.payload.records.len();
        let response = worker.handle(event).await.unwrap();
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }
    handled
}

/// The Undo buttons on the Slack thread's replies, oldest first.
fn undo_buttons(slack: &SlackFake) -> Vec<Value> {
    slack
        .messages()
        .into_iter()
        .filter_map(|m| m.blocks)
        .flatten()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().unwrap().clone())
        .filter(|e| e["action_id"] == "undo")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_e2b_taking_restoring_and_forking_answer_501_naming_e2b_and_change_nothing() {
    // On the heap: the functions' futures are more than a test thread's stack holds in debug.
    Box::pin(on_e2b()).await;
}

async fn on_e2b() {
    let test = "on_e2b_taking_restoring_and_forking_answer_501_naming_e2b_and_change_nothing";
    let e2b = E2bFake::start().await;
    let slack = SlackFake::start(BOT_TOKEN).await;
    let Some(stack) = IamStack::new(test, PARAMETERS, &secrets(e2b.api_key())).await else {
        return;
    };
    let mut overrides: Vec<(String, String)> = e2b
        .env_vars()
        .into_iter()
        .filter(|(k, _)| k != "E2B_API_KEY")
        .collect();
    overrides.push(("SLACK_API_URL".into(), slack.api_url()));

    let (_, _, tb) = stack
        .start_threadbox("SandboxApiFunction", &overrides)
        .await;
    assert_eq!(
        tb.checkpoints.as_ref().map(|c| c.retention),
        Some(CheckpointRetention::new(2, 64 << 20).unwrap()),
        "the template's limits reach the function"
    );
    let router = sandbox_api::build(setup(&stack, "SandboxApiFunction", &overrides).await)
        .await
        .unwrap();
    let (sessions, checkpoints) = stores(&stack);
    let t = "/v1/threads/cp-e2b";
    assert_eq!(exec(&router, "cp-e2b", "echo hi").await, "hi\n");
    let events = sessions
        .events_after(&thread("cp-e2b"), 0, 1000)
        .await
        .unwrap()
        .len();
    let sandboxes = e2b.sandboxes_started();

    for (path, body) in [
        (format!("{t}/checkpoints"), json!({"label": "before"})),
        (
            format!("{t}/restore"),
            json!({"checkpoint": "cp-0123456789abcdef0123"}),
        ),
        (format!("{t}/fork"), json!({"thread": "cp-e2b-fork"})),
    ] {
        let answer = call(&router, "POST", &path, Some(body)).await;
        assert_eq!(answer.status, 501, "POST {path}: {:?}", answer.json());
        assert_eq!(answer.error_code(), "unsupported");
        let message = answer.json()["error"]["message"].to_string();
        assert!(message.contains("e2b provider"), "{path}: {message}");
    }
    let listed = call(&router, "GET", &format!("{t}/checkpoints"), None).await;
    assert_ok(&listed, "list");
    assert_eq!(listed.json()["checkpoints"], json!([]));
    // Nothing was written or made.
    assert!(sessions
        .load(&thread("cp-e2b-fork"))
        .await
        .unwrap()
        .is_none());
    let after = sessions.events_after(&thread("cp-e2b"), 0, 1000).await;
    assert_eq!(after.unwrap().len(), events, "no event was written");
    assert_eq!(e2b.sandboxes_started(), sandboxes, "no sandbox was made");
    assert!(checkpoints
        .list(&thread("cp-e2b"))
        .await
        .unwrap()
        .is_empty());

    // Slack: the code block runs, and its reply has no Undo.
    let slack_events = slack_events::build(setup(&stack, "SlackEventsFunction", &overrides).await)
        .await
        .unwrap();
    let worker = worker::build(setup(&stack, "WorkerFunction", &overrides).await)
        .await
        .unwrap();
    let event = mention(
        "Ev0CPE2B0001",
        "1767225591.000200",
        "```bash\necho no undo here\n```",
    );
    assert_ok(&invoke_http(slack_events, &event).await, "mention");
    assert_eq!(work(&stack, &worker).await, 1);
    let replies = slack.messages();
    assert!(
        replies.iter().any(|m| m.text.contains("no undo here")),
        "{replies:?}"
    );
    assert!(undo_buttons(&slack).is_empty(), "{replies:?}");
    assert!(checkpoints
        .list(&thread(SLACK_THREAD))
        .await
        .unwrap()
        .is_empty());
    stack.assert_allowed();
}

/// The runc containers of a state directory, deleted when dropped (what a failed run left).
struct RuncState(tempfile::TempDir);

impl RuncState {
    fn containers(&self) -> Vec<String> {
        let out = Command::new(runc())
            .arg("--root")
            .arg(self.root())
            .args(["list", "-q"])
            .output()
            .expect("runc list");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    fn root(&self) -> PathBuf {
        self.0.path().join("runc")
    }
}

fn runc() -> PathBuf {
    find_runc().unwrap_or_else(|| PathBuf::from("runc"))
}

impl Drop for RuncState {
    fn drop(&mut self) {
        for id in self.containers() {
            let _ = Command::new(runc())
                .arg("--root")
                .arg(self.root())
                .args(["delete", "--force", &id])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_runc_checkpoints_restore_fork_and_undo_keep_their_records_on_dynamodb() {
    Box::pin(on_runc()).await;
}

async fn on_runc() {
    let test = "on_runc_checkpoints_restore_fork_and_undo_keep_their_records_on_dynamodb";
    if let Err(why) = host_can_run_sandboxes() {
        assert!(
            std::env::var("THREADBOX_REQUIRE_SANDBOXES").as_deref() != Ok("1"),
            "THREADBOX_REQUIRE_SANDBOXES=1 but {why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    let slack = SlackFake::start(BOT_TOKEN).await;
    slack.set_members("C0001", &["U0001"]);
    let Some(stack) = IamStack::new(test, PARAMETERS, &secrets("e2b_unused".into())).await else {
        return;
    };
    let state = RuncState(tempfile::tempdir().unwrap());
    let overrides: Vec<(String, String)> = vec![
        ("THREADBOX_PROVIDER".into(), "runc".into()),
        (
            "THREADBOX_RUNC_STATE_DIR".into(),
            state.0.path().display().to_string(),
        ),
        ("SLACK_API_URL".into(), slack.api_url()),
    ];
    let (sessions, checkpoints) = stores(&stack);
    let router = sandbox_api::build(setup(&stack, "SandboxApiFunction", &overrides).await)
        .await
        .unwrap();
    Box::pin(api_paths(&router, &checkpoints)).await;
    Box::pin(slack_undo(&stack, &slack, &overrides, &checkpoints)).await;

    // Retention: the janitor claims each idle thread's destroy, pause-queue carries it out,
    // and the thread's checkpoints go with it (records and copies).
    let janitor = janitor::build(setup(&stack, "JanitorFunction", &overrides).await)
        .await
        .unwrap();
    let carrier = pause::build_queue_handler(setup(&stack, "PauseQueueFunction", &overrides).await)
        .await
        .unwrap();
    let threads = ["cpr-src", "cpr-fork", SLACK_THREAD];
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(4)).await;
        janitor.handle(scheduled_now()).await.unwrap();
        while let Some(event) = stack.drain(&stack.transitions.queue_url).await {
            let response = carrier.handle(event).await.unwrap();
            assert!(response.batch_item_failures.is_empty(), "{response:?}");
        }
        let mut destroyed = 0;
        for t in threads {
            let session = sessions.load(&thread(t)).await.unwrap().unwrap();
            destroyed += usize::from(session.status == Status::Destroyed);
        }
        if destroyed == threads.len() {
            break;
        }
    }
    for t in threads {
        let session = sessions.load(&thread(t)).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Destroyed, "{t}");
        let left = checkpoints.list(&thread(t)).await.unwrap();
        assert!(left.is_empty(), "{t} kept {left:?}");
    }
    assert!(
        !state.0.path().join("checkpoints").exists()
            || std::fs::read_dir(state.0.path().join("checkpoints"))
                .unwrap()
                .next()
                .is_none(),
        "the copies went with their threads"
    );
    assert_eq!(state.containers(), Vec::<String>::new());
    stack.assert_allowed();
}

/// sandbox-api: take, list (within the template's two), restore, fork, delete.
async fn api_paths(router: &axum::Router, checkpoints: &DynamoCheckpointStore) {
    let t = "/v1/threads/cpr-src";
    exec(router, "cpr-src", "echo one > note").await;
    let take = |label: &'static str| async move {
        let answer = call(
            router,
            "POST",
            &format!("{t}/checkpoints"),
            Some(json!({ "label": label })),
        )
        .await;
        assert_eq!(answer.status, 201, "{:?}", answer.json());
        answer.json()
    };
    let first = take("one").await;
    exec(router, "cpr-src", "echo two > note").await;
    let second = take("two").await;
    exec(router, "cpr-src", "echo three > note").await;
    let third = take("three").await;

    // The template keeps two: the oldest went, record and copy.
    let listed = call(router, "GET", &format!("{t}/checkpoints"), None).await;
    assert_ok(&listed, "list");
    let ids: Vec<Value> = listed.json()["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(ids, vec![third["id"].clone(), second["id"].clone()]);
    let stored = checkpoints.list(&thread("cpr-src")).await.unwrap();
    assert_eq!(stored.len(), 2, "on the sessions table: {stored:?}");
    let gone = call(
        router,
        "POST",
        &format!("{t}/restore"),
        Some(json!({ "checkpoint": first["id"] })),
    )
    .await;
    assert_eq!(gone.status, 404, "{:?}", gone.json());

    exec(router, "cpr-src", "echo four > note").await;
    let restored = call(
        router,
        "POST",
        &format!("{t}/restore"),
        Some(json!({ "checkpoint": second["id"] })),
    )
    .await;
    assert_ok(&restored, "restore");
    assert_eq!(exec(router, "cpr-src", "cat note").await, "two\n");

    let forked = call(
        router,
        "POST",
        &format!("{t}/fork"),
        Some(json!({ "thread": "cpr-fork", "checkpoint": third["id"] })),
    )
    .await;
    assert_eq!(forked.status, 201, "{:?}", forked.json());
    assert_eq!(exec(router, "cpr-fork", "cat note").await, "three\n");
    assert_eq!(exec(router, "cpr-src", "cat note").await, "two\n");

    let deleted = call(
        router,
        "DELETE",
        &format!("{t}/checkpoints/{}", third["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_ok(&deleted, "delete");
    let stored = checkpoints.list(&thread("cpr-src")).await.unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
}

/// The worker checkpoints a code block; its Undo, asked in a modal and confirmed, restores it.
async fn slack_undo(
    stack: &IamStack,
    slack: &SlackFake,
    overrides: &[(String, String)],
    checkpoints: &DynamoCheckpointStore,
) {
    let slack_events = slack_events::build(setup(stack, "SlackEventsFunction", overrides).await)
        .await
        .unwrap();
    let worker = worker::build(setup(stack, "WorkerFunction", overrides).await)
        .await
        .unwrap();
    let block = |event_id: &str, ts: &str, cmd: &str| {
        mention(event_id, ts, &format!("```bash\n{cmd}\n```"))
    };
    let before = block("Ev0CPR0001", "1767225591.000201", "echo before > note");
    assert_ok(
        &invoke_http(slack_events.clone(), &before).await,
        "first block",
    );
    assert_eq!(work(stack, &worker).await, 1);
    let turn = block(
        "Ev0CPR0002",
        "1767225592.000202",
        "echo after > note; cat note",
    );
    assert_ok(
        &invoke_http(slack_events.clone(), &turn).await,
        "second block",
    );
    assert_eq!(work(stack, &worker).await, 1);

    let undo = undo_buttons(slack);
    assert_eq!(undo.len(), 2, "{:?}", slack.messages());
    let value = undo[1]["value"].as_str().unwrap().to_owned();
    let (checkpoint, named) = value.split_once('@').unwrap();
    assert_eq!(named, SLACK_THREAD);
    let stored = checkpoints.list(&thread(SLACK_THREAD)).await.unwrap();
    assert_eq!(stored[0].id.as_str(), checkpoint, "{stored:?}");
    assert_eq!(stored[0].label.as_deref(), Some("before code block 1"));

    // The click asks; the confirmation restores.
    let trigger = slack.issue_trigger();
    let click = json!({
        "type": "block_actions",
        "team": {"id": "T0001", "domain": "acme"},
        "user": {"id": "U0001"},
        "trigger_id": trigger,
        "channel": {"id": "C0001", "name": "general"},
        "actions": [{"type": "button", "action_id": "undo", "block_id": "undo", "value": value, "action_ts": "1767225700.000001"}],
    });
    assert_ok(
        &invoke_http(slack_events.clone(), &interaction(&click)).await,
        "click",
    );
    let opened = slack.opened_views();
    assert_eq!(opened.len(), 1, "the confirmation modal");
    let modal = &opened[0].view;
    let confirm = json!({
        "type": "view_submission",
        "team": {"id": "T0001"},
        "user": {"id": "U0001"},
        "view": {
            "id": "V0001",
            "type": "modal",
            "callback_id": modal["callback_id"],
            "private_metadata": modal["private_metadata"],
            "state": {"values": {}},
        },
    });
    assert_ok(
        &invoke_http(slack_events.clone(), &interaction(&confirm)).await,
        "confirm",
    );
    assert_eq!(work(stack, &worker).await, 1, "one restore queued");
    let undone = slack.ephemerals();
    assert!(
        undone.iter().any(|e| e.text.contains("Undone")),
        "{undone:?}"
    );
    let cat = block("Ev0CPR0003", "1767225593.000203", "cat note");
    assert_ok(&invoke_http(slack_events, &cat).await, "third block");
    assert_eq!(work(stack, &worker).await, 1);
    let last = slack.messages().into_iter().last().unwrap();
    assert!(last.text.contains("before"), "{last:?}");
    assert!(!last.text.contains("after"), "{last:?}");
}
