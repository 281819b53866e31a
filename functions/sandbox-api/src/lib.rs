//! sandbox-api: commands and files in a thread's sandbox, creating or resuming it as needed.
//!
//! Serves `POST /v1/threads/{id}/exec` and `GET/PUT/DELETE /v1/threads/{id}/files/{path}`, the
//! same operations as MCP tools at `POST /v1/threads/{id}/mcp` (streamable HTTP, stateless: each
//! POST answered on its own as JSON, which suits Lambda's buffered responses), and
//! `POST /v1/tokens`, which mints live-events tokens for the WebSocket API: it takes the same API
//! key as running commands, and an agent that runs commands is who subscribes to their events.
//! Binary file bodies cross API Gateway base64-encoded both ways (`lambda_http` decodes the
//! request and encodes non-text responses). Two limits of the path through API Gateway, stricter
//! than the router's own: a request or response of at most 6 MB (Lambda's synchronous payload
//! limit) and an answer within 30 s (the HTTP API's integration timeout), so long commands and
//! big files belong to the worker and to direct provider access, not this route.
//!
//! The same binary also runs behind a function URL with `InvokeMode: RESPONSE_STREAM`
//! (`THREADBOX_INVOKE_MODE=RESPONSE_STREAM`, the template's `SandboxStreamFunction`): there the
//! answers stream, so server-sent events (exec, a process's output followed) reach the client as
//! they happen; behind API Gateway such a request is refused at once with 406
//! `stream_elsewhere`, naming that URL (`THREADBOX_STREAM_URL`). See `lambda::HttpMode`.
//!
//! E2B's API (`threadbox-e2b-api`, docs/e2b-api.md) is merged in under `/e2b`: its control plane
//! is routed here by API Gateway, and envd (whose `process.Process/Start` streams a command's
//! output) is reached through the streaming URL, which serves every path of the same router:
//! `E2B_API_URL` is the API's URL and `E2B_SANDBOX_URL` the stream URL, each with `/e2b`.

use axum::{Extension, Router};
use threadbox_api::http::{router_for, ApiAuth, RouteGroup};
use threadbox_api::live::token_routes;
use threadbox_api::live::TokenKey;
use threadbox_core::usecases::Threadbox;
use threadbox_e2b_api::E2bApi;
use threadbox_lambda::{Setup, SetupError, GATEWAY_EXEC_LIMIT};
use threadbox_mcp::ExecLimit;

/// The route groups this function serves.
pub const ROUTES: &[RouteGroup] = &[RouteGroup::Sandbox];

/// The handler: the shared router restricted to [`ROUTES`], plus the token route signed with
/// `tokens` (the WebSocket function verifies with the same secret). MCP commands are held to
/// [`GATEWAY_EXEC_LIMIT`] (the exec route's limit is `lambda::for_api_gateway`'s).
pub fn app(tb: Threadbox, auth: ApiAuth, tokens: TokenKey) -> Router {
    let clock = tb.clock.clone();
    let e2b = E2bApi::new(tb.clone(), auth.clone(), tokens.clone());
    router_for(tb.clone(), auth.clone(), ROUTES)
        .merge(threadbox_e2b_api::routes(e2b))
        .merge(token_routes(tokens, clock, auth.clone()))
        .merge(threadbox_mcp::routes(tb, auth))
        // The MCP endpoint's commands must end within the gateway's wait, as exec's do.
        .layer(Extension(ExecLimit(GATEWAY_EXEC_LIMIT)))
}

/// What `main` serves: [`app`] over the use cases, the API keys and the token key from the
/// environment.
pub async fn build(setup: Setup) -> Result<Router, SetupError> {
    let tb = threadbox_lambda::threadbox(&setup.sdk, &setup.env, &setup.secrets).await?;
    let auth = threadbox_lambda::api_auth(&setup.env)?;
    Ok(app(tb, auth, threadbox_lambda::token_key(&setup.env)?))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use threadbox_tests::lambda::{fixture_json, invoke_http, LocalThreadbox};

    use super::*;

    fn token_key() -> TokenKey {
        TokenKey::new(
            threadbox_api::live::TokenSecret::new("a-test-secret-of-at-least-32-bytes!!").unwrap(),
        )
    }

    fn local() -> (LocalThreadbox, Router) {
        let local = LocalThreadbox::new();
        let router = app(local.tb.clone(), LocalThreadbox::auth(), token_key());
        (local, router)
    }

    #[tokio::test]
    async fn the_exec_event_runs_the_command_from_its_json_body() {
        let (local, router) = local();
        let answer = invoke_http(router, &fixture_json("apigw-http-exec.json")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        let result = answer.json();
        assert_eq!(result["exit_code"], 0);
        // The in-memory provider echoes the command line it ran.
        assert_eq!(result["stdout"], "echo hello from lambda");
        assert_eq!(local.provider.creates(), 1, "first use creates the sandbox");
    }

    #[tokio::test]
    async fn a_malformed_body_is_a_400_that_says_what_is_wrong() {
        let (local, router) = local();
        let answer = invoke_http(
            router.clone(),
            &fixture_json("apigw-http-exec-malformed.json"),
        )
        .await;
        assert_eq!(answer.status, 400);
        assert_eq!(answer.error_code(), "invalid_json");
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains("malformed JSON body"), "{message}");

        let mut wrong_shape = fixture_json("apigw-http-exec.json");
        wrong_shape["body"] = Value::from(r#"{"cmd": "ls", "argv": ["ls"]}"#);
        let answer = invoke_http(router.clone(), &wrong_shape).await;
        assert_eq!(answer.status, 400);
        assert_eq!(answer.error_code(), "invalid_request");

        let mut untyped = fixture_json("apigw-http-exec.json");
        untyped["headers"]
            .as_object_mut()
            .unwrap()
            .remove("content-type");
        let answer = invoke_http(router, &untyped).await;
        assert_eq!(answer.status, 415);
        assert_eq!(local.provider.creates(), 0, "bad input changes nothing");
    }

    /// The MCP endpoint through API Gateway's event: a tool call answered as one JSON body, with
    /// no session, behind the API key.
    #[tokio::test]
    async fn the_mcp_event_calls_a_tool_and_answers_json() {
        let (local, router) = local();
        let mut event = fixture_json("apigw-http-exec.json");
        event["rawPath"] = Value::from("/v1/threads/agent-42/mcp");
        event["routeKey"] = Value::from("POST /v1/threads/{thread_id}/mcp");
        event["requestContext"]["http"]["path"] = Value::from("/v1/threads/agent-42/mcp");
        event["requestContext"]["routeKey"] = Value::from("POST /v1/threads/{thread_id}/mcp");
        let headers = event["headers"].as_object_mut().unwrap();
        headers.remove("content-length");
        headers.insert(
            "accept".into(),
            Value::from("application/json, text/event-stream"),
        );
        headers.insert("mcp-protocol-version".into(), Value::from("2025-06-18"));
        let call = serde_json::json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"command": "echo from mcp"}},
        });
        event["body"] = Value::from(call.to_string());
        let answer = invoke_http(router.clone(), &event).await;
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        assert!(
            answer
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{:?}",
            answer.headers
        );
        assert!(answer.header("mcp-session-id").is_none(), "stateless");
        let result = &answer.json()["result"];
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["structuredContent"]["stdout"], "echo from mcp");
        assert_eq!(local.provider.creates(), 1, "first use creates the sandbox");

        // A command longer than the gateway can wait for is a tool error naming the limit.
        let long = serde_json::json!({
            "jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "run_command",
                       "arguments": {"command": "sleep 40", "timeout_seconds": 60}},
        });
        let mut long_event = event.clone();
        long_event["body"] = Value::from(long.to_string());
        let answer = invoke_http(router.clone(), &long_event).await;
        let result = &answer.json()["result"];
        assert_eq!(result["isError"], true, "{result}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("exec_timeout_over_gateway_limit"), "{text}");

        event["headers"]
            .as_object_mut()
            .unwrap()
            .remove("authorization");
        let answer = invoke_http(router, &event).await;
        assert_eq!(answer.status, 401, "the same API key as the rest of /v1");
    }

    #[tokio::test]
    async fn a_binary_file_round_trips_through_base64() {
        let (_local, router) = local();
        let put = invoke_http(router.clone(), &fixture_json("apigw-http-file-put.json")).await;
        assert_eq!(put.status, 200, "{:?}", put.json());
        assert_eq!(put.json()["path"], "/home/user/notes/data.bin");

        let expected: Vec<u8> = [&[0u8, 1, 2, 255, 254, 10][..], b"threadbox"].concat();
        assert_eq!(put.json()["size"], expected.len());
        let get = invoke_http(router, &fixture_json("apigw-http-file-get.json")).await;
        assert_eq!(get.status, 200);
        assert!(
            get.base64_encoded,
            "binary answers are base64 for API Gateway"
        );
        assert_eq!(get.header("content-type"), Some("application/octet-stream"));
        assert_eq!(get.body, expected);
    }

    #[tokio::test]
    async fn path_traversal_is_refused_before_the_sandbox_is_touched() {
        let (local, router) = local();
        // Plain `..` segments never reach the router: `lambda_http` builds the request URI with
        // URL parsing, which resolves dot segments (as clients and API Gateway do). Encoded
        // slashes survive that, are decoded into the file path, and are caught there.
        let mut event = fixture_json("apigw-http-file-get.json");
        event["rawPath"] =
            Value::from("/v1/threads/agent-42/files/home/user/..%2F..%2Fetc%2Fpasswd");
        let answer = invoke_http(router, &event).await;
        assert_eq!(answer.status, 400);
        assert_eq!(answer.error_code(), "invalid_path");
        assert_eq!(local.provider.creates(), 0);
    }

    #[tokio::test]
    async fn the_token_event_mints_a_token_the_websocket_side_accepts() {
        let (local, router) = local();
        let answer = invoke_http(router.clone(), &fixture_json("apigw-http-tokens.json")).await;
        assert_eq!(answer.status, 201, "{:?}", answer.json());
        let token = answer.json()["token"].as_str().unwrap().to_owned();
        let claims = token_key()
            .verify(&token, local.tb.clock.now())
            .expect("the minted token verifies with the same secret");
        let thread = threadbox_core::domain::ThreadId::parse("agent-42").unwrap();
        assert!(claims.scope.allows(&thread), "{claims:?}");

        let mut keyless = fixture_json("apigw-http-tokens.json");
        keyless["headers"]
            .as_object_mut()
            .unwrap()
            .remove("authorization");
        let answer = invoke_http(router, &keyless).await;
        assert_eq!(answer.status, 401, "minting needs the API key");
    }
    /// Behind API Gateway an exec whose timeout the gateway cannot wait for is refused in
    /// threadbox's shape, naming the limit and what to do instead, and nothing runs; one with a
    /// timeout inside the limit runs. `threadbox dev`'s router (without the gateway's limits)
    /// keeps its 10 minutes.
    #[tokio::test]
    async fn an_exec_timeout_over_the_gateways_limit_is_a_400_naming_it() {
        use threadbox_lambda::for_api_gateway;

        let (local, router) = local();
        let mut long = fixture_json("apigw-http-exec.json");
        long["body"] = Value::from(r#"{"cmd": "sleep 40", "timeout_ms": 60000}"#);
        let answer = invoke_http(for_api_gateway(router.clone()), &long).await;
        assert_eq!(answer.status, 400, "{:?}", answer.json());
        assert_eq!(answer.error_code(), "exec_timeout_over_gateway_limit");
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains("25000") && message.contains("background"),
            "{message}"
        );
        assert_eq!(local.provider.creates(), 0, "nothing ran");

        let answer = invoke_http(
            for_api_gateway(router.clone()),
            &fixture_json("apigw-http-exec.json"),
        )
        .await;
        assert_eq!(answer.status, 200, "5 s fits: {:?}", answer.json());

        // No timeout given: the gateway's limit becomes it, and the command runs.
        let mut untimed = fixture_json("apigw-http-exec.json");
        untimed["body"] = Value::from(r#"{"cmd": "echo untimed"}"#);
        let answer = invoke_http(for_api_gateway(router.clone()), &untimed).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        assert_eq!(answer.json()["stdout"], "echo untimed");

        // The local router keeps its own limits.
        let answer = invoke_http(router, &long).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
    }

    /// Behind API Gateway (which holds a function's answer until it ends, and answers 503
    /// after 30 s), a request that asks to stream is refused at once with 406, naming the same
    /// request at the stack's stream URL; nothing runs. Without one, the 406 says how to read
    /// without streaming. JSON execs and the MCP endpoint (whose clients accept event streams
    /// but are answered JSON) go on as before.
    #[tokio::test]
    async fn a_streaming_request_through_api_gateway_is_a_prompt_406_naming_the_stream_url() {
        use threadbox_lambda::for_api_gateway_streaming_at;

        let (local, router) = local();
        let base = "https://abc123.lambda-url.us-east-1.on.aws";
        let gateway = for_api_gateway_streaming_at(router.clone(), Some(base.into()));

        let streaming_exec = fixture_json("apigw-http-exec-stream.json");
        let answer = invoke_http(gateway.clone(), &streaming_exec).await;
        assert_eq!(answer.status, 406, "{:?}", answer.json());
        assert_eq!(answer.error_code(), "stream_elsewhere");
        let url = format!("{base}/v1/threads/agent-stream/exec");
        assert_eq!(answer.json()["error"]["stream_url"], url.as_str());
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains(&url), "{message}");

        // Following a process's output: the query goes along.
        let mut follow = fixture_json("apigw-http-exec-stream.json");
        follow["requestContext"]["http"]["method"] = Value::from("GET");
        follow["rawPath"] = Value::from("/v1/threads/agent-stream/processes/p1/output");
        follow["rawQueryString"] = Value::from("after=42");
        follow["body"] = Value::Null;
        let headers = follow["headers"].as_object_mut().unwrap();
        headers.remove("content-length");
        headers.remove("content-type");
        headers.insert(
            "accept".into(),
            Value::from("application/json;q=0.5, Text/Event-Stream"),
        );
        let answer = invoke_http(gateway.clone(), &follow).await;
        assert_eq!(answer.status, 406, "{:?}", answer.json());
        assert_eq!(
            answer.json()["error"]["stream_url"],
            format!("{base}/v1/threads/agent-stream/processes/p1/output?after=42").as_str()
        );

        // A stack without a stream URL still answers at once, saying how to read instead.
        let answer = invoke_http(
            for_api_gateway_streaming_at(router.clone(), None),
            &streaming_exec,
        )
        .await;
        assert_eq!(answer.status, 406);
        assert_eq!(answer.error_code(), "streaming_unavailable");
        assert!(answer.json()["error"].get("stream_url").is_none());
        assert_eq!(local.provider.creates(), 0, "nothing ran");

        // The same exec asking for JSON runs here.
        let mut json_exec = fixture_json("apigw-http-exec.json");
        json_exec["body"] = Value::from(r#"{"cmd": "echo buffered"}"#);
        json_exec["headers"]
            .as_object_mut()
            .unwrap()
            .remove("content-length");
        let answer = invoke_http(gateway.clone(), &json_exec).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        assert_eq!(answer.json()["stdout"], "echo buffered");

        // MCP clients send `Accept: application/json, text/event-stream`; it answers JSON here.
        let mut mcp = json_exec.clone();
        mcp["rawPath"] = Value::from("/v1/threads/agent-42/mcp");
        let headers = mcp["headers"].as_object_mut().unwrap();
        headers.insert(
            "accept".into(),
            Value::from("application/json, text/event-stream"),
        );
        headers.insert("mcp-protocol-version".into(), Value::from("2025-06-18"));
        mcp["body"] = Value::from(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
        );
        let answer = invoke_http(gateway, &mcp).await;
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
    }

    /// A file read whose answer Lambda could not return (over 6 MB once base64-encoded) is
    /// threadbox's 413 naming the limit, not the gateway's bare error; a smaller one passes.
    #[tokio::test]
    async fn a_file_over_the_lambda_payload_limit_is_threadboxs_413() {
        use threadbox_lambda::for_api_gateway;

        let (local, router) = local();
        let thread = threadbox_core::domain::ThreadId::parse("agent-42").unwrap();
        local.tb.resolve(&thread).await.unwrap();
        let path = "/home/user/notes/data.bin";
        local
            .tb
            .write_file(&thread, path, &vec![7u8; 4_600_000])
            .await
            .unwrap();
        let answer = invoke_http(
            for_api_gateway(router.clone()),
            &fixture_json("apigw-http-file-get.json"),
        )
        .await;
        assert_eq!(answer.status, 413);
        assert_eq!(answer.error_code(), "payload_too_large");
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains("6 MB"), "{message}");

        local
            .tb
            .write_file(&thread, path, &vec![7u8; 4_000_000])
            .await
            .unwrap();
        let answer = invoke_http(
            for_api_gateway(router),
            &fixture_json("apigw-http-file-get.json"),
        )
        .await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body.len(), 4_000_000);
    }
}
