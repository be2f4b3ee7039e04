//! The bodies of the fuzz targets in `gateway/fuzz/` (cargo-fuzz, nightly), here so that
//! the workspace's `tests/fuzz_corpora.rs` replays every committed corpus input through
//! them on stable and a change to the pipeline or the table cannot leave the targets
//! behind: each target is one call of a function below.
//!
//! # Contract
//!
//! Each function takes one fuzz input (any bytes) and returns when every property it checks
//! holds; it panics (the fuzzer's finding) when one does not. No I/O; the fixtures are
//! built once per thread.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crate::config::Config;
use crate::host::Host;
use crate::pipeline::{self, Meta, Shared, Verdict, WorkerState, MIN_BUFFER};
use crate::table::{
    build, layout, BackendSpec, FrontendKind, FrontendSpec, IpCidr, Protocol, ServiceSpec, Storage, Table, TableSpec,
};
use crate::wire::MacAddr;

/// Fuzzes `pipeline::process` with sequences of frames on a demo gateway: no input may
/// panic, and every transmitted frame must lie within the buffer. The same frames then go
/// once more through `process` one at a time and through `pipeline::process_burst` (in
/// bursts whose size, 1 to 40 frames, and spacing in time, 0 to 300 s, the input's length
/// chooses) on a second, identical worker: the verdicts, the rewritten bytes, the
/// counters, the front doors' counts, the flows and their TCP windows must agree (the
/// burst's prefetch stages read every frame ahead, so they see every malformed input too).
///
/// Input: repeated `[port: u8][len_hi: u8][len_lo: u8][frame: len bytes]` records (the last
/// record takes what is left, the length clamped to 1514; the port byte's low five bits
/// modulo 3 are the port, bit 7 sets `Meta::l4_csum_partial`, bit 6 `l3_csum_good` and bit
/// 5 `l4_csum_good`: what a device vouched for is trusted, as the drivers do),
/// processed in order by one worker, so flows created by one frame meet replies, ICMP and
/// corruptions in later ones. The clock advances a second per frame, exercising expiry.
/// The demo gateway has a VLAN interface on each port (VLAN 100 on the front, 200 on the
/// back), so tag parsing, insertion and removal are fuzzed too. Its Services are
/// dual-stack: IPv6 front doors forward to IPv6 endpoints, so IPv6 flows, fragments,
/// ICMPv6 errors and Neighbor Discovery are fuzzed on the same path.
///
/// # Panics
///
/// When `process_burst` and `process` disagree on any of those, or a verdict transmits
/// past the buffer.
pub fn pipeline_process(data: &[u8]) {
    FIXTURE.with(|(table, host)| {
        let frames = split_frames(data);
        // Sequentially, the clock advancing a second per frame, with ARP and expiry between.
        let mut st = worker(host, table);
        let mut buf = vec![0u8; 2048];
        let mut now = 0u64;
        for (meta, frame) in &frames {
            buf[..frame.len()].copy_from_slice(frame);
            let cap = meta.len.max(MIN_BUFFER);
            if let Verdict::Transmit { len: out, .. } = pipeline::process(now, &mut buf[..cap], meta, table, &mut st) {
                assert!(out <= cap, "transmitted {out} bytes of a {cap}-byte buffer");
            }
            let mut arp = [0u8; pipeline::POLL_TRANSMIT_LEN];
            while pipeline::poll_transmit(now, &mut arp, &mut st).is_some() {}
            pipeline::poll_expire(now, 16, &mut st);
            now += 1_000_000_000;
        }
        // Differentially: `process_burst` must give every frame exactly what `process` gives
        // it one at a time (verdicts and bytes), whatever its prefetch stages read ahead, in
        // bursts of `size` frames `step` apart (both chosen by the input's length, so that
        // flows opened in one burst take the lean path in the next, and some become due).
        let (size, step) = (1 + data.len() % 40, [0, 1, 30, 300][data.len() / 40 % 4] * 1_000_000_000u64);
        let (mut one, mut burst) = (worker(host, table), worker(host, table));
        // A burst numbers its table at its start, `process` when a frame first reads it
        // (`pipeline::process_burst`): the frame-by-frame side numbers it first too, so
        // that the flows' `table_epoch` agree.
        one.table_epoch(table);
        for (k, chunk) in frames.chunks(size).enumerate() {
            let now = k as u64 * step;
            let mut singles: Vec<Vec<u8>> = Vec::new();
            let mut expected = Vec::new();
            for (meta, frame) in chunk {
                let mut b = vec![0u8; 2048];
                b[..frame.len()].copy_from_slice(frame);
                let cap = meta.len.max(MIN_BUFFER);
                expected.push(pipeline::process(now, &mut b[..cap], meta, table, &mut one));
                singles.push(b);
            }
            let metas: Vec<Meta> = chunk.iter().map(|(m, _)| *m).collect();
            let mut bufs: Vec<Vec<u8>> = chunk
                .iter()
                .map(|(m, f)| {
                    let mut b = vec![0u8; 2048];
                    b[..f.len()].copy_from_slice(f);
                    b.truncate(m.len.max(MIN_BUFFER));
                    b
                })
                .collect();
            let mut verdicts = vec![Verdict::Consumed; chunk.len()];
            pipeline::process_burst(now, &mut bufs, &metas, table, &mut burst, &mut verdicts);
            assert_eq!(verdicts, expected, "burst {k}: process_burst and process disagree");
            for (i, (b, s)) in bufs.iter().zip(&singles).enumerate() {
                if let Verdict::Transmit { len, .. } = verdicts[i] {
                    assert_eq!(&b[..len], &s[..len], "burst {k}: frame {i} rewritten differently in a burst");
                }
            }
        }
        assert_eq!(one.counters, burst.counters, "the counters");
        assert_eq!(one.frontends.as_slice(), burst.frontends.as_slice(), "the front doors' counts");
        assert!(one.conntrack.iter().eq(burst.conntrack.iter()), "the IPv4 flows");
        assert!(one.conntrack6.iter().eq(burst.conntrack6.iter()), "the IPv6 flows");
        for (id, _) in one.conntrack.iter() {
            assert_eq!(one.conntrack.tcp_windows(id), burst.conntrack.tcp_windows(id), "flow {id}'s windows");
        }
        for (id, _) in one.conntrack6.iter() {
            assert_eq!(one.conntrack6.tcp_windows(id), burst.conntrack6.tcp_windows(id), "flow {id}'s windows");
        }
    });
}

/// Fuzzes the gateway's configuration file: `data` (UTF-8; other inputs are skipped) goes
/// through [`Config::from_toml`], which must return an error naming a key rather than panic.
/// What it accepts then goes through everything `torii-gateway` derives from a
/// configuration before it opens a device, none of which may panic: the host view
/// ([`Host::new`], one MAC per port), the conntrack timeouts, the `--check-config` print,
/// each worker's SNAT ports ([`crate::snat::SnatPorts::new`], every worker count the file
/// may give) and, with a `[bgp]` table, the BIRD configuration for the interfaces' own
/// addresses as VIPs ([`crate::announce::bird::render`]). Returns whether the file was
/// accepted (the corpus replay checks that the seeds reach past the checks).
///
/// # Panics
///
/// When an accepted configuration is not what its checks promise: an interface on a port
/// the configuration does not list, a host with other interfaces than the configuration's,
/// a static neighbour the neighbour table (sized for the static ones) does not take, or
/// parsing that gives another configuration the second time.
pub fn gateway_config(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(config) = Config::from_toml(text) else { return false };
    assert!(Config::from_toml(text).is_ok_and(|again| again == config), "parsing is deterministic");
    for (i, iface) in config.interfaces.iter().enumerate() {
        assert!(iface.port < config.ports.len(), "interfaces[{i}] is on port {} of {}", iface.port, config.ports.len());
    }
    let macs: Vec<MacAddr> = (0..config.ports.len()).map(|p| MacAddr([2, 0, 0, 0, (p >> 8) as u8, p as u8])).collect();
    let host = Host::new(&config, &macs);
    assert_eq!(host.interfaces.len(), config.interfaces.len(), "one host interface per configured one");
    let _ = config.conntrack.timeouts();
    let _ = format!("{config:#?}");
    for w in 0..config.workers {
        let _ = crate::snat::SnatPorts::new(w, config.workers, config.snat.port_min, config.snat.port_max);
    }
    // The static neighbours in a table of their own size (`neighbour_capacity` may ask for
    // 256 MiB): `from_toml` checks there are no more than it.
    let neighbours = crate::neighbour::Neighbours::new(config.neighbours.len());
    for n in &config.neighbours {
        assert!(neighbours.learn(n.address, MacAddr(n.mac), u64::MAX), "static neighbour {} learned", n.address);
    }
    if let Some(bgp) = &config.bgp {
        let vips = config
            .interfaces
            .iter()
            .flat_map(|i| {
                let v4 = i.addresses.iter().map(|c| IpAddr::V4(c.addr));
                v4.chain(i.addresses6.iter().map(|c| IpAddr::V6(c.addr)))
            })
            .collect();
        let _ = crate::announce::bird::render(bgp, &vips, "fuzz");
    }
    true
}

/// The frames of a [`pipeline_process`] input, each with its driver metadata.
fn split_frames(data: &[u8]) -> Vec<(Meta, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut rest = data;
    while let [iface, hi, lo, tail @ ..] = rest {
        let len = (usize::from(*hi) << 8 | usize::from(*lo)).min(tail.len()).min(1514);
        let (frame, more) = tail.split_at(len);
        rest = more;
        // The port byte's top bits are the driver's checksum flags.
        let meta = Meta {
            iface: (iface & 0x1f) % 3,
            len,
            l4_csum_partial: iface & 0x80 != 0,
            l3_csum_good: iface & 0x40 != 0,
            l4_csum_good: iface & 0x20 != 0,
        };
        frames.push((meta, frame.to_vec()));
    }
    frames
}

thread_local! {
    /// The demo gateway of [`pipeline_process`]: its table and host.
    static FIXTURE: (Table, Arc<Host>) = {
        let macs = [MacAddr([2, 0, 0, 0, 0xf0, 1]), MacAddr([2, 0, 0, 0, 0xf0, 2])];
        let vlans = "\n[[interfaces]]\nname = \"tg-front\"\nvlan = 100\naddresses = [\"192.0.2.1/24\"]\n\
                     [[interfaces]]\nname = \"tg-back\"\nvlan = 200\naddresses = [\"10.80.0.1/24\"]\n";
        let config = Config::from_toml(&format!("{}{vlans}", crate::config::EMBEDDED_DEFAULT)).unwrap();
        (table(), Arc::new(Host::new(&config, &macs)))
    };
}

/// Runs `f` on the demo gateway of [`pipeline_process`]: its table and a worker as each of
/// the target's passes starts (the neighbours of 10.70.0.11, 10.70.0.21, fd00:70::11 and
/// fd00:70::21 resolved). For seed generators
/// (`examples/fuzz_seeds.rs`) whose inputs must follow the gateway's own choices (the
/// endpoint, the SNAT port) to reach a path, such as the lean established one.
pub fn with_demo_worker<R>(f: impl FnOnce(&Table, &mut WorkerState) -> R) -> R {
    FIXTURE.with(|(table, host)| f(table, &mut worker(host, table)))
}

/// A worker of the fixture with its own shared state (neighbours pre-resolved), so two
/// workers fed the same frames end in the same state.
fn worker(host: &Arc<Host>, table: &Table) -> WorkerState {
    let shared = Shared::new(16, 64);
    shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, 11), MacAddr([2, 0, 0, 0, 0xb0, 11]), 0);
    shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, 21), MacAddr([2, 0, 0, 0, 0xb0, 21]), 0);
    shared.neighbours.learn("fd00:70::11".parse::<Ipv6Addr>().unwrap(), MacAddr([2, 0, 0, 0, 0xb0, 11]), 0);
    shared.neighbours.learn("fd00:70::21".parse::<Ipv6Addr>().unwrap(), MacAddr([2, 0, 0, 0, 0xb0, 21]), 0);
    let mut st = WorkerState::new(0, 2, Arc::clone(host), &shared, 64, 1);
    st.adopt_table(table, table, 0);
    st
}

/// The demo gateway's table ([`pipeline_process`]).
fn table() -> Table {
    let be = |a: &str, port| BackendSpec { addr: a.parse().unwrap(), port };
    let fe = |a: [u8; 4], protocol, port, service| FrontendSpec {
        addr: IpAddr::V4(Ipv4Addr::from(a)),
        port,
        protocol,
        kind: FrontendKind::ExternalIp,
        service,
        source_ranges: vec![],
    };
    let fe6 = |a: &str, protocol, port, service| FrontendSpec {
        addr: IpAddr::V6(a.parse::<Ipv6Addr>().unwrap()),
        ..fe([0; 4], protocol, port, service)
    };
    let spec = TableSpec {
        frontends: vec![
            fe([203, 0, 113, 10], Protocol::Tcp, 80, 0),
            fe([203, 0, 113, 10], Protocol::Udp, 7, 1),
            fe([203, 0, 113, 11], Protocol::Tcp, 80, 2),
            fe([203, 0, 113, 11], Protocol::Udp, 9, 2),
            fe([203, 0, 113, 12], Protocol::Tcp, 443, 3),
            fe([203, 0, 113, 10], Protocol::Sctp, 38412, 0),
            fe6("2001:db8:203::10", Protocol::Tcp, 80, 4),
            fe6("2001:db8:203::10", Protocol::Udp, 7, 5),
            fe6("2001:db8:203::11", Protocol::Tcp, 80, 2),
            // A load-balancer front door admitting only part of the client range.
            FrontendSpec {
                kind: FrontendKind::LoadBalancer,
                source_ranges: vec![IpCidr::parse("198.51.100.0/25").unwrap()],
                ..fe([203, 0, 113, 13], Protocol::Tcp, 80, 0)
            },
        ],
        services: vec![
            ServiceSpec {
                name: "demo/web:http".into(),
                backends: vec![be("10.70.0.11", 8080), be("10.70.0.12", 8080), be("10.70.0.13", 8080)],
                affinity_timeout_s: None,
                draining: vec![be("10.70.0.14", 8080)],
            },
            ServiceSpec {
                name: "demo/echo:echo".into(),
                backends: vec![be("10.70.0.21", 7007)],
                affinity_timeout_s: None,
                draining: vec![],
            },
            ServiceSpec { name: "demo/empty:".into(), backends: vec![], affinity_timeout_s: None, draining: vec![] },
            ServiceSpec {
                name: "demo/sticky:https".into(),
                backends: vec![be("10.70.0.11", 8443), be("10.70.0.50", 8443)],
                affinity_timeout_s: Some(10),
                draining: vec![],
            },
            ServiceSpec {
                name: "demo/web6:http".into(),
                backends: vec![be("fd00:70::11", 8080), be("fd00:70::12", 8080)],
                affinity_timeout_s: None,
                draining: vec![be("fd00:70::14", 8080)],
            },
            ServiceSpec {
                name: "demo/echo6:echo".into(),
                backends: vec![be("fd00:70::21", 7007)],
                affinity_timeout_s: None,
                draining: vec![],
            },
        ],
    };
    Table::new(Storage::Owned(build(&spec, 1).unwrap())).unwrap()
}

/// Fuzzes the table validator: `Table::new` must reject or accept any bytes without
/// panicking, and an accepted table must answer every lookup without panicking.
///
/// Input: `[mode: u8][bytes…]`. With `mode & 1`, the CRC-32 is recomputed over the mutated
/// bytes first, so the fuzzer reaches the record checks behind the checksum.
///
/// # Panics
///
/// When an accepted table does not find a front door it lists or that front door's service,
/// does not say that an endpoint it lists serves, or does not say that a front door's
/// address is a VIP.
pub fn table_validate(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else { return };
    let mut bytes = bytes.to_vec();
    if mode & 1 == 1 && bytes.len() >= size_of::<layout::Header>() {
        let at = layout::CHECKSUM_OFFSET;
        bytes[at..at + 4].fill(0);
        let crc = crc32fast::hash(&bytes);
        bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(table) = Table::new(bytes) else { return };
    for f in table.frontends() {
        let addr = layout::addr_from16(f.addr);
        let found = table.frontend(addr, f.protocol, f.port.get()).expect("a listed front door is found");
        let service = table.service(found.service).expect("its service exists");
        let _ = service.pick(u64::from(f.port.get()) * 0x9e37_79b9_7f4a_7c15);
        for client in [IpAddr::from([198, 51, 100, 10]), IpAddr::from(f.addr), addr] {
            let _ = found.source_ranges.admits(client);
        }
        for b in service.backends.iter().chain(service.draining) {
            assert!(service.serves(b.addr, b.port.get()), "a listed endpoint serves");
        }
        let _ = service.name().len();
        assert!(table.is_vip(addr));
    }
    for id in 0..table.service_count() as u32 + 2 {
        if let Some(s) = table.service(id) {
            for h in [0, 1, u64::MAX] {
                let _ = s.pick(h);
            }
        }
    }
    let _ = table.frontend(IpAddr::from([203, 0, 113, 10]), 6, 80);
}
