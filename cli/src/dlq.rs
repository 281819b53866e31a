//! `threadbox dlq list|redrive`: the dead-letter queues of a deployed stack, straight through
//! SQS (the shared SQS adapter), by the queues' URLs from the stack's outputs. AWS credentials,
//! region and endpoint come from the SDK's standard settings, as everywhere else.
//!
//! `list` only looks: each message is received with a short visibility and made visible again.
//! `redrive` moves messages back to their queue, in order within a thread (see
//! `SqsQueue::redrive_dead_letters`). docs/aws.md#dead-letter-runbook says when to use which.

use std::process::ExitCode;

use anyhow::Context;
use threadbox_aws::sdk::{load_config, ClientSettings};
use threadbox_aws::sqs::{SqsQueue, SqsQueueUrls};
use threadbox_core::ports::DurableQueue;

#[derive(clap::Args, Debug)]
pub struct DlqArgs {
    #[command(subcommand)]
    pub command: DlqCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum DlqCommand {
    /// Show what is in a dead-letter queue, oldest first, without taking anything out.
    List {
        #[command(flatten)]
        queues: DeadLetterQueue,
        /// At most this many messages.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per message (message_id, thread_id, receive_count, body).
        #[arg(long)]
        json: bool,
    },
    /// Move dead letters back to their queue, to be handled again (after the cause is fixed).
    Redrive {
        #[command(flatten)]
        queues: DeadLetterQueue,
        /// The queue they go back to (stack output `LifecycleQueueUrl` or `WorkQueueUrl`).
        #[arg(long, env = "THREADBOX_QUEUE_URL")]
        queue_url: String,
        /// At most this many messages.
        #[arg(long, default_value_t = 1_000)]
        limit: usize,
    },
}

#[derive(clap::Args, Debug)]
pub struct DeadLetterQueue {
    /// The dead-letter queue (stack output `LifecycleDeadLetterQueueUrl` or
    /// `WorkDeadLetterQueueUrl`).
    #[arg(long, env = "THREADBOX_DLQ_URL")]
    pub dlq_url: String,
}

pub async fn run(args: DlqArgs) -> anyhow::Result<ExitCode> {
    let sdk = load_config(&ClientSettings::default()).await;
    match args.command {
        DlqCommand::List {
            queues,
            limit,
            json,
        } => {
            // Listing never touches the source queue; its URL is not needed.
            let queue = SqsQueue::from_sdk_config(
                &sdk,
                SqsQueueUrls {
                    queue_url: String::new(),
                    dead_letter_url: queues.dlq_url.clone(),
                },
            );
            let messages = queue
                .dead_letters(limit)
                .await
                .with_context(|| format!("listing {}", queues.dlq_url))?;
            if json {
                for m in &messages {
                    let line = serde_json::json!({
                        "message_id": m.message_id,
                        "thread_id": m.group_id,
                        "dedup_id": m.dedup_id,
                        "receive_count": m.receive_count,
                        "body": m.body,
                    });
                    println!("{line}");
                }
            } else {
                println!(
                    "{:<38}  {:<8}  {:<40}  BODY",
                    "MESSAGE", "RECEIVES", "THREAD"
                );
                for m in &messages {
                    println!(
                        "{:<38}  {:<8}  {:<40}  {}",
                        m.message_id,
                        m.receive_count,
                        m.group_id,
                        shorten(&m.body, 80)
                    );
                }
                eprintln!("{} dead letter(s) in {}", messages.len(), queues.dlq_url);
            }
        }
        DlqCommand::Redrive {
            queues,
            queue_url,
            limit,
        } => {
            let queue = SqsQueue::from_sdk_config(
                &sdk,
                SqsQueueUrls {
                    queue_url: queue_url.clone(),
                    dead_letter_url: queues.dlq_url.clone(),
                },
            );
            let moved = queue
                .redrive_dead_letters(limit)
                .await
                .with_context(|| format!("redriving {} to {queue_url}", queues.dlq_url))?;
            println!(
                "moved {moved} message(s) from {} to {queue_url}",
                queues.dlq_url
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The first `max` characters on one line, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_shown_on_one_line_and_cut() {
        assert_eq!(shorten("a\nb", 80), "a b");
        assert_eq!(
            shorten(&"x".repeat(100), 10),
            format!("{}…", "x".repeat(10))
        );
    }
}
