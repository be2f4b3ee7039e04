//! A per-worker table that lets the later fragments of an IP datagram follow its first.
//!
//! # Why
//!
//! Only the first fragment of a datagram (fragment offset 0) carries the transport header,
//! so only it can be looked up in conntrack and translated like an unfragmented packet.
//! The later fragments carry no ports; they share with the first only the datagram's
//! identity — source, destination, protocol and Identification ([RFC 791] § 3.2, [RFC 8200]
//! § 4.5 for IPv6's 32-bit Identification). When the pipeline forwards a first fragment it
//! records here what it did to the IP header (the target: new addresses, egress, next-hop
//! MAC — the value type `V`), keyed by that identity; each later fragment finds the target and
//! is rewritten at the IP layer only. Its payload needs no change: the transport checksum lives
//! in the first fragment and covers the whole datagram, and NAT changes only the
//! pseudo-header and the ports in it, which the first fragment's incremental update already
//! accounted for (RFC 1624; TCP/UDP). SCTP's CRC32c covers the whole packet without a
//! pseudo-header and cannot be fixed from the first fragment: the pipeline does not track
//! SCTP through fragments.
//!
//! # Contract
//!
//! - Fixed capacity, allocated by [`FragmentTable::new`]; nothing allocates afterwards.
//!   Every operation examines one bucket of [`WAYS`] slots: bounded work, no scans.
//! - No clock: callers pass `now` (monotonic ns). An entry lives [`FragmentTable::timeout_ns`]
//!   from its first fragment (Linux `ipfrag_time`, 30 s by default: [`DEFAULT_TIMEOUT_NS`]),
//!   not refreshed by later fragments, like the kernel's reassembly queue.
//! - An entry is freed early once the fragments followed through it add up to the datagram:
//!   the last fragment (MF clear) gives the datagram's length, and when the payload bytes seen
//!   reach it the slot is reused at once. Duplicated or overlapping fragments only delay that
//!   to the timeout.
//! - Later fragments that arrive before their first, after the timeout or after the entry was
//!   evicted find nothing: [`FragmentTable::follow`] returns `None` and the caller drops them
//!   under a named reason. Nothing is buffered: buffering out-of-order fragments would need
//!   per-datagram memory on the packet path, and senders' fragments almost always arrive in
//!   order (the sender emits the first one first).
//! - A full bucket evicts its entry closest to expiry (counted by [`Insert::Evicted`]): fresh
//!   datagrams win over stale ones.
//!
//! Keys are hashed with XXH3-64 under a per-table seed, so a remote sender cannot aim a flood
//! of identities at one bucket of a given worker.
//!
//! [RFC 791]: https://www.rfc-editor.org/rfc/rfc791#section-3.2
//! [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5

use std::net::{Ipv4Addr, Ipv6Addr};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Slots per bucket.
pub const WAYS: usize = 4;

/// Linux's `net.ipv4.ipfrag_time` and `net.ipv6.ip6frag_time` default: 30 s.
pub const DEFAULT_TIMEOUT_NS: u64 = 30_000_000_000;

/// An address type fragments are keyed by: [`Ipv4Addr`] or [`Ipv6Addr`].
pub trait FragmentAddr: Copy + Eq {
    /// The address as 16 bytes (IPv4 zero-extended on the left), for hashing.
    fn to_bytes16(self) -> [u8; 16];
    /// A placeholder for free slots.
    const UNSPECIFIED: Self;
}

impl FragmentAddr for Ipv4Addr {
    #[inline]
    fn to_bytes16(self) -> [u8; 16] {
        u128::from(self.to_bits()).to_be_bytes()
    }
    const UNSPECIFIED: Self = Ipv4Addr::UNSPECIFIED;
}

impl FragmentAddr for Ipv6Addr {
    #[inline]
    fn to_bytes16(self) -> [u8; 16] {
        self.octets()
    }
    const UNSPECIFIED: Self = Ipv6Addr::UNSPECIFIED;
}

/// The identity of a datagram among its fragments: what [RFC 791] § 3.2 says reassembly
/// matches on (source, destination, protocol, Identification); for IPv6 the Fragment header's
/// 32-bit Identification and the upper-layer protocol ([RFC 8200] § 4.5).
///
/// [RFC 791]: https://www.rfc-editor.org/rfc/rfc791#section-3.2
/// [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentKey<A> {
    /// Source address as received.
    pub src: A,
    /// Destination address as received.
    pub dst: A,
    /// IP protocol (IPv4 Protocol, IPv6 upper-layer Next Header).
    pub protocol: u8,
    /// Identification (IPv4: 16 bits, zero-extended).
    pub ident: u32,
}

impl<A: FragmentAddr> FragmentKey<A> {
    #[inline]
    fn hash(&self, seed: u64) -> u64 {
        let mut b = [0u8; 37];
        b[..16].copy_from_slice(&self.src.to_bytes16());
        b[16..32].copy_from_slice(&self.dst.to_bytes16());
        b[32] = self.protocol;
        b[33..].copy_from_slice(&self.ident.to_be_bytes());
        xxh3_64_with_seed(&b, seed)
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot<A, V> {
    key: FragmentKey<A>,
    value: V,
    /// The entry is dead when `now >= deadline`; free slots have 0.
    deadline: u64,
    /// Payload bytes of the fragments seen (first included).
    seen: u32,
    /// The datagram's payload length once its last fragment was seen, else 0.
    total: u32,
}

/// What [`FragmentTable::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// Stored in a free (or expired) slot, or over the same datagram's earlier entry.
    Stored,
    /// Stored by evicting a live entry of another datagram (its later fragments will be
    /// dropped): the bucket was full.
    Evicted,
}

/// Fixed-capacity map from [`FragmentKey`] to the translation target `V` of the datagram's
/// first fragment. See the module documentation.
#[derive(Debug)]
pub struct FragmentTable<A, V> {
    slots: Box<[Slot<A, V>]>,
    bucket_mask: usize,
    seed: u64,
    timeout_ns: u64,
}

impl<A: FragmentAddr, V: Copy + Default> FragmentTable<A, V> {
    /// A table of at least `capacity` entries (rounded up to a power of two, at least
    /// [`WAYS`]), entries living `timeout_ns`, hashing under `seed`. Allocates and touches all
    /// its memory.
    pub fn new(capacity: usize, timeout_ns: u64, seed: u64) -> Self {
        let buckets = capacity.div_ceil(WAYS).max(1).next_power_of_two();
        let free = Slot {
            key: FragmentKey { src: A::UNSPECIFIED, dst: A::UNSPECIFIED, protocol: 0, ident: 0 },
            value: V::default(),
            deadline: 0,
            seen: 0,
            total: 0,
        };
        Self { slots: vec![free; buckets * WAYS].into_boxed_slice(), bucket_mask: buckets - 1, seed, timeout_ns }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// How long an entry lives after its first fragment, ns.
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }

    /// Entries alive at `now` (a scan of the table: for tests and diagnostics, not the packet
    /// path).
    pub fn live(&self, now: u64) -> usize {
        self.slots.iter().filter(|s| s.deadline > now).count()
    }

    #[inline]
    fn bucket(&mut self, key: &FragmentKey<A>) -> &mut [Slot<A, V>] {
        let b = (key.hash(self.seed) as usize) & self.bucket_mask;
        &mut self.slots[b * WAYS..(b + 1) * WAYS]
    }

    /// Records the first fragment (offset 0, MF set) of datagram `key`, forwarded with
    /// `target`; `payload_len` is its IP payload length in bytes (the fragment's share of the
    /// datagram). Replaces an earlier entry of the same datagram (a retransmitted first
    /// fragment), else takes a free or expired slot, else evicts the live entry closest to
    /// expiry.
    pub fn insert(&mut self, now: u64, key: FragmentKey<A>, target: V, payload_len: u32) -> Insert {
        let deadline = now.saturating_add(self.timeout_ns).max(1);
        let bucket = self.bucket(&key);
        let mut pick = 0;
        let mut outcome = Insert::Evicted;
        for (i, s) in bucket.iter().enumerate() {
            if s.deadline > now && s.key == key {
                pick = i;
                outcome = Insert::Stored;
                break;
            }
            if s.deadline <= now {
                if outcome == Insert::Evicted {
                    pick = i;
                    outcome = Insert::Stored;
                }
            } else if outcome == Insert::Evicted && s.deadline < bucket[pick].deadline {
                pick = i;
            }
        }
        bucket[pick] = Slot { key, value: target, deadline, seen: payload_len, total: 0 };
        outcome
    }

    /// The target recorded for a later fragment of datagram `key` (offset `offset` bytes,
    /// `payload_len` bytes of payload, `more` = its MF flag), or `None` when its first fragment
    /// was not recorded, has expired or was evicted. Accounts the fragment's bytes and frees
    /// the entry once the whole datagram has passed.
    pub fn follow(&mut self, now: u64, key: &FragmentKey<A>, offset: u32, payload_len: u32, more: bool) -> Option<V> {
        let slot = self.bucket(key).iter_mut().find(|s| s.key == *key && s.deadline != 0)?;
        if slot.deadline <= now {
            slot.deadline = 0;
            return None;
        }
        let value = slot.value;
        slot.seen = slot.seen.saturating_add(payload_len);
        if !more {
            slot.total = offset.saturating_add(payload_len);
        }
        if slot.total != 0 && slot.seen >= slot.total {
            slot.deadline = 0;
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    const S: u64 = 1_000_000_000;

    fn key(n: u32) -> FragmentKey<Ipv4Addr> {
        FragmentKey {
            src: Ipv4Addr::new(198, 51, 100, 10),
            dst: Ipv4Addr::new(203, 0, 113, 10),
            protocol: 17,
            ident: n,
        }
    }

    #[test]
    fn first_then_later_fragments_until_complete() {
        let mut t: FragmentTable<Ipv4Addr, u32> = FragmentTable::new(64, DEFAULT_TIMEOUT_NS, 7);
        assert_eq!(t.insert(0, key(1), 99, 1480), Insert::Stored);
        assert_eq!(t.follow(S, &key(1), 1480, 1480, true), Some(99));
        assert_eq!(t.live(S), 1);
        // The last fragment completes the datagram (3 × 1480 bytes... here 1480 + 1480 + 40).
        assert_eq!(t.follow(S, &key(1), 2960, 40, false), Some(99));
        assert_eq!(t.live(S), 0, "the whole datagram passed: slot freed");
        assert_eq!(t.follow(S, &key(1), 2960, 40, false), None);
    }

    #[test]
    fn last_before_middle_keeps_the_entry() {
        let mut t: FragmentTable<Ipv4Addr, u32> = FragmentTable::new(64, DEFAULT_TIMEOUT_NS, 7);
        t.insert(0, key(2), 5, 1480);
        assert_eq!(t.follow(1, &key(2), 2960, 40, false), Some(5));
        assert_eq!(t.live(1), 1, "1520 of 3000 bytes seen");
        assert_eq!(t.follow(2, &key(2), 1480, 1480, true), Some(5));
        assert_eq!(t.live(2), 0);
    }

    #[test]
    fn later_without_first_and_other_datagrams() {
        let mut t: FragmentTable<Ipv4Addr, u32> = FragmentTable::new(64, DEFAULT_TIMEOUT_NS, 7);
        assert_eq!(t.follow(0, &key(3), 1480, 8, false), None);
        t.insert(0, key(3), 1, 1480);
        let mut other = key(3);
        other.protocol = 6;
        assert_eq!(t.follow(0, &other, 1480, 8, false), None, "protocol is part of the identity");
        other = key(3);
        other.src = Ipv4Addr::new(198, 51, 100, 11);
        assert_eq!(t.follow(0, &other, 1480, 8, false), None, "source is part of the identity");
    }

    #[test]
    fn entries_expire_after_the_timeout() {
        let mut t: FragmentTable<Ipv4Addr, u32> = FragmentTable::new(64, DEFAULT_TIMEOUT_NS, 7);
        t.insert(10, key(4), 1, 1480);
        assert_eq!(t.follow(10 + DEFAULT_TIMEOUT_NS - 1, &key(4), 1480, 8, true), Some(1));
        assert_eq!(t.follow(10 + DEFAULT_TIMEOUT_NS, &key(4), 2960, 8, true), None);
        assert_eq!(t.live(10), 0, "an expired entry found by follow is freed");
    }

    #[test]
    fn a_full_bucket_evicts_the_oldest() {
        // One bucket: every key lands in it.
        let mut t: FragmentTable<Ipv4Addr, u32> = FragmentTable::new(WAYS, DEFAULT_TIMEOUT_NS, 7);
        assert_eq!(t.capacity(), WAYS);
        for i in 0..WAYS as u32 {
            assert_eq!(t.insert(u64::from(i), key(i), i, 8), Insert::Stored);
        }
        assert_eq!(t.insert(100, key(50), 50, 8), Insert::Evicted);
        assert_eq!(t.follow(101, &key(0), 8, 8, true), None, "the oldest went");
        for i in 1..WAYS as u32 {
            assert_eq!(t.follow(101, &key(i), 8, 8, true), Some(i));
        }
        assert_eq!(t.follow(101, &key(50), 8, 8, true), Some(50));
        // An expired slot is reused before any live one is evicted; the same datagram replaces itself.
        let later = 3 + DEFAULT_TIMEOUT_NS;
        assert_eq!(t.insert(later, key(60), 60, 8), Insert::Stored);
        assert_eq!(t.insert(later, key(60), 61, 8), Insert::Stored);
        assert_eq!(t.follow(later, &key(60), 8, 8, true), Some(61));
    }

    #[test]
    fn ipv6_keys() {
        let mut t: FragmentTable<Ipv6Addr, u8> = FragmentTable::new(16, DEFAULT_TIMEOUT_NS, 1);
        let k =
            FragmentKey { src: Ipv6Addr::LOCALHOST, dst: "2001:db8::1".parse().unwrap(), protocol: 17, ident: 1 << 20 };
        t.insert(0, k, 3, 1232);
        assert_eq!(t.follow(0, &k, 1232, 100, false), Some(3));
    }

    proptest! {
        /// Against a model: with room for everything (no eviction), `follow` returns the
        /// target of the datagram's latest first fragment until its timeout.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u32..16, any::<bool>(), 0u64..40), 1..200)) {
            let mut t: FragmentTable<Ipv4Addr, u32> = FragmentTable::new(1024, 30 * S, 9);
            let mut model: HashMap<u32, (u32, u64)> = HashMap::new();
            let mut now = 0;
            for (i, (id, first, dt)) in ops.into_iter().enumerate() {
                now += dt * S;
                if first {
                    t.insert(now, key(id), i as u32, 8);
                    model.insert(id, (i as u32, now + 30 * S));
                } else {
                    // MF set and tiny: never completes, so only the timeout ends an entry.
                    let want = model.get(&id).filter(|(_, d)| now < *d).map(|(v, _)| *v);
                    prop_assert_eq!(t.follow(now, &key(id), 8, 8, true), want);
                }
            }
        }
    }
}
