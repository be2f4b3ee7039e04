//! The publication protocol in shared memory (a tmpfs directory, `/dev/shm/torii` by default).
//!
//! ```text
//! <dir>/state                      4 KiB state region, mapped shared by both processes
//! <dir>/table-<generation:020>     one immutable snapshot per generation, mode 0600
//! ```
//!
//! torii-control writes a snapshot to `table-N.tmp`, renames it to `table-N` (so a
//! snapshot file is complete whenever it has its final name), then stores `N` into the
//! state region's published generation with release ordering. The gateway polls that
//! generation, maps and validates the file, hands it to its workers, and each worker
//! stores the generation it adopted into its acknowledgement slot. torii-control deletes
//! a snapshot file only when every worker of the running gateway has acknowledged a newer
//! generation (an unlinked file that is still mapped stays readable, so this ordering is
//! about not deleting what a restarting gateway may still need, not about memory safety).
//!
//! Published snapshot files are never modified in place: that discipline is what makes
//! mapping them safe (a file truncated under a live mapping would fault on access).

#![allow(unsafe_code)] // mapping files and atomics over shared memory; see the SAFETY comments

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::view::{Storage, Table, TableError};
use crate::config::MAX_WORKERS;

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

/// File name of the snapshot of `generation`.
pub fn table_file_name(generation: u64) -> String {
    format!("table-{generation:020}")
}

/// The generation a snapshot file name stands for (`None` for other files).
pub fn parse_table_file_name(name: &str) -> Option<u64> {
    let g = name.strip_prefix("table-")?;
    (g.len() == 20 && g.bytes().all(|c| c.is_ascii_digit())).then(|| g.parse().ok()).flatten()
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
        debug_assert!(offset % 8 == 0 && offset + 8 <= STATE_LEN);
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

    /// Records that `worker` adopted `generation`.
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

/// Maps and validates the snapshot of `generation` in `dir`.
///
/// # Errors
/// [`LoadError`]; the caller keeps its current table.
pub fn load_table(dir: &Path, generation: u64) -> Result<Table, LoadError> {
    let path = dir.join(table_file_name(generation));
    let io_err = |source| LoadError::Io { path: path.clone(), source };
    let file = File::open(&path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    let storage = if len == 0 {
        Storage::Owned(Vec::new())
    } else {
        // SAFETY: snapshot files are written completely under a temporary name and renamed;
        // once published they are never written or truncated again (module doc), so the
        // mapped bytes do not change under us. They are only read through `Table`, which
        // validates bounds first.
        Storage::Mapped(unsafe { MmapOptions::new().map(&file) }.map_err(io_err)?)
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
    fn file_names_round_trip() {
        assert_eq!(parse_table_file_name(&table_file_name(42)), Some(42));
        assert_eq!(parse_table_file_name("table-42"), None);
        assert_eq!(parse_table_file_name("state"), None);
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
