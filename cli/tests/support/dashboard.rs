//! The dashboard's browser tests: headless Chromium, driven over WebDriver, beside a running
//! `threadbox dev`, and the steps the tests share on its page.

use std::future::Future;
use std::time::Duration;

use super::webdriver::{Browser, Chromedriver};
use super::{find_program, prerequisites_met, target_dir, DevServer};

/// Long enough for a first command to create the thread's sandbox.
pub const WAIT: Duration = Duration::from_secs(30);

/// A browser beside a running `threadbox dev`, and what the server runs on (`backing`, such as the
/// E2B fake). Fields drop in order: the browser quits before its driver stops, both before the
/// server, and the server before what it runs on.
pub struct Dashboard<T = ()> {
    pub browser: Browser,
    _driver: Chromedriver,
    pub dev: DevServer,
    pub backing: T,
    _tmp: tempfile::TempDir,
}

/// Start the server (`start_dev`) and a browser, or `None` when the machine lacks what the
/// test needs: `missing` and Chromium with its driver (see `prerequisites_met`).
pub async fn start<T, F>(
    test: &str,
    mut missing: Vec<String>,
    start_dev: impl FnOnce() -> F,
) -> Option<Dashboard<T>>
where
    F: Future<Output = (DevServer, T)>,
{
    let chromium = find_program("chromium");
    let chromedriver = find_program("chromedriver");
    if chromium.is_none() {
        missing.push("chromium (apt-get install chromium)".to_owned());
    }
    if chromedriver.is_none() {
        missing.push("chromedriver (apt-get install chromium-driver)".to_owned());
    }
    if !prerequisites_met(test, &missing) {
        return None;
    }
    let (dev, backing) = start_dev().await;
    let tmp = tempfile::tempdir().unwrap();
    let driver =
        Chromedriver::start(&chromedriver.unwrap(), &tmp.path().join("chromedriver.log")).await;
    let browser = Browser::open(&driver, &chromium.unwrap(), &tmp.path().join("profile")).await;
    Some(Dashboard {
        browser,
        _driver: driver,
        dev,
        backing,
        _tmp: tmp,
    })
}

impl<T> Dashboard<T> {
    /// What to show when a wait fails: the server's stderr.
    pub fn context(&self) -> String {
        format!("threadbox dev's stderr:\n{}", self.dev.stderr())
    }

    /// Open the dashboard and wait until it is live over the WebSocket, as `threadbox dev`
    /// offers live events.
    pub async fn open_live(&self) {
        self.browser.goto(&format!("{}/", self.dev.url)).await;
        self.browser
            .wait_for_text("h1", "threadbox dev dashboard", WAIT, || self.context())
            .await;
        self.browser
            .wait_for_text("#connection", "live over WebSocket", WAIT, || {
                self.context()
            })
            .await;
    }

    /// Open the dashboard and wait for its Slack sink panel, empty.
    pub async fn open_sink(&self) {
        self.browser.goto(&format!("{}/", self.dev.url)).await;
        self.browser
            .wait_for_text("#sink-empty", "Nothing posted yet.", WAIT, || {
                self.context()
            })
            .await;
    }

    /// The thread in `row` is paused (by a click): the newest event of the open timeline is
    /// the pause, caused by the user; Resume is offered and Pause is not.
    pub async fn assert_paused_by_user(&self, row: &str) {
        let browser = &self.browser;
        browser
            .wait_for_text("#event-rows tr:first-child .badge", "paused", WAIT, || {
                self.context()
            })
            .await;
        assert_eq!(
            browser.text_of("#event-rows tr:first-child td.cause").await,
            "user"
        );
        let resume_css = format!("{row} button[data-action=\"resume\"]");
        let pause_css = format!("{row} button[data-action=\"pause\"]");
        assert_eq!(browser.attribute_of(&resume_css, "disabled").await, None);
        assert_eq!(
            browser
                .attribute_of(&pause_css, "disabled")
                .await
                .as_deref(),
            Some("true")
        );
    }

    /// Save the page as `target/<name>`, a PNG, for a person to look at.
    pub async fn save_screenshot(&self, name: &str) {
        let png = self.browser.screenshot().await;
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        let path = target_dir().join(name);
        std::fs::write(&path, &png).unwrap();
        eprintln!("saved {}", path.display());
    }
}

/// `threadbox slack <args>` against `dev`, with its data directory (for the signing secret).
pub async fn slack_cli(dev: &DevServer, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .arg("slack")
        .args(args)
        .args(["--url", &dev.url, "--data-dir"])
        .arg(dev.data_dir())
        .env_remove("SLACK_SIGNING_SECRET")
        .env_remove("THREADBOX_API_KEY")
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap()
}

/// `threadbox slack send --thread <thread> <text>`, as Slack would post it, which must succeed.
pub async fn slack_send(dev: &DevServer, thread: &str, text: &str) {
    let sent = slack_cli(dev, &["send", "--thread", thread, text]).await;
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
}
