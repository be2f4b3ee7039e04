//! Golden packet tests of ICMPv6 errors about tracked IPv6 flows (RFC 4443 § 3): translated
//! — outer header, quote and the quoted transport checksum — and forwarded to the flow's
//! other end with a checksum over the new pseudo-header; errors about nothing tracked are
//! counted drops.

use super::super::icmp_error::forwarded;
use super::*;

/// A router between the gateway and the endpoints.
const BACK_ROUTER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, 0xfe);
const BACK_ROUTER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xee, 0x01]);

fn from_router() -> L2 {
    L2 { src: BACK_ROUTER_MAC, dst: GW_BACK_MAC }
}

/// The largest quote an ICMPv6 error carries: the message within the IPv6 minimum MTU
/// (RFC 4443 § 2.4 (c)): 1280 − 40 − 8 bytes.
const MAX_QUOTE: usize = 1232;

#[test]
fn packet_too_big_from_the_endpoint_side_reaches_the_client() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let payload: Vec<u8> = (0..1400u32).map(|i| (i * 13 + 5) as u8).collect();
    let q = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), &payload, 64);
    let sent = forwarded(0, &q, FRONT, &t, &mut st);
    assert_eq!(backend6_of(&sent), backend6(0x11));
    // A router towards the endpoint cannot forward 1448 bytes: Packet Too Big, MTU 1280,
    // quoting as much of the packet as fits (its UDP checksum included).
    let err = frames::icmpv6_error(
        from_router(),
        BACK_ROUTER6,
        SNAT6,
        Icmpv6Type::PacketTooBig,
        0,
        1280,
        &sent[14..14 + MAX_QUOTE],
        64,
    );
    // To the client: from the VIP, quoting its own packet as the gateway forwarded it (the
    // Hop Limit the gateway decremented stays; addresses, ports and UDP checksum back to what
    // the client sent), the MTU unchanged — full NAT changes no header size.
    let quote = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), &payload, 63);
    let want = frames::icmpv6_error(
        from_gw(),
        VIP6,
        CLIENT6.0,
        Icmpv6Type::PacketTooBig,
        0,
        1280,
        &quote[14..14 + MAX_QUOTE],
        63,
    );
    assert_eq!(run(SEC, &err, BACK, &t, &mut st), (tx(FRONT, &want), want.clone()));
    let icmp = Icmpv6Packet::new_checked(&want[54..]).unwrap();
    assert!(icmp.verify_checksum(VIP6, CLIENT6.0));
    assert_eq!(icmp.mtu(), 1280);
    assert_eq!(st.counters.icmp_errors_translated, 1);
}

#[test]
fn errors_from_the_client_side_reach_the_endpoint_with_a_whole_tcp_quote() {
    let (t, mut st) = (table6(&[0x12], None), state6());
    let syn = frames::tcp6(to_gw(), CLIENT6, (VIP6, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    forwarded(0, &syn, FRONT, &t, &mut st);
    let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    let reply = frames::tcp6(to_back(0x12), (backend6(0x12), 8080), (SNAT6, 1024), syn_ack, 5000, 1001, b"hi", 64);
    let sent = forwarded(SEC, &reply, BACK, &t, &mut st);
    // The client's host answers the reply with Destination Unreachable (port unreachable),
    // quoting the whole segment, TCP checksum included.
    let err = frames::icmpv6_error(to_gw(), CLIENT6.0, VIP6, Icmpv6Type::DstUnreachable, 4, 0, &sent[14..], 64);
    // To the endpoint: from the SNAT address, quoting the endpoint's own segment.
    let quote = frames::tcp6(to_back(0x12), (backend6(0x12), 8080), (SNAT6, 1024), syn_ack, 5000, 1001, b"hi", 63);
    let want = frames::icmpv6_error(
        from_back(0x12),
        SNAT6,
        backend6(0x12),
        Icmpv6Type::DstUnreachable,
        4,
        0,
        &quote[14..],
        63,
    );
    assert_eq!(run(2 * SEC, &err, FRONT, &t, &mut st), (tx(BACK, &want), want));
    assert_eq!(st.counters.icmp_errors_translated, 1);
}

#[test]
fn icmpv6_errors_about_nothing_tracked_are_dropped() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let payload = [7u8; 64];
    let q = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), &payload, 64);
    let sent = forwarded(0, &q, FRONT, &t, &mut st);
    let error_about = |quoted: &[u8]| {
        frames::icmpv6_error(from_router(), BACK_ROUTER6, SNAT6, Icmpv6Type::TimeExceeded, 0, 0, quoted, 64)
    };
    // A quote of a port no flow holds.
    let other = frames::udp6(to_back(0x11), (SNAT6, 1999), (backend6(0x11), 8080), &payload, 63);
    assert_eq!(run(1, &error_about(&other[14..]), BACK, &t, &mut st).0, Verdict::Drop(DropReason::IcmpErrorUntracked));
    // A quote too short for the ports.
    assert_eq!(run(1, &error_about(&sent[14..56]), BACK, &t, &mut st).0, Verdict::Drop(DropReason::IcmpErrorUntracked));
    // A quote of a non-first fragment: no ports in it.
    let frag = frames::ipv6_fragments(&sent, 5, 32).remove(1);
    assert_eq!(run(1, &error_about(&frag[14..]), BACK, &t, &mut st).0, Verdict::Drop(DropReason::IcmpErrorUntracked));
    // A tracked quote, but the error is addressed to someone other than its sender.
    let mut misaddressed = error_about(&sent[14..]);
    Ipv6Packet::new_unchecked(&mut misaddressed[14..]).set_dst_addr(GW_FRONT6);
    let mut icmp = Icmpv6Packet::new_unchecked(&mut misaddressed[54..]);
    icmp.fill_checksum(BACK_ROUTER6, GW_FRONT6);
    assert_eq!(run(1, &misaddressed, BACK, &t, &mut st).0, Verdict::Drop(DropReason::IcmpErrorUntracked));
    // A wrong checksum.
    let mut bad = error_about(&sent[14..]);
    bad[54 + 2] ^= 1;
    assert_eq!(run(1, &bad, BACK, &t, &mut st).0, Verdict::Drop(DropReason::BadIcmpChecksum));
    // A quote without a whole IPv6 header.
    assert_eq!(run(1, &error_about(&sent[14..40]), BACK, &t, &mut st).0, Verdict::Drop(DropReason::MalformedL4));
    assert_eq!(st.counters.drops_of(DropReason::IcmpErrorUntracked), 4);
    assert_eq!(st.counters.icmp_errors_translated, 0);
    // The same error about the tracked packet goes through.
    assert!(matches!(run(1, &error_about(&sent[14..]), BACK, &t, &mut st).0, Verdict::Transmit { iface: FRONT, .. }));
}
