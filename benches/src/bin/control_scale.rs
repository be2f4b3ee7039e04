//! `control-scale`: the control plane's performance target, measured and printed as
//! medians (the figures of BENCHMARKS.md).
//!
//! ```sh
//! cargo run --release -p torii-benches --bin control-scale -- [SERVICES [ENDPOINTS [RUNS [CHANGES]]]]
//! ```
//!
//! Defaults: 10000 Services, 10 endpoints, 7 from-scratch runs, 301 one-endpoint changes.
//! Writes the tables under a temporary directory in `/dev/shm`.

use std::time::Duration;

use torii_benches::{
    cluster, from_scratch, median, one_endpoint_changed, shm_tempdir, Daemon, SimulatedGateway, ENDPOINTS, SERVICES,
};

fn arg(n: usize, default: usize) -> usize {
    std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let services = arg(1, SERVICES);
    let endpoints = arg(2, ENDPOINTS);
    let runs = arg(3, 7).max(1);
    let changes = arg(4, 301).max(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    let objects = cluster(services, endpoints);
    println!("workload: {services} Services x {endpoints} endpoints ({} objects)", objects.len());

    // From scratch: a fresh publisher (no cached rings) on a fresh directory each run.
    let mut totals = Vec::new();
    let mut validate = Vec::new();
    let mut compile = Vec::new();
    let mut publish = Vec::new();
    let mut table_len = 0;
    let mut frontends = 0;
    for _ in 0..runs {
        let dir = shm_tempdir();
        let (stages, compiled, spec) = from_scratch(&objects, dir.path());
        frontends = compiled.frontends.len();
        table_len = torii_table::build(&spec, 1).map(|b| b.len()).unwrap_or(0);
        totals.push(stages.total());
        validate.push(stages.validate);
        compile.push(stages.compile);
        publish.push(stages.publish);
    }
    println!("front doors: {frontends}, table: {:.1} MiB", table_len as f64 / (1 << 20) as f64);
    println!(
        "from scratch ({runs} runs): median {} (validate {}, compile {}, build+write+publish {})",
        ms(median(&mut totals)),
        ms(median(&mut validate)),
        ms(median(&mut compile)),
        ms(median(&mut publish)),
    );

    // The daemon's start: the incremental compiler loads everything, first publication.
    let mut starts = Vec::new();
    for _ in 0..runs {
        let dir = shm_tempdir();
        let t = std::time::Instant::now();
        let daemon = Daemon::start(&objects, dir.path());
        starts.push(t.elapsed());
        drop(daemon);
    }
    println!(
        "daemon start ({runs} runs; Compiler::apply of every object + first publication): median {}",
        ms(median(&mut starts))
    );

    // One endpoint changed: a warm compiler and publisher, one watch event at a time,
    // first as isolated events (an untimed pause after each lets the publisher prepare its
    // next file, as between real endpoint changes), then back to back.
    let dir = shm_tempdir();
    let mut daemon = Daemon::start(&objects, dir.path());
    let mut serial = 0;
    let mut gateway = None;
    for (label, pause, with_gateway) in [
        ("isolated changes, 25 ms apart", Duration::from_millis(25), false),
        ("back to back", Duration::ZERO, false),
        ("isolated changes, 25 ms apart, simulated gateway", Duration::from_millis(25), true),
        ("back to back, simulated gateway", Duration::ZERO, true),
    ] {
        if with_gateway && gateway.is_none() {
            gateway = Some(SimulatedGateway::start(dir.path(), Duration::from_millis(2)));
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut total = Vec::with_capacity(changes);
        let mut compile = Vec::with_capacity(changes);
        let mut publish = Vec::with_capacity(changes);
        let mut parts: [Vec<Duration>; 4] = Default::default();
        let mut on_cpu = Vec::with_capacity(changes);
        let mut waiting = Vec::with_capacity(changes);
        let before = daemon.publisher.stats();
        for _ in 0..changes {
            serial += 1;
            let event = one_endpoint_changed(services, endpoints, serial);
            std::thread::sleep(pause);
            let (cpu0, wait0) = torii_benches::thread_sched();
            let (c, p) = daemon.handle(&event);
            let (cpu1, wait1) = torii_benches::thread_sched();
            on_cpu.push(cpu1 - cpu0);
            waiting.push(wait1 - wait0);
            total.push(c + p);
            compile.push(c);
            publish.push(p);
            let s = daemon.publisher.stats();
            for (v, d) in parts.iter_mut().zip([s.last_build, s.last_find, s.last_write, s.last_rest]) {
                v.push(d);
            }
        }
        println!(
            "  this thread's time on a CPU (the work), median {}; waiting for a CPU (other processes), median {}",
            ms(median(&mut on_cpu)),
            ms(median(&mut waiting))
        );
        let [b, f, w, r] = &mut parts;
        println!(
            "  publication's parts, medians: build {}, finding a file {}, writing it {}, the rest {}",
            ms(median(b)),
            ms(median(f)),
            ms(median(w)),
            ms(median(r))
        );

        let after = daemon.publisher.stats();
        let mut sorted = total.clone();
        sorted.sort_unstable();
        let p90 = sorted[(sorted.len() * 9 / 10).min(sorted.len() - 1)];
        let (hits, misses) = (after.spare_used - before.spare_used, after.spare_missed - before.spare_missed);
        let retired = after.retired_used - before.retired_used;
        // A publication into a new file writes the whole snapshot; one into the prepared copy
        // its changes when the copy is of the previous snapshot, else the whole snapshot.
        let into_copy = (after.bytes_written - before.bytes_written).saturating_sub(misses * table_len as u64);
        println!(
            "  ({hits} written into an older snapshot's file ({retired} retired ones), {:.1} KiB each on average; \
             {misses} into new files)",
            into_copy as f64 / hits.max(1) as f64 / 1024.0,
        );
        println!(
            "one endpoint changed, {label} ({changes} changes): median {} (compile {}, build+write+publish {}), \
             p90 {}, max {}",
            ms(median(&mut total)),
            ms(median(&mut compile)),
            ms(median(&mut publish)),
            ms(p90),
            ms(sorted[sorted.len() - 1]),
        );
    }
    if let Some(g) = gateway.take() {
        println!("  (the simulated gateway adopted {} tables)", g.stop());
    }
    let stats = daemon.compiler.stats();
    println!("compiler: {} drafts for {} updates, {} full rebuilds", stats.drafts, stats.updates, stats.full_rebuilds);

    // The snapshot path (a source that hands over whole snapshots, like the manifests
    // directory): `Compiler::update` with one slice changed, compile only.
    let mut loaded = torii_control::source::Loaded { objects: objects.clone(), ..Default::default() };
    let mut compiler = torii_control::compile::Compiler::new(torii_benches::options());
    compiler.update(&loaded);
    let mut snapshot = Vec::with_capacity(changes.min(51));
    for _ in 0..changes.min(51) {
        serial += 1;
        let change = one_endpoint_changed(services, endpoints, serial);
        let r = change.object_ref();
        if let Some(o) = loaded.objects.iter_mut().find(|o| o.object_ref() == r) {
            *o = change;
        }
        let t = std::time::Instant::now();
        compiler.update(&loaded);
        snapshot.push(t.elapsed());
    }
    println!(
        "  snapshot path: Compiler::update of a whole snapshot with one slice changed (compile only): median {}",
        ms(median(&mut snapshot))
    );

    // The publication's parts: laying the table out (incremental builder) and writing a
    // new file (what a publication costs when no pre-allocated file is ready).
    let mut builder = torii_table::TableBuilder::new();
    builder.build(daemon.compiler.table_spec(), 0).expect("build");
    let mut build = Vec::with_capacity(changes);
    let mut write = Vec::with_capacity(changes);
    for _ in 0..changes {
        serial += 1;
        let change = one_endpoint_changed(services, endpoints, serial);
        daemon.compiler.apply([torii_control::compile::Change::Upsert(&change)]);
        let t = std::time::Instant::now();
        let bytes = builder.build(daemon.compiler.table_spec(), serial).expect("build");
        build.push(t.elapsed());
        let path = dir.path().join(format!("bench-{}", serial % 2));
        let _ = std::fs::remove_file(&path);
        let t = std::time::Instant::now();
        std::fs::write(&path, bytes).expect("write");
        write.push(t.elapsed());
    }
    println!(
        "  parts: table build (incremental) median {}, writing a new file median {}",
        ms(median(&mut build)),
        ms(median(&mut write)),
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at end: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
}
