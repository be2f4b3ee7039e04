//! UDP datagrams ([RFC 768]).
//!
//! ```text
//!  0      7 8     15 16    23 24    31
//! +--------+--------+--------+--------+
//! |     Source      |   Destination   |
//! |      Port       |      Port       |
//! +--------+--------+--------+--------+
//! |     Length      |    Checksum     |
//! +--------+--------+--------+--------+
//! |          data octets ...
//! ```
//!
//! The view's buffer is the IPv4 payload; the Length field (header plus data, in bytes) says where
//! the datagram ends, so [`UdpPacket::payload`] and the checksum stop there. `new_checked` accepts
//! a buffer of at least 8 bytes whose Length is at least 8 and fits in the buffer; after it
//! succeeds no accessor or setter panics (Length is re-read and clamped on every access).
//!
//! The checksum covers the IPv4 pseudo-header and the datagram. A transmitted checksum of zero
//! means "none" (allowed over IPv4); a computed zero is transmitted as `0xffff` (see
//! [`checksum::udp_transmitted`], and [`checksum::udp_update16`] for NAT rewrites).
//!
//! [RFC 768]: https://www.rfc-editor.org/rfc/rfc768

use core::ops::Range;

use super::checksum::{self, PseudoHeaderAddr};
use super::{read, ParseError};

mod field {
    use crate::wire::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// The IP protocol number of UDP, for the pseudo-header.
const PROTOCOL_UDP: u8 = 17;

/// A read/write view of a UDP datagram; the buffer is the IPv4 payload, the datagram is its first
/// Length bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Length of the header in bytes.
    pub const HEADER_LEN: usize = field::CHECKSUM.end;

    /// Wraps `buffer` without checking it; accessors of fixed fields panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps `buffer` after checking the header and the Length field ([RFC 768]).
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if the buffer is shorter than 8 bytes or than Length;
    /// - [`ParseError::Malformed`] if Length is below 8.
    ///
    /// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let packet = UdpPacket { buffer };
        let len = packet.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let datagram_len = usize::from(packet.len());
        if datagram_len < Self::HEADER_LEN {
            return Err(ParseError::Malformed);
        }
        if datagram_len > len {
            return Err(ParseError::Truncated);
        }
        Ok(packet)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port (0 if unused).
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::SRC_PORT))
    }

    /// The destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::DST_PORT))
    }

    /// The Length field: header plus data, in bytes (8..=buffer length after `new_checked`).
    #[inline]
    #[allow(clippy::len_without_is_empty)] // a header field, not a collection
    pub fn len(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::LENGTH))
    }

    /// The Checksum field (host order); 0 means the sender computed none.
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::CHECKSUM))
    }

    /// The datagram: `..Length`, clamped to the buffer.
    #[inline]
    fn datagram_range(&self) -> Range<usize> {
        0..usize::from(self.len()).min(self.buffer.as_ref().len())
    }

    /// The data: after the 8-byte header, up to Length (bytes past Length are not part of it).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = self.datagram_range().end;
        &data[Self::HEADER_LEN.min(end)..end]
    }

    /// Whether the checksum is correct for a datagram carried from `src` to `dst`. A field of 0
    /// (no checksum) is accepted over IPv4 ([RFC 768]) and rejected over IPv6 ([RFC 8200]
    /// § 8.1); otherwise the one's complement sum of the pseudo-header and the datagram (Length
    /// bytes) must be `0xffff`.
    ///
    /// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
    /// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
    #[inline]
    pub fn verify_checksum<A: PseudoHeaderAddr>(&self, src: A, dst: A) -> bool {
        if self.checksum() == 0 {
            return A::UDP_CHECKSUM_OPTIONAL;
        }
        // The pseudo-header's length is Length, the datagram's (`PseudoHeaderAddr::verifies`
        // takes the data's): a Length past the buffer sums what the buffer holds.
        match self.buffer.as_ref().get(..usize::from(self.len())) {
            Some(datagram) => A::verifies(datagram, src, dst, PROTOCOL_UDP),
            None => checksum::fold(self.sum(src, dst)) == 0xffff,
        }
    }

    /// The partial sum of the pseudo-header and the datagram, checksum field included.
    #[inline]
    fn sum<A: PseudoHeaderAddr>(&self, src: A, dst: A) -> u32 {
        let pseudo = A::pseudo_header(src, dst, PROTOCOL_UDP, u32::from(self.len()));
        checksum::partial(&self.buffer.as_ref()[self.datagram_range()], pseudo)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port (the checksum is not updated).
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the destination port (the checksum is not updated).
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the Length field (header plus data, in bytes).
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the Checksum field (host order; 0 means "none"). See also [`Self::fill_checksum`] and
    /// [`checksum::udp_update16`] / [`checksum::udp_update_addr`] for NAT rewrites.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// The data, mutable (after the header, up to Length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.datagram_range().end;
        &mut self.buffer.as_mut()[Self::HEADER_LEN.min(end)..end]
    }

    /// Computes the checksum over the pseudo-header of `src`'s family (`src`, `dst`, protocol
    /// 17, Length) and the datagram, and stores it; a computed 0 is stored as `0xffff` ([RFC 768],
    /// [RFC 8200] § 8.1). Set Length first.
    ///
    /// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
    /// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
    #[inline]
    pub fn fill_checksum<A: PseudoHeaderAddr>(&mut self, src: A, dst: A) {
        self.set_checksum(0);
        let check = checksum::udp_transmitted(checksum::finish(self.sum(src, dst)));
        self.set_checksum(check);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for UdpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
    const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);

    /// 198.51.100.7:53000 → 192.0.2.10:53 carrying "abcd".
    static DATAGRAM: [u8; 12] = [
        0xcf, 0x08, 0x00, 0x35, // ports 53000 → 53
        0x00, 0x0c, 0x7f, 0x8c, // length 12, checksum 0x7f8c
        b'a', b'b', b'c', b'd',
    ];

    #[test]
    fn deconstruct() {
        let udp = UdpPacket::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(udp.src_port(), 53000);
        assert_eq!(udp.dst_port(), 53);
        assert_eq!(udp.len(), 12);
        assert_eq!(udp.checksum(), 0x7f8c);
        assert_eq!(udp.payload(), b"abcd");
        assert!(udp.verify_checksum(CLIENT, VIP));
        assert!(!udp.verify_checksum(VIP, CLIENT.to_bits().wrapping_add(1).into()));
        assert_eq!(udp.as_ref(), &DATAGRAM[..]);
        assert_eq!(udp.into_inner(), &DATAGRAM[..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 12];
        let mut udp = UdpPacket::new_unchecked(&mut bytes[..]);
        udp.set_src_port(53000);
        udp.set_dst_port(53);
        udp.set_len(12);
        udp.payload_mut().copy_from_slice(b"abcd");
        udp.fill_checksum(CLIENT, VIP);
        assert_eq!(bytes, DATAGRAM);
        let mut udp = UdpPacket::new_unchecked(&mut bytes[..]);
        udp.set_checksum(0x1234);
        assert_eq!(udp.checksum(), 0x1234);
    }

    #[test]
    fn payload_stops_at_length() {
        let mut padded = [0xeeu8; 18];
        padded[..12].copy_from_slice(&DATAGRAM);
        let udp = UdpPacket::new_checked(&padded[..]).unwrap();
        assert_eq!(udp.payload(), b"abcd");
        assert!(udp.verify_checksum(CLIENT, VIP));
    }

    #[test]
    fn zero_checksum_means_none() {
        let mut bytes = DATAGRAM;
        bytes[6..8].copy_from_slice(&[0, 0]);
        let udp = UdpPacket::new_checked(&bytes[..]).unwrap();
        assert!(udp.verify_checksum(CLIENT, VIP));
        assert!(udp.verify_checksum(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST));
        // Over IPv6 a zero checksum is invalid (RFC 8200 § 8.1).
        let v6 = std::net::Ipv6Addr::LOCALHOST;
        assert!(!udp.verify_checksum(v6, v6));
    }

    #[test]
    fn ipv6_checksum() {
        // The same datagram 2001:db8::7 → 2001:db8::a: fill, verify, and flip a bit.
        let (src, dst): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            ("2001:db8::7".parse().unwrap(), "2001:db8::a".parse().unwrap());
        let mut bytes = DATAGRAM;
        UdpPacket::new_checked(&mut bytes[..]).unwrap().fill_checksum(src, dst);
        let udp = UdpPacket::new_checked(&bytes[..]).unwrap();
        assert!(udp.verify_checksum(src, dst));
        assert!(!udp.verify_checksum(src, std::net::Ipv6Addr::LOCALHOST));
        let mut zeroed = DATAGRAM;
        zeroed[6..8].copy_from_slice(&[0, 0]);
        let want = checksum::finish(checksum::partial(&zeroed, checksum::pseudo_header_v6(src, dst, 17, 12)));
        assert_eq!(udp.checksum(), checksum::udp_transmitted(want));
    }

    #[test]
    fn computed_zero_is_sent_as_ones() {
        // Choose the last data word so that the one's complement sum is 0xffff (computed 0).
        let mut bytes = DATAGRAM;
        bytes[6..8].copy_from_slice(&[0, 0]);
        bytes[10..12].copy_from_slice(&[0, 0]);
        let pseudo = checksum::pseudo_header_v4(CLIENT, VIP, 17, 12);
        let word = checksum::finish(checksum::partial(&bytes, pseudo));
        bytes[10..12].copy_from_slice(&word.to_be_bytes());
        assert_eq!(checksum::finish(checksum::partial(&bytes, pseudo)), 0);
        let mut udp = UdpPacket::new_checked(&mut bytes[..]).unwrap();
        udp.fill_checksum(CLIENT, VIP);
        assert_eq!(udp.checksum(), 0xffff);
        assert!(udp.verify_checksum(CLIENT, VIP));
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..DATAGRAM.len() {
            assert_eq!(UdpPacket::new_checked(&DATAGRAM[..len]), Err(ParseError::Truncated), "len {len}");
        }
    }

    #[test]
    fn rejects_malformed() {
        for len in 0..8u16 {
            let mut bytes = DATAGRAM;
            bytes[4..6].copy_from_slice(&len.to_be_bytes());
            assert_eq!(UdpPacket::new_checked(&bytes[..]), Err(ParseError::Malformed), "length {len}");
        }
        let mut bytes = DATAGRAM;
        bytes[4..6].copy_from_slice(&13u16.to_be_bytes());
        assert_eq!(UdpPacket::new_checked(&bytes[..]), Err(ParseError::Truncated));
        let mut bytes = DATAGRAM;
        bytes[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert!(UdpPacket::new_checked(&bytes[..]).unwrap().payload().is_empty());
    }

    #[test]
    fn dnat_with_incremental_checksum() {
        let backend = Ipv4Addr::new(10, 244, 1, 5);
        let mut bytes = DATAGRAM;
        let mut udp = UdpPacket::new_checked(&mut bytes[..]).unwrap();
        let mut check = udp.checksum();
        check = checksum::udp_update_addr(check, VIP, backend);
        check = checksum::udp_update16(check, udp.dst_port(), 5353);
        udp.set_dst_port(5353);
        udp.set_checksum(check);
        assert!(udp.verify_checksum(CLIENT, backend));
        let mut full = bytes;
        UdpPacket::new_unchecked(&mut full[..]).fill_checksum(CLIENT, backend);
        assert_eq!(bytes, full);
    }

    proptest::proptest! {
        /// `verify_checksum` against the folded sum of the pseudo-header and Length bytes,
        /// over both families, with any bytes and Length (within the buffer or past it), the
        /// checksum perhaps made right first.
        #[test]
        fn verify_is_the_folded_sum(
            mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 8..300),
            length in proptest::prelude::any::<u16>(),
            within in proptest::prelude::any::<bool>(),
            fix in proptest::prelude::any::<bool>(),
            v4 in proptest::prelude::any::<(u32, u32)>(),
            v6 in proptest::prelude::any::<(u128, u128)>(),
        ) {
            let length = if within { length % (bytes.len() as u16 + 1) } else { length };
            bytes[4..6].copy_from_slice(&length.to_be_bytes());
            let (src4, dst4) = (Ipv4Addr::from_bits(v4.0), Ipv4Addr::from_bits(v4.1));
            let (src6, dst6) = (std::net::Ipv6Addr::from_bits(v6.0), std::net::Ipv6Addr::from_bits(v6.1));
            if fix {
                UdpPacket::new_unchecked(&mut bytes[..]).fill_checksum(src4, dst4);
            }
            let udp = UdpPacket::new_unchecked(&bytes[..]);
            let folded = |sum: u32| udp.checksum() != 0 && checksum::fold(sum) == 0xffff;
            proptest::prop_assert_eq!(
                udp.verify_checksum(src4, dst4),
                udp.checksum() == 0 || folded(udp.sum(src4, dst4))
            );
            proptest::prop_assert_eq!(udp.verify_checksum(src6, dst6), folded(udp.sum(src6, dst6)));
            if fix && (8..=bytes.len()).contains(&usize::from(length)) {
                proptest::prop_assert!(udp.verify_checksum(src4, dst4));
            }
        }
    }

    #[test]
    fn setters_cannot_make_accessors_panic() {
        let mut bytes = DATAGRAM;
        let mut udp = UdpPacket::new_checked(&mut bytes[..]).unwrap();
        for len in [0, 7, 8, 12, 13, 0xffff] {
            udp.set_len(len);
            let _ = (udp.payload().len(), udp.payload_mut().len(), udp.verify_checksum(CLIENT, VIP));
            udp.fill_checksum(CLIENT, VIP);
        }
    }
}
