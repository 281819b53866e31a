//! `threadbox slack`: try the Slack app without Slack.
//!
//! - `send`: post a signed event to the local ingress;
//! - `click`: press a status card's button (or submit its modal) in `threadbox dev`'s sink;
//! - `manifest`: the Slack app manifest for a deployment;
//! - `secret`: the signing secret `threadbox dev` and `send` share.

mod click;
mod manifest;
pub mod secret;
mod send;

#[derive(clap::Args, Debug)]
pub struct SlackArgs {
    #[command(subcommand)]
    command: SlackCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SlackCommand {
    /// Post a signed Slack event (an @mention, or a DM) to `threadbox dev`'s /slack/events;
    /// replies appear in `GET /v1/slack/sink` (or in Slack when dev has a bot token).
    Send(send::SendArgs),
    /// Press a button of a thread's status card in `threadbox dev`'s Slack sink (pause, resume,
    /// reset), or submit its open modal (--submit), as a signed Slack interaction.
    Click(click::ClickArgs),
    /// Print the Slack app manifest for an API URL: create the app from it in Slack ("From an
    /// app manifest"), install it, and give threadbox its two secrets.
    Manifest(manifest::ManifestArgs),
}

pub async fn run(args: SlackArgs) -> anyhow::Result<()> {
    match args.command {
        SlackCommand::Send(args) => send::run(args).await,
        SlackCommand::Click(args) => click::run(args).await,
        SlackCommand::Manifest(args) => manifest::run(args),
    }
}
