//! Where Kubernetes objects come from.
//!
//! A source delivers complete snapshots: every Service, EndpointSlice and Node it knows
//! of, as k8s-openapi objects ([`KubeObject`]), plus the errors of whatever it had to
//! skip ([`Loaded`]). [`crate::model`] validates the objects and [`crate::compile`] turns
//! them into a table, whichever source they came from.
//!
//! - [`files`]: a directory of YAML/JSON manifests, reloaded whole when it changes.
//!
//! Sources are the impure edge: they read files and watch directories; nothing after
//! them does.

pub mod files;

use std::path::PathBuf;

pub use crate::model::KubeObject;

/// One snapshot from a source: the objects it could read, and why it skipped the rest.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Objects in a deterministic order (files by name, documents in file order).
    pub objects: Vec<KubeObject>,
    /// Where each object of `objects` came from (same index), for messages; empty for
    /// sources without locations.
    pub locations: Vec<DocumentLocation>,
    /// What was skipped and why; everything else is in `objects`.
    pub errors: Vec<SourceError>,
}

/// Where in a manifests file an object came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentLocation {
    /// The file.
    pub path: PathBuf,
    /// 1-based index of the document in the file (YAML documents are separated by `---`).
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
    /// For an item of a `List` document: `items[N]`.
    pub item: Option<usize>,
}

impl std::fmt::Display for DocumentLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: document {}", self.path.display(), self.line, self.document)?;
        if let Some(i) = self.item {
            write!(f, ", items[{i}]")?;
        }
        Ok(())
    }
}

/// A source error. Only [`SourceError::ReadDir`] and [`SourceError::Watch`] mean
/// "nothing could be loaded"; the others name one skipped file or document.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The manifests directory itself cannot be listed.
    #[error("cannot read manifests directory {}: {source}; check the path and its permissions", dir.display())]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The directory cannot be watched for changes.
    #[error("cannot watch manifests directory {}: {source}", dir.display())]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// Why (e.g. the inotify watch limit, `fs.inotify.max_user_watches`).
        #[source]
        source: notify::Error,
    },
    /// One file cannot be read; it is skipped.
    #[error("{}: cannot read: {source}; file skipped", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A document is not well-formed YAML or JSON; it is skipped.
    #[error("{location}: not valid {format}: {message}; document skipped")]
    Syntax {
        /// Where.
        location: Box<DocumentLocation>,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message (with the line and column).
        message: String,
    },
    /// A document (or list item) is not a mapping, so not a Kubernetes object; it is skipped.
    #[error(
        "{location}: {found} where a Kubernetes object (a mapping with apiVersion and kind) was expected; skipped"
    )]
    NotAnObject {
        /// Where.
        location: Box<DocumentLocation>,
        /// What was found instead, e.g. `a string`.
        found: &'static str,
    },
    /// A document parses but is not a valid object of its kind; it is skipped.
    #[error("{location}: {object}: {}{message}; object skipped", field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
    Object {
        /// Where.
        location: Box<DocumentLocation>,
        /// `kind namespace/name` as far as known, e.g. `Service demo/web`.
        object: String,
        /// Path of the offending field (serde's path, e.g. `spec.ports[0].port`), when known.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
}
