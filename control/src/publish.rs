//! Publication of compiled tables into shared memory (in progress; API fixed).

use std::path::Path;

use torii_gateway::table::TableSpec;

/// Writes table snapshots into the shared-memory directory and advances the published
/// generation.
pub struct Publisher {
    _private: (),
}

/// A publication failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PublishError(String);

impl Publisher {
    /// Opens (creating if needed) the shared-memory directory `shm_dir`.
    ///
    /// # Errors
    /// When the directory or its state region cannot be created or mapped.
    pub fn open(shm_dir: &Path) -> Result<Self, PublishError> {
        let _ = shm_dir;
        Err(PublishError("not yet implemented".into()))
    }

    /// Builds and publishes `spec` as the next generation; returns that generation.
    ///
    /// # Errors
    /// When the table cannot be built (e.g. duplicate front doors) or written.
    pub fn publish(&mut self, spec: &TableSpec) -> Result<u64, PublishError> {
        let _ = spec;
        Err(PublishError("not yet implemented".into()))
    }
}
