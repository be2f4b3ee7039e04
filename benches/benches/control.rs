//! Criterion benchmarks of the control plane at the scale of the performance target:
//! 10 000 Services × 10 endpoints (see `torii_benches`).
//!
//! ```sh
//! cargo bench -p torii-benches --bench control
//! ```
//!
//! - `control/from_scratch`: validate + compile + build + publish, cold;
//! - `control/one_endpoint_changed/isolated`: a warm compiler and publisher handle one
//!   watch event, 25 ms (untimed) after the previous one;
//! - `control/one_endpoint_changed/back_to_back`: the same, events one after the other;
//! - `control/one_endpoint_changed/compile` and `…/publish`: the two halves, back to back;
//! - `table/build_scratch` and `table/build_incremental`: the table layout alone.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode};
use torii_benches::{cluster, from_scratch, one_endpoint_changed, shm_tempdir, Daemon, ENDPOINTS, SERVICES};
use torii_control::compile::Change;
use torii_table::{build, TableBuilder};

fn control(c: &mut Criterion) {
    let objects = cluster(SERVICES, ENDPOINTS);
    let mut g = c.benchmark_group("control");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("from_scratch", |b| {
        b.iter_batched(shm_tempdir, |dir| black_box(from_scratch(&objects, dir.path()).0), BatchSize::PerIteration);
    });
    drop(g);

    let dir = shm_tempdir();
    let mut daemon = Daemon::start(&objects, dir.path());
    let mut serial = 0;
    let mut g = c.benchmark_group("control/one_endpoint_changed");
    g.sample_size(20).measurement_time(Duration::from_secs(2)).sampling_mode(SamplingMode::Flat);
    // Isolated watch events: an untimed pause before each lets the publisher's background
    // job prepare the next file, as between real endpoint changes.
    g.bench_function("isolated", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                serial += 1;
                let change = one_endpoint_changed(SERVICES, ENDPOINTS, serial);
                std::thread::sleep(Duration::from_millis(25));
                let t = Instant::now();
                black_box(daemon.handle(&change));
                spent += t.elapsed();
            }
            spent
        });
    });
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.bench_function("back_to_back", |b| {
        b.iter_batched(
            || {
                serial += 1;
                one_endpoint_changed(SERVICES, ENDPOINTS, serial)
            },
            |change| black_box(daemon.handle(&change)),
            BatchSize::SmallInput,
        );
    });
    g.bench_function("compile", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                serial += 1;
                let change = one_endpoint_changed(SERVICES, ENDPOINTS, serial);
                let t = Instant::now();
                black_box(daemon.compiler.apply([Change::Upsert(&change)]));
                spent += t.elapsed();
            }
            spent
        });
    });
    g.bench_function("publish", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                serial += 1;
                let change = one_endpoint_changed(SERVICES, ENDPOINTS, serial);
                daemon.compiler.apply([Change::Upsert(&change)]);
                let t = Instant::now();
                black_box(daemon.publisher.publish(daemon.compiler.table_spec()).expect("publish"));
                spent += t.elapsed();
            }
            spent
        });
    });
    drop(g);

    let spec = daemon.compiler.table_spec().clone();
    let mut g = c.benchmark_group("table");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.bench_function("build_scratch", |b| b.iter(|| black_box(build(&spec, 1).expect("build").len())));
    let mut builder = TableBuilder::new();
    builder.build(&spec, 1).expect("build");
    g.sample_size(100);
    g.bench_function("build_incremental", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                serial += 1;
                let change = one_endpoint_changed(SERVICES, ENDPOINTS, serial);
                daemon.compiler.apply([Change::Upsert(&change)]);
                let t = Instant::now();
                black_box(builder.build(daemon.compiler.table_spec(), serial).expect("build").len());
                spent += t.elapsed();
            }
            spent
        });
    });
    drop(g);
}

criterion_group!(benches, control);
criterion_main!(benches);
