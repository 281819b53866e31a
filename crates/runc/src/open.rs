//! Opening a provider over a state directory, step by step: place and make the directories,
//! check runc (present, and patched against the escapes it knows of), open the home volumes
//! and the host's id table, then adopt what earlier runs left: sandboxes, their networks, and
//! leftovers to sweep.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use super::bundle::{self, Bundle, HostLayout};
use super::idmap::{IdRange, IdRanges};
use super::runtime::{ContainerState, Runc};
use super::volume::VolumePool;
use super::{
    cgroup, images, network, placement, process, rootless, runner, version, RuncConfig,
    RuncProvider,
};
use threadbox_core::ports::{ProviderError, SystemClock};

impl RuncProvider {
    /// Open (or create) the state directory, check runc, and sweep leftovers of earlier runs:
    /// bundles whose container is gone and containers whose bundle is gone.
    pub async fn open(mut config: RuncConfig) -> Result<Self, ProviderError> {
        let rootless = rootless::is_rootless();
        if !rootless && config.user_namespaces {
            // Each sandbox's root is a host uid of its own, which must pass through every
            // directory above its bundle; below a private one the state moves (`placement`).
            config.state_dir = placement::place(&config.state_dir, &config.host_state_dir)?
                .dir()
                .to_owned();
        }
        let rootless_ids = if rootless {
            Some(check_rootless(&config)?)
        } else {
            None
        };
        make_state_dirs(&config, rootless)?;
        if config.reap_orphans {
            if let Err(e) = process::become_subreaper() {
                tracing::warn!(error = %e, "cannot become a child subreaper; kills may be slow");
            }
        }
        let (runc, version) = start_runtime(&config, rootless).await?;
        let volumes = open_volumes(&config)?;
        let sandboxes_root = std::fs::canonicalize(config.sandboxes_dir()).map_err(|e| {
            ProviderError::Internal(format!(
                "cannot resolve {}: {e}",
                config.sandboxes_dir().display()
            ))
        })?;
        let id_ranges = IdRanges::new(config.id_ranges_dir.clone());
        if !rootless {
            id_ranges
                .adopt_legacy(&config.legacy_id_ranges_dir(), &sandboxes_root)
                .map_err(|e| {
                    ProviderError::Internal(format!(
                        "cannot move {} into the host's id table: {e}",
                        config.legacy_id_ranges_dir().display()
                    ))
                })?;
        }
        let refill_volumes = volumes.clone().map(spawn_volume_refill);
        let networks = network::Networks::new(config.network.clone(), &config.state_dir)?;
        let images = images::RegisteredImages::open(&config, rootless).await?;
        let runner = if config.command_runner {
            load_runner()
        } else {
            tracing::info!("the command runner is off: commands start through runc exec");
            None
        };
        let provider = Self {
            rootless_ids,
            host: HostLayout::probe(),
            swap_limit: cgroup::swap_limit_supported(),
            id_ranges,
            sandboxes_root,
            volumes,
            refill_volumes,
            runc,
            config,
            clock: Arc::new(SystemClock),
            slots: Mutex::new(HashMap::new()),
            commands: Arc::new(AtomicUsize::new(0)),
            admitting_sandbox: tokio::sync::Mutex::new(()),
            networks,
            images,
            runner,
        };
        let live = provider.survey().await?;
        provider.adopt_networks(&live).await;
        provider.finish_restores().await;
        tracing::info!(
            state_dir = %provider.config.state_dir.display(),
            %version,
            sandboxes = live.len(),
            swap_limit = provider.swap_limit,
            rootless,
            "runc provider ready"
        );
        Ok(provider)
    }

    /// At open: serve the live networked sandboxes another process made (their links are made
    /// anew), and delete host ends no sandbox on the host holds any more.
    async fn adopt_networks(&self, live: &[(Bundle, ContainerState)]) {
        if self.is_rootless() {
            return;
        }
        for (bundle, state) in live {
            if let Some(saved) = network::Networks::saved(bundle.dir()) {
                if let Err(e) = self.networks.adopt(state, &saved).await {
                    tracing::warn!(sandbox_id = %state.id, error = %e, "cannot reattach a sandbox's network");
                }
            }
        }
        let table = self.config.id_ranges_dir.clone();
        self.networks
            .sweep_links(|slot| table.join(slot.to_string()).exists())
            .await;
    }
}

/// Run by an ordinary user: whether the host lets it, and the ids its sandboxes then map.
fn check_rootless(config: &RuncConfig) -> Result<IdRange, ProviderError> {
    rootless::check_host().map_err(|why| {
        ProviderError::Unsupported(format!(
            "{why}: rootless sandboxes need one; run as root, or use E2B \
             (threadbox dev --provider e2b)"
        ))
    })?;
    if config.limits.disk.is_some() {
        return Err(ProviderError::Unsupported(
            "a disk quota needs root (each home is a loop-mounted filesystem image); \
             rootless, run without one (threadbox dev --disk-quota none)"
                .into(),
        ));
    }
    Ok(IdRange::rootless(
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    ))
}

/// The state directory and those below it, each with its mode.
fn make_state_dirs(config: &RuncConfig, rootless: bool) -> Result<(), ProviderError> {
    // The state and sandboxes directories are searchable (0711, never listable): each
    // container's root is a host id of its own range and must reach its bundle. runc's
    // state and the id allocations stay 0700. Rootless there is no host id table.
    let mut dirs = vec![
        (config.state_dir.clone(), 0o711),
        (config.runc_root(), 0o700),
        (config.sandboxes_dir(), 0o711),
        (config.state_dir.join(bundle::USERNS_DIR), 0o700),
        (config.volumes_dir(), 0o700),
    ];
    if rootless {
        dirs.push((rootless::paused_dir(&config.state_dir), 0o700));
    } else {
        dirs.push((config.id_ranges_dir.clone(), 0o700));
    }
    for (dir, mode) in dirs {
        create_dir_with_mode(&dir, mode).map_err(|e| {
            ProviderError::Internal(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    Ok(())
}

/// runc, asked for its version: refused where it is missing, or not fixed against an escape
/// it is known for (unless the operator allows that knowingly).
async fn start_runtime(
    config: &RuncConfig,
    rootless: bool,
) -> Result<(Runc, String), ProviderError> {
    let mut runc = Runc::new(
        config.runc_binary.clone(),
        config.runc_root(),
        config.call_timeout,
        config.limits.file_size_bytes,
    );
    if rootless {
        runc = runc.with_signal_freezer(rootless::paused_dir(&config.state_dir));
    }
    let version = runc.version().await.map_err(|e| {
        ProviderError::Unavailable(format!(
            "{e}; the runc provider needs runc (apt-get install runc)"
        ))
    })?;
    let runtime = version::RuntimeVersion::probe(&config.runc_binary, &version);
    let unfixed = runtime.unfixed(version::dpkg_at_least);
    if !unfixed.is_empty() {
        let escapes: Vec<String> = unfixed
            .iter()
            .map(|e| format!("{} ({})", e.cve, e.what))
            .collect();
        let package = runtime
            .package
            .as_deref()
            .map(|p| format!(", package {p}"))
            .unwrap_or_default();
        let message = format!(
            "{}{package} is not fixed against {}: upgrade runc (apt-get install \
             --only-upgrade runc)",
            runtime.reported,
            escapes.join("; ")
        );
        if !config.allow_unpatched_runtime {
            return Err(ProviderError::Unsupported(format!(
                "{message}, or allow it knowingly (threadbox dev --allow-unpatched-runc)"
            )));
        }
        tracing::warn!("{message}; running anyway because an unpatched runtime is allowed");
    }
    Ok((runc, version))
}

/// Where home volumes come from, when sandboxes have a disk quota.
fn open_volumes(config: &RuncConfig) -> Result<Option<VolumePool>, ProviderError> {
    let Some(quota) = config.limits.disk else {
        return Ok(None);
    };
    VolumePool::open(config.volumes_dir(), quota, config.spare_volumes)
        .map(Some)
        .map_err(|why| {
            ProviderError::Unsupported(format!(
                "{why}: each sandbox's home is a filesystem image of its own, the disk quota; \
                 install what is missing, or run without a quota knowingly (threadbox dev \
                 --disk-quota none)"
            ))
        })
}

/// Keep `pool` topped up: once now, then after every wake-up, until the provider is dropped. A
/// failure is logged and waits for the next wake-up (creates then format their own).
fn spawn_volume_refill(pool: VolumePool) -> tokio::sync::mpsc::Sender<()> {
    let (wake, mut woken) = tokio::sync::mpsc::channel::<()>(1);
    tokio::spawn(async move {
        loop {
            let filling = pool.clone();
            match tokio::task::spawn_blocking(move || filling.fill()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot format a spare home volume"),
                Err(e) => tracing::warn!(error = %e, "formatting a spare home volume panicked"),
            }
            if woken.recv().await.is_none() {
                break;
            }
        }
    });
    wake
}

/// Make `dir` (and its parents) and give it `mode`, also when it was there already with another.
fn create_dir_with_mode(dir: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        other => other?,
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// The command runner's image, or `None` (said in the log) where this build has none.
fn load_runner() -> Option<runner::RunnerImage> {
    match runner::RunnerImage::load() {
        Ok(Some(image)) => Some(image),
        Ok(None) if cfg!(feature = "command-runner") => {
            tracing::warn!(
                "this build has no command runner (see crates/runc/build.rs): commands start \
                 through runc exec"
            );
            None
        }
        Ok(None) => {
            tracing::info!("built without the command runner: commands start through runc exec");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot load the command runner: commands start through runc exec");
            None
        }
    }
}
