//! The open-addressing index behind [`Conntrack`](super::Conntrack): one 8-byte slot per
//! indexed tuple, linear probing, backward-shift deletion (no tombstones).
//!
//! The index knows nothing about keys. It stores, per tuple, a *tag* (`flow id << 1 |
//! direction`), a 24-bit fingerprint of the key's hash and the slot's displacement from its
//! home slot; callers confirm a fingerprint match against the flow record with a closure.
//!
//! Slot layout (`u64`, native integer, never shared):
//!
//! | bits    | field                                                        |
//! |---------|--------------------------------------------------------------|
//! | 0..31   | tag = `id << 1 \| direction` (`id < 2^30`)                    |
//! | 31      | always 0, so no occupied slot equals [`EMPTY`]               |
//! | 32..56  | fingerprint: bits 40..64 of the key's hash                   |
//! | 56..64  | displacement from the home slot, saturated at the cap (255)  |
//!
//! The home slot is `(hash as u32) * slots >> 32` (Lemire's fast range reduction), so home
//! and fingerprint come from disjoint hash bits and entries that share a probe run still
//! differ in all 24 fingerprint bits. The displacement lets deletion decide whether a later
//! entry may shift back without re-hashing its key (which would mean a cache miss on its
//! record); only a saturated displacement (a run longer than 255, which a seeded hash at
//! load ≤ 3/4 makes vanishingly rare) is recomputed from the key through a closure.
//!
//! Invariant: at least one slot is [`EMPTY`] at all times (the owner sizes the index with
//! more slots than it will ever hold tuples), so every probe terminates.

/// A vacant slot. No occupied slot has bit 31 set, so none can equal this.
pub(super) const EMPTY: u64 = u64::MAX;

const TAG_MASK: u64 = 0x7fff_ffff;
const FP_SHIFT: u32 = 32;
const FP_FIELD: u64 = 0x00ff_ffff << FP_SHIFT;
const DISP_SHIFT: u32 = 56;
/// Displacements are stored saturated at this value (the field is 8 bits wide).
pub(super) const DISP_CAP: u64 = 0xff;

/// The result of probing for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Probe {
    /// The key is indexed under this tag.
    Found(u32),
    /// The key is absent; this is the empty slot that ended the probe run, where linear
    /// probing would place it.
    Vacant(usize),
}

/// Fixed-size linear-probing table of tagged slots. See the module documentation.
pub(super) struct Index {
    /// `slots.len() >= 1`, fixed at construction; a boxed slice cannot grow.
    slots: crate::memory::HugeSlice<u64>,
    /// Saturation value of the displacement field: [`DISP_CAP`] except in tests, which lower
    /// it to exercise the re-hashing path of deletion.
    disp_cap: u64,
}

impl Index {
    /// An index of `slots` (at least 1) empty slots, every page written now so that the packet
    /// path never takes a first-touch page fault. O(slots).
    pub(super) fn new(slots: usize) -> Self {
        Self::with_displacement_cap(slots, DISP_CAP)
    }

    /// As [`Index::new`] with displacements saturated at `disp_cap` (1..=255).
    pub(super) fn with_displacement_cap(slots: usize, disp_cap: u64) -> Self {
        assert!((1..=DISP_CAP).contains(&disp_cap));
        assert!(slots >= 1 && slots as u64 <= 1 << 32, "index size {slots} out of range");
        Self { slots: crate::memory::filled(slots, EMPTY), disp_cap }
    }

    /// Number of slots.
    pub(super) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Base address of the slot array (tests use it to show that nothing reallocates).
    #[cfg(test)]
    pub(super) fn as_ptr(&self) -> *const u64 {
        self.slots.as_ptr()
    }

    /// The raw slots, for tests that inspect probe runs.
    #[cfg(test)]
    pub(super) fn raw(&self) -> &[u64] {
        &self.slots
    }

    /// Home slot of a hash. O(1).
    #[inline]
    pub(super) fn home(&self, hash: u64) -> usize {
        home(self.slots.len(), hash)
    }

    #[inline]
    fn next(&self, pos: usize) -> usize {
        let pos = pos + 1;
        if pos == self.slots.len() {
            0
        } else {
            pos
        }
    }

    /// `(to - from) mod slots`: how far `to` lies after `from` going forwards.
    #[inline]
    fn distance(&self, from: usize, to: usize) -> u64 {
        if to >= from {
            (to - from) as u64
        } else {
            (to + self.slots.len() - from) as u64
        }
    }

    /// Probes for a key with hash `hash`: `is_key(tag)` is called for every slot in the probe
    /// run whose fingerprint matches, and must say whether that tag's tuple is the key.
    /// O(probe run length); expected O(1) at load ≤ 3/4.
    #[inline]
    pub(super) fn find(&self, hash: u64, mut is_key: impl FnMut(u32) -> bool) -> Probe {
        let fingerprint = fingerprint_field(hash);
        let mut pos = self.home(hash);
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY {
                return Probe::Vacant(pos);
            }
            if slot & FP_FIELD == fingerprint && is_key(slot as u32 & TAG_MASK as u32) {
                return Probe::Found(slot as u32 & TAG_MASK as u32);
            }
            pos = self.next(pos);
        }
    }

    /// The tags of the occupied slots among the `count` slots from the home slot of `hash`
    /// onwards (wrapping), in probe order. O(count).
    pub(super) fn tags_near(&self, hash: u64, count: usize) -> impl Iterator<Item = u32> + '_ {
        let start = self.home(hash);
        let n = self.slots.len();
        (0..count.min(n)).filter_map(move |i| {
            let slot = self.slots[(start + i) % n];
            (slot != EMPTY).then_some(slot as u32 & TAG_MASK as u32)
        })
    }

    /// Asks the CPU to start loading the home slot of `hash` into cache, and the next cache
    /// line too when the home slot is one of the last two of its line (where a probe run
    /// often continues into the next: at the load factor of a full table, 3/4, a lookup's
    /// run is 2.5 slots long on average, a miss's 8.5). No effect on results; a no-op on
    /// targets without a prefetch instruction. O(1).
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        let home = self.home(hash);
        let slot = &self.slots[home];
        prefetch(slot);
        if (slot as *const u64 as usize) % 64 >= 48 {
            if let Some(next) = self.slots.get(home + 2) {
                prefetch(next);
            }
        }
    }

    /// [`Index::prefetch`] for a key that is probably absent (a new flow's tuple): its probe
    /// run ends only at an empty slot, so the line after the home slot's is prefetched too.
    #[inline]
    pub(super) fn prefetch_run(&self, hash: u64) {
        let home = self.home(hash);
        let slot = &self.slots[home];
        prefetch(slot);
        if let Some(next) = self.slots.get((home | 7) + 1) {
            prefetch(next);
        }
    }

    /// The first tag in the probe run of `hash` whose fingerprint matches the hash's (the
    /// almost certain hit of a lookup), without reading any record; when no slot of the run
    /// matches, which proves the key absent, `Probe::Vacant` with the empty slot that ends
    /// the run. For prefetching ahead of a burst. O(probe run length), the run's slots only.
    #[inline]
    pub(super) fn candidate(&self, hash: u64) -> Probe {
        let fingerprint = fingerprint_field(hash);
        let mut pos = self.home(hash);
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY {
                return Probe::Vacant(pos);
            }
            if slot & FP_FIELD == fingerprint {
                return Probe::Found(slot as u32 & TAG_MASK as u32);
            }
            pos = self.next(pos);
        }
    }

    /// Whether slot `pos` is empty (`false` past the end).
    #[inline]
    pub(super) fn is_empty_at(&self, pos: usize) -> bool {
        self.slots.get(pos) == Some(&EMPTY)
    }

    /// Indexes `tag` for a key with hash `hash`, in the first empty slot at or after `start`.
    /// `start` must lie in the key's probe run (a [`Probe::Vacant`] position for that hash, or
    /// its home): the caller has established that the key is not indexed. O(run length).
    pub(super) fn place(&mut self, start: usize, hash: u64, tag: u32) {
        debug_assert!(u64::from(tag) <= TAG_MASK);
        let mut pos = start;
        while self.slots[pos] != EMPTY {
            pos = self.next(pos);
        }
        let displacement = self.distance(self.home(hash), pos).min(self.disp_cap);
        self.slots[pos] = u64::from(tag) | fingerprint_field(hash) | (displacement << DISP_SHIFT);
    }

    /// [`Index::place`] at `pos`, which must be empty: the slot a probe for the key found
    /// ending its run, with nothing indexed since (the original tuple of
    /// [`super::Conntrack::insert_hashed`], placed first): `place`'s walk would stop there
    /// at once, so there is none. O(1).
    #[inline]
    pub(super) fn place_vacant(&mut self, pos: usize, hash: u64, tag: u32) {
        debug_assert!(u64::from(tag) <= TAG_MASK);
        debug_assert_eq!(self.slots.get(pos), Some(&EMPTY), "a slot in use");
        let displacement = self.distance(self.home(hash), pos).min(self.disp_cap);
        self.slots[pos] = u64::from(tag) | fingerprint_field(hash) | (displacement << DISP_SHIFT);
    }

    /// Removes `tag`, indexed for a key with hash `hash`, and closes the gap by shifting later
    /// entries of the run back (Knuth, TAOCP vol. 3, § 6.4, Algorithm R). `home_of(tag)` must
    /// return the home slot of another tag's key; it is called only for entries whose stored
    /// displacement is saturated. O(run length).
    pub(super) fn erase(&mut self, hash: u64, tag: u32, mut home_of: impl FnMut(u32) -> usize) {
        let mut hole = self.home(hash);
        loop {
            let slot = self.slots[hole];
            if slot == EMPTY {
                debug_assert!(false, "conntrack index: tag {tag:#x} is not indexed");
                return;
            }
            if slot & TAG_MASK == u64::from(tag) {
                break;
            }
            hole = self.next(hole);
        }
        let mut pos = self.next(hole);
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY {
                break;
            }
            let mut displacement = slot >> DISP_SHIFT;
            if displacement >= self.disp_cap {
                displacement = self.distance(home_of(slot as u32 & TAG_MASK as u32), pos);
            }
            let gap = self.distance(hole, pos);
            if displacement >= gap {
                let moved = (displacement - gap).min(self.disp_cap);
                self.slots[hole] = (slot & !(0xff << DISP_SHIFT)) | (moved << DISP_SHIFT);
                hole = pos;
            }
            pos = self.next(pos);
        }
        self.slots[hole] = EMPTY;
    }
}

/// Home slot of a hash in an index of `slots` slots (at most 2^32): the low 32 hash bits
/// scaled to `0..slots` (Lemire, "A fast alternative to the modulo reduction", 2016).
#[inline]
pub(super) fn home(slots: usize, hash: u64) -> usize {
    ((u64::from(hash as u32) * slots as u64) >> 32) as usize
}

/// The fingerprint of a hash, positioned in its slot field.
#[inline]
fn fingerprint_field(hash: u64) -> u64 {
    (hash >> 40) << FP_SHIFT
}

/// Splits an occupied slot into (tag, fingerprint, stored displacement); for tests.
#[cfg(test)]
pub(super) fn decode(slot: u64) -> (u32, u32, u64) {
    ((slot & TAG_MASK) as u32, ((slot & FP_FIELD) >> FP_SHIFT) as u32, slot >> DISP_SHIFT)
}

pub(super) use crate::prefetch::prefetch;
