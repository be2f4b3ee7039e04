//! Per-worker SNAT port allocation.
//!
//! Two ownership rules, one per way the gateway's packets reach its workers:
//!
//! - **Modulo** ([`SnatPorts::new`]): worker `w` of `n` owns the SNAT ports `p` in the
//!   configured range with `p % n == w` ([`crate::io::fanout::owner_of_port`]): the
//!   AF_PACKET fanout program steers a reply addressed to SNAT port `p` to that worker,
//!   so both directions of a flow meet the same conntrack table. A single worker owns
//!   every port (DPDK with one queue per port).
//! - **Steered** ([`SnatPorts::steered`]): the NIC's RSS decides where a reply lands, from
//!   a hash of (endpoint, SNAT address, endpoint port, SNAT port). A [`ReplySteering`]
//!   (the DPDK driver's `rte_thash` picker) chooses a port whose reply hashes to this
//!   worker's RX queue; which ports those are depends on the endpoint, so each worker
//!   keeps a bit set over the whole range and any worker may use any port for some
//!   endpoint. Allocation needs the endpoint: [`SnatPorts::alloc_for`].
//!
//! Ports are tracked per (SNAT address, protocol) in a bit set. Allocation takes the first
//! free port the rule allows from a cursor that jumps to a random position after every
//! allocation — RFC 6056's "simple port randomization" (§ 3.3.1): a sender on the client
//! side cannot guess the SNAT port of another client's flow from its own, and a just-freed
//! port is taken again only by chance (one in the number of free ports). The generator is
//! `fastrand`'s wyrand, seeded per worker ([`SnatPorts::reseed`]) from the process's
//! random state; its output is not a cryptographic secret, which RFC 6056 does not ask
//! for (§ 3.3.1 allows any PRNG with a good distribution).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;

use bitvec::prelude::*;

/// Seed of the cursor jumps until [`SnatPorts::reseed`] sets one.
const DEFAULT_SEED: u64 = 0x5eed_5a47_0000_0001;

/// Protocols with their own port space.
const PROTOCOLS: [u8; 3] = [6, 17, 132];

/// Chooses SNAT ports whose replies the NIC delivers to a given worker (RSS steering).
pub trait ReplySteering: Send + Sync + std::fmt::Debug {
    /// A port `p` in the SNAT range with `usable(p)`, such that a reply
    /// `endpoint → snat_addr:p` is received by `worker`; the search starts at `start`
    /// (a port in the range). `None` when no usable port steers to the worker.
    fn pick(
        &self,
        endpoint: SocketAddrV4,
        snat_addr: Ipv4Addr,
        worker: usize,
        start: u16,
        usable: &mut dyn FnMut(u16) -> bool,
    ) -> Option<u16>;
}

#[derive(Debug)]
struct Steered {
    steering: Arc<dyn ReplySteering>,
    worker: usize,
    addresses: Vec<Ipv4Addr>,
}
/// The SNAT ports one worker owns, and which of them are in use.
#[derive(Debug)]
pub struct SnatPorts {
    first: u16,
    stride: u16,
    count: usize,
    /// `used[address_index * PROTOCOLS.len() + protocol_index]`.
    used: Vec<BitVec>,
    cursors: Vec<usize>,
    /// Where the cursors jump after an allocation.
    rng: fastrand::Rng,
    /// `Some` for the steered rule (then `stride` is 1 and `first` the range's start).
    steered: Option<Steered>,
}

fn protocol_index(protocol: u8) -> Option<usize> {
    PROTOCOLS.iter().position(|&p| p == protocol)
}

impl SnatPorts {
    /// The ports of `worker` (of `workers`) in `[port_min, port_max]`, for `addresses` SNAT
    /// addresses. A worker may own no port when the range is tiny (then every allocation fails).
    pub fn new(worker: usize, workers: usize, port_min: u16, port_max: u16, addresses: usize) -> Self {
        let n = workers.max(1) as u32;
        let w = worker as u32 % n;
        let min = u32::from(port_min);
        let first = min + (w + n - min % n) % n;
        let count = if first > u32::from(port_max) { 0 } else { ((u32::from(port_max) - first) / n + 1) as usize };
        let slots = addresses.max(1) * PROTOCOLS.len();
        Self {
            first: first.min(65535) as u16,
            stride: n as u16,
            count,
            used: (0..slots).map(|_| bitvec![0; count]).collect(),
            cursors: vec![0; slots],
            rng: fastrand::Rng::with_seed(DEFAULT_SEED ^ worker as u64),
            steered: None,
        }
    }

    /// The steered rule: `worker` may use any port of `[port_min, port_max]` whose reply
    /// `steering` sends to it, per SNAT address of `addresses` (indexed as in
    /// [`alloc_for`](Self::alloc_for)).
    pub fn steered(
        worker: usize,
        port_min: u16,
        port_max: u16,
        addresses: &[Ipv4Addr],
        steering: Arc<dyn ReplySteering>,
    ) -> Self {
        let count = usize::from(port_max.saturating_sub(port_min)) + 1;
        let slots = addresses.len().max(1) * PROTOCOLS.len();
        Self {
            first: port_min,
            stride: 1,
            count,
            used: (0..slots).map(|_| bitvec![0; count]).collect(),
            cursors: vec![0; slots],
            rng: fastrand::Rng::with_seed(DEFAULT_SEED ^ worker as u64),
            steered: Some(Steered { steering, worker, addresses: addresses.to_vec() }),
        }
    }

    /// Draws the cursor jumps from `seed` from now on and moves every cursor to a random
    /// position, so that not even the first port is predictable. The constructors start
    /// every cursor at the first port and use a fixed seed, so that tests are repeatable;
    /// the gateway reseeds each worker's ports with a random seed before its first packet.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = fastrand::Rng::with_seed(seed);
        let count = self.count;
        for c in &mut self.cursors {
            *c = if count == 0 { 0 } else { self.rng.usize(..count) };
        }
    }

    /// Whether ports are chosen by RSS steering ([`SnatPorts::steered`]).
    pub fn is_steered(&self) -> bool {
        self.steered.is_some()
    }

    /// Number of ports this worker owns per (address, protocol).
    pub fn capacity(&self) -> usize {
        self.count
    }

    /// Allocates a free port for SNAT address `address` (index) and `protocol` under the
    /// modulo rule. `None` when they are all in use (or the protocol has no ports), and
    /// always under the steered rule, which needs the endpoint: use
    /// [`alloc_for`](Self::alloc_for).
    #[inline]
    pub fn alloc(&mut self, address: usize, protocol: u8) -> Option<u16> {
        if self.steered.is_some() {
            return None;
        }
        // The endpoint matters to the steered rule only.
        self.alloc_for(address, protocol, SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Allocates a free port for a flow to `endpoint` leaving from SNAT address `address`
    /// (index) with `protocol`, under either rule: the reply `endpoint → SNAT
    /// address:port` reaches this worker. `None` when no such port is free, and under the
    /// steered rule for an IPv6 endpoint (the steering covers IPv4 replies only).
    #[inline]
    pub fn alloc_for(&mut self, address: usize, protocol: u8, endpoint: SocketAddr) -> Option<u16> {
        let (slot, i) = self.find_free(address, protocol, endpoint)?;
        self.used[slot].set(i, true);
        self.cursors[slot] = self.rng.usize(..self.count);
        Some(self.port_at(i))
    }

    /// The port [`alloc_for`](Self::alloc_for) would allocate now for the same arguments,
    /// without allocating it: what a burst uses to prefetch the conntrack slot of a new
    /// flow's reply tuple ahead (a guess: frames processed in between may take the port).
    #[inline]
    pub fn peek_for(&self, address: usize, protocol: u8, endpoint: SocketAddr) -> Option<u16> {
        self.find_free(address, protocol, endpoint).map(|(_, i)| self.port_at(i))
    }

    /// The port of bit `i` of a bit set.
    #[inline]
    fn port_at(&self, i: usize) -> u16 {
        self.first + (i as u16) * self.stride
    }

    /// The (bit set, bit) of the first free port from the cursor that either rule allows
    /// for a flow to `endpoint` from SNAT address `address` with `protocol`.
    #[inline]
    fn find_free(&self, address: usize, protocol: u8, endpoint: SocketAddr) -> Option<(usize, usize)> {
        let slot = address * PROTOCOLS.len() + protocol_index(protocol)?;
        let bits = self.used.get(slot)?;
        let cursor = self.cursors[slot];
        let i = match &self.steered {
            None => {
                let (words, count) = (bits.as_raw_slice(), bits.len());
                first_zero_in(words, cursor, count).or_else(|| first_zero_in(words, 0, cursor.min(count)))?
            }
            Some(st) => {
                let SocketAddr::V4(endpoint) = endpoint else { return None };
                let snat_addr = *st.addresses.get(address)?;
                let first = self.first;
                let start = first.saturating_add(cursor as u16);
                let port = st.steering.pick(endpoint, snat_addr, st.worker, start, &mut |p| {
                    p.checked_sub(first).is_some_and(|i| bits.get(usize::from(i)).is_some_and(|b| !*b))
                })?;
                usize::from(port - first)
            }
        };
        Some((slot, i))
    }

    /// Marks `port` in use, as if allocated: for the flows of an adopted conntrack region
    /// (`Conntrack::persistent`), whose ports the new process must not hand out again.
    /// Ports this worker does not own are ignored.
    pub fn reserve(&mut self, address: usize, protocol: u8, port: u16) {
        self.set(address, protocol, port, true);
    }

    /// Returns `port` to the pool. Ports this worker does not own are ignored.
    #[inline]
    pub fn free(&mut self, address: usize, protocol: u8, port: u16) {
        self.set(address, protocol, port, false);
    }

    #[inline]
    fn set(&mut self, address: usize, protocol: u8, port: u16, used: bool) {
        let Some(p) = protocol_index(protocol) else { return };
        if port < self.first || !(port - self.first).is_multiple_of(self.stride) {
            return;
        }
        let i = usize::from((port - self.first) / self.stride);
        if let Some(bits) = self.used.get_mut(address * PROTOCOLS.len() + p) {
            if i < bits.len() {
                bits.set(i, used);
            }
        }
    }
}

/// The first zero bit in `start..end` of the bit set `words` (bit `i` is bit `i % W` of
/// `words[i / W]`, as in a `BitVec<usize, Lsb0>`), a word at a time; `None` when all of
/// them are set. `end` must not exceed the bits `words` holds.
#[inline]
fn first_zero_in(words: &[usize], start: usize, end: usize) -> Option<usize> {
    const W: usize = usize::BITS as usize;
    let mut i = start;
    while i < end {
        let free = !words[i / W] >> (i % W);
        if free != 0 {
            let found = i + free.trailing_zeros() as usize;
            return (found < end).then_some(found);
        }
        i = (i / W + 1) * W;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for RSS: the reply of (endpoint, port) lands on worker
    /// `(port ^ endpoint port) % workers`.
    #[derive(Debug)]
    struct XorSteering {
        workers: usize,
        range: (u16, u16),
    }

    impl ReplySteering for XorSteering {
        fn pick(
            &self,
            endpoint: SocketAddrV4,
            _snat: Ipv4Addr,
            worker: usize,
            start: u16,
            usable: &mut dyn FnMut(u16) -> bool,
        ) -> Option<u16> {
            let (min, max) = self.range;
            (start..=max)
                .chain(min..start)
                .find(|&p| usize::from(p ^ endpoint.port()) % self.workers == worker && usable(p))
        }
    }

    #[test]
    fn steered_ports_reach_their_worker_and_are_unique_per_worker() {
        let workers = 3;
        let steering: Arc<dyn ReplySteering> = Arc::new(XorSteering { workers, range: (2000, 2099) });
        let snat = [Ipv4Addr::new(10, 70, 0, 1), Ipv4Addr::new(10, 70, 0, 2)];
        let endpoint = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 70, 0, 11), 8080));
        let mut total = 0;
        for w in 0..workers {
            let mut s = SnatPorts::steered(w, 2000, 2099, &snat, Arc::clone(&steering));
            assert!(s.is_steered());
            assert_eq!(s.alloc(0, 6), None, "the steered rule needs the endpoint");
            let mut mine = std::collections::HashSet::new();
            while let Some(p) = s.alloc_for(1, 6, endpoint) {
                assert!((2000..=2099).contains(&p));
                assert_eq!(usize::from(p ^ 8080) % workers, w, "port {p} steers elsewhere");
                assert!(mine.insert(p), "port {p} handed out twice");
            }
            total += mine.len();
            // Another endpoint, another protocol or another address: other port spaces.
            assert!(s.alloc_for(0, 6, endpoint).is_some());
            assert!(s.alloc_for(1, 17, endpoint).is_some());
            assert_eq!(s.alloc_for(2, 6, endpoint), None, "no third SNAT address");
            let v6: SocketAddr = "[fd00:70::11]:8080".parse().unwrap();
            assert_eq!(s.alloc_for(0, 6, v6), None, "IPv6 replies are not steered");
            // Freed ports come back.
            let p = *mine.iter().next().unwrap();
            s.free(1, 6, p);
            assert_eq!(s.alloc_for(1, 6, endpoint), Some(p));
        }
        assert_eq!(total, 100, "every port of the range is used by exactly one worker");
    }

    #[test]
    fn alloc_for_follows_the_modulo_rule_without_steering() {
        let mut s = SnatPorts::new(1, 2, 1000, 1009, 1);
        let e = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80));
        let mut ports: Vec<u16> = std::iter::from_fn(|| s.alloc_for(0, 6, e)).collect();
        ports.sort_unstable();
        assert_eq!(ports, [1001, 1003, 1005, 1007, 1009]);
        // Any family under the modulo rule (the fanout program steers IPv6 replies too).
        let mut s = SnatPorts::new(1, 2, 1000, 1009, 2);
        let e6: SocketAddr = "[fd00:70::11]:8080".parse().unwrap();
        let mut ports: Vec<u16> = std::iter::from_fn(|| s.alloc_for(1, 6, e6)).collect();
        ports.sort_unstable();
        assert_eq!(ports, [1001, 1003, 1005, 1007, 1009]);
    }

    #[test]
    fn ports_come_in_no_predictable_order_and_peek_foretells_the_next() {
        let e = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80));
        let mut s = SnatPorts::new(0, 1, 1024, 65535, 1);
        s.reseed(42);
        let mut ports = Vec::new();
        for _ in 0..1000 {
            let next = s.peek_for(0, 6, e);
            let p = s.alloc_for(0, 6, e);
            assert_eq!(p, next, "peek_for is what alloc_for takes next");
            ports.push(p.unwrap());
        }
        // RFC 6056 § 3.3.1: not one after the other. Sequential allocation would give 999
        // steps of +1; a uniform choice about none.
        let sequential = ports.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(sequential < 10, "{sequential} of 999 allocations took the next port");
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 1000, "no port handed out twice");
        let other: Vec<u16> = {
            let mut s = SnatPorts::new(0, 1, 1024, 65535, 1);
            s.reseed(43);
            (0..1000).map(|_| s.alloc_for(0, 6, e).unwrap()).collect()
        };
        assert_ne!(ports, other, "another seed, another sequence");
    }

    #[test]
    fn ports_belong_to_their_worker_and_are_unique() {
        for workers in 1..5 {
            let mut all = std::collections::HashSet::new();
            for w in 0..workers {
                let mut s = SnatPorts::new(w, workers, 1000, 1099, 1);
                let mut n = 0;
                while let Some(p) = s.alloc(0, 6) {
                    assert!((1000..=1099).contains(&p));
                    assert_eq!(usize::from(p) % workers, w);
                    assert!(all.insert(p), "port {p} handed out twice");
                    n += 1;
                }
                assert_eq!(n, s.capacity());
            }
            assert_eq!(all.len(), 100);
        }
    }

    #[test]
    fn freed_ports_come_back_last() {
        let mut s = SnatPorts::new(0, 1, 5000, 5003, 1);
        let a = s.alloc(0, 17).unwrap();
        s.free(0, 17, a);
        let b = s.alloc(0, 17).unwrap();
        assert_ne!(a, b, "a just-freed port is not reused first");
        let _ = (s.alloc(0, 17), s.alloc(0, 17), s.alloc(0, 17));
        assert_eq!(s.alloc(0, 17), None);
        s.free(0, 17, b);
        assert_eq!(s.alloc(0, 17), Some(b));
        // TCP has its own port space.
        assert!(s.alloc(0, 6).is_some());
        assert_eq!(s.alloc(0, 1), None);
    }

    #[test]
    fn word_scan_finds_what_a_bit_scan_finds() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in [1usize, 63, 64, 65, 130, 1000] {
            for density in [0u32, 1, 3, 4] {
                let mut bits = bitvec![0; len];
                for i in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Density 0: none set; 4: all set; else each set with probability 1 - 2^(-4·density).
                    bits.set(i, density == 4 || (density > 0 && x.trailing_zeros() < density * 4));
                }
                for start in 0..=len {
                    for end in [start, (start + 1).min(len), (start + 70).min(len), len] {
                        let want = bits[start..end].first_zero().map(|i| i + start);
                        assert_eq!(first_zero_in(bits.as_raw_slice(), start, end), want, "{len} {start}..{end}");
                    }
                }
            }
        }
    }
}
