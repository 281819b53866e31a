//! What the Slack test files share: the fake with a client pointed at it, and builders.

#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::sync::Arc;

use threadbox_core::domain::{Cause, LifecycleEvent, Millis, Status, ThreadId};
use threadbox_core::ports::{SandboxProvider, SystemClock};
use threadbox_core::usecases::Threadbox;
use threadbox_slack::WORK_QUEUE;
use threadbox_slack::{SlackApi, SlackWorker, SlackWorkerConfig};
use threadbox_slack_web::{BotToken, SlackClientConfig, SlackWebClient};
use threadbox_sqlite::{QueueConfig, SqliteDedupe, SqliteQueue, SqliteSessionStore};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::slack_fake::SlackFake;
use threadbox_testing::InMemoryProvider;

pub const TOKEN: &str = "xoxb-test-token";

pub async fn fake() -> SlackFake {
    SlackFake::start(TOKEN).await
}

pub fn client_with_token(fake: &SlackFake, token: &str) -> Arc<SlackWebClient> {
    let config = SlackClientConfig::new(BotToken::new(token).unwrap())
        .with_api_url(&fake.api_url())
        .unwrap();
    Arc::new(SlackWebClient::new(config).unwrap())
}

pub fn client(fake: &SlackFake) -> Arc<dyn SlackApi> {
    client_with_token(fake, TOKEN)
}

pub fn event(id: &str, thread: &str, seq: u64, to: Status, cause: Cause) -> LifecycleEvent {
    LifecycleEvent {
        event_id: id.to_owned(),
        thread_id: ThreadId::parse(thread).unwrap(),
        seq,
        generation: 1,
        from: None,
        to,
        cause,
        at: Millis(1_767_225_600_000),
        sandbox_id: Some("sb-1".into()),
        detail: None,
    }
}

/// What a Slack worker runs on in these tests: the session store, the lifecycle and work queues
/// and the dedupe store in one SQLite file, and a provider (the in-memory one unless a test
/// brings its own: [`embedded_with`]).
pub struct Embedded<P = InMemoryProvider> {
    pub tb: Threadbox,
    pub provider: Arc<P>,
    pub work: Arc<SqliteQueue>,
    pub dedupe: Arc<SqliteDedupe>,
}

pub async fn embedded(db: &Path) -> Embedded {
    embedded_with(db, InMemoryProvider::new()).await
}

pub async fn embedded_with<P: SandboxProvider + 'static>(
    db: &Path,
    provider: Arc<P>,
) -> Embedded<P> {
    let store = SqliteSessionStore::open(db).unwrap();
    let events = Arc::new(
        SqliteQueue::new(
            store.database().clone(),
            "lifecycle",
            QueueConfig::default(),
        )
        .await
        .unwrap(),
    );
    let work = Arc::new(
        SqliteQueue::new(store.database().clone(), WORK_QUEUE, QueueConfig::default())
            .await
            .unwrap(),
    );
    let tb = Threadbox::new(
        Arc::new(store),
        provider.clone(),
        events,
        Arc::new(SystemClock),
        test_config(),
    );
    Embedded {
        tb,
        provider,
        work,
        dedupe: Arc::new(SqliteDedupe::open(db).unwrap()),
    }
}

/// A Slack worker over [`embedded`] in a fresh directory, replying through a fresh fake.
pub struct WorkerSetup {
    pub fake: SlackFake,
    pub provider: Arc<InMemoryProvider>,
    pub tb: Threadbox,
    pub work: Arc<SqliteQueue>,
    pub dedupe: Arc<SqliteDedupe>,
    pub worker: SlackWorker,
    /// The SQLite file everything is in, for stores a test adds.
    pub db: PathBuf,
    pub dir: tempfile::TempDir,
}

pub async fn worker_setup(config: SlackWorkerConfig) -> WorkerSetup {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let Embedded {
        tb,
        provider,
        work,
        dedupe,
    } = embedded(&db).await;
    let worker = SlackWorker::new(
        tb.clone(),
        client(&fake),
        dedupe.clone(),
        work.clone(),
        config,
    );
    WorkerSetup {
        fake,
        provider,
        tb,
        work,
        dedupe,
        worker,
        db,
        dir,
    }
}
