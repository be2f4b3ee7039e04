//! Criterion benchmark of Maglev ring construction (Eisenbud et al., NSDI 2016, §3.4):
//! N = 1000 endpoints at M = 65537 (the paper's and Katran's ring size; the issue's
//! target is at most 5 ms, the paper reports 1.8 ms) and at the size the gateway gives a
//! 1000-endpoint Service (`maglev::ring_size_for(1000)` = 131101).
//!
//! Times are the benchmark thread's CPU time (`support/cpu_time.rs`): the machine is shared.
//!
//! ```sh
//! cargo bench -p torii-benches --bench maglev
//! cargo run --release -p torii-benches --bin maglev-figures   # balance and disruption
//! ```

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::hint::black_box;

use cpu_time::ThreadCpuTime;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use torii_benches::maglev::{endpoints, ENDPOINTS};
use torii_gateway::maglev::{self, DEFAULT_RING_SIZE};

fn build(c: &mut Criterion<ThreadCpuTime>) {
    let eps = endpoints(ENDPOINTS);
    let mut g = c.benchmark_group("maglev/build");
    for m in [DEFAULT_RING_SIZE, maglev::ring_size_for(ENDPOINTS)] {
        g.bench_with_input(BenchmarkId::new(format!("N={ENDPOINTS}"), format!("M={m}")), &m, |b, &m| {
            b.iter(|| black_box(maglev::build(black_box(&eps), m)));
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = build
}
criterion_main!(benches);
