//! resume: a user-initiated resume of a thread's paused sandbox (`POST /v1/threads/{id}/resume`).
//!
//! Resume never creates a sandbox: a thread without a session is a 404 (resolve creates). A lost
//! sandbox is handled by the thread's gone policy, like on resolve. Every other path is a 404 in
//! the API's error shape.

use axum::Router;
use threadbox_api::http::{router_for, ApiAuth, RouteGroup};
use threadbox_core::usecases::Threadbox;

/// The route groups this function serves.
pub const ROUTES: &[RouteGroup] = &[RouteGroup::Resume];

/// The handler: the shared router restricted to [`ROUTES`].
pub fn app(tb: Threadbox, auth: ApiAuth) -> Router {
    router_for(tb, auth, ROUTES)
}

#[cfg(test)]
mod tests {
    use threadbox_core::domain::{Status, ThreadId};
    use threadbox_tests::lambda::{fixture_json, invoke_http, LocalThreadbox};

    use super::*;

    fn thread() -> ThreadId {
        ThreadId::parse("slack:T0001:C0001:1700000000.000100").unwrap()
    }

    #[tokio::test]
    async fn the_resume_event_resumes_the_paused_sandbox() {
        let local = LocalThreadbox::new();
        let created = local.tb.resolve(&thread()).await.unwrap();
        local.tb.pause(&thread()).await.unwrap();
        let router = app(local.tb.clone(), LocalThreadbox::auth());

        let answer = invoke_http(router, &fixture_json("apigw-http-resume.json")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        let handle = answer.json();
        assert_eq!(handle["resumed"], true);
        assert_eq!(handle["status"], "active");
        assert_eq!(handle["sandbox_id"], created.sandbox_id.as_str());
        let session = local.tb.session(&thread()).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Active);
    }

    #[tokio::test]
    async fn resume_never_creates_and_other_routes_are_not_here() {
        let local = LocalThreadbox::new();
        let router = app(local.tb.clone(), LocalThreadbox::auth());
        let answer = invoke_http(router.clone(), &fixture_json("apigw-http-resume.json")).await;
        assert_eq!(answer.status, 404);
        assert_eq!(answer.error_code(), "unknown_thread");

        let answer = invoke_http(router, &fixture_json("apigw-http-pause.json")).await;
        assert_eq!(answer.status, 404);
        assert_eq!(answer.error_code(), "not_found");
        assert_eq!(local.provider.creates(), 0);
    }
}
