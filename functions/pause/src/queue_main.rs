//! Wiring only (the `pause-queue` binary): clients from the environment (the E2B key fetched
//! from Secrets Manager when given by reference) and the transition queue to settle records on,
//! then the queue handler, rebuilt when a secret changes.

use lambda_runtime::service_fn;
use pause::TransitionHandler;
use threadbox_core::config::ConfigError;
use threadbox_lambda::batch::BatchSettler;
use threadbox_lambda::{Env, Rebuilt, SecretSet};

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
            let tb = threadbox_lambda::threadbox(&sdk, &env, &secrets).await?;
            let queue = threadbox_lambda::transition_queue(&sdk, &env)?.ok_or(
                ConfigError::Missing(threadbox_lambda::TRANSITION_QUEUE_URL_VAR),
            )?;
            Ok(TransitionHandler::new(tb)
                .with_settler(BatchSettler::new(std::sync::Arc::new(queue))))
        }
    })
    .await?;
    lambda_runtime::run(service_fn(|event| {
        let handler = handler.clone();
        async move { handler.current().await.handle(event).await }
    }))
    .await
}
