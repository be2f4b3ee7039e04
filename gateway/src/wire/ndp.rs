//! Neighbor Discovery for IPv6 ([RFC 4861]): the Neighbor Solicitation (type 135, § 4.3) and
//! Neighbor Advertisement (type 136, § 4.4) messages with their link-layer address options
//! (§ 4.6.1) — the two messages with which the gateway resolves endpoints and answers for its
//! own addresses and VIPs.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! |R|S|O|                     Reserved (NS: all reserved)         |
//! |                       Target Address (128 bits)               |
//! |   Options ...  (Type, Length in 8-byte units, value)
//! ```
//!
//! The view's buffer is the whole ICMPv6 message. `new_checked` applies the checks of
//! [RFC 4861] § 7.1.1 and § 7.1.2 that need only the message: type 135 or 136, code 0, at least
//! 24 bytes, every option's length non-zero and within the message, target not multicast.
//! [`NdpPacket::validate`] adds those that need the IPv6 header and are the receiver's to
//! check: Hop Limit 255 (so the message was not forwarded by a router), the checksum, and the
//! rules for unspecified sources and multicast destinations. After `new_checked` succeeds
//! nothing panics.
//!
//! [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861

use std::net::Ipv6Addr;

use super::ethernet::MacAddr;
use super::icmpv6::{Icmpv6Packet, Icmpv6Type};
use super::ipv6::solicited_node;
use super::{read, ParseError};

mod field {
    use crate::wire::{Field, Rest};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const FLAGS: usize = 4;
    pub const RESERVED: Field = 4..8;
    pub const TARGET: Field = 8..24;
    pub const OPTIONS: Rest = 24..;
}

/// The Hop Limit every Neighbor Discovery message is sent with and must arrive with
/// ([RFC 4861] § 7.1.1: "The IP Hop Limit field has a value of 255, i.e., the packet could not
/// possibly have been forwarded by a router").
///
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-7.1.1
pub const HOP_LIMIT: u8 = 255;

/// Option type Source Link-Layer Address ([RFC 4861] § 4.6.1).
///
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-4.6.1
pub const OPTION_SOURCE_LL_ADDR: u8 = 1;
/// Option type Target Link-Layer Address ([RFC 4861] § 4.6.1).
///
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-4.6.1
pub const OPTION_TARGET_LL_ADDR: u8 = 2;

/// Length of a link-layer address option for Ethernet: type, length (1, in 8-byte units) and a
/// 6-byte MAC address ([RFC 2464] § 6).
///
/// [RFC 2464]: https://www.rfc-editor.org/rfc/rfc2464#section-6
pub const LL_OPTION_LEN: usize = 8;

/// The Router flag of a Neighbor Advertisement.
pub const FLAG_ROUTER: u8 = 0x80;
/// The Solicited flag: sent in response to a Neighbor Solicitation.
pub const FLAG_SOLICITED: u8 = 0x40;
/// The Override flag: the advertisement should replace a cached link-layer address.
pub const FLAG_OVERRIDE: u8 = 0x20;

/// A read/write view of a Neighbor Solicitation or Neighbor Advertisement (the whole ICMPv6
/// message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NdpPacket<T> {
    /// Length of a Neighbor Solicitation or Advertisement without options.
    pub const HEADER_LEN: usize = field::OPTIONS.start;

    /// Wraps `buffer` without checking it; accessors panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        NdpPacket { buffer }
    }

    /// Wraps `buffer` after the message-only checks of [RFC 4861] § 7.1.1 / § 7.1.2.
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if the buffer is shorter than 24 bytes;
    /// - [`ParseError::Malformed`] if the type is not 135 or 136, the code is not 0, the target
    ///   is a multicast address, or an option has length 0 or runs past the message.
    ///
    /// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-7.1.1
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let packet = NdpPacket { buffer };
        let data = packet.buffer.as_ref();
        if data.len() < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let kind = packet.msg_type();
        if !matches!(kind, Icmpv6Type::NeighborSolicit | Icmpv6Type::NeighborAdvert)
            || data[field::CODE] != 0
            || packet.target_addr().is_multicast()
        {
            return Err(ParseError::Malformed);
        }
        let mut options = &data[field::OPTIONS];
        while !options.is_empty() {
            let len = match options {
                [_, units, ..] if *units != 0 => usize::from(*units) * 8,
                _ => return Err(ParseError::Malformed),
            };
            if len > options.len() {
                return Err(ParseError::Malformed);
            }
            options = &options[len..];
        }
        Ok(packet)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message type: [`Icmpv6Type::NeighborSolicit`] or [`Icmpv6Type::NeighborAdvert`]
    /// after `new_checked`.
    #[inline]
    pub fn msg_type(&self) -> Icmpv6Type {
        Icmpv6Type::from(self.buffer.as_ref()[field::TYPE])
    }

    /// The R, S and O flags of an advertisement ([`FLAG_ROUTER`], [`FLAG_SOLICITED`],
    /// [`FLAG_OVERRIDE`]); reserved (zero) in a solicitation.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0xe0
    }

    /// The Target Address: the address being resolved (solicitation) or whose link-layer
    /// address is advertised (advertisement).
    #[inline]
    pub fn target_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(read::<16>(self.buffer.as_ref(), field::TARGET))
    }

    /// The Ethernet address carried by the first option of type `kind`
    /// ([`OPTION_SOURCE_LL_ADDR`] or [`OPTION_TARGET_LL_ADDR`]), if any; an option of that type
    /// shorter than 8 bytes is ignored. Options are walked with the same bounds `new_checked`
    /// enforced, so this never panics.
    pub fn link_layer_option(&self, kind: u8) -> Option<MacAddr> {
        let data = self.buffer.as_ref();
        let mut options = data.get(field::OPTIONS)?;
        while let [ty, units, ..] = options {
            let len = usize::from(*units) * 8;
            if len == 0 || len > options.len() {
                return None;
            }
            if *ty == kind && len >= LL_OPTION_LEN {
                return Some(MacAddr(read(options, 2..8)));
            }
            options = &options[len..];
        }
        None
    }

    /// The receiver's validity checks of [RFC 4861] § 7.1.1 (solicitations) and § 7.1.2
    /// (advertisements) for a message that arrived from `src` to `dst` with `hop_limit`:
    /// Hop Limit 255, a correct checksum, and
    /// - solicitation from the unspecified address (Duplicate Address Detection): `dst` is a
    ///   solicited-node multicast address and there is no source link-layer address option;
    /// - advertisement to a multicast address: the Solicited flag is clear.
    ///
    /// # Errors
    ///
    /// [`ParseError::Malformed`] when a check fails (the message must be silently discarded).
    ///
    /// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-7.1.1
    pub fn validate(&self, hop_limit: u8, src: Ipv6Addr, dst: Ipv6Addr) -> Result<(), ParseError> {
        if hop_limit != HOP_LIMIT || !Icmpv6Packet::new_unchecked(self.buffer.as_ref()).verify_checksum(src, dst) {
            return Err(ParseError::Malformed);
        }
        let ok = match self.msg_type() {
            Icmpv6Type::NeighborSolicit if src.is_unspecified() => {
                dst == solicited_node(self.target_addr()) && self.link_layer_option(OPTION_SOURCE_LL_ADDR).is_none()
            }
            Icmpv6Type::NeighborAdvert => !(dst.is_multicast() && self.flags() & FLAG_SOLICITED != 0),
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(ParseError::Malformed)
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NdpPacket<T> {
    /// Writes the fixed part of a solicitation (`kind` 135) or advertisement (136): type, code 0,
    /// the flags (advertisements; pass 0 for a solicitation) with the reserved bits zero, and
    /// the target. The checksum is left for [`Icmpv6Packet::fill_checksum`].
    pub fn fill_header(&mut self, kind: Icmpv6Type, flags: u8, target: Ipv6Addr) {
        let data = self.buffer.as_mut();
        data[field::TYPE] = u8::from(kind);
        data[field::CODE] = 0;
        data[field::RESERVED].copy_from_slice(&[flags & 0xe0, 0, 0, 0]);
        data[field::TARGET].copy_from_slice(&target.octets());
    }

    /// Writes one Ethernet link-layer address option of type `kind` right after the fixed part
    /// (bytes 24..32). The buffer must be at least [`Self::HEADER_LEN`] + [`LL_OPTION_LEN`]
    /// long; shorter buffers are left unchanged.
    pub fn set_link_layer_option(&mut self, kind: u8, mac: MacAddr) {
        if let Some(option) = self.buffer.as_mut().get_mut(field::OPTIONS.start..field::OPTIONS.start + LL_OPTION_LEN) {
            option[0] = kind;
            option[1] = (LL_OPTION_LEN / 8) as u8;
            option[2..].copy_from_slice(&mac.0);
        }
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for NdpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTER: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const TARGET: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
    const MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);

    /// A Neighbor Solicitation from fe80::1 (MAC 02:00:00:00:00:01) for 2001:db8::10, to its
    /// solicited-node address ff02::1:ff00:10, with a source link-layer address option.
    /// Checksum 0x4b43 computed independently of this crate.
    static SOLICIT: [u8; 32] = [
        0x87, 0x00, 0x4b, 0x43, // type 135, code 0, checksum
        0x00, 0x00, 0x00, 0x00, // reserved
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, // target
        0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // SLLA option
    ];

    fn sn() -> Ipv6Addr {
        solicited_node(TARGET)
    }

    #[test]
    fn deconstruct_solicitation() {
        let ns = NdpPacket::new_checked(&SOLICIT[..]).unwrap();
        assert_eq!(ns.msg_type(), Icmpv6Type::NeighborSolicit);
        assert_eq!(ns.flags(), 0);
        assert_eq!(ns.target_addr(), TARGET);
        assert_eq!(ns.link_layer_option(OPTION_SOURCE_LL_ADDR), Some(MAC));
        assert_eq!(ns.link_layer_option(OPTION_TARGET_LL_ADDR), None);
        assert_eq!(ns.validate(255, ROUTER, sn()), Ok(()));
        assert_eq!(ns.validate(254, ROUTER, sn()), Err(ParseError::Malformed), "forwarded by a router");
        assert_eq!(ns.validate(255, TARGET, sn()), Err(ParseError::Malformed), "checksum");
        assert_eq!(ns.as_ref(), &SOLICIT[..]);
    }

    #[test]
    fn construct_solicitation() {
        let mut bytes = [0xa5u8; 32];
        let mut ns = NdpPacket::new_unchecked(&mut bytes[..]);
        ns.fill_header(Icmpv6Type::NeighborSolicit, 0, TARGET);
        ns.set_link_layer_option(OPTION_SOURCE_LL_ADDR, MAC);
        Icmpv6Packet::new_unchecked(&mut bytes[..]).fill_checksum(ROUTER, sn());
        assert_eq!(bytes, SOLICIT);
    }

    #[test]
    fn advertisement() {
        let mut bytes = [0xa5u8; 32];
        let mut na = NdpPacket::new_unchecked(&mut bytes[..]);
        na.fill_header(Icmpv6Type::NeighborAdvert, FLAG_SOLICITED | FLAG_OVERRIDE | 0x1f, TARGET);
        na.set_link_layer_option(OPTION_TARGET_LL_ADDR, MAC);
        Icmpv6Packet::new_unchecked(&mut bytes[..]).fill_checksum(TARGET, ROUTER);
        assert_eq!(&bytes[..8], &[136, 0, bytes[2], bytes[3], 0x60, 0, 0, 0]);
        let na = NdpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(na.flags(), FLAG_SOLICITED | FLAG_OVERRIDE);
        assert_eq!(na.link_layer_option(OPTION_TARGET_LL_ADDR), Some(MAC));
        assert_eq!(na.validate(255, TARGET, ROUTER), Ok(()));
        // Solicited advertisements are never multicast (RFC 4861 § 7.1.2).
        let mut multicast = bytes;
        Icmpv6Packet::new_unchecked(&mut multicast[..]).fill_checksum(TARGET, crate::wire::ipv6::ALL_NODES);
        let na = NdpPacket::new_checked(&multicast[..]).unwrap();
        assert_eq!(na.validate(255, TARGET, crate::wire::ipv6::ALL_NODES), Err(ParseError::Malformed));
    }

    #[test]
    fn duplicate_address_detection_rules() {
        // From :: to the solicited-node address, without SLLA: valid.
        let mut bytes = SOLICIT;
        let mut ns = NdpPacket::new_unchecked(&mut bytes[..24]);
        ns.fill_header(Icmpv6Type::NeighborSolicit, 0, TARGET);
        Icmpv6Packet::new_unchecked(&mut bytes[..24]).fill_checksum(Ipv6Addr::UNSPECIFIED, sn());
        let ns = NdpPacket::new_checked(&bytes[..24]).unwrap();
        assert_eq!(ns.validate(255, Ipv6Addr::UNSPECIFIED, sn()), Ok(()));
        // From :: with an SLLA option: invalid.
        let mut bytes = SOLICIT;
        Icmpv6Packet::new_unchecked(&mut bytes[..]).fill_checksum(Ipv6Addr::UNSPECIFIED, sn());
        let ns = NdpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(ns.validate(255, Ipv6Addr::UNSPECIFIED, sn()), Err(ParseError::Malformed));
        // From :: to a unicast address: invalid.
        let mut bytes = SOLICIT;
        Icmpv6Packet::new_unchecked(&mut bytes[..24]).fill_checksum(Ipv6Addr::UNSPECIFIED, TARGET);
        let ns = NdpPacket::new_checked(&bytes[..24]).unwrap();
        assert_eq!(ns.validate(255, Ipv6Addr::UNSPECIFIED, TARGET), Err(ParseError::Malformed));
    }

    #[test]
    fn rejects_malformed() {
        for len in 0..24 {
            assert_eq!(NdpPacket::new_checked(&SOLICIT[..len]), Err(ParseError::Truncated), "len {len}");
        }
        type Mutation = fn(&mut [u8; 32]);
        let cases: [(&str, Mutation); 5] = [
            ("echo request", |b| b[0] = 128),
            ("code 1", |b| b[1] = 1),
            ("multicast target", |b| b[8] = 0xff),
            ("option length 0", |b| b[25] = 0),
            ("option past the end", |b| b[25] = 2),
        ];
        for (what, mutate) in cases {
            let mut bytes = SOLICIT;
            mutate(&mut bytes);
            assert_eq!(NdpPacket::new_checked(&bytes[..]), Err(ParseError::Malformed), "{what}");
        }
        // A lone option byte (no length) is malformed too.
        let mut bytes = [0u8; 25];
        bytes[..24].copy_from_slice(&SOLICIT[..24]);
        bytes[24] = 1;
        assert_eq!(NdpPacket::new_checked(&bytes[..]), Err(ParseError::Malformed));
    }

    #[test]
    fn skips_unknown_options() {
        // A 16-byte nonce option (type 14, RFC 3971) before the SLLA option.
        let mut bytes = [0u8; 24 + 16 + 8];
        bytes[..24].copy_from_slice(&SOLICIT[..24]);
        bytes[24..26].copy_from_slice(&[14, 2]);
        bytes[40..].copy_from_slice(&SOLICIT[24..]);
        let ns = NdpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(ns.link_layer_option(OPTION_SOURCE_LL_ADDR), Some(MAC));
    }
}
