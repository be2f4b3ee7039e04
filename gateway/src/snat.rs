//! Per-worker SNAT port choice: a port that makes a new flow's **reply tuple** unique.
//!
//! A full-NAT flow to endpoint `e:ep` leaves from SNAT address `s` and port `p`; its
//! replies arrive as `e:ep → s:p`. That reply 5-tuple (endpoint address and port, SNAT
//! address and port, protocol) is what must be unique, not the pair (SNAT address, port):
//! the same `s:p` may serve one flow to every endpoint at once. This is Linux's NAT tuple
//! uniqueness (`nf_nat_core.c`: `get_unique_tuple` tries candidate ports and
//! `nf_nat_used_tuple` checks each candidate reply tuple against the conntrack hash) and
//! DPVS's; it gives about 64 K flows per (SNAT address, endpoint, protocol) instead of
//! 64 K per SNAT address. [`SnatPorts`] keeps no record of the ports in use: the caller's
//! conntrack table already indexes every reply tuple, and [`SnatPorts::alloc`] asks the
//! caller (`free(address, port)`) about each candidate.
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
//!   (the DPDK driver's `rte_thash` picker) proposes the ports whose reply hashes to this
//!   worker's RX queue, which depend on the endpoint and the SNAT address (IPv4 and IPv6;
//!   IPv6 where the steering steers it: [`ReplySteering::steers_ipv6`]).
//!
//! Choice: the SNAT address is one of the egress link's ([`crate::host::Host::snat_addresses_on`]),
//! drawn at random per flow, so flows spread evenly over several addresses; if none of its
//! candidate ports is free, the next address is tried. The candidates are ports the rule
//! allows drawn at random — RFC 6056's "simple port randomization" (§ 3.3.1): a sender on
//! the client side cannot guess the SNAT port of another client's flow from its own, and a
//! just-freed port is taken again only by chance. The search is bounded as Linux's
//! `nf_nat_l4proto_unique_tuple` bounds it ([`MAX_ATTEMPTS`] = 240 candidates per address;
//! a range of at most that many ports is searched whole, in order from a random one).
//! Linux walks consecutive ports in rounds from random positions; under the modulo rule
//! each candidate here is drawn anew instead, because consecutive candidates cluster as
//! linear probing does (a new port lands at the end of a run of taken ones, so runs grow,
//! and at 95 % occupancy most outgrow a round). With independent draws a search fails with
//! probability occupancy^240 (at 95 %, about 5·10⁻⁶), so only when nearly every port for
//! that endpoint is taken; the pipeline then evicts a flow that is worth less among those
//! it met (`pipeline::flow`). Under the steered rule the candidates are the picker's, in
//! its order (blocks of the range from a random one), at most [`MAX_ATTEMPTS`] of them.
//!
//! The generator is `fastrand`'s wyrand, seeded per worker ([`SnatPorts::reseed`]) from
//! the process's random state; its output is not a cryptographic secret, which RFC 6056
//! does not ask for (§ 3.3.1 allows any PRNG with a good distribution).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Seed of the random positions until [`SnatPorts::reseed`] sets one.
const DEFAULT_SEED: u64 = 0x5eed_5a47_0000_0001;

/// Candidate ports [`SnatPorts::alloc`] examines per SNAT address at most, unless the
/// worker owns fewer ports, which are then all examined: Linux's bound
/// (`nf_nat_l4proto_unique_tuple`: rounds of 128, 64, 32 and 16 candidates).
pub const MAX_ATTEMPTS: usize = 240;

/// Chooses SNAT ports whose replies the NIC delivers to a given worker (RSS steering).
pub trait ReplySteering: Send + Sync + std::fmt::Debug {
    /// A port `p` in the SNAT range with `usable(p)`, such that a reply
    /// `endpoint → snat_addr:p` (addresses of one family) is received by `worker`; the
    /// search starts at `start` (a port in the range). `None` when no usable port steers
    /// to the worker. Asked of IPv6 replies only where [`ReplySteering::steers_ipv6`].
    fn pick(
        &self,
        endpoint: SocketAddr,
        snat_addr: IpAddr,
        worker: usize,
        start: u16,
        usable: &mut dyn FnMut(u16) -> bool,
    ) -> Option<u16>;

    /// Whether IPv6 replies are steered ([`ReplySteering::pick`] finds none otherwise).
    fn steers_ipv6(&self) -> bool;
}

#[derive(Debug)]
struct Steered {
    steering: Arc<dyn ReplySteering>,
    worker: usize,
}

/// The SNAT ports one worker may use, and the random position its next search starts
/// from. Holds no per-port state: whether a port is free for a flow is the caller's
/// conntrack's answer (see the module documentation).
#[derive(Debug)]
pub struct SnatPorts {
    /// The worker's first port, the distance between its ports and how many it has.
    first: u16,
    stride: u16,
    count: usize,
    /// The next search's random draw: the low 32 bits pick the first candidate port, the
    /// high 32 bits the first SNAT address; later candidates derive theirs from it.
    next: u64,
    /// Where `next` comes from after every allocation.
    rng: fastrand::Rng,
    /// `Some` for the steered rule (then `stride` is 1 and `first` the range's start).
    steered: Option<Steered>,
}

/// The draws of the searches [`SnatPorts::alloc`] will make next, as
/// [`SnatPorts::upcoming`] foretells them.
#[derive(Clone, Debug)]
pub struct Upcoming {
    next: u64,
    rng: fastrand::Rng,
}

/// `x` (a uniform 32-bit value) scaled to `0..n`, by multiplication (Lemire), without a division.
#[inline]
fn scale(x: u32, n: usize) -> usize {
    ((u64::from(x) * n as u64) >> 32) as usize
}

impl SnatPorts {
    /// The modulo rule: the ports `p` of `[port_min, port_max]` with `p % workers == worker`.
    /// A worker may own no port when the range is tiny (then every allocation fails).
    pub fn new(worker: usize, workers: usize, port_min: u16, port_max: u16) -> Self {
        let n = workers.max(1) as u32;
        let w = worker as u32 % n;
        let min = u32::from(port_min);
        let first = min + (w + n - min % n) % n;
        let count = if first > u32::from(port_max) { 0 } else { ((u32::from(port_max) - first) / n + 1) as usize };
        Self {
            first: first.min(65535) as u16,
            stride: n as u16,
            count,
            next: 0,
            rng: fastrand::Rng::with_seed(DEFAULT_SEED ^ worker as u64),
            steered: None,
        }
    }

    /// The steered rule: `worker` may use any port of `[port_min, port_max]` whose reply
    /// `steering` sends to it.
    pub fn steered(worker: usize, port_min: u16, port_max: u16, steering: Arc<dyn ReplySteering>) -> Self {
        Self {
            first: port_min,
            stride: 1,
            count: usize::from(port_max.saturating_sub(port_min)) + 1,
            next: 0,
            rng: fastrand::Rng::with_seed(DEFAULT_SEED ^ worker as u64),
            steered: Some(Steered { steering, worker }),
        }
    }

    /// Draws the random positions from `seed` from now on, starting with the next search,
    /// so that not even the first port is predictable. The constructors start at the
    /// first address and port and use a fixed seed, so that tests are repeatable; the
    /// gateway reseeds each worker's ports with a random seed before its first packet.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = fastrand::Rng::with_seed(seed);
        self.next = self.rng.u64(..);
    }

    /// Whether replies of the family (`ipv6`) can be given ports at all: always under the
    /// modulo rule; under the steered rule, IPv6 only where the steering steers it
    /// ([`ReplySteering::steers_ipv6`]).
    pub fn serves_family(&self, ipv6: bool) -> bool {
        !ipv6 || self.steered.as_ref().is_none_or(|st| st.steering.steers_ipv6())
    }

    /// Whether ports are chosen by RSS steering ([`SnatPorts::steered`]).
    pub fn is_steered(&self) -> bool {
        self.steered.is_some()
    }

    /// Number of ports the modulo rule gives this worker (under the steered rule, the whole
    /// range, of which about one in `workers` steers to this worker for a given endpoint):
    /// the most flows it can hold per (SNAT address, endpoint, protocol).
    pub fn capacity(&self) -> usize {
        self.count
    }

    /// The (SNAT address, port) [`alloc`](Self::alloc) examines first for a flow leaving
    /// from one of `addresses`, under the modulo rule: what a burst uses to prefetch the
    /// conntrack slot of a new flow's reply tuple ahead (almost always the one taken: a
    /// candidate is taken only when in use). `None` under the steered rule, whose first
    /// candidate depends on a hash of the tuple, and when there is no address or port.
    #[inline]
    pub fn peek<A: Copy>(&self, addresses: &[A]) -> Option<(A, u16)> {
        self.peek_from(self.next, addresses)
    }

    /// The random draws of the searches to come, for [`peek_next`](Self::peek_next): a copy
    /// of the generator, which the allocations leave untouched.
    #[inline]
    pub fn upcoming(&self) -> Upcoming {
        Upcoming { next: self.next, rng: self.rng.clone() }
    }

    /// [`peek`](Self::peek) of the search after those `upcoming` has foretold already, each
    /// of them taken to succeed (one draw per allocation): the first candidate of the
    /// `k`-th new flow of a burst, not of the first, when `k` flows open before it.
    #[inline]
    pub fn peek_next<A: Copy>(&self, upcoming: &mut Upcoming, addresses: &[A]) -> Option<(A, u16)> {
        let next = upcoming.next;
        upcoming.next = upcoming.rng.u64(..);
        self.peek_from(next, addresses)
    }

    /// [`peek`](Self::peek) with the search's draw `next`.
    #[inline]
    fn peek_from<A: Copy>(&self, next: u64, addresses: &[A]) -> Option<(A, u16)> {
        let (i, port) = self.first_from(next, addresses.len())?;
        Some((*addresses.get(i)?, port))
    }

    /// The first candidate of a search with draw `next` among `n` addresses under the modulo
    /// rule: the address's position (below `n`) and the port; `None` under the steered rule,
    /// with no address or no port.
    #[inline(always)]
    fn first_from(&self, next: u64, n: usize) -> Option<(usize, u16)> {
        if self.steered.is_some() || self.count == 0 || n == 0 {
            return None;
        }
        Some((scale((next >> 32) as u32, n), self.port_at(scale(next as u32, self.count))))
    }

    /// The first candidate [`alloc_indexed`](Self::alloc_indexed) examines among `n`
    /// addresses: the address's position (below `n`) and the port, as
    /// [`peek`](Self::peek) names them. A caller that finds it free takes it with
    /// [`take_first`](Self::take_first) instead of calling `alloc_indexed` — the same
    /// choice, without the search's closure; one that does not calls `alloc_indexed`,
    /// which examines it again. `None` under the steered rule and when there is no address
    /// or port.
    #[inline(always)]
    pub fn first_candidate(&self, n: usize) -> Option<(usize, u16)> {
        self.first_from(self.next, n)
    }

    /// Takes the candidate [`first_candidate`](Self::first_candidate) named, found free:
    /// the next search starts from a new random position, as after any allocation.
    #[inline(always)]
    pub fn take_first(&mut self) {
        self.next = self.rng.u64(..);
    }

    /// Chooses a SNAT address among `addresses` (the egress link's, of the endpoint's
    /// family) and a port this worker may use for a new flow to `endpoint`, such that
    /// `free(address, port)` — the reply tuple `endpoint → address:port` of the flow's
    /// protocol is not tracked — holds, under either rule: the reply reaches this worker.
    /// Examines at most [`MAX_ATTEMPTS`] ports per address (see the module documentation)
    /// and calls `free` once per candidate. `None` when none was free, when `addresses` is
    /// empty, and under the steered rule for a family the steering does not steer.
    /// Moves the next search's start to a new random position after a success.
    #[inline]
    pub fn alloc<A: Copy + Into<IpAddr>>(
        &mut self,
        endpoint: SocketAddr,
        addresses: &[A],
        free: impl FnMut(A, u16) -> bool,
    ) -> Option<(A, u16)> {
        self.alloc_indexed(endpoint, addresses, free).map(|(i, p)| (addresses[i], p))
    }

    /// [`alloc`](Self::alloc), returning the chosen address's position in `addresses`
    /// instead of the address (the pipeline keeps data per position).
    #[inline]
    pub fn alloc_indexed<A: Copy + Into<IpAddr>>(
        &mut self,
        endpoint: SocketAddr,
        addresses: &[A],
        mut free: impl FnMut(A, u16) -> bool,
    ) -> Option<(usize, u16)> {
        // The addresses from `first` on, wrapping around: the `k`-th tried is
        // `(first + k) % n` (`first < n`), counted without a division (a loop, not an
        // iterator chain: the first address nearly always has a free port).
        let n = addresses.len();
        let mut i = scale((self.next >> 32) as u32, n);
        for k in 0..n {
            let address = addresses[i];
            if let Some(p) = self.search(endpoint, address.into(), k as u64, |p| free(address, p)) {
                self.next = self.rng.u64(..);
                return Some((i, p));
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        None
    }

    /// The port search of [`alloc`](Self::alloc) for one SNAT address, the `k`-th tried.
    #[inline]
    fn search(&self, endpoint: SocketAddr, address: IpAddr, k: u64, mut free: impl FnMut(u16) -> bool) -> Option<u16> {
        if self.count == 0 {
            return None;
        }
        // Later candidates, and later addresses, come from draws derived from this search's.
        let mut later = fastrand::Rng::with_seed(self.next ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let start = if k == 0 { scale(self.next as u32, self.count) } else { later.usize(..self.count) };
        match &self.steered {
            None if self.count <= MAX_ATTEMPTS => {
                (0..self.count).map(|i| self.port_at((start + i) % self.count)).find(|&p| free(p))
            }
            None => {
                // `start`, then fresh draws: at most `MAX_ATTEMPTS` candidates (a loop, not
                // an iterator chain: the first candidate is nearly always free).
                let mut i = start;
                for _ in 0..MAX_ATTEMPTS {
                    let p = self.port_at(i);
                    if free(p) {
                        return Some(p);
                    }
                    i = later.usize(..self.count);
                }
                None
            }
            Some(st) => {
                if endpoint.is_ipv6() && !st.steering.steers_ipv6() {
                    return None;
                }
                let mut left = self.count.min(MAX_ATTEMPTS);
                let start = self.first.saturating_add(start as u16);
                st.steering.pick(endpoint, address, st.worker, start, &mut |p| {
                    // The picker may go on proposing ports after the budget is spent: no more lookups.
                    left > 0 && {
                        left -= 1;
                        free(p)
                    }
                })
            }
        }
    }

    /// The port of the worker's `i`-th.
    #[inline]
    fn port_at(&self, i: usize) -> u16 {
        self.first + (i as u16) * self.stride
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::{Ipv4Addr, SocketAddrV4};

    use proptest::prelude::*;

    use super::*;

    /// A stand-in for RSS: the reply of (endpoint, port) lands on worker
    /// `(port ^ endpoint port) % workers`; it steers IPv6 replies only with `ipv6`.
    #[derive(Debug)]
    struct XorSteering {
        workers: usize,
        range: (u16, u16),
        ipv6: bool,
    }

    impl ReplySteering for XorSteering {
        fn pick(
            &self,
            endpoint: SocketAddr,
            _snat: IpAddr,
            worker: usize,
            start: u16,
            usable: &mut dyn FnMut(u16) -> bool,
        ) -> Option<u16> {
            let (min, max) = self.range;
            (start..=max)
                .chain(min..start)
                .find(|&p| usize::from(p ^ endpoint.port()) % self.workers == worker && usable(p))
        }

        fn steers_ipv6(&self) -> bool {
            self.ipv6
        }
    }

    /// The reply tuples in use, as a worker's conntrack would index them: (endpoint, SNAT
    /// address, SNAT port), one protocol.
    type Replies = HashSet<(SocketAddr, IpAddr, u16)>;

    /// Allocates for `endpoint` as the pipeline does: a candidate is free when its reply
    /// tuple is not in `used`; records the one taken.
    fn take<A: Copy + Into<IpAddr>>(
        s: &mut SnatPorts,
        used: &mut Replies,
        endpoint: SocketAddr,
        addresses: &[A],
    ) -> Option<(A, u16)> {
        let got = s.alloc(endpoint, addresses, |a, p| !used.contains(&(endpoint, a.into(), p)));
        if let Some((a, p)) = got {
            assert!(used.insert((endpoint, a.into(), p)), "{endpoint} → {}:{p} handed out twice", a.into());
        }
        got
    }

    fn v4(last: u8, port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 70, 0, last), port))
    }

    const SNAT: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 70, 0, 1), Ipv4Addr::new(10, 70, 0, 2)];

    #[test]
    fn steered_ports_reach_their_worker_and_each_endpoint_has_the_whole_range() {
        let workers = 3;
        let steering: Arc<dyn ReplySteering> = Arc::new(XorSteering { workers, range: (2000, 2099), ipv6: true });
        let v6: SocketAddr = "[fd00:70::11]:8080".parse().unwrap();
        for e in [v4(11, 8080), v4(12, 8080), v4(11, 9090), v6] {
            let mut total = 0;
            for w in 0..workers {
                let mut s = SnatPorts::steered(w, 2000, 2099, Arc::clone(&steering));
                assert!(s.is_steered());
                assert_eq!(s.peek(&SNAT), None, "the steered rule's first candidate depends on the tuple");
                let mut used = Replies::new();
                let snat: IpAddr = if e.is_ipv4() { SNAT[0].into() } else { "fd00:70::1".parse().unwrap() };
                while let Some((a, p)) = take(&mut s, &mut used, e, &[snat]) {
                    assert_eq!(a, snat);
                    assert!((2000..=2099).contains(&p));
                    assert_eq!(usize::from(p ^ e.port()) % workers, w, "port {p} steers elsewhere");
                }
                total += used.len();
            }
            assert_eq!(total, 100, "every port of the range serves {e}, each on one worker");
        }
    }

    #[test]
    fn a_family_the_steering_cannot_steer_gets_no_port() {
        let steering: Arc<dyn ReplySteering> = Arc::new(XorSteering { workers: 2, range: (2000, 2099), ipv6: false });
        let mut s = SnatPorts::steered(0, 2000, 2099, steering);
        assert!(s.serves_family(false) && !s.serves_family(true));
        assert!(SnatPorts::new(0, 2, 2000, 2099).serves_family(true), "the modulo rule serves both");
        let mut used = Replies::new();
        let v6: SocketAddr = "[fd00:70::11]:8080".parse().unwrap();
        let snat6: [std::net::Ipv6Addr; 1] = ["fd00:70::1".parse().unwrap()];
        assert_eq!(take(&mut s, &mut used, v6, &snat6), None, "IPv6 replies not steered: no port");
        assert!(take(&mut s, &mut used, v4(11, 8080), &SNAT).is_some(), "IPv4 ones are");
    }

    #[test]
    fn modulo_rule_ports_for_any_family() {
        for e in [v4(1, 80), "[fd00:70::11]:8080".parse().unwrap()] {
            let mut s = SnatPorts::new(1, 2, 1000, 1009);
            let mut used = Replies::new();
            let mut ports: Vec<u16> =
                std::iter::from_fn(|| take(&mut s, &mut used, e, &[e.ip()])).map(|x| x.1).collect();
            ports.sort_unstable();
            assert_eq!(ports, [1001, 1003, 1005, 1007, 1009], "{e}");
            assert_eq!(s.capacity(), 5);
        }
    }

    #[test]
    fn a_port_serves_one_flow_per_endpoint() {
        // One worker, ten ports, one address: each endpoint (address and port) gets all ten.
        let mut s = SnatPorts::new(0, 1, 5000, 5009);
        let mut used = Replies::new();
        let endpoints = [v4(11, 80), v4(12, 80), v4(11, 81)];
        for e in endpoints {
            for _ in 0..10 {
                assert!(take(&mut s, &mut used, e, &SNAT[..1]).is_some(), "{e}");
            }
            assert_eq!(take(&mut s, &mut used, e, &SNAT[..1]), None, "{e}: every port taken");
        }
        let ports = |e| used.iter().filter(|u| u.0 == e).map(|u| u.2).collect::<HashSet<_>>();
        assert!(endpoints.iter().all(|&e| ports(e) == (5000..5010).collect()));
        // A second SNAT address doubles every endpoint's room.
        for _ in 0..10 {
            assert_eq!(take(&mut s, &mut used, endpoints[0], &SNAT).map(|x| x.0), Some(SNAT[1]));
        }
        assert_eq!(take(&mut s, &mut used, endpoints[0], &SNAT), None);
    }

    #[test]
    fn flows_spread_over_the_link_addresses() {
        let mut s = SnatPorts::new(0, 1, 1024, 65535);
        s.reseed(7);
        let mut used = Replies::new();
        let mut per_address = [0usize; 2];
        for i in 0..4000 {
            let (a, _) = take(&mut s, &mut used, v4(11 + (i % 4) as u8, 8080), &SNAT).unwrap();
            per_address[SNAT.iter().position(|&x| x == a).unwrap()] += 1;
        }
        // Binomial(4000, 1/2): 2000 ± 32 (σ); 200 is over 6 σ.
        assert!(per_address.iter().all(|&n| n.abs_diff(2000) < 200), "{per_address:?}");
    }

    #[test]
    fn ports_come_in_no_predictable_order_and_peek_foretells_the_next() {
        let e = v4(1, 80);
        let mut s = SnatPorts::new(0, 1, 1024, 65535);
        assert_eq!(s.peek(&SNAT[..1]), Some((SNAT[0], 1024)), "unseeded: from the first port");
        s.reseed(42);
        let mut used = Replies::new();
        let mut ports = Vec::new();
        for _ in 0..1000 {
            let next = s.peek(&SNAT[..1]).unwrap();
            let next_is_free = !used.contains(&(e, next.0.into(), next.1));
            let p = take(&mut s, &mut used, e, &SNAT[..1]).unwrap();
            if next_is_free {
                assert_eq!(p, next, "peek is what alloc takes next while that port is free");
            }
            ports.push(p.1);
        }
        // RFC 6056 § 3.3.1: not one after the other. Sequential allocation would give 999
        // steps of +1; a uniform choice about none.
        let sequential = ports.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(sequential < 10, "{sequential} of 999 allocations took the next port");
        let other: Vec<u16> = {
            let mut s = SnatPorts::new(0, 1, 1024, 65535);
            s.reseed(43);
            let mut used = Replies::new();
            (0..1000).map(|_| take(&mut s, &mut used, e, &SNAT[..1]).unwrap().1).collect()
        };
        assert_ne!(ports, other, "another seed, another sequence");
    }

    /// Nearly full, the search is bounded (Linux's bound) and still finds the free ports
    /// with high probability; full, it gives up after [`MAX_ATTEMPTS`] per address.
    #[test]
    fn the_search_is_bounded_and_finds_ports_until_nearly_full() {
        let e = v4(11, 8080);
        let mut s = SnatPorts::new(0, 1, 1024, 65535);
        s.reseed(1);
        let mut used = Replies::new();
        // 95 % of the 64 512 ports taken.
        for _ in 0..64_512 * 95 / 100 {
            take(&mut s, &mut used, e, &SNAT[..1]).expect("a free port below 95 %");
        }
        // The rest fill until a search fails; most of them are found.
        let mut more = 0;
        while take(&mut s, &mut used, e, &SNAT[..1]).is_some() {
            more += 1;
        }
        // A search fails with probability occupancy^240: 0.97^240 ≈ 7·10⁻⁴ a search, so the
        // first failure comes at about 98 % (here, at 97.9 %).
        assert!(more > 64_512 * 2 / 100, "only {more} more ports found above 95 %");
        let mut calls = 0;
        assert_eq!(
            s.alloc(e, &SNAT[..1], |a, p| {
                calls += 1;
                !used.contains(&(e, a.into(), p))
            }),
            None
        );
        assert_eq!(calls, MAX_ATTEMPTS, "failing costs at most MAX_ATTEMPTS lookups");
        // Another endpoint is not affected.
        assert!(take(&mut s, &mut used, v4(12, 8080), &SNAT[..1]).is_some());
    }

    /// The ports of `worker` of `workers` over `3000..=3000 + span`, under the modulo rule
    /// or steered ([`XorSteering`]), reseeded with `seed`: the property tests' allocator.
    fn ports_of(worker: usize, workers: usize, steered: bool, span: u16, seed: u64) -> SnatPorts {
        let (min, max) = (3000u16, 3000 + span);
        let mut s = if steered {
            SnatPorts::steered(worker, min, max, Arc::new(XorSteering { workers, range: (min, max), ipv6: true }))
        } else {
            SnatPorts::new(worker, workers, min, max)
        };
        s.reseed(seed);
        s
    }

    proptest! {
        /// The pipeline's shortcut (`pipeline::flow::snat_port`): the first candidate
        /// ([`SnatPorts::first_candidate`]) taken when free ([`SnatPorts::take_first`]),
        /// else [`SnatPorts::alloc_indexed`], chooses what `alloc_indexed` alone chooses,
        /// search after search (the next draws included), under either rule, with ports
        /// taken and freed so that first candidates are often in use.
        #[test]
        fn the_first_candidate_taken_when_free_is_alloc_indexeds_choice(
            workers in 1usize..4,
            worker_pick in 0usize..4,
            steered in any::<bool>(),
            addresses in 0usize..3,
            seed in any::<u64>(),
            ops in proptest::collection::vec((0u8..4, any::<bool>(), any::<u16>()), 1..300),
        ) {
            let worker = worker_pick % workers;
            let (mut shortcut, mut plain) =
                (ports_of(worker, workers, steered, 40, seed), ports_of(worker, workers, steered, 40, seed));
            let endpoints = [v4(11, 80), v4(12, 80), v4(11, 81), v4(13, 443)];
            let snat = &SNAT[..addresses];
            let mut live: Vec<(SocketAddr, IpAddr, u16)> = Vec::new();
            for (e, end_one, pick) in ops {
                let e = endpoints[usize::from(e)];
                if end_one && !live.is_empty() {
                    live.swap_remove(usize::from(pick) % live.len());
                    continue;
                }
                let used: Replies = live.iter().copied().collect();
                let free = |a: Ipv4Addr, p: u16| !used.contains(&(e, a.into(), p));
                let first = shortcut.first_candidate(snat.len()).filter(|&(i, p)| free(snat[i], p));
                let got = match first {
                    Some(found) => {
                        shortcut.take_first();
                        Some(found)
                    }
                    None => shortcut.alloc_indexed(e, snat, free),
                };
                let want = plain.alloc_indexed(e, snat, free);
                prop_assert_eq!(got, want);
                if let Some((i, p)) = want {
                    live.push((e, snat[i].into(), p));
                }
            }
        }

        /// Whatever the sequence of new flows and of flows ending: no two live flows share
        /// a reply tuple, every port obeys its worker's rule (modulo or steered), and with
        /// a range small enough to be searched whole an
        /// allocation fails only when every port the worker may use for that endpoint and
        /// address is taken.
        #[test]
        fn reply_tuples_stay_unique_and_ports_stay_with_their_worker(
            workers in 1usize..4,
            worker_pick in 0usize..4,
            steered in any::<bool>(),
            addresses in 1usize..3,
            seed in any::<u64>(),
            ops in proptest::collection::vec((0u8..4, any::<bool>(), any::<u16>()), 1..400),
        ) {
            let worker = worker_pick % workers;
            let (min, max) = (3000u16, 3000 + 60);
            let mut s = ports_of(worker, workers, steered, 60, seed);
            let endpoints = [v4(11, 80), v4(12, 80), v4(11, 81), v4(13, 443)];
            let mut live: Vec<(SocketAddr, IpAddr, u16)> = Vec::new();
            for (e, end_one, pick) in ops {
                let e = endpoints[usize::from(e)];
                if end_one && !live.is_empty() {
                    live.swap_remove(usize::from(pick) % live.len());
                    continue;
                }
                let used: Replies = live.iter().copied().collect();
                match s.alloc(e, &SNAT[..addresses], |a, p| !used.contains(&(e, a.into(), p))) {
                    Some((a, p)) => {
                        prop_assert!(!used.contains(&(e, a.into(), p)), "reply tuple {e} → {a}:{p} in use");
                        prop_assert!((min..=max).contains(&p));
                        if steered {
                            prop_assert_eq!(usize::from(p ^ e.port()) % workers, worker);
                        } else {
                            prop_assert_eq!(crate::io::fanout::owner_of_port(p, workers), worker);
                        }
                        live.push((e, a.into(), p));
                    }
                    None => {
                        for a in &SNAT[..addresses] {
                            for p in min..=max {
                                let mine = if steered {
                                    usize::from(p ^ e.port()) % workers == worker
                                } else {
                                    crate::io::fanout::owner_of_port(p, workers) == worker
                                };
                                prop_assert!(!mine || used.contains(&(e, IpAddr::V4(*a), p)),
                                    "{e}: {a}:{p} was free but not found");
                            }
                        }
                    }
                }
            }
        }
    }
}
