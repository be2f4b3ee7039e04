//! The devices under test as processes: torii-control and torii-gateway (on
//! `net_virtio_user` against torii-bench's first `net_vhost` port), and testpmd's io
//! forwarding (on `net_virtio_user` against the second). Each runs in its own process
//! with its own EAL file prefix; the forwarding core of both is `dut_cpu`, torii-bench's
//! own is another.
//!
//! The device that is not being measured is frozen (SIGSTOP) and thawed (SIGCONT) for
//! its own trials, so the two never share the forwarding core during a trial. Every
//! process started here is stopped (SIGTERM, then SIGKILL after 5 s) when its [`Proc`]
//! is dropped, or killed by the kernel if torii-bench dies first (`PR_SET_PDEATHSIG`).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::{kill_process, set_parent_process_death_signal, Pid, Signal};

use crate::plan::VirtioRx;

/// Which memory the DPDK processes use: all of them the same, or vhost-user cannot map
/// the other side's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    /// 2 MiB hugepages, `--in-memory --single-file-segments`.
    Hugepages,
    /// `--no-huge -m 256 --no-shconf` (slower; when too few hugepages are free).
    NoHuge,
}

impl Memory {
    /// EAL arguments for this choice.
    pub fn eal_args(self) -> Vec<String> {
        match self {
            Memory::Hugepages => vec!["--in-memory".into(), "--single-file-segments".into()],
            Memory::NoHuge => ["--no-huge", "-m", "256", "--no-shconf"].map(String::from).to_vec(),
        }
    }

    /// Hugepages when at least `need_bytes` of them are free, else none.
    pub fn choose(need_bytes: u64) -> Self {
        if free_hugepage_bytes() >= need_bytes {
            Memory::Hugepages
        } else {
            Memory::NoHuge
        }
    }
}

/// Free hugepage memory in bytes (`/proc/meminfo`).
pub fn free_hugepage_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        meminfo.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
    };
    field("HugePages_Free").unwrap_or(0u64) * field("Hugepagesize").unwrap_or(0u64) * 1024
}

/// A process torii-bench started, with its log file.
pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr to `log` and stdin a pipe kept open (testpmd
    /// waits on it).
    ///
    /// # Errors
    /// When the program cannot be started.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = File::create(log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        // SAFETY: the closure runs in the forked child before exec and makes two system
        // calls (prctl PR_SET_PDEATHSIG, setsid), both async-signal-safe; it allocates
        // nothing.
        // A DPDK process left behind would busy-poll a core of a shared machine: if
        // torii-bench dies without its Drop running (SIGKILL, a timeout), so do they.
        //
        // setsid: each process starts a session of its own, hence (with
        // `kernel.sched_autogroup_enabled`, the default of most distributions) a scheduler
        // group of its own. In one group with the generator, a device whose forwarding
        // thread is always runnable on its CPU drew the group's CPU weight away from the
        // generator's CPU: on a busy machine the generator had 20-25 % of its CPU facing
        // testpmd and 30-70 % facing torii, and offered accordingly.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(|| {
                set_parent_process_death_signal(Some(Signal::KILL)).map_err(std::io::Error::from)?;
                rustix::process::setsid().map(drop).map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("start {name} ({:?})", cmd.get_program()))?;
        Ok(Self { name: name.into(), child, log: log.to_path_buf() })
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Fails with the log's tail if the process has exited.
    ///
    /// # Errors
    /// When it has.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.exited() {
            bail!("{} exited ({status}); last lines of {}:\n{}", self.name, self.log.display(), tail(&self.log, 25));
        }
        Ok(())
    }

    fn signal(&self, sig: Signal) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, sig);
        }
    }

    /// Freezes the process (SIGSTOP).
    pub fn freeze(&self) {
        self.signal(Signal::STOP);
    }

    /// Thaws the process (SIGCONT).
    pub fn thaw(&self) {
        self.signal(Signal::CONT);
    }

    /// SIGTERM, then SIGKILL after `grace`; returns the exit status.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exited() {
            return Some(s);
        }
        self.thaw();
        self.signal(Signal::TERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// The last `lines` lines of a file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Mbufs in torii-gateway's pool for one worker on `ports` ports of `queue_size` RX and TX
/// descriptors (gateway/src/io/dpdk.rs: every ring full, a vector, a TX batch per port and
/// two caches of 256, rounded up to 2^k − 1): 16 383 for one port of 4096.
pub fn gateway_pool_mbufs(ports: u32, queue_size: u16) -> u32 {
    // BURST 32, VECTOR 256, POOL_CACHE 256 there.
    (ports * (2 * u32::from(queue_size) + 32) + 256 + 2 * 256 + 1).next_power_of_two() - 1
}

/// testpmd's command line: io forwarding on one `net_virtio_user` port looped to itself
/// (one-armed) or between two (`sockets` the clients' and the endpoints', paired), started
/// forwarding, with its port and lcores set up as torii-gateway's are (the io-fwd
/// ceiling is only a ceiling if the device does everything torii's does but the
/// translation):
///
/// - both lcores on `dut_cpu` (the forwarding lcore and the main one, which waits on its
///   stdin), as torii-gateway's one lcore; EAL's control threads go to the other CPUs for
///   both;
/// - `queue_size` descriptors in the virtio rings and the port's queues;
/// - receive as torii-gateway does (`virtio_rx`): with [`VirtioRx::Offload`], UDP and TCP RX
///   checksum offload on (`--rx-offloads=0xc`), what torii-gateway gets when it asks for
///   checksum offloads (`net_virtio_user` offers no IPv4 one): both `net_virtio_user`
///   devices then negotiate the same virtio features (`VIRTIO_NET_F_GUEST_CSUM` besides
///   mergeable RX buffers, in-order, indirect descriptors, version 1;
///   `--dpdk-log-level lib.vhost.config:info` prints them); with
///   [`VirtioRx::Vectorized`], no receive offload (`--rx-offloads=0`); with
///   [`VirtioRx::Packed`], `0xc` again and `--force-max-simd-bitwidth=512`; in every mode
///   the device arguments torii's device gets ([`VirtioRx::devargs`]);
/// - a pool of `mbufs` mbufs with torii-gateway's cache of 256 (0: testpmd's default
///   pool, (2048 + 2 × 250 + 2048 + 512) × RTE_MAX_ETHPORTS = 163 456 mbufs, 370 MiB in
///   Debian's build, against torii's 16 383 and 42 MiB for one port of 4096 descriptors:
///   every frame is copied into and out of the device's mbufs by torii-bench's vhost side,
///   and mbufs spilled from the lcore cache come back from the pool's ring in FIFO order,
///   so the whole pool circulates through the caches and the TLB of both sides).
pub fn testpmd_command(
    program: &Path,
    sockets: &[PathBuf],
    dut_cpu: usize,
    queue_size: u16,
    virtio_rx: VirtioRx,
    mbufs: u32,
    memory: Memory,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args([format!("--lcores=0@{dut_cpu},1@{dut_cpu}"), "--main-lcore=0".into()])
        .args(["--file-prefix", &format!("torii-bench-testpmd-{}", std::process::id())])
        .args(memory.eal_args())
        .args(virtio_rx.eal_args())
        .args(["--no-pci", "--no-telemetry", "--log-level=*:notice"]);
    for (k, socket) in sockets.iter().enumerate() {
        cmd.arg("--vdev").arg(format!(
            "net_virtio_user{k},path={},queues=1,queue_size={queue_size}{}",
            socket.display(),
            virtio_rx.devargs()
        ));
    }
    let topology = if sockets.len() == 2 { "--port-topology=paired" } else { "--port-topology=loop" };
    let rx_offloads = if virtio_rx.checksum_offload() { "--rx-offloads=0xc" } else { "--rx-offloads=0" };
    cmd.args(["--", "--forward-mode=io", topology, "--nb-cores=1", rx_offloads])
        .args([format!("--rxd={queue_size}"), format!("--txd={queue_size}")])
        .args(["--burst=32", "--auto-start"]);
    if mbufs > 0 {
        cmd.args([format!("--total-num-mbufs={mbufs}"), "--mbcache=256".into()]);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testpmd_pool_is_torii_gateways() {
        // gateway/src/io/dpdk.rs: ports × (rx + tx + 32) + 256 + 2 × 256, rounded up to 2^k − 1.
        let torii = |ports: u32, q: u32| (ports * (2 * q + 32) + 256 + 512 + 1).next_power_of_two() - 1;
        for (ports, q) in [(1, 1024), (1, 4096), (2, 4096), (1, 256)] {
            assert_eq!(gateway_pool_mbufs(ports, q as u16), torii(ports, q), "{ports} × {q}");
        }
        assert_eq!(gateway_pool_mbufs(1, 4096), 16_383);
    }

    #[test]
    fn testpmd_is_set_up_as_the_gateway() {
        let socks = [PathBuf::from("/w/f.sock"), PathBuf::from("/w/b.sock")];
        let args =
            |cmd: Command| cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
        let two =
            args(testpmd_command(Path::new("testpmd"), &socks, 1, 4096, VirtioRx::Offload, 32_767, Memory::Hugepages));
        assert!(two.starts_with("--lcores=0@1,1@1 --main-lcore=0 "), "{two}");
        assert!(two.contains("--vdev net_virtio_user0,path=/w/f.sock,queues=1,queue_size=4096 --vdev net_virtio_user1,path=/w/b.sock"), "{two}");
        assert!(two.contains("-- --forward-mode=io --port-topology=paired --nb-cores=1 --rx-offloads=0xc --rxd=4096 --txd=4096 --burst=32"), "{two}");
        assert!(two.ends_with("--total-num-mbufs=32767 --mbcache=256"), "{two}");
        let one =
            args(testpmd_command(Path::new("testpmd"), &socks[..1], 1, 1024, VirtioRx::Vectorized, 0, Memory::NoHuge));
        assert!(one.contains("--port-topology=loop") && !one.contains("mbufs"), "{one}");
        assert!(
            one.contains("queue_size=1024,mrg_rxbuf=0,in_order=0,vectorized=1 ") && one.contains(" --rx-offloads=0 "),
            "{one}"
        );
    }
}
