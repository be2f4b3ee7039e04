//! The end of flows: idle expiry in bounded steps ([`poll_expire`]) and the return of a
//! removed flow's SNAT port to its worker's pool (shared by expiry and by the removals on
//! the packet path).

use super::family::Family;
use super::WorkerState;
use crate::conntrack::{Address, Flow, FlowId};
use crate::host::{Host, HostAddr};
use crate::snat::SnatPorts;

/// Expires idle flows, examining at most `budget` conntrack records, and frees their SNAT
/// ports. Returns the number of flows removed.
pub fn poll_expire(now: u64, budget: usize, st: &mut WorkerState) -> usize {
    let WorkerState { conntrack, conntrack6, snat, host, counters, .. } = st;
    let n = conntrack.expire(now, budget, |flow| free_snat_port(snat, host, flow))
        + conntrack6.expire(now, budget, |flow| free_snat_port(snat, host, flow));
    counters.expired_flows += n as u64;
    n
}

/// Removes flow `id` from the worker's conntrack and frees its SNAT port.
pub(super) fn remove_flow<A: Family>(st: &mut WorkerState, id: FlowId) {
    let old = A::conntrack_mut(st).remove(id);
    free_snat_port(&mut st.snat, &st.host, &old);
}

/// Returns the SNAT port of `flow` (the reply direction's destination) to the pool.
pub(super) fn free_snat_port<A: Address + HostAddr>(snat: &mut SnatPorts, host: &Host, flow: &Flow<A>) {
    if let Some(i) = host.snat_index(flow.reply.dst_addr) {
        snat.free(i, flow.reply.protocol, flow.reply.dst_port);
    }
}
