//! The double's state: the objects of each resource, the resourceVersion counter (etcd's
//! revision: one counter for every kind), the event history a watch replays from (the
//! API server's watch cache) and the open watches. Everything here is synchronous and
//! sits behind one mutex; [`crate::http`] turns it into HTTP.
//!
//! What it copies from kube-apiserver v1.28 (see `fixtures/README.md`):
//! - lists sorted by namespace/name, items without `kind`/`apiVersion`, list
//!   `metadata.resourceVersion` the current revision; `limit`/`continue` paging with
//!   `remainingItemCount`, no `continue` when nothing remains; `limit` ignored for
//!   `resourceVersion=0` (served from the watch cache);
//! - watches: one JSON event per line; from `resourceVersion=0` (or none) synthetic
//!   `ADDED` events for the current state first; from an RV inside the watch-cache
//!   window the events after it are replayed; from an RV older than the window, one
//!   `ERROR` event (Status 410 `Expired`, "too old resource version: N (M)") and the end
//!   of the stream;
//! - selectors applied per watcher, so an object that stops matching is `DELETED` for
//!   that watcher and one that starts matching is `ADDED`;
//! - `BOOKMARK` events that carry only the resourceVersion, sent only when that RV is
//!   newer than the last one the watcher got, for watches that asked for them.

use std::collections::BTreeMap;
use std::time::SystemTime;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::selector::{FieldSelector, LabelSelector};
use crate::Resource;

/// What a watch response body carries next.
#[derive(Debug)]
pub enum Frame {
    /// One event line (JSON and `\n`).
    Data(Bytes),
    /// The server ends the response cleanly (as at `timeoutSeconds`).
    End,
    /// The connection is cut mid-stream: the chunked body never terminates.
    Abort,
}

/// Which objects a list or watch covers: the namespace of the URL, and the selectors.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// `/namespaces/<ns>/…` requests see only that namespace.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
}

impl Selection {
    fn matches(&self, object: &Value) -> bool {
        let ns_ok = self
            .namespace
            .as_deref()
            .is_none_or(|ns| object.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns));
        ns_ok && self.labels.matches(object) && self.fields.matches(object)
    }
}

/// A Kubernetes `Status` object (`kind: Status`, `status: Failure`), as every error
/// response and `ERROR` watch event carries.
pub fn status(code: u16, reason: Option<&str>, message: &str, details: Option<Value>) -> Value {
    let mut s = Map::new();
    s.insert("kind".into(), "Status".into());
    s.insert("apiVersion".into(), "v1".into());
    s.insert("metadata".into(), json!({}));
    s.insert("status".into(), "Failure".into());
    s.insert("message".into(), message.into());
    if let Some(r) = reason {
        s.insert("reason".into(), r.into());
    }
    if let Some(d) = details {
        s.insert("details".into(), d);
    }
    s.insert("code".into(), code.into());
    Value::Object(s)
}

/// An error response: HTTP status code and `Status` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// The `Status` object.
    pub body: Value,
}

impl ApiError {
    fn new(code: u16, reason: Option<&str>, message: &str) -> Self {
        Self { code, body: status(code, reason, message, None) }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug)]
struct Entry {
    rv: u64,
    kind: EventType,
    /// The object before a modification (for selector transitions).
    old: Option<Value>,
    /// The object after the change; for a deletion, its last state with the deletion's RV.
    new: Value,
}

impl Entry {
    /// The event a watcher with `sel` sees for this change, if any.
    fn event_for(&self, sel: &Selection) -> Option<(&'static str, &Value)> {
        let new_matches = sel.matches(&self.new);
        match self.kind {
            EventType::Added => new_matches.then_some(("ADDED", &self.new)),
            EventType::Deleted => new_matches.then_some(("DELETED", &self.new)),
            EventType::Modified => {
                let old_matches = self.old.as_ref().is_some_and(|o| sel.matches(o));
                match (old_matches, new_matches) {
                    (true, true) => Some(("MODIFIED", &self.new)),
                    (false, true) => Some(("ADDED", &self.new)),
                    (true, false) => Some(("DELETED", &self.new)),
                    (false, false) => None,
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct ResourceState {
    /// Current objects by (namespace, name); `kind` and `apiVersion` included.
    objects: BTreeMap<(String, String), Value>,
    /// Changes after `window_start`, oldest first.
    history: Vec<Entry>,
    /// Watches from an RV older than this get 410 Gone.
    window_start: u64,
    /// The newest RV of this resource type (what a bookmark carries).
    last_rv: u64,
}

#[derive(Debug)]
struct Watch {
    id: u64,
    resource: Resource,
    selection: Selection,
    bookmarks: bool,
    tx: UnboundedSender<Frame>,
    /// The RV of the last event or bookmark this watcher got (or started from).
    last_rv: u64,
}

/// A watch request after parsing.
#[derive(Debug)]
pub struct WatchRequest {
    /// Which objects.
    pub selection: Selection,
    /// `resourceVersion`, as given.
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
}

/// A list request after parsing.
#[derive(Debug, Default)]
pub struct ListRequest {
    /// Which objects.
    pub selection: Selection,
    /// `limit`.
    pub limit: Option<usize>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
}

/// The state of the whole double.
#[derive(Debug, Default)]
pub struct Store {
    rv: u64,
    resources: BTreeMap<Resource, ResourceState>,
    watches: Vec<Watch>,
    next_watch_id: u64,
    next_uid: u64,
    requests: Vec<String>,
    failures: BTreeMap<Resource, u16>,
}

fn rv_of(object: &Value) -> Option<u64> {
    object.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok())
}

fn key_of(resource: Resource, object: &Value) -> Result<(String, String), String> {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| format!("{}: metadata.name: Required value: name is required", resource.kind()))?;
    let namespace = if resource.namespaced() {
        object.pointer("/metadata/namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or("default")
    } else {
        ""
    };
    Ok((namespace.to_owned(), name.to_owned()))
}

/// Puts the path's namespace into a namespaced object sent to it.
fn set_namespace(resource: Resource, object: &mut Value, namespace: &str) {
    if let Some(meta) = object.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({}))) {
        if let (true, Some(meta)) = (resource.namespaced(), meta.as_object_mut()) {
            meta.insert("namespace".into(), namespace.into());
        }
    }
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).expect("JSON values serialise");
    line.push(b'\n');
    Bytes::from(line)
}

/// A BOOKMARK event as kube-apiserver 1.28 writes it: the type's empty shape with only
/// `metadata.resourceVersion` (see the fixtures' README).
pub fn bookmark_line(resource: Resource, rv: u64) -> Bytes {
    let meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    let object = match resource {
        Resource::Services => {
            json!({"kind": "Service", "apiVersion": "v1", "metadata": meta, "spec": {}, "status": {"loadBalancer": {}}})
        }
        Resource::EndpointSlices => {
            json!({"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1", "metadata": meta,
            "addressType": "", "endpoints": null, "ports": null})
        }
        Resource::Nodes => json!({"kind": "Node", "apiVersion": "v1", "metadata": meta, "spec": {},
            "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}, "nodeInfo": {"machineID": "", "systemUUID": "",
            "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
            "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""}}}),
        Resource::Leases => {
            json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": meta, "spec": {}})
        }
    };
    event_line("BOOKMARK", &object)
}

fn gone_line(requested: u64, oldest: u64) -> Bytes {
    let status = status(410, Some("Expired"), &format!("too old resource version: {requested} ({oldest})"), None);
    event_line("ERROR", &status)
}

/// RFC 3339 UTC timestamp with seconds, as `metadata.creationTimestamp` is written.
fn timestamp_seconds(t: SystemTime) -> String {
    let mut s = crate::rfc3339(t);
    if let Some(dot) = s.find('.') {
        s.replace_range(dot..s.len() - 1, "");
    }
    s
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

impl Store {
    /// The current revision.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    fn res(&mut self, r: Resource) -> &mut ResourceState {
        self.resources.entry(r).or_default()
    }

    /// Adds an object to the initial state, without an event. An object with a numeric
    /// `metadata.resourceVersion` keeps it; others get the next revision.
    ///
    /// # Errors
    /// When the object is not a Service, EndpointSlice or Node, or has no name.
    pub fn insert_initial(&mut self, mut object: Value) -> Result<(), String> {
        let resource = Resource::of_object(&object)?;
        let key = key_of(resource, &object)?;
        let rv = match rv_of(&object) {
            Some(rv) => {
                self.rv = self.rv.max(rv);
                rv
            }
            None => {
                self.rv += 1;
                self.rv
            }
        };
        self.fill_metadata(resource, &mut object, &key, None, rv);
        let state = self.res(resource);
        state.last_rv = state.last_rv.max(rv);
        state.objects.insert(key, object);
        Ok(())
    }

    /// Ends the initial load: the revision is at least `list_rv`, and the watch cache
    /// window starts here (watches from older RVs get 410 Gone).
    pub fn seal_initial(&mut self, list_rv: u64) {
        self.rv = self.rv.max(list_rv);
        let rv = self.rv;
        for r in Resource::ALL {
            self.res(r).window_start = rv;
        }
    }

    fn fill_metadata(
        &mut self,
        resource: Resource,
        object: &mut Value,
        key: &(String, String),
        old: Option<&Value>,
        rv: u64,
    ) {
        let Value::Object(map) = object else { return };
        map.insert("kind".into(), resource.kind().into());
        map.insert("apiVersion".into(), resource.api_version().into());
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        let Value::Object(meta) = meta else { return };
        if resource.namespaced() {
            meta.insert("namespace".into(), key.0.clone().into());
        } else {
            meta.remove("namespace");
        }
        meta.insert("resourceVersion".into(), rv.to_string().into());
        let old_meta = old.and_then(|o| o.get("metadata"));
        for field in ["uid", "creationTimestamp"] {
            if let Some(v) = old_meta.and_then(|m| m.get(field)) {
                meta.insert(field.into(), v.clone());
            }
        }
        if !meta.contains_key("uid") {
            self.next_uid += 1;
            meta.insert("uid".into(), format!("00000000-0000-4000-8000-{:012x}", self.next_uid).into());
        }
        if !meta.get("creationTimestamp").is_some_and(Value::is_string) {
            meta.insert("creationTimestamp".into(), timestamp_seconds(SystemTime::now()).into());
        }
    }

    /// Creates or replaces an object (`ADDED` or `MODIFIED`), at the next revision.
    /// Open watches get the event unless `announce` is false (as if it were lost: only a
    /// new watch from an older RV, or a relist, sees the change).
    ///
    /// # Errors
    /// When the object is not a Service, EndpointSlice or Node, or has no name.
    pub fn apply(&mut self, mut object: Value, announce: bool) -> Result<u64, String> {
        let resource = Resource::of_object(&object)?;
        let key = key_of(resource, &object)?;
        self.rv += 1;
        let rv = self.rv;
        let old = self.res(resource).objects.get(&key).cloned();
        self.fill_metadata(resource, &mut object, &key, old.as_ref(), rv);
        let kind = if old.is_some() { EventType::Modified } else { EventType::Added };
        let state = self.res(resource);
        state.objects.insert(key, object.clone());
        state.last_rv = rv;
        state.history.push(Entry { rv, kind, old, new: object });
        if announce {
            self.dispatch(resource);
        }
        Ok(rv)
    }

    /// Deletes an object (`DELETED`, carrying its last state at the deletion's revision).
    ///
    /// # Errors
    /// When there is no such object.
    pub fn delete(&mut self, resource: Resource, namespace: &str, name: &str, announce: bool) -> Result<u64, String> {
        let namespace = if resource.namespaced() { namespace } else { "" };
        let key = (namespace.to_owned(), name.to_owned());
        let Some(mut last) = self.res(resource).objects.remove(&key) else {
            return Err(format!("{} \"{name}\" not found", resource.plural()));
        };
        self.rv += 1;
        let rv = self.rv;
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), rv.to_string().into());
        }
        let state = self.res(resource);
        state.last_rv = rv;
        state.history.push(Entry { rv, kind: EventType::Deleted, old: None, new: last });
        if announce {
            self.dispatch(resource);
        }
        Ok(rv)
    }

    /// Sends the newest history entry of `resource` to its open watches.
    fn dispatch(&mut self, resource: Resource) {
        let Some(entry) = self.resources.get(&resource).and_then(|s| s.history.last()) else { return };
        self.watches.retain_mut(|w| {
            if w.resource != resource {
                return true;
            }
            match entry.event_for(&w.selection) {
                Some((kind, object)) => {
                    w.last_rv = entry.rv;
                    w.tx.send(Frame::Data(event_line(kind, object))).is_ok()
                }
                None => !w.tx.is_closed(),
            }
        });
    }

    /// Creates an object sent with POST (`kubectl create`): `201` and the stored object, or
    /// `409 AlreadyExists` when the name is taken, as kube-apiserver answers. The namespace
    /// is the path's.
    ///
    /// # Errors
    /// The `Status` kube-apiserver would send: 409 AlreadyExists, 400 for an object of
    /// another kind or without a name.
    pub fn create(&mut self, resource: Resource, namespace: &str, mut object: Value) -> Result<Value, ApiError> {
        set_namespace(resource, &mut object, namespace);
        let key = key_of(resource, &object).map_err(|e| ApiError::new(400, Some("BadRequest"), &e))?;
        if self.get(resource, &key.0, &key.1).is_some() {
            let name = &key.1;
            return Err(ApiError {
                code: 409,
                body: status(
                    409,
                    Some("AlreadyExists"),
                    &format!("{}.{} \"{name}\" already exists", resource.plural(), resource.group()),
                    Some(json!({"name": name, "group": resource.group(), "kind": resource.plural()})),
                ),
            });
        }
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            // The server assigns these; a client's values are ignored (a create is never
            // conditional).
            meta.remove("resourceVersion");
            meta.remove("uid");
        }
        self.checked_apply(resource, object)
    }

    /// Replaces an object sent with PUT (an update): with `metadata.resourceVersion` set,
    /// only if it is the stored object's (optimistic concurrency, as etcd's
    /// compare-and-swap in kube-apiserver), else `409 Conflict`; without one,
    /// unconditionally. A missing object is `404 NotFound` (Leases do not create on
    /// update).
    ///
    /// # Errors
    /// The `Status` kube-apiserver would send: 404 NotFound, 409 Conflict, 400 when the
    /// body's name is not the path's.
    pub fn replace(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        mut object: Value,
    ) -> Result<Value, ApiError> {
        set_namespace(resource, &mut object, namespace);
        let key = key_of(resource, &object).map_err(|e| ApiError::new(400, Some("BadRequest"), &e))?;
        let qualified = format!("{}.{}", resource.plural(), resource.group());
        if key.1 != name {
            return Err(ApiError::new(
                400,
                Some("BadRequest"),
                &format!("the name of the object ({}) does not match the name on the URL ({name})", key.1),
            ));
        }
        let details = || Some(json!({"name": name, "group": resource.group(), "kind": resource.plural()}));
        let Some(stored) = self.get(resource, &key.0, name) else {
            return Err(ApiError {
                code: 404,
                body: status(404, Some("NotFound"), &format!("{qualified} \"{name}\" not found"), details()),
            });
        };
        let sent = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|s| !s.is_empty());
        if sent.is_some_and(|rv| Some(rv) != stored.pointer("/metadata/resourceVersion").and_then(Value::as_str)) {
            return Err(ApiError {
                code: 409,
                body: status(
                    409,
                    Some("Conflict"),
                    &format!(
                        "Operation cannot be fulfilled on {qualified} \"{name}\": the object has been modified; \
                         please apply your changes to the latest version and try again"
                    ),
                    details(),
                ),
            });
        }
        self.checked_apply(resource, object)
    }

    fn checked_apply(&mut self, resource: Resource, object: Value) -> Result<Value, ApiError> {
        let key = key_of(resource, &object).map_err(|e| ApiError::new(400, Some("BadRequest"), &e))?;
        self.apply(object, true).map_err(|e| ApiError::new(400, Some("BadRequest"), &e))?;
        self.get(resource, &key.0, &key.1).ok_or_else(|| ApiError::new(500, None, "the object vanished"))
    }

    /// The object, if it exists.
    pub fn get(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        let namespace = if resource.namespaced() { namespace } else { "" };
        self.resources.get(&resource)?.objects.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// Every object of `resource`, sorted by namespace/name.
    pub fn objects(&self, resource: Resource) -> Vec<Value> {
        self.resources.get(&resource).map(|s| s.objects.values().cloned().collect()).unwrap_or_default()
    }

    /// A list response.
    ///
    /// # Errors
    /// 410 for `resourceVersionMatch=Exact` at a revision the double no longer has, or a
    /// continue token that is not one of ours; 400 for a malformed limit.
    pub fn list(&self, resource: Resource, req: &ListRequest) -> Result<Value, ApiError> {
        let rv_param = req.resource_version.as_deref().filter(|s| !s.is_empty());
        let mut list_rv = self.rv;
        if let Some(rv) = rv_param {
            let n: u64 = rv.parse().map_err(|_| {
                ApiError::new(400, Some("BadRequest"), &format!("resourceVersion: Invalid value: {rv:?}"))
            })?;
            if req.resource_version_match.as_deref() == Some("Exact") && n != self.rv {
                return Err(ApiError::new(
                    410,
                    Some("Expired"),
                    "The resourceVersion for the provided list is too old.",
                ));
            }
        }
        // kube-apiserver serves resourceVersion=0 from its watch cache, which ignores limit.
        let limit = if rv_param == Some("0") { None } else { req.limit.filter(|&l| l > 0) };
        let mut after: Option<(String, String)> = None;
        if let Some(token) = req.continue_token.as_deref().filter(|t| !t.is_empty()) {
            let decoded = unhex(token).and_then(|t| {
                let mut parts = t.splitn(3, '/');
                Some((parts.next()?.parse::<u64>().ok()?, parts.next()?.to_owned(), parts.next()?.to_owned()))
            });
            let Some((rv, ns, name)) = decoded else {
                return Err(ApiError::new(
                    410,
                    Some("Expired"),
                    "The provided continue parameter is too old to display a consistent list result.",
                ));
            };
            list_rv = rv;
            after = Some((ns, name));
        }
        let empty = ResourceState::default();
        let state = self.resources.get(&resource).unwrap_or(&empty);
        let mut items = Vec::new();
        let mut remaining = 0usize;
        let mut last_key = None;
        for (key, object) in &state.objects {
            if after.as_ref().is_some_and(|a| key <= a) || !req.selection.matches(object) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                remaining += 1;
                continue;
            }
            let mut item = object.clone();
            if let Value::Object(m) = &mut item {
                m.remove("kind");
                m.remove("apiVersion");
            }
            items.push(item);
            last_key = Some(key.clone());
        }
        let mut metadata = Map::new();
        metadata.insert("resourceVersion".into(), list_rv.to_string().into());
        if remaining > 0 {
            let (ns, name) = last_key.unwrap_or_default();
            metadata.insert("continue".into(), hex(&format!("{list_rv}/{ns}/{name}")).into());
            metadata.insert("remainingItemCount".into(), remaining.into());
        }
        Ok(json!({
            "kind": format!("{}List", resource.kind()),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Starts a watch: `tx` gets the replayed (or synthetic `ADDED`) events at once, under
    /// the lock so that no live event overtakes them, then the live events. Returns the
    /// watch's id, or `None` when the stream already ended (410 Gone).
    ///
    /// # Errors
    /// 500 for a resourceVersion that is not a number (as kube-apiserver answers).
    pub fn watch(
        &mut self,
        resource: Resource,
        req: WatchRequest,
        tx: UnboundedSender<Frame>,
    ) -> Result<Option<u64>, ApiError> {
        let state = self.resources.entry(resource).or_default();
        let mut initial = Vec::new();
        let start = match req.resource_version.as_deref().filter(|s| !s.is_empty() && *s != "0") {
            None => {
                for object in state.objects.values().filter(|o| req.selection.matches(o)) {
                    initial.push(event_line("ADDED", object));
                }
                state.last_rv
            }
            Some(rv) => {
                let n: u64 = rv.parse().map_err(|_| ApiError {
                    code: 500,
                    body: status(
                        500,
                        None,
                        &format!(
                            "resourceVersion: Invalid value: {rv:?}: strconv.ParseUint: parsing {rv:?}: invalid syntax"
                        ),
                        None,
                    ),
                })?;
                if n < state.window_start {
                    let _ = tx.send(Frame::Data(gone_line(n, state.window_start + 1)));
                    let _ = tx.send(Frame::End);
                    return Ok(None);
                }
                let mut last = n;
                for entry in state.history.iter().filter(|e| e.rv > n) {
                    if let Some((kind, object)) = entry.event_for(&req.selection) {
                        initial.push(event_line(kind, object));
                        last = entry.rv;
                    }
                }
                last
            }
        };
        for line in initial {
            let _ = tx.send(Frame::Data(line));
        }
        self.next_watch_id += 1;
        let id = self.next_watch_id;
        self.watches.push(Watch {
            id,
            resource,
            selection: req.selection,
            bookmarks: req.bookmarks,
            tx,
            last_rv: start,
        });
        Ok(Some(id))
    }

    fn send_bookmark(resources: &BTreeMap<Resource, ResourceState>, w: &mut Watch) -> (bool, bool) {
        let rv = resources.get(&w.resource).map_or(0, |s| s.last_rv);
        if !w.bookmarks || rv <= w.last_rv {
            return (false, !w.tx.is_closed());
        }
        w.last_rv = rv;
        let alive = w.tx.send(Frame::Data(bookmark_line(w.resource, rv))).is_ok();
        (alive, alive)
    }

    /// Sends a BOOKMARK with the newest RV of `resource` to each of its watches that
    /// asked for bookmarks and has not seen that RV yet. Returns how many were sent.
    pub fn bookmark(&mut self, resource: Option<Resource>) -> usize {
        let mut sent = 0;
        let resources = &self.resources;
        self.watches.retain_mut(|w| {
            if resource.is_some_and(|r| r != w.resource) {
                return true;
            }
            let (was_sent, alive) = Self::send_bookmark(resources, w);
            sent += usize::from(was_sent);
            alive
        });
        sent
    }

    /// The periodic bookmark of one watch (same rule as [`Store::bookmark`]).
    pub fn auto_bookmark(&mut self, id: u64) {
        let resources = &self.resources;
        self.watches.retain_mut(|w| if w.id == id { Self::send_bookmark(resources, w).1 } else { true });
    }

    fn finish(&mut self, resource: Option<Resource>, id: Option<u64>, frames: impl Fn(&Watch) -> Vec<Frame>) -> usize {
        let mut n = 0;
        self.watches.retain(|w| {
            let selected = resource.is_none_or(|r| r == w.resource) && id.is_none_or(|i| i == w.id);
            if selected {
                // Counted before sending: the server thread may close it right after.
                n += usize::from(!w.tx.is_closed());
                for f in frames(w) {
                    let _ = w.tx.send(f);
                }
            }
            !selected
        });
        n
    }

    /// Ends one watch cleanly (its `timeoutSeconds` ran out).
    pub fn end_watch(&mut self, id: u64) {
        self.finish(None, Some(id), |_| vec![Frame::End]);
    }

    /// Ends the open watches cleanly, as the server does at `timeoutSeconds`. Returns how many.
    pub fn end_watches(&mut self, resource: Option<Resource>) -> usize {
        self.finish(resource, None, |_| vec![Frame::End])
    }

    /// Cuts the open watches' connections mid-stream. Returns how many.
    pub fn drop_watches(&mut self, resource: Option<Resource>) -> usize {
        self.finish(resource, None, |_| vec![Frame::Abort])
    }

    /// "410 Gone": the watch cache of `resource` (every resource for `None`) now starts
    /// at the current revision, as after an API server restart. Each open watch gets an
    /// `ERROR` event with a Status 410 `Expired` and the end of its stream; a watch from
    /// an older RV gets the same. Returns how many watches were ended.
    pub fn expire(&mut self, resource: Option<Resource>) -> usize {
        let rv = self.rv;
        for r in Resource::ALL.into_iter().filter(|r| resource.is_none_or(|x| x == *r)) {
            let state = self.res(r);
            state.window_start = rv;
            state.history.clear();
        }
        self.finish(resource, None, |w| vec![Frame::Data(gone_line(w.last_rv, rv + 1)), Frame::End])
    }

    /// Sends `line` (a newline is added) as it is to the open watches of `resource`.
    pub fn push_raw(&mut self, resource: Option<Resource>, line: &str) -> usize {
        let mut bytes = line.trim_end_matches('\n').as_bytes().to_vec();
        bytes.push(b'\n');
        let bytes = Bytes::from(bytes);
        let mut n = 0;
        self.watches.retain(|w| {
            if resource.is_some_and(|r| r != w.resource) {
                return true;
            }
            let alive = w.tx.send(Frame::Data(bytes.clone())).is_ok();
            n += usize::from(alive);
            alive
        });
        n
    }

    /// How many watches of `resource` (of every resource for `None`) are open.
    pub fn watch_count(&self, resource: Option<Resource>) -> usize {
        self.watches.iter().filter(|w| resource.is_none_or(|r| r == w.resource) && !w.tx.is_closed()).count()
    }

    /// Records a request (`GET /api/v1/services?watch=true&…`) for [`Store::requests`].
    pub fn log_request(&mut self, line: String) {
        self.requests.push(line);
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.clone()
    }

    /// Makes lists and watches of `resource` fail with `code` (403, 500, …), or succeed again.
    pub fn set_failure(&mut self, resource: Resource, code: Option<u16>) {
        match code {
            Some(c) => self.failures.insert(resource, c),
            None => self.failures.remove(&resource),
        };
    }

    /// The failure injected for `resource`, as an error response.
    pub fn failure(&self, resource: Resource, verb: &str) -> Option<ApiError> {
        let code = *self.failures.get(&resource)?;
        let plural = resource.plural();
        let group = resource.group();
        let (reason, message) = match code {
            401 => (Some("Unauthorized"), "Unauthorized".to_owned()),
            403 => (
                Some("Forbidden"),
                format!(
                    "{plural} is forbidden: User \"system:serviceaccount:torii:torii-control\" cannot {verb} resource \"{plural}\" in API group \"{group}\" at the cluster scope"
                ),
            ),
            429 => (Some("TooManyRequests"), "Too many requests, please try again later.".to_owned()),
            503 => (Some("ServiceUnavailable"), "the server is currently unable to handle the request".to_owned()),
            _ => (Some("InternalError"), format!("Internal error occurred: injected failure {code}")),
        };
        // As kube-apiserver: an empty (core) group is left out.
        let details = (code == 403).then(|| {
            if group.is_empty() {
                json!({"kind": plural})
            } else {
                json!({"group": group, "kind": plural})
            }
        });
        Some(ApiError { code, body: status(code, reason, &message, details) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn svc(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "demo", "labels": labels},
               "spec": {"ports": [{"port": 80}]}})
    }

    fn drain(rx: &mut UnboundedReceiver<Frame>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(f) = rx.try_recv() {
            out.push(match f {
                Frame::Data(b) => {
                    let v: Value = serde_json::from_slice(&b).unwrap();
                    let name = v.pointer("/object/metadata/name").and_then(Value::as_str).unwrap_or("");
                    let rv = v.pointer("/object/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("");
                    let code = v.pointer("/object/code").map(ToString::to_string).unwrap_or_default();
                    format!("{} {name} {rv}{code}", v["type"].as_str().unwrap())
                }
                Frame::End => "END".into(),
                Frame::Abort => "ABORT".into(),
            });
        }
        out
    }

    fn watch_req(rv: &str, labels: &str) -> WatchRequest {
        WatchRequest {
            selection: Selection { labels: LabelSelector::parse(labels).unwrap(), ..Selection::default() },
            resource_version: Some(rv.into()),
            bookmarks: true,
        }
    }

    #[test]
    fn replay_live_events_and_selector_transitions() {
        let mut s = Store::default();
        s.insert_initial(svc("a", json!({"app": "x"}))).unwrap();
        s.seal_initial(10);
        assert_eq!(s.resource_version(), 10);
        s.apply(svc("b", json!({"app": "x"})), true).unwrap(); // 11
        let (tx, mut rx) = unbounded_channel();
        let id = s.watch(Resource::Services, watch_req("10", "app=x"), tx).unwrap();
        assert!(id.is_some());
        s.apply(svc("b", json!({"app": "y"})), true).unwrap(); // 12: leaves the selection
        s.apply(svc("b", json!({"app": "x"})), true).unwrap(); // 13: back
        s.delete(Resource::Services, "demo", "a", true).unwrap(); // 14
        s.apply(svc("c", json!({"app": "z"})), true).unwrap(); // 15: never matches
        assert_eq!(drain(&mut rx), ["ADDED b 11", "DELETED b 12", "ADDED b 13", "DELETED a 14"]);
        assert_eq!(s.bookmark(Some(Resource::Services)), 1, "RV 15 is newer than 14");
        assert_eq!(drain(&mut rx), ["BOOKMARK  15"]);
        assert_eq!(s.bookmark(Some(Resource::Services)), 0, "nothing newer");
    }

    #[test]
    fn too_old_and_expire_give_410() {
        let mut s = Store::default();
        s.insert_initial(svc("a", json!({}))).unwrap();
        s.seal_initial(529);
        let (tx, mut rx) = unbounded_channel();
        let id = s.watch(Resource::Services, watch_req("1", ""), tx).unwrap();
        assert!(id.is_none());
        let Ok(Frame::Data(line)) = rx.try_recv() else { panic!("no ERROR event") };
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["object"]["message"], "too old resource version: 1 (530)");
        // What kube-apiserver 1.28 sent (fixtures/watch-services-rv1-gone.jsonl), but for
        // the numbers (and the order of keys: serde_json sorts them).
        let recorded = include_str!("../fixtures/watch-services-rv1-gone.jsonl").replace("(576)", "(530)");
        assert_eq!(v, serde_json::from_str::<Value>(&recorded).unwrap());
        assert!(line.ends_with(b"}\n"), "one event per line");
        assert!(matches!(rx.try_recv(), Ok(Frame::End)));

        let (tx, mut rx) = unbounded_channel();
        s.watch(Resource::Services, watch_req("529", ""), tx).unwrap();
        s.apply(svc("b", json!({})), true).unwrap();
        assert_eq!(s.expire(Some(Resource::Services)), 1);
        assert_eq!(drain(&mut rx), ["ADDED b 530", "ERROR  410", "END"]);
        let (tx, _rx) = unbounded_channel();
        let id = s.watch(Resource::Services, watch_req("530", ""), tx).unwrap();
        assert!(id.is_some(), "the current RV is inside the new window");
    }

    #[test]
    fn lists_page_and_strip_kind() {
        let mut s = Store::default();
        for n in ["c", "a", "b"] {
            s.insert_initial(svc(n, json!({}))).unwrap();
        }
        s.seal_initial(0);
        let page1 = s.list(Resource::Services, &ListRequest { limit: Some(2), ..ListRequest::default() }).unwrap();
        let names = |l: &Value| -> Vec<String> {
            l["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect()
        };
        assert_eq!(names(&page1), ["a", "b"]);
        assert_eq!(page1["metadata"]["remainingItemCount"], 1);
        assert!(page1["items"][0].get("kind").is_none());
        let token = page1["metadata"]["continue"].as_str().unwrap().to_owned();
        let page2 = s
            .list(
                Resource::Services,
                &ListRequest { limit: Some(2), continue_token: Some(token), ..ListRequest::default() },
            )
            .unwrap();
        assert_eq!(names(&page2), ["c"]);
        assert!(page2["metadata"].get("continue").is_none());
        let all = s
            .list(
                Resource::Services,
                &ListRequest { limit: Some(1), resource_version: Some("0".into()), ..ListRequest::default() },
            )
            .unwrap();
        assert_eq!(names(&all).len(), 3, "limit is ignored for resourceVersion=0");
    }
}
