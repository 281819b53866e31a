//! Networked sandboxes through the real runc provider (issue 18): what `restricted` and
//! `networked` reach, with every byte staying on this machine.
//!
//! The internet is the test's own (`support/network_world.rs`): a network namespace whose
//! 203.0.113.10 and .11 serve HTTP and HTTPS, a resolver naming them `pkg.test`, `other.test`,
//! `a.cdn.test`, plus `local.test` (127.0.0.1) and `meta.test` (169.254.169.254), and a TCP
//! service on the host's 127.0.0.1 standing for the host's own.
//!
//! Needs root, runc, iproute2, nftables, openssl and python3; without them the test says so
//! and passes, unless `THREADBOX_REQUIRE_SANDBOXES=1`. Runs of it in parallel processes take
//! turns (a lock file), since the test network's addresses are the host's.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use threadbox_core::domain::EgressCredentials;
use threadbox_core::ports::{
    Allowlist, AllowlistError, CreateSandbox, ExecRequest, NetworkProfile, SandboxProvider,
};
use threadbox_runc::{RuncConfig, RuncProvider};
use threadbox_testing::provider_conformance as suite;

#[path = "support/network_world.rs"]
mod network_world;

use network_world::{World, OTHER, PKG};

#[path = "support/images.rs"]
mod images;
#[path = "support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{require_or_skip, KillAll};

/// The test's internet (`support/network_world.rs`), or a skip saying why there is none.
fn world() -> Option<World> {
    World::new().map_or_else(|why| require_or_skip("networked sandboxes", why), Some)
}

fn request(network: NetworkProfile) -> CreateSandbox {
    let mut request = suite::create_request(suite::fresh_owner(1));
    request.network = network;
    request
}

/// A provider's settings over a state directory of its own, with the test's internet's
/// resolver as its upstream.
fn state_for(world: &World) -> (tempfile::TempDir, RuncConfig) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = RuncConfig::new(dir.path().join("state"));
    config.network.dns_upstream = Some(world.dns);
    (dir, config)
}

/// A new sandbox with `profile`.
async fn create(p: &RuncProvider, profile: NetworkProfile) -> String {
    p.create(request(profile)).await.unwrap().sandbox_id
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

/// `url`, fetched with [`CURL`], is answered by the test internet's server at `address`.
async fn served(p: &RuncProvider, id: &str, url: &str, address: &str) {
    let by = format!("served by {address}");
    reaches(p, id, &format!("{CURL} {url}"), &by).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_reach_only_what_their_profile_allows() {
    let Some(world) = world() else { return };
    let (_dir, config) = state_for(&world);
    let _cleanup = KillAll(config.clone());
    let p = RuncProvider::open(config.clone()).await.expect("open");
    let host_port = world.host_service.port();

    // Restricted: nothing, not even names.
    let id = create(&p, NetworkProfile::Restricted).await;
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
    let id = create(&p, networked(&allow)).await;
    p.write_file(&id, "/tmp/ca.pem", &world.cert())
        .await
        .unwrap();
    let (code, resolved) = run(&p, &id, "getent hosts pkg.test").await;
    assert_eq!(code, Some(0), "DNS works: {resolved}");
    let gateway = resolved.split_whitespace().next().unwrap().to_owned();
    assert!(gateway.starts_with("198.1"), "{resolved}");
    served(&p, &id, "https://pkg.test/", PKG).await;
    served(&p, &id, "http://pkg.test/", PKG).await;
    served(&p, &id, "https://a.cdn.test/", PKG).await;
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
    let other = create(&p, networked(&["other.test"])).await;
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
    let id = create(&p, networked(&[OTHER])).await;
    served(&p, &id, &format!("http://{OTHER}/"), OTHER).await;
    refused(&p, &id, &format!("{CURL} http://{PKG}/")).await;
    refused(&p, &id, "getent hosts pkg.test").await;
    refused(&p, &id, &format!("{CURL} http://{gateway}:{host_port}/")).await;
    p.kill(&id).await.unwrap();

    // Everything public: any name and address of the test internet, never private ones.
    let id = create(&p, networked(&[])).await;
    p.write_file(&id, "/tmp/ca.pem", &world.cert())
        .await
        .unwrap();
    served(&p, &id, "https://other.test/", OTHER).await;
    served(&p, &id, &format!("http://{PKG}/"), PKG).await;
    refused(&p, &id, &format!("{CURL} http://169.254.169.254/")).await;
    refused(&p, &id, &format!("{CURL} http://local.test:{host_port}/")).await;
    let (_, out) = run(&p, &id, &format!("{CURL} http://local.test/")).await;
    assert!(out.contains("no address this sandbox may reach"), "{out}");

    // A provider that restarts serves the sandboxes it finds.
    drop(p);
    let p = RuncProvider::open(config.clone()).await.expect("reopen");
    served(&p, &id, "https://other.test/", OTHER).await;
    p.kill(&id).await.unwrap();
    assert!(p.list(&BTreeMap::new()).await.unwrap().is_empty());
}

/// The operator's credential in this test; the sandbox must never hold it.
const SECRET: &str = "tb-egress-secret-4f9c2a";
/// A pattern that matches [`SECRET`] without spelling it, so the command line of the search
/// (visible in the sandbox's /proc) does not match itself.
const SECRET_PATTERN: &str = "tb-egress-secret-4f9c2[a]";

/// Credentials at egress (issue 18, item 5): the proxy adds an operator's header to requests to
/// the hosts it names (HTTPS through a certificate of the deployment's CA, which the sandbox's
/// own trust store holds, and plain HTTP), replacing what the sandbox sent, on every request
/// of a kept-alive connection; other hosts stay pass-through; the secret is nowhere the
/// sandbox can look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_added_at_egress_and_never_enter_the_sandbox() {
    let Some(world) = world() else { return };
    let (_dir, mut config) = state_for(&world);
    config.network.credentials = EgressCredentials::parse_json(&format!(
        r#"{{"pkg.test": {{"Authorization": "Bearer {SECRET}"}},
            "*.cdn.test": {{"X-Api-Key": "{SECRET}"}}}}"#
    ))
    .unwrap();
    // The test's internet has a certificate of the test's own: the proxy trusts it as an
    // operator's internal CA, besides the host's roots.
    config.network.upstream_ca_file = Some(world.cert_path());
    let _cleanup = KillAll(config.clone());
    let p = RuncProvider::open(config.clone()).await.expect("open");
    let id = p
        .create(request(networked(&[
            "pkg.test",
            "other.test",
            "*.cdn.test",
        ])))
        .await
        .unwrap()
        .sandbox_id;
    p.write_file(&id, "/tmp/test-ca.pem", &world.cert())
        .await
        .unwrap();
    let bearer = format!("Bearer {SECRET}");

    // HTTPS with the sandbox's own trust store (no --cacert, no -k), two requests on one
    // connection: both carry the header.
    let (code, out) = run(
        &p,
        &id,
        "curl -sS --max-time 8 -w ' connects=%{num_connects}\\n' \
         https://pkg.test/one https://pkg.test/two",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.matches("served by 203.0.113.10").count(), 2, "{out}");
    assert!(
        out.contains("connects=0"),
        "the second request reused the connection: {out}"
    );
    for path in ["/one", "/two"] {
        let seen = world.request_for(path);
        assert_eq!(seen["authorization"], serde_json::json!([bearer]), "{seen}");
    }
    // It is the deployment's CA that the sandbox trusted, not the test's certificate.
    let (_, verbose) = run(
        &p,
        &id,
        "curl -sS -v --max-time 8 -o /dev/null https://pkg.test/ca",
    )
    .await;
    assert!(verbose.contains("threadbox egress CA"), "{verbose}");
    let (code, _) = run(
        &p,
        &id,
        "curl -sS --max-time 8 --cacert /tmp/test-ca.pem https://pkg.test/x",
    )
    .await;
    assert_ne!(
        code,
        Some(0),
        "pkg.test is intercepted: the test's certificate is not what it sees"
    );

    // Each request is answered, and reaches the server with the header as the proxy set it.
    let cases = [
        // A header the sandbox sends itself is replaced, not doubled.
        (
            "-H 'Authorization: Bearer mine' https://pkg.test/own",
            "served by 203.0.113.10",
            "/own",
            "authorization",
            serde_json::json!([bearer]),
        ),
        // Plain HTTP, and a name under a wildcard entry.
        (
            "http://pkg.test/plain",
            "served by",
            "/plain",
            "authorization",
            serde_json::json!([bearer]),
        ),
        (
            "https://a.cdn.test/cdn",
            "served by",
            "/cdn",
            "x-api-key",
            serde_json::json!([SECRET]),
        ),
    ];
    for (args, answer, path, header, expected) in cases {
        reaches(&p, &id, &format!("curl -sS --max-time 8 {args}"), answer).await;
        assert_eq!(world.request_for(path)[header], expected);
    }
    // Another name on an intercepted connection gets no credentials (and no answer from it).
    let (_, out) = run(
        &p,
        &id,
        "curl -sS --max-time 8 -H 'Host: other.test' https://pkg.test/misdirected",
    )
    .await;
    assert!(out.contains("not other.test"), "{out}");
    assert!(world.requests().iter().all(|r| r["path"] != "/misdirected"));

    // A host without credentials is passed through: the sandbox verifies the test's own
    // certificate end to end, and the server gets no header.
    reaches(
        &p,
        &id,
        "curl -sS --max-time 8 --cacert /tmp/test-ca.pem https://other.test/through",
        "served by 203.0.113.11",
    )
    .await;
    assert_eq!(
        world.request_for("/through")["authorization"],
        serde_json::json!([])
    );

    the_secret_is_nowhere_in_the_sandbox(&p, &id).await;

    // A provider that restarts keeps the CA: the sandbox still trusts the proxy.
    drop(p);
    let p = RuncProvider::open(config.clone()).await.expect("reopen");
    reaches(
        &p,
        &id,
        "curl -sS --max-time 8 https://pkg.test/again",
        "served by",
    )
    .await;
    assert_eq!(
        world.request_for("/again")["authorization"],
        serde_json::json!([bearer])
    );
    p.kill(&id).await.unwrap();
}

/// The secret is nowhere the sandbox can look: not in its environment (an exec's, its init's)
/// nor in any file under / (but /proc and /sys, which hold processes, not files: the
/// environments are checked here, and the search's own command line is there).
async fn the_secret_is_nowhere_in_the_sandbox(p: &RuncProvider, id: &str) {
    let (_, env) = run(p, id, "env; tr '\\0' '\\n' < /proc/1/environ").await;
    assert!(
        env.contains("SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"),
        "{env}"
    );
    assert!(!env.contains(SECRET), "{env}");
    p.write_file(id, "/tmp/marker.txt", b"tb-egress-marker-77\n")
        .await
        .unwrap();
    let mut search = ExecRequest::shell(format!(
        "grep -rlsI -D skip -e '{SECRET_PATTERN}' -e 'tb-egress-marker-7[7]' \
         $(find / -mindepth 1 -maxdepth 1 ! -type l ! -name proc ! -name sys); echo searched"
    ));
    // The host's /usr is part of the view: reading it cold takes a while.
    search.timeout = Duration::from_secs(300);
    let found = p.exec(id, search).await.expect("search").stdout;
    assert_eq!(
        found.lines().collect::<Vec<_>>(),
        ["/tmp/marker.txt", "searched"],
        "the search finds a marker and nothing else: {found}"
    );
}

/// A client in the sandbox that sends its requests over one connection to pkg.test:80, each
/// only after the answer to the one before (`keep-alive`) or all at once (`pipelined`), and
/// prints everything that comes back.
const ONE_CONNECTION: &str = r#"
import socket, sys
mode, paths = sys.argv[1], sys.argv[2:]
def request(item):
    path, host = item.split("@")
    return ("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)).encode()
def answer(f):
    status = f.readline()
    length = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return status.decode().strip() + " " + f.read(length).decode().strip()
s = socket.create_connection(("pkg.test", 80), timeout=8)
f = s.makefile("rb")
if mode == "pipelined":
    s.sendall(b"".join(request(p) for p in paths))
    for _ in paths:
        print(answer(f), flush=True)
else:
    for p in paths:
        s.sendall(request(p))
        print(answer(f), flush=True)
"#;

/// Every request on a plain-HTTP connection is checked, not only the first (issue 28): a
/// second request naming another host, kept-alive or pipelined behind an allowed one, is
/// answered 421 by the proxy and never reaches the allowed name's server, while the requests
/// around it that name the allowed host go through on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_cannot_carry_a_request_for_another_host() {
    let Some(world) = world() else { return };
    let (_dir, config) = state_for(&world);
    let _cleanup = KillAll(config.clone());
    let p = RuncProvider::open(config.clone()).await.expect("open");
    let id = create(&p, networked(&["pkg.test"])).await;
    p.write_file(&id, "/tmp/one.py", ONE_CONNECTION.as_bytes())
        .await
        .unwrap();
    for (mode, first, evil, after) in [
        ("keep-alive", "/ka-first", "/ka-evil", "/ka-after"),
        ("pipelined", "/pl-first", "/pl-evil", "/pl-after"),
    ] {
        let (code, out) = run(
            &p,
            &id,
            &format!(
                "python3 /tmp/one.py {mode} {first}@pkg.test {evil}@other.test \
                 {after}@pkg.test:80"
            ),
        )
        .await;
        assert_eq!(code, Some(0), "{mode}: {out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{mode}: {out}");
        assert!(
            lines[0].contains(" 200 ") && lines[0].contains("served by 203.0.113.10"),
            "{mode}: {out}"
        );
        assert!(
            lines[1].contains(" 421 ") && lines[1].contains("not other.test"),
            "{mode}: {out}"
        );
        assert!(
            lines[2].contains(" 200 ") && lines[2].contains("served by 203.0.113.10"),
            "{mode}: {out}"
        );
        let seen = world.requests();
        assert!(
            seen.iter().any(|r| r["path"] == first) && seen.iter().any(|r| r["path"] == after),
            "{mode}: {seen:?}"
        );
        assert!(
            seen.iter()
                .all(|r| r["path"] != evil && r["host"] != "other.test"),
            "{mode}: the request for other.test reached pkg.test's server: {seen:?}"
        );
    }
    p.kill(&id).await.unwrap();
}

/// A sandbox's profile changes in place, running or paused, keeping its files: restricted to
/// networked, one allowlist to another, and back to restricted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_sandboxs_profile_changes_in_place() {
    let Some(world) = world() else { return };
    let (_dir, config) = state_for(&world);
    let _cleanup = KillAll(config.clone());
    let p = RuncProvider::open(config).await.expect("open");

    let id = create(&p, NetworkProfile::Restricted).await;
    p.write_file(&id, "/tmp/ca.pem", &world.cert())
        .await
        .unwrap();
    p.write_file(&id, "/home/user/kept.txt", b"kept\n")
        .await
        .unwrap();
    refused(&p, &id, &format!("{CURL} https://pkg.test/")).await;
    assert!(p.network_refusals(&id).await.unwrap().is_none());

    // Restricted to networked, running: names resolve and the allowed host answers.
    p.set_network(&id, &networked(&["pkg.test"])).await.unwrap();
    served(&p, &id, "https://pkg.test/", PKG).await;
    refused(&p, &id, &format!("{CURL} https://other.test/")).await;
    // Tools find the trust store through the variables every command now gets.
    reaches(&p, &id, "echo $SSL_CERT_FILE", "/etc/ssl/certs/").await;

    // Another allowlist: the old host is refused, the new one answers.
    p.set_network(&id, &networked(&["other.test"]))
        .await
        .unwrap();
    refused(&p, &id, &format!("{CURL} https://pkg.test/")).await;
    served(&p, &id, "https://other.test/", OTHER).await;

    // Paused: restricted again, and the resumed sandbox reaches nothing, not even names.
    p.pause(&id).await.unwrap();
    p.set_network(&id, &NetworkProfile::Restricted)
        .await
        .unwrap();
    p.connect(&id).await.unwrap();
    refused(&p, &id, &format!("{CURL} https://other.test/")).await;
    let (code, _) = run(&p, &id, "getent hosts other.test").await;
    assert_ne!(code, Some(0), "no names for a restricted sandbox");
    assert!(p.network_refusals(&id).await.unwrap().is_none());

    // And networked once more while paused, taking effect at the resume.
    p.pause(&id).await.unwrap();
    p.set_network(&id, &networked(&["pkg.test"])).await.unwrap();
    p.connect(&id).await.unwrap();
    served(&p, &id, "https://pkg.test/", PKG).await;
    reaches(&p, &id, "cat /home/user/kept.txt", "kept").await;
    p.kill(&id).await.unwrap();
}

/// An image sandbox networked: its resolver and trust store are threadbox's, bound in from
/// outside its root, so a live change reaches it even after its root user rearranged `/etc`, and
/// the host never writes through that root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_sandboxs_network_files_are_kept_outside_its_root() {
    let Some(world) = world() else { return };
    if !Path::new(images::BUSYBOX).is_file() {
        return require_or_skip("image sandboxes", "busybox-static is not installed".into())
            .unwrap_or(());
    }
    let (dir, mut config) = state_for(&world);
    let image = images::busybox_root(dir.path());
    config.images = vec![threadbox_runc::ImageRegistration {
        name: threadbox_core::domain::ImageName::parse("busybox").unwrap(),
        source: image.display().to_string(),
        setup: None,
    }];
    let _cleanup = KillAll(config.clone());
    let p = RuncProvider::open(config.clone()).await.expect("open");
    let mut req = request(networked(&["pkg.test"]));
    req.image = threadbox_core::domain::ImageName::parse("busybox").unwrap();
    let id = p.create(req).await.unwrap().sandbox_id;

    reaches(
        &p,
        &id,
        "wget -q -O - http://pkg.test/",
        &format!("served by {PKG}"),
    )
    .await;
    refused(&p, &id, "wget -q -O - http://other.test/").await;
    reaches(
        &p,
        &id,
        "echo $SSL_CERT_FILE; head -c 27 $SSL_CERT_FILE",
        "/run/threadbox/certs/ca-certificates.crt\n-----BEGIN CERTIFICATE-----",
    )
    .await;
    // The sandbox's root points /etc/ssl (where a host-image sandbox's trust store goes) at a
    // directory of its choosing; the files threadbox keeps are mount points it cannot move.
    let mut as_root = ExecRequest::shell(
        "rm -rf /etc/ssl && mkdir -p /hostile && ln -s /hostile /etc/ssl && \
         (mv /etc/resolv.conf /etc/r 2>/dev/null || echo pinned)",
    );
    as_root.user = threadbox_core::ports::SandboxUser::Root;
    let moved = p.exec(&id, as_root).await.unwrap();
    assert_eq!(moved.stdout, "pinned\n", "{moved:?}");
    p.set_network(&id, &NetworkProfile::Restricted)
        .await
        .unwrap();
    reaches(&p, &id, "cat /etc/resolv.conf", "no name servers").await;
    p.set_network(&id, &networked(&["pkg.test"])).await.unwrap();
    reaches(
        &p,
        &id,
        "wget -q -O - http://pkg.test/",
        &format!("served by {PKG}"),
    )
    .await;
    reaches(&p, &id, "ls -A /hostile | wc -l", "0").await;
    let bundle = config.state_dir.join("sandboxes").join(&id);
    assert!(
        !bundle.join("rootfs/hostile/certs").exists() && !Path::new("/hostile").exists(),
        "a host-side write followed the sandbox's symlink"
    );
    p.kill(&id).await.unwrap();
}

/// Refusals are counted per sandbox where they happen (the resolver, the proxy, the packet
/// filter), with the last destinations, and read through the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_destinations_are_counted_per_sandbox() {
    use threadbox_core::ports::{RefusalReason, RefusedBy};
    let Some(world) = world() else { return };
    let (_dir, config) = state_for(&world);
    let _cleanup = KillAll(config.clone());
    let p = RuncProvider::open(config.clone()).await.expect("open");

    // No network, nothing to count with: unknown, not zero.
    let restricted = create(&p, NetworkProfile::Restricted).await;
    assert_eq!(p.network_refusals(&restricted).await.unwrap(), None);
    p.kill(&restricted).await.unwrap();

    let id = create(&p, networked(&["pkg.test"])).await;
    let neighbour = create(&p, networked(&["pkg.test"])).await;
    p.write_file(&id, "/tmp/ca.pem", &world.cert())
        .await
        .unwrap();
    let fresh = p.network_refusals(&id).await.unwrap().expect("counted");
    assert_eq!(
        (fresh.lookups, fresh.connections, fresh.packets),
        (Some(0), Some(0), Some(0))
    );
    served(&p, &id, "https://pkg.test/", PKG).await;
    let (_, resolved) = run(&p, &id, "getent hosts pkg.test").await;
    let gateway = resolved.split_whitespace().next().unwrap().to_owned();
    let allowed = p.network_refusals(&id).await.unwrap().unwrap();
    assert_eq!(
        allowed.total(),
        0,
        "what is allowed is no refusal: {allowed:?}"
    );

    // A name not in the list (its lookup, then naming it to the proxy anyway), a raw address,
    // and the metadata address.
    refused(&p, &id, &format!("{CURL} https://other.test/")).await;
    refused(
        &p,
        &id,
        &format!("{CURL} -H 'Host: other.test' http://{gateway}/"),
    )
    .await;
    refused(&p, &id, &format!("{CURL} http://{OTHER}/")).await;
    refused(&p, &id, &format!("{CURL} http://169.254.169.254/")).await;

    let seen = p.network_refusals(&id).await.unwrap().unwrap();
    assert!(seen.lookups.unwrap() >= 1, "{seen:?}");
    assert_eq!(seen.connections, Some(1), "{seen:?}");
    assert!(seen.packets.unwrap() >= 2, "{seen:?}");
    let find = |destination: &str, by: RefusedBy| {
        seen.recent
            .iter()
            .find(|r| r.destination == destination && r.by == by)
            .unwrap_or_else(|| panic!("{destination} by {by:?} not in {:?}", seen.recent))
    };
    assert_eq!(
        find("other.test", RefusedBy::Dns).reason,
        RefusalReason::NotAllowed
    );
    assert_eq!(
        find("other.test", RefusedBy::Proxy).reason,
        RefusalReason::NotAllowed
    );
    let raw = find(&format!("{OTHER}:80"), RefusedBy::PacketFilter);
    assert_eq!(raw.reason, RefusalReason::NotAllowed);
    assert!(raw.times >= 1);
    assert_eq!(
        find("169.254.169.254:80", RefusedBy::PacketFilter).reason,
        RefusalReason::AlwaysRefused
    );
    assert!(
        seen.recent.windows(2).all(|w| w[0].at <= w[1].at),
        "oldest first: {:?}",
        seen.recent
    );

    // Each sandbox counts its own.
    let untouched = p.network_refusals(&neighbour).await.unwrap().unwrap();
    assert_eq!(untouched.total(), 0, "{untouched:?}");
    assert!(untouched.recent.is_empty());

    // A provider that restarts still reads the packet filter's count (kept with the sandbox);
    // the resolver's and proxy's start again in the process now serving it.
    drop(p);
    let p = RuncProvider::open(config.clone()).await.expect("reopen");
    let reopened = p.network_refusals(&id).await.unwrap().unwrap();
    assert_eq!(reopened.packets, seen.packets, "{reopened:?}");
    assert_eq!(reopened.lookups, Some(0));
    p.kill(&id).await.unwrap();
    p.kill(&neighbour).await.unwrap();
}

// The Slack app's test support, shared with its own tests.
#[path = "../../slack/tests/support/slack.rs"]
mod slack_support;

/// Issue 18's "a refused connection reaches the Slack reply", through real runc: a block that
/// fails on a name the thread's allowlist lacks gets a reply naming it and how to allow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_host_is_named_in_the_slack_reply() {
    use std::sync::Arc;
    use threadbox_core::domain::ThreadId;
    use threadbox_core::ports::RecordOutcome;
    use threadbox_core::usecases::ResolveOptions;
    use threadbox_slack::{IncomingMessage, SlackWorker, SlackWorkerConfig, WorkItem};

    let Some(world) = world() else { return };
    let (dir, config) = state_for(&world);
    let _cleanup = KillAll(config.clone());
    let provider = Arc::new(RuncProvider::open(config.clone()).await.expect("open"));
    let db = dir.path().join("threadbox.db");
    let slack_support::Embedded {
        tb, work, dedupe, ..
    } = slack_support::embedded_with(&db, provider).await;
    let thread = ThreadId::parse("slack:T1:C1:1767225600.000100").unwrap();
    tb.resolve_with(
        &thread,
        ResolveOptions {
            network: Some(networked(&["pkg.test"])),
            ..ResolveOptions::default()
        },
    )
    .await
    .expect("the thread, networked");
    let fake = slack_support::fake().await;
    let worker = SlackWorker::new(
        tb.clone(),
        slack_support::client(&fake),
        dedupe,
        work,
        SlackWorkerConfig::default(),
    );
    let message = |event: &str, ts: &str, code: &str| {
        WorkItem::Message(IncomingMessage {
            event_id: event.into(),
            thread_id: thread.clone(),
            channel: "C1".into(),
            ts: ts.into(),
            reply_thread_ts: Some("1767225600.000100".into()),
            user: "U1".into(),
            text: format!("```bash\n{code}\n```"),
            files: Vec::new(),
            addressed: true,
        })
    };
    let handle = |item: WorkItem| {
        let worker = &worker;
        async move {
            worker
                .handle_body(&serde_json::to_string(&item).unwrap())
                .await
        }
    };

    let item = message(
        "Ev1",
        "1767225601.000001",
        "curl -sS --max-time 8 https://other.test/",
    );
    assert_eq!(handle(item).await, RecordOutcome::Delivered);
    let reply = fake.messages().last().unwrap().text.clone();
    assert!(reply.contains("exited 6"), "{reply}");
    assert!(reply.contains("`other.test` (DNS)"), "{reply}");
    assert!(
        reply.contains("PUT /v1/threads/slack:T1:C1:1767225600.000100/network"),
        "{reply}"
    );
    assert!(
        reply.contains(r#"{"network":{"networked":{"allow":["pkg.test","other.test"]}}}"#),
        "{reply}"
    );

    // A failure the network did not cause gets no such lines, and an old refusal is not told
    // again.
    let item = message("Ev2", "1767225601.000002", "exit 3");
    assert_eq!(handle(item).await, RecordOutcome::Delivered);
    let reply = fake.messages().last().unwrap().text.clone();
    assert!(reply.contains("exited 3"), "{reply}");
    assert!(!reply.contains("refused"), "{reply}");
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
