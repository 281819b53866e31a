//! Per Lambda function: the release binary's size, and its cold start measured through the Lambda
//! Runtime API, as Lambda itself would see it.
//!
//! For each function a tiny fake Runtime API listens on 127.0.0.1; the function's release binary
//! is started with `AWS_LAMBDA_RUNTIME_API` pointing at it, asks for its first invocation
//! (`GET .../invocation/next`), handles it, and posts the answer (`POST .../response`). Timed from
//! process start: to the first `next` (initialisation: logging, AWS configuration, clients), and
//! to the answer (ready and served). Each function is started `RUNS` times; the medians are shown.
//!
//! The first invocation is what each function would cheaply get first: `GET /healthz` through API
//! Gateway's event for the HTTP functions (no backend call), a scheduled event on a minute that
//! does not reconcile for the janitor (it re-drives and queries due work: 16 DynamoDB queries),
//! the three-record fixture batch for fanout (dedupe reads and writes, Slack status messages),
//! Slack's `url_verification` signed now for slack-events, and one `help` message for the worker
//! (a dedupe claim and a reply). DynamoDB and SQS are moto's server, Slack's Web API is the Slack
//! fake on 127.0.0.1; the E2B provider is configured but never called.
//!
//! Run it with `scripts/bench-lambda.sh`, which builds the release binaries in one cargo
//! invocation and starts moto first. Targets: under 15 MiB and under 50 ms.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use threadbox_slack::SigningSecret;
use threadbox_testing::slack_fake::SlackFake;
use threadbox_tests::aws::{sdk_config, unique_name};
use threadbox_tests::lambda::fixture_json;
use threadbox_tests::lambda::local::LocalResources;

const FUNCTIONS: [&str; 8] = [
    "resolve-session",
    "pause",
    "resume",
    "sandbox-api",
    "janitor",
    "fanout",
    "slack-events",
    "worker",
];
const RUNS: usize = 5;
const SIZE_TARGET_MIB: f64 = 15.0;
const COLD_START_TARGET: Duration = Duration::from_millis(50);
const API_KEY: &str = "bench-api-key-0123456789abcdef0123456789";
const SIGNING_SECRET: &str = "bench-signing-secret";
const BOT_TOKEN: &str = "xoxb-bench";

/// What the fake Runtime API saw, as it happened.
enum Seen {
    Next(Instant),
    Response(Instant, String),
    Error(String),
}

fn release_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap()
                .join("target")
        });
    target.join("release")
}

/// The first event each function gets.
fn first_event(function: &str) -> Value {
    match function {
        "janitor" => {
            let mut event = fixture_json("eventbridge-scheduled.json");
            event["time"] = json!("2023-11-14T22:16:00Z");
            event
        }
        "fanout" => fixture_json("sqs-lifecycle-batch.json"),
        "slack-events" => {
            // Slack's url_verification, signed now (the fixture's signature is for a fixed time).
            let mut event = fixture_json("apigw-http-slack-url-verification.json");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            let body = event["body"].as_str().unwrap().to_owned();
            let secret = SigningSecret::new(SIGNING_SECRET).unwrap();
            event["headers"]["x-slack-request-timestamp"] = json!(now.to_string());
            event["headers"]["x-slack-signature"] = json!(secret.sign(now, body.as_bytes()));
            event
        }
        "worker" => {
            // One `help` in a thread: a dedupe claim, then one reply posted to the Slack fake.
            let mut batch = fixture_json("sqs-work-batch.json");
            let mut record = batch["Records"][2].clone();
            let mut message: Value =
                serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
            message["text"] = json!("help");
            message["event_id"] = json!(unique_name("ev"));
            message["ts"] = json!(format!("{}.000100", std::process::id()));
            record["body"] = json!(message.to_string());
            batch["Records"] = json!([record]);
            batch
        }
        _ => {
            let mut event = fixture_json("apigw-http-resolve.json");
            event["rawPath"] = json!("/healthz");
            event["routeKey"] = json!("GET /healthz");
            event["requestContext"]["http"]["method"] = json!("GET");
            event["requestContext"]["http"]["path"] = json!("/healthz");
            event["requestContext"]["routeKey"] = json!("GET /healthz");
            event["headers"]["authorization"] = json!(format!("Bearer {API_KEY}"));
            event.as_object_mut().unwrap().remove("pathParameters");
            event
        }
    }
}

/// Read one HTTP/1.1 request: (method, path, body). `None` when the client closed.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((method, path, body))
}

fn respond(stream: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

/// Serve one connection of the runtime client: the first `next` gets `event`, later ones are
/// never answered (the process is killed after its first response).
fn serve(
    stream: TcpStream,
    event: Vec<u8>,
    seen: mpsc::Sender<Seen>,
    served: &std::sync::atomic::AtomicBool,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((method, path, body)) = read_request(&mut reader) {
        let now = Instant::now();
        if method == "GET" && path.ends_with("/invocation/next") {
            if served.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(3600));
                return;
            }
            let _ = seen.send(Seen::Next(now));
            let deadline = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                + Duration::from_secs(60);
            respond(
                &mut writer,
                "200 OK",
                &[
                    ("content-type", "application/json".into()),
                    ("lambda-runtime-aws-request-id", "bench-request-1".into()),
                    (
                        "lambda-runtime-deadline-ms",
                        deadline.as_millis().to_string(),
                    ),
                    (
                        "lambda-runtime-invoked-function-arn",
                        "arn:aws:lambda:us-east-1:123456789012:function:bench".into(),
                    ),
                    (
                        "lambda-runtime-trace-id",
                        "Root=1-00000000-000000000000000000000001".into(),
                    ),
                ],
                &event,
            );
        } else if method == "POST" && path.ends_with("/response") {
            let _ = seen.send(Seen::Response(now, String::from_utf8_lossy(&body).into()));
            respond(&mut writer, "202 Accepted", &[], b"{}");
        } else {
            let _ = seen.send(Seen::Error(format!(
                "{method} {path}: {}",
                String::from_utf8_lossy(&body)
            )));
            respond(&mut writer, "202 Accepted", &[], b"{}");
        }
    }
}

/// One cold start: (start to first `next`, start to response), and the response.
fn cold_start(
    binary: &PathBuf,
    function: &str,
    env: &[(String, String)],
) -> Result<(Duration, Duration, String), String> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let event = serde_json::to_vec(&first_event(function)).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let served = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        for stream in listener.incoming().flatten() {
            let (event, tx, served) = (event.clone(), tx.clone(), served.clone());
            std::thread::spawn(move || serve(stream, event, tx, &served));
        }
    });

    let started = Instant::now();
    let mut child = Command::new(binary)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{port}"))
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    let mut next = None;
    let result = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Seen::Next(at)) => next = Some(at - started),
            Ok(Seen::Response(at, body)) => {
                break Ok((next.unwrap_or_default(), at - started, body));
            }
            Ok(Seen::Error(what)) => break Err(format!("{function} reported an error: {what}")),
            Err(_) => break Err(format!("{function} did not answer within 30 s")),
        }
    };
    let _ = child.kill();
    let output = child.wait_with_output();
    result.map_err(|e| {
        let stderr = output
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default();
        format!("{e}\n{stderr}")
    })
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
        eprintln!(
            "lambda_cold_start needs moto's server: run scripts/bench-lambda.sh (or start moto and \
             set AWS_ENDPOINT_URL as scripts/test.sh does)"
        );
        std::process::exit(2);
    }
    let dir = release_dir();
    let missing: Vec<&str> = FUNCTIONS
        .iter()
        .copied()
        .filter(|f| !dir.join(f).exists())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "missing release binaries {missing:?} in {}: build them first, in one invocation:\n  \
             cargo build --release -p {}",
            dir.display(),
            FUNCTIONS.join(" -p ")
        );
        std::process::exit(2);
    }

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let resources = runtime
        .block_on(async {
            LocalResources::create(&sdk_config().await, &unique_name("bench")).await
        })
        .expect("create the tables and queues in moto");
    // Slack's Web API for the worker's reply and fanout's status messages: the fake, on
    // 127.0.0.1, served by this runtime's threads while the functions run.
    let slack = runtime.block_on(SlackFake::start(BOT_TOKEN));
    let mut env: Vec<(String, String)> = resources
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    for (name, value) in [
        ("THREADBOX_PROVIDER", "e2b"),
        ("E2B_API_KEY", "bench-not-a-real-key"),
        // Never called by these invocations; a closed port if it ever were.
        ("E2B_API_URL", "http://127.0.0.1:9"),
        ("THREADBOX_API_KEYS", API_KEY),
        ("SLACK_SIGNING_SECRET", SIGNING_SECRET),
        ("SLACK_BOT_TOKEN", BOT_TOKEN),
        // sandbox-api signs live-events tokens with it.
        (
            "THREADBOX_TOKEN_SECRET",
            "bench-token-secret-of-at-least-32-bytes",
        ),
        ("RUST_LOG", "warn"),
    ] {
        env.push((name.to_owned(), value.to_owned()));
    }
    env.push(("SLACK_API_URL".to_owned(), slack.api_url()));
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        if let Ok(value) = std::env::var(name) {
            env.push((name.to_owned(), value));
        }
    }

    println!(
        "Lambda cold starts: {RUNS} runs per function through a fake Runtime API on 127.0.0.1 \
         (medians; release binaries for this host, {})",
        std::env::consts::ARCH
    );
    println!(
        "{:<16} {:>10} {:>12} {:>14} {:>8}",
        "function", "size MiB", "init ms", "first served", "targets"
    );
    let mut all_met = true;
    for function in FUNCTIONS {
        let binary = dir.join(function);
        let size = std::fs::metadata(&binary).unwrap().len() as f64 / (1024.0 * 1024.0);
        let mut inits = Vec::new();
        let mut served = Vec::new();
        let mut last = String::new();
        for _ in 0..RUNS {
            match cold_start(&binary, function, &env) {
                Ok((init, done, body)) => {
                    inits.push(init);
                    served.push(done);
                    last = body;
                }
                Err(error) => {
                    eprintln!("{error}");
                    std::process::exit(1);
                }
            }
        }
        let (init, done) = (median(inits), median(served));
        let met = size < SIZE_TARGET_MIB && done < COLD_START_TARGET;
        all_met &= met;
        println!(
            "{function:<16} {size:>10.2} {:>12} {:>14} {:>8}",
            ms(init),
            ms(done),
            if met { "met" } else { "MISSED" }
        );
        let shown: String = last.chars().take(160).collect();
        eprintln!("  {function} answered: {shown}");
    }
    println!(
        "targets: binary under {SIZE_TARGET_MIB} MiB, process start to first invocation served \
         under {} ms: {}",
        COLD_START_TARGET.as_millis(),
        if all_met { "all met" } else { "NOT all met" }
    );
}
