//! `control-daemon`: the real daemon path at the scale of the performance target, end to
//! end: torii-control's daemon loop ([`daemon::serve`]) with its Kubernetes API source
//! (kube-rs watchers over real HTTP) against the API server double
//! (`torii-kube-double`, in-process) serving 10 000 Services × 10 endpoints, and a
//! simulated gateway worker that maps, validates (bounds and CRC-32) and acknowledges every
//! published table, as torii-gateway's table watcher and worker do.
//!
//! ```sh
//! cargo run --release -p torii-benches --bin control-daemon -- [SERVICES [ENDPOINTS [CHANGES [MIN_INTERVAL_MS]]]]
//! ```
//!
//! Defaults: 10000 Services, 10 endpoints, 201 changes, `--min-interval-ms` 5 (the
//! daemon's default). Measured, each from the moment the change is written into the API
//! server double (which sends the watch event) to the moment the simulated worker
//! acknowledged the first table that has it:
//! - *start*: from the daemon's start to the first acknowledged table (lists of every
//!   object over HTTP, decoding, compiling, laying out, publishing, validating);
//! - *isolated*: one endpoint of one EndpointSlice changed, 20 ms after the previous
//!   change was acknowledged;
//! - *back to back*: the next change as soon as the previous one is acknowledged;
//! - *stream*: one change every millisecond, without waiting (bursts coalesced);
//! - *Service added*: a new Service (one externalIP front door) and its EndpointSlice,
//!   written one after the other, 20 ms after the previous change was acknowledged,
//!   measured from the first write to the table that has the front door with its
//!   endpoints; *Service removed*: those Services and slices deleted, to the table without
//!   the front door.
//!
//! With `RUST_LOG` set (e.g. `RUST_LOG=torii_control=debug,control_daemon=debug`) it logs,
//! timestamped to the microsecond on stderr, its writes and the daemon's events (watch
//! events seen, Services held and released, batches handed over, compiles, publications):
//! the trace of one change through the daemon.
//!
//! At the end it prints the process's resident memory (`VmRSS`, `VmHWM`: the daemon,
//! the in-process double and the simulated gateway together).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use torii_benches::{endpoint_slice, node, service, shm_tempdir, NODE_NAME};
use torii_control::daemon::{self, Source};
use torii_control::model::KubeObject;
use torii_control::source::kube::{self as kube_source, ClusterConfig, KubeSettings, KubeWatch};
use torii_kube_double::{FakeApiServer, Objects, Resource};
use torii_table::shm::{Mappings, StateRegion};

fn arg(n: usize, default: usize) -> usize {
    std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn json(o: &KubeObject) -> Value {
    match o {
        KubeObject::Service(s) => serde_json::to_value(s),
        KubeObject::EndpointSlice(s) => serde_json::to_value(s),
        KubeObject::Node(n) => serde_json::to_value(n),
    }
    .expect("k8s-openapi objects serialize")
}

/// A change waiting for the table that has it: Service `i`'s externalIP must lead to
/// `backend`.
struct Expected {
    external_ip: IpAddr,
    /// The endpoint the front door must lead to; `None`: the front door must be gone.
    backend: Option<IpAddr>,
    written_at: Instant,
    /// How long writing it into the double took (the API server's share).
    write: Duration,
    /// From the write to the moment the simulated worker saw the generation published
    /// (polled every 200 µs) and to its acknowledgement.
    published_after: Option<Duration>,
    adopted_after: Option<Duration>,
}

/// The simulated worker: adopts every published table (maps and validates it), drops the
/// previous one, acknowledges (through the gateway's [`Mappings`], as torii-gateway does:
/// the acknowledgement promises the old snapshot is unmapped, so torii-control may reuse its
/// file), then checks which expected changes the table has.
fn simulated_gateway(dir: std::path::PathBuf, expected: Arc<Mutex<Vec<Expected>>>, stop: Arc<AtomicBool>) -> u64 {
    let region = Arc::new(StateRegion::open(&dir).expect("state region"));
    region.register_gateway(std::process::id(), 1);
    let mappings = Mappings::new(Arc::clone(&region), 1);
    let mut table: Option<torii_table::Table> = None;
    let mut adopted = 0;
    while !stop.load(Ordering::Relaxed) {
        let g = region.published_generation();
        if g != 0 && table.as_ref().is_none_or(|t| t.generation() != g) {
            let seen = Instant::now();
            tracing::debug!(generation = g, "the simulated gateway sees a new generation");
            match mappings.load_table(&dir, g) {
                Ok(t) => {
                    table = Some(t);
                    mappings.adopted(0, g);
                    let now = Instant::now();
                    adopted += 1;
                    let t = table.as_ref().expect("just stored");
                    for e in expected.lock().expect("lock").iter_mut().filter(|e| e.adopted_after.is_none()) {
                        let has = match e.backend {
                            Some(backend) => {
                                t.frontend(e.external_ip, 6, 80).and_then(|f| t.service(f.service)).is_some_and(|s| {
                                    s.backends.iter().any(|b| torii_table::layout::addr_from16(b.addr) == backend)
                                })
                            }
                            None => t.frontend(e.external_ip, 6, 80).is_none(),
                        };
                        if has {
                            e.published_after = Some(seen.saturating_duration_since(e.written_at));
                            e.adopted_after = Some(now - e.written_at);
                        }
                    }
                }
                Err(e) => eprintln!("simulated gateway: generation {g} rejected: {e}"),
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    region.unregister_gateway(std::process::id());
    adopted
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn summary(label: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{label} ({} changes): median {}, p90 {}, p99 {}, max {}",
        samples.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(samples[samples.len() - 1]),
    );
}

fn main() {
    let services = arg(1, torii_benches::SERVICES);
    let endpoints = arg(2, torii_benches::ENDPOINTS);
    let changes = arg(3, 201).max(1);
    let min_interval = Duration::from_millis(arg(4, kube_source::DEFAULT_MIN_INTERVAL.as_millis() as usize) as u64);
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));

    let mut objects = Objects::new();
    objects.push(json(&node()));
    for i in 0..services {
        objects.push(json(&service(i)));
        objects.push(json(&KubeObject::EndpointSlice(Box::new(endpoint_slice(i, endpoints, 0)))));
    }
    let api = FakeApiServer::start(&objects).expect("the API server double starts");
    let config_dir = tempfile::tempdir().expect("temporary directory");
    let kubeconfig = config_dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    println!(
        "workload: {services} Services x {endpoints} endpoints ({} objects) served over HTTP; min interval {}",
        objects.objects().len(),
        ms(min_interval)
    );

    let shm = shm_tempdir();
    let expected: Arc<Mutex<Vec<Expected>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    // The gateway registers first, so the start is measured to its acknowledgement.
    let gateway = {
        let (dir, expected, stop) = (shm.path().to_owned(), expected.clone(), stop.clone());
        std::thread::spawn(move || simulated_gateway(dir, expected, stop))
    };
    std::thread::sleep(Duration::from_millis(20));
    let region = StateRegion::open(shm.path()).expect("state region");

    let started = Instant::now();
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = {
        let shm_dir = shm.path().to_owned();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            runtime.block_on(async move {
                let (client, _) =
                    kube_source::connect(&ClusterConfig::Kubeconfig(kubeconfig)).await.expect("kubeconfig");
                let settings = KubeSettings { min_interval, ..KubeSettings::new(NODE_NAME) };
                let source = Source::Kube(Box::new(KubeWatch::start(&client, settings)));
                let options = torii_benches::options();
                let shutdown = async {
                    let _ = shutdown_rx.await;
                };
                daemon::serve(source, &options, shm_dir, shutdown).await.expect("daemon");
            });
        })
    };
    while region.min_acked().unwrap_or(0) == 0 {
        std::thread::sleep(Duration::from_micros(500));
    }
    println!("start (list over HTTP, compile, publish, first acknowledgement): {}", ms(started.elapsed()));

    let mut serial = 0u64;
    // Registers a change the watcher thread is to see published: its index in `expected`.
    let expect = |external_ip: IpAddr, backend: Option<IpAddr>| {
        let mut e = expected.lock().expect("lock");
        e.push(Expected {
            external_ip,
            backend,
            written_at: Instant::now(),
            write: Duration::ZERO,
            published_after: None,
            adopted_after: None,
        });
        e.len() - 1
    };
    let change = |serial: u64| {
        // The EndpointSlice of Service i with endpoint j replaced by 10.200.x.y.
        let i = (serial as usize).wrapping_mul(7919) % services;
        let mut slice = endpoint_slice(i, endpoints, 0);
        let j = serial as usize % endpoints;
        let backend = Ipv4Addr::from(0x0ac8_0000 + serial as u32);
        if let Some(ep) = slice.endpoints.as_mut().and_then(|e| e.get_mut(j)) {
            ep.addresses = vec![backend.to_string()];
        }
        let mut v = json(&KubeObject::EndpointSlice(Box::new(slice)));
        v["metadata"]["resourceVersion"] = Value::Null;
        let external_ip = IpAddr::V4(Ipv4Addr::from(0xc612_0000 + i as u32));
        let index = expect(external_ip, Some(backend.into()));
        let t = Instant::now();
        api.apply(v).expect("apply");
        expected.lock().expect("lock")[index].write = t.elapsed();
        index
    };
    // (write into the double, to publication, to acknowledgement) of change `index`.
    let wait = |index: usize| loop {
        let e = &expected.lock().expect("lock")[index];
        if let (Some(p), Some(a)) = (e.published_after, e.adopted_after) {
            return (e.write, p, a);
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    let report = |label: &str, samples: &[(Duration, Duration, Duration)]| {
        let mut write: Vec<Duration> = samples.iter().map(|s| s.0).collect();
        let mut published: Vec<Duration> = samples.iter().map(|s| s.1).collect();
        let mut acked: Vec<Duration> = samples.iter().map(|s| s.2).collect();
        summary(&format!("{label}: watch event to publication"), &mut published);
        summary(&format!("{label}: watch event to acknowledgement"), &mut acked);
        summary(&format!("{label}: (writing into the API server double)"), &mut write);
    };

    for (label, pause) in [("isolated, 20 ms apart", Some(Duration::from_millis(20))), ("back to back", None)] {
        let mut samples = Vec::with_capacity(changes);
        for _ in 0..changes {
            serial += 1;
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
            samples.push(wait(change(serial)));
        }
        report(&format!("one endpoint changed, {label}"), &samples);
    }
    // Front doors added and removed: a new Service and its slice (written one after the
    // other, as a controller does), then both deleted.
    let door = |i: usize, add: bool| {
        let external_ip = IpAddr::V4(Ipv4Addr::from(0xc612_0000 + i as u32));
        let slice = endpoint_slice(i, endpoints, 0);
        let backend = slice
            .endpoints
            .as_ref()
            .and_then(|e| e.first())
            .and_then(|e| e.addresses.first())
            .and_then(|a| a.parse::<IpAddr>().ok())
            .expect("an endpoint");
        let index = expect(external_ip, add.then_some(backend));
        let t = Instant::now();
        tracing::debug!(i, add, "writing a Service and its slice");
        if add {
            for o in [service(i), KubeObject::EndpointSlice(Box::new(slice))] {
                let mut v = json(&o);
                v["metadata"]["resourceVersion"] = Value::Null;
                api.apply(v).expect("apply");
            }
        } else {
            let name = format!("svc-{i:05}");
            api.delete(Resource::Services, torii_benches::NAMESPACE, &name).expect("delete");
            api.delete(Resource::EndpointSlices, torii_benches::NAMESPACE, &format!("{name}-x7k2p")).expect("delete");
        }
        expected.lock().expect("lock")[index].write = t.elapsed();
        tracing::debug!(i, add, "written");
        index
    };
    for (label, add) in [("a Service and its slice added", true), ("a Service and its slice removed", false)] {
        let mut samples = Vec::with_capacity(changes);
        for k in 0..changes {
            std::thread::sleep(Duration::from_millis(20));
            samples.push(wait(door(services + k, add)));
        }
        report(&format!("{label}, 20 ms apart"), &samples);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines().filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM")) {
        println!("{line} (this process: daemon, API server double, simulated gateway)");
    }
    // A stream: one change every millisecond, not waiting for the tables.
    let first = expected.lock().expect("lock").len();
    let t = Instant::now();
    for n in 0..changes {
        serial += 1;
        let due = t + Duration::from_millis(n as u64);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        change(serial);
    }
    let samples: Vec<_> = (first..first + changes).map(wait).collect();
    let generations = region.published_generation();
    report("one endpoint changed, a stream of one change per ms", &samples);
    println!("  ({generations} generations published in all)");

    let _ = shutdown_tx.send(());
    let _ = daemon.join();
    stop.store(true, Ordering::Relaxed);
    let adopted = gateway.join().unwrap_or(0);
    println!("the simulated gateway adopted {adopted} tables");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at end: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    drop(api);
}
