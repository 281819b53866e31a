//! Where the time goes: a tracing layer that times threadbox's spans (from creation to close,
//! so an async span's time includes its waits), for the benchmarks to print per path.
//!
//! Spans are labelled by name, with the `op` field appended (`runc resume`); spans made by
//! `#[instrument]` are named after their function, so those are prefixed with their crate
//! (`runc::connect`, `core::pause`) to tell the provider's from the use case's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The spans closed since the last `take`, in the order they closed.
#[derive(Clone, Default)]
pub struct SpanTimes {
    closed: Arc<Mutex<Vec<(String, Duration)>>>,
}

impl SpanTimes {
    /// Install the layer as the process's subscriber, for threadbox's spans at debug level.
    pub fn install() -> Self {
        let times = SpanTimes::default();
        tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("threadbox=debug"))
            .with(Timer {
                times: times.clone(),
            })
            .init();
        times
    }

    /// What closed since the last call, summed per label: (label, calls, total).
    pub fn take(&self) -> BTreeMap<String, (usize, Duration)> {
        let closed = std::mem::take(&mut *self.closed.lock().expect("poisoned"));
        let mut sums: BTreeMap<String, (usize, Duration)> = BTreeMap::new();
        for (label, took) in closed {
            let entry = sums.entry(label).or_default();
            entry.0 += 1;
            entry.1 += took;
        }
        sums
    }
}

/// Per label: each timed call's count of spans and their total.
type Parts = BTreeMap<String, Vec<(usize, Duration)>>;

/// Per path, per label: each timed call's count and total.
#[derive(Default)]
pub struct Breakdown {
    paths: BTreeMap<&'static str, Parts>,
    calls: BTreeMap<&'static str, usize>,
}

impl Breakdown {
    /// One timed call of `path`: what `times` collected during it.
    pub fn add(&mut self, path: &'static str, spans: BTreeMap<String, (usize, Duration)>) {
        *self.calls.entry(path).or_default() += 1;
        let labels = self.paths.entry(path).or_default();
        for (label, sample) in spans {
            labels.entry(label).or_default().push(sample);
        }
    }

    /// A markdown table per path: each part's spans per call and median time per call (a part
    /// missing from a call counts as 0 there).
    pub fn print(&self) {
        for (path, labels) in &self.paths {
            let calls = self.calls[path];
            println!();
            println!("where the time goes: {path} ({calls} calls; median per call)");
            println!("| part | spans per call | median ms |");
            println!("|---|---|---|");
            for (label, samples) in labels {
                let mut times: Vec<Duration> = samples.iter().map(|s| s.1).collect();
                times.resize(calls, Duration::ZERO);
                let spans: usize = samples.iter().map(|s| s.0).sum();
                println!(
                    "| {label} | {:.1} | {:.2} |",
                    spans as f64 / calls as f64,
                    threadbox_testing::bench::percentile(&times, 0.5)
                );
            }
        }
    }
}

struct Timer {
    times: SpanTimes,
}

struct Started {
    label: String,
    at: Instant,
}

struct OpField<'a>(&'a mut String);

impl Visit for OpField<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "op" {
            self.0.push(' ');
            self.0.push_str(value);
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S> Layer<S> for Timer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        let name = meta.name();
        let mut label = if name.contains('.') || name == "runc" {
            name.to_owned()
        } else {
            // `#[instrument]`: the function's name, with its crate.
            let krate = meta.target().split("::").next().unwrap_or_default();
            format!("{}::{name}", krate.trim_start_matches("threadbox_"))
        };
        attrs.record(&mut OpField(&mut label));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Started {
                label,
                at: Instant::now(),
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let extensions = span.extensions();
        if let Some(started) = extensions.get::<Started>() {
            self.times
                .closed
                .lock()
                .expect("poisoned")
                .push((started.label.clone(), started.at.elapsed()));
        }
    }
}
