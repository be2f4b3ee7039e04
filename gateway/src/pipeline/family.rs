//! The address family as the flow path sees it: [`Family`], implemented by [`Ipv4Addr`] and
//! [`Ipv6Addr`], names what differs between IPv4 and IPv6 flows — which of the worker's two
//! conntrack tables holds them, the Maglev flow hash of their 5-tuple, and the header
//! rewrite (IPv4: header checksum and TTL; IPv6: Hop Limit, no header checksum, transport
//! header after any extension headers). Everything else in [`super::flow`] and
//! [`super::backend`] is written once for both.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::fragment::{self, Fragment, FragmentTarget};
use super::WorkerState;
use crate::conntrack::{Address, Conntrack, FlowKey};
use crate::host::HostAddr;
use crate::maglev;
use crate::nat::{self, Rewrite};
use crate::wire::checksum::PseudoHeaderAddr;
use crate::wire::{IpProtocol, MacAddr};

/// An IP address family the flow path serves: see the module documentation.
pub(super) trait Family: Address + HostAddr + PseudoHeaderAddr + Into<IpAddr> {
    /// This family's conntrack table in `st`.
    fn conntrack(st: &WorkerState) -> &Conntrack<Self>;

    /// This family's conntrack table in `st`, mutable.
    fn conntrack_mut(st: &mut WorkerState) -> &mut Conntrack<Self>;

    /// `ip` when it is of this family.
    fn from_ip(ip: IpAddr) -> Option<Self>;

    /// The Maglev flow hash of `key` ([`maglev::flow_hash`]: the same value whichever
    /// worker or gateway computes it).
    fn flow_hash(key: &FlowKey<Self>) -> u64;

    /// The conntrack hash [`super::process_burst`] computed ahead for `key`, if it did
    /// (IPv4 only) and for this very key.
    fn hinted_hash(st: &mut WorkerState, key: &FlowKey<Self>) -> Option<u64>;

    /// Rewrites the packet `ip` (network header to the end of the packet) whose transport
    /// header of `protocol` starts at `l4_offset`: addresses and ports to `rw`, TTL / Hop
    /// Limit decremented, checksums updated ([`nat`]).
    fn rewrite(ip: &mut [u8], l4_offset: usize, protocol: IpProtocol, rw: &Rewrite<Self>, l4_partial: bool);

    /// Records what was done to the first fragment `first` (rewritten to `rw`, sent out
    /// `egress` = (interface, next-hop MAC), in the flow's original direction or not,
    /// counted on `frontend`) for the later fragments of its datagram ([`fragment::record`]).
    /// Only IPv4 fragments reach the flow path; IPv6 ones are dropped before it.
    fn record_fragment(
        now: u64,
        st: &mut WorkerState,
        first: &Fragment,
        rw: &Rewrite<Self>,
        egress: (u8, MacAddr),
        original: bool,
        frontend: Option<(u32, u32)>,
    );
}

impl Family for Ipv4Addr {
    #[inline]
    fn conntrack(st: &WorkerState) -> &Conntrack<Self> {
        &st.conntrack
    }

    #[inline]
    fn conntrack_mut(st: &mut WorkerState) -> &mut Conntrack<Self> {
        &mut st.conntrack
    }

    #[inline]
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        }
    }

    #[inline]
    fn flow_hash(key: &FlowKey<Self>) -> u64 {
        maglev::flow_hash_v4(key.protocol, key.src_addr, key.src_port, key.dst_addr, key.dst_port)
    }

    #[inline]
    fn hinted_hash(st: &mut WorkerState, key: &FlowKey<Self>) -> Option<u64> {
        match st.flow_hint.take() {
            Some((hinted, hash)) if hinted == *key => Some(hash),
            _ => None,
        }
    }

    #[inline]
    fn rewrite(ip: &mut [u8], _l4_offset: usize, _protocol: IpProtocol, rw: &Rewrite<Self>, l4_partial: bool) {
        nat::rewrite_ipv4(ip, rw, l4_partial);
    }

    #[inline]
    fn record_fragment(
        now: u64,
        st: &mut WorkerState,
        first: &Fragment,
        rw: &Rewrite<Self>,
        (iface, mac): (u8, MacAddr),
        original: bool,
        frontend: Option<(u32, u32)>,
    ) {
        let target = FragmentTarget { src: rw.src_addr, dst: rw.dst_addr, iface, mac, original, frontend };
        fragment::record(now, st, first, target);
    }
}

impl Family for Ipv6Addr {
    #[inline]
    fn conntrack(st: &WorkerState) -> &Conntrack<Self> {
        &st.conntrack6
    }

    #[inline]
    fn conntrack_mut(st: &mut WorkerState) -> &mut Conntrack<Self> {
        &mut st.conntrack6
    }

    #[inline]
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        }
    }

    #[inline]
    fn flow_hash(key: &FlowKey<Self>) -> u64 {
        maglev::flow_hash(key.protocol, key.src_addr.into(), key.src_port, key.dst_addr.into(), key.dst_port)
    }

    #[inline]
    fn hinted_hash(_st: &mut WorkerState, _key: &FlowKey<Self>) -> Option<u64> {
        None
    }

    #[inline]
    fn rewrite(ip: &mut [u8], l4_offset: usize, protocol: IpProtocol, rw: &Rewrite<Self>, l4_partial: bool) {
        nat::rewrite_ipv6(ip, l4_offset, protocol, rw, l4_partial);
    }

    #[inline]
    fn record_fragment(
        _now: u64,
        _st: &mut WorkerState,
        _first: &Fragment,
        _rw: &Rewrite<Self>,
        _egress: (u8, MacAddr),
        _original: bool,
        _frontend: Option<(u32, u32)>,
    ) {
        // IPv6 fragments are dropped as `DropReason::Fragment` before the flow path.
    }
}
