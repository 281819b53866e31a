//! `threadbox cost`: what the threads' sandboxes used and cost, from each thread's own lifecycle
//! events, summed by state and listed by thread, with what pausing (and the idle pause in
//! particular) saved compared with never pausing. Over the HTTP API like `threads`, so it works
//! the same against `threadbox dev` and a deployed stack: it pages through the listing with each
//! thread's usage (`GET /v1/threads?usage=true`), priced by the server's settings (E2B's list
//! prices by default there; runc shows vCPU-hours and GiB-hours unless prices are set).
//!
//! Beside what the threads used, it prints what the control plane costs on AWS per thread-month:
//! not counted but modelled (`scripts/cost-model.py`, docs/cost.md), from the model's own summary
//! (`cost_model.json`, the one copy of the figure: docs/cost.md and BENCHMARKS.md
//! give the same, and tests/tests/cost_model.rs checks all of them against the model).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use threadbox_core::domain::{Millis, StateTimes, Status, Usage};

use crate::client::{ApiArgs, ThreadView, UsageQuery};
use crate::duration;
use crate::threads::output::Output;
use crate::threads::render::{resource_hours, span, tint, usd, utc};
use crate::threads::table::{Cell, Table};

#[derive(clap::Args, Debug)]
pub struct CostArgs {
    #[command(flatten)]
    api: ApiArgs,

    /// Count from this long ago (90m, 7d, 30d); every thread's whole history by default.
    #[arg(long, value_parser = duration::parse)]
    since: Option<Duration>,

    /// List this many threads, the most running time first (every thread is in the totals).
    #[arg(long, default_value_t = 20)]
    top: usize,

    /// Print the summary and every thread as one JSON document.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: CostArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let out = Output::new(args.json);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let since = args
        .since
        .map(|d| Millis(now.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))));
    let threads = client.list_with(None, UsageQuery::Since(since)).await?;
    let report = Report::of(&threads, since);
    if out.json {
        out.document(&report)?;
    } else {
        out.text(&render(&report, args.top, out.color))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `python3 scripts/cost-model.py --summary`: the control plane's thread-month on AWS for the
/// model's default profile.
const CONTROL_PLANE_JSON: &str = include_str!("cost_model.json");

/// The model's summary: what each thread adds, what the deployment pays whoever uses it, and the
/// thread-month at the profile's number of threads, beside the E2B compute of that month.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct ControlPlane {
    pub prices_date: String,
    /// The threads the profile shares the fixed costs among.
    pub threads: u64,
    /// `per_thread_usd + fixed_usd_per_month / threads`.
    pub thread_month_usd: f64,
    pub per_thread_usd: f64,
    /// Alarms, secrets, pollers, the janitor's schedule: paid at 0 threads too.
    pub fixed_usd_per_month: f64,
    /// The profile's thread-month of E2B compute, and the control plane's share of it.
    pub compute_usd: f64,
    pub ratio: f64,
    /// Below this many threads the control plane costs more than 1% of their compute.
    pub one_percent_threads: Option<u64>,
    /// What each warm pool member adds (E2B, running around the clock).
    pub warm_pool_usd_per_member_month: f64,
}

impl ControlPlane {
    pub fn model() -> ControlPlane {
        serde_json::from_str(CONTROL_PLANE_JSON).expect("cost_model.json is the model's summary")
    }

    /// The lines `threadbox cost` prints, in the column of its other figures.
    fn render(&self) -> String {
        let below = match self.one_percent_threads {
            Some(n) => format!("; over 1% below {n} threads"),
            None => "; over 1% at any number of threads".to_owned(),
        };
        format!(
            "{:<10} {} a thread-month on AWS at {} threads: {} each + ${:.2} a month fixed\n\
             {:<10} ({:.2}% of a thread-month's E2B compute, {}{below})\n\
             {:<10} modelled, not counted: scripts/cost-model.py, prices of {} (docs/cost.md)\n",
            "control",
            usd(self.thread_month_usd),
            self.threads,
            usd(self.per_thread_usd),
            self.fixed_usd_per_month,
            "",
            100.0 * self.ratio,
            usd(self.compute_usd),
            "",
            self.prices_date,
        )
    }
}

/// Every thread's usage summed, and each thread's own.
#[derive(Debug, Serialize)]
struct Report {
    /// The window's start when `--since` gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<Millis>,
    threads: usize,
    /// Threads by their status now.
    by_status: Vec<(Status, usize)>,
    running_ms: u64,
    paused_ms: u64,
    idle_paused_ms: u64,
    error_ms: u64,
    by_state: StateTimes,
    /// Resource-time of the running time, when the server knows the sandbox's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    vcpu_hours: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gib_hours: Option<f64>,
    /// Dollars, when the server has prices.
    #[serde(skip_serializing_if = "Option::is_none")]
    usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    saved_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_saved_usd: Option<f64>,
    /// Threads whose history was longer than the server reads: their figures start later.
    incomplete: usize,
    /// The control plane's modelled thread-month on AWS (the same at every deployment).
    control_plane: ControlPlane,
    /// Most running time first.
    rows: Vec<Row>,
}

#[derive(Debug, Serialize)]
struct Row {
    thread_id: String,
    status: Status,
    usage: Usage,
}

/// `Some(sum)` when every value is there, `None` when any is missing (one server prices all its
/// threads alike, so a gap means "not priced", never a partial sum).
fn sum(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values.sum()
}

impl Report {
    fn of(threads: &[ThreadView], since: Option<Millis>) -> Report {
        let mut rows: Vec<Row> = threads
            .iter()
            .filter_map(|t| {
                Some(Row {
                    thread_id: t.session.thread_id.as_str().to_owned(),
                    status: t.session.status,
                    usage: t.usage.clone()?,
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            b.usage
                .running_ms
                .cmp(&a.usage.running_ms)
                .then_with(|| a.thread_id.cmp(&b.thread_id))
        });
        let usages = || rows.iter().map(|r| &r.usage);
        let mut by_state = StateTimes::default();
        for usage in usages() {
            by_state.merge(&usage.by_state);
        }
        let by_status = Status::ALL
            .into_iter()
            .map(|status| (status, rows.iter().filter(|r| r.status == status).count()))
            .filter(|(_, n)| *n > 0)
            .collect();
        let priced = !rows.is_empty();
        let cost = |f: fn(&Usage) -> Option<f64>| {
            if priced {
                sum(usages().map(f))
            } else {
                None
            }
        };
        Report {
            since,
            threads: rows.len(),
            by_status,
            running_ms: usages().map(|u| u.running_ms).sum(),
            paused_ms: usages().map(|u| u.paused_ms).sum(),
            idle_paused_ms: usages().map(|u| u.idle_paused_ms).sum(),
            error_ms: usages().map(|u| u.error_ms).sum(),
            by_state,
            vcpu_hours: cost(|u| u.cost.map(|c| c.vcpu_hours)),
            gib_hours: cost(|u| u.cost.map(|c| c.gib_hours)),
            usd: cost(|u| u.cost.and_then(|c| c.usd)),
            saved_usd: cost(|u| u.cost.and_then(|c| c.saved_usd)),
            idle_saved_usd: cost(|u| u.cost.and_then(|c| c.idle_saved_usd)),
            incomplete: usages().filter(|u| !u.complete).count(),
            control_plane: ControlPlane::model(),
            rows,
        }
    }
}

fn render(report: &Report, top: usize, color: bool) -> String {
    if report.threads == 0 {
        return "no threads yet\n".to_owned();
    }
    let statuses = report
        .by_status
        .iter()
        .map(|(status, n)| format!("{n} {status}"))
        .collect::<Vec<_>>()
        .join(", ");
    let window = match report.since {
        Some(since) => format!("from {} to now", utc(since)),
        None => "over each thread's whole history".to_owned(),
    };
    let mut out = format!(
        "{} thread{} ({statuses}), {window}\n\n",
        report.threads,
        if report.threads == 1 { "" } else { "s" }
    );

    // Time by state: every moment of every thread is in exactly one.
    let total: u64 = report.by_state.iter().map(|(_, ms)| ms).sum();
    let mut states = Table::new(&["STATE", "TIME", "SHARE"]);
    for (status, ms) in report.by_state.iter().filter(|(_, ms)| *ms > 0) {
        states.row(vec![
            Cell::tinted(status.as_str(), tint(status)),
            Cell::from(span(ms)),
            Cell::from(format!("{}%", ms.saturating_mul(100) / total.max(1))),
        ]);
    }
    out.push_str(&states.render(color));
    out.push('\n');

    let label = |name: &str, value: String| format!("{name:<10} {value}\n");
    out.push_str(&label(
        "running",
        format!(
            "{} (creating, active, pausing, resuming: billed while up)",
            span(report.running_ms)
        ),
    ));
    out.push_str(&label(
        "paused",
        format!(
            "{} ({} of it after idle pauses; not billed)",
            span(report.paused_ms),
            span(report.idle_paused_ms)
        ),
    ));
    if report.error_ms > 0 {
        out.push_str(&label(
            "in error",
            format!("{} (not priced)", span(report.error_ms)),
        ));
    }
    if let (Some(vcpu_hours), Some(gib_hours)) = (report.vcpu_hours, report.gib_hours) {
        let resources = format!(
            "{} vCPU-h, {} GiB-h",
            resource_hours(vcpu_hours),
            resource_hours(gib_hours)
        );
        match (report.usd, report.saved_usd, report.idle_saved_usd) {
            (Some(spent), Some(saved), Some(idle)) => {
                out.push_str(&label(
                    "compute",
                    format!("{} for the running time ({resources})", usd(spent)),
                ));
                let never = spent + saved;
                let cut = if never > 0.0 {
                    format!(", {:.0}% less", 100.0 * saved / never)
                } else {
                    String::new()
                };
                out.push_str(&label(
                    "saved",
                    format!(
                        "{} by pausing ({} by the idle pause); never pausing: {}{cut}",
                        usd(saved),
                        usd(idle),
                        usd(never)
                    ),
                ));
            }
            _ => out.push_str(&label(
                "resources",
                format!(
                    "{resources} running; no prices set (THREADBOX_PRICE_VCPU_HOUR, \
                     THREADBOX_PRICE_GIB_HOUR on the server)"
                ),
            )),
        }
    }
    out.push_str(&report.control_plane.render());
    if report.incomplete > 0 {
        out.push_str(&format!(
            "note: {} thread(s) have more events than the server reads for usage; their \
             figures start at the oldest event read\n",
            report.incomplete
        ));
    }

    out.push('\n');
    let priced = report.usd.is_some();
    let mut headers = vec!["THREAD", "STATUS", "RUNNING", "PAUSED"];
    if priced {
        headers.extend(["COST", "SAVED"]);
    }
    let mut table = Table::new(&headers);
    for row in report.rows.iter().take(top) {
        let mut cells = vec![
            Cell::from(row.thread_id.as_str()),
            Cell::tinted(row.status.as_str(), tint(row.status)),
            Cell::from(span(row.usage.running_ms)),
            Cell::from(span(row.usage.paused_ms)),
        ];
        if priced {
            let cost = row.usage.cost;
            cells.push(Cell::from(
                cost.and_then(|c| c.usd).map_or_else(|| "-".into(), usd),
            ));
            cells.push(Cell::from(
                cost.and_then(|c| c.saved_usd)
                    .map_or_else(|| "-".into(), usd),
            ));
        }
        table.row(cells);
    }
    out.push_str(&table.render(color));
    if report.rows.len() > top {
        out.push_str(&format!(
            "... and {} more (--top to list more)\n",
            report.rows.len() - top
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use threadbox_core::domain::{Cause, LifecycleEvent, Pricing, Session, ThreadId, Window};

    use super::*;
    use crate::threads::render::tests::session;

    const T0: i64 = 1_793_491_200_000;
    const HOUR: i64 = 3_600_000;

    fn thread(
        id: &str,
        history: &[(Status, Cause, i64)],
        now: i64,
        pricing: &Pricing,
    ) -> ThreadView {
        let thread_id = ThreadId::parse(id).unwrap();
        let mut from = None;
        let events: Vec<LifecycleEvent> = history
            .iter()
            .zip(1..)
            .map(|(&(to, cause, at), seq)| {
                let event = LifecycleEvent {
                    event_id: format!("{id}-{seq}"),
                    thread_id: thread_id.clone(),
                    seq,
                    generation: 1,
                    from,
                    to,
                    cause,
                    at: Millis(T0 + at),
                    sandbox_id: Some(format!("sb-{id}")),
                    detail: None,
                };
                from = Some(to);
                event
            })
            .collect();
        let usage = Usage::from_events(
            &events,
            Window {
                since: None,
                now: Millis(T0 + now),
            },
            pricing,
        );
        let status = history.last().unwrap().0;
        ThreadView {
            session: Session {
                provider: "e2b".into(),
                version: 1,
                last_seq: events.len() as u64,
                last_activity_at: Millis(T0),
                next_action_at: None,
                created_at: Millis(T0),
                ..session(id, status)
            },
            idle_seconds: 0,
            usage: Some(usage),
        }
    }

    /// Two threads: one worked an hour then paused idle for 23 hours; one has run for two hours.
    fn threads(pricing: &Pricing) -> Vec<ThreadView> {
        use Status::*;
        vec![
            thread(
                "quiet",
                &[
                    (Creating, Cause::User, 0),
                    (Active, Cause::User, 0),
                    (Pausing, Cause::Idle, HOUR),
                    (Paused, Cause::Idle, HOUR),
                ],
                24 * HOUR,
                pricing,
            ),
            thread(
                "busy",
                &[
                    (Creating, Cause::User, 22 * HOUR),
                    (Active, Cause::User, 22 * HOUR),
                ],
                24 * HOUR,
                pricing,
            ),
        ]
    }

    #[test]
    fn the_report_sums_by_state_and_prices_what_pausing_saved() {
        let report = Report::of(&threads(&Pricing::E2B_DEFAULT), None);
        assert_eq!(report.threads, 2);
        assert_eq!(report.running_ms as i64, 3 * HOUR);
        assert_eq!(report.paused_ms as i64, 23 * HOUR);
        assert_eq!(report.idle_paused_ms as i64, 23 * HOUR);
        // $0.1089 a running hour for E2B's default sandbox.
        assert_eq!(format!("{:.4}", report.usd.unwrap()), "0.3267");
        assert_eq!(format!("{:.4}", report.saved_usd.unwrap()), "2.5047");
        assert_eq!(report.rows[0].thread_id, "busy", "most running time first");
        let text = render(&report, 20, false);
        assert!(
            text.starts_with(
                "2 threads (1 active, 1 paused), over each thread's whole history\n\n\
             STATE   TIME  SHARE\n\
             active  3h    11%\n\
             paused  23h   88%\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("compute    $0.3267 for the running time (6.00 vCPU-h, 1.50 GiB-h)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "saved      $2.5047 by pausing ($2.5047 by the idle pause); never pausing: \
             $2.8314, 88% less\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "THREAD  STATUS  RUNNING  PAUSED  COST     SAVED\n\
             busy    active  2h       0s      $0.2178  $0.0000\n\
             quiet   paused  1h       23h     $0.1089  $2.5047\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rows"][1]["usage"]["paused_ms"], 23 * HOUR);
    }

    /// The control plane's figure is the model's summary, in the text and in the JSON, priced or
    /// not (tests/tests/cost_model.rs checks the summary against the model and the documents).
    #[test]
    fn the_control_plane_line_is_the_models_thread_month() {
        let model = ControlPlane::model();
        assert!(model.thread_month_usd > 0.0 && model.ratio > 0.0 && model.ratio < 0.01);
        let expected = model.per_thread_usd + model.fixed_usd_per_month / model.threads as f64;
        assert!(
            (model.thread_month_usd - expected).abs() < 1e-5,
            "{model:?}"
        );
        for pricing in [
            Pricing::E2B_DEFAULT,
            Pricing::unpriced(threadbox_core::domain::SandboxSize {
                vcpus: 1.0,
                memory_gib: 0.5,
            }),
        ] {
            let report = Report::of(&threads(&pricing), None);
            let text = render(&report, 20, false);
            let line = format!(
                "control    {} a thread-month on AWS at {} threads",
                usd(model.thread_month_usd),
                model.threads
            );
            assert!(text.contains(&line), "{text}");
            let below = format!(
                "over 1% below {} threads)\n",
                model.one_percent_threads.unwrap()
            );
            assert!(text.contains(&below), "{text}");
            let json = serde_json::to_value(&report).unwrap();
            assert_eq!(
                json["control_plane"]["thread_month_usd"].as_f64(),
                Some(model.thread_month_usd)
            );
        }
    }

    #[test]
    fn without_prices_it_shows_resource_time() {
        let pricing = Pricing::unpriced(threadbox_core::domain::SandboxSize {
            vcpus: 1.0,
            memory_gib: 0.5,
        });
        let report = Report::of(&threads(&pricing), None);
        assert_eq!(report.usd, None);
        let text = render(&report, 1, false);
        assert!(
            text.contains("resources  3.00 vCPU-h, 1.50 GiB-h running; no prices set"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "THREAD  STATUS  RUNNING  PAUSED\n\
             busy    active  2h       0s\n\
             ... and 1 more (--top to list more)\n"
            ),
            "{text}"
        );
        assert_eq!(render(&Report::of(&[], None), 5, false), "no threads yet\n");
    }
}
