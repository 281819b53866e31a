//! Wiring only: the signing secret (fetched from Secrets Manager when given by reference), the
//! dedupe table and the work queue from the environment, then the router through `lambda_http`,
//! rebuilt when the secret changes.

use std::sync::Arc;

use threadbox_shared::lambda::{self, Env, Rebuilt, SecretSet};
use threadbox_shared::ports::SystemClock;
use threadbox_shared::slack::SlackIngress;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let sdk = lambda::aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &Env::process()).await?;
    let router = Rebuilt::new(secrets, move |env: Env| {
        let sdk = sdk.clone();
        async move {
            let ingress = SlackIngress::new(
                Some(lambda::signing_secret(&env)?),
                Arc::new(lambda::dedupe(&sdk, &env)?),
                Arc::new(lambda::work_queue(&sdk, &env)?),
                Arc::new(SystemClock),
            );
            Ok(slack_events::app(ingress))
        }
    })
    .await?;
    lambda::run_http_rebuilt(router).await
}
