//! A SYN proxy for TCP front doors under a SYN flood, as Linux's SYNPROXY target and DPVS
//! do: beyond a rate of new TCP flows per worker, a client's SYN is answered by the gateway
//! with a SYN cookie ([`crate::conntrack::syncookie`], RFC 4987 § 3.6) and creates nothing;
//! only a client that completes the handshake (an ACK acknowledging a valid cookie) gets a
//! flow, whose connection to the endpoint the gateway then opens itself.
//!
//! # Contract
//!
//! - **Pressure.** Each worker admits `[conntrack] syn_cookies_above_per_s` SYNs a second
//!   (a burst of one second's worth) as ordinary new flows; a SYN beyond that, to a front
//!   door that exists and admits the client, is answered in place with a cookie SYN-ACK
//!   (`syn_cookies_sent`). `0` answers every SYN with a cookie; `syn_cookies = false`
//!   none. Flows that never needed the proxy are untouched by it.
//! - **The client's ACK.** While this worker has sent cookies in the last
//!   [`crate::conntrack::synproxy::RECENT_NS`] (Linux's `tcp_synq_no_recent_overflow`), a bare ACK that misses
//!   conntrack is checked as a cookie's acknowledgement; a valid one
//!   (`syn_cookies_valid`) creates the flow as a SYN would (front door, endpoint, SNAT
//!   port) and is turned, in place, into the SYN that opens the connection to the endpoint
//!   (the client's ISN, the cookie's MSS, no other option); data it carried is dropped (the
//!   client sends it again). An ACK that is not a cookie's takes the usual path (picked up
//!   mid-stream, as Linux's `nf_conntrack_tcp_loose`).
//! - **The endpoint's SYN-ACK** is not forwarded: the gateway answers it with the ACK that
//!   completes the endpoint's handshake, and learns the offset between the endpoint's ISN
//!   and the cookie. From then on, packets of the flow have their sequence numbers
//!   translated: the endpoint's SEQ (reply direction) before tracking, the client's ACK
//!   (original direction) after it — so connection tracking and its window checks see the
//!   whole connection in the client's numbering. A RST from the endpoint before its
//!   SYN-ACK reaches the client with a sequence number the client accepts. Client segments
//!   that come before the endpoint's SYN-ACK are dropped (`syn_proxy_pending`): the client
//!   retransmits.
//! - **State.** The translations live in a fixed-capacity map per family, keyed by the
//!   flow's original tuple (a flow that replaces one on the same tuple removes the old
//!   entry); it is allocated at start and never grows. When it is full, entries whose flow is
//!   gone are dropped; if none is, the cookie's ACK is dropped (`syn_proxy_full`).
//!   Window scaling, SACK and timestamps are not negotiated on proxied connections.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use super::family::Family;
use super::frame::ORIGINATED_TTL;
use super::link::{self, Rx};
use super::{Verdict, WorkerState};
use crate::conntrack::syncookie::{MSS_V4, MSS_V6};
use crate::conntrack::synproxy::{Adjust, Map};
use crate::conntrack::tcp::Segment as Class;
use crate::conntrack::{Conntrack, Direction, FlowKey, TcpSeq};
use crate::counters::DropReason;
use crate::wire::checksum::update32;
use crate::wire::{IpProtocol, Ipv4Packet, Ipv6Packet, TcpFlags, TcpPacket};

/// The MSS the gateway announces in a cookie SYN-ACK (an Ethernet MTU less the IPv4 and
/// TCP headers; IPv6: less 60).
const ANNOUNCED_MSS_V4: u16 = 1460;
const ANNOUNCED_MSS_V6: u16 = 1440;
/// The window the gateway announces in a cookie SYN-ACK (unscaled: no Window Scale option).
const ANNOUNCED_WINDOW: u16 = 65535;
/// TCP header with one MSS option (kind 2, length 4).
const SYN_HEADER_LEN: usize = 24;
/// TCP header without options.
const ACK_HEADER_LEN: usize = 20;

/// Per-family access to the translation map.
pub(super) trait Proxied: Family {
    /// The map of this family, and the conntrack it refers to.
    fn maps(st: &mut WorkerState) -> (&Conntrack<Self>, &mut Map<Self>);
    /// The MSS values a cookie of this family carries.
    const MSS: [u16; 4];
    /// The MSS the gateway announces.
    const ANNOUNCED_MSS: u16;
}

impl Proxied for Ipv4Addr {
    fn maps(st: &mut WorkerState) -> (&Conntrack<Self>, &mut Map<Self>) {
        (&st.conntrack, &mut st.synproxy.adjust)
    }
    const MSS: [u16; 4] = MSS_V4;
    const ANNOUNCED_MSS: u16 = ANNOUNCED_MSS_V4;
}

impl Proxied for Ipv6Addr {
    fn maps(st: &mut WorkerState) -> (&Conntrack<Self>, &mut Map<Self>) {
        (&st.conntrack6, &mut st.synproxy.adjust6)
    }
    const MSS: [u16; 4] = MSS_V6;
    const ANNOUNCED_MSS: u16 = ANNOUNCED_MSS_V6;
}

/// For a SYN of `key` whose TCP header is `frame[l4]` that would create a flow: `None`
/// when it may (under the rate), else the cookie SYN-ACK answering it, built in place and
/// sent back to the client ([`answer_syn`]). The rate check is inlined into the caller,
/// the answer is not: with the proxy off (`syn_cookies = false`) a SYN pays one test, not a
/// call with seven arguments.
#[inline(always)]
pub(super) fn syn<A: Proxied>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    key: &FlowKey<A>,
    tcp: &TcpSeq,
    l4: Range<usize>,
) -> Option<Verdict> {
    if !st.synproxy.over_rate(now) {
        return None;
    }
    answer_syn(now, frame, rx, st, key, tcp, l4)
}

/// [`syn`] of a SYN over the rate: the cookie SYN-ACK built in place (`None` when the
/// frame has no room for it).
#[inline(never)]
fn answer_syn<A: Proxied>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    key: &FlowKey<A>,
    tcp: &TcpSeq,
    l4: Range<usize>,
) -> Option<Verdict> {
    let client_mss = TcpPacket::new_checked(&frame[l4]).ok().and_then(|t| {
        crate::wire::tcp::option(t.options(), 2).and_then(|v| Some(u16::from_be_bytes(v.try_into().ok()?)))
    });
    let (cookie, _) = st.synproxy.cookies.issue(key, tcp.seq, client_mss, &A::MSS, now);
    let answer = Tcp {
        src: (key.dst_addr, key.dst_port),
        dst: (key.src_addr, key.src_port),
        seq: cookie,
        ack: tcp.seq.wrapping_add(1),
        flags: TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
        window: ANNOUNCED_WINDOW,
        mss: Some(A::ANNOUNCED_MSS),
    };
    let len = answer.write(&mut frame[rx.l2_len..], ORIGINATED_TTL)?;
    st.synproxy.last_sent_ns = Some(now);
    st.counters.syn_cookies_sent += 1;
    Some(link::answer(frame, rx, len, &st.host))
}

/// What a bare ACK that missed conntrack acknowledged: a cookie of this worker's.
#[derive(Clone, Copy, Debug)]
pub(super) struct CookieAck {
    mss: u16,
    adjust: Adjust,
}

/// Checks a bare ACK of `key` that missed conntrack as the acknowledgement of a cookie.
pub(super) fn cookie_ack<A: Proxied>(now: u64, st: &WorkerState, key: &FlowKey<A>, tcp: &TcpSeq) -> Option<CookieAck> {
    if !st.synproxy.recent(now) || Class::of(tcp.flags) != Class::Ack {
        return None;
    }
    let client_isn = tcp.seq.wrapping_sub(1);
    let cookie = tcp.ack.wrapping_sub(1);
    let mss = st.synproxy.cookies.check(key, client_isn, cookie, &A::MSS, now)?;
    Some(CookieAck { mss, adjust: Adjust { client_isn, cookie, client_window: tcp.window, delta: None } })
}

/// The SYN that [`open`] wrote: its transport header's offset from the network header,
/// the packet's length from the network header, and its tracking fields.
pub(super) struct Opened {
    pub l4_offset: usize,
    pub total: usize,
    pub tcp: TcpSeq,
}

/// Records the flow created for the cookie's ACK `ack` of `key` and turns the ACK in
/// `frame` into the SYN that opens the connection to the endpoint (still addressed as the
/// client sent it, with its TTL `ttl`: the NAT rewrite follows). The drop when the map is
/// full.
pub(super) fn open<A: Proxied>(
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    key: FlowKey<A>,
    ttl: u8,
    ack: CookieAck,
) -> Result<Opened, Verdict> {
    let capacity = st.synproxy.capacity;
    let (conntrack, map) = A::maps(st);
    if map.len() >= capacity && !map.contains_key(&key) {
        // Forget the translations of flows that are gone; this one's flow exists already.
        map.retain(|k, _| *k == key || conntrack.lookup(k).is_some_and(|(_, d)| d == Direction::Original));
        if map.len() >= capacity {
            return Err(Verdict::Drop(DropReason::SynProxyFull));
        }
    }
    let a = ack.adjust;
    let syn = Tcp {
        src: (key.src_addr, key.src_port),
        dst: (key.dst_addr, key.dst_port),
        seq: a.client_isn,
        ack: 0,
        flags: TcpFlags::SYN,
        window: a.client_window,
        mss: Some(ack.mss),
    };
    let Some(total) = syn.write(&mut frame[rx.l2_len..], ttl) else {
        return Err(Verdict::Drop(DropReason::MalformedL4));
    };
    A::maps(st).1.insert(key, a);
    st.counters.syn_cookies_valid += 1;
    let tcp = TcpSeq { flags: TcpFlags::SYN, seq: a.client_isn, ack: 0, window: a.client_window, len: 1, wscale: None };
    Ok(Opened { l4_offset: total - SYN_HEADER_LEN, total, tcp })
}

/// Whether this worker has proxied flows of family `A` (else nothing here applies).
#[inline]
pub(super) fn any<A: Proxied>(st: &mut WorkerState) -> bool {
    !A::maps(st).1.is_empty()
}

/// What [`before_track`] decided for a packet of a proxied flow.
pub(super) enum Before {
    /// Track and forward it (its numbers translated into the client's); a packet of the
    /// original direction then has `ack_delta` added to its ACK ([`translate_ack`]).
    Track {
        /// Endpoint ISN − cookie, for a packet of the original direction.
        ack_delta: Option<u32>,
    },
    /// The endpoint's SYN-ACK: track it (translated), then [`complete`].
    SynAck,
    /// Drop it.
    Drop(DropReason),
    /// Answered already (a retransmitted SYN-ACK): send this.
    Answer(Verdict),
}

/// For a packet of tuple `key` (direction `dir`, TCP header at `frame[l4]`) of the flow
/// whose original tuple is `original`: translates the reply direction's SEQ into the
/// client's numbering (in the frame and `tcp`), before connection tracking. `None` when
/// the flow is not proxied.
#[allow(clippy::too_many_arguments)]
pub(super) fn before_track<A: Proxied>(
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    original: &FlowKey<A>,
    key: &FlowKey<A>,
    dir: Direction,
    tcp: &mut TcpSeq,
    l4: Range<usize>,
) -> Option<Before> {
    let adjust = A::maps(st).1.get_mut(original)?;
    let class = Class::of(tcp.flags);
    Some(match (dir, adjust.delta) {
        (Direction::Original, None) => Before::Drop(DropReason::SynProxyPending),
        (Direction::Original, Some(delta)) => Before::Track { ack_delta: Some(delta) },
        (Direction::Reply, None) if class == Class::SynAck => {
            adjust.delta = Some(tcp.seq.wrapping_sub(adjust.cookie));
            tcp.seq = adjust.cookie;
            Before::SynAck
        }
        (Direction::Reply, None) if class == Class::Rst => {
            // The endpoint refused: the client gets a RST at the sequence it expects.
            tcp.seq = adjust.cookie.wrapping_add(1);
            patch(frame, rx, l4, Number::Seq, tcp.seq);
            Before::Track { ack_delta: None }
        }
        (Direction::Reply, None) => Before::Drop(DropReason::SynProxyPending),
        (Direction::Reply, Some(_)) if class == Class::SynAck => {
            // Our ACK was lost: the endpoint sends its SYN-ACK again.
            let a = *adjust;
            match ack_endpoint(frame, rx, st, key, a) {
                Some(v) => Before::Answer(v),
                None => Before::Drop(DropReason::MalformedL4),
            }
        }
        (Direction::Reply, Some(delta)) => {
            tcp.seq = tcp.seq.wrapping_sub(delta);
            patch(frame, rx, l4, Number::Seq, tcp.seq);
            Before::Track { ack_delta: None }
        }
    })
}

/// After tracking a packet of the original direction of a proxied flow (TCP header at
/// `frame[l4]`, tracking fields `tcp`): adds `delta` to its ACK, translating it into the
/// endpoint's numbering, in the frame.
pub(super) fn translate_ack(frame: &mut [u8], rx: &Rx, tcp: &TcpSeq, delta: u32, l4: Range<usize>) {
    if tcp.flags.contains(TcpFlags::ACK) {
        patch(frame, rx, l4, Number::Ack, tcp.ack.wrapping_add(delta));
    }
}

/// Completes the endpoint's handshake after its SYN-ACK (of tuple `key`, tracked): answers
/// it in place with the ACK; returns that answer and the client's ACK of the cookie as
/// connection tracking is to see it (in the client's numbering), which makes the flow
/// established.
pub(super) fn complete<A: Proxied>(
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    original: &FlowKey<A>,
    key: &FlowKey<A>,
) -> Result<(Verdict, TcpSeq), DropReason> {
    let a = *A::maps(st).1.get(original).ok_or(DropReason::NoConntrack)?;
    let client_ack = TcpSeq {
        flags: TcpFlags::ACK,
        seq: a.client_isn.wrapping_add(1),
        ack: a.cookie.wrapping_add(1),
        window: a.client_window,
        len: 0,
        wscale: None,
    };
    let v = ack_endpoint(frame, rx, st, key, a).ok_or(DropReason::MalformedL4)?;
    st.counters.syn_proxy_handshakes += 1;
    Ok((v, client_ack))
}

/// Answers the endpoint's SYN-ACK of tuple `key` (endpoint → SNAT address) with the ACK that
/// completes its handshake (the endpoint's ISN is the cookie plus the flow's delta), in
/// place, back out the interface it came in by.
fn ack_endpoint<A: Proxied>(
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    key: &FlowKey<A>,
    a: Adjust,
) -> Option<Verdict> {
    let endpoint_isn = a.cookie.wrapping_add(a.delta?);
    let ack = Tcp {
        src: (key.dst_addr, key.dst_port),
        dst: (key.src_addr, key.src_port),
        seq: a.client_isn.wrapping_add(1),
        ack: endpoint_isn.wrapping_add(1),
        flags: TcpFlags::ACK,
        window: a.client_window,
        mss: None,
    };
    let len = ack.write(&mut frame[rx.l2_len..], ORIGINATED_TTL)?;
    Some(link::answer(frame, rx, len, &st.host))
}

/// A 32-bit number of the TCP header.
#[derive(Clone, Copy)]
enum Number {
    Seq,
    Ack,
}

/// Writes `value` into the TCP header at `frame[l4]` as its SEQ or ACK, updating the
/// checksum incrementally (RFC 1624) unless it is partial (left to the device).
fn patch(frame: &mut [u8], rx: &Rx, l4: Range<usize>, number: Number, value: u32) {
    if let Ok(mut t) = TcpPacket::new_checked(&mut frame[l4]) {
        let old = match number {
            Number::Seq => t.seq_number(),
            Number::Ack => t.ack_number(),
        };
        match number {
            Number::Seq => t.set_seq_number(value),
            Number::Ack => t.set_ack_number(value),
        }
        if !rx.l4_csum_partial {
            let check = t.checksum();
            t.set_checksum(update32(check, old, value));
        }
    }
}

/// A TCP segment without data that the gateway writes: an IP header of the family of the
/// addresses, and a TCP header with at most an MSS option.
struct Tcp<A> {
    src: (A, u16),
    dst: (A, u16),
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    window: u16,
    mss: Option<u16>,
}

impl<A: Family> Tcp<A> {
    /// Writes the segment at the start of `ip` with TTL (IPv6: Hop Limit) `ttl` (a segment
    /// the gateway sends on a client's behalf keeps the client's: the NAT rewrite
    /// decrements it); its length from the IP header, or `None` when `ip` is too short.
    fn write(&self, ip: &mut [u8], ttl: u8) -> Option<usize> {
        let tcp_len = if self.mss.is_some() { SYN_HEADER_LEN } else { ACK_HEADER_LEN };
        let header = match (self.src.0.into(), self.dst.0.into()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let out = ip.get_mut(..20 + tcp_len)?;
                Ipv4Packet::new_unchecked(out).fill_header(s, d, IpProtocol::Tcp, tcp_len as u16, ttl);
                20
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let out = ip.get_mut(..40 + tcp_len)?;
                Ipv6Packet::new_unchecked(out).fill_header(s, d, u8::from(IpProtocol::Tcp), tcp_len as u16, ttl);
                40
            }
            _ => return None,
        };
        let mut t = TcpPacket::new_unchecked(&mut ip[header..header + tcp_len]);
        t.set_src_port(self.src.1);
        t.set_dst_port(self.dst.1);
        t.set_seq_number(self.seq);
        t.set_ack_number(self.ack);
        t.set_header_len(tcp_len);
        t.set_flags(self.flags);
        t.set_window_len(self.window);
        t.set_urgent_at(0);
        if let Some(mss) = self.mss {
            let o = t.options_mut();
            o[0] = 2;
            o[1] = 4;
            o[2..4].copy_from_slice(&mss.to_be_bytes());
        }
        match (self.src.0.into(), self.dst.0.into()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => t.fill_checksum(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => t.fill_checksum(s, d),
            _ => return None,
        }
        Some(header + tcp_len)
    }
}
