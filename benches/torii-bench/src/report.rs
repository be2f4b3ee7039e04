//! Results as data (the JSON file) and as a table (stdout).
//!
//! Rates are given two ways: `*_offered_pps` counts client requests per second, what the
//! generator offers; `*_dut_pps` counts frames the device under test forwards per
//! second, requests and replies together (twice as many: one-armed, every request comes
//! back through the device as the endpoint's reply).

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::search::{Bounds, Point};
use crate::traffic::TrialOutcome;

/// Version of the JSON layout.
pub const SCHEMA: u32 = 2;

/// The whole result file.
#[derive(Debug, Serialize)]
pub struct Report {
    /// "torii-bench".
    pub tool: &'static str,
    /// Layout version ([`SCHEMA`]).
    pub schema: u32,
    /// torii-bench's version.
    pub version: &'static str,
    /// When the run started, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// How the run was set up.
    pub setup: serde_json::Value,
    /// One entry per flow count.
    pub runs: Vec<Run>,
    /// Frames that failed a check, over the whole run.
    pub bad_frames: u64,
    /// True when every check passed (no bad frame, every warm-up completed).
    pub ok: bool,
}

/// The machine the figures come from.
#[derive(Debug, Serialize)]
pub struct Machine {
    /// `lscpu`'s model name (from /proc/cpuinfo).
    pub cpu_model: String,
    /// CPUs of the machine.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// DPDK's version string.
    pub dpdk: String,
}

impl Machine {
    /// Reads what describes this machine.
    pub fn detect(dpdk: String) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
        // Not available_parallelism: EAL has pinned this process to one CPU.
        let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
        Self { cpu_model, cpus, kernel, dpdk }
    }
}

/// Results for one flow count.
#[derive(Debug, Serialize)]
pub struct Run {
    /// What was measured: "throughput" (requests/s through established flows) or
    /// "connections" (new TCP connections/s, RFC 8219 § 7: handshake and RST).
    pub test: &'static str,
    /// Transport protocol ("udp", "tcp").
    pub protocol: &'static str,
    /// IP family ("ipv4", "ipv6").
    pub ip: &'static str,
    /// Client flows.
    pub flows: u32,
    /// Frame size on the wire, FCS included ("64" … "1518"), or "imix".
    pub frame_size: String,
    /// One entry per device under test.
    pub duts: Vec<DutResult>,
}

impl Run {
    /// The protocol as labels show it: "udp", or "udp/ipv6" for IPv6.
    pub fn protocol_label(&self) -> String {
        if self.ip == "ipv4" {
            self.protocol.to_string()
        } else {
            format!("{}/{}", self.protocol, self.ip)
        }
    }
}

/// Results of one device for one flow count.
#[derive(Debug, Serialize)]
pub struct DutResult {
    /// "torii" or "io-fwd".
    pub dut: &'static str,
    /// The warm-up trials (every flow's first frames; the last one lossless).
    pub warmup: Vec<TrialOutcome>,
    /// Median NDR over the searches, client requests/s.
    pub ndr_offered_pps: Option<f64>,
    /// Median PDR over the searches, client requests/s.
    pub pdr_offered_pps: Option<f64>,
    /// Median NDR, frames the device forwarded per second (both directions).
    pub ndr_dut_pps: Option<f64>,
    /// Median PDR, frames the device forwarded per second (both directions).
    pub pdr_dut_pps: Option<f64>,
    /// Whether the NDR was found at the generator's maximum (a lower bound, not a limit
    /// of the device).
    pub ndr_at_generator_max: bool,
    /// The searches.
    pub searches: Vec<SearchResult>,
    /// The latency trial (at a fraction of NDR, or of PDR where no NDR was found), or the
    /// fixed-rate trial.
    pub latency: Option<LatencyResult>,
    /// What the latency trial's rate is a fraction of: "NDR" or "PDR" (`None` for a
    /// fixed-rate trial or no trial).
    pub latency_basis: Option<&'static str>,
}

impl DutResult {
    /// A device's result with its warm-up done and nothing measured yet.
    pub fn new(dut: &'static str, warmup: Vec<TrialOutcome>) -> Self {
        Self {
            dut,
            warmup,
            ndr_offered_pps: None,
            pdr_offered_pps: None,
            ndr_dut_pps: None,
            pdr_dut_pps: None,
            ndr_at_generator_max: false,
            searches: Vec::new(),
            latency: None,
            latency_basis: None,
        }
    }
}

/// One NDR/PDR search.
#[derive(Debug, Serialize)]
pub struct SearchResult {
    /// NDR bounds, client requests/s.
    pub ndr: Bounds,
    /// PDR bounds, client requests/s.
    pub pdr: Bounds,
    /// The trials, in order.
    pub trials: Vec<TrialOutcome>,
    /// The search's view of them.
    pub points: Vec<Point>,
}

/// One trial with every reply's latency recorded.
#[derive(Debug, Serialize)]
pub struct LatencyResult {
    /// The trial.
    pub trial: TrialOutcome,
    /// Lost requests (offered − received).
    pub lost: u64,
    /// Percentiles of the round trip (request and reply through the device), ns.
    pub percentiles_ns: Option<Percentiles>,
}

/// Latency percentiles, ns (HDR histogram, 3 significant digits).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub mean: f64,
    /// 50th percentile.
    pub p50: u64,
    /// 90th.
    pub p90: u64,
    /// 99th.
    pub p99: u64,
    /// 99.9th.
    pub p99_9: u64,
    /// 99.99th.
    pub p99_99: u64,
    /// Largest.
    pub max: u64,
}

impl Percentiles {
    /// From a histogram (`None` when it is empty).
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| Self {
            count: h.len(),
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p99_9: h.value_at_quantile(0.999),
            p99_99: h.value_at_quantile(0.9999),
            max: h.max(),
        })
    }
}

fn mpps(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.3}", v / 1e6))
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

/// The summary table printed on stdout.
pub fn table(report: &Report, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{title}");
    let _ = writeln!(
        s,
        "CPU: {} ({} CPUs), kernel {}, {}",
        report.machine.cpu_model, report.machine.cpus, report.machine.kernel, report.machine.dpdk
    );
    let _ = writeln!(
        s,
        "{:>8} {:>6} {:>15} | {:>9} {:>9} | {:>9} {:>9} | {:>8} | latency µs at {:>9}: {:>6} {:>6} {:>7} {:>7}",
        "",
        "flows",
        "device",
        "NDR Mreq",
        "PDR Mreq",
        "NDR Mfps",
        "PDR Mfps",
        "vs io-fwd",
        "Mreq/s",
        "p50",
        "p99",
        "p99.9",
        "max"
    );
    for run in &report.runs {
        let base = run.duts.iter().find(|d| d.dut == "io-fwd").and_then(|d| d.ndr_offered_pps);
        for d in &run.duts {
            let ratio = match (d.ndr_offered_pps, base) {
                (Some(v), Some(b)) if b > 0.0 => format!("{:.1} %", 100.0 * v / b),
                _ => "-".into(),
            };
            let (at, lat) = match &d.latency {
                Some(l) => (
                    mpps(Some(l.trial.offered_pps())),
                    l.percentiles_ns.map_or_else(
                        || "no samples".into(),
                        |p| format!("{:>6} {:>6} {:>7} {:>7}", us(p.p50), us(p.p99), us(p.p99_9), us(p.max)),
                    ),
                ),
                None => ("-".into(), "-".into()),
            };
            let star = if d.ndr_at_generator_max { "*" } else { " " };
            let _ = writeln!(
                s,
                "{:>8} {:>6} {:>15} | {:>8}{star} {:>9} | {:>9} {:>9} | {:>9} | latency µs at {at:>9}: {lat}",
                if run.test == "connections" { format!("{} cps", run.protocol_label()) } else { run.protocol_label() },
                run.flows,
                d.dut,
                mpps(d.ndr_offered_pps),
                mpps(d.pdr_offered_pps),
                mpps(d.ndr_dut_pps),
                mpps(d.pdr_dut_pps),
                ratio,
            );
        }
    }
    let _ = writeln!(
        s,
        "Mreq: client requests/s offered (cps rows: new TCP connections/s, each SYN, SYN-ACK, ACK and RST); \
         Mfps: frames/s the device forwarded (request + reply; cps: 4 per connection); \
         * = reached the generator's maximum (a lower bound). Latency: round trip through the device twice \
         (cps: SYN to RST)."
    );
    let _ = writeln!(s, "checks: {} bad frame(s); {}", report.bad_frames, if report.ok { "OK" } else { "FAILED" });
    s
}
