//! Golden packet tests of IPv4 fragments: a datagram's first fragment goes through its flow,
//! the later ones follow it; what has no first fragment, or outlived the fragment table's
//! 30 s, is dropped under a reason.

use super::*;
use crate::fragments::DEFAULT_TIMEOUT_NS;

const ECHO: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 70, 0, 21), 7007);
const IDENT: u16 = 0x4d2;

fn to_echo() -> L2 {
    L2 { src: GW_BACK_MAC, dst: backend_mac(21) }
}

/// 3000 bytes of UDP data: a 3008-byte datagram, fragmented at a 1500-byte MTU into
/// 1480 + 1480 + 48 payload bytes.
pub(super) fn data() -> Vec<u8> {
    (0..3000u32).map(|i| (i * 7 + 1) as u8).collect()
}

fn client_fragments(ttl: u8) -> Vec<Vec<u8>> {
    frames::ipv4_fragments(&frames::udp(to_gw(), CLIENT, (VIP, 7), &data(), ttl), IDENT, 1480)
}

#[test]
fn a_fragmented_datagram_follows_its_first_fragment_both_ways() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    st.adopt_table(&t, &t, 0);
    let input = client_fragments(64);
    assert_eq!(input.len(), 3);
    // What the endpoint must receive: the translated datagram, fragmented the same way.
    let want = frames::ipv4_fragments(&frames::udp(to_echo(), (SNAT, 1024), ECHO, &data(), 63), IDENT, 1480);
    for (i, (frag, want)) in input.iter().zip(&want).enumerate() {
        assert_eq!(run(i as u64 * 1000, frag, FRONT, &t, &mut st), (tx(BACK, want), want.clone()), "fragment {i}");
    }
    assert_eq!(st.conntrack.len(), 1);
    assert_eq!(st.counters.fragments_followed, 2);
    assert_eq!(st.fragments.live(SEC), 0, "the whole datagram passed: its entry is freed");

    // The endpoint's fragmented reply reaches the client the same way.
    let reply = frames::udp(L2 { src: backend_mac(21), dst: GW_BACK_MAC }, ECHO, (SNAT, 1024), &data(), 64);
    let reply = frames::ipv4_fragments(&reply, 0x9999, 1480);
    let want = frames::udp(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, (VIP, 7), CLIENT, &data(), 63);
    let want = frames::ipv4_fragments(&want, 0x9999, 1480);
    // Out of order after the first: the last fragment before the middle one.
    for i in [0, 2, 1] {
        assert_eq!(run(SEC, &reply[i], BACK, &t, &mut st), (tx(FRONT, &want[i]), want[i].clone()), "reply {i}");
    }
    assert_eq!(st.counters.fragments_followed, 4);
    // Every fragment counts on the front door, in its direction, with its IPv4 bytes.
    let echo = t.frontend(IpAddr::V4(VIP), 17, 7).unwrap().index as usize;
    let bytes: u64 = input.iter().map(|f| (f.len() - 14) as u64).sum();
    assert_eq!(
        st.frontends.as_slice()[echo],
        crate::counters::FrontendCount {
            packets_original: 3,
            bytes_original: bytes,
            packets_reply: 3,
            bytes_reply: bytes,
            new_flows: 1
        }
    );
}

#[test]
fn a_later_fragment_before_its_first_is_dropped() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let input = client_fragments(64);
    assert_eq!(run(0, &input[1], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::FragmentNoFirst));
    assert_eq!(st.conntrack.len(), 0, "a fragment without ports creates nothing");
    // The first and last still go (the datagram will not reassemble: the endpoint's
    // reassembly times out, as it would behind any router that lost a fragment).
    assert!(matches!(run(1, &input[0], FRONT, &t, &mut st).0, Verdict::Transmit { iface: BACK, .. }));
    assert!(matches!(run(2, &input[2], FRONT, &t, &mut st).0, Verdict::Transmit { iface: BACK, .. }));
    assert_eq!(st.counters.drops_of(DropReason::FragmentNoFirst), 1);
}

#[test]
fn fragment_entries_expire_after_thirty_seconds() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let input = client_fragments(64);
    assert!(matches!(run(0, &input[0], FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    // Linux `ipfrag_time`: 30 s from the first fragment.
    assert!(matches!(run(DEFAULT_TIMEOUT_NS - 1, &input[1], FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(run(DEFAULT_TIMEOUT_NS, &input[2], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::FragmentNoFirst));
}

#[test]
fn fragments_that_cannot_be_followed_are_dropped() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    // A first fragment too short for the TCP header (RFC 1858's tiny fragment).
    let seg = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1, 0, &[0; 64], 64);
    let tiny = frames::ipv4_fragments(&seg, 1, 16);
    assert_eq!(run(0, &tiny[0], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedL4));
    // SCTP: its CRC32c covers the whole packet, which no single fragment holds.
    let sctp = frames::sctp(to_gw(), CLIENT, (VIP, 80), 0, &[0; 64], 64);
    for f in frames::ipv4_fragments(&sctp, 2, 40) {
        assert_eq!(run(0, &f, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::Fragment));
    }
    // A fragment whose TTL runs out.
    let late = client_fragments(1);
    assert_eq!(run(0, &late[0], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::TtlExceeded));
    assert_eq!(st.conntrack.len(), 0);
}

#[test]
fn a_first_fragment_to_a_front_door_without_endpoints_is_rejected() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (EMPTY_VIP, 9), &data(), 64);
    let first = frames::ipv4_fragments(&q, 3, 1480).remove(0);
    let want = frames::icmp_error(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        EMPTY_VIP,
        CLIENT.0,
        Icmpv4Type::DstUnreachable,
        3,
        0,
        &first[14..42],
        64,
    );
    assert_eq!(run(0, &first, FRONT, &t, &mut st), (tx(FRONT, &want), want));
}
