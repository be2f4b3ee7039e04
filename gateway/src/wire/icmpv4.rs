//! ICMPv4 messages ([RFC 792]): an 8-byte header (type, code, checksum and 4 bytes whose meaning
//! depends on the type), then data.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! |  Identifier (echo) / unused   | Sequence Number (echo) / MTU  |
//! |     Data: echo payload, or the offending IP header + 8 bytes  |
//! ```
//!
//! The checksum covers the whole message (header and data), without a pseudo-header; the view's
//! buffer must therefore be exactly the ICMP message (the IPv4 payload). `new_checked` only
//! requires the 8-byte header; after it succeeds nothing panics.
//!
//! [RFC 792]: https://www.rfc-editor.org/rfc/rfc792

use std::net::Ipv4Addr;

use super::checksum::PseudoHeaderAddr;
use super::{checksum, read, IpProtocol, Ipv4Packet, ParseError, SctpPacket};

mod field {
    use crate::wire::{Field, Rest};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST_OF_HEADER: Field = 4..8;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQNO: Field = 6..8;
    pub const NEXT_HOP_MTU: Field = 6..8;
    pub const DATA: Rest = 8..;
}

/// Destination Unreachable code 0: net unreachable ([RFC 792]).
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
pub const DST_UNREACHABLE_NET: u8 = 0;
/// Destination Unreachable code 1: host unreachable ([RFC 792]).
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
pub const DST_UNREACHABLE_HOST: u8 = 1;
/// Destination Unreachable code 2: protocol unreachable ([RFC 792]).
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
pub const DST_UNREACHABLE_PROTOCOL: u8 = 2;
/// Destination Unreachable code 3: port unreachable ([RFC 792]); what kube-proxy's `REJECT`
/// sends for a UDP Service without endpoints.
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
pub const DST_UNREACHABLE_PORT: u8 = 3;
/// Destination Unreachable code 4: fragmentation needed and DF set ([RFC 792]); the next-hop MTU
/// is in bytes 6..8 ([RFC 1191] § 4, [`Icmpv4Packet::next_hop_mtu`]).
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
/// [RFC 1191]: https://www.rfc-editor.org/rfc/rfc1191#section-4
pub const FRAG_NEEDED: u8 = 4;
/// Time Exceeded code 0: time to live exceeded in transit ([RFC 792]).
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
pub const TIME_EXCEEDED_TTL: u8 = 0;

/// The ICMPv4 message type ([RFC 792]). Total: other types are kept in [`Icmpv4Type::Unknown`].
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Icmpv4Type {
    /// Echo Reply, 0.
    EchoReply,
    /// Destination Unreachable, 3.
    DstUnreachable,
    /// Echo Request, 8.
    EchoRequest,
    /// Time Exceeded, 11.
    TimeExceeded,
    /// Parameter Problem, 12.
    ParamProblem,
    /// Any other type.
    Unknown(u8),
}

impl From<u8> for Icmpv4Type {
    #[inline]
    fn from(value: u8) -> Self {
        match value {
            0 => Icmpv4Type::EchoReply,
            3 => Icmpv4Type::DstUnreachable,
            8 => Icmpv4Type::EchoRequest,
            11 => Icmpv4Type::TimeExceeded,
            12 => Icmpv4Type::ParamProblem,
            other => Icmpv4Type::Unknown(other),
        }
    }
}

impl From<Icmpv4Type> for u8 {
    #[inline]
    fn from(value: Icmpv4Type) -> Self {
        match value {
            Icmpv4Type::EchoReply => 0,
            Icmpv4Type::DstUnreachable => 3,
            Icmpv4Type::EchoRequest => 8,
            Icmpv4Type::TimeExceeded => 11,
            Icmpv4Type::ParamProblem => 12,
            Icmpv4Type::Unknown(other) => other,
        }
    }
}

impl Icmpv4Type {
    /// Whether messages of this type are errors that quote the offending datagram (its IPv4
    /// header and at least the first 8 bytes of its payload, [RFC 792]; routers quote as much
    /// as fits in 576 bytes, [RFC 1812] § 4.3.2.3): Destination Unreachable, Time Exceeded and
    /// Parameter Problem. [`QuotedIpv4`] views the quote.
    ///
    /// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
    /// [RFC 1812]: https://www.rfc-editor.org/rfc/rfc1812#section-4.3.2.3
    #[inline]
    pub fn is_error(self) -> bool {
        matches!(self, Icmpv4Type::DstUnreachable | Icmpv4Type::TimeExceeded | Icmpv4Type::ParamProblem)
    }
}

/// A read/write view of an ICMPv4 message; the buffer is the whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Length of the header in bytes: type, code, checksum and the 4-byte rest of header.
    pub const HEADER_LEN: usize = field::DATA.start;

    /// Wraps `buffer` without checking it; accessors panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
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
        Ok(Icmpv4Packet { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv4Type {
        Icmpv4Type::from(self.buffer.as_ref()[field::TYPE])
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

    /// Bytes 4..8 as one word: identifier and sequence number for echo messages, zero ("unused")
    /// for most errors, the next-hop MTU in the low half for [`FRAG_NEEDED`].
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::REST_OF_HEADER))
    }

    /// The Identifier of an Echo or Echo Reply message.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::ECHO_IDENT))
    }

    /// The Sequence Number of an Echo or Echo Reply message.
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::ECHO_SEQNO))
    }

    /// The Next-Hop MTU of a Destination Unreachable / [`FRAG_NEEDED`] message, in bytes
    /// ([RFC 1191] § 4; 0 from routers predating it).
    ///
    /// [RFC 1191]: https://www.rfc-editor.org/rfc/rfc1191#section-4
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::NEXT_HOP_MTU))
    }

    /// The data after the 8-byte header: the echo payload, or for error messages the offending
    /// datagram's IP header and at least its first 8 payload bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// Whether the checksum is correct: the one's complement sum of the whole buffer is `0xffff`.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::partial(self.buffer.as_ref(), 0)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, msg_type: Icmpv4Type) {
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

    /// Sets bytes 4..8 as one word (write 0 for the "unused" field of error messages).
    #[inline]
    pub fn set_rest_of_header(&mut self, value: u32) {
        self.buffer.as_mut()[field::REST_OF_HEADER].copy_from_slice(&value.to_be_bytes());
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

    /// Sets the Next-Hop MTU of a [`FRAG_NEEDED`] message (bytes; [RFC 1191] § 4). Bytes 4..6
    /// must be zero: use [`Self::set_rest_of_header`] to write both halves at once.
    ///
    /// [RFC 1191]: https://www.rfc-editor.org/rfc/rfc1191#section-4
    #[inline]
    pub fn set_next_hop_mtu(&mut self, mtu: u16) {
        self.buffer.as_mut()[field::NEXT_HOP_MTU].copy_from_slice(&mtu.to_be_bytes());
    }

    /// Computes the checksum over the whole buffer and stores it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let check = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(check);
    }

    /// The data after the 8-byte header, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

/// The datagram an ICMP error quotes (the [`Icmpv4Packet::data`] of a message whose type
/// [`is_error`](Icmpv4Type::is_error)): its IPv4 header, complete with options, then the first
/// bytes of its payload — at least 8 ([RFC 792]), as many as fit in 576 bytes from routers
/// following [RFC 1812] § 4.3.2.3. The quoted Total Length usually claims more than the quote
/// holds, so [`Ipv4Packet::new_checked`] would refuse it; this view checks only what it reads.
///
/// `new_checked` accepts a buffer that holds an IPv4 header (version 4, IHL ≥ 5, IHL × 4 bytes
/// present); after it succeeds no accessor or setter panics. [`Self::ports`] is `None` unless the
/// quote holds the first 4 bytes of a transport header (a first fragment or unfragmented
/// datagram).
///
/// A NAT translating the error translates the quote as the inverse of what it did to the
/// datagram ([RFC 5508] § 4.2 for ICMP through NATs; Linux `nf_nat_icmp_reply_translation`):
/// [`Self::translate`] rewrites addresses and ports and keeps every checksum the quote carries
/// consistent.
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
/// [RFC 1812]: https://www.rfc-editor.org/rfc/rfc1812#section-4.3.2.3
/// [RFC 5508]: https://www.rfc-editor.org/rfc/rfc5508#section-4.2
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotedIpv4<T: AsRef<[u8]>> {
    buffer: T,
}

/// Offsets of the checksum field in the quoted transport header.
const TCP_CHECKSUM_AT: usize = 16;
const UDP_CHECKSUM_AT: usize = 6;

impl<T: AsRef<[u8]>> QuotedIpv4<T> {
    /// Wraps the quote without checking it; accessors may panic unless it passed
    /// [`Self::new_checked`] before (as a shorter borrow, say).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        QuotedIpv4 { buffer }
    }

    /// Wraps the quote after checking that it holds a whole IPv4 header.
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if the buffer is shorter than 20 bytes or than IHL × 4;
    /// - [`ParseError::Malformed`] if the version is not 4 or IHL is below 5.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let data = buffer.as_ref();
        if data.len() < Ipv4Packet::<&[u8]>::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let ip = Ipv4Packet::new_unchecked(data);
        if ip.version() != 4 || ip.header_len() < Ipv4Packet::<&[u8]>::HEADER_LEN {
            return Err(ParseError::Malformed);
        }
        if ip.header_len() > data.len() {
            return Err(ParseError::Truncated);
        }
        Ok(QuotedIpv4 { buffer })
    }

    /// The quoted IPv4 header as a view: its fixed fields (addresses, protocol, identification,
    /// fragment fields) are complete; its payload accessors stop at the end of the quote.
    #[inline]
    pub fn header(&self) -> Ipv4Packet<&[u8]> {
        Ipv4Packet::new_unchecked(self.buffer.as_ref())
    }

    /// The quoted datagram's source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        self.header().src_addr()
    }

    /// The quoted datagram's destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        self.header().dst_addr()
    }

    /// The quoted datagram's protocol.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        self.header().next_header()
    }

    /// The quoted bytes after the IPv4 header: the start of the transport header (for a first
    /// fragment or an unfragmented datagram), at most up to the quoted Total Length.
    #[inline]
    pub fn transport(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let ip = self.header();
        let end = usize::from(ip.total_len()).min(data.len());
        &data[ip.header_len().min(end)..end]
    }

    /// The quoted (source, destination) ports of TCP, UDP or SCTP — all three keep them in the
    /// first 4 bytes — when the quote holds them: `None` for a quoted non-first fragment (no
    /// transport header), another protocol, or a quote shorter than 4 transport bytes.
    #[inline]
    pub fn ports(&self) -> Option<(u16, u16)> {
        if self.header().frag_offset() != 0
            || !matches!(self.next_header(), IpProtocol::Tcp | IpProtocol::Udp | IpProtocol::Sctp)
        {
            return None;
        }
        match self.transport() {
            [a, b, c, d, ..] => Some((u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))),
            _ => None,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QuotedIpv4<T> {
    /// Rewrites the quoted datagram to `src:src_port → dst:dst_port` — the caller checked that
    /// [`Self::ports`] is `Some` — and keeps its checksums consistent:
    ///
    /// - the quoted IPv4 header checksum, updated incrementally ([RFC 1624]), so a quote that
    ///   arrived with a wrong checksum keeps a wrong one;
    /// - the quoted TCP checksum (bytes 16..18) when the quote reaches it, and the UDP checksum
    ///   (bytes 6..8, a zero "none" kept) — both cover the pseudo-header, so the address change
    ///   enters them as well as the ports;
    /// - the SCTP CRC32c, recomputed, only when the whole SCTP packet is quoted (it covers the
    ///   whole packet; a truncated quote's CRC cannot be checked by anyone and is left alone).
    ///
    /// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624
    pub fn translate(&mut self, src: Ipv4Addr, src_port: u16, dst: Ipv4Addr, dst_port: u16) {
        let (old_src, old_dst, protocol, ihl, total) = {
            let ip = self.header();
            (ip.src_addr(), ip.dst_addr(), ip.next_header(), ip.header_len(), usize::from(ip.total_len()))
        };
        let Some((old_sport, old_dport)) = self.ports() else { return };
        let data = self.buffer.as_mut();
        let (header, rest) = data.split_at_mut(ihl);
        let mut ip = Ipv4Packet::new_unchecked(&mut *header);
        let mut c = ip.checksum();
        c = checksum::update_addr(c, old_src, src);
        c = checksum::update_addr(c, old_dst, dst);
        ip.set_src_addr(src);
        ip.set_dst_addr(dst);
        ip.set_checksum(c);
        let quoted_len = rest.len().min(total.saturating_sub(ihl));
        let whole = ihl + quoted_len == total;
        translate_quoted_transport(
            &mut rest[..quoted_len],
            protocol,
            whole,
            ((old_src, old_sport), (old_dst, old_dport)),
            ((src, src_port), (dst, dst_port)),
        );
    }
}

/// Rewrites the quoted transport header `l4` (the quote's bytes of it: at least the 4 port
/// bytes, as far as the quote holds the datagram) of `protocol` from the endpoints `old`
/// ((source address, port), (destination address, port)) to `new`, for either family, keeping
/// the checksums it quotes consistent: TCP's (bytes 16..18) and UDP's (6..8, a zero kept) when
/// quoted, updated incrementally for the address and port changes (both cover the
/// pseudo-header, [RFC 1624]); SCTP's CRC32c recomputed only when the quote holds the `whole`
/// packet. Shared by [`QuotedIpv4::translate`] and [`super::icmpv6::QuotedIpv6::translate`].
///
/// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624
pub(super) fn translate_quoted_transport<A: PseudoHeaderAddr>(
    l4: &mut [u8],
    protocol: IpProtocol,
    whole: bool,
    old: ((A, u16), (A, u16)),
    new: ((A, u16), (A, u16)),
) {
    let (((old_src, old_sport), (old_dst, old_dport)), ((src, src_port), (dst, dst_port))) = (old, new);
    if l4.len() < 4 {
        return;
    }
    l4[0..2].copy_from_slice(&src_port.to_be_bytes());
    l4[2..4].copy_from_slice(&dst_port.to_be_bytes());
    let update = |c: u16| {
        let c = A::update_checksum(c, old_src, src);
        let c = A::update_checksum(c, old_dst, dst);
        let c = checksum::update16(c, old_sport, src_port);
        checksum::update16(c, old_dport, dst_port)
    };
    match protocol {
        IpProtocol::Tcp if l4.len() >= TCP_CHECKSUM_AT + 2 => {
            let at = TCP_CHECKSUM_AT..TCP_CHECKSUM_AT + 2;
            let c = update(u16::from_be_bytes(read(l4, at.clone())));
            l4[at].copy_from_slice(&c.to_be_bytes());
        }
        IpProtocol::Udp if l4.len() >= UDP_CHECKSUM_AT + 2 => {
            let at = UDP_CHECKSUM_AT..UDP_CHECKSUM_AT + 2;
            let old = u16::from_be_bytes(read(l4, at.clone()));
            let c = if old == 0 { 0 } else { checksum::udp_transmitted(update(old)) };
            l4[at].copy_from_slice(&c.to_be_bytes());
        }
        IpProtocol::Sctp if whole => {
            if let Ok(mut sctp) = SctpPacket::new_checked(l4) {
                sctp.fill_checksum();
            }
        }
        _ => {}
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Echo Request, identifier 0x1234, sequence 1, 11 bytes of data (an odd length).
    static ECHO_REQUEST: [u8; 19] = [
        0x08, 0x00, 0x96, 0x00, // type 8, code 0, checksum 0x9600
        0x12, 0x34, 0x00, 0x01, // identifier, sequence number
        b't', b'o', b'r', b'i', b'i', b' ', b'p', b'i', b'n', b'g', b'!',
    ];

    #[test]
    fn deconstruct() {
        let icmp = Icmpv4Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(icmp.msg_type(), Icmpv4Type::EchoRequest);
        assert_eq!(icmp.msg_code(), 0);
        assert_eq!(icmp.checksum(), 0x9600);
        assert_eq!(icmp.echo_ident(), 0x1234);
        assert_eq!(icmp.echo_seq_no(), 1);
        assert_eq!(icmp.rest_of_header(), 0x1234_0001);
        assert_eq!(icmp.next_hop_mtu(), 1);
        assert_eq!(icmp.data(), b"torii ping!");
        assert!(icmp.verify_checksum());
        assert_eq!(icmp.as_ref(), &ECHO_REQUEST[..]);
        assert_eq!(icmp.into_inner(), &ECHO_REQUEST[..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 19];
        let mut icmp = Icmpv4Packet::new_unchecked(&mut bytes[..]);
        icmp.set_msg_type(Icmpv4Type::EchoRequest);
        icmp.set_msg_code(0);
        icmp.set_echo_ident(0x1234);
        icmp.set_echo_seq_no(1);
        icmp.data_mut().copy_from_slice(b"torii ping!");
        icmp.fill_checksum();
        assert_eq!(bytes, ECHO_REQUEST);
    }

    #[test]
    fn echo_reply_in_place() {
        // Turning a request into a reply changes one 16-bit word (type, code): RFC 1624 update.
        let mut bytes = ECHO_REQUEST;
        let mut icmp = Icmpv4Packet::new_checked(&mut bytes[..]).unwrap();
        icmp.set_msg_type(Icmpv4Type::EchoReply);
        let check = checksum::update16(icmp.checksum(), 0x0800, 0x0000);
        icmp.set_checksum(check);
        assert!(icmp.verify_checksum());
        let mut full = bytes;
        Icmpv4Packet::new_unchecked(&mut full[..]).fill_checksum();
        assert_eq!(bytes, full);
    }

    #[test]
    fn frag_needed() {
        let mut bytes = [0xa5u8; 8 + 28];
        let mut icmp = Icmpv4Packet::new_unchecked(&mut bytes[..]);
        icmp.set_msg_type(Icmpv4Type::DstUnreachable);
        icmp.set_msg_code(FRAG_NEEDED);
        icmp.set_rest_of_header(0);
        icmp.set_next_hop_mtu(1450);
        icmp.data_mut().fill(0);
        icmp.fill_checksum();
        assert_eq!(&bytes[..2], &[3, 4]);
        assert_eq!(&bytes[4..8], &[0, 0, 0x05, 0xaa]);
        let icmp = Icmpv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(icmp.msg_type(), Icmpv4Type::DstUnreachable);
        assert_eq!(icmp.next_hop_mtu(), 1450);
        assert!(icmp.verify_checksum());
        // The sum of the message is 0x0304 + 0x05aa; the checksum is its complement.
        assert_eq!(icmp.checksum(), !(0x0304u16 + 0x05aa));
    }

    #[test]
    fn bad_checksum_detected() {
        let mut bytes = ECHO_REQUEST;
        bytes[18] ^= 0x01;
        assert!(!Icmpv4Packet::new_checked(&bytes[..]).unwrap().verify_checksum());
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..Icmpv4Packet::<&[u8]>::HEADER_LEN {
            assert_eq!(Icmpv4Packet::new_checked(&ECHO_REQUEST[..len]), Err(ParseError::Truncated), "len {len}");
        }
        let header_only = Icmpv4Packet::new_checked(&ECHO_REQUEST[..8]).unwrap();
        assert!(header_only.data().is_empty());
    }

    #[test]
    fn type_round_trip() {
        for value in 0..=u8::MAX {
            assert_eq!(u8::from(Icmpv4Type::from(value)), value);
        }
        assert_eq!(Icmpv4Type::from(0), Icmpv4Type::EchoReply);
        assert_eq!(Icmpv4Type::from(3), Icmpv4Type::DstUnreachable);
        assert_eq!(Icmpv4Type::from(8), Icmpv4Type::EchoRequest);
        assert_eq!(Icmpv4Type::from(11), Icmpv4Type::TimeExceeded);
        assert_eq!(Icmpv4Type::from(12), Icmpv4Type::ParamProblem);
        assert_eq!(Icmpv4Type::from(5), Icmpv4Type::Unknown(5));
        let errors: Vec<u8> = (0..=u8::MAX).filter(|&t| Icmpv4Type::from(t).is_error()).collect();
        assert_eq!(errors, [3, 11, 12]);
    }

    use crate::wire::{SctpPacket, TcpPacket, UdpPacket};

    const SNAT: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 70, 0, 1), 1025);
    const ENDPOINT: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 70, 0, 21), 7007);
    const CLIENT: (Ipv4Addr, u16) = (Ipv4Addr::new(198, 51, 100, 10), 40000);
    const VIP: (Ipv4Addr, u16) = (Ipv4Addr::new(203, 0, 113, 10), 7);

    /// A whole IPv4 datagram of `protocol` from `src` to `dst` with `payload_len` bytes after a
    /// transport header, every checksum filled.
    fn datagram(protocol: IpProtocol, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload_len: usize) -> Vec<u8> {
        let l4_len = match protocol {
            IpProtocol::Tcp => 20,
            IpProtocol::Sctp => 12,
            _ => 8,
        } + payload_len;
        let mut b = vec![0u8; 20 + l4_len];
        Ipv4Packet::new_unchecked(&mut b[..]).fill_header(src.0, dst.0, protocol, l4_len as u16, 63);
        for (i, x) in b[20..].iter_mut().enumerate() {
            *x = (i * 13 + 5) as u8;
        }
        b[20..22].copy_from_slice(&src.1.to_be_bytes());
        b[22..24].copy_from_slice(&dst.1.to_be_bytes());
        match protocol {
            IpProtocol::Tcp => {
                let mut t = TcpPacket::new_unchecked(&mut b[20..]);
                t.set_header_len(20);
                t.fill_checksum(src.0, dst.0);
            }
            IpProtocol::Udp => {
                let mut u = UdpPacket::new_unchecked(&mut b[20..]);
                u.set_len(l4_len as u16);
                u.fill_checksum(src.0, dst.0);
            }
            _ => SctpPacket::new_unchecked(&mut b[20..]).fill_checksum(),
        }
        b
    }

    #[test]
    fn quote_translates_to_the_datagram_the_peer_sent() {
        // What the gateway sent to the endpoint (SNAT → endpoint), quoted as routers do, is
        // rewritten into what the client sent (client → VIP): byte for byte the same quote.
        for (protocol, quote_len) in [
            (IpProtocol::Udp, 28),  // RFC 792 minimum: header + 8 bytes (UDP checksum inside)
            (IpProtocol::Tcp, 28),  // TCP checksum not quoted
            (IpProtocol::Tcp, 60),  // RFC 1812: the whole segment
            (IpProtocol::Sctp, 40), // SCTP CRC quoted, its packet not: left alone
            (IpProtocol::Sctp, 52), // the whole SCTP packet: CRC recomputed
        ] {
            let sent = datagram(protocol, SNAT, ENDPOINT, 20);
            let want = datagram(protocol, CLIENT, VIP, 20);
            let mut quote = sent[..quote_len].to_vec();
            let mut q = QuotedIpv4::new_checked(&mut quote[..]).unwrap();
            assert_eq!(q.ports(), Some((SNAT.1, ENDPOINT.1)));
            assert_eq!((q.src_addr(), q.dst_addr(), q.next_header()), (SNAT.0, ENDPOINT.0, protocol));
            q.translate(CLIENT.0, CLIENT.1, VIP.0, VIP.1);
            if protocol == IpProtocol::Sctp && quote_len < want.len() {
                // Everything but the (unchanged, uncheckable) CRC matches.
                assert_eq!(&quote[..28], &want[..28]);
                assert_eq!(&quote[28..32], &sent[28..32]);
                assert_eq!(&quote[32..], &want[32..quote_len]);
            } else {
                assert_eq!(quote, &want[..quote_len], "{protocol:?} quoting {quote_len} bytes");
            }
            let q = QuotedIpv4::new_checked(&quote[..]).unwrap();
            assert!(q.header().verify_checksum());
            assert_eq!(q.ports(), Some((CLIENT.1, VIP.1)));
        }
    }

    #[test]
    fn quoted_udp_without_checksum_stays_without() {
        let mut quote = datagram(IpProtocol::Udp, SNAT, ENDPOINT, 4)[..28].to_vec();
        quote[26..28].fill(0);
        QuotedIpv4::new_checked(&mut quote[..]).unwrap().translate(CLIENT.0, CLIENT.1, VIP.0, VIP.1);
        assert_eq!(&quote[26..28], &[0, 0]);
    }

    #[test]
    fn quote_without_ports() {
        let full = datagram(IpProtocol::Udp, SNAT, ENDPOINT, 20);
        // A quoted non-first fragment carries no transport header.
        let mut frag = full[..28].to_vec();
        Ipv4Packet::new_unchecked(&mut frag[..]).set_frag_offset(1480);
        let mut q = QuotedIpv4::new_checked(&mut frag[..]).unwrap();
        assert_eq!(q.ports(), None);
        let before = q.buffer.to_vec();
        q.translate(CLIENT.0, CLIENT.1, VIP.0, VIP.1);
        assert_eq!(q.buffer, &before[..], "nothing to translate without ports");
        // Fewer than 4 transport bytes, or a protocol without ports.
        assert_eq!(QuotedIpv4::new_checked(&full[..23]).unwrap().ports(), None);
        let mut icmp = full[..28].to_vec();
        icmp[9] = 1;
        assert_eq!(QuotedIpv4::new_checked(&icmp[..]).unwrap().ports(), None);
        // The transport part stops at the quoted Total Length (a router's padding is not in it).
        let mut short = datagram(IpProtocol::Udp, SNAT, ENDPOINT, 0);
        short.extend_from_slice(&[0xee; 4]);
        assert_eq!(QuotedIpv4::new_checked(&short[..]).unwrap().transport().len(), 8);
    }

    #[test]
    fn quote_rejects_what_it_cannot_read() {
        let full = datagram(IpProtocol::Udp, SNAT, ENDPOINT, 20);
        for len in 0..20 {
            assert_eq!(QuotedIpv4::new_checked(&full[..len]), Err(ParseError::Truncated));
        }
        let mut options = full.clone();
        options[0] = 0x46; // IHL 6: 24 bytes of header
        assert_eq!(QuotedIpv4::new_checked(&options[..23]), Err(ParseError::Truncated));
        assert!(QuotedIpv4::new_checked(&options[..24]).is_ok());
        let mut v6 = full.clone();
        v6[0] = 0x65;
        assert_eq!(QuotedIpv4::new_checked(&v6[..]), Err(ParseError::Malformed));
        let mut ihl4 = full;
        ihl4[0] = 0x44;
        assert_eq!(QuotedIpv4::new_checked(&ihl4[..]), Err(ParseError::Malformed));
    }

    proptest::proptest! {
        #[test]
        fn quote_never_panics(mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96),
                              a in proptest::prelude::any::<u32>(), p in proptest::prelude::any::<u16>()) {
            if !bytes.is_empty() {
                bytes[0] = 0x45 | (bytes[0] & 0x0f);
            }
            if let Ok(mut q) = QuotedIpv4::new_checked(&mut bytes[..]) {
                let _ = (q.src_addr(), q.dst_addr(), q.next_header(), q.transport().len(), q.ports());
                q.translate(Ipv4Addr::from(a), p, Ipv4Addr::from(!a), !p);
            }
        }
    }
}
