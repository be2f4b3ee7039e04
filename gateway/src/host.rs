//! The gateway host as the pipeline sees it: its ports and the interfaces on them (untagged
//! or one 802.1Q VLAN each), own addresses, SNAT addresses, routes and timeouts, for IPv4
//! and IPv6. Built once from [`Config`] and the ports' MAC addresses; read-only afterwards
//! and shared by all workers.
//!
//! The lookups ([`Host::is_own`], [`Host::route`], [`Host::snat_addresses_on`],
//! [`Host::source_address_for`]) are written once, generic over the address family through
//! [`HostAddr`], which [`Ipv4Addr`] and [`Ipv6Addr`] implement by naming their part of the
//! host (the interface prefixes, the SNAT addresses and the router of that family).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::BitAnd;

use crate::config::{Config, Ipv4Cidr, Ipv6Cidr};
use crate::scheduler::Scheduler;
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
pub trait HostAddr: Copy + Ord + Sized + 'static {
    /// The prefix type of this family.
    type Cidr: Prefix<Self>;
    /// The address as an integer, host order (`u32`, `u128`): what [`Connected`] compares.
    type Bits: Copy + Ord + BitAnd<Output = Self::Bits> + Into<u128> + std::fmt::Debug;
    /// `self` as [`HostAddr::Bits`].
    fn to_bits(self) -> Self::Bits;
    /// The network mask of `cidr` as [`HostAddr::Bits`]: `prefix_len` leading ones.
    fn mask_bits(cidr: &Self::Cidr) -> Self::Bits;
    /// The connected subnets of this family, in interface order, indexed for
    /// [`Host::route`].
    fn connected(host: &Host) -> &ConnectedIndex<Self::Bits>;
    /// Per interface, the SNAT addresses of this family for flows leaving through it
    /// ([`Host::snat_addresses_on`]), precomputed by [`Host::new`].
    fn snat_by_interface(host: &Host) -> &[Vec<Self>];
    /// Per interface, the positions of those addresses among [`HostAddr::snat_addresses`]
    /// ([`Host::snat_positions_on`]).
    fn snat_positions_by_interface(host: &Host) -> &[Vec<u8>];
    /// The gateway's addresses of this family on `iface`.
    fn interface_addresses(iface: &HostInterface) -> &[Self::Cidr];
    /// The SNAT addresses of this family.
    fn snat_addresses(host: &Host) -> &[Self];
    /// Every own address of this family (interface and SNAT addresses), sorted, without
    /// duplicates ([`Host::is_own`]).
    fn own_sorted(host: &Host) -> &[Self];
    /// The default next hop of this family: (address, interface index).
    fn router(host: &Host) -> Option<(Self, u8)>;
}

impl HostAddr for Ipv4Addr {
    type Cidr = Ipv4Cidr;
    type Bits = u32;
    #[inline]
    fn to_bits(self) -> u32 {
        Ipv4Addr::to_bits(self)
    }
    #[inline]
    fn mask_bits(cidr: &Ipv4Cidr) -> u32 {
        cidr.mask()
    }
    #[inline]
    fn connected(host: &Host) -> &ConnectedIndex<u32> {
        &host.connected
    }
    #[inline]
    fn snat_by_interface(host: &Host) -> &[Vec<Ipv4Addr>] {
        &host.snat_by_interface
    }
    #[inline]
    fn snat_positions_by_interface(host: &Host) -> &[Vec<u8>] {
        &host.snat_positions_by_interface
    }
    #[inline]
    fn interface_addresses(iface: &HostInterface) -> &[Ipv4Cidr] {
        &iface.addresses
    }
    #[inline]
    fn snat_addresses(host: &Host) -> &[Ipv4Addr] {
        &host.snat_addresses
    }
    #[inline]
    fn own_sorted(host: &Host) -> &[Ipv4Addr] {
        &host.own
    }
    #[inline]
    fn router(host: &Host) -> Option<(Ipv4Addr, u8)> {
        host.router
    }
}

impl HostAddr for Ipv6Addr {
    type Cidr = Ipv6Cidr;
    type Bits = u128;
    #[inline]
    fn to_bits(self) -> u128 {
        Ipv6Addr::to_bits(self)
    }
    #[inline]
    fn mask_bits(cidr: &Ipv6Cidr) -> u128 {
        cidr.mask()
    }
    #[inline]
    fn connected(host: &Host) -> &ConnectedIndex<u128> {
        &host.connected6
    }
    #[inline]
    fn snat_by_interface(host: &Host) -> &[Vec<Ipv6Addr>] {
        &host.snat_by_interface6
    }
    #[inline]
    fn snat_positions_by_interface(host: &Host) -> &[Vec<u8>] {
        &host.snat_positions_by_interface6
    }
    #[inline]
    fn interface_addresses(iface: &HostInterface) -> &[Ipv6Cidr] {
        &iface.addresses6
    }
    #[inline]
    fn snat_addresses(host: &Host) -> &[Ipv6Addr] {
        &host.snat_addresses6
    }
    #[inline]
    fn own_sorted(host: &Host) -> &[Ipv6Addr] {
        &host.own6
    }
    #[inline]
    fn router(host: &Host) -> Option<(Ipv6Addr, u8)> {
        host.router6
    }
}

pub use crate::conntrack::Timeouts;

/// One connected subnet as [`Host::route`] scans it: the prefix's network and mask as the
/// family's integer (host order, [`HostAddr::Bits`]) and the interface it is on. A flat
/// array of these, in interface order, replaces a walk over every interface's address list
/// on every forwarded packet: for IPv4, 12 bytes per subnet, a handful per cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connected<B> {
    /// The subnet's network address (host bits cleared).
    pub network: B,
    /// Its network mask.
    pub mask: B,
    /// Index of the interface in [`Host::interfaces`].
    pub iface: u8,
}

/// The connected subnets of one family, in interface order then address order (the order
/// [`Host::route`] matches in), indexed so that a lookup does not scan them all: one small
/// table per distinct mask, from network to the earliest subnet with that network and mask.
/// A lookup probes each table (most hosts use one or two prefix lengths) and takes the
/// earliest subnet found. A scan of the 21 subnets of the benchmark's gateway cost about 90
/// instructions per forwarded packet (callgrind), and a branch whose outcome depends on the
/// destination's link.
///
/// Each table is built collision-free where a multiplier can be found for it (multiplicative
/// hashing, tried at growing sizes up to 4096 slots): then a lookup reads one
/// slot per mask, with no probe loop whose length varies from packet to packet. Otherwise
/// (networks whose folded words collide, which no multiplier separates) the table falls back
/// to linear probing.
#[derive(Clone, Debug)]
pub struct ConnectedIndex<B> {
    /// The subnets, in matching order.
    subnets: Vec<Connected<B>>,
    /// One table per distinct mask.
    groups: Vec<MaskGroup<B>>,
}

/// The subnets of one mask: `slots.len()` is `1 << (64 - shift)`, at least twice their
/// number, so every probe run ends at a vacant slot.
#[derive(Clone, Debug)]
struct MaskGroup<B> {
    mask: B,
    /// Odd multiplier of the slot hash.
    multiplier: u64,
    /// `64 - log2(slots.len())`.
    shift: u32,
    /// No two networks share a home slot: a lookup reads one slot.
    perfect: bool,
    /// (network, position in [`ConnectedIndex::subnets`]); position [`VACANT_SUBNET`]: empty.
    slots: Box<[(B, u32)]>,
}

const VACANT_SUBNET: u32 = u32::MAX;

/// Largest collision-free table [`ConnectedIndex::new`] tries before it falls back to linear
/// probing.
const MAX_PERFECT_SLOTS: usize = 1 << 12;

/// Multipliers tried per table size.
const MULTIPLIERS_TRIED: u64 = 64;

/// Home slot of `network`: the top `64 - shift` bits of its folded words times `multiplier`.
#[inline]
fn subnet_slot(network: u128, multiplier: u64, shift: u32) -> usize {
    let folded = (network >> 64) as u64 ^ network as u64;
    (folded.wrapping_mul(multiplier) >> shift) as usize
}

/// The [`subnet_slot`] shift for a table of `len` (a power of two) slots.
fn slot_shift(len: usize) -> u32 {
    64 - len.trailing_zeros()
}

/// The `k`-th candidate multiplier (odd): SplitMix64's output function.
fn multiplier(k: u64) -> u64 {
    let mut z = k.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

impl<B: Copy + Eq + BitAnd<Output = B> + Into<u128>> MaskGroup<B> {
    /// The table of `members` (position, network; in matching order, networks repeated where
    /// several subnets have them).
    fn new(mask: B, members: &[(usize, B)]) -> Self {
        // The earliest subnet of each network.
        let mut unique: Vec<(usize, B)> = Vec::with_capacity(members.len());
        for &(position, network) in members {
            if !unique.iter().any(|&(_, n)| n == network) {
                unique.push((position, network));
            }
        }
        let min_len = (2 * unique.len()).next_power_of_two().max(2);
        let mut len = min_len;
        while len <= MAX_PERFECT_SLOTS {
            for k in 0..MULTIPLIERS_TRIED {
                let (m, shift) = (multiplier(k), slot_shift(len));
                let mut taken = vec![false; len];
                let distinct = unique.iter().all(|&(_, n)| {
                    let i = subnet_slot(n.into(), m, shift);
                    !std::mem::replace(&mut taken[i], true)
                });
                if distinct {
                    return Self::place(mask, &unique, len, m, true);
                }
            }
            len *= 2;
        }
        Self::place(mask, &unique, min_len, multiplier(0), false)
    }

    /// Places `unique` networks by linear probing in `len` slots.
    fn place(mask: B, unique: &[(usize, B)], len: usize, multiplier: u64, perfect: bool) -> Self {
        let shift = slot_shift(len);
        let mut slots = vec![(mask, VACANT_SUBNET); len];
        for &(position, network) in unique {
            let mut i = subnet_slot(network.into(), multiplier, shift);
            while slots[i].1 != VACANT_SUBNET {
                i = (i + 1) & (len - 1);
            }
            slots[i] = (network, position as u32);
        }
        Self { mask, multiplier, shift, perfect, slots: slots.into_boxed_slice() }
    }
}

impl<B: Copy + Eq + BitAnd<Output = B> + Into<u128>> ConnectedIndex<B> {
    /// Indexes `subnets` (in matching order). O(subnets × distinct masks), plus the search
    /// for collision-free multipliers (a few thousand hashes).
    fn new(subnets: Vec<Connected<B>>) -> Self {
        let mut masks: Vec<B> = Vec::new();
        for c in &subnets {
            if !masks.contains(&c.mask) {
                masks.push(c.mask);
            }
        }
        let groups = masks
            .into_iter()
            .map(|mask| {
                let members: Vec<(usize, B)> =
                    subnets.iter().enumerate().filter(|(_, c)| c.mask == mask).map(|(i, c)| (i, c.network)).collect();
                MaskGroup::new(mask, &members)
            })
            .collect();
        Self { subnets, groups }
    }

    /// The first subnet (in matching order) containing `bits`. O(distinct masks), expected.
    #[inline]
    pub fn first_containing(&self, bits: B) -> Option<&Connected<B>> {
        let mut first = VACANT_SUBNET;
        for g in &self.groups {
            let network = bits & g.mask;
            let mut i = subnet_slot(network.into(), g.multiplier, g.shift);
            loop {
                let (n, position) = g.slots[i];
                if n == network && position != VACANT_SUBNET {
                    first = first.min(position);
                    break;
                }
                if g.perfect || position == VACANT_SUBNET {
                    break;
                }
                i = (i + 1) & (g.slots.len() - 1);
            }
        }
        self.subnets.get(first as usize)
    }

    /// The subnets, in matching order.
    pub fn subnets(&self) -> &[Connected<B>] {
        &self.subnets
    }
}

/// The connected subnets of `A`'s family on `interfaces`, in interface order then address
/// order: the order [`Host::route`] has always matched in.
fn connected<A: HostAddr>(interfaces: &[HostInterface]) -> Vec<Connected<A::Bits>> {
    let mut out = Vec::new();
    for (i, iface) in interfaces.iter().enumerate() {
        for c in A::interface_addresses(iface) {
            let mask = A::mask_bits(c);
            out.push(Connected { network: c.addr().to_bits() & mask, mask, iface: i as u8 });
        }
    }
    out
}

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

impl HostPort {
    /// The interface of this port receiving frames of VLAN `vid` (`None` or 0: untagged or
    /// priority-tagged), if any.
    #[inline]
    #[must_use]
    pub fn interface(&self, vid: Option<u16>) -> Option<u8> {
        match vid {
            None | Some(0) => self.untagged,
            Some(v) => self.vlans.binary_search_by_key(&v, |&(id, _)| id).ok().map(|k| self.vlans[k].1),
        }
    }
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
    /// New flows a second per source and burst (`[conntrack] new_flows_per_source_*`; a
    /// rate of 0: no limit), for each worker's [`crate::limiter::SourceLimiter`].
    pub new_flows_per_source: (u32, u32),
    /// Whether TCP windows are checked liberally (`[conntrack] tcp_be_liberal`).
    pub tcp_be_liberal: bool,
    /// Whether SYN cookies are used, and the SYNs a second per worker above which they are
    /// (`[conntrack] syn_cookies`, `syn_cookies_above_per_s`).
    pub syn_cookies: (bool, u32),
    /// Whether TCP and UDP segments with a wrong checksum are dropped (else counted and
    /// forwarded; `[conntrack] drop_bad_l4_checksums`).
    pub drop_bad_l4_checksums: bool,
    /// How new flows' endpoints are chosen (`scheduler`).
    pub scheduler: Scheduler,
    /// The IPv4 connected subnets of `interfaces`, indexed ([`ConnectedIndex`]); built by
    /// [`Host::new`], which is why the fields above are not meant to change afterwards.
    connected: ConnectedIndex<u32>,
    /// The same for IPv6.
    connected6: ConnectedIndex<u128>,
    /// Per interface, its IPv4 SNAT addresses ([`Host::snat_addresses_on`]).
    snat_by_interface: Vec<Vec<Ipv4Addr>>,
    /// Per interface, its IPv6 SNAT addresses.
    snat_by_interface6: Vec<Vec<Ipv6Addr>>,
    /// Per interface, the positions of its IPv4 SNAT addresses in `snat_addresses`.
    snat_positions_by_interface: Vec<Vec<u8>>,
    /// The same for IPv6.
    snat_positions_by_interface6: Vec<Vec<u8>>,
    /// Own IPv4 addresses (interfaces' and SNAT), sorted ([`Host::is_own`]).
    own: Vec<Ipv4Addr>,
    /// Own IPv6 addresses, sorted.
    own6: Vec<Ipv6Addr>,
}

/// Per interface of `host`, the positions of its SNAT addresses of family `A`
/// ([`Host::snat_addresses_on`]) among the family's SNAT addresses, for
/// [`Host::snat_positions_on`]. A worker's conntrack holds at most 256 SNAT addresses
/// (`conntrack::MAX_SNAT_ADDRESSES`, checked when it is made), so a position fits a byte; the
/// conntrack checks a position against its own list before it trusts it.
fn snat_positions<A: HostAddr>(host: &Host) -> Vec<Vec<u8>> {
    let all = A::snat_addresses(host);
    A::snat_by_interface(host)
        .iter()
        .map(|on| on.iter().map(|a| all.iter().position(|b| b == a).map_or(0, |i| i as u8)).collect())
        .collect()
}

/// Every own address of family `A` on `host` (interface and SNAT addresses), sorted and
/// deduplicated, for [`Host::is_own`]'s binary search.
fn own_addresses<A: HostAddr>(host: &Host) -> Vec<A> {
    let mut own: Vec<A> = A::snat_addresses(host).to_vec();
    own.extend(host.interfaces.iter().flat_map(|i| A::interface_addresses(i).iter().map(|c| c.addr())));
    own.sort_unstable();
    own.dedup();
    own
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
        let mut host = Self {
            connected: ConnectedIndex::new(connected::<Ipv4Addr>(&interfaces)),
            connected6: ConnectedIndex::new(connected::<Ipv6Addr>(&interfaces)),
            interfaces,
            ports,
            snat_addresses: config.snat.addresses.clone(),
            snat_addresses6: config.snat.addresses6.clone(),
            snat_ports: (config.snat.port_min, config.snat.port_max),
            router: config.router.as_ref().map(|r| (r.address, r.interface as u8)),
            router6: config.router6.as_ref().map(|r| (r.address, r.interface as u8)),
            timeouts: config.conntrack.timeouts(),
            new_flows_per_source: (
                config.conntrack.new_flows_per_source_per_s,
                config.conntrack.new_flows_per_source_burst,
            ),
            tcp_be_liberal: config.conntrack.tcp_be_liberal,
            syn_cookies: (config.conntrack.syn_cookies, config.conntrack.syn_cookies_above_per_s),
            drop_bad_l4_checksums: config.conntrack.drop_bad_l4_checksums,
            scheduler: config.scheduler,
            snat_by_interface: Vec::new(),
            snat_by_interface6: Vec::new(),
            snat_positions_by_interface: Vec::new(),
            snat_positions_by_interface6: Vec::new(),
            own: Vec::new(),
            own6: Vec::new(),
        };
        host.own = own_addresses::<Ipv4Addr>(&host);
        host.own6 = own_addresses::<Ipv6Addr>(&host);
        let n = host.interfaces.len();
        host.snat_by_interface = (0..n).map(|i| host.choose_snat_addresses(i)).collect();
        host.snat_by_interface6 = (0..n).map(|i| host.choose_snat_addresses(i)).collect();
        host.snat_positions_by_interface = snat_positions::<Ipv4Addr>(&host);
        host.snat_positions_by_interface6 = snat_positions::<Ipv6Addr>(&host);
        host
    }

    /// The rule of [`Host::snat_addresses_on`], evaluated once per interface by [`Host::new`].
    fn choose_snat_addresses<A: HostAddr>(&self, iface: usize) -> Vec<A> {
        let addrs = A::snat_addresses(self);
        let on_link: Vec<A> = match self.interfaces.get(iface) {
            Some(i) => {
                addrs.iter().copied().filter(|a| A::interface_addresses(i).iter().any(|c| c.contains(*a))).collect()
            }
            None => Vec::new(),
        };
        if on_link.is_empty() {
            addrs.first().copied().into_iter().collect()
        } else {
            on_link
        }
    }

    /// The interface of port `port` that frames with VLAN identifier `vid` belong to
    /// (`None` or 0: untagged or priority-tagged, IEEE 802.1Q § 6.9.1). `None` when the port
    /// does not exist or has no such interface.
    #[inline]
    pub fn interface_on(&self, port: u8, vid: Option<u16>) -> Option<u8> {
        self.ports.get(usize::from(port))?.interface(vid)
    }

    /// Whether `ip` is one of the gateway's own addresses (an interface address or a
    /// SNAT address) of its family.
    #[inline]
    pub fn is_own<A: HostAddr>(&self, ip: A) -> bool {
        // By the addresses' bits (their order, compared as one integer, not byte by byte).
        let bits = ip.to_bits();
        A::own_sorted(self).binary_search_by(|a| a.to_bits().cmp(&bits)).is_ok()
    }

    /// Egress interface and next hop for `dst`: a connected subnet sends directly (the first
    /// interface, in configuration order, with a subnet containing `dst`), anything else goes
    /// to the router of its family. `None` when there is no route. O(prefix lengths in use):
    /// one hash probe per distinct mask ([`ConnectedIndex`]).
    #[inline]
    pub fn route<A: HostAddr>(&self, dst: A) -> Option<(u8, A)> {
        match A::connected(self).first_containing(dst.to_bits()) {
            Some(c) => Some((c.iface, dst)),
            None => A::router(self).map(|(addr, iface)| (iface, addr)),
        }
    }

    /// The SNAT addresses of `A`'s family for flows leaving through `iface`: those in one
    /// of that interface's subnets, in configuration order, else the family's first one;
    /// empty when the family has none. A new flow takes one of them at random
    /// ([`crate::snat::SnatPorts::alloc`]). O(1): precomputed per interface.
    #[inline]
    pub fn snat_addresses_on<A: HostAddr>(&self, iface: u8) -> &[A] {
        match A::snat_by_interface(self).get(usize::from(iface)) {
            Some(chosen) => chosen,
            None => A::snat_addresses(self).get(..1).unwrap_or_default(),
        }
    }

    /// The positions among `A`'s SNAT addresses (the list each worker's conntrack numbers
    /// them by) of [`Host::snat_addresses_on`]`(iface)`, in the same order; empty when the
    /// family has no SNAT address. O(1).
    #[inline]
    pub fn snat_positions_on<A: HostAddr>(&self, iface: u8) -> &[u8] {
        match A::snat_positions_by_interface(self).get(usize::from(iface)) {
            Some(chosen) => chosen,
            None if A::snat_addresses(self).is_empty() => &[],
            None => &[0],
        }
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

    proptest::proptest! {
        /// The index finds what a scan of the subnets in matching order finds: overlapping
        /// subnets, repeated networks, several prefix lengths, addresses in and out.
        #[test]
        fn connected_index_finds_the_first_subnet_a_scan_finds(
            subnets in proptest::collection::vec((0u32..64, 20u32..=32, 0u8..4), 0..24),
            probes in proptest::collection::vec(0u32..64, 1..32),
        ) {
            // Addresses from a small space (10.0.0.0/26 and its neighbours) so that subnets
            // overlap and probes hit them.
            let addr = |x: u32| 0x0a00_0000 | (x << 3) | (x & 7);
            let subnets: Vec<Connected<u32>> = subnets
                .iter()
                .map(|&(a, len, iface)| {
                    let mask = u32::MAX << (32 - len);
                    Connected { network: addr(a) & mask, mask, iface }
                })
                .collect();
            let index = ConnectedIndex::new(subnets.clone());
            proptest::prop_assert_eq!(index.subnets(), &subnets[..]);
            for p in probes {
                let bits = addr(p);
                let scanned = subnets.iter().find(|c| bits & c.mask == c.network);
                proptest::prop_assert_eq!(index.first_containing(bits), scanned);
            }
        }
    }

    /// Two IPv6 networks whose folded words are equal collide under every multiplier: the
    /// table falls back to probing and still finds both, and the benchmark-like host's
    /// table is collision-free.
    #[test]
    fn connected_index_without_a_perfect_table_still_finds_every_subnet() {
        let mask = u128::MAX << 64;
        let (a, b) = (1u128 << 64, 2u128 << 64);
        // Folded: a's 1 and b's 2 differ; c's halves are equal (3 and 3) and fold to 0, as 0 does.
        let c = (3u128 << 64) | 3;
        let mask_c = u128::MAX;
        let subnets = vec![
            Connected { network: a, mask, iface: 0 },
            Connected { network: b, mask, iface: 1 },
            Connected { network: 0, mask: mask_c, iface: 2 },
            Connected { network: c, mask: mask_c, iface: 3 },
        ];
        let index = ConnectedIndex::new(subnets.clone());
        assert!(index.groups[0].perfect, "distinct folded words: a multiplier separates them");
        assert!(!index.groups[1].perfect, "equal folded words: no multiplier separates them");
        for (bits, want) in [(a | 5, Some(0)), (b, Some(1)), (0, Some(2)), (c, Some(3)), (3, None)] {
            assert_eq!(index.first_containing(bits).map(|s| usize::from(s.iface)), want, "{bits:#x}");
        }
        let many: Vec<Connected<u32>> =
            (0..21).map(|k| Connected { network: 0x0a00_0000 | (k << 8), mask: 0xffff_ff00, iface: k as u8 }).collect();
        assert!(ConnectedIndex::new(many).groups.iter().all(|g| g.perfect));
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
        assert_eq!(h.snat_addresses_on::<Ipv4Addr>(1), [snat4]);
        assert_eq!(h.snat_addresses_on::<Ipv6Addr>(1), [snat6]);
        assert_eq!(h.snat_addresses_on::<Ipv6Addr>(0), [snat6], "the first one when none is on the link");
        assert_eq!(h.source_address_for(1, endpoint), Some(snat6));
        assert_eq!(h.source_address_for(0, endpoint), Some("2001:db8:100::1".parse().unwrap()));
        assert_eq!(h.source_address_for(1, Ipv4Addr::new(10, 70, 0, 11)), Some(snat4));
    }

    /// Several SNAT addresses on one link: flows leaving by it use all of them; a link
    /// without one uses the family's first.
    #[test]
    fn every_snat_address_on_a_link_serves_it() {
        let text = crate::config::EMBEDDED_DEFAULT
            .replacen(
                "addresses = [\"10.70.0.1/24\", \"fd00:70::1/64\"]",
                "addresses = [\"10.70.0.1/24\", \"10.70.0.2/24\", \"fd00:70::1/64\", \"10.70.0.3/24\"]",
                1,
            )
            .replacen(
                "addresses = [\"10.70.0.1\", \"fd00:70::1\"]",
                "addresses = [\"10.70.0.3\", \"fd00:70::1\", \"10.70.0.1\", \"198.51.100.1\", \"10.70.0.2\"]",
                1,
            );
        let config = Config::from_toml(&text).unwrap();
        let h = Host::new(&config, &[MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2])]);
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(h.snat_addresses_on::<Ipv4Addr>(1), [ip("10.70.0.3"), ip("10.70.0.1"), ip("10.70.0.2")]);
        assert_eq!(h.snat_addresses_on::<Ipv4Addr>(0), [ip("198.51.100.1")]);
        assert_eq!(h.snat_addresses_on::<Ipv4Addr>(9), [ip("10.70.0.3")], "no such interface: the first");
        assert_eq!(h.snat_addresses_on::<Ipv6Addr>(0), ["fd00:70::1".parse::<Ipv6Addr>().unwrap()]);
        // Their positions in the family's list (the conntrack's numbering), in the same order.
        assert_eq!(h.snat_addresses, [ip("10.70.0.3"), ip("10.70.0.1"), ip("198.51.100.1"), ip("10.70.0.2")]);
        assert_eq!(h.snat_positions_on::<Ipv4Addr>(1), [0, 1, 3]);
        assert_eq!(h.snat_positions_on::<Ipv4Addr>(0), [2]);
        assert_eq!(h.snat_positions_on::<Ipv4Addr>(9), [0], "no such interface: the first");
        assert_eq!(h.snat_positions_on::<Ipv6Addr>(0), [0]);
    }
}
