//! pause: a user-initiated pause of a thread's sandbox (`POST /v1/threads/{id}/pause`), and
//! (its second binary, `pause-queue`) the transition queue's consumer: the pauses and destroys
//! the janitor claimed.
//!
//! The pause is refused (409 `held`) while a command runs or a hold is live, and is a no-op on a
//! thread that is already paused. Every other path is a 404 in the API's error shape.
//!
//! # The transition queue
//!
//! The janitor only claims: one conditional write puts the record into `pausing` (or
//! `deleting`) with a lease, and a work item naming the thread and the claim (generation and
//! version) goes to the FIFO transition queue. [`TransitionHandler`] takes a batch from the
//! queue and, for each item, re-reads the record and acts only while it still shows that claim
//! (`Threadbox::run_transition`), so a repeated delivery changes nothing. A message that is
//! lost leaves a claim whose lease runs out; the next sweep recovers it. Pause work thus scales
//! with the event source mapping's concurrency, not with one sweeping Lambda.
//!
//! Each record's outcome becomes SQS's partial batch response: done or stale (the claim is
//! gone) is deleted; an unreachable store or provider while the claim still stands is retried
//! after the queue's back-off; a body that is not a work item goes to the dead-letter queue.

use std::convert::Infallible;
use std::sync::Arc;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use axum::Router;
use lambda_runtime::LambdaEvent;
use threadbox_api::http::{router_for, ApiAuth, RouteGroup};
use threadbox_core::config::ConfigError;
use threadbox_core::ports::RecordOutcome;
use threadbox_core::usecases::{Threadbox, TransitionOutcome};
use threadbox_lambda::batch::{BatchConsumer, BatchSettler};
use threadbox_lambda::{Setup, SetupError};

/// The route groups this function serves.
pub const ROUTES: &[RouteGroup] = &[RouteGroup::Pause];

/// The handler: the shared router restricted to [`ROUTES`].
pub fn app(tb: Threadbox, auth: ApiAuth) -> Router {
    router_for(tb, auth, ROUTES)
}

/// The transition queue's consumer.
#[derive(Clone)]
pub struct TransitionHandler {
    tb: Threadbox,
    batch: BatchConsumer,
}

/// A record starts only while this much of the invocation is left: a pause at E2B takes
/// seconds (about 4 s per GiB of memory).
pub const START_RESERVE: std::time::Duration = std::time::Duration::from_secs(20);

/// What `pause-queue`'s `main` serves: the use cases from the environment, and the transition
/// queue (`THREADBOX_TRANSITION_QUEUE_URL`, required here) to settle records on.
pub async fn build_queue_handler(setup: Setup) -> Result<TransitionHandler, SetupError> {
    let tb = threadbox_lambda::threadbox(&setup.sdk, &setup.env, &setup.secrets).await?;
    let queue = threadbox_lambda::transition_queue(&setup.sdk, &setup.env)?.ok_or(
        ConfigError::Missing(threadbox_lambda::TRANSITION_QUEUE_URL_VAR),
    )?;
    Ok(TransitionHandler::new(tb).with_settler(BatchSettler::new(Arc::new(queue))))
}

impl TransitionHandler {
    pub fn new(tb: Threadbox) -> Self {
        Self {
            tb,
            batch: BatchConsumer::paced(START_RESERVE),
        }
    }

    /// One invocation: each claim carried out while it still stands, each thread's in order.
    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, Infallible> {
        let span = tracing::info_span!("transitions", records = event.payload.records.len());
        let tb = &self.tb;
        let transition = |body| async move { record_outcome(tb.run_transition(body).await) };
        Ok(self.batch.run(&event, span, transition).await)
    }

    /// Settle records through `settler` (the transition queue) before returning.
    pub fn with_settler(mut self, settler: BatchSettler) -> Self {
        self.batch = self.batch.with_settler(settler);
        self
    }
}

/// What SQS should do with a record, from what its transition came to.
pub fn record_outcome(outcome: TransitionOutcome) -> RecordOutcome {
    match outcome {
        TransitionOutcome::Done(_) | TransitionOutcome::Stale => RecordOutcome::Delivered,
        TransitionOutcome::Retry(_) => RecordOutcome::Retry { retry_after: None },
        TransitionOutcome::Poison(reason) => RecordOutcome::Poison { reason },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use threadbox_core::domain::{Status, ThreadId};
    use threadbox_core::usecases::HoldRequest;
    use threadbox_tests::lambda::{fixture_json, invoke_http, LocalThreadbox};

    use super::*;

    fn thread() -> ThreadId {
        ThreadId::parse("slack:T0001:C0001:1700000000.000100").unwrap()
    }

    #[tokio::test]
    async fn the_pause_event_pauses_the_thread_named_in_its_encoded_path() {
        let local = LocalThreadbox::new();
        local.tb.resolve(&thread()).await.unwrap();
        let router = app(local.tb.clone(), LocalThreadbox::auth());

        // The fixture's raw path has the id percent-encoded (`slack%3AT0001...`).
        let answer = invoke_http(router.clone(), &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        assert_eq!(answer.json()["status"], "paused");
        assert_eq!(answer.json()["thread_id"], thread().as_str());
        let session = local.tb.session(&thread()).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Paused);

        // Queues and clients repeat themselves: a second pause changes nothing.
        let again = invoke_http(router, &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(again.status, 200);
        assert_eq!(again.json()["status"], "paused");
    }

    /// The janitor claims and hands off; the queue handler pauses once; SQS delivering the
    /// same record again (in a later batch) changes nothing.
    #[tokio::test]
    async fn a_handed_off_pause_runs_once_and_a_redelivery_is_a_no_op() {
        use std::sync::Arc;

        use threadbox_core::ports::DurableQueue;
        use threadbox_core::usecases::SweepOptions;
        use threadbox_tests::lambda::sqs_batch;

        const MINUTE: Duration = Duration::from_secs(60);

        let local = LocalThreadbox::new();
        let transitions: Arc<dyn DurableQueue> = local.backend.transitions.clone();
        let janitor = local.tb.clone().with_transition_queue(transitions.clone());
        local.tb.resolve(&thread()).await.unwrap();
        local
            .clock
            .advance(local.tb.config.timers.idle_pause + Duration::from_secs(1));
        let report = janitor
            .sweep(SweepOptions::for_duration(Duration::from_secs(30)))
            .await;
        assert_eq!((report.queued, report.paused), (1, 0), "{report:?}");

        // The record SQS would hand the function, from the message the janitor sent.
        let sent = transitions
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(sent.len(), 1);
        let mut record = fixture_json("sqs-transition-batch.json")["Records"][0].clone();
        record["body"] = serde_json::json!(sent[0].body);
        record["attributes"]["MessageGroupId"] = serde_json::json!(sent[0].group_id);
        record["attributes"]["MessageDeduplicationId"] = serde_json::json!(sent[0].dedup_id);
        let batch = || sqs_batch(serde_json::json!({ "Records": [record.clone()] }), MINUTE);
        let handler = TransitionHandler::new(local.tb.clone());
        let answer = handler.handle(batch()).await.unwrap();
        assert!(answer.batch_item_failures.is_empty(), "{answer:?}");
        let session = local.tb.session(&thread()).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Paused);
        assert_eq!(local.provider.pauses(), 1);

        let answer = handler.handle(batch()).await.unwrap();
        assert!(answer.batch_item_failures.is_empty(), "{answer:?}");
        assert_eq!(local.provider.pauses(), 1, "the redelivery paused nothing");
        let again = local.tb.session(&thread()).await.unwrap().unwrap();
        assert_eq!(again.version, session.version, "and wrote nothing");
    }

    /// The fixture (also a `cargo lambda invoke` payload) is a work item the handler reads.
    #[test]
    fn the_transition_fixture_is_a_work_item() {
        let body = fixture_json("sqs-transition-batch.json")["Records"][0]["body"]
            .as_str()
            .unwrap()
            .to_owned();
        let work = threadbox_core::usecases::TransitionWork::parse(&body).unwrap();
        assert_eq!(work.thread_id, thread());
    }

    #[tokio::test]
    async fn a_held_thread_is_not_paused() {
        let local = LocalThreadbox::new();
        local.tb.resolve(&thread()).await.unwrap();
        local
            .tb
            .acquire_hold(
                &thread(),
                HoldRequest::new("agent", Duration::from_secs(60)),
            )
            .await
            .unwrap();
        let router = app(local.tb.clone(), LocalThreadbox::auth());
        let answer = invoke_http(router, &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(answer.status, 409);
        assert_eq!(answer.error_code(), "held");
        let session = local.tb.session(&thread()).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Active);
    }

    #[tokio::test]
    async fn an_unknown_thread_is_a_404_and_other_routes_are_not_here() {
        let local = LocalThreadbox::new();
        let router = app(local.tb.clone(), LocalThreadbox::auth());
        let answer = invoke_http(router.clone(), &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(answer.status, 404);
        assert_eq!(answer.error_code(), "unknown_thread");

        let answer = invoke_http(router, &fixture_json("apigw-http-resolve.json")).await;
        assert_eq!(answer.status, 404);
        assert_eq!(answer.error_code(), "not_found");
        assert_eq!(local.provider.creates(), 0);
    }
}
