//! Wiring only: clients from the environment (secrets fetched from Secrets Manager when given
//! by reference), then the router through `lambda_http`, rebuilt when a secret changes.

use threadbox_lambda::{Env, Rebuilt, SecretSet};

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
            let tb = threadbox_lambda::threadbox(&sdk, &env, &secrets).await?;
            Ok(pause::app(tb, threadbox_lambda::api_auth(&env)?))
        }
    })
    .await?;
    threadbox_lambda::run_http_rebuilt(router).await
}
