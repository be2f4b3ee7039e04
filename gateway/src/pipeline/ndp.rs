//! Neighbor Discovery (RFC 4861) arriving at the gateway, the IPv6 counterpart of
//! [`super::arp`]: a Neighbor Solicitation for one of the gateway's own IPv6 addresses or
//! for an IPv6 VIP (in L2 mode, one this gateway owns) is answered in place with a Neighbor Advertisement; the soliciting
//! node's link-layer address and advertised targets are learned. Solicitations the gateway
//! sends itself live in [`super::resolve`].
//!
//! Every message is validated first (RFC 4861 § 7.1.1, § 7.1.2: Hop Limit 255, checksum,
//! code 0, options, the Duplicate Address Detection rules); invalid ones are dropped as
//! [`DropReason::MalformedNdp`].
//!
//! The advertisement (RFC 4861 § 7.2.4) comes from the target address, carries a target
//! link-layer address option with the interface's MAC and has the Override flag set: the
//! gateway is the owner of its addresses and VIPs, not a proxy for another node, so a cached
//! entry must follow it (as a kube-proxy node's kernel answers for a VIP it holds). An
//! answer to a solicitation from the unspecified address (DAD) goes to the all-nodes
//! address with the Solicited flag clear; any other answer goes to the solicitation's
//! source, Solicited set, to the MAC in its source link-layer address option (or the
//! frame's source).
//!
//! Learning: the source of a solicitation for one of the gateway's addresses or VIPs, with
//! its source link-layer address option (RFC 4861 § 7.2.3), and an
//! advertisement's target with its target link-layer address option, when that address is
//! on the receiving link (one of the interface's IPv6 prefixes, or link-local). RFC 4861
//! § 7.2.5 lets a node ignore advertisements for addresses it has no cache entry for; the
//! gateway's cache is shared by all workers and the solicitation may have left from
//! another worker, so, as ARP's "merge" step here, an on-link advertisement always
//! refreshes the shared table.

use std::net::{IpAddr, Ipv6Addr};
use std::ops::Range;

use super::arp::answers;
use super::link::{self, Rx};
use super::{Verdict, WorkerState};
use crate::counters::DropReason;
use crate::table::Table;
use crate::wire::icmpv6::NEXT_HEADER_ICMPV6;
use crate::wire::ipv6::{multicast_mac, ALL_NODES};
use crate::wire::ndp::{self, NdpPacket};
use crate::wire::{EthernetFrame, Icmpv6Packet, Icmpv6Type, Ipv6Packet, MacAddr};

/// Length of the advertisement the gateway sends: the fixed part and one target link-layer
/// address option.
const NA_LEN: usize = NdpPacket::<&[u8]>::HEADER_LEN + ndp::LL_OPTION_LEN;

/// The fields of a validated Neighbor Discovery message that the handler uses.
struct Message {
    kind: Icmpv6Type,
    target: Ipv6Addr,
    /// The source (solicitation) or target (advertisement) link-layer address option.
    ll_addr: Option<MacAddr>,
}

/// Handles the Neighbor Solicitation or Advertisement at `l4` of the IPv6 packet
/// `src` → `dst` received with `hop_limit` in `frame`.
#[allow(clippy::too_many_arguments)]
pub(super) fn handle(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    (src, dst, hop_limit): (Ipv6Addr, Ipv6Addr, u8),
    l4: Range<usize>,
) -> Verdict {
    let msg = {
        let Ok(nd) = NdpPacket::new_checked(&frame[l4]) else {
            return Verdict::Drop(DropReason::MalformedNdp);
        };
        if nd.validate(hop_limit, src, dst).is_err() {
            return Verdict::Drop(DropReason::MalformedNdp);
        }
        let kind = nd.msg_type();
        let option =
            if kind == Icmpv6Type::NeighborSolicit { ndp::OPTION_SOURCE_LL_ADDR } else { ndp::OPTION_TARGET_LL_ADDR };
        Message { kind, target: nd.target_addr(), ll_addr: nd.link_layer_option(option) }
    };
    let host = &*st.host;
    let iface = &host.interfaces[usize::from(rx.iface)];
    let on_link = |a: Ipv6Addr| a.is_unicast_link_local() || iface.addresses6.iter().any(|c| c.contains(a));
    let ours = msg.kind == Icmpv6Type::NeighborSolicit
        && (host.is_own(msg.target) || answers(table, st, IpAddr::V6(msg.target)));
    // A solicitation for one of ours teaches its source (RFC 4861 § 7.2.3); an
    // advertisement its target (§ 7.2.5).
    let learn = if msg.kind == Icmpv6Type::NeighborSolicit { ours.then_some(src) } else { Some(msg.target) };
    if let (Some(mac), Some(addr)) = (msg.ll_addr, learn) {
        if mac.is_unicast() && !addr.is_unspecified() && !addr.is_multicast() && on_link(addr) {
            if st.neighbours.learn(addr, mac, now) {
                st.counters.nd_learned += 1;
            } else {
                st.counters.neighbours_not_learned += 1;
            }
        }
    }
    if msg.kind == Icmpv6Type::NeighborAdvert {
        return Verdict::Consumed;
    }
    if !ours {
        return Verdict::Drop(DropReason::NdpNotForUs);
    }
    let l3 = rx.l2_len;
    if frame.len() < l3 + Ipv6Packet::<&[u8]>::HEADER_LEN + NA_LEN {
        return Verdict::Drop(DropReason::Oversize);
    }
    let (to, to_mac, flags) = if src.is_unspecified() {
        (ALL_NODES, multicast_mac(ALL_NODES), ndp::FLAG_OVERRIDE)
    } else {
        let sender = EthernetFrame::new_unchecked(&frame[..l3]).src_addr();
        (src, msg.ll_addr.unwrap_or(sender), ndp::FLAG_SOLICITED | ndp::FLAG_OVERRIDE)
    };
    let l3_len = Ipv6Packet::<&[u8]>::HEADER_LEN + NA_LEN;
    let packet = &mut frame[l3..l3 + l3_len];
    Ipv6Packet::new_unchecked(&mut *packet).fill_header(
        msg.target,
        to,
        NEXT_HEADER_ICMPV6,
        NA_LEN as u16,
        ndp::HOP_LIMIT,
    );
    let icmp = &mut packet[Ipv6Packet::<&[u8]>::HEADER_LEN..];
    let mut na = NdpPacket::new_unchecked(&mut *icmp);
    na.fill_header(Icmpv6Type::NeighborAdvert, flags, msg.target);
    na.set_link_layer_option(ndp::OPTION_TARGET_LL_ADDR, iface.mac);
    Icmpv6Packet::new_unchecked(icmp).fill_checksum(msg.target, to);
    st.counters.nd_advertisements += 1;
    link::transmit(frame, rx, l3_len, rx.iface, to_mac, host)
}
