//! Wiring only: the use cases, Slack's Web API, the dedupe table and the work queue from the
//! environment, once, then the handler.

use std::sync::Arc;

use lambda_runtime::service_fn;
use threadbox_shared::lambda::batch::{BatchSettler, DEFAULT_MAX_ATTEMPTS};
use threadbox_shared::lambda::{self, Env};
use threadbox_shared::slack::{SlackWorker, SlackWorkerConfig};
use worker::WorkHandler;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let env = Env::process();
    let sdk = lambda::aws_config().await;
    let work_queue = Arc::new(lambda::work_queue(&sdk, &env)?);
    let dedupe = Arc::new(lambda::dedupe(&sdk, &env)?);
    let worker = SlackWorker::new(
        lambda::threadbox(&sdk, &env).await?,
        Arc::new(lambda::slack_api(&env)?),
        dedupe.clone(),
        work_queue.clone(),
        SlackWorkerConfig::default(),
    );
    // The same queue settles each batch's records (visibility, dead letters), and the dedupe
    // table counts each record's own attempts.
    let settler =
        BatchSettler::new(work_queue).with_attempt_limit(dedupe, "work", DEFAULT_MAX_ATTEMPTS);
    let handler = WorkHandler::new(worker).with_settler(settler);
    lambda_runtime::run(service_fn(|event| handler.handle(event))).await
}
