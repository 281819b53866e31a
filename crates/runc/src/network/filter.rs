//! The packet filters of networked sandboxes, as nftables scripts: the host's table (one for
//! every provider on the host) and the table in each sandbox's own namespace. Only the scripts
//! are made here; `networks` loads them with the host's `nft`.

use super::config::NetworkConfig;
use super::egress::{DNS_PORT, HTTPS_PORT, HTTP_PORT};
use super::link::{Link, HOST_IF_PREFIX, HOST_TABLE, LINK_NET};
use super::refusals::{
    PACKET_COUNTER, RECENT_PACKETS_SET, RECENT_PACKETS_SIZE, RECENT_PACKETS_TIMEOUT_SECS,
};
use threadbox_core::ports::{always_refused_v4, Allowlist, IpNet};

fn v4_set(nets: &[IpNet]) -> String {
    nets.iter()
        .filter(|n| n.is_ipv4())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The host's table: made if missing, its chains filled anew (in one transaction).
pub(super) fn host_rules(config: &NetworkConfig) -> String {
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
pub(super) fn sandbox_rules(link: Link, allow: &Allowlist, config: &NetworkConfig) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::tools::find_program;
    use super::*;

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
