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
    ("providers", &["config", "adapters", "ports"]),
    ("fanout", &["domain", "ports", "fault"]),
    ("http", &["domain", "ports", "usecases"]),
    ("live", &["domain", "ports", "usecases", "fanout", "http"]),
    ("mcp", &["domain", "ports", "usecases", "http"]),
    ("slack", &["domain", "ports", "usecases", "fanout", "http"]),
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
            "mcp",
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

/// The sibling modules `code` names as `<prefix>name` (`super::`, or `crate::` at a crate's
/// root).
fn sibling_references(code: &str, prefix: &str, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let after = &rest[at + prefix.len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if siblings.contains(&name) {
            found.insert(name);
        }
        rest = after;
    }
    found
}

/// No two modules of one folder import each other, directly or round a longer circle: each
/// folder's files form a layering of their own, so any of them can be read knowing only the
/// ones it names. Checked in this crate and the CLI.
#[test]
fn no_module_imports_form_a_circle() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/src");
    let roots = [src(), cli];
    let mut dirs = roots.to_vec();
    let mut circles = Vec::new();
    while let Some(dir) = dirs.pop() {
        let at_root = roots.contains(&dir);
        let mut modules: Vec<(String, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path.clone());
                if path.join("mod.rs").exists() {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    modules.push((name, path.join("mod.rs")));
                }
            } else if path.extension().is_some_and(|e| e == "rs")
                && !matches!(
                    path.file_name().unwrap().to_str(),
                    Some("mod.rs" | "lib.rs" | "tests.rs")
                )
            {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                modules.push((name, path));
            }
        }
        let names: BTreeSet<String> = modules.iter().map(|(n, _)| n.clone()).collect();
        let edges: Vec<(String, BTreeSet<String>)> = modules
            .iter()
            .map(|(name, file)| {
                // A folder module names its siblings as `super::x` from its `mod.rs` and as
                // `super::super::x` from the files inside it.
                let mut code = non_test_code(file);
                if file.ends_with("mod.rs") {
                    for entry in std::fs::read_dir(file.parent().unwrap()).unwrap() {
                        let inner = entry.unwrap().path();
                        if inner.extension().is_some_and(|e| e == "rs")
                            && !inner.ends_with("mod.rs")
                        {
                            let text = non_test_code(&inner);
                            if at_root {
                                // At a crate's root, siblings are `crate::x` from anywhere inside.
                                for part in text.split("crate::").skip(1) {
                                    code.push_str("\ncrate::");
                                    code.push_str(
                                        part.split(|c: char| {
                                            !(c.is_ascii_alphanumeric() || c == '_')
                                        })
                                        .next()
                                        .unwrap_or(""),
                                    );
                                }
                            }
                            let outward: Vec<&str> = text.split("super::super::").skip(1).collect();
                            for part in outward {
                                code.push_str("\nsuper::");
                                code.push_str(
                                    part.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                                        .next()
                                        .unwrap_or(""),
                                );
                            }
                        }
                    }
                }
                let mut refs = sibling_references(&code, "super::", &names);
                if at_root {
                    refs.extend(sibling_references(&code, "crate::", &names));
                }
                refs.remove(name);
                (name.clone(), refs)
            })
            .collect();
        // Depth-first search for a path back to the start.
        for (start, _) in &edges {
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            while let Some((at, path)) = stack.pop() {
                let next = edges.iter().find(|(n, _)| *n == at).map(|(_, r)| r);
                for to in next.into_iter().flatten() {
                    if to == start {
                        circles.push(format!(
                            "{}: {} -> {start}",
                            dir.display(),
                            path.join(" -> ")
                        ));
                    } else if !path.contains(to) {
                        let mut longer = path.clone();
                        longer.push(to.clone());
                        stack.push((to.clone(), longer));
                    }
                }
            }
        }
    }
    circles.sort();
    circles.dedup();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}
