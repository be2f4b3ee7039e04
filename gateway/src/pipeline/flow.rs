//! The conntrack path of TCP and UDP: lookup of the 5-tuple in the worker's conntrack
//! (both directions indexed), revalidation of a flow against a newer table, creation of a
//! flow on a miss (front door, endpoint, SNAT port), TCP/UDP idle timeouts in the manner of
//! Linux conntrack, and the NAT rewrite and MAC addressing of the forwarded frame.

use std::net::IpAddr;

use super::expire::remove_flow;
use super::ipv4::Segment;
use super::link::{self, Rx};
use super::reject::reject;
use super::resolve::neighbour;
use super::{backend, Verdict, WorkerState};
use crate::conntrack::{Direction, Flow, FlowId, FlowKey, InsertError};
use crate::counters::DropReason;
use crate::nat::{self, Rewrite};
use crate::table::layout;
use crate::table::Table;
use crate::wire::{EthernetFrame, IpProtocol, MacAddr, TcpFlags};

/// TCP tracking bits kept in [`Flow::tcp_state`].
mod tcp_state {
    pub const FIN_ORIGINAL: u8 = 1;
    pub const FIN_REPLY: u8 = 2;
    pub const RST: u8 = 4;
}

/// Forwards the TCP or UDP packet `seg` in `frame` along its flow, creating the flow on a
/// conntrack miss.
pub(super) fn handle(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    seg: &Segment,
) -> Verdict {
    let key = FlowKey {
        protocol: u8::from(seg.proto),
        src_addr: seg.src,
        src_port: seg.sport,
        dst_addr: seg.dst,
        dst_port: seg.dport,
    };

    let mut hit = st.conntrack.lookup(&key);
    if let Some((id, _)) = hit {
        if st.conntrack.get(id).deadline <= now {
            // Idle past its timeout but not reaped yet: it is gone.
            remove_flow(st, id);
            hit = None;
        }
    }
    if let Some((id, Direction::Original)) = hit {
        let flow = st.conntrack.get(id);
        if flow.table_generation != table.generation() as u32 {
            if backend::still_serves(table, flow) {
                st.conntrack.get_mut(id).table_generation = table.generation() as u32;
            } else {
                // The endpoint left its Service (DESIGN.md "Failure semantics"): a TCP
                // client gets a RST so it fails fast instead of hanging; anything else is
                // steered anew by this very packet.
                remove_flow(st, id);
                st.counters.endpoint_gone += 1;
                if seg.proto == IpProtocol::Tcp {
                    return reject(frame, rx, st);
                }
                hit = None;
            }
        }
    }
    let (id, dir) = match hit {
        Some(h) => h,
        None => {
            if seg.ttl <= 1 {
                return Verdict::Drop(DropReason::TtlExceeded);
            }
            match new_flow(now, frame, rx, table, st, key, seg.tcp_flags) {
                Ok(id) => (id, Direction::Original),
                Err(v) => return v,
            }
        }
    };
    if seg.ttl <= 1 {
        return Verdict::Drop(DropReason::TtlExceeded);
    }
    let flow = track(now, st, id, dir, seg);
    forward(now, frame, rx, st, &flow, dir, seg.total)
}

/// Updates the TCP state bits and the idle deadline of flow `id` for a packet in
/// direction `dir`; returns a copy of the flow.
fn track(now: u64, st: &mut WorkerState, id: FlowId, dir: Direction, seg: &Segment) -> Flow {
    let timeouts = st.host.timeouts;
    let flow = st.conntrack.get_mut(id);
    if dir == Direction::Reply {
        flow.seen_reply = true;
    }
    if seg.proto == IpProtocol::Tcp {
        if seg.tcp_flags.contains(TcpFlags::RST) {
            flow.tcp_state |= tcp_state::RST;
        }
        if seg.tcp_flags.contains(TcpFlags::FIN) {
            flow.tcp_state |= if dir == Direction::Original { tcp_state::FIN_ORIGINAL } else { tcp_state::FIN_REPLY };
        }
        let closing = flow.tcp_state & tcp_state::RST != 0
            || flow.tcp_state & (tcp_state::FIN_ORIGINAL | tcp_state::FIN_REPLY)
                == (tcp_state::FIN_ORIGINAL | tcp_state::FIN_REPLY);
        let established = flow.seen_reply && !closing;
        flow.deadline = now + if established { timeouts.tcp_established_ns } else { timeouts.tcp_transitory_ns };
    } else {
        flow.deadline = now + if flow.seen_reply { timeouts.udp_stream_ns } else { timeouts.udp_ns };
    }
    *flow
}

/// Rewrites the IPv4 packet (`total` bytes after the link-layer header) along `flow` in
/// direction `dir` and addresses the frame to its next hop: the endpoint's (resolved by
/// ARP) for the original direction, the client's MAC for replies.
fn forward(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    flow: &Flow,
    dir: Direction,
    total: usize,
) -> Verdict {
    let (rw, out_iface, dst_mac) = match dir {
        Direction::Original => {
            let Some((out, hop)) = st.host.route(flow.reply.src_addr) else {
                return Verdict::Drop(DropReason::NoRoute);
            };
            let Some(mac) = neighbour(st, hop, out, now) else {
                return Verdict::Drop(DropReason::NeighbourUnresolved);
            };
            st.counters.forwarded_original += 1;
            (
                Rewrite {
                    src_addr: flow.reply.dst_addr,
                    src_port: flow.reply.dst_port,
                    dst_addr: flow.reply.src_addr,
                    dst_port: flow.reply.src_port,
                },
                out,
                mac,
            )
        }
        Direction::Reply => {
            st.counters.forwarded_reply += 1;
            (
                Rewrite {
                    src_addr: flow.original.dst_addr,
                    src_port: flow.original.dst_port,
                    dst_addr: flow.original.src_addr,
                    dst_port: flow.original.src_port,
                },
                flow.ingress_iface,
                MacAddr(flow.client_mac),
            )
        }
    };
    let l3 = rx.l2_len;
    nat::rewrite_ipv4(&mut frame[l3..l3 + total], &rw, rx.l4_csum_partial);
    link::transmit(frame, rx, total, out_iface, dst_mac, &st.host)
}

/// Creates the flow for `key` (a conntrack miss): front door, source-range check, endpoint,
/// SNAT port.
///
/// The source ranges (`loadBalancerSourceRanges`) are checked here only, on a conntrack
/// miss, so established flows pay nothing for them: one binary search over the front
/// door's merged ranges, none when it has none. A client outside them is dropped
/// ([`DropReason::SourceRangeDenied`]), as by kube-proxy's firewall chain, whether or not
/// the Service has endpoints.
fn new_flow(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    key: FlowKey,
    tcp_flags: TcpFlags,
) -> Result<FlowId, Verdict> {
    let Some(fe) = table.frontend(IpAddr::V4(key.dst_addr), key.protocol, key.dst_port) else {
        return Err(Verdict::Drop(DropReason::NoFrontend));
    };
    if !fe.source_ranges.admits(IpAddr::V4(key.src_addr)) {
        return Err(Verdict::Drop(DropReason::SourceRangeDenied));
    }
    if key.protocol == u8::from(IpProtocol::Tcp) && tcp_flags.contains(TcpFlags::RST) {
        return Err(Verdict::Drop(DropReason::NoConntrack));
    }
    let service = table.service(fe.service).ok_or(Verdict::Drop(DropReason::NoFrontend))?;
    let Some(backend) = backend::choose(now, &service, &key, st) else {
        return Err(reject(frame, rx, st));
    };
    let IpAddr::V4(backend_ip) = layout::addr_from16(backend.addr) else {
        return Err(Verdict::Drop(DropReason::UnsupportedFamily));
    };
    let Some((out, _)) = st.host.route(backend_ip) else {
        return Err(Verdict::Drop(DropReason::NoRoute));
    };
    let (snat_index, snat_ip) = st.host.snat_address_for(out);
    let endpoint = std::net::SocketAddrV4::new(backend_ip, backend.port.get());
    let Some(snat_port) = st.snat.alloc_for(snat_index, key.protocol, endpoint) else {
        return Err(Verdict::Drop(DropReason::SnatExhausted));
    };
    let client_mac = EthernetFrame::new_unchecked(&frame[..rx.l2_len]).src_addr().0;
    let flow = Flow {
        original: key,
        reply: FlowKey {
            protocol: key.protocol,
            src_addr: backend_ip,
            src_port: backend.port.get(),
            dst_addr: snat_ip,
            dst_port: snat_port,
        },
        client_mac,
        ingress_iface: rx.iface,
        service: fe.service,
        tcp_state: 0,
        seen_reply: false,
        table_generation: table.generation() as u32,
        deadline: now,
    };
    match st.conntrack.insert(flow) {
        Ok(id) => {
            st.counters.new_flows += 1;
            Ok(id)
        }
        Err(e) => {
            st.snat.free(snat_index, key.protocol, snat_port);
            Err(Verdict::Drop(match e {
                InsertError::Full => DropReason::ConntrackFull,
                // The reply tuple is taken: only possible if the SNAT bitmap and conntrack
                // disagree; refuse rather than hijack another flow.
                InsertError::Exists => DropReason::SnatExhausted,
            }))
        }
    }
}
