//! The neighbour table: IP address (IPv4 or IPv6) → MAC address, shared by all workers
//! without locks.
//!
//! ARP replies and Neighbor Advertisements arrive on whichever worker the NIC chose, while the
//! flow that needs the answer may live on another, so this one structure is shared, and one
//! table serves both families: a key is the address in 16-byte form (IPv4 as IPv4-mapped
//! IPv6, [RFC 4291] § 2.5.5.2, as the table ABI stores it), so ARP and NDP share every line
//! of it.
//!
//! It is a fixed-size open-addressing table of atomics, 32-byte slots aligned to 32 bytes
//! (two per cache line, never straddling one). A slot's *value word* holds its state in the
//! top byte and, once ready, the MAC and a "resolved" bit: a slot is claimed once, with a
//! compare-and-swap of that word from *empty* to *writing*; the claimer then stores the
//! 128-bit key (two words) and publishes the slot by storing the ready value word with
//! release ordering. Slots are never removed. The value word and the refresh time are single
//! atomic words, so a reader never sees a torn MAC. A lookup is one acquire load of the value
//! word and two relaxed loads of the key, all in one cache line, which
//! [`Neighbours::prefetch`] starts loading ahead of a burst; writes happen only on ARP and NDP
//! traffic. A reader treats a slot still being written as not matching; a writer waits for
//! it for a bounded number of spins and then probes on, so two workers learning the same new
//! address in the same instant may, very rarely, claim two slots for it — harmless, as
//! lookups and updates both stop at the first one in probe order.
//!
//! [RFC 4291]: https://www.rfc-editor.org/rfc/rfc4291#section-2.5.5.2

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::wire::MacAddr;

const RESOLVED: u64 = 1 << 48;

/// Slot states, in the top byte of the value word.
const STATE_SHIFT: u32 = 56;
const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;
/// The top 16 bits of a ready and resolved slot's value word.
const READY_RESOLVED: u64 = (READY as u64) << (STATE_SHIFT - 48) | RESOLVED >> 48;
/// The value word of a slot being written.
const WRITING_WORD: u64 = (WRITING as u64) << STATE_SHIFT;

/// How often a writer re-reads a slot another writer is filling before probing on.
const WRITING_SPINS: usize = 64;

#[repr(C, align(32))]
struct Slot {
    /// The address in 16-byte form, high and low halves; valid once the state is [`READY`].
    key: [AtomicU64; 2],
    /// State ([`EMPTY`], [`WRITING`], [`READY`]) `<< STATE_SHIFT`, and once ready
    /// `RESOLVED | mac` (MAC in the low 48 bits).
    value: AtomicU64,
    /// Monotonic ns of the last confirmation (ARP reply or request, NDP advertisement or
    /// solicitation from it).
    updated_ns: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 32, "two neighbour slots per cache line");

/// The state of a slot's value word.
#[inline]
fn state_of(word: u64) -> u8 {
    (word >> STATE_SHIFT) as u8
}

impl Slot {
    #[inline]
    fn holds(&self, key: u128) -> bool {
        self.key[0].load(Ordering::Relaxed) == (key >> 64) as u64 && self.key[1].load(Ordering::Relaxed) == key as u64
    }

    /// The entry of this slot, whose value word `v` (loaded with acquire ordering) is ready
    /// and resolved.
    #[inline(always)]
    fn entry(&self, v: u64) -> Neighbour {
        let b = v.to_be_bytes();
        Neighbour {
            mac: MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]]),
            updated_ns: self.updated_ns.load(Ordering::Relaxed),
        }
    }
}

/// A neighbour entry as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// Its MAC address.
    pub mac: MacAddr,
    /// When it was last confirmed (monotonic ns; `u64::MAX` for static entries).
    pub updated_ns: u64,
}

/// Fixed-capacity, lock-free neighbour table for IPv4 and IPv6 neighbours.
pub struct Neighbours {
    slots: crate::memory::HugeSlice<Slot>,
    mask: usize,
}

impl std::fmt::Debug for Neighbours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Neighbours").field("capacity", &self.slots.len()).finish()
    }
}

/// An address the table is keyed by ([`Ipv4Addr`], [`Ipv6Addr`] or [`IpAddr`]): its key is
/// the 16-byte form as one integer (IPv4 as IPv4-mapped IPv6, as `table::layout::addr16` writes
/// it), computed from the address's bits without a detour through bytes.
pub trait NeighbourAddr: Copy {
    /// The table key.
    fn key(self) -> u128;
}

impl NeighbourAddr for Ipv4Addr {
    #[inline(always)]
    fn key(self) -> u128 {
        self.to_ipv6_mapped().to_bits()
    }
}

impl NeighbourAddr for Ipv6Addr {
    #[inline(always)]
    fn key(self) -> u128 {
        self.to_bits()
    }
}

impl NeighbourAddr for IpAddr {
    #[inline(always)]
    fn key(self) -> u128 {
        match self {
            IpAddr::V4(a) => a.key(),
            IpAddr::V6(a) => a.key(),
        }
    }
}

impl Neighbours {
    /// A table for up to `capacity` neighbours of either family (rounded up to a power of
    /// two, doubled for short probe chains).
    pub fn new(capacity: usize) -> Self {
        let n = (capacity.max(8) * 2).next_power_of_two();
        // In transparent huge pages where offered: a lookup of a random neighbour should not
        // miss the TLB too (`crate::memory`).
        let slots = crate::memory::filled_with(n, || Slot {
            key: [AtomicU64::new(0), AtomicU64::new(0)],
            value: AtomicU64::new(0),
            updated_ns: AtomicU64::new(0),
        });
        Self { slots, mask: n - 1 }
    }

    /// The slot where the probe run of `key` starts: the key's two 64-bit halves, each
    /// xored with a constant, multiplied into 128 bits, the product's halves xored and
    /// masked (wyhash's `mum` of its 16-byte input, with its constants). Every bit of the
    /// address reaches the low bits, so an address plan's structure (pods numbered within
    /// one subnet per link, IPv6 subnet IDs and interface identifiers) spreads as random
    /// keys would: on the 50 000 pods of the dataplane benchmark (20 `/16` links) a lookup
    /// probes 1.28 slots on average, as a random function would at that load (1.31), where
    /// Fibonacci hashing of the halves xored probed 2.17 (2.29 on 50 000 pods in one `/16`),
    /// and 16.4 on IPv6 addresses whose subnet ID and interface identifier share low bits
    /// (`tests::address_plans_spread`).
    #[inline]
    fn home(&self, key: u128) -> usize {
        crate::conntrack::mum((key >> 64) as u64 ^ 0xa076_1d64_78bd_642f, key as u64 ^ 0xe703_7ed1_a0b4_28db) as usize
            & self.mask
    }

    /// Starts loading the slot where a lookup of `ip` begins (the slot holding it, unless
    /// its probe run is longer than one); changes no result. O(1).
    #[inline]
    pub fn prefetch(&self, ip: impl NeighbourAddr) {
        crate::prefetch::prefetch(&self.slots[self.home(ip.key())]);
    }

    /// The resolved entry for `ip` (an [`Ipv4Addr`], an
    /// [`Ipv6Addr`] or an [`IpAddr`]), if any. Always inlined: its few callers take it once
    /// each.
    #[inline(always)]
    pub fn lookup(&self, ip: impl NeighbourAddr) -> Option<Neighbour> {
        let key = ip.key();
        let mut i = self.home(key);
        for _ in 0..self.slots.len() {
            let s = &self.slots[i];
            let v = s.value.load(Ordering::Acquire);
            match state_of(v) {
                EMPTY => return None,
                READY if s.holds(key) => {
                    if v & RESOLVED == 0 {
                        return None;
                    }
                    return Some(s.entry(v));
                }
                _ => i = (i + 1) & self.mask,
            }
        }
        None
    }

    /// [`Neighbours::lookup`] for a lookup that is most often settled by the first slot of
    /// its probe run (every packet the lean established path forwards to an on-link next
    /// hop reads it): that slot read inline — ready, resolved and holding `ip`, its entry
    /// (the first slot in probe order that holds `ip` is the one `lookup` returns) —
    /// anything else by `lookup`, inlined too (called out of line, its call cost the lean
    /// path's loop its registers: +37 instructions per established packet). The same result
    /// as `lookup`.
    #[inline(always)]
    pub fn lookup_first(&self, ip: impl NeighbourAddr) -> Option<Neighbour> {
        let key = ip.key();
        let s = &self.slots[self.home(key)];
        let v = s.value.load(Ordering::Acquire);
        // State READY and the RESOLVED bit in one compare (bits 49–55 of a ready word are 0).
        if v >> 48 == READY_RESOLVED && s.holds(key) {
            return Some(s.entry(v));
        }
        self.lookup(ip)
    }

    /// Records that `ip` is at `mac`, confirmed at `now_ns` (`u64::MAX`: static, never
    /// refreshed). Returns false when the table is full.
    pub fn learn(&self, ip: impl NeighbourAddr, mac: MacAddr, now_ns: u64) -> bool {
        let key = ip.key();
        let m = mac.0;
        let value = (u64::from(READY) << STATE_SHIFT)
            | RESOLVED
            | u64::from_be_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]]);
        let mut i = self.home(key);
        for _ in 0..self.slots.len() {
            let s = &self.slots[i];
            let mut word = s.value.load(Ordering::Acquire);
            if state_of(word) == EMPTY {
                match s.value.compare_exchange(word, WRITING_WORD, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        s.key[0].store((key >> 64) as u64, Ordering::Relaxed);
                        s.key[1].store(key as u64, Ordering::Relaxed);
                        s.updated_ns.store(now_ns, Ordering::Relaxed);
                        s.value.store(value, Ordering::Release);
                        return true;
                    }
                    Err(now) => word = now,
                }
            }
            for _ in 0..WRITING_SPINS {
                if state_of(word) != WRITING {
                    break;
                }
                std::hint::spin_loop();
                word = s.value.load(Ordering::Acquire);
            }
            if state_of(word) == READY && s.holds(key) {
                // A static entry is never overwritten by what the network says.
                if s.updated_ns.load(Ordering::Relaxed) == u64::MAX && now_ns != u64::MAX {
                    return true;
                }
                s.updated_ns.store(now_ns, Ordering::Relaxed);
                s.value.store(value, Ordering::Release);
                return true;
            }
            i = (i + 1) & self.mask;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::layout;

    #[test]
    fn keys_are_the_table_abi_form() {
        for ip in ["10.70.0.11", "0.0.0.0", "255.255.255.255", "fd00:70::11", "::ffff:10.0.0.1", "::"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip.key(), u128::from_be_bytes(layout::addr16(ip)), "{ip}");
        }
    }

    #[test]
    fn learn_and_lookup() {
        let n = Neighbours::new(4);
        let ip = Ipv4Addr::new(10, 70, 0, 11);
        assert_eq!(n.lookup(ip), None);
        assert!(n.learn(ip, MacAddr([2, 0, 0, 0, 0, 0x11]), 5));
        assert_eq!(n.lookup(ip).unwrap().mac, MacAddr([2, 0, 0, 0, 0, 0x11]));
        assert!(n.learn(ip, MacAddr([2, 0, 0, 0, 0, 0x12]), 6));
        assert_eq!(n.lookup(ip).unwrap(), Neighbour { mac: MacAddr([2, 0, 0, 0, 0, 0x12]), updated_ns: 6 });
    }

    #[test]
    fn fills_up_without_panicking() {
        let n = Neighbours::new(1);
        let cap = n.slots.len();
        for i in 0..cap as u32 {
            assert!(n.learn(Ipv4Addr::from(i + 1), MacAddr([2, 0, 0, 0, 0, 1]), 1));
        }
        assert!(!n.learn(Ipv4Addr::from(cap as u32 + 7), MacAddr([2, 0, 0, 0, 0, 1]), 1));
        for i in 0..cap as u32 {
            assert!(n.lookup(Ipv4Addr::from(i + 1)).is_some());
        }
        assert!(n.lookup(Ipv4Addr::new(9, 9, 9, 9)).is_none());
    }

    #[test]
    fn both_families_in_one_table() {
        let n = Neighbours::new(4);
        let v4 = Ipv4Addr::new(10, 70, 0, 11);
        let v6: Ipv6Addr = "fd00:70::11".parse().unwrap();
        let link_local: Ipv6Addr = "fe80::11".parse().unwrap();
        assert!(n.learn(v6, MacAddr([2, 0, 0, 0, 6, 0x11]), 7));
        assert!(n.learn(v4, MacAddr([2, 0, 0, 0, 4, 0x11]), 8));
        assert_eq!(n.lookup(v6).unwrap(), Neighbour { mac: MacAddr([2, 0, 0, 0, 6, 0x11]), updated_ns: 7 });
        assert_eq!(n.lookup(IpAddr::V6(v6)).unwrap().mac, MacAddr([2, 0, 0, 0, 6, 0x11]));
        assert_eq!(n.lookup(v4).unwrap(), Neighbour { mac: MacAddr([2, 0, 0, 0, 4, 0x11]), updated_ns: 8 });
        assert_eq!(n.lookup(link_local), None);
        // Addresses that differ only in the high half are different neighbours.
        let other: Ipv6Addr = "fd01:70::11".parse().unwrap();
        assert_eq!(n.lookup(other), None);
        assert!(n.learn(other, MacAddr([2, 0, 0, 0, 6, 0x12]), 9));
        assert_eq!(n.lookup(v6).unwrap().mac, MacAddr([2, 0, 0, 0, 6, 0x11]));
    }

    #[test]
    fn concurrent_learners_agree() {
        // Four threads learn the same 64 IPv6 addresses at once; every lookup then finds the
        // last value written for its address, never a torn or foreign one.
        let n = std::sync::Arc::new(Neighbours::new(64));
        let addrs: Vec<Ipv6Addr> = (0..64u16).map(|i| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i)).collect();
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                let (n, addrs) = (std::sync::Arc::clone(&n), addrs.clone());
                std::thread::spawn(move || {
                    for (i, a) in addrs.iter().enumerate() {
                        assert!(n.learn(*a, MacAddr([2, 0, 0, t, 0, i as u8]), 1));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        for (i, a) in addrs.iter().enumerate() {
            let mac = n.lookup(*a).unwrap().mac;
            assert_eq!((mac.0[0], mac.0[5]), (2, i as u8));
            assert!(mac.0[3] < 4);
        }
    }

    /// The mean number of slots a lookup of each of `addrs` probes, once all are learned.
    fn mean_probes(n: &Neighbours, addrs: &[IpAddr]) -> f64 {
        for a in addrs {
            assert!(n.learn(*a, MacAddr([2, 0, 0, 0, 0, 1]), 1));
        }
        let probes: usize = addrs
            .iter()
            .map(|a| {
                let key = a.key();
                let mut i = n.home(key);
                let mut k = 1;
                while !n.slots[i].holds(key) {
                    i = (i + 1) & n.mask;
                    k += 1;
                }
                k
            })
            .sum();
        probes as f64 / addrs.len() as f64
    }

    #[test]
    fn address_plans_spread() {
        // Linear probing at load α probes (1 + 1/(1 − α)) / 2 slots per successful lookup
        // for a random function (Knuth): 1.31 at the 0.38 of 50 001 neighbours in 131 072
        // slots, 1.5 at 0.5. Structured address plans must not do much worse.
        let bench: Vec<IpAddr> = (0..50_000u32)
            .map(|p| IpAddr::V4(Ipv4Addr::new(10, 64 + (p % 20) as u8, ((p / 20 + 2) >> 8) as u8, (p / 20 + 2) as u8)))
            .collect();
        let one_subnet: Vec<IpAddr> = (1..=50_000u32).map(|i| IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + i))).collect();
        let per_node: Vec<IpAddr> =
            (0..4000u32).map(|i| IpAddr::V4(Ipv4Addr::new(10, 244, (i / 100) as u8, (i % 100 + 2) as u8))).collect();
        let v6: Vec<IpAddr> = (0..4000u16)
            .map(|i| IpAddr::V6(Ipv6Addr::new(0xfd00, 0x10, 0, 64 + i % 20, 0, 0, 0, i / 20 + 2)))
            .collect();
        for (name, addrs, bound) in
            [("bench", &bench, 1.45), ("one subnet", &one_subnet, 1.45), ("per node", &per_node, 1.7), ("v6", &v6, 1.7)]
        {
            let probes = mean_probes(&Neighbours::new(addrs.len()), addrs);
            assert!(probes < bound, "{name}: {probes:.2} slots probed per lookup");
        }
    }

    /// `lookup_first` answers as `lookup` for every address of a small table full of
    /// collisions: each learned one (first in its probe run or not), addresses never learned
    /// (their home slot empty, or taken by another), and while a slot is being written.
    #[test]
    fn lookup_first_is_lookup() {
        let n = Neighbours::new(8);
        let addrs: Vec<Ipv4Addr> = (1..=40u32).map(|i| Ipv4Addr::from(0x0a00_0000 + i)).collect();
        let check = |n: &Neighbours| {
            for a in &addrs {
                assert_eq!(n.lookup_first(*a), n.lookup(*a), "{a}");
                let v6 = a.to_ipv6_mapped();
                assert_eq!(n.lookup_first(v6), n.lookup(v6), "{v6}");
            }
        };
        check(&n);
        for (i, a) in addrs.iter().take(12).enumerate() {
            assert!(n.learn(*a, MacAddr([2, 0, 0, 0, 0, i as u8]), i as u64));
            check(&n);
        }
        // Some learned address not first in its probe run, so that the fallback runs.
        assert!(addrs.iter().take(12).any(|a| !n.slots[n.home(a.key())].holds(a.key())));
        // A slot being written (another worker's claim) reads as no match either way.
        let at_home = |a: &&Ipv4Addr| n.slots[n.home(a.key())].holds(a.key());
        let first = *addrs.iter().take(12).find(at_home).expect("a learned address in its home slot");
        let s = &n.slots[n.home(first.key())];
        let v = s.value.swap(WRITING_WORD, Ordering::AcqRel);
        check(&n);
        // Ready but not resolved: no entry either way.
        s.value.store(v & !RESOLVED, Ordering::Release);
        assert_eq!(n.lookup_first(first), None);
        check(&n);
        s.value.store(v, Ordering::Release);
        check(&n);
    }

    #[test]
    fn static_entries_stay() {
        let n = Neighbours::new(4);
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        n.learn(ip, MacAddr([2, 0, 0, 0, 0, 1]), u64::MAX);
        n.learn(ip, MacAddr([2, 0, 0, 0, 0, 2]), 10);
        assert_eq!(n.lookup(ip).unwrap().mac, MacAddr([2, 0, 0, 0, 0, 1]));
    }
}
