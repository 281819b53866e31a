//! glob and grep over a sandbox's files, on the confined walk of `files.rs`: a search starts at
//! a resolved directory and descends with `O_NOFOLLOW`, so it never leaves the sandbox's areas
//! and never loops through symlinked directories (symlinks are listed, not descended).

use std::fs::File;
use std::io::Read;
use std::ops::ControlFlow;
use std::os::fd::OwnedFd;

use rustix::fs::{fstat, openat, FileType, Mode, OFlags, Stat};

use super::bundle::HOME;
use super::files::{errno, file_type, invalid, join, open_dir, read_dir, SandboxFs, MAX_DEPTH};
use threadbox_core::ports::{GrepMatch, ProviderError};

/// Results returned at most; a search that finds more returns the first ones in path order.
pub(crate) const MAX_RESULTS: usize = 10_000;
/// Entries a search may look at before it gives up and asks for a narrower path.
const MAX_VISITED: usize = 200_000;
/// Longest line returned by grep, in bytes; longer lines are cut.
const MAX_LINE: usize = 4096;
/// grep skips files with a NUL byte in their first 8 KiB, as grep does for binary files.
const BINARY_SNIFF: usize = 8192;

impl SandboxFs {
    /// Paths matching a glob: `*` and `?` within one component, `**` across any number of
    /// them. A relative pattern is taken from `/home/user`. Hidden files match like others.
    pub fn glob(&self, pattern: &str) -> Result<Vec<String>, ProviderError> {
        let absolute = if pattern.starts_with('/') {
            pattern.to_owned()
        } else {
            format!("{HOME}/{pattern}")
        };
        let parts: Vec<&str> = absolute
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect();
        if parts.contains(&"..") {
            return Err(invalid(format!("glob {pattern:?} contains '..'")));
        }
        let Some(first_wild) = parts.iter().position(|p| p.contains(['*', '?'])) else {
            // No wildcard: the path itself, if it is there.
            let r = self.resolve(&absolute, false, false)?;
            return Ok(r.stat.map(|_| r.path).into_iter().collect());
        };
        let base = format!("/{}", parts[..first_wild].join("/"));
        let rest = parts[first_wild..].join("/");
        let matcher = glob_regex(&rest)?;
        let max_depth = if rest.contains("**") {
            MAX_DEPTH
        } else {
            parts.len() - first_wild
        };

        let r = self.resolve(&base, true, false)?;
        if r.stat.is_none() {
            return Ok(Vec::new());
        }
        let dir = open_dir(&r, &base)?;
        let mut found = Vec::new();
        // Whether the walk stopped early does not matter: the results say it all.
        let _ = walk(
            &dir,
            &r.path,
            "",
            0,
            max_depth,
            &mut 0,
            &mut |_, _, rel, _| {
                if matcher.is_match(rel) {
                    found.push(join(&r.path, rel));
                    if found.len() >= MAX_RESULTS {
                        tracing::warn!(pattern, "glob stopped at {MAX_RESULTS} results");
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            },
        )?;
        found.sort();
        Ok(found)
    }

    /// Lines matching a regular expression in the file `path`, or in every regular file under
    /// the directory `path`. Binary files and files over the size cap are skipped.
    pub fn grep(&self, pattern: &str, path: &str) -> Result<Vec<GrepMatch>, ProviderError> {
        let regex = regex::bytes::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| invalid(format!("bad regular expression {pattern:?}: {e}")))?;
        let r = self.resolve(path, true, false)?;
        let stat = r
            .stat
            .as_ref()
            .ok_or_else(|| invalid(format!("{path}: no such file or directory")))?;
        let mut matches = Vec::new();
        match (file_type(stat), r.name.as_deref()) {
            (FileType::RegularFile, Some(name)) => {
                self.grep_file(&regex, &r.dir, name, &r.path, &mut matches)?;
            }
            (FileType::Directory, _) => {
                let dir = open_dir(&r, path)?;
                let _ = walk(
                    &dir,
                    &r.path,
                    "",
                    0,
                    MAX_DEPTH,
                    &mut 0,
                    &mut |dir, name, rel, stat| {
                        let size = u64::try_from(stat.st_size).unwrap_or(0);
                        if file_type(stat) == FileType::RegularFile && size <= self.file_cap() {
                            // A file that vanished or changed kind meanwhile is skipped.
                            let _ = self.grep_file(
                                &regex,
                                dir,
                                name,
                                &join(&r.path, rel),
                                &mut matches,
                            );
                        }
                        if matches.len() >= MAX_RESULTS {
                            tracing::warn!(pattern, path, "grep stopped at {MAX_RESULTS} matches");
                            return ControlFlow::Break(());
                        }
                        ControlFlow::Continue(())
                    },
                )?;
            }
            _ => return Err(invalid(format!("{path} is not a file or directory"))),
        }
        matches.truncate(MAX_RESULTS);
        Ok(matches)
    }

    fn grep_file(
        &self,
        regex: &regex::bytes::Regex,
        dir: &OwnedFd,
        name: &str,
        path: &str,
        matches: &mut Vec<GrepMatch>,
    ) -> Result<(), ProviderError> {
        let fd = openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| errno(path, e))?;
        let stat = fstat(&fd).map_err(|e| errno(path, e))?;
        if file_type(&stat) != FileType::RegularFile {
            return Err(invalid(format!("{path} is not a regular file")));
        }
        let mut contents = Vec::new();
        File::from(fd)
            .take(self.file_cap())
            .read_to_end(&mut contents)
            .map_err(|e| invalid(format!("{path}: {e}")))?;
        if contents[..contents.len().min(BINARY_SNIFF)].contains(&0) {
            return Ok(());
        }
        for (index, line) in contents.split_inclusive(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            if regex.is_match(line) {
                let shown = &line[..line.len().min(MAX_LINE)];
                matches.push(GrepMatch {
                    path: path.to_owned(),
                    line_number: index as u64 + 1,
                    line: String::from_utf8_lossy(shown).into_owned(),
                });
                if matches.len() >= MAX_RESULTS {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// What a walk hands its visitor: the directory holding the entry, the entry's name, its path
/// relative to where the walk started, and its own (not followed) status.
type Visitor<'a> = dyn FnMut(&OwnedFd, &str, &str, &Stat) -> ControlFlow<()> + 'a;

/// Depth-first, in name order, to `max_depth` levels below `dir`.
fn walk(
    dir: &OwnedFd,
    dir_path: &str,
    rel: &str,
    depth: usize,
    max_depth: usize,
    visited: &mut usize,
    visit: &mut Visitor<'_>,
) -> Result<ControlFlow<()>, ProviderError> {
    let mut entries = read_dir(dir, dir_path)?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, stat) in entries {
        *visited += 1;
        if *visited > MAX_VISITED {
            return Err(invalid(format!(
                "search looked at more than {MAX_VISITED} entries; give a narrower path"
            )));
        }
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if visit(dir, &name, &child_rel, &stat).is_break() {
            return Ok(ControlFlow::Break(()));
        }
        if file_type(&stat) == FileType::Directory && depth + 1 < max_depth {
            let child_path = join(dir_path, &name);
            // O_NOFOLLOW: a directory swapped for a symlink since we listed it is skipped.
            let Ok(child) = openat(
                dir,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let flow = walk(
                &child,
                &child_path,
                &child_rel,
                depth + 1,
                max_depth,
                visited,
                visit,
            )?;
            if flow.is_break() {
                return Ok(flow);
            }
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Translate a glob (relative, `/`-separated) into an anchored regular expression.
fn glob_regex(glob: &str) -> Result<regex::Regex, ProviderError> {
    let chars: Vec<char> = glob.chars().collect();
    let mut re = String::from("^");
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                let starts_component = i == 0 || chars[i - 1] == '/';
                i += 2;
                if starts_component && chars.get(i) == Some(&'/') {
                    // `**/`: any number of whole directories, including none.
                    re.push_str("(?:[^/]*/)*");
                    i += 1;
                } else {
                    re.push_str(".*");
                }
                continue;
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
        }
        i += 1;
    }
    re.push('$');
    regex::Regex::new(&re).map_err(|e| invalid(format!("bad glob {glob:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_translate() {
        let cases = [
            ("*.txt", "a.txt", true),
            ("*.txt", "d/a.txt", false),
            ("?.txt", "a.txt", true),
            ("?.txt", "ab.txt", false),
            ("**/*.txt", "a.txt", true),
            ("**/*.txt", "d/e/a.txt", true),
            ("**/*.txt", "d/e/a.rs", false),
            ("d/**", "d/e/f", true),
            ("d/**/f", "d/f", true),
            ("d/**/f", "d/x/y/f", true),
            ("a+b(c).txt", "a+b(c).txt", true),
            ("a+b(c).txt", "aab(c).txt", false),
        ];
        for (glob, path, expected) in cases {
            assert_eq!(
                glob_regex(glob).unwrap().is_match(path),
                expected,
                "{glob} vs {path}"
            );
        }
    }

    #[test]
    fn search_in_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join("src/deep")).unwrap();
        std::fs::write(home.join("src/a.rs"), "fn main() {}\n// TODO: one\n").unwrap();
        std::fs::write(home.join("src/deep/b.rs"), "// TODO: two\n").unwrap();
        std::fs::write(home.join("src/bin.dat"), b"TODO\0binary").unwrap();
        std::os::unix::fs::symlink("/etc", home.join("src/etc")).unwrap();
        let fs = SandboxFs::new(home, None, 1 << 20);

        assert_eq!(
            fs.glob("/home/user/src/**/*.rs").unwrap(),
            vec!["/home/user/src/a.rs", "/home/user/src/deep/b.rs"]
        );
        assert_eq!(fs.glob("src/*.rs").unwrap(), vec!["/home/user/src/a.rs"]);
        assert_eq!(
            fs.glob("/home/user/src/a.rs").unwrap(),
            vec!["/home/user/src/a.rs"]
        );
        assert!(fs.glob("/home/user/nothing/*.rs").unwrap().is_empty());
        assert!(fs.glob("/etc/*").is_err());

        let found = fs.grep("TODO: \\w+", "/home/user/src").unwrap();
        let got: Vec<(&str, u64)> = found
            .iter()
            .map(|m| (m.path.as_str(), m.line_number))
            .collect();
        assert_eq!(
            got,
            vec![("/home/user/src/a.rs", 2), ("/home/user/src/deep/b.rs", 1)]
        );
        assert_eq!(found[0].line, "// TODO: one");
        assert!(fs.grep("(", "/home/user/src").is_err());
    }
}
