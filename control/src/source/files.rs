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
//! Hostile or mistaken input costs bounded time and memory ([`Limits`]): parsing is
//! linear in a file's size (documents are slices of the file; parser line numbers are
//! translated, not padded for), a file larger than [`Limits::max_file_bytes`] is skipped
//! unread, and a document nested deeper than [`Limits::max_depth`] is skipped before the
//! parser sees it ([`nesting_depth`]). An object defined twice (same kind, namespace and
//! name, in one file or two) is served from its first definition in file-name and then
//! document order; each later one is skipped with an error naming both places.
//!
//! An object's `metadata.resourceVersion` is not taken from its file: a file is edited by
//! hand without it changing (an export of `kubectl get -o yaml` keeps the one it was
//! exported with), and the compiler skips an object whose version it already holds. Each
//! object is versioned by a digest of its document's content instead, so an unchanged
//! object is still not validated again on a reload.
//!
//! [`DirWatch`] watches the directory with inotify (through `notify`), waits for a quiet
//! period after a burst of changes, then reloads the directory — parsing again only the
//! files whose size, times or inode changed ([`FileCache`]) — and hands the new
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

/// Defaults of [`Limits`]: 64 MiB per file, 64 levels of nesting.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

/// See [`DEFAULT_MAX_FILE_BYTES`]. Kubernetes objects nest about 10 levels deep (15 with
/// `managedFields`); serde_yaml_ng and serde_json give up at 128.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// What the manifests source refuses to parse, so that one hostile or mistaken file costs
/// bounded time and memory (command line: `--max-manifest-bytes`, `--max-manifest-depth`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A larger file is skipped unread ([`SourceError::TooLarge`]).
    pub max_file_bytes: u64,
    /// A document nested deeper (mappings, sequences and flow collections inside each
    /// other) is skipped before it is parsed ([`SourceError::TooDeep`]).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_file_bytes: DEFAULT_MAX_FILE_BYTES, max_depth: DEFAULT_MAX_DEPTH }
    }
}

/// What identifies one version of a file without reading it: device, inode, size,
/// modification and status-change times (a rename over it, a ConfigMap's symlink swap and
/// an in-place write all change one of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The parsed manifests files of a directory, so that a reload parses only the files that
/// changed ([`load_dir_cached`]; [`DirWatch`] keeps one).
#[derive(Debug)]
pub struct FileCache {
    files: std::collections::HashMap<PathBuf, (Stamp, Limits, Loaded)>,
    parsed: u64,
    /// Keep what was parsed (a watch); `false` for a one-shot load, which then moves the
    /// objects out instead of copying them.
    retain: bool,
}

impl Default for FileCache {
    fn default() -> Self {
        Self { files: std::collections::HashMap::new(), parsed: 0, retain: true }
    }
}

impl FileCache {
    /// A cache that keeps nothing: for loading a directory once ([`load_dir`]).
    pub fn one_shot() -> Self {
        Self { retain: false, ..Self::default() }
    }

    /// Files parsed so far (the others were reused).
    pub fn parsed_files(&self) -> u64 {
        self.parsed
    }
}

/// Loads every manifest file of `dir` (see the module documentation) with the default
/// [`Limits`].
///
/// # Errors
/// [`SourceError::ReadDir`] when the directory cannot be listed. Everything else that
/// goes wrong is reported in [`Loaded::errors`] and skipped.
pub fn load_dir(dir: &Path) -> Result<Loaded, SourceError> {
    load_dir_cached(dir, &Limits::default(), &mut FileCache::one_shot())
}

/// [`load_dir`] with `limits`, parsing only the files that are not in `cache` as they are
/// now (and updating it).
///
/// A (kind, namespace, name) defined in more than one place is served from the first, in
/// file-name order and then document order; every later definition is skipped with a
/// [`SourceError::Duplicate`] naming both places. The winner is thus the same whatever
/// order the files were written in, and never a silent one.
///
/// # Errors
/// [`SourceError::ReadDir`] when the directory cannot be listed. Everything else that
/// goes wrong is reported in [`Loaded::errors`] and skipped.
pub fn load_dir_cached(dir: &Path, limits: &Limits, cache: &mut FileCache) -> Result<Loaded, SourceError> {
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
    let mut present = std::collections::HashSet::with_capacity(paths.len());
    for path in paths {
        // Follows symlinks: a dangling one is reported, a directory named *.yaml is not a file.
        let stamp = match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => continue,
            Ok(m) => Stamp::of(&m),
            Err(source) => {
                loaded.errors.push(SourceError::ReadFile { path, source });
                continue;
            }
        };
        if stamp.len > limits.max_file_bytes {
            loaded.errors.push(SourceError::TooLarge { path, bytes: stamp.len, limit: limits.max_file_bytes });
            continue;
        }
        present.insert(path.clone());
        if let Some((s, l, file)) = cache.files.get(&path) {
            if *s == stamp && l == limits {
                append_copy(&mut loaded, file);
                continue;
            }
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut file = Loaded::default();
                parse_manifests_with(&path, &text, limits, &mut file);
                cache.parsed += 1;
                if cache.retain {
                    append_copy(&mut loaded, &file);
                    cache.files.insert(path, (stamp, *limits, file));
                } else {
                    loaded.objects.append(&mut file.objects);
                    loaded.locations.append(&mut file.locations);
                    loaded.errors.append(&mut file.errors);
                }
            }
            Err(source) => {
                cache.files.remove(&path);
                loaded.errors.push(SourceError::ReadFile { path, source });
            }
        }
    }
    cache.files.retain(|p, _| present.contains(p));
    drop_duplicates(&mut loaded);
    Ok(loaded)
}

/// Appends a copy of one cached file's objects, locations and errors.
fn append_copy(out: &mut Loaded, file: &Loaded) {
    out.objects.extend(file.objects.iter().cloned());
    out.locations.extend(file.locations.iter().cloned());
    out.errors.extend(file.errors.iter().filter_map(SourceError::try_clone));
}

/// An object's identity (kind, namespace as written, name), borrowed: the same identity
/// as [`KubeObject::object_ref`] (whose namespace is defaulted) once `namespace` is
/// defaulted too, without allocating.
fn identity(o: &KubeObject) -> (&'static str, &str, &str) {
    let (kind, meta) = match o {
        KubeObject::Service(s) => ("Service", &s.metadata),
        KubeObject::EndpointSlice(s) => ("EndpointSlice", &s.metadata),
        KubeObject::Node(n) => ("Node", &n.metadata),
    };
    let namespace = match (kind, meta.namespace.as_deref()) {
        ("Node", _) => "",
        (_, Some(ns)) if !ns.is_empty() => ns,
        _ => crate::model::DEFAULT_NAMESPACE,
    };
    (kind, namespace, meta.name.as_deref().unwrap_or_default())
}

/// Removes every definition of an object after its first, with an error naming both.
fn drop_duplicates(loaded: &mut Loaded) {
    let mut first: std::collections::HashMap<(&str, &str, &str), usize> =
        std::collections::HashMap::with_capacity(loaded.objects.len());
    let mut keep = vec![true; loaded.objects.len()];
    let mut errors = Vec::new();
    for (i, o) in loaded.objects.iter().enumerate() {
        let id = identity(o);
        if id.2.is_empty() {
            continue; // unnamed: the model reports it
        }
        if let Some(&j) = first.get(&id) {
            keep[i] = false;
            errors.push(SourceError::Duplicate {
                location: Box::new(loaded.locations[i].clone()),
                object: o.object_ref().to_string(),
                first: Box::new(loaded.locations[j].clone()),
            });
        } else {
            first.insert(id, i);
        }
    }
    drop(first);
    loaded.errors.append(&mut errors);
    if keep.iter().all(|&k| k) {
        return;
    }
    let mut k = keep.iter();
    loaded.objects.retain(|_| *k.next().unwrap_or(&true));
    let mut k = keep.iter();
    loaded.locations.retain(|_| *k.next().unwrap_or(&true));
}

/// Parses the text of one manifests file into `out`; `path` names it in errors and its
/// ending chooses the format (`.json`: JSON, anything else: YAML). Default [`Limits`].
pub fn parse_manifests(path: &Path, text: &str, out: &mut Loaded) {
    parse_manifests_with(path, text, &Limits::default(), out);
}

/// [`parse_manifests`] with `limits` (only [`Limits::max_depth`] applies to text).
/// Linear in the size of `text`.
pub fn parse_manifests_with(path: &Path, text: &str, limits: &Limits, out: &mut Loaded) {
    let is_json = path.extension().and_then(OsStr::to_str).is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if is_json {
        parse_json(path, text, limits, out);
    } else {
        parse_yaml(path, text, limits, out);
    }
}

fn parse_json(path: &Path, text: &str, limits: &Limits, out: &mut Loaded) {
    let depth = nesting_depth(text, limits.max_depth);
    if depth > limits.max_depth {
        let location = DocumentLocation { path: path.to_owned(), document: 1, line: 1, item: None };
        out.errors.push(SourceError::TooDeep { location: Box::new(location), limit: limits.max_depth });
        return;
    }
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<UniqueKeys>();
    let mut document = 0;
    // Lines are counted incrementally: each byte of `text` is looked at once.
    let (mut counted, mut line) = (0, 1);
    loop {
        let start = stream.byte_offset();
        let start = start + text[start..].len() - text[start..].trim_start().len();
        line += newline_count(&text.as_bytes()[counted..start]);
        counted = start;
        let Some(res) = stream.next() else { break };
        document += 1;
        let location = DocumentLocation { path: path.to_owned(), document, line, item: None };
        match res {
            Ok(UniqueKeys(value)) => handle_document(value, &location, out),
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

/// Number of newlines in `bytes`.
fn newline_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

/// Splits YAML text at document markers (`---` and `...` at the start of a line, which
/// YAML reserves for that wherever they appear), so that one malformed document does not
/// take the following ones with it. Returns, for every document that has content, the
/// file line of its first content line (for messages), the file line its text starts at
/// (to translate the parser's line numbers), and its text. Linear in the size of `text`:
/// each document is a slice of it, except where content follows a `---` on the same line.
fn split_yaml_documents(text: &str) -> Vec<(usize, usize, std::borrow::Cow<'_, str>)> {
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
    // The current document: text[from..to], starting at file line `start`; `head` holds
    // a `---` line's own content (columns kept) when there is some.
    let (mut from, mut to, mut start) = (0, 0, 1);
    let mut head: Option<String> = None;
    let mut flush = |head: &mut Option<String>, from: usize, to: usize, start: usize| {
        let body = &text[from..to];
        let doc: std::borrow::Cow<'_, str> = match head.take() {
            Some(h) => (h + body).into(),
            None => body.into(),
        };
        if let Some(first) = first_content(&doc) {
            docs.push((start + first, start, doc));
        }
    };
    let mut offset = 0;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let line = raw.trim_end_matches(['\n', '\r']);
        let next = offset + raw.len();
        if is_marker(line, "---") {
            flush(&mut head, from, to, start);
            start = i + 1;
            // The document's text starts on the marker's line: content may follow the
            // marker there (`--- {a: 1}`), its columns kept.
            head = Some(format!("   {}", &raw[3..]));
            (from, to) = (next, next);
        } else if is_marker(line, "...") {
            flush(&mut head, from, to, start);
            start = i + 2;
            (from, to) = (next, next);
        } else {
            to = next;
        }
        offset = next;
    }
    flush(&mut head, from, to, start);
    docs
}

/// Rewrites the `line N` positions of a parser message about a document that starts at
/// file line `start` into file lines.
fn shift_lines(message: &str, start: usize) -> String {
    if start <= 1 {
        return message.to_owned();
    }
    let mut out = String::with_capacity(message.len() + 8);
    let mut rest = message;
    while let Some(i) = rest.find("line ") {
        let (before, after) = rest.split_at(i + 5);
        out.push_str(before);
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        match after[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + start - 1).to_string()),
            Err(_) => out.push_str(&after[..digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// An upper estimate of how deeply the collections of a YAML (or JSON) document nest,
/// found in one pass over its text without parsing it; stops counting once past `limit`.
///
/// Block collections count by indentation (each line indented deeper than the lines it
/// belongs to opens one level, a compact `- ` entry another), flow collections by their
/// brackets outside quoted scalars, and block scalars (`|`, `>`) not at all. A bracket
/// inside a plain block scalar (`command: echo [x]`) is not a flow collection and is not
/// counted. This guards the parser, whose cost on a deeply nested document is far from
/// linear; the parser itself still decides what is valid.
pub fn nesting_depth(doc: &str, limit: usize) -> usize {
    let mut max = 0;
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0_usize;
    let mut quote: Option<u8> = None;
    let mut block_scalar: Option<usize> = None;
    // The level of the collection the current flow collections are inside.
    let mut base = 0;
    for line in doc.lines() {
        let b = line.as_bytes();
        let indent = b.iter().take_while(|&&c| c == b' ').count();
        if let Some(i) = block_scalar {
            if indent > i || line.trim().is_empty() {
                continue;
            }
            block_scalar = None;
        }
        let mut pos = indent;
        if flow == 0 && quote.is_none() {
            let content = line[indent..].trim_end();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            while indents.last().is_some_and(|&t| t >= indent) {
                indents.pop();
            }
            indents.push(indent);
            let mut dashes = 0;
            while pos < b.len() && b[pos] == b'-' && (pos + 1 == b.len() || b[pos + 1] == b' ') {
                dashes += 1;
                pos += 1;
                while pos < b.len() && b[pos] == b' ' {
                    pos += 1;
                }
            }
            // Each `- ` is a sequence: the first at this line's level, the others nested.
            base = indents.len() - 1 + dashes;
            if dashes > 0 {
                max = max.max(base);
            }
            // Where the value of this line starts: right here, or after `key: ` (a
            // mapping one level inside); a line of a plain scalar opens nothing.
            let here = &line[pos..];
            let starts_value = |s: &str| s.starts_with(['[', '{', '"', '\'', '|', '>', '!', '&']);
            if !starts_value(here) {
                let Some(colon) = find_key_end(here) else { continue };
                pos += colon + 1;
                while pos < b.len() && b[pos] == b' ' {
                    pos += 1;
                }
                base += 1;
                max = max.max(base);
            }
            // Tags and anchors before the value.
            while pos < b.len() && (b[pos] == b'!' || b[pos] == b'&') {
                while pos < b.len() && b[pos] != b' ' {
                    pos += 1;
                }
                while pos < b.len() && b[pos] == b' ' {
                    pos += 1;
                }
            }
            match b.get(pos) {
                Some(b'|' | b'>') => {
                    block_scalar = Some(indent);
                    continue;
                }
                Some(b'[' | b'{' | b'"' | b'\'') => {}
                _ => continue, // a plain scalar, or nothing: the value is on later lines
            }
        }
        let mut prev = b' ';
        let mut i = pos;
        while i < b.len() {
            let c = b[i];
            if let Some(q) = quote {
                if q == b'"' && c == b'\\' {
                    i += 2;
                    continue;
                }
                if c == q {
                    if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    quote = None;
                }
                prev = c;
                i += 1;
                continue;
            }
            match c {
                b'"' | b'\'' if matches!(prev, b' ' | b'\t' | b'[' | b'{' | b',' | b':') => quote = Some(c),
                b'[' | b'{' => {
                    flow += 1;
                    max = max.max(base + flow);
                    if max > limit {
                        return max;
                    }
                }
                b']' | b'}' => flow = flow.saturating_sub(1),
                b'#' if matches!(prev, b' ' | b'\t') => break,
                _ => {}
            }
            prev = c;
            i += 1;
        }
        if max > limit {
            return max;
        }
    }
    max
}

/// The index of the `:` that ends a block mapping key on this line (followed by a space,
/// a tab or the end of the line), skipping a quoted key.
fn find_key_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    if let Some(&q @ (b'"' | b'\'')) = b.first() {
        i = 1 + s[1..].find(q as char)? + 1;
    }
    while i < b.len() {
        if b[i] == b':' && (i + 1 == b.len() || matches!(b[i + 1], b' ' | b'\t')) {
            return Some(i);
        }
        if b[i] == b'#' && i > 0 && b[i - 1] == b' ' {
            return None;
        }
        i += 1;
    }
    None
}

fn parse_yaml(path: &Path, text: &str, limits: &Limits, out: &mut Loaded) {
    for (i, (line, start, doc)) in split_yaml_documents(text).into_iter().enumerate() {
        let location = DocumentLocation { path: path.to_owned(), document: i + 1, line, item: None };
        if nesting_depth(&doc, limits.max_depth) > limits.max_depth {
            out.errors.push(SourceError::TooDeep { location: Box::new(location), limit: limits.max_depth });
            continue;
        }
        match serde_yaml_ng::from_str::<UniqueKeys>(&doc) {
            Ok(UniqueKeys(value)) => handle_document(value, &location, out),
            Err(e) => out.errors.push(SourceError::Syntax {
                location: Box::new(location),
                format: "YAML",
                message: shift_lines(&e.to_string(), start),
            }),
        }
    }
}

/// A document's value, read so that a mapping with the same key twice is an error (the
/// document is skipped) rather than silently the last value: the API server refuses such
/// JSON too (strict decoding, "duplicate field"), and in a manifest it is most often an
/// edit gone wrong, e.g. two `ports:` of which one would be lost.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor).map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::Deserialize::deserialize(d).map(|UniqueKeys(v)| v)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match object.entry(key) {
                serde_json::map::Entry::Occupied(o) => {
                    return Err(serde::de::Error::custom(format_args!(
                        "duplicate key {:?} in one mapping; remove one of them",
                        o.key()
                    )));
                }
                serde_json::map::Entry::Vacant(v) => {
                    let UniqueKeys(value) = map.next_value()?;
                    v.insert(value);
                }
            }
        }
        Ok(Value::Object(object))
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

/// The version a manifest's object is given in place of its `metadata.resourceVersion`: a
/// digest of the document's content (`content-` and 32 hex digits), so that an object whose
/// text did not change keeps its version (the compiler does not validate it again) and one
/// edited in place gets a new one, whatever `resourceVersion` the file says (an export of
/// `kubectl get -o yaml` keeps the one it was exported with through every hand edit, and
/// the compiler skips an object whose version it already holds).
fn content_version(value: &Value) -> String {
    // The document as JSON text (serde_json's maps are ordered, so equal content is equal
    // text), hashed under two fixed keys: 128 bits, stable for the process's lifetime.
    let text = value.to_string();
    let hash =
        |seed: u64| ahash::RandomState::with_seeds(seed, !seed, seed.rotate_left(17), 0x0074_6f72_6969).hash_one(&text);
    format!("content-{:016x}{:016x}", hash(0x9e37_79b9_7f4a_7c15), hash(0xc2b2_ae3d_27d4_eb4f))
}

fn push_typed<T: serde::de::DeserializeOwned>(
    value: Value,
    location: &DocumentLocation,
    object: String,
    out: &mut Loaded,
    wrap: impl FnOnce(T) -> KubeObject,
) {
    let version = content_version(&value);
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(o) => {
            let mut object = wrap(o);
            object.metadata_mut().resource_version = Some(version);
            out.objects.push(object);
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
        Self::start_with(dir, quiet, Limits::default())
    }

    /// [`DirWatch::start`] with `limits`. Each reload parses only the files that changed
    /// since the previous one ([`FileCache`]).
    ///
    /// # Errors
    /// As [`DirWatch::start`].
    pub fn start_with(dir: impl Into<PathBuf>, quiet: Duration, limits: Limits) -> Result<Self, SourceError> {
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
        let task = tokio::spawn(run_watch(dir, quiet, limits, watcher, ev_rx, tx));
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

async fn reload(dir: &Path, limits: Limits, cache: &mut FileCache) -> Result<Loaded, SourceError> {
    let d = dir.to_owned();
    let mut c = std::mem::take(cache);
    match tokio::task::spawn_blocking(move || {
        let res = load_dir_cached(&d, &limits, &mut c);
        (res, c)
    })
    .await
    {
        Ok((res, c)) => {
            *cache = c;
            res
        }
        Err(e) => Err(SourceError::ReadDir { dir: dir.to_owned(), source: std::io::Error::other(e.to_string()) }),
    }
}

async fn run_watch(
    dir: PathBuf,
    quiet: Duration,
    limits: Limits,
    mut watcher: notify::RecommendedWatcher,
    mut events: mpsc::UnboundedReceiver<notify::Result<Event>>,
    out: mpsc::Sender<Result<Loaded, SourceError>>,
) {
    let mut attached = true;
    let mut first = true;
    let mut cache = FileCache::default();
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
        let res = reload(&dir, limits, &mut cache).await;
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
        // The document's text starts at file line `.1` (its `---`), unpadded.
        assert_eq!(docs[1].1, 9);
        assert_eq!(docs[1].2.lines().nth(10 - 9), Some("apiVersion: discovery.k8s.io/v1"));
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

    /// A manifest edited in place keeps whatever `resourceVersion` it was exported with
    /// (`kubectl get -o yaml`); the incremental compiler skips an object whose version it
    /// already holds, so the files source versions each object by its content instead.
    #[test]
    fn an_edit_that_keeps_the_resource_version_is_seen() {
        use crate::compile::{CompileOptions, Compiler};
        let text = |port: u16| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: demo, resourceVersion: \"7\"}}\n\
                 spec: {{externalIPs: [198.51.100.32], ports: [{{port: {port}}}]}}\n"
            )
        };
        let options = CompileOptions { node_name: "gw".into(), ..Default::default() };
        let mut compiler = Compiler::new(options.clone());
        let ports = |c: &crate::compile::Compiled| c.frontends.iter().map(|f| f.port).collect::<Vec<_>>();
        let (before, after) = (parse("svc.yaml", &text(80)), parse("svc.yaml", &text(81)));
        assert_eq!(ports(compiler.update(&before)), [80]);
        assert_eq!(ports(compiler.update(&after)), [81], "the edit is served");
        assert_eq!(compiler.compiled(), &crate::compile_loaded(&after, &options));
        let version = |l: &Loaded| l.objects[0].metadata().resource_version.clone();
        assert_eq!(version(&before), version(&parse("other.yaml", &text(80))), "the same content, the same version");
        assert_ne!(version(&before), version(&after));
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

#[cfg(test)]
mod limits_tests {
    use std::time::Instant;

    use super::*;

    fn errors(l: &Loaded) -> Vec<String> {
        l.errors.iter().map(ToString::to_string).collect()
    }

    /// `n` small Services in one YAML file, about 130 bytes each.
    fn many_services(n: usize) -> String {
        let mut s = String::with_capacity(n * 140);
        for i in 0..n {
            s.push_str(&format!(
                "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: scale}}\nspec: {{ports: [{{port: 80}}]}}\n"
            ));
        }
        s
    }

    /// Peak resident memory of this process so far, in KiB (`VmHWM`).
    fn peak_rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap_or("VmHWM: 0 kB");
        line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// Issue 17: parsing is linear. 10 × the documents in one file must cost about 10 × the
    /// time (a quadratic parser costs 100 ×), and 100 000 documents in one file must fit
    /// in 500 MB (debug build; this test's own share of the process's peak).
    #[test]
    fn one_file_of_many_documents_parses_in_linear_time_and_bounded_memory() {
        let time = |n: usize| {
            let text = many_services(n);
            let t = Instant::now();
            let mut out = Loaded::default();
            parse_manifests(Path::new("scale.yaml"), &text, &mut out);
            let elapsed = t.elapsed();
            assert_eq!((out.objects.len(), out.errors.len()), (n, 0));
            assert_eq!(out.locations[n - 1].line, 5 * n - 3);
            elapsed
        };
        let before = peak_rss_kib();
        let small = time(10_000);
        let large = time(100_000);
        let grown_mib = peak_rss_kib().saturating_sub(before) / 1024;
        let ratio = large.as_secs_f64() / small.as_secs_f64();
        eprintln!("10 k documents: {small:?}, 100 k: {large:?} (× {ratio:.1}); peak RSS grew {grown_mib} MiB");
        assert!(ratio < 25.0, "100 k documents took {ratio:.1} × the time of 10 k: not linear");
        assert!(grown_mib < 500, "100 k documents took {grown_mib} MiB");
    }

    #[test]
    fn deep_documents_are_refused_at_the_configured_depth_before_parsing() {
        let limits = Limits { max_depth: 20, ..Limits::default() };
        let parse = |text: &str, name: &str| {
            let mut out = Loaded::default();
            parse_manifests_with(Path::new(name), text, &limits, &mut out);
            out
        };
        // 200 000 levels of flow sequences (400 KB): refused at once.
        let deep = format!("a: {}{}\n", "[".repeat(200_000), "]".repeat(200_000));
        let t = Instant::now();
        let out = parse(&deep, "deep.yaml");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(errors(&out), ["deep.yaml:1: document 1: nested more than 20 levels deep; document skipped (no Kubernetes object nests so deep; raise --max-manifest-depth if this one must)"]);
        let out = parse(&format!("{}{}", "[".repeat(200_000), "]".repeat(200_000)), "deep.json");
        assert!(errors(&out)[0].starts_with("deep.json:1: document 1: nested more than 20 levels deep"));

        // Block nesting: 20 levels pass, 21 are refused; the next document is still read.
        let block = |levels: usize| {
            let mut s = String::new();
            for i in 0..levels {
                s.push_str(&format!("{}k{i}:\n", " ".repeat(i)));
            }
            s.push_str(&format!("{}v\n---\napiVersion: v1\nkind: Node\nmetadata: {{name: n}}\n", " ".repeat(levels)));
            s
        };
        let ok = parse(&block(20), "b.yaml");
        assert_eq!(ok.errors.len(), 1, "{:?}", errors(&ok));
        assert!(errors(&ok)[0].contains("kind: missing"), "parsed: {:?}", errors(&ok));
        let refused = parse(&block(21), "b.yaml");
        assert_eq!(errors(&refused).len(), 1, "{:?}", errors(&refused));
        assert!(errors(&refused)[0].starts_with("b.yaml:1: document 1: nested more than 20 levels deep"));
        assert_eq!(refused.objects.len(), 1, "the next document is served");
        // Compact sequences and flow collections add up.
        assert_eq!(nesting_depth("- - - [[a]]\n", 100), 5);
        assert_eq!(nesting_depth("a: {b: [1, {c: d}]}\n", 100), 4);
        // Brackets in plain and quoted scalars, comments and block scalars do not count.
        let scalars = "a: echo [x\nb: \"[[[[\"\nc: '{{{{'\nd: x # [[[[\ne: |\n  [[[[[[\n    {{{{{\nf: it's [\n";
        assert_eq!(nesting_depth(scalars, 100), 1);
    }

    #[test]
    fn duplicate_keys_skip_the_document() {
        let mut out = Loaded::default();
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: a}\nmetadata: {name: b}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: c}\n";
        parse_manifests(Path::new("d.yaml"), text, &mut out);
        assert_eq!(out.objects.len(), 1);
        let e = errors(&out);
        assert!(
            e[0].starts_with("d.yaml:1: document 1: not valid YAML: duplicate key \"metadata\" in one mapping"),
            "{e:?}"
        );
        let mut out = Loaded::default();
        parse_manifests(Path::new("d.json"), r#"{"kind": "Node", "kind": "Service"}"#, &mut out);
        assert!(errors(&out)[0].contains("duplicate key \"kind\""), "{:?}", errors(&out));
    }

    #[test]
    fn a_real_object_with_managed_fields_is_within_the_default_depth() {
        let text = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  managedFields:
  - apiVersion: v1
    fieldsType: FieldsV1
    fieldsV1:
      f:spec:
        f:ports:
          .: {}
          k:{"port":80,"protocol":"TCP"}:
            .: {}
            f:name: {}
spec:
  ports: [{name: http, port: 80}]
"#;
        assert!(nesting_depth(text, DEFAULT_MAX_DEPTH) < 12, "{}", nesting_depth(text, 100));
        let mut out = Loaded::default();
        parse_manifests(Path::new("web.yaml"), text, &mut out);
        assert!(out.errors.is_empty(), "{:?}", errors(&out));
    }

    #[test]
    fn large_files_are_skipped_unread_and_only_changed_files_are_parsed_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let node = |n: &str| format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {n}}}\n");
        std::fs::write(p.join("a.yaml"), node("a")).unwrap();
        std::fs::write(p.join("b.yaml"), node("b")).unwrap();
        std::fs::write(p.join("big.yaml"), "#".repeat(2000)).unwrap();
        let limits = Limits { max_file_bytes: 1000, ..Limits::default() };
        let mut cache = FileCache::default();
        let l = load_dir_cached(p, &limits, &mut cache).unwrap();
        assert_eq!(l.objects.len(), 2);
        assert_eq!(
            errors(&l),
            [format!(
                "{}: 2000 bytes, more than the limit of 1000 bytes per manifests file; file skipped (split it, or \
                 raise --max-manifest-bytes)",
                p.join("big.yaml").display()
            )]
        );
        assert_eq!(cache.parsed_files(), 2);
        std::fs::write(p.join("b.yaml"), node("b2")).unwrap();
        let l = load_dir_cached(p, &limits, &mut cache).unwrap();
        assert_eq!(cache.parsed_files(), 3, "only b.yaml again");
        let names: Vec<String> = l.objects.iter().map(|o| o.object_ref().to_string()).collect();
        assert_eq!(names, ["Node a", "Node b2"]);
        std::fs::remove_file(p.join("a.yaml")).unwrap();
        let l = load_dir_cached(p, &limits, &mut cache).unwrap();
        assert_eq!((l.objects.len(), cache.parsed_files()), (1, 3));
    }

    #[test]
    fn a_duplicate_in_an_earlier_file_is_reported_with_both_places() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let svc = |ip: &str| {
            format!("apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: demo}}\nspec: {{externalIPs: [{ip}]}}\n")
        };
        std::fs::write(p.join("web.yaml"), svc("192.0.2.1")).unwrap();
        std::fs::write(p.join("00-evil.yaml"), format!("---\n{}", svc("192.0.2.66"))).unwrap();
        let l = load_dir(p).unwrap();
        assert_eq!(l.objects.len(), 1);
        assert_eq!(l.locations[0].path, p.join("00-evil.yaml"), "the first in file-name order is served");
        assert_eq!(
            errors(&l),
            [format!(
                "{d}/web.yaml:1: document 1: Service demo/web: also defined at {d}/00-evil.yaml:2: document 1, \
                 which is served (the first definition in file-name and document order); this definition skipped",
                d = p.display()
            )]
        );
    }
}
