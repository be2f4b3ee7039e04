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

use super::{checksum, read, ParseError};

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
            Icmpv4Type::Unknown(other) => other,
        }
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
        assert_eq!(Icmpv4Type::from(5), Icmpv4Type::Unknown(5));
    }
}
