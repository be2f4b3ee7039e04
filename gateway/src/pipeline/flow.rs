//! The conntrack path of TCP, UDP and SCTP: lookup of the 5-tuple in the worker's conntrack
//! (both directions indexed), revalidation of a flow against a newer table, creation of a
//! flow on a miss (front door, endpoint, SNAT port; in a full table, Linux's early drop
//! first), the flow's TCP state and timeouts ([`crate::conntrack::track_tcp`]: a RST before
//! any reply ends the flow, a client's SYN on a TIME_WAIT or CLOSE flow reopens it with the
//! endpoint chosen anew, keeping its SNAT port for the same endpoint, segments that do not
//! fit the state are dropped; SCTP's in [`super::sctp`]),
//! TCP sequence windows ([`crate::conntrack::window`]: out-of-window segments and blind RSTs
//! are dropped), the arrival link of each direction (a packet of a tracked tuple that
//! arrives on another interface is a forgery and is dropped before it touches the flow),
//! the NAT rewrite and MAC addressing of the forwarded frame, and the per-front-door counts
//! of what was forwarded (packets and IPv4 bytes per direction, new flows); a first
//! fragment's translation is recorded for the datagram's later fragments
//! ([`super::fragment`]).
//!
//! One path for IPv4 and IPv6, generic over [`Family`]: each family has its own conntrack
//! table per worker, its own SNAT addresses and routes; a front door's endpoints are of its
//! own family (full NAT does not translate between families: a dual-stack Service has one
//! front door per family, each with the endpoints of that family).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::expire::{flow_ended, gives_back, remove_flow};
use super::family::Family;
use super::fragment::{self, Fragment};
use super::hint::{NewFlowHint, STATE_FLAGS};
use super::link::{self, Rx};
use super::reject::reject;
use super::resolve::neighbour;
use super::sctp::{self, Chunks};
use super::state::{FragmentTarget, LastClient};
use super::synproxy::{self, Before, Proxied};
use super::{backend, Verdict, WorkerState};
use crate::conntrack::tcp::{self, Segment as TcpSegment};
use crate::conntrack::{
    open_tcp, track_ignored_tcp, track_tcp, track_udp, Candidate, Conntrack, Deadline, Direction, Flow, FlowId,
    FlowKey, FlowState, InsertError, Links, ReplyHint, TcpSeq, TcpWindowsMut, Tracked, Vacancy,
};
use crate::counters::DropReason;
use crate::host::Host;
use crate::nat::Rewrite;
use crate::table::layout;
use crate::table::{FrontendRef, Table};
use crate::wire::{EthernetFrame, IpProtocol, MacAddr, TcpFlags, TcpPacket, UdpPacket};

/// The fields of a received TCP, UDP or SCTP packet (IPv4 or IPv6) the flow path uses.
#[derive(Clone, Copy, Debug)]
pub(super) struct Segment<A> {
    /// Source address.
    pub src: A,
    /// Destination address.
    pub dst: A,
    /// TCP, UDP or SCTP.
    pub proto: IpProtocol,
    /// TTL (IPv6: Hop Limit) as received.
    pub ttl: u8,
    /// Offset of the transport header from the network header, bytes (IPv4: the header
    /// length; IPv6: after any extension headers).
    pub l4_offset: usize,
    /// Length of the packet from the network header (IPv4 Total Length; IPv6 40 + Payload
    /// Length), bytes.
    pub total: usize,
    /// Transport source port.
    pub sport: u16,
    /// Transport destination port.
    pub dport: u16,
    /// TCP flags, sequence and acknowledgement numbers, window ([`tcp_seq`]); all zero for
    /// UDP and SCTP.
    pub tcp: TcpSeq,
    /// SCTP chunks that matter to tracking; empty for TCP and UDP.
    pub sctp: Chunks,
    /// Set for the first fragment of a fragmented datagram (TCP or UDP only).
    pub first_fragment: Option<Fragment<A>>,
}

/// The window-tracking fields of TCP segment `t` (the whole segment: header and data):
/// flags, SEG.SEQ, SEG.ACK, SEG.WND, SEG.LEN, and on a SYN the Window Scale option.
#[inline]
pub(super) fn tcp_seq(t: &TcpPacket<&[u8]>) -> TcpSeq {
    let flags = t.flags();
    TcpSeq {
        flags,
        seq: t.seq_number(),
        ack: t.ack_number(),
        window: t.window_len(),
        len: t.segment_len(),
        wscale: if flags.contains(TcpFlags::SYN) {
            crate::conntrack::window::window_scale_option(t.options())
        } else {
            None
        },
    }
}

/// Forwards the TCP, UDP or SCTP packet `seg` in `frame` along its flow, creating the flow
/// on a conntrack miss.
pub(super) fn handle<A: Proxied>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    seg: &Segment<A>,
) -> Verdict {
    // A SYN proxy may turn the packet into another segment (a cookie's ACK into the SYN to
    // the endpoint) or translate its sequence numbers (`synproxy`): `seg` then points to the
    // changed copy (`opened` or `translated`); every other packet is read where it lies, with
    // no copy of the whole `Segment`.
    let (opened, translated): (Segment<A>, Segment<A>);
    let mut seg = seg;
    if seg.proto == IpProtocol::Tcp && !tcp::valid_flags(seg.tcp.flags) {
        return Verdict::Drop(DropReason::TcpInvalid);
    }
    // The transport checksum of a segment that moves a flow's state (see `l4_checksum`);
    // one that opens a flow is checked below, on the conntrack miss.
    let state_changing = seg.proto == IpProtocol::Tcp && seg.tcp.flags.0 & STATE_FLAGS != 0;
    if state_changing {
        if let Err(v) = l4_checksum(frame, rx, st, seg) {
            return v;
        }
    }
    let key = FlowKey {
        protocol: u8::from(seg.proto),
        src_addr: seg.src,
        src_port: seg.sport,
        dst_addr: seg.dst,
        dst_port: seg.dport,
    };
    // `process_burst` hashed the key ahead (and prefetched its slots); use that hash only
    // if this full parse found the same key.
    let (hash, candidate, ahead) = match A::hinted_hash(st, &key) {
        Some(hash) => {
            let hints = st.hints.current();
            (hash, hints.candidate.take(), hints.new_flow.take())
        }
        None => (A::conntrack(st).hash_key(&key), None, None),
    };
    let mut hit = A::conntrack(st).lookup_candidate(&key, hash, candidate);
    if let Some((id, dir)) = hit {
        let state = A::conntrack(st).state(id);
        if state.deadline.is_due(now) {
            // Idle past its timeout but not reaped yet: it is gone.
            remove_flow::<A>(st, id);
            hit = None;
        } else if rx.iface != state.links.of(dir) {
            // A packet of this flow's tuple from the wrong side (a reply from the clients'
            // link, a client's packet from the endpoints'): a forgery; the flow is untouched.
            return Verdict::Drop(DropReason::WrongLink);
        }
    }
    if let Some((id, Direction::Original)) = hit {
        let epoch = st.table_epoch(table);
        if A::conntrack(st).state(id).table_epoch != epoch {
            match revalidate(frame, rx, table, st, id, epoch, seg) {
                Ok(true) => {}
                Ok(false) => hit = None,
                Err(v) => return v,
            }
        }
    }
    if seg.ttl <= 1 {
        return Verdict::Drop(DropReason::TtlExceeded);
    }
    let mut opened_by_cookie = false;
    // A client's SYN that opened its flow here, tracked by `open_tcp` instead of the general
    // state machine (unless the SYN proxy or a connection-counting scheduler is involved).
    let mut fresh_syn = false;
    // Where a flow opened here goes and its front door, as `new_flow` found them.
    let mut opened_egress = None;
    let (mut id, dir) = match hit {
        Some(h) => h,
        // Where stage 2 found the key's probe run to end goes to the insert (which checks it).
        None => {
            if !state_changing {
                if let Err(v) = l4_checksum(frame, rx, st, seg) {
                    return v;
                }
            }
            let cookie =
                if seg.proto == IpProtocol::Tcp { synproxy::cookie_ack(now, st, &key, &seg.tcp) } else { None };
            let vacancy = candidate.and_then(Candidate::vacancy);
            match new_flow(now, frame, rx, table, st, key, (hash, vacancy), seg, (ahead, None)) {
                Ok((id, egress)) => {
                    opened_egress = Some(egress);
                    match cookie {
                        Some(c) => match synproxy::open(frame, rx, st, key, seg.ttl, c) {
                            Ok(syn) => {
                                opened = Segment { l4_offset: syn.l4_offset, total: syn.total, tcp: syn.tcp, ..*seg };
                                seg = &opened;
                                opened_by_cookie = true;
                            }
                            Err(v) => {
                                remove_flow::<A>(st, id);
                                return v;
                            }
                        },
                        None => {
                            st.synproxy.forget(&key);
                            fresh_syn = seg.proto == IpProtocol::Tcp
                                && TcpSegment::of(seg.tcp.flags) == TcpSegment::Syn
                                && !st.host.scheduler.counts_connections();
                        }
                    }
                    (id, Direction::Original)
                }
                Err(v) => return v,
            }
        }
    };
    // A packet of a flow the SYN proxy opened: its numbers into the client's, before
    // tracking (the flow it just opened needs none); after tracking, the ACK of an original
    // packet into the endpoint's (`ack_delta`), or the endpoint's SYN-ACK answered
    // (`endpoint_syn_ack`: the flow's original tuple).
    let l4 = rx.l2_len + seg.l4_offset..rx.l2_len + seg.total;
    let (mut ack_delta, mut endpoint_syn_ack) = (None, None);
    // A flow the SYN proxy opened never takes the lean path (`FlowState::refresh_lean`).
    let mut proxied = opened_by_cookie;
    if !opened_by_cookie && seg.proto == IpProtocol::Tcp && synproxy::any::<A>(st) {
        fresh_syn = false;
        let original = if dir == Direction::Original { key } else { A::conntrack(st).get(id).original };
        let mut tcp = seg.tcp;
        let before = synproxy::before_track(frame, rx, st, &original, &key, dir, &mut tcp, l4.clone());
        translated = Segment { tcp, ..*seg };
        seg = &translated;
        proxied = before.is_some();
        match before {
            None => {}
            Some(Before::Track { ack_delta: d }) => ack_delta = d,
            Some(Before::SynAck) => endpoint_syn_ack = Some(original),
            Some(Before::Drop(reason)) => return Verdict::Drop(reason),
            Some(Before::Answer(v)) => return v,
        }
    }
    let mut tracked = if fresh_syn { open_syn(now, st, id, seg) } else { track(now, st, id, dir, seg) };
    if tracked == Tracked::Reopen {
        // A new connection on the tuple of a closed one: forget the old flow, choose the
        // endpoint anew. Without the SYN proxy and with a scheduler that counts no
        // connections, a client's SYN then goes on as one that opened its flow on a miss
        // (`fresh_syn`).
        // (A flow found, not opened here: `opened_egress` and `fresh_syn` were unset.)
        (id, tracked, opened_egress) = match reopen(now, frame, rx, table, st, (id, key, hash), seg, ahead, proxied) {
            Ok(reopened) => reopened,
            Err(v) => return v,
        };
        fresh_syn = opened_egress.is_some();
        proxied = false;
    }
    match tracked {
        Tracked::Invalid => return Verdict::Drop(DropReason::TcpInvalid),
        Tracked::OutOfWindow => return Verdict::Drop(DropReason::TcpOutOfWindow),
        _ => {}
    }
    if let Some(original) = endpoint_syn_ack {
        // The endpoint's SYN-ACK: the proxy completes the endpoint's handshake; the client's
        // ACK of the cookie, tracked now, makes the flow established.
        return match synproxy::complete(frame, rx, st, &original, &key) {
            Ok((verdict, client_ack)) => {
                track(now, st, id, Direction::Original, &Segment { tcp: client_ack, ..*seg });
                verdict
            }
            Err(reason) => Verdict::Drop(reason),
        };
    }
    if let Some(delta) = ack_delta {
        synproxy::translate_ack(frame, rx, &seg.tcp, delta, l4);
    }
    // A client's SYN that has just opened its flow goes where `new_flow` routed it (the flow
    // as inserted: its state does not change where it goes); any other packet along the
    // flow's record.
    let (out, frontend) = match opened_egress.filter(|_| fresh_syn) {
        Some((rw, iface, hop, frontend)) => (egress_via(now, st, rw, iface, hop), Some(frontend)),
        None => {
            let flow = A::conntrack(st).get(id);
            (egress(now, st, &flow, dir), frontend_index(table, st.table_epoch(table), &flow))
        }
    };
    let verdict = forward(now, frame, rx, st, id, out, dir, seg, frontend.map(|i| (i, table.generation() as u32)));
    if let (Verdict::Transmit { .. }, Some(index)) = (verdict, frontend) {
        st.frontends.packet(index, dir == Direction::Original, seg.total);
    }
    // `forward` set the lean bits (`FlowState::set_egress`); a flow the SYN proxy opened
    // never takes the lean path.
    if proxied {
        A::conntrack_mut(st).state_mut(id).refresh_lean(true);
    }
    if tracked == Tracked::ForwardThenRemove {
        remove_flow::<A>(st, id);
    }
    verdict
}

/// Flow `id` (whose original tuple `seg`'s packet is), validated against an older table
/// than `table` (the worker's epoch `epoch`): `Ok(true)` when its endpoint still serves its
/// front door (the flow now validated against `table`, [`backend::still_serves`]); else the
/// flow is removed (DESIGN.md "Failure semantics") and a TCP segment other than a SYN
/// is answered with a RST (`Err`, the verdict: the client fails fast instead of hanging),
/// anything else — a UDP packet, or a SYN opening a new connection on the old tuple — is
/// steered anew by this very packet (`Ok(false)`). Cold and out of line: once per flow and
/// table change, kept out of `handle`'s registers.
#[cold]
#[inline(never)]
fn revalidate<A: Family>(
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    id: FlowId,
    epoch: u16,
    seg: &Segment<A>,
) -> Result<bool, Verdict> {
    if let Some(frontend) = backend::still_serves(table, &A::conntrack(st).get(id)) {
        let state = A::conntrack_mut(st).state_mut(id);
        state.table_epoch = epoch;
        state.frontend = frontend;
        return Ok(true);
    }
    remove_flow::<A>(st, id);
    st.counters.endpoint_gone += 1;
    if seg.proto == IpProtocol::Tcp && TcpSegment::of(seg.tcp.flags) != TcpSegment::Syn {
        return Err(reject(frame, rx, st));
    }
    Ok(false)
}

/// A new connection on the tuple of closed flow `id` (original tuple `key`, of conntrack
/// hash `hash`): the old flow forgotten, the new one created as on a miss ([`new_flow`],
/// the endpoint chosen anew; the old record renewed in place, with its SNAT address and
/// port, when it is the same endpoint: [`keeps_port`]) and tracked from `seg`. Returns the
/// new flow, how `seg` tracked and, when `seg` goes on as a SYN that opened its flow on a
/// miss (the SYN proxy not involved: the old flow not `proxied`, and the worker holding no
/// proxied flow of the family, `synproxy::any`, as `handle` asks on a miss; a client's SYN;
/// a scheduler that counts no connections), where `new_flow` sent it: the same tracking
/// ([`open_syn`]) and route as `handle` gives such a SYN. Or the verdict of a refused flow. Cold and out of
/// line: its copy of `new_flow` is kept out of `handle`'s registers.
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
fn reopen<A: Proxied>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    (id, key, hash): (FlowId, FlowKey<A>, u64),
    seg: &Segment<A>,
    ahead: Option<NewFlowHint>,
    proxied: bool,
) -> Result<(FlowId, Tracked, Option<OpenedEgress<A>>), Verdict> {
    // The closed flow ends now (its endpoint's connection counted closed before the new
    // one is scheduled); its record stays until `new_flow` renews it in place or removes
    // it.
    let old = A::conntrack(st).get(id);
    if gives_back::<A>(st) {
        flow_ended(st, &old);
    }
    // Its front door's index, when validated against this very table (`handle` has
    // revalidated an original packet's flow: always): not looked up again.
    let frontend = (old.state.table_epoch == st.table_epoch(table)).then_some(old.state.frontend);
    let reopened = Reopened { id, reply: &old.reply, frontend };
    let (id, egress) = match new_flow(now, frame, rx, table, st, key, (hash, None), seg, (ahead, Some(reopened))) {
        Ok(opened) => opened,
        Err(v) => {
            // No flow opened, so a live `id` is the closed flow still: it goes.
            if A::conntrack(st).is_live(id) {
                A::conntrack_mut(st).remove(id);
            }
            return Err(v);
        }
    };
    st.synproxy.forget(&key);
    let fresh = !proxied
        && !synproxy::any::<A>(st)
        && seg.proto == IpProtocol::Tcp
        && TcpSegment::of(seg.tcp.flags) == TcpSegment::Syn
        && !st.host.scheduler.counts_connections();
    Ok(if fresh {
        (id, open_syn(now, st, id, seg), Some(egress))
    } else {
        (id, track(now, st, id, Direction::Original, seg), None)
    })
}

/// Checks the TCP or UDP checksum of `seg` in software ([RFC 9293 § 3.1], [RFC 768], IPv6's
/// pseudo-header [RFC 8200 § 8.1]), as Linux conntrack does with `nf_conntrack_checksum`:
/// a wrong one is the [`DropReason::BadL4Checksum`] drop, or with `[conntrack]
/// drop_bad_l4_checksums = false` counted (`bad_l4_checksums_passed`) and let through.
///
/// Checked: a segment that opens a flow (a conntrack miss: a SYN, a SYN cookie's ACK, a
/// pick-up, a UDP flow's first datagram) or carries SYN, FIN or RST — what creates, closes
/// or reopens state. Not checked: what the device verified ([`super::Meta::l4_csum_good`]) or
/// left partial ([`super::Meta::l4_csum_partial`]: nothing to verify), a first fragment (the
/// checksum covers the whole datagram), SCTP (its CRC32c is [`super::sctp`]'s), and a
/// data segment or datagram of a tracked flow: summing every byte of every packet is what
/// the lean path ([`super::lean`]) must not do, and such a packet's checksum is updated
/// incrementally ([RFC 1624]), which keeps it wrong, so its receiver still discards it.
///
/// Always inlined into [`handle`] (its two call sites, one per kind of segment checked): a
/// SYN paid 50 instructions of call, spills and restores around the sum.
///
/// [RFC 9293 § 3.1]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
/// [RFC 768]: https://www.rfc-editor.org/rfc/rfc768
/// [RFC 8200 § 8.1]: https://www.rfc-editor.org/rfc/rfc8200#section-8.1
/// [RFC 1624]: https://www.rfc-editor.org/rfc/rfc1624
#[inline(always)]
fn l4_checksum<A: Family>(frame: &[u8], rx: &Rx, st: &mut WorkerState, seg: &Segment<A>) -> Result<(), Verdict> {
    if rx.l4_csum_good || rx.l4_csum_partial || seg.first_fragment.is_some() {
        return Ok(());
    }
    let l4 = &frame[rx.l2_len + seg.l4_offset..rx.l2_len + seg.total];
    let good = match seg.proto {
        IpProtocol::Tcp => TcpPacket::new_unchecked(l4).verify_checksum(seg.src, seg.dst),
        IpProtocol::Udp => UdpPacket::new_unchecked(l4).verify_checksum(seg.src, seg.dst),
        _ => true,
    };
    if good {
        Ok(())
    } else if st.host.drop_bad_l4_checksums {
        Err(Verdict::Drop(DropReason::BadL4Checksum))
    } else {
        st.counters.bad_l4_checksums_passed += 1;
        Ok(())
    }
}

/// The index in `table` (the worker's table epoch `epoch`) of `flow`'s front door, where its
/// forwarded packets are counted: the index the flow keeps, when it was (re)validated
/// against this very table; else (a reply that came before the flow's next original packet
/// under a new table) the index looked up anew.
#[inline]
fn frontend_index<A: Family>(table: &Table, epoch: u16, flow: &Flow<A>) -> Option<u32> {
    if flow.state.table_epoch == epoch {
        Some(flow.state.frontend)
    } else {
        let o = &flow.original;
        table.frontend(o.dst_addr.into(), o.protocol, o.dst_port).map(|f| f.index)
    }
}

/// Whether [`track`] would answer [`Tracked::Reopen`] for `seg` on flow `id` in direction
/// `dir`: a client's segment that reopens the flow ([`tcp::reopens`], the test
/// [`crate::conntrack::track::track_tcp`] makes before it changes anything). What
/// `track` changes before that answer (the windows made liberal, [`tcp_of`]) [`reopen`]
/// overwrites or frees with the record, and the state is unchanged, so no connection count
/// moves: asked first, it spares a reopened tuple's SYN the general state machine (and its
/// windows' borrow) before [`open_syn`] tracks it again. Asked in `track`, not before its
/// call in `handle`: there it cost a fresh SYN +8 instructions (`handle`'s layout).
#[inline(always)]
fn reopens<A: Family>(st: &WorkerState, id: FlowId, dir: Direction, seg: &Segment<A>) -> bool {
    seg.proto == IpProtocol::Tcp && dir == Direction::Original && {
        let old = A::conntrack(st).state(id).tcp_state();
        tcp::reopens(old, tcp::transition(old, dir, TcpSegment::of(seg.tcp.flags)))
    }
}

/// [`track_state`] of the client's SYN that has just created flow `id` (with a scheduler
/// that counts no connections): [`open_tcp`], which sets what the general path would.
#[inline]
fn open_syn<A: Family>(now: u64, st: &mut WorkerState, id: FlowId, seg: &Segment<A>) -> Tracked {
    let (conntrack, host) = A::conntrack_and_host(st);
    let (state, windows) = tcp_of(conntrack, host, id, seg);
    open_tcp(state, windows, &seg.tcp, now, &host.timeouts)
}

/// Flow `id`'s TCP state and windows for segment `seg`, the windows made liberal from a
/// fragmented segment on, or for every flow with `[conntrack] tcp_be_liberal` ([`track_state`]).
#[inline(always)]
fn tcp_of<'c, A: Family>(
    conntrack: &'c mut Conntrack<A>,
    host: &Host,
    id: FlowId,
    seg: &Segment<A>,
) -> (&'c mut FlowState, TcpWindowsMut<'c>) {
    let (state, mut windows) = conntrack.tcp_mut(id);
    if seg.first_fragment.is_some() || host.tcp_be_liberal {
        windows.make_liberal();
    }
    (state, windows)
}

/// Applies the packet to flow `id`'s state ([`track_state`], then [`track_ignored`] for a
/// TCP segment the state ignored) and, when the scheduler counts
/// connections, moves the flow's count between inactive and active if the packet moved it
/// to or from ESTABLISHED ([`backend::count_state`]): a comparison of the state before and
/// after, the shared count touched only on such a change.
fn track<A: Family>(now: u64, st: &mut WorkerState, id: FlowId, dir: Direction, seg: &Segment<A>) -> Tracked {
    if reopens::<A>(st, id, dir, seg) {
        return Tracked::Reopen;
    }
    let counted = st.host.scheduler.counts_connections();
    let was_active = counted && backend::is_active(u8::from(seg.proto), A::conntrack(st).state(id));
    let mut tracked = track_state(now, st, id, dir, seg);
    if tracked == Tracked::Ignored {
        tracked = track_ignored::<A>(now, st, id, dir, seg);
    }
    if counted {
        backend::count_state(st, &A::conntrack(st).get(id), was_active);
    }
    tracked
}

/// A TCP segment of flow `id` that [`track_tcp`] ignored: [`track_ignored_tcp`] with the
/// worker's ignored SYNs, which records a client's SYN and may bring a stale flow back in
/// step on the endpoint's SYN+ACK. Cold and out of line, so the general path pays one
/// comparison for it.
#[cold]
#[inline(never)]
fn track_ignored<A: Family>(now: u64, st: &mut WorkerState, id: FlowId, dir: Direction, seg: &Segment<A>) -> Tracked {
    let (conntrack, host) = A::conntrack_and_host(st);
    let (state, windows, syns) = conntrack.tcp_resync_mut(id);
    track_ignored_tcp(state, windows, syns, dir, &seg.tcp, now, &host.timeouts)
}

/// Applies the packet to flow `id`'s state ([`track_tcp`], [`track_udp`], [`sctp::track`]):
/// TCP state and sequence windows, idle deadline, `seen_reply`, `assured`.
///
/// A TCP flow whose segments arrive fragmented is tracked with liberal windows from then
/// on: a first fragment does not carry the segment's length (Linux reassembles before
/// conntrack sees a segment; the gateway does not). With `[conntrack] tcp_be_liberal`
/// every TCP flow is.
fn track_state<A: Family>(now: u64, st: &mut WorkerState, id: FlowId, dir: Direction, seg: &Segment<A>) -> Tracked {
    let (conntrack, host) = A::conntrack_and_host(st);
    let timeouts = &host.timeouts;
    if seg.proto == IpProtocol::Tcp {
        let (state, windows) = tcp_of(conntrack, host, id, seg);
        return track_tcp(state, windows, dir, &seg.tcp, now, timeouts);
    }
    let state = conntrack.state_mut(id);
    if seg.proto == IpProtocol::Sctp {
        sctp::track(state, dir, seg.sctp, now);
        Tracked::Forward
    } else {
        track_udp(state, dir, now, timeouts);
        Tracked::Forward
    }
}

/// Rewrites the packet `seg` of flow `id` in direction `dir` and addresses the
/// frame to its next hop (`egress`: [`egress`] of the flow), recording the direction's egress in the flow's state
/// for the lean path ([`crate::conntrack::FlowState::egress`]). A first fragment's translation is recorded for the later
/// fragments of its datagram; its transport checksum is always updated incrementally (a
/// fragment never carries a partial checksum, and a full one would need the whole datagram),
/// with the flow's front-door index under table generation `frontend.1` so the later
/// fragments are counted there too.
#[allow(clippy::too_many_arguments)]
fn forward<A: Family>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    id: FlowId,
    egress: Result<Egress<A>, DropReason>,
    dir: Direction,
    seg: &Segment<A>,
    frontend: Option<(u32, u32)>,
) -> Verdict {
    let (rw, out_iface, dst_mac, on_link) = match egress {
        Ok(e) => e,
        Err(reason) => return Verdict::Drop(reason),
    };
    // What the lean path of the flow's later packets needs (`super::lean`).
    A::conntrack_mut(st).state_mut(id).set_egress(dir, out_iface, on_link);
    match dir {
        Direction::Original => st.counters.forwarded_original += 1,
        Direction::Reply => st.counters.forwarded_reply += 1,
    }
    let l3 = rx.l2_len;
    let partial = rx.l4_csum_partial && seg.first_fragment.is_none();
    A::rewrite(&mut frame[l3..l3 + seg.total], seg.l4_offset, seg.proto, &rw, partial);
    let verdict = link::transmit(frame, rx, seg.total, out_iface, dst_mac, &st.host);
    if let (Some(first), Verdict::Transmit { .. }) = (&seg.first_fragment, verdict) {
        let original = dir == Direction::Original;
        let target =
            FragmentTarget { src: rw.src_addr, dst: rw.dst_addr, iface: out_iface, mac: dst_mac, original, frontend };
        fragment::record(now, st, first, target);
    }
    verdict
}

/// Where a packet of `flow` travelling in direction `dir` goes: its new addresses and ports,
/// the egress interface, the next hop's MAC and whether that next hop is the destination
/// itself (on a connected subnet; else the router), resolved by ARP or Neighbor Discovery — the
/// endpoint's for the
/// original direction, the client's for replies (the client itself on a connected subnet,
/// else the router: replies are routed like any packet, no MAC is kept per flow). ICMP errors
/// about the flow ([`super::icmp_error`]) travel the same way. A direction routed before
/// ([`crate::conntrack::FlowState::egress`]: routes never change while the gateway runs)
/// is not routed again: its interface, and the destination or the family's router as the
/// next hop, as the lean path reads them (a lean frame the lean path turns down comes here
/// without a route found ahead).
///
/// # Errors
/// [`DropReason::NoRoute`], [`DropReason::NeighbourUnresolved`] (a resolution was queued).
pub(super) fn egress<A: Family>(
    now: u64,
    st: &mut WorkerState,
    flow: &Flow<A>,
    dir: Direction,
) -> Result<Egress<A>, DropReason> {
    // Either direction leaves as the other direction's tuple reversed: the original towards
    // the endpoint from the SNAT address and port, the reply back to the client from the
    // front door.
    let t = match dir {
        Direction::Original => flow.reply.reversed(),
        Direction::Reply => flow.original.reversed(),
    };
    let rw = Rewrite { src_addr: t.src_addr, src_port: t.src_port, dst_addr: t.dst_addr, dst_port: t.dst_port };
    let routed = match flow.state.egress(dir) {
        Some((out, true)) => Some((out, rw.dst_addr)),
        Some((out, false)) => A::router(&st.host).map(|(router, _)| (out, router)),
        None => route(st, rw.dst_addr),
    };
    let Some((out, hop)) = routed else {
        return Err(DropReason::NoRoute);
    };
    egress_via(now, st, rw, out, hop)
}

/// Where a packet leaves ([`egress`]): its new addresses and ports, the egress interface, the
/// next hop's MAC and whether that next hop is the destination itself.
pub(super) type Egress<A> = (Rewrite<A>, u8, MacAddr, bool);

/// [`egress`] of a packet rewritten as `rw` whose route is known: interface `out`, next hop
/// `hop`; the next hop's MAC looked up (a resolution queued when unknown).
#[inline(always)]
fn egress_via<A: Family>(
    now: u64,
    st: &mut WorkerState,
    rw: Rewrite<A>,
    out: u8,
    hop: A,
) -> Result<Egress<A>, DropReason> {
    let Some(mac) = neighbour(st, hop, out, now) else {
        return Err(DropReason::NeighbourUnresolved);
    };
    Ok((rw, out, mac, hop == rw.dst_addr))
}

/// [`crate::host::Host::route`] of `to`: the route `process_burst` found ahead for this
/// frame when it was for `to` (the host's routes never change), else looked up. The hint's
/// comparison is inlined into its callers, the lookup is not: a call for the comparison cost
/// a new flow more than the comparison (it routes twice).
#[inline(always)]
fn route<A: Family>(st: &WorkerState, to: A) -> Option<(u8, A)> {
    match st.hints.current_ref().route {
        Some(h) if h.to == to.into() => A::from_ip(h.hop).map(|hop| (h.out, hop)),
        _ => route_unhinted(st, to),
    }
}

/// [`crate::host::Host::route`] of `to`, for [`route`] without a hint.
#[inline(never)]
fn route_unhinted<A: Family>(st: &WorkerState, to: A) -> Option<(u8, A)> {
    st.host.route(to)
}

/// Where a flow [`new_flow`] opened sends its first packet: the original direction's
/// rewrite, egress interface and next hop, and the flow's front-door index.
type OpenedEgress<A> = (Rewrite<A>, u8, A, u32);

/// Creates the flow for `key` (a conntrack miss): front door, source-range check, endpoint,
/// SNAT port.
///
/// The source ranges (`loadBalancerSourceRanges`) are checked here only, on a conntrack
/// miss, so established flows pay nothing for them: one binary search over the front
/// door's merged ranges, none when it has none. A client outside them is dropped
/// ([`DropReason::SourceRangeDenied`]), as by kube-proxy's firewall chain, whether or not
/// the Service has endpoints.
///
/// `hash` is the key's conntrack hash ([`crate::conntrack::Conntrack::hash_key`]), with
/// where stage 2 of `process_burst` found its probe run to end, if it did (the insert checks
/// that it still holds); `ahead` is what `process_burst` found ahead for this key in this
/// table (front door and the ring's endpoint), used instead of looking them up again;
/// `reopened` the closed flow this one replaces ([`reopen`]; live until here): renewed in
/// place when the new flow goes to its endpoint through its SNAT address ([`keeps_port`]),
/// else removed before the SNAT port is chosen (on an `Err` before that, still live).
///
/// Returns the flow's id and where its first packet goes, as [`egress`] of the flow as
/// inserted would find it before the neighbour lookup: the original direction's rewrite,
/// egress interface and next hop, and the flow's front-door index.
///
/// Always inlined (into `handle` and `reopen`, its callers): its nine arguments and the
/// returned flow cost a call more than the copy of its body for the reopen of a closed
/// flow's tuple.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn new_flow<A: Proxied>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    key: FlowKey<A>,
    (hash, vacancy): (u64, Option<Vacancy>),
    seg: &Segment<A>,
    (ahead, reopened): (Option<NewFlowHint>, Option<Reopened<'_, A>>),
) -> Result<(FlowId, OpenedEgress<A>), Verdict> {
    let lookup = |key: &FlowKey<A>| table.frontend(key.dst_addr.into(), key.protocol, key.dst_port);
    // A hint that names the endpoint of a front door admitting every source (the burst's
    // visits found both for this key in this table): the front door is not viewed again.
    let known = ahead.filter(|h| h.all_sources).and_then(|h| Some((h.frontend, h.endpoint?)));
    debug_assert!(
        ahead.is_none_or(|h| lookup(&key).filter(|g| g.source_ranges.is_empty() || !h.all_sources).map(|g| g.index)
            == Some(h.frontend)),
        "a new-flow hint for another key"
    );
    let fe = match known {
        Some(_) => None,
        None => {
            // Where a burst's visit found it, else where the reopened flow's was.
            let found = match (ahead, reopened.and_then(|r| r.frontend)) {
                (Some(h), _) => table.frontend_at(h.frontend as usize).map(|f| (f, Some(h.ring_backend))),
                (None, Some(i)) => table.frontend_at(i as usize).map(|f| (f, None)),
                (None, None) => None,
            };
            debug_assert!(
                reopened.and_then(|r| r.frontend).is_none_or(|i| lookup(&key).map(|f| f.index) == Some(i)),
                "a reopened flow's front door not its key's"
            );
            let Some(fe) = found.or_else(|| lookup(&key).map(|f| (f, None))) else {
                return Err(Verdict::Drop(DropReason::NoFrontend));
            };
            Some(fe)
        }
    };
    if martian(key.src_addr.into()) {
        return Err(Verdict::Drop(DropReason::MartianSource));
    }
    // What the host says of the client, asked once for the flow.
    let client = client_facts(st, key.src_addr);
    if client.own {
        return Err(Verdict::Drop(DropReason::MartianSource));
    }
    let client_route = client.route;
    // A front door without source ranges admits every client: `admits` (a call) is not
    // asked for a reopened tuple's flow; `handle`'s copy, where `reopened` is `None`, keeps
    // the plain call (the test there cost an IPv6 SYN 3–4 instructions: its layout).
    let unrestricted = |f: &FrontendRef<'_>| reopened.is_some() && f.source_ranges.is_empty();
    if fe.as_ref().is_some_and(|(f, _)| !unrestricted(f) && !f.source_ranges.admits(key.src_addr.into())) {
        return Err(Verdict::Drop(DropReason::SourceRangeDenied));
    }
    if !st.sources.admit(key.src_addr.into(), now) {
        return Err(Verdict::Drop(DropReason::NewFlowRateLimited));
    }
    // What cannot open a connection creates no flow: a TCP segment no state starts from
    // (a RST), an SCTP ABORT or SHUTDOWN COMPLETE of an unknown association.
    let stray = match seg.proto {
        IpProtocol::Tcp => tcp::initial(TcpSegment::of(seg.tcp.flags)).is_none(),
        IpProtocol::Sctp => seg.sctp.close,
        _ => false,
    };
    if stray {
        return Err(Verdict::Drop(DropReason::NoConntrack));
    }
    // Under a SYN flood a SYN is answered with a cookie and creates nothing (`synproxy`).
    if seg.proto == IpProtocol::Tcp && TcpSegment::of(seg.tcp.flags) == TcpSegment::Syn {
        let l4 = rx.l2_len + seg.l4_offset..rx.l2_len + seg.total;
        if let Some(answer) = synproxy::syn(now, frame, rx, st, &key, &seg.tcp, l4) {
            return Err(answer);
        }
    }
    // A burst that found the endpoint ahead (a service without affinity: the ring's choice)
    // spares viewing the service again.
    let hinted = ahead.and_then(|h| h.endpoint);
    // `fe` is `None` only when `known` is set.
    let (frontend, (backend_addr, backend_port)) = match (known, fe, hinted) {
        (Some(k), _, _) => k,
        (None, Some((fe, _)), Some(endpoint)) => (fe.index, endpoint),
        (None, Some((fe, ring_backend)), None) => {
            let Some(backend) =
                backend::choose(now, table, fe.service, &key, ring_backend, st).map_err(Verdict::Drop)?
            else {
                return Err(reject(frame, rx, st));
            };
            (fe.index, (layout::addr_from16(backend.addr), backend.port.get()))
        }
        (None, None, _) => return Err(Verdict::Drop(DropReason::NoFrontend)),
    };
    debug_assert!(
        hinted.is_none_or(|h| table
            .frontend_at(frontend as usize)
            .and_then(|fe| table.service(fe.service))
            .filter(|s| s.affinity_timeout_s == 0)
            .and_then(|s| s.pick(backend::ring_hash(&s, &key)).map(|b| (layout::addr_from16(b.addr), b.port.get())))
            == Some(h)),
        "a new-flow hint with another endpoint than the ring's"
    );
    let Some(backend_ip) = A::from_ip(backend_addr) else {
        return Err(Verdict::Drop(DropReason::UnsupportedFamily));
    };
    let Some((out, hop)) = route(st, backend_ip) else {
        return Err(Verdict::Drop(DropReason::NoRoute));
    };
    let endpoint = SocketAddr::new(backend_ip.into(), backend_port);
    // A reopened flow to the same endpoint through an SNAT address still the link's keeps
    // its record, SNAT address and port (`keeps_port`); any other closed flow goes now, its
    // port back to the pool. (Matches, not `or_else`: a closure, out of line, cost a fresh
    // SYN 30 instructions.)
    let renewed = match reopened {
        Some(old) if keeps_port(st, old.reply, (backend_ip, backend_port), out) => Some(old),
        Some(old) => {
            A::conntrack_mut(st).remove(old.id);
            None
        }
        None => None,
    };
    // A link without SNAT addresses of the family finds no port and changes nothing
    // (`snat_port`): asked here, after the search, not before it on every new flow.
    let chosen = match renewed {
        Some(old) => Some(((old.reply.dst_addr, old.reply.dst_port), ReplyHint::default())),
        None => snat_port::<A>(now, st, key.protocol, (backend_ip, backend_port), out),
    };
    let Some(((snat_ip, snat_port), reply_hint)) = chosen else {
        let unsupported = st.host.snat_addresses_on::<A>(out).is_empty() || !st.snat.serves_family(endpoint.is_ipv6());
        return Err(Verdict::Drop(if unsupported { DropReason::UnsupportedFamily } else { DropReason::SnatExhausted }));
    };
    learn_on_link_client(now, frame, rx, key.src_addr, matches!(client_route, Some((_, true))), st);
    let epoch = st.table_epoch(table);
    let flow = Flow {
        original: key,
        reply: FlowKey {
            protocol: key.protocol,
            src_addr: backend_ip,
            src_port: backend_port,
            dst_addr: snat_ip,
            dst_port: snat_port,
        },
        // The replies go to the client: their egress is its route, known already (`egress`
        // would route it again at the first reply).
        state: FlowState::new(frontend, epoch, Deadline::at(now))
            .with_links(Links { original: rx.iface, reply: out })
            .with_reply_egress(client_route),
    };
    let mut inserted = match renewed {
        Some(old) => {
            A::conntrack_mut(st).renew(old.id, &flow);
            Ok(old.id)
        }
        None => A::conntrack_mut(st).insert_hashed(&flow, hash, vacancy, reply_hint),
    };
    if inserted == Err(InsertError::Full) {
        inserted = insert_after_early_drop(now, st, &flow, hash);
    }
    match inserted {
        Ok(id) => {
            backend::count_opened(st, &flow);
            st.counters.new_flows += 1;
            st.frontends.new_flow(frontend);
            // `egress` of the original direction: from the SNAT address and port to the endpoint.
            let rw = Rewrite { src_addr: snat_ip, src_port: snat_port, dst_addr: backend_ip, dst_port: backend_port };
            Ok((id, (rw, out, hop, frontend)))
        }
        Err(e) => Err(Verdict::Drop(match e {
            InsertError::Full => DropReason::ConntrackFull,
            // The reply tuple was free when chosen, so only a flow whose reply tuple is its
            // own original one (an endpoint calling a front door on a SNAT address and
            // port) gets here; refuse rather than hijack another flow. `NotFullNat` cannot
            // happen: the SNAT address comes from the list the table was built with.
            InsertError::Exists | InsertError::NotFullNat => DropReason::SnatExhausted,
        })),
    }
}

/// The insert of `flow` (original tuple's conntrack hash `hash`) into a full table, after
/// Linux's early drop: a flow near this one that is worth less evicted
/// ([`crate::conntrack::Conntrack::early_drop`], counted `conntrack_evicted`), then the
/// insert retried; [`InsertError::Full`] when nothing may be evicted. Cold and out of line:
/// kept out of the new flow's registers.
#[cold]
#[inline(never)]
fn insert_after_early_drop<A: Family>(
    now: u64,
    st: &mut WorkerState,
    flow: &Flow<A>,
    hash: u64,
) -> Result<FlowId, InsertError> {
    let Some(evicted) = A::conntrack_mut(st).early_drop(&flow.original, now) else {
        return Err(InsertError::Full);
    };
    flow_ended(st, &evicted);
    st.counters.conntrack_evicted += 1;
    A::conntrack_mut(st).insert_hashed(flow, hash, None, ReplyHint::default())
}

/// The SNAT address and port of a new flow of `protocol` to `endpoint` leaving by interface
/// `out` (a flow reopened on a closed one's tuple keeps its own when [`keeps_port`]): one
/// of the link's SNAT addresses and a port this worker owns such that the reply
/// tuple `endpoint → address:port` is not in the worker's conntrack, as Linux's
/// `get_unique_tuple` finds one ([`crate::snat`]). When the search finds none — nearly
/// every port of the link's addresses is taken for this very endpoint — the flow among the
/// candidates it met that is worth least gives its tuple up, as a full table makes room
/// ([`crate::conntrack::Conntrack::early_drop`]): expired, then never answered (a SYN
/// flood's half-open flows, one-way UDP), then closing, the oldest of its kind first
/// ([`crate::conntrack::Conntrack::eviction_order`]); counted `conntrack_evicted`. A flood
/// of unanswered flows therefore cannot hold an endpoint's ports while a legitimate client
/// waits; answered (assured) flows are never evicted, and flows to other endpoints are not
/// touched. `None` when nothing may be evicted: the flow is refused (`snat_exhausted`); `None`,
/// with nothing examined or changed, when `out` has no SNAT address of the family.
///
/// The evicted flow's port is reused at once, for the same endpoint. If that endpoint still
/// holds the evicted flow's half-open connection (a request socket, not a SYN cookie), a
/// Linux endpoint answers the new SYN as `tcp_check_req` does: with an ACK of the old
/// connection (the SYN is out of its window) or, rarely, a RST (in window), so the new
/// connection waits until the endpoint gives the old one up (after `tcp_synack_retries`,
/// about 63 s by default). Evicting expired flows first and the oldest half-open flow next
/// makes this rare, as does the port space being per endpoint: it takes nearly 64 K flows
/// to one endpoint from one SNAT address on one worker (÷ workers under the modulo rule)
/// to get here.
///
/// With the address and port, what the insert need not find again ([`ReplyHint`]): the
/// reply tuple's conntrack hash and where its probe run ended when the search found it free
/// ([`crate::conntrack::Conntrack::lookup_or_vacancy`]; not for an evicted flow's tuple),
/// and the SNAT address's position in the conntrack's list
/// ([`crate::host::Host::snat_positions_on`]).
fn snat_port<A: Family>(
    now: u64,
    st: &mut WorkerState,
    protocol: u8,
    (endpoint_ip, endpoint_port): (A, u16),
    out: u8,
) -> Option<((A, u16), ReplyHint)> {
    let (conntrack, snat, host) = A::conntrack_and_snat(st);
    let addresses = host.snat_addresses_on::<A>(out);
    // The search's first candidate, nearly always free, tried without the search
    // (`SnatPorts::first_candidate`): the same choice; anything else searches from it
    // (`snat_search`, out of line: this function stays small enough for the candidate's
    // lookup to be inlined, without the search's closure and captures).
    if let Some((i, port)) = snat.first_candidate(addresses.len()) {
        if let Some(&address) = addresses.get(i) {
            let reply =
                FlowKey { protocol, src_addr: endpoint_ip, src_port: endpoint_port, dst_addr: address, dst_port: port };
            if let Err(v) = conntrack.lookup_or_vacancy(&reply) {
                snat.take_first();
                let positions = host.snat_positions_on::<A>(out);
                return Some(((address, port), ReplyHint { slot: Some(v), snat: positions.get(i).copied() }));
            }
        }
    }
    snat_search(now, st, protocol, (endpoint_ip, endpoint_port), out)
}

/// Whether a flow reopened on a closed flow's tuple ([`reopen`]), whose reply tuple was
/// `old`, keeps the closed flow's record, SNAT address and port ([`new_flow`] renews it in
/// place): when the new connection goes to the same `endpoint` and the address is still one
/// of the egress interface `out`'s. A client that opens a new connection on its own address
/// and port thus keeps its translation, as under Linux's NAT (`get_unique_tuple` keeps a
/// tuple that is unique): an endpoint's segment of the old connection still on its way (a
/// SYN-ACK to a SYN the closed flow forwarded, a retransmission) reaches that client, which
/// owns it, where a port given back to the pool could have taken it to another client's
/// connection on the same port. Always inlined: called only where `new_flow` has a closed
/// flow (in `reopen`; `handle`'s copy has none), where `#[inline]` left it a call.
#[inline(always)]
fn keeps_port<A: Family>(st: &WorkerState, old: &FlowKey<A>, endpoint: (A, u16), out: u8) -> bool {
    (old.src_addr, old.src_port) == endpoint && st.host.snat_addresses_on::<A>(out).contains(&old.dst_addr)
}

/// A closed flow that a new connection reopens on its tuple ([`reopen`], [`new_flow`]).
#[derive(Clone, Copy)]
struct Reopened<'a, A: Family> {
    /// The closed flow, live until [`new_flow`] renews or removes it.
    id: FlowId,
    /// Its reply tuple (its endpoint, SNAT address and port).
    reply: &'a FlowKey<A>,
    /// Its front door's index in the table the new flow opens against, when it was validated
    /// against that table (else the front door is looked up).
    frontend: Option<u32>,
}

/// [`snat_port`] when its first candidate is not free (or there is none: the steered rule):
/// the search ([`crate::snat::SnatPorts::alloc_indexed`], which examines that candidate
/// again), then the eviction of the candidate worth least. Same results and hints as
/// [`snat_port`] describes.
#[inline(never)]
fn snat_search<A: Family>(
    now: u64,
    st: &mut WorkerState,
    protocol: u8,
    (endpoint_ip, endpoint_port): (A, u16),
    out: u8,
) -> Option<((A, u16), ReplyHint)> {
    let (conntrack, snat, host) = A::conntrack_and_snat(st);
    let addresses = host.snat_addresses_on::<A>(out);
    let positions = host.snat_positions_on::<A>(out);
    let reply = |(snat_ip, snat_port): (A, u16)| FlowKey {
        protocol,
        src_addr: endpoint_ip,
        src_port: endpoint_port,
        dst_addr: snat_ip,
        dst_port: snat_port,
    };
    let endpoint = SocketAddr::new(endpoint_ip.into(), endpoint_port);
    // The candidate that gives way if none is free: (eviction order, flow).
    let mut victim: Option<((u8, u32), FlowId)> = None;
    // The last candidate found free: the one `alloc` returns.
    let mut vacancy = None;
    let found = snat.alloc_indexed(endpoint, addresses, |snat_ip, snat_port| {
        match conntrack.lookup_or_vacancy(&reply((snat_ip, snat_port))) {
            Err(v) => {
                vacancy = Some(v);
                true
            }
            Ok((id, Direction::Reply)) => {
                if let Some(order) = conntrack.eviction_order(id, now) {
                    if victim.is_none_or(|(best, _)| order < best) {
                        victim = Some((order, id));
                    }
                }
                false
            }
            // Some flow's original tuple (a client sending from the endpoint's address and
            // port to a front door on the SNAT address): not ours to evict.
            Ok((_, Direction::Original)) => false,
        }
    });
    if let Some((i, port)) = found {
        // The chosen address's position in the conntrack's list, for the insert.
        return Some(((addresses[i], port), ReplyHint { slot: vacancy, snat: positions.get(i).copied() }));
    }
    let (_, id) = victim?;
    let evicted = A::conntrack_mut(st).remove(id);
    flow_ended(st, &evicted);
    st.counters.conntrack_evicted += 1;
    // Rare: the insert finds the address's position itself.
    Some(((evicted.reply.dst_addr, evicted.reply.dst_port), ReplyHint::default()))
}

/// Whether no router forwards from source `ip` ([RFC 1812 § 5.3.7]; the special-purpose
/// registries of [RFC 6890]): IPv4 "this network" 0/8, loopback 127/8, class E 240/4 and
/// the limited broadcast, multicast; IPv6 unspecified, loopback, multicast (RFC 4291
/// § 2.7) and IPv4-mapped (RFC 4291 § 2.5.5.2: never on the wire).
///
/// [RFC 1812 § 5.3.7]: https://www.rfc-editor.org/rfc/rfc1812#section-5.3.7
/// [RFC 6890]: https://www.rfc-editor.org/rfc/rfc6890
#[inline(always)]
fn martian(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.octets()[0] == 0 || a.octets()[0] >= 224 || a.is_loopback(),
        IpAddr::V6(a) => a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.to_ipv4_mapped().is_some(),
    }
}

/// What the host says of new flows' client `client` ([`LastClient`]): whether it is one of
/// the gateway's own addresses ([`Host::is_own`]) and its route (the egress of the flow's
/// replies: interface, and whether the next hop is the client itself, on a connected
/// subnet), looked up once per run of new flows from one client.
#[inline(always)]
fn client_facts<A: Family>(st: &mut WorkerState, client: A) -> &LastClient {
    let c = &st.last_client;
    let known = c.client == Some(client.into()) && c.host.as_ref().is_some_and(|h| Arc::ptr_eq(h, &st.host));
    if !known {
        client_facts_anew(st, client);
    }
    &st.last_client
}

/// [`client_facts`] of a client other than the last one: the host asked.
#[inline(never)]
fn client_facts_anew<A: Family>(st: &mut WorkerState, client: A) {
    let route = st.host.route(client).map(|(out, hop)| (out, hop == client));
    st.last_client = LastClient {
        client: Some(client.into()),
        host: Some(Arc::clone(&st.host)),
        own: st.host.is_own(client),
        route,
    };
}

/// Learns the MAC address of a client on a connected subnet from the first frame of its
/// flow when the neighbour table does not know it yet, so the replies (routed to the client,
/// not sent back to a per-flow MAC) need not wait for ARP. A client normally ARPs for the
/// VIP first (or sends a Neighbor Solicitation for it), which teaches the same mapping (RFC
/// 826 "merge", RFC 4861 § 7.2.3); this covers clients that learned the gateway's MAC
/// otherwise. A known mapping is never overwritten from IP traffic: only ARP and NDP change
/// it. Whether the client is on-link (`on_link`) is routed once per run of new flows from
/// one client ([`client_facts`]).
#[inline(always)]
fn learn_on_link_client<A: Family>(now: u64, frame: &[u8], rx: &Rx, client: A, on_link: bool, st: &mut WorkerState) {
    if on_link && st.neighbours.lookup(client).is_none() {
        let mac = EthernetFrame::new_unchecked(&frame[..rx.l2_len]).src_addr();
        if mac.is_unicast() && !st.neighbours.learn(client, mac, now) {
            st.counters.neighbours_not_learned += 1;
        }
    }
}
