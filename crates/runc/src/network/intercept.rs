//! HTTP at egress on runc, request by request: every plain-HTTP connection of a sandbox
//! ([`serve_plain`]), and TLS connections to hosts an operator attached credentials to
//! ([`EgressCredentials`], [`Interceptor::serve_tls`]). Every other host's TLS stays a byte
//! pipe, untouched (`egress`).
//!
//! Here the proxy is the server the sandbox talks to: for an intercepted host it terminates
//! TLS with a certificate of the deployment's CA (`egress_ca`, which the sandbox trusts);
//! hyper reads each HTTP/1.1 request (keep-alive and pipelining: every request on the
//! connection, each one's end found from its `Content-Length` or chunked coding; one whose end
//! is ambiguous is answered 400 and nothing after it is read), sets the operator's headers on
//! it if the host has any, replacing any the sandbox sent under those names, and sends it on
//! over a connection of its own to the real server (verified with the host's trust roots plus
//! an operator's extra CA, for TLS).
//!
//! Every request must name the connection's host (its `Host`, and the TLS server name): a
//! request for another name on the same connection is answered 421 and goes nowhere, so
//! neither credentials nor an unlisted name's request go with a request the proxy did not
//! check. Upgrades (WebSocket) are carried to hosts without credentials (after the server's
//! 101 the connection is a pipe of the new protocol, its upgrade request checked like any),
//! and not to hosts with credentials.
//!
//! Bounded as the proxy is: the TLS handshake and each request head within the handshake
//! deadline (a head at most [`MAX_REQUEST_BUFFER`]), the connection out within the connect
//! deadline, the whole connection closed after the idle timeout with nothing moving either
//! way. Hostile bytes end the connection.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue, HOST};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::config::NetworkConfig;
use super::egress_ca::EgressCa;
use threadbox_core::domain::{EgressCredentials, HostCredentials};

type Body = Either<Incoming, Full<Bytes>>;

/// Hop-by-hop headers: they describe one leg (sandbox to proxy, proxy to server), never both.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// The provider's interception: its CA, the operator's credentials and how it verifies servers.
pub(crate) struct Interceptor {
    ca: EgressCa,
    credentials: EgressCredentials,
    upstream_tls: TlsConnector,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor")
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl Interceptor {
    /// The interception `config` asks for: `None` without credentials. The CA is the state
    /// directory's (made now if missing).
    pub fn new(config: &NetworkConfig, state_dir: &Path) -> Result<Option<Arc<Self>>, String> {
        if config.credentials.is_empty() {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca = EgressCa::load_or_create(state_dir, provider.clone())?;
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(native.certs);
        if let Some(path) = &config.upstream_ca_file {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("reading the upstream CA file {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "the upstream CA file {} holds no certificate",
                    path.display()
                ));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    format!("a certificate in {} is not usable: {e}", path.display())
                })?;
            }
        } else if added == 0 {
            return Err(
                "egress credentials need trust roots to verify servers, and the host \
                        has none (install ca-certificates, or name an upstream CA file)"
                    .into(),
            );
        }
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS settings: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Arc::new(Self {
            ca,
            credentials: config.credentials.clone(),
            upstream_tls: TlsConnector::from(Arc::new(client)),
        })))
    }

    /// The deployment CA's certificate (PEM), for the sandboxes' trust store.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// Whether `host` has credentials (and so is intercepted).
    pub fn intercepts(&self, host: &str) -> bool {
        self.credentials.for_host(host).is_some()
    }

    /// The operator's headers for `host` (none when it has no credentials).
    pub fn headers_for(&self, host: &str) -> Vec<(HeaderName, HeaderValue)> {
        self.credentials
            .for_host(host)
            .map(header_pairs)
            .unwrap_or_default()
    }

    /// Serve one sandbox TLS connection to `host` (resolved to `upstream`), whose first bytes
    /// `head` (the ClientHello) the proxy has read already: TLS ends here, with a certificate
    /// of the deployment's CA, and each request goes on with the operator's headers.
    pub async fn serve_tls(
        &self,
        client: TcpStream,
        head: Vec<u8>,
        host: String,
        upstream: SocketAddr,
        config: &NetworkConfig,
    ) -> Result<(), String> {
        let headers = self.headers_for(&host);
        if headers.is_empty() {
            return Err(format!("{host} has no credentials"));
        }
        let name = ServerName::try_from(host.clone())
            .map_err(|_| format!("{host} is not a server name"))?;
        let acceptor = TlsAcceptor::from(self.ca.server_config(&host)?);
        let (client, forwarder, upgraded) = Forwarder::new(
            client,
            head,
            host.clone(),
            upstream,
            Some((self.upstream_tls.clone(), name)),
            headers,
            config.connect_timeout,
        );
        let activity = forwarder.activity.clone();
        let serving = async {
            let stream = tokio::time::timeout(config.handshake_timeout, acceptor.accept(client))
                .await
                .map_err(|_| format!("no TLS handshake with the sandbox in time ({host})"))?
                .map_err(|e| format!("TLS with the sandbox ({host}): {e}"))?;
            serve_http(stream, forwarder, upgraded, config.handshake_timeout).await
        };
        tokio::select! {
            result = serving => result,
            () = activity.quiet_for(config.idle_timeout) => Ok(()),
        }
    }
}

/// Serve one sandbox plain-HTTP connection to `host` (resolved to `upstream`; its first bytes
/// `head` read already by the proxy), request by request: each request must name `host` (421
/// otherwise), goes on with `headers` set (the operator's, if `host` has credentials), and its
/// answer comes back; hyper finds where each request ends (`Content-Length`, chunked), and a
/// request whose end is ambiguous is refused (400), never passed on. An upgrade (WebSocket) to
/// a host without credentials is carried: after the server's 101 the connection is a pipe of
/// the new protocol.
pub(crate) async fn serve_plain(
    client: TcpStream,
    head: Vec<u8>,
    host: String,
    upstream: SocketAddr,
    headers: Vec<(HeaderName, HeaderValue)>,
    config: &NetworkConfig,
) -> Result<(), String> {
    serve_plain_stream(
        client,
        head,
        host,
        upstream,
        headers,
        config.handshake_timeout,
        config.connect_timeout,
        config.idle_timeout,
    )
    .await
}

/// [`serve_plain`] over any stream (the unit tests' in-memory ones).
#[allow(clippy::too_many_arguments)]
async fn serve_plain_stream<S>(
    client: S,
    head: Vec<u8>,
    host: String,
    upstream: SocketAddr,
    headers: Vec<(HeaderName, HeaderValue)>,
    head_timeout: Duration,
    connect_timeout: Duration,
    idle_timeout: Duration,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (client, forwarder, upgraded) =
        Forwarder::new(client, head, host, upstream, None, headers, connect_timeout);
    let activity = forwarder.activity.clone();
    tokio::select! {
        result = serve_http(client, forwarder, upgraded, head_timeout) => result,
        () = activity.quiet_for(idle_timeout) => Ok(()),
    }
}

/// The operator's headers as hyper's types (checked when they were read, so they convert);
/// marked sensitive, so HTTP/2 encoders and debug output treat them as secrets.
fn header_pairs(credentials: &HostCredentials) -> Vec<(HeaderName, HeaderValue)> {
    credentials
        .headers
        .iter()
        .filter_map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            let mut value = HeaderValue::from_str(value.expose()).ok()?;
            value.set_sensitive(true);
            Some((name, value))
        })
        .collect()
}

/// The largest request head hyper buffers from a sandbox (its default is 400 KiB): bounds each
/// connection's memory, and is far above what real clients send.
const MAX_REQUEST_BUFFER: usize = 64 * 1024;

/// Both ends of an upgraded connection (the sandbox's and the server's), once the server has
/// answered 101.
type Upgrade = (hyper::upgrade::OnUpgrade, hyper::upgrade::OnUpgrade);

/// Serve HTTP/1.1 on the sandbox's side of a connection until it ends; after an upgrade, copy
/// the new protocol both ways until either side is done.
async fn serve_http<S>(
    stream: S,
    forwarder: Arc<Forwarder>,
    mut upgraded: tokio::sync::oneshot::Receiver<Upgrade>,
    head_timeout: Duration,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let forwarder = forwarder.clone();
        async move { Ok::<_, Infallible>(forwarder.forward(request).await) }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(MAX_REQUEST_BUFFER)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await
        .map_err(|e| format!("HTTP with the sandbox: {e}"))?;
    // Sent before the 101 went out, so it is there once the connection has ended.
    let Ok((client, server)) = upgraded.try_recv() else {
        return Ok(());
    };
    let (client, server) =
        tokio::try_join!(client, server).map_err(|e| format!("upgrading the connection: {e}"))?;
    let (mut client, mut server) = (TokioIo::new(client), TokioIo::new(server));
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    Ok(())
}

/// One connection's way out: the host it is for, the headers to set, and the connection to the
/// real server, made on the first request and again whenever the server has closed it.
struct Forwarder {
    host: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    upstream: SocketAddr,
    upstream_tls: Option<(TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
    activity: Arc<Activity>,
    /// hyper's server asks for one response at a time, so this is never contended; it is a
    /// lock only to be shared with the service.
    sender: tokio::sync::Mutex<Option<Upstream>>,
    /// Where an upgrade's two ends go, for `serve_http` to join once hyper lets go.
    upgraded: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Upgrade>>>,
}

/// A connection to the real server: the request side, and its task (ended with it).
struct Upstream {
    sender: SendRequest<Incoming>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
impl Forwarder {
    /// The forwarder of one sandbox connection, `client` (whose first bytes `head` the proxy
    /// has read), and that connection wrapped to be read again from its start and to count as
    /// activity; the receiver of an upgrade's ends.
    fn new<S>(
        client: S,
        head: Vec<u8>,
        host: String,
        upstream: SocketAddr,
        upstream_tls: Option<(TlsConnector, ServerName<'static>)>,
        headers: Vec<(HeaderName, HeaderValue)>,
        connect_timeout: Duration,
    ) -> (
        Tracked<Rewind<S>>,
        Arc<Self>,
        tokio::sync::oneshot::Receiver<Upgrade>,
    ) {
        let activity = Arc::new(Activity::new());
        let client = Tracked {
            inner: Rewind {
                prefix: head,
                at: 0,
                inner: client,
            },
            activity: activity.clone(),
        };
        let (upgrade, upgraded) = tokio::sync::oneshot::channel();
        let forwarder = Arc::new(Self {
            host,
            headers,
            upstream,
            upstream_tls,
            connect_timeout,
            activity,
            sender: tokio::sync::Mutex::new(None),
            upgraded: std::sync::Mutex::new(Some(upgrade)),
        });
        (client, forwarder, upgraded)
    }

    async fn forward(&self, mut request: Request<Incoming>) -> Response<Body> {
        if let Err(why) = self.check(&request) {
            return reply(StatusCode::MISDIRECTED_REQUEST, &why);
        }
        if request.headers().contains_key(hyper::header::UPGRADE) {
            if self.headers.is_empty() {
                return self.upgrade(request).await;
            }
            return reply(
                StatusCode::NOT_IMPLEMENTED,
                &format!(
                    "upgrades (WebSocket) to {} are not carried: it has egress credentials",
                    self.host
                ),
            );
        }
        let headers = request.headers_mut();
        for name in HOP_BY_HOP {
            headers.remove(*name);
        }
        if !headers.contains_key(HOST) {
            // HTTP/1.0 without a Host: the server still needs to know which site.
            if let Ok(host) = HeaderValue::from_str(&self.host) {
                headers.insert(HOST, host);
            }
        }
        for (name, value) in &self.headers {
            // `insert` replaces every value the sandbox sent under this name.
            headers.insert(name.clone(), value.clone());
        }
        *request.version_mut() = Version::HTTP_11;
        let mut response = match self.send(request).await {
            Ok(response) => response,
            Err(why) => {
                tracing::debug!(host = %self.host, why, "intercepted request failed");
                return reply(
                    StatusCode::BAD_GATEWAY,
                    &format!("cannot reach {}: {why}", self.host),
                );
            }
        };
        for name in HOP_BY_HOP {
            response.headers_mut().remove(*name);
        }
        *response.version_mut() = Version::HTTP_11;
        response.map(Either::Left)
    }

    /// Carry an upgrade (WebSocket) to a host without credentials: the request goes on with its
    /// `Upgrade` over a connection of its own, and after the server's 101 both ends are handed
    /// to `serve_http`, which copies the new protocol both ways.
    async fn upgrade(&self, mut request: Request<Incoming>) -> Response<Body> {
        let from_client = hyper::upgrade::on(&mut request);
        let headers = request.headers_mut();
        for name in HOP_BY_HOP.iter().filter(|name| **name != "upgrade") {
            headers.remove(*name);
        }
        headers.insert(
            hyper::header::CONNECTION,
            HeaderValue::from_static("upgrade"),
        );
        let mut upstream = self.sender.lock().await;
        // The connection that switches protocol carries nothing else afterwards.
        *upstream = None;
        let open = match self.connect().await {
            Ok(open) => upstream.insert(open),
            Err(why) => {
                return reply(
                    StatusCode::BAD_GATEWAY,
                    &format!("cannot reach {}: {why}", self.host),
                )
            }
        };
        let mut response = match open.sender.send_request(request).await {
            Ok(response) => response,
            Err(e) => {
                *upstream = None;
                return reply(
                    StatusCode::BAD_GATEWAY,
                    &format!("cannot reach {}: {e}", self.host),
                );
            }
        };
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let from_server = hyper::upgrade::on(&mut response);
            let slot = self
                .upgraded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(slot) = slot {
                let _ = slot.send((from_client, from_server));
            }
        } else {
            for name in HOP_BY_HOP {
                response.headers_mut().remove(*name);
            }
        }
        response.map(Either::Left)
    }

    /// The request names this connection's host (and nothing else).
    fn check(&self, request: &Request<Incoming>) -> Result<(), String> {
        let mut named = Vec::new();
        if let Some(authority) = request.uri().authority() {
            named.push(authority.host().to_owned());
        }
        for value in request.headers().get_all(HOST) {
            let value = value.to_str().map_err(|_| "a Host that is not text")?;
            let authority: hyper::http::uri::Authority =
                value.parse().map_err(|_| "a bad Host".to_owned())?;
            named.push(authority.host().to_owned());
        }
        if request.headers().get_all(HOST).iter().count() > 1 {
            return Err("a request names one Host".into());
        }
        for name in named {
            let name = threadbox_core::domain::network::normalize(&name);
            if name != self.host {
                return Err(format!(
                    "this connection is for {}, not {name}; open another",
                    self.host
                ));
            }
        }
        Ok(())
    }

    /// Send on the open connection to the server, or a new one; a request the old connection
    /// refused before sending it (the server closed it meanwhile) is sent again on a new one.
    async fn send(&self, request: Request<Incoming>) -> Result<Response<Incoming>, String> {
        let mut upstream = self.sender.lock().await;
        let mut request = request;
        for attempt in 0..2 {
            let usable = match upstream.as_mut() {
                Some(open) => !open.sender.is_closed() && open.sender.ready().await.is_ok(),
                None => false,
            };
            if !usable {
                *upstream = Some(self.connect().await?);
            }
            let open = upstream.as_mut().expect("connected just above");
            match open.sender.try_send_request(request).await {
                Ok(response) => return Ok(response),
                Err(mut failed) => {
                    let error = failed.error().to_string();
                    *upstream = None;
                    match failed.take_message() {
                        Some(unsent) if usable && attempt == 0 => request = unsent,
                        _ => return Err(error),
                    }
                }
            }
        }
        Err("the server closed every connection".into())
    }

    async fn connect(&self) -> Result<Upstream, String> {
        let host = &self.host;
        let ip = self.upstream.ip();
        let deadline = self.connect_timeout;
        let tcp = tokio::time::timeout(deadline, TcpStream::connect(self.upstream))
            .await
            .map_err(|_| format!("connecting to {host} ({ip}) timed out"))?
            .map_err(|e| format!("connecting to {host} ({ip}): {e}"))?;
        let tcp = Tracked {
            inner: tcp,
            activity: self.activity.clone(),
        };
        match &self.upstream_tls {
            Some((connector, name)) => {
                let tls = tokio::time::timeout(deadline, connector.connect(name.clone(), tcp))
                    .await
                    .map_err(|_| format!("TLS with {host} timed out"))?
                    .map_err(|e| format!("TLS with {host}: {e}"))?;
                handshake(tls).await
            }
            None => handshake(tcp).await,
        }
    }
}

async fn handshake<S>(stream: S) -> Result<Upstream, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP with the server: {e}"))?;
    // With upgrades: a 101 hands the connection over to `hyper::upgrade::on(response)`.
    let task = tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    Ok(Upstream { sender, task })
}

/// The proxy's own answer, plain text naming why.
fn reply(status: StatusCode, why: &str) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(format!(
        "threadbox: {why}\n"
    )))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    response
}

/// When bytes last moved on an intercepted connection, either leg.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Ends once nothing has moved for `idle`.
    async fn quiet_for(&self, idle: Duration) {
        loop {
            tokio::time::sleep(idle / 4).await;
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            if self.start.elapsed().saturating_sub(last) >= idle {
                return;
            }
        }
    }
}

/// A stream that records its traffic in an [`Activity`].
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A stream whose first bytes, already read by the proxy to learn the host, are read again.
struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn rewound_bytes_come_first_then_the_stream() {
        let (mut a, b) = tokio::io::duplex(64);
        let mut rewound = Rewind {
            prefix: b"GET / HTTP/1.1\r\n".to_vec(),
            at: 0,
            inner: b,
        };
        a.write_all(b"Host: pkg.test\r\n\r\n").await.unwrap();
        drop(a);
        let mut all = String::new();
        rewound.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "GET / HTTP/1.1\r\nHost: pkg.test\r\n\r\n");
    }
}

/// Plain HTTP through [`serve_plain_stream`] to a server of the test's own that records every
/// whole request it gets: what a sandbox pipelines or keeps alive is checked and framed request
/// by request.
#[cfg(test)]
mod plain_tests {
    use std::sync::Mutex;

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A request the server got whole: method, path, Host, body.
    type Seen = (String, String, String, Vec<u8>);

    /// A keep-alive HTTP/1.1 server on loopback answering `ok <path>`; what it got whole.
    async fn recording_server() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let log = log.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let log = log.clone();
                        async move {
                            let method = request.method().to_string();
                            let path = request.uri().path().to_owned();
                            let host = request
                                .headers()
                                .get(HOST)
                                .and_then(|h| h.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            let body = request.into_body().collect().await?.to_bytes();
                            log.lock()
                                .unwrap()
                                .push((method, path.clone(), host, body.to_vec()));
                            Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(format!(
                                "ok {path}"
                            )))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (addr, seen)
    }

    /// A sandbox's connection (a pipe of `buffer` bytes) to `pkg.test`, served by the proxy as
    /// plain HTTP to `upstream` in a task of its own.
    fn sandbox_to_pkg_test(
        upstream: SocketAddr,
        buffer: usize,
    ) -> (
        tokio::io::DuplexStream,
        tokio::task::JoinHandle<Result<(), String>>,
    ) {
        let (sandbox, proxy_end) = tokio::io::duplex(buffer);
        let serving = tokio::spawn(serve_plain_stream(
            proxy_end,
            Vec::new(),
            "pkg.test".into(),
            upstream,
            Vec::new(),
            Duration::from_secs(5),
            Duration::from_secs(5),
            Duration::from_secs(10),
        ));
        (sandbox, serving)
    }

    /// Send `bytes` from a sandbox connection to `pkg.test` served by the proxy, then read what
    /// comes back until the proxy closes it (or 10 s pass).
    async fn exchange(upstream: SocketAddr, bytes: &[u8]) -> String {
        let (mut sandbox, serving) = sandbox_to_pkg_test(upstream, 64 * 1024);
        sandbox.write_all(bytes).await.unwrap();
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), sandbox.read_to_end(&mut answer)).await;
        drop(sandbox);
        let _ = serving.await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// The status codes of the responses in `answer`, in order.
    fn statuses(answer: &str) -> Vec<u16> {
        answer
            .match_indices("HTTP/1.1 ")
            .filter_map(|(at, _)| answer.get(at + 9..at + 12)?.parse().ok())
            .collect()
    }

    #[tokio::test]
    async fn every_request_on_a_kept_alive_connection_is_checked_and_framed() {
        let (upstream, seen) = recording_server().await;
        // A chunked body and a sized one that each hold a whole request naming another host:
        // bodies, not requests. Then a real request for another host, and a last good one.
        let smuggled = "GET /smuggled HTTP/1.1\r\nHost: evil.test\r\n\r\n";
        let mut bytes = format!(
            "POST /chunked HTTP/1.1\r\nHost: pkg.test\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{smuggled}\r\n0\r\n\r\n",
            smuggled.len()
        );
        bytes.push_str(&format!(
            "POST /sized HTTP/1.1\r\nHost: PKG.test:80\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ));
        bytes.push_str("GET /evil HTTP/1.1\r\nHost: evil.test\r\n\r\n");
        bytes.push_str("GET http://evil.test/absolute HTTP/1.1\r\nHost: pkg.test\r\n\r\n");
        bytes.push_str("GET /last HTTP/1.1\r\nHost: pkg.test\r\nConnection: close\r\n\r\n");
        let answer = exchange(upstream, bytes.as_bytes()).await;
        assert_eq!(statuses(&answer), [200, 200, 421, 421, 200], "{answer}");
        assert!(answer.contains("not evil.test"), "{answer}");
        let seen = seen.lock().unwrap().clone();
        let paths: Vec<&str> = seen.iter().map(|(_, path, _, _)| path.as_str()).collect();
        assert_eq!(paths, ["/chunked", "/sized", "/last"], "{seen:?}");
        assert_eq!(seen[0].3, smuggled.as_bytes());
        assert_eq!(seen[1].3, smuggled.as_bytes());
        assert!(seen
            .iter()
            .all(|(_, _, host, _)| host.starts_with("pkg.test") || host.starts_with("PKG.test")));
    }

    #[tokio::test]
    async fn a_request_whose_end_is_unclear_is_refused_and_nothing_after_it_passes() {
        let (upstream, seen) = recording_server().await;
        let evil = "GET /evil HTTP/1.1\r\nHost: evil.test\r\n\r\nGET /after HTTP/1.1\r\nHost: pkg.test\r\n\r\n";
        for (why, head) in [
            (
                "a transfer coding other than chunked",
                "POST /x HTTP/1.1\r\nHost: pkg.test\r\nTransfer-Encoding: gzip\r\n\r\n",
            ),
            (
                "two different lengths",
                "POST /x HTTP/1.1\r\nHost: pkg.test\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc",
            ),
            (
                "a length that is no number",
                "POST /x HTTP/1.1\r\nHost: pkg.test\r\nContent-Length: 3x\r\n\r\nabc",
            ),
            (
                "a negative length",
                "POST /x HTTP/1.1\r\nHost: pkg.test\r\nContent-Length: -1\r\n\r\n",
            ),
            (
                "chunked in HTTP/1.0",
                "POST /x HTTP/1.0\r\nHost: pkg.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            ),
            (
                "a head that is not HTTP",
                "GET /x HTTP/1.1\r\nHost pkg.test\r\n\r\n",
            ),
        ] {
            let answer = exchange(upstream, format!("{head}{evil}").as_bytes()).await;
            assert_eq!(statuses(&answer), [400], "{why}: {answer}");
        }
        // A bad chunk size: the head went on, its body never ends well, and nothing after it
        // is read as a request.
        let answer = exchange(
            upstream,
            format!(
                "POST /bad-chunk HTTP/1.1\r\nHost: pkg.test\r\nTransfer-Encoding: chunked\r\n\r\n\
                 zz\r\n{evil}"
            )
            .as_bytes(),
        )
        .await;
        assert!(!answer.contains("ok /after"), "{answer}");
        // Both a length and chunked: chunked decides where it ends, and the connection closes
        // after it (the sender and a server could disagree on the rest).
        let answer = exchange(
            upstream,
            format!(
                "POST /both HTTP/1.1\r\nHost: pkg.test\r\nContent-Length: 40\r\n\
                 Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n{evil}"
            )
            .as_bytes(),
        )
        .await;
        assert_eq!(statuses(&answer), [200], "{answer}");
        let seen = seen.lock().unwrap().clone();
        let paths: Vec<&str> = seen.iter().map(|(_, path, _, _)| path.as_str()).collect();
        assert_eq!(paths, ["/both"], "{seen:?}");
        assert_eq!(seen[0].3, b"abc");
    }

    #[tokio::test]
    async fn an_upgrade_to_a_host_without_credentials_becomes_a_pipe_after_the_101() {
        // A server that switches to echoing whatever comes after the request's head.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                if stream.read(&mut byte).await.unwrap() == 0 {
                    return;
                }
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
            assert!(head.contains("upgrade: echo"), "{head}");
            assert!(head.contains("connection: upgrade"), "{head}");
            stream
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 64];
            while let Ok(n @ 1..) = stream.read(&mut buf).await {
                stream.write_all(&buf[..n]).await.unwrap();
            }
        });
        let (mut sandbox, serving) = sandbox_to_pkg_test(upstream, 4096);
        sandbox
            .write_all(b"GET /ws HTTP/1.1\r\nHost: pkg.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
            .await
            .unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(sandbox.read(&mut byte).await.unwrap(), 1, "{head:?}");
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        sandbox.write_all(b"not http at all").await.unwrap();
        let mut echoed = [0u8; 15];
        tokio::time::timeout(Duration::from_secs(5), sandbox.read_exact(&mut echoed))
            .await
            .expect("echoed in time")
            .unwrap();
        assert_eq!(&echoed, b"not http at all");
        drop(sandbox);
        let _ = tokio::time::timeout(Duration::from_secs(5), serving).await;
    }
}
