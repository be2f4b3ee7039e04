//! The SYNs a worker let through on a TCP flow it holds as open (Linux's `sIG` cells of
//! `tcp_conntracks`: a client's SYN on SYN_RECV, ESTABLISHED, FIN_WAIT, CLOSE_WAIT or
//! LAST_ACK), kept beside the flow table so that the endpoint's answer can bring the flow
//! back in step: Linux's `last_dir`/`last_end`/`last_win`/`last_wscale`/`last_flags`
//! (`struct ip_ct_tcp`, `net/netfilter/nf_conntrack_proto_tcp.c`, the
//! `TCP_CONNTRACK_IGNORE` case of `nf_conntrack_tcp_packet`), without a byte in the flow's
//! record.
//!
//! Why: a client that crashed, or whose RST never passed the gateway, reuses its port while
//! the gateway still holds the old connection as ESTABLISHED and the endpoint no longer has
//! it. The new SYN does not fit the old connection, so it is ignored (forwarded along the
//! flow's translation, nothing changed); if the endpoint answers it with a SYN+ACK that
//! acknowledges exactly that SYN (SEG.ACK = the SYN's SEG.SEQ + SEG.LEN), client and
//! endpoint are in step and the gateway is not: [`super::track_ignored_tcp`] then resets the flow to
//! the new connection (SYN_RECV, the client's window from the recorded SYN, the endpoint's
//! from the SYN+ACK), as Linux does.
//!
//! # Contract
//!
//! - [`IgnoredSyns`] is a fixed table of at most [`IGNORED_SYNS`] entries, allocated by
//!   [`IgnoredSyns::new`] and never grown: one per flow id at most, holding the
//!   [`IgnoredSyn`] (the SYN's end, window and Window Scale option), a check of the flow's
//!   tuple, and when the entry ages out (`[conntrack] tcp_syn_sent_timeout_s`, the time a
//!   client's SYN is waited for).
//! - Entries are found by flow id (buckets of a chained hash on the id, 2 B per bucket) and
//!   taken in ring order, so the table holds at most the last [`IGNORED_SYNS`] flows'
//!   SYNs: a new one overwrites, oldest first, the entry recorded that many records before
//!   ([`IgnoredSyns::overwritten`] counts the overwrites of entries that had not aged out).
//!   A record freed by the flow table drops its entry ([`IgnoredSyns::forget`]), and an entry
//!   is used only if its tuple check is the flow's: a reused flow id never inherits another
//!   flow's SYN.
//! - Only the general path's SYN on an open flow and SYN+ACK from the endpoint consult the
//!   table; the lean established path never does. Each costs O(1) expected (a chain of about
//!   one entry).
//!
//! Differences from Linux: Linux's `last_*` fields are overwritten by every in-window
//! segment of the flow (`last_index`), so a segment of the old connection between the
//! ignored SYN and the SYN+ACK cancels the resynchronisation; here only an ignored SYN+ACK
//! does (the lean path, which must not pay for a lookup, forwards the others). The SYN+ACK
//! must still acknowledge exactly the recorded SYN. The RST rule that Linux applies with the
//! same fields (a RST whose SEG.ACK is the ignored SYN's end skips the window checks) is not
//! modelled: such a RST is judged by the window rules alone.
//!
//! Memory: [`IgnoredSyns::memory_bytes`], 26 B per entry (a 24-byte entry and a 2-byte
//! bucket): 106 496 B per table of 4 096 entries, one table per address family per worker
//! (212 992 B per worker), outside the per-flow budget (`super`, "Layout").

use super::{Deadline, FlowId};

/// Entries per table: ignored SYNs awaiting their SYN+ACK at once per worker and family.
/// At the default SYN_SENT timeout (120 s) about 34 per second before the oldest live ones
/// are overwritten.
pub const IGNORED_SYNS: usize = 4096;

/// What [`IgnoredSyns`] keeps of an ignored SYN (Linux `last_end`, `last_win`,
/// `last_wscale` and the `IP_CT_TCP_FLAG_WINDOW_SCALE` bit of `last_flags`; the direction is
/// always the client's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IgnoredSyn {
    /// SEG.SEQ + SEG.LEN of the SYN: what the endpoint's SYN+ACK acknowledges.
    pub end: u32,
    /// SEG.WND of the SYN (never scaled, RFC 7323 § 2.2).
    pub window: u16,
    /// The SYN's Window Scale option, if it carried one.
    pub wscale: Option<u8>,
}

/// Ends a bucket's chain; marks a free entry's `next`.
const NIL: u16 = u16::MAX;

/// One recorded SYN: 24 bytes.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The flow, or [`FREE`] for an entry not in use.
    id: FlowId,
    /// The flow's tuple check ([`super::Conntrack`] derives it from the record).
    check: u32,
    /// When the entry ages out.
    expires: Deadline,
    /// The SYN's end.
    end: u32,
    /// The SYN's window.
    window: u16,
    /// The next entry of the bucket's chain, or [`NIL`].
    next: u16,
    /// The Window Scale shift, or [`NO_WSCALE`].
    wscale: u8,
}

const FREE: FlowId = FlowId::MAX;
const NO_WSCALE: u8 = u8::MAX;

const _: () = assert!(std::mem::size_of::<Entry>() == 24, "ignored SYN entry: 24 B");
const _: () = assert!(IGNORED_SYNS < NIL as usize, "entry indices fit u16 below NIL");

impl Entry {
    const VACANT: Entry =
        Entry { id: FREE, check: 0, expires: Deadline(0), end: 0, window: 0, next: NIL, wscale: NO_WSCALE };

    fn syn(&self) -> IgnoredSyn {
        IgnoredSyn { end: self.end, window: self.window, wscale: (self.wscale != NO_WSCALE).then_some(self.wscale) }
    }
}

/// A worker's ignored SYNs for one flow table: see the module documentation.
pub struct IgnoredSyns {
    /// The entries, reused in ring order.
    entries: Box<[Entry]>,
    /// Head of each bucket's chain (bucket = flow id mod the entry count), or [`NIL`].
    heads: Box<[u16]>,
    /// The entry the next new record takes.
    cursor: usize,
    /// Entries in use (aged out or not).
    used: usize,
    /// Entries overwritten before they aged out.
    overwritten: u64,
    /// Flows brought back in step by a SYN+ACK answering their ignored SYN.
    resyncs: u64,
}

impl std::fmt::Debug for IgnoredSyns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IgnoredSyns")
            .field("entries", &self.entries.len())
            .field("used", &self.used)
            .field("overwritten", &self.overwritten)
            .field("resyncs", &self.resyncs)
            .finish_non_exhaustive()
    }
}

impl IgnoredSyns {
    /// A table of `entries` entries (a power of two, at most [`IGNORED_SYNS`]; 0 gives a
    /// table that records nothing), all memory allocated now.
    ///
    /// # Panics
    /// If `entries` is not 0 or a power of two, or exceeds [`IGNORED_SYNS`].
    #[must_use]
    pub fn new(entries: usize) -> Self {
        assert!(
            entries == 0 || (entries.is_power_of_two() && entries <= IGNORED_SYNS),
            "{entries} ignored SYN entries"
        );
        Self {
            entries: vec![Entry::VACANT; entries].into_boxed_slice(),
            heads: vec![NIL; entries].into_boxed_slice(),
            cursor: 0,
            used: 0,
            overwritten: 0,
            resyncs: 0,
        }
    }

    /// The table a flow table of `capacity` flows gets: [`IGNORED_SYNS`] entries, fewer for
    /// a smaller flow table (no more than it has flows, rounded up to a power of two).
    #[must_use]
    pub fn for_capacity(capacity: usize) -> Self {
        Self::new(if capacity == 0 { 0 } else { capacity.next_power_of_two().min(IGNORED_SYNS) })
    }

    /// Bytes of heap memory the table holds: 26 per entry.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.entries.len() * std::mem::size_of::<Entry>() + self.heads.len() * std::mem::size_of::<u16>()
    }

    /// Entries in use (some possibly aged out, not yet reused).
    #[must_use]
    pub fn len(&self) -> usize {
        self.used
    }

    /// Whether no entry is in use.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Entries overwritten, the table full, before they aged out.
    #[must_use]
    pub fn overwritten(&self) -> u64 {
        self.overwritten
    }

    /// Flows brought back in step ([`FlowSyn::take_answered`] found the SYN a SYN+ACK
    /// acknowledged).
    #[must_use]
    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }

    #[inline]
    fn bucket(&self, id: FlowId) -> usize {
        id as usize & (self.heads.len() - 1)
    }

    /// The entry of flow `id`, if any.
    fn find(&self, id: FlowId) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mut at = self.heads[self.bucket(id)];
        while at != NIL {
            let e = &self.entries[usize::from(at)];
            if e.id == id {
                return Some(usize::from(at));
            }
            at = e.next;
        }
        None
    }

    /// Unlinks entry `at` (in use) from its bucket and frees it.
    fn unlink(&mut self, at: usize) {
        let bucket = self.bucket(self.entries[at].id);
        let next = self.entries[at].next;
        if usize::from(self.heads[bucket]) == at {
            self.heads[bucket] = next;
        } else {
            let mut prev = usize::from(self.heads[bucket]);
            while usize::from(self.entries[prev].next) != at {
                prev = usize::from(self.entries[prev].next);
            }
            self.entries[prev].next = next;
        }
        self.entries[at] = Entry::VACANT;
        self.used -= 1;
    }

    /// Records `syn`, ignored on flow `id` (tuple check `check`) at `now_ns`, until
    /// `ttl_ns` later: replaces the flow's entry if it has one (a retransmitted or newer
    /// SYN, as Linux overwrites `last_*`), else takes the next entry in ring order,
    /// overwriting it (counted, unless it had aged out) when it is in use.
    pub fn record(&mut self, id: FlowId, check: u32, syn: IgnoredSyn, now_ns: u64, ttl_ns: u64) {
        if self.entries.is_empty() {
            return;
        }
        let at = match self.find(id) {
            Some(at) => at,
            None => {
                let at = self.cursor;
                self.cursor = (self.cursor + 1) & (self.entries.len() - 1);
                if self.entries[at].id != FREE {
                    if !self.entries[at].expires.is_due(now_ns) {
                        self.overwritten += 1;
                    }
                    self.unlink(at);
                }
                let bucket = self.bucket(id);
                self.entries[at].next = self.heads[bucket];
                self.heads[bucket] = at as u16;
                self.used += 1;
                at
            }
        };
        let e = &mut self.entries[at];
        e.id = id;
        e.check = check;
        e.expires = Deadline::after(now_ns, ttl_ns);
        e.end = syn.end;
        e.window = syn.window;
        e.wscale = syn.wscale.unwrap_or(NO_WSCALE);
    }

    /// Removes flow `id`'s entry and returns its SYN if the entry is the flow's (tuple check
    /// `check`) and has not aged out at `now_ns`.
    pub fn take(&mut self, id: FlowId, check: u32, now_ns: u64) -> Option<IgnoredSyn> {
        let at = self.find(id)?;
        let e = self.entries[at];
        self.unlink(at);
        (e.check == check && !e.expires.is_due(now_ns)).then(|| e.syn())
    }

    /// Drops flow `id`'s entry, if any: its record was freed. O(1) when the table is empty.
    #[inline]
    pub fn forget(&mut self, id: FlowId) {
        if self.used != 0 {
            if let Some(at) = self.find(id) {
                self.unlink(at);
            }
        }
    }
}

/// One flow's view of its table's [`IgnoredSyns`], lent by
/// [`super::Conntrack::tcp_resync_mut`] with the flow's id and tuple check: what
/// [`super::track_ignored_tcp`] records an ignored SYN in and looks a SYN+ACK's answer up in.
#[derive(Debug)]
pub struct FlowSyn<'a> {
    syns: &'a mut IgnoredSyns,
    id: FlowId,
    check: u32,
}

impl<'a> FlowSyn<'a> {
    /// Flow `id`'s (tuple check `check`) view of `syns`.
    #[inline(always)]
    #[must_use]
    pub fn new(syns: &'a mut IgnoredSyns, id: FlowId, check: u32) -> Self {
        Self { syns, id, check }
    }

    /// Records the client's `syn`, ignored at `now_ns`, for `ttl_ns` ([`IgnoredSyns::record`]).
    pub fn record(&mut self, syn: IgnoredSyn, now_ns: u64, ttl_ns: u64) {
        self.syns.record(self.id, self.check, syn, now_ns, ttl_ns);
    }

    /// For an ignored SYN+ACK from the endpoint acknowledging `ack` at `now_ns`: the flow's
    /// recorded SYN if the SYN+ACK answers it (`ack` is its end; counted in
    /// [`IgnoredSyns::resyncs`]). The entry is dropped either way: as Linux's `last_*`, it
    /// describes the last ignored segment, which this SYN+ACK now is.
    pub fn take_answered(&mut self, ack: u32, now_ns: u64) -> Option<IgnoredSyn> {
        let syn = self.syns.take(self.id, self.check, now_ns).filter(|s| s.end == ack)?;
        self.syns.resyncs += 1;
        Some(syn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const TTL: u64 = 120 * S;

    fn syn(end: u32) -> IgnoredSyn {
        IgnoredSyn { end, window: 64240, wscale: Some(7) }
    }

    /// Every chain holds exactly the entries in use, each in its own bucket.
    fn check_invariants(t: &IgnoredSyns) {
        let mut seen = 0;
        for (b, &head) in t.heads.iter().enumerate() {
            let mut at = head;
            while at != NIL {
                let e = &t.entries[usize::from(at)];
                assert_ne!(e.id, FREE);
                assert_eq!(t.bucket(e.id), b);
                seen += 1;
                at = e.next;
            }
        }
        assert_eq!(seen, t.used);
        assert_eq!(t.entries.iter().filter(|e| e.id != FREE).count(), t.used);
    }

    #[test]
    fn a_recorded_syn_is_found_once_by_its_answer_only() {
        let mut t = IgnoredSyns::new(8);
        t.record(3, 77, syn(1000), 0, TTL);
        assert_eq!(t.len(), 1);
        assert_eq!(t.take(3, 77, S), Some(syn(1000)));
        assert_eq!(t.take(3, 77, S), None, "taken");
        // A SYN+ACK that does not answer the SYN drops it all the same (Linux's `last_*`).
        let mut view = FlowSyn::new(&mut t, 3, 77);
        view.record(syn(1000), 0, TTL);
        assert_eq!(view.take_answered(999, S), None);
        assert_eq!(view.take_answered(1000, S), None, "dropped by the SYN+ACK before");
        view.record(syn(1000), 0, TTL);
        assert_eq!(view.take_answered(1000, S), Some(syn(1000)));
        assert_eq!((t.resyncs(), t.len()), (1, 0));
        check_invariants(&t);
    }

    #[test]
    fn a_retransmitted_syn_replaces_the_flows_entry() {
        let mut t = IgnoredSyns::new(8);
        t.record(3, 77, syn(1000), 0, TTL);
        t.record(3, 77, IgnoredSyn { end: 5000, window: 1, wscale: None }, S, TTL);
        assert_eq!(t.len(), 1);
        assert_eq!(t.take(3, 77, 2 * S), Some(IgnoredSyn { end: 5000, window: 1, wscale: None }));
    }

    #[test]
    fn entries_age_out_after_their_ttl() {
        let mut t = IgnoredSyns::new(8);
        t.record(3, 77, syn(1000), 0, TTL);
        t.record(4, 78, syn(2000), 0, TTL);
        assert_eq!(t.take(3, 77, TTL - 1_000_000), Some(syn(1000)));
        assert_eq!(t.take(4, 78, TTL), None, "aged out");
        assert!(t.is_empty());
        // The ring overwrites an aged-out entry without counting it.
        let mut t = IgnoredSyns::new(2);
        t.record(1, 0, syn(1), 0, TTL);
        t.record(2, 0, syn(2), 0, TTL);
        t.record(3, 0, syn(3), TTL, TTL);
        assert_eq!(t.overwritten(), 0);
        check_invariants(&t);
    }

    #[test]
    fn a_full_table_overwrites_the_oldest_and_counts_it() {
        let mut t = IgnoredSyns::new(4);
        for id in 0..4 {
            t.record(id * 4, id, syn(id), u64::from(id) * S, TTL); // one bucket: a chain of 4
        }
        check_invariants(&t);
        t.record(100, 9, syn(100), 5 * S, TTL);
        assert_eq!((t.len(), t.overwritten()), (4, 1));
        assert_eq!(t.take(0, 0, 6 * S), None, "the oldest was overwritten");
        for id in 1..4 {
            assert_eq!(t.take(id * 4, id, 6 * S), Some(syn(id)), "{id}");
        }
        assert_eq!(t.take(100, 9, 6 * S), Some(syn(100)));
        check_invariants(&t);
    }

    #[test]
    fn a_freed_or_reused_flow_id_does_not_inherit_the_syn() {
        let mut t = IgnoredSyns::new(8);
        t.record(3, 77, syn(1000), 0, TTL);
        t.forget(3);
        assert_eq!(t.take(3, 77, S), None, "forgotten with its record");
        t.record(3, 77, syn(1000), 0, TTL);
        assert_eq!(t.take(3, 78, S), None, "another flow in the same record");
        t.forget(5);
        assert!(t.is_empty());
    }

    #[test]
    fn an_empty_table_records_nothing() {
        let mut t = IgnoredSyns::for_capacity(0);
        t.record(0, 0, syn(1), 0, TTL);
        assert_eq!((t.take(0, 0, 0), t.memory_bytes()), (None, 0));
        assert_eq!(IgnoredSyns::for_capacity(5).memory_bytes(), 8 * 26);
        assert_eq!(IgnoredSyns::for_capacity(1 << 20).memory_bytes(), 106_496);
    }

    proptest::proptest! {
        /// Any sequence of records, takes and forgets keeps every chain consistent, and the
        /// table answers as a map from flow id to its last SYN that keeps at most the last
        /// `entries` new records (a new record takes the ring's next entry, whoever holds it).
        #[test]
        fn behaves_as_a_bounded_map(ops in proptest::collection::vec((0u8..3, 0u32..24, 0u32..4), 1..300)) {
            let mut t = IgnoredSyns::new(8);
            let mut model: Vec<(FlowId, u32, u32, usize)> = Vec::new(); // (id, check, end, ring position)
            let mut cursor = 0;
            for (i, (op, id, check)) in ops.into_iter().enumerate() {
                let end = i as u32;
                match op {
                    0 => {
                        t.record(id, check, syn(end), 0, TTL);
                        if let Some(m) = model.iter_mut().find(|m| m.0 == id) {
                            (m.1, m.2) = (check, end);
                        } else {
                            model.retain(|m| m.3 != cursor);
                            model.push((id, check, end, cursor));
                            cursor = (cursor + 1) % 8;
                        }
                    }
                    1 => {
                        let want = model.iter().position(|m| m.0 == id).map(|p| model.remove(p));
                        let got = t.take(id, check, S);
                        proptest::prop_assert_eq!(got.map(|s| s.end), want.filter(|m| m.1 == check).map(|m| m.2));
                    }
                    _ => {
                        t.forget(id);
                        model.retain(|m| m.0 != id);
                    }
                }
                check_invariants(&t);
                proptest::prop_assert_eq!(t.len(), model.len());
            }
        }
    }
}
