//! `threadbox slack`: try the Slack app without Slack.
//!
//! - `send`: post a signed event to the local ingress;
//! - `secret`: the signing secret `threadbox dev` and `send` share.

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
}

pub async fn run(args: SlackArgs) -> anyhow::Result<()> {
    match args.command {
        SlackCommand::Send(args) => send::run(args).await,
    }
}
