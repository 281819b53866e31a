//! `threadbox slack manifest --url <ApiUrl>`: the Slack app manifest for a deployment, so
//! installing the app is "create app from manifest, install, put two secrets" instead of copying
//! scopes and events out of docs/slack.md#setting-up-the-slack-app.
//!
//! The same manifest is in three places, kept equal by the tests below:
//! - this command's output (YAML, or `--format json`);
//! - `infra/slack-manifest.yaml`: the output for a placeholder URL;
//! - the stack's `SlackAppManifest` output (`infra/template.yaml`): the JSON for the deployed
//!   API's URL, ready to paste.
//!
//! The bot events are the ones the ingress acts on (`crates/slack/src/`), and each scope is one
//! an event or a Web API call needs; nothing more is asked for.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use threadbox_slack::slash::COMMAND;
use threadbox_slack::{COMMANDS_PATH, EVENTS_PATH, INTERACTIONS_PATH};

/// The API URL `infra/slack-manifest.yaml` is written for; replace it with the stack's
/// `ApiUrl` output (or generate the manifest with `--url`).
#[cfg(test)]
const PLACEHOLDER_URL: &str = "https://YOUR-API-ID.execute-api.REGION.amazonaws.com";

/// The bot events the ingress acts on, and the scope each needs (`app_home_opened` needs none).
pub const BOT_EVENTS: &[(&str, Option<&str>)] = &[
    ("app_home_opened", None),
    ("app_mention", Some("app_mentions:read")),
    ("message.channels", Some("channels:history")),
    ("message.groups", Some("groups:history")),
    ("message.im", Some("im:history")),
];

/// The Web API methods and features threadbox uses, and the scope each needs.
pub const WEB_API_SCOPES: &[(&str, &str)] = &[
    (
        "chat.postMessage / chat.update / chat.postEphemeral",
        "chat:write",
    ),
    ("files.info (shared files)", "files:read"),
    (
        "files.getUploadURLExternal / completeUploadExternal (long output)",
        "files:write",
    ),
    ("the /sandbox slash command", "commands"),
    (
        "conversations.members in public channels (who may press a button)",
        "channels:read",
    ),
    ("conversations.members in private channels", "groups:read"),
    ("conversations.members in DMs", "im:read"),
    ("conversations.members in group DMs", "mpim:read"),
];

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// What Slack's "From an app manifest" shows first.
    #[default]
    Yaml,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct ManifestArgs {
    /// The deployment's API base URL (the stack's `ApiUrl` output, or a tunnel to `threadbox
    /// dev`); Slack sends events to `<url>/slack/events`, clicks to `<url>/slack/interactions`
    /// and `/sandbox` to `<url>/slack/commands`.
    #[arg(long)]
    url: String,

    /// The app's name in Slack.
    #[arg(long, default_value = "threadbox")]
    name: String,

    #[arg(long, value_enum, default_value_t = Format::Yaml)]
    format: Format,
}

pub fn run(args: ManifestArgs) -> anyhow::Result<()> {
    let manifest = manifest(&args.url, &args.name)?;
    let text = match args.format {
        Format::Yaml => to_yaml(&manifest),
        Format::Json => {
            serde_json::to_string_pretty(&manifest).context("printing the manifest")? + "\n"
        }
    };
    print!("{text}");
    Ok(())
}

/// The manifest for an API at `url`.
pub fn manifest(url: &str, name: &str) -> anyhow::Result<Value> {
    let base = url.trim().trim_end_matches('/');
    if !base.starts_with("https://") {
        bail!("--url {url:?} must be an https:// URL: Slack sends requests only over HTTPS");
    }
    if name.trim().is_empty() || name.chars().count() > 35 {
        bail!("--name must be 1 to 35 characters (Slack's limit for an app's name)");
    }
    let mut scopes: Vec<&str> = BOT_EVENTS
        .iter()
        .filter_map(|(_, scope)| *scope)
        .chain(WEB_API_SCOPES.iter().map(|(_, scope)| *scope))
        .collect();
    scopes.sort_unstable();
    scopes.dedup();
    Ok(json!({
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {
            "name": name,
            "description": "A persistent Linux sandbox for every thread",
            "long_description": "Mention the app with a code block and it runs the code in this thread's own Linux sandbox: created on first use, paused when the thread goes quiet, resumed on the next message, with its files kept across messages. Each thread has a status card with Pause, Resume and Reset buttons; /sandbox lists your threads, and the app's Home tab shows them all. Type `help` in a mention for the commands."
        },
        "features": {
            "app_home": {
                "home_tab_enabled": true,
                "messages_tab_enabled": true,
                "messages_tab_read_only_enabled": false
            },
            "bot_user": {"display_name": name, "always_online": true},
            "slash_commands": [{
                "command": COMMAND,
                "url": format!("{base}{COMMANDS_PATH}"),
                "description": "Your threads' sandboxes: list, status, pause, resume, reset",
                "usage_hint": "list | status | pause | resume | reset [thread link]",
                "should_escape": false
            }]
        },
        "oauth_config": {
            "scopes": {"bot": scopes}
        },
        "settings": {
            "event_subscriptions": {
                "request_url": format!("{base}{EVENTS_PATH}"),
                "bot_events": BOT_EVENTS.iter().map(|(event, _)| *event).collect::<Vec<_>>()
            },
            "interactivity": {
                "is_enabled": true,
                "request_url": format!("{base}{INTERACTIONS_PATH}")
            },
            "org_deploy_enabled": false,
            "socket_mode_enabled": false,
            "token_rotation_enabled": false
        }
    }))
}

/// `value` as YAML: block style, every string double-quoted (YAML's double-quoted strings take
/// JSON's escapes, so `serde_json` writes them exactly), keys in the order given.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    write_yaml(value, 0, &mut out);
    out
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => value.to_string(),
        Value::Array(a) if a.is_empty() => "[]".to_owned(),
        Value::Object(o) if o.is_empty() => "{}".to_owned(),
        _ => unreachable!("only called on scalars and empty collections"),
    }
}

fn is_nested(value: &Value) -> bool {
    match value {
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => false,
    }
}

fn write_yaml(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                if is_nested(item) {
                    out.push_str(&format!("{pad}{key}:\n"));
                    write_yaml(item, indent + 2, out);
                } else {
                    out.push_str(&format!("{pad}{key}: {}\n", scalar(item)));
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    // A map in a list: its first key on the dash's line, the rest under it.
                    Value::Object(map) if !map.is_empty() => {
                        let mut nested = String::new();
                        write_yaml(item, indent + 2, &mut nested);
                        let inner = " ".repeat(indent + 2);
                        let first = nested.strip_prefix(&inner).unwrap_or(&nested);
                        out.push_str(&format!("{pad}- {first}"));
                    }
                    Value::Array(list) if !list.is_empty() => {
                        out.push_str(&format!("{pad}-\n"));
                        write_yaml(item, indent + 2, out);
                    }
                    _ => out.push_str(&format!("{pad}- {}\n", scalar(item))),
                }
            }
        }
        _ => out.push_str(&format!("{pad}{}\n", scalar(value))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_file(relative: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(relative);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The file in the repository is what the command prints for the placeholder, so the two
    /// cannot drift.
    #[test]
    fn the_checked_in_manifest_is_the_commands_output() {
        let file = repo_file("infra/slack-manifest.yaml");
        assert_eq!(
            file,
            to_yaml(&manifest(PLACEHOLDER_URL, "threadbox").unwrap()),
            "regenerate with: threadbox slack manifest --url {PLACEHOLDER_URL} > infra/slack-manifest.yaml"
        );
    }

    /// The stack's `SlackAppManifest` output is the same manifest, for the deployed API.
    #[test]
    fn the_stacks_manifest_output_is_the_commands_output() {
        let template = repo_file("infra/template.yaml");
        let line = template
            .lines()
            .skip_while(|l| l.trim() != "SlackAppManifest:")
            .find_map(|l| l.trim().strip_prefix("Value: !Sub '"))
            .expect("the template has a SlackAppManifest output with a single-quoted !Sub value");
        let json = line
            .strip_suffix('\'')
            .expect("the value is one line")
            .replace("''", "'")
            .replace(
                "${HttpApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}",
                "api.example.com",
            );
        let output: Value = serde_json::from_str(&json).expect("the output is JSON");
        assert_eq!(
            output,
            manifest("https://api.example.com", "threadbox").unwrap()
        );
    }

    /// Slack's rules for a manifest that installs: the required sections, HTTPS request URLs,
    /// a scope for every event it subscribes to, `commands` for a slash command, and the
    /// interactivity its buttons need.
    #[test]
    fn the_manifest_has_what_slack_requires_and_a_scope_per_event() {
        let m = manifest("https://api.example.com/prod/", "threadbox").unwrap();
        assert_eq!(m["_metadata"]["major_version"], 1);
        assert_eq!(m["display_information"]["name"], "threadbox");
        assert!(
            m["display_information"]["description"]
                .as_str()
                .unwrap()
                .len()
                <= 140
        );
        assert!(
            m["display_information"]["long_description"]
                .as_str()
                .unwrap()
                .len()
                <= 4000
        );
        assert_eq!(
            m["settings"]["event_subscriptions"]["request_url"],
            "https://api.example.com/prod/slack/events"
        );
        assert_eq!(
            m["settings"]["interactivity"]["request_url"],
            "https://api.example.com/prod/slack/interactions"
        );
        assert_eq!(m["settings"]["interactivity"]["is_enabled"], true);
        let command = &m["features"]["slash_commands"][0];
        assert_eq!(command["command"], "/sandbox");
        assert_eq!(
            command["url"],
            "https://api.example.com/prod/slack/commands"
        );
        assert!(command["description"].as_str().unwrap().len() <= 100);
        let scopes: Vec<&str> = m["oauth_config"]["scopes"]["bot"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        for (event, scope) in BOT_EVENTS {
            if let Some(scope) = scope {
                assert!(scopes.contains(scope), "{event} needs {scope}: {scopes:?}");
            }
        }
        for needed in ["chat:write", "files:read", "files:write", "commands"] {
            assert!(scopes.contains(&needed), "{needed}: {scopes:?}");
        }
        let events: Vec<&str> = m["settings"]["event_subscriptions"]["bot_events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(events.len(), BOT_EVENTS.len());
        // The Home tab is what app_home_opened is for.
        assert!(events.contains(&"app_home_opened"));
        assert_eq!(m["features"]["app_home"]["home_tab_enabled"], true);
        // A bot user is what the events and chat:write act as.
        assert!(m["features"]["bot_user"]["display_name"].is_string());
        assert!(manifest("http://plain.example.com", "threadbox").is_err());
        assert!(manifest("https://api.example.com", "").is_err());
    }

    #[test]
    fn yaml_nests_maps_and_lists_and_quotes_every_string() {
        let value = json!({
            "a": {"b": true, "c": ["x", "y's \"z\""]},
            "d": [{"e": 1, "f": "g"}],
            "h": []
        });
        assert_eq!(
            to_yaml(&value),
            "a:\n  b: true\n  c:\n    - \"x\"\n    - \"y's \\\"z\\\"\"\nd:\n  - e: 1\n    f: \"g\"\nh: []\n"
        );
    }
}
