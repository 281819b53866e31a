//! `threadbox threads`: the operator's commands, over the HTTP API, so they work the same against
//! `threadbox dev` and a deployed stack. Tables for people by default, `--json` for scripts;
//! failures print `error: <message> (<code>)` on stderr and exit with the statuses in `exit.rs`.
//!
//! - `exec`: run a command, passing its output and exit status through;
//! - `events`: a thread's events, once or followed;
//! - `render` and `table`: the text people see; `output`: stdout for text and JSON (`cost`
//!   prints with them too).

mod events;
mod exec;
pub(crate) mod output;
pub(crate) mod render;
pub(crate) mod table;

use std::process::ExitCode;

use threadbox_core::domain::{parse_profile, ImageName, NetworkProfile, ThreadId};

use self::output::Output;
use crate::client::{ApiArgs, ThreadPage, UsageQuery};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 ok, 1 failure, 2 usage or bad request, 3 no such thread, \
                  4 conflict with the thread's state, 5 API unreachable or busy, 6 bad or \
                  missing API key. `exec` exits with the command's own status."
)]
pub struct ThreadsArgs {
    #[command(flatten)]
    api: ApiArgs,

    /// Print JSON instead of tables (`events` prints one event per line).
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: ThreadsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ThreadsCommand {
    /// Threads with their status, how long they have been idle, and their running and paused
    /// time with what it cost.
    List {
        /// Show at most this many (all by default).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
        /// Leave out running and paused time (they read every thread's events).
        #[arg(long)]
        no_usage: bool,
    },
    /// One thread's record, its usage (running and paused time, cost) and its recent events.
    Show {
        #[arg(value_parser = thread_id)]
        thread: String,
    },
    /// Get or create the thread's sandbox, resuming it when paused.
    Resolve {
        #[arg(value_parser = thread_id)]
        thread: String,
        /// The image a thread this creates starts from (`threadbox images` lists them); the
        /// operator's default when absent. A thread that exists with another is a conflict.
        #[arg(long, value_parser = image_name)]
        image: Option<ImageName>,
    },
    /// Pause the thread's sandbox (it resumes on next use).
    Pause {
        #[arg(value_parser = thread_id)]
        thread: String,
    },
    /// Resume a paused sandbox.
    Resume {
        #[arg(value_parser = thread_id)]
        thread: String,
    },
    /// Destroy the sandbox and every file in it, and start a fresh one.
    Reset {
        #[arg(value_parser = thread_id)]
        thread: String,
    },
    /// Change the thread's network profile: `restricted`, `networked` (every public address) or
    /// `networked:pypi.org,*.pythonhosted.org,203.0.113.0/24`, applied to the running or paused
    /// sandbox with its files kept.
    Network {
        #[arg(value_parser = thread_id)]
        thread: String,
        #[arg(value_parser = network_profile)]
        profile: NetworkProfile,
    },
    /// Change the thread's image (`threadbox images` lists them): its sandbox keeps the one it
    /// was made from, and its next (`reset`, or a recreate) starts from this.
    Image {
        #[arg(value_parser = thread_id)]
        thread: String,
        #[arg(value_parser = image_name)]
        image: ImageName,
    },
    /// Run a command in the thread's sandbox: `exec <thread> -- ls -la`, or `-c 'shell line'`.
    Exec(exec::ExecArgs),
    /// The thread's lifecycle events; `--follow` keeps watching.
    Events(events::EventsArgs),
}

/// Thread ids are checked here with the server's own rule, so a typo is a usage error at once
/// rather than a round trip.
pub(crate) fn thread_id(raw: &str) -> Result<String, String> {
    ThreadId::parse(raw)
        .map(|id| id.as_str().to_owned())
        .map_err(|e| e.to_string())
}

pub(crate) fn image_name(raw: &str) -> Result<ImageName, String> {
    ImageName::parse(raw)
}

fn network_profile(raw: &str) -> Result<NetworkProfile, String> {
    parse_profile(raw).map_err(|e| e.to_string())
}

pub async fn run(args: ThreadsArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let out = Output::new(args.json);
    match args.command {
        ThreadsCommand::List { limit, no_usage } => {
            let limit = limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
            let usage = if no_usage {
                UsageQuery::None
            } else {
                UsageQuery::Since(None)
            };
            let threads = client.list_with(limit, usage).await?;
            if out.json {
                // The API's page shape, with every page in it (so no `next`).
                out.document(&ThreadPage {
                    threads,
                    next: None,
                })?;
            } else {
                out.text(&render::threads_table(&threads, out.color))?;
            }
        }
        ThreadsCommand::Show { thread } => {
            let detail = client.show(&thread).await?;
            if out.json {
                out.document(&detail)?;
            } else {
                out.text(&render::thread_detail(&detail, out.color))?;
            }
        }
        ThreadsCommand::Resolve { thread, image } => {
            let handle = match &image {
                Some(image) => client.resolve_on(&thread, image).await?,
                None => client.resolve(&thread).await?,
            };
            if out.json {
                out.document(&handle)?;
            } else {
                out.text(&render::handle_line(&handle, out.color))?;
            }
        }
        ThreadsCommand::Pause { thread } => {
            let view = client.pause(&thread).await?;
            if out.json {
                out.document(&view)?;
            } else {
                out.text(&render::paused_line(&view, out.color))?;
            }
        }
        ThreadsCommand::Resume { thread } => {
            let handle = client.resume(&thread).await?;
            if out.json {
                out.document(&handle)?;
            } else {
                out.text(&render::handle_line(&handle, out.color))?;
            }
        }
        ThreadsCommand::Reset { thread } => {
            let reset = client.reset(&thread).await?;
            if out.json {
                out.document(&reset)?;
            } else {
                out.text(&render::reset_lines(&reset, out.color))?;
            }
        }
        ThreadsCommand::Network { thread, profile } => {
            let set = client.set_network(&thread, &profile).await?;
            if out.json {
                out.document(&set)?;
            } else {
                out.text(&format!(
                    "{thread}: network {} ({}): {}\n",
                    set.session.session.network.describe(),
                    set.applied.replace('_', " "),
                    set.message
                ))?;
            }
        }
        ThreadsCommand::Image { thread, image } => {
            let set = client.set_image(&thread, &image).await?;
            if out.json {
                out.document(&set)?;
            } else {
                out.text(&format!(
                    "{thread}: image {} ({}): {}\n",
                    set.session.session.image,
                    set.applied.replace('_', " "),
                    set.message
                ))?;
            }
        }
        ThreadsCommand::Exec(exec) => return exec::run(&client, exec, out).await,
        ThreadsCommand::Events(events) => events::run(&client, events, out).await?,
    }
    Ok(ExitCode::SUCCESS)
}
