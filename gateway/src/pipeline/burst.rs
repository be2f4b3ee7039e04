//! Burst processing that overlaps memory latency, as DPDK and VPP fast paths do
//! ([`process_burst`]). Each frame goes through stages, each of which starts the memory loads
//! the next one needs, so the cache misses of many frames are in flight together instead of
//! one after another (VPP's dual/quad loop and
//! `vlib_prefetch_buffer_header`, DPDK's `rte_prefetch0` ahead of `rte_hash_lookup_bulk`):
//!
//! 1. the frame is parsed far enough to know its flow key (the common frame, untagged
//!    to the port's own MAC, at fixed offsets: [`link::receive_untagged`]); the key is
//!    hashed and its conntrack index slot prefetched (with the next index line for a TCP
//!    SYN, whose probe run goes on to an empty slot);
//! 2. its probe run is read by fingerprint alone
//!    ([`crate::conntrack::Conntrack::prefetch_record`]): a flow record it names is
//!    prefetched; none proves the packet opens a new flow, whose front door's index line is
//!    prefetched ([`Table::prefetch_frontend`]);
//! 3. an established flow's record is read to find where the packet will go: the next
//!    hop's neighbour slot (a lean frame's only when the hop is on-link: the router's entry
//!    is read once a burst) and the front door's counters are prefetched, and the route is
//!    handed to the general path (which needs it where the flow's direction was never
//!    routed: [`super::flow::egress`]). A new flow goes on down the table, one dependent
//!    load per stage: the front-door record (at the position its index line names, which
//!    the next stage confirms without searching the line again), the service record, the
//!    Maglev ring slot, the chosen endpoint's record, and last the endpoint's next hop, the
//!    front door's counters and the conntrack index slot its reply tuple will take (with
//!    the SNAT port the allocation would give it now);
//! 4. the frame is processed by [`process`].
//!
//! The burst goes in chunks of [`PREFETCH_WINDOW`] frames, and each chunk through the
//! stages pass by pass (stage 2 over its frames, the next chunk's stage 1, a new flow's
//! further stages one pass per visit, stage 3, then the processing in order), so that every
//! load has the work of the rest of the chunk (about `PREFETCH_WINDOW` frames' worth of one
//! stage or the next) to arrive before the next stage reads it, and a stage costs a frame
//! no range checks or slot arithmetic (a software pipeline over the whole burst, frame `i`'s
//! stage `s` at step `i + s·d`, paid both on every step). Two chunks are in flight: the
//! next chunk's stage 1 sits between this chunk's stages 2 and 3, where the flow records
//! that stage 2 asked for would otherwise be read at once (at 1 M flows an established
//! packet waited for them: docs/optimisation-log.md, "Two chunks in flight"), and its own
//! index lines have this chunk's processing to arrive. Only the burst's first chunk's
//! stage 1 waits for nothing.
//!
//! IPv4 frames (TCP, UDP, SCTP) are hinted against the worker's IPv4 conntrack, IPv6 frames
//! (TCP and UDP, after any extension headers) against its IPv6 one; fragments and everything
//! else are processed without a hint. Frames the lean path ([`lean`]) may take go through
//! the same stages on compact hints ([`LeanFrame`]), one mask of them per family: an IPv4
//! one's on the stack, an IPv6 one's (larger) in `st.hints.lean6`.
//!
//! The results are exactly those of calling [`process`] on each frame in order: the early
//! stages change nothing but the cache (prefetches are hints, and what stage 3 reads may be
//! stale by the time the frame is processed without harm), and what they hand to
//! [`process`] ([`FrameHints`]) is used only when the full parse finds the same key the early
//! parse did: the hash; the flow found ahead, only if its record is still live and holds
//! the key ([`crate::conntrack::Conntrack::lookup_candidate`]: an earlier frame of the burst
//! may have removed or replaced it); for a new flow, where its probe run ended, only while no
//! flow was removed and that slot is still empty ([`crate::conntrack::Vacancy`]); a new
//! flow's front door and ring endpoint, which depend on nothing but the key and the burst's
//! table; the route, checked against its destination. A plain SYN's segment
//! ([`FlowHint::V4`]), which stage 1 took whole after every check the general parse makes of
//! it, stands for that parse ([`ipv4::hinted_syn`]): the frame's bytes do not change
//! between the two, as for [`FrameHints::l3_checked`].

use std::net::{Ipv4Addr, Ipv6Addr};

use super::family::Family;
use super::hint::{FlowHint, FrameHints, HintRing, LeanFrame, NewFlowHint, RouteHint, PREFETCH_WINDOW};
use super::link;
use super::{backend, ipv4, ipv6, lean, process, Meta, Verdict, WorkerState};
use crate::conntrack::{Candidate, Conntrack, Direction, FlowId, FlowKey, Vacancy};
use crate::host::Host;
use crate::scheduler::Scheduler;
use crate::table::layout;
use crate::table::{FrontendHash, Table};
use crate::wire::{EtherType, IpProtocol};

// `PREFETCH_WINDOW` lives in `hint`, with the ring of hint slots it sizes.
const _: () = assert!(PREFETCH_WINDOW <= 32, "process_burst keeps a chunk's lean frames and new flows in 32-bit masks");

/// How far the prefetches of a frame have come by stage 2: what the next stage reads (it
/// was prefetched by the previous one).
#[derive(Clone, Copy, Debug)]
enum Ahead {
    /// Nothing (more) to prefetch: not a flow frame, or done.
    Done,
    /// A flow the lookup will almost certainly find: its record is on its way.
    Flow(FlowId, Direction),
    /// No flow has the key (a new flow): its front door's index line is on its way (and
    /// where the key's probe run ended, which the frame's hints hold too); the new flow's
    /// visits ([`visit_new_flows`]) go on from there.
    Frontend(FrontendHash, Vacancy),
}

/// Processes a burst: `verdicts[i]` becomes what `process(now, frames[i], metas[i], ..)`
/// returns, frame by frame in order, for the first `min(frames, metas, verdicts)` frames;
/// the state ends as `process` would leave it, but for one internal number: the burst
/// gives `table` the worker's epoch number at its start ([`WorkerState::table_epoch`], for
/// the lean path's check), where `process` gives it when a frame first reads the table, so
/// a burst of no frames, or of frames dropped before reading it, numbers a table that
/// frame-by-frame processing would not have (a flow's `table_epoch` only says "validated
/// against this table"; the numbers mean nothing outside the worker). Pure in the same
/// sense as [`process`]: no I/O, no clock, no allocation (the hints live in `st`: two
/// chunks' [`PREFETCH_WINDOW`] slots and an empty one; the IPv4 lean hints' box is
/// allocated again only after a burst that panicked, which took it).
/// See the module documentation for what it does before processing.
pub fn process_burst<B: AsMut<[u8]>>(
    now: u64,
    frames: &mut [B],
    metas: &[Meta],
    table: &Table,
    st: &mut WorkerState,
    verdicts: &mut [Verdict],
) {
    let n = frames.len().min(metas.len()).min(verdicts.len());
    // Cut to `n`: every index below is checked against `n`, so the slices' own bounds
    // checks fold into those.
    let (frames, metas, verdicts) = (&mut frames[..n], &metas[..n], &mut verdicts[..n]);
    let mut constants = lean::BurstConstants::new(now, table, st);
    // The burst goes in chunks of `PREFETCH_WINDOW` frames, each through the stages pass
    // by pass, two chunks in flight: a chunk's frame `j` takes slot `base + j` of
    // `st.hints` and of `leans[half]` (`base` is 0 or `PREFETCH_WINDOW`, alternating) from
    // its stage 1 to its processing, and the next chunk's stage 1 runs between this chunk's
    // stages 2 and 3. Taken from `st` for the burst (`HintRing::lean4`) and put back.
    let mut leans = st.hints.lean4.take().unwrap_or_else(HintRing::lean4);
    let mut ahead = [Ahead::Done; PREFETCH_WINDOW];
    let first = n.min(PREFETCH_WINDOW);
    // Bit `j`: the chunk's frame `j` has its hints in `leans` (IPv4) or in
    // `st.hints.lean6` (IPv6: the second mask), not in `st.hints.frames`.
    let (mut next_lean_frames, mut next_lean6_frames) =
        stage_1(&mut frames[..first], &metas[..first], st, &mut leans[0], 0);
    let (mut start, mut half) = (0, 0);
    while start < n {
        let end = (start + PREFETCH_WINDOW).min(n);
        let base = half * PREFETCH_WINDOW;
        let (this_leans, next_leans) = {
            let [first, second] = &mut *leans;
            if half == 0 {
                (first, second)
            } else {
                (second, first)
            }
        };
        let (mut lean_frames, mut lean6_frames) = (next_lean_frames, next_lean6_frames);
        // Bit `j`: the chunk's frame `j` opens a new flow whose prefetches are under way.
        let mut new_flows: u32 = 0;
        // The chunk's frames (bit `j`).
        let chunk_frames = u32::MAX >> (32 - (end - start));
        // Stage 2, by kind of frame (the order among frames does not matter before stage
        // 4): the IPv4 lean frames, the IPv6 ones (out of line: an IPv4 burst pays one test
        // per chunk for them), then every other (the lean ones turned down among them).
        for j in bits(lean_frames) {
            if !probe_lean(&st.conntrack, &mut this_leans[j]) {
                lean_frames &= !(1 << j);
                demote(&mut st.hints.frames[base + j], &this_leans[j], None);
            }
        }
        if lean6_frames != 0 {
            lean6_frames = stage_2_lean6(st, lean6_frames, base);
        }
        for j in bits(chunk_frames & !(lean_frames | lean6_frames)) {
            match &st.hints.frames[base + j].flow {
                Some(FlowHint::V4(key, hash, _)) => probe(st, table, key, *hash, &mut ahead[j]),
                Some(FlowHint::V6(key, hash)) => probe(st, table, key, *hash, &mut ahead[j]),
                None => ahead[j] = Ahead::Done,
            }
            match ahead[j] {
                Ahead::Frontend(_, vacancy) => {
                    new_flows |= 1 << j;
                    st.hints.frames[base + j].candidate = Some(Candidate::Absent(vacancy));
                }
                Ahead::Flow(id, direction) => {
                    st.hints.frames[base + j].candidate = Some(Candidate::Flow(id, direction));
                }
                _ => {}
            }
        }
        // The next chunk's stage 1, while the record lines stage 2 asked for arrive (read
        // right after stage 2, they made an established packet at 1 M flows wait:
        // docs/optimisation-log.md, "Two chunks in flight"); its own index lines have
        // this chunk's processing to arrive.
        if end < n {
            let next = (end + PREFETCH_WINDOW).min(n);
            (next_lean_frames, next_lean6_frames) =
                stage_1(&mut frames[end..next], &metas[end..next], st, next_leans, PREFETCH_WINDOW - base);
        }
        // A new flow's further stages, one pass per visit.
        if new_flows != 0 {
            visit_new_flows(st, table, new_flows, &ahead, base);
        }
        // Stage 3, by kind of frame as stage 2.
        for j in bits(lean_frames) {
            let l = &this_leans[j];
            if !prefetch_lean::<Ipv4Addr>(st, l.id, l.direction) {
                // Never routed: the general path routes it.
                lean_frames &= !(1 << j);
                demote(&mut st.hints.frames[base + j], l, Some(Candidate::Flow(l.id, l.direction)));
                ahead[j] = Ahead::Flow(l.id, l.direction);
            }
        }
        if lean6_frames != 0 {
            lean6_frames = stage_3_lean6(st, lean6_frames, base, &mut ahead);
        }
        for j in bits(chunk_frames & !(lean_frames | lean6_frames)) {
            if let Ahead::Flow(id, direction) = ahead[j] {
                let route = match st.hints.frames[base + j].flow {
                    Some(FlowHint::V4(..)) => prefetch_egress::<Ipv4Addr>(st, id, direction),
                    Some(FlowHint::V6(..)) => prefetch_egress::<Ipv6Addr>(st, id, direction),
                    None => None,
                };
                // Stage 1 left `None` there: a frame without a route costs no store of
                // the whole hint.
                if route.is_some() {
                    st.hints.frames[base + j].route = route;
                }
            }
        }
        // Stage 4: processing, in order. By index into the chunk's slices (so that `j`
        // below their common length needs no bounds check), not by zipped iterators: their
        // four cursors, kept across `forward`, were spilled and reloaded every frame.
        let (chunk, chunk_metas, chunk_verdicts) =
            (&mut frames[start..end], &metas[start..end], &mut verdicts[start..end]);
        for j in 0..chunk.len() {
            if lean_frames & (1 << j) != 0 {
                let l = &this_leans[j % PREFETCH_WINDOW];
                if lean::forward(chunk[j].as_mut(), l, &constants, st, &mut chunk_verdicts[j])
                    || refused(now, chunk[j].as_mut(), l, table, st, &mut chunk_verdicts[j], base + j)
                {
                    continue;
                }
            } else if lean6_frames & (1 << j) != 0 {
                // A copy (80 bytes): `forward` borrows the worker's state whole.
                let l = st.hints.lean6[base + j];
                if lean::forward(chunk[j].as_mut(), &l, &constants, st, &mut chunk_verdicts[j])
                    || refused(now, chunk[j].as_mut(), &l, table, st, &mut chunk_verdicts[j], base + j)
                {
                    continue;
                }
            }
            st.hints.current = base + j;
            let learned = lean::BurstConstants::learned(st);
            chunk_verdicts[j] = process(now, chunk[j].as_mut(), &chunk_metas[j], table, st);
            st.hints.current = HintRing::NONE;
            constants.after_general(learned, st);
        }
        (start, half) = (end, half ^ 1);
    }
    st.hints.lean4 = Some(leans);
}

/// A lean frame [`lean::forward`] turned down in stage 4 of a burst at `now` against
/// `table`: forwarded by [`lean::forward_tracked`] where that takes it (true, the verdict
/// written), else demoted (false: its general hints written in `slot`). Cold and out of
/// line, as [`demote`]. It computes the constants it needs again
/// ([`lean::BurstConstants::tracked`]): lent the burst's, by reference or by value, the
/// burst loop kept them on its stack instead of in registers (an established packet +8–10
/// instructions).
#[cold]
#[inline(never)]
fn refused<A: lean::LeanFamily>(
    now: u64,
    frame: &mut [u8],
    l: &LeanFrame<A>,
    table: &Table,
    st: &mut WorkerState,
    verdict: &mut Verdict,
    slot: usize,
) -> bool {
    // Only a segment that moves the state (an endpoint's SYN-ACK, a close's FIN or RST) or
    // a TCP flow whose direction is not lean may be taken there: any other frame was
    // turned down for what that path checks too, and goes on at once (a read of the record
    // stage 3 read; `forward_tracked` confirms it holds the key).
    let untracked = l.key.protocol != u8::from(IpProtocol::Tcp)
        || !l.seg.moves_state() && A::conntrack(st).peek_destination(l.id, l.direction).1.lean(l.direction);
    if !untracked {
        let constants = lean::BurstConstants::tracked::<A>(now, table, st);
        if lean::forward_tracked(frame, l, &constants, st, verdict) {
            return true;
        }
    }
    demote(&mut st.hints.frames[slot], l, Some(Candidate::Flow(l.id, l.direction)));
    false
}

/// A lean frame turned down (no flow, never routed, refused by [`lean::forward`]): its
/// general hints `slot` written from its compact ones ([`FrameHints::from_lean`]). Cold and
/// out of line: rare, and the slot's 128 bytes of stores inlined in the stage loops took
/// registers from their common path.
#[cold]
#[inline(never)]
fn demote<A: Family>(slot: &mut FrameHints, lean: &LeanFrame<A>, candidate: Option<Candidate>) {
    *slot = FrameHints::from_lean(A::flow_hint(lean.key, lean.hash), candidate);
}

/// Stage 2 of a chunk's IPv6 frames the lean path may take (bit `j` of `mask`: their
/// compact hints in slot `base + j` of `st.hints.lean6`): [`probe_lean`] of each. Returns
/// the mask of those still lean (a frame whose flow is not found has its general hints
/// written, for the general stages).
#[inline(never)]
fn stage_2_lean6(st: &mut WorkerState, mut mask: u32, base: usize) -> u32 {
    let hints = &mut st.hints;
    for j in bits(mask) {
        if !probe_lean(&st.conntrack6, &mut hints.lean6[base + j]) {
            mask &= !(1 << j);
            demote(&mut hints.frames[base + j], &hints.lean6[base + j], None);
        }
    }
    mask
}

/// Stage 3 of a chunk's IPv6 frames the lean path may take (bit `j` of `mask`, as
/// [`stage_2_lean6`]): [`prefetch_lean`] of each. Returns the mask of those still lean; a
/// flow never routed has the frame's general hints written and `ahead[j]` set, for the
/// general stage 3 (which routes it).
#[inline(never)]
fn stage_3_lean6(st: &mut WorkerState, mut mask: u32, base: usize, ahead: &mut [Ahead; PREFETCH_WINDOW]) -> u32 {
    for j in bits(mask) {
        let l = &st.hints.lean6[base + j];
        if !prefetch_lean::<Ipv6Addr>(st, l.id, l.direction) {
            mask &= !(1 << j);
            let hints = &mut st.hints;
            let l = &hints.lean6[base + j];
            demote(&mut hints.frames[base + j], l, Some(Candidate::Flow(l.id, l.direction)));
            ahead[j] = Ahead::Flow(l.id, l.direction);
        }
    }
    mask
}

/// Stage 2 of a frame the lean path may take (its compact hints `lean`): reads the probe
/// run of its hash in `conntrack` (its family's); a flow found is noted in `lean` (its
/// record prefetched) and true returned. None (a new flow: an ACK or datagram of a flow not
/// tracked): false, and the caller writes the frame's general hints ([`demote`]) for the
/// general stages (the slot's address computed on that path only).
#[inline(always)]
fn probe_lean<A: Family>(conntrack: &Conntrack<A>, lean: &mut LeanFrame<A>) -> bool {
    match conntrack.prefetch_record(lean.hash) {
        Candidate::Flow(id, direction) => {
            (lean.id, lean.direction) = (id, direction);
            true
        }
        Candidate::Absent(_) => false,
    }
}

/// Stage 1 of a chunk (at most [`PREFETCH_WINDOW`] frames): each frame's early parse,
/// flow key, hash and index prefetch ([`hint`]), its hints in `leans[j]` (IPv4 lean),
/// slot `base + j` of `st.hints.lean6` (IPv6 lean) or of `st.hints.frames`. Returns the
/// chunk's IPv4 and IPv6 lean frames (bit `j`). Not inlined: called for
/// the burst's first chunk and then for each next one, it would otherwise be two copies or
/// (as the compiler chose) a call of [`hint`] per frame. Changes nothing in `st` but the
/// hint slots (the property tests of `pipeline/tests/stage1.rs` call it on one frame).
#[inline(never)]
pub(super) fn stage_1<B: AsMut<[u8]>>(
    frames: &mut [B],
    metas: &[Meta],
    st: &mut WorkerState,
    leans: &mut [LeanFrame; PREFETCH_WINDOW],
    base: usize,
) -> (u32, u32) {
    let (mut lean_frames, mut lean6_frames) = (0, 0);
    for (j, ((frame, meta), lean)) in frames.iter_mut().zip(metas).zip(leans.iter_mut()).enumerate() {
        let slot = (&mut st.hints, base + j);
        let is_lean =
            hint(frame.as_mut(), meta, &st.host, &st.conntrack, &st.conntrack6, slot, lean, (&mut lean6_frames, j));
        lean_frames |= u32::from(is_lean) << j;
    }
    (lean_frames, lean6_frames)
}

/// Stage 2: reads the probe run of `hash`; a flow found has its record prefetched, none
/// (a new flow) has its front door's index line prefetched. Sets `ahead` in place (as
/// [`visit`] does: a returned `Ahead` is copied whole, service view and all).
#[inline]
fn probe<A: Family>(st: &WorkerState, table: &Table, key: &FlowKey<A>, hash: u64, ahead: &mut Ahead) {
    match A::conntrack(st).prefetch_record(hash) {
        Candidate::Flow(id, direction) => *ahead = Ahead::Flow(id, direction),
        Candidate::Absent(vacancy) => {
            let h = table.frontend_hash(key.dst_addr.into(), key.protocol, key.dst_port);
            table.prefetch_frontend(h);
            *ahead = Ahead::Frontend(h, vacancy);
        }
    }
}

/// Stage 3 of an established flow: reads the record found ahead and prefetches what
/// forwarding along it will read ([`prefetch_route`]) — the next hop of the endpoint for the
/// original direction, of the client for replies ([`super::flow::egress`]).
#[inline]
fn prefetch_egress<A: Family>(st: &WorkerState, id: FlowId, direction: Direction) -> Option<RouteHint> {
    let (to, state) = A::conntrack(st).peek_destination(id, direction);
    match state.egress(direction) {
        // Routed before (`crate::conntrack::FlowState::egress`): no route lookup.
        Some((out, on_link)) => {
            st.frontends.prefetch(state.frontend);
            let hop = if on_link { to } else { A::router(&st.host)?.0 };
            st.neighbours.prefetch(hop);
            Some(RouteHint { to: to.into(), out, hop: hop.into() })
        }
        None => prefetch_route(st, to, state.frontend),
    }
}

/// Stage 3 of a frame of family `A` the lean path may take ([`super::lean`]): where the
/// flow's egress is known, the prefetches of [`prefetch_egress`] (front door's counters,
/// next hop's neighbour slot), without a route hint (the lean path does not read one), and
/// true; false for a flow never routed.
#[inline]
fn prefetch_lean<A: Family>(st: &WorkerState, id: FlowId, direction: Direction) -> bool {
    // One copy per direction, as `lean::forward`.
    match direction {
        Direction::Original => prefetch_lean_in::<A, true>(st, id),
        Direction::Reply => prefetch_lean_in::<A, false>(st, id),
    }
}

/// [`prefetch_lean`] of a frame of the original direction (`ORIGINAL`) or a reply.
#[inline(always)]
fn prefetch_lean_in<A: Family, const ORIGINAL: bool>(st: &WorkerState, id: FlowId) -> bool {
    let direction = if ORIGINAL { Direction::Original } else { Direction::Reply };
    let (to, state) = A::conntrack(st).peek_destination(id, direction);
    match state.egress(direction) {
        Some((_, on_link)) => {
            st.frontends.prefetch(state.frontend);
            // A frame to the router reads its entry from the burst's constants.
            if on_link {
                st.neighbours.prefetch(to);
            }
            true
        }
        None => false,
    }
}

/// The visits of a chunk's new flows (bit `j` of `new_flows`, whose `ahead[j]` is
/// [`Ahead::Frontend`]): each family's ([`visit_family`]). Not inlined: out of the burst
/// loop, the loop's registers serve its other stages (an established packet −10
/// instructions).
#[inline(never)]
fn visit_new_flows(st: &mut WorkerState, table: &Table, new_flows: u32, ahead: &[Ahead; PREFETCH_WINDOW], base: usize) {
    let (mut v4, mut v6) = (0u32, 0u32);
    for j in bits(new_flows) {
        match st.hints.frames[base + j].flow {
            Some(FlowHint::V4(..)) => v4 |= 1 << j,
            Some(FlowHint::V6(..)) => v6 |= 1 << j,
            None => {}
        }
    }
    // The SNAT searches of the chunk's new flows, in order (exact when the chunk opens
    // flows of one family only).
    let mut upcoming = st.snat.upcoming();
    if v4 != 0 {
        visit_family::<Ipv4Addr>(st, table, v4, ahead, base, &mut upcoming);
    }
    if v6 != 0 {
        visit_family::<Ipv6Addr>(st, table, v6, ahead, base, &mut upcoming);
    }
}

/// The bits of `mask`, a chunk's frames (none at or above [`PREFETCH_WINDOW`]), lowest
/// first: indices the compiler knows to be below `PREFETCH_WINDOW`, so that indexing a
/// chunk's arrays with them costs no bounds check.
#[inline(always)]
fn bits(mask: u32) -> impl Iterator<Item = usize> {
    debug_assert!(mask >> PREFETCH_WINDOW == 0, "bits beyond a chunk");
    super::bits::ones(u64::from(mask)).map(|j| j % PREFETCH_WINDOW)
}

/// The visits of a chunk's new flows of family `A` (bit `j` of `mask`), one pass per
/// dependent load (five), each pass reading what the previous one prefetched
/// and prefetching the next: the front-door record (at the position its index line names,
/// which the next pass confirms without searching the line again), the service record, the
/// Maglev ring slot, the chosen endpoint's record, and last the endpoint's route, next
/// hop's neighbour slot, the front door's counters and the conntrack index slot of the reply
/// tuple (with the SNAT port the allocation will examine first: [`prefetch_reply_slot`]).
/// What the last pass finds (front door, ring endpoint, route) is stored in the frame's
/// hint slot, for [`super::flow`]. Reads only: everything found is a hint that [`process`]
/// confirms or ignores. A frame whose front door or endpoint is not found drops out.
#[inline(never)]
fn visit_family<A: Family>(
    st: &mut WorkerState,
    table: &Table,
    mut mask: u32,
    ahead: &[Ahead; PREFETCH_WINDOW],
    base: usize,
    upcoming: &mut crate::snat::Upcoming,
) {
    // Pass 1: the front-door record.
    let mut frontends = [None; PREFETCH_WINDOW];
    for j in bits(mask) {
        if let Ahead::Frontend(h, _) = ahead[j] {
            frontends[j] = Some((h, table.prefetch_frontend_record(h)));
        } else {
            mask &= !(1 << j);
        }
    }
    // Pass 2: the service record.
    let mut services = [(0u32, 0u32); PREFETCH_WINDOW];
    // Bit `j`: the front door admits every source (no source ranges).
    let mut all_sources = 0u32;
    // The keys' protocols, for the last pass.
    let mut protocols = [0u8; PREFETCH_WINDOW];
    for j in bits(mask) {
        let (Some(key), Some((h, candidate))) = (A::hinted_key(&st.hints.frames[base + j].flow), frontends[j]) else {
            mask &= !(1 << j);
            continue;
        };
        protocols[j] = key.protocol;
        // The record alone, not the front door's view (its source ranges sliced).
        match table.frontend_record_hashed(h, candidate, key.dst_addr.into(), key.protocol, key.dst_port) {
            Some((i, fe)) => {
                let service = fe.service_position();
                table.prefetch_service(service);
                // The section header counts front doors in 32 bits (`FrontendRef::index`).
                services[j] = (service, i as u32);
                all_sources |= u32::from(fe.source_ranges_count.get() == 0) << j;
            }
            None => mask &= !(1 << j),
        }
    }
    // Pass 3: the ring slot.
    let mut rings = [None; PREFETCH_WINDOW];
    for j in bits(mask) {
        let key = A::hinted_key(&st.hints.frames[base + j].flow);
        let found = table
            .service_ring(services[j].0)
            .zip(key)
            .and_then(|(s, key)| Some((s, s.slot(backend::ring_hash(&s, key))?)));
        match found {
            Some((s, slot)) => {
                s.prefetch_slot(slot);
                rings[j] = Some((s, slot as u32));
            }
            None => mask &= !(1 << j),
        }
    }
    // Pass 4: the endpoint's record.
    let mut positions = [0u32; PREFETCH_WINDOW];
    for j in bits(mask) {
        match rings[j].and_then(|(s, slot)| s.ring_backend(slot as usize)) {
            Some(position) => {
                rings[j].inspect(|(s, _)| s.prefetch_backend(position));
                positions[j] = position;
            }
            None => mask &= !(1 << j),
        }
    }
    // Pass 5: the endpoint's route and the reply tuple's index slot; the hints stored.
    let maglev = st.host.scheduler == Scheduler::Maglev;
    for j in bits(mask) {
        let (Some((s, _)), position) = (rings[j], positions[j]) else { continue };
        let Some(endpoint) = s.backends.get(position as usize) else { continue };
        let (addr, port) = (layout::addr_from16(endpoint.addr), endpoint.port.get());
        let frontend = services[j].1;
        let new_flow = NewFlowHint {
            frontend,
            ring_backend: position,
            endpoint: (s.affinity_timeout_s == 0 && maglev).then_some((addr, port)),
            all_sources: all_sources & (1 << j) != 0,
        };
        let route = A::from_ip(addr).and_then(|to| {
            let route = prefetch_route(st, to, frontend)?;
            prefetch_reply_slot(st, protocols[j], to, port, route.out, upcoming);
            Some(route)
        });
        let h = &mut st.hints.frames[base + j];
        h.new_flow = Some(new_flow);
        h.route = route;
    }
}

/// The last stage of both paths: routes `to` (where the packet will be sent), prefetches the
/// next hop's neighbour slot and the counters of front door `frontend`, and returns the route.
#[inline]
fn prefetch_route<A: Family>(st: &WorkerState, to: A, frontend: u32) -> Option<RouteHint> {
    st.frontends.prefetch(frontend);
    let (out, hop) = st.host.route(to)?;
    st.neighbours.prefetch(hop);
    Some(RouteHint { to: to.into(), out, hop: hop.into() })
}

/// Prefetches the conntrack index slots of the reply tuple a new flow of `protocol` to endpoint
/// `to`:`port` leaving by interface `out` will be inserted with: the SNAT address and port
/// are those [`crate::snat::SnatPorts::peek_next`] says the allocation examines first
/// (`upcoming`: after the allocations of the new flows before it in the chunk), which it
/// takes unless that reply tuple is in use. A tuple not yet tracked: its index line and the
/// next are prefetched, as for a SYN.
#[inline]
fn prefetch_reply_slot<A: Family>(
    st: &WorkerState,
    protocol: u8,
    to: A,
    port: u16,
    out: u8,
    upcoming: &mut crate::snat::Upcoming,
) {
    // Under RSS steering the first candidate comes from hashing tuples (`rte_thash`): too
    // dear to run twice per new flow for a prefetch; `peek_next` says `None`.
    let Some((snat_addr, snat_port)) = st.snat.peek_next(upcoming, st.host.snat_addresses_on::<A>(out)) else {
        return;
    };
    let reply = FlowKey { protocol, src_addr: to, src_port: port, dst_addr: snat_addr, dst_port: snat_port };
    prefetch(A::conntrack(st), &reply, true);
}

/// Stage 1: the hints of a frame before any stage: the flow key of an IPv4 TCP, UDP or
/// SCTP frame or an IPv6 TCP or UDP frame, from its headers alone (none of the checks
/// [`process`] makes beyond what a safe parse needs), hashed for its family's conntrack
/// (`v4` or `v6`), whose index slots for it are prefetched (for a SYN, a key almost
/// certainly absent, the next index line too: [`prefetch`]); no flow key for anything else;
/// whether the IPv4 header's checksum was found correct on the way. An IPv4 frame the lean path may take (stage 1's parse found its [`super::hint::LeanSegment`], and it is not a SYN)
/// has its hints written into `lean`: returns true (its slot of `hints.frames` is then
/// stale); an IPv6 one into its slot of `hints.lean6`, with bit `j` set in
/// `lean6_frames`, and returns false; any
/// other frame into its slot `slot` of `hints.frames` (in place: built elsewhere and copied, the key's narrow fields reach
/// the slot through wide loads that cannot forward from them, a store-forwarding stall
/// per frame), returns false. The IPv4 lean frame's path pays nothing for IPv6's (a
/// returned three-way kind instead of the IPv6 mask's bit cost an IPv4 packet 6–8
/// instructions: callgrind, 2026-11-27).
///
/// The common frame — untagged, to the port's own MAC ([`link::receive_untagged`]) — is
/// parsed with the link layer's length a constant, an IPv4 one at fixed offsets
/// ([`ipv4::flow_key_plain`]); any other frame, or one that parse does not take, starts
/// again from the beginning out of line ([`hint_parsed`]: the full link-layer parse, then
/// the checked views), with the same results (docs/optimisation-log.md, "Stage 1, one
/// compare"; the property tests in `pipeline/tests/stage1.rs`).
#[allow(clippy::too_many_arguments)]
#[inline]
fn hint(
    frame: &[u8],
    meta: &Meta,
    host: &Host,
    v4: &Conntrack<Ipv4Addr>,
    v6: &Conntrack<Ipv6Addr>,
    (hints, slot): (&mut HintRing, usize),
    lean: &mut LeanFrame,
    (lean6_frames, j): (&mut u32, usize),
) -> bool {
    // The common frame (untagged, to the port's own MAC) with its link layer's length a
    // constant for the parse, and a plain IPv4 packet at fixed offsets; anything else
    // through the full parse, out of line, from the start (so that the common path keeps
    // nothing for it).
    match link::receive_untagged(frame, meta, host) {
        Some((rx, EtherType::Ipv4)) => {
            // `LeanSegment::NONE` as far as `is_lean` reads: one store, not the whole segment.
            lean.seg.total = 0;
            let mut checked = false;
            if let Some((key, opens)) = ipv4::flow_key_plain(frame, &rx, &mut lean.seg, &mut checked) {
                return hint_ipv4(key, opens, checked, v4, (hints, slot), lean);
            }
        }
        Some((rx, _)) => {
            *lean6_frames |= u32::from(hint_ipv6(frame, &rx, v6, hints, slot)) << j;
            return false;
        }
        None => {}
    }
    hint_parsed(frame, meta, host, v4, v6, (hints, slot), lean, (lean6_frames, j))
}

/// [`hint`] of a frame other than the common one (tagged, broadcast, not IP, …): its link
/// layer parsed in full ([`link::receive_parsed`]), then its network layer
/// ([`ipv4::flow_key`], [`hint_ipv6`]); and of a common frame ([`link::receive_untagged`])
/// whose IPv4 packet [`ipv4::flow_key_plain`] did not take (options, a fragment, neither
/// TCP nor UDP, malformed, …): the checked parse ([`ipv4::flow_key_checked`]) at once, not
/// the full link parse and the plain parse again (the same result: the two link parses
/// agree on such a frame). The shortcut is taken again here rather than its `Rx` kept
/// across the plain parse, and [`hint`] has one call for both: a second call site there
/// cost an established packet 9 instructions. Out of line: inlined, its values took
/// registers from the common frame's path.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn hint_parsed(
    frame: &[u8],
    meta: &Meta,
    host: &Host,
    v4: &Conntrack<Ipv4Addr>,
    v6: &Conntrack<Ipv6Addr>,
    (hints, slot): (&mut HintRing, usize),
    lean: &mut LeanFrame,
    (lean6_frames, j): (&mut u32, usize),
) -> bool {
    if let Some((rx, EtherType::Ipv4)) = link::receive_untagged(frame, meta, host) {
        // `lean.seg.total` is 0: `hint` cleared it before the plain parse, which refused.
        if let Some((key, opens)) = ipv4::flow_key_checked(frame, rx, &mut lean.seg) {
            // Not said checked: the general path verifies the header checksum, as after
            // `ipv4::flow_key`'s checked branch.
            return hint_ipv4(key, opens, false, v4, (hints, slot), lean);
        }
        no_hints(&mut hints.frames[slot]);
        return false;
    }
    match link::receive_parsed(frame, meta, host) {
        Ok((rx, EtherType::Ipv4)) => {
            lean.seg.total = 0;
            let mut checked = false;
            if let Some((key, opens)) = ipv4::flow_key(frame, &rx, &mut lean.seg, &mut checked) {
                return hint_ipv4(key, opens, checked, v4, (hints, slot), lean);
            }
        }
        Ok((rx, EtherType::Ipv6)) => {
            *lean6_frames |= u32::from(hint_ipv6(frame, &rx, v6, hints, slot)) << j;
            return false;
        }
        _ => {}
    }
    no_hints(&mut hints.frames[slot]);
    false
}

/// [`hint`] of an IPv4 frame whose flow key `key` the early parse found (`opens`: a SYN;
/// `checked`: its header checksum found correct; `lean.seg` the [`super::hint::LeanSegment`]
/// it wrote, if any: a lean frame's, or a SYN's, which goes with the general hint): hashed and prefetched, into `lean` for one the lean path may take
/// (returns true), else into its slot `slot` of `hints.frames` (returns false).
#[inline(always)]
fn hint_ipv4(
    key: FlowKey,
    opens: bool,
    checked: bool,
    v4: &Conntrack<Ipv4Addr>,
    (hints, slot): (&mut HintRing, usize),
    lean: &mut LeanFrame,
) -> bool {
    let hash = prefetch(v4, &key, opens);
    // A SYN's segment is not a lean frame's: it goes with the general hint.
    if lean.seg.is_lean() && !opens {
        lean.key = key;
        lean.hash = hash;
        return true;
    }
    // Field by field: cheaper here than the whole slot.
    let out = &mut hints.frames[slot];
    out.candidate = None;
    out.route = None;
    out.new_flow = None;
    // With a SYN's segment where the parse took it whole; none for anything else.
    out.flow = Some(FlowHint::V4(key, hash, lean.seg));
    out.l3_checked = checked;
    false
}

/// [`hint`] of an IPv6 frame (`rx`: its link layer) into its slot `slot` of `hints`: of
/// `hints.lean6` for one the lean path may take (returns true), else of `hints.frames`.
/// Out of line: inlined, its 40-byte key's stores took registers from the IPv4 frames'
/// path through stage 1 (6 instructions per IPv4 packet).
#[inline(never)]
fn hint_ipv6(frame: &[u8], rx: &link::Rx, v6: &Conntrack<Ipv6Addr>, hints: &mut HintRing, slot: usize) -> bool {
    let lean6 = &mut hints.lean6[slot];
    lean6.seg.total = 0;
    if let Some((key, opens)) = ipv6::flow_key(frame, rx, &mut lean6.seg) {
        let hash = prefetch(v6, &key, opens);
        if lean6.seg.is_lean() {
            (lean6.key, lean6.hash) = (key, hash);
            return true;
        }
        hints.frames[slot] = FrameHints { flow: Some(FlowHint::V6(key, hash)), ..FrameHints::NONE };
    } else {
        no_hints(&mut hints.frames[slot]);
    }
    false
}

/// [`hint`] of a frame without a flow key (not IP, not TCP, UDP or SCTP, a fragment, or
/// malformed): `out` cleared. Cold and out of line: the slot's 128 bytes of stores inlined
/// took registers from stage 1's common path.
#[cold]
#[inline(never)]
fn no_hints(out: &mut FrameHints) {
    *out = FrameHints::NONE;
}

/// Hashes `key` for `conntrack` and prefetches the index slots the hash selects: for a key
/// that is probably `absent`, whose probe run ends only at an empty slot, the next cache
/// line of the index as well ([`Conntrack::prefetch_index_absent`]: at the load of a full
/// table a miss reads 8.5 slots on average, a line holds 8).
#[inline]
fn prefetch<A: Family>(conntrack: &Conntrack<A>, key: &FlowKey<A>, absent: bool) -> u64 {
    let hash = conntrack.hash_key(key);
    if absent {
        conntrack.prefetch_index_absent(hash);
    } else {
        conntrack.prefetch_index(hash);
    }
    hash
}
