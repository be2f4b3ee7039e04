//! IPv4 headers ([RFC 791] § 3.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP/ECN    |          Total Length         |
//! |         Identification        |Flags|     Fragment Offset     |
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! |                    Options                    |    Padding    |
//! ```
//!
//! `new_checked` accepts a buffer of at least 20 bytes with version 4, IHL ≥ 5 and
//! `IHL * 4 <= Total Length <= buffer length`. The buffer may be longer than Total Length (Ethernet
//! pads short frames to 60 bytes); [`Ipv4Packet::payload`] stops at Total Length. After
//! `new_checked` succeeds no accessor or setter panics: the header length and total length are
//! re-read on every access and clamped to the buffer, so even a setter writing nonsense cannot
//! make a later accessor index out of bounds.
//!
//! [RFC 791]: https://www.rfc-editor.org/rfc/rfc791#section-3.1

use core::ops::Range;
use std::net::Ipv4Addr;

use super::{checksum, read, ParseError};

mod field {
    use crate::wire::Field;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// DF, "don't fragment".
const FLAG_DF: u16 = 0x4000;
/// MF, "more fragments".
const FLAG_MF: u16 = 0x2000;
/// The fragment offset, in units of 8 bytes.
const OFFSET_MASK: u16 = 0x1fff;

/// The IP protocol number (the IPv4 Protocol field, IPv6 Next Header; IANA "Assigned Internet
/// Protocol Numbers"). Total: other numbers are kept in [`IpProtocol::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpProtocol {
    /// ICMP, 1 ([RFC 792](https://www.rfc-editor.org/rfc/rfc792)).
    Icmp,
    /// TCP, 6 ([RFC 9293](https://www.rfc-editor.org/rfc/rfc9293)).
    Tcp,
    /// UDP, 17 ([RFC 768](https://www.rfc-editor.org/rfc/rfc768)).
    Udp,
    /// ICMPv6, 58 ([RFC 4443](https://www.rfc-editor.org/rfc/rfc4443)).
    Icmpv6,
    /// SCTP, 132 ([RFC 9260](https://www.rfc-editor.org/rfc/rfc9260)).
    Sctp,
    /// Any other protocol number.
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    #[inline]
    fn from(value: u8) -> Self {
        match value {
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            58 => IpProtocol::Icmpv6,
            132 => IpProtocol::Sctp,
            other => IpProtocol::Unknown(other),
        }
    }
}

impl From<IpProtocol> for u8 {
    #[inline]
    fn from(value: IpProtocol) -> Self {
        match value {
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Sctp => 132,
            IpProtocol::Unknown(other) => other,
        }
    }
}

/// A read/write view of an IPv4 packet: header, options, payload up to Total Length, and
/// whatever link-layer padding follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Length in bytes of a header without options (IHL = 5).
    pub const HEADER_LEN: usize = field::DST_ADDR.end;

    /// Wraps `buffer` without checking it; accessors of fixed fields panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps `buffer` after checking the header's version and lengths ([RFC 791] § 3.1).
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if the buffer is shorter than 20 bytes or than Total Length;
    /// - [`ParseError::Malformed`] if the version is not 4, IHL is below 5, or Total Length is
    ///   smaller than the header (`IHL * 4`).
    ///
    /// [RFC 791]: https://www.rfc-editor.org/rfc/rfc791#section-3.1
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let packet = Ipv4Packet { buffer };
        let len = packet.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let header_len = packet.header_len();
        let total_len = usize::from(packet.total_len());
        if packet.version() != 4 || header_len < Self::HEADER_LEN || total_len < header_len {
            return Err(ParseError::Malformed);
        }
        if total_len > len {
            return Err(ParseError::Truncated);
        }
        Ok(packet)
    }

    /// Returns the underlying buffer (including any padding after Total Length).
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Version field (4 after `new_checked`).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes, options included: IHL × 4, 20..=60 after `new_checked`.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The DSCP and ECN bits, the former Type of Service byte ([RFC 2474], [RFC 3168]).
    ///
    /// [RFC 2474]: https://www.rfc-editor.org/rfc/rfc2474
    /// [RFC 3168]: https://www.rfc-editor.org/rfc/rfc3168
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total Length: header plus payload, in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::LENGTH))
    }

    /// The Identification field (used to reassemble fragments).
    #[inline]
    pub fn ident(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::IDENT))
    }

    #[inline]
    fn flags_and_offset(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::FLG_OFF))
    }

    /// The DF ("don't fragment") flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_and_offset() & FLAG_DF != 0
    }

    /// The MF ("more fragments") flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_and_offset() & FLAG_MF != 0
    }

    /// The fragment offset in bytes (the field counts 8-byte units): 0..=65528.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.flags_and_offset() & OFFSET_MASK) << 3
    }

    /// Whether this packet is a fragment: MF set or a non-zero fragment offset. Only the first
    /// fragment (offset 0) carries the transport header.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_and_offset() & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Time to Live, the IPv4 hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The Protocol field: what the payload carries.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The Header Checksum field (host order).
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::CHECKSUM))
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(read::<4>(self.buffer.as_ref(), field::SRC_ADDR))
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(read::<4>(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// Whether the Header Checksum is correct: the one's complement sum of the header (options
    /// included, `header_len` bytes) is `0xffff` ([RFC 791] § 3.1, [RFC 1071]).
    ///
    /// [RFC 791]: https://www.rfc-editor.org/rfc/rfc791#section-3.1
    /// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let data = self.buffer.as_ref();
        let header = &data[..self.header_len().min(data.len())];
        checksum::fold(checksum::partial(header, 0)) == 0xffff
    }

    /// The options (bytes 20 to `header_len`), empty for IHL = 5.
    #[inline]
    pub fn options(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let start = Self::HEADER_LEN.min(data.len());
        let end = self.header_len().min(data.len()).max(start);
        &data[start..end]
    }

    /// The byte range of the payload: `header_len..total_len`, clamped to the buffer.
    #[inline]
    fn payload_range(&self) -> Range<usize> {
        let len = self.buffer.as_ref().len();
        let end = usize::from(self.total_len()).min(len);
        let start = self.header_len().min(end);
        start..end
    }

    /// The payload: from the end of the header (options included) to Total Length. Link-layer
    /// padding after Total Length is not part of it.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let range = self.payload_range();
        &self.buffer.as_ref()[range]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    #[inline]
    fn set_flags_and_offset(&mut self, value: u16) {
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Version field (keeps IHL). Only the low 4 bits of `version` are used.
    #[inline]
    pub fn set_version(&mut self, version: u8) {
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (version << 4) | (*byte & 0x0f);
    }

    /// Sets IHL from a header length in bytes (keeps Version): `len / 4`, so `len` should be a
    /// multiple of 4 in 20..=60; only the low 4 bits of `len / 4` are stored.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (*byte & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP/ECN byte.
    #[inline]
    pub fn set_dscp_ecn(&mut self, value: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = value;
    }

    /// Sets Total Length (header plus payload, in bytes).
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the Identification field.
    #[inline]
    pub fn set_ident(&mut self, ident: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&ident.to_be_bytes());
    }

    /// Clears all three flag bits (the reserved bit, which [RFC 791] says must be zero, DF and
    /// MF); keeps the fragment offset.
    ///
    /// [RFC 791]: https://www.rfc-editor.org/rfc/rfc791#section-3.1
    #[inline]
    pub fn clear_flags(&mut self) {
        let value = self.flags_and_offset() & OFFSET_MASK;
        self.set_flags_and_offset(value);
    }

    /// Sets or clears DF ("don't fragment").
    #[inline]
    pub fn set_dont_frag(&mut self, value: bool) {
        let word = self.flags_and_offset() & !FLAG_DF;
        self.set_flags_and_offset(if value { word | FLAG_DF } else { word });
    }

    /// Sets or clears MF ("more fragments").
    #[inline]
    pub fn set_more_frags(&mut self, value: bool) {
        let word = self.flags_and_offset() & !FLAG_MF;
        self.set_flags_and_offset(if value { word | FLAG_MF } else { word });
    }

    /// Sets the fragment offset from a value in bytes (keeps the flags). The field counts 8-byte
    /// units, so `offset` is rounded down to a multiple of 8.
    #[inline]
    pub fn set_frag_offset(&mut self, offset: u16) {
        let word = (self.flags_and_offset() & !OFFSET_MASK) | (offset >> 3);
        self.set_flags_and_offset(word);
    }

    /// Sets Time to Live.
    #[inline]
    pub fn set_hop_limit(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the Protocol field.
    #[inline]
    pub fn set_next_header(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = u8::from(protocol);
    }

    /// Sets the Header Checksum field (host order). See also [`Self::fill_checksum`] and
    /// [`checksum::update16`] / [`checksum::update_addr`] for incremental updates.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the source address (the checksum is not updated).
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address (the checksum is not updated).
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// Computes the Header Checksum over `header_len` bytes and stores it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let header = &data[..self.header_len().min(data.len())];
        let check = checksum::checksum(header);
        self.set_checksum(check);
    }

    /// The payload, mutable (from the end of the header to Total Length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.payload_range();
        &mut self.buffer.as_mut()[range]
    }

    /// The header (options included) and the payload (up to Total Length) as two disjoint mutable
    /// slices, so a NAT can rewrite addresses and the transport header in one borrow.
    ///
    /// Wrap the first in [`Ipv4Packet::new_unchecked`] to use the field setters on it: its length
    /// is at least 20 when this packet passed `new_checked` and its header length was not changed
    /// to less than 20 since.
    #[inline]
    pub fn header_and_payload_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        let range = self.payload_range();
        let (header, rest) = self.buffer.as_mut()[..range.end].split_at_mut(range.start);
        (header, rest)
    }

    /// Writes a fresh option-less header for a packet the gateway originates (an ICMP error, a
    /// TCP reset): version 4, IHL 5, DSCP/ECN 0, Total Length `20 + payload_len`
    /// (saturating), Identification 0, DF set ([RFC 6864] § 4.1: atomic datagrams may use any
    /// ident), fragment offset 0, the given TTL, protocol and addresses, and the checksum. The
    /// payload is not touched.
    ///
    /// [RFC 6864]: https://www.rfc-editor.org/rfc/rfc6864#section-4.1
    pub fn fill_header(&mut self, src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, payload_len: u16, ttl: u8) {
        let data = self.buffer.as_mut();
        data[field::VER_IHL] = 0x45;
        data[field::DSCP_ECN] = 0;
        self.set_total_len((Self::HEADER_LEN as u16).saturating_add(payload_len));
        self.set_ident(0);
        self.set_flags_and_offset(FLAG_DF);
        self.set_hop_limit(ttl);
        self.set_next_header(protocol);
        self.set_src_addr(src);
        self.set_dst_addr(dst);
        self.fill_checksum();
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 198.51.100.7 → 192.0.2.10, UDP, DF, TTL 64, carrying a 12-byte UDP datagram.
    static PACKET: [u8; 32] = [
        0x45, 0x00, 0x00, 0x20, // version 4, IHL 5, DSCP/ECN 0, total length 32
        0x1c, 0x46, 0x40, 0x00, // ident 0x1c46, DF, offset 0
        0x40, 0x11, 0x32, 0x42, // TTL 64, UDP, checksum 0x3242
        0xc6, 0x33, 0x64, 0x07, // 198.51.100.7
        0xc0, 0x00, 0x02, 0x0a, // 192.0.2.10
        0xcf, 0x08, 0x00, 0x35, 0x00, 0x0c, 0x7f, 0x8c, 0x61, 0x62, 0x63, 0x64, // UDP
    ];

    /// What `fill_header` writes for an 8-byte ICMP payload, 198.51.100.7 → 192.0.2.10, TTL 64.
    static ORIGINATED: [u8; 20] = [
        0x45, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x01, 0x4e, 0x9c, 0xc6, 0x33, 0x64, 0x07, 0xc0, 0x00,
        0x02, 0x0a,
    ];

    const SRC: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);

    #[test]
    fn deconstruct() {
        let ip = Ipv4Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(ip.version(), 4);
        assert_eq!(ip.header_len(), 20);
        assert_eq!(ip.dscp_ecn(), 0);
        assert_eq!(ip.total_len(), 32);
        assert_eq!(ip.ident(), 0x1c46);
        assert!(ip.dont_frag());
        assert!(!ip.more_frags());
        assert_eq!(ip.frag_offset(), 0);
        assert!(!ip.is_fragment());
        assert_eq!(ip.hop_limit(), 64);
        assert_eq!(ip.next_header(), IpProtocol::Udp);
        assert_eq!(ip.checksum(), 0x3242);
        assert_eq!(ip.src_addr(), SRC);
        assert_eq!(ip.dst_addr(), DST);
        assert!(ip.verify_checksum());
        assert!(ip.options().is_empty());
        assert_eq!(ip.payload(), &PACKET[20..]);
        assert_eq!(ip.as_ref(), &PACKET[..]);
        assert_eq!(ip.into_inner(), &PACKET[..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 32];
        let mut ip = Ipv4Packet::new_unchecked(&mut bytes[..]);
        ip.set_version(4);
        ip.set_header_len(20);
        ip.set_dscp_ecn(0);
        ip.set_total_len(32);
        ip.set_ident(0x1c46);
        ip.clear_flags();
        ip.set_dont_frag(true);
        ip.set_more_frags(false);
        ip.set_frag_offset(0);
        ip.set_hop_limit(64);
        ip.set_next_header(IpProtocol::Udp);
        ip.set_src_addr(SRC);
        ip.set_dst_addr(DST);
        ip.fill_checksum();
        ip.payload_mut().copy_from_slice(&PACKET[20..]);
        assert_eq!(bytes, PACKET);
    }

    #[test]
    fn set_checksum_writes_field() {
        let mut bytes = PACKET;
        let mut ip = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        ip.set_checksum(0x1234);
        assert_eq!(ip.checksum(), 0x1234);
        assert!(!ip.verify_checksum());
        ip.fill_checksum();
        assert_eq!(bytes, PACKET);
    }

    #[test]
    fn emit_fill_header() {
        let mut bytes = [0xa5u8; 28];
        let mut ip = Ipv4Packet::new_unchecked(&mut bytes[..]);
        ip.fill_header(SRC, DST, IpProtocol::Icmp, 8, 64);
        assert_eq!(&bytes[..20], &ORIGINATED);
        assert_eq!(&bytes[20..], &[0xa5; 8]);
        let ip = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.payload().len(), 8);
    }

    #[test]
    fn payload_stops_at_total_len() {
        // A 60-byte minimum Ethernet frame leaves padding after the IP packet.
        let mut padded = [0u8; 46];
        padded[..32].copy_from_slice(&PACKET);
        let ip = Ipv4Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(ip.payload(), &PACKET[20..]);
    }

    #[test]
    fn options() {
        // IHL 6 with a 4-byte option (Router Alert, RFC 2113); total length 24 + 12.
        let mut bytes = [0u8; 36];
        bytes[..20].copy_from_slice(&PACKET[..20]);
        bytes[20..24].copy_from_slice(&[0x94, 0x04, 0x00, 0x00]);
        bytes[24..].copy_from_slice(&PACKET[20..]);
        let mut ip = Ipv4Packet::new_unchecked(&mut bytes[..]);
        ip.set_header_len(24);
        ip.set_total_len(36);
        ip.fill_checksum();
        let ip = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ip.header_len(), 24);
        assert_eq!(ip.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(ip.payload(), &PACKET[20..]);
        assert!(ip.verify_checksum());
    }

    #[test]
    fn fragments() {
        let mut bytes = PACKET;
        let mut ip = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        ip.set_dont_frag(false);
        ip.set_more_frags(true);
        assert!(ip.more_frags() && !ip.dont_frag() && ip.is_fragment());
        assert_eq!(ip.frag_offset(), 0);
        ip.set_more_frags(false);
        ip.set_frag_offset(1480);
        assert!(!ip.more_frags() && ip.is_fragment());
        assert_eq!(ip.frag_offset(), 1480);
        ip.set_frag_offset(65535);
        assert_eq!(ip.frag_offset(), 65528);
        ip.set_dont_frag(true);
        ip.clear_flags();
        assert!(!ip.dont_frag() && !ip.more_frags());
        assert_eq!(ip.frag_offset(), 65528);
        assert_eq!(&bytes[6..8], &[0x1f, 0xff]);
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..PACKET.len() {
            assert_eq!(Ipv4Packet::new_checked(&PACKET[..len]), Err(ParseError::Truncated), "len {len}");
        }
    }

    #[test]
    fn rejects_malformed() {
        type Mutation = fn(&mut [u8]);
        let cases: [(&str, Mutation); 5] = [
            ("version 6", |b| b[0] = 0x65),
            ("IHL 4", |b| b[0] = 0x44),
            ("IHL 0", |b| b[0] = 0x40),
            ("total length below IHL", |b| b[2..4].copy_from_slice(&19u16.to_be_bytes())),
            ("total length below options", |b| {
                b[0] = 0x46;
                b[2..4].copy_from_slice(&20u16.to_be_bytes());
            }),
        ];
        for (what, mutate) in cases {
            let mut bytes = PACKET;
            mutate(&mut bytes);
            assert_eq!(Ipv4Packet::new_checked(&bytes[..]), Err(ParseError::Malformed), "{what}");
        }
        // Total length beyond the buffer, IHL beyond the buffer: truncated.
        let mut bytes = PACKET;
        bytes[2..4].copy_from_slice(&33u16.to_be_bytes());
        assert_eq!(Ipv4Packet::new_checked(&bytes[..]), Err(ParseError::Truncated));
        let mut bytes = PACKET;
        bytes[0] = 0x4f;
        bytes[2..4].copy_from_slice(&60u16.to_be_bytes());
        assert_eq!(Ipv4Packet::new_checked(&bytes[..]), Err(ParseError::Truncated));
    }

    #[test]
    fn bad_checksum_detected() {
        let mut bytes = PACKET;
        bytes[8] = 63; // TTL decremented without fixing the checksum
        assert!(!Ipv4Packet::new_checked(&bytes[..]).unwrap().verify_checksum());
    }

    #[test]
    fn header_and_payload_in_one_borrow() {
        let mut bytes = PACKET;
        let mut ip = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        let (header, payload) = ip.header_and_payload_mut();
        assert_eq!(header.len(), 20);
        assert_eq!(payload.len(), 12);
        let new_dst = Ipv4Addr::new(10, 244, 1, 5);
        let mut header = Ipv4Packet::new_unchecked(header);
        let check = checksum::update_addr(header.checksum(), header.dst_addr(), new_dst);
        header.set_dst_addr(new_dst);
        header.set_checksum(check);
        payload[2..4].copy_from_slice(&8053u16.to_be_bytes());
        let ip = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst_addr(), new_dst);
        assert_eq!(&ip.payload()[2..4], &8053u16.to_be_bytes());
    }

    #[test]
    fn setters_cannot_make_accessors_panic() {
        let mut bytes = PACKET;
        let mut ip = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        for (header_len, total_len) in [(60, 32), (20, 65535), (0, 0), (60, 65535), (24, 10)] {
            ip.set_header_len(header_len);
            ip.set_total_len(total_len);
            let _ = (ip.payload().len(), ip.options().len(), ip.verify_checksum());
            let _ = ip.payload_mut().len();
            let (h, p) = ip.header_and_payload_mut();
            assert!(h.len() + p.len() <= 32);
            ip.fill_checksum();
        }
    }

    #[test]
    fn protocol_round_trip() {
        for value in 0..=u8::MAX {
            assert_eq!(u8::from(IpProtocol::from(value)), value);
        }
        assert_eq!(IpProtocol::from(1), IpProtocol::Icmp);
        assert_eq!(IpProtocol::from(6), IpProtocol::Tcp);
        assert_eq!(IpProtocol::from(17), IpProtocol::Udp);
        assert_eq!(IpProtocol::from(58), IpProtocol::Icmpv6);
        assert_eq!(IpProtocol::from(132), IpProtocol::Sctp);
        assert_eq!(IpProtocol::from(47), IpProtocol::Unknown(47));
    }
}
