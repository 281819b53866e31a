//! Wiring only: the use cases, Slack's Web API, the dedupe table and the work queue from the
//! environment, once, then the handler.

use std::sync::Arc;

use lambda_runtime::service_fn;
use threadbox_core::ports::SystemClock;
use threadbox_lambda::batch::{BatchSettler, DEFAULT_MAX_ATTEMPTS};
use threadbox_lambda::{Env, Rebuilt, SecretSet};
use threadbox_slack::{MessageRates, SlackWorker, SlackWorkerConfig};
use worker::WorkHandler;

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::init_tracing();
    let sdk = threadbox_lambda::aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &Env::process()).await?;
    let watched = secrets.clone();
    let handler = Rebuilt::new(secrets, move |env: Env| {
        let sdk = sdk.clone();
        let secrets = watched.clone();
        async move {
            let work_queue = Arc::new(threadbox_lambda::work_queue(&sdk, &env)?);
            let dedupe = Arc::new(threadbox_lambda::dedupe(&sdk, &env)?);
            let worker = SlackWorker::new(
                // A refused key or token sends the function to Secrets Manager for the rotated one.
                threadbox_lambda::threadbox(&sdk, &env, &secrets).await?,
                threadbox_lambda::watch_slack_auth(
                    Arc::new(threadbox_lambda::slack_api(&env)?),
                    secrets,
                ),
                dedupe.clone(),
                work_queue.clone(),
                SlackWorkerConfig::default(),
            )
            .with_rates(MessageRates::new(
                Arc::new(threadbox_lambda::window_counter(&sdk, &env)?),
                threadbox_lambda::slack_rates(&env)?,
                Arc::new(SystemClock),
            ))
            .with_user_threads(Arc::new(threadbox_lambda::slack_user_threads(&sdk, &env)?));
            // The same queue settles each batch's records (visibility, dead letters), and the
            // dedupe table counts each record's own attempts.
            let settler = BatchSettler::new(work_queue).with_attempt_limit(
                dedupe,
                "work",
                DEFAULT_MAX_ATTEMPTS,
            );
            Ok(WorkHandler::new(worker).with_settler(settler))
        }
    })
    .await?;
    lambda_runtime::run(service_fn(|event| {
        let handler = handler.clone();
        async move { handler.current().await.handle(event).await }
    }))
    .await
}
