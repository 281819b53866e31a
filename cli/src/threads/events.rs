//! `threadbox threads events`: a thread's lifecycle events, once or followed.
//!
//! Following polls `GET /v1/threads/{id}/events?after_seq=N`: each answer says where to continue,
//! so nothing is missed or repeated between polls, and an API restart is ridden out (transient
//! errors are retried) rather than ending the watch.

use std::time::Duration;

use super::output::Output;
use super::{render, thread_id};
use crate::client::{Client, ClientError};
use crate::duration;

/// Events asked for per call; a full page means more are waiting, so ask again at once.
const PAGE: usize = 1000;
/// The longest wait between retries while the API is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    #[arg(value_parser = thread_id)]
    thread: String,

    /// Only events with a sequence number above this.
    #[arg(long, default_value_t = 0)]
    after_seq: u64,

    /// Keep watching for new events until Ctrl-C.
    #[arg(short = 'f', long)]
    follow: bool,

    /// How often --follow asks for new events.
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    interval: Duration,
}

pub async fn run(client: &Client, args: EventsArgs, out: Output) -> anyhow::Result<()> {
    let interval = args.interval.max(Duration::from_millis(100));
    let mut after = args.after_seq;
    let mut header_shown = false;
    // While the API is unreachable: how long to wait next, and whether we said so already.
    let mut backoff = interval;
    let mut outage = false;
    loop {
        let page = match client.events(&args.thread, after, Some(PAGE)).await {
            Ok(page) => page,
            Err(error) if args.follow && error.is_transient() => {
                if !outage {
                    eprintln!("threadbox: {error}; retrying");
                    outage = true;
                }
                tokio::time::sleep(retry_delay(&error, backoff)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        if outage {
            eprintln!("threadbox: reconnected");
            outage = false;
            backoff = interval;
        }
        if !out.json && !header_shown && (args.follow || !page.events.is_empty()) {
            out.text(&render::timeline_header())?;
            header_shown = true;
        }
        for event in &page.events {
            if out.json {
                out.line(event)?;
            } else {
                out.text(&render::event_line(event, out.color))?;
            }
        }
        after = page.next_after_seq;
        if page.events.len() >= PAGE {
            continue;
        }
        if !args.follow {
            if !out.json && !header_shown {
                out.text(&no_events(args.after_seq))?;
            }
            return Ok(());
        }
        tokio::time::sleep(interval).await;
    }
}

fn no_events(after_seq: u64) -> String {
    if after_seq == 0 {
        "no events\n".to_owned()
    } else {
        format!("no events after seq {after_seq}\n")
    }
}

/// The API's own `Retry-After` when it gave one, else our back-off.
fn retry_delay(error: &ClientError, backoff: Duration) -> Duration {
    match error {
        ClientError::Api {
            retry_after: Some(secs),
            ..
        } => Duration::from_secs(*secs).min(MAX_BACKOFF),
        _ => backoff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_as_the_api_asks_within_a_bound() {
        let busy =
            ClientError::from_response(409, Some(3), br#"{"error":{"code":"busy","message":"m"}}"#);
        assert_eq!(
            retry_delay(&busy, Duration::from_secs(1)),
            Duration::from_secs(3)
        );
        let slow = ClientError::from_response(503, Some(600), b"");
        assert_eq!(retry_delay(&slow, Duration::from_secs(1)), MAX_BACKOFF);
        let plain = ClientError::from_response(503, None, b"");
        assert_eq!(
            retry_delay(&plain, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
        assert_eq!(no_events(0), "no events\n");
        assert_eq!(no_events(4), "no events after seq 4\n");
    }
}
