//! Creating a FIFO queue and its dead-letter queue, for tests and local loops against an
//! SQS-compatible server. Production queues come from the SAM template, which must match this.

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;

use super::queue::{unavailable, SqsQueueUrls};
use threadbox_core::ports::QueueError;

/// SQS's longest queue name, `.fifo` included.
const MAX_NAME_LEN: usize = 80;
/// Dead letters are kept as long as SQS allows (14 days), for an operator to look at.
const DEAD_LETTER_RETENTION_SECS: u32 = 14 * 24 * 60 * 60;

/// Create `{name}.fifo` with explicit deduplication ids (no content-based deduplication) and a
/// redrive policy sending a message to `{name}-dlq.fifo` after `max_receives` receives. Creating
/// a queue that already exists with the same attributes returns it, so this is safe to repeat.
pub async fn create_fifo_queue(
    client: &Client,
    name: &str,
    max_receives: u32,
) -> Result<SqsQueueUrls, QueueError> {
    let queue_name = format!("{name}.fifo");
    let dead_letter_name = format!("{name}-dlq.fifo");
    if dead_letter_name.len() > MAX_NAME_LEN {
        return Err(QueueError::Rejected(format!(
            "queue name {name:?} is too long: {dead_letter_name:?} exceeds SQS's {MAX_NAME_LEN} characters"
        )));
    }
    if max_receives == 0 {
        return Err(QueueError::Rejected(format!(
            "queue {name:?}: max_receives must be at least 1"
        )));
    }
    let dead_letter_url = create(
        client,
        &dead_letter_name,
        HashMap::from([
            (QueueAttributeName::FifoQueue, "true".to_owned()),
            (
                QueueAttributeName::MessageRetentionPeriod,
                DEAD_LETTER_RETENTION_SECS.to_string(),
            ),
        ]),
    )
    .await?;
    let arn = client
        .get_queue_attributes()
        .queue_url(&dead_letter_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| unavailable("GetQueueAttributes", e))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or_else(|| {
            QueueError::Unavailable(format!("SQS did not say the ARN of {dead_letter_name}"))
        })?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": arn,
        "maxReceiveCount": max_receives,
    });
    let queue_url = create(
        client,
        &queue_name,
        HashMap::from([
            (QueueAttributeName::FifoQueue, "true".to_owned()),
            (
                QueueAttributeName::ContentBasedDeduplication,
                "false".to_owned(),
            ),
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
        ]),
    )
    .await?;
    Ok(SqsQueueUrls {
        queue_url,
        dead_letter_url,
    })
}

async fn create(
    client: &Client,
    name: &str,
    attributes: HashMap<QueueAttributeName, String>,
) -> Result<String, QueueError> {
    client
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .map_err(|e| unavailable(&format!("CreateQueue {name}"), e))?
        .queue_url
        .ok_or_else(|| QueueError::Unavailable(format!("SQS did not say the URL of {name}")))
}
