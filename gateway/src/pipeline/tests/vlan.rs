//! Golden packet tests of 802.1Q VLAN interfaces: a gateway whose two ports each carry an
//! untagged interface (as in the other tests) and one VLAN interface — `tg-front.100`
//! (192.0.2.1/24, clients) and `tg-back.200` (10.80.0.1/24, endpoints, SNAT 10.80.0.1).

use super::*;

const VLAN_FRONT: u16 = 100;
const VLAN_BACK: u16 = 200;
const TAGGED_CLIENT: (Ipv4Addr, u16) = (Ipv4Addr::new(192, 0, 2, 10), 40000);
const TAGGED_SNAT: Ipv4Addr = Ipv4Addr::new(10, 80, 0, 1);
const TAGGED_BACKEND: &str = "10.80.0.11";

/// The embedded default plus a VLAN interface on each port.
pub(super) fn vlan_state() -> WorkerState {
    let text = crate::config::EMBEDDED_DEFAULT
        .replace("addresses = [\"10.70.0.1\",", "addresses = [\"10.70.0.1\", \"10.80.0.1\",")
        + "
[[interfaces]]
name = \"tg-front\"
vlan = 100
addresses = [\"192.0.2.1/24\"]

[[interfaces]]
name = \"tg-back\"
vlan = 200
addresses = [\"10.80.0.1/24\"]
device = \"net_af_packet1,iface=tg-back\"
";
    let config = Config::from_toml(&text).expect("VLAN configuration");
    assert_eq!(config.ports.len(), 2, "VLAN interfaces share their port");
    let host = Arc::new(Host::new(&config, &[GW_FRONT_MAC, GW_BACK_MAC]));
    let shared = Shared::new(64, 1024);
    for last in [11u8, 12, 13] {
        shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, last), backend_mac(last), 0);
        shared.neighbours.learn(Ipv4Addr::new(10, 80, 0, last), backend_mac(last), 0);
    }
    WorkerState::new(0, 1, host, &shared, 1024, 7)
}

fn tag(frame: &[u8], vid: u16) -> Vec<u8> {
    frames::tagged(frame, 0x8100, vid)
}

#[test]
fn tagged_in_tagged_out_both_ways() {
    let (t, mut st) = (table(&[TAGGED_BACKEND]), vlan_state());
    let syn = tag(&frames::tcp(to_gw(), TAGGED_CLIENT, (VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64), VLAN_FRONT);
    let want = tag(
        &frames::tcp(
            L2 { src: GW_BACK_MAC, dst: backend_mac(11) },
            (TAGGED_SNAT, 1024),
            (ip(TAGGED_BACKEND), 8080),
            TcpFlags::SYN,
            1000,
            0,
            &[],
            63,
        ),
        VLAN_BACK,
    );
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(BACK, &want), want));

    let syn_ack = tag(
        &frames::tcp(
            L2 { src: backend_mac(11), dst: GW_BACK_MAC },
            (ip(TAGGED_BACKEND), 8080),
            (TAGGED_SNAT, 1024),
            TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
            5000,
            1001,
            &[],
            64,
        ),
        VLAN_BACK,
    );
    let want_back = tag(
        &frames::tcp(
            L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
            (VIP, 80),
            TAGGED_CLIENT,
            TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
            5000,
            1001,
            &[],
            63,
        ),
        VLAN_FRONT,
    );
    assert_eq!(run(SEC, &syn_ack, BACK, &t, &mut st), (tx(FRONT, &want_back), want_back));
}

#[test]
fn tags_are_added_and_removed_between_tagged_and_untagged_interfaces() {
    let (t, mut st) = (table(&[TAGGED_BACKEND]), vlan_state());
    // Untagged client → endpoint on VLAN 200: the frame grows by the tag.
    let q = frames::udp(to_gw(), CLIENT, (VIP, 80), b"ping", 64);
    let want = tag(
        &frames::udp(
            L2 { src: GW_BACK_MAC, dst: backend_mac(11) },
            (TAGGED_SNAT, 1024),
            (ip(TAGGED_BACKEND), 8080),
            b"ping",
            63,
        ),
        VLAN_BACK,
    );
    assert_eq!(run(0, &q, FRONT, &t, &mut st), (tx(BACK, &want), want));
    // The tagged reply goes back to the untagged client: the frame shrinks by the tag.
    let r = tag(
        &frames::udp(
            L2 { src: backend_mac(11), dst: GW_BACK_MAC },
            (ip(TAGGED_BACKEND), 8080),
            (TAGGED_SNAT, 1024),
            b"pong",
            64,
        ),
        VLAN_BACK,
    );
    let want = frames::udp(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, (VIP, 80), CLIENT, b"pong", 63);
    assert_eq!(run(SEC, &r, BACK, &t, &mut st), (tx(FRONT, &want), want));

    // Tagged client → untagged endpoint, and back.
    let (t, mut st) = (table(&["10.70.0.12"]), vlan_state());
    let q = tag(&frames::udp(to_gw(), TAGGED_CLIENT, (VIP, 80), b"ping", 64), VLAN_FRONT);
    let want =
        frames::udp(L2 { src: GW_BACK_MAC, dst: backend_mac(12) }, (SNAT, 1024), (ip("10.70.0.12"), 8080), b"ping", 63);
    assert_eq!(run(0, &q, FRONT, &t, &mut st), (tx(BACK, &want), want));
    let r =
        frames::udp(L2 { src: backend_mac(12), dst: GW_BACK_MAC }, (ip("10.70.0.12"), 8080), (SNAT, 1024), b"pong", 64);
    let want =
        tag(&frames::udp(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, (VIP, 80), TAGGED_CLIENT, b"pong", 63), VLAN_FRONT);
    assert_eq!(run(SEC, &r, BACK, &t, &mut st), (tx(FRONT, &want), want));
}

#[test]
fn a_frame_without_room_for_the_tag_is_dropped() {
    let (t, mut st) = (table(&[TAGGED_BACKEND]), vlan_state());
    let q = frames::udp(to_gw(), CLIENT, (VIP, 80), b"ping", 64);
    let mut buf = q.clone(); // exactly the frame: no room for 4 more bytes
    let meta = Meta { iface: FRONT, len: q.len(), l4_csum_partial: false, ..Meta::default() };
    assert_eq!(process(0, &mut buf, &meta, &t, &mut st), Verdict::Drop(DropReason::Oversize));
    assert_eq!(st.counters.drops_of(DropReason::Oversize), 1);
}

#[test]
fn arp_on_a_vlan_is_answered_and_resolved_on_that_vlan() {
    let (t, mut st) = (table(&["10.80.0.50"]), vlan_state());
    for target in [VIP, ip("192.0.2.1")] {
        let req = tag(
            &frames::arp(
                L2 { src: CLIENT_MAC, dst: MacAddr::BROADCAST },
                ArpOperation::Request,
                CLIENT_MAC,
                TAGGED_CLIENT.0,
                MacAddr::UNSPECIFIED,
                target,
            ),
            VLAN_FRONT,
        );
        let want = tag(
            &frames::arp(
                L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
                ArpOperation::Reply,
                GW_FRONT_MAC,
                target,
                CLIENT_MAC,
                TAGGED_CLIENT.0,
            ),
            VLAN_FRONT,
        );
        assert_eq!(run(0, &req, FRONT, &t, &mut st), (tx(FRONT, &want), want), "ARP for {target}");
    }
    // The client on VLAN 100's subnet was learned from its request.
    assert_eq!(st.neighbours.lookup(TAGGED_CLIENT.0).map(|n| n.mac), Some(CLIENT_MAC));

    // An endpoint on VLAN 200 is resolved with a tagged request from the VLAN's address.
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NeighbourUnresolved));
    let mut buf = [0u8; POLL_TRANSMIT_LEN];
    let (port, len) = poll_transmit(0, &mut buf, &mut st).expect("an ARP request");
    let want = tag(
        &frames::arp(
            L2 { src: GW_BACK_MAC, dst: MacAddr::BROADCAST },
            ArpOperation::Request,
            GW_BACK_MAC,
            TAGGED_SNAT,
            MacAddr::UNSPECIFIED,
            ip("10.80.0.50"),
        ),
        VLAN_BACK,
    );
    assert_eq!((port, &buf[..len]), (BACK, &want[..]));
}

#[test]
fn echo_and_reject_answer_on_the_vlan_they_came_from() {
    let (t, mut st) = (table(&[TAGGED_BACKEND]), vlan_state());
    let req = tag(&frames::icmp_echo(to_gw(), TAGGED_CLIENT.0, VIP, 9, 1, b"abcdefgh", false), VLAN_FRONT);
    let reply =
        frames::icmp_echo(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, VIP, TAGGED_CLIENT.0, 9, 1, b"abcdefgh", true);
    let want = tag(&reply, VLAN_FRONT);
    assert_eq!(run(0, &req, FRONT, &t, &mut st), (tx(FRONT, &want), want));

    // A priority-tagged frame (VID 0, PCP 5) belongs to the untagged interface; the answer
    // leaves untagged, as Linux sends on the parent device.
    let req = frames::tagged(&frames::icmp_echo(to_gw(), CLIENT.0, VIP, 9, 1, b"abcdefgh", false), 0x8100, 5 << 13);
    let want = frames::icmp_echo(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, VIP, CLIENT.0, 9, 1, b"abcdefgh", true);
    assert_eq!(run(0, &req, FRONT, &t, &mut st), (tx(FRONT, &want), want));

    // A front door without endpoints rejects on the VLAN: a tagged RST, a tagged ICMP error.
    let syn = tag(&frames::tcp(to_gw(), TAGGED_CLIENT, (EMPTY_VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64), VLAN_FRONT);
    let mut want = rst((EMPTY_VIP, 80), TAGGED_CLIENT, TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0), 0, 1001);
    want = tag(&want, VLAN_FRONT);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(FRONT, &want), want));
    let q = tag(&frames::udp(to_gw(), TAGGED_CLIENT, (EMPTY_VIP, 9), b"hello, anyone?", 64), VLAN_FRONT);
    let (v, out) = run(0, &q, FRONT, &t, &mut st);
    assert_eq!(v, tx(FRONT, &out));
    assert_eq!(&out[12..16], &[0x81, 0x00, 0x00, VLAN_FRONT as u8]);
    let ip4 = Ipv4Packet::new_checked(&out[18..]).unwrap();
    assert!(ip4.verify_checksum());
    assert_eq!((ip4.src_addr(), ip4.dst_addr(), ip4.next_header()), (EMPTY_VIP, TAGGED_CLIENT.0, IpProtocol::Icmp));
    let icmp = Icmpv4Packet::new_checked(ip4.payload()).unwrap();
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (Icmpv4Type::DstUnreachable, 3));
    assert_eq!(icmp.data(), &q[18..18 + 28]);
}

#[test]
fn unknown_and_stacked_vlans_are_counted_drops() {
    let (t, mut st) = (table(&[TAGGED_BACKEND]), vlan_state());
    let inner = frames::udp(to_gw(), TAGGED_CLIENT, (VIP, 80), b"x", 64);
    // VLAN 300 is not configured on the port; VLAN 200 is, but on the other port.
    for (vid, port, mac) in
        [(300, FRONT, GW_FRONT_MAC), (VLAN_BACK, FRONT, GW_FRONT_MAC), (VLAN_FRONT, BACK, GW_BACK_MAC)]
    {
        let f = tag(&frames::udp(L2 { src: CLIENT_MAC, dst: mac }, TAGGED_CLIENT, (VIP, 80), b"x", 64), vid);
        assert_eq!(run(0, &f, port, &t, &mut st).0, Verdict::Drop(DropReason::UnknownVlan), "VLAN {vid}");
    }
    // An 802.1ad S-tag outside, or a C-tag inside a C-tag.
    let qinq = frames::tagged(&tag(&inner, VLAN_FRONT), 0x88a8, 7);
    assert_eq!(run(0, &qinq, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::VlanStacked));
    let double = tag(&tag(&inner, VLAN_FRONT), VLAN_FRONT);
    assert_eq!(run(0, &double, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::VlanStacked));
    // A tag cut short.
    let short = tag(&inner, VLAN_FRONT);
    assert_eq!(run(0, &short[..16], FRONT, &t, &mut st).0, Verdict::Drop(DropReason::Truncated));
    assert_eq!(st.counters.drops_of(DropReason::UnknownVlan), 3);
    assert_eq!(st.counters.drops_of(DropReason::VlanStacked), 2);
    assert_eq!(st.conntrack.len(), 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]
    /// No tagged input makes `process` panic on a gateway with VLAN interfaces, whatever the
    /// tag, the corruption and the room left in the buffer; what it transmits fits the
    /// buffer.
    #[test]
    fn arbitrary_tagged_frames_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
                                           flips in proptest::collection::vec((0usize..80, proptest::prelude::any::<u8>()), 0..4),
                                           tci in proptest::prelude::any::<u16>(), tpid in 0u8..3, port in 0u8..3,
                                           kind in 0u8..4, room in 0usize..8) {
        let (t, mut st) = (table(&[TAGGED_BACKEND, "10.70.0.11"]), vlan_state());
        let inner = match kind {
            0 => bytes.clone(),
            1 => frames::udp(to_gw(), TAGGED_CLIENT, (VIP, 80), &bytes, 64),
            2 => frames::udp(to_gw(), TAGGED_CLIENT, (EMPTY_VIP, 9), &bytes, 64),
            _ => frames::icmp_echo(to_gw(), TAGGED_CLIENT.0, VIP, 1, 1, &bytes, false),
        };
        let tpid = [0x8100, 0x88a8, 0x0800][usize::from(tpid)];
        let mut frame = if inner.len() >= 12 { frames::tagged(&inner, tpid, tci) } else { inner };
        for (at, x) in flips {
            if let Some(b) = frame.get_mut(at) { *b ^= x; }
        }
        // Sometimes no room for a tag to be added, sometimes no room for an ICMP error.
        let mut buf = vec![0u8; frame.len() + room];
        buf[..frame.len()].copy_from_slice(&frame);
        let meta = Meta { iface: port, len: frame.len(), l4_csum_partial: false, ..Meta::default() };
        if let Verdict::Transmit { len, .. } = process(0, &mut buf, &meta, &t, &mut st) {
            proptest::prop_assert!(len <= buf.len());
        }
    }
}
