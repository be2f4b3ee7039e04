//! Golden packet tests of the Service policies the table carries beyond the ring:
//! `loadBalancerSourceRanges` on load-balancer front doors (checked on new flows only) and
//! draining endpoints (kept by established flows, never chosen for new ones).

use super::*;
use crate::table::IpCidr;

/// A load-balancer front door of `demo/web` whose `loadBalancerSourceRanges` admit
/// 198.51.100.0/25 (so [`CLIENT`] but not [`OUTSIDER`]) and an IPv6 range.
const LB_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// A load-balancer front door of `demo/web` without source ranges.
const LB_OPEN_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 21);
/// A load-balancer front door with source ranges of a Service without endpoints.
const LB_EMPTY_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 22);
/// A client outside the source ranges.
const OUTSIDER: (Ipv4Addr, u16) = (Ipv4Addr::new(198, 51, 100, 200), 41000);

/// `demo/web` on [`VIP`] (its externalIP) and its load-balancer IPs, with `backends` on the
/// ring and `draining` endpoints (all on port 8080), and a Service without endpoints;
/// `ranges` are the load-balancer source ranges. Each table is a new generation.
fn policy_table(backends: &[&str], draining: &[&str], ranges: &[&str]) -> Table {
    policy_table_with_affinity(backends, draining, ranges, None)
}

/// [`policy_table`] with `sessionAffinity: ClientIP` for `demo/web`.
fn policy_table_with_affinity(
    backends: &[&str],
    draining: &[&str],
    ranges: &[&str],
    affinity_timeout_s: Option<u32>,
) -> Table {
    let endpoints = |list: &[&str]| -> Vec<BackendSpec> {
        list.iter().map(|a| BackendSpec { addr: a.parse().unwrap(), port: 8080 }).collect()
    };
    let web = ServiceSpec {
        name: "demo/web:http".into(),
        backends: endpoints(backends),
        affinity_timeout_s,
        draining: endpoints(draining),
    };
    let empty =
        ServiceSpec { name: "demo/closed:http".into(), backends: vec![], affinity_timeout_s: None, draining: vec![] };
    let ranges: Vec<IpCidr> = ranges.iter().map(|c| IpCidr::parse(c).unwrap()).collect();
    let fe = |addr: Ipv4Addr, protocol, kind, service, source_ranges: &[IpCidr]| FrontendSpec {
        addr: IpAddr::V4(addr),
        port: 80,
        protocol,
        kind,
        service,
        source_ranges: source_ranges.to_vec(),
    };
    let spec = TableSpec {
        frontends: vec![
            fe(VIP, Protocol::Tcp, FrontendKind::ExternalIp, 0, &[]),
            fe(VIP, Protocol::Udp, FrontendKind::ExternalIp, 0, &[]),
            fe(LB_VIP, Protocol::Tcp, FrontendKind::LoadBalancer, 0, &ranges),
            fe(LB_VIP, Protocol::Udp, FrontendKind::LoadBalancer, 0, &ranges),
            fe(LB_OPEN_VIP, Protocol::Tcp, FrontendKind::LoadBalancer, 0, &[]),
            fe(LB_EMPTY_VIP, Protocol::Tcp, FrontendKind::LoadBalancer, 1, &ranges),
        ],
        services: vec![web, empty],
    };
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 20);
    let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Table::new(crate::table::Storage::Owned(build(&spec, generation).unwrap())).unwrap()
}

const RANGES: [&str; 2] = ["198.51.100.0/25", "2001:db8::/32"];

/// A SYN (sequence number 1000) as forwarded to the only endpoint 10.70.0.11 from SNAT
/// port `snat_port`.
fn forwarded_syn(snat_port: u16) -> Vec<u8> {
    frames::tcp(
        L2 { src: GW_BACK_MAC, dst: backend_mac(11) },
        (SNAT, snat_port),
        (ip("10.70.0.11"), 8080),
        TcpFlags::SYN,
        1000,
        0,
        &[],
        63,
    )
}

/// Opens a TCP connection from `client` to `vip:80` with a full handshake (SYN, the
/// endpoint's SYN-ACK; client sequence numbers from 1000, the endpoint's from 5000), so
/// that the client's next ACK is valid in conntrack; returns its endpoint and SNAT port.
fn handshake(t: &Table, st: &mut WorkerState, client: (Ipv4Addr, u16), vip: Ipv4Addr) -> (Ipv4Addr, u16) {
    let syn = frames::tcp(to_gw(), client, (vip, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let (v, out) = run(0, &syn, FRONT, t, st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "SYN from {client:?}: {v:?}");
    let backend = backend_of(&out);
    let snat_port = TcpPacket::new_checked(&out[34..]).unwrap().src_port();
    let syn_ack = frames::tcp(
        L2 { src: backend_mac(backend.octets()[3]), dst: GW_BACK_MAC },
        (backend, 8080),
        (SNAT, snat_port),
        TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
        5000,
        1001,
        &[],
        64,
    );
    let (v, _) = run(0, &syn_ack, BACK, t, st);
    assert!(matches!(v, Verdict::Transmit { iface: FRONT, .. }), "SYN-ACK to {client:?}: {v:?}");
    (backend, snat_port)
}

#[test]
fn source_ranges_admit_new_flows_from_their_clients_only() {
    let (t, mut st) = (policy_table(&["10.70.0.11"], &[], &RANGES), state(0, 1));
    let denied = (Verdict::Drop(DropReason::SourceRangeDenied), Vec::new());

    // An admitted client is forwarded like on any front door.
    let syn = frames::tcp(to_gw(), CLIENT, (LB_VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let want = forwarded_syn(1024);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(BACK, &want), want), "admitted client");

    // A client outside the ranges is dropped, TCP and UDP, without a flow or a SNAT port.
    let syn = frames::tcp(to_gw(), OUTSIDER, (LB_VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), denied.clone(), "denied client, TCP");
    let dgram = frames::udp(to_gw(), OUTSIDER, (LB_VIP, 80), b"x", 64);
    assert_eq!(run(0, &dgram, FRONT, &t, &mut st), denied.clone(), "denied client, UDP");
    // Denied also where the Service has no endpoint: dropped, not rejected.
    let syn = frames::tcp(to_gw(), OUTSIDER, (LB_EMPTY_VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), denied.clone(), "denied client, no endpoints");
    assert_eq!(st.counters.drops_of(DropReason::SourceRangeDenied), 3);
    assert_eq!((st.conntrack.len(), st.counters.new_flows, st.counters.rejected), (1, 1, 0));

    // The externalIP of the same Service, and a load-balancer IP without ranges, admit
    // everyone (on the next SNAT ports).
    let next = |st: &WorkerState| st.snat.peek(st.host.snat_addresses_on::<Ipv4Addr>(BACK)).unwrap().1;
    let syn = frames::tcp(to_gw(), OUTSIDER, (VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let want = forwarded_syn(next(&st));
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(BACK, &want), want), "externalIP front door");
    let syn = frames::tcp(to_gw(), (OUTSIDER.0, OUTSIDER.1 + 1), (LB_OPEN_VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let want = forwarded_syn(next(&st));
    assert_eq!(run(0, &syn, FRONT, &t, &mut st), (tx(BACK, &want), want), "load balancer without ranges");
    assert_eq!(st.counters.drops_of(DropReason::SourceRangeDenied), 3);
}

#[test]
fn source_ranges_apply_to_new_flows_only() {
    let (t, mut st) = (policy_table(&["10.70.0.11"], &[], &RANGES), state(0, 1));
    assert_eq!(handshake(&t, &mut st, CLIENT, LB_VIP), (ip("10.70.0.11"), 1024));

    // The ranges change and no longer admit the client: its established flow goes on
    // (kube-proxy's firewall matches new connections only); its new flows are dropped.
    let t2 = policy_table(&["10.70.0.11"], &[], &["192.0.2.0/24"]);
    let data = frames::tcp(to_gw(), CLIENT, (LB_VIP, 80), TcpFlags::ACK, 1001, 5001, b"GET /", 64);
    let want = frames::tcp(
        L2 { src: GW_BACK_MAC, dst: backend_mac(11) },
        (SNAT, 1024),
        (ip("10.70.0.11"), 8080),
        TcpFlags::ACK,
        1001,
        5001,
        b"GET /",
        63,
    );
    assert_eq!(run(SEC, &data, FRONT, &t2, &mut st), (tx(BACK, &want), want), "established flow");
    let syn = frames::tcp(to_gw(), (CLIENT.0, CLIENT.1 + 1), (LB_VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    assert_eq!(run(SEC, &syn, FRONT, &t2, &mut st), (Verdict::Drop(DropReason::SourceRangeDenied), Vec::new()));
}

#[test]
fn draining_endpoints_keep_their_flows_and_take_no_new_ones() {
    let all = ["10.70.0.11", "10.70.0.12", "10.70.0.13"];
    let t = policy_table(&all, &[], &[]);
    let mut st = state(0, 1);
    let (tcp_flows, udp_flows) = open_flows(&t, &mut st);
    let terminating = ip("10.70.0.12");
    assert!(tcp_flows.iter().any(|(_, b)| *b == terminating) && udp_flows.iter().any(|(_, b)| *b == terminating));

    // 10.70.0.12 terminates but still serves: off the ring, draining. Every flow keeps
    // its endpoint, the draining one included; no RST, no re-steering.
    let draining = policy_table(&["10.70.0.11", "10.70.0.13"], &["10.70.0.12"], &[]);
    for &(c, b) in &tcp_flows {
        let ack = frames::tcp(to_gw(), c, (VIP, 80), TcpFlags::ACK, 2, 777, b"more", 64);
        let (v, out) = run(SEC, &ack, FRONT, &draining, &mut st);
        assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "TCP flow of {c:?}: {v:?}");
        assert_eq!(backend_of(&out), b, "TCP flow of {c:?} keeps its endpoint");
    }
    for &(c, b) in &udp_flows {
        let (v, out) = run(SEC, &frames::udp(to_gw(), c, (VIP, 80), b"b", 64), FRONT, &draining, &mut st);
        assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "UDP flow of {c:?}: {v:?}");
        assert_eq!(backend_of(&out), b, "UDP flow of {c:?} keeps its endpoint");
    }
    assert_eq!(st.counters.endpoint_gone, 0);
    // New flows never go to the draining endpoint.
    for port in 0..100u16 {
        let c = (CLIENT.0, 30000 + port);
        let (v, out) =
            run(SEC, &frames::tcp(to_gw(), c, (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64), FRONT, &draining, &mut st);
        assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
        assert_ne!(backend_of(&out), terminating, "new flow of {c:?}");
    }

    // It stops serving (or leaves the slice): now its TCP flows get a RST and its UDP
    // flows are re-steered, as for any removed endpoint.
    let gone = policy_table(&["10.70.0.11", "10.70.0.13"], &[], &[]);
    for &(c, b) in &tcp_flows {
        let ack = frames::tcp(to_gw(), c, (VIP, 80), TcpFlags::ACK, 3, 778, b"last", 64);
        let (v, out) = run(2 * SEC, &ack, FRONT, &gone, &mut st);
        if b == terminating {
            let want = rst((VIP, 80), c, TcpFlags::RST, 778, 0);
            assert_eq!((v, out), (tx(FRONT, &want), want), "TCP flow of {c:?} to the endpoint that left");
        } else {
            assert_eq!(backend_of(&out), b, "TCP flow of {c:?} is undisturbed");
        }
    }
    for &(c, b) in &udp_flows {
        let (_, out) = run(2 * SEC, &frames::udp(to_gw(), c, (VIP, 80), b"c", 64), FRONT, &gone, &mut st);
        assert_ne!(backend_of(&out), terminating, "UDP flow of {c:?}");
        if b != terminating {
            assert_eq!(backend_of(&out), b);
        }
    }
    assert!(st.counters.endpoint_gone > 0);
}

#[test]
fn client_ip_affinity_does_not_send_new_flows_to_a_draining_endpoint() {
    let spec_with =
        |backends: &[&str], draining: &[&str]| policy_table_with_affinity(backends, draining, &[], Some(600));
    let all = ["10.70.0.11", "10.70.0.12", "10.70.0.13"];
    let mut st = state(0, 1);
    let syn = |port| frames::tcp(to_gw(), (CLIENT.0, port), (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    let (sticky, _) = handshake(&spec_with(&all, &[]), &mut st, (CLIENT.0, 20000), VIP);
    // The client's endpoint drains: its open connection stays, its next one goes elsewhere
    // (and sticks there).
    let rest: Vec<String> = all.iter().filter(|a| **a != sticky.to_string()).map(|a| a.to_string()).collect();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    let t2 = spec_with(&rest, &[&sticky.to_string()]);
    let ack = frames::tcp(to_gw(), (CLIENT.0, 20000), (VIP, 80), TcpFlags::ACK, 1001, 5001, b"x", 64);
    assert_eq!(backend_of(&run(SEC, &ack, FRONT, &t2, &mut st).1), sticky);
    let (_, out) = run(SEC, &syn(20001), FRONT, &t2, &mut st);
    let next = backend_of(&out);
    assert_ne!(next, sticky);
    assert_eq!(backend_of(&run(SEC, &syn(20002), FRONT, &t2, &mut st).1), next);
}

#[test]
fn a_burst_of_syns_to_front_doors_with_and_without_source_ranges_agrees_with_process() {
    // The burst's visits hand `new_flow` the front door and endpoint; only a front door
    // without ranges is spared its view (`NewFlowHint::all_sources`): admitted and denied
    // clients, both kinds of front door, one burst, against `process` frame by frame.
    let t = policy_table(&["10.70.0.11", "10.70.0.12"], &[], &RANGES);
    let syn = |client: (Ipv4Addr, u16), vip| frames::tcp(to_gw(), client, (vip, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    let burst: Vec<(Vec<u8>, u8)> = (0..20u16)
        .map(|i| {
            let client = if i % 2 == 0 { (CLIENT.0, 42_000 + i) } else { (OUTSIDER.0, 42_000 + i) };
            (syn(client, [LB_VIP, LB_OPEN_VIP, VIP, LB_EMPTY_VIP][usize::from(i % 4)]), FRONT)
        })
        .collect();
    super::burst::agree_on(&t, || state(0, 1), &[burst.clone(), burst]).unwrap();
}
