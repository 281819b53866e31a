//! threadbox's AWS adapters, each behind the feature of the SDK it needs so that a build takes
//! only the clients it uses (the CLI's dead-letter commands take SQS alone):
//!
//! - [`sdk`]: loading the SDK's configuration with lean HTTP (rustls on ring), timeouts and retries;
//! - `dynamo` (feature `dynamo`): the DynamoDB session store, event log, dedupe, warm pool,
//!   budgets, subscriptions and Slack records;
//! - `sqs` (feature `sqs`): the SQS durable queue;
//! - `apigw` (feature `apigw`): live events' connection sender over API Gateway's Management API.

pub mod sdk;

#[cfg(feature = "dynamo")]
pub mod dynamo;

#[cfg(feature = "sqs")]
pub mod sqs;

#[cfg(feature = "apigw")]
pub mod apigw;
