//! The file operations a provider gets for free over its `exec`: directory listing, stat,
//! mkdir, remove, glob and grep as small scripts every Linux sandbox can run (bash, GNU find,
//! grep). They are the `SandboxProvider` port's default methods, so a new provider implements
//! create, pause, resume, kill, info, list, exec and raw file reads and writes, and gets these
//! (docs/providers.md); runc does them natively on the host, E2B through these.
//!
//! Quoting cannot go wrong because nothing is quoted: each script is a constant, and the
//! caller's path or pattern reaches it as a positional argument (`bash -c SCRIPT threadbox
//! ARG...`), never spliced into shell text. Output is NUL-separated and read as raw bytes (through
//! `exec_streaming`), so any byte a file name may hold (newline included) survives.

use base64::Engine as _;
use tokio::sync::mpsc;

use super::{
    ExecCommand, ExecRequest, FileEntry, FileKind, GrepMatch, OutputChunk, ProviderError,
    SandboxProvider,
};
use crate::domain::Millis;

/// The most output a listing, glob or grep may produce before it is refused as too broad.
const FS_OUTPUT_CAP: usize = 8 * 1024 * 1024;
const FS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Absolute (relative paths are from the user's home, the process's working directory), without
/// trailing slashes, or exit [`NOT_FOUND_EXIT`] when it does not exist.
const EXISTING_PATH: &str = r#"
case $1 in /*) p=$1 ;; *) p=$PWD/$1 ;; esac
while [ "$p" != / ] && [ "${p%/}" != "$p" ]; do p=${p%/}; done
if [ ! -e "$p" ] && [ ! -L "$p" ]; then printf 'no such file or directory: %s\n' "$1" >&2; exit 44; fi
"#;

/// The status a script ends with when the path it was given does not exist (`EXISTING_PATH`):
/// one no tool the scripts run uses, so it means exactly that.
const NOT_FOUND_EXIT: i32 = 44;

/// One record per entry: kind, size, mtime, path, each ended by NUL.
const ENTRY_FORMAT: &str = r"%y\0%s\0%T@\0%p\0";

fn script(body: &str, args: &[&str]) -> ExecRequest {
    let mut argv = vec![
        "/bin/bash".to_owned(),
        "-c".to_owned(),
        body.to_owned(),
        "threadbox".to_owned(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    ExecRequest {
        user: Default::default(),
        command: ExecCommand::Argv(argv),
        cwd: None,
        env: Default::default(),
        stdin: None,
        timeout: FS_TIMEOUT,
        output_cap: FS_OUTPUT_CAP,
    }
}

fn stat_script(path: &str) -> ExecRequest {
    script(
        &format!("{EXISTING_PATH}exec find \"$p\" -maxdepth 0 -printf '{ENTRY_FORMAT}'\n"),
        &[path],
    )
}

fn list_dir_script(path: &str) -> ExecRequest {
    script(
        &format!(
            "{EXISTING_PATH}if [ ! -d \"$p\" ]; then printf 'not a directory: %s\\n' \"$1\" >&2; exit 2; fi\n\
             exec find -H \"$p\" -mindepth 1 -maxdepth 1 -printf '{ENTRY_FORMAT}'\n"
        ),
        &[path],
    )
}

fn make_dir_script(path: &str) -> ExecRequest {
    script(r#"exec mkdir -p -- "$1""#, &[path])
}

/// Removing what is not there succeeds; a non-empty directory needs `recursive`.
fn remove_script(path: &str, recursive: bool) -> ExecRequest {
    if recursive {
        script(r#"exec rm -rf -- "$1""#, &[path])
    } else {
        script(
            r#"if [ -d "$1" ] && [ ! -L "$1" ]; then exec rmdir -- "$1"; else exec rm -f -- "$1"; fi"#,
            &[path],
        )
    }
}

/// bash expands the pattern itself: an unquoted expansion with `IFS` empty is pathname-expanded
/// but never split or evaluated. `globstar` gives `**`; `nullglob` makes no match mean nothing.
fn glob_script(pattern: &str) -> ExecRequest {
    script(
        r#"shopt -s globstar nullglob
IFS=
for f in $1; do
  if [ -e "$f" ] || [ -L "$f" ]; then
    case $f in /*) ;; *) f=$PWD/$f ;; esac
    printf '%s\0' "$f"
  fi
done"#,
        &[pattern],
    )
}

/// `grep -P` (Perl-style, the closest to the Rust `regex` syntax the runc provider uses) when
/// the template's grep has it, else `-E`. Binary files are skipped; unreadable ones are ignored;
/// FIFOs, sockets and devices are never read (`-D skip`: one planted as the path itself would
/// otherwise block the search for its whole timeout).
fn grep_script(pattern: &str, path: &str) -> ExecRequest {
    script(
        &format!(
            r#"{EXISTING_PATH}grep -qP '' /dev/null 2>/dev/null
if [ $? -le 1 ]; then mode=-P; else mode=-E; fi
grep -rnHIZs -D skip "$mode" -e "$2" -- "$p"
s=$?
if [ $s -le 1 ]; then exit 0; fi
exit $s"#
        ),
        // The script reads the path as $1 (shared prologue) and the pattern as $2.
        &[path, pattern],
    )
}

/// An absolute-or-relative path a script may be given: not empty, no NUL, no `..`.
pub fn checked_path(path: &str) -> Result<&str, ProviderError> {
    if path.is_empty() {
        return Err(ProviderError::InvalidRequest("an empty path".into()));
    }
    if path.contains('\0') || path.split('/').any(|part| part == "..") {
        return Err(ProviderError::InvalidRequest(format!(
            "{path}: paths may not contain '..' or NUL"
        )));
    }
    Ok(path)
}

/// Run a script and return its raw stdout. A non-zero exit is the caller's mistake (no such
/// path, not a directory, bad pattern) and carries the script's message. With
/// `silent_failure_ok`, a failure that printed nothing counts as success (grep's exit 2 for
/// files it could not read, which `-s` keeps quiet about).
async fn run<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    request: ExecRequest,
    silent_failure_ok: bool,
) -> Result<Vec<u8>, ProviderError> {
    let (sink, mut output) = mpsc::channel(64);
    let collect = async {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(chunk) = output.recv().await {
            match chunk {
                OutputChunk::Stdout(bytes) => stdout.extend_from_slice(&bytes),
                OutputChunk::Stderr(bytes) => stderr.extend_from_slice(&bytes),
            }
        }
        (stdout, stderr)
    };
    let (result, (stdout, stderr)) =
        tokio::join!(provider.exec_streaming(sandbox_id, request, sink), collect);
    let result = result?;
    if silent_failure_ok && result.exit_code.is_some() && stderr.is_empty() {
        return Ok(stdout);
    }
    if result.timed_out {
        return Err(ProviderError::Unavailable(format!(
            "file operation in sandbox {sandbox_id} timed out"
        )));
    }
    if result.truncated {
        return Err(ProviderError::InvalidRequest(format!(
            "the result is larger than {FS_OUTPUT_CAP} bytes; narrow the path or pattern"
        )));
    }
    match result.exit_code {
        Some(0) => Ok(stdout),
        Some(NOT_FOUND_EXIT) => Err(ProviderError::NotFound(
            String::from_utf8_lossy(&stderr).trim().to_owned(),
        )),
        code => {
            let message = String::from_utf8_lossy(&stderr).trim().to_owned();
            Err(ProviderError::InvalidRequest(if message.is_empty() {
                format!("file operation failed (exit {code:?})")
            } else {
                message
            }))
        }
    }
}

pub(crate) async fn list_dir<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    path: &str,
) -> Result<Vec<FileEntry>, ProviderError> {
    let out = run(
        provider,
        sandbox_id,
        list_dir_script(checked_path(path)?),
        false,
    )
    .await?;
    parse_entries(&out).map_err(ProviderError::Internal)
}

pub(crate) async fn stat<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    path: &str,
) -> Result<FileEntry, ProviderError> {
    let out = run(
        provider,
        sandbox_id,
        stat_script(checked_path(path)?),
        false,
    )
    .await?;
    parse_entries(&out)
        .map_err(ProviderError::Internal)?
        .pop()
        .ok_or_else(|| ProviderError::Internal(format!("stat of {path} printed nothing")))
}

pub(crate) async fn make_dir<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    path: &str,
) -> Result<(), ProviderError> {
    run(
        provider,
        sandbox_id,
        make_dir_script(checked_path(path)?),
        false,
    )
    .await
    .map(drop)
}

pub(crate) async fn remove<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    path: &str,
    recursive: bool,
) -> Result<(), ProviderError> {
    let script = remove_script(checked_path(path)?, recursive);
    run(provider, sandbox_id, script, false).await.map(drop)
}

pub(crate) async fn glob<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    pattern: &str,
) -> Result<Vec<String>, ProviderError> {
    let out = run(provider, sandbox_id, glob_script(pattern), false).await?;
    Ok(parse_paths(&out))
}

pub(crate) async fn grep<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    pattern: &str,
    path: &str,
) -> Result<Vec<GrepMatch>, ProviderError> {
    let script = grep_script(pattern, checked_path(path)?);
    let out = run(provider, sandbox_id, script, true).await?;
    parse_grep(&out).map_err(ProviderError::Internal)
}

/// Parse `find -printf` records (see [`ENTRY_FORMAT`]), sorted by path.
fn parse_entries(stdout: &[u8]) -> Result<Vec<FileEntry>, String> {
    let fields: Vec<&[u8]> = stdout.split(|b| *b == 0).collect();
    // A trailing NUL leaves one empty field at the end.
    let fields = match fields.split_last() {
        Some((&[], rest)) => rest,
        _ => &fields[..],
    };
    if fields.len() % 4 != 0 {
        return Err(format!(
            "unexpected listing output ({} fields)",
            fields.len()
        ));
    }
    let mut entries = fields
        .chunks(4)
        .map(|f| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let path = text(f[3]);
            let raw_name = f[3].rsplit(|b| *b == b'/').next().unwrap_or_default();
            Ok(FileEntry {
                name_base64: std::str::from_utf8(raw_name)
                    .is_err()
                    .then(|| base64::engine::general_purpose::STANDARD.encode(raw_name)),
                name: name_of(&path),
                kind: match f[0] {
                    b"f" => FileKind::File,
                    b"d" => FileKind::Dir,
                    b"l" => FileKind::Symlink,
                    _ => FileKind::Other,
                },
                size: text(f[1])
                    .parse()
                    .map_err(|_| format!("bad size for {path}"))?,
                modified: parse_mtime(&text(f[2])),
                path,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

/// NUL-separated paths, in the order given (bash sorts its expansions).
fn parse_paths(stdout: &[u8]) -> Vec<String> {
    stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}

/// `grep -nHZ` records: `path NUL line-number ':' text '\n'`.
fn parse_grep(stdout: &[u8]) -> Result<Vec<GrepMatch>, String> {
    let mut out = Vec::new();
    let mut rest = stdout;
    while !rest.is_empty() {
        let nul = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or("grep output without a file name")?;
        let path = String::from_utf8_lossy(&rest[..nul]).into_owned();
        rest = &rest[nul + 1..];
        let colon = rest
            .iter()
            .position(|b| *b == b':')
            .ok_or("grep output without a line number")?;
        let line_number = std::str::from_utf8(&rest[..colon])
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or("grep output with a bad line number")?;
        rest = &rest[colon + 1..];
        let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        out.push(GrepMatch {
            path,
            line_number,
            line: String::from_utf8_lossy(&rest[..end]).into_owned(),
        });
        rest = rest.get(end + 1..).unwrap_or_default();
    }
    Ok(out)
}

fn name_of(path: &str) -> String {
    match path.trim_end_matches('/').rsplit('/').next() {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => "/".to_owned(),
    }
}

/// find's `%T@`: seconds since the epoch with a fraction.
fn parse_mtime(text: &str) -> Option<Millis> {
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    let secs: i64 = secs.parse().ok()?;
    let millis: i64 = frac
        .chars()
        .chain("000".chars())
        .take(3)
        .collect::<String>()
        .parse()
        .ok()?;
    Some(Millis(secs * 1000 + millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_records_parse_including_odd_names() {
        let out = b"f\x0012\x001700000000.5000000000\x00/home/user/a\nb.txt\x00d\x004096\x001700000001\x00/home/user/dir\x00";
        let entries = parse_entries(out).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].name, "a\nb.txt");
        assert_eq!(entries[0].kind, FileKind::File);
        assert_eq!(entries[0].size, 12);
        assert_eq!(entries[0].modified, Some(Millis(1_700_000_000_500)));
        assert_eq!(entries[1].kind, FileKind::Dir);
        assert!(parse_entries(b"f\x001\x00").is_err());
        assert_eq!(parse_entries(b"").unwrap(), vec![]);
    }

    #[test]
    fn grep_records_parse_with_colons_in_paths_and_text() {
        let out = b"/home/user/a:b.txt\x003:key: value\n/home/user/c\x0010:x\n";
        let m = parse_grep(out).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, "/home/user/a:b.txt");
        assert_eq!(m[0].line_number, 3);
        assert_eq!(m[0].line, "key: value");
        assert_eq!(m[1].line_number, 10);
    }

    #[test]
    fn arguments_are_never_spliced_into_the_script() {
        let request = grep_script("$(rm -rf /)", "a'b\"c");
        let ExecCommand::Argv(argv) = request.command else {
            panic!("a script runs as argv")
        };
        assert_eq!(argv[..2], ["/bin/bash", "-c"]);
        assert!(!argv[2].contains("rm -rf"));
        assert_eq!(&argv[4..], ["a'b\"c", "$(rm -rf /)"]);
    }
}
