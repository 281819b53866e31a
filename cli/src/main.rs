//! `threadbox`: parse the command line, set up logging, run the command.

mod client;
mod command;
mod cost;
mod dev;
mod dlq;
mod duration;
mod exit;
mod images;
mod mcp;
mod processes;
mod secret_file;
mod slack;
mod threads;
mod token;
mod token_secret;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "threadbox",
    version,
    about = "One persistent, isolated sandbox per chat thread"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run everything in one local process: HTTP API, janitor and lifecycle consumer, on SQLite
    /// and runc sandboxes. Boxed: its flags make it far larger than the other commands.
    Dev(Box<dev::DevArgs>),
    /// Operate on threads over the HTTP API (`threadbox dev` or a deployed stack): list, show,
    /// pause, resume, reset, exec, events.
    Threads(threads::ThreadsArgs),
    /// The images sandboxes can start from (name, digest, size, set-up step, source), over the
    /// HTTP API; `threads resolve --image` and `threads image` choose a thread's.
    Images(images::ImagesArgs),
    /// A thread's background processes over the HTTP API: start, list, logs (`--follow`),
    /// input, kill.
    Processes(processes::ProcessesArgs),
    /// Mint a live-events subscription token for `GET /v1/ws`, signed with the local secret.
    Token(token::TokenArgs),
    /// Try the Slack app without Slack: `slack send` posts a signed event to `threadbox dev`.
    Slack(slack::SlackArgs),
    /// A deployed stack's dead-letter queues, through SQS: `dlq list`, `dlq redrive`.
    Dlq(dlq::DlqArgs),
    /// One thread's sandbox as an MCP server on stdio, for agent hosts (Claude, IDEs).
    Mcp(mcp::McpArgs),
    /// What the threads' sandboxes used and cost, by state and by thread, and what pausing
    /// saved (`--since 7d` for a window).
    Cost(cost::CostArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Dev(args) => dev::run(*args)
                .await
                .map(|()| std::process::ExitCode::SUCCESS),
            Command::Threads(args) => threads::run(args).await,
            Command::Images(args) => images::run(args).await,
            Command::Processes(args) => processes::run(args).await,
            Command::Token(args) => token::run(args).map(|()| std::process::ExitCode::SUCCESS),
            Command::Slack(args) => slack::run(args)
                .await
                .map(|()| std::process::ExitCode::SUCCESS),
            Command::Dlq(args) => dlq::run(args).await,
            Command::Mcp(args) => mcp::run(args).await,
            Command::Cost(args) => cost::run(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(error) if exit::is_closed_pipe(&error) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            exit::of_error(&error).into()
        }
    }
}

/// Human-readable logs on stderr (stdout is for what the user asked to see); `RUST_LOG` picks
/// the levels, `info` by default. Colours only on a terminal, so log files stay greppable.
fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
