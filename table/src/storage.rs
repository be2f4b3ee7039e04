//! Where a snapshot's bytes live: [`Storage`], in process memory or a read-only mapping of
//! a published snapshot file ([`Mapping`]).
//!
//! A [`Mapping`] keeps the guard its creator handed it — [`crate::shm::Mappings`]' lease,
//! which counts the mapping so that its generation is not acknowledged past while it lives
//! — until after the bytes are unmapped. This module knows nothing of that protocol, so the
//! view ([`crate::Table`]) and the publication ([`crate::shm`]) both build on it without
//! depending on each other.

use memmap2::Mmap;

/// Where a snapshot's bytes live.
pub enum Storage {
    /// In process memory (tests, benchmarks, the empty table).
    Owned(Vec<u8>),
    /// A read-only mapping of a published snapshot file (counted by the gateway's
    /// [`crate::shm::Mappings`] while it lives, when it was mapped through them).
    Mapped(Mapping),
}

impl AsRef<[u8]> for Storage {
    fn as_ref(&self) -> &[u8] {
        match self {
            Self::Owned(v) => v,
            Self::Mapped(m) => m.as_ref(),
        }
    }
}

/// A read-only mapping of a snapshot file, with the guard (if any) that is dropped only
/// after it is unmapped.
pub struct Mapping {
    // Field order matters: the map is unmapped before the guard is dropped.
    map: Mmap,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl Mapping {
    /// `map`, holding `guard` until after it is unmapped.
    pub(crate) fn new(map: Mmap, guard: Option<Box<dyn Send + Sync>>) -> Self {
        Self { map, _guard: guard }
    }
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("len", &self.map.len()).finish()
    }
}
