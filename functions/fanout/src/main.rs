//! Wiring only: the dedupe table and the targets (log, Slack status when a bot token is set,
//! WebSocket subscribers when the subscriptions table and callback URL are set) from the
//! environment, once, then the handler.

use std::sync::Arc;

use fanout::FanoutHandler;
use lambda_runtime::service_fn;
use threadbox_core::fanout::{Fanout, FanoutTarget, LogTarget};
use threadbox_lambda::batch::{BatchSettler, DEFAULT_MAX_ATTEMPTS};
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
            let mut targets: Vec<Arc<dyn FanoutTarget>> = vec![Arc::new(LogTarget)];
            // A refused token sends the function to Secrets Manager for the rotated one.
            if let Some(slack) =
                threadbox_lambda::slack_status_target_watched(&sdk, &env, Some(&secrets))?
            {
                targets.push(Arc::new(slack));
            }
            if let Some(live) = threadbox_lambda::live_target(&sdk, &env)? {
                targets.push(Arc::new(live));
            }
            let dedupe = Arc::new(threadbox_lambda::dedupe(&sdk, &env)?);
            // The lifecycle queue settles each batch's records (visibility, dead letters), and
            // the dedupe table counts each record's own attempts.
            let queue = Arc::new(threadbox_lambda::lifecycle_queue(&sdk, &env)?);
            let settler = BatchSettler::new(queue).with_attempt_limit(
                dedupe.clone(),
                "lifecycle",
                DEFAULT_MAX_ATTEMPTS,
            );
            Ok(FanoutHandler::new(Fanout::new(dedupe, targets)).with_settler(settler))
        }
    })
    .await?;
    lambda_runtime::run(service_fn(|event| {
        let handler = handler.clone();
        async move { handler.current().await.handle(event).await }
    }))
    .await
}
