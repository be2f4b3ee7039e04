//! L2 mode: two torii gateways and a client on one bridged segment, no router
//! (`scripts/topology-l2`). Real processes only: the Kubernetes API double as its own
//! process (`torii-fake-apiserver`, serving a dual-stack Service with eight externalIPs, its
//! EndpointSlices and the Leases), and per gateway a torii-control (`--kubeconfig`, holding
//! a member Lease and one `coordination.k8s.io/v1` Lease per VIP for its gateway) and a
//! torii-gateway (AF_PACKET, one worker, `[l2]`); two HTTP backends (`scripts/backend.py`).
//!
//! Steps (one `#[test]`: they share the topology and the daemons):
//! 1. both gateways start; the VIPs spread: each ends up held by its preferred gateway
//!    (`torii_control::l2::preferred`), both hold some; a raw ARP request for the VIP is
//!    answered by its owner's MAC only; curl to the IPv4 and IPv6 VIPs works. Call the
//!    VIP's owner A, the other B;
//! 2. A's torii-gateway dies (`kill -9`), its torii-control lives: the control sees the
//!    gateway's lock go and releases A's Leases at once; B takes them and announces; the
//!    client's neighbour entries flip to B's MAC with the client sending nothing (timed);
//!    only B answers ARP; new connections succeed;
//! 3. A's gateway returns: after a Lease duration in the live set, B hands A's preferred
//!    VIPs back (released, then taken: never two owners); only A answers ARP for the VIP;
//! 4. A's torii-control dies (`kill -9`), its gateway lives: the gateway falls silent at
//!    the deadline of its last renewal (before B may take the Lease), B takes the Leases
//!    once they expire and announces (timed); only B answers ARP; new connections succeed;
//! 5. drain: A's torii-control returns; SIGTERM to B's torii-gateway: B's control releases
//!    the Leases at once, A takes them on its next retry and announces; the client's
//!    entries flip to A (timed: far below a Lease duration); B keeps running `drain_s` and
//!    exits 0; new connections succeed.
//!
//! Leases: 3 s duration, 2 s renew deadline, 500 ms retry period (client-go's defaults are
//! 15 s / 10 s / 2 s). Needs root (prints `SKIPPED` otherwise; a failure with
//! `TORII_REQUIRE_CAPABILITIES=1`).

use std::fmt::Write as _;
use std::fs;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use torii_control::l2::preferred;
use torii_gateway::table::l2::{monotonic_ns, Ownership};
use torii_integration::{
    curl_get_timeout, netns_unavailable, output_with_timeout, print_skipped, repo_root, tail, Binaries, Daemon,
};

const VIP: &str = "198.51.100.100";
/// The Service's IPv6 externalIPs: the test follows the one ranked first for the same
/// gateway as [`VIP`] (`L2::vip6`), so that both families move in every step.
const VIPS6: [&str; 3] = ["2001:db8:51::100", "2001:db8:51::101", "2001:db8:51::102"];
/// The Service's other externalIPs (IPv4): the VIPs spread over both gateways.
const MORE_VIPS: [&str; 4] = ["198.51.100.101", "198.51.100.102", "198.51.100.103", "198.51.100.104"];
/// Lease duration (s), renew deadline and retry period (ms).
const LEASE_S: u64 = 3;
const RENEW_DEADLINE_MS: u64 = 2000;
const RETRY_PERIOD_MS: u64 = 500;
/// How long a draining gateway keeps forwarding (`l2.drain_s`).
const DRAIN_S: u64 = 2;
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

fn mac(n: u8) -> String {
    format!("02:00:00:00:51:0{n}")
}

fn progress(step: &str, message: impl std::fmt::Display) {
    eprintln!("[l2] {step}: {message}");
}

const MANIFESTS: &str = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: l2}
spec:
  type: ClusterIP
  ipFamilyPolicy: PreferDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, \"fd00:96::10\"]
  externalIPs: [198.51.100.100, \"2001:db8:51::100\", \"2001:db8:51::101\", \"2001:db8:51::102\",
    198.51.100.101, 198.51.100.102, 198.51.100.103, 198.51.100.104]
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: 8080}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-v4
  namespace: l2
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, protocol: TCP, port: 8080}
endpoints:
- addresses: [198.51.100.21]
  conditions: {ready: true}
- addresses: [198.51.100.22]
  conditions: {ready: true}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-v6
  namespace: l2
  labels: {kubernetes.io/service-name: web}
addressType: IPv6
ports:
- {name: http, protocol: TCP, port: 8080}
endpoints:
- addresses: [\"2001:db8:51::21\"]
  conditions: {ready: true}
- addresses: [\"2001:db8:51::22\"]
  conditions: {ready: true}
";

/// Sends three broadcast ARP requests for `target` from the client's eth0 (raw
/// AF_PACKET) and prints the sender MACs of the replies, sorted, space-separated.
const ARP_PROBE: &str = r"
import socket, struct, sys, time
ifname, spa, tpa = sys.argv[1], socket.inet_aton(sys.argv[2]), socket.inet_aton(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.bind((ifname, 0x0806))
mac = s.getsockname()[4]
frame = b'\xff' * 6 + mac + b'\x08\x06' + struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1) + mac + spa + b'\x00' * 6 + tpa
frame += b'\x00' * (60 - len(frame))
s.settimeout(0.05)
seen = set()
for _ in range(3):
    s.send(frame)
    end = time.time() + 0.3
    while time.time() < end:
        try:
            d = s.recv(128)
        except socket.timeout:
            continue
        if len(d) >= 42 and d[12:14] == b'\x08\x06' and d[20:22] == b'\x00\x02' and d[28:32] == tpa:
            seen.add(d[22:28].hex(':'))
print(' '.join(sorted(seen)))
";

struct L2 {
    prefix: String,
    workdir: PathBuf,
    bins: Binaries,
    kubeconfig: PathBuf,
    /// The IPv6 VIP followed (one of [`VIPS6`]).
    vip6: &'static str,
    api: Option<Daemon>,
    /// Gateway N's at index N-1.
    controls: [Option<Daemon>; 2],
    gateways: [Option<Daemon>; 2],
    topology_up: bool,
    passed: bool,
}

impl L2 {
    fn ns(&self, short: &str) -> String {
        format!("{}-{short}", self.prefix)
    }

    fn shm_dir(&self, n: u8) -> PathBuf {
        PathBuf::from(format!("/dev/shm/torii-{}-gw{n}", self.prefix))
    }

    fn config_path(&self, n: u8) -> PathBuf {
        self.workdir.join(format!("gw{n}.toml"))
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for f in ["apiserver.log", "gw1-control.log", "gw1-gateway.log", "gw2-control.log", "gw2-gateway.log"] {
            let path = self.workdir.join(f);
            let _ = write!(s, "\n----- last 25 lines of {} -----\n{}\n", path.display(), tail(&path, 25));
        }
        for n in 1..=2 {
            let owners = fs::read_to_string(self.shm_dir(n).join("l2-owners")).unwrap_or_default();
            let _ = write!(s, "\n----- gw{n} l2-owners -----\n{owners}");
        }
        s
    }

    fn fail(&self, step: &str, message: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!("step {step:?} failed: {message}\n{}", self.logs())
    }

    fn write_config(&self, n: u8) -> Result<()> {
        let text = format!(
            "node_name = \"gateway-{n}\"\nshm_dir = \"{shm}\"\ndriver = \"af_packet\"\nworkers = 1\n\n\
             [[interfaces]]\nname = \"seg\"\naddresses = [\"198.51.100.{n}/24\", \"2001:db8:51::{n}/64\"]\n\n\
             [snat]\naddresses = [\"198.51.100.{n}\", \"2001:db8:51::{n}\"]\n\n[conntrack]\ncapacity = 16384\n\n\
             [l2]\ndrain_s = {DRAIN_S}\n\n\
             [l2.lease]\nnamespace = \"l2\"\nduration_s = {LEASE_S}\nrenew_deadline_ms = {RENEW_DEADLINE_MS}\n\
             retry_period_ms = {RETRY_PERIOD_MS}\n",
            shm = self.shm_dir(n).display(),
        );
        fs::write(self.config_path(n), text).context("writing a gateway configuration")
    }

    /// Starts gateway N's torii-control.
    fn start_control(&mut self, n: u8) -> Result<()> {
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        let mut control = Command::new(&self.bins.control);
        control
            .arg("run")
            .arg("--config")
            .arg(self.config_path(n))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env("RUST_LOG", &log_level)
            .env("NO_COLOR", "1");
        self.controls[usize::from(n - 1)] =
            Some(Daemon::spawn("torii-control", control, &self.workdir.join(format!("gw{n}-control.log")))?);
        Ok(())
    }

    /// Starts gateway N's torii-gateway.
    fn start_gateway(&mut self, n: u8) -> Result<()> {
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        let mut gateway = Command::new("ip");
        gateway
            .args(["netns", "exec", &self.ns(&format!("gw{n}"))])
            .arg(&self.bins.gateway)
            .arg("--config")
            .arg(self.config_path(n))
            .env("RUST_LOG", &log_level)
            .env("NO_COLOR", "1");
        self.gateways[usize::from(n - 1)] =
            Some(Daemon::spawn("torii-gateway", gateway, &self.workdir.join(format!("gw{n}-gateway.log")))?);
        Ok(())
    }

    /// How many lines of gateway N's `process` log (`control`, `gateway`) contain `text`.
    fn log_count(&self, n: u8, process: &str, text: &str) -> usize {
        fs::read_to_string(self.workdir.join(format!("gw{n}-{process}.log"))).map_or(0, |l| l.matches(text).count())
    }

    /// The VIPs gateway N's torii-control says it holds now.
    fn owned(&self, n: u8) -> Vec<IpAddr> {
        let now = monotonic_ns();
        match Ownership::read(&self.shm_dir(n)) {
            Ok(Some(o)) => o.vips.keys().filter(|v| o.owns(**v, now)).copied().collect(),
            _ => Vec::new(),
        }
    }

    /// The client's neighbour entry for `addr`: its MAC, if it has one.
    fn neighbour(&self, addr: &str) -> Option<String> {
        let out = output_with_timeout(
            Command::new("ip").args(["-n", &self.ns("client"), "neigh", "show", addr, "dev", "eth0"]),
            COMMAND_TIMEOUT,
        )
        .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut words = text.split_whitespace();
        words.find(|w| *w == "lladdr")?;
        words.next().map(str::to_owned)
    }

    /// Who answers a broadcast ARP request for `vip`: the replies' sender MACs.
    fn arp_answerers(&self, vip: &str) -> Result<Vec<String>> {
        let out = output_with_timeout(
            Command::new("ip")
                .args(["netns", "exec", &self.ns("client"), "python3", "-c", ARP_PROBE, "eth0"])
                .args(["198.51.100.10", vip]),
            COMMAND_TIMEOUT,
        )?;
        ensure!(out.status.success(), "ARP probe failed: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect())
    }

    /// Fails `step` unless exactly gateway N's MAC answers ARP for `vip`.
    fn only_answerer(&self, step: &str, vip: &str, n: u8) -> Result<()> {
        let answerers = self.arp_answerers(vip)?;
        ensure!(answerers == [mac(n)], self.fail(step, format!("ARP replies for {vip} came from {answerers:?}")));
        Ok(())
    }

    /// New connections to both VIPs: `count` curls each, all must answer 200.
    fn connections_work(&self, step: &str, count: usize) -> Result<()> {
        for url in [format!("http://{VIP}/"), format!("http://[{}]/", self.vip6)] {
            for _ in 0..count {
                let r = curl_get_timeout(&self.ns("client"), &url, Duration::from_secs(3))
                    .map_err(|e| self.fail(step, format!("{url}: {e:#}")))?;
                if r.status != 200 {
                    return Err(self.fail(step, format!("{url}: HTTP {}", r.status)));
                }
            }
        }
        Ok(())
    }

    /// Waits (polling every 10 ms, up to `limit`) until the client's entries for both VIPs
    /// hold gateway N's MAC; returns the time from `since` for each, and the
    /// `CLOCK_MONOTONIC` ns at which gateway N's `l2-owners` was first seen holding [`VIP`].
    fn await_flip(&self, step: &str, n: u8, since: Instant, limit: Duration) -> Result<(Duration, Duration, u64)> {
        let vip: IpAddr = VIP.parse()?;
        let (mut v4, mut v6, mut took) = (None, None, None);
        while since.elapsed() < limit && (v4.is_none() || v6.is_none()) {
            if took.is_none() && self.owned(n).contains(&vip) {
                took = Some(monotonic_ns());
            }
            if v4.is_none() && self.neighbour(VIP).as_deref() == Some(mac(n).as_str()) {
                v4 = Some(since.elapsed());
            }
            if v6.is_none() && self.neighbour(self.vip6).as_deref() == Some(mac(n).as_str()) {
                v6 = Some(since.elapsed());
            }
            sleep(Duration::from_millis(10));
        }
        match (v4, v6) {
            (Some(a), Some(b)) => Ok((a, b, took.unwrap_or_else(monotonic_ns))),
            _ => Err(self.fail(
                step,
                format!(
                    "the client's neighbour entries did not move to gateway {n} ({}) within {limit:?}: {VIP} → {:?}, \
                     {} → {:?}",
                    mac(n),
                    self.neighbour(VIP),
                    self.vip6,
                    self.neighbour(self.vip6)
                ),
            )),
        }
    }

    /// Waits until every VIP is held by its preferred gateway alone; returns how long it took.
    /// Waits until gateway `n` holds every one of `vips`, after the followed VIP moved to
    /// it: A's Leases expire together, and the peer tries each once per retry period, so
    /// the last may come a few retry periods after the first (four at most, then a failure).
    fn await_all(&self, step: &str, n: u8, vips: &[IpAddr]) -> Result<()> {
        wait_for("every VIP held", Duration::from_millis(4 * RETRY_PERIOD_MS), || self.owned(n) == vips)
            .map(drop)
            .map_err(|e| self.fail(step, format!("{e}: gateway {n} holds {:?}", self.owned(n))))
    }

    fn await_balance(&self, step: &str, vips: &[IpAddr], limit: Duration) -> Result<Duration> {
        let want = |n: u8| -> Vec<IpAddr> {
            let mut v: Vec<IpAddr> = vips.iter().filter(|v| preferred_gateway(**v) == n).copied().collect();
            v.sort();
            v
        };
        wait_for("each VIP held by its preferred gateway", limit, || {
            self.owned(1) == want(1) && self.owned(2) == want(2)
        })
        .map_err(|e| {
            self.fail(step, format!("{e}: gateway 1 holds {:?}, gateway 2 {:?}", self.owned(1), self.owned(2)))
        })
    }
}

/// Which gateway (1 or 2) ranks first for `vip` (`torii_control::l2::preferred`).
fn preferred_gateway(vip: IpAddr) -> u8 {
    if preferred(vip, ["gateway-1", "gateway-2"]) == Some("gateway-1") {
        1
    } else {
        2
    }
}

impl Drop for L2 {
    fn drop(&mut self) {
        for d in self.gateways.iter_mut().chain(&mut self.controls) {
            drop(d.take());
        }
        drop(self.api.take());
        if self.topology_up {
            let _ = output_with_timeout(
                Command::new("bash").arg(repo_root().join("scripts/topology-l2")).args(["down", &self.prefix]),
                COMMAND_TIMEOUT,
            );
        }
        for n in 1..=2 {
            let _ = fs::remove_dir_all(self.shm_dir(n));
        }
        if self.passed && !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.workdir);
        } else {
            eprintln!("l2 test: logs and configuration kept in {}", self.workdir.display());
        }
    }
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Result<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if ok() {
            return Ok(start.elapsed());
        }
        sleep(Duration::from_millis(20));
    }
    bail!("{what}: not within {limit:?}")
}

#[test]
fn l2_mode_failures_balance_and_drain() -> Result<()> {
    let test_start = Instant::now();
    let prefix = format!("l2-{}", std::process::id());
    if let Some(reason) = netns_unavailable(&prefix) {
        print_skipped("l2_mode_failures_balance_and_drain", &reason);
        return Ok(());
    }
    let bins = Binaries::locate()?;
    let double_bin = bins.control.with_file_name("torii-fake-apiserver");
    ensure!(double_bin.is_file(), "{} not found: run `cargo build --release --workspace --bins`", double_bin.display());
    let workdir = std::env::temp_dir().join(format!("torii-{prefix}"));
    let _ = fs::remove_dir_all(&workdir);
    fs::create_dir_all(workdir.join("manifests"))?;
    let mut t = L2 {
        prefix: prefix.clone(),
        kubeconfig: workdir.join("kubeconfig"),
        vip6: VIPS6[0],
        workdir,
        bins,
        api: None,
        controls: [None, None],
        gateways: [None, None],
        topology_up: false,
        passed: false,
    };
    fs::write(t.workdir.join("manifests/web.yaml"), MANIFESTS)?;
    for n in 1..=2 {
        t.write_config(n)?;
    }
    t.topology_up = true;
    let out = output_with_timeout(
        Command::new("bash").arg(repo_root().join("scripts/topology-l2")).args(["up", &prefix]),
        COMMAND_TIMEOUT,
    )?;
    ensure!(out.status.success(), "topology-l2 up: {}", String::from_utf8_lossy(&out.stderr));
    let mut api = Command::new(&double_bin);
    api.arg("--manifests").arg(t.workdir.join("manifests")).arg("--kubeconfig-out").arg(&t.kubeconfig);
    t.api = Some(Daemon::spawn("torii-fake-apiserver", api, &t.workdir.join("apiserver.log"))?);
    wait_for("the API double's kubeconfig", Duration::from_secs(10), || t.kubeconfig.is_file())
        .map_err(|e| t.fail("start", e))?;
    let mut vips: Vec<IpAddr> = vec![VIP.parse()?];
    vips.extend(VIPS6.iter().map(|v| v.parse::<IpAddr>()).collect::<Result<Vec<_>, _>>()?);
    vips.extend(MORE_VIPS.iter().map(|v| v.parse::<IpAddr>()).collect::<Result<Vec<_>, _>>()?);
    vips.sort();
    ensure!(
        vips.iter().any(|v| preferred_gateway(*v) == 1) && vips.iter().any(|v| preferred_gateway(*v) == 2),
        "the test's VIPs all prefer one gateway: choose others"
    );
    let lease_limit = Duration::from_secs(LEASE_S + 10);
    let a = preferred_gateway(VIP.parse()?);
    let b = 3 - a;
    t.vip6 = VIPS6
        .into_iter()
        .find(|v| v.parse().is_ok_and(|v| preferred_gateway(v) == a))
        .context("no IPv6 VIP of the test ranks first for the IPv4 VIP's gateway: choose others")?;
    let vip6 = t.vip6;

    // 1. Both gateways start; the VIPs spread, each to its preferred gateway.
    for n in 1..=2 {
        t.start_control(n)?;
        t.start_gateway(n)?;
    }
    let balanced = t.await_balance("1 balance", &vips, Duration::from_secs(30))?;
    progress(
        "1",
        format!(
            "balanced {:.2} s after the start: gateway 1 holds {:?}, gateway 2 {:?}",
            balanced.as_secs_f64(),
            t.owned(1),
            t.owned(2)
        ),
    );
    t.only_answerer("1 only the owner answers ARP", VIP, a)?;
    t.connections_work("1 connections through the owners", 3)?;
    ensure!(
        t.neighbour(VIP).as_deref() == Some(mac(a).as_str()),
        t.fail("1 neighbour entries", format!("{VIP} → {:?}, not gateway {a}'s {}", t.neighbour(VIP), mac(a)))
    );
    progress("1", format!("only gateway {a} ({}) answers ARP for {VIP}; 6 connections OK", mac(a)));

    // 2. A's torii-gateway dies, its torii-control lives.
    let killed = Instant::now();
    t.gateways[usize::from(a - 1)].as_mut().and_then(Daemon::kill);
    let (flip4, flip6, _) = t.await_flip("2 gateway dies", b, killed, lease_limit)?;
    t.await_all("2 gateway dies", b, &vips)?;
    t.only_answerer("2 only the peer answers ARP", VIP, b)?;
    t.connections_work("2 connections after the takeover", 3)?;
    progress(
        "2",
        format!(
            "kill -9 of gateway {a}'s torii-gateway (its control alive): {VIP} → gateway {b} after {:.2} s, {vip6} \
             after {:.2} s; only gateway {b} answers ARP; 6 new connections OK by {:.2} s",
            flip4.as_secs_f64(),
            flip6.as_secs_f64(),
            killed.elapsed().as_secs_f64()
        ),
    );
    ensure!(
        flip4 < Duration::from_secs(LEASE_S),
        t.fail("2 gateway dies", format!("the takeover took {flip4:?}: the Leases were not released at once"))
    );

    // 3. A's gateway returns: B hands A's preferred VIPs back.
    t.start_gateway(a)?;
    let back = t.await_balance("3 hand back", &vips, Duration::from_secs(LEASE_S + 15))?;
    t.only_answerer("3 only the preferred answers ARP", VIP, a)?;
    progress(
        "3",
        format!(
            "gateway {a} returned: its VIPs handed back {:.2} s after its start (Lease {LEASE_S} s in the live set \
             first); only gateway {a} answers ARP for {VIP}",
            back.as_secs_f64()
        ),
    );

    // 4. A's torii-control dies, its gateway lives.
    let killed = Instant::now();
    t.controls[usize::from(a - 1)].as_mut().and_then(Daemon::kill);
    let (flip4, flip6, took_ns) = t.await_flip("4 control dies", b, killed, lease_limit)?;
    let frozen = Ownership::read(&t.shm_dir(a))?.context("gateway A's l2-owners")?;
    let until = frozen.until(VIP.parse()?);
    ensure!(
        until <= took_ns,
        t.fail("4 control dies", format!("gateway {a} owned {VIP} until {until}, gateway {b} held it from {took_ns}"))
    );
    t.await_all("4 control dies", b, &vips)?;
    ensure!(
        t.log_count(a, "gateway", "L2: answering ARP/NDP for 0 VIP(s)") >= 1,
        t.fail("4 control dies", format!("gateway {a} did not fall silent"))
    );
    t.only_answerer("4 only the peer answers ARP", VIP, b)?;
    t.connections_work("4 connections after the takeover", 3)?;
    progress(
        "4",
        format!(
            "kill -9 of gateway {a}'s torii-control (its gateway alive): gateway {a} silent {:.2} s before gateway {b} \
             took {VIP}; {VIP} → gateway {b} after {:.2} s, {vip6} after {:.2} s; only gateway {b} answers ARP",
            (took_ns - until) as f64 / 1e9,
            flip4.as_secs_f64(),
            flip6.as_secs_f64()
        ),
    );
    ensure!(
        flip4 >= Duration::from_millis(LEASE_S * 1000 - RENEW_DEADLINE_MS / 2),
        t.fail("4 control dies", format!("the entry moved after {flip4:?}, before the Lease could have expired"))
    );

    // 5. A's torii-control returns; drain B: SIGTERM to its torii-gateway only.
    let members = t.log_count(a, "control", "L2: member of the live set");
    t.start_control(a)?;
    wait_for("gateway A's control in the live set again", Duration::from_secs(10), || {
        t.log_count(a, "control", "L2: member of the live set") > members
    })
    .map_err(|e| t.fail("5 control returns", e))?;
    let drained = Instant::now();
    let pid = t.gateways[usize::from(b - 1)].as_ref().and_then(Daemon::pid).context("gateway B's pid")?;
    let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
    ensure!(status.success(), "kill -TERM {pid}");
    let (back4, back6, _) = t.await_flip("5 drain", a, drained, lease_limit)?;
    t.connections_work("5 connections after the drain", 3)?;
    ensure!(
        back4 < Duration::from_secs(LEASE_S),
        t.fail("5 drain", format!("the handover took {back4:?}: the Lease was not released at once"))
    );
    wait_for("gateway B exits after drain_s", Duration::from_secs(DRAIN_S + 10), || {
        t.gateways[usize::from(b - 1)].as_mut().and_then(Daemon::exited).is_some()
    })
    .map_err(|e| t.fail("5 drain", e))?;
    let exited = drained.elapsed();
    let status = t.gateways[usize::from(b - 1)].as_mut().and_then(Daemon::exited).context("exit status")?;
    ensure!(status.success(), t.fail("5 drain", format!("gateway {b} exited with {status}")));
    progress(
        "5",
        format!(
            "drain of gateway {b}: {VIP} → gateway {a} after {:.2} s, {vip6} after {:.2} s; gateway {b} exited 0 \
             {:.2} s after SIGTERM (drain_s {DRAIN_S})",
            back4.as_secs_f64(),
            back6.as_secs_f64(),
            exited.as_secs_f64()
        ),
    );
    progress("done", format!("all steps passed in {:.1} s", test_start.elapsed().as_secs_f64()));
    t.passed = true;
    Ok(())
}
