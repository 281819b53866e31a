//! The provider's side of sandbox networks (`network` has the rest): connecting a sandbox as
//! it starts, disconnecting it as it goes, and changing its profile in place.

use super::bundle::Bundle;
use super::idmap::IdRange;
use super::{network, sandbox_ids, RuncProvider};
use threadbox_core::ports::{Allowlist, NetworkProfile, ProviderError};

impl RuncProvider {
    /// Connect a just-started networked sandbox to the host.
    pub(crate) async fn attach_network(
        &self,
        id: &str,
        saved: &network::Saved,
    ) -> Result<(), ProviderError> {
        let state = self.live_state(id).await?;
        self.networks.attach(&state, saved).await
    }

    /// Stop serving a sandbox's network and delete its host end, if it has one.
    pub(crate) async fn detach_network(&self, id: &str, bundle: &Bundle) {
        let link = network::Networks::saved(bundle.dir()).map(|saved| saved.link);
        self.networks.detach(id, link).await;
    }

    /// Write a networked sandbox's resolver, trust store and record into its bundle: on the
    /// link it has, or (a sandbox not networked yet) the one of its host id range `ids`.
    pub(crate) fn prepare_network(
        &self,
        bundle: &Bundle,
        ids: IdRange,
        allow: &Allowlist,
    ) -> Result<network::Saved, ProviderError> {
        let link = match network::Networks::saved(bundle.dir()) {
            Some(saved) => saved.link,
            None => network::Link::of_slot(ids.slot().unwrap_or(u32::MAX))?,
        };
        let saved = network::Saved {
            link,
            allow: allow.clone(),
        };
        self.networks
            .prepare_bundle(bundle.dir(), &saved)
            .map_err(|e| ProviderError::Internal(format!("cannot write the network: {e}")))?;
        Ok(saved)
    }

    /// In place, keeping every file and process: the sandbox's network namespace lives as long
    /// as it does, so a networked profile (re)connects it (a fresh link with the new allowlist,
    /// rules and proxy) and restricted disconnects it (the link is deleted, leaving loopback).
    /// Running or paused alike: nothing here needs the sandbox's processes to run.
    pub(crate) async fn change_network(
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
                let saved = self.prepare_network(&bundle, sandbox_ids(&bundle), allow)?;
                self.networks.attach(&state, &saved).await?;
            }
        }
        tracing::info!(sandbox_id, network = %profile.describe(), "sandbox network changed");
        Ok(())
    }
}
