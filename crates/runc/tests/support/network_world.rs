//! A small internet of the test's own for networked runc sandboxes, with every byte staying on
//! this machine: a network namespace whose addresses 203.0.113.10 ([`PKG`]) and .11 ([`OTHER`])
//! (TEST-NET-3, routed to it only while the world lives) serve HTTP on 80 and HTTPS on 443 with
//! a certificate made here; a DNS server on 127.0.0.1 (the provider's upstream resolver) naming
//! them `pkg.test`, `a.cdn.test` and `other.test`, plus `local.test` (127.0.0.1) and `meta.test`
//! (169.254.169.254); and a TCP service on the host's 127.0.0.1 standing for the host's own.
//!
//! Every path answers `served by <address>`, except `/bytes/N`, which sends N zero bytes (for
//! throughput). Worlds in parallel processes take turns (a lock file), since the addresses are
//! the host's. Needs root, runc, iproute2, nftables, openssl and python3; [`World::new`] says
//! what is missing instead.

#![allow(dead_code)] // each test or bench that includes this uses part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};

use threadbox_runc::host_can_run_sandboxes;

pub const PKG: &str = "203.0.113.10";
pub const OTHER: &str = "203.0.113.11";

pub fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("run sh")
}

pub fn sh_ok(cmd: &str) {
    let out = sh(cmd);
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test's internet and host services; removed on drop.
pub struct World {
    ns: String,
    veth: String,
    servers: Option<Child>,
    dir: tempfile::TempDir,
    /// The resolver to give the provider as its upstream.
    pub dns: SocketAddr,
    /// A service on the host's loopback that no sandbox may reach (answers `host secret`).
    pub host_service: SocketAddr,
    _lock: std::fs::File,
}

impl World {
    /// The world, or why it cannot be made here.
    pub fn new() -> Result<Self, String> {
        host_can_run_sandboxes()?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("networked sandboxes need root".into());
        }
        for tool in ["ip", "nft", "openssl", "python3"] {
            if !sh(&format!("command -v {tool} || test -x /usr/sbin/{tool}"))
                .status
                .success()
            {
                return Err(format!("{tool} is missing"));
            }
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/tmp/threadbox-runc-network-test.lock")
            .map_err(|e| format!("lock file: {e}"))?;
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let tag = std::process::id() % 100_000;
        let ns = format!("tbtest{tag}");
        let veth = format!("tbt{tag}");
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let mut world = World {
            ns: ns.clone(),
            veth: veth.clone(),
            servers: None,
            dns: serve_dns(),
            host_service: serve_host_secret(),
            dir,
            _lock: lock,
        };
        // A leftover of a run that was killed.
        let _ = sh(&format!(
            "ip netns del {ns} 2>/dev/null; ip link del {veth} 2>/dev/null"
        ));
        sh_ok(&format!(
            "ip netns add {ns} && ip link add {veth} type veth peer name {veth}p netns {ns} && \
             ip addr add 203.0.113.1/24 dev {veth} && ip link set {veth} up && \
             ip -n {ns} link set lo up && ip -n {ns} link set {veth}p up && \
             ip -n {ns} addr add {PKG}/24 dev {veth}p && ip -n {ns} addr add {OTHER}/24 dev {veth}p"
        ));
        let d = world.dir.path();
        // Not a CA (openssl's default for -x509): the egress proxy verifies the servers of
        // intercepted hosts with rustls, which refuses a CA certificate as a server's own.
        sh_ok(&format!(
            "openssl req -x509 -newkey rsa:2048 -nodes -keyout {k} -out {c} -days 2 \
             -subj /CN=pkg.test -addext subjectAltName=DNS:pkg.test,DNS:other.test,DNS:a.cdn.test \
             -addext basicConstraints=critical,CA:FALSE 2>/dev/null",
            k = d.join("key.pem").display(),
            c = d.join("cert.pem").display()
        ));
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c", SERVERS])
            .arg(d.join("cert.pem"))
            .arg(d.join("key.pem"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start the test servers: {e}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the test servers did not start");
        world.servers = Some(child);
        Ok(world)
    }

    /// The servers' certificate (PEM), for a client's trust.
    pub fn cert(&self) -> Vec<u8> {
        std::fs::read(self.cert_path()).unwrap()
    }

    pub fn cert_path(&self) -> std::path::PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// The requests the servers received so far (see [`SERVERS`]).
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The one request the servers received for `path`.
    pub fn request_for(&self, path: &str) -> serde_json::Value {
        let mut found: Vec<_> = self
            .requests()
            .into_iter()
            .filter(|r| r["path"] == path)
            .collect();
        assert_eq!(found.len(), 1, "requests for {path}: {found:?}");
        found.remove(0)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut child) = self.servers.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = sh(&format!(
            "ip link del {} 2>/dev/null; ip netns del {}",
            self.veth, self.ns
        ));
    }
}

/// HTTP on 80 and HTTPS on 443 of every address of the namespace, answering with the address
/// that was reached, or `/bytes/N` with N zero bytes. Each request's host, path and credential
/// headers are logged, one JSON line each, to `requests.log` beside the certificate (see
/// [`World::requests`]).
const SERVERS: &str = r#"
import http.server, json, os, socketserver, ssl, sys, threading
LOG = os.path.join(os.path.dirname(sys.argv[1]), "requests.log")
LOCK = threading.Lock()
CHUNK = b"\0" * (1 << 20)
class H(http.server.BaseHTTPRequestHandler):
    # Keep-alive, so a second request on one connection is read as one (what the proxy must
    # check; an HTTP/1.0 server would drop it unread).
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        seen = {"host": self.headers.get("Host"), "path": self.path,
                "authorization": self.headers.get_all("Authorization") or [],
                "x-api-key": self.headers.get_all("X-Api-Key") or []}
        with LOCK, open(LOG, "a") as log:
            log.write(json.dumps(seen) + "\n")
        if self.path.startswith("/bytes/"):
            n = int(self.path[len("/bytes/"):])
            self.send_response(200)
            self.send_header("content-length", str(n))
            self.end_headers()
            while n > 0:
                piece = CHUNK[:min(n, len(CHUNK))]
                self.wfile.write(piece)
                n -= len(piece)
            return
        body = ("served by %s\n" % self.connection.getsockname()[0]).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
plain = S(("0.0.0.0", 80), H)
tls = S(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=plain.serve_forever, daemon=True).start()
print("ready", flush=True)
tls.serve_forever()
"#;

/// The provider's upstream resolver: the world's names, NXDOMAIN for the rest.
fn serve_dns() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let q = &buf[..n];
            if n < 12 {
                continue;
            }
            let (mut name, mut at) = (Vec::new(), 12);
            while at < n && q[at] != 0 {
                let len = q[at] as usize;
                name.push(String::from_utf8_lossy(&q[at + 1..(at + 1 + len).min(n)]).to_string());
                at += 1 + len;
            }
            let end = (at + 5).min(n);
            let name = name.join(".").to_ascii_lowercase();
            let ip: Option<Ipv4Addr> = match name.as_str() {
                "pkg.test" | "a.cdn.test" => Some(PKG.parse().unwrap()),
                "other.test" => Some(OTHER.parse().unwrap()),
                "local.test" => Some(Ipv4Addr::LOCALHOST),
                "meta.test" => Some(Ipv4Addr::new(169, 254, 169, 254)),
                _ => None,
            };
            let mut out = q[..2].to_vec();
            out.extend_from_slice(&[0x81, if ip.is_some() { 0x80 } else { 0x83 }, 0, 1]);
            out.extend_from_slice(&[0, u8::from(ip.is_some()), 0, 0, 0, 0]);
            out.extend_from_slice(&q[12..end]);
            if let Some(ip) = ip {
                out.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4]);
                out.extend_from_slice(&ip.octets());
            }
            let _ = socket.send_to(&out, from);
        }
    });
    addr
}

/// A service on the host's loopback that no sandbox may reach.
fn serve_host_secret() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 512];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\n\r\nhost secret\n");
        }
    });
    addr
}
