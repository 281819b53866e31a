//! Wiring only: the token key (fetched from Secrets Manager when given by reference),
//! subscription store, event log and `PostToConnection` sender from the environment, then the
//! handler, rebuilt when the secret changes.

use lambda_runtime::service_fn;
use threadbox_shared::lambda::{self, Env, Rebuilt, SecretSet};
use ws::WsHandler;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let sdk = lambda::aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &Env::process()).await?;
    let handler = Rebuilt::new(secrets, move |env: Env| {
        let sdk = sdk.clone();
        async move { Ok(WsHandler::new(lambda::live_gateway(&sdk, &env)?)) }
    })
    .await?;
    lambda_runtime::run(service_fn(|event| {
        let handler = handler.clone();
        async move { handler.current().await.handle(event).await }
    }))
    .await
}
