//! The end of flows: idle expiry in bounded steps ([`poll_expire`]), paced by the clock
//! ([`ExpiryPace`]), and what a flow that left the conntrack gives back ([`flow_ended`]) —
//! its count to its endpoint's connections and its SYN-proxy translation — shared by expiry
//! and by the removals and evictions on the packet path. A removed flow's SNAT port needs no
//! freeing: it is free for the same endpoint as soon as its reply tuple leaves the
//! conntrack ([`crate::snat`]).
//!
//! Expiry only reclaims: a flow past its deadline is gone for every packet whether or not it
//! was reaped yet (the flow path, the lean path and ICMP errors check the deadline, and the
//! SNAT search and a full table's early drop take expired flows first), so how soon it is
//! reaped moves memory and counts, never a verdict on the flow's own packets. One count
//! does steer other flows: the connection-counting schedulers (`lc`, `wlc`) count a flow
//! until it is reaped ([`backend::count_closed`]), so an expired, unreaped flow still
//! weighs on its endpoint for new flows, for up to a sweep.

use std::net::IpAddr;

use super::backend;
use super::family::Family;
use super::WorkerState;
use crate::conntrack::synproxy::{Keyed, SynProxy};
use crate::conntrack::{Address, Flow, FlowId};
use crate::host::{Host, HostAddr};
use crate::scheduler::Schedulers;

/// Expires idle flows, examining at most `budget` records of each of the worker's two
/// conntracks (IPv4 and IPv6; [`ExpiryPace`] paces the larger's), and releases them
/// (their SYN-proxy translations and the schedulers' connection counts). Returns the number
/// of flows removed.
pub fn poll_expire(now: u64, budget: usize, st: &mut WorkerState) -> usize {
    let WorkerState { conntrack, conntrack6, host, counters, schedulers, synproxy, .. } = st;
    let n = conntrack.expire(now, budget, |flow| ended(schedulers, synproxy, host, flow))
        + conntrack6.expire(now, budget, |flow| ended(schedulers, synproxy, host, flow));
    counters.expired_flows += n as u64;
    n
}

/// How many conntrack records a worker's loop pass examines for expiry ([`poll_expire`]'s
/// budget), paced by the clock rather than by the loop: the whole table once per
/// [`ExpiryPace::SWEEP_NS`], so a flow is reaped within about a second of its deadline, as
/// long as the passes may examine that many ([`ExpiryPace::MAX_BUDGET`] a pass: an idle
/// worker, a pass per 5 ms wait, examines up to ~819 k records a second, so a larger table
/// takes proportionally longer). A fixed budget per pass (64 records, before) swept a busy worker's
/// table many times a second — at a million live flows, 4.6 KB of records read per pass,
/// whose cost per frame grew as the vectors shrank below full load — and an idle worker's
/// (a pass per 5 ms wait) once in 80 s. Linux's conntrack garbage collector also works in
/// bounded, time-paced chunks (`gc_worker`, `GC_SCAN_MAX_DURATION`), lazier still.
#[derive(Clone, Copy, Debug)]
pub struct ExpiryPace {
    /// The time up to which the sweep has been paid for, monotonic ns: never more than
    /// [`ExpiryPace::SWEEP_NS`] behind the clock.
    paid_ns: u64,
}

impl ExpiryPace {
    /// Time to sweep the whole table once, ns.
    pub const SWEEP_NS: u64 = 1_000_000_000;
    /// The largest budget one pass gets (a worker back from a stall pays its debt in passes
    /// of this many records, tens of microseconds each at most).
    pub const MAX_BUDGET: usize = 4096;

    /// A pace whose sweep starts at `now` (monotonic ns).
    pub fn new(now: u64) -> Self {
        Self { paid_ns: now }
    }

    /// The records to examine at `now` (monotonic ns, not before the last call's) in a table
    /// of `capacity` records: `capacity` per [`ExpiryPace::SWEEP_NS`] since the time paid up
    /// to, at most [`ExpiryPace::MAX_BUDGET`] (the rest carried to later passes, but never
    /// more than one sweep's worth). 0 when less than one record is owed, or `capacity` is
    /// 0. O(1).
    pub fn budget(&mut self, now: u64, capacity: usize) -> usize {
        self.paid_ns = self.paid_ns.max(now.saturating_sub(Self::SWEEP_NS));
        // At most 10^9 ns × 2^30 records (`conntrack::MAX_CAPACITY`) < 2^60: no overflow
        // in 64 bits (u128 arithmetic here was a library division on every poll pass). One
        // record's share of a sweep (`SWEEP_NS / capacity`, at least 14 ns at the
        // configuration's largest capacity, 2^26) never rounds to 0, so `paid_ns` moves
        // with every record paid (rounded down: a sweep takes at most a pass's nanosecond
        // less than `SWEEP_NS`).
        let capacity = capacity as u64;
        if capacity == 0 {
            return 0;
        }
        let owed = now.saturating_sub(self.paid_ns) * capacity / Self::SWEEP_NS;
        let budget = owed.min(Self::MAX_BUDGET as u64);
        if budget > 0 {
            self.paid_ns += budget * Self::SWEEP_NS / capacity;
        }
        budget as usize
    }
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

/// Whether a flow that ends has anything to give back ([`flow_ended`]): its count, when the
/// scheduler counts connections, or a SYN-proxy translation, when the family's map holds
/// any. Neither in the common case, where a caller on a path of its own (a reopened
/// tuple's SYN, `flow::reopen`) spares the call.
#[inline(always)]
pub(super) fn gives_back<A: Family>(st: &mut WorkerState) -> bool {
    st.host.scheduler.counts_connections() || !A::map(&mut st.synproxy).is_empty()
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

#[cfg(test)]
mod tests {
    use super::ExpiryPace;

    const SEC: u64 = ExpiryPace::SWEEP_NS;

    /// Passes at any rate examine the table once per sweep period: a busy loop (a pass
    /// every 10 µs), a slow one (a pass per 5 ms wait) and irregular steps all pay
    /// `capacity` records a second, give or take one pass's rounding.
    #[test]
    fn any_pass_rate_sweeps_the_table_once_a_second() {
        for capacity in [1usize, 1000, 65_536, 1 << 20, 1 << 22] {
            for step in [1_000u64, 10_000, 5_000_000, 333_333_333] {
                let mut pace = ExpiryPace::new(7);
                let (mut now, mut examined) = (7u64, 0usize);
                while now < 7 + 10 * SEC {
                    now += step;
                    examined += pace.budget(now, capacity);
                }
                let per_second = examined as f64 / ((now - 7) as f64 / SEC as f64);
                let capped = (ExpiryPace::MAX_BUDGET as f64) * (SEC as f64 / step as f64);
                let expected = (capacity as f64).min(capped);
                assert!(
                    (per_second - expected).abs() <= expected * 0.01 + 1.0,
                    "capacity {capacity}, a pass every {step} ns: {per_second} records/s, not {expected}"
                );
            }
        }
    }

    /// One pass never exceeds the cap; a worker back from a long stall owes one sweep, not
    /// the whole stall's, and pays it in capped passes.
    #[test]
    fn a_stall_owes_one_sweep_paid_in_capped_passes() {
        let capacity = 1 << 20;
        let mut pace = ExpiryPace::new(0);
        let now = 60 * SEC;
        let mut paid = 0;
        let mut passes = 0;
        loop {
            let b = pace.budget(now, capacity);
            assert!(b <= ExpiryPace::MAX_BUDGET);
            if b == 0 {
                break;
            }
            paid += b;
            passes += 1;
        }
        assert!(paid <= capacity && paid + 1 >= capacity, "paid {paid} for a stall of a minute");
        assert_eq!(passes, capacity.div_ceil(ExpiryPace::MAX_BUDGET));
    }

    /// Nothing owed: no time passed, a table of no records, or less than one record's time.
    #[test]
    fn nothing_is_owed_without_time_or_records() {
        let mut pace = ExpiryPace::new(5 * SEC);
        assert_eq!(pace.budget(5 * SEC, 1 << 20), 0);
        assert_eq!(pace.budget(6 * SEC, 0), 0);
        let mut pace = ExpiryPace::new(0);
        assert_eq!(pace.budget(SEC / 1000 - 1, 1000), 0);
        assert_eq!(pace.budget(SEC / 1000, 1000), 1);
    }
}
