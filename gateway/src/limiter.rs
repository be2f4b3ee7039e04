//! A per-worker limit on the rate of new flows each source address may open, off unless
//! configured (`[conntrack] new_flows_per_source_per_s`): the generic cell rate algorithm
//! (ITU-T I.371's virtual scheduling; a token bucket of `burst` tokens refilled at `rate`
//! per second, kept as one "theoretical arrival time" per source).
//!
//! # Contract
//!
//! - [`SourceLimiter::admit`] is consulted for new flows only (a conntrack miss that would
//!   create a flow), never for packets of established flows, and allocates nothing.
//! - Sources are kept in a fixed table of [`SLOTS`] slots indexed by a keyed hash of the
//!   address (a secret seed per worker, so a sender cannot aim at another source's slot);
//!   a source whose slot another source took starts afresh. The limit is therefore exact for
//!   a few thousand active sources per worker and lenient beyond — it stops one client from
//!   opening flows faster than configured, not a flood from random sources, which the
//!   conntrack's early drop and SNAT-port eviction absorb.
//! - Each worker limits what reaches it: with `n` workers a source may open up to `n` times
//!   the rate when its flows spread over them.

use std::net::IpAddr;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Sources tracked per worker (16 bytes each: 64 KiB).
pub const SLOTS: usize = 4096;

#[derive(Clone, Copy, Default)]
struct Slot {
    /// The source's hash; 0 for a slot never used.
    tag: u64,
    /// When the source's next new flow conforms: ns of the worker's monotonic clock.
    tat_ns: u64,
}

/// The per-source new-flow rate limit of one worker: see the module documentation.
pub struct SourceLimiter {
    slots: Box<[Slot]>,
    seed: u64,
    /// Nanoseconds between new flows at the configured rate; 0 when the limit is off.
    interval_ns: u64,
    /// How far ahead of now a source's arrival time may run: `(burst − 1) · interval`.
    tolerance_ns: u64,
}

impl SourceLimiter {
    /// A limit of `per_s` new flows a second per source with bursts of `burst` (at least 1),
    /// keyed by `seed`; `per_s == 0` turns it off (no memory, every flow admitted).
    #[must_use]
    pub fn new(per_s: u32, burst: u32, seed: u64) -> Self {
        if per_s == 0 {
            return Self { slots: Box::default(), seed, interval_ns: 0, tolerance_ns: 0 };
        }
        let interval_ns = 1_000_000_000 / u64::from(per_s);
        Self {
            slots: vec![Slot::default(); SLOTS].into_boxed_slice(),
            seed,
            interval_ns,
            tolerance_ns: u64::from(burst.max(1) - 1) * interval_ns,
        }
    }

    /// Whether `src` may open a new flow at `now_ns` (monotonic), and if so counts it.
    #[inline]
    pub fn admit(&mut self, src: IpAddr, now_ns: u64) -> bool {
        if self.interval_ns == 0 {
            return true;
        }
        let bytes = match src {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        let h = xxh3_64_with_seed(&bytes, self.seed);
        let tag = h | 1;
        let slot = &mut self.slots[(h >> 32) as usize % SLOTS];
        if slot.tag != tag {
            *slot = Slot { tag, tat_ns: now_ns };
        }
        conforms(&mut slot.tat_ns, now_ns, self.interval_ns, self.tolerance_ns)
    }
}

/// One cell of the generic cell rate algorithm (virtual scheduling): whether an arrival at
/// `now_ns` conforms, given its theoretical arrival time `tat_ns`, the `interval_ns` between
/// conforming arrivals and the `tolerance_ns` (`(burst − 1) · interval`) an arrival may come
/// early; a conforming arrival moves `tat_ns` one interval on.
#[inline]
pub fn conforms(tat_ns: &mut u64, now_ns: u64, interval_ns: u64, tolerance_ns: u64) -> bool {
    let tat = (*tat_ns).max(now_ns);
    if tat - now_ns > tolerance_ns {
        return false;
    }
    *tat_ns = tat + interval_ns;
    true
}

impl std::fmt::Debug for SourceLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceLimiter")
            .field("interval_ns", &self.interval_ns)
            .field("tolerance_ns", &self.tolerance_ns)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn off_admits_everything() {
        let mut l = SourceLimiter::new(0, 0, 1);
        assert!((0..10_000).all(|i| l.admit(IpAddr::from([192, 0, 2, 1]), i)));
    }

    #[test]
    fn a_source_gets_its_burst_then_the_rate() {
        let mut l = SourceLimiter::new(10, 5, 1);
        let a = IpAddr::from([192, 0, 2, 1]);
        let b = IpAddr::from([192, 0, 2, 2]);
        let admitted = (0..20).filter(|_| l.admit(a, 1000 * MS)).count();
        assert_eq!(admitted, 5, "the burst");
        assert!(l.admit(b, 1000 * MS), "another source is not affected");
        assert!(!l.admit(a, 1050 * MS));
        assert!(l.admit(a, 1100 * MS), "one more every 100 ms");
        assert!(!l.admit(a, 1150 * MS));
        // Over a second, about the rate.
        let admitted = (0..1000).filter(|i| l.admit(a, 2000 * MS + i * MS)).count();
        assert!((10..=15).contains(&admitted), "{admitted} in a second at 10/s");
    }
}
