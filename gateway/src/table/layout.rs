//! The byte layout of a table snapshot: fixed-size records read in place.
//!
//! A snapshot is one contiguous byte string:
//!
//! ```text
//! Header (80 bytes) | frontends [Frontend; n] | services [Service; n] | backends [Backend; n]
//!                   | ring [u32 LE; n] | names [u8; n]
//! ```
//!
//! Every record is `#[repr(C)]` with alignment 1 (zerocopy's byte-order integer types), so a
//! snapshot can be read from any buffer — an mmap'ed file or a `Vec` — without casts that
//! assume alignment. Host-order integers are little-endian (`U32`, `U64`); fields that are
//! network order on the wire (ports) are typed [`Be16`]. Addresses are 16 bytes: IPv6 as
//! is, IPv4 as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, RFC 4291 § 2.5.5.2).
//! Ids stored in records are 1-based: 0 means "none".

use std::net::{IpAddr, Ipv6Addr};

use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::byteorder::network_endian::U16 as Be16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `b"TORIITBL"`: the first eight bytes of every snapshot.
pub const MAGIC: [u8; 8] = *b"TORIITBL";

/// ABI version; bumped on every incompatible layout change. A gateway rejects snapshots
/// of any other version.
pub const ABI_VERSION: u32 = 1;

/// Section indices in [`Header::sections`].
pub mod section {
    /// [`super::Frontend`] records, sorted by (address, protocol, port).
    pub const FRONTENDS: usize = 0;
    /// [`super::Service`] records.
    pub const SERVICES: usize = 1;
    /// [`super::Backend`] records, grouped per service.
    pub const BACKENDS: usize = 2;
    /// Maglev ring entries: little-endian `u32`, 1-based backend index within the service.
    pub const RING: usize = 3;
    /// UTF-8 service names, referenced by offset and length.
    pub const NAMES: usize = 4;
    /// Number of sections.
    pub const COUNT: usize = 5;
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
    /// [`crate::table::FrontendKind`] as a number.
    pub kind: u8,
    /// Reserved, zero.
    pub reserved: [u8; 8],
    /// 1-based index of the [`Service`] it forwards to.
    pub service: U32,
}

/// One backend set (a Service port with its chosen endpoints) and its Maglev ring.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct Service {
    /// Index of its first record in the backends section.
    pub backends_offset: U32,
    /// Number of backends; 0 means its front doors reject.
    pub backends_count: U32,
    /// Index of its first entry in the ring section.
    pub ring_offset: U32,
    /// Ring size M (a prime), 0 when there are no backends.
    pub ring_len: U32,
    /// `sessionAffinity: ClientIP` timeout in seconds; 0 without affinity.
    pub affinity_timeout_s: U32,
    /// Reserved, zero.
    pub flags: U32,
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

const _: () = assert!(size_of::<Section>() == 8);
const _: () = assert!(size_of::<Header>() == 80);
const _: () = assert!(size_of::<Frontend>() == 32);
const _: () = assert!(size_of::<Service>() == 32);
const _: () = assert!(size_of::<Backend>() == 20);
const _: () = assert!(std::mem::offset_of!(Header, checksum) == CHECKSUM_OFFSET);

/// The 16-byte form of an address (IPv4 mapped into IPv6).
#[inline]
pub fn addr16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address stored in 16-byte form (IPv4-mapped addresses become IPv4).
#[inline]
pub fn addr_from16(b: [u8; 16]) -> IpAddr {
    Ipv6Addr::from(b).to_canonical()
}

/// Lookup key of a front door: sorts as (address, protocol, port).
#[inline]
pub(crate) fn frontend_key(addr: [u8; 16], protocol: u8, port: u16) -> (u128, u32) {
    (u128::from_be_bytes(addr), (u32::from(protocol) << 16) | u32::from(port))
}
