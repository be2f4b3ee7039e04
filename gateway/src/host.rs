//! The gateway host as the pipeline sees it: its ports and the interfaces on them (untagged
//! or one 802.1Q VLAN each), own addresses, SNAT addresses, routes and timeouts. Built once
//! from [`Config`] and the ports' MAC addresses; read-only afterwards and shared by all
//! workers.

use std::net::Ipv4Addr;

use crate::config::{Config, Ipv4Cidr};
use crate::wire::MacAddr;

pub use crate::conntrack::Timeouts;

/// One interface (a link): its port, VLAN, link-layer address and the gateway's addresses
/// on it.
#[derive(Clone, Debug)]
pub struct HostInterface {
    /// Kernel name of the port, with `.VID` for a VLAN interface; for logs.
    pub name: String,
    /// The port's MAC address (source of every frame sent on it).
    pub mac: MacAddr,
    /// Own addresses with their prefixes (connected subnets).
    pub addresses: Vec<Ipv4Cidr>,
    /// Index into [`Host::ports`] of the port the interface is on.
    pub port: u8,
    /// The 802.1Q VLAN identifier its frames carry; `None` for untagged.
    pub vlan: Option<u16>,
}

/// One port (device) and the interfaces on it, for classifying received frames.
#[derive(Clone, Debug)]
pub struct HostPort {
    /// Kernel name (AF_PACKET) or label, for logs.
    pub name: String,
    /// The port's MAC address.
    pub mac: MacAddr,
    /// The interface receiving untagged and priority-tagged frames, if any.
    pub untagged: Option<u8>,
    /// `(VID, interface)` of the VLAN interfaces, sorted by VID.
    pub vlans: Vec<(u16, u8)>,
}

/// Everything the pipeline needs to know about the host.
#[derive(Clone, Debug)]
pub struct Host {
    /// Interfaces, indexed as in the configuration.
    pub interfaces: Vec<HostInterface>,
    /// Ports, indexed as in [`Config::ports`] (the `iface` drivers give and take).
    pub ports: Vec<HostPort>,
    /// SNAT addresses.
    pub snat_addresses: Vec<Ipv4Addr>,
    /// First and last SNAT port (inclusive).
    pub snat_ports: (u16, u16),
    /// Default next hop: (address, interface index).
    pub router: Option<(Ipv4Addr, u8)>,
    /// Conntrack timeouts.
    pub timeouts: Timeouts,
}

impl Host {
    /// Builds the host view of `config`; `macs[p]` is the MAC address of port `p`
    /// ([`Config::ports`]).
    ///
    /// # Panics
    /// If `macs` is shorter than the configured ports (a driver bug).
    pub fn new(config: &Config, macs: &[MacAddr]) -> Self {
        assert_eq!(macs.len(), config.ports.len(), "one MAC per port");
        let interfaces = config
            .interfaces
            .iter()
            .map(|i| HostInterface {
                name: i.label(),
                mac: macs[i.port],
                addresses: i.addresses.clone(),
                port: i.port as u8,
                vlan: i.vlan,
            })
            .collect::<Vec<_>>();
        let mut ports: Vec<HostPort> = config
            .ports
            .iter()
            .zip(macs)
            .map(|(p, &mac)| HostPort { name: p.name.clone(), mac, untagged: None, vlans: Vec::new() })
            .collect();
        for (n, i) in interfaces.iter().enumerate() {
            let port = &mut ports[usize::from(i.port)];
            match i.vlan {
                Some(vid) => port.vlans.push((vid, n as u8)),
                None => port.untagged = Some(n as u8),
            }
        }
        for p in &mut ports {
            p.vlans.sort_unstable();
        }
        Self {
            interfaces,
            ports,
            snat_addresses: config.snat.addresses.clone(),
            snat_ports: (config.snat.port_min, config.snat.port_max),
            router: config.router.as_ref().map(|r| (r.address, r.interface as u8)),
            timeouts: config.conntrack.timeouts(),
        }
    }

    /// The interface of port `port` that frames with VLAN identifier `vid` belong to
    /// (`None` or 0: untagged or priority-tagged, IEEE 802.1Q § 6.9.1). `None` when the port
    /// does not exist or has no such interface.
    #[inline]
    pub fn interface_on(&self, port: u8, vid: Option<u16>) -> Option<u8> {
        let p = self.ports.get(usize::from(port))?;
        match vid {
            None | Some(0) => p.untagged,
            Some(v) => p.vlans.binary_search_by_key(&v, |&(id, _)| id).ok().map(|k| p.vlans[k].1),
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
