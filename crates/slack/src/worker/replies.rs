//! The worker's replies: those to one message, posted in order (editing the live message of a
//! long command, attaching long output as a file), and a reply that met a rate limit, which goes
//! back on the work queue as a work item of its own, blocks and buttons included, and is posted
//! once.

use std::time::{Duration, Instant};

use threadbox_core::ports::{
    FileUpload, OutgoingMessage, PostMessage, RecordOutcome, UpdateMessage,
};

use serde_json::Value;

use super::{retry, SlackWorker, STARTED};
use crate::work::{IncomingMessage, PendingReply, WorkItem};

/// Kept back from a deadline for posting the replies after the last command.
pub const REPLY_MARGIN: Duration = Duration::from_secs(10);
/// A code block with less time than this left is not started.
pub const MIN_BLOCK_TIME: Duration = Duration::from_secs(5);

/// A code block's reply: text, or text with the whole output attached as a file.
pub(super) enum BlockReply {
    Text(String),
    WithFile {
        text: String,
        file: OutputFile,
        /// Posted instead (the output cut to fit) if the file cannot be shared.
        fallback: String,
    },
}

pub(super) struct OutputFile {
    pub(super) filename: String,
    pub(super) title: String,
    pub(super) bytes: Vec<u8>,
}

/// Posts the replies to one message, in order, each numbered for its queue dedup id; and marks
/// the message started before its first effect.
pub(super) struct Replies<'a> {
    worker: &'a SlackWorker,
    pub(super) message: &'a IncomingMessage,
    key: &'a str,
    pub(super) deadline: Option<Instant>,
    started: bool,
    sent: usize,
}

impl<'a> Replies<'a> {
    pub(super) fn new(
        worker: &'a SlackWorker,
        message: &'a IncomingMessage,
        key: &'a str,
        deadline: Option<Instant>,
    ) -> Self {
        Self {
            worker,
            message,
            key,
            deadline,
            started: false,
            sent: 0,
        }
    }

    /// Record, once, that the message is about to have effects (see the module docs).
    pub(super) async fn start(&mut self) {
        if !self.started {
            self.started = true;
            self.worker.mark(self.key, STARTED).await;
        }
    }

    /// The timeout the next code block gets: `limit`, cut to what is left before the deadline
    /// (less the reply margin); `None` when too little is left to start it.
    pub(super) fn time_for_block(&self, limit: Duration) -> Option<Duration> {
        let Some(deadline) = self.deadline else {
            return Some(limit);
        };
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(REPLY_MARGIN);
        (left >= MIN_BLOCK_TIME).then(|| left.min(limit))
    }

    /// Post `text` with `file` attached (Slack's external upload: the file and the text arrive
    /// as one message). When the upload fails, `fallback` is posted as an ordinary reply, so the
    /// person always gets the result.
    ///
    /// With a live message (the command ran long), the file is shared on its own and the live
    /// message is edited into the text.
    pub(super) async fn send_with_file(
        &mut self,
        text: String,
        file: OutputFile,
        fallback: String,
        live_ts: Option<String>,
    ) {
        let upload = FileUpload {
            channel: self.message.channel.clone(),
            thread_ts: self.message.reply_thread_ts.clone(),
            filename: file.filename,
            title: file.title,
            initial_comment: if live_ts.is_some() {
                String::new()
            } else {
                text.clone()
            },
            bytes: file.bytes,
        };
        match self.worker.api.upload_file(&upload).await {
            Ok(_) if live_ts.is_some() => self.finish(text, live_ts).await,
            Ok(_) => self.sent += 1,
            Err(error) => {
                tracing::warn!(%error, "could not attach the output as a file; posting it cut");
                self.finish(fallback, live_ts).await;
            }
        }
    }

    /// The reply to a code block: the live message edited into it when there is one (posted
    /// anew if the edit fails), else posted.
    pub(super) async fn finish(&mut self, text: String, live_ts: Option<String>) {
        self.finish_with(text, live_ts, None).await
    }

    /// [`Self::finish`] with Block Kit `blocks` (the text then is their fallback).
    pub(super) async fn finish_with(
        &mut self,
        text: String,
        live_ts: Option<String>,
        blocks: Option<Vec<Value>>,
    ) {
        if let Some(ts) = live_ts {
            let update = UpdateMessage {
                channel: self.message.channel.clone(),
                ts,
                text: text.clone(),
                blocks: blocks.clone(),
            };
            match self.worker.api.update_message(&update).await {
                Ok(()) => {
                    self.sent += 1;
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "could not edit the live message into the reply; posting it");
                }
            }
        }
        self.send_with(text, blocks).await;
    }

    pub(super) async fn send(&mut self, text: String) {
        self.send_with(text, None).await
    }

    /// Post a reply with `blocks`. One deferred by a rate limit goes on the work queue with its
    /// blocks, so it keeps its buttons (a code block's Undo) when it is posted.
    pub(super) async fn send_with(&mut self, text: String, blocks: Option<Vec<Value>>) {
        self.sent += 1;
        let post = PostMessage {
            channel: self.message.channel.clone(),
            thread_ts: self.message.reply_thread_ts.clone(),
            text,
            blocks,
        };
        let mut attempt = 0;
        let error = loop {
            attempt += 1;
            match self.worker.api.post_message(&post).await {
                Ok(_) => return,
                Err(error) if !error.is_retryable() => {
                    tracing::error!(%error, "reply refused by Slack; dropped");
                    return;
                }
                Err(error) => {
                    let wait = error.retry_after().unwrap_or(Duration::from_secs(attempt));
                    if attempt >= 3 || wait > self.worker.config.max_inline_wait {
                        break error;
                    }
                    tokio::time::sleep(wait).await;
                }
            }
        };
        tracing::info!(%error, "reply deferred to the work queue");
        let reply_id = format!("{}:reply:{}", self.message.event_id, self.sent);
        let item = WorkItem::Reply(PendingReply {
            thread_id: self.message.thread_id.clone(),
            channel: post.channel,
            thread_ts: post.thread_ts,
            text: post.text,
            reply_id: Some(reply_id.clone()),
            blocks: post.blocks,
        });
        let queued = OutgoingMessage {
            group_id: item.group_id(),
            dedup_id: reply_id,
            body: serde_json::to_string(&item).expect("work items serialise"),
        };
        if let Err(error) = self.worker.queue.send(&[queued]).await {
            tracing::error!(%error, "could not queue the reply; it is lost");
        }
    }
}

impl SlackWorker {
    /// Post a reply that was queued after a rate limit, once: it is recorded as posted right
    /// after Slack takes it, so a redelivery (the worker died before the queue heard) skips it.
    pub(super) async fn post_pending(&self, reply: PendingReply) -> RecordOutcome {
        let posted_key = reply
            .reply_id
            .as_ref()
            .map(|id| format!("slack:reply-posted:{id}"));
        if let Some(key) = &posted_key {
            match self.dedupe.contains(key).await {
                Ok(true) => return RecordOutcome::Delivered,
                Ok(false) => {}
                Err(error) => return retry(format!("dedupe store: {error}")),
            }
        }
        let post = PostMessage {
            channel: reply.channel,
            thread_ts: reply.thread_ts,
            text: reply.text,
            blocks: reply.blocks,
        };
        match self.api.post_message(&post).await {
            Ok(_) => {
                if let Some(key) = &posted_key {
                    if let Err(error) = self.dedupe.claim(key, self.config.message_memory).await {
                        tracing::warn!(%error, "reply posted but not recorded as posted");
                    }
                }
                RecordOutcome::Delivered
            }
            Err(error) if error.is_retryable() => RecordOutcome::Retry {
                retry_after: error.retry_after(),
            },
            Err(error) => RecordOutcome::Poison {
                reason: format!("reply refused by Slack: {error}"),
            },
        }
    }
}
