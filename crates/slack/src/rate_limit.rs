//! Rate limits on the work Slack brings: messages acted on per thread and per workspace (team),
//! in one-minute windows counted in the store (the `WindowCounter` port), so every worker process
//! and Lambda invocation shares them. A message past a limit is not acted on, and the thread is
//! told once per window (the first refused message gets the reply, later ones in the same minute
//! only a log line), so a flood cannot make the bot flood back.

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::domain::{Millis, ThreadId};
use threadbox_core::ports::{Clock, StoreError, WindowCounter};

const WINDOW: Duration = Duration::from_secs(60);

/// Messages acted on per minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    pub per_thread: u64,
    pub per_team: u64,
}

impl Default for RateLimits {
    fn default() -> Self {
        // A person types a few messages a minute; an agent driving a thread hard stays under
        // ten. A workspace of busy threads shares sixty, which also bounds a script flooding
        // many threads at once.
        Self {
            per_thread: 10,
            per_team: 60,
        }
    }
}

/// What the limits say about one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Refused {
        /// The reply for the thread, or `None` when this window's refusal was already told.
        reply: Option<String>,
    },
}

#[derive(Clone)]
pub struct MessageRates {
    counter: Arc<dyn WindowCounter>,
    limits: RateLimits,
    clock: Arc<dyn Clock>,
}

impl MessageRates {
    pub fn new(counter: Arc<dyn WindowCounter>, limits: RateLimits, clock: Arc<dyn Clock>) -> Self {
        Self {
            counter,
            limits,
            clock,
        }
    }

    /// Count one message in `thread` now and say whether it may be acted on.
    pub async fn check(&self, thread: &ThreadId) -> Result<Verdict, StoreError> {
        self.check_at(thread, self.clock.now()).await
    }

    /// [`Self::check`] at `now`.
    pub async fn check_at(&self, thread: &ThreadId, now: Millis) -> Result<Verdict, StoreError> {
        let window = now.0.div_euclid(WINDOW.as_millis() as i64);
        let ends = Millis((window + 1) * WINDOW.as_millis() as i64);
        let count = |key: String| {
            let counter = self.counter.clone();
            async move { counter.increment(&key, ends, now).await }
        };
        let refused =
            if count(format!("slack:thread:{thread}:{window}")).await? > self.limits.per_thread {
                Some(format!(
                    "this thread has sent more than {} messages this minute",
                    self.limits.per_thread
                ))
            } else {
                match thread.slack_team() {
                    Some(team)
                        if count(format!("slack:team:{team}:{window}")).await?
                            > self.limits.per_team =>
                    {
                        Some(format!(
                            "this workspace has sent more than {} messages this minute",
                            self.limits.per_team
                        ))
                    }
                    _ => None,
                }
            };
        let Some(what) = refused else {
            return Ok(Verdict::Allowed);
        };
        let first = count(format!("slack:refused:{thread}:{window}")).await? == 1;
        let wait = Duration::from_millis((ends.0 - now.0).max(0) as u64).as_secs() + 1;
        tracing::info!(%thread, reason = %what, told = first, "message over the rate limit");
        Ok(Verdict::Refused {
            reply: first.then(|| {
                format!(
                    ":snail: Slow down: {what}. I am not acting on this message, nor on more \
                     in this thread for the next {wait} s. Send it again after that."
                )
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;

    #[derive(Default)]
    struct Counts(Mutex<HashMap<String, u64>>);

    #[async_trait]
    impl WindowCounter for Counts {
        async fn increment(&self, key: &str, _: Millis, _: Millis) -> Result<u64, StoreError> {
            let mut counts = self.0.lock().unwrap();
            let n = counts.entry(key.to_owned()).or_default();
            *n += 1;
            Ok(*n)
        }

        async fn add(&self, key: &str, by: i64, _: Millis, _: Millis) -> Result<u64, StoreError> {
            let mut counts = self.0.lock().unwrap();
            let n = counts.entry(key.to_owned()).or_default();
            *n = n.checked_add_signed(by).unwrap_or(*n);
            Ok(*n)
        }

        async fn take_below(
            &self,
            key: &str,
            cap: u64,
            _: Millis,
            _: Millis,
        ) -> Result<Option<u64>, StoreError> {
            let mut counts = self.0.lock().unwrap();
            let n = counts.entry(key.to_owned()).or_default();
            Ok((*n < cap).then(|| {
                *n += 1;
                *n
            }))
        }

        async fn raise(&self, key: &str, to: u64, _: Millis, _: Millis) -> Result<u64, StoreError> {
            let mut counts = self.0.lock().unwrap();
            let n = counts.entry(key.to_owned()).or_default();
            let rise = to.saturating_sub(*n);
            *n = (*n).max(to);
            Ok(rise)
        }
    }

    fn thread(ts: &str) -> ThreadId {
        ThreadId::parse(&format!("slack:T1:C1:{ts}")).unwrap()
    }

    #[tokio::test]
    async fn a_thread_past_its_limit_is_told_once_per_window() {
        let rates = MessageRates::new(
            Arc::new(Counts::default()),
            RateLimits {
                per_thread: 2,
                per_team: 100,
            },
            Arc::new(threadbox_core::ports::SystemClock),
        );
        let t = thread("1.1");
        let now = Millis(60_000 * 1000 + 15_000);
        assert_eq!(rates.check_at(&t, now).await.unwrap(), Verdict::Allowed);
        assert_eq!(rates.check_at(&t, now).await.unwrap(), Verdict::Allowed);
        let Verdict::Refused { reply: Some(reply) } = rates.check_at(&t, now).await.unwrap() else {
            panic!("the third is refused with a reply");
        };
        assert!(
            reply.contains("more than 2 messages this minute"),
            "{reply}"
        );
        assert!(reply.contains("next 46 s"), "{reply}");
        assert_eq!(
            rates.check_at(&t, now).await.unwrap(),
            Verdict::Refused { reply: None },
            "told already"
        );
        // Another thread, and the next minute, start afresh.
        assert_eq!(
            rates.check_at(&thread("1.2"), now).await.unwrap(),
            Verdict::Allowed
        );
        let next = Millis(now.0 + 60_000);
        assert_eq!(rates.check_at(&t, next).await.unwrap(), Verdict::Allowed);
    }

    #[tokio::test]
    async fn a_workspace_past_its_limit_is_refused_in_every_thread() {
        let rates = MessageRates::new(
            Arc::new(Counts::default()),
            RateLimits {
                per_thread: 100,
                per_team: 3,
            },
            Arc::new(threadbox_core::ports::SystemClock),
        );
        let now = Millis(5_000);
        for ts in ["1.1", "1.2", "1.3"] {
            assert_eq!(
                rates.check_at(&thread(ts), now).await.unwrap(),
                Verdict::Allowed
            );
        }
        let Verdict::Refused { reply: Some(reply) } =
            rates.check_at(&thread("1.4"), now).await.unwrap()
        else {
            panic!("the workspace's fourth is refused");
        };
        assert!(
            reply.contains("this workspace has sent more than 3"),
            "{reply}"
        );
        // Another workspace is not affected.
        let other = ThreadId::parse("slack:T2:C1:1.1").unwrap();
        assert_eq!(rates.check_at(&other, now).await.unwrap(), Verdict::Allowed);
    }
}
