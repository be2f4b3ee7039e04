//! End-to-end tests of torii on the demo topology (`scripts/topology`), with the real
//! `torii-control` and `torii-gateway` binaries, real backends (`scripts/backend.py`)
//! and real clients (curl, and Rust sockets created inside the client namespace).
//!
//! Run with `scripts/test`, or after `cargo build --release --workspace --bins`:
//! `cargo test --release -p torii-integration --test netns -- --nocapture`.
//! Needs root (namespaces); without it the topology test prints `SKIPPED` and passes, or
//! fails with `TORII_REQUIRE_CAPABILITIES=1` (as `.ci/run` sets it).
//!
//! The topology test is one `#[test]` on purpose: its steps share one topology, one
//! gateway and one long-lived connection, and run in order. Each step's failure message
//! names the step and carries the tails of the gateway's and control's logs.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;
use torii_integration::{
    curl_get, curl_get_timeout, in_netns, netns_unavailable, output_with_timeout, print_skipped, repo_root,
    require_tools, tcp_connect_timed, udp_connected, Binaries, Daemon, Harness, HttpConn, ECHO_BACKEND, METRICS_LISTEN,
    NODE_IP, NODE_PORT, REJECT_VIP, REJECT_VIP6, STICKY_VIP, STICKY_VIP6, SYN_COOKIES_ABOVE_PER_S, WEB_BACKENDS,
    WEB_VIP, WEB_VIP6,
};

/// How long the gateway may take, after start, to serve its first request.
const GATEWAY_READY: Duration = Duration::from_secs(20);
/// How long a manifest change may take to reach the data plane.
const CONVERGE: Duration = Duration::from_secs(15);
/// New-connection requests in a row that must avoid a removed backend.
const CONSECUTIVE_WITHOUT_REMOVED: usize = 20;

fn web_url() -> String {
    url_of(WEB_VIP.into(), 80)
}

/// `http://ip:port/`, with an IPv6 address in brackets.
fn url_of(ip: IpAddr, port: u16) -> String {
    format!("http://{}/", SocketAddr::new(ip, port))
}

fn is_web_backend(name: &str) -> bool {
    WEB_BACKENDS.iter().any(|(n, _)| *n == name)
}

fn progress(step: &str, message: impl std::fmt::Display) {
    eprintln!("[netns] {step}: {message}");
}

#[test]
fn demo_topology_end_to_end() -> Result<()> {
    demo_scenario("demo_topology_end_to_end", "af_packet", &format!("it{}", std::process::id()))
}

/// The same scenario with `driver = "dpdk"`: DPDK's `net_af_packet` on the gateway
/// namespace's veths (the devices configs/gateway.toml names), no fallback to AF_PACKET.
#[test]
fn demo_topology_end_to_end_dpdk() -> Result<()> {
    let test = "demo_topology_end_to_end_dpdk";
    let installed = Command::new("pkg-config").args(["--exists", "libdpdk"]).status().is_ok_and(|s| s.success());
    if !installed {
        print_skipped(test, "DPDK is not installed (pkg-config libdpdk failed): run scripts/setup");
        return Ok(());
    }
    // Its own namespaces, so that it can run beside the AF_PACKET run.
    demo_scenario(test, "dpdk", &format!("it{}-d", std::process::id()))
}

/// The demo topology end to end on `driver`, in namespaces `<prefix>-*`.
fn demo_scenario(test: &str, driver: &str, prefix: &str) -> Result<()> {
    let test_start = Instant::now();
    if let Some(reason) = netns_unavailable(prefix) {
        print_skipped(test, &reason);
        return Ok(());
    }
    require_tools()?;
    let bins = Binaries::locate()?;

    let mut h = Harness::new(prefix)?;
    if driver == "dpdk" {
        // The DPDK run keeps its flow records in huge pages (conntrack.region_dir), as a
        // gateway tuned for a million flows does; step 7b adopts them from there.
        match torii_integration::hugetlbfs_dir(prefix) {
            Ok(dir) => h.region_dir = Some(dir),
            Err(reason) => print_skipped(&format!("{test}, conntrack regions in huge pages"), &reason),
        }
    }
    h.write_config_for(driver)?;
    h.topology_up()?;
    h.start(&bins)?;
    progress(
        "start",
        format!(
            "driver {driver}; topology {prefix} up; torii-control pid {:?}, torii-gateway pid {:?}; conntrack regions in {}; work dir {}",
            h.control.as_ref().and_then(|d| d.pid()),
            h.gateway.as_ref().and_then(|d| d.pid()),
            h.region_dir.as_ref().unwrap_or(&h.shm_dir).display(),
            h.workdir.display()
        ),
    );

    step_gateway_answers(&mut h)?;
    step_driver_is(&h, driver)?;
    step_second_instances_refused(&mut h, &bins)?;
    step_new_connections_spread(&mut h, "1 new connections spread over backends", &web_url())?;
    step_reused_tuple_of_a_forgotten_connection(&mut h)?;
    let (mut pinned, pinned_backend) = step_long_lived_connection_keeps_backend(&mut h)?;
    step_forged_resets_change_nothing(&mut h, &mut pinned, &pinned_backend)?;
    step_syn_flood_does_not_displace_service(&mut h, &mut pinned, &pinned_backend)?;
    step_udp_round_trips(&mut h, "3 UDP round trips", WEB_VIP.into())?;
    step_every_worker_busy_each_flow_on_one(&mut h, driver)?;
    step_reject_without_endpoints(&mut h, "4 reject without endpoints", REJECT_VIP.into())?;
    step_new_connections_spread(&mut h, "4a IPv6: curl -6 to the IPv6 VIP", &url_of(WEB_VIP6.into(), 80))?;
    step_udp_round_trips(&mut h, "4b IPv6: UDP round trips", WEB_VIP6.into())?;
    step_reject_without_endpoints(&mut h, "4c IPv6: reject without endpoints", REJECT_VIP6.into())?;
    step_session_affinity(&mut h, "4d session affinity (ClientIP)", STICKY_VIP.into())?;
    step_session_affinity(&mut h, "4e IPv6 session affinity (ClientIP)", STICKY_VIP6.into())?;
    step_manifest_edit_while_connected(&mut h, &mut pinned, &pinned_backend)?;
    step_nodeport(&mut h)?;
    step_metrics(&mut h)?;
    step_status_counters(&mut h, &bins)?;
    step_kill_9_keeps_connections(&mut h, &bins, &mut pinned, &pinned_backend)?;
    drop(pinned);
    step_clean_shutdown(&mut h)?;

    progress("done", format!("all steps passed in {:.1} s", test_start.elapsed().as_secs_f64()));
    h.passed();
    Ok(())
}

/// Step 0: the gateway serves 203.0.113.10:80 within [`GATEWAY_READY`] of starting.
fn step_gateway_answers(h: &mut Harness) -> Result<()> {
    const STEP: &str = "0 gateway answers";
    let start = Instant::now();
    let client = h.ns("client");
    loop {
        if let Err(e) = h.check_alive() {
            return Err(h.fail(STEP, format!("{e} before the gateway answered on {WEB_VIP}:80")));
        }
        let last = match curl_get_timeout(&client, &web_url(), Duration::from_secs(1)) {
            Ok(r) if r.status == 200 => break,
            Ok(r) => format!("HTTP {} {:?}", r.status, r.body),
            Err(e) => format!("{e:#}"),
        };
        if start.elapsed() > GATEWAY_READY {
            return Err(h.fail(
                STEP,
                format!(
                    "gateway not answering on {WEB_VIP}:80 within {GATEWAY_READY:?} \
                     (last attempt: {last})"
                ),
            ));
        }
        sleep(Duration::from_millis(200));
    }
    progress(STEP, format!("first 200 after {:.2} s", start.elapsed().as_secs_f64()));
    Ok(())
}

/// The gateway's startup line names the driver the test asked for (no fallback).
fn step_driver_is(h: &Harness, driver: &str) -> Result<()> {
    const STEP: &str = "0 driver";
    let log = torii_integration::strip_ansi(&fs::read_to_string(h.workdir.join("gateway.log")).unwrap_or_default());
    let line = log.lines().find(|l| l.contains("torii-gateway running:")).unwrap_or_default();
    let wanted = format!("driver={driver}");
    if !line.split_whitespace().any(|w| w == wanted) {
        return Err(h.fail(STEP, format!("expected {wanted} in the startup line, got {line:?}")));
    }
    let shown = line.split_once("running: ").map_or(line, |(_, l)| l);
    progress(STEP, shown.split(" driver=\"").next().unwrap_or(shown));
    Ok(())
}

/// Step 0b: a second torii-gateway and a second torii-control on the same configuration
/// (so the same shared-memory directory) exit at once with an error naming the holder, and
/// the running gateway keeps serving.
fn step_second_instances_refused(h: &mut Harness, bins: &Binaries) -> Result<()> {
    const STEP: &str = "0b second gateway and control refused";
    let mut gateway = Command::new("ip");
    gateway.args(["netns", "exec", &h.ns("gw")]).arg(&bins.gateway).arg("--config").arg(&h.config);
    let mut control = Command::new(&bins.control);
    control.arg("run").arg("--config").arg(&h.config).arg("--manifests").arg(h.workdir.join("no-such-dir"));
    for (name, cmd) in [("torii-gateway", &mut gateway), ("torii-control", &mut control)] {
        let out = output_with_timeout(cmd.env("NO_COLOR", "1"), Duration::from_secs(20))
            .map_err(|e| h.fail(STEP, format!("second {name}: {e:#}")))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let wanted = format!("another {name} (pid ");
        if out.status.success() || !stderr.contains(&wanted) {
            return Err(h.fail(STEP, format!("second {name} exited {}; expected {wanted:?} in:\n{stderr}", out.status)));
        }
    }
    let r = curl_get(&h.ns("client"), &web_url()).map_err(|e| h.fail(STEP, format!("{e:#}")))?;
    if r.status != 200 {
        return Err(h.fail(STEP, format!("the first gateway stopped serving: HTTP {}", r.status)));
    }
    progress(STEP, "both exited with an error naming the holder; the first gateway still serves");
    Ok(())
}

/// New connections, one per request: `count` requests that must all get 200 from a
/// web backend. Returns the backend names in order.
fn new_connection_requests(h: &Harness, step: &str, url: &str, count: usize) -> Result<Vec<String>> {
    let client = h.ns("client");
    let mut answers = Vec::with_capacity(count);
    for i in 1..=count {
        let r = curl_get(&client, url).map_err(|e| h.fail(step, format!("request {i}/{count} to {url}: {e:#}")))?;
        if r.status != 200 || !is_web_backend(&r.body) {
            return Err(h.fail(
                step,
                format!("request {i}/{count} to {url}: HTTP {} body {:?}, expected 200 from web1..3", r.status, r.body),
            ));
        }
        answers.push(r.body);
    }
    Ok(answers)
}

fn distribution(answers: &[String]) -> BTreeMap<&str, usize> {
    let mut d = BTreeMap::new();
    for (name, _) in WEB_BACKENDS {
        d.insert(name, 0);
    }
    for a in answers {
        *d.entry(a.as_str()).or_insert(0) += 1;
    }
    d
}

/// Step 1 (and 4a over IPv6): 30 new connections to demo/web at `url` all get 200,
/// spread over ≥ 2 backends.
fn step_new_connections_spread(h: &mut Harness, step: &str, url: &str) -> Result<()> {
    let answers = new_connection_requests(h, step, url, 30)?;
    let dist = distribution(&answers);
    let distinct = dist.values().filter(|&&n| n > 0).count();
    progress(step, format!("30/30 HTTP 200 from {url}, distribution {dist:?}"));
    if distinct < 2 {
        return Err(
            h.fail(step, format!("30 new connections all went to one backend: {dist:?} (Maglev should spread them)"))
        );
    }
    if distinct < 3 {
        progress(step, "warning: only 2 of 3 backends answered (possible, but unlikely)");
    }
    Ok(())
}

/// Steps 4d and 4e: demo/sticky has `sessionAffinity: ClientIP`: 20 new connections from
/// the one client (new source ports, so the gateway's workers share them) all reach the
/// endpoint the first one reached.
fn step_session_affinity(h: &mut Harness, step: &str, vip: IpAddr) -> Result<()> {
    let url = url_of(vip, 80);
    let answers = new_connection_requests(h, step, &url, 20)?;
    let first = &answers[0];
    if answers.iter().any(|a| a != first) {
        return Err(h.fail(
            step,
            format!(
                "20 new connections from one client to {url} reached {:?}; with sessionAffinity: ClientIP \
                 all must reach the first one's endpoint ({first})",
                distribution(&answers)
            ),
        ));
    }
    progress(step, format!("20/20 new connections to {url} answered by {first}"));
    Ok(())
}

/// Step 2: one keep-alive connection, several requests, always the same backend.
fn step_long_lived_connection_keeps_backend(h: &mut Harness) -> Result<(HttpConn, String)> {
    const STEP: &str = "2 long-lived connection keeps its backend";
    let addr = SocketAddrV4::new(WEB_VIP, 80);
    let mut conn = HttpConn::connect(&h.ns("client"), addr, Duration::from_secs(2))
        .map_err(|e| h.fail(STEP, format!("connect to {addr} from the client namespace: {e}")))?;
    let mut backends = Vec::new();
    for i in 1..=5 {
        let r = conn.get("/").map_err(|e| h.fail(STEP, format!("request {i} on the keep-alive connection: {e}")))?;
        if r.status != 200 {
            return Err(h.fail(STEP, format!("request {i}: HTTP {} {:?}", r.status, r.body)));
        }
        backends.push(r.body);
    }
    let first = backends[0].clone();
    if !is_web_backend(&first) || backends.iter().any(|b| *b != first) {
        return Err(h.fail(
            STEP,
            format!("one TCP connection was answered by {backends:?}; expected one web backend throughout"),
        ));
    }
    progress(STEP, format!("5 requests on {} → {addr} all answered by {first}", conn.local_addr()));
    Ok((conn, first))
}

/// Step 1a: a client reuses the tuple of a connection that both ends forgot while the
/// gateway still holds it ESTABLISHED (nftables in the client's and the backend's
/// namespaces drop their FIN and RST, then `ss -K` destroys both sockets). The new
/// connection from the same source port (curl `--local-port`) succeeds: its SYN is ignored
/// by the stale flow and forwarded along its translation, and the backend's SYN+ACK
/// answering it brings the flow back in step (`tcp_resyncs`; Linux's resynchronisation,
/// `conntrack::resync`). Without it the client's ACK falls outside the old windows and the
/// request times out.
fn step_reused_tuple_of_a_forgotten_connection(h: &mut Harness) -> Result<()> {
    const STEP: &str = "1a a reused tuple of a connection the endpoint forgot";
    let addr = SocketAddrV4::new(WEB_VIP, 80);
    let client = h.ns("client");
    let mut conn = HttpConn::connect(&client, addr, Duration::from_secs(2))
        .map_err(|e| h.fail(STEP, format!("connect to {addr} from the client namespace: {e}")))?;
    let r = conn.get("/").map_err(|e| h.fail(STEP, format!("first request: {e}")))?;
    let backend = r.body.clone();
    let Some((snat, snat_port)) = r.client.as_deref().and_then(|c| c.rsplit_once(':')) else {
        return Err(h.fail(STEP, format!("the backend's answer names no client address: {r:?}")));
    };
    if r.status != 200 || !is_web_backend(&backend) {
        return Err(h.fail(STEP, format!("first request: HTTP {} from {backend:?}", r.status)));
    }
    let (snat, snat_port, local_port) = (snat.to_string(), snat_port.to_string(), conn.local_addr().port().to_string());
    let backend_ns = h.ns(&backend);
    let resyncs_before = counter_sum(h, "tcp_resyncs_total").map_err(|e| h.fail(STEP, e))?;
    let run = |ns: &str, args: &[&str]| -> Result<String> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).args(args);
        let out = output_with_timeout(&mut cmd, Duration::from_secs(10))?;
        if !out.status.success() {
            bail!("{ns}: {args:?}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let silence = |matching: &str| {
        format!(
            "add table inet resync_test; add chain inet resync_test out {{ type filter hook output priority 0; }}; \
             add rule inet resync_test out {matching} tcp flags & (fin | rst) != 0 drop"
        )
    };
    let forget = || -> Result<()> {
        run(&client, &["nft", &silence(&format!("tcp sport {local_port}"))])?;
        // The backends listen on IPv6 sockets: they name the SNAT address v4-mapped.
        let snat_v4 = snat.trim_start_matches("::ffff:");
        run(&backend_ns, &["nft", &silence(&format!("ip daddr {snat_v4} tcp dport {snat_port}"))])?;
        let killed_client = run(&client, &["ss", "-K", "-t", "-n", &format!("sport = :{local_port}")])?;
        let killed_backend = run(&backend_ns, &["ss", "-K", "-t", "-n", &format!("dst {snat}:{snat_port}")])?;
        for (side, killed) in [("client", killed_client), ("backend", killed_backend)] {
            if killed.lines().count() < 2 {
                bail!("ss -K destroyed no socket on the {side} side: {killed:?}");
            }
        }
        run(&client, &["nft", "delete table inet resync_test"])?;
        run(&backend_ns, &["nft", "delete table inet resync_test"])?;
        Ok(())
    };
    forget().map_err(|e| h.fail(STEP, e))?;
    drop(conn);
    let mut curl = Command::new("ip");
    curl.args(["netns", "exec", &client, "curl", "-sS", "-m", "5", "--local-port", &local_port]).args([
        "-w",
        "\n%{http_code}",
        &format!("http://{addr}/"),
    ]);
    let out = output_with_timeout(&mut curl, Duration::from_secs(10)).map_err(|e| h.fail(STEP, e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.ends_with("\n200") || text.lines().next() != Some(backend.as_str()) {
        return Err(h.fail(
            STEP,
            format!(
                "a new connection from port {local_port} to {addr}: {} {text:?} {}; expected 200 from {backend}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        ));
    }
    sleep(Duration::from_millis(1500)); // workers publish counters about once a second
    let resyncs = counter_sum(h, "tcp_resyncs_total").map_err(|e| h.fail(STEP, e))? - resyncs_before;
    if resyncs == 0 {
        return Err(h.fail(STEP, "the new connection got through but tcp_resyncs did not count it"));
    }
    progress(
        STEP,
        format!(
            "both ends forgot {client}:{local_port} → {addr} ({backend}, SNAT {snat}:{snat_port}); a new connection \
             from the same port answered by {backend}; tcp_resyncs +{resyncs}"
        ),
    );
    Ok(())
}

/// Step 2a: an attacker on the clients' link, who knows the long-lived connection's
/// addresses and ports but not its SNAT port nor its sequence numbers, cannot reset it:
/// hping3 sends (a) a RST forged as the endpoint's reply (endpoint:8080 → SNAT address)
/// to every SNAT port, and (b) RSTs with the client's own tuple at guessed sequence
/// numbers. The connection keeps answering from its backend, and the gateway counts the
/// forged reply as `wrong_link` and the blind RSTs as `tcp_out_of_window` (or forwards one
/// that falls in the window, which the backend answers with a challenge ACK).
fn step_forged_resets_change_nothing(h: &mut Harness, pinned: &mut HttpConn, backend: &str) -> Result<()> {
    const STEP: &str = "2a forged resets change nothing";
    let client = h.ns("client");
    let (_, backend_ip) = *WEB_BACKENDS.iter().find(|(n, _)| *n == backend).expect("a web backend");
    let snat = "10.70.0.1";
    let local_port = pinned.local_addr().port();
    let before = drop_counts(h, &["wrong_link", "tcp_out_of_window"]).map_err(|e| h.fail(STEP, e))?;
    let ip = |args: &[&str]| {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &client]).args(args);
        output_with_timeout(&mut cmd, Duration::from_secs(120))
    };
    // The attacker routes the SNAT address through the gateway (the client does not).
    let route = ["ip", "route", "replace", &format!("{snat}/32"), "via", &NODE_IP.to_string(), "dev", "eth0"];
    let out = ip(&route).map_err(|e| h.fail(STEP, e))?;
    if !out.status.success() {
        return Err(h.fail(STEP, format!("{route:?}: {}", String::from_utf8_lossy(&out.stderr))));
    }
    // (a) 64 512 RSTs, endpoint:8080 → SNAT:1024..65535, one every 40 µs.
    let src = backend_ip.to_string();
    let forged_reply =
        ["hping3", "-q", "-R", "-a", &src, "-s", "8080", "-k", "-p", "++1024", "-c", "64512", "-i", "u40", snat];
    // (b) 64 RSTs with the client's tuple, each at a random sequence number (hping3 draws
    // one per packet unless told one with -M).
    let sport = local_port.to_string();
    let vip = WEB_VIP.to_string();
    let blind = ["hping3", "-q", "-R", "-s", &sport, "-k", "-p", "80", "-c", "64", "-i", "u1000", &vip];
    for args in [&forged_reply[..], &blind[..]] {
        let out = ip(args).map_err(|e| h.fail(STEP, e))?;
        // hping3 exits 1 when it received no answer, which is the point here.
        if !matches!(out.status.code(), Some(0 | 1)) {
            return Err(h.fail(STEP, format!("{args:?}: {} {}", out.status, String::from_utf8_lossy(&out.stderr))));
        }
    }
    let _ = ip(&["ip", "route", "del", &format!("{snat}/32")]);
    for i in 1..=3 {
        let r = pinned
            .get("/")
            .map_err(|e| h.fail(STEP, format!("request {i} on the attacked connection after the forged RSTs: {e}")))?;
        if r.status != 200 || r.body != backend {
            return Err(
                h.fail(STEP, format!("request {i}: HTTP {} from {:?}, expected 200 from {backend}", r.status, r.body))
            );
        }
    }
    sleep(Duration::from_millis(1500)); // workers publish counters about once a second
    let after = drop_counts(h, &["wrong_link", "tcp_out_of_window"]).map_err(|e| h.fail(STEP, e))?;
    let (wrong_link, out_of_window) = (after[0] - before[0], after[1] - before[1]);
    if wrong_link == 0 || out_of_window == 0 {
        return Err(h.fail(
            STEP,
            format!("expected wrong_link and tcp_out_of_window drops, counted {wrong_link} and {out_of_window}"),
        ));
    }
    progress(
        STEP,
        format!(
            "{} forged RSTs sent; {} → {WEB_VIP}:80 answered by {backend} after them; drops: wrong_link {wrong_link}, \
             tcp_out_of_window {out_of_window}",
            64512 + 64,
            pinned.local_addr()
        ),
    );
    Ok(())
}

/// Step 2b: a SYN flood from random sources at a fixed rate (hping3, up to 10 000 SYNs a
/// second for about 10 s) displaces nothing: while it runs, the long-lived connection
/// answers a request every 100 ms with no gap over 1 s, an iperf3 stream at
/// [`STREAM_RATE`] (well below what the gateway carries) through a Service added for the
/// step (demo/stream, [`STREAM_PORT`] → web1) receives something in every 0.2 s interval
/// but for no run of empty intervals longer than 1 s (iperf3's per-interval JSON, `-R`:
/// the client counts what arrived), at least 99 of 100 new connections succeed, and the
/// tracked flows grow by no more than the SYNs admitted without cookies
/// ([`SYN_COOKIES_ABOVE_PER_S`] a second per worker, plus a burst) and the clients'
/// connections. The gateway answers SYNs beyond that rate with SYN cookies, so most of
/// curl's connections and iperf3's go through the SYN proxy (real Linux TCP at both ends:
/// the cookie handshake, the proxy's handshake with the endpoint, translated sequence
/// numbers); the counters must show cookies sent and validated. (How half-open flows give their SNAT ports up to new flows once
/// every port is taken is a pipeline test, `half_open_flows_holding_every_snat_port_…`:
/// here the flood stays below the workers' ports, so that the later steps' connections do
/// not reuse ports whose half-open connections the backends still hold.)
fn step_syn_flood_does_not_displace_service(h: &mut Harness, pinned: &mut HttpConn, backend: &str) -> Result<()> {
    const STEP: &str = "2b SYN flood displaces nothing";
    const NEW_CONNECTIONS: usize = 100;
    let client = h.ns("client");
    let evicted_before = counter_sum(h, "conntrack_evicted_total").map_err(|e| h.fail(STEP, e))?;
    let cookies_before = counter_sum(h, "syn_cookies_sent_total").map_err(|e| h.fail(STEP, e))?;
    let valid_before = counter_sum(h, "syn_cookies_valid_total").map_err(|e| h.fail(STEP, e))?;
    let flows_before = counter_sum(h, "flows").map_err(|e| h.fail(STEP, e))?;
    let workers = counter_per_worker(h, "flows").map_err(|e| h.fail(STEP, e))?.len() as u64;
    let step_start = Instant::now();
    let stream = StreamService::start(h).map_err(|e| h.fail(STEP, format!("{e:#}")))?;
    let stream_ready = step_start.elapsed();
    let flood_start = Instant::now();
    let mut flood = Command::new("ip")
        .args(["netns", "exec", &client, "hping3", "-q", "-S", "-p", "80", "--rand-source", "-i", "u100"])
        .args(["-c", "100000", &WEB_VIP.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| h.fail(STEP, format!("start hping3: {e}")))?;
    // The flood first.
    sleep(Duration::from_secs(2));
    let url = web_url();
    let sampling = std::sync::atomic::AtomicBool::new(true);
    let hr: &Harness = h;
    let (worst_gap, pinned_result, failures, iperf, flows_peak) = std::thread::scope(|s| {
        let iperf = s.spawn(|| stream_under_flood(&client));
        let flows = s.spawn(|| {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(counter_sum(hr, "flows").unwrap_or(0));
                sleep(Duration::from_millis(500));
            }
            peak
        });
        let stream = s.spawn(|| -> (Duration, io::Result<()>) {
            let start = Instant::now();
            let mut last = Instant::now();
            let mut worst = Duration::ZERO;
            while start.elapsed() < Duration::from_secs(5) {
                match pinned.get("/") {
                    Ok(r) if r.status == 200 && r.body == backend => {}
                    Ok(r) => return (worst, Err(io::Error::other(format!("HTTP {} from {:?}", r.status, r.body)))),
                    Err(e) => return (worst, Err(e)),
                }
                worst = worst.max(last.elapsed());
                last = Instant::now();
                sleep(Duration::from_millis(100));
            }
            (worst, Ok(()))
        });
        let mut failures = Vec::new();
        for i in 1..=NEW_CONNECTIONS {
            // Room for two SYN retransmissions (1 s, 3 s): a SYN lost among the flood's is
            // a retransmission, not a failed connection.
            match curl_get_timeout(&client, &url, Duration::from_secs(6)) {
                Ok(r) if r.status == 200 && is_web_backend(&r.body) => {}
                Ok(r) => failures.push(format!("#{i}: HTTP {} {:?}", r.status, r.body)),
                Err(e) => failures.push(format!("#{i}: {e:#}")),
            }
        }
        let (worst, result) = stream.join().expect("the stream thread does not panic");
        let iperf = iperf.join().expect("the iperf3 thread does not panic");
        sampling.store(false, std::sync::atomic::Ordering::Relaxed);
        let peak = flows.join().expect("the sampling thread does not panic");
        (worst, result, failures, iperf, peak)
    });
    let flood_s = flood_start.elapsed().as_secs_f64();
    let _ = flood.kill();
    let _ = flood.wait();
    drop(stream);
    sleep(Duration::from_millis(1500)); // workers publish counters about once a second
    let evicted = counter_sum(h, "conntrack_evicted_total").map_err(|e| h.fail(STEP, e))? - evicted_before;
    let cookies = counter_sum(h, "syn_cookies_sent_total").map_err(|e| h.fail(STEP, e))? - cookies_before;
    let valid = counter_sum(h, "syn_cookies_valid_total").map_err(|e| h.fail(STEP, e))? - valid_before;
    let handshakes = counter_sum(h, "syn_proxy_handshakes_total").map_err(|e| h.fail(STEP, e))?;
    if let Err(e) = pinned_result {
        return Err(h.fail(STEP, format!("the long-lived connection failed during the flood: {e}")));
    }
    if cookies == 0 || valid == 0 {
        return Err(h.fail(
            STEP,
            format!(
                "the flood engaged no SYN proxy (cookies above {SYN_COOKIES_ABOVE_PER_S} SYNs/s per worker): {cookies} \
                 cookies sent, {valid} validated (want both > 0)"
            ),
        ));
    }
    let iperf = iperf.map_err(|e| h.fail(STEP, format!("the iperf3 stream under the flood: {e:#}")))?;
    if iperf.longest_stall > Duration::from_secs(1) {
        return Err(h.fail(STEP, format!("the iperf3 stream at {STREAM_RATE} stalled under the flood: {iperf}")));
    }
    // Flows without cookies: the proxy's rate and its burst of one second's worth, per
    // worker, over the flood; plus the clients' own connections (each may also leave a
    // flow behind in TIME_WAIT).
    let flows_bound =
        workers * u64::from(SYN_COOKIES_ABOVE_PER_S) * (flood_s.ceil() as u64 + 1) + 2 * NEW_CONNECTIONS as u64 + 16;
    if flows_peak.saturating_sub(flows_before) > flows_bound {
        return Err(h.fail(
            STEP,
            format!(
                "tracked flows grew from {flows_before} to {flows_peak} during {flood_s:.1} s of flood: more than the \
                 {flows_bound} that {workers} workers admit without cookies"
            ),
        ));
    }
    if worst_gap > Duration::from_secs(1) || failures.len() > NEW_CONNECTIONS / 100 {
        return Err(h.fail(
            STEP,
            format!(
                "during the flood: longest wait on the long-lived connection {worst_gap:?}; {} of {NEW_CONNECTIONS} new \
                 connections failed: {failures:?}",
                failures.len()
            ),
        ));
    }
    progress(
        STEP,
        format!(
            "under ~10 000 SYN/s from random sources: {}/{NEW_CONNECTIONS} new connections {failures:?}, longest \
             wait on the long-lived one {:.0} ms; iperf3 -R -b {STREAM_RATE}: {iperf}; flows {flows_before} → peak \
             {flows_peak} (bound +{flows_bound}); {evicted} half-open flows evicted; {cookies} SYN cookies sent, \
             {valid} validated, {handshakes} proxied handshakes completed; step {:.1} s (demo/stream ready in {:.1} s)",
            NEW_CONNECTIONS - failures.len(),
            worst_gap.as_secs_f64() * 1000.0,
            step_start.elapsed().as_secs_f64(),
            stream_ready.as_secs_f64()
        ),
    );
    Ok(())
}

/// The rate of step 2b's iperf3 stream (`iperf3 -b`): well below what the gateway carries
/// on veths, so that a stall is the flood's doing, not the link's.
const STREAM_RATE: &str = "20M";
/// The port of step 2b's demo/stream Service (iperf3's default), on [`WEB_VIP`] and on web1.
const STREAM_PORT: u16 = 5201;
/// iperf3's reporting interval in step 2b, seconds.
const STREAM_INTERVAL_S: f64 = 0.2;

/// Service demo/stream, `WEB_VIP:STREAM_PORT` → web1:`STREAM_PORT` (one endpoint: iperf3's
/// control and data connections must meet one server), for as long as it lives: a manifest
/// added to the harness's manifests (removed on drop) and an `iperf3 -s` in web1's
/// namespace (killed on drop).
struct StreamService {
    manifest: std::path::PathBuf,
    server: std::process::Child,
}

impl StreamService {
    /// Adds the Service, starts the server, and waits (up to [`CONVERGE`]) until a
    /// connection to it through the gateway succeeds.
    fn start(h: &Harness) -> Result<Self> {
        let dir = h.manifests.as_ref().context("manifests copy")?.dir().to_path_buf();
        let (_, web1) = WEB_BACKENDS[0];
        let manifest = dir.join("stream.yaml");
        let yaml = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: stream, namespace: demo}}\nspec:\n  type: ClusterIP\n  \
             clusterIP: 10.96.0.52\n  externalIPs: [{WEB_VIP}]\n  ports:\n  - {{name: iperf, protocol: TCP, port: \
             {STREAM_PORT}, targetPort: {STREAM_PORT}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata:\n  name: stream-1\n  namespace: demo\n  labels: {{kubernetes.io/service-name: stream}}\n\
             addressType: IPv4\nports:\n- {{name: iperf, protocol: TCP, port: {STREAM_PORT}}}\nendpoints:\n\
             - addresses: [{web1}]\n  conditions: {{ready: true, serving: true, terminating: false}}\n"
        );
        let server = Command::new("ip")
            .args(["netns", "exec", &h.ns("web1"), "iperf3", "-s", "-p", &STREAM_PORT.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("start iperf3 -s in web1")?;
        // Written whole, then renamed: the watcher never sees half a manifest.
        let tmp = dir.join(".stream.yaml.tmp");
        fs::write(&tmp, yaml).and_then(|()| fs::rename(&tmp, &manifest)).context("write demo/stream")?;
        let service = StreamService { manifest, server };
        let start = Instant::now();
        let addr = SocketAddrV4::new(WEB_VIP, STREAM_PORT);
        loop {
            match tcp_connect_timed(&h.ns("client"), addr, Duration::from_millis(500)).0 {
                Ok(_) => return Ok(service),
                Err(e) if start.elapsed() > CONVERGE => {
                    bail!("no connection to {addr} (demo/stream → iperf3 on web1) within {CONVERGE:?}: {e}")
                }
                Err(_) => sleep(Duration::from_millis(200)),
            }
        }
    }
}

impl Drop for StreamService {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.manifest);
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// What iperf3 reported for a stream: bytes received per interval.
struct StreamReport {
    /// Intervals reported.
    intervals: usize,
    /// The longest run of consecutive intervals in which nothing arrived.
    longest_stall: Duration,
    /// The slowest interval's rate, bits a second.
    slowest_bps: f64,
    /// The whole stream's rate, bits a second.
    mean_bps: f64,
}

impl std::fmt::Display for StreamReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} intervals of {STREAM_INTERVAL_S} s, longest stall {} ms, slowest interval {:.1} Mb/s, mean {:.1} Mb/s",
            self.intervals,
            self.longest_stall.as_millis(),
            self.slowest_bps / 1e6,
            self.mean_bps / 1e6
        )
    }
}

/// Runs `iperf3 -R -b STREAM_RATE -t 5 -i 0.2 -J` from the client namespace to demo/stream
/// and reads its intervals.
fn stream_under_flood(client: &str) -> Result<StreamReport> {
    let out = output_with_timeout(
        Command::new("ip").args(["netns", "exec", client, "iperf3", "-c", &WEB_VIP.to_string()]).args([
            "-p",
            &STREAM_PORT.to_string(),
            "-R",
            "-b",
            STREAM_RATE,
            "-t",
            "5",
            "-i",
            &STREAM_INTERVAL_S.to_string(),
            "-J",
            "--connect-timeout",
            "6000",
        ]),
        Duration::from_secs(20),
    )?;
    let json: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("iperf3 printed no JSON: {}", String::from_utf8_lossy(&out.stderr)))?;
    if let Some(e) = json.get("error") {
        bail!("iperf3: {e}");
    }
    let intervals = json["intervals"].as_array().context("iperf3 JSON without intervals")?;
    let (mut run, mut longest, mut slowest) = (0.0f64, 0.0f64, f64::MAX);
    for i in intervals {
        let (bytes, seconds) = (i["sum"]["bytes"].as_f64().unwrap_or(0.0), i["sum"]["seconds"].as_f64().unwrap_or(0.0));
        run = if bytes == 0.0 { run + seconds } else { 0.0 };
        longest = longest.max(run);
        if seconds > 0.0 {
            slowest = slowest.min(bytes * 8.0 / seconds);
        }
    }
    if intervals.is_empty() {
        bail!("iperf3 reported no interval");
    }
    Ok(StreamReport {
        intervals: intervals.len(),
        longest_stall: Duration::from_secs_f64(longest),
        slowest_bps: slowest,
        mean_bps: json["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0),
    })
}

/// A per-worker counter (`torii_gateway_<name>{worker="N"}`) summed over workers.
fn counter_sum(h: &Harness, name: &str) -> Result<u64> {
    let metrics = curl_get(&h.ns("gw"), &format!("http://{METRICS_LISTEN}/metrics"))?;
    let prefix = format!("torii_gateway_{name}{{worker=");
    Ok(metrics
        .body
        .lines()
        .filter(|l| l.starts_with(prefix.as_str()))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()))
        .sum())
}

/// A per-worker counter (`torii_gateway_<name>{worker="N"}`), worker by worker.
fn counter_per_worker(h: &Harness, name: &str) -> Result<Vec<u64>> {
    let metrics = curl_get(&h.ns("gw"), &format!("http://{METRICS_LISTEN}/metrics"))?;
    let prefix = format!("torii_gateway_{name}{{worker=\"");
    let mut per: BTreeMap<usize, u64> = BTreeMap::new();
    for l in metrics.body.lines() {
        let Some(rest) = l.strip_prefix(prefix.as_str()) else { continue };
        let Some((w, v)) = rest.split_once("\"} ") else { continue };
        if let (Ok(w), Ok(v)) = (w.parse(), v.parse()) {
            per.insert(w, v);
        }
    }
    Ok(per.into_values().collect())
}

/// Step 3a: flows spread over both workers and each is served by one. 40 UDP flows
/// (new source ports) to demo/echo make three round trips each; every worker creates
/// some of them (every worker busy: on DPDK's `net_af_packet`, which has no usable RSS,
/// through the software redirect, which must have moved frames), and the workers create
/// exactly one conntrack flow per flow between them — a frame of a flow reaching a worker
/// other than its owner would create a second flow there (original direction) or find
/// none (reply: the round trip fails). Each flow's socket is bound to its own port below
/// the ephemeral range (20000 + k): with port 0, the kernel could give a socket the port of
/// one closed just before, whose flow the gateway still tracks, and that flow was then
/// found, not created (a CI run counted 38 of 40).
fn step_every_worker_busy_each_flow_on_one(h: &mut Harness, driver: &str) -> Result<()> {
    const STEP: &str = "3a every worker busy, each flow on one worker";
    const FLOWS: usize = 40;
    sleep(Duration::from_millis(1500)); // workers publish counters about once a second
    let before = counter_per_worker(h, "new_flows_total").map_err(|e| h.fail(STEP, e))?;
    let redirected_before = counter_sum(h, "redirected_total").map_err(|e| h.fail(STEP, e))?;
    let peer = SocketAddr::new(WEB_VIP.into(), 7);
    let mut buf = [0u8; 2048];
    for k in 0..FLOWS {
        let local = SocketAddr::from(([0, 0, 0, 0], 20000 + k as u16));
        let socket = in_netns(&h.ns("client"), || {
            let s = std::net::UdpSocket::bind(local)?;
            s.connect(peer)?;
            s.set_read_timeout(Some(Duration::from_millis(500)))?;
            Ok(s)
        })
        .map_err(|e| h.fail(STEP, format!("UDP socket {local} in the client namespace: {e}")))?;
        for i in 0..3 {
            let payload = format!("torii-it flow {k} round {i}");
            let expected = format!("{}:{payload}", ECHO_BACKEND.0);
            let mut answered = false;
            for _ in 0..4 {
                if answered || socket.send(payload.as_bytes()).is_err() {
                    continue;
                }
                // Until the reply, or the read timeout (an earlier round's late reply is skipped).
                while let Ok(n) = socket.recv(&mut buf) {
                    if buf[..n] == *expected.as_bytes() {
                        answered = true;
                        break;
                    }
                }
            }
            if !answered {
                return Err(h.fail(STEP, format!("flow {k}: no echo of {payload:?} from {peer} in 4 tries")));
            }
        }
    }
    sleep(Duration::from_millis(1500));
    let after = counter_per_worker(h, "new_flows_total").map_err(|e| h.fail(STEP, e))?;
    let redirected = counter_sum(h, "redirected_total").map_err(|e| h.fail(STEP, e))? - redirected_before;
    let created: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let total: u64 = created.iter().sum();
    let problem = if after.len() < 2 || after.len() != before.len() {
        Some(format!("the gateway runs {} worker(s), configs/gateway.toml asks for 2", after.len()))
    } else if total != FLOWS as u64 {
        Some(format!("{FLOWS} flows, {total} created by the workers ({created:?}): some flow reached two workers"))
    } else if created.contains(&0) {
        Some(format!("a worker created no flow of {FLOWS} ({created:?}): not every worker is busy"))
    } else if driver == "dpdk" && redirected == 0 {
        Some("no frame was redirected between workers on net_af_packet".to_string())
    } else {
        None
    };
    if let Some(p) = problem {
        return Err(h.fail(STEP, p));
    }
    progress(STEP, format!("{FLOWS} flows, created per worker {created:?}, {redirected} frames redirected"));
    Ok(())
}

/// The gateway's drop counters for `reasons`, summed over workers (from `/metrics`).
fn drop_counts(h: &Harness, reasons: &[&str]) -> Result<Vec<u64>> {
    let metrics = curl_get(&h.ns("gw"), &format!("http://{METRICS_LISTEN}/metrics"))?;
    Ok(reasons
        .iter()
        .map(|reason| {
            let label = format!(",reason=\"{reason}\"}} ");
            metrics
                .body
                .lines()
                .filter(|l| l.starts_with("torii_gateway_drops_total{"))
                .filter_map(|l| l.split_once(label.as_str()).and_then(|(_, v)| v.parse::<u64>().ok()))
                .sum()
        })
        .collect())
}

/// Step 3 (and 4b over IPv6): datagrams to demo/echo at `vip` come back `echo:`-prefixed,
/// from the VIP.
fn step_udp_round_trips(h: &mut Harness, step: &str, vip: IpAddr) -> Result<()> {
    let peer = SocketAddr::new(vip, 7);
    // A connected socket accepts datagrams only from `peer`: a reply proves the
    // reverse translation (backend 10.70.0.21:7007 → VIP:7) too.
    let socket = udp_connected(&h.ns("client"), peer, Duration::from_secs(1))
        .map_err(|e| h.fail(step, format!("UDP socket in the client namespace: {e}")))?;
    let mut lost = 0;
    let mut buf = [0u8; 2048];
    // Replies to earlier datagrams: a late one (its datagram was resent) is not an error.
    let mut earlier: Vec<String> = Vec::new();
    for i in 1..=5 {
        let payload = format!("torii-it datagram {i}");
        let expected = format!("{}:{payload}", ECHO_BACKEND.0);
        let mut answered = false;
        'attempts: for _attempt in 0..3 {
            socket.send(payload.as_bytes()).map_err(|e| h.fail(step, format!("send to {peer}: {e}")))?;
            loop {
                match socket.recv(&mut buf) {
                    Ok(n) => {
                        let reply = String::from_utf8_lossy(&buf[..n]);
                        if reply == expected {
                            answered = true;
                            break 'attempts;
                        }
                        if !earlier.iter().any(|e| *e == reply) {
                            return Err(h.fail(
                                step,
                                format!("sent {payload:?} to {peer}, got {reply:?}, expected {expected:?}"),
                            ));
                        }
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        lost += 1;
                        break;
                    }
                    Err(e) => return Err(h.fail(step, format!("recv from {peer} after sending {payload:?}: {e}"))),
                }
            }
        }
        earlier.push(expected);
        if !answered {
            return Err(h.fail(step, format!("no reply to {payload:?} from {peer} in 3 tries (1 s each)")));
        }
    }
    progress(step, format!("5/5 datagrams echoed by {} ({lost} resent)", ECHO_BACKEND.0));
    Ok(())
}

/// Step 4 (and 4c over IPv6): demo/empty at `vip` has no ready endpoints: TCP gets a RST
/// at once, UDP an ICMP (ICMPv6) port unreachable (kube-proxy's REJECT).
fn step_reject_without_endpoints(h: &mut Harness, step: &str, vip: IpAddr) -> Result<()> {
    let client = h.ns("client");
    let tcp = SocketAddr::new(vip, 80);
    let (result, took) = tcp_connect_timed(&client, tcp, Duration::from_secs(2));
    match result {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && took < Duration::from_secs(1) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            return Err(h.fail(step, format!("TCP {tcp}: refused, but only after {took:?} (expected < 1 s)")));
        }
        Err(e) => {
            return Err(
                h.fail(step, format!("TCP {tcp}: {e} after {took:?}; expected connection refused (a RST) within 1 s"))
            );
        }
        Ok(_) => return Err(h.fail(step, format!("TCP {tcp} connected, but demo/empty has no ready endpoint"))),
    }
    progress(step, format!("TCP {tcp} refused in {:.1} ms", took.as_secs_f64() * 1e3));

    let udp = SocketAddr::new(vip, 9);
    let socket = udp_connected(&client, udp, Duration::from_secs(1))
        .map_err(|e| h.fail(step, format!("UDP socket in the client namespace: {e}")))?;
    let mut buf = [0u8; 512];
    let mut refused = false;
    for _attempt in 0..3 {
        socket.send(b"torii-it reject").map_err(|e| h.fail(step, format!("send to {udp}: {e}")))?;
        match socket.recv(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(h.fail(step, format!("UDP {udp}: {e}, expected ICMP port unreachable"))),
            Ok(n) => {
                return Err(h.fail(
                    step,
                    format!(
                        "UDP {udp} answered {:?}, but demo/empty has no ready endpoint",
                        String::from_utf8_lossy(&buf[..n])
                    ),
                ))
            }
        }
    }
    if !refused {
        return Err(h.fail(step, format!("UDP {udp}: no ICMP port unreachable in 3 tries (1 s each)")));
    }
    progress(step, format!("UDP {udp} → ICMP port unreachable (recv: connection refused)"));
    Ok(())
}

/// Step 5: with the long-lived connection (pinned to X) open, remove another backend Y
/// from the manifests: new connections stop reaching Y, the pinned connection goes on
/// with X; restore Y: new connections reach it again.
fn step_manifest_edit_while_connected(h: &mut Harness, pinned: &mut HttpConn, x: &str) -> Result<()> {
    const STEP: &str = "5 manifest edit while connected";
    let (y, y_ip) = *WEB_BACKENDS.iter().find(|(name, _)| *name != x).expect("three web backends");
    let manifests = h.manifests.clone().context("manifests copy")?;
    let edit = manifests
        .remove_endpoint("demo", "web", y_ip)
        .map_err(|e| h.fail(STEP, format!("remove {y} ({y_ip}) from the demo/web EndpointSlice: {e:#}")))?;
    progress(STEP, format!("removed {y} ({y_ip}) from {}", edit.path.display()));

    let start = Instant::now();
    let mut in_a_row = 0;
    let mut sent = 0;
    while in_a_row < CONSECUTIVE_WITHOUT_REMOVED {
        if start.elapsed() > CONVERGE {
            return Err(h.fail(
                STEP,
                format!(
                    "new connections still reached {y} {CONVERGE:?} after it was removed from the \
                     manifests ({sent} requests sent; did torii-control republish and the gateway adopt it?)"
                ),
            ));
        }
        // A connection that reached y just before the gateway adopted the new table is
        // reset when its next segment meets that table (the endpoint left: RST, as
        // DESIGN.md's failure semantics say). That still counts as reaching y.
        let answer = match curl_get(&h.ns("client"), &web_url()) {
            Ok(r) if r.status == 200 && is_web_backend(&r.body) => r.body,
            _ => y.to_string(),
        };
        sent += 1;
        in_a_row = if answer == y { 0 } else { in_a_row + 1 };
    }
    progress(
        STEP,
        format!(
            "{CONSECUTIVE_WITHOUT_REMOVED} new connections in a row avoided {y} within {:.2} s ({sent} requests)",
            start.elapsed().as_secs_f64()
        ),
    );

    let check_pinned = |pinned: &mut HttpConn, when: &str| -> Result<()> {
        let r = pinned.get("/").map_err(|e| h.fail(STEP, format!("long-lived connection to {x} broke {when}: {e}")))?;
        if r.status != 200 || r.body != x {
            return Err(h.fail(
                STEP,
                format!("long-lived connection {when}: HTTP {} from {:?}, expected 200 from {x}", r.status, r.body),
            ));
        }
        Ok(())
    };
    check_pinned(pinned, &format!("after {y} was removed"))?;
    progress(STEP, format!("long-lived connection still answered by {x}"));

    manifests.undo(&edit).map_err(|e| h.fail(STEP, format!("restore {}: {e:#}", edit.path.display())))?;
    let start = Instant::now();
    let mut sent = 0;
    loop {
        if start.elapsed() > CONVERGE {
            return Err(h.fail(
                STEP,
                format!("{y} was restored in the manifests but no new connection reached it in {CONVERGE:?} ({sent} requests)"),
            ));
        }
        let answer = new_connection_requests(h, STEP, &web_url(), 1)?.remove(0);
        sent += 1;
        if answer == y {
            break;
        }
    }
    progress(
        STEP,
        format!(
            "{y} restored: answered a new connection after {:.2} s ({sent} requests)",
            start.elapsed().as_secs_f64()
        ),
    );
    check_pinned(pinned, &format!("after {y} was restored"))?;
    Ok(())
}

/// Step 6: the NodePort on the gateway's own address.
fn step_nodeport(h: &mut Harness) -> Result<()> {
    const STEP: &str = "6 NodePort";
    let url = format!("http://{NODE_IP}:{NODE_PORT}/");
    let answers = new_connection_requests(h, STEP, &url, 5)?;
    progress(STEP, format!("5/5 HTTP 200 from {url}: {:?}", distribution(&answers)));
    Ok(())
}

/// Step 6b: the gateway's `/healthz` is ok and its `/metrics` counted the steps' traffic on
/// the demo/web front door (at least the 30 new connections of step 2, both directions).
fn step_metrics(h: &mut Harness) -> Result<()> {
    const STEP: &str = "6b metrics";
    let ns = h.ns("gw");
    let health = curl_get(&ns, &format!("http://{METRICS_LISTEN}/healthz")).map_err(|e| h.fail(STEP, e))?;
    if health.status != 200 {
        return Err(h.fail(STEP, format!("/healthz answered {}: {}", health.status, health.body)));
    }
    // Workers report their counters about once a second.
    sleep(Duration::from_millis(1500));
    let metrics = curl_get(&ns, &format!("http://{METRICS_LISTEN}/metrics")).map_err(|e| h.fail(STEP, e))?;
    let web = format!("service=\"demo/web:http\",vip=\"{WEB_VIP}\",protocol=\"TCP\",port=\"80\"");
    let sample = |name: &str, labels: &str| {
        let prefix = format!("torii_gateway_{name}{{{labels}}} ");
        metrics.body.lines().find_map(|l| l.strip_prefix(prefix.as_str())?.parse::<u64>().ok()).unwrap_or(0)
    };
    let flows = sample("frontend_new_flows_total", &web);
    let original = sample("frontend_packets_total", &format!("{web},direction=\"original\""));
    let reply = sample("frontend_packets_total", &format!("{web},direction=\"reply\""));
    if metrics.status != 200 || flows < 30 || original <= flows || reply == 0 {
        return Err(h.fail(
            STEP,
            format!(
                "/metrics ({}): demo/web front door new flows {flows}, packets {original} original / {reply} reply:\n{}",
                metrics.status, metrics.body
            ),
        ));
    }
    progress(STEP, format!("/healthz: {}; demo/web:http: {flows} new flows, {original}/{reply} packets", health.body));
    Ok(())
}

/// Step 6c: `torii-control status --json` on the live gateway's shared-memory directory
/// shows the published table acknowledged by every worker, and the gateway's counters
/// (written about once a second) moved for demo/web's front door, which the steps before
/// sent traffic to (the 30 new connections of step 1 at least), and not for demo/empty's
/// 203.0.113.11:80, which only ever rejected.
fn step_status_counters(h: &mut Harness, bins: &Binaries) -> Result<()> {
    const STEP: &str = "6c torii-control status";
    let out = Command::new(&bins.control)
        .args(["status", "--json", "--shm-dir"])
        .arg(&h.shm_dir)
        .output()
        .map_err(|e| h.fail(STEP, format!("running torii-control status: {e}")))?;
    let status: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        h.fail(STEP, format!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    })?;
    let door = |address: &str| {
        status["services"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["front_doors"].as_array().into_iter().flatten())
            .find(|d| d["address"] == address)
            .cloned()
    };
    let web = door(&format!("{WEB_VIP}:80/TCP")).unwrap_or_default();
    let count = |d: &Value, k: &str| d["counters"][k].as_u64().unwrap_or(0);
    let (flows, original, reply) =
        (count(&web, "new_flows"), count(&web, "packets_original"), count(&web, "packets_reply"));
    let workers_current =
        status["workers"].as_array().is_some_and(|w| !w.is_empty() && w.iter().all(|w| w["current"] == true));
    let empty = door(&format!("{REJECT_VIP}:80/TCP")).unwrap_or_default();
    if !out.status.success()
        || !workers_current
        || status["counters_stale"] != false
        || flows < 30
        || original <= flows
        || reply == 0
        || count(&empty, "new_flows") != 0
    {
        return Err(h.fail(
            STEP,
            format!("status ({}): demo/web front door {web}, demo/empty {empty}:\n{status:#}", out.status),
        ));
    }
    progress(
        STEP,
        format!(
            "generation {}, counters {} ms old; {WEB_VIP}:80/TCP: {flows} new flows, {original}/{reply} packets",
            status["generation"], status["counters_age_ms"]
        ),
    );
    Ok(())
}

/// Last step: both processes stop cleanly on SIGTERM.
/// Step 7b: a gateway killed with `kill -9` while a request stream runs, and started again
/// on the same configuration, adopts its conntrack regions (docs/architecture.md, "Restarts
/// and upgrades"): every established connection — the long-lived one, eight more, and the
/// stream — is answered afterwards by the same backend, none is reset, and new connections
/// work. Reports the longest wait the stream saw (the gap), which includes the client's TCP
/// retransmission backoff.
fn step_kill_9_keeps_connections(h: &mut Harness, bins: &Binaries, pinned: &mut HttpConn, backend: &str) -> Result<()> {
    const STEP: &str = "7b kill -9 and restart keep every connection";
    const EXTRA: usize = 8;
    let addr = SocketAddrV4::new(WEB_VIP, 80);
    let client = h.ns("client");
    let mut conns = Vec::new();
    for i in 0..=EXTRA {
        let mut c = HttpConn::connect(&client, addr, Duration::from_secs(2))
            .map_err(|e| h.fail(STEP, format!("connection {i}: connect to {addr}: {e}")))?;
        let r = c.get("/").map_err(|e| h.fail(STEP, format!("connection {i}: first request: {e}")))?;
        c.set_read_timeout(Duration::from_secs(20)).map_err(|e| h.fail(STEP, e))?;
        conns.push((c, r.body));
    }
    pinned.set_read_timeout(Duration::from_secs(20)).map_err(|e| h.fail(STEP, e))?;
    let (mut stream, stream_backend) = conns.pop().expect("EXTRA + 1 connections");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (gap, stream_result, answered, killed, started) = std::thread::scope(|s| {
        let streamer = s.spawn(|| -> (Duration, io::Result<()>, u32) {
            let (mut last, mut worst, mut n) = (Instant::now(), Duration::ZERO, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match stream.get("/") {
                    Ok(r) if r.status == 200 && r.body == stream_backend => n += 1,
                    Ok(r) => return (worst, Err(io::Error::other(format!("HTTP {} from {:?}", r.status, r.body))), n),
                    Err(e) => return (worst, Err(e), n),
                }
                worst = worst.max(last.elapsed());
                last = Instant::now();
                sleep(Duration::from_millis(10));
            }
            (worst, Ok(()), n)
        });
        sleep(Duration::from_millis(500));
        let killed = h.gateway.as_mut().and_then(Daemon::kill);
        let started = h.start_gateway(bins);
        // Let the stream run across the restart and a while after it.
        sleep(Duration::from_secs(4));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (gap, result, n) = streamer.join().expect("the stream thread does not panic");
        (gap, result, n, killed, started)
    });
    if killed.is_none() {
        return Err(h.fail(STEP, "no running gateway to kill"));
    }
    started.map_err(|e| h.fail(STEP, format!("restarting the gateway: {e:#}")))?;
    if let Err(e) = stream_result {
        return Err(h.fail(STEP, format!("the request stream across the restart failed: {e}")));
    }
    let mut broken = Vec::new();
    for (i, (c, first)) in conns.iter_mut().enumerate() {
        match c.get("/") {
            Ok(r) if r.status == 200 && r.body == *first => {}
            Ok(r) => broken.push(format!("#{i}: HTTP {} from {:?}, was {first:?}", r.status, r.body)),
            Err(e) => broken.push(format!("#{i} ({}): {e}", c.local_addr())),
        }
    }
    match pinned.get("/") {
        Ok(r) if r.status == 200 && r.body == backend => {}
        Ok(r) => broken.push(format!("long-lived: HTTP {} from {:?}", r.status, r.body)),
        Err(e) => broken.push(format!("long-lived: {e}")),
    }
    if !broken.is_empty() {
        return Err(h.fail(STEP, format!("after the restart: {broken:?}")));
    }
    let fresh = curl_get(&client, &web_url()).map_err(|e| h.fail(STEP, format!("a new connection: {e:#}")))?;
    if fresh.status != 200 || !is_web_backend(&fresh.body) {
        return Err(h.fail(STEP, format!("a new connection: HTTP {} {:?}", fresh.status, fresh.body)));
    }
    let log = std::fs::read_to_string(h.workdir.join("gateway.log")).unwrap_or_default();
    if !torii_integration::strip_ansi(&log).contains("conntrack: adopted flows") {
        return Err(h.fail(STEP, "the restarted gateway logged no adoption"));
    }
    if let Some(dir) = &h.region_dir {
        // Adopted from huge pages: the region is there, a whole number of 2 MiB pages
        // long, and not in shm_dir.
        let region = dir.join("conntrack-w0-v4");
        let len = std::fs::metadata(&region).map(|m| m.len()).unwrap_or(0);
        if len == 0 || !len.is_multiple_of(2 << 20) || h.shm_dir.join("conntrack-w0-v4").exists() {
            return Err(h.fail(STEP, format!("{} is {len} bytes long, or shm_dir has a region too", region.display())));
        }
    }
    pinned.set_read_timeout(Duration::from_secs(3)).map_err(|e| h.fail(STEP, e))?;
    progress(
        STEP,
        format!(
            "{} connections kept their backends, 0 resets, new connections served; stream of ({answered} requests) waited at most {:.0} ms across kill -9 and restart",
            EXTRA + 2,
            gap.as_secs_f64() * 1000.0
        ),
    );
    Ok(())
}

fn step_clean_shutdown(h: &mut Harness) -> Result<()> {
    const STEP: &str = "8 clean shutdown on SIGTERM";
    let grace = Duration::from_secs(5);
    let mut problems = Vec::new();
    for (name, daemon) in [("torii-gateway", h.gateway.as_mut()), ("torii-control", h.control.as_mut())] {
        match daemon.and_then(|d| d.stop(grace)) {
            Some((status, true)) if status.success() => {}
            Some((status, true)) => problems.push(format!("{name} exited with {status} on SIGTERM")),
            Some((_, false)) => problems.push(format!("{name} ignored SIGTERM for {grace:?}")),
            None => problems.push(format!("{name} was not running")),
        }
    }
    if !problems.is_empty() {
        return Err(h.fail(STEP, problems.join("; ")));
    }
    progress(STEP, "both processes exited 0");
    Ok(())
}

/// Step 7: `torii-control compile --manifests configs/demo` prints the JSON contract
/// with the demo's front doors. Needs no root and no topology.
#[test]
fn control_compile_prints_demo_front_doors() -> Result<()> {
    let bins = Binaries::locate()?;
    let root = repo_root();
    let node_name = fs::read_to_string(root.join("configs/gateway.toml"))?
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "node_name").then(|| v.trim().trim_matches('"').to_string())
        })
        .context("configs/gateway.toml has no node_name")?;
    let out = output_with_timeout(
        Command::new(&bins.control)
            .args(["compile", "--manifests", "configs/demo", "--node-name", &node_name])
            .current_dir(&root),
        Duration::from_secs(30),
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = |s: &str| s.chars().take(6000).collect::<String>();
    if !out.status.success() {
        bail!(
            "torii-control compile failed ({}):\nstderr:\n{}\nstdout:\n{}",
            out.status,
            shown(&stderr),
            shown(&stdout)
        );
    }
    let json: Value = serde_json::from_str(&stdout).with_context(|| {
        format!("torii-control compile did not print JSON:\nstdout:\n{}\nstderr:\n{}", shown(&stdout), shown(&stderr))
    })?;
    let fail = |what: String| anyhow::anyhow!("{what}\ncompile output:\n{}", shown(&stdout));

    let frontends =
        json.get("frontends").and_then(Value::as_array).ok_or_else(|| fail("no `frontends` array".into()))?;
    let mut keys = BTreeSet::new();
    let mut doors = Vec::new();
    for (i, fe) in frontends.iter().enumerate() {
        let door = FrontDoor::parse(fe).map_err(|e| fail(format!("frontends[{i}]: {e}")))?;
        if !keys.insert((door.protocol.clone(), door.ip, door.port)) {
            return Err(fail(format!("frontends[{i}]: {} {}:{} appears twice", door.protocol, door.ip, door.port)));
        }
        doors.push(door);
    }

    let web: Backends = WEB_BACKENDS.iter().map(|(_, ip)| (IpAddr::V4(*ip), 8080)).collect();
    let expectations: [(&str, &str, IpAddr, u16, Backends); 5] = [
        ("demo/web", "TCP", WEB_VIP.into(), 80, web.clone()),
        ("demo/echo", "UDP", WEB_VIP.into(), 7, BTreeSet::from([(IpAddr::V4(ECHO_BACKEND.1), 7007)])),
        ("demo/empty", "TCP", REJECT_VIP.into(), 80, BTreeSet::new()),
        ("demo/empty", "UDP", REJECT_VIP.into(), 9, BTreeSet::new()),
        ("demo/web-np", "TCP", NODE_IP.into(), NODE_PORT, web),
    ];
    for (service, protocol, ip, port, backends) in expectations {
        let door = doors
            .iter()
            .find(|d| d.protocol == protocol && d.ip == ip && d.port == port)
            .ok_or_else(|| fail(format!("no front door {protocol} {ip}:{port} (Service {service})")))?;
        if door.service != service {
            return Err(fail(format!("{protocol} {ip}:{port} belongs to {:?}, expected {service}", door.service)));
        }
        if door.backends != backends {
            return Err(fail(format!(
                "{protocol} {ip}:{port} ({service}) has backends {:?}, expected {backends:?}",
                door.backends
            )));
        }
    }
    eprintln!("[compile] {} front doors, the demo's five as expected", doors.len());
    Ok(())
}

/// A front door's backends: (address, port).
type Backends = BTreeSet<(IpAddr, u16)>;

/// One entry of `frontends` in `torii-control compile`'s output.
struct FrontDoor {
    service: String,
    protocol: String,
    ip: IpAddr,
    port: u16,
    backends: Backends,
}

impl FrontDoor {
    fn parse(v: &Value) -> Result<Self> {
        let str_field = |name: &str| -> Result<String> {
            v.get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .with_context(|| format!("field `{name}` missing or not a string"))
        };
        let ip_of = |v: &Value, what: &str| -> Result<IpAddr> {
            let s =
                v.get("ip").and_then(Value::as_str).with_context(|| format!("{what}: `ip` missing or not a string"))?;
            s.parse().with_context(|| format!("{what}: `ip` {s:?} is not an IP address"))
        };
        let port_of = |v: &Value, what: &str| -> Result<u16> {
            let p = v
                .get("port")
                .and_then(Value::as_u64)
                .with_context(|| format!("{what}: `port` missing or not a number"))?;
            u16::try_from(p).ok().filter(|&p| p != 0).with_context(|| format!("{what}: `port` {p} out of 1..65535"))
        };
        let service = str_field("service")?;
        if !service.contains('/') {
            bail!("`service` {service:?} is not namespace/name");
        }
        match v.get("port_name") {
            Some(Value::String(_) | Value::Null) => {}
            _ => bail!("field `port_name` missing or not a string"),
        }
        str_field("kind")?;
        let protocol = str_field("protocol")?;
        if !["TCP", "UDP", "SCTP"].contains(&protocol.as_str()) {
            bail!("`protocol` {protocol:?} is not TCP, UDP or SCTP");
        }
        let ip = ip_of(v, "front door")?;
        let port = port_of(v, "front door")?;
        let mut backends = BTreeSet::new();
        for (i, b) in v
            .get("backends")
            .and_then(Value::as_array)
            .context("field `backends` missing or not an array")?
            .iter()
            .enumerate()
        {
            let what = format!("backends[{i}]");
            backends.insert((ip_of(b, &what)?, port_of(b, &what)?));
        }
        Ok(Self { service, protocol, ip, port, backends })
    }
}

// ---------------------------------------------------------------------------------------
// The Kubernetes API source, end to end (issue 5): torii-control watches the test double
// of the API server (`torii-fake-apiserver`, a separate process serving configs/demo as
// API objects over real HTTP) instead of a manifests directory.

/// The EndpointSlice of demo/web in configs/demo/web.yaml.
const WEB_SLICE: &str = "web-abc12";

/// The demo topology with `torii-control run --kubeconfig` against the API double: the
/// VIP serves through curl from the demo objects; an EndpointSlice `MODIFIED` event that
/// removes a backend reaches the data plane (new connections avoid it), and the control
/// process logs the network-programming latency the real gateway's acknowledgement ends.
#[test]
fn kube_api_source_end_to_end() -> Result<()> {
    let test_start = Instant::now();
    // Its own namespaces, so that it can run beside demo_topology_end_to_end.
    let prefix = format!("it{}-k", std::process::id());
    if let Some(reason) = netns_unavailable(&prefix) {
        print_skipped("kube_api_source_end_to_end", &reason);
        return Ok(());
    }
    require_tools()?;
    let bins = Binaries::locate()?;
    let double_bin = bins.control.with_file_name("torii-fake-apiserver");
    if !double_bin.is_file() {
        bail!(
            "{} not found: run `cargo build --release --workspace --bins` first (scripts/test does)",
            double_bin.display()
        );
    }

    let mut h = Harness::new(&prefix)?;
    h.write_config()?;
    h.topology_up()?;
    let manifests = h.manifests.clone().context("manifests copy")?;
    let kubeconfig = h.workdir.join("kubeconfig");
    let mut api_cmd = Command::new(&double_bin);
    api_cmd.arg("--manifests").arg(manifests.dir()).arg("--kubeconfig-out").arg(&kubeconfig).current_dir(&h.workdir);
    let api_log = h.workdir.join("apiserver.log");
    let mut api = torii_integration::Daemon::spawn("torii-fake-apiserver", api_cmd, &api_log)?;
    let start = Instant::now();
    while !kubeconfig.is_file() {
        if let Some(status) = api.exited() {
            bail!("torii-fake-apiserver exited ({status}):\n{}", torii_integration::tail(&api_log, 20));
        }
        if start.elapsed() > Duration::from_secs(10) {
            bail!("torii-fake-apiserver wrote no kubeconfig within 10 s:\n{}", torii_integration::tail(&api_log, 20));
        }
        sleep(Duration::from_millis(20));
    }
    let admin = torii_kube_double::AdminClient::from_kubeconfig(&kubeconfig)?;
    start_with_kubeconfig(&mut h, &bins, &kubeconfig)?;
    progress(
        "kube start",
        format!("topology {prefix} up; API double at {}; work dir {}", admin.addr(), h.workdir.display()),
    );

    step_gateway_answers(&mut h)?;
    step_new_connections_spread(&mut h, "1 new connections spread over backends", &web_url())?;
    step_endpoint_slice_modified(&mut h, &admin)?;
    step_clean_shutdown(&mut h)?;
    drop(api);

    progress("kube done", format!("all steps passed in {:.1} s", test_start.elapsed().as_secs_f64()));
    h.passed();
    Ok(())
}

/// Like `Harness::start`, with `--kubeconfig` for torii-control's source.
fn start_with_kubeconfig(h: &mut Harness, bins: &Binaries, kubeconfig: &std::path::Path) -> Result<()> {
    let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let mut control = Command::new(&bins.control);
    control
        .arg("run")
        .arg("--config")
        .arg(&h.config)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .current_dir(&h.workdir)
        .env("RUST_LOG", &log_level)
        .env("NO_COLOR", "1");
    h.control = Some(torii_integration::Daemon::spawn("torii-control", control, &h.workdir.join("control.log"))?);
    let mut gateway = Command::new("ip");
    gateway
        .args(["netns", "exec", &h.ns("gw")])
        .arg(&bins.gateway)
        .arg("--config")
        .arg(&h.config)
        .current_dir(&h.workdir)
        .env("RUST_LOG", &log_level)
        .env("NO_COLOR", "1");
    h.gateway = Some(torii_integration::Daemon::spawn("torii-gateway", gateway, &h.workdir.join("gateway.log"))?);
    Ok(())
}

/// Step K: an EndpointSlice `MODIFIED` event (as the EndpointSlice controller sends when
/// a Pod goes away, with `endpoints.kubernetes.io/last-change-trigger-time` stamped)
/// removes backend Y from demo/web: new connections stop reaching Y, and torii-control
/// logs the network-programming latency ending at the gateway workers' acknowledgement.
fn step_endpoint_slice_modified(h: &mut Harness, admin: &torii_kube_double::AdminClient) -> Result<()> {
    const STEP: &str = "K EndpointSlice MODIFIED removes a backend";
    let (y, y_ip) = WEB_BACKENDS[1];
    let mut slice = admin
        .get(torii_kube_double::Resource::EndpointSlices, "demo", WEB_SLICE)
        .map_err(|e| h.fail(STEP, format!("get EndpointSlice demo/{WEB_SLICE} from the double: {e}")))?;
    let endpoints = slice["endpoints"].as_array_mut().context("endpoints")?;
    let before = endpoints.len();
    endpoints.retain(|e| e["addresses"][0].as_str() != Some(&y_ip.to_string()));
    if endpoints.len() + 1 != before {
        return Err(h.fail(STEP, format!("demo/{WEB_SLICE} does not list {y} ({y_ip}) once: {slice}")));
    }
    torii_kube_double::stamp_trigger_time(&mut slice, std::time::SystemTime::now());
    let control_log = h.workdir.join("control.log");
    let lines_before = fs::read_to_string(&control_log).unwrap_or_default().lines().count();
    let rv = admin.apply(&slice).map_err(|e| h.fail(STEP, format!("apply the EndpointSlice: {e}")))?;
    progress(STEP, format!("MODIFIED demo/{WEB_SLICE} without {y} ({y_ip}) at resourceVersion {rv}"));

    let start = Instant::now();
    let mut in_a_row = 0;
    let mut sent = 0;
    let mut resets = 0;
    while in_a_row < CONSECUTIVE_WITHOUT_REMOVED {
        if start.elapsed() > CONVERGE {
            return Err(h.fail(
                STEP,
                format!(
                    "new connections still reached {y} {CONVERGE:?} after the EndpointSlice event ({sent} requests)"
                ),
            ));
        }
        // A connection that reached Y just before the gateway adopted the new table is
        // reset when its next packet arrives (DESIGN.md: TCP flows to a removed endpoint
        // get a RST): that is Y still being reached, not a failure.
        let answer = match curl_get(&h.ns("client"), &web_url()) {
            Ok(r) if r.status == 200 && is_web_backend(&r.body) => r.body,
            Ok(r) => {
                return Err(h.fail(STEP, format!("HTTP {} body {:?}, expected 200 from web1..3", r.status, r.body)))
            }
            Err(e) if format!("{e:#}").contains("Connection reset") => {
                resets += 1;
                y.to_string()
            }
            Err(e) => return Err(h.fail(STEP, format!("request to {}: {e:#}", web_url()))),
        };
        sent += 1;
        in_a_row = if answer == y { 0 } else { in_a_row + 1 };
    }
    progress(
        STEP,
        format!(
            "{CONSECUTIVE_WITHOUT_REMOVED} new connections in a row avoided {y} within {:.2} s \
             ({sent} requests, {resets} reset on the table switch)",
            start.elapsed().as_secs_f64()
        ),
    );

    // The latency line of that publication (the gateway acknowledges within milliseconds).
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        let text = torii_integration::strip_ansi(&fs::read_to_string(&control_log).unwrap_or_default());
        let found = text
            .lines()
            .skip(lines_before)
            .find(|l| {
                l.contains("table adopted by every gateway worker") && l.contains("network_programming_latency_ms=")
            })
            .map(str::to_string);
        if let Some(l) = found {
            break l;
        }
        if Instant::now() > deadline {
            return Err(h.fail(STEP, "torii-control logged no network-programming latency for the change"));
        }
        sleep(Duration::from_millis(50));
    };
    let latency_ms: f64 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("network_programming_latency_ms="))
        .and_then(|v| v.parse().ok())
        .context("latency field")?;
    if !(0.0..CONVERGE.as_secs_f64() * 1e3).contains(&latency_ms) {
        return Err(h.fail(STEP, format!("implausible network-programming latency: {line}")));
    }
    progress(STEP, format!("control: {}", line.split_once("INFO ").map_or(line.as_str(), |(_, l)| l)));
    Ok(())
}
