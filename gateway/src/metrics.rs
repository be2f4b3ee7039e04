//! The gateway's HTTP endpoint: Prometheus metrics (`GET /metrics`, text exposition format
//! 0.0.4) and health (`GET /healthz`), served by hyper on a thread of its own (a
//! single-threaded tokio runtime), never on a worker.
//!
//! # Where the numbers come from
//!
//! Workers own their counters as plain integers and copy them, about once a second, into
//! their [`WorkerReport`] slot (a mutex the worker only `try_lock`s, so a scrape never
//! stalls the packet path). A scrape takes a [`Snapshot`] of every slot and renders it;
//! the figures are therefore up to about a second old.
//!
//! # Metrics (all prefixed `torii_gateway_`)
//!
//! - per worker (`worker="0"`): every [`Counters`](crate::counters::Counters) field as `<name>_total`, drops as
//!   `drops_total{reason}` for every [`DropReason`] (zeros included), `flows` (gauge:
//!   tracked flows), `worker_table_generation` (gauge: the table the worker uses),
//!   `worker_poll_seconds` (histogram: how long its poll passes that carried frames took,
//!   buckets 1 µs × 4^k to 16.4 ms, [`crate::poll_times`]; `_sum` is its busy time, so
//!   its rate is the fraction of the worker's CPU that went to frames);
//! - per front door, summed over workers and labelled `service` (`namespace/name:port`),
//!   `vip`, `protocol` (`TCP`/`UDP`/`SCTP`) and `port`: `frontend_packets_total` and
//!   `frontend_bytes_total` (IPv4 bytes) with `direction` (`original`: client → endpoint,
//!   `reply`), and `frontend_new_flows_total`. Every front door of the current table is
//!   listed, at zero until used; one that left the table with counts is listed until the
//!   workers drop it at their next table switch;
//! - `table_generation` (gauge: the table the gateway holds) and `tables_rejected_total`;
//! - per port (`port`: `interfaces[].name`, `device`: the DPDK device or the kernel
//!   interface), from the driver, about once a second: what happened to frames the pipeline
//!   never saw ([`PortReport`]). `port_link_up` and `port_link_speed_mbps` (gauges),
//!   `port_rx_packets_total`, `port_tx_packets_total`, `port_rx_missed_total` (the receive
//!   ring or queue was full: DPDK `imissed`, AF_PACKET `tp_drops` of every worker's socket),
//!   `port_rx_nombuf_total` (DPDK: no mbuf to receive into), `port_rx_errors_total` and
//!   `port_tx_errors_total`, and `port_queue_drops_total{queue}` per worker's queue (DPDK
//!   `q_errors`, AF_PACKET the socket's `tp_drops`).
//!
//! # Health
//!
//! `/healthz` answers `200 ok` when the gateway holds a published table (not the empty one
//! it starts with: a gateway that found only invalid publications forwards nothing), every
//! worker reported within the last [`STALE_AFTER_NS`] and has acknowledged (in the shared state region, once no older
//! table is mapped) the table generation the gateway holds, once that table has been held for
//! [`ADOPT_GRACE_NS`], and no port reports its link down; otherwise `503` and what is wrong
//! (a stuck worker, one still on an older table, a port whose link is down).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};

use crate::counters::{DropReason, FrontendCount};
use crate::poll_times::BUCKETS_NS;
use crate::table::{layout, Protocol, Table};
use crate::worker::{ReportSlot, TableWatcher, WorkerReport};

/// A worker that has not reported for this long (ns) is unhealthy (it reports every second).
pub const STALE_AFTER_NS: u64 = 5_000_000_000;

/// How long (ns) workers may take to adopt a newly held table before health says they lag
/// (they adopt it at their next burst boundary, normally within microseconds).
pub const ADOPT_GRACE_NS: u64 = 1_000_000_000;

/// One port's device counters and link state, as its driver reports them: drops and errors
/// before the pipeline saw a frame or after it let one go. Counters count from the start
/// of the gateway; a field a driver does not know stays at zero (`None` for the link).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortReport {
    /// The port's name (`interfaces[].name`).
    pub name: String,
    /// The device: the DPDK ethdev name, or the kernel interface under AF_PACKET.
    pub device: String,
    /// Whether the link is up (DPDK `rte_eth_link_get_nowait`; AF_PACKET the interface's
    /// `operstate`); `None` when unknown.
    pub link_up: Option<bool>,
    /// Link speed in Mb/s; 0 when unknown.
    pub speed_mbps: u32,
    /// Frames the device received (DPDK `ipackets`; AF_PACKET the kernel's `rx_packets`).
    pub rx_packets: u64,
    /// Frames the device sent (DPDK `opackets`; AF_PACKET the kernel's `tx_packets`).
    pub tx_packets: u64,
    /// Frames dropped because a receive ring or queue was full: DPDK `imissed`; AF_PACKET
    /// the `tp_drops` of every worker's socket (`PACKET_STATISTICS`).
    pub rx_missed: u64,
    /// DPDK `rx_nombuf`: receive mbuf allocations that failed (the pool ran dry).
    pub rx_nombuf: u64,
    /// Receive errors (DPDK `ierrors`; AF_PACKET the kernel's `rx_errors`).
    pub rx_errors: u64,
    /// Transmit errors (DPDK `oerrors`; AF_PACKET the kernel's `tx_errors`).
    pub tx_errors: u64,
    /// Drops per queue, i.e. per worker: DPDK `q_errors`, AF_PACKET the socket's `tp_drops`.
    pub queue_drops: Vec<u64>,
}

/// The ports' reports, refreshed by the gateway's main thread, shared with the metrics thread.
pub type PortSlot = Arc<Mutex<Vec<PortReport>>>;

/// Everything the endpoint reads: the workers' slots and the table watcher.
pub struct Source {
    /// One slot per worker, by worker index.
    pub reports: Vec<ReportSlot>,
    /// The gateway's table watcher (current table, rejected publications).
    pub watcher: Arc<TableWatcher>,
    /// The gateway's clock origin (as the workers').
    pub epoch: Instant,
    /// The ports' device counters.
    pub ports: PortSlot,
}

/// A consistent copy of what the endpoint reports.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The workers' reports, by worker index.
    pub workers: Vec<WorkerReport>,
    /// The table the gateway holds.
    pub table: Arc<Table>,
    /// Publications the gateway rejected as invalid.
    pub tables_rejected: u64,
    /// The generation each worker acknowledged in the state region, by worker index.
    pub acked: Vec<u64>,
    /// How long the gateway has held `table`, ns.
    pub table_held_ns: u64,
    /// When the snapshot was taken, ns since the clock origin.
    pub now_ns: u64,
    /// The ports' device counters, by port index.
    pub ports: Vec<PortReport>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source").field("workers", &self.reports.len()).finish()
    }
}

impl Source {
    /// Copies every worker's last report (holding each lock only for the copy).
    pub fn snapshot(&self) -> Snapshot {
        let workers = self.reports.iter().map(|r| r.lock().map(|r| r.clone()).unwrap_or_default()).collect();
        Snapshot {
            workers,
            table: self.watcher.handle.load(),
            tables_rejected: self.watcher.rejected.load(Ordering::Relaxed),
            acked: (0..self.reports.len()).map(|w| self.watcher.region.acked(w)).collect(),
            table_held_ns: self.watcher.handle.held_for().as_nanos() as u64,
            now_ns: self.epoch.elapsed().as_nanos() as u64,
            ports: self.ports.lock().map(|p| p.clone()).unwrap_or_default(),
        }
    }
}

/// A front door as labelled in the metrics, ordered as the table sorts front doors.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct DoorKey {
    addr: [u8; 16],
    protocol: u8,
    port: u16,
}

/// Declares the metric family `torii_gateway_{name}` of type `kind` in `out`.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP torii_gateway_{name} {help}\n# TYPE torii_gateway_{name} {kind}");
}

/// Renders `s` in the Prometheus text exposition format (version 0.0.4).
pub fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(4096);
    // Per worker: every counter, one family each.
    let rows: Vec<Vec<(&str, &str, u64)>> = s
        .workers
        .iter()
        .map(|r| {
            let mut row = Vec::new();
            r.counters.for_each(|name, help, value| row.push((name, help, value)));
            row
        })
        .collect();
    if let Some(first) = rows.first() {
        for (k, &(name, help, _)) in first.iter().enumerate() {
            family(&mut out, &format!("{name}_total"), "counter", help);
            for (w, row) in rows.iter().enumerate() {
                let _ = writeln!(out, "torii_gateway_{name}_total{{worker=\"{w}\"}} {}", row[k].2);
            }
        }
    }
    family(&mut out, "drops_total", "counter", "Frames dropped, by reason.");
    for (w, r) in s.workers.iter().enumerate() {
        for reason in DropReason::ALL {
            let _ = writeln!(
                out,
                "torii_gateway_drops_total{{worker=\"{w}\",reason=\"{}\"}} {}",
                reason.name(),
                r.counters.drops_of(reason)
            );
        }
    }
    family(&mut out, "flows", "gauge", "Flows in the worker's connection tracking table.");
    for (w, r) in s.workers.iter().enumerate() {
        let _ = writeln!(out, "torii_gateway_flows{{worker=\"{w}\"}} {}", r.flows);
    }
    family(&mut out, "worker_table_generation", "gauge", "Generation of the table the worker uses.");
    for (w, r) in s.workers.iter().enumerate() {
        let g = r.table.as_ref().map_or(0, |t| t.generation());
        let _ = writeln!(out, "torii_gateway_worker_table_generation{{worker=\"{w}\"}} {g}");
    }
    render_poll_times(&mut out, &s.workers);
    family(&mut out, "table_generation", "gauge", "Generation of the table the gateway holds.");
    let _ = writeln!(out, "torii_gateway_table_generation {}", s.table.generation());
    family(&mut out, "tables_rejected_total", "counter", "Published tables rejected as invalid.");
    let _ = writeln!(out, "torii_gateway_tables_rejected_total {}", s.tables_rejected);

    render_ports(&mut out, &s.ports);

    // Per front door, summed over workers by (address, protocol, port).
    let doors = frontend_totals(s);
    family(&mut out, "frontend_packets_total", "counter", "Packets forwarded through the front door.");
    for (labels, c) in &doors {
        let _ = writeln!(
            out,
            "torii_gateway_frontend_packets_total{{{labels},direction=\"original\"}} {}",
            c.packets_original
        );
        let _ =
            writeln!(out, "torii_gateway_frontend_packets_total{{{labels},direction=\"reply\"}} {}", c.packets_reply);
    }
    family(&mut out, "frontend_bytes_total", "counter", "IPv4 bytes forwarded through the front door.");
    for (labels, c) in &doors {
        let _ =
            writeln!(out, "torii_gateway_frontend_bytes_total{{{labels},direction=\"original\"}} {}", c.bytes_original);
        let _ = writeln!(out, "torii_gateway_frontend_bytes_total{{{labels},direction=\"reply\"}} {}", c.bytes_reply);
    }
    family(&mut out, "frontend_new_flows_total", "counter", "Flows created through the front door.");
    for (labels, c) in &doors {
        let _ = writeln!(out, "torii_gateway_frontend_new_flows_total{{{labels}}} {}", c.new_flows);
    }
    out
}

/// The workers' poll-pass histograms ([`crate::poll_times`]), in seconds.
fn render_poll_times(out: &mut String, workers: &[WorkerReport]) {
    family(
        out,
        "worker_poll_seconds",
        "histogram",
        "Duration of the worker's poll passes that carried frames (receive, process, transmit, housekeeping).",
    );
    let name = "torii_gateway_worker_poll_seconds";
    for (w, r) in workers.iter().enumerate() {
        let t = &r.poll_times;
        for le in BUCKETS_NS {
            let _ = writeln!(out, "{name}_bucket{{worker=\"{w}\",le=\"{}\"}} {}", le as f64 / 1e9, t.at_most(le));
        }
        let _ = writeln!(out, "{name}_bucket{{worker=\"{w}\",le=\"+Inf\"}} {}", t.passes());
        let _ = writeln!(out, "{name}_sum{{worker=\"{w}\"}} {}", t.busy_ns() as f64 / 1e9);
        let _ = writeln!(out, "{name}_count{{worker=\"{w}\"}} {}", t.passes());
    }
}

/// A per-port counter family: name, help, and how to read it.
type PortCounter = (&'static str, &'static str, fn(&PortReport) -> u64);

/// The per-port families of [`PortReport`] (see the module documentation).
fn render_ports(out: &mut String, ports: &[PortReport]) {
    if ports.is_empty() {
        return;
    }
    let labels = |p: &PortReport| format!("port=\"{}\",device=\"{}\"", escape(&p.name), escape(&p.device));
    family(out, "port_link_up", "gauge", "Whether the port's link is up (1) or down (0); absent when unknown.");
    for p in ports {
        if let Some(up) = p.link_up {
            let _ = writeln!(out, "torii_gateway_port_link_up{{{}}} {}", labels(p), u8::from(up));
        }
    }
    family(out, "port_link_speed_mbps", "gauge", "The port's link speed in Mb/s (0: unknown).");
    for p in ports {
        let _ = writeln!(out, "torii_gateway_port_link_speed_mbps{{{}}} {}", labels(p), p.speed_mbps);
    }
    let counters: [PortCounter; 6] = [
        ("port_rx_packets_total", "Frames the port's device received.", |p| p.rx_packets),
        ("port_tx_packets_total", "Frames the port's device sent.", |p| p.tx_packets),
        (
            "port_rx_missed_total",
            "Frames dropped before the pipeline because a receive ring or queue was full (DPDK imissed, AF_PACKET tp_drops).",
            |p| p.rx_missed,
        ),
        ("port_rx_nombuf_total", "Receive buffer allocations that failed (DPDK rx_nombuf).", |p| p.rx_nombuf),
        ("port_rx_errors_total", "Receive errors of the port's device.", |p| p.rx_errors),
        ("port_tx_errors_total", "Transmit errors of the port's device.", |p| p.tx_errors),
    ];
    for (name, help, value) in counters {
        family(out, name, "counter", help);
        for p in ports {
            let _ = writeln!(out, "torii_gateway_{name}{{{}}} {}", labels(p), value(p));
        }
    }
    family(
        out,
        "port_queue_drops_total",
        "counter",
        "Frames dropped by one worker's queue of the port (DPDK q_errors, AF_PACKET tp_drops).",
    );
    for p in ports {
        for (q, n) in p.queue_drops.iter().enumerate() {
            let _ = writeln!(out, "torii_gateway_port_queue_drops_total{{{},queue=\"{q}\"}} {n}", labels(p));
        }
    }
}

/// Every front door of the current table (at zero until counted) and every front door a
/// worker has counts for, with its label set and counts summed over workers.
fn frontend_totals(s: &Snapshot) -> Vec<(String, FrontendCount)> {
    frontend_counts(s, labels).into_values().collect()
}

/// What [`frontend_totals`] sums, by front door, with `label(table, front door)` of its
/// first sighting.
fn frontend_counts<L>(
    s: &Snapshot,
    label: impl Fn(&Table, &layout::Frontend) -> L,
) -> BTreeMap<DoorKey, (L, FrontendCount)> {
    let mut doors: BTreeMap<DoorKey, (L, FrontendCount)> = BTreeMap::new();
    let mut visit = |table: &Table, counts: Option<&[FrontendCount]>| {
        for (i, f) in table.frontends().iter().enumerate() {
            let c = counts.and_then(|c| c.get(i)).copied().unwrap_or_default();
            if counts.is_some() && c.is_zero() {
                continue;
            }
            let key = DoorKey { addr: f.addr, protocol: f.protocol, port: f.port.get() };
            let entry = doors.entry(key).or_insert_with(|| (label(table, f), FrontendCount::default()));
            entry.1.add(&c);
        }
    };
    visit(&s.table, None);
    for r in &s.workers {
        if let Some(t) = &r.table {
            visit(t, Some(r.frontends.as_slice()));
        }
    }
    doors
}

/// The per-front-door counts of `s` as the records of the counters file
/// `torii-control status` reads ([`crate::table::stats`]): the front doors the
/// `frontend_*` metrics list, summed over workers, sorted as the table sorts front doors.
pub fn frontend_stats(s: &Snapshot) -> Vec<crate::table::stats::FrontendStat> {
    frontend_counts(s, |_, _| ())
        .into_iter()
        .map(|(k, ((), c))| crate::table::stats::FrontendStat {
            addr: k.addr,
            protocol: k.protocol,
            port: k.port.into(),
            packets_original: c.packets_original.into(),
            bytes_original: c.bytes_original.into(),
            packets_reply: c.packets_reply.into(),
            bytes_reply: c.bytes_reply.into(),
            new_flows: c.new_flows.into(),
            ..Default::default()
        })
        .collect()
}

/// `service="…",vip="…",protocol="…",port="…"` for front door `f` of `table`.
fn labels(table: &Table, f: &layout::Frontend) -> String {
    let service = table.service(f.service.get().wrapping_sub(1)).map_or("", |s| s.name());
    let vip: IpAddr = layout::addr_from16(f.addr);
    let protocol = Protocol::from_number(f.protocol).map_or("unknown", Protocol::as_str);
    format!("service=\"{}\",vip=\"{vip}\",protocol=\"{protocol}\",port=\"{}\"", escape(service), f.port.get())
}

/// A label value escaped as the exposition format requires: `\`, `"` and newlines.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The health verdict of `s`: `Ok(text)` when the gateway holds a published table, and
/// every worker reported recently and (after [`ADOPT_GRACE_NS`]) acknowledged it, else
/// `Err(what is wrong)`.
pub fn health(s: &Snapshot) -> Result<String, String> {
    let want = s.table.generation();
    let mut problems = Vec::new();
    if want == 0 {
        // Generation 0 is the empty table every gateway starts with (`Table::empty`).
        problems.push(format!(
            "no published table adopted: nothing is forwarded ({} publication(s) rejected as invalid)",
            s.tables_rejected
        ));
    }
    for (w, r) in s.workers.iter().enumerate() {
        let acked = s.acked.get(w).copied().unwrap_or(0);
        if r.table.is_none() || s.now_ns.saturating_sub(r.at_ns) > STALE_AFTER_NS {
            problems.push(format!("worker {w} has not reported for over {} s", STALE_AFTER_NS / 1_000_000_000));
        } else if acked != want && s.table_held_ns > ADOPT_GRACE_NS {
            problems.push(format!(
                "worker {w} acknowledged table generation {acked}, the gateway holds {want} (for {} ms)",
                s.table_held_ns / 1_000_000
            ));
        }
    }
    // A port whose link is down forwards nothing; a link the driver cannot tell (`None`) is
    // not held against the gateway.
    for p in s.ports.iter().filter(|p| p.link_up == Some(false)) {
        problems.push(format!("port {} ({}) link is down", p.name, p.device));
    }
    if problems.is_empty() {
        Ok(format!("ok: {} worker(s), table generation {want}\n", s.workers.len()))
    } else {
        Err(problems.join("\n") + "\n")
    }
}

/// The response to one request.
fn respond(source: &Source, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(if method == Method::HEAD { String::new() } else { body })));
        *r.status_mut() = status;
        if let Ok(v) = content_type.parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    };
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET and HEAD\n".into());
    }
    match path {
        "/metrics" => reply(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", render(&source.snapshot())),
        "/healthz" => match health(&source.snapshot()) {
            Ok(text) => reply(StatusCode::OK, TEXT, text),
            Err(text) => reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, text),
        },
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found: try /metrics or /healthz\n".into()),
    }
}

/// The running endpoint: its address and thread.
#[derive(Debug)]
pub struct Server {
    /// The address it listens on (the port the system chose for a `:0` listen).
    pub addr: SocketAddr,
    thread: JoinHandle<()>,
}

impl Server {
    /// Binds `listen` and serves `source` on a new thread (`torii-metrics`) until `stop` is
    /// set (checked every 200 ms).
    ///
    /// # Errors
    /// Binding the address or starting the runtime failed (e.g. the port is in use).
    pub fn start(listen: SocketAddr, source: Arc<Source>, stop: Arc<AtomicBool>) -> io::Result<Self> {
        let std_listener = std::net::TcpListener::bind(listen)?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        let thread = std::thread::Builder::new().name("torii-metrics".into()).spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("metrics endpoint on {addr}: {e}");
                        return;
                    }
                };
                while !stop.load(Ordering::Relaxed) {
                    let Ok(accepted) = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await else {
                        continue;
                    };
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            tracing::warn!("metrics endpoint on {addr}: accept: {e}");
                            continue;
                        }
                    };
                    let source = Arc::clone(&source);
                    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let response = respond(&source, req.method(), req.uri().path());
                        async move { Ok::<_, Infallible>(response) }
                    });
                    tokio::spawn(async move {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                            tracing::debug!("metrics connection: {e}");
                        }
                    });
                }
            });
        })?;
        Ok(Self { addr, thread })
    }

    /// Waits for the thread to end (after `stop` was set).
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::Ipv4Addr;
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;

    use super::*;
    use crate::counters::{Counters, FrontendCounters};
    use crate::poll_times::PollTimes;
    use crate::table::shm::{Mappings, StateRegion};
    use crate::table::{build, BackendSpec, FrontendKind, FrontendSpec, ServiceSpec, Storage, TableSpec};
    use crate::worker::TableHandle;

    /// Generation `generation` with the front doors 203.0.113.10 TCP 80 (`demo/web:http`)
    /// and, `with_dns`, UDP 53 (a name that needs escaping).
    fn table_of(generation: u64, with_dns: bool) -> Table {
        let fe = |port, protocol, service| FrontendSpec {
            addr: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)),
            port,
            protocol,
            kind: FrontendKind::ExternalIp,
            service,
            source_ranges: vec![],
        };
        let mut frontends = vec![fe(80, Protocol::Tcp, 0)];
        if with_dns {
            frontends.push(fe(53, Protocol::Udp, 1));
        }
        let spec = TableSpec {
            frontends,
            services: vec![
                ServiceSpec {
                    name: "demo/web:http".into(),
                    backends: vec![BackendSpec { addr: "10.70.0.11".parse().unwrap(), port: 8080 }],
                    affinity_timeout_s: None,
                    draining: vec![],
                },
                ServiceSpec {
                    name: "kube-system/\"dns\":dns".into(),
                    backends: vec![],
                    affinity_timeout_s: None,
                    draining: vec![],
                },
            ],
        };
        Table::new(Storage::Owned(build(&spec, generation).unwrap())).unwrap()
    }

    fn table(generation: u64) -> Table {
        table_of(generation, true)
    }

    /// Two workers on generation 7; worker 0 counted on the web front door, worker 1 on
    /// both.
    fn snapshot() -> Snapshot {
        let t = Arc::new(table(7));
        // Front doors sort by (address, protocol, port): TCP 80 (6) before UDP 53 (17).
        let report = |w: u64| {
            let mut counters = Counters { rx_frames: 10 + w, new_flows: 1, ..Counters::default() };
            counters.drop(DropReason::NoFrontend);
            let mut frontends = FrontendCounters::default();
            frontends.adopt(&t, &t);
            frontends.new_flow(0);
            frontends.packet(0, true, 60);
            frontends.packet(0, false, 40 + w as usize);
            if w == 1 {
                frontends.packet(1, true, 100);
            }
            // Worker 0: passes of 0.5 µs, 3 µs and 2 ms.
            let mut poll_times = PollTimes::new();
            if w == 0 {
                [500, 3_000, 2_000_000].into_iter().for_each(|ns| poll_times.record(ns));
            }
            WorkerReport { counters, frontends, table: Some(Arc::clone(&t)), flows: 3, poll_times, at_ns: 1_000 }
        };
        Snapshot {
            workers: vec![report(0), report(1)],
            table: t,
            tables_rejected: 2,
            acked: vec![7, 7],
            table_held_ns: 10 * ADOPT_GRACE_NS,
            now_ns: 2_000,
            ports: vec![PortReport {
                name: "tg-front".into(),
                device: "net_virtio_user0".into(),
                link_up: Some(true),
                speed_mbps: 10_000,
                rx_packets: 1_000,
                tx_packets: 990,
                rx_missed: 7,
                rx_nombuf: 3,
                rx_errors: 1,
                tx_errors: 2,
                queue_drops: vec![4, 5],
            }],
        }
    }

    #[test]
    fn text_rendering() {
        let text = render(&snapshot());
        let web = "service=\"demo/web:http\",vip=\"203.0.113.10\",protocol=\"TCP\",port=\"80\"";
        let dns = "service=\"kube-system/\\\"dns\\\":dns\",vip=\"203.0.113.10\",protocol=\"UDP\",port=\"53\"";
        let port = "port=\"tg-front\",device=\"net_virtio_user0\"";
        for line in [
            "# TYPE torii_gateway_rx_frames_total counter".to_string(),
            "torii_gateway_rx_frames_total{worker=\"0\"} 10".into(),
            "torii_gateway_rx_frames_total{worker=\"1\"} 11".into(),
            "torii_gateway_new_flows_total{worker=\"1\"} 1".into(),
            "torii_gateway_drops_total{worker=\"0\",reason=\"no_frontend\"} 1".into(),
            "torii_gateway_drops_total{worker=\"1\",reason=\"unknown_vlan\"} 0".into(),
            "# TYPE torii_gateway_flows gauge".into(),
            "torii_gateway_flows{worker=\"0\"} 3".into(),
            "torii_gateway_worker_table_generation{worker=\"1\"} 7".into(),
            "torii_gateway_table_generation 7".into(),
            "torii_gateway_tables_rejected_total 2".into(),
            format!("torii_gateway_frontend_packets_total{{{web},direction=\"original\"}} 2"),
            format!("torii_gateway_frontend_packets_total{{{web},direction=\"reply\"}} 2"),
            format!("torii_gateway_frontend_bytes_total{{{web},direction=\"original\"}} 120"),
            format!("torii_gateway_frontend_bytes_total{{{web},direction=\"reply\"}} 81"),
            format!("torii_gateway_frontend_new_flows_total{{{web}}} 2"),
            format!("torii_gateway_frontend_packets_total{{{dns},direction=\"original\"}} 1"),
            format!("torii_gateway_frontend_new_flows_total{{{dns}}} 0"),
            "# TYPE torii_gateway_port_rx_missed_total counter".into(),
            format!("torii_gateway_port_link_up{{{port}}} 1"),
            format!("torii_gateway_port_link_speed_mbps{{{port}}} 10000"),
            format!("torii_gateway_port_rx_packets_total{{{port}}} 1000"),
            format!("torii_gateway_port_tx_packets_total{{{port}}} 990"),
            format!("torii_gateway_port_rx_missed_total{{{port}}} 7"),
            format!("torii_gateway_port_rx_nombuf_total{{{port}}} 3"),
            format!("torii_gateway_port_rx_errors_total{{{port}}} 1"),
            format!("torii_gateway_port_tx_errors_total{{{port}}} 2"),
            format!("torii_gateway_port_queue_drops_total{{{port},queue=\"1\"}} 5"),
            "# TYPE torii_gateway_worker_poll_seconds histogram".into(),
            "torii_gateway_worker_poll_seconds_bucket{worker=\"0\",le=\"0.000001\"} 1".into(),
            "torii_gateway_worker_poll_seconds_bucket{worker=\"0\",le=\"0.000004\"} 2".into(),
            "torii_gateway_worker_poll_seconds_bucket{worker=\"0\",le=\"0.001024\"} 2".into(),
            "torii_gateway_worker_poll_seconds_bucket{worker=\"0\",le=\"0.004096\"} 3".into(),
            "torii_gateway_worker_poll_seconds_bucket{worker=\"0\",le=\"+Inf\"} 3".into(),
            "torii_gateway_worker_poll_seconds_sum{worker=\"0\"} 0.0020035".into(),
            "torii_gateway_worker_poll_seconds_count{worker=\"0\"} 3".into(),
            "torii_gateway_worker_poll_seconds_count{worker=\"1\"} 0".into(),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        // Every sample line is `name{labels} value` or `name value` (an integer but for a
        // histogram's sum of seconds), every family declared once.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = l.rsplit_once(' ').unwrap();
            if name.starts_with("torii_gateway_worker_poll_seconds_sum") {
                value.parse::<f64>().unwrap_or_else(|_| panic!("bad sample {l:?}"));
            } else {
                value.parse::<u64>().unwrap_or_else(|_| panic!("bad sample {l:?}"));
            }
        }
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        let families: std::collections::BTreeSet<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(types, families.len());
        assert_eq!(
            text.lines().filter(|l| l.starts_with("torii_gateway_drops_total")).count(),
            2 * DropReason::ALL.len()
        );
    }

    #[test]
    fn front_door_counts_survive_a_table_switch() {
        let (old, new) = (table(1), table(2));
        let mut c = FrontendCounters::default();
        c.adopt(&old, &old);
        c.packet(1, true, 100);
        c.adopt(&old, &new);
        assert_eq!(c.as_slice()[1].bytes_original, 100);
        c.packet(0, false, 40);
        // A table without the UDP front door drops its counts and keeps the web door's; an
        // index out of range is ignored.
        c.adopt(&new, &table_of(3, false));
        c.packet(99, true, 1);
        assert_eq!(c.as_slice().len(), 1);
        assert_eq!((c.as_slice()[0].bytes_reply, c.as_slice()[0].bytes_original), (40, 0));
    }

    #[test]
    fn health_needs_fresh_reports_on_the_current_table() {
        let mut s = snapshot();
        assert_eq!(health(&s), Ok("ok: 2 worker(s), table generation 7\n".into()));
        s.acked[1] = 6;
        assert_eq!(
            health(&s),
            Err("worker 1 acknowledged table generation 6, the gateway holds 7 (for 10000 ms)\n".into())
        );
        // Within the grace after the gateway took the table, adopting it is not lagging.
        s.table_held_ns = ADOPT_GRACE_NS / 2;
        assert!(health(&s).is_ok());
        s.now_ns = STALE_AFTER_NS + 2_000;
        let e = health(&s).unwrap_err();
        assert!(e.starts_with("worker 0 has not reported for over 5 s"), "{e}");
    }

    #[test]
    fn health_needs_every_link_up() {
        let mut s = snapshot();
        let port = |name: &str, link_up| PortReport {
            name: name.into(),
            device: "net_tap0".into(),
            link_up,
            ..Default::default()
        };
        s.ports = vec![port("front", Some(true)), port("back", None)];
        assert!(health(&s).is_ok(), "an unknown link state is not a fault");
        s.ports.push(port("spare", Some(false)));
        assert_eq!(health(&s), Err("port spare (net_tap0) link is down\n".into()));
    }

    #[test]
    fn health_needs_a_published_table() {
        let mut s = snapshot();
        s.table = Arc::new(Table::empty());
        s.acked = vec![0, 0];
        s.tables_rejected = 2;
        assert_eq!(
            health(&s),
            Err("no published table adopted: nothing is forwarded (2 publication(s) rejected as invalid)\n".into())
        );
    }

    fn get(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: torii\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, text)
    }

    #[test]
    fn the_endpoint_serves_metrics_and_health() {
        let dir = tempfile_dir();
        let region = Arc::new(StateRegion::open(&dir).unwrap());
        let watcher = Arc::new(TableWatcher {
            dir: dir.clone(),
            region: Arc::clone(&region),
            mappings: Mappings::new(Arc::clone(&region), 2),
            handle: Arc::new(TableHandle::new(table(7))),
            rejected: AtomicU64::new(0),
        });
        // A clock origin 10 s back, so a report at 0 ns is stale.
        let epoch = Instant::now().checked_sub(Duration::from_secs(10)).unwrap();
        let s = snapshot();
        let reports: Vec<ReportSlot> = s
            .workers
            .into_iter()
            .map(|mut r| {
                r.at_ns = epoch.elapsed().as_nanos() as u64;
                Arc::new(Mutex::new(r))
            })
            .collect();
        let source = Arc::new(Source { reports: reports.clone(), watcher, epoch, ports: PortSlot::default() });
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server::start("127.0.0.1:0".parse().unwrap(), source, Arc::clone(&stop)).unwrap();

        let (status, text) = get(server.addr, "GET", "/metrics");
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("content-type: text/plain; version=0.0.4; charset=utf-8"), "{text}");
        assert!(text.contains("\r\n\r\n# HELP torii_gateway_rx_frames_total"), "{text}");
        assert!(text.contains("torii_gateway_frontend_new_flows_total{service=\"demo/web:http\""), "{text}");

        for w in 0..2 {
            region.ack(w, 7);
        }
        // Fresh reports, whatever the time the requests above took on a loaded machine.
        for r in &reports {
            r.lock().unwrap().at_ns = epoch.elapsed().as_nanos() as u64;
        }
        assert_eq!(get(server.addr, "GET", "/healthz").0, 200);
        reports[0].lock().unwrap().at_ns = 0;
        let (status, text) = get(server.addr, "GET", "/healthz");
        assert_eq!(status, 503);
        assert!(text.ends_with("\r\n\r\nworker 0 has not reported for over 5 s\n"), "{text}");
        assert_eq!(get(server.addr, "GET", "/nope").0, 404);
        assert_eq!(get(server.addr, "POST", "/metrics").0, 405);
        let (status, text) = get(server.addr, "HEAD", "/metrics");
        assert_eq!(status, 200);
        assert!(text.ends_with("\r\n\r\n"), "HEAD has no body: {text}");

        stop.store(true, Ordering::Relaxed);
        server.join();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fresh directory for the state region.
    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("torii-metrics-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
