//! Golden packet tests of IPv6: Neighbor Discovery (answers for own addresses and VIPs,
//! Duplicate Address Detection, learning, validation), ICMPv6 echo, resolution of IPv6
//! next hops by Neighbor Solicitation, and IPv6 flows through an IPv6 front door to IPv6
//! endpoints (full NAT to the IPv6 SNAT address, rejects, hop limit, session affinity).
//!
//! The host is the embedded default: `tg-front` 2001:db8:100::1/64 (clients),
//! `tg-back` fd00:70::1/64 (endpoints, SNAT fd00:70::1).

use std::net::Ipv6Addr;

use super::*;
use crate::wire::ipv6::{multicast_mac, solicited_node, ALL_NODES};
use crate::wire::ndp::{FLAG_OVERRIDE, FLAG_SOLICITED};
use crate::wire::{Icmpv6Packet, Icmpv6Type, Ipv6Packet};

fn ip6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

const CLIENT6: (Ipv6Addr, u16) = (Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10), 40000);
pub(super) const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x10);
const EMPTY_VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x11);
pub(super) const GW_FRONT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
pub(super) const SNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, 1);

pub(super) fn backend6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, last)
}

fn from_gw() -> L2 {
    L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }
}

/// A dual-stack table: `demo/web` on VIP (IPv4) and VIP6 with IPv6 endpoints behind VIP6,
/// `demo/empty` on EMPTY_VIP6 without endpoints.
pub(super) fn table6(backends: &[u16], affinity_timeout_s: Option<u32>) -> Table {
    let web6 = ServiceSpec {
        name: "demo/web6:http".into(),
        backends: backends.iter().map(|&b| BackendSpec { addr: IpAddr::V6(backend6(b)), port: 8080 }).collect(),
        affinity_timeout_s,
        draining: vec![],
    };
    let web4 = ServiceSpec {
        name: "demo/web:http".into(),
        backends: vec![BackendSpec { addr: "10.70.0.11".parse().unwrap(), port: 8080 }],
        affinity_timeout_s: None,
        draining: vec![],
    };
    let empty =
        ServiceSpec { name: "demo/empty:".into(), backends: vec![], affinity_timeout_s: None, draining: vec![] };
    let fe = |addr: IpAddr, protocol, port, service| FrontendSpec {
        addr,
        port,
        protocol,
        kind: FrontendKind::ExternalIp,
        service,
        source_ranges: vec![],
    };
    let spec = TableSpec {
        frontends: vec![
            fe(IpAddr::V4(VIP), Protocol::Tcp, 80, 1),
            fe(IpAddr::V4(VIP), Protocol::Udp, 8080, 0),
            fe(IpAddr::V6(VIP6), Protocol::Tcp, 80, 0),
            fe(IpAddr::V6(VIP6), Protocol::Udp, 80, 0),
            fe(IpAddr::V6(EMPTY_VIP6), Protocol::Tcp, 80, 2),
            fe(IpAddr::V6(EMPTY_VIP6), Protocol::Udp, 9, 2),
        ],
        services: vec![web6, web4, empty],
    };
    Table::new(crate::table::Storage::Owned(build(&spec, next_generation()).unwrap())).unwrap()
}

/// Worker state with the IPv6 endpoints fd00:70::11..13 resolved.
pub(super) fn state6() -> WorkerState {
    let st = state(0, 1);
    for last in [0x11u16, 0x12, 0x13] {
        st.neighbours.learn(backend6(last), backend_mac(last as u8), 0);
    }
    st
}

#[test]
fn neighbor_solicitations_for_vips_and_own_addresses_are_answered() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let peer_back = (backend_mac(0x11), backend6(0x11));
    for (target, iface, mac) in
        [(VIP6, FRONT, GW_FRONT_MAC), (GW_FRONT6, FRONT, GW_FRONT_MAC), (SNAT6, BACK, GW_BACK_MAC)]
    {
        let (peer_mac, peer) = if iface == FRONT { (CLIENT_MAC, CLIENT6.0) } else { peer_back };
        let sn = solicited_node(target);
        let ns = frames::ndp(
            L2 { src: peer_mac, dst: multicast_mac(sn) },
            peer,
            sn,
            Icmpv6Type::NeighborSolicit,
            0,
            target,
            Some(peer_mac),
        );
        let na = frames::ndp(
            L2 { src: mac, dst: peer_mac },
            target,
            peer,
            Icmpv6Type::NeighborAdvert,
            FLAG_SOLICITED | FLAG_OVERRIDE,
            target,
            Some(mac),
        );
        assert_eq!(run(0, &ns, iface, &t, &mut st), (tx(iface, &na), na), "NS for {target}");
        assert_eq!(st.neighbours.lookup(peer).map(|n| n.mac), Some(peer_mac), "the solicitor is learned");
    }
    assert_eq!(st.counters.nd_advertisements, 3);
    // A unicast solicitation (a neighbour confirming its cache entry) is answered the same way.
    let ns = frames::ndp(to_gw(), CLIENT6.0, VIP6, Icmpv6Type::NeighborSolicit, 0, VIP6, Some(CLIENT_MAC));
    let na = frames::ndp(
        from_gw(),
        VIP6,
        CLIENT6.0,
        Icmpv6Type::NeighborAdvert,
        FLAG_SOLICITED | FLAG_OVERRIDE,
        VIP6,
        Some(GW_FRONT_MAC),
    );
    assert_eq!(run(0, &ns, FRONT, &t, &mut st), (tx(FRONT, &na), na));
}

#[test]
fn duplicate_address_detection_is_answered_to_all_nodes() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let sn = solicited_node(VIP6);
    let dad = frames::ndp(
        L2 { src: CLIENT_MAC, dst: multicast_mac(sn) },
        Ipv6Addr::UNSPECIFIED,
        sn,
        Icmpv6Type::NeighborSolicit,
        0,
        VIP6,
        None,
    );
    // RFC 4861 § 7.2.4: to all-nodes, Solicited clear, Override set.
    let na = frames::ndp(
        L2 { src: GW_FRONT_MAC, dst: multicast_mac(ALL_NODES) },
        VIP6,
        ALL_NODES,
        Icmpv6Type::NeighborAdvert,
        FLAG_OVERRIDE,
        VIP6,
        Some(GW_FRONT_MAC),
    );
    assert_eq!(run(0, &dad, FRONT, &t, &mut st), (tx(FRONT, &na), na));
    assert_eq!(st.neighbours.lookup(Ipv6Addr::UNSPECIFIED), None, "nothing learned from ::");
}

#[test]
fn neighbor_discovery_is_validated_and_learned() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let sn = |a| solicited_node(a);
    let ns = |target: Ipv6Addr| {
        frames::ndp(
            L2 { src: CLIENT_MAC, dst: multicast_mac(sn(target)) },
            CLIENT6.0,
            sn(target),
            Icmpv6Type::NeighborSolicit,
            0,
            target,
            Some(CLIENT_MAC),
        )
    };
    assert_eq!(run(0, &ns(ip6("2001:db8:100::99")), FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NdpNotForUs));
    // Forwarded by a router: Hop Limit 254 (RFC 4861 § 7.1.1).
    let mut forwarded = ns(VIP6);
    forwarded[14 + 7] = 254;
    assert_eq!(run(0, &forwarded, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedNdp));
    let mut bad_sum = ns(VIP6);
    bad_sum[14 + 40 + 2] ^= 0xff;
    assert_eq!(run(0, &bad_sum, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedNdp));
    // An advertisement is learned when its target is on the link, and consumed.
    let na = |target: Ipv6Addr, mac: MacAddr| {
        frames::ndp(
            L2 { src: mac, dst: GW_BACK_MAC },
            target,
            SNAT6,
            Icmpv6Type::NeighborAdvert,
            FLAG_SOLICITED | FLAG_OVERRIDE,
            target,
            Some(mac),
        )
    };
    assert_eq!(run(0, &na(backend6(0x50), backend_mac(0x50)), BACK, &t, &mut st).0, Verdict::Consumed);
    assert_eq!(st.neighbours.lookup(backend6(0x50)).unwrap().mac, backend_mac(0x50));
    assert_eq!(run(0, &na(ip6("fd00:99::50"), backend_mac(0x51)), BACK, &t, &mut st).0, Verdict::Consumed);
    assert_eq!(st.neighbours.lookup(ip6("fd00:99::50")), None, "off-link targets are not learned");
    let link_local = ip6("fe80::250");
    assert_eq!(run(0, &na(link_local, backend_mac(0x52)), BACK, &t, &mut st).0, Verdict::Consumed);
    assert_eq!(st.neighbours.lookup(link_local).unwrap().mac, backend_mac(0x52), "link-local is on-link");
    assert_eq!(st.counters.nd_learned, 2);
}

#[test]
fn echo_requests_to_ipv6_vips_are_answered() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let req = frames::icmpv6_echo(to_gw(), CLIENT6.0, VIP6, 0x1234, 7, b"abcdefgh", false);
    let want = frames::icmpv6_echo(from_gw(), VIP6, CLIENT6.0, 0x1234, 7, b"abcdefgh", true);
    assert_eq!(run(0, &req, FRONT, &t, &mut st), (tx(FRONT, &want), want.clone()));
    // With a Destination Options header before the echo, the reply carries none.
    let mut with_ext = req[..54].to_vec();
    with_ext.extend_from_slice(&[58, 0, 1, 4, 0, 0, 0, 0]);
    with_ext.extend_from_slice(&req[54..]);
    with_ext[14 + 6] = 60;
    with_ext[14 + 4..14 + 6].copy_from_slice(&((req.len() - 54 + 8) as u16).to_be_bytes());
    assert_eq!(run(0, &with_ext, FRONT, &t, &mut st), (tx(FRONT, &want), want));
    let own = frames::icmpv6_echo(to_gw(), CLIENT6.0, GW_FRONT6, 1, 1, b"", false);
    assert!(matches!(run(0, &own, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    let other = frames::icmpv6_echo(to_gw(), CLIENT6.0, ip6("2001:db8:203::99"), 1, 1, b"", false);
    assert_eq!(run(0, &other, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NoFrontend));
    assert_eq!(st.counters.echo_replies, 3);
}

#[test]
fn unresolved_ipv6_next_hop_queues_a_neighbor_solicitation() {
    let (t, mut st) = (table6(&[0x50], None), state6());
    st.resolve_table(&t, 0);
    let mut buf = [0u8; POLL_TRANSMIT_LEN];
    // The IPv4 endpoint 10.70.0.11 is resolved already; fd00:70::50 is not.
    let (iface, len) = poll_transmit(0, &mut buf, &mut st).expect("a solicitation");
    let target = backend6(0x50);
    let sn = solicited_node(target);
    let want = frames::ndp(
        L2 { src: GW_BACK_MAC, dst: multicast_mac(sn) },
        SNAT6,
        sn,
        Icmpv6Type::NeighborSolicit,
        0,
        target,
        Some(GW_BACK_MAC),
    );
    assert_eq!((iface, &buf[..len]), (BACK, &want[..]));
    assert_eq!(st.counters.nd_solicitations, 1);
    assert!(poll_transmit(0, &mut buf, &mut st).is_none(), "not repeated before the retry interval");
    assert!(poll_transmit(2 * SEC, &mut buf, &mut st).is_some(), "repeated after it");
}

#[test]
fn malformed_ipv6_is_a_counted_drop() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let good = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), b"x", 64);
    let mut cases: Vec<(&str, Vec<u8>, DropReason)> = Vec::new();
    cases.push(("truncated", good[..50].to_vec(), DropReason::MalformedIpv6));
    let mut long = good.clone();
    long[14 + 4..14 + 6].copy_from_slice(&200u16.to_be_bytes());
    cases.push(("payload length past the frame", long, DropReason::MalformedIpv6));
    let mut multicast_src = good.clone();
    multicast_src[14 + 8] = 0xff;
    cases.push(("multicast source", multicast_src, DropReason::MalformedIpv6));
    let mut frag = good[..54].to_vec();
    // A first fragment of something other than TCP or UDP (here ICMPv6) is not followed.
    frag.extend_from_slice(&[58, 0, 0, 1, 0, 0, 0, 9]);
    frag.extend_from_slice(&good[54..]);
    frag[14 + 6] = 44;
    frag[14 + 4..14 + 6].copy_from_slice(&((good.len() - 54 + 8) as u16).to_be_bytes());
    cases.push(("ICMPv6 fragment", frag, DropReason::Fragment));
    let mut unknown = good.clone();
    unknown[14 + 6] = 47;
    cases.push(("GRE", unknown, DropReason::UnsupportedProtocol));
    let router_solicit = {
        let mut f = frames::icmpv6_echo(to_gw(), CLIENT6.0, ip6("ff02::2"), 0, 0, b"", false);
        f[54] = 133;
        f
    };
    cases.push(("router solicitation", router_solicit, DropReason::IcmpNotHandled));
    // RFC 8200 § 8.1: a zero UDP checksum is not "none" over IPv6 (refused as it is parsed),
    // and a wrong one is wrong.
    let mut unsummed = good.clone();
    unsummed[54 + 6..54 + 8].fill(0);
    cases.push(("UDP without a checksum", unsummed, DropReason::MalformedL4));
    let mut wrong = good.clone();
    wrong[54 + 6] ^= 0x5a;
    cases.push(("UDP with a wrong checksum", wrong, DropReason::BadL4Checksum));
    let mut syn = frames::tcp6(to_gw(), CLIENT6, (VIP6, 80), TcpFlags::SYN, 1, 0, &[], 64);
    syn[54 + 16] ^= 0x5a;
    cases.push(("SYN with a wrong checksum", syn, DropReason::BadL4Checksum));
    for (what, frame, reason) in cases {
        assert_eq!(run(0, &frame, FRONT, &t, &mut st).0, Verdict::Drop(reason), "{what}");
    }
    assert_eq!(st.conntrack.len(), 0);
}

fn to_back(last: u16) -> L2 {
    L2 { src: backend_mac(last as u8), dst: GW_BACK_MAC }
}

fn from_back(last: u16) -> L2 {
    L2 { src: GW_BACK_MAC, dst: backend_mac(last as u8) }
}

fn backend6_of(frame: &[u8]) -> Ipv6Addr {
    Ipv6Packet::new_checked(&frame[14..]).unwrap().dst_addr()
}

#[test]
fn ipv6_tcp_flow_is_translated_both_ways_to_ipv6_endpoints() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let syn = frames::tcp6(to_gw(), CLIENT6, (VIP6, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    // Full NAT to the IPv6 SNAT address; Hop Limit decremented; checksum updated.
    let want = frames::tcp6(from_back(0x11), (SNAT6, 1024), (backend6(0x11), 8080), TcpFlags::SYN, 1000, 0, &[], 63);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(BACK, &want), want));
    assert_eq!((st.conntrack6.len(), st.conntrack.len()), (1, 0), "in the IPv6 table");
    let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    let reply = frames::tcp6(to_back(0x11), (backend6(0x11), 8080), (SNAT6, 1024), syn_ack, 5000, 1001, &[], 64);
    // The client is on-link: learned from its SYN, the reply goes straight to it.
    let want = frames::tcp6(from_gw(), (VIP6, 80), CLIENT6, syn_ack, 5000, 1001, &[], 63);
    assert_eq!(run(SEC, &reply, BACK, &t, &mut st), (tx(FRONT, &want), want));
    let data = frames::tcp6(to_gw(), CLIENT6, (VIP6, 80), TcpFlags::ACK, 1001, 5001, b"GET / HTTP/1.1\r\n\r\n", 64);
    let want = frames::tcp6(
        from_back(0x11),
        (SNAT6, 1024),
        (backend6(0x11), 8080),
        TcpFlags::ACK,
        1001,
        5001,
        b"GET / HTTP/1.1\r\n\r\n",
        63,
    );
    assert_eq!(run(2 * SEC, &data, FRONT, &t, &mut st), (tx(BACK, &want), want));
    assert_eq!(st.counters.new_flows, 1);
    assert_eq!((st.counters.forwarded_original, st.counters.forwarded_reply), (2, 1));
}

#[test]
fn ipv6_udp_round_trip_and_extension_headers() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    // A Destination Options header before the UDP header: the rewrite finds the ports.
    let plain = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), b"ping", 64);
    let mut q = plain[..54].to_vec();
    q.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    q.extend_from_slice(&plain[54..]);
    q[14 + 6] = 60;
    q[14 + 4..14 + 6].copy_from_slice(&((plain.len() - 54 + 8) as u16).to_be_bytes());
    let (v, out) = run(0, &q, FRONT, &t, &mut st);
    assert_eq!(v, tx(BACK, &out));
    let mut want = frames::udp6(from_back(0x11), (SNAT6, 1024), (backend6(0x11), 8080), b"ping", 63)[..54].to_vec();
    want.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    want.extend_from_slice(&frames::udp6(from_back(0x11), (SNAT6, 1024), (backend6(0x11), 8080), b"ping", 63)[54..]);
    want[14 + 6] = 60;
    want[14 + 4..14 + 6].copy_from_slice(&((plain.len() - 54 + 8) as u16).to_be_bytes());
    assert_eq!(out, want, "extension header kept, addresses, ports and checksum rewritten");
    let r = frames::udp6(to_back(0x11), (backend6(0x11), 8080), (SNAT6, 1024), b"echo:ping", 64);
    let want = frames::udp6(from_gw(), (VIP6, 80), CLIENT6, b"echo:ping", 63);
    assert_eq!(run(0, &r, BACK, &t, &mut st), (tx(FRONT, &want), want));
    assert_eq!(st.counters.forwarded_original + st.counters.forwarded_reply, 2);
    // A zero UDP checksum is invalid over IPv6 (RFC 8200 § 8.1): dropped, not forwarded.
    let mut zero = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), b"ping", 64);
    zero[54 + 6..54 + 8].copy_from_slice(&[0, 0]);
    assert_eq!(run(0, &zero, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedL4));
}

#[test]
fn ipv6_front_door_without_endpoints_rejects() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let syn = frames::tcp6(to_gw(), CLIENT6, (EMPTY_VIP6, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let mut rst = frames::tcp6(
        from_gw(),
        (EMPTY_VIP6, 80),
        CLIENT6,
        TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
        0,
        1001,
        &[],
        64,
    );
    {
        let mut t = TcpPacket::new_unchecked(&mut rst[54..]);
        t.set_window_len(0);
        t.fill_checksum(EMPTY_VIP6, CLIENT6.0);
    }
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(FRONT, &rst), rst));
    // UDP: ICMPv6 destination unreachable, code 4 (port unreachable), quoting the packet.
    let q = frames::udp6(to_gw(), CLIENT6, (EMPTY_VIP6, 9), b"discard me", 64);
    let quoted = &q[14..];
    let mut want = frames::icmpv6_echo(from_gw(), EMPTY_VIP6, CLIENT6.0, 0, 0, quoted, false);
    {
        let mut icmp = Icmpv6Packet::new_unchecked(&mut want[54..]);
        icmp.set_msg_type(Icmpv6Type::DstUnreachable);
        icmp.set_msg_code(4);
        icmp.set_word(0);
        icmp.fill_checksum(EMPTY_VIP6, CLIENT6.0);
    }
    assert_eq!(run(0, &q, FRONT, &t, &mut st), (tx(FRONT, &want), want));
    assert_eq!(st.counters.rejected, 2);
    assert_eq!(st.conntrack6.len(), 0);
}

#[test]
fn ipv6_hop_limit_families_and_expiry() {
    let (t, mut st) = (table6(&[0x11], None), state6());
    let last_hop = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), b"x", 1);
    assert_eq!(run(0, &last_hop, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::TtlExceeded));
    let no_door = frames::udp6(to_gw(), CLIENT6, (VIP6, 81), b"x", 64);
    assert_eq!(run(0, &no_door, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NoFrontend));
    // An IPv4 front door whose Service has only IPv6 endpoints: full NAT keeps the family.
    let mixed = frames::udp(to_gw(), CLIENT, (VIP, 8080), b"x", 64);
    assert_eq!(run(0, &mixed, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::UnsupportedFamily));
    // A flow expires like an IPv4 one and gives its IPv6 SNAT port back.
    let q = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), b"x", 64);
    let (_, out) = run(0, &q, FRONT, &t, &mut st);
    assert_eq!(UdpPacket::new_checked(&out[54..]).unwrap().src_port(), 1024);
    assert_eq!(poll_expire(40 * SEC, 1 << 20, &mut st), 1);
    assert_eq!(st.conntrack6.len(), 0);
    let q2 = frames::udp6(to_gw(), (CLIENT6.0, 40001), (VIP6, 80), b"x", 64);
    // The modulo rule takes the first free port from a random position.
    let next = st.snat.peek(st.host.snat_addresses_on::<Ipv6Addr>(BACK)).unwrap().1;
    let (_, out) = run(41 * SEC, &q2, FRONT, &t, &mut st);
    assert_eq!(UdpPacket::new_checked(&out[54..]).unwrap().src_port(), next);
}

#[test]
fn ipv6_new_flows_spread_and_client_ip_affinity_holds() {
    let (t, mut st) = (table6(&[0x11, 0x12, 0x13], None), state6());
    let mut seen = std::collections::HashMap::new();
    for port in 0..300u16 {
        let syn = frames::tcp6(to_gw(), (CLIENT6.0, 20000 + port), (VIP6, 80), TcpFlags::SYN, 1, 0, &[], 64);
        let (v, out) = run(0, &syn, FRONT, &t, &mut st);
        assert!(matches!(v, Verdict::Transmit { .. }), "{v:?}");
        *seen.entry(backend6_of(&out)).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.values().all(|&n| n > 50), "{seen:?}");
    // With sessionAffinity: ClientIP every connection of a client, on any worker, goes to
    // one endpoint.
    let t = table6(&[0x11, 0x12, 0x13], Some(600));
    let mut workers: Vec<WorkerState> = (0..2).map(|_| state6()).collect();
    let shared = Arc::clone(&workers[0].affinity);
    workers[1].affinity = Arc::clone(&shared);
    let mut chosen = std::collections::HashSet::new();
    for port in 0..40u16 {
        let syn = frames::tcp6(to_gw(), (CLIENT6.0, 30000 + port), (VIP6, 80), TcpFlags::SYN, 1, 0, &[], 64);
        let (v, out) = run(u64::from(port) * SEC, &syn, FRONT, &t, &mut workers[usize::from(port % 2)]);
        assert!(matches!(v, Verdict::Transmit { .. }), "{v:?}");
        chosen.insert(backend6_of(&out));
    }
    assert_eq!(chosen.len(), 1, "{chosen:?}");
}

mod burst;
mod fragment;
mod icmp_error;

/// A stand-in for RSS steering with one queue: every port is the worker's; IPv6 replies
/// are steered only with `ipv6` (a device that hashes IPv6 TCP/UDP ports).
#[derive(Debug)]
struct OneQueue {
    ipv6: bool,
}

impl crate::snat::ReplySteering for OneQueue {
    fn pick(
        &self,
        endpoint: std::net::SocketAddr,
        _snat: IpAddr,
        _worker: usize,
        start: u16,
        usable: &mut dyn FnMut(u16) -> bool,
    ) -> Option<u16> {
        if endpoint.is_ipv6() && !self.ipv6 {
            return None;
        }
        (start..=u16::MAX).find(|&p| usable(p))
    }

    fn steers_ipv6(&self) -> bool {
        self.ipv6
    }
}

/// Under RSS steering (`SnatPorts::steered`, the DPDK driver with several queues), an IPv6
/// flow gets a SNAT port from the steering where it steers IPv6, and is dropped as
/// `unsupported_family` where it does not (a device that does not hash IPv6 TCP/UDP ports).
#[test]
fn ipv6_flows_under_rss_steering_where_the_device_steers_ipv6() {
    for ipv6 in [true, false] {
        let (t, mut st) = (table6(&[0x11], None), state6());
        st.snat = crate::snat::SnatPorts::steered(0, 1024, 65535, std::sync::Arc::new(OneQueue { ipv6 }));
        let q = frames::udp6(to_gw(), CLIENT6, (VIP6, 80), b"x", 64);
        let (v, out) = run(0, &q, FRONT, &t, &mut st);
        if ipv6 {
            assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
            let ip = Ipv6Packet::new_checked(&out[14..]).unwrap();
            assert_eq!((ip.src_addr(), ip.dst_addr()), (SNAT6, backend6(0x11)));
            assert!(UdpPacket::new_checked(&out[54..]).unwrap().src_port() >= 1024);
            assert_eq!(st.conntrack6.len(), 1);
        } else {
            assert_eq!(v, Verdict::Drop(DropReason::UnsupportedFamily));
            assert_eq!(st.conntrack6.len(), 0);
        }
    }
}
