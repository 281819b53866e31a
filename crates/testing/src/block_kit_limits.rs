//! Slack's documented Block Kit limits, for the Slack fake to refuse what Slack would refuse.
//!
//! Not a full schema: the checks are the limits a growing message or view runs into (block
//! counts, text lengths, identifiers), and the shapes threadbox builds (the block types below).
//! Where Slack's documentation is the source, the limit is a named constant, so a test or a
//! builder can cite it. Lengths are counted in characters, as Slack counts them.
//!
//! Errors name the offending value by JSON pointer, the way Slack's
//! `response_metadata.messages` do (`[ERROR] ... [json-pointer:/blocks/3/text/text]`).

use std::collections::HashSet;

use serde_json::{Map, Value};

/// Blocks in one message (`chat.postMessage`, `chat.update`, `chat.postEphemeral`).
pub const MAX_MESSAGE_BLOCKS: usize = 50;
/// Blocks in a modal or an App Home view.
pub const MAX_VIEW_BLOCKS: usize = 100;
/// Any text object's `text` (and a section's `text`).
pub const MAX_TEXT: usize = 3000;
/// Each of a section's `fields`.
pub const MAX_FIELD_TEXT: usize = 2000;
/// A section holds at most this many `fields`.
pub const MAX_FIELDS: usize = 10;
/// A header block's `plain_text`.
pub const MAX_HEADER_TEXT: usize = 150;
/// A button's label.
pub const MAX_BUTTON_TEXT: usize = 75;
/// A button's `value`.
pub const MAX_BUTTON_VALUE: usize = 2000;
/// A button's `url`, and an image block's `image_url`.
pub const MAX_URL: usize = 3000;
/// An element's `action_id`, a block's `block_id`, a view's `callback_id` and `external_id`.
pub const MAX_ID: usize = 255;
/// Elements of a context block.
pub const MAX_CONTEXT_ELEMENTS: usize = 10;
/// Elements of an actions block.
pub const MAX_ACTIONS_ELEMENTS: usize = 25;
/// An input block's `label` and `hint`, an image block's `alt_text` and `title`.
pub const MAX_LABEL: usize = 2000;
/// A modal's `title`, `submit` and `close`.
pub const MAX_MODAL_BUTTON_TEXT: usize = 24;
/// A view's `private_metadata`.
pub const MAX_PRIVATE_METADATA: usize = 3000;

/// The block types the fake accepts; Slack has more, but threadbox builds none of them, so
/// anything else is more likely a typo than a deliberate choice.
pub const KNOWN_BLOCK_TYPES: [&str; 8] = [
    "section",
    "context",
    "actions",
    "header",
    "divider",
    "rich_text",
    "image",
    "input",
];

/// A broken limit: where (a JSON pointer into the payload) and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("[ERROR] {reason} [json-pointer:{pointer}]")]
pub struct BlockKitError {
    pub pointer: String,
    pub reason: String,
}

/// A view's kind: `views.open` takes modals, `views.publish` takes App Home views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewKind {
    Modal,
    Home,
}

type Checked = Result<(), BlockKitError>;

fn fail(pointer: &str, reason: impl Into<String>) -> BlockKitError {
    BlockKitError {
        pointer: pointer.to_owned(),
        reason: reason.into(),
    }
}

fn at(pointer: &str, key: impl std::fmt::Display) -> String {
    format!("{pointer}/{key}")
}

fn check_len(pointer: &str, value: &str, max: usize) -> Checked {
    let len = value.chars().count();
    if len > max {
        return Err(fail(
            pointer,
            format!("must be at most {max} characters; it has {len}"),
        ));
    }
    Ok(())
}

/// An optional string field: absent is fine, another type is not.
fn optional_str<'a>(
    object: &'a Map<String, Value>,
    pointer: &str,
    key: &str,
) -> Result<Option<&'a str>, BlockKitError> {
    match object.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(fail(&at(pointer, key), "must be a string")),
    }
}

fn check_optional_len(
    object: &Map<String, Value>,
    pointer: &str,
    key: &str,
    max: usize,
) -> Checked {
    match optional_str(object, pointer, key)? {
        Some(value) => check_len(&at(pointer, key), value, max),
        None => Ok(()),
    }
}

fn as_object<'a>(value: &'a Value, pointer: &str) -> Result<&'a Map<String, Value>, BlockKitError> {
    value
        .as_object()
        .ok_or_else(|| fail(pointer, "must be an object"))
}

/// A composition text object (`plain_text`, or `mrkdwn` unless `plain_only`) of 1 to `max`
/// characters.
fn check_text_object(value: &Value, pointer: &str, max: usize, plain_only: bool) -> Checked {
    let object = as_object(value, pointer)?;
    match object.get("type").and_then(Value::as_str) {
        Some("plain_text") => {}
        Some("mrkdwn") if !plain_only => {}
        _ if plain_only => return Err(fail(&at(pointer, "type"), "must be plain_text")),
        _ => return Err(fail(&at(pointer, "type"), "must be plain_text or mrkdwn")),
    }
    let text = object
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| fail(&at(pointer, "text"), "is required"))?;
    if text.is_empty() {
        return Err(fail(&at(pointer, "text"), "must not be empty"));
    }
    check_len(&at(pointer, "text"), text, max)
}

fn check_optional_text_object(
    object: &Map<String, Value>,
    pointer: &str,
    key: &str,
    max: usize,
    plain_only: bool,
) -> Checked {
    match object.get(key) {
        None => Ok(()),
        Some(value) => check_text_object(value, &at(pointer, key), max, plain_only),
    }
}

fn required_array<'a>(
    object: &'a Map<String, Value>,
    pointer: &str,
    key: &str,
    max: usize,
) -> Result<&'a [Value], BlockKitError> {
    let items = object
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| fail(&at(pointer, key), "is required and must be an array"))?;
    if items.is_empty() {
        return Err(fail(&at(pointer, key), "must not be empty"));
    }
    if items.len() > max {
        return Err(fail(
            &at(pointer, key),
            format!("must have at most {max} items; it has {}", items.len()),
        ));
    }
    Ok(items)
}

/// Every text object anywhere under `value`, whatever holds it, within [`MAX_TEXT`]: the
/// general limit, before the tighter ones of particular places.
fn check_every_text_object(value: &Value, pointer: &str) -> Checked {
    match value {
        Value::Object(object) => {
            let is_text_object = matches!(
                object.get("type").and_then(Value::as_str),
                Some("plain_text" | "mrkdwn")
            );
            if let (true, Some(Value::String(text))) = (is_text_object, object.get("text")) {
                check_len(&at(pointer, "text"), text, MAX_TEXT)?;
            }
            object
                .iter()
                .try_for_each(|(key, child)| check_every_text_object(child, &at(pointer, key)))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, child)| check_every_text_object(child, &at(pointer, i))),
        _ => Ok(()),
    }
}

/// An interactive element (a button, a select, an input...): its `action_id`, recorded in
/// `action_ids` so duplicates in the same block are caught, and a button's own limits.
fn check_element(value: &Value, pointer: &str, action_ids: &mut HashSet<String>) -> Checked {
    let element = as_object(value, pointer)?;
    let kind = element
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| fail(&at(pointer, "type"), "is required"))?;
    if let Some(action_id) = optional_str(element, pointer, "action_id")? {
        check_len(&at(pointer, "action_id"), action_id, MAX_ID)?;
        // Slack: an action_id "should be unique among all other action_ids in the containing
        // block"; the same id in two blocks is told apart by block_id.
        if !action_ids.insert(action_id.to_owned()) {
            return Err(fail(
                &at(pointer, "action_id"),
                format!("{action_id:?} is already used in this block"),
            ));
        }
    }
    if kind == "button" {
        let text = element
            .get("text")
            .ok_or_else(|| fail(&at(pointer, "text"), "is required"))?;
        check_text_object(text, &at(pointer, "text"), MAX_BUTTON_TEXT, true)?;
        check_optional_len(element, pointer, "value", MAX_BUTTON_VALUE)?;
        check_optional_len(element, pointer, "url", MAX_URL)?;
        if let Some(style) = optional_str(element, pointer, "style")? {
            if style != "primary" && style != "danger" {
                return Err(fail(&at(pointer, "style"), "must be primary or danger"));
            }
        }
    }
    Ok(())
}

/// One block; `pointer` is where it sits (`/blocks/3`). Returns its type.
fn check_block<'a>(value: &'a Value, pointer: &str) -> Result<&'a str, BlockKitError> {
    let block = as_object(value, pointer)?;
    let kind = match block.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(_) => return Err(fail(&at(pointer, "type"), "must be a string")),
        None => return Err(fail(&at(pointer, "type"), "is required")),
    };
    check_optional_len(block, pointer, "block_id", MAX_ID)?;
    let mut action_ids = HashSet::new();
    match kind {
        "section" => {
            check_optional_text_object(block, pointer, "text", MAX_TEXT, false)?;
            match block.get("fields") {
                None => {
                    if !block.contains_key("text") {
                        return Err(fail(pointer, "a section needs text or fields"));
                    }
                }
                Some(_) => {
                    let fields = required_array(block, pointer, "fields", MAX_FIELDS)?;
                    for (i, field) in fields.iter().enumerate() {
                        let field_pointer = at(&at(pointer, "fields"), i);
                        check_text_object(field, &field_pointer, MAX_FIELD_TEXT, false)?;
                    }
                }
            }
            if let Some(accessory) = block.get("accessory") {
                check_element(accessory, &at(pointer, "accessory"), &mut action_ids)?;
            }
        }
        "header" => {
            let text = block
                .get("text")
                .ok_or_else(|| fail(&at(pointer, "text"), "is required"))?;
            check_text_object(text, &at(pointer, "text"), MAX_HEADER_TEXT, true)?;
        }
        "context" => {
            let elements = required_array(block, pointer, "elements", MAX_CONTEXT_ELEMENTS)?;
            for (i, element) in elements.iter().enumerate() {
                let element_pointer = at(&at(pointer, "elements"), i);
                let object = as_object(element, &element_pointer)?;
                if object.get("type").and_then(Value::as_str) != Some("image") {
                    check_text_object(element, &element_pointer, MAX_TEXT, false)?;
                }
            }
        }
        "actions" => {
            let elements = required_array(block, pointer, "elements", MAX_ACTIONS_ELEMENTS)?;
            for (i, element) in elements.iter().enumerate() {
                check_element(element, &at(&at(pointer, "elements"), i), &mut action_ids)?;
            }
        }
        "input" => {
            let label = block
                .get("label")
                .ok_or_else(|| fail(&at(pointer, "label"), "is required"))?;
            check_text_object(label, &at(pointer, "label"), MAX_LABEL, true)?;
            check_optional_text_object(block, pointer, "hint", MAX_LABEL, true)?;
            let element = block
                .get("element")
                .ok_or_else(|| fail(&at(pointer, "element"), "is required"))?;
            check_element(element, &at(pointer, "element"), &mut action_ids)?;
        }
        "image" => {
            let alt_text = optional_str(block, pointer, "alt_text")?
                .ok_or_else(|| fail(&at(pointer, "alt_text"), "is required"))?;
            check_len(&at(pointer, "alt_text"), alt_text, MAX_LABEL)?;
            check_optional_len(block, pointer, "image_url", MAX_URL)?;
            if !block.contains_key("image_url") && !block.contains_key("slack_file") {
                return Err(fail(pointer, "an image needs image_url or slack_file"));
            }
            check_optional_text_object(block, pointer, "title", MAX_LABEL, true)?;
        }
        "rich_text" => {
            required_array(block, pointer, "elements", usize::MAX)?;
        }
        "divider" => {}
        other => {
            return Err(fail(
                &at(pointer, "type"),
                format!("unknown block type {other:?}"),
            ))
        }
    }
    Ok(kind)
}

/// A list of blocks at `pointer` (`/blocks`, `/view/blocks`), at most `max`. Returns the types.
fn check_block_list<'a>(
    value: &'a Value,
    pointer: &str,
    max: usize,
) -> Result<Vec<&'a str>, BlockKitError> {
    let blocks = value
        .as_array()
        .ok_or_else(|| fail(pointer, "must be an array of blocks"))?;
    if blocks.len() > max {
        return Err(fail(
            pointer,
            format!("must have at most {max} blocks; it has {}", blocks.len()),
        ));
    }
    let mut kinds = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let block_pointer = at(pointer, i);
        kinds.push(check_block(block, &block_pointer)?);
    }
    check_every_text_object(value, pointer)?;
    Ok(kinds)
}

/// A message's `blocks` (the JSON value of the field): an array of at most
/// [`MAX_MESSAGE_BLOCKS`] valid blocks.
pub fn check_message_blocks(blocks: &Value) -> Result<(), BlockKitError> {
    check_block_list(blocks, "/blocks", MAX_MESSAGE_BLOCKS).map(|_| ())
}

/// A view for `views.open` or `views.publish`: its type, its blocks (at most
/// [`MAX_VIEW_BLOCKS`]), a modal's title and buttons, and its identifiers.
pub fn check_view(view: &Value) -> Result<ViewKind, BlockKitError> {
    const VIEW: &str = "/view";
    let object = as_object(view, VIEW)?;
    let kind = match object.get("type").and_then(Value::as_str) {
        Some("modal") => ViewKind::Modal,
        Some("home") => ViewKind::Home,
        Some(other) => {
            return Err(fail(
                &at(VIEW, "type"),
                format!("must be modal or home, not {other:?}"),
            ))
        }
        None => return Err(fail(&at(VIEW, "type"), "is required")),
    };
    let blocks = object
        .get("blocks")
        .ok_or_else(|| fail(&at(VIEW, "blocks"), "is required"))?;
    let block_kinds = check_block_list(blocks, &at(VIEW, "blocks"), MAX_VIEW_BLOCKS)?;
    if kind == ViewKind::Modal {
        let title = object
            .get("title")
            .ok_or_else(|| fail(&at(VIEW, "title"), "is required"))?;
        check_text_object(title, &at(VIEW, "title"), MAX_MODAL_BUTTON_TEXT, true)?;
        check_optional_text_object(object, VIEW, "submit", MAX_MODAL_BUTTON_TEXT, true)?;
        check_optional_text_object(object, VIEW, "close", MAX_MODAL_BUTTON_TEXT, true)?;
        // Slack: `submit` is required when the modal has an input block.
        if block_kinds.contains(&"input") && !object.contains_key("submit") {
            return Err(fail(
                &at(VIEW, "submit"),
                "is required in a modal with input blocks",
            ));
        }
    }
    check_optional_len(object, VIEW, "callback_id", MAX_ID)?;
    check_optional_len(object, VIEW, "external_id", MAX_ID)?;
    check_optional_len(object, VIEW, "private_metadata", MAX_PRIVATE_METADATA)?;
    Ok(kind)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn section(text: &str) -> Value {
        json!({ "type": "section", "text": { "type": "mrkdwn", "text": text } })
    }

    fn button(action_id: &str, label: &str) -> Value {
        json!({
            "type": "button",
            "action_id": action_id,
            "text": { "type": "plain_text", "text": label },
            "value": "v",
        })
    }

    fn modal(title: &str, blocks: Vec<Value>) -> Value {
        json!({
            "type": "modal",
            "title": { "type": "plain_text", "text": title },
            "blocks": blocks,
        })
    }

    fn pointer_of(result: Result<impl std::fmt::Debug, BlockKitError>) -> String {
        result.expect_err("should be refused").pointer
    }

    #[test]
    fn a_typical_message_passes() {
        let blocks = json!([
            { "type": "header", "text": { "type": "plain_text", "text": "Sandbox ready" } },
            section("*running* for 3 min"),
            { "type": "section", "fields": [
                { "type": "mrkdwn", "text": "*CPU*" }, { "type": "mrkdwn", "text": "2" }
            ], "accessory": button("open", "Open") },
            { "type": "divider" },
            { "type": "context", "elements": [
                { "type": "mrkdwn", "text": "thread 1700000000.000100" },
                { "type": "image", "image_url": "https://example.com/a.png", "alt_text": "a" }
            ] },
            { "type": "actions", "elements": [button("stop", "Stop"), button("restart", "Restart")] },
            { "type": "rich_text", "elements": [{ "type": "rich_text_section", "elements": [] }] },
            { "type": "image", "image_url": "https://example.com/b.png", "alt_text": "b" },
        ]);
        check_message_blocks(&blocks).unwrap();
    }

    #[test]
    fn block_counts_are_capped_per_surface() {
        let blocks =
            |n: usize| Value::Array((0..n).map(|_| json!({ "type": "divider" })).collect());
        check_message_blocks(&blocks(MAX_MESSAGE_BLOCKS)).unwrap();
        assert_eq!(pointer_of(check_message_blocks(&blocks(51))), "/blocks");

        let view = |n: usize| json!({ "type": "home", "blocks": blocks(n) });
        assert_eq!(check_view(&view(MAX_VIEW_BLOCKS)).unwrap(), ViewKind::Home);
        assert_eq!(pointer_of(check_view(&view(101))), "/view/blocks");
    }

    #[test]
    fn text_lengths_are_capped_by_place() {
        let long = |n: usize| "x".repeat(n);
        check_message_blocks(&json!([section(&long(3000))])).unwrap();
        assert_eq!(
            pointer_of(check_message_blocks(&json!([section(&long(3001))]))),
            "/blocks/0/text/text"
        );
        // Characters, not bytes: 3,000 two-byte characters fit.
        check_message_blocks(&json!([section(&"é".repeat(3000))])).unwrap();

        let field =
            json!([{ "type": "section", "fields": [{ "type": "mrkdwn", "text": long(2001) }] }]);
        assert_eq!(
            pointer_of(check_message_blocks(&field)),
            "/blocks/0/fields/0/text"
        );

        let header =
            json!([{ "type": "header", "text": { "type": "plain_text", "text": long(151) } }]);
        assert_eq!(
            pointer_of(check_message_blocks(&header)),
            "/blocks/0/text/text"
        );
        let mrkdwn_header =
            json!([{ "type": "header", "text": { "type": "mrkdwn", "text": "h" } }]);
        assert_eq!(
            pointer_of(check_message_blocks(&mrkdwn_header)),
            "/blocks/0/text/type"
        );

        let actions = |b: Value| json!([{ "type": "actions", "elements": [b] }]);
        assert_eq!(
            pointer_of(check_message_blocks(&actions(button("a", &long(76))))),
            "/blocks/0/elements/0/text/text"
        );
        let mut big_value = button("a", "A");
        big_value["value"] = json!(long(2001));
        assert_eq!(
            pointer_of(check_message_blocks(&actions(big_value))),
            "/blocks/0/elements/0/value"
        );
        assert_eq!(
            pointer_of(check_message_blocks(&actions(button(&long(256), "A")))),
            "/blocks/0/elements/0/action_id"
        );

        // A text object in a place with no tighter limit still stops at 3,000.
        let context = json!([{ "type": "context", "elements": [{ "type": "plain_text", "text": long(3001) }] }]);
        assert_eq!(
            pointer_of(check_message_blocks(&context)),
            "/blocks/0/elements/0/text"
        );
    }

    #[test]
    fn action_ids_are_unique_within_a_block() {
        let same_block =
            json!([{ "type": "actions", "elements": [button("go", "A"), button("go", "B")] }]);
        let err = check_message_blocks(&same_block).unwrap_err();
        assert_eq!(err.pointer, "/blocks/0/elements/1/action_id");
        assert!(err.to_string().contains("already used"), "{err}");

        // Slack tells the same id in two blocks apart by block_id.
        let two_blocks = json!([
            { "type": "actions", "elements": [button("go", "A")] },
            { "type": "actions", "elements": [button("go", "B")] },
        ]);
        check_message_blocks(&two_blocks).unwrap();
    }

    #[test]
    fn block_types_are_required_and_known() {
        assert_eq!(
            pointer_of(check_message_blocks(&json!([{ "text": "no type" }]))),
            "/blocks/0/type"
        );
        assert_eq!(
            pointer_of(check_message_blocks(&json!([{ "type": "video" }]))),
            "/blocks/0/type"
        );
        assert_eq!(
            pointer_of(check_message_blocks(&json!({ "type": "divider" }))),
            "/blocks"
        );
        assert_eq!(
            pointer_of(check_message_blocks(&json!([{ "type": "section" }]))),
            "/blocks/0"
        );
    }

    #[test]
    fn views_need_a_type_and_modals_a_short_title() {
        assert_eq!(
            check_view(&modal("Run a command", vec![section("hi")])).unwrap(),
            ViewKind::Modal
        );
        assert_eq!(
            pointer_of(check_view(&json!({ "blocks": [] }))),
            "/view/type"
        );
        assert_eq!(
            pointer_of(check_view(&json!({ "type": "message", "blocks": [] }))),
            "/view/type"
        );
        assert_eq!(
            pointer_of(check_view(&json!({ "type": "modal", "blocks": [] }))),
            "/view/title"
        );
        assert_eq!(
            pointer_of(check_view(&modal(&"t".repeat(25), vec![]))),
            "/view/title/text"
        );
        check_view(&modal(&"t".repeat(24), vec![])).unwrap();

        let mut long_submit = modal("Run", vec![]);
        long_submit["submit"] = json!({ "type": "plain_text", "text": "s".repeat(25) });
        assert_eq!(pointer_of(check_view(&long_submit)), "/view/submit/text");

        let input = json!({
            "type": "input",
            "label": { "type": "plain_text", "text": "Command" },
            "element": { "type": "plain_text_input", "action_id": "command" },
        });
        assert_eq!(
            pointer_of(check_view(&modal("Run", vec![input.clone()]))),
            "/view/submit"
        );
        let mut with_submit = modal("Run", vec![input]);
        with_submit["submit"] = json!({ "type": "plain_text", "text": "Run" });
        check_view(&with_submit).unwrap();

        let mut identifiers = modal("Run", vec![]);
        identifiers["callback_id"] = json!("c".repeat(256));
        assert_eq!(pointer_of(check_view(&identifiers)), "/view/callback_id");
        identifiers["callback_id"] = json!("run");
        identifiers["private_metadata"] = json!("m".repeat(3001));
        assert_eq!(
            pointer_of(check_view(&identifiers)),
            "/view/private_metadata"
        );
        identifiers["private_metadata"] = json!("m".repeat(3000));
        check_view(&identifiers).unwrap();
    }
}
