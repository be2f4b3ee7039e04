//! ICMPv6 messages ([RFC 4443] § 2.1): type, code, checksum, a 4-byte message-specific word,
//! then data. Neighbor Discovery messages, which are ICMPv6 too, have their own view in
//! [`super::ndp`].
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! |  Identifier (echo) / MTU (packet too big) / Pointer / unused  |
//! |  Data: echo payload, or as much of the invoking packet as fits|
//! ```
//!
//! Unlike ICMPv4, the checksum covers the IPv6 pseudo-header ([RFC 4443] § 2.3, [RFC 8200]
//! § 8.1, Next Header 58) as well as the whole message, so [`Icmpv6Packet::verify_checksum`]
//! and [`Icmpv6Packet::fill_checksum`] take the addresses. The view's buffer is exactly the
//! ICMPv6 message (the upper-layer part of the IPv6 payload). `new_checked` only requires the
//! 8-byte header; after it succeeds nothing panics.
//!
//! [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443
//! [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1

use std::net::Ipv6Addr;

use super::icmpv4::translate_quoted_transport;
use super::ipv6::walk_extension_headers;
use super::{checksum, read, IpProtocol, Ipv6Packet, ParseError};

mod field {
    use crate::wire::{Field, Rest};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const WORD: Field = 4..8;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQNO: Field = 6..8;
    pub const DATA: Rest = 8..;
}

/// The IPv6 Next Header value of ICMPv6.
pub const NEXT_HEADER_ICMPV6: u8 = 58;

/// Destination Unreachable code 0: no route to destination ([RFC 4443] § 3.1).
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3.1
pub const DST_UNREACHABLE_NO_ROUTE: u8 = 0;
/// Destination Unreachable code 1: communication administratively prohibited ([RFC 4443] § 3.1).
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3.1
pub const DST_UNREACHABLE_PROHIBITED: u8 = 1;
/// Destination Unreachable code 3: address unreachable ([RFC 4443] § 3.1).
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3.1
pub const DST_UNREACHABLE_ADDRESS: u8 = 3;
/// Destination Unreachable code 4: port unreachable ([RFC 4443] § 3.1); what Linux's `REJECT`
/// (`icmp6-port-unreachable`, kube-proxy's choice) sends for a UDP Service without endpoints.
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3.1
pub const DST_UNREACHABLE_PORT: u8 = 4;
/// Time Exceeded code 0: hop limit exceeded in transit ([RFC 4443] § 3.3).
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3.3
pub const TIME_EXCEEDED_HOP_LIMIT: u8 = 0;

/// The largest ICMPv6 error message: "as much of invoking packet as possible without the
/// ICMPv6 packet exceeding the minimum IPv6 MTU" of 1280 bytes ([RFC 4443] § 2.4 (c)), less the
/// 40-byte IPv6 header.
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-2.4
pub const MAX_ERROR_LEN: usize = 1280 - 40;

/// The ICMPv6 message type ([RFC 4443] § 2.1, [RFC 4861] § 4). Total: other types are kept in
/// [`Icmpv6Type::Unknown`].
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-2.1
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-4
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Icmpv6Type {
    /// Destination Unreachable, 1.
    DstUnreachable,
    /// Packet Too Big, 2.
    PacketTooBig,
    /// Time Exceeded, 3.
    TimeExceeded,
    /// Parameter Problem, 4.
    ParamProblem,
    /// Echo Request, 128.
    EchoRequest,
    /// Echo Reply, 129.
    EchoReply,
    /// Router Solicitation, 133.
    RouterSolicit,
    /// Router Advertisement, 134.
    RouterAdvert,
    /// Neighbor Solicitation, 135.
    NeighborSolicit,
    /// Neighbor Advertisement, 136.
    NeighborAdvert,
    /// Redirect, 137.
    Redirect,
    /// Any other type.
    Unknown(u8),
}

impl Icmpv6Type {
    /// Whether this is an error message (types 0..=127, [RFC 4443] § 2.1).
    ///
    /// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-2.1
    #[inline]
    pub fn is_error(self) -> bool {
        u8::from(self) < 128
    }
}

impl From<u8> for Icmpv6Type {
    #[inline]
    fn from(value: u8) -> Self {
        match value {
            1 => Icmpv6Type::DstUnreachable,
            2 => Icmpv6Type::PacketTooBig,
            3 => Icmpv6Type::TimeExceeded,
            4 => Icmpv6Type::ParamProblem,
            128 => Icmpv6Type::EchoRequest,
            129 => Icmpv6Type::EchoReply,
            133 => Icmpv6Type::RouterSolicit,
            134 => Icmpv6Type::RouterAdvert,
            135 => Icmpv6Type::NeighborSolicit,
            136 => Icmpv6Type::NeighborAdvert,
            137 => Icmpv6Type::Redirect,
            other => Icmpv6Type::Unknown(other),
        }
    }
}

impl From<Icmpv6Type> for u8 {
    #[inline]
    fn from(value: Icmpv6Type) -> Self {
        match value {
            Icmpv6Type::DstUnreachable => 1,
            Icmpv6Type::PacketTooBig => 2,
            Icmpv6Type::TimeExceeded => 3,
            Icmpv6Type::ParamProblem => 4,
            Icmpv6Type::EchoRequest => 128,
            Icmpv6Type::EchoReply => 129,
            Icmpv6Type::RouterSolicit => 133,
            Icmpv6Type::RouterAdvert => 134,
            Icmpv6Type::NeighborSolicit => 135,
            Icmpv6Type::NeighborAdvert => 136,
            Icmpv6Type::Redirect => 137,
            Icmpv6Type::Unknown(other) => other,
        }
    }
}

/// A read/write view of an ICMPv6 message; the buffer is the whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Length of the header in bytes: type, code, checksum and the 4-byte message-specific word.
    pub const HEADER_LEN: usize = field::DATA.start;

    /// Wraps `buffer` without checking it; accessors panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    /// Wraps `buffer` after checking that it holds the 8-byte header.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if the buffer is shorter than [`Self::HEADER_LEN`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(Icmpv6Packet { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv6Type {
        Icmpv6Type::from(self.buffer.as_ref()[field::TYPE])
    }

    /// The message code (meaning depends on the type; see the `DST_UNREACHABLE_*` constants).
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field (host order).
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::CHECKSUM))
    }

    /// Bytes 4..8 as one word: identifier and sequence number of echo messages, the MTU of
    /// Packet Too Big ([RFC 4443] § 3.2), the Pointer of Parameter Problem (§ 3.4), zero
    /// ("unused") for Destination Unreachable and Time Exceeded.
    ///
    /// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3.2
    #[inline]
    pub fn word(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::WORD))
    }

    /// The MTU of a Packet Too Big message, bytes ([RFC 4443] § 3.2).
    ///
    /// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3.2
    #[inline]
    pub fn mtu(&self) -> u32 {
        self.word()
    }

    /// The Identifier of an Echo Request or Reply ([RFC 4443] § 4.1).
    ///
    /// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-4.1
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::ECHO_IDENT))
    }

    /// The Sequence Number of an Echo Request or Reply.
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::ECHO_SEQNO))
    }

    /// The data after the 8-byte header: the echo payload, or for error messages the invoking
    /// packet (its IPv6 header first).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// Whether the checksum is correct for a message carried from `src` to `dst`: the one's
    /// complement sum of the IPv6 pseudo-header and the whole buffer is `0xffff`.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let data = self.buffer.as_ref();
        let pseudo = checksum::pseudo_header_v6(src, dst, NEXT_HEADER_ICMPV6, data.len() as u32);
        checksum::fold(checksum::partial(data, pseudo)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, msg_type: Icmpv6Type) {
        self.buffer.as_mut()[field::TYPE] = u8::from(msg_type);
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
    }

    /// Sets the checksum field (host order).
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets bytes 4..8 as one word (0 for the "unused" field of error messages, the MTU of a
    /// Packet Too Big).
    #[inline]
    pub fn set_word(&mut self, value: u32) {
        self.buffer.as_mut()[field::WORD].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the echo Identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, ident: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&ident.to_be_bytes());
    }

    /// Sets the echo Sequence Number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, seq_no: u16) {
        self.buffer.as_mut()[field::ECHO_SEQNO].copy_from_slice(&seq_no.to_be_bytes());
    }

    /// Computes the checksum over the IPv6 pseudo-header (`src`, `dst`, Next Header 58, the
    /// buffer's length) and the whole buffer, and stores it ([RFC 4443] § 2.3).
    ///
    /// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-2.3
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let pseudo = checksum::pseudo_header_v6(src, dst, NEXT_HEADER_ICMPV6, data.len() as u32);
        let check = checksum::finish(checksum::partial(data, pseudo));
        self.set_checksum(check);
    }

    /// The data after the 8-byte header, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

/// The packet an ICMPv6 error quotes (the [`Icmpv6Packet::data`] of a message whose type
/// [`is_error`](Icmpv6Type::is_error)): "as much of invoking packet as possible without the
/// ICMPv6 packet exceeding the minimum IPv6 MTU" ([RFC 4443] § 3) — its IPv6 header, any
/// extension headers, then the start of the upper-layer header. The quoted Payload Length
/// usually claims more than the quote holds; this view reads only what the quote holds.
///
/// `new_checked` accepts a buffer that holds a whole IPv6 fixed header with version 6; after it
/// succeeds no accessor or setter panics. [`Self::ports`] walks the quoted extension headers
/// (bounded: [`super::ipv6::MAX_EXTENSION_HEADERS`], within the quote) and is `None` unless the
/// quote holds the first 4 bytes of a TCP, UDP or SCTP header (not a non-first fragment).
///
/// [`Self::translate`] rewrites the quote as the inverse of what a NAT did to the packet
/// ([RFC 5508] § 4.2's rule, which Linux applies to ICMPv6 too: `nf_nat_icmpv6_reply_translation`).
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3
/// [RFC 5508]: https://www.rfc-editor.org/rfc/rfc5508#section-4.2
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotedIpv6<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> QuotedIpv6<T> {
    /// Wraps the quote without checking it; accessors may panic unless it passed
    /// [`Self::new_checked`] before.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        QuotedIpv6 { buffer }
    }

    /// Wraps the quote after checking that it holds an IPv6 fixed header.
    ///
    /// # Errors
    /// [`ParseError::Truncated`] if the buffer is shorter than 40 bytes; [`ParseError::Malformed`]
    /// if the version is not 6.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let data = buffer.as_ref();
        if data.len() < Ipv6Packet::<&[u8]>::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        if Ipv6Packet::new_unchecked(data).version() != 6 {
            return Err(ParseError::Malformed);
        }
        Ok(QuotedIpv6 { buffer })
    }

    /// The quoted IPv6 fixed header as a view (its payload accessors are not for quotes).
    #[inline]
    pub fn header(&self) -> Ipv6Packet<&[u8]> {
        Ipv6Packet::new_unchecked(self.buffer.as_ref())
    }

    /// The quoted packet's source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        self.header().src_addr()
    }

    /// The quoted packet's destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        self.header().dst_addr()
    }

    /// End of the quoted packet within the quote: the quoted Payload Length's end or the
    /// quote's, whichever comes first.
    #[inline]
    fn end(&self) -> usize {
        self.header().total_len().min(self.buffer.as_ref().len())
    }

    /// The quoted upper layer: its protocol and the offset of its header, when the quote holds
    /// the chain of extension headers before it and the packet is not a non-first fragment.
    #[inline]
    pub fn upper_layer(&self) -> Option<(IpProtocol, usize)> {
        let upper = walk_extension_headers(self.buffer.as_ref(), self.header().next_header(), self.end()).ok()?;
        if upper.fragment.is_some_and(|f| !f.is_first()) {
            return None;
        }
        Some((upper.protocol, upper.offset))
    }

    /// The quoted (source, destination) ports of TCP, UDP or SCTP when the quote holds them;
    /// `None` otherwise (see the type's documentation).
    #[inline]
    pub fn ports(&self) -> Option<(IpProtocol, u16, u16)> {
        let (protocol, offset) = self.upper_layer()?;
        if !matches!(protocol, IpProtocol::Tcp | IpProtocol::Udp | IpProtocol::Sctp) {
            return None;
        }
        match self.buffer.as_ref().get(offset..self.end())? {
            [a, b, c, d, ..] => Some((protocol, u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))),
            _ => None,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QuotedIpv6<T> {
    /// Rewrites the quoted packet to `src:src_port → dst:dst_port` — nothing when
    /// [`Self::ports`] is `None` — keeping the quoted TCP / UDP checksum consistent as far as
    /// quoted (incrementally, [RFC 1624]; IPv6 has no header checksum) and an SCTP CRC32c when
    /// the whole packet is quoted ([`super::icmpv4`]'s shared rule).
    ///
    /// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624
    pub fn translate(&mut self, src: Ipv6Addr, src_port: u16, dst: Ipv6Addr, dst_port: u16) {
        let (old_src, old_dst, total, end) = (self.src_addr(), self.dst_addr(), self.header().total_len(), self.end());
        let Some((protocol, old_sport, old_dport)) = self.ports() else { return };
        let Some((_, offset)) = self.upper_layer() else { return };
        let data = self.buffer.as_mut();
        let mut ip = Ipv6Packet::new_unchecked(&mut *data);
        ip.set_src_addr(src);
        ip.set_dst_addr(dst);
        translate_quoted_transport(
            &mut data[offset..end],
            protocol,
            end == total,
            ((old_src, old_sport), (old_dst, old_dport)),
            ((src, src_port), (dst, dst_port)),
        );
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xa);

    /// Echo Request 2001:db8::7 → 2001:db8::a, identifier 0x1234, sequence 1, 11 bytes of data.
    /// Checksum 0xc22f, computed independently of this crate (the pseudo-header alone sums to
    /// 0x5bd0: 2·0x2001 + 2·0x0db8 + 7 + 0xa + 19 + 58).
    static ECHO_REQUEST: [u8; 19] = [
        0x80, 0x00, 0xc2, 0x2f, // type 128, code 0, checksum
        0x12, 0x34, 0x00, 0x01, // identifier, sequence number
        b't', b'o', b'r', b'i', b'i', b' ', b'p', b'i', b'n', b'g', b'!',
    ];

    #[test]
    fn deconstruct() {
        let icmp = Icmpv6Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(icmp.msg_type(), Icmpv6Type::EchoRequest);
        assert_eq!(icmp.msg_code(), 0);
        assert_eq!(icmp.checksum(), 0xc22f);
        assert_eq!(icmp.echo_ident(), 0x1234);
        assert_eq!(icmp.echo_seq_no(), 1);
        assert_eq!(icmp.word(), 0x1234_0001);
        assert_eq!(icmp.mtu(), 0x1234_0001);
        assert_eq!(icmp.data(), b"torii ping!");
        assert!(icmp.verify_checksum(SRC, DST));
        assert!(!icmp.verify_checksum(DST, DST));
        assert_eq!(icmp.as_ref(), &ECHO_REQUEST[..]);
        assert_eq!(icmp.into_inner(), &ECHO_REQUEST[..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 19];
        let mut icmp = Icmpv6Packet::new_unchecked(&mut bytes[..]);
        icmp.set_msg_type(Icmpv6Type::EchoRequest);
        icmp.set_msg_code(0);
        icmp.set_echo_ident(0x1234);
        icmp.set_echo_seq_no(1);
        icmp.data_mut().copy_from_slice(b"torii ping!");
        icmp.fill_checksum(SRC, DST);
        assert_eq!(bytes, ECHO_REQUEST);
    }

    #[test]
    fn echo_reply_in_place() {
        // Request → reply: the type word changes and source and destination swap (the
        // pseudo-header sum is symmetric), so one RFC 1624 update fixes the checksum.
        let mut bytes = ECHO_REQUEST;
        let mut icmp = Icmpv6Packet::new_checked(&mut bytes[..]).unwrap();
        icmp.set_msg_type(Icmpv6Type::EchoReply);
        icmp.set_checksum(checksum::update16(icmp.checksum(), 0x8000, 0x8100));
        assert!(icmp.verify_checksum(DST, SRC));
    }

    #[test]
    fn packet_too_big() {
        let mut bytes = [0xa5u8; 8 + 48];
        let mut icmp = Icmpv6Packet::new_unchecked(&mut bytes[..]);
        icmp.set_msg_type(Icmpv6Type::PacketTooBig);
        icmp.set_msg_code(0);
        icmp.set_word(1280);
        icmp.data_mut().fill(0);
        icmp.fill_checksum(SRC, DST);
        assert_eq!(&bytes[..2], &[2, 0]);
        assert_eq!(&bytes[4..8], &[0, 0, 0x05, 0x00]);
        let icmp = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(icmp.mtu(), 1280);
        assert!(icmp.msg_type().is_error());
        assert!(icmp.verify_checksum(SRC, DST));
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..Icmpv6Packet::<&[u8]>::HEADER_LEN {
            assert_eq!(Icmpv6Packet::new_checked(&ECHO_REQUEST[..len]), Err(ParseError::Truncated), "len {len}");
        }
        assert!(Icmpv6Packet::new_checked(&ECHO_REQUEST[..8]).unwrap().data().is_empty());
    }

    #[test]
    fn type_round_trip() {
        for value in 0..=u8::MAX {
            assert_eq!(u8::from(Icmpv6Type::from(value)), value);
        }
        assert_eq!(Icmpv6Type::from(135), Icmpv6Type::NeighborSolicit);
        assert_eq!(Icmpv6Type::from(136), Icmpv6Type::NeighborAdvert);
        assert_eq!(Icmpv6Type::from(200), Icmpv6Type::Unknown(200));
        assert!(!Icmpv6Type::EchoRequest.is_error());
        assert!(Icmpv6Type::DstUnreachable.is_error());
    }

    /// An IPv6 UDP packet `src:sport → dst:dport` with an 8-byte Destination Options header
    /// before the UDP header, as the wire bytes from the IPv6 header on.
    fn udp_with_options(src: (Ipv6Addr, u16), dst: (Ipv6Addr, u16), payload: &[u8]) -> Vec<u8> {
        let l2 = crate::frames::L2 { src: crate::wire::MacAddr::UNSPECIFIED, dst: crate::wire::MacAddr::UNSPECIFIED };
        let plain = crate::frames::udp6(l2, src, dst, payload, 63);
        let mut p = plain[14..54].to_vec();
        p.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        p.extend_from_slice(&plain[54..]);
        p[6] = 60;
        p[4..6].copy_from_slice(&((plain.len() - 54 + 8) as u16).to_be_bytes());
        p
    }

    #[test]
    fn quoted_ipv6_walks_extension_headers_and_translates_within_the_quote() {
        let (a, b, c, d): (Ipv6Addr, Ipv6Addr, Ipv6Addr, Ipv6Addr) = (
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            "2001:db8::3".parse().unwrap(),
            "2001:db8::4".parse().unwrap(),
        );
        let payload = [0x33u8; 100];
        let mut quote = udp_with_options((a, 1024), (b, 8080), &payload);
        let q = QuotedIpv6::new_checked(&quote[..]).unwrap();
        assert_eq!(q.upper_layer(), Some((IpProtocol::Udp, 48)));
        assert_eq!(q.ports(), Some((IpProtocol::Udp, 1024, 8080)));
        // Translated in a truncated quote (the UDP checksum is in it): the bytes a fresh
        // packet with the new tuple has.
        let cut = 48 + 20;
        QuotedIpv6::new_unchecked(&mut quote[..cut]).translate(c, 40000, d, 80);
        assert_eq!(&quote[..cut], &udp_with_options((c, 40000), (d, 80), &payload)[..cut]);
        // The ports cut off by the quote, or the extension header itself: no ports, no change.
        let short = udp_with_options((a, 1024), (b, 8080), &payload);
        assert_eq!(QuotedIpv6::new_checked(&short[..50]).unwrap().ports(), None);
        assert_eq!(QuotedIpv6::new_checked(&short[..44]).unwrap().ports(), None);
        let mut untouched = short[..50].to_vec();
        QuotedIpv6::new_unchecked(&mut untouched[..]).translate(c, 1, d, 2);
        assert_eq!(untouched, &short[..50]);
        assert_eq!(QuotedIpv6::new_checked(&short[..39]), Err(ParseError::Truncated));
        let mut v4 = short.clone();
        v4[0] = 0x45;
        assert_eq!(QuotedIpv6::new_checked(&v4[..]), Err(ParseError::Malformed));
    }
}
