//! Zero-copy views over the headers torii parses and rewrites: Ethernet II, 802.1Q VLAN tags,
//! ARP (Ethernet/IPv4), IPv4, IPv6 (with its extension headers), ICMPv4 (with the datagram
//! an error quotes), ICMPv6, Neighbor Discovery, TCP, UDP and SCTP (CRC32c), plus the
//! Internet checksum ([RFC 1071]) with the IPv4 and IPv6 pseudo-headers and its incremental
//! update ([RFC 1624]).
//!
//! # Contract
//!
//! Every header type is a view `XxxPacket<T: AsRef<[u8]>>` over a borrowed (or owned) buffer, in
//! the manner of smoltcp's `wire` module:
//!
//! - `new_unchecked(buffer)` wraps the buffer and trusts it; accessors may then panic if the
//!   buffer is too short.
//! - `new_checked(buffer)` validates the length and the fields that later accessors rely on
//!   (header length, total length, …). **After `new_checked` succeeds, no accessor and no setter
//!   panics**, whatever the bytes are and whatever the setters later write: variable-length parts
//!   (`payload`, `options`, …) are clamped to the buffer rather than indexed blindly.
//! - Getters live under `T: AsRef<[u8]>`, setters under `T: AsRef<[u8]> + AsMut<[u8]>`.
//! - Fields are read and written by byte offset (`u16::from_be_bytes` on fixed-size slices), never
//!   by casting the buffer to a `#[repr(C)]` struct: packet buffers carry no alignment guarantee,
//!   and a reference to an unaligned multi-byte field is undefined behaviour (Firecracker's
//!   `dumbo/pdu` makes the same choice). Each file keeps its offsets in a private `field` module
//!   of [`Field`] ranges.
//! - Protocol numbers are total enums (`Unknown(_)` variant), so conversion never fails.
//! - Nothing here allocates, performs I/O or uses `unsafe`.
//!
//! [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
//! [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624

#![forbid(unsafe_code)]

use core::fmt;

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ndp;
pub mod sctp;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use arp::{ArpOperation, ArpPacket};
pub use ethernet::{EtherType, EthernetFrame, MacAddr};
pub use icmpv4::{Icmpv4Packet, Icmpv4Type};
pub use icmpv6::{Icmpv6Packet, Icmpv6Type};
pub use ipv4::{IpProtocol, Ipv4Packet};
pub use ipv6::Ipv6Packet;
pub use ndp::NdpPacket;
pub use sctp::{SctpChunkType, SctpPacket};
pub use tcp::{TcpFlags, TcpPacket};
pub use udp::UdpPacket;
pub use vlan::VlanTag;

/// A fixed-size header field: the byte range it occupies, counted from the start of its header.
pub type Field = core::ops::Range<usize>;

/// The part of a header from a fixed offset to the end of the buffer.
pub type Rest = core::ops::RangeFrom<usize>;

/// Why `new_checked` refused a buffer. `Copy`, no allocation: the data path counts these as drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// The buffer is shorter than the header, or than the length the header itself claims
    /// (IPv4 total length, UDP length, TCP data offset).
    Truncated,
    /// The buffer is long enough but a field is invalid or unsupported: wrong IP version, an IHL
    /// or data offset below the minimum, a length field smaller than the header, an ARP packet
    /// that is not Ethernet/IPv4.
    Malformed,
}

/// Copies the `N` bytes of `field` out of `data`, for `from_be_bytes`. `N` and the field's length
/// are both constants, so the length check compiles away; only the bounds check remains.
#[inline]
fn read<const N: usize>(data: &[u8], field: Field) -> [u8; N] {
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(&data[field]);
    bytes
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated => f.write_str("packet truncated: buffer shorter than the header says"),
            ParseError::Malformed => f.write_str("malformed header: a field has an invalid or unsupported value"),
        }
    }
}

impl std::error::Error for ParseError {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    /// Reads every field and variable-length part; must never panic on a checked view.
    fn read_all_ipv4<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) {
        let _ = (p.version(), p.header_len(), p.dscp_ecn(), p.total_len(), p.ident(), p.dont_frag());
        let _ = (p.more_frags(), p.frag_offset(), p.is_fragment(), p.hop_limit(), p.next_header());
        let _ = (p.checksum(), p.src_addr(), p.dst_addr(), p.verify_checksum(), p.options(), p.payload());
    }

    fn read_all_tcp<T: AsRef<[u8]>>(p: &TcpPacket<T>, a: Ipv4Addr) {
        let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number(), p.header_len(), p.flags());
        let _ = (p.window_len(), p.checksum(), p.urgent_at(), p.options(), p.payload(), p.segment_len());
        let _ = p.verify_checksum(a, a);
    }

    fn read_all_udp<T: AsRef<[u8]>>(p: &UdpPacket<T>, a: Ipv4Addr) {
        let _ = (p.src_port(), p.dst_port(), p.len(), p.checksum(), p.payload(), p.verify_checksum(a, a));
    }

    proptest! {
        /// The module contract: `new_checked` never panics, and on a view it accepted no getter
        /// or setter panics, whatever the setters write.
        #[test]
        fn checked_views_never_panic(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..96),
            v8 in any::<u8>(),
            v16 in any::<u16>(),
            v32 in any::<u32>(),
            shape in 0..6u8,
        ) {
            let addr = Ipv4Addr::from(v32);
            let addr6 = std::net::Ipv6Addr::from(u128::from(v32) << 64 | u128::from(v16));
            let len = usize::from(v8);
            // Random bytes rarely pass the IPv4/ARP/UDP/TCP checks: make one of them plausible.
            let n = bytes.len();
            let short = usize::from(v16 % 8).min(n);
            match shape {
                0 if n >= 20 => {
                    bytes[0] = 0x40 | (5 + v8 % 11);
                    bytes[2..4].copy_from_slice(&((n - short) as u16).to_be_bytes());
                }
                1 if n >= 6 => bytes[..6].copy_from_slice(&[0, 1, 8, 0, 6, 4]),
                2 if n >= 8 => bytes[4..6].copy_from_slice(&((n - short) as u16).to_be_bytes()),
                3 if n >= 20 => bytes[12] = (5 + v8 % 11) << 4,
                4 if n >= 40 => {
                    bytes[0] = 0x60;
                    bytes[4..6].copy_from_slice(&((n - 40 - short.min(n - 40)) as u16).to_be_bytes());
                    bytes[6] = [0, 43, 44, 51, 60, 6, 17, 58][usize::from(v8 % 8)];
                }
                5 if n >= 24 => {
                    bytes[0] = 135 + v8 % 2;
                    bytes[1] = 0;
                    bytes[8] = 0x20;
                }
                _ => {}
            }
            if let Ok(mut p) = EthernetFrame::new_checked(&mut bytes[..]) {
                let _ = (p.dst_addr(), p.src_addr(), p.ethertype(), p.payload().len());
                p.set_ethertype(EtherType::from(v16));
                let _ = p.payload_mut().len();
            }
            if let Ok(mut p) = ArpPacket::new_checked(&mut bytes[..]) {
                let _ = (p.operation(), p.sender_hardware_addr(), p.sender_protocol_addr());
                let _ = (p.target_hardware_addr(), p.target_protocol_addr());
                p.set_operation(ArpOperation::from(v16));
                p.fill_header();
            }
            if let Ok(mut p) = Ipv4Packet::new_checked(&mut bytes[..]) {
                read_all_ipv4(&p);
                p.set_header_len(len);
                p.set_total_len(v16);
                p.set_frag_offset(v16);
                read_all_ipv4(&p);
                let _ = (p.payload_mut().len(), p.header_and_payload_mut());
                p.fill_checksum();
                p.fill_header(addr, addr, IpProtocol::from(v8), v16, v8);
                read_all_ipv4(&p);
            }
            if let Ok(mut p) = Icmpv4Packet::new_checked(&mut bytes[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident(), p.echo_seq_no());
                let _ = (p.rest_of_header(), p.next_hop_mtu(), p.data(), p.verify_checksum());
                p.set_rest_of_header(v32);
                p.fill_checksum();
                prop_assert!(p.verify_checksum());
                let _ = p.data_mut().len();
            }
            if let Ok(mut p) = Ipv6Packet::new_checked(&mut bytes[..]) {
                let _ = (p.version(), p.traffic_class(), p.flow_label(), p.payload_len(), p.next_header());
                let _ = (p.hop_limit(), p.src_addr(), p.dst_addr(), p.payload(), p.upper_layer());
                p.set_payload_len(v16);
                p.set_next_header(v8);
                let _ = (p.payload().len(), p.upper_layer(), p.payload_mut().len());
            }
            if let Ok(p) = Icmpv6Packet::new_checked(&bytes[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.word(), p.data(), p.verify_checksum(addr6, addr6));
            }
            if let Ok(mut p) = NdpPacket::new_checked(&mut bytes[..]) {
                let _ = (p.msg_type(), p.flags(), p.target_addr(), p.validate(v8, addr6, addr6));
                let _ = (p.link_layer_option(1), p.link_layer_option(2));
                p.set_link_layer_option(2, MacAddr([v8; 6]));
                let _ = p.link_layer_option(v8);
            }
            if let Ok(mut p) = TcpPacket::new_checked(&mut bytes[..]) {
                read_all_tcp(&p, addr);
                p.set_header_len(len);
                p.set_flags(TcpFlags(v8));
                read_all_tcp(&p, addr);
                let _ = (p.options_mut().len(), p.payload_mut().len());
                p.fill_checksum(addr, addr);
                prop_assert!(p.verify_checksum(addr, addr));
            }
            if let Ok(mut p) = UdpPacket::new_checked(&mut bytes[..]) {
                read_all_udp(&p, addr);
                p.set_len(v16);
                read_all_udp(&p, addr);
                let _ = p.payload_mut().len();
                p.fill_checksum(addr, addr);
                prop_assert!(p.verify_checksum(addr, addr));
            }
        }
    }

    #[test]
    fn parse_error_display() {
        assert_eq!(ParseError::Truncated.to_string(), "packet truncated: buffer shorter than the header says");
        assert_eq!(ParseError::Malformed.to_string(), "malformed header: a field has an invalid or unsupported value");
    }
}
