//! The end of flows: idle expiry in bounded steps ([`poll_expire`]) and what a flow that left
//! the conntrack gives back ([`flow_ended`]) — its count to its endpoint's connections and
//! its SYN-proxy translation — shared by expiry and by the removals and evictions on the
//! packet path. A removed flow's SNAT port needs no freeing: it is free for the same
//! endpoint as soon as its reply tuple leaves the conntrack ([`crate::snat`]).

use std::net::IpAddr;

use super::backend;
use super::family::Family;
use super::WorkerState;
use crate::conntrack::synproxy::{Keyed, SynProxy};
use crate::conntrack::{Address, Flow, FlowId};
use crate::host::{Host, HostAddr};
use crate::scheduler::Schedulers;

/// Expires idle flows, examining at most `budget` conntrack records, and releases them
/// (their SYN-proxy translations and the schedulers' connection counts). Returns the number
/// of flows removed.
pub fn poll_expire(now: u64, budget: usize, st: &mut WorkerState) -> usize {
    let WorkerState { conntrack, conntrack6, host, counters, schedulers, synproxy, .. } = st;
    let n = conntrack.expire(now, budget, |flow| ended(schedulers, synproxy, host, flow))
        + conntrack6.expire(now, budget, |flow| ended(schedulers, synproxy, host, flow));
    counters.expired_flows += n as u64;
    n
}

/// Removes flow `id` from the worker's conntrack and releases it ([`flow_ended`]).
pub(super) fn remove_flow<A: Family>(st: &mut WorkerState, id: FlowId) {
    let old = A::conntrack_mut(st).remove(id);
    flow_ended(st, &old);
}

/// What a flow removed from conntrack (removed, expired or evicted) gives back: its count
/// to its endpoint's connections when the scheduler counts them
/// ([`backend::count_closed`]), and its SYN-proxy translation.
pub(super) fn flow_ended<A: Family>(st: &mut WorkerState, flow: &Flow<A>) {
    ended(&st.schedulers, &mut st.synproxy, &st.host, flow);
}

/// [`flow_ended`] over the parts of the worker's state it touches.
fn ended<A: Address + HostAddr + Keyed + Into<IpAddr>>(
    schedulers: &Schedulers,
    synproxy: &mut SynProxy,
    host: &Host,
    flow: &Flow<A>,
) {
    backend::count_closed(host, schedulers, flow);
    synproxy.forget(&flow.original);
}
