//! The dashboard in a real browser: headless Chromium, driven over WebDriver by `chromedriver`,
//! against the real `threadbox dev` on runc.
//! - Activity made through the API shows up as an active thread; clicking Pause turns its badge
//!   grey; the timeline shows the changes with their causes, and a resume made through the API
//!   arrives live. The page is saved (paused) as `target/dashboard.png` for a person to look at.
//! - With API keys, the page asks for one and goes live once it has it.
//! - Without the WebSocket, the page polls and still follows changes.
//! - The Slack sink shows what Slack would: a thread's Block Kit status card with its state and
//!   its Pause / Resume / Reset buttons (no raw mrkdwn such as `<!date^…>`), a click on Pause
//!   in the page pauses the thread through the signed interactions route, `threadbox slack
//!   click` resumes it, command output with markup in it shows as text, and Reset opens the
//!   confirmation modal as a dialog that Cancel closes.
//!
//! Needs root, runc, and Debian's `chromium` and `chromium-driver` (`scripts/test.sh` installs
//! them). Without them the tests are skipped with a message, or fail when
//! `THREADBOX_REQUIRE_SANDBOXES` is set.

mod support;

use std::time::Duration;

use serde_json::json;
use support::dashboard::{self, slack_cli, slack_send, Dashboard, WAIT};
use support::webdriver::Browser;
use support::{dev_missing, DevServer};

const THREAD: &str = "browser-demo";

/// Start `threadbox dev` with `env` and a browser, or `None` when the machine cannot (see
/// `prerequisites_met`).
async fn start(test: &str, env: &[(&str, Option<&str>)]) -> Option<Dashboard> {
    dashboard::start(test, dev_missing(), || async {
        (DevServer::start_with_env(&[], env).await, ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_a_thread_go_active_and_pause_from_a_click() {
    let Some(dashboard) = start(
        "dashboard_shows_a_thread_go_active_and_pause_from_a_click",
        &[],
    )
    .await
    else {
        return;
    };
    let Dashboard { browser, dev, .. } = &dashboard;
    let context = || dashboard.context();

    // threadbox dev offers live events, so the page takes them over the WebSocket.
    dashboard.open_live().await;

    // Activity through the API: the first command creates the thread's sandbox.
    let ran = dev
        .post(
            &format!("/v1/threads/{THREAD}/exec"),
            Some(json!({ "cmd": "echo hello from the browser test" })),
        )
        .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");

    let row = format!("tr[data-thread=\"{THREAD}\"]");
    let badge_css = format!("{row} .badge");
    // Rows are redrawn as events arrive, so everything is read by selector, not by a handle
    // that may have gone stale in between.
    browser
        .wait_for_text(&badge_css, "active", WAIT, context)
        .await;
    assert_eq!(
        browser.attribute_of(&badge_css, "class").await.as_deref(),
        Some("badge badge-active")
    );

    // Open the thread's timeline, then pause it from its row.
    browser
        .click_on(&format!("{row} button[data-action=\"select\"]"))
        .await;
    let pause_css = format!("{row} button[data-action=\"pause\"]");
    assert_eq!(
        browser
            .attribute_of(&pause_css, "aria-label")
            .await
            .as_deref(),
        Some("Pause browser-demo")
    );
    browser.click_on(&pause_css).await;

    browser
        .wait_for_text(&badge_css, "paused", WAIT, context)
        .await;
    assert_eq!(
        browser.attribute_of(&badge_css, "class").await.as_deref(),
        Some("badge badge-paused")
    );
    // The timeline has the pause, newest first, with its cause; Resume is offered, Pause is not.
    dashboard.assert_paused_by_user(&row).await;
    let newest = browser.text_of("#event-rows tr:first-child").await;
    assert!(newest.contains("pausing →"), "{newest}");
    dashboard.save_screenshot("dashboard.png").await;

    // A change made elsewhere reaches the open timeline over the WebSocket: while the socket
    // carries the selected thread, the page does not poll its events.
    dev.post(&format!("/v1/threads/{THREAD}/resume"), None)
        .await;
    browser
        .wait_for_text("#event-rows tr:first-child .badge", "active", WAIT, context)
        .await;
    browser
        .wait_for_text(&badge_css, "active", WAIT, context)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_asks_for_the_api_key_when_the_api_requires_one() {
    const KEY: &str = "dashboard-test-key-0123456789abcdef";
    let Some(dashboard) = start(
        "dashboard_asks_for_the_api_key_when_the_api_requires_one",
        &[("THREADBOX_API_KEYS", Some(KEY))],
    )
    .await
    else {
        return;
    };
    let Dashboard { browser, dev, .. } = &dashboard;
    let context = || dashboard.context();
    let made = dev
        .http
        .post(format!("{}/v1/threads/keyed/resolve", dev.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);

    browser.goto(&format!("{}/dashboard", dev.url)).await;
    browser
        .wait_for_text("#connection", "waiting for an API key", WAIT, context)
        .await;
    let input = browser.find("#api-key").await.expect("a key field");
    let submit = browser
        .find("#key-form button[type=\"submit\"]")
        .await
        .expect("a submit button");

    // A wrong key is refused and the form says so.
    browser.type_text(&input, "not-the-key").await;
    browser.click(&submit).await;
    browser
        .wait_for_text("#key-error", "The API refused that key.", WAIT, context)
        .await;

    // The right one lists the thread and goes live.
    browser.type_text(&input, KEY).await;
    browser.click(&submit).await;
    browser
        .wait_for_text("tr[data-thread=\"keyed\"] .badge", "active", WAIT, context)
        .await;
    browser
        .wait_for_text("#connection", "live over WebSocket", WAIT, context)
        .await;
    let form = browser.find("#key-form").await.unwrap();
    assert_eq!(
        browser.attribute(&form, "hidden").await.as_deref(),
        Some("true")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_websocket_the_dashboard_polls() {
    let Some(dashboard) = start("without_the_websocket_the_dashboard_polls", &[]).await else {
        return;
    };
    let Dashboard { browser, dev, .. } = &dashboard;
    let context = || dashboard.context();
    dev.post("/v1/threads/polled/resolve", None).await;

    // `?live=off` keeps the page off the WebSocket, as when a proxy breaks it.
    browser
        .goto(&format!("{}/dashboard?live=off", dev.url))
        .await;
    browser
        .wait_for_text("#connection", "polling every 2 s", WAIT, context)
        .await;
    let row = "tr[data-thread=\"polled\"]";
    browser
        .wait_for_text(&format!("{row} .badge"), "active", WAIT, context)
        .await;
    browser
        .click_on(&format!("{row} button[data-action=\"select\"]"))
        .await;

    // A pause made elsewhere shows up in the list and in the open timeline.
    dev.post("/v1/threads/polled/pause", None).await;
    browser
        .wait_for_text(&format!("{row} .badge"), "paused", WAIT, context)
        .await;
    browser
        .wait_for_text("#event-rows tr:first-child .badge", "paused", WAIT, context)
        .await;
    assert_eq!(browser.text_of("#connection").await, "polling every 2 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_what_slack_would_have_been_sent() {
    let Some(dashboard) = start("dashboard_shows_what_slack_would_have_been_sent", &[]).await
    else {
        return;
    };
    let Dashboard { browser, dev, .. } = &dashboard;
    let context = || dashboard.context();
    dashboard.open_sink().await;

    // A message in a Slack thread, through the signed ingress, as Slack would post it; the
    // reply goes to the local sink (dev has no bot token).
    slack_send(
        dev,
        "slack:T1:C42:1700000000.000100",
        "```\necho hello from the sink\n```",
    )
    .await;

    // The reply shows in the sink panel, and the Slack thread in the thread list.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(list) = browser.find("#sink-messages").await {
            // Redrawn since it was found: look again on the next turn.
            if browser
                .try_text(&list)
                .await
                .is_some_and(|t| t.contains("hello from the sink"))
            {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no reply in the sink panel\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let meta = browser.text_of("#sink-messages li .meta").await;
    assert!(
        meta.starts_with("#C42 · thread 1700000000.000100"),
        "{meta}"
    );
    browser
        .wait_for_text(
            "tr[data-thread=\"slack:T1:C42:1700000000.000100\"] .badge",
            "active",
            WAIT,
            context,
        )
        .await;
}

/// The text of the first element matching `css` once `holds` accepts it, read again as the page
/// redraws; panics with the last text seen after `WAIT`.
async fn wait_for(
    browser: &Browser,
    css: &str,
    what: &str,
    holds: impl Fn(&str) -> bool,
    context: impl Fn() -> String,
) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    let mut last = None;
    loop {
        if let Some(element) = browser.find(css).await {
            if let Some(text) = browser.try_text(&element).await {
                if holds(&text) {
                    return text;
                }
                last = Some(text);
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{css} never showed {what}; last shown: {last:?}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_shows_the_status_card_and_its_buttons_work() {
    let Some(dashboard) = start("the_sink_shows_the_status_card_and_its_buttons_work", &[]).await
    else {
        return;
    };
    let Dashboard { browser, dev, .. } = &dashboard;
    let context = || dashboard.context();
    const SLACK_THREAD: &str = "slack:T1:C77:1700000100.000100";
    dashboard.open_sink().await;

    // A code block in a Slack thread creates its sandbox; the fan-out posts the thread's status
    // card (Block Kit) to the sink and edits it as the state changes.
    slack_send(dev, SLACK_THREAD, "```\necho card\n```").await;

    // The card: the message with a Pause button. Rendered, it names the state and offers
    // Pause and Reset, as buttons, not as text.
    let card = "#sink-messages li:has(button[data-action-id=\"pause\"])";
    let shown = wait_for(
        browser,
        card,
        "the active state",
        |t| t.to_lowercase().contains("active"),
        context,
    )
    .await;
    assert!(
        !shown.contains("<!date^"),
        "raw mrkdwn in the card: {shown}"
    );
    assert_eq!(
        browser
            .text_of(&format!("{card} button[data-action-id=\"pause\"]"))
            .await,
        "Pause"
    );
    assert_eq!(
        browser
            .text_of(&format!("{card} button[data-action-id=\"reset\"]"))
            .await,
        "Reset"
    );
    let page = browser.text_of("body").await;
    assert!(!page.contains("<!date^"), "raw mrkdwn on the page:\n{page}");

    // Pause, clicked in the page: the sink sends the signed block_actions to
    // /slack/interactions, the thread pauses, and the card says so and offers Resume.
    browser
        .click_on(&format!("{card} button[data-action-id=\"pause\"]"))
        .await;
    wait_for(
        browser,
        "#sink-status",
        "the click's answer",
        |t| t.starts_with("Clicked Pause"),
        context,
    )
    .await;
    let resumable = "#sink-messages li:has(button[data-action-id=\"resume\"])";
    wait_for(
        browser,
        resumable,
        "the paused state",
        |t| t.to_lowercase().contains("paused"),
        context,
    )
    .await;
    browser
        .wait_for_text(
            &format!("tr[data-thread=\"{SLACK_THREAD}\"] .badge"),
            "paused",
            WAIT,
            context,
        )
        .await;
    assert_eq!(
        browser
            .text_of(&format!("{resumable} button[data-action-id=\"resume\"]"))
            .await,
        "Resume"
    );

    // Resume from the command line, through the same signed interaction.
    let clicked = slack_cli(dev, &["click", "--thread", SLACK_THREAD, "resume"]).await;
    let said = String::from_utf8_lossy(&clicked.stdout);
    assert!(
        clicked.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&clicked.stderr)
    );
    assert!(said.starts_with("clicked Resume (resume)"), "{said}");
    browser
        .wait_for_text(
            &format!("tr[data-thread=\"{SLACK_THREAD}\"] .badge"),
            "active",
            WAIT,
            context,
        )
        .await;

    // Command output is hostile: markup in it shows as text and never becomes elements.
    slack_send(
        dev,
        SLACK_THREAD,
        "```\necho '<img src=x id=pwned onerror=alert(1)> *not bold* <https://evil.example|x>'\n```",
    )
    .await;
    wait_for(
        browser,
        "#sink-messages",
        "the hostile output as text",
        |t| t.contains("<img src=x id=pwned onerror=alert(1)>"),
        context,
    )
    .await;
    assert_eq!(browser.find("#pwned").await, None, "output became markup");
    assert_eq!(browser.find("#sink-messages img").await, None);

    // Reset asks first: a modal, shown as a dialog; Cancel closes it and resets nothing.
    let reset = slack_cli(dev, &["click", "--thread", SLACK_THREAD, "reset"]).await;
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    wait_for(
        browser,
        "#sink-modal[open] #sink-modal-title",
        "the reset confirmation",
        |t| !t.is_empty(),
        context,
    )
    .await;
    let callback = browser.text_of("#sink-modal-meta").await;
    assert!(callback.contains("reset_confirm"), "{callback}");
    browser.click_on("#sink-modal-cancel").await;
    let deadline = std::time::Instant::now() + WAIT;
    while browser.find("#sink-modal[open]").await.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the modal stayed open\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let page = browser.text_of("body").await;
    assert!(!page.contains("<!date^"), "raw mrkdwn on the page:\n{page}");
    dashboard.save_screenshot("dashboard-slack.png").await;
}
