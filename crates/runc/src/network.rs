//! Networked sandboxes (`NetworkProfile::Networked`), as root.
//!
//! Each networked sandbox's own network namespace (runc's, owned by the sandbox's user
//! namespace) gets one veth pair to the host: `eth0` inside with `198.18.x.y+1/31`, `tbh<slot>`
//! on the host with `198.18.x.y/31` (the slot is the sandbox's host id range's, so it is unique
//! on the host; 198.18/15 is the benchmarking block, which no allowlist opens). Inside:
//!
//! - `/etc/resolv.conf` names the host end, where an in-process DNS server (`super::dns`) answers every name
//!   the allowlist allows with the host end's address and every other with NXDOMAIN;
//! - TCP 80 and 443 to the host end reach the egress proxy ([`super::egress`]), which reads the
//!   HTTP `Host` or the TLS SNI, checks it against the allowlist, resolves it itself (through
//!   the configured upstream resolver) and refuses addresses that are always refused; for a
//!   host with operator credentials it terminates TLS and adds them ([`super::intercept`]),
//!   with the deployment's CA, which the sandbox's own trust store holds ([`super::trust`]);
//! - an nftables table in the sandbox's namespace lets out only that (and, forwarded and
//!   masqueraded by the host, the allowlist's addresses and networks that are not always
//!   refused); everything else is rejected, whatever socket a program uses. Nothing inside has
//!   a capability to change it.
//!
//! The sandbox's own table rewrites its 53, 80 and 443 on the host end to [`DNS_PORT`],
//! [`HTTP_PORT`] and [`HTTPS_PORT`], where this process listens (so no service of the host on
//! those well-known ports collides or is reached).
//!
//! On the host, one table (`inet threadbox`) backs it up: traffic from `tbh*` reaches the host
//! only at those three ports of the link addresses, is forwarded never to another
//! sandbox nor to an always-refused network (unless the operator opened it), and is
//! masqueraded on its way out (forwarding is turned on for the interfaces it leaves by, see
//! [`Networks::open_uplinks`]). IPv6 is off on the links.
//!
//! Everything per sandbox goes with its network namespace: the veth pair dies with the
//! container, the listeners with [`SandboxNet`]; a kill also deletes the host end by name.

use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::egress::{DNS_PORT, HTTPS_PORT, HTTP_PORT};
use super::intercept::Interceptor;
use super::network_config::NetworkConfig;
use super::refusals::{
    self, RefusalRecorder, PACKET_COUNTER, RECENT_PACKETS_SET, RECENT_PACKETS_SIZE,
    RECENT_PACKETS_TIMEOUT_SECS,
};
use threadbox_core::ports::{
    always_refused_v4, Allowlist, Clock, IpNet, NetworkRefusals, ProviderError, RefusalReason,
    SystemClock,
};

/// The host's links to its sandboxes: 198.18.0.0/15, two addresses per slot.
const LINK_BASE: u32 = 0xC612_0000; // 198.18.0.0
const LINK_NET: &str = "198.18.0.0/15";
const LINK_SLOTS: u32 = 1 << 16;
/// The host ends' name prefix; the host table matches it.
const HOST_IF_PREFIX: &str = "tbh";
/// The file in a networked sandbox's bundle that says so (and keeps its allowlist for a
/// provider that restarts).
const SAVED: &str = "network.json";
/// The host's table (one for every provider on the host: its rules hold no provider's state).
const HOST_TABLE: &str = "threadbox";
/// How long an `ip`, `nft` or `nsenter` call may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries at serving a link whose addresses another serving of this process still holds: at
/// a provider's open (a provider dropped a moment ago), and when a sandbox's profile changes
/// in place (its last serving stopping), 50 ms apart.
const ADOPT_TRIES: usize = 4;
const REATTACH_TRIES: usize = 40;

/// A sandbox's link: its slot, the host end and the sandbox end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Link {
    pub slot: u32,
}

impl Link {
    pub fn of_slot(slot: u32) -> Result<Self, ProviderError> {
        if slot >= LINK_SLOTS {
            return Err(ProviderError::Unavailable(format!(
                "host id slot {slot} has no network link address (at most {LINK_SLOTS})"
            )));
        }
        Ok(Self { slot })
    }
    pub fn host(self) -> Ipv4Addr {
        Ipv4Addr::from(LINK_BASE + self.slot * 2)
    }
    pub fn sandbox(self) -> Ipv4Addr {
        Ipv4Addr::from(LINK_BASE + self.slot * 2 + 1)
    }
    pub fn host_if(self) -> String {
        format!("{HOST_IF_PREFIX}{}", self.slot)
    }
}

/// What a networked sandbox's bundle records.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Saved {
    pub link: Link,
    pub allow: Allowlist,
}

/// The in-process part of one sandbox's network: its DNS server and proxy listeners, and what
/// they refused.
pub(crate) struct SandboxNet {
    serving: super::egress::Serving,
    refusals: Arc<RefusalRecorder>,
}

impl Drop for SandboxNet {
    fn drop(&mut self) {
        for task in &self.serving.tasks {
            task.abort();
        }
    }
}

/// Every networked sandbox of one provider.
pub(crate) struct Networks {
    pub config: Arc<NetworkConfig>,
    host_ready: tokio::sync::Mutex<bool>,
    live: Mutex<HashMap<String, SandboxNet>>,
    connections: Arc<Semaphore>,
    /// Interception of hosts with operator credentials (`None` without any): its CA is kept in
    /// the provider's state directory.
    intercept: Option<Arc<Interceptor>>,
}

impl Networks {
    pub fn new(config: NetworkConfig, state_dir: &Path) -> Result<Self, ProviderError> {
        let intercept = Interceptor::new(&config, state_dir)
            .map_err(|why| ProviderError::Internal(format!("egress credentials: {why}")))?;
        let connections = Arc::new(Semaphore::new(config.max_connections));
        Ok(Self {
            config: Arc::new(config),
            host_ready: tokio::sync::Mutex::new(false),
            live: Mutex::new(HashMap::new()),
            connections,
            intercept,
        })
    }

    /// Point a networked sandbox's tools at its trust store (see `trust`).
    pub fn add_trust_env(&self, env: &mut std::collections::BTreeMap<String, String>) {
        super::trust::add_env(env, self.intercept.is_some());
    }

    /// Whether this host can give a sandbox a network; `Unsupported` naming what is missing.
    pub fn check_host(&self, rootless: bool, user_namespaces: bool) -> Result<(), ProviderError> {
        if rootless {
            return Err(ProviderError::Unsupported(
                "networked sandboxes need root (a veth pair, packet filters and NAT on the \
                 host); rootless sandboxes have loopback only: use the restricted profile, \
                 or E2B"
                    .into(),
            ));
        }
        if !user_namespaces {
            return Err(ProviderError::Unsupported(
                "networked sandboxes need per-sandbox host id ranges (user namespaces on), \
                 which number their links"
                    .into(),
            ));
        }
        let missing: Vec<&str> = ["ip", "nft", "nsenter"]
            .into_iter()
            .filter(|tool| find_program(tool).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(ProviderError::Unsupported(format!(
                "networked sandboxes need {} on the host (apt-get install iproute2 nftables \
                 util-linux)",
                missing.join(", ")
            )));
        }
        self.config
            .upstream()
            .map_err(|why| ProviderError::Unsupported(format!("networked sandboxes: {why}")))?;
        Ok(())
    }

    /// Before the container starts: its resolver, its trust store (with the egress CA when
    /// hosts are intercepted) and the record that it is networked.
    pub fn prepare_bundle(&self, bundle_dir: &Path, saved: &Saved) -> io::Result<()> {
        super::trust::write(
            &bundle_dir.join("rootfs"),
            self.intercept.as_ref().map(|i| i.ca_pem()),
        )?;
        let resolv = format!(
            "# threadbox: names are answered by the host end of this sandbox's link, for what\n\
             # its allowlist allows.\nnameserver {}\noptions timeout:2 attempts:2\n",
            saved.link.host()
        );
        std::fs::write(bundle_dir.join("rootfs/etc/resolv.conf"), resolv)?;
        let bytes = serde_json::to_vec(saved).map_err(io::Error::other)?;
        std::fs::write(bundle_dir.join(SAVED), bytes)
    }

    /// A networked sandbox's record, if it is one.
    pub fn saved(bundle_dir: &Path) -> Option<Saved> {
        let bytes = std::fs::read(bundle_dir.join(SAVED)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Connect the running container (init `pid`) to the host and start serving it. Safe to
    /// repeat (a provider that restarts does, for its live sandboxes): the link is made anew.
    /// `thread_id` names the sandbox's thread in the log lines of its refusals.
    pub async fn attach(
        &self,
        id: &str,
        pid: i32,
        saved: &Saved,
        thread_id: Option<String>,
    ) -> Result<(), ProviderError> {
        self.live.lock().expect("poisoned").remove(id);
        self.ensure_host_table().await?;
        let link = saved.link;
        let host_if = link.host_if();
        let netns = format!("/proc/{pid}/ns/net");
        let _ = run_tool("ip", &["link", "del", &host_if], None).await;
        run_tool(
            "ip",
            &[
                "link",
                "add",
                &host_if,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &pid.to_string(),
            ],
            None,
        )
        .await?;
        let forwards = saved.allow.is_everything_public() || saved.allow.nets().next().is_some();
        if forwards {
            self.open_uplinks(&saved.allow).await?;
        }
        let sysctls = [
            (
                format!("/proc/sys/net/ipv6/conf/{host_if}/disable_ipv6"),
                "1",
            ),
            (
                format!("/proc/sys/net/ipv4/conf/{host_if}/forwarding"),
                if forwards { "1" } else { "0" },
            ),
        ];
        for (path, value) in sysctls {
            std::fs::write(&path, value).map_err(|e| {
                ProviderError::Internal(format!("cannot set {path} to {value}: {e}"))
            })?;
        }
        let host_addr = format!("{}/31", link.host());
        run_tool("ip", &["addr", "add", &host_addr, "dev", &host_if], None).await?;
        run_tool("ip", &["link", "set", &host_if, "up"], None).await?;
        let inside = format!(
            "addr add {}/31 dev eth0\nlink set eth0 up\nroute add default via {} dev eth0\n",
            link.sandbox(),
            link.host()
        );
        let enter = format!("--net={netns}");
        run_tool(
            "nsenter",
            &[&enter, "--", "ip", "-batch", "-"],
            Some(inside.into_bytes()),
        )
        .await?;
        let rules = sandbox_rules(link, &saved.allow, &self.config);
        run_tool(
            "nsenter",
            &[&enter, "--", "nft", "-f", "-"],
            Some(rules.into_bytes()),
        )
        .await?;
        let refusals = Arc::new(RefusalRecorder::new(id, thread_id));
        // Attached again (a profile changed in place): the listeners of the link's last serving
        // close as their tasks see the stop, a moment after it.
        let serving = self
            .serve(link, &saved.allow, &refusals, REATTACH_TRIES)
            .await
            .map_err(|e| {
                ProviderError::Internal(format!("cannot listen on {} for {id}: {e}", link.host()))
            })?;
        self.live
            .lock()
            .expect("poisoned")
            .insert(id.to_owned(), SandboxNet { serving, refusals });
        tracing::info!(sandbox_id = id, link = %link.sandbox(), "sandbox network attached");
        Ok(())
    }

    /// At a provider's open, for a live sandbox another process made: serve its link if it is
    /// there (a process still serving it keeps doing so: the addresses are taken), make it
    /// anew if it is not (a crash part-way through a create).
    pub async fn adopt(
        &self,
        id: &str,
        pid: i32,
        saved: &Saved,
        thread_id: Option<String>,
    ) -> Result<(), ProviderError> {
        let link = saved.link;
        if !Path::new("/sys/class/net").join(link.host_if()).exists() {
            return self.attach(id, pid, saved, thread_id).await;
        }
        let refusals = Arc::new(RefusalRecorder::new(id, thread_id));
        // A provider of this process dropped a moment ago may still be letting go of them.
        match self.serve(link, &saved.allow, &refusals, ADOPT_TRIES).await {
            Ok(serving) => {
                self.live
                    .lock()
                    .expect("poisoned")
                    .insert(id.to_owned(), SandboxNet { serving, refusals });
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                tracing::info!(
                    sandbox_id = id,
                    "another process serves this sandbox's network"
                );
                Ok(())
            }
            Err(e) => Err(ProviderError::Internal(format!(
                "cannot listen on {} for {id}: {e}",
                link.host()
            ))),
        }
    }

    /// Serve `link`'s resolver and proxy, trying again while its addresses are still taken
    /// (`tries` times, 50 ms apart).
    async fn serve(
        &self,
        link: Link,
        allow: &Allowlist,
        refusals: &Arc<RefusalRecorder>,
        tries: usize,
    ) -> io::Result<super::egress::Serving> {
        let mut served = Err(io::Error::from(io::ErrorKind::AddrInUse));
        for _ in 0..tries.max(1) {
            served = super::egress::serve(
                link.host(),
                link.sandbox(),
                allow.clone(),
                self.config.clone(),
                self.connections.clone(),
                refusals.clone(),
                self.intercept.clone(),
            )
            .await;
            if !matches!(&served, Err(e) if e.kind() == io::ErrorKind::AddrInUse) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        served
    }

    /// A sandbox made restricted in place: its resolver says there is no network again and it
    /// is no longer recorded as networked (its link is already gone: `detach`).
    pub fn restrict_bundle(bundle_dir: &Path) -> io::Result<()> {
        std::fs::write(
            bundle_dir.join("rootfs/etc/resolv.conf"),
            super::bundle::RESTRICTED_RESOLV_CONF,
        )?;
        match std::fs::remove_file(bundle_dir.join(SAVED)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// What a networked sandbox's network refused: its resolver's and proxy's counts if this
    /// process serves it (another process's are not seen), and its packet filter's, read in its
    /// namespace (container init `pid`); a part that cannot be read is left unknown, and logged.
    pub async fn refusals(&self, id: &str, pid: i32) -> NetworkRefusals {
        let counted = self
            .live
            .lock()
            .expect("poisoned")
            .get(id)
            .map(|net| net.refusals.snapshot());
        let netns = format!("--net=/proc/{pid}/ns/net");
        let listed = tool_output(
            "nsenter",
            &[
                &netns, "--", "nft", "-j", "list", "table", "inet", HOST_TABLE,
            ],
        )
        .await;
        let config = &self.config;
        let packets = match listed {
            Ok(json) => refusals::packet_filter_refusals(&json, SystemClock.now(), |ip| {
                if config.may_reach(ip.into()) {
                    RefusalReason::NotAllowed
                } else {
                    RefusalReason::AlwaysRefused
                }
            }),
            Err(e) => {
                tracing::debug!(sandbox_id = id, error = %e, "cannot read the packet filter's refusals");
                None
            }
        };
        refusals::merge(counted, packets)
    }

    /// Stop serving a sandbox and remove its host end (gone with its namespace already, when
    /// the container is). Failures are logged: a link left behind is swept at the next open.
    pub async fn detach(&self, id: &str, link: Option<Link>) {
        self.live.lock().expect("poisoned").remove(id);
        if let Some(link) = link {
            let host_if = link.host_if();
            if Path::new("/sys/class/net").join(&host_if).exists() {
                if let Err(e) = run_tool("ip", &["link", "del", &host_if], None).await {
                    tracing::warn!(sandbox_id = id, error = %e, "cannot delete a sandbox link");
                }
            }
        }
    }

    /// Delete host ends whose slot no sandbox on the host holds (`taken` says whether one
    /// does). Run at open.
    pub async fn sweep_links(&self, taken: impl Fn(u32) -> bool) {
        let Ok(entries) = std::fs::read_dir("/sys/class/net") else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(slot) = name
                .strip_prefix(HOST_IF_PREFIX)
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if !taken(slot) {
                tracing::info!(link = name, "removing a leftover sandbox link");
                let _ = run_tool("ip", &["link", "del", &name], None).await;
            }
        }
    }

    /// Let the replies to a sandbox's forwarded traffic back in: IPv4 forwards by the interface
    /// a packet comes in on, so the interfaces the allowlist's networks are routed through
    /// (every routed one, for everything public) need forwarding too. One that had it off gets
    /// it on and joins the host table's `uplinks`, from which nothing but a reply to a sandbox
    /// is forwarded, so the host forwards nothing it did not before. One that had it on (a
    /// router, Docker) is left as it is.
    async fn open_uplinks(&self, allow: &Allowlist) -> Result<(), ProviderError> {
        let mut devices = Vec::new();
        let mut routes = Vec::new();
        if allow.is_everything_public() {
            routes.push(tool_output("ip", &["-o", "-4", "route", "show", "table", "main"]).await?);
        } else {
            for net in allow.nets().filter(|n| n.is_ipv4()) {
                let addr = net.addr().to_string();
                if let Ok(route) = tool_output("ip", &["-o", "route", "get", &addr]).await {
                    routes.push(route);
                }
            }
        }
        for route in routes {
            for line in route.lines() {
                let mut words = line.split_whitespace();
                while let Some(word) = words.next() {
                    if word == "dev" {
                        if let Some(dev) = words.next() {
                            if dev != "lo"
                                && !dev.starts_with(HOST_IF_PREFIX)
                                && !devices.iter().any(|d| d == dev)
                            {
                                devices.push(dev.to_owned());
                            }
                        }
                    }
                }
            }
        }
        for dev in devices {
            let path = format!("/proc/sys/net/ipv4/conf/{dev}/forwarding");
            let on = std::fs::read_to_string(&path).map(|v| v.trim() == "1");
            if !matches!(on, Ok(false)) {
                continue;
            }
            let element = format!("add element inet {HOST_TABLE} uplinks {{ \"{dev}\" }}\n");
            run_tool("nft", &["-f", "-"], Some(element.into_bytes())).await?;
            std::fs::write(&path, "1").map_err(|e| {
                ProviderError::Internal(format!("cannot turn on forwarding on {dev}: {e}"))
            })?;
            tracing::info!(interface = dev, "forwarding on for replies to sandboxes");
        }
        Ok(())
    }

    /// Install the host's table once per provider (the same rules whichever provider does).
    async fn ensure_host_table(&self) -> Result<(), ProviderError> {
        let mut ready = self.host_ready.lock().await;
        if *ready {
            return Ok(());
        }
        run_tool(
            "nft",
            &["-f", "-"],
            Some(host_rules(&self.config).into_bytes()),
        )
        .await?;
        *ready = true;
        Ok(())
    }
}

fn v4_set(nets: &[IpNet]) -> String {
    nets.iter()
        .filter(|n| n.is_ipv4())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The host's table: made if missing, its chains filled anew (in one transaction).
fn host_rules(config: &NetworkConfig) -> String {
    let refused = v4_set(&always_refused_v4());
    let operator = v4_set(&config.operator_allow);
    let operator_rule = if operator.is_empty() {
        String::new()
    } else {
        format!("ip daddr {{ {operator} }} accept\n")
    };
    // The chains are flushed and filled anew; the set of uplinks (see `open_uplinks`) stays,
    // since their forwarding stays on.
    let chains = [
        (
            "input",
            "type filter hook input priority filter - 10; policy accept;",
        ),
        ("from_sandbox_in", ""),
        (
            "forward",
            "type filter hook forward priority filter - 10; policy accept;",
        ),
        ("from_sandbox_out", ""),
        (
            "postrouting",
            "type nat hook postrouting priority srcnat; policy accept;",
        ),
    ];
    let declare: String = chains
        .iter()
        .map(|(c, spec)| format!("chain {c} {{ {spec} }}\n"))
        .collect();
    let flush: String = chains
        .iter()
        .map(|(c, _)| format!("flush chain inet {HOST_TABLE} {c}\n"))
        .collect();
    format!(
        "table inet {HOST_TABLE} {{\nset uplinks {{ type ifname; }}\n{declare}}}\n\
         {flush}\
         table inet {HOST_TABLE} {{\n\
         chain input {{\n type filter hook input priority filter - 10; policy accept;\n\
           iifname \"{HOST_IF_PREFIX}*\" jump from_sandbox_in\n}}\n\
         chain from_sandbox_in {{\n\
           ip daddr {LINK_NET} udp dport {DNS_PORT} accept\n\
           ip daddr {LINK_NET} tcp dport {{ {HTTP_PORT}, {HTTPS_PORT} }} accept\n\
           meta l4proto tcp reject with tcp reset\n\
           reject\n}}\n\
         chain forward {{\n type filter hook forward priority filter - 10; policy accept;\n\
           iifname \"{HOST_IF_PREFIX}*\" jump from_sandbox_out\n\
           oifname \"{HOST_IF_PREFIX}*\" ct state established,related accept\n\
           oifname \"{HOST_IF_PREFIX}*\" drop\n\
           iifname @uplinks drop\n}}\n\
         chain from_sandbox_out {{\n\
           meta nfproto != ipv4 drop\n\
           oifname \"{HOST_IF_PREFIX}*\" drop\n\
           {operator_rule}\
           ip daddr {{ {refused} }} reject\n\
           accept\n}}\n\
         chain postrouting {{\n type nat hook postrouting priority srcnat; policy accept;\n\
           ip saddr {LINK_NET} oifname != \"{HOST_IF_PREFIX}*\" masquerade\n}}\n\
         }}\n"
    )
}

/// The table in a sandbox's own namespace: out through its link only to the host end's DNS and
/// proxy, and to the allowlist's networks that are not always refused.
fn sandbox_rules(link: Link, allow: &Allowlist, config: &NetworkConfig) -> String {
    let host = link.host();
    let refused = v4_set(&always_refused_v4());
    let operator = v4_set(&config.operator_allow);
    let refuse_rule = if operator.is_empty() {
        format!("ip daddr {{ {refused} }} goto refuse\n")
    } else {
        format!("ip daddr {{ {refused} }} ip daddr != {{ {operator} }} goto refuse\n")
    };
    let nets: Vec<IpNet> = if allow.is_everything_public() {
        vec!["0.0.0.0/0".parse().expect("a network")]
    } else {
        allow.nets().copied().collect()
    };
    let nets = v4_set(&nets);
    let allow_rule = if nets.is_empty() {
        String::new()
    } else {
        format!("ip daddr {{ {nets} }} accept\n")
    };
    // Every refusal goes through `refuse`, which counts it (see `refusals`): the packets, and
    // each destination with a port, while the set has room. ICMPv6 is refused uncounted: the
    // sandbox's kernel sends it on its own (router and neighbour solicitations), so counting it
    // would report refusals nobody asked for.
    format!(
        "table inet {HOST_TABLE}\ndelete table inet {HOST_TABLE}\n\
         table inet {HOST_TABLE} {{\n\
         counter {PACKET_COUNTER} {{ }}\n\
         set {RECENT_PACKETS_SET} {{ type ipv4_addr . inet_proto . inet_service; \
           size {RECENT_PACKETS_SIZE}; flags dynamic,timeout; \
           timeout {RECENT_PACKETS_TIMEOUT_SECS}s; counter; }}\n\
         chain refuse {{\n\
           meta l4proto != ipv6-icmp counter name \"{PACKET_COUNTER}\"\n\
           meta nfproto ipv4 meta l4proto {{ tcp, udp }} update @{RECENT_PACKETS_SET} \
             {{ ip daddr . meta l4proto . th dport }}\n\
           meta l4proto tcp reject with tcp reset\n\
           reject\n}}\n\
         chain to_host {{\n type nat hook output priority -100; policy accept;\n\
           ip daddr {host} udp dport 53 dnat ip to {host}:{DNS_PORT}\n\
           ip daddr {host} tcp dport 80 dnat ip to {host}:{HTTP_PORT}\n\
           ip daddr {host} tcp dport 443 dnat ip to {host}:{HTTPS_PORT}\n}}\n\
         chain output {{\n type filter hook output priority filter; policy drop;\n\
           oifname \"lo\" accept\n\
           ip daddr {host} udp dport {DNS_PORT} accept\n\
           ip daddr {host} tcp dport {{ {HTTP_PORT}, {HTTPS_PORT} }} accept\n\
           ip daddr {host} goto refuse\n\
           meta nfproto != ipv4 goto refuse\n\
           {refuse_rule}\
           {allow_rule}\
           goto refuse\n}}\n\
         }}\n"
    )
}

/// A program on `PATH` or in the sbin directories a non-root `PATH` often lacks (as
/// `config::find_program`, which this module cannot import: config imports it).
fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// What one of the host's network tools prints.
async fn tool_output(tool: &str, args: &[&str]) -> Result<String, ProviderError> {
    let program: PathBuf = find_program(tool).unwrap_or_else(|| PathBuf::from(tool));
    let what = format!("{tool} {}", args.join(" "));
    let output = tokio::time::timeout(
        TOOL_TIMEOUT,
        tokio::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| ProviderError::Unavailable(format!("{what}: timed out")))?
    .map_err(|e| ProviderError::Internal(format!("{what}: {e}")))?;
    if !output.status.success() {
        return Err(ProviderError::Internal(format!(
            "{what}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Run one of the host's network tools, with input, within [`TOOL_TIMEOUT`].
async fn run_tool(tool: &str, args: &[&str], input: Option<Vec<u8>>) -> Result<(), ProviderError> {
    use tokio::io::AsyncWriteExt;
    let program: PathBuf = find_program(tool).unwrap_or_else(|| PathBuf::from(tool));
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(if input.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let what = format!("{tool} {}", args.join(" "));
    let run = async {
        let mut child = command.spawn()?;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(&bytes).await?;
        }
        child.wait_with_output().await
    };
    let output = tokio::time::timeout(TOOL_TIMEOUT, run)
        .await
        .map_err(|_| ProviderError::Unavailable(format!("{what}: timed out")))?
        .map_err(|e| ProviderError::Internal(format!("{what}: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ProviderError::Internal(format!(
            "{what}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_unique_per_slot() {
        let a = Link::of_slot(0).unwrap();
        assert_eq!(a.host(), Ipv4Addr::new(198, 18, 0, 0));
        assert_eq!(a.sandbox(), Ipv4Addr::new(198, 18, 0, 1));
        let b = Link::of_slot(65535).unwrap();
        assert_eq!(b.sandbox(), Ipv4Addr::new(198, 19, 255, 255));
        assert!(Link::of_slot(65536).is_err());
        assert_eq!(b.host_if(), "tbh65535");
    }

    /// The scripts as the kernel's nftables reads them (`nft --check`: nothing is changed).
    #[test]
    fn rules_are_valid_nftables() {
        if find_program("nft").is_none() || !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: nft --check needs nft and root");
            return;
        }
        let config = NetworkConfig {
            operator_allow: vec!["10.1.0.0/16".parse().unwrap()],
            ..NetworkConfig::default()
        };
        let allow = Allowlist::parse(["pkg.test", "203.0.113.0/24"]).unwrap();
        let link = Link::of_slot(7).unwrap();
        for script in [
            host_rules(&config),
            host_rules(&NetworkConfig::default()),
            sandbox_rules(link, &allow, &config),
            sandbox_rules(
                link,
                &Allowlist::everything_public(),
                &NetworkConfig::default(),
            ),
            sandbox_rules(link, &Allowlist::parse(["pkg.test"]).unwrap(), &config),
        ] {
            use std::io::Write;
            let mut child = std::process::Command::new(find_program("nft").unwrap())
                .args(["--check", "-f", "-"])
                .stdin(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(script.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{script}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn rules_never_open_refused_networks() {
        let config = NetworkConfig::default();
        let allow = Allowlist::parse(["pkg.test", "203.0.113.0/24"]).unwrap();
        let rules = sandbox_rules(Link::of_slot(3).unwrap(), &allow, &config);
        assert!(
            rules.contains("ip daddr { 203.0.113.0/24 } accept"),
            "{rules}"
        );
        let refuse = rules.find("169.254.0.0/16").unwrap();
        assert!(refuse < rules.find("203.0.113.0/24").unwrap());
        // Every refusal goes through the chain that counts it.
        let output = &rules[rules.find("chain output").unwrap()..];
        assert!(!output.contains("reject"), "{rules}");
        assert!(rules.contains("counter name \"refused\""), "{rules}");
        let host = host_rules(&config);
        assert!(host.contains("masquerade"));
        assert!(host.contains("10.0.0.0/8"));
    }
}
