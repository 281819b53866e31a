//! The live-events core over real SQLite stores and real lifecycle events (made by the use cases
//! on the in-memory provider): the gateway's routes, and the `Subscribers` target under
//! redelivery, replay/live overlap, gaps, gone and failing connections and expired tokens.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::*;
use threadbox_core::domain::{LifecycleEvent, ThreadId, ThreadScope};
use threadbox_core::fanout::{Fanout, FanoutTarget};
use threadbox_core::ports::{
    Clock, ConnectionSender, Frame, RecordOutcome, SendError, SubscriptionStore,
};
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_sqlite::{
    QueueConfig, SqliteDedupe, SqliteQueue, SqliteSessionStore, SqliteSubscriptionStore,
};
use threadbox_testing::{InMemoryProvider, ManualClock};

/// Records every frame per connection; can make a connection gone or fail its next sends.
#[derive(Default)]
struct ScriptedSender {
    frames: Mutex<HashMap<String, Vec<Value>>>,
    gone: Mutex<HashSet<String>>,
    failures: Mutex<HashMap<String, usize>>,
    closed: Mutex<Vec<String>>,
}

impl ScriptedSender {
    fn frames(&self, connection: &str) -> Vec<Value> {
        self.frames
            .lock()
            .unwrap()
            .get(connection)
            .cloned()
            .unwrap_or_default()
    }

    /// The seqs of the event frames a connection got, in order.
    fn seqs(&self, connection: &str) -> Vec<u64> {
        self.frames(connection)
            .iter()
            .filter(|f| f["type"] == "event")
            .map(|f| f["event"]["seq"].as_u64().unwrap())
            .collect()
    }

    fn last(&self, connection: &str) -> Value {
        self.frames(connection)
            .last()
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn fail_next(&self, connection: &str, times: usize) {
        self.failures
            .lock()
            .unwrap()
            .insert(connection.to_owned(), times);
    }
}

#[async_trait]
impl ConnectionSender for ScriptedSender {
    async fn send(&self, connection_id: &str, frame: &Frame) -> Result<(), SendError> {
        if self.gone.lock().unwrap().contains(connection_id) {
            return Err(SendError::Gone(connection_id.to_owned()));
        }
        if let Some(left) = self.failures.lock().unwrap().get_mut(connection_id) {
            if *left > 0 {
                *left -= 1;
                return Err(SendError::Unavailable {
                    connection_id: connection_id.to_owned(),
                    reason: "throttled".into(),
                });
            }
        }
        let value: Value = serde_json::from_str(frame).unwrap();
        self.frames
            .lock()
            .unwrap()
            .entry(connection_id.to_owned())
            .or_default()
            .push(value);
        Ok(())
    }

    async fn close(&self, connection_id: &str) -> Result<(), SendError> {
        self.closed.lock().unwrap().push(connection_id.to_owned());
        Ok(())
    }
}

const SECRET: &str = "live-events-test-secret-0123456789";

struct Live {
    tb: Threadbox,
    provider: Arc<InMemoryProvider>,
    clock: Arc<ManualClock>,
    subscriptions: Arc<SqliteSubscriptionStore>,
    subscribers: Arc<Subscribers>,
    gateway: LiveGateway,
    key: TokenKey,
    sender: Arc<ScriptedSender>,
    dir: tempfile::TempDir,
}

impl Live {
    async fn new() -> Self {
        Self::with_sender(None).await
    }

    /// With `sender`, frames go there (an `InProcessSender`, say) instead of the script.
    async fn with_sender(sender: Option<Arc<dyn ConnectionSender>>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
        let queue =
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
        let clock = Arc::new(ManualClock::default());
        let config = Config {
            settle_poll: Duration::from_millis(5),
            ..Config::default()
        };
        let provider = InMemoryProvider::new();
        let tb = Threadbox::new(
            store.clone(),
            provider.clone(),
            queue,
            clock.clone(),
            config,
        );
        let subscriptions = Arc::new(
            SqliteSubscriptionStore::new(store.database().clone())
                .await
                .unwrap(),
        );
        let scripted = Arc::new(ScriptedSender::default());
        let sender = sender.unwrap_or_else(|| scripted.clone());
        let subscribers = Arc::new(Subscribers::new(
            subscriptions.clone(),
            sender,
            store,
            clock.clone(),
        ));
        let key = TokenKey::new(TokenSecret::new(SECRET).unwrap());
        Self {
            gateway: LiveGateway::new(subscribers.clone(), key.clone()),
            tb,
            provider,
            clock,
            subscriptions,
            subscribers,
            key,
            sender: scripted,
            dir,
        }
    }

    fn token(&self, scope: ThreadScope) -> String {
        self.key
            .mint(scope, Duration::from_secs(3600), self.clock.now())
            .unwrap()
            .token
    }

    /// A connection allowed to watch every thread.
    async fn connect(&self, id: &str) {
        let token = self.token(ThreadScope::Any);
        self.gateway.connect(id, Some(&token)).await.unwrap();
    }

    async fn send(&self, id: &str, message: &str) {
        self.gateway.message(id, message).await.unwrap();
    }

    async fn subscribe(&self, id: &str, thread: &str, after_seq: Option<u64>) {
        let message = match after_seq {
            Some(n) => {
                format!(r#"{{"action":"subscribe","thread_id":"{thread}","after_seq":{n}}}"#)
            }
            None => format!(r#"{{"action":"subscribe","thread_id":"{thread}"}}"#),
        };
        self.send(id, &message).await;
    }

    /// Resolve, pause and resume `thread`: six events (seq 1..=6) in its log.
    async fn six_events(&self, thread: &str) -> Vec<LifecycleEvent> {
        let t = tid(thread);
        self.tb.resolve(&t).await.unwrap();
        self.tb.pause(&t).await.unwrap();
        self.tb.resume(&t).await.unwrap();
        self.events(thread).await
    }

    async fn events(&self, thread: &str) -> Vec<LifecycleEvent> {
        self.tb
            .store
            .events_after(&tid(thread), 0, 100)
            .await
            .unwrap()
    }

    async fn deliver(&self, events: &[LifecycleEvent]) {
        for event in events {
            self.subscribers.deliver_event(event).await.unwrap();
        }
    }
}

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

#[tokio::test]
async fn each_connection_gets_each_event_once_in_order_under_redelivery() {
    let live = Live::new().await;
    for c in ["c1", "c2", "c3"] {
        live.connect(c).await;
        live.subscribe(c, "t1", Some(0)).await;
    }
    let events = live.six_events("t1").await;
    assert_eq!(events.len(), 6);
    // At-least-once delivery: repeats, and a re-drive of older events after newer ones.
    let e = |seq: usize| events[seq - 1].clone();
    live.deliver(&[
        e(1),
        e(2),
        e(1),
        e(3),
        e(2),
        e(4),
        e(4),
        e(5),
        e(6),
        e(1),
        e(6),
    ])
    .await;
    for c in ["c1", "c2", "c3"] {
        assert_eq!(live.sender.seqs(c), vec![1, 2, 3, 4, 5, 6], "{c}");
    }
}

#[tokio::test]
async fn a_connection_behind_gets_what_it_missed_before_the_new_event() {
    let live = Live::new().await;
    live.connect("c1").await;
    live.subscribe("c1", "t1", Some(0)).await;
    let events = live.six_events("t1").await;
    // Events 1..=3 never reached the fan-out (say a re-drive is still due); 4 does.
    live.deliver(&events[3..4]).await;
    assert_eq!(live.sender.seqs("c1"), vec![1, 2, 3, 4]);
    live.deliver(&events[4..]).await;
    assert_eq!(live.sender.seqs("c1"), vec![1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn subscribe_replays_from_after_seq_then_live_overlap_repeats_nothing() {
    let live = Live::new().await;
    let events = live.six_events("t1").await;
    live.connect("c1").await;
    live.subscribe("c1", "t1", Some(2)).await;
    let frames = live.sender.frames("c1");
    assert_eq!(frames[0]["type"], "subscribed");
    assert_eq!(frames[0]["after_seq"], 2);
    assert_eq!(frames[0]["last_seq"], 6);
    assert_eq!(frames[0]["status"], "active");
    assert_eq!(live.sender.seqs("c1"), vec![3, 4, 5, 6]);

    // The live fan-out of the same events arrives late: nothing is sent twice.
    live.deliver(&events).await;
    assert_eq!(live.sender.seqs("c1"), vec![3, 4, 5, 6]);

    // New events stream live.
    live.tb.pause(&tid("t1")).await.unwrap();
    let more = live.events("t1").await;
    live.deliver(&more[6..]).await;
    assert_eq!(live.sender.seqs("c1"), vec![3, 4, 5, 6, 7, 8]);
}

#[tokio::test]
async fn subscribe_without_after_seq_starts_at_the_thread_now() {
    let live = Live::new().await;
    live.six_events("t1").await;
    live.connect("c1").await;
    live.subscribe("c1", "t1", None).await;
    assert_eq!(live.sender.frames("c1")[0]["after_seq"], 6);
    assert!(live.sender.seqs("c1").is_empty(), "no replay");

    // A thread with no session yet: status null, and its first event arrives live.
    live.subscribe("c1", "t-new", None).await;
    let subscribed = live.sender.last("c1");
    assert_eq!(subscribed["thread_id"], "t-new");
    assert_eq!(subscribed["last_seq"], 0);
    assert_eq!(subscribed["status"], Value::Null);
    live.tb.resolve(&tid("t-new")).await.unwrap();
    live.deliver(&live.events("t-new").await).await;
    assert_eq!(live.sender.seqs("c1"), vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replay_and_live_fan_out_never_repeat_skip_or_reorder() {
    // The real in-process sender: the order frames are queued in is the order on the wire.
    for round in 0..10 {
        let sender = Arc::new(InProcessSender::default());
        let live = Live::with_sender(Some(sender.clone())).await;
        let events = live.six_events("t1").await;
        let connections: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
        let mut receivers = Vec::new();
        for c in &connections {
            receivers.push(sender.register(c));
            live.connect(c).await;
        }
        // Every connection subscribes (replaying from a different point) while the live
        // fan-out delivers the same events, twice.
        let subscribing = connections.iter().enumerate().map(|(i, c)| {
            let gateway = live.gateway.clone();
            let after = (i % 4) as u64;
            let c = c.clone();
            tokio::spawn(async move {
                let message =
                    format!(r#"{{"action":"subscribe","thread_id":"t1","after_seq":{after}}}"#);
                gateway.message(&c, &message).await.unwrap();
            })
        });
        let subscribing: Vec<_> = subscribing.collect();
        let fanning = {
            let subscribers = live.subscribers.clone();
            let events = events.clone();
            tokio::spawn(async move {
                for event in events.iter().chain(events.iter()) {
                    subscribers.deliver_event(event).await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        };
        for task in subscribing {
            task.await.unwrap();
        }
        fanning.await.unwrap();
        for (i, rx) in receivers.iter_mut().enumerate() {
            let mut seqs = Vec::new();
            while let Ok(frame) = rx.try_recv() {
                let frame: Value = serde_json::from_str(&frame).unwrap();
                if frame["type"] == "event" {
                    seqs.push(frame["event"]["seq"].as_u64().unwrap());
                }
            }
            let after = (i % 4) as u64;
            let expected: Vec<u64> = (after + 1..=6).collect();
            assert_eq!(seqs, expected, "round {round}, connection c{i}");
        }
    }
}

#[tokio::test]
async fn a_gone_connection_is_removed_and_the_others_still_get_the_event() {
    let live = Live::new().await;
    for c in ["c-ok", "c-gone"] {
        live.connect(c).await;
        live.subscribe(c, "t1", Some(0)).await;
    }
    live.sender.gone.lock().unwrap().insert("c-gone".into());
    let events = live.six_events("t1").await;
    live.deliver(&events[..1]).await;
    assert_eq!(live.sender.seqs("c-ok"), vec![1]);
    assert_eq!(live.subscriptions.connection("c-gone").await.unwrap(), None);
    let left: Vec<_> = live
        .subscriptions
        .subscribers(&tid("t1"))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.connection_id)
        .collect();
    assert_eq!(left, vec!["c-ok"]);
    live.deliver(&events[1..]).await;
    assert_eq!(live.sender.seqs("c-ok"), vec![1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn a_failing_connection_makes_the_event_retry_for_it_alone() {
    let live = Live::new().await;
    for c in ["c-ok", "c-busy"] {
        live.connect(c).await;
        live.subscribe(c, "t1", Some(0)).await;
    }
    let events = live.six_events("t1").await;
    live.sender.fail_next("c-busy", 1);
    let err = live.subscribers.deliver(&events[0]).await.unwrap_err();
    assert!(!err.is_permanent(), "{err}");
    assert!(err.to_string().contains("throttled"), "{err}");
    assert_eq!(live.sender.seqs("c-ok"), vec![1]);
    assert!(live.sender.seqs("c-busy").is_empty());

    // The queue redelivers: only the connection that missed it gets it.
    live.deliver(&events[..1]).await;
    assert_eq!(live.sender.seqs("c-ok"), vec![1]);
    assert_eq!(live.sender.seqs("c-busy"), vec![1]);
}

#[tokio::test]
async fn through_the_fanout_core_each_connection_sees_each_event_once() {
    let live = Live::new().await;
    live.connect("c1").await;
    live.subscribe("c1", "t1", Some(0)).await;
    let events = live.six_events("t1").await;
    let dedupe = Arc::new(SqliteDedupe::open(live.dir.path().join("threadbox.db")).unwrap());
    let target: Arc<dyn FanoutTarget> = live.subscribers.clone();
    let fanout = Fanout::new(dedupe, vec![target]);
    assert_eq!(fanout.target_names(), vec![TARGET_NAME]);
    for event in events.iter().chain(events.iter()) {
        assert_eq!(fanout.deliver(event).await, RecordOutcome::Delivered);
    }
    assert_eq!(live.sender.seqs("c1"), vec![1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn an_expired_token_closes_the_connection_at_the_next_event() {
    let live = Live::new().await;
    let token = live
        .key
        .mint(ThreadScope::Any, Duration::from_secs(60), live.clock.now())
        .unwrap()
        .token;
    live.gateway.connect("c1", Some(&token)).await.unwrap();
    live.subscribe("c1", "t1", Some(0)).await;
    live.clock.advance(Duration::from_secs(61));
    let events = live.six_events("t1").await;
    live.deliver(&events[..1]).await;
    assert!(live.sender.seqs("c1").is_empty());
    let last = live.sender.last("c1");
    assert_eq!(last["type"], "error");
    assert_eq!(last["code"], "token_expired");
    assert_eq!(*live.sender.closed.lock().unwrap(), vec!["c1"]);
    assert_eq!(live.subscriptions.connection("c1").await.unwrap(), None);
}

#[tokio::test]
async fn connect_refuses_missing_malformed_forged_and_expired_tokens() {
    let live = Live::new().await;
    let other = TokenKey::new(TokenSecret::new("some-other-secret-0123456789abcdef").unwrap());
    let forged = other
        .mint(ThreadScope::Any, Duration::from_secs(60), live.clock.now())
        .unwrap()
        .token;
    let expired = live
        .key
        .mint(
            ThreadScope::Any,
            Duration::from_secs(60),
            live.clock.now().minus(Duration::from_secs(61)),
        )
        .unwrap()
        .token;
    for (token, code) in [
        (None, "token_missing"),
        (Some(""), "token_missing"),
        (Some("not-a-token"), "token_malformed"),
        (Some(forged.as_str()), "token_bad_signature"),
        (Some(expired.as_str()), "token_expired"),
    ] {
        let err = live.gateway.connect("c1", token).await.unwrap_err();
        assert!(err.is_unauthorized(), "{token:?}");
        assert_eq!(err.code(), code, "{token:?}");
    }
    assert_eq!(live.subscriptions.connection("c1").await.unwrap(), None);
}

#[tokio::test]
async fn a_thread_outside_the_token_is_an_error_frame_and_the_connection_stays() {
    let live = Live::new().await;
    let token = live.token(ThreadScope::only([tid("t-mine")]).unwrap());
    live.gateway.connect("c1", Some(&token)).await.unwrap();
    live.subscribe("c1", "t-other", Some(0)).await;
    let error = live.sender.last("c1");
    assert_eq!(error["type"], "error");
    assert_eq!(error["code"], "thread_not_allowed");
    assert_eq!(error["thread_id"], "t-other");
    assert!(live
        .subscriptions
        .subscription("c1", &tid("t-other"))
        .await
        .unwrap()
        .is_none());
    live.subscribe("c1", "t-mine", Some(0)).await;
    assert_eq!(live.sender.last("c1")["type"], "subscribed");
}

#[tokio::test]
async fn bad_messages_get_error_frames_and_the_connection_stays_open() {
    let live = Live::new().await;
    live.connect("c1").await;
    for (message, code) in [
        ("{not json", "bad_json"),
        (r#"{"action":"dance"}"#, "unknown_action"),
        (
            r#"{"action":"subscribe","thread_id":"no spaces"}"#,
            "invalid_thread_id",
        ),
    ] {
        live.send("c1", message).await;
        let error = live.sender.last("c1");
        assert_eq!(
            (error["type"].as_str(), error["code"].as_str()),
            (Some("error"), Some(code))
        );
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    live.send("c1", r#"{"action":"ping"}"#).await;
    assert_eq!(live.sender.last("c1")["type"], "pong");
    assert!(live.subscriptions.connection("c1").await.unwrap().is_some());
}

#[tokio::test]
async fn unsubscribe_and_disconnect_stop_delivery() {
    let live = Live::new().await;
    for c in ["c1", "c2"] {
        live.connect(c).await;
        live.subscribe(c, "t1", Some(0)).await;
    }
    live.send("c1", r#"{"action":"unsubscribe","thread_id":"t1"}"#)
        .await;
    assert_eq!(live.sender.last("c1")["type"], "unsubscribed");
    live.gateway.disconnect("c2").await.unwrap();
    assert_eq!(live.subscriptions.connection("c2").await.unwrap(), None);
    let events = live.six_events("t1").await;
    live.deliver(&events).await;
    assert!(live.sender.seqs("c1").is_empty());
    assert!(live.sender.seqs("c2").is_empty());
}

#[tokio::test]
async fn a_connection_watches_a_bounded_number_of_threads() {
    let live = Live::new().await;
    live.connect("c1").await;
    for i in 0..MAX_SUBSCRIPTIONS_PER_CONNECTION {
        live.subscribe("c1", &format!("t{i}"), Some(0)).await;
    }
    live.subscribe("c1", "one-more", Some(0)).await;
    assert_eq!(live.sender.last("c1")["code"], "too_many_subscriptions");
    live.subscribe("c1", "t0", Some(0)).await;
    assert_eq!(
        live.sender.last("c1")["type"],
        "subscribed",
        "re-subscribing to a watched thread is not one more"
    );
}

/// `exec` frames: who may run commands, how many at once, the frames that answer them, and what
/// closing the connection does to them.
mod exec {
    use super::*;
    use crate::live::{ConnectionExec, MAX_EXECS_PER_CONNECTION};
    use tokio::sync::mpsc::Receiver;

    impl Live {
        /// Connect `id` with a token for `scope` (that may run commands when `exec`), and its
        /// commands' runner and lane.
        async fn exec_connection(
            &self,
            id: &str,
            scope: ThreadScope,
            exec: bool,
        ) -> (ConnectionExec, Receiver<Frame>) {
            let token = self
                .key
                .mint_with_exec(
                    scope,
                    Duration::from_secs(3600),
                    self.clock.now(),
                    exec,
                    None,
                )
                .unwrap()
                .token;
            let (_, grant) = self
                .gateway
                .connect_granting(id, Some(&token))
                .await
                .unwrap();
            assert_eq!(grant.exec, exec);
            ConnectionExec::new(
                self.tb.clone(),
                self.sender.clone(),
                id,
                grant,
                self.gateway.frame_limiter(),
            )
        }

        async fn exec(&self, id: &str, runner: &ConnectionExec, request_id: &str, cmd: &str) {
            let frame = serde_json::json!({
                "action": "exec", "request_id": request_id, "thread_id": "t1", "cmd": cmd,
            });
            self.gateway
                .message_with_exec(id, &frame.to_string(), runner)
                .await
                .unwrap();
        }
    }

    /// Wait up to 5 s for `done`.
    async fn until(done: impl Fn() -> bool) {
        for _ in 0..100 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(done(), "not within 5 s");
    }

    async fn next(lane: &mut Receiver<Frame>) -> Value {
        let frame = tokio::time::timeout(Duration::from_secs(10), lane.recv())
            .await
            .expect("a frame within 10 s")
            .expect("the lane is open");
        serde_json::from_str(&frame).unwrap()
    }

    #[tokio::test]
    async fn a_command_streams_its_output_then_its_exit() {
        let live = Live::new().await;
        let (runner, mut lane) = live.exec_connection("c1", ThreadScope::Any, true).await;
        live.exec("c1", &runner, "r1", "echo hi").await;
        // The in-memory provider echoes the command line on stdout.
        let output = next(&mut lane).await;
        assert_eq!(
            output,
            serde_json::json!({"type":"exec_output","request_id":"r1","stream":"stdout","text":"echo hi"})
        );
        let exit = next(&mut lane).await;
        assert_eq!(exit["type"], "exec_exit", "{exit}");
        assert_eq!(exit["request_id"], "r1");
        assert_eq!(exit["exit_code"], 0);
        assert_eq!(exit["timed_out"], false);
        assert_eq!(live.provider.commands(), vec!["echo hi".to_owned()]);
        assert!(
            live.sender.frames("c1").is_empty(),
            "nothing on the control path"
        );
        // The command ran in the thread's sandbox, made on first use like HTTP exec.
        assert_eq!(
            live.tb.load(&tid("t1")).await.unwrap().status,
            threadbox_core::domain::Status::Active
        );
    }

    #[tokio::test]
    async fn without_the_capability_or_the_thread_nothing_runs() {
        let live = Live::new().await;
        let (watcher, _lane) = live.exec_connection("c1", ThreadScope::Any, false).await;
        live.exec("c1", &watcher, "r1", "echo no").await;
        let refused = live.sender.last("c1");
        assert_eq!(refused["type"], "error");
        assert_eq!(refused["code"], "exec_not_allowed", "{refused}");
        assert_eq!(refused["request_id"], "r1");
        assert_eq!(refused["thread_id"], "t1");

        let other = ThreadScope::only([tid("t2")]).unwrap();
        let (runner, _lane) = live.exec_connection("c2", other, true).await;
        live.exec("c2", &runner, "r1", "echo no").await;
        assert_eq!(live.sender.last("c2")["code"], "thread_not_allowed");

        // A server that does not run commands (the ws Lambda) says so, naming the request.
        live.gateway
            .message(
                "c2",
                r#"{"action":"exec","request_id":"r2","thread_id":"t1","cmd":"echo no"}"#,
            )
            .await
            .unwrap();
        let refused = live.sender.last("c2");
        assert_eq!(refused["code"], "exec_not_supported_here", "{refused}");
        assert_eq!(refused["request_id"], "r2");
        assert!(refused["message"]
            .as_str()
            .unwrap()
            .contains("text/event-stream"));

        assert!(live.provider.commands().is_empty(), "nothing ran");
        assert!(
            live.tb.load(&tid("t1")).await.is_err(),
            "no thread was made"
        );
    }

    #[tokio::test]
    async fn a_connection_runs_a_bounded_number_of_commands_with_distinct_names() {
        let live = Live::new().await;
        live.provider.set_exec_delay(Duration::from_secs(2));
        let (runner, mut lane) = live.exec_connection("c1", ThreadScope::Any, true).await;
        for i in 0..MAX_EXECS_PER_CONNECTION {
            live.exec("c1", &runner, &format!("r{i}"), "sleep").await;
        }
        assert_eq!(runner.running(), MAX_EXECS_PER_CONNECTION);
        live.exec("c1", &runner, "r0", "sleep").await;
        assert_eq!(live.sender.last("c1")["code"], "duplicate_request_id");
        live.exec("c1", &runner, "one-more", "sleep").await;
        let refused = live.sender.last("c1");
        assert_eq!(refused["code"], "too_many_commands", "{refused}");
        assert_eq!(refused["request_id"], "one-more");

        // As they end, their places free up.
        let mut exits = 0;
        while exits < MAX_EXECS_PER_CONNECTION {
            if next(&mut lane).await["type"] == "exec_exit" {
                exits += 1;
            }
        }
        until(|| runner.running() == 0).await;
        live.exec("c1", &runner, "r0", "again").await;
        assert_eq!(runner.running(), 1);
    }

    #[tokio::test]
    async fn closing_the_connection_kills_only_the_commands_that_asked() {
        let live = Live::new().await;
        live.provider.set_exec_delay(Duration::from_secs(600));
        let (runner, lane) = live.exec_connection("c1", ThreadScope::Any, true).await;
        for (id, kill) in [("kill-me", true), ("keep-me", false)] {
            let frame = serde_json::json!({
                "action": "exec", "request_id": id, "thread_id": "t1", "cmd": "sleep",
                "kill_on_disconnect": kill,
            });
            live.gateway
                .message_with_exec("c1", &frame.to_string(), &runner)
                .await
                .unwrap();
        }
        assert_eq!(runner.running(), 2);
        drop(lane);
        assert_eq!(runner.disconnect(), 1);
        until(|| runner.running() == 1).await;
        assert_eq!(runner.disconnect(), 0, "once");
        live.exec("c1", &runner, "late", "echo").await;
        assert_eq!(live.sender.last("c1")["code"], "not_connected");
    }

    /// A client that floods terminal frames gets its burst, then `too_many_frames` for each
    /// frame over its rate, then a last error frame and the close; nothing it sent after its
    /// rate ran out reached the sandbox (issue 28).
    #[tokio::test]
    async fn a_flood_of_terminal_frames_is_refused_then_closed() {
        let live = Live::new().await;
        let (runner, _lane) = live.exec_connection("c1", ThreadScope::Any, true).await;
        let limits = crate::live::FrameLimits::default();
        let start = std::time::Instant::now();
        let mut sent = 0;
        for i in 0..5000 {
            let frame = serde_json::json!({
                "action": "pty_input", "request_id": format!("i{i}"), "thread_id": "t1",
                "session": "abc", "text": "x",
            });
            live.gateway
                .message_with_exec("c1", &frame.to_string(), &runner)
                .await
                .unwrap();
            sent += 1;
            if live.sender.closed.lock().unwrap().iter().any(|c| c == "c1") {
                break;
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        let frames = live.sender.frames("c1");
        let refused = frames
            .iter()
            .filter(|f| f["code"] == crate::live::TOO_MANY_FRAMES)
            .count();
        assert!(sent < 5000, "closed before the flood ended ({sent} sent)");
        let admitted = sent - refused;
        let allowed = f64::from(limits.connection_rate.burst)
            + elapsed * f64::from(limits.connection_rate.per_second)
            + 1.0;
        assert!(
            (admitted as f64) <= allowed,
            "{admitted} admitted in {elapsed:.2}s"
        );
        assert_eq!(
            refused,
            limits.refusals.burst as usize + 1,
            "{}",
            frames.len()
        );
        let last = frames.last().unwrap();
        assert!(
            last["message"].as_str().unwrap().contains("closing"),
            "{last}"
        );
        assert_eq!(last["request_id"], format!("i{}", sent - 1), "{last}");
        // Forgotten like a closed connection.
        assert!(live.subscriptions.connection("c1").await.unwrap().is_none());
    }
}
