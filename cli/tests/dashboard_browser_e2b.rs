//! The dashboard in a real browser with `threadbox dev` on E2B: headless Chromium, driven over
//! WebDriver by `chromedriver`, against the real `threadbox dev` whose sandboxes are on the E2B
//! contract fake (`threadbox_testing::e2b_fake`) on 127.0.0.1.
//! - A thread made through the API shows up in the list, green and active, its timeline naming
//!   its E2B sandbox. Pause, clicked in the page, turns the badge pulsing yellow while E2B takes
//!   its time pausing (the fake delays the pause), then grey once E2B holds the sandbox paused;
//!   Resume, clicked, turns it green again with the sandbox running. The timeline lists every
//!   transition with its cause. The page is saved as `target/dashboard-e2b.png`.
//! - The dashboard has no command box: commands reach a sandbox through the API, the CLI or
//!   Slack. A code block sent as a Slack message runs in an E2B sandbox and its output shows in
//!   the page's Slack sink.
//!
//! Needs Debian's `chromium` and `chromium-driver`, and `unshare` (util-linux) with user
//! namespaces or root for the fake; no runc and no root. Without them the tests are skipped with
//! a message, or fail when `THREADBOX_REQUIRE_SANDBOXES` is set.

mod support;

use std::time::Duration;

use serde_json::json;
use support::dashboard::{self, slack_send, Dashboard, WAIT};
use support::e2b::{e2b_missing, start_on_e2b};
use support::webdriver::Browser;
use threadbox_testing::e2b_fake::{E2bFake, FakeState};

/// How long the fake takes over a pause: long enough for the page to show the pausing badge.
const PAUSE_DELAY: Duration = Duration::from_secs(5);
/// How soon after the click the page must show it, leaving E2B pausing still.
const SHOW_PAUSING_WITHIN: Duration = Duration::from_secs(3);

/// The badge colours of `dashboard.css` (`--green`, `--yellow`, `--grey`), as computed styles.
const GREEN: &str = "rgb(26, 127, 55)";
const YELLOW: &str = "rgb(154, 103, 0)";
const GREY: &str = "rgb(89, 99, 110)";

/// Start the E2B fake, `threadbox dev` on it and a browser, or `None` when the machine cannot
/// (see `prerequisites_met`).
async fn start(test: &str) -> Option<Dashboard<E2bFake>> {
    dashboard::start(test, e2b_missing(), || async {
        let fake = E2bFake::start().await;
        (start_on_e2b(&fake, &[]).await, fake)
    })
    .await
}

/// A status badge as the page shows it at one instant.
#[derive(Debug)]
struct Badge {
    text: String,
    class: String,
    color: String,
    /// The animation of its dot: `pulse` while a transition runs, else `none`.
    dot_animation: String,
}

/// Read the badge matching `css` in one script, so its parts come from the same redraw.
async fn badge(browser: &Browser, css: &str) -> Option<Badge> {
    let read = browser
        .execute(
            "const el = document.querySelector(arguments[0]);
             if (!el) return null;
             return {
               text: el.textContent,
               class: el.className,
               color: getComputedStyle(el).color,
               dot: getComputedStyle(el, '::before').animationName,
             };",
            json!([css]),
        )
        .await;
    if read.is_null() {
        return None;
    }
    let field = |name: &str| read[name].as_str().unwrap_or_default().to_owned();
    Some(Badge {
        text: field("text"),
        class: field("class"),
        color: field("color"),
        dot_animation: field("dot"),
    })
}

/// Wait until the badge matching `css` says `status`, and return it as seen then.
async fn wait_for_badge(
    browser: &Browser,
    css: &str,
    status: &str,
    within: Duration,
    context: impl Fn() -> String,
) -> Badge {
    let deadline = std::time::Instant::now() + within;
    let mut last = None;
    loop {
        if let Some(seen) = badge(browser, css).await {
            if seen.text == status {
                return seen;
            }
            last = Some(seen);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{css} did not show {status:?} within {within:?}; last seen: {last:?}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The timeline's rows, newest first, as `(seq, change, cause)`; read in one script.
async fn timeline(browser: &Browser) -> Vec<(String, String, String)> {
    let rows = browser
        .execute(
            "return [...document.querySelectorAll('#event-rows tr')].map((row) =>
               [row.cells[0].textContent, row.cells[2].textContent, row.cells[3].textContent]);",
            json!([]),
        )
        .await;
    rows.as_array()
        .unwrap_or_else(|| panic!("timeline rows: {rows}"))
        .iter()
        .map(|row| {
            let cell = |i: usize| row[i].as_str().unwrap_or_default().to_owned();
            (cell(0), cell(1), cell(2))
        })
        .collect()
}

/// Wait for the E2B fake to hold `sandbox_id` in `state`.
async fn wait_for_fake(fake: &E2bFake, sandbox_id: &str, state: FakeState) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let now = fake.sandbox(sandbox_id).map(|s| s.state);
        if now == Some(state) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "E2B never held {sandbox_id} {state:?}; it is {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Open the timeline of the thread in `row`, which must name its E2B sandbox.
async fn open_timeline(
    browser: &Browser,
    row: &str,
    sandbox_id: &str,
    context: impl Fn() -> String,
) {
    browser
        .click_on(&format!("{row} button[data-action=\"select\"]"))
        .await;
    wait_for_detail(browser, sandbox_id, context).await;
}

/// The open timeline names `sandbox_id` on E2B, its first generation.
async fn wait_for_detail(browser: &Browser, sandbox_id: &str, context: impl Fn() -> String) {
    browser
        .wait_for_text(
            "#detail-sandbox",
            &format!("{sandbox_id} (e2b, generation 1)"),
            WAIT,
            context,
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_follows_an_e2b_sandbox_through_pause_and_resume() {
    const THREAD: &str = "browser-e2b";
    let Some(dashboard) = start("dashboard_follows_an_e2b_sandbox_through_pause_and_resume").await
    else {
        return;
    };
    let (browser, dev, fake) = (&dashboard.browser, &dashboard.dev, &dashboard.backing);
    let context = || dashboard.context();

    dashboard.open_live().await;

    // A thread made through the API: its first command creates its E2B sandbox, and the list
    // poll finds it.
    let ran = dev
        .post(
            &format!("/v1/threads/{THREAD}/exec"),
            Some(json!({ "cmd": "echo made on e2b" })),
        )
        .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert_eq!(ran["stdout"], "made on e2b\n", "{ran}");
    let record = dev.get(&format!("/v1/threads/{THREAD}")).await;
    let sandbox_id = record["session"]["sandbox_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no sandbox in {record}"))
        .to_owned();
    assert_eq!(
        fake.sandbox(&sandbox_id).map(|s| s.state),
        Some(FakeState::Running),
        "E2B runs {sandbox_id}"
    );

    let row = format!("tr[data-thread=\"{THREAD}\"]");
    let badge_css = format!("{row} .badge");
    let active = wait_for_badge(browser, &badge_css, "active", WAIT, context).await;
    assert_eq!(active.class, "badge badge-active", "{active:?}");
    assert_eq!(active.color, GREEN, "{active:?}");
    assert_eq!(active.dot_animation, "none", "{active:?}");

    // The timeline names the sandbox and its provider.
    open_timeline(browser, &row, sandbox_id.as_str(), context).await;

    // Pause from the page. E2B takes PAUSE_DELAY over it: meanwhile the badge pulses yellow.
    fake.set_pause_delay(PAUSE_DELAY);
    let pause_css = format!("{row} button[data-action=\"pause\"]");
    let resume_css = format!("{row} button[data-action=\"resume\"]");
    assert_eq!(browser.attribute_of(&pause_css, "disabled").await, None);
    browser.click_on(&pause_css).await;
    let pausing =
        wait_for_badge(browser, &badge_css, "pausing", SHOW_PAUSING_WITHIN, context).await;
    assert_eq!(pausing.class, "badge badge-pausing", "{pausing:?}");
    assert_eq!(pausing.color, YELLOW, "{pausing:?}");
    assert_eq!(pausing.dot_animation, "pulse", "{pausing:?}");
    // ... while E2B is still pausing the sandbox.
    wait_for_fake(fake, &sandbox_id, FakeState::Pausing).await;

    let paused = wait_for_badge(browser, &badge_css, "paused", WAIT, context).await;
    assert_eq!(paused.class, "badge badge-paused", "{paused:?}");
    assert_eq!(paused.color, GREY, "{paused:?}");
    assert_eq!(paused.dot_animation, "none", "{paused:?}");
    wait_for_fake(fake, &sandbox_id, FakeState::Paused).await;
    // The timeline has the pause by the user; Resume is offered, Pause is not.
    dashboard.assert_paused_by_user(&row).await;
    dashboard.save_screenshot("dashboard-e2b.png").await;

    // Resume from the page: E2B resumes the same sandbox, and the badge is green again.
    browser.click_on(&resume_css).await;
    let resumed = wait_for_badge(browser, &badge_css, "active", WAIT, context).await;
    assert_eq!(resumed.class, "badge badge-active", "{resumed:?}");
    assert_eq!(resumed.color, GREEN, "{resumed:?}");
    wait_for_fake(fake, &sandbox_id, FakeState::Running).await;
    wait_for_detail(browser, &sandbox_id, context).await;

    // The timeline, newest first: every transition, the last four the clicks'.
    let deadline = std::time::Instant::now() + WAIT;
    let expected = [
        ("6", "resuming → active"),
        ("5", "paused → resuming"),
        ("4", "pausing → paused"),
        ("3", "active → pausing"),
        ("2", "creating → active"),
    ];
    loop {
        let rows = timeline(browser).await;
        let shown: Vec<(&str, &str)> = rows
            .iter()
            .take(5)
            .map(|(seq, change, _)| (seq.as_str(), change.as_str()))
            .collect();
        if shown == expected && rows.len() == 6 {
            assert!(rows[5].1.ends_with("→ creating"), "{rows:?}");
            for (seq, _, cause) in &rows[..4] {
                assert_eq!(cause, "user", "event {seq}: {rows:?}");
            }
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the timeline shows {rows:?}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The resumed sandbox still runs commands, and the page stays as it is.
    let again = dev
        .post(
            &format!("/v1/threads/{THREAD}/exec"),
            Some(json!({ "cmd": "echo still here" })),
        )
        .await;
    assert_eq!(again["stdout"], "still here\n", "{again}");
    assert_eq!(fake.sandboxes_started(), 1, "one sandbox for the thread");
    let notice = browser.attribute_of("#notice", "hidden").await;
    assert_eq!(
        notice.as_deref(),
        Some("true"),
        "{}",
        browser.text_of("#notice").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_sink_shows_output_of_a_command_run_on_e2b() {
    const SLACK_THREAD: &str = "slack:T1:C9:1700000200.000100";
    let Some(dashboard) = start("dashboard_sink_shows_output_of_a_command_run_on_e2b").await else {
        return;
    };
    let (browser, dev, fake) = (&dashboard.browser, &dashboard.dev, &dashboard.backing);
    let context = || dashboard.context();
    dashboard.open_sink().await;

    // A code block in a Slack thread, through the signed ingress; the worker runs it in the
    // thread's E2B sandbox and replies to the local sink. Only the sandbox can print "sum=42".
    slack_send(dev, SLACK_THREAD, "```\necho sum=$((6 * 7))\n```").await;

    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let shown = browser
            .execute(
                "const list = document.getElementById('sink-messages');
                 return list ? list.textContent : '';",
                json!([]),
            )
            .await;
        if shown.as_str().is_some_and(|t| t.contains("sum=42")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no output in the sink panel; it shows {shown}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The Slack thread is in the list, active, on an E2B sandbox.
    let row = format!("tr[data-thread=\"{SLACK_THREAD}\"]");
    let active = wait_for_badge(browser, &format!("{row} .badge"), "active", WAIT, context).await;
    assert_eq!(active.color, GREEN, "{active:?}");
    let sandboxes = fake.sandboxes();
    assert_eq!(sandboxes.len(), 1, "{sandboxes:#?}");
    assert_eq!(sandboxes[0].state, FakeState::Running, "{sandboxes:#?}");
    let sandbox_id = &sandboxes[0].sandbox_id;
    open_timeline(browser, &row, sandbox_id.as_str(), context).await;
}
