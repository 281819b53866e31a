//! Every function's `main`, one per kind of event: [`serve_http`] (API Gateway's HTTP API, or a
//! streaming function URL; [`serve_api`] for the functions that are the shared router alone),
//! [`serve_sqs`] (an SQS batch), [`serve_schedule`] (EventBridge's schedule) and [`serve_ws`]
//! (API Gateway's WebSocket API). Each does what every function does around its own part:
//!
//! 1. JSON logs ([`init_tracing`]);
//! 2. the AWS SDK's settings and the secrets given by reference, fetched ([`SecretSet`]);
//! 3. the function's state (its router or handler) made by the function's `build` from a
//!    [`Setup`], and made again when a secret changes ([`Rebuilt`]);
//! 4. the Lambda runtime, handing each invocation to the state of the moment;
//! 5. a start-up failure returned for `main` to return: Rust prints it (a [`SetupError`] prints
//!    its message, "THREADBOX_API_KEYS is not set") and the process exits, which Lambda reports
//!    as the function's init failure.
//!
//! A function's `main.rs` is then one call naming its `build` and, for a handler, the method
//! that handles an invocation; both live in its `lib.rs`, which says what is particular to it:
//! which clients, which handler.

use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use axum::Router;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::env::{Env, SetupError};
use super::http::{run_http_rebuilt, HttpMode};
use super::logging::init_tracing;
use super::refresh::Rebuilt;
use super::secrets::SecretSet;
use super::wiring::{api_auth, aws_config, threadbox};
use threadbox_api::http::ApiAuth;
use threadbox_aws::sdk::SdkConfig;
use threadbox_core::usecases::Threadbox;

/// What a function's `main` returns: any error, boxed (the runtime's own error type).
pub use lambda_http::Error;

/// What a function's `build` makes its state from.
pub struct Setup {
    /// The AWS SDK's settings: every client of the process is made from them.
    pub sdk: SdkConfig,
    /// The process environment, each secret given by reference holding its fetched value.
    pub env: Env,
    /// The secrets, for clients that ask for a fetch when their credentials are refused.
    pub secrets: Arc<SecretSet>,
}

/// A function's `build`: its state from a [`Setup`], at start-up and again whenever a secret
/// changes. Any `async fn(Setup) -> Result<T, SetupError>` is one.
pub trait Build<T>: Send + Sync + 'static {
    fn build(&self, setup: Setup) -> Pin<Box<dyn Future<Output = Result<T, SetupError>> + Send>>;
}

impl<T, F, Fut> Build<T> for F
where
    F: Fn(Setup) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, SetupError>> + Send + 'static,
{
    fn build(&self, setup: Setup) -> Pin<Box<dyn Future<Output = Result<T, SetupError>> + Send>> {
        Box::pin(self(setup))
    }
}

/// Which ways an HTTP function answers (see [`HttpMode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpModes {
    /// Buffered behind API Gateway, streaming requests refused without a stream URL to name.
    BufferedOnly,
    /// The mode `THREADBOX_INVOKE_MODE` (and `THREADBOX_STREAM_URL`) give: sandbox-api, which
    /// the stack deploys both behind API Gateway and behind a streaming function URL.
    FromEnv,
}

/// An HTTP function's `main`: the router `build` makes, served through `lambda_http` in the
/// mode `modes` allows, rebuilt when a secret changes. A 401 answer marks the secrets stale.
pub async fn serve_http(modes: HttpModes, build: impl Build<Router>) -> Result<(), Error> {
    init_tracing();
    let mode = match modes {
        HttpModes::BufferedOnly => HttpMode::Buffered { stream_url: None },
        HttpModes::FromEnv => HttpMode::from_env(&Env::process())?,
    };
    let router = start(build, Env::process).await?;
    run_http_rebuilt(router, mode).await
}

/// [`serve_http`], buffered, for a function that is the shared router alone: `app` over the use
/// cases and the API keys (resolve-session, pause, resume).
pub async fn serve_api(app: fn(Threadbox, ApiAuth) -> Router) -> Result<(), Error> {
    serve_http(HttpModes::BufferedOnly, move |setup: Setup| async move {
        let tb = threadbox(&setup.sdk, &setup.env, &setup.secrets).await?;
        Ok(app(tb, api_auth(&setup.env)?))
    })
    .await
}

/// An SQS consumer's `main` (worker, fanout, pause-queue): each batch to `handle` on the state
/// `build` makes; the answer names the records to report (`batchItemFailures`).
pub async fn serve_sqs<T: Send + Sync + 'static>(
    build: impl Build<T>,
    handle: impl AsyncFn(&T, LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Infallible>,
) -> Result<(), Error> {
    serve_events(build, handle).await
}

/// A scheduled function's `main` (janitor): each EventBridge event to `handle`, whose error
/// fails the invocation (the function's error metric).
pub async fn serve_schedule<T, R, E>(
    build: impl Build<T>,
    handle: impl AsyncFn(&T, LambdaEvent<EventBridgeEvent>) -> Result<R, E>,
) -> Result<(), Error>
where
    T: Send + Sync + 'static,
    R: Serialize,
    E: Into<Diagnostic> + Debug,
{
    serve_events(build, handle).await
}

/// The WebSocket API's `main` (ws): each route's event to `handle`, whose answer's status API
/// Gateway acts on (`$connect` refused with a 401, for one).
pub async fn serve_ws<T: Send + Sync + 'static>(
    build: impl Build<T>,
    handle: impl AsyncFn(
        &T,
        LambdaEvent<ApiGatewayWebsocketProxyRequest>,
    ) -> Result<ApiGatewayProxyResponse, Infallible>,
) -> Result<(), Error> {
    serve_events(build, handle).await
}

/// Each invocation's event, `V`, to `handle` on the state of the moment.
async fn serve_events<V, T, R, E>(
    build: impl Build<T>,
    handle: impl AsyncFn(&T, LambdaEvent<V>) -> Result<R, E>,
) -> Result<(), Error>
where
    V: DeserializeOwned,
    T: Send + Sync + 'static,
    R: Serialize,
    E: Into<Diagnostic> + Debug,
{
    init_tracing();
    let state = start(build, Env::process).await?;
    let handle = &handle;
    lambda_runtime::run(lambda_runtime::service_fn(|event: LambdaEvent<V>| {
        let state = state.clone();
        async move { handle(&*state.current().await, event).await }
    }))
    .await
}

/// The SDK's settings and the secrets fetched, then the state built over `base` (the process
/// environment; another in tests) with the secrets over it.
async fn start<T: Send + Sync + 'static>(
    build: impl Build<T>,
    base: fn() -> Env,
) -> Result<Arc<Rebuilt<T>>, SetupError> {
    let sdk = aws_config().await;
    let secrets = SecretSet::fetch(&sdk, &base()).await?;
    let watched = secrets.clone();
    Rebuilt::with_base(secrets, base, move |env| {
        build.build(Setup {
            sdk: sdk.clone(),
            env,
            secrets: watched.clone(),
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Env {
        Env::from_pairs(&[("THREADBOX_API_KEYS", "k-0123456789abcdef")])
    }

    /// What `build` is given is the environment, and what it returns is the state; a failure
    /// is what `main` returns, printed as its message.
    #[tokio::test]
    async fn the_state_is_built_from_the_environment_and_a_failure_is_main_s_error() {
        async fn keys(setup: Setup) -> Result<String, SetupError> {
            Ok(setup.env.required("THREADBOX_API_KEYS")?)
        }
        let built = start(keys, base).await.unwrap();
        assert_eq!(*built.current().await, "k-0123456789abcdef");

        async fn missing(setup: Setup) -> Result<String, SetupError> {
            Ok(setup.env.required("THREADBOX_SESSIONS_TABLE")?)
        }
        let error: Error = start(missing, base).await.err().unwrap().into();
        assert_eq!(format!("{error:?}"), "THREADBOX_SESSIONS_TABLE is not set");
    }
}
