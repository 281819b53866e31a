//! [`Networks`]: every networked sandbox of one provider, its link to the host (a veth pair),
//! the tables that filter it, and the resolver and proxy this process serves it with. See the
//! module above for the whole picture.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::config::NetworkConfig;
use super::filter::{host_rules, sandbox_rules};
use super::intercept::Interceptor;
use super::link::{Link, HOST_IF_PREFIX, HOST_TABLE};
use super::refusals::{self, RefusalRecorder};
use super::tools::{find_program, run_tool, tool_output};
use crate::runtime::ContainerState;
use threadbox_core::ports::{
    Allowlist, Clock, NetworkRefusals, ProviderError, RefusalReason, SandboxOwner, SystemClock,
};

/// The file in a networked sandbox's bundle that says so (and keeps its allowlist for a
/// provider that restarts).
const SAVED: &str = "network.json";
/// Tries at serving a link whose addresses another serving of this process still holds: at
/// a provider's open (a provider dropped a moment ago), and when a sandbox's profile changes
/// in place (its last serving stopping), 50 ms apart.
const ADOPT_TRIES: usize = 4;
const REATTACH_TRIES: usize = 40;

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
    pub fn add_trust_env(
        &self,
        env: &mut std::collections::BTreeMap<String, String>,
        image_root: bool,
    ) {
        super::trust::add_env(
            env,
            super::trust::TrustPaths::of(image_root),
            self.intercept.is_some(),
        );
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
        // Never through an image sandbox's root, which its root user can rearrange: its
        // managed files are kept outside it and bound in (see `image_root`).
        let root = crate::image_root::managed_root(bundle_dir);
        let paths = super::trust::TrustPaths::of(crate::image_root::is_image_sandbox(bundle_dir));
        super::trust::write(&root, paths, self.intercept.as_ref().map(|i| i.ca_pem()))?;
        let resolv = format!(
            "# threadbox: names are answered by the host end of this sandbox's link, for what\n\
             # its allowlist allows.\nnameserver {}\noptions timeout:2 attempts:2\n",
            saved.link.host()
        );
        std::fs::write(root.join("etc/resolv.conf"), resolv)?;
        let bytes = serde_json::to_vec(saved).map_err(io::Error::other)?;
        std::fs::write(bundle_dir.join(SAVED), bytes)
    }

    /// A networked sandbox's record, if it is one.
    pub fn saved(bundle_dir: &Path) -> Option<Saved> {
        let bytes = std::fs::read(bundle_dir.join(SAVED)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Connect the running container to the host and start serving it. Safe to repeat (a
    /// provider that restarts does, for its live sandboxes): the link is made anew. The
    /// container's thread names it in the log lines of its refusals.
    pub async fn attach(
        &self,
        container: &ContainerState,
        saved: &Saved,
    ) -> Result<(), ProviderError> {
        let (id, pid) = (container.id.as_str(), container.pid);
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
        // Attached again (a profile changed in place): the listeners of the link's last serving
        // close as their tasks see the stop, a moment after it.
        self.serve(container, saved, REATTACH_TRIES)
            .await
            .map_err(|e| cannot_listen(id, link, e))?;
        tracing::info!(sandbox_id = id, link = %link.sandbox(), "sandbox network attached");
        Ok(())
    }

    /// At a provider's open, for a live sandbox another process made: serve its link if it is
    /// there (a process still serving it keeps doing so: the addresses are taken), make it
    /// anew if it is not (a crash part-way through a create).
    pub async fn adopt(
        &self,
        container: &ContainerState,
        saved: &Saved,
    ) -> Result<(), ProviderError> {
        let link = saved.link;
        if !Path::new("/sys/class/net").join(link.host_if()).exists() {
            return self.attach(container, saved).await;
        }
        // A provider of this process dropped a moment ago may still be letting go of them.
        match self.serve(container, saved, ADOPT_TRIES).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                tracing::info!(
                    sandbox_id = %container.id,
                    "another process serves this sandbox's network"
                );
                Ok(())
            }
            Err(e) => Err(cannot_listen(&container.id, link, e)),
        }
    }

    /// Serve a sandbox's resolver and proxy on its link, and count what they refuse, trying
    /// again while the link's addresses are still taken (`tries` times, 50 ms apart).
    async fn serve(
        &self,
        container: &ContainerState,
        saved: &Saved,
        tries: usize,
    ) -> io::Result<()> {
        let link = saved.link;
        let refusals = Arc::new(RefusalRecorder::new(&container.id, thread_of(container)));
        let mut served = Err(io::Error::from(io::ErrorKind::AddrInUse));
        for _ in 0..tries.max(1) {
            served = super::egress::serve(
                link.host(),
                link.sandbox(),
                saved.allow.clone(),
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
        let serving = served?;
        self.live
            .lock()
            .expect("poisoned")
            .insert(container.id.clone(), SandboxNet { serving, refusals });
        Ok(())
    }

    /// A sandbox made restricted in place: its resolver says there is no network again and it
    /// is no longer recorded as networked (its link is already gone: `detach`).
    pub fn restrict_bundle(bundle_dir: &Path) -> io::Result<()> {
        std::fs::write(
            crate::image_root::managed_root(bundle_dir).join("etc/resolv.conf"),
            crate::bundle::RESTRICTED_RESOLV_CONF,
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

fn cannot_listen(id: &str, link: Link, e: io::Error) -> ProviderError {
    ProviderError::Internal(format!("cannot listen on {} for {id}: {e}", link.host()))
}

/// The thread a container was made for, from its annotations (for log lines).
fn thread_of(container: &ContainerState) -> Option<String> {
    SandboxOwner::from_metadata(&container.annotations).map(|owner| owner.thread_id.to_string())
}
