//! Checkpoints of a sandbox's `/home/user`: take, restore in place, fork into a new sandbox.
//!
//! A checkpoint is a directory tree under `<state>/checkpoints/<thread>/<id>/home`, with
//! `ids.json` naming the host id range its files are owned by (the source sandbox's). Each
//! thread has a folder of its own (named by [`thread_key`]): a sandbox finds only its own
//! thread's checkpoints, and a thread's destroy removes the folder whole, copies no record
//! names (a crash between a copy and its record) included. The directory is
//! the host's own (mode 0700, outside every bundle): no sandbox can reach it, and it counts
//! against no sandbox's quota. It is made as `.partial-<id>` and renamed into place once
//! complete, so a checkpoint that exists is whole; a crash leaves a `.partial-` the next open
//! removes.
//!
//! **Take**: in two passes (see `home_copy::live`). First, the sandbox running, the whole home
//! is copied (cloned per file where the filesystem can, else copied sparse; see `home_copy`),
//! noting what each copy was made from; then the container is frozen (the cgroup freezer, or
//! `SIGSTOP` rootless), the home walked again and made equal to it (what changed since the
//! first pass read it, by its ctime, inode and the processes mapping or writing it, copied
//! again; what is gone removed), and the container thawed: the copy is as consistent as one
//! made all frozen, whatever its processes were writing, and the stall is the second pass's
//! time. Nothing new starts during the second pass (commands start under the sandbox's
//! lifecycle lock, which the take holds then); during the first, the sandbox goes on as ever.
//!
//! **Restore**: a marker (`restoring` in the bundle, naming the checkpoint) is written first;
//! then the sandbox's processes are listed and killed (`kill -KILL -1` inside: everything but
//! its init), the container frozen, the home emptied and filled from the checkpoint, the
//! container thawed and the marker removed. A crash in between leaves the marker, and the next
//! open finishes the restore: the home ends as it was or as asked, never half of each.
//!
//! **Fork**: a new sandbox is created (its own id, hostname, machine id and host ids, none of
//! the source's processes), and the source's home (in two passes, as a take's: frozen only for
//! the second) or the checkpoint is copied into its home with the ids moved to the new range. The source runs on. A fork
//! that fails kills the new sandbox.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::bundle::Bundle;
use super::create::HomeFiller;
use super::home_copy::live::LiveCopy;
use super::home_copy::{copy_tree, remove_tree, CopyError, CopyStats, IdMove};
use super::idmap::IdRange;
use super::ids::validate_sandbox_id;
use super::runtime::ContainerStatus;
use super::{sandbox_ids, volume, RuncProvider};
use threadbox_core::domain::{CheckpointId, ThreadId};
use threadbox_core::fault;
use threadbox_core::ports::{
    CheckpointTaken, CreatedSandbox, ExecRequest, ForkSandbox, ProviderError, Restored,
    SandboxOwner, SandboxProvider, SandboxUser, StoppedProcess,
};

/// The bundle file naming a restore under way.
const RESTORING: &str = "restoring";
const PARTIAL_PREFIX: &str = ".partial-";
/// An ext4 home's own directory, which is the filesystem's, not the sandbox's.
const LOST_FOUND: &str = "lost+found";
/// How many times a rootless freeze is tried before the checkpoint gives up.
const FREEZE_ATTEMPTS: u32 = 5;
/// The most stopped processes a restore names.
const MAX_NAMED: usize = 200;
/// The longest command line a restore names, in characters.
const MAX_COMMAND_CHARS: usize = 200;

/// Lists the sandbox's processes (pid, tab, command line) but its init, itself and the exec
/// wrapper that runs it (its parent, which reports its exit), and kills them; again until a
/// round finds none (a process forking meanwhile), at most five rounds. Kernel threads and
/// zombies have no command line and are left alone.
const STOP_SCRIPT: &str = r#"me=$$; up=$PPID
for round in 1 2 3 4 5; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case $p in 1|$me|$up) continue;; esac
    c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
    [ -n "$c" ] || continue
    [ "$round" = 1 ] && printf '%s\t%s\n' "$p" "$c"
    kill -KILL "$p" 2>/dev/null && found=1
  done
  [ -n "$found" ] || break
done
exit 0"#;

/// Where a provider keeps its checkpoints: a folder per thread (see [`thread_key`]).
pub(crate) fn checkpoints_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("checkpoints")
}

/// A thread's folder name: `t-` and its id in URL-safe base64, so no thread id (`..` is one)
/// can be a path, and the name stays within NAME_MAX (128 characters give 171).
fn thread_key(thread: &ThreadId) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(thread.as_str());
    format!("t-{encoded}")
}

fn internal(what: &str, e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Internal(format!("{what}: {e}"))
}

fn not_found(id: &CheckpointId) -> ProviderError {
    ProviderError::NotFound(format!("checkpoint {id} is not on this host"))
}

/// The ids a checkpoint's files are owned by.
fn read_ids(dir: &Path) -> io::Result<IdRange> {
    serde_json::from_slice(&fs::read(dir.join("ids.json"))?).map_err(io::Error::other)
}

/// Copy the home `src` into the existing directory `dst`, the home filesystem's own
/// `lost+found` (root's: no sandbox can make one) aside.
fn copy_home(src: &Path, dst: &Path, ids: IdMove, cap: u64) -> Result<CopyStats, CopyError> {
    copy_tree(src, dst, ids, cap, Some(LOST_FOUND))
}

impl RuncProvider {
    /// Where `thread`'s checkpoints are.
    fn thread_dir(&self, thread: &ThreadId) -> PathBuf {
        checkpoints_dir(&self.config.state_dir).join(thread_key(thread))
    }

    fn checkpoint_dir(&self, thread: &ThreadId, id: &CheckpointId) -> PathBuf {
        self.thread_dir(thread).join(id.as_str())
    }

    /// The thread a live sandbox belongs to (its owner annotations).
    async fn thread_of(&self, sandbox_id: &str) -> Result<ThreadId, ProviderError> {
        let state = self.live_state(sandbox_id).await?;
        SandboxOwner::from_metadata(&state.annotations)
            .map(|owner| owner.thread_id)
            .ok_or_else(|| internal("the sandbox names no owner", sandbox_id))
    }

    /// `SandboxProvider::checkpoint`.
    pub(crate) async fn take_checkpoint(
        &self,
        sandbox_id: &str,
        id: &CheckpointId,
        max_bytes: u64,
    ) -> Result<CheckpointTaken, ProviderError> {
        let bundle = self.existing_bundle(sandbox_id)?;
        let thread = self.thread_of(sandbox_id).await?;
        let root = self.thread_dir(&thread);
        let dest = root.join(id.as_str());
        if dest.exists() {
            return Err(ProviderError::InvalidRequest(format!(
                "checkpoint {id} exists already"
            )));
        }
        if bundle.home_image().exists() {
            if let Ok(usage) = volume::usage(&bundle.home()) {
                if usage.used_bytes > max_bytes {
                    return Err(over_cap(usage.used_bytes, max_bytes));
                }
            }
        }
        fs::create_dir_all(&root)
            .map_err(|e| internal("cannot make the checkpoints directory", e))?;
        set_private(&root)?;
        let partial = root.join(format!("{PARTIAL_PREFIX}{id}"));
        let ids = sandbox_ids(&bundle);
        let slot = self.slot(sandbox_id);
        // Pass 1, the sandbox running (see `home_copy::live`), and not holding its lifecycle
        // lock: its commands start meanwhile, and whatever they, a pause, a restore or a
        // destroy do is pass 2's to see (a volume is unmounted lazily, so a destroy is not held
        // up by what pass 1 has open).
        let started = Instant::now();
        let mut live = self
            .live_copy(
                sandbox_id,
                &slot,
                (bundle.home(), partial.join("home")),
                IdMove::same(ids),
                max_bytes,
            )
            .await?;
        let warmed = tokio::task::spawn_blocking({
            let partial = partial.clone();
            move || -> io::Result<LiveCopy> {
                remove_tree(&partial)?;
                fs::create_dir(&partial)?;
                fs::write(partial.join("ids.json"), serde_json::to_vec(&ids)?)?;
                fs::create_dir(partial.join("home"))?;
                live.warm();
                Ok(live)
            }
        })
        .await
        .map_err(|e| internal("the home copy panicked", e))?;
        let live = match warmed {
            Ok(live) => live,
            Err(e) => {
                let _ = remove_tree(&partial);
                return Err(internal("cannot start the checkpoint", e));
            }
        };
        let warm = started.elapsed();
        fault::point("checkpoint-warmed");
        // Pass 2, frozen and under the lock: nothing starts while only what changed is copied.
        let _lifecycle = slot.lifecycle.lock().await;
        let frozen = self
            .frozen(sandbox_id, move || live.finish().map_err(copy_io))
            .await;
        // Whatever went wrong (the sandbox gone meanwhile, a freeze refused, the copy), pass 1's
        // copy goes: nothing is left for the next open to find.
        let (done, stalled) = match frozen {
            Ok((Ok(done), stalled)) => (done, stalled),
            Ok((Err(e), _)) => {
                let _ = remove_tree(&partial);
                return Err(copy_error(e, max_bytes));
            }
            Err(e) => {
                let _ = remove_tree(&partial);
                return Err(e);
            }
        };
        let stats = done.stats;
        fault::point("checkpoint-before-publish");
        fs::rename(&partial, &dest).map_err(|e| internal("cannot publish the checkpoint", e))?;
        tracing::info!(sandbox_id, checkpoint = %id, bytes = stats.bytes, files = stats.files,
            cloned = stats.cloned, recopied = done.recopied, two_pass = done.two_pass,
            warm_ms = warm.as_millis() as u64, stalled_ms = stalled.as_millis() as u64,
            "checkpoint taken");
        Ok(CheckpointTaken {
            bytes: stats.bytes,
            files: stats.files,
            stalled,
        })
    }

    /// A two-pass copy of a running sandbox's home `from` into `to` (see `home_copy::live`),
    /// looking for writers among the container's processes where its cgroup is known.
    async fn live_copy(
        &self,
        sandbox_id: &str,
        slot: &crate::Slot,
        (from, to): (PathBuf, PathBuf),
        ids: IdMove,
        cap: u64,
    ) -> Result<LiveCopy, ProviderError> {
        let live = LiveCopy::new(from, to, ids, cap, Some(LOST_FOUND));
        if self.is_rootless() {
            return Ok(live);
        }
        Ok(match self.container_cgroup(sandbox_id, slot).await? {
            Some(cgroup) => live.watching(Box::new(move || cgroup.procs())),
            None => live,
        })
    }

    /// Run `work` on a blocking thread with the container frozen (unless it was paused
    /// already), thawing it whatever `work` answers; `work`'s answer and how long the
    /// container was frozen. The caller holds the sandbox's lifecycle lock.
    async fn frozen<T, F>(&self, sandbox_id: &str, work: F) -> Result<(T, Duration), ProviderError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        // As root, through the container's freezer itself (what `runc pause`, `resume` and
        // `state` do, without starting runc three times: about 30 ms of a fork or a checkpoint
        // here); rootless, or where no freezer is found, through runc.
        if !self.is_rootless() {
            let slot = self.slot(sandbox_id);
            if let Some(cgroup) = self.container_cgroup(sandbox_id, &slot).await? {
                if let Some(was_frozen) = cgroup.is_frozen() {
                    return self.frozen_by_cgroup(cgroup, was_frozen, work).await;
                }
            }
        }
        let state = self.live_state(sandbox_id).await?;
        let was_paused = state.status == ContainerStatus::Paused;
        let started = Instant::now();
        if !was_paused {
            // Rootless, the freeze is SIGSTOP to each process in turn, which a sandbox forking
            // hard can outrun; a failed one leaves it running, so it is tried again a few times.
            let attempts = if self.is_rootless() {
                FREEZE_ATTEMPTS
            } else {
                1
            };
            let mut attempt = 1;
            while let Err(e) = self.runc.pause(sandbox_id).await {
                if self.is_rootless() {
                    // A signal freeze that failed midway has left its mark and some processes
                    // stopped: both undone, or the next try (and the sandbox) would find it
                    // paused.
                    let _ = self.runc.resume(sandbox_id).await;
                }
                if attempt >= attempts {
                    return Err(self.classify(sandbox_id, e).await);
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * attempt as u64)).await;
            }
        }
        let answer = tokio::task::spawn_blocking(work).await;
        if !was_paused {
            if let Err(e) = self.runc.resume(sandbox_id).await {
                tracing::error!(sandbox_id, error = %e, "cannot thaw a sandbox after copying its home");
                return Err(self.classify(sandbox_id, e).await);
            }
        }
        let stalled = started.elapsed();
        let answer = answer.map_err(|e| internal("the home copy panicked", e))?;
        Ok((answer, stalled))
    }

    /// [`Self::frozen`] through the container's freezer.
    async fn frozen_by_cgroup<T, F>(
        &self,
        cgroup: std::sync::Arc<crate::cgroup::ContainerCgroup>,
        was_frozen: bool,
        work: F,
    ) -> Result<(T, Duration), ProviderError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let within = self.runc.call_timeout();
        let started = Instant::now();
        let set = |frozen: bool| {
            let cgroup = cgroup.clone();
            async move {
                tokio::task::spawn_blocking(move || cgroup.set_frozen(frozen, within))
                    .await
                    .map_err(|e| internal("the freezer panicked", e))?
                    .map_err(|e| {
                        ProviderError::Unavailable(format!(
                            "cannot freeze or thaw the sandbox: {e}"
                        ))
                    })
            }
        };
        if !was_frozen {
            set(true).await?;
        }
        let answer = tokio::task::spawn_blocking(work).await;
        if !was_frozen {
            if let Err(e) = set(false).await {
                tracing::error!(error = %e, "cannot thaw a sandbox after copying its home");
                return Err(e);
            }
        }
        let stalled = started.elapsed();
        let answer = answer.map_err(|e| internal("the home copy panicked", e))?;
        Ok((answer, stalled))
    }

    /// `SandboxProvider::restore`.
    pub(crate) async fn restore_checkpoint(
        &self,
        sandbox_id: &str,
        id: &CheckpointId,
    ) -> Result<Restored, ProviderError> {
        let bundle = self.existing_bundle(sandbox_id)?;
        let source = self.checkpoint_dir(&self.thread_of(sandbox_id).await?, id);
        let from = read_ids(&source).map_err(|_| not_found(id))?;
        let marker = bundle.dir().join(RESTORING);
        write_synced(&marker, id.as_str().as_bytes())
            .map_err(|e| internal("cannot mark the restore", e))?;
        fault::point("restore-marked");
        self.connect(sandbox_id).await?;
        let stopped = self.stop_processes(sandbox_id).await?;
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        self.put_back(sandbox_id, &bundle, &source, from).await?;
        fs::remove_file(&marker).map_err(|e| internal("cannot clear the restore mark", e))?;
        tracing::info!(sandbox_id, checkpoint = %id, stopped = stopped.len(), "checkpoint restored");
        Ok(Restored { stopped })
    }

    /// Empty the home and fill it from the checkpoint at `source`, frozen.
    async fn put_back(
        &self,
        sandbox_id: &str,
        bundle: &Bundle,
        source: &Path,
        from: IdRange,
    ) -> Result<(), ProviderError> {
        let ids = IdMove {
            from,
            to: sandbox_ids(bundle),
        };
        let (home, source) = (bundle.home(), source.join("home"));
        let (copied, _) = self
            .frozen(sandbox_id, move || -> io::Result<CopyStats> {
                empty_home(&home)?;
                fault::point("restore-emptied");
                copy_home(&source, &home, ids, u64::MAX).map_err(copy_io)
            })
            .await?;
        copied.map(drop).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => ProviderError::NoSpace(format!(
                "the checkpoint does not fit the sandbox's home any more: {e}"
            )),
            _ => internal("cannot put the checkpoint back", e),
        })
    }

    /// Kill every process of the sandbox but its init; the ones that were running.
    async fn stop_processes(&self, sandbox_id: &str) -> Result<Vec<StoppedProcess>, ProviderError> {
        // As the sandbox's root where it has one (an image sandbox's root may run processes
        // too, and the user could not kill them); rootless the one user is uid 0 already, and
        // without a user namespace of its own no command runs as root.
        let mut request = ExecRequest::shell(STOP_SCRIPT);
        if !sandbox_ids(&self.existing_bundle(sandbox_id)?).is_identity() {
            request.user = SandboxUser::Root;
        }
        let result = self.exec(sandbox_id, request).await?;
        Ok(parse_stopped(&result.stdout))
    }

    /// At open: finish the restores a crash interrupted (see the module docs).
    pub(crate) async fn finish_restores(&self) {
        let Ok(entries) = fs::read_dir(self.config.sandboxes_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let marker = entry.path().join(RESTORING);
            let Ok(text) = fs::read_to_string(&marker) else {
                continue;
            };
            let sandbox_id = entry.file_name().to_string_lossy().into_owned();
            let finished = self.finish_restore(&sandbox_id, text.trim()).await;
            match finished {
                Ok(()) => {
                    let _ = fs::remove_file(&marker);
                    tracing::info!(
                        sandbox_id,
                        checkpoint = text.trim(),
                        "interrupted restore finished"
                    );
                }
                Err(e) => {
                    tracing::warn!(sandbox_id, error = %e, "cannot finish an interrupted restore")
                }
            }
        }
        // Half-made checkpoints of earlier runs, in each thread's folder.
        let root = checkpoints_dir(&self.config.state_dir);
        for thread in fs::read_dir(&root).into_iter().flatten().flatten() {
            for entry in fs::read_dir(thread.path()).into_iter().flatten().flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(PARTIAL_PREFIX)
                {
                    let _ = remove_tree(&entry.path());
                }
            }
        }
    }

    async fn finish_restore(
        &self,
        sandbox_id: &str,
        checkpoint: &str,
    ) -> Result<(), ProviderError> {
        validate_sandbox_id(sandbox_id)?;
        let id = CheckpointId::parse(checkpoint).map_err(ProviderError::InvalidRequest)?;
        let bundle = self.existing_bundle(sandbox_id)?;
        let source = self.checkpoint_dir(&self.thread_of(sandbox_id).await?, &id);
        let from = read_ids(&source).map_err(|_| not_found(&id))?;
        self.connect(sandbox_id).await?;
        self.stop_processes(sandbox_id).await?;
        let slot = self.slot(sandbox_id);
        let _lifecycle = slot.lifecycle.lock().await;
        self.put_back(sandbox_id, &bundle, &source, from).await
    }

    /// `SandboxProvider::fork`: a create whose home is filled, while its container starts, from
    /// the source's home (frozen for the second of two passes) or the checkpoint.
    pub(crate) async fn fork_sandbox(
        &self,
        request: ForkSandbox,
    ) -> Result<CreatedSandbox, ProviderError> {
        let source = self.existing_bundle(&request.source)?;
        let from_checkpoint = match &request.checkpoint {
            Some(id) => {
                let dir = self.checkpoint_dir(&self.thread_of(&request.source).await?, id);
                Some((read_ids(&dir).map_err(|_| not_found(id))?, dir.join("home")))
            }
            None => None,
        };
        let source_id = request.source.clone();
        let fill: HomeFiller<'_> = Box::new(move |home, to| {
            Box::pin(self.fill_fork(source_id, source, home, to, from_checkpoint))
        });
        let created = self.create_filled(request.create, Some(fill)).await?;
        tracing::info!(source = %request.source, sandbox_id = %created.sandbox_id, "sandbox forked");
        Ok(created)
    }

    /// Copy the source's home (two passes, the second frozen) or the checkpoint into the new
    /// sandbox's `home`.
    async fn fill_fork(
        &self,
        source_id: String,
        source: Bundle,
        home: PathBuf,
        to: IdRange,
        from_checkpoint: Option<(IdRange, PathBuf)>,
    ) -> Result<(), ProviderError> {
        let copied = match from_checkpoint {
            Some((from, dir)) => {
                // The source must still be there, as for a fork of its live home.
                self.live_state(&source_id).await?;
                let ids = IdMove { from, to };
                tokio::task::spawn_blocking(move || {
                    empty_home(&home)?;
                    copy_home(&dir, &home, ids, u64::MAX).map_err(copy_io)
                })
                .await
                .map_err(|e| internal("the home copy panicked", e))?
            }
            None => {
                let ids = IdMove {
                    from: sandbox_ids(&source),
                    to,
                };
                let slot = self.slot(&source_id);
                // As a checkpoint's: most of it with the source running (its commands too), the
                // rest frozen, under its lifecycle lock.
                let mut live = self
                    .live_copy(
                        &source_id,
                        &slot,
                        (source.home(), home.clone()),
                        ids,
                        u64::MAX,
                    )
                    .await?;
                let warmed = tokio::task::spawn_blocking(move || -> io::Result<LiveCopy> {
                    empty_home(&home)?;
                    live.warm();
                    Ok(live)
                })
                .await
                .map_err(|e| internal("the home copy panicked", e))?;
                match warmed {
                    Ok(live) => {
                        let _lifecycle = slot.lifecycle.lock().await;
                        self.frozen(&source_id, move || {
                            fault::point("fork-copying");
                            live.finish().map(|done| done.stats).map_err(copy_io)
                        })
                        .await?
                        .0
                    }
                    Err(e) => Err(e),
                }
            }
        };
        copied.map(drop).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => ProviderError::NoSpace(format!(
                "the source's home does not fit the new sandbox's: {e}"
            )),
            _ => internal("cannot copy the home into the fork", e),
        })
    }

    /// `SandboxProvider::delete_checkpoint` (with `id`), and `delete_thread_checkpoints`
    /// (without: the thread's whole folder, copies no record names included).
    pub(crate) async fn remove_checkpoints(
        &self,
        thread: &ThreadId,
        id: Option<&CheckpointId>,
    ) -> Result<(), ProviderError> {
        let dir = match id {
            Some(id) => self.checkpoint_dir(thread, id),
            None => self.thread_dir(thread),
        };
        tokio::task::spawn_blocking(move || remove_tree(&dir))
            .await
            .map_err(|e| internal("checkpoint removal panicked", e))?
            .map_err(|e| internal("cannot remove the checkpoint", e))
    }
}

/// Empty a home, leaving the filesystem's own `lost+found`.
fn empty_home(home: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for entry in fs::read_dir(home)? {
        let entry = entry?;
        let path = entry.path();
        let meta = fs::symlink_metadata(&path)?;
        if entry.file_name() == LOST_FOUND && meta.uid() == 0 {
            continue;
        }
        if meta.is_dir() {
            remove_tree(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
    }
    Ok(())
}

fn set_private(dir: &Path) -> Result<(), ProviderError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| internal("cannot make the checkpoints directory private", e))
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp)?;
    io::Write::write_all(&mut file, bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

fn over_cap(bytes: u64, cap: u64) -> ProviderError {
    ProviderError::NoSpace(format!(
        "the home holds {bytes} bytes; a checkpoint may hold at most {cap} bytes (the \
         per-thread checkpoint byte cap)"
    ))
}

fn copy_io(e: CopyError) -> io::Error {
    match e {
        CopyError::Io(e) => e,
        CopyError::OverCap(o) => io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("over the cap: {} > {}", o.bytes, o.cap),
        ),
    }
}

fn copy_error(e: io::Error, cap: u64) -> ProviderError {
    if e.kind() == io::ErrorKind::FileTooLarge {
        return ProviderError::NoSpace(format!(
            "the home holds more than {cap} bytes, the most a checkpoint may hold (the \
             per-thread checkpoint byte cap); nothing was kept"
        ));
    }
    internal("cannot copy the home", e)
}

/// The stop script's listing, read as hostile text: at most [`MAX_NAMED`] lines, each a pid
/// and a command line cut to [`MAX_COMMAND_CHARS`] characters.
fn parse_stopped(listing: &str) -> Vec<StoppedProcess> {
    listing
        .lines()
        .filter_map(|line| {
            let (pid, command) = line.split_once('\t')?;
            let pid = pid.parse().ok()?;
            let command: String = command
                .trim()
                .chars()
                .filter(|c| !c.is_control())
                .take(MAX_COMMAND_CHARS)
                .collect();
            Some(StoppedProcess { pid, command })
        })
        // The `$(...)` of the listing itself shows as a copy of the script.
        .filter(|p| !p.command.contains("for round in"))
        .take(MAX_NAMED)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_listing_is_read_as_hostile_text() {
        let listing = format!(
            "12\tpython3 -m http.server\n13\tx\u{1b}[2Jy\nnot a line\n-4\tz\n14\t{}\n",
            "a".repeat(500)
        );
        let stopped = parse_stopped(&listing);
        assert_eq!(stopped.len(), 3);
        assert_eq!(stopped[0].pid, 12);
        assert_eq!(stopped[1].command, "x[2Jy");
        assert_eq!(stopped[2].command.len(), MAX_COMMAND_CHARS);
    }
}
