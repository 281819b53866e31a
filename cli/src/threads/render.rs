//! What the operator commands show people: thread tables, a thread's details, event timelines
//! and one-line results. Pure functions from API values to text, so they are tested as text.

use bytesize::ByteSize;
use threadbox_core::domain::{Cause, LifecycleEvent, Millis, Status, Usage};
use threadbox_core::ports::{DiskUsage, NetworkRefusals, RefusalReason};
use threadbox_core::usecases::SandboxHandle;

use super::table::{Cell, Table, Tint};
use crate::client::{CheckpointUse, ResetView, ThreadDetail, ThreadView};

/// The dashboard's badge colours, in the terminal.
pub fn tint(status: Status) -> Tint {
    match status {
        Status::Active => Tint::Green,
        Status::Creating | Status::Pausing | Status::Deleting => Tint::Yellow,
        Status::Resuming => Tint::Blue,
        Status::Paused | Status::Destroyed => Tint::Grey,
        Status::Error | Status::Expired => Tint::Red,
    }
}

pub fn threads_table(threads: &[ThreadView], color: bool) -> String {
    if threads.is_empty() {
        return "no threads yet\n".to_owned();
    }
    let with_errors = threads.iter().any(|t| t.session.last_error.is_some());
    let with_usage = threads.iter().any(|t| t.usage.is_some());
    let priced = threads
        .iter()
        .any(|t| t.usage.as_ref().is_some_and(|u| usd_of(u).is_some()));
    // Dollars when priced, else vCPU-hours when the size is known, else times only.
    let sized = threads
        .iter()
        .any(|t| t.usage.as_ref().is_some_and(|u| u.cost.is_some()));
    // Images only where some thread has one other than the host's.
    let with_images = threads.iter().any(|t| !t.session.image.is_host());
    let mut headers = vec!["THREAD", "STATUS", "IDLE", "GEN", "SANDBOX"];
    if with_images {
        headers.push("IMAGE");
    }
    headers.push("HOLDS");
    if with_usage {
        headers.extend(["RUNNING", "PAUSED"]);
        if priced {
            headers.push("COST");
        } else if sized {
            headers.push("VCPU-H");
        }
    }
    if with_errors {
        headers.push("LAST ERROR");
    }
    let mut table = Table::new(&headers);
    for thread in threads {
        let s = &thread.session;
        let mut row = vec![
            Cell::from(s.thread_id.as_str()),
            Cell::tinted(s.status.as_str(), tint(s.status)),
            Cell::from(idle(thread.idle_seconds)),
            Cell::from(s.generation.to_string()),
            Cell::from(s.sandbox_id.as_deref().unwrap_or("-")),
        ];
        if with_images {
            row.push(Cell::from(s.image.as_str()));
        }
        row.extend([
            // Live holds only: one that ran out keeps nothing awake (a background process's
            // stays in the record until its end is recorded).
            Cell::from(s.live_holds(now()).count().to_string()),
        ]);
        if with_usage {
            let usage = thread.usage.as_ref();
            row.push(Cell::from(
                usage.map_or_else(|| "-".into(), |u| span(u.running_ms)),
            ));
            row.push(Cell::from(
                usage.map_or_else(|| "-".into(), |u| span(u.paused_ms)),
            ));
            if priced {
                row.push(Cell::from(
                    usage.and_then(usd_of).map_or_else(|| "-".into(), usd),
                ));
            } else if sized {
                let hours = usage
                    .and_then(|u| u.cost)
                    .map(|c| resource_hours(c.vcpu_hours));
                row.push(Cell::from(hours.unwrap_or_else(|| "-".into())));
            }
        }
        if with_errors {
            row.push(Cell::from(s.last_error.as_deref().unwrap_or("")));
        }
        table.row(row);
    }
    table.render(color)
}

/// A thread's record as labelled lines, then its recent events as a timeline.
pub fn thread_detail(detail: &ThreadDetail, color: bool) -> String {
    let s = &detail.session.session;
    let when = |t: Option<Millis>| t.map_or_else(|| "-".to_owned(), utc);
    let now = now();
    let holds = if s.holds.is_empty() {
        "none".to_owned()
    } else {
        s.holds
            .iter()
            .map(|h| {
                if h.expires_at > now {
                    format!("{} until {}", h.owner, utc(h.expires_at))
                } else {
                    format!(
                        "{} (ran out at {}: keeps nothing awake)",
                        h.owner,
                        utc(h.expires_at)
                    )
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sandbox = match &s.sandbox_id {
        Some(id) => format!("{id} ({}, generation {})", s.provider, s.generation),
        None => format!("none ({}, generation {})", s.provider, s.generation),
    };
    let status = status_text(s.status, color);
    let mut lines = vec![
        ("thread", s.thread_id.as_str().to_owned()),
        ("status", status),
        ("idle", idle(detail.session.idle_seconds)),
        ("sandbox", sandbox),
        ("network", s.network.describe()),
        ("image", s.image.to_string()),
        ("holds", holds),
        ("last active", utc(s.last_activity_at)),
        ("created", utc(s.created_at)),
        ("paused", when(s.paused_at)),
        ("resumed", when(s.resumed_at)),
        ("destroyed", when(s.destroyed_at)),
        ("janitor due", when(s.next_action_at)),
    ];
    if let Some(disk) = detail.sandbox.as_ref().and_then(|sandbox| sandbox.disk) {
        lines.push(("disk", disk_usage(&disk)));
    }
    if let Some(kept) = &detail.checkpoints {
        lines.push(("checkpoints", checkpoint_use(kept)));
    }
    if let Some(sandbox) = &detail.sandbox {
        match &sandbox.network_refusals {
            Some(refusals) => lines.extend(refusal_lines(refusals)),
            None if s.network.is_networked() => {
                lines.push(("refused", "not counted by this provider".to_owned()))
            }
            None => {}
        }
    }
    if let Some(source) = &s.forked_from {
        lines.push(("forked from", source.to_string()));
    }
    if let Some(error) = &s.last_error {
        lines.push(("last error", error.clone()));
    }
    if let Some(usage) = &detail.usage {
        lines.extend(usage_lines(usage));
    }
    let mut out = String::new();
    for (label, value) in lines {
        out.push_str(&format!("{label:<12} {value}\n"));
    }
    out.push('\n');
    if detail.events.is_empty() {
        out.push_str("no events\n");
    } else {
        out.push_str(&timeline_header());
        for event in &detail.events {
            out.push_str(&event_line(event, color));
        }
    }
    out
}

/// What a sandbox's network refused: the counts, then one line per recent destination.
pub fn refusal_lines(refusals: &NetworkRefusals) -> Vec<(&'static str, String)> {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let counts: Vec<String> = [
        refusals
            .lookups
            .map(|n| plural(n, "DNS lookup", "DNS lookups")),
        refusals
            .connections
            .map(|n| plural(n, "proxied connection", "proxied connections")),
        refusals.packets.map(|n| plural(n, "packet", "packets")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut lines = vec![("refused", counts.join(", "))];
    for refused in refusals.recent.iter().rev() {
        let times = if refused.times == 1 {
            String::new()
        } else {
            format!(", {} times", refused.times)
        };
        let never = if refused.reason == RefusalReason::AlwaysRefused {
            ", never reachable"
        } else {
            ""
        };
        lines.push((
            "",
            format!(
                "{} by {} at {}{times}{never}",
                refused.destination,
                refused.by.describe(),
                utc(refused.at)
            ),
        ));
    }
    lines
}

/// A thread's usage as labelled lines: running and paused time, and what they cost (or the
/// resource-time, when nobody set prices).
pub fn usage_lines(usage: &Usage) -> Vec<(&'static str, String)> {
    let generations = match usage.generations.len() {
        1 => String::new(),
        n => format!(", {n} generations"),
    };
    let since = if usage.complete {
        String::new()
    } else {
        format!(", counted from {} (older events not read)", utc(usage.from))
    };
    let mut lines = vec![
        (
            "running",
            format!("{}{generations}{since}", span(usage.running_ms)),
        ),
        (
            "paused",
            if usage.idle_paused_ms > 0 {
                format!(
                    "{} ({} after idle pauses)",
                    span(usage.paused_ms),
                    span(usage.idle_paused_ms)
                )
            } else {
                span(usage.paused_ms)
            },
        ),
    ];
    if usage.error_ms > 0 {
        lines.push(("in error", format!("{} (not priced)", span(usage.error_ms))));
    }
    if let Some(cost) = &usage.cost {
        let resources = format!(
            "{} vCPU-h, {} GiB-h ({} vCPU, {} GiB)",
            resource_hours(cost.vcpu_hours),
            resource_hours(cost.gib_hours),
            cost.vcpus,
            cost.memory_gib
        );
        match (cost.usd, cost.saved_usd) {
            (Some(spent), Some(saved)) => {
                lines.push(("cost", format!("{} running: {resources}", usd(spent))));
                let idle = cost
                    .idle_saved_usd
                    .filter(|idle| *idle > 0.0)
                    .map_or_else(String::new, |idle| {
                        format!(", {} of it idle pauses", usd(idle))
                    });
                lines.push(("saved", format!("{} by pausing{idle}", usd(saved))));
            }
            _ => lines.push(("resources", format!("{resources}; no prices set"))),
        }
    }
    lines
}

/// The dollars a usage's running time cost, when priced.
pub fn usd_of(usage: &Usage) -> Option<f64> {
    usage.cost.and_then(|c| c.usd)
}

/// Dollars to four decimals under $100 (a thread's hour is cents), to two above.
pub fn usd(amount: f64) -> String {
    if amount.abs() < 100.0 {
        format!("${amount:.4}")
    } else {
        format!("${amount:.2}")
    }
}

/// Milliseconds of usage to the two largest units, as `idle` ("3h30m", "0s"), and under a
/// second in milliseconds ("450ms"), so a short state does not read as none.
pub fn span(ms: u64) -> String {
    match ms {
        1..=999 => format!("{ms}ms"),
        _ => idle(ms / 1000),
    }
}

/// Resource-hours to two decimals, or four when smaller than a tenth (a short run).
pub fn resource_hours(hours: f64) -> String {
    if hours < 0.1 {
        format!("{hours:.4}")
    } else {
        format!("{hours:.2}")
    }
}

/// "12.0 MiB of 1.9 GiB (1%), 35 of 262144 files".
/// `3 (120.0 MiB of 2.0 GiB, newest 20 kept), $0.01 a month`: outside the sandbox's own disk.
fn checkpoint_use(kept: &CheckpointUse) -> String {
    let mut text = format!(
        "{} ({} of {}, newest {} kept)",
        kept.count,
        ByteSize::b(kept.bytes).display().iec(),
        ByteSize::b(kept.max_bytes).display().iec(),
        kept.keep
    );
    if let Some(usd) = kept.usd_per_month {
        text.push_str(&format!(", ${usd:.2} a month"));
    }
    text
}

fn disk_usage(disk: &DiskUsage) -> String {
    let share = |used: u64, limit: u64| used.saturating_mul(100) / limit.max(1);
    format!(
        "{} of {} ({}%), {} of {} files",
        ByteSize::b(disk.used_bytes).display().iec(),
        ByteSize::b(disk.limit_bytes).display().iec(),
        share(disk.used_bytes, disk.limit_bytes),
        disk.used_inodes,
        disk.limit_inodes
    )
}

// Fixed widths, so a followed timeline lines up with rows that have not arrived yet. CHANGE fits
// the longest pair of states ("destroyed → creating"), CAUSE the longest cause.
const SEQ_W: usize = 5;
const AT_W: usize = 20;
const CHANGE_W: usize = 21;
const CAUSE_W: usize = 14;
const GEN_W: usize = 4;

pub fn timeline_header() -> String {
    format!(
        "{:<SEQ_W$}  {:<AT_W$}  {:<CHANGE_W$}  {:<CAUSE_W$}  {:<GEN_W$}  DETAIL\n",
        "SEQ", "AT", "CHANGE", "CAUSE", "GEN"
    )
}

/// One event as a timeline row: when, from → to, why, and whatever detail it carries.
pub fn event_line(event: &LifecycleEvent, color: bool) -> String {
    let from = event.from.map_or("-", Status::as_str);
    let change_text = format!("{from} → {}", event.to);
    let pad = CHANGE_W.saturating_sub(change_text.chars().count());
    let change = format!(
        "{from} → {}{}",
        status_text(event.to, color),
        " ".repeat(pad)
    );
    let line = format!(
        "{:<SEQ_W$}  {:<AT_W$}  {change}  {:<CAUSE_W$}  {:<GEN_W$}  {}",
        event.seq,
        utc(event.at),
        cause_name(event.cause),
        event.generation,
        event.detail.as_deref().unwrap_or(""),
    );
    format!("{}\n", line.trim_end())
}

/// The cause as the API spells it (`provider_gone`).
pub fn cause_name(cause: Cause) -> String {
    serde_json::to_value(cause)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{cause:?}"))
}

/// `resolve` and `resume`: where the thread is now and what this call did.
pub fn handle_line(handle: &SandboxHandle, color: bool) -> String {
    let mut did = Vec::new();
    if handle.created {
        did.push("created");
    }
    if handle.resumed {
        did.push("resumed");
    }
    let mut out = format!(
        "{}: {}, sandbox {} (generation {}){}\n",
        handle.thread_id.as_str(),
        status_text(handle.status, color),
        handle.sandbox_id,
        handle.generation,
        if did.is_empty() {
            String::new()
        } else {
            format!(", {}", did.join(" and "))
        },
    );
    if handle.recreated {
        out.push_str(
            "note: the previous sandbox was gone, so this is a new one; its files and processes \
             were lost\n",
        );
    }
    out
}

/// `pause`: the thread's state afterwards.
pub fn paused_line(thread: &ThreadView, color: bool) -> String {
    let s = &thread.session;
    format!(
        "{}: {}, sandbox {} (generation {})\n",
        s.thread_id.as_str(),
        status_text(s.status, color),
        s.sandbox_id.as_deref().unwrap_or("-"),
        s.generation,
    )
}

pub fn reset_lines(reset: &ResetView, color: bool) -> String {
    let mut out = handle_line(&reset.handle, color);
    out.push_str(&reset.message);
    out.push('\n');
    out
}

/// A status word in its badge colour.
fn status_text(status: Status, color: bool) -> String {
    tint(status).paint(status.as_str(), color)
}

/// How long a thread has been idle, to two units: "45s", "12m5s", "3h4m", "2d5h".
pub fn idle(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h{m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d{h}h"),
    }
}

/// Epoch milliseconds as RFC 3339 UTC to the second ("2024-03-01T12:00:05Z"): sortable, and
/// the same whatever the operator's time zone. Written out rather than pulling in a date crate
/// for one format (civil-from-days, after Howard Hinnant's date algorithms).
/// This machine's time, to tell live holds from ones that ran out.
fn now() -> Millis {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

pub fn utc(at: Millis) -> String {
    let secs = at.0.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use threadbox_core::domain::{Hold, Pricing, SandboxSize, Session, ThreadId, Window};

    use super::*;

    /// A thread's record as the tests show it (`cost`'s too).
    pub(crate) fn session(id: &str, status: Status) -> Session {
        Session {
            thread_id: ThreadId::parse(id).unwrap(),
            provider: "runc".into(),
            sandbox_id: Some(format!("sb-{id}")),
            provider_session_id: None,
            status,
            generation: 1,
            version: 3,
            last_seq: 2,
            holds: Vec::new(),
            last_activity_at: Millis(1_700_000_000_000),
            next_action_at: Some(Millis(1_700_000_600_000)),
            lease_until: None,
            created_at: Millis(1_700_000_000_000),
            paused_at: None,
            resumed_at: None,
            destroyed_at: None,
            last_error: None,
            network: Default::default(),
            image: Default::default(),
            pool_member: None,
            labels: Default::default(),
            env: Default::default(),
            forked_from: None,
        }
    }

    fn event(seq: u64, from: Option<Status>, to: Status, cause: Cause) -> LifecycleEvent {
        LifecycleEvent {
            event_id: format!("e{seq}"),
            thread_id: ThreadId::parse("demo").unwrap(),
            seq,
            generation: 1,
            from,
            to,
            cause,
            at: Millis(1_700_000_000_000 + seq as i64 * 1000),
            sandbox_id: Some("sb-demo".into()),
            detail: None,
        }
    }

    #[test]
    fn utc_matches_known_dates() {
        assert_eq!(utc(Millis(0)), "1970-01-01T00:00:00Z");
        assert_eq!(utc(Millis(1_700_000_000_999)), "2023-11-14T22:13:20Z");
        assert_eq!(utc(Millis(951_782_400_000)), "2000-02-29T00:00:00Z");
        assert_eq!(utc(Millis(4_107_542_399_000)), "2100-02-28T23:59:59Z");
        assert_eq!(utc(Millis(-1000)), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn idle_uses_the_two_largest_units() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (60, "1m"),
            (725, "12m5s"),
            (3_600, "1h"),
            (11_040, "3h4m"),
            (86_400, "1d"),
            (190_800, "2d5h"),
        ];
        for (secs, text) in cases {
            assert_eq!(idle(secs), text, "{secs}");
        }
    }

    #[test]
    fn thread_table_shows_status_idle_and_sandbox() {
        let threads = vec![
            ThreadView {
                session: session("demo", Status::Active),
                idle_seconds: 5,
                usage: None,
            },
            ThreadView {
                session: Session {
                    holds: vec![
                        Hold {
                            hold_id: "h".into(),
                            owner: "agent".into(),
                            expires_at: Millis(i64::MAX),
                        },
                        // Ran out: counted no more.
                        Hold {
                            hold_id: "process-1".into(),
                            owner: "process".into(),
                            expires_at: Millis(0),
                        },
                    ],
                    ..session("slack:T1:C2:1700.5", Status::Paused)
                },
                idle_seconds: 725,
                usage: None,
            },
        ];
        assert_eq!(
            threads_table(&threads, false),
            "THREAD              STATUS  IDLE   GEN  SANDBOX                HOLDS\n\
             demo                active  5s     1    sb-demo                0\n\
             slack:T1:C2:1700.5  paused  12m5s  1    sb-slack:T1:C2:1700.5  1\n"
        );
        assert_eq!(threads_table(&[], false), "no threads yet\n");

        // A column of images once some thread has one other than host.
        let mut imaged = threads.clone();
        imaged[0].session.image = threadbox_core::domain::ImageName::parse("python").unwrap();
        assert_eq!(
            threads_table(&imaged, false),
            "THREAD              STATUS  IDLE   GEN  SANDBOX                IMAGE   HOLDS\n\
             demo                active  5s     1    sb-demo                python  0\n\
             slack:T1:C2:1700.5  paused  12m5s  1    sb-slack:T1:C2:1700.5  host    1\n"
        );

        let broken = vec![ThreadView {
            session: Session {
                last_error: Some("runc said no".into()),
                sandbox_id: None,
                ..session("bad", Status::Error)
            },
            idle_seconds: 0,
            usage: None,
        }];
        let shown = threads_table(&broken, true);
        assert!(shown.starts_with("THREAD  STATUS  IDLE  GEN  SANDBOX  HOLDS  LAST ERROR\n"));
        assert!(shown.contains("\x1b[31merror\x1b[0m"), "{shown:?}");
        assert!(shown.contains("-        0      runc said no"), "{shown:?}");
    }

    #[test]
    fn timeline_rows_line_up_under_the_header() {
        let mut paused = event(3, Some(Status::Pausing), Status::Paused, Cause::Idle);
        paused.detail = Some("idle for 30s".into());
        let text = [
            timeline_header(),
            event_line(&event(1, None, Status::Creating, Cause::User), false),
            event_line(&paused, false),
        ]
        .concat();
        assert_eq!(
            text,
            "SEQ    AT                    CHANGE                 CAUSE           GEN   DETAIL\n\
             1      2023-11-14T22:13:21Z  - → creating           user            1\n\
             3      2023-11-14T22:13:23Z  pausing → paused       idle            1     idle for 30s\n"
        );
        let gone = event(
            9,
            Some(Status::Active),
            Status::Creating,
            Cause::ProviderGone,
        );
        assert!(event_line(&gone, false).contains("  provider_gone   "));
        let coloured = event_line(
            &event(2, Some(Status::Creating), Status::Active, Cause::User),
            true,
        );
        assert!(
            coloured.contains("creating → \x1b[32mactive\x1b[0m      user"),
            "{coloured:?}"
        );
    }

    #[test]
    fn detail_lists_the_record_then_the_timeline() {
        use threadbox_core::ports::SandboxState;
        use threadbox_core::usecases::SandboxStatus;
        let detail = ThreadDetail {
            session: ThreadView {
                session: session("demo", Status::Active),
                idle_seconds: 61,
                usage: None,
            },
            events: vec![
                event(1, None, Status::Creating, Cause::User),
                event(2, Some(Status::Creating), Status::Active, Cause::User),
            ],
            sandbox: Some(SandboxStatus {
                sandbox_id: "sb-demo".into(),
                state: SandboxState::Running,
                disk: Some(DiskUsage {
                    used_bytes: 12 << 20,
                    limit_bytes: 2 << 30,
                    used_inodes: 35,
                    limit_inodes: 262_144,
                }),
                network_refusals: None,
            }),
            usage: None,
            checkpoints: Some(CheckpointUse {
                count: 3,
                bytes: 120 << 20,
                keep: 20,
                max_bytes: 2 << 30,
                usd_per_month: Some(0.0094),
            }),
        };
        let text = thread_detail(&detail, false);
        assert!(text.starts_with(
            "thread       demo\n\
             status       active\n\
             idle         1m1s\n\
             sandbox      sb-demo (runc, generation 1)\n\
             network      restricted\n\
             image        host\n\
             holds        none\n"
        ));
        assert!(text.contains("paused       -\n"));
        assert!(text.contains("disk         12.0 MiB of 2.0 GiB (0%), 35 of 262144 files\n"));
        assert!(
            text.contains("checkpoints  3 (120.0 MiB of 2.0 GiB, newest 20 kept), $0.01 a month\n"),
            "{text}"
        );
        assert!(text.contains("janitor due  2023-11-14T22:23:20Z\n"));
        assert!(text.contains("\n\nSEQ "));
        assert!(text.ends_with("creating → active      user            1\n"));
        assert!(!text.contains("forked from"), "{text}");

        let mut forked = detail;
        forked.session.session.forked_from = Some(ThreadId::parse("src").unwrap());
        let text = thread_detail(&forked, false);
        assert!(text.contains("forked from  src\n"), "{text}");
    }

    #[test]
    fn refusals_show_their_counts_then_the_newest_destination_first() {
        use threadbox_core::ports::{RefusedBy, RefusedDestination};
        let refusals = NetworkRefusals {
            lookups: Some(2),
            connections: Some(1),
            packets: None,
            recent: vec![
                RefusedDestination {
                    destination: "other.test".into(),
                    by: RefusedBy::Dns,
                    reason: RefusalReason::NotAllowed,
                    at: Millis(1_700_000_000_000),
                    times: 2,
                },
                RefusedDestination {
                    destination: "169.254.169.254:80".into(),
                    by: RefusedBy::PacketFilter,
                    reason: RefusalReason::AlwaysRefused,
                    at: Millis(1_700_000_060_000),
                    times: 1,
                },
            ],
        };
        let lines: Vec<String> = refusal_lines(&refusals)
            .into_iter()
            .map(|(label, value)| format!("{label:<12} {value}"))
            .collect();
        assert_eq!(
            lines,
            [
                "refused      2 DNS lookups, 1 proxied connection",
                "             169.254.169.254:80 by packet filter at 2023-11-14T22:14:20Z, \
                 never reachable",
                "             other.test by DNS at 2023-11-14T22:13:20Z, 2 times",
            ]
        );
    }

    fn usage_of(events: &[LifecycleEvent], secs: i64, pricing: &Pricing) -> Usage {
        Usage::from_events(
            events,
            Window {
                since: None,
                now: Millis(1_700_000_000_000 + secs * 1000),
            },
            pricing,
        )
    }

    #[test]
    fn usage_shows_time_and_cost_or_resource_time() {
        let events = vec![
            event(1, None, Status::Creating, Cause::User),
            event(2, Some(Status::Creating), Status::Active, Cause::User),
            event(3, Some(Status::Active), Status::Pausing, Cause::Idle),
            event(4, Some(Status::Pausing), Status::Paused, Cause::Idle),
        ];
        // Running from 1s to 4s, paused (idle) from 4s to 2h.
        let priced = usage_of(&events, 7_200, &Pricing::E2B_DEFAULT);
        let lines: Vec<String> = usage_lines(&priced)
            .into_iter()
            .map(|(label, value)| format!("{label:<12} {value}"))
            .collect();
        assert_eq!(
            lines,
            [
                "running      3s",
                "paused       1h59m (1h59m after idle pauses)",
                "cost         $0.0001 running: 0.0017 vCPU-h, 0.0004 GiB-h (2 vCPU, 0.5 GiB)",
                "saved        $0.2177 by pausing, $0.2177 of it idle pauses",
            ]
        );
        let runc = usage_of(
            &events,
            7_200,
            &Pricing::unpriced(SandboxSize {
                vcpus: 1.0,
                memory_gib: 0.5,
            }),
        );
        let last = usage_lines(&runc).pop().unwrap();
        assert_eq!(
            last,
            (
                "resources",
                "0.0008 vCPU-h, 0.0004 GiB-h (1 vCPU, 0.5 GiB); no prices set".to_owned()
            )
        );

        let mut threads = vec![ThreadView {
            session: session("demo", Status::Paused),
            idle_seconds: 5,
            usage: Some(priced),
        }];
        assert_eq!(
            threads_table(&threads, false),
            "THREAD  STATUS  IDLE  GEN  SANDBOX  HOLDS  RUNNING  PAUSED  COST\n\
             demo    paused  5s    1    sb-demo  0      3s       1h59m   $0.0001\n"
        );
        threads[0].usage = Some(runc);
        assert!(threads_table(&threads, false).contains("PAUSED  VCPU-H\n"));
    }

    #[test]
    fn one_line_results_say_what_happened() {
        let handle = SandboxHandle {
            pooled: false,
            thread_id: ThreadId::parse("demo").unwrap(),
            sandbox_id: "sb-1".into(),
            generation: 2,
            status: Status::Active,
            provider: "runc".into(),
            provider_session_id: None,
            created: true,
            resumed: false,
            recreated: true,
            hold_id: None,
        };
        assert_eq!(
            handle_line(&handle, false),
            "demo: active, sandbox sb-1 (generation 2), created\n\
             note: the previous sandbox was gone, so this is a new one; its files and processes \
             were lost\n"
        );
        let paused = ThreadView {
            session: session("demo", Status::Paused),
            idle_seconds: 0,
            usage: None,
        };
        assert_eq!(
            paused_line(&paused, false),
            "demo: paused, sandbox sb-demo (generation 1)\n"
        );
    }
}
