//! The worker over the embedded adapters (SQLite store, queues and dedupe), the in-memory
//! sandbox provider and the Slack fake: code runs once per message however often it is
//! delivered, thread commands reply in the thread, files are copied in under a size cap, and a
//! rate-limited reply is deferred without re-running anything.

#[path = "support/slack.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::domain::{Status, ThreadId};
use threadbox_core::ports::DurableQueue;
use threadbox_core::ports::RecordOutcome;
use threadbox_core::usecases::UseCaseError;
use threadbox_slack::{IncomingMessage, SlackFile, SlackWorker, SlackWorkerConfig, WorkItem};
use threadbox_testing::slack_fake::Fault;

use support::{client, fake};

const THREAD: &str = "slack:T1:C1:1767225600.000100";

/// The worker with its stores, provider and fake.
type Setup = support::WorkerSetup;

async fn setup_with(config: SlackWorkerConfig) -> Setup {
    support::worker_setup(config).await
}

async fn setup() -> Setup {
    setup_with(SlackWorkerConfig::default()).await
}

fn message(event_id: &str, ts: &str, text: &str, addressed: bool) -> IncomingMessage {
    IncomingMessage {
        event_id: event_id.into(),
        thread_id: ThreadId::parse(THREAD).unwrap(),
        channel: "C1".into(),
        ts: ts.into(),
        reply_thread_ts: Some("1767225600.000100".into()),
        user: "U1".into(),
        text: text.into(),
        files: Vec::new(),
        addressed,
    }
}

fn mention(event_id: &str, ts: &str, text: &str) -> WorkItem {
    WorkItem::Message(message(event_id, ts, text, true))
}

/// `item` as the work queue hands it to `worker`.
async fn handle_with(worker: SlackWorker, item: WorkItem) -> RecordOutcome {
    worker
        .handle_body(&serde_json::to_string(&item).unwrap())
        .await
}

impl Setup {
    async fn handle(&self, item: &WorkItem) -> RecordOutcome {
        handle_with(self.worker.clone(), item.clone()).await
    }

    /// The first reply to a message running `code` while the provider refuses `host` (the
    /// command then exits with `exit`).
    async fn reply_when_refused(&self, host: &str, exit: i32, code: &str) -> String {
        self.provider.refuse_in_next_exec(host, exit);
        let item = mention("Ev1", "1767225601.000001", code);
        assert_eq!(self.handle(&item).await, RecordOutcome::Delivered);
        self.replies()[0].clone()
    }

    fn replies(&self) -> Vec<String> {
        self.fake.messages().into_iter().map(|m| m.text).collect()
    }
}

/// Each of `parts` is in `reply`.
fn assert_says(reply: &str, parts: &[&str]) {
    for part in parts {
        assert!(reply.contains(part), "no {part:?} in {reply}");
    }
}

#[tokio::test]
async fn a_code_block_runs_in_the_threads_sandbox_and_the_reply_lands_in_the_thread() {
    let s = setup().await;
    let item = mention("Ev1", "1767225600.000100", "```python\nprint(6 * 7)\n```");
    assert_eq!(s.handle(&item).await, RecordOutcome::Delivered);
    assert_eq!(s.provider.commands(), vec!["python3 -c print(6 * 7)"]);
    let messages = s.fake.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].thread_ts.as_deref(), Some("1767225600.000100"));
    let reply = &messages[0].text;
    assert!(reply.contains("`python` exited 0 in"), "{reply}");
    // The in-memory provider echoes the command line as its output.
    assert!(
        reply.contains("```\npython3 -c print(6 * 7)\n```"),
        "{reply}"
    );
    assert!(s.fake.rejections().is_empty(), "{:?}", s.fake.rejections());
}

#[tokio::test]
async fn a_block_that_fails_on_a_refused_host_says_which_and_how_to_allow_it() {
    use threadbox_core::domain::{Allowlist, NetworkProfile};
    use threadbox_core::usecases::ResolveOptions;
    let s = setup().await;
    let thread = ThreadId::parse(THREAD).unwrap();
    let allow = Allowlist::parse(["pkg.test"]).unwrap();
    s.tb.resolve_with(
        &thread,
        ResolveOptions {
            network: Some(NetworkProfile::Networked { allow }),
            ..ResolveOptions::default()
        },
    )
    .await
    .unwrap();
    let reply = s
        .reply_when_refused("pypi.org", 1, "```bash\npip install requests\n```")
        .await;
    let replies = s.replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_says(
        &reply,
        &[
            "exited 1",
            "refused `pypi.org` (DNS)",
            "This thread's network: networked (allow: pkg.test)",
            &format!("PUT /v1/threads/{THREAD}/network"),
            r#"{"network":{"networked":{"allow":["pkg.test","pypi.org"]}}}"#,
        ],
    );

    // A block that succeeds says nothing of it, though the refusal is still on record.
    let item = mention("Ev2", "1767225601.000002", "```bash\ntrue\n```");
    assert_eq!(s.handle(&item).await, RecordOutcome::Delivered);
    let replies = s.replies();
    assert!(!replies[1].contains("refused"), "{}", replies[1]);
}

#[tokio::test]
async fn a_restricted_thread_that_fails_to_resolve_is_told_it_has_no_network() {
    let s = setup().await;
    let reply = s
        .reply_when_refused("pypi.org", 6, "```bash\ncurl https://pypi.org/\n```")
        .await;
    assert_says(
        &reply,
        &[
            "exited 6",
            "has no network (profile `restricted`)",
            &format!("PUT /v1/threads/{THREAD}/network"),
        ],
    );
}

#[tokio::test]
async fn a_message_with_too_much_code_runs_nothing_and_says_the_limit_once() {
    let s = setup().await;
    // Forty blocks in one message.
    let many: String = (0..40).map(|i| format!("```echo {i}```\n")).collect();
    let item = mention("Ev1", "1767225602.000001", &many);
    assert_eq!(s.handle(&item).await, RecordOutcome::Delivered);
    assert_eq!(
        s.handle(&item).await,
        RecordOutcome::Delivered,
        "a redelivery"
    );
    assert!(
        s.provider.commands().is_empty(),
        "{:?}",
        s.provider.commands()
    );
    assert_eq!(s.provider.creates(), 0, "not even a sandbox");
    let replies = s.replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].contains("40 code blocks; I run at most 5 per message")
            && replies[0].contains("Nothing was run"),
        "{}",
        replies[0]
    );

    // One block, but more code than a message may run.
    let long = format!("```python\nx = '{}'\n```", "a".repeat(20_001));
    let item = mention("Ev2", "1767225602.000002", &long);
    assert_eq!(s.handle(&item).await, RecordOutcome::Delivered);
    assert!(s.provider.commands().is_empty());
    let replies = s.replies();
    assert!(
        replies[1].contains("characters of code; I run at most 20000 per message"),
        "{}",
        replies[1]
    );

    // Five blocks are fine.
    let five: String = (0..5).map(|i| format!("```echo {i}```\n")).collect();
    let item = mention("Ev3", "1767225602.000003", &five);
    assert_eq!(s.handle(&item).await, RecordOutcome::Delivered);
    assert_eq!(s.provider.commands().len(), 5);
}

#[tokio::test]
async fn messages_past_the_threads_rate_are_refused_and_told_once() {
    use threadbox_slack::{MessageRates, RateLimits};
    use threadbox_sqlite::{Database, SqliteWindowCounter};
    use threadbox_testing::ManualClock;

    let s = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let counts = Database::open(dir.path().join("counts.db"), "").unwrap();
    let clock = Arc::new(ManualClock::default());
    let rates = MessageRates::new(
        Arc::new(SqliteWindowCounter::new(counts).await.unwrap()),
        RateLimits {
            per_thread: 2,
            per_team: 100,
        },
        clock.clone(),
    );
    let worker = s.worker.clone().with_rates(rates);
    let handle = |item: WorkItem| handle_with(worker.clone(), item);
    for i in 0..5 {
        let item = mention(
            &format!("Ev{i}"),
            &format!("1767225603.00000{i}"),
            "```echo hi```",
        );
        assert_eq!(handle(item).await, RecordOutcome::Delivered);
    }
    assert_eq!(
        s.provider.commands().len(),
        2,
        "two ran, three were refused"
    );
    let replies = s.replies();
    assert_eq!(replies.len(), 3, "two results and one notice: {replies:?}");
    assert!(
        replies[2].contains("Slow down: this thread has sent more than 2 messages this minute"),
        "{}",
        replies[2]
    );
    // A redelivery of a refused message is still a duplicate, not a new message.
    let again = mention("Ev3", "1767225603.000003", "```echo hi```");
    assert_eq!(handle(again).await, RecordOutcome::Delivered);
    assert_eq!(s.replies().len(), 3);

    // The next minute, the thread may send again.
    clock.advance(Duration::from_secs(60));
    let item = mention("Ev9", "1767225603.000009", "```echo hi```");
    assert_eq!(handle(item).await, RecordOutcome::Delivered);
    assert_eq!(s.provider.commands().len(), 3);
}

#[tokio::test]
async fn a_capacity_limit_is_named_in_the_thread() {
    use threadbox_core::ports::{Limit, ProviderError};
    use threadbox_testing::Op;
    let s = setup().await;
    s.provider.fail_next(
        Op::Exec,
        ProviderError::LimitReached {
            limit: Limit::CommandsInSandbox,
            message: "this thread already runs 4 commands at once, its limit".into(),
            retry_after: Duration::from_secs(2),
        },
    );
    let item = mention("Ev1", "1767225604.000001", "```echo busy```");
    assert_eq!(s.handle(&item).await, RecordOutcome::Delivered);
    let replies = s.replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].contains("already runs 4 commands at once")
            && replies[0].contains("too_many_commands_in_thread")
            && replies[0].contains("Send it again in 2 s"),
        "{}",
        replies[0]
    );
}

#[tokio::test]
async fn a_redelivered_message_or_its_twin_event_never_runs_twice() {
    let s = setup().await;
    let first = mention("Ev1", "1767225601.000001", "```echo once```");
    // The same words arrive again: a redelivery, and the `message` twin of the mention.
    let twin = WorkItem::Message(message(
        "Ev2",
        "1767225601.000001",
        "```echo once```",
        false,
    ));
    for item in [&first, &first, &twin, &first] {
        assert_eq!(s.handle(item).await, RecordOutcome::Delivered);
    }
    assert_eq!(s.provider.commands(), vec!["bash -c echo once"]);
    assert_eq!(s.replies().len(), 1);
}

#[tokio::test]
async fn thread_chatter_is_ignored_and_commands_need_a_sandbox_unless_addressed() {
    let s = setup().await;
    let chatter = WorkItem::Message(message(
        "Ev1",
        "1767225602.000001",
        "thanks, looks good",
        false,
    ));
    let early = WorkItem::Message(message("Ev2", "1767225602.000002", "status", false));
    s.handle(&chatter).await;
    s.handle(&early).await;
    assert!(
        s.fake.calls().is_empty(),
        "nothing said to a thread without a sandbox"
    );

    s.handle(&mention("Ev3", "1767225602.000003", "```true```"))
        .await;
    let later = WorkItem::Message(message("Ev4", "1767225602.000004", "status", false));
    s.handle(&later).await;
    s.handle(&WorkItem::Message(message(
        "Ev5",
        "1767225602.000005",
        "nice",
        false,
    )))
    .await;
    let replies = s.replies();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert!(
        replies[1].starts_with("Sandbox *active* · generation 1"),
        "{}",
        replies[1]
    );
}

#[tokio::test]
async fn thread_commands_reply_in_words() {
    let s = setup().await;
    let steps = [
        ("status", "no sandbox yet"),
        ("files", "no sandbox yet"),
        ("pause", "no sandbox yet"),
        ("```sh\necho hi\n```", "`sh` exited 0"),
        ("files", "`/home/user` is empty."),
        ("pause", "Paused. Files are kept"),
        ("status", "Sandbox *paused*"),
        ("resume", "Resumed: the sandbox is active."),
        ("resume", "already active"),
        (
            "reset",
            "all its files are gone. A fresh sandbox is ready (generation 2)",
        ),
        ("```ruby\nputs 1\n```", "I can't run `ruby` code"),
        ("what is this", "I didn't understand that"),
        ("help", "`reset`: throw it away with all its files"),
    ];
    for (i, (text, expected)) in steps.iter().enumerate() {
        let ts = format!("1767225603.{:06}", i + 1);
        s.handle(&mention(&format!("Ev{i}"), &ts, text)).await;
        let replies = s.replies();
        let last = replies.last().unwrap();
        assert!(last.contains(expected), "{text:?}: {last}");
    }
    let session =
        s.tb.session(&ThreadId::parse(THREAD).unwrap())
            .await
            .unwrap()
            .unwrap();
    assert_eq!((session.status, session.generation), (Status::Active, 2));
}

#[tokio::test]
async fn files_are_listed_after_they_are_written() {
    let s = setup().await;
    let thread = ThreadId::parse(THREAD).unwrap();
    s.tb.write_file(&thread, "/home/user/notes.txt", b"hello")
        .await
        .unwrap();
    s.tb.write_file(&thread, "/home/user/out/result.json", b"{}")
        .await
        .unwrap();
    s.handle(&mention("Ev1", "1767225604.000001", "files"))
        .await;
    s.handle(&mention("Ev2", "1767225604.000002", "files out"))
        .await;
    let replies = s.replies();
    assert!(replies[0].contains("notes.txt  5 B"), "{}", replies[0]);
    assert!(replies[1].contains("`/home/user/out`") && replies[1].contains("result.json"));
}

#[tokio::test]
async fn shared_files_are_copied_in_under_the_size_cap() {
    let s = setup_with(SlackWorkerConfig {
        max_attachment_bytes: 16,
        ..SlackWorkerConfig::default()
    })
    .await;
    let small = s.fake.add_file("data.csv", b"a,b\n1,2\n".to_vec());
    let big = s.fake.add_file("big.bin", vec![7; 64]);
    // An event that carries only the id: the worker asks files.info.
    let by_id = SlackFile {
        id: s.fake.add_file("notes v2.md", b"# hi".to_vec()).id,
        name: None,
        size: None,
        url_private_download: None,
        file_access: Some("check_file_info".into()),
    };
    let mut shared = message("Ev1", "1767225605.000001", "", true);
    shared.files = vec![small, big, by_id];
    assert_eq!(
        s.handle(&WorkItem::Message(shared)).await,
        RecordOutcome::Delivered
    );

    let thread = ThreadId::parse(THREAD).unwrap();
    assert_eq!(
        s.tb.read_file(&thread, "/home/user/attachments/data.csv")
            .await
            .unwrap(),
        b"a,b\n1,2\n"
    );
    assert_eq!(
        s.tb.read_file(&thread, "/home/user/attachments/notes_v2.md")
            .await
            .unwrap(),
        b"# hi"
    );
    assert!(s
        .tb
        .read_file(&thread, "/home/user/attachments/big.bin")
        .await
        .is_err());
    let replies = s.replies();
    assert_eq!(
        replies.len(),
        1,
        "one reply for the files, no help text: {replies:?}"
    );
    assert!(replies[0].contains("Saved `data.csv` (8 B) to `/home/user/attachments/data.csv`"));
    assert!(replies[0].contains("`big.bin` is 64 B; files over 16 B are not copied"));
    assert!(replies[0].contains("Saved `notes_v2.md`"));
    assert!(s.fake.rejections().is_empty(), "{:?}", s.fake.rejections());
}

#[tokio::test]
async fn a_rate_limited_reply_is_deferred_to_the_queue_and_the_command_not_rerun() {
    let s = setup().await;
    s.fake.fail_next(
        "chat.postMessage",
        Fault::RateLimited {
            retry_after_secs: 30,
        },
    );
    let item = mention("Ev1", "1767225606.000001", "```echo slow down```");
    assert_eq!(s.handle(&item).await, RecordOutcome::Delivered);
    assert!(s.replies().is_empty());

    let queued = s.work.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].group_id, THREAD);
    assert_eq!(queued[0].dedup_id, "Ev1:reply:1");
    // The queued reply meets the limit once more, then goes through.
    s.fake.fail_next(
        "chat.postMessage",
        Fault::RateLimited {
            retry_after_secs: 5,
        },
    );
    assert_eq!(
        s.worker.handle_body(&queued[0].body).await,
        RecordOutcome::Retry {
            retry_after: Some(Duration::from_secs(5))
        }
    );
    assert_eq!(
        s.worker.handle_body(&queued[0].body).await,
        RecordOutcome::Delivered
    );
    assert_eq!(s.provider.commands().len(), 1, "the command ran once");
    let replies = s.replies();
    assert_eq!(replies.len(), 1);
    assert!(replies[0].contains("echo slow down"));
}

#[tokio::test]
async fn a_short_retry_after_is_waited_out_in_place() {
    let s = setup().await;
    s.fake.fail_next(
        "chat.postMessage",
        Fault::RateLimited {
            retry_after_secs: 1,
        },
    );
    let started = std::time::Instant::now();
    s.handle(&mention("Ev1", "1767225607.000001", "help")).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
    assert_eq!(s.replies().len(), 1);
    assert!(s
        .work
        .receive(10, Duration::from_secs(1))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn the_sandbox_is_not_paused_while_a_block_runs() {
    let s = setup().await;
    s.handle(&mention("Ev0", "1767225608.000001", "```true```"))
        .await;
    s.provider.set_exec_delay(Duration::from_millis(400));
    let worker = s.worker.clone();
    let running = tokio::spawn(async move {
        let item = mention("Ev1", "1767225608.000002", "```sleep 1```");
        worker
            .handle_body(&serde_json::to_string(&item).unwrap())
            .await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let thread = ThreadId::parse(THREAD).unwrap();
    assert!(matches!(
        s.tb.pause(&thread).await,
        Err(UseCaseError::Held(_))
    ));
    assert_eq!(running.await.unwrap(), RecordOutcome::Delivered);
    assert_eq!(s.provider.pauses(), 0);
}

#[tokio::test]
async fn a_body_that_is_not_work_is_poison() {
    let s = setup().await;
    assert!(matches!(
        s.worker.handle_body("{\"kind\":\"nope\"}").await,
        RecordOutcome::Poison { .. }
    ));
}

#[tokio::test]
async fn a_workspace_past_its_create_cap_is_told_so_in_the_thread() {
    use threadbox_core::domain::Budgets;
    use threadbox_sqlite::{Database, SqliteWindowCounter};

    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let support::Embedded {
        mut tb,
        provider,
        work,
        dedupe,
    } = support::embedded(&dir.path().join("w.db")).await;
    tb.config.budgets = Budgets {
        scope_creates_per_hour: Some(1),
        ..Budgets::default()
    };
    let counts = Database::open(dir.path().join("counts.db"), "").unwrap();
    let tb = tb.with_budget_counter(Arc::new(SqliteWindowCounter::new(counts).await.unwrap()));
    let worker = SlackWorker::new(
        tb,
        client(&fake),
        dedupe,
        work,
        SlackWorkerConfig::default(),
    );
    let handle = |item: WorkItem| handle_with(worker.clone(), item);
    assert_eq!(
        handle(mention("Ev1", "1767225600.000100", "```echo one```")).await,
        RecordOutcome::Delivered
    );
    // A second thread of the same workspace, in the same hour.
    let mut second = message("Ev2", "1767225700.000001", "```echo two```", true);
    second.thread_id = ThreadId::parse("slack:T1:C1:1767225700.000001").unwrap();
    second.reply_thread_ts = Some("1767225700.000001".into());
    assert_eq!(
        handle(WorkItem::Message(second)).await,
        RecordOutcome::Delivered
    );
    assert_eq!(provider.creates(), 1, "the refused create made nothing");
    assert_eq!(provider.commands(), vec!["bash -c echo one"]);
    let replies: Vec<_> = fake.messages().into_iter().collect();
    let refusal = &replies.last().unwrap();
    assert_eq!(refusal.thread_ts.as_deref(), Some("1767225700.000001"));
    assert!(
        refusal.text.starts_with(
            ":no_entry: Not run: This workspace has created its 1 new sandboxes for this hour, \
             so none was created for this thread. Send it again after "
        ),
        "{}",
        refusal.text
    );
    assert!(refusal.text.contains(":00 UTC (in "), "{}", refusal.text);
}
