//! Per-worker connection tracking for full NAT: a fixed-capacity flow table in which every
//! flow is found in O(1) from either of its two tuples, with idle expiry in bounded work.
//!
//! # Contract
//!
//! - A [`Flow`] has two tuples: [`Flow::original`] (client → VIP:port, as received) and
//!   [`Flow::reply`] (endpoint:targetPort → SNAT address:port, as it will be received).
//!   [`Conntrack::insert`] indexes both; [`Conntrack::lookup`] finds the one shared record
//!   from either and says which [`Direction`] matched; [`Conntrack::remove`] unindexes both.
//! - Capacity is fixed by [`Conntrack::new`], which allocates and touches all memory; after
//!   it returns nothing allocates, reallocates or frees: the record slab, the occupancy
//!   bitmap and the index are boxed slices, which cannot grow. A full table refuses new
//!   flows with [`InsertError::Full`] (the pipeline then falls back to the stateless Maglev
//!   choice, see DESIGN.md "Failure semantics").
//! - Nothing here reads a clock. Every flow carries a deadline in the caller's monotonic
//!   nanoseconds; [`Conntrack::expire`] reaps flows whose deadline has passed, examining at
//!   most `budget` records per call from a rotating cursor, so a sweep of the whole table is
//!   spread over `capacity / budget` calls and no call ever scans everything.
//! - A lookup does **not** check the deadline: a flow that is expired but not yet reaped is
//!   still returned, and the pipeline decides (refresh it, or treat the packet as a new flow
//!   after [`Conntrack::remove`]). This keeps `lookup` free of the clock and keeps one policy
//!   for "expired" in one place.
//! - [`FlowId`]s are slab indices and are reused after a flow is removed or expired. An id is
//!   valid from the `insert` that returned it until the `remove`/`expire` that frees it; the
//!   pipeline must not keep ids across bursts in which it expires flows.
//!
//! # Layout
//!
//! ```text
//!  flows: [Flow; capacity]        56 B per flow: both tuples, NAT state, deadline
//!  live:  [u64; ⌈capacity / 64⌉]  1 bit per flow: record in use
//!  index: [u64; ⌈8·capacity/3⌉]   one slot per tuple (2 per flow), load ≤ 3/4 at capacity
//!          slot = tag (id << 1 | direction) | 24-bit fingerprint | 8-bit displacement
//! ```
//!
//! Keys are hashed with XXH3-64 under the per-table seed given to [`Conntrack::new`], so a
//! remote sender cannot precompute tuples that collide in a given worker's table. The index
//! is linear-probing open addressing with backward-shift deletion (no tombstones, so probe
//! runs do not degrade with churn); the 24-bit fingerprint means a probe touches a flow
//! record only on a (almost certain) match. Free records are chained through their own
//! storage, so the free list costs no memory.
//!
//! Memory per flow at capacity: 56 B record + 8 · 8/3 ≈ 21.3 B of index + 1 bit ≈ 77.5 B
//! ([`Conntrack::memory_bytes`] gives the exact figure). The index slot is already 8 bytes
//! for both directions together with the flow id; reaching 64 B per IPv4 flow is a matter of
//! a denser record (the reply tuple's protocol duplicates the original's, its destination is
//! the worker's SNAT address, and deadlines fit 32 bits at a coarser unit), not of a
//! different index.
//!
//! Expected cost at load ≤ 3/4 (Knuth, TAOCP vol. 3, § 6.4): a hit probes ≈ 2.5 slots, a
//! miss ≈ 8.5 slots (about two cache lines of index), one record read per hit.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use torii_gateway::conntrack::{Conntrack, Direction, Flow, FlowKey};
//!
//! let mut ct = Conntrack::new(1024, 0x5eed);
//! let original = FlowKey {
//!     protocol: 6,
//!     src_addr: Ipv4Addr::new(198, 51, 100, 7),
//!     src_port: 40000,
//!     dst_addr: Ipv4Addr::new(203, 0, 113, 10),
//!     dst_port: 443,
//! };
//! let reply = FlowKey {
//!     protocol: 6,
//!     src_addr: Ipv4Addr::new(10, 1, 2, 3),
//!     src_port: 8443,
//!     dst_addr: Ipv4Addr::new(192, 0, 2, 1),
//!     dst_port: 61000,
//! };
//! let flow = Flow {
//!     original,
//!     reply,
//!     client_mac: [2, 0, 0, 0, 0, 1],
//!     ingress_iface: 0,
//!     service: 7,
//!     tcp_state: 0,
//!     seen_reply: false,
//!     table_generation: 0,
//!     deadline: 30_000_000_000,
//! };
//! let id = ct.insert(flow).unwrap();
//! assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
//! assert_eq!(ct.expire(30_000_000_000, 64, |f| assert_eq!(f.service, 7)), 1);
//! assert_eq!(ct.lookup(&original), None);
//! ```

mod index;
#[cfg(test)]
mod tests;

use std::fmt;
use std::mem::size_of;
use std::net::Ipv4Addr;

use index::{Index, Probe};

/// Identifier of a flow record: its index in the table's slab, `0..capacity`. Reused after
/// the flow is removed (see the module documentation).
pub type FlowId = u32;

/// Largest capacity [`Conntrack::new`] accepts: 2^30 flows (≈ 77 GiB). Flow ids and the
/// direction bit share 31 bits of an index slot.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Index slots per flow at capacity, as a fraction: 2 tuples / load factor 3/4 = 8/3.
const INDEX_SLOTS_PER_FLOW: (usize, usize) = (8, 3);

/// Chains free records through [`Flow::service`]; `NO_FREE` ends the chain.
const NO_FREE: u32 = u32::MAX;

/// One direction of a flow as it appears on the wire: IP protocol number (IANA "Assigned
/// Internet Protocol Numbers": 6 TCP, 17 UDP, 132 SCTP, 1 ICMP), addresses, and transport
/// ports (host byte order; for ICMP echo, the identifier in one port and 0 in the other).
/// 14 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// IP protocol number (IPv4 header "Protocol", [RFC 791 § 3.1]).
    ///
    /// [RFC 791 § 3.1]: https://www.rfc-editor.org/rfc/rfc791#section-3.1
    pub protocol: u8,
    /// IPv4 source address.
    pub src_addr: Ipv4Addr,
    /// Transport source port, host byte order.
    pub src_port: u16,
    /// IPv4 destination address.
    pub dst_addr: Ipv4Addr,
    /// Transport destination port, host byte order.
    pub dst_port: u16,
}

impl FlowKey {
    /// The same tuple seen from the other end: source and destination (address and port)
    /// swapped, protocol kept. For a full-NAT flow, `flow.reply.reversed()` is the tuple the
    /// gateway sends towards the endpoint.
    #[must_use]
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            protocol: self.protocol,
            src_addr: self.dst_addr,
            src_port: self.dst_port,
            dst_addr: self.src_addr,
            dst_port: self.src_port,
        }
    }

    /// The key's bytes in a fixed order (protocol, source address, source port, destination
    /// address, destination port; ports big-endian), the input of the table hash.
    #[inline]
    fn hash_input(&self) -> [u8; 13] {
        let s = self.src_addr.octets();
        let d = self.dst_addr.octets();
        let sp = self.src_port.to_be_bytes();
        let dp = self.dst_port.to_be_bytes();
        [self.protocol, s[0], s[1], s[2], s[3], sp[0], sp[1], d[0], d[1], d[2], d[3], dp[0], dp[1]]
    }
}

/// Which tuple of a flow a lookup matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// [`Flow::original`]: client → VIP; translate with DNAT + SNAT.
    Original,
    /// [`Flow::reply`]: endpoint → SNAT address; translate back towards the client.
    Reply,
}

/// One tracked full-NAT flow. 56 bytes.
///
/// The keys are fixed once inserted (the index is derived from them); the pipeline may
/// update [`deadline`](Flow::deadline), [`tcp_state`](Flow::tcp_state) and
/// [`seen_reply`](Flow::seen_reply) through [`Conntrack::get_mut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// Client → VIP:port, as received.
    pub original: FlowKey,
    /// Endpoint:targetPort → SNAT address:port, as the reply will be received. The endpoint
    /// is stored here by address and port, not by table index, so the flow survives table
    /// changes (DESIGN.md "The table and how it is published").
    pub reply: FlowKey,
    /// Ethernet source address of the original direction: where replies are sent.
    pub client_mac: [u8; 6],
    /// Index of the interface the original direction arrived on.
    pub ingress_iface: u8,
    /// Table service id, informational (counters, logs).
    pub service: u32,
    /// The pipeline's TCP tracking state; opaque to conntrack.
    pub tcp_state: u8,
    /// Set by the pipeline once the reply direction has been seen.
    pub seen_reply: bool,
    /// Low 32 bits of the table generation against which the pipeline last checked that
    /// this flow's endpoint is still an endpoint of its front door; opaque to conntrack.
    pub table_generation: u32,
    /// Idle deadline, nanoseconds of the caller's monotonic clock: the flow is expired when
    /// `now >= deadline`.
    pub deadline: u64,
}

const UNSPECIFIED_KEY: FlowKey =
    FlowKey { protocol: 0, src_addr: Ipv4Addr::UNSPECIFIED, src_port: 0, dst_addr: Ipv4Addr::UNSPECIFIED, dst_port: 0 };

/// Contents of a record that was never used.
const VACANT_FLOW: Flow = Flow {
    original: UNSPECIFIED_KEY,
    reply: UNSPECIFIED_KEY,
    client_mac: [0; 6],
    ingress_iface: 0,
    service: NO_FREE,
    tcp_state: 0,
    seen_reply: false,
    table_generation: 0,
    deadline: 0,
};

const _: () = assert!(size_of::<FlowKey>() == 14);
const _: () = assert!(size_of::<Flow>() == 56);
const _: () = assert!(size_of::<Flow>() <= 64, "one flow record per cache line");
const _: () = assert!(MAX_CAPACITY <= 1 << 30, "flow id << 1 | direction must fit 31 bits");
const _: () = assert!(
    (MAX_CAPACITY as u64 * INDEX_SLOTS_PER_FLOW.0 as u64).div_ceil(INDEX_SLOTS_PER_FLOW.1 as u64) <= 1 << 32,
    "fast range reduction takes 32 hash bits"
);
const _: () = assert!(INDEX_SLOTS_PER_FLOW.0 > 2 * INDEX_SLOTS_PER_FLOW.1, "the index always keeps an empty slot");

/// Why [`Conntrack::insert`] refused a flow. In both cases the table is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// Every record is in use ([`Conntrack::len`] == [`Conntrack::capacity`]).
    Full,
    /// The original or the reply tuple is already indexed (or the two are equal).
    Exists,
}

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InsertError::Full => "conntrack table full: expire flows sooner or configure a larger capacity",
            InsertError::Exists => "conntrack already tracks the original or the reply tuple of this flow",
        })
    }
}

impl std::error::Error for InsertError {}

/// A per-worker connection tracking table: see the module documentation. Not shared, not
/// locked; owned by one worker.
pub struct Conntrack {
    /// Flow records; `capacity` long. Free records hold the free-list link in `service`.
    flows: Box<[Flow]>,
    /// Bit `id % 64` of word `id / 64` is set iff record `id` holds a live flow.
    live: Box<[u64]>,
    /// Both tuples of every live flow.
    index: Index,
    /// XXH3 seed for this table.
    seed: u64,
    /// Live flows.
    len: usize,
    /// Head of the chain of freed records, or [`NO_FREE`].
    free_head: u32,
    /// Records `never_used..capacity` have never held a flow (not on the free chain).
    never_used: u32,
    /// Next record [`Conntrack::expire`] examines.
    expire_cursor: usize,
}

impl fmt::Debug for Conntrack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conntrack")
            .field("capacity", &self.capacity())
            .field("len", &self.len)
            .field("index_slots", &self.index.slot_count())
            .field("expire_cursor", &self.expire_cursor)
            .finish_non_exhaustive()
    }
}

#[inline]
fn tag(id: FlowId, direction: Direction) -> u32 {
    (id << 1) | u32::from(direction == Direction::Reply)
}

#[inline]
fn untag(tag: u32) -> (FlowId, Direction) {
    (tag >> 1, if tag & 1 == 0 { Direction::Original } else { Direction::Reply })
}

/// Index size for `capacity` flows: `⌈capacity · 8/3⌉`, at least 1, always more than the
/// `2 · capacity` tuples it can hold.
fn index_slots(capacity: usize) -> usize {
    (capacity * INDEX_SLOTS_PER_FLOW.0).div_ceil(INDEX_SLOTS_PER_FLOW.1).max(1)
}

/// The table hash of a key: XXH3-64 of its [`FlowKey::hash_input`] under the table's seed.
#[inline]
fn hash_with(seed: u64, key: &FlowKey) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(&key.hash_input(), seed)
}

/// The tuple of `flows` a tag refers to.
#[inline]
fn key_of(flows: &[Flow], tag: u32) -> &FlowKey {
    let flow = &flows[(tag >> 1) as usize];
    if tag & 1 == 0 {
        &flow.original
    } else {
        &flow.reply
    }
}

impl Conntrack {
    /// A table for up to `capacity` flows (0..=[`MAX_CAPACITY`]), keys hashed with `seed`
    /// (draw it at random per worker). Allocates and writes all memory now, about 77.5 bytes
    /// per flow (see [`Conntrack::memory_bytes`]): O(capacity) time, never again afterwards.
    ///
    /// A capacity of 0 gives a table that refuses every insert with [`InsertError::Full`].
    ///
    /// # Panics
    ///
    /// If `capacity > MAX_CAPACITY`, or if the allocation fails.
    #[must_use]
    pub fn new(capacity: usize, seed: u64) -> Self {
        assert!(capacity <= MAX_CAPACITY, "conntrack capacity {capacity} exceeds the maximum {MAX_CAPACITY}");
        Self::with_index(capacity, seed, Index::new(index_slots(capacity)))
    }

    fn with_index(capacity: usize, seed: u64, index: Index) -> Self {
        debug_assert!(index.slot_count() > 2 * capacity);
        Self {
            flows: vec![VACANT_FLOW; capacity].into_boxed_slice(),
            live: vec![0; capacity.div_ceil(64)].into_boxed_slice(),
            index,
            seed,
            len: 0,
            free_head: NO_FREE,
            never_used: 0,
            expire_cursor: 0,
        }
    }

    /// Maximum number of flows, fixed at construction.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.flows.len()
    }

    /// Number of live flows (inserted, not yet removed or expired; possibly past their
    /// deadline). O(1).
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no flow is live. O(1).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of heap memory the table holds (records, occupancy bitmap, index), fixed at
    /// construction: about 77.5 × capacity.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.flows.len() * size_of::<Flow>()
            + self.live.len() * size_of::<u64>()
            + self.index.slot_count() * size_of::<u64>()
    }

    #[inline]
    fn hash(&self, key: &FlowKey) -> u64 {
        hash_with(self.seed, key)
    }

    #[inline]
    fn is_live(&self, id: FlowId) -> bool {
        let id = id as usize;
        id < self.flows.len() && self.live[id / 64] & (1 << (id % 64)) != 0
    }

    /// The flow one of whose tuples is `key`, and which tuple it is. Expected O(1): one hash,
    /// a few index slots, one record read on a hit.
    ///
    /// The deadline is not checked: an expired flow that [`Conntrack::expire`] has not reaped
    /// yet is returned, and the caller compares [`Flow::deadline`] with its clock.
    #[inline]
    #[must_use]
    pub fn lookup(&self, key: &FlowKey) -> Option<(FlowId, Direction)> {
        let flows = &self.flows;
        match self.index.find(self.hash(key), |tag| key_of(flows, tag) == key) {
            Probe::Found(tag) => Some(untag(tag)),
            Probe::Vacant(_) => None,
        }
    }

    /// The flow record `id`. O(1).
    ///
    /// `id` must come from [`Conntrack::lookup`] or [`Conntrack::insert`] and the flow must not
    /// have been removed or expired since. A stale id panics in debug builds; in release builds
    /// it returns whatever the record holds (a freed record, or a later flow that reused it).
    ///
    /// # Panics
    ///
    /// If `id >= capacity` (always), or if `id` is not live (debug builds).
    #[inline]
    #[must_use]
    pub fn get(&self, id: FlowId) -> &Flow {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        &self.flows[id as usize]
    }

    /// The flow record `id`, mutable, with the same contract as [`Conntrack::get`]. Callers may
    /// update `deadline`, `tcp_state`, `seen_reply` (and the informational fields), but must
    /// not change `original` or `reply`: the index is derived from them, and a changed key
    /// would make the flow unfindable and corrupt later removals. To re-key a flow, remove it
    /// and insert the new one.
    ///
    /// # Panics
    ///
    /// If `id >= capacity` (always), or if `id` is not live (debug builds).
    #[inline]
    pub fn get_mut(&mut self, id: FlowId) -> &mut Flow {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        &mut self.flows[id as usize]
    }

    /// Tracks `flow`, indexing both [`Flow::original`] and [`Flow::reply`], and returns its id.
    /// Expected O(1); allocates nothing.
    ///
    /// # Errors
    ///
    /// - [`InsertError::Exists`] if either tuple is already indexed, or if the two tuples are
    ///   equal (checked first: an existing flow is reported even when the table is full);
    /// - [`InsertError::Full`] if [`Conntrack::len`] == [`Conntrack::capacity`].
    ///
    /// On error the table is unchanged.
    pub fn insert(&mut self, flow: Flow) -> Result<FlowId, InsertError> {
        if flow.original == flow.reply {
            return Err(InsertError::Exists);
        }
        let original_hash = self.hash(&flow.original);
        let reply_hash = self.hash(&flow.reply);
        let flows = &self.flows;
        let Probe::Vacant(original_pos) = self.index.find(original_hash, |t| *key_of(flows, t) == flow.original) else {
            return Err(InsertError::Exists);
        };
        let Probe::Vacant(reply_pos) = self.index.find(reply_hash, |t| *key_of(flows, t) == flow.reply) else {
            return Err(InsertError::Exists);
        };
        let id = self.allocate().ok_or(InsertError::Full)?;
        self.flows[id as usize] = flow;
        self.live[id as usize / 64] |= 1 << (id % 64);
        self.len += 1;
        self.index.place(original_pos, original_hash, tag(id, Direction::Original));
        // If the original tuple took `reply_pos`, `place` moves on to the next empty slot,
        // which is still in the reply tuple's probe run.
        self.index.place(reply_pos, reply_hash, tag(id, Direction::Reply));
        Ok(id)
    }

    /// Takes a free record: the most recently freed one (warm in cache), else one never used.
    #[inline]
    fn allocate(&mut self) -> Option<FlowId> {
        if self.free_head != NO_FREE {
            let id = self.free_head;
            self.free_head = self.flows[id as usize].service;
            Some(id)
        } else if (self.never_used as usize) < self.flows.len() {
            self.never_used += 1;
            Some(self.never_used - 1)
        } else {
            None
        }
    }

    /// Stops tracking flow `id`: unindexes both tuples, frees the record for reuse and returns
    /// its last contents (the caller releases the SNAT port in [`Flow::reply`]). Expected O(1).
    ///
    /// # Panics
    ///
    /// If `id` is not live (a stale or out-of-range id), in every build: freeing a record
    /// twice would corrupt the table.
    pub fn remove(&mut self, id: FlowId) -> Flow {
        assert!(self.is_live(id), "conntrack: remove of flow id {id}, which is not live");
        let flow = self.flows[id as usize];
        let original_hash = self.hash(&flow.original);
        let reply_hash = self.hash(&flow.reply);
        // `erase` needs the home slot of another entry only when that entry's stored
        // displacement saturated; then it is re-hashed from its record.
        let (flows, seed, slots) = (&self.flows, self.seed, self.index.slot_count());
        let home = |t: u32| index::home(slots, hash_with(seed, key_of(flows, t)));
        self.index.erase(original_hash, tag(id, Direction::Original), home);
        self.index.erase(reply_hash, tag(id, Direction::Reply), home);
        self.live[id as usize / 64] &= !(1 << (id % 64));
        self.flows[id as usize].service = self.free_head;
        self.free_head = id;
        self.len -= 1;
        flow
    }

    /// Reaps idle flows: examines the next `min(budget, capacity)` records from a rotating
    /// cursor, removes every live flow among them with `deadline <= now`, calls `on_expired`
    /// once with each removed flow (after it has been removed; the caller frees its SNAT
    /// port), and returns how many it removed.
    ///
    /// Work is O(budget) record examinations (free records cost a bit test, and runs of free
    /// records are skipped a 64-bit word at a time) plus O(1) expected per removal. Calling it
    /// `⌈capacity / budget⌉` times sweeps the whole table, so a flow is reaped at most one sweep
    /// after its deadline. `budget == 0` does nothing.
    pub fn expire(&mut self, now: u64, budget: usize, mut on_expired: impl FnMut(&Flow)) -> usize {
        let capacity = self.flows.len();
        let mut left = budget.min(capacity);
        let mut removed = 0;
        while left > 0 {
            let first = self.expire_cursor;
            let bit = first % 64;
            let span = (64 - bit).min(capacity - first).min(left);
            let mask = if span == 64 { u64::MAX } else { (1 << span) - 1 };
            let mut candidates = (self.live[first / 64] >> bit) & mask;
            while candidates != 0 {
                let id = first + candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                if self.flows[id].deadline <= now {
                    let flow = self.remove(id as FlowId);
                    on_expired(&flow);
                    removed += 1;
                }
            }
            left -= span;
            self.expire_cursor = if first + span == capacity { 0 } else { first + span };
        }
        removed
    }

    /// Every live flow with its id, in id order. O(capacity); for tests and diagnostics, not
    /// for the packet path.
    pub fn iter(&self) -> impl Iterator<Item = (FlowId, &Flow)> + '_ {
        (0..self.never_used).filter(|&id| self.is_live(id)).map(|id| (id, &self.flows[id as usize]))
    }
}
