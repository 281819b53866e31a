//! What a caller asks of a hold, and a hold about to be written: the values `resolve` (which
//! can take a hold as it brings the sandbox up) and `holds` share.

use std::time::Duration;

use crate::domain::{Hold, Millis};

/// A request to keep a thread's sandbox awake for `ttl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldRequest {
    pub owner: String,
    pub ttl: Duration,
    /// The hold's id when the caller must find it again by name (a background process's);
    /// otherwise a fresh one is made.
    pub hold_id: Option<String>,
}

impl HoldRequest {
    pub fn new(owner: impl Into<String>, ttl: Duration) -> Self {
        Self {
            owner: owner.into(),
            ttl,
            hold_id: None,
        }
    }

    /// A hold with a known id: acquiring it again renews it rather than adding another.
    pub fn named(hold_id: impl Into<String>, owner: impl Into<String>, ttl: Duration) -> Self {
        Self {
            hold_id: Some(hold_id.into()),
            ..Self::new(owner, ttl)
        }
    }

    pub(crate) fn pending(&self) -> PendingHold {
        PendingHold {
            hold_id: self
                .hold_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            request: self.clone(),
        }
    }
}

/// A hold with its id chosen, whose expiry is fixed when it is written.
#[derive(Clone, Debug)]
pub(crate) struct PendingHold {
    pub(crate) hold_id: String,
    request: HoldRequest,
}

impl PendingHold {
    pub(crate) fn at(&self, now: Millis) -> Hold {
        Hold {
            hold_id: self.hold_id.clone(),
            owner: self.request.owner.clone(),
            expires_at: now.plus(self.request.ttl),
        }
    }
}
