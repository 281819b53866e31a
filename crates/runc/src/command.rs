//! Running a command in a sandbox, as the provider sees it: admitted under the caps, never in
//! a paused sandbox, and runc's refusal to start one turned into the error that says why
//! (`exec` runs it).

use tracing::Instrument;

use super::admission::ExecHold;
use super::exec::{self, ExecError, ExecTarget};
use super::runtime::ContainerStatus;
use super::{bundle, gone, network, sandbox_ids, RuncProvider};
use threadbox_core::ports::{
    is_fork_failure, process_limit_reached, ExecRequest, ExecResult, OutputSink, ProviderError,
    SandboxUser,
};

impl RuncProvider {
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

    /// A command in a sandbox, its output kept in the result or sent to `output` as it comes.
    #[tracing::instrument(skip(self, request, output))]
    pub(crate) async fn run_command(
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
            self.networks
                .add_trust_env(&mut request.env, bundle.has_image_root());
        }
        let slot = self.slot(sandbox_id);
        let _hold = {
            let _lifecycle = slot
                .lifecycle
                .lock()
                .instrument(tracing::debug_span!("lifecycle.lock"))
                .await;
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
        let cgroup = self
            .container_cgroup(sandbox_id, &slot)
            .instrument(tracing::debug_span!("cgroup.lookup"))
            .await?;
        let cwd = request.cwd.clone();
        let ids = sandbox_ids(&bundle);
        if request.user == SandboxUser::Root && ids.is_identity() {
            // Without a user namespace of its own the sandbox's root would be the host's.
            return Err(ProviderError::Unsupported(
                "commands as root need the sandbox's own user namespace, and this provider runs \
                 sandboxes without one (user namespaces are off)"
                    .into(),
            ));
        }
        let target = ExecTarget {
            runc: &self.runc,
            id: sandbox_id,
            run_dir: bundle.run_dir(),
            cgroup,
            ids,
            pids_limit: (!self.is_rootless()).then_some(self.config.limits.pids),
            runner: Some(bundle.run_dir()),
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
            Err(ExecError::NotStarted(message)) => Err(self
                .not_started(sandbox_id, &message, cwd.as_deref())
                .await?),
        }
    }

    /// Why runc could not start a command, from its message and the container's state now.
    async fn not_started(
        &self,
        sandbox_id: &str,
        message: &str,
        cwd: Option<&str>,
    ) -> Result<ProviderError, ProviderError> {
        Ok(match self.runc.state(sandbox_id).await? {
            Some(state) if state.status == ContainerStatus::Paused => ProviderError::Conflict(
                format!("sandbox {sandbox_id} is paused; connect resumes it"),
            ),
            Some(state) if state.status.is_alive() => {
                if message.contains("chdir to cwd") {
                    ProviderError::InvalidRequest(format!(
                        "working directory {} does not exist in the sandbox",
                        cwd.unwrap_or(bundle::HOME)
                    ))
                } else if is_fork_failure(message) || self.at_pid_limit(sandbox_id).await {
                    // The sandbox's pid limit: runc could not start even the command (its
                    // init could not fork into the container; runc then says only that
                    // its pipe was reset).
                    process_limit_reached(Some(self.config.limits.pids))
                } else {
                    ProviderError::Internal(format!("the command did not start: {message}"))
                }
            }
            _ => gone(sandbox_id),
        })
    }
}
