//! The pure domain: no AWS, HTTP, clock or I/O. Everything here is plain data and rules
//! (`usage`: what a thread's sandbox used, from its lifecycle events, and what that costs;
//! `budget`: how much of that a thread or a scope may use; `warm_pool`: sandboxes made ahead of
//! need for new threads).

mod budget;
mod checkpoint;
mod egress_credentials;
mod image;
mod image_defaults;
pub mod network;
mod network_defaults;
mod scope;
mod session;
mod slack_scoped;
mod status;
mod thread_id;
mod time;
mod transition;
mod usage;
mod warm_pool;

pub use budget::{
    charged_key, creates_key, day_of, hour_of, scope_compute_key, vcpu_ms, BudgetExceeded,
    BudgetScope, Budgeted, Budgets, BUDGET_CHECK_SECS_VAR, DEFAULT_BUDGET_CHECK,
    SCOPE_COMPUTE_BUDGET_VAR, SCOPE_CREATES_PER_HOUR_VAR, THREAD_COMPUTE_BUDGET_VAR,
};
pub use checkpoint::{
    check_label, newest_first, Checkpoint, CheckpointCause, CheckpointId, CheckpointRetention,
    CHECKPOINTS_KEPT_VAR, CHECKPOINT_BYTES_VAR, DEFAULT_CHECKPOINTS_KEPT, DEFAULT_CHECKPOINT_BYTES,
    MAX_CHECKPOINTS_PER_THREAD, MAX_LABEL_CHARS,
};
pub use egress_credentials::{
    EgressCredentials, EgressCredentialsError, HeaderSecret, HostCredentials,
};
pub use image::{
    unknown_image, ImageInfo, ImageName, ImageSetup, SandboxUser, DEFAULT_SETUP_TIMEOUT_SECS,
    HOST_IMAGE, MAX_IMAGE_NAME_LEN,
};
pub use image_defaults::{ImageDefaults, ImageSettingError, MAX_IMAGE_SCOPES};
pub use network::{Allowlist, AllowlistError, NetworkProfile};
pub use network_defaults::{parse_profile, NetworkDefaults, NetworkSettingError};
pub use scope::{InvalidScope, ThreadScope, ANY_THREAD, MAX_SCOPE_THREADS};
pub use session::{
    Change, Hold, LifecycleEvent, Session, Timers, MAX_LABELS, MAX_LABEL_BYTES, MAX_SEQ,
    PROCESS_HOLD_PREFIX, THREAD_LABEL,
};
pub use status::{Cause, GonePolicy, Status};
pub use thread_id::{valid_member_id, InvalidThreadId, ThreadId, MAX_THREAD_ID_LEN};
pub use time::Millis;
pub use transition::{transition, Command, Observed, RejectKind, Rejected, Transition};
pub use usage::{
    GenerationUsage, Prices, Pricing, PricingError, PricingSettings, SandboxSize, StateTimes,
    Usage, UsageCost, Window, E2B_DEFAULT_SIZE, E2B_LIST_PRICES, PRICE_GIB_HOUR_VAR,
    PRICE_VCPU_HOUR_VAR, SANDBOX_MEMORY_GIB_VAR, SANDBOX_VCPUS_VAR,
};
pub use warm_pool::{
    image_pool_key, pool_key, MemberClaim, MemberState, PoolMember, MEMBER_CREATE_LEASE,
    WARM_POOL_VAR,
};
