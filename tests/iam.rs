//! IAM checked in the tests (features `aws` and `lambda`): every AWS call a function's code makes
//! is recorded with the resource it touches, then evaluated against the policy
//! `infra/template.yaml` gives that function's role.
//!
//! - **Recording.** Each function gets its own [`SdkConfig`], the test stack's with its HTTP
//!   client wrapped: every request is read (DynamoDB, SQS and Secrets Manager all speak JSON
//!   protocols, so `X-Amz-Target` names the operation and the body names the table, index,
//!   queue or secret), turned into the IAM actions and ARNs AWS authorizes it as, and passed on
//!   to moto unchanged. The production wiring (`threadbox_lambda::*`) builds its clients
//!   from that config as it does from `aws_config()`, so nothing in production code knows.
//! - **The policy.** `scripts/iam-check.py policies` (in the Lambda tools' venv, which has the SAM
//!   translator) expands the template as `sam deploy` does and resolves its intrinsic functions
//!   with this stack's parameters, account, region and the physical names of the tables,
//!   queues and secrets the test made on moto. The same output gives each function's
//!   environment, so a test runs a function with the variables the template gives it.
//! - **Evaluation.** `scripts/iam-check.py check` (in moto's venv) runs moto's IAM policy
//!   evaluation on each call with the real ARNs. [`IamStack::assert_allowed`] fails naming each
//!   function, action and resource the template does not allow.
//!
//! IAM's own rules for the multi-item calls are applied here: a `TransactWriteItems` is
//! authorized item by item as `PutItem`, `UpdateItem`, `DeleteItem` or `ConditionCheckItem` on
//! each item's table (there is no IAM action for the transaction itself), a
//! `TransactGetItems` as `GetItem`, and `BatchGetItem` / `BatchWriteItem` once per table they
//! touch; a `Query` or `Scan` on an index needs the `table/T/index/I` ARN; SQS's batch calls are
//! authorized as their single forms.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use serde_json::{json, Value};
use threadbox_aws::dynamo::{
    create_dedupe_table, create_slack_status_table, create_subscriptions_table, create_tables,
    DynamoConfig, DynamoSessionStore,
};
use threadbox_aws::sdk::SdkConfig;
use threadbox_aws::sqs::{create_fifo_queue, SqsQueueUrls};
use threadbox_lambda::{Env, SecretSet};

use crate::aws::{aws_configured, sdk_config, unique_name};
pub use crate::repo;
use aws_lambda_events::sqs::SqsEvent;
use lambda_http::LambdaEvent;
use std::time::Duration;

/// The account and region the template is resolved in, and every recorded ARN names.
pub const ACCOUNT: &str = "123456789012";
pub const REGION: &str = "us-east-1";
/// The WebSocket API's id and stage in the resolved template (`THREADBOX_WS_CALLBACK_URL` is
/// pointed at a local server instead; its calls are recorded against this API).
pub const WS_API_ID: &str = "wsapi0test";
pub const WS_STAGE: &str = "live";

/// The function behind API Gateway, and the streaming function URL's, which runs its code.
const SANDBOX_API: &str = "SandboxApiFunction";
const SANDBOX_STREAM: &str = "SandboxStreamFunction";

/// One authorization AWS would make: the function whose role is asked, the action, the ARN.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    pub function: String,
    pub action: String,
    pub resource: String,
}

/// What one request is authorized as (several for transactions and batches).
pub fn authorizations(
    target: Option<&str>,
    method: &str,
    uri: &str,
    body: &[u8],
) -> Vec<(String, String)> {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let Some(target) = target else {
        return rest_authorizations(method, uri);
    };
    let (service, operation) = target.split_once('.').unwrap_or(("", target));
    let table = |name: &str| format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}");
    let str_of = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    match service {
        s if s.starts_with("DynamoDB_") => {
            let action = |op: &str| format!("dynamodb:{op}");
            match operation {
                "TransactWriteItems" | "TransactGetItems" => body["TransactItems"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|item| item.as_object()?.iter().next())
                    .map(|(kind, spec)| {
                        let op = match kind.as_str() {
                            "Put" => "PutItem",
                            "Update" => "UpdateItem",
                            "Delete" => "DeleteItem",
                            "ConditionCheck" => "ConditionCheckItem",
                            "Get" => "GetItem",
                            other => other,
                        };
                        (action(op), table(&str_of(&spec["TableName"])))
                    })
                    .collect(),
                "BatchGetItem" | "BatchWriteItem" => body["RequestItems"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, _)| (action(operation), table(name)))
                    .collect(),
                _ => {
                    let mut resource = table(&str_of(&body["TableName"]));
                    if let Some(index) = body["IndexName"].as_str() {
                        resource = format!("{resource}/index/{index}");
                    }
                    vec![(action(operation), resource)]
                }
            }
        }
        "AmazonSQS" => {
            let op = match operation {
                "SendMessageBatch" => "SendMessage",
                "DeleteMessageBatch" => "DeleteMessage",
                "ChangeMessageVisibilityBatch" => "ChangeMessageVisibility",
                other => other,
            };
            let name = body["QueueUrl"]
                .as_str()
                .and_then(|url| url.rsplit('/').next())
                .or_else(|| body["QueueName"].as_str())
                .unwrap_or("?");
            vec![(
                format!("sqs:{op}"),
                format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"),
            )]
        }
        "secretsmanager" => {
            let id = str_of(&body["SecretId"]);
            let arn = if id.starts_with("arn:") {
                id
            } else {
                // Secrets Manager names a secret's ARN with six random characters after it.
                format!("arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{id}-AbCdEf")
            };
            vec![(format!("secretsmanager:{operation}"), arn)]
        }
        _ => vec![(format!("unknown:{target}"), "*".to_owned())],
    }
}

/// API Gateway's management API (the `@connections` calls the fan-out and `ws` make) is REST.
fn rest_authorizations(method: &str, uri: &str) -> Vec<(String, String)> {
    let path = uri
        .split_once("://")
        .map_or(uri, |(_, rest)| rest.find('/').map_or("", |i| &rest[i..]));
    let path = path.split('?').next().unwrap_or_default();
    match path.find("/@connections/") {
        Some(at) => vec![(
            "execute-api:ManageConnections".to_owned(),
            format!(
                "arn:aws:execute-api:{REGION}:{ACCOUNT}:{WS_API_ID}/{WS_STAGE}/{method}{}",
                &path[at..]
            ),
        )],
        None => vec![(format!("unknown:{method} {path}"), "*".to_owned())],
    }
}

#[derive(Clone, Debug)]
struct Recorder {
    function: String,
    calls: Arc<Mutex<Vec<Call>>>,
    inner: SharedHttpClient,
}

impl HttpClient for Recorder {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(RecordingConnector {
            function: self.function.clone(),
            calls: self.calls.clone(),
            inner: self.inner.http_connector(settings, components),
        })
    }
}

#[derive(Debug)]
struct RecordingConnector {
    function: String,
    calls: Arc<Mutex<Vec<Call>>>,
    inner: SharedHttpConnector,
}

impl HttpConnector for RecordingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let found = authorizations(
            request.headers().get("x-amz-target"),
            request.method(),
            request.uri(),
            request.body().bytes().unwrap_or_default(),
        );
        self.calls
            .lock()
            .unwrap()
            .extend(found.into_iter().map(|(action, resource)| Call {
                function: self.function.clone(),
                action,
                resource,
            }));
        self.inner.call(request)
    }
}

/// A venv's python: `$var` when set, else `target/<venv>/bin/python` under the repository (or
/// under `CARGO_TARGET_DIR`).
fn venv_python(var: &str, venv: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let mut roots = vec![repo().join("target")];
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        roots.insert(0, PathBuf::from(dir));
    }
    roots
        .into_iter()
        .map(|root| root.join(venv).join("bin/python"))
        .find(|p| p.exists())
}

/// The two interpreters the checker needs: the SAM translator's (`THREADBOX_SAM_PYTHON`, else
/// `target/lambda-venv`) and moto's (`THREADBOX_MOTO_PYTHON`, else `target/moto-venv`).
/// `None` (skip) when one is missing, unless `THREADBOX_REQUIRE_AWS=1` makes that a failure.
pub fn checker_pythons(test: &str) -> Option<(PathBuf, PathBuf)> {
    let sam = venv_python("THREADBOX_SAM_PYTHON", "lambda-venv");
    let moto = venv_python("THREADBOX_MOTO_PYTHON", "moto-venv");
    match (sam, moto) {
        (Some(sam), Some(moto)) => Some((sam, moto)),
        _ if std::env::var("THREADBOX_REQUIRE_AWS").as_deref() == Ok("1") => panic!(
            "THREADBOX_REQUIRE_AWS=1 but the IAM checker's venvs are missing: run \
             ensure_lambda_tools and ensure_moto (scripts/lib.sh), or set THREADBOX_SAM_PYTHON \
             and THREADBOX_MOTO_PYTHON"
        ),
        _ => {
            eprintln!("skipped {test}: target/lambda-venv or target/moto-venv is missing");
            None
        }
    }
}

fn run_script(python: &Path, args: &[&str], stdin: Option<&[u8]>) -> (bool, String, String) {
    let mut child = Command::new(python)
        .arg(repo().join("scripts/iam-check.py"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or_default()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Each function's resolved policies and environment, from `template` (a path) under
/// `settings` (see scripts/iam-check.py).
pub fn resolve_template(sam_python: &Path, template: &Path, settings: &Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let settings_path = dir.path().join("settings.json");
    std::fs::write(&settings_path, settings.to_string()).unwrap();
    let (ok, stdout, stderr) = run_script(
        sam_python,
        &[
            "policies",
            "--template",
            template.to_str().unwrap(),
            "--setting",
            settings_path.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "iam-check.py policies failed:\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The calls `policies` (from [`resolve_template`]) does not allow, one line each:
/// `DENIED <function> <action> <resource>`.
pub fn denied_calls(moto_python: &Path, policies: &Value, calls: &[Call]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policies.json");
    std::fs::write(&path, policies.to_string()).unwrap();
    let calls: Vec<Value> = calls
        .iter()
        .map(|c| json!({"function": c.function, "action": c.action, "resource": c.resource}))
        .collect();
    let input = serde_json::to_vec(&calls).unwrap();
    let (ok, stdout, stderr) = run_script(
        moto_python,
        &["check", "--policies", path.to_str().unwrap()],
        Some(&input),
    );
    let denied: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("DENIED "))
        .map(str::to_owned)
        .collect();
    assert!(
        ok || !denied.is_empty(),
        "iam-check.py check failed:\n{stdout}{stderr}"
    );
    denied
}

/// The secrets the template's parameters name, with their values.
#[derive(Clone, Debug)]
pub struct StackSecrets {
    pub e2b_api_key: String,
    pub slack_bot_token: String,
    pub slack_signing_secret: String,
}

/// The stack of `infra/template.yaml` on moto: every table, queue and secret it declares, under
/// unique names, and the template resolved against them.
pub struct IamStack {
    /// The unrecorded config, for the test's own set-up and inspection.
    pub sdk: SdkConfig,
    pub prefix: String,
    pub lifecycle: SqsQueueUrls,
    pub work: SqsQueueUrls,
    pub transitions: SqsQueueUrls,
    pub sessions_table: String,
    functions: Value,
    settings: Value,
    moto_python: PathBuf,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl IamStack {
    /// Make the stack and resolve the template with `parameters` (besides the secrets' names,
    /// which are this stack's). `None` when the AWS tests or the checker cannot run here.
    pub async fn new(
        test: &str,
        parameters: &[(&str, &str)],
        secrets: &StackSecrets,
    ) -> Option<Self> {
        if !aws_configured(test) {
            return None;
        }
        let (sam_python, moto_python) = checker_pythons(test)?;
        let sdk = sdk_config().await;
        let prefix = unique_name("iam");
        let config = DynamoConfig::new(format!("{prefix}-sessions"), format!("{prefix}-events"));
        let store = DynamoSessionStore::from_sdk_config(&sdk, config.clone());
        let client = store.client();
        create_tables(client, &config).await.unwrap();
        let dedupe = format!("{prefix}-dedupe");
        create_dedupe_table(client, &dedupe).await.unwrap();
        let status = format!("{prefix}-slack-status");
        create_slack_status_table(client, &status).await.unwrap();
        let subscriptions = format!("{prefix}-subscriptions");
        create_subscriptions_table(client, &subscriptions)
            .await
            .unwrap();
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let queue = |kind: &'static str| {
            let (sqs, name) = (sqs.clone(), format!("{prefix}-{kind}"));
            async move { create_fifo_queue(&sqs, &name, 50).await.unwrap() }
        };
        let (lifecycle, work, transitions) = (
            queue("lifecycle").await,
            queue("work").await,
            queue("transition").await,
        );

        let sm = aws_sdk_secretsmanager::Client::new(&sdk);
        let mut secret_names = BTreeMap::new();
        for (parameter, value) in [
            ("E2bApiKeySecret", secrets.e2b_api_key.clone()),
            ("ApiKeysSecret", crate::lambda::FIXTURE_API_KEY.to_owned()),
            ("SlackSigningSecret", secrets.slack_signing_secret.clone()),
            ("SlackBotTokenSecret", secrets.slack_bot_token.clone()),
            (
                "TokenSecret",
                "a-token-secret-of-at-least-32-bytes!!".to_owned(),
            ),
            (
                "EgressCredentialsSecret",
                r#"{"api.github.com": {"Authorization": "Bearer iam-check"}}"#.to_owned(),
            ),
        ] {
            let name = format!("{prefix}/{parameter}");
            sm.create_secret()
                .name(&name)
                .secret_string(value)
                .send()
                .await
                .unwrap();
            secret_names.insert(parameter.to_owned(), Value::from(name));
        }
        let mut all_parameters = secret_names;
        for (k, v) in parameters {
            all_parameters.insert((*k).to_owned(), Value::from(*v));
        }

        let table = |name: &str| json!({"Ref": name, "Arn": format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}")});
        let queue_json = |url: &str| {
            let name = url.rsplit('/').next().unwrap();
            json!({"Ref": url, "Arn": format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")})
        };
        let settings = json!({
            "account": ACCOUNT,
            "region": REGION,
            "parameters": all_parameters,
            "resources": {
                "SessionsTable": table(&config.sessions_table),
                "EventsTable": table(&config.events_table),
                "DedupeTable": table(&dedupe),
                "SlackStatusTable": table(&status),
                "SubscriptionsTable": table(&subscriptions),
                "LifecycleQueue": queue_json(&lifecycle.queue_url),
                "LifecycleDeadLetterQueue": queue_json(&lifecycle.dead_letter_url),
                "WorkQueue": queue_json(&work.queue_url),
                "WorkDeadLetterQueue": queue_json(&work.dead_letter_url),
                "TransitionQueue": queue_json(&transitions.queue_url),
                "TransitionDeadLetterQueue": queue_json(&transitions.dead_letter_url),
                "WebSocketApi": {"Ref": WS_API_ID},
            },
        });
        let functions =
            resolve_template(&sam_python, &repo().join("infra/template.yaml"), &settings);
        Some(Self {
            sdk,
            prefix,
            lifecycle,
            work,
            transitions,
            sessions_table: config.sessions_table,
            functions,
            settings,
            moto_python,
            calls: Arc::default(),
        })
    }

    /// The settings the template was resolved with (for checking another template).
    pub fn settings(&self) -> &Value {
        &self.settings
    }

    /// The SDK config `function` (a logical id) builds its clients from: this stack's, with
    /// every call recorded against that function.
    pub fn sdk_for(&self, function: &str) -> SdkConfig {
        assert!(
            self.functions["functions"].get(function).is_some(),
            "no function {function} in the template"
        );
        self.sdk_recording(function)
    }

    /// An SDK config whose calls are recorded under `label`, which need not be a function of
    /// the template (the operator CLI runs under the operator's own credentials).
    pub fn sdk_recording(&self, label: &str) -> SdkConfig {
        let inner = self.sdk.http_client().expect("the SDK config has a client");
        self.sdk
            .to_builder()
            .http_client(Recorder {
                function: label.to_owned(),
                calls: self.calls.clone(),
                inner,
            })
            .build()
    }

    /// The environment the template gives `function`, with `overrides` on top (the fakes'
    /// URLs, which production leaves at their defaults).
    pub fn env_for(&self, function: &str, overrides: &[(String, String)]) -> Env {
        let variables = self.functions["functions"][function]["environment"]
            .as_object()
            .unwrap_or_else(|| panic!("no function {function} in the template"));
        let mut pairs: BTreeMap<String, String> = variables
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        for (k, v) in overrides {
            pairs.insert(k.clone(), v.clone());
        }
        let borrowed: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Env::from_pairs(&borrowed)
    }

    /// What a function's `main` does first: its recorded SDK config, its environment, and its
    /// secrets fetched by reference (so the fetch is checked too).
    pub async fn start(
        &self,
        function: &str,
        overrides: &[(String, String)],
    ) -> (SdkConfig, Env, Arc<SecretSet>) {
        let sdk = self.sdk_for(function);
        let base = self.env_for(function, overrides);
        let secrets = SecretSet::fetch(&sdk, &base)
            .await
            .unwrap_or_else(|e| panic!("{function}'s secrets: {e}"));
        let env = secrets.env_over(self.env_for(function, overrides));
        (sdk, env, secrets)
    }

    /// `start`, and the use cases `function` wires from what it was given, as its Lambda does.
    pub async fn start_threadbox(
        &self,
        function: &str,
        overrides: &[(String, String)],
    ) -> (SdkConfig, Env, threadbox_core::usecases::Threadbox) {
        let (sdk, env, secrets) = self.start(function, overrides).await;
        let tb = threadbox_lambda::threadbox(&sdk, &env, &secrets)
            .await
            .unwrap_or_else(|e| panic!("{function}'s wiring: {e}"));
        (sdk, env, tb)
    }

    /// What the queue holds now, as the SQS event Lambda's poller would hand the consumer.
    pub async fn drain(&self, queue_url: &str) -> Option<LambdaEvent<SqsEvent>> {
        let sqs = aws_sdk_sqs::Client::new(&self.sdk);
        let name = queue_url.rsplit('/').next().unwrap();
        let mut records = Vec::new();
        loop {
            let out = sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
                .send()
                .await
                .unwrap();
            let messages = out.messages.unwrap_or_default();
            if messages.is_empty() {
                break;
            }
            for m in messages {
                let attributes: serde_json::Map<String, Value> = m
                    .attributes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                    .collect();
                records.push(json!({
                    "messageId": m.message_id,
                    "receiptHandle": m.receipt_handle,
                    "body": m.body,
                    "attributes": attributes,
                    "messageAttributes": {},
                    "eventSource": "aws:sqs",
                    "eventSourceARN": format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"),
                    "awsRegion": REGION,
                }));
            }
        }
        if records.is_empty() {
            return None;
        }
        let event: SqsEvent = serde_json::from_value(json!({ "Records": records })).unwrap();
        Some(LambdaEvent::new(
            event,
            crate::lambda::context_with_deadline(Duration::from_secs(120)),
        ))
    }

    /// Every call recorded so far.
    pub fn calls(&self) -> Vec<Call> {
        let mut calls = self.calls.lock().unwrap().clone();
        calls.sort();
        calls.dedup();
        calls
    }

    /// Whether `function` made `action` on a resource ending with `resource_suffix`: a test's
    /// proof that the path it meant to cover ran.
    pub fn made(&self, function: &str, action: &str, resource_suffix: &str) -> bool {
        self.calls().iter().any(|c| {
            c.function == function && c.action == action && c.resource.ends_with(resource_suffix)
        })
    }

    /// Fail, naming each function, action and resource, when the template does not allow a
    /// recorded call.
    pub fn assert_allowed(&self) {
        let mut calls = self.calls();
        assert!(!calls.is_empty(), "no AWS call was recorded");
        // The streaming function is the same binary and router as sandbox-api in another
        // invoke mode (`THREADBOX_INVOKE_MODE`): every call sandbox-api made, its role must
        // allow too.
        let streamed: Vec<Call> = calls
            .iter()
            .filter(|c| c.function == SANDBOX_API)
            .map(|c| Call {
                function: SANDBOX_STREAM.into(),
                ..c.clone()
            })
            .collect();
        assert!(!streamed.is_empty(), "sandbox-api made no AWS call");
        calls.extend(streamed);
        let denied = denied_calls(&self.moto_python, &self.functions, &calls);
        assert!(
            denied.is_empty(),
            "infra/template.yaml does not allow {} of the {} calls the functions made:\n{}",
            denied.len(),
            calls.len(),
            denied.join("\n")
        );
    }

    /// The moto venv's python (for checking a changed template against the same calls).
    pub fn moto_python(&self) -> &Path {
        &self.moto_python
    }
}
