//! The runc provider's network settings: an operator's, never an API caller's. Its own module
//! because the egress proxy, its interception of hosts with credentials and the links all read
//! it.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use threadbox_core::ports::{is_always_refused, IpNet};

/// The runc provider's network settings (an operator's, never an API caller's).
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    /// The resolver the egress proxy asks for the addresses of allowed names. `None`: the first
    /// `nameserver` of the host's `/etc/resolv.conf`.
    pub dns_upstream: Option<SocketAddr>,
    /// Networks opened despite being always refused (an internal mirror, say). Only IPv4.
    pub operator_allow: Vec<IpNet>,
    /// Proxied connections one sandbox may hold at once.
    pub max_connections_per_sandbox: usize,
    /// Proxied connections all sandboxes together may hold at once.
    pub max_connections: usize,
    /// How long a client has to send its request head or TLS ClientHello.
    pub handshake_timeout: Duration,
    /// How long the proxy waits for the upstream resolver and for the connection out.
    pub connect_timeout: Duration,
    /// A proxied connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Headers the proxy adds to requests to these hosts (TLS to them is terminated with the
    /// deployment's CA, which networked sandboxes trust). Secrets: `Debug` redacts them.
    pub credentials: threadbox_core::domain::EgressCredentials,
    /// Certificates (PEM) trusted besides the host's roots when verifying a server the proxy
    /// connects to for an intercepted host: an internal CA, or a test's.
    pub upstream_ca_file: Option<PathBuf>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            dns_upstream: None,
            operator_allow: Vec::new(),
            max_connections_per_sandbox: 64,
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            credentials: threadbox_core::domain::EgressCredentials::default(),
            upstream_ca_file: None,
        }
    }
}

impl NetworkConfig {
    /// Whether the proxy or a forwarded packet may go to `ip`: not always refused, or opened by
    /// the operator.
    pub(crate) fn may_reach(&self, ip: IpAddr) -> bool {
        !is_always_refused(ip) || self.operator_allow.iter().any(|net| net.contains(ip))
    }

    /// The resolver to ask.
    pub(crate) fn upstream(&self) -> Result<SocketAddr, String> {
        if let Some(addr) = self.dns_upstream {
            return Ok(addr);
        }
        let conf = std::fs::read_to_string("/etc/resolv.conf")
            .map_err(|e| format!("cannot read /etc/resolv.conf: {e}"))?;
        conf.lines()
            .filter_map(|l| l.trim().strip_prefix("nameserver"))
            .filter_map(|rest| rest.trim().parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, 53))
            .next()
            .ok_or_else(|| "the host's /etc/resolv.conf names no nameserver".to_owned())
    }
}
