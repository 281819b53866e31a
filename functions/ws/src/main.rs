//! Wiring only: the token key (fetched from Secrets Manager when given by reference),
//! subscription store, event log and `PostToConnection` sender from the environment, then the
//! handler, rebuilt when the secret changes.

use lambda_runtime::service_fn;
use threadbox_lambda::{Env, Rebuilt, SecretSet};
use ws::WsHandler;

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::init_tracing();
    let sdk = threadbox_lambda::aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &Env::process()).await?;
    let handler = Rebuilt::new(secrets, move |env: Env| {
        let sdk = sdk.clone();
        async move { Ok(WsHandler::new(threadbox_lambda::live_gateway(&sdk, &env)?)) }
    })
    .await?;
    lambda_runtime::run(service_fn(|event| {
        let handler = handler.clone();
        async move { handler.current().await.handle(event).await }
    }))
    .await
}
