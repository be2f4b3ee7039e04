//! torii-bench: measures torii-gateway end to end on a kernel-free DPDK pipe, against
//! testpmd's io forwarding on the same pipe and core, and the kernel's nftables path and
//! torii's AF_PACKET driver on veth pairs, in one run. See the crate docs (`src/lib.rs`)
//! and docs/benchmarking.md.
//!
//! ```text
//! torii-bench --flows 1000,60000 --trial-s 10 --out bench.json      # NDR/PDR, connections/s, latency
//! torii-bench --flows 1000 --fixed-rate 20000 --trial-s 3           # one trial each (smoke)
//! torii-bench --baseline io-fwd,nftables,torii-af-packet            # every baseline
//! torii-bench --families ipv4,ipv6 --topology two-armed              # IPv6; front and back links
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use torii_bench::dut::{self, Memory, Proc};
use torii_bench::kernel::KernelPath;
use torii_bench::plan::{Dut, Family, GatewayDriver, Plan, Protocol};
use torii_bench::report::{self, DutResult, LatencyResult, Machine, Percentiles, Report, Run, SearchResult};
use torii_bench::search::{median, Point, Search, SearchConfig};
use torii_bench::traffic::{Generator, Link, Phase, TrialOutcome, TrialSpec};
use torii_bench::vhost;
use torii_dpdk::mempool::DEFAULT_DATA_ROOM;
use torii_dpdk::{Eal, Mempool};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Baseline {
    /// testpmd's io forwarding on its own net_virtio_user port.
    IoFwd,
    /// The Linux kernel with kube-proxy's nftables rules, on a veth pair (torii-bench on
    /// net_af_packet; needs root, `ip`, `nft`, `ethtool`).
    Nftables,
    /// torii-gateway on its own AF_PACKET driver on a veth pair, like the kernel's
    /// (torii-bench on net_af_packet; needs root, `ip`, `ethtool`, `taskset`).
    ToriiAfPacket,
    /// No baseline (torii only).
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Churn {
    /// No churn.
    Off,
    /// torii-control publishes a table change every 100 ms: an extra Service's endpoints
    /// (no traffic goes to it) alternate between one and two.
    Changes,
    /// The same file is rewritten every 100 ms with identical content: the control
    /// plane's work without a table change, to tell its CPU cost from the swap's.
    Identical,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Test {
    /// NDR/PDR of requests through established flows (RFC 2544 § 26.1), and latency.
    Throughput,
    /// TCP only: NDR/PDR of new connections a second (RFC 8219 § 7): SYN, SYN-ACK, ACK,
    /// then the endpoint's RST closes each (the next SYN of the same tuple reopens it).
    Connections,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Topology {
    /// One link per device carries the clients and the endpoints (the gateway's one
    /// interface holds both subnets).
    OneArmed,
    /// Two links per DPDK device: torii-bench's client port faces the gateway's front
    /// device (the clients' subnets), its endpoint port the back device (the endpoints'
    /// subnets and the SNAT address); testpmd forwards between its two ports (paired).
    TwoArmed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MemoryArg {
    /// Hugepages when 600 MiB are free, else --no-huge.
    Auto,
    /// 2 MiB hugepages for every DPDK process.
    Hugepages,
    /// --no-huge for every DPDK process.
    NoHuge,
}

/// Where the gateway under test keeps its conntrack regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ConntrackMemory {
    /// Huge pages when free beside the DPDK processes' 600 MiB, else tmpfs.
    Auto,
    /// Huge pages (a hugetlbfs directory under /dev/hugepages); the run fails without them.
    Hugepages,
    /// tmpfs, in the gateway's shm_dir (small pages).
    Shm,
}

/// A directory removed (with its contents) when dropped.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes `/dev/hugepages/torii-bench-<pid>` directories of processes that are gone: the
/// gateway regions of runs that were killed, whose huge pages stay taken until removed.
fn remove_stale_regions() {
    let Ok(dir) = std::fs::read_dir("/dev/hugepages") else { return };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("torii-bench-")) else { continue };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Line-rate benchmark of torii-gateway: NDR/PDR search of requests and connections, latency,
/// io-fwd, nftables and AF_PACKET baselines.
#[derive(Debug, Parser)]
#[command(version, about, args_override_self = true)]
struct Args {
    /// Transport protocols to measure, each a run of its own (comma-separated). TCP flows
    /// are opened with a handshake through the gateway during the warm-up.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "udp")]
    protocols: Vec<Protocol>,
    /// IP families to measure, each a run of its own (comma-separated). With `ipv6` the
    /// Services are dual-stack, the gateway has IPv6 subnets and an IPv6 SNAT address, and
    /// torii-bench answers its Neighbor Solicitations; IPv6 frames are at least 84 bytes
    /// (a smaller --frame-size is raised to that for IPv6 runs). The nftables and
    /// torii-af-packet baselines are IPv4 only.
    #[arg(long, alias = "family", value_enum, value_delimiter = ',', default_value = "ipv4")]
    families: Vec<Family>,
    /// One link per device, or two (clients on one, endpoints on the other; DPDK devices
    /// only: not with the nftables and torii-af-packet baselines).
    #[arg(long, value_enum, default_value_t = Topology::OneArmed)]
    topology: Topology,
    /// Tests to run per protocol and flow count (comma-separated); `connections` applies
    /// to TCP only, and cycles through the flows' tuples (each reused every flows/rate s).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "throughput,connections")]
    tests: Vec<Test>,
    /// Client flow counts to measure, each a run of its own (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    flows: Vec<u32>,
    /// The gateway's SNAT ports are unique per endpoint (tuple-unique SNAT), not per SNAT
    /// address: flows may then exceed 64 000 (up to 32 000 per endpoint, 16 M in all);
    /// give enough Services × endpoints.
    #[arg(long)]
    snat_per_endpoint: bool,
    /// Table churn during the whole run (torii-control reads the manifests directory).
    #[arg(long, value_enum, default_value_t = Churn::Off)]
    churn: Churn,
    /// Services (VIPs) the flows are spread over.
    #[arg(long, default_value_t = 1)]
    services: u32,
    /// Ready endpoints per Service.
    #[arg(long, default_value_t = 4)]
    endpoints: u32,
    /// Frame size on the wire, FCS included (64..=1518), or `imix` (7:4:1 of 64, 594 and
    /// 1518 bytes, by flow).
    #[arg(long, default_value = "64", value_parser = parse_frame_size)]
    frame_size: FrameSize,
    /// Length of each search trial, seconds (RFC 2544 asks 60; CSIT uses 10 and shorter).
    #[arg(long, default_value_t = 10.0)]
    trial_s: f64,
    /// Searches per device and flow count (alternating trial by trial); medians reported.
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Relative width at which a search stops, and its first step down from a failure
    /// while nothing has passed (doubled at each further failure).
    #[arg(long, default_value_t = 0.02)]
    precision: f64,
    /// Loss ratio PDR allows.
    #[arg(long, default_value_t = 0.005)]
    pdr_loss: f64,
    /// First (highest) rate a search offers, client requests/s.
    #[arg(long, default_value_t = 20e6)]
    max_pps: f64,
    /// Most trials per search.
    #[arg(long, default_value_t = 14)]
    max_trials: usize,
    /// Latency trial's rate as a fraction of NDR (of PDR for a device with no NDR).
    #[arg(long, default_value_t = 0.5)]
    latency_fraction: f64,
    /// First warm-up attempt's rate, requests/s (each further attempt halves it).
    #[arg(long, default_value_t = 50_000.0)]
    warmup_pps: f64,
    /// Skip the search: one trial per device at this rate (requests/s), latency recorded.
    #[arg(long)]
    fixed_rate: Option<f64>,
    /// Baselines measured in the same run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "io-fwd")]
    baseline: Vec<Baseline>,
    /// CPU of torii-bench's generator (its only lcore).
    #[arg(long, default_value_t = 0)]
    bench_cpu: usize,
    /// CPU of the device's forwarding core (the gateway's worker, testpmd's forwarding lcore).
    #[arg(long, default_value_t = 1)]
    dut_cpu: usize,
    /// Descriptors of every virtio ring, and of the DPDK devices' receive and transmit
    /// queues (the same for torii and testpmd): what either side holds while the other is
    /// not polling.
    #[arg(long, default_value_t = torii_bench::plan::VIRTIO_QUEUE_SIZE)]
    queue_size: u16,
    /// How torii's and testpmd's `net_virtio_user` devices receive (the same for both):
    /// `offload` asks for receive checksum offload (with DPDK's default mergeable buffers
    /// and in-order rings); `vectorized` asks for none of the three and takes DPDK's
    /// vectorised split-ring receive path; `packed`: packed rings on DPDK's AVX-512 paths.
    #[arg(long, value_enum, default_value_t = torii_bench::plan::VirtioRx::Offload)]
    virtio_rx: torii_bench::plan::VirtioRx,
    /// Mbufs in testpmd's pool (`--total-num-mbufs`); default: as many as torii-gateway's
    /// pool for the same rings (16 383 for one port of 4096 descriptors); 0: testpmd's own
    /// default (163 456 mbufs, 370 MiB), which holds io-fwd below torii (docs/benchmarking.md).
    #[arg(long)]
    io_fwd_mbufs: Option<u32>,
    /// Memory of the DPDK processes.
    #[arg(long, value_enum, default_value_t = MemoryArg::Auto)]
    memory: MemoryArg,
    /// Where the gateway keeps its flow records (`conntrack.region_dir`): `auto` is huge
    /// pages when the DPDK processes have them and enough more are free for the regions
    /// (at 1 M flows ~760 MiB: scripts/setup reserves 2 GiB), else tmpfs (`shm`).
    #[arg(long, value_enum, default_value_t = ConntrackMemory::Auto)]
    conntrack_memory: ConntrackMemory,
    /// An extra EAL `--log-level` for every DPDK process (torii-bench's on stderr, the
    /// devices' in their logs in the work directory), e.g. `lib.vhost.config:info`: the
    /// virtio features each vhost-user link negotiated.
    #[arg(long)]
    dpdk_log_level: Option<String>,
    /// Check addresses, ports and MACs on one received frame in this many (every frame's
    /// flow index is checked).
    #[arg(long, default_value_t = 16)]
    check_every: u64,
    /// Check IPv4 and UDP/TCP checksums (and addresses) on one received frame in this many.
    #[arg(long, default_value_t = 64)]
    checksum_every: u64,
    /// The JSON result file.
    #[arg(long, default_value = "torii-bench.json")]
    out: PathBuf,
    /// Working directory (manifests, configuration, sockets, logs); kept after the run.
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// torii-gateway (default: next to this program).
    #[arg(long)]
    gateway_bin: Option<PathBuf>,
    /// torii-control (default: next to this program).
    #[arg(long)]
    control_bin: Option<PathBuf>,
    /// testpmd.
    #[arg(long, default_value = "dpdk-testpmd")]
    testpmd_bin: PathBuf,
}

/// `--frame-size`: bytes, or IMIX (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FrameSize(Option<usize>);

/// Parses `--frame-size`: a number of bytes, or `imix`.
fn parse_frame_size(s: &str) -> Result<FrameSize, String> {
    if s.eq_ignore_ascii_case("imix") {
        return Ok(FrameSize(None));
    }
    s.parse().map(|n| FrameSize(Some(n))).map_err(|e| format!("{s:?}: a frame size in bytes or `imix` ({e})"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("torii-bench: checks FAILED (see the result file)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("torii-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Warm-up trials before a device's flows count as established.
const WARMUP_ATTEMPTS: usize = 10;

fn sibling(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("current_exe")?;
    Ok(exe.with_file_name(name))
}

/// The devices under test, running.
struct Duts {
    gateway: Proc,
    _control: Proc,
    testpmd: Option<Proc>,
    /// torii-gateway on AF_PACKET, and its torii-control.
    af_packet: Option<(Proc, Proc)>,
}

impl Duts {
    /// Lets `dut` have the forwarding core and freezes the other.
    fn select(&mut self, dut: Dut) -> Result<()> {
        let set = |p: &Proc, on: bool| if on { p.thaw() } else { p.freeze() };
        if let Some(t) = &self.testpmd {
            set(t, dut == Dut::IoFwd);
        }
        if let Some((g, _)) = &self.af_packet {
            set(g, dut == Dut::ToriiAfPacket);
        }
        set(&self.gateway, dut == Dut::Torii);
        std::thread::sleep(Duration::from_millis(20));
        self.gateway.check_alive()?;
        if let Some(t) = &mut self.testpmd {
            t.check_alive()?;
        }
        if let Some((g, _)) = &mut self.af_packet {
            g.check_alive()?;
        }
        Ok(())
    }
}

fn run(args: &Args) -> Result<bool> {
    let started = Instant::now();
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let max_flows = *args.flows.iter().max().context("--flows is empty")?;
    let two_armed = args.topology == Topology::TwoArmed;
    let dual_stack = args.families.contains(&Family::Ipv6);
    let mut plans: Vec<Plan> = Vec::new();
    for &family in &args.families {
        for &p in &args.protocols {
            for &f in &args.flows {
                let plan = Plan::new(p, f, args.services, args.endpoints, args.frame_size.0, args.snat_per_endpoint)?;
                plans.push(plan.with_family(family)?.with_two_armed(two_armed));
            }
        }
    }
    let kernel_paths = args.baseline.iter().any(|b| matches!(b, Baseline::Nftables | Baseline::ToriiAfPacket));
    if kernel_paths && (two_armed || dual_stack) {
        bail!("the nftables and torii-af-packet baselines are one-armed and IPv4 only (--topology one-armed --families ipv4)");
    }
    let memory = match args.memory {
        MemoryArg::Auto => Memory::choose(600 << 20),
        MemoryArg::Hugepages => Memory::Hugepages,
        MemoryArg::NoHuge => Memory::NoHuge,
    };
    let baseline = args.baseline.contains(&Baseline::IoFwd);
    let nftables = args.baseline.contains(&Baseline::Nftables);
    let af_packet = args.baseline.contains(&Baseline::ToriiAfPacket);
    let pid = std::process::id();
    let workdir = args.workdir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("torii-bench-{pid}")));
    let _ = std::fs::remove_dir_all(&workdir);
    std::fs::create_dir_all(workdir.join("manifests")).with_context(|| format!("create {}", workdir.display()))?;
    let shm_dir = format!("/dev/shm/torii-bench-{pid}");
    // Each DPDK device's sockets: the clients' link, then (two-armed) the endpoints'.
    let arms = if two_armed { 2 } else { 1 };
    let sock_of =
        |dev: &str, k: usize| workdir.join(if k == 0 { format!("{dev}.sock") } else { format!("{dev}-back.sock") });
    let torii_socks: Vec<PathBuf> = (0..arms).map(|k| sock_of("torii", k)).collect();
    let iofwd_socks: Vec<PathBuf> = (0..arms).map(|k| sock_of("io-fwd", k)).collect();
    eprintln!(
        "torii-bench: work dir {}; memory {memory:?}; generator on CPU {}, devices on CPU {}",
        workdir.display(),
        args.bench_cpu,
        args.dut_cpu
    );

    // The kernel path's veth pair exists before EAL opens its end.
    let biggest = Plan::new(
        args.protocols[0],
        max_flows,
        args.services,
        args.endpoints,
        args.frame_size.0,
        args.snat_per_endpoint,
    )?
    .with_two_armed(two_armed);
    let hugetlbfs = std::fs::metadata("/dev/hugepages").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.blksize() >= 2 << 20
    });
    let region_bytes = biggest.conntrack_region_bytes();
    let region_dir = match args.conntrack_memory {
        ConntrackMemory::Shm => None,
        ConntrackMemory::Hugepages => Some(format!("/dev/hugepages/torii-bench-{pid}")),
        ConntrackMemory::Auto => {
            (memory == Memory::Hugepages && hugetlbfs && dut::free_hugepage_bytes() >= (600 << 20) + region_bytes)
                .then(|| format!("/dev/hugepages/torii-bench-{pid}"))
        }
    };
    let conntrack_memory = if region_dir.is_some() { "hugepages" } else { "shm" };
    // Huge pages held by files outlive the process: remove a run's regions however it
    // ends, and those of runs that were killed.
    remove_stale_regions();
    let _regions = region_dir.as_ref().map(|d| RemoveDir(PathBuf::from(d)));
    eprintln!("torii-bench: the gateway's conntrack regions ({} MiB) in {conntrack_memory}", region_bytes >> 20);
    let kernel = if nftables {
        let k = KernelPath::setup(pid, &biggest, args.dut_cpu, &workdir).context("the nftables baseline")?;
        eprintln!(
            "torii-bench: baseline: nftables on {} <-> {} ({})",
            k.gen_if,
            k.dut_if,
            workdir.join("kernel.nft").display()
        );
        Some(k)
    } else {
        None
    };

    let afp_pipe = if af_packet {
        Some(KernelPath::pipe('a', pid, args.dut_cpu).context("the AF_PACKET baseline's veth pair")?)
    } else {
        None
    };

    // Our EAL: one lcore, one net_vhost server port per DPDK device and arm (net_vhost0..:
    // torii's, then io-fwd's), net_af_packet for the kernel.
    let sock_paths: Vec<&std::path::Path> =
        torii_socks.iter().chain(iofwd_socks.iter().filter(|_| baseline)).map(PathBuf::as_path).collect();
    let mut eal_args = vhost::eal_args(&format!("torii-bench-{pid}"), args.bench_cpu, &sock_paths, 1, memory);
    // EAL gives a log type registered after the options are parsed (the PMDs Debian's
    // DPDK loads as plugins) the level of the first --log-level pattern it matches: the
    // extra level goes before `*:notice`.
    let log_level = args.dpdk_log_level.as_ref().map(|l| format!("--log-level={l}"));
    let before_log_levels = |argv: &mut Vec<String>, extra: &str| {
        let at = argv.iter().position(|a| a.starts_with("--log-level")).unwrap_or(argv.len());
        argv.insert(at, extra.to_string());
    };
    if let Some(l) = &log_level {
        before_log_levels(&mut eal_args, l);
    }
    for (k, pipe) in kernel.iter().chain(afp_pipe.iter()).enumerate() {
        eal_args.push("--vdev".into());
        eal_args.push(pipe.vdev(k));
    }
    let eal = Eal::builder().args(eal_args).init().context("EAL")?;
    let _ = std::fs::remove_dir(eal.runtime_dir());
    let pool = Mempool::new(&eal, "bench", 16383, 256, DEFAULT_DATA_ROOM, None).context("mempool")?;
    let open = |names: &[String], dut: Dut| -> Result<Link> {
        let ports = names
            .iter()
            .map(|name| vhost::open_port(&eal, name, &pool, 1).with_context(|| format!("port {name}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Link::new(dut, ports, max_flows)?)
    };
    let vhost_names = |first: usize| (first..first + arms).map(|k| format!("net_vhost{k}")).collect::<Vec<_>>();
    let mut torii_link = open(&vhost_names(0), Dut::Torii)?;
    let mut base_links = Vec::new();
    if baseline {
        base_links.push(open(&vhost_names(arms), Dut::IoFwd)?);
    }
    if kernel.is_some() {
        base_links.push(open(&["net_af_packet0".into()], Dut::Kernel)?);
    }
    if afp_pipe.is_some() {
        base_links.push(open(&[format!("net_af_packet{}", usize::from(kernel.is_some()))], Dut::ToriiAfPacket)?);
    }

    // The devices.
    let manifests = workdir.join("manifests");
    std::fs::write(
        manifests.join("bench.yaml"),
        plans.iter().max_by_key(|p| p.flows).map(|p| p.manifests(dual_stack)).unwrap_or_default(),
    )?;
    let mut gw_eal = if memory == Memory::NoHuge { memory.eal_args() } else { Vec::new() };
    gw_eal.extend(args.virtio_rx.eal_args().iter().map(|a| a.to_string()));
    if let Some(l) = &log_level {
        // Given a --log-level, torii adds none of its own: the extra one, then torii's.
        gw_eal.extend([l.clone(), "--log-level=*:notice".to_string()]);
    }
    let config = workdir.join("gateway.toml");
    std::fs::write(
        &config,
        biggest.gateway_config(
            &shm_dir,
            region_dir.as_deref(),
            &manifests.display().to_string(),
            &GatewayDriver::Dpdk {
                sockets: torii_socks.iter().map(|s| s.display().to_string()).collect(),
                cpu: args.dut_cpu,
                eal: gw_eal,
                queue_size: args.queue_size,
                virtio_rx: args.virtio_rx,
            },
            dual_stack,
        ),
    )?;
    let control_bin = match &args.control_bin {
        Some(p) => p.clone(),
        None => sibling("torii-control")?,
    };
    let gateway_bin = match &args.gateway_bin {
        Some(p) => p.clone(),
        None => sibling("torii-gateway")?,
    };
    let mut control_cmd = Command::new(&control_bin);
    control_cmd.args(["run", "--config"]).arg(&config).arg("--manifests").arg(&manifests).env("NO_COLOR", "1");
    let control = Proc::spawn("torii-control", control_cmd, &workdir.join("control.log"))?;
    let mut gateway_cmd = Command::new(&gateway_bin);
    gateway_cmd.arg("--config").arg(&config).env("NO_COLOR", "1");
    let gateway = Proc::spawn("torii-gateway", gateway_cmd, &workdir.join("gateway.log"))?;
    let testpmd = if baseline {
        let mbufs = args.io_fwd_mbufs.unwrap_or_else(|| dut::gateway_pool_mbufs(arms as u32, args.queue_size));
        let mut cmd = dut::testpmd_command(
            &args.testpmd_bin,
            &iofwd_socks,
            args.dut_cpu,
            args.queue_size,
            args.virtio_rx,
            mbufs,
            memory,
        );
        if let Some(l) = &log_level {
            let mut argv: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
            before_log_levels(&mut argv, l);
            let mut with = Command::new(cmd.get_program());
            with.args(argv);
            cmd = with;
        }
        eprintln!("torii-bench: baseline: {cmd:?}");
        Some(Proc::spawn("testpmd", cmd, &workdir.join("testpmd.log"))?)
    } else {
        None
    };
    let afp_shm_dir = format!("/dev/shm/torii-bench-afp-{pid}");
    let af_packet = match &afp_pipe {
        Some(pipe) => {
            let config = workdir.join("gateway-af-packet.toml");
            let driver = GatewayDriver::AfPacket { iface: pipe.dut_if.clone() };
            std::fs::write(
                &config,
                biggest.gateway_config(&afp_shm_dir, None, &manifests.display().to_string(), &driver, false),
            )?;
            let mut control_cmd = Command::new(&control_bin);
            control_cmd.args(["run", "--config"]).arg(&config).arg("--manifests").arg(&manifests).env("NO_COLOR", "1");
            let control =
                Proc::spawn("torii-control (AF_PACKET)", control_cmd, &workdir.join("control-af-packet.log"))?;
            let mut cmd = pipe.command(&gateway_bin, args.dut_cpu);
            cmd.arg("--config").arg(&config).env("NO_COLOR", "1");
            eprintln!("torii-bench: baseline: torii-gateway on AF_PACKET: {cmd:?}");
            Some((Proc::spawn("torii-gateway (AF_PACKET)", cmd, &workdir.join("gateway-af-packet.log"))?, control))
        }
        None => None,
    };
    let mut duts = Duts { gateway, _control: control, testpmd, af_packet };
    wait_links(&torii_link, &mut duts.gateway)?;
    if let (Some(l), Some(t)) = (base_links.iter().find(|l| l.dut == Dut::IoFwd), &mut duts.testpmd) {
        wait_links(l, t)?;
    }
    duts.select(Dut::Torii)?;
    eprintln!("torii-bench: devices connected after {:.1} s", started.elapsed().as_secs_f64());

    let churn = (args.churn != Churn::Off).then(|| start_churn(manifests.clone(), args.churn == Churn::Changes));

    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );

    let mut pool = Some(pool);
    let mut runs = Vec::new();
    let mut all_ok = true;
    let mut bad_frames = 0;
    let connections = args.tests.contains(&Test::Connections);
    for plan in &plans {
        let mut gen = Generator::new(*plan, pool.take().context("pool")?, args.check_every, args.checksum_every);
        let mut links: Vec<&mut Link> = vec![&mut torii_link];
        links.extend(base_links.iter_mut());
        let mut ctx = Ctx { args, duts: &mut duts, pb: &pb, bad_frames: 0, ok: true };
        if args.tests.contains(&Test::Throughput) {
            // torii's flows are opened last, just before its first trial: opened first, its
            // million flows' warm-up and then the baseline's (~25 s each at 50 000 a second)
            // left its earliest UDP flows idle past their 30 s timeout (one request and its
            // reply do not assure a flow: Linux `nf_conntrack_udp_timeout`), and its first
            // trial re-created ~600 000 of them (`expired`, `new_flows` in the gateway's log).
            let mut results = Vec::new();
            for link in links.iter_mut().rev() {
                link.forget_snat();
                let (warmup, _) = ctx.warm_up(&mut gen, link, Phase::Open)?;
                results.push(DutResult::new(link.dut.name(), warmup));
            }
            results.reverse();
            ctx.measure(&mut gen, &mut links, &mut results, Phase::Data, 2.0)?;
            runs.push(Run {
                test: "throughput",
                protocol: plan.protocol.name(),
                ip: plan.family.name(),
                flows: plan.flows,
                frame_size: plan.frame_name(),
                duts: results,
            });
        }
        if connections && plan.protocol == Protocol::Tcp {
            // RFC 8219 § 7. Flows left open by the throughput test are closed first
            // (endpoint RSTs), so each connection's SYN reopens a CLOSE flow and the
            // gateway's conntrack and SNAT ports never hold more than `flows` entries.
            let mut results = Vec::new();
            for link in links.iter_mut() {
                let mut warmup = Vec::new();
                if args.tests.contains(&Test::Throughput) {
                    warmup.extend(ctx.warm_up(&mut gen, link, Phase::Close)?.0);
                }
                link.forget_snat();
                warmup.extend(ctx.warm_up(&mut gen, link, Phase::Connect)?.0);
                results.push(DutResult::new(link.dut.name(), warmup));
            }
            ctx.measure(&mut gen, &mut links, &mut results, Phase::Connect, 4.0)?;
            runs.push(Run {
                test: "connections",
                protocol: plan.protocol.name(),
                ip: plan.family.name(),
                flows: plan.flows,
                frame_size: plan.frame_name(),
                duts: results,
            });
        }
        bad_frames += ctx.bad_frames;
        all_ok &= ctx.ok;
        drop(links);
        pool = Some(gen.into_pool());
    }
    pb.finish_and_clear();
    let churn_writes = churn.map(|(stop, thread)| {
        stop.store(true, Ordering::Relaxed);
        thread.join().unwrap_or(0)
    });
    let publications = std::fs::read_to_string(workdir.join("control.log"))
        .map(|log| log.matches("published table").count())
        .unwrap_or(0);
    duts.select(Dut::Torii)?;
    let gateway_tail = dut::tail(duts.gateway.log(), 5);
    drop(duts);
    let _ = std::fs::remove_dir_all(&shm_dir);
    let _ = std::fs::remove_dir_all(&afp_shm_dir);

    let report = Report {
        tool: "torii-bench",
        schema: report::SCHEMA,
        version: env!("CARGO_PKG_VERSION"),
        started_unix_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::detect(Eal::version()),
        setup: serde_json::json!({
            "topology": if two_armed {
                "two-armed: torii-bench net_vhost client port <-> device front net_virtio_user, endpoint port <-> back net_virtio_user (torii, io-fwd)"
            } else {
                "one-armed: torii-bench net_vhost <-> device net_virtio_user (torii, io-fwd); torii-bench net_af_packet <-> veth (nftables, torii-af-packet)"
            },
            "protocols": args.protocols.iter().map(|p| p.name()).collect::<Vec<_>>(),
            "ip": args.families.iter().map(|f| f.name()).collect::<Vec<_>>(),
            "services": args.services, "endpoints": args.endpoints, "frame_size": args.frame_size.0.map_or("imix".to_string(), |s| s.to_string()),
            "memory": memory, "conntrack_memory": conntrack_memory, "bench_cpu": args.bench_cpu, "dut_cpu": args.dut_cpu,
            "trial_s": args.trial_s, "repeats": args.repeats, "precision": args.precision,
            "pdr_loss": args.pdr_loss, "max_pps": args.max_pps, "fixed_rate": args.fixed_rate,
            "latency_fraction": args.latency_fraction, "baselines": args.baseline.iter().filter(|&&b| b != Baseline::None).map(|b| format!("{b:?}")).collect::<Vec<_>>(),
            "checksum_every": args.checksum_every, "check_every": args.check_every,
            "virtio_rx": args.virtio_rx, "queue_size": args.queue_size,
            "churn": { "mode": format!("{:?}", args.churn), "writes": churn_writes, "table_publications": publications },
        }),
        runs,
        bad_frames,
        ok: all_ok && bad_frames == 0,
    };
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(&args.out, json + "\n").with_context(|| format!("write {}", args.out.display()))?;
    let title = format!(
        "torii-bench: {} frames, {}/{}, {} (DPDK devices on vhost-user, nftables and AF_PACKET on veth), trials {} s, {} search(es); {:.0} s in all; results in {}",
        {
            // IPv6 runs may have raised the size (Plan::with_family).
            let mut sizes: Vec<String> = plans.iter().map(Plan::frame_name).collect();
            sizes.dedup();
            sizes.iter().map(|s| if s == "imix" { "IMIX".into() } else { format!("{s}-byte") }).collect::<Vec<_>>().join(" and ")
        },
        args.protocols.iter().map(|p| p.name().to_uppercase()).collect::<Vec<_>>().join(" and "),
        args.families.iter().map(|f| if *f == Family::Ipv4 { "IPv4" } else { "IPv6" }).collect::<Vec<_>>().join(" and "),
        if two_armed { "two-armed" } else { "one-armed" },
        args.trial_s,
        args.repeats,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    print!("{}", report::table(&report, &title));
    match torii_bench::plot::draw(&report, &args.out) {
        Ok(paths) => {
            for p in paths {
                println!("plot: {}", p.display());
            }
        }
        Err(e) => eprintln!("torii-bench: {e:#}"),
    }
    if !report.ok {
        eprintln!("torii-bench: gateway log tail:\n{gateway_tail}");
    }
    Ok(report.ok)
}

/// Starts the churn thread: every 100 ms it writes `churn.yaml` into `manifests` (a
/// temporary file renamed over it, as editors save), a Service `bench/churn` with VIP
/// 203.0.113.250 that no flow uses, whose endpoints alternate between one and two when
/// `changes`, and stay the same otherwise. Returns the stop flag and the thread, which
/// returns how many times it wrote.
fn start_churn(manifests: PathBuf, changes: bool) -> (Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut writes = 0u64;
        while !flag.load(Ordering::Relaxed) {
            let endpoints = if changes && writes % 2 == 1 { 2 } else { 1 };
            let mut y = String::from(
                "apiVersion: v1\nkind: Service\nmetadata: {name: churn, namespace: bench}\nspec:\n  type: ClusterIP\n\
                 \x20 clusterIP: 10.96.255.250\n  externalIPs: [203.0.113.250]\n  ports:\n\
                 \x20 - {name: discard, protocol: TCP, port: 9, targetPort: 9}\n---\n\
                 apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: churn-a\n  namespace: bench\n\
                 \x20 labels: {kubernetes.io/service-name: churn}\naddressType: IPv4\n\
                 ports:\n- {name: discard, protocol: TCP, port: 9}\nendpoints:\n",
            );
            for k in 0..endpoints {
                y.push_str(&format!(
                    "- addresses: [10.70.250.{}]\n  conditions: {{ready: true, serving: true, terminating: false}}\n",
                    2 + k
                ));
            }
            let tmp = manifests.join(".churn.yaml.tmp");
            if std::fs::write(&tmp, y).and_then(|()| std::fs::rename(&tmp, manifests.join("churn.yaml"))).is_ok() {
                writes += 1;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        writes
    });
    (stop, thread)
}

fn wait_links(link: &Link, proc: &mut Proc) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        proc.check_alive()?;
        if link.ports.iter().all(|p| vhost::wait_link(p, Duration::from_millis(200)).is_ok()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} did not connect within 30 s; its log:\n{}", link.dut.name(), dut::tail(proc.log(), 25));
        }
    }
}

/// What a run measures, and how it reports.
struct Ctx<'a> {
    args: &'a Args,
    duts: &'a mut Duts,
    pb: &'a ProgressBar,
    bad_frames: u64,
    ok: bool,
}

impl Ctx<'_> {
    fn say(&self, line: String) {
        self.pb.suspend(|| eprintln!("{line}"));
    }

    fn account(&mut self, t: &TrialOutcome) {
        self.bad_frames += t.bad;
        self.ok &= t.bad == 0;
    }

    /// Brings every flow to `phase`'s end state on `link` (TCP open, closed; UDP: every
    /// flow's first datagram answered): each attempt sends only the flows not answered
    /// yet, at half the rate of the one before (a busy machine loses frames at any rate),
    /// until all are. Returns the attempts and whether every flow was answered.
    fn warm_up(&mut self, gen: &mut Generator, link: &mut Link, phase: Phase) -> Result<(Vec<TrialOutcome>, bool)> {
        self.duts.select(link.dut)?;
        let plan = *gen.plan();
        let mut rate = self.args.warmup_pps;
        let mut warmup = Vec::new();
        gen.reset_answered();
        for attempt in 1..=WARMUP_ATTEMPTS {
            self.pb.set_message(format!("[{}] {}: {phase:?} {attempt}", plan.tag(), link.dut.name()));
            let missing = f64::from(plan.flows - gen.answered());
            let d = Duration::from_secs_f64((missing / rate).clamp(0.5, 600.0));
            let spec = TrialSpec { rate_pps: Some(rate), duration: d, latency: false, phase, unanswered_only: true };
            let pb = self.pb;
            let t = gen.trial(link, spec, &mut |_| pb.tick());
            rate = (rate / 2.0).max(1000.0);
            self.say(format!(
                "[{}] {} {phase:?} {attempt}: {} sent, {} back, {} ARP answered; {}/{} flows answered{}",
                plan.tag(),
                link.dut.name(),
                t.offered,
                t.received,
                t.arp_answered,
                gen.answered(),
                plan.flows,
                if t.bad > 0 { format!(", {} bad: {:?}", t.bad, t.examples) } else { String::new() }
            ));
            self.bad_frames += t.bad;
            warmup.push(t);
            if gen.answered() == plan.flows {
                return Ok((warmup, true));
            }
        }
        self.ok = false;
        self.say(format!(
            "[{}] {}: {phase:?} FAILED: {} flows never answered",
            plan.tag(),
            link.dut.name(),
            plan.flows - gen.answered()
        ));
        Ok((warmup, false))
    }

    /// The measurements of one test on every link: a fixed-rate trial each, or the
    /// NDR/PDR searches (alternating trial by trial) and a latency trial at a fraction of
    /// each device's NDR. `frames_per_request`: frames the device forwards per request
    /// offered (2: request and reply; 4: a connection's SYN, SYN-ACK, ACK and RST).
    fn measure(
        &mut self,
        gen: &mut Generator,
        links: &mut [&mut Link],
        results: &mut [DutResult],
        phase: Phase,
        frames_per_request: f64,
    ) -> Result<()> {
        let args = self.args;
        let trial_len = Duration::from_secs_f64(args.trial_s);
        if let Some(rate) = args.fixed_rate {
            for (k, link) in links.iter_mut().enumerate() {
                self.duts.select(link.dut)?;
                let t = self.timed_trial(gen, link, "fixed rate", Some(rate), trial_len, true, phase);
                self.account(&t);
                self.say(describe(gen.plan(), link.dut, "fixed rate", &t));
                results[k].latency = Some(latency_result(t));
            }
            return Ok(());
        }
        let config = SearchConfig {
            max_pps: args.max_pps,
            min_pps: 1000.0,
            precision: args.precision,
            pdr_loss: args.pdr_loss,
            max_trials: args.max_trials,
        };
        for repeat in 0..args.repeats {
            let mut searches: Vec<(Search, Vec<TrialOutcome>)> =
                links.iter().map(|_| (Search::new(config), Vec::new())).collect();
            loop {
                let mut any = false;
                for (k, link) in links.iter_mut().enumerate() {
                    let Some(rate) = searches[k].0.next_rate() else { continue };
                    any = true;
                    self.duts.select(link.dut)?;
                    let label = format!(
                        "{} search {}/{} trial {}",
                        if phase == Phase::Connect { "connections" } else { "throughput" },
                        repeat + 1,
                        args.repeats,
                        searches[k].1.len() + 1
                    );
                    let t = self.timed_trial(gen, link, &label, Some(rate), trial_len, false, phase);
                    self.say(describe(gen.plan(), link.dut, &label, &t));
                    self.account(&t);
                    // What the device carried: connections it established, or half the
                    // frames it forwarded both ways.
                    let carried = if phase == Phase::Connect {
                        t.handshake_acks as f64 / t.duration_s.max(1e-9)
                    } else {
                        t.forwarded_pps()
                    };
                    searches[k].0.record(Point {
                        offered_pps: t.offered_pps(),
                        received_pps: t.received_pps(),
                        forwarded_pps: carried,
                        loss_ratio: t.loss_ratio(),
                    });
                    searches[k].1.push(t);
                }
                if !any {
                    break;
                }
            }
            for (k, (s, trials)) in searches.into_iter().enumerate() {
                results[k].searches.push(SearchResult {
                    ndr: s.ndr(),
                    pdr: s.pdr(),
                    points: s.points().to_vec(),
                    trials,
                });
            }
        }
        for r in results.iter_mut() {
            let ndrs: Vec<f64> = r.searches.iter().map(|s| s.ndr.lower_pps).collect();
            let pdrs: Vec<f64> = r.searches.iter().map(|s| s.pdr.lower_pps).collect();
            r.ndr_offered_pps = median(&ndrs);
            r.pdr_offered_pps = median(&pdrs);
            r.ndr_dut_pps = r.ndr_offered_pps.map(|v| frames_per_request * v);
            r.pdr_dut_pps = r.pdr_offered_pps.map(|v| frames_per_request * v);
            r.ndr_at_generator_max = r.searches.iter().any(|s| s.ndr.upper_pps.is_none() && s.ndr.lower_pps > 0.0);
        }
        // Latency at a fraction of each device's NDR (RFC 2544 § 26.2), or of its PDR where
        // the searches found no zero-loss rate (then the rate is below the loss ratio's
        // ceiling, and the result says which it was: `latency_basis`).
        for (k, link) in links.iter_mut().enumerate() {
            let positive = |v: Option<f64>| v.filter(|&v| v > 0.0);
            let (basis, base) = match (positive(results[k].ndr_offered_pps), positive(results[k].pdr_offered_pps)) {
                (Some(ndr), _) => ("NDR", ndr),
                (None, Some(pdr)) => ("PDR", pdr),
                (None, None) => continue,
            };
            self.duts.select(link.dut)?;
            let label = format!("latency at {:.0} % of {basis}", args.latency_fraction * 100.0);
            let t = self.timed_trial(gen, link, &label, Some(base * args.latency_fraction), trial_len, true, phase);
            self.say(describe(gen.plan(), link.dut, &label, &t));
            self.account(&t);
            results[k].latency = Some(latency_result(t));
            results[k].latency_basis = Some(basis);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn timed_trial(
        &self,
        gen: &mut Generator,
        link: &mut Link,
        label: &str,
        rate: Option<f64>,
        duration: Duration,
        latency: bool,
        phase: Phase,
    ) -> TrialOutcome {
        let head = format!(
            "[{}] {} {label}: {} M/s",
            gen.plan().tag(),
            link.dut.name(),
            rate.map_or("max".into(), |r| format!("{:.3}", r / 1e6))
        );
        let pb = self.pb;
        let spec = TrialSpec { rate_pps: rate, duration, latency, phase, unanswered_only: false };
        gen.trial(link, spec, &mut |t| {
            pb.set_message(format!(
                "{head} — {:.1}/{:.0} s, {} sent, {} back",
                t.duration_s,
                duration.as_secs_f64(),
                t.offered,
                t.received
            ));
            pb.tick();
        })
    }
}

fn describe(plan: &Plan, dut: Dut, label: &str, t: &TrialOutcome) -> String {
    format!(
        "[{}] {} {label}: offered {:.3} M/s, back {:.3}, loss {:.4} % ({} lost, {} refused by the device's ring){}{}",
        plan.tag(),
        dut.name(),
        t.offered_pps() / 1e6,
        t.received_pps() / 1e6,
        100.0 * t.loss_ratio(),
        t.offered.saturating_sub(t.received),
        t.refused + t.reflect_refused,
        match t.target_pps {
            Some(r) if t.generator_limited => format!(
                " [generator short of the rate: asked {:.3} M/s, {} frames skipped; it had its CPU {:.0} % of the time]",
                r / 1e6,
                t.skipped,
                100.0 * t.generator_cpu_s / t.duration_s.max(1e-9)
            ),
            _ => String::new(),
        },
        if t.bad > 0 { format!("; {} BAD: {:?}", t.bad, t.examples) } else { String::new() },
    )
}

fn latency_result(t: TrialOutcome) -> LatencyResult {
    let percentiles_ns = t.latency.as_ref().and_then(Percentiles::of);
    LatencyResult { lost: t.offered.saturating_sub(t.received), percentiles_ns, trial: t }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_line_parses() {
        Args::command().debug_assert();
        let a = Args::try_parse_from(["torii-bench", "--frame-size", "imix", "--baseline", "io-fwd,nftables"]).unwrap();
        assert_eq!((a.frame_size, a.baseline), (FrameSize(None), vec![Baseline::IoFwd, Baseline::Nftables]));
        let a = Args::try_parse_from(["torii-bench", "--frame-size", "128", "--churn", "identical"]).unwrap();
        assert_eq!((a.frame_size, a.churn), (FrameSize(Some(128)), Churn::Identical));
        assert!(Args::try_parse_from(["torii-bench", "--frame-size", "big"]).is_err());
        let a = Args::try_parse_from(["torii-bench", "--families", "ipv4,ipv6", "--topology", "two-armed"]).unwrap();
        assert_eq!((a.families, a.topology), (vec![Family::Ipv4, Family::Ipv6], Topology::TwoArmed));
        let a = Args::try_parse_from(["torii-bench", "--family", "ipv6"]).unwrap();
        assert_eq!((a.families, a.topology), (vec![Family::Ipv6], Topology::OneArmed));
    }
}
