//! The compiler: validated objects in, front doors with their backends out.
//!
//! [`compile`] is pure and deterministic: no I/O, no clock, no randomness; its inputs are
//! sorted ([`Objects`] keeps them so) and so is its output, which makes it golden-testable.
//! [`Compiled`] serialises to the JSON that `torii-control compile` prints (the operator's
//! contract, see [`Compiled`]) and converts to the gateway's [`TableSpec`].
//!
//! The semantics are kube-proxy's (the Kubernetes "Service" and "Virtual IPs and Service
//! Proxies" documentation; `pkg/proxy` in kubernetes/kubernetes):
//!
//! - Headless Services (`clusterIP: None`) and `type: ExternalName` are not proxied.
//! - Front doors, per Service port: every ClusterIP (only with
//!   [`CompileOptions::cluster_ips`]); every `spec.externalIPs[]`; every
//!   `status.loadBalancer.ingress[].ip` whose `ipMode` is not `Proxy`; and, for type
//!   NodePort and LoadBalancer, the port's `nodePort` on each InternalIP and ExternalIP of
//!   the Node named [`CompileOptions::node_name`]. Only in the address families of the
//!   Service's ClusterIPs, as kube-proxy (all families when a manifest gives no ClusterIP).
//! - Endpoints: every EndpointSlice labelled `kubernetes.io/service-name: <service>` in the
//!   Service's namespace, of the front door's address family. A Service port matches the
//!   slice port of the same name and protocol (so named `targetPort`s resolve per
//!   endpoint); the backend port is the slice port's number. Every address of an endpoint
//!   is a backend.
//! - Endpoint choice is kube-proxy's `CategorizeEndpoints`: ready endpoints; if there are
//!   none, the serving-and-terminating ones. `externalTrafficPolicy: Local` (NodePort,
//!   ExternalIP and LoadBalancer front doors) and `internalTrafficPolicy: Local`
//!   (ClusterIP front doors) keep only endpoints whose `nodeName` is the gateway's node,
//!   with the same fallback among those. No endpoint left: the front door has no
//!   backends and rejects (ICMP port unreachable, TCP RST).
//! - `sessionAffinity: ClientIP` gives the backend set an affinity timeout.
//! - Two Services claiming one front door (address, protocol, port): the Service that
//!   sorts first by namespace/name keeps it; the other loses that front door, with an
//!   error naming both.
//!
//! Not yet: topology hints, `nodePortAddresses`, `loadBalancerSourceRanges`,
//! `service.kubernetes.io/service-proxy-name` and `loadBalancerClass` filtering, and
//! kube-proxy's drop-versus-reject distinction for `Local` policies without local endpoints.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Serialize, Serializer};
use torii_gateway::table::{BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec, TableSpec};

use crate::model::{EndpointSlice, IpMode, Objects, Service, ServicePort, ServiceType, TargetPort, TrafficPolicy};

/// What the compiler needs to know about the gateway it compiles for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// The Kubernetes Node this gateway is: NodePorts are served on its addresses, and
    /// `Local` traffic policies keep the endpoints on it.
    pub node_name: String,
    /// Serve ClusterIPs as front doors too.
    pub cluster_ips: bool,
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
///       "endpoints": "ready",
///       "backends": [{"ip": "10.70.0.11", "port": 8080}]
///     }
///   ],
///   "errors": ["…"],
///   "warnings": ["…"]
/// }
/// ```
///
/// `frontends` is sorted by ip (numerically, IPv4 before IPv6), protocol (TCP, UDP, SCTP),
/// port, then service; `backends` by ip, then port. See [`Frontend`] for each field.
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
    /// Backends, sorted; empty when the front door rejects.
    pub backends: Vec<Backend>,
}

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

fn ser_protocol<S: Serializer>(p: &Protocol, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}

fn ser_kind<S: Serializer>(k: &FrontendKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.as_str())
}

fn ser_policy<S: Serializer>(p: &TrafficPolicy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}

impl Compiled {
    /// The table the gateway serves: one [`FrontendSpec`] per front door; front doors of
    /// one Service port with the same backends and affinity share one [`ServiceSpec`]
    /// (one Maglev ring), named `namespace/name:port-name`.
    pub fn to_table_spec(&self) -> TableSpec {
        let mut spec = TableSpec::default();
        let mut index: BTreeMap<(String, &[Backend], Option<u32>), usize> = BTreeMap::new();
        for f in &self.frontends {
            let name = format!("{}:{}", f.service, f.port_name);
            let key = (name, f.backends.as_slice(), f.session_affinity_timeout_s);
            let service = *index.entry(key).or_insert_with_key(|(name, backends, affinity)| {
                spec.services.push(ServiceSpec {
                    name: name.clone(),
                    backends: backends.iter().map(|b| BackendSpec { addr: b.ip, port: b.port }).collect(),
                    affinity_timeout_s: *affinity,
                });
                spec.services.len() - 1
            });
            spec.frontends.push(FrontendSpec { addr: f.ip, port: f.port, protocol: f.protocol, kind: f.kind, service });
        }
        spec
    }

    /// Number of distinct backends (address, port) over all front doors.
    pub fn backend_count(&self) -> usize {
        self.frontends.iter().flat_map(|f| &f.backends).collect::<BTreeSet<_>>().len()
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
}

/// A chosen backend set.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Selection {
    backends: Vec<Backend>,
    category: EndpointCategory,
}

/// kube-proxy's `CategorizeEndpoints` (pkg/proxy/topology.go), without topology hints:
/// ready endpoints, else serving-and-terminating ones, among `candidates` filtered by
/// `keep`.
fn categorize(candidates: &[Candidate], keep: impl Fn(&Candidate) -> bool) -> Selection {
    let pick = |pred: &dyn Fn(&Candidate) -> bool| -> Vec<Backend> {
        let set: BTreeSet<Backend> = candidates.iter().filter(|c| keep(c) && pred(c)).map(|c| c.backend).collect();
        set.into_iter().collect()
    };
    let ready = pick(&|c| c.ready);
    if !ready.is_empty() {
        return Selection { backends: ready, category: EndpointCategory::Ready };
    }
    let draining = pick(&|c| c.serving && c.terminating);
    if !draining.is_empty() {
        return Selection { backends: draining, category: EndpointCategory::ServingTerminating };
    }
    Selection { backends: Vec::new(), category: EndpointCategory::None }
}

/// The endpoints of one Service port in one address family.
fn candidates(slices: &[&EndpointSlice], port: &ServicePort, ipv4: bool, node_name: &str) -> Vec<Candidate> {
    let mut out = Vec::new();
    for slice in slices {
        // kube-proxy matches by port name and protocol; a port without a number is skipped.
        let Some(number) =
            slice.ports.iter().find(|p| p.name == port.name && p.protocol == port.protocol).and_then(|p| p.port)
        else {
            continue;
        };
        for ep in &slice.endpoints {
            let local = ep.node_name.as_deref() == Some(node_name);
            // kube-proxy uses only an endpoint's first address (the EndpointSlice API says
            // consumers must use the first; the others are reserved for future use).
            if let Some(&ip) = ep.addresses.first().filter(|ip| ip.is_ipv4() == ipv4) {
                out.push(Candidate {
                    backend: Backend { ip, port: number },
                    ready: ep.ready,
                    serving: ep.serving,
                    terminating: ep.terminating,
                    local,
                });
            }
        }
    }
    out
}

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

/// The front doors of one Service port, in a fixed order: ClusterIPs, externalIPs,
/// load-balancer IPs, NodePorts; only in the Service's address families.
fn doors(svc: &Service, port: &ServicePort, node_ips: &[IpAddr], options: &CompileOptions) -> Vec<Door> {
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
    for ing in &svc.load_balancer_ingress {
        if ing.ip_mode == IpMode::Vip {
            add(ing.ip, port.port, FrontendKind::LoadBalancer);
        }
    }
    if matches!(svc.type_, ServiceType::NodePort | ServiceType::LoadBalancer) {
        if let Some(node_port) = port.node_port {
            for &ip in node_ips {
                add(ip, node_port, FrontendKind::NodePort);
            }
        }
    }
    out
}

/// Compiles `objects` for the gateway described by `options` (see the module
/// documentation for the rules). Pure and deterministic.
pub fn compile(objects: &Objects, options: &CompileOptions) -> Compiled {
    let mut compiled = Compiled::default();

    let node = objects.nodes.iter().find(|n| n.name == options.node_name);
    let node_ips = node.map(|n| n.node_port_ips()).unwrap_or_default();
    let wants_node_ports = objects.services.iter().any(|s| {
        !s.headless
            && matches!(s.type_, ServiceType::NodePort | ServiceType::LoadBalancer)
            && s.ports.iter().any(|p| p.node_port.is_some())
    });
    if wants_node_ports {
        match node {
            None => compiled.warnings.push(format!(
                "no Node object named {:?}: NodePort front doors are not served; add the gateway's Node \
                 (with its InternalIP/ExternalIP addresses) or set node_name",
                options.node_name
            )),
            Some(_) if node_ips.is_empty() => compiled.warnings.push(format!(
                "Node {}: status.addresses has no InternalIP or ExternalIP: NodePort front doors are not served",
                options.node_name
            )),
            Some(_) => {}
        }
    }

    let mut slices_by_service: BTreeMap<_, Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in &objects.endpoint_slices {
        slices_by_service.entry(&slice.service).or_default().push(slice);
    }

    // (ip, protocol, port) -> (service, port name, kind) of the front door's owner.
    let mut owners: BTreeMap<(IpAddr, Protocol, u16), (String, String, FrontendKind)> = BTreeMap::new();
    let mut frontends = Vec::new();

    // objects.services is sorted by namespace/name, so the first claimant of a front door
    // is the Service that sorts first.
    for svc in &objects.services {
        if svc.headless {
            tracing::debug!(service = %svc.key, "headless Service (clusterIP: None): not proxied");
            continue;
        }
        if svc.type_ == ServiceType::ExternalName {
            tracing::debug!(service = %svc.key, "ExternalName Service: not proxied");
            continue;
        }
        let service = svc.key.to_string();
        let foreign = svc
            .external_ips
            .iter()
            .chain(svc.load_balancer_ingress.iter().filter(|i| i.ip_mode == IpMode::Vip).map(|i| &i.ip))
            .filter(|ip| !in_family(svc, **ip));
        for ip in foreign {
            compiled.warnings.push(format!(
                "Service {service}: {ip} is not served: the Service has no ClusterIP of its address family \
                 (spec.ipFamilies), and kube-proxy proxies a Service only in the families of its ClusterIPs"
            ));
        }
        let slices = slices_by_service.get(&svc.key).map(Vec::as_slice).unwrap_or_default();
        for port in &svc.ports {
            // Endpoint sets per address family, computed on first use.
            let mut sets: BTreeMap<bool, (Selection, Selection)> = BTreeMap::new();
            for door in doors(svc, port, &node_ips, options) {
                let key = (door.ip, port.protocol, door.port);
                if let Some((owner, owner_port, owner_kind)) = owners.get(&key) {
                    let what = format!(
                        "{} front door {}:{}/{}",
                        door.kind.as_str(),
                        fmt_ip(door.ip),
                        door.port,
                        port.protocol.as_str()
                    );
                    if *owner == service {
                        compiled.warnings.push(format!(
                            "Service {service}: port {:?}: {what} is also its {} front door of port {owner_port:?}; \
                             served once",
                            port.name,
                            owner_kind.as_str()
                        ));
                    } else {
                        compiled.errors.push(format!(
                            "Service {service}: port {:?}: {what} is already served by Service {owner} port \
                             {owner_port:?}; skipped (the Service that sorts first by namespace/name keeps it)",
                            port.name
                        ));
                    }
                    continue;
                }
                owners.insert(key, (service.clone(), port.name.clone(), door.kind));

                let ipv4 = door.ip.is_ipv4();
                let (cluster, local) = sets.entry(ipv4).or_insert_with(|| {
                    let c = candidates(slices, port, ipv4, &options.node_name);
                    (categorize(&c, |_| true), categorize(&c, |c| c.local))
                });
                let policy = match door.kind {
                    FrontendKind::ClusterIp => svc.internal_traffic_policy,
                    _ => svc.external_traffic_policy,
                };
                let chosen = match policy {
                    TrafficPolicy::Cluster => &*cluster,
                    TrafficPolicy::Local => &*local,
                };
                frontends.push(Frontend {
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
                    backends: chosen.backends.clone(),
                });
            }
        }
    }
    frontends.sort_by(|a, b| {
        (a.ip, a.protocol, a.port, &a.service, &a.port_name).cmp(&(b.ip, b.protocol, b.port, &b.service, &b.port_name))
    });
    compiled.frontends = frontends;
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
        CompileOptions { node_name: "gw".into(), cluster_ips: false }
    }

    fn doors_of(c: &Compiled) -> Vec<String> {
        c.frontends
            .iter()
            .map(|f| {
                let b: Vec<String> = f.backends.iter().map(|b| format!("{}:{}", fmt_ip(b.ip), b.port)).collect();
                format!(
                    "{} {}:{}/{} {} -> [{}]",
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
        let cand =
            |n, ready, serving, terminating, local| Candidate { backend: b(n), ready, serving, terminating, local };
        let all = [
            cand(3, false, true, true, true),
            cand(1, true, true, false, false),
            cand(2, false, false, true, false),
            cand(1, true, true, false, false),
        ];
        let s = categorize(&all, |_| true);
        assert_eq!(s, Selection { backends: vec![b(1)], category: EndpointCategory::Ready });
        let s = categorize(&all, |c| c.local);
        assert_eq!(s, Selection { backends: vec![b(3)], category: EndpointCategory::ServingTerminating });
        let s = categorize(&all[2..3], |_| true);
        assert_eq!(s, Selection { backends: vec![], category: EndpointCategory::None });
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
}
