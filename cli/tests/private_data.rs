//! The data directory of the real `threadbox dev` is private: the sessions, events, queued Slack
//! code and secrets in it are readable by their owner only, even when an earlier run (or a loose
//! umask) left them readable by everyone. Needs root and runc, like the other end-to-end tests.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::json;
use support::{dev_missing, prerequisites_met, DevServer};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_and_everything_in_it_are_owner_only() {
    if !prerequisites_met("private_data", &dev_missing()) {
        return;
    }
    // What an earlier version left: a world-readable directory and database.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = data.join("threadbox.db");
    std::fs::write(&db, b"").unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();

    let dev = DevServer::start_in(Some(&data), &[], &[]).await;
    // Sessions, events, a command's output and a Slack message: every file gets written.
    dev.post(
        "/v1/threads/private-files/exec",
        Some(json!({"cmd": "echo secret"})),
    )
    .await;

    // Others may only pass through, as each sandbox's own root (a host uid of its own) must.
    assert_eq!(mode(&data), 0o711, "the data directory");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let wanted = if path.is_dir() { 0o711 } else { 0o600 };
        assert_eq!(
            mode(&path),
            wanted,
            "{name} is {:o}, should be {wanted:o}",
            mode(&path)
        );
        seen.push(name);
    }
    for expected in [
        "threadbox.db",
        "threadbox.db-wal",
        "threadbox.db-shm",
        "token-secret",
    ] {
        assert!(
            seen.iter().any(|name| name == expected),
            "{expected} missing from {seen:?}"
        );
    }
    let stderr = dev.stderr();
    assert!(
        stderr.contains("made a data file private") && stderr.contains("threadbox.db"),
        "the fix is reported; stderr:\n{stderr}"
    );
}
