//! Harness for torii's network-namespace integration tests.
//!
//! The tests drive the real `torii-control` and `torii-gateway` binaries on the demo
//! topology that `scripts/topology` builds (client → gateway → bridge → backends, see
//! that script's header), with real clients: `curl` through `ip netns exec`, and Rust
//! sockets created inside the client namespace by a thread that `setns(2)`s into it.
//! A socket stays in the namespace it was created in, so such a socket can be used from
//! any thread afterwards.
//!
//! Everything a test starts is owned by a [`Harness`], whose `Drop` stops the processes,
//! removes the topology and the shared-memory directory, even when an assertion fails.
//! Traffic goes only to the topology's own addresses ([`WEB_VIP`], [`REJECT_VIP`],
//! [`STICKY_VIP`], their IPv6 counterparts, [`NODE_IP`]).
//!
//! Only this crate's `in_netns` and the daemons' `pre_exec` use `unsafe` (two system
//! calls); each block says why it is sound.

use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Service demo/web (TCP 80) and demo/echo (UDP 7): `externalIPs` address.
pub const WEB_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// Service demo/empty (TCP 80, UDP 9), which has no ready endpoints.
pub const REJECT_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 11);
/// Service demo/sticky (TCP 80, `sessionAffinity: ClientIP`, the web backends).
pub const STICKY_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 12);
/// The IPv6 front door of dual-stack demo/web (TCP 80) and demo/echo (UDP 7).
pub const WEB_VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x10);
/// The IPv6 front door of demo/empty.
pub const REJECT_VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x11);
/// The IPv6 front door of demo/sticky.
pub const STICKY_VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x12);
/// The gateway's own address on the client side, where NodePorts are served.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// NodePort of Service demo/web-np.
pub const NODE_PORT: u16 = 30080;
/// The web backends of demo/web: name (what each answers) and address; they listen on 8080.
pub const WEB_BACKENDS: [(&str, Ipv4Addr); 3] = [
    ("web1", Ipv4Addr::new(10, 70, 0, 11)),
    ("web2", Ipv4Addr::new(10, 70, 0, 12)),
    ("web3", Ipv4Addr::new(10, 70, 0, 13)),
];
/// The echo backend of demo/echo: it answers `echo:` + the datagram, on UDP 7007.
pub const ECHO_BACKEND: (&str, Ipv4Addr) = ("echo", Ipv4Addr::new(10, 70, 0, 21));

/// `[conntrack] syn_cookies_above_per_s` in the tests' configuration: SYNs a second per
/// worker beyond which the gateway answers with SYN cookies (the embedded default, 50 000,
/// is above what hping3 sends here).
pub const SYN_COOKIES_ABOVE_PER_S: u32 = 1000;

/// Where the test configuration has torii-gateway serve `/metrics` and `/healthz`, in the
/// gateway's namespace ([`Harness::write_config_for`]).
pub const METRICS_LISTEN: &str = "127.0.0.1:9100";

/// The repository root (the workspace this crate belongs to).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// The torii binaries of the cargo profile this test was built with.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `target/<profile>/torii-gateway`.
    pub gateway: PathBuf,
    /// `target/<profile>/torii-control`.
    pub control: PathBuf,
}

impl Binaries {
    /// Finds the binaries next to the running test executable
    /// (`target/<profile>/deps/netns-…` → `target/<profile>/`).
    ///
    /// # Errors
    /// When either binary is missing: they are built by `cargo build --bins`, not by
    /// `cargo test`'s build of this crate.
    pub fn locate() -> Result<Self> {
        let exe = std::env::current_exe().context("current_exe")?;
        let deps = exe.parent().context("test executable has no parent directory")?;
        let profile_dir = if deps.file_name().is_some_and(|n| n == "deps") {
            deps.parent().context("deps/ has no parent directory")?
        } else {
            deps
        };
        let bins = Self { gateway: profile_dir.join("torii-gateway"), control: profile_dir.join("torii-control") };
        for b in [&bins.gateway, &bins.control] {
            if !b.is_file() {
                bail!(
                    "{} not found: run `cargo build --release --bins` first \
                     (scripts/test does; use the same profile as the tests)",
                    b.display()
                );
            }
        }
        Ok(bins)
    }
}

/// Why this machine cannot run namespace tests, if it cannot: not root, or
/// `ip netns add` does not work. Probes with a throwaway namespace `<prefix>-probe`.
pub fn netns_unavailable(prefix: &str) -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!("not root (euid {euid}): network namespaces need root"));
    }
    let probe = format!("{prefix}-probe");
    match Command::new("ip").args(["netns", "add", &probe]).output() {
        Ok(out) if out.status.success() => {
            let _ = Command::new("ip").args(["netns", "delete", &probe]).status();
            None
        }
        Ok(out) => Some(format!("`ip netns add` failed: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Some(format!("cannot run `ip` (iproute2): {e}")),
    }
}

/// The environment variable that turns a skip for a missing capability (root, network
/// namespaces, DPDK) into a test failure. `.ci/run` sets it to `1`: a CI machine that lost a
/// capability fails instead of going green on skipped tests.
pub const REQUIRE_CAPABILITIES: &str = "TORII_REQUIRE_CAPABILITIES";

/// Why DPDK cannot run here, if it cannot (tests on DPDK's virtual devices skip then).
pub fn dpdk_unavailable() -> Option<String> {
    let ok = Command::new("pkg-config").args(["--exists", "libdpdk"]).status().is_ok_and(|s| s.success());
    (!ok).then(|| "DPDK is not installed (pkg-config libdpdk failed): run scripts/setup".to_string())
}

/// Free hugepage memory in bytes (`/proc/meminfo`).
pub fn free_hugepage_bytes() -> u64 {
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        meminfo.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
    };
    field("HugePages_Free").unwrap_or(0u64) * field("Hugepagesize").unwrap_or(0u64) * 1024
}

/// A directory for a test's conntrack regions in huge pages, `/dev/hugepages/torii-<prefix>`
/// (not created), when `/dev/hugepages` is a hugetlbfs mount (its block size is a huge
/// page: 2 MiB or more) with at least 64 MiB of huge pages free; why not otherwise.
///
/// # Errors
/// The reason there is none (scripts/setup mounts and reserves them, as root).
pub fn hugetlbfs_dir(prefix: &str) -> std::result::Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let mount = Path::new("/dev/hugepages");
    match fs::metadata(mount) {
        Ok(m) if m.blksize() >= 2 << 20 => {}
        _ => return Err("/dev/hugepages is not a hugetlbfs mount: run scripts/setup as root".into()),
    }
    let free = free_hugepage_bytes();
    if free < 64 << 20 {
        return Err(format!("only {} MiB of huge pages free, 64 needed: run scripts/setup as root", free >> 20));
    }
    Ok(mount.join(format!("torii-{prefix}")))
}

/// Prints a loud skip banner on stderr (the test then returns successfully). It is
/// written to the process's stderr directly, past libtest's output capture, so that
/// `cargo test` shows it; nextest shows it with `--success-output immediate`.
///
/// # Panics
/// When [`REQUIRE_CAPABILITIES`] is `1`: the skip is then a failure naming the reason.
pub fn print_skipped(test: &str, reason: &str) {
    assert!(
        std::env::var(REQUIRE_CAPABILITIES).as_deref() != Ok("1"),
        "{test}: {reason}; a skip is a failure with {REQUIRE_CAPABILITIES}=1 (set by .ci/run)"
    );
    let banner = format!(
        "\n################################################################\n\
         SKIPPED: {test}: {reason}\n\
         ################################################################\n\n"
    );
    let _ = io::stderr().write_all(banner.as_bytes());
}

/// Fails unless the command-line tools the topology and the tests use are installed.
///
/// # Errors
/// Names the missing tools and says to run `scripts/setup`.
pub fn require_tools() -> Result<()> {
    let missing: Vec<&str> = ["curl", "ethtool", "hping3", "iperf3", "python3", "ss", "sysctl"]
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        bail!("missing tools {missing:?}: run scripts/setup (as root) first")
    }
}

/// Runs `f` on a new thread that has joined the network namespace `/run/netns/<ns>`,
/// and returns its result. Sockets created by `f` belong to that namespace for life.
///
/// # Errors
/// Opening the namespace, `setns(2)`, or whatever `f` returns.
pub fn in_netns<T, F>(ns: &str, f: F) -> io::Result<T>
where
    T: Send,
    F: FnOnce() -> io::Result<T> + Send,
{
    let path = Path::new("/run/netns").join(ns);
    let file = fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
    std::thread::scope(|scope| {
        let handle = scope.spawn(move || {
            // SAFETY: `file` is open for the duration of the call, so the descriptor is
            // valid; setns(2) with CLONE_NEWNET changes only this thread's network
            // namespace, and this thread ends when `f` returns.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("setns into {ns}: {e}")));
            }
            f()
        });
        match handle.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// The last `lines` lines of a log file, with ANSI colour codes removed.
pub fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = strip_ansi(&String::from_utf8_lossy(&bytes));
            let all: Vec<&str> = text.lines().collect();
            let start = all.len().saturating_sub(lines);
            if all.is_empty() {
                "(empty)".to_string()
            } else {
                all[start..].join("\n")
            }
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Removes ANSI escape sequences (`ESC [ … letter`), which tracing writes by default.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.clone().next() == Some('[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A background process whose output goes to a log file; stopped on drop.
#[derive(Debug)]
pub struct Daemon {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` with stdin from /dev/null and stdout and stderr appended to `log`.
    /// The process gets SIGKILL if the thread that started it dies (a test killed by a
    /// timeout leaves no gateway behind), so start daemons from the test's main thread.
    ///
    /// # Errors
    /// When the log cannot be created or the program cannot be started.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of
        // the parent; it is the only thing this hook does between fork and exec.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("start {name}: {cmd:?}"))?;
        Ok(Self { name: name.to_string(), child: Some(child), log: log.to_path_buf() })
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The process id, while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends SIGKILL (`kill -9`) and reaps the process: a crash, as far as the process can
    /// tell. Returns its exit status (`None` if it was not running).
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }

    /// Sends SIGTERM and waits up to `grace` for the process to exit, then SIGKILLs it.
    /// Returns the exit status, and whether it exited within `grace`.
    pub fn stop(&mut self, grace: Duration) -> Option<(ExitStatus, bool)> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some((status, true));
        }
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on our own, not yet reaped child: the pid cannot have been
            // reused by another process.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some((status, true));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("{}: no exit {grace:?} after SIGTERM, killing it", self.name);
        let _ = child.kill();
        child.wait().ok().map(|s| (s, false))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.stop(Duration::from_secs(3));
    }
}

/// Starts `torii-vhost-peer` (`cmd`, the vhost-user server of `tests/virtio.rs` and
/// `tests/vm.rs`) logging to `log`, and waits up to 20 s for it to listen on `socket`.
///
/// # Errors
/// When it cannot start, exits first, or makes no socket in 20 s (with its log's tail).
pub fn spawn_vhost_peer(cmd: Command, socket: &Path, log: &Path) -> Result<Daemon> {
    let mut peer = Daemon::spawn("torii-vhost-peer", cmd, log)?;
    let start = Instant::now();
    while !socket.exists() {
        if let Some(status) = peer.exited() {
            bail!("torii-vhost-peer exited ({status}) before listening:\n{}", tail(log, 30));
        }
        if start.elapsed() > Duration::from_secs(20) {
            bail!("torii-vhost-peer made no socket at {} in 20 s:\n{}", socket.display(), tail(log, 30));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(peer)
}

/// A response read by [`HttpConn`] or [`curl_get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Body, surrounding whitespace trimmed: a backend's name.
    pub body: String,
    /// The `X-Client` header `scripts/backend.py` sends: the address:port the backend saw
    /// the connection come from (a gateway's SNAT address). `None` from [`curl_get`].
    pub client: Option<String>,
}

/// One HTTP/1.1 keep-alive connection, made from inside a network namespace.
#[derive(Debug)]
pub struct HttpConn {
    reader: BufReader<TcpStream>,
    host: String,
    local: SocketAddr,
}

impl HttpConn {
    /// Connects to `addr` from namespace `ns`; reads and writes time out after 3 s.
    ///
    /// # Errors
    /// The connect's error (refused, timed out, …).
    pub fn connect(ns: &str, addr: SocketAddrV4, timeout: Duration) -> io::Result<Self> {
        let stream = in_netns(ns, || TcpStream::connect_timeout(&addr.into(), timeout))?;
        stream.set_read_timeout(Some(Duration::from_secs(3)))?;
        stream.set_write_timeout(Some(Duration::from_secs(3)))?;
        stream.set_nodelay(true)?;
        let local = stream.local_addr()?;
        Ok(Self { reader: BufReader::new(stream), host: addr.to_string(), local })
    }

    /// Sets how long a read waits (3 s after [`HttpConn::connect`]).
    ///
    /// # Errors
    /// As [`TcpStream::set_read_timeout`].
    pub fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.reader.get_ref().set_read_timeout(Some(timeout))
    }

    /// The client side's address (what the gateway's conntrack keys on).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Sends `GET path` on this connection and reads the response (status line,
    /// headers, a `Content-Length` body).
    ///
    /// # Errors
    /// I/O errors and timeouts, the peer closing, or a response this client cannot read.
    pub fn get(&mut self, path: &str) -> io::Result<HttpResponse> {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: torii-integration\r\n\
             Accept: */*\r\nConnection: keep-alive\r\n\r\n",
            self.host
        );
        self.reader.get_mut().write_all(request.as_bytes())?;

        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by peer before a response"));
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
        let mut content_length = None;
        let mut client = None;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(bad("connection closed inside the headers".into()));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.trim().eq_ignore_ascii_case("content-length") {
                    content_length =
                        Some(value.trim().parse::<usize>().map_err(|_| bad(format!("bad Content-Length {value:?}")))?);
                } else if name.trim().eq_ignore_ascii_case("x-client") {
                    client = Some(value.trim().to_string());
                }
            }
        }
        let length = content_length.ok_or_else(|| bad("response has no Content-Length".into()))?;
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body)?;
        Ok(HttpResponse { status, body: String::from_utf8_lossy(&body).trim().to_string(), client })
    }
}

/// `ip netns exec <ns> curl -sS -g -m 3 <url>`: one request on a new connection (`-g`: an
/// IPv6 literal in brackets is an address, not a glob).
///
/// # Errors
/// When curl cannot run, or fails before getting a response (refused, timed out, …):
/// the error carries curl's message and exit code.
pub fn curl_get(ns: &str, url: &str) -> Result<HttpResponse> {
    curl_get_timeout(ns, url, Duration::from_secs(3))
}

/// [`curl_get`] with a custom overall timeout (`curl -m`).
///
/// # Errors
/// As [`curl_get`].
pub fn curl_get_timeout(ns: &str, url: &str, timeout: Duration) -> Result<HttpResponse> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sS", "-g", "-m"])
        .arg(format!("{:.3}", timeout.as_secs_f64()))
        .args(["-w", "\n%{http_code}", url])
        .stdin(Stdio::null())
        .output()
        .context("run curl via ip netns exec")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("curl {url} from {ns}: {} ({})", String::from_utf8_lossy(&out.stderr).trim(), out.status);
    }
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    Ok(HttpResponse { status: code.trim().parse().unwrap_or(0), body: body.trim().to_string(), client: None })
}

/// A UDP socket in namespace `ns`, connected to `peer` (so ICMP errors about it are
/// reported by `recv` as `ConnectionRefused`), with the given read timeout.
///
/// # Errors
/// Socket creation, bind or connect errors.
pub fn udp_connected(ns: &str, peer: impl Into<SocketAddr>, read_timeout: Duration) -> io::Result<UdpSocket> {
    let peer = peer.into();
    let socket = in_netns(ns, || {
        let s = UdpSocket::bind(if peer.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })?;
        s.connect(peer)?;
        Ok(s)
    })?;
    socket.set_read_timeout(Some(read_timeout))?;
    Ok(socket)
}

/// A TCP connect from namespace `ns`: the result and how long it took.
pub fn tcp_connect_timed(
    ns: &str,
    addr: impl Into<SocketAddr>,
    timeout: Duration,
) -> (io::Result<TcpStream>, Duration) {
    let addr = addr.into();
    let start = Instant::now();
    let r = in_netns(ns, || TcpStream::connect_timeout(&addr, timeout));
    (r, start.elapsed())
}

/// An edit of a manifests directory that can be undone.
#[derive(Debug, Clone)]
pub struct ManifestEdit {
    /// The rewritten file.
    pub path: PathBuf,
    original: String,
}

/// A directory of Kubernetes manifests (YAML, possibly multi-document, or JSON).
#[derive(Debug, Clone)]
pub struct Manifests {
    dir: PathBuf,
}

impl Manifests {
    /// Copies the directory `from` (recursively) to `to` and returns the copy.
    ///
    /// # Errors
    /// I/O errors, or `from` missing.
    pub fn copy(from: &Path, to: &Path) -> Result<Self> {
        if !from.is_dir() {
            bail!("manifests directory {} does not exist", from.display());
        }
        copy_dir(from, to)?;
        Ok(Self { dir: to.to_path_buf() })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes every endpoint whose addresses include `ip` from the EndpointSlices of
    /// Service `namespace/service` (label `kubernetes.io/service-name`), rewriting the
    /// one file that holds them atomically (write elsewhere, rename over).
    ///
    /// # Errors
    /// When no EndpointSlice of that Service lists `ip`, or on I/O and parse errors.
    pub fn remove_endpoint(&self, namespace: &str, service: &str, ip: Ipv4Addr) -> Result<ManifestEdit> {
        let ip = ip.to_string();
        for path in manifest_files(&self.dir)? {
            let original = fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
            let is_json = path.extension().is_some_and(|e| e == "json");
            let mut docs = parse_documents(&original, is_json).with_context(|| format!("parse {}", path.display()))?;
            let mut removed = 0;
            for doc in &mut docs {
                removed += remove_from_slice(doc, namespace, service, &ip);
            }
            if removed == 0 {
                continue;
            }
            let text = if is_json {
                let [doc] = docs.as_slice() else {
                    bail!("{}: a JSON manifest holds one object", path.display());
                };
                serde_json::to_string_pretty(doc)? + "\n"
            } else {
                let mut text = String::new();
                for (i, doc) in docs.iter().enumerate() {
                    if i > 0 {
                        text.push_str("---\n");
                    }
                    text.push_str(&serde_yaml_ng::to_string(doc)?);
                }
                text
            };
            self.write_atomically(&path, &text)?;
            return Ok(ManifestEdit { path, original });
        }
        bail!(
            "no EndpointSlice of Service {namespace}/{service} (label kubernetes.io/service-name) \
             lists {ip} in {}",
            self.dir.display()
        )
    }

    /// Puts back the file an edit changed.
    ///
    /// # Errors
    /// I/O errors.
    pub fn undo(&self, edit: &ManifestEdit) -> Result<()> {
        self.write_atomically(&edit.path, &edit.original)
    }

    /// Writes `text` to a temporary file outside the watched directory, then renames it
    /// over `path`, so a watcher never sees a half-written manifest.
    fn write_atomically(&self, path: &Path, text: &str) -> Result<()> {
        let parent = self.dir.parent().unwrap_or(Path::new("/tmp"));
        let tmp = parent.join(format!(".manifest-edit-{}", std::process::id()));
        fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
        fs::rename(&tmp, path).with_context(|| format!("rename onto {}", path.display()))?;
        Ok(())
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("create {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("read {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copy {} to {}", entry.path().display(), target.display()))?;
        }
    }
    Ok(())
}

/// Manifest files under `dir`, recursively, sorted.
fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn parse_documents(text: &str, is_json: bool) -> Result<Vec<serde_yaml_ng::Value>> {
    use serde::Deserialize as _;
    if is_json {
        return Ok(vec![serde_json::from_str(text)?]);
    }
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_yaml_ng::Value::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Removes the endpoints listing `ip` from `doc` if it is an EndpointSlice of
/// `namespace/service` (or a `List` holding such slices); returns how many it removed.
fn remove_from_slice(doc: &mut serde_yaml_ng::Value, namespace: &str, service: &str, ip: &str) -> usize {
    let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default().to_string();
    if kind.ends_with("List") {
        return match doc.get_mut("items").and_then(|i| i.as_sequence_mut()) {
            Some(items) => items.iter_mut().map(|item| remove_from_slice(item, namespace, service, ip)).sum(),
            None => 0,
        };
    }
    if kind != "EndpointSlice" {
        return 0;
    }
    let meta = doc.get("metadata");
    let ns = meta.and_then(|m| m.get("namespace")).and_then(|n| n.as_str()).unwrap_or("default");
    let owner =
        meta.and_then(|m| m.get("labels")).and_then(|l| l.get("kubernetes.io/service-name")).and_then(|s| s.as_str());
    if ns != namespace || owner != Some(service) {
        return 0;
    }
    let Some(endpoints) = doc.get_mut("endpoints").and_then(|e| e.as_sequence_mut()) else {
        return 0;
    };
    let before = endpoints.len();
    endpoints.retain(|ep| {
        !ep.get("addresses")
            .and_then(|a| a.as_sequence())
            .is_some_and(|addrs| addrs.iter().any(|a| a.as_str() == Some(ip)))
    });
    before - endpoints.len()
}

/// The running demo topology with torii on it, for one test. Dropping it stops the
/// gateway and the control process, removes the topology and the shared-memory
/// directory, and the work directory unless the test failed (then its path is printed:
/// it holds the configuration and the logs).
#[derive(Debug)]
pub struct Harness {
    /// Namespace prefix: namespaces are `<prefix>-client`, `<prefix>-gw`, ….
    pub prefix: String,
    /// Work directory: gateway.toml, manifests/, logs.
    pub workdir: PathBuf,
    /// The gateway's and control's shm_dir.
    pub shm_dir: PathBuf,
    /// The gateway's `conntrack.region_dir`, when set before
    /// [`write_config_for`](Self::write_config_for) (e.g. [`hugetlbfs_dir`]); removed on drop.
    pub region_dir: Option<PathBuf>,
    /// The test's copy of configs/demo, served by torii-control.
    pub manifests: Option<Manifests>,
    /// The configuration both processes read.
    pub config: PathBuf,
    /// torii-gateway, in `<prefix>-gw`.
    pub gateway: Option<Daemon>,
    /// torii-control run, in the root namespace.
    pub control: Option<Daemon>,
    topology_up: bool,
    passed: bool,
}

impl Harness {
    /// A harness with nothing started yet; `prefix` names the namespaces, and the work
    /// and shm directories (`/tmp/torii-<prefix>`, `/dev/shm/torii-<prefix>`).
    ///
    /// # Errors
    /// When the work directory cannot be created.
    pub fn new(prefix: &str) -> Result<Self> {
        let workdir = std::env::temp_dir().join(format!("torii-{prefix}"));
        let _ = fs::remove_dir_all(&workdir);
        fs::create_dir_all(&workdir).with_context(|| format!("create {}", workdir.display()))?;
        Ok(Self {
            prefix: prefix.to_string(),
            config: workdir.join("gateway.toml"),
            workdir,
            shm_dir: PathBuf::from(format!("/dev/shm/torii-{prefix}")),
            region_dir: None,
            manifests: None,
            gateway: None,
            control: None,
            topology_up: false,
            passed: false,
        })
    }

    /// The namespace `<prefix>-<short>` (client, gw, lan, web1, …).
    pub fn ns(&self, short: &str) -> String {
        format!("{}-{short}", self.prefix)
    }

    /// Writes the test's configuration for the AF_PACKET driver: see
    /// [`write_config_for`](Self::write_config_for).
    ///
    /// # Errors
    /// As [`write_config_for`](Self::write_config_for).
    pub fn write_config(&mut self) -> Result<()> {
        self.write_config_for("af_packet")
    }

    /// Writes the test's configuration: `configs/gateway.toml` with `shm_dir` replaced by
    /// this harness's, `control.manifests` by a copy of `configs/demo` in the work dir,
    /// `syn_cookies_above_per_s` by [`SYN_COOKIES_ABOVE_PER_S`], and
    /// `driver` by `driver` (`"af_packet"` or `"dpdk"`). Under DPDK the fallback to
    /// AF_PACKET is turned off, so a gateway that cannot start DPDK fails the test instead
    /// of passing it on AF_PACKET.
    ///
    /// # Errors
    /// When configs/gateway.toml has no `shm_dir` or `driver` line, or on I/O errors.
    pub fn write_config_for(&mut self, driver: &str) -> Result<()> {
        let root = repo_root();
        let manifests = Manifests::copy(&root.join("configs/demo"), &self.workdir.join("manifests"))?;
        let source = root.join("configs/gateway.toml");
        let text = fs::read_to_string(&source).with_context(|| format!("read {}", source.display()))?;
        let quoted = |p: &Path| serde_json::to_string(&p.display().to_string()).expect("string");
        let mut shm_lines = 0;
        let mut driver_lines = 0;
        let mut region_lines = 0;
        let mut out = String::new();
        for line in text.lines() {
            let key = line.split('=').next().unwrap_or_default().trim();
            if let (Some(dir), "# region_dir") = (&self.region_dir, key) {
                region_lines += 1;
                writeln!(out, "region_dir = {}", quoted(dir))?;
            } else if key == "shm_dir" {
                shm_lines += 1;
                writeln!(out, "shm_dir = {}", quoted(&self.shm_dir))?;
            } else if key == "driver" {
                driver_lines += 1;
                writeln!(out, "driver = {driver:?}")?;
            } else if key == "fallback_to_af_packet" {
                writeln!(out, "fallback_to_af_packet = false")?;
            } else if key == "manifests" {
                writeln!(out, "manifests = {}", quoted(manifests.dir()))?;
            } else if key == "syn_cookies_above_per_s" {
                // Low enough that the SYN-flood step's flood engages the SYN proxy.
                writeln!(out, "syn_cookies_above_per_s = {SYN_COOKIES_ABOVE_PER_S}")?;
            } else {
                writeln!(out, "{line}")?;
            }
        }
        // The gateway's metrics endpoint, on its namespace's loopback.
        writeln!(out, "\n[metrics]\nlisten = {METRICS_LISTEN:?}")?;
        if shm_lines != 1 {
            bail!(
                "{} has {shm_lines} `shm_dir = …` lines, expected 1: the test cannot give its \
                 processes a private shared-memory directory",
                source.display()
            );
        }
        if driver_lines != 1 {
            bail!("{} has {driver_lines} `driver = …` lines, expected 1", source.display());
        }
        if self.region_dir.is_some() && region_lines != 1 {
            bail!("{} has {region_lines} `# region_dir = …` lines, expected 1", source.display());
        }
        fs::write(&self.config, out).with_context(|| format!("write {}", self.config.display()))?;
        self.manifests = Some(manifests);
        Ok(())
    }

    /// `scripts/topology up <prefix>` (which first removes any leftover of that prefix).
    ///
    /// # Errors
    /// The script's output when it fails.
    pub fn topology_up(&mut self) -> Result<()> {
        self.topology_up = true;
        run_topology("up", &self.prefix)
    }

    /// Starts `torii-control run` (root namespace) and `torii-gateway` (in `<prefix>-gw`)
    /// on the test's configuration, logging to the work dir. Sets `RUST_LOG=info`
    /// unless the environment has one, and `NO_COLOR=1`.
    ///
    /// # Errors
    /// When a process cannot be started.
    pub fn start(&mut self, bins: &Binaries) -> Result<()> {
        let manifests = self.manifests.as_ref().context("write_config first")?.dir().to_path_buf();
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());

        let mut control = Command::new(&bins.control);
        control
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .arg("--manifests")
            .arg(&manifests)
            .current_dir(&self.workdir)
            .env("RUST_LOG", &log_level)
            .env("NO_COLOR", "1");
        self.control = Some(Daemon::spawn("torii-control", control, &self.workdir.join("control.log"))?);
        self.start_gateway(bins)
    }

    /// Starts `torii-gateway` (in `<prefix>-gw`) on the test's configuration, appending to
    /// its log (also to restart it).
    ///
    /// # Errors
    /// When it cannot be started.
    pub fn start_gateway(&mut self, bins: &Binaries) -> Result<()> {
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        let mut gateway = Command::new("ip");
        gateway
            .args(["netns", "exec", &self.ns("gw")])
            .arg(&bins.gateway)
            .arg("--config")
            .arg(&self.config)
            .current_dir(&self.workdir)
            .env("RUST_LOG", &log_level)
            .env("NO_COLOR", "1");
        self.gateway = Some(Daemon::spawn("torii-gateway", gateway, &self.workdir.join("gateway.log"))?);
        Ok(())
    }

    /// Fails if the gateway or the control process has exited.
    ///
    /// # Errors
    /// Names the process and its exit status.
    pub fn check_alive(&mut self) -> Result<()> {
        for (name, daemon) in [("torii-gateway", &mut self.gateway), ("torii-control", &mut self.control)] {
            if let Some(status) = daemon.as_mut().and_then(Daemon::exited) {
                bail!("{name} exited ({status})");
            }
        }
        Ok(())
    }

    /// The tails of the gateway's and the control process's logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for name in ["gateway.log", "control.log"] {
            let path = self.workdir.join(name);
            let _ = write!(s, "\n----- last 40 lines of {} -----\n{}\n", path.display(), tail(&path, 40));
        }
        s
    }

    /// An error for step `step`: `message`, then the processes' log tails.
    pub fn fail(&self, step: &str, message: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!("step {step:?} failed: {message}\n{}", self.logs())
    }

    /// Marks the test passed: the work directory is removed on drop.
    pub fn passed(&mut self) {
        self.passed = true;
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        drop(self.gateway.take());
        drop(self.control.take());
        if self.topology_up {
            if let Err(e) = run_topology("down", &self.prefix) {
                eprintln!("teardown: {e:#}");
            }
        }
        let _ = fs::remove_dir_all(&self.shm_dir);
        if let Some(dir) = &self.region_dir {
            let _ = fs::remove_dir_all(dir);
        }
        if self.passed && !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.workdir);
        } else {
            eprintln!("torii integration test: logs and configuration kept in {}", self.workdir.display());
        }
    }
}

/// Runs `cmd` to completion like [`Command::output`], but kills it after `timeout`.
///
/// # Errors
/// When it cannot be started, or did not finish within `timeout` (with what it printed).
pub fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<std::process::Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {cmd:?}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Some(status) => Ok(std::process::Output { status, stdout, stderr }),
        None => bail!(
            "{cmd:?} did not finish within {timeout:?}; killed it.\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ),
    }
}

/// `bash scripts/topology ACTION PREFIX`.
///
/// # Errors
/// With the script's output when it fails.
pub fn run_topology(action: &str, prefix: &str) -> Result<()> {
    let script = repo_root().join("scripts/topology");
    let out = Command::new("bash")
        .arg(&script)
        .args([action, prefix])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "scripts/topology {action} {prefix} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifest edit of step 5, on the real demo manifests: only the web slice
    /// loses the endpoint, everything else survives the rewrite, undo restores the file.
    #[test]
    fn remove_endpoint_from_demo_web_slice_and_undo() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("torii-manifest-edit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let manifests = Manifests::copy(&repo_root().join("configs/demo"), &dir.join("manifests"))?;
        let edit = manifests.remove_endpoint("demo", "web", Ipv4Addr::new(10, 70, 0, 12))?;
        let edited = fs::read_to_string(&edit.path)?;
        let docs = parse_documents(&edited, false)?;

        let slice_ips = |service: &str| -> Vec<String> {
            let slice = docs
                .iter()
                .find(|d| {
                    d.get("kind").and_then(|k| k.as_str()) == Some("EndpointSlice")
                        && d.get("metadata")
                            .and_then(|m| m.get("labels"))
                            .and_then(|l| l.get("kubernetes.io/service-name"))
                            .and_then(|s| s.as_str())
                            == Some(service)
                })
                .unwrap_or_else(|| panic!("no slice of {service} in {}:\n{edited}", edit.path.display()));
            slice["endpoints"]
                .as_sequence()
                .expect("endpoints")
                .iter()
                .map(|ep| ep["addresses"][0].as_str().expect("address").to_string())
                .collect()
        };
        assert_eq!(slice_ips("web"), ["10.70.0.11", "10.70.0.13"], "edited file:\n{edited}");
        let services = docs.iter().filter(|d| d.get("kind").and_then(|k| k.as_str()) == Some("Service")).count();
        assert!(services >= 1, "Services lost in the rewrite:\n{edited}");
        // The NodePort Service's own slice (another file) is untouched.
        let np = fs::read_to_string(manifests.dir().join("nodeport.yaml"))?;
        assert!(np.contains("10.70.0.12"));

        // Removing it twice finds nothing to remove.
        assert!(manifests.remove_endpoint("demo", "web", Ipv4Addr::new(10, 70, 0, 12)).is_err());

        manifests.undo(&edit)?;
        assert_eq!(fs::read_to_string(&edit.path)?, edit.original);
        fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn strip_ansi_removes_colour_codes() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m driver=af_packet"),
            "2026  INFO driver=af_packet"
        );
    }
}
