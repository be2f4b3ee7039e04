//! torii-bench: measures torii-gateway end to end on a kernel-free DPDK pipe, against
//! testpmd's io forwarding on the same pipe and core, in one run. See the crate docs
//! (`src/lib.rs`) and docs/benchmarking.md.
//!
//! ```text
//! torii-bench --flows 1000,60000 --trial-s 10 --out bench.json      # NDR/PDR + latency
//! torii-bench --flows 1000 --fixed-rate 20000 --trial-s 3           # one trial each (smoke)
//! ```

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use torii_bench::dut::{self, Memory, Proc};
use torii_bench::plan::{Dut, Plan, Protocol};
use torii_bench::report::{self, DutResult, LatencyResult, Machine, Percentiles, Report, Run, SearchResult};
use torii_bench::search::{median, Point, Search, SearchConfig};
use torii_bench::traffic::{Generator, Link, TrialOutcome, TrialSpec};
use torii_bench::vhost;
use torii_dpdk::mempool::DEFAULT_DATA_ROOM;
use torii_dpdk::{Eal, Mempool};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Baseline {
    /// testpmd's io forwarding on its own net_virtio_user port.
    IoFwd,
    /// No baseline (torii only).
    None,
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

/// Line-rate benchmark of torii-gateway: NDR/PDR search, latency, io-fwd baseline.
#[derive(Debug, Parser)]
#[command(version, about, args_override_self = true)]
struct Args {
    /// Transport protocols to measure, each a run of its own (comma-separated). TCP flows
    /// are opened with a handshake through the gateway during the warm-up.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "udp")]
    protocols: Vec<Protocol>,
    /// Client flow counts to measure, each a run of its own (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    flows: Vec<u32>,
    /// Services (VIPs) the flows are spread over.
    #[arg(long, default_value_t = 1)]
    services: u32,
    /// Ready endpoints per Service.
    #[arg(long, default_value_t = 4)]
    endpoints: u32,
    /// Frame size on the wire, FCS included (64..=1518).
    #[arg(long, default_value_t = 64)]
    frame_size: usize,
    /// Length of each search trial, seconds (RFC 2544 asks 60; CSIT uses 10 and shorter).
    #[arg(long, default_value_t = 10.0)]
    trial_s: f64,
    /// Searches per device and flow count (alternating trial by trial); medians reported.
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Relative width at which a search stops.
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
    /// Latency trial's rate as a fraction of NDR.
    #[arg(long, default_value_t = 0.5)]
    latency_fraction: f64,
    /// First warm-up attempt's rate, requests/s (each further attempt halves it).
    #[arg(long, default_value_t = 50_000.0)]
    warmup_pps: f64,
    /// Skip the search: one trial per device at this rate (requests/s), latency recorded.
    #[arg(long)]
    fixed_rate: Option<f64>,
    /// Baseline measured in the same run.
    #[arg(long, value_enum, default_value_t = Baseline::IoFwd)]
    baseline: Baseline,
    /// CPU of torii-bench's generator (its only lcore).
    #[arg(long, default_value_t = 0)]
    bench_cpu: usize,
    /// CPU of the device's forwarding core (the gateway's worker, testpmd's forwarding lcore).
    #[arg(long, default_value_t = 1)]
    dut_cpu: usize,
    /// Memory of the DPDK processes.
    #[arg(long, value_enum, default_value_t = MemoryArg::Auto)]
    memory: MemoryArg,
    /// Check IPv4 and UDP checksums on one received frame in this many.
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
}

impl Duts {
    /// Lets `dut` have the forwarding core and freezes the other.
    fn select(&mut self, dut: Dut) -> Result<()> {
        match dut {
            Dut::Torii => {
                if let Some(t) = &self.testpmd {
                    t.freeze();
                }
                self.gateway.thaw();
            }
            Dut::IoFwd => {
                self.gateway.freeze();
                if let Some(t) = &self.testpmd {
                    t.thaw();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        self.gateway.check_alive()?;
        if let Some(t) = &mut self.testpmd {
            t.check_alive()?;
        }
        Ok(())
    }
}

fn run(args: &Args) -> Result<bool> {
    let started = Instant::now();
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let max_flows = *args.flows.iter().max().context("--flows is empty")?;
    let plans: Vec<Plan> = args
        .protocols
        .iter()
        .flat_map(|&p| args.flows.iter().map(move |&f| Plan::new(p, f, args.services, args.endpoints, args.frame_size)))
        .collect::<Result<_, _>>()?;
    let memory = match args.memory {
        MemoryArg::Auto => Memory::choose(600 << 20),
        MemoryArg::Hugepages => Memory::Hugepages,
        MemoryArg::NoHuge => Memory::NoHuge,
    };
    let baseline = args.baseline == Baseline::IoFwd;
    let pid = std::process::id();
    let workdir = args.workdir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("torii-bench-{pid}")));
    let _ = std::fs::remove_dir_all(&workdir);
    std::fs::create_dir_all(workdir.join("manifests")).with_context(|| format!("create {}", workdir.display()))?;
    let shm_dir = format!("/dev/shm/torii-bench-{pid}");
    let socks = [workdir.join("torii.sock"), workdir.join("io-fwd.sock")];
    eprintln!(
        "torii-bench: work dir {}; memory {memory:?}; generator on CPU {}, devices on CPU {}",
        workdir.display(),
        args.bench_cpu,
        args.dut_cpu
    );

    // Our EAL: one lcore, one net_vhost server port per device.
    let sock_paths: Vec<&std::path::Path> =
        socks.iter().take(if baseline { 2 } else { 1 }).map(PathBuf::as_path).collect();
    let eal = Eal::builder()
        .args(vhost::eal_args(&format!("torii-bench-{pid}"), args.bench_cpu, &sock_paths, 1, memory))
        .init()
        .context("EAL")?;
    let _ = std::fs::remove_dir(eal.runtime_dir());
    let pool = Mempool::new(&eal, "bench", 16383, 256, DEFAULT_DATA_ROOM, None).context("mempool")?;
    let open = |name: &str, dut: Dut| -> Result<Link> {
        let port = vhost::open_port(&eal, name, &pool, 1).with_context(|| format!("port {name}"))?;
        Ok(Link::new(dut, port, max_flows)?)
    };
    let mut torii_link = open("net_vhost0", Dut::Torii)?;
    let mut base_link = if baseline { Some(open("net_vhost1", Dut::IoFwd)?) } else { None };

    // The devices.
    let manifests = workdir.join("manifests");
    std::fs::write(
        manifests.join("bench.yaml"),
        plans.iter().max_by_key(|p| p.flows).map(Plan::manifests).unwrap_or_default(),
    )?;
    let gw_eal = if memory == Memory::NoHuge { memory.eal_args() } else { Vec::new() };
    let config = workdir.join("gateway.toml");
    let biggest = Plan::new(args.protocols[0], max_flows, args.services, args.endpoints, args.frame_size)?;
    std::fs::write(
        &config,
        biggest.gateway_config(
            &shm_dir,
            &manifests.display().to_string(),
            &socks[0].display().to_string(),
            args.dut_cpu,
            &gw_eal,
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
        let cmd = dut::testpmd_command(&args.testpmd_bin, &socks[1], args.bench_cpu, args.dut_cpu, memory);
        eprintln!("torii-bench: baseline: {cmd:?}");
        Some(Proc::spawn("testpmd", cmd, &workdir.join("testpmd.log"))?)
    } else {
        None
    };
    let mut duts = Duts { gateway, _control: control, testpmd };
    wait_link(&torii_link, &mut duts.gateway)?;
    if let (Some(l), Some(t)) = (&base_link, &mut duts.testpmd) {
        wait_link(l, t)?;
    }
    duts.select(Dut::Torii)?;
    eprintln!("torii-bench: devices connected after {:.1} s", started.elapsed().as_secs_f64());

    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let say = |line: String| pb.suspend(|| eprintln!("{line}"));

    let mut pool = Some(pool);
    let mut runs = Vec::new();
    let mut all_ok = true;
    let mut bad_frames = 0;
    let trial_len = Duration::from_secs_f64(args.trial_s);
    for plan in &plans {
        let mut gen = Generator::new(*plan, pool.take().context("pool")?, args.checksum_every);
        let mut links: Vec<&mut Link> = vec![&mut torii_link];
        if let Some(l) = base_link.as_mut() {
            links.push(l);
        }
        let mut results: Vec<DutResult> = Vec::new();
        // Warm-up: every flow's first frames, until a pass over all flows loses none.
        for link in links.iter_mut() {
            duts.select(link.dut)?;
            // Each attempt sends only the flows not answered yet, at half the rate of the
            // one before (a busy machine loses frames at any rate).
            let mut rate = args.warmup_pps;
            let mut warmup = Vec::new();
            gen.reset_answered();
            for attempt in 1..=WARMUP_ATTEMPTS {
                pb.set_message(format!("[{}] {}: warm-up {attempt}", plan.tag(), link.dut.name()));
                let missing = f64::from(plan.flows - gen.answered());
                let d = Duration::from_secs_f64((missing / rate).clamp(0.5, 5.0));
                let spec = TrialSpec { rate_pps: Some(rate), duration: d, latency: false, unanswered_only: true };
                let t = gen.trial(link, spec, &mut |_| pb.tick());
                rate = (rate / 2.0).max(1000.0);
                say(format!(
                    "[{}] {} warm-up {attempt}: {} sent, {} back, {} ARP answered; {}/{} flows answered{}",
                    plan.tag(),
                    link.dut.name(),
                    t.offered,
                    t.received,
                    t.arp_answered,
                    gen.answered(),
                    plan.flows,
                    if t.bad > 0 { format!(", {} bad: {:?}", t.bad, t.examples) } else { String::new() }
                ));
                bad_frames += t.bad;
                warmup.push(t);
                if gen.answered() == plan.flows {
                    break;
                }
                if attempt == WARMUP_ATTEMPTS {
                    all_ok = false;
                    say(format!(
                        "[{}] {}: warm-up FAILED: {} flows never answered",
                        plan.tag(),
                        link.dut.name(),
                        plan.flows - gen.answered()
                    ));
                }
            }
            results.push(DutResult {
                dut: link.dut.name(),
                warmup,
                ndr_offered_pps: None,
                pdr_offered_pps: None,
                ndr_dut_pps: None,
                pdr_dut_pps: None,
                ndr_at_generator_max: false,
                searches: Vec::new(),
                latency: None,
            });
        }

        if let Some(rate) = args.fixed_rate {
            for (k, link) in links.iter_mut().enumerate() {
                duts.select(link.dut)?;
                let t = timed_trial(&mut gen, link, &pb, plan, "fixed rate", Some(rate), trial_len, true);
                bad_frames += t.bad;
                all_ok &= t.bad == 0;
                say(describe(plan, link.dut, "fixed rate", &t));
                results[k].latency = Some(latency_result(t));
            }
        } else {
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
                        duts.select(link.dut)?;
                        let label = format!("search {}/{} trial {}", repeat + 1, args.repeats, searches[k].1.len() + 1);
                        let t = timed_trial(&mut gen, link, &pb, plan, &label, Some(rate), trial_len, false);
                        say(describe(plan, link.dut, &label, &t));
                        bad_frames += t.bad;
                        all_ok &= t.bad == 0;
                        searches[k].0.record(Point {
                            offered_pps: t.offered_pps(),
                            received_pps: t.received_pps(),
                            forwarded_pps: t.forwarded_pps(),
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
            for r in &mut results {
                let ndrs: Vec<f64> = r.searches.iter().map(|s| s.ndr.lower_pps).collect();
                let pdrs: Vec<f64> = r.searches.iter().map(|s| s.pdr.lower_pps).collect();
                r.ndr_offered_pps = median(&ndrs);
                r.pdr_offered_pps = median(&pdrs);
                r.ndr_dut_pps = r.ndr_offered_pps.map(|v| 2.0 * v);
                r.pdr_dut_pps = r.pdr_offered_pps.map(|v| 2.0 * v);
                r.ndr_at_generator_max = r.searches.iter().any(|s| s.ndr.upper_pps.is_none() && s.ndr.lower_pps > 0.0);
            }
            // Latency at a fraction of each device's NDR.
            for (k, link) in links.iter_mut().enumerate() {
                let Some(ndr) = results[k].ndr_offered_pps.filter(|&v| v > 0.0) else { continue };
                duts.select(link.dut)?;
                let label = format!("latency at {:.0} % of NDR", args.latency_fraction * 100.0);
                let t =
                    timed_trial(&mut gen, link, &pb, plan, &label, Some(ndr * args.latency_fraction), trial_len, true);
                say(describe(plan, link.dut, &label, &t));
                bad_frames += t.bad;
                all_ok &= t.bad == 0;
                results[k].latency = Some(latency_result(t));
            }
        }
        drop(links);
        pool = Some(gen.into_pool());
        runs.push(Run {
            protocol: plan.protocol.name(),
            flows: plan.flows,
            frame_size: plan.frame_size,
            duts: results,
        });
    }
    pb.finish_and_clear();
    duts.select(Dut::Torii)?;
    let gateway_tail = dut::tail(duts.gateway.log(), 5);
    drop(duts);
    let _ = std::fs::remove_dir_all(&shm_dir);

    let report = Report {
        tool: "torii-bench",
        schema: report::SCHEMA,
        version: env!("CARGO_PKG_VERSION"),
        started_unix_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::detect(Eal::version()),
        setup: serde_json::json!({
            "topology": "one-armed: torii-bench net_vhost <-> device net_virtio_user",
            "protocols": args.protocols.iter().map(|p| p.name()).collect::<Vec<_>>(), "ip": "ipv4",
            "services": args.services, "endpoints": args.endpoints, "frame_size": args.frame_size,
            "memory": memory, "bench_cpu": args.bench_cpu, "dut_cpu": args.dut_cpu,
            "trial_s": args.trial_s, "repeats": args.repeats, "precision": args.precision,
            "pdr_loss": args.pdr_loss, "max_pps": args.max_pps, "fixed_rate": args.fixed_rate,
            "latency_fraction": args.latency_fraction, "baseline": baseline.then_some("testpmd io-fwd"),
            "checksum_every": args.checksum_every,
        }),
        runs,
        bad_frames,
        ok: all_ok && bad_frames == 0,
    };
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(&args.out, json + "\n").with_context(|| format!("write {}", args.out.display()))?;
    let title = format!(
        "torii-bench: {}-byte {}/IPv4, one-armed vhost-user pipe, trials {} s, {} search(es); {:.0} s in all; results in {}",
        args.frame_size,
        args.protocols.iter().map(|p| p.name().to_uppercase()).collect::<Vec<_>>().join(" and "),
        args.trial_s,
        args.repeats,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    print!("{}", report::table(&report, &title));
    if !report.ok {
        eprintln!("torii-bench: gateway log tail:\n{gateway_tail}");
    }
    Ok(report.ok)
}

fn wait_link(link: &Link, proc: &mut Proc) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        proc.check_alive()?;
        if vhost::wait_link(&link.port, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} did not connect within 30 s; its log:\n{}", link.dut.name(), dut::tail(proc.log(), 25));
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn timed_trial(
    gen: &mut Generator,
    link: &mut Link,
    pb: &ProgressBar,
    plan: &Plan,
    label: &str,
    rate: Option<f64>,
    duration: Duration,
    latency: bool,
) -> TrialOutcome {
    let head = format!(
        "[{}] {} {label}: {} Mreq/s",
        plan.tag(),
        link.dut.name(),
        rate.map_or("max".into(), |r| format!("{:.3}", r / 1e6))
    );
    gen.trial(link, TrialSpec { rate_pps: rate, duration, latency, unanswered_only: false }, &mut |t| {
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

fn describe(plan: &Plan, dut: Dut, label: &str, t: &TrialOutcome) -> String {
    format!(
        "[{}] {} {label}: offered {:.3} Mreq/s, back {:.3}, loss {:.4} % ({} lost, {} refused by the device's ring){}{}",
        plan.tag(),
        dut.name(),
        t.offered_pps() / 1e6,
        t.received_pps() / 1e6,
        100.0 * t.loss_ratio(),
        t.offered.saturating_sub(t.received),
        t.refused + t.reflect_refused,
        if t.generator_limited && t.target_pps.is_some() { " [generator short of the rate]" } else { "" },
        if t.bad > 0 { format!("; {} BAD: {:?}", t.bad, t.examples) } else { String::new() },
    )
}

fn latency_result(t: TrialOutcome) -> LatencyResult {
    let percentiles_ns = t.latency.as_ref().and_then(Percentiles::of);
    LatencyResult { lost: t.offered.saturating_sub(t.received), percentiles_ns, trial: t }
}
