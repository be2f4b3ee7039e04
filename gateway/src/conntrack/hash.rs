//! The table hash of a [`FlowKey`]: a keyed multiply-fold over the key's fields as integers
//! (wyhash's and XXH3's short-input construction), never through a byte buffer.
//!
//! # Contract
//!
//! - [`KeyHash::hash`] is a pure function of the key and the table's secret words, which
//!   [`KeyHash::new`] derives from the per-table seed (SplitMix64): a remote sender who does
//!   not know the seed cannot precompute tuples that collide in a given worker's table.
//! - The 64-bit result is mixed in all bits: the index takes its home slot from the low 32
//!   bits and its fingerprint from the top 24 (`index`).
//! - Why not XXH3 over the key's bytes, as before: writing the 13 (IPv4) or 37 (IPv6) bytes
//!   into a buffer and reading them back as overlapping unaligned words defeats the CPU's
//!   store-to-load forwarding, a stall on every packet (it was the hottest instruction of an
//!   established packet's path). Here the fields stay in registers.
//!
//! Construction: `mum(x, y)` is the 128-bit product of `x` and `y` folded to 64 bits (high
//! XOR low). An IPv4 key is exactly two words — addresses, and ports with the protocol —
//! each XORed with a secret word before one `mum`; an IPv6 key's two addresses are first
//! reduced by one `mum` each under their own secret words. The result goes through XXH3's
//! avalanche.

use super::{Address, FlowKey};

/// The secret words of one table's hash.
#[derive(Clone, Copy, Debug)]
pub(super) struct KeyHash {
    secret: [u64; 6],
}

/// SplitMix64's increment and output function (Steele, Lea, Flood: "Fast splittable
/// pseudorandom number generators", OOPSLA 2014).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 128-bit product of `x` and `y`, folded to 64 bits (also the neighbour table's home
/// slot: `crate::neighbour`).
#[inline(always)]
pub(crate) fn mum(x: u64, y: u64) -> u64 {
    let p = u128::from(x) * u128::from(y);
    (p as u64) ^ ((p >> 64) as u64)
}

/// XXH3's final avalanche (`XXH3_avalanche`).
#[inline(always)]
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 37;
    h = h.wrapping_mul(0x1656_6791_9e37_79f9);
    h ^ (h >> 32)
}

impl KeyHash {
    /// The hash of a table seeded with `seed`.
    pub(super) fn new(seed: u64) -> Self {
        let mut state = seed;
        let mut secret = [0; 6];
        for s in &mut secret {
            // An odd word never zeroes a product by itself.
            *s = splitmix64(&mut state) | 1;
        }
        Self { secret }
    }

    /// The table hash of `key`. O(1): one multiplication for IPv4 (three for IPv6) and the
    /// avalanche.
    #[inline(always)]
    pub(super) fn hash<A: Address>(&self, key: &FlowKey<A>) -> u64 {
        let k = &self.secret;
        let ports = (u64::from(key.src_port) << 48) | (u64::from(key.dst_port) << 32) | u64::from(key.protocol);
        let (src, dst) = (key.src_addr.to_u128(), key.dst_addr.to_u128());
        let addresses = if A::LEN == 4 {
            ((src as u64) << 32) | dst as u64
        } else {
            mum((src >> 64) as u64 ^ k[2], src as u64 ^ k[3]) ^ mum((dst >> 64) as u64 ^ k[4], dst as u64 ^ k[5])
        };
        avalanche(mum(addresses ^ k[0], ports ^ k[1]))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn key4(i: u32) -> FlowKey {
        FlowKey {
            protocol: 6,
            src_addr: Ipv4Addr::from(0x6440_0000 + i / 64),
            src_port: 1024 + (i % 64) as u16,
            dst_addr: Ipv4Addr::new(198, 18, 0, 1),
            dst_port: 80,
        }
    }

    #[test]
    fn every_field_counts_and_the_seed_changes_everything() {
        let h = KeyHash::new(7);
        let k = key4(5);
        let base = h.hash(&k);
        let mut variants = vec![
            FlowKey { protocol: 17, ..k },
            FlowKey { src_port: k.src_port + 1, ..k },
            FlowKey { dst_port: 81, ..k },
            FlowKey { src_addr: Ipv4Addr::new(100, 64, 0, 1), ..k },
            FlowKey { dst_addr: Ipv4Addr::new(198, 18, 0, 2), ..k },
            k.reversed(),
        ];
        variants.dedup();
        for v in variants {
            assert_ne!(h.hash(&v), base, "{v:?}");
        }
        assert_ne!(KeyHash::new(8).hash(&k), base);
        let k6 = FlowKey {
            protocol: 6,
            src_addr: Ipv6Addr::LOCALHOST,
            src_port: 1,
            dst_addr: Ipv6Addr::UNSPECIFIED,
            dst_port: 2,
        };
        assert_ne!(h.hash(&k6), h.hash(&k6.reversed()));
    }

    #[test]
    fn sequential_tuples_spread_over_homes_and_fingerprints() {
        // 64 Ki sequential client tuples (the benchmark's and a SYN flood's shape: 64 ports
        // per address; every port of one client; one port of 64 Ki clients; SNAT ports to
        // one endpoint, UDP) into 2^16 home buckets (the low 32 bits, as the index reduces
        // them), no bucket with more than a few times its fair share, and 2^12 fingerprint
        // buckets (the top bits), filled as a random function would.
        let shapes: [fn(u32) -> FlowKey; 4] = [
            key4,
            |i| FlowKey { src_addr: Ipv4Addr::new(100, 64, 0, 1), src_port: i as u16, ..key4(0) },
            |i| FlowKey { src_addr: Ipv4Addr::from(0x6440_0000 + i), src_port: 40_000, ..key4(0) },
            |i| FlowKey {
                protocol: 17,
                src_addr: Ipv4Addr::new(10, 70, 0, 11),
                src_port: 8080,
                dst_addr: Ipv4Addr::new(10, 70, 0, 1),
                dst_port: i as u16,
            },
        ];
        for (s, shape) in shapes.iter().enumerate() {
            let h = KeyHash::new(0x5eed + s as u64);
            let n = 1 << 16;
            let mut homes = vec![0u32; 1 << 16];
            let mut fingerprints = vec![0u32; 1 << 12];
            let mut seen = HashSet::new();
            for i in 0..n {
                let x = h.hash(&shape(i));
                homes[((u64::from(x as u32) << 16) >> 32) as usize] += 1;
                fingerprints[(x >> 52) as usize] += 1;
                seen.insert(x);
            }
            assert_eq!(seen.len(), n as usize, "shape {s}: no 64-bit collision among 64 Ki keys");
            let max_home = *homes.iter().max().unwrap();
            assert!(max_home <= 12, "shape {s}: home buckets: max {max_home}");
            // Pearson's chi-squared of the fingerprints against the uniform distribution:
            // about its 4095 degrees of freedom for a random function (standard deviation
            // ~90). A hash without the avalanche scores 150–6000 here: structured in some
            // shapes (an arithmetic progression of fingerprints), clustered in others.
            let fair = f64::from(n) / f64::from(1 << 12);
            let chi2: f64 = fingerprints.iter().map(|&c| (f64::from(c) - fair).powi(2) / fair).sum();
            assert!((3_600.0..4_600.0).contains(&chi2), "shape {s}: fingerprints' chi-squared {chi2:.0}");
        }
    }
}
