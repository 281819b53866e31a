//! `InMemoryProvider`: a sandbox provider that keeps sandboxes in a map, for use-case tests only.
//!
//! It runs no code: `exec` records the command and answers from a script the test sets. What it
//! offers instead are the failure points real providers have and tests need to reach: a create
//! that hangs after the sandbox exists (the process died before writing the record), a sandbox
//! that vanishes behind threadbox's back, injected errors, and counters.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::domain::Millis;
use crate::ports::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Connect,
    Pause,
    Kill,
    Exec,
}

#[derive(Clone, Debug)]
struct MemSandbox {
    state: SandboxState,
    metadata: BTreeMap<String, String>,
    files: BTreeMap<String, Vec<u8>>,
    deadline: Option<Millis>,
    running_execs: u32,
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
    failures: Mutex<HashMap<Op, VecDeque<ProviderError>>>,
    commands: Mutex<Vec<String>>,
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

    /// Ids of the sandboxes that exist now.
    pub fn live_ids(&self) -> Vec<String> {
        let mut ids: Vec<_> = self.sandboxes.lock().unwrap().keys().cloned().collect();
        ids.sort();
        ids
    }

    pub fn state_of(&self, id: &str) -> Option<SandboxState> {
        self.sandboxes.lock().unwrap().get(id).map(|s| s.state)
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
        }
    }
}

#[async_trait]
impl SandboxProvider for InMemoryProvider {
    fn name(&self) -> &str {
        "memory"
    }

    async fn create(&self, request: CreateSandbox) -> Result<CreatedSandbox, ProviderError> {
        let delay = *self.create_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.injected(Op::Create)?;
        self.creates.fetch_add(1, Ordering::SeqCst);
        let id = format!("mem-{}", self.next_id.fetch_add(1, Ordering::SeqCst) + 1);
        self.sandboxes.lock().unwrap().insert(
            id.clone(),
            MemSandbox {
                state: SandboxState::Running,
                metadata: request.owner.to_metadata(),
                files: BTreeMap::new(),
                deadline: None,
                running_execs: 0,
            },
        );
        if self.hang_after_create.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(CreatedSandbox {
            sandbox_id: id,
            provider_session_id: None,
        })
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

    async fn kill(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        self.injected(Op::Kill)?;
        if self.sandboxes.lock().unwrap().remove(sandbox_id).is_some() {
            self.kills.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), ProviderError> {
        self.with(sandbox_id, |s| {
            // The fake has no clock of its own; a relative deadline is enough to see it moved.
            s.deadline = Some(Millis(timeout.as_millis() as i64));
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
        // The sandbox may have vanished meanwhile; a real provider would report the command lost.
        self.with(sandbox_id, |s| {
            s.running_execs -= 1;
            Ok(())
        })?;
        Ok(ExecResult {
            exit_code: (!timed_out).then_some(0),
            stdout: line,
            stderr: String::new(),
            duration_ms: delay.min(request.timeout).as_millis() as u64,
            timed_out,
            truncated: false,
            out_of_memory: false,
        })
    }

    async fn read_file(&self, sandbox_id: &str, path: &str) -> Result<Vec<u8>, ProviderError> {
        self.with(sandbox_id, |s| {
            s.files
                .get(path)
                .cloned()
                .ok_or_else(|| ProviderError::InvalidRequest(format!("{path}: no such file")))
        })
    }

    async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        contents: &[u8],
    ) -> Result<(), ProviderError> {
        self.with(sandbox_id, |s| {
            s.files.insert(path.to_owned(), contents.to_vec());
            Ok(())
        })
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: &str,
    ) -> Result<Vec<FileEntry>, ProviderError> {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        self.with(sandbox_id, |s| {
            Ok(s.files
                .iter()
                .filter_map(|(p, data)| {
                    let rest = p.strip_prefix(&prefix)?;
                    (!rest.contains('/')).then(|| FileEntry {
                        name: rest.to_owned(),
                        path: p.clone(),
                        kind: FileKind::File,
                        size: data.len() as u64,
                        modified: None,
                    })
                })
                .collect())
        })
    }

    async fn stat(&self, sandbox_id: &str, path: &str) -> Result<FileEntry, ProviderError> {
        self.with(sandbox_id, |s| {
            let data = s
                .files
                .get(path)
                .ok_or_else(|| ProviderError::InvalidRequest(format!("{path}: no such file")))?;
            Ok(FileEntry {
                name: path.rsplit('/').next().unwrap_or(path).to_owned(),
                path: path.to_owned(),
                kind: FileKind::File,
                size: data.len() as u64,
                modified: None,
            })
        })
    }

    async fn make_dir(&self, sandbox_id: &str, _path: &str) -> Result<(), ProviderError> {
        // Directories are implicit in the flat map.
        self.with(sandbox_id, |_| Ok(()))
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        self.with(sandbox_id, |s| {
            s.files.remove(path);
            if recursive {
                s.files.retain(|p, _| !p.starts_with(&prefix));
            }
            Ok(())
        })
    }

    async fn glob(&self, sandbox_id: &str, pattern: &str) -> Result<Vec<String>, ProviderError> {
        // Prefix patterns only ("dir/*"): enough for the use-case tests that touch files.
        let prefix = pattern.trim_end_matches('*').to_owned();
        self.with(sandbox_id, |s| {
            Ok(s.files
                .keys()
                .filter(|p| p.starts_with(&prefix))
                .cloned()
                .collect())
        })
    }

    async fn grep(
        &self,
        sandbox_id: &str,
        pattern: &str,
        path: &str,
    ) -> Result<Vec<GrepMatch>, ProviderError> {
        self.with(sandbox_id, |s| {
            let mut out = Vec::new();
            for (p, data) in s.files.iter().filter(|(p, _)| p.starts_with(path)) {
                for (i, line) in String::from_utf8_lossy(data).lines().enumerate() {
                    if line.contains(pattern) {
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
