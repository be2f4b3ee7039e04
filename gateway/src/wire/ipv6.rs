//! IPv6 headers ([RFC 8200] § 3) and the walk over extension headers to the upper layer
//! ([RFC 8200] § 4).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! |                     Source Address (128 bits)                 |
//! |                  Destination Address (128 bits)               |
//! ```
//!
//! `new_checked` accepts a buffer of at least 40 bytes with version 6 and
//! `40 + Payload Length <= buffer length`. The buffer may be longer (Ethernet padding);
//! [`Ipv6Packet::payload`] stops at Payload Length. Jumbograms ([RFC 2675], Payload Length 0
//! with a Hop-by-Hop Jumbo option) are not supported: Payload Length 0 is an empty payload.
//! After `new_checked` succeeds no accessor or setter panics: Payload Length is re-read and
//! clamped on every access.
//!
//! [`Ipv6Packet::upper_layer`] walks the extension headers ([RFC 8200] § 4.1 order): Hop-by-Hop
//! Options (only directly after the IPv6 header, § 4.3), Routing (§ 4.4), Destination Options
//! (§ 4.6), Authentication Header ([RFC 4302] § 2.2, whose length counts 4-byte units) and the
//! Fragment header (§ 4.5), whose fields it reports in [`Ipv6Fragment`] for fragment handling;
//! a fragment with a non-zero offset ends the walk, because its upper-layer header is in the
//! first fragment.
//!
//! [RFC 2675]: https://www.rfc-editor.org/rfc/rfc2675
//! [RFC 4302]: https://www.rfc-editor.org/rfc/rfc4302#section-2.2
//! [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200

use core::ops::Range;
use std::net::Ipv6Addr;

use super::ethernet::MacAddr;
use super::ipv4::IpProtocol;
use super::{read, ParseError};

mod field {
    use crate::wire::Field;

    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// Next Header value of the Hop-by-Hop Options header ([RFC 8200] § 4.3).
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.3
pub const NEXT_HEADER_HOP_BY_HOP: u8 = 0;
/// Next Header value of the Routing header ([RFC 8200] § 4.4).
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.4
pub const NEXT_HEADER_ROUTING: u8 = 43;
/// Next Header value of the Fragment header ([RFC 8200] § 4.5).
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5
pub const NEXT_HEADER_FRAGMENT: u8 = 44;
/// Next Header value of the Authentication Header ([RFC 4302] § 2).
///
/// [RFC 4302]: https://www.rfc-editor.org/rfc/rfc4302#section-2
pub const NEXT_HEADER_AUTH: u8 = 51;
/// Next Header value "No Next Header" ([RFC 8200] § 4.7).
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.7
pub const NEXT_HEADER_NONE: u8 = 59;
/// Next Header value of the Destination Options header ([RFC 8200] § 4.6).
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.6
pub const NEXT_HEADER_DST_OPTIONS: u8 = 60;

/// Most extension headers [`Ipv6Packet::upper_layer`] walks before giving up
/// ([`ParseError::Malformed`]). [RFC 8200] § 4.1 allows each at most once (Destination Options
/// twice), so a legitimate chain is shorter; the bound keeps the walk's cost fixed.
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.1
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// The all-nodes link-local multicast address `ff02::1` ([RFC 4291] § 2.7.1): the destination
/// of unsolicited Neighbor Advertisements ([RFC 4861] § 7.2.4).
///
/// [RFC 4291]: https://www.rfc-editor.org/rfc/rfc4291#section-2.7.1
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-7.2.4
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The solicited-node multicast address of `addr`, `ff02::1:ffXX:XXXX` with the low 24 bits of
/// `addr` ([RFC 4291] § 2.7.1): where Neighbor Solicitations for `addr` are sent
/// ([RFC 4861] § 7.2.2).
///
/// [RFC 4291]: https://www.rfc-editor.org/rfc/rfc4291#section-2.7.1
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-7.2.2
#[inline]
pub const fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from_bits(0xff02_0000_0000_0000_0000_0001_ff00_0000 | (addr.to_bits() & 0x00ff_ffff))
}

/// The Ethernet multicast address an IPv6 multicast `addr` maps to: `33:33` and the last four
/// bytes of `addr` ([RFC 2464] § 7).
///
/// [RFC 2464]: https://www.rfc-editor.org/rfc/rfc2464#section-7
#[inline]
pub const fn multicast_mac(addr: Ipv6Addr) -> MacAddr {
    let o = addr.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The Fragment header's fields ([RFC 8200] § 4.5).
///
/// ```text
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Next Header  |   Reserved    |      Fragment Offset    |Res|M|
/// |                         Identification                        |
/// ```
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Fragment {
    /// Offset of the Fragment header from the start of the IPv6 header, bytes.
    pub header_offset: usize,
    /// The Next Header of the fragmentable part (the upper-layer protocol, in the first
    /// fragment, unless more extension headers follow).
    pub next_header: u8,
    /// Fragment Offset, in bytes (the field counts 8-byte units).
    pub offset: u16,
    /// The M flag: more fragments follow.
    pub more_frags: bool,
    /// Identification.
    pub ident: u32,
}

impl Ipv6Fragment {
    /// Length of the Fragment header in bytes.
    pub const LEN: usize = 8;

    /// Whether this is the first fragment (offset 0), which carries the upper-layer header.
    #[inline]
    pub const fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// Where the upper-layer header of an IPv6 packet is: the result of
/// [`Ipv6Packet::upper_layer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UpperLayer {
    /// The upper-layer protocol (the last Next Header of the chain). For a non-first fragment,
    /// the Fragment header's Next Header.
    pub protocol: IpProtocol,
    /// Offset of the upper-layer header (or, for a non-first fragment, of the fragment's data)
    /// from the start of the IPv6 header, bytes; at most `40 + Payload Length`.
    pub offset: usize,
    /// The Fragment header, when the packet is a fragment.
    pub fragment: Option<Ipv6Fragment>,
}

/// A read/write view of an IPv6 packet: fixed header, payload up to Payload Length, and
/// whatever link-layer padding follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Length in bytes of the fixed header.
    pub const HEADER_LEN: usize = field::DST_ADDR.end;

    /// Wraps `buffer` without checking it; accessors of fixed fields panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps `buffer` after checking the version and the length ([RFC 8200] § 3).
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if the buffer is shorter than 40 bytes or than
    ///   `40 + Payload Length`;
    /// - [`ParseError::Malformed`] if the version is not 6.
    ///
    /// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-3
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let packet = Ipv6Packet { buffer };
        let len = packet.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        if packet.version() != 6 {
            return Err(ParseError::Malformed);
        }
        if Self::HEADER_LEN + usize::from(packet.payload_len()) > len {
            return Err(ParseError::Truncated);
        }
        Ok(packet)
    }

    /// Returns the underlying buffer (including any padding after the payload).
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn first_word(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::VER_TC_FLOW))
    }

    /// The Version field (6 after `new_checked`).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.first_word() >> 28) as u8
    }

    /// The Traffic Class (DSCP and ECN, [RFC 2474], [RFC 3168]).
    ///
    /// [RFC 2474]: https://www.rfc-editor.org/rfc/rfc2474
    /// [RFC 3168]: https://www.rfc-editor.org/rfc/rfc3168
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// The 20-bit Flow Label ([RFC 6437]).
    ///
    /// [RFC 6437]: https://www.rfc-editor.org/rfc/rfc6437
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    /// Payload Length: bytes after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::LENGTH))
    }

    /// The Next Header field of the fixed header (the first extension header or the upper
    /// layer): see [`Self::upper_layer`].
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The Hop Limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(read::<16>(self.buffer.as_ref(), field::SRC_ADDR))
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(read::<16>(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// The end of the packet: `40 + Payload Length`, clamped to the buffer.
    #[inline]
    pub fn total_len(&self) -> usize {
        (Self::HEADER_LEN + usize::from(self.payload_len())).min(self.buffer.as_ref().len())
    }

    #[inline]
    fn payload_range(&self) -> Range<usize> {
        let end = self.total_len();
        Self::HEADER_LEN.min(end)..end
    }

    /// The payload (extension headers and upper layer), up to Payload Length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let range = self.payload_range();
        &self.buffer.as_ref()[range]
    }

    /// Walks the extension headers to the upper-layer header (see the module documentation).
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if an extension header runs past Payload Length;
    /// - [`ParseError::Malformed`] for a Hop-by-Hop header anywhere but first ([RFC 8200]
    ///   § 4.3: "MUST immediately follow the IPv6 header"), a second Fragment header, or a
    ///   chain longer than [`MAX_EXTENSION_HEADERS`].
    ///
    /// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.3
    #[inline]
    pub fn upper_layer(&self) -> Result<UpperLayer, ParseError> {
        let next = self.next_header();
        // TCP or UDP right after the fixed header (no extension header, the common case):
        // the walk's first step, which reads nothing more, without the call.
        let protocol = IpProtocol::from(next);
        if matches!(protocol, IpProtocol::Tcp | IpProtocol::Udp) {
            return Ok(UpperLayer { protocol, offset: Self::HEADER_LEN, fragment: None });
        }
        walk_extension_headers(self.buffer.as_ref(), next, self.total_len())
    }
}

/// The walk of [`Ipv6Packet::upper_layer`] over `data` (an IPv6 packet from its fixed header)
/// whose fixed header's Next Header is `next`, reading nothing at or past `end` (at most
/// `data.len()`: the packet's end, or for a quoted packet the end of what the quote holds).
///
/// # Errors
/// As [`Ipv6Packet::upper_layer`]; [`ParseError::Truncated`] also when `end` cuts a header.
pub(crate) fn walk_extension_headers(data: &[u8], next: u8, end: usize) -> Result<UpperLayer, ParseError> {
    let end = end.min(data.len());
    let mut next = next;
    let mut offset = Ipv6Packet::<&[u8]>::HEADER_LEN;
    let mut fragment: Option<Ipv6Fragment> = None;
    for n in 0..=MAX_EXTENSION_HEADERS {
        let len = match next {
            NEXT_HEADER_HOP_BY_HOP if n > 0 => return Err(ParseError::Malformed),
            NEXT_HEADER_HOP_BY_HOP | NEXT_HEADER_ROUTING | NEXT_HEADER_DST_OPTIONS | NEXT_HEADER_AUTH => {
                if offset + 2 > end {
                    return Err(ParseError::Truncated);
                }
                let units = usize::from(data[offset + 1]);
                // Hdr Ext Len counts 8-byte units after the first 8 bytes; AH's Payload Len
                // counts 4-byte units minus 2 (RFC 4302 § 2.2).
                if next == NEXT_HEADER_AUTH {
                    (units + 2) * 4
                } else {
                    (units + 1) * 8
                }
            }
            NEXT_HEADER_FRAGMENT => {
                if fragment.is_some() {
                    return Err(ParseError::Malformed);
                }
                if offset + Ipv6Fragment::LEN > end {
                    return Err(ParseError::Truncated);
                }
                let word = u16::from_be_bytes([data[offset + 2], data[offset + 3]]);
                let frag = Ipv6Fragment {
                    header_offset: offset,
                    next_header: data[offset],
                    offset: word & !0x7,
                    more_frags: word & 1 != 0,
                    ident: u32::from_be_bytes(read(data, offset + 4..offset + 8)),
                };
                fragment = Some(frag);
                if !frag.is_first() {
                    let protocol = IpProtocol::from(frag.next_header);
                    return Ok(UpperLayer { protocol, offset: offset + Ipv6Fragment::LEN, fragment });
                }
                Ipv6Fragment::LEN
            }
            upper => return Ok(UpperLayer { protocol: IpProtocol::from(upper), offset, fragment }),
        };
        if offset + len > end {
            return Err(ParseError::Truncated);
        }
        next = data[offset];
        offset += len;
    }
    Err(ParseError::Malformed)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets Version, Traffic Class and Flow Label at once (only the low 4 bits of `version`
    /// and 20 bits of `flow_label` are used).
    #[inline]
    pub fn set_version_tc_flow(&mut self, version: u8, traffic_class: u8, flow_label: u32) {
        let word = (u32::from(version & 0x0f) << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&word.to_be_bytes());
    }

    /// Sets Payload Length (bytes after the fixed header).
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the Next Header field of the fixed header.
    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = value;
    }

    /// Sets the Hop Limit.
    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    /// Sets the source address (IPv6 has no header checksum; upper-layer checksums are not
    /// updated).
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address (upper-layer checksums are not updated).
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// The payload, mutable (up to Payload Length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.payload_range();
        &mut self.buffer.as_mut()[range]
    }

    /// Writes a fresh header for a packet the gateway originates (an ICMPv6 message, a TCP
    /// reset, a Neighbor Advertisement): version 6, Traffic Class 0, Flow Label 0, the given
    /// Payload Length, Next Header, Hop Limit and addresses. The payload is not touched.
    pub fn fill_header(&mut self, src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload_len: u16, hop_limit: u8) {
        self.set_version_tc_flow(6, 0, 0);
        self.set_payload_len(payload_len);
        self.set_next_header(next_header);
        self.set_hop_limit(hop_limit);
        self.set_src_addr(src);
        self.set_dst_addr(dst);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2001:db8::7 → 2001:db8::a, UDP 53000 → 53, "abcd", Hop Limit 64, Traffic Class 0xb8 (EF),
    /// Flow Label 0x12345.
    static PACKET: [u8; 52] = [
        0x6b, 0x81, 0x23, 0x45, // version 6, TC 0xb8, flow label 0x12345
        0x00, 0x0c, 0x11, 0x40, // payload length 12, next header UDP, hop limit 64
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07, // 2001:db8::7
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, // 2001:db8::a
        0xcf, 0x08, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, b'a', b'b', b'c', b'd', // UDP
    ];

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xa);

    /// `PACKET` with the extension headers `ext` (each a complete header whose first byte,
    /// Next Header, this function fills in) between the fixed header and the UDP datagram.
    fn with_extensions(ext: &[(u8, &[u8])]) -> Vec<u8> {
        let mut b = PACKET[..40].to_vec();
        let mut prev = 6; // index of the Next Header byte to fill
        for (kind, header) in ext {
            b[prev] = *kind;
            prev = b.len();
            b.extend_from_slice(header);
        }
        b[prev] = 17;
        b.extend_from_slice(&PACKET[40..]);
        let len = (b.len() - 40) as u16;
        b[4..6].copy_from_slice(&len.to_be_bytes());
        b
    }

    #[test]
    fn deconstruct() {
        let ip = Ipv6Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(ip.version(), 6);
        assert_eq!(ip.traffic_class(), 0xb8);
        assert_eq!(ip.flow_label(), 0x12345);
        assert_eq!(ip.payload_len(), 12);
        assert_eq!(ip.next_header(), 17);
        assert_eq!(ip.hop_limit(), 64);
        assert_eq!(ip.src_addr(), SRC);
        assert_eq!(ip.dst_addr(), DST);
        assert_eq!(ip.total_len(), 52);
        assert_eq!(ip.payload(), &PACKET[40..]);
        assert_eq!(ip.upper_layer(), Ok(UpperLayer { protocol: IpProtocol::Udp, offset: 40, fragment: None }));
        assert_eq!(ip.as_ref(), &PACKET[..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 52];
        let mut ip = Ipv6Packet::new_unchecked(&mut bytes[..]);
        ip.set_version_tc_flow(6, 0xb8, 0x12345);
        ip.set_payload_len(12);
        ip.set_next_header(17);
        ip.set_hop_limit(64);
        ip.set_src_addr(SRC);
        ip.set_dst_addr(DST);
        ip.payload_mut().copy_from_slice(&PACKET[40..]);
        assert_eq!(bytes, PACKET);
        let mut fresh = [0xa5u8; 52];
        Ipv6Packet::new_unchecked(&mut fresh[..]).fill_header(SRC, DST, 17, 12, 64);
        assert_eq!(&fresh[..4], &[0x60, 0, 0, 0]);
        assert_eq!(&fresh[4..40], &PACKET[4..40]);
        assert_eq!(&fresh[40..], &[0xa5; 12]);
    }

    #[test]
    fn payload_stops_at_payload_len() {
        let mut padded = [0u8; 60];
        padded[..52].copy_from_slice(&PACKET);
        let ip = Ipv6Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(ip.payload(), &PACKET[40..]);
    }

    #[test]
    fn rejects_truncated_and_malformed() {
        for len in 0..PACKET.len() {
            assert_eq!(Ipv6Packet::new_checked(&PACKET[..len]), Err(ParseError::Truncated), "len {len}");
        }
        let mut v4 = PACKET;
        v4[0] = 0x45;
        assert_eq!(Ipv6Packet::new_checked(&v4[..]), Err(ParseError::Malformed));
    }

    #[test]
    fn walks_extension_headers() {
        // Hop-by-Hop (8 bytes: PadN), Destination Options (16 bytes), Routing (type 4, 8 bytes).
        let hbh: &[u8] = &[0, 0, 1, 4, 0, 0, 0, 0];
        let dst_opts: &[u8] = &[0, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let routing: &[u8] = &[0, 0, 4, 0, 0, 0, 0, 0];
        let b = with_extensions(&[(0, hbh), (60, dst_opts), (43, routing)]);
        let ip = Ipv6Packet::new_checked(&b[..]).unwrap();
        let upper = ip.upper_layer().unwrap();
        assert_eq!(upper, UpperLayer { protocol: IpProtocol::Udp, offset: 40 + 32, fragment: None });
        assert_eq!(&b[upper.offset..], &PACKET[40..]);
        // Authentication Header: Payload Len 4 → (4 + 2) * 4 = 24 bytes.
        let ah: &[u8] = &[0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let b = with_extensions(&[(51, ah)]);
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer().unwrap().offset, 64);
        // No Next Header: the walk stops there.
        let mut b = PACKET;
        b[6] = NEXT_HEADER_NONE;
        let upper = Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer().unwrap();
        assert_eq!(upper.protocol, IpProtocol::Unknown(59));
    }

    #[test]
    fn fragment_header() {
        // First fragment: offset 0, M set, ident 0xdeadbeef; the upper layer follows.
        let first: &[u8] = &[0, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef];
        let b = with_extensions(&[(44, first)]);
        let upper = Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer().unwrap();
        let frag = Ipv6Fragment { header_offset: 40, next_header: 17, offset: 0, more_frags: true, ident: 0xdead_beef };
        assert_eq!(upper, UpperLayer { protocol: IpProtocol::Udp, offset: 48, fragment: Some(frag) });
        assert!(frag.is_first());
        // A later fragment: offset 1448 bytes (181 units), last; the walk stops at its data.
        let later: &[u8] = &[0, 0, 0x05, 0xa8, 0, 0, 0, 7];
        let b = with_extensions(&[(60, &[0, 0, 1, 4, 0, 0, 0, 0]), (44, later)]);
        let upper = Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer().unwrap();
        let frag = Ipv6Fragment { header_offset: 48, next_header: 17, offset: 1448, more_frags: false, ident: 7 };
        assert_eq!(upper, UpperLayer { protocol: IpProtocol::Udp, offset: 56, fragment: Some(frag) });
        assert!(!frag.is_first());
    }

    #[test]
    fn bad_extension_chains() {
        let hbh: &[u8] = &[0, 0, 1, 4, 0, 0, 0, 0];
        let frag: &[u8] = &[0, 0, 0, 1, 0, 0, 0, 1];
        // Hop-by-Hop after another header.
        let b = with_extensions(&[(60, hbh), (0, hbh)]);
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer(), Err(ParseError::Malformed));
        // Two Fragment headers.
        let b = with_extensions(&[(44, frag), (44, frag)]);
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer(), Err(ParseError::Malformed));
        // Too many headers.
        let chain: Vec<(u8, &[u8])> = (0..=MAX_EXTENSION_HEADERS).map(|_| (60u8, hbh)).collect();
        let b = with_extensions(&chain);
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer(), Err(ParseError::Malformed));
        // A header claiming more bytes than Payload Length holds, cut at each length.
        let b = with_extensions(&[(60, &[0, 3, 1, 4, 0, 0, 0, 0])]);
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer(), Err(ParseError::Truncated));
        let b = with_extensions(&[(44, frag)]);
        for cut in 40..48 {
            let mut short = b[..cut].to_vec();
            short[4..6].copy_from_slice(&((cut - 40) as u16).to_be_bytes());
            let ip = Ipv6Packet::new_checked(&short[..]).unwrap();
            assert_eq!(ip.upper_layer(), Err(ParseError::Truncated), "cut {cut}");
        }
    }

    #[test]
    fn multicast_helpers() {
        let addr: Ipv6Addr = "2001:db8::abcd:1234:5678".parse().unwrap();
        let sn = solicited_node(addr);
        assert_eq!(sn, "ff02::1:ff34:5678".parse::<Ipv6Addr>().unwrap());
        assert_eq!(multicast_mac(sn), MacAddr([0x33, 0x33, 0xff, 0x34, 0x56, 0x78]));
        assert_eq!(multicast_mac(ALL_NODES), MacAddr([0x33, 0x33, 0, 0, 0, 1]));
    }

    #[test]
    fn setters_cannot_make_accessors_panic() {
        let mut bytes = PACKET;
        let mut ip = Ipv6Packet::new_checked(&mut bytes[..]).unwrap();
        for len in [0, 1, 12, 13, 65535] {
            ip.set_payload_len(len);
            for nh in [0, 43, 44, 51, 60, 17] {
                ip.set_next_header(nh);
                let _ = (ip.payload().len(), ip.upper_layer(), ip.total_len());
                let _ = ip.payload_mut().len();
            }
        }
    }
}
