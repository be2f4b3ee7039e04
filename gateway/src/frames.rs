//! Builders of well-formed Ethernet frames, for tests, benchmarks and fuzz seeds.
//!
//! Each builder writes a complete frame with correct checksums into a new `Vec<u8>`
//! (allocation is fine here: this is never on the packet path).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::wire::checksum::PseudoHeaderAddr;
use crate::wire::icmpv6::NEXT_HEADER_ICMPV6;
use crate::wire::ndp::{self, NdpPacket};
use crate::wire::{
    ArpOperation, ArpPacket, EtherType, EthernetFrame, Icmpv4Packet, Icmpv4Type, Icmpv6Packet, Icmpv6Type, IpProtocol,
    Ipv4Packet, Ipv6Packet, MacAddr, SctpPacket, TcpFlags, TcpPacket, UdpPacket,
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
    write_tcp(&mut b[34..], src, dst, flags, (seq, ack), payload);
    b
}

/// Writes a TCP segment with a 20-byte header into `l4` (exactly its length).
fn write_tcp<A: PseudoHeaderAddr>(
    l4: &mut [u8],
    src: (A, u16),
    dst: (A, u16),
    flags: TcpFlags,
    (seq, ack): (u32, u32),
    payload: &[u8],
) {
    let mut t = TcpPacket::new_unchecked(&mut *l4);
    t.set_src_port(src.1);
    t.set_dst_port(dst.1);
    t.set_seq_number(seq);
    t.set_ack_number(ack);
    t.set_header_len(20);
    t.set_flags(flags);
    t.set_window_len(64240);
    t.set_urgent_at(0);
    l4[20..].copy_from_slice(payload);
    TcpPacket::new_unchecked(l4).fill_checksum(src.0, dst.0);
}

/// Writes a UDP datagram into `l4` (exactly its length).
fn write_udp<A: PseudoHeaderAddr>(l4: &mut [u8], src: (A, u16), dst: (A, u16), payload: &[u8]) {
    let mut u = UdpPacket::new_unchecked(&mut *l4);
    u.set_src_port(src.1);
    u.set_dst_port(dst.1);
    u.set_len(8 + payload.len() as u16);
    l4[8..].copy_from_slice(payload);
    UdpPacket::new_unchecked(l4).fill_checksum(src.0, dst.0);
}

/// A UDP datagram.
pub fn udp(l2: L2, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8], ttl: u8) -> Vec<u8> {
    let mut b = ipv4(l2, src.0, dst.0, IpProtocol::Udp, 8 + payload.len(), ttl);
    write_udp(&mut b[34..], src, dst, payload);
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

fn ipv6(l2: L2, src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, l4_len: usize, hop_limit: u8) -> Vec<u8> {
    let mut b = eth(l2, EtherType::Ipv6, 40 + l4_len);
    Ipv6Packet::new_unchecked(&mut b[14..]).fill_header(src, dst, next_header, l4_len as u16, hop_limit);
    b
}

/// An IPv6 TCP segment with a 20-byte header and no extension headers.
#[allow(clippy::too_many_arguments)]
pub fn tcp6(
    l2: L2,
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    payload: &[u8],
    hop_limit: u8,
) -> Vec<u8> {
    let mut b = ipv6(l2, src.0, dst.0, u8::from(IpProtocol::Tcp), 20 + payload.len(), hop_limit);
    write_tcp(&mut b[54..], src, dst, flags, (seq, ack), payload);
    b
}

/// An IPv6 UDP datagram without extension headers.
pub fn udp6(l2: L2, src: (Ipv6Addr, u16), dst: (Ipv6Addr, u16), payload: &[u8], hop_limit: u8) -> Vec<u8> {
    let mut b = ipv6(l2, src.0, dst.0, u8::from(IpProtocol::Udp), 8 + payload.len(), hop_limit);
    write_udp(&mut b[54..], src, dst, payload);
    b
}

/// An ICMPv6 echo request (`reply == false`) or reply, Hop Limit 64.
pub fn icmpv6_echo(l2: L2, src: Ipv6Addr, dst: Ipv6Addr, ident: u16, seq: u16, data: &[u8], reply: bool) -> Vec<u8> {
    let mut b = ipv6(l2, src, dst, NEXT_HEADER_ICMPV6, 8 + data.len(), 64);
    let mut i = Icmpv6Packet::new_unchecked(&mut b[54..]);
    i.set_msg_type(if reply { Icmpv6Type::EchoReply } else { Icmpv6Type::EchoRequest });
    i.set_msg_code(0);
    i.set_echo_ident(ident);
    i.set_echo_seq_no(seq);
    i.data_mut().copy_from_slice(data);
    i.fill_checksum(src, dst);
    b
}

/// A Neighbor Solicitation (`kind` [`Icmpv6Type::NeighborSolicit`], `flags` 0) or Neighbor
/// Advertisement ([`Icmpv6Type::NeighborAdvert`], `flags` from [`ndp::FLAG_SOLICITED`] …) for
/// `target`, Hop Limit 255 ([RFC 4861] § 7.1), with one link-layer address option (source
/// for a solicitation, target for an advertisement) when `ll_addr` is given.
///
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-7.1
pub fn ndp(
    l2: L2,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    kind: Icmpv6Type,
    flags: u8,
    target: Ipv6Addr,
    ll_addr: Option<MacAddr>,
) -> Vec<u8> {
    let len = NdpPacket::<&[u8]>::HEADER_LEN + if ll_addr.is_some() { ndp::LL_OPTION_LEN } else { 0 };
    let mut b = ipv6(l2, src, dst, NEXT_HEADER_ICMPV6, len, ndp::HOP_LIMIT);
    let mut n = NdpPacket::new_unchecked(&mut b[54..]);
    n.fill_header(kind, flags, target);
    if let Some(mac) = ll_addr {
        let option =
            if kind == Icmpv6Type::NeighborSolicit { ndp::OPTION_SOURCE_LL_ADDR } else { ndp::OPTION_TARGET_LL_ADDR };
        n.set_link_layer_option(option, mac);
    }
    Icmpv6Packet::new_unchecked(&mut b[54..]).fill_checksum(src, dst);
    b
}

/// An SCTP packet ([RFC 9260] § 3): common header with `verification_tag`, then `chunks`
/// (already laid out and padded), CRC32c filled.
///
/// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-3
pub fn sctp(
    l2: L2,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    verification_tag: u32,
    chunks: &[u8],
    ttl: u8,
) -> Vec<u8> {
    let mut b = ipv4(l2, src.0, dst.0, IpProtocol::Sctp, 12 + chunks.len(), ttl);
    let mut p = SctpPacket::new_unchecked(&mut b[34..]);
    p.set_src_port(src.1);
    p.set_dst_port(dst.1);
    p.set_verification_tag(verification_tag);
    p.chunk_bytes_mut().copy_from_slice(chunks);
    p.fill_checksum();
    b
}

/// An SCTP INIT chunk ([RFC 9260] § 3.3.2) with no optional parameters: Initiate Tag
/// `initiate_tag`, a_rwnd 65535, 10 outbound and 65535 inbound streams, initial TSN 1.
///
/// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-3.3.2
pub fn sctp_init_chunk(initiate_tag: u32) -> [u8; 20] {
    let mut c = [0u8; 20];
    c[..4].copy_from_slice(&[1, 0, 0, 20]);
    c[4..8].copy_from_slice(&initiate_tag.to_be_bytes());
    c[8..12].copy_from_slice(&65535u32.to_be_bytes());
    c[12..16].copy_from_slice(&[0, 10, 0xff, 0xff]);
    c[16..20].copy_from_slice(&1u32.to_be_bytes());
    c
}

/// An ICMP error (`msg_type` 3, 11 or 12, RFC 792) from `src` to `dst` whose data is
/// `quoted` (the offending datagram's IPv4 header and first bytes), with `rest_of_header` in
/// bytes 4..8 (the next-hop MTU of "fragmentation needed" in its low half, RFC 1191).
#[allow(clippy::too_many_arguments)]
pub fn icmp_error(
    l2: L2,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    msg_type: Icmpv4Type,
    code: u8,
    rest_of_header: u32,
    quoted: &[u8],
    ttl: u8,
) -> Vec<u8> {
    let mut b = ipv4(l2, src, dst, IpProtocol::Icmp, 8 + quoted.len(), ttl);
    let mut i = Icmpv4Packet::new_unchecked(&mut b[34..]);
    i.set_msg_type(msg_type);
    i.set_msg_code(code);
    i.set_rest_of_header(rest_of_header);
    i.data_mut().copy_from_slice(quoted);
    i.fill_checksum();
    b
}

/// An ICMPv6 error ([RFC 4443] § 3: type 1 destination unreachable, 2 packet too big, 3 time
/// exceeded, 4 parameter problem) from `src` to `dst` whose data is `quoted` (the invoking
/// packet's IPv6 header and as much of the rest as fits), with `word` in bytes 4..8 (the MTU
/// of packet too big, the pointer of parameter problem), checksum over the pseudo-header.
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3
#[allow(clippy::too_many_arguments)]
pub fn icmpv6_error(
    l2: L2,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    msg_type: Icmpv6Type,
    code: u8,
    word: u32,
    quoted: &[u8],
    hop_limit: u8,
) -> Vec<u8> {
    let mut b = ipv6(l2, src, dst, NEXT_HEADER_ICMPV6, 8 + quoted.len(), hop_limit);
    let mut i = Icmpv6Packet::new_unchecked(&mut b[54..]);
    i.set_msg_type(msg_type);
    i.set_msg_code(code);
    i.set_word(word);
    i.data_mut().copy_from_slice(quoted);
    i.fill_checksum(src, dst);
    b
}

/// Splits the unfragmented IPv4 frame `frame` (Ethernet + IPv4 without options) into
/// fragments carrying at most `max_payload` bytes of the datagram's payload each (rounded
/// down to a multiple of 8, RFC 791 § 3.2), in order: same Identification `ident`, MF set on
/// all but the last, offsets in 8-byte units, header checksums filled.
pub fn ipv4_fragments(frame: &[u8], ident: u16, max_payload: usize) -> Vec<Vec<u8>> {
    let step = (max_payload & !7).max(8);
    let payload = &frame[34..];
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < payload.len() {
        let end = (offset + step).min(payload.len());
        let mut f = frame[..34].to_vec();
        f.extend_from_slice(&payload[offset..end]);
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_total_len((20 + end - offset) as u16);
        ip.set_ident(ident);
        ip.clear_flags();
        ip.set_frag_offset(offset as u16);
        ip.set_more_frags(end < payload.len());
        ip.fill_checksum();
        out.push(f);
        offset = end;
    }
    out
}

/// Splits the unfragmented IPv6 frame `frame` (Ethernet + IPv6 without extension headers)
/// into fragments ([RFC 8200] § 4.5) carrying at most `max_payload` bytes of the datagram's
/// payload each (rounded down to a multiple of 8), in order: each is the IPv6 header (Next
/// Header 44, Payload Length fixed) and a Fragment header with the original Next Header,
/// Identification `ident`, the offset in 8-byte units and M set on all but the last.
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5
pub fn ipv6_fragments(frame: &[u8], ident: u32, max_payload: usize) -> Vec<Vec<u8>> {
    let step = (max_payload & !7).max(8);
    let next_header = Ipv6Packet::new_unchecked(&frame[14..]).next_header();
    let payload = &frame[54..];
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < payload.len() {
        let end = (offset + step).min(payload.len());
        let mut f = frame[..54].to_vec();
        let word = offset as u16 | u16::from(end < payload.len());
        f.extend_from_slice(&[next_header, 0]);
        f.extend_from_slice(&word.to_be_bytes());
        f.extend_from_slice(&ident.to_be_bytes());
        f.extend_from_slice(&payload[offset..end]);
        let mut ip = Ipv6Packet::new_unchecked(&mut f[14..]);
        ip.set_next_header(crate::wire::ipv6::NEXT_HEADER_FRAGMENT);
        ip.set_payload_len((8 + end - offset) as u16);
        out.push(f);
        offset = end;
    }
    out
}

/// `frame` with an 802.1Q tag (TPID `tpid`, TCI `tci`) inserted after its MAC addresses,
/// as a tagged port carries it.
pub fn tagged(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut b = vec![0u8; frame.len() + crate::wire::vlan::TAG_LEN];
    crate::wire::vlan::copy_tagged(&mut b, frame, tpid, tci).expect("a frame with MAC addresses");
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const L2: L2 = L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) };

    #[test]
    fn ipv6_builders_make_valid_frames() {
        let (a, b): (Ipv6Addr, Ipv6Addr) = ("2001:db8:100::10".parse().unwrap(), "2001:db8:203::10".parse().unwrap());
        let f = tcp6(L2, (a, 40000), (b, 80), TcpFlags::SYN, 1, 0, b"x", 64);
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!((ip.payload_len(), ip.next_header(), ip.hop_limit()), (21, 6, 64));
        assert!(TcpPacket::new_checked(ip.payload()).unwrap().verify_checksum(a, b));
        let f = udp6(L2, (a, 40000), (b, 53), b"abc", 64);
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert!(UdpPacket::new_checked(ip.payload()).unwrap().verify_checksum(a, b));
        let f = icmpv6_echo(L2, a, b, 7, 1, b"ping", false);
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert!(Icmpv6Packet::new_checked(ip.payload()).unwrap().verify_checksum(a, b));
        let sn = crate::wire::ipv6::solicited_node(b);
        let f = ndp(L2, a, sn, Icmpv6Type::NeighborSolicit, 0, b, Some(L2.src));
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        let ns = NdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!(ns.validate(ip.hop_limit(), a, sn), Ok(()));
        assert_eq!(ns.link_layer_option(ndp::OPTION_SOURCE_LL_ADDR), Some(L2.src));
    }
}
