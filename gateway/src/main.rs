//! torii-gateway: runs the data plane on the configured interfaces until SIGINT/SIGTERM.
//! With `[bgp]` configured, SIGTERM drains first: the VIPs' routes are withdrawn, the
//! gateway keeps forwarding for `bgp.drain_s`, then exits (SIGINT exits at once). With
//! `[l2]`, the same with the VIPs given up to the peer gateway (`l2.drain_s`).
//!
//! `driver` in the configuration picks the packet I/O: AF_PACKET sockets, or DPDK
//! (falling back to AF_PACKET when DPDK cannot start and `dpdk.fallback_to_af_packet` is
//! set). Either way the same workers run the same pipeline; the startup line says which
//! driver runs (`torii-gateway running: driver=...`).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use torii_gateway::announce::Withdraw;
use torii_gateway::config::{Config, Driver};
use torii_gateway::conntrack::persist::{monotonic_ns, Opened};
use torii_gateway::counters::Counters;
use torii_gateway::host::Host;
use torii_gateway::io::af_packet::{AfPacketSocket, RingConfig};
use torii_gateway::io::af_packet_io::{AfPacketDevices, AfPacketIo};
use torii_gateway::io::fanout;
use torii_gateway::metrics::{PortReport, PortSlot, Server as MetricsServer, Source as MetricsSource};
use torii_gateway::pipeline::{Shared, WorkerState};
use torii_gateway::snat::{ReplySteering, SnatPorts};
use torii_gateway::table::shm::{Mappings, StateRegion};
use torii_gateway::table::Table;
use torii_gateway::wire::MacAddr;
use torii_gateway::worker::{PacketIo, ReportSlot, TableHandle, TableWatcher, Worker};

/// torii's data plane: serves Kubernetes Service front doors with per-flow full NAT.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Gateway host configuration (TOML). Without it, the embedded default
    /// (configs/gateway.toml) is used.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    check_config: bool,
    /// Withdraw every VIP route (`[bgp]`: write BIRD's file without routes and have BIRD
    /// take it) and exit: for a service manager after the gateway died
    /// (`ExecStopPost=`), since a killed gateway cannot withdraw its own routes.
    #[arg(long)]
    withdraw: bool,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let config = Config::load(args.config.as_deref()).context("configuration")?;
    if args.check_config {
        println!("{config:#?}");
        return Ok(());
    }
    if args.withdraw {
        let bgp = config.bgp.as_ref().context("--withdraw: the configuration has no [bgp] table")?;
        let answer = torii_gateway::announce::Announcer::withdraw(bgp)?;
        tracing::info!(bird = %answer, "withdrew every VIP route");
        return Ok(());
    }
    // One gateway per shared-memory directory, checked before anything is written there.
    let _lock = torii_gateway::table::shm::lock_dir(&config.shm_dir, torii_gateway::table::shm::Role::Gateway)?;
    // And per directory of conntrack regions, when they have their own (hugetlbfs).
    let _region_lock = match &config.conntrack.region_dir {
        Some(dir) => Some(
            torii_gateway::conntrack::persist::lock_region_dir(dir)
                .with_context(|| format!("conntrack.region_dir {}", dir.display()))?,
        ),
        None => None,
    };
    match config.driver {
        Driver::AfPacket => run_af_packet(&config, "driver=af_packet".into()),
        Driver::Dpdk => run_dpdk(&config),
    }
}

/// What a driver hands the common part of the gateway: how many workers, the interfaces'
/// MACs, each worker's I/O-to-be (`seeds[w]`, moved into worker `w`'s thread), under
/// RSS the SNAT port steering, and how to read the ports' device counters.
struct Plan<'a, S> {
    /// The startup line's driver part (`driver=...`), which scripts/demo shows.
    driver_line: String,
    workers: usize,
    macs: Vec<MacAddr>,
    seeds: Vec<S>,
    steering: Option<Arc<dyn ReplySteering>>,
    /// Reads every port's device counters (on the main thread, about once a second).
    devices: Box<dyn FnMut() -> Vec<PortReport> + 'a>,
}

/// Writes `reason` (an error chain) on one line.
#[cfg(feature = "dpdk")]
fn one_line(reason: &str) -> String {
    reason.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(feature = "dpdk")]
fn run_dpdk(config: &Config) -> Result<()> {
    use torii_gateway::io::dpdk::{DpdkDriver, WorkerSeed};
    match DpdkDriver::start(config) {
        Ok(mut driver) => {
            let workers = driver.workers();
            let seeds = (0..workers).map(|w| driver.take_seed(w).context("worker queues")).collect::<Result<_>>()?;
            let plan = Plan {
                driver_line: format!("driver=dpdk ({})", driver.summary()),
                workers,
                macs: driver.macs().to_vec(),
                seeds,
                steering: driver.steering(),
                devices: Box::new(|| driver.port_reports()),
            };
            let result = serve(config, plan, |seed: WorkerSeed| seed.into_io().map_err(anyhow::Error::from));
            driver.shutdown();
            result
        }
        Err(e) if config.dpdk.fallback_to_af_packet => {
            let reason = one_line(&format!("{:#}", anyhow::Error::from(e)));
            tracing::warn!("DPDK could not start, falling back to AF_PACKET (dpdk.fallback_to_af_packet): {reason}");
            run_af_packet(config, format!("driver=af_packet (DPDK unavailable: {reason})"))
        }
        Err(e) => Err(anyhow::Error::from(e)
            .context("starting the DPDK driver (dpdk.fallback_to_af_packet = true runs AF_PACKET instead)")),
    }
}

#[cfg(not(feature = "dpdk"))]
fn run_dpdk(config: &Config) -> Result<()> {
    let reason = "this torii-gateway was built without the `dpdk` feature";
    if config.dpdk.fallback_to_af_packet {
        tracing::warn!("{reason}: falling back to AF_PACKET (dpdk.fallback_to_af_packet)");
        run_af_packet(config, format!("driver=af_packet (DPDK unavailable: {reason})"))
    } else {
        bail!("driver = \"dpdk\": {reason}; rebuild with default features, or use driver = \"af_packet\"")
    }
}

fn run_af_packet(config: &Config, driver_line: String) -> Result<()> {
    let workers = config.workers;
    let program = fanout::steering_program_dual(
        &config.snat.addresses,
        &config.snat.addresses6,
        config.snat.port_min,
        config.snat.port_max,
    );
    // Fanout group ids are per network namespace; derive ours from the pid so two gateways
    // in one namespace do not join each other's groups.
    let group_base = (std::process::id() as u16).wrapping_mul(64);
    let mut sockets: Vec<Vec<AfPacketSocket>> = Vec::with_capacity(workers);
    for w in 0..workers {
        let mut per_port = Vec::with_capacity(config.ports.len());
        for (i, port) in config.ports.iter().enumerate() {
            let s = AfPacketSocket::open(&port.name, &RingConfig::default())
                .with_context(|| format!("worker {w}: opening AF_PACKET socket on {}", port.name))?;
            if workers > 1 {
                s.join_fanout(group_base.wrapping_add(i as u16), &program)
                    .with_context(|| format!("worker {w}: joining fanout group on {}", port.name))?;
            }
            per_port.push(s);
        }
        sockets.push(per_port);
    }
    let macs: Vec<MacAddr> = sockets[0].iter().map(|s| MacAddr(s.mac_addr())).collect();
    let mut handles = Vec::with_capacity(config.ports.len());
    for (i, port) in config.ports.iter().enumerate() {
        let per_worker = sockets
            .iter()
            .map(|w| w[i].statistics_handle())
            .collect::<std::io::Result<Vec<_>>>()
            .with_context(|| format!("{}: a handle on the sockets' statistics", port.name))?;
        handles.push((port.name.clone(), per_worker));
    }
    let mut devices = AfPacketDevices::new(handles);
    let plan = Plan {
        driver_line,
        workers,
        macs,
        seeds: sockets,
        steering: None,
        devices: Box::new(move || devices.reports()),
    };
    serve(config, plan, |socks| Ok(AfPacketIo::new(socks)))
}

/// Runs the gateway on `plan`'s driver until SIGINT/SIGTERM: the table watcher, one
/// worker thread per seed (`open` turns the seed into the worker's [`PacketIo`] on that
/// thread), and the counter reports.
fn serve<S, I, F>(config: &Config, plan: Plan<'_, S>, open: F) -> Result<()>
where
    S: Send + 'static,
    I: PacketIo,
    F: Fn(S) -> Result<I> + Send + Copy + 'static,
{
    let Plan { driver_line, workers, macs, seeds, steering, mut devices } = plan;
    for iface in &config.interfaces {
        let addrs: Vec<String> = iface.addresses.iter().map(|c| format!("{}/{}", c.addr, c.prefix_len)).collect();
        let mac = macs[iface.port];
        tracing::info!(interface = %iface.label(), %mac, vlan = ?iface.vlan, addresses = ?addrs, "interface");
    }
    let host = Arc::new(Host::new(config, &macs));
    let mut shared = Shared::new(config.neighbour_capacity, config.conntrack.capacity * workers);
    if config.l2.is_some() {
        // L2 mode: answer ARP/NDP for no VIP until torii-control says which are ours.
        shared.l2 = Arc::new(torii_gateway::l2::Owners::l2());
    }
    for n in &config.neighbours {
        shared.neighbours.learn(n.address, MacAddr(n.mac), u64::MAX);
    }
    let region = Arc::new(
        StateRegion::open(&config.shm_dir)
            .with_context(|| format!("opening the shared state region in {}", config.shm_dir.display()))?,
    );
    let pid = std::process::id();
    region.register_gateway(pid, workers);
    let mappings = Mappings::new(Arc::clone(&region), workers);
    let tables = Arc::new(TableHandle::new(Table::empty()));
    let stop = Arc::new(AtomicBool::new(false));
    // SIGTERM asks for a drain when routes are announced ([bgp]), a stop otherwise.
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))
        .context("installing signal handlers")?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&term))
        .context("installing signal handlers")?;
    let watcher = Arc::new(TableWatcher {
        dir: config.shm_dir.clone(),
        region: Arc::clone(&region),
        mappings: Arc::clone(&mappings),
        handle: Arc::clone(&tables),
        rejected: AtomicU64::new(0),
    });
    // Adopt what is already published before the workers start.
    watcher.poll(&mut 0);
    let epoch = Instant::now();
    // Where the workers' clock (`epoch.elapsed()`) is on CLOCK_MONOTONIC: conntrack regions
    // store deadlines of this clock and carry them over to the next process's.
    let origin_ns = monotonic_ns().saturating_sub(epoch.elapsed().as_nanos() as u64);
    let driver_name = driver_line.split_whitespace().next().unwrap_or_default().trim_start_matches("driver=");
    tracing::info!(
        driver = driver_name,
        workers,
        scheduler = %config.scheduler,
        snat = ?config.snat.addresses,
        shm_dir = %config.shm_dir.display(),
        "torii-gateway running: {driver_line}"
    );

    let exports: Vec<ReportSlot> = (0..workers).map(|_| Arc::default()).collect();
    let ports = PortSlot::new(Mutex::new(devices()));
    let source = Arc::new(MetricsSource {
        reports: exports.clone(),
        watcher: Arc::clone(&watcher),
        epoch,
        ports: Arc::clone(&ports),
    });
    let announcer = match &config.bgp {
        None => None,
        Some(bgp) => Some(
            torii_gateway::announce::Announcer::start(bgp.clone(), Arc::clone(&source), Arc::clone(&stop))
                .context("spawning the announcer")?,
        ),
    };
    let speaker = match &config.l2 {
        None => None,
        Some(l2) => Some(
            torii_gateway::l2::driver::Speaker::start(
                l2.clone(),
                config.shm_dir.clone(),
                Arc::clone(&source),
                Arc::clone(&shared.l2),
                Arc::clone(&stop),
            )
            .context("spawning the L2 thread")?,
        ),
    };
    // What a SIGTERM drains: BGP's routes or L2 mode's VIPs.
    let withdrawer: Option<(&dyn Withdraw, u32)> = match (&announcer, &speaker, &config.bgp, &config.l2) {
        (Some(a), _, Some(bgp), _) => Some((a, bgp.drain_s)),
        (_, Some(s), _, Some(l2)) => Some((s, l2.drain_s)),
        _ => None,
    };
    let metrics = match config.metrics.listen {
        None => None,
        Some(listen) => {
            let server = MetricsServer::start(listen, Arc::clone(&source), Arc::clone(&stop))
                .with_context(|| format!("metrics.listen: serving /metrics on {listen}"))?;
            tracing::info!(addr = %server.addr, "serving /metrics and /healthz");
            Some(server)
        }
    };
    let mut threads = Vec::new();
    let region_dir = config.conntrack.region_dir.as_deref().unwrap_or(&config.shm_dir);
    for (w, io_seed) in seeds.into_iter().enumerate() {
        let (mut state, opened) = WorkerState::persistent(
            w,
            workers,
            Arc::clone(&host),
            &shared,
            config.conntrack.capacity,
            seed(w),
            region_dir,
            origin_ns,
        )
        .with_context(|| format!("worker {w}: conntrack region in {}", region_dir.display()))?;
        for (family, opened) in ["IPv4", "IPv6"].iter().zip(opened) {
            let flows = if *family == "IPv4" { state.conntrack.len() } else { state.conntrack6.len() };
            match opened {
                Opened::Adopted => tracing::info!(worker = w, family, flows, "conntrack: adopted flows"),
                Opened::Created(None) => tracing::info!(worker = w, family, "conntrack: new region"),
                Opened::Created(Some(why)) => tracing::warn!(worker = w, family, "conntrack region: {why}"),
            }
        }
        if let Some(steering) = &steering {
            state.snat = SnatPorts::steered(w, config.snat.port_min, config.snat.port_max, Arc::clone(steering));
        }
        // SNAT ports from a random position (RFC 6056 § 3.3.1), unlike the tests' states.
        state.snat.reseed(seed(w));
        let worker = Worker {
            state,
            tables: Arc::clone(&tables),
            mappings: Arc::clone(&mappings),
            stop: Arc::clone(&stop),
            export: Arc::clone(&exports[w]),
            epoch,
        };
        let stop = Arc::clone(&stop);
        let t = std::thread::Builder::new()
            .name(format!("torii-worker-{w}"))
            .spawn(move || -> Result<Counters> {
                let mut io = match open(io_seed) {
                    Ok(io) => io,
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        return Err(e.context(format!("worker {w}: starting its packet I/O")));
                    }
                };
                Ok(worker.run(&mut io))
            })
            .context("spawning worker")?;
        threads.push(t);
    }
    let watcher_thread = {
        let (watcher, stop) = (Arc::clone(&watcher), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("torii-tables".into())
            .spawn(move || watcher.run(Duration::from_millis(2), &stop))
            .context("spawning table watcher")?
    };

    let mut last = Counters::default();
    let mut ticks = 0u32;
    let mut drain = Drain::default();
    let mut stats_failed = false;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if drain.poll(term.swap(false, Ordering::Relaxed), withdrawer) {
            stop.store(true, Ordering::Relaxed);
        }
        ticks += 1;
        if ticks.is_multiple_of(10) {
            let reports = devices();
            if let Ok(mut p) = ports.lock() {
                *p = reports;
            }
            // Per-front-door counters for `torii-control status` (`table::stats`).
            let snapshot = source.snapshot();
            let stats = torii_gateway::metrics::frontend_stats(&snapshot);
            let generation = snapshot.table.generation();
            drop(snapshot);
            if let Err(e) = torii_gateway::table::stats::write_stats(&config.shm_dir, pid, generation, &stats) {
                if !stats_failed {
                    tracing::warn!("cannot write the front-door counters into {}: {e}", config.shm_dir.display());
                }
                stats_failed = true;
            }
        }
        if ticks.is_multiple_of(100) {
            let total = totals(&exports);
            if total != last {
                tracing::info!("counters: {total}");
                last = total;
            }
        }
    }
    tracing::info!("stopping");
    let mut total = Counters::default();
    let mut failed = None;
    for (w, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(Ok(c)) => {
                tracing::info!(worker = w, "final counters: {c}");
                total.add(&c);
            }
            Ok(Err(e)) => {
                tracing::error!("{e:#}");
                failed.get_or_insert(e);
            }
            Err(_) => bail!("worker {w} panicked"),
        }
    }
    let _ = watcher_thread.join();
    if let Some(a) = announcer {
        a.join();
    }
    if let Some(s) = speaker {
        s.join();
    }
    if let Some(m) = metrics {
        m.join();
    }
    region.unregister_gateway(pid);
    // Counters no gateway updates any more must not be shown as live.
    let _ = torii_gateway::table::stats::remove_stats(&config.shm_dir, pid);
    tracing::info!("final counters (all workers): {total}");
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Graceful drain (the maintenance path Katran and Maglev describe): on SIGTERM the
/// announcer withdraws every route (L2 mode: the gateway gives its VIPs up and
/// torii-control releases their Leases); once that took effect (or after
/// [`Drain::WITHDRAW_WAIT`]), the gateway keeps forwarding for `drain_s`, then stops.
#[derive(Default)]
struct Drain {
    /// When SIGTERM arrived.
    asked: Option<Instant>,
    /// When the drain period started (routes withdrawn).
    since: Option<Instant>,
}

impl Drain {
    /// Longest wait for BIRD to confirm the withdrawal before the drain period starts anyway.
    const WITHDRAW_WAIT: Duration = Duration::from_secs(5);

    /// Advances the drain; `term`: SIGTERM arrived since the last call; `withdrawer`: what
    /// gives the VIPs up, and the drain period. True: stop now.
    fn poll(&mut self, term: bool, withdrawer: Option<(&dyn Withdraw, u32)>) -> bool {
        let Some((announcer, drain_s)) = withdrawer else { return term };
        if term && self.asked.is_none() {
            tracing::info!(drain_s, "SIGTERM: draining: giving every VIP up first");
            announcer.drain();
            self.asked = Some(Instant::now());
        }
        let Some(asked) = self.asked else { return false };
        if self.since.is_none() {
            let withdrawn = announcer.withdrawn();
            if !withdrawn && asked.elapsed() < Self::WITHDRAW_WAIT {
                return false;
            }
            if withdrawn {
                tracing::info!(drain_s, "VIPs given up; forwarding what still arrives until the drain ends");
            } else {
                tracing::warn!(
                    drain_s,
                    "the withdrawal is not confirmed (BIRD, or the Leases' release); draining anyway"
                );
            }
            self.since = Some(Instant::now());
        }
        let done = self.since.is_some_and(|t| t.elapsed() >= Duration::from_secs(u64::from(drain_s)));
        if done {
            tracing::info!("drain period over");
        }
        done
    }
}

fn totals(exports: &[ReportSlot]) -> Counters {
    let mut total = Counters::default();
    for e in exports {
        if let Ok(r) = e.lock() {
            total.add(&r.counters);
        }
    }
    total
}

/// A per-worker random seed for the conntrack hash (so flow keys cannot be chosen to collide).
fn seed(worker: usize) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((worker, Ipv4Addr::LOCALHOST))
}
