//! The local Slack sink's routes: what `threadbox dev` would have shown in Slack when it runs
//! without a bot token, and clicks on it. All behind the API's bearer keys (the messages can
//! hold command output, and a click acts on a sandbox).
//!
//! `GET /v1/slack/sink`. Query: `thread_id` (a Slack thread id: its status card, replies,
//! notices and files), or `channel`; `limit` (default 100, at most 1000). Answer:
//! `{"messages": [...], "views": [...]}`. Messages oldest first, each `{ts, channel, thread_ts,
//! text, blocks, ephemeral_to, file: {id, name, title, size, preview} | null, posted_at,
//! updated_at, edits}`. Views newest first: every App Home view (the latest per user) and the
//! recent modals, each `{id, kind: "modal"|"home", trigger_id, user, view, state:
//! "open"|"submitted"|"closed", opened_at, updated_at}`; with `thread_id`, only the modals for
//! that thread (`private_metadata` is the thread id).
//!
//! `POST /v1/slack/sink/click` `{"ts": "<message ts>", "action_id": "pause", "thread_id"?}`:
//! the `block_actions` request a click on that button would make, signed with the dev server's
//! signing secret and handed in-process to `POST /slack/interactions`. The workspace (team) is
//! the one of `thread_id` if given, else of the button's value (threadbox's buttons carry the
//! thread id), else `TLOCAL` (see `local_click::team_for`).
//!
//! `POST /v1/slack/sink/submit` `{"view_id": "V…", "values"?: {block_id: {action_id: …}}}`:
//! the `view_submission` of an open modal. The modal is then `submitted`, unless the answer says
//! otherwise (`response_action`: `errors` keeps it open, `update`/`push` shows the new view).
//!
//! `POST /v1/slack/sink/close` `{"view_id": "V…"}`: Cancel or ×; the modal is `closed`, and
//! when it asked for `notify_on_close`, the `view_closed` request is sent.
//!
//! The three answer 200 `{"status": <what /slack/interactions answered>, "body": <its body, as
//! JSON when it is>, ...}` when the interactions route took the request (2xx), and 502
//! `interaction_failed` (status and body in the message) when it refused it: a refusal there is
//! never the caller's 401, which would make the dashboard ask for a new API key. Without an
//! interactions route (`clicks: None`) they answer 501 `not_configured`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::local_click::{self, ClickedMessage, SignedRequest, INTERACTIONS_PATH};
use super::signature::{SigningSecret, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use super::thread::SlackPlace;
use axum::body::{to_bytes, Body};
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, Request, StatusCode};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use threadbox_api::http::{require_api_key, ApiAuth, ApiError, ApiQuery};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{SinkQuery, SinkViewKind, SinkViewState, SlackSink};

const DEFAULT_LIMIT: usize = 100;
/// Modals listed; more than anyone clicks through locally.
const VIEWS_LIMIT: usize = 50;
/// The most of an interactions answer read back (Slack's own answers are tiny).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// What clicks in the sink need: the dev server's signing secret, and the router serving
/// `POST /slack/interactions`, called in-process.
#[derive(Clone)]
pub struct SinkClicks {
    pub secret: SigningSecret,
    pub slack: Router,
}

#[derive(Clone)]
struct SinkState {
    sink: Arc<dyn SlackSink>,
    clicks: Option<SinkClicks>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkParams {
    thread_id: Option<String>,
    channel: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClickBody {
    ts: String,
    action_id: String,
    thread_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    view_id: String,
    values: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseBody {
    view_id: String,
}

/// The sink's routes, to merge into the API's router (`http::router`). With `clicks`, buttons
/// and modals in the sink can be clicked and submitted.
pub fn slack_sink_routes(
    sink: Arc<dyn SlackSink>,
    auth: ApiAuth,
    clicks: Option<SinkClicks>,
) -> Router {
    Router::new()
        .route("/v1/slack/sink", get(list))
        .route("/v1/slack/sink/click", post(click))
        .route("/v1/slack/sink/submit", post(submit))
        .route("/v1/slack/sink/close", post(close))
        .route_layer(middleware::from_fn_with_state(auth, require_api_key))
        .with_state(SinkState { sink, clicks })
}

fn slack_thread(raw: &str) -> Result<(ThreadId, SlackPlace), ApiError> {
    let thread = ThreadId::parse(raw)
        .map_err(|e| ApiError::bad_request("invalid_thread_id", e.to_string()))?;
    let place = SlackPlace::of(&thread).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_thread_id",
            format!("{thread} is not a Slack thread id (slack:TEAM:CHANNEL[:TS])"),
        )
    })?;
    Ok((thread, place))
}

async fn list(
    State(state): State<SinkState>,
    ApiQuery(params): ApiQuery<SinkParams>,
) -> Result<Json<Value>, ApiError> {
    let mut query = SinkQuery {
        channel: params.channel,
        thread_ts: None,
        limit: params.limit.unwrap_or(DEFAULT_LIMIT),
    };
    let mut thread_id = None;
    if let Some(raw) = params.thread_id {
        let (thread, place) = slack_thread(&raw)?;
        query.channel = Some(place.channel);
        query.thread_ts = place.thread_ts;
        thread_id = Some(thread.to_string());
    }
    let messages = state.sink.list(query).await?;
    let mut views = state.sink.views(VIEWS_LIMIT).await?;
    if let Some(thread_id) = &thread_id {
        views.retain(|v| {
            v.kind == SinkViewKind::Home || local_click::view_is_for_thread(&v.view, thread_id)
        });
    }
    Ok(Json(json!({ "messages": messages, "views": views })))
}

fn json_body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(b)| b).map_err(ApiError::from)
}

fn now_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

fn clicks_of(state: &SinkState) -> Result<&SinkClicks, ApiError> {
    state.clicks.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_configured",
            "this server has no Slack interactions route to click through",
        )
    })
}

/// What `/slack/interactions` answered.
struct Answer {
    status: StatusCode,
    body: Value,
}

/// Sign `payload` and hand it to the interactions route, as Slack would post it.
async fn deliver(clicks: &SinkClicks, payload: &Value) -> Result<Answer, ApiError> {
    let now_secs = (now_micros() / 1_000_000) as i64;
    let SignedRequest {
        body,
        timestamp,
        signature,
    } = local_click::sign(&clicks.secret, payload, now_secs);
    let request = Request::post(INTERACTIONS_PATH)
        .header(header::CONTENT_TYPE, local_click::FORM_CONTENT_TYPE)
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, signature)
        .body(Body::from(body))
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    // In-process, as `tower::ServiceExt::oneshot` would: the shared crate has `tower` only for
    // its tests, so the router is called through axum's own `Handler` (a `MethodRouter` wrapping
    // the router serves any method and path it serves).
    let service = axum::routing::any_service(clicks.slack.clone());
    let response = axum::handler::Handler::call(service, request, ()).await;
    let status = response.status();
    let bytes = to_bytes(response.into_body(), MAX_ANSWER_BYTES)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "interaction_failed",
                format!("{INTERACTIONS_PATH} answered {status} with an unreadable body: {e}"),
            )
        })?;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    if !status.is_success() {
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "interaction_failed",
            format!("{INTERACTIONS_PATH} answered {status}: {body}"),
        ));
    }
    Ok(Answer { status, body })
}

async fn click(
    State(state): State<SinkState>,
    body: Result<Json<ClickBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = json_body(body)?;
    let clicks = clicks_of(&state)?;
    if let Some(raw) = &body.thread_id {
        slack_thread(raw)?;
    }
    let message = state.sink.message(&body.ts).await?.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "message_not_found",
            format!("the sink has no message {}", body.ts),
        )
    })?;
    let blocks = message.blocks.clone().unwrap_or(Value::Null);
    let button = local_click::find_button(&blocks, &body.action_id).ok_or_else(|| {
        let offered = local_click::action_ids(&blocks);
        ApiError::new(
            StatusCode::NOT_FOUND,
            "button_not_found",
            format!(
                "message {} has no button {:?} (it has: {})",
                message.ts,
                body.action_id,
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            ),
        )
    })?;
    let team = local_click::team_for(
        body.thread_id
            .as_deref()
            .into_iter()
            .chain(button.value.as_deref()),
        &message.channel,
    );
    let clicked = ClickedMessage {
        channel: &message.channel,
        ts: &message.ts,
        thread_ts: message.thread_ts.as_deref(),
        text: &message.text,
        blocks: &blocks,
        ephemeral: message.ephemeral_to.is_some(),
    };
    let payload = local_click::block_actions(&team, &clicked, &button, now_micros());
    let answer = deliver(clicks, &payload).await?;
    Ok(Json(json!({
        "status": answer.status.as_u16(),
        "body": answer.body,
        "team": team,
        "action_id": button.action_id,
        "value": button.value,
    })))
}

/// An open modal, or why not.
async fn open_modal(
    state: &SinkState,
    view_id: &str,
) -> Result<threadbox_core::ports::SinkView, ApiError> {
    let view = state
        .sink
        .view(view_id)
        .await?
        .filter(|v| v.kind == SinkViewKind::Modal)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "view_not_found",
                format!("the sink has no modal {view_id}"),
            )
        })?;
    if view.state != SinkViewState::Open {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "view_not_open",
            format!("modal {view_id} is already {}", view.state.as_str()),
        ));
    }
    Ok(view)
}

async fn submit(
    State(state): State<SinkState>,
    body: Result<Json<SubmitBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = json_body(body)?;
    let clicks = clicks_of(&state)?;
    if body.values.as_ref().is_some_and(|v| !v.is_object()) {
        return Err(ApiError::bad_request(
            "invalid_json",
            "values must be an object: {block_id: {action_id: {type, value}}}",
        ));
    }
    let modal = open_modal(&state, &body.view_id).await?;
    let team = local_click::team_of_view(&modal.view);
    let payload = local_click::view_submission(
        &team,
        &modal.id,
        &modal.view,
        body.values.as_ref(),
        now_micros(),
    );
    let answer = deliver(clicks, &payload).await?;
    // What Slack does with the answer: `errors` keeps the modal open with them, `update` and
    // `push` show the view the app sent, anything else (an empty 200, `clear`) closes it.
    let action = answer.body["response_action"].as_str().unwrap_or_default();
    let now_state = match action {
        "errors" => SinkViewState::Open,
        "update" | "push" if answer.body["view"].is_object() => {
            state
                .sink
                .replace_view(&modal.id, &answer.body["view"])
                .await?;
            SinkViewState::Open
        }
        _ => {
            // False when handling the submission already replaced the modal (a new one opened).
            state
                .sink
                .finish_view(&modal.id, SinkViewState::Submitted)
                .await?;
            SinkViewState::Submitted
        }
    };
    Ok(Json(json!({
        "status": answer.status.as_u16(),
        "body": answer.body,
        "view_id": modal.id,
        "state": now_state,
    })))
}

async fn close(
    State(state): State<SinkState>,
    body: Result<Json<CloseBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = json_body(body)?;
    let modal = open_modal(&state, &body.view_id).await?;
    state
        .sink
        .finish_view(&modal.id, SinkViewState::Closed)
        .await?;
    // Slack tells the app only when the modal asked to be told.
    let mut answer = json!({ "view_id": modal.id, "state": SinkViewState::Closed });
    if modal.view["notify_on_close"] == true {
        let clicks = clicks_of(&state)?;
        let team = local_click::team_of_view(&modal.view);
        let payload = local_click::view_closed(&team, &modal.id, &modal.view);
        let delivered = deliver(clicks, &payload).await?;
        answer["status"] = json!(delivered.status.as_u16());
        answer["body"] = delivered.body;
    }
    Ok(Json(answer))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::body::{to_bytes, Body};
    use axum::http::{header, Request, StatusCode};
    use tower::ServiceExt;

    use super::*;
    use crate::{PostMessage, SlackApi};
    use threadbox_sqlite::SqliteSlackSink;

    async fn call(
        app: &Router,
        method: &str,
        uri: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(key) = key {
            request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let body = match body {
            Some(json) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(json.to_string())
            }
            None => Body::empty(),
        };
        let response = app
            .clone()
            .oneshot(request.body(body).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn get_json(app: &Router, uri: &str, key: Option<&str>) -> (StatusCode, Value) {
        call(app, "GET", uri, key, None).await
    }

    /// What the local UI's buttons send: no key (the routes here have none), a JSON body.
    async fn post_json(app: &Router, uri: &str, body: Value) -> (StatusCode, Value) {
        call(app, "POST", uri, None, Some(body)).await
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
                blocks: Some(vec![json!({"type": "divider"})]),
            })
            .await
            .unwrap();
        }
        sink.open_view(
            "1.2.3",
            &json!({"type": "modal", "private_metadata": "slack:T1:C1:1.000001"}),
        )
        .await
        .unwrap();
        sink.publish_view("U1", &json!({"type": "home", "blocks": []}))
            .await
            .unwrap();
        let app = slack_sink_routes(Arc::new(sink), ApiAuth::new(["key-1"]), None);

        let (status, _) = get_json(&app, "/v1/slack/sink", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _) = post_json(&app, "/v1/slack/sink/click", json!({})).await;
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
        assert_eq!(messages[0]["blocks"], json!([{"type": "divider"}]));
        assert_eq!(messages[0]["ephemeral_to"], Value::Null);
        assert_eq!(messages[0]["file"], Value::Null);
        let views = body["views"].as_array().unwrap();
        assert_eq!(views.len(), 2, "{body}");
        let kinds: Vec<_> = views.iter().map(|v| v["kind"].as_str().unwrap()).collect();
        assert!(
            kinds.contains(&"modal") && kinds.contains(&"home"),
            "{kinds:?}"
        );

        // Another thread: its modals only (none), and every home view.
        let (_, body) = get_json(
            &app,
            "/v1/slack/sink?thread_id=slack:T1:C1:2.000001",
            Some("key-1"),
        )
        .await;
        assert_eq!(body["views"].as_array().unwrap().len(), 1);
        assert_eq!(body["views"][0]["kind"], "home");

        let (_, body) = get_json(&app, "/v1/slack/sink?limit=5", Some("key-1")).await;
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);

        for bad in ["thread_id=agent-1", "thread_id=a%20b", "colour=red"] {
            let (status, body) =
                get_json(&app, &format!("/v1/slack/sink?{bad}"), Some("key-1")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        }

        // Without an interactions route, clicks say so.
        let (status, body) = call(
            &app,
            "POST",
            "/v1/slack/sink/click",
            Some("key-1"),
            Some(json!({"ts": "1.0", "action_id": "pause"})),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{body}");
        assert_eq!(body["error"]["code"], "not_configured");
    }

    /// A stand-in for the lead's `/slack/interactions`: checks the signature as the real one
    /// does, keeps each payload, and answers `answer`.
    fn interactions(secret: SigningSecret, seen: Arc<Mutex<Vec<Value>>>, answer: Value) -> Router {
        Router::new().route(
            INTERACTIONS_PATH,
            post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (secret, seen, answer) = (secret.clone(), seen.clone(), answer.clone());
                    async move {
                        assert_eq!(
                            headers[header::CONTENT_TYPE],
                            "application/x-www-form-urlencoded"
                        );
                        let now = (now_micros() / 1_000_000) as i64;
                        if secret
                            .verify(
                                headers.get(TIMESTAMP_HEADER).map(|v| v.as_bytes()),
                                headers.get(SIGNATURE_HEADER).map(|v| v.as_bytes()),
                                &body,
                                now,
                            )
                            .is_err()
                        {
                            return (StatusCode::UNAUTHORIZED, "bad signature").into_response();
                        }
                        let text = std::str::from_utf8(&body).unwrap();
                        let encoded = text.strip_prefix("payload=").unwrap();
                        let decoded = percent_decode(encoded);
                        seen.lock()
                            .unwrap()
                            .push(serde_json::from_str(&decoded).unwrap());
                        if answer.is_null() {
                            StatusCode::OK.into_response()
                        } else {
                            Json(answer).into_response()
                        }
                    }
                },
            ),
        )
    }

    use axum::response::IntoResponse;

    fn percent_decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn clicks_and_submissions_reach_the_interactions_route_signed() {
        let dir = tempfile::tempdir().unwrap();
        let sink = SqliteSlackSink::open(dir.path().join("s.db")).unwrap();
        let thread = "slack:T7:C1:1.000001";
        let posted = sink
            .post_message(&PostMessage {
                channel: "C1".into(),
                thread_ts: Some("1.000001".into()),
                text: "active".into(),
                blocks: Some(vec![json!({"type": "actions", "block_id": "controls",
                    "elements": [{"type": "button", "action_id": "pause", "value": thread,
                                  "text": {"type": "plain_text", "text": "Pause"}}]})]),
            })
            .await
            .unwrap();
        let secret = SigningSecret::new("local-signing-secret").unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::new(sink);
        let app = slack_sink_routes(
            sink.clone(),
            ApiAuth::disabled(),
            Some(SinkClicks {
                secret: secret.clone(),
                slack: interactions(secret.clone(), seen.clone(), Value::Null),
            }),
        );

        let (status, body) = post_json(
            &app,
            "/v1/slack/sink/click",
            json!({"ts": posted.ts, "action_id": "pause"}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], 200);
        assert_eq!(body["team"], "T7", "from the button's value");
        let payload = seen.lock().unwrap().pop().unwrap();
        assert_eq!(payload["type"], "block_actions");
        assert_eq!(payload["team"]["id"], "T7");
        assert_eq!(payload["container"]["message_ts"], posted.ts.as_str());
        assert_eq!(payload["container"]["thread_ts"], "1.000001");
        assert_eq!(payload["actions"][0]["action_id"], "pause");
        assert_eq!(payload["actions"][0]["block_id"], "controls");
        assert_eq!(payload["actions"][0]["value"], thread);

        for (request, expected, code) in [
            (
                json!({"ts": posted.ts, "action_id": "resume"}),
                StatusCode::NOT_FOUND,
                "button_not_found",
            ),
            (
                json!({"ts": "9.000009", "action_id": "pause"}),
                StatusCode::NOT_FOUND,
                "message_not_found",
            ),
            (
                json!({"ts": posted.ts, "action_id": "pause", "thread_id": "nope nope"}),
                StatusCode::BAD_REQUEST,
                "invalid_thread_id",
            ),
            (
                json!({"ts": posted.ts}),
                StatusCode::BAD_REQUEST,
                "invalid_json",
            ),
        ] {
            let (status, body) = post_json(&app, "/v1/slack/sink/click", request.clone()).await;
            assert_eq!(status, expected, "{request}: {body}");
            assert_eq!(body["error"]["code"], code, "{request}: {body}");
        }
        let (_, body) = post_json(
            &app,
            "/v1/slack/sink/click",
            json!({"ts": posted.ts, "action_id": "resume"}),
        )
        .await;
        assert!(
            body["error"]["message"].as_str().unwrap().contains("pause"),
            "{body}"
        );

        // A modal: submitted once, then it is no longer open.
        let modal = json!({"type": "modal", "callback_id": "reset_confirm",
            "private_metadata": thread, "title": {"type": "plain_text", "text": "Reset?"},
            "notify_on_close": true, "blocks": []});
        sink.open_view("1.2.3", &modal).await.unwrap();
        let view_id = sink.views(5).await.unwrap()[0].id.clone();
        let (status, body) =
            post_json(&app, "/v1/slack/sink/submit", json!({"view_id": view_id})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["state"], "submitted");
        let payload = seen.lock().unwrap().pop().unwrap();
        assert_eq!(payload["type"], "view_submission");
        assert_eq!(payload["team"]["id"], "T7");
        assert_eq!(payload["view"]["id"], view_id.as_str());
        assert_eq!(payload["view"]["callback_id"], "reset_confirm");
        assert_eq!(payload["view"]["private_metadata"], thread);
        let (status, body) =
            post_json(&app, "/v1/slack/sink/submit", json!({"view_id": view_id})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(body["error"]["code"], "view_not_open");
        let (status, _) =
            post_json(&app, "/v1/slack/sink/submit", json!({"view_id": "VNOPE"})).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // Closing one that asked to be told sends view_closed.
        sink.open_view("1.2.4", &modal).await.unwrap();
        let view_id = sink.views(5).await.unwrap()[0].id.clone();
        let (status, body) =
            post_json(&app, "/v1/slack/sink/close", json!({"view_id": view_id})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["state"], "closed");
        assert_eq!(seen.lock().unwrap().pop().unwrap()["type"], "view_closed");
        assert_eq!(
            sink.view(&view_id).await.unwrap().unwrap().state,
            SinkViewState::Closed
        );
    }

    #[tokio::test]
    async fn a_refusal_or_validation_errors_from_the_route_are_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        let sink = Arc::new(SqliteSlackSink::open(dir.path().join("s.db")).unwrap());
        let secret = SigningSecret::new("local-signing-secret").unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let errors = json!({"response_action": "errors", "errors": {"b": "say why"}});
        // The route checks with another secret: a refusal, which is not the caller's 401.
        let wrong = slack_sink_routes(
            sink.clone(),
            ApiAuth::disabled(),
            Some(SinkClicks {
                secret: SigningSecret::new("not-the-secret").unwrap(),
                slack: interactions(secret.clone(), seen.clone(), errors.clone()),
            }),
        );
        let right = slack_sink_routes(
            sink.clone(),
            ApiAuth::disabled(),
            Some(SinkClicks {
                secret: secret.clone(),
                slack: interactions(secret.clone(), seen.clone(), errors),
            }),
        );
        sink.open_view("1.2.3", &json!({"type": "modal", "blocks": []}))
            .await
            .unwrap();
        let view_id = sink.views(5).await.unwrap()[0].id.clone();
        let submit = json!({"view_id": view_id});
        let (status, body) = post_json(&wrong, "/v1/slack/sink/submit", submit.clone()).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
        assert_eq!(body["error"]["code"], "interaction_failed");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("401"),
            "{body}"
        );

        let (status, body) = post_json(&right, "/v1/slack/sink/submit", submit).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["state"], "open", "errors keep the modal open");
        assert_eq!(body["body"]["errors"]["b"], "say why");
        assert_eq!(
            sink.view(&view_id).await.unwrap().unwrap().state,
            SinkViewState::Open
        );
    }
}
