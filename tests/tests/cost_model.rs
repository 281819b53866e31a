//! `scripts/cost-model.py` (docs/cost.md) run as a test: the default profile's thread-month must
//! keep the control plane under 1% of the sandbox compute it manages (`--check`); the model must
//! price everything `infra/template.yaml` deploys (every kind of resource, and as many alarms,
//! alarm metrics, queues, secrets and functions of each size as the template has, counted here
//! independently of the model's own reading); and `threadbox cost` (its copy of the model's
//! summary, `cli/src/cost_model.json`), docs/cost.md and BENCHMARKS.md must give the figure the
//! model gives now.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

use threadbox_tests::{read_repo_file as read, repo, template_resources};

/// The model's output with `args`, or `None` when there is no python3 to run it.
fn model(args: &[&str]) -> Option<String> {
    let output = match Command::new("python3")
        .arg(repo().join("scripts/cost-model.py"))
        .args(args)
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: python3 is not installed");
            return None;
        }
        Err(e) => panic!("running scripts/cost-model.py: {e}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    Some(stdout)
}

#[test]
fn the_default_thread_month_keeps_the_control_plane_under_one_percent() {
    let Some(stdout) = model(&["--check"]) else {
        return;
    };
    let ratio = stdout
        .lines()
        .find_map(|line| line.strip_prefix("ratio: control plane / sandbox compute = "))
        .unwrap_or_else(|| panic!("no ratio line in:\n{stdout}"));
    let percent: f64 = ratio
        .split('%')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("unreadable ratio {ratio:?}"));
    assert!(percent > 0.0 && percent < 1.0, "{stdout}");
}

/// The template's resources, as `(logical id, type, block of text)`: the type is the first
/// `Type:` line of the resource's own properties.
fn resources(template: &str) -> Vec<(String, String, String)> {
    template_resources(template)
        .into_iter()
        .map(|(name, block)| {
            let kind = block
                .lines()
                .find_map(|line| line.strip_prefix("    Type: "))
                .map(|t| t.trim().to_owned())
                .unwrap_or_default();
            (name, kind, block)
        })
        .collect()
}

/// Each function's memory in the template (its own `MemorySize`, else the `Globals` one), by
/// logical id, and the functions' architecture.
fn template_memory(template: &str) -> (BTreeMap<String, u64>, String) {
    let globals = template
        .split_once("\nGlobals:\n")
        .expect("a Globals section")
        .1
        .split("\nResources:\n")
        .next()
        .unwrap();
    let setting = |block: &str, key: &str| {
        block
            .lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_owned()))
    };
    let global: u64 = setting(globals, "MemorySize:").unwrap().parse().unwrap();
    let architecture = setting(globals, "Architectures:")
        .unwrap()
        .trim_matches(|c| c == '[' || c == ']')
        .to_owned();
    let sizes = resources(template)
        .into_iter()
        .filter(|(_, kind, _)| kind == "AWS::Serverless::Function")
        .map(|(name, _, block)| {
            let mb = setting(&block, "MemorySize:").map_or(global, |v| v.parse().unwrap());
            (name, mb)
        })
        .collect();
    (sizes, architecture)
}

/// The counts the model must price, read off the template here, not by the model's reader.
#[derive(Debug, PartialEq)]
struct Deployed {
    alarms: u64,
    alarm_metrics: u64,
    queues: u64,
    polled_queues: u64,
    log_groups: u64,
    secrets: BTreeSet<String>,
}

fn deployed(template: &str) -> Deployed {
    let resources = resources(template);
    let count = |kind: &str| resources.iter().filter(|(_, k, _)| k == kind).count() as u64;
    let alarm_metrics = resources
        .iter()
        .filter(|(_, k, _)| k == "AWS::CloudWatch::Alarm")
        .map(|(_, _, block)| block.matches("MetricName:").count() as u64)
        .sum();
    // Every secret a function's environment names by reference, by the parameter it names.
    let secrets = template
        .lines()
        .filter(|l| l.contains("_SECRET_ID: !Ref "))
        .map(|l| l.rsplit("!Ref ").next().unwrap().trim().to_owned())
        .collect();
    Deployed {
        alarms: count("AWS::CloudWatch::Alarm"),
        alarm_metrics,
        queues: count("AWS::SQS::Queue"),
        // Lambda polls a queue through an event source mapping.
        polled_queues: count("AWS::Lambda::EventSourceMapping"),
        log_groups: count("AWS::Logs::LogGroup"),
        secrets,
    }
}

/// Item 6 of issue 29: a resource the template deploys and the model leaves out fails here.
#[test]
fn the_model_prices_everything_the_template_deploys() {
    let template = read("infra/template.yaml");
    let script = read("scripts/cost-model.py");
    let kinds: BTreeSet<String> = resources(&template)
        .into_iter()
        .map(|(_, kind, _)| kind)
        .collect();
    assert!(kinds.len() >= 10, "{kinds:?}");
    let priced = script
        .split_once("RESOURCE_KINDS = {")
        .expect("the model's RESOURCE_KINDS")
        .1
        .split("\n}")
        .next()
        .unwrap();
    for kind in &kinds {
        assert!(
            priced.contains(&format!("\"{kind}\":")),
            "infra/template.yaml deploys {kind}, which scripts/cost-model.py's RESOURCE_KINDS \
             does not price"
        );
    }

    let Some(json) = model(&["--json"]) else {
        return;
    };
    let m: Value = serde_json::from_str(&json).unwrap();
    let d = &m["deployed"];
    let number = |key: &str| {
        d[key]
            .as_u64()
            .unwrap_or_else(|| panic!("model's {key}: {d}"))
    };
    let names = |key: &str| -> BTreeSet<String> {
        d[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let modelled = Deployed {
        alarms: number("alarms"),
        alarm_metrics: number("alarm_metrics"),
        queues: number("queues"),
        polled_queues: number("polled_queues"),
        log_groups: number("log_groups"),
        secrets: names("secrets"),
    };
    let expected = deployed(&template);
    assert!(
        expected.alarms >= 17 && expected.queues >= 6,
        "{expected:?}"
    );
    assert_eq!(modelled, expected, "what the model prices");
    // Each alarm metric, secret and polled queue is in the fixed costs, priced.
    let fixed = &m["fixed_usd_per_month"];
    for (line, count) in [
        ("cloudwatch_alarms", expected.alarm_metrics),
        ("secrets_manager", expected.secrets.len() as u64),
        ("sqs_pollers", expected.polled_queues),
    ] {
        let usd = fixed[line].as_f64().unwrap();
        assert!(usd > 0.0 && count > 0, "{line}: {fixed}");
    }

    let (sizes, architecture) = template_memory(&template);
    assert!(sizes.len() >= 10, "{sizes:?}");
    let functions = d["functions"].as_object().unwrap();
    let modelled: BTreeMap<String, u64> = functions
        .values()
        .map(|f| {
            (
                f["logical_id"].as_str().unwrap().to_owned(),
                f["memory_mb"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        modelled, sizes,
        "the functions the model prices, and their memory"
    );
    assert_eq!(m["architecture"], architecture.as_str());
}

/// One figure everywhere: `threadbox cost`'s copy of the model's summary is what the model says
/// now, and the documents quote it.
#[test]
fn threadbox_cost_the_docs_and_the_benchmarks_give_the_models_thread_month() {
    let copy = read("cli/src/cost_model.json");
    let Some(summary) = model(&["--summary"]) else {
        return;
    };
    assert_eq!(
        copy.trim(),
        summary.trim(),
        "cli/src/cost_model.json is not the model's summary: run \
         `python3 scripts/cost-model.py --summary > cli/src/cost_model.json` and update the \
         figures in docs/cost.md and BENCHMARKS.md"
    );
    let s: Value = serde_json::from_str(&summary).unwrap();
    let thread_month = format!("${:.4}", s["thread_month_usd"].as_f64().unwrap());
    let percent = format!("{:.2}%", 100.0 * s["ratio"].as_f64().unwrap());
    let fixed = format!("${:.2}", s["fixed_usd_per_month"].as_f64().unwrap());
    let threads = format!("{} threads", s["one_percent_threads"].as_u64().unwrap());
    for document in ["docs/cost.md", "BENCHMARKS.md"] {
        let text = read(document);
        for figure in [&thread_month, &percent, &fixed, &threads] {
            assert!(
                text.contains(figure.as_str()),
                "{document} does not give the model's {figure}"
            );
        }
    }
}
