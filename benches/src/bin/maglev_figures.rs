//! Prints the Maglev figures BENCHMARKS.md quotes: build time, balance (max − min slots
//! per endpoint) and disruption (share of the ring that moves when one endpoint leaves,
//! against the 1/N minimum) for N = 1000 endpoints at M = 65537 (the paper's and Katran's
//! size) and at the size the gateway gives a 1000-endpoint Service (`ring_size_for`).
//!
//! ```sh
//! cargo run --release -p torii-benches --bin maglev-figures            # every endpoint removed once
//! cargo run --release -p torii-benches --bin maglev-figures -- 100     # every 10th
//! ```

use torii_benches::maglev::{balance, disruption, endpoints, summary, ENDPOINTS};
use torii_benches::thread_cpu_time;
use torii_gateway::maglev::{self, DEFAULT_RING_SIZE};

fn main() {
    let removals: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => ENDPOINTS,
        Some(Ok(n)) if (1..=ENDPOINTS).contains(&n) => n,
        Some(_) => {
            eprintln!("usage: maglev-figures [REMOVALS: 1..={ENDPOINTS}]");
            std::process::exit(2);
        }
    };
    let eps = endpoints(ENDPOINTS);
    let n = eps.len();
    for m in [DEFAULT_RING_SIZE, maglev::ring_size_for(n)] {
        let mut times_ms: Vec<f64> = (0..31)
            .map(|_| {
                let t = thread_cpu_time();
                std::hint::black_box(maglev::build(std::hint::black_box(&eps), m));
                (thread_cpu_time() - t).as_secs_f64() * 1e3
            })
            .collect();
        times_ms.sort_by(f64::total_cmp);
        let b = balance(&eps, m);
        println!("M = {m}, N = {n}");
        println!(
            "  build: median {:.3} ms CPU time (min {:.3}, max {:.3}; 31 builds)",
            times_ms[15], times_ms[0], times_ms[30]
        );
        println!("  balance: {}..={} slots per endpoint, max - min = {}", b.min, b.max, b.max - b.min);
        let picks: Vec<usize> = (0..removals).map(|k| k * n / removals).collect();
        let ds: Vec<_> = picks.iter().map(|&k| disruption(&eps, m, k)).collect();
        let (lo, mid, hi) = summary(ds.iter().map(|d| d.moved_share() * 100.0).collect());
        let (slo, smid, shi) = summary(ds.iter().map(|d| d.survivors_moved_share() * 100.0).collect());
        let min_share = 100.0 / n as f64;
        println!(
            "  disruption, 1 of {n} endpoints removed ({removals} removals): ring moved {mid:.3} % median \
             (min {lo:.3}, max {hi:.3}); minimum 1/N = {min_share:.3} %, median {:.2} x the minimum",
            mid / min_share
        );
        println!(
            "  of that, slots of endpoints that stayed: {smid:.3} % of theirs median (min {slo:.3}, max {shi:.3})"
        );
    }
}
