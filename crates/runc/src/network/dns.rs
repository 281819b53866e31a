//! DNS for networked sandboxes (see `network`): the sandbox's resolver, which answers every
//! name its allowlist allows with the host end of its link (where the egress proxy listens)
//! and every other with NXDOMAIN, asking no one; and the proxy's own client, which asks the
//! upstream resolver for a name's IPv4 addresses. Hand-written (one question, A records): the
//! little of DNS this needs, with every length checked, so hostile packets are dropped
//! (property-tested over generated and spoilt messages: `hostile`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::net::UdpSocket;

use super::refusals::RefusalRecorder;
use threadbox_core::ports::{Allowlist, RefusalReason, RefusedBy};

const DNS_A: u16 = 1;
const DNS_IN: u16 = 1;

/// One question, as a query carries it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Question {
    pub id: u16,
    pub flags: u16,
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    /// Where the question ends in the message.
    pub end: usize,
}

/// Read a query's single question; `None` for anything else (names in queries are never
/// compressed).
pub(crate) fn parse_question(msg: &[u8]) -> Option<Question> {
    if msg.len() < 12 {
        return None;
    }
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
    if qdcount != 1 {
        return None;
    }
    let (name, mut at) = read_name(msg, 12)?;
    let qtype = u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]);
    let qclass = u16::from_be_bytes([*msg.get(at + 2)?, *msg.get(at + 3)?]);
    at += 4;
    Some(Question {
        id,
        flags,
        name,
        qtype,
        qclass,
        end: at,
    })
}

/// An uncompressed name at `at`; its text (lowercase, no trailing dot) and where it ends.
fn read_name(msg: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut name = String::new();
    loop {
        let len = *msg.get(at)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 || name.len() + len > 254 {
            return None;
        }
        let label = msg.get(at..at + len)?;
        if !label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        {
            return None;
        }
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(&String::from_utf8_lossy(label).to_ascii_lowercase());
        at += len;
    }
    Some((name, at))
}

/// Skip a possibly compressed name in an answer.
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)?;
        if len & 0xC0 == 0xC0 {
            return Some(at + 2);
        }
        at += 1;
        if len == 0 {
            return Some(at);
        }
        at += len as usize;
    }
}

/// The sandbox resolver's answer to `query`: the host end's address for an allowed name's A
/// question, no answer for its other questions, NXDOMAIN for a name not allowed; `None` for a
/// message that is no query (dropped).
pub(crate) fn answer(query: &[u8], allow: &Allowlist, host: Ipv4Addr) -> Option<Vec<u8>> {
    let q = parse_question(query)?;
    if q.flags & 0x8000 != 0 {
        return None; // a response
    }
    let opcode = (q.flags >> 11) & 0xF;
    let allowed = !q.name.is_empty()
        && q.name.parse::<IpAddr>().is_err()
        && !q.name.ends_with(".arpa")
        && has_names_or_everything(allow)
        && allow.allows_host(&q.name);
    let (rcode, answers) = if opcode != 0 {
        (4u16, 0u16) // not implemented
    } else if !allowed {
        (3, 0)
    } else if q.qtype == DNS_A && q.qclass == DNS_IN {
        (0, 1)
    } else {
        (0, 0)
    };
    // QR, the query's opcode and RD, RA.
    let flags = 0x8000 | (q.flags & 0x7900) | 0x0080 | rcode;
    let mut out = Vec::with_capacity(q.end + 16);
    out.extend_from_slice(&q.id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&answers.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&query[12..q.end]);
    if answers == 1 {
        out.extend_from_slice(&[0xC0, 0x0C]);
        out.extend_from_slice(&DNS_A.to_be_bytes());
        out.extend_from_slice(&DNS_IN.to_be_bytes());
        out.extend_from_slice(&30u32.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&host.octets());
    }
    Some(out)
}

/// Whether any name at all can be allowed (an allowlist of only addresses allows none).
fn has_names_or_everything(allow: &Allowlist) -> bool {
    allow.is_everything_public() || allow.has_names()
}

/// The name a reply refused because the allowlist does not name it: NXDOMAIN for a name, not
/// for a reverse lookup or an address asked as a name (tools ask those on their own).
fn refused_name(query: &[u8], reply: &[u8]) -> Option<String> {
    let nxdomain = reply.get(3).is_some_and(|flags| flags & 0x0F == 3);
    let q = parse_question(query)?;
    let noise = q.name.is_empty() || q.name.ends_with(".arpa") || q.name.parse::<IpAddr>().is_ok();
    (nxdomain && !noise).then_some(q.name)
}

/// Serve the sandbox's resolver on its link's host end until aborted, counting the names it
/// refuses in `refusals`. Queries from any address but the sandbox's are ignored.
pub(crate) async fn serve_dns(
    socket: UdpSocket,
    sandbox: Ipv4Addr,
    allow: Allowlist,
    refusals: std::sync::Arc<RefusalRecorder>,
) {
    let host = match socket.local_addr() {
        Ok(SocketAddr::V4(addr)) => *addr.ip(),
        _ => return,
    };
    let mut buf = vec![0u8; 1500];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if from.ip() != IpAddr::V4(sandbox) {
            continue;
        }
        if let Some(reply) = answer(&buf[..n], &allow, host) {
            if let Some(name) = refused_name(&buf[..n], &reply) {
                refusals.refused(RefusedBy::Dns, RefusalReason::NotAllowed, &name);
            }
            let _ = socket.send_to(&reply, from).await;
        }
    }
}

/// The IPv4 addresses of `name`, asked of `upstream` (A records; CNAME chains are followed by
/// the upstream resolver, whose answer carries them).
pub(crate) async fn resolve_a(
    upstream: SocketAddr,
    name: &str,
    timeout: Duration,
) -> io::Result<Vec<Ipv4Addr>> {
    let id: u16 = (uuid::Uuid::new_v4().as_u128() & 0xFFFF) as u16;
    let mut query = Vec::with_capacity(name.len() + 18);
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad name"));
        }
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.push(0);
    query.extend_from_slice(&DNS_A.to_be_bytes());
    query.extend_from_slice(&DNS_IN.to_be_bytes());
    let bind: SocketAddr = if upstream.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(bind).await?;
    socket.connect(upstream).await?;
    let ask = async {
        let mut buf = vec![0u8; 4096];
        for _ in 0..2 {
            socket.send(&query).await?;
            let waited = tokio::time::timeout(timeout / 2, async {
                loop {
                    let n = socket.recv(&mut buf).await?;
                    if let Some(ips) = parse_a_answer(&buf[..n], id, name) {
                        return Ok::<_, io::Error>(ips);
                    }
                }
            })
            .await;
            if let Ok(result) = waited {
                return result;
            }
        }
        Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"))
    };
    ask.await
}

/// The A records of a response to our query `id` for `name`; `None` if it is not that.
fn parse_a_answer(msg: &[u8], id: u16, name: &str) -> Option<Vec<Ipv4Addr>> {
    let q = parse_question(msg)?;
    if q.id != id || q.flags & 0x8000 == 0 || q.name != name.to_ascii_lowercase() {
        return None;
    }
    let ancount = u16::from_be_bytes([msg[6], msg[7]]);
    let mut at = q.end;
    let mut ips = Vec::new();
    for _ in 0..ancount {
        at = skip_name(msg, at)?;
        let rtype = u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]);
        let class = u16::from_be_bytes([*msg.get(at + 2)?, *msg.get(at + 3)?]);
        let len = u16::from_be_bytes([*msg.get(at + 8)?, *msg.get(at + 9)?]) as usize;
        at += 10;
        let data = msg.get(at..at + len)?;
        if rtype == DNS_A && class == DNS_IN && len == 4 {
            ips.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += len;
    }
    Some(ips)
}

#[cfg(test)]
mod tests {
    use super::super::hostile::Rng;
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&1u16.to_be_bytes());
        q
    }

    #[test]
    fn the_resolver_answers_allowed_names_with_the_host_end() {
        let allow = Allowlist::parse(["pkg.test"]).unwrap();
        let host = Ipv4Addr::new(198, 18, 0, 2);
        let reply = answer(&query("PKG.test", 1), &allow, host).unwrap();
        assert_eq!(reply[3] & 0x0F, 0);
        assert_eq!(&reply[reply.len() - 4..], &host.octets());
        let ips = parse_a_answer(&reply, 0x1234, "pkg.test").unwrap();
        assert_eq!(ips, [host]);
        let aaaa = answer(&query("pkg.test", 28), &allow, host).unwrap();
        assert_eq!(aaaa[3] & 0x0F, 0);
        assert!(parse_a_answer(&aaaa, 0x1234, "pkg.test")
            .unwrap()
            .is_empty());
        let other = answer(&query("other.test", 1), &allow, host).unwrap();
        assert_eq!(other[3] & 0x0F, 3, "NXDOMAIN");
        assert_eq!(
            refused_name(&query("other.test", 1), &other).as_deref(),
            Some("other.test"),
            "a refusal to count"
        );
        assert_eq!(refused_name(&query("pkg.test", 1), &reply), None);
        let reverse = query("1.0.18.198.in-addr.arpa", 12);
        let not_counted = answer(&reverse, &allow, host).unwrap();
        assert_eq!(not_counted[3] & 0x0F, 3);
        assert_eq!(
            refused_name(&reverse, &not_counted),
            None,
            "tools ask these"
        );
        // Only addresses: no name resolves.
        let ips_only = Allowlist::parse(["203.0.113.7"]).unwrap();
        let none = answer(&query("pkg.test", 1), &ips_only, host).unwrap();
        assert_eq!(none[3] & 0x0F, 3);
    }

    #[test]
    fn hostile_queries_get_no_answer_and_no_panic() {
        let allow = Allowlist::everything_public();
        let host = Ipv4Addr::new(198, 18, 0, 2);
        assert!(answer(&[], &allow, host).is_none());
        assert!(answer(&[0; 11], &allow, host).is_none());
        let mut q = query("pkg.test", 1);
        q[12] = 0xC0; // a compression pointer in a query
        assert!(answer(&q, &allow, host).is_none());
        let mut q = query("pkg.test", 1);
        q.truncate(q.len() - 2);
        assert!(answer(&q, &allow, host).is_none());
        for len in 0..64 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            let _ = answer(&bytes, &allow, host);
            let _ = parse_a_answer(&bytes, 0, "x");
        }
    }

    #[test]
    fn generated_queries_and_spoilt_messages_are_answered_or_dropped_never_a_panic() {
        let allow = Allowlist::everything_public();
        let host = Ipv4Addr::new(198, 18, 0, 2);
        for seed in 0..3000 {
            let mut rng = Rng::new(seed);
            let name = rng.name();
            let qtype = [1u16, 28, 12, 255][rng.below(4)];
            let q = query(&name, qtype);
            let well_formed = name.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
            let reply = answer(&q, &allow, host);
            if well_formed {
                let reply = reply.unwrap_or_else(|| panic!("seed {seed}: {name:?}"));
                let ips = parse_a_answer(&reply, 0x1234, &name).expect("our own reply reads");
                let wanted: &[Ipv4Addr] = if qtype == 1 { &[host] } else { &[] };
                assert_eq!(ips, wanted, "seed {seed}");
            }
            for _ in 0..8 {
                let spoilt = rng.mutate(&q);
                if let Some(reply) = answer(&spoilt, &allow, host) {
                    // An answer echoes the query's id and question, adds at most one record.
                    assert_eq!(reply[..2], spoilt[..2], "seed {seed}");
                    assert!(reply[2] & 0x80 != 0, "seed {seed}: a response");
                    assert!(reply.len() <= spoilt.len() + 16, "seed {seed}");
                }
                if let Some(reply) = answer(&q, &allow, host) {
                    let spoilt = rng.mutate(&reply);
                    if let Some(ips) = parse_a_answer(&spoilt, 0x1234, &name) {
                        assert!(ips.len() <= spoilt.len() / 14, "seed {seed}");
                    }
                }
            }
            let len = rng.below(600);
            let noise = rng.bytes(len);
            let _ = answer(&noise, &allow, host);
            let _ = parse_a_answer(
                &noise,
                u16::from_be_bytes([noise.first().copied().unwrap_or(0), 0]),
                &name,
            );
        }
    }
}
