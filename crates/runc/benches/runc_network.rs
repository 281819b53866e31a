//! What a networked runc sandbox costs against a restricted one (issue 18's benchmark), in one
//! run on this machine, with every byte staying on it (the world of
//! `tests/support/network_world.rs`: a test-made network namespace plays the internet):
//!
//! 1. **Create to first exec**, `networked` (allow `pkg.test`) against `restricted`, alternated
//!    so both see the same machine: a networked create adds a veth pair, the sandbox's nftables
//!    rules and its resolver and proxy listeners.
//! 2. **A 100 MiB download**, over HTTP and HTTPS, from the host straight to the server and from
//!    a sandbox through the egress proxy (which reads the Host or SNI, checks the allowlist and
//!    copies bytes), by `curl` in both places; and over HTTPS to a host the operator attached a
//!    credential to, where the proxy terminates TLS with the deployment's CA, adds the header
//!    and makes its own TLS connection out. MiB/s medians and the ratios.
//!
//! Run as root with runc: `cargo bench -p threadbox-runc --bench runc_network` (part of
//! `scripts/bench.sh`). `THREADBOX_BENCH_RUNS` sets the create runs per profile (default 10),
//! `THREADBOX_BENCH_DOWNLOAD_MIB` the download size (default 100).

#[path = "../tests/support/network_world.rs"]
mod network_world;
#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;

use std::time::{Duration, Instant};

use network_world::{World, PKG};
use sandboxes::bench_request;
use threadbox_core::domain::EgressCredentials;
use threadbox_core::ports::{
    Allowlist, CreateSandbox, ExecRequest, NetworkProfile, SandboxProvider,
};
use threadbox_runc::{RuncConfig, RuncProvider};

const DOWNLOAD_RUNS: usize = 5;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn request(n: usize, network: NetworkProfile) -> CreateSandbox {
    bench_request("bench-net", n, network)
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// `curl`'s own figure for a download, in MiB/s.
fn mib_per_s(curl_output: &str) -> f64 {
    curl_output
        .trim()
        .parse::<f64>()
        .unwrap_or_else(|_| panic!("curl printed no speed: {curl_output:?}"))
        / f64::from(1u32 << 20)
}

async fn in_sandbox(p: &RuncProvider, id: &str, cmd: &str) -> String {
    let mut req = ExecRequest::shell(cmd);
    req.timeout = Duration::from_secs(300);
    let out = p.exec(id, req).await.expect("exec");
    assert_eq!(
        out.exit_code,
        Some(0),
        "{cmd}: {}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn on_host(cmd: &str) -> String {
    let out = network_world::sh(cmd);
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let world = match World::new() {
        Ok(world) => world,
        Err(why) => {
            eprintln!("runc_network bench skipped: {why}");
            return;
        }
    };
    let runs = env_number("THREADBOX_BENCH_RUNS", 10);
    let mib = env_number("THREADBOX_BENCH_DOWNLOAD_MIB", 100);
    let state = tempfile::tempdir().expect("temp dir");
    let mut config = RuncConfig::new(state.path().join("state"));
    config.network.dns_upstream = Some(world.dns);
    config.network.credentials =
        EgressCredentials::parse_json(r#"{"a.cdn.test": {"Authorization": "Bearer bench"}}"#)
            .expect("credentials");
    config.network.upstream_ca_file = Some(world.cert_path());
    let p = RuncProvider::open(config)
        .await
        .expect("open the runc provider");
    let networked = NetworkProfile::Networked {
        allow: Allowlist::parse(["pkg.test", "a.cdn.test"]).expect("allowlist"),
    };

    println!("create to first exec ({runs} runs per profile, alternated)");
    let (mut restricted_ms, mut networked_ms) = (Vec::new(), Vec::new());
    for n in 0..runs * 2 {
        let (profile, samples) = if n % 2 == 0 {
            (NetworkProfile::Restricted, &mut restricted_ms)
        } else {
            (networked.clone(), &mut networked_ms)
        };
        let start = Instant::now();
        let id = p
            .create(request(n, profile))
            .await
            .expect("create")
            .sandbox_id;
        in_sandbox(&p, &id, "true").await;
        samples.push(start.elapsed().as_secs_f64() * 1000.0);
        p.kill(&id).await.expect("kill");
    }
    let (restricted, networked_median) = (median(&mut restricted_ms), median(&mut networked_ms));
    println!("  restricted  median {restricted:>8.1} ms");
    println!(
        "  networked   median {networked_median:>8.1} ms  ({:.2}x restricted, +{:.1} ms)",
        networked_median / restricted,
        networked_median - restricted
    );

    let bytes = mib << 20;
    println!("{mib} MiB download, {DOWNLOAD_RUNS} runs each (curl's MiB/s, median)");
    let id = p
        .create(request(runs * 2, networked))
        .await
        .expect("create")
        .sandbox_id;
    p.write_file(&id, "/tmp/ca.pem", &world.cert())
        .await
        .expect("write the CA");
    let cert = world.cert_path();
    let curl = "curl -sS -o /dev/null -w '%{speed_download}'";
    for (scheme, host_cmd, sandbox_cmd) in [
        (
            "http ",
            format!("{curl} http://{PKG}/bytes/{bytes}"),
            format!("{curl} http://pkg.test/bytes/{bytes}"),
        ),
        (
            "https",
            format!(
                "{curl} --cacert {} --resolve pkg.test:443:{PKG} https://pkg.test/bytes/{bytes}",
                cert.display()
            ),
            format!("{curl} --cacert /tmp/ca.pem https://pkg.test/bytes/{bytes}"),
        ),
    ] {
        let (mut direct, mut proxied) = (Vec::new(), Vec::new());
        for _ in 0..DOWNLOAD_RUNS {
            direct.push(mib_per_s(&on_host(&host_cmd)));
            proxied.push(mib_per_s(&in_sandbox(&p, &id, &sandbox_cmd).await));
        }
        let (direct, proxied) = (median(&mut direct), median(&mut proxied));
        println!(
            "  {scheme}  host direct {direct:>8.1} MiB/s   sandbox through the proxy \
             {proxied:>8.1} MiB/s  ({:.2}x)",
            proxied / direct
        );
        if scheme == "https" {
            // The sandbox trusts the deployment's CA through the variables the provider sets.
            let intercepted_cmd = format!("{curl} https://a.cdn.test/bytes/{bytes}");
            let mut intercepted = Vec::new();
            for _ in 0..DOWNLOAD_RUNS {
                intercepted.push(mib_per_s(&in_sandbox(&p, &id, &intercepted_cmd).await));
            }
            let intercepted = median(&mut intercepted);
            println!(
                "  https with a credential added (TLS ended and re-made by the proxy) \
                 {intercepted:>8.1} MiB/s  ({:.2}x host direct)",
                intercepted / direct
            );
        }
    }
    p.kill(&id).await.expect("kill");
}
