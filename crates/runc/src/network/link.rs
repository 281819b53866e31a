//! A sandbox's link to the host: the veth pair's addresses (two per host id slot in
//! 198.18.0.0/15, the benchmarking block no allowlist opens) and the names the host's table
//! matches. Below both the link's set-up (`networks`) and the packet filters (`filter`).

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use threadbox_core::ports::ProviderError;

/// The host's links to its sandboxes: 198.18.0.0/15, two addresses per slot.
const LINK_BASE: u32 = 0xC612_0000; // 198.18.0.0
pub(super) const LINK_NET: &str = "198.18.0.0/15";
const LINK_SLOTS: u32 = 1 << 16;
/// The host ends' name prefix; the host table matches it.
pub(super) const HOST_IF_PREFIX: &str = "tbh";
/// The host's table (one for every provider on the host: its rules hold no provider's state).
pub(super) const HOST_TABLE: &str = "threadbox";

/// A sandbox's link: its slot, the host end and the sandbox end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Link {
    pub slot: u32,
}

impl Link {
    pub fn of_slot(slot: u32) -> Result<Self, ProviderError> {
        if slot >= LINK_SLOTS {
            return Err(ProviderError::Unavailable(format!(
                "host id slot {slot} has no network link address (at most {LINK_SLOTS})"
            )));
        }
        Ok(Self { slot })
    }
    pub fn host(self) -> Ipv4Addr {
        Ipv4Addr::from(LINK_BASE + self.slot * 2)
    }
    pub fn sandbox(self) -> Ipv4Addr {
        Ipv4Addr::from(LINK_BASE + self.slot * 2 + 1)
    }
    pub fn host_if(self) -> String {
        format!("{HOST_IF_PREFIX}{}", self.slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_unique_per_slot() {
        let a = Link::of_slot(0).unwrap();
        assert_eq!(a.host(), Ipv4Addr::new(198, 18, 0, 0));
        assert_eq!(a.sandbox(), Ipv4Addr::new(198, 18, 0, 1));
        let b = Link::of_slot(65535).unwrap();
        assert_eq!(b.sandbox(), Ipv4Addr::new(198, 19, 255, 255));
        assert!(Link::of_slot(65536).is_err());
        assert_eq!(b.host_if(), "tbh65535");
    }
}
