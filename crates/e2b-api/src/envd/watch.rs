//! envd's directory watching over threadbox's file use cases: `WatchDir` (server streaming, what
//! the JS SDK and the async Python SDK use) and `CreateWatcher`, `GetWatcherEvents`,
//! `RemoveWatcher` (polled, what the sync Python SDK uses).
//!
//! A watcher compares listings of the directory (its entries, or with `recursive` everything
//! below it down to 16 levels, at most 10,000 entries): a path that appeared is `CREATE`, one
//! that went is `REMOVE`, a file whose size or time changed is `WRITE` (one whose kind changed
//! is a `REMOVE` and a `CREATE`). So it works the same
//! on every provider, starts nothing in the sandbox and keeps nothing there: a listing is a read
//! of the home from the host on runc (no process, no inotify watch the sandbox could exhaust or
//! flood), and what a watcher holds is bounded. What it cannot see: a change undone between two
//! looks, a rename (a `REMOVE` and a `CREATE`), permission changes (`CHMOD`), and a write that
//! keeps both size and time.
//!
//! Bounds: a stream looks every [`POLL`] and lasts at most its deadline or [`MAX_STREAM`]; at most
//! [`MAX_STREAMS`] streams and [`MAX_WATCHERS`] polled watchers ([`MAX_SANDBOX_WATCHERS`] of one
//! sandbox) run at once per server (past that, `resource_exhausted`); a polled watcher not
//! asked for [`WATCHER_IDLE`] is forgotten.
//! Polled watchers live in the server that made them (on AWS, the function instance), so a
//! `GetWatcherEvents` answered elsewhere is `not_found`: `WatchDir` has no such limit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use threadbox_core::domain::{Millis, Status, ThreadId};
use threadbox_core::ports::FileKind;
use threadbox_core::usecases::UseCaseError;
use threadbox_e2b::wire::{end_stream_frame, message_frame};

use super::process::{failed_stream, stream_response, Pacing, Streamed};
use super::{envd_path, Answer, Reached, Unary, HOME};
use crate::error::ConnectError;
use crate::E2bApi;

/// How often a watcher looks.
pub(crate) const POLL: Duration = Duration::from_millis(500);
/// The longest a `WatchDir` stream lasts (the SDKs ask for less, 60 s by default).
const MAX_STREAM: Duration = Duration::from_secs(60 * 60);
/// `WatchDir` streams at once, per server.
const MAX_STREAMS: usize = 64;
/// Polled watchers kept at once, per server and per sandbox.
const MAX_WATCHERS: usize = 64;
const MAX_SANDBOX_WATCHERS: usize = 8;
/// A polled watcher nobody asked for events this long is forgotten.
const WATCHER_IDLE: Duration = Duration::from_secs(10 * 60);
/// The deepest a recursive watch looks, and the most entries it holds.
const MAX_DEPTH: u32 = 16;
const MAX_ENTRIES: usize = 10_000;

/// What a look saw of each path (relative to the watched folder): kind, size and time.
type Listing = BTreeMap<String, (FileKind, u64, Option<Millis>)>;

/// The server's watchers: a permit per stream, and the polled ones by id.
pub(crate) struct Watchers {
    streams: Arc<Semaphore>,
    polled: Mutex<HashMap<String, Polled>>,
}

impl Default for Watchers {
    fn default() -> Self {
        Self {
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
            polled: Mutex::new(HashMap::new()),
        }
    }
}

struct Polled {
    thread: ThreadId,
    path: String,
    recursive: bool,
    seen: Listing,
    asked: Instant,
}

#[derive(Deserialize)]
pub(super) struct WatchRequest {
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Deserialize)]
pub(super) struct WatcherRequest {
    #[serde(rename = "watcherId")]
    watcher_id: String,
}

/// One look at `path`: its entries (and with `recursive`, those below it), by path relative to
/// it. threadbox's own records (`~/.threadbox`) are left out. The first look goes through the
/// file use case (resuming a paused sandbox, as envd's auto-resume does, and `not_found` for a
/// folder that is not there); later ones read the sandbox where it is, paused or not, and end
/// the watch when it is gone (never making another).
async fn look(
    at: &Reached,
    path: &str,
    recursive: bool,
    first: bool,
) -> Result<Option<Listing>, ConnectError> {
    let mut seen = Listing::new();
    let mut level = vec![path.to_owned()];
    let depth = if recursive { MAX_DEPTH } else { 1 };
    let records = format!("{HOME}/.threadbox");
    for step in 0..depth {
        let mut next = Vec::new();
        for dir in &level {
            let entries = if first && step == 0 {
                at.tb.list_dir(&at.thread, dir).await?
            } else {
                match at.tb.peek_dir(&at.thread, dir).await {
                    // Not readable where it is now (being made or resumed, or paused on a
                    // provider that sleeps with it): no look this time.
                    Err(UseCaseError::NoSandbox { status, .. }) if live(status) => return Ok(None),
                    // Killed meanwhile: the watch ends (a look must never make a sandbox).
                    Err(UseCaseError::NoSandbox { .. }) => {
                        return Err(ConnectError::new(
                            "not_found",
                            "the sandbox is gone; the watch ended",
                        ))
                    }
                    // A folder below that went between two reads: its removal is seen.
                    Err(_) if step > 0 => continue,
                    listed => listed,
                }?
            };
            for entry in entries {
                if entry.path == records {
                    continue;
                }
                if seen.len() == MAX_ENTRIES {
                    return Err(ConnectError::new(
                        "resource_exhausted",
                        format!("{path} holds more than {MAX_ENTRIES} entries to watch"),
                    ));
                }
                let name = entry
                    .path
                    .strip_prefix(path)
                    .unwrap_or(&entry.path)
                    .trim_start_matches('/')
                    .to_owned();
                if entry.kind == FileKind::Dir && recursive {
                    next.push(entry.path.clone());
                }
                seen.insert(name, (entry.kind, entry.size, entry.modified));
            }
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    Ok(Some(seen))
}

/// A thread whose sandbox is there, or on its way.
fn live(status: Status) -> bool {
    matches!(
        status,
        Status::Creating | Status::Active | Status::Pausing | Status::Paused | Status::Resuming
    )
}

/// The events between two looks, as envd's `FilesystemEvent`s, in path order.
fn changes(before: &Listing, after: &Listing) -> Vec<Value> {
    let event = |name: &str, kind: &str| json!({ "name": name, "type": kind });
    let mut out = Vec::new();
    for (name, was) in before {
        match after.get(name) {
            None => out.push(event(name, "EVENT_TYPE_REMOVE")),
            Some(now) if now.0 != was.0 => {
                out.push(event(name, "EVENT_TYPE_REMOVE"));
                out.push(event(name, "EVENT_TYPE_CREATE"));
            }
            // A folder's own time changes with its entries, which have events of their own.
            Some(now) if now != was && now.0 != FileKind::Dir => {
                out.push(event(name, "EVENT_TYPE_WRITE"))
            }
            Some(_) => {}
        }
    }
    for name in after.keys().filter(|name| !before.contains_key(*name)) {
        out.push(event(name, "EVENT_TYPE_CREATE"));
    }
    out
}

fn busy(what: &str, most: usize) -> ConnectError {
    ConnectError::new(
        "resource_exhausted",
        format!("this server already runs {most} {what}; stop one first"),
    )
}

/// `WatchDir`: `start`, then each look's changes as `filesystem` events (a `keepalive` when
/// quiet), until the reader goes, the deadline or [`MAX_STREAM`].
pub(super) async fn watch_dir(
    State(api): State<E2bApi>,
    Extension(at): Extension<Reached>,
    headers: HeaderMap,
    Streamed(request): Streamed<WatchRequest>,
) -> Response {
    let Ok(permit) = api.watchers.streams.clone().try_acquire_owned() else {
        return failed_stream(busy("directory watches", MAX_STREAMS));
    };
    let path = match envd_path(&request.path) {
        Ok(path) => path,
        Err(error) => return failed_stream(error),
    };
    let seen = match look(&at, &path, request.recursive, true).await {
        Ok(seen) => seen.unwrap_or_default(),
        Err(error) => return failed_stream(error),
    };
    let pacing = Pacing::of(&headers);
    let (tx, rx) = mpsc::channel(16);
    let _ = tx.try_send(message_frame(&json!({ "start": {} })));
    tokio::spawn(stream(
        at,
        path,
        request.recursive,
        seen,
        pacing,
        tx,
        permit,
    ));
    stream_response(rx)
}

async fn stream(
    at: Reached,
    path: String,
    recursive: bool,
    mut seen: Listing,
    pacing: Pacing,
    tx: mpsc::Sender<Vec<u8>>,
    _permit: OwnedSemaphorePermit,
) {
    let end = pacing
        .deadline
        .unwrap_or_else(|| Instant::now() + MAX_STREAM)
        .min(Instant::now() + MAX_STREAM);
    let mut quiet_since = Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = tx.closed() => return,
        }
        if Instant::now() >= end {
            let _ = tx.send(end_stream_frame(None)).await;
            return;
        }
        let now = match look(&at, &path, recursive, false).await {
            Ok(Some(now)) => now,
            Ok(None) => seen.clone(),
            Err(error) => {
                let _ = tx
                    .send(end_stream_frame(Some((error.code, &error.message))))
                    .await;
                return;
            }
        };
        let events = changes(&seen, &now);
        seen = now;
        if events.is_empty() && quiet_since.elapsed() >= pacing.keepalive {
            events_sent(&tx, vec![json!({ "keepalive": {} })]).await;
            quiet_since = Instant::now();
        } else if !events.is_empty() {
            let frames = events
                .into_iter()
                .map(|e| json!({ "filesystem": e }))
                .collect();
            if !events_sent(&tx, frames).await {
                return;
            }
            quiet_since = Instant::now();
        }
    }
}

async fn events_sent(tx: &mpsc::Sender<Vec<u8>>, messages: Vec<Value>) -> bool {
    for message in messages {
        if tx.send(message_frame(&message)).await.is_err() {
            return false;
        }
    }
    true
}

/// `CreateWatcher`: a polled watcher, as of now.
pub(super) async fn create_watcher(
    State(api): State<E2bApi>,
    Extension(at): Extension<Reached>,
    Unary(request): Unary<WatchRequest>,
) -> Answer {
    let path = envd_path(&request.path)?;
    let seen = look(&at, &path, request.recursive, true)
        .await?
        .unwrap_or_default();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let mut polled = api
        .watchers
        .polled
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    polled.retain(|_, w| w.asked.elapsed() < WATCHER_IDLE);
    if polled.len() >= MAX_WATCHERS {
        return Err(busy("polled directory watchers", MAX_WATCHERS));
    }
    if polled.values().filter(|w| w.thread == at.thread).count() >= MAX_SANDBOX_WATCHERS {
        return Err(ConnectError::new(
            "resource_exhausted",
            format!("this sandbox already has {MAX_SANDBOX_WATCHERS} watchers; remove one first"),
        ));
    }
    polled.insert(
        id.clone(),
        Polled {
            thread: at.thread.clone(),
            path,
            recursive: request.recursive,
            seen,
            asked: Instant::now(),
        },
    );
    Ok(Json(json!({ "watcherId": id })))
}

fn no_watcher(id: &str) -> ConnectError {
    let shown: String = id.chars().take(64).collect();
    ConnectError::new("not_found", format!("watcher with id {shown} not found"))
}

/// `GetWatcherEvents`: what changed since the watcher last looked.
pub(super) async fn get_watcher_events(
    State(api): State<E2bApi>,
    Extension(at): Extension<Reached>,
    Unary(request): Unary<WatcherRequest>,
) -> Answer {
    let id = request.watcher_id;
    let (path, recursive) = {
        let polled = api
            .watchers
            .polled
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match polled.get(&id) {
            Some(w) if w.thread == at.thread => (w.path.clone(), w.recursive),
            _ => return Err(no_watcher(&id)),
        }
    };
    let Some(now) = look(&at, &path, recursive, false).await? else {
        return Ok(Json(json!({ "events": [] })));
    };
    let mut polled = api
        .watchers
        .polled
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let watcher = polled.get_mut(&id).ok_or_else(|| no_watcher(&id))?;
    let events = changes(&watcher.seen, &now);
    watcher.seen = now;
    watcher.asked = Instant::now();
    Ok(Json(json!({ "events": events })))
}

/// `RemoveWatcher`.
pub(super) async fn remove_watcher(
    State(api): State<E2bApi>,
    Extension(at): Extension<Reached>,
    Unary(request): Unary<WatcherRequest>,
) -> Answer {
    let mut polled = api
        .watchers
        .polled
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    match polled.get(&request.watcher_id) {
        Some(w) if w.thread == at.thread => {
            polled.remove(&request.watcher_id);
            Ok(Json(json!({})))
        }
        _ => Err(no_watcher(&request.watcher_id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_between_two_looks_are_envds_events() {
        let entry = |kind, size, at| (kind, size, Some(Millis(at)));
        let before = Listing::from([
            ("a.txt".into(), entry(FileKind::File, 1, 10)),
            ("gone".into(), entry(FileKind::File, 1, 10)),
            ("same".into(), entry(FileKind::File, 5, 10)),
            ("sub".into(), entry(FileKind::Dir, 0, 10)),
            ("was-file".into(), entry(FileKind::File, 1, 10)),
        ]);
        let after = Listing::from([
            ("a.txt".into(), entry(FileKind::File, 2, 11)),
            ("new/b".into(), entry(FileKind::File, 0, 12)),
            ("same".into(), entry(FileKind::File, 5, 10)),
            ("sub".into(), entry(FileKind::Dir, 0, 12)),
            ("was-file".into(), entry(FileKind::Dir, 0, 12)),
        ]);
        let got: Vec<(String, String)> = changes(&before, &after)
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["type"].as_str().unwrap().into(),
                )
            })
            .collect();
        let want = [
            ("a.txt", "EVENT_TYPE_WRITE"),
            ("gone", "EVENT_TYPE_REMOVE"),
            ("was-file", "EVENT_TYPE_REMOVE"),
            ("was-file", "EVENT_TYPE_CREATE"),
            ("new/b", "EVENT_TYPE_CREATE"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        assert_eq!(got, want);
        assert!(changes(&after, &after).is_empty());
    }
}
