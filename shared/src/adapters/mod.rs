//! Adapters: one module per technology, each implementing one or more ports.

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "runc")]
pub mod runc;

#[cfg(feature = "aws")]
pub mod aws;

#[cfg(feature = "dynamo")]
pub mod dynamo;

#[cfg(feature = "sqs")]
pub mod sqs;

#[cfg(feature = "apigw")]
pub mod apigw;

#[cfg(feature = "e2b")]
pub mod e2b;

#[cfg(feature = "slack-client")]
pub mod slack_web;
