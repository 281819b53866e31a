//! The house as docs/architecture.md draws it, checked against the code, so the page cannot
//! drift and the layers cannot be crossed:
//!
//! - every crate under `crates/` has a row, and the row's "may depend on" is exactly the
//!   threadbox crates its `Cargo.toml` names as (normal) dependencies;
//! - no crate depends on a crate of a higher layer (the layer column: core, adapter, edge, glue;
//!   test support only as a dev-dependency);
//! - the core's whole dependency tree (as Cargo resolves it) holds no AWS SDK, SQLite, HTTP
//!   framework or client, or TLS;
//! - every trait in the core's `ports` has a row in the ports table, and the table names no
//!   trait that is gone;
//! - every conformance suite module is named on the page, and every registration macro the page
//!   names exists.
//!
//! What Cargo itself enforces (a crate can only use what it names, no cycles) is not repeated.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One row of the crates table.
#[derive(Debug)]
struct CrateRow {
    folder: String,
    layer: String,
    may_depend_on: BTreeSet<String>,
}

/// The backticked names in a table cell (`threadbox-core`, ...).
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The rows of the Markdown table under `heading` (cells trimmed, header and rule skipped).
fn table(page: &str, heading: &str) -> Vec<Vec<String>> {
    let start = page
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/architecture.md has no section {heading:?}"));
    let section = &page[start + heading.len() + 5..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

fn crate_rows(page: &str) -> BTreeMap<String, CrateRow> {
    table(page, "The crates")
        .into_iter()
        .map(|cells| {
            assert_eq!(cells.len(), 5, "a crates row has 5 cells: {cells:?}");
            let name = ticked(&cells[0]).pop().expect("a crate name");
            let row = CrateRow {
                folder: ticked(&cells[1]).pop().expect("a folder"),
                layer: cells[2].clone(),
                may_depend_on: ticked(&cells[4]).into_iter().collect(),
            };
            (name, row)
        })
        .collect()
}

/// A crate's name and the threadbox crates in its `[dependencies]` (not dev- or build-).
fn manifest_deps(manifest: &str) -> (String, BTreeSet<String>) {
    let mut name = None;
    let mut deps = BTreeSet::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section == "[package]" && line.starts_with("name = ") {
            name = Some(line["name = ".len()..].trim_matches('"').to_owned());
        }
        if section == "[dependencies]" && line.starts_with("threadbox-") {
            let dep = line.split(['.', ' ', '=']).next().unwrap();
            deps.insert(dep.to_owned());
        }
    }
    (name.expect("a package name"), deps)
}

fn layer_rank(layer: &str) -> u8 {
    match layer {
        "core" => 0,
        "adapter" | "test support" => 1,
        "edge" => 2,
        "glue" => 3,
        other => panic!("unknown layer {other:?} in docs/architecture.md"),
    }
}

#[test]
fn every_crate_and_its_dependencies_are_on_the_page_and_none_reaches_up() {
    let root = repo();
    let rows = crate_rows(&read(&root.join("docs/architecture.md")));
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let (name, deps) = manifest_deps(&read(&dir.join("Cargo.toml")));
        let folder = format!("crates/{}", dir.file_name().unwrap().to_str().unwrap());
        let row = rows.get(&name).unwrap_or_else(|| {
            panic!("{name} ({folder}) has no row in docs/architecture.md's crates table")
        });
        assert_eq!(row.folder, folder, "{name}'s folder on the page");
        let page_deps: BTreeSet<_> = row
            .may_depend_on
            .iter()
            .filter(|d| *d != "nothing")
            .cloned()
            .collect();
        assert_eq!(
            deps, page_deps,
            "{name}: its Cargo.toml's threadbox dependencies and the page's \"may depend on\""
        );
        for dep in &deps {
            let theirs = &rows[dep].layer;
            assert_ne!(theirs, "test support", "{name} depends on test support");
            assert!(
                layer_rank(theirs) <= layer_rank(&row.layer),
                "{name} ({}) depends on {dep} ({theirs}), a higher layer",
                row.layer
            );
        }
        seen.insert(name);
    }
    let listed: BTreeSet<_> = rows.keys().cloned().collect();
    assert_eq!(
        listed, seen,
        "the page lists exactly the crates under crates/"
    );
}

/// Crates that must never be in the core's tree: they belong to adapters and edges.
const NOT_IN_THE_CORE: &[&str] = &[
    "aws-config",
    "aws-sdk-dynamodb",
    "aws-sdk-sqs",
    "aws-sdk-secretsmanager",
    "aws-sdk-apigatewaymanagement",
    "aws-smithy-runtime",
    "rusqlite",
    "libsqlite3-sys",
    "axum",
    "hyper",
    "reqwest",
    "rustls",
    "tokio-rustls",
    "rmcp",
    "lambda_http",
    "lambda_runtime",
];

#[test]
fn the_core_tree_holds_no_aws_sqlite_http_or_tls() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "threadbox-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--all-features", "--offline"])
        .current_dir(repo())
        .output()
        .expect("cargo tree");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let names: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains("tokio"), "the tree was read: {names:?}");
    let found: Vec<_> = NOT_IN_THE_CORE
        .iter()
        .filter(|n| names.contains(**n))
        .collect();
    assert!(found.is_empty(), "threadbox-core's tree holds {found:?}");
}

/// `pub trait Name` in every file under `dir`.
fn traits_in(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            traits_in(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            for line in read(&path).lines() {
                if let Some(rest) = line.trim_start().strip_prefix("pub trait ") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    out.insert(name);
                }
            }
        }
    }
}

#[test]
fn every_port_is_on_the_page() {
    let root = repo();
    let mut traits = BTreeSet::new();
    traits_in(&root.join("crates/core/src/ports"), &mut traits);
    assert!(traits.contains("SessionStore"), "{traits:?}");
    let listed: BTreeSet<String> = table(&read(&root.join("docs/architecture.md")), "The ports")
        .into_iter()
        .map(|cells| ticked(&cells[0]).pop().expect("a port name"))
        .collect();
    assert_eq!(
        traits, listed,
        "the ports in crates/core/src/ports and docs/architecture.md's ports table"
    );
}

#[test]
fn every_conformance_suite_and_macro_the_page_names_exists() {
    let root = repo();
    let page = read(&root.join("docs/architecture.md"));
    let testing = root.join("crates/testing/src");
    let suites = std::fs::read_dir(&testing)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix("_conformance.rs").map(str::to_owned)
        })
        .collect::<BTreeSet<_>>();
    assert!(suites.contains("store"), "{suites:?}");
    for suite in &suites {
        assert!(
            page.contains(&format!("`{suite}_conformance`")),
            "docs/architecture.md does not name the suite {suite}_conformance"
        );
    }
    let macros = read(&testing.join("suites.rs"));
    for line in macros.lines() {
        if let Some(rest) = line.strip_prefix("macro_rules! ") {
            let name = rest.trim_end_matches(" {");
            assert!(
                page.contains(&format!("`{name}!`")),
                "docs/architecture.md does not name the registration macro {name}!"
            );
        }
    }
    for named in page.split('`').skip(1).step_by(2) {
        if let Some(name) = named.strip_suffix('!') {
            assert!(
                macros.contains(&format!("macro_rules! {name} ")),
                "docs/architecture.md names {named}, which crates/testing/src/suites.rs does not define"
            );
        }
    }
}

// What crates cannot say: the layers inside the core, and import circles between the modules
// of one folder in any crate. Both read the source through a small lexer (comments, strings and
// char literals removed), so a grouped `use crate::{a, b}`, a full `crate::a::b` path in an
// expression, `super::` chains and code after a test module are all seen.

/// Inside `threadbox-core`: each top-level module and the modules it may name.
const CORE_LAYERS: &[(&str, &[&str])] = &[
    ("config", &[]),
    ("domain", &[]),
    ("ports", &["domain"]),
    // `fault` is the crash-test switch, compiled to nothing without `fault-injection`.
    ("usecases", &["domain", "ports", "fault"]),
    ("fanout", &["domain", "ports", "fault"]),
    ("fault", &[]),
];

/// `code` without comments, string literals and char literals (each replaced by a space), so
/// what remains is tokens. Lifetimes (`'a`) are kept.
fn strip(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &code[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if code[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if code[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            i = body
                + code[body..]
                    .find(&close)
                    .map_or(code.len() - body, |e| e + close.len());
            out.push(' ');
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if b[i] == b'\'' && is_char_literal(rest) {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br"`... at the start of `s`: the number of `#`s.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// A char literal (`'x'`, `'\n'`, `'\u{1F600}'`) rather than a lifetime (`'a`).
fn is_char_literal(s: &str) -> bool {
    let mut chars = s.chars().skip(1);
    match chars.next() {
        Some('\\') => true,
        Some(_) => chars.next() == Some('\''),
        None => false,
    }
}

/// The body of every `#[cfg(test)]` (or `#[cfg(all(test, ...))]`) module in stripped code
/// removed, so only production code remains.
fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(") {
        let attr = &rest[at..];
        let is_test = attr.starts_with("#[cfg(test)]") || attr.starts_with("#[cfg(all(test");
        let Some(open) = attr.find(['{', ';']) else {
            break;
        };
        if !is_test || attr.as_bytes()[open] == b';' || !attr[..open].contains("mod ") {
            out.push_str(&rest[..at + 6]);
            rest = &rest[at + 6..];
            continue;
        }
        out.push_str(&rest[..at]);
        let mut depth = 0;
        let mut end = attr.len();
        for (i, c) in attr[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &attr[end..];
    }
    out.push_str(rest);
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every module path a piece of stripped code names, absolute from the crate root, given the
/// module path of the file (`["usecases", "resolve"]`). Paths from `crate::` (grouped or not)
/// and from `super::` chains, which resolve from the inline module (`mod name { ... }`) they
/// stand in; a path's segments are its leading lowercase names.
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    // The inline modules the scan is inside, with the brace depth each opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < code.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, at)| *at == depth) {
                    inline.pop();
                }
            }
            _ => {}
        }
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b'$');
        let word = ident_at(&code[i..]);
        if !boundary || word.is_empty() {
            i += code[i..].chars().next().unwrap().len_utf8();
            continue;
        }
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        let (base, at) = match word {
            "mod" => {
                let rest = code[i + 3..].trim_start();
                let name = ident_at(rest);
                if !name.is_empty() && rest[name.len()..].trim_start().starts_with('{') {
                    inline.push((name.to_owned(), depth));
                }
                i += 3;
                continue;
            }
            "crate" => (Vec::new(), i + word.len()),
            "super" => {
                let mut up = here.len();
                let mut at = i;
                loop {
                    up = up.saturating_sub(1);
                    at += "super".len();
                    let next = code[at..].trim_start();
                    match next.strip_prefix("::") {
                        Some(after) if after.trim_start().starts_with("super") => {
                            at = code.len() - after.trim_start().len();
                        }
                        _ => break,
                    }
                }
                (here[..up].to_vec(), at)
            }
            _ => {
                i += word.len();
                continue;
            }
        };
        if let Some(after) = code[at..].trim_start().strip_prefix("::") {
            for path in path_tails(after) {
                let mut full = base.clone();
                full.extend(path);
                found.push(full);
            }
        }
        i = at;
    }
    found
}

/// The lowercase segments of the path at the start of `s` (after a `::`), or of each entry of
/// a `{...}` group there, nested groups included.
fn path_tails(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(group) = s.strip_prefix('{') {
        let mut entries = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    entries.push(&group[start..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    entries.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        return entries.into_iter().flat_map(path_tails).collect();
    }
    let mut segments = Vec::new();
    let mut rest = s;
    loop {
        let name = ident_at(rest);
        if name.is_empty() || name == "self" || !name.starts_with(|c: char| c.is_ascii_lowercase())
        {
            if rest.starts_with('{') {
                return path_tails(rest)
                    .into_iter()
                    .map(|tail| segments.iter().cloned().chain(tail).collect())
                    .collect();
            }
            break;
        }
        segments.push(name.to_owned());
        let after = rest[name.len()..].trim_start();
        match after.strip_prefix("::") {
            Some(next) => rest = next.trim_start(),
            None => break,
        }
    }
    vec![segments]
}

/// Every `.rs` file under `dir` with its module path (`mod.rs` and `lib.rs` name their folder).
fn modules(src: &Path) -> Vec<(PathBuf, Vec<String>)> {
    fn walk(dir: &Path, prefix: &[String], out: &mut Vec<(PathBuf, Vec<String>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(name);
                walk(&path, &inner, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut module = prefix.to_vec();
                if name != "mod" && name != "lib" {
                    module.push(name);
                }
                out.push((path, module));
            }
        }
    }
    let mut out = Vec::new();
    walk(src, &[], &mut out);
    out
}

#[test]
fn inside_the_core_each_layer_names_only_the_layers_below_it() {
    let src = repo().join("crates/core/src");
    let mut violations = Vec::new();
    for (file, module) in modules(&src) {
        let Some(top) = module.first() else {
            continue; // lib.rs declares the modules
        };
        let allowed = CORE_LAYERS
            .iter()
            .find(|(layer, _)| layer == top)
            .map(|(_, allowed)| *allowed)
            .unwrap_or_else(|| {
                panic!(
                    "{} is in no layer of the core: add its module to CORE_LAYERS and docs/architecture.md",
                    file.display()
                )
            });
        let code = strip(&std::fs::read_to_string(&file).unwrap());
        for path in named_paths(&code, &module) {
            let Some(first) = path.first() else { continue };
            if first != top && !allowed.contains(&first.as_str()) {
                violations.push(format!(
                    "{} names crate::{}, which {top} may not",
                    file.strip_prefix(&src).unwrap().display(),
                    path.join("::")
                ));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// Sibling modules (one folder) that name each other in production code, in every crate:
/// each strongly connected set of more than one.
fn sibling_circles(src: &Path) -> Vec<String> {
    use std::collections::BTreeMap as Map;
    let mut edges: Map<Vec<String>, BTreeSet<String>> = Map::new();
    for (file, module) in modules(src) {
        if file
            .file_name()
            .is_some_and(|n| n == "tests.rs" || n.to_str().unwrap().ends_with("_tests.rs"))
        {
            continue;
        }
        let Some((own, parent)) = module.split_last() else {
            continue;
        };
        let code = without_test_modules(&strip(&std::fs::read_to_string(&file).unwrap()));
        for path in named_paths(&code, &module) {
            if path.len() > parent.len()
                && path[..parent.len()] == *parent
                && path[parent.len()] != *own
            {
                let mut from = parent.to_vec();
                from.push(own.clone());
                edges
                    .entry(from)
                    .or_default()
                    .insert(path[parent.len()].clone());
            }
        }
    }
    // A circle: a sibling that reaches back. Small graphs: a walk from each node suffices.
    let mut circles = BTreeSet::new();
    for (from, _) in edges.iter() {
        let (parent, own) = from.split_at(from.len() - 1);
        let mut seen = BTreeSet::new();
        let mut stack: Vec<String> = edges[from].iter().cloned().collect();
        while let Some(next) = stack.pop() {
            if next == own[0] {
                circles.insert(format!("{}::{{{}}}", parent.join("::"), own[0]));
                break;
            }
            if seen.insert(next.clone()) {
                let mut key = parent.to_vec();
                key.push(next);
                stack.extend(edges.get(&key).into_iter().flatten().cloned());
            }
        }
    }
    circles.into_iter().collect()
}

#[test]
fn no_module_names_a_sibling_that_names_it_back() {
    let mut circles = Vec::new();
    for entry in std::fs::read_dir(repo().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        for circle in sibling_circles(&src) {
            circles.push(format!(
                "{}: {circle} is in an import circle",
                src.display()
            ));
        }
    }
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}

/// The checks above, on planted code: each way the old regex test was fooled is caught.
#[test]
fn the_source_checks_see_every_way_of_naming_a_module() {
    let module = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let firsts = |code: &str, m: &[&str]| {
        named_paths(&strip(code), &module(m))
            .into_iter()
            .filter_map(|p| p.first().cloned())
            .collect::<BTreeSet<_>>()
    };
    let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    // A grouped import, nested.
    assert_eq!(
        firsts("use crate::{domain::X, usecases::{a, b}};", &["ports"]),
        set(&["domain", "usecases"])
    );
    // A full path in an expression, after a test module's `use`.
    assert_eq!(
        firsts(
            "#[cfg(test)]\nuse crate::domain::X;\nfn f() { crate::usecases::go() }",
            &["ports"]
        ),
        set(&["domain", "usecases"])
    );
    // `super` chains resolve from the file's module.
    assert_eq!(
        firsts(
            "use super::super::usecases::Y;",
            &["ports", "provider", "x"]
        ),
        set(&["ports"])
    );
    assert_eq!(
        firsts(
            "use super::super::super::usecases::Y;",
            &["ports", "provider", "x"]
        ),
        set(&["usecases"])
    );
    // `super` inside an inline module resolves from that module.
    assert_eq!(
        firsts("mod armed { use super::usecases::Y; }", &["fault"]),
        set(&["fault"])
    );
    assert_eq!(
        firsts(
            "mod armed { fn f() {} }\nuse super::usecases::Y;",
            &["fault"]
        ),
        set(&["usecases"])
    );
    // Comments and strings name nothing.
    assert!(firsts(
        "// crate::usecases\nlet s = \"crate::usecases\"; /* crate::x */",
        &["ports"]
    )
    .is_empty());
    // A circle between two siblings, one of them by a full path.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::write(dir.path().join("a/one.rs"), "use super::two::T;").unwrap();
    std::fs::write(dir.path().join("a/two.rs"), "fn f() { crate::a::one::g() }").unwrap();
    std::fs::write(
        dir.path().join("a/three.rs"),
        "use super::one::T;\n#[cfg(test)]\nmod tests { use crate::a::three; }",
    )
    .unwrap();
    assert_eq!(
        sibling_circles(dir.path()),
        vec!["a::{one}".to_owned(), "a::{two}".to_owned()]
    );
    // Test modules are not production code.
    std::fs::write(
        dir.path().join("a/one.rs"),
        "#[cfg(test)]\nmod tests { use super::super::two::T; }",
    )
    .unwrap();
    assert!(sibling_circles(dir.path()).is_empty());
}

/// The `.rs` files of a package under `dirs` (relative to its folder), with the files their
/// `#[path = "..."]` attributes include from elsewhere.
fn package_sources(package: &Path, dirs: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for dir in dirs {
        walk(&package.join(dir), &mut files);
    }
    let mut included = Vec::new();
    for file in &files {
        for line in read(file).lines() {
            if let Some(rest) = line.trim().strip_prefix("#[path = \"") {
                let relative = rest.split('"').next().unwrap();
                included.push(file.parent().unwrap().join(relative));
            }
        }
    }
    files.extend(included);
    files
}

#[test]
fn every_package_uses_each_threadbox_crate_it_names() {
    let root = repo();
    let mut packages: Vec<PathBuf> = ["crates", "functions"]
        .iter()
        .flat_map(|top| std::fs::read_dir(root.join(top)).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    packages.extend([root.join("cli"), root.join("tests")]);
    let mut unused = Vec::new();
    for package in packages {
        let manifest = read(&package.join("Cargo.toml"));
        let mut section = "";
        for line in manifest.lines() {
            if line.starts_with('[') {
                section = line.trim();
                continue;
            }
            let Some(dep) = line.strip_prefix("threadbox-") else {
                continue;
            };
            let name: String = dep
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            // A normal dependency must be used by the package's own code; the tests crate's
            // optional ones serve its test targets (features turn them on), like dev-dependencies.
            let dirs: &[&str] = match section {
                "[dependencies]" if !package.ends_with("tests") => &["src"],
                "[dependencies]" | "[dev-dependencies]" => &["."],
                _ => continue,
            };
            let ident = format!("threadbox_{}", name.replace('-', "_"));
            let used = package_sources(&package, dirs)
                .iter()
                .any(|file| read(file).contains(&ident));
            if !used {
                unused.push(format!("{} {section} threadbox-{name}", package.display()));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "named but not used:\n{}",
        unused.join("\n")
    );
}
