//! A code block that outlives its worker: the Slack worker with a deadline (as in Lambda) runs a
//! block whose time limit does not fit as a background process, replies that it runs on, and a
//! later worker posts its output when it ends, once however often the hand-over is delivered.
//! A block past its limit is stopped. Real processes: the sandbox is the E2B contract fake's
//! (commands run for real on this machine), the rest the embedded adapters and the Slack fake.

#[path = "support/slack.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use threadbox_core::config::Env;
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::RecordOutcome;
use threadbox_core::ports::{DurableQueue, SystemClock};
use threadbox_core::usecases::Threadbox;
use threadbox_e2b::{E2bConfig, E2bProvider};
use threadbox_slack::{IncomingMessage, SlackWorker, SlackWorkerConfig, WorkItem, WORK_QUEUE};
use threadbox_sqlite::{QueueConfig, SqliteDedupe, SqliteQueue, SqliteSessionStore};
use threadbox_testing::e2b_fake::E2bFake;
use threadbox_testing::lifecycle_conformance::test_config;

const THREAD: &str = "slack:T1:C1:1767225600.000100";

struct Setup {
    slack: threadbox_testing::slack_fake::SlackFake,
    work: Arc<SqliteQueue>,
    worker: SlackWorker,
    _e2b: E2bFake,
    _dir: tempfile::TempDir,
}

async fn setup(exec_timeout: Duration) -> Setup {
    let e2b = E2bFake::start().await;
    let mut config = E2bConfig::from_env(&Env::from_map(e2b.env_vars())).unwrap();
    config.retry.base_delay = Duration::from_millis(10);
    let provider = Arc::new(E2bProvider::new(config).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    let queue = |name: &'static str| {
        let database = store.database().clone();
        async move {
            Arc::new(
                SqliteQueue::new(database, name, QueueConfig::default())
                    .await
                    .unwrap(),
            )
        }
    };
    let (events, work) = (queue("lifecycle").await, queue(WORK_QUEUE).await);
    let tb = Threadbox::new(
        Arc::new(store),
        provider,
        events,
        Arc::new(SystemClock),
        test_config(),
    );
    let slack = support::fake().await;
    let worker = SlackWorker::new(
        tb,
        support::client(&slack),
        Arc::new(SqliteDedupe::open(&db).unwrap()),
        work.clone(),
        SlackWorkerConfig {
            exec_timeout,
            ..SlackWorkerConfig::default()
        },
    );
    Setup {
        slack,
        work,
        worker,
        _e2b: e2b,
        _dir: dir,
    }
}

fn mention(code: &str) -> WorkItem {
    WorkItem::Message(IncomingMessage {
        event_id: "Ev1".into(),
        thread_id: ThreadId::parse(THREAD).unwrap(),
        channel: "C1".into(),
        ts: "1767225601.000100".into(),
        reply_thread_ts: Some("1767225600.000100".into()),
        user: "U1".into(),
        text: format!("```bash\n{code}\n```"),
        files: Vec::new(),
        addressed: true,
    })
}

impl Setup {
    /// Handle `item` as a worker whose deadline is `left` away.
    async fn handle(&self, item: &WorkItem, left: Duration) -> RecordOutcome {
        let body = serde_json::to_string(item).unwrap();
        self.worker
            .handle_body_by(&body, Some(Instant::now() + left))
            .await
    }

    /// The queued hand-over, taken off the work queue.
    async fn handed_over(&self) -> WorkItem {
        let batch = self
            .work
            .receive(10, Duration::from_secs(60))
            .await
            .unwrap();
        let found: Vec<WorkItem> = batch
            .iter()
            .map(|m| serde_json::from_str(&m.body).unwrap())
            .filter(|item| matches!(item, WorkItem::Background(_)))
            .collect();
        assert_eq!(found.len(), 1, "one hand-over queued: {found:?}");
        for message in &batch {
            self.work.ack(&message.receipt).await.unwrap();
        }
        found.into_iter().next().unwrap()
    }

    fn replies(&self) -> Vec<String> {
        self.slack.messages().into_iter().map(|m| m.text).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_that_outlives_its_worker_runs_on_and_its_output_is_posted_once() {
    let s = setup(Duration::from_secs(60)).await;
    // 16 s left: 6 s for the block after the reply margin, which is less than its 60 s limit.
    let item = mention("echo first; sleep 9; echo second >&2; exit 4");
    assert_eq!(
        s.handle(&item, Duration::from_secs(16)).await,
        RecordOutcome::Delivered
    );
    let replies = s.replies();
    let last = replies.last().unwrap();
    assert!(last.contains("still running"), "{replies:?}");
    assert!(last.contains("background"), "{last}");

    // The next worker follows it to its end and posts the output, stdout and stderr merged.
    let handed = s.handed_over().await;
    let WorkItem::Background(run) = &handed else {
        unreachable!()
    };
    assert_eq!(run.round, 0);
    assert_eq!(
        s.handle(&handed, Duration::from_secs(60)).await,
        RecordOutcome::Delivered
    );
    let replies = s.replies();
    let reply = replies.last().unwrap();
    assert!(reply.contains("`bash` exited 4"), "{reply}");
    assert!(reply.contains("first\nsecond"), "{reply}");
    // Delivered again (a queue redelivery): nothing is posted twice.
    let count = s.replies().len();
    assert_eq!(
        s.handle(&handed, Duration::from_secs(60)).await,
        RecordOutcome::Delivered
    );
    assert_eq!(s.replies().len(), count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_past_its_limit_is_stopped_by_the_worker_that_finds_it() {
    // An 8 s limit, and a worker with 16 s: the block gets 6 s, then goes on in the background.
    let s = setup(Duration::from_secs(8)).await;
    let item = mention("echo working; sleep 600");
    assert_eq!(
        s.handle(&item, Duration::from_secs(16)).await,
        RecordOutcome::Delivered
    );
    let replies = s.replies();
    assert!(
        replies.last().unwrap().contains("still running"),
        "{replies:?}"
    );
    let handed = s.handed_over().await;
    // Past its limit by the time the next worker looks: stopped, and reported as timed out.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        s.handle(&handed, Duration::from_secs(60)).await,
        RecordOutcome::Delivered
    );
    let replies = s.replies();
    let reply = replies.last().unwrap();
    assert!(reply.contains("timed out"), "{reply}");
    assert!(reply.contains("working"), "{reply}");
}
