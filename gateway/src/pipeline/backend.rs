//! Endpoint choice for new flows (Maglev, with `sessionAffinity: ClientIP`) and the check
//! that a tracked flow's endpoint still serves its front door after a table change (as a
//! ring backend or as a draining endpoint).

use super::family::Family;
use super::WorkerState;
use crate::affinity::{self, Sticky};
use crate::conntrack::{Flow, FlowKey};
use crate::maglev;
use crate::table::layout::{self, Backend};
use crate::table::{ServiceRef, ServiceRing, Table};

/// The endpoint for a new flow: with `sessionAffinity: ClientIP`, the one this client was
/// last sent to if it is still an endpoint and the affinity has not timed out, else the
/// ring slot of the client's address (so every worker and every gateway agrees); without
/// affinity, the ring slot of the flow's 5-tuple hash (Maglev §3.4). `ring_backend` is the
/// position among `service`'s backends of the ring's choice when the caller already knows it
/// (a burst found it ahead), else `None`.
#[inline]
pub(super) fn choose<'s, A: Family>(
    now: u64,
    service: &'s ServiceRef<'_>,
    key: &FlowKey<A>,
    ring_backend: Option<u32>,
    st: &WorkerState,
) -> Option<&'s Backend> {
    let ring = || match ring_backend {
        Some(position) => service.backends.get(position as usize),
        None => service.pick(ring_hash(service, key)),
    };
    if service.affinity_timeout_s == 0 {
        return ring();
    }
    let client16 = layout::addr16(key.src_addr.into());
    let skey = affinity::service_key(service.name_bytes());
    // A remembered endpoint that now only drains takes no new flows: the ring decides.
    let remembered = st.affinity.lookup(skey, client16, now).and_then(|s| service.backend(s.addr, s.port));
    let backend = remembered.or_else(ring)?;
    let expires_ns = now.saturating_add(u64::from(service.affinity_timeout_s) * 1_000_000_000);
    st.affinity.record(skey, client16, Sticky { addr: backend.addr, port: backend.port.get(), expires_ns }, now);
    Some(backend)
}

/// The hash whose ring slot [`choose`] takes for a new flow `key` to `service` (when no
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
