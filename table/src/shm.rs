//! The publication protocol in shared memory (a tmpfs directory, `/dev/shm/torii` by default).
//!
//! ```text
//! <dir>/state                      4 KiB state region, mapped shared by both processes
//! <dir>/table-<generation:020>     one snapshot per generation, mode 0600
//! ```
//!
//! torii-control writes a snapshot under a temporary name, renames it to `table-N` (so a
//! snapshot file is complete whenever it has its final name), then stores `N` into the
//! state region's published generation with release ordering. The gateway polls that
//! generation, maps and validates the file (only ever the published generation's, by its
//! name), hands it to its workers, and each worker acknowledges in its slot.
//!
//! # What an acknowledgement means
//!
//! Worker `w` storing `G` in its acknowledgement slot states: *worker `w` has adopted
//! generation `G`, and the gateway process holds no mapping of any snapshot older than `G`*
//! — not in a worker, not in the table handle, not in a metrics report or scrape. The
//! gateway keeps this true by construction: every snapshot it maps is counted by its
//! [`Mappings`] until the mapping is unmapped, and a slot holds the smaller of the worker's
//! adopted generation and the oldest generation still mapped (so when a scrape or a slower
//! worker still holds the old table, the acknowledgement waits, and is brought up to date
//! by whichever thread unmaps the last old mapping). A starting gateway registers, which
//! resets every slot to 0, before it maps anything; slots only ever name generations the
//! gateway has adopted, all at most the published one.
//!
//! # What torii-control may do with a file
//!
//! The published generation's file and every file of a generation at or above the oldest
//! acknowledgement (`min_acked`) may be mapped: they are never modified, truncated or
//! renamed. A file older than `min_acked` that is not the published one is *retired*: no
//! gateway maps it (acknowledgement above) and none will (the gateway maps only the
//! published generation). torii-control may delete it, or reuse it: rename it away from its
//! `table-N` name first (rename is atomic, so no name ever points at changing bytes), patch
//! it into a newer snapshot, then rename it to that snapshot's name. Without a registered
//! gateway (`min_acked` is `None`) no gateway maps anything, and one that registers later
//! maps only the published generation, by name: so a file that is not the published one
//! may be reused too, if it is renamed away from its `table-N` name *first* and no
//! gateway has registered when that rename is done (checked after it; a gateway that
//! registered before it may have read that generation as the published one, and the file
//! must go back under its name untouched).
//!
//! (A file truncated or rewritten under a live mapping would fault or change a validated
//! table under its reader; this discipline is what makes mapping snapshots safe.)
//!
//! One gateway and one torii-control per directory: each takes its role's lock
//! ([`lock_dir`]: `<dir>/gateway.lock`, `<dir>/control.lock`) before it writes anything, and
//! a second one exits with an error naming the holder — a second gateway registering would
//! reset the slots the first one still writes to, a second torii-control would publish
//! over the first's generations.

#![allow(unsafe_code)] // mapping files and atomics over shared memory; see the SAFETY comments

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use memmap2::{MmapOptions, MmapRaw};

pub use crate::storage::Mapping;
use crate::storage::Storage;
use crate::view::{Table, TableError};

/// Largest number of workers a gateway runs: the number of acknowledgement slots in the
/// state region.
pub const MAX_WORKERS: usize = 64;

/// Size of the state region file in bytes.
pub const STATE_LEN: usize = 4096;
const STATE_MAGIC: u64 = u64::from_le_bytes(*b"TORIISTA");
const OFF_MAGIC: usize = 0;
const OFF_PUBLISHED: usize = 8;
const OFF_WORKERS: usize = 16;
const OFF_GATEWAY_PID: usize = 24;
const OFF_REJECTED: usize = 32;
const OFF_ACKS: usize = 64;
const _: () = assert!(OFF_ACKS + 8 * MAX_WORKERS <= STATE_LEN);

/// Writes `text` to `path` atomically: to `path.torii-tmp` beside it (same file system),
/// then renamed over it, so a reader (BIRD, the gateway, torii-control) never sees half a
/// file.
///
/// # Errors
/// I/O errors of the write or the rename (a missing directory, permissions).
pub fn write_atomically(path: &Path, text: &str) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".torii-tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// File name of the snapshot of `generation`.
pub fn table_file_name(generation: u64) -> String {
    format!("table-{generation:020}")
}

/// The generation a snapshot file name stands for (`None` for other files).
pub fn parse_table_file_name(name: &str) -> Option<u64> {
    let g = name.strip_prefix("table-")?;
    (g.len() == 20 && g.bytes().all(|c| c.is_ascii_digit())).then(|| g.parse().ok()).flatten()
}

/// Which process holds a directory's lock ([`lock_dir`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// torii-gateway: `<dir>/gateway.lock`.
    Gateway,
    /// torii-control: `<dir>/control.lock`.
    Control,
}

impl Role {
    fn lock_file(self) -> &'static str {
        match self {
            Role::Gateway => "gateway.lock",
            Role::Control => "control.lock",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::Gateway => "torii-gateway",
            Role::Control => "torii-control",
        }
    }
}

/// Why [`lock_dir`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "another {role} (pid {holder}) already uses {dir}: one {role} per shared-memory directory; stop it or \
         give this one another `shm_dir`"
    )]
    Held {
        /// The role.
        role: &'static str,
        /// The directory.
        dir: PathBuf,
        /// The holder's process id, as it wrote it in the lock file (0 if unreadable).
        holder: u32,
    },
    /// The directory or the lock file could not be created or locked.
    #[error("cannot lock {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// A held directory lock: released when dropped (or when the process exits, however it
/// exits — the kernel drops an `flock` with its last file descriptor).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Takes `role`'s exclusive lock on shared-memory directory `dir` (creating `dir`, mode
/// 0700, and the lock file, mode 0600), without waiting, and writes this process's id into
/// the lock file. Take it before writing anything else in `dir`.
///
/// # Errors
/// [`LockError::Held`] when another process holds it; [`LockError::Io`] when the directory
/// or file cannot be created or locked.
pub fn lock_dir(dir: &Path, role: Role) -> Result<DirLock, LockError> {
    let path = dir.join(role.lock_file());
    let io_err = |source| LockError::Io { path: path.clone(), source };
    ensure_dir(dir).map_err(io_err)?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io_err)?;
    // [`holds_lock`] takes the lock shared for a moment to test it: retry past that.
    let mut tries = 0;
    let locked = loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if tries < 20 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            other => break other,
        }
    };
    match locked {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
            return Err(LockError::Held { role: role.name(), dir: dir.to_owned(), holder });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io_err(e)),
    }
    use std::io::Write as _;
    file.set_len(0).map_err(io_err)?;
    writeln!(file, "{}", std::process::id()).map_err(io_err)?;
    Ok(DirLock { _file: file })
}

/// Whether a live process holds `role`'s lock on `dir` ([`lock_dir`]): the kernel's word
/// that the process is alive, the moment it dies however it dies (the lock goes with its
/// last file descriptor), across PID namespaces and without trusting a PID that may have
/// been reused. Tests by taking the lock shared for an instant (`flock(2)` `LOCK_SH |
/// LOCK_NB`); [`lock_dir`] retries past such a test.
///
/// # Errors
/// I/O errors opening the lock file other than its absence (no lock file: `Ok(false)`).
pub fn holds_lock(dir: &Path, role: Role) -> io::Result<bool> {
    let file = match File::open(dir.join(role.lock_file())) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Creates `dir` (mode 0700) if it is missing.
///
/// # Errors
/// When the directory cannot be created.
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// The shared state region: published generation, gateway workers and their acks.
pub struct StateRegion {
    map: MmapRaw,
    path: PathBuf,
}

impl std::fmt::Debug for StateRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateRegion").field("path", &self.path).finish()
    }
}

impl StateRegion {
    /// Opens `<dir>/state`, creating the directory and the file (zero-filled, mode 0600) if
    /// needed. Either process may be first.
    ///
    /// # Errors
    /// When the directory or file cannot be created, sized or mapped.
    pub fn open(dir: &Path) -> io::Result<Self> {
        ensure_dir(dir)?;
        let path = dir.join("state");
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path)?;
        if file.metadata()?.len() < STATE_LEN as u64 {
            file.set_len(STATE_LEN as u64)?;
        }
        let map = MmapOptions::new().len(STATE_LEN).map_raw(&file)?;
        let region = Self { map, path };
        region.atomic(OFF_MAGIC).store(STATE_MAGIC, Ordering::Release);
        Ok(region)
    }

    fn atomic(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= STATE_LEN);
        // SAFETY: the mapping is STATE_LEN bytes long, page-aligned and lives as long as
        // `self`; `offset` is a multiple of 8 inside it (all callers use the constants
        // above), so the pointer is valid and aligned for an AtomicU64. The memory is
        // shared with another process, which only ever accesses it atomically as well.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    /// The path of the state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The generation torii-control most recently published (0: none yet).
    pub fn published_generation(&self) -> u64 {
        self.atomic(OFF_PUBLISHED).load(Ordering::Acquire)
    }

    /// Publishes `generation` (torii-control only; the snapshot file must exist first).
    pub fn set_published_generation(&self, generation: u64) {
        self.atomic(OFF_PUBLISHED).store(generation, Ordering::Release);
    }

    /// Number of workers of the running gateway (0: no gateway has registered).
    pub fn workers(&self) -> usize {
        (self.atomic(OFF_WORKERS).load(Ordering::Acquire) as usize).min(MAX_WORKERS)
    }

    /// Registers a starting gateway: its pid and worker count; resets the acks.
    pub fn register_gateway(&self, pid: u32, workers: usize) {
        for w in 0..MAX_WORKERS {
            self.atomic(OFF_ACKS + 8 * w).store(0, Ordering::Relaxed);
        }
        self.atomic(OFF_GATEWAY_PID).store(u64::from(pid), Ordering::Relaxed);
        self.atomic(OFF_WORKERS).store(workers.min(MAX_WORKERS) as u64, Ordering::Release);
    }

    /// Unregisters a gateway that stops (only if `pid` is still the registered one).
    pub fn unregister_gateway(&self, pid: u32) {
        if self.atomic(OFF_GATEWAY_PID).load(Ordering::Relaxed) == u64::from(pid) {
            self.atomic(OFF_WORKERS).store(0, Ordering::Release);
        }
    }

    /// The pid of the registered gateway (0: none).
    pub fn gateway_pid(&self) -> u32 {
        self.atomic(OFF_GATEWAY_PID).load(Ordering::Relaxed) as u32
    }

    /// Stores `generation` in `worker`'s acknowledgement slot (see the module docs for what
    /// it promises; the gateway acknowledges through [`Mappings`]).
    pub fn ack(&self, worker: usize, generation: u64) {
        if worker < MAX_WORKERS {
            self.atomic(OFF_ACKS + 8 * worker).store(generation, Ordering::Release);
        }
    }

    /// The generation `worker` last acknowledged.
    pub fn acked(&self, worker: usize) -> u64 {
        if worker < MAX_WORKERS {
            self.atomic(OFF_ACKS + 8 * worker).load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// The oldest generation any registered worker still uses; `None` without a gateway.
    pub fn min_acked(&self) -> Option<u64> {
        (0..self.workers()).map(|w| self.acked(w)).min()
    }

    /// Records the newest generation the gateway rejected as invalid (0: none).
    pub fn set_rejected_generation(&self, generation: u64) {
        self.atomic(OFF_REJECTED).store(generation, Ordering::Release);
    }

    /// The newest generation the gateway rejected as invalid (0: none).
    pub fn rejected_generation(&self) -> u64 {
        self.atomic(OFF_REJECTED).load(Ordering::Acquire)
    }
}

/// Why a published snapshot could not be adopted.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be opened or mapped.
    #[error("cannot map {path}: {source}")]
    Io {
        /// The snapshot file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The bytes are not a valid snapshot.
    #[error("{path}: {source}")]
    Invalid {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: TableError,
    },
    /// The snapshot's header carries another generation than its file name.
    #[error("{path}: header says generation {found}")]
    WrongGeneration {
        /// The snapshot file.
        path: PathBuf,
        /// Generation in the header.
        found: u64,
    },
}

/// One live mapping of `generation`, released (and the acknowledgements brought up to date)
/// when dropped.
struct Lease {
    mappings: Arc<Mappings>,
    generation: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.mappings.release(self.generation);
    }
}

/// The snapshots a gateway process maps and the generations its workers adopted; the only
/// writer of the workers' acknowledgement slots (module docs: an acknowledgement of `G`
/// means that no snapshot older than `G` is mapped).
///
/// Every snapshot the gateway maps goes through [`Mappings::load_table`]; each worker
/// reports its switches with [`Mappings::adopted`]. Both and every unmapping take one
/// mutex (a few times per publication, never per packet) and store each slot as
/// `min(adopted generation, oldest generation mapped)`.
pub struct Mappings {
    region: Arc<StateRegion>,
    ledger: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Live mappings by generation.
    mapped: BTreeMap<u64, usize>,
    /// The generation each worker adopted (0: none yet), by worker index.
    adopted: Vec<u64>,
}

impl std::fmt::Debug for Mappings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Mappings").field("mapped", &ledger.mapped).field("adopted", &ledger.adopted).finish()
    }
}

impl Mappings {
    /// The ledger of a gateway with `workers` workers acknowledging in `region` (which the
    /// gateway has registered in, resetting the slots, before mapping anything).
    pub fn new(region: Arc<StateRegion>, workers: usize) -> Arc<Self> {
        let ledger = Ledger { mapped: BTreeMap::new(), adopted: vec![0; workers.min(MAX_WORKERS)] };
        Arc::new(Self { region, ledger: Mutex::new(ledger) })
    }

    /// The state region the slots are in.
    pub fn region(&self) -> &Arc<StateRegion> {
        &self.region
    }

    /// Maps and validates the snapshot of `generation` in `dir` (as [`load_table`]), counting
    /// the mapping until the returned table (its last clone) is dropped.
    ///
    /// # Errors
    /// [`LoadError`]; the caller keeps its current table.
    pub fn load_table(self: &Arc<Self>, dir: &Path, generation: u64) -> Result<Table, LoadError> {
        // Counted before the file is opened, so no acknowledgement can pass `generation`
        // while it is being mapped.
        self.lock().mapped.entry(generation).and_modify(|n| *n += 1).or_insert(1);
        let lease = Lease { mappings: Arc::clone(self), generation };
        map_table(dir, generation, Some(lease))
    }

    /// Records that `worker` now uses the table of `generation` (and has dropped its
    /// previous one), and acknowledges what is true (module docs).
    pub fn adopted(&self, worker: usize, generation: u64) {
        let mut ledger = self.lock();
        if let Some(a) = ledger.adopted.get_mut(worker) {
            *a = generation;
        }
        self.acknowledge(&ledger);
    }

    /// The oldest generation this process maps (`None`: none).
    pub fn oldest_mapped(&self) -> Option<u64> {
        self.lock().mapped.keys().next().copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn release(&self, generation: u64) {
        let mut ledger = self.lock();
        if let Some(n) = ledger.mapped.get_mut(&generation) {
            *n -= 1;
            if *n == 0 {
                ledger.mapped.remove(&generation);
            }
        }
        self.acknowledge(&ledger);
    }

    /// Stores every worker's slot: `min(adopted, oldest mapped)` (under the ledger's lock,
    /// so slots only move forward).
    fn acknowledge(&self, ledger: &Ledger) {
        let oldest = ledger.mapped.keys().next().copied().unwrap_or(u64::MAX);
        for (w, &adopted) in ledger.adopted.iter().enumerate() {
            let ack = adopted.min(oldest);
            if self.region.acked(w) != ack {
                self.region.ack(w, ack);
            }
        }
    }
}

/// Maps and validates the snapshot of `generation` in `dir`, uncounted: for tools and
/// tests. A reader that is not the registered gateway is not covered by the
/// acknowledgements, so it must map only the published generation and keep it briefly
/// (torii-control may reuse the file once it is retired); the gateway uses
/// [`Mappings::load_table`].
///
/// # Errors
/// [`LoadError`]; the caller keeps its current table.
pub fn load_table(dir: &Path, generation: u64) -> Result<Table, LoadError> {
    map_table(dir, generation, None)
}

fn map_table(dir: &Path, generation: u64, lease: Option<Lease>) -> Result<Table, LoadError> {
    let path = dir.join(table_file_name(generation));
    let io_err = |source| LoadError::Io { path: path.clone(), source };
    let file = File::open(&path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    let storage = if len == 0 {
        Storage::Owned(Vec::new())
    } else {
        // SAFETY: snapshot files are written completely under a temporary name and renamed;
        // the published generation's file (the only one the gateway opens) and every file
        // of a generation the gateway has not acknowledged past are never written,
        // truncated or renamed (module docs), and `lease` keeps this mapping counted, so
        // its generation is not acknowledged past while it lives: the mapped bytes do not
        // change under us. They are only read through `Table`, which validates bounds
        // first.
        let map = unsafe { MmapOptions::new().map(&file) }.map_err(io_err)?;
        Storage::Mapped(Mapping::new(map, lease.map(|l| Box::new(l) as Box<dyn Send + Sync>)))
    };
    let table = Table::new(storage).map_err(|source| LoadError::Invalid { path: path.clone(), source })?;
    if table.generation() != generation {
        return Err(LoadError::WrongGeneration { path, found: table.generation() });
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_process_per_role_holds_a_directory() {
        let dir = std::env::temp_dir().join(format!("torii-lock-test-{}", std::process::id()));
        assert!(!holds_lock(&dir, Role::Gateway).unwrap(), "no lock file yet");
        let first = lock_dir(&dir, Role::Gateway).unwrap();
        let control = lock_dir(&dir, Role::Control).unwrap();
        assert!(holds_lock(&dir, Role::Gateway).unwrap());
        let e = lock_dir(&dir, Role::Gateway).unwrap_err().to_string();
        assert!(e.starts_with(&format!("another torii-gateway (pid {}) already uses", std::process::id())), "{e}");
        drop(first);
        assert!(!holds_lock(&dir, Role::Gateway).unwrap(), "the holder is gone");
        let again = lock_dir(&dir, Role::Gateway).unwrap();
        drop((again, control));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn file_names_round_trip() {
        assert_eq!(parse_table_file_name(&table_file_name(42)), Some(42));
        assert_eq!(parse_table_file_name("table-42"), None);
        assert_eq!(parse_table_file_name("state"), None);
    }

    /// An acknowledgement never passes a generation the process still maps, wherever the
    /// mapping is held, and catches up when the last holder drops it.
    #[test]
    fn acknowledgements_wait_for_every_mapping_of_older_snapshots() {
        let dir = std::env::temp_dir().join(format!("torii-shm-acks-{}", std::process::id()));
        let region = Arc::new(StateRegion::open(&dir).unwrap());
        region.register_gateway(std::process::id(), 2);
        for g in 1..=2 {
            std::fs::write(dir.join(table_file_name(g)), crate::build(&Default::default(), g).unwrap()).unwrap();
        }
        let mappings = Mappings::new(Arc::clone(&region), 2);
        let t1 = Arc::new(mappings.load_table(&dir, 1).unwrap());
        mappings.adopted(0, 1);
        mappings.adopted(1, 1);
        assert_eq!(region.min_acked(), Some(1));
        let t2 = Arc::new(mappings.load_table(&dir, 2).unwrap());
        let held_by_a_scrape = Arc::clone(&t1);
        drop(t1);
        mappings.adopted(0, 2);
        mappings.adopted(1, 2);
        assert_eq!((region.acked(0), region.acked(1)), (1, 1), "generation 1 is still mapped");
        drop(held_by_a_scrape);
        assert_eq!((region.acked(0), region.acked(1)), (2, 2));
        assert_eq!(mappings.oldest_mapped(), Some(2));
        // A failed load leaves nothing counted.
        assert!(mappings.load_table(&dir, 3).is_err());
        assert_eq!(mappings.oldest_mapped(), Some(2));
        drop(t2);
        assert_eq!(mappings.oldest_mapped(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn state_region_shared_between_mappings() {
        let dir = std::env::temp_dir().join(format!("torii-shm-test-{}", std::process::id()));
        let a = StateRegion::open(&dir).unwrap();
        let b = StateRegion::open(&dir).unwrap();
        a.set_published_generation(7);
        assert_eq!(b.published_generation(), 7);
        b.register_gateway(1234, 3);
        assert_eq!(a.workers(), 3);
        assert_eq!(a.min_acked(), Some(0));
        for w in 0..3 {
            b.ack(w, 7);
        }
        assert_eq!(a.min_acked(), Some(7));
        b.unregister_gateway(1234);
        assert_eq!(a.min_acked(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
