//! Address prefixes as the table and the configuration write them: [`IpCidr`], an IPv4 or
//! IPv6 network (`192.0.2.0/24`, `2001:db8::/64`) with its host bits cleared.
//!
//! Front doors carry their `loadBalancerSourceRanges` as [`IpCidr`]s
//! ([`crate::FrontendSpec::source_ranges`]); torii-control parses `nodePortAddresses` into
//! them. Parsing never panics: a malformed prefix is `None`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4 or IPv6 prefix, as written `192.0.2.0/24` or `2001:db8::/64`. Host bits are
/// cleared when parsing (as kube-proxy's `ParseCIDRSloppy` does for `nodePortAddresses`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpCidr {
    /// The network address (host bits zero).
    pub addr: IpAddr,
    /// Prefix length: 0..=32 for IPv4, 0..=128 for IPv6.
    pub prefix_len: u8,
}

impl IpCidr {
    /// Parses `address/length`; `None` when either part is malformed or the length is
    /// too long for the family.
    pub fn parse(s: &str) -> Option<Self> {
        let (a, l) = s.trim().split_once('/')?;
        let addr: IpAddr = a.parse().ok()?;
        if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let prefix_len: u8 = l.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix_len <= max).then(|| Self { addr: mask(addr, prefix_len), prefix_len })
    }

    /// Whether `ip` is inside this prefix (never, when the families differ).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix_len) == self.addr
    }
}

impl std::fmt::Display for IpCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// `ip` with every bit after the first `prefix_len` cleared.
fn mask(ip: IpAddr, prefix_len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix_len.min(32))).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix_len.min(128))).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_cidr_parse_and_contains() {
        assert!(IpCidr::parse("0.0.0.0/0").unwrap().contains("1.2.3.4".parse().unwrap()));
        assert!(!IpCidr::parse("0.0.0.0/0").unwrap().contains("::1".parse().unwrap()));
        assert!(IpCidr::parse("::/0").unwrap().contains("2001:db8::1".parse().unwrap()));
        assert!(IpCidr::parse("2001:db8::1/128").unwrap().contains("2001:db8::1".parse().unwrap()));
        for bad in ["10.0.0.0", "10.0.0.0/", "10.0.0.0/+8", "::/129", "x/8", "10.0.0.0/8/8"] {
            assert!(IpCidr::parse(bad).is_none(), "{bad}");
        }
    }
}
