//! A networked sandbox's allowlist: which domains (exact, or `*.suffix` for every name under
//! a suffix), addresses and networks (CIDR) it may reach. Parsed once, with an error naming
//! the entry that is wrong; matched by providers that enforce it.
//!
//! Whatever an allowlist says, private, loopback, link-local and metadata addresses are never
//! reachable through it ([`is_always_refused`]): only an operator's own setting in a provider
//! may open one of them, never the caller who names the list.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most entries one allowlist may hold.
pub const MAX_ALLOW_ENTRIES: usize = 1000;

/// The longest domain name (RFC 1035, in its text form without the trailing dot).
const MAX_DOMAIN_LEN: usize = 253;

/// Why an allowlist was refused; always names the entry (or the count) at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error("allowlist entry {index} ({entry:?}): {why}")]
    Entry {
        /// Its position in the list, from 1.
        index: usize,
        entry: String,
        why: String,
    },
    #[error("the allowlist has {count} entries; at most {MAX_ALLOW_ENTRIES} are allowed")]
    TooMany { count: usize },
}

/// The isolation profile a sandbox runs under, and a thread's choice of it (kept in its
/// session record). Serialized as `"restricted"`, `"networked"` (everything public) or
/// `{"networked": {"allow": [...]}}`; all three are read back.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum NetworkProfile {
    /// No network at all, loopback only (the default).
    #[default]
    Restricted,
    /// Outbound network through an allowlist; an empty one allows every public address.
    /// Private, link-local and metadata addresses stay out of reach either way.
    Networked { allow: Allowlist },
}

impl NetworkProfile {
    pub fn is_networked(&self) -> bool {
        matches!(self, NetworkProfile::Networked { .. })
    }

    /// One line for people: `restricted`, `networked (every public address)` or
    /// `networked (allow: a.test, 203.0.113.0/24)`.
    pub fn describe(&self) -> String {
        match self {
            NetworkProfile::Restricted => "restricted".to_owned(),
            NetworkProfile::Networked { allow } if allow.is_everything_public() => {
                "networked (every public address)".to_owned()
            }
            NetworkProfile::Networked { allow } => {
                format!("networked (allow: {})", allow.to_strings().join(", "))
            }
        }
    }
}

/// An IPv4 or IPv6 network: an address with a prefix length. A single address is a network of
/// its full length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// A network; `None` when the prefix is longer than the address or host bits are set.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let net = Self { addr, prefix };
        (prefix <= net.max_prefix() && net.network() == addr).then_some(net)
    }

    /// The network of one address.
    pub fn host(addr: IpAddr) -> Self {
        let prefix = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        Self { addr, prefix }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    fn max_prefix(&self) -> u8 {
        match self.addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        }
    }

    /// The address with its host bits cleared.
    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & v4_mask(self.prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & v6_mask(self.prefix))),
        }
    }

    /// Whether `ip` is inside this network (an IPv4 address never is in an IPv6 network, nor
    /// the other way round).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = v4_mask(self.prefix);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = v6_mask(self.prefix);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }
}

fn v4_mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn v6_mask(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix == self.max_prefix() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

impl FromStr for IpNet {
    type Err = String;

    /// `203.0.113.7`, `203.0.113.0/24`, `2001:db8::1`, `2001:db8::/32`.
    fn from_str(s: &str) -> Result<Self, String> {
        let Some((addr, prefix)) = s.split_once('/') else {
            return s
                .parse::<IpAddr>()
                .map(Self::host)
                .map_err(|_| "not an IP address".to_owned());
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let max = Self::host(addr).max_prefix();
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max && !prefix.starts_with('+'))
            .ok_or_else(|| format!("the prefix length must be a number from 0 to {max}"))?;
        let net = Self { addr, prefix };
        if net.network() != addr {
            return Err(format!(
                "host bits are set; the network is {}/{prefix}",
                net.network()
            ));
        }
        Ok(net)
    }
}

/// One allowlist entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AllowEntry {
    /// Exactly this name (lowercase, no trailing dot).
    Domain(String),
    /// Every name under this suffix (written `*.suffix`), not the suffix itself.
    Suffix(String),
    /// An address or a network.
    Net(IpNet),
}

impl AllowEntry {
    /// Parse one entry; the error says what is wrong with it (without repeating it).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err("an entry may not be empty".into());
        }
        let first = entry.as_bytes()[0];
        let looks_numeric = first.is_ascii_digit() || entry.contains(':') || entry.contains('/');
        if looks_numeric {
            // A name may start with a digit (`1password.com`); fall back to a name then, but
            // keep the address error for what can only be an address.
            match entry.parse::<IpNet>() {
                Ok(net) => return Ok(Self::Net(net)),
                Err(why) if entry.contains('/') || entry.contains(':') => return Err(why),
                Err(why) if entry.bytes().all(|b| b.is_ascii_digit() || b == b'.') => {
                    return Err(why)
                }
                Err(_) => {}
            }
        }
        if let Some(suffix) = entry.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err("a wildcard may only lead the entry, as in *.example.com".into());
            }
            return Ok(Self::Suffix(domain(suffix)?));
        }
        if entry.contains('*') {
            return Err(if entry == "*" {
                "a lone wildcard is not an entry; an empty allowlist already allows every \
                 public address"
                    .into()
            } else {
                "a wildcard may only lead the entry, as in *.example.com".into()
            });
        }
        Ok(Self::Domain(domain(entry)?))
    }

    /// Whether this entry allows the host name `name` (already normalised by [`normalize`]).
    fn allows_name(&self, name: &str) -> bool {
        match self {
            AllowEntry::Domain(d) => d == name,
            AllowEntry::Suffix(s) => name
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            AllowEntry::Net(_) => false,
        }
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowEntry::Domain(d) => f.write_str(d),
            AllowEntry::Suffix(s) => write!(f, "*.{s}"),
            AllowEntry::Net(n) => write!(f, "{n}"),
        }
    }
}

/// A domain name, checked and lowercased: labels of letters, digits and hyphens (not leading or
/// trailing one), 1-63 bytes each, 253 in all; one trailing dot is dropped.
fn domain(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err("the domain is empty".into());
    }
    if name.len() > MAX_DOMAIN_LEN {
        return Err(format!(
            "a domain name is at most {MAX_DOMAIN_LEN} characters"
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("a domain name has no empty labels (\"..\")".into());
        }
        if label.len() > 63 {
            return Err("a label of a domain name is at most 63 characters".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(
                "a domain name holds only letters, digits, hyphens and dots (write \
                 international names in their xn-- form)"
                    .into(),
            );
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label of a domain name may not start or end with a hyphen".into());
        }
    }
    if name
        .split('.')
        .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("not an IP address, and a domain name is not all digits".into());
    }
    Ok(name)
}

/// A host name as the allowlist compares it: lowercase, without a trailing dot.
pub fn normalize(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// What a networked sandbox may reach. Empty means every public address (and name); private,
/// loopback, link-local and metadata addresses stay out of reach either way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Allowlist {
    entries: Vec<AllowEntry>,
}

impl Allowlist {
    /// Everything public.
    pub fn everything_public() -> Self {
        Self::default()
    }

    /// Parse a list of entries; the first bad entry is named in the error, and a list longer
    /// than [`MAX_ALLOW_ENTRIES`] is refused (with its count) before any entry is looked at.
    /// Duplicates are dropped.
    pub fn parse<I, S>(entries: I) -> Result<Self, AllowlistError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let entries: Vec<S> = entries.into_iter().collect();
        if entries.len() > MAX_ALLOW_ENTRIES {
            return Err(AllowlistError::TooMany {
                count: entries.len(),
            });
        }
        let mut parsed: Vec<AllowEntry> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let entry = entry.as_ref();
            let one = AllowEntry::parse(entry).map_err(|why| AllowlistError::Entry {
                index: i + 1,
                entry: shorten(entry),
                why,
            })?;
            if !parsed.contains(&one) {
                parsed.push(one);
            }
        }
        Ok(Self { entries: parsed })
    }

    /// True when the list allows every public address.
    pub fn is_everything_public(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    /// The address and network entries.
    pub fn nets(&self) -> impl Iterator<Item = &IpNet> {
        self.entries.iter().filter_map(|e| match e {
            AllowEntry::Net(net) => Some(net),
            _ => None,
        })
    }

    /// Whether any entry is a name (exact or wildcard).
    pub fn has_names(&self) -> bool {
        self.entries
            .iter()
            .any(|e| !matches!(e, AllowEntry::Net(_)))
    }

    /// Whether the list lets a sandbox use the host name `host` (a name, or an address in its
    /// text form, which is then matched as an address with [`Self::allows_ip`]). Says nothing
    /// about the addresses the name resolves to: check each with [`is_always_refused`].
    pub fn allows_host(&self, host: &str) -> bool {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.allows_ip(ip);
        }
        if self.entries.is_empty() {
            return true;
        }
        let name = normalize(host);
        self.entries.iter().any(|e| e.allows_name(&name))
    }

    /// Whether the list names `ip` (or an empty list allows it as public). An address that is
    /// [`is_always_refused`] is allowed by no list.
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        if is_always_refused(ip) {
            return false;
        }
        self.entries.is_empty() || self.nets().any(|net| net.contains(ip))
    }

    /// The entries as text, as they serialize.
    pub fn to_strings(&self) -> Vec<String> {
        self.entries.iter().map(ToString::to_string).collect()
    }
}

/// Long entries (a pasted file) are cut in errors, so the error stays readable.
fn shorten(entry: &str) -> String {
    const MAX: usize = 80;
    if entry.len() <= MAX {
        return entry.to_owned();
    }
    let mut end = MAX;
    while !entry.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &entry[..end])
}

impl Serialize for Allowlist {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_strings().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Allowlist {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = Vec::<String>::deserialize(deserializer)?;
        Allowlist::parse(&entries).map_err(serde::de::Error::custom)
    }
}

/// The networks no allowlist opens: "this network", RFC 1918, shared address space
/// (100.64/10), loopback, link-local (169.254/16, where cloud metadata services answer at
/// 169.254.169.254), the IETF protocol block, benchmarking (198.18/15, where the runc provider
/// puts its own links), multicast and the reserved block with broadcast; for IPv6 the
/// unspecified and loopback addresses, unique local (fc00::/7, fd00::/8 included), link-local,
/// site-local and multicast. IPv4 addresses mapped or translated into IPv6 count as the IPv4
/// address they carry.
pub fn is_always_refused(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return refused_v4(v4);
            }
            let bits = u128::from(v6);
            // NAT64 (64:ff9b::/96) carries an IPv4 address in its low bits.
            if bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 {
                return refused_v4(Ipv4Addr::from(bits as u32));
            }
            v6.is_unspecified()
                || v6.is_loopback()
                || ALWAYS_REFUSED_V6.iter().any(|(net, len)| {
                    IpNet {
                        addr: IpAddr::V6(Ipv6Addr::from(*net)),
                        prefix: *len,
                    }
                    .contains(ip)
                })
        }
    }
}

/// IPv4 networks refused whatever the list says, as (network, prefix).
pub const ALWAYS_REFUSED_V4: &[([u8; 4], u8)] = &[
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([127, 0, 0, 0], 8),
    ([169, 254, 0, 0], 16),
    ([172, 16, 0, 0], 12),
    ([192, 0, 0, 0], 24),
    ([192, 168, 0, 0], 16),
    ([198, 18, 0, 0], 15),
    ([224, 0, 0, 0], 4),
    ([240, 0, 0, 0], 4),
];

/// IPv6 networks refused whatever the list says (besides `::` and `::1`).
const ALWAYS_REFUSED_V6: &[(u128, u8)] = &[
    (0xfc00_u128 << 112, 7),
    (0xfe80_u128 << 112, 10),
    (0xfec0_u128 << 112, 10),
    (0xff00_u128 << 112, 8),
];

fn refused_v4(ip: Ipv4Addr) -> bool {
    ALWAYS_REFUSED_V4.iter().any(|(net, len)| {
        let mask = v4_mask(*len);
        u32::from(ip) & mask == u32::from(Ipv4Addr::from(*net))
    })
}

/// The always-refused IPv4 networks, as [`IpNet`]s (for packet filters).
pub fn always_refused_v4() -> Vec<IpNet> {
    ALWAYS_REFUSED_V4
        .iter()
        .map(|(net, len)| IpNet {
            addr: IpAddr::V4(Ipv4Addr::from(*net)),
            prefix: *len,
        })
        .collect()
}

impl Serialize for NetworkProfile {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            NetworkProfile::Restricted => serializer.serialize_str("restricted"),
            NetworkProfile::Networked { allow } if allow.is_everything_public() => {
                serializer.serialize_str("networked")
            }
            NetworkProfile::Networked { allow } => {
                #[derive(Serialize)]
                struct Networked<'a> {
                    allow: &'a Allowlist,
                }
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("networked", &Networked { allow })?;
                map.end()
            }
        }
    }
}

/// Read as `"restricted"`, `"networked"` (everything public, as before allowlists) or
/// `{"networked": {"allow": [...]}}`, with a bad entry's error passed through as it is.
impl<'de> Deserialize<'de> for NetworkProfile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Networked {
            #[serde(default)]
            allow: Allowlist,
        }
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = NetworkProfile;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#""restricted", "networked" or {"networked": {"allow": [...]}}"#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NetworkProfile, E> {
                match v {
                    "restricted" => Ok(NetworkProfile::Restricted),
                    "networked" => Ok(NetworkProfile::Networked {
                        allow: Allowlist::everything_public(),
                    }),
                    other => Err(E::unknown_variant(other, &["restricted", "networked"])),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<NetworkProfile, A::Error> {
                use serde::de::Error;
                let Some(key) = map.next_key::<String>()? else {
                    return Err(A::Error::custom("an empty object is not a network profile"));
                };
                let profile = match key.as_str() {
                    "networked" => NetworkProfile::Networked {
                        allow: map.next_value::<Networked>()?.allow,
                    },
                    "restricted" => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        NetworkProfile::Restricted
                    }
                    other => {
                        return Err(A::Error::unknown_variant(
                            other,
                            &["restricted", "networked"],
                        ))
                    }
                };
                if map.next_key::<String>()?.is_some() {
                    return Err(A::Error::custom("a network profile has one key"));
                }
                Ok(profile)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_of_every_kind_parse() {
        let list = Allowlist::parse([
            "pkg.test",
            "*.Example.COM.",
            "203.0.113.7",
            "198.51.100.0/24",
            "2001:db8::/32",
            "2001:db8::1",
            "1password.com",
        ])
        .unwrap();
        assert_eq!(
            list.to_strings(),
            [
                "pkg.test",
                "*.example.com",
                "203.0.113.7",
                "198.51.100.0/24",
                "2001:db8::/32",
                "2001:db8::1",
                "1password.com"
            ]
        );
        assert!(list.has_names());
        assert_eq!(list.nets().count(), 4);
    }

    #[test]
    fn bad_entries_are_named() {
        for (bad, why) in [
            ("10.0.0.0/33", "prefix length"),
            ("10.0.0.1/8", "host bits"),
            ("300.1.1.1", "not an IP"),
            ("1.2.3", "not an IP"),
            ("2001:db8::/129", "prefix length"),
            ("a.*.com", "wildcard"),
            ("*", "empty allowlist"),
            ("*.*.com", "wildcard"),
            ("exa mple.com", "letters, digits"),
            ("-bad.com", "hyphen"),
            ("a..b", "empty labels"),
            ("", "empty"),
            ("*.", "empty"),
            ("http://x.com", "IP address"),
        ] {
            let err = Allowlist::parse(["ok.test", bad]).unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(&err, AllowlistError::Entry { index: 2, entry, .. } if entry == bad.trim()),
                "{bad}: {err:?}"
            );
            assert!(text.contains(why), "{bad}: {text}");
            assert!(text.contains(&format!("{bad:?}")), "{bad}: {text}");
        }
        let long = "a".repeat(64) + ".com";
        assert!(Allowlist::parse([long]).is_err());
    }

    #[test]
    fn too_many_entries_name_the_count() {
        let many: Vec<String> = (0..10_000).map(|i| format!("h{i}.test")).collect();
        let err = Allowlist::parse(&many).unwrap_err();
        assert_eq!(err, AllowlistError::TooMany { count: 10_000 });
        assert!(err.to_string().contains("10000"), "{err}");
        assert!(Allowlist::parse(&many[..MAX_ALLOW_ENTRIES]).is_ok());
    }

    #[test]
    fn names_match_exactly_or_under_a_wildcard() {
        let list = Allowlist::parse(["pkg.test", "*.cdn.test"]).unwrap();
        assert!(list.allows_host("pkg.test"));
        assert!(list.allows_host("PKG.test."));
        assert!(!list.allows_host("other.test"));
        assert!(!list.allows_host("x.pkg.test"));
        assert!(!list.allows_host("pkg.test.evil"));
        assert!(list.allows_host("a.cdn.test"));
        assert!(list.allows_host("a.b.cdn.test"));
        assert!(!list.allows_host("cdn.test"));
        assert!(!list.allows_host("xcdn.test"));
        assert!(!list.allows_host("203.0.113.7"));
        assert!(Allowlist::everything_public().allows_host("anything.test"));
    }

    #[test]
    fn addresses_match_their_networks_and_never_private_ones() {
        let list = Allowlist::parse([
            "203.0.113.0/24",
            "2001:db8::/32",
            "10.0.0.0/8",
            "169.254.169.254",
        ])
        .unwrap();
        assert!(list.allows_ip(ip("203.0.113.200")));
        assert!(!list.allows_ip(ip("203.0.114.1")));
        assert!(list.allows_ip(ip("2001:db8::5")));
        assert!(list.allows_host("[2001:db8::5]"));
        // Listed by a caller, still refused.
        assert!(!list.allows_ip(ip("10.1.2.3")));
        assert!(!list.allows_ip(ip("169.254.169.254")));
        let public = Allowlist::everything_public();
        assert!(public.allows_ip(ip("203.0.113.1")));
        assert!(!public.allows_ip(ip("127.0.0.1")));
    }

    #[test]
    fn private_loopback_link_local_and_metadata_are_always_refused() {
        for refused in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.169.254",
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "::",
            "::1",
            "fd00::1",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(is_always_refused(ip(refused)), "{refused}");
        }
        for public in [
            "203.0.113.7",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2001:db8::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_always_refused(ip(public)), "{public}");
        }
    }

    #[test]
    fn serde_is_a_list_of_strings_and_validates() {
        let list = Allowlist::parse(["pkg.test", "203.0.113.0/24"]).unwrap();
        let json = serde_json::to_value(&list).unwrap();
        assert_eq!(json, serde_json::json!(["pkg.test", "203.0.113.0/24"]));
        let back: Allowlist = serde_json::from_value(json).unwrap();
        assert_eq!(back, list);
        let err = serde_json::from_str::<Allowlist>(r#"["ok.test", "a.*.b"]"#).unwrap_err();
        assert!(err.to_string().contains("a.*.b"), "{err}");
    }

    #[test]
    fn nets_contain_what_they_should() {
        let net: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(net.contains(ip("1.2.3.4")));
        assert!(!net.contains(ip("::1")));
        let net: IpNet = "::/0".parse().unwrap();
        assert!(net.contains(ip("2001:db8::1")));
        assert_eq!(IpNet::new(ip("10.0.0.1"), 8), None);
        assert_eq!(
            IpNet::new(ip("10.0.0.0"), 8).unwrap().to_string(),
            "10.0.0.0/8"
        );
    }

    #[test]
    fn profiles_read_the_old_names_and_the_allowlist_form() {
        use super::NetworkProfile;
        let read = |s: &str| serde_json::from_str::<NetworkProfile>(s);
        assert_eq!(read(r#""restricted""#).unwrap(), NetworkProfile::Restricted);
        let public = NetworkProfile::Networked {
            allow: Allowlist::everything_public(),
        };
        assert_eq!(read(r#""networked""#).unwrap(), public);
        let listed = read(r#"{"networked": {"allow": ["pkg.test"]}}"#).unwrap();
        assert_eq!(
            listed,
            NetworkProfile::Networked {
                allow: Allowlist::parse(["pkg.test"]).unwrap()
            }
        );
        for profile in [NetworkProfile::Restricted, public, listed] {
            let text = serde_json::to_string(&profile).unwrap();
            assert_eq!(read(&text).unwrap(), profile, "{text}");
        }
        let err = read(r#"{"networked": {"allow": ["10.0.0.0/33"]}}"#).unwrap_err();
        assert!(err.to_string().contains("10.0.0.0/33"), "{err}");
        assert!(read(r#""open""#).is_err());
        assert!(read(r#"{"networked": {"alow": []}}"#).is_err());
    }
}
