//! Golden packet tests of [`process`]: a host and table fixture, an input frame, the
//! expected verdict and the expected output frame, built independently with
//! [`crate::frames`] (full checksums) and compared byte for byte.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::*;
use crate::config::Config;
use crate::counters::FrontendCount;
use crate::frames::{self, L2};
use crate::host::Host;
use crate::table::{build, layout, BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec, TableSpec};
use crate::wire::{
    ArpOperation, EthernetFrame, Icmpv4Packet, Icmpv4Type, IpProtocol, Ipv4Packet, MacAddr, TcpFlags, TcpPacket,
    UdpPacket,
};

const FRONT: u8 = 0;
const BACK: u8 = 1;
const GW_FRONT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xf0, 0x01]);
const GW_BACK_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xf0, 0x02]);
const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xc0, 0x01]);
const SEC: u64 = 1_000_000_000;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn backend_mac(last: u8) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0xb0, last])
}
const CLIENT: (Ipv4Addr, u16) = (Ipv4Addr::new(198, 51, 100, 10), 40000);
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const EMPTY_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 11);
const SNAT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);

fn to_gw() -> L2 {
    L2 { src: CLIENT_MAC, dst: GW_FRONT_MAC }
}

/// `f` padded to 74 bytes with the bytes at the `changes`' offsets replaced and its length
/// cut by `cut` (never into the Ethernet header): the frame, its length, and whether nothing
/// was changed or cut. For the property tests that feed the early and plain parses any frame.
fn mutated(mut f: Vec<u8>, changes: Vec<(usize, u8)>, cut: usize) -> (Vec<u8>, usize, bool) {
    f.resize(f.len().max(74), 0);
    let untouched = changes.is_empty() && cut == 0;
    for (at, byte) in changes {
        f[at] = byte;
    }
    let len = f.len() - cut.min(f.len() - 14);
    (f, len, untouched)
}

fn table(web_backends: &[&str]) -> Table {
    table_with_affinity(web_backends, None)
}

fn table_with_affinity(web_backends: &[&str], affinity_timeout_s: Option<u32>) -> Table {
    let web = ServiceSpec {
        name: "demo/web:http".into(),
        backends: web_backends.iter().map(|a| BackendSpec { addr: a.parse().unwrap(), port: 8080 }).collect(),
        affinity_timeout_s,
        draining: vec![],
    };
    let echo = ServiceSpec {
        name: "demo/echo:echo".into(),
        backends: vec![BackendSpec { addr: "10.70.0.21".parse().unwrap(), port: 7007 }],
        affinity_timeout_s: None,
        draining: vec![],
    };
    let empty =
        ServiceSpec { name: "demo/empty:".into(), backends: vec![], affinity_timeout_s: None, draining: vec![] };
    let fe = |a: Ipv4Addr, protocol, port, service| FrontendSpec {
        addr: IpAddr::V4(a),
        port,
        protocol,
        kind: FrontendKind::ExternalIp,
        service,
        source_ranges: vec![],
    };
    let spec = TableSpec {
        frontends: vec![
            fe(VIP, Protocol::Tcp, 80, 0),
            fe(VIP, Protocol::Udp, 80, 0),
            fe(VIP, Protocol::Udp, 7, 1),
            fe(EMPTY_VIP, Protocol::Tcp, 80, 2),
            fe(EMPTY_VIP, Protocol::Udp, 9, 2),
        ],
        services: vec![web, echo, empty],
    };
    Table::new(crate::table::Storage::Owned(build(&spec, next_generation()).unwrap())).unwrap()
}

/// A table generation never given before: every table a new one, as the control plane
/// publishes them.
fn next_generation() -> u64 {
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn state(worker: usize, workers: usize) -> WorkerState {
    state_with_capacity(worker, workers, 1024)
}

/// [`state`] with a conntrack of `capacity` flows.
fn state_with_capacity(worker: usize, workers: usize, capacity: usize) -> WorkerState {
    let config = Config::embedded_default();
    let host = Arc::new(Host::new(&config, &[GW_FRONT_MAC, GW_BACK_MAC]));
    let shared = Shared::new(64, 1024);
    for last in [11u8, 12, 13, 21] {
        shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, last), backend_mac(last), 0);
    }
    WorkerState::new(worker, workers, host, &shared, capacity, 7)
}

/// Runs `process` on `input`, returning the verdict and the output frame.
fn run(now: u64, input: &[u8], iface: u8, t: &Table, st: &mut WorkerState) -> (Verdict, Vec<u8>) {
    let mut buf = vec![0u8; 2048];
    buf[..input.len()].copy_from_slice(input);
    let meta = Meta { iface, len: input.len(), l4_csum_partial: false, ..Meta::default() };
    let v = process(now, &mut buf, &meta, t, st);
    let out = match v {
        Verdict::Transmit { len, .. } => buf[..len].to_vec(),
        _ => Vec::new(),
    };
    (v, out)
}

/// The buffers (each frame at the start of 256 bytes) and metadata of a burst of
/// `(frame, arrival interface)`, for [`process_burst`].
fn burst_of<F: AsRef<[u8]>>(input: &[(F, u8)]) -> (Vec<[u8; 256]>, Vec<Meta>) {
    let bufs = input
        .iter()
        .map(|(f, _)| {
            let mut buf = [0u8; 256];
            buf[..f.as_ref().len()].copy_from_slice(f.as_ref());
            buf
        })
        .collect();
    let metas =
        input.iter().map(|(f, iface)| Meta { iface: *iface, len: f.as_ref().len(), ..Meta::default() }).collect();
    (bufs, metas)
}

/// A RST as the gateway sends it: window 0.
fn rst(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), flags: TcpFlags, seq: u32, ack: u32) -> Vec<u8> {
    let mut f = frames::tcp(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, src, dst, flags, seq, ack, &[], 64);
    let mut t = TcpPacket::new_unchecked(&mut f[34..]);
    t.set_window_len(0);
    t.fill_checksum(src.0, dst.0);
    f
}

fn tx(iface: u8, frame: &[u8]) -> Verdict {
    Verdict::Transmit { iface, len: frame.len() }
}

fn backend_of(frame: &[u8]) -> Ipv4Addr {
    Ipv4Packet::new_checked(&frame[14..]).unwrap().dst_addr()
}

#[test]
fn arp_requests_for_vips_and_own_addresses_are_answered() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    for (target, iface, mac) in
        [(VIP, FRONT, GW_FRONT_MAC), (ip("198.51.100.1"), FRONT, GW_FRONT_MAC), (SNAT, BACK, GW_BACK_MAC)]
    {
        let peer = if iface == FRONT { (CLIENT_MAC, CLIENT.0) } else { (backend_mac(11), ip("10.70.0.11")) };
        let req = frames::arp(
            L2 { src: peer.0, dst: MacAddr::BROADCAST },
            ArpOperation::Request,
            peer.0,
            peer.1,
            MacAddr::UNSPECIFIED,
            target,
        );
        let want = frames::arp(L2 { src: mac, dst: peer.0 }, ArpOperation::Reply, mac, target, peer.0, peer.1);
        assert_eq!(run(0, &req, iface, &t, &mut st), (tx(iface, &want), want), "ARP for {target}");
    }
    let other = frames::arp(
        L2 { src: CLIENT_MAC, dst: MacAddr::BROADCAST },
        ArpOperation::Request,
        CLIENT_MAC,
        CLIENT.0,
        MacAddr::UNSPECIFIED,
        ip("198.51.100.77"),
    );
    assert_eq!(run(0, &other, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::ArpNotForUs));
    assert_eq!(st.counters.arp_replies, 3);
}

#[test]
fn tcp_flow_is_translated_both_ways_and_keeps_its_backend() {
    let (t, mut st) = (table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]), state(0, 1));
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let (v, out) = run(0, &syn, FRONT, &t, &mut st);
    let backend = backend_of(&out);
    let last = backend.octets()[3];
    // Worker 0 of 1 hands out the first port of the range first.
    let want = frames::tcp(
        L2 { src: GW_BACK_MAC, dst: backend_mac(last) },
        (SNAT, 1024),
        (backend, 8080),
        TcpFlags::SYN,
        1000,
        0,
        &[],
        63,
    );
    assert_eq!((v, &out), (tx(BACK, &want), &want));

    let syn_ack = frames::tcp(
        L2 { src: backend_mac(last), dst: GW_BACK_MAC },
        (backend, 8080),
        (SNAT, 1024),
        TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
        5000,
        1001,
        &[],
        64,
    );
    let want_back = frames::tcp(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        (VIP, 80),
        CLIENT,
        TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
        5000,
        1001,
        &[],
        63,
    );
    assert_eq!(run(SEC, &syn_ack, BACK, &t, &mut st), (tx(FRONT, &want_back), want_back));

    // Later segments keep their endpoint across table changes that keep it, whatever else
    // changes: conntrack stores the endpoint, not a table index.
    let t2 = table(&[&backend.to_string(), "10.70.0.99"]);
    let data = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1001, 5001, b"GET / HTTP/1.1\r\n\r\n", 64);
    let (v, out) = run(2 * SEC, &data, FRONT, &t2, &mut st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }));
    assert_eq!(backend_of(&out), backend);
    let tcp = TcpPacket::new_checked(&out[34..]).unwrap();
    assert!(tcp.verify_checksum(SNAT, backend));
    assert_eq!(tcp.payload(), b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(st.counters.new_flows, 1);
    assert_eq!((st.counters.forwarded_original, st.counters.forwarded_reply), (2, 1));
}

#[test]
fn new_flows_spread_over_all_backends() {
    let (t, mut st) = (table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]), state(0, 1));
    let mut seen = std::collections::HashMap::new();
    for port in 0..300u16 {
        let syn = frames::tcp(to_gw(), (CLIENT.0, 20000 + port), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
        let (v, out) = run(0, &syn, FRONT, &t, &mut st);
        assert!(matches!(v, Verdict::Transmit { .. }), "{v:?}");
        *seen.entry(backend_of(&out)).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.values().all(|&n| n > 50), "{seen:?}");
}

#[test]
fn udp_round_trip() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (VIP, 7), b"ping", 64);
    let want =
        frames::udp(L2 { src: GW_BACK_MAC, dst: backend_mac(21) }, (SNAT, 1024), (ip("10.70.0.21"), 7007), b"ping", 63);
    assert_eq!(run(0, &q, FRONT, &t, &mut st), (tx(BACK, &want), want));
    let r = frames::udp(
        L2 { src: backend_mac(21), dst: GW_BACK_MAC },
        (ip("10.70.0.21"), 7007),
        (SNAT, 1024),
        b"echo:ping",
        64,
    );
    let want = frames::udp(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, (VIP, 7), CLIENT, b"echo:ping", 63);
    assert_eq!(run(0, &r, BACK, &t, &mut st), (tx(FRONT, &want), want));
}

#[test]
fn front_door_without_endpoints_rejects_tcp_with_rst() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let syn = frames::tcp(to_gw(), CLIENT, (EMPTY_VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    // RFC 9293 § 3.10.7.1: no ACK in the SYN → <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    let want = rst((EMPTY_VIP, 80), CLIENT, TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0), 0, 1001);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(FRONT, &want), want));
    let ack = frames::tcp(to_gw(), CLIENT, (EMPTY_VIP, 80), TcpFlags::ACK, 1001, 777, b"x", 64);
    let want = rst((EMPTY_VIP, 80), CLIENT, TcpFlags::RST, 777, 0);
    assert_eq!(run(0, &ack, FRONT, &t, &mut st), (tx(FRONT, &want), want));
    let rst = frames::tcp(to_gw(), CLIENT, (EMPTY_VIP, 80), TcpFlags::RST, 1, 0, &[], 64);
    assert!(matches!(run(0, &rst, FRONT, &t, &mut st).0, Verdict::Drop(_)), "never answer a RST");
    assert_eq!(st.counters.rejected, 2);
    assert_eq!(st.conntrack.len(), 0);
}

#[test]
fn front_door_without_endpoints_rejects_udp_with_port_unreachable() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (EMPTY_VIP, 9), b"hello, anyone?", 64);
    let (v, out) = run(0, &q, FRONT, &t, &mut st);
    assert_eq!(v, tx(FRONT, &out));
    let e = EthernetFrame::new_checked(&out[..]).unwrap();
    assert_eq!((e.dst_addr(), e.src_addr()), (CLIENT_MAC, GW_FRONT_MAC));
    let ip4 = Ipv4Packet::new_checked(&out[14..]).unwrap();
    assert!(ip4.verify_checksum());
    assert_eq!((ip4.src_addr(), ip4.dst_addr(), ip4.next_header()), (EMPTY_VIP, CLIENT.0, IpProtocol::Icmp));
    let icmp = Icmpv4Packet::new_checked(ip4.payload()).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (Icmpv4Type::DstUnreachable, 3));
    // The quote is the original IP header and the first 8 bytes of the datagram.
    assert_eq!(icmp.data(), &q[14..14 + 28]);
}

#[test]
fn echo_requests_to_vips_are_answered() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let req = frames::icmp_echo(to_gw(), CLIENT.0, VIP, 0x1234, 7, b"abcdefgh", false);
    let want =
        frames::icmp_echo(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, VIP, CLIENT.0, 0x1234, 7, b"abcdefgh", true);
    assert_eq!(run(0, &req, FRONT, &t, &mut st), (tx(FRONT, &want), want));
    let other = frames::icmp_echo(to_gw(), CLIENT.0, ip("203.0.113.99"), 1, 1, b"", false);
    assert_eq!(run(0, &other, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NoFrontend));
}

#[test]
fn malformed_and_unwanted_frames_are_counted_drops() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let good = frames::udp(to_gw(), CLIENT, (VIP, 7), b"ping", 64);
    let mut cases: Vec<(&str, Vec<u8>, DropReason)> = Vec::new();
    cases.push(("runt", good[..10].to_vec(), DropReason::Truncated));
    cases.push(("truncated IPv4", good[..30].to_vec(), DropReason::MalformedIpv4));
    let mut bad_sum = good.clone();
    bad_sum[14 + 10] ^= 0xff;
    cases.push(("IPv4 checksum", bad_sum, DropReason::BadIpv4Checksum));
    let mut other_mac = good.clone();
    other_mac[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    cases.push(("someone else's MAC", other_mac, DropReason::NotOurMac));
    let mut frag = frames::icmp_echo(to_gw(), CLIENT.0, VIP, 1, 1, b"ping", false);
    {
        let mut p = Ipv4Packet::new_unchecked(&mut frag[14..]);
        p.set_more_frags(true);
        p.fill_checksum();
    }
    cases.push(("fragmented ICMP", frag, DropReason::Fragment));
    let mut later = good.clone();
    {
        let mut p = Ipv4Packet::new_unchecked(&mut later[14..]);
        p.set_frag_offset(1480);
        p.fill_checksum();
    }
    cases.push(("later fragment without its first", later, DropReason::FragmentNoFirst));
    cases.push(("no front door", frames::udp(to_gw(), CLIENT, (VIP, 8), b"x", 64), DropReason::NoFrontend));
    cases.push(("TTL 1", frames::udp(to_gw(), CLIENT, (VIP, 7), b"x", 1), DropReason::TtlExceeded));
    let mut short_udp = good.clone();
    short_udp[38..40].copy_from_slice(&4u16.to_be_bytes());
    cases.push(("UDP length < 8", short_udp, DropReason::MalformedL4));
    let mut v6 = good.clone();
    v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    cases.push(("IPv4 in an IPv6 frame", v6, DropReason::MalformedIpv6));
    let mut other_type = good.clone();
    other_type[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    cases.push(("local experimental EtherType", other_type, DropReason::UnsupportedEtherType));
    cases.push((
        "reply without a flow",
        frames::udp(L2 { src: backend_mac(21), dst: GW_BACK_MAC }, (ip("10.70.0.21"), 7007), (SNAT, 5555), b"x", 64),
        DropReason::NoFrontend,
    ));
    for (what, frame, reason) in cases {
        let iface = if what == "reply without a flow" { BACK } else { FRONT };
        assert_eq!(run(0, &frame, iface, &t, &mut st).0, Verdict::Drop(reason), "{what}");
        assert!(st.counters.drops_of(reason) >= 1, "{what} counted");
    }
    assert_eq!(st.conntrack.len(), 0);
}

#[test]
fn unresolved_next_hop_queues_an_arp_request() {
    let (t, mut st) = (table(&["10.70.0.50"]), state(0, 1));
    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NeighbourUnresolved));
    let mut buf = [0u8; POLL_TRANSMIT_LEN];
    let (iface, len) = poll_transmit(0, &mut buf, &mut st).expect("an ARP request");
    let want = frames::arp(
        L2 { src: GW_BACK_MAC, dst: MacAddr::BROADCAST },
        ArpOperation::Request,
        GW_BACK_MAC,
        SNAT,
        MacAddr::UNSPECIFIED,
        ip("10.70.0.50"),
    );
    assert_eq!((iface, &buf[..len]), (BACK, &want[..]));
    assert!(poll_transmit(0, &mut buf, &mut st).is_none(), "not repeated before the retry interval");
    assert!(poll_transmit(2 * SEC, &mut buf, &mut st).is_some(), "repeated after it");
    // The reply is learned; the retransmitted SYN goes through on the flow already created.
    let reply = frames::arp(
        L2 { src: backend_mac(50), dst: GW_BACK_MAC },
        ArpOperation::Reply,
        backend_mac(50),
        ip("10.70.0.50"),
        GW_BACK_MAC,
        SNAT,
    );
    assert_eq!(run(3 * SEC, &reply, BACK, &t, &mut st).0, Verdict::Consumed);
    let (v, out) = run(3 * SEC, &syn, FRONT, &t, &mut st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }));
    assert_eq!(&out[0..6], &backend_mac(50).0);
    assert!(poll_transmit(3 * SEC, &mut buf, &mut st).is_none());
}

#[test]
fn idle_flows_expire_and_free_their_snat_port() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (VIP, 7), b"a", 64);
    run(0, &q, FRONT, &t, &mut st);
    assert_eq!(st.conntrack.len(), 1);
    assert_eq!(poll_expire(29 * SEC, 1024, &mut st), 0);
    assert_eq!(poll_expire(31 * SEC, 1024, &mut st), 1);
    assert_eq!(st.conntrack.len(), 0);
    // A new flow after expiry works (and its port came back to the pool).
    let (v, _) = run(32 * SEC, &q, FRONT, &t, &mut st);
    assert!(matches!(v, Verdict::Transmit { .. }));
    assert_eq!(st.counters.expired_flows, 1);
}

#[test]
fn snat_ports_follow_the_worker() {
    for (w, n) in [(0, 2), (1, 2), (2, 3)] {
        let (t, mut st) = (table(&["10.70.0.11"]), state(w, n));
        for k in 0..10u16 {
            let q = frames::udp(to_gw(), (CLIENT.0, 30000 + k), (VIP, 7), b"a", 64);
            let (_, out) = run(0, &q, FRONT, &t, &mut st);
            let port = UdpPacket::new_checked(&out[34..]).unwrap().src_port();
            assert_eq!(crate::io::fanout::owner_of_port(port, n), w);
        }
    }
}

#[test]
fn client_ip_affinity_holds_across_connections_and_workers_until_it_times_out() {
    let t = table_with_affinity(&["10.70.0.11", "10.70.0.12", "10.70.0.13"], Some(60));
    let shared = Shared::new(64, 1024);
    for last in [11u8, 12, 13, 21] {
        shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, last), backend_mac(last), 0);
    }
    let host = Arc::new(Host::new(&Config::embedded_default(), &[GW_FRONT_MAC, GW_BACK_MAC]));
    let mut workers: Vec<WorkerState> =
        (0..2).map(|w| WorkerState::new(w, 2, Arc::clone(&host), &shared, 1024, 7)).collect();
    // The clients below take turns on a clock that restarts for each: to the SYN proxy's
    // rate meter that is a burst of SYNs, not what this test is about.
    for w in &mut workers {
        w.synproxy = crate::conntrack::synproxy::SynProxy::new(false, 0, 0, 0);
    }
    // Many clients: each one's connections (on either worker) all reach one endpoint.
    let mut per_client = std::collections::HashMap::new();
    for client in 1..=40u8 {
        // 198.51.100.1 is the gateway's own (a martian source).
        let src = Ipv4Addr::new(198, 51, 100, 10 + client);
        for port in 0..6u16 {
            let syn = frames::tcp(to_gw(), (src, 30000 + port), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
            let (v, out) = run(SEC * u64::from(port), &syn, FRONT, &t, &mut workers[usize::from(port % 2)]);
            assert!(matches!(v, Verdict::Transmit { .. }), "{v:?}");
            let b = backend_of(&out);
            assert_eq!(*per_client.entry(client).or_insert(b), b, "client {src} moved");
        }
    }
    let used: std::collections::HashSet<_> = per_client.values().collect();
    assert_eq!(used.len(), 3, "clients spread over the endpoints: {per_client:?}");

    // The affinity outlives table changes while its endpoint stays, even if others join.
    let client = Ipv4Addr::new(198, 51, 100, 11);
    let first = per_client[&1];
    let bigger = table_with_affinity(&["10.70.0.11", "10.70.0.12", "10.70.0.13", "10.70.0.14", "10.70.0.15"], Some(60));
    for port in 100..110u16 {
        let syn = frames::tcp(to_gw(), (client, 30000 + port), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
        let (_, out) = run(10 * SEC, &syn, FRONT, &bigger, &mut workers[0]);
        assert_eq!(backend_of(&out), first);
    }
    // When its endpoint leaves, the client is placed anew, and stays there.
    let others: Vec<String> =
        ["10.70.0.11", "10.70.0.12", "10.70.0.13"].iter().filter(|a| ip(a) != first).map(|a| a.to_string()).collect();
    let smaller = table_with_affinity(&others.iter().map(String::as_str).collect::<Vec<_>>(), Some(60));
    let mut after = None;
    for port in 200..206u16 {
        let syn = frames::tcp(to_gw(), (client, 30000 + port), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
        let (_, out) = run(20 * SEC, &syn, FRONT, &smaller, &mut workers[usize::from(port % 2)]);
        let b = backend_of(&out);
        assert_ne!(b, first);
        assert_eq!(*after.get_or_insert(b), b);
    }
    // 60 s after the client's last new connection, the affinity is gone: the choice is by
    // the ring again, which for this client may or may not be the same endpoint, but the
    // table no longer holds it.
    let skey = crate::affinity::service_key("demo/web:http");
    let c16 = layout::addr16(IpAddr::V4(client));
    assert!(shared.affinity.lookup(skey, c16, 79 * SEC).is_some());
    assert!(shared.affinity.lookup(skey, c16, 81 * SEC).is_none());
}

/// A flow's client address and port, and the endpoint it was steered to.
type Steered = ((Ipv4Addr, u16), Ipv4Addr);

/// Opens one TCP and one UDP flow to [`VIP`]:80 from each of 30 client ports; returns
/// both lists with their endpoints. (The TCP flows are picked up mid-stream, so they are
/// ESTABLISHED without a handshake.)
fn open_flows(t: &Table, st: &mut WorkerState) -> (Vec<Steered>, Vec<Steered>) {
    let mut tcp_flows = Vec::new();
    let mut udp_flows = Vec::new();
    for port in 0..30u16 {
        let c = (CLIENT.0, 20000 + port);
        let (_, out) = run(0, &frames::tcp(to_gw(), c, (VIP, 80), TcpFlags::ACK, 1, 0, &[], 64), FRONT, t, st);
        tcp_flows.push((c, backend_of(&out)));
        let (_, out) = run(0, &frames::udp(to_gw(), c, (VIP, 80), b"a", 64), FRONT, t, st);
        udp_flows.push((c, backend_of(&out)));
    }
    (tcp_flows, udp_flows)
}

#[test]
fn a_removed_endpoint_resets_tcp_and_resteers_udp() {
    let t = table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]);
    let mut st = state(0, 1);
    let (tcp_flows, udp_flows) = open_flows(&t, &mut st);
    let gone = ip("10.70.0.12");
    let t2 = table(&["10.70.0.11", "10.70.0.13"]);
    for (c, b) in tcp_flows {
        let ack = frames::tcp(to_gw(), c, (VIP, 80), TcpFlags::ACK, 2, 777, b"more", 64);
        let (v, out) = run(SEC, &ack, FRONT, &t2, &mut st);
        if b == gone {
            // RFC 9293 § 3.10.7.1: the segment carries an ACK, so the RST's SEQ is its ACK.
            let want = rst((VIP, 80), c, TcpFlags::RST, 777, 0);
            assert_eq!((v, out), (tx(FRONT, &want), want), "flow of {c:?} to the removed endpoint");
        } else {
            assert_eq!(backend_of(&out), b, "flow of {c:?} to a surviving endpoint is undisturbed");
        }
    }
    let (udp_gone, udp_kept): (Vec<_>, Vec<_>) = udp_flows.into_iter().partition(|(_, b)| *b == gone);
    assert!(!udp_gone.is_empty());
    for (c, b) in udp_kept.into_iter().chain(udp_gone.iter().copied()) {
        let (v, out) = run(SEC, &frames::udp(to_gw(), c, (VIP, 80), b"b", 64), FRONT, &t2, &mut st);
        assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
        let now = backend_of(&out);
        assert_ne!(now, gone);
        if b != gone {
            assert_eq!(now, b);
        }
    }
    assert!(st.counters.endpoint_gone > 0);
}

/// A worker numbers the tables it uses with 16-bit epochs, which a flow records
/// (`FlowState::table_epoch`), and the numbers wrap after 65 535 tables. A flow validated
/// against the table that had epoch 1 before the wrap must not pass for validated against
/// the table that has epoch 1 after it: the flows of an endpoint removed in that table
/// are still reset and the others revalidated (the wrap resets every flow's epoch).
#[test]
fn a_flow_validated_before_the_table_epochs_wrap_is_revalidated_after_it() {
    let t = table(&["10.70.0.11", "10.70.0.12", "10.70.0.13"]);
    let mut st = state(0, 1);
    let (tcp_flows, _) = open_flows(&t, &mut st);
    assert_eq!(st.table_epoch(&t), 1, "the worker's first table");
    // 65 534 tables more (only their generations matter), the last numbered 65 535.
    let other = u64::MAX / 2;
    for g in 0..u64::from(u16::MAX) - 1 {
        st.epoch_of(other + g);
    }
    assert_eq!(st.epoch_of(other + u64::from(u16::MAX) - 2), u16::MAX);
    let gone = ip("10.70.0.12");
    let t2 = table(&["10.70.0.11", "10.70.0.13"]);
    assert_eq!(st.table_epoch(&t2), 1, "numbered 1 again after the wrap");
    let mut reset = 0;
    for (c, b) in tcp_flows {
        let ack = frames::tcp(to_gw(), c, (VIP, 80), TcpFlags::ACK, 2, 777, b"more", 64);
        let (v, out) = run(SEC, &ack, FRONT, &t2, &mut st);
        if b == gone {
            let want = rst((VIP, 80), c, TcpFlags::RST, 777, 0);
            assert_eq!((v, out), (tx(FRONT, &want), want), "flow of {c:?} to the removed endpoint");
            reset += 1;
        } else {
            assert_eq!(backend_of(&out), b, "flow of {c:?} to a surviving endpoint is undisturbed");
            let key =
                crate::conntrack::FlowKey { protocol: 6, src_addr: c.0, src_port: c.1, dst_addr: VIP, dst_port: 80 };
            let (id, _) = st.conntrack.lookup(&key).unwrap();
            assert_eq!(st.conntrack.state(id).table_epoch, 1, "revalidated against the new table");
        }
    }
    assert!(reset > 0);
    assert_eq!(st.counters.endpoint_gone, reset);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// No input makes `process` panic: random bytes, and valid frames with random
    /// corruption, on any interface.
    #[test]
    fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
                                    flips in proptest::collection::vec((0usize..120, proptest::prelude::any::<u8>()), 0..6),
                                    iface in 0u8..3, kind in 0u8..4) {
        let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
        let mut frame = match kind {
            0 => bytes.clone(),
            1 => frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1, 0, &bytes, 64),
            2 => frames::udp(to_gw(), CLIENT, (EMPTY_VIP, 9), &bytes, 64),
            _ => frames::icmp_echo(to_gw(), CLIENT.0, VIP, 1, 1, &bytes, false),
        };
        for (at, x) in flips {
            if let Some(b) = frame.get_mut(at) { *b ^= x; }
        }
        let mut buf = vec![0u8; frame.len().max(MIN_BUFFER)];
        buf[..frame.len()].copy_from_slice(&frame);
        let meta = Meta { iface, len: frame.len(), l4_csum_partial: false, ..Meta::default() };
        let _ = process(0, &mut buf, &meta, &t, &mut st);
    }
}

/// IPv6: Neighbor Discovery, ICMPv6 echo, IPv6 flows.
mod ipv6;
/// `loadBalancerSourceRanges` and draining endpoints.
mod policy;
/// The endpoint schedulers across workers.
mod scheduler;

/// 802.1Q VLAN interfaces.
mod vlan;

/// TCP states and timeouts, UDP timeouts, conntrack full.
mod conntrack;

/// `process_burst` against `process`.
mod burst;
/// The lean established path against the general path.
mod lean;
/// The general path's plain IPv4 parse against its checked one.
mod segment;
/// Stage 1 of a burst (the early parse) against the full parse.
mod stage1;

/// Per-front-door counters.
mod frontends;

mod fragment;
/// Martian sources, source routes, invalid TCP flags, unknown ARP opcodes, bad L4 checksums.
mod hygiene;
mod icmp_error;
/// L2 mode: answering only for owned VIPs, announcing those taken over.
mod l2;
mod sctp;
/// SYN cookies and the SYN proxy under a SYN flood.
mod synproxy;

/// What the device verified (`Meta::l3_csum_good`, `Meta::l4_csum_good`) is not verified
/// again: a frame whose IPv4 header checksum the device vouched for is forwarded on that
/// word (the same frame without the flag is a `bad_ipv4_checksum` drop).
#[test]
fn device_verified_checksums_are_not_verified_again() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let mut bad_sum = frames::udp(to_gw(), CLIENT, (VIP, 7), b"ping", 64);
    bad_sum[14 + 10] ^= 0xff;
    let mut buf = vec![0u8; 2048];
    for (good, want_forwarded) in [(false, false), (true, true)] {
        buf[..bad_sum.len()].copy_from_slice(&bad_sum);
        let meta = Meta { iface: FRONT, len: bad_sum.len(), l3_csum_good: good, ..Meta::default() };
        let v = process(0, &mut buf, &meta, &t, &mut st);
        assert_eq!(matches!(v, Verdict::Transmit { .. }), want_forwarded, "l3_csum_good {good}: {v:?}");
        if !good {
            assert_eq!(v, Verdict::Drop(DropReason::BadIpv4Checksum));
        }
    }
}
