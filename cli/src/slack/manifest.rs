//! `threadbox slack manifest --url <ApiUrl>`: the Slack app manifest for a deployment, so
//! installing the app is "create app from manifest, install, put two secrets" instead of copying
//! scopes and events out of the README. `infra/slack-manifest.json` is this command's output for
//! a placeholder URL (a test keeps them equal).
//!
//! The bot events are the ones the ingress acts on (`shared/src/slack/`), and each scope is one
//! an event or a Web API call needs; nothing more is asked for.

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// The API URL `infra/slack-manifest.json` is written for; replace it with the stack's
/// `ApiUrl` output (or generate the manifest with `--url`).
#[cfg(test)]
const PLACEHOLDER_URL: &str = "https://YOUR-API-ID.execute-api.REGION.amazonaws.com";

/// The bot events the ingress acts on, and the scope each needs.
pub const BOT_EVENTS: &[(&str, &str)] = &[
    ("app_mention", "app_mentions:read"),
    ("message.channels", "channels:history"),
    ("message.groups", "groups:history"),
    ("message.im", "im:history"),
];

/// The Web API methods the worker and the status target call, and the scope each needs.
pub const WEB_API_SCOPES: &[(&str, &str)] = &[
    ("chat.postMessage / chat.update", "chat:write"),
    ("files.info (shared files)", "files:read"),
];

#[derive(clap::Args, Debug)]
pub struct ManifestArgs {
    /// The deployment's API base URL (the stack's `ApiUrl` output, or a tunnel to `threadbox
    /// dev`); Slack sends events to `<url>/slack/events`.
    #[arg(long)]
    url: String,

    /// The app's name in Slack.
    #[arg(long, default_value = "threadbox")]
    name: String,
}

pub fn run(args: ManifestArgs) -> anyhow::Result<()> {
    let manifest = manifest(&args.url, &args.name)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&manifest).context("printing the manifest")?
    );
    Ok(())
}

/// The manifest for an API at `url`.
pub fn manifest(url: &str, name: &str) -> anyhow::Result<Value> {
    let base = url.trim().trim_end_matches('/');
    if !base.starts_with("https://") {
        bail!("--url {url:?} must be an https:// URL: Slack sends events only over HTTPS");
    }
    if name.trim().is_empty() || name.chars().count() > 35 {
        bail!("--name must be 1 to 35 characters (Slack's limit for an app's name)");
    }
    let mut scopes: Vec<&str> = BOT_EVENTS
        .iter()
        .chain(WEB_API_SCOPES)
        .map(|(_, scope)| *scope)
        .collect();
    scopes.sort_unstable();
    scopes.dedup();
    Ok(json!({
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {
            "name": name,
            "description": "A persistent Linux sandbox for every thread",
            "long_description": "Mention the app with a code block and it runs the code in this thread's own Linux sandbox: created on first use, paused when the thread goes quiet, resumed on the next message, with its files kept across messages. Type `help` in a mention for the commands."
        },
        "features": {
            "bot_user": {"display_name": name, "always_online": true}
        },
        "oauth_config": {
            "scopes": {"bot": scopes}
        },
        "settings": {
            "event_subscriptions": {
                "request_url": format!("{base}/slack/events"),
                "bot_events": BOT_EVENTS.iter().map(|(event, _)| *event).collect::<Vec<_>>()
            },
            "org_deploy_enabled": false,
            "socket_mode_enabled": false,
            "token_rotation_enabled": false
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file in the repository is what the command prints for the placeholder, so the two
    /// cannot drift.
    #[test]
    fn the_checked_in_manifest_is_the_commands_output() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/slack-manifest.json");
        let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(file, manifest(PLACEHOLDER_URL, "threadbox").unwrap());
    }

    /// Slack's rules for a manifest that installs: the required sections, an HTTPS request URL,
    /// and a scope for every event it subscribes to.
    #[test]
    fn the_manifest_has_what_slack_requires_and_a_scope_per_event() {
        let m = manifest("https://api.example.com/prod/", "threadbox").unwrap();
        assert_eq!(m["_metadata"]["major_version"], 1);
        assert_eq!(m["display_information"]["name"], "threadbox");
        assert_eq!(
            m["settings"]["event_subscriptions"]["request_url"],
            "https://api.example.com/prod/slack/events"
        );
        let scopes: Vec<&str> = m["oauth_config"]["scopes"]["bot"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        for (event, scope) in BOT_EVENTS {
            assert!(scopes.contains(scope), "{event} needs {scope}: {scopes:?}");
        }
        assert!(scopes.contains(&"chat:write") && scopes.contains(&"files:read"));
        let events = m["settings"]["event_subscriptions"]["bot_events"]
            .as_array()
            .unwrap();
        assert_eq!(events.len(), BOT_EVENTS.len());
        // A bot user is what the events and chat:write act as.
        assert!(m["features"]["bot_user"]["display_name"].is_string());
        assert!(manifest("http://plain.example.com", "threadbox").is_err());
        assert!(manifest("https://api.example.com", "").is_err());
    }
}
