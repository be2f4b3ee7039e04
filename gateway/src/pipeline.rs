//! The data-plane core: [`process`] takes one received frame and decides what becomes of
//! it — forwarded with NAT, answered in place, or dropped under a named reason.
//!
//! # Contract
//!
//! `process(now, frame, meta, table, state)` is a pure function of its arguments: no I/O,
//! no clock (time is `now`, monotonic nanoseconds), no allocation, no locks. The same code
//! runs under every driver, the tests and the benchmarks. No input makes it panic: every
//! header is parsed with a checked view and anything malformed is a counted drop.
//!
//! The frame is rewritten in place inside `frame` (its buffer); the output may be longer
//! than the input (an ICMP error quoting the packet), up to `frame.len()`, which drivers
//! make at least [`MIN_BUFFER`] bytes.
//!
//! # What happens to a frame
//!
//! - ARP (RFC 826): requests for the gateway's own addresses and for VIPs are answered in
//!   place; the sender's mapping is learned when it is on a connected subnet.
//! - IPv4 (RFC 791) with TCP or UDP: the 5-tuple is looked up in this worker's conntrack,
//!   which indexes both directions of every flow. A hit in the original direction
//!   (client → VIP) is rewritten to SNAT address:port → endpoint:port and sent to the
//!   endpoint's next hop; a hit in the reply direction is rewritten back to VIP → client
//!   and routed to the client's next hop (the client itself on a connected subnet, whose MAC
//!   a new flow's first frame teaches when ARP has not). A miss looks up the front door
//!   (destination, protocol, port), picks the endpoint on the Maglev ring of its service
//!   by the flow's 5-tuple hash, allocates a SNAT port this worker owns, and records the
//!   flow. A front door without endpoints answers like kube-proxy's REJECT rule: TCP RST
//!   (RFC 9293 § 3.10.7.1), else ICMP port unreachable (RFC 792, RFC 1812 § 4.3.2.3).
//! - ICMP echo requests (RFC 792) to a VIP or own address are answered in place.
//! - Flows time out after idle periods following Linux conntrack's defaults; expiry runs
//!   in bounded steps through [`poll_expire`].

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::affinity::{self, Affinity, Sticky};
use crate::conntrack::{Conntrack, Deadline, Direction, Flow, FlowKey, FlowState, InsertError};
use crate::counters::{Counters, DropReason};
use crate::host::Host;
use crate::maglev;
use crate::nat::{self, Rewrite};
use crate::neighbour::Neighbours;
use crate::snat::SnatPorts;
use crate::table::layout::{self, Backend};
use crate::table::{ServiceRef, Table};
use crate::wire::checksum;
use crate::wire::icmpv4::DST_UNREACHABLE_PORT;
use crate::wire::{
    ArpOperation, ArpPacket, EtherType, EthernetFrame, Icmpv4Packet, Icmpv4Type, IpProtocol, Ipv4Packet, MacAddr,
    TcpFlags, TcpPacket, UdpPacket,
};

/// Smallest frame buffer a driver may hand to [`process`]: room for the largest ICMP error
/// it builds (Ethernet 14 + IPv4 20 + ICMP 8 + quoted IPv4 header up to 60 + 8 bytes).
pub const MIN_BUFFER: usize = 14 + 20 + 8 + 60 + 8;

/// TTL of packets the gateway originates (RST, ICMP, echo replies); Linux's default.
const ORIGINATED_TTL: u8 = 64;

/// How long an unanswered ARP request waits before it is repeated, ns.
const ARP_RETRY_NS: u64 = 1_000_000_000;
/// Attempts before a pending resolution is given up (a new packet queues it again).
const ARP_TRIES: u8 = 3;
/// Age after which a resolved neighbour is re-confirmed by a new request, ns.
const NEIGHBOUR_REFRESH_NS: u64 = 60_000_000_000;

/// Per-frame metadata from the driver.
#[derive(Clone, Copy, Debug, Default)]
pub struct Meta {
    /// Index of the interface the frame arrived on (as in the configuration).
    pub iface: u8,
    /// Length of the received frame in the buffer, bytes.
    pub len: usize,
    /// The L4 checksum holds only the pseudo-header sum (the sender offloaded it to a NIC
    /// that does not exist on a veth): recompute it in full when rewriting.
    pub l4_csum_partial: bool,
}

/// What the driver does with the frame after [`process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send the first `len` bytes of the buffer on interface `iface`.
    Transmit {
        /// Egress interface index.
        iface: u8,
        /// Frame length, bytes.
        len: usize,
    },
    /// Nothing to send: the frame was consumed (e.g. an ARP reply that was learned from).
    Consumed,
    /// Dropped; already counted under the reason.
    Drop(DropReason),
}

/// TCP tracking bits kept in [`FlowState::tcp_state`].
mod tcp_state {
    pub const FIN_ORIGINAL: u8 = 1;
    pub const FIN_REPLY: u8 = 2;
    pub const RST: u8 = 4;
}

#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    ip: Option<Ipv4Addr>,
    iface: u8,
    next_ns: u64,
    tries: u8,
}

const PENDING_SLOTS: usize = 64;

/// The state all workers share: written rarely (ARP traffic, new flows of Services with
/// session affinity), read without locks where it is on every packet's path.
#[derive(Debug)]
pub struct Shared {
    /// IPv4 address → MAC.
    pub neighbours: Arc<Neighbours>,
    /// `sessionAffinity: ClientIP` choices.
    pub affinity: Arc<Affinity>,
}

impl Shared {
    /// Shared state sized for `neighbours` next hops and `affinity` (client, Service) pairs.
    pub fn new(neighbours: usize, affinity: usize) -> Self {
        Self { neighbours: Arc::new(Neighbours::new(neighbours)), affinity: Arc::new(Affinity::new(affinity)) }
    }
}

/// A worker's private state: its conntrack, SNAT ports, counters, pending ARP resolutions,
/// and shared read-only views of the host and the neighbour table.
pub struct WorkerState {
    /// This worker's index.
    pub worker: usize,
    /// The host (interfaces, addresses, routes, timeouts).
    pub host: Arc<Host>,
    /// The neighbour table shared by all workers.
    pub neighbours: Arc<Neighbours>,
    /// `sessionAffinity: ClientIP` choices, shared by all workers.
    pub affinity: Arc<Affinity>,
    /// This worker's flows.
    pub conntrack: Conntrack,
    /// This worker's SNAT ports.
    pub snat: SnatPorts,
    /// This worker's counters.
    pub counters: Counters,
    pending: [Pending; PENDING_SLOTS],
}

impl std::fmt::Debug for WorkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerState").field("worker", &self.worker).field("flows", &self.conntrack.len()).finish()
    }
}

impl WorkerState {
    /// State for worker `worker` of `workers`, with a conntrack of `capacity` flows.
    /// Allocates everything the packet path will use.
    pub fn new(worker: usize, workers: usize, host: Arc<Host>, shared: &Shared, capacity: usize, seed: u64) -> Self {
        let (min, max) = host.snat_ports;
        let snat = SnatPorts::new(worker, workers, min, max, host.snat_addresses.len());
        Self {
            worker,
            conntrack: Conntrack::new(capacity, seed, &host.snat_addresses),
            snat,
            host,
            neighbours: Arc::clone(&shared.neighbours),
            affinity: Arc::clone(&shared.affinity),
            counters: Counters::default(),
            pending: [Pending::default(); PENDING_SLOTS],
        }
    }

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

/// Processes one received frame. See the module documentation.
#[inline]
pub fn process(now: u64, frame: &mut [u8], meta: &Meta, table: &Table, state: &mut WorkerState) -> Verdict {
    state.counters.rx_frames += 1;
    let verdict = handle_frame(now, frame, meta, table, state);
    match verdict {
        Verdict::Transmit { .. } => state.counters.tx_frames += 1,
        Verdict::Drop(reason) => state.counters.drop(reason),
        Verdict::Consumed => {}
    }
    verdict
}

fn handle_frame(now: u64, frame: &mut [u8], meta: &Meta, table: &Table, st: &mut WorkerState) -> Verdict {
    let len = meta.len.min(frame.len());
    let Ok(eth) = EthernetFrame::new_checked(&frame[..len]) else {
        return Verdict::Drop(DropReason::Truncated);
    };
    let Some(iface) = st.host.interfaces.get(usize::from(meta.iface)) else {
        return Verdict::Drop(DropReason::UnknownInterface);
    };
    let dst_mac = eth.dst_addr();
    if dst_mac != iface.mac && !dst_mac.is_broadcast() {
        return Verdict::Drop(DropReason::NotOurMac);
    }
    match eth.ethertype() {
        EtherType::Arp => handle_arp(now, frame, len, meta, table, st),
        EtherType::Ipv4 => handle_ipv4(now, frame, len, meta, table, st),
        _ => Verdict::Drop(DropReason::UnsupportedEtherType),
    }
}

fn handle_arp(now: u64, frame: &mut [u8], len: usize, meta: &Meta, table: &Table, st: &mut WorkerState) -> Verdict {
    let host = &*st.host;
    let iface = &host.interfaces[usize::from(meta.iface)];
    let (op, sha, spa, tpa) = {
        let Ok(arp) = ArpPacket::new_checked(&frame[EthernetFrame::<&[u8]>::HEADER_LEN..len]) else {
            return Verdict::Drop(DropReason::MalformedArp);
        };
        (arp.operation(), arp.sender_hardware_addr(), arp.sender_protocol_addr(), arp.target_protocol_addr())
    };
    // Learn the sender when it sits on this link (RFC 826 "merge" step), never from
    // broadcast or zero addresses.
    if sha.is_unicast() && !spa.is_unspecified() && iface.addresses.iter().any(|c| c.contains(spa)) {
        st.neighbours.learn(spa, sha, now);
        st.counters.arp_learned += 1;
    }
    match op {
        ArpOperation::Request if host.is_own(tpa) || table.is_vip(IpAddr::V4(tpa)) => {
            let mut eth = EthernetFrame::new_unchecked(&mut frame[..len]);
            eth.set_dst_addr(sha);
            eth.set_src_addr(iface.mac);
            let mut arp = ArpPacket::new_unchecked(eth.payload_mut());
            arp.set_operation(ArpOperation::Reply);
            arp.set_sender_hardware_addr(iface.mac);
            arp.set_sender_protocol_addr(tpa);
            arp.set_target_hardware_addr(sha);
            arp.set_target_protocol_addr(spa);
            st.counters.arp_replies += 1;
            Verdict::Transmit { iface: meta.iface, len }
        }
        ArpOperation::Request => Verdict::Drop(DropReason::ArpNotForUs),
        _ => Verdict::Consumed,
    }
}

fn handle_ipv4(now: u64, frame: &mut [u8], len: usize, meta: &Meta, table: &Table, st: &mut WorkerState) -> Verdict {
    const ETH: usize = 14;
    let (src, dst, proto, ttl, ihl, total) = {
        let Ok(ip) = Ipv4Packet::new_checked(&frame[ETH..len]) else {
            return Verdict::Drop(DropReason::MalformedIpv4);
        };
        if !ip.verify_checksum() {
            return Verdict::Drop(DropReason::BadIpv4Checksum);
        }
        if ip.is_fragment() {
            return Verdict::Drop(DropReason::Fragment);
        }
        (ip.src_addr(), ip.dst_addr(), ip.next_header(), ip.hop_limit(), ip.header_len(), usize::from(ip.total_len()))
    };
    let l4 = ETH + ihl..ETH + total;
    let (sport, dport, tcp_flags) = match proto {
        IpProtocol::Tcp => match TcpPacket::new_checked(&frame[l4.clone()]) {
            Ok(t) => (t.src_port(), t.dst_port(), t.flags()),
            Err(_) => return Verdict::Drop(DropReason::MalformedL4),
        },
        IpProtocol::Udp => match UdpPacket::new_checked(&frame[l4.clone()]) {
            Ok(u) => (u.src_port(), u.dst_port(), TcpFlags::default()),
            Err(_) => return Verdict::Drop(DropReason::MalformedL4),
        },
        IpProtocol::Icmp => return handle_icmp(frame, len, meta, table, st, src, dst, l4),
        _ => return Verdict::Drop(DropReason::UnsupportedProtocol),
    };
    let proto_n = u8::from(proto);
    let key = FlowKey { protocol: proto_n, src_addr: src, src_port: sport, dst_addr: dst, dst_port: dport };

    let mut hit = st.conntrack.lookup(&key);
    if let Some((id, _)) = hit {
        if st.conntrack.state(id).deadline.is_due(now) {
            // Idle past its timeout but not reaped yet: it is gone.
            let old = st.conntrack.remove(id);
            release_snat(st, &old);
            hit = None;
        }
    }
    if let Some((id, Direction::Original)) = hit {
        if st.conntrack.state(id).table_generation != table.generation() as u32 {
            if let Some(frontend) = endpoint_still_serves(table, &st.conntrack.get(id)) {
                let state = st.conntrack.state_mut(id);
                state.table_generation = table.generation() as u32;
                state.frontend = frontend;
            } else {
                // The endpoint left its Service (DESIGN.md "Failure semantics"): a TCP
                // client gets a RST so it fails fast instead of hanging; anything else is
                // steered anew by this very packet.
                let old = st.conntrack.remove(id);
                release_snat(st, &old);
                st.counters.endpoint_gone += 1;
                if proto == IpProtocol::Tcp {
                    return reject(frame, meta, st, ETH);
                }
                hit = None;
            }
        }
    }
    let (id, dir) = match hit {
        Some(h) => h,
        None => {
            if ttl <= 1 {
                return Verdict::Drop(DropReason::TtlExceeded);
            }
            match new_flow(now, frame, meta, table, st, key, tcp_flags, ETH) {
                Ok(id) => (id, Direction::Original),
                Err(v) => return v,
            }
        }
    };
    if ttl <= 1 {
        return Verdict::Drop(DropReason::TtlExceeded);
    }

    let timeouts = st.host.timeouts;
    let flow = st.conntrack.state_mut(id);
    if dir == Direction::Reply {
        flow.seen_reply = true;
    }
    if proto == IpProtocol::Tcp {
        if tcp_flags.contains(TcpFlags::RST) {
            flow.tcp_state |= tcp_state::RST;
        }
        if tcp_flags.contains(TcpFlags::FIN) {
            flow.tcp_state |= if dir == Direction::Original { tcp_state::FIN_ORIGINAL } else { tcp_state::FIN_REPLY };
        }
        let closing = flow.tcp_state & tcp_state::RST != 0
            || flow.tcp_state & (tcp_state::FIN_ORIGINAL | tcp_state::FIN_REPLY)
                == (tcp_state::FIN_ORIGINAL | tcp_state::FIN_REPLY);
        let established = flow.seen_reply && !closing;
        flow.deadline =
            Deadline::after(now, if established { timeouts.tcp_established_ns } else { timeouts.tcp_transitory_ns });
    } else {
        flow.deadline = Deadline::after(now, if flow.seen_reply { timeouts.udp_stream_ns } else { timeouts.udp_ns });
    }
    let flow = st.conntrack.get(id);

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
            // Routed to the client like any packet (no per-flow MAC: DESIGN.md memory budget).
            let Some((out, hop)) = st.host.route(flow.original.src_addr) else {
                return Verdict::Drop(DropReason::NoRoute);
            };
            let Some(mac) = neighbour(st, hop, out, now) else {
                return Verdict::Drop(DropReason::NeighbourUnresolved);
            };
            st.counters.forwarded_reply += 1;
            (
                Rewrite {
                    src_addr: flow.original.dst_addr,
                    src_port: flow.original.dst_port,
                    dst_addr: flow.original.src_addr,
                    dst_port: flow.original.src_port,
                },
                out,
                mac,
            )
        }
    };
    let Some(out) = st.host.interfaces.get(usize::from(out_iface)) else {
        return Verdict::Drop(DropReason::NoRoute);
    };
    nat::rewrite_ipv4(&mut frame[ETH..ETH + total], &rw, meta.l4_csum_partial);
    let mut eth = EthernetFrame::new_unchecked(&mut frame[..len]);
    eth.set_dst_addr(dst_mac);
    eth.set_src_addr(out.mac);
    Verdict::Transmit { iface: out_iface, len: ETH + total }
}

/// Creates the flow for `key` (a conntrack miss): front door, endpoint, SNAT port.
#[allow(clippy::too_many_arguments)]
fn new_flow(
    now: u64,
    frame: &mut [u8],
    meta: &Meta,
    table: &Table,
    st: &mut WorkerState,
    key: FlowKey,
    tcp_flags: TcpFlags,
    eth_len: usize,
) -> Result<u32, Verdict> {
    let Some(fe) = table.frontend(IpAddr::V4(key.dst_addr), key.protocol, key.dst_port) else {
        return Err(Verdict::Drop(DropReason::NoFrontend));
    };
    if key.protocol == 6 && tcp_flags.contains(TcpFlags::RST) {
        return Err(Verdict::Drop(DropReason::NoConntrack));
    }
    let service = table.service(fe.service).ok_or(Verdict::Drop(DropReason::NoFrontend))?;
    let Some(backend) = choose_backend(now, &service, &key, st) else {
        return Err(reject(frame, meta, st, eth_len));
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
    learn_on_link_client(now, frame, eth_len, key.src_addr, st);
    let flow = Flow {
        original: key,
        reply: FlowKey {
            protocol: key.protocol,
            src_addr: backend_ip,
            src_port: backend.port.get(),
            dst_addr: snat_ip,
            dst_port: snat_port,
        },
        state: FlowState::new(fe.index, table.generation() as u32, Deadline::at(now)),
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
                // disagree; refuse rather than hijack another flow. `NotFullNat` cannot
                // happen: the SNAT address comes from the list the table was built with.
                InsertError::Exists | InsertError::NotFullNat => DropReason::SnatExhausted,
            }))
        }
    }
}

/// The endpoint for a new flow: with `sessionAffinity: ClientIP`, the one this client was
/// last sent to if it is still an endpoint and the affinity has not timed out, else the
/// ring slot of the client's address (so every worker and every gateway agrees); without
/// affinity, the ring slot of the flow's 5-tuple hash (Maglev §3.4).
#[inline]
fn choose_backend<'s>(now: u64, service: &'s ServiceRef<'_>, key: &FlowKey, st: &WorkerState) -> Option<&'s Backend> {
    if service.affinity_timeout_s == 0 {
        let hash = maglev::flow_hash_v4(key.protocol, key.src_addr, key.src_port, key.dst_addr, key.dst_port);
        return service.pick(hash);
    }
    let client = IpAddr::V4(key.src_addr);
    let client16 = layout::addr16(client);
    let skey = affinity::service_key(service.name);
    let remembered =
        st.affinity.lookup(skey, client16, now).and_then(|s| find_backend(service.backends, s.addr, s.port));
    let backend = remembered.or_else(|| service.pick(maglev::client_hash(client)))?;
    let expires_ns = now.saturating_add(u64::from(service.affinity_timeout_s) * 1_000_000_000);
    st.affinity.record(skey, client16, Sticky { addr: backend.addr, port: backend.port.get(), expires_ns }, now);
    Some(backend)
}

/// Whether the endpoint of `flow` is still an endpoint of the front door the flow entered by:
/// that front door's index in `table` if so.
fn endpoint_still_serves(table: &Table, flow: &Flow) -> Option<u32> {
    let o = &flow.original;
    let front = table.frontend(IpAddr::V4(o.dst_addr), o.protocol, o.dst_port)?;
    let service = table.service(front.service)?;
    find_backend(service.backends, layout::addr16(IpAddr::V4(flow.reply.src_addr)), flow.reply.src_port)
        .map(|_| front.index)
}

/// Learns the MAC address of a client on a connected subnet from the first frame of its
/// flow when the neighbour table does not know it yet, so the replies (routed to the client,
/// not sent back to a per-flow MAC) need not wait for ARP. A client normally ARPs for the
/// VIP first, which teaches the same mapping (RFC 826 "merge"); this covers clients that
/// learned the gateway's MAC otherwise. A known mapping is never overwritten from IP
/// traffic: only ARP changes it.
fn learn_on_link_client(now: u64, frame: &[u8], eth_len: usize, client: Ipv4Addr, st: &mut WorkerState) {
    let on_link = matches!(st.host.route(client), Some((_, hop)) if hop == client);
    if on_link && st.neighbours.lookup(client).is_none() {
        let mac = EthernetFrame::new_unchecked(&frame[..eth_len]).src_addr();
        if mac.is_unicast() {
            st.neighbours.learn(client, mac, now);
        }
    }
}

/// The endpoint `addr:port` among `backends` (sorted by address, then port, as the table
/// builder lays them out).
#[inline]
fn find_backend(backends: &[Backend], addr: [u8; 16], port: u16) -> Option<&Backend> {
    let key = (u128::from_be_bytes(addr), port);
    backends.binary_search_by_key(&key, |b| (u128::from_be_bytes(b.addr), b.port.get())).ok().map(|i| &backends[i])
}

/// The resolved MAC of `hop`, queueing a (re)resolution when missing or old.
#[inline]
fn neighbour(st: &mut WorkerState, hop: Ipv4Addr, iface: u8, now: u64) -> Option<MacAddr> {
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

fn release_snat(st: &mut WorkerState, flow: &Flow) {
    free_snat_port(&mut st.snat, &st.host, flow);
}

/// Returns the SNAT port of `flow` (the reply direction's destination) to the pool.
fn free_snat_port(snat: &mut SnatPorts, host: &Host, flow: &Flow) {
    if let Some(i) = host.snat_addresses.iter().position(|a| *a == flow.reply.dst_addr) {
        snat.free(i, flow.reply.protocol, flow.reply.dst_port);
    }
}

/// Answers a packet to a front door without endpoints as kube-proxy's REJECT rule does:
/// TCP gets a RST, anything else ICMP port unreachable. Sent back out the ingress
/// interface to the frame's source MAC, from the VIP.
fn reject(frame: &mut [u8], meta: &Meta, st: &mut WorkerState, eth_len: usize) -> Verdict {
    let mac = st.host.interfaces[usize::from(meta.iface)].mac;
    let Some(len) = build_reject(frame, meta.len.min(frame.len()), mac, eth_len) else {
        return Verdict::Drop(DropReason::NoConntrack);
    };
    st.counters.rejected += 1;
    Verdict::Transmit { iface: meta.iface, len }
}

fn build_reject(frame: &mut [u8], len: usize, mac: MacAddr, eth: usize) -> Option<usize> {
    let (src, dst, proto, ihl, total) = {
        let ip = Ipv4Packet::new_checked(&frame[eth..len]).ok()?;
        (ip.src_addr(), ip.dst_addr(), ip.next_header(), ip.header_len(), usize::from(ip.total_len()))
    };
    {
        let mut e = EthernetFrame::new_unchecked(&mut frame[..eth]);
        let client = e.src_addr();
        e.set_dst_addr(client);
        e.set_src_addr(mac);
    }
    if proto == IpProtocol::Tcp {
        // RFC 9293 § 3.10.7.1: "If the incoming segment has an ACK field, the reset takes its
        // sequence number from the ACK field of the segment, otherwise the reset has
        // sequence number zero and the ACK field is set to the sum of the sequence number
        // and segment length of the incoming segment."
        let (sport, dport, seq, ack, flags, seg_len) = {
            let t = TcpPacket::new_checked(&frame[eth + ihl..eth + total]).ok()?;
            (t.src_port(), t.dst_port(), t.seq_number(), t.ack_number(), t.flags(), t.segment_len())
        };
        if flags.contains(TcpFlags::RST) {
            return None;
        }
        let (rst_seq, rst_ack, rst_flags) = if flags.contains(TcpFlags::ACK) {
            (ack, 0, TcpFlags::RST)
        } else {
            (0, seq.wrapping_add(seg_len), TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0))
        };
        let out = &mut frame[eth..eth + 40];
        Ipv4Packet::new_unchecked(&mut out[..]).fill_header(dst, src, IpProtocol::Tcp, 20, ORIGINATED_TTL);
        let mut t = TcpPacket::new_unchecked(&mut out[20..40]);
        t.set_src_port(dport);
        t.set_dst_port(sport);
        t.set_seq_number(rst_seq);
        t.set_ack_number(rst_ack);
        t.set_header_len(20);
        t.set_flags(rst_flags);
        t.set_window_len(0);
        t.set_urgent_at(0);
        t.fill_checksum(dst, src);
        Some(eth + 40)
    } else {
        // RFC 792 / RFC 1812 § 4.3.2.3: quote the IP header and the first 8 data bytes.
        let quoted = (ihl + 8).min(total);
        let need = eth + 20 + 8 + quoted;
        if frame.len() < need {
            return None;
        }
        frame.copy_within(eth..eth + quoted, eth + 28);
        let icmp_len = 8 + quoted;
        Ipv4Packet::new_unchecked(&mut frame[eth..eth + 20]).fill_header(
            dst,
            src,
            IpProtocol::Icmp,
            icmp_len as u16,
            ORIGINATED_TTL,
        );
        let mut icmp = Icmpv4Packet::new_unchecked(&mut frame[eth + 20..need]);
        icmp.set_msg_type(Icmpv4Type::DstUnreachable);
        icmp.set_msg_code(DST_UNREACHABLE_PORT);
        icmp.set_echo_ident(0); // the "unused" word
        icmp.set_echo_seq_no(0);
        icmp.fill_checksum();
        Some(need)
    }
}

#[allow(clippy::too_many_arguments)]
fn handle_icmp(
    frame: &mut [u8],
    len: usize,
    meta: &Meta,
    table: &Table,
    st: &mut WorkerState,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    l4: std::ops::Range<usize>,
) -> Verdict {
    let for_us = st.host.is_own(dst) || table.is_vip(IpAddr::V4(dst));
    let is_echo =
        matches!(Icmpv4Packet::new_checked(&frame[l4.clone()]), Ok(p) if p.msg_type() == Icmpv4Type::EchoRequest);
    if !for_us {
        return Verdict::Drop(DropReason::NoFrontend);
    }
    if !is_echo {
        return Verdict::Drop(DropReason::IcmpNotHandled);
    }
    let mac = st.host.interfaces[usize::from(meta.iface)].mac;
    {
        let mut e = EthernetFrame::new_unchecked(&mut frame[..len]);
        let client = e.src_addr();
        e.set_dst_addr(client);
        e.set_src_addr(mac);
    }
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[14..l4.end]);
        let proto = u8::from(IpProtocol::Icmp);
        let c = checksum::update16(
            ip.checksum(),
            u16::from_be_bytes([ip.hop_limit(), proto]),
            u16::from_be_bytes([ORIGINATED_TTL, proto]),
        );
        // Swapping source and destination leaves the header sum unchanged.
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_hop_limit(ORIGINATED_TTL);
        ip.set_checksum(c);
    }
    let mut icmp = Icmpv4Packet::new_unchecked(&mut frame[l4.clone()]);
    let c = checksum::update16(
        icmp.checksum(),
        u16::from_be_bytes([u8::from(Icmpv4Type::EchoRequest), 0]),
        u16::from_be_bytes([u8::from(Icmpv4Type::EchoReply), 0]),
    );
    icmp.set_msg_type(Icmpv4Type::EchoReply);
    icmp.set_msg_code(0);
    icmp.set_checksum(c);
    st.counters.echo_replies += 1;
    Verdict::Transmit { iface: meta.iface, len: l4.end }
}

/// Emits the next due ARP request into `buf` (at least 42 bytes), returning the
/// interface and frame length; `None` when nothing is due. The worker calls it after each
/// burst until it returns `None`.
pub fn poll_transmit(now: u64, buf: &mut [u8], st: &mut WorkerState) -> Option<(u8, usize)> {
    const LEN: usize = 14 + 28;
    if buf.len() < LEN {
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
        let frame = &mut buf[..LEN];
        frame.fill(0);
        let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.set_dst_addr(MacAddr::BROADCAST);
        eth.set_src_addr(iface.mac);
        eth.set_ethertype(EtherType::Arp);
        let mut arp = ArpPacket::new_unchecked(eth.payload_mut());
        arp.fill_header();
        arp.set_operation(ArpOperation::Request);
        arp.set_sender_hardware_addr(iface.mac);
        arp.set_sender_protocol_addr(spa);
        arp.set_target_hardware_addr(MacAddr::UNSPECIFIED);
        arp.set_target_protocol_addr(ip);
        st.pending[i].tries += 1;
        st.pending[i].next_ns = now + ARP_RETRY_NS;
        st.counters.arp_requests += 1;
        return Some((p.iface, LEN));
    }
    None
}

/// Expires idle flows, examining at most `budget` conntrack records, and frees their SNAT
/// ports. Returns the number of flows removed.
pub fn poll_expire(now: u64, budget: usize, st: &mut WorkerState) -> usize {
    let WorkerState { conntrack, snat, host, counters, .. } = st;
    let n = conntrack.expire(now, budget, |flow| free_snat_port(snat, host, flow));
    counters.expired_flows += n as u64;
    n
}

#[cfg(test)]
mod tests;
