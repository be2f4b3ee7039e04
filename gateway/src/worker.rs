//! The poll loop around the pure core: adopt a newer table at the top of the loop; from each
//! port receive a vector of up to [`VECTOR`] frames (receive calls of [`BURST`] while they
//! come back full), run it through [`pipeline::process_burst`] (every frame's
//! [`pipeline::process`], with the memory loads of many frames overlapped) and transmit
//! it; then do bounded housekeeping (ARP requests, conntrack expiry, counter export).
//! Every pass that carried frames is timed ([`crate::poll_times`]).
//!
//! The frames stay in the driver's buffers throughout (zero copy, DESIGN.md): the worker
//! processes the vector in place ([`PacketIo::vector`]) and hands it back with its verdicts
//! ([`PacketIo::tx_vector`]); only frames the worker builds itself are copied into buffers
//! of the driver's ([`PacketIo::tx_copy`]).
//!
//! The loop is written against [`PacketIo`], generic over the driver's buffer type, so
//! every driver (AF_PACKET, DPDK) runs the same code. Table adoption follows DESIGN.md: the gateway's table watcher
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
use crate::poll_times::PollTimes;
use crate::table::shm::{Mappings, StateRegion};
use crate::table::Table;

/// Frames per receive call (DPDK's customary 32).
pub const BURST: usize = 32;
/// Frames a worker gathers from one port before processing them: receive calls of
/// [`BURST`] follow each other while they come back full, up to this many (VPP's vector
/// size). [`pipeline::process_burst`] overlaps memory loads across the whole vector, so a
/// loaded port pays the pipeline's start-up once per 256 frames instead of once per 32; a
/// lightly loaded one is processed as soon as a receive call comes back short, so nothing
/// waits for a vector to fill.
pub const VECTOR: usize = 256;
/// Empty polls before a worker sleeps in [`PacketIo::wait`].
const IDLE_SPINS: u32 = 2000;

/// What one receive call did ([`PacketIo::rx`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Frames taken off the port, kept or not: what bounds a vector, so a port full of
    /// frames that are all thrown away cannot hold the worker.
    pub taken: usize,
    /// Of those, frames the driver dropped because no buffer holds them whole (larger than
    /// a buffer, chained, cut by the ring): the worker counts them
    /// [`DropReason::Oversize`].
    pub oversize: usize,
    /// Of those, frames of other workers' flows handed to their owner
    /// ([`crate::io::redirect`]; the worker counts them `redirected`).
    pub redirected: usize,
    /// Of those, frames of other workers' flows dropped because the owner's ring was full
    /// (the worker counts them [`DropReason::RedirectRingFull`]).
    pub redirect_full: usize,
}

/// A worker's packet I/O: its RX and TX queues on every port, and the **vector** — the
/// frames received from one port that the worker is processing, in buffers the driver
/// owns (DPDK: the received mbufs; AF_PACKET: the frames in the receive ring). The worker
/// rewrites them in place ([`pipeline::process_burst`]) and hands them back with their
/// verdicts ([`PacketIo::tx_vector`]): a forwarded frame leaves in the buffer it came in
/// (DPDK) or is copied once, into the transmit ring (AF_PACKET).
pub trait PacketIo {
    /// A received frame's buffer. `as_mut()` is what the pipeline may write: the frame
    /// from its first byte (its length is the frame's [`Meta::len`]), then the room after
    /// it to the end of the buffer — at least [`pipeline::MIN_BUFFER`] bytes in all, so an
    /// ICMP error or RST can be built in place, and normally 4 bytes more than the frame,
    /// so a frame can gain an 802.1Q tag (where not, the pipeline drops it as
    /// [`DropReason::Oversize`]). A tag the device stripped on receive is back in the frame.
    type Buf: AsMut<[u8]>;

    /// Number of ports (indices `0..n` as in [`crate::config::Config::ports`]).
    fn interfaces(&self) -> usize;

    /// Receives up to `max` frames from port `iface` and appends them, with their
    /// [`Meta`], to the vector. Never blocks. A vector holds the frames of one port:
    /// [`tx_vector`](Self::tx_vector) ends it before another port is received from.
    /// A driver that redirects ([`crate::io::redirect`]) also appends the frames other
    /// workers received on that port for this worker's flows, and keeps out of the vector
    /// those it handed to their owner.
    fn rx(&mut self, iface: usize, max: usize) -> Received;

    /// The vector: its frames' buffers and their metadata, index for index.
    fn vector(&mut self) -> (&mut [Self::Buf], &[Meta]);

    /// Ends the vector with one verdict per frame: each [`Verdict::Transmit`] frame
    /// (its first `len` bytes) is queued on its port, every other buffer is freed (in
    /// bulk). Returns how many frames to transmit the TX queues had no room for (freed
    /// too; the worker counts them [`DropReason::TxRingFull`]). The vector is empty
    /// afterwards.
    fn tx_vector(&mut self, verdicts: &[Verdict]) -> usize;

    /// Queues a copy of `frame`, which the worker built (the ARP requests and Neighbor
    /// Solicitations of [`pipeline::poll_transmit`]), on port `iface` in a buffer of the
    /// driver's (a fresh mbuf from the worker's pool; a transmit-ring slot); false when
    /// the queue is full or no buffer is free.
    fn tx_copy(&mut self, iface: usize, frame: &[u8]) -> bool;

    /// Hands queued frames to the NICs. Returns how many frames they still refused after
    /// a few tries, freed (the worker counts them [`DropReason::TxRingFull`]).
    fn flush(&mut self) -> usize;

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
    /// How long its poll passes that carried frames took.
    pub poll_times: PollTimes,
    /// When it reported: ns since the gateway's clock origin.
    pub at_ns: u64,
}

/// A worker's report slot, shared with the metrics thread.
pub type ReportSlot = Arc<Mutex<WorkerReport>>;

/// A driver's vector storage ([`PacketIo::vector`]): buffers and their metadata, index for
/// index, with room for [`VECTOR`] frames reserved once so receiving never allocates.
#[derive(Debug)]
pub struct Vector<B> {
    bufs: Vec<B>,
    metas: Vec<Meta>,
}

impl<B> Default for Vector<B> {
    fn default() -> Self {
        Self { bufs: Vec::with_capacity(VECTOR), metas: Vec::with_capacity(VECTOR) }
    }
}

impl<B> Vector<B> {
    /// Frames in the vector.
    #[inline]
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// Whether the vector is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// Appends a received frame.
    #[inline]
    pub fn push(&mut self, buf: B, meta: Meta) {
        debug_assert!(self.bufs.len() < VECTOR, "a vector holds at most VECTOR frames");
        self.bufs.push(buf);
        self.metas.push(meta);
    }

    /// The buffers and their metadata.
    #[inline]
    pub fn parts(&mut self) -> (&mut [B], &[Meta]) {
        (&mut self.bufs, &self.metas)
    }

    /// Empties the vector, handing each buffer with its verdict to `f` in order (a frame
    /// without a verdict gets [`Verdict::Consumed`]: freed).
    #[inline]
    pub fn drain(&mut self, verdicts: &[Verdict], mut f: impl FnMut(B, Verdict)) {
        self.metas.clear();
        for (k, buf) in self.bufs.drain(..).enumerate() {
            f(buf, verdicts.get(k).copied().unwrap_or(Verdict::Consumed));
        }
    }
}

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

impl Worker {
    /// Runs the poll loop until `stop` is set.
    pub fn run<I: PacketIo>(mut self, io: &mut I) -> Counters {
        let mut verdicts = [Verdict::Consumed; VECTOR];
        let mut scratch = [0u8; pipeline::POLL_TRANSMIT_LEN];
        let mut table = self.tables.load();
        let mut now = self.now();
        let mut times = PollTimes::new();
        self.adopt(&mut table, None, now, &times);
        let mut idle = 0u32;
        let mut last_export = now;
        let mut expiry = pipeline::ExpiryPace::new(now);
        let ifaces = io.interfaces();
        // The last pass's start and whether it carried frames (`crate::poll_times`).
        let (mut pass_start, mut busy) = (now, false);
        while !self.stop.load(Ordering::Relaxed) {
            now = self.now();
            if busy {
                times.record(now - pass_start);
            }
            pass_start = now;
            // Between vectors: the quiescent point where a new table may be adopted.
            if self.tables.generation() != table.generation() {
                let new = self.tables.load();
                self.adopt(&mut table, Some(new), now, &times);
            }
            let mut received = 0;
            for iface in 0..ifaces {
                let mut taken = 0;
                loop {
                    let got = io.rx(iface, BURST);
                    taken += got.taken;
                    self.state.counters.drop_n(DropReason::Oversize, got.oversize);
                    self.state.counters.redirected += got.redirected as u64;
                    self.state.counters.drop_n(DropReason::RedirectRingFull, got.redirect_full);
                    if got.taken < BURST || taken + BURST > VECTOR {
                        break;
                    }
                }
                let (frames, metas) = io.vector();
                let n = frames.len();
                received += n;
                pipeline::process_burst(now, frames, metas, &table, &mut self.state, &mut verdicts);
                let refused = io.tx_vector(&verdicts[..n]);
                self.state.counters.drop_n(DropReason::TxRingFull, refused);
                if n > 0 {
                    // A vector can fill a transmit ring: hand it over before the next port's.
                    let refused = io.flush();
                    self.state.counters.drop_n(DropReason::TxRingFull, refused);
                }
            }
            while let Some((iface, len)) = pipeline::poll_transmit(now, &mut scratch, &mut self.state) {
                if !io.tx_copy(usize::from(iface), &scratch[..len]) {
                    self.state.counters.drop(DropReason::TxRingFull);
                }
            }
            let refused = io.flush();
            self.state.counters.drop_n(DropReason::TxRingFull, refused);
            let records = self.state.conntrack.capacity().max(self.state.conntrack6.capacity());
            let budget = expiry.budget(now, records);
            if budget > 0 {
                pipeline::poll_expire(now, budget, &mut self.state);
            }
            if now - last_export > 1_000_000_000 {
                last_export = now;
                if let Ok(mut r) = self.export.try_lock() {
                    self.report(&mut r, &table, now, &times);
                }
            }
            busy = received > 0;
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
            self.report(&mut r, &table, now, &times);
        }
        let us = |ns: u64| ns as f64 / 1e3;
        tracing::info!(
            worker = self.state.worker,
            passes = times.passes(),
            busy_s = times.busy_ns() as f64 / 1e9,
            p50_us = us(times.quantile(0.5)),
            p99_us = us(times.quantile(0.99)),
            p99_9_us = us(times.quantile(0.999)),
            max_us = us(times.max()),
            "poll passes that carried frames"
        );
        let mut counters = self.state.counters.clone();
        self.count_resyncs(&mut counters);
        counters
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Sets `counters`' resynchronisation counts from the ignored-SYN tables, which keep
    /// them (`conntrack::resync`).
    fn count_resyncs(&self, counters: &mut Counters) {
        let (syns, syns6) = (self.state.conntrack.ignored_syns(), self.state.conntrack6.ignored_syns());
        counters.tcp_resyncs = syns.resyncs() + syns6.resyncs();
        counters.tcp_ignored_syns_overwritten = syns.overwritten() + syns6.overwritten();
    }

    /// Copies the worker's counters into its report slot (no allocation once the slot's
    /// vectors have grown to the table's size).
    fn report(&self, r: &mut WorkerReport, table: &Arc<Table>, now: u64, times: &PollTimes) {
        r.counters.clone_from(&self.state.counters);
        self.count_resyncs(&mut r.counters);
        r.frontends.clone_from(&self.state.frontends);
        if !r.table.as_ref().is_some_and(|t| Arc::ptr_eq(t, table)) {
            r.table = Some(Arc::clone(table));
        }
        r.flows = self.state.conntrack.len() as u64;
        r.poll_times.copy_from(times);
        r.at_ns = now;
    }

    /// Switches from `table` to `new` (`None`: the first table, already in `table`), then
    /// acknowledges: the old table is dropped and the report slot (which held it) refreshed
    /// first, so the acknowledgement is not held back by this worker (module docs).
    fn adopt(&mut self, table: &mut Arc<Table>, new: Option<Arc<Table>>, now: u64, times: &PollTimes) {
        match new {
            Some(new) => {
                self.state.adopt_table(table, &new, now);
                drop(std::mem::replace(table, new));
            }
            None => self.state.adopt_table(table, table, now),
        }
        // Blocking: the metrics thread holds the slot only to copy it.
        if let Ok(mut r) = self.export.lock() {
            self.report(&mut r, table, now, times);
        }
        self.mappings.adopted(self.state.worker, table.generation());
        tracing::debug!(worker = self.state.worker, generation = table.generation(), "worker adopted table");
    }
}
