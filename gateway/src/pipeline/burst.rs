//! Burst processing that overlaps memory latency, as DPDK and VPP fast paths do
//! ([`process_burst`]). A window of up to [`PREFETCH_WINDOW`] frames goes through stages,
//! each of which starts the memory loads the next one needs, so the cache misses of many
//! frames are in flight together instead of one after another (VPP's dual/quad loop and
//! `vlib_prefetch_buffer_header`, DPDK's `rte_prefetch0` ahead of `rte_hash_lookup_bulk`):
//!
//! 1. every frame is parsed far enough to know its flow key; the key is hashed and its
//!    conntrack index slot prefetched;
//! 2. every frame's probe run is read by fingerprint alone
//!    ([`crate::conntrack::Conntrack::prefetch_record`]) and the flow record it names
//!    prefetched;
//! 3. [`EGRESS_AHEAD`] frames before a frame is processed, its flow record (loaded by
//!    then) is read to find where the packet will go — the next hop's neighbour slot and
//!    the front door's counters are prefetched;
//! 4. the frame is processed by [`process`].
//!
//! IPv4 frames (TCP, UDP, SCTP) are hinted against the worker's IPv4 conntrack, IPv6 frames
//! (TCP and UDP, after any extension headers) against its IPv6 one; fragments and everything
//! else are processed without a hint.
//!
//! The results are exactly those of calling [`process`] on each frame in order: the early
//! stages change nothing but the cache (prefetches are hints, and what stage 3 reads may be
//! stale by the time the frame is processed without harm), and the hash handed to a frame's
//! lookup is used only when the full parse finds the same key the early parse did.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::family::Family;
use super::link;
use super::{ipv4, ipv6, process, Meta, Verdict, WorkerState};
use crate::conntrack::{Direction, FlowId, FlowKey};
use crate::table::Table;
use crate::wire::{EtherType, IpProtocol, SctpPacket, TcpPacket, UdpPacket};

/// Frames whose lookups [`process_burst`] overlaps: a DPDK burst.
pub const PREFETCH_WINDOW: usize = 32;

/// How many frames ahead of the one being processed [`process_burst`] reads a flow record
/// to prefetch the next hop and the front door's counters (stage 3): far enough for the
/// record (prefetched in stage 2) to have arrived, and for those loads to arrive before
/// their frame's turn.
pub const EGRESS_AHEAD: usize = 8;

/// The flow a frame's lookup will almost certainly find, found ahead (stage 2): its id and
/// matched direction in the conntrack of its family.
#[derive(Clone, Copy, Debug)]
enum Ahead {
    /// In the worker's IPv4 conntrack.
    V4(FlowId, Direction),
    /// In the worker's IPv6 conntrack.
    V6(FlowId, Direction),
}

/// A frame's flow key and its conntrack hash (in the conntrack of the key's family),
/// computed ahead of [`process`].
#[derive(Clone, Copy, Debug)]
pub(super) enum FlowHint {
    /// An IPv4 flow key and its hash in the worker's IPv4 conntrack.
    V4(FlowKey<Ipv4Addr>, u64),
    /// An IPv6 flow key and its hash in the worker's IPv6 conntrack.
    V6(FlowKey<Ipv6Addr>, u64),
}

/// Processes a burst: `verdicts[i]` becomes what `process(now, frames[i], metas[i], ..)`
/// returns, frame by frame in order, for the first `min(frames, metas, verdicts)` frames;
/// the state ends as `process` would leave it. Pure in the same sense as [`process`]: no
/// I/O, no clock, no allocation (the hints live on the stack, [`PREFETCH_WINDOW`] at a
/// time). See the module documentation for what it does before processing.
pub fn process_burst<B: AsMut<[u8]>>(
    now: u64,
    frames: &mut [B],
    metas: &[Meta],
    table: &Table,
    st: &mut WorkerState,
    verdicts: &mut [Verdict],
) {
    let n = frames.len().min(metas.len()).min(verdicts.len());
    let mut start = 0;
    while start < n {
        let count = (n - start).min(PREFETCH_WINDOW);
        let mut hints: [Option<FlowHint>; PREFETCH_WINDOW] = [None; PREFETCH_WINDOW];
        for (i, h) in hints[..count].iter_mut().enumerate() {
            *h = hint(frames[start + i].as_mut(), &metas[start + i], st);
        }
        let mut ahead: [Option<Ahead>; PREFETCH_WINDOW] = [None; PREFETCH_WINDOW];
        for (a, h) in ahead[..count].iter_mut().zip(&hints[..count]) {
            *a = match *h {
                Some(FlowHint::V4(_, hash)) => st.conntrack.prefetch_record(hash).map(|(id, d)| Ahead::V4(id, d)),
                Some(FlowHint::V6(_, hash)) => st.conntrack6.prefetch_record(hash).map(|(id, d)| Ahead::V6(id, d)),
                None => None,
            };
        }
        for a in ahead[..count.min(EGRESS_AHEAD)].iter().flatten() {
            prefetch_egress(st, *a);
        }
        for i in 0..count {
            if let Some(Some(a)) = ahead[..count].get(i + EGRESS_AHEAD) {
                prefetch_egress(st, *a);
            }
            st.flow_hint = hints[i];
            verdicts[start + i] = process(now, frames[start + i].as_mut(), &metas[start + i], table, st);
            st.flow_hint = None;
        }
        start += count;
    }
}

/// Stage 3: reads the record of the flow found ahead and prefetches what forwarding along it
/// will read — the neighbour slot of the packet's next hop (the endpoint's for the original
/// direction, the client's for replies: [`super::flow::egress`]) and the front door's
/// counters.
#[inline]
fn prefetch_egress(st: &WorkerState, ahead: Ahead) {
    match ahead {
        Ahead::V4(id, direction) => prefetch_egress_of::<Ipv4Addr>(st, id, direction),
        Ahead::V6(id, direction) => prefetch_egress_of::<Ipv6Addr>(st, id, direction),
    }
}

#[inline]
fn prefetch_egress_of<A: Family>(st: &WorkerState, id: FlowId, direction: Direction) {
    let flow = A::conntrack(st).peek(id);
    let to = match direction {
        Direction::Original => flow.reply.src_addr,
        Direction::Reply => flow.original.src_addr,
    };
    if let Some((_, hop)) = st.host.route(to) {
        st.neighbours.prefetch(hop);
    }
    st.frontends.prefetch(flow.state.frontend);
}

/// The flow key of an IPv4 TCP, UDP or SCTP frame or an IPv6 TCP or UDP frame, from its
/// headers alone (none of the checks [`process`] makes beyond what a safe parse needs), hashed
/// for its family's conntrack, whose index slots for it are prefetched; `None` for anything
/// else.
#[inline]
fn hint(frame: &[u8], meta: &Meta, st: &WorkerState) -> Option<FlowHint> {
    match link::receive(frame, meta, &st.host) {
        Ok((rx, EtherType::Ipv4)) => ipv4::flow_key(frame, &rx).map(|key| FlowHint::V4(key, prefetch(st, &key))),
        Ok((rx, EtherType::Ipv6)) => ipv6::flow_key(frame, &rx).map(|key| FlowHint::V6(key, prefetch(st, &key))),
        _ => None,
    }
}

/// Hashes `key` for its family's conntrack and prefetches the index slots the hash selects.
#[inline]
fn prefetch<A: Family>(st: &WorkerState, key: &FlowKey<A>) -> u64 {
    let hash = A::conntrack(st).hash_key(key);
    A::conntrack(st).prefetch_index(hash);
    hash
}

/// The (source, destination) ports of the TCP, UDP or SCTP header `l4` of `protocol`, read
/// with checked views; `None` for another protocol or a header that does not fit.
#[inline]
pub(super) fn ports(protocol: IpProtocol, l4: &[u8]) -> Option<(u16, u16)> {
    match protocol {
        IpProtocol::Tcp => TcpPacket::new_checked(l4).map(|t| (t.src_port(), t.dst_port())).ok(),
        IpProtocol::Udp => UdpPacket::new_checked(l4).map(|u| (u.src_port(), u.dst_port())).ok(),
        IpProtocol::Sctp => SctpPacket::new_checked(l4).map(|p| (p.src_port(), p.dst_port())).ok(),
        _ => None,
    }
}
