//! How much work live-events frames may ask of the server: the one place that decides it, for
//! every transport (`threadbox dev`'s own WebSocket and API Gateway's).
//!
//! Without it, each `pty_input` or `pty_resize` frame started a task of its own that ran a
//! command in the sandbox: 5,000 frames from one socket added 213 MiB to the server and made
//! other threads' requests take seconds (issue 28). Now:
//! - **frames per second**, per connection: every frame takes a token from the connection's
//!   bucket ([`FrameLimits::connection_rate`]); with none left it is refused with the error
//!   frame `too_many_frames` and nothing is done;
//! - **frames per second, per thread**: frames that do work in a thread's sandbox (`exec`,
//!   `pty*`) also take one from the thread's bucket ([`FrameLimits::thread_rate`]), shared by
//!   every connection of the process, so many connections cannot together flood one thread;
//! - **work in flight**: terminal input and resizes are queued per connection and session and
//!   written by one task at a time, what is typed while a write runs coalesced into the next
//!   write ([`FrameLimits::pty_input_backlog`] bytes at most waiting, `input_backlog_full`
//!   past it); at most [`FrameLimits::in_flight_per_connection`] such writers per connection
//!   and [`FrameLimits::in_flight_per_thread`] per thread (`too_many_in_flight` past them);
//! - **abuse closes the socket**: each refusal takes a strike from the connection's
//!   [`FrameLimits::refusals`] bucket; a client that keeps sending past its refusals until
//!   none are left gets a last error frame and is disconnected (close code 1008).
//!
//! Commands and terminal attachments have their own cap (`MAX_EXECS_PER_CONNECTION`); this
//! bounds the short work frames start. The state is per process: on AWS each instance of the ws
//! function counts what it sees (API Gateway's stage throttle bounds the rest, and `exec` and
//! `pty` frames do no work there).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::ProtocolError;
use threadbox_core::domain::ThreadId;

/// The error codes of a refusal by these limits.
pub const TOO_MANY_FRAMES: &str = "too_many_frames";
pub const TOO_MANY_IN_FLIGHT: &str = "too_many_in_flight";
pub const INPUT_BACKLOG_FULL: &str = "input_backlog_full";

/// Tracked connections (on AWS, `$disconnect` may reach another instance) beyond which idle
/// ones are forgotten.
const PRUNE_AT: usize = 4096;
/// A connection or thread quiet this long, its buckets full and nothing in flight, is forgotten.
const IDLE: Duration = Duration::from_secs(60);

/// A token bucket: `burst` at once, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub per_second: u32,
    pub burst: u32,
}

/// The limits; `FrameLimits::default()` is what `threadbox dev` and the ws function use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    /// Frames of any kind from one connection.
    pub connection_rate: Rate,
    /// Frames that do work in one thread's sandbox, from all connections together.
    pub thread_rate: Rate,
    /// Terminal writers (one per session typed into) one connection may have running.
    pub in_flight_per_connection: usize,
    /// Terminal writers for one thread, from all connections together.
    pub in_flight_per_thread: usize,
    /// Bytes of terminal input waiting for one session on one connection.
    pub pty_input_backlog: usize,
    /// Refusals a connection may collect (`burst`, forgiven at `per_second`) before it is
    /// closed.
    pub refusals: Rate,
}

impl Default for FrameLimits {
    fn default() -> Self {
        // A person types under 20 keys a second and a terminal resizes at the screen's rate
        // while dragged; a dashboard subscribes to its threads in one burst (at most 50). 100
        // a second sustained and 200 at once leave all of that room, and are far below what
        // costs the server anything: each admitted terminal frame is coalesced into a write
        // already queued.
        Self {
            connection_rate: Rate {
                per_second: 100,
                burst: 200,
            },
            thread_rate: Rate {
                per_second: 200,
                burst: 400,
            },
            in_flight_per_connection: 4,
            in_flight_per_thread: 16,
            pty_input_backlog: 64 * 1024,
            refusals: Rate {
                per_second: 10,
                burst: 100,
            },
        }
    }
}

/// Why a frame was refused, and whether the connection is now to be closed.
#[derive(Debug)]
pub struct Refusal {
    pub error: ProtocolError,
    pub close: bool,
}

impl Refusal {
    /// The refusal of a frame that named `request_id` in `thread_id`.
    pub fn naming(mut self, request_id: &str, thread_id: &ThreadId) -> Self {
        self.error = self.error.for_request(request_id).about(thread_id.as_str());
        self
    }
}

/// Any other reason to refuse a frame: answered, and the connection stays open.
impl From<ProtocolError> for Refusal {
    fn from(error: ProtocolError) -> Self {
        Self {
            error,
            close: false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Self {
        Self {
            tokens: f64::from(rate.burst),
            at: now,
        }
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens =
            (self.tokens + elapsed * f64::from(rate.per_second)).min(f64::from(rate.burst));
        self.at = now;
    }

    fn take(&mut self, rate: Rate, now: Instant) -> bool {
        self.refill(rate, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn is_full(&mut self, rate: Rate, now: Instant) -> bool {
        self.refill(rate, now);
        self.tokens >= f64::from(rate.burst)
    }
}

struct Load {
    frames: Bucket,
    strikes: Bucket,
    in_flight: usize,
    seen: Instant,
}

impl Load {
    fn new(limits: &FrameLimits, rate: Rate, now: Instant) -> Self {
        Self {
            frames: Bucket::full(rate, now),
            strikes: Bucket::full(limits.refusals, now),
            in_flight: 0,
            seen: now,
        }
    }
}

#[derive(Default)]
struct Loads {
    connections: HashMap<String, Load>,
    threads: HashMap<ThreadId, Load>,
}

/// The process's count of frames and work in flight, per connection and per thread. Shared
/// (`Arc`) by the gateway and every connection's commands.
pub struct FrameLimiter {
    limits: FrameLimits,
    loads: Mutex<Loads>,
}

impl Default for FrameLimiter {
    fn default() -> Self {
        Self::new(FrameLimits::default())
    }
}

impl std::fmt::Debug for FrameLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameLimiter")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A place in flight for one connection and thread; dropping it frees the place.
pub struct InFlight {
    limiter: Arc<FrameLimiter>,
    connection: String,
    thread: ThreadId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut loads = self.limiter.lock();
        if let Some(load) = loads.connections.get_mut(&self.connection) {
            load.in_flight = load.in_flight.saturating_sub(1);
        }
        if let Some(load) = loads.threads.get_mut(&self.thread) {
            load.in_flight = load.in_flight.saturating_sub(1);
        }
    }
}

impl FrameLimiter {
    pub fn new(limits: FrameLimits) -> Self {
        Self {
            limits,
            loads: Mutex::default(),
        }
    }

    pub fn limits(&self) -> &FrameLimits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loads> {
        self.loads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A frame arrived on `connection`: room for it, or why not.
    pub fn frame(&self, connection: &str) -> Result<(), Refusal> {
        self.frame_at(connection, Instant::now())
    }

    fn frame_at(&self, connection: &str, now: Instant) -> Result<(), Refusal> {
        let limits = self.limits;
        let mut loads = self.lock();
        prune(&mut loads, &limits, now);
        let load = loads
            .connections
            .entry(connection.to_owned())
            .or_insert_with(|| Load::new(&limits, limits.connection_rate, now));
        load.seen = now;
        if load.frames.take(limits.connection_rate, now) {
            return Ok(());
        }
        let error = ProtocolError::new(
            TOO_MANY_FRAMES,
            format!(
                "this connection sends more than {} frames a second (bursts of {}); slow down",
                limits.connection_rate.per_second, limits.connection_rate.burst
            ),
        );
        Err(strike(load, &limits, now, error))
    }

    /// A frame on `connection` that does work in `thread`'s sandbox: room for it in the
    /// thread's rate, or why not (a refusal counts against the connection).
    pub fn thread_frame(&self, connection: &str, thread: &ThreadId) -> Result<(), Refusal> {
        self.thread_frame_at(connection, thread, Instant::now())
    }

    fn thread_frame_at(
        &self,
        connection: &str,
        thread: &ThreadId,
        now: Instant,
    ) -> Result<(), Refusal> {
        let limits = self.limits;
        let mut loads = self.lock();
        let load = loads
            .threads
            .entry(thread.clone())
            .or_insert_with(|| Load::new(&limits, limits.thread_rate, now));
        load.seen = now;
        if load.frames.take(limits.thread_rate, now) {
            return Ok(());
        }
        let error = ProtocolError::new(
            TOO_MANY_FRAMES,
            format!(
                "thread {thread} gets more than {} frames a second from its connections; slow \
                 down",
                limits.thread_rate.per_second
            ),
        );
        Err(self.refuse_locked(&mut loads, connection, now, error))
    }

    /// Room for one more piece of work in flight for `connection` in `thread`: a place, freed
    /// when dropped, or why not.
    pub fn start(
        self: &Arc<Self>,
        connection: &str,
        thread: &ThreadId,
    ) -> Result<InFlight, Refusal> {
        let limits = self.limits;
        let now = Instant::now();
        let mut loads = self.lock();
        let mine = loads
            .connections
            .get(connection)
            .map_or(0, |load| load.in_flight);
        let theirs = loads.threads.get(thread).map_or(0, |load| load.in_flight);
        let full = if mine >= limits.in_flight_per_connection {
            Some(format!(
                "this connection has {mine} terminal writes in flight (at most {}); wait for \
                 one to finish",
                limits.in_flight_per_connection
            ))
        } else if theirs >= limits.in_flight_per_thread {
            Some(format!(
                "thread {thread} has {theirs} terminal writes in flight from its connections \
                 (at most {}); try again shortly",
                limits.in_flight_per_thread
            ))
        } else {
            None
        };
        if let Some(message) = full {
            let error = ProtocolError::new(TOO_MANY_IN_FLIGHT, message);
            return Err(self.refuse_locked(&mut loads, connection, now, error));
        }
        loads
            .connections
            .entry(connection.to_owned())
            .or_insert_with(|| Load::new(&limits, limits.connection_rate, now))
            .in_flight += 1;
        loads
            .threads
            .entry(thread.clone())
            .or_insert_with(|| Load::new(&limits, limits.thread_rate, now))
            .in_flight += 1;
        Ok(InFlight {
            limiter: self.clone(),
            connection: connection.to_owned(),
            thread: thread.clone(),
        })
    }

    /// Refuse a frame of `connection` for a reason found elsewhere (its input backlog is full):
    /// the refusal counts like the others.
    pub fn refuse(&self, connection: &str, error: ProtocolError) -> Refusal {
        let mut loads = self.lock();
        self.refuse_locked(&mut loads, connection, Instant::now(), error)
    }

    fn refuse_locked(
        &self,
        loads: &mut Loads,
        connection: &str,
        now: Instant,
        error: ProtocolError,
    ) -> Refusal {
        let limits = self.limits;
        let load = loads
            .connections
            .entry(connection.to_owned())
            .or_insert_with(|| Load::new(&limits, limits.connection_rate, now));
        strike(load, &limits, now, error)
    }

    /// The connection closed: forget its counts (its work in flight frees its places itself).
    pub fn forget(&self, connection: &str) {
        let mut loads = self.lock();
        if loads
            .connections
            .get(connection)
            .is_some_and(|load| load.in_flight == 0)
        {
            loads.connections.remove(connection);
        }
    }

    /// Connections and threads counted now (for tests: the counts stay bounded).
    pub fn tracked(&self) -> (usize, usize) {
        let loads = self.lock();
        (loads.connections.len(), loads.threads.len())
    }
}

/// One more refusal for `load`: the refusal, to be closed once it has none left.
fn strike(load: &mut Load, limits: &FrameLimits, now: Instant, error: ProtocolError) -> Refusal {
    if load.strikes.take(limits.refusals, now) {
        return Refusal {
            error,
            close: false,
        };
    }
    let message = format!(
        "{}; closing the connection: it kept sending after {} refusals",
        error.message, limits.refusals.burst
    );
    Refusal {
        error: ProtocolError { message, ..error },
        close: true,
    }
}

/// Forget what has been idle a while, once there is much to look at.
fn prune(loads: &mut Loads, limits: &FrameLimits, now: Instant) {
    if loads.connections.len() + loads.threads.len() < PRUNE_AT {
        return;
    }
    let idle = |load: &mut Load, rate: Rate| {
        load.in_flight == 0
            && now.saturating_duration_since(load.seen) >= IDLE
            && load.frames.is_full(rate, now)
            && load.strikes.is_full(limits.refusals, now)
    };
    loads
        .connections
        .retain(|_, load| !idle(load, limits.connection_rate));
    loads
        .threads
        .retain(|_, load| !idle(load, limits.thread_rate));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> FrameLimits {
        FrameLimits {
            connection_rate: Rate {
                per_second: 10,
                burst: 5,
            },
            thread_rate: Rate {
                per_second: 10,
                burst: 8,
            },
            in_flight_per_connection: 2,
            in_flight_per_thread: 3,
            pty_input_backlog: 16,
            refusals: Rate {
                per_second: 1,
                burst: 3,
            },
        }
    }

    fn t(s: &str) -> ThreadId {
        ThreadId::parse(s).unwrap()
    }

    #[test]
    fn a_connection_gets_its_burst_then_its_rate_then_is_closed_for_pushing_on() {
        let limiter = FrameLimiter::new(small());
        let start = Instant::now();
        for _ in 0..5 {
            limiter.frame_at("c1", start).unwrap();
        }
        // Three refusals are forgiven; the fourth closes.
        for _ in 0..3 {
            let refused = limiter.frame_at("c1", start).unwrap_err();
            assert_eq!(refused.error.code, TOO_MANY_FRAMES);
            assert!(!refused.close);
        }
        let last = limiter.frame_at("c1", start).unwrap_err();
        assert!(last.close, "{last:?}");
        assert!(last.error.message.contains("closing"), "{last:?}");
        // Another connection is not touched; time refills the first.
        limiter.frame_at("c2", start).unwrap();
        limiter
            .frame_at("c1", start + Duration::from_millis(150))
            .unwrap();
    }

    #[test]
    fn a_thread_is_shared_by_its_connections_and_a_refusal_counts_against_the_sender() {
        let limiter = FrameLimiter::new(small());
        let now = Instant::now();
        for i in 0..8 {
            limiter
                .thread_frame_at(&format!("c{i}"), &t("t1"), now)
                .unwrap();
        }
        let refused = limiter.thread_frame_at("c9", &t("t1"), now).unwrap_err();
        assert!(refused.error.message.contains("thread t1"), "{refused:?}");
        limiter.thread_frame_at("c9", &t("t2"), now).unwrap();
    }

    #[test]
    fn work_in_flight_is_bounded_per_connection_and_per_thread_and_freed_on_drop() {
        let limiter = Arc::new(FrameLimiter::new(small()));
        let a = limiter.start("c1", &t("t1")).unwrap();
        let _b = limiter.start("c1", &t("t1")).unwrap();
        let refused = limiter.start("c1", &t("t2")).err().unwrap();
        assert_eq!(refused.error.code, TOO_MANY_IN_FLIGHT);
        assert!(refused.error.message.contains("this connection"));
        let _c = limiter.start("c2", &t("t1")).unwrap();
        let refused = limiter.start("c3", &t("t1")).err().unwrap();
        assert!(refused.error.message.contains("thread t1"), "{refused:?}");
        drop(a);
        limiter.start("c3", &t("t1")).unwrap();
    }

    #[test]
    fn idle_counts_are_forgotten_so_the_maps_stay_bounded() {
        let limiter = FrameLimiter::new(FrameLimits::default());
        let start = Instant::now();
        for i in 0..PRUNE_AT + 10 {
            limiter.frame_at(&format!("c{i}"), start).unwrap();
        }
        let later = start + IDLE + Duration::from_secs(5);
        limiter.frame_at("fresh", later).unwrap();
        assert_eq!(limiter.tracked(), (1, 0));
        limiter.forget("fresh");
        assert_eq!(limiter.tracked(), (0, 0));
    }
}
