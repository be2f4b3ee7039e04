//! Where Kubernetes objects come from.
//!
//! A source delivers complete snapshots: every Service, EndpointSlice and Node it knows
//! of, as k8s-openapi objects ([`KubeObject`]), plus the errors of whatever it had to
//! skip ([`Loaded`]). [`crate::model`] validates the objects and [`crate::compile`] turns
//! them into a table, whichever source they came from.
//!
//! - [`files`]: a directory of YAML/JSON manifests, reloaded whole when it changes.
//! - [`kube`]: the Kubernetes API, listed and watched through kube-rs.
//!
//! Sources are the impure edge: they read files, watch directories and talk to the API
//! server; nothing after them does.

pub mod files;
pub mod kube;

use std::path::PathBuf;
use std::time::SystemTime;

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

/// A snapshot handed over by a watching source, and when the changes it carries were
/// made (for the network-programming latency).
#[derive(Debug, Default)]
pub struct Update {
    /// The snapshot.
    pub loaded: Loaded,
    /// The `endpoints.kubernetes.io/last-change-trigger-time`s of the changes since the
    /// previous snapshot; `None` when no change carried one (and for the files source).
    pub triggers: Option<TriggerTimes>,
}

/// The trigger times of a batch of changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TriggerTimes {
    /// The oldest.
    pub oldest: SystemTime,
    /// The newest: where the batch's network-programming latency starts.
    pub newest: SystemTime,
    /// How many changes carried one.
    pub count: usize,
}

impl TriggerTimes {
    /// Summarises `times`; `None` when empty.
    pub fn from_times(times: &[SystemTime]) -> Option<Self> {
        Some(Self { oldest: *times.iter().min()?, newest: *times.iter().max()?, count: times.len() })
    }

    /// Merges two batches (a snapshot that was not published joins the next one).
    #[must_use]
    pub fn merge(self, other: Self) -> Self {
        Self {
            oldest: self.oldest.min(other.oldest),
            newest: self.newest.max(other.newest),
            count: self.count + other.count,
        }
    }
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

/// A source error. [`SourceError::ReadDir`], [`SourceError::Watch`],
/// [`SourceError::KubeConfig`] and [`SourceError::KubeList`] mean "nothing could be
/// loaded"; the others name one skipped file, document or object.
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
    /// A file is larger than [`files::Limits::max_file_bytes`]; it is skipped unread.
    #[error("{}: {bytes} bytes, more than the limit of {limit} bytes per manifests file; file skipped (split it, or raise --max-manifest-bytes)", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A document nests deeper than [`files::Limits::max_depth`]; it is skipped unparsed.
    #[error("{location}: nested more than {limit} levels deep; document skipped (no Kubernetes object nests so deep; raise --max-manifest-depth if this one must)")]
    TooDeep {
        /// Where.
        location: Box<DocumentLocation>,
        /// The limit.
        limit: usize,
    },
    /// An object is defined a second time (same kind, namespace and name); this later
    /// definition is skipped and the first one served.
    #[error("{location}: {object}: also defined at {first}, which is served (the first definition in file-name and document order); this definition skipped")]
    Duplicate {
        /// Where the skipped definition is.
        location: Box<DocumentLocation>,
        /// `kind namespace/name`.
        object: String,
        /// Where the served definition is.
        first: Box<DocumentLocation>,
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
    /// An object from the Kubernetes API does not deserialize into its type; it is
    /// skipped.
    #[error("{object}: {}{message}; object skipped", field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
    ApiObject {
        /// `kind namespace/name`, e.g. `Service demo/web`.
        object: String,
        /// Path of the offending field, e.g. `spec.ports[0].port`, when known.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The kubeconfig (or the in-cluster configuration) cannot be loaded.
    #[error("cannot use the {config}: {message}")]
    KubeConfig {
        /// `kubeconfig PATH` or `in-cluster configuration`.
        config: String,
        /// Why.
        message: String,
    },
    /// A list request to the API server failed.
    #[error("cannot list {resource} from the Kubernetes API at {url}: {source}{}", list_hint(source))]
    KubeList {
        /// `services`, `endpointslices` or `nodes`.
        resource: &'static str,
        /// The API server.
        url: String,
        /// Why.
        #[source]
        source: Box<::kube::Error>,
    },
}

impl SourceError {
    /// A copy of an error about a file's content (what [`files::FileCache`] keeps);
    /// `None` for the others, which carry an I/O or API error and are not cached.
    pub fn try_clone(&self) -> Option<Self> {
        Some(match self {
            Self::TooLarge { path, bytes, limit } => {
                Self::TooLarge { path: path.clone(), bytes: *bytes, limit: *limit }
            }
            Self::TooDeep { location, limit } => Self::TooDeep { location: location.clone(), limit: *limit },
            Self::Duplicate { location, object, first } => {
                Self::Duplicate { location: location.clone(), object: object.clone(), first: first.clone() }
            }
            Self::Syntax { location, format, message } => {
                Self::Syntax { location: location.clone(), format, message: message.clone() }
            }
            Self::NotAnObject { location, found } => Self::NotAnObject { location: location.clone(), found },
            Self::Object { location, object, field, message } => Self::Object {
                location: location.clone(),
                object: object.clone(),
                field: field.clone(),
                message: message.clone(),
            },
            Self::ApiObject { object, field, message } => {
                Self::ApiObject { object: object.clone(), field: field.clone(), message: message.clone() }
            }
            Self::KubeConfig { config, message } => {
                Self::KubeConfig { config: config.clone(), message: message.clone() }
            }
            Self::ReadDir { .. } | Self::Watch { .. } | Self::ReadFile { .. } | Self::KubeList { .. } => return None,
        })
    }
}

/// What to do about a failed list.
fn list_hint(e: &::kube::Error) -> &'static str {
    match e {
        ::kube::Error::Api(s) if s.code == 401 => "; the credentials were refused",
        ::kube::Error::Api(s) if s.code == 403 => {
            "; grant get/list/watch on services, endpointslices.discovery.k8s.io and nodes (configs/kubernetes/rbac.yaml)"
        }
        _ => "",
    }
}
