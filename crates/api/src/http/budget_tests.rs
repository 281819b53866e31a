//! Budgets as API callers see them: 429 with a stable code, a message naming the budget and
//! its unit, and `Retry-After` until the window resets; each API key its own scope.

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use serde_json::Value;
    use tower::ServiceExt;

    use crate::http::{key_scope, router, ApiAuth};
    use threadbox_core::domain::{Budgets, Millis, Status, ThreadId};
    use threadbox_core::usecases::{Config, Threadbox};
    use threadbox_sqlite::{
        Database, QueueConfig, SqliteQueue, SqliteSessionStore, SqliteWindowCounter,
    };
    use threadbox_testing::{InMemoryProvider, ManualClock};

    const KEY_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const KEY_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    /// 2026-11-01T10:45:00Z.
    const START: Millis = Millis(1_793_491_200_000 + 10 * 3_600_000 + 45 * 60_000);

    struct Api {
        router: axum::Router,
        tb: Threadbox,
        clock: Arc<ManualClock>,
        _dir: tempfile::TempDir,
    }

    async fn api(budgets: Budgets) -> Api {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
        let queue =
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
        let counter =
            SqliteWindowCounter::new(Database::open(dir.path().join("counts.db"), "").unwrap())
                .await
                .unwrap();
        let config = Config {
            settle_poll: Duration::from_millis(5),
            budgets,
            ..Config::default()
        };
        let clock = Arc::new(ManualClock::new(START));
        let tb = Threadbox::new(store, InMemoryProvider::new(), queue, clock.clone(), config)
            .with_budget_counter(Arc::new(counter));
        Api {
            router: router(tb.clone(), ApiAuth::new([KEY_A, KEY_B])),
            tb,
            clock,
            _dir: dir,
        }
    }

    async fn post(
        router: &axum::Router,
        key: &str,
        uri: &str,
        body: &str,
    ) -> (StatusCode, Option<String>, Value) {
        let request = Request::post(uri)
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, retry_after, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_create_past_the_keys_cap_is_429_with_retry_after_and_another_key_is_apart() {
        let Api { router, tb, .. } = api(Budgets {
            scope_creates_per_hour: Some(1),
            ..Budgets::default()
        })
        .await;
        let (status, _, _) = post(&router, KEY_A, "/v1/threads/api-1/resolve", "").await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, retry_after, body) =
            post(&router, KEY_A, "/v1/threads/api-2/resolve", "").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["error"]["code"], "create_budget_exceeded");
        assert_eq!(retry_after.as_deref(), Some("900"), "until 11:00 UTC");
        let message = body["error"]["message"].as_str().unwrap();
        let threadbox_core::domain::BudgetScope::ApiKey(id) = key_scope(KEY_A) else {
            unreachable!()
        };
        assert!(
            message.contains(&format!("API key {id} has created its 1 new sandboxes")),
            "{message}"
        );
        assert!(!message.contains(KEY_A), "the key itself is never shown");
        assert!(tb
            .store
            .load(&ThreadId::parse("api-2").unwrap())
            .await
            .unwrap()
            .is_none());

        let (status, _, body) = post(&router, KEY_B, "/v1/threads/api-2/resolve", "").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    #[tokio::test]
    async fn an_exec_past_the_compute_budget_is_429_and_the_thread_is_paused() {
        let Api {
            router, tb, clock, ..
        } = api(Budgets {
            thread_compute_per_day: Some(60),
            ..Budgets::default()
        })
        .await;
        let (status, _, _) = post(&router, KEY_A, "/v1/threads/api-1/resolve", "").await;
        assert_eq!(status, StatusCode::CREATED);
        // No size configured: one vCPU, so 61 s of running is 61 vCPU-seconds.
        clock.advance(Duration::from_secs(61));
        let (status, retry_after, body) = post(
            &router,
            KEY_A,
            "/v1/threads/api-1/exec",
            r#"{"cmd": "echo hi"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["error"]["code"], "compute_budget_exceeded");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("61 of 60 vCPU-seconds"), "{message}");
        assert!(message.contains("00:00 UTC"), "{message}");
        // 10:46:01 until midnight.
        assert_eq!(
            retry_after.as_deref(),
            Some(&*(13 * 3600 + 13 * 60 + 59).to_string())
        );
        let session = tb
            .store
            .load(&ThreadId::parse("api-1").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(session.status, Status::Paused);
    }
}
