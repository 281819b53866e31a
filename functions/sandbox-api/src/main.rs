//! Wiring only: clients from the environment, once, then the router through `lambda_http`.

use threadbox_shared::lambda::{self, Env};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let env = Env::process();
    let sdk = lambda::aws_config().await;
    let tb = lambda::threadbox(&sdk, &env).await?;
    let auth = lambda::api_auth(&env)?;
    let tokens = lambda::token_key(&env)?;
    lambda::run_http(sandbox_api::app(tb, auth, tokens)).await
}
