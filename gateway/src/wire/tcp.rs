//! TCP segments ([RFC 9293] § 3.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! |                        Sequence Number                        |
//! |                    Acknowledgment Number                      |
//! |  Data |       |C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//! |           Checksum            |         Urgent Pointer        |
//! |                    Options                    |    Padding    |
//! |                             data                              |
//! ```
//!
//! The view's buffer is the whole segment, exactly: the IPv4 payload. The checksum covers the
//! IPv4 pseudo-header and the whole buffer. `new_checked` accepts a buffer of at least 20 bytes
//! whose Data Offset is at least 5 and fits in the buffer; after it succeeds no accessor or setter
//! panics (the data offset is re-read and clamped on every access).
//!
//! [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign, Range};

use super::checksum::{self, PseudoHeaderAddr};
use super::{read, ParseError};

mod field {
    use crate::wire::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// The IP protocol number of TCP, for the pseudo-header.
const PROTOCOL_TCP: u8 = 6;

/// The eight control bits of the TCP header (byte 13; [RFC 9293] § 3.1, CWR and ECE from
/// [RFC 3168] § 6.1).
///
/// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
/// [RFC 3168]: https://www.rfc-editor.org/rfc/rfc3168#section-6.1
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No bits set.
    pub const EMPTY: TcpFlags = TcpFlags(0);
    /// FIN: no more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN: synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST: reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH: push function.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK: the Acknowledgment Number field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// URG: the Urgent Pointer field is significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECE: ECN-Echo ([RFC 3168](https://www.rfc-editor.org/rfc/rfc3168#section-6.1)).
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// CWR: Congestion Window Reduced ([RFC 3168](https://www.rfc-editor.org/rfc/rfc3168#section-6.1)).
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// The raw byte.
    #[inline]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every bit of `other` is set in `self` (`SYN|ACK` contains `SYN`).
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set in `self`.
    #[inline]
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no bit is set.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    #[inline]
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for TcpFlags {
    #[inline]
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for TcpFlags {
    type Output = TcpFlags;
    #[inline]
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}

impl fmt::Debug for TcpFlags {
    /// Names joined by `|` (`SYN|ACK`), `(empty)` when none is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(TcpFlags, &str); 8] = [
            (TcpFlags::FIN, "FIN"),
            (TcpFlags::SYN, "SYN"),
            (TcpFlags::RST, "RST"),
            (TcpFlags::PSH, "PSH"),
            (TcpFlags::ACK, "ACK"),
            (TcpFlags::URG, "URG"),
            (TcpFlags::ECE, "ECE"),
            (TcpFlags::CWR, "CWR"),
        ];
        if self.is_empty() {
            return f.write_str("(empty)");
        }
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

/// A read/write view of a TCP segment; the buffer is the whole segment (header, options, data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// The value of the first option of `kind` in a TCP header's `options` (the bytes after
/// its length octet), walking the kind/length list of [RFC 9293 § 3.1]: End of Option List
/// (0) ends it, No-Operation (1) is one octet, every other option carries its length. `None`
/// when absent or when the list is malformed before it (a length below 2 or past the end).
///
/// [RFC 9293 § 3.1]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
pub fn option(options: &[u8], kind: u8) -> Option<&[u8]> {
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            0 => return None,
            1 => i += 1,
            k => {
                let len = usize::from(*options.get(i + 1)?);
                if len < 2 || i + len > options.len() {
                    return None;
                }
                if k == kind {
                    return Some(&options[i + 2..i + len]);
                }
                i += len;
            }
        }
    }
    None
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Length in bytes of a header without options (Data Offset = 5).
    pub const HEADER_LEN: usize = field::URGENT.end;

    /// Wraps `buffer` without checking it; accessors of fixed fields panic if it is shorter than
    /// [`Self::HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps `buffer` after checking the header length ([RFC 9293] § 3.1).
    ///
    /// # Errors
    ///
    /// - [`ParseError::Truncated`] if the buffer is shorter than 20 bytes or than Data Offset × 4;
    /// - [`ParseError::Malformed`] if Data Offset is below 5.
    ///
    /// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let packet = TcpPacket { buffer };
        let len = packet.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let header_len = packet.header_len();
        if header_len < Self::HEADER_LEN {
            return Err(ParseError::Malformed);
        }
        if header_len > len {
            return Err(ParseError::Truncated);
        }
        Ok(packet)
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

    /// The Sequence Number (compare with wrapping arithmetic, [RFC 9293] § 3.4).
    ///
    /// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.4
    #[inline]
    pub fn seq_number(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::SEQ_NUM))
    }

    /// The Acknowledgment Number (significant when ACK is set).
    #[inline]
    pub fn ack_number(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::ACK_NUM))
    }

    /// The header length in bytes, options included: Data Offset × 4, 20..=60 after `new_checked`.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// The control bits.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[field::FLAGS])
    }

    /// The Window field (unscaled; the scale factor is negotiated by the window scale option).
    #[inline]
    pub fn window_len(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::WIN_SIZE))
    }

    /// The Checksum field (host order).
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::CHECKSUM))
    }

    /// The Urgent Pointer (significant when URG is set).
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::URGENT))
    }

    /// The byte range of the options: `20..header_len`, clamped to the buffer.
    #[inline]
    fn options_range(&self) -> Range<usize> {
        let len = self.buffer.as_ref().len();
        let start = Self::HEADER_LEN.min(len);
        let end = self.header_len().min(len).max(start);
        start..end
    }

    /// The options (bytes 20 to `header_len`), empty when Data Offset is 5.
    #[inline]
    pub fn options(&self) -> &[u8] {
        let range = self.options_range();
        &self.buffer.as_ref()[range]
    }

    /// The segment data: everything after the header (options included) to the end of the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[self.header_len().min(data.len())..]
    }

    /// SEG.LEN ([RFC 9293] § 3.4): the data length plus one for SYN and one for FIN, the amount of
    /// sequence space the segment occupies. A RST answering a segment without ACK acknowledges
    /// `SEG.SEQ + SEG.LEN` ([RFC 9293] § 3.10.7.1).
    ///
    /// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.4
    #[inline]
    pub fn segment_len(&self) -> u32 {
        let flags = self.flags();
        (self.payload().len() as u32)
            .wrapping_add(u32::from(flags.contains(TcpFlags::SYN)))
            .wrapping_add(u32::from(flags.contains(TcpFlags::FIN)))
    }

    /// Whether the checksum is correct for a segment carried from `src` to `dst` (IPv4 or IPv6
    /// addresses): the one's complement sum of the pseudo-header and the whole buffer is `0xffff`.
    #[inline]
    pub fn verify_checksum<A: PseudoHeaderAddr>(&self, src: A, dst: A) -> bool {
        A::verifies(self.buffer.as_ref(), src, dst, PROTOCOL_TCP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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

    /// Sets the Sequence Number.
    #[inline]
    pub fn set_seq_number(&mut self, seq: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&seq.to_be_bytes());
    }

    /// Sets the Acknowledgment Number.
    #[inline]
    pub fn set_ack_number(&mut self, ack: u32) {
        self.buffer.as_mut()[field::ACK_NUM].copy_from_slice(&ack.to_be_bytes());
    }

    /// Sets Data Offset from a header length in bytes (`len / 4`, so `len` should be a multiple
    /// of 4 in 20..=60; only the low 4 bits of `len / 4` are stored). Writes the whole byte, so
    /// the reserved bits are cleared, as [RFC 9293] § 3.1 requires of senders.
    ///
    /// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFFSET] = ((len / 4) as u8 & 0x0f) << 4;
    }

    /// Sets the control bits.
    #[inline]
    pub fn set_flags(&mut self, flags: TcpFlags) {
        self.buffer.as_mut()[field::FLAGS] = flags.0;
    }

    /// Sets the Window field.
    #[inline]
    pub fn set_window_len(&mut self, window: u16) {
        self.buffer.as_mut()[field::WIN_SIZE].copy_from_slice(&window.to_be_bytes());
    }

    /// Sets the Checksum field (host order). See also [`Self::fill_checksum`] and
    /// [`checksum::update16`] / [`checksum::update_addr`] for NAT rewrites.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Urgent Pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, urgent: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&urgent.to_be_bytes());
    }

    /// The options, mutable (bytes 20 to `header_len`).
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let range = self.options_range();
        &mut self.buffer.as_mut()[range]
    }

    /// The segment data, mutable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len().min(self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[start..]
    }

    /// Computes the checksum over the pseudo-header of `src`'s family (`src`, `dst`, protocol 6,
    /// the buffer's length; [RFC 9293] § 3.1, [RFC 8200] § 8.1) and the whole buffer, and stores
    /// it.
    ///
    /// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
    /// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
    #[inline]
    pub fn fill_checksum<A: PseudoHeaderAddr>(&mut self, src: A, dst: A) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let pseudo = A::pseudo_header(src, dst, PROTOCOL_TCP, data.len() as u32);
        let check = checksum::finish(checksum::partial(data, pseudo));
        self.set_checksum(check);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for TcpPacket<T> {
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

    /// SYN 198.51.100.7:43210 → 192.0.2.10:80, ISN 0x9d1c3a2b, window 64240, MSS 1460.
    static SYN: [u8; 24] = [
        0xa8, 0xca, 0x00, 0x50, // ports 43210 → 80
        0x9d, 0x1c, 0x3a, 0x2b, // sequence number
        0x00, 0x00, 0x00, 0x00, // acknowledgment number
        0x60, 0x02, 0xfa, 0xf0, // data offset 6, SYN, window 64240
        0x30, 0x8e, 0x00, 0x00, // checksum, urgent pointer
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
    ];

    /// FIN|PSH|ACK 192.0.2.10:80 → 198.51.100.7:43210 carrying "bye\n".
    static FIN: [u8; 24] = [
        0x00, 0x50, 0xa8, 0xca, // ports 80 → 43210
        0x1f, 0x2e, 0x3d, 0x4c, // sequence number
        0x9d, 0x1c, 0x3a, 0x2c, // acknowledgment number
        0x50, 0x19, 0x01, 0xf6, // data offset 5, FIN|PSH|ACK, window 502
        0x1d, 0x2b, 0x00, 0x00, // checksum, urgent pointer
        b'b', b'y', b'e', b'\n',
    ];

    #[test]
    fn deconstruct_syn() {
        let tcp = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!(tcp.src_port(), 43210);
        assert_eq!(tcp.dst_port(), 80);
        assert_eq!(tcp.seq_number(), 0x9d1c_3a2b);
        assert_eq!(tcp.ack_number(), 0);
        assert_eq!(tcp.header_len(), 24);
        assert_eq!(tcp.flags(), TcpFlags::SYN);
        assert_eq!(tcp.window_len(), 64240);
        assert_eq!(tcp.checksum(), 0x308e);
        assert_eq!(tcp.urgent_at(), 0);
        assert_eq!(tcp.options(), &[0x02, 0x04, 0x05, 0xb4]);
        assert!(tcp.payload().is_empty());
        assert_eq!(tcp.segment_len(), 1);
        assert!(tcp.verify_checksum(CLIENT, VIP));
        assert!(!tcp.verify_checksum(VIP, Ipv4Addr::new(198, 51, 100, 8)));
        assert_eq!(tcp.as_ref(), &SYN[..]);
        assert_eq!(tcp.into_inner(), &SYN[..]);
    }

    #[test]
    fn deconstruct_fin() {
        let tcp = TcpPacket::new_checked(&FIN[..]).unwrap();
        assert_eq!(tcp.src_port(), 80);
        assert_eq!(tcp.dst_port(), 43210);
        assert_eq!(tcp.seq_number(), 0x1f2e_3d4c);
        assert_eq!(tcp.ack_number(), 0x9d1c_3a2c);
        assert_eq!(tcp.header_len(), 20);
        assert_eq!(tcp.flags(), TcpFlags::FIN | TcpFlags::PSH | TcpFlags::ACK);
        assert_eq!(tcp.window_len(), 502);
        assert_eq!(tcp.checksum(), 0x1d2b);
        assert_eq!(tcp.urgent_at(), 0);
        assert!(tcp.options().is_empty());
        assert_eq!(tcp.payload(), b"bye\n");
        assert_eq!(tcp.segment_len(), 5);
        assert!(tcp.verify_checksum(VIP, CLIENT));
    }

    #[test]
    fn construct_syn() {
        let mut bytes = [0xa5u8; 24];
        let mut tcp = TcpPacket::new_unchecked(&mut bytes[..]);
        tcp.set_src_port(43210);
        tcp.set_dst_port(80);
        tcp.set_seq_number(0x9d1c_3a2b);
        tcp.set_ack_number(0);
        tcp.set_header_len(24);
        tcp.set_flags(TcpFlags::SYN);
        tcp.set_window_len(64240);
        tcp.set_urgent_at(0);
        tcp.options_mut().copy_from_slice(&[0x02, 0x04, 0x05, 0xb4]);
        tcp.fill_checksum(CLIENT, VIP);
        assert_eq!(bytes, SYN);
    }

    #[test]
    fn construct_fin() {
        let mut bytes = [0xa5u8; 24];
        let mut tcp = TcpPacket::new_unchecked(&mut bytes[..]);
        tcp.set_src_port(80);
        tcp.set_dst_port(43210);
        tcp.set_seq_number(0x1f2e_3d4c);
        tcp.set_ack_number(0x9d1c_3a2c);
        tcp.set_header_len(20);
        tcp.set_flags(TcpFlags::FIN | TcpFlags::PSH | TcpFlags::ACK);
        tcp.set_window_len(502);
        tcp.set_checksum(0);
        tcp.set_urgent_at(0);
        tcp.payload_mut().copy_from_slice(b"bye\n");
        tcp.fill_checksum(VIP, CLIENT);
        assert_eq!(bytes, FIN);
    }

    #[test]
    fn rejects_truncated() {
        for len in 0..SYN.len() {
            assert_eq!(TcpPacket::new_checked(&SYN[..len]), Err(ParseError::Truncated), "len {len}");
        }
        for len in 0..20 {
            assert_eq!(TcpPacket::new_checked(&FIN[..len]), Err(ParseError::Truncated), "len {len}");
        }
        assert!(TcpPacket::new_checked(&FIN[..20]).is_ok());
    }

    #[test]
    fn rejects_malformed() {
        for offset in 0..5u8 {
            let mut bytes = SYN;
            bytes[12] = offset << 4;
            assert_eq!(TcpPacket::new_checked(&bytes[..]), Err(ParseError::Malformed), "offset {offset}");
        }
        // Data offset 15 (60 bytes) in a 24-byte buffer.
        let mut bytes = SYN;
        bytes[12] = 0xf0;
        assert_eq!(TcpPacket::new_checked(&bytes[..]), Err(ParseError::Truncated));
    }

    #[test]
    fn dnat_with_incremental_checksum() {
        // Rewrite the destination 192.0.2.10:80 → 10.244.1.5:8080 as the NAT does.
        let backend = Ipv4Addr::new(10, 244, 1, 5);
        let mut bytes = SYN;
        let mut tcp = TcpPacket::new_checked(&mut bytes[..]).unwrap();
        let mut check = tcp.checksum();
        check = checksum::update_addr(check, VIP, backend);
        check = checksum::update16(check, tcp.dst_port(), 8080);
        tcp.set_dst_port(8080);
        tcp.set_checksum(check);
        assert!(tcp.verify_checksum(CLIENT, backend));
        let mut full = bytes;
        TcpPacket::new_unchecked(&mut full[..]).fill_checksum(CLIENT, backend);
        assert_eq!(bytes, full);
    }

    #[test]
    fn setters_cannot_make_accessors_panic() {
        let mut bytes = SYN;
        let mut tcp = TcpPacket::new_checked(&mut bytes[..]).unwrap();
        for len in [0, 4, 20, 24, 28, 60] {
            tcp.set_header_len(len);
            let _ = (tcp.options().len(), tcp.payload().len(), tcp.segment_len());
            let _ = (tcp.options_mut().len(), tcp.payload_mut().len());
            tcp.fill_checksum(CLIENT, VIP);
            assert!(tcp.verify_checksum(CLIENT, VIP));
        }
    }

    #[test]
    fn flags() {
        let syn_ack = TcpFlags::SYN | TcpFlags::ACK;
        assert!(syn_ack.contains(TcpFlags::SYN));
        assert!(syn_ack.contains(TcpFlags::ACK));
        assert!(syn_ack.contains(syn_ack));
        assert!(!syn_ack.contains(TcpFlags::SYN | TcpFlags::FIN));
        assert!(syn_ack.intersects(TcpFlags::SYN | TcpFlags::FIN));
        assert!(!syn_ack.intersects(TcpFlags::RST));
        assert_eq!(syn_ack & TcpFlags::ACK, TcpFlags::ACK);
        assert_eq!(syn_ack.bits(), 0x12);
        let mut flags = TcpFlags::EMPTY;
        assert!(flags.is_empty());
        flags |= TcpFlags::RST;
        assert_eq!(flags, TcpFlags::RST);
        assert_eq!(format!("{syn_ack:?}"), "SYN|ACK");
        assert_eq!(format!("{:?}", TcpFlags(0xff)), "FIN|SYN|RST|PSH|ACK|URG|ECE|CWR");
        assert_eq!(format!("{:?}", TcpFlags::EMPTY), "(empty)");
    }
}
