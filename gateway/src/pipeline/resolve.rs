//! Next-hop resolution, one queue for both families: the MAC of an endpoint's next hop
//! comes from the shared neighbour table; a missing or old entry queues a resolution in the
//! worker's pending slots, which [`poll_transmit`] emits — an ARP request (RFC 826) for an
//! IPv4 next hop, a Neighbor Solicitation to the target's solicited-node multicast address
//! (RFC 4861 § 7.2.2) for an IPv6 one — repeats after [`ARP_RETRY_NS`] and gives up after
//! [`ARP_TRIES`] attempts (a later packet queues it again; RFC 4861 § 10's
//! `MAX_MULTICAST_SOLICIT` is 3 at `RETRANS_TIMER` 1 s too).

use std::net::{IpAddr, Ipv6Addr};

use super::state::Pending;
use super::{link, WorkerState};
use crate::host::HostInterface;
use crate::neighbour::NeighbourAddr;
use crate::table::layout;
use crate::table::Table;
use crate::wire::icmpv6::NEXT_HEADER_ICMPV6;
use crate::wire::ipv6::{multicast_mac, solicited_node};
use crate::wire::ndp::{self, NdpPacket};
use crate::wire::{EtherType, Icmpv6Packet, Icmpv6Type, Ipv6Packet, MacAddr};

/// How long an unanswered ARP request waits before it is repeated, ns.
const ARP_RETRY_NS: u64 = 1_000_000_000;
/// Attempts before a pending resolution is given up (a new packet queues it again).
const ARP_TRIES: u8 = 3;
/// Age after which a resolved neighbour is re-confirmed by a new request, ns.
pub(super) const NEIGHBOUR_REFRESH_NS: u64 = 60_000_000_000;

impl WorkerState {
    /// Queues a resolution of `ip` (IPv4: ARP; IPv6: Neighbor Discovery) on `iface`
    /// (deduplicated; a full queue drops the request, a later packet queues it again).
    pub fn request_resolution(&mut self, ip: impl Into<IpAddr>, iface: u8, now: u64) {
        let ip = ip.into();
        for i in self.pending.occupied() {
            let p = self.pending.slot(i);
            if p.ip == ip {
                if p.tries >= ARP_TRIES && now >= p.next_ns {
                    p.tries = 0;
                }
                return;
            }
        }
        self.pending.insert(Pending { ip, iface, next_ns: now, tries: 0 });
    }

    /// Queues resolution of the next hop of every endpoint in `table` not yet resolved.
    /// Called when a worker adopts a table, so the first packets find their neighbours.
    pub fn resolve_table(&mut self, table: &Table, now: u64) {
        for id in 0..table.service_count() as u32 {
            let Some(s) = table.service(id) else { continue };
            for b in s.backends {
                let hop = match layout::addr_from16(b.addr) {
                    IpAddr::V4(ip) => self.host.route(ip).map(|(iface, hop)| (iface, IpAddr::V4(hop))),
                    IpAddr::V6(ip) => self.host.route(ip).map(|(iface, hop)| (iface, IpAddr::V6(hop))),
                };
                if let Some((iface, hop)) = hop {
                    if self.neighbours.lookup(hop).is_none() {
                        self.request_resolution(hop, iface, now);
                    }
                }
            }
        }
    }
}

/// The resolved MAC of `hop`, queueing a (re)resolution when missing or old. Always
/// inlined into its one caller (`flow::egress_via`, every packet the general path
/// forwards): the call cost a new flow's SYN 23 instructions (docs/optimisation-log.md,
/// "New flow, fifth round").
#[inline(always)]
pub(super) fn neighbour<H: NeighbourAddr + Into<IpAddr>>(
    st: &mut WorkerState,
    hop: H,
    iface: u8,
    now: u64,
) -> Option<MacAddr> {
    // The first slot of the probe run read inline ([`crate::neighbour::Neighbours::lookup_first`],
    // the same result as `lookup`): a next hop's entry is nearly always there.
    match st.neighbours.lookup_first(hop) {
        Some(n) => {
            if n.updated_ns != u64::MAX && now.saturating_sub(n.updated_ns) > NEIGHBOUR_REFRESH_NS {
                st.request_resolution(hop, iface, now);
            }
            Some(n.mac)
        }
        None => {
            st.request_resolution(hop, iface, now);
            None
        }
    }
}

/// Bytes of the largest frame [`poll_transmit`] emits: Ethernet, an 802.1Q tag, IPv6 and a
/// Neighbor Solicitation with a source link-layer address option.
pub const POLL_TRANSMIT_LEN: usize = 14 + 4 + 40 + 24 + ndp::LL_OPTION_LEN;

/// Emits the next due L2-mode announcement (`gratuitous`), else the next due ARP request
/// or Neighbor Solicitation, into `buf` (at least
/// [`POLL_TRANSMIT_LEN`] bytes), returning the port and frame length; `None` when nothing is
/// due. The worker calls it after each burst until it returns `None`.
pub fn poll_transmit(now: u64, buf: &mut [u8], st: &mut WorkerState) -> Option<(u8, usize)> {
    if buf.len() < POLL_TRANSMIT_LEN {
        return None;
    }
    if let Some(announcement) = super::gratuitous::poll(now, buf, st) {
        return Some(announcement);
    }
    let pending = &mut st.pending;
    for i in pending.occupied() {
        let p = *pending.slot(i);
        let ip = p.ip;
        if let Some(n) = st.neighbours.lookup(ip) {
            if now.saturating_sub(n.updated_ns) <= NEIGHBOUR_REFRESH_NS || n.updated_ns == u64::MAX {
                pending.remove(i);
                continue;
            }
        }
        if p.tries >= ARP_TRIES {
            if now >= p.next_ns + 10 * ARP_RETRY_NS {
                pending.remove(i);
            }
            continue;
        }
        if now < p.next_ns {
            continue;
        }
        let Some(iface) = st.host.interfaces.get(usize::from(p.iface)) else {
            pending.remove(i);
            continue;
        };
        let len = match ip {
            IpAddr::V4(ip) => {
                st.host.source_address_for(p.iface, ip).map(|spa| super::arp::write_request(buf, iface, spa, ip))
            }
            IpAddr::V6(ip) => {
                st.host.source_address_for(p.iface, ip).map(|src| write_solicitation(buf, iface, src, ip))
            }
        };
        let Some(len) = len else {
            pending.remove(i);
            continue;
        };
        match ip {
            IpAddr::V4(_) => st.counters.arp_requests += 1,
            IpAddr::V6(_) => st.counters.nd_solicitations += 1,
        }
        let slot = pending.slot(i);
        slot.tries += 1;
        slot.next_ns = now + ARP_RETRY_NS;
        return Some((iface.port, len));
    }
    None
}

/// Writes a Neighbor Solicitation for `target` from `src` on `iface` into `buf` (RFC 4861
/// § 7.2.2): to the target's solicited-node multicast address and its Ethernet mapping,
/// Hop Limit 255, with the interface's MAC in a source link-layer address option. Returns
/// the frame length.
fn write_solicitation(buf: &mut [u8], iface: &HostInterface, src: Ipv6Addr, target: Ipv6Addr) -> usize {
    const NS_LEN: usize = 24 + ndp::LL_OPTION_LEN;
    let dst = solicited_node(target);
    let l2 = link::write_header(buf, multicast_mac(dst), iface.mac, iface.vlan, EtherType::Ipv6);
    let len = l2 + 40 + NS_LEN;
    Ipv6Packet::new_unchecked(&mut buf[l2..len]).fill_header(
        src,
        dst,
        NEXT_HEADER_ICMPV6,
        NS_LEN as u16,
        ndp::HOP_LIMIT,
    );
    let icmp = &mut buf[l2 + 40..len];
    let mut ns = NdpPacket::new_unchecked(&mut *icmp);
    ns.fill_header(Icmpv6Type::NeighborSolicit, 0, target);
    ns.set_link_layer_option(ndp::OPTION_SOURCE_LL_ADDR, iface.mac);
    Icmpv6Packet::new_unchecked(icmp).fill_checksum(src, dst);
    len
}
