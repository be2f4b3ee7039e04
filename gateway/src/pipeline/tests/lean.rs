//! The lean established path (`super::lean`) against the general path, for both address
//! families: established TCP
//! connections (real handshakes, sequence numbers that advance as the segments carry data),
//! connections whose handshake's last ACK is still to come, connections the SYN proxy opened
//! (cookie handshakes, numbers translated; in half the cases) and assured UDP flows, then
//! random traffic on them — in-window data both ways, segments outside the
//! window or acknowledging unsent data, FIN, RST, SYN, TTL / Hop Limit 1, a corrupted IPv4
//! header or an IPv6 extension header, a zero transport checksum, the wrong link, an expired
//! neighbour, a neighbour's new MAC, a new table (the same endpoints,
//! or one fewer) — through [`process_burst`] (which takes the lean path where it may,
//! as each flow's lean bits say: `FlowState::lean`) on one worker and [`process`] frame by
//! frame on another; the endpoint's SYN-ACK (with and without options), the ACKs of
//! connections not ESTABLISHED (the handshake's, the close's), and a close's FIN and RST,
//! take the lean path through the state machine (`lean::forward_tracked`), on connections
//! in every state from SYN_SENT (a RST before any reply, which removes the flow, and a
//! SYN-ACK in any state but SYN_SENT are the general path's). The two must agree on every verdict, every output byte, the counters
//! (per front door too), every flow and its TCP windows. Golden tests add VLAN interfaces
//! and a default router whose MAC changes mid-burst.

use std::net::Ipv6Addr;

use proptest::prelude::*;

use super::ipv6::{backend6, state6, table6, GW_FRONT6, SNAT6, VIP6};
use super::*;
use crate::conntrack::synproxy::SynProxy;
use crate::conntrack::{Direction, FlowKey, TcpState};
use crate::pipeline::hint::{LeanFrame, LeanSegment, PREFETCH_WINDOW};
use crate::pipeline::lean::{self, LeanFamily};
use crate::pipeline::link::Rx;
use crate::wire::ipv6::NEXT_HEADER_DST_OPTIONS;
use crate::wire::Icmpv6Type;

const BACK_L2: L2 = L2 { src: MacAddr([0x02, 0, 0, 0, 0xb0, 0]), dst: GW_BACK_MAC };

/// What the tests need of an address family: its addresses, frames and offsets.
trait Fam: LeanFamily + std::fmt::Debug {
    /// The client (on the front link), the front door's VIP (TCP and UDP port 80), the
    /// SNAT address (on the back link).
    const CLIENT: Self;
    const VIP: Self;
    const SNAT: Self;
    /// The last byte of the front door's three endpoints' addresses (on the back link).
    const ENDPOINTS: [u8; 3];
    /// Offset of the transport header in an untagged frame of a packet without options or
    /// extension headers.
    const L4: usize;
    /// The endpoint whose address ends in `last`.
    fn endpoint(last: u8) -> Self;
    /// A table whose front door (`VIP`, TCP and UDP port 80) has the endpoints ending in
    /// `lasts`, a new generation.
    fn table(lasts: &[u8]) -> Table;
    /// `frames::tcp` / `frames::tcp6`, TTL / Hop Limit `ttl`.
    #[allow(clippy::too_many_arguments)]
    fn tcp(
        l2: L2,
        src: (Self, u16),
        dst: (Self, u16),
        flags: TcpFlags,
        seq: u32,
        ack: u32,
        data: &[u8],
        ttl: u8,
    ) -> Vec<u8>;
    /// `frames::udp` / `frames::udp6`, TTL / Hop Limit `ttl`.
    fn udp(l2: L2, src: (Self, u16), dst: (Self, u16), data: &[u8], ttl: u8) -> Vec<u8>;
    /// The destination address of an untagged frame's packet.
    fn dst_of(frame: &[u8]) -> Self;
    /// `f` changed as the lean path must leave to the general one, which decides (IPv4: a
    /// wrong header checksum, a drop; IPv6: a Destination Options header, forwarded).
    fn quirk(f: &mut Vec<u8>);
    /// Stage 1's parse of `frame` (`ipv4::flow_key`, `ipv6::flow_key`).
    fn early(frame: &[u8], rx: &Rx, seg: &mut LeanSegment) -> Option<FlowKey<Self>>;
}

impl Fam for Ipv4Addr {
    const CLIENT: Self = CLIENT.0;
    const VIP: Self = VIP;
    const SNAT: Self = SNAT;
    const ENDPOINTS: [u8; 3] = [11, 12, 13];
    const L4: usize = 34;
    fn endpoint(last: u8) -> Self {
        Ipv4Addr::new(10, 70, 0, last)
    }
    fn table(lasts: &[u8]) -> Table {
        let names: Vec<String> = lasts.iter().map(|&l| Self::endpoint(l).to_string()).collect();
        table(&names.iter().map(String::as_str).collect::<Vec<_>>())
    }
    fn tcp(
        l2: L2,
        src: (Self, u16),
        dst: (Self, u16),
        flags: TcpFlags,
        seq: u32,
        ack: u32,
        data: &[u8],
        ttl: u8,
    ) -> Vec<u8> {
        frames::tcp(l2, src, dst, flags, seq, ack, data, ttl)
    }
    fn udp(l2: L2, src: (Self, u16), dst: (Self, u16), data: &[u8], ttl: u8) -> Vec<u8> {
        frames::udp(l2, src, dst, data, ttl)
    }
    fn dst_of(frame: &[u8]) -> Self {
        backend_of(frame)
    }
    fn quirk(f: &mut Vec<u8>) {
        f[24] ^= 0x11;
    }
    fn early(frame: &[u8], rx: &Rx, seg: &mut LeanSegment) -> Option<FlowKey<Self>> {
        crate::pipeline::ipv4::flow_key(frame, rx, seg, &mut false).map(|(key, _)| key)
    }
}

impl Fam for Ipv6Addr {
    const CLIENT: Self = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10);
    const VIP: Self = VIP6;
    const SNAT: Self = SNAT6;
    const ENDPOINTS: [u8; 3] = [0x11, 0x12, 0x13];
    const L4: usize = 54;
    fn endpoint(last: u8) -> Self {
        backend6(u16::from(last))
    }
    fn table(lasts: &[u8]) -> Table {
        table6(&lasts.iter().map(|&l| u16::from(l)).collect::<Vec<_>>(), None)
    }
    fn tcp(
        l2: L2,
        src: (Self, u16),
        dst: (Self, u16),
        flags: TcpFlags,
        seq: u32,
        ack: u32,
        data: &[u8],
        ttl: u8,
    ) -> Vec<u8> {
        frames::tcp6(l2, src, dst, flags, seq, ack, data, ttl)
    }
    fn udp(l2: L2, src: (Self, u16), dst: (Self, u16), data: &[u8], ttl: u8) -> Vec<u8> {
        frames::udp6(l2, src, dst, data, ttl)
    }
    fn dst_of(frame: &[u8]) -> Self {
        crate::wire::Ipv6Packet::new_checked(&frame[14..]).unwrap().dst_addr()
    }
    fn quirk(f: &mut Vec<u8>) {
        // An empty Destination Options header (a PadN option) before the transport header:
        // Next Header moves into it, Payload Length grows by its 8 bytes.
        let upper = f[20];
        f.splice(54..54, [upper, 0, 1, 4, 0, 0, 0, 0]);
        f[20] = NEXT_HEADER_DST_OPTIONS;
        let len = u16::from_be_bytes([f[18], f[19]]) + 8;
        f[18..20].copy_from_slice(&len.to_be_bytes());
    }
    fn early(frame: &[u8], rx: &Rx, seg: &mut LeanSegment) -> Option<FlowKey<Self>> {
        crate::pipeline::ipv6::flow_key(frame, rx, seg).map(|(key, _)| key)
    }
}

/// Worker state with both families' endpoints resolved (at 0).
fn lean_state() -> WorkerState {
    state6()
}

/// One connection (or UDP flow) as both ends see it: the endpoint and SNAT port the
/// gateway chose, and each end's next sequence number.
#[derive(Clone, Copy, Debug)]
struct Conn<A> {
    tcp: bool,
    client_port: u16,
    backend: A,
    snat_port: u16,
    next: [u32; 2],
    /// The endpoint's ISN less the SYN proxy's cookie (0 unless the proxy opened it): the
    /// client acknowledges the endpoint's numbers less this.
    delta: u32,
}

/// Runs `frame` (arriving on `iface`) through `process` on both workers, checks they agree
/// and returns the output.
fn both(now: u64, frame: &[u8], iface: u8, t: &Table, a: &mut WorkerState, b: &mut WorkerState) -> Vec<u8> {
    let (va, oa) = run(now, frame, iface, t, a);
    let (vb, ob) = run(now, frame, iface, t, b);
    assert_eq!((va, &oa), (vb, &ob));
    assert!(matches!(va, Verdict::Transmit { .. }), "{va:?}");
    oa
}

/// The source port of the transport header of an untagged frame of family `A`.
fn src_port<A: Fam>(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[A::L4], frame[A::L4 + 1]])
}

/// Opens `n` TCP connections and `n` UDP flows on both workers through the general path
/// and brings them to ESTABLISHED and assured (UDP: a datagram each way and one more).
fn open<A: Fam>(t: &Table, a: &mut WorkerState, b: &mut WorkerState, n: u16) -> Vec<Conn<A>> {
    let mut conns = Vec::new();
    for i in 0..n {
        let client = (A::CLIENT, 41_000 + i);
        conns.push(half_open::<A>(t, a, b, client.1));
        both(0, &A::tcp(to_gw(), client, (A::VIP, 80), TcpFlags::ACK, 1001, 5001, b"", 64), FRONT, t, a, b);
        let out = both(0, &A::udp(to_gw(), client, (A::VIP, 80), b"q", 64), FRONT, t, a, b);
        let (backend, snat_port) = (A::dst_of(&out), src_port::<A>(&out));
        both(0, &A::udp(BACK_L2, (backend, 8080), (A::SNAT, snat_port), b"r", 64), BACK, t, a, b);
        both(0, &A::udp(to_gw(), client, (A::VIP, 80), b"q", 64), FRONT, t, a, b);
        conns.push(Conn { tcp: false, client_port: client.1, backend, snat_port, next: [1001, 5001], delta: 0 });
    }
    conns
}

/// Opens a TCP connection from the client's port `client_port` on both workers through the
/// general path as far as the endpoint's SYN-ACK (SYN_RECV): its next segment from the
/// client, at the connection's numbers, is the handshake's last ACK.
fn half_open<A: Fam>(t: &Table, a: &mut WorkerState, b: &mut WorkerState, client_port: u16) -> Conn<A> {
    let client = (A::CLIENT, client_port);
    let out = both(0, &A::tcp(to_gw(), client, (A::VIP, 80), TcpFlags::SYN, 1000, 0, b"", 64), FRONT, t, a, b);
    let (backend, snat_port) = (A::dst_of(&out), src_port::<A>(&out));
    let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    both(0, &A::tcp(BACK_L2, (backend, 8080), (A::SNAT, snat_port), syn_ack, 5000, 1001, b"", 64), BACK, t, a, b);
    Conn { tcp: true, client_port, backend, snat_port, next: [1001, 5001], delta: 0 }
}

/// Opens a TCP connection from the client's port `client_port` on both workers through the
/// general path with its SYN alone (SYN_SENT, no reply seen).
fn syn_sent<A: Fam>(t: &Table, a: &mut WorkerState, b: &mut WorkerState, client_port: u16) -> Conn<A> {
    let client = (A::CLIENT, client_port);
    let out = both(0, &A::tcp(to_gw(), client, (A::VIP, 80), TcpFlags::SYN, 1000, 0, b"", 64), FRONT, t, a, b);
    let (backend, snat_port) = (A::dst_of(&out), src_port::<A>(&out));
    Conn { tcp: true, client_port, backend, snat_port, next: [1001, 5001], delta: 0 }
}

/// Turns on both workers' SYN proxy (every SYN answered with a cookie) and opens `n` TCP
/// connections through it: SYN, cookie SYN-ACK, the client's ACK turned into the SYN to the
/// endpoint, the endpoint's SYN-ACK answered by the gateway. Their numbers are translated
/// from then on, which only the general path does.
fn open_proxied<A: Fam>(t: &Table, a: &mut WorkerState, b: &mut WorkerState, n: u16) -> Vec<Conn<A>> {
    for st in [&mut *a, &mut *b] {
        st.synproxy = SynProxy::new(true, 0, 64, 11);
    }
    let mut conns = Vec::new();
    for i in 0..n {
        let client = (A::CLIENT, 43_000 + i);
        let out = both(0, &A::tcp(to_gw(), client, (A::VIP, 80), TcpFlags::SYN, 1000, 0, b"", 64), FRONT, t, a, b);
        let seq = A::L4 + 4;
        let cookie = u32::from_be_bytes([out[seq], out[seq + 1], out[seq + 2], out[seq + 3]]);
        let ack = A::tcp(to_gw(), client, (A::VIP, 80), TcpFlags::ACK, 1001, cookie.wrapping_add(1), b"", 64);
        let out = both(0, &ack, FRONT, t, a, b);
        let backend = A::dst_of(&out);
        let snat_port = src_port::<A>(&out);
        let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
        both(0, &A::tcp(BACK_L2, (backend, 8080), (A::SNAT, snat_port), syn_ack, 5000, 1001, b"", 64), BACK, t, a, b);
        let delta = 5000u32.wrapping_sub(cookie);
        conns.push(Conn { tcp: true, client_port: client.1, backend, snat_port, next: [1001, 5001], delta });
    }
    conns
}

/// What changes between two bursts besides the traffic.
#[derive(Clone, Copy, Debug)]
enum Event {
    Nothing,
    /// A new table generation with the same endpoints (every flow revalidated).
    SameTable,
    /// A new table without endpoint 10.70.0.13 (its flows reset or steered anew).
    EndpointGone,
    /// Endpoint 10.70.0.11's neighbour entry learns a new MAC.
    NewMac(u8),
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => Just(Event::Nothing),
        1 => Just(Event::SameTable),
        1 => Just(Event::EndpointGone),
        1 => any::<u8>().prop_map(Event::NewMac),
    ]
}

/// What a random frame does to its connection.
#[derive(Clone, Copy, Debug)]
enum Variant {
    /// In-window data (or a bare ACK) at the sender's next sequence number.
    Data(u8),
    /// ACK|PSH with data.
    Push(u8),
    /// A sequence number far beyond the window.
    FarSeq,
    /// Acknowledges data never sent.
    AckAhead,
    /// FIN|ACK, RST, SYN, RST|ACK at the current numbers, (4) a FIN|ACK whose TCP checksum
    /// is wrong, (5) a SYN-ACK with options ([`SYN_ACK_OPTIONS`]: Window Scale 7 among
    /// them), (6) a SYN-ACK with ECE and no option, (7) a SYN-ACK acknowledging a SYN at the
    /// current numbers (variant 2's: on an open flow, the SYN the state machine ignored and
    /// recorded, from which this SYN-ACK restarts the flow).
    Flags(u8),
    /// TTL / Hop Limit 1.
    Ttl1,
    /// The family's quirk ([`Fam::quirk`]: a corrupted IPv4 header checksum, an IPv6
    /// extension header).
    Quirk,
    /// A transport checksum of 0 (UDP over IPv4: none; over IPv6, a drop; TCP: a wrong one,
    /// not checked on an established flow).
    ZeroChecksum,
    /// Arrives on the other direction's link.
    WrongLink,
}

fn arb_variant() -> impl Strategy<Value = Variant> {
    prop_oneof![
        8 => any::<u8>().prop_map(Variant::Data),
        3 => any::<u8>().prop_map(Variant::Push),
        1 => Just(Variant::FarSeq),
        1 => Just(Variant::AckAhead),
        3 => (0u8..8).prop_map(Variant::Flags),
        1 => Just(Variant::Ttl1),
        1 => Just(Variant::Quirk),
        1 => Just(Variant::ZeroChecksum),
        1 => Just(Variant::WrongLink),
    ]
}

/// The frame of `variant` on `conn` in `direction` (and its arrival port), advancing the
/// sender's sequence number for data.
fn frame<A: Fam>(conn: &mut Conn<A>, reply: bool, variant: Variant) -> (Vec<u8>, u8) {
    let d = usize::from(reply);
    let (src, dst, l2, mut iface) = if reply {
        ((conn.backend, 8080), (A::SNAT, conn.snat_port), BACK_L2, BACK)
    } else {
        ((A::CLIENT, conn.client_port), (A::VIP, 80), to_gw(), FRONT)
    };
    let (mut seq, mut ack) = (conn.next[d], conn.next[1 - d]);
    if !reply {
        ack = ack.wrapping_sub(conn.delta);
    }
    let mut flags = TcpFlags::ACK;
    let mut payload = Vec::new();
    let mut ttl = 64;
    match variant {
        Variant::Data(len) | Variant::Push(len) => {
            payload = vec![len; usize::from(len % 100)];
            if matches!(variant, Variant::Push(_)) {
                flags = TcpFlags(TcpFlags::ACK.0 | TcpFlags::PSH.0);
            }
        }
        Variant::FarSeq => seq = seq.wrapping_add(3_000_000),
        Variant::AckAhead => ack = ack.wrapping_add(100_000),
        Variant::Flags(f) => {
            let (fin, syn, rst, a, ece) =
                (TcpFlags::FIN.0, TcpFlags::SYN.0, TcpFlags::RST.0, TcpFlags::ACK.0, TcpFlags::ECE.0);
            flags = TcpFlags([fin | a, rst, syn, rst | a, fin | a, syn | a, syn | a | ece, syn | a][usize::from(f)]);
            if f == 5 {
                payload = SYN_ACK_OPTIONS.to_vec();
            }
            if f == 7 {
                ack = ack.wrapping_add(1);
            }
        }
        Variant::Ttl1 => ttl = 1,
        Variant::Quirk | Variant::ZeroChecksum | Variant::WrongLink => {}
    }
    let mut f = if conn.tcp {
        A::tcp(l2, src, dst, flags, seq, ack, &payload, ttl)
    } else {
        A::udp(l2, src, dst, &payload, ttl)
    };
    match variant {
        Variant::Quirk => A::quirk(&mut f),
        Variant::ZeroChecksum | Variant::Flags(4) => {
            let at = A::L4 + if conn.tcp { 16 } else { 6 };
            f[at..at + 2].fill(0);
        }
        Variant::WrongLink => iface = if reply { FRONT } else { BACK },
        Variant::Data(_) | Variant::Push(_) => conn.next[d] = seq.wrapping_add(payload.len() as u32),
        // The payload as the header's options.
        Variant::Flags(5) if conn.tcp => {
            f[A::L4 + 12] = (((20 + SYN_ACK_OPTIONS.len()) / 4) << 4) as u8;
            crate::wire::TcpPacket::new_unchecked(&mut f[A::L4..]).fill_checksum(src.0, dst.0);
        }
        _ => {}
    }
    (f, iface)
}

/// A SYN-ACK's options (RFC 9293 § 3.2, RFC 7323 § 2.2): MSS 1460, SACK permitted, NOP,
/// Window Scale 7, NOP, NOP.
const SYN_ACK_OPTIONS: [u8; 12] = [2, 4, 0x05, 0xb4, 4, 2, 1, 3, 3, 7, 1, 1];

/// Runs `input` through [`process_burst`] on `a` and [`process`] frame by frame on `b` at
/// `now`, and checks that the two agree on every verdict and output, the counters, the
/// front doors' counts, and family `A`'s flows and TCP windows. Returns the burst's output
/// buffers.
fn agree<A: Fam>(
    now: u64,
    input: &[(Vec<u8>, u8)],
    t: &Table,
    a: &mut WorkerState,
    b: &mut WorkerState,
) -> Result<Vec<[u8; 256]>, TestCaseError> {
    let (mut bufs, metas) = burst_of(input);
    let mut verdicts = vec![Verdict::Consumed; input.len()];
    let rx_before = a.counters.rx_frames;
    process_burst(now, &mut bufs, &metas, t, a, &mut verdicts);
    prop_assert_eq!(a.counters.rx_frames - rx_before, input.len() as u64);
    // A burst numbers its table at its start (`lean::BurstConstants::new`), `process`
    // when a frame first reads it: a burst of none, or of frames dropped before
    // (a bad checksum), numbers a table the frame-by-frame side never does. The
    // numbers are the worker's own (a flow's `table_epoch` says only "validated
    // against this table"), so the frame-by-frame side numbers it here too.
    b.table_epoch(t);
    for (k, (f, iface)) in input.iter().enumerate() {
        let (v, out) = run(now, f, *iface, t, b);
        prop_assert_eq!(verdicts[k], v, "frame {}", k);
        if let Verdict::Transmit { len, .. } = v {
            prop_assert_eq!(&bufs[k][..len], &out[..], "frame {}", k);
        }
    }
    prop_assert_eq!(&a.counters, &b.counters);
    prop_assert_eq!(a.frontends.as_slice(), b.frontends.as_slice());
    let (ca, cb) = (A::conntrack(a), A::conntrack(b));
    prop_assert_eq!(ca.iter().collect::<Vec<_>>(), cb.iter().collect::<Vec<_>>());
    for (id, _) in ca.iter() {
        prop_assert_eq!(ca.tcp_windows(id), cb.tcp_windows(id));
    }
    Ok(bufs)
}

/// Bursts of frames (a connection's index, whether a reply, what the frame does), each
/// after an event.
type Steps = Vec<(Vec<(prop::sample::Index, bool, Variant)>, Event)>;

/// The property of both families: see the module documentation.
fn lean_agrees<A: Fam>(steps: &Steps, pause_s: u64) -> Result<(), TestCaseError> {
    let mut t = A::table(&A::ENDPOINTS);
    let (mut a, mut b) = (lean_state(), lean_state());
    let mut conns = open::<A>(&t, &mut a, &mut b, 4);
    // Two connections whose next segment from the client completes the handshake.
    conns.extend((0..2).map(|i| half_open::<A>(&t, &mut a, &mut b, 42_000 + i)));
    // One the endpoint never answered (SYN_SENT: a RST removes it, on the general path).
    conns.push(syn_sent::<A>(&t, &mut a, &mut b, 42_100));
    // In half the cases, connections the SYN proxy opened, which keep every flow that is
    // not ESTABLISHED and assured on the general path (`lean::forward_tracked`).
    if steps.len().is_multiple_of(2) {
        conns.extend(open_proxied::<A>(&t, &mut a, &mut b, 2));
    }
    for (n, (burst, event)) in steps.iter().enumerate() {
        // Bursts a few seconds apart; the neighbours were learned at 0 and go stale at 60 s.
        let now = (n as u64 * pause_s + 1) * SEC;
        match *event {
            Event::Nothing => {}
            Event::SameTable => t = A::table(&A::ENDPOINTS),
            Event::EndpointGone => t = A::table(&A::ENDPOINTS[..2]),
            Event::NewMac(m) => {
                for st in [&a, &b] {
                    st.neighbours.learn(A::endpoint(A::ENDPOINTS[0]), MacAddr([0x02, 0, 0, 0, 0x7e, m]), now);
                }
            }
        }
        let input: Vec<(Vec<u8>, u8)> = burst
            .iter()
            .map(|(i, reply, v)| {
                let k = i.index(conns.len());
                frame(&mut conns[k], *reply, *v)
            })
            .collect();
        agree::<A>(now, &input, &t, &mut a, &mut b).map_err(|e| TestCaseError::fail(format!("burst {n}: {e}")))?;
    }
    Ok(())
}

fn arb_steps() -> impl Strategy<Value = Steps> {
    prop::collection::vec(
        (prop::collection::vec((any::<prop::sample::Index>(), any::<bool>(), arb_variant()), 0..40), arb_event()),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_lean_path_agrees_with_the_general_path(steps in arb_steps(), pause_s in 0u64..40) {
        lean_agrees::<Ipv4Addr>(&steps, pause_s)?;
    }

    #[test]
    fn the_ipv6_lean_path_agrees_with_the_general_path(steps in arb_steps(), pause_s in 0u64..40) {
        lean_agrees::<Ipv6Addr>(&steps, pause_s)?;
    }
}

/// A TCP segment or UDP datagram with some of its first 60 bytes changed (flags, lengths,
/// Data Offset, fragment bits, TTL, protocol, checksum: anything) and its length cut.
/// The last field: nothing was changed or cut.
fn arb_early_frame() -> impl Strategy<Value = (Vec<u8>, usize, bool, bool, bool)> {
    (
        any::<bool>(),
        0usize..80,
        prop::collection::vec((14usize..74, any::<u8>()), 0..4),
        0usize..40,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(tcp, payload, changes, cut, partial, good)| {
            let payload = vec![7u8; payload];
            let f = if tcp {
                frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1000, 2000, &payload, 64)
            } else {
                frames::udp(to_gw(), CLIENT, (VIP, 80), &payload, 64)
            };
            let (f, len, untouched) = mutated(f, changes, cut);
            (f, len, partial, good, untouched)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The early parse's fixed-offset reading of a plain packet (`ipv4::flow_key_plain`)
    /// finds what the checked views find (`ipv4::flow_key_checked`), or leaves the packet
    /// to them.
    #[test]
    fn the_plain_early_parse_agrees_with_the_checked_one((f, len, partial, good, untouched) in arb_early_frame()) {
        let st = state(0, 1);
        let meta = Meta { iface: FRONT, len, l4_csum_partial: partial, l3_csum_good: good, ..Meta::default() };
        let Ok((rx, _)) = crate::pipeline::link::receive(&f, &meta, &st.host) else { return Ok(()) };
        let (mut plain_seg, mut checked_seg) = (LeanSegment::NONE, LeanSegment::NONE);
        let mut header_ok = false;
        let plain = crate::pipeline::ipv4::flow_key_plain(&f, &rx, &mut plain_seg, &mut header_ok);
        let checked = crate::pipeline::ipv4::flow_key_checked(&f, rx, &mut checked_seg);
        prop_assert!(plain.is_some() || !untouched, "a plain segment left to the checked parse");
        if plain.is_some() {
            prop_assert_eq!(plain, checked);
            let ip = crate::wire::Ipv4Packet::new_unchecked(&f[14..len]);
            prop_assert_eq!(header_ok, good || ip.verify_checksum());
            // A plain SYN's segment is written for the general path's hint, by the plain
            // parse only (`ipv4::hinted_syn`; `pipeline/tests/stage1.rs` checks it).
            if plain_seg.tcp.flags.0 & (TcpFlags::SYN.0 | TcpFlags::ACK.0 | TcpFlags::RST.0) == TcpFlags::SYN.0 {
                prop_assert_eq!(checked_seg, LeanSegment::NONE);
                prop_assert!(plain_seg.total != 0, "a plain SYN's segment written");
            } else {
                prop_assert_eq!(plain_seg, checked_seg);
            }
        } else {
            prop_assert_eq!(plain_seg, LeanSegment::NONE);
        }
    }
}

/// Whether the lean path itself forwards `f` arriving on `iface` (not handing it to the
/// general path): stages 1 and 2 of a burst for this one frame, then [`lean::forward`]
/// with the burst's constants `k` and, as stage 4 does, [`lean::forward_tracked`].
fn taken<A: Fam>(f: &[u8], iface: u8, k: &lean::BurstConstants, st: &mut WorkerState) -> bool {
    let mut buf = [0u8; 256];
    buf[..f.len()].copy_from_slice(f);
    let meta = Meta { iface, len: f.len(), ..Meta::default() };
    // A frame for another port's MAC (the wrong link) fails here: no lean path either.
    let Ok((rx, _)) = crate::pipeline::link::receive(&buf, &meta, &st.host) else { return false };
    let mut seg = LeanSegment::NONE;
    let Some(key) = A::early(&buf, &rx, &mut seg) else { return false };
    if !seg.is_lean() {
        return false;
    }
    let Some((id, direction)) = A::conntrack(st).lookup(&key) else { return false };
    let lean = LeanFrame { key, hash: 0, id, direction, seg };
    lean::forward(&mut buf, &lean, k, st, &mut Verdict::Consumed)
        || lean::forward_tracked(&mut buf, &lean, k, st, &mut Verdict::Consumed)
}

/// Established TCP and assured UDP frames of family `A` are forwarded by the lean path
/// itself, and the ones it must not take are not.
fn established_frames_take_the_lean_path_of<A: Fam>() {
    let t = A::table(&A::ENDPOINTS);
    let (mut a, mut b) = (lean_state(), lean_state());
    let mut conns = open::<A>(&t, &mut a, &mut b, 2);
    let k = lean::BurstConstants::new(SEC, &t, &mut a);
    let ipv6 = A::ETHER_TYPE == EtherType::Ipv6;
    for conn in &mut conns {
        let tcp = conn.tcp;
        let mut taken = |reply: bool, variant: Variant| {
            let (f, iface) = frame(conn, reply, variant);
            taken::<A>(&f, iface, &k, &mut a)
        };
        assert!(taken(false, Variant::Data(10)), "tcp {tcp}");
        assert!(taken(true, Variant::Push(40)), "tcp {tcp}");
        assert!(!taken(true, Variant::WrongLink), "tcp {tcp}");
        assert!(!taken(false, Variant::Ttl1), "tcp {tcp}");
        assert!(!taken(false, Variant::Quirk), "tcp {tcp}");
        // UDP without a checksum: IPv4's lean path forwards it, IPv6's general path drops
        // it; a TCP segment's checksum is not checked on an established flow.
        assert_eq!(taken(true, Variant::ZeroChecksum), tcp || !ipv6, "tcp {tcp}");
        if tcp {
            assert!(!taken(false, Variant::FarSeq));
            // A SYN, and a FIN whose checksum is wrong, are the general path's; a FIN goes
            // through the state machine (`lean::forward_tracked`).
            assert!(!taken(false, Variant::Flags(2)));
            assert!(!taken(false, Variant::Flags(4)));
            assert!(taken(false, Variant::Flags(0)));
        }
    }
    // Every neighbour was learned at 0: at 61 s each is due for the general path's refresh.
    let stale = lean::BurstConstants::new(61 * SEC, &t, &mut a);
    for conn in &mut conns {
        for reply in [false, true] {
            let (f, iface) = frame(conn, reply, Variant::Data(1));
            assert!(!taken::<A>(&f, iface, &stale, &mut a), "{conn:?}");
        }
    }
    assert_eq!(Direction::Original as u8, 0);
}

#[test]
fn established_frames_take_the_lean_path() {
    established_frames_take_the_lean_path_of::<Ipv4Addr>();
}

#[test]
fn established_ipv6_frames_take_the_lean_path() {
    established_frames_take_the_lean_path_of::<Ipv6Addr>();
}

/// The ACKs of TCP connections that are not ESTABLISHED and assured — the handshake's last
/// one, and those of a close — and a close's FIN and RST are forwarded by the lean path
/// through the state machine, which moves the flow as the general path would (the property
/// test compares the two paths on random traffic), and so is the endpoint's SYN-ACK in
/// SYN_SENT; a SYN is not, nor a RST before any reply (the general path removes the flow),
/// nor a SYN-ACK in another state. While the worker holds a flow the SYN proxy
/// opened, every such segment goes to the general path.
fn handshake_and_close_acks_take_the_lean_path_of<A: Fam>() {
    let t = A::table(&A::ENDPOINTS);
    let (mut a, mut b) = (lean_state(), lean_state());
    let mut conn = half_open::<A>(&t, &mut a, &mut b, 42_000);
    let k = lean::BurstConstants::new(SEC, &t, &mut a);
    let state = |st: &WorkerState| A::conntrack(st).iter().next().map(|(_, flow)| flow.state).unwrap();
    assert_eq!(state(&a).tcp_state(), TcpState::SynRecv);
    let (f, iface) = frame(&mut conn, false, Variant::Data(0));
    assert!(taken::<A>(&f, iface, &k, &mut a));
    let s = state(&a);
    assert_eq!((s.tcp_state(), s.assured()), (TcpState::Established, true));
    assert!(s.lean(Direction::Original) && s.lean(Direction::Reply), "{s:?}");
    // The client closes (a FIN); the endpoint's ACK of it, then its FIN, then the client's
    // ACK of that.
    let (f, iface) = frame(&mut conn, false, Variant::Flags(0));
    assert!(taken::<A>(&f, iface, &k, &mut a));
    assert_eq!(state(&a).tcp_state(), TcpState::FinWait);
    conn.next[0] += 1;
    let (f, iface) = frame(&mut conn, true, Variant::Data(0));
    assert!(taken::<A>(&f, iface, &k, &mut a));
    assert_eq!(state(&a).tcp_state(), TcpState::CloseWait);
    let (f, iface) = frame(&mut conn, true, Variant::Flags(0));
    assert!(taken::<A>(&f, iface, &k, &mut a));
    assert_eq!(state(&a).tcp_state(), TcpState::LastAck);
    conn.next[1] += 1;
    let (f, iface) = frame(&mut conn, false, Variant::Data(0));
    assert!(taken::<A>(&f, iface, &k, &mut a));
    assert_eq!(state(&a).tcp_state(), TcpState::TimeWait);
    assert!(!state(&a).lean(Direction::Original));
    // The endpoint's SYN-ACK with options, in SYN_SENT: SYN_RECV, its window scale read as
    // the general path reads it; retransmitted (in SYN_RECV, ignored by the state machine)
    // or from the client (refused), the general path's.
    let windows = |st: &WorkerState, port: u16| {
        let c = A::conntrack(st);
        let (id, flow) = c.iter().find(|(_, flow)| flow.original.src_port == port).unwrap();
        (flow.state.tcp_state(), c.tcp_windows(id))
    };
    let mut opening = syn_sent::<A>(&t, &mut a, &mut b, 42_002);
    let (f, iface) = frame(&mut opening, true, Variant::Flags(5));
    assert!(taken::<A>(&f, iface, &k, &mut a));
    run(SEC, &f, iface, &t, &mut b);
    assert_eq!(windows(&a, 42_002), windows(&b, 42_002));
    assert_eq!(windows(&a, 42_002).0, TcpState::SynRecv);
    assert!(!taken::<A>(&f, iface, &k, &mut a));
    let (f, iface) = frame(&mut opening, false, Variant::Flags(6));
    assert!(!taken::<A>(&f, iface, &k, &mut a));
    // Without the option (ECE set), the reply direction announces no scale.
    let mut plain = syn_sent::<A>(&t, &mut a, &mut b, 42_003);
    let (f, iface) = frame(&mut plain, true, Variant::Flags(6));
    assert!(taken::<A>(&f, iface, &k, &mut a));
    run(SEC, &f, iface, &t, &mut b);
    assert_eq!(windows(&a, 42_003), windows(&b, 42_003));
    assert_ne!(windows(&a, 42_002).1.flags, windows(&a, 42_003).1.flags, "the Window Scale option read");
    // A RST before any reply: the general path's, which removes the flow.
    let mut fresh = syn_sent::<A>(&t, &mut a, &mut b, 42_001);
    let (f, iface) = frame(&mut fresh, false, Variant::Flags(1));
    assert!(!taken::<A>(&f, iface, &k, &mut a));
    let before = A::conntrack(&a).len();
    run(SEC, &f, iface, &t, &mut a);
    assert_eq!(A::conntrack(&a).len(), before - 1);
    // Not while the worker holds a flow the SYN proxy opened: the endpoint's ACK of a FIN.
    let (mut a, mut b) = (lean_state(), lean_state());
    let mut conn = open::<A>(&t, &mut a, &mut b, 1)[0];
    open_proxied::<A>(&t, &mut a, &mut b, 1);
    let k = lean::BurstConstants::new(SEC, &t, &mut a);
    let (f, iface) = frame(&mut conn, false, Variant::Flags(0));
    run(SEC, &f, iface, &t, &mut a);
    conn.next[0] += 1;
    let (f, iface) = frame(&mut conn, true, Variant::Data(0));
    assert!(!taken::<A>(&f, iface, &k, &mut a));
}

/// An endpoint's SYN-ACK on an open flow that acknowledges the client's SYN the state
/// machine ignored (and recorded) restarts the flow as that new connection
/// (`track_ignored_tcp`, Linux's resynchronisation): the general path's, the same in a burst
/// as frame by frame (the lean path takes a SYN-ACK in SYN_SENT only).
fn a_syn_ack_that_restarts_a_flow_is_the_general_paths_of<A: Fam>() {
    let t = A::table(&A::ENDPOINTS);
    let (mut a, mut b) = (lean_state(), lean_state());
    let mut conn = open::<A>(&t, &mut a, &mut b, 1)[0];
    assert!(conn.tcp);
    let syn = frame(&mut conn, false, Variant::Flags(2));
    let syn_ack = frame(&mut conn, true, Variant::Flags(7));
    agree::<A>(SEC, &[syn, syn_ack], &t, &mut a, &mut b).unwrap();
    let (_, flow) = A::conntrack(&a).iter().find(|(_, f)| f.original.src_port == conn.client_port).unwrap();
    assert_eq!(flow.state.tcp_state(), TcpState::SynRecv);
}

#[test]
fn a_syn_ack_that_restarts_a_flow_is_the_general_paths() {
    a_syn_ack_that_restarts_a_flow_is_the_general_paths_of::<Ipv4Addr>();
    a_syn_ack_that_restarts_a_flow_is_the_general_paths_of::<Ipv6Addr>();
}

#[test]
fn handshake_and_close_acks_take_the_lean_path() {
    handshake_and_close_acks_take_the_lean_path_of::<Ipv4Addr>();
}

#[test]
fn ipv6_handshake_and_close_acks_take_the_lean_path() {
    handshake_and_close_acks_take_the_lean_path_of::<Ipv6Addr>();
}

/// Bursts of two chunks and three frames whose frames the lean path takes, but one at
/// position `p`, for every `p`: a frame of a flow not tracked (turned down at stage 2), a
/// general frame (TTL / Hop Limit 1), or a lean frame `lean::forward` turns down at stage 4
/// (beyond the window, acknowledging unsent data, on the wrong link) — in a chunk
/// otherwise all lean and in one with a general frame beside it. Each burst against
/// [`process`] frame by frame ([`agree`]).
fn one_other_frame_at_every_position_of<A: Fam>() {
    let t = A::table(&A::ENDPOINTS);
    let (mut a, mut b) = (lean_state(), lean_state());
    let mut conns = open::<A>(&t, &mut a, &mut b, 3);
    // A connection neither worker tracks: its ACKs are lean to stage 1, new at stage 2.
    let mut untracked = Conn { client_port: 9, ..conns[0] };
    let (n, m) = (2 * PREFETCH_WINDOW + 3, conns.len());
    let odd = [Variant::Ttl1, Variant::FarSeq, Variant::AckAhead, Variant::WrongLink, Variant::Data(0)];
    for (round, variant) in odd.into_iter().enumerate() {
        for p in 0..n {
            let input: Vec<(Vec<u8>, u8)> = (0..n)
                .map(|k| match k {
                    _ if k == p && round == odd.len() - 1 => frame(&mut untracked, false, variant),
                    _ if k == p => frame(&mut conns[k % m], k % 3 == 0, variant),
                    // A second general frame, in the last chunk only.
                    _ if k == n - 1 && p < n - 1 => frame(&mut conns[k % m], false, Variant::Ttl1),
                    _ => frame(&mut conns[k % m], k % 3 == 0, Variant::Data(k as u8)),
                })
                .collect();
            agree::<A>(SEC, &input, &t, &mut a, &mut b).unwrap_or_else(|e| panic!("{variant:?} at {p}: {e}"));
        }
    }
}

#[test]
fn one_other_frame_at_every_position() {
    one_other_frame_at_every_position_of::<Ipv4Addr>();
}

#[test]
fn one_other_ipv6_frame_at_every_position() {
    one_other_frame_at_every_position_of::<Ipv6Addr>();
}

/// Replies routed to the router, with an ARP reply from the router between them that moves
/// it to a new MAC: the lean path reads the router's entry once a burst and again after a
/// frame that taught a mapping, so the burst's output is the general path's, frame by frame.
#[test]
fn the_routers_new_mac_mid_burst_is_followed() {
    const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 254);
    const ROUTER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xfe, 1]);
    const NEW_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xfe, 2]);
    let client = (Ipv4Addr::new(192, 0, 2, 7), 41_000);
    let mut config = Config::embedded_default();
    config.router = Some(crate::config::Router { address: ROUTER, interface: usize::from(FRONT) });
    let host = Arc::new(Host::new(&config, &[GW_FRONT_MAC, GW_BACK_MAC]));
    // Each worker its own neighbour table: the burst's ARP reply must not teach the other.
    let worker = || {
        let shared = Shared::new(64, 1024);
        for last in [11u8, 12, 13] {
            shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, last), backend_mac(last), 0);
        }
        shared.neighbours.learn(ROUTER, ROUTER_MAC, 0);
        WorkerState::new(0, 1, Arc::clone(&host), &shared, 1024, 7)
    };
    let (mut a, mut b) = (worker(), worker());
    let t = table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]);
    let from_router = L2 { src: ROUTER_MAC, dst: GW_FRONT_MAC };
    let query = frames::udp(from_router, client, (VIP, 80), b"q", 64);
    let out = both(SEC, &query, FRONT, &t, &mut a, &mut b);
    let (backend, snat_port) = (backend_of(&out), u16::from_be_bytes([out[34], out[35]]));
    let reply = frames::udp(
        L2 { src: backend_mac(backend.octets()[3]), ..BACK_L2 },
        (backend, 8080),
        (SNAT, snat_port),
        b"r",
        64,
    );
    let routed = both(SEC, &reply, BACK, &t, &mut a, &mut b);
    assert_eq!(&routed[..6], &ROUTER_MAC.0, "the reply goes to the router");
    both(SEC, &query, FRONT, &t, &mut a, &mut b);
    let arp = frames::arp(
        L2 { src: NEW_MAC, dst: GW_FRONT_MAC },
        ArpOperation::Reply,
        NEW_MAC,
        ROUTER,
        GW_FRONT_MAC,
        Ipv4Addr::new(198, 51, 100, 1),
    );
    let input = [(&reply, BACK), (&arp, FRONT), (&reply, BACK)];
    let (mut bufs, metas) = burst_of(&input);
    let mut verdicts = vec![Verdict::Consumed; input.len()];
    process_burst(2 * SEC, &mut bufs, &metas, &t, &mut a, &mut verdicts);
    let forwarded = a.counters.forwarded_reply;
    for (k, (f, iface)) in input.iter().enumerate() {
        let (v, out) = run(2 * SEC, f, *iface, &t, &mut b);
        assert_eq!(verdicts[k], v, "frame {k}");
        if let Verdict::Transmit { len, .. } = v {
            assert_eq!(&bufs[k][..len], &out[..], "frame {k}");
        }
    }
    assert_eq!(a.counters, b.counters);
    assert_eq!(forwarded, 3, "both replies of the burst were forwarded");
    assert_eq!((&bufs[0][..6], &bufs[2][..6]), (&ROUTER_MAC.0[..], &NEW_MAC.0[..]));
}

/// The IPv6 version of [`the_routers_new_mac_mid_burst_is_followed`]: replies routed to the
/// IPv6 default router, with a Neighbor Advertisement (Override) from the router between
/// them that moves it to a new MAC.
#[test]
fn the_ipv6_routers_new_mac_mid_burst_is_followed() {
    const ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0xfe);
    const ROUTER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xfe, 1]);
    const NEW_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xfe, 2]);
    let client = (Ipv6Addr::new(0x2001, 0xdb8, 0x300, 0, 0, 0, 0, 7), 41_000);
    // An IPv4 router too, at another MAC: IPv6 replies must not go there.
    const ROUTER4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 254);
    let mut config = Config::embedded_default();
    config.router = Some(crate::config::Router { address: ROUTER4, interface: usize::from(FRONT) });
    config.router6 = Some(crate::config::Router6 { address: ROUTER, interface: usize::from(FRONT) });
    let host = Arc::new(Host::new(&config, &[GW_FRONT_MAC, GW_BACK_MAC]));
    // Each worker its own neighbour table: the burst's advertisement must not teach the other.
    let worker = || {
        let shared = Shared::new(64, 1024);
        for last in <Ipv6Addr as Fam>::ENDPOINTS {
            shared.neighbours.learn(backend6(u16::from(last)), backend_mac(last), 0);
        }
        shared.neighbours.learn(ROUTER, ROUTER_MAC, 0);
        shared.neighbours.learn(ROUTER4, MacAddr([0x02, 0, 0, 0, 0xfe, 4]), 0);
        WorkerState::new(0, 1, Arc::clone(&host), &shared, 1024, 7)
    };
    let (mut a, mut b) = (worker(), worker());
    let t = <Ipv6Addr as Fam>::table(&<Ipv6Addr as Fam>::ENDPOINTS);
    let query = frames::udp6(L2 { src: ROUTER_MAC, dst: GW_FRONT_MAC }, client, (VIP6, 80), b"q", 64);
    let out = both(SEC, &query, FRONT, &t, &mut a, &mut b);
    let (backend, snat_port) = (<Ipv6Addr as Fam>::dst_of(&out), src_port::<Ipv6Addr>(&out));
    let reply = frames::udp6(BACK_L2, (backend, 8080), (SNAT6, snat_port), b"r", 64);
    let routed = both(SEC, &reply, BACK, &t, &mut a, &mut b);
    assert_eq!(&routed[..6], &ROUTER_MAC.0, "the reply goes to the router");
    both(SEC, &query, FRONT, &t, &mut a, &mut b);
    let advert = frames::ndp(
        L2 { src: NEW_MAC, dst: GW_FRONT_MAC },
        ROUTER,
        GW_FRONT6,
        Icmpv6Type::NeighborAdvert,
        crate::wire::ndp::FLAG_OVERRIDE,
        ROUTER,
        Some(NEW_MAC),
    );
    let input = [(reply.clone(), BACK), (advert, FRONT), (reply.clone(), BACK)];
    let bufs = agree::<Ipv6Addr>(2 * SEC, &input, &t, &mut a, &mut b).unwrap();
    assert_eq!(a.counters.forwarded_reply, 3, "both replies of the burst were forwarded");
    assert_eq!((&bufs[0][..6], &bufs[2][..6]), (&ROUTER_MAC.0[..], &NEW_MAC.0[..]));
    // And the lean path itself forwards such a reply (to the router's new MAC).
    let k = lean::BurstConstants::new(2 * SEC, &t, &mut a);
    assert!(taken::<Ipv6Addr>(&reply, BACK, &k, &mut a), "a reply routed to the router takes the lean path");
}

/// `frame` without its 802.1Q tag, if it has one.
fn untagged(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    if f[12..14] == [0x81, 0x00] {
        f.drain(12..16);
    }
    f
}

/// IPv6 flows over VLAN interfaces: the endpoints' subnet on the back port's VLAN 200,
/// one client on the front port's VLAN 100 and one untagged. The tagged client's frames
/// keep their header's length both ways and take the lean path (its header written with
/// the egress tag); the untagged client's gain or lose a tag, which moves the packet: the
/// general path's. The burst agrees with the general path frame by frame.
#[test]
fn ipv6_over_vlan_interfaces_agrees_with_the_general_path() {
    let text = crate::config::EMBEDDED_DEFAULT
        .replace("addresses = [\"10.70.0.1/24\", \"fd00:70::1/64\"]", "addresses = [\"10.70.0.1/24\"]")
        + "
[[interfaces]]
name = \"tg-front\"
vlan = 100
addresses = [\"2001:db8:200::1/64\"]

[[interfaces]]
name = \"tg-back\"
vlan = 200
addresses = [\"fd00:70::1/64\"]
device = \"net_af_packet1,iface=tg-back\"
";
    let config = Config::from_toml(&text).expect("VLAN configuration");
    let host = Arc::new(Host::new(&config, &[GW_FRONT_MAC, GW_BACK_MAC]));
    let worker = || {
        let shared = Shared::new(64, 1024);
        shared.neighbours.learn(backend6(0x11), backend_mac(0x11), 0);
        WorkerState::new(0, 1, Arc::clone(&host), &shared, 1024, 7)
    };
    let (mut a, mut b) = (worker(), worker());
    let t = <Ipv6Addr as Fam>::table(&[0x11]);
    let tagged_client = (Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 0x10), 41_000);
    let plain_client = (<Ipv6Addr as Fam>::CLIENT, 41_001);
    let back = |f: Vec<u8>| frames::tagged(&f, 0x8100, 200);
    let mut flows = Vec::new();
    for (client, tagged) in [(tagged_client, true), (plain_client, false)] {
        let front = move |f: Vec<u8>| if tagged { frames::tagged(&f, 0x8100, 100) } else { f };
        let syn = front(frames::tcp6(to_gw(), client, (VIP6, 80), TcpFlags::SYN, 1000, 0, b"", 64));
        let out = untagged(&both(0, &syn, FRONT, &t, &mut a, &mut b));
        let (endpoint, snat_port) = (<Ipv6Addr as Fam>::dst_of(&out), src_port::<Ipv6Addr>(&out));
        let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
        let from_endpoint = (endpoint, 8080);
        let to_snat = (SNAT6, snat_port);
        both(
            0,
            &back(frames::tcp6(BACK_L2, from_endpoint, to_snat, syn_ack, 5000, 1001, b"", 64)),
            BACK,
            &t,
            &mut a,
            &mut b,
        );
        both(
            0,
            &front(frames::tcp6(to_gw(), client, (VIP6, 80), TcpFlags::ACK, 1001, 5001, b"", 64)),
            FRONT,
            &t,
            &mut a,
            &mut b,
        );
        // Data both ways: (frame, arrival port) at the numbers `n` of each side.
        let data = move |n: u32, len: u32| {
            let ack = TcpFlags::ACK;
            let payload = vec![7u8; len as usize];
            [
                (front(frames::tcp6(to_gw(), client, (VIP6, 80), ack, 1001 + n, 5001 + n, &payload, 64)), FRONT),
                (
                    back(frames::tcp6(BACK_L2, from_endpoint, to_snat, ack, 5001 + n, 1001 + n + len, &payload, 64)),
                    BACK,
                ),
            ]
        };
        flows.push((tagged, data));
    }
    let input: Vec<(Vec<u8>, u8)> = flows.iter().flat_map(|(_, data)| data(0, 10)).collect();
    agree::<Ipv6Addr>(SEC, &input, &t, &mut a, &mut b).unwrap();
    let k = lean::BurstConstants::new(SEC, &t, &mut a);
    for (tagged, data) in &flows {
        for (f, iface) in data(10, 5) {
            assert_eq!(taken::<Ipv6Addr>(&f, iface, &k, &mut a), *tagged, "tagged: {tagged}");
        }
    }
}
