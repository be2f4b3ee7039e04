//! torii-kube-double: a test double of the Kubernetes API server for Services,
//! `discovery.k8s.io/v1` EndpointSlices and Nodes, built from responses recorded from a
//! real kube-apiserver v1.28 (`fixtures/`, copied from `shared/fixtures/kube-api`; its
//! README says how they were made and what a mock should copy).
//!
//! It speaks the real protocol over real HTTP/1.1 on 127.0.0.1, so kube-rs talks to it
//! exactly as to a cluster (through a kubeconfig with an `http://` server):
//! discovery (`/version`, `/api`, `/apis`, …, served from the recordings), lists with
//! selectors, `limit`/`continue` paging and `resourceVersion`s, single-object GETs, and
//! watches as chunked streams of JSON events (`ADDED`/`MODIFIED`/`DELETED`, `BOOKMARK`
//! with `allowWatchBookmarks`, `ERROR` 410 for an expired resourceVersion), replayed from
//! a watch cache. See [`store`] for the exact semantics.
//!
//! A test starts it with an initial set of objects ([`Objects`]: the recorded lists,
//! manifests, or anything else), writes a kubeconfig ([`FakeApiServer::write_kubeconfig`]),
//! and then scripts it: [`FakeApiServer::apply`] and [`FakeApiServer::delete`] push
//! events to the open watches, [`FakeApiServer::bookmark`] sends bookmarks,
//! [`FakeApiServer::expire`] answers 410 Gone (the client must relist),
//! [`FakeApiServer::drop_watches`] cuts connections mid-stream,
//! [`FakeApiServer::push_raw`] sends any line (malformed objects), and
//! [`FakeApiServer::requests`] tells what the client asked for.
//!
//! The `torii-fake-apiserver` binary runs the same double as its own process; tests in
//! other processes drive it through the admin API under [`http::ADMIN_PREFIX`] with
//! [`AdminClient`].

pub mod http;
pub mod selector;
pub mod store;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::http::Shared;
use crate::store::Store;

/// The resources the double serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// core/v1 Services.
    Services,
    /// discovery.k8s.io/v1 EndpointSlices.
    EndpointSlices,
    /// core/v1 Nodes (cluster-scoped).
    Nodes,
    /// coordination.k8s.io/v1 Leases (L2 mode's owner election), the only resource the
    /// double also creates (POST) and replaces (PUT) on request.
    Leases,
}

impl Resource {
    /// All of them.
    pub const ALL: [Self; 4] = [Self::Services, Self::EndpointSlices, Self::Nodes, Self::Leases];

    /// `Service`, `EndpointSlice`, `Node`.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Services => "Service",
            Self::EndpointSlices => "EndpointSlice",
            Self::Nodes => "Node",
            Self::Leases => "Lease",
        }
    }

    /// `v1`, `discovery.k8s.io/v1` or `coordination.k8s.io/v1`.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::EndpointSlices => "discovery.k8s.io/v1",
            Self::Leases => "coordination.k8s.io/v1",
            _ => "v1",
        }
    }

    /// The API group (`""` for core).
    pub fn group(self) -> &'static str {
        match self {
            Self::EndpointSlices => "discovery.k8s.io",
            Self::Leases => "coordination.k8s.io",
            _ => "",
        }
    }

    /// The URL path segment: `services`, `endpointslices`, `nodes`.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Services => "services",
            Self::EndpointSlices => "endpointslices",
            Self::Nodes => "nodes",
            Self::Leases => "leases",
        }
    }

    /// Whether objects live in a namespace.
    pub fn namespaced(self) -> bool {
        self != Self::Nodes
    }

    /// The resource of a plural name.
    pub fn from_plural(plural: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.plural() == plural)
    }

    /// The resource an object belongs to, by its `apiVersion` and `kind`.
    ///
    /// # Errors
    /// When the object is something else.
    pub fn of_object(object: &Value) -> Result<Self, String> {
        let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        Self::ALL
            .into_iter()
            .find(|r| r.kind() == kind && r.api_version() == api_version)
            .ok_or_else(|| format!("apiVersion {api_version:?} kind {kind:?} is not served by the double"))
    }
}

/// The annotation the EndpointSlice controller sets to the time of the change that
/// triggered the slice's update.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// `t` as RFC 3339 in UTC with nanoseconds (Go's `time.RFC3339Nano`, trailing zeros
/// of the fraction removed), e.g. `2026-11-21T05:41:29.5Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut s = format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60);
    let nanos = d.subsec_nanos();
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Sets `metadata.annotations["endpoints.kubernetes.io/last-change-trigger-time"]` of
/// `object` to `at`, as the EndpointSlice controller does when it updates a slice.
pub fn stamp_trigger_time(object: &mut Value, at: SystemTime) {
    if let Some(meta) = object.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({}))) {
        if let Some(meta) = meta.as_object_mut() {
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(TRIGGER_TIME_ANNOTATION.into(), rfc3339(at).into());
            }
        }
    }
}

/// The recorded lists (`fixtures/list-*.json`).
const RECORDED_LISTS: [&str; 3] = [
    include_str!("../fixtures/list-services.json"),
    include_str!("../fixtures/list-endpointslices.json"),
    include_str!("../fixtures/list-nodes.json"),
];

/// Initial objects of a double, and the revision it starts at.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    objects: Vec<Value>,
    list_rv: u64,
}

impl Objects {
    /// No objects.
    pub fn new() -> Self {
        Self::default()
    }

    /// The recorded cluster state: the 17 Services, 16 EndpointSlices and 2 Nodes of
    /// `list-services.json`, `list-endpointslices.json` and `list-nodes.json`, at
    /// resourceVersion 529 (the list RV the recorded watches started from).
    pub fn recorded() -> Self {
        let mut o = Self::new();
        for list in RECORDED_LISTS {
            o.add_json(list).expect("the recorded lists are valid");
        }
        o
    }

    /// Objects a kube-apiserver accepts (or accepted before `StrictIPCIDRValidation`, and
    /// still stores) that a proxy must serve in part: an EndpointSlice with ports 0 and
    /// 70000 among valid ones and an endpoint that is not an IP, a Node whose
    /// `status.addresses` holds a host name as an InternalIP, legacy leading-zero IPv4
    /// values (`010.070.000.241`, `203.0.113.011`, `010.0.0.0/8`) in slice addresses,
    /// externalIPs, load-balancer IPs, source ranges and node addresses, an unreadable
    /// source range, and externalIPs that can never be VIPs (loopback, unspecified,
    /// multicast, broadcast). `fixtures/accepted-but-odd.json`, a `v1` `List` of the same
    /// objects as torii-control's `tests/fixtures/compile/smallest-unit` manifests.
    pub fn accepted_but_odd() -> Self {
        let mut o = Self::new();
        o.add_json(include_str!("../fixtures/accepted-but-odd.json")).expect("the fixture is valid JSON");
        o
    }

    /// The objects, in order.
    pub fn objects(&self) -> &[Value] {
        &self.objects
    }

    /// Adds one object (it must have `apiVersion` and `kind`).
    pub fn push(&mut self, object: Value) -> &mut Self {
        self.objects.push(object);
        self
    }

    /// Adds a JSON document: an object, a `List`, or a typed list as the API returns it
    /// (`ServiceList` & co, whose items have no `kind`); a typed list's
    /// `metadata.resourceVersion` raises the starting revision.
    ///
    /// # Errors
    /// When `text` is not JSON.
    pub fn add_json(&mut self, text: &str) -> Result<&mut Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        self.add_value(value);
        Ok(self)
    }

    fn add_value(&mut self, mut value: Value) {
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("").to_owned();
        let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_owned();
        if let Some(item_kind) = kind.strip_suffix("List") {
            if let Some(rv) =
                value.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok())
            {
                self.list_rv = self.list_rv.max(rv);
            }
            let items = value.get_mut("items").map(Value::take);
            for mut item in items.and_then(|i| if let Value::Array(a) = i { Some(a) } else { None }).unwrap_or_default()
            {
                if let (Value::Object(m), false) = (&mut item, item_kind.is_empty()) {
                    m.entry("kind").or_insert_with(|| item_kind.into());
                    m.entry("apiVersion").or_insert_with(|| api_version.clone().into());
                }
                self.add_value(item);
            }
        } else if Resource::of_object(&value).is_ok() {
            self.objects.push(value);
        }
    }

    /// Adds every Service, EndpointSlice and Node of the YAML/JSON manifests in `dir`
    /// (files ending in `.yaml`, `.yml` or `.json`, in name order; other kinds are
    /// ignored), as `kubectl apply` would create them.
    ///
    /// # Errors
    /// When the directory or a file cannot be read or parsed.
    pub fn add_manifests_dir(&mut self, dir: &Path) -> Result<&mut Self, String> {
        use serde::Deserialize as _;
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                let value = Value::deserialize(doc).map_err(|e| format!("{}: {e}", path.display()))?;
                if !value.is_null() {
                    self.add_value(value);
                }
            }
        }
        Ok(self)
    }
}

/// The recorded watch events of `resource` (`fixtures/watch-services.jsonl`,
/// `fixtures/watch-endpointslices.jsonl`: the churn sequence of the fixtures' README,
/// bookmarks left out), as (`ADDED`/`MODIFIED`/`DELETED`, object).
pub fn recorded_events(resource: Resource) -> Vec<(String, Value)> {
    let text = match resource {
        Resource::Services => include_str!("../fixtures/watch-services.jsonl"),
        Resource::EndpointSlices => include_str!("../fixtures/watch-endpointslices.jsonl"),
        Resource::Nodes | Resource::Leases => "",
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v.get("type")?.as_str()?.to_owned(), v.get("object")?.clone())))
        .filter(|(t, _)| t != "BOOKMARK")
        .collect()
}

/// Options of a double.
#[derive(Clone, Debug)]
pub struct Options {
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// How often an idle watch gets a bookmark when there is a newer resourceVersion
    /// (kube-apiserver: about 60 s).
    pub bookmark_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self { listen: SocketAddr::from(([127, 0, 0, 1], 0)), bookmark_interval: Duration::from_secs(60) }
    }
}

/// A running double: an HTTP server on its own thread (with its own tokio runtime), so
/// that it serves synchronous and asynchronous tests alike. Dropping it stops the server
/// and cuts every open connection.
#[derive(Debug)]
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeApiServer {
    /// Starts a double on 127.0.0.1 (any free port) serving `objects`.
    ///
    /// # Errors
    /// When an object is not servable (not a Service, EndpointSlice or Node; no name),
    /// or the listener cannot be set up.
    pub fn start(objects: &Objects) -> io::Result<Self> {
        Self::start_with(objects, &Options::default())
    }

    /// [`FakeApiServer::start`] with options.
    ///
    /// # Errors
    /// As [`FakeApiServer::start`].
    pub fn start_with(objects: &Objects, options: &Options) -> io::Result<Self> {
        let mut store = Store::default();
        for o in &objects.objects {
            store.insert_initial(o.clone()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        }
        store.seal_initial(objects.list_rv);
        let shared = Arc::new(Shared { store: Mutex::new(store), bookmark_interval: options.bookmark_interval });
        let listener = std::net::TcpListener::bind(options.listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let server_shared = shared.clone();
        let thread = std::thread::Builder::new().name("fake-apiserver".into()).spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => http::serve(l, server_shared, rx).await,
                    Err(e) => eprintln!("fake-apiserver: {e}"),
                }
            });
        })?;
        Ok(Self { addr, shared, shutdown: Some(tx), thread: Some(thread) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig whose current context points at the double.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_for(&self.url())
    }

    /// Writes [`FakeApiServer::kubeconfig`] to `path`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_kubeconfig(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.shared.lock()
    }

    /// Creates or replaces an object and sends `ADDED`/`MODIFIED` to the open watches;
    /// returns its new resourceVersion.
    ///
    /// # Errors
    /// When the object is not a Service, EndpointSlice or Node, or has no name.
    pub fn apply(&self, object: Value) -> Result<u64, String> {
        self.store().apply(object, true)
    }

    /// Like [`FakeApiServer::apply`], but the open watches do not get the event (as if it
    /// were lost); a relist or a new watch from an older resourceVersion sees it.
    ///
    /// # Errors
    /// As [`FakeApiServer::apply`].
    pub fn apply_unannounced(&self, object: Value) -> Result<u64, String> {
        self.store().apply(object, false)
    }

    /// Deletes an object and sends `DELETED`; returns the deletion's resourceVersion.
    ///
    /// # Errors
    /// When there is no such object.
    pub fn delete(&self, resource: Resource, namespace: &str, name: &str) -> Result<u64, String> {
        self.store().delete(resource, namespace, name, true)
    }

    /// Like [`FakeApiServer::delete`], without the event to open watches.
    ///
    /// # Errors
    /// When there is no such object.
    pub fn delete_unannounced(&self, resource: Resource, namespace: &str, name: &str) -> Result<u64, String> {
        self.store().delete(resource, namespace, name, false)
    }

    /// The object as the double holds it (with `kind`, `apiVersion`, `resourceVersion`).
    pub fn get(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        self.store().get(resource, namespace, name)
    }

    /// Every object of `resource`, sorted by namespace/name.
    pub fn objects(&self, resource: Resource) -> Vec<Value> {
        self.store().objects(resource)
    }

    /// The current resourceVersion (etcd revision).
    pub fn resource_version(&self) -> u64 {
        self.store().resource_version()
    }

    /// Sends a BOOKMARK to the watches of `resource` (all for `None`) that asked for
    /// bookmarks and have not seen the resource's newest RV. Returns how many got one.
    pub fn bookmark(&self, resource: Option<Resource>) -> usize {
        self.store().bookmark(resource)
    }

    /// 410 Gone: the open watches of `resource` (all for `None`) get an `ERROR` event
    /// with Status 410 `Expired` and their streams end; the watch cache restarts at the
    /// current resourceVersion, so only a relist recovers. Returns how many were ended.
    pub fn expire(&self, resource: Option<Resource>) -> usize {
        self.store().expire(resource)
    }

    /// Cuts the connections of the open watches mid-stream. Returns how many.
    pub fn drop_watches(&self, resource: Option<Resource>) -> usize {
        self.store().drop_watches(resource)
    }

    /// Ends the open watches cleanly (as at `timeoutSeconds`). Returns how many.
    pub fn end_watches(&self, resource: Option<Resource>) -> usize {
        self.store().end_watches(resource)
    }

    /// Sends one raw line to the open watches of `resource`. Returns how many got it.
    pub fn push_raw(&self, resource: Option<Resource>, line: &str) -> usize {
        self.store().push_raw(resource, line)
    }

    /// How many watches of `resource` (all for `None`) are open.
    pub fn watch_count(&self, resource: Option<Resource>) -> usize {
        self.store().watch_count(resource)
    }

    /// Waits up to `timeout` until at least `n` watches of `resource` are open.
    pub fn wait_for_watches(&self, resource: Option<Resource>, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.watch_count(resource) >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every API request so far (`GET /api/v1/services?…`), in order.
    pub fn requests(&self) -> Vec<String> {
        self.store().requests()
    }

    /// Makes lists and watches of `resource` fail with HTTP `code` (e.g. 403 as for a
    /// missing RBAC rule), or work again with `None`.
    pub fn set_failure(&self, resource: Resource, code: Option<u16>) {
        self.store().set_failure(resource, code);
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A kubeconfig for a server at `url` (no credentials: the double does not check them).
pub fn kubeconfig_for(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {url}\n\
         contexts:\n- name: double\n  context:\n    cluster: double\n    user: double\n    namespace: default\n\
         current-context: double\nusers:\n- name: double\n  user:\n    token: not-checked\n"
    )
}

/// A client of the admin API of a double running in another process
/// (`torii-fake-apiserver`): plain blocking HTTP/1.1 over TCP.
#[derive(Clone, Debug)]
pub struct AdminClient {
    addr: SocketAddr,
}

impl AdminClient {
    /// A client for the double at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self { addr }
    }

    /// A client for the double a kubeconfig written by the double points at.
    ///
    /// # Errors
    /// When the file cannot be read or has no `server: http://HOST:PORT` line.
    pub fn from_kubeconfig(path: &Path) -> io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let addr = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: http://"))
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}: no `server: http://…`", path.display()))
            })?;
        Ok(Self::new(addr))
    }

    /// The double's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn request(&self, method: &str, path_and_query: &str, body: &[u8]) -> io::Result<Value> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let head = format!(
            "{method} {}{path_and_query} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            http::ADMIN_PREFIX,
            self.addr,
            body.len()
        );
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let code: u16 = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let value: Value = serde_json::from_str(body.trim())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("admin response {code} {body:?}: {e}")))?;
        if code != 200 {
            return Err(io::Error::other(format!("admin {method} {path_and_query}: HTTP {code}: {value}")));
        }
        Ok(value)
    }

    fn rv(v: &Value) -> io::Result<u64> {
        v["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other(format!("no resourceVersion in {v}")))
    }

    fn count(v: &Value) -> io::Result<usize> {
        v["watches"].as_u64().map(|n| n as usize).ok_or_else(|| io::Error::other(format!("no count in {v}")))
    }

    fn resource_query(resource: Option<Resource>) -> String {
        resource.map(|r| format!("?resource={}", r.plural())).unwrap_or_default()
    }

    /// [`FakeApiServer::apply`].
    ///
    /// # Errors
    /// I/O errors, or the double refusing the object.
    pub fn apply(&self, object: &Value) -> io::Result<u64> {
        Self::rv(&self.request("POST", "apply", &serde_json::to_vec(object)?)?)
    }

    /// [`FakeApiServer::delete`].
    ///
    /// # Errors
    /// I/O errors, or no such object.
    pub fn delete(&self, resource: Resource, namespace: &str, name: &str) -> io::Result<u64> {
        Self::rv(&self.request(
            "POST",
            &format!("delete?resource={}&namespace={namespace}&name={name}", resource.plural()),
            b"",
        )?)
    }

    /// [`FakeApiServer::get`].
    ///
    /// # Errors
    /// I/O errors, or no such object.
    pub fn get(&self, resource: Resource, namespace: &str, name: &str) -> io::Result<Value> {
        self.request("GET", &format!("object?resource={}&namespace={namespace}&name={name}", resource.plural()), b"")
    }

    /// [`FakeApiServer::bookmark`].
    ///
    /// # Errors
    /// I/O errors.
    pub fn bookmark(&self, resource: Option<Resource>) -> io::Result<usize> {
        Self::count(&self.request("POST", &format!("bookmark{}", Self::resource_query(resource)), b"")?)
    }

    /// [`FakeApiServer::expire`].
    ///
    /// # Errors
    /// I/O errors.
    pub fn expire(&self, resource: Option<Resource>) -> io::Result<usize> {
        Self::count(&self.request("POST", &format!("expire{}", Self::resource_query(resource)), b"")?)
    }

    /// [`FakeApiServer::drop_watches`].
    ///
    /// # Errors
    /// I/O errors.
    pub fn drop_watches(&self, resource: Option<Resource>) -> io::Result<usize> {
        Self::count(&self.request("POST", &format!("drop{}", Self::resource_query(resource)), b"")?)
    }

    /// [`FakeApiServer::watch_count`].
    ///
    /// # Errors
    /// I/O errors.
    pub fn watch_count(&self, resource: Option<Resource>) -> io::Result<usize> {
        Self::count(&self.request("GET", &format!("watches{}", Self::resource_query(resource)), b"")?)
    }

    /// [`FakeApiServer::requests`].
    ///
    /// # Errors
    /// I/O errors.
    pub fn requests(&self) -> io::Result<Vec<String>> {
        let v = self.request("GET", "requests", b"")?;
        Ok(v["requests"]
            .as_array()
            .map(|a| a.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect())
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formatting() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::new(1_795_239_689, 500_000_000);
        assert_eq!(rfc3339(t), "2026-11-21T05:41:29.5Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // leap day
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn recorded_state_loads() {
        let o = Objects::recorded();
        let count = |k: &str| o.objects().iter().filter(|v| v["kind"] == k).count();
        assert_eq!((count("Service"), count("EndpointSlice"), count("Node")), (17, 16, 2));
        assert_eq!(o.list_rv, 529);
        assert_eq!(recorded_events(Resource::EndpointSlices).len(), 8);
        assert_eq!(recorded_events(Resource::Services).len(), 3);
    }

    #[test]
    fn demo_manifests_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo");
        let mut o = Objects::new();
        o.add_manifests_dir(&dir).unwrap();
        assert!(o.objects().len() >= 8, "{}", o.objects().len());
    }
}
