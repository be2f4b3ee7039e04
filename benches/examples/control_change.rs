//! `control_change`: what one change costs the daemon's compiler and publisher as the
//! cluster grows — "every change equally cheap" (issue 17).
//!
//! ```sh
//! cargo build --release -p torii-benches --example control_change
//! target/release/examples/control_change [SERVICES [CHANGES [gateway]]]
//! # instruction counts of the measured calls only:
//! valgrind --tool=callgrind --toggle-collect='control_change::timed*' \
//!     target/release/examples/control_change 10000 20
//! ```
//!
//! (Under valgrind this now ends in SIGSEGV at start: rustix, which the publisher's
//! dependencies pull in, reads the vDSO's ELF header through the auxiliary vector, which
//! valgrind does not emulate — rustix issue #1559, open. rustix's libc backend,
//! `RUSTFLAGS='--cfg rustix_use_libc'`, avoids that code; not tried here. `perf stat -e
//! instructions` counts without valgrind, but the whole process.)
//!
//! A warm daemon (an incremental [`Compiler`](torii_control::compile::Compiler) holding
//! SERVICES Services with 10 endpoints each and a
//! [`Publisher`](torii_control::publish::Publisher) that published their table into a
//! temporary directory under `/dev/shm`) then takes CHANGES (default 51) changes of each
//! kind, one at a time, each compiled and published:
//!
//! - *endpoint*: one EndpointSlice with one endpoint's address replaced;
//! - *add*: a new Service and its EndpointSlice, in one batch (a new front door);
//! - *remove*: that Service and its slice deleted (the front door goes).
//!
//! With `gateway`, a [`SimulatedGateway`](torii_benches::SimulatedGateway) (one worker,
//! polling every 2 ms, mapping and validating each snapshot) is registered, and each
//! change waits (untimed) until it acknowledged the previous publication, as changes
//! spaced by a few milliseconds are: publications then patch retired snapshots, as
//! `torii-control run` does next to a gateway. Without it a publication patches the
//! superseded snapshot (from the third on; `torii_control::publish`).
//!
//! It prints, per kind, the median of the calling thread's CPU time (on a loaded machine
//! wall time is mostly waiting) and of wall time, split into compile and publish, and the
//! bytes written per publication, then the process's resident memory (`VmRSS`, `VmHWM`):
//! the compiler, the publisher and the generated objects, not kube-rs's watch caches.

use std::hint::black_box;
use std::time::Duration;

use torii_benches::{
    cluster, endpoint_slice, median, one_endpoint_changed, service, shm_tempdir, thread_cpu_time, Daemon,
    SimulatedGateway,
};
use torii_control::compile::Change;
use torii_control::model::{KubeObject, ObjectRef};

const ENDPOINTS: usize = 10;

fn arg(n: usize, default: usize) -> usize {
    std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default)
}

/// CPU and wall time of compiling, then of publishing.
#[derive(Default)]
struct Samples {
    compile_cpu: Vec<Duration>,
    publish_cpu: Vec<Duration>,
    compile_wall: Vec<Duration>,
    publish_wall: Vec<Duration>,
    /// Of the publication's wall time: laying the table out, and writing the file.
    build_wall: Vec<Duration>,
    write_wall: Vec<Duration>,
    written: Vec<u64>,
}

impl Samples {
    fn print(&mut self, label: &str) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let mut written = self.written.clone();
        written.sort_unstable();
        println!(
            "{label:<9} CPU median: compile {:>9.1} us, publish {:>9.1} us | wall median: compile {:>9.1} us, publish {:>9.1} us (build {:.1}, write {:.1}) | written median {} B",
            us(median(&mut self.compile_cpu)),
            us(median(&mut self.publish_cpu)),
            us(median(&mut self.compile_wall)),
            us(median(&mut self.publish_wall)),
            us(median(&mut self.build_wall)),
            us(median(&mut self.write_wall)),
            written.get(written.len() / 2).copied().unwrap_or(0),
        );
    }
}

#[inline(never)]
fn timed_compile(daemon: &mut Daemon, changes: &[Change<'_>]) {
    black_box(daemon.compiler.apply(changes.iter().cloned()));
}

#[inline(never)]
fn timed_publish(daemon: &mut Daemon) {
    black_box(daemon.publisher.publish_from(&daemon.compiler).expect("publish"));
}

fn one(daemon: &mut Daemon, changes: &[Change<'_>], samples: &mut Samples) {
    // With a gateway: the previous publication acknowledged first (untimed).
    let generation = daemon.publisher.generation();
    while daemon.publisher.acknowledged(generation) == Some(false) {
        std::thread::sleep(Duration::from_micros(200));
    }
    let before = daemon.publisher.stats();
    let (c0, w0) = (thread_cpu_time(), std::time::Instant::now());
    timed_compile(daemon, changes);
    let (c1, w1) = (thread_cpu_time(), std::time::Instant::now());
    timed_publish(daemon);
    let (c2, w2) = (thread_cpu_time(), std::time::Instant::now());
    samples.compile_cpu.push(c1 - c0);
    samples.publish_cpu.push(c2 - c1);
    samples.compile_wall.push(w1 - w0);
    samples.publish_wall.push(w2 - w1);
    let after = daemon.publisher.stats();
    samples.build_wall.push(after.last_build);
    samples.write_wall.push(after.last_write);
    samples.written.push(after.bytes_written - before.bytes_written);
}

/// Service `i` and its EndpointSlice, renamed `name`.
fn added(i: usize, name: &str) -> (KubeObject, KubeObject) {
    let KubeObject::Service(mut s) = service(i) else { unreachable!("service() makes a Service") };
    s.metadata.name = Some(name.to_owned());
    let mut slice = endpoint_slice(i, ENDPOINTS, 0);
    slice.metadata.name = Some(format!("{name}-x7k2p"));
    slice.metadata.labels = Some([("kubernetes.io/service-name".to_owned(), name.to_owned())].into());
    (KubeObject::Service(s), KubeObject::EndpointSlice(Box::new(slice)))
}

fn status(field: &str) -> String {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(field))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let services = arg(1, 10_000);
    let changes = arg(2, 51).max(1);
    let objects = cluster(services, ENDPOINTS);
    let dir = shm_tempdir();
    let mut daemon = Daemon::start(&objects, dir.path());
    drop(objects);
    let gateway = (std::env::args().nth(3).as_deref() == Some("gateway"))
        .then(|| SimulatedGateway::start(dir.path(), Duration::from_millis(2)));
    println!(
        "{services} Services x {ENDPOINTS} endpoints: {} front doors, table {} B; after start VmRSS {}, VmHWM {}",
        daemon.compiler.compiled().frontends.len(),
        torii_table::build(daemon.compiler.table_spec(), 1).map_or(0, |b| b.len()),
        status("VmRSS:"),
        status("VmHWM:"),
    );

    let mut endpoint = Samples::default();
    for serial in 0..changes as u64 {
        let o = one_endpoint_changed(services, ENDPOINTS, serial);
        one(&mut daemon, &[Change::Upsert(&o)], &mut endpoint);
    }
    let (mut add, mut remove) = (Samples::default(), Samples::default());
    for k in 0..changes {
        // A Service of its own (index `services + k`: its own VIP and endpoints) named to
        // sort in the middle of the others, as most new names do.
        let (s, slice) = added(services + k, &format!("svc-{:05}-added-{k}", services / 2));
        one(&mut daemon, &[Change::Upsert(&s), Change::Upsert(&slice)], &mut add);
        let gone = [
            Change::Delete(ObjectRef::namespaced("Service", s.metadata())),
            Change::Delete(ObjectRef::namespaced("EndpointSlice", slice.metadata())),
        ];
        one(&mut daemon, &gone, &mut remove);
    }
    let stats = daemon.publisher.stats();
    println!(
        "publications: {} into an older snapshot's file ({} retired), {} into new files; gateway {}",
        stats.spare_used,
        stats.retired_used,
        stats.spare_missed,
        if gateway.is_some() { "registered" } else { "none" }
    );
    drop(gateway);
    endpoint.print("endpoint");
    add.print("add");
    remove.print("remove");
    println!("at the end VmRSS {}, VmHWM {}", status("VmRSS:"), status("VmHWM:"));
}
