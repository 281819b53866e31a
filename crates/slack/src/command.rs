//! What a message asks for: code to run, or one of the thread commands.
//!
//! A message with fenced code blocks runs them, in order; any other words in it are commentary.
//! Otherwise the whole message (after the app's mention) must be a command: `status`, `pause`,
//! `resume`, `reset`, `files [path]` or `help`, so that chatter such as "status looks fine" in
//! a thread never pauses or resets anything.
//!
//! Slack sends text escaped (`&lt;`, `&gt;`, `&amp;`) and with links wrapped (`<https://x|x>`);
//! code is unescaped before it runs, or `a < b` would reach Python as `a &lt; b`.

/// An interpreter the sandbox can run code with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interpreter {
    Bash,
    Sh,
    Python,
    Node,
}

impl Interpreter {
    /// The argv that runs `code`: the program, its "run this string" flag. Passed as one
    /// argument, never through a shell, so nothing in the code is re-interpreted on the way.
    pub fn argv(self, code: &str) -> Vec<String> {
        let (program, flag) = match self {
            Interpreter::Bash => ("bash", "-c"),
            Interpreter::Sh => ("sh", "-c"),
            Interpreter::Python => ("python3", "-c"),
            Interpreter::Node => ("node", "-e"),
        };
        vec![program.to_owned(), flag.to_owned(), code.to_owned()]
    }

    pub fn name(self) -> &'static str {
        match self {
            Interpreter::Bash => "bash",
            Interpreter::Sh => "sh",
            Interpreter::Python => "python",
            Interpreter::Node => "node",
        }
    }
}

/// A fenced code block's language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Language {
    Runnable(Interpreter),
    /// A language we recognise but cannot run: the reply says which ones we can.
    Unsupported(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeBlock {
    pub language: Language,
    pub code: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Run(Vec<CodeBlock>),
    Status,
    Pause,
    Resume,
    Reset,
    /// List a directory; `None` is the home directory.
    Files(Option<String>),
    Help,
    /// Words that are neither code nor a command.
    Unknown(String),
    /// Nothing at all (a file shared without a comment).
    Empty,
}

impl Command {
    /// Whether this is something to act on in a thread the app was not addressed in.
    pub fn is_actionable(&self) -> bool {
        !matches!(self, Command::Unknown(_) | Command::Empty)
    }
}

/// Languages we can run, by the names people put after the fence.
fn runnable(tag: &str) -> Option<Interpreter> {
    Some(match tag {
        "bash" | "shell" | "console" | "zsh" => Interpreter::Bash,
        "sh" => Interpreter::Sh,
        "python" | "python3" | "py" => Interpreter::Python,
        "node" | "nodejs" | "js" | "javascript" => Interpreter::Node,
        _ => return None,
    })
}

/// Languages we recognise and refuse. A first line that is one word but in neither list is
/// code, not a language: "```ls\npwd```" runs `ls` then `pwd`.
const KNOWN_UNSUPPORTED: &[&str] = &[
    "ruby",
    "rb",
    "go",
    "golang",
    "rust",
    "rs",
    "java",
    "kotlin",
    "kt",
    "c",
    "cpp",
    "c++",
    "cs",
    "csharp",
    "ts",
    "typescript",
    "tsx",
    "jsx",
    "php",
    "perl",
    "pl",
    "r",
    "lua",
    "swift",
    "scala",
    "haskell",
    "hs",
    "elixir",
    "ex",
    "erlang",
    "clojure",
    "julia",
    "dart",
    "sql",
    "powershell",
    "ps1",
    "fish",
    "zig",
    "nim",
    "ocaml",
    "fsharp",
    "groovy",
    "json",
    "yaml",
    "yml",
    "toml",
    "xml",
    "html",
    "css",
    "markdown",
    "md",
    "diff",
    "text",
    "txt",
    "dockerfile",
    "makefile",
];

pub fn parse(text: &str) -> Command {
    let text = unescape(text);
    let blocks = code_blocks(&text);
    if !blocks.is_empty() {
        return Command::Run(blocks);
    }
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Command::Empty;
    }
    let mut words = trimmed.split_whitespace();
    let first = words.next().unwrap_or_default().to_ascii_lowercase();
    let rest: Vec<&str> = words.collect();
    match (first.as_str(), rest.as_slice()) {
        ("status", []) => Command::Status,
        ("pause", []) => Command::Pause,
        ("resume", []) => Command::Resume,
        ("reset", []) => Command::Reset,
        ("help", []) => Command::Help,
        ("files" | "ls", []) => Command::Files(None),
        ("files" | "ls", [path]) => Command::Files(Some((*path).to_owned())),
        _ => Command::Unknown(trimmed.to_owned()),
    }
}

/// Every fenced block, in order. A fence left open runs to the end of the message (people
/// forget the closing fence more often than they mean the backticks literally).
fn code_blocks(text: &str) -> Vec<CodeBlock> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let body_and_after = &rest[start + 3..];
        let (body, after) = match body_and_after.find("```") {
            Some(end) => (&body_and_after[..end], &body_and_after[end + 3..]),
            None => (body_and_after, ""),
        };
        if let Some(block) = block_of(body) {
            blocks.push(block);
        }
        rest = after;
    }
    blocks
}

fn block_of(body: &str) -> Option<CodeBlock> {
    let (language, code) = match body.split_once('\n') {
        Some((first, code)) => {
            let tag = first.trim().to_ascii_lowercase();
            if tag.is_empty() {
                (Language::Runnable(Interpreter::Bash), code)
            } else if let Some(interpreter) = runnable(&tag) {
                (Language::Runnable(interpreter), code)
            } else if KNOWN_UNSUPPORTED.contains(&tag.as_str()) {
                (Language::Unsupported(tag), code)
            } else {
                (Language::Runnable(Interpreter::Bash), body)
            }
        }
        // "```echo hi```" on one line: shell.
        None => (Language::Runnable(Interpreter::Bash), body),
    };
    let code = code.trim_matches('\n');
    (!code.trim().is_empty()).then(|| CodeBlock {
        language,
        code: code.to_owned(),
    })
}

/// Undo Slack's message formatting: links become what the person typed, then the three
/// escaped characters come back.
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('>') {
            Some(close) if is_link(&after[..close]) => {
                let inner = &after[..close];
                let shown = inner.split_once('|').map_or(inner, |(_, label)| label);
                out.push_str(shown.strip_prefix("mailto:").unwrap_or(shown));
                rest = &after[close + 1..];
            }
            _ => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn is_link(inner: &str) -> bool {
    ["http://", "https://", "mailto:", "ftp://"]
        .iter()
        .any(|scheme| inner.starts_with(scheme))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(blocks: &[(Language, &str)]) -> Command {
        Command::Run(
            blocks
                .iter()
                .map(|(language, code)| CodeBlock {
                    language: language.clone(),
                    code: (*code).to_owned(),
                })
                .collect(),
        )
    }

    const BASH: Language = Language::Runnable(Interpreter::Bash);
    const SH: Language = Language::Runnable(Interpreter::Sh);
    const PY: Language = Language::Runnable(Interpreter::Python);
    const NODE: Language = Language::Runnable(Interpreter::Node);

    #[test]
    fn messages_parse_to_commands() {
        let cases: Vec<(&str, Command)> = vec![
            ("status", Command::Status),
            ("  STATUS  ", Command::Status),
            ("pause", Command::Pause),
            ("Resume", Command::Resume),
            ("reset", Command::Reset),
            ("help", Command::Help),
            ("files", Command::Files(None)),
            (
                "files /home/user/out",
                Command::Files(Some("/home/user/out".into())),
            ),
            ("ls data", Command::Files(Some("data".into()))),
            ("", Command::Empty),
            ("   ", Command::Empty),
            (
                "status looks fine",
                Command::Unknown("status looks fine".into()),
            ),
            ("reset please", Command::Unknown("reset please".into())),
            ("files a b", Command::Unknown("files a b".into())),
            ("thanks!", Command::Unknown("thanks!".into())),
            ("```echo hi```", run(&[(BASH, "echo hi")])),
            ("```\necho hi\n```", run(&[(BASH, "echo hi")])),
            ("```bash\necho hi\n```", run(&[(BASH, "echo hi")])),
            ("```sh\necho hi\n```", run(&[(SH, "echo hi")])),
            ("```python\nprint(1)\n```", run(&[(PY, "print(1)")])),
            ("```Py\nprint(1)\n```", run(&[(PY, "print(1)")])),
            (
                "```js\nconsole.log(1)\n```",
                run(&[(NODE, "console.log(1)")]),
            ),
            (
                "```node\nconsole.log(1)\n```",
                run(&[(NODE, "console.log(1)")]),
            ),
            (
                "```ruby\nputs 1\n```",
                run(&[(Language::Unsupported("ruby".into()), "puts 1")]),
            ),
            // A one-word first line that is not a language is code.
            ("```ls\npwd\n```", run(&[(BASH, "ls\npwd")])),
            (
                "run this:\n```python\nprint(1)\n```\nthen\n```\nls\n```",
                run(&[(PY, "print(1)"), (BASH, "ls")]),
            ),
            ("```python\nprint(2)", run(&[(PY, "print(2)")])),
            // Empty blocks run nothing; the words are all there is.
            ("``````", Command::Unknown("``````".into())),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), expected, "{text:?}");
        }
    }

    #[test]
    fn code_is_unescaped_before_it_runs() {
        assert_eq!(
            parse("```python\nprint(1 &lt; 2 &amp;&amp; 3 &gt; 2)\n```"),
            run(&[(PY, "print(1 < 2 && 3 > 2)")])
        );
        assert_eq!(
            parse("```curl <https://example.com/x?a=1&amp;b=2>```"),
            run(&[(BASH, "curl https://example.com/x?a=1&b=2")])
        );
        assert_eq!(
            parse("```echo <http://example.com|example.com>```"),
            run(&[(BASH, "echo example.com")])
        );
        assert_eq!(
            parse("```echo <mailto:a@b.c|a@b.c>```"),
            run(&[(BASH, "echo a@b.c")])
        );
        // A mention stays as Slack wrote it; a lone '<' stays too.
        assert_eq!(unescape("<@U1> a <b"), "<@U1> a <b");
    }

    #[test]
    fn interpreters_run_code_as_one_argument() {
        assert_eq!(
            Interpreter::Python.argv("print('a b')"),
            vec!["python3", "-c", "print('a b')"]
        );
        assert_eq!(Interpreter::Node.argv("1")[..2], ["node", "-e"]);
        assert!(!Command::Unknown("x".into()).is_actionable());
        assert!(Command::Status.is_actionable());
    }
}
