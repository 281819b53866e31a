//! Block Kit, the JSON Slack draws messages, modals and the App Home from: small builders for
//! the few block types threadbox uses, each keeping its text within Slack's documented limits
//! (a text over its limit makes Slack refuse the whole message with `invalid_blocks`).
//!
//! Interactive elements carry one of the [`Action`]s as their `action_id` prefix and the thread
//! id as their `value`, so a click names what to do and to which thread without any lookup.

use serde_json::{json, Value};

/// A `section` or `context` text; Slack's limit for a text object.
pub const MAX_TEXT: usize = 3_000;
/// A button's label.
const MAX_BUTTON_TEXT: usize = 75;
/// A `header` block.
const MAX_HEADER: usize = 150;
/// A modal's title and its submit and close labels.
const MAX_VIEW_TITLE: usize = 24;
/// Blocks in one message.
pub const MAX_MESSAGE_BLOCKS: usize = 50;
/// Blocks in a modal or the App Home.
pub const MAX_VIEW_BLOCKS: usize = 100;

/// What a button asks for. Its `action_id` is the name, followed by `#n` when one message or
/// view holds several buttons for the same action (Slack wants action ids unique there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Pause,
    Resume,
    Reset,
    /// Put the thread's files back as they were before a code block (its checkpoint); the
    /// button's value is `{checkpoint}@{thread}` ([`undo_button`]).
    Undo,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Reset => "reset",
            Action::Undo => "undo",
        }
    }

    /// The action an `action_id` names (`pause`, `pause#3`), if any.
    pub fn of_action_id(action_id: &str) -> Option<Self> {
        let name = action_id
            .split_once('#')
            .map_or(action_id, |(name, _)| name);
        match name {
            "pause" => Some(Action::Pause),
            "resume" => Some(Action::Resume),
            "reset" => Some(Action::Reset),
            "undo" => Some(Action::Undo),
            _ => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Action::Pause => "Pause",
            Action::Resume => "Resume",
            Action::Reset => "Reset",
            Action::Undo => "Undo",
        }
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn mrkdwn(text: &str) -> Value {
    json!({ "type": "mrkdwn", "text": fit(text, MAX_TEXT) })
}

fn plain(text: &str, max: usize) -> Value {
    json!({ "type": "plain_text", "text": fit(text, max), "emoji": true })
}

/// A `section` of mrkdwn text.
pub fn section(text: &str) -> Value {
    json!({ "type": "section", "text": mrkdwn(text) })
}

/// A `header`: large plain text.
pub fn header(text: &str) -> Value {
    json!({ "type": "header", "text": plain(text, MAX_HEADER) })
}

/// A `context` line: small grey mrkdwn.
pub fn context(text: &str) -> Value {
    json!({ "type": "context", "elements": [mrkdwn(text)] })
}

pub fn divider() -> Value {
    json!({ "type": "divider" })
}

/// A button for `action` on `thread_id`; `nth` makes its action id unique when a view holds
/// several (`None` in a message with one button per action).
pub fn button(action: Action, thread_id: &str, nth: Option<usize>) -> Value {
    let action_id = match nth {
        Some(n) => format!("{}#{n}", action.name()),
        None => action.name().to_owned(),
    };
    let mut button = json!({
        "type": "button",
        "text": plain(action.label(), MAX_BUTTON_TEXT),
        "action_id": action_id,
        "value": thread_id,
    });
    match action {
        Action::Resume => button["style"] = json!("primary"),
        Action::Reset => button["style"] = json!("danger"),
        Action::Pause | Action::Undo => {}
    }
    button
}

/// The Undo button of a code block's reply: restores `checkpoint` (taken before the block)
/// into `thread_id`. Its value carries both, `{checkpoint}@{thread}` (a checkpoint id has no
/// `@`); the click is checked like any other (the thread's workspace, the clicker's channel).
pub fn undo_button(thread_id: &str, checkpoint: &str) -> Value {
    json!({
        "type": "button",
        "text": plain(Action::Undo.label(), MAX_BUTTON_TEXT),
        "action_id": Action::Undo.name(),
        "value": format!("{checkpoint}@{thread_id}"),
    })
}

/// An `actions` block holding `buttons`; `None` when there are none (Slack refuses an empty
/// one).
pub fn actions(block_id: &str, buttons: Vec<Value>) -> Option<Value> {
    (!buttons.is_empty())
        .then(|| json!({ "type": "actions", "block_id": block_id, "elements": buttons }))
}

/// A modal with a submit button; `private_metadata` comes back with its submission.
pub fn modal(
    callback_id: &str,
    title: &str,
    submit: &str,
    private_metadata: &str,
    blocks: Vec<Value>,
) -> Value {
    json!({
        "type": "modal",
        "callback_id": callback_id,
        "title": plain(title, MAX_VIEW_TITLE),
        "submit": plain(submit, MAX_VIEW_TITLE),
        "close": plain("Cancel", MAX_VIEW_TITLE),
        "private_metadata": private_metadata,
        "blocks": blocks,
    })
}

/// An App Home tab.
pub fn home(blocks: Vec<Value>) -> Value {
    json!({ "type": "home", "blocks": blocks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_kept_within_slacks_limits() {
        let long = "x".repeat(5_000);
        assert_eq!(
            section(&long)["text"]["text"]
                .as_str()
                .unwrap()
                .chars()
                .count(),
            MAX_TEXT
        );
        assert!(header(&long)["text"]["text"]
            .as_str()
            .unwrap()
            .ends_with('…'));
        let m = modal("c", &long, &long, "m", vec![]);
        assert_eq!(m["title"]["text"].as_str().unwrap().chars().count(), 24);
        assert_eq!(fit("short", 10), "short");
    }

    #[test]
    fn buttons_name_their_action_and_thread() {
        let b = button(Action::Reset, "slack:T1:C1:1.000001", Some(3));
        assert_eq!(b["action_id"], "reset#3");
        assert_eq!(b["value"], "slack:T1:C1:1.000001");
        assert_eq!(b["style"], "danger");
        assert_eq!(Action::of_action_id("reset#3"), Some(Action::Reset));
        assert_eq!(Action::of_action_id("pause"), Some(Action::Pause));
        assert_eq!(Action::of_action_id("launch"), None);
        assert_eq!(Action::of_action_id("undo"), Some(Action::Undo));
        let undo = undo_button("slack:T1:C1:1.000001", "cp-0123456789abcdef0123");
        assert_eq!(
            undo["value"],
            "cp-0123456789abcdef0123@slack:T1:C1:1.000001"
        );
        assert!(actions("b", vec![]).is_none());
    }
}
