//! What a thread's sandbox has used, read from the thread's own lifecycle events: how long it
//! ran (billed by a provider that charges for running time) and how long it was paused (free on
//! E2B), per state and per generation, and what that time costs at the configured prices.
//! "Saved by pausing" prices the paused time as if the sandbox had run through it, which is what
//! never pausing would have cost. Pure: the caller passes the events, the window and the prices.
//!
//! How a state bills, for the sandbox it keeps:
//! - running: `creating`, `active`, `pausing`, `resuming` (the sandbox is up, or coming up, and
//!   a provider bills it);
//! - paused: `paused`;
//! - `deleting` keeps whatever the state before it was (the sandbox is as it was until the kill
//!   lands: a paused sandbox destroyed by retention never runs again);
//! - `error`: unknown (a failed create left nothing, a failed pause left it running); counted
//!   apart and never priced;
//! - `destroyed`, `expired`: no sandbox.

use serde::{Deserialize, Serialize};

use super::session::LifecycleEvent;
use super::status::{Cause, Status};
use super::time::Millis;

/// How a state bills (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Billing {
    Running,
    Paused,
    Unknown,
    Gone,
}

fn billing(status: Status, before: Billing) -> Billing {
    match status {
        Status::Creating | Status::Active | Status::Pausing | Status::Resuming => Billing::Running,
        Status::Paused => Billing::Paused,
        Status::Deleting => before,
        Status::Error => Billing::Unknown,
        Status::Destroyed | Status::Expired => Billing::Gone,
    }
}

/// Milliseconds spent in each state, shown as a map from the state's name (`{"active": 120000}`),
/// every state present so the shape never changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "std::collections::BTreeMap<String, u64>",
    into = "std::collections::BTreeMap<String, u64>"
)]
pub struct StateTimes([u64; Status::ALL.len()]);

impl StateTimes {
    fn index(status: Status) -> usize {
        Status::ALL
            .iter()
            .position(|s| *s == status)
            .expect("every status is in ALL")
    }

    pub fn get(&self, status: Status) -> u64 {
        self.0[Self::index(status)]
    }

    fn add(&mut self, status: Status, ms: u64) {
        self.0[Self::index(status)] += ms;
    }

    /// Each state with its time, in `Status::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (Status, u64)> + '_ {
        Status::ALL.into_iter().zip(self.0)
    }

    /// Add every state's time of `other` to this one.
    pub fn merge(&mut self, other: &StateTimes) {
        for (status, ms) in other.iter() {
            self.add(status, ms);
        }
    }
}

impl From<std::collections::BTreeMap<String, u64>> for StateTimes {
    fn from(map: std::collections::BTreeMap<String, u64>) -> Self {
        let mut times = StateTimes::default();
        // A newer server's extra states are ignored rather than refused.
        for (name, ms) in map {
            if let Ok(status) = name.parse::<Status>() {
                times.add(status, ms);
            }
        }
        times
    }
}

impl From<StateTimes> for std::collections::BTreeMap<String, u64> {
    fn from(times: StateTimes) -> Self {
        times
            .iter()
            .map(|(status, ms)| (status.as_str().to_owned(), ms))
            .collect()
    }
}

/// One generation (one sandbox) of a thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationUsage {
    pub generation: u64,
    /// The sandbox the generation's create bound, when the events name it.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Its first event in the window.
    pub started_at: Millis,
    pub running_ms: u64,
    pub paused_ms: u64,
}

/// How much of a sandbox there is, for resource-time: a provider bills what is allocated, not
/// what is used.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxSize {
    pub vcpus: f64,
    pub memory_gib: f64,
}

/// Compute list prices in US dollars.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    pub usd_per_vcpu_hour: f64,
    pub usd_per_gib_hour: f64,
}

/// What a thread's time is priced at: the sandbox's size (resource-time needs it) and, when
/// known, the provider's prices. Without a size, usage is times only; without prices, it adds
/// vCPU-hours and GiB-hours but no dollars (runc: nobody bills a local container).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pricing {
    pub size: Option<SandboxSize>,
    pub prices: Option<Prices>,
    /// What keeping a GiB of checkpoints costs a month, in US dollars (the disk they are on):
    /// set by the operator, since no provider here bills it (E2B keeps no checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_stored_gib_month: Option<f64>,
}

/// E2B's default sandbox (template `base`): 2 vCPUs and 512 MiB.
pub const E2B_DEFAULT_SIZE: SandboxSize = SandboxSize {
    vcpus: 2.0,
    memory_gib: 0.5,
};

/// E2B's list prices as published on 2026-11-26 in "How do I calculate the price of a sandbox?"
/// (<https://e2b.dev/docs/faq/calculate-sandbox-price>): $0.000014 per vCPU-second and $0.0000045
/// per GiB-second while running; paused and killed sandboxes are not billed. docs/cost.md keeps
/// the dated table.
pub const E2B_LIST_PRICES: Prices = Prices {
    usd_per_vcpu_hour: 0.0504,
    usd_per_gib_hour: 0.0162,
};

/// The variables that override the defaults (read through `config::Env` where a process builds
/// its use cases' configuration).
pub const SANDBOX_VCPUS_VAR: &str = "THREADBOX_SANDBOX_VCPUS";
pub const SANDBOX_MEMORY_GIB_VAR: &str = "THREADBOX_SANDBOX_MEMORY_GIB";
pub const PRICE_VCPU_HOUR_VAR: &str = "THREADBOX_PRICE_VCPU_HOUR";
pub const PRICE_GIB_HOUR_VAR: &str = "THREADBOX_PRICE_GIB_HOUR";
pub const PRICE_STORAGE_GIB_MONTH_VAR: &str = "THREADBOX_PRICE_STORAGE_GIB_MONTH";

/// The pricing settings as read, each optional.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PricingSettings {
    pub vcpus: Option<f64>,
    pub memory_gib: Option<f64>,
    pub usd_per_vcpu_hour: Option<f64>,
    pub usd_per_gib_hour: Option<f64>,
    pub usd_per_stored_gib_month: Option<f64>,
}

impl PricingSettings {
    /// Read each variable with `read` (a decimal reader over `config::Env`), in one place so every
    /// process names the same variables.
    pub fn read<E>(read: impl Fn(&'static str) -> Result<Option<f64>, E>) -> Result<Self, E> {
        Ok(Self {
            vcpus: read(SANDBOX_VCPUS_VAR)?,
            memory_gib: read(SANDBOX_MEMORY_GIB_VAR)?,
            usd_per_vcpu_hour: read(PRICE_VCPU_HOUR_VAR)?,
            usd_per_gib_hour: read(PRICE_GIB_HOUR_VAR)?,
            usd_per_stored_gib_month: read(PRICE_STORAGE_GIB_MONTH_VAR)?,
        })
    }
}

/// A pricing setting that cannot be used: the variable, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PricingError {
    pub variable: &'static str,
    pub reason: String,
}

impl Pricing {
    /// No size, no prices: usage shows times only.
    pub const UNKNOWN: Pricing = Pricing {
        size: None,
        prices: None,
        usd_per_stored_gib_month: None,
    };

    /// E2B's default sandbox at its list prices.
    pub const E2B_DEFAULT: Pricing = Pricing {
        size: Some(E2B_DEFAULT_SIZE),
        prices: Some(E2B_LIST_PRICES),
        usd_per_stored_gib_month: None,
    };

    /// A sandbox of known size that nobody bills (runc): resource-time, no dollars.
    pub fn unpriced(size: SandboxSize) -> Self {
        Pricing {
            size: Some(size),
            prices: None,
            usd_per_stored_gib_month: None,
        }
    }

    /// `self` (the provider's defaults) with the settings laid over it. Both prices or neither:
    /// half a price would show a cost that is wrong by the other half. A size needs both figures
    /// unless the defaults have one.
    pub fn with_settings(self, settings: PricingSettings) -> Result<Pricing, PricingError> {
        let prices = match (settings.usd_per_vcpu_hour, settings.usd_per_gib_hour) {
            (None, None) => self.prices,
            (Some(usd_per_vcpu_hour), Some(usd_per_gib_hour)) => Some(Prices {
                usd_per_vcpu_hour,
                usd_per_gib_hour,
            }),
            (Some(_), None) => return Err(pair(PRICE_GIB_HOUR_VAR, PRICE_VCPU_HOUR_VAR)),
            (None, Some(_)) => return Err(pair(PRICE_VCPU_HOUR_VAR, PRICE_GIB_HOUR_VAR)),
        };
        let size = match (self.size, settings.vcpus, settings.memory_gib) {
            (size, None, None) => size,
            (_, Some(vcpus), Some(memory_gib)) => Some(SandboxSize { vcpus, memory_gib }),
            (Some(size), vcpus, memory_gib) => Some(SandboxSize {
                vcpus: vcpus.unwrap_or(size.vcpus),
                memory_gib: memory_gib.unwrap_or(size.memory_gib),
            }),
            (None, Some(_), None) => {
                return Err(pair(SANDBOX_MEMORY_GIB_VAR, SANDBOX_VCPUS_VAR));
            }
            (None, None, Some(_)) => {
                return Err(pair(SANDBOX_VCPUS_VAR, SANDBOX_MEMORY_GIB_VAR));
            }
        };
        if prices.is_some() && size.is_none() {
            return Err(PricingError {
                variable: SANDBOX_VCPUS_VAR,
                reason: format!(
                    "prices need the sandbox's size: set it and {SANDBOX_MEMORY_GIB_VAR} too"
                ),
            });
        }
        Ok(Pricing {
            size,
            prices,
            usd_per_stored_gib_month: settings
                .usd_per_stored_gib_month
                .or(self.usd_per_stored_gib_month),
        })
    }

    /// What keeping `bytes` of checkpoints costs a month, where a storage price is set.
    pub fn stored_usd_per_month(&self, bytes: u64) -> Option<f64> {
        self.usd_per_stored_gib_month
            .map(|usd| usd * bytes as f64 / (1u64 << 30) as f64)
    }
}

fn pair(missing: &'static str, set: &'static str) -> PricingError {
    PricingError {
        variable: missing,
        reason: format!("must be set together with {set}"),
    }
}

/// Running and paused time priced: resource-time always (when the size is known), dollars when
/// the prices are.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageCost {
    pub vcpus: f64,
    pub memory_gib: f64,
    /// vCPUs × running hours.
    pub vcpu_hours: f64,
    /// GiB × running hours.
    pub gib_hours: f64,
    /// What the running time costs; absent without prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// What the paused time would have cost had the sandbox run through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_usd: Option<f64>,
    /// The part of `saved_usd` from idle pauses (the janitor's idle-pause setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_saved_usd: Option<f64>,
}

impl UsageCost {
    fn of(pricing: &Pricing, running_ms: u64, paused_ms: u64, idle_paused_ms: u64) -> Option<Self> {
        let size = pricing.size?;
        let hours = |ms: u64| ms as f64 / 3_600_000.0;
        let usd = |ms: u64| {
            pricing.prices.map(|p| {
                hours(ms)
                    * (size.vcpus * p.usd_per_vcpu_hour + size.memory_gib * p.usd_per_gib_hour)
            })
        };
        Some(UsageCost {
            vcpus: size.vcpus,
            memory_gib: size.memory_gib,
            vcpu_hours: size.vcpus * hours(running_ms),
            gib_hours: size.memory_gib * hours(running_ms),
            usd: usd(running_ms),
            saved_usd: usd(paused_ms),
            idle_saved_usd: usd(idle_paused_ms),
        })
    }
}

/// The window usage is counted over: from `since` (or the first event) to `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub since: Option<Millis>,
    pub now: Millis,
}

/// A thread's usage over a window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Where counting starts: `since`, or the first event read when that is later (or `to`
    /// when there is none).
    pub from: Millis,
    pub to: Millis,
    /// Time a provider bills: creating, active, pausing, resuming (and deleting a running one).
    pub running_ms: u64,
    /// Time paused (and deleting a paused one).
    pub paused_ms: u64,
    /// The part of `paused_ms` that began with an idle pause (the janitor's, not a user's).
    pub idle_paused_ms: u64,
    /// Time in `error`, when the sandbox may or may not be up; never priced.
    pub error_ms: u64,
    pub by_state: StateTimes,
    /// Oldest first; only generations with time in the window.
    pub generations: Vec<GenerationUsage>,
    /// False when the events read do not reach back to the window's start (older ones were
    /// left unread or are gone): the figures cover `from`..`to` only.
    pub complete: bool,
    /// Absent when the sandbox's size is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<UsageCost>,
}

impl Usage {
    /// Count `events` (one thread's, in sequence order, possibly only its most recent ones) over
    /// `window`. Each event's state lasts until the next event, the last one until `now`; time
    /// before `since` is not counted. An event whose time is before its predecessor's (clocks of
    /// two processes) counts as no time, never negative time.
    pub fn from_events(events: &[LifecycleEvent], window: Window, pricing: &Pricing) -> Usage {
        let start = window.since.unwrap_or(Millis(i64::MIN));
        let first = events.first();
        // Complete when the first event read is the thread's first, or the window starts after it.
        let complete = first.is_none_or(|e| e.seq <= 1 || e.at <= start);
        let from = match (window.since, first) {
            (Some(since), Some(e)) => since.max(e.at),
            (None, Some(e)) => e.at,
            (Some(_), None) | (None, None) => window.now,
        };
        let mut usage = Usage {
            from: from.min(window.now),
            to: window.now,
            running_ms: 0,
            paused_ms: 0,
            idle_paused_ms: 0,
            error_ms: 0,
            by_state: StateTimes::default(),
            generations: Vec::new(),
            complete,
            cost: None,
        };
        // Before the first event read: the state it left, if that is known.
        let mut before = first
            .and_then(|e| e.from)
            .map_or(Billing::Gone, |s| billing(s, Billing::Gone));
        let mut idle_pause = false;
        let mut last_end = Millis(i64::MIN);
        for (i, event) in events.iter().enumerate() {
            let kind = billing(event.to, before);
            // A pause that began idle stays idle through `pausing → paused` (and `deleting`);
            // any other way into paused (a user's pause, reconciling) is not the idle setting's
            // doing. Events that change nothing (`from` = `to`: a note) leave it as it is.
            if event.from != Some(event.to) {
                match event.to {
                    Status::Pausing | Status::Paused if event.from != Some(Status::Pausing) => {
                        idle_pause = event.cause == Cause::Idle;
                    }
                    Status::Pausing | Status::Paused | Status::Deleting => {}
                    _ => idle_pause = false,
                }
            }
            // Time only moves forward: an event stamped before its predecessor (the clocks of
            // two processes) starts when the predecessor ended.
            let begin = event.at.max(last_end);
            let end = events
                .get(i + 1)
                .map_or(window.now, |next| next.at)
                .max(begin);
            last_end = end;
            let lasted = span(begin.max(start), end.min(window.now));
            usage.by_state.add(event.to, lasted);
            let generation = usage.generation(event);
            if event.from == Some(Status::Creating) && event.sandbox_id.is_some() {
                generation.sandbox_id = event.sandbox_id.clone();
            }
            match kind {
                Billing::Running => {
                    generation.running_ms += lasted;
                    usage.running_ms += lasted;
                }
                Billing::Paused => {
                    generation.paused_ms += lasted;
                    usage.paused_ms += lasted;
                    if idle_pause {
                        usage.idle_paused_ms += lasted;
                    }
                }
                Billing::Unknown => usage.error_ms += lasted,
                Billing::Gone => {}
            }
            before = kind;
        }
        usage
            .generations
            .retain(|g| g.running_ms > 0 || g.paused_ms > 0);
        usage.cost = UsageCost::of(
            pricing,
            usage.running_ms,
            usage.paused_ms,
            usage.idle_paused_ms,
        );
        usage
    }

    /// The generation `event` belongs to, added when it is new.
    fn generation(&mut self, event: &LifecycleEvent) -> &mut GenerationUsage {
        let found = self
            .generations
            .iter()
            .position(|g| g.generation == event.generation);
        let at = match found {
            Some(at) => at,
            None => {
                self.generations.push(GenerationUsage {
                    generation: event.generation,
                    sandbox_id: None,
                    started_at: event.at.max(self.from),
                    running_ms: 0,
                    paused_ms: 0,
                });
                self.generations.len() - 1
            }
        };
        &mut self.generations[at]
    }
}

/// Milliseconds from `start` to `end`, zero when `end` is not after `start`.
fn span(start: Millis, end: Millis) -> u64 {
    u64::try_from(end.0.saturating_sub(start.0)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ThreadId;

    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    /// 2026-11-01T00:00:00Z.
    const T0: i64 = 1_793_491_200_000;

    fn ev(
        seq: u64,
        generation: u64,
        from: Option<Status>,
        to: Status,
        cause: Cause,
        at: i64,
    ) -> LifecycleEvent {
        LifecycleEvent {
            event_id: format!("e{seq}"),
            thread_id: ThreadId::parse("t1").unwrap(),
            seq,
            generation,
            from,
            to,
            cause,
            at: Millis(T0 + at),
            sandbox_id: (to != Status::Creating).then(|| format!("sb-{generation}")),
            detail: None,
        }
    }

    /// A fixed history: created, an hour of work, idle pause for 10 hours, resumed by a user for
    /// 30 minutes, paused by the user for 2 hours, recreated after the provider lost it, an
    /// error, and finally destroyed by retention while paused.
    fn history() -> Vec<LifecycleEvent> {
        use Status::*;
        let t = |h: i64, m: i64, s: i64| h * HOUR + m * MIN + s * 1_000;
        #[rustfmt::skip]
        let rows = [
            (1, None, Creating, Cause::User, t(0, 0, 0)),
            (1, Some(Creating), Active, Cause::User, t(0, 0, 2)),
            (1, Some(Active), Pausing, Cause::Idle, t(1, 0, 0)),
            (1, Some(Pausing), Paused, Cause::Idle, t(1, 0, 1)),
            (1, Some(Paused), Resuming, Cause::User, t(11, 0, 1)),
            (1, Some(Resuming), Active, Cause::User, t(11, 0, 3)),
            (1, Some(Active), Pausing, Cause::User, t(11, 30, 3)),
            (1, Some(Pausing), Paused, Cause::User, t(11, 30, 4)),
            (2, Some(Paused), Creating, Cause::Recreated, t(13, 30, 4)),
            (2, Some(Creating), Active, Cause::Recreated, t(13, 30, 6)),
            (2, Some(Active), Error, Cause::Error, t(14, 30, 6)),
            (2, Some(Error), Active, Cause::Reconcile, t(14, 40, 6)),
            (2, Some(Active), Pausing, Cause::Idle, t(15, 40, 6)),
            (2, Some(Pausing), Paused, Cause::Idle, t(15, 40, 7)),
            // Not a change of state (a note in the stream): the idle pause goes on.
            (2, Some(Paused), Paused, Cause::User, t(18, 0, 0)),
            (2, Some(Paused), Deleting, Cause::Retention, t(20, 40, 7)),
            (2, Some(Deleting), Destroyed, Cause::Retention, t(20, 40, 8)),
        ];
        rows.into_iter()
            .zip(1..)
            .map(|((generation, from, to, cause, at), seq)| {
                ev(seq, generation, from, to, cause, at)
            })
            .collect()
    }

    fn at(ms: i64) -> Millis {
        Millis(T0 + ms)
    }

    #[test]
    fn a_fixed_history_gives_fixed_figures() {
        let now = at(30 * HOUR);
        let usage = Usage::from_events(
            &history(),
            Window { since: None, now },
            &Pricing::E2B_DEFAULT,
        );
        // Generation 1: running 0..1h+1s, 11h+1s..11h30m+4s; paused 1h+1s..11h+1s (idle) and
        // 11h30m+4s..13h30m+4s (user).
        let g1_running = (HOUR + 1_000) + (30 * MIN + 3_000);
        let g1_paused = 10 * HOUR + 2 * HOUR;
        // Generation 2: running 13h30m+4s..14h30m+6s and 14h40m+6s..15h40m+7s; error 10m;
        // paused (idle) 15h40m+7s..20h40m+8s, the last second of it deleting.
        let g2_running = (HOUR + 2_000) + (HOUR + 1_000);
        let g2_paused = 5 * HOUR + 1_000;
        assert_eq!(usage.running_ms as i64, g1_running + g2_running);
        assert_eq!(usage.paused_ms as i64, g1_paused + g2_paused);
        assert_eq!(usage.idle_paused_ms as i64, 10 * HOUR + g2_paused);
        assert_eq!(usage.error_ms as i64, 10 * MIN);
        assert_eq!(
            usage.by_state.get(Status::Destroyed) as i64,
            9 * HOUR + 20 * MIN - 8_000
        );
        assert_eq!(usage.by_state.get(Status::Deleting), 1_000);
        assert_eq!(usage.by_state.get(Status::Creating), 4_000);
        let total: u64 = usage.by_state.iter().map(|(_, ms)| ms).sum();
        assert_eq!(
            total as i64,
            30 * HOUR,
            "every moment is in exactly one state"
        );
        assert!(usage.complete);
        assert_eq!((usage.from, usage.to), (at(0), now));

        let gens: Vec<_> = usage
            .generations
            .iter()
            .map(|g| {
                (
                    g.generation,
                    g.sandbox_id.as_deref(),
                    g.running_ms as i64,
                    g.paused_ms as i64,
                )
            })
            .collect();
        assert_eq!(
            gens,
            vec![
                (1, Some("sb-1"), g1_running, g1_paused),
                (2, Some("sb-2"), g2_running, g2_paused),
            ]
        );

        // Priced: 2 vCPU × $0.0504 + 0.5 GiB × $0.0162 = $0.1089 per running hour.
        let cost = usage.cost.unwrap();
        let hourly = 2.0 * 0.0504 + 0.5 * 0.0162;
        let hours = |ms: u64| ms as f64 / 3_600_000.0;
        assert!((cost.usd.unwrap() - hours(usage.running_ms) * hourly).abs() < 1e-12);
        assert!((cost.saved_usd.unwrap() - hours(usage.paused_ms) * hourly).abs() < 1e-12);
        assert!(
            (cost.idle_saved_usd.unwrap() - hours(usage.idle_paused_ms) * hourly).abs() < 1e-12
        );
        assert!((cost.vcpu_hours - 2.0 * hours(usage.running_ms)).abs() < 1e-12);
        assert!((cost.gib_hours - 0.5 * hours(usage.running_ms)).abs() < 1e-12);
        // The figures by hand: 3h30m7s running at $0.1089 an hour is $0.3814; 17h0m1s paused
        // would have cost $1.8513 running, 15h0m1s of it after idle pauses $1.6335.
        assert_eq!(usage.running_ms, 12_607_000);
        assert_eq!(usage.paused_ms, 61_201_000);
        assert_eq!(format!("{:.4}", cost.usd.unwrap()), "0.3814");
        assert_eq!(format!("{:.4}", cost.saved_usd.unwrap()), "1.8513");
        assert_eq!(format!("{:.4}", cost.idle_saved_usd.unwrap()), "1.6335");
    }

    #[test]
    fn since_clips_the_window() {
        let now = at(30 * HOUR);
        let since = at(11 * HOUR);
        let usage = Usage::from_events(
            &history(),
            Window {
                since: Some(since),
                now,
            },
            &Pricing::UNKNOWN,
        );
        // From 11h: paused (idle) for 1s, then 30m+3s running, 2h paused (user), then gen 2.
        assert_eq!(usage.from, since);
        assert_eq!(
            usage.running_ms as i64,
            (30 * MIN + 3_000) + (HOUR + 2_000) + (HOUR + 1_000)
        );
        assert_eq!(usage.paused_ms as i64, 1_000 + 2 * HOUR + 5 * HOUR + 1_000);
        assert_eq!(usage.idle_paused_ms as i64, 1_000 + 5 * HOUR + 1_000);
        assert!(usage.complete, "the history reaches back past since");
        assert_eq!(usage.cost, None, "no size, no cost");
        assert_eq!(usage.generations[0].started_at, since);
    }

    #[test]
    fn a_cut_history_starts_from_its_first_event_and_says_so() {
        let events = history();
        // Only the last events: the state before event 13 was active (event 12).
        let usage = Usage::from_events(
            &events[12..],
            Window {
                since: None,
                now: at(30 * HOUR),
            },
            &Pricing::unpriced(SandboxSize {
                vcpus: 1.0,
                memory_gib: 0.5,
            }),
        );
        assert!(!usage.complete);
        assert_eq!(usage.from, events[12].at);
        assert_eq!(usage.running_ms, 1_000);
        assert_eq!(usage.paused_ms as i64, 5 * HOUR + 1_000);
        let cost = usage.cost.unwrap();
        assert_eq!(cost.usd, None, "runc: resource-time without dollars");
        assert!((cost.vcpu_hours - 1_000.0 / 3_600_000.0).abs() < 1e-12);
    }

    #[test]
    fn a_thread_still_running_counts_until_now_and_clock_skew_is_no_time() {
        use Status::*;
        let mut events = vec![
            ev(1, 1, None, Creating, Cause::User, 0),
            ev(2, 1, Some(Creating), Active, Cause::User, 1_000),
        ];
        // A second process's clock a little behind.
        events.push(ev(3, 1, Some(Active), Pausing, Cause::User, 500));
        events.push(ev(4, 1, Some(Pausing), Active, Cause::Error, 2_000));
        let usage = Usage::from_events(
            &events,
            Window {
                since: None,
                now: at(HOUR),
            },
            &Pricing::E2B_DEFAULT,
        );
        assert_eq!(usage.running_ms as i64, HOUR);
        assert_eq!(usage.paused_ms, 0);
        let none = Usage::from_events(
            &[],
            Window {
                since: None,
                now: at(0),
            },
            &Pricing::E2B_DEFAULT,
        );
        assert_eq!((none.running_ms, none.generations.len()), (0, 0));
    }

    #[test]
    fn usage_round_trips_through_json_with_states_by_name() {
        let usage = Usage::from_events(
            &history(),
            Window {
                since: None,
                now: at(30 * HOUR),
            },
            &Pricing::E2B_DEFAULT,
        );
        let json = serde_json::to_value(&usage).unwrap();
        assert_eq!(json["by_state"]["error"], 10 * MIN);
        assert_eq!(
            json["by_state"].as_object().unwrap().len(),
            Status::ALL.len()
        );
        let back: Usage = serde_json::from_value(json).unwrap();
        assert_eq!(back, usage);
    }

    #[test]
    fn settings_override_the_defaults_in_pairs() {
        let e2b = Pricing::E2B_DEFAULT;
        assert_eq!(e2b.with_settings(PricingSettings::default()).unwrap(), e2b);
        let bigger = e2b
            .with_settings(PricingSettings {
                vcpus: Some(8.0),
                ..PricingSettings::default()
            })
            .unwrap();
        assert_eq!(
            bigger.size,
            Some(SandboxSize {
                vcpus: 8.0,
                memory_gib: 0.5
            })
        );
        let err = e2b
            .with_settings(PricingSettings {
                usd_per_vcpu_hour: Some(0.1),
                ..PricingSettings::default()
            })
            .unwrap_err();
        assert_eq!(err.variable, PRICE_GIB_HOUR_VAR);
        let err = Pricing::UNKNOWN
            .with_settings(PricingSettings {
                usd_per_vcpu_hour: Some(0.1),
                usd_per_gib_hour: Some(0.01),
                ..PricingSettings::default()
            })
            .unwrap_err();
        assert_eq!(err.variable, SANDBOX_VCPUS_VAR);
        let runc = Pricing::unpriced(SandboxSize {
            vcpus: 1.0,
            memory_gib: 0.5,
        })
        .with_settings(PricingSettings {
            usd_per_vcpu_hour: Some(0.0504),
            usd_per_gib_hour: Some(0.0162),
            ..PricingSettings::default()
        })
        .unwrap();
        assert_eq!(runc.prices, Some(E2B_LIST_PRICES));
        let read = PricingSettings::read(|name| {
            Ok::<_, ()>((name == SANDBOX_MEMORY_GIB_VAR).then_some(2.0))
        })
        .unwrap();
        assert_eq!(read.memory_gib, Some(2.0));
    }

    #[test]
    fn stored_checkpoints_are_priced_only_where_a_storage_price_is_set() {
        let runc = Pricing::unpriced(SandboxSize {
            vcpus: 1.0,
            memory_gib: 0.5,
        });
        assert_eq!(runc.stored_usd_per_month(1 << 30), None);
        let read = PricingSettings::read(|name| {
            Ok::<_, ()>((name == PRICE_STORAGE_GIB_MONTH_VAR).then_some(0.08))
        })
        .unwrap();
        let priced = runc.with_settings(read).unwrap();
        assert_eq!(priced.prices, None, "compute stays unpriced");
        let half_gib_month = priced.stored_usd_per_month(512 << 20).unwrap();
        assert!((half_gib_month - 0.04).abs() < 1e-12, "{half_gib_month}");
    }
}
