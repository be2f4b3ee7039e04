//! The Internet checksum ([RFC 1071]) and its incremental update ([RFC 1624]).
//!
//! The checksum is the 16-bit one's complement of the one's complement sum of the data taken as
//! big-endian 16-bit words (an odd final byte is padded with a zero byte on its right).
//! Computation is split in three steps so that a pseudo-header and a segment can be summed
//! without copying them together:
//!
//! 1. [`partial`] adds bytes to a running *partial sum* (`u32`, not yet folded to 16 bits);
//!    [`pseudo_header_v4`] and [`pseudo_header_v6`] produce the partial sum of the
//!    TCP/UDP/ICMPv6 pseudo-header and [`combine`] adds two partial sums;
//! 2. [`fold`] reduces a partial sum to 16 bits with end-around carry;
//! 3. [`finish`] takes the one's complement: the value to store in the checksum field, in host
//!    order (write it with `to_be_bytes`). [`checksum`] does all three for one slice.
//!
//! A receiver verifies by summing the data *including* the stored checksum: the folded sum is
//! `0xffff` when the checksum is correct.
//!
//! # UDP
//!
//! [RFC 768]: "If the computed checksum is zero, it is transmitted as all ones (the equivalent in
//! one's complement arithmetic). An all zero transmitted checksum value means that the
//! transmitter generated no checksum." [`udp_transmitted`] applies the first rule; the
//! `udp_update*` functions leave an absent (zero) checksum absent and never produce zero.
//!
//! # Incremental update
//!
//! NAT rewrites a few fields of a packet and must not re-read the whole payload. [RFC 1624]
//! § 3, eqn. 3 gives the new checksum from the old one and the old and new field values:
//! `HC' = ~(~HC + ~m + m')`. [RFC 1141]'s `HC' = HC + m + ~m'` (eqn. 2 there) yields `0xffff`
//! where a full recomputation yields `0x0000` (RFC 1624 § 4); eqn. 3 equals the full
//! recomputation except when every checksummed byte of the new data is zero (full
//! recomputation gives `0xffff`, eqn. 3 may give `0x0000`). IPv4 headers and the TCP/UDP
//! pseudo-header are never all zero, so that case does not arise for real packets.
//!
//! Fields must start at an even offset from the start of the checksummed data (every field
//! torii rewrites does).
//!
//! # IPv6
//!
//! [RFC 8200] § 8.1: upper-layer checksums over IPv6 cover a 40-byte pseudo-header (source and
//! destination address, 32-bit upper-layer packet length, three zero bytes and the Next Header
//! value of the upper-layer protocol), and "unlike IPv4, the default behavior when UDP packets
//! are originated by an IPv6 node is that the UDP checksum is not optional": a zero UDP checksum
//! is invalid over IPv6. [`PseudoHeaderAddr`] abstracts over the two families so the TCP, UDP
//! and ICMPv6 views take either address type.
//!
//! [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
//! [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
//! [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
//! [RFC 1141]: https://www.rfc-editor.org/rfc/rfc1141
//! [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624

use std::net::{Ipv4Addr, Ipv6Addr};

/// Adds `data` to the partial sum `initial` and returns the new partial sum (not folded).
///
/// `data` is taken as big-endian 16-bit words. If `data` has an odd length its last byte is
/// padded with a zero byte on the right, so when summing a message in several pieces only the
/// last piece may have an odd length. Start a fresh sum with `initial = 0`. The result is
/// congruent to the one's complement sum modulo `0xffff`, which is all [`fold`] needs.
///
/// Speed ([RFC 1071] § 2): the loop takes 8 bytes per step and adds them as two 32-bit words
/// (§ 2 (C), parallel summation) into a `u64` accumulator, deferring carries (§ 2 (D)). It loads
/// the words in native byte order and converts the folded result once at the end, which
/// byte-order independence (§ 2 (B)) allows. With neither carries nor swaps in the loop the compiler
/// vectorizes it; the tail (up to 7 bytes) is summed without copying. Exactly 20 bytes (an IPv4
/// header without options, on every forwarded packet) skip the loop: five words added at once.
///
/// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071#section-2
#[inline]
pub fn partial(data: &[u8], initial: u32) -> u32 {
    let mut sum = 0u32;
    if let Ok(header) = <&[u8; 20]>::try_from(data) {
        let word = |i: usize| u64::from(u32::from_ne_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]));
        sum = fold64(word(0) + word(4) + word(8) + word(12) + word(16));
    } else {
        for block in data.chunks(BLOCK_LEN) {
            sum = combine(sum, fold64(sum_native(block)));
        }
    }
    // The native-order sum, stored back as bytes, is the big-endian sum (RFC 1071 § 2 (B)).
    combine(u32::from(u16::from_be_bytes(fold(sum).to_ne_bytes())), initial)
}

/// Whether the checksum of the 20-byte IPv4 header `header` (no options) is correct: its one's
/// complement sum is `0xffff` ([RFC 1071] § 2): the same answer as `fold(partial(header, 0))
/// == 0xffff` (a property test compares the two). Always inlined: the early parse makes this
/// one check per frame.
///
/// Summed as two 64-bit words and a 32-bit one with end-around carry (§ 2 (C), (D); native
/// order, § 2 (B)), and not folded: `2^64 − 1` is a multiple of `0xffff`, so the 64-bit sum
/// is congruent to the 16-bit one modulo `0xffff`, and a sum folds to `0xffff` exactly when
/// it is a non-zero multiple of `0xffff` (the 64-bit sum is zero only for an all-zero
/// header, which folds to 0). The compiler tests divisibility by a constant with one
/// multiplication and one compare.
///
/// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
#[inline(always)]
#[must_use]
pub fn ipv4_header_ok(header: &[u8; 20]) -> bool {
    let h = |i: usize| header[i];
    let word64 =
        |i: usize| u64::from_ne_bytes([h(i), h(i + 1), h(i + 2), h(i + 3), h(i + 4), h(i + 5), h(i + 6), h(i + 7)]);
    let (a, b, c) = (word64(0), word64(8), u64::from(u32::from_ne_bytes([h(16), h(17), h(18), h(19)])));
    let (sum, carry) = a.overflowing_add(b);
    // `c + carry` < 2^33; a carry out of the second addition leaves `sum` ≤ 2^64 − 2.
    let (sum, carry) = sum.overflowing_add(c + u64::from(carry));
    nonzero_multiple_of_ffff(sum + u64::from(carry))
}

/// Whether `sum`, a one's complement sum kept unfolded in 64 bits, folds to `0xffff`: it is a
/// non-zero multiple of `0xffff` (2^64 − 1 is one, so the 64-bit sum is congruent to the
/// folded one modulo `0xffff`; it is zero only when every word summed is). Tested as
/// `sum − 1 ≡ −1` modulo `0xffff` (0 wraps to 2^64 − 1, itself a multiple), which the
/// compiler does with one multiplication and one compare.
#[inline(always)]
const fn nonzero_multiple_of_ffff(sum: u64) -> bool {
    sum.wrapping_sub(1) % 0xffff == 0xfffe
}

/// Whether `data` and a pseudo-header whose words sum to `pseudo_native` (taken, as
/// `sum_native` takes `data`, as native-order 16-bit words, added as integers; below
/// 2^40) have the one's complement sum `0xffff`: the same answer as
/// `fold(partial(data, pseudo)) == 0xffff` with `pseudo` the same pseudo-header's partial
/// sum (a property test compares the two), for `data` of at most 65 535 bytes (longer: that
/// formula, [`PseudoHeaderAddr::verifies`]).
///
/// Neither swapped nor folded ([RFC 1071] § 2 (B), (D)): swapping a 16-bit word's bytes
/// multiplies it by 256 modulo `0xffff`, which is prime to 256, so the native-order sum is a
/// multiple of `0xffff` exactly when the big-endian one is; and, as in [`ipv4_header_ok`],
/// a sum folds to `0xffff` exactly when it is a non-zero multiple of `0xffff` (zero only
/// when every word is). Every new flow's SYN has its transport checksum verified: summing
/// the pseudo-header, swapping and folding the segment's sum and combining the two cost it
/// 29 instructions more than this (callgrind, 2026-11-29).
///
/// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
#[inline]
#[must_use]
pub fn sums_to_ones_native(data: &[u8], pseudo_native: u64) -> bool {
    // Below 2^14 steps of less than 2^33 each (`sum_native`), with a pseudo-header below
    // 2^40: no overflow.
    debug_assert!(data.len() <= usize::from(u16::MAX) && pseudo_native < 1 << 40);
    let data_sum = if let Ok(h) = <&[u8; 20]>::try_from(data) {
        // A 20-byte TCP header without options: five words at once, as `partial` takes them.
        let word = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
        word(0) + word(4) + word(8) + word(12) + word(16)
    } else {
        sum_native(data)
    };
    nonzero_multiple_of_ffff(data_sum + pseudo_native)
}

/// `fold(partial(data, pseudo)) == 0xffff`: [`PseudoHeaderAddr::verifies`] of data longer
/// than [`sums_to_ones_native`] takes (no frame is). Cold, out of line.
#[cold]
#[inline(never)]
fn verifies_folded(data: &[u8], pseudo: u32) -> bool {
    fold(partial(data, pseudo)) == 0xffff
}

/// The longest slice [`sum_native`] takes: each 8-byte step adds less than 2^33, so 2^30 steps
/// stay below 2^63 and the `u64` accumulator cannot overflow. A multiple of 8, so only the last
/// block has a ragged tail. (On 32-bit targets no slice reaches it.)
const BLOCK_LEN: usize = 8usize.saturating_mul(1 << 30);

/// The one's complement sum of `data` (at most [`BLOCK_LEN`] bytes) taken as native-order 16-bit
/// words, with carries deferred into the upper bits of the accumulator.
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    let mut acc = 0u64;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let (a, b) = chunk.split_at(4);
        acc += u64::from(u32::from_ne_bytes([a[0], a[1], a[2], a[3]]));
        acc += u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    }
    let mut rest = chunks.remainder();
    if let [a, b, c, d, tail @ ..] = rest {
        acc += u64::from(u32::from_ne_bytes([*a, *b, *c, *d]));
        rest = tail;
    }
    if let [a, b, tail @ ..] = rest {
        acc += u64::from(u16::from_ne_bytes([*a, *b]));
        rest = tail;
    }
    if let [a] = rest {
        // Zero padding on the right: the odd byte is the high byte of its big-endian word.
        acc += u64::from(u16::from_ne_bytes([*a, 0]));
    }
    acc
}

/// Reduces a 64-bit one's complement accumulator to 32 bits (2^32 ≡ 1 modulo 0xffff): the
/// end-around-carry sum of its halves. With `acc = H·2^32 + L`, the upper half of
/// `acc + rotr(acc, 32)` is `H + L` plus the carry out of the lower half's `L + H` — that
/// sum with its carry added back in, in three instructions (Linux's `csum_fold` does the
/// same for 32 → 16 bits: include/asm-generic/checksum.h).
#[inline]
const fn fold64(acc: u64) -> u32 {
    (acc.wrapping_add(acc.rotate_right(32)) >> 32) as u32
}

/// Adds two partial sums (from [`partial`] or [`pseudo_header_v4`]) with end-around carry.
#[inline]
pub const fn combine(a: u32, b: u32) -> u32 {
    let (sum, carry) = a.overflowing_add(b);
    // No overflow: when `carry` is set, `sum` is at most `u32::MAX - 1`.
    sum + carry as u32
}

/// Folds a partial sum to 16 bits with end-around carry: the one's complement sum of the data.
///
/// The result is `0` only when the partial sum is `0` (all data zero); otherwise a sum that is
/// zero modulo `0xffff` folds to `0xffff` ("negative zero").
#[inline]
pub const fn fold(sum: u32) -> u16 {
    // The halves' end-around-carry sum, as in `fold64` (Linux's generic `csum_fold`).
    (sum.wrapping_add(sum.rotate_right(16)) >> 16) as u16
}

/// The value to store in a checksum field for the partial sum `sum`: `!fold(sum)`, host order.
#[inline]
pub const fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// The Internet checksum of `data` ([RFC 1071]): the value to store in the checksum field (host
/// order), computed with the field itself set to zero.
///
/// For UDP, pass the result through [`udp_transmitted`] before storing it.
///
/// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(partial(data, 0))
}

/// The partial sum of the IPv4 pseudo-header that TCP ([RFC 9293] § 3.1) and UDP ([RFC 768])
/// prepend to their checksummed data: source address, destination address, a zero byte, the
/// protocol number and the TCP/UDP length in bytes (header plus data).
///
/// Feed it as `initial` to [`partial`] over the segment.
///
/// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
/// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
#[inline]
pub const fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u32 {
    let src = src.to_bits();
    let dst = dst.to_bits();
    (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + protocol as u32 + length as u32
}

/// The partial sum of the IPv6 pseudo-header ([RFC 8200] § 8.1) that TCP, UDP and ICMPv6
/// ([RFC 4443] § 2.3) prepend to their checksummed data: source address, destination address
/// (the final destination when a Routing header is present), the upper-layer packet length
/// (32 bits) and the Next Header value of the upper-layer protocol (the zero bytes add nothing).
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-2.3
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
#[inline]
pub const fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, length: u32) -> u32 {
    let sum = combine(sum_u128(src.to_bits()), sum_u128(dst.to_bits()));
    combine(sum, combine((length >> 16) + (length & 0xffff), next_header as u32))
}

/// The one's complement sum of a 128-bit value's eight 16-bit words, as a partial sum.
#[inline]
const fn sum_u128(v: u128) -> u32 {
    let a = (v >> 64) as u64;
    let b = v as u64;
    // Two 64-bit halves, each folded with `fold64`: 2^32 ≡ 1 (mod 0xffff) keeps congruence.
    let a = fold64((a >> 32) + (a & 0xffff_ffff));
    let b = fold64((b >> 32) + (b & 0xffff_ffff));
    combine(a, b)
}

/// Like [`update_addr`] for an IPv6 address (eight 16-bit words) that changed from `old` to
/// `new`: for the TCP/UDP/ICMPv6 checksums whose pseudo-header contains it (IPv6 has no header
/// checksum).
#[inline]
pub const fn update_addr_v6(check: u16, old: Ipv6Addr, new: Ipv6Addr) -> u16 {
    Delta::NONE.addr_v6(old, new).apply(check)
}

/// [`update_addr_v6`] for a UDP checksum field: zero stays zero (the caller rejected it on
/// receipt over IPv6, [RFC 8200] § 8.1), a zero result becomes `0xffff`.
///
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
#[inline]
pub const fn udp_update_addr_v6(check: u16, old: Ipv6Addr, new: Ipv6Addr) -> u16 {
    Delta::NONE.addr_v6(old, new).apply_udp(check)
}

/// The changes to the data under a checksum, summed so that a checksum is updated once for
/// all of them: [RFC 1624] § 3, eqn. 3, `HC' = ~(~HC + ~m + m')`, with `~m + m'` summed over
/// every changed 16-bit word (one's complement addition is associative). A NAT rewrite sums
/// the address changes once and applies them to both the IPv4 header checksum and the
/// transport checksum, one fold each, where updating field by field folds once per field.
///
/// Holds a plain `u64` sum, folded once, where it is applied ([`Delta::apply`]: the
/// checksum's own word added, `fold64`, [`fold`]): each 16-bit word adds at most
/// `0x1fffe` and each 32-bit one less than 2^33, so millions of words fit (a rewrite changes
/// at most 18: two IPv6 addresses, two ports), and a sum shared by two checksums (the IPv4
/// header's and the transport's) is folded once per checksum, never in between. The single-field
/// updates below ([`update16`], [`update32`], [`update_addr_v6`] and their UDP forms) are a
/// `Delta` of one field. The arithmetic does not depend on byte order ([RFC 1071] § 2(B)):
/// words and a checksum read as they lie in the packet (`from_ne_bytes`) give the field's new
/// value in the same order, as [`crate::nat::rewrite_ipv4_plain`] uses it.
///
/// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
/// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624#section-3
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta(u64);

impl Delta {
    /// No change.
    pub const NONE: Self = Self(0);

    /// Adds a 16-bit word that changed from `old` to `new`.
    #[inline]
    #[must_use]
    pub const fn word(self, old: u16, new: u16) -> Self {
        Self(self.0 + !old as u64 + new as u64)
    }

    /// Adds a 32-bit field (two adjacent words, e.g. an IPv4 address) that changed from `old`
    /// to `new`.
    #[inline]
    #[must_use]
    pub const fn word32(self, old: u32, new: u32) -> Self {
        self.words32([(old, new)])
    }

    /// Adds 32-bit fields (each two adjacent words: an IPv4 address, two adjacent ports) that
    /// changed from `old` to `new`, summed as 32-bit words ([RFC 1071] § 2(B): the sum may be
    /// taken over wider words and folded at the end; 2^16 ≡ 1 modulo `0xffff`). The same
    /// [`Delta::apply`] results as the fields' 16-bit words one by one ([`Delta::word`]).
    ///
    /// [RFC 1071]: https://www.rfc-editor.org/rfc/rfc1071
    #[inline]
    #[must_use]
    pub const fn words32<const N: usize>(self, changes: [(u32, u32); N]) -> Self {
        let mut acc = self.0;
        let mut i = 0;
        while i < N {
            acc += !changes[i].0 as u64 + changes[i].1 as u64;
            i += 1;
        }
        Self(acc)
    }

    /// Adds an IPv6 address (eight words) that changed from `old` to `new`: its four 32-bit
    /// fields summed at once ([`Delta::words32`]).
    #[inline]
    #[must_use]
    pub const fn addr_v6(self, old: Ipv6Addr, new: Ipv6Addr) -> Self {
        self.words128(old.to_bits(), new.to_bits())
    }

    /// Adds a 128-bit field that changed from `old` to `new`, taken as four 32-bit words
    /// (in whatever byte order the caller took both and the checksum field in, as
    /// [`Delta::words32`]).
    #[inline]
    #[must_use]
    pub const fn words128(self, o: u128, n: u128) -> Self {
        self.words32([
            ((o >> 96) as u32, (n >> 96) as u32),
            ((o >> 64) as u32, (n >> 64) as u32),
            ((o >> 32) as u32, (n >> 32) as u32),
            (o as u32, n as u32),
        ])
    }

    /// The checksum field's new value (host order) for one that read `check` before the
    /// changes.
    #[inline]
    #[must_use]
    pub const fn apply(self, check: u16) -> u16 {
        // Zero only when every term is (`fold64` and `fold` keep a nonzero sum nonzero):
        // as the sum folded step by step.
        finish(fold64(!check as u64 + self.0))
    }

    /// [`Delta::apply`] for a UDP checksum field: zero ("none", IPv4 only) stays zero, a zero
    /// result becomes `0xffff` ([`udp_transmitted`]).
    #[inline]
    #[must_use]
    pub const fn apply_udp(self, check: u16) -> u16 {
        if check == 0 {
            0
        } else {
            udp_transmitted(self.apply(check))
        }
    }
}

/// An IP address type that appears in an upper-layer pseudo-header: [`Ipv4Addr`] ([RFC 9293]
/// § 3.1, [RFC 768]) or [`Ipv6Addr`] ([RFC 8200] § 8.1). Lets the TCP, UDP and ICMPv6 views,
/// the NAT rewrites and the pipeline be written once for both families.
///
/// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
/// [RFC 9293]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
pub trait PseudoHeaderAddr: Copy + Eq + core::fmt::Debug {
    /// Whether a UDP checksum of zero means "none" and is accepted: true for IPv4 ([RFC 768]),
    /// false for IPv6 ([RFC 8200] § 8.1: receivers discard such datagrams).
    ///
    /// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
    /// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
    const UDP_CHECKSUM_OPTIONAL: bool;

    /// The partial sum of the pseudo-header for `protocol` and an upper-layer length in bytes.
    fn pseudo_header(src: Self, dst: Self, protocol: u8, length: u32) -> u32;

    /// Incremental update of a TCP/ICMPv6 checksum after this address changed ([RFC 1624]).
    ///
    /// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624
    fn update_checksum(check: u16, old: Self, new: Self) -> u16;

    /// Whether the upper-layer data `data` (header and payload; its length the
    /// pseudo-header's) of `protocol` carried from `src` to `dst` has a correct checksum:
    /// `fold(partial(data, pseudo_header(..))) == 0xffff`. Both families answer the same
    /// without swapping or folding ([`sums_to_ones_native`]).
    fn verifies(data: &[u8], src: Self, dst: Self, protocol: u8) -> bool;
}

impl PseudoHeaderAddr for Ipv4Addr {
    const UDP_CHECKSUM_OPTIONAL: bool = true;

    #[inline]
    fn pseudo_header(src: Self, dst: Self, protocol: u8, length: u32) -> u32 {
        // IPv4's pseudo-header carries a 16-bit length; longer segments cannot exist.
        pseudo_header_v4(src, dst, protocol, length as u16)
    }

    #[inline]
    fn update_checksum(check: u16, old: Self, new: Self) -> u16 {
        update_addr(check, old, new)
    }

    /// Always inlined (a new flow's SYN verifies its checksum in `flow::handle`): out of
    /// line, with the general sum in it, the call saved six registers.
    #[inline(always)]
    fn verifies(data: &[u8], src: Self, dst: Self, protocol: u8) -> bool {
        // The pseudo-header's 16-bit length, as `pseudo_header` takes it.
        let length = data.len() as u16;
        if data.len() > usize::from(u16::MAX) {
            return verifies_folded(data, Self::pseudo_header(src, dst, protocol, data.len() as u32));
        }
        // The pseudo-header's words as they lie in memory (the addresses in network order,
        // then a zero byte and the protocol, then the length in network order), read as
        // `sum_native` reads data.
        let pseudo = u64::from(u32::from_ne_bytes(src.octets()))
            + u64::from(u32::from_ne_bytes(dst.octets()))
            + u64::from(u16::from_ne_bytes([0, protocol]))
            + u64::from(u16::from_ne_bytes(length.to_be_bytes()));
        sums_to_ones_native(data, pseudo)
    }
}

impl PseudoHeaderAddr for Ipv6Addr {
    const UDP_CHECKSUM_OPTIONAL: bool = false;

    #[inline]
    fn pseudo_header(src: Self, dst: Self, protocol: u8, length: u32) -> u32 {
        pseudo_header_v6(src, dst, protocol, length)
    }

    #[inline]
    fn update_checksum(check: u16, old: Self, new: Self) -> u16 {
        update_addr_v6(check, old, new)
    }

    /// Always inlined, as IPv4's.
    #[inline(always)]
    fn verifies(data: &[u8], src: Self, dst: Self, protocol: u8) -> bool {
        if data.len() > usize::from(u16::MAX) {
            return verifies_folded(data, Self::pseudo_header(src, dst, protocol, data.len() as u32));
        }
        // The pseudo-header's words as they lie in memory (the addresses, the 32-bit length
        // in network order, three zero bytes and the Next Header value), read as
        // `sum_native` reads data: ten 32-bit words, below 2^36.
        let words = |a: [u8; 16]| {
            let w = |i: usize| u64::from(u32::from_ne_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]));
            w(0) + w(4) + w(8) + w(12)
        };
        let pseudo = words(src.octets())
            + words(dst.octets())
            + u64::from(u32::from_ne_bytes((data.len() as u32).to_be_bytes()))
            + u64::from(u32::from_ne_bytes([0, 0, 0, protocol]));
        sums_to_ones_native(data, pseudo)
    }
}

/// Incrementally updates the checksum `check` (host order, as read from the field) after a
/// 16-bit field changed from `old` to `new`: [RFC 1624] § 3, eqn. 3, `HC' = ~(~HC + ~m + m')`.
///
/// Not for UDP checksums, whose zero means "none": see [`udp_update16`].
///
/// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624#section-3
#[inline]
pub const fn update16(check: u16, old: u16, new: u16) -> u16 {
    Delta::NONE.word(old, new).apply(check)
}

/// Like [`update16`] for a 32-bit field (two adjacent 16-bit words, e.g. a TCP sequence number)
/// that changed from `old` to `new`.
#[inline]
pub const fn update32(check: u16, old: u32, new: u32) -> u16 {
    Delta::NONE.word32(old, new).apply(check)
}

/// Like [`update32`] for an IPv4 address that changed from `old` to `new`: use it on the IPv4
/// header checksum, and on the TCP/UDP checksum whose pseudo-header contains the address.
#[inline]
pub const fn update_addr(check: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    update32(check, old.to_bits(), new.to_bits())
}

/// Maps a computed checksum to the value UDP transmits ([RFC 768]): a computed `0x0000` is sent
/// as `0xffff`, because a transmitted zero means "no checksum". Other values are unchanged.
///
/// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
#[inline]
pub const fn udp_transmitted(check: u16) -> u16 {
    if check == 0 {
        0xffff
    } else {
        check
    }
}

/// [`update16`] for a UDP checksum field ([RFC 768]): a zero `check` (the sender computed no
/// checksum) stays zero, and a zero result is transmitted as `0xffff`.
///
/// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
#[inline]
pub const fn udp_update16(check: u16, old: u16, new: u16) -> u16 {
    Delta::NONE.word(old, new).apply_udp(check)
}

/// [`update32`] for a UDP checksum field: zero stays zero, a zero result becomes `0xffff`.
#[inline]
pub const fn udp_update32(check: u16, old: u32, new: u32) -> u16 {
    Delta::NONE.word32(old, new).apply_udp(check)
}

/// [`update_addr`] for a UDP checksum field: zero stays zero, a zero result becomes `0xffff`.
#[inline]
pub const fn udp_update_addr(check: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    udp_update32(check, old.to_bits(), new.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Textbook RFC 1071 § 4.1: byte pairs into a u32, odd byte padded, folded at the end.
    fn reference(data: &[u8]) -> u16 {
        let mut sum: u64 = 0;
        let mut i = 0;
        while i + 1 < data.len() {
            sum += u64::from(u16::from_be_bytes([data[i], data[i + 1]]));
            i += 2;
        }
        if i < data.len() {
            sum += u64::from(data[i]) << 8;
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn set16(data: &mut [u8], at: usize, v: u16) -> u16 {
        let old = u16::from_be_bytes([data[at], data[at + 1]]);
        data[at..at + 2].copy_from_slice(&v.to_be_bytes());
        old
    }

    fn set32(data: &mut [u8], at: usize, v: u32) -> u32 {
        let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        data[at..at + 4].copy_from_slice(&v.to_be_bytes());
        old
    }

    /// [`ipv4_header_ok`] at the edges of its sum: all zero (folds to 0: not correct), all
    /// ones, sums that are multiples of `0xffff` with and without carries out of 64 bits.
    #[test]
    fn ipv4_header_ok_edges() {
        let general = |h: &[u8; 20]| fold(partial(h, 0)) == 0xffff;
        let mut cases = vec![[0u8; 20], [0xff; 20]];
        for fill in [0x01, 0x80, 0xfe] {
            let mut h = [fill; 20];
            h[10..12].fill(0);
            let check = checksum(&h);
            h[10..12].copy_from_slice(&check.to_be_bytes());
            cases.push(h);
        }
        let mut one = [0u8; 20];
        one[19] = 1;
        cases.push(one);
        let mut ffff = [0u8; 20];
        ffff[0..2].fill(0xff);
        cases.push(ffff);
        for h in &cases {
            assert_eq!(ipv4_header_ok(h), general(h), "{h:02x?}");
        }
        assert!(!ipv4_header_ok(&[0; 20]));
        assert!(ipv4_header_ok(&[0xff; 20]));
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 § 3: the sum of 0001 f203 f4f5 f6f7 is ddf2 (after the carries); checksum 220d.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(partial(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
    }

    #[test]
    fn rfc1624_example() {
        // RFC 1624 § 4: the other header words sum to 0xcd7a; m = 0x5555 changes to 0x3285.
        let hc = !fold(0xcd7a + 0x5555);
        assert_eq!(hc, 0xdd2f);
        assert_eq!(update16(hc, 0x5555, 0x3285), 0x0000);
        assert_eq!(update16(hc, 0x5555, 0x3285), !fold(0xcd7a + 0x3285));
        // RFC 1141's eqn. 2, HC + m + ~m', gives 0xffff here: the boundary case RFC 1624 fixes.
        assert_eq!(fold(u32::from(hc) + 0x5555 + u32::from(!0x3285u16)), 0xffff);
        // An unchanged field leaves a checksum alone (RFC 1624 erratum 4782 concerns this case).
        assert_eq!(update16(0x0000, 0x5555, 0x5555), 0x0000);
        assert_eq!(update16(0x1234, 0xabcd, 0xabcd), 0x1234);
    }

    #[test]
    fn known_ipv4_header() {
        // A real IPv4 header (the Wikipedia example); stored checksum b861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        assert_eq!(fold(partial(&h, 0)), 0xffff);
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0xb861);
    }

    #[test]
    fn empty_and_zero() {
        assert_eq!(partial(&[], 0), 0);
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(checksum(&[0; 13]), 0xffff);
        assert_eq!(udp_transmitted(0), 0xffff);
        assert_eq!(udp_transmitted(0x1234), 0x1234);
        assert_eq!(udp_update16(0, 1, 2), 0);
        assert_eq!(udp_update32(0, 1, 2), 0);
        assert_eq!(udp_update_addr(0, Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8)), 0);
    }

    #[test]
    fn fold_extremes() {
        assert_eq!(fold(0), 0);
        assert_eq!(fold(0xffff), 0xffff);
        assert_eq!(fold(0x1_0000), 1);
        assert_eq!(fold(u32::MAX), 0xffff);
        assert_eq!(combine(u32::MAX, u32::MAX), u32::MAX);
        assert_eq!(combine(u32::MAX, 1), 1);
        // Words of all ones exercise the deferred carries and the end-around carry.
        assert_eq!(fold(partial(&[0xff; 64], u32::MAX)), 0xffff);
        assert_eq!(fold(partial(&[0xff; 65], 0)), 0xff00);
        assert_eq!(checksum(&[0xff; 64]), 0);
    }

    fn pseudo_header_bytes(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> [u8; 12] {
        let mut bytes = [0u8; 12];
        bytes[0..4].copy_from_slice(&src.octets());
        bytes[4..8].copy_from_slice(&dst.octets());
        bytes[9] = protocol;
        bytes[10..12].copy_from_slice(&length.to_be_bytes());
        bytes
    }

    #[test]
    fn pseudo_header_matches_bytes() {
        let src = Ipv4Addr::new(198, 51, 100, 7);
        let dst = Ipv4Addr::new(192, 0, 2, 10);
        let bytes = pseudo_header_bytes(src, dst, 17, 1480);
        assert_eq!(fold(pseudo_header_v4(src, dst, 17, 1480)), fold(partial(&bytes, 0)));
        let (ones, max) = (Ipv4Addr::BROADCAST, u16::MAX);
        let bytes = pseudo_header_bytes(ones, ones, 255, max);
        assert_eq!(fold(pseudo_header_v4(ones, ones, 255, max)), fold(partial(&bytes, 0)));
    }

    fn pseudo_header_v6_bytes(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, length: u32) -> [u8; 40] {
        let mut bytes = [0u8; 40];
        bytes[0..16].copy_from_slice(&src.octets());
        bytes[16..32].copy_from_slice(&dst.octets());
        bytes[32..36].copy_from_slice(&length.to_be_bytes());
        bytes[39] = next_header;
        bytes
    }

    #[test]
    fn pseudo_header_v6_known_packet() {
        // An ICMPv6 echo request fe80::1 → fe80::2, id 0x1234 seq 1, no data:
        // the stored checksum makes the sum over pseudo-header and message 0xffff.
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst: Ipv6Addr = "fe80::2".parse().unwrap();
        let mut msg = [0x80, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x01];
        let check = finish(partial(&msg, pseudo_header_v6(src, dst, 58, 8)));
        // 2·0xfe80 + 1 + 2 + 8 + 58 + 0x8000 + 0x1234 + 1 = 0x28f7a → 0x8f7c, complement 0x7083.
        assert_eq!(check, 0x7083);
        msg[2..4].copy_from_slice(&check.to_be_bytes());
        assert_eq!(fold(partial(&msg, pseudo_header_v6(src, dst, 58, 8))), 0xffff);
        let ones = Ipv6Addr::from(u128::MAX);
        let bytes = pseudo_header_v6_bytes(ones, ones, 255, u32::MAX);
        assert_eq!(fold(pseudo_header_v6(ones, ones, 255, u32::MAX)), fold(partial(&bytes, 0)));
    }

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..max)
    }

    /// [`PseudoHeaderAddr::verifies`] of `data` from `src` to `dst` against
    /// `fold(partial(data, pseudo_header(..))) == 0xffff`: `data` cut or padded to 20 bytes
    /// first when `twenty`, and its checksum field at 16 made right first when `fix` (then it
    /// must verify).
    fn verifies_as_folded<A: PseudoHeaderAddr>(
        mut data: Vec<u8>,
        (src, dst): (A, A),
        protocol: u8,
        fix: bool,
        twenty: bool,
    ) -> Result<(), TestCaseError> {
        if twenty {
            data.resize(20, 0);
        }
        let pseudo = |data: &[u8]| A::pseudo_header(src, dst, protocol, data.len() as u32);
        let fix = fix && data.len() >= 18;
        if fix {
            data[16..18].copy_from_slice(&[0, 0]);
            let c = finish(partial(&data, pseudo(&data)));
            data[16..18].copy_from_slice(&c.to_be_bytes());
        }
        let expected = fold(partial(&data, pseudo(&data))) == 0xffff;
        prop_assert_eq!(A::verifies(&data, src, dst, protocol), expected);
        if fix {
            prop_assert!(expected);
        }
        Ok(())
    }

    proptest! {
        /// The rotate folds against the textbook two-step end-around carry (RFC 1071 § 2(C)).
        #[test]
        fn folds_match_two_step_end_around_carry(acc in any::<u64>(), sum in any::<u32>()) {
            let two_step64 = |a: u64| {
                let s = (a & 0xffff_ffff) + (a >> 32);
                ((s & 0xffff_ffff) + (s >> 32)) as u32
            };
            let two_step = |a: u32| {
                let s = (a & 0xffff) + (a >> 16);
                ((s & 0xffff) + (s >> 16)) as u16
            };
            prop_assert_eq!(fold64(acc), two_step64(acc));
            prop_assert_eq!(fold(sum), two_step(sum));
            prop_assert_eq!(fold(fold64(acc)), two_step(two_step64(acc)));
        }

        #[test]
        fn pseudo_header_v6_matches_reference(
            src in any::<u128>(),
            dst in any::<u128>(),
            next_header in any::<u8>(),
            length in any::<u32>(),
        ) {
            let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            let bytes = pseudo_header_v6_bytes(src, dst, next_header, length);
            prop_assert_eq!(finish(pseudo_header_v6(src, dst, next_header, length)), reference(&bytes));
        }

        #[test]
        fn update_addr_v6_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 16..256),
            at in any::<prop::sample::Index>(),
            new in any::<u128>(),
            udp_absent in any::<bool>(),
        ) {
            let at = at.index((data.len() - 16) / 2 + 1) * 2;
            let check = checksum(&data);
            let old = Ipv6Addr::from(<[u8; 16]>::try_from(&data[at..at + 16]).unwrap());
            data[at..at + 16].copy_from_slice(&new.to_be_bytes());
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update_addr_v6(check, old, Ipv6Addr::from(new)), checksum(&data));
            let udp = if udp_absent { 0 } else { udp_transmitted(check) };
            let want = if udp_absent { 0 } else { udp_transmitted(checksum(&data)) };
            prop_assert_eq!(udp_update_addr_v6(udp, old, Ipv6Addr::from(new)), want);
        }

        /// IPv4's unswapped, unfolded verification against the partial sum's, on any data
        /// and on data whose checksum was made right (a TCP header's field at 16).
        #[test]
        fn ipv4_verifies_as_the_folded_partial_sum(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            src in any::<u32>(),
            dst in any::<u32>(),
            protocol in any::<u8>(),
            fix in any::<bool>(),
            twenty in any::<bool>(),
        ) {
            verifies_as_folded(data, (Ipv4Addr::from_bits(src), Ipv4Addr::from_bits(dst)), protocol, fix, twenty)?;
        }

        /// IPv6's the same.
        #[test]
        fn ipv6_verifies_as_the_folded_partial_sum(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            src in any::<u128>(),
            dst in any::<u128>(),
            protocol in any::<u8>(),
            fix in any::<bool>(),
            twenty in any::<bool>(),
        ) {
            verifies_as_folded(data, (Ipv6Addr::from_bits(src), Ipv6Addr::from_bits(dst)), protocol, fix, twenty)?;
        }

        #[test]
        fn checksum_matches_reference(data in bytes(2048)) {
            prop_assert_eq!(checksum(&data), reference(&data));
        }

        /// The 20-byte path (an IPv4 header without options) sums as the loop does.
        #[test]
        fn twenty_byte_checksum_matches_reference(
            data in proptest::array::uniform20(any::<u8>()),
            initial in any::<u32>(),
        ) {
            prop_assert_eq!(checksum(&data), reference(&data));
            let pieces = combine(partial(&data[..18], 0), partial(&data[18..], initial));
            prop_assert_eq!(fold(partial(&data, initial)), fold(pieces));
        }

        /// The early parse's header check ([`ipv4_header_ok`]: 64-bit words, a divisibility
        /// test) answers as the general sum does, on headers whose checksum field is set
        /// right, then perhaps broken (a byte changed, a word's bytes swapped, the sum's
        /// negative zero `0x0000` ↔ `0xffff` exchanged), and on arbitrary bytes.
        #[test]
        fn ipv4_header_ok_matches_the_general_sum(
            mut header in proptest::array::uniform20(any::<u8>()),
            set in any::<bool>(),
            change in proptest::option::of((0usize..20, any::<u8>())),
            swap in proptest::option::of(0usize..10),
            flip_zero in any::<bool>(),
        ) {
            if set {
                header[10..12].fill(0);
                let check = checksum(&header);
                header[10..12].copy_from_slice(&check.to_be_bytes());
            }
            if flip_zero {
                // A field of 0x0000 or 0xffff (the two zeros of one's complement) exchanged.
                let at = 10;
                match u16::from_be_bytes([header[at], header[at + 1]]) {
                    0 => header[at..at + 2].fill(0xff),
                    0xffff => header[at..at + 2].fill(0),
                    _ => {}
                }
            }
            if let Some((at, byte)) = change {
                header[at] = byte;
            }
            if let Some(w) = swap {
                header.swap(2 * w, 2 * w + 1);
            }
            prop_assert_eq!(ipv4_header_ok(&header), fold(partial(&header, 0)) == 0xffff);
            prop_assert_eq!(ipv4_header_ok(&header), reference(&header) == 0 && header != [0; 20]);
        }

        #[test]
        fn pseudo_header_matches_reference(
            src in any::<u32>(),
            dst in any::<u32>(),
            protocol in any::<u8>(),
            length in any::<u16>(),
        ) {
            let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            let bytes = pseudo_header_bytes(src, dst, protocol, length);
            prop_assert_eq!(finish(pseudo_header_v4(src, dst, protocol, length)), reference(&bytes));
        }

        #[test]
        fn partial_sums_chain(a in bytes(256), b in bytes(256), initial in any::<u32>()) {
            // Every piece but the last must have an even length.
            let a = &a[..a.len() & !1];
            let whole = [a, &b[..]].concat();
            prop_assert_eq!(fold(partial(&b, partial(a, initial))), fold(partial(&whole, initial)));
            prop_assert_eq!(
                fold(combine(partial(a, 0), partial(&b, 0))),
                fold(partial(&whole, 0))
            );
        }

        #[test]
        fn update16_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 2..512),
            at in any::<prop::sample::Index>(),
            new in any::<u16>(),
        ) {
            let at = at.index(data.len() / 2) * 2;
            let check = checksum(&data);
            let old = set16(&mut data, at, new);
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update16(check, old, new), checksum(&data));
        }

        #[test]
        fn update32_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 4..512),
            at in any::<prop::sample::Index>(),
            new in any::<u32>(),
        ) {
            let at = at.index(data.len() / 2 - 1) * 2;
            let check = checksum(&data);
            let old = set32(&mut data, at, new);
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update32(check, old, new), checksum(&data));
        }

        /// Several changes summed in one [`Delta`] and applied once give the checksum of the
        /// changed data, as updating field by field does (the NAT rewrites' way).
        #[test]
        fn delta_of_several_fields_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 40..512),
            words in proptest::collection::vec((any::<prop::sample::Index>(), any::<u16>()), 0..4),
            longs in proptest::collection::vec((any::<prop::sample::Index>(), any::<u32>()), 0..4),
            v6 in proptest::option::of((any::<prop::sample::Index>(), any::<u128>())),
            udp in any::<bool>(),
        ) {
            let check = checksum(&data);
            let mut delta = Delta::NONE;
            for (at, new) in words {
                let at = at.index(data.len() / 2) * 2;
                delta = delta.word(set16(&mut data, at, new), new);
            }
            for (at, new) in longs {
                let at = at.index(data.len() / 2 - 1) * 2;
                delta = delta.word32(set32(&mut data, at, new), new);
            }
            if let Some((at, new)) = v6 {
                let at = at.index((data.len() - 16) / 2 + 1) * 2;
                let old = Ipv6Addr::from(<[u8; 16]>::try_from(&data[at..at + 16]).unwrap());
                data[at..at + 16].copy_from_slice(&new.to_be_bytes());
                delta = delta.addr_v6(old, Ipv6Addr::from(new));
            }
            prop_assume!(data.iter().any(|&b| b != 0));
            if udp {
                prop_assert_eq!(delta.apply_udp(check), udp_transmitted(checksum(&data)));
                prop_assert_eq!(delta.apply_udp(0), 0, "no UDP checksum stays none");
            } else {
                prop_assert_eq!(delta.apply(check), checksum(&data));
            }
        }

        #[test]
        fn update_addr_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 4..512),
            at in any::<prop::sample::Index>(),
            new in any::<u32>(),
        ) {
            let at = at.index(data.len() / 2 - 1) * 2;
            let check = checksum(&data);
            let old = Ipv4Addr::from(set32(&mut data, at, new));
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update_addr(check, old, Ipv4Addr::from(new)), checksum(&data));
        }

        #[test]
        fn udp_updates_match_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 4..512),
            at in any::<prop::sample::Index>(),
            new in any::<u32>(),
            absent in any::<bool>(),
        ) {
            let at = at.index(data.len() / 2 - 1) * 2;
            let check = if absent { 0 } else { udp_transmitted(checksum(&data)) };
            let mut data16 = data.clone();
            let old16 = set16(&mut data16, at, new as u16);
            let old32 = set32(&mut data, at, new);
            prop_assume!(data.iter().any(|&b| b != 0) && data16.iter().any(|&b| b != 0));
            let (want16, want32) = if absent {
                (0, 0)
            } else {
                (udp_transmitted(checksum(&data16)), udp_transmitted(checksum(&data)))
            };
            prop_assert_eq!(udp_update16(check, old16, new as u16), want16);
            prop_assert_eq!(udp_update32(check, old32, new), want32);
            prop_assert_eq!(udp_update_addr(check, Ipv4Addr::from(old32), Ipv4Addr::from(new)), want32);
        }

        #[test]
        fn udp_update_of_computed_zero(
            mut data in proptest::collection::vec(any::<u8>(), 4..64),
            new in any::<u16>(),
        ) {
            // Force the old sum to be "negative zero" so the computed checksum is 0, sent as 0xffff.
            let fix = fold(partial(&data[2..], 0));
            data[0..2].copy_from_slice(&(!fix).to_be_bytes());
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(checksum(&data), 0);
            let check = udp_transmitted(checksum(&data));
            prop_assert_eq!(check, 0xffff);
            let old = set16(&mut data, 0, new);
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(udp_update16(check, old, new), udp_transmitted(checksum(&data)));
        }
    }
}
