//! What a caller asks of a hold, and a hold about to be written: the values `resolve` (which
//! can take a hold as it brings the sandbox up) and `holds` share.

use std::time::Duration;

use crate::domain::{Hold, Millis};

/// A request to keep a thread's sandbox awake for `ttl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldRequest {
    pub owner: String,
    pub ttl: Duration,
}

impl HoldRequest {
    pub fn new(owner: impl Into<String>, ttl: Duration) -> Self {
        Self {
            owner: owner.into(),
            ttl,
        }
    }

    pub(crate) fn pending(&self) -> PendingHold {
        PendingHold {
            hold_id: uuid::Uuid::new_v4().to_string(),
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
