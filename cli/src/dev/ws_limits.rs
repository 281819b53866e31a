//! How many live-events connections one token, and one client address, may hold open at once in
//! `threadbox dev`. A leaked token or one misbehaving client must not be able to open sockets
//! (each with a task, buffers and subscription rows) until the process runs out of descriptors.
//!
//! On AWS, API Gateway terminates the WebSockets and throttles per account; counting per token
//! there would need an index of connections by token, which the subscriptions table does not
//! have, so these caps are `threadbox dev`'s own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The caps; `threadbox dev --ws-max-per-token / --ws-max-per-address`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub per_token: usize,
    pub per_address: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        // A dashboard tab holds one connection; 20 per token leaves room for many tabs and
        // services sharing a token. Without keys every local client is 127.0.0.1, so the
        // per-address cap is the local total.
        Self {
            per_token: 20,
            per_address: 50,
        }
    }
}

#[derive(Default)]
struct Counts {
    tokens: HashMap<String, usize>,
    addresses: HashMap<IpAddr, usize>,
}

/// The open connections, counted. Cheap to clone.
#[derive(Clone, Default)]
pub struct ConnectionCounter {
    limits: ConnectionLimits,
    counts: Arc<Mutex<Counts>>,
}

/// One admitted connection; dropping it frees its place.
pub struct Admission {
    counts: Arc<Mutex<Counts>>,
    token: String,
    address: IpAddr,
}

impl ConnectionCounter {
    pub fn new(limits: ConnectionLimits) -> Self {
        Self {
            limits,
            counts: Arc::default(),
        }
    }

    /// A place for a connection with `token` from `address`, or why there is none (the text of
    /// the close frame: it must stay under 123 bytes).
    pub fn admit(&self, token: &str, address: IpAddr) -> Result<Admission, String> {
        let mut counts = self.counts.lock().expect("connection counts poisoned");
        let for_token = counts.tokens.get(token).copied().unwrap_or(0);
        if for_token >= self.limits.per_token {
            return Err(format!(
                "too_many_connections: this token has {for_token} open (limit {})",
                self.limits.per_token
            ));
        }
        let for_address = counts.addresses.get(&address).copied().unwrap_or(0);
        if for_address >= self.limits.per_address {
            return Err(format!(
                "too_many_connections: this address has {for_address} open (limit {})",
                self.limits.per_address
            ));
        }
        *counts.tokens.entry(token.to_owned()).or_default() += 1;
        *counts.addresses.entry(address).or_default() += 1;
        Ok(Admission {
            counts: self.counts.clone(),
            token: token.to_owned(),
            address,
        })
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("connection counts poisoned");
        release(&mut counts.tokens, &self.token);
        release(&mut counts.addresses, &self.address);
    }
}

/// One fewer; the entry goes when it reaches zero, so the maps hold only open connections.
fn release<K: std::hash::Hash + Eq + Clone>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_per_token_and_per_address_and_free_on_drop() {
        let counter = ConnectionCounter::new(ConnectionLimits {
            per_token: 2,
            per_address: 3,
        });
        let here: IpAddr = "127.0.0.1".parse().unwrap();
        let a1 = counter.admit("a", here).unwrap();
        let _a2 = counter.admit("a", here).unwrap();
        let err = counter.admit("a", here).err().unwrap();
        assert!(err.contains("this token has 2 open (limit 2)"), "{err}");
        let _b1 = counter.admit("b", here).unwrap();
        let err = counter.admit("b", here).err().unwrap();
        assert!(err.contains("this address has 3 open (limit 3)"), "{err}");
        let elsewhere: IpAddr = "::1".parse().unwrap();
        let _b2 = counter.admit("b", elsewhere).unwrap();
        drop(a1);
        counter.admit("a", here).unwrap();
        assert!(err.len() < 123, "fits a close frame");
        let counts = counter.counts.lock().unwrap();
        assert_eq!(
            counts.tokens.get("a"),
            Some(&1),
            "the last admission was dropped too"
        );
    }
}
