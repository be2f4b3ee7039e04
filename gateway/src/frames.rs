//! Builders of well-formed Ethernet frames, for tests, benchmarks and fuzz seeds.
//!
//! Each builder writes a complete frame with correct checksums into a new `Vec<u8>`
//! (allocation is fine here: this is never on the packet path).

use std::net::Ipv4Addr;

use crate::wire::{
    ArpOperation, ArpPacket, EtherType, EthernetFrame, Icmpv4Packet, Icmpv4Type, IpProtocol, Ipv4Packet, MacAddr,
    TcpFlags, TcpPacket, UdpPacket,
};

/// Ethernet header fields.
#[derive(Clone, Copy, Debug)]
pub struct L2 {
    /// Source MAC.
    pub src: MacAddr,
    /// Destination MAC.
    pub dst: MacAddr,
}

fn eth(l2: L2, ethertype: EtherType, payload_len: usize) -> Vec<u8> {
    let mut b = vec![0u8; 14 + payload_len];
    let mut e = EthernetFrame::new_unchecked(&mut b[..]);
    e.set_src_addr(l2.src);
    e.set_dst_addr(l2.dst);
    e.set_ethertype(ethertype);
    b
}

fn ipv4(l2: L2, src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, l4_len: usize, ttl: u8) -> Vec<u8> {
    let mut b = eth(l2, EtherType::Ipv4, 20 + l4_len);
    Ipv4Packet::new_unchecked(&mut b[14..]).fill_header(src, dst, protocol, l4_len as u16, ttl);
    b
}

/// A TCP segment with a 20-byte header.
#[allow(clippy::too_many_arguments)]
pub fn tcp(
    l2: L2,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    payload: &[u8],
    ttl: u8,
) -> Vec<u8> {
    let mut b = ipv4(l2, src.0, dst.0, IpProtocol::Tcp, 20 + payload.len(), ttl);
    let mut t = TcpPacket::new_unchecked(&mut b[34..]);
    t.set_src_port(src.1);
    t.set_dst_port(dst.1);
    t.set_seq_number(seq);
    t.set_ack_number(ack);
    t.set_header_len(20);
    t.set_flags(flags);
    t.set_window_len(64240);
    b[54..].copy_from_slice(payload);
    TcpPacket::new_unchecked(&mut b[34..]).fill_checksum(src.0, dst.0);
    b
}

/// A UDP datagram.
pub fn udp(l2: L2, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8], ttl: u8) -> Vec<u8> {
    let mut b = ipv4(l2, src.0, dst.0, IpProtocol::Udp, 8 + payload.len(), ttl);
    let mut u = UdpPacket::new_unchecked(&mut b[34..]);
    u.set_src_port(src.1);
    u.set_dst_port(dst.1);
    u.set_len(8 + payload.len() as u16);
    b[42..].copy_from_slice(payload);
    UdpPacket::new_unchecked(&mut b[34..]).fill_checksum(src.0, dst.0);
    b
}

/// An ICMP echo request (`reply == false`) or reply.
pub fn icmp_echo(l2: L2, src: Ipv4Addr, dst: Ipv4Addr, ident: u16, seq: u16, data: &[u8], reply: bool) -> Vec<u8> {
    let mut b = ipv4(l2, src, dst, IpProtocol::Icmp, 8 + data.len(), 64);
    let mut i = Icmpv4Packet::new_unchecked(&mut b[34..]);
    i.set_msg_type(if reply { Icmpv4Type::EchoReply } else { Icmpv4Type::EchoRequest });
    i.set_msg_code(0);
    i.set_echo_ident(ident);
    i.set_echo_seq_no(seq);
    b[42..].copy_from_slice(data);
    Icmpv4Packet::new_unchecked(&mut b[34..]).fill_checksum();
    b
}

/// An ARP request or reply (RFC 826).
pub fn arp(l2: L2, op: ArpOperation, sha: MacAddr, spa: Ipv4Addr, tha: MacAddr, tpa: Ipv4Addr) -> Vec<u8> {
    let mut b = eth(l2, EtherType::Arp, 28);
    let mut a = ArpPacket::new_unchecked(&mut b[14..]);
    a.fill_header();
    a.set_operation(op);
    a.set_sender_hardware_addr(sha);
    a.set_sender_protocol_addr(spa);
    a.set_target_hardware_addr(tha);
    a.set_target_protocol_addr(tpa);
    b
}

/// `frame` with an 802.1Q tag (TPID `tpid`, TCI `tci`) inserted after its MAC addresses,
/// as a tagged port carries it.
pub fn tagged(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut b = vec![0u8; frame.len() + crate::wire::vlan::TAG_LEN];
    crate::wire::vlan::copy_tagged(&mut b, frame, tpid, tci).expect("a frame with MAC addresses");
    b
}
