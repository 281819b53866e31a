//! Wiring only: clients from the environment (secrets fetched from Secrets Manager when given
//! by reference), then the router through `lambda_http`, rebuilt when a secret changes.

use threadbox_shared::lambda::{self, Env, Rebuilt, SecretSet};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let sdk = lambda::aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &Env::process()).await?;
    let watched = secrets.clone();
    let router = Rebuilt::new(secrets, move |env: Env| {
        let sdk = sdk.clone();
        let secrets = watched.clone();
        async move {
            let tb = lambda::threadbox(&sdk, &env, &secrets).await?;
            Ok(pause::app(tb, lambda::api_auth(&env)?))
        }
    })
    .await?;
    lambda::run_http_rebuilt(router).await
}
