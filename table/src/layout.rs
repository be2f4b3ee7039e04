//! The byte layout of a table snapshot: fixed-size records read in place.
//!
//! A snapshot is one contiguous byte string: the header, then the sections it points to,
//! each starting at a multiple of 8 bytes (padding is zero). The builder writes them in
//! this order, so that the largest section, the rings, keeps its place when front doors
//! or endpoints are added (readers go by the offsets in the header, never by the order):
//!
//! ```text
//! Header (88 bytes) | rings [u8; n] | services [Service; n] | frontends [Frontend; n]
//!                   | source ranges [SourceRange; n] | backends [Backend; n] | names [u8; n]
//! ```
//!
//! Within the ring, backend and name sections a service's parts may lie anywhere, in any
//! order, with bytes no record refers to between them (their content is unspecified), and
//! any section may be followed by unused room before the next: torii-control's
//! `TableBuilder` keeps unchanged services' parts in place and reuses freed space, so that
//! a change rewrites only what changed. Only the records' offsets and counts say where
//! things are; [`crate::Table::new`] checks that every one of them is in bounds.
//!
//! Maglev rings are stored as compactly as their backend counts allow: each entry is a
//! 1-based backend index, little-endian, 1 byte wide for services with at most 255
//! backends, 2 bytes for at most 65535, else 4 ([`ring_entry_len_for`]). A service's ring
//! starts at a multiple of its entry width within the ring section.
//!
//! Every record is `#[repr(C)]` with alignment 1 (zerocopy's byte-order integer types), so a
//! snapshot can be read from any buffer — an mmap'ed file or a `Vec` — without casts that
//! assume alignment. Host-order integers are little-endian (`U32`, `U64`); fields that are
//! network order on the wire (ports) are typed [`Be16`]. Addresses are 16 bytes: IPv6 as
//! is, IPv4 as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, RFC 4291 § 2.5.5.2).
//! Ids stored in records are 1-based: 0 means "none".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::byteorder::network_endian::U16 as Be16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `b"TORIITBL"`: the first eight bytes of every snapshot.
pub const MAGIC: [u8; 8] = *b"TORIITBL";

/// ABI version; bumped on every incompatible layout change. A gateway rejects snapshots
/// of any other version.
///
/// - 1: rings of little-endian `u32` entries.
/// - 2: ring entries 1, 2 or 4 bytes wide per service ([`Service::ring_entry_len`]), the
///   ring section measured in bytes and written first.
/// - 3: `loadBalancerSourceRanges` and draining endpoints. A sixth section,
///   [`section::SOURCE_RANGES`], holds each front door's admitted client address ranges
///   ([`Frontend::source_ranges_offset`], [`Frontend::source_ranges_count`], in place of
///   the reserved bytes); each service's backend records are followed by its draining
///   endpoints ([`Service::draining_count`]; the service record grows to 40 bytes, the
///   header to 88).
pub const ABI_VERSION: u32 = 3;

/// Section indices in [`Header::sections`].
pub mod section {
    /// [`super::Frontend`] records, sorted by (address, protocol, port).
    pub const FRONTENDS: usize = 0;
    /// [`super::Service`] records.
    pub const SERVICES: usize = 1;
    /// [`super::Backend`] records, grouped per service.
    pub const BACKENDS: usize = 2;
    /// Maglev ring entries: little-endian, 1-based backend index within the service, each
    /// service's entries [`super::Service::ring_entry_len`] bytes wide. Counted in bytes.
    pub const RING: usize = 3;
    /// UTF-8 service names, referenced by offset and length.
    pub const NAMES: usize = 4;
    /// [`super::SourceRange`] records: per front door, sorted and disjoint.
    pub const SOURCE_RANGES: usize = 5;
    /// Number of sections.
    pub const COUNT: usize = 6;
}

/// Where a section lies: byte offset from the start of the snapshot and record count.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct Section {
    /// Byte offset from the start of the snapshot.
    pub offset: U32,
    /// Number of records (bytes, for the names section).
    pub count: U32,
}

/// The snapshot header.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`ABI_VERSION`].
    pub abi_version: U32,
    /// `size_of::<Header>()`, so a reader can tell a header it does not know.
    pub header_len: U32,
    /// Publication generation, strictly increasing across publications.
    pub generation: U64,
    /// Length of the whole snapshot in bytes.
    pub total_len: U64,
    /// CRC-32 (IEEE) of the whole snapshot with this field set to zero.
    pub checksum: U32,
    /// Reserved, zero.
    pub flags: U32,
    /// The sections, indexed by [`section`] constants.
    pub sections: [Section; section::COUNT],
}

/// Byte offset of [`Header::checksum`] within the header.
pub const CHECKSUM_OFFSET: usize = 32;

/// One front door.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct Frontend {
    /// The VIP, 16-byte form (see the module doc).
    pub addr: [u8; 16],
    /// Destination port.
    pub port: Be16,
    /// IANA protocol number (6, 17, 132).
    pub protocol: u8,
    /// [`crate::FrontendKind`] as a number.
    pub kind: u8,
    /// Index of its first [`SourceRange`] in the source-range section.
    pub source_ranges_offset: U32,
    /// Number of its source ranges; 0 admits every client (`loadBalancerSourceRanges`
    /// empty or not applicable). Front doors with the same list may share its records.
    pub source_ranges_count: U32,
    /// 1-based index of the [`Service`] it forwards to.
    pub service: U32,
}

impl Frontend {
    /// The position of its [`Service`] in the services section (`service` is 1-based).
    #[inline]
    #[must_use]
    pub fn service_position(&self) -> u32 {
        self.service.get() - 1
    }
}

/// One backend set (a Service port with its chosen endpoints) and its Maglev ring.
///
/// Its backend records are `backends_count` ring backends followed by `draining_count`
/// draining endpoints, each group sorted by (address, port): draining endpoints are not
/// on the ring and take no new flows, but flows already steered to them keep them.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct Service {
    /// Index of its first record in the backends section.
    pub backends_offset: U32,
    /// Number of backends on the ring; 0 means its front doors reject.
    pub backends_count: U32,
    /// Number of draining endpoints, after the ring backends.
    pub draining_count: U32,
    /// Byte offset of its first entry in the ring section (a multiple of
    /// `ring_entry_len`).
    pub ring_offset: U32,
    /// Ring size M (a prime) in entries, 0 when there are no backends.
    pub ring_len: U32,
    /// `sessionAffinity: ClientIP` timeout in seconds; 0 without affinity.
    pub affinity_timeout_s: U32,
    /// Bytes per ring entry: 1, 2 or 4, [`ring_entry_len_for`] the backend count.
    pub ring_entry_len: u8,
    /// Reserved, zero.
    pub reserved: [u8; 7],
    /// Byte offset of its name in the names section.
    pub name_offset: U32,
    /// Byte length of its name.
    pub name_len: U32,
}

/// One endpoint.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct Backend {
    /// Endpoint address, 16-byte form.
    pub addr: [u8; 16],
    /// Endpoint port.
    pub port: Be16,
    /// Reserved, zero.
    pub reserved: [u8; 2],
}

/// One range of client addresses a front door admits: every address from `first` to
/// `last` inclusive, 16-byte form, compared as 128-bit big-endian numbers. A CIDR
/// `a/n` is the range from its network address to its last address; an IPv4 prefix
/// covers IPv4-mapped addresses only, so it never admits an IPv6 client. A front door's
/// ranges are sorted by `first` and disjoint (`last` < the next `first`), so one binary
/// search decides ([`crate::SourceRanges::admits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct SourceRange {
    /// First address of the range, 16-byte form.
    pub first: [u8; 16],
    /// Last address of the range (inclusive), 16-byte form.
    pub last: [u8; 16],
}

const _: () = assert!(size_of::<Section>() == 8);
const _: () = assert!(size_of::<Header>() == 88);
const _: () = assert!(size_of::<Frontend>() == 32);
const _: () = assert!(size_of::<Service>() == 40);
const _: () = assert!(size_of::<Backend>() == 20);
const _: () = assert!(size_of::<SourceRange>() == 32);
const _: () = assert!(std::mem::offset_of!(Header, checksum) == CHECKSUM_OFFSET);

/// The ring entry width in bytes for a service with `backends` backends: the smallest of
/// 1, 2 and 4 whose largest value holds the 1-based index of the last backend.
#[inline]
pub const fn ring_entry_len_for(backends: usize) -> u8 {
    if backends <= u8::MAX as usize {
        1
    } else if backends <= u16::MAX as usize {
        2
    } else {
        4
    }
}

/// The largest backend index an entry of `entry_len` bytes can hold (0 for a width that
/// is not 1, 2 or 4).
#[inline]
pub const fn max_ring_id(entry_len: u8) -> u32 {
    match entry_len {
        1 => u8::MAX as u32,
        2 => u16::MAX as u32,
        4 => u32::MAX,
        _ => 0,
    }
}

/// The 16-byte form of an address (IPv4 mapped into IPv6).
#[inline]
pub fn addr16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address stored in 16-byte form (IPv4-mapped addresses, `::ffff:a.b.c.d` of
/// [RFC 4291 § 2.5.5.2], become IPv4): [`Ipv6Addr::to_canonical`]'s answer, read as one
/// 128-bit number instead of byte by byte (a new flow's visit reads its endpoint this way).
///
/// [RFC 4291 § 2.5.5.2]: https://www.rfc-editor.org/rfc/rfc4291#section-2.5.5.2
#[inline]
pub fn addr_from16(b: [u8; 16]) -> IpAddr {
    let bits = u128::from_be_bytes(b);
    if bits >> 32 == 0xffff {
        IpAddr::V4(Ipv4Addr::from_bits(bits as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from_bits(bits))
    }
}

/// Lookup key of a front door: sorts as (address, protocol, port), the order of the
/// front-door section (the gateway's per-front-door counters merge two tables by it).
#[inline]
pub fn frontend_key(addr: [u8; 16], protocol: u8, port: u16) -> (u128, u32) {
    (u128::from_be_bytes(addr), (u32::from(protocol) << 16) | u32::from(port))
}

/// CRC-32 (IEEE) of a snapshot with its checksum field taken as zero.
pub fn checksum(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    let at = CHECKSUM_OFFSET;
    h.update(&bytes[..at]);
    h.update(&[0; 4]);
    h.update(&bytes[at + 4..]);
    h.finalize()
}

#[cfg(test)]
mod addr_tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::{addr16, addr_from16};

    proptest! {
        /// `addr_from16` is `Ipv6Addr::to_canonical` of the 16 bytes (any bytes, and
        /// IPv4-mapped ones and their near misses), and undoes `addr16` of either family.
        #[test]
        fn addr_from16_is_to_canonical(bits in any::<u128>(), v4 in any::<u32>(), flip in 0u32..128) {
            let near = (0xffffu128 << 32 | u128::from(v4)) ^ (1u128 << flip);
            for b in [bits, 0xffffu128 << 32 | u128::from(v4), near, u128::from(v4)] {
                prop_assert_eq!(addr_from16(b.to_be_bytes()), Ipv6Addr::from_bits(b).to_canonical());
            }
            let a = IpAddr::V4(Ipv4Addr::from_bits(v4));
            prop_assert_eq!(addr_from16(addr16(a)), a);
            let a6 = IpAddr::V6(Ipv6Addr::from_bits(bits));
            prop_assert_eq!(addr_from16(addr16(a6)), a6.to_canonical());
        }
    }
}
