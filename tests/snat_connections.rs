//! More real TCP connections through **one** SNAT address than it has ports: 70 000
//! concurrent connections from the demo topology's client to a Service with two endpoints
//! (web1 and web2, port 9000), through torii-gateway (two workers; once on the AF_PACKET
//! driver, once on DPDK's `net_af_packet`) and its one IPv4 SNAT address 10.70.0.1. A SNAT
//! port unique per (SNAT address, protocol) held at most 64 512 TCP flows per address;
//! unique per reply tuple (`torii_gateway::snat`), each endpoint has its own 64 512.
//!
//! Real programs on both sides: `torii-tcp-hold` (`src/bin/tcp_hold.rs`, kernel sockets on
//! tokio) serves in the web1 and web2 namespaces and connects from the client namespace,
//! from several source addresses (198.51.100.11, .12, …: the kernel picks each source port
//! from `ip_local_port_range`, unique per address). Every process stays below the hard
//! RLIMIT_NOFILE (a container's root cannot raise it), so the connections are shared by
//! several clients, and each endpoint's port by several servers (SO_REUSEPORT). Phases:
//!
//! 1. open: every client opens its connections and holds them;
//! 2. once **all** are open, exchange: every connection carries a token to the endpoint and
//!    back, with the endpoint's name and the source address the endpoint saw — all 70 000
//!    must come back, from both endpoints, every one seen from 10.70.0.1;
//! 3. while all are still held, the gateway's `/metrics`: at least 70 000 flows, no
//!    `snat_exhausted` or `conntrack_full` drop, both ports' link up and their device
//!    counters (`port_rx_missed_total`: AF_PACKET `tp_drops`) exported;
//! 4. close: every connection half-closed by the client and answered by the endpoint's FIN,
//!    with no byte in between; the gateway still alive.
//!
//! Nothing but torii may be the limit: the gateway's conntrack holds 131 072 flows per
//! worker (each worker holds about half), its SYN proxy is off (the SYN-flood defence is
//! `tests/netns.rs`'s subject), the endpoints' accept queues are 65 535 deep, and kernel
//! connection tracking stays far from `nf_conntrack_max` in every namespace (checked).
//!
//! Run after `cargo build --release --workspace --bins`:
//! `cargo nextest run --release -p torii-integration --test snat_connections`. Needs root
//! (namespaces); skips (or fails with `TORII_REQUIRE_CAPABILITIES=1`) otherwise. It runs
//! alone (nextest group `snat-connections`): about 140 000 sockets and both CPUs.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;
use torii_integration::{
    curl_get, dpdk_unavailable, netns_unavailable, output_with_timeout, print_skipped, require_tools,
    tcp_connect_timed, Binaries, Daemon, Harness, METRICS_LISTEN,
};

/// Connections held at once: above the 64 512 ports of one SNAT address.
const CONNECTIONS: usize = 70_000;
/// The old limit: TCP ports of one SNAT address (1024–65535).
const PORTS_PER_ADDRESS: u64 = 64_512;
/// The gateway's one IPv4 SNAT address (configs/gateway.toml).
const SNAT_ADDRESS: &str = "10.70.0.1";
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
const PORT: u16 = 9000;
/// The endpoints' namespaces (the demo topology's web1, 10.70.0.11, and web2, 10.70.0.12).
const ENDPOINTS: [&str; 2] = ["web1", "web2"];
/// Conntrack capacity per worker, twice what the test needs of the two workers together.
const CONNTRACK_CAPACITY: usize = 131_072;
/// How long each phase (open, exchange, close) may take on a busy 2-core machine.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

/// demo/hold: one front door, two endpoints on port 9000.
const MANIFEST: &str = r#"# demo/hold (tests/snat_connections.rs): many held connections through one SNAT address.
apiVersion: v1
kind: Service
metadata:
  name: hold
  namespace: demo
spec:
  type: ClusterIP
  clusterIP: 10.96.0.20
  externalIPs: [203.0.113.20]
  selector: {app: hold}
  ports:
  - {name: hold, protocol: TCP, port: 9000, targetPort: 9000}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: hold-x7k2p
  namespace: demo
  labels:
    kubernetes.io/service-name: hold
    endpointslice.kubernetes.io/managed-by: demo
addressType: IPv4
ports:
- {name: hold, protocol: TCP, port: 9000}
endpoints:
- addresses: [10.70.0.11]
  conditions: {ready: true}
- addresses: [10.70.0.12]
  conditions: {ready: true}
"#;

/// The hard limit on a process's open files (RLIMIT_NOFILE).
fn nofile_hard_limit() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives for the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if rc == 0 {
        usize::try_from(limit.rlim_max).unwrap_or(usize::MAX)
    } else {
        1024
    }
}

fn progress(message: impl std::fmt::Display) {
    eprintln!("[snat_connections] {message}");
}

/// Runs `ip netns exec ns args…` and returns its standard output.
fn in_ns(ns: &str, args: &[&str]) -> Result<String> {
    let out = output_with_timeout(Command::new("ip").args(["netns", "exec", ns]).args(args), Duration::from_secs(10))?;
    if !out.status.success() {
        bail!("{args:?} in {ns}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Sets `settings` (`key=value`) with sysctl in namespace `ns`.
fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    in_ns(ns, &[&["sysctl", "-qw"], settings].concat()).map(drop)
}

/// The gateway's `/metrics` (read in its namespace).
fn scrape(h: &Harness) -> Result<String> {
    Ok(curl_get(&h.ns("gw"), &format!("http://{METRICS_LISTEN}/metrics"))?.body)
}

/// The values of metric `torii_gateway_<name>` in `metrics` whose labels contain `also`.
fn samples(metrics: &str, name: &str, also: &str) -> Vec<u64> {
    let prefix = format!("torii_gateway_{name}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix.as_str()) && l.contains(also))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()))
        .collect()
}

/// [`samples`] of a fresh scrape, summed.
fn metric_sum(h: &Harness, name: &str, also: &str) -> Result<u64> {
    Ok(samples(&scrape(h)?, name, also).iter().sum())
}

/// The client processes: their standard inputs (the phase commands) and one channel of
/// their report lines, tagged with the client's index. Killed when dropped.
struct Clients {
    children: Vec<(Child, ChildStdin)>,
    lines: mpsc::Receiver<(usize, String)>,
}

impl Clients {
    /// Sends `command` to every client.
    fn send(&mut self, command: &str) -> Result<()> {
        for (_, stdin) in &mut self.children {
            writeln!(stdin, "{command}").context("write a client's standard input")?;
        }
        Ok(())
    }

    /// Every client's report of `phase`, summed: connections that made it, failures by
    /// kind, and the per-name counts of the report's objects `maps` (endpoints, peers).
    fn collect(&self, phase: &str, maps: &[&str]) -> Result<Totals> {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        let mut totals = Totals::default();
        let mut reported = vec![false; self.children.len()];
        while reported.contains(&false) {
            let wait = deadline.saturating_duration_since(Instant::now());
            let (k, line) = self.lines.recv_timeout(wait).map_err(|_| {
                anyhow::anyhow!("{phase}: clients {:?} did not report within {PHASE_TIMEOUT:?}", missing(&reported))
            })?;
            let v: Value =
                serde_json::from_str(line.trim()).with_context(|| format!("client {k}'s report {line:?}"))?;
            if v["phase"] != phase {
                bail!("client {k} reported {line:?} while {phase} was expected");
            }
            reported[k] = true;
            totals.ok += v["ok"].as_u64().unwrap_or(0);
            totals.seconds = totals.seconds.max(v["seconds"].as_f64().unwrap_or(0.0));
            for (kind, n) in v["failed"].as_object().into_iter().flatten() {
                *totals.failed.entry(kind.clone()).or_default() += n.as_u64().unwrap_or(0);
            }
            for map in maps {
                for (key, n) in v[*map].as_object().into_iter().flatten() {
                    *totals.maps.entry(format!("{map}:{key}")).or_default() += n.as_u64().unwrap_or(0);
                }
            }
        }
        Ok(totals)
    }
}

fn missing(reported: &[bool]) -> Vec<usize> {
    reported.iter().enumerate().filter(|(_, r)| !**r).map(|(k, _)| k).collect()
}

impl Drop for Clients {
    fn drop(&mut self) {
        for (child, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The clients' reports of one phase, summed.
#[derive(Debug, Default)]
struct Totals {
    ok: u64,
    failed: BTreeMap<String, u64>,
    /// `<map>:<key>` → count, e.g. `endpoints:web1`, `peers:10.70.0.1`.
    maps: BTreeMap<String, u64>,
    /// The slowest client's time for the phase.
    seconds: f64,
}

impl Totals {
    /// Fails unless every connection made it.
    fn all(&self, phase: &str) -> Result<()> {
        if self.ok != CONNECTIONS as u64 || !self.failed.is_empty() {
            bail!("{phase}: {} of {CONNECTIONS} connections made it; failed: {:?}", self.ok, self.failed);
        }
        Ok(())
    }
}

#[test]
fn more_tcp_connections_than_snat_ports_through_one_snat_address() -> Result<()> {
    // "it<pid>-<tag>": scripts/test removes what an interrupted run leaves behind.
    run(
        "more_tcp_connections_than_snat_ports_through_one_snat_address",
        "af_packet",
        &format!("it{}-sn", std::process::id()),
    )
}

/// The same with `driver = "dpdk"`: DPDK's `net_af_packet` on the gateway's veths (no RSS:
/// the two workers share flows through the software redirect), no fallback to AF_PACKET.
#[test]
fn more_tcp_connections_than_snat_ports_through_one_snat_address_dpdk() -> Result<()> {
    let test = "more_tcp_connections_than_snat_ports_through_one_snat_address_dpdk";
    if let Some(reason) = dpdk_unavailable() {
        print_skipped(test, &reason);
        return Ok(());
    }
    run(test, "dpdk", &format!("it{}-snd", std::process::id()))
}

/// The test on `driver`, in namespaces `<prefix>-*`.
fn run(test: &str, driver: &str, prefix: &str) -> Result<()> {
    let started = Instant::now();
    if let Some(reason) = netns_unavailable(prefix) {
        print_skipped(test, &reason);
        return Ok(());
    }
    require_tools()?;
    let bins = Binaries::locate()?;
    let hold = env!("CARGO_BIN_EXE_torii-tcp-hold");

    let mut h = Harness::new(prefix)?;
    h.write_config_for(driver)?;
    let mut config = fs::read_to_string(&h.config)?;
    for (line, with) in [
        ("capacity = 65536", format!("capacity = {CONNTRACK_CAPACITY}")),
        ("syn_cookies = true", "syn_cookies = false".to_string()),
    ] {
        anyhow::ensure!(config.contains(line), "configs/gateway.toml has no {line:?} line");
        config = config.replacen(line, &with, 1);
    }
    fs::write(&h.config, config)?;
    let manifests = h.manifests.as_ref().context("manifests")?.dir().to_path_buf();
    fs::write(manifests.join("hold.yaml"), MANIFEST)?;
    h.topology_up()?;

    // Each process below the hard RLIMIT_NOFILE: clients with their own source address;
    // servers enough for 60 % of the connections at one endpoint (the scheduler splits
    // them about evenly) however the kernel spreads them over an endpoint's servers.
    let per_process = nofile_hard_limit().saturating_sub(200).clamp(500, CONNECTIONS / 2);
    let clients = CONNECTIONS.div_ceil(per_process);
    let servers = (CONNECTIONS * 3 / 5).div_ceil(per_process);
    let client_ns = h.ns("client");
    sysctl(&client_ns, &["net.ipv4.ip_local_port_range=1024 65535"])?;
    let sources: Vec<Ipv4Addr> = (0..clients).map(|k| Ipv4Addr::new(198, 51, 100, 11 + k as u8)).collect();
    for a in &sources {
        in_ns(&client_ns, &["ip", "addr", "add", &format!("{a}/24"), "dev", "eth0"])?;
    }
    let mut daemons = Vec::new();
    for name in ENDPOINTS {
        let ns = h.ns(name);
        sysctl(&ns, &["net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535"])?;
        for k in 0..servers {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns, hold, "serve", "--listen", &format!("0.0.0.0:{PORT}"), "--name", name]);
            let log = h.workdir.join(format!("hold-{name}-{k}.log"));
            daemons.push(Daemon::spawn(&format!("torii-tcp-hold serve {name} {k}"), cmd, &log)?);
        }
    }
    // Every server listens before the first connection.
    let listening = Instant::now();
    for name in ENDPOINTS {
        loop {
            let ss = in_ns(&h.ns(name), &["ss", "-Hltn", &format!("sport = :{PORT}")])?;
            if ss.lines().count() >= servers {
                break;
            }
            if listening.elapsed() > Duration::from_secs(15) {
                return Err(h.fail("listen", format!("{name}: {servers} servers not listening after 15 s:\n{ss}")));
            }
            sleep(Duration::from_millis(50));
        }
    }
    h.start(&bins)?;

    // The front door is served once the table is adopted.
    let ready = Instant::now();
    loop {
        let (r, _) = tcp_connect_timed(&client_ns, (VIP, PORT), Duration::from_secs(2));
        if r.is_ok() {
            break;
        }
        h.check_alive().map_err(|e| h.fail("ready", e))?;
        if ready.elapsed() > Duration::from_secs(30) {
            return Err(h.fail("ready", format!("{VIP}:{PORT} not served after 30 s: {r:?}")));
        }
        sleep(Duration::from_millis(200));
    }
    progress(format!(
        "{driver}: gateway serves {VIP}:{PORT} after {:.1} s; {clients} clients of {per_process} connections at most, \
         {servers} servers per endpoint",
        started.elapsed().as_secs_f64()
    ));

    // Phase 1: open.
    let (tx, lines) = mpsc::channel();
    let mut children = Vec::new();
    for (k, from) in sources.iter().enumerate() {
        let count = CONNECTIONS / clients + usize::from(k < CONNECTIONS % clients);
        let mut child = Command::new("ip")
            .args(["netns", "exec", &client_ns, hold, "connect", "--to", &format!("{VIP}:{PORT}")])
            .args(["--from", &from.to_string(), "--count", &count.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(h.workdir.join(format!("hold-client-{k}.log")))?)
            .spawn()
            .context("start torii-tcp-hold connect")?;
        let stdout = child.stdout.take().context("client stdout")?;
        let stdin = child.stdin.take().context("client stdin")?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((k, line)).is_err() {
                    break;
                }
            }
        });
        children.push((child, stdin));
    }
    let mut clients = Clients { children, lines };
    let open = clients.collect("open", &[]).map_err(|e| h.fail("open", e))?;
    progress(format!("open: {} connections in {:.1} s, failed {:?}", open.ok, open.seconds, open.failed));
    open.all("open").map_err(|e| h.fail("open", e))?;

    // Phase 2: with every connection open, a token each way on each.
    clients.send("exchange")?;
    let echoed = clients.collect("exchange", &["endpoints", "peers"]).map_err(|e| h.fail("exchange", e))?;
    progress(format!(
        "exchange: {} echoed in {:.1} s, failed {:?}, {:?}",
        echoed.ok, echoed.seconds, echoed.failed, echoed.maps
    ));
    echoed.all("exchange").map_err(|e| h.fail("exchange", e))?;
    let peers: Vec<_> = echoed.maps.iter().filter(|(k, _)| k.starts_with("peers:")).collect();
    if peers != [(&format!("peers:{SNAT_ADDRESS}"), &(CONNECTIONS as u64))] {
        return Err(
            h.fail("exchange", format!("every connection should reach its endpoint from {SNAT_ADDRESS}: {peers:?}"))
        );
    }
    for name in ENDPOINTS {
        if echoed.maps.get(&format!("endpoints:{name}")).copied().unwrap_or(0) == 0 {
            return Err(h.fail("exchange", format!("no connection answered by {name}: {:?}", echoed.maps)));
        }
    }

    // Phase 3, while every connection is held: the gateway tracks them all through one
    // SNAT address (workers publish their counts about once a second).
    let counted = Instant::now();
    let flows = loop {
        let flows = metric_sum(&h, "flows", "worker=").map_err(|e| h.fail("metrics", e))?;
        if flows >= CONNECTIONS as u64 || counted.elapsed() > Duration::from_secs(5) {
            break flows;
        }
        sleep(Duration::from_millis(250));
    };
    let drops = |reason: &str| metric_sum(&h, "drops_total", &format!("reason=\"{reason}\""));
    let exhausted = drops("snat_exhausted").map_err(|e| h.fail("metrics", e))?;
    let full = drops("conntrack_full").map_err(|e| h.fail("metrics", e))?;
    progress(format!("gateway: {flows} flows, {exhausted} snat_exhausted and {full} conntrack_full drops"));
    // At least one flow per connection (a few more: the readiness probe's), and not one
    // more per connection: a flow tracked by two workers would count twice.
    if !(CONNECTIONS as u64..=CONNECTIONS as u64 + 50).contains(&flows)
        || flows <= PORTS_PER_ADDRESS
        || exhausted != 0
        || full != 0
    {
        return Err(h.fail(
            "metrics",
            format!(
                "{CONNECTIONS} connections held: expected as many flows (above {PORTS_PER_ADDRESS}) and no \
                 snat_exhausted or conntrack_full drop; the gateway has {flows} flows, {exhausted} snat_exhausted, \
                 {full} conntrack_full drops"
            ),
        ));
    }
    // The ports' device counters, exported for both ports: link state, frames received,
    // frames dropped before the pipeline (DPDK imissed, rx_nombuf and per-queue q_errors;
    // AF_PACKET the rings' tp_drops, per queue and in all).
    let metrics = scrape(&h).map_err(|e| h.fail("metrics", e))?;
    for port in ["tg-front", "tg-back"] {
        let label = format!("port=\"{port}\"");
        let sample = |name: &str| -> Result<u64> {
            let values = samples(&metrics, name, &label);
            if values.is_empty() {
                return Err(h.fail("metrics", format!("no torii_gateway_{name} sample for {port}")));
            }
            Ok(values.iter().sum())
        };
        let up = sample("port_link_up")?;
        let rx = sample("port_rx_packets_total")?;
        let missed = sample("port_rx_missed_total")?;
        let nombuf = sample("port_rx_nombuf_total")?;
        let queues = sample("port_queue_drops_total")?;
        progress(format!(
            "{port}: link up {up}, {rx} frames received, {missed} missed, {nombuf} without a buffer, {queues} dropped \
             by its queues"
        ));
        if up != 1 || rx < CONNECTIONS as u64 || (driver == "af_packet" && missed != queues) {
            return Err(h.fail(
                "metrics",
                format!(
                    "{port}: link up {up} (1 expected), {rx} frames received (at least {CONNECTIONS}), {missed} \
                     missed (under AF_PACKET the sum of the queues' {queues})"
                ),
            ));
        }
    }
    // Kernel connection tracking, if on in a namespace, is far from its limit.
    for ns in ["client", "web1", "web2"] {
        let read = |key: &str| -> Result<u64> {
            let v = in_ns(&h.ns(ns), &["sysctl", "-n", &format!("net.netfilter.{key}")])?;
            v.trim().parse().with_context(|| format!("{key} in {ns}: {v:?}"))
        };
        if let (Ok(count), Ok(max)) = (read("nf_conntrack_count"), read("nf_conntrack_max")) {
            if count * 2 > max {
                return Err(h.fail("metrics", format!("{ns}: nf_conntrack_count {count} of nf_conntrack_max {max}")));
            }
        }
    }

    // Phase 4: close, every connection with a FIN each way.
    clients.send("close")?;
    let closed = clients.collect("close", &[]).map_err(|e| h.fail("close", e))?;
    progress(format!("close: {} closed in {:.1} s, failed {:?}", closed.ok, closed.seconds, closed.failed));
    closed.all("close").map_err(|e| h.fail("close", e))?;
    h.check_alive().map_err(|e| h.fail("close", e))?;
    drop(clients);
    drop(daemons);
    progress(format!("passed in {:.1} s", started.elapsed().as_secs_f64()));
    h.passed();
    Ok(())
}
