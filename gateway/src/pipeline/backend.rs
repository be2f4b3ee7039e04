//! Endpoint choice for new flows (the gateway's scheduler, with `sessionAffinity: ClientIP`
//! above it), the per-endpoint connection counts the counting schedulers read (kept as
//! flows open, change TCP state and end), and the check that a tracked flow's endpoint
//! still serves its front door after a table change (as a ring backend or as a draining
//! endpoint).

use std::net::IpAddr;

use super::family::Family;
use super::WorkerState;
use crate::affinity::{self, Sticky};
use crate::conntrack::tcp::TcpState;
use crate::conntrack::{Address, Flow, FlowKey, FlowState};
use crate::counters::DropReason;
use crate::host::Host;
use crate::maglev;
use crate::scheduler::{self, Endpoint, Scheduler, Schedulers};
use crate::table::layout::{self, Backend};
use crate::table::{ServiceRing, Table};
use crate::wire::IpProtocol;

/// The endpoint for a new flow `key` to `service` (the table's service `service_id`): with
/// `sessionAffinity: ClientIP`, the one this client was last sent to if it is still an
/// endpoint and the affinity has not timed out (as kube-proxy's IPVS mode puts persistence
/// above the scheduler), else the scheduler's choice ([`schedule`]), remembered for the
/// client. `ring_backend` is the position among `service`'s backends of the Maglev ring's
/// choice when the caller already knows it (a burst found it ahead), else `None`.
///
/// The service is viewed here, as what choosing reads ([`Table::service_ring`]); its name,
/// which only affinity needs, is read then (the service viewed whole sliced two table
/// sections more for every reopened tuple's SYN, and in the caller, took its registers).
///
/// # Errors
/// [`DropReason::NoFrontend`] when `table` has no service `service_id`; `Ok(None)` when it
/// has no endpoint to choose.
#[inline]
pub(super) fn choose<'t, A: Family>(
    now: u64,
    table: &'t Table,
    service_id: u32,
    key: &FlowKey<A>,
    ring_backend: Option<u32>,
    st: &mut WorkerState,
) -> Result<Option<&'t Backend>, DropReason> {
    let service = table.service_ring(service_id).ok_or(DropReason::NoFrontend)?;
    Ok(chosen(now, table, &service, service_id, key, ring_backend, st))
}

/// [`choose`] from the service's [`ServiceRing`].
#[inline(always)]
fn chosen<'t, A: Family>(
    now: u64,
    table: &'t Table,
    service: &ServiceRing<'t>,
    service_id: u32,
    key: &FlowKey<A>,
    ring_backend: Option<u32>,
    st: &mut WorkerState,
) -> Option<&'t Backend> {
    if service.affinity_timeout_s == 0 {
        return schedule(service, service_id, key, ring_backend, st);
    }
    let client16 = layout::addr16(key.src_addr.into());
    let name = table.service(service_id).map_or(&[][..], |s| s.name_bytes());
    let skey = affinity::service_key(name);
    // A remembered endpoint that now only drains takes no new flows: the scheduler decides.
    let remembered = st.affinity.lookup(skey, client16, now).and_then(|s| service.backend(s.addr, s.port));
    let backend = match remembered {
        Some(b) => b,
        None => schedule(service, service_id, key, ring_backend, st)?,
    };
    let expires_ns = now.saturating_add(u64::from(service.affinity_timeout_s) * 1_000_000_000);
    st.affinity.record(skey, client16, Sticky { addr: backend.addr, port: backend.port.get(), expires_ns }, now);
    Some(backend)
}

/// The gateway's scheduler's choice ([`crate::scheduler`]) among `service`'s ring backends
/// (draining endpoints take no new flows) for a new flow `key`; every endpoint weighs 1
/// (the table carries no weights). `maglev`: the ring slot of [`ring_hash`] (Maglev §3.4),
/// or `ring_backend` when given; `rr`, `wrr`: the service's next turn; `lc`, `wlc`, `sed`,
/// `nq`: the endpoints' connection counts now; `dh`: the bucket of the destination (the
/// front door's address); `sh`: the bucket of the client's address; `random`: the worker's
/// generator. `None` without backends.
///
/// Always inlined (into [`choose`]), Maglev's choice with it, every other scheduler's out
/// of line ([`schedule_other`]): with `#[inline]` the whole match was a second call under
/// `choose` for a flow a closed one's tuple reopens (no burst's hint names its endpoint).
#[inline(always)]
fn schedule<'t, A: Family>(
    service: &ServiceRing<'t>,
    service_id: u32,
    key: &FlowKey<A>,
    ring_backend: Option<u32>,
    st: &mut WorkerState,
) -> Option<&'t Backend> {
    if st.host.scheduler == Scheduler::Maglev {
        return maglev(service, key, ring_backend);
    }
    schedule_other(service, service_id, key, ring_backend, st)
}

/// Maglev's choice among `service`'s ring backends for a new flow `key`: `ring_backend`
/// when the burst looked it up ahead, else the ring slot of [`ring_hash`] (Maglev §3.4).
#[inline(always)]
fn maglev<'t, A: Family>(
    service: &ServiceRing<'t>,
    key: &FlowKey<A>,
    ring_backend: Option<u32>,
) -> Option<&'t Backend> {
    match ring_backend {
        Some(position) => service.backends.get(position as usize),
        None => service.pick(ring_hash(service, key)),
    }
}

/// [`schedule`] of every scheduler but Maglev (whose arm is here too, the same choice, so
/// that the match needs no arm that cannot happen).
#[inline(never)]
fn schedule_other<'t, A: Family>(
    service: &ServiceRing<'t>,
    service_id: u32,
    key: &FlowKey<A>,
    ring_backend: Option<u32>,
    st: &mut WorkerState,
) -> Option<&'t Backend> {
    let backends = service.backends;
    let n = backends.len();
    let weight = |_| 1;
    let load = |i: usize| st.schedulers.connections.load(&endpoint_of(key.protocol, &backends[i]));
    let position = match st.host.scheduler {
        Scheduler::Maglev => return maglev(service, key, ring_backend),
        Scheduler::Rr => scheduler::round_robin(n, st.schedulers.turns.next(service_id)),
        Scheduler::Wrr => scheduler::weighted_round_robin(n, weight, st.schedulers.turns.next(service_id)),
        Scheduler::Lc => scheduler::least_connections(n, load),
        Scheduler::Wlc => scheduler::weighted_least_connections(n, load),
        Scheduler::Sed => scheduler::shortest_expected_delay(n, load),
        Scheduler::Nq => scheduler::never_queue(n, load),
        Scheduler::Dh => scheduler::dh_position(n, scheduler::dh_bucket(key.dst_addr.into()), weight),
        Scheduler::Sh => scheduler::sh_position(n, scheduler::sh_bucket(key.src_addr.into()), weight),
        Scheduler::Random => (n != 0).then(|| st.random.usize(..n)),
    };
    backends.get(position?)
}

/// The endpoint `backend` of a flow of `protocol`, as connections are counted.
#[inline]
fn endpoint_of(protocol: u8, backend: &Backend) -> Endpoint {
    Endpoint { protocol, addr: backend.addr, port: backend.port.get() }
}

/// The endpoint a flow's connection is counted for: its reply tuple's source (the record
/// holds no table index: the count is found again whatever the table became).
#[inline]
fn endpoint_of_flow<A: Address + Into<IpAddr>>(flow: &Flow<A>) -> Endpoint {
    Endpoint {
        protocol: flow.reply.protocol,
        addr: layout::addr16(flow.reply.src_addr.into()),
        port: flow.reply.src_port,
    }
}

/// Whether a flow of `protocol` in `state` is an active connection as IPVS counts them: TCP
/// in ESTABLISHED (`set_tcp_state` in `ip_vs_proto_tcp.c`); SCTP answered and not closed (its
/// ESTABLISHED, `ip_vs_proto_sctp.c`); anything else (UDP) inactive.
#[inline]
pub(super) fn is_active(protocol: u8, state: &FlowState) -> bool {
    match IpProtocol::from(protocol) {
        IpProtocol::Tcp => state.tcp_state() == TcpState::Established,
        IpProtocol::Sctp => state.assured(),
        _ => false,
    }
}

/// Counts the new flow `flow` for its endpoint (inactive) when the scheduler counts
/// connections. Called once the flow is in the conntrack. The test always inlined, the
/// count out of line ([`count_opened_now`]): with `#[inline]` the whole was a call for
/// every new flow, which most schedulers (Maglev's among them) do not count; inlined whole,
/// it cost a SYN 88 instructions (docs/optimisation-log.md, "New flow, fifth round").
#[inline(always)]
pub(super) fn count_opened<A: Address + Into<IpAddr>>(st: &WorkerState, flow: &Flow<A>) {
    if st.host.scheduler.counts_connections() {
        count_opened_now(st, flow);
    }
}

/// [`count_opened`]'s count.
#[inline(never)]
fn count_opened_now<A: Address + Into<IpAddr>>(st: &WorkerState, flow: &Flow<A>) {
    st.schedulers.connections.opened(&endpoint_of_flow(flow));
}

/// Moves `flow`'s count between inactive and active when its state crossed ESTABLISHED
/// (it was active before the packet when `was_active`). Called only when the scheduler
/// counts connections.
#[inline]
pub(super) fn count_state<A: Address + Into<IpAddr>>(st: &WorkerState, flow: &Flow<A>, was_active: bool) {
    let active = is_active(flow.reply.protocol, &flow.state);
    if active != was_active {
        st.schedulers.connections.established(&endpoint_of_flow(flow), active);
    }
}

/// Uncounts `flow`, which leaves the conntrack (removed, evicted or expired), when the
/// scheduler counts connections.
#[inline]
pub(super) fn count_closed<A: Address + Into<IpAddr>>(host: &Host, schedulers: &Schedulers, flow: &Flow<A>) {
    if host.scheduler.counts_connections() {
        schedulers.connections.closed(&endpoint_of_flow(flow), is_active(flow.reply.protocol, &flow.state));
    }
}

/// The hash whose ring slot the `maglev` scheduler ([`schedule`]) takes for a new flow `key` to `service` (when no
/// remembered endpoint applies): the client address's with `sessionAffinity: ClientIP`,
/// the 5-tuple's without. What a burst looks the choice up with ahead
/// ([`ServiceRing::slot`], [`ServiceRing::ring_backend`]). O(1), reads only `service`.
#[inline]
pub(super) fn ring_hash<A: Family>(service: &ServiceRing<'_>, key: &FlowKey<A>) -> u64 {
    if service.affinity_timeout_s == 0 {
        A::flow_hash(key)
    } else {
        maglev::client_hash(key.src_addr.into())
    }
}

/// Whether the endpoint of `flow` is still an endpoint of the front door the flow entered
/// by — one of its service's ring backends, or a draining endpoint (serving but not taking
/// new flows: kube-proxy lets connections to those finish, and clears conntrack entries
/// only of endpoints that stopped serving): that front door's index in `table` if so (the
/// flow's new `FlowState::frontend`). The front door's source ranges are not looked at:
/// they apply to new flows only, as kube-proxy's firewall matches `ctstate NEW`.
pub(super) fn still_serves<A: Family>(table: &Table, flow: &Flow<A>) -> Option<u32> {
    let o = &flow.original;
    let front = table.frontend(o.dst_addr.into(), o.protocol, o.dst_port)?;
    let service = table.service(front.service)?;
    service.serves(layout::addr16(flow.reply.src_addr.into()), flow.reply.src_port).then_some(front.index)
}
