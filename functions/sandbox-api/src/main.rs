//! sandbox-api's `main`: the router [`sandbox_api::build`] makes, buffered behind API Gateway or
//! streamed behind a function URL, as `THREADBOX_INVOKE_MODE` says.

use threadbox_lambda::HttpModes;

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_http(HttpModes::FromEnv, sandbox_api::build).await
}
