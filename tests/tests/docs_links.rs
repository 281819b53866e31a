//! Every relative link in README.md, BENCHMARKS.md and docs/*.md resolves: the file (or folder)
//! it names exists, and a `#fragment` names a heading of that file, slugged as GitHub slugs them.
//! The reference lives in many pages that link to each other; a page renamed or a heading
//! reworded must not leave a link that lands nowhere.
//!
//! Links to `http(s)://` and `mailto:` are not checked (that would need the network). Links are
//! read outside fenced code blocks and code spans, as Markdown renders them: inline links and
//! images `[text](target)`, and reference definitions `[name]: target`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The pages whose links are checked.
fn pages() -> Vec<PathBuf> {
    let root = repo();
    let mut pages = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text Markdown renders, without fenced code blocks (CommonMark: a fence is three or more
/// backticks or tildes indented at most three spaces; it closes on a line of at least as many of
/// the same character and nothing else). Fenced lines become empty, so line numbers stay.
fn outside_fences(markdown: &str) -> Vec<&str> {
    let mut open: Option<(char, usize)> = None;
    markdown
        .lines()
        .map(|line| {
            let trimmed = line.trim_start_matches(' ');
            let indent = line.len() - trimmed.len();
            let fence = trimmed
                .chars()
                .next()
                .filter(|c| indent <= 3 && (*c == '`' || *c == '~'))
                .map(|c| (c, trimmed.chars().take_while(|x| *x == c).count()))
                .filter(|(_, n)| *n >= 3);
            match (open, fence) {
                (None, Some((c, n))) => {
                    // A backtick fence's info string may not hold a backtick.
                    if c == '`' && trimmed[n..].contains('`') {
                        return line;
                    }
                    open = Some((c, n));
                    ""
                }
                (Some((c, n)), Some((f, m)))
                    if f == c && m >= n && trimmed[m..].trim().is_empty() =>
                {
                    open = None;
                    ""
                }
                (Some(_), _) => "",
                (None, None) => line,
            }
        })
        .collect()
}

/// `text` with its code spans blanked (a run of N backticks up to the next run of exactly N), so
/// a link written inside backticks is not a link.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // Find the closing run of exactly `run` backticks.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let n = chars[j..].iter().take_while(|c| **c == '`').count();
                if n == run {
                    close = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                // Keep line breaks so positions by line stay meaningful.
                for c in &chars[i..j + run] {
                    out.push(if *c == '\n' { '\n' } else { ' ' });
                }
                i = j + run;
            }
            None => {
                // An unmatched run is literal backticks.
                for _ in 0..run {
                    out.push('`');
                }
                i += run;
            }
        }
    }
    out
}

/// Every link target in `markdown` (inline links and images, and reference definitions), as
/// written, with the line it is on.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let text = without_code_spans(&outside_fences(markdown).join("\n"));
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        // A reference definition: `[name]: target`.
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') && line.len() - trimmed.len() <= 3 {
            if let Some((label, rest)) = trimmed[1..].split_once("]:") {
                if !label.is_empty() {
                    if let Some(target) = rest.split_whitespace().next() {
                        found.push((index + 1, target.trim_matches(['<', '>']).to_owned()));
                    }
                }
            }
        }
    }
    // Inline links: `](target)` or `](target "title")`; the text may span lines, the target not.
    let mut rest = text.as_str();
    let mut offset = 0;
    while let Some(at) = rest.find("](") {
        let start = at + 2;
        let after = &rest[start..];
        let end = after.find([')', '\n']).unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        let line = text[..offset + at].matches('\n').count() + 1;
        if after[end..].starts_with(')') && !target.is_empty() {
            found.push((line, target.trim_matches(['<', '>']).to_owned()));
        }
        offset += start;
        rest = &rest[start..];
    }
    found
}

/// A heading's anchor as GitHub makes it: the rendered text lowercased, every character that is
/// not a letter, a digit, a space, `-` or `_` dropped, and each space made `-`.
fn slug(heading: &str) -> String {
    // Rendered text: a link in a heading shows its text only.
    let mut rendered = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        rendered.push_str(&rest[..open]);
        rendered.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    rendered.push_str(rest);
    rendered
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every ATX heading in `markdown` (outside fenced code), repeats numbered as
/// GitHub numbers them: the second `foo` is `foo-1`, the third `foo-2`.
fn anchors(markdown: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = Vec::new();
    for line in outside_fences(markdown) {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            continue;
        }
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&level) {
            continue;
        }
        let text = &trimmed[level..];
        if !(text.is_empty() || text.starts_with(' ') || text.starts_with('\t')) {
            continue;
        }
        // A closing sequence of `#`s (after a space) is not part of the text.
        let text = text.trim();
        let text = match text.trim_end_matches('#') {
            t if t.len() < text.len() && (t.is_empty() || t.ends_with(' ')) => t.trim_end(),
            _ => text,
        };
        let base = slug(text);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.push(if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// What is wrong with each relative link of `page` (whose text is `markdown`): a file that does
/// not exist, or a fragment that names no heading of its file. Empty when every link resolves.
fn broken_links(page: &Path, markdown: &str) -> Vec<String> {
    let dir = page.parent().unwrap();
    let mut broken = Vec::new();
    for (line, target) in links(markdown) {
        let lower = target.to_ascii_lowercase();
        if lower.starts_with("http://")
            || lower.starts_with("https://")
            || lower.starts_with("mailto:")
        {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(path)
        };
        let at = format!("{}:{line}: {target}", page.display());
        if !file.exists() {
            broken.push(format!("{at}: no such file {}", file.display()));
            continue;
        }
        let Some(fragment) = fragment else { continue };
        let Ok(text) = std::fs::read_to_string(&file) else {
            broken.push(format!(
                "{at}: #{fragment} into something that is not a text file"
            ));
            continue;
        };
        if !anchors(&text).iter().any(|a| a == fragment) {
            broken.push(format!(
                "{at}: no heading of {} is #{fragment}",
                file.display()
            ));
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_readme_benchmarks_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut relative = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        relative += links(&text)
            .iter()
            .filter(|(_, t)| !t.starts_with("http"))
            .count();
        broken.extend(broken_links(&page, &text));
    }
    // The pages link to each other dozens of times; finding none would mean the reader broke.
    assert!(relative > 50, "only {relative} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_missing_file_and_a_missing_heading_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.md");
    std::fs::write(
        &other,
        "# Other page\n\n## Same\n\n## Same\n\n```sh\n## not a heading\n```\n\n\
         ## `threadbox dev`: its flags, rootless (v2)\n",
    )
    .unwrap();
    let page = dir.path().join("page.md");
    let text = "# Page\n\n## Here\n\n\
        [fine](other.md) and [fine](other.md#same) and [fine](other.md#same-1)\n\
        [fine](other.md#threadbox-dev-its-flags-rootless-v2) [fine](#here) [web](https://e.x/#no)\n\
        [gone](missing.md) and [no such heading](other.md#nope)\n\
        [third same](other.md#same-2) [fenced](other.md#not-a-heading) [self](#there)\n\
        `[in code](missing-too.md)`\n\n```md\n[in a fence](missing-three.md)\n```\n\n\
        [ref]: ./missing-ref.md\n";
    std::fs::write(&page, text).unwrap();
    let broken = broken_links(&page, text);
    let named: Vec<&str> = broken
        .iter()
        .map(|b| b.split(": ").nth(1).unwrap())
        .collect();
    assert_eq!(
        named,
        [
            "./missing-ref.md",
            "missing.md",
            "other.md#nope",
            "other.md#same-2",
            "other.md#not-a-heading",
            "#there",
        ],
        "{broken:#?}"
    );
}

#[test]
fn headings_are_slugged_as_github_does() {
    for (heading, anchor) in [
        ("A five-minute tour", "a-five-minute-tour"),
        ("`threadbox dev`", "threadbox-dev"),
        (
            "MCP: a thread's sandbox as tools for an agent",
            "mcp-a-threads-sandbox-as-tools-for-an-agent",
        ),
        ("Live events (WebSocket)", "live-events-websocket"),
        ("§1 Control plane basics", "1-control-plane-basics"),
        (
            "Janitor at scale (`shared/benches/janitor_sweep.rs`)",
            "janitor-at-scale-sharedbenchesjanitor_sweeprs",
        ),
        (
            "On AWS: commands and terminals",
            "on-aws-commands-and-terminals",
        ),
        ("Limits through API Gateway", "limits-through-api-gateway"),
        ("A [linked](other.md) word", "a-linked-word"),
    ] {
        assert_eq!(slug(heading), anchor, "{heading}");
    }
    assert_eq!(
        anchors("# T\n## Tests\ntext\n## Tests\n### Tests ##\n#nope\n"),
        ["t", "tests", "tests-1", "tests-2"]
    );
}
