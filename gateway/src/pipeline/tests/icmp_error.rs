//! Golden packet tests of ICMP errors about tracked flows: translated (outer header and
//! quote) and forwarded to the flow's other end, with every checksum as a fresh computation
//! would give it; errors about nothing tracked are counted drops.

use super::*;

const ECHO: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 70, 0, 21), 7007);
/// A router between the gateway and the endpoints.
const BACK_ROUTER: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 254);
const BACK_ROUTER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xee, 0x01]);
/// A router between the clients and the gateway.
const FRONT_ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const FRONT_ROUTER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xee, 0x02]);

fn to_client() -> L2 {
    L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }
}

/// Sends `input` and returns the frame the gateway forwarded.
pub(super) fn forwarded(now: u64, input: &[u8], iface: u8, t: &Table, st: &mut WorkerState) -> Vec<u8> {
    let (v, out) = run(now, input, iface, t, st);
    assert!(matches!(v, Verdict::Transmit { .. }), "{v:?}");
    out
}

#[test]
fn fragmentation_needed_from_the_endpoint_side_reaches_the_client() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let payload = [0x5au8; 1400];
    let q = frames::udp(to_gw(), CLIENT, (VIP, 7), &payload, 64);
    let sent = forwarded(0, &q, FRONT, &t, &mut st);
    assert_eq!(backend_of(&sent), ECHO.0);
    // A router towards the endpoint cannot forward 1428 bytes with DF set: RFC 1191 § 4,
    // next-hop MTU 1400, quoting the IP header and the first 8 bytes (RFC 792).
    let err = frames::icmp_error(
        L2 { src: BACK_ROUTER_MAC, dst: GW_BACK_MAC },
        BACK_ROUTER,
        SNAT,
        Icmpv4Type::DstUnreachable,
        4,
        1400,
        &sent[14..14 + 28],
        64,
    );
    // To the client: from the VIP, quoting its own datagram as the gateway forwarded it (the
    // TTL the gateway decremented stays), the MTU unchanged — full NAT changes no header size.
    let quote = frames::udp(to_gw(), CLIENT, (VIP, 7), &payload, 63);
    let want = frames::icmp_error(to_client(), VIP, CLIENT.0, Icmpv4Type::DstUnreachable, 4, 1400, &quote[14..42], 63);
    assert_eq!(run(SEC, &err, BACK, &t, &mut st), (tx(FRONT, &want), want));
    assert_eq!(st.counters.icmp_errors_translated, 1);
}

#[test]
fn a_whole_quoted_tcp_segment_keeps_its_checksum_right() {
    // RFC 1812 routers quote as much as fits in 576 bytes: here the whole segment, TCP
    // checksum included, which must be translated too.
    let (t, mut st) = (table(&["10.70.0.12"]), state(0, 1));
    let data = b"GET / HTTP/1.1\r\n\r\n";
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1000, 2000, data, 64);
    let sent = forwarded(0, &syn, FRONT, &t, &mut st);
    let err = frames::icmp_error(
        L2 { src: BACK_ROUTER_MAC, dst: GW_BACK_MAC },
        BACK_ROUTER,
        SNAT,
        Icmpv4Type::DstUnreachable,
        4,
        576,
        &sent[14..],
        64,
    );
    let quote = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1000, 2000, data, 63);
    let want = frames::icmp_error(to_client(), VIP, CLIENT.0, Icmpv4Type::DstUnreachable, 4, 576, &quote[14..], 63);
    let (v, out) = run(SEC, &err, BACK, &t, &mut st);
    assert_eq!((v, &out), (tx(FRONT, &want), &want));
    let icmp = Icmpv4Packet::new_checked(&out[34..]).unwrap();
    let quoted = Ipv4Packet::new_checked(icmp.data()).unwrap();
    assert!(TcpPacket::new_checked(quoted.payload()).unwrap().verify_checksum(CLIENT.0, VIP));
}

#[test]
fn time_exceeded_from_the_client_side_reaches_the_endpoint() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (VIP, 7), b"ping", 64);
    forwarded(0, &q, FRONT, &t, &mut st);
    let r = frames::udp(L2 { src: backend_mac(21), dst: GW_BACK_MAC }, ECHO, (SNAT, 1024), b"echo:ping", 64);
    let reply = forwarded(SEC, &r, BACK, &t, &mut st);
    // A router on the client's side lets the reply's TTL run out (traceroute-style).
    let err = frames::icmp_error(
        L2 { src: FRONT_ROUTER_MAC, dst: GW_FRONT_MAC },
        FRONT_ROUTER,
        VIP,
        Icmpv4Type::TimeExceeded,
        0,
        0,
        &reply[14..14 + 28],
        250,
    );
    // To the endpoint: from the SNAT address, quoting the reply as the endpoint sent it.
    let quote = frames::udp(L2 { src: backend_mac(21), dst: GW_BACK_MAC }, ECHO, (SNAT, 1024), b"echo:ping", 63);
    let want = frames::icmp_error(
        L2 { src: GW_BACK_MAC, dst: backend_mac(21) },
        SNAT,
        ECHO.0,
        Icmpv4Type::TimeExceeded,
        0,
        0,
        &quote[14..42],
        249,
    );
    assert_eq!(run(2 * SEC, &err, FRONT, &t, &mut st), (tx(BACK, &want), want));
}

#[test]
fn port_unreachable_from_the_endpoint_itself_reaches_the_client() {
    // The endpoint has no UDP listener on its port: its kernel answers port unreachable, which
    // the client must see as coming from the VIP (a UDP socket then reports ECONNREFUSED).
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (VIP, 7), b"anyone?", 64);
    let sent = forwarded(0, &q, FRONT, &t, &mut st);
    let err = frames::icmp_error(
        L2 { src: backend_mac(21), dst: GW_BACK_MAC },
        ECHO.0,
        SNAT,
        Icmpv4Type::DstUnreachable,
        3,
        0,
        &sent[14..],
        64,
    );
    let quote = frames::udp(to_gw(), CLIENT, (VIP, 7), b"anyone?", 63);
    let want = frames::icmp_error(to_client(), VIP, CLIENT.0, Icmpv4Type::DstUnreachable, 3, 0, &quote[14..], 63);
    assert_eq!(run(SEC, &err, BACK, &t, &mut st), (tx(FRONT, &want), want));
    // An error whose own TTL runs out here is not forwarded (and, being an error, not answered).
    let mut last_hop = err.clone();
    {
        let mut ip4 = Ipv4Packet::new_unchecked(&mut last_hop[14..]);
        ip4.set_hop_limit(1);
        ip4.fill_checksum();
    }
    assert_eq!(run(SEC, &last_hop, BACK, &t, &mut st).0, Verdict::Drop(DropReason::TtlExceeded));
}

#[test]
fn errors_about_nothing_tracked_are_dropped() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (VIP, 7), b"ping", 64);
    let sent = forwarded(0, &q, FRONT, &t, &mut st);
    let from_back = L2 { src: BACK_ROUTER_MAC, dst: GW_BACK_MAC };
    let error = |quote: &[u8], dst: Ipv4Addr| {
        frames::icmp_error(from_back, BACK_ROUTER, dst, Icmpv4Type::DstUnreachable, 1, 0, quote, 64)
    };
    // A SNAT port no flow uses.
    let stray = frames::udp(L2 { src: GW_BACK_MAC, dst: backend_mac(21) }, (SNAT, 5555), ECHO, b"ping", 63);
    let mut cases = vec![
        ("untracked quote", error(&stray[14..42], SNAT), DropReason::IcmpErrorUntracked),
        ("not sent to the quoted sender", error(&sent[14..42], ip("10.70.0.2")), DropReason::IcmpErrorUntracked),
        ("quote shorter than an IPv4 header", error(&sent[14..30], SNAT), DropReason::MalformedL4),
    ];
    // A quoted later fragment carries no ports.
    let mut frag = sent[14..42].to_vec();
    {
        let mut p = Ipv4Packet::new_unchecked(&mut frag[..]);
        p.set_frag_offset(1480);
        p.fill_checksum();
    }
    cases.push(("quoted later fragment", error(&frag, SNAT), DropReason::IcmpErrorUntracked));
    let mut bad_sum = error(&sent[14..42], SNAT);
    bad_sum[34 + 2] ^= 0xff;
    cases.push(("ICMP checksum", bad_sum, DropReason::BadIcmpChecksum));
    for (what, frame, reason) in cases {
        assert_eq!(run(SEC, &frame, BACK, &t, &mut st).0, Verdict::Drop(reason), "{what}");
    }
    // Once the flow has expired, its errors are untracked too.
    let err = error(&sent[14..42], SNAT);
    assert_eq!(run(31 * SEC, &err, BACK, &t, &mut st).0, Verdict::Drop(DropReason::IcmpErrorUntracked));
    assert_eq!(st.counters.drops_of(DropReason::IcmpErrorUntracked), 4);
    assert_eq!(st.counters.icmp_errors_translated, 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]
    /// No corruption of an ICMP error about a live flow, of a fragment sequence or of an SCTP
    /// packet makes `process` panic, whatever is left of the frame.
    #[test]
    fn corrupted_errors_fragments_and_sctp_never_panic(
        flips in proptest::collection::vec((0usize..1600, proptest::prelude::any::<u8>()), 0..6),
        cut in 0usize..1600,
        kind in 0u8..4,
    ) {
        let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
        let q = frames::udp(to_gw(), CLIENT, (VIP, 7), &[7; 40], 64);
        let sent = forwarded(0, &q, FRONT, &t, &mut st);
        let from_back = L2 { src: BACK_ROUTER_MAC, dst: GW_BACK_MAC };
        let inputs: Vec<(u8, Vec<u8>)> = match kind {
            0 => vec![(BACK, frames::icmp_error(from_back, BACK_ROUTER, SNAT, Icmpv4Type::DstUnreachable, 4, 1400, &sent[14..], 64))],
            1 => frames::ipv4_fragments(&frames::udp(to_gw(), CLIENT, (VIP, 7), &[9; 3000], 64), 5, 1480)
                .into_iter()
                .map(|f| (FRONT, f))
                .collect(),
            2 => vec![(FRONT, frames::sctp(to_gw(), CLIENT, (VIP, 80), 0, &frames::sctp_init_chunk(1), 64))],
            _ => vec![(FRONT, frames::icmp_error(to_gw(), CLIENT.0, VIP, Icmpv4Type::TimeExceeded, 0, 0, &sent[14..], 64))],
        };
        for (i, (iface, mut frame)) in inputs.into_iter().enumerate() {
            if i == 0 {
                for &(at, x) in &flips {
                    let n = frame.len();
                    frame[at % n] ^= x;
                }
                frame.truncate(cut.max(14));
            }
            let mut buf = vec![0u8; frame.len().max(MIN_BUFFER)];
            buf[..frame.len()].copy_from_slice(&frame);
            let meta = Meta { iface, len: frame.len(), l4_csum_partial: false, ..Meta::default() };
            let _ = process(SEC, &mut buf, &meta, &t, &mut st);
        }
    }
}
