//! Normalised, validated views of the Kubernetes objects torii serves: Services,
//! EndpointSlices and Nodes.
//!
//! Every source (the manifests directory, later the Kubernetes API) yields k8s-openapi
//! objects ([`KubeObject`]); this module turns each one into a plain value the compiler
//! can trust: addresses parsed into [`IpAddr`], ports range-checked into `u16`, enums
//! instead of strings, API defaults applied (`protocol: TCP`, `type: ClusterIP`,
//! `sessionAffinityConfig.clientIP.timeoutSeconds: 10800`, EndpointSlice conditions
//! `ready`/`serving` absent = true, `terminating` absent = false).
//!
//! Conversion never panics. The smallest unit goes, never more: a part the API server
//! accepts but torii cannot serve — an EndpointSlice port or endpoint, a Node address, an
//! externalIP or load-balancer ingress entry, a source range — is left out with a
//! [`ModelError`] naming the object and the field, and the rest of the object is served
//! ([`Validated::skipped_parts`], [`Skipped`]). What makes the whole object unusable
//! (e.g. `Service default/web: spec.ports[1].port: 0 is out of range 1..=65535`) skips
//! that object; everything else is served ([`Objects::from_kube`]). Addresses are read as
//! kube-proxy reads them ([`parse_ip_sloppy`], [`parse_cidr_sloppy`]: legacy leading
//! zeros are decimal), and nothing unreadable ever widens access
//! ([`Service::source_ranges_unreadable`]).
//!
//! The rules come from the Kubernetes API reference (core/v1 Service and Node,
//! discovery.k8s.io/v1 EndpointSlice) and what kube-proxy reads from them
//! (`pkg/proxy/serviceport.go`, `pkg/proxy/endpointslicecache.go`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use torii_table::{IpCidr, Protocol};

/// The label that ties an EndpointSlice to its Service (the only link; see the
/// EndpointSlice documentation, "Ownership").
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The Node label holding its zone (used by topology-aware routing).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// `sessionAffinityConfig.clientIP.timeoutSeconds` when absent: 3 hours (core/v1 defaults).
pub const DEFAULT_AFFINITY_TIMEOUT_S: u32 = 10_800;

/// Largest `sessionAffinityConfig.clientIP.timeoutSeconds` the API server accepts (1 day).
pub const MAX_AFFINITY_TIMEOUT_S: u32 = 86_400;

/// The namespace of a namespaced object that does not name one (as `kubectl apply`
/// without `-n` would place it).
pub const DEFAULT_NAMESPACE: &str = "default";

/// The deprecated annotation that predates `spec.loadBalancerSourceRanges`: a
/// comma-separated list of CIDRs, read when the field is empty (`v1.AnnotationLoadBalancerSourceRangesKey`).
pub const LOAD_BALANCER_SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// One Kubernetes object as a source delivers it, before validation.
#[derive(Clone, Debug, PartialEq)]
pub enum KubeObject {
    /// A core/v1 Service.
    Service(Box<core::Service>),
    /// A discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice(Box<discovery::EndpointSlice>),
    /// A core/v1 Node.
    Node(Box<core::Node>),
}

impl KubeObject {
    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::Service(s) => &s.metadata,
            Self::EndpointSlice(s) => &s.metadata,
            Self::Node(n) => &n.metadata,
        }
    }

    /// The object's metadata, to change (the manifests source versions objects by content).
    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Service(s) => &mut s.metadata,
            Self::EndpointSlice(s) => &mut s.metadata,
            Self::Node(n) => &mut n.metadata,
        }
    }

    /// The object's identity for messages, e.g. `Service demo/web` or `Node gateway-1`.
    pub fn object_ref(&self) -> ObjectRef {
        match self {
            Self::Service(s) => ObjectRef::namespaced("Service", &s.metadata),
            Self::EndpointSlice(s) => ObjectRef::namespaced("EndpointSlice", &s.metadata),
            Self::Node(n) => ObjectRef::cluster_scoped("Node", &n.metadata),
        }
    }
}

/// Kind, namespace and name of an object, displayed as `Service demo/web`,
/// `Node gateway-1`, or `Service demo/<unnamed>` when `metadata.name` is missing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `Service`, `EndpointSlice` or `Node`.
    pub kind: &'static str,
    /// The namespace (defaulted to [`DEFAULT_NAMESPACE`]); `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// `metadata.name`, empty when missing.
    pub name: String,
}

impl ObjectRef {
    /// The identity of a namespaced object of `kind` (namespace defaulted to
    /// [`DEFAULT_NAMESPACE`], as the API server does).
    pub fn namespaced(kind: &'static str, meta: &ObjectMeta) -> Self {
        Self { kind, namespace: Some(namespace_of(meta).to_owned()), name: meta.name.clone().unwrap_or_default() }
    }

    /// The identity of a cluster-scoped object of `kind`.
    pub fn cluster_scoped(kind: &'static str, meta: &ObjectMeta) -> Self {
        Self { kind, namespace: None, name: meta.name.clone().unwrap_or_default() }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.name.is_empty() { "<unnamed>" } else { &self.name };
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{name}", self.kind),
            None => write!(f, "{} {name}", self.kind),
        }
    }
}

/// Why an object cannot be served. The object is skipped; everything else is served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A required field is absent or empty.
    #[error("{object}: {field}: required but missing; {hint}")]
    Missing {
        /// The object.
        object: ObjectRef,
        /// Path of the field, e.g. `metadata.name`.
        field: String,
        /// What to write there.
        hint: &'static str,
    },
    /// A field holds a value the API would not accept, or that torii cannot serve.
    #[error("{object}: {field}: {message}")]
    Invalid {
        /// The object.
        object: ObjectRef,
        /// Path of the field, e.g. `spec.ports[1].port`.
        field: String,
        /// What is wrong and what would be right.
        message: String,
    },
}

impl ModelError {
    /// The object that was skipped.
    pub fn object(&self) -> &ObjectRef {
        match self {
            Self::Missing { object, .. } | Self::Invalid { object, .. } => object,
        }
    }

    /// Path of the offending field.
    pub fn field(&self) -> &str {
        match self {
            Self::Missing { field, .. } | Self::Invalid { field, .. } => field,
        }
    }
}

/// Builds errors for one object.
struct Ctx {
    object: ObjectRef,
}

impl Ctx {
    fn invalid(&self, field: impl Into<String>, message: impl Into<String>) -> ModelError {
        ModelError::Invalid { object: self.object.clone(), field: field.into(), message: message.into() }
    }

    fn missing(&self, field: impl Into<String>, hint: &'static str) -> ModelError {
        ModelError::Missing { object: self.object.clone(), field: field.into(), hint }
    }

    fn name(&self, meta: &ObjectMeta) -> Result<String, ModelError> {
        match meta.name.as_deref() {
            Some(n) if !n.is_empty() => Ok(n.to_owned()),
            _ => Err(self.missing("metadata.name", "every object needs a name")),
        }
    }

    fn ip(&self, field: impl Into<String>, s: &str) -> Result<IpAddr, ModelError> {
        parse_ip_sloppy(s.trim()).ok_or_else(|| self.invalid(field, format!("{s:?} is not an IPv4 or IPv6 address")))
    }

    fn port(&self, field: impl Into<String>, n: i32) -> Result<u16, ModelError> {
        match u16::try_from(n) {
            Ok(p) if p != 0 => Ok(p),
            _ => Err(self.invalid(field, format!("{n} is out of range 1..=65535"))),
        }
    }

    fn protocol(&self, field: impl Into<String>, p: Option<&str>) -> Result<Protocol, ModelError> {
        match p {
            None | Some("TCP") => Ok(Protocol::Tcp),
            Some("UDP") => Ok(Protocol::Udp),
            Some("SCTP") => Ok(Protocol::Sctp),
            Some(other) => Err(self.invalid(field, format!("{other:?} is not one of \"TCP\", \"UDP\", \"SCTP\""))),
        }
    }
}

/// Parses an IP address as Kubernetes' `netutils.ParseIPSloppy` (`k8s.io/utils/net`) does,
/// which kube-proxy uses for every address it reads: IPv4 octets may carry leading zeros
/// and are read as **decimal** (`010.070.000.241` is `10.70.0.241`), also in the dotted
/// tail of an IPv6 address (`::ffff:010.0.0.1`). Such values were accepted by the API
/// server before `StrictIPCIDRValidation` and may still be stored; Go's and Rust's strict
/// parsers refuse them (an octal reading would be a third interpretation). No trimming:
/// callers trim where Kubernetes does.
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if !s.contains(':') {
        return parse_ipv4_sloppy(s).map(IpAddr::V4);
    }
    // IPv6 with a dotted IPv4 tail: rewrite the tail in canonical form and parse again.
    let (head, tail) = s.rsplit_once(':')?;
    let v4 = parse_ipv4_sloppy(tail)?;
    format!("{head}:{v4}").parse().ok()
}

/// Four dot-separated decimal octets, each of at least one digit, any number of leading
/// zeros, value at most 255 (Go 1.16's `parseIPv4`, which `k8s.io/utils/net` forked).
fn parse_ipv4_sloppy(s: &str) -> Option<std::net::Ipv4Addr> {
    let mut octets = [0_u8; 4];
    let mut parts = s.split('.');
    for o in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = part.trim_start_matches('0');
        *o = if digits.is_empty() { 0 } else { u8::try_from(digits.parse::<u16>().ok()?).ok()? };
    }
    parts.next().is_none().then(|| octets.into())
}

/// Parses a CIDR as Kubernetes' `netutils.ParseCIDRSloppy` does: the address as
/// [`parse_ip_sloppy`], the prefix length decimal (leading zeros allowed), at most 32 for
/// IPv4 and 128 for IPv6; host bits are cleared (Go's `ParseCIDR` returns the network).
pub fn parse_cidr_sloppy(s: &str) -> Option<IpCidr> {
    let (a, l) = s.split_once('/')?;
    let addr = parse_ip_sloppy(a)?;
    if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = l.trim_start_matches('0');
    let len: u8 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    IpCidr::parse(&format!("{addr}/{len}"))
}

/// Why `ip` can never be a front door (a phrase to follow the address in a message), or
/// `None` when it can. The API server refuses unspecified, loopback and link-local
/// addresses for `spec.externalIPs` and load-balancer ingress IPs (`ValidateNonSpecialIP`
/// in `pkg/apis/core/validation`), though older objects may still hold them; multicast
/// and broadcast addresses are destinations of no unicast flow. Packets to any of them
/// never reach a gateway as a Service's traffic, and answering ARP or NDP for them
/// would disturb the network.
pub fn forbidden_front_door_address(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(v4) if v4.is_unspecified() => Some("is unspecified (0.0.0.0)"),
        IpAddr::V4(v4) if v4.is_loopback() => Some("is in the loopback range 127.0.0.0/8"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("is in the link-local range 169.254.0.0/16"),
        IpAddr::V4(v4) if v4.is_multicast() => Some("is a multicast address (224.0.0.0/4)"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("is the broadcast address 255.255.255.255"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("is unspecified (::)"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("is the loopback address ::1"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("is in the link-local range fe80::/10"),
        IpAddr::V6(v6) if v6.is_multicast() => Some("is a multicast address (ff00::/8)"),
        _ => None,
    }
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => DEFAULT_NAMESPACE,
    }
}

// ---------------------------------------------------------------------------------------
// Service

/// A Service's identity, displayed `namespace/name`; orders by namespace, then name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `spec.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServiceType {
    /// `ClusterIP` (the default).
    ClusterIp,
    /// `NodePort`: also reachable on every node's address at `spec.ports[].nodePort`.
    NodePort,
    /// `LoadBalancer`: also reachable at `status.loadBalancer.ingress[].ip`.
    LoadBalancer,
    /// `ExternalName`: a DNS alias, nothing to proxy.
    ExternalName,
}

impl ServiceType {
    /// Kubernetes' spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIp => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
            Self::ExternalName => "ExternalName",
        }
    }
}

/// `status.loadBalancer.ingress[].ipMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpMode {
    /// `VIP` (and absent): traffic arrives with the load-balancer IP as destination, so
    /// the proxy serves it.
    Vip,
    /// `Proxy`: the load balancer rewrites the destination to a node; the proxy must not
    /// capture the IP.
    Proxy,
}

/// One `status.loadBalancer.ingress[]` entry that has an `ip` (hostname-only entries
/// carry nothing to serve and are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LoadBalancerIngress {
    /// `ip`.
    pub ip: IpAddr,
    /// `ipMode`.
    pub ip_mode: IpMode,
}

/// `spec.ports[].targetPort`: a number, or the name of a container port that each
/// endpoint resolves on its own (the EndpointSlice carries the resolved number).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TargetPort {
    /// A port number, 1..=65535.
    Number(u16),
    /// A container port name.
    Name(String),
}

impl fmt::Display for TargetPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Name(s) => f.write_str(s),
        }
    }
}

/// One `spec.ports[]` entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePort {
    /// `name`; empty when unnamed (allowed only for a single-port Service).
    pub name: String,
    /// `protocol` (default TCP).
    pub protocol: Protocol,
    /// `port`, the port of every front door of this Service port except NodePorts.
    pub port: u16,
    /// `targetPort` (default: the same number as `port`).
    pub target_port: TargetPort,
    /// `nodePort`, when allocated (`None` for 0 or absent).
    pub node_port: Option<u16>,
}

/// `spec.sessionAffinity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SessionAffinity {
    /// `None` (the default): every new flow picks an endpoint on its own.
    None,
    /// `ClientIP`: flows from one client address stick to one endpoint.
    ClientIp {
        /// `sessionAffinityConfig.clientIP.timeoutSeconds`, 1..=86400, default 10800.
        timeout_s: u32,
    },
}

impl SessionAffinity {
    /// The affinity timeout in seconds, `None` without affinity.
    pub fn timeout_s(self) -> Option<u32> {
        match self {
            Self::None => None,
            Self::ClientIp { timeout_s } => Some(timeout_s),
        }
    }
}

/// `spec.externalTrafficPolicy` / `spec.internalTrafficPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TrafficPolicy {
    /// `Cluster` (the default): any endpoint in the cluster.
    #[default]
    Cluster,
    /// `Local`: only endpoints on the gateway's own node.
    Local,
}

impl TrafficPolicy {
    /// Kubernetes' spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "Cluster",
            Self::Local => "Local",
        }
    }
}

/// A validated Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// Namespace and name.
    pub key: ServiceKey,
    /// `spec.type`.
    pub type_: ServiceType,
    /// `spec.clusterIP` is `None`: a headless Service, which has no virtual IP to proxy.
    pub headless: bool,
    /// `spec.clusterIPs` (or `spec.clusterIP` when `clusterIPs` is absent); empty when
    /// unallocated (a hand-written manifest may leave it out).
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.externalIPs` (without the skipped ones).
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[]` entries with an `ip` (without the skipped ones).
    pub load_balancer_ingress: Vec<LoadBalancerIngress>,
    /// The `spec.externalIPs` and load-balancer ingress entries left out: not an address
    /// (after [`parse_ip_sloppy`]), one that can never be a front door
    /// ([`forbidden_front_door_address`]), or an unknown `ipMode`. The rest is served.
    pub skipped_addresses: Vec<ModelError>,
    /// `spec.ports`, in manifest order; names and (port, protocol) pairs are unique.
    pub ports: Vec<ServicePort>,
    /// `spec.sessionAffinity` with its timeout.
    pub session_affinity: SessionAffinity,
    /// `spec.externalTrafficPolicy` (applies to NodePort, ExternalIP and LoadBalancer
    /// front doors).
    pub external_traffic_policy: TrafficPolicy,
    /// `spec.internalTrafficPolicy` (applies to ClusterIP front doors).
    pub internal_traffic_policy: TrafficPolicy,
    /// `spec.loadBalancerClass`.
    pub load_balancer_class: Option<String>,
    /// The client ranges its load-balancer front doors admit: the valid entries of
    /// `spec.loadBalancerSourceRanges`, or, when that is empty, of the comma-separated
    /// annotation [`LOAD_BALANCER_SOURCE_RANGES_ANNOTATION`] (the cloud providers'
    /// precedence; kube-proxy reads only the field). Trimmed, read as
    /// [`parse_cidr_sloppy`], host bits cleared; entries that are not CIDRs are left out
    /// and set [`Service::source_ranges_unreadable`]. Empty and not unreadable: every client.
    pub load_balancer_source_ranges: Vec<IpCidr>,
    /// Some source-range entry could not be read. Then a load-balancer front door whose
    /// address family has no readable range is **closed** to every client (the compiler
    /// leaves it out), never opened: the unreadable entry may have been the only one of
    /// that family. kube-proxy ignores such entries, which would admit everyone.
    pub source_ranges_unreadable: bool,
    /// The entries left out of `load_balancer_source_ranges` (not a CIDR); the rest of the
    /// Service is served.
    pub skipped_source_ranges: Vec<ModelError>,
    /// `metadata.labels` (e.g. `service.kubernetes.io/service-proxy-name`).
    pub labels: BTreeMap<String, String>,
}

impl TryFrom<&core::Service> for Service {
    type Error = ModelError;

    fn try_from(svc: &core::Service) -> Result<Self, ModelError> {
        let cx = Ctx { object: ObjectRef::namespaced("Service", &svc.metadata) };
        let key = ServiceKey { namespace: namespace_of(&svc.metadata).to_owned(), name: cx.name(&svc.metadata)? };
        let default_spec = core::ServiceSpec::default();
        let spec = svc.spec.as_ref().unwrap_or(&default_spec);

        let type_ = match spec.type_.as_deref() {
            None | Some("") | Some("ClusterIP") => ServiceType::ClusterIp,
            Some("NodePort") => ServiceType::NodePort,
            Some("LoadBalancer") => ServiceType::LoadBalancer,
            Some("ExternalName") => ServiceType::ExternalName,
            Some(other) => {
                return Err(cx.invalid(
                    "spec.type",
                    format!("{other:?} is not one of \"ClusterIP\", \"NodePort\", \"LoadBalancer\", \"ExternalName\""),
                ))
            }
        };

        // clusterIPs is authoritative; clusterIP is its first element (older manifests
        // write only clusterIP).
        let (cluster_field, cluster_strs): (&str, Vec<&str>) = match (&spec.cluster_ips, &spec.cluster_ip) {
            (Some(ips), _) if !ips.is_empty() => ("spec.clusterIPs", ips.iter().map(String::as_str).collect()),
            (_, Some(ip)) if !ip.is_empty() => ("spec.clusterIP", vec![ip.as_str()]),
            _ => ("spec.clusterIPs", Vec::new()),
        };
        let headless = cluster_strs.first().is_some_and(|s| *s == "None");
        let mut cluster_ips = Vec::with_capacity(cluster_strs.len());
        if !headless && type_ != ServiceType::ExternalName {
            for (i, s) in cluster_strs.iter().enumerate() {
                let field = if cluster_field == "spec.clusterIP" {
                    cluster_field.to_owned()
                } else {
                    format!("{cluster_field}[{i}]")
                };
                cluster_ips.push(cx.ip(field, s)?);
            }
        }

        // A front-door address that cannot be read or can never be a VIP is left out
        // with an error; the Service's other front doors are served.
        let mut skipped_addresses = Vec::new();
        let front_door = |field: String, s: &str| -> Result<IpAddr, ModelError> {
            let ip = cx.ip(&field, s)?;
            match forbidden_front_door_address(ip) {
                None => Ok(ip),
                Some(why) => Err(cx.invalid(field, format!("{ip} {why}: it can never be a front door"))),
            }
        };
        let mut external_ips = Vec::with_capacity(spec.external_ips.as_ref().map_or(0, Vec::len));
        for (i, s) in spec.external_ips.iter().flatten().enumerate() {
            match front_door(format!("spec.externalIPs[{i}]"), s) {
                Ok(ip) => external_ips.push(ip),
                Err(e) => skipped_addresses.push(e),
            }
        }

        let mut load_balancer_ingress = Vec::new();
        let ingress = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref());
        for (i, ing) in ingress.into_iter().flatten().enumerate() {
            let ip_mode = match ing.ip_mode.as_deref() {
                None | Some("") | Some("VIP") => IpMode::Vip,
                Some("Proxy") => IpMode::Proxy,
                Some(other) => {
                    // Unknown mode: the entry is left out, not captured (a newer mode
                    // may mean "do not capture", as Proxy does).
                    skipped_addresses.push(cx.invalid(
                        format!("status.loadBalancer.ingress[{i}].ipMode"),
                        format!("{other:?} is not one of \"VIP\", \"Proxy\""),
                    ));
                    continue;
                }
            };
            match ing.ip.as_deref() {
                Some(s) if !s.is_empty() => match front_door(format!("status.loadBalancer.ingress[{i}].ip"), s) {
                    Ok(ip) => load_balancer_ingress.push(LoadBalancerIngress { ip, ip_mode }),
                    Err(e) => skipped_addresses.push(e),
                },
                _ => {} // hostname-only ingress: nothing to capture
            }
        }

        let raw_ports = spec.ports.as_deref().unwrap_or_default();
        let mut ports: Vec<ServicePort> = Vec::with_capacity(raw_ports.len());
        for (i, p) in raw_ports.iter().enumerate() {
            let field = |f: &str| format!("spec.ports[{i}].{f}");
            let name = p.name.clone().unwrap_or_default();
            if name.is_empty() && raw_ports.len() > 1 {
                return Err(cx.missing(field("name"), "a Service with several ports must name each of them"));
            }
            if let Some(j) = ports.iter().position(|q| !name.is_empty() && q.name == name) {
                return Err(cx.invalid(field("name"), format!("{name:?} is also the name of spec.ports[{j}]")));
            }
            let protocol = cx.protocol(field("protocol"), p.protocol.as_deref())?;
            let port = cx.port(field("port"), p.port)?;
            if let Some(j) = ports.iter().position(|q| q.port == port && q.protocol == protocol) {
                return Err(cx.invalid(
                    field("port"),
                    format!(
                        "{port}/{} is also spec.ports[{j}]; each port and protocol may appear once",
                        protocol.as_str()
                    ),
                ));
            }
            let target_port = match &p.target_port {
                None => TargetPort::Number(port),
                Some(IntOrString::Int(n)) => TargetPort::Number(cx.port(field("targetPort"), *n)?),
                Some(IntOrString::String(s)) if s.is_empty() => {
                    return Err(cx.invalid(field("targetPort"), "an empty name; write a container port name or number"))
                }
                Some(IntOrString::String(s)) => TargetPort::Name(s.clone()),
            };
            let node_port = match p.node_port {
                None | Some(0) => None,
                Some(n) => Some(cx.port(field("nodePort"), n)?),
            };
            ports.push(ServicePort { name, protocol, port, target_port, node_port });
        }

        let session_affinity = match spec.session_affinity.as_deref() {
            None | Some("") | Some("None") => SessionAffinity::None,
            Some("ClientIP") => {
                let t = spec
                    .session_affinity_config
                    .as_ref()
                    .and_then(|c| c.client_ip.as_ref())
                    .and_then(|c| c.timeout_seconds);
                let timeout_s = match t {
                    None => DEFAULT_AFFINITY_TIMEOUT_S,
                    Some(t) => match u32::try_from(t) {
                        Ok(t) if (1..=MAX_AFFINITY_TIMEOUT_S).contains(&t) => t,
                        _ => {
                            return Err(cx.invalid(
                                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                                format!("{t} is out of range 1..={MAX_AFFINITY_TIMEOUT_S}"),
                            ))
                        }
                    },
                };
                SessionAffinity::ClientIp { timeout_s }
            }
            Some(other) => {
                return Err(
                    cx.invalid("spec.sessionAffinity", format!("{other:?} is not one of \"None\", \"ClientIP\""))
                )
            }
        };

        let policy = |field: &str, v: Option<&str>| match v {
            None | Some("") | Some("Cluster") => Ok(TrafficPolicy::Cluster),
            Some("Local") => Ok(TrafficPolicy::Local),
            Some(other) => Err(cx.invalid(field, format!("{other:?} is not one of \"Cluster\", \"Local\""))),
        };
        let external_traffic_policy = policy("spec.externalTrafficPolicy", spec.external_traffic_policy.as_deref())?;
        let internal_traffic_policy = policy("spec.internalTrafficPolicy", spec.internal_traffic_policy.as_deref())?;
        let (load_balancer_source_ranges, skipped_source_ranges) = load_balancer_source_ranges(&cx, svc);

        Ok(Self {
            key,
            type_,
            headless,
            cluster_ips,
            external_ips,
            load_balancer_ingress,
            ports,
            session_affinity,
            external_traffic_policy,
            internal_traffic_policy,
            load_balancer_class: spec.load_balancer_class.clone().filter(|s| !s.is_empty()),
            source_ranges_unreadable: !skipped_source_ranges.is_empty(),
            load_balancer_source_ranges,
            skipped_source_ranges,
            skipped_addresses,
            labels: svc.metadata.labels.clone().unwrap_or_default(),
        })
    }
}

/// The source ranges of `svc` and the errors of the entries that are not CIDRs.
///
/// `spec.loadBalancerSourceRanges` when it has entries, else the comma-separated
/// annotation [`LOAD_BALANCER_SOURCE_RANGES_ANNOTATION`]: the precedence of the API
/// server's validation and of the cloud providers' `GetLoadBalancerSourceRanges`
/// (`k8s.io/cloud-provider/service/helpers`). kube-proxy itself reads only the field
/// (`pkg/proxy/serviceport.go`); torii, serving the load-balancer IPs in place of the
/// cloud's load balancer, honours the annotation as those load balancers do, so a
/// Service restricted that way is not opened by moving it to torii.
///
/// Entries are trimmed of spaces (the API accepts space-padded entries; kube-proxy trims
/// them too), read as kube-proxy's `MapCIDRsByIPFamily` does (`ParseCIDRSloppy`: legacy
/// leading zeros are decimal), and host bits are cleared (`10.0.0.1/8` is `10.0.0.0/8`).
/// An entry that still is not a CIDR is left out with an error naming the Service and the
/// field, and the others still apply. Unlike kube-proxy, which logs "Invalid CIDR
/// ignored" and so admits everyone when no valid entry of a family is left, torii fails
/// closed: see [`Service::source_ranges_unreadable`].
fn load_balancer_source_ranges(cx: &Ctx, svc: &core::Service) -> (Vec<IpCidr>, Vec<ModelError>) {
    let field = svc.spec.as_ref().and_then(|s| s.load_balancer_source_ranges.as_deref()).unwrap_or_default();
    let annotation = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LOAD_BALANCER_SOURCE_RANGES_ANNOTATION))
        .map(|v| v.trim())
        .filter(|v| !v.is_empty());
    let entries: Vec<(String, &str)> = match annotation {
        Some(value) if field.is_empty() => {
            let path = format!("metadata.annotations[{LOAD_BALANCER_SOURCE_RANGES_ANNOTATION}]");
            value.split(',').enumerate().map(|(i, e)| (format!("{path}: entry {i}"), e)).collect()
        }
        _ => {
            field.iter().enumerate().map(|(i, e)| (format!("spec.loadBalancerSourceRanges[{i}]"), e.as_str())).collect()
        }
    };
    let mut ranges = Vec::with_capacity(entries.len());
    let mut bad = Vec::new();
    for (path, entry) in &entries {
        match parse_cidr_sloppy(entry.trim()) {
            Some(c) => ranges.push(c),
            None => bad.push((path, entry)),
        }
    }
    let skipped = bad
        .into_iter()
        .map(|(path, entry)| {
            cx.invalid(
                path.as_str(),
                format!(
                    "{:?} is not an IPv4 or IPv6 CIDR (address/prefix length); it admits nobody, and a \
                     load-balancer IP of a family without a readable range is closed to every client \
                     (kube-proxy would ignore the entry and could admit everyone)",
                    entry.trim()
                ),
            )
        })
        .collect();
    (ranges, skipped)
}

// ---------------------------------------------------------------------------------------
// EndpointSlice

/// `addressType` of an EndpointSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressType {
    /// `IPv4`.
    Ipv4,
    /// `IPv6`.
    Ipv6,
    /// `FQDN` (deprecated; kube-proxy ignores such slices, and so does torii: their
    /// endpoints are dropped during conversion).
    Fqdn,
}

/// One `ports[]` entry of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointPort {
    /// `name`; matches the Service port of the same name (empty matches an unnamed port).
    pub name: String,
    /// `protocol` (default TCP).
    pub protocol: Protocol,
    /// `port`: the port the endpoints listen on. `None` means "all ports", which
    /// kube-proxy does not serve.
    pub port: Option<u16>,
}

/// `endpoints[].hints`: which zones or nodes should consume an endpoint (topology-aware
/// routing).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointHints {
    /// `forZones[].name`.
    pub for_zones: Vec<String>,
    /// `forNodes[].name`.
    pub for_nodes: Vec<String>,
}

/// One `endpoints[]` entry of an EndpointSlice. Kept small (64 bytes, no allocation for
/// the common endpoint): the compiler holds one per endpoint of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// Its index in the slice's `endpoints` (for messages: skipped ones leave gaps; the API
    /// allows at most 1 000).
    pub index: u32,
    /// `addresses[0]`. Every entry of `addresses` is checked (an endpoint with one that is
    /// not of the slice's address family, or not an address, is skipped), but only the
    /// first is kept: the API calls them fungible, and kube-proxy uses the first
    /// (`pkg/proxy/endpointslicecache.go`).
    pub address: IpAddr,
    /// `conditions.ready` (absent = true): ready for new traffic.
    pub ready: bool,
    /// `conditions.serving` (absent = true): passes readiness, terminating or not.
    pub serving: bool,
    /// `conditions.terminating` (absent = false).
    pub terminating: bool,
    /// `nodeName`: the Node hosting the endpoint.
    pub node_name: Option<Box<str>>,
    /// `zone`.
    pub zone: Option<Box<str>>,
    /// `hints`, when present.
    pub hints: Option<Box<EndpointHints>>,
}

/// A validated EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSlice {
    /// `metadata.namespace` (the Service's namespace too).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The Service it belongs to: label `kubernetes.io/service-name` in the same namespace.
    pub service: ServiceKey,
    /// `addressType`.
    pub address_type: AddressType,
    /// `ports`, without the skipped ones.
    pub ports: Vec<EndpointPort>,
    /// Why ports were left out of `ports` (a number out of 1..=65535, an unknown
    /// protocol); the slice's other ports are served.
    pub skipped_ports: Vec<ModelError>,
    /// `endpoints` (empty for `FQDN` slices), without the skipped ones.
    pub endpoints: Vec<Endpoint>,
    /// Why endpoints were left out of `endpoints` (no address, an address that is not one
    /// even read as [`parse_ip_sloppy`], one of the other family, or one the EndpointSlice
    /// API forbids, see [`forbidden_endpoint_address`]); the rest of the slice is served.
    pub skipped_endpoints: Vec<ModelError>,
}

impl TryFrom<&discovery::EndpointSlice> for EndpointSlice {
    type Error = ModelError;

    fn try_from(slice: &discovery::EndpointSlice) -> Result<Self, ModelError> {
        let cx = Ctx { object: ObjectRef::namespaced("EndpointSlice", &slice.metadata) };
        let namespace = namespace_of(&slice.metadata).to_owned();
        let name = cx.name(&slice.metadata)?;
        let service_name = slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)).cloned();
        let service_name = match service_name {
            Some(s) if !s.is_empty() => s,
            _ => {
                return Err(cx.missing(
                    format!("metadata.labels[{SERVICE_NAME_LABEL}]"),
                    "it names the Service these endpoints belong to",
                ))
            }
        };
        let address_type = match slice.address_type.as_str() {
            "IPv4" => AddressType::Ipv4,
            "IPv6" => AddressType::Ipv6,
            "FQDN" => AddressType::Fqdn,
            "" => return Err(cx.missing("addressType", "write \"IPv4\" or \"IPv6\"")),
            other => {
                return Err(cx.invalid("addressType", format!("{other:?} is not one of \"IPv4\", \"IPv6\", \"FQDN\"")))
            }
        };

        // A port entry that cannot be served is left out (kube-proxy skips such a port and
        // keeps the others, `pkg/proxy/endpointslicecache.go`); the Service port of that
        // name then has no endpoints from this slice.
        let mut ports = Vec::with_capacity(slice.ports.as_ref().map_or(0, Vec::len));
        let mut skipped_ports = Vec::new();
        for (i, p) in slice.ports.iter().flatten().enumerate() {
            let protocol = cx.protocol(format!("ports[{i}].protocol"), p.protocol.as_deref());
            let port = p.port.map(|n| cx.port(format!("ports[{i}].port"), n)).transpose();
            match (protocol, port) {
                (Ok(protocol), Ok(port)) => {
                    ports.push(EndpointPort { name: p.name.clone().unwrap_or_default(), protocol, port });
                }
                (Err(e), _) | (_, Err(e)) => skipped_ports.push(e),
            }
        }

        let mut endpoints = Vec::with_capacity(slice.endpoints.as_ref().map_or(0, Vec::len));
        let mut skipped_endpoints = Vec::new();
        if address_type != AddressType::Fqdn {
            'endpoints: for (i, ep) in slice.endpoints.iter().flatten().enumerate() {
                if ep.addresses.is_empty() {
                    skipped_endpoints.push(
                        cx.missing(format!("endpoints[{i}].addresses"), "an endpoint needs at least one address"),
                    );
                    continue;
                }
                let mut first = None;
                for (j, a) in ep.addresses.iter().enumerate() {
                    let field = format!("endpoints[{i}].addresses[{j}]");
                    let ip = match cx.ip(&field, a) {
                        Ok(ip) => ip,
                        Err(e) => {
                            skipped_endpoints.push(e);
                            continue 'endpoints;
                        }
                    };
                    let family_ok = match address_type {
                        AddressType::Ipv4 => ip.is_ipv4(),
                        AddressType::Ipv6 => ip.is_ipv6(),
                        AddressType::Fqdn => true,
                    };
                    if !family_ok {
                        skipped_endpoints.push(
                            cx.invalid(field, format!("{ip} does not match addressType {:?}", slice.address_type)),
                        );
                        continue 'endpoints;
                    }
                    if let Some(why) = forbidden_endpoint_address(ip) {
                        skipped_endpoints.push(cx.invalid(field, format!("{ip} {why}")));
                        continue 'endpoints;
                    }
                    first.get_or_insert(ip);
                }
                let Some(address) = first else { continue };
                let c = ep.conditions.as_ref();
                let hints = ep.hints.as_ref().map(|h| {
                    Box::new(EndpointHints {
                        for_zones: h.for_zones.iter().flatten().map(|z| z.name.clone()).collect(),
                        for_nodes: h.for_nodes.iter().flatten().map(|n| n.name.clone()).collect(),
                    })
                });
                endpoints.push(Endpoint {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    address,
                    ready: c.and_then(|c| c.ready).unwrap_or(true),
                    serving: c.and_then(|c| c.serving).unwrap_or(true),
                    terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                    node_name: ep.node_name.as_deref().filter(|s| !s.is_empty()).map(Box::from),
                    zone: ep.zone.as_deref().filter(|s| !s.is_empty()).map(Box::from),
                    hints,
                });
            }
        }

        Ok(Self {
            service: ServiceKey { namespace: namespace.clone(), name: service_name },
            namespace,
            name,
            address_type,
            ports,
            skipped_ports,
            endpoints,
            skipped_endpoints,
        })
    }
}

/// Why `ip` cannot be an endpoint address (a phrase to follow the address in a message),
/// or `None` when it can.
///
/// The EndpointSlice API rejects unspecified, loopback, link-local unicast and link-local
/// multicast addresses (`ValidateEndpointIP`, `pkg/apis/core/validation` of
/// kubernetes/kubernetes, applied by `pkg/apis/discovery/validation` to every endpoint
/// address): they are meaningless as destinations or reserved for node-local purposes
/// such as metadata services. torii also refuses the other multicast addresses and the
/// IPv4 broadcast address, which no flow can be translated to (the API lets them through,
/// which its own comment calls "probably a bug"). An IPv4-mapped IPv6 address is judged as
/// the IPv4 address it maps, as Go's `net.IP` methods do.
pub fn forbidden_endpoint_address(ip: IpAddr) -> Option<String> {
    let api = |why: &str| Some(format!("{why}, which the EndpointSlice API forbids for endpoint addresses"));
    let unusable = |why: &str| Some(format!("{why}: no flow can be sent to it"));
    match ip.to_canonical() {
        IpAddr::V4(v4) if v4.is_unspecified() => api("is unspecified (0.0.0.0)"),
        IpAddr::V4(v4) if v4.is_loopback() => api("is in the loopback range 127.0.0.0/8"),
        IpAddr::V4(v4) if v4.is_link_local() => api("is in the link-local range 169.254.0.0/16"),
        IpAddr::V4(v4) if v4.octets()[..3] == [224, 0, 0] => api("is in the link-local multicast range 224.0.0.0/24"),
        IpAddr::V4(v4) if v4.is_multicast() => unusable("is a multicast address (224.0.0.0/4)"),
        IpAddr::V4(v4) if v4.is_broadcast() => unusable("is the broadcast address"),
        IpAddr::V6(v6) if v6.is_unspecified() => api("is unspecified (::)"),
        IpAddr::V6(v6) if v6.is_loopback() => api("is the loopback address ::1"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => api("is in the link-local range fe80::/10"),
        IpAddr::V6(v6) if v6.octets()[0] == 0xff && v6.octets()[1] & 0x0f == 0x02 => {
            api("is a link-local multicast address (ff02::/16)")
        }
        IpAddr::V6(v6) if v6.is_multicast() => unusable("is a multicast address (ff00::/8)"),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Node

/// A validated Node: its name and addresses by type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// `metadata.name`.
    pub name: String,
    /// `status.addresses[]` of type `InternalIP`, in order, without duplicates.
    pub internal_ips: Vec<IpAddr>,
    /// `status.addresses[]` of type `ExternalIP`, in order, without duplicates.
    pub external_ips: Vec<IpAddr>,
    /// The other `status.addresses[]` (`Hostname`, `InternalDNS`, `ExternalDNS`, …) as
    /// `(type, address)`, unvalidated.
    pub other_addresses: Vec<(String, String)>,
    /// Label `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// The InternalIP / ExternalIP entries left out because they are not IP addresses
    /// (even read as [`parse_ip_sloppy`]); the Node's other addresses and zone are used.
    pub skipped_addresses: Vec<ModelError>,
}

impl Node {
    /// The addresses NodePorts are served on: InternalIPs then ExternalIPs, without
    /// duplicates (kube-proxy's default with no `nodePortAddresses`).
    pub fn node_port_ips(&self) -> Vec<IpAddr> {
        let mut seen = BTreeSet::new();
        self.internal_ips.iter().chain(&self.external_ips).copied().filter(|ip| seen.insert(*ip)).collect()
    }
}

impl TryFrom<&core::Node> for Node {
    type Error = ModelError;

    fn try_from(node: &core::Node) -> Result<Self, ModelError> {
        let cx = Ctx { object: ObjectRef::cluster_scoped("Node", &node.metadata) };
        let name = cx.name(&node.metadata)?;
        let mut internal_ips = Vec::new();
        let mut external_ips = Vec::new();
        let mut other_addresses = Vec::new();
        let mut skipped_addresses = Vec::new();
        let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        for (i, a) in addresses.into_iter().flatten().enumerate() {
            let list = match a.type_.as_str() {
                "InternalIP" => &mut internal_ips,
                "ExternalIP" => &mut external_ips,
                _ => {
                    other_addresses.push((a.type_.clone(), a.address.clone()));
                    continue;
                }
            };
            // The API accepts any string here; Kubernetes' own helpers skip an entry that
            // is not an IP and use the others, and so does torii.
            match cx.ip(format!("status.addresses[{i}].address"), &a.address) {
                Ok(ip) if !list.contains(&ip) => list.push(ip),
                Ok(_) => {}
                Err(e) => skipped_addresses.push(e),
            }
        }
        let zone = node.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).cloned();
        Ok(Self { name, internal_ips, external_ips, other_addresses, zone, skipped_addresses })
    }
}

// ---------------------------------------------------------------------------------------
// The whole set

/// What [`Objects::from_kube`] left out of one object: its position in the input, why, and
/// whether the whole object or only one of its parts was left out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct Rejected {
    /// Index of the object in the input.
    pub index: usize,
    /// Why it was left out.
    #[source]
    pub error: ModelError,
    /// The whole object, or one part of it (the rest is served).
    pub skipped: Skipped,
}

/// What an error made torii leave out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Skipped {
    /// The whole object.
    Object,
    /// One endpoint of an EndpointSlice; the rest of the slice is served.
    Endpoint,
    /// One `loadBalancerSourceRanges` entry of a Service; the rest of the Service is served.
    SourceRange,
    /// One `ports[]` entry of an EndpointSlice; the slice's other ports are served.
    Port,
    /// One address of a Service (`spec.externalIPs[]`, a load-balancer ingress entry) or
    /// of a Node (`status.addresses[]`); the rest of the object is served.
    Address,
}

impl Skipped {
    /// `"object"`, `"endpoint"`, `"source range"`, `"port"` or `"address"`, for messages ending `; object skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Endpoint => "endpoint",
            Self::SourceRange => "source range",
            Self::Port => "port",
            Self::Address => "address",
        }
    }
}

/// A validated object, or why it is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Validated {
    /// A valid Service.
    Service(Service),
    /// A valid EndpointSlice (maybe without some endpoints, see
    /// [`EndpointSlice::skipped_endpoints`]).
    EndpointSlice(EndpointSlice),
    /// A valid Node.
    Node(Node),
}

impl Validated {
    /// The parts of a valid object that were left out, and what each was
    /// ([`Service::skipped_addresses`], [`Service::skipped_source_ranges`],
    /// [`EndpointSlice::skipped_ports`], [`EndpointSlice::skipped_endpoints`],
    /// [`Node::skipped_addresses`]).
    pub fn skipped_parts(&self) -> Vec<(ModelError, Skipped)> {
        let lists: [(&[ModelError], Skipped); 2] = match self {
            Self::Service(s) => {
                [(&s.skipped_addresses, Skipped::Address), (&s.skipped_source_ranges, Skipped::SourceRange)]
            }
            Self::EndpointSlice(s) => [(&s.skipped_ports, Skipped::Port), (&s.skipped_endpoints, Skipped::Endpoint)],
            Self::Node(n) => [(&n.skipped_addresses, Skipped::Address), (&[], Skipped::Address)],
        };
        lists.into_iter().flat_map(|(errors, what)| errors.iter().map(move |e| (e.clone(), what))).collect()
    }

    /// Validates one object.
    ///
    /// # Errors
    /// The [`ModelError`] that makes the whole object unusable.
    pub fn from_kube(object: &KubeObject) -> Result<Self, ModelError> {
        Ok(match object {
            KubeObject::Service(s) => Self::Service(Service::try_from(&**s)?),
            KubeObject::EndpointSlice(s) => Self::EndpointSlice(EndpointSlice::try_from(&**s)?),
            KubeObject::Node(n) => Self::Node(Node::try_from(&**n)?),
        })
    }
}

/// Every valid object of one snapshot, each list sorted by identity (the compiler's
/// inputs are sorted so that its output is deterministic).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Objects {
    /// Services, sorted by namespace/name.
    pub services: Vec<Service>,
    /// EndpointSlices, sorted by namespace/name.
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Nodes, sorted by name.
    pub nodes: Vec<Node>,
}

/// The error for a later definition of an object already defined in the same input.
pub fn duplicate_error(object: ObjectRef) -> ModelError {
    ModelError::Invalid {
        object,
        field: "metadata.name".into(),
        message: "defined more than once; the first definition is served".into(),
    }
}

impl Objects {
    /// Validates every object; the invalid ones are left out and returned with their
    /// input index (in input order), and so are the parts a valid object had to leave out
    /// ([`Validated::skipped_parts`]). Later duplicates of a (kind, namespace, name) are
    /// left out too.
    pub fn from_kube<'a>(objects: impl IntoIterator<Item = &'a KubeObject>) -> (Self, Vec<Rejected>) {
        let mut out = Self::default();
        let mut errors = Vec::new();
        let mut seen = BTreeSet::new();
        for (index, obj) in objects.into_iter().enumerate() {
            let r = obj.object_ref();
            if !r.name.is_empty() && !seen.insert(r.clone()) {
                errors.push(Rejected { index, error: duplicate_error(r), skipped: Skipped::Object });
                continue;
            }
            let valid = match Validated::from_kube(obj) {
                Ok(v) => v,
                Err(error) => {
                    errors.push(Rejected { index, error, skipped: Skipped::Object });
                    continue;
                }
            };
            errors.extend(valid.skipped_parts().into_iter().map(|(error, skipped)| Rejected { index, error, skipped }));
            match valid {
                Validated::Service(s) => out.services.push(s),
                Validated::EndpointSlice(s) => out.endpoint_slices.push(s),
                Validated::Node(n) => out.nodes.push(n),
            }
        }
        out.services.sort_by(|a, b| a.key.cmp(&b.key));
        out.endpoint_slices.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        (out, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(yaml: &str) -> core::Service {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn slice(yaml: &str) -> discovery::EndpointSlice {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    const WEB: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.0.10
  externalIPs: [203.0.113.10, "2001:db8::10"]
  sessionAffinity: ClientIP
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: dns, port: 53, protocol: UDP, nodePort: 30053}
status:
  loadBalancer:
    ingress: [{ip: 198.51.100.7}, {hostname: lb.example.com}, {ip: 198.51.100.8, ipMode: Proxy}]
"#;

    #[test]
    fn service_defaults_and_normalisation() {
        let s = Service::try_from(&service(WEB)).unwrap();
        assert_eq!(s.key.to_string(), "default/web");
        assert_eq!(s.type_, ServiceType::ClusterIp);
        assert!(!s.headless);
        assert_eq!(s.cluster_ips, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(s.external_ips.len(), 2);
        assert_eq!(
            s.load_balancer_ingress,
            vec![
                LoadBalancerIngress { ip: "198.51.100.7".parse().unwrap(), ip_mode: IpMode::Vip },
                LoadBalancerIngress { ip: "198.51.100.8".parse().unwrap(), ip_mode: IpMode::Proxy },
            ]
        );
        assert_eq!(s.ports[0].protocol, Protocol::Tcp);
        assert_eq!(s.ports[0].target_port, TargetPort::Name("http".into()));
        assert_eq!(s.ports[1].target_port, TargetPort::Number(53));
        assert_eq!(s.ports[1].node_port, Some(30053));
        assert_eq!(s.session_affinity, SessionAffinity::ClientIp { timeout_s: DEFAULT_AFFINITY_TIMEOUT_S });
        assert_eq!(s.external_traffic_policy, TrafficPolicy::Cluster);
    }

    #[test]
    fn headless_and_cluster_ips_precedence() {
        let s = Service::try_from(&service("metadata: {name: h, namespace: x}\nspec: {clusterIP: None}")).unwrap();
        assert!(s.headless);
        assert!(s.cluster_ips.is_empty());
        let s = Service::try_from(&service(
            "metadata: {name: d}\nspec: {clusterIP: 10.0.0.1, clusterIPs: [10.0.0.1, 'fd00::1']}",
        ))
        .unwrap();
        assert_eq!(s.cluster_ips.len(), 2);
    }

    fn service_err(yaml: &str) -> String {
        Service::try_from(&service(yaml)).unwrap_err().to_string()
    }

    #[test]
    fn service_errors_name_object_and_field() {
        let e = service_err("metadata: {name: web}\nspec: {ports: [{name: a, port: 80}, {name: b, port: 0}]}");
        assert_eq!(e, "Service default/web: spec.ports[1].port: 0 is out of range 1..=65535");
        let e = service_err("metadata: {name: web, namespace: demo}\nspec: {ports: [{port: 80, targetPort: 70000}]}");
        assert_eq!(e, "Service demo/web: spec.ports[0].targetPort: 70000 is out of range 1..=65535");
        let e = service_err("metadata: {name: web}\nspec: {ports: [{port: 80, protocol: ICMP}]}");
        assert!(e.starts_with("Service default/web: spec.ports[0].protocol: \"ICMP\" is not one of"), "{e}");
        let e = service_err("metadata: {name: web}\nspec: {ports: [{port: 80}, {port: 81}]}");
        assert!(e.starts_with("Service default/web: spec.ports[0].name: required but missing"), "{e}");
        let e = service_err("metadata: {name: web}\nspec: {ports: [{name: a, port: 80}, {name: a, port: 81}]}");
        assert_eq!(e, "Service default/web: spec.ports[1].name: \"a\" is also the name of spec.ports[0]");
        let e = service_err("metadata: {name: web}\nspec: {ports: [{name: a, port: 80}, {name: b, port: 80}]}");
        assert!(e.starts_with("Service default/web: spec.ports[1].port: 80/TCP is also spec.ports[0]"), "{e}");
        let e = service_err(
            "metadata: {name: web}\nspec: {sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}}",
        );
        assert_eq!(
            e,
            "Service default/web: spec.sessionAffinityConfig.clientIP.timeoutSeconds: 0 is out of range 1..=86400"
        );
        let e = service_err("metadata: {name: web}\nspec: {externalTrafficPolicy: Global}");
        assert!(e.starts_with("Service default/web: spec.externalTrafficPolicy: \"Global\""), "{e}");
        let e = service_err("metadata: {name: web}\nspec: {type: Magic}");
        assert!(e.starts_with("Service default/web: spec.type: \"Magic\""), "{e}");
        let e = service_err("metadata: {namespace: demo}\nspec: {}");
        assert!(e.starts_with("Service demo/<unnamed>: metadata.name: required but missing"), "{e}");
    }

    #[test]
    fn front_door_addresses_are_skipped_one_by_one() {
        let s = Service::try_from(&service(
            "metadata: {name: web}\nspec: {externalIPs: [1.2.3.4, bogus, 203.0.113.011, 127.0.0.1, 0.0.0.0, \
             224.0.0.9, 255.255.255.255, '::1', 'ff02::1', 169.254.1.1]}\nstatus: {loadBalancer: {ingress: \
             [{ip: 1.2.3.5, ipMode: Magic}, {ip: 198.051.100.007}, {ip: '::'}]}}",
        ))
        .unwrap();
        let ips: Vec<String> = s.external_ips.iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["1.2.3.4", "203.0.113.11"], "legacy leading zeros are decimal");
        assert_eq!(s.load_balancer_ingress.len(), 1);
        assert_eq!(s.load_balancer_ingress[0].ip.to_string(), "198.51.100.7");
        let errors: Vec<String> = s.skipped_addresses.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 10, "{errors:#?}");
        assert_eq!(errors[0], "Service default/web: spec.externalIPs[1]: \"bogus\" is not an IPv4 or IPv6 address");
        assert_eq!(
            errors[1],
            "Service default/web: spec.externalIPs[3]: 127.0.0.1 is in the loopback range 127.0.0.0/8: it can never \
             be a front door"
        );
        assert!(errors[7].starts_with("Service default/web: spec.externalIPs[9]: 169.254.1.1"), "{errors:#?}");
        assert!(errors[8].starts_with("Service default/web: status.loadBalancer.ingress[0].ipMode: \"Magic\""));
        assert!(errors[9].starts_with("Service default/web: status.loadBalancer.ingress[2].ip: :: is unspecified"));
    }

    #[test]
    fn sloppy_parsers_read_legacy_leading_zeros_as_decimal() {
        let ip = |s: &str| parse_ip_sloppy(s).map(|a| a.to_string());
        assert_eq!(ip("010.070.000.241").as_deref(), Some("10.70.0.241"));
        assert_eq!(ip("0000000010.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(ip("::ffff:010.0.0.011").as_deref(), Some("::ffff:10.0.0.11"));
        assert_eq!(ip("2001:db8::1").as_deref(), Some("2001:db8::1"));
        for bad in ["256.0.0.1", "1.2.3", "1.2.3.4.5", "1..2.3", "0x1.2.3.4", "", "1.2.3.4 ", "a.b.c.d", "1.2.3.-4"] {
            assert_eq!(ip(bad), None, "{bad:?}");
        }
        let cidr = |s: &str| parse_cidr_sloppy(s).map(|c| c.to_string());
        assert_eq!(cidr("010.0.0.0/8").as_deref(), Some("10.0.0.0/8"));
        assert_eq!(cidr("192.168.001.000/024").as_deref(), Some("192.168.1.0/24"));
        assert_eq!(cidr("010.1.2.3/8").as_deref(), Some("10.0.0.0/8"));
        assert_eq!(cidr("2001:db8::1/0064").as_deref(), Some("2001:db8::/64"));
        for bad in ["10.0.0.0/33", "10.0.0.0/", "10.0.0.0", "010.0.0.0/-1", "x/8", "::/129"] {
            assert_eq!(cidr(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn endpoint_slice_conditions_default() {
        let s = EndpointSlice::try_from(&slice(
            r#"
metadata: {name: web-abc, namespace: demo, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.0.0.1]
- addresses: [10.0.0.2]
  conditions: {ready: false, serving: true, terminating: true}
  nodeName: node-a
  zone: zone-a
  hints: {forZones: [{name: zone-a}]}
"#,
        ))
        .unwrap();
        assert_eq!(s.service.to_string(), "demo/web");
        assert_eq!(s.ports, vec![EndpointPort { name: "http".into(), protocol: Protocol::Tcp, port: Some(8080) }]);
        let (a, b) = (&s.endpoints[0], &s.endpoints[1]);
        assert!(a.ready && a.serving && !a.terminating);
        assert!(!b.ready && b.serving && b.terminating);
        assert_eq!(b.node_name.as_deref(), Some("node-a"));
        assert_eq!(b.hints.as_ref().unwrap().for_zones, vec!["zone-a".to_owned()]);
    }

    #[test]
    fn endpoint_slice_errors_name_object_and_field() {
        let err = |y: &str| EndpointSlice::try_from(&slice(y)).unwrap_err().to_string();
        let e = err("metadata: {name: s}\naddressType: IPv4");
        assert!(e.starts_with("EndpointSlice default/s: metadata.labels[kubernetes.io/service-name]: required"), "{e}");
        let e = err("metadata: {name: s, labels: {kubernetes.io/service-name: w}}\naddressType: IPX");
        assert!(e.starts_with("EndpointSlice default/s: addressType: \"IPX\""), "{e}");
    }

    #[test]
    fn endpoint_slice_parts_are_skipped_one_by_one() {
        let s = EndpointSlice::try_from(&slice(
            "metadata: {name: s, labels: {kubernetes.io/service-name: w}}\naddressType: IPv4\n\
             ports: [{name: a, port: 80}, {name: b, port: 0}, {name: c, port: 70000}, {name: d, protocol: ICMP, port: 1}]\n\
             endpoints: [{addresses: ['fd00::1']}, {addresses: [010.070.000.241]}, {addresses: []}, {addresses: [x]}]",
        ))
        .unwrap();
        assert_eq!(s.ports, vec![EndpointPort { name: "a".into(), protocol: Protocol::Tcp, port: Some(80) }]);
        let errors: Vec<String> = s.skipped_ports.iter().map(ToString::to_string).collect();
        assert_eq!(errors[0], "EndpointSlice default/s: ports[1].port: 0 is out of range 1..=65535");
        assert_eq!(errors[1], "EndpointSlice default/s: ports[2].port: 70000 is out of range 1..=65535");
        assert!(errors[2].starts_with("EndpointSlice default/s: ports[3].protocol: \"ICMP\""), "{errors:?}");
        assert_eq!(s.endpoints.len(), 1);
        assert_eq!((s.endpoints[0].index, s.endpoints[0].address.to_string()), (1, "10.70.0.241".into()));
        let errors: Vec<String> = s.skipped_endpoints.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "EndpointSlice default/s: endpoints[0].addresses[0]: fd00::1 does not match addressType \"IPv4\"",
                "EndpointSlice default/s: endpoints[2].addresses: required but missing; an endpoint needs at least \
                 one address",
                "EndpointSlice default/s: endpoints[3].addresses[0]: \"x\" is not an IPv4 or IPv6 address",
            ]
        );
    }

    #[test]
    fn fqdn_slices_carry_no_endpoints() {
        let s = EndpointSlice::try_from(&slice(
            "metadata: {name: s, labels: {kubernetes.io/service-name: w}}\naddressType: FQDN\nendpoints: [{addresses: [db.example.com]}]",
        ))
        .unwrap();
        assert_eq!(s.address_type, AddressType::Fqdn);
        assert!(s.endpoints.is_empty());
    }

    #[test]
    fn node_addresses_by_type() {
        let n: core::Node = serde_yaml_ng::from_str(
            r#"
metadata: {name: gw-1, labels: {topology.kubernetes.io/zone: zone-a}}
status:
  addresses:
  - {type: InternalIP, address: 192.0.2.10}
  - {type: InternalIP, address: "2001:db8::10"}
  - {type: ExternalIP, address: 192.0.2.10}
  - {type: Hostname, address: gw-1}
"#,
        )
        .unwrap();
        let n = Node::try_from(&n).unwrap();
        assert_eq!(n.internal_ips.len(), 2);
        assert_eq!(n.node_port_ips().len(), 2, "duplicates across types are served once");
        assert_eq!(n.other_addresses, vec![("Hostname".to_owned(), "gw-1".to_owned())]);
        assert_eq!(n.zone.as_deref(), Some("zone-a"));

        let bad: core::Node = serde_yaml_ng::from_str(
            "metadata: {name: n, labels: {topology.kubernetes.io/zone: z}}\nstatus: {addresses: [{type: InternalIP, \
             address: x}, {type: InternalIP, address: 192.000.002.010}, {type: ExternalIP, address: gw.example}]}",
        )
        .unwrap();
        let n = Node::try_from(&bad).unwrap();
        assert_eq!(n.node_port_ips(), ["192.0.2.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(n.zone.as_deref(), Some("z"));
        let errors: Vec<String> = n.skipped_addresses.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "Node n: status.addresses[0].address: \"x\" is not an IPv4 or IPv6 address",
                "Node n: status.addresses[2].address: \"gw.example\" is not an IPv4 or IPv6 address",
            ]
        );
    }

    #[test]
    fn objects_skip_invalid_and_duplicates_and_sort() {
        let objs = vec![
            KubeObject::Service(Box::new(service("metadata: {name: b}"))),
            KubeObject::Service(Box::new(service("metadata: {name: a}\nspec: {ports: [{port: 0}]}"))),
            KubeObject::Service(Box::new(service("metadata: {name: a, namespace: a}"))),
            KubeObject::Service(Box::new(service("metadata: {name: b}\nspec: {type: NodePort}"))),
        ];
        let (o, errors) = Objects::from_kube(&objs);
        let keys: Vec<String> = o.services.iter().map(|s| s.key.to_string()).collect();
        assert_eq!(keys, ["a/a", "default/b"]);
        assert_eq!(o.services[1].type_, ServiceType::ClusterIp, "the first definition wins");
        assert_eq!(errors.len(), 2);
        assert_eq!((errors[0].index, errors[0].error.field()), (1, "spec.ports[0].port"));
        assert_eq!((errors[1].index, errors[1].error.object().to_string()), (3, "Service default/b".into()));
    }
}
