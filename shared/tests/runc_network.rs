//! Networked sandboxes through the real runc provider (issue 18): what `restricted` and
//! `networked` reach, with every byte staying on this machine.
//!
//! A network namespace of the test's own plays the internet: 203.0.113.10 and .11 (TEST-NET-3,
//! routed to it only while the test runs) serve HTTP and HTTPS with a certificate the test
//! makes; a DNS server of the test on 127.0.0.1 (the provider's upstream resolver) names them
//! `pkg.test`, `other.test`, `a.cdn.test`, and `local.test` (127.0.0.1) and `meta.test`
//! (169.254.169.254). A TCP service on the host's 127.0.0.1 stands for the host's own.
//!
//! Needs root, runc, iproute2, nftables, openssl and python3; without them the test says so
//! and passes, unless `THREADBOX_REQUIRE_SANDBOXES=1`. Runs of it in parallel processes take
//! turns (a lock file), since the test network's addresses are the host's.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use threadbox_shared::adapters::runc::{host_can_run_sandboxes, RuncConfig, RuncProvider};
use threadbox_shared::ports::{
    Allowlist, AllowlistError, CreateSandbox, ExecRequest, NetworkProfile, SandboxProvider,
};
use threadbox_shared::testing::provider_conformance as suite;

const PKG: &str = "203.0.113.10";
const OTHER: &str = "203.0.113.11";

fn require_or_skip<T>(why: String) -> Option<T> {
    if std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_some() {
        panic!("THREADBOX_REQUIRE_SANDBOXES is set but networked sandboxes cannot run here: {why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("run sh")
}

fn sh_ok(cmd: &str) {
    let out = sh(cmd);
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test's internet and host services; removed on drop.
struct World {
    ns: String,
    veth: String,
    servers: Option<Child>,
    dir: tempfile::TempDir,
    dns: SocketAddr,
    host_service: SocketAddr,
    _lock: std::fs::File,
}

impl World {
    fn new() -> Option<Self> {
        if let Err(why) = host_can_run_sandboxes() {
            return require_or_skip(why);
        }
        if !rustix_is_root() {
            return require_or_skip("networked sandboxes need root".into());
        }
        for tool in ["ip", "nft", "openssl", "python3"] {
            if !sh(&format!("command -v {tool} || test -x /usr/sbin/{tool}"))
                .status
                .success()
            {
                return require_or_skip(format!("{tool} is missing"));
            }
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/tmp/threadbox-runc-network-test.lock")
            .expect("lock file");
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let tag = std::process::id() % 100_000;
        let ns = format!("tbtest{tag}");
        let veth = format!("tbt{tag}");
        let dir = tempfile::tempdir().expect("temp dir");
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
        sh_ok(&format!(
            "openssl req -x509 -newkey rsa:2048 -nodes -keyout {k} -out {c} -days 2 \
             -subj /CN=pkg.test -addext subjectAltName=DNS:pkg.test,DNS:other.test,DNS:a.cdn.test \
             2>/dev/null",
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
            .expect("start the test servers");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the test servers did not start");
        world.servers = Some(child);
        Some(world)
    }

    fn cert(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("cert.pem")).unwrap()
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

fn rustix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// HTTP on 80 and HTTPS on 443 of every address of the namespace, answering with the address
/// that was reached.
const SERVERS: &str = r#"
import http.server, socketserver, ssl, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
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

/// The provider's upstream resolver: the test's names, NXDOMAIN for the rest.
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

fn request(network: NetworkProfile) -> CreateSandbox {
    let mut request = suite::create_request(suite::fresh_owner(1));
    request.network = network;
    request
}

fn networked(allow: &[&str]) -> NetworkProfile {
    NetworkProfile::Networked {
        allow: Allowlist::parse(allow).unwrap(),
    }
}

/// A shell command's exit code and output (stdout and stderr together).
async fn run(p: &RuncProvider, id: &str, cmd: &str) -> (Option<i32>, String) {
    let mut req = ExecRequest::shell(format!("{cmd} 2>&1"));
    req.timeout = Duration::from_secs(40);
    let out = p.exec(id, req).await.expect("exec");
    (out.exit_code, out.stdout)
}

async fn reaches(p: &RuncProvider, id: &str, cmd: &str, expect: &str) {
    let (code, out) = run(p, id, cmd).await;
    assert!(
        code == Some(0) && out.contains(expect),
        "{cmd}: expected {expect:?}, got {code:?}: {out}"
    );
}

async fn refused(p: &RuncProvider, id: &str, cmd: &str) {
    let (code, out) = run(p, id, cmd).await;
    assert!(
        !out.contains("served by") && !out.contains("host secret"),
        "{cmd} got through ({code:?}): {out}"
    );
}

const CURL: &str = "curl -sS --max-time 8 --cacert /tmp/ca.pem";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_reach_only_what_their_profile_allows() {
    let Some(world) = World::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut config = RuncConfig::new(dir.path().join("state"));
    config.network.dns_upstream = Some(world.dns);
    let _cleanup = KillAll(config.clone());
    let p = RuncProvider::open(config.clone()).await.expect("open");
    let host_port = world.host_service.port();

    // Restricted: nothing, not even names.
    let id = p
        .create(request(NetworkProfile::Restricted))
        .await
        .unwrap()
        .sandbox_id;
    refused(&p, &id, &format!("{CURL} -k http://{PKG}/")).await;
    refused(&p, &id, "getent hosts pkg.test").await;
    let (code, _) = run(&p, &id, "getent hosts pkg.test").await;
    assert_ne!(code, Some(0));
    p.kill(&id).await.unwrap();

    // Networked through names.
    let allow = [
        "pkg.test",
        "*.cdn.test",
        "local.test",
        "meta.test",
        "169.254.169.254",
    ];
    let id = p
        .create(request(networked(&allow)))
        .await
        .unwrap()
        .sandbox_id;
    p.write_file(&id, "/tmp/ca.pem", &world.cert())
        .await
        .unwrap();
    let (code, resolved) = run(&p, &id, "getent hosts pkg.test").await;
    assert_eq!(code, Some(0), "DNS works: {resolved}");
    let gateway = resolved.split_whitespace().next().unwrap().to_owned();
    assert!(gateway.starts_with("198.1"), "{resolved}");
    reaches(
        &p,
        &id,
        &format!("{CURL} https://pkg.test/"),
        "served by 203.0.113.10",
    )
    .await;
    reaches(
        &p,
        &id,
        &format!("{CURL} http://pkg.test/"),
        "served by 203.0.113.10",
    )
    .await;
    reaches(
        &p,
        &id,
        &format!("{CURL} https://a.cdn.test/"),
        "served by 203.0.113.10",
    )
    .await;
    // Other names: no address, and no way through the proxy by naming them anyway.
    refused(&p, &id, &format!("{CURL} https://other.test/")).await;
    refused(
        &p,
        &id,
        &format!("{CURL} --resolve other.test:443:{gateway} https://other.test/"),
    )
    .await;
    let (_, out) = run(
        &p,
        &id,
        &format!("{CURL} -H 'Host: other.test' http://{gateway}/"),
    )
    .await;
    assert!(out.contains("not in this sandbox's allowlist"), "{out}");
    // Raw addresses, listed or not, private or not.
    refused(&p, &id, &format!("{CURL} http://{PKG}/")).await;
    refused(&p, &id, &format!("{CURL} -k https://{OTHER}/")).await;
    refused(
        &p,
        &id,
        "bash -c 'exec 3<>/dev/tcp/203.0.113.10/80 && echo served by raw'",
    )
    .await;
    refused(&p, &id, &format!("{CURL} http://169.254.169.254/")).await;
    // The host's own services: by its link address, and by a name that resolves to loopback.
    refused(&p, &id, &format!("{CURL} http://{gateway}:{host_port}/")).await;
    refused(&p, &id, &format!("{CURL} http://127.0.0.1:{host_port}/")).await;
    let (_, out) = run(&p, &id, &format!("{CURL} http://local.test/")).await;
    assert!(out.contains("no address this sandbox may reach"), "{out}");
    let (_, out) = run(&p, &id, &format!("{CURL} http://meta.test/")).await;
    assert!(out.contains("no address this sandbox may reach"), "{out}");
    // Another sandbox's link is not a way round its own list.
    let other = p
        .create(request(networked(&["other.test"])))
        .await
        .unwrap()
        .sandbox_id;
    let (_, other_dns) = run(&p, &other, "getent hosts other.test").await;
    let other_gateway = other_dns.split_whitespace().next().unwrap_or("").to_owned();
    assert!(other_gateway.starts_with("198.1"), "{other_dns}");
    refused(
        &p,
        &id,
        &format!("{CURL} --resolve other.test:443:{other_gateway} https://other.test/"),
    )
    .await;
    reaches(
        &p,
        &other,
        "curl -sS --max-time 8 -k https://other.test/",
        "served by 203.0.113.11",
    )
    .await;

    // The link goes with the sandbox.
    let link = host_link_of(&config, &id);
    assert!(Path::new("/sys/class/net").join(&link).exists(), "{link}");
    p.kill(&id).await.unwrap();
    p.kill(&other).await.unwrap();
    assert!(
        !Path::new("/sys/class/net").join(&link).exists(),
        "{link} left behind"
    );

    // Networked through an address: forwarded, the rest refused.
    let id = p
        .create(request(networked(&[OTHER])))
        .await
        .unwrap()
        .sandbox_id;
    reaches(
        &p,
        &id,
        &format!("{CURL} http://{OTHER}/"),
        "served by 203.0.113.11",
    )
    .await;
    refused(&p, &id, &format!("{CURL} http://{PKG}/")).await;
    refused(&p, &id, "getent hosts pkg.test").await;
    refused(&p, &id, &format!("{CURL} http://{gateway}:{host_port}/")).await;
    p.kill(&id).await.unwrap();

    // Everything public: any name and address of the test internet, never private ones.
    let id = p.create(request(networked(&[]))).await.unwrap().sandbox_id;
    p.write_file(&id, "/tmp/ca.pem", &world.cert())
        .await
        .unwrap();
    reaches(
        &p,
        &id,
        &format!("{CURL} https://other.test/"),
        "served by 203.0.113.11",
    )
    .await;
    reaches(
        &p,
        &id,
        &format!("{CURL} http://{PKG}/"),
        "served by 203.0.113.10",
    )
    .await;
    refused(&p, &id, &format!("{CURL} http://169.254.169.254/")).await;
    refused(&p, &id, &format!("{CURL} http://local.test:{host_port}/")).await;
    let (_, out) = run(&p, &id, &format!("{CURL} http://local.test/")).await;
    assert!(out.contains("no address this sandbox may reach"), "{out}");

    // A provider that restarts serves the sandboxes it finds.
    drop(p);
    let p = RuncProvider::open(config.clone()).await.expect("reopen");
    reaches(
        &p,
        &id,
        &format!("{CURL} https://other.test/"),
        "served by 203.0.113.11",
    )
    .await;
    p.kill(&id).await.unwrap();
    assert!(p.list(&BTreeMap::new()).await.unwrap().is_empty());
}

/// On drop (a failed test too), every sandbox of the state directory killed through a provider
/// of its own, which also takes their links and mounts.
struct KillAll(RuncConfig);

impl Drop for KillAll {
    fn drop(&mut self) {
        let config = self.0.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let provider = RuncProvider::open(config).await.ok()?;
                for info in provider.list(&BTreeMap::new()).await.ok()? {
                    let _ = provider.kill(&info.sandbox_id).await;
                }
                Some(())
            })
        })
        .join();
    }
}

/// The host end of a sandbox's link, from its bundle's record.
fn host_link_of(config: &RuncConfig, id: &str) -> String {
    let saved = std::fs::read(config.sandboxes_dir().join(id).join("network.json")).unwrap();
    let saved: serde_json::Value = serde_json::from_slice(&saved).unwrap();
    format!("tbh{}", saved["link"]["slot"])
}

#[test]
fn bad_allowlists_name_the_entry() {
    let err = Allowlist::parse(["pkg.test", "10.0.0.0/33"]).unwrap_err();
    assert!(err.to_string().contains("10.0.0.0/33"), "{err}");
    let err = Allowlist::parse(["a.*.test"]).unwrap_err();
    assert!(err.to_string().contains("a.*.test"), "{err}");
    let many: Vec<String> = (0..10_000).map(|i| format!("h{i}.test")).collect();
    let err = Allowlist::parse(&many).unwrap_err();
    assert_eq!(err, AllowlistError::TooMany { count: 10_000 });
    assert!(err.to_string().contains("10000"));
    let profile: Result<NetworkProfile, _> =
        serde_json::from_str(r#"{"networked": {"allow": ["ok.test", "*.x.*"]}}"#);
    assert!(profile.unwrap_err().to_string().contains("*.x.*"));
}
