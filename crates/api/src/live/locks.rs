//! One async lock per connection id, so this process never interleaves two sends to one
//! connection out of order (a replay's event N and a live event N+1, say).
//!
//! The store's compare-and-set on `last_seq` already decides *who* sends each event; the lock only
//! orders *when*, within one process. Entries live only while someone holds or waits for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

type Entry = Arc<tokio::sync::Mutex<()>>;

#[derive(Default)]
pub(crate) struct ConnectionLocks {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

/// Held while sending to one connection; dropping it frees the entry when nobody else waits.
pub(crate) struct ConnectionGuard {
    id: String,
    guard: Option<OwnedMutexGuard<()>>,
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

impl ConnectionLocks {
    pub(crate) async fn lock(&self, connection_id: &str) -> ConnectionGuard {
        let entry = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            entries.entry(connection_id.to_owned()).or_default().clone()
        };
        ConnectionGuard {
            id: connection_id.to_owned(),
            guard: Some(entry.lock_owned().await),
            entries: self.entries.clone(),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // Release under the map's lock, so no one can clone the entry between the release and
        // the count below.
        self.guard.take();
        if entries
            .get(&self.id)
            .is_some_and(|e| Arc::strong_count(e) == 1)
        {
            entries.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_holder_per_connection_and_no_leftovers() {
        let locks = Arc::new(ConnectionLocks::default());
        let first = locks.lock("c1").await;
        let other = locks.lock("c2").await;
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _g = locks.lock("c1").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "c1 is held");
        drop(other);
        drop(first);
        waiter.await.unwrap();
        assert_eq!(locks.len(), 0);
    }
}
