//! Just enough of the W3C WebDriver protocol to drive headless Chromium through `chromedriver`:
//! open a page, find elements by CSS, read text and attributes, click and type, take a screenshot.
//!
//! WebDriver is JSON over HTTP on loopback, so the reqwest client the CLI already has covers it;
//! a WebDriver crate would add a second HTTP stack for these few calls.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// The key WebDriver puts element references under.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Flags for Chromium in a container, as root: no sandbox (root cannot use it), no GPU, and no
/// background traffic to Google (the machine has no route there, and each attempt stalls).
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,860",
];

/// A `chromedriver` process on a free loopback port; killed on drop.
pub struct Chromedriver {
    child: Child,
    url: String,
}

impl Chromedriver {
    pub async fn start(program: &Path, log: &Path) -> Chromedriver {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let child = Command::new(program)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, which Chromium joins, so drop can end them all together.
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let driver = Chromedriver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(response) = http.get(format!("{}/status", driver.url)).send().await {
                let status: Value = response.json().await.unwrap_or_default();
                if status["value"]["ready"] == true {
                    return driver;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not get ready; its log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        // Sessions were closed by `Browser`'s drop; this catches a browser that did not quit.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// One browser session.
pub struct Browser {
    http: reqwest::Client,
    /// `<driver>/session/<id>`
    session: String,
}

impl Browser {
    /// A fresh Chromium with its own profile directory.
    pub async fn open(driver: &Chromedriver, chromium: &Path, profile: &Path) -> Browser {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": { "binary": chromium, "args": args }
                }
            }
        });
        let answer = call(
            &http,
            reqwest::Method::POST,
            &format!("{}/session", driver.url),
            Some(capabilities),
        )
        .await;
        let id = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {answer}"));
        Browser {
            session: format!("{}/session/{id}", driver.url),
            http,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        call(&self.http, method, &format!("{}{path}", self.session), body).await
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The first element matching `css`, if there is one now.
    pub async fn find(&self, css: &str) -> Option<String> {
        let response = self
            .http
            .post(format!("{}/element", self.session))
            .json(&json!({ "using": "css selector", "value": css }))
            .send()
            .await
            .unwrap();
        let ok = response.status().is_success();
        let answer: Value = response.json().await.unwrap();
        if !ok {
            assert_eq!(answer["value"]["error"], "no such element", "{answer}");
            return None;
        }
        answer["value"][ELEMENT_KEY].as_str().map(str::to_owned)
    }

    /// The element's text, or `None` when the page re-rendered it away since it was found
    /// (a "stale element reference"): the dashboard redraws rows as events arrive.
    pub async fn try_text(&self, element: &str) -> Option<String> {
        self.try_element_get(element, "text")
            .await
            .map(|text| text.as_str().unwrap_or_default().to_owned())
    }

    /// GET `/element/<element>/<what>`: its value, or `None` when the page redrew the element
    /// since it was found (a "stale element reference").
    async fn try_element_get(&self, element: &str, what: &str) -> Option<Value> {
        let response = self
            .http
            .get(format!("{}/element/{element}/{what}", self.session))
            .send()
            .await
            .unwrap();
        let ok = response.status().is_success();
        let answer: Value = response.json().await.unwrap_or_default();
        if !ok {
            assert_eq!(
                answer["value"]["error"], "stale element reference",
                "{what}: {answer}"
            );
            return None;
        }
        Some(answer["value"].clone())
    }

    /// Read `what` of the element matching `css` now, finding it again while the page keeps
    /// redrawing it between the find and the read (the dashboard redraws rows as events and
    /// polls arrive). Panics when nothing matches or it never holds still.
    async fn read_css(&self, css: &str, what: &str) -> Value {
        for _ in 0..50 {
            let element = self
                .find(css)
                .await
                .unwrap_or_else(|| panic!("nothing matches {css}"));
            if let Some(value) = self.try_element_get(&element, what).await {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{css} was redrawn under every read of {what}");
    }

    /// The text of the element matching `css`, read robustly (see `read_css`).
    pub async fn text_of(&self, css: &str) -> String {
        self.read_css(css, "text")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// An attribute of the element matching `css`, read robustly (see `read_css`).
    pub async fn attribute_of(&self, css: &str, name: &str) -> Option<String> {
        self.read_css(css, &format!("attribute/{name}"))
            .await
            .as_str()
            .map(str::to_owned)
    }

    /// Run `script` (a function body; `arguments` holds `args`) in the page and return what it
    /// returns, so a test can read several things at one instant, between two redraws.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// Click the element matching `css`, finding it again if it was redrawn first.
    pub async fn click_on(&self, css: &str) {
        for _ in 0..50 {
            let element = self
                .find(css)
                .await
                .unwrap_or_else(|| panic!("nothing matches {css}"));
            let response = self
                .http
                .post(format!("{}/element/{element}/click", self.session))
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            if response.status().is_success() {
                return;
            }
            let answer: Value = response.json().await.unwrap_or_default();
            assert_eq!(
                answer["value"]["error"], "stale element reference",
                "click {css}: {answer}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{css} was redrawn under every click");
    }

    pub async fn text(&self, element: &str) -> String {
        let answer = self
            .call(
                reqwest::Method::GET,
                &format!("/element/{element}/text"),
                None,
            )
            .await;
        answer.as_str().unwrap_or_default().to_owned()
    }

    pub async fn attribute(&self, element: &str, name: &str) -> Option<String> {
        let answer = self
            .call(
                reqwest::Method::GET,
                &format!("/element/{element}/attribute/{name}"),
                None,
            )
            .await;
        answer.as_str().map(str::to_owned)
    }

    pub async fn click(&self, element: &str) {
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Type into an input, as keystrokes.
    pub async fn type_text(&self, element: &str, text: &str) {
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Wait until the element matching `css` shows exactly `text`; panics with what it showed
    /// last (and `context()`, for the server's log) when that does not happen in time.
    pub async fn wait_for_text(
        &self,
        css: &str,
        text: &str,
        within: Duration,
        context: impl Fn() -> String,
    ) -> String {
        let deadline = Instant::now() + within;
        let mut last = None;
        loop {
            if let Some(element) = self.find(css).await {
                // A stale element was redrawn between find and read: look again.
                if let Some(shown) = self.try_text(&element).await {
                    if shown == text {
                        return element;
                    }
                    last = Some(shown);
                }
            }
            assert!(
                Instant::now() < deadline,
                "{css} did not show {text:?} within {within:?}; last shown: {last:?}\n{}",
                context()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The visible page as PNG bytes.
    pub async fn screenshot(&self) -> Vec<u8> {
        let answer = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(answer.as_str().expect("base64 PNG"))
            .expect("valid base64")
    }
}

/// Ends the session, which makes chromedriver quit Chromium cleanly, also when a test panics
/// halfway (async code cannot run in drop, so the request gets a thread and runtime of its own).
impl Drop for Browser {
    fn drop(&mut self) {
        let session = self.session.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for closing the browser");
            runtime.block_on(async {
                let _ = reqwest::Client::new()
                    .delete(&session)
                    .timeout(Duration::from_secs(20))
                    .send()
                    .await;
            });
        })
        .join();
    }
}

/// One WebDriver command; its `value`, or a panic naming the command and the driver's error.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut request = http.request(method.clone(), url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or_default();
    assert!(status.is_success(), "{method} {url}: {status} {answer}");
    answer["value"].clone()
}
