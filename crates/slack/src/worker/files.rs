//! The files a thread's sandbox holds, as the worker shows them: `files [path]` lists a
//! directory, and files shared in the thread are copied into the attachments directory.

use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{FileKind, SlackError, SlackFile};

use super::{failure, SlackWorker, HOME, NO_SANDBOX};
use crate::format::escape;

impl SlackWorker {
    pub(super) async fn files(&self, thread_id: &ThreadId, path: Option<&str>) -> String {
        match self.tb.session(thread_id).await {
            Ok(Some(_)) => {}
            Ok(None) => return NO_SANDBOX.to_owned(),
            Err(error) => return failure(&error.into()),
        }
        let path = match path {
            None => HOME.to_owned(),
            Some(p) if p.starts_with('/') => p.to_owned(),
            Some(p) => format!("{HOME}/{p}"),
        };
        match self.tb.list_dir(thread_id, &path).await {
            Ok(mut entries) => {
                if entries.is_empty() {
                    return format!("`{}` is empty.", escape(&path));
                }
                entries.sort_by(|a, b| a.name.cmp(&b.name));
                let shown = entries.len().min(self.config.max_listing);
                let mut lines: Vec<String> = entries[..shown]
                    .iter()
                    .map(|e| match e.kind {
                        FileKind::Dir => format!("{}/", e.name),
                        FileKind::Symlink => format!("{} (link)", e.name),
                        _ => format!("{}  {}", e.name, size_words(e.size)),
                    })
                    .collect();
                if entries.len() > shown {
                    lines.push(format!("… and {} more", entries.len() - shown));
                }
                format!(
                    "`{}`:\n```\n{}\n```",
                    escape(&path),
                    escape(&lines.join("\n"))
                )
            }
            Err(error) => failure(&error),
        }
    }

    /// Copy shared files into the attachments directory; one line per file.
    pub(super) async fn copy_files(&self, thread_id: &ThreadId, files: &[SlackFile]) -> String {
        let mut lines = Vec::new();
        for file in files {
            lines.push(self.copy_file(thread_id, file).await);
        }
        lines.join("\n")
    }

    pub(super) async fn copy_file(&self, thread_id: &ThreadId, file: &SlackFile) -> String {
        let limit = self.config.max_attachment_bytes;
        let needs_info = file.url_private_download.is_none()
            || file.file_access.as_deref() == Some("check_file_info");
        let file = if needs_info {
            match self.api.file_info(&file.id).await {
                Ok(info) => info,
                Err(error) => return format!(":x: Could not look up file {}: {error}", file.id),
            }
        } else {
            file.clone()
        };
        let name = safe_file_name(file.name.as_deref(), &file.id);
        let shown = escape(&name);
        let too_big = |size: u64| {
            format!(
                ":warning: `{shown}` is {}; files over {} are not copied into the sandbox.",
                size_words(size),
                size_words(limit)
            )
        };
        if let Some(size) = file.size.filter(|s| *s > limit) {
            return too_big(size);
        }
        let Some(url) = file.url_private_download.as_deref() else {
            return format!(":x: Slack gave no download link for `{shown}`.");
        };
        let bytes = match self.api.download_file(url, limit).await {
            Ok(bytes) => bytes,
            Err(SlackError::TooLarge { size, .. }) => return too_big(size),
            Err(error) => return format!(":x: Could not download `{shown}`: {error}"),
        };
        let path = format!("{}/{name}", self.config.attachments_dir);
        match self.tb.write_file(thread_id, &path, &bytes).await {
            Ok(()) => format!(
                ":paperclip: Saved `{shown}` ({}) to `{}`",
                size_words(bytes.len() as u64),
                escape(&path)
            ),
            Err(error) => format!(
                ":x: Could not save `{shown}`: {}",
                escape(&error.public_message())
            ),
        }
    }
}

/// A shared file's name as a safe single path component: letters, digits, `.`, `_` and `-`
/// (anything else becomes `_`), no leading dots, at most 100 characters; the file id when
/// nothing is left.
pub fn safe_file_name(name: Option<&str>, id: &str) -> String {
    let cleaned: String = name
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    let cleaned: String = cleaned.chars().take(100).collect();
    if cleaned.trim_matches('_').is_empty() {
        safe_file_name(Some(id), "file")
            .trim_start_matches('.')
            .to_owned()
    } else {
        cleaned
    }
}

/// "512 B", "12.3 KB", "4.0 MB".
pub(super) fn size_words(bytes: u64) -> String {
    const KB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KB {
        format!("{bytes} B")
    } else if b < KB * KB {
        format!("{:.1} KB", b / KB)
    } else if b < KB * KB * KB {
        format!("{:.1} MB", b / (KB * KB))
    } else {
        format!("{:.1} GB", b / (KB * KB * KB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_become_one_safe_component() {
        let cases = [
            (Some("report.csv"), "report.csv"),
            (Some("../../etc/passwd"), "_.._etc_passwd"),
            (Some(".bashrc"), "bashrc"),
            (Some("my file (1).txt"), "my_file__1_.txt"),
            (Some("日本.txt"), "__.txt"),
            (Some("///"), "F123"),
            (None, "F123"),
        ];
        for (name, expected) in cases {
            assert_eq!(safe_file_name(name, "F123"), expected, "{name:?}");
        }
        assert_eq!(safe_file_name(Some(&"a".repeat(300)), "F1").len(), 100);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size_words(512), "512 B");
        assert_eq!(size_words(12_595), "12.3 KB");
        assert_eq!(size_words(20 * 1024 * 1024), "20.0 MB");
    }
}
