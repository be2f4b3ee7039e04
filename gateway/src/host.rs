//! The gateway host as the pipeline sees it: its interfaces, own addresses, SNAT
//! addresses, routes and timeouts. Built once from [`Config`] and the interfaces' MAC
//! addresses; read-only afterwards and shared by all workers.

use std::net::Ipv4Addr;

use crate::config::{Config, Ipv4Cidr};
use crate::wire::MacAddr;

/// One interface: its link-layer address and the gateway's addresses on it.
#[derive(Clone, Debug)]
pub struct HostInterface {
    /// Kernel name, for logs.
    pub name: String,
    /// The interface's MAC address (source of every frame sent on it).
    pub mac: MacAddr,
    /// Own addresses with their prefixes (connected subnets).
    pub addresses: Vec<Ipv4Cidr>,
}

/// Connection tracking timeouts in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// TCP once both directions were seen and no FIN/RST (Linux: 5 days; kube-proxy sets 24 h).
    pub tcp_established_ns: u64,
    /// TCP before the reply direction, and after FIN or RST.
    pub tcp_transitory_ns: u64,
    /// UDP until a reply was seen (Linux `nf_conntrack_udp_timeout`: 30 s).
    pub udp_ns: u64,
    /// UDP once both directions were seen (Linux `nf_conntrack_udp_timeout_stream`: 120 s).
    pub udp_stream_ns: u64,
}

/// Everything the pipeline needs to know about the host.
#[derive(Clone, Debug)]
pub struct Host {
    /// Interfaces, indexed as in the configuration (the `iface` of frames).
    pub interfaces: Vec<HostInterface>,
    /// SNAT addresses.
    pub snat_addresses: Vec<Ipv4Addr>,
    /// First and last SNAT port (inclusive).
    pub snat_ports: (u16, u16),
    /// Default next hop: (address, interface index).
    pub router: Option<(Ipv4Addr, u8)>,
    /// Conntrack timeouts.
    pub timeouts: Timeouts,
}

const NS_PER_S: u64 = 1_000_000_000;

impl Host {
    /// Builds the host view of `config`; `macs[i]` is the MAC address of interface `i`.
    ///
    /// # Panics
    /// If `macs` is shorter than the configured interfaces (a driver bug).
    pub fn new(config: &Config, macs: &[MacAddr]) -> Self {
        let interfaces = config
            .interfaces
            .iter()
            .zip(macs)
            .map(|(i, &mac)| HostInterface { name: i.name.clone(), mac, addresses: i.addresses.clone() })
            .collect::<Vec<_>>();
        assert_eq!(interfaces.len(), config.interfaces.len(), "one MAC per interface");
        let ct = &config.conntrack;
        Self {
            interfaces,
            snat_addresses: config.snat.addresses.clone(),
            snat_ports: (config.snat.port_min, config.snat.port_max),
            router: config.router.as_ref().map(|r| (r.address, r.interface as u8)),
            timeouts: Timeouts {
                tcp_established_ns: u64::from(ct.tcp_established_timeout_s) * NS_PER_S,
                tcp_transitory_ns: u64::from(ct.tcp_transitory_timeout_s) * NS_PER_S,
                udp_ns: u64::from(ct.udp_timeout_s) * NS_PER_S,
                udp_stream_ns: u64::from(ct.udp_timeout_s.max(120)) * NS_PER_S,
            },
        }
    }

    /// Whether `ip` is one of the gateway's own addresses (an interface address or a
    /// SNAT address).
    #[inline]
    pub fn is_own(&self, ip: Ipv4Addr) -> bool {
        self.snat_addresses.contains(&ip) || self.interfaces.iter().any(|i| i.addresses.iter().any(|c| c.addr == ip))
    }

    /// Egress interface and next hop for `dst`: a connected subnet sends directly, anything
    /// else goes to the router. `None` when there is no route.
    #[inline]
    pub fn route(&self, dst: Ipv4Addr) -> Option<(u8, Ipv4Addr)> {
        for (i, iface) in self.interfaces.iter().enumerate() {
            if iface.addresses.iter().any(|c| c.contains(dst)) {
                return Some((i as u8, dst));
            }
        }
        self.router.map(|(addr, iface)| (iface, addr))
    }

    /// The SNAT address for flows leaving through `iface`: the first SNAT address in one of
    /// that interface's subnets, else the first SNAT address.
    #[inline]
    pub fn snat_address_for(&self, iface: u8) -> (usize, Ipv4Addr) {
        let i = self.interfaces.get(iface as usize);
        self.snat_addresses
            .iter()
            .enumerate()
            .find(|(_, a)| i.is_some_and(|i| i.addresses.iter().any(|c| c.contains(**a))))
            .map_or((0, self.snat_addresses[0]), |(n, a)| (n, *a))
    }

    /// The gateway's first address on `iface` (the source of its ARP requests).
    pub fn source_address(&self, iface: u8) -> Option<Ipv4Addr> {
        self.interfaces.get(iface as usize)?.addresses.first().map(|c| c.addr)
    }
}
