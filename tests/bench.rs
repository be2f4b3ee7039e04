//! The smoke test of torii-bench, the line-rate harness (benches/torii-bench): a few
//! seconds of UDP, then of TCP (each flow opened with a handshake through the gateway),
//! then of new TCP connections (handshake and RST through the gateway, each reopening a
//! closed flow), at a fixed low rate through the real torii-gateway (on DPDK's
//! `net_virtio_user`, with torii-control serving the manifests torii-bench writes), and
//! through testpmd's io forwarding when `dpdk-testpmd` is installed. It asserts that
//! nothing was lost, that every frame passed torii-bench's checks (addresses, ports,
//! MACs, one SNAT port per established flow, every checksum), that every connection was
//! established and closed, and that the JSON result is well formed. It measures nothing: the rate is far below what either device forwards,
//! so loss here is a bug, not a slow machine.
//!
//! Cost: about 25–30 s of wall time (measured 26.5, 31 and 30 s under nextest on a 2-CPU
//! machine at load 11–18: three DPDK processes start; per test, 1000 flows warmed up —
//! for connections, closed and reopened — and one 3-second trial per device). The DPDK two-process tests run one at a time
//! (.config/nextest.toml, group `dpdk-pipe`), so they do not share CPUs and hugepages.
//!
//! A second, shorter run covers IPv6 and the two-armed topology together: UDP over IPv6
//! (the gateway resolving the endpoints and clients by Neighbor Discovery, torii-bench
//! answering) with the clients on the gateway's front link and the endpoints on its back
//! one, 100 flows, one 1-second trial per device; about 10 s (measured 9.8 s at load 7.5).
//! Needs DPDK (skipped, loudly, when it is not installed); not root.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use torii_integration::{dpdk_unavailable, output_with_timeout, print_skipped, Binaries};

/// Flows, rate (client requests/s) and trial length of the smoke run.
const FLOWS: u64 = 1000;
const RATE: u64 = 1000;
const TRIAL_S: u64 = 3;

fn testpmd_installed() -> bool {
    Command::new("dpdk-testpmd").arg("--version").output().is_ok()
}

/// Skips (returns `None`) where DPDK is unavailable; otherwise the torii-bench binary and a
/// fresh work directory `torii-it<pid>-<tag>`.
fn prepare(test: &str, tag: &str) -> Result<Option<(PathBuf, PathBuf)>> {
    if let Some(reason) = dpdk_unavailable() {
        print_skipped(test, &reason);
        return Ok(None);
    }
    let bins = Binaries::locate()?;
    let bench = bins.gateway.with_file_name("torii-bench");
    if !bench.is_file() {
        bail!("{} not found: run `cargo build --release --workspace --bins` first", bench.display());
    }
    let workdir = std::env::temp_dir().join(format!("torii-it{}-{tag}", std::process::id()));
    let _ = fs::remove_dir_all(&workdir);
    fs::create_dir_all(&workdir)?;
    Ok(Some((bench, workdir)))
}

/// Runs torii-bench (`what` names the run in the log) and reads its JSON result: the
/// parsed result, its text and torii-bench's stderr.
fn run(cmd: &mut Command, result: &Path, what: &str, timeout: Duration) -> Result<(Value, String, String)> {
    let start = Instant::now();
    let out = output_with_timeout(cmd, timeout)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("[bench] torii-bench{what} took {:.1} s:\n{stdout}", start.elapsed().as_secs_f64());
    if !out.status.success() {
        bail!("torii-bench failed ({}):\n{stdout}\n{stderr}", out.status);
    }
    let text = fs::read_to_string(result).with_context(|| format!("read {}", result.display()))?;
    let r: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", result.display()))?;
    Ok((r, text, stderr))
}

#[test]
fn torii_bench_smoke_through_the_gateway() -> Result<()> {
    let Some((bench, workdir)) = prepare("torii_bench_smoke_through_the_gateway", "bench")? else {
        return Ok(());
    };
    let result = workdir.join("result.json");
    let baseline = testpmd_installed();
    if !baseline {
        eprintln!("[bench] dpdk-testpmd not found: torii only (scripts/setup installs Debian's dpdk)");
    }
    let mut cmd = Command::new(&bench);
    cmd.args(["--protocols", "udp,tcp", "--flows", &FLOWS.to_string()])
        .args(["--fixed-rate", &RATE.to_string(), "--trial-s", &TRIAL_S.to_string()])
        .args(["--check-every", "1", "--checksum-every", "1", "--baseline", if baseline { "io-fwd" } else { "none" }])
        .arg("--out")
        .arg(&result)
        .arg("--workdir")
        .arg(workdir.join("run"));
    let (r, text, stderr) = run(&mut cmd, &result, "", Duration::from_secs(110))?;
    check_result(&r, baseline).with_context(|| format!("result {}:\n{text}\nstderr:\n{stderr}", result.display()))?;
    // The latency plot of the fixed-rate trials (no search: no throughput plot).
    let plot = workdir.join("result-latency.svg");
    let svg = fs::read_to_string(&plot).with_context(|| format!("read {}", plot.display()))?;
    ensure!(
        svg.starts_with("<svg") && svg.contains("torii tcp connections 1000 flows"),
        "{} is not the plot",
        plot.display()
    );
    let _ = fs::remove_dir_all(&workdir);
    Ok(())
}

/// IPv6 and two-armed: UDP over IPv6 through the gateway's front and back links (and
/// testpmd's two paired ports), every frame and checksum checked.
#[test]
fn torii_bench_smoke_ipv6_two_armed() -> Result<()> {
    let Some((bench, workdir)) = prepare("torii_bench_smoke_ipv6_two_armed", "bench6")? else {
        return Ok(());
    };
    let result = workdir.join("result.json");
    let baseline = testpmd_installed();
    let mut cmd = Command::new(&bench);
    cmd.args(["--families", "ipv6", "--topology", "two-armed", "--protocols", "udp", "--tests", "throughput"])
        .args(["--flows", "100", "--fixed-rate", &RATE.to_string(), "--trial-s", "1"])
        .args(["--check-every", "1", "--checksum-every", "1", "--baseline", if baseline { "io-fwd" } else { "none" }])
        .arg("--out")
        .arg(&result)
        .arg("--workdir")
        .arg(workdir.join("run"));
    let (r, text, stderr) = run(&mut cmd, &result, " (IPv6, two-armed)", Duration::from_secs(60))?;
    let check = || -> Result<()> {
        ensure!(
            r["ok"] == true && r["bad_frames"] == 0,
            "checks failed: ok {}, bad_frames {}",
            r["ok"],
            r["bad_frames"]
        );
        let runs = r["runs"].as_array().context("runs is not an array")?;
        ensure!(runs.len() == 1, "{} runs, expected 1", runs.len());
        let run = &runs[0];
        ensure!(
            run["ip"] == "ipv6" && run["protocol"] == "udp" && run["frame_size"] == "84" && run["flows"] == 100,
            "run: {run}"
        );
        // The gateway resolved every endpoint and client by Neighbor Discovery.
        let answered: u64 = run["duts"][0]["warmup"]
            .as_array()
            .context("warmup")?
            .iter()
            .filter_map(|w| w["arp_answered"].as_u64())
            .sum();
        ensure!(answered > 0, "no Neighbor Solicitation answered");
        check_run(run, baseline, RATE)
    };
    check().with_context(|| format!("result {}:\n{text}\nstderr:\n{stderr}", result.display()))?;
    let _ = fs::remove_dir_all(&workdir);
    Ok(())
}

fn check_result(r: &Value, baseline: bool) -> Result<()> {
    ensure!(r["tool"] == "torii-bench" && r["schema"] == 2, "not a torii-bench schema 2 result");
    ensure!(r["ok"] == true && r["bad_frames"] == 0, "checks failed: ok {}, bad_frames {}", r["ok"], r["bad_frames"]);
    ensure!(r["machine"]["cpu_model"].as_str().is_some_and(|s| !s.is_empty()), "no CPU model");
    let runs = r["runs"].as_array().context("runs is not an array")?;
    let tests: Vec<String> = runs.iter().map(|run| format!("{} {}", run["protocol"], run["test"])).collect();
    let want = [r#""udp" "throughput""#, r#""tcp" "throughput""#, r#""tcp" "connections""#];
    ensure!(tests == want, "runs {tests:?}, expected {want:?}");
    for run in runs {
        ensure!(run["flows"] == FLOWS && run["frame_size"] == "64", "run: {run}");
        check_run(run, baseline, RATE * TRIAL_S).with_context(|| format!("{} {} run", run["protocol"], run["test"]))?;
    }
    Ok(())
}

fn check_run(run: &Value, baseline: bool, expected_offered: u64) -> Result<()> {
    let tcp = run["protocol"] == "tcp";
    let connections = run["test"] == "connections";
    let duts = run["duts"].as_array().context("duts is not an array")?;
    let names: Vec<&str> = duts.iter().filter_map(|d| d["dut"].as_str()).collect();
    let want: &[&str] = if baseline { &["torii", "io-fwd"] } else { &["torii"] };
    ensure!(names == want, "devices {names:?}, expected {want:?}");
    for d in duts {
        let name = &d["dut"];
        let warmups = d["warmup"].as_array().context("warmup")?;
        ensure!(!warmups.is_empty(), "{name}: no warm-up");
        if tcp && !connections {
            // Every flow's handshake went through: its ACK reached the endpoint.
            let acks: u64 = warmups.iter().filter_map(|w| w["handshake_acks"].as_u64()).sum();
            ensure!(acks >= FLOWS, "{name}: {acks} handshake ACKs reached the endpoints for {FLOWS} flows");
        }
        let l = &d["latency"];
        let t = &l["trial"];
        let offered = t["offered"].as_u64().context("offered")?;
        // A paced trial offers rate × duration frames, give or take a burst.
        ensure!(
            offered.abs_diff(expected_offered) <= 64,
            "{name}: offered {offered}, expected about {expected_offered}"
        );
        ensure!(l["lost"] == 0 && t["received"] == offered, "{name}: lost {} of {offered}", l["lost"]);
        ensure!(t["refused"] == 0 && t["reflect_refused"] == 0 && t["bad"] == 0, "{name}: {t}");
        if connections {
            // Each connection: its SYN and its ACK reflected (as the SYN-ACK and the RST),
            // its SYN-ACK at the client, its RST (counted as received) back.
            ensure!(
                t["reflected"] == 2 * offered && t["handshake_acks"] == offered && t["syn_acks"] == offered,
                "{name}: {offered} connections: {t}"
            );
        } else {
            ensure!(t["reflected"] == offered, "{name}: reflected {} of {offered}", t["reflected"]);
        }
        if name == "torii" {
            ensure!(t["snat_changed"] == 0, "torii: a flow's SNAT port changed: {t}");
        }
        let p = &l["percentiles_ns"];
        ensure!(p["count"] == offered, "{name}: {} latency samples for {offered} replies", p["count"]);
        let (p50, p99, max) = (p["p50"].as_u64(), p["p99"].as_u64(), p["max"].as_u64());
        ensure!(
            matches!((p50, p99, max), (Some(a), Some(b), Some(c)) if 0 < a && a <= b && b <= c),
            "{name}: percentiles out of order: {p}"
        );
    }
    Ok(())
}
