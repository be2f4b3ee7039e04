//! Burst processing that overlaps memory latency, as DPDK and VPP fast paths do
//! ([`process_burst`]). Each frame goes through stages, each of which starts the memory loads
//! the next one needs, so the cache misses of many frames are in flight together instead of
//! one after another (VPP's dual/quad loop and
//! `vlib_prefetch_buffer_header`, DPDK's `rte_prefetch0` ahead of `rte_hash_lookup_bulk`):
//!
//! 1. the frame is parsed far enough to know its flow key; the key is hashed and its
//!    conntrack index slot prefetched (with the next index line for a TCP SYN, whose probe
//!    run goes on to an empty slot);
//! 2. its probe run is read by fingerprint alone
//!    ([`crate::conntrack::Conntrack::prefetch_record`]): a flow record it names is
//!    prefetched; none proves the packet opens a new flow, whose front door's index line is
//!    prefetched ([`Table::prefetch_frontend`]);
//! 3. an established flow's record is read to find where the packet will go: the next
//!    hop's neighbour slot and the front door's counters are prefetched, and the route is
//!    handed to [`super::flow::egress`]. A new flow goes on down the table, one dependent
//!    load per stage: the front-door record (at the position its index line names, which
//!    the next stage confirms without searching the line again), the service record, the
//!    Maglev ring slot, the chosen endpoint's record, and last the endpoint's next hop, the
//!    front door's counters and the conntrack index slot its reply tuple will take (with
//!    the SNAT port the allocation would give it now);
//! 4. the frame is processed by [`process`].
//!
//! The burst goes in chunks of [`PREFETCH_WINDOW`] frames, and each chunk through the
//! stages pass by pass (stage 1 over its frames, then stage 2 over them, a new flow's
//! further stages one pass per visit, stage 3, then the processing in order), so that every
//! load has the work of the rest of the chunk (about `PREFETCH_WINDOW` frames' worth of one
//! stage or the next) to arrive before the next stage reads it, and a stage costs a frame
//! no range checks or slot arithmetic (a software pipeline over the whole burst, frame `i`'s
//! stage `s` at step `i + s·d`, paid both on every step). Only the first frames of a chunk's
//! first stage wait for nothing: a chunk of the same `PREFETCH_WINDOW` frames fills the
//! distance a pipeline of that depth would.
//!
//! IPv4 frames (TCP, UDP, SCTP) are hinted against the worker's IPv4 conntrack, IPv6 frames
//! (TCP and UDP, after any extension headers) against its IPv6 one; fragments and everything
//! else are processed without a hint.
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
//! table; the route, checked against its destination.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::family::Family;
use super::hint::{FlowHint, FrameHints, LeanFrame, NewFlowHint, RouteHint, PREFETCH_WINDOW};
use super::link;
use super::{backend, ipv4, ipv6, lean, process, Meta, Verdict, WorkerState};
use crate::conntrack::{Candidate, Conntrack, Direction, FlowId, FlowKey, Vacancy};
use crate::host::Host;
use crate::scheduler::Scheduler;
use crate::table::layout;
use crate::table::{FrontendHash, ServiceRing, Table};
use crate::wire::EtherType;

// `PREFETCH_WINDOW` lives in `hint`, with the ring of hint slots it sizes.
const _: () = assert!(PREFETCH_WINDOW <= 32, "process_burst keeps a chunk's lean frames and new flows in 32-bit masks");

/// The passes of [`process_burst`] that advance the prefetches of a chunk's new flows past
/// stage 2: front-door record, service record, ring slot, endpoint record, next hop.
const NEW_FLOW_VISITS: usize = 5;

/// How far the prefetches of a frame have come: what the next visit reads (it was prefetched
/// by the previous one) and prefetches. A new flow's service is viewed once
/// ([`Table::service`]) and carried through its later visits.
#[derive(Clone, Copy, Debug)]
enum Ahead<'t> {
    /// Nothing (more) to prefetch: not a flow frame, or done.
    Done,
    /// A flow the lookup will almost certainly find: its record is on its way.
    Flow(FlowId, Direction),
    /// No flow has the key (a new flow): its front door's index line is on its way (and
    /// where the key's probe run ended, which the frame's hints hold too).
    Frontend(FrontendHash, Vacancy),
    /// The front-door record is on its way: the key's hash and the record's position, if the
    /// key's home bucket names one (a key that overflowed its bucket is searched for).
    FrontendRecord(FrontendHash, Option<u32>),
    /// The service record is on its way: service and front door (positions in the table).
    Service(u32, u32),
    /// The ring slot is on its way: the service's ring, the front door and the slot.
    Slot(ServiceRing<'t>, u32, u32),
    /// The chosen endpoint's record is on its way: the service's ring, the front door and
    /// the endpoint's position among the service's backends.
    Endpoint(ServiceRing<'t>, u32, u32),
}

/// Processes a burst: `verdicts[i]` becomes what `process(now, frames[i], metas[i], ..)`
/// returns, frame by frame in order, for the first `min(frames, metas, verdicts)` frames;
/// the state ends as `process` would leave it. Pure in the same sense as [`process`]: no
/// I/O, no clock, no allocation (the hints live in `st`: [`PREFETCH_WINDOW`] slots and an
/// empty one).
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
    let constants = lean::BurstConstants::new(now, table, st);
    // The burst goes in chunks of `PREFETCH_WINDOW` frames, each through the stages pass
    // by pass: frame `j` of a chunk takes slot `j` from its stage 1 to its processing.
    let mut leans = [LeanFrame::EMPTY; PREFETCH_WINDOW];
    let mut ahead: [Ahead<'_>; PREFETCH_WINDOW] = [Ahead::Done; PREFETCH_WINDOW];
    for ((frames, metas), verdicts) in
        frames.chunks_mut(PREFETCH_WINDOW).zip(metas.chunks(PREFETCH_WINDOW)).zip(verdicts.chunks_mut(PREFETCH_WINDOW))
    {
        // Equal lengths (all cut to `n`): the chunks are too.
        let m = frames.len();
        let (metas, verdicts) = (&metas[..m], &mut verdicts[..m]);
        // Bit `j`: the chunk's frame `j` has its hints in `leans`, not in `st.hints`.
        let mut lean_frames: u32 = 0;
        // Bit `j`: the chunk's frame `j` opens a new flow whose prefetches are under way.
        let mut new_flows: u32 = 0;
        // Stage 1.
        for (j, (frame, meta)) in frames.iter_mut().zip(metas).enumerate() {
            let lean = hint(
                frame.as_mut(),
                meta,
                &st.host,
                &st.conntrack,
                &st.conntrack6,
                &mut st.hints.frames[j],
                &mut leans[j],
            );
            lean_frames |= u32::from(lean) << j;
        }
        // Stage 2.
        for j in 0..m {
            if lean_frames & (1 << j) != 0 {
                let l = &mut leans[j];
                match st.conntrack.prefetch_record(l.hash) {
                    Candidate::Flow(id, direction) => (l.id, l.direction) = (id, direction),
                    // No flow: a new one (an ACK or datagram of a flow not tracked) for the
                    // general stages.
                    Candidate::Absent(_) => {
                        lean_frames &= !(1 << j);
                        st.hints.frames[j] = FrameHints::from_lean(l, None);
                    }
                }
            }
            if lean_frames & (1 << j) == 0 {
                match &st.hints.frames[j].flow {
                    Some(FlowHint::V4(key, hash)) => probe(st, table, key, *hash, &mut ahead[j]),
                    Some(FlowHint::V6(key, hash)) => probe(st, table, key, *hash, &mut ahead[j]),
                    None => ahead[j] = Ahead::Done,
                }
                match ahead[j] {
                    Ahead::Frontend(_, vacancy) => {
                        new_flows |= 1 << j;
                        st.hints.frames[j].candidate = Some(Candidate::Absent(vacancy));
                    }
                    Ahead::Flow(id, direction) => {
                        st.hints.frames[j].candidate = Some(Candidate::Flow(id, direction));
                    }
                    _ => {}
                }
            }
        }
        // A new flow's further stages, one pass per visit.
        if new_flows != 0 {
            visit_new_flows(st, table, new_flows, &mut ahead);
        }
        // Stage 3.
        for j in 0..m {
            if lean_frames & (1 << j) != 0 {
                let l = &leans[j];
                if !prefetch_lean(st, l.id, l.direction) {
                    // Never routed: the general path routes it.
                    lean_frames &= !(1 << j);
                    st.hints.frames[j] = FrameHints::from_lean(l, Some(Candidate::Flow(l.id, l.direction)));
                    ahead[j] = Ahead::Flow(l.id, l.direction);
                }
            }
            if lean_frames & (1 << j) == 0 {
                if let Ahead::Flow(id, direction) = ahead[j] {
                    let route = match st.hints.frames[j].flow {
                        Some(FlowHint::V4(..)) => prefetch_egress::<Ipv4Addr>(st, id, direction),
                        Some(FlowHint::V6(..)) => prefetch_egress::<Ipv6Addr>(st, id, direction),
                        None => None,
                    };
                    // Stage 1 left `None` there: a frame without a route costs no store of
                    // the whole hint.
                    if route.is_some() {
                        st.hints.frames[j].route = route;
                    }
                }
            }
        }
        // Stage 4: processing, in order.
        for (j, ((frame, meta), verdict)) in frames.iter_mut().zip(metas).zip(verdicts.iter_mut()).enumerate() {
            if lean_frames & (1 << j) != 0 {
                let l = &leans[j];
                if let Some(v) = lean::forward(frame.as_mut(), l, &constants, st) {
                    *verdict = v;
                    continue;
                }
                st.hints.frames[j] = FrameHints::from_lean(l, Some(Candidate::Flow(l.id, l.direction)));
            }
            st.hints.current = j;
            *verdict = process(now, frame.as_mut(), meta, table, st);
            st.hints.current = PREFETCH_WINDOW;
        }
    }
}

/// Stage 2: reads the probe run of `hash`; a flow found has its record prefetched, none
/// (a new flow) has its front door's index line prefetched. Sets `ahead` in place (as
/// [`visit`] does: a returned `Ahead` is copied whole, service view and all).
#[inline]
fn probe<'t, A: Family>(st: &WorkerState, table: &'t Table, key: &FlowKey<A>, hash: u64, ahead: &mut Ahead<'t>) {
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

/// Stage 3 of a frame the lean path may take ([`super::lean`]): where the flow's egress
/// is known, prefetches the front door's counters and returns true; false for a flow never
/// routed. The next hop's neighbour slot is not prefetched, as [`prefetch_egress`] does: the
/// lean path's next hops (endpoints on the link, the router) are few, and their slots,
/// read by every packet, stay in the cache (the hop's address and hash cost ~10
/// instructions per packet).
#[inline]
fn prefetch_lean(st: &WorkerState, id: FlowId, direction: Direction) -> bool {
    let (_, state) = st.conntrack.peek_destination(id, direction);
    if state.egress(direction).is_none() {
        return false;
    }
    st.frontends.prefetch(state.frontend);
    true
}

/// The visits ([`visit_hinted`]) of a chunk's new flows (bit `j` of `new_flows`), one
/// pass per visit ([`NEW_FLOW_VISITS`]). Not inlined: out of the burst loop, the loop's
/// registers serve its other stages (an established packet −10 instructions).
#[inline(never)]
fn visit_new_flows<'t>(
    st: &mut WorkerState,
    table: &'t Table,
    new_flows: u32,
    ahead: &mut [Ahead<'t>; PREFETCH_WINDOW],
) {
    for _ in 0..NEW_FLOW_VISITS {
        let mut todo = new_flows;
        while todo != 0 {
            let j = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            visit_hinted(st, table, j, &mut ahead[j]);
        }
    }
}

/// [`visit`] for the family of the flow key in hint slot `j`, storing what the last visit
/// found in that slot (here, not through a returned value: it is as large as the two
/// hints). Not inlined: the pipeline loop stays small, and a call per stage costs less than
/// its body copied into every stage of the loop.
#[inline(never)]
fn visit_hinted<'t>(st: &mut WorkerState, table: &'t Table, j: usize, ahead: &mut Ahead<'t>) {
    let found = match &st.hints.frames[j].flow {
        Some(FlowHint::V4(key, _)) => visit(st, table, key, ahead),
        Some(FlowHint::V6(key, _)) => visit(st, table, key, ahead),
        None => None,
    };
    if let Some((new_flow, route)) = found {
        let h = &mut st.hints.frames[j];
        h.new_flow = Some(new_flow);
        h.route = route;
    }
}

/// Advances the prefetches of a new flow's frame whose flow key is `key` by one stage: reads
/// what the previous stage prefetched, prefetches the next load, and updates `ahead` to how
/// far it came (in place: an `Ahead` carries a service view, too large to copy in and out
/// of every visit); the last stage returns what it found (front door, ring endpoint) and
/// the route to the endpoint, for [`super::flow`]. Reads only: everything it finds is a hint
/// that [`process`] confirms or ignores.
#[inline]
fn visit<'t, A: Family>(
    st: &WorkerState,
    table: &'t Table,
    key: &FlowKey<A>,
    ahead: &mut Ahead<'t>,
) -> Option<(NewFlowHint, Option<RouteHint>)> {
    // Each arm writes `*ahead` itself: a temporary assigned at the end would copy the whole
    // (service-view sized) enum on every visit.
    match *ahead {
        Ahead::Done | Ahead::Flow(..) => *ahead = Ahead::Done,
        Ahead::Frontend(h, _) => {
            *ahead = Ahead::FrontendRecord(h, table.prefetch_frontend_record(h));
        }
        Ahead::FrontendRecord(h, candidate) => {
            match table.frontend_hashed(h, candidate, key.dst_addr.into(), key.protocol, key.dst_port) {
                Some(fe) => {
                    table.prefetch_service(fe.service);
                    *ahead = Ahead::Service(fe.service, fe.index);
                }
                None => *ahead = Ahead::Done,
            }
        }
        Ahead::Service(service, frontend) => match table.service(service) {
            Some(s) => match s.slot(backend::ring_hash(&s, key)) {
                Some(slot) => {
                    s.prefetch_slot(slot);
                    *ahead = Ahead::Slot(*s, frontend, slot as u32);
                }
                None => *ahead = Ahead::Done,
            },
            None => *ahead = Ahead::Done,
        },
        Ahead::Slot(s, frontend, slot) => match s.ring_backend(slot as usize) {
            Some(position) => {
                s.prefetch_backend(position);
                *ahead = Ahead::Endpoint(s, frontend, position);
            }
            None => *ahead = Ahead::Done,
        },
        Ahead::Endpoint(s, frontend, position) => {
            *ahead = Ahead::Done;
            let endpoint = s.backends.get(position as usize)?;
            let (addr, port) = (layout::addr_from16(endpoint.addr), endpoint.port.get());
            let new_flow = NewFlowHint {
                frontend,
                ring_backend: position,
                endpoint: (s.affinity_timeout_s == 0 && st.host.scheduler == Scheduler::Maglev).then_some((addr, port)),
            };
            let route = A::from_ip(addr).and_then(|to| {
                let route = prefetch_route(st, to, frontend)?;
                prefetch_reply_slot(st, key, to, port, route.out);
                Some(route)
            });
            return Some((new_flow, route));
        }
    }
    None
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

/// Prefetches the conntrack index slots of the reply tuple a new flow `key` to endpoint
/// `to`:`port` leaving by interface `out` will be inserted with: the SNAT address and port
/// are those [`crate::snat::SnatPorts::peek`] says the allocation examines first, which it
/// takes unless that reply tuple is in use (and a frame processed in between may move the
/// search on: then this load was for nothing). A tuple not yet tracked: its index line and
/// the next are prefetched, as for a SYN.
#[inline]
fn prefetch_reply_slot<A: Family>(st: &WorkerState, key: &FlowKey<A>, to: A, port: u16, out: u8) {
    // Under RSS steering the first candidate comes from hashing tuples (`rte_thash`): too
    // dear to run twice per new flow for a prefetch; `peek` says `None`.
    let Some((snat_addr, snat_port)) = st.snat.peek(st.host.snat_addresses_on::<A>(out)) else { return };
    let reply =
        FlowKey { protocol: key.protocol, src_addr: to, src_port: port, dst_addr: snat_addr, dst_port: snat_port };
    prefetch(A::conntrack(st), &reply, true);
}

/// Stage 1: the hints of a frame before any stage: the flow key of an IPv4 TCP, UDP or
/// SCTP frame or an IPv6 TCP or UDP frame, from its headers alone (none of the checks
/// [`process`] makes beyond what a safe parse needs), hashed for its family's conntrack
/// (`v4` or `v6`), whose index slots for it are prefetched (for a SYN, a key almost
/// certainly absent, the next index line too: [`prefetch`]); no flow key for anything else;
/// whether the IPv4 header's checksum was found correct on the way. A frame the lean path may take (stage 1's parse found its [`super::hint::LeanSegment`])
/// has its hints written into `lean`: returns true (`out`'s flow key is then stale); any
/// other frame into `out` (in place: built elsewhere and copied, the key's narrow fields reach
/// the slot through wide loads that cannot forward from them, a store-forwarding stall
/// per frame), returns false.
#[inline]
fn hint(
    frame: &[u8],
    meta: &Meta,
    host: &Host,
    v4: &Conntrack<Ipv4Addr>,
    v6: &Conntrack<Ipv6Addr>,
    out: &mut FrameHints,
    lean: &mut LeanFrame,
) -> bool {
    match link::receive(frame, meta, host) {
        Ok((rx, EtherType::Ipv4)) => {
            // `LeanSegment::NONE` as far as `is_lean` reads: one store, not the whole segment.
            lean.seg.total = 0;
            let mut checked = false;
            if let Some((key, opens)) = ipv4::flow_key(frame, &rx, &mut lean.seg, &mut checked) {
                let hash = prefetch(v4, &key, opens);
                if lean.seg.is_lean() {
                    lean.key = key;
                    lean.hash = hash;
                    return true;
                }
                // Field by field: cheaper here than the whole slot.
                out.candidate = None;
                out.route = None;
                out.new_flow = None;
                out.flow = Some(FlowHint::V4(key, hash));
                out.l3_checked = checked;
                return false;
            }
        }
        Ok((rx, EtherType::Ipv6)) => {
            if let Some((key, opens)) = ipv6::flow_key(frame, &rx) {
                *out = FrameHints { flow: Some(FlowHint::V6(key, prefetch(v6, &key, opens))), ..FrameHints::NONE };
                return false;
            }
        }
        _ => {}
    }
    *out = FrameHints::NONE;
    false
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
