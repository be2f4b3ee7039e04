//! The DPDK driver: [`DpdkDriver::start`] brings up EAL and one ethdev port per configured
//! interface (`interfaces[].device`: a PCI NIC or a virtual device), and hands each
//! worker a [`WorkerSeed`] — its own RX and TX queue on every port and its own mempool —
//! which the worker thread turns into a [`DpdkIo`] (the [`PacketIo`] the poll loop runs).
//!
//! Decisions, and why:
//!
//! - **Queues and workers.** Worker `w` polls RX queue `w` and transmits on TX queue `w`
//!   of every port. More than one worker needs every port to spread flows by RSS over
//!   as many queues, with a redirection table (RETA) and Toeplitz key we can set. Ports
//!   without that — `net_af_packet` (whose DPDK 22.11 driver always uses
//!   `PACKET_FANOUT_ROLLOVER`, which moves flows between queues under load), virtio-user
//!   against a vhost-user switch without RSS, single-queue NICs — get one queue, and the
//!   gateway runs **one worker** ([`DpdkDriver::workers`]); the startup log says so. (A
//!   software redirect of frames to their owning worker would lift that; not done yet.)
//! - **SNAT ports under RSS** ([`ThashSteering`]): a reply (endpoint → SNAT address:port)
//!   is delivered to RX queue `reta[toeplitz(key, tuple) % reta.len()]`. One
//!   `rte_thash` picker, shared by the workers, reshapes the key so that the SNAT port's
//!   low bits select the RETA entry; the same key and a RETA spreading the workers
//!   round-robin are pushed to every port, and each worker allocates with
//!   [`SnatPorts::steered`](crate::snat::SnatPorts::steered). With one worker every port
//!   is its own ([`SnatPorts::new`](crate::snat::SnatPorts::new)).
//! - **Checksums.** The pipeline keeps IPv4 and TCP/UDP checksums right in software
//!   (incremental updates, RFC 1624) — the default. With `dpdk.tx_checksum_offload` and
//!   a port that offers it, frames leave with the IPv4 header checksum zeroed and the L4
//!   field holding the pseudo-header sum, and the device completes them. On receive, a
//!   device reporting "checksum not computed, data valid" (virtio's partial checksums)
//!   marks the frame `l4_csum_partial`, as AF_PACKET's `TP_STATUS_CSUMNOTREADY` does.
//! - **Copies.** Received frames are handed to the worker from the mbuf (the worker
//!   copies them into its own buffer, as with AF_PACKET); transmitted frames are copied
//!   into fresh mbufs and sent in bursts per port at [`PacketIo::flush`]. Zero-copy
//!   (processing in the mbuf, transmitting it) comes later.
//! - **Idle workers.** DPDK polls; a worker that found nothing for a few thousand polls
//!   sleeps `dpdk.idle_sleep_us` between polls (default 200 µs) so idle gateways and CI
//!   machines with two cores are not starved. `idle_sleep_us = 0` busy-polls.
//! - **CPUs and lcores.** EAL's main lcore is `dpdk.cpus[0]` (or the first CPU the process
//!   may use); EAL pins the thread calling `rte_eal_init` there, so the main thread's
//!   affinity is restored afterwards. Each worker pins itself to `cpus[w % cpus.len()]`,
//!   then registers with EAL (`rte_thread_register`: an lcore id, hence a mempool cache).
//! - **Memory.** With enough free hugepages (`/proc/meminfo`), `--in-memory
//!   --single-file-segments` (no files left behind; virtio-user can share the memory);
//!   otherwise `--no-huge -m 256 --no-shconf`. Each worker has its own mempool, sized for
//!   its RX and TX descriptors on every port plus bursts and the cache.
//! - **Shutdown.** The workers drop their queue handles when they exit; then
//!   [`DpdkDriver::shutdown`] logs each port's counters and stops the ports.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
use torii_dpdk::mempool::DEFAULT_DATA_ROOM;
use torii_dpdk::thash::spread_reta;
use torii_dpdk::{
    Eal, Mbuf, Mempool, Port, PortConfig, ReplyPortPicker, RssHf, RxCksum, RxOffloads, RxQueue, ThreadRegistration,
    TxL3, TxL4, TxOffloads, TxQueue,
};

use crate::config::{Config, DpdkDevice};
use crate::snat::ReplySteering;
use crate::wire::{checksum, MacAddr};
use crate::worker::{PacketIo, RxInfo, BURST};

/// What went wrong starting or running the DPDK driver.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// A DPDK call failed; `context` says what torii was doing, the source what DPDK said
    /// (print the chain: `{:#}` with anyhow).
    #[error("{context}")]
    Dpdk {
        /// What torii was doing, e.g. `interfaces[0] (net_af_packet0): configuring 1 queue`.
        context: String,
        /// DPDK's error.
        #[source]
        source: torii_dpdk::Error,
    },
    /// The configuration cannot be served by DPDK (e.g. an interface without a device).
    #[error("{0}")]
    Config(String),
    /// Pinning a worker thread to its CPU failed.
    #[error("worker {worker}: pinning to CPU {cpu}: {source} (is the CPU online and allowed? see dpdk.cpus)")]
    Affinity {
        /// The worker.
        worker: usize,
        /// The CPU.
        cpu: usize,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}

fn dpdk(context: impl Into<String>) -> impl FnOnce(torii_dpdk::Error) -> DpdkError {
    let context = context.into();
    move |source| DpdkError::Dpdk { context, source }
}

/// RSS hash types torii asks for: TCP and UDP over addresses and ports (what the SNAT
/// port steering relies on), other IPv4 over addresses.
const RSS_HF: RssHf = RssHf(RssHf::NONFRAG_IPV4_TCP.0 | RssHf::NONFRAG_IPV4_UDP.0 | RssHf::IPV4.0);
/// The thash context's name (one per process).
const THASH_NAME: &str = "torii_snat";
/// Mempool per-lcore cache size.
const POOL_CACHE: u32 = 256;
/// Free hugepage memory below which EAL runs without hugepages: EAL's own needs plus
/// this much per worker (its mempool is about 20 MiB).
const HUGEPAGE_BASE_BYTES: u64 = 64 << 20;
/// See [`HUGEPAGE_BASE_BYTES`].
const HUGEPAGE_PER_WORKER_BYTES: u64 = 32 << 20;
/// Transmit attempts per flush before leftovers are dropped.
const TX_RETRIES: usize = 4;

/// How EAL gets its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Hugepages (`--in-memory --single-file-segments`).
    Hugepages,
    /// No hugepages (`--no-huge -m 256 --no-shconf`): IOVA as VA, fine for virtual
    /// devices, not for NICs that DMA.
    NoHuge,
    /// Chosen by `dpdk.eal_args`.
    FromEalArgs,
}

/// Free hugepage memory in bytes, from `/proc/meminfo` (`HugePages_Free` × `Hugepagesize`).
pub fn free_hugepage_bytes(meminfo: &str) -> u64 {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    field("HugePages_Free").unwrap_or(0) * field("Hugepagesize").unwrap_or(0) * 1024
}

/// Whether `args` holds one of the long options `long` (`--x` or `--x=v`) or short
/// options `short` (`-x` or `-xv`).
fn has_option(args: &[String], long: &[&str], short: &[char]) -> bool {
    args.iter().any(|a| {
        long.iter().any(|l| a == l || a.strip_prefix(l).is_some_and(|r| r.starts_with('=')))
            || (!a.starts_with("--") && short.iter().any(|c| a.strip_prefix('-').is_some_and(|r| r.starts_with(*c))))
    })
}

/// EAL's command line for `config`: torii's defaults (skipping those `dpdk.eal_args`
/// overrides), the devices, then `dpdk.eal_args`. `hugepage_bytes` is the free hugepage
/// memory, `main_cpu` EAL's main lcore. Returns the arguments and the memory mode.
pub fn eal_args(config: &Config, pid: u32, hugepage_bytes: u64, main_cpu: usize) -> (Vec<String>, Memory) {
    let user = &config.dpdk.eal_args;
    let mut args: Vec<String> = Vec::new();
    if !has_option(user, &["--file-prefix"], &[]) {
        args.extend(["--file-prefix".into(), format!("torii-{pid}")]);
    }
    let memory = if has_option(user, &["--no-huge", "--in-memory", "--socket-mem", "--legacy-mem"], &['m']) {
        Memory::FromEalArgs
    } else if hugepage_bytes >= HUGEPAGE_BASE_BYTES + HUGEPAGE_PER_WORKER_BYTES * config.workers as u64 {
        args.extend(["--in-memory".into(), "--single-file-segments".into()]);
        Memory::Hugepages
    } else {
        args.extend(["--no-huge", "-m", "256", "--no-shconf"].map(String::from));
        Memory::NoHuge
    };
    if !has_option(user, &["--lcores", "--main-lcore"], &['l', 'c']) {
        args.extend(["-l".into(), main_cpu.to_string()]);
    }
    if !has_option(user, &["--telemetry", "--no-telemetry"], &[]) {
        args.push("--no-telemetry".into());
    }
    if !has_option(user, &["--log-level"], &[]) {
        args.push("--log-level=*:notice".into());
    }
    let devices: Vec<&DpdkDevice> = config.ports.iter().filter_map(|p| p.device.as_ref()).collect();
    if !devices.iter().any(|d| matches!(d, DpdkDevice::Pci(_)))
        && !has_option(user, &["--no-pci", "--allow", "--block"], &['a', 'b'])
    {
        args.push("--no-pci".into());
    }
    for d in devices {
        args.extend(d.eal_args());
    }
    args.extend(user.iter().cloned());
    (args, memory)
}

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => vec![0],
    }
}

/// Pins the calling thread to `cpus`.
fn pin(cpus: &[usize]) -> std::io::Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

/// Which TX checksum offloads a port has enabled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxCsum {
    /// IPv4 header checksum.
    pub ipv4: bool,
    /// TCP checksum.
    pub tcp: bool,
    /// UDP checksum.
    pub udp: bool,
}

impl TxCsum {
    fn any(self) -> bool {
        self.ipv4 || self.tcp || self.udp
    }

    fn from_offloads(o: TxOffloads) -> Self {
        Self {
            ipv4: o.contains(TxOffloads::IPV4_CKSUM),
            tcp: o.contains(TxOffloads::TCP_CKSUM),
            udp: o.contains(TxOffloads::UDP_CKSUM),
        }
    }
}

/// SNAT port steering by the ports' RSS: worker `w` receives RX queue `w`.
#[derive(Debug)]
pub struct ThashSteering {
    picker: ReplyPortPicker,
}

impl ThashSteering {
    /// The picker (its key and RETA are what the ports use).
    pub fn picker(&self) -> &ReplyPortPicker {
        &self.picker
    }
}

impl ReplySteering for ThashSteering {
    fn pick(
        &self,
        endpoint: SocketAddrV4,
        snat_addr: Ipv4Addr,
        worker: usize,
        start: u16,
        usable: &mut dyn FnMut(u16) -> bool,
    ) -> Option<u16> {
        self.picker.pick(endpoint, snat_addr, u16::try_from(worker).ok()?, start, usable)
    }
}

/// The running DPDK driver: EAL and the ports, on the control thread.
pub struct DpdkDriver {
    /// The ports, indexed like [`Config::ports`]. Dropped before `eal`.
    ports: Vec<Port>,
    seeds: Vec<Option<WorkerSeed>>,
    macs: Vec<MacAddr>,
    workers: usize,
    steering: Option<Arc<ThashSteering>>,
    summary: String,
    eal: Eal,
}

impl std::fmt::Debug for DpdkDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkDriver").field("ports", &self.ports).field("workers", &self.workers).finish()
    }
}

impl DpdkDriver {
    /// Initialises EAL (once per process) and every interface's device: configured,
    /// queues set up, started, RSS key and RETA pushed when several workers share it.
    ///
    /// # Errors
    /// [`DpdkError`] naming the interface, device and step that failed.
    pub fn start(config: &Config) -> Result<Self, DpdkError> {
        let allowed = allowed_cpus();
        let cpus = if config.dpdk.cpus.is_empty() { allowed.clone() } else { config.dpdk.cpus.clone() };
        let main_cpu = cpus.first().copied().unwrap_or(0);
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let (args, memory) = eal_args(config, std::process::id(), free_hugepage_bytes(&meminfo), main_cpu);
        for (i, iface) in config.interfaces.iter().enumerate() {
            if iface.device.is_none() {
                return Err(DpdkError::Config(format!("ports[{i}] ({}) has no device", iface.label())));
            }
        }
        tracing::info!(eal_args = %args.join(" "), ?memory, "initialising DPDK {}", Eal::version());
        let eal = Eal::builder().args(args.iter().cloned()).init().map_err(dpdk("rte_eal_init"))?;
        // EAL pinned this thread to the main lcore; the threads the control side spawns
        // later (the table watcher) need not share it.
        if let Err(e) = pin(&allowed) {
            tracing::warn!("restoring the main thread's CPU affinity: {e}");
        }
        // With --in-memory / --no-shconf and no telemetry, EAL leaves its runtime
        // directory empty and never uses it again: remove it (a directory EAL does use,
        // holding its shared config or sockets, is not empty and stays).
        let _ = std::fs::remove_dir(eal.runtime_dir());

        let mut ports = Vec::with_capacity(config.ports.len());
        for p in &config.ports {
            let dev = p.device.as_ref().map(DpdkDevice::port_name).unwrap_or_default();
            let port = Port::by_name(&eal, dev).map_err(dpdk(format!("port {}: device {dev}", p.name)))?;
            ports.push(port);
        }

        // One queue per worker on every port, if every port can spread flows over them.
        let mut workers = config.workers;
        let mut single_reason = None;
        if workers > 1 {
            for (i, p) in ports.iter().enumerate() {
                if let Some(why) = rss_unusable(p, workers) {
                    single_reason = Some(format!("ports[{i}] ({}, pmd {}): {why}", p.name(), p.info().driver_name));
                    break;
                }
            }
            let sizes: Vec<(u16, u8)> = ports.iter().map(|p| (p.info().reta_size, p.info().hash_key_size)).collect();
            if single_reason.is_none() && sizes.windows(2).any(|w| w[0] != w[1]) {
                single_reason = Some(format!("the ports' RETA and key sizes differ ({sizes:?})"));
            }
            if let Some(why) = &single_reason {
                tracing::warn!(
                    requested = workers,
                    "running 1 worker with one queue per port: {why} (a software redirect to the owning worker \
                     would lift this; not implemented)"
                );
                workers = 1;
            }
        }
        let rss = workers > 1;
        let queues = workers as u16;

        let mut pools = Vec::with_capacity(workers);
        for w in 0..workers {
            let (rx, tx) = (u32::from(config.dpdk.rx_descriptors), u32::from(config.dpdk.tx_descriptors));
            let need = ports.len() as u32 * (rx + tx + 2 * BURST as u32) + 2 * POOL_CACHE;
            let n = (need + 1).next_power_of_two() - 1;
            let pool = Mempool::new(&eal, &format!("torii_w{w}"), n, POOL_CACHE, DEFAULT_DATA_ROOM, None)
                .map_err(dpdk(format!("worker {w}: mempool of {n} mbufs")))?;
            pools.push(pool);
        }

        let mut tx_csum = Vec::with_capacity(ports.len());
        for (i, port) in ports.iter_mut().enumerate() {
            let ctx = format!("ports[{i}] ({}, pmd {})", port.name(), port.info().driver_name);
            let wanted_tx = if config.dpdk.tx_checksum_offload {
                TxOffloads::IPV4_CKSUM | TxOffloads::TCP_CKSUM | TxOffloads::UDP_CKSUM
            } else {
                TxOffloads::empty()
            };
            let conf = PortConfig {
                rss_hf: if rss { RSS_HF } else { RssHf::empty() },
                rx_offloads: RxOffloads::CHECKSUM,
                tx_offloads: wanted_tx,
                ..PortConfig::default()
            };
            let applied =
                port.configure(queues, queues, &conf).map_err(dpdk(format!("{ctx}: configuring {queues} queue(s)")))?;
            let info = port.info().clone();
            let clamp = |want: u16, max: u16| if max == 0 { want } else { want.min(max) };
            let (rxd, txd) = (
                clamp(config.dpdk.rx_descriptors, info.rx_desc_max),
                clamp(config.dpdk.tx_descriptors, info.tx_desc_max),
            );
            for q in 0..queues {
                port.setup_rx_queue(q, rxd, &pools[usize::from(q)])
                    .map_err(dpdk(format!("{ctx}: RX queue {q} ({rxd} descriptors)")))?;
                port.setup_tx_queue(q, txd).map_err(dpdk(format!("{ctx}: TX queue {q} ({txd} descriptors)")))?;
            }
            port.start().map_err(dpdk(format!("{ctx}: starting")))?;
            let csum = TxCsum::from_offloads(applied.tx_offloads);
            if config.dpdk.tx_checksum_offload && !csum.any() {
                tracing::info!("{ctx}: no TX checksum offload offered; checksums stay in software");
            }
            tx_csum.push(csum);
            let link = port.link().map_err(dpdk(format!("{ctx}: link")))?;
            tracing::info!(
                interface = %config.ports[i].name,
                device = %port.name(),
                pmd = %info.driver_name,
                queues,
                rx_descriptors = rxd,
                tx_descriptors = txd,
                rss = ?applied.rss_hf,
                rx_offloads = ?applied.rx_offloads,
                tx_offloads = ?applied.tx_offloads,
                link_up = link.up,
                speed_mbps = link.speed_mbps,
                "DPDK port started"
            );
        }

        let steering = if rss { Some(Arc::new(push_steering(&eal, &mut ports, config, workers)?)) } else { None };

        let mut macs = Vec::with_capacity(ports.len());
        for (i, p) in ports.iter().enumerate() {
            macs.push(MacAddr(p.mac_addr().map_err(dpdk(format!("ports[{i}] ({}): MAC address", p.name())))?));
        }

        let mut seeds = Vec::with_capacity(workers);
        for (w, pool) in pools.into_iter().enumerate() {
            let q = w as u16;
            let mut rx = Vec::with_capacity(ports.len());
            let mut tx = Vec::with_capacity(ports.len());
            for (i, p) in ports.iter().enumerate() {
                rx.push(p.rx_queue(q).map_err(dpdk(format!("ports[{i}] ({}): RX queue {q}", p.name())))?);
                tx.push(p.tx_queue(q).map_err(dpdk(format!("ports[{i}] ({}): TX queue {q}", p.name())))?);
            }
            seeds.push(Some(WorkerSeed {
                worker: w,
                eal: eal.clone(),
                rx,
                tx,
                pool,
                cpu: (!cpus.is_empty()).then(|| cpus[w % cpus.len()]),
                tx_csum: tx_csum.clone(),
                idle_sleep: Duration::from_micros(u64::from(config.dpdk.idle_sleep_us)),
            }));
        }
        let pmds: Vec<&str> = ports.iter().map(|p| p.info().driver_name.as_str()).collect();
        let summary = format!(
            "{} port(s) [{}], {} queue(s) each, {} worker(s){}, {}",
            ports.len(),
            pmds.join(", "),
            queues,
            workers,
            if rss { ", SNAT ports steered by RSS (rte_thash)" } else { "" },
            match memory {
                Memory::Hugepages => "hugepages",
                Memory::NoHuge => "no hugepages (--no-huge)",
                Memory::FromEalArgs => "memory from dpdk.eal_args",
            }
        );
        Ok(Self { ports, seeds, macs, workers, steering, summary, eal })
    }

    /// Workers the driver runs (one per queue): `config.workers`, or 1 when a port cannot
    /// spread flows over several queues.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The ports' MAC addresses, indexed like [`Config::ports`].
    pub fn macs(&self) -> &[MacAddr] {
        &self.macs
    }

    /// The SNAT port steering the workers must use (several workers), or `None` (one
    /// worker: every port is its own).
    pub fn steering(&self) -> Option<Arc<dyn ReplySteering>> {
        self.steering.as_ref().map(|s| Arc::clone(s) as Arc<dyn ReplySteering>)
    }

    /// One line saying what runs: ports, drivers, queues, workers, memory.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// The EAL handle.
    pub fn eal(&self) -> &Eal {
        &self.eal
    }

    /// Worker `w`'s queues and pool, once.
    pub fn take_seed(&mut self, w: usize) -> Option<WorkerSeed> {
        self.seeds.get_mut(w)?.take()
    }

    /// Logs every port's counters and stops the ports. Call after the workers (and so
    /// their queue handles) are gone.
    pub fn shutdown(mut self) {
        self.seeds.clear();
        for p in &mut self.ports {
            match p.stats() {
                Ok(s) => tracing::info!(
                    device = %p.name(),
                    rx_packets = s.ipackets,
                    tx_packets = s.opackets,
                    rx_missed = s.imissed,
                    rx_errors = s.ierrors,
                    tx_errors = s.oerrors,
                    rx_nombuf = s.rx_nombuf,
                    "DPDK port counters"
                ),
                Err(e) => tracing::warn!(device = %p.name(), "port counters: {e}"),
            }
            if let Err(e) = p.stop() {
                tracing::warn!(device = %p.name(), "stopping: {e}");
            }
        }
    }
}

/// Why `port` cannot spread flows over `workers` queues with a RETA and key we set, if so.
fn rss_unusable(port: &Port, workers: usize) -> Option<String> {
    let info = port.info();
    if info.driver_name == "net_af_packet" {
        return Some(
            "DPDK 22.11's net_af_packet always uses PACKET_FANOUT_ROLLOVER, which moves flows between queues".into(),
        );
    }
    if usize::from(info.max_rx_queues) < workers || usize::from(info.max_tx_queues) < workers {
        return Some(format!("{} RX / {} TX queues at most, {workers} needed", info.max_rx_queues, info.max_tx_queues));
    }
    if !info.reta_size.is_power_of_two() || info.reta_size < 4 {
        return Some(format!("no settable RSS redirection table (RETA size {})", info.reta_size));
    }
    if usize::from(info.reta_size) < workers {
        return Some(format!("RETA of {} entries for {workers} workers", info.reta_size));
    }
    let need = RssHf::NONFRAG_IPV4_TCP | RssHf::NONFRAG_IPV4_UDP;
    if !info.flow_type_rss_offloads.contains(need) {
        return Some(format!("no RSS over IPv4 TCP/UDP ports ({:?})", info.flow_type_rss_offloads));
    }
    None
}

/// Builds the shared SNAT port picker from the first port's key and a RETA spreading
/// `workers` queues, and pushes its key and RETA to every port.
fn push_steering(eal: &Eal, ports: &mut [Port], config: &Config, workers: usize) -> Result<ThashSteering, DpdkError> {
    let first = &ports[0];
    let key = first.rss_hash_conf_get().map_err(dpdk(format!("{}: reading the RSS key", first.name())))?.key;
    let reta = spread_reta(usize::from(first.info().reta_size), workers as u16);
    let picker = ReplyPortPicker::new(eal, THASH_NAME, &key, reta, config.snat.port_min..=config.snat.port_max)
        .map_err(dpdk("building the SNAT port picker (rte_thash)"))?;
    for p in ports.iter_mut() {
        let name = p.name().to_owned();
        let hf = p
            .rss_hash_update(RSS_HF, Some(picker.key()))
            .map_err(dpdk(format!("{name}: setting the RSS key of the SNAT port picker")))?;
        p.rss_reta_update(picker.reta()).map_err(dpdk(format!("{name}: setting the RSS redirection table")))?;
        let back = p.rss_hash_conf_get().map_err(dpdk(format!("{name}: reading the RSS key back")))?;
        if back.key != picker.key() {
            return Err(DpdkError::Config(format!(
                "{name}: the port did not keep the RSS key torii set, so replies would reach the wrong worker"
            )));
        }
        tracing::info!(device = %name, rss = ?hf, reta_size = picker.reta().len(), workers, "RSS key and RETA set for SNAT steering");
    }
    Ok(ThashSteering { picker })
}

/// One worker's share of the driver, moved into its thread: a queue pair on every port
/// and its mempool. [`WorkerSeed::into_io`] (on the worker thread) makes the [`DpdkIo`].
pub struct WorkerSeed {
    worker: usize,
    eal: Eal,
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    pool: Mempool,
    cpu: Option<usize>,
    tx_csum: Vec<TxCsum>,
    idle_sleep: Duration,
}

impl std::fmt::Debug for WorkerSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerSeed").field("worker", &self.worker).field("cpu", &self.cpu).finish()
    }
}

impl WorkerSeed {
    /// On the worker's own thread: pins it to its CPU, registers it with EAL (an lcore id
    /// for the mempool cache) and returns its [`PacketIo`].
    ///
    /// # Errors
    /// Pinning or registering failed.
    pub fn into_io(self) -> Result<DpdkIo, DpdkError> {
        let w = self.worker;
        if let Some(cpu) = self.cpu {
            pin(&[cpu]).map_err(|source| DpdkError::Affinity { worker: w, cpu, source })?;
        }
        let registration = self
            .eal
            .register_thread()
            .map_err(dpdk(format!("worker {w}: registering with EAL (rte_thread_register)")))?;
        tracing::debug!(worker = w, cpu = ?self.cpu, lcore = ?Eal::lcore_id(), "DPDK worker registered");
        let ports = self.rx.len();
        Ok(DpdkIo {
            rx: self.rx,
            tx: self.tx,
            rx_batch: Vec::with_capacity(BURST),
            tx_batches: (0..ports).map(|_| Vec::with_capacity(BURST)).collect(),
            tx_csum: self.tx_csum,
            idle_sleep: self.idle_sleep,
            stats: IoStats::default(),
            worker: w,
            pool: self.pool,
            _registration: registration,
        })
    }
}

/// Counters of what the driver itself dropped (the caller counts refused `tx`s).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoStats {
    /// Frames queued by `tx` that the device did not take after a few bursts (4).
    pub tx_dropped: u64,
    /// `tx` calls refused because the mempool was empty.
    pub alloc_failed: u64,
    /// Received frames in chained mbufs (larger than a buffer), dropped.
    pub rx_chained: u64,
}

/// A worker's [`PacketIo`] over DPDK: its RX and TX queue on every port.
pub struct DpdkIo {
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    rx_batch: Vec<Mbuf>,
    tx_batches: Vec<Vec<Mbuf>>,
    tx_csum: Vec<TxCsum>,
    idle_sleep: Duration,
    stats: IoStats,
    worker: usize,
    pool: Mempool,
    /// Dropped last: the thread keeps its lcore id while it frees mbufs.
    _registration: ThreadRegistration,
}

impl std::fmt::Debug for DpdkIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkIo").field("worker", &self.worker).field("stats", &self.stats).finish()
    }
}

impl DpdkIo {
    /// What the driver dropped so far.
    pub fn stats(&self) -> IoStats {
        self.stats
    }

    /// Offers `iface`'s batch to its TX queue up to `tries` times; with `drop_rest`,
    /// frees (and counts) what the device still did not take.
    fn push(&mut self, iface: usize, tries: usize, drop_rest: bool) {
        let (Some(q), Some(batch)) = (self.tx.get_mut(iface), self.tx_batches.get_mut(iface)) else { return };
        for _ in 0..tries {
            if batch.is_empty() {
                return;
            }
            q.tx_burst(batch);
        }
        if drop_rest && !batch.is_empty() {
            self.stats.tx_dropped += batch.len() as u64;
            batch.clear();
        }
    }
}

impl Drop for DpdkIo {
    fn drop(&mut self) {
        for i in 0..self.tx_batches.len() {
            self.push(i, TX_RETRIES, true);
        }
        if self.stats != IoStats::default() {
            tracing::info!(worker = self.worker, stats = ?self.stats, "DPDK driver drops");
        }
    }
}

impl PacketIo for DpdkIo {
    fn interfaces(&self) -> usize {
        self.rx.len()
    }

    #[inline]
    fn rx(&mut self, iface: usize, max: usize, f: &mut dyn FnMut(&[u8], RxInfo)) -> usize {
        let Some(q) = self.rx.get_mut(iface) else { return 0 };
        let n = q.rx_burst(&mut self.rx_batch, max);
        for m in self.rx_batch.drain(..) {
            if m.segments() != 1 {
                self.stats.rx_chained += 1;
                continue;
            }
            let stripped_tag = m.rx_vlan_stripped().map(|tci| (0x8100, tci));
            f(m.data(), RxInfo { l4_csum_partial: m.rx_l4_cksum() == RxCksum::None, stripped_tag });
        }
        n
    }

    #[inline]
    fn tx(&mut self, iface: usize, frame: &[u8]) -> bool {
        let Some(batch) = self.tx_batches.get(iface) else { return false };
        if batch.len() >= BURST {
            self.push(iface, 1, false);
            if self.tx_batches[iface].len() >= BURST {
                return false;
            }
        }
        let Some(mut m) = self.pool.alloc() else {
            self.stats.alloc_failed += 1;
            return false;
        };
        if !m.extend_from_slice(frame) {
            return false;
        }
        let csum = self.tx_csum[iface];
        if csum.any() {
            request_tx_checksums(&mut m, csum);
        }
        self.tx_batches[iface].push(m);
        true
    }

    #[inline]
    fn flush(&mut self) {
        for i in 0..self.tx_batches.len() {
            self.push(i, TX_RETRIES, true);
        }
    }

    fn wait(&mut self, timeout: Duration) {
        if !self.idle_sleep.is_zero() {
            std::thread::sleep(timeout.min(self.idle_sleep));
        }
    }
}

/// Hands the checksums of an IPv4 TCP/UDP frame (untagged or with one 802.1Q tag, not a
/// fragment) to the device, as DPDK requires: IPv4 header checksum field zero, L4 checksum field the
/// pseudo-header sum (not complemented). Other frames, and UDP without a checksum, keep
/// the checksums the pipeline computed.
fn request_tx_checksums(m: &mut Mbuf, csum: TxCsum) {
    let d = m.data_mut();
    // The link-layer header: Ethernet, and the tag of a VLAN interface (`l2_len` tells the
    // device where IPv4 starts).
    let eth = if d.get(12..14) == Some(&[0x81, 0x00]) { 18 } else { 14 };
    if d.len() < eth + 20 || d[eth - 2..eth] != [0x08, 0x00] || d[eth] >> 4 != 4 {
        return;
    }
    let ihl = usize::from(d[eth] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([d[eth + 2], d[eth + 3]]));
    let fragment = u16::from_be_bytes([d[eth + 6], d[eth + 7]]) & 0x3fff != 0;
    if ihl < 20 || total < ihl || eth + total > d.len() || fragment {
        return;
    }
    let protocol = d[eth + 9];
    let src = Ipv4Addr::new(d[eth + 12], d[eth + 13], d[eth + 14], d[eth + 15]);
    let dst = Ipv4Addr::new(d[eth + 16], d[eth + 17], d[eth + 18], d[eth + 19]);
    let l4 = eth + ihl;
    let l4_len = total - ihl;
    let field = match protocol {
        6 if csum.tcp && l4_len >= 20 => Some((l4 + 16, TxL4::Tcp)),
        17 if csum.udp && l4_len >= 8 && d[l4 + 6..l4 + 8] != [0, 0] => Some((l4 + 6, TxL4::Udp)),
        _ => None,
    };
    if let Some((at, _)) = field {
        let pseudo = checksum::fold(checksum::pseudo_header_v4(src, dst, protocol, l4_len as u16));
        d[at..at + 2].copy_from_slice(&pseudo.to_be_bytes());
    }
    if csum.ipv4 {
        d[eth + 10..eth + 12].copy_from_slice(&[0, 0]);
    }
    let l4_kind = field.map_or(TxL4::None, |(_, k)| k);
    if l4_kind != TxL4::None || csum.ipv4 {
        m.request_tx_cksum(TxL3::Ipv4 { header_cksum: csum.ipv4 }, l4_kind, eth as u8, ihl as u16);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(driver_lines: &str) -> Config {
        let text = crate::config::EMBEDDED_DEFAULT.replace("eal_args = []", driver_lines);
        Config::from_toml(&text).expect("config")
    }

    #[test]
    fn eal_args_defaults() {
        let c = config("eal_args = []");
        let (args, memory) = eal_args(&c, 42, 1 << 30, 1);
        assert_eq!(memory, Memory::Hugepages);
        assert_eq!(
            args.join(" "),
            "--file-prefix torii-42 --in-memory --single-file-segments -l 1 --no-telemetry --log-level=*:notice \
             --no-pci --vdev net_af_packet0,iface=tg-front --vdev net_af_packet1,iface=tg-back"
        );
        let (args, memory) = eal_args(&c, 42, 64 << 20, 0);
        assert_eq!(memory, Memory::NoHuge, "too few free hugepages");
        assert!(args.join(" ").contains("--no-huge -m 256 --no-shconf -l 0"), "{args:?}");
    }

    #[test]
    fn eal_args_from_the_config_replace_torii_defaults() {
        let c = config(
            "eal_args = [\"--no-huge\", \"-m\", \"512\", \"--lcores=0@1\", \"--file-prefix=x\", \"--log-level=8\", \"-a\", \"0000:01:00.0\"]",
        );
        let (args, memory) = eal_args(&c, 42, 1 << 30, 1);
        assert_eq!(memory, Memory::FromEalArgs);
        assert_eq!(
            args.join(" "),
            "--no-telemetry --vdev net_af_packet0,iface=tg-front --vdev net_af_packet1,iface=tg-back \
             --no-huge -m 512 --lcores=0@1 --file-prefix=x --log-level=8 -a 0000:01:00.0"
        );
        let c = config("eal_args = [\"-m512\", \"-l0-1\"]");
        let (args, memory) = eal_args(&c, 42, 1 << 30, 1);
        assert_eq!(memory, Memory::FromEalArgs);
        assert!(!args.iter().any(|a| a == "-l"), "{args:?}");
    }

    /// The one test of this crate that initialises EAL (once per process): two `net_null`
    /// ports, two workers. RSS is usable there, so the driver runs two queues per port,
    /// pushes the SNAT picker's key and RETA to both ports, and every SNAT port a worker
    /// allocates steers the reply to that worker's queue; the workers' I/O sends and
    /// receives.
    #[test]
    fn two_workers_on_null_ports_steer_replies_by_rss() {
        let text = crate::config::EMBEDDED_DEFAULT
            .replace("eal_args = []", "eal_args = [\"--no-huge\", \"-m\", \"256\", \"--no-shconf\"]")
            .replace("cpus = []", "cpus = [0]")
            .replace("net_af_packet0,iface=tg-front", "net_null0")
            .replace("net_af_packet1,iface=tg-back", "net_null1");
        let config = Config::from_toml(&text).expect("config");
        let mut driver = DpdkDriver::start(&config).expect("DPDK on net_null ports");
        assert_eq!(driver.workers(), 2, "{}", driver.summary());
        assert!(driver.summary().contains("steered by RSS"), "{}", driver.summary());
        assert_eq!(driver.macs().len(), 2);
        let steering = driver.steering().expect("RSS steering with two workers");
        let picker = driver.steering.as_ref().expect("picker").picker();
        for p in &driver.ports {
            assert_eq!(p.rss_hash_conf_get().expect("key").key, picker.key(), "{} holds the picker's key", p.name());
            assert_eq!(p.rss_reta_query().expect("RETA"), picker.reta(), "{} holds the picker's RETA", p.name());
        }
        let snat = config.snat.addresses[0];
        for w in 0..2 {
            let mut ports =
                crate::snat::SnatPorts::steered(w, 1024, 65535, &config.snat.addresses, Arc::clone(&steering));
            let mut seen = std::collections::HashSet::new();
            for i in 0..300u16 {
                let endpoint = SocketAddrV4::new(Ipv4Addr::new(10, 70, 0, 11 + (i % 3) as u8), 8080 + i % 2);
                let p = ports.alloc_for(0, 6, endpoint.into()).expect("a SNAT port");
                assert!(seen.insert((endpoint, p)));
                let reply = torii_dpdk::Ipv4Tuple {
                    src_addr: *endpoint.ip(),
                    dst_addr: snat,
                    src_port: endpoint.port(),
                    dst_port: p,
                };
                assert_eq!(picker.queue_of(&reply), w as u16, "reply to SNAT port {p} from {endpoint}");
            }
        }
        // Worker 1's I/O, on its own thread: transmit a frame on each port, receive.
        let seed = driver.take_seed(1).expect("seed");
        assert!(driver.take_seed(1).is_none(), "a seed is handed out once");
        let frame = crate::frames::udp(
            crate::frames::L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) },
            (Ipv4Addr::new(10, 70, 0, 1), 2000),
            (Ipv4Addr::new(10, 70, 0, 11), 8080),
            b"torii",
            64,
        );
        let received = std::thread::spawn(move || {
            let mut io = seed.into_io().expect("worker I/O");
            assert_eq!(io.interfaces(), 2);
            for iface in 0..2 {
                assert!(io.tx(iface, &frame));
            }
            io.flush();
            // TX checksum offload requests: IPv4 checksum zeroed, L4 field the
            // pseudo-header sum, header lengths set.
            let (src, dst) = (Ipv4Addr::new(10, 70, 0, 1), Ipv4Addr::new(10, 70, 0, 11));
            let l2 = crate::frames::L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) };
            let syn = crate::frames::tcp(l2, (src, 2000), (dst, 8080), crate::wire::TcpFlags::SYN, 1, 0, b"", 64);
            let mut m = io.pool.alloc().expect("mbuf");
            assert!(m.extend_from_slice(&syn));
            let before = m.ol_flags();
            request_tx_checksums(&mut m, TxCsum { ipv4: true, tcp: true, udp: true });
            let pseudo = checksum::fold(checksum::pseudo_header_v4(src, dst, 6, 20));
            assert_eq!(&m.data()[24..26], &[0, 0]);
            assert_eq!(u16::from_be_bytes([m.data()[50], m.data()[51]]), pseudo);
            assert_eq!(m.tx_header_lens(), (14, 20));
            assert_ne!(m.ol_flags(), before);
            drop(m);
            // The same on a VLAN interface: the tag is part of the link-layer header.
            let mut m = io.pool.alloc().expect("mbuf");
            assert!(m.extend_from_slice(&crate::frames::tagged(&syn, 0x8100, 100)));
            request_tx_checksums(&mut m, TxCsum { ipv4: true, tcp: true, udp: true });
            assert_eq!(&m.data()[28..30], &[0, 0]);
            assert_eq!(u16::from_be_bytes([m.data()[54], m.data()[55]]), pseudo);
            assert_eq!(m.tx_header_lens(), (18, 20));
            drop(m);
            let mut n = 0;
            io.rx(0, BURST, &mut |f, _| n += usize::from(!f.is_empty()));
            assert_eq!(io.stats(), IoStats::default());
            n
        })
        .join()
        .expect("worker thread");
        assert!(received > 0, "net_null generates frames on receive");
        drop(driver.take_seed(0));
        for p in &driver.ports {
            let s = p.stats().expect("stats");
            assert_eq!(s.opackets, 1, "{}: one frame sent", p.name());
        }
        driver.shutdown();
    }

    #[test]
    fn free_hugepages_from_meminfo() {
        let m = "MemTotal: 1 kB\nHugePages_Total:     512\nHugePages_Free:      500\nHugepagesize:       2048 kB\n";
        assert_eq!(free_hugepage_bytes(m), 500 * 2048 * 1024);
        assert_eq!(free_hugepage_bytes("HugePages_Free: 0\nHugepagesize: 2048 kB\n"), 0);
        assert_eq!(free_hugepage_bytes(""), 0);
    }
}
