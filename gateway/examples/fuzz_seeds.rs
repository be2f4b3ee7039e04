//! Writes the seed corpora of the fuzz targets in `gateway/fuzz/`: valid frames of every
//! kind the pipeline handles (as `pipeline_process` records) and a valid table snapshot.
//!
//! `cargo run -p torii-gateway --example fuzz_seeds` (from the repository root).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use torii_gateway::frames::{self, L2};
use torii_gateway::table::{build, BackendSpec, FrontendKind, FrontendSpec, IpCidr, Protocol, ServiceSpec, TableSpec};
use torii_gateway::wire::{ArpOperation, Icmpv4Type, Icmpv6Type, MacAddr, TcpFlags};

fn record(iface: u8, frame: &[u8]) -> Vec<u8> {
    let mut r = vec![iface, (frame.len() >> 8) as u8, frame.len() as u8];
    r.extend_from_slice(frame);
    r
}

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let gw_front = MacAddr([2, 0, 0, 0, 0xf0, 1]);
    let gw_back = MacAddr([2, 0, 0, 0, 0xf0, 2]);
    let client_mac = MacAddr([2, 0, 0, 0, 0xc0, 1]);
    let web_mac = MacAddr([2, 0, 0, 0, 0xb0, 11]);
    let to_gw = L2 { src: client_mac, dst: gw_front };
    let from_web = L2 { src: web_mac, dst: gw_back };
    let client = (Ipv4Addr::new(198, 51, 100, 10), 40000);
    let vip = Ipv4Addr::new(203, 0, 113, 10);
    let snat = Ipv4Addr::new(10, 70, 0, 1);
    let web = Ipv4Addr::new(10, 70, 0, 11);
    let lb_vip = Ipv4Addr::new(203, 0, 113, 13);
    let outsider = (Ipv4Addr::new(198, 51, 100, 200), 40001);
    let v6 = |a: &str| a.parse::<Ipv6Addr>().expect("a valid IPv6 address");
    let client6 = (v6("2001:db8:100::10"), 40000);
    let vip6 = v6("2001:db8:203::10");
    let snat6 = v6("fd00:70::1");
    let web6 = v6("fd00:70::11");

    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("tcp-syn", record(0, &frames::tcp(to_gw, client, (vip, 80), TcpFlags::SYN, 1, 0, &[], 64))),
        (
            "tcp-flow",
            [
                record(0, &frames::tcp(to_gw, client, (vip, 80), TcpFlags::SYN, 1, 0, &[], 64)),
                record(
                    1,
                    &frames::tcp(from_web, (web, 8080), (snat, 1024), TcpFlags::SYN | TcpFlags::ACK, 9, 2, &[], 64),
                ),
                record(0, &frames::tcp(to_gw, client, (vip, 80), TcpFlags::ACK, 2, 10, b"GET / HTTP/1.1\r\n\r\n", 64)),
                record(0, &frames::tcp(to_gw, client, (vip, 80), TcpFlags::FIN | TcpFlags::ACK, 20, 10, &[], 64)),
            ]
            .concat(),
        ),
        ("udp", record(0, &frames::udp(to_gw, client, (vip, 7), b"ping", 64))),
        // The fuzz table's load-balancer front door 203.0.113.13:80 admits 198.51.100.0/25.
        (
            "tcp-syn-source-ranges",
            [
                record(0, &frames::tcp(to_gw, client, (lb_vip, 80), TcpFlags::SYN, 1, 0, &[], 64)),
                record(0, &frames::tcp(to_gw, outsider, (lb_vip, 80), TcpFlags::SYN, 1, 0, &[], 64)),
            ]
            .concat(),
        ),
        ("udp-reject", record(0, &frames::udp(to_gw, client, (Ipv4Addr::new(203, 0, 113, 11), 9), b"x", 64))),
        (
            "tcp-reject",
            record(0, &frames::tcp(to_gw, client, (Ipv4Addr::new(203, 0, 113, 11), 80), TcpFlags::SYN, 5, 0, &[], 64)),
        ),
        (
            "affinity",
            record(0, &frames::tcp(to_gw, client, (Ipv4Addr::new(203, 0, 113, 12), 443), TcpFlags::SYN, 5, 0, &[], 64)),
        ),
        ("echo", record(0, &frames::icmp_echo(to_gw, client.0, vip, 1, 1, b"abcdefgh", false))),
        (
            "sctp-init",
            [
                record(0, &frames::sctp(to_gw, client, (vip, 38412), 0, &frames::sctp_init_chunk(0x0102_0304), 64)),
                record(1, &frames::sctp(from_web, (web, 38412), (snat, 1024), 0x0102_0304, &[6, 0, 0, 4], 64)),
            ]
            .concat(),
        ),
        (
            // A UDP flow, then "fragmentation needed" about what the gateway sent (SNAT port
            // 1024 → the echo endpoint), then time exceeded about the reply to the client.
            "icmp-errors",
            {
                let echo = (Ipv4Addr::new(10, 70, 0, 21), 7007);
                let sent = frames::udp(L2 { src: gw_back, dst: web_mac }, (snat, 1024), echo, b"ping", 63);
                let reply = frames::udp(L2 { src: gw_front, dst: client_mac }, (vip, 7), client, b"pong", 63);
                let router = Ipv4Addr::new(10, 70, 0, 254);
                [
                    record(0, &frames::udp(to_gw, client, (vip, 7), b"ping", 64)),
                    record(
                        1,
                        &frames::icmp_error(
                            from_web,
                            router,
                            snat,
                            Icmpv4Type::DstUnreachable,
                            4,
                            1400,
                            &sent[14..42],
                            64,
                        ),
                    ),
                    record(
                        0,
                        &frames::icmp_error(to_gw, client.0, vip, Icmpv4Type::TimeExceeded, 0, 0, &reply[14..42], 64),
                    ),
                ]
                .concat()
            },
        ),
        (
            "udp-fragments",
            frames::ipv4_fragments(&frames::udp(to_gw, client, (vip, 7), &[0x5a; 3000], 64), 0x4d2, 1480)
                .iter()
                .map(|f| record(0, f))
                .collect::<Vec<_>>()
                .concat(),
        ),
        (
            "tcp6-handshake",
            [
                record(0, &frames::tcp6(to_gw, client6, (vip6, 80), TcpFlags::SYN, 1, 0, &[], 64)),
                record(
                    1,
                    &frames::tcp6(from_web, (web6, 8080), (snat6, 1024), TcpFlags::SYN | TcpFlags::ACK, 9, 2, &[], 64),
                ),
                record(
                    0,
                    &frames::tcp6(to_gw, client6, (vip6, 80), TcpFlags::ACK, 2, 10, b"GET / HTTP/1.1\r\n\r\n", 64),
                ),
            ]
            .concat(),
        ),
        ("udp6", record(0, &frames::udp6(to_gw, client6, (vip6, 7), b"ping", 64))),
        ("echo6", record(0, &frames::icmpv6_echo(to_gw, client6.0, vip6, 1, 1, b"abcdefgh", false))),
        (
            "ndp",
            record(
                0,
                &frames::ndp(
                    L2 { src: client_mac, dst: MacAddr([0x33, 0x33, 0xff, 0, 0, 0x10]) },
                    client6.0,
                    v6("ff02::1:ff00:10"),
                    Icmpv6Type::NeighborSolicit,
                    0,
                    vip6,
                    Some(client_mac),
                ),
            ),
        ),
        (
            "udp6-fragments",
            frames::ipv6_fragments(&frames::udp6(to_gw, client6, (vip6, 7), &[0x5a; 3000], 64), 0x4d2, 1232)
                .iter()
                .map(|f| record(0, f))
                .collect::<Vec<_>>()
                .concat(),
        ),
        (
            // A TCP flow, then Packet Too Big from a router about what the gateway sent.
            "icmpv6-errors",
            {
                let sent = frames::tcp6(
                    L2 { src: gw_back, dst: web_mac },
                    (snat6, 1024),
                    (web6, 8080),
                    TcpFlags::SYN,
                    1,
                    0,
                    &[],
                    63,
                );
                [
                    record(0, &frames::tcp6(to_gw, client6, (vip6, 80), TcpFlags::SYN, 1, 0, &[], 64)),
                    record(
                        1,
                        &frames::icmpv6_error(
                            from_web,
                            v6("fd00:70::fe"),
                            snat6,
                            Icmpv6Type::PacketTooBig,
                            0,
                            1280,
                            &sent[14..],
                            64,
                        ),
                    ),
                ]
                .concat()
            },
        ),
        (
            "arp",
            [
                record(
                    0,
                    &frames::arp(
                        L2 { src: client_mac, dst: MacAddr::BROADCAST },
                        ArpOperation::Request,
                        client_mac,
                        client.0,
                        MacAddr::UNSPECIFIED,
                        vip,
                    ),
                ),
                record(1, &frames::arp(from_web, ArpOperation::Reply, web_mac, web, gw_back, snat)),
            ]
            .concat(),
        ),
    ];
    let dir = root.join("pipeline_process");
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes)?;
    }

    let spec = TableSpec {
        frontends: vec![
            FrontendSpec {
                addr: vip.into(),
                port: 80,
                protocol: Protocol::Tcp,
                kind: FrontendKind::ExternalIp,
                service: 0,
                source_ranges: vec![],
            },
            FrontendSpec {
                addr: vip.into(),
                port: 7,
                protocol: Protocol::Udp,
                kind: FrontendKind::LoadBalancer,
                service: 1,
                source_ranges: ["198.51.100.0/24", "192.0.2.0/25", "2001:db8::/32"]
                    .iter()
                    .map(|c| IpCidr::parse(c).expect("seed CIDR"))
                    .collect(),
            },
            FrontendSpec {
                addr: "2001:db8::10".parse().unwrap(),
                port: 80,
                protocol: Protocol::Tcp,
                kind: FrontendKind::NodePort,
                service: 0,
                source_ranges: vec![],
            },
        ],
        services: vec![
            ServiceSpec {
                name: "demo/web:http".into(),
                backends: vec![
                    BackendSpec { addr: web.into(), port: 8080 },
                    BackendSpec { addr: "10.70.0.12".parse().unwrap(), port: 8080 },
                ],
                affinity_timeout_s: Some(10800),
                draining: vec![BackendSpec { addr: "10.70.0.13".parse().unwrap(), port: 8080 }],
            },
            ServiceSpec { name: "demo/empty:".into(), backends: vec![], affinity_timeout_s: None, draining: vec![] },
        ],
    };
    let table = build(&spec, 7).expect("seed table builds");
    let dir = root.join("table_validate");
    std::fs::create_dir_all(&dir)?;
    for mode in [0u8, 1] {
        let mut bytes = vec![mode];
        bytes.extend_from_slice(&table);
        std::fs::write(dir.join(format!("valid-mode{mode}")), bytes)?;
    }
    println!("seeds written under {}", root.display());
    Ok(())
}
