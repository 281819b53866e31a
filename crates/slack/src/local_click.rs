//! Clicks and modal submissions made locally, shaped and signed as Slack's interactivity
//! requests are, so `threadbox dev`'s sink (`POST /v1/slack/sink/click`, `.../submit`) and
//! `threadbox slack click` drive `POST /slack/interactions` exactly as Slack would.
//!
//! Slack posts interactions form-encoded, `payload=<json>`, signed like events (`v0`, over the
//! raw body). The payloads here carry the fields Slack's do (block_actions: team, user, channel,
//! container, message, trigger_id, response_url, actions; view_submission and view_closed: the
//! view with its callback_id and private_metadata), with local stand-ins where only Slack could
//! know the value:
//! - the user is [`LOCAL_USER`], the one developer of the local workspace;
//! - the team comes from the thread id when one is known (`slack:TEAM:CHANNEL[:TS]`, and only
//!   if its channel is the message's), else [`LOCAL_TEAM`]; see [`team_for`];
//! - `response_url` is a placeholder under `.invalid`, which never resolves: threadbox answers
//!   through the Web API (the sink), not through response URLs;
//! - `trigger_id` is fresh and Slack-shaped, so a `views.open` made with it lands in the sink.

use serde_json::{json, Map, Value};

use super::signature::SigningSecret;
use super::thread::SlackPlace;
use threadbox_core::domain::ThreadId;

/// Where Slack posts interactivity requests (the ingress's route, re-exported for callers here).
pub use super::ingress::INTERACTIONS_PATH;
/// The person clicking: the developer (the same user `threadbox slack send` writes as).
pub const LOCAL_USER: &str = "ULOCAL";
/// The workspace when no thread id says which.
pub const LOCAL_TEAM: &str = "TLOCAL";
const LOCAL_APP: &str = "ALOCAL";
const LOCAL_BOT: &str = "BLOCAL";
/// The app's own user, author of the messages it posts (as `threadbox slack send` names it).
pub const APP_USER: &str = "UTHREADBOX";
/// Never reachable (RFC 2606's `.invalid`): threadbox does not answer through response URLs.
pub const RESPONSE_URL: &str = "https://hooks.slack.invalid/actions/local";

/// A button in a message's (or a view's) blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Button {
    pub block_id: String,
    pub action_id: String,
    pub value: Option<String>,
    /// The button's `text` object (`plain_text`).
    pub text: Value,
    /// `primary` or `danger`, when set.
    pub style: Option<String>,
}

/// The first button with `action_id` in `blocks` (a JSON array): in an `actions` block's
/// elements or as a `section`'s accessory. A block without a `block_id` gets `b{index}`: Slack
/// makes one up for such blocks too, and a stable one keeps clicks reproducible.
pub fn find_button(blocks: &Value, action_id: &str) -> Option<Button> {
    let blocks = blocks.as_array()?;
    for (index, block) in blocks.iter().enumerate() {
        let candidates: Vec<&Value> = match block["type"].as_str() {
            Some("actions") => block["elements"]
                .as_array()
                .map(|e| e.iter().collect())
                .unwrap_or_default(),
            Some("section") => block.get("accessory").into_iter().collect(),
            _ => Vec::new(),
        };
        for element in candidates {
            if element["type"] == "button" && element["action_id"] == action_id {
                return Some(Button {
                    block_id: block["block_id"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("b{index}")),
                    action_id: action_id.to_owned(),
                    value: element["value"].as_str().map(str::to_owned),
                    text: element
                        .get("text")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "plain_text", "text": action_id})),
                    style: element["style"].as_str().map(str::to_owned),
                });
            }
        }
    }
    None
}

/// Every button's `action_id` in `blocks`, in order (for "no such button" errors).
pub fn action_ids(blocks: &Value) -> Vec<String> {
    let mut ids = Vec::new();
    for block in blocks.as_array().into_iter().flatten() {
        let elements = block["elements"].as_array().into_iter().flatten();
        for element in elements.chain(block.get("accessory")) {
            if element["type"] == "button" {
                if let Some(id) = element["action_id"].as_str() {
                    ids.push(id.to_owned());
                }
            }
        }
    }
    ids
}

/// The workspace a click in `channel` belongs to: the team of the first of `candidates` that is
/// a Slack thread id in that channel (the caller's `--thread`, or a button's value, which for
/// threadbox's buttons is the thread id), else [`LOCAL_TEAM`]. A thread id from another channel
/// is ignored rather than trusted: the click happens where the message is.
pub fn team_for<'a>(candidates: impl IntoIterator<Item = &'a str>, channel: &str) -> String {
    candidates
        .into_iter()
        // An Undo button's value is `{checkpoint}@{thread}`.
        .map(|raw| raw.rsplit_once('@').map_or(raw, |(_, thread)| thread))
        .filter_map(|raw| ThreadId::parse(raw).ok())
        .filter_map(|id| SlackPlace::of(&id))
        .find(|place| place.channel == channel)
        .map(|place| place.team)
        .unwrap_or_else(|| LOCAL_TEAM.to_owned())
}

/// The message a click lands on.
#[derive(Clone, Copy, Debug)]
pub struct ClickedMessage<'a> {
    pub channel: &'a str,
    pub ts: &'a str,
    pub thread_ts: Option<&'a str>,
    pub text: &'a str,
    /// The message's blocks (a JSON array).
    pub blocks: &'a Value,
    /// Ephemeral messages: Slack's payload then says so and carries no `message`.
    pub ephemeral: bool,
}

/// Slack's `ts` shape for a time in microseconds.
fn ts_of(now_micros: u128) -> String {
    format!("{}.{:06}", now_micros / 1_000_000, now_micros % 1_000_000)
}

/// A fresh trigger id, shaped like Slack's (`digits.digits.hex`).
pub fn trigger_id(now_micros: u128) -> String {
    format!(
        "{}.{}.{}",
        now_micros / 1_000,
        now_micros % 1_000_000_000,
        uuid::Uuid::new_v4().simple()
    )
}

fn team_object(team: &str) -> Value {
    json!({ "id": team, "domain": "local" })
}

fn user_object(team: &str) -> Value {
    json!({ "id": LOCAL_USER, "username": "local", "name": "local", "team_id": team })
}

/// What every interaction payload carries (its type, the app, the team and the user who acted),
/// with the `fields` of its kind.
fn envelope(kind: &str, team: &str, fields: Value) -> Value {
    let mut payload = json!({
        "type": kind,
        "token": "local",
        "api_app_id": LOCAL_APP,
        "is_enterprise_install": false,
        "enterprise": null,
        "team": team_object(team),
        "user": user_object(team),
    });
    if let (Some(payload), Value::Object(fields)) = (payload.as_object_mut(), fields) {
        payload.extend(fields);
    }
    payload
}

/// The `block_actions` payload of a click on `button` in `message`, at `now_micros`.
pub fn block_actions(
    team: &str,
    message: &ClickedMessage<'_>,
    button: &Button,
    now_micros: u128,
) -> Value {
    let action_ts = ts_of(now_micros);
    let mut action = json!({
        "type": "button",
        "action_id": button.action_id,
        "block_id": button.block_id,
        "text": button.text,
        "action_ts": action_ts,
    });
    if let Some(value) = &button.value {
        action["value"] = json!(value);
    }
    if let Some(style) = &button.style {
        action["style"] = json!(style);
    }
    let mut container = json!({
        "type": "message",
        "message_ts": message.ts,
        "channel_id": message.channel,
        "is_ephemeral": message.ephemeral,
    });
    if let Some(thread_ts) = message.thread_ts {
        container["thread_ts"] = json!(thread_ts);
    }
    let mut payload = envelope(
        "block_actions",
        team,
        json!({
            "container": container,
            "trigger_id": trigger_id(now_micros),
            "channel": { "id": message.channel, "name": message.channel },
            "state": { "values": {} },
            "response_url": RESPONSE_URL,
            "actions": [action],
        }),
    );
    if !message.ephemeral {
        let mut shown = json!({
            "type": "message",
            "user": APP_USER,
            "bot_id": LOCAL_BOT,
            "team": team,
            "text": message.text,
            "ts": message.ts,
            "blocks": message.blocks,
        });
        if let Some(thread_ts) = message.thread_ts {
            shown["thread_ts"] = json!(thread_ts);
        }
        payload["message"] = shown;
    }
    payload
}

/// The view as Slack sends it back in interactions: what the app opened, plus the fields Slack
/// adds (id, team, state with the entered values, hash, root and app ids).
fn view_object(team: &str, view_id: &str, view: &Value, values: Option<&Value>) -> Value {
    let mut shown = match view {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    for (key, default) in [
        ("callback_id", json!("")),
        ("private_metadata", json!("")),
        ("external_id", json!("")),
        ("clear_on_close", json!(false)),
        ("notify_on_close", json!(false)),
    ] {
        shown.entry(key).or_insert(default);
    }
    shown.insert("id".into(), json!(view_id));
    shown.insert("team_id".into(), json!(team));
    shown.insert("app_id".into(), json!(LOCAL_APP));
    shown.insert("bot_id".into(), json!(LOCAL_BOT));
    shown.insert("root_view_id".into(), json!(view_id));
    shown.insert("previous_view_id".into(), Value::Null);
    shown.insert("hash".into(), json!(format!("local.{view_id}")));
    let values = values
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    shown.insert("state".into(), json!({ "values": values }));
    Value::Object(shown)
}

/// The `view_submission` payload when the modal `view_id` (showing `view`) is submitted, with
/// `values` as its `state.values` (`{block_id: {action_id: {type, value}}}`), if any.
pub fn view_submission(
    team: &str,
    view_id: &str,
    view: &Value,
    values: Option<&Value>,
    now_micros: u128,
) -> Value {
    envelope(
        "view_submission",
        team,
        json!({
            "trigger_id": trigger_id(now_micros),
            "view": view_object(team, view_id, view, values),
            "response_urls": [],
        }),
    )
}

/// The `view_closed` payload (sent only for views opened with `notify_on_close`).
pub fn view_closed(team: &str, view_id: &str, view: &Value) -> Value {
    envelope(
        "view_closed",
        team,
        json!({
            "view": view_object(team, view_id, view, None),
            "is_cleared": false,
        }),
    )
}

/// The team of a modal: from the thread id in its `private_metadata` (the metadata itself, or a
/// JSON object's `thread_id`, as threadbox's reset confirmation keeps it), else [`LOCAL_TEAM`].
pub fn team_of_view(view: &Value) -> String {
    thread_of_view(view)
        .and_then(|raw| ThreadId::parse(&raw).ok())
        .and_then(|id| SlackPlace::of(&id))
        .map(|place| place.team)
        .unwrap_or_else(|| LOCAL_TEAM.to_owned())
}

/// The thread id a modal's `private_metadata` names: all of it, or a JSON object's `thread_id`.
fn thread_of_view(view: &Value) -> Option<String> {
    let metadata = view["private_metadata"].as_str()?;
    match serde_json::from_str::<Value>(metadata) {
        Ok(parsed) if parsed.is_object() => parsed["thread_id"].as_str().map(str::to_owned),
        _ => Some(metadata.to_owned()),
    }
}

/// Whether a modal belongs to `thread_id`: its `private_metadata` is the thread id, or a JSON
/// object whose `thread_id` is.
pub fn view_is_for_thread(view: &Value, thread_id: &str) -> bool {
    thread_of_view(view).as_deref() == Some(thread_id)
}

/// A request body ready to post to [`INTERACTIONS_PATH`], with its Slack headers' values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedRequest {
    /// `payload=<percent-encoded JSON>`, `application/x-www-form-urlencoded`.
    pub body: String,
    /// `X-Slack-Request-Timestamp`.
    pub timestamp: i64,
    /// `X-Slack-Signature`.
    pub signature: String,
}

/// The content type Slack posts interactions with.
pub const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded";

/// Form-encode `payload` as Slack does and sign the body with `secret` at `now_secs`.
pub fn sign(secret: &SigningSecret, payload: &Value, now_secs: i64) -> SignedRequest {
    let body = format!("payload={}", form_encode(&payload.to_string()));
    SignedRequest {
        signature: secret.sign(now_secs, body.as_bytes()),
        timestamp: now_secs,
        body,
    }
}

/// `application/x-www-form-urlencoded` value encoding: everything but unreserved characters as
/// `%XX` (spaces too, which every form decoder reads the same as `+`).
fn form_encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0x0f)] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u128 = 1_767_225_600_000_123;

    fn card() -> Value {
        json!([
            {"type": "section", "block_id": "state",
             "text": {"type": "mrkdwn", "text": ":large_green_circle: *active*"}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "since <!date^1767225600^{time}|noon>"}]},
            {"type": "actions", "elements": [
                {"type": "button", "action_id": "pause", "value": "slack:T9:C1:1.000001",
                 "text": {"type": "plain_text", "text": "Pause"}},
                {"type": "button", "action_id": "reset", "value": "slack:T9:C1:1.000001",
                 "style": "danger", "text": {"type": "plain_text", "text": "Reset"}}
            ]}
        ])
    }

    /// Undo `form_encode` for the one field, as a form decoder would.
    fn payload_of(body: &str) -> Value {
        let encoded = body.strip_prefix("payload=").expect("payload=");
        let bytes = encoded.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                b => {
                    assert!(b.is_ascii_alphanumeric() || b"-._~".contains(&b), "{b}");
                    out.push(b);
                    i += 1;
                }
            }
        }
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn finds_buttons_in_actions_and_accessories() {
        let blocks = card();
        let reset = find_button(&blocks, "reset").unwrap();
        assert_eq!(reset.block_id, "b2", "a made-up, stable block id");
        assert_eq!(reset.style.as_deref(), Some("danger"));
        assert_eq!(reset.value.as_deref(), Some("slack:T9:C1:1.000001"));
        assert_eq!(find_button(&blocks, "resume"), None);
        assert_eq!(action_ids(&blocks), ["pause", "reset"]);
        let accessory = json!([{"type": "section", "block_id": "s",
            "text": {"type": "mrkdwn", "text": "x"},
            "accessory": {"type": "button", "action_id": "resume", "value": "v",
                          "text": {"type": "plain_text", "text": "Resume"}}}]);
        assert_eq!(find_button(&accessory, "resume").unwrap().block_id, "s");
        assert_eq!(find_button(&json!("not blocks"), "x"), None);
    }

    #[test]
    fn the_team_comes_from_a_thread_id_in_the_same_channel() {
        assert_eq!(team_for(["slack:T9:C1:1.000001"], "C1"), "T9");
        assert_eq!(team_for(["slack:T9:C2:1.000001"], "C1"), LOCAL_TEAM);
        assert_eq!(team_for(["not a thread", "slack:T8:C1"], "C1"), "T8");
        assert_eq!(team_for([], "C1"), LOCAL_TEAM);
        let modal = json!({"private_metadata": "slack:T7:C1:1.000001"});
        assert_eq!(team_of_view(&modal), "T7");
        let reset = json!({"private_metadata": "{\"thread_id\":\"slack:T6:C1:1.000001\",\"channel\":\"C1\"}"});
        assert_eq!(team_of_view(&reset), "T6");
        assert!(view_is_for_thread(&reset, "slack:T6:C1:1.000001"));
        assert_eq!(team_of_view(&json!({})), LOCAL_TEAM);
        assert!(view_is_for_thread(&modal, "slack:T7:C1:1.000001"));
        assert!(view_is_for_thread(
            &json!({"private_metadata": "{\"thread_id\":\"slack:T7:C1\"}"}),
            "slack:T7:C1"
        ));
        assert!(!view_is_for_thread(&modal, "slack:T7:C1"));
    }

    #[test]
    fn a_click_is_a_signed_block_actions_payload() {
        let blocks = card();
        let message = ClickedMessage {
            channel: "C1",
            ts: "1.000002",
            thread_ts: Some("1.000001"),
            text: "active",
            blocks: &blocks,
            ephemeral: false,
        };
        let button = find_button(&blocks, "pause").unwrap();
        let team = team_for(button.value.as_deref(), "C1");
        let payload = block_actions(&team, &message, &button, NOW);
        assert_eq!(payload["type"], "block_actions");
        assert_eq!(payload["team"]["id"], "T9");
        assert_eq!(payload["user"]["id"], LOCAL_USER);
        assert_eq!(payload["channel"]["id"], "C1");
        assert_eq!(payload["container"]["type"], "message");
        assert_eq!(payload["container"]["message_ts"], "1.000002");
        assert_eq!(payload["container"]["thread_ts"], "1.000001");
        assert_eq!(payload["container"]["is_ephemeral"], false);
        assert_eq!(payload["message"]["ts"], "1.000002");
        assert_eq!(payload["message"]["thread_ts"], "1.000001");
        assert_eq!(payload["message"]["blocks"], blocks);
        assert_eq!(payload["response_url"], RESPONSE_URL);
        let trigger = payload["trigger_id"].as_str().unwrap();
        assert_eq!(trigger.split('.').count(), 3, "{trigger}");
        let action = &payload["actions"][0];
        assert_eq!(action["type"], "button");
        assert_eq!(action["action_id"], "pause");
        assert_eq!(action["block_id"], "b2");
        assert_eq!(action["value"], "slack:T9:C1:1.000001");
        assert_eq!(action["text"]["text"], "Pause");
        assert_eq!(action["action_ts"], "1767225600.000123");
        assert_eq!(payload["actions"].as_array().unwrap().len(), 1);

        // Ephemeral: said in the container, and no message (Slack sends none).
        let ephemeral = ClickedMessage {
            ephemeral: true,
            ..message
        };
        let payload = block_actions("T9", &ephemeral, &button, NOW);
        assert_eq!(payload["container"]["is_ephemeral"], true);
        assert!(payload.get("message").is_none());

        // Form-encoded and signed: the signature verifies over the exact body, and the body
        // decodes back to the payload (quotes, spaces, `<!date^…|…>` and all).
        let secret = SigningSecret::new("local-signing-secret").unwrap();
        let now = (NOW / 1_000_000) as i64;
        let payload = block_actions("T9", &message, &button, NOW);
        let signed = sign(&secret, &payload, now);
        assert_eq!(signed.timestamp, now);
        assert!(signed.body.starts_with("payload=%7B%22"), "{}", signed.body);
        secret
            .verify(
                Some(now.to_string().as_bytes()),
                Some(signed.signature.as_bytes()),
                signed.body.as_bytes(),
                now + 5,
            )
            .unwrap();
        let other = SigningSecret::new("another").unwrap();
        assert!(other
            .verify(
                Some(now.to_string().as_bytes()),
                Some(signed.signature.as_bytes()),
                signed.body.as_bytes(),
                now,
            )
            .is_err());
        assert_eq!(payload_of(&signed.body), payload);
    }

    #[test]
    fn a_submission_carries_the_view_with_its_callback_and_metadata() {
        let modal = json!({
            "type": "modal", "callback_id": "reset_confirm",
            "private_metadata": "slack:T9:C1:1.000001",
            "title": {"type": "plain_text", "text": "Reset?"},
            "submit": {"type": "plain_text", "text": "Reset"},
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "Sure?"}}],
        });
        let payload = view_submission(&team_of_view(&modal), "VABC", &modal, None, NOW);
        assert_eq!(payload["type"], "view_submission");
        assert_eq!(payload["team"]["id"], "T9");
        assert_eq!(payload["user"]["id"], LOCAL_USER);
        let view = &payload["view"];
        assert_eq!(view["id"], "VABC");
        assert_eq!(view["type"], "modal");
        assert_eq!(view["callback_id"], "reset_confirm");
        assert_eq!(view["private_metadata"], "slack:T9:C1:1.000001");
        assert_eq!(view["title"]["text"], "Reset?");
        assert_eq!(view["blocks"], modal["blocks"]);
        assert_eq!(view["state"], json!({"values": {}}));
        assert_eq!(view["team_id"], "T9");

        let values = json!({"b": {"why": {"type": "plain_text_input", "value": "stuck"}}});
        let payload = view_submission("T9", "VABC", &modal, Some(&values), NOW);
        assert_eq!(payload["view"]["state"]["values"], values);

        let closed = view_closed("T9", "VABC", &modal);
        assert_eq!(closed["type"], "view_closed");
        assert_eq!(closed["view"]["callback_id"], "reset_confirm");
        assert_eq!(closed["is_cleared"], false);
    }
}
