//! The conntrack path of TCP, UDP and SCTP: lookup of the 5-tuple in the worker's conntrack
//! (both directions indexed), revalidation of a flow against a newer table, creation of a
//! flow on a miss (front door, endpoint, SNAT port), TCP/UDP idle timeouts in the manner of
//! Linux conntrack (SCTP's in [`super::sctp`]), and the NAT rewrite and MAC addressing of the
//! forwarded frame; a first fragment's translation is recorded for the later ones
//! ([`super::fragment`]).

use std::net::IpAddr;

use super::expire::remove_flow;
use super::fragment::{self, FragmentTarget};
use super::ipv4::Segment;
use super::link::{self, Rx};
use super::reject::reject;
use super::resolve::neighbour;
use super::{backend, sctp, Verdict, WorkerState};
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
    /// SCTP: an ABORT or SHUTDOWN COMPLETE was seen (see [`super::sctp::timeout_ns`]).
    pub const SCTP_CLOSED: u8 = 8;
}

/// Forwards the TCP, UDP or SCTP packet `seg` in `frame` along its flow, creating the flow
/// on a conntrack miss.
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
            // Segments that end a connection never start one: a TCP RST, an SCTP ABORT or
            // SHUTDOWN COMPLETE of an unknown association.
            let stray = (seg.proto == IpProtocol::Tcp && seg.tcp_flags.contains(TcpFlags::RST))
                || (seg.proto == IpProtocol::Sctp && seg.sctp.close);
            match new_flow(now, frame, rx, table, st, key, stray) {
                Ok(id) => (id, Direction::Original),
                Err(v) => return v,
            }
        }
    };
    if seg.ttl <= 1 {
        return Verdict::Drop(DropReason::TtlExceeded);
    }
    let flow = track(now, st, id, dir, seg);
    forward(now, frame, rx, st, &flow, dir, seg)
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
    } else if seg.proto == IpProtocol::Sctp {
        let (timeout, closed) =
            sctp::timeout_ns(flow.tcp_state & tcp_state::SCTP_CLOSED != 0, flow.seen_reply, seg.sctp);
        flow.tcp_state = if closed { tcp_state::SCTP_CLOSED } else { 0 };
        flow.deadline = now + timeout;
    } else {
        flow.deadline = now + if flow.seen_reply { timeouts.udp_stream_ns } else { timeouts.udp_ns };
    }
    *flow
}

/// Rewrites the IPv4 packet `seg` along `flow` in direction `dir` and addresses the frame to
/// its next hop (see [`egress`]). A first fragment's translation is recorded for the later
/// fragments of its datagram; its transport checksum is always updated incrementally (a
/// fragment never carries a partial checksum, and a full one would need the whole datagram).
fn forward(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    flow: &Flow,
    dir: Direction,
    seg: &Segment,
) -> Verdict {
    let (rw, out_iface, dst_mac) = match egress(now, st, flow, dir) {
        Ok(e) => e,
        Err(reason) => return Verdict::Drop(reason),
    };
    match dir {
        Direction::Original => st.counters.forwarded_original += 1,
        Direction::Reply => st.counters.forwarded_reply += 1,
    }
    let l3 = rx.l2_len;
    let partial = rx.l4_csum_partial && seg.first_fragment.is_none();
    nat::rewrite_ipv4(&mut frame[l3..l3 + seg.total], &rw, partial);
    let verdict = link::transmit(frame, rx, seg.total, out_iface, dst_mac, &st.host);
    if let (Some(first), Verdict::Transmit { .. }) = (&seg.first_fragment, verdict) {
        let target = FragmentTarget { src: rw.src_addr, dst: rw.dst_addr, iface: out_iface, mac: dst_mac };
        fragment::record(now, st, first, target);
    }
    verdict
}

/// Where a packet of `flow` travelling in direction `dir` goes: its new addresses and ports,
/// the egress interface and the next hop's MAC — the endpoint's next hop (resolved by ARP)
/// for the original direction, the client's MAC for replies. ICMP errors about the flow
/// ([`super::icmp_error`]) travel the same way.
///
/// # Errors
/// [`DropReason::NoRoute`], [`DropReason::NeighbourUnresolved`] (a resolution was queued).
pub(super) fn egress(
    now: u64,
    st: &mut WorkerState,
    flow: &Flow,
    dir: Direction,
) -> Result<(Rewrite, u8, MacAddr), DropReason> {
    Ok(match dir {
        Direction::Original => {
            let Some((out, hop)) = st.host.route(flow.reply.src_addr) else {
                return Err(DropReason::NoRoute);
            };
            let Some(mac) = neighbour(st, hop, out, now) else {
                return Err(DropReason::NeighbourUnresolved);
            };
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
        Direction::Reply => (
            Rewrite {
                src_addr: flow.original.dst_addr,
                src_port: flow.original.dst_port,
                dst_addr: flow.original.src_addr,
                dst_port: flow.original.src_port,
            },
            flow.ingress_iface,
            MacAddr(flow.client_mac),
        ),
    })
}

/// Creates the flow for `key` (a conntrack miss): front door, endpoint, SNAT port.
fn new_flow(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    key: FlowKey,
    stray: bool,
) -> Result<FlowId, Verdict> {
    let Some(fe) = table.frontend(IpAddr::V4(key.dst_addr), key.protocol, key.dst_port) else {
        return Err(Verdict::Drop(DropReason::NoFrontend));
    };
    if stray {
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
