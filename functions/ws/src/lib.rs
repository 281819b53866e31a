//! ws: API Gateway's WebSocket API, one function for every route.
//!
//! The route key of the event picks the action of the transport-free `LiveGateway`:
//!
//! - `$connect`: the `token` query parameter is checked and the connection recorded with what
//!   the token grants. A missing, malformed, forged or expired token is refused with 401 (API
//!   Gateway then refuses the upgrade with that status); a store failure with 503.
//! - `$disconnect`: the connection and its subscriptions are forgotten.
//! - `$default` (and any other route, such as a `subscribe` route selected by
//!   `$request.body.action`): one client message (`subscribe` with replay from `after_seq`,
//!   `unsubscribe`, `ping`). Replies and replayed events go back through `PostToConnection`,
//!   the same way live events do, so they share one order; a message the server cannot use is
//!   answered with an error frame and the connection stays open. Binary frames are not part of
//!   the protocol and are answered as a message that is not JSON.
//! - `exec` frames are answered with the error frame `exec_not_supported_here` (with the
//!   frame's `request_id`), naming `POST /v1/threads/{id}/exec` with `Accept: text/event-stream`
//!   at the stack's `SandboxStreamUrl` (sandbox-api streaming behind a function URL) instead,
//!   and `pty` frames with `pty_not_supported_here`, naming the HTTP process routes;
//!   nothing runs. Commands over the socket are `threadbox dev`'s: here `$disconnect`
//!   reaches another invocation (perhaps another instance) than the one running the command, so
//!   `kill_on_disconnect` and the per-connection command cap would need shared state, and this
//!   function would need the sandbox provider's credentials and the use cases' permissions.
//!
//! Every frame counts against the gateway's frame limits (`threadbox_api::live::FrameLimits`,
//! per connection and per thread, as in `threadbox dev`), counted per instance of this
//! function: a client past them gets `too_many_frames`, and one that keeps sending is closed
//! (`DeleteConnection`). API Gateway's stage throttle bounds what spreads over instances.
//!
//! A 500 answer means a store or `PostToConnection` failure; the client may send again.

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use aws_lambda_events::encodings::Body;
use lambda_runtime::LambdaEvent;
use std::convert::Infallible;
use threadbox_api::live::LiveGateway;
use threadbox_lambda::{Setup, SetupError};

/// The handler, holding the live-events gateway (subscription store, sender, event log, key).
#[derive(Clone)]
pub struct WsHandler {
    gateway: LiveGateway,
}

fn answer(status: i64, body: &str) -> ApiGatewayProxyResponse {
    let mut response = ApiGatewayProxyResponse::default();
    response.status_code = status;
    response.body = Some(Body::Text(body.to_owned()));
    response
}

/// What `main` serves: the token key, the subscription store, the event log and the
/// `PostToConnection` sender from the environment.
pub async fn build(setup: Setup) -> Result<WsHandler, SetupError> {
    let gateway = threadbox_lambda::live_gateway(&setup.sdk, &setup.env)?;
    Ok(WsHandler::new(gateway))
}

impl WsHandler {
    pub fn new(gateway: LiveGateway) -> Self {
        Self { gateway }
    }

    /// One route's event (see the module's docs).
    pub async fn handle(
        &self,
        event: LambdaEvent<ApiGatewayWebsocketProxyRequest>,
    ) -> Result<ApiGatewayProxyResponse, Infallible> {
        let request = event.payload;
        let context = &request.request_context;
        let route = context.route_key.as_deref().unwrap_or("$default");
        let Some(connection_id) = context.connection_id.as_deref() else {
            tracing::warn!(route, "WebSocket event without a connection id");
            return Ok(answer(400, "no connection id"));
        };
        let span = tracing::info_span!("ws", route, connection_id);
        let _entered = span.enter();
        Ok(match route {
            "$connect" => {
                let token = request.query_string_parameters.first("token");
                match self.gateway.connect(connection_id, token).await {
                    Ok(_) => answer(200, "connected"),
                    Err(e) if e.is_unauthorized() => {
                        tracing::info!(code = e.code(), "live-events connection refused");
                        answer(401, e.code())
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot record the connection");
                        answer(503, e.code())
                    }
                }
            }
            "$disconnect" => match self.gateway.disconnect(connection_id).await {
                Ok(()) => answer(200, "disconnected"),
                Err(e) => {
                    // The record's TTL removes it eventually; fan-out forgets it on its first 410.
                    tracing::warn!(error = %e, "cannot forget the connection");
                    answer(500, "unavailable")
                }
            },
            _ => {
                let body = match (&request.body, request.is_base64_encoded) {
                    (Some(text), false) => text.as_str(),
                    _ => "",
                };
                match self.gateway.message(connection_id, body).await {
                    Ok(()) => answer(200, "ok"),
                    Err(e) => {
                        tracing::warn!(error = %e, "live-events message not handled");
                        answer(500, "unavailable")
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lambda_runtime::LambdaEvent;
    use serde_json::Value;
    use threadbox_api::live::{InProcessSender, Subscribers, TokenKey, TokenSecret};
    use threadbox_core::domain::{ThreadId, ThreadScope};
    use threadbox_core::ports::{Clock, Frame, SubscriptionStore};
    use threadbox_sqlite::SqliteSubscriptionStore;
    use threadbox_tests::lambda::{context_with_deadline, fixture_json, LocalThreadbox};
    use tokio::sync::mpsc::Receiver;

    use super::*;

    /// The fixtures' connection id and the thread the message fixture subscribes to.
    const CONNECTION: &str = "L0SM9cOFvHcCIhw=";
    const THREAD: &str = "t-ws-fixture";

    struct Local {
        handler: WsHandler,
        local: LocalThreadbox,
        key: TokenKey,
        subscriptions: Arc<SqliteSubscriptionStore>,
        sender: Arc<InProcessSender>,
    }

    fn local() -> Local {
        let local = LocalThreadbox::new();
        let subscriptions =
            Arc::new(SqliteSubscriptionStore::open(local.path("live.sqlite")).unwrap());
        let sender = Arc::new(InProcessSender::default());
        let key = TokenKey::new(TokenSecret::new("ws-fixture-secret-0123456789abcdef").unwrap());
        let subscribers = Subscribers::new(
            subscriptions.clone(),
            sender.clone(),
            local.backend.store.clone(),
            local.clock.clone(),
        );
        Local {
            handler: WsHandler::new(LiveGateway::new(Arc::new(subscribers), key.clone())),
            local,
            key,
            subscriptions,
            sender,
        }
    }

    impl Local {
        fn token(&self, scope: ThreadScope) -> String {
            self.key
                .mint(scope, Duration::from_secs(600), self.local.clock.now())
                .unwrap()
                .token
        }

        /// Whether the store holds the fixtures' connection.
        async fn connected(&self) -> bool {
            let connection = self.subscriptions.connection(CONNECTION).await.unwrap();
            connection.is_some()
        }

        /// Whether the thread the fixtures name has a session (a sandbox was made for it).
        async fn thread_exists(&self) -> bool {
            let thread = ThreadId::parse(THREAD).unwrap();
            self.local.tb.session(&thread).await.unwrap().is_some()
        }

        /// Send `body` on the connection: the one frame that answers it.
        async fn only_answer(&self, rx: &mut Receiver<Frame>, body: Value) -> Value {
            let mut message = fixture_json("apigw-ws-message.json");
            message["body"] = body.to_string().into();
            assert_eq!(self.invoke(&message).await.status_code, 200);
            let mut got = frames(rx);
            assert_eq!(got.len(), 1, "{got:?}");
            got.remove(0)
        }

        async fn invoke(&self, event: &Value) -> ApiGatewayProxyResponse {
            let payload = serde_json::from_value(event.clone()).expect("a WebSocket event");
            let context = context_with_deadline(Duration::from_secs(30));
            self.handler
                .handle(LambdaEvent::new(payload, context))
                .await
                .unwrap()
        }
    }

    fn connect_with(token: Option<&str>) -> Value {
        let mut event = fixture_json("apigw-ws-connect.json");
        match token {
            Some(token) => {
                event["queryStringParameters"]["token"] = token.into();
                event["multiValueQueryStringParameters"]["token"] = serde_json::json!([token]);
            }
            None => {
                event["queryStringParameters"] = Value::Null;
                event["multiValueQueryStringParameters"] = Value::Null;
            }
        }
        event
    }

    fn frames(rx: &mut Receiver<Frame>) -> Vec<Value> {
        let mut out = Vec::new();
        while let Ok(frame) = rx.try_recv() {
            out.push(serde_json::from_str(&frame).unwrap());
        }
        out
    }

    #[tokio::test]
    async fn connect_subscribe_replay_and_disconnect_from_the_fixtures() {
        let l = local();
        let thread = ThreadId::parse(THREAD).unwrap();
        l.local.tb.resolve(&thread).await.unwrap();
        let mut rx = l.sender.register(CONNECTION);

        let token = l.token(ThreadScope::only([thread.clone()]).unwrap());
        let connected = l.invoke(&connect_with(Some(&token))).await;
        assert_eq!(connected.status_code, 200);
        let recorded = l
            .subscriptions
            .connection(CONNECTION)
            .await
            .unwrap()
            .unwrap();
        assert!(recorded.scope.allows(&thread));

        let message = fixture_json("apigw-ws-message.json");
        assert_eq!(l.invoke(&message).await.status_code, 200);
        let got = frames(&mut rx);
        assert_eq!(got[0]["type"], "subscribed", "{got:?}");
        assert_eq!(got[0]["thread_id"], THREAD);
        assert_eq!(got[0]["after_seq"], 0);
        let seqs: Vec<u64> = got[1..]
            .iter()
            .map(|f| {
                assert_eq!(f["type"], "event");
                f["event"]["seq"].as_u64().unwrap()
            })
            .collect();
        let last_seq = got[0]["last_seq"].as_u64().unwrap();
        assert!(last_seq >= 1);
        assert_eq!(
            seqs,
            (1..=last_seq).collect::<Vec<_>>(),
            "replayed in order"
        );
        assert_eq!(
            l.subscriptions
                .subscription(CONNECTION, &thread)
                .await
                .unwrap()
                .unwrap()
                .last_seq,
            last_seq
        );

        let disconnected = l.invoke(&fixture_json("apigw-ws-disconnect.json")).await;
        assert_eq!(disconnected.status_code, 200);
        assert!(!l.connected().await);
        assert!(l
            .subscriptions
            .subscribers(&thread)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn connections_without_a_good_token_are_refused_with_401() {
        let l = local();
        let other_key =
            TokenKey::new(TokenSecret::new("another-secret-0123456789abcdefghij").unwrap());
        let forged = other_key
            .mint(
                ThreadScope::Any,
                Duration::from_secs(600),
                l.local.clock.now(),
            )
            .unwrap()
            .token;
        let expired = l.token(ThreadScope::Any);
        for (event, why) in [
            (
                fixture_json("apigw-ws-connect.json"),
                "the fixture's placeholder",
            ),
            (connect_with(None), "no token"),
            (connect_with(Some(&forged)), "signed with another secret"),
        ] {
            let answer = l.invoke(&event).await;
            assert_eq!(answer.status_code, 401, "{why}");
            assert!(!l.connected().await);
        }
        l.local.clock.advance(Duration::from_secs(601));
        assert_eq!(
            l.invoke(&connect_with(Some(&expired))).await.status_code,
            401
        );
        assert!(!l.connected().await);
    }

    #[tokio::test]
    async fn bad_messages_get_an_error_frame_and_change_nothing() {
        let l = local();
        let mut rx = l.sender.register(CONNECTION);
        let token = l.token(ThreadScope::only([ThreadId::parse("t-other").unwrap()]).unwrap());
        assert_eq!(l.invoke(&connect_with(Some(&token))).await.status_code, 200);

        let mut message = fixture_json("apigw-ws-message.json");
        let not_allowed = l.invoke(&message).await;
        assert_eq!(not_allowed.status_code, 200, "answered on the socket");
        message["body"] = "{not json".into();
        assert_eq!(l.invoke(&message).await.status_code, 200);
        message["body"] = r#"{"action":"ping"}"#.into();
        assert_eq!(l.invoke(&message).await.status_code, 200);

        let got = frames(&mut rx);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0]["type"], "error");
        assert_eq!(got[0]["thread_id"], THREAD);
        assert_eq!(got[1]["type"], "error");
        assert_eq!(got[1]["code"], "bad_json");
        assert_eq!(got[2]["type"], "pong");
        assert!(l
            .subscriptions
            .subscriptions_of(CONNECTION)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn exec_frames_are_answered_with_the_http_route_and_run_nothing() {
        let l = local();
        let mut rx = l.sender.register(CONNECTION);
        // Even a token that may run commands: this function does not run them.
        let token = l
            .key
            .mint_with_exec(
                ThreadScope::Any,
                Duration::from_secs(600),
                l.local.clock.now(),
                true,
                None,
            )
            .unwrap()
            .token;
        assert_eq!(l.invoke(&connect_with(Some(&token))).await.status_code, 200);
        let exec = serde_json::json!({
            "action": "exec", "request_id": "r1", "thread_id": THREAD, "cmd": "echo hi",
        });
        let got = l.only_answer(&mut rx, exec).await;
        assert_eq!(got["type"], "error");
        assert_eq!(got["code"], "exec_not_supported_here");
        assert_eq!(got["request_id"], "r1");
        assert_eq!(got["thread_id"], THREAD);
        let why = got["message"].as_str().unwrap();
        assert!(
            why.contains("POST /v1/threads/{id}/exec") && why.contains("text/event-stream"),
            "{why}"
        );
        assert!(!l.thread_exists().await, "no thread or sandbox was made");

        // A terminal is refused the same way, naming the HTTP process routes.
        let pty = serde_json::json!({
            "action": "pty", "request_id": "p1", "thread_id": THREAD, "cols": 80, "rows": 24,
        });
        let got = l.only_answer(&mut rx, pty).await;
        assert_eq!(got["code"], "pty_not_supported_here");
        assert_eq!(got["request_id"], "p1");
        assert!(got["message"].as_str().unwrap().contains("/processes"));
        assert!(!l.thread_exists().await, "no thread or sandbox was made");
    }
}
