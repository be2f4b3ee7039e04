//! VIP announcement over BGP through an existing routing daemon (BIRD 2), and graceful drain.
//!
//! torii speaks no routing protocol itself. As MetalLB's FRR mode renders FRR's
//! configuration and asks FRR to reload it, the gateway renders one BIRD 2 configuration
//! file of its own ([`bird::render`]: a static protocol holding the VIPs' host routes in
//! tables of their own, an export filter with the configured communities, MED and
//! LOCAL_PREF, one BGP protocol per peer, and BFD where asked) and asks BIRD to re-read
//! its configuration over BIRD's control socket ([`bird::configure`]); the operator's
//! `bird.conf` `include`s that file. BIRD does the protocol.
//!
//! What is announced is a pure function of the table the gateway adopted and its health
//! ([`announced`]): the host route (`/32`, `/128`) of every VIP that has a front door of
//! an announced kind ([`BgpConfig::kinds`]) whose Service port has a usable endpoint
//! (a ring backend: ready, or serving-and-terminating when none is ready), while the
//! gateway's `/healthz` verdict ([`crate::metrics::health`]) is ok; nothing otherwise, and
//! nothing once the gateway drains. [`Announcer`] runs that on a thread of its own
//! (`torii-announce`), off the workers, and pushes each change to BIRD.
//!
//! Configuration: the `[bgp]` table ([`RawBgp`], validated into [`BgpConfig`] with errors
//! naming the key, as every other key).

pub mod bird;
mod driver;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::table::config::{invalid, ConfigError};
use crate::table::{FrontendKind, Table};

pub use driver::Announcer;

/// Debian's BIRD 2 control socket (`bird -s`), the default of `bgp.bird_socket`.
pub const DEFAULT_BIRD_SOCKET: &str = "/run/bird/bird.ctl";

/// The validated `[bgp]` table: how the gateway announces its VIPs, and how it drains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpConfig {
    /// The gateway's autonomous system number (`asn`; 1..=4294967295, not 23456, RFC 6793
    /// § 9's AS_TRANS).
    pub asn: u32,
    /// The BIRD configuration file torii writes (`bird_config`, absolute): the operator's
    /// `bird.conf` `include`s it. Replaced atomically (written beside it, renamed over it).
    pub bird_config: PathBuf,
    /// BIRD's control socket (`bird_socket`, default [`DEFAULT_BIRD_SOCKET`]).
    pub bird_socket: PathBuf,
    /// The front-door kinds whose addresses are announced (`announce`: `"ExternalIP"`,
    /// `"LoadBalancer"`, `"ClusterIP"`; default the first two, as MetalLB announces
    /// load-balancer and external addresses and never ClusterIPs). NodePorts live on the
    /// gateway's own addresses and are never announced.
    pub kinds: Vec<FrontendKind>,
    /// How long, seconds, a gateway told to stop (SIGTERM) keeps forwarding after its
    /// routes were withdrawn (`drain_s`, default 30, at most 3600; 0 stops at once).
    pub drain_s: u32,
    /// BGP communities added to every announced route (`communities`, `"65000:100"`,
    /// RFC 1997).
    pub communities: Vec<(u16, u16)>,
    /// MULTI_EXIT_DISC of the announced routes (`med`; absent: none sent), RFC 4271 § 5.1.4.
    pub med: Option<u32>,
    /// LOCAL_PREF of the announced routes (`local_pref`; sent to iBGP peers only, RFC 4271
    /// § 5.1.5).
    pub local_pref: Option<u32>,
    /// BFD transmit and receive interval, milliseconds (`bfd_interval_ms`, default 100),
    /// for peers with `bfd = true` (RFC 5880).
    pub bfd_interval_ms: u32,
    /// BFD detection multiplier (`bfd_multiplier`, default 3).
    pub bfd_multiplier: u8,
    /// The routers the VIPs are announced to.
    pub peers: Vec<Peer>,
}

/// One BGP neighbour (`[[bgp.peers]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The router's address (`address`). The routes of its family are sent to it.
    pub address: IpAddr,
    /// Its autonomous system number (`asn`); equal to [`BgpConfig::asn`] makes an iBGP
    /// session.
    pub asn: u32,
    /// The BGP NEXT_HOP announced (`next_hop`): an address of the gateway's data plane,
    /// which torii answers ARP / Neighbor Discovery for. Default: the gateway's own
    /// interface address in the peer's subnet. BIRD itself talks from a kernel address of
    /// the host (`local_address`), so the next hop is a third party's (RFC 4271 § 5.1.3).
    pub next_hop: IpAddr,
    /// The host's (kernel) address BIRD opens the session from (`local_address`; absent:
    /// BIRD picks).
    pub local_address: Option<IpAddr>,
    /// Hold time, seconds (`hold_time_s`, default 90 — RFC 4271 § 10's suggestion; 0 or
    /// 3..=65535, § 4.2); the keepalive interval is a third of it.
    pub hold_time_s: u16,
    /// BIRD's connect retry time, seconds (`connect_retry_s`, default 5, 1..=65535).
    pub connect_retry_s: u16,
    /// Whether the session is tracked by BFD (`bfd`, default false).
    pub bfd: bool,
}

/// The `[bgp]` table as written; [`RawBgp::validate`] checks it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBgp {
    asn: u32,
    bird_config: String,
    bird_socket: Option<String>,
    announce: Option<Vec<String>>,
    drain_s: Option<u32>,
    #[serde(default)]
    communities: Vec<String>,
    med: Option<u32>,
    local_pref: Option<u32>,
    bfd_interval_ms: Option<u32>,
    bfd_multiplier: Option<u8>,
    peers: Vec<RawPeer>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeer {
    address: String,
    asn: u32,
    next_hop: Option<String>,
    local_address: Option<String>,
    hold_time_s: Option<u16>,
    connect_retry_s: Option<u16>,
    #[serde(default)]
    bfd: bool,
}

/// The front-door kinds named under `key` (`bgp.announce`, `l2.announce`): `ExternalIP`,
/// `LoadBalancer`, `ClusterIP`, each kept once; absent, the first two (MetalLB announces
/// load-balancer and external addresses, never ClusterIPs).
///
/// # Errors
/// [`ConfigError::Invalid`] naming `key[i]` for any other name (NodePorts are the gateway's
/// own addresses and never announced).
pub fn kinds(key: &str, names: Option<&[String]>) -> Result<Vec<FrontendKind>, ConfigError> {
    let mut kinds = Vec::new();
    match names {
        None => kinds.extend([FrontendKind::ExternalIp, FrontendKind::LoadBalancer]),
        Some(names) => {
            for (i, n) in names.iter().enumerate() {
                let kind = [FrontendKind::ExternalIp, FrontendKind::LoadBalancer, FrontendKind::ClusterIp]
                    .into_iter()
                    .find(|k| k.as_str() == n)
                    .ok_or_else(|| {
                        invalid(
                            format!("{key}[{i}]"),
                            format!(
                                "{n:?} is not one of \"ExternalIP\", \"LoadBalancer\", \"ClusterIP\" \
                                 (NodePorts are on the gateway's own addresses and never announced)"
                            ),
                        )
                    })?;
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
        }
    }
    Ok(kinds)
}

/// What a gateway that gives its VIPs up on SIGTERM offers the drain (`main`'s): BGP's
/// [`Announcer`] and L2 mode's [`crate::l2::driver::Speaker`].
pub trait Withdraw {
    /// Give every VIP up from now on.
    fn drain(&self);
    /// Whether that has taken effect (BIRD took the empty file; the Leases were released).
    fn withdrawn(&self) -> bool;
}

impl Withdraw for Announcer {
    fn drain(&self) {
        Announcer::drain(self);
    }
    fn withdrawn(&self) -> bool {
        Announcer::withdrawn(self)
    }
}

/// Checks an autonomous system number.
fn check_asn(key: &str, asn: u32) -> Result<u32, ConfigError> {
    match asn {
        0 => Err(invalid(key, "0 is reserved (RFC 7607)")),
        23456 => Err(invalid(key, "23456 is AS_TRANS (RFC 6793 § 9), not an AS of its own")),
        a => Ok(a),
    }
}

impl RawBgp {
    /// Validates the table; `own` are the gateway's interface addresses with their prefix
    /// lengths (the connected subnets), which next hops must be among.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key (`bgp.peers[1].next_hop: …`).
    pub fn validate(self, own: &[(IpAddr, u8)]) -> Result<BgpConfig, ConfigError> {
        let asn = check_asn("bgp.asn", self.asn)?;
        let absolute = |key: &str, p: &str| {
            let path = PathBuf::from(p);
            if path.is_absolute() && !p.contains('"') && !p.contains('\n') {
                Ok(path)
            } else {
                Err(invalid(key, format!("{p:?} is not an absolute path (without quotes or newlines)")))
            }
        };
        let bird_config = absolute("bgp.bird_config", &self.bird_config)?;
        let bird_socket = absolute("bgp.bird_socket", self.bird_socket.as_deref().unwrap_or(DEFAULT_BIRD_SOCKET))?;
        let kinds = kinds("bgp.announce", self.announce.as_deref())?;
        let drain_s = self.drain_s.unwrap_or(30);
        if drain_s > 3600 {
            return Err(invalid("bgp.drain_s", format!("{drain_s} is out of range 0..=3600 seconds")));
        }
        let mut communities = Vec::new();
        for (i, c) in self.communities.iter().enumerate() {
            let parsed = c.split_once(':').and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
            communities.push(parsed.ok_or_else(|| {
                invalid(
                    format!("bgp.communities[{i}]"),
                    format!("{c:?} is not a community like \"65000:100\" (two numbers 0..=65535, RFC 1997)"),
                )
            })?);
        }
        let bfd_interval_ms = self.bfd_interval_ms.unwrap_or(100);
        if !(10..=60_000).contains(&bfd_interval_ms) {
            return Err(invalid("bgp.bfd_interval_ms", format!("{bfd_interval_ms} is out of range 10..=60000")));
        }
        let bfd_multiplier = self.bfd_multiplier.unwrap_or(3);
        if bfd_multiplier == 0 {
            return Err(invalid("bgp.bfd_multiplier", "must be at least 1 (RFC 5880 § 4.1)"));
        }
        if self.peers.is_empty() {
            return Err(invalid("bgp.peers", "at least one peer is required"));
        }
        let mut peers: Vec<Peer> = Vec::with_capacity(self.peers.len());
        for (i, p) in self.peers.iter().enumerate() {
            let key = |k: &str| format!("bgp.peers[{i}].{k}");
            let ip = |k: &str, s: &str| {
                s.parse::<IpAddr>().map_err(|_| invalid(key(k), format!("{s:?} is not an IPv4 or IPv6 address")))
            };
            let address = ip("address", &p.address)?;
            if peers.iter().any(|q| q.address == address) {
                return Err(invalid(key("address"), format!("{address} is listed twice")));
            }
            let peer_asn = check_asn(&key("asn"), p.asn)?;
            let next_hop = match &p.next_hop {
                Some(s) => {
                    let nh = ip("next_hop", s)?;
                    if !own.iter().any(|&(a, _)| a == nh) {
                        return Err(invalid(
                            key("next_hop"),
                            format!("{nh} is not one of the interfaces' addresses: routers would send the VIPs' traffic elsewhere"),
                        ));
                    }
                    nh
                }
                None => own
                    .iter()
                    .find(|&&(a, len)| {
                        crate::table::IpCidr::parse(&format!("{a}/{len}")).is_some_and(|c| c.contains(address))
                    })
                    .map(|&(a, _)| a)
                    .ok_or_else(|| {
                        invalid(
                            key("next_hop"),
                            format!("required: {address} is in none of the interfaces' subnets, so no own address is the obvious next hop"),
                        )
                    })?,
            };
            if next_hop.is_ipv4() != address.is_ipv4() {
                return Err(invalid(key("next_hop"), format!("{next_hop} is not of the family of the peer {address}")));
            }
            let local_address = p.local_address.as_deref().map(|s| ip("local_address", s)).transpose()?;
            if local_address.is_some_and(|l| l.is_ipv4() != address.is_ipv4()) {
                return Err(invalid(key("local_address"), "must be of the peer's address family"));
            }
            let hold_time_s = p.hold_time_s.unwrap_or(90);
            if matches!(hold_time_s, 1 | 2) {
                return Err(invalid(key("hold_time_s"), format!("{hold_time_s}: 0 or at least 3 (RFC 4271 § 4.2)")));
            }
            let connect_retry_s = p.connect_retry_s.unwrap_or(5);
            if connect_retry_s == 0 {
                return Err(invalid(key("connect_retry_s"), "must be at least 1"));
            }
            peers.push(Peer {
                address,
                asn: peer_asn,
                next_hop,
                local_address,
                hold_time_s,
                connect_retry_s,
                bfd: p.bfd,
            });
        }
        Ok(BgpConfig {
            asn,
            bird_config,
            bird_socket,
            kinds,
            drain_s,
            communities,
            med: self.med,
            local_pref: self.local_pref,
            bfd_interval_ms,
            bfd_multiplier,
            peers,
        })
    }
}

/// The addresses to announce: every VIP with a front door of one of `kinds` whose Service
/// port has a ring backend (a usable endpoint, as the data plane would choose one), when
/// `healthy`; none otherwise. Sorted, each once. O(front doors · log).
pub fn announced(table: &Table, kinds: &[FrontendKind], healthy: bool) -> BTreeSet<IpAddr> {
    let mut vips = BTreeSet::new();
    if !healthy {
        return vips;
    }
    for i in 0..table.frontends().len() {
        let Some(front) = table.frontend_at(i) else { continue };
        if !kinds.contains(&front.kind) {
            continue;
        }
        if table.service(front.service).is_some_and(|s| !s.backends.is_empty()) {
            vips.insert(crate::table::layout::addr_from16(table.frontends()[i].addr));
        }
    }
    vips
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{build, BackendSpec, FrontendSpec, Protocol, ServiceSpec, Storage, TableSpec};

    pub(super) fn raw(text: &str) -> RawBgp {
        #[derive(Deserialize)]
        struct File {
            bgp: RawBgp,
        }
        toml::from_str::<File>(text).map(|f| f.bgp).unwrap()
    }

    pub(super) fn own() -> Vec<(IpAddr, u8)> {
        vec![
            ("10.99.1.2".parse().unwrap(), 24),
            ("10.70.0.1".parse().unwrap(), 24),
            ("2001:db8:99::2".parse().unwrap(), 64),
        ]
    }

    const MINIMAL: &str = "[bgp]\nasn = 65001\nbird_config = \"/run/torii/bird.conf\"\n\
                           [[bgp.peers]]\naddress = \"10.99.1.1\"\nasn = 65000\n";

    #[test]
    fn defaults() {
        let c = raw(MINIMAL).validate(&own()).unwrap();
        assert_eq!(c.kinds, [FrontendKind::ExternalIp, FrontendKind::LoadBalancer]);
        assert_eq!((c.drain_s, c.bfd_interval_ms, c.bfd_multiplier), (30, 100, 3));
        assert_eq!(c.bird_socket, PathBuf::from(DEFAULT_BIRD_SOCKET));
        let p = &c.peers[0];
        assert_eq!(p.next_hop, "10.99.1.2".parse::<IpAddr>().unwrap(), "the own address in the peer's subnet");
        assert_eq!((p.hold_time_s, p.connect_retry_s, p.bfd, p.local_address), (90, 5, false, None));
    }

    #[test]
    fn errors_name_the_key() {
        for (edit, want) in [
            (("asn = 65001", "asn = 0"), "bgp.asn: 0 is reserved"),
            (("asn = 65001", "asn = 23456"), "bgp.asn: 23456 is AS_TRANS"),
            (("asn = 65000", "asn = 0"), "bgp.peers[0].asn: 0"),
            (("\"/run/torii/bird.conf\"", "\"bird.conf\""), "bgp.bird_config: \"bird.conf\" is not an absolute"),
            (("address = \"10.99.1.1\"", "address = \"10.99.1\""), "bgp.peers[0].address: \"10.99.1\""),
            (("address = \"10.99.1.1\"", "address = \"192.0.2.1\""), "bgp.peers[0].next_hop: required"),
            (
                ("asn = 65000\n", "asn = 65000\nnext_hop = \"10.99.1.9\"\n"),
                "bgp.peers[0].next_hop: 10.99.1.9 is not one of the interfaces' addresses",
            ),
            (
                ("asn = 65000\n", "asn = 65000\nnext_hop = \"2001:db8:99::2\"\n"),
                "bgp.peers[0].next_hop: 2001:db8:99::2 is not of the family",
            ),
            (("asn = 65000\n", "asn = 65000\nhold_time_s = 2\n"), "bgp.peers[0].hold_time_s: 2: 0 or at least 3"),
            (("asn = 65001\n", "asn = 65001\nannounce = [\"NodePort\"]\n"), "bgp.announce[0]: \"NodePort\""),
            (("asn = 65001\n", "asn = 65001\ncommunities = [\"65000\"]\n"), "bgp.communities[0]: \"65000\""),
            (("asn = 65001\n", "asn = 65001\ncommunities = [\"1:65536\"]\n"), "bgp.communities[0]"),
            (("asn = 65001\n", "asn = 65001\ndrain_s = 4000\n"), "bgp.drain_s: 4000"),
            (("asn = 65001\n", "asn = 65001\nbfd_multiplier = 0\n"), "bgp.bfd_multiplier"),
        ] {
            let text = MINIMAL.replacen(edit.0, edit.1, 1);
            assert_ne!(text, MINIMAL, "{edit:?} edits nothing");
            let e = raw(&text).validate(&own()).unwrap_err().to_string();
            assert!(e.starts_with(want), "{edit:?}: {e}");
        }
        let twice = format!("{MINIMAL}[[bgp.peers]]\naddress = \"10.99.1.1\"\nasn = 65002\n");
        let e = raw(&twice).validate(&own()).unwrap_err().to_string();
        assert!(e.starts_with("bgp.peers[1].address: 10.99.1.1 is listed twice"), "{e}");
        let e = toml::from_str::<toml::Table>(&MINIMAL.replace("asn = 65000", "asn = 65000\nbogus = 1"))
            .map(|t| RawBgp::deserialize(t["bgp"].clone()).map(|_| ()))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    /// 203.0.113.10 (ExternalIP, TCP 80 with an endpoint, UDP 9 without), 203.0.113.11
    /// (ExternalIP, no endpoint), 203.0.113.20 (LoadBalancer), 10.96.0.10 (ClusterIP) and
    /// 2001:db8:203::10 (ExternalIP).
    fn table() -> Table {
        let fe = |addr: &str, port, protocol, kind, service| FrontendSpec {
            addr: addr.parse().unwrap(),
            port,
            protocol,
            kind,
            service,
            source_ranges: vec![],
        };
        let svc = |name: &str, backends: &[&str]| ServiceSpec {
            name: name.into(),
            backends: backends.iter().map(|b| BackendSpec { addr: b.parse().unwrap(), port: 8080 }).collect(),
            affinity_timeout_s: None,
            draining: vec![],
        };
        let spec = TableSpec {
            frontends: vec![
                fe("203.0.113.10", 80, Protocol::Tcp, FrontendKind::ExternalIp, 0),
                fe("203.0.113.10", 9, Protocol::Udp, FrontendKind::ExternalIp, 1),
                fe("203.0.113.11", 80, Protocol::Tcp, FrontendKind::ExternalIp, 1),
                fe("203.0.113.20", 80, Protocol::Tcp, FrontendKind::LoadBalancer, 0),
                fe("10.96.0.10", 80, Protocol::Tcp, FrontendKind::ClusterIp, 0),
                fe("2001:db8:203::10", 80, Protocol::Tcp, FrontendKind::ExternalIp, 2),
            ],
            services: vec![
                svc("demo/web:http", &["10.70.0.11", "10.70.0.12"]),
                svc("demo/empty:http", &[]),
                svc("demo/web6:http", &["fd00:70::11"]),
            ],
        };
        Table::new(Storage::Owned(build(&spec, 3).unwrap())).unwrap()
    }

    #[test]
    fn announces_vips_with_a_usable_endpoint_of_the_chosen_kinds_while_healthy() {
        let t = table();
        let got = |kinds: &[FrontendKind], healthy| -> Vec<String> {
            announced(&t, kinds, healthy).iter().map(ToString::to_string).collect()
        };
        let default = [FrontendKind::ExternalIp, FrontendKind::LoadBalancer];
        assert_eq!(got(&default, true), ["203.0.113.10", "203.0.113.20", "2001:db8:203::10"]);
        assert_eq!(got(&[FrontendKind::ClusterIp], true), ["10.96.0.10"]);
        assert!(got(&default, false).is_empty(), "an unhealthy gateway announces nothing");
        assert!(announced(&Table::empty(), &default, true).is_empty());
    }
}
