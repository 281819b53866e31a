//! envd's `filesystem.Filesystem` over threadbox's file use cases (their path checks, holds
//! and limits). Watching a directory is `watch`'s.

use axum::routing::post;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use threadbox_core::ports::{ExecCommand, ExecRequest, FileEntry, FileKind};
use threadbox_core::usecases::UseCaseError;
use threadbox_e2b::rfc3339;

use super::{connect_service, envd_path, watch, Answer, Reached, Unary};
use crate::error::ConnectError;
use crate::E2bApi;

/// The deepest `ListDir` walk taken.
const MAX_DEPTH: u32 = 16;
/// The most entries one `ListDir` answers; past it the call fails rather than answer part.
const MAX_ENTRIES: usize = 10_000;

pub(super) fn routes() -> Router<E2bApi> {
    connect_service(
        "filesystem.Filesystem",
        vec![
            ("Stat", post(stat)),
            ("MakeDir", post(make_dir)),
            ("Move", post(move_entry)),
            ("ListDir", post(list_dir)),
            ("Remove", post(remove)),
            ("WatchDir", post(watch::watch_dir)),
            ("CreateWatcher", post(watch::create_watcher)),
            ("GetWatcherEvents", post(watch::get_watcher_events)),
            ("RemoveWatcher", post(watch::remove_watcher)),
        ],
    )
}

/// `EntryInfo` in protojson (int64 as a string, enums by name, zero values left out).
fn entry_json(entry: &FileEntry) -> Value {
    let kind = match entry.kind {
        FileKind::File => "FILE_TYPE_FILE",
        FileKind::Dir => "FILE_TYPE_DIRECTORY",
        FileKind::Symlink => "FILE_TYPE_SYMLINK",
        FileKind::Other => "FILE_TYPE_UNSPECIFIED",
    };
    let mut info = json!({
        "name": entry.name,
        "type": kind,
        "path": entry.path,
        "size": entry.size.to_string(),
    });
    if let Some(modified) = entry.modified {
        info["modifiedTime"] = json!(rfc3339::format(modified));
    }
    info
}

#[derive(Deserialize)]
struct PathRequest {
    path: String,
}

async fn stat(Extension(at): Extension<Reached>, Unary(request): Unary<PathRequest>) -> Answer {
    let path = envd_path(&request.path)?;
    let entry = at.tb.stat(&at.thread, &path).await?;
    Ok(Json(json!({ "entry": entry_json(&entry) })))
}

/// `MakeDir`: parents included; `already_exists` when the path is there (the SDKs answer
/// `false` then).
async fn make_dir(Extension(at): Extension<Reached>, Unary(request): Unary<PathRequest>) -> Answer {
    let path = envd_path(&request.path)?;
    if at.tb.stat(&at.thread, &path).await.is_ok() {
        return Err(ConnectError::new(
            "already_exists",
            format!("directory '{path}' already exists"),
        ));
    }
    at.tb.make_dir(&at.thread, &path).await?;
    let entry = at.tb.stat(&at.thread, &path).await?;
    Ok(Json(json!({ "entry": entry_json(&entry) })))
}

#[derive(Deserialize)]
struct MoveRequest {
    source: String,
    destination: String,
}

/// `Move`: a rename, run as `mv` in the sandbox (as its user, so confined as every command).
async fn move_entry(
    Extension(at): Extension<Reached>,
    Unary(request): Unary<MoveRequest>,
) -> Answer {
    let source = envd_path(&request.source)?;
    let destination = envd_path(&request.destination)?;
    let mut mv = ExecRequest::shell("");
    mv.command = ExecCommand::Argv(vec![
        "mv".into(),
        "-f".into(),
        "-T".into(),
        "--".into(),
        source.clone(),
        destination.clone(),
    ]);
    let done = at.tb.exec(&at.thread, mv).await?;
    if done.exit_code != Some(0) {
        let code = if done.stderr.contains("No such file") {
            "not_found"
        } else {
            "invalid_argument"
        };
        return Err(ConnectError::new(
            code,
            format!(
                "moving {source} to {destination} failed: {}",
                done.stderr.trim()
            ),
        ));
    }
    let entry = at.tb.stat(&at.thread, &destination).await?;
    Ok(Json(json!({ "entry": entry_json(&entry) })))
}

#[derive(Deserialize)]
struct ListDirRequest {
    path: String,
    #[serde(default)]
    depth: u32,
}

/// A folder below the one a `ListDir` names: read where the sandbox is, as threadbox's API
/// lists a folder (no hold, so no write of the thread's record per folder: a deep walk reads up
/// to [`MAX_ENTRIES`] of them); through the file use case if the sandbox is not in place.
async fn list_below(at: &Reached, dir: &str) -> Result<Vec<FileEntry>, UseCaseError> {
    match at.tb.peek_dir(&at.thread, dir).await {
        Err(UseCaseError::NoSandbox { .. }) => at.tb.list_dir(&at.thread, dir).await,
        listed => listed,
    }
}

/// Entries of `path` down to `depth` levels (1: its own entries), breadth first. The first
/// folder goes through the file use case (which resumes a paused sandbox, as envd's
/// auto-resume does); the ones below it are read in place.
async fn walk(at: &Reached, path: &str, depth: u32) -> Result<Vec<Value>, ConnectError> {
    let mut out = Vec::new();
    let mut level = vec![path.to_owned()];
    for step in 0..depth {
        let mut next = Vec::new();
        for dir in &level {
            let entries = if step == 0 {
                at.tb.list_dir(&at.thread, dir).await?
            } else {
                list_below(at, dir).await?
            };
            for entry in entries {
                if out.len() == MAX_ENTRIES {
                    return Err(ConnectError::new(
                        "resource_exhausted",
                        format!("{path} holds more than {MAX_ENTRIES} entries at this depth"),
                    ));
                }
                if entry.kind == FileKind::Dir {
                    next.push(entry.path.clone());
                }
                out.push(entry_json(&entry));
            }
        }
        level = next;
    }
    Ok(out)
}

/// `ListDir`: depth 0 means 1, as envd takes it.
async fn list_dir(
    Extension(at): Extension<Reached>,
    Unary(request): Unary<ListDirRequest>,
) -> Answer {
    let path = envd_path(&request.path)?;
    if request.depth > MAX_DEPTH {
        return Err(ConnectError::invalid(format!(
            "depth {} is more than {MAX_DEPTH}",
            request.depth
        )));
    }
    let entries = walk(&at, &path, request.depth.max(1)).await?;
    Ok(Json(json!({ "entries": entries })))
}

/// `Remove`: a file, or a directory with everything in it.
async fn remove(Extension(at): Extension<Reached>, Unary(request): Unary<PathRequest>) -> Answer {
    let path = envd_path(&request.path)?;
    at.tb.remove(&at.thread, &path, true).await?;
    Ok(Json(json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::Millis;

    #[test]
    fn entries_are_protojson() {
        let entry = FileEntry {
            name: "a.txt".into(),
            path: "/home/user/a.txt".into(),
            kind: FileKind::File,
            size: 12,
            modified: Some(Millis(0)),
            name_base64: None,
        };
        let json = entry_json(&entry);
        assert_eq!(json["type"], "FILE_TYPE_FILE");
        assert_eq!(json["size"], "12");
        assert_eq!(json["modifiedTime"], "1970-01-01T00:00:00.000Z");
    }
}
