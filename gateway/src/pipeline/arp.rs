//! ARP (RFC 826) arriving at the gateway: requests for its own addresses and for VIPs are
//! answered in place; the sender's mapping is learned when it sits on a connected subnet of
//! the receiving interface. Requests the gateway sends itself are written here
//! ([`write_request`]) and sent by [`super::resolve`] and [`super::gratuitous`].
//! In L2 mode only the VIPs this gateway owns are answered for ([`answers`]).

use std::net::{IpAddr, Ipv4Addr};

use super::link::{self, Rx};
use super::{Verdict, WorkerState};
use crate::counters::DropReason;
use crate::host::HostInterface;
use crate::table::Table;
use crate::wire::{ArpOperation, ArpPacket, EtherType, MacAddr};

/// Handles the ARP packet after the link-layer header of `frame`.
pub(super) fn handle(now: u64, frame: &mut [u8], rx: &Rx, table: &Table, st: &mut WorkerState) -> Verdict {
    let host = &*st.host;
    let iface = &host.interfaces[usize::from(rx.iface)];
    let (op, sha, spa, tpa) = {
        let Ok(arp) = ArpPacket::new_checked(&frame[rx.l2_len..rx.len]) else {
            return Verdict::Drop(DropReason::MalformedArp);
        };
        (arp.operation(), arp.sender_hardware_addr(), arp.sender_protocol_addr(), arp.target_protocol_addr())
    };
    // RFC 826 knows requests and replies only (RFC 5494 reserves the rest): anything else
    // teaches nothing.
    if let ArpOperation::Unknown(_) = op {
        return Verdict::Drop(DropReason::MalformedArp);
    }
    // Learn the sender when it sits on this link (RFC 826 "merge" step), never from
    // broadcast or zero addresses.
    if sha.is_unicast() && !spa.is_unspecified() && iface.addresses.iter().any(|c| c.contains(spa)) {
        if st.neighbours.learn(spa, sha, now) {
            st.counters.arp_learned += 1;
        } else {
            st.counters.neighbours_not_learned += 1;
        }
    }
    match op {
        ArpOperation::Request if host.is_own(tpa) || answers(table, st, IpAddr::V4(tpa)) => {
            let mut arp = ArpPacket::new_unchecked(&mut frame[rx.l2_len..rx.len]);
            arp.set_operation(ArpOperation::Reply);
            arp.set_sender_hardware_addr(iface.mac);
            arp.set_sender_protocol_addr(tpa);
            arp.set_target_hardware_addr(sha);
            arp.set_target_protocol_addr(spa);
            st.counters.arp_replies += 1;
            // The reply goes to the requester's hardware address (RFC 826 "swap" step).
            link::transmit(frame, rx, rx.len - rx.l2_len, rx.iface, sha, host)
        }
        ArpOperation::Request => Verdict::Drop(DropReason::ArpNotForUs),
        _ => Verdict::Consumed,
    }
}

/// Whether `vip` is a VIP of `table` this gateway answers ARP/NDP for: every one, or in L2
/// mode only those it owns now ([`crate::l2::Owners`]); a non-owner stays silent.
#[inline]
pub(super) fn answers(table: &Table, st: &WorkerState, vip: IpAddr) -> bool {
    table.is_vip(vip) && st.l2.answers(vip)
}

/// Writes a broadcast ARP request for `target` from `spa` on `iface` into `buf` (the
/// resolution requests of [`super::resolve`]; with `spa` = `target`, the announcements of
/// [`super::gratuitous`]); returns the frame length.
pub(super) fn write_request(buf: &mut [u8], iface: &HostInterface, spa: Ipv4Addr, target: Ipv4Addr) -> usize {
    const ARP_LEN: usize = 28;
    let l2 = link::write_header(buf, MacAddr::BROADCAST, iface.mac, iface.vlan, EtherType::Arp);
    let len = l2 + ARP_LEN;
    let mut arp = ArpPacket::new_unchecked(&mut buf[l2..len]);
    arp.fill_header();
    arp.set_operation(ArpOperation::Request);
    arp.set_sender_hardware_addr(iface.mac);
    arp.set_sender_protocol_addr(spa);
    arp.set_target_hardware_addr(MacAddr::UNSPECIFIED);
    arp.set_target_protocol_addr(target);
    len
}
