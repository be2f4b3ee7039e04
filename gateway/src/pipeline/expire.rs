//! The end of flows: idle expiry in bounded steps ([`poll_expire`]) and the removals on the
//! packet path. A removed flow's SNAT port needs no freeing: it is free for the same
//! endpoint as soon as its reply tuple leaves the conntrack ([`crate::snat`]).

use super::family::Family;
use super::WorkerState;
use crate::conntrack::FlowId;

/// Expires idle flows, examining at most `budget` conntrack records. Returns the number of
/// flows removed.
pub fn poll_expire(now: u64, budget: usize, st: &mut WorkerState) -> usize {
    let n = st.conntrack.expire(now, budget, |_| {}) + st.conntrack6.expire(now, budget, |_| {});
    st.counters.expired_flows += n as u64;
    n
}

/// Removes flow `id` from the worker's conntrack.
pub(super) fn remove_flow<A: Family>(st: &mut WorkerState, id: FlowId) {
    A::conntrack_mut(st).remove(id);
}
