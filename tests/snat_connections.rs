//! More real TCP connections through **one** SNAT address than it has ports: about 70 000
//! concurrent connections from the demo topology's client to a Service with two endpoints
//! (web1 and web2, port 9000), through torii-gateway (AF_PACKET, two workers) and its one
//! IPv4 SNAT address 10.70.0.1. A SNAT port unique per (SNAT address, protocol) held at
//! most 64 512 TCP flows per address; unique per reply tuple (`torii_gateway::snat`), each
//! endpoint has its own 64 512.
//!
//! Real programs on both sides: `scripts/hold_connections.py` (Python asyncio) serves in
//! the web1 and web2 namespaces and connects from the client namespace; every connection
//! carries a byte each way (the answer names the endpoint) and is held open while the
//! gateway's `/metrics` is read: its flow count must exceed 64 512, with no SNAT
//! exhaustion. The Service `demo/hold` has two ports (9000 and 9001, both to targetPort
//! 9000) so that the client's kernel has two destinations' worth of ephemeral ports
//! (64 512 each) without binding source addresses.
//!
//! Run after `cargo build --release --workspace --bins`:
//! `cargo nextest run --release -p torii-integration --test snat_connections`. Needs root
//! (namespaces); skips (or fails with `TORII_REQUIRE_CAPABILITIES=1`) otherwise. It runs
//! alone (nextest group `snat-connections`): it holds about 140 000 sockets.

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;
use torii_integration::{
    curl_get, netns_unavailable, output_with_timeout, print_skipped, repo_root, require_tools, tcp_connect_timed,
    Binaries, Daemon, Harness, METRICS_LISTEN,
};

/// Connections held at once: above the 64 512 ports of one SNAT address.
const CONNECTIONS: usize = 70_000;
/// The old limit: TCP ports of one SNAT address (1024–65535).
const PORTS_PER_ADDRESS: u64 = 64_512;
const VIP: &str = "203.0.113.20";
/// The endpoints' namespaces (the demo topology's web1, 10.70.0.11, and web2, 10.70.0.12)
/// and the byte each answers.
const ENDPOINTS: [(&str, &str); 2] = [("web1", "a"), ("web2", "b")];

/// demo/hold: one front door address, two ports, both to targetPort 9000 of two endpoints.
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
  - {name: a, protocol: TCP, port: 9000, targetPort: 9000}
  - {name: b, protocol: TCP, port: 9001, targetPort: 9000}
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
- {name: a, protocol: TCP, port: 9000}
- {name: b, protocol: TCP, port: 9000}
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

/// The client process; killed when dropped.
struct Client(Child);

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `sysctl -qw settings…` in namespace `ns`.
fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    let out = output_with_timeout(
        Command::new("ip").args(["netns", "exec", ns, "sysctl", "-qw"]).args(settings),
        Duration::from_secs(10),
    )?;
    if !out.status.success() {
        bail!("sysctl {settings:?} in {ns}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A gauge or counter of the gateway (`torii_gateway_<name>{worker=…}` lines, with any
/// further label filter `also`), summed over workers.
fn metric_sum(h: &Harness, name: &str, also: &str) -> Result<u64> {
    let metrics = curl_get(&h.ns("gw"), &format!("http://{METRICS_LISTEN}/metrics"))?;
    let prefix = format!("torii_gateway_{name}{{worker=");
    Ok(metrics
        .body
        .lines()
        .filter(|l| l.starts_with(prefix.as_str()) && l.contains(also))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()))
        .sum())
}

#[test]
#[ignore = "not yet passing: its Python clients reach ~40 000 of the 70 000 connections within the budget on a 2-core machine; run with `cargo nextest run --run-ignored only`"]
fn more_tcp_connections_than_snat_ports_through_one_snat_address() -> Result<()> {
    let test = "more_tcp_connections_than_snat_ports_through_one_snat_address";
    let started = Instant::now();
    let prefix = format!("sn{}", std::process::id());
    if let Some(reason) = netns_unavailable(&prefix) {
        print_skipped(test, &reason);
        return Ok(());
    }
    require_tools()?;
    let bins = Binaries::locate()?;
    let script = repo_root().join("scripts/hold_connections.py");

    let mut h = Harness::new(&prefix)?;
    h.write_config()?;
    let manifests = h.manifests.as_ref().context("manifests")?.dir().to_path_buf();
    fs::write(manifests.join("hold.yaml"), MANIFEST)?;
    h.topology_up()?;
    // Room for the connections: the client's ephemeral ports, the servers' accept queues.
    sysctl(&h.ns("client"), &["net.ipv4.ip_local_port_range=1024 65535"])?;
    // Each process keeps its descriptors below the hard RLIMIT_NOFILE, which a process
    // without CAP_SYS_RESOURCE (a container's root) cannot raise: several servers share
    // each endpoint's port (SO_REUSEPORT), several clients share the connections.
    let per_process = nofile_hard_limit().saturating_sub(1000).clamp(1000, CONNECTIONS);
    let processes = CONNECTIONS.div_ceil(per_process);
    let mut servers = Vec::new();
    for (ns, name) in ENDPOINTS {
        let ns = h.ns(ns);
        sysctl(&ns, &["net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535"])?;
        for k in 0..processes {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns, "python3"]).arg(&script).args(["serve", "--port", "9000", "--name", name]);
            let log = h.workdir.join(format!("hold-{name}{k}.log"));
            servers.push(Daemon::spawn(&format!("hold server {name}{k}"), cmd, &log)?);
        }
    }
    h.start(&bins)?;

    // The front door is served once the table is adopted.
    let ready = Instant::now();
    loop {
        let (r, _) =
            tcp_connect_timed(&h.ns("client"), (VIP.parse::<std::net::Ipv4Addr>()?, 9000), Duration::from_secs(2));
        if r.is_ok() {
            break;
        }
        if let Err(e) = h.check_alive() {
            return Err(h.fail("ready", e));
        }
        if ready.elapsed() > Duration::from_secs(30) {
            return Err(h.fail("ready", format!("{VIP}:9000 not served after 30 s: {r:?}")));
        }
        sleep(Duration::from_millis(200));
    }
    progress(format!("gateway serves {VIP}:9000 after {:.1} s", started.elapsed().as_secs_f64()));

    let mut clients = Vec::new();
    let (tx, rx) = mpsc::channel();
    for k in 0..processes {
        let count = CONNECTIONS / processes + usize::from(k < CONNECTIONS % processes);
        let child = Command::new("ip")
            .args(["netns", "exec", &h.ns("client"), "python3"])
            .arg(&script)
            .args(["connect", "--to", &format!("{VIP}:9000,{VIP}:9001"), "--count", &count.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(h.workdir.join(format!("hold-client{k}.log")))?)
            .spawn()
            .context("start a hold_connections.py client")?;
        let mut client = Client(child);
        let stdout = client.0.stdout.take().context("client stdout")?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        clients.push(client);
    }
    let (mut held, mut failed) = (0, 0);
    let mut answers = std::collections::BTreeMap::<String, u64>::new();
    for _ in 0..processes {
        let line = rx
            .recv_timeout(Duration::from_secs(150))
            .map_err(|_| h.fail("connect", "a client did not report within 150 s (logs: hold-client*.log)"))?;
        let report: Value = serde_json::from_str(line.trim())
            .map_err(|e| h.fail("connect", format!("client report {line:?}: {e} (logs: hold-client*.log)")))?;
        progress(format!("client: {report}"));
        held += report["held"].as_u64().unwrap_or(0);
        failed = report["failed"].as_u64().map_or(u64::MAX, |f| failed.saturating_add(f));
        for (name, n) in report["answers"].as_object().into_iter().flatten() {
            *answers.entry(name.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    let report = format!("{held} held, {failed} failed, answered by {answers:?}");
    if held != CONNECTIONS as u64 || failed != 0 {
        return Err(h.fail("connect", format!("{CONNECTIONS} connections expected to carry a byte each way: {report}")));
    }
    for (_, name) in ENDPOINTS {
        if answers.get(name).copied().unwrap_or(0) == 0 {
            return Err(h.fail("connect", format!("no connection answered by endpoint {name}: {report}")));
        }
    }

    // While every connection is held: the gateway tracks them all, through one SNAT address.
    let flows = metric_sum(&h, "flows", "").map_err(|e| h.fail("metrics", e))?;
    let exhausted = metric_sum(&h, "drops_total", "reason=\"snat_exhausted\"").map_err(|e| h.fail("metrics", e))?;
    progress(format!("gateway: {flows} flows, {exhausted} snat_exhausted drops"));
    if flows < held || flows <= PORTS_PER_ADDRESS || exhausted != 0 {
        return Err(h.fail(
            "metrics",
            format!(
                "{held} connections held: expected at least as many flows (above {PORTS_PER_ADDRESS}) and no \
                 snat_exhausted drop; the gateway has {flows} flows, {exhausted} snat_exhausted drops"
            ),
        ));
    }
    for c in &mut clients {
        drop(c.0.stdin.take()); // the client closes its connections
    }
    drop(clients);
    drop(servers);
    progress(format!("passed in {:.1} s", started.elapsed().as_secs_f64()));
    h.passed();
    Ok(())
}
