//! The compiler: validated objects in, front doors with their backends out.
//!
//! [`compile`] is pure and deterministic: no I/O, no clock, no randomness; its inputs are
//! sorted ([`Objects`] keeps them so) and so is its output, which makes it golden-testable.
//! [`Compiled`] serialises to the JSON that `torii-control compile` prints (the operator's
//! contract, see [`Compiled`]) and converts to the gateway's [`TableSpec`].
//! [`Compiler`] computes the same result incrementally, object change by object change,
//! for the daemon (see its documentation).
//!
//! The semantics are kube-proxy's (the Kubernetes "Service" and "Virtual IPs and Service
//! Proxies" documentation; `pkg/proxy` in kubernetes/kubernetes):
//!
//! - **Which Services.** Headless Services (`clusterIP: None`) and `type: ExternalName`
//!   are not proxied. The label `service.kubernetes.io/service-proxy-name` assigns a
//!   Service to another proxy: with [`CompileOptions::proxy_name`] set, only the Services
//!   labelled with that name are served; without it, only the Services without the label
//!   (kube-proxy's informers select `!service.kubernetes.io/service-proxy-name`,
//!   `cmd/kube-proxy/app/server.go`).
//! - **Front doors**, per Service port: every ClusterIP (only with
//!   [`CompileOptions::cluster_ips`]); every `spec.externalIPs[]`; every
//!   `status.loadBalancer.ingress[].ip` whose `ipMode` is not `Proxy` — and, when
//!   [`CompileOptions::load_balancer_class`] is set, only of Services whose
//!   `spec.loadBalancerClass` is that class (kube-proxy ignores the class; DESIGN.md asks
//!   to honour it when configured: another implementation owns the other classes'
//!   load balancers); and, for type NodePort and LoadBalancer, the port's `nodePort` on the
//!   InternalIP and ExternalIP addresses of the Node named [`CompileOptions::node_name`]
//!   that [`CompileOptions::node_port_addresses`] selects (kube-proxy's
//!   `--nodeport-addresses`, `pkg/proxy/util/nodeport_addresses.go`). Only in the address
//!   families of the Service's ClusterIPs, as kube-proxy (all families when a manifest
//!   gives no ClusterIP).
//! - **Endpoints**: every EndpointSlice labelled `kubernetes.io/service-name: <service>` in
//!   the Service's namespace, of the front door's address family. A Service port matches
//!   the slice port of the same name and protocol (so named `targetPort`s resolve per
//!   endpoint); the backend port is the slice port's number. An endpoint's first address
//!   is its backend (`pkg/proxy/endpointslicecache.go`). Endpoints with addresses the API
//!   forbids were left out by [`crate::model`].
//! - **Endpoint choice** is kube-proxy's `CategorizeEndpoints` (`pkg/proxy/topology.go`):
//!   - Cluster traffic policy: the ready endpoints, narrowed by topology hints when every
//!     ready endpoint carries hints of a kind and one of them names the gateway: node
//!     hints (`hints.forNodes`, mode `PreferSameNode`) for the gateway's node first, else
//!     zone hints (`hints.forZones`, `PreferSameZone`) for the gateway Node's
//!     `topology.kubernetes.io/zone` label; if no endpoint is ready, the
//!     serving-and-terminating ones (no topology). kube-proxy's current code applies hints
//!     whenever they are present, without looking at the Service's `trafficDistribution`
//!     or `service.kubernetes.io/topology-mode` annotation: the EndpointSlice controller
//!     only writes hints for Services that ask for them (older kube-proxies checked the
//!     annotation in `canUseTopology`; that check was removed when the hints graduated).
//!   - Local traffic policy (`externalTrafficPolicy: Local` for NodePort, ExternalIP and
//!     LoadBalancer front doors, `internalTrafficPolicy: Local` for ClusterIPs): the ready
//!     endpoints whose `nodeName` is the gateway's node, else the local
//!     serving-and-terminating ones; never topology.
//!   - Draining endpoints: the Service port's other `serving` endpoints of the family —
//!     terminating ones while ready ones exist, and ready ones a `Local` policy or
//!     topology leaves out — are carried as `draining`: never chosen for a new flow, but
//!     flows already steered to them keep them across table changes. This is kube-proxy's
//!     rule for established flows: conntrack entries (and with them the NAT) outlive rule
//!     changes, and the only ones it clears are UDP entries to endpoints that are no longer
//!     `serving`, "not taking traffic policies, topology, or terminating status into
//!     account" (`pkg/proxy/conntrack/cleanup.go`, `CleanStaleEntries`). An endpoint that
//!     left the slice, or is `serving: false`, is not carried: its flows end (TCP RST,
//!     UDP re-steered; DESIGN.md).
//!   - No endpoint left: the front door has no backends and rejects (ICMP port
//!     unreachable, TCP RST). kube-proxy rejects too when the Service has no usable
//!     endpoint at all, but *drops* external traffic when only a `Local` policy leaves none
//!     (`pkg/proxy/iptables/proxier.go`, "externalTrafficFilterTarget = DROP": the cloud
//!     load balancer's health check on the `healthCheckNodePort` steers clients to nodes
//!     with local endpoints, and a drop lets a misrouted SYN be retried). torii rejects in
//!     both cases: a gateway is not behind such a health check (it serves no
//!     `healthCheckNodePort`), so a drop would only make clients wait for their timeout.
//! - `sessionAffinity: ClientIP` gives the backend set an affinity timeout.
//! - **`loadBalancerSourceRanges`** (or its deprecated annotation, see
//!   [`crate::model::Service::load_balancer_source_ranges`]) restricts the clients of the
//!   Service's LoadBalancer front doors only — not its externalIPs, NodePorts or
//!   ClusterIPs — as kube-proxy's firewall chain applies to the load-balancer VIPs only
//!   (`pkg/proxy/iptables/proxier.go`, `usesFWChain`; `pkg/proxy/nftables/proxier.go`,
//!   the `firewall-ips` set). Each front door gets the ranges of its own address family
//!   (`MapCIDRsByIPFamily` in `pkg/proxy/serviceport.go`); a family without ranges is not
//!   restricted (kube-proxy), and a warning says so when the other family is — unless an
//!   entry could not be read ([`crate::model::Service::source_ranges_unreadable`]): then a family without
//!   a readable range is closed, its load-balancer IPs not served, with an error (torii
//!   fails closed where kube-proxy, ignoring the entry, would admit everyone). The data
//!   plane checks new flows only (kube-proxy's firewall matches `ctstate NEW`), so a
//!   change of the ranges leaves established flows alone; a denied client is dropped
//!   silently, also when the Service has no endpoint (kube-proxy would reject it there,
//!   as its firewall chain exists only with endpoints; torii tells a denied client
//!   nothing).
//! - **Addresses at the gateway's SNAT addresses** ([`CompileOptions::snat_addresses`]):
//!   ClusterIP, externalIP and load-balancer front doors there, and endpoints there, are
//!   not served, each with an error (replies to a SNAT address belong to translated
//!   flows). NodePorts on the gateway's node addresses are served whatever they are.
//! - Two Services claiming one front door (address, protocol, port): the Service that
//!   sorts first by namespace/name keeps it; the other loses that front door, with an
//!   error naming both.

mod incremental;

use std::collections::{BTreeMap, BTreeSet};

// aHash rather than SipHash: these maps are probed for every object of every compile.
use ahash::AHashMap as HashMap;
use std::net::IpAddr;
use std::sync::Arc;

pub use crate::config::NodePortAddresses;
use serde::{Serialize, Serializer};
use torii_table::{BackendSpec, FrontendKind, FrontendSpec, IpCidr, Protocol, ServiceSpec, TableSpec};

pub use incremental::{Change, Compiler, CompilerStats};

use crate::model::{
    EndpointSlice, IpMode, Node, Objects, Service, ServiceKey, ServicePort, ServiceType, TargetPort, TrafficPolicy,
};

/// The label that assigns a Service to a proxy implementation (kube-proxy serves only the
/// Services without it).
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";

/// What the compiler needs to know about the gateway it compiles for. `Default` is a
/// gateway with an empty node name and every other option off (kube-proxy's defaults), so
/// that callers can write `CompileOptions { node_name, ..Default::default() }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// The Kubernetes Node this gateway is: NodePorts are served on its addresses, `Local`
    /// traffic policies keep the endpoints on it, and topology hints are matched against
    /// its name and its `topology.kubernetes.io/zone` label.
    pub node_name: String,
    /// Serve ClusterIPs as front doors too.
    pub cluster_ips: bool,
    /// Serve only the Services labelled `service.kubernetes.io/service-proxy-name: <this>`;
    /// `None`: only the Services without that label (configuration key
    /// `[control] proxy_name`).
    pub proxy_name: Option<String>,
    /// Serve load-balancer front doors only of Services with `spec.loadBalancerClass` equal
    /// to this; `None`: of every Service (configuration key `[control] load_balancer_class`).
    pub load_balancer_class: Option<String>,
    /// Which Node addresses serve NodePorts (configuration key
    /// `[control] node_port_addresses`).
    pub node_port_addresses: NodePortAddresses,
    /// The gateway's SNAT addresses (`snat.addresses` of its configuration): a ClusterIP,
    /// externalIP or load-balancer IP equal to one is not served, nor is an endpoint at
    /// one (replies to the SNAT address belong to translated flows); each with an error.
    pub snat_addresses: Vec<IpAddr>,
}

/// The compiled table, as `torii-control compile` prints it (JSON, via serde):
///
/// ```json
/// {
///   "frontends": [
///     {
///       "ip": "203.0.113.10", "protocol": "TCP", "port": 80, "kind": "ExternalIP",
///       "service": "demo/web", "port_name": "http", "target_port": "http",
///       "traffic_policy": "Cluster", "session_affinity_timeout_s": null,
///       "endpoints": "ready", "topology": null, "source_ranges": [],
///       "backends": [{"ip": "10.70.0.11", "port": 8080}],
///       "draining": [{"ip": "10.70.0.12", "port": 8080}]
///     }
///   ],
///   "errors": ["…"],
///   "warnings": ["…"]
/// }
/// ```
///
/// `frontends` is sorted by ip (numerically, IPv4 before IPv6), protocol (TCP, UDP, SCTP),
/// port, then service; `source_ranges` by address, then prefix length; `backends` and
/// `draining` by ip, then port. See [`Frontend`] for each field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Compiled {
    /// Every front door, sorted.
    pub frontends: Vec<Frontend>,
    /// Objects and front doors that were skipped, and why. [`compile`] reports its own
    /// (duplicate front doors); [`crate::compile_loaded`] puts the source's and the
    /// model's first.
    pub errors: Vec<String>,
    /// Things that are served, but maybe not as intended (e.g. NodePorts without a Node
    /// object for the gateway).
    pub warnings: Vec<String>,
}

/// Where a front door's backends came from (kube-proxy's endpoint categories).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum EndpointCategory {
    /// Ready endpoints.
    #[serde(rename = "ready")]
    Ready,
    /// No endpoint was ready: serving-and-terminating ones, so that connections drain
    /// instead of failing.
    #[serde(rename = "serving-terminating")]
    ServingTerminating,
    /// No usable endpoint: the front door rejects.
    #[serde(rename = "none")]
    None,
}

/// How topology hints narrowed a front door's ready endpoints (kube-proxy's topology
/// modes, named like the `trafficDistribution` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Topology {
    /// To the endpoints hinted for the gateway's zone (`hints.forZones`).
    PreferSameZone,
    /// To the endpoints hinted for the gateway's node (`hints.forNodes`).
    PreferSameNode,
}

/// One front door and the backends it forwards to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frontend {
    /// The address (IPv4 or IPv6) the front door listens on; JSON: a string.
    pub ip: IpAddr,
    /// `"TCP"`, `"UDP"` or `"SCTP"`.
    #[serde(serialize_with = "ser_protocol")]
    pub protocol: Protocol,
    /// The destination port: the Service port, or the nodePort for NodePort front doors.
    pub port: u16,
    /// `"ClusterIP"`, `"ExternalIP"`, `"LoadBalancer"` or `"NodePort"`.
    #[serde(serialize_with = "ser_kind")]
    pub kind: FrontendKind,
    /// `namespace/name` of the Service.
    pub service: String,
    /// The Service port's name, `""` when unnamed.
    pub port_name: String,
    /// The Service port's `targetPort` as written: a number or a container port name
    /// (informational; the backends carry the resolved ports).
    pub target_port: TargetPortJson,
    /// The traffic policy that applies to this front door: `"Cluster"` or `"Local"`.
    #[serde(serialize_with = "ser_policy")]
    pub traffic_policy: TrafficPolicy,
    /// `sessionAffinity: ClientIP` timeout in seconds, `null` without affinity.
    pub session_affinity_timeout_s: Option<u32>,
    /// Which endpoints the backends are: `"ready"`, `"serving-terminating"` or `"none"`.
    pub endpoints: EndpointCategory,
    /// `"PreferSameZone"` or `"PreferSameNode"` when topology hints narrowed the ready
    /// endpoints to the gateway's zone or node; `null` otherwise.
    pub topology: Option<Topology>,
    /// The client ranges admitted for new flows (CIDR strings, `"192.0.2.0/24"`), sorted
    /// and deduplicated: the Service's `loadBalancerSourceRanges` of this front door's
    /// address family, on LoadBalancer front doors only. Empty: every client.
    #[serde(serialize_with = "ser_cidrs")]
    pub source_ranges: Vec<IpCidr>,
    /// Backends, sorted; empty when the front door rejects. Shared by the front doors of
    /// one Service port and traffic policy (a list is held once however many front doors
    /// and copies of them there are).
    #[serde(serialize_with = "ser_backends")]
    pub backends: Arc<[Backend]>,
    /// Draining endpoints, sorted: serving endpoints that are not backends (see the module
    /// documentation). New flows never go to them; established flows keep them.
    #[serde(serialize_with = "ser_backends")]
    pub draining: Arc<[Backend]>,
}

impl Frontend {
    /// The front door's identity: (address, protocol, port).
    pub fn key(&self) -> DoorKey {
        (self.ip, self.protocol, self.port)
    }

    /// The name of its backend set in the table: `namespace/name:port-name`.
    pub fn table_name(&self) -> String {
        format!("{}:{}", self.service, self.port_name)
    }
}

/// A front door's identity: (address, protocol, port).
pub type DoorKey = (IpAddr, Protocol, u16);

/// A `targetPort` in the JSON output: a number or a name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TargetPortJson {
    /// A port number.
    Number(u16),
    /// A container port name.
    Name(String),
}

impl From<&TargetPort> for TargetPortJson {
    fn from(t: &TargetPort) -> Self {
        match t {
            TargetPort::Number(n) => Self::Number(*n),
            TargetPort::Name(s) => Self::Name(s.clone()),
        }
    }
}

/// One backend: an endpoint address and the port it listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Backend {
    /// Endpoint address; JSON: a string.
    pub ip: IpAddr,
    /// Endpoint port.
    pub port: u16,
}

impl From<Backend> for BackendSpec {
    fn from(b: Backend) -> Self {
        BackendSpec { addr: b.ip, port: b.port }
    }
}

fn ser_protocol<S: Serializer>(p: &Protocol, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}

fn ser_kind<S: Serializer>(k: &FrontendKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.as_str())
}

fn ser_policy<S: Serializer>(p: &TrafficPolicy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}

fn ser_backends<S: Serializer>(backends: &Arc<[Backend]>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(backends.iter())
}

fn ser_cidrs<S: Serializer>(cidrs: &[IpCidr], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(cidrs.iter().map(ToString::to_string))
}

impl Compiled {
    /// The table the gateway serves: one [`FrontendSpec`] per front door, in the order of
    /// [`Compiled::frontends`]; front doors of one Service port with the same backends,
    /// draining endpoints and affinity share one [`ServiceSpec`] (one Maglev ring), named
    /// `namespace/name:port-name`. Services are sorted by (name, backends, draining,
    /// affinity), an order that adding or removing one front door changes only locally
    /// ([`Compiler`] maintains the same spec).
    pub fn to_table_spec(&self) -> TableSpec {
        let mut keys: BTreeMap<ServiceSpecKey<'_>, usize> = BTreeMap::new();
        let names: Vec<String> = self.frontends.iter().map(Frontend::table_name).collect();
        for (f, name) in self.frontends.iter().zip(&names) {
            keys.insert(ServiceSpecKey::of(f, name), 0);
        }
        let mut spec =
            TableSpec { frontends: Vec::with_capacity(self.frontends.len()), services: Vec::with_capacity(keys.len()) };
        for (i, (k, index)) in keys.iter_mut().enumerate() {
            *index = i;
            spec.services.push(k.to_spec());
        }
        for (f, name) in self.frontends.iter().zip(&names) {
            let service = keys[&ServiceSpecKey::of(f, name)];
            spec.frontends.push(frontend_spec(f, service));
        }
        spec
    }

    /// Number of distinct backends (address, port) over all front doors.
    pub fn backend_count(&self) -> usize {
        self.frontends.iter().flat_map(|f| f.backends.iter()).collect::<BTreeSet<_>>().len()
    }
}

/// The identity of a [`ServiceSpec`] in [`Compiled::to_table_spec`], in its sort order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ServiceSpecKey<'a> {
    name: &'a str,
    backends: &'a [Backend],
    draining: &'a [Backend],
    affinity: Option<u32>,
}

impl<'a> ServiceSpecKey<'a> {
    /// The backend set of front door `f`, whose table name is `name`.
    fn of(f: &'a Frontend, name: &'a str) -> Self {
        Self { name, backends: &f.backends, draining: &f.draining, affinity: f.session_affinity_timeout_s }
    }

    /// The [`ServiceSpec`] it identifies.
    fn to_spec(self) -> ServiceSpec {
        ServiceSpec {
            name: self.name.to_owned(),
            backends: self.backends.iter().map(|&b| b.into()).collect(),
            draining: self.draining.iter().map(|&b| b.into()).collect(),
            affinity_timeout_s: self.affinity,
        }
    }

    /// Orders a [`ServiceSpec`] against this key, as `to_table_spec` sorts them.
    fn cmp_spec(self, s: &ServiceSpec) -> std::cmp::Ordering {
        let bk = |b: &Backend| (b.ip, b.port);
        let sk = |b: &BackendSpec| (b.addr, b.port);
        (s.name.as_str())
            .cmp(self.name)
            .then_with(|| s.backends.iter().map(sk).cmp(self.backends.iter().map(bk)))
            .then_with(|| s.draining.iter().map(sk).cmp(self.draining.iter().map(bk)))
            .then_with(|| s.affinity_timeout_s.cmp(&self.affinity))
    }
}

/// The table record of front door `f` forwarding to service `service`.
fn frontend_spec(f: &Frontend, service: usize) -> FrontendSpec {
    FrontendSpec {
        addr: f.ip,
        port: f.port,
        protocol: f.protocol,
        kind: f.kind,
        service,
        source_ranges: f.source_ranges.clone(),
    }
}

// ---------------------------------------------------------------------------------------
// The gateway

/// What the compiler knows about the gateway itself, from its options and its Node object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Gateway {
    /// The Node object named `node_name` exists.
    node_found: bool,
    /// The Node has InternalIP or ExternalIP addresses.
    node_has_addresses: bool,
    /// The addresses NodePorts are served on (after `node_port_addresses`).
    node_port_ips: Vec<IpAddr>,
    /// The Node's `topology.kubernetes.io/zone` label.
    zone: Option<String>,
}

impl Gateway {
    fn new(node: Option<&Node>, options: &CompileOptions) -> Self {
        match node {
            None => Self::default(),
            Some(n) => Self {
                node_found: true,
                node_has_addresses: !n.internal_ips.is_empty() || !n.external_ips.is_empty(),
                node_port_ips: options.node_port_addresses.select(&n.internal_ips, &n.external_ips),
                zone: n.zone.clone().filter(|z| !z.is_empty()),
            },
        }
    }

    /// Why NodePorts cannot be served, when some Service asks for them.
    fn node_port_warning(&self, options: &CompileOptions) -> Option<String> {
        if !self.node_found {
            Some(format!(
                "no Node object named {:?}: NodePort front doors are not served; add the gateway's Node \
                 (with its InternalIP/ExternalIP addresses) or set node_name",
                options.node_name
            ))
        } else if !self.node_has_addresses {
            Some(format!(
                "Node {}: status.addresses has no InternalIP or ExternalIP: NodePort front doors are not served",
                options.node_name
            ))
        } else if self.node_port_ips.is_empty() {
            Some(format!(
                "Node {}: none of its InternalIP/ExternalIP addresses is selected by node_port_addresses \
                 ({:?}): NodePort front doors are not served",
                options.node_name, options.node_port_addresses
            ))
        } else {
            None
        }
    }
}

// ---------------------------------------------------------------------------------------
// Endpoint choice

/// Whether an endpoint carries hints of one kind (zone or node) and whether they name the
/// gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Hint {
    /// No hints of this kind.
    Absent,
    /// Hints that include the gateway's zone or node.
    ForUs,
    /// Hints for other zones or nodes only.
    ForOthers,
}

impl Hint {
    fn of(names: Option<&[String]>, ours: Option<&str>) -> Self {
        match names {
            None | Some([]) => Self::Absent,
            Some(names) if ours.is_some_and(|o| names.iter().any(|n| n == o)) => Self::ForUs,
            Some(_) => Self::ForOthers,
        }
    }
}

/// One endpoint address of a Service port, with what kube-proxy's `Endpoint` knows
/// about it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    backend: Backend,
    ready: bool,
    serving: bool,
    terminating: bool,
    /// On the gateway's own node (`nodeName == node_name`).
    local: bool,
    /// `hints.forZones` against the gateway's zone.
    zone_hint: Hint,
    /// `hints.forNodes` against the gateway's node.
    node_hint: Hint,
}

/// A chosen backend set, and the serving endpoints left out of it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Selection {
    backends: Arc<[Backend]>,
    category: EndpointCategory,
    topology: Option<Topology>,
    /// Serving endpoints (any locality, topology or terminating state) not in `backends`.
    draining: Arc<[Backend]>,
}

/// kube-proxy's `topologyModeFromHints` (pkg/proxy/topology.go): node hints when every
/// ready endpoint has some and one is for the gateway's node, else zone hints likewise,
/// else none (also when no endpoint is ready).
fn topology_mode(candidates: &[Candidate]) -> Option<Topology> {
    let mut ready = candidates.iter().filter(|c| c.ready).peekable();
    ready.peek()?;
    let ready: Vec<&Candidate> = ready.collect();
    let usable = |hint: fn(&Candidate) -> Hint| {
        ready.iter().all(|c| hint(c) != Hint::Absent) && ready.iter().any(|c| hint(c) == Hint::ForUs)
    };
    if usable(|c| c.node_hint) {
        Some(Topology::PreferSameNode)
    } else if usable(|c| c.zone_hint) {
        Some(Topology::PreferSameZone)
    } else {
        None
    }
}

/// kube-proxy's `CategorizeEndpoints` for one traffic policy: ready endpoints (narrowed by
/// topology for the Cluster policy), else serving-and-terminating ones; the other serving
/// endpoints drain (see the module documentation).
fn categorize(candidates: &[Candidate], policy: TrafficPolicy) -> Selection {
    let mut selection = choose(candidates, policy);
    let serving: BTreeSet<Backend> = candidates.iter().filter(|c| c.serving).map(|c| c.backend).collect();
    selection.draining = serving.into_iter().filter(|b| selection.backends.binary_search(b).is_err()).collect();
    selection
}

/// The backends of [`categorize`] (its `draining` left empty).
fn choose(candidates: &[Candidate], policy: TrafficPolicy) -> Selection {
    let local_only = policy == TrafficPolicy::Local;
    let topology = if local_only { None } else { topology_mode(candidates) };
    let pick = |pred: &dyn Fn(&Candidate) -> bool| -> Vec<Backend> {
        let set: BTreeSet<Backend> =
            candidates.iter().filter(|c| (!local_only || c.local) && pred(c)).map(|c| c.backend).collect();
        set.into_iter().collect()
    };
    let for_us = |c: &Candidate| match topology {
        None => true,
        Some(Topology::PreferSameNode) => c.node_hint == Hint::ForUs,
        Some(Topology::PreferSameZone) => c.zone_hint == Hint::ForUs,
    };
    let selection = |backends: Vec<Backend>, category, topology| Selection {
        backends: backends.into(),
        category,
        topology,
        draining: Arc::default(),
    };
    let ready = pick(&|c| c.ready && for_us(c));
    if !ready.is_empty() {
        return selection(ready, EndpointCategory::Ready, topology);
    }
    let terminating = pick(&|c| c.serving && c.terminating);
    if !terminating.is_empty() {
        return selection(terminating, EndpointCategory::ServingTerminating, None);
    }
    selection(Vec::new(), EndpointCategory::None, None)
}

/// The endpoints of one Service port in one address family.
fn candidates(
    slices: &[&EndpointSlice],
    port: &ServicePort,
    ipv4: bool,
    gw: &Gateway,
    options: &CompileOptions,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for slice in slices {
        // kube-proxy matches by port name and protocol; a port without a number is skipped.
        let Some(number) =
            slice.ports.iter().find(|p| p.name == port.name && p.protocol == port.protocol).and_then(|p| p.port)
        else {
            continue;
        };
        for ep in &slice.endpoints {
            // kube-proxy uses only an endpoint's first address (the EndpointSlice API says
            // consumers must use the first; the others are reserved for future use).
            let ip = ep.address;
            if ip.is_ipv4() != ipv4 {
                continue;
            }
            if options.snat_addresses.contains(&ip) {
                continue; // reported by `Draft::new`
            }
            let hints = ep.hints.as_ref();
            out.push(Candidate {
                backend: Backend { ip, port: number },
                ready: ep.ready,
                serving: ep.serving,
                terminating: ep.terminating,
                local: !options.node_name.is_empty() && ep.node_name.as_deref() == Some(options.node_name.as_str()),
                zone_hint: Hint::of(hints.map(|h| h.for_zones.as_slice()), gw.zone.as_deref()),
                node_hint: Hint::of(hints.map(|h| h.for_nodes.as_slice()), Some(options.node_name.as_str())),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// One Service: its front doors before ownership (a draft), then after (its output)

/// A front door before endpoint selection.
struct Door {
    ip: IpAddr,
    port: u16,
    kind: FrontendKind,
}

/// Whether `svc` is proxied in the address family of `ip`. kube-proxy proxies a Service
/// only in the families it has a ClusterIP of (`spec.ipFamilies`); a Service without any
/// ClusterIP (a hand-written manifest may leave it out) is served in both.
fn in_family(svc: &Service, ip: IpAddr) -> bool {
    svc.cluster_ips.is_empty() || svc.cluster_ips.iter().any(|c| c.is_ipv4() == ip.is_ipv4())
}

/// The ranges of `ranges` in the address family of `ip`, sorted and deduplicated.
fn source_ranges_for(ranges: &[IpCidr], ip: IpAddr) -> Vec<IpCidr> {
    let set: BTreeSet<IpCidr> = ranges.iter().filter(|c| c.addr.is_ipv4() == ip.is_ipv4()).copied().collect();
    set.into_iter().collect()
}

/// The Service field a front door of `kind` comes from, for messages.
fn door_field(kind: FrontendKind) -> &'static str {
    match kind {
        FrontendKind::ClusterIp => "spec.clusterIPs",
        FrontendKind::ExternalIp => "spec.externalIPs",
        FrontendKind::LoadBalancer => "status.loadBalancer.ingress[].ip",
        FrontendKind::NodePort => "spec.ports[].nodePort",
    }
}

/// Whether `svc` is one this gateway serves at all (see the module documentation).
fn is_served(svc: &Service, options: &CompileOptions) -> bool {
    if svc.headless {
        tracing::debug!(service = %svc.key, "headless Service (clusterIP: None): not proxied");
        return false;
    }
    if svc.type_ == ServiceType::ExternalName {
        tracing::debug!(service = %svc.key, "ExternalName Service: not proxied");
        return false;
    }
    let label = svc.labels.get(SERVICE_PROXY_NAME_LABEL);
    if label != options.proxy_name.as_ref() {
        tracing::debug!(service = %svc.key, ?label, "Service of another proxy ({SERVICE_PROXY_NAME_LABEL}): not proxied");
        return false;
    }
    true
}

/// Whether the load-balancer ingress of `svc` is served (`load_balancer_class`).
fn serves_load_balancer(svc: &Service, options: &CompileOptions) -> bool {
    match &options.load_balancer_class {
        None => true,
        Some(class) => svc.load_balancer_class.as_ref() == Some(class),
    }
}

/// Whether `svc` asks for NodePorts (and so needs the gateway's Node).
fn wants_node_ports(svc: &Service) -> bool {
    matches!(svc.type_, ServiceType::NodePort | ServiceType::LoadBalancer)
        && svc.ports.iter().any(|p| p.node_port.is_some())
}

/// The front doors of one Service port, in a fixed order: ClusterIPs, externalIPs,
/// load-balancer IPs, NodePorts; only in the Service's address families.
fn doors(svc: &Service, port: &ServicePort, gw: &Gateway, options: &CompileOptions) -> Vec<Door> {
    let mut out = Vec::new();
    let mut add = |ip: IpAddr, port: u16, kind| {
        if in_family(svc, ip) {
            out.push(Door { ip, port, kind });
        }
    };
    if options.cluster_ips {
        for &ip in &svc.cluster_ips {
            add(ip, port.port, FrontendKind::ClusterIp);
        }
    }
    for &ip in &svc.external_ips {
        add(ip, port.port, FrontendKind::ExternalIp);
    }
    if serves_load_balancer(svc, options) {
        for ing in &svc.load_balancer_ingress {
            if ing.ip_mode == IpMode::Vip {
                add(ing.ip, port.port, FrontendKind::LoadBalancer);
            }
        }
    }
    if matches!(svc.type_, ServiceType::NodePort | ServiceType::LoadBalancer) {
        if let Some(node_port) = port.node_port {
            for &ip in &gw.node_port_ips {
                add(ip, node_port, FrontendKind::NodePort);
            }
        }
    }
    out
}

/// A served Service's front doors with their backends, before front doors claimed by
/// several Services are given to one (a pure function of the Service, its slices, the
/// gateway and the options).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Draft {
    /// The Service asks for NodePorts.
    wants_node_ports: bool,
    /// Addresses not served because of the Service's address families.
    warnings: Vec<String>,
    /// Front doors and endpoints not served: load-balancer IPs closed by unreadable
    /// source ranges, addresses equal to a SNAT address.
    errors: Vec<String>,
    /// Every front door in claim order (ports in order; per port ClusterIPs, externalIPs,
    /// load-balancer IPs, NodePorts). A key may appear more than once. Shared with the
    /// [`Output`] (which owns most of them): a front door's backend list is held once
    /// here, once in [`Compiled`] and once in the table spec.
    doors: Vec<Arc<Frontend>>,
}

impl Draft {
    /// The front doors `svc` claims; `None` when the gateway does not serve `svc`.
    fn new(svc: &Service, slices: &[&EndpointSlice], gw: &Gateway, options: &CompileOptions) -> Option<Self> {
        if !is_served(svc, options) {
            return None;
        }
        let service = svc.key.to_string();
        let mut draft = Self { wants_node_ports: wants_node_ports(svc), ..Self::default() };
        let lb_ips = svc.load_balancer_ingress.iter().filter(|i| i.ip_mode == IpMode::Vip).map(|i| &i.ip);
        let lb_ips = lb_ips.filter(|_| serves_load_balancer(svc, options));
        for ip in svc.external_ips.iter().chain(lb_ips.clone()).filter(|ip| !in_family(svc, **ip)) {
            draft.warnings.push(format!(
                "Service {service}: {ip} is not served: the Service has no ClusterIP of its address family \
                 (spec.ipFamilies), and kube-proxy proxies a Service only in the families of its ClusterIPs"
            ));
        }
        let ranges = &svc.load_balancer_source_ranges;
        let mut open = BTreeSet::new();
        let mut closed = BTreeSet::new();
        for ip in lb_ips.filter(|ip| in_family(svc, **ip)) {
            if ranges.iter().any(|c| c.addr.is_ipv4() == ip.is_ipv4()) {
                continue;
            }
            if svc.source_ranges_unreadable {
                if closed.insert(*ip) {
                    draft.errors.push(format!(
                        "Service {service}: spec.loadBalancerSourceRanges: load balancer IP {ip} is closed to every \
                         client (not served): an entry cannot be read and no readable range is of its address \
                         family, so torii cannot tell whom to admit (kube-proxy would admit everyone)"
                    ));
                }
            } else if !ranges.is_empty() && open.insert(*ip) {
                draft.warnings.push(format!(
                    "Service {service}: load balancer IP {ip} admits every client: loadBalancerSourceRanges has no \
                     range of its address family (ranges apply per family, as in kube-proxy)"
                ));
            }
        }
        let mut snat_doors = BTreeSet::new();
        for slice in slices {
            for ep in &slice.endpoints {
                if let Some(ip) = Some(ep.address).filter(|ip| options.snat_addresses.contains(ip)) {
                    draft.errors.push(format!(
                        "EndpointSlice {}/{}: endpoints[{}].addresses[0]: {ip} is a SNAT address of this gateway \
                         (snat.addresses): replies to it belong to translated flows; endpoint skipped",
                        slice.namespace, slice.name, ep.index
                    ));
                }
            }
        }
        for port in &svc.ports {
            // Endpoint sets per (address family, policy), computed on first use.
            let mut sets: BTreeMap<(bool, TrafficPolicy), Selection> = BTreeMap::new();
            let mut family: BTreeMap<bool, Vec<Candidate>> = BTreeMap::new();
            for door in doors(svc, port, gw, options) {
                if door.kind == FrontendKind::LoadBalancer && closed.contains(&door.ip) {
                    continue;
                }
                if door.kind == FrontendKind::ClusterIp {
                    if let Some(why) = crate::model::forbidden_front_door_address(door.ip) {
                        if snat_doors.insert((door.kind, door.ip)) {
                            draft.errors.push(format!(
                                "Service {service}: spec.clusterIPs: {} {why}: it can never be a front door; \
                                 front door skipped",
                                door.ip
                            ));
                        }
                        continue;
                    }
                }
                if door.kind != FrontendKind::NodePort && options.snat_addresses.contains(&door.ip) {
                    if snat_doors.insert((door.kind, door.ip)) {
                        draft.errors.push(format!(
                            "Service {service}: {}: {} is a SNAT address of this gateway (snat.addresses): replies \
                             to it belong to translated flows; front door skipped",
                            door_field(door.kind),
                            door.ip
                        ));
                    }
                    continue;
                }
                let ipv4 = door.ip.is_ipv4();
                let policy = match door.kind {
                    FrontendKind::ClusterIp => svc.internal_traffic_policy,
                    _ => svc.external_traffic_policy,
                };
                let chosen = sets.entry((ipv4, policy)).or_insert_with(|| {
                    let c = family.entry(ipv4).or_insert_with(|| candidates(slices, port, ipv4, gw, options));
                    categorize(c, policy)
                });
                let source_ranges = match door.kind {
                    FrontendKind::LoadBalancer => source_ranges_for(ranges, door.ip),
                    _ => Vec::new(),
                };
                draft.doors.push(Arc::new(Frontend {
                    ip: door.ip,
                    protocol: port.protocol,
                    port: door.port,
                    kind: door.kind,
                    service: service.clone(),
                    port_name: port.name.clone(),
                    target_port: (&port.target_port).into(),
                    traffic_policy: policy,
                    session_affinity_timeout_s: svc.session_affinity.timeout_s(),
                    endpoints: chosen.category,
                    topology: chosen.topology,
                    source_ranges,
                    backends: chosen.backends.clone(),
                    draining: chosen.draining.clone(),
                }));
            }
        }
        draft.doors.shrink_to_fit();
        Some(draft)
    }

    /// Each front door key with the port name and kind of its first occurrence here.
    fn claims(&self) -> impl Iterator<Item = (DoorKey, (&str, FrontendKind))> {
        let mut seen = BTreeSet::new();
        self.doors.iter().filter(move |f| seen.insert(f.key())).map(|f| (f.key(), (f.port_name.as_str(), f.kind)))
    }
}

/// Who claims each front door: for each key, every claimant with the port name and kind of
/// its first claim. The owner is the claimant that sorts first.
type Claims = HashMap<DoorKey, Claimants>;

/// The claimants of one front door, sorted by Service, each once: almost always one, so a
/// vector (one small allocation) rather than a map (a node of eleven entries; at 10 000
/// Services that was a tenth of the daemon's heap).
type Claimants = Vec<(ServiceKey, (String, FrontendKind))>;

/// What one Service contributes to [`Compiled`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Output {
    /// The front doors it owns, in draft order (the draft's).
    frontends: Vec<Arc<Frontend>>,
    /// Front doors it lost to a Service that sorts first.
    errors: Vec<String>,
    /// Its draft's warnings, then front doors it claims twice.
    warnings: Vec<String>,
}

impl Output {
    /// Gives `key`'s draft the front doors it owns according to `claims`.
    fn resolve(key: &ServiceKey, draft: &Draft, claims: &Claims) -> Self {
        let mut out = Self { warnings: draft.warnings.clone(), errors: draft.errors.clone(), ..Self::default() };
        let mut served = BTreeSet::new();
        for f in &draft.doors {
            let owner = claims.get(&f.key()).and_then(|c| c.first()).map(|(k, v)| (k, v));
            let Some((owner, (owner_port, owner_kind))) = owner else { continue };
            let what = format!("{} front door {}:{}/{}", f.kind.as_str(), fmt_ip(f.ip), f.port, f.protocol.as_str());
            if owner != key {
                out.errors.push(format!(
                    "Service {}: port {:?}: {what} is already served by Service {owner} port {owner_port:?}; \
                     skipped (the Service that sorts first by namespace/name keeps it)",
                    f.service, f.port_name
                ));
            } else if !served.insert(f.key()) {
                out.warnings.push(format!(
                    "Service {}: port {:?}: {what} is also its {} front door of port {owner_port:?}; served once",
                    f.service,
                    f.port_name,
                    owner_kind.as_str()
                ));
            } else {
                out.frontends.push(f.clone());
            }
        }
        out
    }
}

/// Adds (or, with `add == false`, removes) the claims of `key`'s draft.
fn update_claims(claims: &mut Claims, key: &ServiceKey, draft: &Draft, add: bool) {
    for (door, (port, kind)) in draft.claims() {
        if add {
            let c = claims.entry(door).or_default();
            match c.binary_search_by(|(k, _)| k.cmp(key)) {
                Ok(i) => c[i].1 = (port.to_owned(), kind),
                Err(i) => {
                    c.reserve_exact(1);
                    c.insert(i, (key.clone(), (port.to_owned(), kind)));
                }
            }
        } else if let Some(c) = claims.get_mut(&door) {
            if let Ok(i) = c.binary_search_by(|(k, _)| k.cmp(key)) {
                c.remove(i);
            }
            if c.is_empty() {
                claims.remove(&door);
            }
        }
    }
}

/// Sorts front doors by (ip, protocol, port): each key has exactly one owner, so this is
/// the total order [`Compiled::frontends`] promises.
fn sort_frontends(frontends: &mut [Frontend]) {
    frontends.sort_by_key(Frontend::key);
}

/// Compiles `objects` for the gateway described by `options` (see the module
/// documentation for the rules). Pure and deterministic.
pub fn compile(objects: &Objects, options: &CompileOptions) -> Compiled {
    let gw = Gateway::new(objects.nodes.iter().find(|n| n.name == options.node_name), options);
    let mut slices_by_service: BTreeMap<_, Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in &objects.endpoint_slices {
        slices_by_service.entry(&slice.service).or_default().push(slice);
    }
    let drafts: Vec<(&ServiceKey, Draft)> = objects
        .services
        .iter()
        .filter_map(|svc| {
            let slices = slices_by_service.get(&svc.key).map(Vec::as_slice).unwrap_or_default();
            Draft::new(svc, slices, &gw, options).map(|d| (&svc.key, d))
        })
        .collect();
    let mut claims = Claims::new();
    for (key, draft) in &drafts {
        update_claims(&mut claims, key, draft, true);
    }

    let mut compiled = Compiled::default();
    if drafts.iter().any(|(_, d)| d.wants_node_ports) {
        compiled.warnings.extend(gw.node_port_warning(options));
    }
    for (key, draft) in &drafts {
        let mut out = Output::resolve(key, draft, &claims);
        compiled.frontends.extend(out.frontends.iter().map(|f| Frontend::clone(f)));
        compiled.errors.append(&mut out.errors);
        compiled.warnings.append(&mut out.warnings);
    }
    sort_frontends(&mut compiled.frontends);
    compiled
}

/// `1.2.3.4` or `[2001:db8::1]`, for `ip:port` in messages.
fn fmt_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KubeObject;

    fn objects(yaml: &str) -> Objects {
        let mut objs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            objs.push(match v["kind"].as_str().unwrap() {
                "Service" => KubeObject::Service(Box::new(serde_json::from_value(v).unwrap())),
                "EndpointSlice" => KubeObject::EndpointSlice(Box::new(serde_json::from_value(v).unwrap())),
                "Node" => KubeObject::Node(Box::new(serde_json::from_value(v).unwrap())),
                k => panic!("kind {k}"),
            });
        }
        let (o, errors) = Objects::from_kube(&objs);
        assert!(errors.is_empty(), "{errors:?}");
        o
    }

    fn opts() -> CompileOptions {
        CompileOptions { node_name: "gw".into(), ..Default::default() }
    }

    fn doors_of(c: &Compiled) -> Vec<String> {
        c.frontends
            .iter()
            .map(|f| {
                let b: Vec<String> = f.backends.iter().map(|b| format!("{}:{}", fmt_ip(b.ip), b.port)).collect();
                let topology = f.topology.map(|t| format!(" {t:?}")).unwrap_or_default();
                format!(
                    "{} {}:{}/{} {} -> [{}]{topology}",
                    f.kind.as_str(),
                    fmt_ip(f.ip),
                    f.port,
                    f.protocol.as_str(),
                    f.service,
                    b.join(",")
                )
            })
            .collect()
    }

    const DUAL: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: d}
spec:
  clusterIPs: [10.96.0.1, "fd00::1"]
  externalIPs: [192.0.2.1, "2001:db8::1"]
  ports: [{name: http, port: 80, targetPort: web}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-4, namespace: d, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.0.0.1]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-6, namespace: d, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{name: http, port: 8080}]
endpoints: [{addresses: ["fd00:10::1"]}]
"#;

    #[test]
    fn address_families_do_not_mix() {
        let c = compile(&objects(DUAL), &CompileOptions { cluster_ips: true, ..opts() });
        assert_eq!(
            doors_of(&c),
            [
                "ClusterIP 10.96.0.1:80/TCP d/web -> [10.0.0.1:8080]",
                "ExternalIP 192.0.2.1:80/TCP d/web -> [10.0.0.1:8080]",
                "ExternalIP [2001:db8::1]:80/TCP d/web -> [[fd00:10::1]:8080]",
                "ClusterIP [fd00::1]:80/TCP d/web -> [[fd00:10::1]:8080]",
            ]
        );
    }

    #[test]
    fn only_the_services_address_families_are_served() {
        let o = objects(
            r#"
apiVersion: v1
kind: Service
metadata: {name: v4, namespace: d}
spec:
  type: NodePort
  clusterIP: 10.96.0.2
  externalIPs: [192.0.2.2, "2001:db8::2"]
  ports: [{name: http, port: 80, nodePort: 30080}]
---
apiVersion: v1
kind: Node
metadata: {name: gw}
status: {addresses: [{type: InternalIP, address: 198.51.100.1}, {type: InternalIP, address: "2001:db8::100"}]}
"#,
        );
        let c = compile(&o, &opts());
        assert_eq!(
            doors_of(&c),
            ["ExternalIP 192.0.2.2:80/TCP d/v4 -> []", "NodePort 198.51.100.1:30080/TCP d/v4 -> []"]
        );
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("Service d/v4: 2001:db8::2 is not served"), "{}", c.warnings[0]);
    }

    #[test]
    fn cluster_ips_only_when_asked() {
        let c = compile(&objects(DUAL), &opts());
        assert!(c.frontends.iter().all(|f| f.kind != FrontendKind::ClusterIp));
        assert_eq!(c.frontends.len(), 2);
    }

    #[test]
    fn categorize_prefers_ready_then_serving_terminating() {
        let b = |n: u8| Backend { ip: IpAddr::from([10, 0, 0, n]), port: 80 };
        let cand = |n, ready, serving, terminating, local| Candidate {
            backend: b(n),
            ready,
            serving,
            terminating,
            local,
            zone_hint: Hint::Absent,
            node_hint: Hint::Absent,
        };
        let all = [
            cand(3, false, true, true, true),
            cand(1, true, true, false, false),
            cand(2, false, false, true, false),
            cand(1, true, true, false, false),
        ];
        let sel = |backends: Vec<Backend>, category, draining: Vec<Backend>| Selection {
            backends: backends.into(),
            category,
            topology: None,
            draining: draining.into(),
        };
        // Endpoint 3 is serving and terminating: it drains while 1 is ready; 2 is not serving.
        assert_eq!(categorize(&all, TrafficPolicy::Cluster), sel(vec![b(1)], EndpointCategory::Ready, vec![b(3)]));
        // Local: 1 is not on the gateway's node but still serving, so its flows drain.
        assert_eq!(
            categorize(&all, TrafficPolicy::Local),
            sel(vec![b(3)], EndpointCategory::ServingTerminating, vec![b(1)])
        );
        assert_eq!(categorize(&all[2..3], TrafficPolicy::Cluster), sel(vec![], EndpointCategory::None, vec![]));
        // Only serving-and-terminating endpoints: they are the backends, nothing drains.
        assert_eq!(
            categorize(&all[..1], TrafficPolicy::Cluster),
            sel(vec![b(3)], EndpointCategory::ServingTerminating, vec![])
        );
    }

    #[test]
    fn table_spec_shares_backend_sets() {
        let c = compile(&objects(DUAL), &CompileOptions { cluster_ips: true, ..opts() });
        let t = c.to_table_spec();
        assert_eq!(t.frontends.len(), 4);
        assert_eq!(t.services.len(), 2, "one ring per family: {t:?}");
        assert_eq!(t.services[0].name, "d/web:http");
        assert_eq!(t.frontends[0].service, t.frontends[1].service);
        assert_eq!(c.backend_count(), 2);
    }

    // -----------------------------------------------------------------------------------
    // Table tests of the endpoint and Service selection semantics: each case is a small
    // set of manifests, the options, and the front doors with the backends chosen.

    /// One table-test case.
    struct Case {
        /// What it shows.
        name: &'static str,
        /// The options, from [`opts`].
        options: fn() -> CompileOptions,
        /// Manifests (YAML documents).
        yaml: &'static str,
        /// `doors_of` the result.
        expect: &'static [&'static str],
    }

    fn run_cases(cases: &[Case]) {
        for case in cases {
            let c = compile(&objects(case.yaml), &(case.options)());
            assert_eq!(doors_of(&c), case.expect, "case {:?}", case.name);
            assert!(c.errors.is_empty(), "case {:?}: {:?}", case.name, c.errors);
        }
    }

    /// The gateway's Node, in zone-a.
    macro_rules! node_zone_a {
        () => {
            "apiVersion: v1\nkind: Node\nmetadata: {name: gw, labels: {topology.kubernetes.io/zone: zone-a}}\n\
             status: {addresses: [{type: InternalIP, address: 198.51.100.1}]}\n"
        };
    }

    /// A Service `t/web` with one externalIP and the given endpoints (YAML flow items).
    macro_rules! hinted {
        ($node:expr, $spec_extra:literal, $endpoints:literal) => {
            concat!(
                $node,
                "---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: t}\n",
                "spec: {clusterIP: 10.96.0.1, externalIPs: [192.0.2.1], ports: [{name: http, port: 80}]",
                $spec_extra,
                "}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n",
                "metadata: {name: web-1, namespace: t, labels: {kubernetes.io/service-name: web}}\n",
                "addressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints:\n",
                $endpoints
            )
        };
    }

    fn with_cluster_ips() -> CompileOptions {
        CompileOptions { cluster_ips: true, ..opts() }
    }

    #[test]
    fn topology_hints_like_kube_proxy() {
        run_cases(&[
            Case {
                name: "zone hints narrow the ready endpoints to the gateway's zone (no trafficDistribution needed)",
                options: opts,
                yaml: hinted!(
                    node_zone_a!(),
                    "",
                    "- {addresses: [10.0.0.1], hints: {forZones: [{name: zone-a}]}}
- {addresses: [10.0.0.2], hints: {forZones: [{name: zone-b}]}}
- {addresses: [10.0.0.3], conditions: {ready: false, serving: true, terminating: true}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080] PreferSameZone"],
            },
            Case {
                name: "one ready endpoint without hints disables topology",
                options: opts,
                yaml: hinted!(
                    node_zone_a!(),
                    "",
                    "- {addresses: [10.0.0.1], hints: {forZones: [{name: zone-a}]}}
- {addresses: [10.0.0.2]}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080,10.0.0.2:8080]"],
            },
            Case {
                name: "hints for other zones only are ignored",
                options: opts,
                yaml: hinted!(
                    node_zone_a!(),
                    "",
                    "- {addresses: [10.0.0.1], hints: {forZones: [{name: zone-b}]}}
- {addresses: [10.0.0.2], hints: {forZones: [{name: zone-c}]}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080,10.0.0.2:8080]"],
            },
            Case {
                name: "node hints for the gateway's node come before zone hints",
                options: opts,
                yaml: hinted!(
                    node_zone_a!(),
                    "",
                    "- {addresses: [10.0.0.1], hints: {forNodes: [{name: gw}], forZones: [{name: zone-b}]}}
- {addresses: [10.0.0.2], hints: {forNodes: [{name: n2}], forZones: [{name: zone-a}]}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080] PreferSameNode"],
            },
            Case {
                name: "node hints none of which is for the gateway fall back to zone hints",
                options: opts,
                yaml: hinted!(
                    node_zone_a!(),
                    "",
                    "- {addresses: [10.0.0.1], hints: {forNodes: [{name: n1}], forZones: [{name: zone-a}]}}
- {addresses: [10.0.0.2], hints: {forNodes: [{name: n2}], forZones: [{name: zone-b}]}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080] PreferSameZone"],
            },
            Case {
                name: "Local traffic policy ignores hints; the ClusterIP (internal, Cluster) uses them",
                options: with_cluster_ips,
                yaml: hinted!(
                    node_zone_a!(),
                    ", externalTrafficPolicy: Local",
                    "- {addresses: [10.0.0.1], nodeName: gw, hints: {forZones: [{name: zone-b}]}}
- {addresses: [10.0.0.2], nodeName: n2, hints: {forZones: [{name: zone-a}]}}
"
                ),
                expect: &[
                    "ClusterIP 10.96.0.1:80/TCP t/web -> [10.0.0.2:8080] PreferSameZone",
                    "ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080]",
                ],
            },
            Case {
                name: "a gateway Node without a zone label cannot use zone hints",
                options: opts,
                yaml: hinted!(
                    "apiVersion: v1\nkind: Node\nmetadata: {name: gw}\n",
                    "",
                    "- {addresses: [10.0.0.1], hints: {forZones: [{name: zone-a}]}}
- {addresses: [10.0.0.2], hints: {forZones: [{name: zone-b}]}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080,10.0.0.2:8080]"],
            },
            Case {
                name: "without a Node object the gateway has no zone either",
                options: opts,
                yaml: hinted!(
                    "",
                    "",
                    "- {addresses: [10.0.0.1], hints: {forZones: [{name: zone-a}]}}
- {addresses: [10.0.0.2], hints: {forZones: [{name: zone-b}]}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080,10.0.0.2:8080]"],
            },
            Case {
                name: "no ready endpoint: serving-terminating ones, hints or not",
                options: opts,
                yaml: hinted!(
                    node_zone_a!(),
                    "",
                    "- {addresses: [10.0.0.1], conditions: {ready: false, serving: true, terminating: true}, hints: {forZones: [{name: zone-b}]}}
- {addresses: [10.0.0.2], conditions: {ready: false, serving: true, terminating: true}, hints: {forZones: [{name: zone-a}]}}
- {addresses: [10.0.0.3], conditions: {ready: false, serving: false, terminating: true}, hints: {forZones: [{name: zone-a}]}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080,10.0.0.2:8080]"],
            },
            Case {
                name: "hints of not-ready endpoints do not count",
                options: opts,
                yaml: hinted!(
                    node_zone_a!(),
                    "",
                    "- {addresses: [10.0.0.1], hints: {forZones: [{name: zone-a}]}}
- {addresses: [10.0.0.2], hints: {forZones: [{name: zone-b}]}}
- {addresses: [10.0.0.3], conditions: {ready: false}}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080] PreferSameZone"],
            },
        ]);
    }

    #[test]
    fn traffic_policies_like_kube_proxy() {
        run_cases(&[
            Case {
                name: "externalTrafficPolicy: Local keeps local endpoints on external doors, not on the ClusterIP",
                options: with_cluster_ips,
                yaml: hinted!(
                    "",
                    ", externalTrafficPolicy: Local",
                    "- {addresses: [10.0.0.1], nodeName: gw}
- {addresses: [10.0.0.2], nodeName: n2}
"
                ),
                expect: &[
                    "ClusterIP 10.96.0.1:80/TCP t/web -> [10.0.0.1:8080,10.0.0.2:8080]",
                    "ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080]",
                ],
            },
            Case {
                name: "internalTrafficPolicy: Local narrows the ClusterIP only",
                options: with_cluster_ips,
                yaml: hinted!(
                    "",
                    ", internalTrafficPolicy: Local",
                    "- {addresses: [10.0.0.1], nodeName: gw}
- {addresses: [10.0.0.2], nodeName: n2}
"
                ),
                expect: &[
                    "ClusterIP 10.96.0.1:80/TCP t/web -> [10.0.0.1:8080]",
                    "ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080,10.0.0.2:8080]",
                ],
            },
            Case {
                name: "Local without local endpoints: the external door rejects (kube-proxy drops; see module doc)",
                options: with_cluster_ips,
                yaml: hinted!(
                    "",
                    ", externalTrafficPolicy: Local",
                    "- {addresses: [10.0.0.2], nodeName: n2}
"
                ),
                expect: &[
                    "ClusterIP 10.96.0.1:80/TCP t/web -> [10.0.0.2:8080]",
                    "ExternalIP 192.0.2.1:80/TCP t/web -> []",
                ],
            },
            Case {
                name: "Local falls back to local serving-terminating endpoints, not to remote ready ones",
                options: opts,
                yaml: hinted!(
                    "",
                    ", externalTrafficPolicy: Local",
                    "- {addresses: [10.0.0.1], nodeName: gw, conditions: {ready: false, serving: true, terminating: true}}
- {addresses: [10.0.0.2], nodeName: n2}
"
                ),
                expect: &["ExternalIP 192.0.2.1:80/TCP t/web -> [10.0.0.1:8080]"],
            },
        ]);
    }

    const PROXY_NAMES: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: plain, namespace: p}
spec: {externalIPs: [192.0.2.10], ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: ours, namespace: p, labels: {service.kubernetes.io/service-proxy-name: torii}}
spec: {externalIPs: [192.0.2.11], ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: theirs, namespace: p, labels: {service.kubernetes.io/service-proxy-name: other}}
spec: {externalIPs: [192.0.2.12], ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: p, labels: {service.kubernetes.io/service-proxy-name: ""}}
spec: {externalIPs: [192.0.2.13], ports: [{port: 80}]}
"#;

    #[test]
    fn service_proxy_name_like_kube_proxy() {
        run_cases(&[
            Case {
                name: "no proxy name: only Services without the label (an empty value is a label too)",
                options: opts,
                yaml: PROXY_NAMES,
                expect: &["ExternalIP 192.0.2.10:80/TCP p/plain -> []"],
            },
            Case {
                name: "proxy name torii: only the Services labelled torii",
                options: || CompileOptions { proxy_name: Some("torii".into()), ..opts() },
                yaml: PROXY_NAMES,
                expect: &["ExternalIP 192.0.2.11:80/TCP p/ours -> []"],
            },
        ]);
    }

    const LB_CLASSES: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: a, namespace: l}
spec: {type: LoadBalancer, loadBalancerClass: example.com/a, externalIPs: [192.0.2.30], ports: [{port: 80}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.20}]}}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: l}
spec: {type: LoadBalancer, loadBalancerClass: example.com/b, ports: [{port: 80}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.21}]}}
---
apiVersion: v1
kind: Service
metadata: {name: none, namespace: l}
spec: {type: LoadBalancer, ports: [{port: 80}]}
status: {loadBalancer: {ingress: [{ip: 192.0.2.22}, {ip: 192.0.2.23, ipMode: Proxy}]}}
"#;

    #[test]
    fn load_balancer_class_when_configured() {
        run_cases(&[
            Case {
                name: "no class configured: every Service's load-balancer IPs (ipMode Proxy excepted)",
                options: opts,
                yaml: LB_CLASSES,
                expect: &[
                    "LoadBalancer 192.0.2.20:80/TCP l/a -> []",
                    "LoadBalancer 192.0.2.21:80/TCP l/b -> []",
                    "LoadBalancer 192.0.2.22:80/TCP l/none -> []",
                    "ExternalIP 192.0.2.30:80/TCP l/a -> []",
                ],
            },
            Case {
                name: "class configured: only that class's load-balancer IPs; externalIPs stay",
                options: || CompileOptions { load_balancer_class: Some("example.com/a".into()), ..opts() },
                yaml: LB_CLASSES,
                expect: &["LoadBalancer 192.0.2.20:80/TCP l/a -> []", "ExternalIP 192.0.2.30:80/TCP l/a -> []"],
            },
        ]);
    }

    const DUAL_STACK_NODE_PORT: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: gw}
status:
  addresses:
  - {type: InternalIP, address: 10.0.0.5}
  - {type: InternalIP, address: 192.0.2.5}
  - {type: InternalIP, address: "fd00::5"}
  - {type: ExternalIP, address: 203.0.113.5}
  - {type: ExternalIP, address: "2001:db8::5"}
  - {type: Hostname, address: gw}
---
apiVersion: v1
kind: Service
metadata: {name: np, namespace: n}
spec:
  type: LoadBalancer
  clusterIPs: [10.96.0.9, "fd00:96::9"]
  externalIPs: [192.0.2.40, "2001:db8::40"]
  ports: [{name: http, port: 80, nodePort: 30080}]
status: {loadBalancer: {ingress: [{ip: 192.0.2.41}, {ip: "2001:db8::41"}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: np-4, namespace: n, labels: {kubernetes.io/service-name: np}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.1.0.1]}, {addresses: [10.1.0.2]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: np-6, namespace: n, labels: {kubernetes.io/service-name: np}}
addressType: IPv6
ports: [{name: http, port: 8080}]
endpoints: [{addresses: ["fd00:1::1"]}, {addresses: ["fd00:1::2"], conditions: {ready: false}}]
"#;

    #[test]
    fn dual_stack_one_front_door_per_family() {
        run_cases(&[Case {
            name: "IPv4 doors get the IPv4 slice's endpoints, IPv6 doors the IPv6 slice's",
            options: with_cluster_ips,
            yaml: DUAL_STACK_NODE_PORT,
            expect: &[
                "NodePort 10.0.0.5:30080/TCP n/np -> [10.1.0.1:8080,10.1.0.2:8080]",
                "ClusterIP 10.96.0.9:80/TCP n/np -> [10.1.0.1:8080,10.1.0.2:8080]",
                "NodePort 192.0.2.5:30080/TCP n/np -> [10.1.0.1:8080,10.1.0.2:8080]",
                "ExternalIP 192.0.2.40:80/TCP n/np -> [10.1.0.1:8080,10.1.0.2:8080]",
                "LoadBalancer 192.0.2.41:80/TCP n/np -> [10.1.0.1:8080,10.1.0.2:8080]",
                "NodePort 203.0.113.5:30080/TCP n/np -> [10.1.0.1:8080,10.1.0.2:8080]",
                "NodePort [2001:db8::5]:30080/TCP n/np -> [[fd00:1::1]:8080]",
                "ExternalIP [2001:db8::40]:80/TCP n/np -> [[fd00:1::1]:8080]",
                "LoadBalancer [2001:db8::41]:80/TCP n/np -> [[fd00:1::1]:8080]",
                "NodePort [fd00::5]:30080/TCP n/np -> [[fd00:1::1]:8080]",
                "ClusterIP [fd00:96::9]:80/TCP n/np -> [[fd00:1::1]:8080]",
            ],
        }]);
    }

    fn node_ports_of(c: &Compiled) -> Vec<String> {
        c.frontends.iter().filter(|f| f.kind == FrontendKind::NodePort).map(|f| f.ip.to_string()).collect()
    }

    #[test]
    fn node_port_addresses_like_kube_proxy() {
        use torii_table::IpCidr;
        let o = objects(DUAL_STACK_NODE_PORT);
        let with = |npa: NodePortAddresses| compile(&o, &CompileOptions { node_port_addresses: npa, ..opts() });
        let cidrs = |list: &[&str]| NodePortAddresses::Cidrs(list.iter().map(|s| IpCidr::parse(s).unwrap()).collect());
        assert_eq!(
            node_ports_of(&with(NodePortAddresses::All)),
            ["10.0.0.5", "192.0.2.5", "203.0.113.5", "2001:db8::5", "fd00::5"],
            "unset: every InternalIP and ExternalIP"
        );
        assert_eq!(
            node_ports_of(&with(NodePortAddresses::Primary)),
            ["10.0.0.5", "fd00::5"],
            "primary: the first InternalIP of each family"
        );
        assert_eq!(
            node_ports_of(&with(cidrs(&["192.0.2.0/24"]))),
            ["192.0.2.5", "2001:db8::5", "fd00::5"],
            "an IPv4 CIDR restricts IPv4 only"
        );
        assert_eq!(node_ports_of(&with(cidrs(&["10.0.0.0/8", "2001:db8::/32"]))), ["10.0.0.5", "2001:db8::5"],);
        let none = with(cidrs(&["198.51.100.0/24", "2001:db8:ffff::/48"]));
        assert_eq!(node_ports_of(&none), Vec::<String>::new());
        assert_eq!(none.warnings.len(), 1, "{:?}", none.warnings);
        assert!(
            none.warnings[0].contains("none of its InternalIP/ExternalIP addresses is selected"),
            "{:?}",
            none.warnings
        );
    }

    #[test]
    fn forbidden_endpoint_addresses_skip_only_their_endpoint() {
        let yaml = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: f}
spec: {clusterIPs: [10.96.0.1, "fd00:96::1"], externalIPs: [192.0.2.1, "2001:db8::1"], ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-4, namespace: f, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.0.0.1]}
- {addresses: [127.0.0.1]}
- {addresses: [169.254.169.254]}
- {addresses: [224.0.0.1]}
- {addresses: [0.0.0.0]}
- {addresses: [10.0.0.2, 127.0.0.2]}
- {addresses: [255.255.255.255]}
- {addresses: [10.0.0.3]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-6, namespace: f, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: ["::1"]}
- {addresses: ["fe80::1"]}
- {addresses: ["ff02::1"]}
- {addresses: ["::"]}
- {addresses: ["::ffff:127.0.0.1"]}
- {addresses: ["fd00::1"]}
"#;
        let mut objs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            objs.push(match v["kind"].as_str().unwrap() {
                "Service" => KubeObject::Service(Box::new(serde_json::from_value(v).unwrap())),
                _ => KubeObject::EndpointSlice(Box::new(serde_json::from_value(v).unwrap())),
            });
        }
        let (o, rejected) = Objects::from_kube(&objs);
        let errors: Vec<String> =
            rejected.iter().map(|r| format!("{}; {} skipped", r.error, r.skipped.as_str())).collect();
        let field = |e: &String| e.split(": ").take(2).collect::<Vec<_>>().join(": ");
        assert_eq!(
            errors.iter().map(field).collect::<Vec<_>>(),
            [
                "EndpointSlice f/web-4: endpoints[1].addresses[0]",
                "EndpointSlice f/web-4: endpoints[2].addresses[0]",
                "EndpointSlice f/web-4: endpoints[3].addresses[0]",
                "EndpointSlice f/web-4: endpoints[4].addresses[0]",
                "EndpointSlice f/web-4: endpoints[5].addresses[1]",
                "EndpointSlice f/web-4: endpoints[6].addresses[0]",
                "EndpointSlice f/web-6: endpoints[0].addresses[0]",
                "EndpointSlice f/web-6: endpoints[1].addresses[0]",
                "EndpointSlice f/web-6: endpoints[2].addresses[0]",
                "EndpointSlice f/web-6: endpoints[3].addresses[0]",
                "EndpointSlice f/web-6: endpoints[4].addresses[0]",
            ]
        );
        assert_eq!(
            errors[0],
            "EndpointSlice f/web-4: endpoints[1].addresses[0]: 127.0.0.1 is in the loopback range 127.0.0.0/8, \
             which the EndpointSlice API forbids for endpoint addresses; endpoint skipped"
        );
        assert!(errors.iter().all(|e| e.ends_with("; endpoint skipped")), "{errors:#?}");
        assert!(rejected.iter().all(|r| r.skipped == crate::model::Skipped::Endpoint));
        let c = compile(&o, &opts());
        assert_eq!(
            doors_of(&c),
            [
                "ExternalIP 192.0.2.1:80/TCP f/web -> [10.0.0.1:8080,10.0.0.3:8080]",
                "ExternalIP [2001:db8::1]:80/TCP f/web -> [[fd00::1]:8080]",
            ],
            "the rest of each slice is served"
        );
    }

    #[test]
    fn table_spec_orders_services_by_name_then_backends() {
        let c = compile(&objects(DUAL_STACK_NODE_PORT), &with_cluster_ips());
        let t = c.to_table_spec();
        assert_eq!(t.frontends.len(), c.frontends.len());
        let names: Vec<(&str, usize)> = t.services.iter().map(|s| (s.name.as_str(), s.backends.len())).collect();
        assert_eq!(names, [("n/np:http", 2), ("n/np:http", 1)], "IPv4 backends sort before IPv6 ones");
        for (f, fs) in c.frontends.iter().zip(&t.frontends) {
            let s = &t.services[fs.service];
            assert_eq!(s.backends.len(), f.backends.len());
            assert_eq!((fs.addr, fs.port), (f.ip, f.port));
        }
    }

    const RANGES: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: d}
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.9
  externalIPs: [192.0.2.9]
  loadBalancerSourceRanges: [198.51.100.0/24, "2001:db8::/32"]
  ports: [{name: http, port: 80}]
status: {loadBalancer: {ingress: [{ip: 203.0.113.9}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: lb-1, namespace: d, labels: {kubernetes.io/service-name: lb}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.0.0.1]
- addresses: [10.0.0.2]
  conditions: {ready: false, serving: true, terminating: true}
- addresses: [10.0.0.3]
  conditions: {ready: false, serving: false, terminating: true}
"#;

    /// From manifests to the gateway's table: the load-balancer front door admits only its
    /// ranges of its family, the externalIP of the same Service everyone; the terminating
    /// but serving endpoint drains, the one no longer serving is gone.
    #[test]
    fn source_ranges_and_draining_reach_the_table() {
        use torii_table::{build, Table};
        let c = compile(&objects(RANGES), &opts());
        let table = Table::new(build(&c.to_table_spec(), 1).unwrap()).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let lb = table.frontend(ip("203.0.113.9"), 6, 80).unwrap();
        assert_eq!(lb.kind, FrontendKind::LoadBalancer);
        assert!(lb.source_ranges.admits(ip("198.51.100.77")));
        assert!(!lb.source_ranges.admits(ip("192.0.2.200")));
        let external = table.frontend(ip("192.0.2.9"), 6, 80).unwrap();
        assert!(external.source_ranges.is_empty() && external.source_ranges.admits(ip("192.0.2.200")));
        assert_eq!(lb.service, external.service, "one backend set for both front doors");
        let s = table.service(lb.service).unwrap();
        let addr16 = |s: &str| torii_table::layout::addr16(ip(s));
        assert_eq!(s.backends.len(), 1);
        assert!(s.backend(addr16("10.0.0.1"), 8080).is_some());
        assert!(s.serves(addr16("10.0.0.2"), 8080) && s.backend(addr16("10.0.0.2"), 8080).is_none());
        assert!(!s.serves(addr16("10.0.0.3"), 8080));
        let json = serde_json::to_value(&c).unwrap();
        let lb_json = json["frontends"].as_array().unwrap().iter().find(|f| f["kind"] == "LoadBalancer").unwrap();
        assert_eq!(lb_json["source_ranges"], serde_json::json!(["198.51.100.0/24"]));
        assert_eq!(lb_json["draining"], serde_json::json!([{"ip": "10.0.0.2", "port": 8080}]));
    }

    #[test]
    fn source_range_errors_name_the_service_and_the_field() {
        let with = |field: &str, annotation: &str| {
            let yaml = format!(
                "metadata: {{name: lb, namespace: d, annotations: {{{}: {annotation:?}}}}}\nspec: {{type: LoadBalancer, \
                 loadBalancerSourceRanges: {field}}}",
                crate::model::LOAD_BALANCER_SOURCE_RANGES_ANNOTATION
            );
            let svc: k8s_openapi::api::core::v1::Service = serde_yaml_ng::from_str(&yaml).unwrap();
            let s = Service::try_from(&svc).unwrap();
            let ranges: Vec<String> = s.load_balancer_source_ranges.iter().map(ToString::to_string).collect();
            let errors: Vec<String> = s.skipped_source_ranges.iter().map(ToString::to_string).collect();
            (ranges, errors)
        };
        // The field wins; the annotation is not looked at.
        let (ranges, errors) = with("[10.0.0.0/8, 10.0.0.0/40]", "bogus");
        assert_eq!(ranges, ["10.0.0.0/8"]);
        assert_eq!(
            errors,
            ["Service d/lb: spec.loadBalancerSourceRanges[1]: \"10.0.0.0/40\" is not an IPv4 or IPv6 CIDR \
              (address/prefix length); it admits nobody, and a load-balancer IP of a family without a readable \
              range is closed to every client (kube-proxy would ignore the entry and could admit everyone)"]
        );
        // An empty field: the annotation, entries trimmed, errors naming the entry.
        let (ranges, errors) = with("[]", " 192.0.2.0/24 ,2001:db8::1/64, x ");
        assert_eq!(ranges, ["192.0.2.0/24", "2001:db8::/64"]);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                "Service d/lb: metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges]: \
                 entry 2: \"x\" is not"
            ),
            "{}",
            errors[0]
        );
        // Nothing readable: the Service is marked so that the compiler closes its
        // load-balancer IPs instead of opening them (kube-proxy would admit everyone).
        let (ranges, errors) = with("[nope]", "");
        assert!(ranges.is_empty());
        assert!(errors[0].contains("closed to every client"), "{}", errors[0]);
        let svc: k8s_openapi::api::core::v1::Service = serde_yaml_ng::from_str(
            "metadata: {name: lb}\nspec: {type: LoadBalancer, loadBalancerSourceRanges: [nope]}\n\
             status: {loadBalancer: {ingress: [{ip: 192.0.2.1}]}}",
        )
        .unwrap();
        let s = Service::try_from(&svc).unwrap();
        assert!(s.source_ranges_unreadable);
        let c = compile(&Objects { services: vec![s], ..Default::default() }, &CompileOptions::default());
        assert!(c.frontends.is_empty(), "{:?}", c.frontends);
        assert!(c.errors[0].contains("192.0.2.1 is closed to every client"), "{:?}", c.errors);
    }
}
