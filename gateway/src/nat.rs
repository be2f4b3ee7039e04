//! DNAT/SNAT rewrites of IPv4 and IPv6 TCP, UDP and SCTP packets in place, with
//! incremental checksums (RFC 1624 eqn. 3), as Katran's `csum_helpers.h` and Cilium's
//! `csum_diff` do.
//!
//! Callers pass an IPv4 packet that already passed `Ipv4Packet::new_checked` (or an IPv6
//! packet that passed `Ipv6Packet::new_checked`, with the offset of its upper-layer header
//! from `Ipv6Packet::upper_layer`) whose upper layer passed `TcpPacket::new_checked` /
//! `UdpPacket::new_checked` / `SctpPacket::new_checked`; the rewrite then cannot panic. The
//! transport part is one function for both families ([`PseudoHeaderAddr`] supplies the
//! pseudo-header arithmetic).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::wire::checksum::{Delta, PseudoHeaderAddr};
use crate::wire::{IpProtocol, Ipv4Packet, Ipv6Packet, SctpPacket, TcpPacket, UdpPacket};

/// The new addresses and ports of a packet (IPv4 addresses unless `A` says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite<A = Ipv4Addr> {
    /// New source address.
    pub src_addr: A,
    /// New source port.
    pub src_port: u16,
    /// New destination address.
    pub dst_addr: A,
    /// New destination port.
    pub dst_port: u16,
}

/// Rewrites addresses and ports of the IPv4 TCP/UDP/SCTP packet `ip_buf`, decrements its TTL
/// (the gateway is a router hop) and updates the IPv4 header and L4 checksums
/// incrementally. With `l4_partial` (the L4 checksum field holds only the pseudo-header
/// sum, Linux `CHECKSUM_PARTIAL` as AF_PACKET reports with `TP_STATUS_CSUMNOTREADY`) the
/// L4 checksum is computed in full instead. SCTP's CRC32c ([RFC 9260] § 6.8) covers the
/// whole packet and no pseudo-header: it is recomputed after the port rewrite, which needs
/// the whole SCTP packet (never a first fragment). The caller checked TTL > 1.
///
/// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-6.8
///
/// Cold and out of line: the pipeline rewrites a plain TCP or UDP packet with
/// [`rewrite_ipv4_plain`] and calls this for the rest (options, a partial checksum, SCTP, a
/// first fragment's short header); inlined, it cost a new flow's SYN 10 instructions of
/// registers and layout, out of line but not cold 4.
#[cold]
#[inline(never)]
pub fn rewrite_ipv4(ip_buf: &mut [u8], rw: &Rewrite, l4_partial: bool) {
    let (proto, addrs) = rewrite_ipv4_addrs(ip_buf, rw.src_addr, rw.dst_addr);
    let mut ip = Ipv4Packet::new_unchecked(&mut *ip_buf);
    rewrite_l4(ip.payload_mut(), proto, addrs, rw, l4_partial);
}

/// [`rewrite_ipv4`] of a TCP (`tcp`) or UDP packet `ip_buf` whose IPv4 header has no options
/// and whose transport header is whole, with a full transport checksum (not partial): the
/// same bytes, written at fixed offsets. The checksum changes are the same sums ([`Delta`])
/// of the same words, taken over the words as they lie in the packet, in network byte
/// order, with no field swapped to host order and back: one's complement sums are
/// byte-order independent ([RFC 1071] § 2(B)), and the packet's own addresses and ports are
/// the old values. The lean established path's rewrite. The caller checked TTL > 1.
///
/// Always inlined: the lean path's one call per packet, whose arguments would otherwise go
/// through memory.
///
/// # Panics
/// If `ip_buf` is shorter than the headers (40 bytes for TCP, 28 for UDP).
///
/// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
#[inline(always)]
pub fn rewrite_ipv4_plain(ip_buf: &mut [u8], tcp: bool, rw: &Rewrite) {
    // Each a fixed-size array: every offset below is checked at compile time.
    if tcp {
        let b: &mut [u8; 40] = ip_buf.first_chunk_mut().expect("a whole TCP header");
        rewrite_ipv4_plain_in(b, 36, |l4, check| l4.apply(check), rw);
    } else {
        let b: &mut [u8; 28] = ip_buf.first_chunk_mut().expect("a whole UDP header");
        rewrite_ipv4_plain_in(b, 26, |l4, check| l4.apply_udp(check), rw);
    }
}

/// [`rewrite_ipv4_plain`] of the `L` bytes of IPv4 and transport header `b` whose
/// transport checksum lies at `at` and takes its change by `apply`.
#[inline(always)]
fn rewrite_ipv4_plain_in<const L: usize>(b: &mut [u8; L], at: usize, apply: impl Fn(Delta, u16) -> u16, rw: &Rewrite) {
    let word = |b: &[u8; L], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let word32 = |b: &[u8; L], at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let (src, dst) = (u32::from_ne_bytes(rw.src_addr.octets()), u32::from_ne_bytes(rw.dst_addr.octets()));
    // The two ports as they lie in the header: both in network order, source first.
    let ports = ((u32::from(rw.src_port) << 16) | u32::from(rw.dst_port)).to_be();
    let addrs = Delta::NONE.words32([(word32(b, 12), src), (word32(b, 16), dst)]);
    let l4 = addrs.words32([(word32(b, 20), ports)]);
    // TTL down by one: the word (TTL, Protocol) loses 1 in its high byte, whatever both hold.
    let ip = addrs.word(u16::from_ne_bytes([1, 0]), 0);
    let check = ip.apply(word(b, 10));
    b[8] -= 1;
    b[10..12].copy_from_slice(&check.to_ne_bytes());
    b[12..16].copy_from_slice(&src.to_ne_bytes());
    b[16..20].copy_from_slice(&dst.to_ne_bytes());
    b[20..24].copy_from_slice(&ports.to_ne_bytes());
    let check = apply(l4, word(b, at));
    b[at..at + 2].copy_from_slice(&check.to_ne_bytes());
}

/// Rewrites the source and destination addresses of the IPv4 packet `ip_buf` and
/// decrements its TTL, updating the header checksum incrementally ([RFC 1624]); the payload
/// is not touched. This is the whole translation of a
/// later fragment (no transport header) and of an ICMP error's outer header. The caller
/// checked TTL > 1.
///
/// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624
#[inline]
pub fn rewrite_ipv4_header(ip_buf: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
    rewrite_ipv4_addrs(ip_buf, src, dst);
}

/// [`rewrite_ipv4_header`], returning the packet's protocol and the checksum change of its
/// addresses (for the transport checksum's pseudo-header).
#[inline]
fn rewrite_ipv4_addrs(ip_buf: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) -> (IpProtocol, Delta) {
    let mut ip = Ipv4Packet::new_unchecked(ip_buf);
    let (old_src, old_dst) = (ip.src_addr(), ip.dst_addr());
    let ttl = ip.hop_limit();
    let proto = ip.next_header();
    let proto_n = u8::from(proto);
    let addrs = Delta::NONE.word32(old_src.to_bits(), src.to_bits()).word32(old_dst.to_bits(), dst.to_bits());
    let ttl_word = addrs.word(u16::from_be_bytes([ttl, proto_n]), u16::from_be_bytes([ttl.saturating_sub(1), proto_n]));
    ip.set_checksum(ttl_word.apply(ip.checksum()));
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
    ip.set_hop_limit(ttl.saturating_sub(1));
    (proto, addrs)
}

/// Rewrites the addresses of the IPv6 packet `ip_buf` to `src` → `dst` and decrements its Hop
/// Limit, nothing else: for a later fragment, whose transport checksum the first fragment's
/// rewrite already accounted for (IPv6 has no header checksum, [RFC 8200] § 3). The caller
/// checked Hop Limit > 1.
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-3
#[inline]
pub fn rewrite_ipv6_header(ip_buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) {
    let mut ip = Ipv6Packet::new_unchecked(ip_buf);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
    ip.set_hop_limit(ip.hop_limit().saturating_sub(1));
}

/// Rewrites addresses and ports of the IPv6 TCP/UDP/SCTP packet `ip_buf` whose upper-layer
/// header starts at `l4_offset` (after any extension headers) and `protocol` is its
/// upper-layer protocol, decrements its Hop Limit ([RFC 8200] § 3) and updates the L4
/// checksum incrementally (IPv6 has no header checksum). `l4_partial` as in
/// [`rewrite_ipv4`]. The caller checked Hop Limit > 1.
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-3
///
/// Cold and out of line, as [`rewrite_ipv4`]: the pipeline's plain TCP or UDP packet takes
/// [`rewrite_ipv6_plain`].
#[cold]
#[inline(never)]
pub fn rewrite_ipv6(
    ip_buf: &mut [u8],
    l4_offset: usize,
    protocol: IpProtocol,
    rw: &Rewrite<Ipv6Addr>,
    l4_partial: bool,
) {
    let mut ip = Ipv6Packet::new_unchecked(&mut *ip_buf);
    let (old_src, old_dst) = (ip.src_addr(), ip.dst_addr());
    ip.set_src_addr(rw.src_addr);
    ip.set_dst_addr(rw.dst_addr);
    ip.set_hop_limit(ip.hop_limit().saturating_sub(1));
    let end = ip.total_len();
    if let Some(l4) = ip_buf.get_mut(l4_offset..end) {
        let addrs = Delta::NONE.addr_v6(old_src, rw.src_addr).addr_v6(old_dst, rw.dst_addr);
        rewrite_l4(l4, protocol, addrs, rw, l4_partial);
    }
}

/// [`rewrite_ipv6`] of a TCP (`tcp`) or UDP packet `ip_buf` whose transport header follows
/// the fixed header (no extension header) and is whole, with a full transport checksum (not
/// partial): the same bytes, written at fixed offsets, as [`rewrite_ipv4_plain`] writes
/// IPv4's — no header checksum here, and the pseudo-header's addresses are eight 32-bit
/// words ([RFC 8200] § 8.1), summed as they lie in the packet ([RFC 1071] § 2(B)). The lean
/// established path's IPv6 rewrite, and the general path's for such a packet. The caller
/// checked Hop Limit > 1.
///
/// # Panics
/// If `ip_buf` is shorter than the headers (60 bytes for TCP, 48 for UDP).
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
/// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
#[inline(always)]
pub fn rewrite_ipv6_plain(ip_buf: &mut [u8], tcp: bool, rw: &Rewrite<Ipv6Addr>) {
    if tcp {
        let b: &mut [u8; 60] = ip_buf.first_chunk_mut().expect("a whole TCP header");
        rewrite_ipv6_plain_in(b, 56, |l4, check| l4.apply(check), rw);
    } else {
        let b: &mut [u8; 48] = ip_buf.first_chunk_mut().expect("a whole UDP header");
        rewrite_ipv6_plain_in(b, 46, |l4, check| l4.apply_udp(check), rw);
    }
}

/// [`rewrite_ipv6_plain`] of the `L` bytes of IPv6 and transport header `b` whose transport
/// checksum lies at `at` and takes its change by `apply`.
#[inline(always)]
fn rewrite_ipv6_plain_in<const L: usize>(
    b: &mut [u8; L],
    at: usize,
    apply: impl Fn(Delta, u16) -> u16,
    rw: &Rewrite<Ipv6Addr>,
) {
    let word128 = |at: usize| u128::from_ne_bytes(b[at..at + 16].try_into().expect("16 bytes"));
    let (src, dst) = (rw.src_addr.octets(), rw.dst_addr.octets());
    // The two ports as they lie in the header: both in network order, source first.
    let ports = ((u32::from(rw.src_port) << 16) | u32::from(rw.dst_port)).to_be();
    let old_ports = u32::from_ne_bytes([b[40], b[41], b[42], b[43]]);
    let l4 = Delta::NONE
        .words128(word128(8), u128::from_ne_bytes(src))
        .words128(word128(24), u128::from_ne_bytes(dst))
        .words32([(old_ports, ports)]);
    b[7] -= 1;
    b[8..24].copy_from_slice(&src);
    b[24..40].copy_from_slice(&dst);
    b[40..44].copy_from_slice(&ports.to_ne_bytes());
    let check = apply(l4, u16::from_ne_bytes([b[at], b[at + 1]]));
    b[at..at + 2].copy_from_slice(&check.to_ne_bytes());
}

/// The transport part of a rewrite, for either family: ports, and the checksum for the
/// address changes `addrs` (the pseudo-header's) and the port changes (or in full with
/// `l4_partial`; SCTP's CRC32c always in full).
#[inline]
fn rewrite_l4<A: PseudoHeaderAddr>(l4: &mut [u8], proto: IpProtocol, addrs: Delta, rw: &Rewrite<A>, l4_partial: bool) {
    match proto {
        IpProtocol::Tcp => {
            let mut t = TcpPacket::new_unchecked(l4);
            let (sp, dp) = (t.src_port(), t.dst_port());
            t.set_src_port(rw.src_port);
            t.set_dst_port(rw.dst_port);
            if l4_partial {
                t.fill_checksum(rw.src_addr, rw.dst_addr);
            } else {
                t.set_checksum(addrs.word(sp, rw.src_port).word(dp, rw.dst_port).apply(t.checksum()));
            }
        }
        IpProtocol::Udp => {
            let mut u = UdpPacket::new_unchecked(l4);
            let (sp, dp) = (u.src_port(), u.dst_port());
            u.set_src_port(rw.src_port);
            u.set_dst_port(rw.dst_port);
            if l4_partial {
                u.fill_checksum(rw.src_addr, rw.dst_addr);
            } else {
                u.set_checksum(addrs.word(sp, rw.src_port).word(dp, rw.dst_port).apply_udp(u.checksum()));
            }
        }
        IpProtocol::Sctp => {
            let mut p = SctpPacket::new_unchecked(l4);
            p.set_src_port(rw.src_port);
            p.set_dst_port(rw.dst_port);
            p.fill_checksum();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packet(proto: u8, payload_len: usize, ttl: u8) -> Vec<u8> {
        let l4_len = if proto == 6 { 20 } else { 8 } + payload_len;
        let mut b = vec![0u8; 20 + l4_len];
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
            ip.fill_header(
                Ipv4Addr::new(198, 51, 100, 10),
                Ipv4Addr::new(203, 0, 113, 10),
                IpProtocol::from(proto),
                l4_len as u16,
                ttl,
            );
        }
        for (i, x) in b[20..].iter_mut().enumerate() {
            *x = (i * 7 + 3) as u8;
        }
        if proto == 6 {
            let mut t = TcpPacket::new_unchecked(&mut b[20..]);
            t.set_header_len(20);
            t.set_src_port(40000);
            t.set_dst_port(80);
            t.fill_checksum(Ipv4Addr::new(198, 51, 100, 10), Ipv4Addr::new(203, 0, 113, 10));
        } else {
            let mut u = UdpPacket::new_unchecked(&mut b[20..]);
            u.set_src_port(40000);
            u.set_dst_port(7);
            u.set_len(l4_len as u16);
            u.fill_checksum(Ipv4Addr::new(198, 51, 100, 10), Ipv4Addr::new(203, 0, 113, 10));
        }
        b
    }

    proptest! {
        #[test]
        fn plain_equals_general(tcp in any::<bool>(), len in 0usize..64, ttl in 2u8..=255, zero_udp in any::<bool>(),
                                s in any::<u32>(), d in any::<u32>(), sp in any::<u16>(), dp in any::<u16>()) {
            let proto = if tcp { 6 } else { 17 };
            let mut b = packet(proto, len, ttl);
            if !tcp && zero_udp {
                b[26] = 0;
                b[27] = 0;
            }
            let rw = Rewrite { src_addr: s.into(), src_port: sp, dst_addr: d.into(), dst_port: dp };
            let mut general = b.clone();
            rewrite_ipv4(&mut general, &rw, false);
            rewrite_ipv4_plain(&mut b, tcp, &rw);
            prop_assert_eq!(b, general);
        }

        #[test]
        fn incremental_equals_full(tcp in any::<bool>(), len in 0usize..64, ttl in 2u8..=255,
                                   s in any::<u32>(), d in any::<u32>(), sp in any::<u16>(), dp in any::<u16>()) {
            let proto = if tcp { 6 } else { 17 };
            let mut b = packet(proto, len, ttl);
            let rw = Rewrite { src_addr: s.into(), src_port: sp, dst_addr: d.into(), dst_port: dp };
            rewrite_ipv4(&mut b, &rw, false);
            let ip = Ipv4Packet::new_checked(&b[..]).unwrap();
            prop_assert!(ip.verify_checksum());
            prop_assert_eq!(ip.hop_limit(), ttl - 1);
            prop_assert_eq!(ip.src_addr(), Ipv4Addr::from(s));
            if tcp {
                let t = TcpPacket::new_checked(ip.payload()).unwrap();
                prop_assert!(t.verify_checksum(rw.src_addr, rw.dst_addr));
                prop_assert_eq!((t.src_port(), t.dst_port()), (sp, dp));
            } else {
                let u = UdpPacket::new_checked(ip.payload()).unwrap();
                prop_assert!(u.checksum() != 0);
                prop_assert!(u.verify_checksum(rw.src_addr, rw.dst_addr));
            }
        }
    }

    /// An IPv6 TCP/UDP packet 2001:db8:100::10 → 2001:db8:203::10 with a Destination Options
    /// header (8 bytes) before the transport header.
    fn packet6(tcp: bool, payload_len: usize, hop_limit: u8) -> Vec<u8> {
        let (src, dst): (Ipv6Addr, Ipv6Addr) =
            ("2001:db8:100::10".parse().unwrap(), "2001:db8:203::10".parse().unwrap());
        let l4_len = if tcp { 20 } else { 8 } + payload_len;
        let mut b = vec![0u8; 40 + 8 + l4_len];
        Ipv6Packet::new_unchecked(&mut b[..]).fill_header(src, dst, 60, (8 + l4_len) as u16, hop_limit);
        b[40..48].copy_from_slice(&[if tcp { 6 } else { 17 }, 0, 1, 4, 0, 0, 0, 0]);
        for (i, x) in b[48..].iter_mut().enumerate() {
            *x = (i * 7 + 3) as u8;
        }
        if tcp {
            let mut t = TcpPacket::new_unchecked(&mut b[48..]);
            t.set_header_len(20);
            t.fill_checksum(src, dst);
        } else {
            let mut u = UdpPacket::new_unchecked(&mut b[48..]);
            u.set_len(l4_len as u16);
            u.fill_checksum(src, dst);
        }
        b
    }

    proptest! {
        #[test]
        fn incremental_equals_full_v6(tcp in any::<bool>(), len in 0usize..64, hop_limit in 2u8..=255,
                                      s in any::<u128>(), d in any::<u128>(), sp in any::<u16>(), dp in any::<u16>()) {
            let mut b = packet6(tcp, len, hop_limit);
            let rw = Rewrite { src_addr: Ipv6Addr::from(s), src_port: sp, dst_addr: Ipv6Addr::from(d), dst_port: dp };
            let proto = if tcp { IpProtocol::Tcp } else { IpProtocol::Udp };
            let mut full = b.clone();
            rewrite_ipv6(&mut b, 48, proto, &rw, false);
            rewrite_ipv6(&mut full, 48, proto, &rw, true);
            prop_assert_eq!(&b, &full, "incremental and full recomputation agree");
            let ip = Ipv6Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(ip.hop_limit(), hop_limit - 1);
            prop_assert_eq!((ip.src_addr(), ip.dst_addr()), (rw.src_addr, rw.dst_addr));
            if tcp {
                let t = TcpPacket::new_checked(&b[48..]).unwrap();
                prop_assert!(t.verify_checksum(rw.src_addr, rw.dst_addr));
                prop_assert_eq!((t.src_port(), t.dst_port()), (sp, dp));
            } else {
                let u = UdpPacket::new_checked(&b[48..]).unwrap();
                prop_assert!(u.verify_checksum(rw.src_addr, rw.dst_addr));
                prop_assert_eq!((u.src_port(), u.dst_port()), (sp, dp));
            }
        }
    }

    proptest! {
        /// The fixed-offset IPv6 rewrite writes what the general one writes, for TCP and UDP
        /// (a zero UDP checksum included) right after the fixed header.
        #[test]
        fn plain_equals_general_v6(tcp in any::<bool>(), len in 0usize..64, hop_limit in 2u8..=255,
                                   zero_udp in any::<bool>(), s in any::<u128>(), d in any::<u128>(),
                                   sp in any::<u16>(), dp in any::<u16>()) {
            // `packet6` without its Destination Options header: the transport checksum
            // (whose pseudo-header holds the upper-layer length and protocol) stays right.
            let mut b = packet6(tcp, len, hop_limit);
            let payload = u16::from_be_bytes([b[4], b[5]]) - 8;
            b[4..6].copy_from_slice(&payload.to_be_bytes());
            b[6] = b[40];
            b.drain(40..48);
            if !tcp && zero_udp {
                b[46] = 0;
                b[47] = 0;
            }
            let rw = Rewrite { src_addr: Ipv6Addr::from(s), src_port: sp, dst_addr: Ipv6Addr::from(d), dst_port: dp };
            let proto = if tcp { IpProtocol::Tcp } else { IpProtocol::Udp };
            let mut general = b.clone();
            rewrite_ipv6(&mut general, 40, proto, &rw, false);
            rewrite_ipv6_plain(&mut b, tcp, &rw);
            prop_assert_eq!(b, general);
        }
    }

    #[test]
    fn sctp_ports_rewritten_and_crc_recomputed() {
        let (client, vip) = (Ipv4Addr::new(198, 51, 100, 10), Ipv4Addr::new(203, 0, 113, 10));
        let mut b = vec![0u8; 20 + 12 + 20];
        Ipv4Packet::new_unchecked(&mut b[..]).fill_header(client, vip, IpProtocol::Sctp, 32, 64);
        b[32..36].copy_from_slice(&[1, 0, 0, 20]); // INIT
        {
            let mut p = SctpPacket::new_unchecked(&mut b[20..]);
            p.set_src_port(40000);
            p.set_dst_port(5060);
            p.fill_checksum();
        }
        let rw = Rewrite {
            src_addr: Ipv4Addr::new(10, 70, 0, 1),
            src_port: 1024,
            dst_addr: Ipv4Addr::new(10, 70, 0, 31),
            dst_port: 15060,
        };
        rewrite_ipv4(&mut b, &rw, false);
        let ip = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (rw.src_addr, rw.dst_addr, 63));
        let p = SctpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (1024, 15060));
        assert!(p.verify_checksum());
    }

    #[test]
    fn header_only_rewrite_leaves_the_payload() {
        let mut b = packet(17, 16, 9);
        let payload = b[20..].to_vec();
        let (src, dst) = (Ipv4Addr::new(10, 70, 0, 1), Ipv4Addr::new(10, 70, 0, 21));
        rewrite_ipv4_header(&mut b, src, dst);
        let ip = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (src, dst, 8));
        assert_eq!(ip.payload(), &payload[..]);
    }

    #[test]
    fn udp_without_checksum_stays_without() {
        let mut b = packet(17, 4, 64);
        UdpPacket::new_unchecked(&mut b[20..]).set_checksum(0);
        let rw = Rewrite {
            src_addr: Ipv4Addr::new(10, 70, 0, 1),
            src_port: 1024,
            dst_addr: Ipv4Addr::new(10, 70, 0, 21),
            dst_port: 7007,
        };
        rewrite_ipv4(&mut b, &rw, false);
        assert_eq!(UdpPacket::new_unchecked(&b[20..]).checksum(), 0);
    }
}
