//! IPv4 arriving at the gateway (RFC 791): the header is checked (length, checksum, no
//! fragments), the transport ports are read, and the packet goes to the conntrack path
//! ([`super::flow`], TCP and UDP) or the ICMP answerer ([`super::icmp`]).

use std::net::Ipv4Addr;
use std::ops::Range;

use super::link::Rx;
use super::{flow, icmp, Verdict, WorkerState};
use crate::conntrack::FlowKey;
use crate::counters::DropReason;
use crate::table::Table;
use crate::wire::{IpProtocol, Ipv4Packet, TcpFlags, TcpPacket, UdpPacket};

/// The fields of a received IPv4 TCP or UDP packet the later steps use.
#[derive(Clone, Copy, Debug)]
pub(super) struct Segment {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// TCP or UDP.
    pub proto: IpProtocol,
    /// Time to live as received.
    pub ttl: u8,
    /// IPv4 total length (header and payload), bytes.
    pub total: usize,
    /// Transport source port.
    pub sport: u16,
    /// Transport destination port.
    pub dport: u16,
    /// TCP flags; empty for UDP.
    pub tcp_flags: TcpFlags,
}

/// The flow key of the TCP or UDP packet after the link-layer header of `frame`, read with
/// checked views but without [`handle`]'s checks (header checksum, TTL): a hint for
/// [`super::process_burst`], which `handle` confirms. `None` for anything else, fragments
/// included.
#[inline]
pub(super) fn flow_key(frame: &[u8], rx: &Rx) -> Option<FlowKey> {
    let l3 = rx.l2_len;
    let ip = Ipv4Packet::new_checked(&frame[l3..rx.len]).ok()?;
    if ip.is_fragment() {
        return None;
    }
    let l4 = &frame[l3 + ip.header_len()..l3 + usize::from(ip.total_len())];
    let (src_port, dst_port) = match ip.next_header() {
        IpProtocol::Tcp => TcpPacket::new_checked(l4).map(|t| (t.src_port(), t.dst_port())).ok()?,
        IpProtocol::Udp => UdpPacket::new_checked(l4).map(|u| (u.src_port(), u.dst_port())).ok()?,
        _ => return None,
    };
    Some(FlowKey {
        protocol: u8::from(ip.next_header()),
        src_addr: ip.src_addr(),
        src_port,
        dst_addr: ip.dst_addr(),
        dst_port,
    })
}

/// Handles the IPv4 packet after the link-layer header of `frame`.
pub(super) fn handle(now: u64, frame: &mut [u8], rx: &Rx, table: &Table, st: &mut WorkerState) -> Verdict {
    let l3 = rx.l2_len;
    let (src, dst, proto, ttl, ihl, total) = {
        let Ok(ip) = Ipv4Packet::new_checked(&frame[l3..rx.len]) else {
            return Verdict::Drop(DropReason::MalformedIpv4);
        };
        if !ip.verify_checksum() {
            return Verdict::Drop(DropReason::BadIpv4Checksum);
        }
        if ip.is_fragment() {
            return Verdict::Drop(DropReason::Fragment);
        }
        (ip.src_addr(), ip.dst_addr(), ip.next_header(), ip.hop_limit(), ip.header_len(), usize::from(ip.total_len()))
    };
    let l4: Range<usize> = l3 + ihl..l3 + total;
    let (sport, dport, tcp_flags) = match proto {
        IpProtocol::Tcp => match TcpPacket::new_checked(&frame[l4.clone()]) {
            Ok(t) => (t.src_port(), t.dst_port(), t.flags()),
            Err(_) => return Verdict::Drop(DropReason::MalformedL4),
        },
        IpProtocol::Udp => match UdpPacket::new_checked(&frame[l4.clone()]) {
            Ok(u) => (u.src_port(), u.dst_port(), TcpFlags::default()),
            Err(_) => return Verdict::Drop(DropReason::MalformedL4),
        },
        IpProtocol::Icmp => return icmp::handle(frame, rx, table, st, src, dst, l4),
        _ => return Verdict::Drop(DropReason::UnsupportedProtocol),
    };
    let seg = Segment { src, dst, proto, ttl, total, sport, dport, tcp_flags };
    flow::handle(now, frame, rx, table, st, &seg)
}
