//! Making a sandbox, step by step: admit it under the host's cap, give it host ids, lay out its
//! bundle, prepare its network, start the container and connect it. A failure at any step
//! leaves nothing behind.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use tracing::Instrument;

use super::admission::limit;
use super::bundle::{write_bundle, Bundle, BundleSpec, SandboxRecord};
use super::exec;
use super::idmap::IdRange;
use super::ids::{hostname_for, new_sandbox_id};
use super::runner;
use super::RuncProvider;
use std::os::fd::AsFd;
use threadbox_core::ports::{CreateSandbox, CreatedSandbox, Limit, NetworkProfile, ProviderError};

/// Work on a new sandbox's home done while its container starts (a fork's copy of its source):
/// given the home's path on the host and the sandbox's ids.
pub(crate) type HomeFiller<'a> = Box<
    dyn FnOnce(
            PathBuf,
            IdRange,
        ) -> Pin<Box<dyn Future<Output = Result<(), ProviderError>> + Send + 'a>>
        + Send
        + 'a,
>;

impl RuncProvider {
    /// `SandboxProvider::create`.
    pub(crate) async fn create_sandbox(
        &self,
        request: CreateSandbox,
    ) -> Result<CreatedSandbox, ProviderError> {
        self.create_filled(request, None).await
    }

    /// A create whose home `fill` fills while `runc run` starts the container, so a fork costs
    /// a create plus what of its copy outlasts the start, not the two one after the other. A
    /// failed fill fails the create, leaving nothing.
    pub(crate) async fn create_filled(
        &self,
        request: CreateSandbox,
        fill: Option<HomeFiller<'_>>,
    ) -> Result<CreatedSandbox, ProviderError> {
        if request.network.is_networked() {
            self.networks
                .check_host(self.is_rootless(), self.config.user_namespaces)?;
        }
        exec::validate_env(&request.env)?;
        let image = self.images.get(&request.image)?;
        let id = new_sandbox_id();
        let bundle = Bundle::new(&self.config.sandboxes_dir(), &id);
        let slot = self.slot(&id);
        let lifecycle = slot.lifecycle.lock().await;
        // Held until the bundle directory exists, which is what the count sees.
        let admitting = self
            .admitting_sandbox
            .lock()
            .instrument(tracing::debug_span!("admission.wait"))
            .await;
        tracing::debug_span!("admission.count").in_scope(|| self.admit_sandbox())?;
        let ids = tracing::debug_span!("userns.ids").in_scope(|| self.allocate_ids(&id))?;
        let written = self
            .lay_out(&bundle, &request, ids, image.rootfs.clone())
            .instrument(tracing::debug_span!("bundle.write"))
            .await;
        drop(admitting);
        let started = match (written, fill) {
            (Ok(()), None) => self.start(&id, &bundle, &request.network, ids).await,
            (Ok(()), Some(fill)) => {
                let (started, filled) = tokio::join!(
                    self.start(&id, &bundle, &request.network, ids),
                    fill(bundle.home(), ids).instrument(tracing::debug_span!("home.fill"))
                );
                started.and(filled)
            }
            (Err(e), _) => Err(e),
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
        tracing::debug_span!("cgroup.find").in_scope(|| self.remember_cgroup(&id, &bundle));
        // The set-up runs commands, which take the lifecycle lock themselves. Nobody else knows
        // this sandbox's id until create answers, so nothing can come between.
        drop(lifecycle);
        if let Some(setup) = &image.setup {
            let done = self
                .run_setup(&id, &request.image, setup)
                .instrument(tracing::info_span!("image.setup", image = %request.image))
                .await;
            if let Err(e) = done {
                tracing::warn!(sandbox_id = %id, error = %e, "image set-up failed; removing the sandbox");
                if let Err(kill) = threadbox_core::ports::SandboxProvider::kill(self, &id).await {
                    tracing::warn!(sandbox_id = %id, error = %kill, "cannot remove a sandbox whose set-up failed");
                }
                return Err(e);
            }
        }
        tracing::info!(sandbox_id = %id, image = %request.image, "sandbox created");
        Ok(CreatedSandbox {
            sandbox_id: id,
            provider_session_id: None,
        })
    }

    /// Refuse a sandbox over the host's cap (called while no other create can count).
    fn admit_sandbox(&self) -> Result<(), ProviderError> {
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
        Ok(())
    }

    /// The host ids a new sandbox maps: the caller's rootless, a range of its own with user
    /// namespaces, the host's own without.
    fn allocate_ids(&self, id: &str) -> Result<IdRange, ProviderError> {
        if let Some(ids) = self.rootless_ids {
            Ok(ids)
        } else if self.config.user_namespaces {
            self.id_ranges.allocate(&self.owner(id)).map_err(|e| {
                ProviderError::Unavailable(format!("cannot allocate host ids for a sandbox: {e}"))
            })
        } else {
            Ok(IdRange::IDENTITY)
        }
    }

    /// Write the new sandbox's bundle (on a blocking thread: it may format its home volume).
    async fn lay_out(
        &self,
        bundle: &Bundle,
        request: &CreateSandbox,
        ids: IdRange,
        image: Option<std::path::PathBuf>,
    ) -> Result<(), ProviderError> {
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
            self.networks.add_trust_env(&mut env, image.is_some());
        }
        let (limits, host, swap_limit, volumes) = (
            self.config.limits.clone(),
            self.host.clone(),
            self.swap_limit,
            self.volumes.clone(),
        );
        let layout = bundle.clone();
        let runner = self.runner.is_some();
        // The caller's span, so the mounts' and the user namespace's spans nest under it.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _span = span.entered();
            let spec = BundleSpec {
                hostname,
                annotations,
                env: &env,
                limits: &limits,
                swap_limit,
                host: &host,
                ids,
                home_volume: volumes.as_ref(),
                image: image.as_deref(),
                runner,
            };
            write_bundle(&layout, &spec, &record)
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("bundle writer panicked: {e}")))
        .and_then(|r| {
            r.map_err(|e| ProviderError::Internal(format!("cannot write the bundle: {e}")))
        })
    }

    /// Prepare a networked sandbox's bundle, start the container, and connect its network.
    async fn start(
        &self,
        id: &str,
        bundle: &Bundle,
        profile: &NetworkProfile,
        ids: IdRange,
    ) -> Result<(), ProviderError> {
        let saved = match profile {
            NetworkProfile::Networked { allow } => Some(
                tracing::debug_span!("network.prepare")
                    .in_scope(|| self.prepare_network(bundle, ids, allow))?,
            ),
            NetworkProfile::Restricted => None,
        };
        // The command runner's image and the socket it will listen on, as fds 3 and 4.
        let listener = match &self.runner {
            Some(_) => Some(runner::listen(&bundle.run_dir()).map_err(|e| {
                ProviderError::Internal(format!("cannot make the command runner's socket: {e}"))
            })?),
            None => None,
        };
        let passed: Vec<std::os::fd::BorrowedFd<'_>> = match (&self.runner, &listener) {
            (Some(image), Some(listener)) => vec![image.fd(), listener.as_fd()],
            _ => Vec::new(),
        };
        self.runc
            .run_detached(id, bundle.dir(), &bundle.init_pid_file(), &passed)
            .await?;
        match saved {
            Some(saved) => {
                self.attach_network(id, &saved)
                    .instrument(tracing::debug_span!("network.attach"))
                    .await
            }
            None => Ok(()),
        }
    }
}
