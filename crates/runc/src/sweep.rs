//! Sweeping what earlier runs left, and removing a sandbox's container: every live sandbox is
//! found by reconciling the state directory with runc, and what only one of them still knows
//! (a bundle without a container, a container without a bundle, a namespace pin or an id
//! range without a sandbox) is removed.

use std::collections::HashMap;
use std::time::Duration;

use super::bundle::{self, Bundle};
use super::idmap::{self, IdRange};
use super::ids::validate_sandbox_id;
use super::runtime::{ContainerState, ContainerStatus};
use super::{process, RuncProvider};
use threadbox_core::ports::ProviderError;

impl RuncProvider {
    /// Every live sandbox, reconciling the state directory with runc on the way: a bundle
    /// without a live container is removed, and so is a container without a bundle. A bundle
    /// younger than [`Self::leftover_grace`] is spared, since another process may be creating
    /// it right now.
    pub(crate) async fn survey(&self) -> Result<Vec<(Bundle, ContainerState)>, ProviderError> {
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
    pub(crate) async fn destroy_container(&self, id: &str) -> Result<(), ProviderError> {
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

    /// How the host's id table names a sandbox of ours: its bundle's absolute path.
    pub(crate) fn owner(&self, sandbox_id: &str) -> std::path::PathBuf {
        self.sandboxes_root.join(sandbox_id)
    }

    /// Free a removed sandbox's id range; a failure only delays reuse until the next sweep.
    pub(crate) fn release_ids(&self, sandbox_id: &str, ids: Option<IdRange>) {
        if let Some(ids) = ids {
            if let Err(e) = self.id_ranges.release(ids, &self.owner(sandbox_id)) {
                tracing::warn!(sandbox_id, error = %e, "cannot release the id range");
            }
        }
    }
}
