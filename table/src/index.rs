//! The hashed front-door index that [`super::Table::new`] builds in process memory, so that a
//! new flow finds its front door in O(1) — one cache line of index, then the one front-door
//! record that confirms the match — instead of a binary search whose last probes each miss
//! the cache (14 dependent probes over 10 000 front doors).
//!
//! The index is not part of the snapshot (the table ABI is unchanged): it is built when a
//! table is adopted, off the packet path, and is immutable afterwards. It maps a key
//! (16-byte address, IANA protocol, port) to the position of its front door in the sorted
//! front-door section, and knows nothing about the records: callers confirm a candidate
//! position against the record with a closure.
//!
//! Layout: buckets of [`BUCKET_SLOTS`] 8-byte slots, one 64-byte cache line each; a slot is
//! `fingerprint << 32 | (position + 1)`, 0 when vacant. The key's hash (xxh3, seeded per
//! table so that nobody can aim keys at one bucket) picks the home bucket with its low 32
//! bits (Lemire's fast range reduction) and gives the 32-bit fingerprint with its high 32
//! bits, so a wrong candidate is confirmed against its record about once in 2^32 probes.
//! A key goes into the first vacant slot of its home bucket, else of the next bucket
//! (wrapping): a bucket is searched up to its first vacant slot, and only a full bucket sends
//! the search on. With at most 4 keys per bucket on average (load ≤ 1/2), a bucket overflows
//! with probability about 2 % (Poisson, mean 4, more than 8), so nearly every lookup reads one
//! index line. At least one slot is vacant ([`FrontendIndex::new`] sizes it so), so every
//! search ends.

use std::hash::BuildHasher;
use std::net::IpAddr;

use super::layout;
use crate::prefetch::prefetch;

/// Slots per bucket: 8 × 8 bytes, one cache line.
const BUCKET_SLOTS: usize = 8;

/// Average keys per bucket at most (load factor 1/2).
const KEYS_PER_BUCKET: usize = BUCKET_SLOTS / 2;

/// A vacant slot (an occupied slot stores `position + 1` in its low half, never 0).
const VACANT: u64 = 0;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket([u64; BUCKET_SLOTS]);

const _: () = assert!(size_of::<Bucket>() == 64);

/// A front-door key hashed for one table's index ([`super::Table::frontend_hash`]): the hash
/// and the seed it was computed with, so that a hash computed by another table (another
/// seed) is never used to search this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrontendHash {
    hash: u64,
    seed: u64,
}

/// The index: see the module documentation. `buckets.len() >= 1`.
pub(super) struct FrontendIndex {
    buckets: Box<[Bucket]>,
    seed: u64,
}

impl FrontendIndex {
    /// An index of `keys` — `(address, protocol, port)` of each front door in section order,
    /// distinct (the section is strictly sorted) and fewer than 2^32 — under a fresh random
    /// seed. Allocates `max(1, ⌈n / 4⌉)` cache lines and writes them all (no first-touch page
    /// fault later); O(n).
    pub(super) fn new(keys: impl ExactSizeIterator<Item = ([u8; 16], u8, u16)>) -> Self {
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x746f_7269_6978_u64);
        Self::with_seed(keys, seed)
    }

    /// An index of no keys (one vacant bucket, seed 0): a placeholder until the table's
    /// records are checked.
    pub(super) fn empty() -> Self {
        Self { buckets: vec![Bucket([VACANT; BUCKET_SLOTS])].into(), seed: 0 }
    }

    /// As [`FrontendIndex::new`] with a given seed.
    pub(super) fn with_seed(keys: impl ExactSizeIterator<Item = ([u8; 16], u8, u16)>, seed: u64) -> Self {
        let n = keys.len();
        let mut index =
            Self { buckets: vec![Bucket([VACANT; BUCKET_SLOTS]); n.div_ceil(KEYS_PER_BUCKET).max(1)].into(), seed };
        for (position, (addr, protocol, port)) in keys.enumerate() {
            debug_assert!(position < u32::MAX as usize);
            let hash = index.hash(addr, protocol, port).hash;
            index.place(hash, position as u64 + 1);
        }
        index
    }

    /// Stores `stored` (`position + 1`) for a key with hash `hash`: the first vacant slot of
    /// its home bucket or of the buckets after it.
    fn place(&mut self, hash: u64, stored: u64) {
        let slot = (hash & !0xffff_ffff) | stored;
        let mut b = self.home(hash);
        loop {
            if let Some(s) = self.buckets[b].0.iter_mut().find(|s| **s == VACANT) {
                *s = slot;
                return;
            }
            b = self.next(b);
        }
    }

    /// The hash of a key under this index's seed: xxh3 of `address ‖ port (big-endian) ‖
    /// protocol`, 19 bytes. O(1), a few ns.
    #[inline]
    pub(super) fn hash(&self, addr: [u8; 16], protocol: u8, port: u16) -> FrontendHash {
        let mut key = [0u8; 19];
        key[..16].copy_from_slice(&addr);
        key[16..18].copy_from_slice(&port.to_be_bytes());
        key[18] = protocol;
        FrontendHash { hash: xxhash_rust::xxh3::xxh3_64_with_seed(&key, self.seed), seed: self.seed }
    }

    /// As [`FrontendIndex::hash`], from an [`IpAddr`] (IPv4 in its IPv4-mapped form, as the
    /// records store it).
    #[inline]
    pub(super) fn hash_ip(&self, addr: IpAddr, protocol: u8, port: u16) -> FrontendHash {
        self.hash(layout::addr16(addr), protocol, port)
    }

    /// Whether `h` was computed under this index's seed (so it can search this index).
    #[inline]
    pub(super) fn owns(&self, h: FrontendHash) -> bool {
        h.seed == self.seed
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((u64::from(hash as u32) * self.buckets.len() as u64) >> 32) as usize
    }

    #[inline]
    fn next(&self, b: usize) -> usize {
        if b + 1 == self.buckets.len() {
            0
        } else {
            b + 1
        }
    }

    /// The position of the key hashed to `h` (computed by [`FrontendIndex::hash`] of this
    /// index): `is_key(position)` is asked for every stored position whose fingerprint
    /// matches and must say whether the front door there has the key. `None` when no
    /// position is confirmed. Expected O(1): one bucket (rarely two), about 2^-32 false
    /// fingerprint matches per slot.
    #[inline]
    pub(super) fn find(&self, h: FrontendHash, mut is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        debug_assert!(self.owns(h));
        let fingerprint = h.hash >> 32;
        let mut b = self.home(h.hash);
        loop {
            for &slot in &self.buckets[b].0 {
                if slot == VACANT {
                    return None;
                }
                let position = (slot as u32 - 1) as usize;
                if slot >> 32 == fingerprint && is_key(position) {
                    return Some(position);
                }
            }
            b = self.next(b);
        }
    }

    /// The first position in the home bucket of `h` whose fingerprint matches (the likely
    /// answer of [`FrontendIndex::find`], for prefetching its record); reads one index line.
    #[inline]
    pub(super) fn candidate(&self, h: FrontendHash) -> Option<usize> {
        let fingerprint = h.hash >> 32;
        self.buckets[self.home(h.hash)]
            .0
            .iter()
            .take_while(|&&s| s != VACANT)
            .find(|&&s| s >> 32 == fingerprint)
            .map(|&s| (s as u32 - 1) as usize)
    }

    /// Starts loading the home bucket of `h` into the cache. O(1), no effect on results.
    #[inline]
    pub(super) fn prefetch(&self, h: FrontendHash) {
        prefetch(&self.buckets[self.home(h.hash)]);
    }

    /// Bytes of index in process memory.
    pub(super) fn size_bytes(&self) -> usize {
        size_of_val(&*self.buckets)
    }

    /// Buckets searched to find (or miss) `h`: 1 when its home bucket has a vacant slot or
    /// holds it; for tests of the overflow path.
    #[cfg(test)]
    fn buckets_searched(&self, h: FrontendHash, mut is_key: impl FnMut(usize) -> bool) -> usize {
        let fingerprint = h.hash >> 32;
        let mut b = self.home(h.hash);
        let mut searched = 1;
        loop {
            for &slot in &self.buckets[b].0 {
                if slot == VACANT || (slot >> 32 == fingerprint && is_key((slot as u32 - 1) as usize)) {
                    return searched;
                }
            }
            b = self.next(b);
            searched += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> ([u8; 16], u8, u16) {
        let addr = layout::addr16(IpAddr::from((0xcb00_7100u32 + i / 4).to_be_bytes()));
        (addr, [6, 17, 132][i as usize % 3], 80 + (i % 4) as u16)
    }

    fn find(index: &FrontendIndex, keys: &[([u8; 16], u8, u16)], k: ([u8; 16], u8, u16)) -> Option<usize> {
        index.find(index.hash(k.0, k.1, k.2), |p| keys[p] == k)
    }

    #[test]
    fn finds_every_key_and_no_other() {
        for n in [0usize, 1, 2, 7, 8, 9, 100, 10_000] {
            let keys: Vec<_> = (0..n as u32).map(key).collect();
            let index = FrontendIndex::new(keys.iter().copied());
            assert_eq!(index.buckets.len(), n.div_ceil(4).max(1), "n = {n}");
            for (p, &k) in keys.iter().enumerate() {
                assert_eq!(find(&index, &keys, k), Some(p), "n = {n}, key {p}");
                let h = index.hash(k.0, k.1, k.2);
                if let Some(c) = index.candidate(h) {
                    assert!(c == p || keys[c] != k, "a candidate of another key is not this one");
                }
            }
            for i in n as u32..n as u32 + 100 {
                assert_eq!(find(&index, &keys, key(i)), None, "n = {n}, absent {i}");
            }
        }
    }

    #[test]
    fn overflowing_buckets_are_searched_on() {
        // The worst case, built by choosing the seed: all 9 keys of a 3-bucket index have
        // bucket 0 as their home, so 8 of them fill it and the last overflows into bucket 1.
        let keys: Vec<_> = (0..9).map(key).collect();
        let seed = (0u64..)
            .find(|&seed| {
                let probe = FrontendIndex { buckets: vec![Bucket([VACANT; 8]); 3].into(), seed };
                keys.iter().all(|k| probe.home(probe.hash(k.0, k.1, k.2).hash) == 0)
            })
            .unwrap();
        let index = FrontendIndex::with_seed(keys.iter().copied(), seed);
        assert_eq!(index.buckets.len(), 3);
        assert!(index.buckets[0].0.iter().all(|&s| s != VACANT));
        assert_eq!(index.buckets[1].0.iter().filter(|&&s| s != VACANT).count(), 1);
        let mut searched = [0; 3];
        for (p, &k) in keys.iter().enumerate() {
            assert_eq!(find(&index, &keys, k), Some(p));
            searched[index.buckets_searched(index.hash(k.0, k.1, k.2), |q| keys[q] == k)] += 1;
        }
        assert_eq!(searched, [0, 8, 1], "8 keys in their home bucket, 1 a bucket on");
        for i in 9..200 {
            assert_eq!(find(&index, &keys, key(i)), None);
        }
    }

    #[test]
    fn a_hash_from_another_seed_is_not_owned() {
        let keys: Vec<_> = (0..10).map(key).collect();
        let (a, b) =
            (FrontendIndex::with_seed(keys.iter().copied(), 1), FrontendIndex::with_seed(keys.iter().copied(), 2));
        let k = keys[3];
        assert!(a.owns(a.hash(k.0, k.1, k.2)) && !a.owns(b.hash(k.0, k.1, k.2)));
        assert_ne!(a.hash(k.0, k.1, k.2), b.hash(k.0, k.1, k.2));
        assert_eq!(a.size_bytes(), 3 * 64);
    }
}
