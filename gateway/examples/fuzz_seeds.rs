//! Writes the seed corpora of the fuzz targets in `gateway/fuzz/`: valid frames of every
//! kind the pipeline handles (as `pipeline_process` records), flows long enough for the
//! lean established path (`lean-*`: answered with the endpoint and SNAT port the demo
//! gateway chose, [`torii_gateway::fuzz::with_demo_worker`]), a valid table snapshot and
//! gateway configuration files.
//!
//! `cargo run -p torii-gateway --no-default-features --features fuzz --example fuzz_seeds`
//! (from the repository root; without the default `dpdk` feature it builds without DPDK
//! installed).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use torii_gateway::frames::{self, L2};
use torii_gateway::pipeline::{self, Meta, Verdict};
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
    for (name, bytes) in lean_seeds(to_gw, from_web, client_mac) {
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
    write_config_seeds(&root.join("gateway_config"))?;
    println!("seeds written under {}", root.display());
    Ok(())
}

/// The `gateway_config` seeds: the embedded default, the default with each optional table
/// the configuration knows (valid ones, so that the fuzzer starts past the parser and the
/// checks), two it must refuse (`bad-*`) and the smallest accepted file (`minimal`);
/// tests/fuzz_corpora.rs checks each by name.
fn write_config_seeds(dir: &Path) -> std::io::Result<()> {
    let default = torii_gateway::config::EMBEDDED_DEFAULT;
    let extras: [(&str, &str); 9] = [
        ("default", ""),
        (
            "vlans",
            "[[interfaces]]\nname = \"tg-front\"\nvlan = 100\naddresses = [\"192.0.2.1/24\", \"2001:db8:2::1/64\"]\n\
             device = \"net_af_packet0,iface=tg-front\"\n",
        ),
        (
            "routers",
            "[router]\naddress = \"198.51.100.254\"\ninterface = \"tg-front\"\n\
             [router6]\naddress = \"2001:db8:100::fe\"\ninterface = \"tg-front\"\n",
        ),
        (
            "neighbours",
            "[[neighbours]]\naddress = \"10.70.0.11\"\nmac = \"02:00:00:00:b0:0b\"\n\
             [[neighbours]]\naddress = \"fd00:70::11\"\nmac = \"02:00:00:00:b0:0c\"\n",
        ),
        ("metrics", "[metrics]\nlisten = \"127.0.0.1:9100\"\n"),
        (
            "bgp",
            "[bgp]\nasn = 65001\nbird_config = \"/run/torii/bird.conf\"\nannounce = [\"ExternalIP\", \"LoadBalancer\"]\n\
             communities = [\"65000:100\"]\nmed = 10\nlocal_pref = 200\nbfd_interval_ms = 300\nbfd_multiplier = 3\n\
             [[bgp.peers]]\naddress = \"198.51.100.254\"\nasn = 65000\nbfd = true\nhold_time_s = 9\n\
             [[bgp.peers]]\naddress = \"2001:db8:100::fe\"\nasn = 65000\nlocal_address = \"2001:db8:100::1\"\n",
        ),
        ("l2", "[l2]\nannounce = [\"ExternalIP\"]\ndrain_s = 5\n"),
        ("bad-vlan", "[[interfaces]]\nname = \"tg-back\"\nvlan = 4095\naddresses = [\"192.0.2.1/24\"]\n"),
        ("bad-neighbour", "[[neighbours]]\naddress = \"10.70.0.1\"\nmac = \"02:00:00:00:b0:0b\"\n"),
    ];
    std::fs::create_dir_all(dir)?;
    for (name, extra) in extras {
        std::fs::write(dir.join(name), format!("{default}\n{extra}"))?;
    }
    // The smallest accepted file, without the defaults' comments.
    let minimal = "node_name = \"n\"\n[[interfaces]]\nname = \"eth0\"\naddresses = [\"10.0.0.1/24\"]\n\
                   [snat]\naddresses = [\"10.0.0.1\"]\n";
    std::fs::write(dir.join("minimal"), minimal)
}

/// Exchanges of the lean established path's length per transport and family, on the demo
/// gateway's own choices: the client's address learned first (an ARP request or a
/// Neighbor Solicitation, so that replies reach it), the flow opened (TCP: the three-way
/// handshake; UDP: a datagram, the endpoint's answer and the client's next, which makes
/// it assured), then [`EXCHANGES`] segments or datagrams each way, alternating. Each is
/// written twice, shaped ([`shaped`]) to be replayed in bursts of 40 frames at one time
/// (`lean-tcp`, …: the frames after a burst's first chunk of 16 take the lean path) and in
/// bursts of 16 a second apart (`lean-tcp-bursts`, …: those after the first burst).
fn lean_seeds(to_gw: L2, from_web: L2, client_mac: MacAddr) -> Vec<(String, Vec<u8>)> {
    let client4 = Ipv4Addr::new(198, 51, 100, 10);
    let client6: Ipv6Addr = "2001:db8:100::10".parse().expect("an IPv6 address");
    let vip4 = Ipv4Addr::new(203, 0, 113, 10);
    let vip6: Ipv6Addr = "2001:db8:203::10".parse().expect("an IPv6 address");
    let arp = frames::arp(
        L2 { src: client_mac, dst: MacAddr::BROADCAST },
        ArpOperation::Request,
        client_mac,
        client4,
        MacAddr::UNSPECIFIED,
        vip4,
    );
    let ns = frames::ndp(
        L2 { src: client_mac, dst: MacAddr([0x33, 0x33, 0xff, 0, 0, 0x10]) },
        client6,
        "ff02::1:ff00:10".parse().expect("an IPv6 address"),
        Icmpv6Type::NeighborSolicit,
        0,
        vip6,
        Some(client_mac),
    );
    let tcp = |src: (IpAddr, u16), dst: (IpAddr, u16), l2: L2, flags: TcpFlags, seq: u32, ack: u32, data: &[u8]| match (
        src.0, dst.0,
    ) {
        (IpAddr::V4(s), IpAddr::V4(d)) => frames::tcp(l2, (s, src.1), (d, dst.1), flags, seq, ack, data, 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => frames::tcp6(l2, (s, src.1), (d, dst.1), flags, seq, ack, data, 64),
        _ => unreachable!("one family"),
    };
    let udp = |src: (IpAddr, u16), dst: (IpAddr, u16), l2: L2, data: &[u8]| match (src.0, dst.0) {
        (IpAddr::V4(s), IpAddr::V4(d)) => frames::udp(l2, (s, src.1), (d, dst.1), data, 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => frames::udp6(l2, (s, src.1), (d, dst.1), data, 64),
        _ => unreachable!("one family"),
    };
    let mut seeds = Vec::new();
    for (name, learn, client, vip, port) in [
        ("lean-tcp", &arp, IpAddr::V4(client4), IpAddr::V4(vip4), 80),
        ("lean-tcp6", &ns, IpAddr::V6(client6), IpAddr::V6(vip6), 80),
        ("lean-udp", &arp, IpAddr::V4(client4), IpAddr::V4(vip4), 7),
        ("lean-udp6", &ns, IpAddr::V6(client6), IpAddr::V6(vip6), 7),
    ] {
        let is_tcp = port == 80;
        // The first client port whose flow goes to an endpoint whose neighbour is resolved.
        let found = (40000..41000).find_map(|sport| {
            let open = if is_tcp {
                tcp((client, sport), (vip, port), to_gw, TcpFlags::SYN, 1, 0, &[])
            } else {
                udp((client, sport), (vip, port), to_gw, b"q")
            };
            let (endpoint, snat) = forwarded(learn, &open)?;
            Some((sport, open, endpoint, snat))
        });
        let Some((sport, open, endpoint, snat)) = found else {
            panic!("{name}: the demo gateway forwards none of the first 1 000 client ports")
        };
        let c = (client, sport);
        let mut frames = vec![record(0, learn), record(0, &open)];
        if is_tcp {
            frames.push(record(1, &tcp(endpoint, snat, from_web, TcpFlags::SYN | TcpFlags::ACK, 9, 2, &[])));
            frames.push(record(0, &tcp(c, (vip, port), to_gw, TcpFlags::ACK, 2, 10, &[])));
            for i in 0..EXCHANGES {
                // One byte each way per exchange.
                let (cs, es) = (2 + i, 10 + i);
                frames.push(record(0, &tcp(c, (vip, port), to_gw, TcpFlags::ACK, cs, es, b"c")));
                frames.push(record(1, &tcp(endpoint, snat, from_web, TcpFlags::ACK, es, cs + 1, b"e")));
            }
        } else {
            frames.push(record(1, &udp(endpoint, snat, from_web, b"a")));
            for _ in 0..EXCHANGES {
                frames.push(record(0, &udp(c, (vip, port), to_gw, b"c")));
                frames.push(record(1, &udp(endpoint, snat, from_web, b"e")));
            }
        }
        let seed = frames.concat();
        // Replayed in bursts of 40 frames at one time, and of 16 frames a second apart
        // (flows opened in one burst go lean in the next).
        seeds.push((name.to_owned(), shaped(&seed, 40, 0)));
        seeds.push((format!("{name}-bursts"), shaped(&seed, 16, 1)));
    }
    seeds
}

/// `seed` lengthened to the shortest length at which `pipeline_process` replays it in
/// bursts of `size` frames `step` (an index: 0 s, 1 s, 30 s, 300 s) apart: the length
/// modulo 40 is `size − 1` and its quotient by 40 is `step` modulo 4. The padding is empty
/// records (a zero-length frame, dropped as malformed) and up to two bytes too short to
/// be a record, which are ignored.
fn shaped(seed: &[u8], size: usize, step: usize) -> Vec<u8> {
    let fits = |len: usize| len % 40 == size - 1 && len / 40 % 4 == step;
    let len = (seed.len()..).find(|&l| fits(l)).expect("a length within 160 bytes");
    let mut out = seed.to_vec();
    out.resize(len, 0);
    out
}

/// Client-and-endpoint exchanges in each of [`lean_seeds`]' flows: 2 × 20 frames after the
/// opening ones, so that the second chunk of 16 and the third take the lean path.
const EXCHANGES: u32 = 20;

/// Processes `learn` and then the client's `open` on a fresh demo worker: the endpoint and
/// the SNAT address and port of the flow when the gateway forwarded it (the frame it sent:
/// untagged IPv4 or IPv6 with the ports after a fixed header), else `None` (its endpoint's
/// neighbour unresolved, for one).
fn forwarded(learn: &[u8], open: &[u8]) -> Option<((IpAddr, u16), (IpAddr, u16))> {
    torii_gateway::fuzz::with_demo_worker(|table, st| {
        let mut buf = vec![0u8; 2048];
        let mut verdict = Verdict::Consumed;
        for frame in [learn, open] {
            buf[..frame.len()].copy_from_slice(frame);
            let meta =
                Meta { iface: 0, len: frame.len(), l4_csum_partial: false, l3_csum_good: false, l4_csum_good: false };
            verdict = pipeline::process(0, &mut buf, &meta, table, st);
        }
        let Verdict::Transmit { iface: 1, len } = verdict else { return None };
        let f = &buf[..len];
        let port = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
        match u16::from_be_bytes([f[12], f[13]]) {
            0x0800 => {
                let addr = |at: usize| IpAddr::V4(Ipv4Addr::new(f[at], f[at + 1], f[at + 2], f[at + 3]));
                Some(((addr(30), port(36)), (addr(26), port(34))))
            }
            0x86dd => {
                let addr = |at: usize| {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&f[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(octets))
                };
                Some(((addr(38), port(56)), (addr(22), port(54))))
            }
            _ => None,
        }
    })
}
