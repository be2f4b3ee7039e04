//! L2 mode's announcements: when VIPs join the set this gateway answers for
//! ([`crate::l2::Owners`]), worker 0 tells the segment, so that hosts holding a neighbour
//! entry for a VIP move it to this gateway's MAC without asking:
//!
//! - IPv4: a gratuitous ARP, RFC 5227 § 3's ARP announcement — a broadcast ARP request
//!   whose sender and target protocol addresses are both the VIP (Linux updates an
//!   existing entry from it whatever its `locktime`, `arp_process`'s `is_garp`);
//! - IPv6: an unsolicited Neighbor Advertisement, RFC 4861 § 7.2.6 — to all-nodes, Override
//!   set, Solicited clear, with the target link-layer address option.
//!
//! Each is sent [`ANNOUNCE_NUM`] times, [`ANNOUNCE_INTERVAL_NS`] apart (RFC 5227 § 1.1's
//! `ANNOUNCE_NUM` and `ANNOUNCE_INTERVAL`; RFC 4861 § 7.2.6 allows up to
//! `MAX_NEIGHBOR_ADVERTISEMENT` = 3), on every interface with an address of the VIP's
//! family. Only what changed is announced: the set's `announce` list, the VIPs that joined
//! within the last rounds' time (a VIP held all along is not announced again); a newer
//! list starts the rounds over (a VIP that joined a moment before gets at most one extra
//! round, none is left with fewer), and a VIP given up meanwhile is skipped. One frame
//! per call, through [`super::poll_transmit`].

use std::net::{IpAddr, Ipv6Addr};

use super::state::Gratuitous;
use super::{link, WorkerState};
use crate::host::HostInterface;
use crate::l2::{ANNOUNCE_INTERVAL_NS, ANNOUNCE_NUM};
use crate::wire::icmpv6::NEXT_HEADER_ICMPV6;
use crate::wire::ipv6::{multicast_mac, ALL_NODES};
use crate::wire::ndp::{self, NdpPacket};
use crate::wire::{EtherType, Icmpv6Packet, Icmpv6Type, Ipv6Packet};

/// Writes worker 0's next due announcement into `buf` (at least
/// [`super::POLL_TRANSMIT_LEN`] bytes); returns its port and length.
pub(super) fn poll(now: u64, buf: &mut [u8], st: &mut WorkerState) -> Option<(u8, usize)> {
    if st.worker != 0 || !st.l2.enabled() {
        return None;
    }
    let answered = st.l2.current();
    if answered.seq != st.gratuitous.seq {
        st.gratuitous = Gratuitous { seq: answered.seq, round: 0, index: 0, next_ns: now };
    }
    let g = &mut st.gratuitous;
    if g.round >= ANNOUNCE_NUM || now < g.next_ns {
        return None;
    }
    let interfaces = &st.host.interfaces;
    loop {
        let (v, i) = (g.index / interfaces.len().max(1), g.index % interfaces.len().max(1));
        let (Some(&vip), Some(iface)) = (answered.announce.get(v), interfaces.get(i)) else {
            g.round += 1;
            g.index = 0;
            g.next_ns = now + ANNOUNCE_INTERVAL_NS;
            return None;
        };
        g.index += 1;
        if !st.l2.answers(vip) {
            continue; // given up (or its deadline passed) since it joined
        }
        let len = match vip {
            IpAddr::V4(ip) if !iface.addresses.is_empty() => super::arp::write_request(buf, iface, ip, ip),
            IpAddr::V6(ip) if !iface.addresses6.is_empty() => write_unsolicited_advertisement(buf, iface, ip),
            _ => continue,
        };
        st.counters.l2_announcements += 1;
        return Some((iface.port, len));
    }
}

/// Writes an unsolicited Neighbor Advertisement of `target` on `iface` into `buf`
/// (RFC 4861 § 7.2.6: from the target, to all-nodes, Hop Limit 255, Override set,
/// Solicited clear, the interface's MAC in a target link-layer address option). Returns
/// the frame length.
fn write_unsolicited_advertisement(buf: &mut [u8], iface: &HostInterface, target: Ipv6Addr) -> usize {
    const NA_LEN: usize = NdpPacket::<&[u8]>::HEADER_LEN + ndp::LL_OPTION_LEN;
    let l2 = link::write_header(buf, multicast_mac(ALL_NODES), iface.mac, iface.vlan, EtherType::Ipv6);
    let len = l2 + Ipv6Packet::<&[u8]>::HEADER_LEN + NA_LEN;
    Ipv6Packet::new_unchecked(&mut buf[l2..len]).fill_header(
        target,
        ALL_NODES,
        NEXT_HEADER_ICMPV6,
        NA_LEN as u16,
        ndp::HOP_LIMIT,
    );
    let icmp = &mut buf[l2 + Ipv6Packet::<&[u8]>::HEADER_LEN..len];
    let mut na = NdpPacket::new_unchecked(&mut *icmp);
    na.fill_header(Icmpv6Type::NeighborAdvert, ndp::FLAG_OVERRIDE, target);
    na.set_link_layer_option(ndp::OPTION_TARGET_LL_ADDR, iface.mac);
    Icmpv6Packet::new_unchecked(icmp).fill_checksum(target, ALL_NODES);
    len
}
