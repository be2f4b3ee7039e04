//! Publication of compiled tables into shared memory — the only code that writes it.
//!
//! Protocol (see `torii_gateway::table::shm`): write the snapshot to `table-N.tmp` (mode
//! 0600), rename it to `table-N`, then store `N` as the published generation. Generations
//! continue from whatever is already published, so a restarted torii-control publishes
//! the same content under a newer generation and the gateway adopts it without
//! disturbing anything. Old snapshot files are deleted once every worker of the running
//! gateway has acknowledged a newer generation (all but the newest when no gateway runs).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use torii_gateway::table::shm::{self, StateRegion};
use torii_gateway::table::{self, BuildError, TableSpec};

/// Writes table snapshots into the shared-memory directory and advances the published
/// generation.
pub struct Publisher {
    dir: PathBuf,
    region: StateRegion,
    generation: u64,
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
        Ok(Self { dir: shm_dir.to_owned(), region, generation })
    }

    /// The generation most recently published by anyone (0: none).
    pub fn generation(&self) -> u64 {
        self.generation
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
        let bytes = table::build(spec, generation)?;
        let path = self.dir.join(shm::table_file_name(generation));
        let tmp = path.with_extension("tmp");
        let write_err = |p: &Path| {
            let p = p.to_owned();
            move |source| PublishError::Write { path: p, source }
        };
        let _ = std::fs::remove_file(&tmp);
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(write_err(&tmp))?;
        f.write_all(&bytes).map_err(write_err(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(write_err(&path))?;
        self.region.set_published_generation(generation);
        self.generation = generation;
        self.collect_garbage();
        Ok(generation)
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
        let keep_from = self.region.min_acked().unwrap_or(self.generation).min(self.generation);
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return 0 };
        let mut removed = 0;
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name();
            if let Some(g) = shm::parse_table_file_name(&name.to_string_lossy()) {
                if g < keep_from && std::fs::remove_file(e.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
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
            }],
            services: vec![ServiceSpec {
                name: "demo/web:http".into(),
                backends: vec![BackendSpec { addr: "10.70.0.11".parse().unwrap(), port: 8080 }],
                affinity_timeout_s: None,
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
