//! torii-gateway: runs the data plane on the configured interfaces until SIGINT/SIGTERM.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use torii_gateway::config::{Config, Driver};
use torii_gateway::counters::Counters;
use torii_gateway::host::Host;
use torii_gateway::io::af_packet::{AfPacketSocket, RingConfig};
use torii_gateway::io::af_packet_io::AfPacketIo;
use torii_gateway::io::fanout;
use torii_gateway::pipeline::{Shared, WorkerState};
use torii_gateway::table::shm::StateRegion;
use torii_gateway::table::Table;
use torii_gateway::wire::MacAddr;
use torii_gateway::worker::{TableHandle, TableWatcher, Worker};

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
    match config.driver {
        Driver::AfPacket => run_af_packet(&config),
    }
}

fn run_af_packet(config: &Config) -> Result<()> {
    let workers = config.workers;
    let program = fanout::steering_program(&config.snat.addresses, config.snat.port_min, config.snat.port_max);
    // Fanout group ids are per network namespace; derive ours from the pid so two gateways
    // in one namespace do not join each other's groups.
    let group_base = (std::process::id() as u16).wrapping_mul(64);
    let mut sockets: Vec<Vec<AfPacketSocket>> = Vec::with_capacity(workers);
    for w in 0..workers {
        let mut per_iface = Vec::with_capacity(config.interfaces.len());
        for (i, iface) in config.interfaces.iter().enumerate() {
            let s = AfPacketSocket::open(&iface.name, &RingConfig::default())
                .with_context(|| format!("worker {w}: opening AF_PACKET socket on {}", iface.name))?;
            if workers > 1 {
                s.join_fanout(group_base.wrapping_add(i as u16), &program)
                    .with_context(|| format!("worker {w}: joining fanout group on {}", iface.name))?;
            }
            per_iface.push(s);
        }
        sockets.push(per_iface);
    }
    let macs: Vec<MacAddr> = sockets[0].iter().map(|s| MacAddr(s.mac_addr())).collect();
    for (iface, mac) in config.interfaces.iter().zip(&macs) {
        let addrs: Vec<String> = iface.addresses.iter().map(|c| format!("{}/{}", c.addr, c.prefix_len)).collect();
        tracing::info!(interface = %iface.name, %mac, addresses = ?addrs, "interface");
    }
    let host = Arc::new(Host::new(config, &macs));
    let shared = Shared::new(4096, config.conntrack.capacity * workers);
    for n in &config.neighbours {
        shared.neighbours.learn(n.address, MacAddr(n.mac), u64::MAX);
    }
    let region = Arc::new(
        StateRegion::open(&config.shm_dir)
            .with_context(|| format!("opening the shared state region in {}", config.shm_dir.display()))?,
    );
    let pid = std::process::id();
    region.register_gateway(pid, workers);
    let tables = Arc::new(TableHandle::new(Table::empty()));
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handlers")?;
    }
    let watcher = Arc::new(TableWatcher {
        dir: config.shm_dir.clone(),
        region: Arc::clone(&region),
        handle: Arc::clone(&tables),
        rejected: AtomicU64::new(0),
    });
    // Adopt what is already published before the workers start.
    watcher.poll(&mut 0);
    let epoch = Instant::now();
    tracing::info!(
        driver = "af_packet",
        workers,
        snat = ?config.snat.addresses,
        shm_dir = %config.shm_dir.display(),
        "torii-gateway running: driver=af_packet"
    );

    let exports: Vec<Arc<Mutex<Counters>>> = (0..workers).map(|_| Arc::default()).collect();
    let mut threads = Vec::new();
    for (w, socks) in sockets.into_iter().enumerate() {
        let state = WorkerState::new(w, workers, Arc::clone(&host), &shared, config.conntrack.capacity, seed(w));
        let worker = Worker {
            state,
            tables: Arc::clone(&tables),
            region: Arc::clone(&region),
            stop: Arc::clone(&stop),
            export: Arc::clone(&exports[w]),
            epoch,
        };
        let t = std::thread::Builder::new()
            .name(format!("torii-worker-{w}"))
            .spawn(move || {
                let mut io = AfPacketIo::new(socks);
                worker.run(&mut io)
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
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        ticks += 1;
        if ticks % 100 == 0 {
            let total = totals(&exports);
            if total != last {
                tracing::info!("counters: {total}");
                last = total;
            }
        }
    }
    tracing::info!("stopping");
    let mut total = Counters::default();
    for (w, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(c) => {
                tracing::info!(worker = w, "final counters: {c}");
                total.add(&c);
            }
            Err(_) => bail!("worker {w} panicked"),
        }
    }
    let _ = watcher_thread.join();
    region.unregister_gateway(pid);
    tracing::info!("final counters (all workers): {total}");
    Ok(())
}

fn totals(exports: &[Arc<Mutex<Counters>>]) -> Counters {
    let mut total = Counters::default();
    for e in exports {
        if let Ok(c) = e.lock() {
            total.add(&c);
        }
    }
    total
}

/// A per-worker random seed for the conntrack hash (so flow keys cannot be chosen to collide).
fn seed(worker: usize) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((worker, Ipv4Addr::LOCALHOST))
}
