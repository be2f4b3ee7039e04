//! Per-batch timings of `process_burst`, as percentiles: for comparing two builds of the data
//! plane on a noisy machine by alternating their runs (BENCHMARKS.md, "Paired runs"), where
//! criterion's single estimate per run moves by ±10 % with the machine's load.
//!
//! ```sh
//! cargo build --release -p torii-benches --example batch_times
//! target/release/examples/batch_times syn 1000000 10000
//! ```
//!
//! Arguments: the stream (`syn`: SYNs opening new flows, `est`: client → VIP segments of
//! established flows), the active flows (default 1 000 000) and the batches to time (default
//! 3000). It builds the IPv4 benchmark gateway and fixture of `torii_benches` (10 000 front
//! doors), then times batches of 4 bursts of [`VECTOR`] frames with the thread's CPU time,
//! after 50 untimed batches; as the `tcp_syn_new_flow` benchmark does, the flows a SYN batch
//! opened are removed again, untimed, after it. Prints the minimum, 10th, 25th percentile and
//! median ns per packet. The SYN stream's length (receive slots, default 65 536, as the
//! benchmark's) can be set with the environment variable `SYNLEN`; with `CONNTRACK_DIR` set,
//! the conntrack tables are region files in that directory, as a gateway's in its `shm_dir`
//! (tmpfs `/dev/shm`, or hugetlbfs), instead of on the heap.

use std::net::Ipv4Addr;
use std::sync::Arc;

use torii_benches::dataplane::{Burst, Fixture, Gateway, Kind, Transport, VECTOR};

/// Bursts per timed batch: 1024 packets, the `tcp_syn_new_flow` benchmark's batch.
const BURSTS: usize = 4;

/// Untimed batches before the timed ones.
const WARM_UP: usize = 50;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("syn", String::as_str).to_string();
    let flows: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let batches: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3000).max(1);
    let syn_len = std::env::var("SYNLEN").ok().and_then(|s| s.parse().ok()).unwrap_or(1 << 16);
    let gateway = Arc::new(Gateway::<Ipv4Addr>::new());
    let dir = std::env::var_os("CONNTRACK_DIR").map(std::path::PathBuf::from);
    let mut fx = Fixture::new_in(Arc::clone(&gateway), Transport::Tcp, flows, dir.as_deref());
    let mut stream = match kind.as_str() {
        "syn" => fx.stream(Kind::Syn, syn_len, 0),
        "est" => fx.stream(Kind::Original, 1 << 20, 1),
        other => panic!("unknown stream {other:?}: syn or est"),
    };
    let mut burst = Burst::new(VECTOR);
    let mut ns = Vec::with_capacity(batches);
    for b in 0..WARM_UP + batches {
        let first = stream.position();
        let t = torii_benches::thread_cpu_time();
        for _ in 0..BURSTS {
            fx.process_burst(&mut stream, &mut burst);
        }
        let dt = torii_benches::thread_cpu_time() - t;
        if kind == "syn" {
            for k in 0..BURSTS * VECTOR {
                assert!(fx.forget(&stream, (first + k) % stream.len()), "every SYN opens a flow");
            }
        }
        if b >= WARM_UP {
            ns.push(dt.as_nanos() as f64 / (BURSTS * VECTOR) as f64);
        }
    }
    ns.sort_by(f64::total_cmp);
    let at = |p: f64| ns[((ns.len() - 1) as f64 * p) as usize];
    println!(
        "{kind} {flows}: min {:.1} p10 {:.1} p25 {:.1} median {:.1} ns per packet",
        at(0.0),
        at(0.1),
        at(0.25),
        at(0.5)
    );
}
