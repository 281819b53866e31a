//! Directory listing, stat, mkdir, remove, glob and grep, as small scripts run through envd's
//! process API.
//!
//! Why not envd's `filesystem.Filesystem` RPCs: their messages are documented only in envd's
//! protobuf sources (docs/e2b.md §8), and guessing a protobuf schema is worse than running the
//! tools every E2B template has (bash, GNU find, grep). Quoting cannot go wrong because nothing is quoted: each
//! script is a constant, and the caller's path or pattern reaches it as a positional argument
//! (`bash -c SCRIPT threadbox ARG...`), never spliced into shell text. Output is NUL-separated,
//! so any byte a file name may hold (newline included) survives.

use crate::domain::Millis;
use crate::ports::{FileEntry, FileKind, GrepMatch};
use base64::Engine as _;

use super::envd::ProcessSpec;

/// The most output a listing, glob or grep may produce before it is refused as too broad.
pub(crate) const FS_OUTPUT_CAP: usize = 8 * 1024 * 1024;
const FS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Absolute (relative paths are from the user's home, the process's working directory), without
/// trailing slashes, or exit 2 when it does not exist.
const EXISTING_PATH: &str = r#"
case $1 in /*) p=$1 ;; *) p=$PWD/$1 ;; esac
while [ "$p" != / ] && [ "${p%/}" != "$p" ]; do p=${p%/}; done
if [ ! -e "$p" ] && [ ! -L "$p" ]; then printf 'no such file or directory: %s\n' "$1" >&2; exit 2; fi
"#;

/// One record per entry: kind, size, mtime, path, each ended by NUL.
const ENTRY_FORMAT: &str = r"%y\0%s\0%T@\0%p\0";

fn script(body: &str, args: &[&str]) -> ProcessSpec {
    let mut argv = vec!["-c".to_owned(), body.to_owned(), "threadbox".to_owned()];
    argv.extend(args.iter().map(|a| a.to_string()));
    ProcessSpec {
        cmd: "/bin/bash".to_owned(),
        args: argv,
        envs: Default::default(),
        cwd: None,
        stdin: None,
        timeout: FS_TIMEOUT,
        output_cap: FS_OUTPUT_CAP,
        output: None,
    }
}

pub(crate) fn stat(path: &str) -> ProcessSpec {
    script(
        &format!("{EXISTING_PATH}exec find \"$p\" -maxdepth 0 -printf '{ENTRY_FORMAT}'\n"),
        &[path],
    )
}

pub(crate) fn list_dir(path: &str) -> ProcessSpec {
    script(
        &format!(
            "{EXISTING_PATH}if [ ! -d \"$p\" ]; then printf 'not a directory: %s\\n' \"$1\" >&2; exit 2; fi\n\
             exec find -H \"$p\" -mindepth 1 -maxdepth 1 -printf '{ENTRY_FORMAT}'\n"
        ),
        &[path],
    )
}

pub(crate) fn make_dir(path: &str) -> ProcessSpec {
    script(r#"exec mkdir -p -- "$1""#, &[path])
}

/// Removing what is not there succeeds; a non-empty directory needs `recursive`.
pub(crate) fn remove(path: &str, recursive: bool) -> ProcessSpec {
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
pub(crate) fn glob(pattern: &str) -> ProcessSpec {
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
/// the template's grep has it, else `-E`. Binary files are skipped; unreadable ones are ignored.
pub(crate) fn grep(pattern: &str, path: &str) -> ProcessSpec {
    script(
        &format!(
            r#"{EXISTING_PATH}grep -qP '' /dev/null 2>/dev/null
if [ $? -le 1 ]; then mode=-P; else mode=-E; fi
grep -rnHIZs "$mode" -e "$2" -- "$p"
s=$?
if [ $s -le 1 ]; then exit 0; fi
exit $s"#
        ),
        // The script reads the path as $1 (shared prologue) and the pattern as $2.
        &[path, pattern],
    )
}

/// Parse `find -printf` records (see [`ENTRY_FORMAT`]), sorted by path.
pub(crate) fn parse_entries(stdout: &[u8]) -> Result<Vec<FileEntry>, String> {
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
pub(crate) fn parse_paths(stdout: &[u8]) -> Vec<String> {
    stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}

/// `grep -nHZ` records: `path NUL line-number ':' text '\n'`.
pub(crate) fn parse_grep(stdout: &[u8]) -> Result<Vec<GrepMatch>, String> {
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
        let spec = grep("$(rm -rf /)", "a'b\"c");
        assert_eq!(spec.args[0], "-c");
        assert!(!spec.args[1].contains("rm -rf"));
        assert_eq!(&spec.args[3..], ["a'b\"c", "$(rm -rf /)"]);
    }
}
