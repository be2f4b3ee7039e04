//! L2 mode: two torii gateways and a client on one bridged segment, no router
//! (`scripts/topology-l2`). Real processes only: the Kubernetes API double as its own
//! process (`torii-fake-apiserver`, serving a dual-stack Service and its EndpointSlices and
//! the Leases), and per gateway a torii-control (`--kubeconfig`, holding one
//! `coordination.k8s.io/v1` Lease per VIP for its gateway) and a torii-gateway (AF_PACKET,
//! one worker, `[l2]`); two HTTP backends (`scripts/backend.py`).
//!
//! Steps (one `#[test]`: they share the topology and the daemons):
//! 1. gateway 1 starts first and takes both VIPs' Leases; gateway 2 starts and stays
//!    silent: a raw ARP request for the VIP from the client is answered by gateway 1's MAC
//!    only; curl to both VIPs works and the client's neighbour entries (IPv4 and IPv6)
//!    hold gateway 1's MAC;
//! 2. failover: `kill -9` of gateway 1's torii-gateway and torii-control; the client sends
//!    nothing to the VIPs, yet its neighbour entries flip to gateway 2's MAC (gateway 2
//!    took the Leases once they expired and sent a gratuitous ARP and an unsolicited
//!    Neighbor Advertisement); timed from the kill; new connections succeed;
//! 3. gateway 1 comes back and does not take the VIPs back (gateway 2 holds the Leases);
//! 4. drain: SIGTERM to gateway 2's torii-gateway: its torii-control releases the Leases at
//!    once, gateway 1 takes them on its next retry and announces; the client's entries
//!    flip back (timed: the handover, far below a Lease duration); gateway 2 keeps running
//!    `drain_s` and exits 0; new connections succeed.
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
use torii_gateway::table::l2::{monotonic_ns, Ownership};
use torii_integration::{
    curl_get_timeout, netns_unavailable, output_with_timeout, print_skipped, repo_root, tail, Binaries, Daemon,
};

const VIP: &str = "198.51.100.100";
const VIP6: &str = "2001:db8:51::100";
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
  externalIPs: [198.51.100.100, \"2001:db8:51::100\"]
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

    /// Starts gateway N's torii-control and torii-gateway.
    fn start(&mut self, n: u8) -> Result<()> {
        let i = usize::from(n - 1);
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
        self.controls[i] =
            Some(Daemon::spawn("torii-control", control, &self.workdir.join(format!("gw{n}-control.log")))?);
        let mut gateway = Command::new("ip");
        gateway
            .args(["netns", "exec", &self.ns(&format!("gw{n}"))])
            .arg(&self.bins.gateway)
            .arg("--config")
            .arg(self.config_path(n))
            .env("RUST_LOG", &log_level)
            .env("NO_COLOR", "1");
        self.gateways[i] =
            Some(Daemon::spawn("torii-gateway", gateway, &self.workdir.join(format!("gw{n}-gateway.log")))?);
        Ok(())
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

    /// Who answers a broadcast ARP request for the VIP: the replies' sender MACs.
    fn arp_answerers(&self) -> Result<Vec<String>> {
        let out = output_with_timeout(
            Command::new("ip")
                .args(["netns", "exec", &self.ns("client"), "python3", "-c", ARP_PROBE, "eth0"])
                .args(["198.51.100.10", VIP]),
            COMMAND_TIMEOUT,
        )?;
        ensure!(out.status.success(), "ARP probe failed: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect())
    }

    /// New connections to both VIPs: `count` curls each, all must answer 200.
    fn connections_work(&self, step: &str, count: usize) -> Result<()> {
        for url in [format!("http://{VIP}/"), format!("http://[{VIP6}]/")] {
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
    /// hold gateway N's MAC; returns the time from `since` for each.
    fn await_flip(&self, step: &str, n: u8, since: Instant, limit: Duration) -> Result<(Duration, Duration)> {
        let (mut v4, mut v6) = (None, None);
        while since.elapsed() < limit && (v4.is_none() || v6.is_none()) {
            if v4.is_none() && self.neighbour(VIP).as_deref() == Some(mac(n).as_str()) {
                v4 = Some(since.elapsed());
            }
            if v6.is_none() && self.neighbour(VIP6).as_deref() == Some(mac(n).as_str()) {
                v6 = Some(since.elapsed());
            }
            sleep(Duration::from_millis(10));
        }
        match (v4, v6) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(self.fail(
                step,
                format!(
                    "the client's neighbour entries did not move to gateway {n} ({}) within {limit:?}: {VIP} → {:?}, \
                     {VIP6} → {:?}",
                    mac(n),
                    self.neighbour(VIP),
                    self.neighbour(VIP6)
                ),
            )),
        }
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
fn l2_mode_lease_failover_and_drain() -> Result<()> {
    let test_start = Instant::now();
    let prefix = format!("l2-{}", std::process::id());
    if let Some(reason) = netns_unavailable(&prefix) {
        print_skipped("l2_mode_lease_failover_and_drain", &reason);
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
    let vips: Vec<IpAddr> = vec![VIP.parse()?, VIP6.parse()?];

    // 1. Gateway 1 first: it takes both Leases; gateway 2 then stays silent.
    t.start(1)?;
    let took = wait_for("gateway 1 holding both VIPs", Duration::from_secs(20), || t.owned(1) == vips)
        .map_err(|e| t.fail("1 gateway 1 takes the VIPs", e))?;
    progress("1", format!("gateway 1 holds both Leases {:.2} s after its start", took.as_secs_f64()));
    t.start(2)?;
    wait_for("gateway 2 running", Duration::from_secs(10), || {
        fs::read_to_string(t.workdir.join("gw2-gateway.log")).is_ok_and(|l| l.contains("L2: candidate for 2 VIP(s)"))
    })
    .map_err(|e| t.fail("1 gateway 2 starts", e))?;
    sleep(Duration::from_millis(3 * RETRY_PERIOD_MS));
    ensure!(t.owned(2).is_empty(), t.fail("1 one owner", format!("gateway 2 holds {:?} too", t.owned(2))));
    let answerers = t.arp_answerers()?;
    ensure!(
        answerers == [mac(1)],
        t.fail("1 only the owner answers ARP", format!("ARP replies for {VIP} came from {answerers:?}"))
    );
    t.connections_work("1 connections through the owner", 5)?;
    for a in [VIP, VIP6] {
        ensure!(
            t.neighbour(a).as_deref() == Some(mac(1).as_str()),
            t.fail("1 neighbour entries", format!("{a} → {:?}, not gateway 1's {}", t.neighbour(a), mac(1)))
        );
    }
    progress("1", format!("only gateway 1 ({}) answers ARP; 10 connections OK", mac(1)));

    // 2. Failover: kill -9 both of gateway 1's processes; the client sends nothing to the
    //    VIPs while it waits.
    let killed = Instant::now();
    for d in [&mut t.gateways[0], &mut t.controls[0]] {
        d.as_mut().and_then(Daemon::kill);
    }
    let limit = Duration::from_secs(LEASE_S + 10);
    let (flip4, flip6) = t.await_flip("2 failover", 2, killed, limit)?;
    let owned_after = t.owned(2);
    ensure!(owned_after == vips, t.fail("2 failover", format!("gateway 2 holds {owned_after:?}")));
    t.connections_work("2 connections after the failover", 5)?;
    let works = killed.elapsed();
    progress(
        "2",
        format!(
            "failover after kill -9 of gateway 1: neighbour entry {VIP} → gateway 2 after {:.2} s, {VIP6} after {:.2} s \
             (Lease {LEASE_S} s, retry {RETRY_PERIOD_MS} ms); 10 new connections OK by {:.2} s",
            flip4.as_secs_f64(),
            flip6.as_secs_f64(),
            works.as_secs_f64()
        ),
    );
    ensure!(
        flip4 >= Duration::from_millis(LEASE_S * 1000 - RENEW_DEADLINE_MS / 2),
        t.fail("2 failover", format!("the entry moved after {flip4:?}, before the Lease could have expired"))
    );

    // 3. Gateway 1 returns: it does not take the VIPs back.
    t.start(1)?;
    wait_for("gateway 1 running again", Duration::from_secs(10), || {
        fs::read_to_string(t.workdir.join("gw1-gateway.log"))
            .is_ok_and(|l| l.matches("L2: candidate for 2 VIP(s)").count() >= 2)
    })
    .map_err(|e| t.fail("3 gateway 1 returns", e))?;
    sleep(Duration::from_millis(4 * RETRY_PERIOD_MS));
    ensure!(t.owned(1).is_empty(), t.fail("3 no flapping", format!("gateway 1 took {:?} back", t.owned(1))));
    let answerers = t.arp_answerers()?;
    ensure!(answerers == [mac(2)], t.fail("3 no flapping", format!("ARP replies from {answerers:?}")));
    progress("3", "gateway 1 is back and silent; gateway 2 keeps the VIPs");

    // 4. Drain gateway 2: SIGTERM to its torii-gateway only.
    let drained = Instant::now();
    let pid = t.gateways[1].as_ref().and_then(Daemon::pid).context("gateway 2's pid")?;
    let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
    ensure!(status.success(), "kill -TERM {pid}");
    let (back4, back6) = t.await_flip("4 drain", 1, drained, Duration::from_secs(LEASE_S + 10))?;
    t.connections_work("4 connections after the drain", 5)?;
    ensure!(
        back4 < Duration::from_secs(LEASE_S),
        t.fail("4 drain", format!("the handover took {back4:?}: the Lease was not released at once"))
    );
    wait_for("gateway 2 exits after drain_s", Duration::from_secs(DRAIN_S + 10), || {
        t.gateways[1].as_mut().and_then(Daemon::exited).is_some()
    })
    .map_err(|e| t.fail("4 drain", e))?;
    let exited = drained.elapsed();
    let status = t.gateways[1].as_mut().and_then(Daemon::exited).context("exit status")?;
    ensure!(status.success(), t.fail("4 drain", format!("gateway 2 exited with {status}")));
    progress(
        "4",
        format!(
            "drain of gateway 2: neighbour entry {VIP} → gateway 1 after {:.2} s, {VIP6} after {:.2} s; \
             gateway 2 exited 0 {:.2} s after SIGTERM (drain_s {DRAIN_S})",
            back4.as_secs_f64(),
            back6.as_secs_f64(),
            exited.as_secs_f64()
        ),
    );
    progress("done", format!("all steps passed in {:.1} s", test_start.elapsed().as_secs_f64()));
    t.passed = true;
    Ok(())
}
