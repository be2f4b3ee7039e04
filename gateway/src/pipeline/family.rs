//! The address family as the flow path sees it: [`Family`], implemented by [`Ipv4Addr`] and
//! [`Ipv6Addr`], names what differs between IPv4 and IPv6 flows — which of the worker's two
//! conntrack tables holds them, the Maglev flow hash of their 5-tuple, and the header
//! rewrite (IPv4: header checksum and TTL; IPv6: Hop Limit, no header checksum, transport
//! header after any extension headers), and which fragment table follows their fragments. Everything else in [`super::flow`] and
//! [`super::backend`] is written once for both.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::hint::{FlowHint, LeanSegment};
use super::state::FragmentTarget;
use super::WorkerState;
use crate::conntrack::synproxy::Keyed;
use crate::conntrack::{Address, Conntrack, FlowKey};
use crate::fragments::{FragmentAddr, FragmentTable};
use crate::host::HostAddr;
use crate::maglev;
use crate::nat::{self, Rewrite};
use crate::neighbour::NeighbourAddr;
use crate::snat::SnatPorts;
use crate::wire::checksum::PseudoHeaderAddr;
use crate::wire::IpProtocol;

/// An IP address family the flow path serves: see the module documentation.
pub(super) trait Family:
    Address + HostAddr + PseudoHeaderAddr + FragmentAddr + NeighbourAddr + Keyed + Into<IpAddr>
{
    /// This family's conntrack table in `st`.
    fn conntrack(st: &WorkerState) -> &Conntrack<Self>;

    /// This family's conntrack table in `st`, mutable.
    fn conntrack_mut(st: &mut WorkerState) -> &mut Conntrack<Self>;

    /// This family's conntrack table in `st`, mutable, and the host beside it (whose
    /// timeouts tracking reads without copying them).
    fn conntrack_and_host(st: &mut WorkerState) -> (&mut Conntrack<Self>, &crate::host::Host);

    /// This family's conntrack table in `st`, the worker's SNAT ports (mutable) and the
    /// host: what a new flow's SNAT port choice reads and moves (`super::flow`).
    fn conntrack_and_snat(st: &mut WorkerState) -> (&Conntrack<Self>, &mut SnatPorts, &crate::host::Host);

    /// `ip` when it is of this family.
    fn from_ip(ip: IpAddr) -> Option<Self>;

    /// The Maglev flow hash of `key` ([`maglev::flow_hash`]: the same value whichever
    /// worker or gateway computes it).
    fn flow_hash(key: &FlowKey<Self>) -> u64;

    /// The conntrack hash [`super::process_burst`] computed ahead for `key`, if it did
    /// and for this very key (of this family).
    fn hinted_hash(st: &mut WorkerState, key: &FlowKey<Self>) -> Option<u64>;

    /// The flow key of `hint` when it is of this family.
    fn hinted_key(hint: &Option<FlowHint>) -> Option<&FlowKey<Self>>;

    /// The hint of flow key `key` of this family and its conntrack hash `hash` (the inverse
    /// of [`Family::hinted_key`]).
    fn flow_hint(key: FlowKey<Self>, hash: u64) -> FlowHint;

    /// Rewrites the packet `ip` (network header to the end of the packet) whose transport
    /// header of `protocol` starts at `l4_offset`: addresses and ports to `rw`, TTL / Hop
    /// Limit decremented, checksums updated ([`nat`]).
    fn rewrite(ip: &mut [u8], l4_offset: usize, protocol: IpProtocol, rw: &Rewrite<Self>, l4_partial: bool);

    /// This family's fragment table in `st` ([`super::fragment`]).
    fn fragments_mut(st: &mut WorkerState) -> &mut FragmentTable<Self, FragmentTarget<Self>>;

    /// Rewrites the IP header of the later fragment `ip` (network header to the end of the
    /// packet) to addresses `src` → `dst`, TTL / Hop Limit decremented (IPv4: header checksum
    /// updated, RFC 1624; IPv6 has none). The caller checked TTL > 1.
    fn rewrite_header(ip: &mut [u8], src: Self, dst: Self);
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
    fn conntrack_and_host(st: &mut WorkerState) -> (&mut Conntrack<Self>, &crate::host::Host) {
        (&mut st.conntrack, &st.host)
    }

    #[inline]
    fn conntrack_and_snat(st: &mut WorkerState) -> (&Conntrack<Self>, &mut SnatPorts, &crate::host::Host) {
        (&st.conntrack, &mut st.snat, &st.host)
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
        match st.hints.current().flow.take() {
            Some(FlowHint::V4(hinted, hash, _)) if hinted == *key => Some(hash),
            _ => None,
        }
    }

    #[inline(always)]
    fn hinted_key(hint: &Option<FlowHint>) -> Option<&FlowKey<Self>> {
        match hint {
            Some(FlowHint::V4(key, ..)) => Some(key),
            _ => None,
        }
    }

    #[inline(always)]
    fn flow_hint(key: FlowKey<Self>, hash: u64) -> FlowHint {
        FlowHint::V4(key, hash, LeanSegment::NONE)
    }

    /// A TCP or UDP packet without IPv4 options whose transport header is whole and whose
    /// checksum is not partial (a new flow's SYN, a first fragment, any packet the lean path
    /// turned down) takes the fixed-offset rewrite ([`nat::rewrite_ipv4_plain`], the same
    /// bytes: a property test compares the two); anything else the general one.
    #[inline]
    fn rewrite(ip: &mut [u8], l4_offset: usize, protocol: IpProtocol, rw: &Rewrite<Self>, l4_partial: bool) {
        let tcp = protocol == IpProtocol::Tcp;
        let whole = if tcp { 40 } else { 28 };
        if l4_offset == 20 && !l4_partial && (tcp || protocol == IpProtocol::Udp) && ip.len() >= whole {
            nat::rewrite_ipv4_plain(ip, tcp, rw);
        } else {
            nat::rewrite_ipv4(ip, rw, l4_partial);
        }
    }

    #[inline]
    fn fragments_mut(st: &mut WorkerState) -> &mut FragmentTable<Self, FragmentTarget<Self>> {
        &mut st.fragments
    }

    #[inline]
    fn rewrite_header(ip: &mut [u8], src: Self, dst: Self) {
        nat::rewrite_ipv4_header(ip, src, dst);
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
    fn conntrack_and_host(st: &mut WorkerState) -> (&mut Conntrack<Self>, &crate::host::Host) {
        (&mut st.conntrack6, &st.host)
    }

    #[inline]
    fn conntrack_and_snat(st: &mut WorkerState) -> (&Conntrack<Self>, &mut SnatPorts, &crate::host::Host) {
        (&st.conntrack6, &mut st.snat, &st.host)
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
    fn hinted_hash(st: &mut WorkerState, key: &FlowKey<Self>) -> Option<u64> {
        match st.hints.current().flow.take() {
            Some(FlowHint::V6(hinted, hash)) if hinted == *key => Some(hash),
            _ => None,
        }
    }

    #[inline(always)]
    fn hinted_key(hint: &Option<FlowHint>) -> Option<&FlowKey<Self>> {
        match hint {
            Some(FlowHint::V6(key, _)) => Some(key),
            _ => None,
        }
    }

    #[inline(always)]
    fn flow_hint(key: FlowKey<Self>, hash: u64) -> FlowHint {
        FlowHint::V6(key, hash)
    }

    /// A TCP or UDP packet without extension headers whose transport header is whole and
    /// whose checksum is not partial takes the fixed-offset rewrite
    /// ([`nat::rewrite_ipv6_plain`], the same bytes); any other [`nat::rewrite_ipv6`].
    #[inline]
    fn rewrite(ip: &mut [u8], l4_offset: usize, protocol: IpProtocol, rw: &Rewrite<Self>, l4_partial: bool) {
        let tcp = protocol == IpProtocol::Tcp;
        let whole = if tcp { 60 } else { 48 };
        if l4_offset == 40 && !l4_partial && (tcp || protocol == IpProtocol::Udp) && ip.len() >= whole {
            nat::rewrite_ipv6_plain(ip, tcp, rw);
        } else {
            nat::rewrite_ipv6(ip, l4_offset, protocol, rw, l4_partial);
        }
    }

    #[inline]
    fn fragments_mut(st: &mut WorkerState) -> &mut FragmentTable<Self, FragmentTarget<Self>> {
        &mut st.fragments6
    }

    #[inline]
    fn rewrite_header(ip: &mut [u8], src: Self, dst: Self) {
        nat::rewrite_ipv6_header(ip, src, dst);
    }
}
