//! The gateway host as the pipeline sees it: its ports and the interfaces on them (untagged
//! or one 802.1Q VLAN each), own addresses, SNAT addresses, routes and timeouts, for IPv4
//! and IPv6. Built once from [`Config`] and the ports' MAC addresses; read-only afterwards
//! and shared by all workers.
//!
//! The lookups ([`Host::is_own`], [`Host::route`], [`Host::snat_address`],
//! [`Host::source_address_for`]) are written once, generic over the address family through
//! [`HostAddr`], which [`Ipv4Addr`] and [`Ipv6Addr`] implement by naming their part of the
//! host (the interface prefixes, the SNAT addresses and the router of that family).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::config::{Config, Ipv4Cidr, Ipv6Cidr};
use crate::wire::MacAddr;

/// An address with a prefix length: one of the gateway's own addresses and its connected
/// subnet.
pub trait Prefix<A> {
    /// The address.
    fn addr(&self) -> A;
    /// Whether `ip` is inside the prefix.
    fn contains(&self, ip: A) -> bool;
}

impl Prefix<Ipv4Addr> for Ipv4Cidr {
    #[inline]
    fn addr(&self) -> Ipv4Addr {
        self.addr
    }
    #[inline]
    fn contains(&self, ip: Ipv4Addr) -> bool {
        Ipv4Cidr::contains(self, ip)
    }
}

impl Prefix<Ipv6Addr> for Ipv6Cidr {
    #[inline]
    fn addr(&self) -> Ipv6Addr {
        self.addr
    }
    #[inline]
    fn contains(&self, ip: Ipv6Addr) -> bool {
        Ipv6Cidr::contains(self, ip)
    }
}

/// An address family's view of the [`Host`]: which prefixes, SNAT addresses and router are
/// its own. Implemented by [`Ipv4Addr`] and [`Ipv6Addr`].
pub trait HostAddr: Copy + Eq + Sized + 'static {
    /// The prefix type of this family.
    type Cidr: Prefix<Self>;
    /// The gateway's addresses of this family on `iface`.
    fn interface_addresses(iface: &HostInterface) -> &[Self::Cidr];
    /// The SNAT addresses of this family.
    fn snat_addresses(host: &Host) -> &[Self];
    /// Index of this family's first SNAT address among all SNAT addresses (IPv4 first, then
    /// IPv6): the address index of [`crate::snat::SnatPorts`].
    fn snat_index_base(host: &Host) -> usize;
    /// The default next hop of this family: (address, interface index).
    fn router(host: &Host) -> Option<(Self, u8)>;
}

impl HostAddr for Ipv4Addr {
    type Cidr = Ipv4Cidr;
    #[inline]
    fn interface_addresses(iface: &HostInterface) -> &[Ipv4Cidr] {
        &iface.addresses
    }
    #[inline]
    fn snat_addresses(host: &Host) -> &[Ipv4Addr] {
        &host.snat_addresses
    }
    #[inline]
    fn snat_index_base(_: &Host) -> usize {
        0
    }
    #[inline]
    fn router(host: &Host) -> Option<(Ipv4Addr, u8)> {
        host.router
    }
}

impl HostAddr for Ipv6Addr {
    type Cidr = Ipv6Cidr;
    #[inline]
    fn interface_addresses(iface: &HostInterface) -> &[Ipv6Cidr] {
        &iface.addresses6
    }
    #[inline]
    fn snat_addresses(host: &Host) -> &[Ipv6Addr] {
        &host.snat_addresses6
    }
    #[inline]
    fn snat_index_base(host: &Host) -> usize {
        host.snat_addresses.len()
    }
    #[inline]
    fn router(host: &Host) -> Option<(Ipv6Addr, u8)> {
        host.router6
    }
}

pub use crate::conntrack::Timeouts;

/// One interface (a link): its port, VLAN, link-layer address and the gateway's addresses
/// on it.
#[derive(Clone, Debug)]
pub struct HostInterface {
    /// Kernel name of the port, with `.VID` for a VLAN interface; for logs.
    pub name: String,
    /// The port's MAC address (source of every frame sent on it).
    pub mac: MacAddr,
    /// Own IPv4 addresses with their prefixes (connected subnets).
    pub addresses: Vec<Ipv4Cidr>,
    /// Own IPv6 addresses with their prefixes (connected subnets).
    pub addresses6: Vec<Ipv6Cidr>,
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
    /// IPv4 SNAT addresses.
    pub snat_addresses: Vec<Ipv4Addr>,
    /// IPv6 SNAT addresses.
    pub snat_addresses6: Vec<Ipv6Addr>,
    /// First and last SNAT port (inclusive).
    pub snat_ports: (u16, u16),
    /// Default next hop: (address, interface index).
    pub router: Option<(Ipv4Addr, u8)>,
    /// Default IPv6 next hop: (address, interface index).
    pub router6: Option<(Ipv6Addr, u8)>,
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
                addresses6: i.addresses6.clone(),
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
            snat_addresses6: config.snat.addresses6.clone(),
            snat_ports: (config.snat.port_min, config.snat.port_max),
            router: config.router.as_ref().map(|r| (r.address, r.interface as u8)),
            router6: config.router6.as_ref().map(|r| (r.address, r.interface as u8)),
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
    /// SNAT address) of its family.
    #[inline]
    pub fn is_own<A: HostAddr>(&self, ip: A) -> bool {
        A::snat_addresses(self).contains(&ip)
            || self.interfaces.iter().any(|i| A::interface_addresses(i).iter().any(|c| c.addr() == ip))
    }

    /// Egress interface and next hop for `dst`: a connected subnet sends directly, anything
    /// else goes to the router of its family. `None` when there is no route.
    #[inline]
    pub fn route<A: HostAddr>(&self, dst: A) -> Option<(u8, A)> {
        for (i, iface) in self.interfaces.iter().enumerate() {
            if A::interface_addresses(iface).iter().any(|c| c.contains(dst)) {
                return Some((i as u8, dst));
            }
        }
        A::router(self).map(|(addr, iface)| (iface, addr))
    }

    /// The SNAT address of `A`'s family for flows leaving through `iface`: the first one in
    /// one of that interface's subnets, else the first one. Returns its index among all SNAT
    /// addresses (see [`HostAddr::snat_index_base`]) and the address; `None` when the family
    /// has no SNAT address.
    #[inline]
    pub fn snat_address<A: HostAddr>(&self, iface: u8) -> Option<(usize, A)> {
        let i = self.interfaces.get(iface as usize);
        let addrs = A::snat_addresses(self);
        let (n, a) = addrs
            .iter()
            .enumerate()
            .find(|(_, a)| i.is_some_and(|i| A::interface_addresses(i).iter().any(|c| c.contains(**a))))
            .or_else(|| addrs.first().map(|a| (0, a)))?;
        Some((A::snat_index_base(self) + n, *a))
    }

    /// The index among all SNAT addresses of the SNAT address `addr` of `A`'s family.
    #[inline]
    pub fn snat_index<A: HostAddr>(&self, addr: A) -> Option<usize> {
        A::snat_addresses(self).iter().position(|a| *a == addr).map(|n| A::snat_index_base(self) + n)
    }

    /// The gateway's address of `A`'s family on `iface` to send from when talking to the
    /// neighbour `target` (the source of its ARP requests and Neighbor Solicitations): the
    /// first one whose prefix contains `target`, else the first one.
    pub fn source_address_for<A: HostAddr>(&self, iface: u8, target: A) -> Option<A> {
        let addrs = A::interface_addresses(self.interfaces.get(iface as usize)?);
        addrs.iter().find(|c| c.contains(target)).or_else(|| addrs.first()).map(Prefix::addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        let text = format!(
            "{}\n[router6]\naddress = \"fe80::1\"\ninterface = \"tg-front\"\n",
            crate::config::EMBEDDED_DEFAULT
        );
        let config = Config::from_toml(&text).unwrap();
        Host::new(&config, &[MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2])])
    }

    #[test]
    fn both_families() {
        let h = host();
        let (snat4, snat6) = (Ipv4Addr::new(10, 70, 0, 1), "fd00:70::1".parse::<Ipv6Addr>().unwrap());
        assert!(h.is_own(snat4) && h.is_own(snat6));
        assert!(h.is_own("2001:db8:100::1".parse::<Ipv6Addr>().unwrap()));
        assert!(!h.is_own("2001:db8:100::2".parse::<Ipv6Addr>().unwrap()));
        let endpoint: Ipv6Addr = "fd00:70::11".parse().unwrap();
        assert_eq!(h.route(endpoint), Some((1, endpoint)));
        assert_eq!(h.route(Ipv4Addr::new(10, 70, 0, 11)), Some((1, Ipv4Addr::new(10, 70, 0, 11))));
        assert_eq!(h.route("2001:db8:999::1".parse::<Ipv6Addr>().unwrap()), Some((0, "fe80::1".parse().unwrap())));
        assert_eq!(h.route(Ipv4Addr::new(192, 0, 2, 1)), None, "no IPv4 router configured");
        assert_eq!(h.snat_address::<Ipv4Addr>(1), Some((0, snat4)));
        assert_eq!(h.snat_address::<Ipv6Addr>(1), Some((1, snat6)));
        assert_eq!(h.snat_address::<Ipv6Addr>(0), Some((1, snat6)), "the first one when none is on the link");
        assert_eq!(h.snat_index(snat6), Some(1));
        assert_eq!(h.snat_index(snat4), Some(0));
        assert_eq!(h.source_address_for(1, endpoint), Some(snat6));
        assert_eq!(h.source_address_for(0, endpoint), Some("2001:db8:100::1".parse().unwrap()));
        assert_eq!(h.source_address_for(1, Ipv4Addr::new(10, 70, 0, 11)), Some(snat4));
    }
}
