//! Publication of compiled tables into shared memory — the only code that writes it.
//!
//! Protocol (see `torii_table::shm`): write the snapshot to `table-N.tmp` (mode
//! 0600), rename it to `table-N`, then store `N` as the published generation. Generations
//! continue from whatever is already published, so a restarted torii-control publishes
//! the same content under a newer generation and the gateway adopts it without
//! disturbing anything. Old snapshot files are deleted once every worker of the running
//! gateway has acknowledged a newer generation (once superseded when no gateway runs),
//! but for the newest [`RETIRED_KEEP`] of them, kept to be patched into later snapshots.
//!
//! Writing a snapshot into a new tmpfs file allocates and zeroes its pages, and deleting
//! an old one frees them, both costing more than laying the table out (together about
//! 0.8 ms per MiB on the project's 2-core VM; 5–9 ms for the 12.5 MiB table of 10 000
//! Services). So a publication writes, whenever it can, into a file that already holds
//! an older snapshot, and only the byte ranges that changed since that snapshot (the
//! publisher remembers the ranges each of its last [`HISTORY`] builds changed, from
//! [`TableBuilder::changed_ranges`]; for one changed endpoint: the header, a service
//! record, its backends, its ring — a few KiB). Such a file is, in order of preference:
//!
//! 1. a *retired* snapshot: one older than every generation the registered gateway's
//!    workers have acknowledged, and not the published one. An acknowledgement of `G`
//!    promises that the gateway maps no snapshot older than `G` (it counts its mappings
//!    and acknowledges only past the oldest one it still holds, in a worker, its table
//!    handle or its metrics; see `torii_table::shm`), a starting gateway
//!    registers, which resets the acknowledgements, before it maps anything, and the
//!    gateway only ever opens the published generation. So the file can be renamed to
//!    `table-recycle.tmp` (no name points at it while it changes), patched with the ranges
//!    changed since its generation (the whole snapshot when the history does not reach
//!    back that far) and renamed to `table-N`. Up to [`RETIRED_KEEP`] retired snapshots
//!    are kept for this instead of being deleted (while a gateway is registered);
//!    Without a registered gateway, a *superseded* snapshot (older than the published
//!    one) is reused the same way, but renamed away first and checked after: if a gateway
//!    has registered by then, it goes back under its name untouched (a gateway registers
//!    before it maps anything and maps only the published generation, by name, so one that
//!    registers after the rename can never map it; `torii_table::shm`);
//! 2. the *spare*, `table-spare.tmp` (mode 0600): a copy of the last published snapshot that
//!    a background thread prepares when no gateway is registered and no superseded
//!    snapshot is kept (after the first publication).
//!
//! It never waits: when neither is available (or anything about them fails), it writes a
//! new file. A file is patched only while it has no published name and no gateway maps
//! it, so the rule that a snapshot is never modified while anyone may read it holds.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use torii_table::shm::{self, StateRegion};
use torii_table::{merge_byte_ranges, BuildError, TableBuilder, TableSpec, Touched};

use crate::compile::Compiler;

/// Writes table snapshots into the shared-memory directory and advances the published
/// generation.
///
/// It lays tables out with a [`TableBuilder`], which keeps the previous snapshot's rings
/// and buffer: publishing a table that differs from the previous one in a few services
/// costs about one pass over the snapshot (checksum and write), not a rebuild.
pub struct Publisher {
    dir: PathBuf,
    region: StateRegion,
    generation: u64,
    builder: TableBuilder,
    /// The background job: deleting old snapshots, then preparing the next file.
    spare: Option<JoinHandle<io::Result<Option<Spare>>>>,
    /// The generation of the builder's last successful build.
    built: Option<u64>,
    /// What the last [`HISTORY`] successful builds changed, oldest first.
    history: VecDeque<Step>,
    stats: PublishStats,
}

/// How many builds' changed ranges a [`Publisher`] remembers: a file holding a snapshot
/// up to this many publications old can be patched into the next one.
pub const HISTORY: usize = 16;

/// How many retired snapshots (every gateway worker has moved past them) are kept to be
/// patched into later ones instead of being deleted. Two cover a gateway that
/// acknowledges within one publication interval; more only cost tmpfs memory.
pub const RETIRED_KEEP: usize = 2;

/// Name a retired snapshot has while it is patched into the next one.
pub const RECYCLE_FILE_NAME: &str = "table-recycle.tmp";

/// One successful build: how its snapshot differs from the one of `previous`.
#[derive(Debug)]
struct Step {
    generation: u64,
    /// The generation of the build before it (`None`: the first).
    previous: Option<u64>,
    /// The byte ranges that may differ from `previous`'s snapshot; `None`: any.
    changed: Option<Vec<Range<usize>>>,
    /// Snapshot lengths of `previous` and of this build.
    previous_len: usize,
    len: usize,
}

/// Work counters of a [`Publisher`], for logs, tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublishStats {
    /// Publications written into an older snapshot's file (a retired snapshot or the
    /// spare copy), only the ranges changed since that snapshot.
    pub spare_used: u64,
    /// Of `spare_used`: into a retired snapshot.
    pub retired_used: u64,
    /// Publications written into a new file (no older snapshot's file was ready, or it
    /// failed).
    pub spare_missed: u64,
    /// Snapshot bytes written to files by publications.
    pub bytes_written: u64,
    /// Of the last publication: laying the table out ([`TableBuilder::build`]), finding a
    /// file to write into, writing and renaming it, and the rest (storing the
    /// generation, starting the background job).
    pub last_build: std::time::Duration,
    /// See `last_build`.
    pub last_find: std::time::Duration,
    /// See `last_build`.
    pub last_write: std::time::Duration,
    /// See `last_build`.
    pub last_rest: std::time::Duration,
}

/// Name of the pre-allocated file the next snapshot is written into (never a published
/// snapshot; `shm::parse_table_file_name` does not match it).
pub const SPARE_FILE_NAME: &str = "table-spare.tmp";

/// A private copy of a published snapshot, to be turned into the next one.
#[derive(Debug)]
struct Spare {
    path: PathBuf,
    file: File,
    /// Its length in bytes.
    len: u64,
    /// The generation whose snapshot it is a copy of.
    copy_of: u64,
}

impl Spare {
    /// Copies the snapshot file of `generation` in `dir` to `dir/table-spare.tmp` (mode
    /// 0600).
    fn copy(dir: &Path, generation: u64) -> io::Result<Self> {
        let path = dir.join(SPARE_FILE_NAME);
        let _ = std::fs::remove_file(&path);
        let mut from = File::open(dir.join(shm::table_file_name(generation)))?;
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        let len = io::copy(&mut from, &mut file)?;
        Ok(Self { path, file, len, copy_of: generation })
    }

    /// Renames the retired snapshot of `generation` in `dir` to `dir/table-recycle.tmp`
    /// and opens it for writing.
    fn retired(dir: &Path, generation: u64) -> io::Result<Self> {
        let path = dir.join(RECYCLE_FILE_NAME);
        std::fs::rename(dir.join(shm::table_file_name(generation)), &path)?;
        let opened = OpenOptions::new().write(true).open(&path).and_then(|f| Ok((f.metadata()?.len(), f)));
        match opened {
            Ok((len, file)) => Ok(Self { path, file, len, copy_of: generation }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Turns the file into the snapshot `bytes` and renames it to `to`: writes only
    /// `changed` (the ranges in which `bytes` differ from the snapshot it holds), or
    /// everything when `changed` is `None`.
    fn publish_as(self, bytes: &[u8], changed: Option<&[Range<usize>]>, to: &Path) -> io::Result<()> {
        let result = (|| {
            match changed {
                Some(ranges) => {
                    for r in ranges {
                        let part = bytes.get(r.clone()).ok_or(io::ErrorKind::InvalidInput)?;
                        self.file.write_all_at(part, r.start as u64)?;
                    }
                }
                None => self.file.write_all_at(bytes, 0)?,
            }
            if self.len != bytes.len() as u64 {
                self.file.set_len(bytes.len() as u64)?;
            }
            std::fs::rename(&self.path, to)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&self.path);
        }
        result
    }
}

/// A publication failure. The previously published table stays in force.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The shared-memory directory or state region could not be opened.
    #[error("cannot open shared memory in {dir}: {source}")]
    Open {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The compiled table cannot be laid out.
    #[error("cannot build the table: {0}")]
    Build(#[from] BuildError),
    /// Writing the snapshot failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("dir", &self.dir).field("generation", &self.generation).finish()
    }
}

impl Publisher {
    /// Opens (creating if needed, mode 0700) the shared-memory directory `shm_dir`.
    ///
    /// # Errors
    /// [`PublishError::Open`] when the directory or its state region cannot be created or mapped.
    pub fn open(shm_dir: &Path) -> Result<Self, PublishError> {
        let open_err = |source| PublishError::Open { dir: shm_dir.to_owned(), source };
        let region = StateRegion::open(shm_dir).map_err(open_err)?;
        let newest_file = std::fs::read_dir(shm_dir)
            .map_err(open_err)?
            .filter_map(|e| e.ok())
            .filter_map(|e| shm::parse_table_file_name(&e.file_name().to_string_lossy()))
            .max()
            .unwrap_or(0);
        let generation = region.published_generation().max(newest_file);
        // A previous process's.
        let _ = std::fs::remove_file(shm_dir.join(SPARE_FILE_NAME));
        let _ = std::fs::remove_file(shm_dir.join(RECYCLE_FILE_NAME));
        Ok(Self {
            dir: shm_dir.to_owned(),
            region,
            generation,
            builder: TableBuilder::new(),
            spare: None,
            built: None,
            history: VecDeque::with_capacity(HISTORY),
            stats: PublishStats::default(),
        })
    }

    /// The generation most recently published by anyone (0: none).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Work done so far.
    pub fn stats(&self) -> PublishStats {
        self.stats
    }

    /// The state region (acknowledgements of the gateway's workers).
    pub fn region(&self) -> &StateRegion {
        &self.region
    }

    /// Builds and publishes `spec` as the next generation; returns that generation.
    ///
    /// # Errors
    /// [`PublishError::Build`] when the table cannot be laid out (e.g. duplicate front
    /// doors), [`PublishError::Write`] when the snapshot cannot be written. Nothing is
    /// published then.
    pub fn publish(&mut self, spec: &TableSpec) -> Result<u64, PublishError> {
        self.publish_numbered(spec, None)
    }

    /// [`Publisher::publish`] of `compiler`'s table spec, telling the builder which of its
    /// services the compiler inserted or removed since the spec of the last build
    /// ([`Compiler::touched_since`], [`TableBuilder::build_versioned`]), so that only those
    /// are compared with the last build, not every service's backend list.
    ///
    /// # Errors
    /// As [`Publisher::publish`].
    pub fn publish_from(&mut self, compiler: &Compiler) -> Result<u64, PublishError> {
        let version = compiler.table_version();
        let touched = self.builder.spec_version().and_then(|v| compiler.touched_since(v));
        let accepts = touched.as_ref().map(|t| move |name: &str| t.contains(name));
        let accepts: Option<Touched<'_>> = accepts.as_ref().map(|f| f as Touched<'_>);
        self.publish_numbered(compiler.table_spec(), Some((version, accepts)))
    }

    /// [`Publisher::publish`], the spec numbered as [`TableBuilder::build_versioned`] takes it.
    fn publish_numbered(
        &mut self,
        spec: &TableSpec,
        numbered: Option<(u64, Option<Touched<'_>>)>,
    ) -> Result<u64, PublishError> {
        let generation = self.generation.max(self.region.published_generation()) + 1;
        let previous = self.built;
        let previous_len = self.builder.bytes().len();
        let t0 = std::time::Instant::now();
        self.builder.build_versioned(spec, generation, numbered)?;
        let t1 = std::time::Instant::now();
        self.built = Some(generation);
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(Step {
            generation,
            previous,
            changed: self.builder.changed_ranges().map(<[_]>::to_vec),
            previous_len,
            len: self.builder.bytes().len(),
        });
        let path = self.dir.join(shm::table_file_name(generation));
        let older = self.take_older_file().map(|(s, retired)| {
            let changed = self.changed_since(s.copy_of, generation);
            (s, retired, changed)
        });
        let bytes = self.builder.bytes();
        let t2 = std::time::Instant::now();
        let mut written = None;
        if let Some((s, retired, changed)) = older {
            let n = changed.as_ref().map_or(bytes.len(), |c| c.iter().map(Range::len).sum());
            written = s.publish_as(bytes, changed.as_deref(), &path).ok().map(|()| (n, retired));
        }
        match written {
            Some((n, retired)) => {
                self.stats.spare_used += 1;
                self.stats.retired_used += u64::from(retired);
                self.stats.bytes_written += n as u64;
            }
            None => {
                self.stats.spare_missed += 1;
                self.stats.bytes_written += bytes.len() as u64;
                write_new(&path, bytes)?;
            }
        }
        let t3 = std::time::Instant::now();
        self.region.set_published_generation(generation);
        self.generation = generation;
        if self.spare.is_none() {
            // Delete what is neither needed nor kept for recycling; without a gateway,
            // prepare a copy of this snapshot for the next publication.
            let stale = self.stale_files();
            // A copy is needed only while no superseded snapshot is kept to be patched.
            let copy = self.region.min_acked().is_none()
                && self.snapshot_files().iter().filter(|(g, _)| *g < generation).count() <= stale.len();
            let dir = self.dir.clone();
            self.spare = std::thread::Builder::new()
                .name("torii-spare".into())
                .spawn(move || {
                    for p in stale {
                        let _ = std::fs::remove_file(p);
                    }
                    if copy {
                        Spare::copy(&dir, generation).map(Some)
                    } else {
                        Ok(None)
                    }
                })
                .ok();
            if self.spare.is_none() {
                self.collect_garbage();
            }
        }
        self.stats.last_build = t1 - t0;
        self.stats.last_find = t2 - t1;
        self.stats.last_write = t3 - t2;
        self.stats.last_rest = t3.elapsed();
        Ok(generation)
    }

    /// A file holding an older snapshot to write the next one into, and whether it is a
    /// retired snapshot (else the spare copy); never waits.
    fn take_older_file(&mut self) -> Option<(Spare, bool)> {
        match self.spare.take() {
            Some(h) if h.is_finished() => {
                if let Some(s) = h.join().ok().and_then(Result::ok).flatten() {
                    return Some((s, false));
                }
            }
            pending => self.spare = pending,
        }
        // The newest retired snapshot whose changes since are known (fewest bytes to write).
        // Even when those are not known, a whole write into it allocates no pages.
        // Without a gateway, the newest superseded one: renamed away first, then kept only
        // if still no gateway has registered (one that registers later maps only the
        // published generation, by name; see `torii_table::shm`).
        let min_acked = self.region.min_acked();
        let published = self.region.published_generation();
        let newest = self
            .snapshot_files()
            .into_iter()
            .map(|(g, _)| g)
            .filter(|&g| min_acked.is_none_or(|m| g < m) && g < published && g < self.generation)
            .max()?;
        let s = Spare::retired(&self.dir, newest).ok()?;
        if min_acked.is_none() && self.region.workers() != 0 {
            // A gateway registered meanwhile: it may have read this generation as the
            // published one before the rename, so the file goes back untouched.
            let _ = std::fs::rename(&s.path, self.dir.join(shm::table_file_name(newest)));
            return None;
        }
        Some((s, true))
    }

    /// The byte ranges in which the snapshot of generation `to` (the last build) may
    /// differ from the snapshot of `from`, sorted and merged; `None` when not known (any
    /// byte may differ).
    fn changed_since(&self, from: u64, to: u64) -> Option<Vec<Range<usize>>> {
        let mut ranges = Vec::new();
        let mut g = to;
        for step in self.history.iter().rev() {
            if g == from {
                break;
            }
            if step.generation != g {
                return None;
            }
            ranges.extend(step.changed.as_ref()?.iter().cloned());
            if step.len > step.previous_len {
                ranges.push(step.previous_len..step.len);
            }
            g = step.previous?;
        }
        if g != from {
            return None;
        }
        merge_byte_ranges(&mut ranges);
        Some(ranges)
    }

    /// Whether every worker of the running gateway has acknowledged `generation` or newer
    /// (`None` when no gateway is registered).
    pub fn acknowledged(&self, generation: u64) -> Option<bool> {
        self.region.min_acked().map(|m| m >= generation)
    }

    /// Deletes snapshot files no worker can still need: older than the oldest generation
    /// any registered worker acknowledged (older than the newest when no gateway runs),
    /// but for the newest [`RETIRED_KEEP`] of them while a gateway is registered (kept to
    /// be patched into later snapshots). Returns how many were deleted.
    pub fn collect_garbage(&self) -> usize {
        self.stale_files().into_iter().filter(|p| std::fs::remove_file(p).is_ok()).count()
    }

    /// Every snapshot file in the directory, by generation.
    fn snapshot_files(&self) -> Vec<(u64, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(|e| e.ok())
            .filter_map(|e| shm::parse_table_file_name(&e.file_name().to_string_lossy()).map(|g| (g, e.path())))
            .collect()
    }

    /// The snapshot files [`Publisher::collect_garbage`] deletes.
    fn stale_files(&self) -> Vec<PathBuf> {
        let min_acked = self.region.min_acked();
        let keep_from = min_acked.unwrap_or(self.generation).min(self.generation);
        let mut stale: Vec<(u64, PathBuf)> =
            self.snapshot_files().into_iter().filter(|(g, _)| *g < keep_from).collect();
        stale.sort_unstable_by_key(|(g, _)| std::cmp::Reverse(*g));
        stale.drain(..stale.len().min(RETIRED_KEEP));
        stale.into_iter().map(|(_, p)| p).collect()
    }
}

/// Writes `bytes` to `path` through a new temporary file (`path` + `.tmp`, mode 0600).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    let tmp = path.with_extension("tmp");
    let write_err = |p: &Path| {
        let p = p.to_owned();
        move |source| PublishError::Write { path: p, source }
    };
    let _ = std::fs::remove_file(&tmp);
    let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(write_err(&tmp))?;
    f.write_all(bytes).map_err(write_err(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(write_err(path))
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if let Some(h) = self.spare.take() {
            if let Ok(Ok(Some(spare))) = h.join() {
                let _ = std::fs::remove_file(spare.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torii_table::{build, BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec};

    fn spec(port: u16) -> TableSpec {
        TableSpec {
            frontends: vec![FrontendSpec {
                addr: "203.0.113.10".parse().unwrap(),
                port,
                protocol: Protocol::Tcp,
                kind: FrontendKind::ExternalIp,
                service: 0,
                source_ranges: vec![],
            }],
            services: vec![ServiceSpec {
                name: "demo/web:http".into(),
                backends: vec![BackendSpec { addr: "10.70.0.11".parse().unwrap(), port: 8080 }],
                affinity_timeout_s: None,
                draining: vec![],
            }],
        }
    }

    /// `bytes` serve what a build of `spec` from scratch serves.
    fn assert_serves(bytes: &[u8], spec: &TableSpec) {
        let content = |b: Vec<u8>| torii_table::Table::new(b).unwrap().content();
        assert_eq!(content(bytes.to_vec()), content(build(spec, 1).unwrap()));
    }

    #[test]
    fn publish_load_ack_and_collect() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let g1 = p.publish(&spec(80)).unwrap();
        assert_eq!(g1, 1);
        // Without a gateway, g1's publication starts a spare copy of g1. Let it finish, so
        // that g2 is written into it, and not (when the copy is late) g3 — which this test
        // wants written into the retired g1.
        settle(&p);
        let t = shm::load_table(dir.path(), g1).unwrap();
        assert!(t.frontend("203.0.113.10".parse().unwrap(), 6, 80).is_some());

        // A gateway with two workers registers; until both ack g2, g1 stays on disk.
        let gw = StateRegion::open(dir.path()).unwrap();
        gw.register_gateway(42, 2);
        gw.ack(0, g1);
        gw.ack(1, g1);
        let g2 = p.publish(&spec(81)).unwrap();
        assert!(dir.path().join(shm::table_file_name(g1)).exists());
        assert_eq!(p.acknowledged(g2), Some(false));
        gw.ack(0, g2);
        gw.ack(1, g2);
        assert_eq!(p.acknowledged(g2), Some(true));
        // g1 is retired: kept to be written into, not deleted.
        assert_eq!(p.collect_garbage(), 0);
        assert!(dir.path().join(shm::table_file_name(g1)).exists());
        let g3 = p.publish(&spec(83)).unwrap();
        assert!(!dir.path().join(shm::table_file_name(g1)).exists(), "g1's file became g3's");
        assert_eq!(p.stats().retired_used, 1);
        assert!(std::fs::read(dir.path().join(shm::table_file_name(g3))).unwrap() == p.builder.bytes());
        assert_serves(p.builder.bytes(), &spec(83));
        gw.ack(0, g3);
        gw.ack(1, g3);
        // A restarted publisher continues the numbering (from the newest file); retired
        // snapshots beyond RETIRED_KEEP are deleted.
        drop(p);
        for n in 0..4 {
            std::fs::write(dir.path().join(shm::table_file_name(100 + n)), b"x").unwrap();
        }
        let mut p = Publisher::open(dir.path()).unwrap();
        gw.ack(0, 200);
        gw.ack(1, 200);
        // g2, g3, 100, 101 and 102 are older than the newest, 103.
        assert_eq!(p.collect_garbage(), 5 - RETIRED_KEEP);
        gw.unregister_gateway(42);
        assert_eq!(p.publish(&spec(82)).unwrap(), 104);
    }

    /// Waits until the publisher's background job, if any, has finished.
    fn settle(p: &Publisher) {
        while p.spare.as_ref().is_some_and(|h| !h.is_finished()) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn later_publications_write_into_a_copy_of_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let check = |p: &mut Publisher, spec: &TableSpec| {
            let g = p.publish(spec).unwrap();
            let path = dir.path().join(shm::table_file_name(g));
            assert!(std::fs::read(&path).unwrap() == p.builder.bytes(), "generation {g}");
            assert_serves(p.builder.bytes(), spec);
            assert!(shm::load_table(dir.path(), g).is_ok());
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            settle(p);
            g
        };
        let g1 = check(&mut p, &spec(80));
        let spare = dir.path().join(SPARE_FILE_NAME);
        assert_eq!(std::fs::read(&spare).unwrap(), std::fs::read(dir.path().join(shm::table_file_name(g1))).unwrap());
        // Same layout (a front door moved): only the changed ranges are written.
        check(&mut p, &spec(81));
        // A larger table (more backends): everything after the rings is written.
        let mut big = spec(81);
        big.services[0].backends = (1..=40u32)
            .map(|n| torii_table::BackendSpec { addr: std::net::Ipv4Addr::from(0x0a00_0000 + n).into(), port: 80 })
            .collect();
        check(&mut p, &big);
        assert!(!dir.path().join(shm::table_file_name(g1)).exists(), "the job deleted the old snapshots");
        // A smaller one, then the same one again.
        check(&mut p, &spec(82));
        check(&mut p, &spec(82));
        let stats = p.stats();
        assert_eq!((stats.spare_used, stats.spare_missed), (4, 1));
        let len = |s: &TableSpec| TableBuilder::new().build(s, 1).unwrap().len() as u64;
        let whole = len(&spec(80)) + len(&spec(81)) + len(&big) + 2 * len(&spec(82));
        assert!(stats.bytes_written < whole - len(&spec(82)), "{stats:?}: only changes were written");
        drop(p);
        assert!(!spare.exists(), "the spare is removed when the publisher goes");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    /// A file is patched only once every worker has acknowledged past it and it is not the
    /// published one; a retired file too old for the history is rewritten whole. Either way
    /// the result is byte for byte the snapshot a fresh write gives.
    #[test]
    fn only_retired_files_are_patched_into_identical_snapshots() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let gw = StateRegion::open(dir.path()).unwrap();
        gw.register_gateway(42, 2);
        let file = |g: u64| dir.path().join(shm::table_file_name(g));
        let identity = |g: u64| {
            let m = std::fs::metadata(file(g)).unwrap();
            (m.ino(), m.mtime_nsec(), m.mtime(), std::fs::read(file(g)).unwrap())
        };
        let g1 = p.publish(&spec(80)).unwrap();
        gw.ack(0, g1);
        gw.ack(1, g1);
        let g1_file = identity(g1);
        // Worker 1 stays on g1 while worker 0 follows: nothing is retired, nothing patched.
        let mut last = g1;
        for port in 81..81 + HISTORY as u16 + 2 {
            last = p.publish(&spec(port)).unwrap();
            gw.ack(0, last);
            assert_eq!(p.stats().retired_used, 0);
            assert_eq!(identity(g1), g1_file, "g1 is still acknowledged by worker 1");
        }
        // Background work (deleting stale files) must not race the file listing below.
        settle(&p);
        // Of the older snapshots keep only g1, beyond the history, and the published one.
        for h in p.snapshot_files().into_iter().map(|(h, _)| h).filter(|&h| h != g1 && h != last) {
            std::fs::remove_file(file(h)).unwrap();
        }
        // A stale acknowledgement beyond the published generation retires nothing at or
        // above the published one: the published file is left as it is, and g1, beyond the
        // history, is rewritten whole, still identical.
        gw.ack(1, u64::MAX);
        gw.ack(0, u64::MAX);
        let published = identity(last);
        let before = p.stats();
        let g = p.publish(&spec(200)).unwrap();
        let after = p.stats();
        assert_eq!(identity(last), published, "the published file is never patched");
        assert!(!file(g1).exists(), "g1's file became generation {g}'s");
        assert_eq!(after.retired_used, before.retired_used + 1);
        let whole = p.builder.bytes();
        assert_eq!(after.bytes_written - before.bytes_written, whole.len() as u64);
        assert!(std::fs::read(file(g)).unwrap() == whole);
        assert_serves(whole, &spec(200));
        settle(&p);
        // The newest retired file (the history reaches back to it) gets the changes only.
        let before = p.stats();
        let g = p.publish(&spec(201)).unwrap();
        let after = p.stats();
        assert!(!file(last).exists(), "{last}'s file became generation {g}'s");
        assert_eq!(after.retired_used, before.retired_used + 1);
        let whole = p.builder.bytes();
        assert!(after.bytes_written - before.bytes_written < whole.len() as u64, "{after:?}");
        assert!(std::fs::read(file(g)).unwrap() == whole);
        assert_serves(whole, &spec(201));
        assert!(shm::load_table(dir.path(), g).is_ok());
        settle(&p);
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    /// Back to back, the spare may be a copy of an older snapshot: it gets the union of
    /// the changes since, not a whole rewrite.
    #[test]
    fn a_spare_of_an_older_snapshot_gets_the_changes_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let mut specs = Vec::new();
        for n in 0..4u32 {
            let mut s = spec(80);
            s.services[0].backends = (1..=3)
                .map(|k| BackendSpec { addr: std::net::Ipv4Addr::from(0x0a00_0000 + 10 * n + k).into(), port: 80 })
                .collect();
            specs.push(s);
        }
        let g1 = p.publish(&specs[0]).unwrap();
        settle(&p);
        let spare_path = dir.path().join(SPARE_FILE_NAME);
        let copy_of_g1 = std::fs::read(&spare_path).unwrap();
        // Two more publications; then the spare is made a copy of g1 again.
        p.publish(&specs[1]).unwrap();
        settle(&p);
        p.publish(&specs[2]).unwrap();
        settle(&p);
        drop(p.spare.take().map(JoinHandle::join));
        std::fs::write(&spare_path, &copy_of_g1).unwrap();
        let file = OpenOptions::new().write(true).open(&spare_path).unwrap();
        let len = copy_of_g1.len() as u64;
        p.spare = Some(std::thread::spawn(move || Ok(Some(Spare { path: spare_path, file, len, copy_of: g1 }))));
        settle(&p);
        let before = p.stats();
        let g4 = p.publish(&specs[3]).unwrap();
        let after = p.stats();
        assert_eq!(after.spare_used, before.spare_used + 1);
        let written = after.bytes_written - before.bytes_written;
        assert!(written < copy_of_g1.len() as u64, "{written} bytes: the changes only, not all");
        assert!(std::fs::read(dir.path().join(shm::table_file_name(g4))).unwrap() == p.builder.bytes());
        assert_serves(p.builder.bytes(), &specs[3]);
    }

    /// Without a gateway, a superseded snapshot is patched into the next one: no copy,
    /// no new file, the changes only.
    #[test]
    fn without_a_gateway_superseded_files_are_patched() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let g1 = p.publish(&spec(80)).unwrap();
        settle(&p);
        let g2 = p.publish(&spec(81)).unwrap();
        settle(&p);
        assert!(p.spare.as_ref().is_none_or(|h| h.is_finished()));
        let file = |g: u64| dir.path().join(shm::table_file_name(g));
        assert!(file(g1).exists(), "kept to be patched");
        for port in 82..90 {
            let before = p.stats();
            let g = p.publish(&spec(port)).unwrap();
            let after = p.stats();
            assert_eq!(after.retired_used, before.retired_used + 1, "port {port}");
            assert!(after.bytes_written - before.bytes_written < p.builder.bytes().len() as u64);
            assert!(std::fs::read(file(g)).unwrap() == p.builder.bytes());
            assert_serves(p.builder.bytes(), &spec(port));
            assert!(file(g - 1).exists(), "the superseded snapshot stays until the next one");
            settle(&p);
        }
        assert!(!file(g2).exists());
        assert!(!dir.path().join(SPARE_FILE_NAME).exists(), "no copy is made while a superseded file is kept");
    }

    #[test]
    fn a_spare_of_another_generation_is_rewritten_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        p.publish(&spec(80)).unwrap();
        settle(&p);
        // A build that fails leaves the builder where it was; then another process
        // publishes: the spare is a copy of generation 1, the builder's last build too.
        let mut bad = spec(81);
        bad.frontends[0].service = 7;
        assert!(p.publish(&bad).is_err());
        // Corrupt the spare's bookkeeping (a copy of generation 1: nothing older is kept
        // after the first publication): pretend it copies another generation.
        let h = p.spare.take().expect("a spare after the first publication");
        let mut s = h.join().unwrap().unwrap().expect("a copy");
        s.copy_of += 100;
        p.spare = Some(std::thread::spawn(move || Ok(Some(s))));
        settle(&p);
        let g = p.publish(&spec(83)).unwrap();
        assert!(std::fs::read(dir.path().join(shm::table_file_name(g))).unwrap() == p.builder.bytes());
        assert_serves(p.builder.bytes(), &spec(83));
        settle(&p);
        let g = p.publish(&spec(84)).unwrap();
        assert!(std::fs::read(dir.path().join(shm::table_file_name(g))).unwrap() == p.builder.bytes());
        assert_serves(p.builder.bytes(), &spec(84));
    }

    #[test]
    fn a_corrupt_snapshot_is_rejected_by_the_gateway_loader() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let g = p.publish(&spec(80)).unwrap();
        let path = dir.path().join(shm::table_file_name(g));
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let e = shm::load_table(dir.path(), g).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
    }
}
