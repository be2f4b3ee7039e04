//! The neighbour table: IPv4 address → MAC address, shared by all workers without locks.
//!
//! ARP replies arrive on whichever worker the NIC chose, while the flow that needs the
//! answer may live on another, so this one structure is shared. It is a fixed-size
//! open-addressing table of atomics: an entry's key is claimed once with a
//! compare-and-swap and never removed; its value (MAC and "resolved" bit) and its
//! refresh time are single atomic words, so a reader never sees a torn MAC. Lookups are
//! two or three relaxed loads; writes happen only on ARP traffic.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::wire::MacAddr;

const RESOLVED: u64 = 1 << 48;

struct Slot {
    /// 0: empty; else `1 << 32 | address`.
    key: AtomicU64,
    /// 0: not resolved; else `RESOLVED | mac`.
    value: AtomicU64,
    /// Monotonic ns of the last confirmation (ARP reply or request from it).
    updated_ns: AtomicU64,
}

/// A neighbour entry as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// Its MAC address.
    pub mac: MacAddr,
    /// When it was last confirmed (monotonic ns; `u64::MAX` for static entries).
    pub updated_ns: u64,
}

/// Fixed-capacity, lock-free neighbour table.
pub struct Neighbours {
    slots: Box<[Slot]>,
    mask: usize,
}

impl std::fmt::Debug for Neighbours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Neighbours").field("capacity", &self.slots.len()).finish()
    }
}

impl Neighbours {
    /// A table for up to `capacity` neighbours (rounded up to a power of two, doubled for
    /// short probe chains).
    pub fn new(capacity: usize) -> Self {
        let n = (capacity.max(8) * 2).next_power_of_two();
        let slots = (0..n)
            .map(|_| Slot { key: AtomicU64::new(0), value: AtomicU64::new(0), updated_ns: AtomicU64::new(0) })
            .collect();
        Self { slots, mask: n - 1 }
    }

    #[inline]
    fn home(&self, ip: Ipv4Addr) -> usize {
        // Fibonacci hashing of the address: cheap and spreads sequential addresses.
        ((u64::from(u32::from(ip))).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & self.mask
    }

    /// The resolved entry for `ip`, if any.
    #[inline]
    pub fn lookup(&self, ip: Ipv4Addr) -> Option<Neighbour> {
        let key = 1 << 32 | u64::from(u32::from(ip));
        let mut i = self.home(ip);
        for _ in 0..self.slots.len() {
            let s = &self.slots[i];
            match s.key.load(Ordering::Acquire) {
                0 => return None,
                k if k == key => {
                    let v = s.value.load(Ordering::Acquire);
                    if v & RESOLVED == 0 {
                        return None;
                    }
                    let b = v.to_be_bytes();
                    return Some(Neighbour {
                        mac: MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]]),
                        updated_ns: s.updated_ns.load(Ordering::Relaxed),
                    });
                }
                _ => i = (i + 1) & self.mask,
            }
        }
        None
    }

    /// Records that `ip` is at `mac`, confirmed at `now_ns` (`u64::MAX`: static, never
    /// refreshed). Returns false when the table is full.
    pub fn learn(&self, ip: Ipv4Addr, mac: MacAddr, now_ns: u64) -> bool {
        let key = 1 << 32 | u64::from(u32::from(ip));
        let mut i = self.home(ip);
        for _ in 0..self.slots.len() {
            let s = &self.slots[i];
            let k = match s.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => key,
                Err(existing) => existing,
            };
            if k == key {
                let m = mac.0;
                let v = RESOLVED | u64::from_be_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]]);
                // A static entry is never overwritten by what the network says.
                if s.updated_ns.load(Ordering::Relaxed) == u64::MAX && now_ns != u64::MAX {
                    return true;
                }
                s.updated_ns.store(now_ns, Ordering::Relaxed);
                s.value.store(v, Ordering::Release);
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
    fn static_entries_stay() {
        let n = Neighbours::new(4);
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        n.learn(ip, MacAddr([2, 0, 0, 0, 0, 1]), u64::MAX);
        n.learn(ip, MacAddr([2, 0, 0, 0, 0, 2]), 10);
        assert_eq!(n.lookup(ip).unwrap().mac, MacAddr([2, 0, 0, 0, 0, 1]));
    }
}
