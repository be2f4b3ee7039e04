//! Scale-out: three torii gateways behind a router that learns the VIPs over BGP and
//! spreads them by ECMP (`scripts/topology-scale-out`). Real processes only: each gateway is
//! torii-gateway (AF_PACKET, one worker) with its own torii-control and shared-memory
//! directory on one manifests directory, and a BIRD 2 in its namespace that torii drives
//! ([`torii_gateway::announce`]); the router runs another BIRD 2 that installs each VIP
//! as one multipath kernel route (`merge paths`), with the L4 hash policy, and tracks every
//! session with BFD; the client and the three HTTP backends are real sockets and
//! `scripts/backend.py` (whose `X-Client` header names the gateway's SNAT address, so each
//! connection knows the gateway that carried it).
//!
//! It checks, in order (one `#[test]`: the steps share the topology and the daemons):
//! 1. each announced VIP (ExternalIP and LoadBalancer front doors with endpoints) is one
//!    route on the router with the three gateways as next hops; a VIP without endpoints and
//!    a ClusterIP are not announced;
//! 2. new connections from the client reach the VIP through every gateway, and each
//!    reaches the endpoint the gateways' tables pick for its 5-tuple — the three gateways'
//!    Maglev rings are identical and pick the same endpoint for 20 000 flows;
//! 3. a Service created on the way is routed to all three (timed), and a Service that loses
//!    every endpoint is withdrawn by all (timed);
//! 4. disruptions of gateway 1 under load — a client opening new connections all the while,
//!    and 60 established keep-alive connections, each asked once more afterwards — first
//!    with the router's plain multipath route (what BIRD installs), then with a resilient
//!    next-hop group (BIRD 2.0 cannot install one: the test mirrors the next hops BIRD
//!    installed into a kernel `type resilient` group and routes the VIP through it):
//!    - graceful drain (SIGTERM): the router withdraws gateway 1 (timed), the gateway keeps
//!      running `drain_s`, then exits 0; new connections do not fail;
//!    - host failure (`kill -9` of torii-gateway and its BIRD): the router drops gateway 1
//!      when BFD notices; new connections through it fail until then (the recovery time:
//!      until every new connection succeeds again);
//!
//!    each counts the established connections that broke, by the gateway that carried them
//!    (gateway 1's share, and the survivors': none may break with the resilient group),
//!    and restarts gateway 1 afterwards;
//! 5. what the router's kernel does to established flows when one of three next hops is
//!    removed: plain multipath (hash-threshold) versus a resilient next-hop group, counted
//!    over 3 000 flows with `ip route get` (printed; docs/scale-out.md).
//!
//! Every socket has connect, read and write timeouts, every command a deadline. Needs root
//! and BIRD (`scripts/setup` installs `bird2`); without root it prints `SKIPPED` (a failure
//! with `TORII_REQUIRE_CAPABILITIES=1`, as `.ci/run` sets); without BIRD it fails.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use torii_gateway::maglev::flow_hash;
use torii_gateway::table::layout::addr_from16;
use torii_gateway::table::shm::{load_table, StateRegion};
use torii_gateway::table::Table;
use torii_integration::{
    netns_unavailable, output_with_timeout, print_skipped, repo_root, tail, Binaries, Daemon, HttpConn,
};

/// demo-like Service so/web: externalIP, three endpoints.
const WEB_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// so/gone: externalIP, three endpoints, all removed in step 3.
const GONE_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 11);
/// so/empty: externalIP, no endpoints: never announced.
const EMPTY_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 12);
/// so/lb: `type: LoadBalancer`, `status.loadBalancer.ingress[0].ip`.
const LB_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 13);
/// so/late: created in step 3.
const LATE_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 14);
/// so/web's ClusterIP (served with cluster_ips, but not an announced kind by default).
const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// How many gateways (`scripts/topology-scale-out` builds three).
const GATEWAYS: u8 = 3;
/// The next hop gateway N announces (its data-plane address on the router's link).
fn next_hop(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, n, 2)
}
/// Every gateway's next hop.
fn all_hops() -> Vec<Ipv4Addr> {
    (1..=GATEWAYS).map(next_hop).collect()
}
/// The gateway whose SNAT address (10.70.0.N) a backend's `X-Client` header shows.
fn gateway_of(x_client: &str) -> Option<u8> {
    let host = x_client.rsplit_once(':')?.0.trim_start_matches("::ffff:");
    let addr: Ipv4Addr = host.parse().ok()?;
    let [a, b, c, n] = addr.octets();
    ((a, b, c) == (10, 70, 0) && (1..=GATEWAYS).contains(&n)).then_some(n)
}
/// How long the gateway keeps forwarding after its withdrawal (`bgp.drain_s`).
const DRAIN_S: u64 = 4;
/// BFD on every session: interval (ms) and detection multiplier — a dead gateway host is
/// noticed after about 5 × 100 ms (the multiplier leaves room for a busy 2-core machine).
const BFD_INTERVAL_MS: u32 = 100;
const BFD_MULTIPLIER: u8 = 5;
/// Upper bound for a routing change to reach the router's kernel.
const CONVERGE: Duration = Duration::from_secs(20);
/// Deadline of every command the test runs (`ip`, the topology script).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Established keep-alive connections held across each disruption.
const ESTABLISHED: usize = 60;
/// Connect timeout of the load's new connections: shorter than the kernel's first SYN
/// retransmission (1 s), so a SYN lost to a dead gateway is a failed connection, not one
/// that a retransmission on the converged route rescues.
const LOAD_CONNECT: Duration = Duration::from_millis(700);
/// The resilient next-hop group's buckets and idle timer (seconds) in the router.
const BUCKETS: usize = 120;
const IDLE_TIMER_S: u32 = 1;

fn progress(step: &str, message: impl std::fmt::Display) {
    eprintln!("[scale-out] {step}: {message}");
}

/// The running topology and daemons; dropping it stops everything and removes it.
struct ScaleOut {
    prefix: String,
    workdir: PathBuf,
    bins: Binaries,
    manifests_dir: PathBuf,
    /// Gateway N's daemons at index N-1: (torii-control, torii-gateway, BIRD).
    controls: Vec<Option<Daemon>>,
    gateways: Vec<Option<Daemon>>,
    birds: Vec<Option<Daemon>>,
    router_bird: Option<Daemon>,
    /// The thread that mirrors BIRD's next hops into a resilient group (step 4b).
    mirror: Option<Mirror>,
    topology_up: bool,
    passed: bool,
}

impl ScaleOut {
    fn ns(&self, short: &str) -> String {
        format!("{}-{short}", self.prefix)
    }

    fn shm_dir(&self, n: u8) -> PathBuf {
        PathBuf::from(format!("/dev/shm/torii-{}-gw{n}", self.prefix))
    }

    fn gw_dir(&self, n: u8) -> PathBuf {
        self.workdir.join(format!("gw{n}"))
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        let mut files = vec![self.workdir.join("router-bird.log")];
        for n in 1..=GATEWAYS {
            for f in ["gateway.log", "control.log", "bird.log", "torii-bird.conf"] {
                files.push(self.gw_dir(n).join(f));
            }
        }
        for f in files {
            let _ = write!(s, "\n----- last 25 lines of {} -----\n{}\n", f.display(), tail(&f, 25));
        }
        for what in ["protocols", "bfd sessions"] {
            let ctl = self.workdir.join("router-bird.ctl");
            let mut cmd = Command::new("birdc");
            cmd.arg("-s").arg(&ctl).args(["show"]).args(what.split(' '));
            if let Ok(out) = output_with_timeout(&mut cmd, Duration::from_secs(5)) {
                let _ =
                    write!(s, "\n----- router: birdc show {what} -----\n{}\n", String::from_utf8_lossy(&out.stdout));
            }
        }
        s
    }

    fn fail(&self, step: &str, message: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!("step {step:?} failed: {message}\n{}", self.logs())
    }
}

impl Drop for ScaleOut {
    fn drop(&mut self) {
        drop(self.mirror.take());
        for d in self.gateways.iter_mut().chain(&mut self.controls).chain(&mut self.birds) {
            drop(d.take());
        }
        drop(self.router_bird.take());
        if self.topology_up {
            let _ = output_with_timeout(
                Command::new("bash").arg(repo_root().join("scripts/topology-scale-out")).args(["down", &self.prefix]),
                COMMAND_TIMEOUT,
            );
        }
        for n in 1..=GATEWAYS {
            let _ = fs::remove_dir_all(self.shm_dir(n));
        }
        if self.passed && !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.workdir);
        } else {
            eprintln!("scale-out test: logs and configuration kept in {}", self.workdir.display());
        }
    }
}

fn command_exists(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `ip netns exec <ns> <args>` (killed after [`COMMAND_TIMEOUT`]) and returns its stdout.
fn in_ns(ns: &str, args: &[&str]) -> Result<String> {
    let out = output_with_timeout(Command::new("ip").args(["netns", "exec", ns]).args(args), COMMAND_TIMEOUT)?;
    if !out.status.success() {
        bail!("{args:?} in {ns}: {} ({})", String::from_utf8_lossy(&out.stderr).trim(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The next hops of the router's kernel route to `vip/32` in the main table (where BIRD
/// installs it; empty: no route).
fn router_next_hops(s: &ScaleOut, vip: Ipv4Addr) -> Result<BTreeSet<Ipv4Addr>> {
    let text = in_ns(&s.ns("router"), &["ip", "-4", "route", "show", "exact", &format!("{vip}/32")])?;
    Ok(parse_vias(&text))
}

fn parse_vias(text: &str) -> BTreeSet<Ipv4Addr> {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "via")
        .filter_map(|w| w[1].parse().ok())
        .collect()
}

/// Waits until the router's route to `vip` has exactly `want` as next hops; returns how
/// long it took.
fn wait_next_hops(s: &ScaleOut, step: &str, vip: Ipv4Addr, want: &[Ipv4Addr]) -> Result<Duration> {
    let want: BTreeSet<Ipv4Addr> = want.iter().copied().collect();
    let start = Instant::now();
    loop {
        let got = router_next_hops(s, vip)?;
        if got == want {
            return Ok(start.elapsed());
        }
        if start.elapsed() > CONVERGE {
            return Err(
                s.fail(step, format!("route to {vip}: next hops {got:?}, expected {want:?} within {CONVERGE:?}"))
            );
        }
        sleep(Duration::from_millis(10));
    }
}

/// `ip -batch` in `ns` on the lines of `batch` (from a file: a pipe both ways would
/// deadlock once the answers fill the pipe); for each line, the `via` address of its answer.
fn ip_batch(s: &ScaleOut, ns: &str, batch: &str) -> Result<Vec<Option<Ipv4Addr>>> {
    static N: AtomicU64 = AtomicU64::new(0);
    let file = s.workdir.join(format!("ip-batch-{}", N.fetch_add(1, Ordering::Relaxed)));
    fs::write(&file, batch)?;
    let out = output_with_timeout(Command::new("ip").args(["-n", ns, "-batch"]).arg(&file), COMMAND_TIMEOUT)?;
    let _ = fs::remove_file(&file);
    ensure!(out.status.success(), "ip -batch: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // One answer per request; each starts with the destination address.
    let answers: Vec<Option<Ipv4Addr>> = text
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace) && !l.is_empty())
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.windows(2).find(|w| w[0] == "via").and_then(|w| w[1].parse().ok())
        })
        .collect();
    ensure!(
        answers.len() == batch.lines().count(),
        "ip -batch answered {} of {} lines:\n{text}",
        answers.len(),
        batch.lines().count()
    );
    Ok(answers)
}

/// Gateway `n`'s published table (the generation its torii-control published).
fn published_table(s: &ScaleOut, n: u8) -> Result<Table> {
    let dir = s.shm_dir(n);
    let generation = StateRegion::open(&dir)?.published_generation();
    ensure!(generation != 0, "nothing published in {}", dir.display());
    Ok(load_table(&dir, generation)?)
}

/// The endpoint `table` picks for a new TCP flow `client:sport → vip:80` (no affinity).
fn pick(table: &Table, client: IpAddr, sport: u16, vip: IpAddr) -> Option<(IpAddr, u16)> {
    let front = table.frontend(vip, 6, 80)?;
    let service = table.service(front.service)?;
    service.pick(flow_hash(6, client, sport, vip, 80)).map(|b| (addr_from16(b.addr), b.port.get()))
}

fn manifests() -> String {
    let service = |name: &str, vip: Ipv4Addr, cluster_ip: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: so}}\nspec:\n  type: ClusterIP\n  \
             clusterIP: {cluster_ip}\n  externalIPs: [{vip}]\n  ports:\n  - {{name: http, protocol: TCP, port: 80, \
             targetPort: 8080}}\n{extra}---\n"
        )
    };
    let mut out = String::new();
    out.push_str(&service("web", WEB_VIP, &CLUSTER_IP.to_string(), ""));
    out.push_str(&slice("web", &["10.70.0.11", "10.70.0.12", "10.70.0.13"]));
    out.push_str(&service("empty", EMPTY_VIP, "10.96.0.12", ""));
    out.push_str(
        "apiVersion: v1\nkind: Service\nmetadata: {name: lb, namespace: so}\nspec:\n  type: LoadBalancer\n  \
         clusterIP: 10.96.0.13\n  ports:\n  - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}\n\
         status:\n  loadBalancer:\n    ingress:\n    - {ip: 203.0.113.13}\n---\n",
    );
    out.push_str(&slice("lb", &["10.70.0.11", "10.70.0.12"]));
    out
}

/// An EndpointSlice of Service `so/<service>` with ready endpoints `ips` on port 8080.
fn slice(service: &str, ips: &[&str]) -> String {
    let mut out = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-1\n  namespace: so\n  \
         labels: {{kubernetes.io/service-name: {service}}}\naddressType: IPv4\nports:\n- {{name: http, protocol: TCP, \
         port: 8080}}\nendpoints:\n"
    );
    if ips.is_empty() {
        out = out.replace("endpoints:\n", "endpoints: []\n");
    }
    for ip in ips {
        let _ = writeln!(out, "- addresses: [{ip}]\n  conditions: {{ready: true}}");
    }
    out.push_str("---\n");
    out
}

/// so/<name> on `vip` with `ips`: one file, written atomically into `dir`.
fn write_service_file(dir: &Path, name: &str, vip: Ipv4Addr, cluster_ip: &str, ips: &[&str]) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: so}}\nspec:\n  type: ClusterIP\n  \
         clusterIP: {cluster_ip}\n  externalIPs: [{vip}]\n  ports:\n  - {{name: http, protocol: TCP, port: 80, \
         targetPort: 8080}}\n---\n{}",
        slice(name, ips)
    );
    let tmp = dir.parent().context("manifests dir has a parent")?.join(format!(".{name}.yaml"));
    fs::write(&tmp, text)?;
    fs::rename(&tmp, dir.join(format!("{name}.yaml")))?;
    Ok(())
}

fn gateway_config(s: &ScaleOut, n: u8) -> String {
    let gw = s.gw_dir(n);
    format!(
        "node_name = \"gateway-{n}\"\nshm_dir = \"{shm}\"\ndriver = \"af_packet\"\nworkers = 1\n\n\
         [[interfaces]]\nname = \"tg-front\"\naddresses = [\"10.99.{n}.2/24\"]\n\n\
         [[interfaces]]\nname = \"tg-back\"\naddresses = [\"10.70.0.{n}/24\"]\n\n\
         [router]\naddress = \"10.99.{n}.1\"\ninterface = \"tg-front\"\n\n\
         [snat]\naddresses = [\"10.70.0.{n}\"]\n\n[conntrack]\ncapacity = 16384\n\n\
         [metrics]\nlisten = \"127.0.0.1:9100\"\n\n[control]\ncluster_ips = true\n\n\
         [bgp]\nasn = 65001\nbird_config = \"{conf}\"\nbird_socket = \"{sock}\"\ndrain_s = {DRAIN_S}\n\
         communities = [\"65001:{n}\"]\nbfd_interval_ms = {BFD_INTERVAL_MS}\nbfd_multiplier = {BFD_MULTIPLIER}\n\n\
         [[bgp.peers]]\naddress = \"10.99.{n}.1\"\nasn = 65000\nlocal_address = \"10.99.{n}.3\"\nhold_time_s = 3\n\
         connect_retry_s = 1\nbfd = true\n",
        shm = s.shm_dir(n).display(),
        conf = gw.join("torii-bird.conf").display(),
        sock = gw.join("bird.ctl").display(),
    )
}

/// The gateway side's bird.conf: the operator's part; torii's file is included.
fn gateway_bird_config(s: &ScaleOut, n: u8) -> String {
    format!(
        "router id 10.99.{n}.3;\nlog stderr all;\nprotocol device {{ }}\ninclude \"{}\";\n",
        s.gw_dir(n).join("torii-bird.conf").display()
    )
}

/// The router's bird.conf: eBGP to the three gateways, each session tracked by BFD,
/// multipath into the kernel's main table.
fn router_bird_config() -> String {
    let mut conf = format!(
        "router id 10.99.0.1;\nlog stderr all;\nprotocol device {{ scan time 10; }}\n\
         protocol kernel {{ ipv4 {{ import none; export all; }}; merge paths yes limit 8; }}\n\
         protocol bfd {{ interface \"*\" {{ min rx interval {BFD_INTERVAL_MS} ms; min tx interval {BFD_INTERVAL_MS} ms; \
         multiplier {BFD_MULTIPLIER}; }}; }}\n\
         template bgp gws {{ local as 65000; hold time 3; keepalive time 1; connect retry time 1; bfd on; \
         error wait time 1, 5; \
         ipv4 {{ import all; export none; }}; }}\n"
    );
    for n in 1..=GATEWAYS {
        let _ = writeln!(
            conf,
            "protocol bgp gw{n} from gws {{ neighbor 10.99.{n}.3 as 65001; source address 10.99.{n}.1; }}"
        );
    }
    conf
}

fn bird(s: &ScaleOut, ns: &str, conf: &Path, sock: &Path, log: &Path) -> Result<Daemon> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &s.ns(ns), "bird", "-f", "-c"]).arg(conf).arg("-s").arg(sock);
    Daemon::spawn(&format!("bird ({ns})"), cmd, log)
}

/// Starts gateway `n`'s torii-gateway; when `with_bird`, waits for the BIRD file it writes
/// at once and starts its BIRD too (a host coming up).
fn start_gateway(s: &mut ScaleOut, n: u8, with_bird: bool) -> Result<()> {
    let gw = s.gw_dir(n);
    let torii_conf = gw.join("torii-bird.conf");
    if with_bird {
        let _ = fs::remove_file(&torii_conf);
    }
    let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let mut gateway = Command::new("ip");
    gateway
        .args(["netns", "exec", &s.ns(&format!("gw{n}"))])
        .arg(&s.bins.gateway)
        .arg("--config")
        .arg(gw.join("gateway.toml"));
    gateway.env("RUST_LOG", &log_level).env("NO_COLOR", "1");
    let d = Daemon::spawn(&format!("torii-gateway {n}"), gateway, &gw.join("gateway.log"))?;
    s.gateways[usize::from(n - 1)] = Some(d);
    if with_bird {
        // The gateway writes its BIRD file at once (no routes until it is healthy); BIRD
        // needs it to start.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !torii_conf.exists() {
            if Instant::now() > deadline {
                return Err(s.fail("start", format!("gateway {n} wrote no BIRD configuration within 10 s")));
            }
            sleep(Duration::from_millis(20));
        }
        fs::write(gw.join("bird.conf"), gateway_bird_config(s, n))?;
        let d = bird(s, &format!("gw{n}"), &gw.join("bird.conf"), &gw.join("bird.ctl"), &gw.join("bird.log"))?;
        s.birds[usize::from(n - 1)] = Some(d);
    }
    Ok(())
}

/// Sends SIGTERM to gateway `n`'s torii-gateway (`systemctl stop`: the drain).
fn sigterm_gateway(s: &ScaleOut, n: u8) -> Result<()> {
    let pid =
        s.gateways[usize::from(n - 1)].as_ref().and_then(Daemon::pid).with_context(|| format!("gateway {n} runs"))?;
    // SAFETY: kill(2) on our own child process (not reaped: Daemon holds it).
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    ensure!(rc == 0, "kill -TERM {pid}: {}", std::io::Error::last_os_error());
    Ok(())
}

/// A thread that keeps a resilient next-hop group in the router's kernel equal to the next
/// hops BIRD installed for [`WEB_VIP`] (polled every 10 ms), with the VIP routed through
/// the group by a policy rule: what a router whose FIB hashes resiliently does with the
/// multipath route its BGP daemon gives it. BIRD 2.0 installs plain multipath routes only.
struct Mirror {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    ns: String,
}

/// The group's id in the router (its members are nexthop ids 1..=GATEWAYS).
const GROUP: u32 = 100;

impl Mirror {
    fn start(s: &ScaleOut) -> Result<Self> {
        let ns = s.ns("router");
        for n in 1..=GATEWAYS {
            in_ns(
                &ns,
                &[
                    "ip",
                    "nexthop",
                    "replace",
                    "id",
                    &n.to_string(),
                    "via",
                    &next_hop(n).to_string(),
                    "dev",
                    &format!("g{n}"),
                ],
            )?;
        }
        let group = |hops: &BTreeSet<Ipv4Addr>| -> String {
            hops.iter().map(|h| h.octets()[2].to_string()).collect::<Vec<_>>().join("/")
        };
        let resilient = [
            "type",
            "resilient",
            "buckets",
            &BUCKETS.to_string(),
            "idle_timer",
            &IDLE_TIMER_S.to_string(),
            "unbalanced_timer",
            "0",
        ]
        .map(String::from);
        let apply = move |ns: &str, verb: &str, hops: &BTreeSet<Ipv4Addr>| -> Result<()> {
            let mut args: Vec<String> =
                ["ip", "nexthop", verb, "id", &GROUP.to_string(), "group", &group(hops)].map(String::from).to_vec();
            args.extend(resilient.iter().cloned());
            in_ns(ns, &args.iter().map(String::as_str).collect::<Vec<_>>())?;
            Ok(())
        };
        let mut current = router_next_hops(s, WEB_VIP)?;
        ensure!(!current.is_empty(), "no route to {WEB_VIP} to mirror");
        apply(&ns, "add", &current)?;
        in_ns(&ns, &["ip", "route", "replace", &format!("{WEB_VIP}/32"), "nhid", &GROUP.to_string(), "table", "200"])?;
        in_ns(&ns, &["ip", "rule", "add", "to", &format!("{WEB_VIP}/32"), "lookup", "200", "pref", "100"])?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, ns) = (Arc::clone(&stop), ns.clone());
            std::thread::spawn(move || -> Result<()> {
                while !stop.load(Ordering::Relaxed) {
                    let text = in_ns(&ns, &["ip", "-4", "route", "show", "exact", &format!("{WEB_VIP}/32")])?;
                    let hops = parse_vias(&text);
                    if !hops.is_empty() && hops != current {
                        apply(&ns, "replace", &hops)?;
                        current = hops;
                    }
                    sleep(Duration::from_millis(10));
                }
                Ok(())
            })
        };
        Ok(Self { stop, thread: Some(thread), ns })
    }

    /// How many of the group's buckets each gateway holds (index N-1).
    fn buckets(&self) -> Result<Vec<usize>> {
        let text = in_ns(&self.ns, &["ip", "nexthop", "bucket", "show", "id", &GROUP.to_string()])?;
        let mut per = vec![0; usize::from(GATEWAYS)];
        for w in text.split_whitespace().collect::<Vec<_>>().windows(2) {
            if w[0] == "nhid" {
                if let Some(i) = w[1].parse::<usize>().ok().filter(|&i| (1..=usize::from(GATEWAYS)).contains(&i)) {
                    per[i - 1] += 1;
                }
            }
        }
        Ok(per)
    }

    /// Waits until every gateway holds exactly its share of the buckets (idle buckets move to
    /// a gateway that came back once the idle timer passed; until the group is balanced, an
    /// idle connection's bucket may still move, which breaks it).
    fn wait_balanced(&self, s: &ScaleOut, step: &str) -> Result<()> {
        let fair = BUCKETS / usize::from(GATEWAYS);
        let start = Instant::now();
        loop {
            let per = self.buckets()?;
            if per.iter().all(|&b| b == fair) {
                return Ok(());
            }
            if start.elapsed() > CONVERGE {
                return Err(s.fail(step, format!("resilient group buckets {per:?} not balanced within {CONVERGE:?}")));
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// Stops the thread and removes the rule, route and group (the VIP follows BIRD's
    /// plain multipath route again).
    fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| anyhow::anyhow!("the mirror thread panicked"))??;
        }
        in_ns(&self.ns, &["ip", "rule", "del", "pref", "100"])?;
        in_ns(&self.ns, &["ip", "route", "del", &format!("{WEB_VIP}/32"), "table", "200"])?;
        in_ns(&self.ns, &["ip", "nexthop", "flush"])?;
        Ok(())
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// New connections to [`WEB_VIP`] opened by 24 client threads, each one after another (a
/// connect, a GET and a close, every 100 ms per thread: about 240 a second while they
/// succeed), recorded with their start time.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// (start, succeeded, error) of every connection.
    results: Arc<Mutex<Vec<(Instant, bool, String)>>>,
}

impl Load {
    fn start(s: &ScaleOut) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let results = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..24)
            .map(|t| {
                let (stop, results, ns) = (Arc::clone(&stop), Arc::clone(&results), s.ns("client"));
                std::thread::spawn(move || {
                    sleep(Duration::from_millis(4 * t));
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        let r =
                            HttpConn::connect(&ns, SocketAddrV4::new(WEB_VIP, 80), LOAD_CONNECT).and_then(|mut c| {
                                c.set_read_timeout(Duration::from_secs(1))?;
                                c.get("/")
                            });
                        let (ok, err) = match r {
                            Ok(r) if r.status == 200 => (true, String::new()),
                            Ok(r) => (false, format!("HTTP {}", r.status)),
                            Err(e) => (false, e.to_string()),
                        };
                        results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((start, ok, err));
                        sleep(Duration::from_millis(100).saturating_sub(start.elapsed()));
                    }
                })
            })
            .collect();
        Self { stop, threads, results }
    }

    /// Stops the threads; returns every connection's (start, succeeded, error), by start.
    fn finish(mut self) -> Vec<(Instant, bool, String)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let mut r = std::mem::take(&mut *self.results.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        r.sort_by_key(|x| x.0);
        r
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Gives the client's new connections source ports no earlier phase used (phase 0..=5,
/// 10 000 ports each).
///
/// Why: a connection that broke by a RST leaves no TIME_WAIT on the client, so Linux may
/// reuse its port at once; a gateway that still holds the broken connection's ESTABLISHED
/// conntrack entry (the gateway it was moved away from, or one that came back adopting its
/// flows) lets the new SYN and SYN/ACK pass as ignored segments on the old translation
/// (`conntrack/tcp.rs`: ESTABLISHED + SYN → ignore). Like Linux's conntrack
/// (`nf_conntrack_proto_tcp.c`, the ignored-SYN case), torii takes a SYN/ACK that answers
/// exactly such a SYN as the new connection (`conntrack::resync`, which says where it
/// differs from Linux); otherwise the new connection is checked against the old windows. A
/// conntrack matter, not a routing one (the conntrack tests cover it): this test keeps it
/// out of its counts.
fn fresh_ports(s: &ScaleOut, phase: u16) -> Result<()> {
    let low = 10_000 + 10_000 * u32::from(phase);
    in_ns(&s.ns("client"), &["sysctl", "-qw", &format!("net.ipv4.ip_local_port_range={low} {}", low + 9_999)])?;
    Ok(())
}

/// One established keep-alive connection and the gateway that carried it.
struct Held {
    conn: HttpConn,
    gateway: u8,
}

/// Opens `count` keep-alive connections to [`WEB_VIP`], one GET each; every gateway up
/// must carry some. A connection whose first GET fails is not held, but recorded (source
/// port and error; at most 5 of them, else the step fails): the second return value.
fn establish(s: &ScaleOut, step: &str, count: usize, up: &[u8]) -> Result<(Vec<Held>, Vec<String>)> {
    let mut held = Vec::new();
    let mut failed = Vec::new();
    while held.len() < count {
        let i = held.len() + failed.len();
        let mut conn = HttpConn::connect(&s.ns("client"), SocketAddrV4::new(WEB_VIP, 80), Duration::from_secs(3))
            .map_err(|e| s.fail(step, format!("established connection {i}: {e}")))?;
        let r = match conn.get("/") {
            Ok(r) => r,
            Err(e) => {
                failed.push(format!("port {}: {e}", conn.local_addr().port()));
                if failed.len() > 5 {
                    return Err(s.fail(step, format!("connections failed their first GET: {failed:?}")));
                }
                continue;
            }
        };
        let gateway = r
            .client
            .as_deref()
            .and_then(gateway_of)
            .with_context(|| format!("connection {i}: no gateway SNAT address in X-Client {:?}", r.client))?;
        held.push(Held { conn, gateway });
    }
    for &n in up {
        if !held.iter().any(|h| h.gateway == n) {
            return Err(s.fail(step, format!("none of {count} connections went through gateway {n}")));
        }
    }
    Ok((held, failed))
}

/// Asks every held connection once more (in parallel, 3 s each); per gateway (index N-1):
/// (connections carried, connections broken).
fn ask_again(held: &mut [Held]) -> Vec<(usize, usize)> {
    let failed: Vec<(u8, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = held
            .iter_mut()
            .map(|h| scope.spawn(move || (h.gateway, h.conn.get("/").map_or(true, |r| r.status != 200))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or((0, true))).collect()
    });
    (1..=GATEWAYS)
        .map(|n| {
            let on = failed.iter().filter(|f| f.0 == n);
            (on.clone().count(), on.filter(|f| f.1).count())
        })
        .collect()
}

/// The nftables ruleset (one `nft` command) that cuts a gateway's namespace off: every
/// packet in and out of its kernel dropped (torii's AF_PACKET sockets die with it).
const HOST_DOWN: &str = "add table inet host_down; \
    add chain inet host_down in { type filter hook input priority -400; policy drop; }; \
    add chain inet host_down out { type filter hook output priority -400; policy drop; }";

/// What one disruption did.
struct Outcome {
    /// Established connections: gateway 1's (carried, broken), the survivors' (carried, broken).
    victim: (usize, usize),
    survivors: (usize, usize),
    /// New connections opened under load from the disruption on: (opened, failed).
    new: (usize, usize),
    /// Disruption → gateway 1 gone from the router's route.
    withdrawn: Duration,
    /// Disruption → the start of the first new connection after the last failed one
    /// (every new connection succeeds from then on); zero when none failed.
    recovered: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Disruption {
    /// SIGTERM: withdraw, drain, exit.
    Drain,
    /// `kill -9` of torii-gateway and its BIRD: the host fails.
    Kill,
}

/// Disrupts gateway 1 under load (established connections and new ones), counts what broke,
/// then brings gateway 1 back (and, with a `mirror`, waits for its buckets to rebalance).
fn disrupt(s: &mut ScaleOut, step: &str, how: Disruption, mirror: Option<&Mirror>, phase: u16) -> Result<Outcome> {
    fresh_ports(s, phase)?;
    let survivors: Vec<Ipv4Addr> = (2..=GATEWAYS).map(next_hop).collect();
    let (mut held, early) = establish(s, step, ESTABLISHED, &(1..=GATEWAYS).collect::<Vec<_>>())?;
    if !early.is_empty() {
        progress(
            step,
            format!("before the disruption, {} new connection(s) failed their first GET: {early:?}", early.len()),
        );
    }
    let load = Load::start(s);
    sleep(Duration::from_millis(500));
    let at = Instant::now();
    match how {
        Disruption::Drain => sigterm_gateway(s, 1)?,
        Disruption::Kill => {
            // A host that dies says nothing: cut gateway 1's namespace off first (nothing in
            // or out, not even the FIN of BIRD's BGP socket), then kill its processes. The
            // router notices through BFD.
            in_ns(&s.ns("gw1"), &["nft", HOST_DOWN])?;
            for d in [&mut s.gateways[0], &mut s.birds[0]] {
                if let Some(mut d) = d.take() {
                    d.kill();
                }
            }
        }
    }
    let withdrawn = at.elapsed() + wait_next_hops(s, step, WEB_VIP, &survivors)?;
    if how == Disruption::Drain {
        if let Some(status) = s.gateways[0].as_mut().and_then(Daemon::exited) {
            return Err(s.fail(step, format!("gateway 1 exited ({status}) right after withdrawing: no drain period")));
        }
    }
    // Let the load run on the survivors for a while: its tail must be all successes.
    sleep(Duration::from_millis(1500));
    let results = load.finish();
    let after: Vec<_> = results.iter().filter(|r| r.0 >= at).collect();
    let failed: Vec<_> = after.iter().filter(|r| !r.1).collect();
    let recovered =
        failed.last().and_then(|last| after.iter().find(|r| r.0 > last.0)).map_or(Duration::ZERO, |r| r.0 - at);
    if let Some(last) = failed.last() {
        if Instant::now().saturating_duration_since(last.0) < Duration::from_millis(800) {
            return Err(s.fail(
                step,
                format!(
                    "new connections still fail {:.1} s after the disruption: {}",
                    last.0.duration_since(at).as_secs_f64(),
                    last.2
                ),
            ));
        }
    }
    let counts = ask_again(&mut held);
    drop(held);
    let victim = counts[0];
    let survivors_count = counts[1..].iter().fold((0, 0), |a, c| (a.0 + c.0, a.1 + c.1));
    if how == Disruption::Drain {
        // Gateway 1 keeps running for drain_s after the withdrawal, then exits 0 by itself.
        let deadline = at + withdrawn + Duration::from_secs(DRAIN_S + 8);
        let status = loop {
            if let Some(status) = s.gateways[0].as_mut().and_then(Daemon::exited) {
                break status;
            }
            if Instant::now() > deadline {
                return Err(s.fail(step, format!("gateway 1 still runs {DRAIN_S} s + 8 s after its withdrawal")));
            }
            sleep(Duration::from_millis(50));
        };
        let ran = at.elapsed();
        if !status.success() || ran < Duration::from_secs(DRAIN_S) {
            return Err(s.fail(
                step,
                format!("gateway 1 exited {status} {:.1} s after SIGTERM (drain_s = {DRAIN_S})", ran.as_secs_f64()),
            ));
        }
        s.gateways[0] = None;
    }
    // Gateway 1 comes back: after a drain only torii-gateway, after a kill the host.
    if how == Disruption::Kill {
        in_ns(&s.ns("gw1"), &["nft", "delete", "table", "inet", "host_down"])?;
    }
    start_gateway(s, 1, how == Disruption::Kill)?;
    wait_next_hops(s, step, WEB_VIP, &all_hops())?;
    if let Some(m) = mirror {
        m.wait_balanced(s, step)?;
    }
    Ok(Outcome { victim, survivors: survivors_count, new: (after.len(), failed.len()), withdrawn, recovered })
}

fn describe(how: Disruption, o: &Outcome) -> String {
    let what = match how {
        Disruption::Drain => "SIGTERM → withdrawn",
        Disruption::Kill => "kill -9 → dropped (BFD)",
    };
    format!(
        "{what} on the router in {:.2} s; established connections broken: gateway 1's {}/{}, the survivors' {}/{}; \
         new connections failed {}/{} (every one succeeds again {:.2} s after the disruption)",
        o.withdrawn.as_secs_f64(),
        o.victim.1,
        o.victim.0,
        o.survivors.1,
        o.survivors.0,
        o.new.1,
        o.new.0,
        o.recovered.as_secs_f64()
    )
}

/// Step 4: drain and kill gateway 1, with plain multipath and with a resilient group.
fn step_disruptions(s: &mut ScaleOut) -> Result<()> {
    const PLAIN: &str = "4a plain multipath";
    const RESILIENT: &str = "4b resilient group";
    let route = in_ns(&s.ns("router"), &["ip", "-4", "route", "show", "exact", &format!("{WEB_VIP}/32")])?;
    progress(PLAIN, format!("the router's route: {}", route.split_whitespace().collect::<Vec<_>>().join(" ")));
    let mut outcomes = Vec::new();
    for (how, step, phase) in [(Disruption::Drain, PLAIN, 1), (Disruption::Kill, PLAIN, 2)] {
        let o = disrupt(s, step, how, None, phase)?;
        progress(step, describe(how, &o));
        outcomes.push((step, how, o));
    }
    let mirror = Mirror::start(s)?;
    mirror.wait_balanced(s, RESILIENT)?;
    progress(RESILIENT, format!("{WEB_VIP} routed through resilient group {GROUP} ({BUCKETS} buckets, idle timer {IDLE_TIMER_S} s, buckets per gateway {:?}) mirroring BIRD's next hops", mirror.buckets()?));
    s.mirror = Some(mirror);
    for (how, phase) in [(Disruption::Drain, 3), (Disruption::Kill, 4)] {
        let m = s.mirror.take();
        let o = disrupt(s, RESILIENT, how, m.as_ref(), phase);
        s.mirror = m;
        let o = o?;
        progress(RESILIENT, describe(how, &o));
        outcomes.push((RESILIENT, how, o));
    }
    if let Some(m) = s.mirror.take() {
        m.stop()?;
    }
    for (step, how, o) in &outcomes {
        // Full NAT: a connection the router moves to a gateway without its translation breaks.
        if o.victim.1 != o.victim.0 {
            return Err(s.fail(
                step,
                format!(
                    "{} of gateway 1's {} connections survived its {}: full NAT cannot move a connection",
                    o.victim.0 - o.victim.1,
                    o.victim.0,
                    if *how == Disruption::Drain { "drain" } else { "kill" }
                ),
            ));
        }
        if *step == RESILIENT && o.survivors.1 != 0 {
            return Err(s.fail(
                step,
                format!("{} of the surviving gateways' connections broke with a resilient group", o.survivors.1),
            ));
        }
    }
    for step in [PLAIN, RESILIENT] {
        let new_failed = |how| outcomes.iter().find(|o| o.0 == step && o.1 == how).map_or(0, |o| o.2.new.1);
        let (drained, killed) = (new_failed(Disruption::Drain), new_failed(Disruption::Kill));
        if drained >= killed {
            return Err(s.fail(
                step,
                format!("a drain failed {drained} new connections, a kill {killed}: the drain must be gentler"),
            ));
        }
    }
    Ok(())
}

#[test]
fn three_gateways_behind_ecmp() -> Result<()> {
    let test = "three_gateways_behind_ecmp";
    let start = Instant::now();
    let prefix = format!("so{}", std::process::id());
    if let Some(reason) = netns_unavailable(&prefix) {
        print_skipped(test, &reason);
        return Ok(());
    }
    for tool in ["bird", "birdc", "nft", "ethtool", "python3", "ss"] {
        ensure!(command_exists(tool), "{tool} is missing: run scripts/setup (as root) first");
    }
    let workdir = std::env::temp_dir().join(format!("torii-{prefix}"));
    let _ = fs::remove_dir_all(&workdir);
    let mut s = ScaleOut {
        prefix,
        manifests_dir: workdir.join("manifests"),
        workdir,
        bins: Binaries::locate()?,
        controls: vec![],
        gateways: (1..=GATEWAYS).map(|_| None).collect(),
        birds: (1..=GATEWAYS).map(|_| None).collect(),
        router_bird: None,
        mirror: None,
        topology_up: false,
        passed: false,
    };
    let manifests_dir = s.manifests_dir.clone();
    fs::create_dir_all(&manifests_dir)?;
    fs::write(manifests_dir.join("services.yaml"), manifests())?;
    write_service_file(&manifests_dir, "gone", GONE_VIP, "10.96.0.11", &["10.70.0.11", "10.70.0.12", "10.70.0.13"])?;

    s.topology_up = true;
    let out = output_with_timeout(
        Command::new("bash").arg(repo_root().join("scripts/topology-scale-out")).args(["up", &s.prefix]),
        COMMAND_TIMEOUT,
    )?;
    ensure!(
        out.status.success(),
        "topology-scale-out up: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let router_conf = s.workdir.join("router-bird.conf");
    fs::write(&router_conf, router_bird_config())?;
    s.router_bird =
        Some(bird(&s, "router", &router_conf, &s.workdir.join("router-bird.ctl"), &s.workdir.join("router-bird.log"))?);

    let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let birds_started = Instant::now();
    for n in 1..=GATEWAYS {
        let gw = s.gw_dir(n);
        fs::create_dir_all(&gw)?;
        let config = gw.join("gateway.toml");
        fs::write(&config, gateway_config(&s, n))?;
        let mut control = Command::new(&s.bins.control);
        control.arg("run").arg("--config").arg(&config).arg("--manifests").arg(&manifests_dir);
        control.env("RUST_LOG", &log_level).env("NO_COLOR", "1");
        s.controls.push(Some(Daemon::spawn(&format!("torii-control {n}"), control, &gw.join("control.log"))?));
        start_gateway(&mut s, n, true)?;
    }
    progress(
        "0 start",
        format!(
            "topology, {GATEWAYS} × (torii-control, torii-gateway, BIRD) and the router's BIRD started; work dir {}",
            s.workdir.display()
        ),
    );

    // 1. Announced VIPs are multipath routes on the router.
    const STEP1: &str = "1 VIPs announced, multipath";
    let all = all_hops();
    wait_next_hops(&s, STEP1, WEB_VIP, &all)?;
    let learned = birds_started.elapsed();
    wait_next_hops(&s, STEP1, LB_VIP, &all)?;
    wait_next_hops(&s, STEP1, GONE_VIP, &all)?;
    for vip in [EMPTY_VIP, CLUSTER_IP] {
        let hops = router_next_hops(&s, vip)?;
        if !hops.is_empty() {
            return Err(s.fail(STEP1, format!("{vip} must not be announced, the router routes it via {hops:?}")));
        }
    }
    progress(STEP1, format!("{WEB_VIP}, {LB_VIP}, {GONE_VIP} via {all:?} {:.1} s after the gateways started; {EMPTY_VIP} (no endpoint) and {CLUSTER_IP} (ClusterIP) not announced", learned.as_secs_f64()));

    // 2. Clients reach the VIP through every gateway; all pick the same endpoint.
    const STEP2: &str = "2 same choice everywhere";
    let tables = (1..=GATEWAYS).map(|n| published_table(&s, n)).collect::<Result<Vec<_>>>()?;
    for t in &tables[1..] {
        compare_tables(&s, STEP2, &tables[0], t)?;
    }
    fresh_ports(&s, 0)?;
    let mut through = vec![0usize; usize::from(GATEWAYS)];
    for i in 0..60 {
        let mut conn = HttpConn::connect(&s.ns("client"), SocketAddrV4::new(WEB_VIP, 80), Duration::from_secs(3))
            .map_err(|e| s.fail(STEP2, format!("connection {i}: {e}")))?;
        let r = conn.get("/").map_err(|e| s.fail(STEP2, format!("connection {i}: GET: {e}")))?;
        let sport = conn.local_addr().port();
        let want = pick(&tables[0], CLIENT.into(), sport, WEB_VIP.into()).context("gateway 1's table picks nothing")?;
        let want_name = format!(
            "web{}",
            match want.0 {
                IpAddr::V4(a) => a.octets()[3] - 10,
                IpAddr::V6(_) => 0,
            }
        );
        let gateway = r.client.as_deref().and_then(gateway_of);
        if r.status != 200 || r.body != want_name || gateway.is_none() {
            return Err(s.fail(
                STEP2,
                format!(
                    "connection {i} (sport {sport}): HTTP {} from {:?} via {:?}, the tables pick {want_name} ({want:?})",
                    r.status, r.body, r.client
                ),
            ));
        }
        through[usize::from(gateway.unwrap_or(1) - 1)] += 1;
    }
    if through.contains(&0) {
        return Err(s.fail(STEP2, format!("60 connections did not use every gateway: {through:?}")));
    }
    progress(
        STEP2,
        format!("60 connections, each answered by the endpoint the tables pick; carried by the gateways {through:?}"),
    );

    // 3. A new Service is announced; a Service without endpoints is withdrawn.
    const STEP3: &str = "3 Service created / emptied";
    write_service_file(&manifests_dir, "late", LATE_VIP, "10.96.0.14", &["10.70.0.13"])?;
    let created = wait_next_hops(&s, STEP3, LATE_VIP, &all)?;
    write_service_file(&manifests_dir, "gone", GONE_VIP, "10.96.0.11", &[])?;
    let emptied = wait_next_hops(&s, STEP3, GONE_VIP, &[])?;
    wait_next_hops(&s, STEP3, WEB_VIP, &all)?;
    progress(STEP3, format!("Service created → route via the {GATEWAYS} gateways on the router in {:.2} s; last endpoint removed → route withdrawn in {:.2} s", created.as_secs_f64(), emptied.as_secs_f64()));

    // 4. Drain and kill, plain and resilient.
    step_disruptions(&mut s)?;

    // 5. The router kernel's multipath with three next hops, plain and resilient.
    step_multipath_disruption(&s)?;

    progress("done", format!("all steps passed in {:.1} s", start.elapsed().as_secs_f64()));
    s.passed = true;
    Ok(())
}

/// A front door as the tables are compared: address, port, protocol, its Service's
/// backends and Maglev ring.
type Door = (IpAddr, u16, u8, Vec<(IpAddr, u16)>, Vec<u32>);

/// The two gateways' tables have the same front doors, backends and Maglev rings, and
/// pick the same endpoint for 20 000 pseudo-random flows.
fn compare_tables(s: &ScaleOut, step: &str, t1: &Table, t2: &Table) -> Result<()> {
    let doors = |t: &Table| -> Vec<Door> {
        (0..t.frontends().len())
            .filter_map(|i| {
                let f = t.frontend_at(i)?;
                let raw = &t.frontends()[i];
                let svc = t.service(f.service)?;
                let backends = svc.backends.iter().map(|b| (addr_from16(b.addr), b.port.get())).collect();
                Some((addr_from16(raw.addr), raw.port.get(), raw.protocol, backends, svc.ring.iter().collect()))
            })
            .collect()
    };
    let (d1, d2) = (doors(t1), doors(t2));
    if d1 != d2 {
        return Err(s.fail(step, format!("the gateways' tables differ:\n{d1:?}\n{d2:?}")));
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let client = IpAddr::V4(Ipv4Addr::from((x >> 32) as u32));
        let sport = (x & 0xffff) as u16;
        let (a, b) = (pick(t1, client, sport, WEB_VIP.into()), pick(t2, client, sport, WEB_VIP.into()));
        if a != b || a.is_none() {
            return Err(s.fail(step, format!("flow {client}:{sport}: gateway 1 picks {a:?}, gateway 2 {b:?}")));
        }
    }
    progress(
        step,
        format!(
            "{} front doors with identical backends and rings; 20 000 flows pick the same endpoint on both",
            d1.len()
        ),
    );
    Ok(())
}

/// Counts, with the router's own kernel, how many established flows change next hop when
/// one of three next hops goes away: a plain multipath route (what BIRD installs) and a
/// resilient next-hop group (`ip nexthop … type resilient`). Three static next hops on a
/// veth in the router's namespace, 3 000 flows, `ip route get` before and after.
fn step_multipath_disruption(s: &ScaleOut) -> Result<()> {
    const STEP: &str = "5 multipath disruption (kernel)";
    let ns = s.ns("router");
    let run = |args: &str| in_ns(&ns, &args.split_whitespace().collect::<Vec<_>>());
    run("ip link add mp0 type veth peer name mp1")?;
    run("ip link set mp0 up")?;
    run("ip link set mp1 up")?;
    run("ip addr add 10.98.0.1/24 dev mp0")?;
    let flows: Vec<u16> = (0..3000).map(|i| 10_000 + i).collect();
    let get = |vip: &str| -> Result<Vec<Option<Ipv4Addr>>> {
        let mut batch = String::new();
        for p in &flows {
            let _ = writeln!(batch, "route get {vip} from {CLIENT} iif c0 ipproto tcp sport {p} dport 80");
        }
        ip_batch(s, &ns, &batch)
    };
    let moved = |before: &[Option<Ipv4Addr>], after: &[Option<Ipv4Addr>], gone: Ipv4Addr| {
        let survivors: Vec<usize> = (0..before.len()).filter(|&i| before[i] != Some(gone)).collect();
        let moved = survivors.iter().filter(|&&i| before[i] != after[i]).count();
        (moved, survivors.len())
    };
    let gone = Ipv4Addr::new(10, 98, 0, 11);
    // Plain multipath (hash-threshold, as BIRD's and FRR's routes are).
    run("ip route add 192.0.2.1/32 nexthop via 10.98.0.11 nexthop via 10.98.0.12 nexthop via 10.98.0.13")?;
    let before = get("192.0.2.1")?;
    run("ip route replace 192.0.2.1/32 nexthop via 10.98.0.12 nexthop via 10.98.0.13")?;
    let after = get("192.0.2.1")?;
    let (plain_moved, plain_of) = moved(&before, &after, gone);
    // A resilient group of 240 buckets.
    for h in 1..=3 {
        run(&format!("ip nexthop add id {h} via 10.98.0.1{h} dev mp0"))?;
    }
    run("ip nexthop add id 10 group 1/2/3 type resilient buckets 240 idle_timer 60")?;
    run("ip route add 192.0.2.2/32 nhid 10")?;
    let before = get("192.0.2.2")?;
    run("ip nexthop replace id 10 group 2/3 type resilient buckets 240 idle_timer 60")?;
    let after = get("192.0.2.2")?;
    let (res_moved, res_of) = moved(&before, &after, gone);
    let _ = run("ip link del mp0");
    let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    progress(
        STEP,
        format!(
            "one of 3 next hops removed: flows on the 2 others that changed next hop: plain multipath {plain_moved}/{plain_of} \
             ({:.1} %), resilient group {res_moved}/{res_of} ({:.1} %)",
            pct(plain_moved, plain_of),
            pct(res_moved, res_of)
        ),
    );
    ensure!(res_moved == 0, "a resilient group moved {res_moved} flows of surviving next hops");
    ensure!(plain_moved > 0, "plain multipath moved no flow of a surviving next hop ({plain_of} flows)");
    Ok(())
}
