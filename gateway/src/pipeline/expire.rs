//! The end of flows: idle expiry in bounded steps ([`poll_expire`]) and what a removed flow
//! gives back — its SNAT port to its worker's pool, its count to its endpoint's connections
//! (shared by expiry and by the removals on the packet path: [`release`]).

use std::net::IpAddr;

use super::backend;
use super::family::Family;
use super::WorkerState;
use crate::conntrack::{Address, Flow, FlowId};
use crate::host::{Host, HostAddr};
use crate::scheduler::Schedulers;
use crate::snat::SnatPorts;

/// Expires idle flows, examining at most `budget` conntrack records, and frees their SNAT
/// ports. Returns the number of flows removed.
pub fn poll_expire(now: u64, budget: usize, st: &mut WorkerState) -> usize {
    let WorkerState { conntrack, conntrack6, snat, host, counters, schedulers, .. } = st;
    let n = conntrack.expire(now, budget, |flow| release(snat, schedulers, host, flow))
        + conntrack6.expire(now, budget, |flow| release(snat, schedulers, host, flow));
    counters.expired_flows += n as u64;
    n
}

/// Removes flow `id` from the worker's conntrack and releases it ([`release`]).
pub(super) fn remove_flow<A: Family>(st: &mut WorkerState, id: FlowId) {
    let old = A::conntrack_mut(st).remove(id);
    release(&mut st.snat, &st.schedulers, &st.host, &old);
}

/// What a flow that left the conntrack gives back: its SNAT port ([`free_snat_port`]) and,
/// when the scheduler counts connections, its count ([`backend::count_closed`]).
pub(super) fn release<A: Address + HostAddr + Into<IpAddr>>(
    snat: &mut SnatPorts,
    schedulers: &Schedulers,
    host: &Host,
    flow: &Flow<A>,
) {
    free_snat_port(snat, host, flow);
    backend::count_closed(host, schedulers, flow);
}

/// Returns the SNAT port of `flow` (the reply direction's destination) to the pool.
fn free_snat_port<A: Address + HostAddr>(snat: &mut SnatPorts, host: &Host, flow: &Flow<A>) {
    if let Some(i) = host.snat_index(flow.reply.dst_addr) {
        snat.free(i, flow.reply.protocol, flow.reply.dst_port);
    }
}
