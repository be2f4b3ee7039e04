//! torii-gateway on DPDK's `net_virtio_user`, against a vhost-user peer: a kernel-free
//! link between two processes (DPDK's `net_vhost` on one side, virtio-user on the other,
//! sharing memory over a unix socket).
//!
//! The peer is `torii-vhost-peer` (`src/bin/vhost_peer.rs`): it is the vhost-user server,
//! plays the client and the endpoints of the demo Services on the one link, answers the
//! gateway's ARP requests, and checks every translated frame (SNAT source, endpoint
//! destination and MAC, valid checksums) in both directions. torii-control serves
//! `configs/demo` to the gateway as usual. The gateway runs with
//! `dpdk.tx_checksum_offload = true`, so when virtio negotiates checksum offload the
//! frames' checksums are completed on the vhost side — and the peer checks them. On the
//! packed vectorised paths, whose transmit side in DPDK 22.11 leaves them incomplete, the
//! gateway must not ask for it (the test checks its log line) and keeps them in software.
//!
//! The gateway runs **two workers** on virtio-user with two queue pairs (`queues=2`, the
//! peer's `net_vhost` too), a port without RSS: the peer sends each flow's frames on both
//! queues in turn, so the gateway's software redirect must bring every frame to its flow's
//! worker, and the peer checks that no flow was served by two workers (each gateway worker
//! transmits on its own queue) and that both served flows; the test checks that the gateway
//! redirected frames.
//!
//! It runs on DPDK's default virtio paths (split rings, in order, mergeable buffers, receive
//! checksum offload) and again on each of its vectorised ones ([`VirtioRx`]; BENCHMARKS.md,
//! "DPDK's vectorised virtio paths", measures them): the split ring's SSE receive path
//! (`dpdk.rx_checksum_offload = false`) and the packed ring's AVX-512 paths; DPDK's log, at debug level for the virtio driver, must name
//! the path taken (the packed one where the CPU has AVX-512F).
//!
//! The two DPDK processes get different CPUs (peer on 0, the gateway's workers on 1), their
//! own file prefixes, and hugepages when enough are free (`--in-memory
//! --single-file-segments`; scripts/setup reserves 512), else `--no-huge`.
//! Needs DPDK (skipped, loudly, when it is not installed; a failure with
//! `TORII_REQUIRE_CAPABILITIES=1`, as `.ci/run` sets it); not root.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use torii_bench::plan::VirtioRx;
use torii_integration::{
    dpdk_unavailable, free_hugepage_bytes, print_skipped, repo_root, spawn_vhost_peer, tail, Binaries, Daemon,
    Manifests,
};

/// The line DPDK logs for the receive path the device on `paths` must take (`None`: not
/// checked). The paths themselves (device and EAL arguments) are torii-bench's
/// ([`VirtioRx`]), so that the test and the benchmark set up the same devices.
fn rx_path(paths: VirtioRx) -> Option<&'static str> {
    match paths {
        VirtioRx::Offload => None,
        VirtioRx::Vectorized => Some("using vectorized Rx path"),
        // DPDK takes it only where the CPU has AVX-512F (else the packed ring's scalar path).
        VirtioRx::Packed => fs::read_to_string("/proc/cpuinfo")
            .is_ok_and(|c| c.split_whitespace().any(|f| f == "avx512f"))
            .then_some("using packed ring vectorized Rx path"),
    }
}

/// The virtio driver's log at debug level (it names the paths it chose) where the test checks
/// the path, then torii's own level for everything else.
const PATH_LOG_ARGS: [&str; 2] = ["--log-level=pmd.net.virtio.*:debug", "--log-level=*:notice"];

/// The gateway's configuration: one interface on virtio-user carrying both the client
/// subnet and the endpoints' subnet, on the virtio paths `paths`.
fn gateway_config(
    shm_dir: &Path,
    manifests: &Path,
    socket: &Path,
    cpu: usize,
    no_huge: bool,
    paths: VirtioRx,
) -> String {
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    let mut eal: Vec<&str> = if no_huge { vec!["--no-huge", "-m", "256", "--no-shconf"] } else { vec![] };
    eal.extend(paths.eal_args());
    if paths != VirtioRx::Offload {
        eal.extend(PATH_LOG_ARGS);
    }
    let eal_args = format!("[{}]", eal.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", "));
    let rx_checksum_offload = paths.checksum_offload();
    format!(
        r#"node_name = "gateway-1"
shm_dir = {shm}
driver = "dpdk"
workers = 2

[dpdk]
eal_args = {eal_args}
cpus = [{cpu}]
fallback_to_af_packet = false
tx_checksum_offload = true
rx_checksum_offload = {rx_checksum_offload}
idle_sleep_us = 100

[[interfaces]]
name = "virtio0"
addresses = ["198.51.100.1/24", "10.70.0.1/24"]
device = "net_virtio_user0,path={socket},queues=2,cq=1,mac=02:00:00:00:00:01{devargs}"

[snat]
addresses = ["10.70.0.1"]
port_min = 1024
port_max = 65535

[control]
manifests = {manifests}
"#,
        shm = q(shm_dir),
        socket = socket.display(),
        manifests = q(manifests),
        devargs = paths.devargs(),
    )
}

#[test]
fn gateway_on_virtio_user_translates_both_ways() -> Result<()> {
    run_on_virtio_user("gateway_on_virtio_user_translates_both_ways", VirtioRx::Offload)
}

#[test]
fn gateway_on_split_vectorised_virtio_path() -> Result<()> {
    run_on_virtio_user("gateway_on_split_vectorised_virtio_path", VirtioRx::Vectorized)
}

#[test]
fn gateway_on_packed_vectorised_virtio_paths() -> Result<()> {
    run_on_virtio_user("gateway_on_packed_vectorised_virtio_paths", VirtioRx::Packed)
}

/// The exchange of the module documentation, the gateway's device on `paths`.
fn run_on_virtio_user(test: &str, paths: VirtioRx) -> Result<()> {
    if let Some(reason) = dpdk_unavailable() {
        print_skipped(test, &reason);
        return Ok(());
    }
    let bins = Binaries::locate()?;
    let peer_bin = bins.gateway.with_file_name("torii-vhost-peer");
    if !peer_bin.is_file() {
        bail!("{} not found: run `cargo build --release --workspace --bins` first", peer_bin.display());
    }
    let tag = format!("it{}-vio{}", std::process::id(), paths as u8);
    let workdir = std::env::temp_dir().join(format!("torii-{tag}"));
    let _ = fs::remove_dir_all(&workdir);
    fs::create_dir_all(&workdir)?;
    let shm_dir = std::path::PathBuf::from(format!("/dev/shm/torii-{tag}"));
    let manifests = Manifests::copy(&repo_root().join("configs/demo"), &workdir.join("manifests"))?;
    let socket = workdir.join("vhost.sock");
    // Both processes need hugepages, or neither gets them.
    // (TORII_TEST_NO_HUGE=1 forces --no-huge, to try that path by hand.)
    let no_huge = free_hugepage_bytes() < 512 << 20 || std::env::var_os("TORII_TEST_NO_HUGE").is_some();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let (peer_cpu, gateway_cpu) = (0, if cpus > 1 { 1 } else { 0 });
    let config = workdir.join("gateway.toml");
    fs::write(&config, gateway_config(&shm_dir, manifests.dir(), &socket, gateway_cpu, no_huge, paths))?;
    eprintln!(
        "[virtio] {paths:?}: work dir {}; {}; peer on CPU {peer_cpu}, gateway on CPU {gateway_cpu}",
        workdir.display(),
        if no_huge { "no hugepages (--no-huge)" } else { "hugepages" }
    );

    let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let mut control_cmd = Command::new(&bins.control);
    control_cmd
        .args(["run", "--config"])
        .arg(&config)
        .arg("--manifests")
        .arg(manifests.dir())
        .env("RUST_LOG", &log_level)
        .env("NO_COLOR", "1");
    let control = Daemon::spawn("torii-control", control_cmd, &workdir.join("control.log"))?;

    let mut peer_cmd = Command::new(&peer_bin);
    peer_cmd.arg("--socket").arg(&socket).args([
        "--cpu",
        &peer_cpu.to_string(),
        "--tcp-flows",
        "40",
        "--udp-flows",
        "10",
        "--timeout-s",
        "45",
        "--queues",
        "2",
    ]);
    if no_huge {
        peer_cmd.arg("--no-huge");
    }
    let peer_log = workdir.join("peer.log");
    let mut peer = spawn_vhost_peer(peer_cmd, &socket, &peer_log)?;

    let mut gateway_cmd = Command::new(&bins.gateway);
    gateway_cmd.arg("--config").arg(&config).env("RUST_LOG", &log_level).env("NO_COLOR", "1");
    let gateway_log = workdir.join("gateway.log");
    let mut gateway = Daemon::spawn("torii-gateway", gateway_cmd, &gateway_log)?;

    let logs = |workdir: &Path| {
        let mut s = String::new();
        for name in ["peer.log", "gateway.log", "control.log"] {
            let _ = write!(s, "\n----- last 30 lines of {name} -----\n{}\n", tail(&workdir.join(name), 30));
        }
        s
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = peer.exited() {
            break status;
        }
        if let Some(status) = gateway.exited() {
            bail!("torii-gateway exited ({status}) during the exchange{}", logs(&workdir));
        }
        if Instant::now() > deadline {
            bail!("torii-vhost-peer did not finish within 90 s{}", logs(&workdir));
        }
        sleep(Duration::from_millis(50));
    };
    let peer_out = fs::read_to_string(&peer_log).unwrap_or_default();
    if !status.success() || !peer_out.contains("OK: ") {
        bail!("torii-vhost-peer failed ({status}){}", logs(&workdir));
    }
    let gw_text = torii_integration::strip_ansi(&fs::read_to_string(&gateway_log).unwrap_or_default());
    let running = gw_text.lines().find(|l| l.contains("torii-gateway running:")).unwrap_or_default().to_string();
    if !running.contains("driver=dpdk") || !running.contains("net_virtio_user") {
        bail!("the gateway did not run on DPDK's net_virtio_user: {running:?}{}", logs(&workdir));
    }
    if let Some(path) = rx_path(paths) {
        if !gw_text.contains(path) {
            bail!("the gateway's device did not take the path asked for ({path:?}){}", logs(&workdir));
        }
    }
    let offload_left_off = gw_text.contains("TX checksum offload left off");
    if offload_left_off != (paths == VirtioRx::Packed) {
        bail!("TX checksum offload should be left off on the packed vectorised paths only{}", logs(&workdir));
    }
    for line in gw_text.lines().filter(|l| l.contains("set_rxtx_funcs()") || l.contains("left off")) {
        eprintln!("[virtio] gateway: {line}");
    }
    for line in peer_out.lines().filter(|l| l.starts_with("OK: ") || l.contains("TCP ")) {
        eprintln!("[virtio] peer: {line}");
    }
    for line in gw_text.lines().filter(|l| l.contains("DPDK port started")).chain([running.as_str()]) {
        eprintln!("[virtio] gateway: {}", line.split_once("INFO ").map_or(line, |(_, l)| l));
    }

    let stopped = gateway.stop(Duration::from_secs(5));
    if !matches!(stopped, Some((s, true)) if s.success()) {
        bail!("torii-gateway did not exit 0 on SIGTERM: {stopped:?}{}", logs(&workdir));
    }
    // Its last words: the counters of all workers, with the frames redirected between them.
    let gw_text = torii_integration::strip_ansi(&fs::read_to_string(&gateway_log).unwrap_or_default());
    let totals = gw_text.lines().find(|l| l.contains("final counters (all workers)")).unwrap_or_default();
    let redirected =
        totals.split_whitespace().find_map(|w| w.strip_prefix("redirected=")?.parse::<u64>().ok()).unwrap_or(0);
    if !running.contains("2 worker(s)") || !running.contains("redirected") || redirected == 0 {
        bail!("two workers and the software redirect expected: {running:?}; {totals:?}{}", logs(&workdir));
    }
    eprintln!("[virtio] gateway: {redirected} frames redirected between its workers");
    drop(control);
    let _ = fs::remove_dir_all(&shm_dir);
    let _ = fs::remove_dir_all(&workdir);
    Ok(())
}
