//! Publication of compiled tables into shared memory — the only code that writes it.
//!
//! Protocol (see `torii_gateway::table::shm`): write the snapshot to `table-N.tmp` (mode
//! 0600), rename it to `table-N`, then store `N` as the published generation. Generations
//! continue from whatever is already published, so a restarted torii-control publishes
//! the same content under a newer generation and the gateway adopts it without
//! disturbing anything. Old snapshot files are deleted once every worker of the running
//! gateway has acknowledged a newer generation (all but the newest when no gateway runs).
//!
//! Writing a snapshot into a new tmpfs file allocates and zeroes its pages, and deleting
//! an old one frees them, both costing more than laying the table out (together about
//! 0.8 ms per MiB on the project's 2-core VM; 5–9 ms for the 12.5 MiB table of 10 000
//! Services). So after each publication a background thread deletes the snapshots no
//! worker needs any more and prepares the next file, `table-spare.tmp` (mode 0600), as a
//! copy of the snapshot just published. The next publication writes into it only the byte
//! ranges that changed since that snapshot — the publisher remembers the ranges each of
//! its last [`HISTORY`] builds changed ([`TableBuilder::changed_ranges`]), so a spare that
//! is a copy of an older snapshot (publications back to back) is brought up to date with
//! the union of their changes, not rewritten whole; for one changed endpoint: the header,
//! a service record, its backends, its ring — a few KiB — then sets its length and renames
//! it to `table-N`. It never waits: while the spare is not ready (or if anything about it
//! fails), it writes a new file and the old snapshots wait for the next round. The spare is
//! never a published snapshot, so the rule that published files are never modified holds.
//!
//! Retired snapshot files (every worker acknowledged a newer generation) are deleted, not
//! reused: a gateway worker acknowledges a new table before it has finished with the old
//! one, and its metrics report keeps the table it last reported for up to a second, so an
//! acknowledgement does not prove that nothing maps the older file any more.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use torii_gateway::table::shm::{self, StateRegion};
use torii_gateway::table::{merge_byte_ranges, BuildError, TableBuilder, TableSpec};

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
    spare: Option<JoinHandle<io::Result<Spare>>>,
    /// The generation of the builder's last successful build.
    built: Option<u64>,
    /// What the last [`HISTORY`] successful builds changed, oldest first.
    history: VecDeque<Step>,
    stats: PublishStats,
}

/// How many builds' changed ranges a [`Publisher`] remembers: a file holding a snapshot
/// up to this many publications old can be patched into the next one.
pub const HISTORY: usize = 16;

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
    /// Publications written into the spare (a copy of an earlier snapshot): only the
    /// ranges changed since that snapshot, or the whole snapshot when they are not known.
    pub spare_used: u64,
    /// Publications written into a new file (the spare was not ready, or failed).
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
        let _ = std::fs::remove_file(shm_dir.join(SPARE_FILE_NAME)); // a previous process's
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
        let generation = self.generation.max(self.region.published_generation()) + 1;
        let previous = self.built;
        let previous_len = self.builder.bytes().len();
        let t0 = std::time::Instant::now();
        self.builder.build(spec, generation)?;
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
        let older = self.take_spare().map(|s| {
            let changed = self.changed_since(s.copy_of, generation);
            (s, changed)
        });
        let bytes = self.builder.bytes();
        let t2 = std::time::Instant::now();
        let mut written = None;
        if let Some((s, changed)) = older {
            let n = changed.as_ref().map_or(bytes.len(), |c| c.iter().map(Range::len).sum());
            written = s.publish_as(bytes, changed.as_deref(), &path).ok().map(|()| n);
        }
        match written {
            Some(n) => {
                self.stats.spare_used += 1;
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
            let stale = self.stale_files();
            let dir = self.dir.clone();
            self.spare = std::thread::Builder::new()
                .name("torii-spare".into())
                .spawn(move || {
                    for p in stale {
                        let _ = std::fs::remove_file(p);
                    }
                    Spare::copy(&dir, generation)
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

    /// The spare, when the background job has it ready; never waits.
    fn take_spare(&mut self) -> Option<Spare> {
        match self.spare.take() {
            Some(h) if h.is_finished() => h.join().ok().and_then(Result::ok),
            pending => {
                self.spare = pending;
                None
            }
        }
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
    /// any registered worker acknowledged (older than the newest when no gateway runs).
    /// Returns how many were deleted.
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
        let keep_from = self.region.min_acked().unwrap_or(self.generation).min(self.generation);
        self.snapshot_files().into_iter().filter(|(g, _)| *g < keep_from).map(|(_, p)| p).collect()
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
            if let Ok(Ok(spare)) = h.join() {
                let _ = std::fs::remove_file(spare.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torii_gateway::table::{BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec};

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

    #[test]
    fn publish_load_ack_and_collect() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let g1 = p.publish(&spec(80)).unwrap();
        assert_eq!(g1, 1);
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
        assert_eq!(p.collect_garbage(), 1);
        assert!(!dir.path().join(shm::table_file_name(g1)).exists());

        // A restarted publisher continues the numbering.
        drop(p);
        let mut p = Publisher::open(dir.path()).unwrap();
        assert_eq!(p.publish(&spec(82)).unwrap(), g2 + 1);
    }

    /// Waits for the publisher's background job.
    fn settle(p: &Publisher) {
        while !p.spare.as_ref().is_some_and(JoinHandle::is_finished) {
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
            assert_eq!(std::fs::read(&path).unwrap(), torii_gateway::table::build(spec, g).unwrap(), "generation {g}");
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
            .map(|n| torii_gateway::table::BackendSpec {
                addr: std::net::Ipv4Addr::from(0x0a00_0000 + n).into(),
                port: 80,
            })
            .collect();
        check(&mut p, &big);
        assert!(!dir.path().join(shm::table_file_name(g1)).exists(), "the job deleted the old snapshots");
        // A smaller one, then the same one again.
        check(&mut p, &spec(82));
        check(&mut p, &spec(82));
        let stats = p.stats();
        assert_eq!((stats.spare_used, stats.spare_missed), (4, 1));
        let len = |s: &TableSpec| torii_gateway::table::build(s, 1).unwrap().len() as u64;
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

    /// Back to back, the spare may be a copy of an older snapshot: it gets the union of
    /// the changes since, not a whole rewrite.
    #[test]
    fn a_spare_of_an_older_snapshot_gets_the_changes_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Publisher::open(dir.path()).unwrap();
        let mut specs = Vec::new();
        for n in 0..4u32 {
            let mut s = spec(80);
            s.services[0].backends = (1..=3 + n % 2)
                .map(|k| BackendSpec { addr: std::net::Ipv4Addr::from(0x0a00_0000 + 10 * n + k).into(), port: 80 })
                .collect();
            s.services[0].backends.truncate(3);
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
        p.spare = Some(std::thread::spawn(move || Ok(Spare { path: spare_path, file, len, copy_of: g1 })));
        settle(&p);
        let before = p.stats();
        let g4 = p.publish(&specs[3]).unwrap();
        let after = p.stats();
        assert_eq!(after.spare_used, before.spare_used + 1);
        let written = after.bytes_written - before.bytes_written;
        assert!(written < copy_of_g1.len() as u64, "{written} bytes: the changes only, not all");
        assert_eq!(
            std::fs::read(dir.path().join(shm::table_file_name(g4))).unwrap(),
            torii_gateway::table::build(&specs[3], g4).unwrap()
        );
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
        let g = p.publish(&spec(83)).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(shm::table_file_name(g))).unwrap(),
            torii_gateway::table::build(&spec(83), g).unwrap()
        );
        settle(&p);
        // Corrupt the spare's bookkeeping: pretend it copies another generation.
        if let Some(h) = p.spare.take() {
            let mut s = h.join().unwrap().unwrap();
            s.copy_of += 100;
            p.spare = Some(std::thread::spawn(move || Ok(s)));
        }
        settle(&p);
        let g = p.publish(&spec(84)).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(shm::table_file_name(g))).unwrap(),
            torii_gateway::table::build(&spec(84), g).unwrap()
        );
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
