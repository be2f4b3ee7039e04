//! Next-hop resolution: the MAC of an endpoint's next hop comes from the shared neighbour
//! table; a missing or old entry queues an ARP request (RFC 826) in the worker's pending
//! slots, which [`poll_transmit`] emits, repeats after [`ARP_RETRY_NS`] and gives up after
//! [`ARP_TRIES`] attempts (a later packet queues it again).

use std::net::{IpAddr, Ipv4Addr};

use super::{link, WorkerState};
use crate::table::layout;
use crate::table::Table;
use crate::wire::{ArpOperation, ArpPacket, EtherType, MacAddr};

/// How long an unanswered ARP request waits before it is repeated, ns.
const ARP_RETRY_NS: u64 = 1_000_000_000;
/// Attempts before a pending resolution is given up (a new packet queues it again).
const ARP_TRIES: u8 = 3;
/// Age after which a resolved neighbour is re-confirmed by a new request, ns.
const NEIGHBOUR_REFRESH_NS: u64 = 60_000_000_000;

/// One queued resolution: `ip` on interface `iface`, next attempt at `next_ns`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pending {
    ip: Option<Ipv4Addr>,
    iface: u8,
    next_ns: u64,
    tries: u8,
}

/// Resolutions a worker keeps queued at once.
pub(super) const PENDING_SLOTS: usize = 64;

impl WorkerState {
    /// Queues an ARP resolution of `ip` on `iface` (deduplicated; a full queue drops the
    /// request, a later packet queues it again).
    pub fn request_resolution(&mut self, ip: Ipv4Addr, iface: u8, now: u64) {
        let mut free = None;
        for (i, p) in self.pending.iter_mut().enumerate() {
            match p.ip {
                Some(x) if x == ip => {
                    if p.tries >= ARP_TRIES && now >= p.next_ns {
                        p.tries = 0;
                    }
                    return;
                }
                None if free.is_none() => free = Some(i),
                _ => {}
            }
        }
        if let Some(i) = free {
            self.pending[i] = Pending { ip: Some(ip), iface, next_ns: now, tries: 0 };
        }
    }

    /// Queues resolution of the next hop of every endpoint in `table` not yet resolved.
    /// Called when a worker adopts a table, so the first packets find their neighbours.
    pub fn resolve_table(&mut self, table: &Table, now: u64) {
        for id in 0..table.service_count() as u32 {
            let Some(s) = table.service(id) else { continue };
            for b in s.backends {
                if let IpAddr::V4(ip) = layout::addr_from16(b.addr) {
                    if let Some((iface, hop)) = self.host.route(ip) {
                        if self.neighbours.lookup(hop).is_none() {
                            self.request_resolution(hop, iface, now);
                        }
                    }
                }
            }
        }
    }
}

/// The resolved MAC of `hop`, queueing a (re)resolution when missing or old.
#[inline]
pub(super) fn neighbour(st: &mut WorkerState, hop: Ipv4Addr, iface: u8, now: u64) -> Option<MacAddr> {
    match st.neighbours.lookup(hop) {
        Some(n) => {
            if n.updated_ns != u64::MAX && now.saturating_sub(n.updated_ns) > NEIGHBOUR_REFRESH_NS {
                st.request_resolution(hop, iface, now);
            }
            Some(n.mac)
        }
        None => {
            st.request_resolution(hop, iface, now);
            None
        }
    }
}

/// Emits the next due ARP request into `buf` (at least 46 bytes: Ethernet, an 802.1Q tag
/// when the interface has a VLAN, ARP), returning the port and frame length; `None` when
/// nothing is due. The worker calls it after each burst until it returns `None`.
pub fn poll_transmit(now: u64, buf: &mut [u8], st: &mut WorkerState) -> Option<(u8, usize)> {
    const ARP_LEN: usize = 28;
    if buf.len() < 14 + 4 + ARP_LEN {
        return None;
    }
    for i in 0..PENDING_SLOTS {
        let p = st.pending[i];
        let Some(ip) = p.ip else { continue };
        if let Some(n) = st.neighbours.lookup(ip) {
            if now.saturating_sub(n.updated_ns) <= NEIGHBOUR_REFRESH_NS || n.updated_ns == u64::MAX {
                st.pending[i] = Pending::default();
                continue;
            }
        }
        if p.tries >= ARP_TRIES {
            if now >= p.next_ns + 10 * ARP_RETRY_NS {
                st.pending[i] = Pending::default();
            }
            continue;
        }
        if now < p.next_ns {
            continue;
        }
        let Some(iface) = st.host.interfaces.get(usize::from(p.iface)) else {
            st.pending[i] = Pending::default();
            continue;
        };
        let Some(spa) = st.host.source_address(p.iface) else {
            st.pending[i] = Pending::default();
            continue;
        };
        let l2 = link::write_header(buf, MacAddr::BROADCAST, iface.mac, iface.vlan, EtherType::Arp);
        let len = l2 + ARP_LEN;
        let mut arp = ArpPacket::new_unchecked(&mut buf[l2..len]);
        arp.fill_header();
        arp.set_operation(ArpOperation::Request);
        arp.set_sender_hardware_addr(iface.mac);
        arp.set_sender_protocol_addr(spa);
        arp.set_target_hardware_addr(MacAddr::UNSPECIFIED);
        arp.set_target_protocol_addr(ip);
        let port = iface.port;
        st.pending[i].tries += 1;
        st.pending[i].next_ns = now + ARP_RETRY_NS;
        st.counters.arp_requests += 1;
        return Some((port, len));
    }
    None
}
