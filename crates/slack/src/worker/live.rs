//! A code block's reply while it runs. A command that ends within [`LIVE_AFTER`] gets its
//! reply as before; one that runs longer gets a message at once ("running for 3 s…", with the
//! output so far), edited in place with the latest output at most every [`EDIT_INTERVAL`]
//! (well inside Slack's limits for `chat.update`), and finally edited into the reply itself.
//!
//! The output is kept as it comes, up to the exec's output cap, because a streaming exec hands
//! its output over instead of returning it; the live message shows its tail.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::SlackWorker;
use crate::format::{self, escape};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{ExecRequest, ExecResult, OutputChunk, PostMessage, UpdateMessage};
use threadbox_core::usecases::UseCaseError;

/// A command running longer than this gets a live message.
pub const LIVE_AFTER: Duration = Duration::from_secs(2);
/// The live message is edited at most this often.
pub const EDIT_INTERVAL: Duration = Duration::from_secs(2);
/// Characters of output the live message shows (its tail).
const LIVE_TAIL: usize = 1_500;
/// Chunks in flight from the sandbox (each at most 16 KiB), as for the API's streams.
pub(super) const CHANNEL_CHUNKS: usize = 32;

/// Where the live message goes.
pub(super) struct LivePlace {
    pub channel: String,
    pub thread_ts: Option<String>,
}

/// The outcome of a streamed run: the result with its output filled in, and the live message
/// if one was posted (the reply edits it instead of posting anew).
pub(super) struct Streamed {
    pub result: Result<ExecResult, UseCaseError>,
    pub live_ts: Option<String>,
}

/// The output so far, as it came, up to the cap.
pub(super) struct Output {
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
    /// Both streams in arrival order, for the live view's tail.
    both: Vec<u8>,
    cap: usize,
    changed: bool,
}

impl Output {
    /// Whether a stream passed the cap (the rest was dropped).
    pub(super) fn truncated(&self) -> bool {
        self.stdout.len() >= self.cap || self.stderr.len() >= self.cap
    }

    fn push(&mut self, chunk: OutputChunk) {
        let (stream, bytes) = match chunk {
            OutputChunk::Stdout(bytes) => (&mut self.stdout, bytes),
            OutputChunk::Stderr(bytes) => (&mut self.stderr, bytes),
        };
        let room = self.cap.saturating_sub(stream.len());
        stream.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.both.extend_from_slice(&bytes);
        // The live view needs only a tail: keep the interleaved copy bounded too.
        if self.both.len() > 4 * LIVE_TAIL {
            self.both.drain(..self.both.len() - 2 * LIVE_TAIL);
        }
        self.changed = true;
    }
}

impl SlackWorker {
    /// Run `request` streaming its output, showing it live in `place` when it runs long.
    pub(super) async fn run_live(
        &self,
        thread_id: &ThreadId,
        request: ExecRequest,
        language: &str,
        place: &LivePlace,
    ) -> Streamed {
        let cap = request.output_cap;
        let (sink, chunks) = mpsc::channel(CHANNEL_CHUNKS);
        let exec = self.tb.exec_streaming(thread_id, request, sink);
        let (result, output, live_ts) = self.show_while(exec, chunks, cap, language, place).await;
        let result = result.map(|mut result| {
            result.stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            result.stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            result
        });
        Streamed { result, live_ts }
    }

    /// Drive `work` while keeping the output it sends on `chunks` (up to `cap` per stream),
    /// showing it live in `place` once it has run for [`LIVE_AFTER`]: what `work` returned,
    /// the output, and the live message if one was posted.
    pub(super) async fn show_while<R>(
        &self,
        work: impl std::future::Future<Output = R>,
        mut chunks: mpsc::Receiver<OutputChunk>,
        cap: usize,
        language: &str,
        place: &LivePlace,
    ) -> (R, Output, Option<String>) {
        tokio::pin!(work);
        let started = Instant::now();
        let mut output = Output {
            stdout: Vec::new(),
            stderr: Vec::new(),
            both: Vec::new(),
            cap,
            changed: false,
        };
        let mut live_ts: Option<String> = None;
        let mut next_show = tokio::time::Instant::now() + LIVE_AFTER;
        let mut open = true;
        let result = loop {
            tokio::select! {
                result = &mut work => break result,
                chunk = chunks.recv(), if open => match chunk {
                    Some(chunk) => output.push(chunk),
                    None => open = false,
                },
                _ = tokio::time::sleep_until(next_show) => {
                    if live_ts.is_none() || output.changed {
                        let text = live_text(language, started.elapsed(), &output.both);
                        live_ts = self.show_live(place, live_ts, text).await;
                        output.changed = false;
                    }
                    next_show = tokio::time::Instant::now() + EDIT_INTERVAL;
                }
            }
        };
        // What the command wrote last may still be in the channel.
        while let Ok(chunk) = chunks.try_recv() {
            output.push(chunk);
        }
        (result, output, live_ts)
    }

    /// Post the live message, or edit it; the ts to edit next time. A failure (a rate limit,
    /// Slack unreachable) skips this showing: the final reply still comes.
    async fn show_live(
        &self,
        place: &LivePlace,
        ts: Option<String>,
        text: String,
    ) -> Option<String> {
        match ts {
            None => match self
                .api
                .post_message(&PostMessage {
                    channel: place.channel.clone(),
                    thread_ts: place.thread_ts.clone(),
                    text,
                    blocks: None,
                })
                .await
            {
                Ok(posted) => Some(posted.ts),
                Err(error) => {
                    tracing::debug!(%error, "live message not posted; trying again later");
                    None
                }
            },
            Some(ts) => {
                let update = UpdateMessage {
                    channel: place.channel.clone(),
                    ts: ts.clone(),
                    text,
                    blocks: None,
                };
                if let Err(error) = self.api.update_message(&update).await {
                    tracing::debug!(%error, "live message not updated this time");
                }
                Some(ts)
            }
        }
    }
}

/// "⏳ `python` running for 12 s…" and the tail of the output so far.
fn live_text(language: &str, elapsed: Duration, both: &[u8]) -> String {
    let mut text = format!(
        ":hourglass_flowing_sand: `{language}` running for {}…",
        format::duration(Duration::from_secs(elapsed.as_secs()))
    );
    let so_far = String::from_utf8_lossy(both);
    if so_far.trim().is_empty() {
        text.push_str(" _(no output yet)_");
    } else {
        let total = so_far.chars().count();
        let tail: String = so_far
            .chars()
            .skip(total.saturating_sub(LIVE_TAIL))
            .collect();
        let body = escape(&tail).replace("```", "``\u{200b}`");
        text.push_str(&format!("\n```\n{}\n```", body.trim_end_matches('\n')));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_text_shows_the_tail_escaped() {
        let text = live_text("bash", Duration::from_millis(3_400), b"");
        assert!(text.contains("`bash` running for 3"), "{text}");
        assert!(text.contains("no output yet"), "{text}");
        let long = format!("{}<end>", "x".repeat(5_000));
        let text = live_text("bash", Duration::from_secs(1), long.as_bytes());
        assert!(text.contains("&lt;end&gt;"), "{text}");
        assert!(text.chars().count() < 2_000, "{}", text.len());
    }

    #[test]
    fn kept_output_stops_at_the_cap_and_the_tail_stays_bounded() {
        let mut output = Output {
            stdout: Vec::new(),
            stderr: Vec::new(),
            both: Vec::new(),
            cap: 10,
            changed: false,
        };
        for _ in 0..100 {
            output.push(OutputChunk::Stdout(vec![b'a'; 1000]));
        }
        output.push(OutputChunk::Stderr(b"oops".to_vec()));
        assert_eq!(output.stdout.len(), 10);
        assert_eq!(output.stderr, b"oops");
        assert!(output.both.len() <= 4 * LIVE_TAIL);
        assert!(output.both.ends_with(b"oops"));
    }
}
