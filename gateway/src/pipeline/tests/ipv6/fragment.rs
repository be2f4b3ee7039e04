//! Golden packet tests of IPv6 fragments (RFC 8200 § 4.5): a datagram's first fragment goes
//! through its flow, the later ones follow it through the worker's IPv6 fragment table; what
//! has no first fragment, outlived the table's 30 s, or cannot be followed is dropped under a
//! reason; an atomic fragment is a whole datagram.

use super::super::fragment::data;
use super::*;
use crate::fragments::DEFAULT_TIMEOUT_NS;

/// A 32-bit Identification, as only IPv6 has.
const IDENT: u32 = 0x8a5c_0d17;

// `data()`: 3000 bytes of UDP data, a 3008-byte datagram, fragmented here at the IPv6
// minimum MTU (1280: 1232 payload bytes per fragment after the two headers) into
// 1232 + 1232 + 544.

fn client_fragments(hop_limit: u8) -> Vec<Vec<u8>> {
    frames::ipv6_fragments(&frames::udp6(to_gw(), CLIENT6, (VIP6, 80), &data(), hop_limit), IDENT, 1232)
}

#[test]
fn a_fragmented_ipv6_datagram_follows_its_first_fragment_both_ways() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    st.adopt_table(&t, &t, 0);
    let input = client_fragments(64);
    assert_eq!(input.len(), 3);
    // What the endpoint must receive: the translated datagram (its UDP checksum, in the first
    // fragment, updated for the whole datagram), fragmented the same way.
    let want = frames::udp6(from_back(0x11), (SNAT6, 1024), (backend6(0x11), 8080), &data(), 63);
    let want = frames::ipv6_fragments(&want, IDENT, 1232);
    for (i, (frag, want)) in input.iter().zip(&want).enumerate() {
        assert_eq!(run(i as u64 * 1000, frag, FRONT, &t, &mut st), (tx(BACK, want), want.clone()), "fragment {i}");
    }
    assert_eq!((st.conntrack6.len(), st.conntrack.len()), (1, 0));
    assert_eq!(st.counters.fragments_followed, 2);
    assert_eq!(st.fragments6.live(SEC), 0, "the whole datagram passed: its entry is freed");
    assert_eq!(st.fragments.live(SEC), 0, "the IPv4 table is not used");

    // The endpoint's fragmented reply reaches the client the same way, out of order after
    // the first.
    let reply = frames::udp6(to_back(0x11), (backend6(0x11), 8080), (SNAT6, 1024), &data(), 64);
    let reply = frames::ipv6_fragments(&reply, 7, 1232);
    let want = frames::ipv6_fragments(&frames::udp6(from_gw(), (VIP6, 80), CLIENT6, &data(), 63), 7, 1232);
    for i in [0, 2, 1] {
        assert_eq!(run(SEC, &reply[i], BACK, &t, &mut st), (tx(FRONT, &want[i]), want[i].clone()), "reply {i}");
    }
    assert_eq!(st.counters.fragments_followed, 4);
    let door = t.frontend(IpAddr::V6(VIP6), 17, 80).unwrap().index as usize;
    let bytes: u64 = input.iter().map(|f| (f.len() - 14) as u64).sum();
    assert_eq!(
        st.frontends.as_slice()[door],
        FrontendCount {
            packets_original: 3,
            bytes_original: bytes,
            packets_reply: 3,
            bytes_reply: bytes,
            new_flows: 1
        }
    );
}

#[test]
fn a_later_ipv6_fragment_before_its_first_is_dropped_and_entries_expire() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let input = client_fragments(64);
    assert_eq!(run(0, &input[1], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::FragmentNoFirst));
    assert_eq!(st.conntrack6.len(), 0, "a fragment without ports creates nothing");
    assert!(matches!(run(1, &input[0], FRONT, &t, &mut st).0, Verdict::Transmit { iface: BACK, .. }));
    // Another datagram's fragment (other Identification) does not follow this one.
    let other = frames::ipv6_fragments(&frames::udp6(to_gw(), CLIENT6, (VIP6, 80), &data(), 64), IDENT + 1, 1232);
    assert_eq!(run(2, &other[2], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::FragmentNoFirst));
    // Linux `ip6frag_time`: 30 s from the first fragment.
    assert!(matches!(run(DEFAULT_TIMEOUT_NS, &input[1], FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(
        run(DEFAULT_TIMEOUT_NS + 1, &input[2], FRONT, &t, &mut st).0,
        Verdict::Drop(DropReason::FragmentNoFirst)
    );
    assert_eq!(st.counters.drops_of(DropReason::FragmentNoFirst), 3);
}

#[test]
fn ipv6_fragments_that_cannot_be_followed_are_dropped() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    // A first fragment too short for the TCP header.
    let seg = frames::tcp6(to_gw(), CLIENT6, (VIP6, 80), TcpFlags::SYN, 1, 0, &[0; 64], 64);
    let tiny = frames::ipv6_fragments(&seg, 1, 16);
    assert_eq!(run(0, &tiny[0], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedL4));
    // A UDP first fragment with a zero checksum (RFC 8200 § 8.1).
    let mut zero = client_fragments(64).remove(0);
    zero[62 + 6..62 + 8].copy_from_slice(&[0, 0]);
    assert_eq!(run(0, &zero, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedL4));
    // ICMPv6 fragments: not followed.
    let echo = frames::icmpv6_echo(to_gw(), CLIENT6.0, VIP6, 1, 1, &[0; 64], false);
    for f in frames::ipv6_fragments(&echo, 2, 32) {
        assert_eq!(run(0, &f, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::Fragment));
    }
    // A fragment whose Hop Limit runs out, first or later.
    let late = client_fragments(1);
    assert_eq!(run(0, &late[0], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::TtlExceeded));
    assert_eq!(run(0, &late[1], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::TtlExceeded));
    assert_eq!(st.conntrack6.len(), 0);
}

#[test]
fn an_atomic_ipv6_fragment_is_a_whole_datagram() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    // Offset 0, M clear (RFC 6946): forwarded with its Fragment header, nothing recorded.
    let q = frames::ipv6_fragments(&frames::udp6(to_gw(), CLIENT6, (VIP6, 80), b"ping", 64), 9, 1232).remove(0);
    let want = frames::udp6(from_back(0x11), (SNAT6, 1024), (backend6(0x11), 8080), b"ping", 63);
    let want = frames::ipv6_fragments(&want, 9, 1232).remove(0);
    assert_eq!(run(0, &q, FRONT, &t, &mut st), (tx(BACK, &want), want));
    assert_eq!(st.fragments6.live(0), 0);
}
