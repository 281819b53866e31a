//! Wiring only: clients (the E2B key fetched from Secrets Manager when given by reference) and
//! the schedule from the environment, then the handler, rebuilt when the secret changes. With
//! `THREADBOX_TRANSITION_QUEUE_URL` set, the sweep hands its claims to that queue.

use std::sync::Arc;

use janitor::{Janitor, Schedule};
use lambda_runtime::service_fn;
use threadbox_lambda::{Env, Rebuilt, SecretSet};

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::init_tracing();
    let sdk = threadbox_lambda::aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &Env::process()).await?;
    let watched = secrets.clone();
    let janitor = Rebuilt::new(secrets, move |env: Env| {
        let sdk = sdk.clone();
        let secrets = watched.clone();
        async move {
            let mut tb = threadbox_lambda::threadbox(&sdk, &env, &secrets).await?;
            // Claimed pauses and destroys go to the pause function's queue handler.
            if let Some(queue) = threadbox_lambda::transition_queue(&sdk, &env)? {
                tb = tb.with_transition_queue(Arc::new(queue));
            }
            Ok(Janitor::new(tb, Schedule::from_env(&env)?))
        }
    })
    .await?;
    lambda_runtime::run(service_fn(|event| {
        let janitor = janitor.clone();
        async move { janitor.current().await.handle(event).await }
    }))
    .await
}
