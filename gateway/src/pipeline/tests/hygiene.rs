//! Golden tests of what a router must not forward (RFC 1812, RFC 7126) and Linux conntrack
//! calls INVALID: martian sources, source-routed IPv4, TCP flag combinations no stack
//! sends, ARP with an opcode RFC 826 does not define. Each is a counted drop that creates
//! no state.

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
