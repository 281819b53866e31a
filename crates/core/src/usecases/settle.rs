//! Waiting for another worker's transition to settle.
//!
//! A caller that finds its thread `creating`, `pausing`, `resuming` or `deleting` under someone
//! else's lease re-reads the record until the holder is done, then carries on. Two limits shape
//! that wait, both from where it runs: behind API Gateway a Lambda's answer must come back well
//! inside the gateway's 30 s, or the client gets the gateway's bare 503 instead of ours; and each
//! look is a strongly consistent read someone pays for. So the looks start quick (a pause or a
//! resume usually settles in tens of milliseconds) and back off, each wait twice the last up to
//! `Config::settle_poll_max`, and the whole wait ends at `Config::settle_wait` with
//! `UseCaseError::Busy`, which says when to try again.

use tokio::time::{Duration, Instant};

use super::threadbox::Config;
use super::UseCaseError;
use crate::domain::Session;

/// One caller's wait for a thread to settle.
pub(crate) struct Settling {
    since: Instant,
    next_look: Duration,
}

impl Settling {
    pub(crate) fn start(config: &Config) -> Self {
        Self {
            since: Instant::now(),
            next_look: config.settle_poll,
        }
    }

    /// Sleep until the next look at `current`'s thread, or `Err(Busy)` once the wait is spent.
    pub(crate) async fn wait(
        &mut self,
        config: &Config,
        current: &Session,
    ) -> Result<(), UseCaseError> {
        match self.next_sleep(config, self.since.elapsed()) {
            Some(sleep) => {
                tokio::time::sleep(sleep).await;
                Ok(())
            }
            None => Err(UseCaseError::Busy {
                thread_id: current.thread_id.clone(),
                status: current.status,
                retry_after: config.settle_poll_max,
            }),
        }
    }

    /// The sleep before the next look, `waited` into the wait (never past its end), or `None`
    /// once it is spent.
    fn next_sleep(&mut self, config: &Config, waited: Duration) -> Option<Duration> {
        let left = config.settle_wait.saturating_sub(waited);
        if left.is_zero() {
            return None;
        }
        let sleep = self.next_look.min(left);
        self.next_look = (self.next_look * 2).min(config.settle_poll_max.max(config.settle_poll));
        Some(sleep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Change, Millis, Status, ThreadId, Timers};

    fn creating() -> Session {
        Session::new_creating(
            ThreadId::parse("settling").unwrap(),
            "test",
            Change {
                event_id: "e1".into(),
                now: Millis(0),
                detail: None,
            },
            &Timers::default(),
        )
        .0
    }

    /// The looks a whole wait takes, and how long it sleeps in all (the reads themselves
    /// taken as instant).
    fn looks(config: &Config) -> (u32, Duration) {
        let mut settling = Settling::start(config);
        let (mut looks, mut waited) = (0, Duration::ZERO);
        while let Some(sleep) = settling.next_sleep(config, waited) {
            looks += 1;
            waited += sleep;
        }
        (looks, waited)
    }

    #[test]
    fn the_lambda_wait_backs_off_to_half_a_second_and_ends_by_ten_seconds() {
        let config = Config {
            settle_wait: Duration::from_secs(10),
            ..Config::default()
        };
        // 20, 40, ... 320 ms, then 500 ms each: 620 ms in 5 looks, then 19 more to 10 s, the
        // last cut short; a fixed 20 ms poll would have looked 500 times.
        assert_eq!(looks(&config), (24, Duration::from_secs(10)));
    }

    #[test]
    fn a_wait_never_overshoots_its_end() {
        let config = Config {
            settle_wait: Duration::from_millis(30),
            settle_poll: Duration::from_millis(20),
            settle_poll_max: Duration::from_millis(500),
            ..Config::default()
        };
        assert_eq!(looks(&config), (2, Duration::from_millis(30)));
    }

    #[tokio::test]
    async fn a_spent_wait_is_busy_and_says_when_to_look_again() {
        let config = Config {
            settle_wait: Duration::ZERO,
            ..Config::default()
        };
        match Settling::start(&config).wait(&config, &creating()).await {
            Err(UseCaseError::Busy {
                status,
                retry_after,
                ..
            }) => {
                assert_eq!(status, Status::Creating);
                assert_eq!(retry_after, Duration::from_millis(500));
            }
            other => panic!("{other:?}"),
        }
    }
}
