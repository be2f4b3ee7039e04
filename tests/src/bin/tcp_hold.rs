//! torii-tcp-hold: many concurrent TCP connections, held open, each checked by an exchange
//! of a few bytes both ways and closed cleanly — the real clients and endpoints of
//! `tests/snat_connections.rs`, which run it in the demo topology's network namespaces.
//! Kernel TCP sockets on tokio (one thread per process, epoll underneath).
//!
//! ```text
//! torii-tcp-hold serve --listen 0.0.0.0:9000 --name web1
//! torii-tcp-hold connect --to 203.0.113.20:9000 --from 198.51.100.11 --count 17500 [--concurrency 256]
//! ```
//!
//! **serve** listens with `SO_REUSEPORT` (several processes may share the port, the
//! kernel spreads connections over them) and a backlog of 65 535 (capped by the namespace's
//! `net.core.somaxconn`). On each connection it reads the client's 8-byte token and answers
//! [`reply`]: the token, the peer address and port as this endpoint sees them (after the
//! gateway's SNAT) and its `--name`; then it holds the connection until the client's FIN,
//! and closes its side. It runs until killed.
//!
//! **connect** opens `--count` connections from `--from` (bound with port 0: the kernel
//! picks each source port from the namespace's `net.ipv4.ip_local_port_range`, unique per
//! bound address) to `--to`, at most `--concurrency` handshakes at a time, and holds them
//! all. It is driven by lines on standard input and reports each phase as one JSON line on
//! standard output:
//!
//! 1. at start: connects; `{"phase":"open","ok":N,"failed":{error:count},"seconds":s}`;
//! 2. on `exchange`: on every connection sends a token, reads the answer, checks that the
//!    token comes back; `{"phase":"exchange","ok":N,"failed":{..},"endpoints":{name:n},
//!    "peers":{address:n},"seconds":s}` (`peers`: the source addresses the endpoints saw);
//! 3. on `close`: half-closes every connection (FIN), waits for the endpoint's FIN (end of
//!    stream with no further byte), closes; `{"phase":"close","ok":N,"failed":{..},"seconds":s}`
//!    — and exits.
//!
//! Errors are counted by kind, never fatal, so one report says what happened to every
//! connection. The process raises its soft `RLIMIT_NOFILE` to the hard limit; a process
//! without `CAP_SYS_RESOURCE` (a container's root) cannot go above that, so the test runs
//! several processes, each below it.

use std::collections::BTreeMap;
use std::io::{self, BufRead};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

/// How long one handshake, exchange or close may take before it counts as failed (s).
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes of the client's token.
const TOKEN_LEN: usize = 8;

/// The answer of endpoint `name` to `token` on a connection from `peer`: the token, the
/// peer's IPv4 address (4 bytes) and port (2 bytes, network order), the name's length
/// (1 byte) and the name.
fn reply(token: [u8; TOKEN_LEN], peer: SocketAddrV4, name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TOKEN_LEN + 7 + name.len());
    out.extend_from_slice(&token);
    out.extend_from_slice(&peer.ip().octets());
    out.extend_from_slice(&peer.port().to_be_bytes());
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the new soft limit.
fn raise_nofile() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read or write the struct they are given, which
    // lives for the calls.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        limit.rlim_cur = limit.rlim_max;
        let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
    }
    limit.rlim_cur
}

/// Failures by kind (the error's text), for the reports.
#[derive(Default)]
struct Failures(BTreeMap<String, u64>);

impl Failures {
    fn add(&mut self, what: impl std::fmt::Display) {
        *self.0.entry(what.to_string()).or_default() += 1;
    }
}

fn report(value: serde_json::Value) {
    // One line, flushed: the test reads it as soon as it is written.
    println!("{value}");
}

fn usage() -> ! {
    eprintln!(
        "usage: torii-tcp-hold serve --listen ADDR:PORT --name NAME\n       \
         torii-tcp-hold connect --to ADDR:PORT --from ADDR --count N [--concurrency C]"
    );
    std::process::exit(2)
}

/// The value of `--name` in `args`.
fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let parsed = |name: &str| -> Result<&str> { arg(&args, name).with_context(|| format!("{name} is required")) };
    match args.first().map(String::as_str) {
        Some("serve") => {
            let listen: SocketAddr = parsed("--listen")?.parse().context("--listen")?;
            let name = parsed("--name")?.to_string();
            runtime.block_on(serve(listen, name))
        }
        Some("connect") => {
            let to: SocketAddr = parsed("--to")?.parse().context("--to")?;
            let from: Ipv4Addr = parsed("--from")?.parse().context("--from")?;
            let count: usize = parsed("--count")?.parse().context("--count")?;
            let concurrency: usize = arg(&args, "--concurrency").unwrap_or("256").parse().context("--concurrency")?;
            runtime.block_on(connect(to, from, count, concurrency.max(1)))
        }
        _ => usage(),
    }
}

async fn serve(listen: SocketAddr, name: String) -> Result<()> {
    let nofile = raise_nofile();
    let socket = if listen.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseport(true)?;
    socket.set_reuseaddr(true)?;
    socket.bind(listen).with_context(|| format!("bind {listen}"))?;
    let listener = socket.listen(65_535)?;
    eprintln!("torii-tcp-hold: {name} listening on {listen} (RLIMIT_NOFILE {nofile})");
    let name: Arc<[u8]> = Arc::from(name.as_bytes());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and the like: the connection stays queued; try again shortly.
                eprintln!("torii-tcp-hold: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let name = Arc::clone(&name);
        tokio::spawn(async move {
            if let Err(e) = answer(stream, peer, &name).await {
                eprintln!("torii-tcp-hold: connection from {peer}: {e}");
            }
        });
    }
}

/// One endpoint connection: the token in, [`reply`] out, then held until the client's FIN.
async fn answer(mut stream: TcpStream, peer: SocketAddr, name: &[u8]) -> io::Result<()> {
    let SocketAddr::V4(peer) = peer else { return Err(io::Error::other("IPv6 peer")) };
    stream.set_nodelay(true)?;
    let mut token = [0; TOKEN_LEN];
    stream.read_exact(&mut token).await?;
    stream.write_all(&reply(token, peer, name)).await?;
    let mut rest = [0; 64];
    while stream.read(&mut rest).await? != 0 {}
    stream.shutdown().await
}

async fn connect(to: SocketAddr, from: Ipv4Addr, count: usize, concurrency: usize) -> Result<()> {
    let nofile = raise_nofile();
    if count as u64 + 64 > nofile {
        bail!("{count} connections need more descriptors than RLIMIT_NOFILE {nofile}");
    }
    // Phase 1: open.
    let started = Instant::now();
    let limit = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    for _ in 0..count {
        let permit = Arc::clone(&limit).acquire_owned().await?;
        tasks.spawn(async move {
            let opened = tokio::time::timeout(STEP_TIMEOUT, async {
                let socket = TcpSocket::new_v4()?;
                socket.bind(SocketAddr::V4(SocketAddrV4::new(from, 0)))?;
                let stream = socket.connect(to).await?;
                stream.set_nodelay(true)?;
                io::Result::Ok(stream)
            })
            .await;
            drop(permit);
            match opened {
                Ok(Ok(s)) => Ok(s),
                Ok(Err(e)) => Err(format!("connect: {e}")),
                Err(_) => Err("connect: timed out".to_string()),
            }
        });
    }
    let mut streams = Vec::with_capacity(count);
    let mut failed = Failures::default();
    while let Some(done) = tasks.join_next().await {
        match done? {
            Ok(s) => streams.push(s),
            Err(e) => failed.add(e),
        }
    }
    report(
        json!({"phase": "open", "ok": streams.len(), "failed": failed.0, "seconds": started.elapsed().as_secs_f64()}),
    );

    let mut commands = stdin_lines();
    // Phase 2: exchange.
    wait_for(&mut commands, "exchange").await?;
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (i, mut stream) in streams.drain(..).enumerate() {
        let permit = Arc::clone(&limit).acquire_owned().await?;
        tasks.spawn(async move {
            let local = stream.local_addr();
            let token = ((u64::from(std::process::id()) << 32) | i as u64).to_be_bytes();
            let result = tokio::time::timeout(STEP_TIMEOUT, exchange(&mut stream, token)).await;
            drop(permit);
            let result = match (result, local) {
                (Ok(Ok(r)), _) => Ok(r),
                (Ok(Err(e)), Ok(l)) => Err(format!("exchange: {e} (local {l})")),
                (Ok(Err(e)), Err(_)) => Err(format!("exchange: {e}")),
                (Err(_), _) => Err("exchange: timed out".to_string()),
            };
            (stream, result)
        });
    }
    let mut endpoints = BTreeMap::<String, u64>::new();
    let mut peers = BTreeMap::<String, u64>::new();
    let mut failed = Failures::default();
    let mut ok = 0u64;
    while let Some(done) = tasks.join_next().await {
        let (stream, result) = done?;
        match result {
            Ok((name, peer)) => {
                ok += 1;
                *endpoints.entry(name).or_default() += 1;
                *peers.entry(peer.ip().to_string()).or_default() += 1;
            }
            Err(e) => failed.add(e),
        }
        streams.push(stream);
    }
    report(json!({
        "phase": "exchange", "ok": ok, "failed": failed.0, "endpoints": endpoints, "peers": peers,
        "seconds": started.elapsed().as_secs_f64(),
    }));

    // Phase 3: close.
    wait_for(&mut commands, "close").await?;
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for mut stream in streams.drain(..) {
        let permit = Arc::clone(&limit).acquire_owned().await?;
        tasks.spawn(async move {
            let result = tokio::time::timeout(STEP_TIMEOUT, async {
                stream.shutdown().await?;
                let mut rest = [0; 64];
                match stream.read(&mut rest).await? {
                    0 => Ok(()),
                    n => Err(io::Error::other(format!("{n} unexpected bytes before the endpoint's FIN"))),
                }
            })
            .await;
            drop(permit);
            match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("close: {e}")),
                Err(_) => Err("close: timed out".to_string()),
            }
        });
    }
    let mut failed = Failures::default();
    let mut ok = 0u64;
    while let Some(done) = tasks.join_next().await {
        match done? {
            Ok(()) => ok += 1,
            Err(e) => failed.add(e),
        }
    }
    report(json!({"phase": "close", "ok": ok, "failed": failed.0, "seconds": started.elapsed().as_secs_f64()}));
    Ok(())
}

/// Sends `token` and reads the endpoint's [`reply`]: its name and the peer address it saw.
async fn exchange(stream: &mut TcpStream, token: [u8; TOKEN_LEN]) -> io::Result<(String, SocketAddrV4)> {
    stream.write_all(&token).await?;
    let mut head = [0; TOKEN_LEN + 7];
    stream.read_exact(&mut head).await?;
    if head[..TOKEN_LEN] != token {
        return Err(io::Error::other(format!("token {:02x?} came back as {:02x?}", token, &head[..TOKEN_LEN])));
    }
    let ip = Ipv4Addr::new(head[8], head[9], head[10], head[11]);
    let port = u16::from_be_bytes([head[12], head[13]]);
    let mut name = vec![0; usize::from(head[14])];
    stream.read_exact(&mut name).await?;
    Ok((String::from_utf8_lossy(&name).into_owned(), SocketAddrV4::new(ip, port)))
}

/// Standard input's lines, read on a thread of their own.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_string()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for the line `command` on standard input.
async fn wait_for(commands: &mut mpsc::UnboundedReceiver<String>, command: &str) -> Result<()> {
    loop {
        match commands.recv().await {
            Some(line) if line == command => return Ok(()),
            Some(line) if line.is_empty() => {}
            Some(line) => bail!("expected {command:?} on standard input, got {line:?}"),
            None => bail!("standard input closed before {command:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_carries_token_peer_and_name() {
        let r = reply([1, 2, 3, 4, 5, 6, 7, 8], SocketAddrV4::new(Ipv4Addr::new(10, 70, 0, 1), 0x1234), b"web1");
        assert_eq!(r, [1, 2, 3, 4, 5, 6, 7, 8, 10, 70, 0, 1, 0x12, 0x34, 4, b'w', b'e', b'b', b'1']);
    }
}
