//! IAM checked: every function's paths run through the real wiring (`threadbox_lambda`
//! and each function's handler, as its `main` builds them) against moto, with the environment
//! `infra/template.yaml` gives the function, and every AWS call they make is evaluated against
//! the policy the template gives that function's role (see `threadbox_tests::iam`). Sandboxes are
//! E2B's contract fake, Slack is Slack's fake: no AWS call goes to either.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest;
use lambda_runtime::LambdaEvent;
use serde_json::{json, Value};
use threadbox_aws::sqs::{SqsQueue, SqsQueueUrls};
use threadbox_core::domain::ThreadId;
use threadbox_core::fanout::{Fanout, FanoutTarget, LogTarget};
use threadbox_core::ports::{DurableQueue, SystemClock};
use threadbox_lambda::batch::{BatchSettler, DEFAULT_MAX_ATTEMPTS};
use threadbox_slack::{MessageRates, SlackIngress, SlackWorker, SlackWorkerConfig};
use threadbox_testing::e2b_fake::E2bFake;
use threadbox_testing::slack_fake::SlackFake;
use threadbox_tests::iam::{
    checker_pythons, denied_calls, repo, resolve_template, Call, IamStack, StackSecrets, ACCOUNT,
    REGION,
};
use threadbox_tests::lambda::{
    assert_ok as ok, context_with_deadline, fixture_json, http_event, invoke_http, now_secs,
    scheduled_now, signed,
};

const BOT_TOKEN: &str = "xoxb-iam-check-token";
const SIGNING_SECRET: &str = "iam-check-signing-secret-not-a-real-one";

/// The template's conditions that change a role, all on: the warm pool, every budget (and the
/// egress credentials secret, which the stack always names unless told otherwise); the idle
/// pause and retention short enough for one sweep to pause and destroy; every janitor run
/// reconciles.
const EVERYTHING_ON: &[(&str, &str)] = &[
    ("WarmPoolSize", "2"),
    ("IdlePauseSeconds", "1"),
    ("RetentionSeconds", "3"),
    ("ReconcileEveryMinutes", "1"),
    ("ThreadComputeBudget", "100000"),
    ("ScopeComputeBudget", "100000"),
    ("ScopeCreatesPerHour", "1000"),
    // An image besides host, so the image change below writes (and reaches the functions).
    ("E2bTemplates", "python=base"),
];

/// The same conditions off (the template's defaults): a grant only a condition gives must not
/// be needed without it.
const EVERYTHING_OFF: &[(&str, &str)] = &[
    ("WarmPoolSize", "0"),
    ("IdlePauseSeconds", "1"),
    ("RetentionSeconds", "3"),
    ("ReconcileEveryMinutes", "1"),
    ("EgressCredentialsSecret", ""),
    ("E2bTemplates", "python=base"),
];

/// E2B's control plane through sandbox-api (docs/e2b-api.md): create a thread by idempotency
/// key, list by metadata, pause, connect, time out and kill, with the key as `X-API-Key`.
async fn e2b_control_plane(router: &axum::Router) {
    let e2b = |method: &str, path: &str, query: &str, body: Option<Value>| {
        let mut event = http_event(method, &format!("/e2b{path}"), query, body);
        let bearer = event["headers"]["authorization"]
            .as_str()
            .unwrap()
            .to_owned();
        event["headers"]["x-api-key"] = json!(bearer.trim_start_matches("Bearer "));
        event["headers"]["idempotency-key"] = json!("iam-e2b");
        event
    };
    let created = invoke_http(
        router.clone(),
        &e2b(
            "POST",
            "/v2/sandboxes",
            "",
            Some(json!({"templateID": "base", "metadata": {"by": "iam"}})),
        ),
    )
    .await;
    ok(&created, "e2b create");
    let id = created.json()["sandboxID"].as_str().unwrap().to_owned();
    for (method, path, query, body) in [
        ("GET", "/v2/sandboxes".to_owned(), "metadata=by%3Diam", None),
        ("GET", format!("/sandboxes/{id}"), "", None),
        ("POST", format!("/sandboxes/{id}/pause"), "", None),
        (
            "POST",
            format!("/v2/sandboxes/{id}/connect"),
            "",
            Some(json!({})),
        ),
        (
            "POST",
            format!("/sandboxes/{id}/timeout"),
            "",
            Some(json!({"timeout": 60})),
        ),
        ("DELETE", format!("/sandboxes/{id}"), "", None),
    ] {
        let answer = invoke_http(router.clone(), &e2b(method, &path, query, body)).await;
        ok(&answer, &format!("e2b {method} {path}"));
    }
}

/// Checkpoints through sandbox-api: E2B has none, so taking, restoring and forking answer 501
/// before anything is read or written; the list reads the thread's records (GetItem).
async fn e2b_checkpoints(router: &axum::Router, t: &str) {
    for (path, body) in [
        (format!("{t}/checkpoints"), json!({"label": "iam"})),
        (
            format!("{t}/restore"),
            json!({"checkpoint": "cp-0123456789abcdef0123"}),
        ),
        (format!("{t}/fork"), json!({"thread": "iam-fork"})),
    ] {
        let answer = invoke_http(router.clone(), &http_event("POST", &path, "", Some(body))).await;
        assert_eq!(answer.status, 501, "POST {path}: {:?}", answer.json());
        assert_eq!(answer.error_code(), "unsupported");
    }
    let answer = invoke_http(
        router.clone(),
        &http_event("GET", &format!("{t}/checkpoints"), "", None),
    )
    .await;
    ok(&answer, "list checkpoints");
}

/// A record no consumer can read, which it dead-letters at once (`threadbox_lambda::batch`).
async fn send_poison(stack: &IamStack, queue_url: &str) {
    aws_sdk_sqs::Client::new(&stack.sdk)
        .send_message()
        .queue_url(queue_url)
        .message_body("{\"not\": \"a record\"")
        .message_group_id("poison")
        .message_deduplication_id(format!("poison-{}", now_secs()))
        .send()
        .await
        .unwrap();
}

fn ws_event(
    fixture: &str,
    edit: impl FnOnce(&mut Value),
) -> LambdaEvent<ApiGatewayWebsocketProxyRequest> {
    let mut json = fixture_json(fixture);
    edit(&mut json);
    LambdaEvent::new(
        serde_json::from_value(json).unwrap(),
        context_with_deadline(Duration::from_secs(20)),
    )
}

/// A stand-in for API Gateway's `@connections` API: the base URL `THREADBOX_WS_CALLBACK_URL`
/// names, and a switch that makes every connection gone (410), as when a client went away.
async fn connections_api() -> (String, Arc<AtomicBool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let gone = Arc::new(AtomicBool::new(false));
    let switch = gone.clone();
    let app = axum::Router::new().fallback(move || {
        let gone = switch.load(Ordering::SeqCst);
        async move {
            use axum::http::StatusCode;
            if gone {
                // As API Gateway answers: the SDK reads the error type from the header.
                let headers = [("x-amzn-errortype", "GoneException")];
                (StatusCode::GONE, headers, r#"{"message":"gone"}"#)
            } else {
                (StatusCode::OK, [("x-amzn-errortype", "")], "")
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://127.0.0.1:{port}/live"), gone)
}

#[test]
fn every_functions_calls_are_allowed_by_its_role_with_pool_budgets_and_egress_on() {
    with_room(|| {
        every_path(
            "every_functions_calls_are_allowed_by_its_role_with_pool_budgets_and_egress_on",
            EVERYTHING_ON,
            true,
        )
    });
}

#[test]
fn every_functions_calls_are_allowed_by_its_role_with_them_off() {
    with_room(|| {
        every_path(
            "every_functions_calls_are_allowed_by_its_role_with_them_off",
            EVERYTHING_OFF,
            false,
        )
    });
}

/// Run the future `make` makes on a runtime whose threads, and the one polling it, have 32 MiB of stack: every
/// function's paths in one future outgrow a test thread's 2 MiB in a debug build (it overflowed
/// twice as features were added, boxed or not), and a test's room should not depend on how many
/// features its future holds.
fn with_room<F: std::future::Future<Output = ()>>(make: impl FnOnce() -> F + Send + 'static) {
    const STACK: usize = 32 << 20;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(STACK)
        .enable_all()
        .build()
        .expect("a runtime");
    let polled = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || runtime.block_on(Box::pin(make())))
        .expect("a thread with room")
        .join();
    if let Err(panic) = polled {
        std::panic::resume_unwind(panic);
    }
}

/// Every function's paths under `parameters`, then the check. `pool`: whether the warm pool
/// is on, so its own paths must have run.
/// `function` (`who`) looked for a warm pool member for a new thread, and dropped the member's
/// record when its sandbox was lost and replaced.
fn assert_replaced_a_member(stack: &IamStack, function: &str, who: &str) {
    assert!(
        stack.made(function, "dynamodb:Query", "/index/by_thread"),
        "{who} never looked for a warm pool member"
    );
    let sessions = format!("table/{}", stack.sessions_table);
    assert!(
        stack.made(function, "dynamodb:DeleteItem", &sessions),
        "{who} never dropped the lost sandbox's member"
    );
}

async fn every_path(test: &str, parameters: &[(&str, &str)], pool: bool) {
    let e2b = E2bFake::start().await;
    let slack = SlackFake::start(BOT_TOKEN).await;
    let secrets = StackSecrets {
        e2b_api_key: e2b.api_key(),
        slack_bot_token: BOT_TOKEN.to_owned(),
        slack_signing_secret: SIGNING_SECRET.to_owned(),
    };
    let Some(stack) = IamStack::new(test, parameters, &secrets).await else {
        return;
    };
    // Production leaves these at E2B's and Slack's real URLs, and the live callback at the
    // WebSocket API's.
    let mut overrides: Vec<(String, String)> = e2b
        .env_vars()
        .into_iter()
        .filter(|(k, _)| k != "E2B_API_KEY")
        .collect();
    overrides.push(("SLACK_API_URL".into(), slack.api_url()));
    let (callback_url, connections_gone) = connections_api().await;
    overrides.push(("THREADBOX_WS_CALLBACK_URL".into(), callback_url));

    // ---- janitor: tends the warm pool (makes its members), reconciles.
    let janitor = {
        let (sdk, env, mut tb) = stack.start_threadbox("JanitorFunction", &overrides).await;
        if let Some(queue) = threadbox_lambda::transition_queue(&sdk, &env).unwrap() {
            tb = tb.with_transition_queue(Arc::new(queue));
        }
        janitor::Janitor::new(tb, janitor::Schedule::from_env(&env).unwrap())
    };
    // Each sweep (and the worker's turn) on the heap too: inline, their futures would make
    // this one's larger than the test thread's stack.
    let report = Box::pin(janitor.handle(scheduled_now())).await;
    assert!(report.is_ok(), "first sweep: {report:?}");

    // ---- resolve-session: resolve (a new thread takes a pool member), network, image, images,
    // list, show, events, reset (its new sandbox from the image's template).
    {
        let (_, env, tb) = stack
            .start_threadbox("ResolveSessionFunction", &overrides)
            .await;
        let router = resolve_session::app(tb, threadbox_lambda::api_auth(&env).unwrap());
        let t = "/v1/threads/iam-resolve";
        for (method, path, query, body) in [
            ("POST", format!("{t}/resolve"), "", Some(json!({}))),
            (
                "PUT",
                format!("{t}/network"),
                "",
                Some(json!({"network": "networked"})),
            ),
            (
                "PUT",
                format!("{t}/image"),
                "",
                Some(json!({"image": "python"})),
            ),
            ("GET", "/v1/images".to_owned(), "", None),
            ("GET", "/v1/threads".to_owned(), "", None),
            ("GET", "/v1/threads".to_owned(), "usage=true", None),
            ("GET", t.to_owned(), "", None),
            ("GET", format!("{t}/events"), "after_seq=0", None),
            ("POST", format!("{t}/reset"), "", Some(json!({}))),
        ] {
            let answer = invoke_http(router.clone(), &http_event(method, &path, query, body)).await;
            ok(&answer, &format!("resolve-session {method} {path}"));
        }
    }

    // ---- sandbox-api: exec (a new thread takes a pool member), files, processes, MCP, tokens.
    let sessions = format!("table/{}", stack.sessions_table);
    let report = Box::pin(janitor.handle(scheduled_now())).await;
    assert!(report.is_ok(), "refill: {report:?}");
    let token;
    {
        let (_, env, tb) = stack
            .start_threadbox("SandboxApiFunction", &overrides)
            .await;
        let router = sandbox_api::app(
            tb.clone(),
            threadbox_lambda::api_auth(&env).unwrap(),
            threadbox_lambda::token_key(&env).unwrap(),
        );
        let t = "/v1/threads/iam-api";
        let exec =
            |cmd: &str| http_event("POST", &format!("{t}/exec"), "", Some(json!({"cmd": cmd})));
        let answer = invoke_http(router.clone(), &exec("echo hi")).await;
        ok(&answer, "exec");
        let mut put = http_event("PUT", &format!("{t}/files/tmp/notes.txt"), "", None);
        put["body"] = json!("some text");
        put["headers"]["content-type"] = json!("application/octet-stream");
        ok(&invoke_http(router.clone(), &put).await, "file put");
        for (method, path, query) in [
            ("GET", format!("{t}/files/tmp/notes.txt"), ""),
            ("DELETE", format!("{t}/files/tmp/notes.txt"), ""),
        ] {
            let answer = invoke_http(router.clone(), &http_event(method, &path, query, None)).await;
            ok(&answer, &format!("{method} {path}"));
        }
        let answer = invoke_http(
            router.clone(),
            &http_event(
                "POST",
                &format!("{t}/processes"),
                "",
                Some(json!({"cmd": "sleep 30"})),
            ),
        )
        .await;
        ok(&answer, "process start");
        let started = answer.json();
        let pid = started["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no process id in {started}"))
            .to_owned();
        for (method, path, query) in [
            ("GET", format!("{t}/processes"), ""),
            ("GET", format!("{t}/processes/{pid}/output"), "after=0"),
            ("DELETE", format!("{t}/processes/{pid}"), ""),
        ] {
            let answer = invoke_http(router.clone(), &http_event(method, &path, query, None)).await;
            ok(&answer, &format!("{method} {path}"));
        }
        // The thread's sandbox (a pool member's) is lost: the next exec replaces it and drops
        // the member's record.
        let thread = ThreadId::parse("iam-api").unwrap();
        let session = tb.store.load(&thread).await.unwrap().unwrap();
        assert_eq!(
            session.pool_member.is_some(),
            pool,
            "exec took a pool member"
        );
        tb.provider
            .kill(session.sandbox_id.as_deref().unwrap())
            .await
            .unwrap();
        let answer = invoke_http(router.clone(), &exec("echo again")).await;
        ok(&answer, "exec after the sandbox was lost");
        let mut mcp = http_event(
            "POST",
            "/v1/threads/iam-mcp/mcp",
            "",
            Some(json!({
                "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "run_command", "arguments": {"command": "echo from mcp"}},
            })),
        );
        mcp["headers"]["accept"] = json!("application/json, text/event-stream");
        mcp["headers"]["mcp-protocol-version"] = json!("2025-06-18");
        let answer = invoke_http(router.clone(), &mcp).await;
        ok(&answer, "mcp tool call");
        let called = answer.json();
        assert_eq!(called["result"]["isError"], json!(false), "{called}");
        Box::pin(e2b_checkpoints(&router, t)).await;
        e2b_control_plane(&router).await;
        let answer = invoke_http(
            router,
            &http_event(
                "POST",
                "/v1/tokens",
                "",
                Some(json!({"threads": ["iam-api"], "ttl_seconds": 600})),
            ),
        )
        .await;
        ok(&answer, "token");
        token = answer.json()["token"].as_str().unwrap().to_owned();
    }
    if pool {
        assert_replaced_a_member(&stack, "SandboxApiFunction", "sandbox-api");
    }

    // ---- ws: connect with the token, subscribe (replay); the fan-out posts the pause and
    // resume below to this connection.
    {
        let (sdk, env, _secrets) = stack.start("WsFunction", &overrides).await;
        let handler = ws::WsHandler::new(threadbox_lambda::live_gateway(&sdk, &env).unwrap());
        let connect = ws_event("apigw-ws-connect.json", |e| {
            e["queryStringParameters"]["token"] = json!(token);
            e["multiValueQueryStringParameters"]["token"] = json!([token]);
        });
        let answer = handler.handle(connect).await.unwrap();
        assert_eq!(answer.status_code, 200, "{:?}", answer.body);
        let subscribe = ws_event("apigw-ws-message.json", |e| {
            e["body"] = json!(r#"{"action":"subscribe","thread_id":"iam-api","after_seq":0}"#);
        });
        let answer = handler.handle(subscribe).await.unwrap();
        assert_eq!(answer.status_code, 200, "{:?}", answer.body);
        let unsubscribe = ws_event("apigw-ws-message.json", |e| {
            e["body"] = json!(r#"{"action":"unsubscribe","thread_id":"iam-other"}"#);
        });
        let answer = handler.handle(unsubscribe).await.unwrap();
        assert_eq!(answer.status_code, 200, "{:?}", answer.body);
    }

    // ---- pause and resume, on request.
    for (function, action, app) in [
        ("PauseFunction", "pause", pause::app as fn(_, _) -> _),
        ("ResumeFunction", "resume", resume::app),
    ] {
        let (_, env, tb) = stack.start_threadbox(function, &overrides).await;
        let router = app(tb, threadbox_lambda::api_auth(&env).unwrap());
        let path = format!("/v1/threads/iam-api/{action}");
        let answer = invoke_http(router, &http_event("POST", &path, "", Some(json!({})))).await;
        ok(&answer, action);
    }

    // ---- slack-events and worker, twice in one Slack thread: a signed mention is deduped and
    // queued on the work queue, then the worker runs it (a new thread: a pool member); the
    // second time the thread's sandbox was lost, so the worker replaces it.
    let (sdk, env, secrets) = stack.start("SlackEventsFunction", &overrides).await;
    let mut ingress = SlackIngress::new(
        Some(threadbox_lambda::signing_secret(&env).unwrap()),
        Arc::new(threadbox_lambda::dedupe(&sdk, &env).unwrap()),
        Arc::new(threadbox_lambda::work_queue(&sdk, &env).unwrap()),
        Arc::new(SystemClock),
    );
    let api = threadbox_lambda::watch_slack_auth(
        Arc::new(threadbox_lambda::slack_api(&env).unwrap()),
        secrets,
    );
    ingress = ingress.with_api(api);
    let slack_events = slack_events::app(ingress);

    let (sdk, env, secrets) = stack.start("WorkerFunction", &overrides).await;
    let work_queue = Arc::new(threadbox_lambda::work_queue(&sdk, &env).unwrap());
    let dedupe = Arc::new(threadbox_lambda::dedupe(&sdk, &env).unwrap());
    let worker_tb = threadbox_lambda::threadbox(&sdk, &env, &secrets)
        .await
        .unwrap();
    let slack_worker = SlackWorker::new(
        worker_tb.clone(),
        threadbox_lambda::watch_slack_auth(
            Arc::new(threadbox_lambda::slack_api(&env).unwrap()),
            secrets,
        ),
        dedupe.clone(),
        work_queue.clone(),
        SlackWorkerConfig {
            checkpoint_turns: threadbox_lambda::checkpoint_turns(&env).unwrap(),
            ..SlackWorkerConfig::default()
        },
    )
    .with_rates(MessageRates::new(
        Arc::new(threadbox_lambda::window_counter(&sdk, &env).unwrap()),
        threadbox_lambda::slack_rates(&env).unwrap(),
        Arc::new(SystemClock),
    ))
    .with_user_threads(Arc::new(
        threadbox_lambda::slack_user_threads(&sdk, &env).unwrap(),
    ));
    let settler =
        BatchSettler::new(work_queue).with_attempt_limit(dedupe, "work", DEFAULT_MAX_ATTEMPTS);
    let worker = worker::WorkHandler::new(slack_worker).with_settler(settler);
    let slack_thread = ThreadId::parse("slack:T0001:C0001:1767225590.000100").unwrap();

    for round in 1..=2 {
        if round == 2 {
            let session = worker_tb.store.load(&slack_thread).await.unwrap().unwrap();
            assert_eq!(
                session.pool_member.is_some(),
                pool,
                "the worker took a pool member"
            );
            worker_tb
                .provider
                .kill(session.sandbox_id.as_deref().unwrap())
                .await
                .unwrap();
        } else {
            let report = Box::pin(janitor.handle(scheduled_now())).await;
            assert!(report.is_ok(), "refill: {report:?}");
        }
        let mut event = fixture_json("apigw-http-slack-app-mention.json");
        let mut body: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
        if round == 2 {
            body["event_id"] = json!("Ev0SLACK0002");
            body["event"]["thread_ts"] = body["event"]["ts"].clone();
            body["event"]["ts"] = json!("1767225591.000200");
        }
        event["body"] = json!(body.to_string());
        let answer = invoke_http(slack_events.clone(), &signed(event, SIGNING_SECRET)).await;
        ok(&answer, "slack event");
        assert_eq!(answer.json()["outcome"], "accepted", "{:?}", answer.json());
        if round == 1 {
            // `/sandbox` and a button click, queued for the worker beside the mention.
            for fixture in [
                "apigw-http-slack-command.json",
                "apigw-http-slack-interaction.json",
            ] {
                let answer = invoke_http(
                    slack_events.clone(),
                    &signed(fixture_json(fixture), SIGNING_SECRET),
                )
                .await;
                ok(&answer, fixture);
            }
        }

        if round == 2 {
            send_poison(&stack, &stack.work.queue_url).await;
        }
        let event = stack
            .drain(&stack.work.queue_url)
            .await
            .expect("slack-events queued the mention");
        let response = Box::pin(worker.handle(event)).await.unwrap();
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }
    if pool {
        assert_replaced_a_member(&stack, "WorkerFunction", "the worker");
    }

    // ---- fanout: every lifecycle event so far, to the log, Slack and live targets.
    {
        let (sdk, env, secrets) = stack.start("FanoutFunction", &overrides).await;
        let mut targets: Vec<Arc<dyn FanoutTarget>> = vec![Arc::new(LogTarget)];
        if let Some(slack) =
            threadbox_lambda::slack_status_target_watched(&sdk, &env, Some(&secrets)).unwrap()
        {
            targets.push(Arc::new(slack));
        }
        if let Some(live) = threadbox_lambda::live_target(&sdk, &env).unwrap() {
            targets.push(Arc::new(live));
        }
        let dedupe = Arc::new(threadbox_lambda::dedupe(&sdk, &env).unwrap());
        let queue = Arc::new(threadbox_lambda::lifecycle_queue(&sdk, &env).unwrap());
        let settler = BatchSettler::new(queue).with_attempt_limit(
            dedupe.clone(),
            "lifecycle",
            DEFAULT_MAX_ATTEMPTS,
        );
        let handler =
            fanout::FanoutHandler::new(Fanout::new(dedupe, targets)).with_settler(settler);
        send_poison(&stack, &stack.lifecycle.queue_url).await;
        // The client went away: the fan-out's post is answered 410 and it forgets the
        // connection.
        connections_gone.store(true, Ordering::SeqCst);
        // A FIFO queue hands out a group's next records only once the earlier ones are
        // settled: batches until the queue is empty.
        let mut batches = 0;
        while let Some(event) = stack.drain(&stack.lifecycle.queue_url).await {
            let response = handler.handle(event).await.unwrap();
            assert!(response.batch_item_failures.is_empty(), "{response:?}");
            batches += 1;
            assert!(batches < 50, "the lifecycle queue never emptied");
        }
    }

    // ---- ws: disconnect.
    {
        let (sdk, env, _secrets) = stack.start("WsFunction", &overrides).await;
        let handler = ws::WsHandler::new(threadbox_lambda::live_gateway(&sdk, &env).unwrap());
        let answer = handler
            .handle(ws_event("apigw-ws-disconnect.json", |_| {}))
            .await
            .unwrap();
        assert_eq!(answer.status_code, 200, "{:?}", answer.body);
    }

    // ---- janitor again, past the idle pause and retention: the sweep claims pauses and
    // destroys for the transition queue, tends the pool; pause-queue carries them out.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let report = Box::pin(janitor.handle(scheduled_now())).await;
    assert!(report.is_ok(), "second sweep: {report:?}");
    {
        let (sdk, env, tb) = stack
            .start_threadbox("PauseQueueFunction", &overrides)
            .await;
        let queue = threadbox_lambda::transition_queue(&sdk, &env)
            .unwrap()
            .unwrap();
        let handler =
            pause::TransitionHandler::new(tb).with_settler(BatchSettler::new(Arc::new(queue)));
        send_poison(&stack, &stack.transitions.queue_url).await;
        let event = stack
            .drain(&stack.transitions.queue_url)
            .await
            .expect("the sweep handed transitions to the queue");
        let response = handler.handle(event).await.unwrap();
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }
    let report = Box::pin(janitor.handle(scheduled_now())).await;
    assert!(report.is_ok(), "third sweep: {report:?}");

    // ---- the janitor at pool size 0 drains the members a larger size made.
    if pool {
        let mut drained = overrides.clone();
        drained.push(("THREADBOX_WARM_POOL".into(), "0".into()));
        let (_, env, tb) = stack.start_threadbox("JanitorFunction", &drained).await;
        let janitor = janitor::Janitor::new(tb, janitor::Schedule::from_env(&env).unwrap());
        let report = Box::pin(janitor.handle(scheduled_now())).await;
        assert!(report.is_ok(), "drain: {report:?}");
    }
    if pool {
        assert!(
            stack.made("JanitorFunction", "dynamodb:DeleteItem", &sessions),
            "the janitor never dropped a pool member"
        );
        assert!(
            stack.made("PauseQueueFunction", "dynamodb:DeleteItem", &sessions),
            "pause-queue never destroyed a thread whose sandbox came from the pool"
        );
    }

    // Each path the test means to cover ran: the calls only it makes.
    let dead_letters =
        |queue: &SqsQueueUrls| queue.dead_letter_url.rsplit('/').next().unwrap().to_owned();
    for (function, action, resource) in [
        ("JanitorFunction", "dynamodb:Query", "/index/due".to_owned()),
        (
            "JanitorFunction",
            "sqs:SendMessage",
            stack
                .transitions
                .queue_url
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned(),
        ),
        ("PauseQueueFunction", "dynamodb:PutItem", sessions.clone()),
        (
            "PauseQueueFunction",
            "sqs:SendMessage",
            dead_letters(&stack.transitions),
        ),
        (
            "FanoutFunction",
            "execute-api:ManageConnections",
            "".to_owned(),
        ),
        (
            "FanoutFunction",
            "sqs:SendMessage",
            dead_letters(&stack.lifecycle),
        ),
        (
            "WorkerFunction",
            "sqs:SendMessage",
            dead_letters(&stack.work),
        ),
        (
            "SlackEventsFunction",
            "sqs:SendMessage",
            stack.work.queue_url.rsplit('/').next().unwrap().to_owned(),
        ),
        ("WsFunction", "dynamodb:ConditionCheckItem", "".to_owned()),
        ("FanoutFunction", "dynamodb:BatchWriteItem", "".to_owned()),
        ("WsFunction", "execute-api:ManageConnections", "".to_owned()),
    ] {
        assert!(
            stack.made(function, action, &resource),
            "{function} never made {action} on {resource}"
        );
    }
    // The calls, one line each (shown with --nocapture, or when the check fails).
    for c in stack.calls() {
        println!("{} {} {}", c.function, c.action, c.resource);
    }
    stack.assert_allowed();
}

/// `threadbox dlq` has no role: it runs under the operator's credentials. What it needs is
/// recorded here, through the same adapter calls the command makes, and must be what the
/// dead-letter runbook (docs/aws.md#dead-letter-runbook) tells the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threadbox_dlq_needs_what_the_runbook_says() {
    let test = "threadbox_dlq_needs_what_the_runbook_says";
    let secrets = StackSecrets {
        e2b_api_key: "e2b_unused".into(),
        slack_bot_token: BOT_TOKEN.into(),
        slack_signing_secret: SIGNING_SECRET.into(),
    };
    let Some(stack) = IamStack::new(test, &[], &secrets).await else {
        return;
    };
    send_poison(&stack, &stack.work.dead_letter_url).await;
    let sdk = stack.sdk_recording("threadbox dlq");
    let queue = SqsQueue::from_sdk_config(
        &sdk,
        SqsQueueUrls {
            queue_url: String::new(),
            dead_letter_url: stack.work.dead_letter_url.clone(),
        },
    );
    assert_eq!(queue.dead_letters(10).await.unwrap().len(), 1);
    let queue = SqsQueue::from_sdk_config(&sdk, stack.work.clone());
    assert_eq!(queue.redrive_dead_letters(10).await.unwrap(), 1);

    let name = |url: &str| url.rsplit('/').next().unwrap().to_owned();
    let (queue_name, dlq_name) = (
        name(&stack.work.queue_url),
        name(&stack.work.dead_letter_url),
    );
    let mut made: Vec<(String, String)> = stack
        .calls()
        .into_iter()
        .filter(|c| c.function == "threadbox dlq")
        .map(|c| {
            let which = if c.resource.ends_with(&format!(":{dlq_name}")) {
                "dead-letter queue"
            } else if c.resource.ends_with(&format!(":{queue_name}")) {
                "queue"
            } else {
                panic!("threadbox dlq touched {}", c.resource)
            };
            (c.action, which.to_owned())
        })
        .collect();
    made.sort();
    made.dedup();
    let expected = [
        ("sqs:ChangeMessageVisibility", "dead-letter queue"),
        ("sqs:DeleteMessage", "dead-letter queue"),
        ("sqs:ReceiveMessage", "dead-letter queue"),
        ("sqs:SendMessage", "queue"),
    ];
    assert_eq!(
        made,
        expected.map(|(a, w)| (a.to_owned(), w.to_owned())).to_vec()
    );
    let page = std::fs::read_to_string(repo().join("docs/aws.md")).unwrap();
    let runbook = &page[page.find("\n## Dead-letter runbook\n").unwrap()..];
    let runbook = &runbook[1..];
    let runbook = &runbook[..runbook.find("\n## ").unwrap_or(runbook.len())];
    for (action, _) in expected {
        assert!(
            runbook.contains(&format!("`{action}`")),
            "the runbook does not name {action}"
        );
    }
}

/// The settings the checker's own tests resolve the template with (no AWS endpoint needed).
fn static_settings() -> Value {
    let table = |name: &str| json!({"Ref": name, "Arn": format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}")});
    json!({
        "account": ACCOUNT,
        "region": REGION,
        "parameters": {
            "E2bApiKeySecret": "tb/e2b", "ApiKeysSecret": "tb/api", "SlackSigningSecret": "tb/ss",
            "SlackBotTokenSecret": "tb/bot", "TokenSecret": "tb/token", "WarmPoolSize": "2",
        },
        "resources": {
            "SessionsTable": table("sessions"),
            "EventsTable": table("events"),
            "DedupeTable": table("dedupe"),
            "WorkQueue": {
                "Ref": "https://sqs.us-east-1.amazonaws.com/123456789012/work.fifo",
                "Arn": format!("arn:aws:sqs:{REGION}:{ACCOUNT}:work.fifo"),
            },
        },
    })
}

/// A role missing a grant fails the check by name: the janitor's template with `DeleteItem`
/// on the sessions table taken out denies the warm pool's drain of a member.
#[test]
fn a_removed_grant_fails_naming_the_function_action_and_resource() {
    let test = "a_removed_grant_fails_naming_the_function_action_and_resource";
    let Some((sam, moto)) = checker_pythons(test) else {
        return;
    };
    let sessions = format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/sessions");
    let calls = vec![
        Call {
            function: "JanitorFunction".into(),
            action: "dynamodb:DeleteItem".into(),
            resource: sessions.clone(),
        },
        Call {
            function: "SandboxApiFunction".into(),
            action: "dynamodb:Query".into(),
            resource: format!("{sessions}/index/by_thread"),
        },
        Call {
            function: "SandboxApiFunction".into(),
            action: "secretsmanager:GetSecretValue".into(),
            resource: format!("arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:tb/e2b-AbCdEf"),
        },
    ];
    let template = repo().join("infra/template.yaml");
    let policies = resolve_template(&sam, &template, &static_settings());
    assert_eq!(
        denied_calls(&moto, &policies, &calls),
        Vec::<String>::new(),
        "the template allows these"
    );
    assert_eq!(
        policies["functions"]["WorkerFunction"]["pollers"],
        json!([format!("arn:aws:sqs:{REGION}:{ACCOUNT}:work.fifo")]),
        "the worker's event source mapping is found"
    );

    // The same template with one grant of a function's `Policies:` replaced by another action.
    let text = std::fs::read_to_string(&template).unwrap();
    let without = |function: &str, action: &str| {
        let function_at = text.find(&format!("\n  {function}:")).unwrap();
        let grant_at = function_at + text[function_at..].find(action).unwrap();
        let (before, after) = text.split_at(grant_at);
        let changed = format!("{before}dynamodb:DescribeTable{}", &after[action.len()..]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("template.yaml");
        std::fs::write(&path, changed).unwrap();
        resolve_template(&sam, &path, &static_settings())
    };
    let policies = without("JanitorFunction", "dynamodb:DeleteItem");
    assert_eq!(
        denied_calls(&moto, &policies, &calls),
        vec![format!(
            "DENIED JanitorFunction dynamodb:DeleteItem {sessions}"
        )]
    );
    // Lambda's poller needs the worker's role to receive from the work queue.
    assert_eq!(
        denied_calls(
            &moto,
            &without("WorkerFunction", "sqs:ReceiveMessage"),
            &calls
        ),
        vec![format!(
            "DENIED WorkerFunction sqs:ReceiveMessage arn:aws:sqs:{REGION}:{ACCOUNT}:work.fifo"
        )]
    );

    // A secret by another name that merely starts like the function's own is not its own.
    let other = Call {
        function: "SandboxApiFunction".into(),
        action: "secretsmanager:GetSecretValue".into(),
        resource: format!("arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:tb/e2b-other-AbCdEf"),
    };
    assert_eq!(
        denied_calls(&moto, &policies, std::slice::from_ref(&other)),
        vec![format!(
            "DENIED SandboxApiFunction {} {}",
            other.action, other.resource
        )]
    );
}

/// The recorder's reading of each request: transactions item by item, batches table by table,
/// an index by its own ARN, SQS batches as their single forms, secrets by ARN.
#[test]
fn requests_are_read_as_iam_authorizes_them() {
    use threadbox_tests::iam::authorizations;
    let t = |name: &str| format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}");
    let body = json!({"TransactItems": [
        {"Put": {"TableName": "s"}}, {"Update": {"TableName": "e"}},
        {"ConditionCheck": {"TableName": "s"}}, {"Delete": {"TableName": "s"}},
    ]});
    assert_eq!(
        authorizations(
            Some("DynamoDB_20120810.TransactWriteItems"),
            "POST",
            "/",
            body.to_string().as_bytes()
        ),
        vec![
            ("dynamodb:PutItem".to_owned(), t("s")),
            ("dynamodb:UpdateItem".to_owned(), t("e")),
            ("dynamodb:ConditionCheckItem".to_owned(), t("s")),
            ("dynamodb:DeleteItem".to_owned(), t("s")),
        ]
    );
    let body = json!({"RequestItems": {"a": {}, "b": {}}});
    assert_eq!(
        authorizations(
            Some("DynamoDB_20120810.BatchGetItem"),
            "POST",
            "/",
            body.to_string().as_bytes()
        ),
        vec![
            ("dynamodb:BatchGetItem".to_owned(), t("a")),
            ("dynamodb:BatchGetItem".to_owned(), t("b")),
        ]
    );
    let body = json!({"TableName": "s", "IndexName": "by_thread"});
    assert_eq!(
        authorizations(
            Some("DynamoDB_20120810.Query"),
            "POST",
            "/",
            body.to_string().as_bytes()
        ),
        vec![(
            "dynamodb:Query".to_owned(),
            format!("{}/index/by_thread", t("s"))
        )]
    );
    let body = json!({"QueueUrl": "http://127.0.0.1:5000/123456789012/q.fifo"});
    assert_eq!(
        authorizations(
            Some("AmazonSQS.DeleteMessageBatch"),
            "POST",
            "/",
            body.to_string().as_bytes()
        ),
        vec![(
            "sqs:DeleteMessage".to_owned(),
            format!("arn:aws:sqs:{REGION}:{ACCOUNT}:q.fifo")
        )]
    );
    assert_eq!(
        authorizations(
            None,
            "POST",
            "http://127.0.0.1:1/live/@connections/abc%3D",
            b""
        ),
        vec![(
            "execute-api:ManageConnections".to_owned(),
            format!(
                "arn:aws:execute-api:{REGION}:{ACCOUNT}:wsapi0test/live/POST/@connections/abc%3D"
            )
        )]
    );
}
