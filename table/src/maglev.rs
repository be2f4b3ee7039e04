//! Maglev consistent-hash rings and the flow hashes that index them.
//!
//! Source: D. E. Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016, §3.4 ("Consistent Hashing") and Pseudocode 1 (lookup table
//! population).
//!
//! Contract:
//! - [`build`] is a pure function of the *set* of backend identities (address and port)
//!   and the ring size: neither the order of the input slice nor the host it runs on
//!   changes which backend identity owns which slot. Several gateway hosts behind ECMP
//!   therefore build identical rings, and a flow that moves between them finds the same
//!   backend (DESIGN.md, "Where users outgrow one gateway").
//! - Every hash here is XXH3-64 (`xxhash_rust::xxh3::xxh3_64_with_seed`) with a fixed
//!   seed over a fixed byte layout, so its output is specified and stable across hosts,
//!   architectures and releases. The golden tests at the bottom of this file pin the
//!   outputs: if they fail, gateways running old and new code would disagree.
//! - Addresses are encoded as 16 bytes: IPv6 as is, IPv4 as the IPv4-mapped IPv6 address
//!   `::ffff:a.b.c.d` ([RFC 4291 § 2.5.5.2]). An IPv4 address and its mapped IPv6 form
//!   are therefore the same identity. Ports are encoded big-endian (network order).
//! - Nothing here panics in release builds, whatever the inputs.
//!
//! [RFC 4291 § 2.5.5.2]: https://www.rfc-editor.org/rfc/rfc4291#section-2.5.5.2

use std::net::{IpAddr, Ipv4Addr};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The ring size used by the Maglev paper (§5.3) and by Katran: 65537 slots, a prime.
///
/// Services get [`ring_size_for`] instead (scaled to their backend count); this constant
/// is for benchmarks and for comparison with those systems.
pub const DEFAULT_RING_SIZE: u32 = 65537;

/// Seed of h1 (the `offset` hash of a backend's permutation, §3.4).
const SEED_OFFSET: u64 = 0x6d61_676c_6576_2d6f; // "maglev-o"
/// Seed of h2 (the `skip` hash of a backend's permutation, §3.4).
const SEED_SKIP: u64 = 0x6d61_676c_6576_2d73; // "maglev-s"
/// Seed of the 5-tuple hash that picks a ring slot ([`flow_hash`]).
const SEED_FLOW: u64 = 0x746f_7269_692d_666c; // "torii-fl"
/// Seed of the client-address hash ([`client_hash`]).
const SEED_CLIENT: u64 = 0x746f_7269_692d_636c; // "torii-cl"

/// Ring sizes [`ring_size_for`] chooses from: primes just above 251 · 2^k.
const RING_SIZES: [u32; 15] =
    [251, 509, 1021, 2053, 4099, 8209, 16411, 32771, 65537, 131_101, 262_147, 524_309, 1_048_583, 2_097_169, 4_194_319];

/// Slots per backend that [`ring_size_for`] asks for: with M ≥ 101 · n, the one-slot
/// difference Pseudocode 1 allows between backends is under 1% of a backend's share
/// (the paper sizes tables the same way: M a prime above 100 · N for at most a 1%
/// difference in hash space between backends).
const MIN_SLOTS_PER_BACKEND: usize = 101;

/// Marks a ring slot not yet taken during [`build`]; never present in a returned ring.
const EMPTY: u32 = u32::MAX;

/// Length in bytes of the canonical encoding of an address and port (16 + 2).
const ENDPOINT_LEN: usize = 18;

/// Length in bytes of the canonical 5-tuple encoding hashed by [`flow_hash`]:
/// protocol (1), source address (16), source port (2, big-endian), destination
/// address (16), destination port (2, big-endian).
const FLOW_LEN: usize = 1 + ENDPOINT_LEN + ENDPOINT_LEN;

/// The ring size M for a Service with `backends` backends: the smallest prime in a fixed
/// table (251, 509, 1021, 2053, 4099, 8209, 16411, 32771, 65537, 131101, 262147, 524309,
/// 1048583, 2097169, 4194319) that is at least `max(101 · backends, 251)`.
///
/// M ≥ 101 · n keeps the imbalance Pseudocode 1 allows (max − min ≤ 1 slot) under 1% of
/// a backend's share, as the Maglev paper (Eisenbud et al., NSDI 2016, §3.4) recommends;
/// scaling M with n keeps the tables of small Services small instead of 65537 slots each.
/// Above 41527 backends the result saturates at 4194319, which is then less than
/// 101 · n but still a valid ring size for [`build`] while it exceeds `backends`.
/// Zero backends give 251 (no ring is built for them anyway: [`build`] returns an empty
/// ring).
#[must_use]
pub fn ring_size_for(backends: usize) -> u32 {
    let wanted = backends.saturating_mul(MIN_SLOTS_PER_BACKEND);
    RING_SIZES.iter().copied().find(|&m| m as usize >= wanted).unwrap_or(RING_SIZES[RING_SIZES.len() - 1])
}

/// Builds the Maglev lookup table ("ring") for `backends`, each identified by its address
/// and port (never by its position in the slice).
///
/// Returns a `Vec` of length `ring_size` whose entries are 0-based indices into
/// `backends`; a flow whose hash is `h` goes to `backends[ring[h % ring_size]]` (see
/// [`lookup`]). Empty `backends` or `ring_size == 0` give an empty `Vec`.
///
/// Algorithm (Eisenbud et al., NSDI 2016, §3.4 and Pseudocode 1): backend `b` prefers the
/// slots `permutation[j] = (offset + j · skip) mod M` for j = 0, 1, …, with
/// `offset = h1(b) mod M` and `skip = h2(b) mod (M − 1) + 1`, where h1 and h2 are XXH3-64
/// with two fixed seeds over the 18-byte identity (16-byte address, IPv4 mapped to
/// `::ffff:a.b.c.d`, then the port big-endian). Backends take turns, each taking its next
/// preferred slot that is still empty, until every slot is taken. The turns go in
/// ascending order of identity bytes, so the slot → identity mapping does not depend on
/// the order of `backends`. Equal weights: with n distinct backends and M ≥ n, every
/// backend owns ⌊M/n⌋ or ⌈M/n⌉ slots (one per round until the ring is full).
///
/// Preconditions: `ring_size` is a prime greater than `backends.len()` (use
/// [`ring_size_for`]); checked with `debug_assert!`. In release builds other sizes still
/// give a completely filled ring: if `ring_size` is not prime, a backend's `skip` is
/// raised to the next value coprime with it (a no-op for a prime, where every skip in
/// 1..M is coprime), so each permutation still visits every slot; if `ring_size` is not
/// greater than the number of distinct backends, the first `ring_size` backends in
/// identity order get one slot each and the others none.
///
/// Duplicate identities (including an IPv4 address given once as `V4` and once as its
/// IPv4-mapped `V6` form) are one backend: it gets one share of the ring, and all its
/// slots hold the lowest index at which that identity appears; the other indices appear
/// nowhere. Only the first `u32::MAX` entries of `backends` are considered (indices are
/// `u32`, and `u32::MAX` marks an empty slot while filling).
///
/// Cost: O(M log M) slot probes and O(n log n) for sorting, no M × n matrix: permutation
/// entries are computed as the fill goes. M = 65537 with n = 1000 takes about 1.2 ms
/// (release build, 2-core development machine; `build_time_65537_x_1000` measures it).
#[must_use]
pub fn build(backends: &[(IpAddr, u16)], ring_size: u32) -> Vec<u32> {
    debug_assert!(is_prime(ring_size), "Maglev ring size {ring_size} is not prime");
    debug_assert!(
        ring_size as usize > backends.len(),
        "Maglev ring size {ring_size} is not greater than the backend count {}",
        backends.len()
    );
    fill(backends, ring_size)
}

/// One backend's state during the fill: its caller index, its next candidate slot
/// (`permutation[next]` of Pseudocode 1, kept as a slot number) and its skip.
#[derive(Clone, Copy)]
struct Cursor {
    index: u32,
    slot: u32,
    skip: u32,
}

/// [`build`] without the debug assertions: Pseudocode 1 for any `ring_size`.
fn fill(backends: &[(IpAddr, u16)], ring_size: u32) -> Vec<u32> {
    let m = ring_size;
    // Indices must fit in u32 and differ from EMPTY.
    let backends = &backends[..backends.len().min(EMPTY as usize)];
    if backends.is_empty() || m == 0 {
        return Vec::new();
    }

    // Canonical order: by identity bytes, then by caller index so that of duplicate
    // identities the lowest index comes first and is the one kept.
    let mut keyed: Vec<([u8; ENDPOINT_LEN], u32)> =
        backends.iter().enumerate().map(|(i, &(addr, port))| (endpoint_bytes(addr, port), i as u32)).collect();
    keyed.sort_unstable();
    keyed.dedup_by(|later, earlier| later.0 == earlier.0);
    // Pseudocode 1 gives each backend one slot per round, so with more backends than
    // slots only the first M (in turn order) get any: the rest can be dropped up front.
    keyed.truncate(m as usize);

    let mut cursors: Vec<Cursor> = keyed
        .iter()
        .map(|(key, index)| {
            let offset = (xxh3_64_with_seed(key, SEED_OFFSET) % u64::from(m)) as u32;
            let skip = if m > 1 { (xxh3_64_with_seed(key, SEED_SKIP) % u64::from(m - 1)) as u32 + 1 } else { 1 };
            Cursor { index: *index, slot: offset, skip: coprime_skip(skip, m) }
        })
        .collect();

    let mut ring = vec![EMPTY; m as usize];
    let mut filled: u32 = 0;
    loop {
        for cursor in &mut cursors {
            // Each permutation is a full cycle over 0..M (skip coprime with M) and at
            // least one slot is empty here, so this loop ends within M probes.
            let skip = cursor.skip;
            let wrap = m - skip; // slot + skip >= m  <=>  slot >= wrap (no u32 overflow)
            let mut slot = cursor.slot;
            while ring[slot as usize] != EMPTY {
                slot = if slot >= wrap { slot - wrap } else { slot + skip };
            }
            ring[slot as usize] = cursor.index;
            cursor.slot = if slot >= wrap { slot - wrap } else { slot + skip };
            filled += 1;
            if filled == m {
                return ring;
            }
        }
    }
}

/// The smallest value at or after `skip` (wrapping within 1..m) that is coprime with `m`,
/// so that the permutation `offset + j · skip mod m` visits every slot. For a prime `m`
/// and `skip` in 1..m this is `skip` itself.
fn coprime_skip(mut skip: u32, m: u32) -> u32 {
    while gcd(skip, m) != 1 {
        skip = if skip + 1 >= m { 1 } else { skip + 1 };
    }
    skip
}

/// Greatest common divisor (Euclid).
fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Trial division; used only by debug assertions and tests (sizes here are ≤ 2^32).
fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let n = u64::from(n);
    let mut d = 2u64;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

/// The 16-byte canonical form of an address: IPv6 as is, IPv4 as `::ffff:a.b.c.d`.
fn addr_bytes(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The 18-byte canonical identity of a backend: 16-byte address, then the port big-endian.
fn endpoint_bytes(addr: IpAddr, port: u16) -> [u8; ENDPOINT_LEN] {
    let mut out = [0u8; ENDPOINT_LEN];
    out[..16].copy_from_slice(&addr_bytes(addr));
    out[16..].copy_from_slice(&port.to_be_bytes());
    out
}

/// Hash of a flow's 5-tuple for picking a ring slot with [`lookup`]: XXH3-64 with a fixed
/// seed over 37 bytes — protocol number (1), source address (16), source port (2,
/// big-endian), destination address (16), destination port (2, big-endian) — addresses in
/// the 16-byte form of this module (IPv4 as `::ffff:a.b.c.d`).
///
/// Stable: equal tuples give equal hashes on every host and in every release (pinned by
/// a golden test). Ports are passed as numbers (as the `wire` accessors return them) and
/// hashed big-endian.
/// For IPv4 tuples it equals [`flow_hash_v4`].
#[must_use]
pub fn flow_hash(protocol: u8, src: IpAddr, src_port: u16, dst: IpAddr, dst_port: u16) -> u64 {
    let mut buf = [0u8; FLOW_LEN];
    buf[0] = protocol;
    buf[1..17].copy_from_slice(&addr_bytes(src));
    buf[17..19].copy_from_slice(&src_port.to_be_bytes());
    buf[19..35].copy_from_slice(&addr_bytes(dst));
    buf[35..37].copy_from_slice(&dst_port.to_be_bytes());
    xxh3_64_with_seed(&buf, SEED_FLOW)
}

/// [`flow_hash`] for an IPv4 5-tuple, without going through [`IpAddr`]: the same 37-byte
/// layout (with the `::ffff:` prefix written as constants) and therefore the same value.
#[must_use]
pub fn flow_hash_v4(protocol: u8, src: Ipv4Addr, src_port: u16, dst: Ipv4Addr, dst_port: u16) -> u64 {
    let mut buf = [0u8; FLOW_LEN];
    buf[0] = protocol;
    buf[11] = 0xff;
    buf[12] = 0xff;
    buf[13..17].copy_from_slice(&src.octets());
    buf[17..19].copy_from_slice(&src_port.to_be_bytes());
    buf[29] = 0xff;
    buf[30] = 0xff;
    buf[31..35].copy_from_slice(&dst.octets());
    buf[35..37].copy_from_slice(&dst_port.to_be_bytes());
    xxh3_64_with_seed(&buf, SEED_FLOW)
}

/// Hash of a client address alone (XXH3-64, fixed seed, over the 16-byte form: IPv4 as
/// `::ffff:a.b.c.d`), for `sessionAffinity: ClientIP`: every connection of a client, on
/// every worker and every gateway, hashes to the same ring slot. Stable across hosts and
/// releases (pinned by a golden test).
#[must_use]
pub fn client_hash(src: IpAddr) -> u64 {
    xxh3_64_with_seed(&addr_bytes(src), SEED_CLIENT)
}

/// The backend index in `ring` for a flow hash: `ring[hash % ring.len()]`, as in Katran's
/// `hash % RING_SIZE`. `None` when `ring` is empty (a Service without backends).
#[must_use]
pub fn lookup(ring: &[u32], hash: u64) -> Option<u32> {
    if ring.is_empty() {
        return None;
    }
    ring.get((hash % ring.len() as u64) as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;
    use std::net::Ipv6Addr;

    fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> (IpAddr, u16) {
        (IpAddr::V4(Ipv4Addr::new(a, b, c, d)), port)
    }

    /// `n` distinct backends 10.x.y.z:8080 in a fixed order.
    fn backends_10(n: usize) -> Vec<(IpAddr, u16)> {
        (0..n as u32).map(|i| (IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 8080)).collect()
    }

    fn slot_counts(ring: &[u32], n: usize) -> Vec<usize> {
        let mut counts = vec![0usize; n];
        for &b in ring {
            counts[b as usize] += 1;
        }
        counts
    }

    fn check_filled(ring: &[u32], m: u32, n: usize) {
        assert_eq!(ring.len(), m as usize);
        assert!(ring.iter().all(|&b| (b as usize) < n), "slot with an out-of-range index");
    }

    /// Identities of `ring`'s slots.
    fn identities(ring: &[u32], backends: &[(IpAddr, u16)]) -> Vec<(IpAddr, u16)> {
        ring.iter().map(|&b| backends[b as usize]).collect()
    }

    fn moved(a: &[(IpAddr, u16)], b: &[(IpAddr, u16)]) -> usize {
        a.iter().zip(b).filter(|(x, y)| x != y).count()
    }

    fn any_backend() -> impl Strategy<Value = (IpAddr, u16)> {
        prop_oneof![
            (any::<u32>(), any::<u16>()).prop_map(|(a, p)| (IpAddr::V4(Ipv4Addr::from(a)), p)),
            (any::<u128>(), any::<u16>()).prop_map(|(a, p)| (IpAddr::V6(Ipv6Addr::from(a)), p)),
        ]
    }

    /// Distinct identities (distinct in the canonical encoding, not just as Rust values).
    fn distinct_backends(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<(IpAddr, u16)>> {
        prop::collection::vec(any_backend(), len).prop_map(|v| {
            let mut seen = HashSet::new();
            v.into_iter().filter(|&(a, p)| seen.insert(endpoint_bytes(a, p))).collect::<Vec<_>>()
        })
    }

    // ---- Golden values -------------------------------------------------------------
    //
    // These values are pinned on purpose. Several gateway hosts behind ECMP must build
    // identical rings and hash flows identically, including hosts running different
    // releases during a rolling upgrade. If a change to seeds, byte layout, hash function
    // or fill order makes these fail, that change would send established flows to
    // different backends depending on which gateway ECMP picks: do not update the values
    // unless that break is intended and announced.

    #[test]
    fn golden_ring_3_backends_m251() {
        let backends = [v4(10, 0, 0, 1, 80), v4(10, 0, 0, 2, 80), (IpAddr::V6(Ipv6Addr::LOCALHOST), 8443)];
        let ring = build(&backends, 251);
        // h1/h2 give (offset, skip) = (5, 2), (178, 249) and (172, 125) for the three.
        assert_eq!(ring[..16], [2, 2, 2, 2, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0]);
        assert_eq!(ring[160..176], [1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 2, 0, 1, 0]);
        assert_eq!(slot_counts(&ring, 3), [84, 83, 84]);
    }

    #[test]
    fn golden_hashes() {
        let a = Ipv4Addr::new(192, 0, 2, 1);
        let b = Ipv4Addr::new(198, 51, 100, 7);
        assert_eq!(flow_hash_v4(6, a, 40000, b, 443), 0x7cc5_923c_e237_64a5);
        assert_eq!(flow_hash(6, IpAddr::V4(a), 40000, IpAddr::V4(b), 443), 0x7cc5_923c_e237_64a5);
        assert_eq!(client_hash(IpAddr::V4(a)), 0x25db_3cee_7920_2fb3);
        assert_eq!(client_hash(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))), 0xaeb8_553f_436d_b0dc);
    }

    // ---- Examples ------------------------------------------------------------------

    #[test]
    fn empty_inputs() {
        assert!(build(&[], 251).is_empty());
        assert!(fill(&[v4(10, 0, 0, 1, 80)], 0).is_empty());
        assert_eq!(lookup(&[], 12345), None);
    }

    #[test]
    fn single_backend_owns_everything() {
        let ring = build(&[v4(10, 0, 0, 1, 80)], 251);
        assert_eq!(ring, vec![0; 251]);
        assert_eq!(lookup(&ring, u64::MAX), Some(0));
    }

    #[test]
    fn lookup_is_hash_mod_len() {
        let ring = [7, 8, 9];
        assert_eq!(lookup(&ring, 0), Some(7));
        assert_eq!(lookup(&ring, 4), Some(8));
        assert_eq!(lookup(&ring, u64::MAX), Some(ring[(u64::MAX % 3) as usize]));
    }

    #[test]
    fn duplicates_collapse_to_lowest_index() {
        let a = v4(10, 0, 0, 1, 80);
        let b = v4(10, 0, 0, 2, 80);
        let a_mapped = (IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()), 80);
        let ring = build(&[b, a, a_mapped, b, a], 251);
        let unique = build(&[b, a], 251);
        assert_eq!(ring, unique, "duplicates must neither get slots nor change the ring");
        let counts = slot_counts(&ring, 5);
        assert_eq!(counts[2] + counts[3] + counts[4], 0);
        assert!(counts[0].abs_diff(counts[1]) <= 1);
    }

    #[test]
    fn non_prime_or_small_ring_sizes_are_still_filled() {
        let backends = backends_10(7);
        for m in [1, 2, 4, 6, 7, 8, 100, 256, 1000, 4096, 65536] {
            let ring = fill(&backends, m);
            check_filled(&ring, m, backends.len());
            let counts = slot_counts(&ring, backends.len());
            let used: Vec<usize> = counts.iter().copied().filter(|&c| c > 0).collect();
            assert_eq!(used.len(), backends.len().min(m as usize), "m = {m}");
            let (max, min) = (counts.iter().max().unwrap(), counts.iter().min().unwrap());
            if m as usize >= backends.len() {
                assert!(max - min <= 1, "m = {m}: counts {counts:?}");
            } else {
                assert_eq!(*max, 1, "m = {m}: each backend takes at most one slot per round");
            }
        }
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not prime")]
    fn build_asserts_prime_size_in_debug() {
        let _ = build(&backends_10(3), 256);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not greater than the backend count")]
    fn build_asserts_size_above_backend_count_in_debug() {
        let _ = build(&backends_10(300), 251);
    }

    #[test]
    fn flow_hash_families_and_fields() {
        let a = Ipv4Addr::new(192, 0, 2, 1);
        let b = Ipv4Addr::new(198, 51, 100, 7);
        let h = flow_hash(17, IpAddr::V4(a), 53, IpAddr::V4(b), 5353);
        assert_eq!(h, flow_hash_v4(17, a, 53, b, 5353));
        // The mapped IPv6 form is the same identity.
        assert_eq!(h, flow_hash(17, IpAddr::V6(a.to_ipv6_mapped()), 53, IpAddr::V6(b.to_ipv6_mapped()), 5353));
        // Every field matters.
        assert_ne!(h, flow_hash_v4(6, a, 53, b, 5353));
        assert_ne!(h, flow_hash_v4(17, b, 53, a, 5353));
        assert_ne!(h, flow_hash_v4(17, a, 5353, b, 53));
        assert_ne!(client_hash(IpAddr::V4(a)), client_hash(IpAddr::V4(b)));
    }

    // ---- ring_size_for -------------------------------------------------------------

    #[test]
    fn ring_sizes_are_prime() {
        assert!(RING_SIZES.iter().all(|&m| is_prime(m)));
        assert!(RING_SIZES.windows(2).all(|w| w[0] < w[1]));
        assert!(is_prime(DEFAULT_RING_SIZE));
        assert!(!is_prime(1) && !is_prime(65536) && is_prime(2) && is_prime(4_294_967_291));
    }

    #[test]
    fn ring_size_for_is_prime_monotone_and_large_enough() {
        let largest = RING_SIZES[RING_SIZES.len() - 1];
        let mut previous = 0;
        for n in (0..2000).chain((2000..60_000).step_by(97)).chain([usize::MAX / 2, usize::MAX]) {
            let m = ring_size_for(n);
            assert!(is_prime(m), "n = {n}");
            assert!(m >= previous, "n = {n}: not monotone");
            assert!(m >= 251);
            if n <= largest as usize / MIN_SLOTS_PER_BACKEND {
                assert!(m as usize >= MIN_SLOTS_PER_BACKEND * n, "n = {n}: m = {m}");
                // The smallest that fits.
                assert!(RING_SIZES.iter().all(|&s| s >= m || (s as usize) < (MIN_SLOTS_PER_BACKEND * n).max(251)));
            } else {
                assert_eq!(m, largest);
            }
            previous = m;
        }
        assert_eq!(ring_size_for(0), 251);
        assert_eq!(ring_size_for(2), 251);
        assert_eq!(ring_size_for(3), 509);
        assert_eq!(ring_size_for(1000), 131_101);
    }

    // ---- Properties ----------------------------------------------------------------
    //
    // Disruption bound. Pseudocode 1 trades some disruption for balance (§3.4: Maglev
    // favours even load over minimal disruption): when a backend leaves, its own
    // slots must move (≈ M/N of them, the 1/N minimum), and because every later turn of
    // the round robin can then land elsewhere, some slots of surviving backends move too.
    // The paper's Figure 10 (§5.3, N = 1000 backends, M = 65537 vs 655373) shows the
    // changed share above the ideal, and smaller with the larger table. Measured here,
    // the share moved by removing one of N, in units of 1/N, with M = ring_size_for(N)
    // (101–200 slots per backend) unless stated:
    //   N = 5: 1.1; N = 20: 1.5; N = 33–49: median 1.6–1.9, p99.9 2.4–2.8, worst of
    //   20 000 random draws 3.4 (N = 40, M = 4099); N = 1000: 6.5 (M = 131101),
    //   ≈ 7 (M = 65537), 3.0 (M = 1048583).
    // So "2/N + small slack" holds for the median but not the tail (it failed about once
    // in 10 000 draws at N = 32), and the excess grows with N at a fixed M/N. For
    // N < 50 we assert moved ≤ 4/N + 1% of M and survivors' moved ≤ 3/N + 1%, 25–40%
    // above the worst draw seen, so the test catches a fill that reshuffles the ring
    // without flaking.

    fn check_removal(before: &[(IpAddr, u16)], after: &[(IpAddr, u16)], removed: (IpAddr, u16), m: u32) {
        let n = before.len() as f64;
        let ring_before = identities(&build(before, m), before);
        let ring_after = identities(&build(after, m), after);
        let owned = ring_before.iter().filter(|&&b| b == removed).count();
        let total = moved(&ring_before, &ring_after);
        assert!(ring_after.iter().all(|&b| b != removed));
        assert!(owned > 0 && total >= owned, "every slot of the removed backend moves");
        let share = total as f64 / f64::from(m);
        assert!(share <= 4.0 / n + 0.01, "moved {share:.4} of the ring, N = {n}, M = {m}");
        let others = (total - owned) as f64 / (f64::from(m) - owned as f64);
        assert!(others <= 3.0 / n + 0.01, "moved {others:.4} of survivors' slots, N = {n}, M = {m}");
    }

    /// Pseudocode 1 as printed in the paper: an explicit permutation matrix, `next[i]`
    /// indices and `%`. [`fill`] must agree with it slot for slot.
    fn reference_pseudocode_1(backends: &[(IpAddr, u16)], m: u32) -> Vec<u32> {
        let mut keyed: Vec<([u8; ENDPOINT_LEN], u32)> =
            backends.iter().enumerate().map(|(i, &(a, p))| (endpoint_bytes(a, p), i as u32)).collect();
        keyed.sort_unstable();
        keyed.dedup_by(|later, earlier| later.0 == earlier.0);
        if keyed.is_empty() || m == 0 {
            return Vec::new();
        }
        let m = u64::from(m);
        let permutation: Vec<Vec<usize>> = keyed
            .iter()
            .map(|(key, _)| {
                let offset = xxh3_64_with_seed(key, SEED_OFFSET) % m;
                let skip = if m > 1 { xxh3_64_with_seed(key, SEED_SKIP) % (m - 1) + 1 } else { 1 };
                let skip = u64::from(coprime_skip(skip as u32, m as u32));
                (0..m).map(|j| ((offset + j * skip) % m) as usize).collect()
            })
            .collect();
        let mut next = vec![0usize; keyed.len()];
        let mut entry = vec![-1i64; m as usize];
        let mut n = 0;
        loop {
            for i in 0..keyed.len() {
                let mut c = permutation[i][next[i]];
                while entry[c] >= 0 {
                    next[i] += 1;
                    c = permutation[i][next[i]];
                }
                entry[c] = i64::from(keyed[i].1);
                next[i] += 1;
                n += 1;
                if n == m {
                    return entry.into_iter().map(|e| e as u32).collect();
                }
            }
        }
    }

    /// Random-seeded, but never writes a `proptest-regressions` file into the tree: a
    /// failure prints its minimal input instead.
    fn config(cases: u32) -> ProptestConfig {
        ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
    }

    proptest! {
        #![proptest_config(config(64))]

        #[test]
        fn every_slot_filled_and_balanced(backends in distinct_backends(1..80), extra in 0usize..3) {
            prop_assume!(!backends.is_empty());
            // The size ring_size_for picks, or one or two sizes up.
            let base = RING_SIZES.iter().position(|&s| s == ring_size_for(backends.len())).unwrap();
            let m = RING_SIZES[(base + extra).min(RING_SIZES.len() - 1)];
            let ring = build(&backends, m);
            check_filled(&ring, m, backends.len());
            let counts = slot_counts(&ring, backends.len());
            let max = *counts.iter().max().unwrap();
            let min = *counts.iter().min().unwrap();
            prop_assert!(max - min <= 1, "counts {:?}", counts);
        }

        #[test]
        fn fill_matches_literal_pseudocode_1(
            backends in prop::collection::vec(any_backend(), 0..24)
                .prop_flat_map(|v| { let n = v.len(); (Just(v), prop::collection::vec(0..n.max(1), 0..4)) })
                .prop_map(|(mut v, dups)| { if !v.is_empty() { for d in dups { v.push(v[d]); } } v }),
            m in prop_oneof![Just(251u32), Just(509), Just(1021), 1u32..40, 40u32..700],
        ) {
            prop_assert_eq!(fill(&backends, m), reference_pseudocode_1(&backends, m));
        }

        #[test]
        fn input_order_is_irrelevant(
            (backends, shuffled) in distinct_backends(1..60)
                .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
        ) {
            prop_assume!(!backends.is_empty());
            let m = ring_size_for(backends.len());
            let a = identities(&build(&backends, m), &backends);
            let b = identities(&build(&shuffled, m), &shuffled);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn flow_hash_v4_matches_flow_hash(
            proto in any::<u8>(), src in any::<u32>(), sp in any::<u16>(), dst in any::<u32>(), dp in any::<u16>()
        ) {
            let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            prop_assert_eq!(
                flow_hash_v4(proto, src, sp, dst, dp),
                flow_hash(proto, IpAddr::V4(src), sp, IpAddr::V4(dst), dp)
            );
        }
    }

    proptest! {
        #![proptest_config(config(32))]

        #[test]
        fn removing_one_backend_moves_little(backends in distinct_backends(2..50), pick in any::<prop::sample::Index>()) {
            prop_assume!(backends.len() >= 2);
            let k = pick.index(backends.len());
            let mut after = backends.clone();
            let removed = after.remove(k);
            check_removal(&backends, &after, removed, ring_size_for(backends.len()));
        }

        #[test]
        fn adding_one_backend_moves_little(
            backends in distinct_backends(2..50),
            new in any_backend(),
            pick in any::<prop::sample::Index>(),
        ) {
            prop_assume!(backends.iter().all(|&(a, p)| endpoint_bytes(a, p) != endpoint_bytes(new.0, new.1)));
            let mut after = backends.clone();
            after.insert(pick.index(backends.len() + 1), new);
            // Adding is removal read backwards: the same slots differ between the two rings.
            check_removal(&after, &backends, new, ring_size_for(after.len()));
        }
    }

    // ---- Figures (run by hand) --------------------------------------------------------

    /// `cargo test --release -p torii-gateway --lib maglev -- --ignored --nocapture`
    #[test]
    #[ignore = "figures for M = 65537, N = 1000; run by hand in release"]
    fn figures_65537_x_1000() {
        let backends = backends_10(1000);
        let ring = build(&backends, DEFAULT_RING_SIZE);
        let counts = slot_counts(&ring, backends.len());
        let (max, min) = (*counts.iter().max().unwrap(), *counts.iter().min().unwrap());
        assert!(max - min <= 1);
        println!("maglev M = 65537, N = 1000: slots per backend {min}..={max}");
        let before = identities(&ring, &backends);
        for k in [0, 1, 333, 500, 999] {
            let mut after = backends.clone();
            let removed = after.remove(k);
            let changed = moved(&before, &identities(&build(&after, DEFAULT_RING_SIZE), &after));
            let owned = before.iter().filter(|&&b| b == removed).count();
            println!(
                "  remove backend {k}: {changed} slots moved = {:.3}% of the ring ({owned} owned by it; minimum 0.1%)",
                changed as f64 * 100.0 / f64::from(DEFAULT_RING_SIZE)
            );
        }
    }

    // ---- Timing (run by hand) --------------------------------------------------------

    /// `cargo test --release -p torii-gateway --lib maglev -- --ignored --nocapture`
    #[test]
    #[ignore = "timing; run by hand in release"]
    fn build_time_65537_x_1000() {
        let backends = backends_10(1000);
        let mut times_ms: Vec<f64> = (0..15)
            .map(|_| {
                let start = std::time::Instant::now();
                let ring = build(std::hint::black_box(&backends), DEFAULT_RING_SIZE);
                let elapsed = start.elapsed();
                std::hint::black_box(ring);
                elapsed.as_secs_f64() * 1e3
            })
            .collect();
        times_ms.sort_by(f64::total_cmp);
        println!(
            "maglev build M = 65537, N = 1000: median {:.3} ms (min {:.3}, max {:.3})",
            times_ms[times_ms.len() / 2],
            times_ms[0],
            times_ms[times_ms.len() - 1]
        );
    }
}
