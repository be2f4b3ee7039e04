//! The poll loop around the pure core: adopt a newer table at the top of the loop; from each
//! port receive a vector of up to [`VECTOR`] frames (receive calls of [`BURST`] while they
//! come back full), run it through [`pipeline::process_burst`] (every frame's
//! [`pipeline::process`], with the memory loads of many frames overlapped) and transmit
//! it; then do bounded housekeeping (ARP requests, conntrack expiry, counter export).
//!
//! The loop is written against [`PacketIo`], so every driver (AF_PACKET now, DPDK next)
//! runs the same code. Table adoption follows DESIGN.md: the gateway's table watcher
//! ([`TableWatcher`]) validates a newly published snapshot once and stores it in a
//! [`TableHandle`]; each worker notices the new generation between loop passes, switches,
//! drops its old table (and refreshes its report, which then holds the new one), and then
//! reports the switch to the gateway's [`Mappings`], which acknowledge in the shared state
//! region. An old snapshot is unmapped when its last holder drops it; an acknowledgement of
//! generation `G` promises that no snapshot older than `G` is still mapped (see
//! [`crate::table::shm`]), which is what lets torii-control reuse older files.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use crossbeam_utils::CachePadded;

use crate::counters::{Counters, DropReason, FrontendCounters};
use crate::pipeline::{self, Meta, Verdict, WorkerState};
use crate::table::shm::{Mappings, StateRegion};
use crate::table::Table;
use crate::wire::vlan;

/// Frames per receive call (DPDK's customary 32).
pub const BURST: usize = 32;
/// Frames a worker gathers from one port before processing them: receive calls of
/// [`BURST`] follow each other while they come back full, up to this many (VPP's vector
/// size). [`pipeline::process_burst`] overlaps memory loads across the whole vector, so a
/// loaded port pays the pipeline's start-up once per 256 frames instead of once per 32; a
/// lightly loaded one is processed as soon as a receive call comes back short, so nothing
/// waits for a vector to fill.
pub const VECTOR: usize = 256;
/// Size of each frame buffer: a 1500-byte MTU frame with room to spare.
pub const FRAME_BUFFER: usize = 2048;
/// Bytes between the starts of consecutive frame buffers: one cache line more than a buffer,
/// so that their first lines (the headers) spread over the L1 cache's sets (with a 2 KiB
/// stride they would all fall in two of its 64 sets: 24 lines, on this 12-way 48 KiB L1,
/// for a vector's 256 headers).
const FRAME_STRIDE: usize = FRAME_BUFFER + 64;

/// One frame buffer of [`FRAME_BUFFER`] bytes in a slot of [`FRAME_STRIDE`]: only the
/// buffer is ever seen (the pipeline builds no frame longer than it).
#[derive(Clone, Copy)]
struct FrameSlot([u8; FRAME_STRIDE]);

impl AsMut<[u8]> for FrameSlot {
    #[inline]
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.0[..FRAME_BUFFER]
    }
}

impl AsRef<[u8]> for FrameSlot {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        &self.0[..FRAME_BUFFER]
    }
}
/// Conntrack records examined for expiry per loop iteration.
const EXPIRE_BUDGET: usize = 64;
/// Empty polls before a worker sleeps in [`PacketIo::wait`].
const IDLE_SPINS: u32 = 2000;

/// What a driver knows about a received frame besides its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxInfo {
    /// The L4 checksum holds only the pseudo-header sum (see [`Meta::l4_csum_partial`]).
    pub l4_csum_partial: bool,
    /// The VLAN tag the device took out of the frame on receive, as (TPID, TCI): Linux
    /// reports it in the packet's auxdata (`tp_vlan_tci`, `tp_vlan_tpid`), DPDK in
    /// `mbuf.vlan_tci` with `RTE_MBUF_F_RX_VLAN_STRIPPED`. The worker puts it back, so the
    /// pipeline sees the frame as it was on the wire.
    pub stripped_tag: Option<(u16, u16)>,
}

/// A worker's packet I/O: its RX and TX queues on every port.
pub trait PacketIo {
    /// Number of ports (indices `0..n` as in [`crate::config::Config::ports`]).
    fn interfaces(&self) -> usize;
    /// Receives up to `max` frames from port `iface`, calling `f(frame, info)` for each.
    /// Returns the number received. Never blocks.
    fn rx(&mut self, iface: usize, max: usize, f: &mut dyn FnMut(&[u8], RxInfo)) -> usize;
    /// Queues `frame` for transmission on port `iface`; false when the queue is full.
    fn tx(&mut self, iface: usize, frame: &[u8]) -> bool;
    /// Hands queued frames to the NIC.
    fn flush(&mut self);
    /// Sleeps until a frame may be waiting or `timeout` passes (idle workers).
    fn wait(&mut self, timeout: Duration);
}

/// What one worker publishes for reporting, about once a second.
#[derive(Clone, Debug, Default)]
pub struct WorkerReport {
    /// Its counters.
    pub counters: Counters,
    /// Its per-front-door counts, indexed like `table`'s front doors.
    pub frontends: FrontendCounters,
    /// The table the worker uses (`None` before its first report). The worker refreshes its
    /// report when it switches tables, so this never keeps an old snapshot mapped past the
    /// switch; a scrape's copy keeps it only while it renders, and the gateway's
    /// acknowledgements wait for that (`crate::table::shm::Mappings`).
    pub table: Option<Arc<Table>>,
    /// Flows in its conntrack.
    pub flows: u64,
    /// When it reported: ns since the gateway's clock origin.
    pub at_ns: u64,
}

/// A worker's report slot, shared with the metrics thread.
pub type ReportSlot = Arc<Mutex<WorkerReport>>;

/// The table the workers should be using, published by the [`TableWatcher`].
pub struct TableHandle {
    current: ArcSwap<Table>,
    /// Read by every worker every burst, written once per adopted table: on a cache line of
    /// its own, so the health check's lock of `stored_at` and the swap's reference counts
    /// do not take the line from the workers.
    generation: CachePadded<AtomicU64>,
    /// When the current table was stored (read by the health check only).
    stored_at: std::sync::Mutex<Instant>,
}

impl std::fmt::Debug for TableHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableHandle").field("generation", &self.generation()).finish()
    }
}

impl TableHandle {
    /// A handle holding `table`.
    pub fn new(table: Table) -> Self {
        let generation = CachePadded::new(AtomicU64::new(table.generation()));
        Self { current: ArcSwap::from_pointee(table), generation, stored_at: std::sync::Mutex::new(Instant::now()) }
    }

    /// Replaces the current table.
    pub fn store(&self, table: Table) {
        let g = table.generation();
        self.current.store(Arc::new(table));
        self.generation.store(g, Ordering::Release);
        if let Ok(mut at) = self.stored_at.lock() {
            *at = Instant::now();
        }
    }

    /// How long the current table has been held.
    pub fn held_for(&self) -> Duration {
        self.stored_at.lock().map(|at| at.elapsed()).unwrap_or_default()
    }

    /// The current generation (cheap: one atomic load; workers check it every burst).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current table.
    pub fn load(&self) -> Arc<Table> {
        self.current.load_full()
    }
}

/// Watches the shared state region and adopts newly published tables after validating them.
pub struct TableWatcher {
    /// The shared-memory directory.
    pub dir: PathBuf,
    /// The state region in it.
    pub region: Arc<StateRegion>,
    /// What the gateway maps (every table is mapped through it).
    pub mappings: Arc<Mappings>,
    /// Where adopted tables go.
    pub handle: Arc<TableHandle>,
    /// Generations rejected as invalid (counted).
    pub rejected: AtomicU64,
}

impl TableWatcher {
    /// Checks once for a newer publication and adopts it if valid. Returns the adopted
    /// generation. An invalid snapshot is logged, counted, reported in the state region
    /// and not retried; the current table stays.
    pub fn poll(&self, last_rejected: &mut u64) -> Option<u64> {
        let g = self.region.published_generation();
        if g == 0 || g == self.handle.generation() || g == *last_rejected {
            return None;
        }
        match self.mappings.load_table(&self.dir, g) {
            Ok(t) => {
                tracing::info!(
                    generation = g,
                    frontends = t.frontends().len(),
                    services = t.service_count(),
                    "adopting table"
                );
                self.handle.store(t);
                Some(g)
            }
            Err(e) => {
                tracing::error!(
                    generation = g,
                    "rejected published table, keeping generation {}: {e}",
                    self.handle.generation()
                );
                *last_rejected = g;
                self.rejected.fetch_add(1, Ordering::Relaxed);
                self.region.set_rejected_generation(g);
                None
            }
        }
    }

    /// Polls every `interval` until `stop` is set.
    pub fn run(&self, interval: Duration, stop: &AtomicBool) {
        let mut last_rejected = 0;
        while !stop.load(Ordering::Relaxed) {
            self.poll(&mut last_rejected);
            std::thread::sleep(interval);
        }
    }
}

/// Everything a worker thread needs besides its I/O.
pub struct Worker {
    /// The pipeline state.
    pub state: WorkerState,
    /// Where to find the current table.
    pub tables: Arc<TableHandle>,
    /// Where to report adopted generations (which acknowledges them).
    pub mappings: Arc<Mappings>,
    /// Set to stop the loop.
    pub stop: Arc<AtomicBool>,
    /// Where the worker copies its counters about once a second.
    pub export: ReportSlot,
    /// The process's monotonic clock origin.
    pub epoch: Instant,
}

/// Copies a received frame into a worker buffer, putting back the VLAN tag its device
/// stripped. `None` when it does not fit (counted [`DropReason::Oversize`]).
#[inline]
fn copy_frame(buf: &mut [u8], frame: &[u8], stripped_tag: Option<(u16, u16)>) -> Option<usize> {
    match stripped_tag {
        None => {
            buf.get_mut(..frame.len())?.copy_from_slice(frame);
            Some(frame.len())
        }
        Some((tpid, tci)) => vlan::copy_tagged(buf, frame, tpid, tci),
    }
}

impl Worker {
    /// Runs the poll loop until `stop` is set.
    pub fn run<I: PacketIo>(mut self, io: &mut I) -> Counters {
        let mut bufs = vec![FrameSlot([0u8; FRAME_STRIDE]); VECTOR];
        let mut metas = [Meta::default(); VECTOR];
        let mut verdicts = [Verdict::Consumed; VECTOR];
        let mut scratch = [0u8; pipeline::POLL_TRANSMIT_LEN];
        let mut table = self.tables.load();
        let mut now = self.now();
        self.adopt(&mut table, None, now);
        let mut idle = 0u32;
        let mut last_export = now;
        let ifaces = io.interfaces();
        while !self.stop.load(Ordering::Relaxed) {
            now = self.now();
            // Between vectors: the quiescent point where a new table may be adopted.
            if self.tables.generation() != table.generation() {
                let new = self.tables.load();
                self.adopt(&mut table, Some(new), now);
            }
            let mut received = 0;
            for iface in 0..ifaces {
                let mut n = 0;
                let mut oversize = 0;
                // Frames taken off the port, kept or not (oversize, or refused by the
                // driver): what bounds the vector, so a port full of frames that are all
                // thrown away cannot hold the worker here.
                let mut taken = 0;
                loop {
                    let got = io.rx(iface, BURST, &mut |frame, info| {
                        let Some(len) = copy_frame(bufs[n].as_mut(), frame, info.stripped_tag) else {
                            oversize += 1;
                            return;
                        };
                        metas[n] = Meta { iface: iface as u8, len, l4_csum_partial: info.l4_csum_partial };
                        n += 1;
                    });
                    taken += got;
                    if got < BURST || taken + BURST > VECTOR {
                        break;
                    }
                }
                for _ in 0..oversize {
                    self.state.counters.drop(DropReason::Oversize);
                }
                received += n;
                pipeline::process_burst(now, &mut bufs[..n], &metas[..n], &table, &mut self.state, &mut verdicts);
                for k in 0..n {
                    if let Verdict::Transmit { iface: out, len } = verdicts[k] {
                        if !io.tx(usize::from(out), &bufs[k].as_ref()[..len]) {
                            self.state.counters.drop(DropReason::TxRingFull);
                        }
                    }
                }
                if n > 0 {
                    // A vector can fill a transmit ring: hand it over before the next port's.
                    io.flush();
                }
            }
            while let Some((iface, len)) = pipeline::poll_transmit(now, &mut scratch, &mut self.state) {
                if !io.tx(usize::from(iface), &scratch[..len]) {
                    self.state.counters.drop(DropReason::TxRingFull);
                }
            }
            io.flush();
            pipeline::poll_expire(now, EXPIRE_BUDGET, &mut self.state);
            if now - last_export > 1_000_000_000 {
                last_export = now;
                if let Ok(mut r) = self.export.try_lock() {
                    self.report(&mut r, &table, now);
                }
            }
            if received == 0 {
                idle += 1;
                if idle > IDLE_SPINS {
                    io.wait(Duration::from_millis(5));
                }
            } else {
                idle = 0;
            }
        }
        if let Ok(mut r) = self.export.lock() {
            self.report(&mut r, &table, now);
        }
        self.state.counters
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Copies the worker's counters into its report slot (no allocation once the slot's
    /// vectors have grown to the table's size).
    fn report(&self, r: &mut WorkerReport, table: &Arc<Table>, now: u64) {
        r.counters.clone_from(&self.state.counters);
        r.frontends.clone_from(&self.state.frontends);
        if !r.table.as_ref().is_some_and(|t| Arc::ptr_eq(t, table)) {
            r.table = Some(Arc::clone(table));
        }
        r.flows = self.state.conntrack.len() as u64;
        r.at_ns = now;
    }

    /// Switches from `table` to `new` (`None`: the first table, already in `table`), then
    /// acknowledges: the old table is dropped and the report slot (which held it) refreshed
    /// first, so the acknowledgement is not held back by this worker (module docs).
    fn adopt(&mut self, table: &mut Arc<Table>, new: Option<Arc<Table>>, now: u64) {
        match new {
            Some(new) => {
                self.state.adopt_table(table, &new, now);
                drop(std::mem::replace(table, new));
            }
            None => self.state.adopt_table(table, table, now),
        }
        // Blocking: the metrics thread holds the slot only to copy it.
        if let Ok(mut r) = self.export.lock() {
            self.report(&mut r, table, now);
        }
        self.mappings.adopted(self.state.worker, table.generation());
        tracing::debug!(worker = self.state.worker, generation = table.generation(), "worker adopted table");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_frames_are_copied_with_their_stripped_tag_restored() {
        let frame: Vec<u8> = (0u8..60).collect();
        let mut buf = [0xa5u8; FRAME_BUFFER];
        assert_eq!(copy_frame(&mut buf, &frame, None), Some(60));
        assert_eq!(&buf[..60], &frame[..]);
        assert_eq!(copy_frame(&mut buf, &frame, Some((0x8100, 0x0064))), Some(64));
        assert_eq!(&buf[..16], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0x00, 0x64]);
        assert_eq!(&buf[16..64], &frame[12..]);
        // A frame that (with its tag) does not fit is refused, counted oversize by the caller.
        let big = vec![0u8; FRAME_BUFFER - 2];
        assert_eq!(copy_frame(&mut buf, &big, None), Some(FRAME_BUFFER - 2));
        assert_eq!(copy_frame(&mut buf, &big, Some((0x8100, 1))), None);
        assert_eq!(copy_frame(&mut buf, &[0u8; FRAME_BUFFER + 1], None), None);
    }
}
