//! Credentials at egress on runc: the egress proxy (`egress`) hands a connection here when its
//! host has operator credentials ([`EgressCredentials`]). Only then: every other host stays a
//! byte pipe, its TLS untouched.
//!
//! Here the proxy is the server the sandbox talks to: it terminates TLS with a certificate of
//! the deployment's CA (`egress_ca`, which the sandbox trusts), reads each HTTP/1.1 request
//! (keep-alive: every request on the connection), sets the operator's headers on it, replacing
//! any the sandbox sent under those names, and sends it on over a connection of its own to the
//! real server, verified with the host's trust roots (plus an operator's extra CA). Plain HTTP
//! to such a host gets the same, without the TLS.
//!
//! Every request must name the connection's host (its `Host`, and the TLS server name): a
//! request for another name on the same connection is answered 421, so credentials never go
//! with a request the proxy did not check. Upgrades (WebSocket) are not carried to these hosts.
//!
//! Bounded as the proxy is: the TLS handshake and each request head within the handshake
//! deadline, the connection out within the connect deadline, the whole connection closed after
//! the idle timeout with nothing moving either way. Hostile bytes end the connection.

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

use super::egress_ca::EgressCa;
use super::network_config::NetworkConfig;
use crate::domain::{EgressCredentials, HostCredentials};

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

    /// Serve one sandbox connection to `host` (resolved to `upstream`), whose first bytes
    /// `head` the proxy has read already.
    pub async fn serve(
        &self,
        client: TcpStream,
        head: Vec<u8>,
        tls: bool,
        host: String,
        upstream: SocketAddr,
        config: &NetworkConfig,
    ) -> Result<(), String> {
        let headers = self
            .credentials
            .for_host(&host)
            .map(header_pairs)
            .ok_or_else(|| format!("{host} has no credentials"))?;
        let activity = Arc::new(Activity::new());
        let client = Tracked {
            inner: Rewind {
                prefix: head,
                at: 0,
                inner: client,
            },
            activity: activity.clone(),
        };
        let upstream_tls = match tls {
            true => Some((
                self.upstream_tls.clone(),
                ServerName::try_from(host.clone())
                    .map_err(|_| format!("{host} is not a server name"))?,
            )),
            false => None,
        };
        let forwarder = Arc::new(Forwarder {
            host: host.clone(),
            headers,
            upstream,
            upstream_tls,
            connect_timeout: config.connect_timeout,
            activity: activity.clone(),
            sender: tokio::sync::Mutex::new(None),
        });
        let serving = async {
            if tls {
                let acceptor = TlsAcceptor::from(self.ca.server_config(&host)?);
                let stream =
                    tokio::time::timeout(config.handshake_timeout, acceptor.accept(client))
                        .await
                        .map_err(|_| format!("no TLS handshake with the sandbox in time ({host})"))?
                        .map_err(|e| format!("TLS with the sandbox ({host}): {e}"))?;
                serve_http(stream, forwarder, config.handshake_timeout).await
            } else {
                serve_http(client, forwarder, config.handshake_timeout).await
            }
        };
        tokio::select! {
            result = serving => result,
            () = activity.quiet_for(config.idle_timeout) => Ok(()),
        }
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

/// Serve HTTP/1.1 on the sandbox's side of an intercepted connection until it ends.
async fn serve_http<S>(
    stream: S,
    forwarder: Arc<Forwarder>,
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
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await
        .map_err(|e| format!("HTTP with the sandbox: {e}"))
}

/// One intercepted connection's way out: the headers to set and the connection to the real
/// server, made on the first request and again whenever the server has closed it.
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
    async fn forward(&self, mut request: Request<Incoming>) -> Response<Body> {
        if let Err(why) = self.check(&request) {
            return reply(StatusCode::MISDIRECTED_REQUEST, &why);
        }
        if request.headers().contains_key(hyper::header::UPGRADE) {
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
            let name = crate::domain::network::normalize(&name);
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
    let task = tokio::spawn(async move {
        let _ = connection.await;
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
