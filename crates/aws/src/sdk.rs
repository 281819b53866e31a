//! Loading the AWS SDK's configuration once per process, for the DynamoDB and SQS adapters.
//!
//! Endpoints, region and credentials come only from the SDK's standard settings (`AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`, the credential chain),
//! so the same binary talks to AWS in production and to a local server (moto) in tests without a
//! "local mode" of its own. What this module adds is what the defaults get wrong for us:
//!
//! - an HTTPS client on rustls with ring, because the SDK's default client builds aws-lc from C;
//! - timeouts, so an unreachable endpoint fails within seconds (at once when the connection is
//!   refused) instead of hanging a Lambda invocation until its own timeout;
//! - a short retry budget: throttling and dropped connections are retried with jittered backoff,
//!   but a caller that cannot be served soon gets `Unavailable` quickly and decides itself.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
/// Re-exported so callers can hold the configuration without depending on `aws-config`.
pub use aws_config::SdkConfig;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

/// Timeouts and retries for every AWS call a process makes. The defaults suit Lambda handlers
/// and the janitor: each call is short, and a stuck call is worse than a failed one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSettings {
    /// Opening a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// One attempt, from sending the request to the end of the response.
    pub attempt_timeout: Duration,
    /// The whole call, retries included.
    pub operation_timeout: Duration,
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Base of the jittered exponential backoff between attempts.
    pub initial_backoff: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(5),
            operation_timeout: Duration::from_secs(12),
            max_attempts: 3,
            initial_backoff: Duration::from_millis(50),
        }
    }
}

/// The SDK's configuration from the standard environment, with our HTTP client, timeouts and
/// retries. Build it once per process and make every client from it.
pub async fn load_config(settings: &ClientSettings) -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(settings.connect_timeout)
                .operation_attempt_timeout(settings.attempt_timeout)
                .operation_timeout(settings.operation_timeout)
                .build(),
        )
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(settings.max_attempts.max(1))
                .with_initial_backoff(settings.initial_backoff)
                .with_max_backoff(Duration::from_secs(2)),
        )
        .load()
        .await
}
