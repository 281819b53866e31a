//! A thread's network profile: changed by a person (`PUT /v1/threads/{id}/network`), kept in
//! its record with a `user` event, and applied to its sandbox where the provider can do that
//! live; otherwise the thread's next sandbox (a reset, or a recreate) is made with it.

use serde::{Deserialize, Serialize};

use crate::domain::{NetworkProfile, Session, Status, ThreadId};
use crate::ports::ProviderError;

use super::error::UseCaseError;
use super::settle::Settling;
use super::threadbox::{Step, Threadbox};

/// Where a changed profile took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkApplied {
    /// The profile was already the thread's: nothing was written.
    Unchanged,
    /// The running (or paused) sandbox was changed in place; its files are kept.
    Live,
    /// Recorded; the thread's next sandbox is made with it (a reset, or a recreate). The
    /// current sandbox, if any, keeps the network it was made with.
    NextSandbox,
}

/// The outcome of a change: the record as stored and where the profile applies.
#[derive(Clone, Debug)]
pub struct NetworkChange {
    pub session: Session,
    pub applied: NetworkApplied,
}

impl Threadbox {
    /// Set the thread's network profile: one conditional write of the record with a `user`
    /// event (`from` = `to` = the current state, detail `network: ...`), then the provider is
    /// asked to apply it to the thread's sandbox, when it has one.
    #[tracing::instrument(skip(self, network), fields(thread_id = %thread_id))]
    pub async fn set_network(
        &self,
        thread_id: &ThreadId,
        network: NetworkProfile,
    ) -> Result<NetworkChange, UseCaseError> {
        let mut settling = Settling::start(&self.config);
        let session = loop {
            let current = self.load(thread_id).await?;
            if current.status.is_transitional() {
                // A worker holds a lease and will write the record conditionally on the version
                // it read: a change now would fence it out. Wait for it, as resolve does.
                settling.wait(&self.config, &current).await?;
                continue;
            }
            let mut next = current.clone();
            let Some(event) = next.set_network(network.clone(), self.change(None)) else {
                return Ok(NetworkChange {
                    session: current,
                    applied: NetworkApplied::Unchanged,
                });
            };
            if let Step::Moved(s) = self.write(next, current.version, vec![event]).await? {
                break s;
            }
        };
        let settled = matches!(session.status, Status::Active | Status::Paused);
        let applied = match session.sandbox_id.as_deref() {
            Some(id) if settled => match self.provider.set_network(id, &network).await {
                Ok(()) => NetworkApplied::Live,
                Err(ProviderError::Unsupported(why)) => {
                    tracing::debug!(%why, "network change applies to the next sandbox");
                    NetworkApplied::NextSandbox
                }
                Err(error) => {
                    // Recorded either way; the next sandbox is made with it.
                    tracing::warn!(%error, "live network change failed; it applies to the next sandbox");
                    NetworkApplied::NextSandbox
                }
            },
            _ => NetworkApplied::NextSandbox,
        };
        Ok(NetworkChange { session, applied })
    }
}
