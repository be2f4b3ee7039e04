//! Burst processing that overlaps memory latency, as DPDK and VPP fast paths do
//! ([`process_burst`]): every frame of a burst is parsed far enough to know its flow key,
//! the keys are hashed and their conntrack index slots prefetched; a second pass reads the
//! (by then cached) home slots and prefetches the flow records they point to; only then is
//! each frame processed by [`process`]. The cache misses of up to [`PREFETCH_WINDOW`]
//! lookups are thus in flight together instead of one after another (VPP's dual/quad loop
//! and `vlib_prefetch_buffer_header`, DPDK's `rte_prefetch0` ahead of `rte_hash_lookup_bulk`).
//!
//! IPv4 frames (TCP, UDP, SCTP) are hinted against the worker's IPv4 conntrack, IPv6 frames
//! (TCP and UDP, after any extension headers) against its IPv6 one; fragments and everything
//! else are processed without a hint.
//!
//! The results are exactly those of calling [`process`] on each frame in order: the early
//! passes change nothing but the cache (prefetches are hints), and the hash handed to a
//! frame's lookup is used only when the full parse finds the same key the early parse did.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::family::Family;
use super::link;
use super::{ipv4, ipv6, process, Meta, Verdict, WorkerState};
use crate::conntrack::FlowKey;
use crate::table::Table;
use crate::wire::{EtherType, IpProtocol, SctpPacket, TcpPacket, UdpPacket};

/// Frames whose lookups [`process_burst`] overlaps: a DPDK burst.
pub const PREFETCH_WINDOW: usize = 32;

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
        let end = (start + PREFETCH_WINDOW).min(n);
        let mut hints: [Option<FlowHint>; PREFETCH_WINDOW] = [None; PREFETCH_WINDOW];
        for i in start..end {
            hints[i - start] = hint(frames[i].as_mut(), &metas[i], st);
        }
        for hint in hints[..end - start].iter().flatten() {
            match *hint {
                FlowHint::V4(_, hash) => st.conntrack.prefetch_record(hash),
                FlowHint::V6(_, hash) => st.conntrack6.prefetch_record(hash),
            }
        }
        for i in start..end {
            st.flow_hint = hints[i - start];
            verdicts[i] = process(now, frames[i].as_mut(), &metas[i], table, st);
            st.flow_hint = None;
        }
        start = end;
    }
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
