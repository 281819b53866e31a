//! `RuncProvider`: the local sandbox backend. One runc container per sandbox, no daemon of our
//! own: everything lives in a state directory (runc's `--root` included), so a new provider
//! over the same directory finds the same sandboxes, running or paused.
//!
//! Inside a sandbox: uid 1000 with no capabilities and no new privileges; its own user
//! namespace over a host id range of its own (`idmap`), pid, mount,
//! network (loopback only, or through an allowlist: `network`), ipc, uts and cgroup namespaces; the host's `/usr` read-only under a
//! read-only root with a generated `/etc`; `/tmp` a size-limited tmpfs; `/home/user` persistent
//! and writable, a filesystem of its own with a hard size and file limit (`volume`); memory, CPU and pid limits from [`SandboxLimits`]; a seccomp filter against
//! user namespaces and kernel-attack syscalls. Pause and resume use the cgroup freezer.
//!
//! The pieces: `bundle` lays out the OCI bundle, `runtime` drives the runc CLI, `exec` runs
//! commands, `files` and `search` are the confined file API, `cgroup` finds a container on the
//! host, `ids` makes and checks sandbox ids, `idmap` gives each sandbox its host ids, `volume`
//! its home's filesystem, `rootless` what stands in for root when there is none, `placement`
//! where the state lives so that each sandbox's root can reach its bundle.
//!
//! # Root and rootless
//!
//! As root the provider has everything above. Run by an ordinary user it runs rootless (see
//! `rootless`): runc makes each sandbox's user namespace, mapping the sandbox's user 1000 to
//! the caller, and there are no cgroups (no limits; pause by `SIGSTOP`), no mounts on the host
//! (no disk quota) and no per-sandbox host ids. [`RuncProvider::open`] refuses, in one line
//! naming the setting, where the kernel forbids unprivileged user namespaces.

mod bundle;
mod cgroup;
mod config;
mod dns;
mod egress;
mod egress_ca;
mod exec;
mod files;
#[cfg(test)]
mod hostile;
mod idmap;
mod ids;
mod intercept;
mod network;
mod network_config;
mod placement;
mod process;
mod process_records;
mod refusals;
mod remove;
mod rootless;
mod runtime;
mod search;
mod trust;
mod version;
mod volume;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use self::bundle::{write_bundle, Bundle, BundleSpec, HostLayout, SandboxRecord};
use self::cgroup::ContainerCgroup;
use self::exec::{ExecError, ExecTarget};
use self::files::SandboxFs;
use self::idmap::{IdRange, IdRanges};
use self::ids::{hostname_for, new_sandbox_id, validate_sandbox_id};
use self::process_records::ContainerProcs;
use self::runtime::{ContainerState, ContainerStatus, Runc, RuncError};
use self::volume::VolumePool;
use threadbox_core::ports::{
    is_fork_failure, process_limit_reached, processes, too_large_upload, Clock, Connected,
    CreateSandbox, CreatedSandbox, ExecRequest, ExecResult, FileChunks, FileEntry, GrepMatch,
    Limit, NetworkProfile, NetworkRefusals, OpenFile, OutputSink, ProcessInfo, ProcessOutput,
    ProcessSignal, ProviderError, SandboxInfo, SandboxOwner, SandboxProvider, SandboxState,
    SystemClock,
};

pub use self::config::{find_runc, host_can_run_sandboxes, DiskQuota, RuncConfig, SandboxLimits};
pub use self::network_config::NetworkConfig;
pub use self::rootless::WEAKER as ROOTLESS_WEAKER;

/// The local sandbox provider. See the module docs.
pub struct RuncProvider {
    config: RuncConfig,
    /// Run by an ordinary user: the ids its sandboxes map (see the `rootless` module).
    rootless_ids: Option<IdRange>,
    runc: Runc,
    host: HostLayout,
    swap_limit: bool,
    id_ranges: IdRanges,
    /// The sandboxes directory as an absolute path, for naming owners in the host's id table.
    sandboxes_root: std::path::PathBuf,
    /// Where home volumes come from, when sandboxes have a disk quota.
    volumes: Option<VolumePool>,
    /// Wakes the task that formats spare volumes after a create took one; dropping the
    /// provider drops it, which ends the task.
    refill_volumes: Option<tokio::sync::mpsc::Sender<()>>,
    clock: Arc<dyn Clock>,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    /// Commands running now, across every sandbox (for `max_commands`).
    commands: Arc<AtomicUsize>,
    /// Serialises counting sandboxes with laying out a new one, so concurrent creates cannot
    /// all slip under `max_sandboxes`.
    admitting_sandbox: tokio::sync::Mutex<()>,
    /// Networked sandboxes' links, resolvers and egress proxy (see the `network` module).
    networks: network::Networks,
}

/// What the provider keeps in memory about one sandbox. Nothing here is needed to find a
/// sandbox again after a restart; it only coordinates this process's calls.
#[derive(Default)]
struct Slot {
    /// Serialises lifecycle changes (create, pause, resume, kill) and the start of commands.
    lifecycle: tokio::sync::Mutex<()>,
    /// Commands running now. Pause refuses while any runs, and a command only starts under
    /// `lifecycle`, so none can start while a pause is under way.
    execs: AtomicUsize,
    /// Where the running container is on the host, found once and re-checked on use.
    cgroup: Mutex<Option<Arc<ContainerCgroup>>>,
}

/// Counts one running command, on its slot and across the provider, for as long as it lives.
struct ExecHold {
    slot: Arc<Slot>,
    commands: Arc<AtomicUsize>,
}

impl ExecHold {
    /// Take a place for one more command, or say which cap is reached. Counted first and undone
    /// when over, so concurrent callers cannot all pass the check.
    fn admit(
        slot: Arc<Slot>,
        commands: Arc<AtomicUsize>,
        config: &RuncConfig,
    ) -> Result<Self, ProviderError> {
        let hold = Self { slot, commands };
        let in_sandbox = hold.slot.execs.fetch_add(1, Ordering::SeqCst) + 1;
        let in_all = hold.commands.fetch_add(1, Ordering::SeqCst) + 1;
        let (per, all) = (config.max_commands_per_sandbox, config.max_commands);
        if in_sandbox > per {
            return Err(limit(
                Limit::CommandsInSandbox,
                format!(
                    "this thread already runs {per} commands at once, its limit; try again \
                     when one finishes"
                ),
                Duration::from_secs(2),
            ));
        }
        if in_all > all {
            return Err(limit(
                Limit::Commands,
                format!(
                    "this host already runs {all} commands at once, its limit; try again \
                     shortly"
                ),
                Duration::from_secs(5),
            ));
        }
        Ok(hold)
    }
}

impl Drop for ExecHold {
    fn drop(&mut self) {
        self.slot.execs.fetch_sub(1, Ordering::SeqCst);
        self.commands.fetch_sub(1, Ordering::SeqCst);
    }
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

fn limit(limit: Limit, message: String, retry_after: Duration) -> ProviderError {
    ProviderError::LimitReached {
        limit,
        message,
        retry_after,
    }
}

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
        let mut rootless_ids = None;
        if rootless {
            rootless::check_host().map_err(|why| {
                ProviderError::Unsupported(format!(
                    "{why}: rootless sandboxes need one; run as root, or use E2B \
                     (threadbox dev --provider e2b)"
                ))
            })?;
            rootless_ids = Some(IdRange::rootless(
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            ));
            if config.limits.disk.is_some() {
                return Err(ProviderError::Unsupported(
                    "a disk quota needs root (each home is a loop-mounted filesystem image); \
                     rootless, run without one (threadbox dev --disk-quota none)"
                        .into(),
                ));
            }
        }
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
        if config.reap_orphans {
            if let Err(e) = process::become_subreaper() {
                tracing::warn!(error = %e, "cannot become a child subreaper; kills may be slow");
            }
        }
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
        let volumes = match config.limits.disk {
            Some(quota) => Some(
                VolumePool::open(config.volumes_dir(), quota, config.spare_volumes).map_err(
                    |why| {
                        ProviderError::Unsupported(format!(
                            "{why}: each sandbox's home is a filesystem image of its own, \
                             the disk quota; install what is missing, or run without a \
                             quota knowingly (threadbox dev --disk-quota none)"
                        ))
                    },
                )?,
            ),
            None => None,
        };
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
        };
        let live = provider.survey().await?;
        provider.adopt_networks(&live).await;
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

    /// Use another clock for created/deadline times (tests move time by hand).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn config(&self) -> &RuncConfig {
        &self.config
    }

    /// Whether the sandboxes run rootless (see the `rootless` module for what that lacks).
    pub fn is_rootless(&self) -> bool {
        self.rootless_ids.is_some()
    }

    /// The memory a live sandbox's cgroup is charged for now (page cache included), in bytes:
    /// what the benchmarks report per idle and per paused sandbox.
    pub async fn memory_usage(&self, sandbox_id: &str) -> Result<u64, ProviderError> {
        self.existing_bundle(sandbox_id)?;
        let slot = self.slot(sandbox_id);
        let cgroup = self
            .container_cgroup(sandbox_id, &slot)
            .await?
            .ok_or_else(|| {
                ProviderError::Unsupported("this host does not show the container's cgroup".into())
            })?;
        cgroup
            .memory_bytes()
            .map_err(|e| ProviderError::Internal(format!("reading {sandbox_id}'s memory: {e}")))
    }

    fn slot(&self, id: &str) -> Arc<Slot> {
        self.slots
            .lock()
            .expect("slot map poisoned")
            .entry(id.to_owned())
            .or_default()
            .clone()
    }

    /// Sandboxes with a bundle on disk: alive, paused, or being made or removed.
    fn count_bundles(&self) -> Result<usize, ProviderError> {
        let dir = self.config.sandboxes_dir();
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| ProviderError::Internal(format!("cannot count the sandboxes: {e}")))?;
        Ok(entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| validate_sandbox_id(name).is_ok())
            .count())
    }

    /// The bundle of a valid id; `Gone` if there is none.
    fn existing_bundle(&self, id: &str) -> Result<Bundle, ProviderError> {
        validate_sandbox_id(id)?;
        let bundle = Bundle::new(&self.config.sandboxes_dir(), id);
        if bundle.exists() {
            Ok(bundle)
        } else {
            Err(gone(id))
        }
    }

    /// The container's state if it is alive (running or paused); `Gone` otherwise.
    async fn live_state(&self, id: &str) -> Result<ContainerState, ProviderError> {
        match self.runc.state(id).await? {
            Some(state) if state.status.is_alive() => Ok(state),
            _ => Err(gone(id)),
        }
    }

    /// Turn a failed runc call into the right error: `Gone` if the container is not there any
    /// more, the call's own error otherwise.
    async fn classify(&self, id: &str, err: RuncError) -> ProviderError {
        match self.runc.state(id).await {
            Ok(Some(state)) if state.status.is_alive() => err.into(),
            Ok(_) => gone(id),
            Err(state_err) => state_err.into(),
        }
    }

    /// Cache a new container's host handles from the pid file `runc run` wrote, so its first
    /// command does not ask `runc state` (11 ms of a first exec's 59, measured by the warm pool
    /// benchmark, whose members are made long before their first command). Best effort: a miss
    /// is looked up on first use as before.
    fn remember_cgroup(&self, id: &str, bundle: &Bundle) {
        let pid = std::fs::read_to_string(bundle.init_pid_file())
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
            .filter(|pid| *pid > 0);
        if let Some(Ok(found)) = pid.map(ContainerCgroup::of_init) {
            *self.slot(id).cgroup.lock().expect("poisoned") = Some(Arc::new(found));
        }
    }

    /// The running container's host handles: cached while its init lives, else looked up.
    async fn container_cgroup(
        &self,
        id: &str,
        slot: &Slot,
    ) -> Result<Option<Arc<ContainerCgroup>>, ProviderError> {
        if let Some(cached) = slot.cgroup.lock().expect("poisoned").clone() {
            if cached.is_current() {
                return Ok(Some(cached));
            }
        }
        let state = self.live_state(id).await?;
        match ContainerCgroup::of_init(state.pid) {
            Ok(found) => {
                let found = Arc::new(found);
                *slot.cgroup.lock().expect("poisoned") = Some(found.clone());
                Ok(Some(found))
            }
            Err(e) => {
                // Commands still run; only OOM reporting, the timeout sweep and /tmp suffer.
                tracing::warn!(sandbox_id = id, error = %e, "cannot find the container's cgroup");
                Ok(None)
            }
        }
    }

    fn info_from(&self, bundle: &Bundle, state: ContainerState) -> SandboxInfo {
        let record = bundle.read_record().ok();
        SandboxInfo {
            state: match state.status {
                ContainerStatus::Paused => SandboxState::Paused,
                _ => SandboxState::Running,
            },
            metadata: state.annotations,
            started_at: record.as_ref().map(|r| r.created_at),
            deadline: record.and_then(|r| r.deadline),
            disk: bundle
                .home_image()
                .exists()
                .then(|| volume::usage(&bundle.home()).ok())
                .flatten(),
            sandbox_id: state.id,
        }
    }

    /// Every live sandbox, reconciling the state directory with runc on the way: a bundle
    /// without a live container is removed, and so is a container without a bundle. A bundle
    /// younger than [`Self::leftover_grace`] is spared, since another process may be creating
    /// it right now.
    async fn survey(&self) -> Result<Vec<(Bundle, ContainerState)>, ProviderError> {
        let mut containers: HashMap<String, ContainerState> = self
            .runc
            .list()
            .await?
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
        let sandboxes_dir = self.config.sandboxes_dir();
        let entries = std::fs::read_dir(&sandboxes_dir).map_err(|e| {
            ProviderError::Internal(format!("cannot read {}: {e}", sandboxes_dir.display()))
        })?;
        let mut ids: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| validate_sandbox_id(name).is_ok())
            .collect();
        ids.sort();

        let mut live = Vec::new();
        for id in ids {
            let bundle = Bundle::new(&sandboxes_dir, &id);
            match containers.remove(&id) {
                Some(state) if state.status.is_alive() => live.push((bundle, state)),
                Some(_) => self.remove_leftover(&id, &bundle, true).await,
                None if bundle.age().unwrap_or_default() >= self.leftover_grace() => {
                    self.remove_leftover(&id, &bundle, false).await
                }
                None => {}
            }
        }
        // What is left has no bundle: nothing we could operate any more.
        for id in containers.into_keys() {
            if validate_sandbox_id(&id).is_ok() {
                let bundle = Bundle::new(&sandboxes_dir, &id);
                self.remove_leftover(&id, &bundle, true).await;
            }
        }
        // Pinned namespaces whose bundle vanished (removed behind our back, or a crash).
        if let Ok(pins) = std::fs::read_dir(self.config.state_dir.join(bundle::USERNS_DIR)) {
            for pin in pins.flatten() {
                let Some(id) = pin.file_name().into_string().ok() else {
                    continue;
                };
                // A create makes the bundle before the pin and a removal takes the pin first,
                // so a pin without a bundle is never one in use.
                if !Bundle::new(&sandboxes_dir, &id).exists() {
                    if let Err(e) = idmap::remove_user_namespace_pin(&pin.path()) {
                        tracing::warn!(sandbox_id = id, error = %e, "cannot remove a namespace pin");
                    }
                }
            }
        }
        // Ranges whose sandbox is gone: a crash between allocating and writing the bundle, or
        // between removing it and releasing. Only those older than any create can take.
        for (range, owner) in self.id_ranges.stale(self.leftover_grace()) {
            if let Err(e) = self.id_ranges.release(range, &owner) {
                tracing::warn!(error = %e, "cannot release a leftover id range");
            }
        }
        Ok(live)
    }

    /// How old a bundle without a container must be before it counts as a leftover: longer
    /// than any create can take.
    fn leftover_grace(&self) -> Duration {
        self.config.call_timeout * 2
    }

    /// Remove a dead sandbox's container and bundle, unless this process is busy with it.
    /// Failures are logged: the next sweep tries again.
    async fn remove_leftover(&self, id: &str, bundle: &Bundle, has_container: bool) {
        let slot = self.slot(id);
        let Ok(_busy) = slot.lifecycle.try_lock() else {
            return;
        };
        tracing::info!(
            sandbox_id = id,
            has_container,
            "removing a leftover sandbox"
        );
        if has_container {
            if let Err(e) = self.destroy_container(id).await {
                tracing::warn!(sandbox_id = id, error = %e, "cannot delete leftover container");
                return;
            }
        }
        self.detach_network(id, bundle).await;
        let ids = bundle.read_record().map(|r| r.ids).ok();
        let bundle = bundle.clone();
        match tokio::task::spawn_blocking(move || bundle.remove()).await {
            Ok(Ok(())) => {
                self.release_ids(id, ids);
                self.slots.lock().expect("poisoned").remove(id);
            }
            Ok(Err(e)) => {
                tracing::warn!(sandbox_id = id, error = %e, "cannot remove leftover bundle")
            }
            Err(e) => tracing::warn!(sandbox_id = id, error = %e, "bundle removal panicked"),
        }
    }

    /// Kill every process of a container and delete it; a container that is not there is fine.
    ///
    /// `runc delete --force` alone would do, but after killing the init it polls every 100 ms
    /// until the init's pid stops answering signals, i.e. until it is reaped. We kill the init
    /// ourselves and wait only until it is dead (reaped by us, or a zombie; see `process`),
    /// which in a pid namespace means every process in it is dead; runc then deletes a stopped
    /// container at once.
    async fn destroy_container(&self, id: &str) -> Result<(), ProviderError> {
        let Some(state) = self.runc.state(id).await? else {
            return Ok(());
        };
        if state.status.is_alive() && state.pid > 0 {
            // Frozen processes do not die until thawed (cgroup v1 freezer).
            if state.status == ContainerStatus::Paused {
                if let Err(e) = self.runc.resume(id).await {
                    tracing::warn!(sandbox_id = id, error = %e, "cannot thaw before the kill");
                }
            }
            let pid = state.pid;
            let waited = tokio::task::spawn_blocking(move || {
                process::kill_and_wait(pid, Duration::from_secs(5))
            })
            .await;
            if !matches!(waited, Ok(true)) {
                tracing::warn!(
                    sandbox_id = id,
                    pid,
                    "container init still alive after SIGKILL"
                );
            }
        } else if state.pid > 0 {
            // Died on its own: collect it if it is ours.
            let pid = state.pid;
            let _ = tokio::task::spawn_blocking(move || process::reap(pid, Duration::ZERO)).await;
        }
        match self.runc.delete_force(id).await {
            Ok(()) => Ok(()),
            Err(e) => match self.runc.state(id).await? {
                None => Ok(()),
                Some(_) => Err(e.into()),
            },
        }
    }

    /// Run a file operation on a blocking thread against the sandbox's confined filesystem.
    async fn with_files<T, F>(&self, id: &str, op: F) -> Result<T, ProviderError>
    where
        T: Send + 'static,
        F: FnOnce(&SandboxFs) -> Result<T, ProviderError> + Send + 'static,
    {
        let bundle = self.existing_bundle(id)?;
        let slot = self.slot(id);
        let cgroup = self.container_cgroup(id, &slot).await?;
        let fs = SandboxFs::new(
            bundle.home(),
            cgroup.map(|c| c.tmp_dir()),
            self.config.file_cap,
        )
        .with_ids(sandbox_ids(&bundle));
        let ids = sandbox_ids(&bundle);
        let result = tokio::task::spawn_blocking(move || {
            let _as_sandbox_user = idmap::FsIdsAs::sandbox_user(ids);
            op(&fs)
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("file operation panicked: {e}")))?;
        // Killed meanwhile: whatever the operation saw is gone with it.
        if !bundle.exists() {
            return Err(gone(id));
        }
        result
    }

    /// Whether the sandbox's tasks are at (or within a few of) its pid limit now.
    async fn at_pid_limit(&self, id: &str) -> bool {
        if self.is_rootless() {
            return false;
        }
        let slot = self.slot(id);
        let Ok(Some(cgroup)) = self.container_cgroup(id, &slot).await else {
            return false;
        };
        let limit = self.config.limits.pids as usize;
        tokio::task::spawn_blocking(move || cgroup.tasks())
            .await
            .ok()
            .and_then(Result::ok)
            .is_some_and(|tasks| tasks + 4 >= limit)
    }

    /// The container's processes as the host sees them, and its pid namespace, for looking at
    /// and signalling background processes from the host (see `process_records`). `None` where
    /// the container's cgroup cannot be found: then the port's scripts do it in the sandbox.
    async fn container_procs(
        &self,
        id: &str,
    ) -> Result<Option<(ContainerProcs, String)>, ProviderError> {
        self.existing_bundle(id)?;
        let slot = self.slot(id);
        let Some(cgroup) = self.container_cgroup(id, &slot).await? else {
            return Ok(None);
        };
        let found = tokio::task::spawn_blocking(move || {
            let Some(namespace) = process_records::namespace_of(cgroup.init_pid) else {
                return Ok(None);
            };
            ContainerProcs::of(&cgroup, &namespace).map(|procs| Some((procs, namespace)))
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("listing processes panicked: {e}")))??;
        match found {
            Some(found) => Ok(Some(found)),
            // Its init died under us: the sandbox is gone, or going.
            None => Err(self.live_state(id).await.err().unwrap_or_else(|| gone(id))),
        }
    }

    /// A command in a sandbox, its output kept in the result or sent to `output` as it comes.
    #[tracing::instrument(skip(self, request, output))]
    async fn run_command(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
        output: Option<OutputSink>,
    ) -> Result<ExecResult, ProviderError> {
        let mut request = request;
        exec::validate(&request)?;
        let bundle = self.existing_bundle(sandbox_id)?;
        // A sandbox networked after it was made has the trust store but not the variables that
        // point tools at it; each command gets them, so both kinds behave the same.
        if network::Networks::saved(bundle.dir()).is_some() {
            self.networks.add_trust_env(&mut request.env);
        }
        let slot = self.slot(sandbox_id);
        let _hold = {
            let _lifecycle = slot.lifecycle.lock().await;
            // A frozen cgroup makes runc refuse a command in a paused sandbox; rootless there
            // is none, and the command would run, so it is refused here (pause takes the same
            // lock, so this cannot race it).
            if self.runc.marked_paused(sandbox_id) {
                return Err(ProviderError::Conflict(format!(
                    "sandbox {sandbox_id} is paused; connect resumes it"
                )));
            }
            ExecHold::admit(slot.clone(), self.commands.clone(), &self.config)?
        };
        let cgroup = self.container_cgroup(sandbox_id, &slot).await?;
        let cwd = request.cwd.clone();
        let target = ExecTarget {
            runc: &self.runc,
            id: sandbox_id,
            run_dir: bundle.run_dir(),
            cgroup,
            ids: sandbox_ids(&bundle),
            pids_limit: (!self.is_rootless()).then_some(self.config.limits.pids),
        };
        match exec::run(target, request, output).await {
            Ok(_) if !bundle.exists() => Err(gone(sandbox_id)),
            Ok(result) => {
                tracing::debug!(
                    sandbox_id,
                    exit_code = ?result.exit_code,
                    duration_ms = result.duration_ms,
                    timed_out = result.timed_out,
                    "command finished"
                );
                Ok(result)
            }
            Err(ExecError::Provider(e)) => Err(e),
            Err(ExecError::NotStarted(message)) => match self.runc.state(sandbox_id).await? {
                Some(state) if state.status == ContainerStatus::Paused => {
                    Err(ProviderError::Conflict(format!(
                        "sandbox {sandbox_id} is paused; connect resumes it"
                    )))
                }
                Some(state) if state.status.is_alive() => {
                    if message.contains("chdir to cwd") {
                        Err(ProviderError::InvalidRequest(format!(
                            "working directory {} does not exist in the sandbox",
                            cwd.as_deref().unwrap_or(bundle::HOME)
                        )))
                    } else if is_fork_failure(&message) || self.at_pid_limit(sandbox_id).await {
                        // The sandbox's pid limit: runc could not start even the command (its
                        // init could not fork into the container; runc then says only that
                        // its pipe was reset).
                        Err(process_limit_reached(Some(self.config.limits.pids)))
                    } else {
                        Err(ProviderError::Internal(format!(
                            "runc exec failed: {message}"
                        )))
                    }
                }
                _ => Err(gone(sandbox_id)),
            },
        }
    }
}

#[async_trait]
impl SandboxProvider for RuncProvider {
    fn name(&self) -> &str {
        "runc"
    }

    #[tracing::instrument(skip_all, fields(thread_id = %request.owner.thread_id, generation = request.owner.generation))]
    async fn create(&self, request: CreateSandbox) -> Result<CreatedSandbox, ProviderError> {
        if request.network.is_networked() {
            self.networks
                .check_host(self.is_rootless(), self.config.user_namespaces)?;
        }
        exec::validate_env(&request.env)?;
        let id = new_sandbox_id();
        let bundle = Bundle::new(&self.config.sandboxes_dir(), &id);
        let slot = self.slot(&id);
        let _lifecycle = slot.lifecycle.lock().await;
        // Held until the bundle directory exists, which is what the count sees.
        let admitting = self.admitting_sandbox.lock().await;
        let alive = self.count_bundles()?;
        if alive >= self.config.max_sandboxes {
            return Err(limit(
                Limit::Sandboxes,
                format!(
                    "this host already keeps {alive} sandboxes, its limit (paused ones count: \
                     they keep their memory); the janitor frees them as threads go idle"
                ),
                Duration::from_secs(60),
            ));
        }

        let ids = if let Some(ids) = self.rootless_ids {
            ids
        } else if self.config.user_namespaces {
            self.id_ranges.allocate(&self.owner(&id)).map_err(|e| {
                ProviderError::Unavailable(format!("cannot allocate host ids for a sandbox: {e}"))
            })?
        } else {
            IdRange::IDENTITY
        };
        let now = self.clock.now();
        let record = SandboxRecord {
            created_at: now,
            deadline: Some(now.plus(request.timeout)),
            ids,
        };
        let hostname = hostname_for(request.owner.thread_id.as_str());
        let annotations = request.owner.to_metadata();
        let mut env = request.env.clone();
        if request.network.is_networked() {
            self.networks.add_trust_env(&mut env);
        }
        let (env, limits, host, swap_limit, volumes) = (
            env,
            self.config.limits.clone(),
            self.host.clone(),
            self.swap_limit,
            self.volumes.clone(),
        );
        let layout = bundle.clone();
        let written = tokio::task::spawn_blocking(move || {
            let spec = BundleSpec {
                hostname,
                annotations,
                env: &env,
                limits: &limits,
                swap_limit,
                host: &host,
                ids,
                home_volume: volumes.as_ref(),
            };
            write_bundle(&layout, &spec, &record)
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("bundle writer panicked: {e}")))
        .and_then(|r| {
            r.map_err(|e| ProviderError::Internal(format!("cannot write the bundle: {e}")))
        });
        drop(admitting);
        let networked = match (&request.network, written) {
            (NetworkProfile::Networked { allow }, Ok(())) => {
                network::Link::of_slot(ids.slot().unwrap_or(u32::MAX)).and_then(|link| {
                    let saved = network::Saved {
                        link,
                        allow: allow.clone(),
                    };
                    self.networks
                        .prepare_bundle(bundle.dir(), &saved)
                        .map(|()| Some(saved))
                        .map_err(|e| {
                            ProviderError::Internal(format!("cannot write the network: {e}"))
                        })
                })
            }
            (_, written) => written.map(|()| None),
        };
        let started = match networked {
            Ok(saved) => match self
                .runc
                .run_detached(&id, bundle.dir(), &bundle.init_pid_file())
                .await
            {
                Ok(()) => match saved {
                    Some(saved) => self.attach_network(&id, &saved).await,
                    None => Ok(()),
                },
                Err(e) => Err(e.into()),
            },
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            // Leave nothing behind: a half-made container and its bundle.
            let _ = self.runc.delete_force(&id).await;
            self.detach_network(&id, &bundle).await;
            if bundle.remove().is_ok() {
                self.release_ids(&id, Some(ids));
            }
            tracing::warn!(sandbox_id = %id, error = %e, "sandbox creation failed");
            return Err(e);
        }
        if let Some(refill) = &self.refill_volumes {
            // Full means a refill is already due, which will see this take too.
            let _ = refill.try_send(());
        }
        self.remember_cgroup(&id, &bundle);
        tracing::info!(sandbox_id = %id, "sandbox created");
        Ok(CreatedSandbox {
            sandbox_id: id,
            provider_session_id: None,
        })
    }

    #[tracing::instrument(skip(self))]
    async fn connect(&self, sandbox_id: &str) -> Result<Connected, ProviderError> {
        self.existing_bundle(sandbox_id)?;
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        let state = self.live_state(sandbox_id).await?;
        let resumed = state.status == ContainerStatus::Paused;
        if resumed {
            if let Err(e) = self.runc.resume(sandbox_id).await {
                return Err(self.classify(sandbox_id, e).await);
            }
            tracing::info!(sandbox_id, "sandbox resumed");
        }
        Ok(Connected {
            resumed,
            provider_session_id: None,
        })
    }

    #[tracing::instrument(skip(self))]
    async fn pause(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        self.existing_bundle(sandbox_id)?;
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        if slot.execs.load(Ordering::SeqCst) > 0 {
            return Err(ProviderError::Conflict("a command is running".into()));
        }
        match self.runc.pause(sandbox_id).await {
            Ok(()) => {
                tracing::info!(sandbox_id, "sandbox paused");
                Ok(())
            }
            // runc refuses to pause a paused container; for us that is success.
            Err(e) => match self.runc.state(sandbox_id).await? {
                Some(state) if state.status == ContainerStatus::Paused => Ok(()),
                Some(state) if state.status.is_alive() => Err(e.into()),
                _ => Err(gone(sandbox_id)),
            },
        }
    }

    #[tracing::instrument(skip(self))]
    async fn kill(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        validate_sandbox_id(sandbox_id)?;
        let bundle = Bundle::new(&self.config.sandboxes_dir(), sandbox_id);
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        // Container first, bundle second: a crash in between leaves a bundle without a
        // container, which the next sweep removes.
        self.destroy_container(sandbox_id).await?;
        self.detach_network(sandbox_id, &bundle).await;
        let existed = bundle.exists();
        let ids = bundle.read_record().map(|r| r.ids).ok();
        let removing = bundle.clone();
        tokio::task::spawn_blocking(move || removing.remove())
            .await
            .map_err(|e| ProviderError::Internal(format!("bundle removal panicked: {e}")))?
            .map_err(|e| {
                ProviderError::Internal(format!("cannot remove {}: {e}", bundle.dir().display()))
            })?;
        self.release_ids(sandbox_id, ids);
        self.slots.lock().expect("poisoned").remove(sandbox_id);
        if existed {
            tracing::info!(sandbox_id, "sandbox killed");
        }
        Ok(())
    }

    async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), ProviderError> {
        let bundle = self.existing_bundle(sandbox_id)?;
        self.live_state(sandbox_id).await?;
        let now = self.clock.now();
        tokio::task::spawn_blocking(move || {
            // A record we cannot read has lost the sandbox's range too: say so rather than
            // write one that claims the host's ids.
            let mut record = bundle.read_record()?;
            record.deadline = Some(now.plus(timeout));
            bundle.write_record(&record)
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("record writer panicked: {e}")))?
        .map_err(|e| ProviderError::Internal(format!("cannot record the deadline: {e}")))
    }

    /// Counted for networked sandboxes only: the proxy and resolver in the process serving the
    /// sandbox, the packet filter in the sandbox's own table (see `refusals`). A restricted
    /// sandbox has nothing to count with (its connections fail inside it): `None`.
    async fn network_refusals(
        &self,
        sandbox_id: &str,
    ) -> Result<Option<NetworkRefusals>, ProviderError> {
        let bundle = self.existing_bundle(sandbox_id)?;
        if network::Networks::saved(bundle.dir()).is_none() {
            return Ok(None);
        }
        let state = self.live_state(sandbox_id).await?;
        Ok(Some(self.networks.refusals(sandbox_id, state.pid).await))
    }

    async fn info(&self, sandbox_id: &str) -> Result<SandboxInfo, ProviderError> {
        let bundle = self.existing_bundle(sandbox_id)?;
        let state = self.live_state(sandbox_id).await?;
        Ok(self.info_from(&bundle, state))
    }

    async fn list(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxInfo>, ProviderError> {
        Ok(self
            .survey()
            .await?
            .into_iter()
            .filter(|(_, state)| {
                metadata
                    .iter()
                    .all(|(k, v)| state.annotations.get(k) == Some(v))
            })
            .map(|(bundle, state)| self.info_from(&bundle, state))
            .collect())
    }

    async fn exec(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
    ) -> Result<ExecResult, ProviderError> {
        self.run_command(sandbox_id, request, None).await
    }

    /// The output is read from the command's pipes as it comes and sent on at once.
    async fn exec_streaming(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
        output: OutputSink,
    ) -> Result<ExecResult, ProviderError> {
        self.run_command(sandbox_id, request, Some(output)).await
    }

    /// In place, keeping every file and process: the sandbox's network namespace lives as long
    /// as it does, so a networked profile (re)connects it (a fresh link with the new allowlist,
    /// rules and proxy) and restricted disconnects it (the link is deleted, leaving loopback).
    /// Running or paused alike: nothing here needs the sandbox's processes to run.
    async fn set_network(
        &self,
        sandbox_id: &str,
        profile: &NetworkProfile,
    ) -> Result<(), ProviderError> {
        if profile.is_networked() {
            self.networks
                .check_host(self.is_rootless(), self.config.user_namespaces)?;
        }
        let bundle = self.existing_bundle(sandbox_id)?;
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        let state = self.live_state(sandbox_id).await?;
        match profile {
            NetworkProfile::Restricted => {
                self.detach_network(sandbox_id, &bundle).await;
                network::Networks::restrict_bundle(bundle.dir()).map_err(|e| {
                    ProviderError::Internal(format!("cannot write the network: {e}"))
                })?;
            }
            NetworkProfile::Networked { allow } => {
                let link = match network::Networks::saved(bundle.dir()) {
                    Some(saved) => saved.link,
                    None => {
                        network::Link::of_slot(sandbox_ids(&bundle).slot().unwrap_or(u32::MAX))?
                    }
                };
                let saved = network::Saved {
                    link,
                    allow: allow.clone(),
                };
                self.networks
                    .prepare_bundle(bundle.dir(), &saved)
                    .map_err(|e| {
                        ProviderError::Internal(format!("cannot write the network: {e}"))
                    })?;
                self.networks
                    .attach(sandbox_id, state.pid, &saved, thread_of(&state))
                    .await?;
            }
        }
        tracing::info!(sandbox_id, network = %profile.describe(), "sandbox network changed");
        Ok(())
    }

    async fn read_file(&self, sandbox_id: &str, path: &str) -> Result<Vec<u8>, ProviderError> {
        let path = path.to_owned();
        self.with_files(sandbox_id, move |fs| fs.read(&path)).await
    }

    /// Streamed from the file itself: opened as the sandbox user, then read in chunks by
    /// tokio, so memory stays bounded and no cap applies. Only the size seen at open is read: a
    /// sandbox that keeps appending to the file must not make the answer endless.
    async fn open_file(&self, sandbox_id: &str, path: &str) -> Result<OpenFile, ProviderError> {
        use tokio::io::AsyncReadExt;
        let path = path.to_owned();
        let (file, size) = self
            .with_files(sandbox_id, move |fs| fs.open(&path))
            .await?;
        Ok(OpenFile {
            size,
            reader: Box::pin(tokio::fs::File::from_std(file).take(size)),
        })
    }

    /// Uploads stream to disk, so they may be as large as any file a process in the sandbox
    /// may write (`SandboxLimits::file_size_bytes`); the disk quota bounds them too.
    fn upload_limit(&self) -> u64 {
        self.config.limits.file_size_bytes
    }

    /// Written as the chunks come, into a new file beside `path` that replaces it only when
    /// complete (see `files::Upload`): memory stays bounded whatever the size.
    async fn write_file_from(
        &self,
        sandbox_id: &str,
        path: &str,
        mut chunks: FileChunks,
        limit: u64,
    ) -> Result<u64, ProviderError> {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let owned = path.to_owned();
        let (file, upload) = self
            .with_files(sandbox_id, move |fs| fs.begin_upload(&owned))
            .await?;
        let mut file = tokio::fs::File::from_std(file);
        let mut written = 0u64;
        let outcome: Result<u64, ProviderError> = async {
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk?;
                written += chunk.len() as u64;
                if written > limit {
                    return Err(too_large_upload(path, limit));
                }
                file.write_all(&chunk)
                    .await
                    .map_err(|e| files::io_error(path, e))?;
            }
            file.flush().await.map_err(|e| files::io_error(path, e))?;
            Ok(written)
        }
        .await;
        drop(file);
        let complete = outcome.is_ok();
        let finished = tokio::task::spawn_blocking(move || upload.finish(complete))
            .await
            .map_err(|e| ProviderError::Internal(format!("finishing an upload panicked: {e}")))?;
        let result = outcome.and_then(|written| finished.map(|()| written));
        // Killed meanwhile: whatever the upload met (a directory gone from under it) is that.
        if result.is_err() {
            self.existing_bundle(sandbox_id)?;
        }
        result
    }

    async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        contents: &[u8],
    ) -> Result<(), ProviderError> {
        if contents.len() as u64 > self.config.file_cap {
            return Err(ProviderError::InvalidRequest(format!(
                "{path}: {} bytes is over the file API's limit of {} bytes",
                contents.len(),
                self.config.file_cap
            )));
        }
        let (path, contents) = (path.to_owned(), contents.to_vec());
        self.with_files(sandbox_id, move |fs| fs.write(&path, &contents))
            .await
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: &str,
    ) -> Result<Vec<FileEntry>, ProviderError> {
        let path = path.to_owned();
        self.with_files(sandbox_id, move |fs| fs.list(&path)).await
    }

    async fn stat(&self, sandbox_id: &str, path: &str) -> Result<FileEntry, ProviderError> {
        let path = path.to_owned();
        self.with_files(sandbox_id, move |fs| fs.stat(&path)).await
    }

    async fn make_dir(&self, sandbox_id: &str, path: &str) -> Result<(), ProviderError> {
        let path = path.to_owned();
        self.with_files(sandbox_id, move |fs| fs.make_dir(&path))
            .await
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        let path = path.to_owned();
        self.with_files(sandbox_id, move |fs| fs.remove(&path, recursive))
            .await
    }

    async fn glob(&self, sandbox_id: &str, pattern: &str) -> Result<Vec<String>, ProviderError> {
        let pattern = pattern.to_owned();
        self.with_files(sandbox_id, move |fs| fs.glob(&pattern))
            .await
    }

    async fn grep(
        &self,
        sandbox_id: &str,
        pattern: &str,
        path: &str,
    ) -> Result<Vec<GrepMatch>, ProviderError> {
        let (pattern, path) = (pattern.to_owned(), path.to_owned());
        self.with_files(sandbox_id, move |fs| fs.grep(&pattern, &path))
            .await
    }

    // Background processes are looked at and signalled from the host (`process_records`):
    // nothing is started in the sandbox, so they work at its pid limit, and what the sandbox
    // wrote into their records is read with bounded, non-blocking opens.

    async fn list_processes(&self, sandbox_id: &str) -> Result<Vec<ProcessInfo>, ProviderError> {
        let Some((procs, _)) = self.container_procs(sandbox_id).await? else {
            return processes::list(self, sandbox_id).await;
        };
        let records = self
            .with_files(sandbox_id, move |fs| process_records::list(fs, &procs))
            .await?;
        Ok(processes::well_formed(sandbox_id, records))
    }

    async fn read_process_output(
        &self,
        sandbox_id: &str,
        process_id: &str,
        after: u64,
        max: u64,
    ) -> Result<ProcessOutput, ProviderError> {
        let Some((procs, _)) = self.container_procs(sandbox_id).await? else {
            return processes::read_output(self, sandbox_id, process_id, after, max).await;
        };
        let id = process_id.to_owned();
        self.with_files(sandbox_id, move |fs| {
            process_records::read_output(fs, &procs, &id, after, max)
        })
        .await
    }

    async fn signal_process(
        &self,
        sandbox_id: &str,
        process_id: &str,
        signal: ProcessSignal,
    ) -> Result<(), ProviderError> {
        let Some((procs, namespace)) = self.container_procs(sandbox_id).await? else {
            return processes::signal(self, sandbox_id, process_id, signal).await;
        };
        let id = process_id.to_owned();
        let target = self
            .with_files(sandbox_id, move |fs| {
                process_records::signal_target(fs, &id)
            })
            .await?;
        if let Some(pgid) = target {
            // As ourselves, not as the sandbox user the file reads take on.
            tokio::task::spawn_blocking(move || procs.signal_group(pgid, signal, &namespace))
                .await
                .map_err(|e| ProviderError::Internal(format!("signalling panicked: {e}")))?;
        }
        Ok(())
    }
}

/// The host ids of a sandbox, from its record. A bundle without a readable record is one being
/// made or removed; its files are the host's (no chown can then give them to another sandbox).
fn sandbox_ids(bundle: &Bundle) -> IdRange {
    bundle
        .read_record()
        .map(|r| r.ids)
        .unwrap_or(IdRange::IDENTITY)
}

impl RuncProvider {
    /// Connect a just-started networked sandbox to the host.
    async fn attach_network(&self, id: &str, saved: &network::Saved) -> Result<(), ProviderError> {
        let state = self.live_state(id).await?;
        let thread_id = thread_of(&state);
        self.networks.attach(id, state.pid, saved, thread_id).await
    }

    /// Stop serving a sandbox's network and delete its host end, if it has one.
    async fn detach_network(&self, id: &str, bundle: &Bundle) {
        let link = network::Networks::saved(bundle.dir()).map(|saved| saved.link);
        self.networks.detach(id, link).await;
    }

    /// At open: serve the live networked sandboxes another process made (their links are made
    /// anew), and delete host ends no sandbox on the host holds any more.
    async fn adopt_networks(&self, live: &[(Bundle, ContainerState)]) {
        if self.is_rootless() {
            return;
        }
        for (bundle, state) in live {
            if let Some(saved) = network::Networks::saved(bundle.dir()) {
                let thread_id = thread_of(state);
                if let Err(e) = self
                    .networks
                    .adopt(&state.id, state.pid, &saved, thread_id)
                    .await
                {
                    tracing::warn!(sandbox_id = %state.id, error = %e, "cannot reattach a sandbox's network");
                }
            }
        }
        let table = self.config.id_ranges_dir.clone();
        self.networks
            .sweep_links(|slot| table.join(slot.to_string()).exists())
            .await;
    }

    /// How the host's id table names a sandbox of ours: its bundle's absolute path.
    fn owner(&self, sandbox_id: &str) -> std::path::PathBuf {
        self.sandboxes_root.join(sandbox_id)
    }

    /// Free a removed sandbox's id range; a failure only delays reuse until the next sweep.
    fn release_ids(&self, sandbox_id: &str, ids: Option<IdRange>) {
        if let Some(ids) = ids {
            if let Err(e) = self.id_ranges.release(ids, &self.owner(sandbox_id)) {
                tracing::warn!(sandbox_id, error = %e, "cannot release the id range");
            }
        }
    }
}

/// The thread a container was made for, from its annotations (for log lines).
fn thread_of(state: &ContainerState) -> Option<String> {
    SandboxOwner::from_metadata(&state.annotations).map(|owner| owner.thread_id.to_string())
}

fn gone(id: &str) -> ProviderError {
    ProviderError::Gone(id.to_owned())
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
