//! The use cases' settings in a Lambda function, read once at start-up.

use std::path::PathBuf;
use std::time::Duration;

use super::env::{Env, SetupError};
use threadbox_aws::dynamo::DynamoConfig;
use threadbox_aws::sqs::SqsQueueUrls;
use threadbox_core::config::ConfigError;
use threadbox_core::domain::{
    parse_profile, Budgets, CheckpointRetention, ImageDefaults, ImageName, NetworkDefaults,
    NetworkProfile, Pricing, PricingSettings, SandboxSize, Timers, CHECKPOINTS_KEPT_VAR,
    CHECKPOINT_BYTES_VAR, DEFAULT_CHECKPOINTS_KEPT, DEFAULT_CHECKPOINT_BYTES,
    MAX_CHECKPOINTS_PER_THREAD, WARM_POOL_VAR,
};
use threadbox_core::usecases::{Config, DEFAULT_POOL_MAX_AGE, MAX_POOL_SIZE};
use threadbox_providers::ProviderConfig;

/// How long a caller waits for another worker's transition of its thread on Lambda before
/// answering 409 `busy` (`usecases::settle`): well inside API Gateway's 30 s, so the client gets
/// threadbox's answer with its `Retry-After`, never the gateway's bare 503.
pub const LAMBDA_SETTLE_WAIT: Duration = Duration::from_secs(10);

pub const LIFECYCLE_QUEUE_URL_VAR: &str = "THREADBOX_LIFECYCLE_QUEUE_URL";
pub const LIFECYCLE_DLQ_URL_VAR: &str = "THREADBOX_LIFECYCLE_DLQ_URL";
pub const IDLE_PAUSE_VAR: &str = "THREADBOX_IDLE_PAUSE_SECS";
pub const RETENTION_VAR: &str = "THREADBOX_RETENTION_SECS";
pub const RUNC_STATE_DIR_VAR: &str = "THREADBOX_RUNC_STATE_DIR";
/// The network profile of new threads: `restricted` (the default), `networked` or
/// `networked:ENTRY,...`.
pub const NETWORK_VAR: &str = "THREADBOX_NETWORK";
/// Per Slack workspace or channel: `T0123=networked:pypi.org;T0123/C0456=restricted`.
pub const SLACK_NETWORK_VAR: &str = "THREADBOX_SLACK_NETWORK";
/// The image of new threads whose creator names none (`host` unless set).
pub const DEFAULT_IMAGE_VAR: &str = "THREADBOX_DEFAULT_IMAGE";
/// Per Slack workspace or channel: `T0123=python;T0123/C0456=node`.
pub const SLACK_IMAGE_VAR: &str = "THREADBOX_SLACK_IMAGE";
/// Seconds an unclaimed warm pool member is kept before it is replaced.
pub const WARM_POOL_MAX_AGE_VAR: &str = "THREADBOX_WARM_POOL_MAX_AGE_SECS";
/// Whether the Slack worker takes a checkpoint before each code block (`true`, the default, or
/// `false`), as `threadbox dev --checkpoint-turns` says.
pub const CHECKPOINT_TURNS_VAR: &str = "THREADBOX_CHECKPOINT_TURNS";

/// Where the runc provider keeps its state when the environment does not say. Only the local
/// loop runs runc, and /tmp is the one writable place a Lambda sandbox has.
const DEFAULT_RUNC_STATE_DIR: &str = "/tmp/threadbox-runc";
/// A month, as the longest idle pause; far longer only hides a misplaced unit.
const MAX_IDLE_PAUSE_SECS: u64 = 30 * 24 * 3600;
/// A year, as the longest retention.
const MAX_RETENTION_SECS: u64 = 365 * 24 * 3600;
/// A day, as the longest a warm pool member is kept: E2B bills a member for its running time.
const MAX_POOL_MAX_AGE_SECS: u64 = 24 * 3600;
/// The largest sandbox size or price figure taken; more is a misplaced unit.
const MAX_PRICING_FIGURE: f64 = 100_000.0;

#[derive(Clone, Debug)]
pub struct Settings {
    pub dynamo: DynamoConfig,
    pub lifecycle_queue: SqsQueueUrls,
    /// Its `Debug` redacts the E2B key.
    pub provider: ProviderConfig,
    pub runc_state_dir: PathBuf,
    pub use_cases: Config,
    /// Warm pool members per profile (`THREADBOX_WARM_POOL`, default 0: members on E2B cost
    /// running time) and how long one is kept.
    pub warm_pool: usize,
    pub warm_pool_max_age: Duration,
    /// How many checkpoints a thread keeps, and the bytes they may hold together
    /// (`THREADBOX_CHECKPOINTS_KEPT`, default 20; `THREADBOX_CHECKPOINT_BYTES`, a size like
    /// `2GiB`, the default).
    pub checkpoints: CheckpointRetention,
}

impl Settings {
    pub fn lifecycle_queue_from_env(env: &Env) -> Result<SqsQueueUrls, SetupError> {
        Ok(SqsQueueUrls {
            queue_url: env.required(LIFECYCLE_QUEUE_URL_VAR)?,
            dead_letter_url: env.required(LIFECYCLE_DLQ_URL_VAR)?,
        })
    }

    pub fn from_env(env: &Env) -> Result<Self, SetupError> {
        let dynamo = DynamoConfig::from_env(env)?;
        let lifecycle_queue = Self::lifecycle_queue_from_env(env)?;
        let provider = ProviderConfig::from_env(env)?;
        let runc_state_dir = PathBuf::from(
            env.get(RUNC_STATE_DIR_VAR)
                .unwrap_or_else(|| DEFAULT_RUNC_STATE_DIR.to_owned()),
        );
        let defaults = Timers::default();
        let idle_pause = env.whole_number(
            IDLE_PAUSE_VAR,
            defaults.idle_pause.as_secs(),
            1..=MAX_IDLE_PAUSE_SECS,
        )?;
        let retention = env.whole_number(
            RETENTION_VAR,
            defaults.retention.as_secs(),
            1..=MAX_RETENTION_SECS,
        )?;
        if idle_pause >= retention {
            return Err(ConfigError::Invalid {
                variable: IDLE_PAUSE_VAR,
                reason: format!(
                    "{idle_pause} s must be shorter than {RETENTION_VAR} ({retention} s): a \
                     sandbox is paused before it is destroyed"
                ),
            }
            .into());
        }
        let use_cases = Config {
            timers: Timers {
                idle_pause: Duration::from_secs(idle_pause),
                retention: Duration::from_secs(retention),
                ..defaults
            },
            pricing: pricing_from_env(env, &provider)?,
            network: network_from_env(env)?,
            images: images_from_env(env, &provider)?,
            budgets: Budgets::read(|name, default, range| env.whole_number(name, default, range))?,
            settle_wait: LAMBDA_SETTLE_WAIT,
            ..Config::default()
        };
        let warm_pool = env.whole_number(WARM_POOL_VAR, 0, 0..=MAX_POOL_SIZE as u64)? as usize;
        let warm_pool_max_age = Duration::from_secs(env.whole_number(
            WARM_POOL_MAX_AGE_VAR,
            DEFAULT_POOL_MAX_AGE.as_secs(),
            60..=MAX_POOL_MAX_AGE_SECS,
        )?);
        Ok(Self {
            dynamo,
            lifecycle_queue,
            provider,
            runc_state_dir,
            use_cases,
            warm_pool,
            warm_pool_max_age,
            checkpoints: checkpoints_from_env(env)?,
        })
    }
}

/// The checkpoint limits, read as `threadbox dev` reads its flags' variables.
pub fn checkpoints_from_env(env: &Env) -> Result<CheckpointRetention, ConfigError> {
    let keep = env.whole_number(
        CHECKPOINTS_KEPT_VAR,
        u64::from(DEFAULT_CHECKPOINTS_KEPT),
        1..=u64::from(MAX_CHECKPOINTS_PER_THREAD),
    )? as u32;
    let max_bytes = match env.get(CHECKPOINT_BYTES_VAR) {
        None => DEFAULT_CHECKPOINT_BYTES,
        Some(raw) => match raw.parse::<bytesize::ByteSize>() {
            Ok(size) if size.as_u64() > 0 => size.as_u64(),
            _ => {
                return Err(ConfigError::Invalid {
                    variable: CHECKPOINT_BYTES_VAR,
                    reason: format!("{raw:?} is not a size above nothing, like 2GiB or 500MiB"),
                })
            }
        },
    };
    // The count is in range already: what is left to refuse is a cap under 1 MiB.
    CheckpointRetention::new(keep, max_bytes).map_err(|reason| ConfigError::Invalid {
        variable: CHECKPOINT_BYTES_VAR,
        reason,
    })
}

/// Whether the Slack worker checkpoints each code block (`THREADBOX_CHECKPOINT_TURNS`: `true`,
/// the default, or `false`).
pub fn checkpoint_turns(env: &Env) -> Result<bool, ConfigError> {
    match env.get(CHECKPOINT_TURNS_VAR).as_deref() {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(ConfigError::Invalid {
            variable: CHECKPOINT_TURNS_VAR,
            reason: format!("expected true or false, got {other:?}"),
        }),
    }
}

/// The profiles new threads get: `THREADBOX_NETWORK` (default `restricted`) and the per Slack
/// scope `THREADBOX_SLACK_NETWORK`. An empty variable is the same as an unset one, since
/// CloudFormation passes an empty parameter as "".
pub fn network_from_env(env: &Env) -> Result<NetworkDefaults, ConfigError> {
    let invalid = |variable: &'static str| {
        move |e: threadbox_core::domain::NetworkSettingError| ConfigError::Invalid {
            variable,
            reason: e.to_string(),
        }
    };
    let default = match env.get(NETWORK_VAR).filter(|v| !v.trim().is_empty()) {
        Some(value) => parse_profile(&value).map_err(invalid(NETWORK_VAR))?,
        None => NetworkProfile::Restricted,
    };
    NetworkDefaults::new(default)
        .with_slack_setting(&env.get(SLACK_NETWORK_VAR).unwrap_or_default())
        .map_err(invalid(SLACK_NETWORK_VAR))
}

/// The images new threads get: `THREADBOX_DEFAULT_IMAGE` (default `host`) and the per Slack
/// scope `THREADBOX_SLACK_IMAGE`, each naming an image the provider has (on E2B, `host` or a
/// name `THREADBOX_E2B_TEMPLATES` maps to a template). Empty is unset, as for the network.
pub fn images_from_env(env: &Env, provider: &ProviderConfig) -> Result<ImageDefaults, ConfigError> {
    let default = match env.get(DEFAULT_IMAGE_VAR).filter(|v| !v.trim().is_empty()) {
        Some(value) => ImageName::parse(value.trim()).map_err(|reason| ConfigError::Invalid {
            variable: DEFAULT_IMAGE_VAR,
            reason,
        })?,
        None => ImageName::host(),
    };
    let defaults = ImageDefaults::new(default)
        .with_slack_setting(&env.get(SLACK_IMAGE_VAR).unwrap_or_default())
        .map_err(|e| ConfigError::Invalid {
            variable: SLACK_IMAGE_VAR,
            reason: e.to_string(),
        })?;
    let has = |image: &ImageName| match provider {
        ProviderConfig::E2b(config) => config.template_for(image).is_some(),
        // The local loop's runc registers no images.
        ProviderConfig::Runc => image.is_host(),
    };
    for image in defaults.images() {
        if !has(image) {
            let variable = if image == &defaults.default {
                DEFAULT_IMAGE_VAR
            } else {
                SLACK_IMAGE_VAR
            };
            return Err(ConfigError::Invalid {
                variable,
                reason: format!(
                    "no image is registered as {:?} (on E2B, {} maps names to templates)",
                    image.as_str(),
                    threadbox_providers::E2B_TEMPLATES_VAR
                ),
            });
        }
    }
    Ok(defaults)
}

/// What a thread's time is priced at: the provider's defaults (E2B's default sandbox at its
/// list prices; runc's default limits, unpriced) with `THREADBOX_SANDBOX_VCPUS`,
/// `THREADBOX_SANDBOX_MEMORY_GIB`, `THREADBOX_PRICE_VCPU_HOUR`, `THREADBOX_PRICE_GIB_HOUR` and
/// `THREADBOX_PRICE_STORAGE_GIB_MONTH` laid over them.
pub fn pricing_from_env(env: &Env, provider: &ProviderConfig) -> Result<Pricing, ConfigError> {
    pricing_for_provider(env, provider.name())
}

/// [`pricing_from_env`] for a function that only needs to know which provider runs the
/// sandboxes (`runc` or `e2b`, as `THREADBOX_PROVIDER` says), not its settings: the fan-out
/// prices the Slack status card without holding the E2B key.
pub fn pricing_for_provider(env: &Env, provider: &str) -> Result<Pricing, ConfigError> {
    let defaults = match provider {
        "e2b" => Pricing::E2B_DEFAULT,
        _ => {
            let limits = threadbox_runc::SandboxLimits::default();
            Pricing::unpriced(SandboxSize {
                vcpus: f64::from(limits.cpu_millicores) / 1000.0,
                memory_gib: limits.memory_bytes as f64 / f64::from(1u32 << 30),
            })
        }
    };
    let settings = PricingSettings::read(|name| env.decimal(name, 0.0..=MAX_PRICING_FIGURE))?;
    defaults
        .with_settings(settings)
        .map_err(|e| ConfigError::Invalid {
            variable: e.variable,
            reason: e.reason,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: [(&str, &str); 4] = [
        ("THREADBOX_SESSIONS_TABLE", "s"),
        ("THREADBOX_EVENTS_TABLE", "e"),
        (LIFECYCLE_QUEUE_URL_VAR, "https://sqs/q.fifo"),
        (LIFECYCLE_DLQ_URL_VAR, "https://sqs/q-dlq.fifo"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Result<Settings, SetupError> {
        let mut pairs = BASE.to_vec();
        pairs.extend_from_slice(extra);
        Settings::from_env(&Env::from_pairs(&pairs))
    }

    #[test]
    fn defaults_follow_the_design() {
        let settings = with(&[]).unwrap();
        assert_eq!(settings.dynamo, DynamoConfig::new("s", "e"));
        assert_eq!(settings.lifecycle_queue.queue_url, "https://sqs/q.fifo");
        assert_eq!(settings.provider.name(), "runc");
        assert_eq!(settings.use_cases.timers, Timers::default());
        // A busy thread's wait ends well before API Gateway's 30 s (the function's timeout too).
        assert_eq!(settings.use_cases.settle_wait, Duration::from_secs(10));
        assert_eq!(
            settings.use_cases.settle_poll_max,
            Duration::from_millis(500)
        );
        assert_eq!(
            settings.runc_state_dir,
            PathBuf::from(DEFAULT_RUNC_STATE_DIR)
        );
    }

    #[test]
    fn every_missing_or_bad_variable_is_named() {
        for missing in BASE.map(|(name, _)| name) {
            let pairs: Vec<_> = BASE.into_iter().filter(|(n, _)| *n != missing).collect();
            let err = Settings::from_env(&Env::from_pairs(&pairs)).unwrap_err();
            assert!(err.to_string().contains(missing), "{missing}: {err}");
        }
        let err = with(&[(IDLE_PAUSE_VAR, "10m")]).unwrap_err().to_string();
        assert!(err.contains(IDLE_PAUSE_VAR), "{err}");
        let err = with(&[(IDLE_PAUSE_VAR, "600"), (RETENTION_VAR, "600")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be shorter than"), "{err}");
        let err = with(&[("THREADBOX_PROVIDER", "docker")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("THREADBOX_PROVIDER"), "{err}");
    }

    #[test]
    fn image_defaults_name_templates_the_provider_has() {
        let e2b = [
            ("THREADBOX_PROVIDER", "e2b"),
            ("E2B_API_KEY", "e2b_0123456789"),
            (threadbox_providers::E2B_TEMPLATES_VAR, "python=tpl-py"),
        ];
        let unset = with(&e2b).unwrap().use_cases.images;
        assert_eq!(unset, ImageDefaults::default());
        let mut set = e2b.to_vec();
        set.extend([(DEFAULT_IMAGE_VAR, "python"), (SLACK_IMAGE_VAR, "T1=host")]);
        let images = with(&set).unwrap().use_cases.images;
        assert_eq!(images.describe(), "default python; Slack T1: host");
        for (variable, value, says) in [
            (
                DEFAULT_IMAGE_VAR,
                "ruby",
                "no image is registered as \"ruby\"",
            ),
            (DEFAULT_IMAGE_VAR, "Ruby", "is not an image name"),
            (
                SLACK_IMAGE_VAR,
                "T1=ruby",
                "no image is registered as \"ruby\"",
            ),
            (SLACK_IMAGE_VAR, "T1", "expected TEAM=IMAGE"),
        ] {
            let mut bad = e2b.to_vec();
            bad.push((variable, value));
            let err = with(&bad).unwrap_err().to_string();
            assert!(
                err.contains(variable) && err.contains(says),
                "{value}: {err}"
            );
        }
        // The local loop's runc has host only.
        let err = with(&[(DEFAULT_IMAGE_VAR, "python")])
            .unwrap_err()
            .to_string();
        assert!(err.contains(DEFAULT_IMAGE_VAR), "{err}");
    }

    #[test]
    fn network_defaults_come_from_two_variables() {
        let unset = with(&[]).unwrap().use_cases.network;
        assert_eq!(unset, NetworkDefaults::default());
        let empty = with(&[(NETWORK_VAR, ""), (SLACK_NETWORK_VAR, "")]).unwrap();
        assert_eq!(empty.use_cases.network, NetworkDefaults::default());
        let set = with(&[
            (NETWORK_VAR, "networked:pypi.org"),
            (SLACK_NETWORK_VAR, "T1/C1=restricted"),
        ])
        .unwrap()
        .use_cases
        .network;
        assert_eq!(
            set.describe(),
            "networked (allow: pypi.org); Slack T1/C1: restricted"
        );
        let err = with(&[(NETWORK_VAR, "networked:10.0.0.0/33")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(NETWORK_VAR) && err.contains("entry 1"),
            "{err}"
        );
        let err = with(&[(SLACK_NETWORK_VAR, "T1=wide-open")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(SLACK_NETWORK_VAR) && err.contains("Slack scope T1"),
            "{err}"
        );
    }

    #[test]
    fn pricing_follows_the_provider_and_its_variables() {
        use threadbox_core::domain::{E2B_LIST_PRICES, PRICE_GIB_HOUR_VAR, PRICE_VCPU_HOUR_VAR};
        let runc = with(&[]).unwrap().use_cases.pricing;
        assert_eq!(runc.prices, None, "nobody bills a local container");
        assert_eq!(runc.size.map(|s| (s.vcpus, s.memory_gib)), Some((1.0, 0.5)));
        let e2b = with(&[("THREADBOX_PROVIDER", "e2b"), ("E2B_API_KEY", "k")])
            .unwrap()
            .use_cases
            .pricing;
        assert_eq!(e2b.prices, Some(E2B_LIST_PRICES));
        let priced = with(&[(PRICE_VCPU_HOUR_VAR, "0.05"), (PRICE_GIB_HOUR_VAR, "0.01")])
            .unwrap()
            .use_cases
            .pricing;
        assert_eq!(priced.prices.map(|p| p.usd_per_vcpu_hour), Some(0.05));
        let err = with(&[(PRICE_VCPU_HOUR_VAR, "0.05")])
            .unwrap_err()
            .to_string();
        assert!(err.contains(PRICE_GIB_HOUR_VAR), "{err}");
        let err = with(&[(PRICE_GIB_HOUR_VAR, "cheap")])
            .unwrap_err()
            .to_string();
        assert!(err.contains(PRICE_GIB_HOUR_VAR), "{err}");
    }

    #[test]
    fn checkpoint_limits_and_turns_read_as_threadbox_dev_reads_them() {
        let defaults = with(&[]).unwrap();
        assert_eq!(defaults.checkpoints, CheckpointRetention::default());
        assert!(checkpoint_turns(&Env::from_pairs(&[])).unwrap());
        let set = with(&[
            (CHECKPOINTS_KEPT_VAR, "5"),
            (CHECKPOINT_BYTES_VAR, "500MiB"),
        ])
        .unwrap();
        assert_eq!(
            set.checkpoints,
            CheckpointRetention::new(5, 500 << 20).unwrap()
        );
        let off = Env::from_pairs(&[(CHECKPOINT_TURNS_VAR, "false")]);
        assert!(!checkpoint_turns(&off).unwrap());
        for (var, bad) in [
            (CHECKPOINTS_KEPT_VAR, "0"),
            (CHECKPOINTS_KEPT_VAR, "101"),
            (CHECKPOINT_BYTES_VAR, "lots"),
            (CHECKPOINT_BYTES_VAR, "0"),
            (CHECKPOINT_BYTES_VAR, "1KiB"),
        ] {
            let err = with(&[(var, bad)]).unwrap_err().to_string();
            assert!(err.contains(var), "{var}={bad}: {err}");
        }
        let err = checkpoint_turns(&Env::from_pairs(&[(CHECKPOINT_TURNS_VAR, "yes")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(CHECKPOINT_TURNS_VAR), "{err}");
    }

    #[test]
    fn the_warm_pool_is_off_unless_set_and_bounded() {
        let off = with(&[]).unwrap();
        assert_eq!((off.warm_pool, off.warm_pool_max_age.as_secs()), (0, 1800));
        let set = with(&[(WARM_POOL_VAR, "3"), (WARM_POOL_MAX_AGE_VAR, "600")]).unwrap();
        assert_eq!((set.warm_pool, set.warm_pool_max_age.as_secs()), (3, 600));
        for (var, bad) in [(WARM_POOL_VAR, "65"), (WARM_POOL_MAX_AGE_VAR, "5")] {
            let err = with(&[(var, bad)]).unwrap_err().to_string();
            assert!(err.contains(var), "{err}");
        }
    }

    #[test]
    fn budgets_are_off_unless_set_and_zero_is_off() {
        use threadbox_core::domain::{SCOPE_CREATES_PER_HOUR_VAR, THREAD_COMPUTE_BUDGET_VAR};
        assert_eq!(with(&[]).unwrap().use_cases.budgets, Budgets::default());
        // What CloudFormation passes for the parameters' defaults.
        let zero = with(&[(THREAD_COMPUTE_BUDGET_VAR, "0")]).unwrap();
        assert_eq!(zero.use_cases.budgets, Budgets::default());
        let set = with(&[(SCOPE_CREATES_PER_HOUR_VAR, "20")]).unwrap();
        assert_eq!(set.use_cases.budgets.scope_creates_per_hour, Some(20));
        let err = with(&[(THREAD_COMPUTE_BUDGET_VAR, "2h")])
            .unwrap_err()
            .to_string();
        assert!(err.contains(THREAD_COMPUTE_BUDGET_VAR), "{err}");
    }

    #[test]
    fn e2b_settings_are_read_and_the_key_stays_out_of_debug() {
        let settings = with(&[
            ("THREADBOX_PROVIDER", "e2b"),
            ("E2B_API_KEY", "e2b_secret_value_123"),
            (IDLE_PAUSE_VAR, "60"),
            (RETENTION_VAR, "3600"),
        ])
        .unwrap();
        assert_eq!(settings.provider.name(), "e2b");
        assert_eq!(
            settings.use_cases.timers.idle_pause,
            Duration::from_secs(60)
        );
        let shown = format!("{settings:?}");
        assert!(!shown.contains("e2b_secret_value_123"), "{shown}");
        let err = with(&[("THREADBOX_PROVIDER", "e2b")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("E2B_API_KEY"), "{err}");
    }
}
