//! pause: a user-initiated pause of a thread's sandbox (`POST /v1/threads/{id}/pause`).
//!
//! The pause is refused (409 `held`) while a command runs or a hold is live, and is a no-op on a
//! thread that is already paused. Every other path is a 404 in the API's error shape.

use axum::Router;
use threadbox_shared::http::{router_for, ApiAuth, RouteGroup};
use threadbox_shared::usecases::Threadbox;

/// The route groups this function serves.
pub const ROUTES: &[RouteGroup] = &[RouteGroup::Pause];

/// The handler: the shared router restricted to [`ROUTES`].
pub fn app(tb: Threadbox, auth: ApiAuth) -> Router {
    router_for(tb, auth, ROUTES)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use threadbox_shared::domain::{Status, ThreadId};
    use threadbox_shared::usecases::HoldRequest;
    use threadbox_tests::lambda::{fixture_json, invoke_http, LocalThreadbox};

    use super::*;

    fn thread() -> ThreadId {
        ThreadId::parse("slack:T0001:C0001:1700000000.000100").unwrap()
    }

    #[tokio::test]
    async fn the_pause_event_pauses_the_thread_named_in_its_encoded_path() {
        let local = LocalThreadbox::new();
        local.tb.resolve(&thread()).await.unwrap();
        let router = app(local.tb.clone(), LocalThreadbox::auth());

        // The fixture's raw path has the id percent-encoded (`slack%3AT0001...`).
        let answer = invoke_http(router.clone(), &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        assert_eq!(answer.json()["status"], "paused");
        assert_eq!(answer.json()["thread_id"], thread().as_str());
        let session = local.tb.session(&thread()).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Paused);

        // Queues and clients repeat themselves: a second pause changes nothing.
        let again = invoke_http(router, &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(again.status, 200);
        assert_eq!(again.json()["status"], "paused");
    }

    #[tokio::test]
    async fn a_held_thread_is_not_paused() {
        let local = LocalThreadbox::new();
        local.tb.resolve(&thread()).await.unwrap();
        local
            .tb
            .acquire_hold(
                &thread(),
                HoldRequest::new("agent", Duration::from_secs(60)),
            )
            .await
            .unwrap();
        let router = app(local.tb.clone(), LocalThreadbox::auth());
        let answer = invoke_http(router, &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(answer.status, 409);
        assert_eq!(answer.error_code(), "held");
        let session = local.tb.session(&thread()).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Active);
    }

    #[tokio::test]
    async fn an_unknown_thread_is_a_404_and_other_routes_are_not_here() {
        let local = LocalThreadbox::new();
        let router = app(local.tb.clone(), LocalThreadbox::auth());
        let answer = invoke_http(router.clone(), &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(answer.status, 404);
        assert_eq!(answer.error_code(), "unknown_thread");

        let answer = invoke_http(router, &fixture_json("apigw-http-resolve.json")).await;
        assert_eq!(answer.status, 404);
        assert_eq!(answer.error_code(), "not_found");
        assert_eq!(local.provider.creates(), 0);
    }
}
