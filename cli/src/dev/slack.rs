//! The Slack app inside `threadbox dev`: `POST /slack/events`, `/slack/interactions` and
//! `/slack/commands`, the worker loop on the work queue, and the Slack status target for the
//! fan-out.
//!
//! Outgoing calls go to Slack when `SLACK_BOT_TOKEN` is set (and `SLACK_API_URL`, if set, says
//! where the Web API is); otherwise to a sink in the same SQLite file, shown at
//! `GET /v1/slack/sink` behind the API keys. The signing secret comes from
//! `SLACK_SIGNING_SECRET`, or is made in the data directory (see `crate::slack::secret`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use threadbox_api::http::ApiAuth;
use threadbox_core::config::Env;
use threadbox_core::fanout::FanoutTarget;
use threadbox_core::ports::{Clock, DedupeStore, DurableQueue};
use threadbox_core::usecases::Threadbox;
use threadbox_slack::sink_route::SinkClicks;
use threadbox_slack::slack_sink_routes;
use threadbox_slack::{
    router as events_router, MessageRates, RateLimits, SlackApi, SlackIngress, SlackStatusTarget,
    SlackWorker, SlackWorkerConfig, WORK_QUEUE,
};
use threadbox_slack_web::{SlackClientConfig, SlackWebClient};
use threadbox_sqlite::{
    Database, QueueConfig, SqliteQueue, SqliteSlackSink, SqliteSlackStatusStore,
    SqliteSlackUserThreads, SqliteWindowCounter,
};

use super::queues::{LoopConfig, QueueLoop};
use crate::secret_file::SecretSource;
use crate::slack::secret::{self, SECRET_ENV};

/// Where replies go, for the banner.
pub enum Outgoing {
    Slack { api_url: String },
    Sink,
}

pub struct SlackParts {
    /// `GET /v1/slack/sink` (with the sink): behind the API's keys or its local-only rule.
    pub routes: Router,
    /// `POST /slack/events`, `/slack/interactions`, `/slack/commands`: authenticated by Slack's
    /// signature, so they also answer requests addressed to a tunnel's name (how Slack reaches a
    /// developer's machine).
    pub events: Router,
    pub target: Arc<dyn FanoutTarget>,
    /// The Slack work queue's loop.
    pub work: QueueLoop,
    pub secret: SecretSource,
    pub outgoing: Outgoing,
}

pub struct SlackDeps<'a> {
    pub data_dir: &'a Path,
    pub db_path: &'a Path,
    pub database: Database,
    pub tb: Threadbox,
    pub dedupe: Arc<dyn DedupeStore>,
    pub auth: ApiAuth,
    pub clock: Arc<dyn Clock>,
    /// Messages acted on per minute, per thread and per workspace.
    pub rates: RateLimits,
    /// A checkpoint before each code block, for its Undo button (`--checkpoint-turns`).
    pub checkpoint_turns: bool,
}

pub async fn setup(deps: SlackDeps<'_>) -> anyhow::Result<SlackParts> {
    let from_env = std::env::var(SECRET_ENV).ok();
    let (signing_secret, secret_source) =
        secret::load_or_create(deps.data_dir, from_env.as_deref())?;
    let client_config =
        SlackClientConfig::from_env(&Env::process()).context("reading the Slack settings")?;

    let mut routes = Router::new();
    // The sink's routes are made once the interactions router exists (clicks go through it).
    let mut sink_for_routes = None;
    let (api, outgoing): (Arc<dyn SlackApi>, Outgoing) = match client_config {
        Some(config) => {
            if !matches!(secret_source, SecretSource::Environment(_)) {
                tracing::warn!(
                    "SLACK_BOT_TOKEN is set but SLACK_SIGNING_SECRET is not: requests from Slack \
                     itself will fail the signature check; set it to the app's signing secret"
                );
            }
            let api_url = config.api_url.to_string();
            let client = SlackWebClient::new(config).context("building the Slack client")?;
            (Arc::new(client), Outgoing::Slack { api_url })
        }
        None => {
            let sink = SqliteSlackSink::open(deps.db_path)
                .with_context(|| format!("opening the Slack sink in {}", deps.db_path.display()))?;
            sink_for_routes = Some(sink.clone());
            (Arc::new(sink), Outgoing::Sink)
        }
    };

    let work_queue: Arc<dyn DurableQueue> = Arc::new(
        SqliteQueue::new(deps.database.clone(), WORK_QUEUE, QueueConfig::default())
            .await
            .context("opening the Slack work queue")?,
    );
    let clicks_secret = signing_secret.clone();
    let ingress = SlackIngress::new(
        Some(signing_secret),
        deps.dedupe.clone(),
        work_queue.clone(),
        deps.clock.clone(),
    )
    .with_api(api.clone());
    let status_store = SqliteSlackStatusStore::open(deps.db_path).with_context(|| {
        format!(
            "opening the Slack status store in {}",
            deps.db_path.display()
        )
    })?;
    let target = Arc::new(
        SlackStatusTarget::new(api.clone(), Arc::new(status_store))
            .with_usage(deps.tb.store.clone(), deps.tb.config.pricing),
    );
    let worker_config = SlackWorkerConfig {
        checkpoint_turns: deps.checkpoint_turns,
        ..SlackWorkerConfig::default()
    };
    let work_config = LoopConfig::slack_work(worker_config.exec_timeout);
    let counter = SqliteWindowCounter::new(deps.database.clone())
        .await
        .context("opening the Slack rate counters")?;
    let rates = MessageRates::new(Arc::new(counter), deps.rates, deps.clock.clone());
    let user_threads = SqliteSlackUserThreads::open(deps.db_path).with_context(|| {
        format!(
            "opening the Slack user threads in {}",
            deps.db_path.display()
        )
    })?;
    let worker = SlackWorker::new(deps.tb, api, deps.dedupe, work_queue.clone(), worker_config)
        .with_rates(rates)
        .with_user_threads(Arc::new(user_threads));
    let events = events_router(ingress);
    if let Some(sink) = sink_for_routes {
        let clicks = SinkClicks {
            secret: clicks_secret,
            slack: events.clone(),
        };
        routes = routes.merge(slack_sink_routes(
            Arc::new(sink),
            deps.auth.clone(),
            Some(clicks),
        ));
    }
    Ok(SlackParts {
        routes,
        events,
        target,
        work: QueueLoop::new(work_queue, worker, work_config),
        secret: secret_source,
        outgoing,
    })
}
