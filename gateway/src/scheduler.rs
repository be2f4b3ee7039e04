//! Endpoint schedulers: how a new flow's endpoint is chosen among its Service port's ready
//! endpoints, with the names and meanings of Linux IPVS's schedulers, which kube-proxy's
//! IPVS mode offers (`--ipvs-scheduler`), and iptables mode's random choice.
//!
//! # Contract
//!
//! The choice functions here are pure: they take the endpoints' count, their loads or a hash
//! input, and return a position among the endpoints (`0..n`) or `None` when no endpoint may
//! take the flow. They follow the IPVS definitions in `net/netfilter/ipvs/` (cited per
//! function) and the ipvsadm(8) manual: what each counts, and that ties go to the first
//! endpoint in list order (here: table order, sorted by address and port). Weights are
//! those of the caller; torii's table carries none, so the pipeline passes 1 for every
//! endpoint, and `wrr`, `wlc` then choose as `rr`, `lc`.
//!
//! [`Connections`] holds the per-endpoint connection counts `lc`, `wlc`, `sed` and `nq`
//! read, shared by every worker: an endpoint's count changes when a flow to it is created,
//! when its TCP state moves to or from ESTABLISHED, and when it is removed or expires — never
//! on a packet that changes nothing. [`Turns`] holds the round-robin positions, one per
//! Service port, shared too. Neither is touched on the packet path of the other schedulers.
//! The pipeline (`pipeline::backend`) applies the choice to new flows only, below
//! `sessionAffinity: ClientIP`.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;
use serde::Deserialize;

/// A gateway-wide endpoint scheduler (`scheduler` in the gateway's configuration), named as
/// ipvsadm(8) names IPVS's (`--scheduler`), plus iptables mode's `random`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// `rr`, round robin (`ip_vs_rr.c`): the endpoints in turn, per Service port.
    Rr,
    /// `wrr`, weighted round robin (`ip_vs_wrr.c`): in turn, each endpoint as often as its
    /// weight, interleaved.
    Wrr,
    /// `lc`, least connections (`ip_vs_lc.c`): the endpoint with the least overhead
    /// `(active << 8) + inactive`.
    Lc,
    /// `wlc`, weighted least connections (`ip_vs_wlc.c`): the least overhead per weight.
    Wlc,
    /// `dh`, destination hashing (`ip_vs_dh.c`): a 256-bucket table by the flow's
    /// destination address (the front door's).
    Dh,
    /// `sh`, source hashing (`ip_vs_sh.c`): a 256-bucket table by the client's address.
    Sh,
    /// `sed`, shortest expected delay (`ip_vs_sed.c`): the least `(active + 1) / weight`.
    Sed,
    /// `nq`, never queue (`ip_vs_nq.c`): an endpoint without active connections if there
    /// is one, else as `sed`.
    Nq,
    /// `maglev` (alias `mh`, `ip_vs_mh.c`): torii's Maglev ring, by the flow's 5-tuple hash
    /// (by the client's address with `sessionAffinity: ClientIP`). The default.
    #[default]
    #[serde(alias = "mh")]
    Maglev,
    /// `random`: uniformly at random, as kube-proxy's iptables mode does (`-m statistic
    /// --mode random`).
    Random,
}

impl Scheduler {
    /// Every scheduler, in the order the documentation lists them.
    pub const ALL: [Scheduler; 10] = [
        Scheduler::Rr,
        Scheduler::Wrr,
        Scheduler::Lc,
        Scheduler::Wlc,
        Scheduler::Dh,
        Scheduler::Sh,
        Scheduler::Sed,
        Scheduler::Nq,
        Scheduler::Maglev,
        Scheduler::Random,
    ];

    /// The configuration's name (ipvsadm's, `"maglev"` for the ring).
    pub const fn name(self) -> &'static str {
        match self {
            Scheduler::Rr => "rr",
            Scheduler::Wrr => "wrr",
            Scheduler::Lc => "lc",
            Scheduler::Wlc => "wlc",
            Scheduler::Dh => "dh",
            Scheduler::Sh => "sh",
            Scheduler::Sed => "sed",
            Scheduler::Nq => "nq",
            Scheduler::Maglev => "maglev",
            Scheduler::Random => "random",
        }
    }

    /// Whether the scheduler reads per-endpoint connection counts ([`Connections`]), which
    /// the pipeline then keeps: `lc`, `wlc`, `sed`, `nq`.
    pub const fn counts_connections(self) -> bool {
        matches!(self, Scheduler::Lc | Scheduler::Wlc | Scheduler::Sed | Scheduler::Nq)
    }

    /// Whether every gateway (and every worker) given the same table picks the same endpoint
    /// for the same flow: the hashing schedulers (`maglev`, `dh`, `sh`). The others depend
    /// on what this gateway saw before (turns, connection counts) or on chance.
    pub const fn is_consistent(self) -> bool {
        matches!(self, Scheduler::Maglev | Scheduler::Dh | Scheduler::Sh)
    }
}

impl std::fmt::Display for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

// ---- the choices (pure) ----

/// An endpoint's load as the connection-counting schedulers read it (IPVS's
/// `dest->activeconns`, `dest->inactconns`, `dest->weight`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Connections in TCP ESTABLISHED (SCTP: answered and open).
    pub active: u32,
    /// Every other tracked connection: TCP opening or closing, UDP.
    pub inactive: u32,
    /// The endpoint's weight; 0 takes no new connection.
    pub weight: u32,
}

/// `lc` (`ip_vs_lc.c`, `ip_vs_dest_conn_overhead` in `ip_vs.h`): among endpoints of
/// non-zero weight, the first with the least overhead `(active << 8) + inactive` ("active
/// connections are 256 times as costly as inactive ones"; weights are otherwise ignored).
/// `load(i)` is endpoint `i`'s load, `i` in `0..n`. O(n).
pub fn least_connections(n: usize, load: impl Fn(usize) -> Load) -> Option<usize> {
    let mut least: Option<(usize, u64)> = None;
    for i in 0..n {
        let l = load(i);
        if l.weight == 0 {
            continue;
        }
        let overhead = overhead(l);
        if least.is_none_or(|(_, loh)| overhead < loh) {
            least = Some((i, overhead));
        }
    }
    least.map(|(i, _)| i)
}

/// IPVS's connection overhead of an endpoint: `(activeconns << 8) + inactconns`.
#[inline]
pub fn overhead(l: Load) -> u64 {
    (u64::from(l.active) << 8) + u64::from(l.inactive)
}

/// `wlc` (`ip_vs_wlc.c`): the first endpoint of non-zero weight whose overhead
/// `(active << 8) + inactive` over its weight is least, compared without division as IPVS
/// does (`loh * w(dest) > doh * w(least)` replaces the candidate). O(n).
pub fn weighted_least_connections(n: usize, load: impl Fn(usize) -> Load) -> Option<usize> {
    least_by_ratio(n, load, overhead, |_| false)
}

/// `sed` (`ip_vs_sed.c`): the first endpoint of non-zero weight with the least expected
/// delay `(active + 1) / weight` (inactive connections are not counted). O(n).
pub fn shortest_expected_delay(n: usize, load: impl Fn(usize) -> Load) -> Option<usize> {
    least_by_ratio(n, load, sed_overhead, |_| false)
}

/// `nq` (`ip_vs_nq.c`): the first endpoint of non-zero weight without active connections
/// ("never queue": an idle server is chosen at once), else as [`shortest_expected_delay`].
pub fn never_queue(n: usize, load: impl Fn(usize) -> Load) -> Option<usize> {
    least_by_ratio(n, load, sed_overhead, |l| l.active == 0)
}

/// `sed`'s and `nq`'s overhead: `activeconns + 1`.
#[inline]
fn sed_overhead(l: Load) -> u64 {
    u64::from(l.active) + 1
}

/// The scan `wlc`, `sed` and `nq` share: endpoints of weight 0 are skipped; the first for
/// which `take_now` holds is chosen at once; otherwise a later endpoint replaces the
/// candidate only when strictly better: `cost(least) * w(dest) > cost(dest) * w(least)`.
fn least_by_ratio(
    n: usize,
    load: impl Fn(usize) -> Load,
    cost: impl Fn(Load) -> u64,
    take_now: impl Fn(Load) -> bool,
) -> Option<usize> {
    let mut least: Option<(usize, u64, u64)> = None;
    for i in 0..n {
        let l = load(i);
        if l.weight == 0 {
            continue;
        }
        if take_now(l) {
            return Some(i);
        }
        let (doh, dw) = (cost(l), u64::from(l.weight));
        let better = match least {
            None => true,
            // 40-bit overheads times 32-bit weights: no overflow in u128.
            Some((_, loh, lw)) => u128::from(loh) * u128::from(dw) > u128::from(doh) * u128::from(lw),
        };
        if better {
            least = Some((i, doh, dw));
        }
    }
    least.map(|(i, _, _)| i)
}

/// `rr` (`ip_vs_rr.c`): the `turn`-th choice of a round robin over `n` endpoints of equal,
/// non-zero weight, starting at the first: `turn % n`. (IPVS skips endpoints of weight 0;
/// the table has none.)
#[inline]
pub fn round_robin(n: usize, turn: u32) -> Option<usize> {
    (n != 0).then(|| turn as usize % n)
}

/// `wrr` (`ip_vs_wrr.c`): the `turn`-th choice (0-based) of IPVS's interleaved weighted round
/// robin over endpoints of weights `weight(0..n)`: rounds with a current weight `cw` going
/// down from the largest weight by the weights' greatest common divisor, each round taking,
/// in list order, the endpoints whose weight is at least `cw`. Endpoints of weight 0 are
/// never chosen; `None` when all weigh 0. Equal weights give [`round_robin`]. O(n · rounds).
pub fn weighted_round_robin(n: usize, weight: impl Fn(usize) -> u32, turn: u32) -> Option<usize> {
    let (mut max, mut gcd, mut sum) = (0u32, 0u32, 0u64);
    for i in 0..n {
        let w = weight(i);
        if w > 0 {
            max = max.max(w);
            gcd = if gcd == 0 { w } else { gcd_of(gcd, w) };
            sum += u64::from(w);
        }
    }
    if max == 0 {
        return None;
    }
    // Each endpoint appears w/gcd times in a period.
    let mut t = u64::from(turn) % (sum / u64::from(gcd));
    let mut cw = max;
    loop {
        for i in 0..n {
            if weight(i) >= cw {
                if t == 0 {
                    return Some(i);
                }
                t -= 1;
            }
        }
        cw -= gcd;
    }
}

fn gcd_of(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Buckets of the `dh` and `sh` hash tables (`IP_VS_DH_TAB_SIZE`, `IP_VS_SH_TAB_SIZE`: 2^8).
pub const HASH_BUCKETS: usize = 256;

/// An address folded to 32 bits as IPVS's `dh` and `sh` hash it: IPv4 as a host-order
/// number; IPv6 the exclusive or of its four 32-bit words.
#[inline]
fn fold(addr: IpAddr) -> u32 {
    match addr {
        IpAddr::V4(a) => u32::from(a),
        IpAddr::V6(a) => {
            let w = a.octets();
            (0..4).fold(0, |x, i| x ^ u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]))
        }
    }
}

/// `dh`'s bucket of destination address `dst` (`ip_vs_dh_hashkey`): the folded address
/// times 2654435761 (Knuth's multiplicative constant), modulo 256.
#[inline]
pub fn dh_bucket(dst: IpAddr) -> usize {
    (fold(dst).wrapping_mul(2_654_435_761) as usize) % HASH_BUCKETS
}

/// `sh`'s bucket of source address `src` (`ip_vs_sh_hashkey`, without the `sh-port` flag, so
/// the port counts as 0): `hash_32(folded address, 8)` — the top 8 bits of the product with
/// the 32-bit golden ratio `0x61C88647` (`include/linux/hash.h`).
#[inline]
pub fn sh_bucket(src: IpAddr) -> usize {
    (fold(src).wrapping_mul(0x61C8_8647) >> 24) as usize
}

/// The endpoint `dh`'s table names in `bucket` (`ip_vs_dh_reassign`): the buckets are dealt
/// to the `n` endpoints in list order, one each, round and round — bucket `b` to endpoint
/// `b % n` whatever the weights; an endpoint of weight 0 takes nothing (IPVS then has no
/// endpoint for the flow). O(1).
#[inline]
pub fn dh_position(n: usize, bucket: usize, weight: impl Fn(usize) -> u32) -> Option<usize> {
    (n != 0).then(|| bucket % n).filter(|&i| weight(i) > 0)
}

/// The endpoint `sh`'s table names in `bucket` (`ip_vs_sh_reassign`): the buckets are dealt
/// in list order, each endpoint taking as many consecutive buckets as its weight (at least
/// one), round and round; an endpoint of weight 0 takes nothing (IPVS without `sh-fallback`
/// has no endpoint for the flow). O(1) for equal weights, O(n) otherwise.
pub fn sh_position(n: usize, bucket: usize, weight: impl Fn(usize) -> u32) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let share = |i| u64::from(weight(i).max(1));
    let total: u64 = (0..n).map(share).sum();
    let mut b = bucket as u64 % total;
    let i = (0..n).find(|&i| {
        let s = share(i);
        if b < s {
            true
        } else {
            b -= s;
            false
        }
    })?;
    (weight(i) > 0).then_some(i)
}

// ---- the shared state ----

/// Slots of [`Connections`]: endpoints whose counts are kept at once (those with tracked
/// flows; an endpoint at zero gives its slot up when another needs it).
pub const CONNECTION_SLOTS: usize = SHARDS * SLOTS_PER_SHARD;
const SHARDS: usize = 64;
const SLOTS_PER_SHARD: usize = 1024;
/// Slots an endpoint may take from its home slot on (within its shard).
const WINDOW: usize = 16;
/// A slot never used.
const EMPTY: u64 = 0;

/// Which endpoint a count is for: protocol, address (16-byte form, IPv4-mapped) and port —
/// what a flow record holds in its reply tuple's source, so a flow's count is found again
/// when it ends (IPVS counts per virtual service and real server; torii per endpoint, over
/// all the Service ports and front doors that reach it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// IANA protocol number.
    pub protocol: u8,
    /// Address, 16-byte form.
    pub addr: [u8; 16],
    /// Port.
    pub port: u16,
}

impl Endpoint {
    /// The 64-bit fingerprint under which the endpoint's count is kept (xxh3 of its fields;
    /// never [`EMPTY`]). Two endpoints with one fingerprint would share a count: about one
    /// chance in 10^10 among 10^5 endpoints.
    #[inline]
    fn fingerprint(&self) -> u64 {
        let mut b = [0u8; 19];
        b[0] = self.protocol;
        b[1..17].copy_from_slice(&self.addr);
        b[17..].copy_from_slice(&self.port.to_be_bytes());
        xxhash_rust::xxh3::xxh3_64(&b).max(EMPTY + 1)
    }
}

/// `(active << 32) | inactive` in one word, so one atomic operation moves a connection from
/// one count to the other.
const ACTIVE: u64 = 1 << 32;
const INACTIVE: u64 = 1;

#[derive(Debug, Default)]
struct Slot {
    /// The endpoint's fingerprint, or [`EMPTY`].
    key: AtomicU64,
    /// `(active << 32) | inactive`.
    conns: AtomicU64,
}

/// Per-endpoint connection counts shared by all workers (IPVS's `activeconns` and
/// `inactconns`), read by `lc`, `wlc`, `sed` and `nq` when they choose.
///
/// A fixed table of [`CONNECTION_SLOTS`] slots in 64 shards, allocated once. Reading a count
/// takes no lock (a probe of at most 16 slots). A flow's creation ([`Connections::opened`])
/// takes its endpoint's shard lock, as it may claim a slot: the endpoint's own, else the
/// first never used or at zero within 16 slots of its home. The other changes —
/// [`Connections::established`], [`Connections::closed`] — are one atomic operation on the
/// slot of an endpoint that holds at least that flow's count, which no claim takes away.
/// When 16 slots near an endpoint's home all hold live counts of other endpoints, its
/// flows are not counted (it reads as idle); with 65 536 slots that needs tens of
/// thousands of endpoints with connections.
pub struct Connections {
    slots: Box<[Slot]>,
    locks: Box<[CachePadded<Mutex<()>>]>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections").field("slots", &self.slots.len()).finish()
    }
}

impl Default for Connections {
    fn default() -> Self {
        Self::new()
    }
}

impl Connections {
    /// An empty table of [`CONNECTION_SLOTS`] slots (1 MiB).
    pub fn new() -> Self {
        Self {
            slots: (0..CONNECTION_SLOTS).map(|_| Slot::default()).collect(),
            locks: (0..SHARDS).map(|_| CachePadded::new(Mutex::new(()))).collect(),
        }
    }

    /// The slots `fingerprint` may occupy, in probe order: its shard and home slot from the
    /// fingerprint's low and next bits, [`WINDOW`] slots on, wrapping within the shard.
    #[inline]
    fn window(fingerprint: u64) -> (usize, impl Iterator<Item = usize>) {
        let shard = fingerprint as usize % SHARDS;
        let home = (fingerprint >> 6) as usize % SLOTS_PER_SHARD;
        (shard, (0..WINDOW).map(move |k| shard * SLOTS_PER_SHARD + (home + k) % SLOTS_PER_SHARD))
    }

    /// The slot holding `fingerprint`, if any. Lock-free.
    #[inline]
    fn find(&self, fingerprint: u64) -> Option<&Slot> {
        for i in Self::window(fingerprint).1 {
            let slot = &self.slots[i];
            match slot.key.load(Ordering::Acquire) {
                k if k == fingerprint => return Some(slot),
                EMPTY => return None,
                _ => {}
            }
        }
        None
    }

    /// `endpoint`'s active and inactive connections (weight 1). Lock-free.
    #[inline]
    pub fn load(&self, endpoint: &Endpoint) -> Load {
        let c = self.find(endpoint.fingerprint()).map_or(0, |s| s.conns.load(Ordering::Relaxed));
        Load { active: (c >> 32) as u32, inactive: c as u32, weight: 1 }
    }

    /// Counts a new flow to `endpoint` (inactive: IPVS counts a connection active from TCP
    /// ESTABLISHED on). Returns false when no slot was free (the flow is not counted).
    pub fn opened(&self, endpoint: &Endpoint) -> bool {
        let fp = endpoint.fingerprint();
        let (shard, window) = Self::window(fp);
        let _claims = self.locks[shard].lock().unwrap_or_else(|e| e.into_inner());
        // Under the shard lock no other claim runs: the endpoint's slot, if any, is in the
        // window; else the first slot never used or at zero (claimed: its count is 0, so no
        // flow can change it meanwhile, and readers of its old key stop matching).
        let mut free = None;
        for i in window {
            let slot = &self.slots[i];
            let key = slot.key.load(Ordering::Acquire);
            if key == fp {
                slot.conns.fetch_add(INACTIVE, Ordering::AcqRel);
                return true;
            }
            if free.is_none() && (key == EMPTY || slot.conns.load(Ordering::Acquire) == 0) {
                free = Some(slot);
            }
            if key == EMPTY {
                break;
            }
        }
        let Some(slot) = free else { return false };
        slot.key.store(fp, Ordering::Release);
        slot.conns.fetch_add(INACTIVE, Ordering::AcqRel);
        true
    }

    /// Moves one connection of `endpoint` from inactive to active (`up`: its TCP state
    /// became ESTABLISHED) or back (it left ESTABLISHED), as IPVS's `set_tcp_state` does.
    /// Nothing when the endpoint has no count to move. Lock-free.
    pub fn established(&self, endpoint: &Endpoint, up: bool) {
        let (from, to) = if up { (INACTIVE, ACTIVE) } else { (ACTIVE, INACTIVE) };
        if let Some(slot) = self.find(endpoint.fingerprint()) {
            let _ =
                slot.conns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| has(c, from).then(|| c - from + to));
        }
    }

    /// Uncounts a flow of `endpoint` that ends, `active` or not. Nothing when there is no
    /// such count (a flow that was not counted). Lock-free.
    pub fn closed(&self, endpoint: &Endpoint, active: bool) {
        let one = if active { ACTIVE } else { INACTIVE };
        if let Some(slot) = self.find(endpoint.fingerprint()) {
            let _ = slot.conns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| has(c, one).then(|| c - one));
        }
    }
}

/// Whether the packed counts `c` hold at least one of `one` (`ACTIVE` or `INACTIVE`).
#[inline]
fn has(c: u64, one: u64) -> bool {
    if one == ACTIVE {
        c >> 32 != 0
    } else {
        c as u32 != 0
    }
}

/// Round-robin turns per Service port, shared by all workers (IPVS keeps one position per
/// virtual service): one counter per table service index, modulo 65 536 (services beyond
/// share turns, and a table change may hand a service another's: round robin then starts
/// elsewhere, which it may).
pub struct Turns {
    turns: Box<[AtomicU32]>,
}

/// Counters of [`Turns`].
const TURNS: usize = 1 << 16;

impl std::fmt::Debug for Turns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turns").field("turns", &self.turns.len()).finish()
    }
}

impl Default for Turns {
    fn default() -> Self {
        Self { turns: (0..TURNS).map(|_| AtomicU32::new(0)).collect() }
    }
}

impl Turns {
    /// The turn of service `service` (its index in the table) for this choice, counting up
    /// from 0 (wrapping at 2^32).
    #[inline]
    pub fn next(&self, service: u32) -> u32 {
        self.turns[service as usize % TURNS].fetch_add(1, Ordering::Relaxed)
    }
}

/// The state the schedulers share across workers: connection counts and round-robin turns.
#[derive(Debug, Default)]
pub struct Schedulers {
    /// Per-endpoint connection counts (`lc`, `wlc`, `sed`, `nq`).
    pub connections: Connections,
    /// Per-service turns (`rr`, `wrr`).
    pub turns: Turns,
}

#[cfg(test)]
mod tests;
