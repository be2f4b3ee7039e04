//! Maglev figures through the gateway's public API ([`torii_gateway::maglev::build`]):
//! how evenly a ring shares its slots between endpoints (balance) and how many slots
//! change owner when one endpoint leaves (disruption), as the Maglev paper measures them
//! (Eisenbud et al., NSDI 2016, §3.4 and §5.3: M = 65537, "max − min" slots per backend,
//! and the share of the table that changes against the 1/N minimum).
//!
//! Used by the `maglev-figures` binary (the figures BENCHMARKS.md quotes) and the criterion
//! bench `maglev` (build time).

use std::net::{IpAddr, Ipv4Addr};

use torii_gateway::maglev;

/// Endpoints of the figures.
pub const ENDPOINTS: usize = 1000;

/// `n` distinct endpoints `10.1.x.y:8080`, as a Service's pods.
pub fn endpoints(n: usize) -> Vec<(IpAddr, u16)> {
    (0..n as u32).map(|i| (IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i)), 8080)).collect()
}

/// Slots owned by each endpoint of `ring` (indices into an `n`-endpoint list).
pub fn slot_counts(ring: &[u32], n: usize) -> Vec<usize> {
    let mut counts = vec![0; n];
    for &i in ring {
        counts[i as usize] += 1;
    }
    counts
}

/// Slots per endpoint: the least and the most any endpoint owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Balance {
    /// Fewest slots of any endpoint.
    pub min: usize,
    /// Most slots of any endpoint.
    pub max: usize,
}

/// The balance of the ring of `endpoints` with `ring_size` slots.
pub fn balance(endpoints: &[(IpAddr, u16)], ring_size: u32) -> Balance {
    let counts = slot_counts(&maglev::build(endpoints, ring_size), endpoints.len());
    Balance { min: counts.iter().copied().min().unwrap_or(0), max: counts.iter().copied().max().unwrap_or(0) }
}

/// What removing one endpoint did to a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disruption {
    /// Slots the removed endpoint owned (they must all move).
    pub owned: usize,
    /// Slots whose endpoint changed, the removed endpoint's included.
    pub moved: usize,
    /// Ring size.
    pub ring_size: u32,
}

impl Disruption {
    /// Share of the ring that moved (the paper's disruption; at least 1/N).
    pub fn moved_share(&self) -> f64 {
        self.moved as f64 / f64::from(self.ring_size)
    }

    /// Share of the other endpoints' slots that moved although their endpoint stayed
    /// (0 for a perfectly stable hash).
    pub fn survivors_moved_share(&self) -> f64 {
        (self.moved - self.owned) as f64 / (f64::from(self.ring_size) - self.owned as f64)
    }
}

/// Builds the ring of `endpoints`, removes endpoint `removed` and builds again; compares
/// the two rings slot by slot by endpoint identity (indices shift when one leaves).
///
/// # Panics
/// If `removed` is out of range.
pub fn disruption(endpoints: &[(IpAddr, u16)], ring_size: u32, removed: usize) -> Disruption {
    let before = maglev::build(endpoints, ring_size);
    let mut rest = endpoints.to_vec();
    let gone = rest.remove(removed);
    let after = maglev::build(&rest, ring_size);
    let owned = before.iter().filter(|&&i| endpoints[i as usize] == gone).count();
    let moved = before.iter().zip(&after).filter(|(&b, &a)| endpoints[b as usize] != rest[a as usize]).count();
    Disruption { owned, moved, ring_size }
}

/// Summary of a sample: (min, median, max), the upper median for an even count.
pub fn summary(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    match (values.first(), values.get(values.len() / 2), values.last()) {
        (Some(&lo), Some(&mid), Some(&hi)) => (lo, mid, hi),
        _ => (f64::NAN, f64::NAN, f64::NAN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_is_within_one_slot() {
        let b = balance(&endpoints(37), 4099);
        assert!(b.max - b.min <= 1 && b.min >= 4099 / 37, "{b:?}");
    }

    #[test]
    fn removal_moves_the_removed_endpoints_slots_and_little_else() {
        let eps = endpoints(20);
        let m = maglev::ring_size_for(20);
        for removed in [0, 7, 19] {
            let d = disruption(&eps, m, removed);
            assert!(d.owned > 0 && d.moved >= d.owned, "{d:?}");
            assert!(d.moved_share() >= 1.0 / 20.0 - 0.01 && d.moved_share() < 3.0 / 20.0, "{d:?}");
            assert!(d.survivors_moved_share() < 0.1, "{d:?}");
        }
    }

    #[test]
    fn summary_of_values() {
        assert_eq!(summary(vec![3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert!(summary(Vec::new()).0.is_nan());
    }
}
