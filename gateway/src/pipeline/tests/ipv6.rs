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
use crate::wire::Icmpv6Type;

fn ip6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

const CLIENT6: (Ipv6Addr, u16) = (Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10), 40000);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x10);
const EMPTY_VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x11);
const GW_FRONT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
const SNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, 1);

fn backend6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, last)
}

fn from_gw() -> L2 {
    L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }
}

/// A dual-stack table: `demo/web` on VIP (IPv4) and VIP6 with IPv6 endpoints behind VIP6,
/// `demo/empty` on EMPTY_VIP6 without endpoints.
fn table6(backends: &[u16], affinity_timeout_s: Option<u32>) -> Table {
    let web6 = ServiceSpec {
        name: "demo/web6:http".into(),
        backends: backends.iter().map(|&b| BackendSpec { addr: IpAddr::V6(backend6(b)), port: 8080 }).collect(),
        affinity_timeout_s,
    };
    let web4 = ServiceSpec {
        name: "demo/web:http".into(),
        backends: vec![BackendSpec { addr: "10.70.0.11".parse().unwrap(), port: 8080 }],
        affinity_timeout_s: None,
    };
    let empty = ServiceSpec { name: "demo/empty:".into(), backends: vec![], affinity_timeout_s: None };
    let fe = |addr: IpAddr, protocol, port, service| FrontendSpec {
        addr,
        port,
        protocol,
        kind: FrontendKind::ExternalIp,
        service,
    };
    let spec = TableSpec {
        frontends: vec![
            fe(IpAddr::V4(VIP), Protocol::Tcp, 80, 1),
            fe(IpAddr::V6(VIP6), Protocol::Tcp, 80, 0),
            fe(IpAddr::V6(VIP6), Protocol::Udp, 80, 0),
            fe(IpAddr::V6(EMPTY_VIP6), Protocol::Tcp, 80, 2),
            fe(IpAddr::V6(EMPTY_VIP6), Protocol::Udp, 9, 2),
        ],
        services: vec![web6, web4, empty],
    };
    Table::new(crate::table::Storage::Owned(build(&spec, 1).unwrap())).unwrap()
}

/// Worker state with the IPv6 endpoints fd00:70::11..13 resolved.
fn state6() -> WorkerState {
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
    frag.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]);
    frag.extend_from_slice(&good[54..]);
    frag[14 + 6] = 44;
    frag[14 + 4..14 + 6].copy_from_slice(&((good.len() - 54 + 8) as u16).to_be_bytes());
    cases.push(("fragment", frag, DropReason::Fragment));
    let mut unknown = good.clone();
    unknown[14 + 6] = 47;
    cases.push(("GRE", unknown, DropReason::UnsupportedProtocol));
    let router_solicit = {
        let mut f = frames::icmpv6_echo(to_gw(), CLIENT6.0, ip6("ff02::2"), 0, 0, b"", false);
        f[54] = 133;
        f
    };
    cases.push(("router solicitation", router_solicit, DropReason::IcmpNotHandled));
    for (what, frame, reason) in cases {
        assert_eq!(run(0, &frame, FRONT, &t, &mut st).0, Verdict::Drop(reason), "{what}");
    }
    assert_eq!(st.conntrack.len(), 0);
}
