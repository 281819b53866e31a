//! `threadbox token`: mint a live-events subscription token locally, with the same secret the
//! local server uses (`THREADBOX_TOKEN_SECRET`, else `<data dir>/token-secret`).
//!
//! Local on purpose: it works whether or not `threadbox dev` is running, needs no API key, and
//! anyone who can read the data directory could sign tokens anyway. Against a remote deployment,
//! use `POST /v1/tokens` with an API key instead.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use threadbox_api::live::TokenKey;
use threadbox_core::domain::{ThreadId, ThreadScope};
use threadbox_core::ports::{Clock, SystemClock};

use crate::{duration, token_secret};

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    /// A thread the token may watch; repeat for several.
    #[arg(
        long = "thread",
        value_name = "ID",
        required_unless_present = "all_threads"
    )]
    pub threads: Vec<String>,

    /// Let the token watch every thread (operators, dashboards).
    #[arg(long, conflicts_with = "threads")]
    pub all_threads: bool,

    /// How long the token is valid (at most 1d).
    #[arg(long, default_value = "1h", value_parser = duration::parse)]
    pub ttl: Duration,

    /// The data directory of the `threadbox dev` whose secret signs the token.
    #[arg(long, env = "THREADBOX_DATA_DIR", default_value = ".threadbox")]
    pub data_dir: PathBuf,

    /// Let the token also run commands in its threads' sandboxes over the WebSocket (`exec`
    /// frames), not only watch them. Off by default.
    #[arg(long)]
    pub exec: bool,

    /// Print `{"token", "expires_at", "threads", "exec"}` as JSON instead of the bare token.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    let scope = if args.all_threads {
        ThreadScope::Any
    } else {
        let ids = args
            .threads
            .iter()
            .map(|raw| ThreadId::parse(raw).with_context(|| format!("--thread {raw:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        ThreadScope::only(ids)?
    };
    if args.ttl.subsec_nanos() != 0 {
        bail!("--ttl must be whole seconds");
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating the data directory {}", args.data_dir.display()))?;
    let (secret, source) = token_secret::load(&args.data_dir)?;
    let minted = TokenKey::new(secret).mint_with_exec(
        scope,
        args.ttl,
        SystemClock.now(),
        args.exec,
        // Minted from the secret itself, by its holder (the operator): no API key to charge.
        None,
    )?;
    tracing::debug!(%source, expires_at = minted.expires_at.0, exec = minted.exec, "minted a live-events token");
    if args.json {
        println!("{}", serde_json::to_string(&minted)?);
    } else {
        println!("{}", minted.token);
    }
    Ok(())
}
