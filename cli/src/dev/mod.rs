//! `threadbox dev`: everything in one local process on embedded defaults.
//!
//! One SQLite file holds the sessions, their events and the lifecycle queue; sandboxes are runc
//! containers under the data directory; the HTTP API listens on loopback; the janitor runs on a
//! timer. One queue loop (`queues`) serves every queue in the file, each through its handler: the
//! lifecycle queue to its fan-out targets (the log, the live-events WebSocket subscribers of
//! `GET /v1/ws`, with tokens from `POST /v1/tokens` or `threadbox token`, and the Slack status
//! messages); the transition queue the janitor hands its claimed pauses and destroys to; and the
//! Slack work that the Slack app's `POST /slack/events` queues, run in the threads' sandboxes
//! (see `slack`). `run` goes through the start-up a step at a time; the flags are in `args`.
//!
//! Stopping (Ctrl-C or SIGTERM) stops accepting requests and lets those in flight finish; the
//! janitor and the queue loops stop between iterations. Nothing is lost: messages not yet acked stay
//! in SQLite, and the containers of live threads keep running (they are the threads' sandboxes,
//! and the next start finds them because runc's state is on disk).

mod api_keys;
mod args;
mod dashboard;
mod data_dir;
mod egress_credentials;
mod images;
mod janitor;
mod preflight;
mod processes;
mod provider;
mod queues;
mod shutdown;
mod slack;
mod ws;
mod ws_limits;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use threadbox_api::http::{require_local, router, ApiAuth, LocalOnly};
use threadbox_api::live::token_routes;
use threadbox_api::live::{InProcessSender, LiveGateway, Subscribers, TokenKey};
use threadbox_core::domain::{EgressCredentials, Pricing, Timers};
use threadbox_core::fanout::{Fanout, FanoutTarget, LogTarget};
use threadbox_core::ports::{Clock, DedupeStore, DurableQueue, SandboxProvider, SystemClock};
use threadbox_core::usecases::{Config, Threadbox, WarmPool};
use threadbox_providers::ProviderSetup;
use threadbox_runc::RuncConfig;
use threadbox_sqlite::{
    Database, QueueConfig, SqliteCheckpointStore, SqliteDedupe, SqliteQueue, SqliteSessionStore,
    SqliteSubscriptionStore, SqliteWindowCounter,
};
use tokio::net::TcpListener;

pub use self::args::DevArgs;
use self::queues::{FanoutHandler, LoopConfig, QueueLoop};
use self::shutdown::Shutdown;
use self::ws::LiveSocket;
use crate::duration;
use crate::secret_file::SecretSource;
use crate::token_secret;

/// The lifecycle queue's name in the database (the Lambda side calls its SQS queue the same).
const LIFECYCLE_QUEUE: &str = "lifecycle";
/// The queue the janitor hands its claimed pauses and destroys to (on AWS, the SQS queue the
/// `pause` function's queue handler consumes).
const TRANSITION_QUEUE: &str = "transitions";
/// How long a stop waits for the janitor and the consumer to finish their iteration.
const STOP_GRACE: Duration = Duration::from_secs(60);

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    args.validate()?;
    let (chosen, egress_credentials) = choose_provider(&args)?;
    let data_dir = data_dir::prepare(&args.data_dir)?;
    let db_path = data_dir.join("threadbox.db");
    let stores = Stores::open(&db_path).await?;
    let (token_secret, secret_source) = token_secret::load(&data_dir)?;
    let token_key = TokenKey::new(token_secret);
    let Sandboxes {
        provider,
        pricing,
        caps,
    } = open_sandboxes(&args, &chosen, &data_dir, egress_credentials).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // Woken by each warm pool take: the pool is refilled at once, not at the next sweep.
    let pool_taken = Arc::new(tokio::sync::Notify::new());
    let tb = build_threadbox(&args, &chosen, &stores, provider, pricing, clock.clone())
        .await?
        .with_pool_refills(pool_taken.clone());
    let (auth, banner_auth) = load_auth(&args)?;
    let slack = slack::setup(slack::SlackDeps {
        data_dir: &data_dir,
        db_path: &db_path,
        database: stores.database.clone(),
        tb: tb.clone(),
        dedupe: stores.dedupe.clone(),
        auth: auth.clone(),
        clock: clock.clone(),
        rates: threadbox_slack::RateLimits {
            per_thread: args.slack_thread_rate,
            per_team: args.slack_team_rate,
        },
        checkpoint_turns: args.checkpoint_turns,
    })
    .await?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, args.port))
        .await
        .with_context(|| {
            format!(
                "listening on 127.0.0.1:{} (is another threadbox running? try --port)",
                args.port
            )
        })?;
    let addr = listener.local_addr()?;
    print_banner(
        addr,
        &data_dir,
        &args,
        &banner_auth,
        &secret_source,
        &slack,
        &sandbox_lines(&chosen, caps, &args),
    );

    let shutdown = Shutdown::install().context("installing signal handlers")?;
    let sockets = Arc::new(InProcessSender::default());
    let subscribers = Arc::new(Subscribers::new(
        stores.subscriptions.clone(),
        sockets.clone(),
        tb.store.clone(),
        clock.clone(),
    ));
    let targets: Vec<Arc<dyn FanoutTarget>> =
        vec![Arc::new(LogTarget), subscribers.clone(), slack.target];
    let mut loops = spawn_loops(&args, &tb, &stores, targets, slack.work, &shutdown).await?;
    loops.push((
        "warm pool refill",
        tokio::spawn(janitor::refill_pool(
            tb.clone(),
            pool_taken,
            shutdown.subscribe(),
        )),
    ));
    let live = ws::routes(LiveSocket {
        gateway: LiveGateway::new(subscribers, token_key.clone()),
        sender: sockets,
        threadbox: tb.clone(),
        shutdown: shutdown.subscribe(),
        connections: ws_limits::ConnectionCounter::new(ws_limits::ConnectionLimits {
            per_token: args.ws_max_per_token,
            per_address: args.ws_max_per_address,
        }),
    });
    let e2b = threadbox_e2b_api::E2bApi::new(tb.clone(), auth.clone(), token_key.clone());
    let app = router(tb.clone(), auth.clone())
        .merge(threadbox_e2b_api::routes(e2b))
        .merge(token_routes(token_key, clock, auth.clone()))
        .merge(threadbox_mcp::routes(tb, auth.clone()))
        .merge(live)
        .merge(slack.routes);
    let served = serve(listener, app, slack.events, &auth, shutdown).await;
    stop_loops(loops).await;
    served.context("serving the HTTP API")?;
    tracing::info!(
        "stopped; sandboxes of live threads keep running and will be found on the next start"
    );
    Ok(())
}

/// Which provider runs the sandboxes, with the egress credentials (given to E2B here, to runc in
/// [`open_sandboxes`]); runc's host is checked first.
fn choose_provider(
    args: &DevArgs,
) -> anyhow::Result<(provider::ChosenProvider, EgressCredentials)> {
    let mut chosen = provider::choose(args.provider.as_deref())?;
    let egress_credentials = egress_credentials::load(args.egress_credentials_file.as_deref())?;
    if let threadbox_providers::ProviderConfig::E2b(e2b) = &mut chosen.config {
        if !egress_credentials.is_empty() {
            if !e2b.egress_credentials.is_empty() {
                anyhow::bail!(
                    "{} is set and so is --egress-credentials-file: give the credentials one way",
                    threadbox_e2b::EGRESS_CREDENTIALS_VAR
                );
            }
            e2b.egress_credentials = egress_credentials.clone();
        }
    }
    if chosen.is_runc() {
        preflight::check()?;
    }
    Ok((chosen, egress_credentials))
}

/// Everything kept in the one SQLite file, opened once.
struct Stores {
    store: Arc<SqliteSessionStore>,
    database: Database,
    /// The lifecycle queue.
    queue: Arc<dyn DurableQueue>,
    /// Live-events connections and their positions. Connections recorded by an earlier run have
    /// no socket now: the first send to each finds it gone and removes it.
    subscriptions: Arc<SqliteSubscriptionStore>,
    /// What each fan-out target has, so a restart repeats nothing.
    dedupe: Arc<dyn DedupeStore>,
    /// The records of the threads' checkpoints.
    checkpoints: Arc<SqliteCheckpointStore>,
}

impl Stores {
    async fn open(db_path: &Path) -> anyhow::Result<Self> {
        let store = SqliteSessionStore::open(db_path)
            .with_context(|| format!("opening {}", db_path.display()))?;
        let database = store.database().clone();
        let queue: Arc<dyn DurableQueue> = Arc::new(
            SqliteQueue::new(database.clone(), LIFECYCLE_QUEUE, QueueConfig::default())
                .await
                .context("opening the lifecycle queue")?,
        );
        let subscriptions = Arc::new(
            SqliteSubscriptionStore::new(database.clone())
                .await
                .context("opening the live-events subscriptions")?,
        );
        let dedupe: Arc<dyn DedupeStore> = Arc::new(
            SqliteDedupe::open(db_path)
                .with_context(|| format!("opening {}", db_path.display()))?,
        );
        let checkpoints = Arc::new(
            SqliteCheckpointStore::new(database.clone())
                .await
                .context("opening the checkpoint records")?,
        );
        Ok(Self {
            checkpoints,
            store: Arc::new(store),
            database,
            queue,
            subscriptions,
            dedupe,
        })
    }
}

/// The sandbox provider as the flags set it up, with its prices and, for runc, its caps.
struct Sandboxes {
    provider: Arc<dyn SandboxProvider>,
    pricing: Pricing,
    /// Commands per thread, commands in all, sandboxes: runc's own (E2B applies its plan's).
    caps: Option<(usize, usize, usize)>,
}

async fn open_sandboxes(
    args: &DevArgs,
    chosen: &provider::ChosenProvider,
    data_dir: &Path,
    egress_credentials: EgressCredentials,
) -> anyhow::Result<Sandboxes> {
    let mut runc_config = RuncConfig::new(data_dir.join("sandboxes"));
    runc_config.network.credentials = egress_credentials;
    runc_config.network.operator_allow = args.network_open.0.clone();
    runc_config.allow_unpatched_runtime = args.allow_unpatched_runc;
    runc_config.max_commands_per_sandbox = args.max_commands_per_thread;
    if let Some(max) = args.max_commands {
        runc_config.max_commands = max;
    }
    if let Some(max) = args.max_sandboxes {
        runc_config.max_sandboxes = max;
    }
    runc_config.limits.disk = args.disk_quota();
    runc_config.limits.file_size_bytes = args.max_file_size;
    runc_config.images = args.image_registrations()?;
    if chosen.is_runc() {
        // Before any image is unpacked: a default naming none of them fails at once.
        images::check_defaults(
            &args.image_defaults()?,
            &images::as_listed(&runc_config.images),
        )?;
    } else if !runc_config.images.is_empty() {
        anyhow::bail!(
            "--image registers runc images; on E2B name templates with {} (NAME=TEMPLATE_ID,...)",
            threadbox_e2b::TEMPLATES_VAR
        );
    }
    let pricing = chosen.pricing(&runc_config.limits)?;
    let caps = chosen.is_runc().then_some((
        runc_config.max_commands_per_sandbox,
        runc_config.max_commands,
        runc_config.max_sandboxes,
    ));
    let setup = ProviderSetup {
        runc: runc_config,
        on_refused_key: None,
    };
    let provider = threadbox_providers::open(&chosen.config, setup)
        .await
        .with_context(|| format!("starting the {} sandbox provider", chosen.config.name()))?;
    images::check_defaults(&args.image_defaults()?, &provider.images())?;
    Ok(Sandboxes {
        provider,
        pricing,
        caps,
    })
}

/// The use cases over the stores and the provider, with the budgets and the warm pool.
async fn build_threadbox(
    args: &DevArgs,
    chosen: &provider::ChosenProvider,
    stores: &Stores,
    provider: Arc<dyn SandboxProvider>,
    pricing: Pricing,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Threadbox> {
    let config = Config {
        timers: Timers {
            idle_pause: args.idle_pause,
            retention: args.retention,
            lease: args.lease,
        },
        record_retention: args.record_retention,
        pricing,
        network: args.network_defaults()?,
        images: args.image_defaults()?,
        budgets: args.budgets(),
        ..Config::default()
    };
    let budget_counter = SqliteWindowCounter::new(stores.database.clone())
        .await
        .context("opening the budget counters")?;
    Ok(Threadbox::new(
        stores.store.clone(),
        provider,
        stores.queue.clone(),
        clock,
        config,
    )
    .with_budget_counter(Arc::new(budget_counter))
    .with_warm_pool(WarmPool {
        store: stores.store.clone(),
        size: args.warm_pool_size(chosen),
        max_age: args.warm_pool_max_age,
    })
    .with_checkpoints(stores.checkpoints.clone(), args.checkpoint_retention()?))
}

/// The API keys, and what the banner says about them.
fn load_auth(args: &DevArgs) -> anyhow::Result<(ApiAuth, BannerAuth)> {
    let keys_from_env = std::env::var(api_keys::KEYS_ENV).ok();
    let auth = api_keys::load(keys_from_env.as_deref(), args.api_keys_file.as_deref())?;
    let banner_auth = BannerAuth {
        enabled: auth.is_enabled(),
        client_export: api_keys::client_export(
            keys_from_env.as_deref(),
            args.api_keys_file.as_deref(),
            &auth,
        ),
    };
    if !auth.is_enabled() {
        tracing::warn!(
            "API authentication is off (no THREADBOX_API_KEYS): anything on this machine can \
             use the API; requests must be addressed to loopback, and cross-site browser \
             requests are refused"
        );
    }
    Ok((auth, banner_auth))
}

/// The loops beside the HTTP API, each a task that stops between iterations on `shutdown`.
type Loops = Vec<(&'static str, tokio::task::JoinHandle<()>)>;

/// Start the janitor's timer, the process watcher and one queue loop per queue: the lifecycle
/// queue to the fan-out `targets`, the transition queue the janitor hands its claims to, and the
/// Slack work queue.
async fn spawn_loops(
    args: &DevArgs,
    tb: &Threadbox,
    stores: &Stores,
    targets: Vec<Arc<dyn FanoutTarget>>,
    slack_work: QueueLoop,
    shutdown: &Shutdown,
) -> anyhow::Result<Loops> {
    let transitions: Arc<dyn DurableQueue> = Arc::new(
        SqliteQueue::new(
            stores.database.clone(),
            TRANSITION_QUEUE,
            QueueConfig::default(),
        )
        .await
        .context("opening the transition queue")?,
    );
    let janitor = janitor::run(
        tb.clone().with_transition_queue(transitions.clone()),
        stores.database.clone(),
        args.janitor_interval,
        shutdown.subscribe(),
    );
    let transition_loop = QueueLoop::new(
        transitions,
        queues::Transitions(tb.clone()),
        LoopConfig::transitions(args.lease),
    );
    let process_watcher = processes::run(
        tb.clone(),
        processes::WATCH_INTERVAL,
        processes::LOOK_DEADLINE,
        shutdown.subscribe(),
    );
    let consumer = QueueLoop::new(
        stores.queue.clone(),
        FanoutHandler(Fanout::new(stores.dedupe.clone(), targets)),
        LoopConfig::lifecycle(args.fanout_retry),
    );
    Ok(vec![
        ("janitor", tokio::spawn(janitor)),
        (
            "transition loop",
            tokio::spawn(transition_loop.run(shutdown.subscribe())),
        ),
        ("process watcher", tokio::spawn(process_watcher)),
        ("consumer", tokio::spawn(consumer.run(shutdown.subscribe()))),
        (
            "Slack worker",
            tokio::spawn(slack_work.run(shutdown.subscribe())),
        ),
    ])
}

/// Serve `app` (and Slack's `events`) until a stop is asked for, letting requests in flight
/// finish.
async fn serve(
    listener: TcpListener,
    app: axum::Router,
    slack_events: axum::Router,
    auth: &ApiAuth,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let mut app = app.merge(dashboard::routes());
    if !auth.is_enabled() {
        // Every route, the dashboard and the WebSocket upgrade included: without keys, only
        // this machine's own tools, addressed to this server's own port.
        app = app.layer(axum::middleware::from_fn_with_state(
            LocalOnly::on_port(port),
            require_local,
        ));
    }
    // Slack's events carry their own authentication (the signature), and arrive through a
    // tunnel under its name when Slack talks to a developer's machine.
    let app = app.merge(slack_events);
    let stop = shutdown.clone();
    // With each connection's peer address, for the WebSocket caps.
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move { shutdown.requested().await })
    .await;
    if served.is_err() {
        // The server only returns early on an accept error: stop the loops as well.
        stop.trigger();
    }
    served
}

/// Wait for each loop to finish its iteration, at most [`STOP_GRACE`] each.
async fn stop_loops(loops: Loops) {
    for (name, task) in loops {
        match tokio::time::timeout(STOP_GRACE, task).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "the {name} task failed"),
            Err(_) => tracing::warn!("the {name} did not stop within {STOP_GRACE:?}"),
        }
    }
}

/// The banner's lines about sandboxes: the provider and what chose it, and runc's own limits.
fn sandbox_lines(
    provider: &provider::ChosenProvider,
    caps: Option<(usize, usize, usize)>,
    args: &DevArgs,
) -> Vec<String> {
    let rootless = provider.is_runc() && preflight::rootless();
    let where_ = if rootless {
        "local runc containers, rootless"
    } else if provider.is_runc() {
        "local runc containers"
    } else {
        "E2B's cloud, with this machine's E2B_API_KEY"
    };
    let mut lines = vec![format!(
        "provider   {} ({where_}; chosen by {})",
        provider.config.name(),
        provider.source
    )];
    if let Some((per_thread, commands, sandboxes)) = caps {
        lines.push(format!(
            "limits     {per_thread} commands per thread, {commands} in all, {sandboxes} \
             sandboxes (--max-commands-per-thread, --max-commands, --max-sandboxes)"
        ));
        let disk = match args.disk_quota() {
            Some(quota) => format!(
                "{} and {} files per thread's /home/user",
                bytesize::ByteSize::b(quota.bytes).display().iec(),
                quota.inodes
            ),
            None => "none: /home/user is a plain directory on this machine's disk".to_owned(),
        };
        lines.push(format!("disk       {disk} (--disk-quota, --disk-files)"));
    }
    let pool = args.warm_pool_size(provider);
    lines.push(if pool == 0 {
        "pool       none: every new thread waits for a create (--warm-pool)".to_owned()
    } else {
        format!(
            "pool       {pool} sandboxes made ahead per network profile, replaced after {} \
             (--warm-pool, --warm-pool-max-age)",
            duration::format(args.warm_pool_max_age)
        )
    });
    if rootless {
        // What running without root costs, said where the developer looks first.
        for (n, weaker) in threadbox_runc::ROOTLESS_WEAKER.iter().enumerate() {
            let label = if n == 0 { "rootless" } else { "" };
            lines.push(format!("{label:<10} {weaker}"));
        }
    }
    lines
}

/// What the banner says about API keys.
struct BannerAuth {
    enabled: bool,
    /// The shell line that sets the client's key from where the server read its keys.
    client_export: Option<String>,
}

/// Where to look: user-facing, so on stdout (logs go to stderr).
fn print_banner(
    addr: SocketAddr,
    data_dir: &Path,
    args: &DevArgs,
    auth: &BannerAuth,
    token_secret: &SecretSource,
    slack: &slack::SlackParts,
    sandbox_lines: &[String],
) {
    let base = format!("http://{addr}");
    let auth_header = if auth.enabled {
        format!(
            " -H \"Authorization: Bearer ${}\"",
            api_keys::CLIENT_KEY_ENV
        )
    } else {
        String::new()
    };
    println!("threadbox dev is running");
    println!("  API        {base}");
    println!("  dashboard  {base}/");
    println!(
        "  auth       {}",
        if auth.enabled {
            "bearer API keys (THREADBOX_API_KEYS); clients send THREADBOX_API_KEY"
        } else {
            "off: set THREADBOX_API_KEYS to require keys"
        }
    );
    println!(
        "  e2b        E2B_API_URL={base}{e2b} E2B_SANDBOX_URL={base}{e2b} E2B_API_KEY=<a threadbox API key>  (docs/e2b-api.md)",
        e2b = threadbox_e2b_api::BASE_PATH
    );
    println!("  live       ws://{addr}/v1/ws?token=TOKEN  (threadbox token --thread ID, or POST /v1/tokens; secret: {token_secret})");
    let replies = match &slack.outgoing {
        slack::Outgoing::Slack { api_url } => format!("replies to Slack ({api_url})"),
        slack::Outgoing::Sink => {
            format!("no SLACK_BOT_TOKEN: replies kept at {base}/v1/slack/sink")
        }
    };
    println!(
        "  slack      POST {base}{} {} {}  (signing secret: {}); {replies}",
        threadbox_slack::EVENTS_PATH,
        threadbox_slack::INTERACTIONS_PATH,
        threadbox_slack::COMMANDS_PATH,
        slack.secret
    );
    // The sandboxes may live elsewhere, behind a link (see the runc provider's `placement`).
    let sandboxes = match std::fs::read_link(data_dir.join("sandboxes")) {
        Ok(target) => format!("sandboxes/ → {}", target.display()),
        Err(_) => "sandboxes/".to_owned(),
    };
    println!(
        "  data       {}  (threadbox.db: {} with its WAL, {sandboxes})",
        data_dir.display(),
        janitor::format_bytes(janitor::store_size(data_dir))
    );
    println!(
        "  janitor    every {}; pause after {} idle, destroy after {}; delete destroyed threads' records after {}",
        duration::format(args.janitor_interval),
        duration::format(args.idle_pause),
        duration::format(args.retention),
        duration::format(args.record_retention)
    );
    if let Ok(network) = args.network_defaults() {
        println!("  network    new threads: {}", network.describe());
    }
    if let Ok(images) = args.image_defaults() {
        println!(
            "  images     new threads: {} (`threadbox images` lists them)",
            images.describe()
        );
    }
    for line in sandbox_lines {
        println!("  {line}");
    }
    // With keys, the first line sets the client's key, so the lines work pasted into the shell
    // that started the server (or, failing that, says what to set).
    let mut try_lines = Vec::new();
    if auth.enabled {
        try_lines.push(match &auth.client_export {
            Some(export) => format!("{export}   # the key the lines below send"),
            None => format!(
                "export {}=...   # one of the server's keys, for the lines below",
                api_keys::CLIENT_KEY_ENV
            ),
        });
    }
    try_lines.push(format!("curl -s -X POST {base}/v1/threads/demo/exec{auth_header} -H 'content-type: application/json' -d '{{\"cmd\":\"echo hello\"}}'"));
    try_lines.push(format!("curl -s {base}/v1/threads{auth_header}"));
    for (n, line) in try_lines.iter().enumerate() {
        let label = if n == 0 { "try" } else { "" };
        println!("  {label:<10} {line}");
    }
    println!("             threadbox slack send --url {base} --data-dir {} --thread slack:T1:C1 '```echo hello from a thread```'", data_dir.display());
    println!("Ctrl-C stops (sandboxes of live threads keep running).");
}
