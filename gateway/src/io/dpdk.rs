//! The DPDK driver: [`DpdkDriver::start`] brings up EAL and one ethdev port per configured
//! interface (`interfaces[].device`: a PCI NIC or a virtual device), and hands each
//! worker a [`WorkerSeed`] — its own RX and TX queue on every port and its own mempool —
//! which the worker thread turns into a [`DpdkIo`] (the [`PacketIo`] the poll loop runs).
//!
//! Decisions, and why:
//!
//! - **Queues and workers.** Worker `w` polls RX queue `w` and transmits on TX queue `w`
//!   of every port. When every port spreads flows by RSS over as many queues, with a
//!   redirection table (RETA) and Toeplitz key we can set, that is all: each flow's frames,
//!   both directions, arrive at its worker. Ports without that — `net_af_packet` (whose
//!   DPDK 22.11 driver always uses `PACKET_FANOUT_ROLLOVER`, which moves flows between
//!   queues under load), virtio-user against a vhost-user switch without RSS, NICs with
//!   fewer queues than workers — get as many RX queues as they have (up to one per worker)
//!   and one TX queue per worker, and the **software redirect** ([`crate::io::redirect`])
//!   keeps flows on their worker: the receiving worker hands a frame of another worker's
//!   flow, mbuf and metadata, to that worker over a lock-free ring, and the owner
//!   processes it and transmits it on its own TX queue. The owner is the rule the AF_PACKET
//!   fanout program follows ([`crate::io::fanout::owner_of_frame`]), and SNAT ports follow
//!   [`crate::io::fanout::owner_of_port`]. `net_af_packet` devices get `qpairs=<workers>`
//!   unless the device string sets it. A port with fewer TX queues than workers limits the
//!   workers to its queue count (the startup log says so): handing frames back to a
//!   queue's worker for transmission is not done.
//! - **SNAT ports under RSS** ([`ThashSteering`]): a reply (endpoint → SNAT address:port)
//!   is delivered to RX queue `reta[toeplitz(key, tuple) % reta.len()]`. One
//!   `rte_thash` picker, shared by the workers, reshapes the key so that the SNAT port's
//!   low bits select the RETA entry; the same key and a RETA spreading the workers
//!   round-robin are pushed to every port, and each worker allocates with
//!   [`SnatPorts::steered`](crate::snat::SnatPorts::steered). IPv4 and IPv6 replies alike
//!   (one helper per family, in different bits of the key), where every port hashes IPv6
//!   TCP and UDP over ports and its key has 40 bytes or more; else IPv6 flows get no SNAT
//!   port (counted `unsupported_family`; the startup log says so). With one worker every port
//!   is its own ([`SnatPorts::new`](crate::snat::SnatPorts::new)). ICMP errors and
//!   fragments, which devices hash by their addresses alone, are handed to their flow's
//!   worker in software ([`crate::io::redirect::Rule::Rss`]).
//! - **Checksums.** The pipeline keeps IPv4 and TCP/UDP checksums right in software
//!   (incremental updates, RFC 1624) — the default. With `dpdk.tx_checksum_offload` and
//!   a port that offers it, frames leave with the IPv4 header checksum zeroed and the L4
//!   field holding the pseudo-header sum, and the device completes them. On receive, a
//!   device reporting "checksum not computed, data valid" (virtio's partial checksums)
//!   marks the frame `l4_csum_partial`, as AF_PACKET's `TP_STATUS_CSUMNOTREADY` does;
//!   `RTE_MBUF_F_RX_IP_CKSUM_GOOD` and `RTE_MBUF_F_RX_L4_CKSUM_GOOD` mark it
//!   `l3_csum_good` / `l4_csum_good`, and the pipeline skips verifying what the device
//!   verified (the IPv4 header checksum, SCTP's CRC32c). The device's RSS hash is not
//!   used: it is a Toeplitz hash, not the flow hash the redirect and the AF_PACKET fanout
//!   share, nor conntrack's keyed hash (docs/drivers.md).
//! - **Zero copy.** The worker's vector is the received mbufs ([`RxFrame`]): the pipeline
//!   rewrites each in place, in the mbuf's room from `data_off` to the end of its buffer
//!   (2048 bytes with the default data room, so a frame can gain an 802.1Q tag and an ICMP
//!   error fits), and the mbuf of a forwarded frame is the one handed to `rte_eth_tx_burst`
//!   (with `data_len` set to the new length), as DPDK's l2fwd/l3fwd do. A tag the device
//!   stripped (`RTE_MBUF_F_RX_VLAN_STRIPPED`) is put back in the headroom: the MAC
//!   addresses move 4 bytes forward, nothing else moves. Mbufs of dropped or consumed
//!   frames, and those the TX queue still refuses after a few bursts, are freed in bulk
//!   (`rte_pktmbuf_free_bulk`) and counted. Only frames the worker builds (ARP requests,
//!   Neighbor Solicitations) are copied, into mbufs from the worker's pool. The pool is
//!   sized for the RX and TX rings, a vector and the cache; an mbuf of worker `w`'s pool
//!   sent on any port goes back to that pool when the device is done with it.
//! - **Idle workers.** DPDK polls; a worker that found nothing for a few thousand polls
//!   sleeps `dpdk.idle_sleep_us` between polls (default 200 µs) so idle gateways and CI
//!   machines with two cores are not starved. `idle_sleep_us = 0` busy-polls.
//! - **CPUs and lcores.** EAL's main lcore is `dpdk.cpus[0]` (or the first CPU the process
//!   may use); EAL pins the thread calling `rte_eal_init` there, so the main thread's
//!   affinity is restored afterwards, to the allowed CPUs no worker polls (all of them if
//!   workers take every one). Each worker pins itself to `cpus[w % cpus.len()]`,
//!   then registers with EAL (`rte_thread_register`: an lcore id, hence a mempool cache).
//! - **Memory.** With enough free hugepages (`/proc/meminfo`), `--in-memory
//!   --single-file-segments` (no files left behind; virtio-user can share the memory);
//!   otherwise `--no-huge -m 256 --no-shconf`. Each worker has its own mempool, sized for
//!   its RX and TX descriptors on every port plus bursts and the cache.
//! - **Shutdown.** The workers drop their queue handles when they exit; then
//!   [`DpdkDriver::shutdown`] logs each port's counters and stops the ports.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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
use crate::io::fanout::SnatRange;
use crate::io::redirect::{FlowTuple, Mesh, QueueOf, Redirect, Rule, RING_CAPACITY};
use crate::metrics::PortReport;
use crate::pipeline::{Meta, Verdict};
use crate::snat::ReplySteering;
use crate::wire::vlan::TAG_LEN;
use crate::wire::{checksum, MacAddr};
use crate::worker::{PacketIo, Received, Vector, BURST, VECTOR};

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
/// port steering relies on), other IP over addresses; a port applies those it has.
const RSS_HF: RssHf = RssHf(
    RssHf::NONFRAG_IPV4_TCP.0
        | RssHf::NONFRAG_IPV4_UDP.0
        | RssHf::IPV4.0
        | RssHf::NONFRAG_IPV6_TCP.0
        | RssHf::NONFRAG_IPV6_UDP.0
        | RssHf::IPV6.0,
);
/// The hash types IPv6 replies' steering needs on every port.
const RSS_HF_IPV6_L4: RssHf = RssHf(RssHf::NONFRAG_IPV6_TCP.0 | RssHf::NONFRAG_IPV6_UDP.0);
/// Frames one redirect ring holds under RSS, where only ICMP errors and fragments are redirected.
const RSS_RING_CAPACITY: usize = 64;
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
        let [flag, mut value] = d.eal_args();
        if let DpdkDevice::Vdev { name, args: a } = d {
            // One queue pair (a socket) per worker, so each worker has a TX queue of its own.
            if name.starts_with("net_af_packet")
                && config.workers > 1
                && !a.split(',').any(|kv| kv.starts_with("qpairs="))
            {
                value.push_str(&format!(",qpairs={}", config.workers));
            }
        }
        args.extend([flag, value]);
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

/// The CPUs for threads other than the workers: those of `allowed` that no worker is pinned
/// to (worker `w` of `workers` runs on `cpus[w % cpus.len()]`), or all of `allowed` if
/// workers take every one.
fn control_cpus(allowed: &[usize], cpus: &[usize], workers: usize) -> Vec<usize> {
    let polled: Vec<usize> = (0..workers.min(cpus.len())).map(|w| cpus[w]).collect();
    let free: Vec<usize> = allowed.iter().copied().filter(|c| !polled.contains(c)).collect();
    if free.is_empty() {
        allowed.to_vec()
    } else {
        free
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
    /// IPv6 replies steered: the picker has the IPv6 helper and every port hashes IPv6
    /// TCP and UDP over ports ([`RSS_HF_IPV6_L4`]).
    ipv6: bool,
}

impl ThashSteering {
    /// The picker (its key and RETA are what the ports use).
    pub fn picker(&self) -> &ReplyPortPicker {
        &self.picker
    }

    /// The worker (RX queue) the ports deliver packets of `flow`'s tuple to: the queue of
    /// its hash under the picker's key and RETA (TCP and UDP hash alike); an IPv6 flow's
    /// where IPv6 is steered, else worker 0's (such flows are refused: they have no owner).
    pub fn queue_of(&self, flow: &FlowTuple) -> usize {
        let q = match (flow.src_addr, flow.dst_addr) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => self.picker.queue_of(&torii_dpdk::Ipv4Tuple {
                src_addr,
                dst_addr,
                src_port: flow.src_port,
                dst_port: flow.dst_port,
            }),
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) if self.ipv6 => {
                self.picker.queue_of6(&torii_dpdk::Ipv6Tuple {
                    src_addr,
                    dst_addr,
                    src_port: flow.src_port,
                    dst_port: flow.dst_port,
                })
            }
            _ => 0,
        };
        usize::from(q)
    }
}

impl ReplySteering for ThashSteering {
    fn pick(
        &self,
        endpoint: SocketAddr,
        snat_addr: IpAddr,
        worker: usize,
        start: u16,
        usable: &mut dyn FnMut(u16) -> bool,
    ) -> Option<u16> {
        self.picker.pick(endpoint, snat_addr, u16::try_from(worker).ok()?, start, usable)
    }

    fn steers_ipv6(&self) -> bool {
        self.ipv6
    }
}

/// The running DPDK driver: EAL and the ports, on the control thread.
pub struct DpdkDriver {
    /// The ports, indexed like [`Config::ports`]. Dropped before `eal`.
    ports: Vec<Port>,
    /// Their names (`ports[].name`), for the metrics.
    names: Vec<String>,
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
        // later (the table watcher, metrics) run on the CPUs no worker polls, as EAL's own
        // control threads do, so they never preempt a worker; on all of them if every CPU
        // has a worker.
        if let Err(e) = pin(&control_cpus(&allowed, &cpus, config.workers)) {
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

        // One RX and one TX queue per worker on every port, flows spread by RSS, if every
        // port can; else the software redirect, with one TX queue per worker.
        let mut workers = config.workers;
        let mut redirect_reason = None;
        if workers > 1 {
            for (i, p) in ports.iter().enumerate() {
                if let Some(why) = rss_unusable(p, workers) {
                    redirect_reason = Some(format!("ports[{i}] ({}, pmd {}): {why}", p.name(), p.info().driver_name));
                    break;
                }
            }
            let sizes: Vec<(u16, u8)> = ports.iter().map(|p| (p.info().reta_size, p.info().hash_key_size)).collect();
            if redirect_reason.is_none() && sizes.windows(2).any(|w| w[0] != w[1]) {
                redirect_reason = Some(format!("the ports' RETA and key sizes differ ({sizes:?})"));
            }
        }
        if let Some(why) = &redirect_reason {
            let tx_max = ports.iter().map(|p| usize::from(p.info().max_tx_queues)).min().unwrap_or(1).max(1);
            if tx_max < workers {
                tracing::warn!(
                    requested = workers,
                    "running {tx_max} worker(s): {why}, and a port has {tx_max} TX queue(s) while every worker \
                     transmits on a queue of its own (handing frames back to a queue's worker would lift this; \
                     not implemented)"
                );
                workers = tx_max;
            }
            if workers > 1 {
                tracing::info!(
                    workers,
                    "{why}: each worker hands frames of flows it does not own to their worker (software redirect)"
                );
            }
        }
        let rss = workers > 1 && redirect_reason.is_none();
        let redirect = workers > 1 && !rss;
        let queues = workers as u16;
        // RX queues per port: one per worker; under the redirect, as many as the port has
        // up to that (workers without one on a port get its frames through the redirect).
        let rx_queues: Vec<u16> =
            ports.iter().map(|p| if redirect { queues.min(p.info().max_rx_queues).max(1) } else { queues }).collect();

        let mut pools = Vec::with_capacity(workers);
        for w in 0..workers {
            let (rx, tx) = (u32::from(config.dpdk.rx_descriptors), u32::from(config.dpdk.tx_descriptors));
            // Every RX and TX ring full, a vector being processed, a TX batch per port,
            // and the cache: the worker forwards the mbufs it receives.
            // Under the redirect, also the rings to the other workers.
            // Under RSS, the smaller rings of ICMP errors and fragments (`RSS_RING_CAPACITY`).
            let rings = if redirect {
                ((workers - 1) * ports.len() * RING_CAPACITY) as u32
            } else if rss {
                ((workers - 1) * ports.len() * RSS_RING_CAPACITY) as u32
            } else {
                0
            };
            let need = ports.len() as u32 * (rx + tx + BURST as u32) + VECTOR as u32 + 2 * POOL_CACHE + rings;
            let n = (need + 1).next_power_of_two() - 1;
            let pool = Mempool::new(&eal, &format!("torii_w{w}"), n, POOL_CACHE, DEFAULT_DATA_ROOM, None)
                .map_err(dpdk(format!("worker {w}: mempool of {n} mbufs")))?;
            pools.push(pool);
        }

        let mut tx_csum = Vec::with_capacity(ports.len());
        for (i, port) in ports.iter_mut().enumerate() {
            let ctx = format!("ports[{i}] ({}, pmd {})", port.name(), port.info().driver_name);
            let packed_vec = packed_vectorised(&port.info().driver_name, config.ports[i].device.as_ref());
            if config.dpdk.tx_checksum_offload && packed_vec {
                tracing::info!(
                    "{ctx}: TX checksum offload left off: DPDK's packed-ring vectorised transmit path \
                     does not complete the checksums; they stay in software"
                );
            }
            let wanted_tx = if config.dpdk.tx_checksum_offload && !packed_vec {
                TxOffloads::IPV4_CKSUM | TxOffloads::TCP_CKSUM | TxOffloads::UDP_CKSUM
            } else {
                TxOffloads::empty()
            };
            let rxq = rx_queues[i];
            let conf = PortConfig {
                // Under the redirect, RSS (where the port has it) only spreads the load.
                rss_hf: if rss || rxq > 1 { RSS_HF } else { RssHf::empty() },
                rx_offloads: if config.dpdk.rx_checksum_offload { RxOffloads::CHECKSUM } else { RxOffloads::empty() },
                tx_offloads: wanted_tx,
                ..PortConfig::default()
            };
            let applied = port
                .configure(rxq, queues, &conf)
                .map_err(dpdk(format!("{ctx}: configuring {rxq} RX and {queues} TX queue(s)")))?;
            let info = port.info().clone();
            let clamp = |want: u16, max: u16| if max == 0 { want } else { want.min(max) };
            let (rxd, txd) = (
                clamp(config.dpdk.rx_descriptors, info.rx_desc_max),
                clamp(config.dpdk.tx_descriptors, info.tx_desc_max),
            );
            for q in 0..rxq {
                port.setup_rx_queue(q, rxd, &pools[usize::from(q)])
                    .map_err(dpdk(format!("{ctx}: RX queue {q} ({rxd} descriptors)")))?;
            }
            for q in 0..queues {
                port.setup_tx_queue(q, txd).map_err(dpdk(format!("{ctx}: TX queue {q} ({txd} descriptors)")))?;
            }
            port.start().map_err(dpdk(format!("{ctx}: starting")))?;
            // IPv6 Neighbor Solicitations for the gateway's addresses and VIPs go to
            // solicited-node multicast groups (RFC 4861 § 7.2.2), which a device's multicast
            // filter drops (`rte_eth_dev_start` turns all-multicast off unless asked).
            let allmulti = port.set_allmulticast(true);
            if let Err(e) = &allmulti {
                tracing::warn!(
                    "{ctx}: all-multicast refused ({e}): IPv6 neighbours may not resolve the gateway's \
                     addresses and VIPs on this port"
                );
            }
            let csum = TxCsum::from_offloads(applied.tx_offloads);
            if config.dpdk.tx_checksum_offload && !packed_vec && !csum.any() {
                tracing::info!("{ctx}: no TX checksum offload offered; checksums stay in software");
            }
            tx_csum.push(csum);
            let link = port.link().map_err(dpdk(format!("{ctx}: link")))?;
            tracing::info!(
                interface = %config.ports[i].name,
                device = %port.name(),
                pmd = %info.driver_name,
                rx_queues = rxq,
                tx_queues = queues,
                rx_descriptors = rxd,
                tx_descriptors = txd,
                rss = ?applied.rss_hf,
                rx_offloads = ?applied.rx_offloads,
                tx_offloads = ?applied.tx_offloads,
                link_up = link.up,
                speed_mbps = link.speed_mbps,
                allmulticast = allmulti.is_ok(),
                "DPDK port started"
            );
        }

        let steering = if rss { Some(Arc::new(push_steering(&eal, &mut ports, config, workers)?)) } else { None };

        let mut macs = Vec::with_capacity(ports.len());
        for (i, p) in ports.iter().enumerate() {
            macs.push(MacAddr(p.mac_addr().map_err(dpdk(format!("ports[{i}] ({}): MAC address", p.name())))?));
        }

        // The redirect's rings: every frame's under the software redirect; under RSS, ICMP
        // errors' and fragments' (which devices hash by their addresses alone).
        let rings = if redirect {
            let snat = SnatRange {
                addrs: config.snat.addresses.clone(),
                addrs6: config.snat.addresses6.clone(),
                port_min: config.snat.port_min,
                port_max: config.snat.port_max,
            };
            Some((Mesh::new(workers, ports.len(), RING_CAPACITY), Rule::Fanout(snat)))
        } else {
            steering.as_ref().map(|st| {
                let st = Arc::clone(st);
                let queue_of: QueueOf = Arc::new(move |q: &FlowTuple| st.queue_of(q));
                (Mesh::new(workers, ports.len(), RSS_RING_CAPACITY), Rule::Rss(queue_of))
            })
        };
        let mut seeds = Vec::with_capacity(workers);
        for (w, pool) in pools.into_iter().enumerate() {
            let q = w as u16;
            let mut rx = Vec::with_capacity(ports.len());
            let mut tx = Vec::with_capacity(ports.len());
            for (i, p) in ports.iter().enumerate() {
                let queue = if q < rx_queues[i] {
                    Some(p.rx_queue(q).map_err(dpdk(format!("ports[{i}] ({}): RX queue {q}", p.name())))?)
                } else {
                    None
                };
                rx.push(queue);
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
                redirect: rings.as_ref().map(|(m, r)| Redirect::new(Arc::clone(m), w, r.clone())),
            }));
        }
        let pmds: Vec<&str> = ports.iter().map(|p| p.info().driver_name.as_str()).collect();
        let summary = format!(
            "{} port(s) [{}], {:?} RX / {} TX queue(s), {} worker(s){}, {}",
            ports.len(),
            pmds.join(", "),
            rx_queues,
            queues,
            workers,
            if rss {
                ", SNAT ports steered by RSS (rte_thash), ICMP errors and fragments redirected to their flow's worker"
            } else if redirect {
                ", frames redirected to their flow's worker (no usable RSS)"
            } else {
                ""
            },
            match memory {
                Memory::Hugepages => "hugepages",
                Memory::NoHuge => "no hugepages (--no-huge)",
                Memory::FromEalArgs => "memory from dpdk.eal_args",
            }
        );
        let names = config.ports.iter().map(|p| p.name.clone()).collect();
        Ok(Self { ports, names, seeds, macs, workers, steering, summary, eal })
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

    /// Every port's device counters and link state (`rte_eth_stats_get`,
    /// `rte_eth_link_get_nowait`; safe to call while the workers run, as DPDK's own
    /// telemetry does). A port whose counters cannot be read reports zeros.
    pub fn port_reports(&self) -> Vec<PortReport> {
        self.ports
            .iter()
            .zip(&self.names)
            .map(|(p, name)| {
                let link = p.link().ok();
                let s = p.stats().unwrap_or_default();
                PortReport {
                    name: name.clone(),
                    device: p.name().to_owned(),
                    link_up: link.map(|l| l.up),
                    speed_mbps: link.map_or(0, |l| l.speed_mbps),
                    rx_packets: s.ipackets,
                    tx_packets: s.opackets,
                    rx_missed: s.imissed,
                    rx_nombuf: s.rx_nombuf,
                    rx_errors: s.ierrors,
                    tx_errors: s.oerrors,
                    queue_drops: s.q_errors,
                }
            })
            .collect()
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
    let mut ipv6 = picker.steers_ipv6();
    if !ipv6 {
        tracing::warn!(key_bytes = key.len(), "RSS key too short to steer IPv6 replies: IPv6 flows get no SNAT port");
    }
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
        if ipv6 && !hf.contains(RSS_HF_IPV6_L4) {
            tracing::warn!(device = %name, rss = ?hf, "no RSS over IPv6 TCP/UDP ports: IPv6 flows get no SNAT port");
            ipv6 = false;
        }
    }
    Ok(ThashSteering { picker, ipv6 })
}

/// One worker's share of the driver, moved into its thread: a queue pair on every port
/// and its mempool. [`WorkerSeed::into_io`] (on the worker thread) makes the [`DpdkIo`].
pub struct WorkerSeed {
    worker: usize,
    eal: Eal,
    /// The worker's RX queue on each port (none where the port has fewer queues than
    /// workers: its frames come through the redirect).
    rx: Vec<Option<RxQueue>>,
    tx: Vec<TxQueue>,
    pool: Mempool,
    cpu: Option<usize>,
    tx_csum: Vec<TxCsum>,
    idle_sleep: Duration,
    redirect: Option<Redirect<Redirected>>,
}

/// What the redirect rings carry: a received mbuf (its tag restored) and its metadata.
type Redirected = (Mbuf, Meta);

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
            rx_batch: Vec::with_capacity(BURST),
            vector: Vector::default(),
            vector_iface: 0,
            tx: Tx {
                queues: self.tx,
                batches: (0..ports).map(|_| Vec::with_capacity(BURST)).collect(),
                csum: self.tx_csum,
                dropped: 0,
            },
            free: Vec::with_capacity(VECTOR),
            idle_sleep: self.idle_sleep,
            stats: IoStats::default(),
            redirect: self.redirect,
            worker: w,
            pool: self.pool,
            _registration: registration,
        })
    }
}

/// Counters of what the driver itself dropped (also counted by the worker: `tx_ring_full`
/// and `oversize` drops).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoStats {
    /// Frames the TX queue refused: its batch was full at `tx_vector`/`tx_copy`, or the
    /// device did not take them after a few bursts (4) at `flush`.
    pub tx_dropped: u64,
    /// `tx_copy` calls refused because the mempool was empty.
    pub alloc_failed: u64,
    /// Received frames in chained mbufs (larger than a buffer), dropped.
    pub rx_chained: u64,
}

/// A received mbuf in the worker's vector: the pipeline's buffer is the mbuf's room from
/// `data_off` to the end of its buffer ([`Mbuf::room_mut`]), its frame the first
/// `data_len` bytes ([`Meta::len`]).
#[derive(Debug)]
#[repr(transparent)]
pub struct RxFrame(Mbuf);

impl AsMut<[u8]> for RxFrame {
    #[inline]
    fn as_mut(&mut self) -> &mut [u8] {
        self.0.room_mut()
    }
}

impl RxFrame {
    /// The mbuf (to see that the one received is the one sent).
    pub fn mbuf(&self) -> &Mbuf {
        &self.0
    }
}

/// Puts back the 802.1Q tag `tpid`/`tci` a device took out of `m`'s frame on receive:
/// the tag goes into the headroom, so only the 12 bytes of MAC addresses move. False
/// (nothing changed) when the frame is shorter than the addresses or the headroom has no
/// room (a driver leaves `RTE_PKTMBUF_HEADROOM`, 128 bytes).
fn restore_tag(m: &mut Mbuf, tpid: u16, tci: u16) -> bool {
    const ADDRS: usize = 12;
    if m.len() < ADDRS || m.prepend(TAG_LEN).is_none() {
        return false;
    }
    let d = m.data_mut();
    d.copy_within(TAG_LEN..TAG_LEN + ADDRS, 0);
    d[ADDRS..ADDRS + 2].copy_from_slice(&tpid.to_be_bytes());
    d[ADDRS + 2..ADDRS + 4].copy_from_slice(&tci.to_be_bytes());
    true
}

/// A worker's [`PacketIo`] over DPDK: its RX and TX queue on every port.
pub struct DpdkIo {
    rx: Vec<Option<RxQueue>>,
    /// Where `rte_eth_rx_burst` writes (moved into the vector at once).
    rx_batch: Vec<Mbuf>,
    vector: Vector<RxFrame>,
    /// The port the vector's frames came from.
    vector_iface: u8,
    tx: Tx,
    /// Mbufs to free at the end of a vector, in one bulk free.
    free: Vec<Mbuf>,
    idle_sleep: Duration,
    stats: IoStats,
    /// This worker's end of the redirect rings (ports without usable RSS, several workers).
    redirect: Option<Redirect<Redirected>>,
    worker: usize,
    pool: Mempool,
    /// Dropped last: the thread keeps its lcore id while it frees mbufs.
    _registration: ThreadRegistration,
}

impl std::fmt::Debug for DpdkIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkIo").field("worker", &self.worker).field("stats", &self.stats()).finish()
    }
}

impl DpdkIo {
    /// What the driver dropped so far.
    pub fn stats(&self) -> IoStats {
        IoStats { tx_dropped: self.tx.dropped, ..self.stats }
    }

    /// The worker's mempool.
    pub fn pool(&self) -> &Mempool {
        &self.pool
    }
}

/// A worker's transmit side: a TX queue and a batch of mbufs per port.
struct Tx {
    queues: Vec<TxQueue>,
    batches: Vec<Vec<Mbuf>>,
    /// The TX checksum offloads of each port.
    csum: Vec<TxCsum>,
    /// Frames refused (see [`IoStats::tx_dropped`]).
    dropped: u64,
}

impl Tx {
    /// Offers `iface`'s batch to its TX queue up to `tries` times; with `drop_rest`,
    /// frees what the device still did not take and returns how many.
    fn push(&mut self, iface: usize, tries: usize, drop_rest: bool) -> usize {
        let (Some(q), Some(batch)) = (self.queues.get_mut(iface), self.batches.get_mut(iface)) else { return 0 };
        for _ in 0..tries {
            if batch.is_empty() {
                return 0;
            }
            q.tx_burst(batch);
        }
        if drop_rest && !batch.is_empty() {
            let n = batch.len();
            self.dropped += n as u64;
            Mbuf::free_bulk(batch);
            return n;
        }
        0
    }

    /// Requests `iface`'s checksum offloads for `m` and queues it on `iface`'s batch
    /// (sending the batch first when it is full); gives `m` back when there is no room.
    #[inline]
    fn queue(&mut self, iface: usize, mut m: Mbuf) -> Result<(), Mbuf> {
        let Some(batch) = self.batches.get(iface) else { return Err(m) };
        if batch.len() >= BURST {
            self.push(iface, 1, false);
            if self.batches[iface].len() >= BURST {
                self.dropped += 1;
                return Err(m);
            }
        }
        if let Some(&csum) = self.csum.get(iface).filter(|c| c.any()) {
            request_tx_checksums(&mut m, csum);
        }
        self.batches[iface].push(m);
        Ok(())
    }

    /// Sends every batch, dropping what the devices refuse after [`TX_RETRIES`] bursts.
    fn flush(&mut self) -> usize {
        (0..self.batches.len()).map(|i| self.push(i, TX_RETRIES, true)).sum()
    }
}

impl Drop for DpdkIo {
    fn drop(&mut self) {
        self.tx.flush();
        Mbuf::free_bulk(&mut self.free);
        // Frames other workers handed this one and it never took.
        if let Some(r) = &mut self.redirect {
            for port in 0..self.rx.len() {
                r.recv(port, usize::MAX, drop);
            }
        }
        if self.stats() != IoStats::default() {
            tracing::info!(worker = self.worker, stats = ?self.stats(), "DPDK driver drops");
        }
    }
}

impl PacketIo for DpdkIo {
    type Buf = RxFrame;

    fn interfaces(&self) -> usize {
        self.rx.len()
    }

    #[inline]
    fn rx(&mut self, iface: usize, max: usize) -> Received {
        let Some(queue) = self.rx.get_mut(iface) else { return Received::default() };
        debug_assert!(self.vector.is_empty() || usize::from(self.vector_iface) == iface, "one port per vector");
        self.vector_iface = iface as u8;
        let mut max = max.min(VECTOR - self.vector.len());
        let mut got = Received::default();
        // First what other workers received for this worker's flows.
        if let Some(r) = &mut self.redirect {
            let vector = &mut self.vector;
            let n = r.recv(iface, max, |(m, meta)| vector.push(RxFrame(m), meta));
            got.taken += n;
            max -= n;
        }
        let Some(q) = queue else { return got };
        got.taken += q.rx_burst(&mut self.rx_batch, max);
        for mut m in self.rx_batch.drain(..) {
            if m.segments() != 1 {
                self.stats.rx_chained += 1;
                got.oversize += 1;
                self.free.push(m);
                continue;
            }
            // The frame's headers, written by the device (in a virtual machine, by the
            // vhost backend on another core): their lines are on their way while the
            // burst's other frames are taken, not missed one frame after another in the
            // pipeline's stage 1 (DPDK's l3fwd prefetches a burst's packet data the same
            // way).
            if let Some(first) = m.data().first() {
                crate::prefetch::prefetch(first);
            }
            let l4 = m.rx_l4_cksum();
            let (l4_csum_partial, l4_csum_good) = (l4 == RxCksum::None, l4 == RxCksum::Good);
            let l3_csum_good = m.rx_ip_cksum() == RxCksum::Good;
            if let Some(tci) = m.rx_vlan_stripped() {
                // DPDK keeps no TPID: devices strip 802.1Q (0x8100) tags.
                if !restore_tag(&mut m, 0x8100, tci) {
                    got.oversize += 1;
                    self.free.push(m);
                    continue;
                }
            }
            let meta = Meta { iface: iface as u8, len: m.len(), l4_csum_partial, l3_csum_good, l4_csum_good };
            if let Some(r) = &mut self.redirect {
                let owner = r.owner(m.data());
                if owner != r.worker() {
                    match r.send(iface, owner, (m, meta)) {
                        Ok(()) => got.redirected += 1,
                        Err((m, _)) => {
                            got.redirect_full += 1;
                            self.free.push(m);
                        }
                    }
                    continue;
                }
            }
            self.vector.push(RxFrame(m), meta);
        }
        if !self.free.is_empty() {
            Mbuf::free_bulk(&mut self.free);
        }
        got
    }

    #[inline]
    fn vector(&mut self) -> (&mut [RxFrame], &[Meta]) {
        self.vector.parts()
    }

    #[inline]
    fn tx_vector(&mut self, verdicts: &[Verdict]) -> usize {
        let (free, tx) = (&mut self.free, &mut self.tx);
        let mut refused = 0;
        self.vector.drain(verdicts, |RxFrame(mut m), verdict| {
            let Verdict::Transmit { iface, len } = verdict else {
                free.push(m);
                return;
            };
            // The pipeline's length is within the room it was given (`set_len` checks).
            let queued = if m.set_len(len) { tx.queue(usize::from(iface), m) } else { Err(m) };
            if let Err(m) = queued {
                refused += 1;
                free.push(m);
            }
        });
        Mbuf::free_bulk(free);
        refused
    }

    #[inline]
    fn tx_copy(&mut self, iface: usize, frame: &[u8]) -> bool {
        let Some(mut m) = self.pool.alloc() else {
            self.stats.alloc_failed += 1;
            return false;
        };
        m.extend_from_slice(frame) && self.tx.queue(iface, m).is_ok()
    }

    #[inline]
    fn flush(&mut self) -> usize {
        self.tx.flush()
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

/// Whether DPDK's virtio driver may put `device`, a port of driver `driver` (its ethdev
/// driver name), on its packed-ring vectorised paths: a `net_virtio_user` device whose
/// arguments set `packed_vq` and `vectorized` to non-zero integers (as the driver reads
/// them: `strtoull` with base 0); on a CPU without AVX-512F it falls back to the scalar
/// ones. DPDK 22.11's vectorised transmit path there hands the peer frames whose offloaded
/// checksums were never completed (`tests/virtio.rs` found every one bad; the packed
/// scalar path completes them), so TX checksum offload is not asked for on such a device:
/// a frame with a wrong checksum would be a silent loss.
fn packed_vectorised(driver: &str, device: Option<&DpdkDevice>) -> bool {
    let Some(DpdkDevice::Vdev { args, .. }) = device else { return false };
    let set = |key: &str| {
        args.split(',').filter_map(|a| a.strip_prefix(key)?.strip_prefix('=')).any(|v| {
            let v = v.trim();
            let n = if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                u64::from_str_radix(hex, 16)
            } else if v.len() > 1 && v.starts_with('0') {
                u64::from_str_radix(&v[1..], 8)
            } else {
                v.parse()
            };
            n.is_ok_and(|n| n != 0)
        })
    };
    driver == "net_virtio_user" && set("packed_vq") && set("vectorized")
}

#[cfg(test)]
mod tests {
    use super::*;
    use torii_dpdk::mempool::HEADROOM;

    fn config(driver_lines: &str) -> Config {
        let text = crate::config::EMBEDDED_DEFAULT.replace("eal_args = []", driver_lines);
        Config::from_toml(&text).expect("config")
    }

    #[test]
    fn packed_vectorised_devices_are_named_by_their_arguments() {
        let dev = |s: &str| DpdkDevice::parse(s).expect("a device");
        let virtio = "net_virtio_user";
        for yes in [
            "net_virtio_user0,path=/s,queues=1,packed_vq=1,in_order=1,mrg_rxbuf=0,vectorized=1",
            "virtio_user0,path=/s,vectorized=01,packed_vq=0x1",
            "net_virtio_user1,packed_vq=2,vectorized=1",
        ] {
            assert!(packed_vectorised(virtio, Some(&dev(yes))), "{yes}");
        }
        for no in [
            "net_virtio_user0,path=/s,packed_vq=1",
            "net_virtio_user0,path=/s,vectorized=1",
            "net_virtio_user0,path=/s,packed_vq=1,vectorized=0",
            "net_virtio_user0,path=/s,packed_vq=0x0,vectorized=1",
            "net_virtio_user0,path=/s,mrg_rxbuf=0,in_order=0,vectorized=1",
            "net_virtio_user0,path=/s,xpacked_vq=1,vectorized=1",
            "0000:01:00.0",
        ] {
            assert!(!packed_vectorised(virtio, Some(&dev(no))), "{no}");
        }
        let af = dev("net_af_packet0,iface=x,packed_vq=1,vectorized=1");
        assert!(!packed_vectorised("net_af_packet", Some(&af)));
        assert!(!packed_vectorised(virtio, None));
    }

    #[test]
    fn control_threads_run_where_no_worker_polls() {
        assert_eq!(control_cpus(&[0, 1], &[1], 1), vec![0]);
        assert_eq!(control_cpus(&[0, 1, 2, 3], &[2, 3], 2), vec![0, 1]);
        // One worker on the first of two listed CPUs: the second is free.
        assert_eq!(control_cpus(&[0, 1, 2], &[1, 2], 1), vec![0, 2]);
        // Workers on every allowed CPU: the control threads share them.
        assert_eq!(control_cpus(&[0, 1], &[0, 1], 4), vec![0, 1]);
        assert_eq!(control_cpus(&[0, 1], &[0, 1], 2), vec![0, 1]);
    }

    #[test]
    fn eal_args_defaults() {
        let c = config("eal_args = []");
        let (args, memory) = eal_args(&c, 42, 1 << 30, 1);
        assert_eq!(memory, Memory::Hugepages);
        assert_eq!(
            args.join(" "),
            "--file-prefix torii-42 --in-memory --single-file-segments -l 1 --no-telemetry --log-level=*:notice \
             --no-pci --vdev net_af_packet0,iface=tg-front,qpairs=2 --vdev net_af_packet1,iface=tg-back,qpairs=2"
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
            "--no-telemetry --vdev net_af_packet0,iface=tg-front,qpairs=2 --vdev net_af_packet1,iface=tg-back,qpairs=2 \
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
    /// allocates steers the reply, IPv4 or IPv6, to that worker's queue; the workers' I/O
    /// sends and receives.
    #[test]
    fn two_workers_on_null_ports_steer_replies_by_rss() {
        let text = crate::config::EMBEDDED_DEFAULT
            .replace(
                "eal_args = []",
                "eal_args = [\"--no-huge\", \"-m\", \"256\", \"--no-shconf\", \"--vdev\", \"net_ring0\"]",
            )
            .replace("cpus = []", "cpus = [0]")
            .replace("net_af_packet0,iface=tg-front", "net_null0")
            .replace("net_af_packet1,iface=tg-back", "net_null1");
        let config = Config::from_toml(&text).expect("config");
        let mut driver = DpdkDriver::start(&config).expect("DPDK on net_null ports");
        assert_eq!(driver.workers(), 2, "{}", driver.summary());
        assert!(driver.summary().contains("steered by RSS"), "{}", driver.summary());
        assert_eq!(driver.macs().len(), 2);
        let steering = driver.steering().expect("RSS steering with two workers");
        let thash = Arc::clone(driver.steering.as_ref().expect("picker"));
        let picker = thash.picker();
        for p in &driver.ports {
            assert_eq!(p.rss_hash_conf_get().expect("key").key, picker.key(), "{} holds the picker's key", p.name());
            assert_eq!(p.rss_reta_query().expect("RETA"), picker.reta(), "{} holds the picker's RETA", p.name());
        }
        // IPv6 replies too: `net_null` hashes IPv6 TCP and UDP, and its key has 40 bytes.
        assert!(thash.steers_ipv6(), "IPv6 replies steered");
        let snat_addrs: [IpAddr; 2] = [config.snat.addresses[0].into(), "fd00:70::1".parse().expect("address")];
        // (worker, endpoint, SNAT address, SNAT port) of some of the flows below.
        let mut flows = Vec::new();
        for snat in snat_addrs {
            for w in 0..2 {
                let mut ports = crate::snat::SnatPorts::steered(w, 1024, 65535, Arc::clone(&steering));
                let mut seen = std::collections::HashSet::new();
                for i in 0..300u16 {
                    let host = 11 + i % 3;
                    let ip: IpAddr = match snat {
                        IpAddr::V4(_) => Ipv4Addr::new(10, 70, 0, host as u8).into(),
                        IpAddr::V6(_) => std::net::Ipv6Addr::from(0xfd00_0070_u128 << 96 | u128::from(host)).into(),
                    };
                    let endpoint = SocketAddr::new(ip, 8080 + i % 2);
                    let (_, p) =
                        ports.alloc(endpoint, &[snat], |_, p| !seen.contains(&(endpoint, p))).expect("a SNAT port");
                    assert!(seen.insert((endpoint, p)));
                    // The queue the ports deliver the reply to (`rte_softrss` with their key).
                    let reply = FlowTuple { src_addr: ip, dst_addr: snat, src_port: endpoint.port(), dst_port: p };
                    assert_eq!(thash.queue_of(&reply), w, "reply to SNAT port {p} from {endpoint}");
                    if i < 20 {
                        flows.push((w, endpoint, snat, p));
                    }
                }
            }
        }
        // Worker 1's I/O, on its own thread: transmit a frame on each port, receive.
        let mut seed = driver.take_seed(1).expect("seed");
        assert!(driver.take_seed(1).is_none(), "a seed is handed out once");
        // ICMP errors and fragments, which the device hashes by their addresses, go to their
        // flow's worker: about a packet sent to an endpoint, and an endpoint's fragmented
        // reply, the worker that allocated its SNAT port; about one sent to a client, the
        // worker whose queue the client's packets reach.
        let redirect = seed.redirect.as_mut().expect("the redirect of ICMP errors and fragments under RSS");
        let l2 = crate::frames::L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) };
        let (dst_unreachable, ack) = (crate::wire::Icmpv4Type::DstUnreachable, crate::wire::TcpFlags::ACK);
        for &(w, endpoint, snat, p) in &flows {
            let (sent, err) = match (endpoint, snat) {
                (SocketAddr::V4(e), IpAddr::V4(snat)) => {
                    let sent = crate::frames::tcp(l2, (snat, p), (*e.ip(), e.port()), ack, 1, 2, b"", 64);
                    let err = crate::frames::icmp_error(l2, *e.ip(), snat, dst_unreachable, 4, 1400, &sent[14..], 64);
                    (sent, err)
                }
                (SocketAddr::V6(e), IpAddr::V6(snat)) => {
                    let sent = crate::frames::tcp6(l2, (snat, p), (*e.ip(), e.port()), ack, 1, 2, b"", 64);
                    let too_big = crate::wire::Icmpv6Type::PacketTooBig;
                    let err = crate::frames::icmpv6_error(l2, *e.ip(), snat, too_big, 0, 1280, &sent[14..], 64);
                    (sent, err)
                }
                _ => unreachable!("one family"),
            };
            assert_eq!(redirect.owner(&err), w, "frag-needed / packet too big about SNAT port {p} to {endpoint}");
            assert_eq!(redirect.owner(&sent), 1, "any other frame stays with the worker RSS chose");
            // A fragmented reply (hashed by its addresses alone) goes to the worker too.
            let reply = match (endpoint, snat) {
                (SocketAddr::V4(e), IpAddr::V4(snat)) => crate::frames::ipv4_fragments(
                    &crate::frames::udp(l2, (*e.ip(), e.port()), (snat, p), &[9; 100], 64),
                    p,
                    48,
                ),
                (SocketAddr::V6(e), IpAddr::V6(snat)) => crate::frames::ipv6_fragments(
                    &crate::frames::udp6(l2, (*e.ip(), e.port()), (snat, p), &[9; 100], 64),
                    u32::from(p),
                    48,
                ),
                _ => unreachable!("one family"),
            };
            for (k, f) in reply.iter().enumerate() {
                assert_eq!(redirect.owner(f), w, "fragment {k} of a reply to SNAT port {p} from {endpoint}");
            }
        }
        let vip = Ipv4Addr::new(203, 0, 113, 10);
        let mut owners = [0; 2];
        for cport in 40000..40040u16 {
            let client = Ipv4Addr::new(198, 51, 100, 10);
            let arriving = torii_dpdk::Ipv4Tuple { src_addr: client, dst_addr: vip, src_port: cport, dst_port: 80 };
            let owner = usize::from(picker.queue_of(&arriving));
            owners[owner] += 1;
            let sent = crate::frames::tcp(l2, (vip, 80), (client, cport), ack, 1, 2, b"", 64);
            let err = crate::frames::icmp_error(l2, client, vip, dst_unreachable, 3, 0, &sent[14..], 64);
            assert_eq!(redirect.owner(&err), owner, "an error about the reply to {client}:{cport}");
        }
        assert!(owners.iter().all(|&n| n > 0), "the clients' flows spread over both workers: {owners:?}");
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
                assert!(io.tx_copy(iface, &frame));
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
            let got = io.rx(0, BURST);
            let n = io.vector().0.len();
            assert_eq!(got, Received { taken: n, ..Received::default() });
            // net_null's frames are 64 bytes; the pipeline may use the whole mbuf after them.
            let (frames, metas) = io.vector();
            assert!(metas.iter().all(|m| m.len == 64 && m.iface == 0), "{metas:?}");
            assert!(frames.iter_mut().all(|f| f.as_mut().len() == usize::from(DEFAULT_DATA_ROOM - HEADROOM)));
            let in_use = io.pool().in_use();
            assert_eq!(io.tx_vector(&[]), 0, "nothing to transmit: every mbuf is freed");
            assert_eq!(io.pool().in_use(), in_use - n as u32);
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
        let reports = driver.port_reports();
        assert_eq!(reports.len(), 2);
        assert_eq!((reports[0].name.as_str(), reports[0].device.as_str()), ("tg-front", "net_null0"));
        assert_eq!((reports[1].tx_packets, reports[1].link_up, reports[1].queue_drops.len()), (1, Some(true), 2));
        forwarding_sends_the_received_mbuf(driver.eal());
        driver.shutdown();
    }

    /// Zero copy, on the EAL of the test above (one per process) and a `net_ring` port —
    /// a loopback: what is sent on it comes back. A frame received and forwarded leaves in
    /// the mbuf it arrived in, rewritten in place, round after round, with one mbuf out of
    /// the pool the whole time; dropped frames and what the TX ring refuses are freed and
    /// counted; a stripped tag goes back into the headroom.
    fn forwarding_sends_the_received_mbuf(eal: &Eal) {
        let pool = Mempool::new(eal, "t_zerocopy", 2047, 0, DEFAULT_DATA_ROOM, None).expect("pool");
        let mut port = Port::by_name(eal, "net_ring0").expect("net_ring0");
        port.configure(1, 1, &PortConfig::default()).expect("configure");
        port.setup_rx_queue(0, 256, &pool).expect("rx queue");
        port.setup_tx_queue(0, 256).expect("tx queue");
        port.start().expect("start");
        let seed = WorkerSeed {
            worker: 7,
            eal: eal.clone(),
            rx: vec![Some(port.rx_queue(0).expect("rx"))],
            tx: vec![port.tx_queue(0).expect("tx")],
            pool: pool.clone(),
            cpu: None,
            tx_csum: vec![TxCsum::default()],
            idle_sleep: Duration::ZERO,
            redirect: None,
        };
        let frame = crate::frames::udp(
            crate::frames::L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) },
            (Ipv4Addr::new(10, 70, 0, 1), 2000),
            (Ipv4Addr::new(10, 70, 0, 11), 8080),
            b"zero copy",
            64,
        );
        std::thread::spawn(move || {
            let mut io = seed.into_io().expect("worker I/O");
            assert!(io.tx_copy(0, &frame));
            assert_eq!(io.flush(), 0);
            assert_eq!(pool.in_use(), 1, "the worker's frame, in the ring");
            let mut first = None;
            let mut len = frame.len();
            for round in 0..1000 {
                assert_eq!(io.rx(0, BURST), Received { taken: 1, ..Received::default() }, "round {round}");
                let (frames, metas) = io.vector();
                let mbuf = frames[0].mbuf().as_ptr();
                assert_eq!(*first.get_or_insert(mbuf), mbuf, "round {round}: the mbuf received is the one sent");
                assert_eq!((metas[0].len, metas[0].iface), (len, 0));
                let room = frames[0].as_mut();
                assert_eq!(room.len(), usize::from(DEFAULT_DATA_ROOM - HEADROOM));
                assert_eq!(&room[..14], &frame[..14], "round {round}: what was written is what is received");
                // Rewritten in place, and growing by a byte every 100 rounds: the room after
                // the frame is the pipeline's.
                room[..6].copy_from_slice(&frame[..6]);
                if round % 100 == 99 {
                    room[len] = 0xa5;
                    len += 1;
                }
                assert_eq!(io.tx_vector(&[Verdict::Transmit { iface: 0, len }]), 0);
                assert_eq!(io.flush(), 0);
                assert_eq!(pool.in_use(), 1, "round {round}: no mbuf allocated, none leaked");
            }
            assert_eq!(len, frame.len() + 10);
            // A dropped frame's mbuf goes back to the pool.
            assert_eq!(io.rx(0, BURST).taken, 1);
            assert_eq!(io.tx_vector(&[Verdict::Drop(crate::counters::DropReason::NoFrontend)]), 0);
            assert_eq!(pool.in_use(), 0);
            // net_ring holds 1023 frames: the rest of 1100 is refused, freed and counted.
            let mut refused = 0;
            for _ in 0..1100 {
                refused += usize::from(!io.tx_copy(0, &frame));
            }
            refused += io.flush();
            assert_eq!(refused, 1100 - 1023);
            assert_eq!(io.stats().tx_dropped, 77);
            assert_eq!(pool.in_use(), 1023, "what the ring refused is freed");
            while io.rx(0, BURST).taken > 0 {
                io.tx_vector(&[]);
            }
            assert_eq!(pool.in_use(), 0);
            // A tag the device stripped goes back into the headroom; only the addresses move.
            let mut m = pool.alloc().expect("mbuf");
            assert!(m.extend_from_slice(&frame));
            assert!(restore_tag(&mut m, 0x8100, 100));
            assert_eq!(m.data(), &crate::frames::tagged(&frame, 0x8100, 100)[..]);
            assert_eq!(m.headroom(), usize::from(HEADROOM) - 4);
        })
        .join()
        .expect("worker thread");
        port.stop().expect("stop");
    }

    #[test]
    fn free_hugepages_from_meminfo() {
        let m = "MemTotal: 1 kB\nHugePages_Total:     512\nHugePages_Free:      500\nHugepagesize:       2048 kB\n";
        assert_eq!(free_hugepage_bytes(m), 500 * 2048 * 1024);
        assert_eq!(free_hugepage_bytes("HugePages_Free: 0\nHugepagesize: 2048 kB\n"), 0);
        assert_eq!(free_hugepage_bytes(""), 0);
    }
}
