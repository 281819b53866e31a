//! The SAM template checked against the code and docs/aws.md, so a route cannot work locally and
//! 404 on AWS, and the deploy steps cannot drift from the parameters the stack needs.
//!
//! Both files are read as text: the template's `HttpApi` events (`Method:` and `Path:` lines) and
//! `Parameters:` block, the router's `.route("…", get(…).post(…))` calls in the shared crate's
//! HTTP and Slack modules, and docs/aws.md (running on AWS: its deploy steps and parameter table).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use threadbox_tests::{read_repo_file as read, repo, template_resources as resources};

/// Routes the router serves only in `threadbox dev` (never deployed), with why.
const DEV_ONLY: &[(&str, &str)] = &[
    // The local Slack sink: in production replies go to Slack itself.
    ("GET", "/v1/slack/sink"),
];

/// `(METHOD, path)` of every `HttpApi` event in the template, with API Gateway's `{path+}`
/// written as axum's `{*path}`.
fn template_routes(template: &str) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    let lines: Vec<&str> = template.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "Type: HttpApi" {
            continue;
        }
        let mut method = None;
        let mut path = None;
        for next in lines.iter().skip(i + 1).take(6) {
            let next = next.trim();
            if let Some(m) = next.strip_prefix("Method: ") {
                method = Some(m.trim().to_owned());
            }
            if let Some(p) = next.strip_prefix("Path: ") {
                path = Some(p.trim().replace("{path+}", "{*path}"));
            }
        }
        let (Some(method), Some(path)) = (method, path) else {
            panic!(
                "an HttpApi event without Method and Path near line {}",
                i + 1
            );
        };
        routes.insert((method.to_ascii_uppercase(), path));
    }
    routes
}

/// `(METHOD, path)` of every `.route(...)` in `source`; `consts` resolves paths given by name.
fn router_routes(source: &str, consts: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find(".route(") {
        rest = &rest[at + ".route(".len()..];
        let trimmed = rest.trim_start();
        let (path, after) = if let Some(quoted) = trimmed.strip_prefix('"') {
            let end = quoted.find('"').unwrap();
            (quoted[..end].to_owned(), &quoted[end + 1..])
        } else {
            let end = trimmed.find(',').unwrap();
            let name = trimmed[..end].trim();
            let value = consts
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("route path constant {name} is not known to this test"))
                .1;
            (value.to_owned(), &trimmed[end + 1..])
        };
        // The method routers up to the next builder call.
        let stop = [
            ".route(",
            ".route_layer(",
            ".layer(",
            ".with_state(",
            ".merge(",
            "\n}",
        ]
        .iter()
        .filter_map(|s| after.find(s))
        .min()
        .unwrap_or(after.len());
        let chain = &after[..stop];
        for method in ["get", "post", "put", "delete", "patch"] {
            let first = chain.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
            let bare = first.starts_with(&format!("{method}("));
            if bare || chain.contains(&format!(".{method}(")) {
                routes.insert((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    routes
}

#[test]
fn every_route_of_the_router_is_in_the_template_and_nothing_else_is() {
    let template = template_routes(&read("infra/template.yaml"));
    let mut router = BTreeSet::new();
    let http = repo().join("crates/api/src/http");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&http)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") && !is_test_file(p))
        .collect();
    // Routes that come with their own layer (see `http`'s module docs).
    for routed in [
        "crates/slack/src/ingress.rs",
        "crates/api/src/live/token_route.rs",
        "crates/mcp/src/lib.rs",
    ] {
        sources.push(repo().join(routed));
    }
    for source in &sources {
        let text = std::fs::read_to_string(source).unwrap();
        // Only the code before an inline tests module.
        let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap();
        router.extend(router_routes(
            code,
            &[
                ("EVENTS_PATH", "/slack/events"),
                ("INTERACTIONS_PATH", "/slack/interactions"),
                ("COMMANDS_PATH", "/slack/commands"),
            ],
        ));
    }
    // E2B's control plane, nested under its base path (its envd is served by the streaming URL,
    // not routed by API Gateway: docs/e2b-api.md).
    let e2b = std::fs::read_to_string(repo().join("crates/e2b-api/src/control.rs")).unwrap();
    let code = e2b.split("#[cfg(test)]\nmod tests {").next().unwrap();
    router.extend(
        router_routes(code, &[])
            .into_iter()
            .map(|(method, path)| (method, format!("/e2b{path}"))),
    );
    assert!(
        router.contains(&("POST".into(), "/v1/threads/{thread_id}/exec".into())),
        "the parser found the router's routes: {router:?}"
    );
    let deployed: BTreeSet<_> = router
        .into_iter()
        .filter(|(m, p)| !DEV_ONLY.iter().any(|(dm, dp)| dm == m && dp == p))
        .collect();
    let missing: Vec<_> = deployed.difference(&template).collect();
    let extra: Vec<_> = template.difference(&deployed).collect();
    assert!(
        missing.is_empty(),
        "routes the router serves that the template does not deploy (they would 404 on AWS): {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "routes in the template that the router does not serve: {extra:?}"
    );
}

fn is_test_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
}

/// The template's parameter names, in order.
fn template_parameters(template: &str) -> Vec<String> {
    let block = template
        .split("\nParameters:\n")
        .nth(1)
        .expect("a Parameters block");
    block
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter_map(|l| {
            let name = l.strip_prefix("  ")?.strip_suffix(':')?;
            (!name.starts_with(' ')).then(|| name.to_owned())
        })
        .collect()
}

#[test]
fn the_aws_pages_deploy_steps_match_the_templates_parameters() {
    let template = read("infra/template.yaml");
    let parameters = template_parameters(&template);
    assert!(parameters.len() > 5, "{parameters:?}");
    // The whole page: its secrets steps (under Deploying) and its parameter table (under
    // Parameters) are the only `create-secret` lines and the only `| parameter |` table there.
    let section = read("docs/aws.md");
    let table: Vec<String> = section
        .lines()
        .skip_while(|l| !l.starts_with("| parameter |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(str::to_owned)
        .collect();
    let documented: Vec<String> = table
        .iter()
        .filter_map(|row| {
            let cell = row.split('|').nth(1)?.trim();
            Some(cell.trim_matches('`').to_owned())
        })
        .collect();
    assert_eq!(
        documented.iter().collect::<BTreeSet<_>>(),
        parameters.iter().collect::<BTreeSet<_>>(),
        "docs/aws.md's parameter table and the template's parameters differ"
    );

    // Every secret the template asks for is created by the page's steps, under the name the
    // table gives for it.
    let created: BTreeSet<&str> = section
        .lines()
        .filter_map(|l| l.split("create-secret --name ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    let secrets: Vec<&String> = parameters
        .iter()
        .filter(|p| p.ends_with("Secret"))
        .collect();
    assert_eq!(
        created.len(),
        secrets.len(),
        "one create-secret step per secret parameter: {created:?} vs {secrets:?}"
    );
    for secret in secrets {
        let row = table
            .iter()
            .find(|r| r.contains(&format!("`{secret}`")))
            .unwrap();
        assert!(
            created
                .iter()
                .any(|name| row.contains(&format!("`{name}`"))),
            "docs/aws.md's row for {secret} names none of the secrets its steps create: {row}"
        );
    }
}

fn of_type<'a>(resources: &'a [(String, String)], kind: &str) -> Vec<&'a (String, String)> {
    let line = format!("    Type: {kind}\n");
    resources
        .iter()
        .filter(|(_, b)| b.starts_with(&line))
        .collect()
}

#[test]
fn every_function_and_queue_has_an_alarm_and_every_alarm_reaches_the_topic() {
    let template = read("infra/template.yaml");
    let resources = resources(&template);
    let alarms = of_type(&resources, "AWS::CloudWatch::Alarm");
    let watching = |needles: &[String]| {
        alarms
            .iter()
            .filter(|(_, block)| needles.iter().all(|n| block.contains(n.as_str())))
            .map(|(name, _)| name.clone())
            .collect::<Vec<_>>()
    };

    let functions = of_type(&resources, "AWS::Serverless::Function");
    assert!(functions.len() >= 10, "{functions:?}");
    for (function, _) in functions {
        let found = watching(&[
            "MetricName: Errors".into(),
            "MetricName: Throttles".into(),
            format!("Value: !Ref {function}\n"),
        ]);
        assert!(
            !found.is_empty(),
            "{function} has no alarm on its Errors and Throttles"
        );
    }
    let queues = of_type(&resources, "AWS::SQS::Queue");
    assert!(queues.len() >= 6, "{queues:?}");
    for (queue, _) in queues {
        // A dead-letter queue alarms on anything in it; a working queue on its oldest message.
        let metric = if queue.contains("DeadLetter") {
            "MetricName: ApproximateNumberOfMessagesVisible"
        } else {
            "MetricName: ApproximateAgeOfOldestMessage"
        };
        let found = watching(&[metric.into(), format!("!GetAtt {queue}.QueueName\n")]);
        assert!(!found.is_empty(), "{queue} has no alarm on {metric}");
    }
    assert!(
        !watching(&["MetricName: 5xx".into(), "Value: !Ref HttpApi\n".into()]).is_empty(),
        "the HTTP API's server errors have no alarm"
    );

    let action = "AlarmActions: [!If [HasAlarmTopic, !Ref AlarmTopicArn, !Ref AlarmTopic]]";
    for (alarm, block) in &alarms {
        assert!(
            block.contains(action),
            "{alarm} does not notify the alarm topic"
        );
    }
    assert!(
        template
            .contains("  AlarmTopic:\n    Type: AWS::SNS::Topic\n    Condition: MakesAlarmTopic\n"),
        "without AlarmTopicArn the stack makes the topic the alarms notify"
    );
}

#[test]
fn the_functions_that_must_always_run_have_reserved_concurrency_within_an_accounts_default() {
    let template = read("infra/template.yaml");
    let resources = resources(&template);
    let default_of = |parameter: &str| -> u32 {
        let block = template
            .split_once(&format!("\n  {parameter}:\n"))
            .unwrap_or_else(|| panic!("no parameter {parameter}"))
            .1;
        block
            .lines()
            .find_map(|l| l.trim().strip_prefix("Default: "))
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut reserved = 0;
    for (function, parameter) in [
        ("SlackEventsFunction", "SlackEventsConcurrency"),
        ("WsFunction", "WsConcurrency"),
        ("JanitorFunction", "JanitorConcurrency"),
        ("SandboxApiFunction", "SandboxApiConcurrency"),
        ("SandboxStreamFunction", "SandboxStreamConcurrency"),
    ] {
        let (_, block) = resources.iter().find(|(n, _)| n == function).unwrap();
        let reserves = block.lines().map(str::trim).any(|l| {
            l.starts_with("ReservedConcurrentExecutions: !If [")
                && l.ends_with(&format!(", !Ref {parameter}, !Ref AWS::NoValue]"))
        });
        assert!(
            reserves,
            "{function} reserves no concurrency from {parameter}"
        );
        reserved += default_of(parameter);
    }
    // AWS keeps 100 of an account's default 1,000 unreserved, and the other six functions need
    // room of their own.
    assert!(
        reserved <= 500,
        "the defaults reserve {reserved} of an account's default 1,000"
    );
}

/// The seconds of `pub const {name}: Duration = Duration::from_secs(a * b ...);` in `source`.
fn duration_const_secs(source: &str, name: &str) -> u64 {
    let declared = format!("pub const {name}: Duration = Duration::from_secs(");
    let rest = source
        .split_once(&declared)
        .unwrap_or_else(|| panic!("no {name} declared as this test reads it"))
        .1;
    let expression = rest.split_once(");").unwrap().0;
    expression
        .split('*')
        .map(|factor| factor.trim().replace('_', "").parse::<u64>().unwrap())
        .product()
}

/// The indented block under `key:` in a resource's block (the key's line excluded).
fn property<'a>(block: &'a str, key: &str) -> &'a str {
    let line = block
        .lines()
        .find(|l| l.trim() == format!("{key}:"))
        .unwrap_or_else(|| panic!("no {key}: in\n{block}"));
    let indent = line.len() - line.trim_start().len();
    let start = block.find(line).unwrap() + line.len() + 1;
    let rest = &block[start..];
    let end = rest
        .lines()
        .scan(0, |at, l| {
            let here = *at;
            *at += l.len() + 1;
            Some((here, l))
        })
        .find(|(_, l)| !l.trim().is_empty() && l.len() - l.trim_start().len() <= indent)
        .map_or(rest.len(), |(at, _)| at);
    rest[..end].trim_end()
}

/// Live output reaches clients of the deployed stack: API Gateway's HTTP API buffers answers, so
/// the streaming routes go through SandboxStreamFunction's function URL, in the streaming invoke
/// mode on both sides (the URL's and the binary's), authenticated by the app's own API keys,
/// with the sandbox-api build and role, a cap of its own and a timeout past the longest stream.
#[test]
fn the_stream_function_serves_sandbox_api_through_a_streaming_url_with_its_keys_and_role() {
    let template = read("infra/template.yaml");
    let resources = resources(&template);
    let block = |name: &str| {
        resources
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no resource {name}"))
            .1
            .clone()
    };
    let stream = block("SandboxStreamFunction");
    let api = block("SandboxApiFunction");

    let url = property(&stream, "FunctionUrlConfig");
    let settings: BTreeSet<&str> = url.lines().map(str::trim).collect();
    assert_eq!(
        settings,
        BTreeSet::from(["AuthType: NONE", "InvokeMode: RESPONSE_STREAM"]),
        "a streaming URL whose callers the app authenticates (no CORS: API clients, not pages)"
    );
    let variables = property(&stream, "Variables");
    assert!(
        variables.contains("THREADBOX_INVOKE_MODE: RESPONSE_STREAM"),
        "the binary streams too: {variables}"
    );
    // AuthType NONE is safe only because every request meets the API's own keys.
    for line in [
        "THREADBOX_API_KEYS_SECRET_ID: !Ref ApiKeysSecret",
        "THREADBOX_TOKEN_SECRET_SECRET_ID: !Ref TokenSecret",
        "E2B_API_KEY_SECRET_ID: !Ref E2bApiKeySecret",
    ] {
        assert!(variables.contains(line), "{line} missing: {variables}");
        assert!(api.contains(line), "sandbox-api has no {line}");
    }

    // The same build (SAM builds a CodeUri and Metadata once) and the same role.
    for key in ["Metadata", "Policies"] {
        assert_eq!(
            property(&stream, key),
            property(&api, key),
            "SandboxStreamFunction's {key} differ from SandboxApiFunction's"
        );
    }
    let code = |b: &str| {
        b.lines()
            .find(|l| l.trim().starts_with("CodeUri:"))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(code(&stream), code(&api));

    // Long enough for the router's longest exec and follow (10 minutes) and a resume.
    let timeout: u64 = stream
        .lines()
        .find_map(|l| l.trim().strip_prefix("Timeout: "))
        .expect("a timeout of its own, not the API functions' 30 s")
        .parse()
        .unwrap();
    let longest = [
        ("crates/api/src/http/sandbox.rs", "MAX_EXEC_TIMEOUT"),
        ("crates/api/src/http/processes.rs", "MAX_FOLLOW"),
    ]
    .iter()
    .map(|(file, name)| duration_const_secs(&read(file), name))
    .max()
    .unwrap();
    assert!(
        timeout >= longest + 60 && timeout <= 900,
        "timeout {timeout} s: the longest stream is {longest} s, Lambda's limit 900 s"
    );

    // The buffered function names the URL in its 406, and the stack's outputs give it.
    assert!(
        api.contains("THREADBOX_STREAM_URL: !GetAtt SandboxStreamFunctionUrl.FunctionUrl\n"),
        "sandbox-api does not know where to send streaming requests"
    );
    let outputs = template.split("\nOutputs:\n").nth(1).unwrap();
    assert!(
        outputs.contains("  SandboxStreamUrl:\n    Description: >-\n")
            && outputs.contains("    Value: !GetAtt SandboxStreamFunctionUrl.FunctionUrl\n"),
        "no SandboxStreamUrl output"
    );
}

/// `(logical id, binary)` of every `BIN_<LogicalId> := <binary>` line in infra/Makefile.
fn makefile_binaries(makefile: &str) -> BTreeSet<(String, String)> {
    makefile
        .lines()
        .filter_map(|line| {
            let (name, binary) = line.strip_prefix("BIN_")?.split_once(":=")?;
            Some((name.trim().to_owned(), binary.trim().to_owned()))
        })
        .collect()
}

/// The binaries of the function packages (`functions/<name>`): each package's own name, or its
/// `[[bin]]` names when it lists them; and the packages.
fn function_binaries() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut binaries = BTreeSet::new();
    let mut packages = BTreeSet::new();
    for entry in std::fs::read_dir(repo().join("functions")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let package = dir.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            manifest.contains(&format!("name = \"{package}\"")),
            "functions/{package} is the package {package} (infra/Makefile builds it by that name)"
        );
        let mut named = false;
        let mut in_bin = false;
        for line in manifest.lines() {
            if line.starts_with('[') {
                in_bin = line.trim() == "[[bin]]";
            } else if let Some(name) = line.strip_prefix("name = ").filter(|_| in_bin) {
                binaries.insert(name.trim_matches('"').to_owned());
                named = true;
            }
        }
        if !named {
            binaries.insert(package.clone());
        }
        packages.insert(package);
    }
    (binaries, packages)
}

/// Item 7 of issue 29: `sam build` compiles the workspace once. Every function is built by
/// infra/Makefile, whose every target asks for the same one `cargo lambda build` of all the
/// function packages (so the first compiles and the rest find it fresh) and copies out the
/// function's own binary. Run here through make with a stand-in cargo that records its calls.
#[test]
fn every_function_is_built_by_the_one_makefile_build() {
    let template = read("infra/template.yaml");
    let resources = resources(&template);
    let functions = of_type(&resources, "AWS::Serverless::Function");
    assert!(functions.len() >= 10, "{functions:?}");
    let makefile = read("infra/Makefile");
    let wanted = makefile_binaries(&makefile);
    let (binaries, packages) = function_binaries();
    let mut expected = Vec::new();
    for (function, block) in &functions {
        assert!(
            block.contains("    Metadata:\n      BuildMethod: makefile\n      ContextPath: .\n"),
            "{function} is not built by infra/Makefile (Metadata: BuildMethod: makefile, \
             ContextPath: .); a build method of its own compiles the workspace again"
        );
        let binary = wanted
            .iter()
            .find(|(name, _)| name == function)
            .map(|(_, binary)| binary.clone())
            .unwrap_or_else(|| panic!("infra/Makefile has no `BIN_{function} := <binary>` line"));
        assert!(
            binaries.contains(&binary),
            "{function}'s binary {binary} is none of the function packages' ({binaries:?})"
        );
        expected.push((function.clone(), binary));
    }

    let which_make = std::process::Command::new("make").arg("--version").output();
    if which_make.is_err() {
        eprintln!("skipped running infra/Makefile: make is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    let target = dir.path().join("target");
    let stub = dir.path().join("cargo");
    // As cargo lambda does: each binary moved to target/lambda/<binary>/bootstrap.
    let lambda = target.join("lambda");
    let writes: String = binaries
        .iter()
        .map(|b| {
            let dir = lambda.join(b);
            format!(
                "mkdir -p \"{0}\"\necho {b} > \"{0}/bootstrap\"\n",
                dir.display()
            )
        })
        .collect();
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\necho \"$PWD $*\" >> \"{}\"\n{writes}",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (function, binary) in &expected {
        let artifacts = dir.path().join("build").join(function);
        let output = std::process::Command::new("make")
            .arg("--makefile")
            .arg(repo().join("infra/Makefile"))
            .arg(format!("build-{function}"))
            // SAM runs make in the function's CodeUri; any directory will do.
            .current_dir(dir.path())
            .env("ARTIFACTS_DIR", &artifacts)
            .env("CARGO", &stub)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "make build-{function}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let bootstrap = std::fs::read_to_string(artifacts.join("bootstrap")).unwrap();
        assert_eq!(bootstrap.trim(), binary, "{function}'s package");
    }
    let calls = std::fs::read_to_string(&calls).unwrap();
    let distinct: BTreeSet<&str> = calls.lines().collect();
    assert_eq!(
        distinct.len(),
        1,
        "every function asks for the same one build: {calls}"
    );
    let call = distinct.into_iter().next().unwrap();
    let workspace = repo().canonicalize().unwrap();
    assert!(
        call.starts_with(&format!(
            "{} lambda build --release --arm64 ",
            workspace.display()
        )),
        "{call}"
    );
    let built: BTreeSet<&str> = call
        .split(" --package ")
        .skip(1)
        .map(|p| p.split_whitespace().next().unwrap())
        .collect();
    let packages: BTreeSet<&str> = packages.iter().map(String::as_str).collect();
    assert_eq!(built, packages, "one build of every function package");
}
