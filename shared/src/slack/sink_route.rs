//! `GET /v1/slack/sink`: what `threadbox dev` would have posted to Slack, when it runs without a
//! bot token, behind the API's bearer keys (the messages can hold command output).
//!
//! Query: `thread_id` (a Slack thread id: its status message, replies and notices), or
//! `channel`; `limit` (default 100, at most 1000). Answer `{"messages": [...]}`, oldest first,
//! each with its current text and how many times it was edited.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{middleware, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::thread::SlackPlace;
use crate::domain::ThreadId;
use crate::http::{require_api_key, ApiAuth, ApiError, ApiQuery};
use crate::ports::{SinkQuery, SlackSink};

const DEFAULT_LIMIT: usize = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkParams {
    thread_id: Option<String>,
    channel: Option<String>,
    limit: Option<usize>,
}

/// The sink's route, to merge into the API's router (`http::router`).
pub fn slack_sink_routes(sink: Arc<dyn SlackSink>, auth: ApiAuth) -> Router {
    Router::new()
        .route("/v1/slack/sink", get(list))
        .route_layer(middleware::from_fn_with_state(auth, require_api_key))
        .with_state(sink)
}

async fn list(
    State(sink): State<Arc<dyn SlackSink>>,
    ApiQuery(params): ApiQuery<SinkParams>,
) -> Result<Json<Value>, ApiError> {
    let mut query = SinkQuery {
        channel: params.channel,
        thread_ts: None,
        limit: params.limit.unwrap_or(DEFAULT_LIMIT),
    };
    if let Some(raw) = params.thread_id {
        let thread = ThreadId::parse(&raw)
            .map_err(|e| ApiError::bad_request("invalid_thread_id", e.to_string()))?;
        let place = SlackPlace::of(&thread).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_thread_id",
                format!("{thread} is not a Slack thread id (slack:TEAM:CHANNEL[:TS])"),
            )
        })?;
        query.channel = Some(place.channel);
        query.thread_ts = place.thread_ts;
    }
    let messages = sink.list(query).await?;
    Ok(Json(json!({ "messages": messages })))
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use axum::body::{to_bytes, Body};
    use axum::http::{header, Request, StatusCode};
    use tower::ServiceExt;

    use super::*;
    use crate::adapters::sqlite::SqliteSlackSink;
    use crate::slack::{PostMessage, SlackApi};

    async fn get_json(app: &Router, uri: &str, key: Option<&str>) -> (StatusCode, Value) {
        let mut request = Request::get(uri);
        if let Some(key) = key {
            request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn lists_a_threads_messages_behind_the_api_key() {
        let dir = tempfile::tempdir().unwrap();
        let sink = SqliteSlackSink::open(dir.path().join("s.db")).unwrap();
        for (thread_ts, text) in [("1.000001", "in the thread"), ("2.000001", "elsewhere")] {
            sink.post_message(&PostMessage {
                channel: "C1".into(),
                thread_ts: Some(thread_ts.into()),
                text: text.into(),
            })
            .await
            .unwrap();
        }
        let app = slack_sink_routes(Arc::new(sink), ApiAuth::new(["key-1"]));

        let (status, _) = get_json(&app, "/v1/slack/sink", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);

        let (status, body) = get_json(
            &app,
            "/v1/slack/sink?thread_id=slack:T1:C1:1.000001",
            Some("key-1"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0]["text"], "in the thread");
        assert_eq!(messages[0]["thread_ts"], "1.000001");
        assert_eq!(messages[0]["edits"], 0);

        let (_, body) = get_json(&app, "/v1/slack/sink?limit=5", Some("key-1")).await;
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);

        for bad in ["thread_id=agent-1", "thread_id=a%20b", "colour=red"] {
            let (status, body) =
                get_json(&app, &format!("/v1/slack/sink?{bad}"), Some("key-1")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        }
    }
}
