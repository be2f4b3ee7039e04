//! SCTP packets ([RFC 9260] § 3): the 12-byte common header and the chunks after it.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Source Port Number        |     Destination Port Number   |
//! |                      Verification Tag                         |
//! |                           Checksum                            |
//! |  Chunk Type   | Chunk  Flags  |        Chunk Length           |  ← first chunk
//! ```
//!
//! The ports sit at the same offsets as TCP's and UDP's, so a full NAT rewrites them alike.
//! The checksum is different in kind: it is CRC32c ([RFC 9260] § 6.8 and Appendix A,
//! [RFC 3309]) over the whole SCTP packet — common header with the checksum field zero, and
//! every chunk — with **no** pseudo-header, so addresses do not enter it. It is not a one's
//! complement sum, and its linearity gives no cheap RFC 1624-style update: carrying a change
//! of the ports across the rest of the packet is a GF(2) matrix power (`crc32c_combine`,
//! zlib's method), slower than the hardware CRC over a whole 1500-byte packet.
//! [`SctpPacket::fill_checksum`] recomputes it with the SSE 4.2 / ARMv8 CRC instructions
//! (crate `crc32c`).
//!
//! The CRC is stored least-significant byte first: [RFC 9260] Appendix A's reference code
//! reverses the bytes of the reflected CRC before storing it in network order, and Linux stores
//! `cpu_to_le32(crc)` (`sctp_compute_cksum`). [`SctpPacket::checksum`] returns the CRC value
//! (as [`crc32c::crc32c`] computes it), not the four bytes read big-endian.
//!
//! Because the checksum covers the whole packet, a rewriter must see the whole packet: the
//! first fragment of a fragmented SCTP packet cannot be given a correct checksum. SCTP
//! endpoints avoid IP fragmentation by path-MTU discovery ([RFC 9260] § 7.3, DF set on IPv4),
//! which the gateway supports by translating ICMP "fragmentation needed" errors.
//!
//! The view's buffer is the IP payload (the SCTP packet is all of it: SCTP has no length
//! field of its own). `new_checked` accepts a buffer of at least 12 bytes; after it succeeds
//! no accessor or setter panics, and [`SctpPacket::chunks`] stops at the first chunk whose
//! length field is below 4 or runs past the buffer.
//!
//! [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260
//! [RFC 3309]: https://www.rfc-editor.org/rfc/rfc3309

use super::{read, ParseError};

mod field {
    use crate::wire::{Field, Rest};

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const VERIFICATION_TAG: Field = 4..8;
    pub const CHECKSUM: Field = 8..12;
    pub const CHUNKS: Rest = 12..;

    /// Offsets inside a chunk header.
    pub const CHUNK_TYPE: usize = 0;
    pub const CHUNK_FLAGS: usize = 1;
    pub const CHUNK_LENGTH: Field = 2..4;
    pub const CHUNK_HEADER_LEN: usize = 4;
}

/// An SCTP chunk type ([RFC 9260] § 3.2, IANA "Chunk Types"). Total: other values are kept in
/// [`SctpChunkType::Unknown`].
///
/// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-3.2
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SctpChunkType {
    /// DATA, 0.
    Data,
    /// INIT, 1: opens an association; its packet carries Verification Tag 0.
    Init,
    /// INIT ACK, 2.
    InitAck,
    /// SACK, 3.
    Sack,
    /// HEARTBEAT, 4.
    Heartbeat,
    /// HEARTBEAT ACK, 5.
    HeartbeatAck,
    /// ABORT, 6: closes the association at once ([RFC 9260] § 3.3.7).
    ///
    /// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-3.3.7
    Abort,
    /// SHUTDOWN, 7.
    Shutdown,
    /// SHUTDOWN ACK, 8.
    ShutdownAck,
    /// ERROR, 9.
    Error,
    /// COOKIE ECHO, 10.
    CookieEcho,
    /// COOKIE ACK, 11.
    CookieAck,
    /// SHUTDOWN COMPLETE, 14: the last packet of a graceful close ([RFC 9260] § 3.3.13).
    ///
    /// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-3.3.13
    ShutdownComplete,
    /// Any other type.
    Unknown(u8),
}

impl From<u8> for SctpChunkType {
    #[inline]
    fn from(value: u8) -> Self {
        match value {
            0 => Self::Data,
            1 => Self::Init,
            2 => Self::InitAck,
            3 => Self::Sack,
            4 => Self::Heartbeat,
            5 => Self::HeartbeatAck,
            6 => Self::Abort,
            7 => Self::Shutdown,
            8 => Self::ShutdownAck,
            9 => Self::Error,
            10 => Self::CookieEcho,
            11 => Self::CookieAck,
            14 => Self::ShutdownComplete,
            other => Self::Unknown(other),
        }
    }
}

impl From<SctpChunkType> for u8 {
    #[inline]
    fn from(value: SctpChunkType) -> Self {
        match value {
            SctpChunkType::Data => 0,
            SctpChunkType::Init => 1,
            SctpChunkType::InitAck => 2,
            SctpChunkType::Sack => 3,
            SctpChunkType::Heartbeat => 4,
            SctpChunkType::HeartbeatAck => 5,
            SctpChunkType::Abort => 6,
            SctpChunkType::Shutdown => 7,
            SctpChunkType::ShutdownAck => 8,
            SctpChunkType::Error => 9,
            SctpChunkType::CookieEcho => 10,
            SctpChunkType::CookieAck => 11,
            SctpChunkType::ShutdownComplete => 14,
            SctpChunkType::Unknown(other) => other,
        }
    }
}

/// One chunk header as [`SctpPacket::chunks`] yields it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpChunk {
    /// Chunk Type.
    pub chunk_type: SctpChunkType,
    /// Chunk Flags.
    pub flags: u8,
    /// Chunk Length: header and value, without the padding to a multiple of 4, in bytes.
    pub length: u16,
}

/// A read/write view of an SCTP packet; the buffer is the whole IP payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SctpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SctpPacket<T> {
    /// Length of the common header in bytes.
    pub const HEADER_LEN: usize = field::CHUNKS.start;

    /// Wraps `buffer` without checking it; accessors panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        SctpPacket { buffer }
    }

    /// Wraps `buffer` after checking that it holds the 12-byte common header.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if the buffer is shorter than [`Self::HEADER_LEN`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(SctpPacket { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::SRC_PORT))
    }

    /// The destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::DST_PORT))
    }

    /// The Verification Tag (0 in a packet carrying INIT, [RFC 9260] § 8.5.1).
    ///
    /// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-8.5.1
    #[inline]
    pub fn verification_tag(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::VERIFICATION_TAG))
    }

    /// The CRC32c value in the Checksum field (stored least-significant byte first, see the
    /// module documentation).
    #[inline]
    pub fn checksum(&self) -> u32 {
        u32::from_le_bytes(read(self.buffer.as_ref(), field::CHECKSUM))
    }

    /// The CRC32c of the packet with the Checksum field taken as zero: what
    /// [`Self::checksum`] must equal ([RFC 9260] § 6.8).
    ///
    /// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-6.8
    #[inline]
    pub fn compute_checksum(&self) -> u32 {
        let data = self.buffer.as_ref();
        let crc = crc32c::crc32c(&data[..field::CHECKSUM.start]);
        let crc = crc32c::crc32c_append(crc, &[0; 4]);
        crc32c::crc32c_append(crc, &data[field::CHECKSUM.end..])
    }

    /// Whether the Checksum field is correct for the whole buffer ([RFC 9260] § 6.8: a packet
    /// with an invalid checksum is silently discarded).
    ///
    /// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-6.8
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        self.compute_checksum() == self.checksum()
    }

    /// The chunks (header and value, padded), after the common header.
    #[inline]
    pub fn chunk_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[field::CHUNKS]
    }

    /// The chunk headers in order ([RFC 9260] § 3.2). Stops at the end of the buffer, at a
    /// Chunk Length below 4 or past the buffer (such a chunk is not yielded). Each step
    /// advances at least 4 bytes, so the walk is bounded by a quarter of the buffer length.
    ///
    /// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-3.2
    #[inline]
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks { rest: self.chunk_bytes() }
    }

    /// The first chunk's type, if a whole chunk header follows the common header.
    #[inline]
    pub fn first_chunk_type(&self) -> Option<SctpChunkType> {
        self.chunk_bytes().first().map(|&t| SctpChunkType::from(t))
    }
}

/// Iterator over chunk headers; see [`SctpPacket::chunks`].
#[derive(Debug, Clone)]
pub struct Chunks<'a> {
    rest: &'a [u8],
}

impl Iterator for Chunks<'_> {
    type Item = SctpChunk;

    fn next(&mut self) -> Option<SctpChunk> {
        if self.rest.len() < field::CHUNK_HEADER_LEN {
            return None;
        }
        let length = u16::from_be_bytes(read(self.rest, field::CHUNK_LENGTH));
        let len = usize::from(length);
        if len < field::CHUNK_HEADER_LEN || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let chunk = SctpChunk {
            chunk_type: SctpChunkType::from(self.rest[field::CHUNK_TYPE]),
            flags: self.rest[field::CHUNK_FLAGS],
            length,
        };
        // Chunks are padded to a multiple of 4; the last one's padding may be missing.
        let padded = (len + 3) & !3;
        self.rest = &self.rest[padded.min(self.rest.len())..];
        Some(chunk)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SctpPacket<T> {
    /// Sets the source port (the checksum is not updated: see [`Self::fill_checksum`]).
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the destination port (the checksum is not updated: see [`Self::fill_checksum`]).
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the Verification Tag.
    #[inline]
    pub fn set_verification_tag(&mut self, tag: u32) {
        self.buffer.as_mut()[field::VERIFICATION_TAG].copy_from_slice(&tag.to_be_bytes());
    }

    /// Stores `crc` in the Checksum field, least-significant byte first.
    #[inline]
    pub fn set_checksum(&mut self, crc: u32) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&crc.to_le_bytes());
    }

    /// Computes the CRC32c over the whole buffer (the Checksum field as zero) and stores it
    /// ([RFC 9260] § 6.8). Call it after every rewrite of the ports or chunks.
    ///
    /// [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260#section-6.8
    #[inline]
    pub fn fill_checksum(&mut self) {
        let crc = self.compute_checksum();
        self.set_checksum(crc);
    }

    /// The chunks, mutable.
    #[inline]
    pub fn chunk_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::CHUNKS]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for SctpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An INIT with one IPv4 Address parameter (127.0.0.1), ports 0 → 0, as Scapy's SCTP
    /// regression tests build it (`IP()/SCTP()/SCTPChunkInit(params=[SCTPChunkParamIPv4Addr()])`):
    /// its checksum bytes `40 2c 0b 5f` are the CRC32c 0x5f0b2c40 stored least-significant byte
    /// first.
    const SCAPY_INIT: &str = "0000000000000000402c0b5f0100001c00000000000000000000000000000000000500087f000001";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// An INIT from 198.51.100.7:40000 to 5060 (Verification Tag 0, one INIT chunk with
    /// Initiate Tag 0x01020304, a_rwnd 65535, 10 outbound / 65535 inbound streams, initial TSN 1).
    fn init() -> Vec<u8> {
        let mut b = vec![0xa5u8; 12 + 20];
        let mut p = SctpPacket::new_unchecked(&mut b[..]);
        p.set_src_port(40000);
        p.set_dst_port(5060);
        p.set_verification_tag(0);
        let c = p.chunk_bytes_mut();
        c[..4].copy_from_slice(&[1, 0, 0, 20]);
        c[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        c[8..12].copy_from_slice(&65535u32.to_be_bytes());
        c[12..16].copy_from_slice(&[0, 10, 0xff, 0xff]);
        c[16..20].copy_from_slice(&1u32.to_be_bytes());
        p.fill_checksum();
        b
    }

    #[test]
    fn crc32c_reference_values() {
        // RFC 3720 § B.4 (iSCSI uses the same CRC32c): 32 bytes of zeros → aa 36 91 8a,
        // 32 bytes of ones → 43 ab a8 62, bytes 0..=31 → 4e 79 dd 46 (least-significant first).
        assert_eq!(crc32c::crc32c(&[0u8; 32]).to_le_bytes(), [0xaa, 0x36, 0x91, 0x8a]);
        assert_eq!(crc32c::crc32c(&[0xffu8; 32]).to_le_bytes(), [0x43, 0xab, 0xa8, 0x62]);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c::crc32c(&inc).to_le_bytes(), [0x4e, 0x79, 0xdd, 0x46]);
        // The CRC-32C check value of "123456789".
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn deconstruct_reference_init() {
        let bytes = hex(SCAPY_INIT);
        let p = SctpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (0, 0));
        assert_eq!(p.verification_tag(), 0);
        assert_eq!(p.checksum(), 0x5f0b_2c40);
        assert!(p.verify_checksum());
        let chunks: Vec<_> = p.chunks().collect();
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].chunk_type, SctpChunkType::Init);
        assert_eq!(chunks[0].length, 28);
        assert_eq!(p.first_chunk_type(), Some(SctpChunkType::Init));
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert!(!SctpPacket::new_checked(&bad[..]).unwrap().verify_checksum());
    }

    #[test]
    fn construct_init() {
        let b = init();
        assert_eq!(&b[..12 + 4], &[0x9c, 0x40, 0x13, 0xc4, 0, 0, 0, 0, b[8], b[9], b[10], b[11], 1, 0, 0, 20]);
        let p = SctpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.first_chunk_type(), Some(SctpChunkType::Init));
        // Independent of the view: CRC32c of the packet with zeroed field, stored LE.
        let mut zeroed = b.clone();
        zeroed[8..12].fill(0);
        assert_eq!(&b[8..12], &crc32c::crc32c(&zeroed).to_le_bytes());
    }

    #[test]
    fn rewrite_ports_then_fill() {
        let mut b = init();
        let mut p = SctpPacket::new_checked(&mut b[..]).unwrap();
        p.set_src_port(1024);
        p.set_dst_port(38412);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.src_port(), p.dst_port()), (1024, 38412));
    }

    #[test]
    fn chunk_walk_stops_on_bad_lengths() {
        // DATA (len 17, padded to 20), then ABORT (len 4), then a chunk claiming 2 bytes.
        let mut b = [0u8; 12 + 20 + 4 + 4];
        b[12..16].copy_from_slice(&[0, 3, 0, 17]);
        b[32..36].copy_from_slice(&[6, 1, 0, 4]);
        b[36..40].copy_from_slice(&[9, 0, 0, 2]);
        let p = SctpPacket::new_checked(&b[..]).unwrap();
        let types: Vec<_> = p.chunks().map(|c| (c.chunk_type, c.flags)).collect();
        assert_eq!(types, [(SctpChunkType::Data, 3), (SctpChunkType::Abort, 1)]);
        // A chunk longer than the buffer is not yielded.
        let mut b = [0u8; 12 + 8];
        b[12..16].copy_from_slice(&[1, 0, 0, 40]);
        assert_eq!(SctpPacket::new_checked(&b[..]).unwrap().chunks().count(), 0);
        // No chunk at all.
        assert_eq!(SctpPacket::new_checked(&[0u8; 12][..]).unwrap().first_chunk_type(), None);
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..12 {
            assert_eq!(SctpPacket::new_checked(&[0u8; 12][..len]), Err(ParseError::Truncated));
        }
    }

    #[test]
    fn chunk_type_round_trip() {
        for v in 0..=u8::MAX {
            assert_eq!(u8::from(SctpChunkType::from(v)), v);
        }
        assert_eq!(SctpChunkType::from(12), SctpChunkType::Unknown(12));
    }

    proptest! {
        #[test]
        fn never_panics_and_fill_verifies(mut bytes in proptest::collection::vec(any::<u8>(), 0..128), v in any::<u16>()) {
            if let Ok(mut p) = SctpPacket::new_checked(&mut bytes[..]) {
                let _ = (p.src_port(), p.dst_port(), p.verification_tag(), p.checksum(), p.first_chunk_type());
                prop_assert!(p.chunks().count() <= p.chunk_bytes().len() / 4);
                p.set_src_port(v);
                p.fill_checksum();
                prop_assert!(p.verify_checksum());
            }
        }
    }
}
