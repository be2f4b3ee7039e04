//! A million concurrent flows through **one** SNAT address to 20 endpoints, on one worker:
//! more than the 64 512 TCP ports of the SNAT address, which a SNAT port unique per
//! (address, protocol) could not hold. A SNAT port is unique per reply tuple
//! (`torii_gateway::snat`), so each endpoint has its own 64 512 ports.
//!
//! Every flow is opened with a SYN through `pipeline::process_burst` (the worker's real
//! path, look-ahead included) and answered with the endpoint's SYN+ACK, which must come
//! back to its own client: no two flows share a reply tuple. Run in release
//! (`cargo nextest run --release -p torii-gateway --test snat_scale`); about 240 MB for
//! the worker's conntrack tables.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use torii_gateway::config::Config;
use torii_gateway::counters::{Counters, DropReason};
use torii_gateway::frames::{self, L2};
use torii_gateway::host::Host;
use torii_gateway::pipeline::{process_burst, Meta, Shared, Verdict, WorkerState};
use torii_gateway::table::{build, BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec, Table, TableSpec};
use torii_gateway::wire::{Ipv4Packet, MacAddr, TcpFlags, TcpPacket};

const FLOWS: usize = 1_000_000;
const ENDPOINTS: usize = 20;
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const SNAT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);
const FRONT: u8 = 0;
const BACK: u8 = 1;
const GW_MACS: [MacAddr; 2] = [MacAddr([2, 0, 0, 0, 0xf0, 1]), MacAddr([2, 0, 0, 0, 0xf0, 2])];
const BURST: usize = 256;
/// Ports per client address: 250 clients × 4000 ports = 1 M client tuples.
const PORTS_PER_CLIENT: usize = 4000;

fn endpoint(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 70, 0, 100 + i as u8)
}

fn endpoint_mac(i: usize) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0xb0, i as u8])
}

/// Client `n`'s address and port: 198.51.100.2 … .251, ports 10000 …
fn client(n: usize) -> (Ipv4Addr, u16) {
    (Ipv4Addr::new(198, 51, 100, 2 + (n / PORTS_PER_CLIENT) as u8), 10_000 + (n % PORTS_PER_CLIENT) as u16)
}

fn client_mac(addr: Ipv4Addr) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0xc0, addr.octets()[3]])
}

fn table() -> Table {
    let backends = (0..ENDPOINTS).map(|i| BackendSpec { addr: IpAddr::V4(endpoint(i)), port: 8080 }).collect();
    let spec = TableSpec {
        frontends: vec![FrontendSpec {
            addr: IpAddr::V4(VIP),
            port: 80,
            protocol: Protocol::Tcp,
            kind: FrontendKind::ExternalIp,
            service: 0,
            source_ranges: vec![],
        }],
        services: vec![ServiceSpec {
            name: "scale/web:http".into(),
            backends,
            affinity_timeout_s: None,
            draining: vec![],
        }],
    };
    Table::new(torii_gateway::table::Storage::Owned(build(&spec, 1).expect("table"))).expect("valid table")
}

/// Runs `frames` (arriving on `iface`) through `process_burst` in bursts of [`BURST`];
/// calls `check(i, verdict, frame)` for each, in order.
fn run(
    now: u64,
    frames: &[Vec<u8>],
    iface: u8,
    t: &Table,
    st: &mut WorkerState,
    mut check: impl FnMut(usize, Verdict, &[u8]),
) {
    let mut bufs = vec![[0u8; 128]; BURST];
    let mut metas = vec![Meta { iface, len: 0, ..Meta::default() }; BURST];
    let mut verdicts = vec![Verdict::Consumed; BURST];
    for (chunk, base) in frames.chunks(BURST).zip((0..).step_by(BURST)) {
        for (k, f) in chunk.iter().enumerate() {
            bufs[k][..f.len()].copy_from_slice(f);
            metas[k].len = f.len();
        }
        let n = chunk.len();
        process_burst(now, &mut bufs[..n], &metas[..n], t, st, &mut verdicts[..n]);
        for k in 0..n {
            check(base + k, verdicts[k], &bufs[k]);
        }
    }
}

/// Frames dropped, for any reason.
fn dropped(c: &Counters) -> u64 {
    DropReason::ALL.iter().map(|&r| c.drops_of(r)).sum()
}

#[test]
fn a_million_flows_through_one_snat_address_to_twenty_endpoints() {
    let config = Config::embedded_default();
    assert_eq!(config.snat.addresses, [SNAT], "one IPv4 SNAT address");
    let host = Arc::new(Host::new(&config, &GW_MACS));
    let shared = Shared::new(1024, 1024);
    for i in 0..ENDPOINTS {
        shared.neighbours.learn(endpoint(i), endpoint_mac(i), 0);
    }
    let started = Instant::now();
    let mut st = WorkerState::new(0, 1, host, &shared, 1 << 20, 0x5eed);
    // A million SYNs at one instant is a flood to the SYN proxy; this test is about SNAT.
    st.synproxy = torii_gateway::conntrack::synproxy::SynProxy::new(false, 0, 0, 0);
    let t = table();
    let now = 1_000_000_000;

    // Client → VIP: one SYN per flow; note each flow's endpoint and SNAT port.
    let syns: Vec<Vec<u8>> = (0..FLOWS)
        .map(|n| {
            let c = client(n);
            let l2 = L2 { src: client_mac(c.0), dst: GW_MACS[0] };
            frames::tcp(l2, c, (VIP, 80), TcpFlags::SYN, 1, 0, &[], 64)
        })
        .collect();
    let mut chosen = vec![(0u8, 0u16); FLOWS];
    // Reply tuples seen, per endpoint: one bit per SNAT port.
    let mut seen = vec![vec![0u64; 65536 / 64]; ENDPOINTS];
    let mut per_endpoint = [0usize; ENDPOINTS];
    run(now, &syns, FRONT, &t, &mut st, |n, v, out| {
        assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "SYN {n}: {v:?}");
        let ip = Ipv4Packet::new_checked(&out[14..]).expect("IPv4");
        let tcp = TcpPacket::new_checked(&out[34..]).expect("TCP");
        assert_eq!((ip.src_addr(), tcp.dst_port()), (SNAT, 8080), "SYN {n}");
        let e = usize::from(ip.dst_addr().octets()[3] - 100);
        let port = tcp.src_port();
        assert!(port >= 1024, "SYN {n}: SNAT port {port}");
        let (word, bit) = (usize::from(port) / 64, port % 64);
        assert_eq!(seen[e][word] & (1 << bit), 0, "reply tuple {} → {SNAT}:{port} given twice", endpoint(e));
        seen[e][word] |= 1 << bit;
        per_endpoint[e] += 1;
        chosen[n] = (e as u8, port);
    });
    drop(syns);
    let opened = started.elapsed();
    assert_eq!(st.conntrack.len(), FLOWS);
    assert_eq!(st.counters.new_flows, FLOWS as u64);
    assert_eq!((st.counters.conntrack_evicted, dropped(&st.counters)), (0, 0), "no flow refused or evicted");
    assert_eq!(per_endpoint.iter().sum::<usize>(), FLOWS);
    assert!(per_endpoint.iter().all(|&k| k > 0 && k <= 64_512), "{per_endpoint:?}");

    // Endpoint → SNAT address: every SYN+ACK reaches the client of its own flow.
    let replies: Vec<Vec<u8>> = chosen
        .iter()
        .map(|&(e, port)| {
            let e = usize::from(e);
            let l2 = L2 { src: endpoint_mac(e), dst: GW_MACS[1] };
            frames::tcp(
                l2,
                (endpoint(e), 8080),
                (SNAT, port),
                TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
                1,
                2,
                &[],
                64,
            )
        })
        .collect();
    run(now + 1_000_000, &replies, BACK, &t, &mut st, |n, v, out| {
        assert!(matches!(v, Verdict::Transmit { iface: FRONT, .. }), "SYN+ACK {n}: {v:?}");
        let ip = Ipv4Packet::new_checked(&out[14..]).expect("IPv4");
        let tcp = TcpPacket::new_checked(&out[34..]).expect("TCP");
        assert_eq!(
            ((ip.src_addr(), tcp.src_port()), (ip.dst_addr(), tcp.dst_port())),
            ((VIP, 80), client(n)),
            "SYN+ACK {n}"
        );
    });
    assert_eq!(dropped(&st.counters), 0);
    eprintln!(
        "{FLOWS} flows through {SNAT} to {ENDPOINTS} endpoints (per endpoint {}..={}): opened in {:.2} s, \
         answered in {:.2} s more; conntrack {} MB",
        per_endpoint.iter().min().unwrap(),
        per_endpoint.iter().max().unwrap(),
        opened.as_secs_f64(),
        (started.elapsed() - opened).as_secs_f64(),
        (st.conntrack.memory_bytes() + st.conntrack6.memory_bytes()) >> 20,
    );
}
