//! Instructions per packet of `process_burst`, counted by callgrind: a measure that does not
//! move with the machine's load, for comparing two builds of the data plane where timings on
//! a shared 2-vCPU VM differ by less than their noise (BENCHMARKS.md, "Instruction counts").
//!
//! ```sh
//! cargo build --release -p torii-benches --example instructions
//! valgrind --tool=callgrind --toggle-collect='instructions::timed' \
//!     target/release/examples/instructions est 1000
//! ```
//!
//! Arguments: the stream (`est`: client → VIP segments of established flows, `reply`:
//! endpoint → SNAT address segments, `syn`: SYNs opening new flows; `est6`, `reply6`,
//! `syn6`: the same over IPv6; `conn-syn`, `conn-synack`, `conn-ack`, `conn-rst`: one
//! segment of the TCP connections of torii-bench's connection-rate test, each connection
//! a SYN, the endpoint's SYN-ACK, the client's ACK and the endpoint's RST, and each SYN
//! reopening its tuple's flow closed by the last RST — the four streams run alike and
//! count one segment each; `conn-…6` over IPv6), the active flows
//! (default 1000), the gateway's endpoint scheduler (default `maglev`; `rr`, `lc`, …:
//! [`torii_gateway::scheduler::Scheduler`]) and the frames per burst (default [`VECTOR`], 256;
//! a loaded worker's vectors are full, one below its capacity takes a few frames a poll,
//! so a small burst shows the per-call cost a full one spreads). It builds the benchmark
//! gateway and fixture of `torii_benches` of the stream's family
//! (10 000 front doors), then runs its bursts through `timed`, the only
//! function callgrind counts with the command above: divide the "I refs" it prints by the
//! packets this prints. SYN runs stop before the conntrack would fill (no early drop).
//! Copying each burst's frames into its buffers (`load`, the device's DMA in a real
//! gateway) is not counted; until 2026-11-27 it was, 27–30 instructions a packet (add
//! `--toggle-collect='instructions::load'` to count it as then).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use torii_benches::dataplane::{Burst, Family, Fixture, Gateway, Handshake, Kind, Stream, Transport, VECTOR};
use torii_gateway::counters::DropReason;
use torii_gateway::scheduler::Scheduler;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("est", String::as_str);
    let flows: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let scheduler = match args.get(3).map(String::as_str) {
        None | Some("-") => Scheduler::Maglev,
        Some(name) => {
            *Scheduler::ALL.iter().find(|s| s.name() == name).unwrap_or_else(|| panic!("unknown scheduler {name:?}"))
        }
    };
    let burst: usize =
        args.get(4).and_then(|s| s.parse().ok()).filter(|&b| (1..=VECTOR).contains(&b)).unwrap_or(VECTOR);
    match kind.strip_suffix('6') {
        Some(v6) => run::<Ipv6Addr>(v6, kind, flows, scheduler, burst),
        None => run::<Ipv4Addr>(kind, kind, flows, scheduler, burst),
    }
}

/// Runs stream `stream` (`est`, `reply` or `syn`; named `kind` in the output) of family `A`
/// over `flows` active flows under `scheduler`, in bursts of `size` frames.
fn run<A: Family>(stream: &str, kind: &str, flows: usize, scheduler: Scheduler, size: usize) {
    let mut gateway = Gateway::<A>::new();
    let mut host = (*gateway.host).clone();
    host.scheduler = scheduler;
    gateway.host = Arc::new(host);
    let gateway = Arc::new(gateway);
    let mut fx = Fixture::new(Arc::clone(&gateway), Transport::Tcp, flows);
    if let Some(segment) = stream.strip_prefix("conn-") {
        let segment = match segment {
            "syn" => Handshake::Syn,
            "synack" => Handshake::SynAck,
            "ack" => Handshake::Ack,
            "rst" => Handshake::Rst,
            other => panic!("unknown connection segment {other:?}: syn, synack, ack or rst"),
        };
        let packets = connections(&mut fx, segment, size);
        assert_no_drops(&fx);
        println!("{kind} ({scheduler}): {packets} packets in bursts of {size}");
        return;
    }
    let (mut stream, bursts) = match stream {
        // The fixture's conntrack has room for a quarter more flows and 4096; one fresh
        // tuple per packet (a shorter stream would wrap and send SYNs of flows it opened).
        "syn" => {
            let bursts = (flows / 4 + 4096) / size;
            (fx.stream(Kind::Syn, bursts * size, 0), bursts)
        }
        "reply" => (fx.stream(Kind::Reply, 1 << 16, 2), 40 * VECTOR / size),
        "est" => (fx.stream(Kind::Original, 1 << 16, 1), 40 * VECTOR / size),
        other => panic!("unknown stream {other:?}: est, reply or syn (IPv6: est6, reply6, syn6)"),
    };
    let mut burst = Burst::new(size);
    for _ in 0..bursts {
        load(&mut stream, &mut burst);
        timed(&mut fx, &mut burst);
    }
    assert_no_drops(&fx);
    println!("{kind} ({scheduler}): {} packets in {bursts} bursts of {size}", bursts * size);
}

/// Groups of connections, each group's `size` connections one burst per segment.
const CONNECTION_GROUPS: u64 = 8;
/// Rounds of every group's connections; the first (the flows' first SYNs) is not counted.
const CONNECTION_ROUNDS: u64 = 4;
/// The first connection's client: above the active flows' and the SYN streams' (2^24 on).
const CONNECTION_BASE: u64 = 1 << 32;

/// Runs [`CONNECTION_ROUNDS`] rounds of [`CONNECTION_GROUPS`] × `size` TCP connections, each
/// group's four segments a burst each, in order: `timed` counts the bursts of `segment`
/// from the second round on (where every SYN reopens a closed flow). Returns the packets
/// counted.
fn connections<A: Family>(fx: &mut Fixture<A>, segment: Handshake, size: usize) -> u64 {
    let mut burst = Burst::new(size);
    let mut replies = vec![Vec::new(); CONNECTION_GROUPS as usize];
    let mut counted = 0;
    for round in 0..CONNECTION_ROUNDS {
        for (g, replies) in replies.iter_mut().enumerate() {
            let first = CONNECTION_BASE + g as u64 * size as u64;
            for s in Handshake::ALL {
                let mut stream = fx.connection_stream(s, first, size, replies);
                load(&mut stream, &mut burst);
                if round > 0 && s == segment {
                    timed(fx, &mut burst);
                    counted += size as u64;
                } else {
                    // Not through `timed` (a function of its own would be folded into it).
                    fx.process_loaded(&mut burst);
                }
                if s == Handshake::Syn {
                    *replies = fx.replies(&burst);
                }
            }
        }
    }
    counted
}

/// Panics if the worker dropped any packet.
fn assert_no_drops<A: Family>(fx: &Fixture<A>) {
    for r in DropReason::ALL {
        assert_eq!(fx.state.counters.drops_of(r), 0, "dropped as {}", r.name());
    }
}

/// The next burst's frames copied into `burst`, as the device and its driver leave them:
/// not counted (the DMA's work, not the gateway's).
#[inline(never)]
fn load<A: Family>(stream: &mut Stream<A>, burst: &mut Burst) {
    Fixture::load_burst(stream, burst);
}

/// One burst through `pipeline::process_burst`: what callgrind counts.
#[inline(never)]
fn timed<A: Family>(fx: &mut Fixture<A>, burst: &mut Burst) {
    fx.process_loaded(burst);
}
