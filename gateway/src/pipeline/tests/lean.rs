//! The lean established path (`super::lean`) against the general path: established TCP
//! connections (real handshakes, sequence numbers that advance as the segments carry data),
//! connections the SYN proxy opened (cookie handshakes, numbers translated) and assured UDP
//! flows, then random traffic on them — in-window data both ways, segments outside the
//! window or acknowledging unsent data, FIN, RST, SYN, TTL 1, a corrupted IPv4 header, the
//! wrong link, an expired neighbour, a neighbour's new MAC, a new table (the same endpoints,
//! or one fewer) — through [`process_burst`] (which takes the lean path where it may,
//! as each flow's lean bits say: `FlowState::lean`) on one worker and [`process`] frame by
//! frame on another. The two must agree on every verdict, every output byte, the counters
//! (per front door too), every flow and its TCP windows.

use proptest::prelude::*;

use super::*;
use crate::conntrack::synproxy::SynProxy;
use crate::conntrack::Direction;
use crate::pipeline::hint::LeanSegment;

const BACK_L2: L2 = L2 { src: MacAddr([0x02, 0, 0, 0, 0xb0, 0]), dst: GW_BACK_MAC };

/// One connection (or UDP flow) as both ends see it: the endpoint and SNAT port the
/// gateway chose, and each end's next sequence number.
#[derive(Clone, Copy, Debug)]
struct Conn {
    tcp: bool,
    client_port: u16,
    backend: Ipv4Addr,
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

/// Opens `n` TCP connections and `n` UDP flows on both workers through the general path
/// and brings them to ESTABLISHED and assured (UDP: a datagram each way and one more).
fn open(t: &Table, a: &mut WorkerState, b: &mut WorkerState, n: u16) -> Vec<Conn> {
    let mut conns = Vec::new();
    for i in 0..n {
        for tcp in [true, false] {
            let client = (CLIENT.0, 41_000 + i);
            let out = if tcp {
                both(0, &frames::tcp(to_gw(), client, (VIP, 80), TcpFlags::SYN, 1000, 0, b"", 64), FRONT, t, a, b)
            } else {
                both(0, &frames::udp(to_gw(), client, (VIP, 80), b"q", 64), FRONT, t, a, b)
            };
            let backend = backend_of(&out);
            let snat_port = u16::from_be_bytes([out[34], out[35]]);
            let back = L2 { src: backend_mac(backend.octets()[3]), ..BACK_L2 };
            let from_backend = (backend, 8080);
            if tcp {
                let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
                both(
                    0,
                    &frames::tcp(back, from_backend, (SNAT, snat_port), syn_ack, 5000, 1001, b"", 64),
                    BACK,
                    t,
                    a,
                    b,
                );
                both(0, &frames::tcp(to_gw(), client, (VIP, 80), TcpFlags::ACK, 1001, 5001, b"", 64), FRONT, t, a, b);
            } else {
                both(0, &frames::udp(back, from_backend, (SNAT, snat_port), b"r", 64), BACK, t, a, b);
                both(0, &frames::udp(to_gw(), client, (VIP, 80), b"q", 64), FRONT, t, a, b);
            }
            conns.push(Conn { tcp, client_port: client.1, backend, snat_port, next: [1001, 5001], delta: 0 });
        }
    }
    conns
}

/// Turns on both workers' SYN proxy (every SYN answered with a cookie) and opens `n` TCP
/// connections through it: SYN, cookie SYN-ACK, the client's ACK turned into the SYN to the
/// endpoint, the endpoint's SYN-ACK answered by the gateway. Their numbers are translated
/// from then on, which only the general path does.
fn open_proxied(t: &Table, a: &mut WorkerState, b: &mut WorkerState, n: u16) -> Vec<Conn> {
    for st in [&mut *a, &mut *b] {
        st.synproxy = SynProxy::new(true, 0, 64, 11);
    }
    let mut conns = Vec::new();
    for i in 0..n {
        let client = (CLIENT.0, 43_000 + i);
        let out = both(0, &frames::tcp(to_gw(), client, (VIP, 80), TcpFlags::SYN, 1000, 0, b"", 64), FRONT, t, a, b);
        let cookie = u32::from_be_bytes([out[38], out[39], out[40], out[41]]);
        let ack = frames::tcp(to_gw(), client, (VIP, 80), TcpFlags::ACK, 1001, cookie.wrapping_add(1), b"", 64);
        let out = both(0, &ack, FRONT, t, a, b);
        let backend = backend_of(&out);
        let snat_port = u16::from_be_bytes([out[34], out[35]]);
        let back = L2 { src: backend_mac(backend.octets()[3]), ..BACK_L2 };
        let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
        both(0, &frames::tcp(back, (backend, 8080), (SNAT, snat_port), syn_ack, 5000, 1001, b"", 64), BACK, t, a, b);
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
    /// FIN|ACK, RST, SYN at the current numbers.
    Flags(u8),
    /// TTL 1.
    Ttl1,
    /// A corrupted IPv4 header checksum.
    BadChecksum,
    /// Arrives on the other direction's link.
    WrongLink,
}

fn arb_variant() -> impl Strategy<Value = Variant> {
    prop_oneof![
        8 => any::<u8>().prop_map(Variant::Data),
        3 => any::<u8>().prop_map(Variant::Push),
        1 => Just(Variant::FarSeq),
        1 => Just(Variant::AckAhead),
        1 => (0u8..3).prop_map(Variant::Flags),
        1 => Just(Variant::Ttl1),
        1 => Just(Variant::BadChecksum),
        1 => Just(Variant::WrongLink),
    ]
}

/// The frame of `variant` on `conn` in `direction` (and its arrival port), advancing the
/// sender's sequence number for data.
fn frame(conn: &mut Conn, reply: bool, variant: Variant) -> (Vec<u8>, u8) {
    let d = usize::from(reply);
    let (src, dst, l2, mut iface) = if reply {
        let back = L2 { src: backend_mac(conn.backend.octets()[3]), ..BACK_L2 };
        ((conn.backend, 8080), (SNAT, conn.snat_port), back, BACK)
    } else {
        ((CLIENT.0, conn.client_port), (VIP, 80), to_gw(), FRONT)
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
            flags = TcpFlags([TcpFlags::FIN.0 | TcpFlags::ACK.0, TcpFlags::RST.0, TcpFlags::SYN.0][usize::from(f)]);
        }
        Variant::Ttl1 => ttl = 1,
        Variant::BadChecksum | Variant::WrongLink => {}
    }
    let mut f = if conn.tcp {
        frames::tcp(l2, src, dst, flags, seq, ack, &payload, ttl)
    } else {
        frames::udp(l2, src, dst, &payload, ttl)
    };
    match variant {
        Variant::BadChecksum => f[24] ^= 0x11,
        Variant::WrongLink => iface = if reply { FRONT } else { BACK },
        Variant::Data(_) | Variant::Push(_) => conn.next[d] = seq.wrapping_add(payload.len() as u32),
        _ => {}
    }
    (f, iface)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_lean_path_agrees_with_the_general_path(
        steps in prop::collection::vec(
            (prop::collection::vec((any::<prop::sample::Index>(), any::<bool>(), arb_variant()), 0..40), arb_event()),
            1..8,
        ),
        pause_s in 0u64..40,
    ) {
        let mut t = table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]);
        let (mut a, mut b) = (state(0, 1), state(0, 1));
        let mut conns = open(&t, &mut a, &mut b, 4);
        conns.extend(open_proxied(&t, &mut a, &mut b, 2));
        for (n, (burst, event)) in steps.iter().enumerate() {
            // Bursts a few seconds apart; the neighbours were learned at 0 and go stale at 60 s.
            let now = (n as u64 * pause_s + 1) * SEC;
            match *event {
                Event::Nothing => {}
                Event::SameTable => t = table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]),
                Event::EndpointGone => t = table(&["10.70.0.11", "10.70.0.12"]),
                Event::NewMac(m) => {
                    for st in [&a, &b] {
                        st.neighbours.learn(Ipv4Addr::new(10, 70, 0, 11), MacAddr([0x02, 0, 0, 0, 0x7e, m]), now);
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
            let (mut bufs, metas) = burst_of(&input);
            let mut verdicts = vec![Verdict::Consumed; input.len()];
            let rx_before = a.counters.rx_frames;
            process_burst(now, &mut bufs, &metas, &t, &mut a, &mut verdicts);
            prop_assert_eq!(a.counters.rx_frames - rx_before, input.len() as u64);
            // A burst numbers its table at its start (`lean::BurstConstants::new`), `process`
            // when a frame first reads it: a burst of none, or of frames dropped before
            // (a bad checksum), numbers a table the frame-by-frame side never does. The
            // numbers are the worker's own (a flow's `table_epoch` says only "validated
            // against this table"), so the frame-by-frame side numbers it here too.
            b.table_epoch(&t);
            for (k, (f, iface)) in input.iter().enumerate() {
                let (v, out) = run(now, f, *iface, &t, &mut b);
                prop_assert_eq!(verdicts[k], v, "burst {} frame {}", n, k);
                if let Verdict::Transmit { len, .. } = v {
                    prop_assert_eq!(&bufs[k][..len], &out[..], "burst {} frame {}", n, k);
                }
            }
            prop_assert_eq!(&a.counters, &b.counters);
            prop_assert_eq!(a.frontends.as_slice(), b.frontends.as_slice());
            prop_assert_eq!(a.conntrack.iter().collect::<Vec<_>>(), b.conntrack.iter().collect::<Vec<_>>());
            for (id, _) in a.conntrack.iter() {
                prop_assert_eq!(a.conntrack.tcp_windows(id), b.conntrack.tcp_windows(id));
            }
        }
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
            prop_assert_eq!(plain_seg, checked_seg);
        } else {
            prop_assert_eq!(plain_seg, LeanSegment::NONE);
        }
    }
}

/// Established TCP and assured UDP frames are forwarded by the lean path itself (not handed
/// to the general path), and the ones it must not take are not.
#[test]
fn established_frames_take_the_lean_path() {
    let t = table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]);
    let (mut a, mut b) = (state(0, 1), state(0, 1));
    let mut conns = open(&t, &mut a, &mut b, 2);
    let constants = crate::pipeline::lean::BurstConstants::new(SEC, &t, &mut a);
    let mut taken = |conn: &mut Conn, reply: bool, variant: Variant| {
        let (f, iface) = frame(conn, reply, variant);
        let mut buf = [0u8; 256];
        buf[..f.len()].copy_from_slice(&f);
        let meta = Meta { iface, len: f.len(), ..Meta::default() };
        // Stage 1 and 2 of a burst for this one frame.
        // A frame for another port's MAC (the wrong link) fails here: no lean path either.
        let Ok((rx, _)) = crate::pipeline::link::receive(&buf, &meta, &a.host) else { return false };
        let mut seg = LeanSegment::NONE;
        let Some((key, _)) = crate::pipeline::ipv4::flow_key(&buf, &rx, &mut seg, &mut false) else { return false };
        if !seg.is_lean() {
            return false;
        }
        let Some((id, direction)) = a.conntrack.lookup(&key) else { return false };
        let lean = crate::pipeline::hint::LeanFrame { key, hash: 0, id, direction, seg };
        crate::pipeline::lean::forward(&mut buf, &lean, &constants, &mut a).is_some()
    };
    for conn in &mut conns {
        assert!(taken(conn, false, Variant::Data(10)), "{conn:?}");
        assert!(taken(conn, true, Variant::Push(40)), "{conn:?}");
        assert!(!taken(conn, true, Variant::WrongLink), "{conn:?}");
        assert!(!taken(conn, false, Variant::Ttl1), "{conn:?}");
        assert!(!taken(conn, false, Variant::BadChecksum), "{conn:?}");
        if conn.tcp {
            assert!(!taken(conn, false, Variant::FarSeq), "{conn:?}");
            assert!(!taken(conn, false, Variant::Flags(0)), "{conn:?}");
        }
    }
    assert_eq!(Direction::Original as u8, 0);
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
