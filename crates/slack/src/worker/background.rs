//! Code blocks that outlive their worker. A worker with a deadline (the Lambda invocation's)
//! cannot wait for a command past it; a block whose time limit does not fit in what is left runs
//! as a background process instead (see `usecases::processes`), shown live like any long
//! command. If it ends in time, its reply is the usual one (stdout and stderr merged, as the
//! process keeps them). If not, it runs on in the sandbox: the reply says so, and a
//! [`BackgroundRun`] on the work queue has a later worker follow it, and post its output once
//! it ends, or stop it when its time limit passes. Each follow-up lasts until its own deadline
//! and hands over to the next; the final reply is claimed in the dedupe store first, so it is
//! posted once however often the hand-over is delivered.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::live::{LivePlace, CHANNEL_CHUNKS};
use super::{failure, BlockReply, SlackWorker, REPLY_MARGIN};
use crate::command::Interpreter;
use crate::format;
use crate::work::{BackgroundRun, WorkItem};
use threadbox_core::domain::{Millis, ThreadId};
use threadbox_core::ports::RecordOutcome;
use threadbox_core::ports::{
    ExecCommand, ExecResult, OutgoingMessage, OutputChunk, PostMessage, ProcessChunk, ProcessInfo,
    ProcessSignal, ProcessState, OUTPUT_CHUNK_BYTES,
};
use threadbox_core::usecases::{ProcessRequest, UseCaseError};

/// How long a stopped process is given to end before its output is read anyway.
const STOP_WAIT: Duration = Duration::from_secs(5);

impl SlackWorker {
    /// Run a code block as a background process, following it for `follow_for`; its reply,
    /// the live message to edit into it, and whether it runs on.
    pub(super) async fn run_in_background(
        &self,
        thread_id: &ThreadId,
        interpreter: Interpreter,
        code: &str,
        follow_for: Duration,
        place: &LivePlace,
    ) -> (BlockReply, Option<String>) {
        let language = interpreter.name();
        let limit = self.config.exec_timeout;
        let cap = self.config.output_cap;
        let request = ProcessRequest {
            command: ExecCommand::Argv(interpreter.argv(code)),
            cwd: None,
            env: Default::default(),
            pty: None,
            output_chunks: chunks_for(cap),
            // Held awake for the block's whole limit, then some for the follow-up to stop it.
            idle_limit: limit + Duration::from_secs(60),
            user: Default::default(),
        };
        let started = match self.tb.start_process(thread_id, request).await {
            Ok(info) => info,
            Err(error) => return (BlockReply::Text(failure(&error)), None),
        };
        let (sink, mut pieces) = mpsc::channel::<ProcessChunk>(CHANNEL_CHUNKS);
        let (chunks_tx, chunks) = mpsc::channel(CHANNEL_CHUNKS);
        // The live view takes output chunks; a process's comes as one stream.
        let relay = async move {
            while let Some(piece) = pieces.recv().await {
                if chunks_tx
                    .send(OutputChunk::Stdout(piece.data))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        };
        let follow = self
            .tb
            .follow_process_output(thread_id, &started.id, 0, follow_for, sink);
        let work = async { tokio::join!(follow, relay).0 };
        let (followed, output, live_ts) = self.show_while(work, chunks, cap, language, place).await;
        let info = match followed {
            Ok((_, Some(info))) => info,
            Ok((_, None)) => started.clone(),
            Err(error) => return (BlockReply::Text(failure(&error)), live_ts),
        };
        if info.state != ProcessState::Running {
            let truncated = output.truncated();
            let result = result_of(&info, output.stdout, truncated, false);
            let budget = self.config.reply_budget;
            return (
                BlockReply::Text(format::exec_reply(language, &result, budget)),
                live_ts,
            );
        }
        let run = BackgroundRun {
            thread_id: thread_id.clone(),
            process_id: info.id.clone(),
            language: language.to_owned(),
            channel: place.channel.clone(),
            thread_ts: place.thread_ts.clone(),
            started_at_ms: info.started_at.unwrap_or_else(|| self.tb.clock.now()).0,
            limit_ms: limit.as_millis() as u64,
            round: 0,
        };
        let text = match self.hand_over(&run).await {
            Ok(()) => format!(
                ":hourglass_flowing_sand: `{language}` is still running, so it goes on in the \
                 background (process `{}`); I'll post its output here when it ends, or stop it \
                 once it has run for {}.",
                info.id,
                format::duration(limit)
            ),
            Err(error) => {
                tracing::error!(%error, "could not queue the background follow-up");
                format!(
                    ":hourglass_flowing_sand: `{language}` is still running in the background \
                     (process `{}`), but I could not arrange to report its end: read its \
                     output with `threadbox processes logs`.",
                    info.id
                )
            }
        };
        (BlockReply::Text(text), live_ts)
    }

    /// A later worker's turn with a block running in the background: follow it until it ends
    /// (or this worker's deadline, then hand over again), stop it once its limit has passed,
    /// and post its output once.
    pub(super) async fn handle_background(
        &self,
        run: BackgroundRun,
        deadline: Option<Instant>,
    ) -> RecordOutcome {
        let limit_at = Millis(run.started_at_ms).plus(Duration::from_millis(run.limit_ms));
        let now = self.tb.clock.now();
        let mut timed_out = false;
        let info = if now >= limit_at {
            timed_out = true;
            self.stop(&run).await
        } else {
            let until_limit = Duration::from_millis((limit_at.0 - now.0) as u64);
            let until_deadline = deadline.map(|d| {
                d.saturating_duration_since(Instant::now())
                    .saturating_sub(REPLY_MARGIN)
            });
            let follow_for = until_deadline.map_or(until_limit, |d| d.min(until_limit));
            self.wait_for_end(&run, follow_for).await
        };
        let info = match info {
            Ok(info) => info,
            Err(UseCaseError::UnknownProcess { .. } | UseCaseError::UnknownThread(_)) => {
                let text = format!(
                    ":warning: The `{}` command running in the background (process `{}`) is \
                     gone: its sandbox was reset or lost.",
                    run.language, run.process_id
                );
                return self.post_once(&run, text).await;
            }
            Err(error) if error.is_retryable() => {
                return RecordOutcome::Retry { retry_after: None }
            }
            Err(error) => return self.post_once(&run, failure(&error)).await,
        };
        if info.state == ProcessState::Running {
            let next = BackgroundRun {
                round: run.round + 1,
                ..run
            };
            return match self.hand_over(&next).await {
                Ok(()) => RecordOutcome::Delivered,
                Err(error) => {
                    tracing::warn!(%error, "could not hand the background run over; retrying");
                    RecordOutcome::Retry { retry_after: None }
                }
            };
        }
        let cap = self.config.output_cap as u64;
        let output = match self
            .tb
            .read_process_output(&run.thread_id, &run.process_id, 0, cap)
            .await
        {
            Ok(output) => output,
            Err(error) => return self.post_once(&run, failure(&error)).await,
        };
        let truncated = output.offset > 0 || output.next() < output.info.output_bytes;
        let result = result_of(&output.info, output.data, truncated, timed_out);
        let text = format::exec_reply(&run.language, &result, self.config.reply_budget);
        self.post_once(&run, text).await
    }

    /// Follow the process until it ends or `follow_for` passes (its output is read whole
    /// after); how it stands then.
    async fn wait_for_end(
        &self,
        run: &BackgroundRun,
        follow_for: Duration,
    ) -> Result<ProcessInfo, UseCaseError> {
        let (sink, mut pieces) = mpsc::channel::<ProcessChunk>(CHANNEL_CHUNKS);
        let drain = async move { while pieces.recv().await.is_some() {} };
        let follow = self.tb.follow_process_output(
            &run.thread_id,
            &run.process_id,
            // Far past any output: this follow only waits for the end.
            1 << 50,
            follow_for,
            sink,
        );
        let (followed, ()) = tokio::join!(follow, drain);
        match followed? {
            (_, Some(info)) => Ok(info),
            (_, None) => Err(UseCaseError::UnknownProcess {
                thread_id: run.thread_id.clone(),
                process_id: run.process_id.clone(),
            }),
        }
    }

    /// Stop a process past its limit (its whole group) and wait briefly for it to end.
    async fn stop(&self, run: &BackgroundRun) -> Result<ProcessInfo, UseCaseError> {
        self.tb
            .signal_process(&run.thread_id, &run.process_id, ProcessSignal::Kill)
            .await?;
        self.wait_for_end(run, STOP_WAIT).await
    }

    /// Queue `run` for the next worker, in a group of its own so the thread's messages are not
    /// held up behind it.
    async fn hand_over(
        &self,
        run: &BackgroundRun,
    ) -> Result<(), threadbox_core::ports::QueueError> {
        let item = WorkItem::Background(run.clone());
        let message = OutgoingMessage {
            group_id: item.group_id(),
            dedup_id: format!("bg:{}:{}:{}", run.thread_id, run.process_id, run.round),
            body: serde_json::to_string(&item).expect("work items serialise"),
        };
        self.queue.send(&[message]).await
    }

    /// Post the final reply, once: claimed in the dedupe store first.
    async fn post_once(&self, run: &BackgroundRun, text: String) -> RecordOutcome {
        let key = format!("slack:bg:{}:{}", run.thread_id, run.process_id);
        match self.dedupe.claim(&key, self.config.message_memory).await {
            Ok(true) => {}
            Ok(false) => return RecordOutcome::Delivered,
            Err(error) => return super::retry(format!("dedupe store: {error}")),
        }
        let post = PostMessage {
            channel: run.channel.clone(),
            thread_ts: run.thread_ts.clone(),
            text,
            blocks: None,
        };
        if let Err(error) = self.api.post_message(&post).await {
            tracing::error!(%error, "the background run's reply was refused by Slack");
        }
        RecordOutcome::Delivered
    }
}

/// Enough ring chunks to keep `cap` bytes of output.
fn chunks_for(cap: usize) -> u32 {
    (cap as u64).div_ceil(OUTPUT_CHUNK_BYTES).clamp(1, 64) as u32
}

/// A process's end as an exec result, for the usual reply: its output merged as stdout.
fn result_of(info: &ProcessInfo, output: Vec<u8>, truncated: bool, timed_out: bool) -> ExecResult {
    let duration = match (info.started_at, info.ended_at) {
        (Some(start), Some(end)) => (end.0 - start.0).max(0) as u64,
        _ => 0,
    };
    ExecResult {
        // A command ended by a signal has no exit status, as for an exec.
        exit_code: info
            .exit_code
            .filter(|&code| !(129..160).contains(&code) || !timed_out),
        stdout: String::from_utf8_lossy(&output).into_owned(),
        stderr: String::new(),
        duration_ms: duration,
        timed_out,
        truncated,
        out_of_memory: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_output_cap() {
        assert_eq!(chunks_for(1024 * 1024), 4);
        assert_eq!(chunks_for(1), 1);
        assert_eq!(chunks_for(usize::MAX), 64);
    }
}
