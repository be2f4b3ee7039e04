//! torii-vhost-peer: the other end of a kernel-free link for testing torii-gateway's DPDK
//! driver on `net_virtio_user`. It opens `net_vhost` as the vhost-user **server** on a
//! socket, waits for the gateway (virtio-user client) to connect, and plays both sides of
//! the demo Services on that one link:
//!
//! - a client (198.51.100.10, MAC 02:00:00:00:00:0a) that resolves the gateway's address
//!   198.51.100.1 by ARP and opens `--tcp-flows` TCP connections to 203.0.113.10:80
//!   (SYNs) and sends `--udp-flows` UDP datagrams to 203.0.113.10:7;
//! - the endpoints (10.70.0.11-13:8080 and 10.70.0.21:7007, MACs 02:00:00:00:01:xx): it
//!   answers the gateway's ARP requests for them, checks each translated frame — from the
//!   gateway's SNAT address 10.70.0.1 and a port in the SNAT range, to an endpoint of the
//!   Service, addressed to the endpoint's MAC, with valid IPv4 and TCP/UDP checksums, one
//!   SNAT port per flow — and answers it (SYN-ACK, or the datagram back);
//! - the client again, checking that each answer comes back translated to the VIP and
//!   port the client used, with valid checksums.
//!
//! With `--queues N` (the gateway's virtio-user `queues=N`, one per gateway worker) the
//! link has N queue pairs: the peer sends its frames on the queues in turn (so a flow's
//! frames reach every gateway worker, and the gateway's software redirect must bring them
//! to the flow's owner), and notes which queue each frame from the gateway arrives on —
//! gateway worker `w` transmits on queue `w`. It then checks that no flow was served by
//! two workers: all of a flow's frames, both directions, came from one worker, the one
//! that owns its SNAT port (`port % N`, the gateway's rule), and that every worker served
//! some flow.
//!
//! It exits 0 when every flow made the round trip, and 1 with the reasons otherwise (or
//! on `--timeout-s`). Frames are built with `torii_gateway::frames` and parsed with its
//! checked views; the vhost-user side (EAL, port, ARP answers) is torii-bench's
//! (`torii_bench::vhost`), shared with the line-rate harness. Run by `tests/virtio.rs`; usable by hand:
//!
//! ```text
//! torii-vhost-peer --socket /tmp/vhost.sock --cpu 0 [--no-huge] [--queues 2] [--tcp-flows 40] [--udp-flows 10] [--load-s 10]
//! ```
//!
//! With `--load-s N`, once every flow made the round trip, the peer turns generator and
//! sink for a throughput figure: for one second of warm-up and then `N` seconds it sends
//! the UDP flows' 64-byte datagrams (client → VIP, established flows) as fast as the link
//! takes them, receives what the gateway forwards and frees it, and prints the rates
//! (`load: ...`): frames offered, frames taken by the link, translated frames received
//! (forward direction, to the echo endpoint) per second.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use std::path::Path;
use torii_dpdk::mempool::DEFAULT_DATA_ROOM;

use torii_bench::dut::Memory;
use torii_bench::vhost;
use torii_dpdk::{Eal, Mbuf, Mempool, RxQueue, TxQueue};
use torii_gateway::frames::{self, L2};
use torii_gateway::wire::{
    ArpOperation, ArpPacket, EtherType, EthernetFrame, IpProtocol, Ipv4Packet, MacAddr, TcpFlags, TcpPacket, UdpPacket,
};

const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const SNAT_IP: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const WEB: [Ipv4Addr; 3] = [Ipv4Addr::new(10, 70, 0, 11), Ipv4Addr::new(10, 70, 0, 12), Ipv4Addr::new(10, 70, 0, 13)];
const ECHO: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 21);
const WEB_PORT: u16 = 8080;
const ECHO_PORT: u16 = 7007;
const FIRST_CLIENT_PORT: u16 = 40000;
const RESEND: Duration = Duration::from_millis(250);

fn endpoint_mac(ip: Ipv4Addr) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0x01, ip.octets()[3]])
}

fn is_endpoint(ip: Ipv4Addr) -> bool {
    WEB.contains(&ip) || ip == ECHO
}

struct Args {
    socket: String,
    cpu: usize,
    no_huge: bool,
    tcp_flows: u16,
    udp_flows: u16,
    timeout: Duration,
    snat_ports: (u16, u16),
    load: Option<Duration>,
    queues: u16,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        socket: String::new(),
        cpu: 0,
        no_huge: false,
        tcp_flows: 40,
        udp_flows: 10,
        timeout: Duration::from_secs(30),
        snat_ports: (1024, 65535),
        load: None,
        queues: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{k} {s:?}: {e}"));
        match k.as_str() {
            "--socket" => a.socket = v()?,
            "--cpu" => a.cpu = num(v()?)? as usize,
            "--no-huge" => a.no_huge = true,
            "--tcp-flows" => a.tcp_flows = num(v()?)?.min(10_000) as u16,
            "--udp-flows" => a.udp_flows = num(v()?)?.min(10_000) as u16,
            "--timeout-s" => a.timeout = Duration::from_secs(num(v()?)?),
            "--load-s" => a.load = Some(Duration::from_secs(num(v()?)?)),
            "--queues" => a.queues = num(v()?)?.clamp(1, 8) as u16,
            "--snat-ports" => {
                let s = v()?;
                let (lo, hi) = s.split_once('-').ok_or_else(|| format!("--snat-ports {s:?}: expected MIN-MAX"))?;
                a.snat_ports = (
                    lo.parse().map_err(|e| format!("--snat-ports {s:?}: {e}"))?,
                    hi.parse().map_err(|e| format!("--snat-ports {s:?}: {e}"))?,
                );
            }
            _ => return Err(format!("unknown argument {k:?}")),
        }
    }
    if a.socket.is_empty() {
        return Err("--socket PATH is required".into());
    }
    Ok(a)
}

/// One flow the client opens, and what came of it.
#[derive(Debug, Default, Clone)]
struct Flow {
    /// Translated forward frame seen: (endpoint, SNAT port).
    forward: Option<(Ipv4Addr, u16)>,
    /// Translated answer seen by the client.
    answered: bool,
    /// The queues (gateway workers) its frames from the gateway arrived on, both directions.
    queues: BTreeSet<usize>,
}

struct Link {
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    /// The queue the next frame is sent on (in turn).
    next_tx: usize,
    pool: Mempool,
    batch: Vec<Mbuf>,
    sent: u64,
}

impl Link {
    fn send(&mut self, frame: &[u8]) {
        let Some(mut m) = self.pool.alloc() else { return };
        let q = self.next_tx % self.tx.len();
        self.next_tx += 1;
        if m.extend_from_slice(frame) {
            let mut out = vec![m];
            for _ in 0..100 {
                if self.tx[q].tx_burst(&mut out) == 1 {
                    self.sent += 1;
                    return;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// A burst from every queue into `batch`: returns how many frames, and for each the queue.
    fn recv(&mut self, queues: &mut Vec<usize>) -> usize {
        self.batch.clear();
        queues.clear();
        for (q, rx) in self.rx.iter_mut().enumerate() {
            let n = rx.rx_burst(&mut self.batch, 32);
            queues.extend(std::iter::repeat_n(q, n));
        }
        self.batch.len()
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("torii-vhost-peer: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let memory = if args.no_huge { Memory::NoHuge } else { Memory::Hugepages };
    let prefix = format!("torii-vhost-{}", std::process::id());
    let eal_args = vhost::eal_args(&prefix, args.cpu, &[Path::new(&args.socket)], args.queues, memory);
    eprintln!("torii-vhost-peer: EAL {}", eal_args.join(" "));
    let eal = Eal::builder().args(eal_args).init().map_err(|e| format!("EAL: {e}"))?;
    let _ = std::fs::remove_dir(eal.runtime_dir());
    let pool = Mempool::new(&eal, "peer", 4095, 64, DEFAULT_DATA_ROOM, None).map_err(|e| format!("mempool: {e}"))?;
    let mut port =
        vhost::open_port(&eal, "net_vhost0", &pool, args.queues).map_err(|e| format!("port net_vhost0: {e}"))?;
    eprintln!("torii-vhost-peer: vhost-user server listening on {}", args.socket);
    // Tell the test the socket exists: it starts the gateway now.
    println!("listening");

    let deadline = Instant::now() + args.timeout;
    vhost::wait_link(&port, args.timeout).map_err(|e| e.to_string())?;
    eprintln!("torii-vhost-peer: virtio-user connected, link up");
    let mut link = Link {
        rx: (0..args.queues).map(|q| port.rx_queue(q)).collect::<Result<_, _>>().map_err(|e| e.to_string())?,
        tx: (0..args.queues).map(|q| port.tx_queue(q)).collect::<Result<_, _>>().map_err(|e| e.to_string())?,
        next_tx: 0,
        pool,
        batch: Vec::with_capacity(32 * usize::from(args.queues)),
        sent: 0,
    };
    let result = exchange(&mut link, &args, deadline).and_then(|gw| match args.load {
        Some(d) if args.udp_flows > 0 => load(&mut link, gw, args.udp_flows, d),
        _ => Ok(()),
    });
    let stats = port.stats().map_err(|e| e.to_string())?;
    eprintln!(
        "torii-vhost-peer: port counters: rx {} tx {} (sent {}), rx_missed {}",
        stats.ipackets, stats.opackets, link.sent, stats.imissed
    );
    drop(link);
    let _ = port.stop();
    result
}

/// Generator and sink (`--load-s`): the UDP flows' datagrams as fast as the link takes
/// them for a second of warm-up and then `duration`, counting the translated frames that
/// come back. Prints the rates.
fn load(link: &mut Link, gw: MacAddr, flows: u16, duration: Duration) -> Result<(), String> {
    let templates: Vec<Vec<u8>> = (0..flows)
        .map(|k| {
            let payload = format!("torii flow {k}");
            frames::udp(
                L2 { src: CLIENT_MAC, dst: gw },
                (CLIENT_IP, FIRST_CLIENT_PORT + k),
                (VIP, 7),
                payload.as_bytes(),
                64,
            )
        })
        .collect();
    let mut out: Vec<Mbuf> = Vec::with_capacity(32);
    let mut next = 0usize;
    let (mut offered, mut taken, mut received, mut translated) = (0u64, 0u64, 0u64, 0u64);
    let warm_up = Instant::now() + Duration::from_secs(1);
    let mut start = None;
    loop {
        let now = Instant::now();
        if start.is_none() && now >= warm_up {
            start = Some(now);
            (offered, taken, received, translated) = (0, 0, 0, 0);
        }
        if start.is_some_and(|s| now - s >= duration) {
            break;
        }
        if link.pool.alloc_bulk(&mut out, 32).is_ok() {
            for m in &mut out {
                let t = &templates[next % templates.len()];
                next += 1;
                m.extend_from_slice(t);
            }
            offered += 32;
            let q = link.next_tx % link.tx.len();
            link.next_tx += 1;
            taken += link.tx[q].tx_burst(&mut out) as u64;
            out.clear();
        }
        let mut queues = Vec::new();
        for _ in 0..4 {
            let n = link.recv(&mut queues);
            received += n as u64;
            // Forward direction to the echo endpoint: destination 10.70.0.21 at bytes 30..34.
            translated += link.batch.iter().filter(|m| m.data().get(30..34) == Some(&ECHO.octets()[..])).count() as u64;
            if n < 32 * link.rx.len() {
                break;
            }
        }
    }
    link.batch.clear();
    let secs = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let rate = |n: u64| n as f64 / secs / 1e6;
    println!(
        "load: {secs:.2} s, offered {:.3} Mpps, taken by the link {:.3} Mpps, received {:.3} Mpps, translated {:.3} Mpps",
        rate(offered),
        rate(taken),
        rate(received),
        rate(translated)
    );
    Ok(())
}

/// The conversation: ARP for the gateway, the flows, the checks. Returns the gateway's MAC.
fn exchange(link: &mut Link, args: &Args, deadline: Instant) -> Result<MacAddr, String> {
    let client_l2 = |gw: MacAddr| L2 { src: CLIENT_MAC, dst: gw };
    let mut gateway_mac: Option<MacAddr> = None;
    let mut tcp: Vec<Flow> = vec![Flow::default(); usize::from(args.tcp_flows)];
    let mut udp: Vec<Flow> = vec![Flow::default(); usize::from(args.udp_flows)];
    let mut snat_used: HashMap<(u8, Ipv4Addr, u16), usize> = HashMap::new();
    let mut problems: Vec<String> = Vec::new();
    let mut arp_answered = BTreeSet::new();
    let mut last_send = Instant::now() - RESEND;
    let mut frames_seen = 0u64;

    loop {
        let done = tcp.iter().chain(&udp).all(|f| f.answered);
        if done || !problems.is_empty() || Instant::now() > deadline {
            break;
        }
        // (Re)send what is still waiting, every RESEND.
        if last_send.elapsed() >= RESEND {
            last_send = Instant::now();
            match gateway_mac {
                None => {
                    let f = frames::arp(
                        L2 { src: CLIENT_MAC, dst: MacAddr::BROADCAST },
                        ArpOperation::Request,
                        CLIENT_MAC,
                        CLIENT_IP,
                        MacAddr([0; 6]),
                        GATEWAY_IP,
                    );
                    link.send(&f);
                }
                Some(gw) => {
                    for (k, f) in tcp.iter().enumerate() {
                        if f.forward.is_none() {
                            let sport = FIRST_CLIENT_PORT + k as u16;
                            let frame = frames::tcp(
                                client_l2(gw),
                                (CLIENT_IP, sport),
                                (VIP, 80),
                                TcpFlags::SYN,
                                seq_of(k),
                                0,
                                &[],
                                64,
                            );
                            link.send(&frame);
                        }
                    }
                    for (k, f) in udp.iter().enumerate() {
                        if !f.answered {
                            let sport = FIRST_CLIENT_PORT + k as u16;
                            let payload = format!("torii flow {k}");
                            link.send(&frames::udp(
                                client_l2(gw),
                                (CLIENT_IP, sport),
                                (VIP, 7),
                                payload.as_bytes(),
                                64,
                            ));
                        }
                    }
                }
            }
        }
        let mut queues = Vec::new();
        if link.recv(&mut queues) == 0 {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let received: Vec<Vec<u8>> = link.batch.drain(..).map(|m| m.data().to_vec()).collect();
        for (frame, queue) in received.into_iter().zip(queues) {
            frames_seen += 1;
            let Ok(eth) = EthernetFrame::new_checked(&frame[..]) else { continue };
            match eth.ethertype() {
                EtherType::Arp => {
                    let Ok(arp) = ArpPacket::new_checked(eth.payload()) else { continue };
                    match arp.operation() {
                        ArpOperation::Reply if arp.sender_protocol_addr() == GATEWAY_IP => {
                            if gateway_mac.is_none() {
                                eprintln!(
                                    "torii-vhost-peer: gateway {GATEWAY_IP} is at {}",
                                    arp.sender_hardware_addr()
                                );
                                last_send = Instant::now() - RESEND;
                            }
                            gateway_mac = Some(arp.sender_hardware_addr());
                        }
                        ArpOperation::Request => {
                            let who = arp.target_protocol_addr();
                            let played = |ip: Ipv4Addr| {
                                if is_endpoint(ip) {
                                    Some(endpoint_mac(ip))
                                } else {
                                    (ip == CLIENT_IP).then_some(CLIENT_MAC)
                                }
                            };
                            if let Some(reply) = vhost::arp_reply(&frame, played) {
                                arp_answered.insert(who);
                                link.send(&reply);
                            }
                        }
                        _ => {}
                    }
                }
                EtherType::Ipv4 => {
                    let Some(gw) = gateway_mac else { continue };
                    if let Err(p) = handle_ipv4(&frame, queue, gw, args, link, &mut tcp, &mut udp, &mut snat_used) {
                        problems.push(p);
                    }
                }
                _ => {}
            }
        }
    }

    let summary = |flows: &[Flow]| {
        let mut per: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        for f in flows {
            if let Some((ep, _)) = f.forward {
                *per.entry(ep).or_default() += 1;
            }
        }
        let answered = flows.iter().filter(|f| f.answered).count();
        format!("{answered}/{} answered, endpoints {per:?}", flows.len())
    };
    eprintln!(
        "torii-vhost-peer: TCP {}; UDP {}; ARP answered for {arp_answered:?}; {frames_seen} frames received",
        summary(&tcp),
        summary(&udp)
    );
    if gateway_mac.is_none() {
        problems.push(format!("the gateway never answered ARP for {GATEWAY_IP}"));
    }
    let missing: Vec<String> = tcp
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.answered)
        .map(|(k, f)| format!("tcp#{k}{}", if f.forward.is_some() { "(no answer back)" } else { "(not forwarded)" }))
        .chain(udp.iter().enumerate().filter(|(_, f)| !f.answered).map(|(k, f)| {
            format!("udp#{k}{}", if f.forward.is_some() { "(no answer back)" } else { "(not forwarded)" })
        }))
        .collect();
    if !missing.is_empty() && problems.is_empty() {
        problems.push(format!("{} flow(s) incomplete after the deadline: {}", missing.len(), missing.join(" ")));
    }
    let web_used: BTreeSet<Ipv4Addr> = tcp.iter().filter_map(|f| f.forward.map(|(e, _)| e)).collect();
    if problems.is_empty() && args.tcp_flows >= 20 && web_used.len() < 2 {
        problems.push(format!("{} TCP flows all went to {web_used:?}: Maglev should spread them", args.tcp_flows));
    }
    // No flow served by two workers: one queue per flow, its SNAT port's owner's.
    let n = usize::from(args.queues);
    let mut per_worker = vec![0usize; n];
    for (kind, flows) in [("tcp", &tcp), ("udp", &udp)] {
        for (k, f) in flows.iter().enumerate() {
            let Some((_, sport)) = f.forward else { continue };
            let owner = usize::from(sport) % n;
            if f.queues.len() != 1 || !f.queues.contains(&owner) {
                problems.push(format!(
                    "{kind}#{k} (SNAT port {sport}, owner worker {owner}) came from gateway worker(s) {:?}",
                    f.queues
                ));
            }
            per_worker[owner] += 1;
        }
    }
    if problems.is_empty() && per_worker.contains(&0) {
        problems.push(format!("flows per gateway worker {per_worker:?}: not every worker served a flow"));
    }
    if problems.is_empty() {
        println!(
            "OK: {} TCP and {} UDP flows translated both ways through torii-gateway on virtio-user; \
             {n} queue(s), flows per gateway worker {per_worker:?}, each flow on one worker",
            tcp.len(),
            udp.len()
        );
        gateway_mac.ok_or_else(|| "no gateway MAC".to_string())
    } else {
        Err(problems.join("; "))
    }
}

fn seq_of(k: usize) -> u32 {
    0x1000_0000 + (k as u32) * 1000
}

/// Checks one IPv4 frame from the gateway and answers it. `Err` describes a wrong frame.
#[allow(clippy::too_many_arguments)]
fn handle_ipv4(
    frame: &[u8],
    queue: usize,
    gw: MacAddr,
    args: &Args,
    link: &mut Link,
    tcp: &mut [Flow],
    udp: &mut [Flow],
    snat_used: &mut HashMap<(u8, Ipv4Addr, u16), usize>,
) -> Result<(), String> {
    let eth = EthernetFrame::new_checked(frame).map_err(|e| format!("bad Ethernet frame: {e:?}"))?;
    let ip = Ipv4Packet::new_checked(eth.payload()).map_err(|e| format!("bad IPv4 packet: {e:?}"))?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let what = format!("{:?} {src} -> {dst}", ip.next_header());
    if eth.src_addr() != gw {
        return Err(format!("{what}: source MAC {} is not the gateway's {gw}", eth.src_addr()));
    }
    if !ip.verify_checksum() {
        return Err(format!("{what}: bad IPv4 header checksum {:#06x}", ip.checksum()));
    }
    let proto = ip.next_header();
    let (sport, dport, seq, payload) = match proto {
        IpProtocol::Tcp => {
            let t = TcpPacket::new_checked(ip.payload()).map_err(|e| format!("{what}: bad TCP: {e:?}"))?;
            if !t.verify_checksum(src, dst) {
                return Err(format!("{what}: bad TCP checksum {:#06x}", t.checksum()));
            }
            (t.src_port(), t.dst_port(), t.seq_number(), Vec::new())
        }
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(ip.payload()).map_err(|e| format!("{what}: bad UDP: {e:?}"))?;
            if u.checksum() == 0 || !u.verify_checksum(src, dst) {
                return Err(format!("{what}: bad UDP checksum {:#06x}", u.checksum()));
            }
            (u.src_port(), u.dst_port(), 0, u.payload().to_vec())
        }
        _ => return Ok(()), // ICMP and others: not part of this exchange
    };
    let what = format!("{what} ({sport} -> {dport})");
    let is_tcp = proto == IpProtocol::Tcp;
    let proto_num: u8 = if is_tcp { 6 } else { 17 };

    if src == SNAT_IP && is_endpoint(dst) {
        // Forward direction, translated: SNAT address:port -> endpoint.
        let (want_port, flows) = if is_tcp { (WEB_PORT, &mut *tcp) } else { (ECHO_PORT, &mut *udp) };
        let k = if is_tcp {
            let k = seq.wrapping_sub(seq_of(0)) / 1000;
            usize::try_from(k).ok().filter(|&k| k < flows.len() && seq_of(k) == seq)
        } else {
            String::from_utf8_lossy(&payload).strip_prefix("torii flow ").and_then(|s| s.parse().ok())
        }
        .ok_or_else(|| format!("{what}: not one of our flows"))?;
        if (is_tcp && !WEB.contains(&dst)) || (!is_tcp && dst != ECHO) || dport != want_port {
            return Err(format!("{what}: flow {k} went to {dst}:{dport}, not an endpoint of its Service"));
        }
        if eth.dst_addr() != endpoint_mac(dst) {
            return Err(format!(
                "{what}: destination MAC {} is not the endpoint's {}",
                eth.dst_addr(),
                endpoint_mac(dst)
            ));
        }
        if !(args.snat_ports.0..=args.snat_ports.1).contains(&sport) {
            return Err(format!("{what}: SNAT port {sport} outside {:?}", args.snat_ports));
        }
        if let Some(&other) = snat_used.get(&(proto_num, dst, sport)) {
            if other != k {
                return Err(format!("{what}: SNAT port {sport} used by flows {other} and {k} to the same endpoint"));
            }
        }
        snat_used.insert((proto_num, dst, sport), k);
        match flows[k].forward {
            Some(prev) if prev != (dst, sport) => {
                return Err(format!("{what}: flow {k} was translated to {prev:?} before, now to {:?}", (dst, sport)));
            }
            _ => flows[k].forward = Some((dst, sport)),
        }
        flows[k].queues.insert(queue);
        // Answer as the endpoint.
        let l2 = L2 { src: endpoint_mac(dst), dst: gw };
        let answer = if is_tcp {
            frames::tcp(
                l2,
                (dst, dport),
                (SNAT_IP, sport),
                TcpFlags::SYN | TcpFlags::ACK,
                7,
                seq.wrapping_add(1),
                &[],
                64,
            )
        } else {
            let mut echoed = b"echo:".to_vec();
            echoed.extend_from_slice(&payload);
            frames::udp(l2, (dst, dport), (SNAT_IP, sport), &echoed, 64)
        };
        link.send(&answer);
        return Ok(());
    }
    if dst == CLIENT_IP {
        // Reverse direction, translated back: VIP:port -> client.
        let k = usize::from(dport.wrapping_sub(FIRST_CLIENT_PORT));
        let flows = if is_tcp { &mut *tcp } else { &mut *udp };
        let flow = flows.get_mut(k).ok_or_else(|| format!("{what}: to a client port we did not use"))?;
        let want_sport = if is_tcp { 80 } else { 7 };
        if src != VIP || sport != want_sport {
            return Err(format!("{what}: answer of flow {k} comes from {src}:{sport}, not {VIP}:{want_sport}"));
        }
        if eth.dst_addr() != CLIENT_MAC {
            return Err(format!("{what}: destination MAC {} is not the client's", eth.dst_addr()));
        }
        if flow.forward.is_none() {
            return Err(format!("{what}: answer of flow {k} before its forward frame"));
        }
        if !is_tcp && payload != format!("echo:torii flow {k}").into_bytes() {
            return Err(format!("{what}: payload {:?}", String::from_utf8_lossy(&payload)));
        }
        flow.answered = true;
        flow.queues.insert(queue);
        return Ok(());
    }
    Err(format!("{what}: unexpected frame from the gateway"))
}
