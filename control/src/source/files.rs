//! The manifests source: a directory of Kubernetes manifests, loaded whole and watched.
//!
//! [`load_dir`] reads every regular file (or symlink to one) in the directory whose name
//! ends in `.yaml`, `.yml` or `.json` and does not start with `.`, in name order; the
//! directory is not descended into. A YAML file may hold several documents separated by
//! `---`; a JSON file holds one value (or several, concatenated). Recognised objects:
//!
//! | apiVersion            | kind                                  |
//! |-----------------------|---------------------------------------|
//! | `v1`                  | `Service`, `Node`                     |
//! | `discovery.k8s.io/v1` | `EndpointSlice`                       |
//! | `v1`                  | `List` (items of the kinds above)     |
//! | as for the item kind  | `ServiceList`, `EndpointSliceList`, `NodeList` (what `kubectl get -o json` and the API's list calls return; items need not repeat kind and apiVersion) |
//!
//! Every other kind (Deployments, Namespaces, Knative Services, …) is ignored with a debug
//! log. A file that cannot be read, a document that does not parse, or an object that does
//! not deserialize is skipped with a [`SourceError`] naming the file, the document (index
//! and line), the object and the field; everything else is still loaded. Only a directory
//! that cannot be listed fails the load as a whole.
//!
//! [`DirWatch`] watches the directory with inotify (through `notify`), waits for a quiet
//! period after a burst of changes, then reloads the whole directory and hands the new
//! snapshot over. Editors that save by writing a temporary file and renaming it over the
//! original, and Kubernetes ConfigMap volumes (which swap a `..data` symlink), are seen
//! like any other change. If the directory itself disappears, the watch reports the
//! error and re-attaches once the directory is back.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{DocumentLocation, KubeObject, Loaded, SourceError};

/// File name endings that are read as manifests.
pub const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// How long the directory must stay quiet after a change before it is reloaded.
pub const DEFAULT_QUIET: Duration = Duration::from_millis(100);

/// Longest a reload is postponed by a continuous stream of changes.
pub const MAX_DELAY: Duration = Duration::from_secs(1);

/// How often a watch whose directory disappeared looks for it again.
pub const REWATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Whether `name` is a manifest file name: ends in one of [`MANIFEST_EXTENSIONS`]
/// (any case) and is not hidden.
pub fn is_manifest_name(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else { return false };
    if name.starts_with('.') {
        return false;
    }
    let Some((_, ext)) = name.rsplit_once('.') else { return false };
    MANIFEST_EXTENSIONS.iter().any(|e| e.eq_ignore_ascii_case(ext))
}

/// Loads every manifest file of `dir` (see the module documentation).
///
/// # Errors
/// [`SourceError::ReadDir`] when the directory cannot be listed. Everything else that
/// goes wrong is reported in [`Loaded::errors`] and skipped.
pub fn load_dir(dir: &Path) -> Result<Loaded, SourceError> {
    let read_dir_err = |source| SourceError::ReadDir { dir: dir.to_owned(), source };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir_err)? {
        let entry = entry.map_err(read_dir_err)?;
        if is_manifest_name(&entry.file_name()) {
            paths.push(entry.path());
        }
    }
    paths.sort();
    let mut loaded = Loaded::default();
    for path in paths {
        // Follows symlinks: a dangling one is reported, a directory named *.yaml is not a file.
        match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => continue,
            Ok(_) => {}
            Err(source) => {
                loaded.errors.push(SourceError::ReadFile { path, source });
                continue;
            }
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => parse_manifests(&path, &text, &mut loaded),
            Err(source) => loaded.errors.push(SourceError::ReadFile { path, source }),
        }
    }
    Ok(loaded)
}

/// Parses the text of one manifests file into `out`; `path` names it in errors and its
/// ending chooses the format (`.json`: JSON, anything else: YAML).
pub fn parse_manifests(path: &Path, text: &str, out: &mut Loaded) {
    let is_json = path.extension().and_then(OsStr::to_str).is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if is_json {
        parse_json(path, text, out);
    } else {
        parse_yaml(path, text, out);
    }
}

fn parse_json(path: &Path, text: &str, out: &mut Loaded) {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut document = 0;
    loop {
        let start = stream.byte_offset();
        let start = start + text[start..].len() - text[start..].trim_start().len();
        let line = text[..start].matches('\n').count() + 1;
        let Some(res) = stream.next() else { break };
        document += 1;
        let location = DocumentLocation { path: path.to_owned(), document, line, item: None };
        match res {
            Ok(value) => handle_document(value, &location, out),
            Err(e) => {
                out.errors.push(SourceError::Syntax {
                    location: Box::new(location),
                    format: "JSON",
                    message: e.to_string(),
                });
                break; // a JSON stream cannot be resynchronised after an error
            }
        }
    }
}

/// Splits YAML text at document markers (`---` and `...` at the start of a line, which
/// YAML reserves for that wherever they appear), so that one malformed document does not
/// take the following ones with it. Returns, for every document that has content, the
/// line of its first content line (for messages) and its text, padded with the newlines
/// before it so that the parser's line numbers are the file's.
fn split_yaml_documents(text: &str) -> Vec<(usize, String)> {
    fn is_marker(line: &str, m: &str) -> bool {
        line.strip_prefix(m).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    }
    /// 0-based index (within `doc`) of the first line with content, if any.
    fn first_content(doc: &str) -> Option<usize> {
        doc.lines().position(|l| {
            let t = l.trim();
            !(t.is_empty() || t.starts_with('#') || t.starts_with('%'))
        })
    }
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut flush = |current: &mut String, start: usize| {
        if let Some(first) = first_content(current) {
            docs.push((start + first, "\n".repeat(start - 1) + current));
        }
        current.clear();
    };
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let line = raw.trim_end_matches(['\n', '\r']);
        if is_marker(line, "---") {
            flush(&mut current, start);
            start = i + 1;
            // Content may follow the marker on the same line (`--- {a: 1}`); keep its columns.
            current.push_str("   ");
            current.push_str(&raw[3..]);
        } else if is_marker(line, "...") {
            flush(&mut current, start);
            start = i + 2;
        } else {
            current.push_str(raw);
        }
    }
    flush(&mut current, start);
    docs
}

fn parse_yaml(path: &Path, text: &str, out: &mut Loaded) {
    for (i, (line, doc)) in split_yaml_documents(text).into_iter().enumerate() {
        let location = DocumentLocation { path: path.to_owned(), document: i + 1, line, item: None };
        match serde_yaml_ng::from_str::<Value>(&doc) {
            Ok(value) => handle_document(value, &location, out),
            Err(e) => out.errors.push(SourceError::Syntax {
                location: Box::new(location),
                format: "YAML",
                message: e.to_string(),
            }),
        }
    }
}

/// The object's identity for messages, as far as the raw value tells it.
fn describe(kind: &str, value: &Value) -> String {
    let meta = value.get("metadata");
    let field = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str).filter(|s| !s.is_empty());
    let name = field("name").unwrap_or("<unnamed>");
    if kind == "Node" || kind.is_empty() {
        let kind = if kind.is_empty() { "object" } else { kind };
        format!("{kind} {name}")
    } else {
        format!("{kind} {}/{name}", field("namespace").unwrap_or(crate::model::DEFAULT_NAMESPACE))
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// What a document's apiVersion and kind make of it.
enum Recognised {
    Service,
    EndpointSlice,
    Node,
    /// `v1` `List`: items carry their own kind.
    List,
    /// `ServiceList` & co: items may omit kind and apiVersion.
    TypedList {
        api_version: &'static str,
        kind: &'static str,
    },
    Ignored,
}

fn recognise(api_version: Option<&str>, kind: &str) -> Recognised {
    match (api_version, kind) {
        (Some("v1"), "Service") => Recognised::Service,
        (Some("discovery.k8s.io/v1"), "EndpointSlice") => Recognised::EndpointSlice,
        (Some("v1"), "Node") => Recognised::Node,
        (Some("v1"), "List") => Recognised::List,
        (Some("v1"), "ServiceList") => Recognised::TypedList { api_version: "v1", kind: "Service" },
        (Some("discovery.k8s.io/v1"), "EndpointSliceList") => {
            Recognised::TypedList { api_version: "discovery.k8s.io/v1", kind: "EndpointSlice" }
        }
        (Some("v1"), "NodeList") => Recognised::TypedList { api_version: "v1", kind: "Node" },
        _ => Recognised::Ignored,
    }
}

fn handle_document(value: Value, location: &DocumentLocation, out: &mut Loaded) {
    if value.is_null() {
        return; // an empty document (`---` followed by nothing but `~`)
    }
    handle_value(value, location, true, out);
}

fn handle_value(value: Value, location: &DocumentLocation, lists_allowed: bool, out: &mut Loaded) {
    let object_error = |object: String, field: Option<&str>, message: String| SourceError::Object {
        location: Box::new(location.clone()),
        object,
        field: field.map(str::to_owned),
        message,
    };
    if !value.is_object() {
        out.errors.push(SourceError::NotAnObject { location: Box::new(location.clone()), found: type_name(&value) });
        return;
    }
    let kind = match value.get("kind") {
        Some(Value::String(k)) if !k.is_empty() => k.clone(),
        Some(other) if !other.is_null() => {
            out.errors.push(object_error(
                describe("", &value),
                Some("kind"),
                format!("{} where a string was expected", type_name(other)),
            ));
            return;
        }
        _ => {
            out.errors.push(object_error(
                describe("", &value),
                Some("kind"),
                "missing; every Kubernetes object names its kind (e.g. \"Service\")".into(),
            ));
            return;
        }
    };
    let api_version = value.get("apiVersion").and_then(Value::as_str).map(str::to_owned);
    let object = describe(&kind, &value);
    match recognise(api_version.as_deref(), &kind) {
        Recognised::Service => {
            push_typed::<core::Service>(value, location, object, out, |o| KubeObject::Service(Box::new(o)))
        }
        Recognised::EndpointSlice => push_typed::<discovery::EndpointSlice>(value, location, object, out, |o| {
            KubeObject::EndpointSlice(Box::new(o))
        }),
        Recognised::Node => push_typed::<core::Node>(value, location, object, out, |o| KubeObject::Node(Box::new(o))),
        Recognised::List | Recognised::TypedList { .. } if !lists_allowed => {
            tracing::debug!(%location, %kind, "ignoring a list nested in a list");
        }
        Recognised::List => handle_items(value, location, None, out),
        Recognised::TypedList { api_version, kind } => handle_items(value, location, Some((api_version, kind)), out),
        Recognised::Ignored => match (api_version.as_deref(), kind.as_str()) {
            (None, "Service" | "Node" | "EndpointSlice" | "List") => out.errors.push(object_error(
                object,
                Some("apiVersion"),
                format!("missing; write \"{}\"", if kind == "EndpointSlice" { "discovery.k8s.io/v1" } else { "v1" }),
            )),
            _ => {
                tracing::debug!(%location, %object, api_version = api_version.as_deref().unwrap_or(""), "ignoring a kind torii does not serve")
            }
        },
    }
}

fn handle_items(mut list: Value, location: &DocumentLocation, fill: Option<(&str, &str)>, out: &mut Loaded) {
    let items = match list.get_mut("items").map(Value::take) {
        None | Some(Value::Null) => return,
        Some(Value::Array(items)) => items,
        Some(other) => {
            out.errors.push(SourceError::Object {
                location: Box::new(location.clone()),
                object: describe("", &list),
                field: Some("items".into()),
                message: format!("{} where a sequence was expected", type_name(&other)),
            });
            return;
        }
    };
    for (i, mut item) in items.into_iter().enumerate() {
        let location = DocumentLocation { item: Some(i), ..location.clone() };
        if let (Some((api_version, kind)), Value::Object(map)) = (fill, &mut item) {
            map.entry("apiVersion").or_insert_with(|| Value::String(api_version.to_owned()));
            map.entry("kind").or_insert_with(|| Value::String(kind.to_owned()));
        }
        handle_value(item, &location, false, out);
    }
}

fn push_typed<T: serde::de::DeserializeOwned>(
    value: Value,
    location: &DocumentLocation,
    object: String,
    out: &mut Loaded,
    wrap: impl FnOnce(T) -> KubeObject,
) {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(o) => {
            out.objects.push(wrap(o));
            out.locations.push(location.clone());
        }
        Err(e) => {
            let path = e.path().to_string();
            out.errors.push(SourceError::Object {
                location: Box::new(location.clone()),
                object,
                field: (path != ".").then_some(path),
                message: e.into_inner().to_string(),
            });
        }
    }
}

// ---------------------------------------------------------------------------------------
// Watching

/// A watched manifests directory: yields a fresh [`Loaded`] snapshot first, then again
/// after every burst of changes (or the error that prevented reading the directory).
///
/// Dropping it stops the watch.
#[derive(Debug)]
pub struct DirWatch {
    rx: mpsc::Receiver<Result<Loaded, SourceError>>,
    task: tokio::task::JoinHandle<()>,
}

impl DirWatch {
    /// Starts watching `dir`; `quiet` is how long the directory must stay unchanged
    /// before a reload ([`DEFAULT_QUIET`] is a good value). Must be called inside a tokio
    /// runtime.
    ///
    /// # Errors
    /// [`SourceError::ReadDir`] when `dir` cannot be listed, [`SourceError::Watch`] when
    /// the inotify watch cannot be set up.
    pub fn start(dir: impl Into<PathBuf>, quiet: Duration) -> Result<Self, SourceError> {
        let dir = dir.into();
        std::fs::read_dir(&dir).map_err(|source| SourceError::ReadDir { dir: dir.clone(), source })?;
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let watch_err = |source| SourceError::Watch { dir: dir.clone(), source };
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
            // The receiver is gone only when the watch is being dropped.
            let _ = ev_tx.send(res);
        })
        .map_err(watch_err)?;
        watcher.watch(&dir, RecursiveMode::NonRecursive).map_err(watch_err)?;
        let (tx, rx) = mpsc::channel(1);
        let task = tokio::spawn(run_watch(dir, quiet, watcher, ev_rx, tx));
        Ok(Self { rx, task })
    }

    /// The next snapshot: the initial one, then one per burst of changes. `None` once the
    /// watch has stopped.
    pub async fn next(&mut self) -> Option<Result<Loaded, SourceError>> {
        self.rx.recv().await
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a batch of notify events means for the watch.
#[derive(Default)]
struct Triage {
    /// A manifest (or the directory) may have changed: reload.
    reload: bool,
    /// The directory itself was removed, renamed or replaced, or the watch failed: set
    /// the watch up again.
    rewatch: bool,
}

fn triage(res: &notify::Result<Event>, dir: &Path) -> Triage {
    let event = match res {
        Ok(ev) => ev,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "watch error: {e}; reloading");
            return Triage { reload: true, rewatch: true };
        }
    };
    if event.need_rescan() {
        return Triage { reload: true, rewatch: false };
    }
    match event.kind {
        // Opens and reads (ours included) change nothing; a close after writing does.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return Triage::default(),
        _ => {}
    }
    if event.paths.is_empty() {
        return Triage { reload: true, rewatch: false };
    }
    let mut t = Triage::default();
    for p in &event.paths {
        if p == dir {
            t.reload = true;
            t.rewatch |= matches!(event.kind, EventKind::Remove(_) | EventKind::Modify(_) | EventKind::Other);
        } else if let Some(name) = p.file_name() {
            // `..data` & co: the symlink swap of a Kubernetes ConfigMap volume.
            let configmap = name.to_str().is_some_and(|n| n.starts_with(".."));
            t.reload |= configmap || is_manifest_name(name);
        }
    }
    t
}

async fn reload(dir: &Path) -> Result<Loaded, SourceError> {
    let d = dir.to_owned();
    match tokio::task::spawn_blocking(move || load_dir(&d)).await {
        Ok(res) => res,
        Err(e) => Err(SourceError::ReadDir { dir: dir.to_owned(), source: std::io::Error::other(e.to_string()) }),
    }
}

async fn run_watch(
    dir: PathBuf,
    quiet: Duration,
    mut watcher: notify::RecommendedWatcher,
    mut events: mpsc::UnboundedReceiver<notify::Result<Event>>,
    out: mpsc::Sender<Result<Loaded, SourceError>>,
) {
    let mut attached = true;
    let mut first = true;
    loop {
        if first {
            first = false;
        } else if attached {
            // Wait for a relevant change, then for the burst to end.
            let mut t = Triage::default();
            while !t.reload {
                let Some(res) = events.recv().await else { return };
                t = triage(&res, &dir);
            }
            let deadline = Instant::now() + MAX_DELAY;
            let mut settle = Instant::now() + quiet;
            loop {
                let until = settle.min(deadline);
                match tokio::time::timeout_at(until, events.recv()).await {
                    Ok(Some(res)) => {
                        let more = triage(&res, &dir);
                        if more.reload {
                            settle = Instant::now() + quiet;
                        }
                        t.rewatch |= more.rewatch;
                    }
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            if t.rewatch {
                let _ = watcher.unwatch(&dir);
                attached = watcher.watch(&dir, RecursiveMode::NonRecursive).is_ok();
            }
        } else {
            // The directory is gone: look for it again every so often.
            tokio::time::sleep(REWATCH_INTERVAL).await;
            if watcher.watch(&dir, RecursiveMode::NonRecursive).is_err() {
                continue;
            }
            attached = true;
            tracing::info!(dir = %dir.display(), "manifests directory is back; watching it again");
            while events.try_recv().is_ok() {}
        }
        let res = reload(&dir).await;
        if let Err(SourceError::ReadDir { .. }) = &res {
            if attached {
                let _ = watcher.unwatch(&dir);
                attached = false;
            }
        }
        if out.send(res).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Objects;

    fn parse(name: &str, text: &str) -> Loaded {
        let mut out = Loaded::default();
        parse_manifests(Path::new(name), text, &mut out);
        out
    }

    fn errors(l: &Loaded) -> Vec<String> {
        l.errors.iter().map(ToString::to_string).collect()
    }

    fn names(l: &Loaded) -> Vec<String> {
        l.objects.iter().map(|o| o.object_ref().to_string()).collect()
    }

    const MULTI: &str = r#"# leading comment
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: demo}
spec: {ports: [{port: 80}]}
---
# nothing but a comment
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: a-1, namespace: demo, labels: {kubernetes.io/service-name: a}}
addressType: IPv4
endpoints: [{addresses: [10.0.0.1]}]
...
--- {apiVersion: v1, kind: Node, metadata: {name: n}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ignored}
"#;

    #[test]
    fn multi_document_yaml() {
        let l = parse("m.yaml", MULTI);
        assert_eq!(errors(&l), Vec::<String>::new());
        assert_eq!(names(&l), ["Service demo/a", "EndpointSlice demo/a-1", "Node n"]);
    }

    #[test]
    fn document_splitting_keeps_line_numbers() {
        let docs = split_yaml_documents(MULTI);
        let starts: Vec<usize> = docs.iter().map(|d| d.0).collect();
        assert_eq!(starts, [3, 10, 16, 18]);
        assert_eq!(docs[1].1.lines().nth(9), Some("apiVersion: discovery.k8s.io/v1"));
    }

    #[test]
    fn malformed_documents_are_skipped_and_the_rest_served() {
        let text = r#"apiVersion: v1
kind: Service
metadata: {name: good1}
---
apiVersion: v1
kind: Service
metadata: {name: broken
  oops: [
---
apiVersion: v1
kind: Service
metadata: {name: typo}
spec:
  ports:
  - port: eighty
---
apiVersion: v1
kind: Service
metadata: {name: good2}
---
just a string
---
metadata: {name: kindless}
---
kind: Service
metadata: {name: versionless}
"#;
        let l = parse("dir/svc.yaml", text);
        assert_eq!(names(&l), ["Service default/good1", "Service default/good2"]);
        let e = errors(&l);
        assert_eq!(e.len(), 5, "{e:#?}");
        assert!(e[0].starts_with("dir/svc.yaml:5: document 2: not valid YAML: "), "{}", e[0]);
        assert!(e[0].contains("line 8") || e[0].contains("line 9"), "{}", e[0]);
        assert!(
            e[1].starts_with("dir/svc.yaml:10: document 3: Service default/typo: spec.ports[0].port: invalid type: string \"eighty\""),
            "{}",
            e[1]
        );
        assert!(e[1].ends_with("; object skipped"), "{}", e[1]);
        assert!(e[2].starts_with("dir/svc.yaml:21: document 5: a string where a Kubernetes object"), "{}", e[2]);
        assert!(e[3].starts_with("dir/svc.yaml:23: document 6: object kindless: kind: missing"), "{}", e[3]);
        assert!(
            e[4].starts_with("dir/svc.yaml:25: document 7: Service default/versionless: apiVersion: missing"),
            "{}",
            e[4]
        );
    }

    #[test]
    fn json_files_and_typed_lists() {
        let text = r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"529"},"items":[
 {"metadata":{"name":"a","namespace":"demo"},"spec":{"ports":[{"port":80}]}},
 {"metadata":{"name":"b","namespace":"demo"},"spec":{"ports":[{"port":"x"}]}}
]}
{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"}},{"kind":"ConfigMap"}]}
"#;
        let l = parse("list.json", text);
        assert_eq!(names(&l), ["Service demo/a", "Node n"]);
        let e = errors(&l);
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(
            e[0].starts_with("list.json:1: document 1, items[1]: Service demo/b: spec.ports[0].port: invalid type"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn json_syntax_error_names_file_and_document() {
        let l = parse(
            "x.json",
            "{\"kind\": \"Node\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"n\"}}\n{\"kind\": ",
        );
        assert_eq!(names(&l), ["Node n"]);
        let e = errors(&l);
        assert!(e[0].starts_with("x.json:2: document 2: not valid JSON: EOF while parsing"), "{}", e[0]);
    }

    #[test]
    fn other_api_versions_of_known_kinds_are_ignored() {
        let l = parse(
            "k.yaml",
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: k}\n---\napiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: e}\n",
        );
        assert!(l.objects.is_empty());
        assert!(l.errors.is_empty());
    }

    #[test]
    fn load_dir_reads_manifests_in_name_order_and_reports_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("b.yml"), "apiVersion: v1\nkind: Node\nmetadata: {name: b}\n").unwrap();
        std::fs::write(p.join("a.yaml"), "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n").unwrap();
        std::fs::write(p.join("c.JSON"), r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"c"}}"#).unwrap();
        std::fs::write(p.join("notes.txt"), "apiVersion: v1\nkind: Node\nmetadata: {name: txt}\n").unwrap();
        std::fs::write(p.join(".hidden.yaml"), "apiVersion: v1\nkind: Node\nmetadata: {name: hidden}\n").unwrap();
        std::fs::write(p.join("d.yaml"), b"\xff\xfe not utf-8").unwrap();
        std::fs::create_dir(p.join("sub.yaml")).unwrap();
        std::os::unix::fs::symlink(p.join("missing"), p.join("e.yaml")).unwrap();
        let l = load_dir(p).unwrap();
        assert_eq!(names(&l), ["Node a", "Node b", "Node c"]);
        let e = errors(&l);
        assert_eq!(e.len(), 2, "{e:#?}");
        assert!(e[0].contains("d.yaml: cannot read: "), "{}", e[0]);
        assert!(e[1].contains("e.yaml: cannot read: "), "{}", e[1]);

        let err = load_dir(&p.join("nope")).unwrap_err().to_string();
        assert!(err.starts_with("cannot read manifests directory "), "{err}");
    }

    #[test]
    fn loaded_objects_validate_into_the_model() {
        let l = parse("m.yaml", MULTI);
        let (o, e) = Objects::from_kube(&l.objects);
        assert!(e.is_empty());
        assert_eq!(o.services.len(), 1);
        assert_eq!(o.endpoint_slices.len(), 1);
        assert_eq!(o.nodes.len(), 1);
    }

    async fn next_with(w: &mut DirWatch, want: &[&str]) -> Loaded {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = tokio::time::timeout_at(deadline, w.next())
                .await
                .unwrap_or_else(|_| panic!("no reload with {want:?} within 5 s"))
                .expect("watch ended")
                .expect("directory readable");
            if names(&got) == want {
                return got;
            }
        }
    }

    fn node(name: &str) -> String {
        format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n")
    }

    #[tokio::test]
    async fn watch_reloads_on_write_rename_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_owned();
        let mut w = DirWatch::start(&p, Duration::from_millis(50)).unwrap();
        let initial = w.next().await.unwrap().unwrap();
        assert!(initial.objects.is_empty());

        // `next_with` bounds how long the reload may take.
        std::fs::write(p.join("a.yaml"), node("a")).unwrap();
        next_with(&mut w, &["Node a"]).await;

        // An editor saving through a temporary file renamed over the original.
        std::fs::write(p.join(".a.yaml.swp"), node("b")).unwrap();
        std::fs::rename(p.join(".a.yaml.swp"), p.join("a.yaml")).unwrap();
        next_with(&mut w, &["Node b"]).await;

        std::fs::remove_file(p.join("a.yaml")).unwrap();
        next_with(&mut w, &[]).await;
    }

    #[tokio::test]
    async fn watch_coalesces_bursts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_owned();
        let mut w = DirWatch::start(&p, Duration::from_millis(200)).unwrap();
        w.next().await.unwrap().unwrap();
        for i in 0..20 {
            std::fs::write(p.join(format!("n{i:02}.yaml")), node(&format!("n{i:02}"))).unwrap();
        }
        let got = tokio::time::timeout(Duration::from_secs(5), w.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(got.objects.len(), 20, "one reload for the whole burst");
    }

    #[tokio::test]
    async fn watch_survives_the_directory_being_replaced() {
        let parent = tempfile::tempdir().unwrap();
        let p = parent.path().join("manifests");
        std::fs::create_dir(&p).unwrap();
        let mut w = DirWatch::start(&p, Duration::from_millis(50)).unwrap();
        w.next().await.unwrap().unwrap();

        std::fs::remove_dir_all(&p).unwrap();
        let gone = tokio::time::timeout(Duration::from_secs(5), w.next()).await.unwrap().unwrap();
        assert!(matches!(gone, Err(SourceError::ReadDir { .. })), "{gone:?}");

        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("a.yaml"), node("a")).unwrap();
        next_with(&mut w, &["Node a"]).await;
        std::fs::write(p.join("b.yaml"), node("b")).unwrap();
        next_with(&mut w, &["Node a", "Node b"]).await;
    }
}
