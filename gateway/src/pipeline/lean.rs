//! The lean established path: a packet of an established TCP or UDP flow, IPv4 or IPv6 (and
//! the endpoint's SYN-ACK and the client's ACK of a TCP flow's handshake, a close's FIN, RST
//! and ACKs: [`forward_tracked`]), which
//! [`super::process_burst`] parsed once in its stage 1 ([`super::hint::LeanSegment`]) and whose flow it
//! found ahead (its compact hints: [`LeanFrame`]), is forwarded here without the general path's second parse, lookups and
//! state machine — as VPP's nat44-ed forwards a packet of an existing session: confirm the
//! record, apply the flow's translation, send the buffer received.
//!
//! # Contract
//!
//! [`forward`] either forwards the frame with exactly the bytes, verdict, counters and flow
//! state that [`super::process`] would produce for it, or changes nothing and returns
//! `None`, and the frame goes to [`super::process`]. The property and golden tests
//! (`tests/lean.rs`) compare the two paths frame by frame. It takes a frame only when
//! every one of these holds (else the general path decides):
//!
//! - the record found ahead is live and holds the frame's key (as
//!   [`crate::conntrack::Conntrack::lookup_candidate`] confirms), its deadline has not
//!   passed, and the frame arrived on the link of its direction (`wrong_link`);
//! - the flow was validated against this very table generation (a newer table revalidates
//!   the endpoint and the front door's counter index on the general path);
//! - the direction's lean bit is set ([`crate::conntrack::FlowState::lean`], one bit kept
//!   by the general path and the state's setters): the direction's egress has been routed
//!   before ([`crate::conntrack::FlowState::egress`]: interface and whether the next hop is
//!   the destination or the router; routes never change); TCP: the flow is not one the SYN
//!   proxy opened (its sequence numbers are translated: `super::synproxy`) and is
//!   ESTABLISHED and assured; UDP: the flow is assured (a reply was seen and answered: the
//!   stream timeout);
//! - TCP: the segment's flags are ACK without SYN, FIN or RST, and it fits the windows as
//!   [`window::check_ack`] decides (Linux's `tcp_in_window` bounds and updates, the same as
//!   [`window::check`] for such a segment);
//! - or, for a frame [`forward`] turned down, [`forward_tracked`]'s (stage 4 tries it next):
//!   an ACK of a TCP flow whose direction is not lean only for its state (the handshake's
//!   last ACK, the ACKs of a close: any state but ESTABLISHED and assured), a close's
//!   segment of any TCP flow (FIN with ACK, RST with or without ACK), or the endpoint's
//!   SYN-ACK of a flow in SYN_SENT (the reply direction's egress is known from the flow's
//!   creation: `super::flow`'s `new_flow`; a SYN-ACK in another state, which the state
//!   machine ignores or refuses, is the general path's) — flags the general path takes
//!   (`tcp::valid_flags`), not a RST before any reply, after which the general path
//!   removes the flow, the transport checksum of a segment that moves the state (SYN, FIN,
//!   RST) summed and found correct, as the general path checks it, a SYN-ACK's Window Scale
//!   option read as the general path reads it — whose egress is known, while the worker
//!   holds no flow the SYN proxy opened and the scheduler counts no connections. Such a
//!   segment goes through the state machine ([`track_tcp`]: state, windows, deadline,
//!   `assured`, as the general path moves them; nothing else of the general path applies to
//!   it), and is forwarded, or dropped as the general path drops it (invalid, out of
//!   window), with the same counters; everything else above holds as for an established
//!   flow's;
//! - the next hop's neighbour entry is resolved and recent (an old one is refreshed by the
//!   general path, which queues the request), and the egress interface's link-layer
//!   header has the received one's length (a VLAN tag added or removed moves the packet:
//!   the general path does it).
//!
//! The deadline it sets is the one [`crate::conntrack::track_tcp`] / `track_udp` would set
//! for such a packet (ESTABLISHED's or UDP stream's timeout from `now`), computed once per
//! burst ([`BurstConstants`]).
//!
//! One path for both families ([`LeanFamily`]): each has its own conntrack, default router
//! and EtherType; the rewrite is IPv4's at fixed offsets ([`nat::rewrite_ipv4_plain`]: header
//! checksum, TTL, transport checksum) or IPv6's, at fixed offsets too
//! ([`nat::rewrite_ipv6_plain`] after the 40-byte header: Hop Limit, and a transport
//! checksum whose pseudo-header covers the 16-byte addresses; no header checksum). Stage 1 hands this path IPv6 packets
//! without extension headers only (`super::ipv6::flow_key`).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::family::Family;
use super::hint::LeanFrame;
use super::link;
use super::resolve::NEIGHBOUR_REFRESH_NS;
use super::{Verdict, WorkerState};
use crate::conntrack::synproxy::Keyed;
use crate::conntrack::tcp::{self, Segment as TcpSegment};
use crate::conntrack::{
    track_tcp, window, Conntrack, Deadline, Direction, FlowState, TcpSeq, TcpState, TcpWindowsMut, Timeouts, Tracked,
};
use crate::counters::DropReason;
use crate::nat::{self, Rewrite};
use crate::neighbour::Neighbour;
use crate::table::Table;
use crate::wire::{EtherType, IpProtocol, TcpFlags, TcpPacket};

/// What the lean path does differently for an address family (the rest is [`Family`]'s).
pub(super) trait LeanFamily: Family + Keyed {
    /// The EtherType of the family's packets, written into the forwarded frame's header.
    const ETHER_TYPE: EtherType;

    /// Where a lean packet's transport header starts in its network packet, bytes: IPv4's
    /// header without options, IPv6's without extension headers.
    const L4_OFFSET: usize;

    /// The family's conntrack of the worker's two (`v4`, `v6`): a borrow of that field alone,
    /// so that the rest of the worker's state stays at hand.
    fn pick<'c>(v4: &'c mut Conntrack<Ipv4Addr>, v6: &'c mut Conntrack<Ipv6Addr>) -> &'c mut Conntrack<Self>;

    /// The family's default router's neighbour entry as the burst reads it
    /// ([`BurstConstants::router`], [`BurstConstants::router6`]).
    fn burst_router(k: &BurstConstants) -> Option<Neighbour>;

    /// Where [`LeanFamily::burst_router`] is kept, to set it.
    fn burst_router_mut(k: &mut BurstConstants) -> &mut Option<Neighbour>;

    /// Rewrites the lean TCP (`tcp`) or UDP packet `ip` (network header to the packet's
    /// end) to `rw` as the general path does ([`Family::rewrite`] of such a packet: the same
    /// bytes), TTL / Hop Limit decremented. The caller checked TTL / Hop Limit > 1.
    fn rewrite_lean(ip: &mut [u8], tcp: bool, rw: &Rewrite<Self>);
}

impl LeanFamily for Ipv4Addr {
    const ETHER_TYPE: EtherType = EtherType::Ipv4;
    const L4_OFFSET: usize = 20;

    #[inline(always)]
    fn pick<'c>(v4: &'c mut Conntrack<Ipv4Addr>, _: &'c mut Conntrack<Ipv6Addr>) -> &'c mut Conntrack<Self> {
        v4
    }

    #[inline(always)]
    fn burst_router(k: &BurstConstants) -> Option<Neighbour> {
        k.router
    }

    #[inline(always)]
    fn burst_router_mut(k: &mut BurstConstants) -> &mut Option<Neighbour> {
        &mut k.router
    }

    /// [`nat::rewrite_ipv4_plain`]: a lean IPv4 packet has no options, its transport header
    /// whole and its checksum not partial (what [`Family::rewrite`] checks before taking it).
    #[inline(always)]
    fn rewrite_lean(ip: &mut [u8], tcp: bool, rw: &Rewrite<Self>) {
        nat::rewrite_ipv4_plain(ip, tcp, rw);
    }
}

impl LeanFamily for Ipv6Addr {
    const ETHER_TYPE: EtherType = EtherType::Ipv6;
    const L4_OFFSET: usize = 40;

    #[inline(always)]
    fn pick<'c>(_: &'c mut Conntrack<Ipv4Addr>, v6: &'c mut Conntrack<Ipv6Addr>) -> &'c mut Conntrack<Self> {
        v6
    }

    #[inline(always)]
    fn burst_router(k: &BurstConstants) -> Option<Neighbour> {
        k.router6
    }

    #[inline(always)]
    fn burst_router_mut(k: &mut BurstConstants) -> &mut Option<Neighbour> {
        &mut k.router6
    }

    /// [`nat::rewrite_ipv6_plain`]: a lean IPv6 packet has no extension header, its
    /// transport header whole and its checksum not partial (what [`Family::rewrite`] checks
    /// before taking it).
    #[inline(always)]
    fn rewrite_lean(ip: &mut [u8], tcp: bool, rw: &Rewrite<Self>) {
        nat::rewrite_ipv6_plain(ip, tcp, rw);
    }
}

/// What every lean packet of one burst shares, computed once by [`BurstConstants::new`].
#[derive(Clone, Copy, Debug)]
pub(super) struct BurstConstants {
    /// The worker's epoch of the burst's table ([`crate::conntrack::FlowState::table_epoch`]).
    epoch: u16,
    /// The deadline of an ESTABLISHED TCP flow refreshed now.
    tcp_established: Deadline,
    /// The deadline of an assured UDP flow refreshed now.
    udp_stream: Deadline,
    /// The burst's time, monotonic ns (a tracked ACK's deadline: [`track_ack`]).
    now: u64,
    /// The deadlines' clock now ([`Deadline::clock_ms`]).
    now_ms: u32,
    /// A neighbour entry confirmed before this (monotonic ns) is due for a refresh: `now`
    /// less [`NEIGHBOUR_REFRESH_NS`], 0 early on (a static entry's `u64::MAX` never is).
    stale_before: u64,
    /// TCP windows checked liberally (`tcp_be_liberal`).
    liberal: bool,
    /// The IPv4 default router's neighbour entry (`None`: no router, or not resolved), as
    /// the table holds it: read at the burst's start and again after every frame that
    /// taught this worker a mapping ([`BurstConstants::after_general`]), so a frame
    /// routed to it reads what [`super::process`] would read at that point of the burst.
    /// Other workers' learning races with either path alike.
    router: Option<Neighbour>,
    /// The IPv6 default router's neighbour entry, read as [`BurstConstants::router`] is.
    router6: Option<Neighbour>,
}

impl BurstConstants {
    /// The constants of a burst processed at `now` (what [`forward`] knows of the time)
    /// against `table` (which gives `table` its
    /// worker epoch if it has none yet: [`WorkerState::table_epoch`]).
    #[inline(never)]
    pub fn new(now: u64, table: &Table, st: &mut WorkerState) -> Self {
        let t = &st.host.timeouts;
        let (tcp_established, udp_stream) =
            (Deadline::after(now, t.tcp_established_ns), Deadline::after(now, t.udp_stream_ns));
        let (router, router6) = (router_neighbour::<Ipv4Addr>(st), router_neighbour::<Ipv6Addr>(st));
        Self { tcp_established, udp_stream, router, router6, ..Self::base(now, table, st) }
    }

    /// The constants [`forward_tracked`] reads for a frame of family `A` turned down by
    /// [`forward`] at `now`, computed again then (the burst's stay in the burst loop's
    /// registers): [`BurstConstants::new`]'s, as they are at that point of the burst, but
    /// for what that path never reads — the lean path's deadlines (the state machine sets
    /// a tracked ACK's; here `now`'s) and the other family's router (`None`).
    #[inline]
    pub fn tracked<A: LeanFamily>(now: u64, table: &Table, st: &mut WorkerState) -> Self {
        let mut k = Self::base(now, table, st);
        *A::burst_router_mut(&mut k) = router_neighbour::<A>(st);
        k
    }

    /// What [`BurstConstants::new`] and [`BurstConstants::tracked`] share: everything but
    /// the lean deadlines (`now`'s) and the routers (`None`).
    #[inline(always)]
    fn base(now: u64, table: &Table, st: &mut WorkerState) -> Self {
        Self {
            epoch: st.table_epoch(table),
            tcp_established: Deadline::at(now),
            udp_stream: Deadline::at(now),
            now,
            now_ms: Deadline::clock_ms(now),
            stale_before: now.saturating_sub(NEIGHBOUR_REFRESH_NS),
            liberal: st.host.tcp_be_liberal,
            router: None,
            router6: None,
        }
    }

    /// The worker's count of neighbour mappings learned (ARP and NDP), taken before the
    /// general path processes a frame and handed to [`BurstConstants::after_general`].
    #[inline]
    pub fn learned(st: &WorkerState) -> u64 {
        st.counters.arp_learned + st.counters.nd_learned
    }

    /// To be called after the general path processed a frame, with [`Self::learned`] from
    /// before it: when the frame taught a mapping (a router's, perhaps: an IPv4-mapped
    /// IPv6 address is the same key), both routers' entries are read again. O(1).
    #[inline]
    pub fn after_general(&mut self, learned_before: u64, st: &WorkerState) {
        if Self::learned(st) != learned_before {
            self.router = router_neighbour::<Ipv4Addr>(st);
            self.router6 = router_neighbour::<Ipv6Addr>(st);
        }
    }
}

/// The default router of family `A`'s neighbour entry, if the host has one and the entry is
/// resolved.
#[inline]
fn router_neighbour<A: Family>(st: &WorkerState) -> Option<Neighbour> {
    st.neighbours.lookup(A::router(&st.host)?.0)
}

/// Forwards `frame`, whose hints are `lean` (its flow key, the flow found ahead and stage
/// 1's [`super::hint::LeanSegment`]), along its flow, writing its verdict to `verdict` and
/// returning true; or returns false having changed nothing. See the module documentation.
/// The verdict is written in place, not returned: a returned `Option<Verdict>` (16 bytes,
/// through memory) was stored field by field and read back whole by the caller, a load the
/// stores could not forward (the instruction after the call took ~20 % of the burst
/// loop's samples end to end: docs/optimisation-log.md, "Per poll pass").
#[inline]
pub(super) fn forward<A: LeanFamily>(
    frame: &mut [u8],
    lean: &LeanFrame<A>,
    k: &BurstConstants,
    st: &mut WorkerState,
    verdict: &mut Verdict,
) -> bool {
    forward_as::<A, false>(frame, lean, k, st, verdict)
}

/// [`forward`] (`TRACKED` false) or [`forward_tracked`] (true).
#[inline(always)]
fn forward_as<A: LeanFamily, const TRACKED: bool>(
    frame: &mut [u8],
    lean: &LeanFrame<A>,
    k: &BurstConstants,
    st: &mut WorkerState,
    verdict: &mut Verdict,
) -> bool {
    // One copy per direction: every choice by direction below made at compile time.
    let forwarded = match lean.direction {
        Direction::Original => forward_in::<A, true, TRACKED>(frame, lean, k, st),
        Direction::Reply => forward_in::<A, false, TRACKED>(frame, lean, k, st),
    };
    match forwarded {
        Some(v) => {
            *verdict = v;
            true
        }
        None => false,
    }
}

/// [`forward`] of a frame of the original direction (`ORIGINAL`) or a reply, of a flow
/// whose direction is lean ([`crate::conntrack::FlowState::lean`]); for any other TCP
/// flow, or a close's segment, [`forward_tracked`]'s (`TRACKED`: the segment tracked by
/// the state machine).
#[inline(always)]
fn forward_in<A: LeanFamily, const ORIGINAL: bool, const TRACKED: bool>(
    frame: &mut [u8],
    lean: &LeanFrame<A>,
    k: &BurstConstants,
    st: &mut WorkerState,
) -> Option<Verdict> {
    let WorkerState { conntrack, conntrack6, host, neighbours, counters, frontends, synproxy, .. } = st;
    let conntrack = A::pick(conntrack, conntrack6);
    let LeanFrame { key, id, seg, .. } = lean;
    debug_assert!(seg.is_lean(), "a lean frame's segment");
    debug_assert_eq!(lean.direction == Direction::Original, ORIGINAL);
    let direction = if ORIGINAL { Direction::Original } else { Direction::Reply };
    let id = *id;
    // An endpoint's SYN-ACK, a close's FIN or RST move the flow's state: the state
    // machine's (`forward_tracked`) only.
    let moving = seg.moves_state();
    if !TRACKED && moving {
        return None;
    }
    let (state, mut windows, out) = conntrack.lean(id, direction, key)?;
    // The flow's state, its SYN proxy status and the direction's egress in one bit
    // (`FlowState::lean`): set, `forward`'s; else (or a segment that moves the state)
    // `forward_tracked`'s.
    if state.lean(direction) == TRACKED && !(TRACKED && moving) {
        return None;
    }
    // What changes without the flow.
    if state.deadline.is_due_ms(k.now_ms) || state.links.of(direction) != seg.iface || state.table_epoch != k.epoch {
        return None;
    }
    let (out_iface, on_link) = if TRACKED {
        // No flow of the worker's is one the SYN proxy opened (`synproxy::any`: their
        // sequence numbers are translated, which only the general path does), and the
        // scheduler counts no connections (which a state change moves: `flow::track`).
        if key.protocol != u8::from(IpProtocol::Tcp)
            || !A::map(synproxy).is_empty()
            || host.scheduler.counts_connections()
        {
            return None;
        }
        // A segment that moves the state: flags the general path refuses
        // (`tcp::valid_flags`) are its to drop; a RST before any reply removes the flow
        // (`Tracked::ForwardThenRemove`), which the general path does; a SYN-ACK is taken
        // in SYN_SENT only (answering the client's SYN: SYN_RECV), where the state machine
        // neither ignores it (`flow::track`'s `track_ignored_tcp`) nor refuses it.
        if moving
            && (!tcp::valid_flags(seg.tcp.flags)
                || seg.tcp.flags.contains(TcpFlags::RST) && !state.seen_reply()
                || seg.tcp.flags.contains(TcpFlags::SYN) && (ORIGINAL || state.tcp_state() != TcpState::SynSent))
        {
            return None;
        }
        state.egress(direction)?
    } else {
        state.lean_egress(direction)
    };
    let tcp = key.protocol == u8::from(IpProtocol::Tcp);
    // The router's entry was read for the whole burst (`BurstConstants::router`).
    let n = if on_link { neighbours.lookup_first(out.dst_addr)? } else { A::burst_router(k)? };
    // `now − updated_ns > NEIGHBOUR_REFRESH_NS` (saturating; a static entry never), with
    // the subtraction made once per burst.
    if n.updated_ns < k.stale_before {
        return None;
    }
    let o = host.interfaces.get(usize::from(out_iface))?;
    let l2_len = usize::from(seg.l2_len);
    if link::header_len(o.vlan) != l2_len {
        return None;
    }
    // The general path checks the transport checksum of a segment that moves the flow's
    // state (`flow::l4_checksum`): summed here, whatever the device said; a wrong one goes
    // to the general path, which trusts the device (its `l4_csum_good`) or drops or counts
    // the segment as configured.
    if TRACKED && moving && !l4_checksum_ok(frame, lean) {
        return None;
    }
    // Everything is checked but the windows: from here on the packet is forwarded.
    if tcp {
        debug_assert!(TRACKED || seg.tcp.flags.contains(TcpFlags::ACK));
        if k.liberal {
            windows.make_liberal();
        }
        if !TRACKED {
            if !window::check_ack(windows, direction, &seg.tcp) {
                return None;
            }
            state.deadline = k.tcp_established;
        } else if let Err(reason) =
            track_segment(state, windows, direction, tracked_seq(frame, lean), k.now, &host.timeouts)
        {
            counters.rx_frames += 1;
            counters.drop(reason);
            return Some(Verdict::Drop(reason));
        }
    } else {
        state.deadline = k.udp_stream;
    }
    counters.rx_frames += 1;
    let original = ORIGINAL;
    if original {
        counters.forwarded_original += 1;
    } else {
        counters.forwarded_reply += 1;
    }
    let total = usize::from(seg.total);
    frontends.packet(state.frontend, original, total);
    // Apart from `rx_frames` (after the front door's count, a branch): together the two
    // were one vector add of four instructions, where each is one.
    counters.tx_frames += 1;
    let rw = Rewrite { src_addr: out.src_addr, src_port: out.src_port, dst_addr: out.dst_addr, dst_port: out.dst_port };
    A::rewrite_lean(&mut frame[l2_len..l2_len + total], tcp, &rw);
    link::write_header(frame, n.mac, o.mac, o.vlan, A::ETHER_TYPE);
    Some(Verdict::Transmit { iface: o.port, len: l2_len + total })
}

/// [`forward`] of a frame [`forward`] turned down, for a TCP flow whose direction is not
/// lean only — one not ESTABLISHED and assured (the handshake's last ACK, the close's ACKs)
/// — or a close's segment (FIN, RST) of any TCP flow, whose transport checksum it finds
/// correct: tracked by the state machine. Stage 4 calls it from a cold function of its own,
/// out of the burst loop (`burst::refused`), with constants computed there
/// ([`BurstConstants::tracked`]): the established packet's path keeps its registers, and a
/// frame turned down for another reason pays a call and a record read.
#[inline]
pub(super) fn forward_tracked<A: LeanFamily>(
    frame: &mut [u8],
    lean: &LeanFrame<A>,
    k: &BurstConstants,
    st: &mut WorkerState,
    verdict: &mut Verdict,
) -> bool {
    forward_as::<A, true>(frame, lean, k, st, verdict)
}

/// The window-tracking fields of lean `frame`'s TCP segment (hints `lean`) as
/// [`super::flow::tcp_seq`] reads them ([`super::hint::LeanSegment::tcp_seq`]), a SYN's
/// Window Scale option read by [`syn_window_scale`].
#[inline(always)]
fn tracked_seq<A: LeanFamily>(frame: &[u8], lean: &LeanFrame<A>) -> TcpSeq {
    lean.seg.tcp_seq(A::L4_OFFSET, || syn_window_scale(frame, lean))
}

/// The Window Scale option of lean `frame`'s SYN (hints `lean`):
/// [`super::hint::LeanSegment::syn_window_scale`] in a copy of the family's own (taking the
/// frame's hints whole, a SYN-ACK's call in `forward_tracked` passes one argument less:
/// 3 instructions a handshake's ACK and a close's RST, the call sites' registers).
#[inline(never)]
fn syn_window_scale<A: LeanFamily>(frame: &[u8], lean: &LeanFrame<A>) -> Option<u8> {
    lean.seg.syn_window_scale(frame, A::L4_OFFSET)
}

/// Whether the TCP checksum of lean `frame` (hints `lean`) is correct ([RFC 9293 § 3.1],
/// the pseudo-header of the frame's addresses). Out of line: the check of a segment that
/// moves the state.
///
/// [RFC 9293 § 3.1]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
#[inline(never)]
fn l4_checksum_ok<A: LeanFamily>(frame: &[u8], lean: &LeanFrame<A>) -> bool {
    let l3 = usize::from(lean.seg.l2_len);
    let l4 = l3 + A::L4_OFFSET..l3 + usize::from(lean.seg.total);
    frame.get(l4).is_some_and(|l4| TcpPacket::new_unchecked(l4).verify_checksum(lean.key.src_addr, lean.key.dst_addr))
}

/// The segment `seg` (an ACK, a FIN or a RST without SYN, or a SYN-ACK in SYN_SENT: see
/// [`forward_tracked`]'s caller's checks in `forward_in`; [`tracked_seq`]) of a TCP flow,
/// travelling in `direction`: tracked as
/// the general path tracks it ([`track_tcp`]; [`crate::conntrack::track_ignored_tcp`],
/// which the general path calls for a segment the state machine ignores, changes nothing
/// for such a segment; a RST that would remove the flow never comes here), the lean bits
/// recomputed as the
/// general path's forward does
/// ([`crate::conntrack::FlowState::set_egress`] of the egress the flow keeps). `Ok` when
/// it is forwarded (tracked, or ignored); `Err` with the general path's drop reason
/// otherwise, the state left as [`track_tcp`] leaves it, which is the general path's
/// too.
#[inline(always)]
fn track_segment(
    state: &mut FlowState,
    windows: TcpWindowsMut<'_>,
    direction: Direction,
    seg: TcpSeq,
    now: u64,
    timeouts: &Timeouts,
) -> Result<(), DropReason> {
    debug_assert!(
        matches!(TcpSegment::of(seg.flags), TcpSegment::Ack | TcpSegment::Fin | TcpSegment::Rst)
            || TcpSegment::of(seg.flags) == TcpSegment::SynAck && state.tcp_state() == TcpState::SynSent
    );
    let tracked = track_tcp(state, windows, direction, &seg, now, timeouts);
    debug_assert_ne!(tracked, Tracked::ForwardThenRemove, "a RST before any reply");
    match tracked {
        // A client's SYN's reopen, which such a segment never has; a SYN-ACK in SYN_SENT is
        // never ignored; a RST's removal, which the caller ruled out (the flow has seen a
        // reply).
        Tracked::Forward | Tracked::Ignored | Tracked::ForwardThenRemove | Tracked::Reopen => {
            state.refresh_lean(false);
            Ok(())
        }
        Tracked::Invalid => Err(DropReason::TcpInvalid),
        Tracked::OutOfWindow => Err(DropReason::TcpOutOfWindow),
    }
}
