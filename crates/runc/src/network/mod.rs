//! Networked sandboxes (`NetworkProfile::Networked`), as root.
//!
//! Each networked sandbox's own network namespace (runc's, owned by the sandbox's user
//! namespace) gets one veth pair to the host: `eth0` inside with `198.18.x.y+1/31`, `tbh<slot>`
//! on the host with `198.18.x.y/31` (the slot is the sandbox's host id range's, so it is unique
//! on the host; 198.18/15 is the benchmarking block, which no allowlist opens). Inside:
//!
//! - `/etc/resolv.conf` names the host end, where an in-process DNS server ([`dns`]) answers every name
//!   the allowlist allows with the host end's address and every other with NXDOMAIN;
//! - TCP 80 and 443 to the host end reach the egress proxy ([`egress`]), which reads the
//!   HTTP `Host` or the TLS SNI, checks it against the allowlist, resolves it itself (through
//!   the configured upstream resolver) and refuses addresses that are always refused; for a
//!   host with operator credentials it terminates TLS and adds them ([`intercept`]),
//!   with the deployment's CA, which the sandbox's own trust store holds ([`trust`]);
//! - an nftables table in the sandbox's namespace lets out only that (and, forwarded and
//!   masqueraded by the host, the allowlist's addresses and networks that are not always
//!   refused); everything else is rejected, whatever socket a program uses. Nothing inside has
//!   a capability to change it.
//!
//! The sandbox's own table rewrites its 53, 80 and 443 on the host end to [`egress::DNS_PORT`],
//! [`egress::HTTP_PORT`] and [`egress::HTTPS_PORT`], where this process listens (so no service of the host on
//! those well-known ports collides or is reached).
//!
//! On the host, one table (`inet threadbox`) backs it up: traffic from `tbh*` reaches the host
//! only at those three ports of the link addresses, is forwarded never to another
//! sandbox nor to an always-refused network (unless the operator opened it), and is
//! masqueraded on its way out (forwarding is turned on for the interfaces it leaves by, see
//! `Networks::open_uplinks`). IPv6 is off on the links.
//!
//! Everything per sandbox goes with its network namespace: the veth pair dies with the
//! container, the listeners with `SandboxNet`; a kill also deletes the host end by name.
//!
//! # The files
//!
//! | file | what it does |
//! |---|---|
//! | `networks` | [`Networks`]: each sandbox's link (veth pair, addresses, routes), attaching, adopting after a restart, detaching, sweeping leftover links, the uplinks that carry replies |
//! | `link` | a sandbox's link: its addresses by host id slot, and the names the host's table matches |
//! | `filter` | the nftables scripts: the host's table and each sandbox's own |
//! | `tools` | running the host's `ip`, `nft` and `nsenter` with a time limit |
//! | `config` | [`NetworkConfig`]: the operator's settings (upstream resolver, operator allowlist, credentials, caps) |
//! | `dns` | the sandbox's resolver (allowed names answered with the host end, others NXDOMAIN) and the proxy's own DNS client |
//! | `egress` | the egress proxy: reads `Host` or SNI, checks the allowlist, resolves and connects, refuses always-refused addresses |
//! | `intercept` | HTTP request by request (plain HTTP, and TLS to hosts with operator credentials), the credentials added at egress |
//! | `egress_ca` | the deployment's CA that intercepted TLS is signed with, kept in the state directory |
//! | `trust` | what a sandbox trusts for TLS: the host's CAs plus the egress CA, and the variables that point tools at them |
//! | `refusals` | what the resolver, the proxy and the packet filter refused, bounded, counted and logged |
//! | `hostile` | (tests only) seeded hostile input for the property tests of the hand-written parsers |

mod config;
mod dns;
mod egress;
mod egress_ca;
mod filter;
#[cfg(test)]
mod hostile;
mod intercept;
mod link;
mod networks;
mod refusals;
mod tools;
mod trust;

pub use self::config::NetworkConfig;
pub(crate) use self::link::Link;
pub(crate) use self::networks::{Networks, Saved};
