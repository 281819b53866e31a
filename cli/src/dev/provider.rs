//! Which sandbox provider `threadbox dev` runs on: `--provider`, else `THREADBOX_PROVIDER`, else
//! runc. The choice and its settings are the shared crate's (`providers`), as for the Lambda
//! functions; this only adds the flag and remembers where the choice came from, for the banner.

use std::collections::BTreeMap;

use anyhow::Context;
use threadbox_core::config::Env;
use threadbox_core::domain::{Pricing, PricingSettings, SandboxSize};
use threadbox_providers::{ProviderConfig, PROVIDER_VAR};
use threadbox_runc::SandboxLimits;

/// The provider chosen, with its settings (whose `Debug` redacts the key), and what chose it.
#[derive(Debug)]
pub struct ChosenProvider {
    pub config: ProviderConfig,
    /// "--provider", "THREADBOX_PROVIDER" or "the default".
    pub source: &'static str,
}

impl ChosenProvider {
    pub fn is_runc(&self) -> bool {
        matches!(self.config, ProviderConfig::Runc)
    }

    /// What a thread's time is priced at, as the Lambda functions read it: runc's size from the
    /// limits it runs with and no prices, E2B's default sandbox at its list prices; the
    /// `THREADBOX_SANDBOX_*` and `THREADBOX_PRICE_*` variables override either.
    pub fn pricing(&self, limits: &SandboxLimits) -> anyhow::Result<Pricing> {
        pricing_from(&self.config, limits, &Env::process())
    }
}

/// The largest sandbox size or price figure taken; more is a misplaced unit.
const MAX_PRICING_FIGURE: f64 = 100_000.0;

fn pricing_from(
    config: &ProviderConfig,
    limits: &SandboxLimits,
    env: &Env,
) -> anyhow::Result<Pricing> {
    let defaults = match config {
        ProviderConfig::Runc => Pricing::unpriced(SandboxSize {
            vcpus: f64::from(limits.cpu_millicores) / 1000.0,
            memory_gib: limits.memory_bytes as f64 / f64::from(1u32 << 30),
        }),
        ProviderConfig::E2b(_) => Pricing::E2B_DEFAULT,
    };
    let settings = PricingSettings::read(|name| env.decimal(name, 0.0..=MAX_PRICING_FIGURE))?;
    defaults
        .with_settings(settings)
        .map_err(|e| anyhow::anyhow!("{} is invalid: {}", e.variable, e.reason))
}

/// Read the choice: the flag wins over the variable; each provider then reads its own settings
/// from the environment (E2B: `E2B_API_KEY`, `E2B_TEMPLATE`, ...).
pub fn choose(flag: Option<&str>) -> anyhow::Result<ChosenProvider> {
    choose_from(flag, Env::process())
}

fn choose_from(flag: Option<&str>, env: Env) -> anyhow::Result<ChosenProvider> {
    let source = match flag {
        Some(_) => "--provider",
        None if env.get(PROVIDER_VAR).is_some() => PROVIDER_VAR,
        None => "the default",
    };
    let env = match flag {
        Some(flag) => env.overlay(BTreeMap::from([(PROVIDER_VAR, flag.to_owned())])),
        None => env,
    };
    let config = ProviderConfig::from_env(&env)
        .with_context(|| format!("choosing the sandbox provider (from {source})"))?;
    Ok(ChosenProvider { config, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pricing_is_runc_resource_time_or_e2b_list_prices_unless_set() {
        let limits = SandboxLimits::default();
        let runc = pricing_from(&ProviderConfig::Runc, &limits, &Env::from_pairs(&[])).unwrap();
        assert_eq!((runc.size.map(|s| s.vcpus), runc.prices), (Some(1.0), None));
        let priced = pricing_from(
            &ProviderConfig::Runc,
            &limits,
            &Env::from_pairs(&[
                ("THREADBOX_PRICE_VCPU_HOUR", "0.0504"),
                ("THREADBOX_PRICE_GIB_HOUR", "0.0162"),
            ]),
        )
        .unwrap();
        assert!(priced.prices.is_some());
        let err = pricing_from(
            &ProviderConfig::Runc,
            &limits,
            &Env::from_pairs(&[("THREADBOX_PRICE_GIB_HOUR", "0.0162")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("THREADBOX_PRICE_VCPU_HOUR"), "{err}");
    }

    #[test]
    fn runc_is_the_default_and_says_so() {
        let chosen = choose_from(None, Env::from_pairs(&[])).unwrap();
        assert!(chosen.is_runc());
        assert_eq!(chosen.source, "the default");
    }

    #[test]
    fn the_flag_wins_over_the_variable() {
        let env = Env::from_pairs(&[(PROVIDER_VAR, "e2b")]);
        let chosen = choose_from(Some("runc"), env).unwrap();
        assert!(chosen.is_runc());
        assert_eq!(chosen.source, "--provider");
    }

    #[test]
    fn e2b_from_the_variable_reads_its_settings() {
        let env = Env::from_pairs(&[(PROVIDER_VAR, "e2b"), ("E2B_API_KEY", "e2b_0123456789")]);
        let chosen = choose_from(None, env).unwrap();
        assert_eq!(chosen.config.name(), "e2b");
        assert_eq!(chosen.source, PROVIDER_VAR);
    }

    #[test]
    fn e2b_without_a_key_says_what_is_missing() {
        let err = choose_from(Some("e2b"), Env::from_pairs(&[])).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("E2B_API_KEY"), "{text}");
    }
}
