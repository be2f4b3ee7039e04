//! The Kubernetes API source: Services, `discovery.k8s.io/v1` EndpointSlices and the
//! gateway's own Node, watched through kube-rs.
//!
//! [`KubeWatch`] runs one kube-rs [`watcher()`] per resource, each feeding a
//! [`reflector`] store: an initial list (`resourceVersion=0`, unpaged, served from the
//! API server's watch cache: [`watcher::Config::any_semantic`]), then a watch from the list's
//! resourceVersion with bookmarks on, resumed from the last seen resourceVersion when
//! the connection drops or times out, and a full relist when the server answers 410 Gone
//! (the stores are swapped atomically when the relist is complete). Errors are logged
//! and retried with kube-runtime's default backoff (client-go's: 0.8 s doubling to
//! 30 s, with jitter); none is fatal.
//!
//! What is watched, as kube-proxy does:
//! - every Service;
//! - every EndpointSlice labelled `kubernetes.io/service-name` and not
//!   `service.kubernetes.io/headless` (kube-proxy's selector; headless Services are not
//!   proxied);
//! - the Node named by the gateway's `node_name` (field selector `metadata.name`), for
//!   NodePort addresses and topology.
//!
//! [`KubeWatch::next`] hands over complete snapshots ([`Update`]): the first once every
//! store has its initial list, then one per batch of changes. A batch ends when no event
//! arrived for [`QUIET`], or [`MAX_DELAY`] after its first event, and never sooner than
//! `min_interval` after the previous snapshot ([`KubeSettings`]). A snapshot is built
//! only when the caller asks for it, so a slow compile never works on stale objects.
//!
//! Objects are read leniently ([`ApiObject`]): one that does not deserialize into its
//! k8s-openapi type is kept as an error naming the object and the field
//! ([`SourceError::ApiObject`]) instead of failing the whole list or watch, so
//! everything else is still served.
//!
//! Network-programming latency starts at the newest
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation among the objects a
//! batch changed ([`TRIGGER_TIME_ANNOTATION`], set by the EndpointSlice controller,
//! RFC 3339). As kube-proxy does (`pkg/proxy/endpointschangetracker.go`), only trigger
//! times newer than the source's start count, and an object's trigger time counts once
//! (a relist of unchanged objects adds nothing).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{KubeObject, Loaded, SourceError, TriggerTimes, Update};

/// The annotation the EndpointSlice controller sets to the time of the change (a Pod or
/// Service update) that triggered the slice's update; RFC 3339.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The EndpointSlices a Service proxy needs (kube-proxy's label selector).
pub const ENDPOINT_SLICE_SELECTOR: &str = "kubernetes.io/service-name,!service.kubernetes.io/headless";

/// How long the API must stay quiet after an event before a batch ends.
pub const QUIET: Duration = Duration::from_millis(50);

/// Longest a continuous stream of events postpones a snapshot.
pub const MAX_DELAY: Duration = Duration::from_millis(500);

/// Default of [`KubeSettings::min_interval`].
pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How long to wait for the initial lists before saying which are missing.
const SYNC_WARNING: Duration = Duration::from_secs(10);

/// Page size of [`list_once`]'s lists.
const PAGE_SIZE: u32 = 500;

/// Where the API server and the credentials come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterConfig {
    /// A kubeconfig file (its current context).
    Kubeconfig(PathBuf),
    /// The Pod's ServiceAccount: `KUBERNETES_SERVICE_HOST`/`_PORT` and the token and CA
    /// under `/var/run/secrets/kubernetes.io/serviceaccount/`.
    InCluster,
}

impl std::fmt::Display for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kubeconfig(p) => write!(f, "kubeconfig {}", p.display()),
            Self::InCluster => f.write_str("in-cluster configuration"),
        }
    }
}

/// A client for the cluster `config` names, and the API server's URL (for messages).
///
/// # Errors
/// [`SourceError::KubeConfig`] when the kubeconfig cannot be read or used, or the
/// in-cluster environment is missing. Nothing is sent to the server yet.
pub async fn connect(config: &ClusterConfig) -> Result<(Client, String), SourceError> {
    let err =
        |e: &dyn std::fmt::Display| SourceError::KubeConfig { config: config.to_string(), message: e.to_string() };
    let kube_config = match config {
        ClusterConfig::Kubeconfig(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(&e))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| err(&e))?
        }
        ClusterConfig::InCluster => kube::Config::incluster().map_err(|e| err(&e))?,
    };
    let url = kube_config.cluster_url.to_string();
    let client = Client::try_from(kube_config).map_err(|e| err(&e))?;
    Ok((client, url))
}

// ---------------------------------------------------------------------------------------
// Lenient objects

/// An object as the API server sent it: the k8s-openapi object, or, when it does not
/// deserialize, its metadata and what is wrong (the object is skipped, the list or watch
/// goes on). `metadata.managedFields` is dropped on the way in (nothing here reads it).
#[derive(Clone, Debug)]
pub enum ApiObject<K> {
    /// A well-formed object.
    Valid(K),
    /// An object that does not deserialize.
    Invalid(Box<InvalidObject>),
}

/// What is known of an object that does not deserialize.
#[derive(Clone, Debug)]
pub struct InvalidObject {
    /// Its metadata, as far as it could be read (name, namespace, resourceVersion).
    pub metadata: ObjectMeta,
    /// Path of the offending field (`spec.ports[0].port`), when known.
    pub field: Option<String>,
    /// serde's message.
    pub message: String,
}

/// The metadata of a malformed object, as far as it can be read.
fn lenient_metadata(value: &Value) -> ObjectMeta {
    let meta = value.get("metadata").cloned().unwrap_or(Value::Null);
    serde_json::from_value(meta.clone()).unwrap_or_else(|_| {
        let field = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_owned);
        ObjectMeta {
            name: field("name"),
            namespace: field("namespace"),
            uid: field("uid"),
            resource_version: field("resourceVersion"),
            ..ObjectMeta::default()
        }
    })
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for ApiObject<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        let Some(map) = value.as_object_mut() else {
            return Err(serde::de::Error::custom("expected a Kubernetes object (a JSON mapping)"));
        };
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("managedFields");
        }
        match serde_path_to_error::deserialize::<_, K>(&value) {
            Ok(k) => Ok(Self::Valid(k)),
            Err(e) => {
                let path = e.path().to_string();
                Ok(Self::Invalid(Box::new(InvalidObject {
                    metadata: lenient_metadata(&value),
                    field: (path != ".").then_some(path),
                    message: e.into_inner().to_string(),
                })))
            }
        }
    }
}

impl<K: kube::Resource<DynamicType = ()>> kube::Resource for ApiObject<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Valid(k) => k.meta(),
            Self::Invalid(i) => &i.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Valid(k) => k.meta_mut(),
            Self::Invalid(i) => &mut i.metadata,
        }
    }
}

/// The kinds this source reads, and how each becomes a [`KubeObject`].
pub trait Kind: kube::Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static {
    /// Whether objects of this kind live in a namespace.
    const NAMESPACED: bool = true;

    /// Wraps the object.
    fn into_object(self) -> KubeObject;
}

impl Kind for core::Service {
    fn into_object(self) -> KubeObject {
        KubeObject::Service(Box::new(self))
    }
}

impl Kind for discovery::EndpointSlice {
    fn into_object(self) -> KubeObject {
        KubeObject::EndpointSlice(Box::new(self))
    }
}

impl Kind for core::Node {
    const NAMESPACED: bool = false;

    fn into_object(self) -> KubeObject {
        KubeObject::Node(Box::new(self))
    }
}

fn sort_key(meta: &ObjectMeta) -> (&str, &str) {
    (meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""))
}

/// Appends `objects` to `out` sorted by namespace/name: valid ones as objects, malformed
/// ones as errors.
fn push_objects<'a, K: Kind>(objects: impl IntoIterator<Item = &'a ApiObject<K>>, out: &mut Loaded) {
    use kube::Resource as _;
    let mut objects: Vec<&ApiObject<K>> = objects.into_iter().collect();
    objects.sort_by(|a, b| sort_key(a.meta()).cmp(&sort_key(b.meta())));
    for o in objects {
        match o {
            ApiObject::Valid(k) => out.objects.push(k.clone().into_object()),
            ApiObject::Invalid(i) => {
                let kind = K::kind(&());
                let name = i.metadata.name.as_deref().filter(|n| !n.is_empty()).unwrap_or("<unnamed>");
                let object = match (K::NAMESPACED, i.metadata.namespace.as_deref()) {
                    (true, ns) => format!("{kind} {}/{name}", ns.filter(|n| !n.is_empty()).unwrap_or("default")),
                    (false, _) => format!("{kind} {name}"),
                };
                out.errors.push(SourceError::ApiObject { object, field: i.field.clone(), message: i.message.clone() });
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// RFC 3339

/// Parses an RFC 3339 `date-time` ([RFC 3339 § 5.6]): `YYYY-MM-DDTHH:MM:SS`, an optional
/// fraction of up to 9 digits, and `Z` or a `±HH:MM` offset; `T` and `Z` in either case.
/// Returns `None` for anything else, and for times before 1970.
///
/// [RFC 3339 § 5.6]: https://www.rfc-editor.org/rfc/rfc3339#section-5.6
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        d.iter().all(u8::is_ascii_digit).then(|| d.iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0')))
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month) || day < 1 || day > month_days[(month - 1) as usize] {
        return None;
    }
    // Second 60 is a leap second; it is folded into the next one.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = i - start;
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = u32::try_from(num(start..i)?).ok()? * 10u32.pow((9 - digits) as u32);
    }
    let offset_s = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

/// The trigger time of `meta`, if it carries a well-formed one.
fn trigger_time(meta: &ObjectMeta) -> Option<SystemTime> {
    let raw = meta.annotations.as_ref()?.get(TRIGGER_TIME_ANNOTATION)?;
    let t = parse_rfc3339(raw);
    if t.is_none() {
        tracing::debug!(
            object = ?sort_key(meta),
            value = %raw,
            "ignoring a malformed {TRIGGER_TIME_ANNOTATION} annotation (not RFC 3339)"
        );
    }
    t
}

// ---------------------------------------------------------------------------------------
// The watch

/// Timing of [`KubeWatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeSettings {
    /// The gateway's Node (only it is watched).
    pub node_name: String,
    /// Shortest time between two snapshots (rate limit of recompilation and
    /// publication under churn).
    pub min_interval: Duration,
    /// See [`QUIET`].
    pub quiet: Duration,
    /// See [`MAX_DELAY`].
    pub max_delay: Duration,
}

impl KubeSettings {
    /// The defaults for the gateway on Node `node_name`.
    pub fn new(node_name: impl Into<String>) -> Self {
        Self { node_name: node_name.into(), min_interval: DEFAULT_MIN_INTERVAL, quiet: QUIET, max_delay: MAX_DELAY }
    }
}

/// Changes not yet handed over in a snapshot.
#[derive(Debug, Default)]
struct Batch {
    /// Which stores have their initial list (Services, EndpointSlices, Nodes).
    synced: [bool; 3],
    /// When the first change of the batch arrived.
    first: Option<Instant>,
    /// When the last one arrived.
    last: Option<Instant>,
    /// Trigger times of the batch's changes.
    triggers: Vec<SystemTime>,
}

#[derive(Debug, Default)]
struct Shared {
    batch: Mutex<Batch>,
    notify: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn changed(&self, index: usize, synced: bool, triggers: impl IntoIterator<Item = SystemTime>) {
        let now = Instant::now();
        let mut b = self.lock();
        b.synced[index] |= synced;
        b.first.get_or_insert(now);
        b.last = Some(now);
        b.triggers.extend(triggers);
        drop(b);
        self.notify.notify_one();
    }
}

const RESOURCES: [&str; 3] = ["services", "endpointslices", "nodes"];

/// Watches the cluster and hands over snapshots (see the module documentation). Dropping
/// it stops the watches.
#[derive(Debug)]
pub struct KubeWatch {
    settings: KubeSettings,
    shared: Arc<Shared>,
    services: Store<ApiObject<core::Service>>,
    slices: Store<ApiObject<discovery::EndpointSlice>>,
    nodes: Store<ApiObject<core::Node>>,
    tasks: Vec<JoinHandle<()>>,
    started: Instant,
    last_snapshot: Option<Instant>,
    warned_unsynced: bool,
}

impl KubeWatch {
    /// Starts the three watches. Must be called inside a tokio runtime.
    pub fn start(client: &Client, settings: KubeSettings) -> Self {
        let shared = Arc::new(Shared::default());
        let started = SystemTime::now();
        // kube-rs sends `resourceVersion=0` only on unpaged lists; the API server serves
        // those from its watch cache, which ignores `limit` anyway.
        let base = watcher::Config { page_size: None, ..watcher::Config::default().any_semantic() };
        let (services, w_services) = reflector::store();
        let (slices, w_slices) = reflector::store();
        let (nodes, w_nodes) = reflector::store();
        let tasks = vec![
            tokio::spawn(run_watch::<core::Service>(
                Api::all(client.clone()),
                base.clone(),
                w_services,
                0,
                shared.clone(),
                started,
            )),
            tokio::spawn(run_watch::<discovery::EndpointSlice>(
                Api::all(client.clone()),
                base.clone().labels(ENDPOINT_SLICE_SELECTOR),
                w_slices,
                1,
                shared.clone(),
                started,
            )),
            tokio::spawn(run_watch::<core::Node>(
                Api::all(client.clone()),
                base.fields(&format!("metadata.name={}", settings.node_name)),
                w_nodes,
                2,
                shared.clone(),
                started,
            )),
        ];
        Self {
            settings,
            shared,
            services,
            slices,
            nodes,
            tasks,
            started: Instant::now(),
            last_snapshot: None,
            warned_unsynced: false,
        }
    }

    /// The next snapshot: the first once every initial list is complete, then one per
    /// batch of changes (see the module documentation). Cancel-safe: the batch's state
    /// lives in `self`, so a `select!` may drop this future at any await.
    pub async fn next(&mut self) -> Update {
        loop {
            let now = Instant::now();
            let ready_at = {
                let mut b = self.shared.lock();
                let all_synced = b.synced.iter().all(|s| *s);
                match (all_synced, b.first, b.last) {
                    (true, Some(first), Some(last)) => {
                        let settled = (last + self.settings.quiet).min(first + self.settings.max_delay);
                        let ready = self.last_snapshot.map_or(settled, |t| settled.max(t + self.settings.min_interval));
                        if now >= ready {
                            let triggers = TriggerTimes::from_times(&std::mem::take(&mut b.triggers));
                            b.first = None;
                            b.last = None;
                            drop(b);
                            self.last_snapshot = Some(now);
                            return Update { loaded: self.snapshot(), triggers };
                        }
                        Some(ready)
                    }
                    (false, ..) if !self.warned_unsynced => {
                        let missing: Vec<&str> =
                            RESOURCES.iter().zip(b.synced).filter(|(_, s)| !s).map(|(r, _)| *r).collect();
                        if now >= self.started + SYNC_WARNING {
                            self.warned_unsynced = true;
                            tracing::warn!(
                                "still waiting for the initial list of {} after {} s; nothing is published until \
                                 every list is complete (check the API server address and the RBAC rules)",
                                missing.join(", "),
                                SYNC_WARNING.as_secs()
                            );
                            None
                        } else {
                            Some(self.started + SYNC_WARNING)
                        }
                    }
                    _ => None,
                }
            };
            match ready_at {
                Some(at) => {
                    tokio::select! {
                        () = self.shared.notify.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.shared.notify.notified().await,
            }
        }
    }

    /// The stores' current content, sorted: Services, EndpointSlices, Nodes, each by
    /// namespace/name.
    pub fn snapshot(&self) -> Loaded {
        let mut loaded = Loaded::default();
        push_objects(self.services.state().iter().map(|a| &**a), &mut loaded);
        push_objects(self.slices.state().iter().map(|a| &**a), &mut loaded);
        push_objects(self.nodes.state().iter().map(|a| &**a), &mut loaded);
        loaded
    }
}

impl Drop for KubeWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One resource's watcher → reflector loop: records changes and trigger times in
/// `shared`, logs errors (the backoff is in the stream).
async fn run_watch<K: Kind>(
    api: Api<ApiObject<K>>,
    config: watcher::Config,
    writer: reflector::store::Writer<ApiObject<K>>,
    index: usize,
    shared: Arc<Shared>,
    started: SystemTime,
) {
    use kube::Resource as _;
    let resource = RESOURCES[index];
    let stream = watcher(api, config).default_backoff().reflect(writer);
    let mut stream = std::pin::pin!(stream);
    // The last trigger time seen per object: a time counts once.
    let mut seen: HashMap<(String, String), SystemTime> = HashMap::new();
    let mut listed: Vec<SystemTime> = Vec::new();
    let mut list_count = 0usize;
    let mut lists = 0u64;
    let new_trigger = |seen: &mut HashMap<(String, String), SystemTime>, meta: &ObjectMeta| {
        let t = trigger_time(meta)?;
        let (ns, name) = sort_key(meta);
        let previous = seen.insert((ns.to_owned(), name.to_owned()), t);
        (previous != Some(t) && t >= started).then_some(t)
    };
    while let Some(item) = stream.next().await {
        match item {
            Ok(watcher::Event::Init) => {
                listed.clear();
                list_count = 0;
                tracing::debug!(resource, "listing");
            }
            Ok(watcher::Event::InitApply(o)) => {
                list_count += 1;
                listed.extend(new_trigger(&mut seen, o.meta()));
            }
            Ok(watcher::Event::InitDone) => {
                lists += 1;
                let what = if lists == 1 { "listed" } else { "relisted" };
                tracing::info!(resource, objects = list_count, "{what}; watching for changes");
                shared.changed(index, true, listed.drain(..));
            }
            Ok(watcher::Event::Apply(o)) => {
                tracing::debug!(resource, object = ?sort_key(o.meta()), "applied");
                let t = new_trigger(&mut seen, o.meta());
                shared.changed(index, false, t);
            }
            Ok(watcher::Event::Delete(o)) => {
                let (ns, name) = sort_key(o.meta());
                tracing::debug!(resource, object = ?(ns, name), "deleted");
                seen.remove(&(ns.to_owned(), name.to_owned()));
                shared.changed(index, false, None);
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                tracing::warn!(resource, "watch expired (410 Gone: {}); relisting", status.message);
            }
            Err(e) => tracing::warn!(resource, "watch failed: {e}; retrying with backoff"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// One-shot list

async fn list_all<K: Kind>(
    api: &Api<ApiObject<K>>,
    mut params: ListParams,
    resource: &'static str,
    url: &str,
    out: &mut Loaded,
) -> Result<usize, SourceError> {
    let mut objects = Vec::new();
    params.limit = Some(PAGE_SIZE);
    loop {
        let list = api.list(&params).await.map_err(|source| SourceError::KubeList {
            resource,
            url: url.to_owned(),
            source: Box::new(source),
        })?;
        objects.extend(list.items);
        match list.metadata.continue_ {
            Some(c) if !c.is_empty() => params.continue_token = Some(c),
            _ => break,
        }
    }
    push_objects(&objects, out);
    Ok(objects.len())
}

/// Lists once what [`KubeWatch`] watches (a consistent, most recent read of each
/// resource, paged) and returns it as a snapshot: what `torii-control compile
/// --kubeconfig` compiles.
///
/// # Errors
/// [`SourceError::KubeList`] when a list fails (unreachable server, no RBAC rule, …).
pub async fn list_once(client: &Client, url: &str, node_name: &str) -> Result<Loaded, SourceError> {
    let mut loaded = Loaded::default();
    let services: Api<ApiObject<core::Service>> = Api::all(client.clone());
    let slices: Api<ApiObject<discovery::EndpointSlice>> = Api::all(client.clone());
    let nodes: Api<ApiObject<core::Node>> = Api::all(client.clone());
    list_all(&services, ListParams::default(), "services", url, &mut loaded).await?;
    list_all(&slices, ListParams::default().labels(ENDPOINT_SLICE_SELECTOR), "endpointslices", url, &mut loaded)
        .await?;
    list_all(&nodes, ListParams::default().fields(&format!("metadata.name={node_name}")), "nodes", url, &mut loaded)
        .await?;
    Ok(loaded)
}

/// [`connect`] then [`list_once`].
///
/// # Errors
/// As those two.
pub async fn load(config: &ClusterConfig, node_name: &str) -> Result<Loaded, SourceError> {
    let (client, url) = connect(config).await?;
    list_once(&client, &url, node_name).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn rfc3339_parses_what_kubernetes_writes() {
        // The recorded EndpointSlice annotation (seconds) and Go's RFC3339Nano.
        assert_eq!(parse_rfc3339("2026-11-21T05:41:29Z"), Some(at(1_795_239_689, 0)));
        assert_eq!(parse_rfc3339("2026-11-21T05:41:29.123456789Z"), Some(at(1_795_239_689, 123_456_789)));
        assert_eq!(parse_rfc3339("2026-11-21T05:41:29.5Z"), Some(at(1_795_239_689, 500_000_000)));
        assert_eq!(parse_rfc3339("2026-11-21t07:41:29+02:00"), Some(at(1_795_239_689, 0)));
        assert_eq!(parse_rfc3339("2026-11-21T05:11:29-00:30"), Some(at(1_795_239_689, 0)));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(at(951_782_400, 0)));
    }

    #[test]
    fn rfc3339_rejects_everything_else() {
        for bad in [
            "",
            "2026-11-21",
            "2026-11-21T05:41:29",
            "2026-11-21 05:41:29Z",
            "2026-11-21T05:41:29.Z",
            "2026-11-21T05:41:29.1234567891Z",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-11-21T24:00:00Z",
            "2026-11-21T05:41:29+0200",
            "2026-11-21T05:41:29Zjunk",
            "1969-12-31T23:59:59Z",
            "２026-11-21T05:41:29Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn malformed_objects_become_errors_naming_object_and_field() {
        let good = r#"{"metadata":{"name":"b","namespace":"demo","resourceVersion":"5","managedFields":[{"manager":"x"}]},
                       "spec":{"ports":[{"port":80}]}}"#;
        let bad = r#"{"metadata":{"name":"a","namespace":"demo","resourceVersion":"6"},"spec":{"ports":[{"port":"eighty"}]}}"#;
        let good: ApiObject<core::Service> = serde_json::from_str(good).unwrap();
        let bad: ApiObject<core::Service> = serde_json::from_str(bad).unwrap();
        let ApiObject::Valid(s) = &good else { panic!("{good:?}") };
        assert!(s.metadata.managed_fields.is_none(), "managedFields dropped");
        assert_eq!(kube::Resource::meta(&bad).resource_version.as_deref(), Some("6"));
        let mut out = Loaded::default();
        push_objects([&good, &bad], &mut out);
        assert_eq!(out.objects.len(), 1);
        assert_eq!(
            out.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["Service demo/a: spec.ports[0].port: invalid type: string \"eighty\", expected i32; object skipped"]
        );
        // Not an object at all: the line fails (kube-rs reports it and reads on).
        assert!(serde_json::from_str::<ApiObject<core::Service>>("42").is_err());
        // Broken metadata: still named.
        let broken: ApiObject<core::Node> =
            serde_json::from_str(r#"{"metadata":{"name":"n","labels":{"a":1},"resourceVersion":"7"}}"#).unwrap();
        let mut out = Loaded::default();
        push_objects([&broken], &mut out);
        assert_eq!(
            out.errors[0].to_string(),
            "Node n: metadata.labels.a: invalid type: integer `1`, expected a string; object skipped"
        );
    }

    #[test]
    fn snapshots_are_sorted_by_namespace_and_name() {
        let svc = |ns: &str, n: &str| -> ApiObject<core::Service> {
            serde_json::from_value(serde_json::json!({"metadata": {"name": n, "namespace": ns}})).unwrap()
        };
        let objects = [svc("b", "a"), svc("a", "z"), svc("a", "b")];
        let mut out = Loaded::default();
        push_objects(&objects, &mut out);
        let names: Vec<String> = out.objects.iter().map(|o| o.object_ref().to_string()).collect();
        assert_eq!(names, ["Service a/b", "Service a/z", "Service b/a"]);
    }
}
