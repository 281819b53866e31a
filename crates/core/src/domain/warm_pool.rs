//! The warm pool's records: sandboxes created ahead of need, so a new thread's first command does
//! not wait for a create.
//!
//! A member belongs to no thread. Its sandbox is tagged with the member's own id
//! ([`ThreadId::pool_member`]) so reconciliation can tell it from an orphan, and a new thread
//! takes it over in the one conditional write that also binds it to the thread: the member goes
//! from `ready` to `claimed` only if it is still `ready`, and the thread's record from `creating`
//! to `active` only at the version its creator read. Two threads can never both win one member.
//! The `claimed` record stays while the sandbox lives, naming the thread and generation that own
//! it, because the provider's tag (E2B cannot change metadata) still says "pool member".

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::image::ImageName;
use super::network::NetworkProfile;
#[cfg(test)]
use super::thread_id::valid_member_id;
use super::thread_id::ThreadId;
use super::time::Millis;

/// Members kept ready per profile (`threadbox dev --warm-pool`, the Lambda functions' env).
pub const WARM_POOL_VAR: &str = "THREADBOX_WARM_POOL";

/// The longest a member may stay `creating` before the janitor counts its creator as dead.
pub const MEMBER_CREATE_LEASE: Duration = Duration::from_secs(120);

/// Which pool members of a profile and an image go to: the profile's [`pool_key`] for the host
/// image (the keys members had before images existed), else that key, `@` and the image's name
/// (`restricted@python`). A thread takes only a member of its own profile and image.
pub fn image_pool_key(network: &NetworkProfile, image: &ImageName) -> String {
    let key = pool_key(network);
    if image.is_host() {
        key
    } else {
        format!("{key}@{image}")
    }
}

/// Which pool a profile's members of the host image go to: `restricted`, `networked`, or `allow-` and a stable
/// 64-bit FNV-1a hash of the allowlist, so the key is short whatever the list holds. Two lists
/// that collide share a key but never a member: a claim also checks the profile itself.
pub fn pool_key(network: &NetworkProfile) -> String {
    match network {
        NetworkProfile::Restricted => "restricted".to_owned(),
        NetworkProfile::Networked { allow } if allow.is_everything_public() => {
            "networked".to_owned()
        }
        NetworkProfile::Networked { allow } => {
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for byte in allow.to_strings().join("\n").bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
            format!("allow-{hash:016x}")
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Recorded before its sandbox is asked for, so a sandbox with this tag is never an orphan
    /// while its creator works (within [`MEMBER_CREATE_LEASE`]).
    Creating,
    /// Made, clean, and free for the next new thread of its profile.
    Ready,
    /// Bound to a thread; kept so reconciliation knows whose the sandbox now is.
    Claimed,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Creating => "creating",
            MemberState::Ready => "ready",
            MemberState::Claimed => "claimed",
        }
    }
}

/// The thread (and generation) a claimed member now belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberClaim {
    pub thread_id: ThreadId,
    pub generation: u64,
    pub at: Millis,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolMember {
    /// A random id (32 hex digits); the sandbox's tag is [`ThreadId::pool_member`] of it.
    pub member_id: String,
    /// [`image_pool_key`] of `network` and `image`.
    pub pool: String,
    pub network: NetworkProfile,
    /// The image its sandbox was made from; records from before images read as `host`.
    #[serde(default)]
    pub image: ImageName,
    pub state: MemberState,
    pub sandbox_id: Option<String>,
    pub provider_session_id: Option<String>,
    pub created_at: Millis,
    pub claimed: Option<MemberClaim>,
}

impl PoolMember {
    /// A member of the host image about to be created, with a fresh id.
    pub fn creating(network: NetworkProfile, now: Millis) -> Self {
        Self::creating_from(network, ImageName::host(), now)
    }

    /// A member of `image` about to be created, with a fresh id.
    pub fn creating_from(network: NetworkProfile, image: ImageName, now: Millis) -> Self {
        Self {
            member_id: uuid::Uuid::new_v4().simple().to_string(),
            pool: image_pool_key(&network, &image),
            network,
            image,
            state: MemberState::Creating,
            sandbox_id: None,
            provider_session_id: None,
            created_at: now,
            claimed: None,
        }
    }

    /// The tag its sandbox carries in place of a thread.
    pub fn tag(&self) -> ThreadId {
        ThreadId::pool_member(&self.member_id)
    }

    /// A `creating` member whose creator has had longer than the lease.
    pub fn create_lease_expired(&self, now: Millis) -> bool {
        self.state == MemberState::Creating && now.since(self.created_at) >= MEMBER_CREATE_LEASE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Allowlist;

    #[test]
    fn each_profile_has_its_own_short_key() {
        let allow = |hosts: &[&str]| NetworkProfile::Networked {
            allow: Allowlist::parse(hosts.iter().map(|h| h.to_string())).unwrap(),
        };
        assert_eq!(pool_key(&NetworkProfile::Restricted), "restricted");
        assert_eq!(pool_key(&allow(&[])), "networked");
        let one = pool_key(&allow(&["pypi.org"]));
        assert!(one.starts_with("allow-") && one.len() == 22, "{one}");
        assert_eq!(one, pool_key(&allow(&["pypi.org"])), "stable");
        assert_ne!(one, pool_key(&allow(&["pypi.org", "github.com"])));
        let host = ImageName::host();
        let py = ImageName::parse("python").unwrap();
        assert_eq!(
            image_pool_key(&NetworkProfile::Restricted, &host),
            "restricted"
        );
        assert_eq!(
            image_pool_key(&NetworkProfile::Restricted, &py),
            "restricted@python"
        );
        assert_eq!(
            image_pool_key(&allow(&["pypi.org"]), &py),
            format!("{one}@python")
        );
    }

    #[test]
    fn a_new_member_is_tagged_with_its_own_reserved_id() {
        let member = PoolMember::creating(NetworkProfile::Restricted, Millis(5));
        assert!(valid_member_id(&member.member_id));
        assert_eq!(
            member.tag().pool_member_id(),
            Some(member.member_id.as_str())
        );
        assert!(!member.create_lease_expired(Millis(5)));
        assert!(member.create_lease_expired(Millis(5 + 120_000)));
    }
}
