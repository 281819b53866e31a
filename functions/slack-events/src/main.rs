//! Wiring only: the signing secret and the bot token (fetched from Secrets Manager when given by
//! reference), the dedupe table and the work queue from the environment, then the router
//! through `lambda_http`, rebuilt when a secret changes.

use std::sync::Arc;

use threadbox_core::ports::SystemClock;
use threadbox_lambda::{Env, Rebuilt, SecretSet};
use threadbox_slack::SlackIngress;
use threadbox_slack_web::BOT_TOKEN_VAR;

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::init_tracing();
    let sdk = threadbox_lambda::aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &Env::process()).await?;
    let watched = secrets.clone();
    let router = Rebuilt::new(secrets, move |env: Env| {
        let sdk = sdk.clone();
        let secrets = watched.clone();
        async move {
            let mut ingress = SlackIngress::new(
                Some(threadbox_lambda::signing_secret(&env)?),
                Arc::new(threadbox_lambda::dedupe(&sdk, &env)?),
                Arc::new(threadbox_lambda::work_queue(&sdk, &env)?),
                Arc::new(SystemClock),
            );
            // The bot token opens Reset's confirmation modal, which cannot wait for the worker.
            // Without one (the local Lambda loop) a Reset click is refused with a clear error and
            // everything else works.
            if env.get(BOT_TOKEN_VAR).is_some() {
                let api = threadbox_lambda::watch_slack_auth(
                    Arc::new(threadbox_lambda::slack_api(&env)?),
                    secrets,
                );
                ingress = ingress.with_api(api);
            }
            Ok(slack_events::app(ingress))
        }
    })
    .await?;
    threadbox_lambda::run_http_rebuilt(router).await
}
