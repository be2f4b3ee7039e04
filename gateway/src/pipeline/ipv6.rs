//! IPv6 arriving at the gateway (RFC 8200): the header is checked, the extension headers
//! are walked to the upper layer, the transport ports are read, and the packet goes to the
//! conntrack path ([`super::flow`], TCP and UDP, shared with IPv4) or to the ICMPv6
//! handlers: Neighbor Discovery ([`super::ndp`]), echo ([`super::icmp`]) and errors about
//! flows ([`super::icmp_error`]). Fragments
//! ([RFC 8200] § 4.5) of TCP and UDP datagrams go as IPv4's do ([`super::fragment`]): the
//! first through its flow, the later ones along it; fragments of anything else, or whose
//! Fragment header is followed by more extension headers, are dropped as
//! [`DropReason::Fragment`].
//!
//! [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5

use std::net::Ipv6Addr;

use super::flow::{self, Segment};
use super::fragment::{self, Fragment};
use super::hint::{self, LeanSegment};
use super::link::Rx;
use super::sctp::Chunks;
use super::{icmp, icmp_error, ndp, Verdict, WorkerState};
use crate::conntrack::tcp::Segment as TcpSegment;
use crate::conntrack::{FlowKey, TcpSeq};
use crate::counters::DropReason;
use crate::fragments::FragmentKey;
use crate::table::Table;
use crate::wire::ipv6::Ipv6Fragment;
use crate::wire::{Icmpv6Packet, Icmpv6Type, IpProtocol, Ipv6Packet, TcpPacket, UdpPacket};

/// The flow key of the IPv6 TCP or UDP packet after the link-layer header of `frame` (after
/// any extension headers), read with checked views but without [`handle`]'s checks: a hint
/// for [`super::process_burst`], which `handle` confirms; with it, whether the packet is a
/// TCP SYN without ACK (a connection opening). `None` for anything else, fragments included
/// (`lean` then unchanged).
///
/// Into `lean` (in place, as `super::ipv4::flow_key`; the caller sets
/// [`LeanSegment::NONE`] first) the [`LeanSegment`] of a packet the lean established path
/// may take: one that passes every check [`handle`] and [`flow::handle`] make of a packet
/// of a tracked flow — no extension header (the transport header right after the fixed
/// one: no fragment, no Hop-by-Hop Jumbo Payload), a source that is not multicast
/// (RFC 4291 § 2.7), Hop Limit above 1, no partial transport checksum, the transport header
/// whole (TCP: control flags as [`hint::lean_tcp_flags`] says; UDP: a checksum other than 0,
/// RFC 8200 § 8.1) — and whose length fits a [`LeanSegment::total`].
#[inline]
pub(super) fn flow_key(frame: &[u8], rx: &Rx, lean: &mut LeanSegment) -> Option<(FlowKey<Ipv6Addr>, bool)> {
    let l3 = rx.l2_len;
    let ip = Ipv6Packet::new_checked(&frame[l3..rx.len]).ok()?;
    let upper = ip.upper_layer().ok()?;
    if upper.fragment.is_some() || !matches!(upper.protocol, IpProtocol::Tcp | IpProtocol::Udp) {
        return None;
    }
    let total = ip.total_len();
    let l4 = &frame[l3 + upper.offset..l3 + total];
    let (src_addr, dst_addr) = (ip.src_addr(), ip.dst_addr());
    let lean_total = u16::try_from(total)
        .ok()
        .filter(|_| {
            upper.offset == Ipv6Packet::<&[u8]>::HEADER_LEN
                && ip.hop_limit() > 1
                && !rx.l4_csum_partial
                && !src_addr.is_multicast()
        })
        .unwrap_or(0);
    let segment = |tcp| LeanSegment { iface: rx.iface, l2_len: rx.l2_len as u8, total: lean_total, tcp };
    let (src_port, dst_port, opens) = if upper.protocol == IpProtocol::Tcp {
        let t = TcpPacket::new_checked(l4).ok()?;
        let tcp = flow::tcp_seq(&t);
        if lean_total != 0 && hint::lean_tcp_flags(tcp.flags) {
            // Field by field, `tcp.wscale` left `None` as every segment has it
            // (`LeanSegment::tcp`): a store less.
            let TcpSeq { flags, seq, ack, window, len, .. } = hint::as_lean(tcp);
            debug_assert_eq!(lean.tcp.wscale, None);
            (lean.iface, lean.l2_len, lean.total) = (rx.iface, rx.l2_len as u8, lean_total);
            (lean.tcp.flags, lean.tcp.seq, lean.tcp.ack, lean.tcp.window, lean.tcp.len) =
                (flags, seq, ack, window, len);
        }
        (t.src_port(), t.dst_port(), TcpSegment::of(tcp.flags) == TcpSegment::Syn)
    } else {
        let u = UdpPacket::new_checked(l4).ok()?;
        if lean_total != 0 && u.checksum() != 0 {
            *lean = segment(TcpSeq::default());
        }
        (u.src_port(), u.dst_port(), false)
    };
    Some((FlowKey { protocol: u8::from(upper.protocol), src_addr, src_port, dst_addr, dst_port }, opens))
}

/// Handles the IPv6 packet after the link-layer header of `frame`.
pub(super) fn handle(now: u64, frame: &mut [u8], rx: &Rx, table: &Table, st: &mut WorkerState) -> Verdict {
    let l3 = rx.l2_len;
    let (src, dst, hop_limit, upper, total) = {
        let Ok(ip) = Ipv6Packet::new_checked(&frame[l3..rx.len]) else {
            return Verdict::Drop(DropReason::MalformedIpv6);
        };
        let Ok(upper) = ip.upper_layer() else {
            return Verdict::Drop(DropReason::MalformedIpv6);
        };
        (ip.src_addr(), ip.dst_addr(), ip.hop_limit(), upper, ip.total_len())
    };
    // RFC 4291 § 2.7: "Multicast addresses must not be used as source addresses".
    if src.is_multicast() {
        return Verdict::Drop(DropReason::MalformedIpv6);
    }
    let l4 = l3 + upper.offset..l3 + total;
    let mut first_fragment = None;
    // An atomic fragment (offset 0, M clear: RFC 6946) is a whole datagram: no table entry.
    if let Some(frag) = upper.fragment.filter(|f| !f.is_first() || f.more_frags) {
        // The identity's protocol is the Fragment header's Next Header, the same in every
        // fragment; only TCP or UDP right after it is followed.
        let protocol = IpProtocol::from(frag.next_header);
        if !matches!(protocol, IpProtocol::Tcp | IpProtocol::Udp) {
            return Verdict::Drop(DropReason::Fragment);
        }
        let fragment = Fragment {
            key: FragmentKey { src, dst, protocol: frag.next_header, ident: frag.ident },
            offset: frag.offset,
            payload_len: (total - (frag.header_offset + Ipv6Fragment::LEN)) as u16,
            more: frag.more_frags,
        };
        if !frag.is_first() {
            return fragment::follow(now, frame, rx, table, st, &fragment, hop_limit, total);
        }
        first_fragment = Some(fragment);
    }
    let (sport, dport, tcp) = match upper.protocol {
        IpProtocol::Tcp => match TcpPacket::new_checked(&frame[l4.clone()]) {
            Ok(t) => (t.src_port(), t.dst_port(), flow::tcp_seq(&t)),
            Err(_) => return Verdict::Drop(DropReason::MalformedL4),
        },
        IpProtocol::Udp if first_fragment.is_some() => match fragment::first_udp_header(&frame[l4.clone()]) {
            Some((sport, dport, checksum)) if checksum != 0 => (sport, dport, TcpSeq::default()),
            _ => return Verdict::Drop(DropReason::MalformedL4),
        },
        // RFC 8200 § 8.1: "IPv6 receivers must discard UDP packets containing a zero
        // checksum"; forwarding one would only move the discard to the endpoint.
        IpProtocol::Udp => match UdpPacket::new_checked(&frame[l4.clone()]) {
            Ok(u) if u.checksum() != 0 => (u.src_port(), u.dst_port(), TcpSeq::default()),
            _ => return Verdict::Drop(DropReason::MalformedL4),
        },
        IpProtocol::Icmpv6 => return handle_icmpv6(now, frame, rx, table, st, (src, dst, hop_limit), l4),
        _ => return Verdict::Drop(DropReason::UnsupportedProtocol),
    };
    let seg = Segment {
        src,
        dst,
        proto: upper.protocol,
        ttl: hop_limit,
        l4_offset: upper.offset,
        total,
        sport,
        dport,
        tcp,
        sctp: Chunks::default(),
        first_fragment,
    };
    flow::handle(now, frame, rx, table, st, &seg)
}

/// ICMPv6 to the gateway: Neighbor Discovery, echo requests, and errors about flows
/// ([`super::icmp_error`]); anything else is a counted drop. Cold and out of line: kept
/// out of [`handle`]'s registers, which the TCP and UDP path needs.
#[cold]
#[inline(never)]
fn handle_icmpv6(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    addrs: (Ipv6Addr, Ipv6Addr, u8),
    l4: std::ops::Range<usize>,
) -> Verdict {
    let Ok(msg) = Icmpv6Packet::new_checked(&frame[l4.clone()]) else {
        return Verdict::Drop(DropReason::MalformedL4);
    };
    match msg.msg_type() {
        Icmpv6Type::NeighborSolicit | Icmpv6Type::NeighborAdvert => ndp::handle(now, frame, rx, table, st, addrs, l4),
        Icmpv6Type::EchoRequest => icmp::echo_v6(frame, rx, table, st, (addrs.0, addrs.1), l4),
        // RFC 4443 § 3's errors, which quote the invoking packet: about a tracked flow, they
        // are translated and forwarded to its other end.
        Icmpv6Type::DstUnreachable | Icmpv6Type::PacketTooBig | Icmpv6Type::TimeExceeded | Icmpv6Type::ParamProblem => {
            icmp_error::handle(now, frame, rx, st, (addrs.0, addrs.1), l4)
        }
        _ => Verdict::Drop(DropReason::IcmpNotHandled),
    }
}
