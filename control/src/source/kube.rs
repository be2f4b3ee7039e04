//! The Kubernetes API source: Services, `discovery.k8s.io/v1` EndpointSlices and the
//! gateway's own Node, watched through kube-rs.
//!
//! [`KubeWatch`] runs one kube-rs [`watcher()`] per resource: an initial list
//! (`resourceVersion=0`, unpaged, served from the API server's watch cache:
//! [`watcher::Config::any_semantic`]), then a watch from the list's resourceVersion with
//! bookmarks on, resumed from the last seen resourceVersion when the connection drops or
//! times out, and a full relist when the server answers 410 Gone. Errors are logged and
//! retried with client-go's backoff ([`RetryBackoff`]: 0.8 s doubling to 30 s, with
//! jitter, reset after two minutes without a failure — not on every event), except that
//! while the server does not answer at all (connection refused, reset or timed out) a
//! retry comes at most [`RetryBackoff::RECONNECT_MAX`] later, and so does the relist
//! after a 410 Gone, so that a restarted API server is watched again within seconds;
//! none is fatal.
//!
//! What is watched, as kube-proxy does:
//! - every Service;
//! - every EndpointSlice labelled `kubernetes.io/service-name` and not
//!   `service.kubernetes.io/headless` (kube-proxy's selector; headless Services are not
//!   proxied);
//! - the Node named by the gateway's `node_name` (field selector `metadata.name`), for
//!   NodePort addresses and topology.
//!
//! [`KubeWatch::next`] hands over changes, not snapshots ([`KubeChanges`]: the latest
//! state of each object that changed, or its deletion), so that the daemon's work is
//! proportional to the change, not to the cluster ([`crate::compile::Compiler::apply`]).
//! The first batch comes once every resource has its initial list. A list (the initial
//! one, or a relist after 410 Gone) is handed over whole when it is complete: the objects
//! whose resourceVersion differs from what the source held, and the deletion of every
//! object the list no longer has. Bursts are coalesced as kube-proxy's
//! `BoundedFrequencyRunner` does: a change is handed over at once when the previous
//! batch is at least `min_interval` old ([`KubeSettings`], default
//! [`DEFAULT_MIN_INTERVAL`]; a batch that changed nothing to publish does not count,
//! [`KubeWatch::unchanged`]), else at that moment, together with everything else that
//! arrived meanwhile; the watch tasks keep recording while the daemon compiles and
//! publishes, so a slow publication also coalesces what arrives during it.
//!
//! A Service and its EndpointSlice come on two watches, the slice a few milliseconds
//! after the Service (the EndpointSlice controller writes it once it sees the Service).
//! So that the pair is compiled and published once, with its endpoints, and not first as
//! a front door without any, a Service that appears after the initial lists, has a
//! selector ([`Kind::expects_slices`]) and has no EndpointSlice yet is held back until
//! its first slice arrives (then both go in the next batch) or
//! [`KubeSettings::new_service_wait`] passes (default [`DEFAULT_NEW_SERVICE_WAIT`]; then
//! it goes alone). Everything else goes on as usual meanwhile. kube-proxy would program
//! the Service at once, rejecting until its endpoints come; here its address is unknown
//! to the gateway for those milliseconds (a deliberate deviation,
//! `docs/kubernetes-semantics-control.md`).
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
use std::collections::{BTreeMap, HashMap};
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
use kube::runtime::watcher;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{KubeObject, Loaded, SourceError, TriggerTimes};
use crate::compile::Change;
use crate::model::ObjectRef;

/// The annotation the EndpointSlice controller sets to the time of the change (a Pod or
/// Service update) that triggered the slice's update; RFC 3339.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The EndpointSlices a Service proxy needs (kube-proxy's label selector).
pub const ENDPOINT_SLICE_SELECTOR: &str = "kubernetes.io/service-name,!service.kubernetes.io/headless";

/// The label naming an EndpointSlice's Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Default of [`KubeSettings::new_service_wait`]: how long a new Service with a selector
/// waits for its first EndpointSlice before it is handed over without one. The
/// EndpointSlice controller writes it within milliseconds of the Service (issue 17
/// measured two publications 10–20 ms apart on a real kube-apiserver).
pub const DEFAULT_NEW_SERVICE_WAIT: Duration = Duration::from_millis(100);

/// Default of [`KubeSettings::min_interval`]: at most 200 publications a second under
/// churn, and at most 5 ms added to a change that follows another closely.
pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_millis(5);

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
    /// The kind, as `kind` spells it.
    const KIND: &'static str;
    /// Whether objects of this kind live in a namespace.
    const NAMESPACED: bool = true;

    /// Wraps the object.
    fn into_object(self) -> KubeObject;

    /// A Service whose endpoints the EndpointSlice controller writes: it has a selector
    /// and is not `type: ExternalName` (the controller then always writes a slice, a
    /// placeholder without endpoints when no Pod matches). Other kinds: false.
    fn expects_slices(&self) -> bool {
        false
    }

    /// An EndpointSlice's Service (namespace, `kubernetes.io/service-name`); other kinds:
    /// `None`.
    fn slice_of(&self) -> Option<(String, String)> {
        None
    }
}

impl Kind for core::Service {
    const KIND: &'static str = "Service";
    fn into_object(self) -> KubeObject {
        KubeObject::Service(Box::new(self))
    }

    fn expects_slices(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| {
            s.selector.as_ref().is_some_and(|m| !m.is_empty()) && s.type_.as_deref() != Some("ExternalName")
        })
    }
}

impl Kind for discovery::EndpointSlice {
    const KIND: &'static str = "EndpointSlice";
    fn into_object(self) -> KubeObject {
        KubeObject::EndpointSlice(Box::new(self))
    }

    fn slice_of(&self) -> Option<(String, String)> {
        let service = self.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
        Some((self.metadata.namespace.clone().unwrap_or_default(), service.clone()))
    }
}

impl Kind for core::Node {
    const KIND: &'static str = "Node";
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
            ApiObject::Invalid(i) => out.errors.push(SourceError::ApiObject {
                object: malformed_name::<K>(&i.metadata),
                field: i.field.clone(),
                message: i.message.clone(),
            }),
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
    /// Shortest time between two hand-overs of changes (the rate limit of recompilation
    /// and publication under churn, kube-proxy's `--min-sync-period`). A change that
    /// arrives when the last hand-over is older than this is handed over at once.
    pub min_interval: Duration,
    /// How long a Service that appears after the initial lists, has a selector and has
    /// no EndpointSlice yet is held back for its first EndpointSlice, so that the two are
    /// handed over (compiled and published) together, once; handed over without it when
    /// this passes (see the module documentation).
    pub new_service_wait: Duration,
}

impl KubeSettings {
    /// The defaults for the gateway on Node `node_name`.
    pub fn new(node_name: impl Into<String>) -> Self {
        Self {
            node_name: node_name.into(),
            min_interval: DEFAULT_MIN_INTERVAL,
            new_service_wait: DEFAULT_NEW_SERVICE_WAIT,
        }
    }
}

/// One batch of changes handed over by [`KubeWatch::next`]: what changed since the
/// previous batch (the first batch: everything the initial lists returned).
#[derive(Debug, Default)]
pub struct KubeChanges {
    /// The changed objects, each once with its latest state: `Some` when added, modified
    /// or listed again with another resourceVersion, `None` when deleted (by a watch event,
    /// or missing from a relist) or when its new version does not deserialize. Sorted by
    /// identity.
    pub objects: Vec<(ObjectRef, Option<KubeObject>)>,
    /// The objects currently skipped because they do not deserialize
    /// ([`SourceError::ApiObject`], Services then EndpointSlices then Nodes, each by
    /// namespace/name), when that set changed in this batch; `None`: unchanged.
    pub errors: Option<Vec<SourceError>>,
    /// The `endpoints.kubernetes.io/last-change-trigger-time`s of the batch's changes.
    pub triggers: Option<TriggerTimes>,
}

impl KubeChanges {
    /// The batch as the compiler's changes ([`crate::compile::Compiler::apply`]).
    pub fn changes(&self) -> impl Iterator<Item = Change<'_>> {
        self.objects.iter().map(|(r, o)| match o {
            Some(o) => Change::Upsert(o),
            None => Change::Delete(r.clone()),
        })
    }
}

/// What [`SourceError::ApiObject`] says of an object that does not deserialize.
#[derive(Clone, Debug)]
struct Malformed {
    object: String,
    field: Option<String>,
    message: String,
}

impl Malformed {
    fn error(&self) -> SourceError {
        SourceError::ApiObject { object: self.object.clone(), field: self.field.clone(), message: self.message.clone() }
    }
}

/// Changes not yet handed over.
#[derive(Debug, Default)]
struct Batch {
    /// Which resources have their initial list (Services, EndpointSlices, Nodes).
    synced: [bool; 3],
    /// When the first change not yet handed over arrived.
    first: Option<Instant>,
    /// Trigger times of the batch's changes.
    triggers: Vec<SystemTime>,
    /// The latest state of every object changed since the last hand-over.
    objects: BTreeMap<ObjectRef, Option<KubeObject>>,
    /// Objects present that do not deserialize, by resource index and identity.
    malformed: BTreeMap<(usize, ObjectRef), Malformed>,
    /// Whether `malformed` changed since the last hand-over.
    malformed_changed: bool,
    /// New Services held back for their first EndpointSlice (namespace, name), until when.
    held: HashMap<(String, String), Instant>,
    /// The Services EndpointSlices arrived for within the last `new_service_wait`, and
    /// when: a Service whose slice came first (the two watches are separate streams) is
    /// not held.
    sliced: HashMap<(String, String), Instant>,
}

impl Batch {
    /// Hands the batch over, but for the Services still held, and starts the next.
    fn take(&mut self) -> KubeChanges {
        let triggers = TriggerTimes::from_times(&std::mem::take(&mut self.triggers));
        let errors = std::mem::take(&mut self.malformed_changed)
            .then(|| self.malformed.values().map(Malformed::error).collect());
        let mut objects: Vec<_> = std::mem::take(&mut self.objects).into_iter().collect();
        if !self.held.is_empty() {
            let held = |r: &ObjectRef| {
                r.kind == "Service"
                    && self.held.contains_key(&(r.namespace.clone().unwrap_or_default(), r.name.clone()))
            };
            let (kept, handed): (Vec<_>, Vec<_>) = objects.into_iter().partition(|(r, _)| held(r));
            self.objects.extend(kept);
            objects = handed;
        }
        self.first = None;
        KubeChanges { objects, errors, triggers }
    }

    /// Releases the held Services whose wait ended by `now`: they count as changes that
    /// arrived when their wait ended. Returns the end of the earliest wait still running.
    fn release_held(&mut self, now: Instant) -> Option<Instant> {
        let mut next = None::<Instant>;
        let mut ended = None::<Instant>;
        self.held.retain(|_, until| {
            if *until <= now {
                ended = Some(ended.map_or(*until, |e| e.min(*until)));
                false
            } else {
                next = Some(next.map_or(*until, |n| n.min(*until)));
                true
            }
        });
        if let Some(e) = ended {
            self.first = Some(self.first.map_or(e, |f| f.min(e)));
        }
        next
    }
}

#[derive(Debug, Default)]
struct Shared {
    batch: Mutex<Batch>,
    notify: Notify,
    /// [`KubeSettings::new_service_wait`].
    new_service_wait: Duration,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records the changes of resource `index`: `upserts` (latest versions; `new`: a watch
    /// event for an object the source did not hold), `deletes` (identities), whether its
    /// list is complete, and trigger times.
    ///
    /// A new Service that expects EndpointSlices ([`Kind::expects_slices`]) and has none
    /// yet is held back ([`Batch::held`]) until its first slice arrives or
    /// [`KubeSettings::new_service_wait`] passes, once every initial list is in.
    fn changed<K: Kind>(
        &self,
        index: usize,
        upserts: impl IntoIterator<Item = ApiObject<K>>,
        new: bool,
        deletes: impl IntoIterator<Item = ObjectRef>,
        synced: bool,
        triggers: impl IntoIterator<Item = SystemTime>,
    ) {
        let now = Instant::now();
        let mut b = self.lock();
        let b = &mut *b;
        let wait = self.new_service_wait;
        if !b.sliced.is_empty() {
            b.sliced.retain(|_, at| now < *at + wait);
        }
        let mut any = false;
        for o in upserts {
            match o {
                ApiObject::Valid(k) => {
                    let r = object_ref::<K>(k.meta());
                    if b.malformed.remove(&(index, r.clone())).is_some() {
                        b.malformed_changed = true;
                    }
                    let mut hold = false;
                    if let Some(service) = k.slice_of() {
                        // Its Service, if held, goes with it.
                        if b.held.remove(&service).is_some() {
                            tracing::debug!(?service, "its first EndpointSlice releases a held Service");
                        }
                        b.sliced.insert(service, now);
                    } else if new && !wait.is_zero() && k.expects_slices() && b.synced.iter().all(|s| *s) {
                        let id = (r.namespace.clone().unwrap_or_default(), r.name.clone());
                        if !b.sliced.contains_key(&id) {
                            tracing::debug!(service = ?id, "a new Service held for its first EndpointSlice");
                            b.held.insert(id, now + wait);
                            hold = true;
                        }
                    }
                    any |= !hold;
                    b.objects.insert(r, Some(k.into_object()));
                }
                ApiObject::Invalid(i) => {
                    any = true;
                    // The previous valid version, if any, is not served any more.
                    let r = object_ref::<K>(&i.metadata);
                    let malformed =
                        Malformed { object: malformed_name::<K>(&i.metadata), field: i.field, message: i.message };
                    b.malformed.insert((index, r.clone()), malformed);
                    b.malformed_changed = true;
                    b.objects.insert(r, None);
                }
            }
        }
        for r in deletes {
            any = true;
            if b.malformed.remove(&(index, r.clone())).is_some() {
                b.malformed_changed = true;
            }
            if r.kind == "Service" && !b.held.is_empty() {
                b.held.remove(&(r.namespace.clone().unwrap_or_default(), r.name.clone()));
            }
            b.objects.insert(r, None);
        }
        b.triggers.extend(triggers);
        let newly_synced = synced && !b.synced[index];
        b.synced[index] |= synced;
        if any || newly_synced {
            b.first.get_or_insert(now);
        }
        // Also for a held Service alone: `next` then wakes when its wait ends.
        self.notify.notify_one();
    }
}

/// The identity of an object of kind `K`.
fn object_ref<K: Kind>(meta: &ObjectMeta) -> ObjectRef {
    if K::NAMESPACED {
        ObjectRef::namespaced(K::KIND, meta)
    } else {
        ObjectRef::cluster_scoped(K::KIND, meta)
    }
}

/// How [`SourceError::ApiObject`] names a malformed object of kind `K`.
fn malformed_name<K: Kind>(meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().filter(|n| !n.is_empty()).unwrap_or("<unnamed>");
    match (K::NAMESPACED, meta.namespace.as_deref()) {
        (true, ns) => format!("{} {}/{name}", K::KIND, ns.filter(|n| !n.is_empty()).unwrap_or("default")),
        (false, _) => format!("{} {name}", K::KIND),
    }
}

const RESOURCES: [&str; 3] = ["services", "endpointslices", "nodes"];

/// Watches the cluster and hands over its changes (see the module documentation).
/// Dropping it stops the watches.
#[derive(Debug)]
pub struct KubeWatch {
    settings: KubeSettings,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    started: Instant,
    /// When the last batch, and the one before it, were handed over (`min_interval`
    /// counts from the last one, or from the one before when the last changed nothing:
    /// [`KubeWatch::unchanged`]).
    last_handover: Option<Instant>,
    previous_handover: Option<Instant>,
    warned_unsynced: bool,
}

impl KubeWatch {
    /// Starts the three watches. Must be called inside a tokio runtime.
    pub fn start(client: &Client, settings: KubeSettings) -> Self {
        let shared = Arc::new(Shared { new_service_wait: settings.new_service_wait, ..Shared::default() });
        let started = SystemTime::now();
        // kube-rs sends `resourceVersion=0` only on unpaged lists; the API server serves
        // those from its watch cache, which ignores `limit` anyway.
        let base = watcher::Config { page_size: None, ..watcher::Config::default().any_semantic() };
        let tasks = vec![
            tokio::spawn(run_watch::<core::Service>(
                Api::all(client.clone()),
                base.clone(),
                0,
                shared.clone(),
                started,
            )),
            tokio::spawn(run_watch::<discovery::EndpointSlice>(
                Api::all(client.clone()),
                base.clone().labels(ENDPOINT_SLICE_SELECTOR),
                1,
                shared.clone(),
                started,
            )),
            tokio::spawn(run_watch::<core::Node>(
                Api::all(client.clone()),
                base.fields(&format!("metadata.name={}", settings.node_name)),
                2,
                shared.clone(),
                started,
            )),
        ];
        Self {
            settings,
            shared,
            tasks,
            started: Instant::now(),
            last_handover: None,
            previous_handover: None,
            warned_unsynced: false,
        }
    }

    /// The next batch of changes: the first once every initial list is complete, then
    /// whatever changed since the previous batch, as soon as something did and
    /// `min_interval` has passed since the previous batch (see the module documentation).
    /// Cancel-safe: the batch lives in the shared state until it is taken.
    pub async fn next(&mut self) -> KubeChanges {
        loop {
            let now = Instant::now();
            let ready_at = {
                let mut b = self.shared.lock();
                let all_synced = b.synced.iter().all(|s| *s);
                let held_until = if b.held.is_empty() { None } else { b.release_held(now) };
                match (all_synced, b.first) {
                    (true, Some(first)) => {
                        let ready = self.last_handover.map_or(first, |t| first.max(t + self.settings.min_interval));
                        if now >= ready {
                            let changes = b.take();
                            drop(b);
                            // Only held Services changed: nothing to hand over yet.
                            if self.last_handover.is_some() && changes.objects.is_empty() && changes.errors.is_none() {
                                continue;
                            }
                            tracing::debug!(
                                objects = changes.objects.len(),
                                since_first_us = (now - first).as_micros(),
                                "handing a batch over"
                            );
                            self.previous_handover = self.last_handover;
                            self.last_handover = Some(now);
                            return changes;
                        }
                        Some(held_until.map_or(ready, |h| h.min(ready)))
                    }
                    (true, None) => held_until,
                    (false, _) if !self.warned_unsynced => {
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
}

impl KubeWatch {
    /// Says that the batch last handed over changed nothing to publish (e.g. a new
    /// Service's first EndpointSlice that came, on its own watch, before the Service):
    /// `min_interval` then counts from the batch before it, so that the change that
    /// follows (the Service) is not held back for a publication that did not happen.
    /// The rate limit is on publications, as kube-proxy's is on its rule syncs.
    pub fn unchanged(&mut self) {
        self.last_handover = self.previous_handover;
    }
}

impl Drop for KubeWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// An object's identity within one resource (namespace, name) and its resourceVersion.
type Versions = HashMap<(String, String), Option<String>>;

fn versioned(meta: &ObjectMeta) -> ((String, String), Option<String>) {
    let (ns, name) = sort_key(meta);
    ((ns.to_owned(), name.to_owned()), meta.resource_version.clone())
}

/// One resource's bookkeeping between its watcher's events and the shared batch. A list
/// (initial, or a relist after 410 Gone or a failed watch) is recorded when complete, as
/// the objects whose resourceVersion changed and the deletions of those it no longer has.
#[derive(Debug)]
struct Tracker<K> {
    index: usize,
    /// When the source started: older trigger times do not count.
    started: SystemTime,
    /// The last trigger time seen per object: a time counts once.
    seen: HashMap<(String, String), SystemTime>,
    /// The trigger times of the list in progress, per object: they replace `seen`'s when
    /// the list completes, so a list that fails partway (another `Init` before its
    /// `InitDone`: a paged list whose later page fails, or a streaming list whose watch
    /// breaks; not the daemon's unpaged list, which kube-rs reads whole before its first
    /// `InitApply`) changes nothing, and its objects' times count when the list that
    /// completes has them.
    listing_seen: HashMap<(String, String), SystemTime>,
    /// What the source holds (handed over or pending).
    current: Versions,
    /// The list in progress: every object, and the changed ones.
    listing: Versions,
    listed: Vec<ApiObject<K>>,
    listed_triggers: Vec<SystemTime>,
    lists: u64,
}

impl<K: Kind> Tracker<K> {
    fn new(index: usize, started: SystemTime) -> Self {
        Self {
            index,
            started,
            seen: HashMap::new(),
            listing_seen: HashMap::new(),
            current: HashMap::new(),
            listing: HashMap::new(),
            listed: Vec::new(),
            listed_triggers: Vec::new(),
            lists: 0,
        }
    }

    /// The trigger time of `meta` if it is new.
    fn new_trigger(&mut self, meta: &ObjectMeta) -> Option<SystemTime> {
        let t = trigger_time(meta)?;
        let (ns, name) = sort_key(meta);
        let previous = self.seen.insert((ns.to_owned(), name.to_owned()), t);
        (previous != Some(t) && t >= self.started).then_some(t)
    }

    /// Records one watcher event in `shared`.
    fn handle(&mut self, event: watcher::Event<ApiObject<K>>, shared: &Shared) {
        use kube::Resource as _;
        let resource = RESOURCES[self.index];
        match event {
            watcher::Event::Init => {
                self.listing.clear();
                self.listing_seen.clear();
                self.listed.clear();
                self.listed_triggers.clear();
                tracing::debug!(resource, "listing");
            }
            watcher::Event::InitApply(o) => {
                let (key, version) = versioned(o.meta());
                if let Some(t) = trigger_time(o.meta()) {
                    // Against what the source held before the list, not a failed list's;
                    // once per list (a streaming list may send an object twice).
                    let again = self.listing_seen.insert(key.clone(), t) == Some(t);
                    if !again && self.seen.get(&key) != Some(&t) && t >= self.started {
                        self.listed_triggers.push(t);
                    }
                }
                // Unchanged objects (same resourceVersion) are not handed over again.
                if version.is_none() || self.current.get(&key) != Some(&version) {
                    self.listed.push(o);
                }
                self.listing.insert(key, version);
            }
            watcher::Event::InitDone => {
                self.lists += 1;
                let what = if self.lists == 1 { "listed" } else { "relisted" };
                tracing::info!(
                    resource,
                    objects = self.listing.len(),
                    changed = self.listed.len(),
                    "{what}; watching for changes"
                );
                // The list's trigger times replace the source's: those of objects it no
                // longer has, or listed without one, and of those only a list that failed
                // partway had (`Init` again), are forgotten.
                self.seen = std::mem::take(&mut self.listing_seen);
                let mut gone = Vec::new();
                for (ns, name) in self.current.keys().filter(|k| !self.listing.contains_key(*k)) {
                    let meta =
                        ObjectMeta { namespace: Some(ns.clone()), name: Some(name.clone()), ..ObjectMeta::default() };
                    gone.push(object_ref::<K>(&meta));
                }
                self.current = std::mem::take(&mut self.listing);
                // Taken, not drained: the list's buffer (the size of the whole list of typed
                // objects) is freed, not kept for the next relist.
                let listed = std::mem::take(&mut self.listed);
                shared.changed(self.index, listed, false, gone, true, self.listed_triggers.drain(..));
            }
            watcher::Event::Apply(o) => {
                tracing::debug!(resource, object = ?sort_key(o.meta()), "applied");
                let t = self.new_trigger(o.meta());
                let (key, version) = versioned(o.meta());
                let new = self.current.insert(key, version).is_none();
                shared.changed(self.index, [o], new, None, false, t);
            }
            watcher::Event::Delete(o) => {
                let (key, _) = versioned(o.meta());
                tracing::debug!(resource, object = ?key, "deleted");
                self.seen.remove(&key);
                self.current.remove(&key);
                shared.changed::<K>(self.index, None, false, [object_ref::<K>(o.meta())], false, None);
            }
        }
    }
}

/// The delay before retrying a failed list or watch: client-go's reflector backoff
/// (`wait.NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)`): 0.8 s doubling, with
/// up to 100 % jitter, never more than 30 s, back to 0.8 s only after two minutes without
/// a failure.
///
/// kube-runtime's `default_backoff()` stream adapter uses the same schedule but resets it
/// on every successful item — and the watcher yields one (`Event::Init`) at the start of
/// every relist attempt, so a list that keeps failing (a 403, an API server that is
/// down) was retried every 0.8–1.6 s forever. Here only failures and time move it.
#[derive(Default)]
pub struct RetryBackoff(watcher::DefaultBackoff);

impl Debug for RetryBackoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetryBackoff")
    }
}

impl RetryBackoff {
    /// The longest delay, jitter included (kube-runtime adds the jitter after capping,
    /// which gives up to 60 s).
    pub const MAX: Duration = Duration::from_secs(30);

    /// The longest delay after a failure the server did not answer (no connection, or
    /// the connection dropped without an HTTP response): such a retry costs the server
    /// nothing, and waiting out a 30 s step would leave the gateway blind for up to 30 s
    /// after the server is back (client-go's reflector waits the full step; issue 17
    /// wants a relist within seconds). Jittered between half of it and all of it, so
    /// that gateways do not reconnect in step.
    pub const RECONNECT_MAX: Duration = Duration::from_secs(2);

    /// The delay before the next attempt, after a failure; `answered`: the server sent
    /// an HTTP response other than 410 Gone (a status such as 403, 429 or 500, or a
    /// malformed body).
    pub fn after_failure(&mut self, answered: bool) -> Duration {
        let delay = self.0.next().unwrap_or(Self::MAX).min(Self::MAX);
        if answered || delay <= Self::RECONNECT_MAX {
            delay
        } else {
            Self::RECONNECT_MAX.mul_f64(0.5 + fastrand::f64() / 2.0)
        }
    }
}

/// Whether a failure waits the full step of client-go's schedule: the server answered
/// with an HTTP response (an API status, also one inside a watch stream, or a body that
/// could not be read as one). Connection errors (refused, reset, timed out, TLS) and a
/// stream cut mid-way are not answers, and neither is 410 Gone: it says "relist", which
/// a restarted API server answers to every watch resumed from before its restart, and
/// the relist (`resourceVersion=0`) is served from its watch cache.
fn waits_full_step(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            !matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_))
        }
        watcher::Error::WatchError(status) => status.code != 410,
        watcher::Error::NoResourceVersion => true,
    }
}

/// One resource's watcher loop: records changes and trigger times in `shared`
/// ([`Tracker`]), logs errors and waits [`RetryBackoff`] after each before polling the
/// watcher again (which then resumes the watch or relists).
async fn run_watch<K: Kind>(
    api: Api<ApiObject<K>>,
    config: watcher::Config,
    index: usize,
    shared: Arc<Shared>,
    started: SystemTime,
) {
    let resource = RESOURCES[index];
    let stream = watcher(api, config);
    let mut stream = std::pin::pin!(stream);
    let mut tracker = Tracker::<K>::new(index, started);
    let mut backoff = RetryBackoff::default();
    while let Some(item) = stream.next().await {
        let e = match item {
            Ok(event) => {
                tracker.handle(event, &shared);
                continue;
            }
            Err(e) => e,
        };
        let delay = backoff.after_failure(waits_full_step(&e));
        match e {
            watcher::Error::WatchError(status) if status.code == 410 => {
                tracing::warn!(resource, "watch expired (410 Gone: {}); relisting in {delay:.1?}", status.message);
            }
            e => tracing::warn!(resource, "watch failed: {e}; retrying in {delay:.1?}"),
        }
        tokio::time::sleep(delay).await;
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

    /// The schedule; the reset after two quiet minutes is kube-runtime's
    /// `ResetTimerBackoff`, tested there.
    #[tokio::test]
    async fn retry_backoff_doubles_to_30_s_with_jitter() {
        let mut b = RetryBackoff::default();
        let delays: Vec<f64> = (0..8).map(|_| b.after_failure(true).as_secs_f64()).collect();
        // 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30 s, each with up to 100 % jitter on top,
        // capped at 30 s.
        for (i, d) in delays.iter().enumerate() {
            let base = (0.8 * 2_f64.powi(i32::try_from(i).unwrap())).min(30.0);
            assert!(*d >= base - 1e-9 && *d <= (2.0 * base).min(30.0) + 1e-9, "attempt {i}: {d} s ({delays:?})");
        }
    }

    /// Issue 17: while the server does not answer, the retries keep doubling but never
    /// wait more than `RECONNECT_MAX` (jittered); an answer afterwards waits the full step.
    #[tokio::test]
    async fn retries_without_an_answer_wait_seconds_not_a_30_s_step() {
        let mut b = RetryBackoff::default();
        let max = RetryBackoff::RECONNECT_MAX.as_secs_f64();
        for i in 0..8 {
            let d = b.after_failure(false).as_secs_f64();
            assert!(d <= max + 1e-9, "attempt {i}: {d} s");
            if i >= 2 {
                assert!(d >= max / 2.0 - 1e-9, "attempt {i}: {d} s");
            }
        }
        let answered = b.after_failure(true).as_secs_f64();
        assert!(answered >= 30.0 - 1e-9, "{answered} s");
    }

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

/// The watch bookkeeping ([`Tracker`], [`Batch`]) against a from-scratch compile: random
/// adds, modifications, deletions, malformed objects and relists (after 410 Gone: some
/// objects changed, deleted or added meanwhile, their events lost) handed over in random
/// batches to [`crate::compile::Compiler::apply`] end in the table [`crate::compile::compile`]
/// builds from the objects the API holds.
#[cfg(test)]
mod delta_tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::compile::{CompileOptions, Compiler};
    use crate::model::Objects;

    /// xorshift64*.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    /// The API server: objects by identity, as JSON, and the resourceVersion counter.
    #[derive(Default)]
    struct Api {
        services: BTreeMap<String, serde_json::Value>,
        slices: BTreeMap<String, serde_json::Value>,
        version: u64,
        /// Whether Services may have a selector (then a new one waits for its first
        /// EndpointSlice: [`Batch::held`]).
        selectors: bool,
    }

    impl Api {
        fn next_version(&mut self) -> String {
            self.version += 1;
            self.version.to_string()
        }

        fn service(&mut self, rng: &mut Rng, i: u64) -> serde_json::Value {
            let port = if rng.chance(5) { json!("eighty") } else { json!(80 + rng.below(2)) }; // malformed sometimes
            let mut spec = json!({"externalIPs": [format!("192.0.2.{}", i % 4)],
                                  "ports": [{"name": "http", "port": port, "protocol": "TCP"}]});
            if rng.chance(20) {
                spec["type"] = json!("NodePort");
                spec["ports"][0]["nodePort"] = json!(30000 + i);
            }
            if self.selectors && rng.chance(70) {
                spec["selector"] = json!({"app": format!("s{i}")});
            }
            json!({"apiVersion": "v1", "kind": "Service", "spec": spec,
                   "metadata": {"name": format!("s{i}"), "namespace": "d", "resourceVersion": self.next_version()}})
        }

        fn slice(&mut self, rng: &mut Rng, i: u64, j: u64) -> serde_json::Value {
            let endpoints: Vec<_> = (0..rng.below(4))
                .map(|_| {
                    json!({"addresses": [format!("10.0.{i}.{}", 1 + rng.below(6))],
                           "conditions": {"ready": rng.chance(80)}})
                })
                .collect();
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                   "metadata": {"name": format!("s{i}-{j}"), "namespace": "d", "resourceVersion": self.next_version(),
                                "labels": {"kubernetes.io/service-name": format!("s{i}")}},
                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": endpoints})
        }

        /// Every valid object, as a from-scratch compile sees it.
        fn objects(&self) -> Vec<KubeObject> {
            let services = self.services.values().filter_map(|v| serde_json::from_value(v.clone()).ok());
            let slices = self.slices.values().filter_map(|v| serde_json::from_value(v.clone()).ok());
            services
                .map(|s| KubeObject::Service(Box::new(s)))
                .chain(slices.map(|s| KubeObject::EndpointSlice(Box::new(s))))
                .collect()
        }

        fn malformed(&self) -> usize {
            self.services.values().filter(|v| serde_json::from_value::<core::Service>((*v).clone()).is_err()).count()
        }
    }

    fn lenient<K: Kind>(v: &serde_json::Value) -> ApiObject<K> {
        serde_json::from_value(v.clone()).unwrap()
    }

    fn relist<K: Kind>(tracker: &mut Tracker<K>, shared: &Shared, objects: &BTreeMap<String, serde_json::Value>) {
        relist_interrupted(tracker, shared, objects, None);
    }

    /// A relist; with `interrupt`, first a list that fails after some of its objects and,
    /// at random, one that is deleted before the list starts over (kube-rs's watcher then
    /// starts over with another `Init`: a paged list whose later page fails, or a streaming
    /// list whose watch breaks).
    fn relist_interrupted<K: Kind>(
        tracker: &mut Tracker<K>,
        shared: &Shared,
        objects: &BTreeMap<String, serde_json::Value>,
        interrupt: Option<&mut Rng>,
    ) {
        if let Some(rng) = interrupt {
            tracker.handle(watcher::Event::Init, shared);
            let listed = rng.below(objects.len() as u64 + 1) as usize;
            for v in objects.values().take(listed) {
                tracker.handle(watcher::Event::InitApply(lenient(v)), shared);
            }
            if let Some(v) = objects.values().next().filter(|_| rng.chance(50)) {
                // An object deleted before the list starts over: it must not be handed over.
                let mut gone = v.clone();
                gone["metadata"]["name"] = json!("gone");
                tracker.handle(watcher::Event::InitApply(lenient(&gone)), shared);
            }
        }
        tracker.handle(watcher::Event::Init, shared);
        for v in objects.values() {
            tracker.handle(watcher::Event::InitApply(lenient(v)), shared);
        }
        tracker.handle(watcher::Event::InitDone, shared);
    }

    #[test]
    fn changes_and_relists_end_in_the_table_of_a_from_scratch_compile() {
        let walked = random_walks(Duration::ZERO, false);
        assert!(walked.relists > 48, "{walked:?}");
    }

    /// As above with new Services held for their first EndpointSlice (the daemon's
    /// default, [`KubeSettings::new_service_wait`]; here an hour, released at hand-overs
    /// chosen at random as if the wait had passed) and lists that fail partway and start
    /// over: once nothing is held, the compiled table is again the from-scratch one.
    #[test]
    fn held_services_and_interrupted_lists_end_in_the_table_of_a_from_scratch_compile() {
        let walked = random_walks(Duration::from_secs(3600), true);
        assert!(walked.relists > 48 && walked.held > 32 && walked.checks > 480, "{walked:?}");
    }

    /// What [`random_walks`] went through, for the tests to check their coverage.
    #[derive(Debug, Default)]
    struct Walked {
        relists: usize,
        /// Hand-overs that kept a new Service back.
        held: usize,
        /// Hand-overs compared with the from-scratch compile.
        checks: usize,
    }

    /// 48 random walks of watch events and relists (see the module documentation), each
    /// hand-over applied to an incremental compiler; whenever no Service is held back, and
    /// at each walk's end (every wait over), the compiled state must be the from-scratch
    /// compile of what the API holds. `wait`: the new-Service wait (zero: none is held;
    /// else Services get selectors and a hand-over releases the held ones at random);
    /// `interrupt`: lists sometimes fail partway.
    fn random_walks(wait: Duration, interrupt: bool) -> Walked {
        let options = CompileOptions { node_name: "gw".into(), ..Default::default() };
        let mut walked = Walked::default();
        for seed in 0..48u64 {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x1000_0000_01b3) | 1);
            let shared = Shared { new_service_wait: wait, ..Shared::default() };
            let mut services = Tracker::<core::Service>::new(0, UNIX_EPOCH);
            let mut slices = Tracker::<discovery::EndpointSlice>::new(1, UNIX_EPOCH);
            let mut nodes = Tracker::<core::Node>::new(2, UNIX_EPOCH);
            let mut api = Api { selectors: !wait.is_zero(), ..Api::default() };
            for i in 0..rng.below(6) {
                let s = api.service(&mut rng, i);
                api.services.insert(format!("s{i}"), s);
                let e = api.slice(&mut rng, i, 0);
                api.slices.insert(format!("s{i}-0"), e);
            }
            relist(&mut services, &shared, &api.services);
            relist(&mut slices, &shared, &api.slices);
            relist(&mut nodes, &shared, &BTreeMap::new());
            let mut compiler = Compiler::new(options.clone());
            for step in 0..40 {
                // One event, or a relist that misses some events.
                let watched = !rng.chance(10);
                let i = rng.below(8);
                let j = rng.below(2);
                match rng.below(6) {
                    0 | 1 => {
                        let s = api.service(&mut rng, i);
                        api.services.insert(format!("s{i}"), s.clone());
                        if watched {
                            services.handle(watcher::Event::Apply(lenient(&s)), &shared);
                        }
                    }
                    2 | 3 => {
                        let e = api.slice(&mut rng, i, j);
                        api.slices.insert(format!("s{i}-{j}"), e.clone());
                        if watched {
                            slices.handle(watcher::Event::Apply(lenient(&e)), &shared);
                        }
                    }
                    4 => {
                        if let Some(s) = api.services.remove(&format!("s{i}")) {
                            if watched {
                                services.handle(watcher::Event::Delete(lenient(&s)), &shared);
                            }
                        }
                    }
                    _ => {
                        if let Some(e) = api.slices.remove(&format!("s{i}-{j}")) {
                            if watched {
                                slices.handle(watcher::Event::Delete(lenient(&e)), &shared);
                            }
                        }
                    }
                }
                if !watched || rng.chance(5) {
                    // 410 Gone: both resources relist.
                    walked.relists += 1;
                    let interrupted = interrupt && rng.chance(30);
                    relist_interrupted(&mut services, &shared, &api.services, interrupted.then_some(&mut rng));
                    let interrupted = interrupt && rng.chance(30);
                    relist_interrupted(&mut slices, &shared, &api.slices, interrupted.then_some(&mut rng));
                }
                if rng.chance(60) {
                    let batch = {
                        let mut b = shared.lock();
                        if !b.held.is_empty() && rng.chance(50) {
                            // The wait has passed for every held Service.
                            b.release_held(Instant::now() + 2 * wait);
                        }
                        walked.held += usize::from(!b.held.is_empty());
                        b.take()
                    };
                    crate::daemon::Input::Changes(batch).compile(&mut compiler);
                    if !shared.lock().held.is_empty() {
                        // Held back: the compile lacks those Services (and, for a
                        // Service that had been deleted and comes again, still has it).
                        continue;
                    }
                    walked.checks += 1;
                    same_as_from_scratch(&compiler, &api, &options, &format!("seed {seed} step {step}"));
                }
            }
            // The walk's end: every wait over, everything handed over.
            let batch = {
                let mut b = shared.lock();
                b.release_held(Instant::now() + 2 * wait);
                assert!(b.held.is_empty(), "seed {seed}");
                b.take()
            };
            crate::daemon::Input::Changes(batch).compile(&mut compiler);
            same_as_from_scratch(&compiler, &api, &options, &format!("seed {seed} at the end"));
        }
        walked
    }

    /// Asserts that `compiler` holds what a from-scratch compile of `api`'s objects gives.
    fn same_as_from_scratch(compiler: &Compiler, api: &Api, options: &CompileOptions, at: &str) {
        let (objects, _) = Objects::from_kube(&api.objects());
        let expected = crate::compile::compile(&objects, options);
        let got = compiler.compiled();
        assert_eq!(got.frontends, expected.frontends, "{at}");
        assert_eq!(compiler.table_spec(), &expected.to_table_spec(), "{at}");
        let malformed = got.errors.iter().filter(|e| e.contains("expected i32")).count();
        assert_eq!(malformed, api.malformed(), "{at}: {:?}", got.errors);
    }

    /// A tracker remembers trigger times only of the objects it holds (`Tracker::seen`):
    /// not of one listed by a list that failed partway and gone by the time it restarted;
    /// and the times the failed list saw count when the list that completes sees them.
    #[test]
    fn an_interrupted_list_neither_keeps_nor_swallows_trigger_times() {
        let shared = Shared::default();
        let mut tracker = Tracker::<discovery::EndpointSlice>::new(1, UNIX_EPOCH);
        let mut rng = Rng(11);
        let mut api = Api::default();
        let annotated = |mut e: serde_json::Value| {
            e["metadata"]["annotations"] = json!({TRIGGER_TIME_ANNOTATION: "2026-11-28T16:00:00Z"});
            e
        };
        for i in 0..3 {
            let e = annotated(api.slice(&mut rng, i, 0));
            api.slices.insert(format!("s{i}"), e);
        }
        // The first list fails after s0 and s1; s1 is deleted before it starts over.
        tracker.handle(watcher::Event::Init, &shared);
        for v in api.slices.values().take(2) {
            tracker.handle(watcher::Event::InitApply(lenient(v)), &shared);
        }
        api.slices.remove("s1");
        relist(&mut tracker, &shared, &api.slices);
        let mut seen: Vec<&str> = tracker.seen.keys().map(|(_, name)| name.as_str()).collect();
        seen.sort_unstable();
        assert_eq!(seen, ["s0-0", "s2-0"]);
        let batch = shared.lock().take();
        assert_eq!(batch.objects.len(), 2);
        // s0's time, listed by the failed list too, counts once the list completes.
        assert_eq!(batch.triggers.map(|t| t.count), Some(2));
        // Listed again unchanged: the times counted already.
        relist(&mut tracker, &shared, &api.slices);
        assert_eq!(shared.lock().take().triggers, None);
    }

    #[test]
    fn a_relist_hands_over_only_what_changed() {
        let shared = Shared::default();
        let mut tracker = Tracker::<discovery::EndpointSlice>::new(1, UNIX_EPOCH);
        let mut rng = Rng(7);
        let mut api = Api::default();
        for i in 0..4 {
            let e = api.slice(&mut rng, i, 0);
            api.slices.insert(format!("s{i}"), e);
        }
        relist(&mut tracker, &shared, &api.slices);
        assert_eq!(shared.lock().take().objects.len(), 4);
        // Meanwhile: s1 modified, s2 deleted, s9 added; s0 and s3 unchanged.
        let e = api.slice(&mut rng, 1, 0);
        api.slices.insert("s1".into(), e);
        api.slices.remove("s2");
        let e = api.slice(&mut rng, 9, 0);
        api.slices.insert("s9".into(), e);
        relist(&mut tracker, &shared, &api.slices);
        let batch = shared.lock().take();
        let got: Vec<(String, bool)> = batch.objects.iter().map(|(r, o)| (r.name.clone(), o.is_some())).collect();
        assert_eq!(got, [("s1-0".into(), true), ("s2-0".into(), false), ("s9-0".into(), true)]);
    }
}
