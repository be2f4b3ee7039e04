//! torii-gateway inside a QEMU guest, on virtio-net **PCI** devices driven by DPDK's
//! `net_virtio` PMD — the path of users who run torii in a VM with virtio-net NICs.
//!
//! `scripts/vm` boots the guest (Debian's 6.1 kernel under TCG, the host's root filesystem
//! read-only over 9p, so the guest runs the binaries of this build), binds its NICs to
//! `uio_pci_generic` and runs a script this test writes into the shared work directory:
//! torii-control and torii-gateway start in the guest (their shared memory is the guest's
//! `/dev/shm`), the script marks `ready` once the gateway runs, and stops the gateway when
//! the test creates `stop`. The guest's NICs are backed on the host by:
//!
//! - **vhost-user** ([`gateway_in_vm_on_vhost_user_translates_both_ways`]): a virtio-net
//!   PCI NIC whose back end is `torii-vhost-peer`, the kernel-free peer of
//!   `tests/virtio.rs`, which plays the client and the endpoints on the one link and checks
//!   every translated frame both ways. QEMU 7.2 offers no RSS on a vhost-user NIC (its
//!   eBPF steering exists only for taps), so the gateway runs one worker there.
//! - **taps** ([`gateway_in_vm_serves_the_demo_through_taps`]): the demo topology of
//!   `scripts/topology` with tap devices in the gateway namespace (`scripts/topology
//!   taps`), two NICs with two queues each and `rss=on` (QEMU computes the Toeplitz hash in
//!   software; DPDK's `net_virtio` sets the key and RETA over the control queue), so the
//!   gateway runs two workers with SNAT ports steered by RSS. Real curl and UDP clients in
//!   the client namespace reach the Python backends through the VIP; a VIP without
//!   endpoints answers TCP with a RST and UDP with ICMP port unreachable. The same over IPv6
//!   (SNAT ports steered by the IPv6 tuple's hash), and datagrams larger than the MTU, whose
//!   fragments the device hashes by their addresses alone, echoed whole (the receiving
//!   worker hands them to the flow's: `io::redirect::Rule::Rss`).
//!
//! Functional tests, not timings: TCG is slow (each boots a guest: about a minute on an
//! idle 2-core machine). Needs root, QEMU, the guest kernel (`scripts/setup` installs
//! both) and DPDK; without them each test prints `SKIPPED` and passes, or fails with
//! `TORII_REQUIRE_CAPABILITIES=1` (as `.ci/run` sets it).

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use torii_integration::{
    curl_get_timeout, dpdk_unavailable, free_hugepage_bytes, netns_unavailable, print_skipped, repo_root,
    require_tools, run_topology, spawn_vhost_peer, strip_ansi, tail, tcp_connect_timed, udp_connected, Binaries,
    Daemon, Manifests, ECHO_BACKEND, REJECT_VIP, WEB_BACKENDS, WEB_VIP, WEB_VIP6,
};

/// How long the guest may take from `scripts/vm run` to a running gateway (boot, 9p,
/// hugepages, EAL probing the PCI NICs — about 35 s on an idle machine under TCG).
const GUEST_READY: Duration = Duration::from_secs(300);
/// How long the guest may take to stop the gateway and power off after `stop`.
const GUEST_STOP: Duration = Duration::from_secs(60);

fn progress(test: &str, message: impl std::fmt::Display) {
    eprintln!("[vm] {test}: {message}");
}

/// Why a guest cannot be booted here, if it cannot.
fn vm_unavailable() -> Option<String> {
    if let Some(reason) = netns_unavailable("itvm") {
        return Some(reason);
    }
    if let Some(reason) = dpdk_unavailable() {
        return Some(reason);
    }
    let qemu = Command::new("qemu-system-x86_64").arg("--version").output();
    if !qemu.is_ok_and(|o| o.status.success()) {
        return Some("qemu-system-x86_64 is not installed: run scripts/setup".into());
    }
    let kernel = Path::new(&std::env::var("TORII_VM_DIR").unwrap_or_else(|_| "/var/cache/torii-vm".into()))
        .join("kernel/vmlinuz");
    if !kernel.is_file() {
        return Some(format!("no guest kernel at {}: run scripts/setup (scripts/vm kernel)", kernel.display()));
    }
    None
}

/// The guest's side of a test: start torii-control and torii-gateway on `gateway.toml` in
/// the work directory, write `ready` (or `failed`) when the gateway runs (or dies), wait
/// for `stop`, stop the gateway with SIGTERM and record its exit status in
/// `gateway.status`.
fn guest_script(bins: &Binaries) -> String {
    format!(
        r#"set -u
export RUST_LOG=${{RUST_LOG:-info}} NO_COLOR=1
{control} run --config gateway.toml --manifests manifests >control.log 2>&1 &
control=$!
{gateway} --config gateway.toml >gateway.log 2>&1 &
gateway=$!
until grep -q 'torii-gateway running:' gateway.log; do
	if ! kill -0 $gateway 2>/dev/null; then
		wait $gateway; echo "gateway exited $? before running" >failed; kill $control; exit 1
	fi
	sleep 0.2
done
echo "gateway running $(cut -d' ' -f1 /proc/uptime) s after boot"
touch ready
until [ -e stop ]; do
	kill -0 $gateway 2>/dev/null || break
	sleep 0.2
done
kill -TERM $gateway 2>/dev/null
wait $gateway
echo $? >gateway.status
kill -TERM $control
wait $control
exit 0
"#,
        control = bins.control.display(),
        gateway = bins.gateway.display()
    )
}

/// One guest running the gateway: `scripts/vm run` with `nics`, optionally inside a network
/// namespace (where its taps are). Dropping it creates `stop` and waits for the guest.
struct Guest {
    test: &'static str,
    workdir: PathBuf,
    vm: Option<Daemon>,
    passed: bool,
}

impl Guest {
    /// A work directory `/tmp/torii-<tag>` holding the demo manifests, `config` as
    /// `gateway.toml` and the guest script.
    fn prepare(test: &'static str, tag: &str, bins: &Binaries, config: impl Fn(&Path) -> String) -> Result<Self> {
        let workdir = std::env::temp_dir().join(format!("torii-{tag}"));
        let _ = fs::remove_dir_all(&workdir);
        fs::create_dir_all(&workdir).with_context(|| format!("create {}", workdir.display()))?;
        let manifests = Manifests::copy(&repo_root().join("configs/demo"), &workdir.join("manifests"))?;
        fs::write(workdir.join("gateway.toml"), config(manifests.dir()))?;
        fs::write(workdir.join("guest.sh"), guest_script(bins))?;
        Ok(Self { test, workdir, vm: None, passed: false })
    }

    /// Boots the guest (`netns`: run QEMU there), waits until the gateway runs and checks
    /// its driver ([`check_driver`](Self::check_driver)); returns the startup line.
    fn boot(&mut self, netns: Option<&str>, nics: &[String]) -> Result<String> {
        let start = Instant::now();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]);
                c.arg(repo_root().join("scripts/vm"));
                c
            }
            None => Command::new(repo_root().join("scripts/vm")),
        };
        cmd.arg("run").arg("--workdir").arg(&self.workdir).args(["--timeout", "900"]);
        for nic in nics {
            cmd.args(["--nic", nic]);
        }
        cmd.args(["--", "bash guest.sh"]);
        self.vm = Some(Daemon::spawn("scripts/vm", cmd, &self.workdir.join("vm.log"))?);
        loop {
            if self.workdir.join("ready").exists() {
                break;
            }
            if let Some(status) = self.vm.as_mut().and_then(Daemon::exited) {
                bail!("the guest exited ({status}) before the gateway ran{}", self.logs());
            }
            if start.elapsed() > GUEST_READY {
                bail!("the gateway did not run in the guest within {GUEST_READY:?}{}", self.logs());
            }
            sleep(Duration::from_millis(200));
        }
        progress(self.test, format!("gateway running {:.1} s after scripts/vm started", start.elapsed().as_secs_f64()));
        let running = self.check_driver()?;
        progress(self.test, &running);
        Ok(running)
    }

    /// The gateway's log, without colour codes.
    fn gateway_log(&self) -> String {
        strip_ansi(&fs::read_to_string(self.workdir.join("gateway.log")).unwrap_or_default())
    }

    /// The startup line, after it checked that the gateway runs DPDK's `net_virtio` PMD
    /// on PCI devices (not `net_virtio_user`, not a fallback to AF_PACKET).
    fn check_driver(&self) -> Result<String> {
        let log = self.gateway_log();
        let running = log.lines().find(|l| l.contains("torii-gateway running:")).unwrap_or_default();
        let ports: Vec<&str> = log.lines().filter(|l| l.contains("DPDK port started")).collect();
        if !running.contains("driver=dpdk")
            || running.contains("net_virtio_user")
            || ports.is_empty()
            || !ports.iter().all(|l| l.contains("pmd=net_virtio ") && l.contains("device=0000:00:"))
        {
            bail!("the gateway did not run DPDK's net_virtio on PCI devices: {running:?} {ports:?}{}", self.logs());
        }
        for line in &ports {
            progress(self.test, line.split_once("INFO ").map_or(*line, |(_, l)| l));
        }
        Ok(running.split_once("running: ").map_or(running, |(_, l)| l).to_string())
    }

    /// Creates `stop`, waits for the guest to power off, and checks that the gateway exited
    /// 0 on SIGTERM and the guest's command succeeded.
    fn finish(&mut self, test_start: Instant) -> Result<()> {
        let start = Instant::now();
        fs::write(self.workdir.join("stop"), b"")?;
        let mut vm = self.vm.take().context("no guest")?;
        let status = loop {
            if let Some(status) = vm.exited() {
                break status;
            }
            if start.elapsed() > GUEST_STOP {
                vm.stop(Duration::from_secs(5));
                bail!("the guest did not power off within {GUEST_STOP:?} of stop{}", self.logs());
            }
            sleep(Duration::from_millis(200));
        };
        let gateway = fs::read_to_string(self.workdir.join("gateway.status")).unwrap_or_default();
        if !status.success() || gateway.trim() != "0" {
            bail!(
                "the guest exited {status}, torii-gateway {:?} on SIGTERM (expected 0 and 0){}",
                gateway.trim(),
                self.logs()
            );
        }
        let (stopped, all) = (start.elapsed().as_secs_f64(), test_start.elapsed().as_secs_f64());
        progress(self.test, format!("guest powered off {stopped:.1} s after stop; test took {all:.1} s"));
        Ok(())
    }

    /// The tails of the guest's console and the gateway's and control's logs.
    fn logs(&self) -> String {
        let mut s = String::new();
        for name in ["console.log", "qemu.log", "gateway.log", "control.log"] {
            let _ = write!(s, "\n----- last 30 lines of {name} -----\n{}\n", tail(&self.workdir.join(name), 30));
        }
        s
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Some(mut vm) = self.vm.take() {
            let _ = fs::write(self.workdir.join("stop"), b"");
            let deadline = Instant::now() + Duration::from_secs(30);
            while vm.exited().is_none() && Instant::now() < deadline {
                sleep(Duration::from_millis(200));
            }
        }
        if self.passed && !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.workdir);
        } else {
            eprintln!("[vm] {}: logs kept in {}", self.test, self.workdir.display());
        }
    }
}

/// The guest gateway's configuration: `workers` workers on the guest's CPUs `cpus`, one
/// interface per `(name, PCI address, addresses)`, SNAT from 10.70.0.1, the demo manifests.
/// Checksums are offloaded to the virtio-net device (which offers it on both back ends).
/// The guest gateway's configuration: `workers` DPDK workers on `cpus`, the `interfaces`
/// (name, PCI address, addresses as a TOML array) and SNAT addresses `snat` (a TOML array).
fn gateway_config(
    manifests: &Path,
    workers: usize,
    cpus: &str,
    interfaces: &[(&str, &str, &str)],
    snat: &str,
) -> String {
    let mut toml = format!(
        "node_name = \"gateway-1\"\nshm_dir = \"/dev/shm/torii-vm\"\ndriver = \"dpdk\"\nworkers = {workers}\n\n\
         [dpdk]\ncpus = {cpus}\nfallback_to_af_packet = false\ntx_checksum_offload = true\n"
    );
    for (name, pci, addresses) in interfaces {
        let _ = write!(toml, "\n[[interfaces]]\nname = {name:?}\naddresses = {addresses}\ndevice = {pci:?}\n");
    }
    let _ =
        write!(toml, "\n[snat]\naddresses = {snat}\n\n[control]\nmanifests = {:?}\n", manifests.display().to_string());
    toml
}

#[test]
fn gateway_in_vm_on_vhost_user_translates_both_ways() -> Result<()> {
    const TEST: &str = "gateway_in_vm_on_vhost_user_translates_both_ways";
    if let Some(reason) = vm_unavailable() {
        print_skipped(TEST, &reason);
        return Ok(());
    }
    let test_start = Instant::now();
    let bins = Binaries::locate()?;
    let peer_bin = bins.gateway.with_file_name("torii-vhost-peer");
    if !peer_bin.is_file() {
        bail!("{} not found: run `cargo build --release --workspace --bins` first", peer_bin.display());
    }
    let mut guest = Guest::prepare(TEST, &format!("it{}-vm-vhost", std::process::id()), &bins, |m| {
        // One NIC carrying the client subnet and the endpoints' subnet, as tests/virtio.rs
        // has it on virtio-user; one worker (no RSS on vhost-user).
        let link = ("virtio0", "0000:00:04.0", r#"["198.51.100.1/24", "10.70.0.1/24"]"#);
        gateway_config(m, 1, "[1]", &[link], r#"["10.70.0.1"]"#)
    })?;
    let socket = guest.workdir.join("vhost.sock");

    // The peer is the vhost-user server; QEMU connects to it as the guest starts.
    let mut peer_cmd = Command::new(&peer_bin);
    peer_cmd.arg("--socket").arg(&socket).args(["--cpu", "0", "--tcp-flows", "40", "--udp-flows", "10"]);
    peer_cmd.args(["--timeout-s", &(GUEST_READY.as_secs() + 120).to_string()]);
    if free_hugepage_bytes() < 256 << 20 {
        peer_cmd.arg("--no-huge");
    }
    let peer_log = guest.workdir.join("peer.log");
    let mut peer = spawn_vhost_peer(peer_cmd, &socket, &peer_log)?;

    let nic = format!("vhost-user,path={},queues=1,mac=02:00:00:00:00:01", socket.display());
    guest.boot(None, &[nic])?;

    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = peer.exited() {
            break status;
        }
        if Instant::now() > deadline {
            bail!("torii-vhost-peer did not finish within 120 s:\n{}{}", tail(&peer_log, 30), guest.logs());
        }
        sleep(Duration::from_millis(100));
    };
    let peer_out = fs::read_to_string(&peer_log).unwrap_or_default();
    if !status.success() || !peer_out.contains("OK: ") {
        bail!("torii-vhost-peer failed ({status}):\n{}{}", tail(&peer_log, 30), guest.logs());
    }
    for line in peer_out.lines().filter(|l| l.starts_with("OK: ") || l.contains("TCP ")) {
        progress(TEST, format!("peer: {line}"));
    }
    guest.finish(test_start)?;
    guest.passed = true;
    Ok(())
}

/// Removes the topology on drop.
struct Topology(String);

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = run_topology("down", &self.0) {
            eprintln!("teardown: {e:#}");
        }
    }
}

/// Whether the echo backend answers `payload` on the connected `socket` (its name, a colon,
/// the payload) within three sends, each waiting for the socket's read timeout; replies to
/// earlier sends are skipped.
fn echoed(socket: &std::net::UdpSocket, payload: &str) -> bool {
    let expected = format!("{}:{payload}", ECHO_BACKEND.0);
    let mut buf = [0u8; 4096];
    (0..3).any(|_| {
        socket.send(payload.as_bytes()).is_ok()
            && std::iter::from_fn(|| {
                socket.recv(&mut buf).ok().map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
            })
            .any(|reply| reply == expected)
    })
}

#[test]
fn gateway_in_vm_serves_the_demo_through_taps() -> Result<()> {
    const TEST: &str = "gateway_in_vm_serves_the_demo_through_taps";
    if let Some(reason) = vm_unavailable() {
        print_skipped(TEST, &reason);
        return Ok(());
    }
    require_tools()?;
    let test_start = Instant::now();
    let bins = Binaries::locate()?;
    let prefix = format!("it{}-vm", std::process::id());
    let mut guest = Guest::prepare(TEST, &format!("{prefix}-taps"), &bins, |m| {
        let front = ("tg-front", "0000:00:04.0", r#"["198.51.100.1/24", "2001:db8:100::1/64"]"#);
        let back = ("tg-back", "0000:00:05.0", r#"["10.70.0.1/24", "fd00:70::1/64"]"#);
        gateway_config(m, 2, "[0, 1]", &[front, back], r#"["10.70.0.1", "fd00:70::1"]"#)
    })?;
    run_topology("up", &prefix)?;
    let topology = Topology(prefix.clone());
    run_topology("taps", &prefix)?;
    let nics = ["tap-front", "tap-back"].map(|tap| format!("tap,ifname={tap},queues=2,rss=on"));
    let running = guest.boot(Some(&format!("{prefix}-gw")), &nics)?;
    if !running.contains("2 worker(s)") || !running.contains("steered by RSS") {
        bail!("expected two workers with SNAT ports steered by virtio-net RSS: {running:?}{}", guest.logs());
    }

    let client = format!("{prefix}-client");
    let url = format!("http://{WEB_VIP}/");
    // The first answer may wait for ARP both ways.
    let start = Instant::now();
    loop {
        match curl_get_timeout(&client, &url, Duration::from_secs(5)) {
            Ok(r) if r.status == 200 => break,
            other if start.elapsed() > Duration::from_secs(60) => {
                bail!("no HTTP 200 from {url} within 60 s (last: {other:?}){}", guest.logs())
            }
            _ => sleep(Duration::from_millis(500)),
        }
    }
    progress(TEST, format!("first HTTP 200 from {url} after {:.1} s", start.elapsed().as_secs_f64()));

    // HTTP on new connections reaches several backends.
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for i in 1..=24 {
        let r = curl_get_timeout(&client, &url, Duration::from_secs(5))
            .with_context(|| format!("request {i}/24 to {url}{}", guest.logs()))?;
        if r.status != 200 || !WEB_BACKENDS.iter().any(|(n, _)| *n == r.body) {
            bail!(
                "request {i}/24 to {url}: HTTP {} {:?}, expected 200 from a web backend{}",
                r.status,
                r.body,
                guest.logs()
            );
        }
        *seen.entry(r.body).or_default() += 1;
    }
    if seen.len() < 2 {
        bail!("24 new connections to {url} all reached {seen:?}{}", guest.logs());
    }
    progress(TEST, format!("24 HTTP requests on new connections answered by {seen:?}"));

    // UDP round trips: a connected socket takes datagrams only from the VIP, so an answer
    // proves the reverse translation too.
    let echo = SocketAddr::new(IpAddr::V4(WEB_VIP), 7);
    let socket = udp_connected(&client, echo, Duration::from_secs(2))?;
    for i in 1..=5 {
        let payload = format!("torii-vm datagram {i}");
        if !echoed(&socket, &payload) {
            bail!("no echo of {payload:?} from {echo} in 3 tries{}", guest.logs());
        }
    }
    progress(TEST, format!("5/5 datagrams to {echo} echoed by {}", ECHO_BACKEND.0));

    // IPv6: SNAT ports steered by RSS over the IPv6 tuple (rte_thash's IPv6 helper).
    let url6 = format!("http://[{WEB_VIP6}]/");
    let start = Instant::now();
    let mut seen6 = std::collections::BTreeMap::<String, usize>::new();
    while seen6.values().sum::<usize>() < 12 {
        match curl_get_timeout(&client, &url6, Duration::from_secs(5)) {
            Ok(r) if r.status == 200 && WEB_BACKENDS.iter().any(|(n, _)| *n == r.body) => {
                *seen6.entry(r.body).or_default() += 1;
            }
            // The first answer may wait for Neighbor Discovery both ways.
            other if seen6.is_empty() && start.elapsed() < Duration::from_secs(60) => {
                let _ = other;
                sleep(Duration::from_millis(500));
            }
            other => bail!("request to {url6}: {other:?}, expected HTTP 200 from a web backend{}", guest.logs()),
        }
    }
    if seen6.len() < 2 {
        bail!("12 new IPv6 connections to {url6} all reached {seen6:?}{}", guest.logs());
    }
    progress(TEST, format!("12 HTTP requests over IPv6 answered by {seen6:?}"));

    // Datagrams larger than the links' MTU, each from a new socket (a new flow, whose
    // worker RSS chooses by its tuple): the client's fragments and the echo's fragmented
    // reply, which the device hashes by their addresses alone, reach the flow's worker, so
    // every one comes back whole. IPv4 and IPv6.
    for vip in [IpAddr::V4(WEB_VIP), IpAddr::V6(WEB_VIP6)] {
        let echo = SocketAddr::new(vip, 7);
        for i in 1..=8 {
            let socket = udp_connected(&client, echo, Duration::from_secs(2))?;
            let payload: String = format!("torii-vm fragmented datagram {i} ").repeat(100);
            if !echoed(&socket, &payload) {
                bail!("no echo of a {}-byte datagram {i} from {echo} in 3 tries{}", payload.len(), guest.logs());
            }
        }
        progress(TEST, format!("8/8 fragmented datagrams (3 kB) to {echo} echoed whole"));
    }

    // A Service without endpoints rejects: TCP with a RST, UDP with ICMP port unreachable.
    let tcp = SocketAddrV4::new(REJECT_VIP, 80);
    let (result, took) = tcp_connect_timed(&client, tcp, Duration::from_secs(3));
    match result {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
        other => bail!("TCP {tcp}: {other:?} after {took:?}, expected connection refused (a RST){}", guest.logs()),
    }
    progress(TEST, format!("TCP {tcp} refused in {:.1} ms", took.as_secs_f64() * 1e3));
    let udp = SocketAddr::new(IpAddr::V4(REJECT_VIP), 9);
    let socket = udp_connected(&client, udp, Duration::from_secs(2))?;
    let refused = (0..3).any(|_| {
        socket.send(b"torii-vm reject").is_ok()
            && matches!(socket.recv(&mut [0u8; 2048]), Err(e) if e.kind() == io::ErrorKind::ConnectionRefused)
    });
    if !refused {
        bail!("UDP {udp}: no ICMP port unreachable in 3 tries{}", guest.logs());
    }
    progress(TEST, format!("UDP {udp} → ICMP port unreachable"));

    guest.finish(test_start)?;
    // Both workers served new flows: RSS spread them over the two queues.
    let log = guest.gateway_log();
    let per_worker: Vec<&str> = log.lines().filter(|l| l.contains("final counters: ")).collect();
    for line in &per_worker {
        progress(TEST, line.split_once("final counters: ").map_or(*line, |(_, l)| l));
    }
    let busy = per_worker.iter().filter(|l| !l.contains(" new_flows=0 ")).count();
    if per_worker.len() != 2 || busy != 2 {
        bail!("expected new flows on both workers, got {per_worker:?}{}", guest.logs());
    }
    drop(topology);
    guest.passed = true;
    Ok(())
}
