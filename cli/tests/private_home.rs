//! A newcomer's first five minutes, where most servers put them: the repository cloned into a
//! private home (0700, as `/root` is), `threadbox dev` started there on its defaults (data in
//! `.threadbox` under the clone, the warm pool on, API keys from `THREADBOX_API_KEYS`), and the
//! banner's `try` lines pasted as printed into the shell that started it, followed by the tour's
//! CLI commands. Every sandbox's root is a host uid of its own that cannot pass through the home,
//! so the sandboxes must live elsewhere (the runc provider's `placement`), while the home and the
//! data directory stay private.
//!
//! Needs root and runc (and git, to clone); skipped without them, or failed when
//! `THREADBOX_REQUIRE_SANDBOXES` is set. The rootless side of the same path is
//! `dev_rootless.rs`, whose ordinary user's home is 0700 too.

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{dev_missing, find_program, prerequisites_met, remove_sandboxes, stop};

const KEY: &str = "newcomer-key-0123456789abcdef0123456789";

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// The server, and where its sandboxes went: stopped, their containers deleted, their mounts
/// detached and their directory removed however the test ends (the tempdir's removal does not
/// follow the link out of the home).
struct Newcomer {
    server: Child,
    home: tempfile::TempDir,
    data: PathBuf,
}

impl Drop for Newcomer {
    fn drop(&mut self) {
        stop(&mut self.server);
        let Ok(state) = std::fs::canonicalize(self.data.join("sandboxes")) else {
            return;
        };
        remove_sandboxes(&state.join("runc"), &state);
        if !state.starts_with(self.home.path()) {
            let _ = std::fs::remove_dir_all(&state);
        }
    }
}

#[test]
fn a_clone_in_a_private_home_runs_the_banner_and_the_tour_as_printed() {
    let mut missing = dev_missing();
    if find_program("git").is_none() {
        missing.push("git".to_owned());
    }
    if !prerequisites_met(
        "a_clone_in_a_private_home_runs_the_banner_and_the_tour_as_printed",
        &missing,
    ) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let clone = home.path().join("threadbox");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cloned = Command::new("git")
        .args(["clone", "--quiet", "--no-local"])
        .arg(workspace)
        .arg(&clone)
        .status()
        .unwrap();
    assert!(cloned.success(), "git clone {}", workspace.display());

    let stderr_path = home.path().join("dev.stderr");
    let server = Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["dev", "--port", "0"])
        .current_dir(&clone)
        .env("THREADBOX_API_KEYS", KEY)
        .env_remove("THREADBOX_API_KEYS_FILE")
        .env_remove("THREADBOX_DATA_DIR")
        .env_remove("THREADBOX_WARM_POOL")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("start threadbox dev");
    let mut newcomer = Newcomer {
        server,
        data: clone.join(".threadbox"),
        home,
    };
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();

    // The banner, up to its last line.
    let stdout = newcomer.server.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let done = line.starts_with("Ctrl-C stops");
            let _ = tx.send(line);
            if done {
                break;
            }
        }
    });
    let mut banner = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no banner; stderr:\n{}", stderr()));
        let done = line.starts_with("Ctrl-C stops");
        banner.push(line);
        if done {
            break;
        }
    }
    let url = banner
        .iter()
        .find_map(|l| l.trim().strip_prefix("API"))
        .expect("the banner names the API")
        .trim()
        .to_owned();

    // The `try` lines, from the label to the next labelled line, pasted as printed.
    let start = banner
        .iter()
        .position(|l| l.trim_start().starts_with("try "))
        .expect("the banner has try lines");
    let try_lines: Vec<&str> = banner[start..]
        .iter()
        .enumerate()
        .take_while(|(n, l)| *n == 0 || l.starts_with("            "))
        .map(|(n, l)| {
            if n == 0 {
                l.trim_start().strip_prefix("try").unwrap().trim()
            } else {
                l.trim()
            }
        })
        .collect();
    assert!(
        try_lines[0].starts_with("export THREADBOX_API_KEY=") && !try_lines[0].contains(KEY),
        "with keys, the first line sets the client's key from the server's, never showing it: \
         {try_lines:?}"
    );
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_threadbox")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!(
        "set -eu\n{}\n\
         threadbox threads exec demo -c 'echo \"kept across pauses\" > ~/note.txt; id -un'\n\
         threadbox threads pause demo\n\
         threadbox threads resume demo\n\
         threadbox threads exec demo -- cat /home/user/note.txt\n",
        try_lines.join("\n")
    );
    // The shell that started the server: its keys variable, and nothing of the client's.
    let run = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&clone)
        .env("PATH", path)
        .env("THREADBOX_API_KEYS", KEY)
        .env("THREADBOX_URL", &url)
        .env_remove("THREADBOX_API_KEY")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the tour failed:\n{script}\nstdout:\n{out}\nstderr:\n{}\nserver:\n{}",
        String::from_utf8_lossy(&run.stderr),
        stderr()
    );
    assert!(
        out.contains(r#""stdout":"hello\n""#),
        "the banner's exec ran: {out}"
    );
    assert!(
        out.contains(r#""thread_id":"demo""#),
        "the listing shows it: {out}"
    );
    assert!(
        out.contains("user\n") && out.ends_with("kept across pauses\n"),
        "the tour's commands ran, and the file outlived a pause: {out}"
    );

    // The sandboxes live where their roots reach, behind a link; the home stays private, and
    // so does the data directory's own content.
    let data = &newcomer.data;
    let state = std::fs::read_link(data.join("sandboxes")).expect("sandboxes/ is a link");
    assert!(
        state.starts_with("/var/lib/threadbox/state"),
        "{}",
        state.display()
    );
    assert_eq!(mode(newcomer.home.path()), 0o700, "the home stays private");
    assert_eq!(mode(data), 0o711);
    assert_eq!(mode(&data.join("threadbox.db")), 0o600);
    assert!(
        banner
            .iter()
            .any(|l| l.contains(&format!("sandboxes/ → {}", state.display()))),
        "the banner says where the sandboxes are: {banner:?}"
    );
    // The warm pool filled in the background, as everything else did, without a refusal.
    let log = stderr();
    assert!(
        !log.contains("permission denied") && !log.contains("runc run failed"),
        "{log}"
    );
}
