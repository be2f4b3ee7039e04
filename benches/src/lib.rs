//! Workloads of torii's control-plane benchmarks, shared by the criterion benches
//! (`benches/control.rs`) and the `control-scale` binary that prints the medians quoted in
//! BENCHMARKS.md.
//!
//! The workload is the one of the performance target (issue 5): a cluster of
//! [`SERVICES`] Services with [`ENDPOINTS`] ready endpoints each, as k8s-openapi objects
//! (what a source hands the compiler), every Service with one externalIP front door and
//! the first [`NODE_PORT_SERVICES`] of them also type NodePort (a NodePort front door on
//! the gateway Node's address). Two paths are measured:
//!
//! - **from scratch**: validate every object, compile, lay the table out and publish it to a
//!   fresh shared-memory directory (a fresh [`Publisher`], so no ring is reused) — what
//!   torii-control does when it starts;
//! - **one endpoint changed**: a warm [`Compiler`] and [`Publisher`] receive one
//!   EndpointSlice whose endpoint was replaced (a watch event), recompile and publish —
//!   what every endpoint change costs in the daemon.
//!
//! The data plane's workloads are in [`dataplane`] (the pipeline benchmarks) and
//! [`maglev`] (ring balance and disruption).

pub mod dataplane;
pub mod maglev;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use torii_control::compile::{self, Change, CompileOptions, Compiled, Compiler};
use torii_control::model::{KubeObject, Objects};
use torii_control::publish::Publisher;
use torii_table::shm::{self, StateRegion};
use torii_table::TableSpec;

/// Services in the target workload.
pub const SERVICES: usize = 10_000;
/// Endpoints per Service in the target workload.
pub const ENDPOINTS: usize = 10;
/// Services that are also type NodePort (the NodePort range 30000–32767 holds 2768).
pub const NODE_PORT_SERVICES: usize = 2_000;
/// The gateway's Node.
pub const NODE_NAME: &str = "bench-gw";
/// The namespace of every Service.
pub const NAMESPACE: &str = "bench";

/// The options the workload is compiled with.
pub fn options() -> CompileOptions {
    CompileOptions { node_name: NODE_NAME.into(), ..Default::default() }
}

fn ipv4(n: u32) -> String {
    std::net::Ipv4Addr::from(n).to_string()
}

fn meta(name: String, version: u64) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(NAMESPACE.into()),
        resource_version: Some(version.to_string()),
        ..Default::default()
    }
}

/// Service `i`: ClusterIP `10.96.0.0 + i`, externalIP `198.18.0.0 + i` (the benchmarking
/// range of RFC 2544), port `http` 80 → 8080, type NodePort (`30000 + i`) for the first
/// [`NODE_PORT_SERVICES`]; selector `app: svc-NNNNN`, as a Service whose EndpointSlices
/// the EndpointSlice controller writes has (torii-control's API source holds such a new
/// Service back for its first slice; the compiler does not read selectors).
pub fn service(i: usize) -> KubeObject {
    let node_port = i < NODE_PORT_SERVICES;
    KubeObject::Service(Box::new(core::Service {
        metadata: meta(format!("svc-{i:05}"), 1),
        spec: Some(core::ServiceSpec {
            type_: Some(if node_port { "NodePort" } else { "ClusterIP" }.into()),
            cluster_ip: Some(ipv4(0x0a60_0000 + i as u32)),
            cluster_ips: Some(vec![ipv4(0x0a60_0000 + i as u32)]),
            external_ips: Some(vec![ipv4(0xc612_0000 + i as u32)]),
            selector: Some([("app".to_owned(), format!("svc-{i:05}"))].into()),
            ports: Some(vec![core::ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::Int(8080)),
                node_port: node_port.then(|| 30_000 + i as i32),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }))
}

/// The EndpointSlice of Service `i` with `endpoints` ready endpoints `10.1.0.0 + i *
/// endpoints + j`, spread over three nodes.
pub fn endpoint_slice(i: usize, endpoints: usize, version: u64) -> discovery::EndpointSlice {
    let base = 0x0a01_0000 + (i * endpoints) as u32;
    discovery::EndpointSlice {
        metadata: ObjectMeta {
            labels: Some([("kubernetes.io/service-name".to_owned(), format!("svc-{i:05}"))].into()),
            ..meta(format!("svc-{i:05}-x7k2p"), 1 + version)
        },
        address_type: "IPv4".into(),
        ports: Some(vec![discovery::EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        endpoints: Some(
            (0..endpoints as u32)
                .map(|j| discovery::Endpoint {
                    addresses: vec![ipv4(base + j)],
                    conditions: Some(discovery::EndpointConditions {
                        ready: Some(true),
                        serving: Some(true),
                        terminating: Some(false),
                    }),
                    node_name: Some(format!("node-{}", j % 3)),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

/// The gateway's Node, with one InternalIP.
pub fn node() -> KubeObject {
    KubeObject::Node(Box::new(core::Node {
        metadata: ObjectMeta { name: Some(NODE_NAME.into()), resource_version: Some("1".into()), ..Default::default() },
        spec: None,
        status: Some(core::NodeStatus {
            addresses: Some(vec![core::NodeAddress { type_: "InternalIP".into(), address: "192.0.2.1".into() }]),
            ..Default::default()
        }),
    }))
}

/// The whole cluster: the Node, then each Service followed by its EndpointSlice.
pub fn cluster(services: usize, endpoints: usize) -> Vec<KubeObject> {
    let mut out = Vec::with_capacity(1 + 2 * services);
    out.push(node());
    for i in 0..services {
        out.push(service(i));
        out.push(KubeObject::EndpointSlice(Box::new(endpoint_slice(i, endpoints, 0))));
    }
    out
}

/// Change number `serial`: the EndpointSlice of Service `serial * 7919 % services` with
/// endpoint `serial % endpoints` replaced by a fresh address (`10.200.0.0 + serial`), as a
/// watch would deliver it (a new resourceVersion).
pub fn one_endpoint_changed(services: usize, endpoints: usize, serial: u64) -> KubeObject {
    let i = (serial as usize).wrapping_mul(7919) % services;
    let mut slice = endpoint_slice(i, endpoints, 1 + serial);
    let j = serial as usize % endpoints;
    if let Some(ep) = slice.endpoints.as_mut().and_then(|e| e.get_mut(j)) {
        ep.addresses = vec![ipv4(0x0ac8_0000 + serial as u32)];
    }
    KubeObject::EndpointSlice(Box::new(slice))
}

/// The stages of the from-scratch path, each timed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stages {
    /// `Objects::from_kube`.
    pub validate: Duration,
    /// `compile::compile` and `to_table_spec`.
    pub compile: Duration,
    /// Laying the table out, writing and publishing it (`Publisher::publish`).
    pub publish: Duration,
}

impl Stages {
    /// The sum of the stages.
    pub fn total(&self) -> Duration {
        self.validate + self.compile + self.publish
    }
}

/// The from-scratch path: validate, compile and publish `objects` with a fresh
/// [`Publisher`] on `shm_dir`. Returns the stage times and the result.
///
/// # Panics
/// When the shared-memory directory cannot be opened or written.
pub fn from_scratch(objects: &[KubeObject], shm_dir: &std::path::Path) -> (Stages, Compiled, TableSpec) {
    let t0 = Instant::now();
    let (validated, rejected) = Objects::from_kube(objects);
    assert!(rejected.is_empty(), "{rejected:?}");
    let t1 = Instant::now();
    let compiled = compile::compile(&validated, &options());
    let spec = compiled.to_table_spec();
    let t2 = Instant::now();
    let mut publisher = Publisher::open(shm_dir).expect("shared-memory directory");
    publisher.publish(&spec).expect("publish");
    let t3 = Instant::now();
    (Stages { validate: t1 - t0, compile: t2 - t1, publish: t3 - t2 }, compiled, spec)
}

/// A warm daemon: a [`Compiler`] holding the cluster and a [`Publisher`] that published
/// its table once.
pub struct Daemon {
    /// The compiler.
    pub compiler: Compiler,
    /// The publisher.
    pub publisher: Publisher,
}

impl Daemon {
    /// Loads `objects` and publishes the first table.
    ///
    /// # Panics
    /// When the shared-memory directory cannot be opened or written.
    pub fn start(objects: &[KubeObject], shm_dir: &std::path::Path) -> Self {
        let mut compiler = Compiler::new(options());
        compiler.apply(objects.iter().map(Change::Upsert));
        let mut publisher = Publisher::open(shm_dir).expect("shared-memory directory");
        publisher.publish_from(&compiler).expect("publish");
        Self { compiler, publisher }
    }

    /// One watch event: compile it in and publish the new table. Returns (compile time,
    /// publish time).
    ///
    /// # Panics
    /// When publishing fails.
    pub fn handle(&mut self, change: &KubeObject) -> (Duration, Duration) {
        let t0 = Instant::now();
        self.compiler.apply([Change::Upsert(change)]);
        let t1 = Instant::now();
        self.publisher.publish_from(&self.compiler).expect("publish");
        (t1 - t0, t1.elapsed())
    }
}

/// A gateway with one worker, simulated in a thread: it registers in the state region,
/// then, like torii-gateway's table watcher and worker, polls the published generation,
/// maps and validates each new snapshot ([`shm::load_table`]: bounds and CRC-32),
/// drops the previous table and acknowledges the new generation. Stops when dropped.
pub struct SimulatedGateway {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl SimulatedGateway {
    /// Registers a gateway of one worker in `shm_dir` and starts polling every `poll`
    /// (torii-gateway polls every 2 ms; `Duration::ZERO` spins).
    ///
    /// # Panics
    /// When the state region cannot be opened.
    pub fn start(shm_dir: &std::path::Path, poll: Duration) -> Self {
        let region = StateRegion::open(shm_dir).expect("state region");
        region.register_gateway(std::process::id(), 1);
        let stop = Arc::new(AtomicBool::new(false));
        let dir = shm_dir.to_owned();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("simulated-gateway".into())
            .spawn(move || {
                let mut table = None;
                let mut adopted = 0;
                while !flag.load(Ordering::Relaxed) {
                    let g = region.published_generation();
                    if g != 0 && table.as_ref().is_none_or(|t: &torii_table::Table| t.generation() != g) {
                        if let Ok(t) = shm::load_table(&dir, g) {
                            table = Some(t); // the previous table is dropped before the ack
                            region.ack(0, g);
                            adopted += 1;
                        }
                    }
                    if poll.is_zero() {
                        std::hint::spin_loop();
                    } else {
                        std::thread::sleep(poll);
                    }
                }
                region.unregister_gateway(std::process::id());
                adopted
            })
            .expect("spawning the simulated gateway");
        Self { stop, thread: Some(thread) }
    }

    /// Stops it; returns how many tables it adopted.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for SimulatedGateway {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// This thread's time on a CPU and time waiting for one (runnable but not running), from
/// `/proc/thread-self/schedstat` (nanoseconds; zero where unavailable): on a shared
/// machine, the first is the work a path does and the second what the other processes
/// cost it.
pub fn thread_sched() -> (Duration, Duration) {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
    (Duration::from_nanos(fields.next().unwrap_or(0)), Duration::from_nanos(fields.next().unwrap_or(0)))
}

/// A fresh temporary directory under `/dev/shm` (tmpfs, as in production), falling back
/// to the system's temporary directory.
///
/// # Panics
/// When no temporary directory can be created.
pub fn shm_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("torii-bench-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory")
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): on a machine shared with
/// other work, unlike wall-clock time it leaves out the time the scheduler gives others.
pub fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec.try_into().unwrap_or(0), t.tv_nsec.try_into().unwrap_or(0))
}

/// The median of `samples` (the upper median for an even count).
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}
