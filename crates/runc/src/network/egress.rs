//! The egress proxy of networked sandboxes (see `network`): it listens on each sandbox's link
//! (the host end, where the sandbox's resolver sends every allowed name; its TCP 80 and 443
//! are rewritten to [`HTTP_PORT`] and [`HTTPS_PORT`] in the sandbox's own table),
//! reads the request's HTTP `Host` or TLS SNI, checks it against the sandbox's allowlist,
//! resolves the name itself and connects to the first address that may be reached.
//!
//! Plain HTTP is then served request by request (`intercept::serve_plain`, hyper on both
//! sides): every request on the connection must name the host the first one named, or it is
//! answered 421 and goes nowhere, so keep-alive and pipelining cannot carry a request for a
//! name the list does not allow to an allowed name's server (which, behind a CDN or shared
//! hosting, would serve it). TLS is a byte pipe after the ClientHello, unless an operator
//! attached credentials to the host ([`NetworkConfig::credentials`]): then `intercept`
//! terminates it and checks and adds headers to every request. A pipe of TLS cannot see the
//! requests inside it; docs/network.md#what-an-allowlist-of-names-can-promise says what that
//! leaves open.
//!
//! What the sandbox sends is read by kept parsers where one fits: the first request head by
//! `httparse` (hyper's parser; hyper reads the rest). The ClientHello's server name and the
//! resolver's DNS are small hand-written readers, every length checked, property-tested over
//! generated and spoilt input (`hostile`).
//!
//! Bounded: a connection slot per sandbox and across the provider (over them, connections are
//! closed at once), a deadline for the request head or ClientHello (at most 16 KiB), for the
//! name lookup and the connect, and an idle timeout. Hostile bytes end the connection, never
//! the process.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use super::config::NetworkConfig;
use super::dns::{resolve_a, serve_dns};
use super::intercept::{self, Interceptor};
use super::refusals::RefusalRecorder;
use threadbox_core::ports::{Allowlist, RefusalReason, RefusedBy};

/// Where the host end serves a sandbox: its resolver and the proxy's two ports. The sandbox
/// sees 53, 80 and 443 (its own table rewrites them), so the host's own services on those
/// ports, bound to every address, neither collide with these nor are reached.
pub(crate) const DNS_PORT: u16 = 47053;
pub(crate) const HTTP_PORT: u16 = 47080;
pub(crate) const HTTPS_PORT: u16 = 47443;

/// Bytes moved per read in each direction of a proxied connection: at 16 KiB the copy, not the
/// network, bounded a plain-HTTP download (`benches/runc_network.rs`). Two per connection, so
/// the provider's connection cap bounds their memory (1,024 × 128 KiB at most).
const COPY_BUFFER: usize = 64 * 1024;

/// The most bytes read before the target must be known: a TLS record's largest payload and
/// its header (a ClientHello fits in one), or an HTTP request head.
const MAX_HEAD: usize = 16 * 1024 + 5;

/// One sandbox's serving: its listening tasks, and the switch that ends its connections too
/// (dropped with it).
pub(crate) struct Serving {
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Held, never sent on: dropping it is the signal.
    pub _stop: tokio::sync::watch::Sender<()>,
}

/// Start serving one sandbox's link (`host` its host end, `sandbox` the sandbox's end): its
/// resolver and the proxy's two ports, counting what they refuse in `refusals`. `intercept`:
/// the provider's interception of hosts with credentials, if it has any.
pub(crate) async fn serve(
    host: Ipv4Addr,
    sandbox: Ipv4Addr,
    allow: Allowlist,
    config: Arc<NetworkConfig>,
    all: Arc<Semaphore>,
    refusals: Arc<RefusalRecorder>,
    intercept: Option<Arc<Interceptor>>,
) -> std::io::Result<Serving> {
    let host = IpAddr::V4(host);
    let dns = UdpSocket::bind((host, DNS_PORT)).await?;
    let http = TcpListener::bind((host, HTTP_PORT)).await?;
    let https = TcpListener::bind((host, HTTPS_PORT)).await?;
    let mine = Arc::new(Semaphore::new(config.max_connections_per_sandbox));
    let (stop, stopped) = tokio::sync::watch::channel(());
    let allow = Arc::new(allow);
    let mut tasks = vec![tokio::spawn(serve_dns(
        dns,
        sandbox,
        (*allow).clone(),
        refusals.clone(),
    ))];
    for (listener, tls) in [(http, false), (https, true)] {
        let proxy = Proxy {
            sandbox,
            allow: allow.clone(),
            config: config.clone(),
            mine: mine.clone(),
            all: all.clone(),
            tls,
            stopped: stopped.clone(),
            refusals: refusals.clone(),
            intercept: intercept.clone(),
        };
        tasks.push(tokio::spawn(proxy.accept_loop(listener)));
    }
    Ok(Serving { tasks, _stop: stop })
}

#[derive(Clone)]
struct Proxy {
    sandbox: Ipv4Addr,
    allow: Arc<Allowlist>,
    config: Arc<NetworkConfig>,
    mine: Arc<Semaphore>,
    all: Arc<Semaphore>,
    tls: bool,
    /// Ends when the sandbox's serving is dropped (its kill): its connections end with it.
    stopped: tokio::sync::watch::Receiver<()>,
    refusals: Arc<RefusalRecorder>,
    intercept: Option<Arc<Interceptor>>,
}

impl Proxy {
    async fn accept_loop(self, listener: TcpListener) {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin.
                    tracing::debug!(error = %e, "egress proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Another sandbox's traffic to this link's address: not ours to serve.
            if peer.ip() != IpAddr::V4(self.sandbox) {
                continue;
            }
            let (Ok(mine), Ok(all)) = (
                self.mine.clone().try_acquire_owned(),
                self.all.clone().try_acquire_owned(),
            ) else {
                tracing::debug!(sandbox = %self.sandbox, "egress proxy connection limit reached");
                continue;
            };
            let proxy = self.clone();
            let mut stopped = self.stopped.clone();
            tokio::spawn(async move {
                let _slots = (mine, all);
                tokio::select! {
                    result = proxy.handle(stream) => {
                        if let Err(why) = result {
                            tracing::debug!(sandbox = %proxy.sandbox, why, "egress connection ended");
                        }
                    }
                    _ = stopped.changed() => {}
                }
            });
        }
    }

    async fn handle(&self, mut client: TcpStream) -> Result<(), String> {
        let port = if self.tls { 443 } else { 80 };
        let (host, head) = tokio::time::timeout(
            self.config.handshake_timeout,
            read_target(&mut client, self.tls),
        )
        .await
        .map_err(|_| "no request in time".to_owned())??;
        if let Ok(ip) = host.parse::<IpAddr>() {
            let reason = if self.config.may_reach(ip) {
                RefusalReason::NotAllowed
            } else {
                RefusalReason::AlwaysRefused
            };
            self.refusals.refused(RefusedBy::Proxy, reason, &host);
            return refuse(
                &mut client,
                self.tls,
                format!("{host} is an address, not a name"),
            )
            .await;
        }
        if !self.allow.allows_host(&host) {
            self.refusals
                .refused(RefusedBy::Proxy, RefusalReason::NotAllowed, &host);
            return refuse(
                &mut client,
                self.tls,
                format!("{host} is not in this sandbox's allowlist"),
            )
            .await;
        }
        let upstream = self.config.upstream()?;
        let ips = tokio::time::timeout(
            self.config.connect_timeout,
            resolve_a(upstream, &host, self.config.connect_timeout),
        )
        .await
        .map_err(|_| format!("resolving {host} timed out"))?
        .map_err(|e| format!("resolving {host}: {e}"))?;
        let Some(ip) = ips
            .into_iter()
            .map(IpAddr::V4)
            .find(|ip| self.config.may_reach(*ip))
        else {
            self.refusals
                .refused(RefusedBy::Proxy, RefusalReason::AlwaysRefused, &host);
            return refuse(
                &mut client,
                self.tls,
                format!("{host} has no address this sandbox may reach"),
            )
            .await;
        };
        let upstream = SocketAddr::new(ip, port);
        if !self.tls {
            // Plain HTTP is served request by request (hyper reads each one's head and finds
            // where its body ends), so every request on a kept-alive connection is checked
            // against the host the first one named, not only the first: a pipe after the first
            // head would carry `Host: evil.test` to an allowed name's server (issue 28).
            let headers = self
                .intercept
                .as_ref()
                .map(|i| i.headers_for(&host))
                .unwrap_or_default();
            return intercept::serve_plain(client, head, host, upstream, headers, &self.config)
                .await;
        }
        if let Some(intercept) = self.intercept.as_ref().filter(|i| i.intercepts(&host)) {
            return intercept
                .serve_tls(client, head, host, upstream, &self.config)
                .await;
        }
        // TLS without credentials: the name was read from the ClientHello and the rest is the
        // sandbox's own, encrypted; a byte pipe (see
        // docs/network.md#what-an-allowlist-of-names-can-promise on what a list of names can
        // promise over TLS).
        let mut server =
            tokio::time::timeout(self.config.connect_timeout, TcpStream::connect(upstream))
                .await
                .map_err(|_| format!("connecting to {host} ({ip}) timed out"))?
                .map_err(|e| format!("connecting to {host} ({ip}): {e}"))?;
        server
            .write_all(&head)
            .await
            .map_err(|e| format!("writing to {host}: {e}"))?;
        pump(client, server, self.config.idle_timeout).await;
        Ok(())
    }
}

/// Refuse a connection: plain HTTP gets a 403 naming why, TLS is closed.
async fn refuse(client: &mut TcpStream, tls: bool, why: String) -> Result<(), String> {
    if !tls {
        let body = format!("threadbox: {why}\n");
        let reply = format!(
            "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = client.write_all(reply.as_bytes()).await;
    }
    Err(why)
}

/// What the first bytes of a connection name.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// Not enough bytes yet.
    More,
    Host(String),
    Invalid(&'static str),
}

/// Read until the target host is known; it and the bytes read (sent on as they are).
async fn read_target(client: &mut TcpStream, tls: bool) -> Result<(String, Vec<u8>), String> {
    let mut head = Vec::with_capacity(2048);
    let mut buf = [0u8; 4096];
    loop {
        let n = client
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return Err("closed before naming a host".into());
        }
        head.extend_from_slice(&buf[..n]);
        let target = if tls { sni(&head) } else { http_host(&head) };
        match target {
            Target::Host(host) => return Ok((host, head)),
            Target::Invalid(why) => return Err(why.into()),
            Target::More if head.len() >= MAX_HEAD => {
                return Err("the request head is too large".into())
            }
            Target::More => {}
        }
    }
}

/// Headers read from a request head: hyper's own limit.
const MAX_HEADERS: usize = 100;

/// The `Host` of an HTTP/1 request head, without its port. The head is read by `httparse`, the
/// parser hyper itself uses (which then serves the connection from these same bytes).
fn http_host(head: &[u8]) -> Target {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Partial) => return Target::More,
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            return Target::Invalid("a request head with too many headers")
        }
        Err(_) => return Target::Invalid("a malformed request head"),
    }
    let mut hosts = request
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| std::str::from_utf8(h.value));
    let (Some(Ok(host)), None) = (hosts.next(), hosts.next()) else {
        return Target::Invalid("a request names one Host");
    };
    host_without_port(host.trim())
}

fn host_without_port(host: &str) -> Target {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((addr, _)) => addr,
            None => return Target::Invalid("a bad Host"),
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return Target::Invalid("a bad Host"),
            None => host,
        }
    };
    if name.is_empty() || name.len() > 253 {
        return Target::Invalid("a bad Host");
    }
    Target::Host(name.to_ascii_lowercase())
}

/// The server name of a TLS ClientHello (in its first record).
fn sni(buf: &[u8]) -> Target {
    if buf.len() < 5 {
        return Target::More;
    }
    if buf[0] != 22 || buf[1] != 3 {
        return Target::Invalid("not a TLS handshake");
    }
    let record_len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
    if buf.len() < 5 + record_len {
        return Target::More;
    }
    match parse_client_hello(&buf[5..5 + record_len]) {
        Some(Some(name)) => host_without_port(&name),
        Some(None) => Target::Invalid("a ClientHello without a server name"),
        None => Target::Invalid("a malformed ClientHello"),
    }
}

/// `None` when malformed (or split over records), `Some(None)` without SNI.
fn parse_client_hello(hs: &[u8]) -> Option<Option<String>> {
    let mut r = Reader { buf: hs, at: 0 };
    if r.u8()? != 1 {
        return None;
    }
    let len = r.u24()?;
    let body = r.take(len)?;
    let mut r = Reader { buf: body, at: 0 };
    r.take(2 + 32)?; // version, random
    let n = r.u8()? as usize;
    r.take(n)?; // session id
    let n = r.u16()? as usize;
    r.take(n)?; // cipher suites
    let n = r.u8()? as usize;
    r.take(n)?; // compression methods
    if r.at == body.len() {
        return Some(None);
    }
    let n = r.u16()? as usize;
    let mut ext = Reader {
        buf: r.take(n)?,
        at: 0,
    };
    while ext.at < ext.buf.len() {
        let kind = ext.u16()?;
        let n = ext.u16()? as usize;
        let data = ext.take(n)?;
        if kind != 0 {
            continue;
        }
        let mut list = Reader { buf: data, at: 0 };
        let n = list.u16()? as usize;
        let mut names = Reader {
            buf: list.take(n)?,
            at: 0,
        };
        while names.at < names.buf.len() {
            let name_type = names.u8()?;
            let n = names.u16()? as usize;
            let name = names.take(n)?;
            if name_type == 0 {
                let name = std::str::from_utf8(name).ok()?;
                return Some(Some(name.to_owned()));
            }
        }
        return Some(None);
    }
    Some(None)
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u24(&mut self) -> Option<usize> {
        let b = self.take(3)?;
        Some((b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize)
    }
}

/// Copy both ways until both sides are done or nothing moved for `idle`.
async fn pump(client: TcpStream, server: TcpStream, idle: Duration) {
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let both = async {
        tokio::join!(
            copy_half(cr, sw, &last, start),
            copy_half(sr, cw, &last, start)
        )
    };
    let watch = async {
        loop {
            tokio::time::sleep(idle / 4).await;
            let quiet = start
                .elapsed()
                .saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
            if quiet >= idle {
                return;
            }
        }
    };
    tokio::select! {
        _ = both => {}
        _ = watch => {}
    }
}

async fn copy_half(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    last: &AtomicU64,
    start: Instant,
) {
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::super::hostile::Rng;
    use super::*;

    /// A ClientHello as a TLS client sends it, naming `name`.
    pub(crate) fn client_hello(name: &str) -> Vec<u8> {
        let mut sni = Vec::new();
        let entry_len = 3 + name.len();
        sni.extend_from_slice(&(entry_len as u16).to_be_bytes());
        sni.push(0);
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name.as_bytes());
        let mut exts = Vec::new();
        exts.extend_from_slice(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]); // ec_point_formats
        exts.extend_from_slice(&[0x00, 0x00]);
        exts.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        exts.extend_from_slice(&sni);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 2, 0x13, 0x01]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut record = vec![22, 3, 1];
        record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        record.extend_from_slice(&hs);
        record
    }

    #[test]
    fn sni_is_read_from_a_client_hello() {
        let hello = client_hello("Pkg.Test");
        assert_eq!(sni(&hello), Target::Host("pkg.test".into()));
        for cut in 0..hello.len() {
            assert_eq!(sni(&hello[..cut]), Target::More, "{cut}");
        }
        assert!(matches!(sni(b"GET / HTTP/1.1\r\n"), Target::Invalid(_)));
    }

    #[test]
    fn hostile_client_hellos_are_refused_without_panics() {
        let hello = client_hello("pkg.test");
        // Every byte of the handshake flipped in turn, and lengths pointing past the end.
        for i in 5..hello.len() {
            for value in [0u8, 0xFF, 0x80] {
                let mut bad = hello.clone();
                bad[i] = value;
                let _ = sni(&bad);
            }
        }
        let mut no_sni = hello.clone();
        no_sni.truncate(5 + 4 + 2 + 32 + 1 + 4 + 2);
        let len = (no_sni.len() - 5) as u16;
        no_sni[3..5].copy_from_slice(&len.to_be_bytes());
        assert!(matches!(sni(&no_sni), Target::Invalid(_)));
    }

    #[test]
    fn http_host_is_read_from_the_head() {
        let req = b"GET / HTTP/1.1\r\nHost: PKG.test:8080\r\nAccept: */*\r\n\r\n";
        assert_eq!(http_host(req), Target::Host("pkg.test".into()));
        assert_eq!(http_host(&req[..20]), Target::More);
        let two = b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n";
        assert!(matches!(http_host(two), Target::Invalid(_)));
        let none = b"GET / HTTP/1.0\r\n\r\n";
        assert!(matches!(http_host(none), Target::Invalid(_)));
        let v6 = b"GET / HTTP/1.1\r\nhost: [2001:db8::1]:80\r\n\r\n";
        assert_eq!(http_host(v6), Target::Host("2001:db8::1".into()));
        assert!(matches!(
            http_host(b"GET / HTTP/1.1\r\nHost: a:b\r\n\r\n"),
            Target::Invalid(_)
        ));
    }

    /// What a hostile peer's bytes may make of a target: more to read, a refusal, or a name
    /// that fits DNS's length and is lowercase (so the allowlist compares like with like).
    fn sane(target: &Target) {
        if let Target::Host(host) = target {
            assert!(!host.is_empty() && host.len() <= 253, "{host:?}");
            assert_eq!(*host, host.to_ascii_lowercase());
        }
    }

    fn well_formed(name: &str) -> bool {
        name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    }

    #[test]
    fn generated_client_hellos_and_spoilt_ones_are_read_or_refused_never_a_panic() {
        for seed in 0..3000 {
            let mut rng = Rng::new(seed);
            let name = rng.name();
            let hello = client_hello(&name);
            let read = sni(&hello);
            if well_formed(&name) {
                assert_eq!(read, Target::Host(name.to_ascii_lowercase()), "seed {seed}");
            }
            sane(&read);
            let cut = rng.below(hello.len());
            assert_eq!(sni(&hello[..cut]), Target::More, "seed {seed}");
            for _ in 0..8 {
                sane(&sni(&rng.mutate(&hello)));
            }
            let len = rng.below(300);
            let noise = rng.bytes(len);
            sane(&sni(&noise));
            // A handshake header that claims more than is there, with noise after it.
            let mut claimed = vec![22, 3, 1, 0x40, 0x00, 1, 0xFF, 0xFF, 0xFF];
            claimed.extend_from_slice(&noise);
            claimed.resize(5 + 0x4000, 0);
            sane(&sni(&claimed));
        }
    }

    #[test]
    fn generated_request_heads_and_spoilt_ones_are_read_or_refused_never_a_panic() {
        for seed in 0..3000 {
            let mut rng = Rng::new(seed);
            let name = rng.name();
            let port = match rng.below(3) {
                0 => String::new(),
                1 => format!(":{}", rng.below(70000)),
                _ => ":".into(),
            };
            let mut head = format!("GET /{} HTTP/1.1\r\n", rng.below(1000));
            for _ in 0..rng.below(4) {
                head.push_str(&format!("X-{}: {}\r\n", rng.below(100), rng.below(1000)));
            }
            head.push_str(&format!("Host: {name}{port}\r\n\r\n"));
            let read = http_host(head.as_bytes());
            if well_formed(&name) && port != ":" {
                assert_eq!(
                    read,
                    Target::Host(name.to_ascii_lowercase()),
                    "seed {seed}: {head:?}"
                );
            }
            sane(&read);
            let cut = rng.below(head.len());
            assert!(
                matches!(
                    http_host(&head.as_bytes()[..cut]),
                    Target::More | Target::Invalid(_)
                ),
                "seed {seed}"
            );
            for _ in 0..8 {
                sane(&http_host(&rng.mutate(head.as_bytes())));
            }
            let len = rng.below(300);
            sane(&http_host(&rng.bytes(len)));
        }
        // More headers than hyper reads, and a Host hidden past them, are refused.
        let many = format!(
            "GET / HTTP/1.1\r\n{}Host: a.test\r\n\r\n",
            "X: y\r\n".repeat(200)
        );
        assert!(matches!(http_host(many.as_bytes()), Target::Invalid(_)));
        let long = format!("GET / HTTP/1.1\r\nHost: {}.test\r\n\r\n", "a".repeat(300));
        assert!(matches!(http_host(long.as_bytes()), Target::Invalid(_)));
    }
}
