//! The Slack fan-out target: one status card per thread, posted on the thread's first event
//! and edited in place (`chat.update`) as the sandbox changes state, plus a separate notice
//! for the changes people must not miss: expired, recreated (files lost) and error.
//!
//! The card is Block Kit: the state with its colour, a context line (generation, why and when it
//! changed, the sandbox id) and the buttons that make sense in that state (Pause, Resume,
//! Reset; see `interactions`). Its `text` is the same status as one line of mrkdwn, which Slack
//! shows in notifications and screen readers read.
//!
//! Each event reaches this target once (the fan-out core's dedupe). Within a delivery the
//! status edit comes first and is recorded with the event's seq, the notice last: when the
//! notice hits a rate limit and the event is retried, the edit is skipped as done and only the
//! notice is posted, so nothing appears twice.

use std::sync::Arc;

use async_trait::async_trait;

use serde_json::Value;

use super::blocks::{self, Action};
use super::format::escape;
use super::thread::SlackPlace;
use threadbox_core::domain::{
    Cause, ImageName, LifecycleEvent, Pricing, Status, Usage, UsageCost, Window,
};
use threadbox_core::ports::{
    ApiErrorCode, PostMessage, SlackApi, SlackError, SlackStatusStore, StatusMessage, UpdateMessage,
};
use threadbox_core::ports::{DeliveryError, FanoutTarget, SessionStore};
use threadbox_core::usecases::read_usage;

pub struct SlackStatusTarget {
    api: Arc<dyn SlackApi>,
    store: Arc<dyn SlackStatusStore>,
    /// Where the card reads the thread's running and paused time; none: the card has no
    /// usage line.
    usage: Option<UsageSource>,
}

/// The session store (for the thread's events) and what running time is priced at.
struct UsageSource {
    sessions: Arc<dyn SessionStore>,
    pricing: Pricing,
}

impl SlackStatusTarget {
    pub fn new(api: Arc<dyn SlackApi>, store: Arc<dyn SlackStatusStore>) -> Self {
        Self {
            api,
            store,
            usage: None,
        }
    }

    /// Show the thread's running and paused time so far, and what it cost, on the card (the
    /// cost ladder of `threads show`, where people look): one read of the thread's events per
    /// card edit.
    pub fn with_usage(mut self, sessions: Arc<dyn SessionStore>, pricing: Pricing) -> Self {
        self.usage = Some(UsageSource { sessions, pricing });
        self
    }

    /// The thread's usage up to `event` (its time, so a redelivery draws the same card); none
    /// without a source, and none, logged, when the events cannot be read: the card still
    /// shows the state.
    async fn usage_at(&self, event: &LifecycleEvent) -> Option<Usage> {
        let source = self.usage.as_ref()?;
        let window = Window {
            since: None,
            now: event.at,
        };
        match read_usage(
            source.sessions.as_ref(),
            &event.thread_id,
            event.seq,
            window,
            &source.pricing,
        )
        .await
        {
            Ok(usage) => Some(usage),
            Err(error) => {
                tracing::warn!(thread_id = %event.thread_id, %error, "status card drawn without usage");
                None
            }
        }
    }

    /// The thread's image as its record says, for the card (with the usage source's store;
    /// none, logged, when the record cannot be read).
    async fn image_of(&self, event: &LifecycleEvent) -> Option<ImageName> {
        let source = self.usage.as_ref()?;
        match source.sessions.load(&event.thread_id).await {
            Ok(session) => session.map(|s| s.image),
            Err(error) => {
                tracing::warn!(thread_id = %event.thread_id, %error, "status card drawn without the image");
                None
            }
        }
    }

    /// Show `event` in the thread's status message, posting it if there is none (or it was
    /// deleted), editing it otherwise; skipped when the message already shows this event or a
    /// later one.
    async fn show_status(
        &self,
        event: &LifecycleEvent,
        place: &SlackPlace,
    ) -> Result<(), DeliveryError> {
        let stored = self
            .store
            .get(&event.thread_id)
            .await
            .map_err(|e| DeliveryError::retry(format!("status store: {e}")))?;
        let text = status_text(event);
        let usage = self.usage_at(event).await;
        let image = self.image_of(event).await;
        let blocks = Some(status_card(event, usage.as_ref(), image.as_ref()));
        let ts = match stored {
            Some(message) if message.seq >= event.seq => return Ok(()),
            Some(message) => {
                let update = UpdateMessage {
                    channel: message.channel.clone(),
                    ts: message.ts.clone(),
                    text: text.clone(),
                    blocks: blocks.clone(),
                };
                match self.api.update_message(&update).await {
                    Ok(()) => message.ts,
                    // Someone deleted the status message: start a new one.
                    Err(SlackError::Api {
                        code: ApiErrorCode::MessageNotFound | ApiErrorCode::CantUpdateMessage,
                        ..
                    }) => self.post(place, text, blocks).await?,
                    Err(error) => return Err(delivery_error(error)),
                }
            }
            None => self.post(place, text, blocks).await?,
        };
        let record = StatusMessage {
            channel: place.channel.clone(),
            ts,
            seq: event.seq,
        };
        if let Err(error) = self.store.put(&event.thread_id, &record).await {
            // Slack already shows it; a retry would edit it again to the same text, harmless.
            return Err(DeliveryError::retry(format!(
                "status store: {error} (the status message is up to date)"
            )));
        }
        Ok(())
    }

    async fn post(
        &self,
        place: &SlackPlace,
        text: String,
        blocks: Option<Vec<Value>>,
    ) -> Result<String, DeliveryError> {
        let posted = self
            .api
            .post_message(&PostMessage {
                channel: place.channel.clone(),
                thread_ts: place.thread_ts.clone(),
                text,
                blocks,
            })
            .await
            .map_err(delivery_error)?;
        Ok(posted.ts)
    }
}

#[async_trait]
impl FanoutTarget for SlackStatusTarget {
    fn name(&self) -> &str {
        "slack"
    }

    async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError> {
        // Threads made through the HTTP API have no Slack conversation to show status in.
        let Some(place) = SlackPlace::of(&event.thread_id) else {
            return Ok(());
        };
        // The card shows the sandbox's state; a process starting or ending, or a checkpoint
        // (one before every code block), does not change it.
        if matches!(event.cause, Cause::Process | Cause::Checkpoint) {
            return Ok(());
        }
        self.show_status(event, &place).await?;
        if let Some(text) = notice_text(event) {
            self.post(&place, text, None).await?;
        }
        Ok(())
    }
}

/// Slack's errors as fan-out outcomes: rate limits and outages retry (after `Retry-After`),
/// the rest (a channel the app left, a revoked token) go to the dead-letter queue.
pub fn delivery_error(error: SlackError) -> DeliveryError {
    match &error {
        SlackError::RateLimited { retry_after, .. } => match retry_after {
            Some(after) => DeliveryError::retry_after(error.to_string(), *after),
            None => DeliveryError::retry(error.to_string()),
        },
        e if e.is_retryable() => DeliveryError::retry(error.to_string()),
        _ => DeliveryError::permanent(error.to_string()),
    }
}

/// The status card: the state in words and colour, a context line (with the thread's image
/// when it is not `host`), and the buttons for this state. Buttons carry the thread id, so a
/// click needs no lookup to know which thread it is for.
pub fn status_card(
    event: &LifecycleEvent,
    usage: Option<&Usage>,
    image: Option<&ImageName>,
) -> Vec<Value> {
    let (icon, words) = state_words(event.to);
    let secs = event.at.0.div_euclid(1000);
    let mut context = format!(
        "Generation {} · {} <!date^{secs}^{{ago}}|at {secs}>",
        event.generation,
        cause_phrase(event.cause),
    );
    if let Some(id) = &event.sandbox_id {
        context.push_str(&format!(" · `{}`", escape(id)));
    }
    if let Some(image) = image.filter(|i| !i.is_host()) {
        // Names are a-z, 0-9, '.', '_' and '-': nothing to escape.
        context.push_str(&format!(" · image `{image}`"));
    }
    let thread = event.thread_id.as_str();
    let buttons: Vec<Value> = buttons_for(event.to)
        .iter()
        .map(|action| blocks::button(*action, thread, None))
        .collect();
    let mut card = vec![
        blocks::section(&format!("{icon} Sandbox *{words}*")),
        blocks::context(&context),
    ];
    if let Some(usage) = usage {
        card.push(blocks::context(&usage_line(usage)));
    }
    card.extend(blocks::actions("sandbox", buttons));
    card
}

/// The card's cost line: `Ran 2h 10m · paused 5d 1h · $0.26 so far, $3.10 saved by pausing`;
/// resource-time (`1.1 vCPU-h`) when there are no prices, times alone without a size.
pub fn usage_line(usage: &Usage) -> String {
    let mut line = format!(
        "Ran {} · paused {}",
        human_ms(usage.running_ms),
        human_ms(usage.paused_ms)
    );
    match usage.cost {
        Some(UsageCost {
            usd: Some(usd),
            saved_usd,
            ..
        }) => {
            line.push_str(&format!(" · ${usd:.2} so far"));
            if let Some(saved) = saved_usd.filter(|s| *s >= 0.005) {
                line.push_str(&format!(", ${saved:.2} saved by pausing"));
            }
        }
        Some(cost) => line.push_str(&format!(" · {:.2} vCPU-h so far", cost.vcpu_hours)),
        None => {}
    }
    if !usage.complete {
        line.push_str(" (recent history only)");
    }
    line
}

/// A duration for people, to the two largest units: `0s`, `45s`, `2h 10m`, `5d 1h`.
fn human_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let parts: Vec<String> = units
        .iter()
        .scan(secs, |left, (size, name)| {
            let n = *left / size;
            *left %= size;
            Some((n, *name))
        })
        .skip_while(|(n, _)| *n == 0)
        .take(2)
        .filter(|(n, _)| *n > 0)
        .map(|(n, name)| format!("{n}{name}"))
        .collect();
    if parts.is_empty() {
        "0s".to_owned()
    } else {
        parts.join(" ")
    }
}

/// The buttons a card shows: what can be done from this state. None while a change is under
/// way (its end edits the card again).
pub fn buttons_for(status: Status) -> &'static [Action] {
    match status {
        Status::Active => &[Action::Pause, Action::Reset],
        Status::Paused => &[Action::Resume, Action::Reset],
        Status::Expired | Status::Error | Status::Destroyed => &[Action::Reset],
        Status::Creating | Status::Pausing | Status::Resuming | Status::Deleting => &[],
    }
}

pub fn state_words(status: Status) -> (&'static str, &'static str) {
    match status {
        Status::Creating => (":large_yellow_circle:", "creating…"),
        Status::Active => (":large_green_circle:", "active"),
        Status::Pausing => (":large_yellow_circle:", "pausing…"),
        Status::Paused => (
            ":white_circle:",
            "paused (files kept; the next command resumes it)",
        ),
        Status::Resuming => (":large_blue_circle:", "resuming…"),
        Status::Deleting => (":large_yellow_circle:", "deleting…"),
        Status::Destroyed => (
            ":black_circle:",
            "destroyed (files are gone; the next command starts a fresh sandbox)",
        ),
        Status::Expired => (":red_circle:", "expired (send `reset` to start again)"),
        Status::Error => (":red_circle:", "error"),
    }
}

/// The badge as one line (the card's `text` fallback): state, generation and when, in words and colours matching the dashboard's
/// (green active, yellow in transition, blue resuming, grey paused, red error).
pub fn status_text(event: &LifecycleEvent) -> String {
    let (icon, words) = state_words(event.to);
    let secs = event.at.0.div_euclid(1000);
    let mut text = format!(
        "{icon} Sandbox *{words}* · generation {} · {} <!date^{secs}^{{date_short_pretty}} {{time_secs}}|at {secs}>",
        event.generation,
        cause_phrase(event.cause),
    );
    if let Some(id) = &event.sandbox_id {
        text.push_str(&format!(" · `{}`", escape(id)));
    }
    text
}

pub fn cause_phrase(cause: Cause) -> &'static str {
    match cause {
        Cause::User => "by request",
        Cause::Idle => "after going quiet",
        Cause::Retention => "after long inactivity",
        Cause::ProviderGone => "because the provider lost it",
        Cause::ResumeFailed => "because resuming failed",
        Cause::Recreated => "replacing a lost sandbox",
        Cause::Reconcile => "to match the provider",
        Cause::Process => "as a background process started or ended",
        Cause::Budget => "because its compute budget for today is used",
        Cause::Checkpoint => "as a checkpoint was taken",
        Cause::Restore => "as a checkpoint was restored",
        Cause::Fork => "as a fork",
        Cause::Error => "after an error",
    }
}

/// A message of its own for the changes that lose work or block the thread.
pub fn notice_text(event: &LifecycleEvent) -> Option<String> {
    let detail = event
        .detail
        .as_deref()
        .map(|d| format!(" ({})", escape(d)))
        .unwrap_or_default();
    match (event.to, event.cause) {
        (Status::Expired, _) => Some(format!(
            ":warning: This thread's sandbox is gone{detail} and was not replaced, so new \
             commands are refused. Send `reset` to start a fresh sandbox."
        )),
        // The loss itself (to creating); the replacement becoming active needs no second notice.
        (Status::Creating, Cause::Recreated) => Some(format!(
            ":recycle: This thread's sandbox was lost and a fresh one is replacing it{detail}: \
             files and running processes from before are gone."
        )),
        // The pause itself (to paused); its files are kept and the thread wakes tomorrow.
        (Status::Paused, Cause::Budget) => Some(format!(
            ":money_with_wings: This thread's sandbox was paused because the day's compute \
             budget is used{detail}. Its files are kept; commands run again after the budget \
             resets at 00:00 UTC."
        )),
        (Status::Error, cause) => Some(format!(
            ":x: The sandbox hit an error ({}){detail}. The next command tries again; `reset` \
             starts fresh.",
            cause_name_of(cause)
        )),
        _ => None,
    }
}

/// The cause as the API spells it (`provider_gone`).
fn cause_name_of(cause: Cause) -> String {
    serde_json::to_value(cause)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{cause:?}"))
}
