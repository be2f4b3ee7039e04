//! Golden tests of what a router must not forward (RFC 1812, RFC 7126) and Linux conntrack
//! calls INVALID: martian sources, source-routed IPv4, TCP flag combinations no stack
//! sends, ARP with an opcode RFC 826 does not define, TCP and UDP with a wrong checksum
//! where the gateway checks it. Each is a counted drop that creates no state.

use super::*;
use crate::wire::{ArpOperation, Ipv4Packet};

#[test]
fn new_flows_from_martian_sources_are_dropped() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    for src in ["255.255.255.255", "127.0.0.1", "0.1.2.3", "224.0.0.9", "240.0.0.1", "10.70.0.1", "198.51.100.1"] {
        let syn = frames::tcp(to_gw(), (ip(src), 40000), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
        assert_eq!(run(0, &syn, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MartianSource), "{src}");
        let dgram = frames::udp(to_gw(), (ip(src), 40000), (VIP, 7), b"x", 64);
        assert_eq!(run(0, &dgram, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MartianSource), "{src}");
    }
    assert!(st.conntrack.is_empty());
    assert_eq!(st.counters.drops_of(DropReason::MartianSource), 14);
    // An ordinary client still gets through.
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    assert!(matches!(run(0, &syn, FRONT, &t, &mut st).0, Verdict::Transmit { iface: BACK, .. }));
}

/// The host's word on a new flow's client is kept for the next new flow from the same
/// client only (`flow::client_facts`): whatever comes before, the gateway's own address is
/// refused and an on-link client is learned from its SYN.
#[test]
fn each_new_flows_client_is_judged_as_itself() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let other_mac = MacAddr([0x02, 0, 0, 0, 0xc0, 0x02]);
    let sources = [
        (CLIENT.0, CLIENT_MAC),
        (ip("198.51.100.1"), CLIENT_MAC),
        (CLIENT.0, CLIENT_MAC),
        (ip("198.51.100.11"), other_mac),
    ];
    for (port, (src, mac)) in (40_000..).zip(sources.into_iter().chain(sources)) {
        let syn = frames::tcp(L2 { src: mac, dst: GW_FRONT_MAC }, (src, port), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
        let verdict = run(0, &syn, FRONT, &t, &mut st).0;
        if src == ip("198.51.100.1") {
            assert_eq!(verdict, Verdict::Drop(DropReason::MartianSource), "{src}:{port}");
        } else {
            assert!(matches!(verdict, Verdict::Transmit { iface: BACK, .. }), "{src}:{port}: {verdict:?}");
            assert_eq!(st.neighbours.lookup(src).map(|n| n.mac), Some(mac), "{src} learned");
        }
    }
    assert_eq!(st.counters.drops_of(DropReason::MartianSource), 2);
}

#[test]
fn source_routed_ipv4_is_dropped() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let plain = frames::udp(to_gw(), CLIENT, (VIP, 7), b"x", 64);
    for (kind, routed) in [(131u8, true), (137, true), (7, false), (148, false)] {
        // The same datagram with a 4-byte option (kind, length 4, two bytes) after the
        // fixed header: LSRR 131, SSRR 137, Record Route 7, Router Alert 148.
        let mut f = plain[..34].to_vec();
        f.extend_from_slice(&[kind, 4, 4, 0]);
        f.extend_from_slice(&plain[34..]);
        let mut ipv4 = Ipv4Packet::new_unchecked(&mut f[14..]);
        ipv4.set_header_len(24);
        ipv4.set_total_len((plain.len() - 14 + 4) as u16);
        ipv4.fill_checksum();
        let v = run(0, &f, FRONT, &t, &mut st).0;
        if routed {
            assert_eq!(v, Verdict::Drop(DropReason::SourceRouted), "option {kind}");
        } else {
            assert_ne!(v, Verdict::Drop(DropReason::SourceRouted), "option {kind}");
        }
    }
    assert_eq!(st.counters.drops_of(DropReason::SourceRouted), 2);
}

#[test]
fn arp_with_an_unknown_opcode_is_counted_and_teaches_nothing() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let stranger = ip("198.51.100.77");
    let f = frames::arp(
        L2 { src: CLIENT_MAC, dst: MacAddr::BROADCAST },
        ArpOperation::Unknown(8), // InARP request (RFC 2390): not ours to answer
        CLIENT_MAC,
        stranger,
        MacAddr([0; 6]),
        ip("198.51.100.1"),
    );
    assert_eq!(run(0, &f, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedArp));
    assert_eq!(st.neighbours.lookup(stranger), None, "the sender is not learned");
}

#[test]
fn a_full_neighbour_table_counts_who_it_did_not_learn() {
    let config = Config::embedded_default();
    let host = Arc::new(Host::new(&config, &[GW_FRONT_MAC, GW_BACK_MAC]));
    // The smallest table: 16 slots, filled with neighbours elsewhere.
    let shared = Shared::new(1, 1024);
    let mut filled = 0;
    while shared.neighbours.learn(Ipv4Addr::new(10, 70, 1, filled), backend_mac(filled), 0) {
        filled += 1;
    }
    assert_eq!(filled, 16);
    let mut st = WorkerState::new(0, 1, host, &shared, 1024, 7);
    let t = table(&["10.70.0.11"]);
    let sender = ip("198.51.100.77");
    let request = frames::arp(
        L2 { src: CLIENT_MAC, dst: MacAddr::BROADCAST },
        ArpOperation::Request,
        CLIENT_MAC,
        sender,
        MacAddr([0; 6]),
        ip("198.51.100.1"),
    );
    // The gateway's own address is still answered; the sender is counted, not learned.
    assert!(matches!(run(0, &request, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(st.neighbours.lookup(sender), None);
    assert_eq!((st.counters.arp_learned, st.counters.neighbours_not_learned), (0, 1));
}

#[test]
fn a_source_over_its_new_flow_rate_is_dropped_and_others_are_not() {
    let t = table(&["10.70.0.11"]);
    let mut st = state(0, 1);
    st.sources = crate::limiter::SourceLimiter::new(10, 3, 1);
    let syn = |src: Ipv4Addr, port: u16| frames::tcp(to_gw(), (src, port), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    let greedy = ip("198.51.100.20");
    let verdicts: Vec<bool> = (0..5)
        .map(|i| matches!(run(0, &syn(greedy, 40000 + i), FRONT, &t, &mut st).0, Verdict::Transmit { .. }))
        .collect();
    assert_eq!(verdicts, [true, true, true, false, false], "a burst of 3");
    assert_eq!(st.counters.drops_of(DropReason::NewFlowRateLimited), 2);
    assert!(matches!(run(0, &syn(ip("198.51.100.21"), 40000), FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    // 100 ms later the greedy source may open one more; its established flows never wait.
    assert!(matches!(run(SEC / 10, &syn(greedy, 40010), FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    let again = syn(greedy, 40000);
    assert!(matches!(run(SEC / 10, &again, FRONT, &t, &mut st).0, Verdict::Transmit { .. }), "a retransmitted SYN");
}

/// `frame` (an untagged IPv4 frame with a 20-byte header) with its TCP or UDP checksum
/// made wrong.
fn bad_l4_checksum(frame: &[u8], udp: bool) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[14 + 20 + if udp { 6 } else { 16 }] ^= 0x5a;
    f
}

/// Runs `process` on `input` with the driver's checksum flags `good` (the device verified
/// the L4 checksum) and `partial` (it holds only the pseudo-header's sum).
fn run_flagged(input: &[u8], good: bool, partial: bool, t: &Table, st: &mut WorkerState) -> Verdict {
    let mut buf = vec![0u8; 2048];
    buf[..input.len()].copy_from_slice(input);
    let meta = Meta { iface: FRONT, len: input.len(), l4_csum_good: good, l4_csum_partial: partial, ..Meta::default() };
    process(0, &mut buf, &meta, t, st)
}

#[test]
fn new_flows_with_a_bad_l4_checksum_are_dropped_unless_the_device_vouched() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    let dgram = frames::udp(to_gw(), (CLIENT.0, 40001), (VIP, 7), b"ping", 64);
    let pickup = frames::tcp(to_gw(), (CLIENT.0, 40002), (VIP, 80), TcpFlags::ACK, 1, 1, b"data", 64);
    for (what, f) in [
        ("SYN", bad_l4_checksum(&syn, false)),
        ("UDP", bad_l4_checksum(&dgram, true)),
        ("mid-stream ACK", bad_l4_checksum(&pickup, false)),
    ] {
        assert_eq!(run(0, &f, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::BadL4Checksum), "{what}");
    }
    assert!(st.conntrack.is_empty(), "a bad checksum creates no flow");
    assert_eq!(st.counters.drops_of(DropReason::BadL4Checksum), 3);
    // The device verified it (and would have said if it were bad), or left it partial:
    // not summed again.
    let syn_bad = bad_l4_checksum(&syn, false);
    assert!(matches!(run_flagged(&syn_bad, true, false, &t, &mut st), Verdict::Transmit { iface: BACK, .. }));
    let dgram_bad = bad_l4_checksum(&dgram, true);
    assert!(matches!(run_flagged(&dgram_bad, false, true, &t, &mut st), Verdict::Transmit { iface: BACK, .. }));
    // A UDP checksum of zero is "none" over IPv4 (RFC 768).
    let mut unsummed = frames::udp(to_gw(), (CLIENT.0, 40003), (VIP, 7), b"ping", 64);
    unsummed[14 + 20 + 6..14 + 20 + 8].fill(0);
    assert!(matches!(run(0, &unsummed, FRONT, &t, &mut st).0, Verdict::Transmit { iface: BACK, .. }));
    assert_eq!(st.counters.drops_of(DropReason::BadL4Checksum), 3);
}

#[test]
fn a_rst_with_a_bad_checksum_leaves_its_flow_and_data_is_left_to_the_receiver() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let backend = ip("10.70.0.11");
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let (_, out) = run(0, &syn, FRONT, &t, &mut st);
    let snat_port = TcpPacket::new_checked(&out[34..]).unwrap().src_port();
    let from_backend = L2 { src: backend_mac(11), dst: GW_BACK_MAC };
    let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    let syn_ack = frames::tcp(from_backend, (backend, 8080), (SNAT, snat_port), syn_ack, 5000, 1001, &[], 64);
    assert!(matches!(run(SEC, &syn_ack, BACK, &t, &mut st).0, Verdict::Transmit { iface: FRONT, .. }));
    let ack = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1001, 5001, &[], 64);
    assert!(matches!(run(SEC, &ack, FRONT, &t, &mut st).0, Verdict::Transmit { iface: BACK, .. }));

    // A RST at the very sequence number the endpoint expects, but with a wrong checksum:
    // the endpoint would discard it, so the flow must not end either.
    let reset = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::RST, 1001, 0, &[], 64);
    let v = run(2 * SEC, &bad_l4_checksum(&reset, false), FRONT, &t, &mut st).0;
    assert_eq!(v, Verdict::Drop(DropReason::BadL4Checksum));
    // Data of the flow is not summed on the gateway: forwarded, its checksum updated
    // incrementally and so still wrong for the endpoint to discard.
    let data = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1001, 5001, b"GET /", 64);
    let (v, out) = run(2 * SEC, &bad_l4_checksum(&data, false), FRONT, &t, &mut st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
    assert!(!TcpPacket::new_checked(&out[34..]).unwrap().verify_checksum(SNAT, backend));
    assert_eq!(st.conntrack.len(), 1);
    // The same RST with its checksum right ends the flow as before.
    let reset = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::RST, 1001, 0, &[], 64);
    assert!(matches!(run(3 * SEC, &reset, FRONT, &t, &mut st).0, Verdict::Transmit { iface: BACK, .. }));
}

#[test]
fn bad_l4_checksums_are_counted_and_passed_when_configured() {
    let mut config = Config::embedded_default();
    config.conntrack.drop_bad_l4_checksums = false;
    let host = Arc::new(Host::new(&config, &[GW_FRONT_MAC, GW_BACK_MAC]));
    let shared = Shared::new(64, 1024);
    for last in [11u8, 21] {
        shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, last), backend_mac(last), 0);
    }
    let mut st = WorkerState::new(0, 1, host, &shared, 1024, 7);
    let t = table(&["10.70.0.11"]);
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    assert!(matches!(run(0, &bad_l4_checksum(&syn, false), FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    let dgram = frames::udp(to_gw(), CLIENT, (VIP, 7), b"ping", 64);
    assert!(matches!(run(0, &bad_l4_checksum(&dgram, true), FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!((st.counters.bad_l4_checksums_passed, st.counters.drops_of(DropReason::BadL4Checksum)), (2, 0));
}
