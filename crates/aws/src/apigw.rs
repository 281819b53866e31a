//! `ApiGatewaySender`: the connection sender over API Gateway's Management API (feature `apigw`),
//! for the `ws` and `fanout` Lambda functions.
//!
//! A frame is one `PostToConnection`; closing is `DeleteConnection`. The endpoint is the
//! WebSocket API's callback URL, `https://{api-id}.execute-api.{region}.amazonaws.com/{stage}`
//! (`THREADBOX_WS_CALLBACK_URL`); region and credentials come from the SDK's standard settings
//! like every other client. `GoneException` (HTTP 410: the client went away) is
//! [`SendError::Gone`], which makes the live-events core forget the connection; every other
//! failure is [`SendError::Unavailable`] (retried later by the fan-out).

use async_trait::async_trait;
use aws_sdk_apigatewaymanagement::error::{DisplayErrorContext, SdkError};
use aws_sdk_apigatewaymanagement::operation::delete_connection::DeleteConnectionError;
use aws_sdk_apigatewaymanagement::operation::post_to_connection::PostToConnectionError;
use aws_sdk_apigatewaymanagement::primitives::Blob;
use aws_sdk_apigatewaymanagement::Client;

use threadbox_core::ports::{ConnectionSender, Frame, SendError};

/// The connection sender on API Gateway's Management API. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct ApiGatewaySender {
    client: Client,
}

impl ApiGatewaySender {
    /// The variable holding the WebSocket API's callback URL in a deployed function's environment.
    pub const CALLBACK_URL_VAR: &'static str = "THREADBOX_WS_CALLBACK_URL";

    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// A sender posting to `callback_url` (the WebSocket stage's `https://…/{stage}` URL), with
    /// the rest of the client's settings from the SDK configuration.
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig, callback_url: &str) -> Self {
        let config = aws_sdk_apigatewaymanagement::config::Builder::from(sdk)
            .endpoint_url(callback_url.trim_end_matches('/'))
            .build();
        Self::new(Client::from_conf(config))
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// A failed `PostToConnection`: 410 Gone is permanent, everything else may pass later.
fn post_error<R: std::fmt::Debug>(
    connection_id: &str,
    err: SdkError<PostToConnectionError, R>,
) -> SendError {
    match err.as_service_error() {
        Some(PostToConnectionError::GoneException(_)) => SendError::Gone(connection_id.to_owned()),
        _ => SendError::Unavailable {
            connection_id: connection_id.to_owned(),
            reason: format!("PostToConnection: {}", DisplayErrorContext(&err)),
        },
    }
}

/// A failed `DeleteConnection`: a connection that is already gone is closed, which is fine.
fn delete_result<R: std::fmt::Debug>(
    connection_id: &str,
    err: SdkError<DeleteConnectionError, R>,
) -> Result<(), SendError> {
    match err.as_service_error() {
        Some(DeleteConnectionError::GoneException(_)) => Ok(()),
        _ => Err(SendError::Unavailable {
            connection_id: connection_id.to_owned(),
            reason: format!("DeleteConnection: {}", DisplayErrorContext(&err)),
        }),
    }
}

#[async_trait]
impl ConnectionSender for ApiGatewaySender {
    async fn send(&self, connection_id: &str, frame: &Frame) -> Result<(), SendError> {
        self.client
            .post_to_connection()
            .connection_id(connection_id)
            .data(Blob::new(frame.as_bytes()))
            .send()
            .await
            .map(drop)
            .map_err(|e| post_error(connection_id, e))
    }

    async fn close(&self, connection_id: &str) -> Result<(), SendError> {
        match self
            .client
            .delete_connection()
            .connection_id(connection_id)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => delete_result(connection_id, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_apigatewaymanagement::types::error::{ForbiddenException, GoneException};

    use super::*;

    #[test]
    fn gone_is_gone_and_everything_else_is_retryable() {
        let gone = SdkError::service_error(
            PostToConnectionError::GoneException(GoneException::builder().build()),
            (),
        );
        assert_eq!(post_error("c1", gone), SendError::Gone("c1".into()));

        let forbidden = SdkError::service_error(
            PostToConnectionError::ForbiddenException(
                ForbiddenException::builder().message("no").build(),
            ),
            (),
        );
        assert!(matches!(
            post_error("c1", forbidden),
            SendError::Unavailable { connection_id, reason }
                if connection_id == "c1" && reason.starts_with("PostToConnection")
        ));

        let timeout: SdkError<PostToConnectionError, ()> = SdkError::timeout_error("took too long");
        assert!(matches!(
            post_error("c1", timeout),
            SendError::Unavailable { .. }
        ));
    }

    #[test]
    fn closing_a_gone_connection_is_fine() {
        let gone = SdkError::service_error(
            DeleteConnectionError::GoneException(GoneException::builder().build()),
            (),
        );
        assert_eq!(delete_result("c1", gone), Ok(()));
        let other: SdkError<DeleteConnectionError, ()> = SdkError::timeout_error("slow");
        assert!(delete_result("c1", other).is_err());
    }
}
