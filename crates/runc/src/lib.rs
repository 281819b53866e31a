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
//! The pieces: `open` opens a provider over its state directory, `create` makes a sandbox,
//! `command` and `exec` run commands in one, `admission` holds the caps, `sweep` removes what
//! earlier runs left, `bundle` lays out the OCI bundle, `runtime` drives the runc CLI,
//! `files` and `search` are the confined file API, `process_records` its background
//! processes, `cgroup` finds a container on the host, `ids` makes and checks sandbox ids,
//! `idmap` gives each sandbox its host ids, `volume` its home's filesystem, `rootless` what
//! stands in for root when there is none, `placement` where the state lives so that each
//! sandbox's root can reach its bundle, and `network` (with `sandbox_network`, the
//! provider's side of it) the networked profile.
//!
//! # Root and rootless
//!
//! As root the provider has everything above. Run by an ordinary user it runs rootless (see
//! `rootless`): runc makes each sandbox's user namespace, mapping the sandbox's user 1000 to
//! the caller, and there are no cgroups (no limits; pause by `SIGSTOP`), no mounts on the host
//! (no disk quota) and no per-sandbox host ids. [`RuncProvider::open`] refuses, in one line
//! naming the setting, where the kernel forbids unprivileged user namespaces.

mod admission;
mod bundle;
mod cgroup;
mod checkpoint;
mod command;
mod config;
mod create;
mod exec;
mod files;
mod home_copy;
mod idmap;
mod ids;
pub mod image;
mod image_root;
mod images;
mod network;
mod open;
mod placement;
mod process;
mod process_records;
mod programs;
mod remove;
mod rootless;
mod runner;
mod runtime;
mod sandbox_network;
mod search;
mod sweep;
mod version;
mod volume;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use self::bundle::{Bundle, HostLayout};
use self::cgroup::ContainerCgroup;
use self::files::SandboxFs;
use self::idmap::{IdRange, IdRanges};
use self::ids::validate_sandbox_id;
use self::process_records::ContainerProcs;
use self::runtime::{ContainerState, ContainerStatus, Runc, RuncError};
use self::volume::VolumePool;
use threadbox_core::domain::{CheckpointId, ImageInfo, ThreadId};
use threadbox_core::ports::{
    processes, too_large_upload, CheckpointTaken, Clock, Connected, CreateSandbox, CreatedSandbox,
    ExecRequest, ExecResult, FileChunks, FileEntry, ForkSandbox, GrepMatch, NetworkProfile,
    NetworkRefusals, OpenFile, OutputSink, ProcessInfo, ProcessOutput, ProcessSignal,
    ProviderError, Restored, SandboxInfo, SandboxProvider, SandboxState,
};

pub use self::config::{
    find_runc, host_can_run_sandboxes, DiskQuota, ImageRegistration, RuncConfig, SandboxLimits,
    DEFAULT_WARM_POOL,
};
pub use self::network::NetworkConfig;
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
    /// What sandboxes start from: the host image and the registered ones (see `images`).
    images: images::RegisteredImages,
    /// Every new container's init, which starts the sandbox user's commands (see `runner`);
    /// `None` where this build has none, and commands start through `runc exec`.
    runner: Option<runner::RunnerImage>,
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

impl RuncProvider {
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

    /// Pause or resume through the container's freezer itself, as root, when this process
    /// knows the container's cgroup already (it made the container, or ran a command in it):
    /// one write where `runc pause` and `runc resume` start a runc process to make it, and
    /// `runc state` reads the same freezer back. Whether it was done; when not (rootless, no
    /// cgroup known, no freezer, or the write failed), `None`, and the caller asks runc; when
    /// done, whether the container was frozen before.
    async fn set_frozen_directly(
        &self,
        sandbox_id: &str,
        slot: &Slot,
        frozen: bool,
    ) -> Option<bool> {
        if self.is_rootless() {
            return None;
        }
        let cgroup = slot
            .cgroup
            .lock()
            .expect("poisoned")
            .clone()
            .filter(|c| c.is_current())?;
        let was_frozen = cgroup.is_frozen()?;
        if was_frozen == frozen {
            return Some(was_frozen);
        }
        let within = self.runc.call_timeout();
        let set = tokio::task::spawn_blocking(move || cgroup.set_frozen(frozen, within)).await;
        match set {
            Ok(Ok(())) => Some(was_frozen),
            Ok(Err(e)) => {
                tracing::debug!(sandbox_id, error = %e, "the freezer refused; asking runc");
                None
            }
            Err(_) => None,
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
}

#[async_trait]
impl SandboxProvider for RuncProvider {
    fn name(&self) -> &str {
        "runc"
    }

    fn images(&self) -> Vec<ImageInfo> {
        self.images.list()
    }

    #[tracing::instrument(skip_all, fields(thread_id = %request.owner.thread_id, generation = request.owner.generation))]
    async fn create(&self, request: CreateSandbox) -> Result<CreatedSandbox, ProviderError> {
        self.create_sandbox(request).await
    }

    #[tracing::instrument(skip(self))]
    async fn connect(&self, sandbox_id: &str) -> Result<Connected, ProviderError> {
        self.existing_bundle(sandbox_id)?;
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        // Resumed straight away: a connect is nearly always for a sandbox its record says is
        // paused, and asking `runc state` first cost a second runc process, as long as the
        // resume itself. Only a refused resume asks, to tell a running sandbox (nothing to
        // resume) from a gone one.
        if let Some(was_frozen) = self.set_frozen_directly(sandbox_id, &slot, false).await {
            if was_frozen {
                tracing::info!(sandbox_id, "sandbox resumed");
            }
            return Ok(Connected {
                resumed: was_frozen,
                provider_session_id: None,
            });
        }
        match self.runc.resume(sandbox_id).await {
            Ok(()) => {
                tracing::info!(sandbox_id, "sandbox resumed");
                Ok(Connected {
                    resumed: true,
                    provider_session_id: None,
                })
            }
            Err(e) => match self.runc.state(sandbox_id).await? {
                Some(state) if state.status == ContainerStatus::Paused => Err(e.into()),
                Some(state) if state.status.is_alive() => Ok(Connected {
                    resumed: false,
                    provider_session_id: None,
                }),
                _ => Err(gone(sandbox_id)),
            },
        }
    }

    #[tracing::instrument(skip(self))]
    async fn pause(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        self.existing_bundle(sandbox_id)?;
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        if slot.execs.load(Ordering::SeqCst) > 0 {
            return Err(ProviderError::Conflict("a command is running".into()));
        }
        if let Some(was_frozen) = self.set_frozen_directly(sandbox_id, &slot, true).await {
            if !was_frozen {
                tracing::info!(sandbox_id, "sandbox paused");
            }
            return Ok(());
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

    async fn checkpoint(
        &self,
        sandbox_id: &str,
        id: &CheckpointId,
        max_bytes: u64,
    ) -> Result<CheckpointTaken, ProviderError> {
        self.take_checkpoint(sandbox_id, id, max_bytes).await
    }

    async fn restore(
        &self,
        sandbox_id: &str,
        id: &CheckpointId,
    ) -> Result<Restored, ProviderError> {
        self.restore_checkpoint(sandbox_id, id).await
    }

    async fn fork(&self, request: ForkSandbox) -> Result<CreatedSandbox, ProviderError> {
        self.fork_sandbox(request).await
    }

    async fn delete_checkpoint(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<(), ProviderError> {
        self.remove_checkpoints(thread_id, Some(id)).await
    }

    async fn delete_thread_checkpoints(&self, thread_id: &ThreadId) -> Result<(), ProviderError> {
        self.remove_checkpoints(thread_id, None).await
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
        self.change_network(sandbox_id, profile).await
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

fn gone(id: &str) -> ProviderError {
    ProviderError::Gone(id.to_owned())
}
