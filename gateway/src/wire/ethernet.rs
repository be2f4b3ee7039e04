//! Ethernet II frames (IEEE 802.3 clause 3.1.1, "Ethernet II" framing of [RFC 894]): a 14-byte
//! header of destination address, source address and EtherType, then the payload.
//!
//! The view covers the frame as handed over by the NIC: no preamble, no FCS. An 802.1Q tag shows
//! up as [`EtherType::Vlan`] (an 802.1ad service tag as [`EtherType::ServiceVlan`]); the 4-byte
//! tag is then the first bytes of [`EthernetFrame::payload`], read with [`super::vlan::VlanTag`].
//! `new_checked` only requires the 14-byte header; after it succeeds nothing panics.
//!
//! [RFC 894]: https://www.rfc-editor.org/rfc/rfc894

use core::fmt;

use super::{read, ParseError};

mod field {
    use crate::wire::{Field, Rest};

    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: Rest = 14..;
}

/// A 48-bit IEEE 802 MAC address, in transmission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// The all-zero address `00:00:00:00:00:00` (ARP requests leave the target hardware address
    /// unset with it, RFC 826).
    pub const UNSPECIFIED: MacAddr = MacAddr([0; 6]);

    /// The 6 bytes of the address.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is the broadcast address `ff:ff:ff:ff:ff:ff`.
    #[inline]
    pub const fn is_broadcast(&self) -> bool {
        matches!(self.0, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
    }

    /// Whether the group bit (least significant bit of the first byte, IEEE 802 § 8.2) is set:
    /// multicast, including broadcast.
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is an individual (unicast) address: the group bit is clear.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(bytes: [u8; 6]) -> Self {
        MacAddr(bytes)
    }
}

impl From<MacAddr> for [u8; 6] {
    fn from(addr: MacAddr) -> Self {
        addr.0
    }
}

impl fmt::Display for MacAddr {
    /// Lower-case hex, colon-separated: `02:42:ac:11:00:02`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// The EtherType field: which protocol the payload carries (IEEE registry). Total: values torii
/// does not know are kept in [`EtherType::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EtherType {
    /// IPv4, `0x0800`.
    Ipv4,
    /// ARP, `0x0806`.
    Arp,
    /// IPv6, `0x86DD`.
    Ipv6,
    /// An IEEE 802.1Q VLAN tag (C-TAG), `0x8100`.
    Vlan,
    /// An IEEE 802.1ad service VLAN tag (S-TAG, the outer tag of "QinQ"), `0x88A8`.
    ServiceVlan,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    #[inline]
    fn from(value: u16) -> Self {
        match value {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::ServiceVlan,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(value: EtherType) -> Self {
        match value {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => 0x8100,
            EtherType::ServiceVlan => 0x88a8,
            EtherType::Unknown(other) => other,
        }
    }
}

/// A read/write view of an Ethernet II frame: 14-byte header, then the payload to the end of the
/// buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Length of the header in bytes: two addresses and the EtherType.
    pub const HEADER_LEN: usize = field::PAYLOAD.start;

    /// Wraps `buffer` without checking its length; accessors panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps `buffer` after checking that it holds the 14-byte header.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if the buffer is shorter than [`Self::HEADER_LEN`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(EthernetFrame { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr(read(self.buffer.as_ref(), field::DESTINATION))
    }

    /// The source MAC address.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        MacAddr(read(self.buffer.as_ref(), field::SOURCE))
    }

    /// The EtherType.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(u16::from_be_bytes(read(self.buffer.as_ref(), field::ETHERTYPE)))
    }

    /// The payload: everything after the 14-byte header (including any Ethernet padding).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&u16::from(ethertype).to_be_bytes());
    }

    /// The payload, mutable: everything after the 14-byte header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for EthernetFrame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet II frame carrying the first 8 bytes of an IPv4 header.
    static FRAME: [u8; 22] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // destination
        0x02, 0x42, 0xac, 0x11, 0x00, 0x02, // source
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x54, 0x1c, 0x46, 0x40, 0x00, // payload
    ];

    const DST: MacAddr = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    const SRC: MacAddr = MacAddr([0x02, 0x42, 0xac, 0x11, 0x00, 0x02]);

    #[test]
    fn deconstruct() {
        let frame = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), DST);
        assert_eq!(frame.src_addr(), SRC);
        assert_eq!(frame.ethertype(), EtherType::Ipv4);
        assert_eq!(frame.payload(), &FRAME[14..]);
        assert_eq!(frame.as_ref(), &FRAME[..]);
        assert_eq!(frame.into_inner(), &FRAME[..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 22];
        let mut frame = EthernetFrame::new_unchecked(&mut bytes[..]);
        frame.set_dst_addr(DST);
        frame.set_src_addr(SRC);
        frame.set_ethertype(EtherType::Ipv4);
        frame.payload_mut().copy_from_slice(&FRAME[14..]);
        assert_eq!(bytes, FRAME);
    }

    #[test]
    fn header_only() {
        let frame = EthernetFrame::new_checked(&FRAME[..14]).unwrap();
        assert!(frame.payload().is_empty());
        assert_eq!(EthernetFrame::<&[u8]>::HEADER_LEN, 14);
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..EthernetFrame::<&[u8]>::HEADER_LEN {
            assert_eq!(EthernetFrame::new_checked(&FRAME[..len]), Err(ParseError::Truncated), "len {len}");
        }
    }

    #[test]
    fn ethertype_round_trip() {
        for (value, ty) in [
            (0x0800, EtherType::Ipv4),
            (0x0806, EtherType::Arp),
            (0x86dd, EtherType::Ipv6),
            (0x8100, EtherType::Vlan),
            (0x88a8, EtherType::ServiceVlan),
            (0x88cc, EtherType::Unknown(0x88cc)),
        ] {
            assert_eq!(EtherType::from(value), ty);
            assert_eq!(u16::from(ty), value);
        }
        for value in 0..=u16::MAX {
            assert_eq!(u16::from(EtherType::from(value)), value);
        }
    }

    #[test]
    fn mac_addr() {
        assert_eq!(SRC.to_string(), "02:42:ac:11:00:02");
        assert_eq!(MacAddr::BROADCAST.to_string(), "ff:ff:ff:ff:ff:ff");
        assert!(MacAddr::BROADCAST.is_broadcast());
        assert!(MacAddr::BROADCAST.is_multicast());
        assert!(!SRC.is_broadcast());
        assert!(!SRC.is_multicast());
        assert!(SRC.is_unicast());
        let ipv4_mcast = MacAddr([0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb]);
        assert!(ipv4_mcast.is_multicast());
        assert!(!ipv4_mcast.is_broadcast());
        assert_eq!(<[u8; 6]>::from(SRC), SRC.0);
        assert_eq!(MacAddr::from(SRC.0), SRC);
        assert_eq!(SRC.as_bytes(), &SRC.0);
        assert_eq!(MacAddr::default(), MacAddr::UNSPECIFIED);
    }
}
