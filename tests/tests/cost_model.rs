//! `scripts/cost-model.py` (docs/cost.md) run as a test: the default profile's thread-month must
//! keep the control plane under 1% of the sandbox compute it manages (`--check`), and the model's
//! Lambda sizes must be the ones `infra/template.yaml` deploys, so the model cannot silently price
//! functions that no longer exist or have been resized.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_default_thread_month_keeps_the_control_plane_under_one_percent() {
    let output = match Command::new("python3")
        .arg(repo().join("scripts/cost-model.py"))
        .arg("--check")
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: python3 is not installed");
            return;
        }
        Err(e) => panic!("running scripts/cost-model.py: {e}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
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

/// Each function's memory in the template: its own `MemorySize`, else the `Globals` one.
fn template_memory() -> (BTreeMap<String, u32>, String) {
    let template = read("infra/template.yaml");
    let mut global = None;
    let mut architecture = String::new();
    let mut functions = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in template.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("CodeUri: ../functions/") {
            current = Some(name.trim().to_owned());
            functions.insert(name.trim().to_owned(), None);
        } else if let Some(mb) = trimmed.strip_prefix("MemorySize: ") {
            let mb: u32 = mb.trim().parse().unwrap();
            match &current {
                Some(name) => {
                    functions.insert(name.clone(), Some(mb));
                }
                None => global = Some(mb),
            }
        } else if let Some(arch) = trimmed.strip_prefix("Architectures: ") {
            architecture = arch.trim_matches(|c| c == '[' || c == ']').to_owned();
        } else if trimmed.starts_with("Type: AWS::") && !trimmed.contains("Serverless::Function") {
            current = None;
        }
    }
    let global = global.expect("Globals has a MemorySize");
    let sizes = functions
        .into_iter()
        .map(|(name, mb)| (name, mb.unwrap_or(global)))
        .collect();
    (sizes, architecture)
}

#[test]
fn the_model_prices_the_functions_the_template_deploys() {
    let script = read("scripts/cost-model.py");
    let (sizes, architecture) = template_memory();
    assert!(sizes.len() >= 8, "{sizes:?}");
    for (function, mb) in &sizes {
        let entry = format!("    \"{function}\": {mb},");
        assert!(
            script.contains(&entry),
            "scripts/cost-model.py should price {function} at {mb} MB (line `{entry}`)"
        );
    }
    assert!(
        script.contains(&format!("ARCHITECTURE = \"{architecture}\"")),
        "the template's functions run on {architecture}"
    );
}
