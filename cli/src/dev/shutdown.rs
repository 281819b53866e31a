//! Ctrl-C and SIGTERM: the first asks everything to stop cleanly, a second stops at once.
//!
//! A clean stop lets in-flight requests finish, and a command may run for up to ten minutes; the
//! second signal is the way out for someone who does not want to wait for it.

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// The shutdown flag every long-running task watches. Cheap to clone.
#[derive(Clone)]
pub struct Shutdown {
    flag: Arc<watch::Sender<bool>>,
}

impl Shutdown {
    /// Start listening for SIGINT and SIGTERM.
    pub fn install() -> std::io::Result<Self> {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let shutdown = Self {
            flag: Arc::new(watch::Sender::new(false)),
        };
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = interrupt.recv() => "SIGINT",
                _ = terminate.recv() => "SIGTERM",
            };
            tracing::info!(
                "{name}: shutting down; waiting for requests in flight (signal again to stop now)"
            );
            on_signal.trigger();
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            tracing::warn!("second signal: stopping now");
            std::process::exit(130);
        });
        Ok(shutdown)
    }

    /// Ask everything to stop, as a signal would.
    pub fn trigger(&self) {
        self.flag.send_replace(true);
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.flag.subscribe()
    }

    /// Resolves once shutdown was asked for.
    pub async fn requested(&self) {
        let mut flag = self.flag.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = flag.wait_for(|stop| *stop).await;
    }
}
