//! IEEE 802.1Q VLAN tags: the 4 bytes that follow a tag protocol identifier (TPID, `0x8100`
//! for a customer tag, `0x88A8` for an 802.1ad service tag) in place of the EtherType — the
//! tag control information (TCI: priority code point, drop eligible indicator, VLAN
//! identifier) and the EtherType of what the tag encapsulates.
//!
//! ```text
//!  dst (6) | src (6) | TPID 0x8100 (2) | PCP (3 bits) DEI (1) VID (12) | EtherType (2) | payload
//!                                      '-------------- VlanTag ---------------------------------'
//! ```
//!
//! [`VlanTag`] is a view in the manner of the other `wire` views: `new_checked` requires the
//! 4 bytes, after which nothing panics. [`copy_tagged`] restores a tag a device stripped on
//! receive (Linux VLAN acceleration reports it in `tp_vlan_tci`, DPDK in `mbuf.vlan_tci`)
//! while copying the frame, so everything after the driver sees the frame as it was on the
//! wire.

use super::{read, ParseError};

mod field {
    use crate::wire::{Field, Rest};

    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: Rest = 4..;
}

/// Bytes a tag adds to a frame: TPID and TCI.
pub const TAG_LEN: usize = 4;

/// The largest VLAN identifier a frame may carry for a VLAN: `0xFFF` is reserved and `0`
/// means "priority tag only, no VLAN" (IEEE 802.1Q-2018 § 9.6, Table 9-2).
pub const VID_MAX: u16 = 4094;

/// A read/write view of an 802.1Q tag after its TPID: TCI, encapsulated EtherType, payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Length of the view's header: TCI and EtherType.
    pub const HEADER_LEN: usize = field::PAYLOAD.start;

    /// Wraps `buffer` without checking its length; accessors panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }

    /// Wraps `buffer` after checking that it holds TCI and EtherType.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if the buffer is shorter than [`Self::HEADER_LEN`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(VlanTag { buffer })
    }

    /// The whole tag control information.
    #[inline]
    pub fn tci(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::TCI))
    }

    /// The VLAN identifier: the low 12 bits of the TCI (0: priority tag only).
    #[inline]
    pub fn vlan_id(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The priority code point (IEEE 802.1p): the top 3 bits of the TCI.
    #[inline]
    pub fn priority(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// The drop eligible indicator (bit 12 of the TCI).
    #[inline]
    pub fn drop_eligible(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// The EtherType of what the tag encapsulates.
    #[inline]
    pub fn ethertype(&self) -> super::EtherType {
        super::EtherType::from(u16::from_be_bytes(read(self.buffer.as_ref(), field::ETHERTYPE)))
    }

    /// Everything after the tag.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the whole tag control information.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[field::TCI].copy_from_slice(&tci.to_be_bytes());
    }

    /// Sets the encapsulated EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: super::EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&u16::from(ethertype).to_be_bytes());
    }
}

/// Copies `frame` into `dst` with the tag `tpid`/`tci` put back after the MAC addresses,
/// where a device took it out on receive. Returns the length written, or `None` when `dst`
/// cannot hold `frame.len() + 4` bytes or `frame` is shorter than the two addresses.
#[inline]
pub fn copy_tagged(dst: &mut [u8], frame: &[u8], tpid: u16, tci: u16) -> Option<usize> {
    const ADDRS: usize = 12;
    let len = frame.len().checked_add(TAG_LEN)?;
    if frame.len() < ADDRS || dst.len() < len {
        return None;
    }
    dst[..ADDRS].copy_from_slice(&frame[..ADDRS]);
    dst[ADDRS..ADDRS + 2].copy_from_slice(&tpid.to_be_bytes());
    dst[ADDRS + 2..ADDRS + 4].copy_from_slice(&tci.to_be_bytes());
    dst[ADDRS + TAG_LEN..len].copy_from_slice(&frame[ADDRS..]);
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EtherType, EthernetFrame};

    /// A frame tagged for VLAN 100 with priority 5 and DEI set, carrying 4 bytes of IPv4.
    static TAGGED: [u8; 22] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // destination
        0x02, 0x42, 0xac, 0x11, 0x00, 0x02, // source
        0x81, 0x00, // TPID
        0xb0, 0x64, // PCP 5, DEI 1, VID 100
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x54, // payload
    ];

    #[test]
    fn deconstruct() {
        let eth = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(eth.ethertype(), EtherType::Vlan);
        let tag = VlanTag::new_checked(eth.payload()).unwrap();
        assert_eq!(tag.tci(), 0xb064);
        assert_eq!(tag.vlan_id(), 100);
        assert_eq!(tag.priority(), 5);
        assert!(tag.drop_eligible());
        assert_eq!(tag.ethertype(), EtherType::Ipv4);
        assert_eq!(tag.payload(), &TAGGED[18..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 4];
        let mut tag = VlanTag::new_unchecked(&mut bytes[..]);
        tag.set_tci(0xb064);
        tag.set_ethertype(EtherType::Ipv4);
        assert_eq!(bytes, TAGGED[14..18]);
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..VlanTag::<&[u8]>::HEADER_LEN {
            assert_eq!(VlanTag::new_checked(&TAGGED[14..14 + len]), Err(ParseError::Truncated));
        }
    }

    #[test]
    fn copy_tagged_restores_a_stripped_tag() {
        let mut untagged = TAGGED[..12].to_vec();
        untagged.extend_from_slice(&TAGGED[16..]);
        let mut dst = [0xa5u8; 64];
        assert_eq!(copy_tagged(&mut dst, &untagged, 0x8100, 0xb064), Some(TAGGED.len()));
        assert_eq!(dst[..TAGGED.len()], TAGGED);
        // No room for the 4 more bytes, or not even the addresses.
        assert_eq!(copy_tagged(&mut dst[..TAGGED.len() - 1], &untagged, 0x8100, 1), None);
        assert_eq!(copy_tagged(&mut dst, &untagged[..11], 0x8100, 1), None);
    }
}
