//! The layering `docs/architecture.md` documents, checked on the source: each layer of
//! `threadbox-shared` imports only the layers below it, so an import against the direction fails
//! here instead of slowly bending the design. Test code (`tests.rs` files, `#[cfg(test)]`
//! modules) may reach further, to build real adapters for a test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module of the crate and the modules it may import (besides itself).
const ALLOWED: &[(&str, &[&str])] = &[
    ("config", &[]),
    ("domain", &[]),
    ("ports", &["domain"]),
    // `fault` is the test-only crash-point switch, compiled out of normal builds.
    ("usecases", &["domain", "ports", "fault"]),
    ("adapters", &["config", "domain", "ports"]),
    ("providers", &["config", "adapters"]),
    ("fanout", &["domain", "ports", "fault"]),
    ("live", &["domain", "ports", "usecases", "fanout"]),
    ("slack", &["domain", "ports", "usecases", "fanout", "http"]),
    ("http", &["domain", "ports", "usecases", "live", "slack"]),
    (
        "lambda",
        &[
            "config",
            "domain",
            "ports",
            "usecases",
            "adapters",
            "providers",
            "fanout",
            "live",
            "slack",
            "http",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `file` outside its test modules: everything before the first module-level
/// `#[cfg(test)]` or `#[cfg(all(test, …))]` (the house style puts tests last), none of it for a
/// `tests.rs`.
fn non_test_code(file: &Path) -> String {
    if file.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(file).unwrap();
    let end = text
        .lines()
        .scan(0usize, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test"))
        .map_or(text.len(), |(at, _)| at);
    text[..end].to_owned()
}

/// Every top-level module named by a `crate::<module>` path in `code`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `$crate::` in exported macros is the same crate, seen from outside.
        if !name.is_empty() {
            found.insert(name);
        }
        rest = after;
    }
    found
}

#[test]
fn every_layer_imports_only_the_layers_below_it() {
    let mut violations = Vec::new();
    for (layer, allowed) in ALLOWED {
        let mut files = Vec::new();
        let dir = src().join(layer);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        files.push(src().join(format!("{layer}.rs")));
        for file in files.iter().filter(|f| f.exists()) {
            for module in crate_paths(&non_test_code(file)) {
                if module != *layer && !allowed.contains(&module.as_str()) {
                    violations.push(format!(
                        "{} imports crate::{module}, which {layer} may not",
                        file.strip_prefix(src()).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against docs/architecture.md:\n{}",
        violations.join("\n")
    );
}

/// The check sees what it should: a path in test code is ignored, one before it is not.
#[test]
fn the_check_reads_paths_and_skips_test_modules() {
    let code = "use crate::ports::Clock;\nfn f() { crate::domain::x(); }\n";
    assert_eq!(
        crate_paths(code),
        BTreeSet::from(["ports".to_owned(), "domain".to_owned()])
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.rs");
    std::fs::write(
        &file,
        "use crate::ports::Clock;\n#[cfg(test)]\nmod tests {\n    use crate::adapters::x;\n}\n",
    )
    .unwrap();
    assert_eq!(
        crate_paths(&non_test_code(&file)),
        BTreeSet::from(["ports".to_owned()])
    );
}
