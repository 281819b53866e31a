//! The Slack flow end to end, without Slack: the real `threadbox dev` (runc sandboxes, SQLite
//! queues, the worker loop and the fan-out) with `SLACK_SIGNING_SECRET` set and no bot token, so
//! replies land in the local sink. Events go in through `threadbox slack send` and a hand-signed
//! POST; replies are read back from `GET /v1/slack/sink`. Needs root and runc, like `dev_e2e`.

mod support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use support::slack::{self, wait_for_sink};
use support::{dev_missing, prerequisites_met, DevServer};
use threadbox_slack::SigningSecret;

const SECRET: &str = "e2e-signing-secret";
const API_KEY: &str = "e2e-api-key-0123456789abcdef0123456789";

async fn start() -> DevServer {
    DevServer::start_with_env(&[], &slack::sink_env(API_KEY, SECRET)).await
}

/// `threadbox slack send`, which must be accepted; returns the thread the message landed in.
fn send(dev: &DevServer, thread: &str, text: &str) -> String {
    let (stdout, landed) = slack::send(dev, SECRET, thread, text);
    assert!(stdout.contains("\"outcome\":\"accepted\""), "{stdout}");
    landed
}

async fn sink(dev: &DevServer, thread: &str) -> Vec<Value> {
    slack::sink(dev, API_KEY, &[("thread_id", thread)]).await
}

/// Wait until a message in the thread satisfies `want`; return all the thread's messages then.
async fn wait_for(
    dev: &DevServer,
    thread: &str,
    what: &str,
    want: impl Fn(&str) -> bool,
) -> Vec<Value> {
    let query = [("thread_id", thread)];
    wait_for_sink(
        dev,
        API_KEY,
        &query,
        Duration::from_secs(90),
        what,
        |messages| {
            messages
                .iter()
                .any(|m| want(m["text"].as_str().unwrap_or_default()))
                .then(|| messages.to_vec())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_block_runs_in_a_real_sandbox_and_the_reply_comes_back() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = start().await;

    // A new top-level mention starts a thread; the code runs under real runc.
    let code = "```python\nimport sys\nprint(6 * 7)\nprint('to stderr', file=sys.stderr)\nopen('note.txt', 'w').write('kept')\n```";
    let thread = send(&dev, "slack:T1:C1", code);
    assert!(thread.starts_with("slack:T1:C1:"), "{thread}");
    let messages = wait_for(&dev, &thread, "reply with output", |t| {
        t.contains("exited 0")
    })
    .await;
    let reply = messages
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .find(|t| t.contains("exited 0"))
        .unwrap();
    assert!(reply.contains("`python` exited 0 in"), "{reply}");
    assert!(reply.contains("*stdout*\n```\n42\n```"), "{reply}");
    assert!(reply.contains("*stderr*\n```\nto stderr\n```"), "{reply}");

    // The fan-out keeps one status message in the thread, edited as the state changes.
    let status = wait_for(&dev, &thread, "status message", |t| {
        t.contains("Sandbox *active*")
    })
    .await;
    let badges: Vec<&Value> = status
        .iter()
        .filter(|m| m["text"].as_str().unwrap().starts_with(":large_"))
        .collect();
    assert_eq!(badges.len(), 1, "one status message: {status:#?}");
    assert!(badges[0]["edits"].as_u64().unwrap() >= 1, "{:?}", badges[0]);

    // A follow-up in the thread sees the file the code left behind.
    send(&dev, &thread, "files");
    wait_for(&dev, &thread, "file listing", |t| {
        t.contains("note.txt  4 B")
    })
    .await;

    // Slack's retries carry the same event: the command runs once.
    let retried = signed_mention(&thread, "Ev0RETRY1", "```echo ran-once-marker```");
    for retry in 0..3 {
        let answer = post_signed(&dev, &retried, retry).await;
        let outcome = if retry == 0 { "accepted" } else { "duplicate" };
        assert_eq!(answer["outcome"], outcome, "{answer}");
    }
    let messages = wait_for(&dev, &thread, "retried reply", |t| {
        t.contains("ran-once-marker")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = sink(&dev, &thread)
        .await
        .iter()
        .filter(|m| m["text"].as_str().unwrap().contains("ran-once-marker"))
        .count();
    assert_eq!(runs, 1, "{messages:#?}");

    // The sink is behind the API keys; the events route is authenticated by signature only.
    let unauthenticated = dev
        .http
        .get(format!("{}/v1/slack/sink", dev.url))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let forged = dev
        .http
        .post(format!("{}/slack/events", dev.url))
        .header("x-slack-request-timestamp", now_secs().to_string())
        .header(
            "x-slack-signature",
            SigningSecret::new("wrong")
                .unwrap()
                .sign(now_secs(), retried.as_bytes()),
        )
        .body(retried.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
}

/// What Slack signs `body` sent at `ts` with: the secret the server has.
fn signature(ts: i64, body: &str) -> String {
    SigningSecret::new(SECRET)
        .unwrap()
        .sign(ts, body.as_bytes())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn signed_mention(thread: &str, event_id: &str, text: &str) -> String {
    let mut parts = thread.split(':').skip(1);
    let (team, channel, root) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    json!({
        "type": "event_callback", "team_id": team, "event_id": event_id, "event_time": now_secs(),
        "event": {
            "type": "app_mention", "user": "U1", "channel": channel, "thread_ts": root,
            "text": format!("<@UAPP> {text}"), "ts": format!("{}.000777", now_secs()),
        }
    })
    .to_string()
}

async fn post_signed(dev: &DevServer, body: &str, retry: u32) -> Value {
    let ts = now_secs();
    let mut request = dev
        .http
        .post(format!("{}/slack/events", dev.url))
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature(ts, body))
        .body(body.to_owned());
    if retry > 0 {
        request = request
            .header("x-slack-retry-num", retry.to_string())
            .header("x-slack-retry-reason", "http_timeout");
    }
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_forty_code_blocks_runs_nothing_and_gets_one_reply() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = start().await;
    let many: String = (0..40).map(|i| format!("```echo block-{i}```\n")).collect();
    let thread = send(&dev, "slack:T1:C7", &many);
    let messages = wait_for(&dev, &thread, "the limit's reply", |t| {
        t.contains("40 code blocks; I run at most 5 per message")
    })
    .await;
    // Give a wrongly running worker time to post more, then check it did not.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let messages_after = sink(&dev, &thread).await;
    assert_eq!(messages_after.len(), messages.len(), "{messages_after:#?}");
    assert_eq!(messages.len(), 1, "one reply: {messages:#?}");
    let shown = get_thread(&dev, &thread).await;
    assert_eq!(shown.status(), 404, "no thread, no sandbox was made for it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_past_its_rate_is_told_to_slow_down_once() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = DevServer::start_with_env(
        &["--slack-thread-rate", "2"],
        &[
            ("THREADBOX_API_KEYS", Some(API_KEY)),
            ("SLACK_SIGNING_SECRET", Some(SECRET)),
            ("SLACK_BOT_TOKEN", None),
            ("SLACK_API_URL", None),
        ],
    )
    .await;
    // The limit counts per clock minute: start where the four messages cannot straddle two.
    let into_minute = now_secs() % 60;
    if into_minute > 40 {
        tokio::time::sleep(Duration::from_secs((61 - into_minute) as u64)).await;
    }
    let thread = send(&dev, "slack:T1:C8", "```echo first```");
    wait_for(&dev, &thread, "the first result", |t| {
        t.contains("exited 0")
    })
    .await;
    for text in ["```echo second```", "```echo third```", "```echo fourth```"] {
        send(&dev, &thread, text);
    }
    let messages = wait_for(&dev, &thread, "the slow-down notice", |t| {
        t.contains("Slow down: this thread has sent more than 2 messages this minute")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let texts: Vec<String> = sink(&dev, &thread)
        .await
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let results = texts.iter().filter(|t| t.contains("exited 0")).count();
    let notices = texts.iter().filter(|t| t.contains("Slow down")).count();
    assert_eq!((results, notices), (2, 1), "{texts:#?}\n{messages:#?}");
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("third") || t.contains("fourth")),
        "{texts:#?}"
    );
}

/// Slack reaches a developer's `threadbox dev` through a tunnel, under the tunnel's name. Its
/// signed events are answered even without API keys (where other routes want a loopback Host);
/// an unsigned request under that name is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_events_arrive_through_a_tunnel_without_keys() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = DevServer::start_with_env(
        &[],
        &[
            ("SLACK_SIGNING_SECRET", Some(SECRET)),
            ("SLACK_BOT_TOKEN", None),
            ("SLACK_API_URL", None),
        ],
    )
    .await;
    let body = json!({"type": "url_verification", "challenge": "tunnelled"}).to_string();
    let post = |signed: bool| {
        let ts = now_secs();
        let mut request = dev
            .http
            .post(format!("{}/slack/events", dev.url))
            .header("host", "abc123.tunnel.example")
            .header("content-type", "application/json")
            .header("x-slack-request-timestamp", ts.to_string())
            .body(body.clone());
        if signed {
            request = request.header("x-slack-signature", signature(ts, &body));
        }
        request.send()
    };
    let answer = post(true).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.json::<Value>().await.unwrap()["challenge"],
        "tunnelled"
    );
    assert_eq!(post(false).await.unwrap().status(), 401);
    // Other routes still want a loopback Host without keys.
    let api = dev
        .http
        .get(format!("{}/v1/threads", dev.url))
        .header("host", "abc123.tunnel.example")
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 403);
}

/// A thread in channel C1 made by a mention with `code`, once its status card says active.
async fn active_thread(dev: &DevServer, code: &str) -> String {
    let thread = send(dev, "slack:T1:C1", code);
    wait_for(dev, &thread, "an active card", |t| {
        t.contains("Sandbox *active*")
    })
    .await;
    thread
}

/// `threadbox slack click`; returns its one line.
fn click(dev: &DevServer, thread: &str, what: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["slack", "click", "--url", &dev.url, "--thread", thread])
        .args(what)
        .env("SLACK_SIGNING_SECRET", SECRET)
        .env("THREADBOX_API_KEY", API_KEY)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run threadbox slack click");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "slack click {what:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `GET /v1/threads/{thread}` with the key, whatever it answers.
async fn get_thread(dev: &DevServer, thread: &str) -> reqwest::Response {
    dev.http
        .get(format!("{}/v1/threads/{thread}", dev.url))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap()
}

async fn generation(dev: &DevServer, thread: &str) -> u64 {
    let body: Value = get_thread(dev, thread).await.json().await.unwrap();
    body["session"]["generation"]
        .as_u64()
        .unwrap_or_else(|| panic!("{body}"))
}

/// Reset from the status card: the button asks in a modal, and submitting it (what the person's
/// "Reset" in Slack does) throws the sandbox away and starts a fresh one, whose card shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_from_the_card_asks_first_then_starts_a_fresh_sandbox() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = start().await;
    let thread = active_thread(&dev, "```echo kept > note.txt```").await;
    assert_eq!(generation(&dev, &thread).await, 1);

    let line = click(&dev, &thread, &["reset"]);
    assert!(line.contains("answered 200"), "{line}");
    // Only a question so far: nothing was reset.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(generation(&dev, &thread).await, 1);

    let line = click(&dev, &thread, &["--submit"]);
    assert!(line.contains("200"), "{line}");
    let messages = wait_for(&dev, &thread, "a generation 2 card", |t| {
        t.contains("Sandbox *active*") && t.contains("generation 2")
    })
    .await;
    assert_eq!(generation(&dev, &thread).await, 2);
    // One card, edited in place, with its buttons (the code block's reply has blocks too: its
    // Undo button).
    let cards: Vec<&Value> = messages
        .iter()
        .filter(|m| m["blocks"].is_array())
        .filter(|m| !m["blocks"].to_string().contains("\"action_id\":\"undo\""))
        .collect();
    assert_eq!(cards.len(), 1, "{messages:#?}");
    assert!(cards[0]["blocks"]
        .to_string()
        .contains("\"action_id\":\"pause\""));
}

/// Undo on a code block's reply, through the real ingress, worker and runc sandbox: the click
/// asks in a modal, and submitting it puts the files back as they were before the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_puts_the_files_back_as_they_were_before_the_block() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = start().await;
    let thread = active_thread(&dev, "```echo one > note.txt```").await;
    send(
        &dev,
        &thread,
        "```echo two > note.txt; echo new > made.txt```",
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while sink(&dev, &thread)
        .await
        .iter()
        .filter(|m| m["blocks"].to_string().contains("\"action_id\":\"undo\""))
        .count()
        < 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no second reply with an Undo"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let files = |dev: &DevServer| {
        let url = format!("{}/v1/threads/{thread}/exec", dev.url);
        let http = dev.http.clone();
        async move {
            let answer: Value = http
                .post(url)
                .bearer_auth(API_KEY)
                .json(&serde_json::json!({"cmd": "cat note.txt; ls made.txt 2>&1 | head -c 40"}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            answer["stdout"].as_str().unwrap_or_default().to_owned()
        }
    };
    assert!(files(&dev).await.starts_with("two\n"));
    // The newest Undo is the second block's: its checkpoint was taken just before it ran.
    let line = click(&dev, &thread, &["undo"]);
    assert!(line.contains("answered 200"), "{line}");
    let line = click(&dev, &thread, &["--submit"]);
    assert!(line.contains("200"), "{line}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = files(&dev).await;
        if now.starts_with("one\n") && now.contains("No such") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not undone: {now}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `/sandbox list` through the real ingress and worker: the answer only the caller sees lists the
/// thread they used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_list_answers_the_caller_with_their_threads() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = start().await;
    let thread = active_thread(&dev, "```echo hi```").await;
    let body = serde_urlencoded::to_string([
        ("team_id", "T1"),
        ("channel_id", "C1"),
        ("user_id", "ULOCAL"),
        ("command", "/sandbox"),
        ("text", "list"),
        ("trigger_id", "e2e-trigger-1"),
    ])
    .unwrap();
    let ts = now_secs();
    let response = dev
        .http
        .post(format!("{}/slack/commands", dev.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature(ts, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let query = [("channel", "C1")];
    let answer = wait_for_sink(
        &dev,
        API_KEY,
        &query,
        Duration::from_secs(30),
        "answer",
        |m| m.iter().find(|m| m["ephemeral_to"] == "ULOCAL").cloned(),
    )
    .await;
    let ts = thread.rsplit(':').next().unwrap();
    assert!(answer["blocks"].to_string().contains(ts), "{answer:#}");
}

/// A block that runs for seconds shows its output as it comes: the reply is posted while it
/// runs, with the first line and not yet the last, then edited into the final reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_block_shows_its_output_while_it_runs() {
    if !prerequisites_met("slack_e2e", &dev_missing()) {
        return;
    }
    let dev = start().await;
    let code =
        "```python\nimport time\nprint('first', flush=True)\ntime.sleep(4)\nprint('last')\n```";
    let thread = send(&dev, "slack:T1:C1", code);
    let live = wait_for(&dev, &thread, "a live message", |t| {
        t.contains("running for") && t.contains("first")
    })
    .await;
    let shown = live
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .find(|t| t.contains("running for"))
        .unwrap();
    assert!(!shown.contains("last"), "{shown}");
    let done = wait_for(&dev, &thread, "the final reply", |t| t.contains("exited 0")).await;
    let replies: Vec<&Value> = done
        .iter()
        .filter(|m| m["text"].as_str().unwrap().contains("exited 0"))
        .collect();
    assert_eq!(replies.len(), 1, "{done:#?}");
    let reply = replies[0];
    assert!(
        reply["text"].as_str().unwrap().contains("first\nlast"),
        "{reply}"
    );
    assert!(
        reply["edits"].as_u64().unwrap() >= 1,
        "edited in place: {reply}"
    );
    // No message is left saying it is still running.
    assert!(
        done.iter()
            .all(|m| !m["text"].as_str().unwrap().contains("running for")),
        "{done:#?}"
    );
}
