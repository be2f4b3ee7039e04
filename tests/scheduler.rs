//! The endpoint schedulers through the real gateway (issue 20): on the demo topology
//! (`scripts/topology`), with the real `torii-control` and `torii-gateway` binaries and the
//! real web backends, long-lived TCP connections from the client namespace to demo/web
//! (three endpoints) under `scheduler = "lc"` and under the default `"maglev"`.
//!
//! What is shown, for each scheduler, with the same sequence: 12 keep-alive connections
//! opened one after another (each answered before the next opens, so the gateway has seen
//! it ESTABLISHED), then the connections of the first endpoint closed, then 4 more opened.
//!
//! - `lc` (least connections, IPVS `ip_vs_lc.c`): the 12 connections are exactly 4 per
//!   endpoint, and the 4 later ones all go to the endpoint whose connections were closed
//!   (it then has no active connection, the others 4 each).
//! - `maglev`: every connection goes where the Maglev ring of the demo table sends its
//!   5-tuple's hash (computed here with `torii_gateway::maglev`, as every gateway does),
//!   whatever the endpoints' loads; the distribution is printed, and is even only by chance.
//!
//! Run after `cargo build --release --workspace --bins`:
//! `cargo test --release -p torii-integration --test scheduler -- --nocapture`.
//! Needs root (namespaces); without it the test prints `SKIPPED` and passes, or fails with
//! `TORII_REQUIRE_CAPABILITIES=1` (as `.ci/run` sets it).

use std::collections::BTreeMap;
use std::fs;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::Result;
use torii_gateway::maglev;
use torii_integration::{
    curl_get_timeout, netns_unavailable, print_skipped, require_tools, Binaries, Harness, HttpConn, WEB_BACKENDS,
    WEB_VIP,
};

/// How long the gateway may take, after start, to serve its first request.
const GATEWAY_READY: Duration = Duration::from_secs(20);
/// Long-lived connections opened first: a multiple of the three endpoints.
const FIRST: usize = 12;
/// Connections opened after the first endpoint's were closed.
const LATER: usize = 4;
/// The web backends' port (demo/web's targetPort).
const WEB_PORT: u16 = 8080;

fn progress(step: &str, message: impl std::fmt::Display) {
    eprintln!("[scheduler] {step}: {message}");
}

#[test]
fn least_connections_spreads_long_lived_connections_and_maglev_hashes() -> Result<()> {
    let test = "least_connections_spreads_long_lived_connections_and_maglev_hashes";
    let prefix = format!("sc{}", std::process::id());
    if let Some(reason) = netns_unavailable(&prefix) {
        print_skipped(test, &reason);
        return Ok(());
    }
    require_tools()?;
    let bins = Binaries::locate()?;
    let start = Instant::now();

    let lc = run(&bins, &prefix, "lc")?;
    let first = distribution(&lc[..FIRST]);
    if first.values().any(|&n| n != FIRST / WEB_BACKENDS.len()) {
        anyhow::bail!("lc: {FIRST} long-lived connections spread {first:?}, expected exactly 4 per endpoint");
    }
    let emptied = &lc[0].1;
    if lc[FIRST..].iter().any(|(_, b)| b != emptied) {
        anyhow::bail!(
            "lc: after {emptied}'s connections closed, the next {LATER} went to {:?}; expected all to {emptied} \
             (no active connection, the others 4 each)",
            distribution(&lc[FIRST..])
        );
    }
    progress("lc", format!("{FIRST} connections {first:?}; the {LATER} after {emptied}'s closed all to {emptied}"));

    let mh = run(&bins, &prefix, "maglev")?;
    let ring = demo_web_ring();
    for (local, backend) in &mh {
        let hash = maglev::flow_hash(6, local.ip(), local.port(), IpAddr::V4(WEB_VIP), 80);
        let want = maglev::lookup(&ring, hash).map(|i| WEB_BACKENDS[i as usize].0);
        if want != Some(backend.as_str()) {
            anyhow::bail!("maglev: the connection from {local} reached {backend}; its ring slot names {want:?}");
        }
    }
    progress(
        "maglev",
        format!(
            "all {} connections where the ring sends their 5-tuple: first {FIRST} {:?}, the {LATER} after {}'s \
             closed {:?}",
            FIRST + LATER,
            distribution(&mh[..FIRST]),
            mh[0].1,
            distribution(&mh[FIRST..])
        ),
    );
    progress("done", format!("passed in {:.1} s", start.elapsed().as_secs_f64()));
    Ok(())
}

/// The Maglev ring torii-control builds for demo/web: its three endpoints in table order
/// (sorted by address), ring size for three.
fn demo_web_ring() -> Vec<u32> {
    let backends: Vec<(IpAddr, u16)> = WEB_BACKENDS.iter().map(|(_, a)| (IpAddr::V4(*a), WEB_PORT)).collect();
    maglev::build(&backends, maglev::ring_size_for(backends.len()))
}

fn distribution(conns: &[(SocketAddr, String)]) -> BTreeMap<&str, usize> {
    let mut d: BTreeMap<&str, usize> = WEB_BACKENDS.iter().map(|(n, _)| (*n, 0)).collect();
    for (_, b) in conns {
        *d.entry(b.as_str()).or_insert(0) += 1;
    }
    d
}

/// The demo topology with the gateway on `scheduler`: opens [`FIRST`] keep-alive
/// connections to demo/web one by one, closes those of the first one's endpoint, opens
/// [`LATER`] more. Returns each opened connection's local address and endpoint, in order.
fn run(bins: &Binaries, prefix: &str, scheduler: &str) -> Result<Vec<(SocketAddr, String)>> {
    let mut h = Harness::new(prefix)?;
    h.write_config()?;
    let config = fs::read_to_string(&h.config)?;
    let line = "scheduler = \"maglev\"";
    anyhow::ensure!(config.contains(line), "configs/gateway.toml has no {line:?} line");
    fs::write(&h.config, config.replacen(line, &format!("scheduler = {scheduler:?}"), 1))?;
    h.topology_up()?;
    h.start(bins)?;
    let step = format!("{scheduler} gateway answers");
    let client = h.ns("client");
    let ready = Instant::now();
    loop {
        h.check_alive().map_err(|e| h.fail(&step, e))?;
        if curl_get_timeout(&client, &format!("http://{WEB_VIP}/"), Duration::from_secs(1))
            .is_ok_and(|r| r.status == 200)
        {
            break;
        }
        if ready.elapsed() > GATEWAY_READY {
            return Err(h.fail(&step, format!("no answer on {WEB_VIP}:80 within {GATEWAY_READY:?}")));
        }
        sleep(Duration::from_millis(200));
    }

    let log = torii_integration::strip_ansi(&fs::read_to_string(h.workdir.join("gateway.log")).unwrap_or_default());
    let line = log.lines().find(|l| l.contains("torii-gateway running:")).unwrap_or_default();
    if !line.split_whitespace().any(|w| w == format!("scheduler={scheduler}")) {
        return Err(h.fail(&step, format!("expected scheduler={scheduler} in the startup line, got {line:?}")));
    }
    let step = format!("{scheduler} long-lived connections");
    let addr = SocketAddrV4::new(WEB_VIP, 80);
    let open = |h: &Harness, i: usize| -> Result<(HttpConn, SocketAddr, String)> {
        let mut conn = HttpConn::connect(&client, addr, Duration::from_secs(3))
            .map_err(|e| h.fail(&step, format!("connection {i}: connect to {addr}: {e}")))?;
        let r = conn.get("/").map_err(|e| h.fail(&step, format!("connection {i}: request: {e}")))?;
        if r.status != 200 || !WEB_BACKENDS.iter().any(|(n, _)| *n == r.body) {
            return Err(h.fail(&step, format!("connection {i}: HTTP {} {:?}", r.status, r.body)));
        }
        let local = conn.local_addr();
        Ok((conn, local, r.body))
    };
    let mut conns = Vec::new();
    let mut seen = Vec::new();
    for i in 1..=FIRST {
        let (conn, local, backend) = open(&h, i)?;
        seen.push((local, backend.clone()));
        conns.push((conn, backend));
    }
    // Close every connection of the first connection's endpoint (FIN from the client: the
    // gateway sees the flows leave ESTABLISHED), and give the FINs a moment to pass.
    let emptied = seen[0].1.clone();
    conns.retain(|(_, b)| *b != emptied);
    sleep(Duration::from_millis(300));
    for i in FIRST + 1..=FIRST + LATER {
        let (conn, local, backend) = open(&h, i)?;
        seen.push((local, backend.clone()));
        conns.push((conn, backend));
    }
    // The connections still answer from their endpoints.
    for (i, (conn, backend)) in conns.iter_mut().enumerate() {
        let r = conn.get("/").map_err(|e| h.fail(&step, format!("open connection {i}: second request: {e}")))?;
        if r.body != *backend {
            return Err(h.fail(&step, format!("open connection {i} moved from {backend} to {:?}", r.body)));
        }
    }
    drop(conns);
    h.passed();
    Ok(seen)
}
