//! ARP for IPv4 over Ethernet ([RFC 826]), the only combination torii answers: hardware type 1
//! (Ethernet), protocol type `0x0800` (IPv4), 6-byte hardware and 4-byte protocol addresses, so the
//! packet is exactly [`ArpPacket::LEN`] = 28 bytes (Ethernet pads it to 46; the padding is
//! ignored).
//!
//! `new_checked` rejects anything else as [`ParseError::Malformed`]; after it succeeds nothing
//! panics.
//!
//! [RFC 826]: https://www.rfc-editor.org/rfc/rfc826

use std::net::Ipv4Addr;

use super::ethernet::MacAddr;
use super::{read, ParseError};

mod field {
    use crate::wire::Field;

    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    pub const SHA: Field = 8..14;
    pub const SPA: Field = 14..18;
    pub const THA: Field = 18..24;
    pub const TPA: Field = 24..28;
}

/// `ar$hrd` for Ethernet ([RFC 826], IANA "Hardware Types").
///
/// [RFC 826]: https://www.rfc-editor.org/rfc/rfc826
pub const HARDWARE_ETHERNET: u16 = 1;
/// `ar$pro` for IPv4: the IPv4 EtherType.
pub const PROTOCOL_IPV4: u16 = 0x0800;

/// The ARP opcode (`ar$op`, [RFC 826]). Total: other opcodes (RARP, InARP, …) are kept in
/// [`ArpOperation::Unknown`].
///
/// [RFC 826]: https://www.rfc-editor.org/rfc/rfc826
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArpOperation {
    /// `ares_op$REQUEST`, 1.
    Request,
    /// `ares_op$REPLY`, 2.
    Reply,
    /// Any other opcode.
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    #[inline]
    fn from(value: u16) -> Self {
        match value {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            other => ArpOperation::Unknown(other),
        }
    }
}

impl From<ArpOperation> for u16 {
    #[inline]
    fn from(value: ArpOperation) -> Self {
        match value {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(other) => other,
        }
    }
}

/// A read/write view of an Ethernet/IPv4 ARP packet (28 bytes; the buffer may be longer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Length in bytes of an Ethernet/IPv4 ARP packet: 8 bytes of fixed header, two 6-byte
    /// hardware addresses and two 4-byte protocol addresses.
    pub const LEN: usize = field::TPA.end;

    /// Wraps `buffer` without checking it; accessors panic if it is shorter than [`Self::LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wraps `buffer` after checking that it is an Ethernet/IPv4 ARP packet.
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if the buffer is shorter than [`Self::LEN`];
    /// - [`ParseError::Malformed`] unless hardware type is 1, protocol type `0x0800`, hardware
    ///   length 6 and protocol length 4.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let packet = ArpPacket { buffer };
        if packet.buffer.as_ref().len() < Self::LEN {
            return Err(ParseError::Truncated);
        }
        if packet.hardware_type() != HARDWARE_ETHERNET
            || packet.protocol_type() != PROTOCOL_IPV4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(ParseError::Malformed);
        }
        Ok(packet)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// `ar$hrd`, the hardware type (1 = Ethernet after `new_checked`).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::HTYPE))
    }

    /// `ar$pro`, the protocol type as an EtherType value (`0x0800` after `new_checked`).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::PTYPE))
    }

    /// `ar$hln`, the hardware address length in bytes (6 after `new_checked`).
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// `ar$pln`, the protocol address length in bytes (4 after `new_checked`).
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// `ar$op`, the operation.
    #[inline]
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(u16::from_be_bytes(read(self.buffer.as_ref(), field::OPER)))
    }

    /// `ar$sha`, the sender hardware address.
    #[inline]
    pub fn sender_hardware_addr(&self) -> MacAddr {
        MacAddr(read(self.buffer.as_ref(), field::SHA))
    }

    /// `ar$spa`, the sender protocol address.
    #[inline]
    pub fn sender_protocol_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(read::<4>(self.buffer.as_ref(), field::SPA))
    }

    /// `ar$tha`, the target hardware address (all zeros in a request).
    #[inline]
    pub fn target_hardware_addr(&self) -> MacAddr {
        MacAddr(read(self.buffer.as_ref(), field::THA))
    }

    /// `ar$tpa`, the target protocol address (the address being resolved, in a request).
    #[inline]
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(read::<4>(self.buffer.as_ref(), field::TPA))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Writes the fixed Ethernet/IPv4 part of the header (hardware type 1, protocol type
    /// `0x0800`, lengths 6 and 4), so a request or reply can be emitted into a fresh buffer.
    #[inline]
    pub fn fill_header(&mut self) {
        let data = self.buffer.as_mut();
        data[field::HTYPE].copy_from_slice(&HARDWARE_ETHERNET.to_be_bytes());
        data[field::PTYPE].copy_from_slice(&PROTOCOL_IPV4.to_be_bytes());
        data[field::HLEN] = 6;
        data[field::PLEN] = 4;
    }

    /// Sets `ar$op`.
    #[inline]
    pub fn set_operation(&mut self, operation: ArpOperation) {
        self.buffer.as_mut()[field::OPER].copy_from_slice(&u16::from(operation).to_be_bytes());
    }

    /// Sets `ar$sha`.
    #[inline]
    pub fn set_sender_hardware_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&addr.0);
    }

    /// Sets `ar$spa`.
    #[inline]
    pub fn set_sender_protocol_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&addr.octets());
    }

    /// Sets `ar$tha`.
    #[inline]
    pub fn set_target_hardware_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&addr.0);
    }

    /// Sets `ar$tpa`.
    #[inline]
    pub fn set_target_protocol_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&addr.octets());
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for ArpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Who has 192.0.2.10? Tell 198.51.100.1", as a router would send it.
    static REQUEST: [u8; 28] = [
        0x00, 0x01, // Ethernet
        0x08, 0x00, // IPv4
        0x06, 0x04, // lengths
        0x00, 0x01, // request
        0x02, 0x42, 0xac, 0x11, 0x00, 0x02, // sender MAC
        0xc6, 0x33, 0x64, 0x01, // 198.51.100.1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // target MAC (unknown)
        0xc0, 0x00, 0x02, 0x0a, // 192.0.2.10
    ];

    const SHA: MacAddr = MacAddr([0x02, 0x42, 0xac, 0x11, 0x00, 0x02]);
    const SPA: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const TPA: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);

    #[test]
    fn deconstruct() {
        let arp = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(arp.hardware_type(), 1);
        assert_eq!(arp.protocol_type(), 0x0800);
        assert_eq!(arp.hardware_len(), 6);
        assert_eq!(arp.protocol_len(), 4);
        assert_eq!(arp.operation(), ArpOperation::Request);
        assert_eq!(arp.sender_hardware_addr(), SHA);
        assert_eq!(arp.sender_protocol_addr(), SPA);
        assert_eq!(arp.target_hardware_addr(), MacAddr::UNSPECIFIED);
        assert_eq!(arp.target_protocol_addr(), TPA);
        assert_eq!(arp.as_ref(), &REQUEST[..]);
        assert_eq!(arp.into_inner(), &REQUEST[..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 28];
        let mut arp = ArpPacket::new_unchecked(&mut bytes[..]);
        arp.fill_header();
        arp.set_operation(ArpOperation::Request);
        arp.set_sender_hardware_addr(SHA);
        arp.set_sender_protocol_addr(SPA);
        arp.set_target_hardware_addr(MacAddr::UNSPECIFIED);
        arp.set_target_protocol_addr(TPA);
        assert_eq!(bytes, REQUEST);
    }

    #[test]
    fn accepts_ethernet_padding() {
        let mut padded = [0u8; 46];
        padded[..28].copy_from_slice(&REQUEST);
        let arp = ArpPacket::new_checked(&padded[..]).unwrap();
        assert_eq!(arp.target_protocol_addr(), TPA);
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..REQUEST.len() {
            assert_eq!(ArpPacket::new_checked(&REQUEST[..len]), Err(ParseError::Truncated), "len {len}");
        }
    }

    #[test]
    fn rejects_malformed() {
        // (byte offset, bad value): htype 6 (IEEE 802), ptype 0x86dd, hlen 8, plen 16.
        for (at, value) in [(1, 6), (0, 1), (2, 0x86), (3, 0xdd), (4, 8), (5, 16)] {
            let mut bytes = REQUEST;
            bytes[at] = value;
            assert_eq!(ArpPacket::new_checked(&bytes[..]), Err(ParseError::Malformed), "byte {at} = {value:#x}");
        }
    }

    #[test]
    fn operation_round_trip() {
        for (value, op) in [(1, ArpOperation::Request), (2, ArpOperation::Reply), (8, ArpOperation::Unknown(8))] {
            assert_eq!(ArpOperation::from(value), op);
            assert_eq!(u16::from(op), value);
        }
        let mut bytes = REQUEST;
        let mut arp = ArpPacket::new_checked(&mut bytes[..]).unwrap();
        arp.set_operation(ArpOperation::Reply);
        assert_eq!(arp.operation(), ArpOperation::Reply);
        assert_eq!(&bytes[6..8], &[0, 2]);
    }
}
