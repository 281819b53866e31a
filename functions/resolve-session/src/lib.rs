//! resolve-session: get-or-create a thread's sandbox, resuming it when paused.
//!
//! Serves, through API Gateway's HTTP API, the shared router's [`ROUTES`]: `POST
//! /v1/threads/{id}/resolve` (201 when this call created the sandbox) and `/reset`, and the
//! session reads (`GET /v1/threads`, `/v1/threads/{id}`, `/v1/threads/{id}/events`), which need
//! the same table access. Every other path is a 404 in the API's error shape.

use axum::Router;
use threadbox_api::http::{router_for, ApiAuth, RouteGroup};
use threadbox_core::usecases::Threadbox;

/// The route groups this function serves.
pub const ROUTES: &[RouteGroup] = &[RouteGroup::Resolve, RouteGroup::Read];

/// The handler: the shared router restricted to [`ROUTES`].
pub fn app(tb: Threadbox, auth: ApiAuth) -> Router {
    router_for(tb, auth, ROUTES)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use threadbox_core::domain::{Status, ThreadId};
    use threadbox_tests::lambda::{fixture_json, invoke_http, LocalThreadbox};

    use super::*;

    const SLACK_THREAD: &str = "slack:T0001:C0001:1700000000.000100";

    fn local() -> (LocalThreadbox, Router) {
        let local = LocalThreadbox::new();
        let router = app(local.tb.clone(), LocalThreadbox::auth());
        (local, router)
    }

    #[tokio::test]
    async fn the_resolve_event_creates_the_sandbox_once() {
        let (local, router) = local();
        let event = fixture_json("apigw-http-resolve.json");

        let first = invoke_http(router.clone(), &event).await;
        assert_eq!(first.status, 201, "{:?}", first.json());
        let handle = first.json();
        // The thread id came from the raw path, colons and all.
        assert_eq!(handle["thread_id"], SLACK_THREAD);
        assert_eq!(handle["status"], "active");
        assert_eq!(handle["created"], true);
        assert_eq!(first.header("content-type"), Some("application/json"));

        let again = invoke_http(router, &event).await;
        assert_eq!(again.status, 200);
        assert_eq!(again.json()["sandbox_id"], handle["sandbox_id"]);
        assert_eq!(again.json()["created"], false);
        assert_eq!(local.provider.creates(), 1);

        let thread = ThreadId::parse(SLACK_THREAD).unwrap();
        let session = local.tb.session(&thread).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Active);
    }

    #[tokio::test]
    async fn reads_take_the_raw_query_string() {
        let (_local, router) = local();
        invoke_http(router.clone(), &fixture_json("apigw-http-resolve.json")).await;

        let answer = invoke_http(router.clone(), &fixture_json("apigw-http-events.json")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        let events = answer.json()["events"].as_array().unwrap().clone();
        assert!(!events.is_empty());
        assert_eq!(events[0]["seq"], 1);
        assert!(events.iter().all(|e| e["thread_id"] == SLACK_THREAD));

        let mut bad = fixture_json("apigw-http-events.json");
        bad["rawQueryString"] = Value::from("limit=0");
        let answer = invoke_http(router, &bad).await;
        assert_eq!(answer.status, 400);
        assert_eq!(answer.error_code(), "invalid_query");
    }

    #[tokio::test]
    async fn a_request_without_the_api_key_is_refused() {
        let (local, router) = local();
        let mut event = fixture_json("apigw-http-resolve.json");
        event["headers"]
            .as_object_mut()
            .unwrap()
            .remove("authorization");
        let answer = invoke_http(router.clone(), &event).await;
        assert_eq!(answer.status, 401);
        assert_eq!(answer.error_code(), "unauthorized");
        assert!(answer.header("www-authenticate").is_some());

        event["headers"]["authorization"] = Value::from("Bearer not-the-key");
        let answer = invoke_http(router, &event).await;
        assert_eq!(answer.status, 401);
        assert_eq!(local.provider.creates(), 0, "nothing was created");
    }

    #[tokio::test]
    async fn a_bad_thread_id_is_a_clear_400() {
        let (local, router) = local();
        let mut event = fixture_json("apigw-http-resolve.json");
        event["rawPath"] = Value::from("/v1/threads/has%20space/resolve");
        let answer = invoke_http(router, &event).await;
        assert_eq!(answer.status, 400);
        assert_eq!(answer.error_code(), "invalid_thread_id");
        assert_eq!(local.provider.creates(), 0);
    }

    #[tokio::test]
    async fn other_functions_routes_are_not_served_here() {
        let (_local, router) = local();
        for name in ["apigw-http-pause.json", "apigw-http-exec.json"] {
            let answer = invoke_http(router.clone(), &fixture_json(name)).await;
            assert_eq!(answer.status, 404, "{name}");
            assert_eq!(answer.error_code(), "not_found", "{name}");
        }
    }
}
