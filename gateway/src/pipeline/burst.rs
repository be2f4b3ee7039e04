//! Burst processing that overlaps memory latency, as DPDK and VPP fast paths do
//! ([`process_burst`]): every frame of a burst is parsed far enough to know its flow key,
//! the keys are hashed and their conntrack index slots prefetched; a second pass reads the
//! (by then cached) home slots and prefetches the flow records they point to; only then is
//! each frame processed by [`process`]. The cache misses of up to [`PREFETCH_WINDOW`]
//! lookups are thus in flight together instead of one after another (VPP's dual/quad loop
//! and `vlib_prefetch_buffer_header`, DPDK's `rte_prefetch0` ahead of `rte_hash_lookup_bulk`).
//!
//! The results are exactly those of calling [`process`] on each frame in order: the early
//! passes change nothing but the cache (prefetches are hints), and the hash handed to a
//! frame's lookup is used only when the full parse finds the same key the early parse did.

use super::link;
use super::{ipv4, process, Meta, Verdict, WorkerState};
use crate::conntrack::FlowKey;
use crate::table::Table;
use crate::wire::EtherType;

/// Frames whose lookups [`process_burst`] overlaps: a DPDK burst.
pub const PREFETCH_WINDOW: usize = 32;

/// A frame's flow key and its conntrack hash, computed ahead of [`process`].
pub(super) type FlowHint = (FlowKey, u64);

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
            hints[i - start] = flow_key(frames[i].as_mut(), &metas[i], st).map(|key| {
                let hash = st.conntrack.hash_key(&key);
                st.conntrack.prefetch_index(hash);
                (key, hash)
            });
        }
        for &(_, hash) in hints[..end - start].iter().flatten() {
            st.conntrack.prefetch_record(hash);
        }
        for i in start..end {
            st.flow_hint = hints[i - start];
            verdicts[i] = process(now, frames[i].as_mut(), &metas[i], table, st);
            st.flow_hint = None;
        }
        start = end;
    }
}

/// The flow key of an IPv4 TCP or UDP frame, from its headers alone (none of the checks
/// [`process`] makes beyond what a safe parse needs); `None` for anything else.
#[inline]
fn flow_key(frame: &[u8], meta: &Meta, st: &WorkerState) -> Option<FlowKey> {
    match link::receive(frame, meta, &st.host) {
        Ok((rx, EtherType::Ipv4)) => ipv4::flow_key(frame, &rx),
        _ => None,
    }
}
