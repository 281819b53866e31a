//! `InMemoryProvider`: a sandbox provider that keeps sandboxes in a map, for use-case tests only.
//!
//! It runs no code: `exec` records the command and echoes it back. Everything else keeps the
//! provider contract (its conformance suite runs on it: lifecycle and files), so use-case tests
//! see what a real provider would do: a file tree with directories, deadlines on the wall
//! clock, `..` refused, globs and regular-expression search. What it adds are the failure
//! points real providers have and tests need to reach: a create that hangs after the sandbox
//! exists (the process died before writing the record), a sandbox that vanishes behind
//! threadbox's back, injected errors, and counters.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use threadbox_core::domain::{unknown_image, ImageInfo, ImageName, Millis};
use threadbox_core::ports::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Connect,
    Pause,
    Kill,
    Exec,
}

/// One entry of a sandbox's file tree, keyed by its absolute path.
#[derive(Clone, Debug)]
enum Node {
    Dir,
    File(Vec<u8>),
}

#[derive(Clone, Debug)]
struct MemSandbox {
    state: SandboxState,
    metadata: BTreeMap<String, String>,
    /// Every directory and file by absolute path; `/`, `/home/user` and `/tmp` always exist.
    files: BTreeMap<String, Node>,
    deadline: Option<Millis>,
    running_execs: u32,
    /// The network it was made with, or changed to by `set_network`.
    network: NetworkProfile,
    /// The image it was made from.
    image: ImageName,
    /// What its network refused, counted (as runc does) only when made networked.
    refusals: Option<NetworkRefusals>,
}

fn now() -> Millis {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Millis(since.as_millis() as i64)
}

fn deadline_after(timeout: Duration) -> Millis {
    Millis(now().0.saturating_add(timeout.as_millis() as i64))
}

fn no_such(path: &str) -> ProviderError {
    ProviderError::NotFound(format!("{path}: no such file or directory"))
}

/// `path` as the tree keys it: absolute, without `.`, empty components or a trailing slash.
/// `..` is refused (the contract: no path may climb), naming the path.
fn normalize(path: &str) -> Result<String, ProviderError> {
    if !path.starts_with('/') {
        return Err(ProviderError::InvalidRequest(format!(
            "{path}: paths are absolute"
        )));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(ProviderError::InvalidRequest(format!(
                    "{path}: `..` is not allowed"
                )))
            }
            other => parts.push(other),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

fn parent_of(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(at) => Some(&path[..at]),
    }
}

fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether `path` lies strictly inside `dir`.
fn is_inside(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path.len() > dir.len() + 1 && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// Shell glob matching on whole paths: `*` and `?` within one component, `**` across any
/// number of them (`**/` also matches none).
fn glob_matches(pattern: &[u8], path: &[u8]) -> bool {
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(b'*'), _) if pattern.get(1) == Some(&b'*') => {
            let rest = &pattern[2..];
            let rest_after_slash = rest.strip_prefix(b"/").unwrap_or(rest);
            (0..=path.len()).any(|i| {
                glob_matches(rest, &path[i..])
                    || (i == 0 || path[i - 1] == b'/') && glob_matches(rest_after_slash, &path[i..])
            })
        }
        (Some(b'*'), _) => (0..=path.len())
            .take_while(|&i| i == 0 || path[i - 1] != b'/')
            .any(|i| glob_matches(&pattern[1..], &path[i..])),
        (Some(b'?'), Some(c)) if *c != b'/' => glob_matches(&pattern[1..], &path[1..]),
        (Some(p), Some(c)) if p == c => glob_matches(&pattern[1..], &path[1..]),
        _ => false,
    }
}

impl MemSandbox {
    fn new(
        metadata: BTreeMap<String, String>,
        deadline: Millis,
        network: NetworkProfile,
        image: ImageName,
    ) -> Self {
        let files = ["/", "/home", "/home/user", "/tmp"]
            .into_iter()
            .map(|p| (p.to_owned(), Node::Dir))
            .collect();
        let refusals = network.is_networked().then(|| NetworkRefusals {
            lookups: Some(0),
            connections: Some(0),
            packets: Some(0),
            recent: Vec::new(),
        });
        Self {
            state: SandboxState::Running,
            metadata,
            files,
            deadline: Some(deadline),
            running_execs: 0,
            network,
            image,
            refusals,
        }
    }

    /// Make `dir` and its missing parents; a file in the way is an error.
    fn make_dirs(&mut self, dir: &str) -> Result<(), ProviderError> {
        if let Some(parent) = parent_of(dir) {
            self.make_dirs(parent)?;
        }
        match self.files.get(dir) {
            Some(Node::Dir) => Ok(()),
            Some(Node::File(_)) => Err(ProviderError::InvalidRequest(format!(
                "{dir}: not a directory"
            ))),
            None => {
                self.files.insert(dir.to_owned(), Node::Dir);
                Ok(())
            }
        }
    }

    fn entry(&self, path: &str) -> Result<FileEntry, ProviderError> {
        let node = self.files.get(path).ok_or_else(|| no_such(path))?;
        let (kind, size) = match node {
            Node::Dir => (FileKind::Dir, 0),
            Node::File(data) => (FileKind::File, data.len() as u64),
        };
        Ok(FileEntry {
            name: name_of(path).to_owned(),
            path: path.to_owned(),
            kind,
            size,
            modified: None,
            name_base64: None,
        })
    }
}

/// The sandbox's home, where checkpoints are of.
const HOME_DIR: &str = "/home/user";

/// The thread a sandbox belongs to (its owner metadata), as text.
fn thread_of(sandbox: &MemSandbox) -> String {
    threadbox_core::ports::SandboxOwner::from_metadata(&sandbox.metadata)
        .map(|o| o.thread_id.to_string())
        .unwrap_or_default()
}

/// The entries under the home (not the home itself).
fn home_of(files: &BTreeMap<String, Node>) -> BTreeMap<String, Node> {
    files
        .iter()
        .filter(|(p, _)| is_inside(p, HOME_DIR))
        .map(|(p, n)| (p.clone(), n.clone()))
        .collect()
}

#[derive(Default)]
pub struct InMemoryProvider {
    sandboxes: Mutex<HashMap<String, MemSandbox>>,
    next_id: AtomicU64,
    creates: AtomicU64,
    kills: AtomicU64,
    pauses: AtomicU64,
    connects: AtomicU64,
    /// Delay inside create, to widen race windows.
    create_delay: Mutex<Duration>,
    /// Delay inside exec, to keep a command running while a test pokes at the thread.
    exec_delay: Mutex<Duration>,
    hang_after_create: AtomicBool,
    /// Whether `set_network` changes a live sandbox (like E2B) or is unsupported (like runc).
    live_network: AtomicBool,
    /// Whether checkpoints are refused as `unsupported` (like E2B).
    no_checkpoints: AtomicBool,
    failures: Mutex<HashMap<Op, VecDeque<ProviderError>>>,
    commands: Mutex<Vec<String>>,
    /// The next exec's name lookup its network refuses, and the exit code it then fails with.
    refuse_next: Mutex<Option<(String, i32)>>,
    /// Checkpoints: the files under `/home/user` of a sandbox at the time, by thread and
    /// checkpoint id.
    checkpoints: Mutex<HashMap<(String, String), BTreeMap<String, Node>>>,
    /// Images registered besides `host` (`register_image`).
    images: Mutex<Vec<ImageInfo>>,
}

impl InMemoryProvider {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn creates(&self) -> u64 {
        self.creates.load(Ordering::SeqCst)
    }
    pub fn kills(&self) -> u64 {
        self.kills.load(Ordering::SeqCst)
    }
    pub fn pauses(&self) -> u64 {
        self.pauses.load(Ordering::SeqCst)
    }
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::SeqCst)
    }

    /// The checkpoint copies kept now (what a destroy or a drop must delete).
    pub fn checkpoint_copies(&self) -> usize {
        self.checkpoints.lock().unwrap().len()
    }

    /// Ids of the sandboxes that exist now.
    pub fn live_ids(&self) -> Vec<String> {
        let mut ids: Vec<_> = self.sandboxes.lock().unwrap().keys().cloned().collect();
        ids.sort();
        ids
    }

    pub fn state_of(&self, id: &str) -> Option<SandboxState> {
        self.sandboxes.lock().unwrap().get(id).map(|s| s.state)
    }

    /// The network profile a sandbox was created with (or changed to live).
    pub fn network_of(&self, id: &str) -> Option<NetworkProfile> {
        self.sandboxes
            .lock()
            .unwrap()
            .get(id)
            .map(|s| s.network.clone())
    }

    /// The image a sandbox was made from.
    pub fn image_of(&self, id: &str) -> Option<ImageName> {
        self.sandboxes
            .lock()
            .unwrap()
            .get(id)
            .map(|s| s.image.clone())
    }

    /// Register an image by name, listed after `host` (as an operator's `--image` does); a
    /// create naming one that is not registered is refused, as every real provider does.
    pub fn register_image(&self, name: &str) {
        let name = ImageName::parse(name).expect("a valid image name");
        self.images.lock().unwrap().push(ImageInfo {
            digest: Some(format!("memory:{name}")),
            size_bytes: Some(0),
            source: format!("memory image {name}"),
            setup: false,
            name,
        });
    }

    /// From now on, `set_network` changes a live sandbox (`true`) or answers `Unsupported`
    /// (`false`, the default, as runc does).
    pub fn support_live_network(&self, on: bool) {
        self.live_network.store(on, Ordering::SeqCst);
    }

    /// From now on, checkpoints, restores and forks are refused as `unsupported`, as E2B's are
    /// (`true`), or taken (`false`, the default).
    pub fn refuse_checkpoints(&self, on: bool) {
        self.no_checkpoints.store(on, Ordering::SeqCst);
    }

    fn checkpoints_on(&self) -> Result<(), ProviderError> {
        match self.no_checkpoints.load(Ordering::SeqCst) {
            true => Err(threadbox_core::ports::checkpoints_unsupported(self.name())),
            false => Ok(()),
        }
    }

    pub fn set_create_delay(&self, d: Duration) {
        *self.create_delay.lock().unwrap() = d;
    }
    pub fn set_exec_delay(&self, d: Duration) {
        *self.exec_delay.lock().unwrap() = d;
    }

    /// From now on, create makes the sandbox and then never returns: the caller "dies" there.
    pub fn hang_after_create(&self, on: bool) {
        self.hang_after_create.store(on, Ordering::SeqCst);
    }

    /// The next call of `op` fails with `err` (queued; one error per call).
    pub fn fail_next(&self, op: Op, err: ProviderError) {
        self.failures
            .lock()
            .unwrap()
            .entry(op)
            .or_default()
            .push_back(err);
    }

    /// The provider loses a sandbox without telling anyone (host reboot, provider-side cleanup).
    pub fn forget(&self, id: &str) {
        self.sandboxes.lock().unwrap().remove(id);
    }

    /// The provider pauses a sandbox on its own (E2B's autoPause at the deadline).
    pub fn auto_pause(&self, id: &str) {
        if let Some(s) = self.sandboxes.lock().unwrap().get_mut(id) {
            s.state = SandboxState::Paused;
        }
    }

    /// The next exec looks `name` up and fails with `exit_code` as `curl` would: a sandbox that
    /// counts refusals (a networked one) counts the lookup as refused by its DNS.
    pub fn refuse_in_next_exec(&self, name: &str, exit_code: i32) {
        *self.refuse_next.lock().unwrap() = Some((name.to_owned(), exit_code));
    }

    /// Commands `exec` has been asked to run, in order.
    pub fn commands(&self) -> Vec<String> {
        self.commands.lock().unwrap().clone()
    }

    fn injected(&self, op: Op) -> Result<(), ProviderError> {
        match self
            .failures
            .lock()
            .unwrap()
            .get_mut(&op)
            .and_then(VecDeque::pop_front)
        {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    fn with<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut MemSandbox) -> Result<T, ProviderError>,
    ) -> Result<T, ProviderError> {
        let mut map = self.sandboxes.lock().unwrap();
        let sandbox = map
            .get_mut(id)
            .ok_or_else(|| ProviderError::Gone(id.to_owned()))?;
        f(sandbox)
    }

    fn running(&self, id: &str) -> Result<(), ProviderError> {
        self.with(id, |s| match s.state {
            SandboxState::Running => Ok(()),
            SandboxState::Paused => Err(ProviderError::Conflict(format!("sandbox {id} is paused"))),
        })
    }

    fn info_of(id: &str, s: &MemSandbox) -> SandboxInfo {
        SandboxInfo {
            sandbox_id: id.to_owned(),
            state: s.state,
            metadata: s.metadata.clone(),
            started_at: None,
            deadline: s.deadline,
            disk: None,
        }
    }
}

#[async_trait]
impl SandboxProvider for InMemoryProvider {
    fn name(&self) -> &str {
        "memory"
    }

    fn checkpoint_support(&self) -> Result<(), ProviderError> {
        self.checkpoints_on()
    }

    fn images(&self) -> Vec<ImageInfo> {
        let mut images = vec![ImageInfo::host(self.name())];
        images.extend(self.images.lock().unwrap().iter().cloned());
        images
    }

    async fn create(&self, request: CreateSandbox) -> Result<CreatedSandbox, ProviderError> {
        let delay = *self.create_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.injected(Op::Create)?;
        let images = self.images();
        if !images.iter().any(|i| i.name == request.image) {
            return Err(ProviderError::InvalidRequest(unknown_image(
                request.image.as_str(),
                &images,
            )));
        }
        self.creates.fetch_add(1, Ordering::SeqCst);
        let id = format!("mem-{}", self.next_id.fetch_add(1, Ordering::SeqCst) + 1);
        self.sandboxes.lock().unwrap().insert(
            id.clone(),
            MemSandbox::new(
                request.owner.to_metadata(),
                deadline_after(request.timeout),
                request.network,
                request.image,
            ),
        );
        if self.hang_after_create.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(CreatedSandbox {
            sandbox_id: id,
            provider_session_id: None,
        })
    }

    async fn set_network(
        &self,
        sandbox_id: &str,
        profile: &NetworkProfile,
    ) -> Result<(), ProviderError> {
        if !self.live_network.load(Ordering::SeqCst) {
            return Err(ProviderError::Unsupported(
                "the memory provider is not set to change a live sandbox's network".into(),
            ));
        }
        self.with(sandbox_id, |s| {
            s.network = profile.clone();
            Ok(())
        })
    }

    async fn network_refusals(
        &self,
        sandbox_id: &str,
    ) -> Result<Option<NetworkRefusals>, ProviderError> {
        self.with(sandbox_id, |s| Ok(s.refusals.clone()))
    }

    async fn connect(&self, sandbox_id: &str) -> Result<Connected, ProviderError> {
        self.injected(Op::Connect)?;
        self.connects.fetch_add(1, Ordering::SeqCst);
        self.with(sandbox_id, |s| {
            let resumed = s.state == SandboxState::Paused;
            s.state = SandboxState::Running;
            Ok(Connected {
                resumed,
                provider_session_id: None,
            })
        })
    }

    async fn pause(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        self.injected(Op::Pause)?;
        self.pauses.fetch_add(1, Ordering::SeqCst);
        self.with(sandbox_id, |s| {
            if s.running_execs > 0 {
                return Err(ProviderError::Conflict("a command is running".into()));
            }
            s.state = SandboxState::Paused;
            Ok(())
        })
    }

    async fn checkpoint(
        &self,
        sandbox_id: &str,
        id: &threadbox_core::domain::CheckpointId,
        max_bytes: u64,
    ) -> Result<threadbox_core::ports::CheckpointTaken, ProviderError> {
        self.checkpoints_on()?;
        let (thread, home) = self.with(sandbox_id, |s| Ok((thread_of(s), home_of(&s.files))))?;
        let bytes: u64 = home
            .values()
            .map(|n| match n {
                Node::File(data) => data.len() as u64,
                Node::Dir => 0,
            })
            .sum();
        if bytes > max_bytes {
            return Err(ProviderError::NoSpace(format!(
                "the home holds {bytes} bytes; a checkpoint may hold at most {max_bytes} bytes"
            )));
        }
        let files = home.len() as u64;
        self.checkpoints
            .lock()
            .unwrap()
            .insert((thread, id.to_string()), home);
        Ok(threadbox_core::ports::CheckpointTaken {
            bytes,
            files,
            stalled: Duration::ZERO,
        })
    }

    async fn restore(
        &self,
        sandbox_id: &str,
        id: &threadbox_core::domain::CheckpointId,
    ) -> Result<threadbox_core::ports::Restored, ProviderError> {
        self.checkpoints_on()?;
        let thread = self.with(sandbox_id, |s| Ok(thread_of(s)))?;
        let saved = self
            .checkpoints
            .lock()
            .unwrap()
            .get(&(thread, id.to_string()))
            .cloned()
            .ok_or_else(|| ProviderError::NotFound(format!("checkpoint {id} is not here")))?;
        self.with(sandbox_id, |s| {
            s.files.retain(|p, _| !is_inside(p, HOME_DIR));
            s.files.extend(saved);
            Ok(threadbox_core::ports::Restored::default())
        })
    }

    async fn fork(
        &self,
        request: threadbox_core::ports::ForkSandbox,
    ) -> Result<CreatedSandbox, ProviderError> {
        self.checkpoints_on()?;
        let thread = self.with(&request.source, |s| Ok(thread_of(s)))?;
        let home = match &request.checkpoint {
            Some(id) => self
                .checkpoints
                .lock()
                .unwrap()
                .get(&(thread, id.to_string()))
                .cloned()
                .ok_or_else(|| ProviderError::NotFound(format!("checkpoint {id} is not here")))?,
            None => self.with(&request.source, |s| Ok(home_of(&s.files)))?,
        };
        let created = self.create(request.create).await?;
        self.with(&created.sandbox_id, |s| {
            s.files.extend(home);
            Ok(())
        })?;
        Ok(created)
    }

    async fn delete_checkpoint(
        &self,
        thread_id: &threadbox_core::domain::ThreadId,
        id: &threadbox_core::domain::CheckpointId,
    ) -> Result<(), ProviderError> {
        self.checkpoints
            .lock()
            .unwrap()
            .remove(&(thread_id.to_string(), id.to_string()));
        Ok(())
    }

    async fn delete_thread_checkpoints(
        &self,
        thread_id: &threadbox_core::domain::ThreadId,
    ) -> Result<(), ProviderError> {
        let thread = thread_id.to_string();
        self.checkpoints
            .lock()
            .unwrap()
            .retain(|(t, _), _| *t != thread);
        Ok(())
    }

    async fn kill(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        self.injected(Op::Kill)?;
        if self.sandboxes.lock().unwrap().remove(sandbox_id).is_some() {
            self.kills.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), ProviderError> {
        self.with(sandbox_id, |s| {
            s.deadline = Some(deadline_after(timeout));
            Ok(())
        })
    }

    async fn info(&self, sandbox_id: &str) -> Result<SandboxInfo, ProviderError> {
        self.with(sandbox_id, |s| Ok(Self::info_of(sandbox_id, s)))
    }

    async fn list(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxInfo>, ProviderError> {
        let map = self.sandboxes.lock().unwrap();
        let mut out: Vec<_> = map
            .iter()
            .filter(|(_, s)| metadata.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
            .map(|(id, s)| Self::info_of(id, s))
            .collect();
        out.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        Ok(out)
    }

    async fn exec(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
    ) -> Result<ExecResult, ProviderError> {
        self.injected(Op::Exec)?;
        self.running(sandbox_id)?;
        let line = match &request.command {
            ExecCommand::Shell(s) => s.clone(),
            ExecCommand::Argv(a) => a.join(" "),
        };
        self.commands.lock().unwrap().push(line.clone());
        self.with(sandbox_id, |s| {
            s.running_execs += 1;
            Ok(())
        })?;
        let delay = *self.exec_delay.lock().unwrap();
        let timed_out = delay > request.timeout;
        tokio::time::sleep(delay.min(request.timeout)).await;
        let refused = self.refuse_next.lock().unwrap().take();
        // The sandbox may have vanished meanwhile; a real provider would report the command lost.
        self.with(sandbox_id, |s| {
            s.running_execs -= 1;
            if let (Some((name, _)), Some(refusals)) = (&refused, s.refusals.as_mut()) {
                refusals.lookups = refusals.lookups.map(|n| n + 1);
                refusals.recent.push(RefusedDestination {
                    destination: name.clone(),
                    by: RefusedBy::Dns,
                    reason: RefusalReason::NotAllowed,
                    at: now(),
                    times: 1,
                });
            }
            Ok(())
        })?;
        let (exit_code, stderr) = match refused {
            Some((name, code)) => (
                Some(code),
                format!("curl: (6) Could not resolve host: {name}\n"),
            ),
            None => ((!timed_out).then_some(0), String::new()),
        };
        Ok(ExecResult {
            exit_code,
            stdout: line,
            stderr,
            duration_ms: delay.min(request.timeout).as_millis() as u64,
            timed_out,
            truncated: false,
            out_of_memory: false,
        })
    }

    async fn read_file(&self, sandbox_id: &str, path: &str) -> Result<Vec<u8>, ProviderError> {
        self.with(sandbox_id, |s| {
            let path = normalize(path)?;
            match s.files.get(&path) {
                Some(Node::File(data)) => Ok(data.clone()),
                Some(Node::Dir) => Err(ProviderError::InvalidRequest(format!(
                    "{path}: is a directory"
                ))),
                None => Err(no_such(&path)),
            }
        })
    }

    async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        contents: &[u8],
    ) -> Result<(), ProviderError> {
        self.with(sandbox_id, |s| {
            let path = normalize(path)?;
            if let Some(parent) = parent_of(&path) {
                s.make_dirs(parent)?;
            }
            if matches!(s.files.get(&path), Some(Node::Dir)) {
                return Err(ProviderError::InvalidRequest(format!(
                    "{path}: is a directory"
                )));
            }
            s.files.insert(path, Node::File(contents.to_vec()));
            Ok(())
        })
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: &str,
    ) -> Result<Vec<FileEntry>, ProviderError> {
        self.with(sandbox_id, |s| {
            let dir = normalize(path)?;
            match s.files.get(&dir) {
                Some(Node::Dir) => {}
                Some(Node::File(_)) => {
                    return Err(ProviderError::InvalidRequest(format!(
                        "{dir}: not a directory"
                    )))
                }
                None => return Err(no_such(&dir)),
            }
            s.files
                .keys()
                .filter(|p| is_inside(p, &dir) && parent_of(p) == Some(dir.as_str()))
                .map(|p| s.entry(p))
                .collect()
        })
    }

    async fn stat(&self, sandbox_id: &str, path: &str) -> Result<FileEntry, ProviderError> {
        self.with(sandbox_id, |s| s.entry(&normalize(path)?))
    }

    async fn make_dir(&self, sandbox_id: &str, path: &str) -> Result<(), ProviderError> {
        self.with(sandbox_id, |s| s.make_dirs(&normalize(path)?))
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        self.with(sandbox_id, |s| {
            let path = normalize(path)?;
            if !s.files.contains_key(&path) {
                return Err(no_such(&path));
            }
            let has_children = s.files.keys().any(|p| is_inside(p, &path));
            if has_children && !recursive {
                return Err(ProviderError::InvalidRequest(format!(
                    "{path}: directory not empty"
                )));
            }
            s.files.retain(|p, _| *p != path && !is_inside(p, &path));
            Ok(())
        })
    }

    async fn glob(&self, sandbox_id: &str, pattern: &str) -> Result<Vec<String>, ProviderError> {
        self.with(sandbox_id, |s| {
            Ok(s.files
                .iter()
                .filter(|(p, node)| {
                    matches!(node, Node::File(_)) && glob_matches(pattern.as_bytes(), p.as_bytes())
                })
                .map(|(p, _)| p.clone())
                .collect())
        })
    }

    async fn grep(
        &self,
        sandbox_id: &str,
        pattern: &str,
        path: &str,
    ) -> Result<Vec<GrepMatch>, ProviderError> {
        let regex = regex::Regex::new(pattern)
            .map_err(|e| ProviderError::InvalidRequest(format!("bad pattern {pattern:?}: {e}")))?;
        self.with(sandbox_id, |s| {
            let root = normalize(path)?;
            let mut out = Vec::new();
            for (p, node) in &s.files {
                let Node::File(data) = node else { continue };
                if *p != root && !is_inside(p, &root) {
                    continue;
                }
                for (i, line) in String::from_utf8_lossy(data).lines().enumerate() {
                    if regex.is_match(line) {
                        out.push(GrepMatch {
                            path: p.clone(),
                            line_number: i as u64 + 1,
                            line: line.to_owned(),
                        });
                    }
                }
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod conformance {
    use std::sync::Arc;

    use threadbox_core::ports::SandboxProvider;

    async fn provider(_test: &str) -> Option<((), Arc<dyn SandboxProvider>)> {
        Some(((), super::InMemoryProvider::new()))
    }

    crate::provider_conformance_tests!(provider; lifecycle, files);
}
