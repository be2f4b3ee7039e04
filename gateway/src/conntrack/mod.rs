//! Per-worker connection tracking for full NAT: a fixed-capacity flow table in which every
//! flow is found in O(1) from either of its two tuples, with idle expiry in bounded work.
//! One table per address family: [`Conntrack`] (IPv4, the default type parameter) and
//! [`Conntrack6`]; both are [`Conntrack<A>`] over the sealed [`Address`] trait.
//!
//! # Contract
//!
//! - A [`Flow`] has two tuples: [`Flow::original`] (client → VIP:port, as received) and
//!   [`Flow::reply`] (endpoint:targetPort → SNAT address:port, as it will be received), and a
//!   [`FlowState`] the pipeline updates. [`Conntrack::insert`] indexes both tuples;
//!   [`Conntrack::lookup`] finds the one shared record from either and says which
//!   [`Direction`] matched; [`Conntrack::remove`] unindexes both.
//! - The reply tuple's destination is always one of the worker's SNAT addresses, given to
//!   [`Conntrack::new`]; the record stores its index, not the address (see Layout).
//! - Capacity is fixed by [`Conntrack::new`], which allocates and touches all memory; after
//!   it returns nothing allocates, reallocates or frees: the record slab, the occupancy
//!   bitmap and the index are fixed-length arrays, which cannot grow. The slab (with the
//!   TCP windows) and the bitmap are on the heap ([`Conntrack::new`]) or in a file mapping that a
//!   restarted gateway adopts ([`Conntrack::persistent`], [`persist`]). A full table refuses new
//!   flows with [`InsertError::Full`]; [`Conntrack::early_drop`] then makes room, as Linux
//!   does, by evicting a flow near the new one that is worth less (expired, not assured,
//!   or a closing TCP connection), and the pipeline retries once or refuses the flow
//!   (full NAT has no stateless fallback: the reply needs the record; README, "A full
//!   conntrack table").
//! - The TCP state machine ([`tcp`], Linux's `tcp_conntracks`) and the per-packet update
//!   of a flow's state and deadline ([`track_tcp`], [`track_udp`], [`Timeouts`]) are pure
//!   functions over [`FlowState`]; the table stores their result and knows nothing of them
//!   beyond `assured` and the closing states, which early drop reads.
//! - Nothing here reads a clock. Every flow carries a [`Deadline`] (32-bit milliseconds of
//!   the caller's monotonic clock, compared with wrap-around as Linux compares its 32-bit
//!   `nf_conn.timeout` with `nfct_time_stamp`); [`Conntrack::expire`] reaps flows whose
//!   deadline has passed, examining at most `budget` records per call from a rotating
//!   cursor, so a sweep of the whole table is spread over `capacity / budget` calls and no
//!   call ever scans everything.
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
//!  records: [Record<A>; capacity]   72 B (IPv4) / 108 B (IPv6) per flow, see below
//!  live:    [u64; ⌈capacity / 64⌉]  1 bit per flow: record in use
//!  index:   [u64; ⌈8·capacity/3⌉]   one slot per tuple (2 per flow), load ≤ 3/4 at capacity
//!           slot = tag (id << 1 | direction) | 24-bit fingerprint | 8-bit displacement
//!
//!  Record<A> (repr(C)):
//!    state              FlowState: deadline u32 ms, frontend u32,
//!                       table_epoch u16 (the worker's number for the
//!                       table the flow was validated against), tcp_state
//!                       u8, bits u8 (seen_reply, assured, and per
//!                       direction egress known, next hop on-link and
//!                       the lean path's verdict),
//!                       links (arrival interface of each direction),
//!                       egress interface of each direction (the lean
//!                       path's precomputed route)                     16 B
//!    original src, dst  A, A                                          8 B / 32 B
//!    reply src          A (the endpoint)                              4 B / 16 B
//!    ports              original src, dst; reply src, dst (SNAT)      8 B
//!    protocol           one byte for both tuples (NAT keeps it); 0 in
//!                       a free record, so the record says whether it
//!                       is live, as its bit in `live` does            1 B
//!    snat               index of the reply destination among the
//!                       worker's SNAT addresses                       1 B
//!    window_flags       per TCP direction: window scale (4 bits) and
//!                       Linux's tracking flags (3 bits)               2 B
//!    bounds             TCP sequence bounds of both directions
//!                       (`window`: end, maxend, maxwin, maxack)      32 B
//! ```
//!
//! Keys are hashed by a keyed multiply-fold over their fields (`hash`: wyhash's and XXH3's
//! short-input construction) under secret words derived from the per-table seed given to
//! [`Conntrack::new`], so a remote sender cannot precompute tuples that collide in a given
//! worker's table. The index
//! is linear-probing open addressing with backward-shift deletion (no tombstones, so probe
//! runs do not degrade with churn); the 24-bit fingerprint means a probe touches a flow
//! record only on a (almost certain) match. Free records are chained through their own
//! storage, so the free list costs no memory.
//!
//! Memory per flow at capacity ([`Conntrack::memory_bytes`] gives the exact figure; the
//! sizes are asserted at compile time): for IPv4, a 72 B record (40 B of tuples and state,
//! 32 B of TCP windows), 8 · 8/3 ≈ 21.3 B of index and 1 bit ≈ **93.5 B** (issue 16's
//! budget: ≤ 96 B, with the arrival links, the egress and the TCP windows included); for
//! IPv6, 108 B, 21.3 B and 1 bit ≈ 129.5 B. The windows sit in the record, after the
//! fields every packet reads, so that a flow is one contiguous read of two cache lines
//! (which the burst prefetches before it knows the protocol), where a 40 B record (which
//! straddles a line boundary at half its offsets) and a separate windows array took 2.5 on
//! average. The client's MAC address is not kept per flow: replies are
//! routed to the client like any other packet (next hop and neighbour table), as a Linux
//! router does.
//!
//! Beside the flows, outside that budget, a fixed side table of the client SYNs ignored on
//! open flows ([`resync`]: at most 4 096 entries, 106 496 B per table, one per family per
//! worker), which lets the endpoint's SYN+ACK bring a stale flow back in step as Linux's
//! `last_*` fields do; [`Conntrack::remove`] drops a freed record's entry.
//!
//! Expected cost at load ≤ 3/4 (Knuth, TAOCP vol. 3, § 6.4): a hit probes ≈ 2.5 slots, a
//! miss ≈ 8.5 slots (about two cache lines of index), one record read per hit.
//!
//! A burst's look-ahead (`pipeline::process_burst`) reads each key's probe run early
//! ([`Conntrack::prefetch_record`]): a hit's candidate flow, or for a miss the [`Vacancy`]
//! where the run ends, which later proves the key still absent and places its original tuple
//! without the run being walked again, as long as no flow was removed in between and the slot
//! is still empty.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use torii_gateway::conntrack::{Conntrack, Deadline, Direction, Flow, FlowKey, FlowState};
//!
//! let snat = Ipv4Addr::new(192, 0, 2, 1);
//! let mut ct = Conntrack::new(1024, 0x5eed, &[snat]);
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
//!     dst_addr: snat,
//!     dst_port: 61000,
//! };
//! let state = FlowState::new(7, 0, Deadline::at(30_000_000_000));
//! let id = ct.insert(Flow { original, reply, state }).unwrap();
//! assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
//! assert_eq!(ct.expire(30_000_000_000, 64, |f| assert_eq!(f.state.frontend, 7)), 1);
//! assert_eq!(ct.lookup(&original), None);
//! ```

mod hash;
pub(crate) use hash::mum;
mod index;
pub mod persist;
pub mod resync;
pub mod syncookie;
pub mod synproxy;
pub mod tcp;
#[cfg(test)]
mod tests;
mod track;
pub mod window;

pub use tcp::TcpState;
pub use track::{open_tcp, track_ignored_tcp, track_tcp, track_udp, Timeouts, Tracked};
pub use window::{TcpSeq, TcpWindows, TcpWindowsMut, WindowBounds, WindowFlags};

use std::fmt;
use std::hash::Hash;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr};

use hash::KeyHash;
use index::{Index, Probe};

/// Identifier of a flow record: its index in the table's slab, `0..capacity`. Reused after
/// the flow is removed (see the module documentation).
pub type FlowId = u32;

/// Largest capacity [`Conntrack::new`] accepts: 2^30 flows. Flow ids and the direction bit
/// share 31 bits of an index slot.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Most SNAT addresses one table accepts: the record keeps the reply destination as a
/// one-byte index.
pub const MAX_SNAT_ADDRESSES: usize = 256;

/// Index slots [`Conntrack::early_drop`] examines, from the home slot of the new flow's
/// tuple: about 12 flows at load 3/4, all in two or three cache lines of index (Linux's
/// `early_drop` looks at `NF_CT_EVICTION_RANGE` = 8 hash buckets).
pub const EARLY_DROP_SLOTS: usize = 16;

/// Index slots per flow at capacity, as a fraction: 2 tuples / load factor 3/4 = 8/3.
const INDEX_SLOTS_PER_FLOW: (usize, usize) = (8, 3);

/// Chains free records through [`FlowState::frontend`]; `NO_FREE` ends the chain.
const NO_FREE: u32 = u32::MAX;

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::net::Ipv4Addr {}
    impl Sealed for std::net::Ipv6Addr {}
}

/// An IP address family conntrack can track: [`Ipv4Addr`] or [`Ipv6Addr`] (sealed). Both
/// are plain octet arrays (alignment 1), so records pack them without padding.
pub trait Address: sealed::Sealed + Copy + Eq + Hash + fmt::Debug + Send + Sync + 'static {
    /// Address length in octets: 4 or 16.
    const LEN: usize;
    /// The all-zeros address (`0.0.0.0`, `::`).
    const UNSPECIFIED: Self;
    /// The address as an integer (`Ipv4Addr::to_bits` widened, `Ipv6Addr::to_bits`).
    fn to_u128(self) -> u128;

    /// Whether the pair of addresses `(a, b)` is `(c, d)`. IPv4: one compare of each pair
    /// as a 64-bit word (one load where the two addresses lie side by side, as the record's
    /// `#[repr(C)]` fields do; a key's layout is the compiler's, which may take two).
    fn pair_eq(a: Self, b: Self, c: Self, d: Self) -> bool;
}

impl Address for Ipv4Addr {
    const LEN: usize = 4;
    const UNSPECIFIED: Self = Ipv4Addr::UNSPECIFIED;
    #[inline(always)]
    fn to_u128(self) -> u128 {
        u128::from(self.to_bits())
    }

    #[inline(always)]
    fn pair_eq(a: Self, b: Self, c: Self, d: Self) -> bool {
        // Each address in the order its octets lie in memory: equal words, equal octets.
        let pair = |x: Self, y: Self| {
            u64::from(u32::from_ne_bytes(x.octets())) | u64::from(u32::from_ne_bytes(y.octets())) << 32
        };
        pair(a, b) == pair(c, d)
    }
}

impl Address for Ipv6Addr {
    const LEN: usize = 16;
    const UNSPECIFIED: Self = Ipv6Addr::UNSPECIFIED;
    #[inline(always)]
    fn to_u128(self) -> u128 {
        self.to_bits()
    }

    #[inline(always)]
    fn pair_eq(a: Self, b: Self, c: Self, d: Self) -> bool {
        a == c && b == d
    }
}

/// One direction of a flow as it appears on the wire: IP protocol number (IANA "Assigned
/// Internet Protocol Numbers": 6 TCP, 17 UDP, 132 SCTP, 1 ICMP, 58 ICMPv6), addresses, and
/// transport ports (host byte order; for ICMP echo, the identifier in one port and 0 in the
/// other). `A` is the address family, IPv4 unless said otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey<A: Address = Ipv4Addr> {
    /// IP protocol number (IPv4 "Protocol", [RFC 791 § 3.1]; IPv6 upper-layer "Next Header"
    /// after any extension headers, [RFC 8200 § 3]).
    ///
    /// [RFC 791 § 3.1]: https://www.rfc-editor.org/rfc/rfc791#section-3.1
    /// [RFC 8200 § 3]: https://www.rfc-editor.org/rfc/rfc8200#section-3
    pub protocol: u8,
    /// Source address.
    pub src_addr: A,
    /// Transport source port, host byte order.
    pub src_port: u16,
    /// Destination address.
    pub dst_addr: A,
    /// Transport destination port, host byte order.
    pub dst_port: u16,
}

/// An IPv6 [`FlowKey`].
pub type FlowKey6 = FlowKey<Ipv6Addr>;

impl<A: Address> FlowKey<A> {
    /// The same tuple seen from the other end: source and destination (address and port)
    /// swapped, protocol kept. For a full-NAT flow, `flow.reply.reversed()` is the tuple the
    /// gateway sends towards the endpoint.
    #[must_use]
    pub fn reversed(&self) -> Self {
        Self {
            protocol: self.protocol,
            src_addr: self.dst_addr,
            src_port: self.dst_port,
            dst_addr: self.src_addr,
            dst_port: self.src_port,
        }
    }
}

/// Which tuple of a flow a lookup matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Direction {
    /// [`Flow::original`]: client → VIP; translate with DNAT + SNAT.
    Original = 0,
    /// [`Flow::reply`]: endpoint → SNAT address; translate back towards the client.
    Reply = 1,
}

const NS_PER_MS: u64 = 1_000_000;

/// When an idle flow expires: milliseconds of the caller's monotonic clock, kept in 32 bits
/// and compared with wrap-around, as Linux keeps `nf_conn.timeout` in 32-bit jiffies and
/// tests `(s32)(timeout - nfct_time_stamp) <= 0` (`nf_ct_is_expired`,
/// `include/net/netfilter/nf_conntrack.h`). A deadline is meaningful while it lies less than
/// 2^31 ms (≈ 24.8 days) from the clock: timeouts are capped at [`Deadline::MAX_TIMEOUT_NS`],
/// and expiry sweeps the table far more often than that.
///
/// A deadline is rounded up to the next millisecond and the clock down, so a flow never
/// expires early and at most 1 ms late.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deadline(u32);

impl Deadline {
    /// Longest timeout [`Deadline::after`] honours, ns: 2^31 − 1 ms minus a day of margin for
    /// flows reaped late (about 23.8 days). Configuration rejects longer timeouts.
    pub const MAX_TIMEOUT_NS: u64 = ((1 << 31) - 1 - 86_400_000) * NS_PER_MS;

    /// The deadline at `t_ns` (monotonic ns).
    #[inline]
    #[must_use]
    pub fn at(t_ns: u64) -> Self {
        Deadline(t_ns.div_ceil(NS_PER_MS) as u32)
    }

    /// The deadline `timeout_ns` after `now_ns` (the timeout capped at
    /// [`Deadline::MAX_TIMEOUT_NS`]).
    #[inline]
    #[must_use]
    pub fn after(now_ns: u64, timeout_ns: u64) -> Self {
        Self::at(now_ns.saturating_add(timeout_ns.min(Self::MAX_TIMEOUT_NS)))
    }

    /// Whether the deadline has passed at `now_ns`: `now ≥ deadline`, modulo 2^32 ms.
    #[inline]
    #[must_use]
    pub fn is_due(self, now_ns: u64) -> bool {
        self.is_due_ms(Self::clock_ms(now_ns))
    }

    /// The millisecond clock deadlines count in, at `now_ns`: what [`Deadline::is_due_ms`]
    /// takes (computed once for many flows: a division saved per flow).
    #[inline]
    #[must_use]
    pub fn clock_ms(now_ns: u64) -> u32 {
        (now_ns / NS_PER_MS) as u32
    }

    /// [`Deadline::is_due`] at `now_ms` ([`Deadline::clock_ms`] of the time).
    #[inline]
    #[must_use]
    pub fn is_due_ms(self, now_ms: u32) -> bool {
        now_ms.wrapping_sub(self.0) as i32 >= 0
    }

    /// Milliseconds from `now_ns` until the deadline, 0 once it is due (diagnostics, tests).
    #[must_use]
    pub fn remaining_ms(self, now_ns: u64) -> u32 {
        let left = self.0.wrapping_sub((now_ns / NS_PER_MS) as u32) as i32;
        left.max(0) as u32
    }
}

/// The part of a flow the pipeline updates while it lives, stored verbatim in the record
/// ([`Conntrack::state`], [`Conntrack::state_mut`]), and the links its two directions
/// arrive on. 16 bytes (asserted; see "Layout" in the module documentation).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct FlowState {
    /// When the flow expires unless refreshed.
    pub deadline: Deadline,
    /// Index of the flow's front door in the table of epoch
    /// [`table_epoch`](FlowState::table_epoch) (per-front-door counters); the pipeline
    /// refreshes it when it revalidates the flow against a newer table.
    pub frontend: u32,
    /// The worker's epoch of the table against which the pipeline last checked that this
    /// flow's endpoint is still an endpoint of its front door: a 16-bit number the worker
    /// gives each table generation it adopts, [`FlowState::NEVER_VALIDATED`] (0) when the
    /// flow was never checked (or was adopted from a predecessor, or the worker's epochs
    /// wrapped: [`Conntrack::forget_table_epochs`]). Opaque to conntrack.
    pub table_epoch: u16,
    /// TCP connection state ([`track_tcp`]); [`TcpState::None`] for other protocols. Read
    /// and written through [`FlowState::tcp_state`] and [`FlowState::set_tcp_state`], which
    /// keeps the lean bits true.
    tcp_state: TcpState,
    /// `SEEN_REPLY`, `ASSURED`, the egress bits of both directions (`EGRESS_KNOWN`,
    /// `EGRESS_ON_LINK`, shifted by `2 · direction`) and the lean bits (`LEAN`, shifted by
    /// `direction`): read through the accessors.
    bits: u8,
    /// The interfaces (indices into the host's interfaces: a port and VLAN) on which each
    /// direction arrives; opaque to conntrack. The pipeline drops a packet of either tuple
    /// that arrives on another link, so a sender on the client side cannot pass for an
    /// endpoint (a forged reply) nor the reverse.
    pub links: Links,
    /// Egress interface per direction (index 0: original, 1: reply), valid where the
    /// direction's `EGRESS_KNOWN` bit says ([`FlowState::egress`]).
    egress_out: [u8; 2],
}

/// [`FlowState`] bit: the reply direction has been seen (Linux `IPS_SEEN_REPLY`).
const SEEN_REPLY: u8 = 1 << 0;
/// [`FlowState`] bit: the flow is assured (Linux `IPS_ASSURED`).
const ASSURED: u8 = 1 << 1;
/// [`FlowState`] bit, shifted by `2 · direction`: the direction's egress is known.
const EGRESS_KNOWN: u8 = 1 << 2;
/// [`FlowState`] bit, shifted by `2 · direction`: the direction's next hop is its
/// destination (a connected subnet), else the family's router.
const EGRESS_ON_LINK: u8 = 1 << 3;
/// [`FlowState`] bit, shifted by `direction`: the direction may take the lean path
/// ([`FlowState::lean`]).
const LEAN: u8 = 1 << 6;
/// Both directions' [`LEAN`] bits.
const LEAN_BOTH: u8 = LEAN | LEAN << 1;

impl fmt::Debug for FlowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowState")
            .field("deadline", &self.deadline)
            .field("frontend", &self.frontend)
            .field("table_epoch", &self.table_epoch)
            .field("tcp_state", &self.tcp_state)
            .field("seen_reply", &self.seen_reply())
            .field("assured", &self.assured())
            .field("links", &self.links)
            .field("egress", &[self.egress(Direction::Original), self.egress(Direction::Reply)])
            .finish()
    }
}

/// The interfaces the two directions of a flow arrive on ([`FlowState::links`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Links {
    /// Where the original direction (client → front door) arrives: the interface its first
    /// packet came in on.
    pub original: u8,
    /// Where the reply direction (endpoint → SNAT address) arrives: the interface that
    /// reaches the endpoint.
    pub reply: u8,
}

impl Links {
    /// The link packets of `direction` arrive on.
    #[inline]
    #[must_use]
    pub fn of(self, direction: Direction) -> u8 {
        match direction {
            Direction::Original => self.original,
            Direction::Reply => self.reply,
        }
    }
}

impl FlowState {
    /// The [`table_epoch`](FlowState::table_epoch) of a flow never checked against a table:
    /// it is revalidated against the current table at its next packet. A worker's epochs
    /// start at 1.
    pub const NEVER_VALIDATED: u16 = 0;

    /// Forgets what refers to the process that wrote this state rather than to the flow:
    /// the table epoch it was checked against (epochs are the writer's numbering of its
    /// tables, and the front-door index is read from the table the writer held), and both
    /// directions' egress ([`FlowState::egress`]: the writer's routes; each direction's next
    /// packet is routed again, so that an address or router changed on the same interface
    /// is followed — an endpoint or client whose route moved to another interface is not:
    /// the flow's arrival links and SNAT address stay the writer's, and the ownership check
    /// covers the interfaces' names, ports and VLANs only). For flows adopted from a
    /// predecessor's region ([`Conntrack::persistent`]).
    pub fn forget_process_state(&mut self) {
        self.table_epoch = Self::NEVER_VALIDATED;
        // What the writer knew of its SYN proxy's flows is gone with it, and the lean bits
        // need a known egress.
        let egress = EGRESS_KNOWN | EGRESS_ON_LINK;
        self.bits &= !(LEAN_BOTH | egress | egress << 2);
    }

    /// The state of a new flow: entered by front door `frontend` of the table of worker
    /// epoch `table_epoch`, expiring at `deadline`; no TCP state, no reply seen, no egress
    /// known.
    #[must_use]
    pub fn new(frontend: u32, table_epoch: u16, deadline: Deadline) -> Self {
        Self {
            deadline,
            frontend,
            table_epoch,
            tcp_state: TcpState::None,
            bits: 0,
            links: Links { original: 0, reply: 0 },
            egress_out: [0; 2],
        }
    }

    /// This state with arrival links `links`.
    #[inline]
    #[must_use]
    pub fn with_links(self, links: Links) -> Self {
        Self { links, ..self }
    }

    /// This state of a new flow (no TCP state, not assured: neither direction lean) with
    /// the reply direction's egress ([`FlowState::egress`]) `reply`, when known: interface,
    /// next hop on-link or not.
    #[inline]
    #[must_use]
    pub fn with_reply_egress(self, reply: Option<(u8, bool)>) -> Self {
        debug_assert!(!self.lean(Direction::Original) && !self.lean(Direction::Reply), "a new flow's lean bits");
        let Some((out, on_link)) = reply else { return self };
        let d = Direction::Reply as usize;
        let set = (EGRESS_KNOWN | if on_link { EGRESS_ON_LINK } else { 0 }) << (2 * d);
        let mut egress_out = self.egress_out;
        egress_out[d] = out;
        Self { bits: self.bits | set, egress_out, ..self }
    }

    /// Whether the reply direction has been seen (Linux `IPS_SEEN_REPLY`).
    #[inline]
    #[must_use]
    pub fn seen_reply(&self) -> bool {
        self.bits & SEEN_REPLY != 0
    }

    /// Sets or clears [`FlowState::seen_reply`] (clearing it clears the lean bits).
    #[inline]
    pub fn set_seen_reply(&mut self, seen: bool) {
        self.bits = if seen { self.bits | SEEN_REPLY } else { self.bits & !(SEEN_REPLY | LEAN_BOTH) };
    }

    /// Whether the flow is worth keeping under pressure (Linux `IPS_ASSURED`: TCP
    /// established, UDP traffic after a reply); not-assured flows may be evicted early.
    #[inline]
    #[must_use]
    pub fn assured(&self) -> bool {
        self.bits & ASSURED != 0
    }

    /// Sets or clears [`FlowState::assured`] (clearing it clears the lean bits).
    #[inline]
    pub fn set_assured(&mut self, assured: bool) {
        self.bits = if assured { self.bits | ASSURED } else { self.bits & !(ASSURED | LEAN_BOTH) };
    }

    /// The TCP connection state ([`track_tcp`]); [`TcpState::None`] for other protocols
    /// (SCTP keeps its closed state here: [`TcpState::Close`]).
    #[inline]
    #[must_use]
    pub fn tcp_state(&self) -> TcpState {
        self.tcp_state
    }

    /// Sets the TCP connection state; any state but ESTABLISHED clears the lean bits.
    #[inline]
    pub fn set_tcp_state(&mut self, state: TcpState) {
        self.tcp_state = state;
        if state != TcpState::Established {
            self.bits &= !LEAN_BOTH;
        }
    }

    /// Whether packets of `direction` may take the lean established path
    /// (`pipeline::lean`): the flow is TCP, ESTABLISHED, its reply seen and assured, or UDP
    /// and assured; it is not one the SYN proxy opened; and the direction's egress is known
    /// ([`FlowState::egress`]). Recomputed ([`FlowState::refresh_lean`]) whenever the
    /// general path records an egress ([`FlowState::set_egress`]: every packet it forwards),
    /// then cleared by the general path for a proxied flow; every setter that takes one of
    /// these away clears it
    /// ([`FlowState::set_tcp_state`], [`FlowState::set_assured`],
    /// [`FlowState::set_seen_reply`]), so it implies them all: one bit test instead of
    /// seven fields. What changes without the flow (the table's generation, the neighbour,
    /// the deadline, the arrival link) the lean path still checks itself.
    #[inline]
    #[must_use]
    pub fn lean(&self, direction: Direction) -> bool {
        self.bits & (LEAN << direction as u8) != 0
    }

    /// Recomputes both directions' [`FlowState::lean`] bits from the state (as
    /// [`FlowState::set_egress`] does), for a flow the SYN proxy opened (`proxied`: its
    /// sequence numbers are translated, which only the general path does) or not. Lean:
    /// TCP ESTABLISHED with its reply seen and assured, or no TCP state and assured (UDP;
    /// an SCTP association, whose packets stage 1 never hands the lean path), and the
    /// direction's egress known.
    #[inline]
    pub fn refresh_lean(&mut self, proxied: bool) {
        let ok = !proxied
            && match self.tcp_state {
                TcpState::Established => self.seen_reply_and_assured(),
                TcpState::None => self.assured(),
                _ => false,
            };
        // EGRESS_KNOWN of the original direction (bit 2) and of the reply (bit 4) into the
        // LEAN bits (6 and 7).
        let known = (self.bits >> 2) & 1 | (self.bits >> 3) & 2;
        self.bits = (self.bits & !LEAN_BOTH) | if ok { known * LEAN } else { 0 };
    }

    /// [`FlowState::egress`] of a direction whose [`FlowState::lean`] bit is set (so its
    /// egress is known): the egress interface and whether the next hop is on-link.
    #[inline]
    #[must_use]
    pub fn lean_egress(&self, direction: Direction) -> (u8, bool) {
        let d = direction as usize;
        debug_assert!(self.lean(direction));
        (self.egress_out[d], self.bits & (EGRESS_ON_LINK << (2 * d)) != 0)
    }

    /// Whether the reply direction has been seen and the flow is assured, in one test (the
    /// lean path's).
    #[inline]
    #[must_use]
    pub fn seen_reply_and_assured(&self) -> bool {
        self.bits & (SEEN_REPLY | ASSURED) == SEEN_REPLY | ASSURED
    }

    /// Where direction `direction` leaves, once the pipeline has routed it — the original
    /// direction at its first packet, the reply direction (to the client) when the flow is
    /// created — the lean established path's precomputed egress, which the general path's
    /// egress reads too instead of routing again: the egress interface and whether the
    /// next hop is the destination (on a connected subnet), else the family's router.
    /// Routes are a pure function of the destination and the host, which never changes
    /// while the gateway runs, so this stays true for the flow's life; the next hop's MAC is
    /// read from the neighbour table on every packet, so neighbour changes need no
    /// invalidation. Opaque to conntrack.
    #[inline]
    #[must_use]
    pub fn egress(&self, direction: Direction) -> Option<(u8, bool)> {
        let d = direction as usize;
        (self.bits & (EGRESS_KNOWN << (2 * d)) != 0)
            .then(|| (self.egress_out[d], self.bits & (EGRESS_ON_LINK << (2 * d)) != 0))
    }

    /// Records direction `direction`'s egress ([`FlowState::egress`]): interface `out`,
    /// next hop on-link or not; and recomputes the lean bits ([`FlowState::refresh_lean`] of
    /// a flow not proxied: the caller clears them for one the SYN proxy opened).
    #[inline]
    pub fn set_egress(&mut self, direction: Direction, out: u8, on_link: bool) {
        let d = direction as usize;
        self.egress_out[d] = out;
        let mask = (EGRESS_KNOWN | EGRESS_ON_LINK) << (2 * d);
        let set = (EGRESS_KNOWN | if on_link { EGRESS_ON_LINK } else { 0 }) << (2 * d);
        self.bits = (self.bits & !mask) | set;
        self.refresh_lean(false);
    }
}

/// One tracked full-NAT flow, as inserted and as read back ([`Conntrack::get`]); the table
/// stores it denser (see the module documentation).
///
/// The keys are fixed once inserted (the index is derived from them); the pipeline updates
/// the [`FlowState`] through [`Conntrack::state_mut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow<A: Address = Ipv4Addr> {
    /// Client → VIP:port, as received.
    pub original: FlowKey<A>,
    /// Endpoint:targetPort → SNAT address:port, as the reply will be received. The endpoint
    /// is stored here by address and port, not by table index, so the flow survives table
    /// changes (DESIGN.md "The table and how it is published"). Same protocol as
    /// [`Flow::original`]; the destination is one of the table's SNAT addresses.
    pub reply: FlowKey<A>,
    /// What changes while the flow lives.
    pub state: FlowState,
}

/// An IPv6 [`Flow`].
pub type Flow6 = Flow<Ipv6Addr>;

/// A flow as stored: see the module documentation, "Layout".
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Record<A: Address> {
    state: FlowState,
    original_src: A,
    original_dst: A,
    reply_src: A,
    original_src_port: u16,
    original_dst_port: u16,
    reply_src_port: u16,
    reply_dst_port: u16,
    /// The flow's IP protocol; 0 in a free record ([`Record::FREE`]).
    protocol: u8,
    /// Index of the reply destination in [`Conntrack::snat`].
    snat: u8,
    /// The TCP window scales and flags of both directions.
    window_flags: WindowFlags,
    /// The TCP sequence bounds of both directions ([`window`]): in the record, so that a
    /// TCP segment's flow is one contiguous read (two cache lines for IPv4, where a record
    /// and its bounds apart took 2.5 on average); reset when a flow takes the record.
    bounds: WindowBounds,
}

impl<A: Address> Record<A> {
    /// The protocol of a free record: 0 (IPv6 Hop-by-Hop Options, never a transport
    /// protocol; [`Conntrack::insert`] refuses it). Whether a record holds a live flow is
    /// the same fact as its bit in [`Conntrack::live`], kept in the record too so that
    /// confirming a burst's candidate ([`Conntrack::lookup_candidate`]) reads only the
    /// record, whose lines are already on their way, and not a bitmap word on another
    /// line; set and cleared with the bit.
    const FREE: u8 = 0;

    /// Contents of a record that was never used.
    const VACANT: Self = Record {
        state: FlowState {
            deadline: Deadline(0),
            frontend: NO_FREE,
            table_epoch: FlowState::NEVER_VALIDATED,
            tcp_state: TcpState::None,
            bits: 0,
            links: Links { original: 0, reply: 0 },
            egress_out: [0; 2],
        },
        original_src: A::UNSPECIFIED,
        original_dst: A::UNSPECIFIED,
        reply_src: A::UNSPECIFIED,
        original_src_port: 0,
        original_dst_port: 0,
        reply_src_port: 0,
        reply_dst_port: 0,
        protocol: Self::FREE,
        snat: 0,
        window_flags: WindowFlags::NONE,
        bounds: WindowBounds::NONE,
    };

    /// Whether the record holds a live flow (see [`Record::FREE`]).
    #[inline(always)]
    fn live(&self) -> bool {
        self.protocol != Self::FREE
    }

    #[inline]
    fn pack(flow: &Flow<A>, snat: u8) -> Self {
        Record {
            state: flow.state,
            original_src: flow.original.src_addr,
            original_dst: flow.original.dst_addr,
            reply_src: flow.reply.src_addr,
            original_src_port: flow.original.src_port,
            original_dst_port: flow.original.dst_port,
            reply_src_port: flow.reply.src_port,
            reply_dst_port: flow.reply.dst_port,
            protocol: flow.original.protocol,
            snat,
            window_flags: WindowFlags::NONE,
            bounds: WindowBounds::NONE,
        }
    }

    #[inline]
    fn original(&self) -> FlowKey<A> {
        FlowKey {
            protocol: self.protocol,
            src_addr: self.original_src,
            src_port: self.original_src_port,
            dst_addr: self.original_dst,
            dst_port: self.original_dst_port,
        }
    }

    #[inline]
    fn reply(&self, snat: &[A]) -> FlowKey<A> {
        FlowKey {
            protocol: self.protocol,
            src_addr: self.reply_src,
            src_port: self.reply_src_port,
            dst_addr: snat[usize::from(self.snat)],
            dst_port: self.reply_dst_port,
        }
    }

    #[inline]
    fn unpack(&self, snat: &[A]) -> Flow<A> {
        Flow { original: self.original(), reply: self.reply(snat), state: self.state }
    }

    /// Whether tuple `direction` of this record is `key`, without building the tuple.
    #[inline]
    fn matches(&self, direction: Direction, key: &FlowKey<A>, snat: &[A]) -> bool {
        self.protocol == key.protocol
            && match direction {
                Direction::Original => {
                    self.original_src_port == key.src_port
                        && self.original_dst_port == key.dst_port
                        && self.original_src == key.src_addr
                        && self.original_dst == key.dst_addr
                }
                Direction::Reply => {
                    self.reply_dst_port == key.dst_port
                        && self.reply_src_port == key.src_port
                        && self.reply_src == key.src_addr
                        && snat[usize::from(self.snat)] == key.dst_addr
                }
            }
    }

    /// [`Record::matches`] for a key in memory (the lean path's, in its compact hints): the
    /// two ports compared as one 32-bit word and the original tuple's addresses as one pair
    /// ([`Address::pair_eq`]): the record's fields lie side by side (`#[repr(C)]`), so
    /// each of its sides is one load (a key's layout is the compiler's). The same answer (`tests::lean_confirms_as_lookup`,
    /// `tests::wide_matches_are_matches`); the general path keeps the field-by-field form,
    /// whose keys are often in registers (the wide one there cost an IPv6 SYN 21).
    #[inline(always)]
    fn matches_wide(&self, direction: Direction, key: &FlowKey<A>, snat: &[A]) -> bool {
        let ports = |src: u16, dst: u16| u32::from(src) | u32::from(dst) << 16;
        self.protocol == key.protocol
            && match direction {
                Direction::Original => {
                    ports(self.original_src_port, self.original_dst_port) == ports(key.src_port, key.dst_port)
                        && A::pair_eq(self.original_src, self.original_dst, key.src_addr, key.dst_addr)
                }
                Direction::Reply => {
                    ports(self.reply_src_port, self.reply_dst_port) == ports(key.src_port, key.dst_port)
                        && self.reply_src == key.src_addr
                        && snat[usize::from(self.snat)] == key.dst_addr
                }
            }
    }
}

/// An IPv6 [`Conntrack`].
pub type Conntrack6 = Conntrack<Ipv6Addr>;

const _: () = assert!(size_of::<Deadline>() == 4);
const _: () = assert!(size_of::<FlowState>() == 16, "flow state: see Layout");
const _: () = assert!(size_of::<Record<Ipv4Addr>>() == 72, "IPv4 record: see Layout");
const _: () = assert!(size_of::<Record<Ipv6Addr>>() == 108, "IPv6 record: see Layout");
const _: () = assert!(size_of::<WindowBounds>() == 32, "TCP windows: see Layout");
/// Bytes of table per flow at capacity, times 24 (to stay in integers): the record (with
/// its TCP windows), its index slots (8 B each) and its bit of the occupancy bitmap.
const fn bytes_per_flow_x24(record: usize) -> usize {
    24 * record + 24 * 8 * INDEX_SLOTS_PER_FLOW.0 / INDEX_SLOTS_PER_FLOW.1 + 3
}
const _: () = assert!(bytes_per_flow_x24(size_of::<Record<Ipv4Addr>>()) == 2243, "93.46 B per IPv4 flow");
const _: () = assert!(bytes_per_flow_x24(size_of::<Record<Ipv6Addr>>()) == 3107, "129.46 B per IPv6 flow");
const _: () = assert!(bytes_per_flow_x24(size_of::<Record<Ipv4Addr>>()) <= 24 * 96, "issue 16: ≤ 96 B per IPv4 flow");
const _: () = assert!(MAX_CAPACITY <= 1 << 30, "flow id << 1 | direction must fit 31 bits");
const _: () = assert!(
    (MAX_CAPACITY as u64 * INDEX_SLOTS_PER_FLOW.0 as u64).div_ceil(INDEX_SLOTS_PER_FLOW.1 as u64) <= 1 << 32,
    "fast range reduction takes 32 hash bits"
);
const _: () = assert!(INDEX_SLOTS_PER_FLOW.0 > 2 * INDEX_SLOTS_PER_FLOW.1, "the index always keeps an empty slot");

/// Why [`Conntrack::insert`] refused a flow. In every case the table is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// Every record is in use ([`Conntrack::len`] == [`Conntrack::capacity`]).
    Full,
    /// The original or the reply tuple is already indexed (or the two are equal).
    Exists,
    /// The reply tuple's destination is not one of the table's SNAT addresses, or its
    /// protocol differs from the original's (a caller bug: full NAT keeps the protocol), or
    /// is 0 (IPv6 Hop-by-Hop Options, never a transport protocol: it marks a free record).
    NotFullNat,
}

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InsertError::Full => "conntrack table full: expire flows sooner or configure a larger capacity",
            InsertError::Exists => "conntrack already tracks the original or the reply tuple of this flow",
            InsertError::NotFullNat => {
                "conntrack tracks full-NAT flows only: the reply must go to a SNAT address, with the same protocol"
            }
        })
    }
}

impl std::error::Error for InsertError {}

/// A per-worker connection tracking table for one address family (IPv4 by default): see
/// the module documentation. Not shared, not locked; owned by one worker.
pub struct Conntrack<A: Address = Ipv4Addr> {
    /// Flow records; `capacity` long. Free records hold the free-list link in
    /// `state.frontend`.
    records: persist::Slots<Record<A>>,
    /// Bit `id % 64` of word `id / 64` is set iff record `id` holds a live flow.
    live: persist::Slots<u64>,
    /// Both tuples of every live flow.
    index: Index,
    /// The SNAT addresses reply tuples go to; records hold an index into it.
    snat: Box<[A]>,
    /// This table's key hash (secret words drawn from its seed).
    hasher: KeyHash,
    /// Live flows.
    len: usize,
    /// Head of the chain of freed records, or [`NO_FREE`].
    free_head: u32,
    /// Records `never_used..capacity` have never held a flow (not on the free chain).
    never_used: u32,
    /// Next record [`Conntrack::expire`] examines.
    expire_cursor: usize,
    /// Flows removed so far (wrapping): a [`Vacancy`] taken before a removal is stale.
    removals: u32,
    /// The client SYNs ignored on open flows, for the endpoint's SYN+ACK to bring a flow
    /// back in step ([`resync`]): outside the per-flow memory, not persisted.
    ignored_syns: resync::IgnoredSyns,
}

/// What [`Conntrack::prefetch_record`] found for a hash ahead of the lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// The flow whose tuple the key almost certainly is, and which tuple (its record is on
    /// its way).
    Flow(FlowId, Direction),
    /// No flow has a tuple with this hash: where the key's probe run ended.
    Absent(Vacancy),
}

impl Candidate {
    /// The vacancy of an absent key, `None` for a flow.
    #[inline]
    #[must_use]
    pub fn vacancy(self) -> Option<Vacancy> {
        match self {
            Candidate::Absent(v) => Some(v),
            Candidate::Flow(..) => None,
        }
    }
}

/// Where a key's probe run ended when [`Conntrack::prefetch_record`] proved the key absent:
/// the empty slot linear probing would place it in. It stays the answer while no flow is
/// removed (removal shifts entries back; insertion only fills empty slots) and the slot is
/// still empty (an insertion into the run fills that very slot): then the key is still
/// absent, and [`Conntrack::lookup_candidate`] and [`Conntrack::insert_hashed`] need not walk
/// the run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vacancy {
    slot: u32,
    removals: u32,
}

/// What the caller of [`Conntrack::insert_hashed`] found out about a new flow's reply tuple
/// before inserting it (the SNAT port search), so that the insert need not find it again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyHint {
    /// The reply tuple's [`Conntrack::hash_key`] and where its probe run ended
    /// ([`Conntrack::lookup_or_vacancy`]); used while the [`Vacancy`] holds.
    pub slot: Option<(u64, Vacancy)>,
    /// The position of the reply tuple's destination (the SNAT address) among the table's
    /// SNAT addresses (the list it was made with: `crate::host::Host::snat_positions_on`);
    /// used when that position holds that address, else the address is searched for.
    pub snat: Option<u8>,
}

impl<A: Address> fmt::Debug for Conntrack<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conntrack")
            .field("capacity", &self.capacity())
            .field("len", &self.len)
            .field("index_slots", &self.index.slot_count())
            .field("expire_cursor", &self.expire_cursor)
            .finish_non_exhaustive()
    }
}

/// Whether [`Conntrack::early_drop`] may evict a flow in `state` at `now_ns`.
#[inline]
fn evictable(state: &FlowState, now_ns: u64) -> bool {
    state.deadline.is_due(now_ns)
        || !state.assured()
        || matches!(
            state.tcp_state,
            TcpState::FinWait | TcpState::CloseWait | TcpState::LastAck | TcpState::TimeWait | TcpState::Close
        )
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

/// The tuple of `records` a tag refers to.
#[inline]
fn key_of<A: Address>(records: &[Record<A>], snat: &[A], tag: u32) -> FlowKey<A> {
    let (id, direction) = untag(tag);
    let record = &records[id as usize];
    match direction {
        Direction::Original => record.original(),
        Direction::Reply => record.reply(snat),
    }
}

/// Whether the tuple `tag` refers to is `key`.
#[inline]
fn tag_matches<A: Address>(records: &[Record<A>], snat: &[A], tag: u32, key: &FlowKey<A>) -> bool {
    let (id, direction) = untag(tag);
    records[id as usize].matches(direction, key, snat)
}

impl<A: Address> Conntrack<A> {
    /// A table for up to `capacity` flows (0..=[`MAX_CAPACITY`]) whose reply tuples go to
    /// `snat_addresses` (at most [`MAX_SNAT_ADDRESSES`], the worker's SNAT addresses of this
    /// family; none gives a table that refuses every flow with [`InsertError::NotFullNat`],
    /// for a family without SNAT addresses), keys hashed with `seed` (draw it at random per worker). Allocates and
    /// writes all memory now (see [`Conntrack::memory_bytes`]), the records and the index in
    /// transparent huge pages where the kernel offers them (the `memory` module): O(capacity) time,
    /// never again afterwards.
    ///
    /// A capacity of 0 gives a table that refuses every insert with [`InsertError::Full`].
    ///
    /// # Panics
    ///
    /// If `capacity > MAX_CAPACITY`, if `snat_addresses` is longer than
    /// [`MAX_SNAT_ADDRESSES`], or if the allocation fails.
    #[must_use]
    pub fn new(capacity: usize, seed: u64, snat_addresses: &[A]) -> Self {
        assert!(capacity <= MAX_CAPACITY, "conntrack capacity {capacity} exceeds the maximum {MAX_CAPACITY}");
        Self::with_index(capacity, seed, snat_addresses, Index::new(index_slots(capacity)))
    }

    fn with_index(capacity: usize, seed: u64, snat_addresses: &[A], index: Index) -> Self {
        let records = crate::memory::filled(capacity, Record::VACANT);
        let live = crate::memory::filled(capacity.div_ceil(64), 0);
        Self::with_storage(seed, snat_addresses, index, records, live)
    }

    fn with_storage(
        seed: u64,
        snat_addresses: &[A],
        index: Index,
        records: persist::Slots<Record<A>>,
        live: persist::Slots<u64>,
    ) -> Self {
        let capacity = records.len();
        assert!(
            snat_addresses.len() <= MAX_SNAT_ADDRESSES,
            "conntrack takes at most {MAX_SNAT_ADDRESSES} SNAT addresses, got {}",
            snat_addresses.len()
        );
        debug_assert!(index.slot_count() > 2 * capacity);
        let ignored_syns = resync::IgnoredSyns::for_capacity(capacity);
        Self {
            records,
            live,
            index,
            snat: snat_addresses.into(),
            hasher: KeyHash::new(seed),
            len: 0,
            free_head: NO_FREE,
            never_used: 0,
            expire_cursor: 0,
            removals: 0,
            ignored_syns,
        }
    }

    /// A table as [`Conntrack::new`] whose records, TCP windows and occupancy bitmap live in
    /// the file `path` (in the gateway's `shm_dir`; see [`persist`]): a file left by a
    /// previous process for the same capacity, family, SNAT addresses and `owner`, with this
    /// build's record layout, is adopted with its flows (their deadlines moved from the
    /// writer's clock origin to `origin_ns`, `CLOCK_MONOTONIC` ns at which the caller's clock
    /// reads 0; the index rebuilt; a record whose tuple another already holds, which only a
    /// process killed in mid-update leaves, dropped); anything else is replaced by an empty
    /// table and [`persist::Opened::Created`] says why. Adopted flows keep their state as
    /// stored except what referred to the writing process
    /// ([`FlowState::forget_process_state`]), which the pipeline revalidates. O(capacity).
    ///
    /// # Errors
    /// When the file cannot be created or mapped.
    ///
    /// # Panics
    /// As [`Conntrack::new`].
    pub fn persistent(
        path: &std::path::Path,
        capacity: usize,
        seed: u64,
        snat_addresses: &[A],
        owner: persist::Owner,
        origin_ns: u64,
    ) -> std::io::Result<(Self, persist::Opened)> {
        assert!(capacity <= MAX_CAPACITY, "conntrack capacity {capacity} exceeds the maximum {MAX_CAPACITY}");
        let (region, opened) = persist::open::<A>(path, capacity, snat_addresses, owner, origin_ns)?;
        let persist::Region { records, live, mark, deadline_shift_ms } = region;
        let index = Index::new(index_slots(capacity));
        let mut table = Self::with_storage(seed, snat_addresses, index, records, live);
        if opened == persist::Opened::Adopted {
            table.adopt(deadline_shift_ms);
            mark.ready();
        }
        Ok((table, opened))
    }

    /// Rebuilds the index, the free chain and the count from the records and the occupancy
    /// bitmap of an adopted region, moving every live deadline by `shift_ms`. O(capacity).
    fn adopt(&mut self, shift_ms: u32) {
        let capacity = self.records.len();
        let mut last_live = None;
        for id in 0..capacity {
            let bit = self.live[id / 64] & (1 << (id % 64)) != 0;
            let record = self.records[id];
            let mut keep = bit && record.live() && usize::from(record.snat) < self.snat.len();
            if keep {
                let (original, reply) = (record.original(), record.reply(&self.snat));
                let (records, snat) = (&*self.records, &*self.snat);
                let (oh, rh) = (self.hash(&original), self.hash(&reply));
                let o = self.index.find(oh, |t| tag_matches(records, snat, t, &original));
                let r = self.index.find(rh, |t| tag_matches(records, snat, t, &reply));
                if let (Probe::Vacant(op), Probe::Vacant(_)) = (o, r) {
                    if original != reply {
                        self.index.place(op, oh, tag(id as FlowId, Direction::Original));
                        let Probe::Vacant(rp) = self.index.find(rh, |_| false) else { unreachable!() };
                        self.index.place(rp, rh, tag(id as FlowId, Direction::Reply));
                    } else {
                        keep = false;
                    }
                } else {
                    keep = false;
                }
            }
            if keep {
                let state = &mut self.records[id].state;
                state.deadline = Deadline(state.deadline.0.wrapping_add(shift_ms));
                state.forget_process_state();
                self.len += 1;
                last_live = Some(id);
            } else {
                self.live[id / 64] &= !(1 << (id % 64));
                self.records[id].protocol = Record::<A>::FREE;
            }
        }
        self.never_used = last_live.map_or(0, |id| id as u32 + 1);
        self.free_head = NO_FREE;
        for id in (0..self.never_used).rev() {
            if !self.is_live(id) {
                self.records[id as usize].state.frontend = self.free_head;
                self.free_head = id;
            }
        }
    }

    /// Maximum number of flows, fixed at construction.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.records.len()
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

    /// The SNAT addresses reply tuples go to, as given to [`Conntrack::new`].
    #[must_use]
    pub fn snat_addresses(&self) -> &[A] {
        &self.snat
    }

    /// Bytes of heap memory the table holds (records, TCP windows, occupancy bitmap, index,
    /// SNAT addresses), fixed at construction: at capacity about 93.5 B per IPv4 flow and
    /// 129.5 B per IPv6 flow (module documentation, "Layout"). The ignored SYNs' side table
    /// is apart, not per flow ([`resync::IgnoredSyns::memory_bytes`], at most 106 496 B).
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.records.len() * size_of::<Record<A>>()
            + self.live.len() * size_of::<u64>()
            + self.index.slot_count() * size_of::<u64>()
            + self.snat.len() * size_of::<A>()
    }

    #[inline]
    fn hash(&self, key: &FlowKey<A>) -> u64 {
        self.hasher.hash(key)
    }

    /// Whether `id` names a live flow (a record in use; any `id`, in range or not). O(1).
    #[inline]
    #[must_use]
    pub fn is_live(&self, id: FlowId) -> bool {
        let id = id as usize;
        id < self.records.len() && self.live[id / 64] & (1 << (id % 64)) != 0
    }

    /// The flow one of whose tuples is `key`, and which tuple it is. Expected O(1): one hash,
    /// a few index slots, one record read on a hit.
    ///
    /// The deadline is not checked: an expired flow that [`Conntrack::expire`] has not reaped
    /// yet is returned, and the caller compares [`FlowState::deadline`] with its clock.
    #[inline]
    #[must_use]
    pub fn lookup(&self, key: &FlowKey<A>) -> Option<(FlowId, Direction)> {
        self.lookup_hashed(key, self.hash(key))
    }

    /// The table hash of `key` (keyed by this table's seed), for
    /// [`Conntrack::lookup_hashed`] and the prefetches: a burst's keys are hashed once,
    /// their index slots prefetched, then looked up (`pipeline::process_burst`). O(1).
    #[inline]
    #[must_use]
    pub fn hash_key(&self, key: &FlowKey<A>) -> u64 {
        self.hash(key)
    }

    /// [`Conntrack::lookup`] with the key's [`Conntrack::hash_key`] already computed. A
    /// `hash` that is not `key`'s gives a wrong answer (`None`, or a flow whose tuple is
    /// `key` found by luck), never a panic.
    #[inline]
    #[must_use]
    pub fn lookup_hashed(&self, key: &FlowKey<A>, hash: u64) -> Option<(FlowId, Direction)> {
        let (records, snat) = (&*self.records, &*self.snat);
        match self.index.find(hash, |tag| tag_matches(records, snat, tag, key)) {
            Probe::Found(tag) => Some(untag(tag)),
            Probe::Vacant(_) => None,
        }
    }

    /// [`Conntrack::lookup`] that, for a key not tracked, returns its [`Conntrack::hash_key`]
    /// and the [`Vacancy`] where its probe run ended, for [`Conntrack::insert_hashed`] to
    /// index it there without hashing it or walking the run again: the SNAT port search's
    /// reply tuples (the free one it finds is the one inserted). Expected O(1).
    #[inline]
    pub fn lookup_or_vacancy(&self, key: &FlowKey<A>) -> Result<(FlowId, Direction), (u64, Vacancy)> {
        let hash = self.hash(key);
        // The run by fingerprint alone first: no slot of it matching proves the key absent,
        // and the run ends where the full walk would end (the common case of a free SNAT
        // candidate, without the records' confirmation set up).
        match self.index.candidate(hash) {
            Probe::Vacant(slot) => Err((hash, Vacancy { slot: slot as u32, removals: self.removals })),
            Probe::Found(_) => self.lookup_or_vacancy_confirmed(key, hash),
        }
    }

    /// [`Conntrack::lookup_or_vacancy`] of a key whose probe run holds a fingerprint match:
    /// the run walked again with each match confirmed against its record. Out of line.
    #[inline(never)]
    fn lookup_or_vacancy_confirmed(&self, key: &FlowKey<A>, hash: u64) -> Result<(FlowId, Direction), (u64, Vacancy)> {
        let (records, snat) = (&*self.records, &*self.snat);
        match self.index.find(hash, |tag| tag_matches(records, snat, tag, key)) {
            Probe::Found(tag) => Ok(untag(tag)),
            Probe::Vacant(slot) => Err((hash, Vacancy { slot: slot as u32, removals: self.removals })),
        }
    }

    /// [`Conntrack::lookup_hashed`], using what [`Conntrack::prefetch_record`] said for this
    /// hash: a candidate flow whose tuple in that direction is `key` is the answer (a tuple
    /// belongs to one live flow at most), and a [`Vacancy`] that still holds proves the key
    /// absent; in either case the index is not probed. Same result as
    /// [`Conntrack::lookup_hashed`] for a key of a transport protocol (`key.protocol` never a
    /// free record's 0, which [`Conntrack::insert`] refuses): a record that holds such
    /// a key is live, so no separate liveness test (as [`Conntrack::lean`]).
    #[inline]
    #[must_use]
    pub fn lookup_candidate(
        &self,
        key: &FlowKey<A>,
        hash: u64,
        candidate: Option<Candidate>,
    ) -> Option<(FlowId, Direction)> {
        debug_assert_ne!(key.protocol, Record::<A>::FREE, "a key of no transport protocol");
        match candidate {
            Some(Candidate::Flow(id, direction))
                if self.records.get(id as usize).is_some_and(|r| r.matches(direction, key, &self.snat)) =>
            {
                debug_assert!(self.is_live(id));
                Some((id, direction))
            }
            Some(Candidate::Absent(v)) if self.holds(v) => {
                debug_assert_eq!(self.lookup_hashed(key, hash), None, "a vacancy of another key");
                None
            }
            _ => self.lookup_hashed(key, hash),
        }
    }

    /// Whether `v` is still where its key's probe run ends (see [`Vacancy`]).
    #[inline]
    fn holds(&self, v: Vacancy) -> bool {
        v.removals == self.removals && self.index.is_empty_at(v.slot as usize)
    }

    /// Starts loading the index slot where a lookup of `hash` begins (and the next cache line
    /// when the slot is near the end of its own); changes no result. O(1), no memory access
    /// beyond the hint.
    #[inline]
    pub fn prefetch_index(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// [`Conntrack::prefetch_index`] for a key that is probably not tracked (a SYN's, a new
    /// flow's reply tuple): the next cache line of the index too, where its probe run often
    /// ends. Changes no result. O(1).
    #[inline]
    pub fn prefetch_index_absent(&self, hash: u64) {
        self.index.prefetch_run(hash);
    }

    /// Reads the probe run of `hash` in the index (prefetched earlier by
    /// [`Conntrack::prefetch_index`]) by fingerprint alone and, for the first tuple whose
    /// fingerprint matches, starts loading its flow record and returns its id and direction:
    /// the flow a lookup of the key will almost certainly find. [`Candidate::Absent`] proves
    /// that no flow has a tuple with this hash (a new flow) and says where the run ends.
    /// Changes no result. Expected O(1).
    #[inline]
    pub fn prefetch_record(&self, hash: u64) -> Candidate {
        match self.index.candidate(hash) {
            Probe::Found(tag) => {
                let (id, direction) = untag(tag);
                // The record with its TCP windows (which a UDP or SCTP packet does not
                // read: the protocol is not known yet).
                crate::prefetch::prefetch_lines(&self.records[id as usize]);
                Candidate::Flow(id, direction)
            }
            Probe::Vacant(slot) => Candidate::Absent(Vacancy { slot: slot as u32, removals: self.removals }),
        }
    }

    /// Flow `id` as its record holds it now, whether or not it is live, for work ahead of a
    /// burst that must not fail when the flow went away in between (it is a hint: a freed
    /// record holds an old flow or nothing). O(1).
    ///
    /// # Panics
    ///
    /// If `id >= capacity`.
    #[inline]
    #[must_use]
    pub fn peek(&self, id: FlowId) -> Flow<A> {
        self.records[id as usize].unpack(&self.snat)
    }

    /// What forwarding a packet of flow `id` in `direction` will read, as the record holds it
    /// now (a hint, as [`Conntrack::peek`]): the destination the packet is translated to
    /// (the endpoint for the original direction, the client for replies) and the flow's
    /// state. O(1).
    ///
    /// # Panics
    ///
    /// If `id >= capacity`.
    #[inline]
    #[must_use]
    pub fn peek_destination(&self, id: FlowId, direction: Direction) -> (A, &FlowState) {
        let record = &self.records[id as usize];
        let to = match direction {
            Direction::Original => record.reply_src,
            Direction::Reply => record.original_src,
        };
        (to, &record.state)
    }

    /// Makes room for a new flow when the table is full, as Linux's `early_drop`
    /// (`nf_conntrack_core.c`) does: examines the flows indexed in the
    /// [`EARLY_DROP_SLOTS`] index slots from the home slot of `near` (the new flow's
    /// original tuple) and removes the first that is worth least — expired, never
    /// [`assured`](FlowState::assured) (a handshake never completed, a UDP flow never
    /// answered; Linux's `early_drop` criterion), or a TCP connection already closing
    /// (FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE: Linux's `tcp_can_early_drop`,
    /// which its garbage collector evicts when the table is nearly full). Returns the removed
    /// flow (the caller frees its SNAT port and counts the eviction), or `None` when every
    /// examined flow is assured and live: then the new flow is refused. O(1): at most
    /// [`EARLY_DROP_SLOTS`] slots and records.
    pub fn early_drop(&mut self, near: &FlowKey<A>, now_ns: u64) -> Option<Flow<A>> {
        let hash = self.hash(near);
        let records = &self.records;
        let victim = self
            .index
            .tags_near(hash, EARLY_DROP_SLOTS)
            .map(|tag| untag(tag).0)
            .find(|&id| evictable(&records[id as usize].state, now_ns))?;
        Some(self.remove(victim))
    }

    /// Whether, and how readily, flow `id` gives way to a new flow at `now_ns` when a
    /// resource it holds runs short (its SNAT port: `pipeline::flow`): `None` for a flow
    /// [`Conntrack::early_drop`] would keep (assured, live, not closing); else an order,
    /// lowest first — expired flows, then never-answered ones (a SYN flood's half-open
    /// flows, one-way UDP: issue 13's "unanswered flows are evicted first"), then closing
    /// TCP connections, each class from the one nearest its deadline (the oldest
    /// half-open flow, whose endpoint has most likely given up its own half-open
    /// connection). O(1): reads the flow's state.
    ///
    /// # Panics
    ///
    /// If `id >= capacity`.
    #[inline]
    #[must_use]
    pub fn eviction_order(&self, id: FlowId, now_ns: u64) -> Option<(u8, u32)> {
        let state = &self.records[id as usize].state;
        let class = if state.deadline.is_due(now_ns) {
            0
        } else if !state.assured() {
            1
        } else if evictable(state, now_ns) {
            2
        } else {
            return None;
        };
        Some((class, state.deadline.remaining_ms(now_ns)))
    }

    /// The flow `id`, unpacked: both tuples and the state. O(1).
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
    pub fn get(&self, id: FlowId) -> Flow<A> {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        self.records[id as usize].unpack(&self.snat)
    }

    /// The state of flow `id`, with the same contract as [`Conntrack::get`]; no copying.
    ///
    /// # Panics
    ///
    /// If `id >= capacity` (always), or if `id` is not live (debug builds).
    #[inline]
    #[must_use]
    pub fn state(&self, id: FlowId) -> &FlowState {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        &self.records[id as usize].state
    }

    /// The state of flow `id`, mutable, with the same contract as [`Conntrack::get`]. The
    /// tuples cannot change: the index is derived from them; to re-key a flow, remove it and
    /// insert the new one.
    ///
    /// # Panics
    ///
    /// If `id >= capacity` (always), or if `id` is not live (debug builds).
    #[inline]
    pub fn state_mut(&mut self, id: FlowId) -> &mut FlowState {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        &mut self.records[id as usize].state
    }

    /// The state and TCP windows of flow `id`, mutable, with the same contract as
    /// [`Conntrack::get`]: what [`track_tcp`] updates.
    ///
    /// # Panics
    ///
    /// If `id >= capacity` (always), or if `id` is not live (debug builds).
    #[inline]
    pub fn tcp_mut(&mut self, id: FlowId) -> (&mut FlowState, TcpWindowsMut<'_>) {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        let record = &mut self.records[id as usize];
        (&mut record.state, TcpWindowsMut::new(&mut record.bounds, &mut record.window_flags))
    }

    /// [`Conntrack::tcp_mut`] and the flow's view of the table's ignored SYNs ([`resync`];
    /// checked against the flow's client port and SNAT port): what [`track_ignored_tcp`]
    /// updates.
    ///
    /// # Panics
    ///
    /// As [`Conntrack::tcp_mut`].
    pub fn tcp_resync_mut(&mut self, id: FlowId) -> (&mut FlowState, TcpWindowsMut<'_>, resync::FlowSyn<'_>) {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        let record = &mut self.records[id as usize];
        let check = u32::from(record.original_src_port) << 16 | u32::from(record.reply_dst_port);
        (
            &mut record.state,
            TcpWindowsMut::new(&mut record.bounds, &mut record.window_flags),
            resync::FlowSyn::new(&mut self.ignored_syns, id, check),
        )
    }

    /// The table's ignored SYNs ([`resync`]): counts and memory.
    #[must_use]
    pub fn ignored_syns(&self) -> &resync::IgnoredSyns {
        &self.ignored_syns
    }

    /// The lean established path's view of the flow a burst found ahead: when record `id`
    /// is live and its tuple `direction` is `key` (what [`Conntrack::lookup_candidate`]
    /// confirms), its state and TCP windows, mutable, and the tuple a packet of `direction`
    /// leaves as: `reply.reversed()` for the original direction (SNAT address:port →
    /// endpoint), `original.reversed()` for replies (front door → client). `None` otherwise.
    /// Reads the record once, without unpacking the flow. O(1).
    #[inline]
    pub fn lean(
        &mut self,
        id: FlowId,
        direction: Direction,
        key: &FlowKey<A>,
    ) -> Option<(&mut FlowState, TcpWindowsMut<'_>, FlowKey<A>)> {
        let record = self.records.get_mut(id as usize)?;
        // A key's protocol is never a free record's (`Record::FREE`, which no transport
        // protocol is): a record that matches the key is live.
        debug_assert_ne!(key.protocol, Record::<A>::FREE);
        if !record.matches_wide(direction, key, &self.snat) {
            return None;
        }
        let out = match direction {
            Direction::Original => FlowKey {
                protocol: record.protocol,
                src_addr: *self.snat.get(usize::from(record.snat))?,
                src_port: record.reply_dst_port,
                dst_addr: record.reply_src,
                dst_port: record.reply_src_port,
            },
            Direction::Reply => FlowKey {
                protocol: record.protocol,
                src_addr: record.original_dst,
                src_port: record.original_dst_port,
                dst_addr: record.original_src,
                dst_port: record.original_src_port,
            },
        };
        Some((&mut record.state, TcpWindowsMut::new(&mut record.bounds, &mut record.window_flags), out))
    }

    /// The TCP windows of flow `id` (tests, diagnostics), with the same contract as
    /// [`Conntrack::get`].
    ///
    /// # Panics
    ///
    /// If `id >= capacity` (always), or if `id` is not live (debug builds).
    #[must_use]
    pub fn tcp_windows(&self, id: FlowId) -> TcpWindows {
        debug_assert!(self.is_live(id), "conntrack: flow id {id} is not live");
        let record = &self.records[id as usize];
        TcpWindows { bounds: record.bounds, flags: record.window_flags }
    }

    /// Tracks `flow`, indexing both [`Flow::original`] and [`Flow::reply`], and returns its id.
    /// Expected O(1); allocates nothing.
    ///
    /// # Errors
    ///
    /// - [`InsertError::NotFullNat`] if the reply's destination is not a SNAT address of this
    ///   table or its protocol differs from the original's;
    /// - [`InsertError::Exists`] if either tuple is already indexed, or if the two tuples are
    ///   equal (checked before fullness: an existing flow is reported even when the table is
    ///   full);
    /// - [`InsertError::Full`] if [`Conntrack::len`] == [`Conntrack::capacity`].
    ///
    /// On error the table is unchanged.
    pub fn insert(&mut self, flow: Flow<A>) -> Result<FlowId, InsertError> {
        self.insert_hashed(&flow, self.hash(&flow.original), None, ReplyHint::default())
    }

    /// [`Conntrack::insert`] with the original tuple's [`Conntrack::hash_key`] already
    /// computed (by the lookup that missed) and, optionally, the [`Vacancy`]
    /// [`Conntrack::prefetch_record`] found for it: while it holds, the original tuple goes
    /// there without its probe run being walked again. A hash or vacancy that is not the
    /// tuple's indexes it where no lookup finds it (a wrong answer, never a panic). `reply`
    /// is what the caller knows of the reply tuple ([`ReplyHint`]: its hash and vacancy,
    /// the position of its SNAT address), each part checked or used as the original
    /// tuple's.
    ///
    /// # Errors
    /// As [`Conntrack::insert`].
    #[inline]
    pub fn insert_hashed(
        &mut self,
        flow: &Flow<A>,
        original_hash: u64,
        vacancy: Option<Vacancy>,
        reply: ReplyHint,
    ) -> Result<FlowId, InsertError> {
        debug_assert_eq!(original_hash, self.hash(&flow.original), "a hash of another tuple");
        let snat = match reply.snat.map(usize::from).filter(|&i| self.snat.get(i) == Some(&flow.reply.dst_addr)) {
            Some(i) => i,
            None => self.snat_position(flow.reply.dst_addr).ok_or(InsertError::NotFullNat)?,
        };
        if flow.reply.protocol != flow.original.protocol || flow.original.protocol == Record::<A>::FREE {
            return Err(InsertError::NotFullNat);
        }
        if flow.original == flow.reply {
            return Err(InsertError::Exists);
        }
        let (reply_hash, reply_vacancy) = match reply.slot {
            Some((hash, v)) => (hash, Some(v)),
            None => (self.hash(&flow.reply), None),
        };
        debug_assert_eq!(reply_hash, self.hash(&flow.reply), "a hash of another tuple");
        let original_pos = match vacancy.filter(|&v| self.holds(v)) {
            Some(v) => v.slot as usize,
            None => self.vacant(original_hash, &flow.original).ok_or(InsertError::Exists)?,
        };
        debug_assert_eq!(self.vacant(original_hash, &flow.original), Some(original_pos), "a vacancy of another tuple");
        let reply_pos = match reply_vacancy.filter(|&v| self.holds(v)) {
            Some(v) => v.slot as usize,
            None => self.vacant(reply_hash, &flow.reply).ok_or(InsertError::Exists)?,
        };
        debug_assert_eq!(self.vacant(reply_hash, &flow.reply), Some(reply_pos), "a vacancy of another tuple");
        let id = self.allocate().ok_or(InsertError::Full)?;
        // `snat < MAX_SNAT_ADDRESSES`, checked in `new`.
        self.records[id as usize] = Record::pack(flow, snat as u8);
        self.live[id as usize / 64] |= 1 << (id % 64);
        self.len += 1;
        // Empty either way: the vacancy held (`holds`), or `vacant` found it.
        self.index.place_vacant(original_pos, original_hash, tag(id, Direction::Original));
        // If the original tuple took `reply_pos`, `place` moves on to the next empty slot,
        // which is still in the reply tuple's probe run.
        self.index.place(reply_pos, reply_hash, tag(id, Direction::Reply));
        Ok(id)
    }

    /// Where `key` (of hash `hash`) would be indexed, the empty slot that ends its probe run;
    /// `None` when it is indexed already. For [`Conntrack::insert_hashed`] without a
    /// [`Vacancy`] that holds: out of line, so that the insert with one keeps no registers
    /// for the walk. Expected O(1).
    #[inline(never)]
    fn vacant(&self, hash: u64, key: &FlowKey<A>) -> Option<usize> {
        let (records, snat) = (&*self.records, &*self.snat);
        match self.index.find(hash, |t| tag_matches(records, snat, t, key)) {
            Probe::Vacant(pos) => Some(pos),
            Probe::Found(_) => None,
        }
    }

    /// The position of SNAT address `address` in this table's list, searched for (the
    /// insert without a position hint that holds). Out of line, as [`Conntrack::vacant`].
    #[inline(never)]
    fn snat_position(&self, address: A) -> Option<usize> {
        self.snat.iter().position(|a| *a == address)
    }

    /// Takes a free record: the most recently freed one (warm in cache), else one never used.
    #[inline]
    fn allocate(&mut self) -> Option<FlowId> {
        if self.free_head != NO_FREE {
            let id = self.free_head;
            self.free_head = self.records[id as usize].state.frontend;
            Some(id)
        } else if (self.never_used as usize) < self.records.len() {
            self.never_used += 1;
            Some(self.never_used - 1)
        } else {
            None
        }
    }

    /// Gives live flow `id`'s record to `flow`, a new flow on the very same two tuples (a
    /// connection reopened on a closed one's tuple, to the same endpoint through the same
    /// SNAT address and port): the record written as [`Conntrack::insert_hashed`] writes a new
    /// flow's (the state `flow`'s, the TCP windows reset), its index entries kept. What
    /// [`Conntrack::remove`] and then an insert of `flow` would leave — the insert takes the
    /// record the removal freed last, so the same id — without unindexing and indexing the
    /// same two tuples again. O(1).
    ///
    /// # Panics
    ///
    /// If `id` is not live, in every build (as [`Conntrack::remove`]); if `flow`'s tuples
    /// are not the record's, in debug builds.
    pub fn renew(&mut self, id: FlowId, flow: &Flow<A>) {
        assert!(self.is_live(id), "conntrack: renew of flow id {id}, which is not live");
        let record = &mut self.records[id as usize];
        debug_assert!(
            record.original() == flow.original && record.reply(&self.snat) == flow.reply,
            "conntrack: renew of flow id {id} with other tuples"
        );
        *record = Record::pack(flow, record.snat);
        self.ignored_syns.forget(id);
    }

    /// Stops tracking flow `id`: unindexes both tuples, frees the record for reuse and returns
    /// its last contents (the caller releases the SNAT port in [`Flow::reply`]). Expected O(1).
    ///
    /// # Panics
    ///
    /// If `id` is not live (a stale or out-of-range id), in every build: freeing a record
    /// twice would corrupt the table.
    pub fn remove(&mut self, id: FlowId) -> Flow<A> {
        assert!(self.is_live(id), "conntrack: remove of flow id {id}, which is not live");
        let flow = self.records[id as usize].unpack(&self.snat);
        let original_hash = self.hash(&flow.original);
        let reply_hash = self.hash(&flow.reply);
        // `erase` needs the home slot of another entry only when that entry's stored
        // displacement saturated; then it is re-hashed from its record.
        let (records, snat, hasher, slots) = (&self.records, &self.snat, self.hasher, self.index.slot_count());
        let home = |t: u32| index::home(slots, hasher.hash(&key_of(records, snat, t)));
        self.index.erase(original_hash, tag(id, Direction::Original), home);
        self.index.erase(reply_hash, tag(id, Direction::Reply), home);
        self.live[id as usize / 64] &= !(1 << (id % 64));
        self.records[id as usize].protocol = Record::<A>::FREE;
        self.records[id as usize].state.frontend = self.free_head;
        self.free_head = id;
        self.len -= 1;
        self.removals = self.removals.wrapping_add(1);
        self.ignored_syns.forget(id);
        flow
    }

    /// Reaps idle flows: examines the next `min(budget, capacity)` records from a rotating
    /// cursor, removes every live flow among them whose deadline is due at `now_ns`, calls
    /// `on_expired` once with each removed flow (after it has been removed; the caller frees
    /// its SNAT port), and returns how many it removed.
    ///
    /// Work is O(budget) record examinations (free records cost a bit test, and runs of free
    /// records are skipped a 64-bit word at a time) plus O(1) expected per removal. Calling it
    /// `⌈capacity / budget⌉` times sweeps the whole table, so a flow is reaped at most one sweep
    /// after its deadline. `budget == 0` does nothing.
    pub fn expire(&mut self, now_ns: u64, budget: usize, mut on_expired: impl FnMut(&Flow<A>)) -> usize {
        let capacity = self.records.len();
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
                if self.records[id].state.deadline.is_due(now_ns) {
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

    /// Sets every flow's [`FlowState::table_epoch`] to [`FlowState::NEVER_VALIDATED`], so
    /// that each is revalidated at its next packet: for a worker whose 16-bit table epochs
    /// wrap (`pipeline::WorkerState`), before it reuses epoch 1, so that no flow checked
    /// against an old table with the same number passes for checked against the new one.
    /// O(records ever used), touching each once: at most once per 65 535 table adoptions.
    pub fn forget_table_epochs(&mut self) {
        let used = self.never_used as usize;
        for record in &mut self.records[..used] {
            record.state.table_epoch = FlowState::NEVER_VALIDATED;
        }
    }

    /// Every live flow with its id, in id order. O(capacity); for tests and diagnostics, not
    /// for the packet path.
    pub fn iter(&self) -> impl Iterator<Item = (FlowId, Flow<A>)> + '_ {
        (0..self.never_used).filter(|&id| self.is_live(id)).map(|id| (id, self.records[id as usize].unpack(&self.snat)))
    }
}
