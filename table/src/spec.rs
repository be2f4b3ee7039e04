//! The table as the control plane describes it, before it is laid out in bytes.
//!
//! [`TableSpec`] is the input of [`super::build`]: plain owned Rust values, built by
//! torii-control's compiler and turned into one immutable snapshot. Indices are 0-based
//! here; the byte layout uses 1-based ids so that 0 means "none".

use std::net::IpAddr;

pub use crate::cidr::IpCidr;

/// Transport protocol of a front door, numbered as in the IANA protocol registry
/// (the IPv4 `protocol` / IPv6 `next header` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Protocol {
    /// RFC 9293.
    Tcp = 6,
    /// RFC 768.
    Udp = 17,
    /// RFC 9260.
    Sctp = 132,
}

impl Protocol {
    /// The protocol for an IANA protocol number, if torii serves it.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            6 => Some(Self::Tcp),
            17 => Some(Self::Udp),
            132 => Some(Self::Sctp),
            _ => None,
        }
    }

    /// Kubernetes' spelling (`Service.spec.ports[].protocol`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}

/// Which Service field a front door comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum FrontendKind {
    /// `spec.clusterIPs[]` (served only when the gateway is configured to).
    ClusterIp = 1,
    /// `spec.externalIPs[]`.
    ExternalIp = 2,
    /// `status.loadBalancer.ingress[].ip`.
    LoadBalancer = 3,
    /// `spec.ports[].nodePort` on one of the gateway node's addresses.
    NodePort = 4,
}

impl FrontendKind {
    /// The kind for its numeric value in the table, if valid.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Self::ClusterIp),
            2 => Some(Self::ExternalIp),
            3 => Some(Self::LoadBalancer),
            4 => Some(Self::NodePort),
            _ => None,
        }
    }

    /// The name used in `torii-control compile` output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIp => "ClusterIP",
            Self::ExternalIp => "ExternalIP",
            Self::LoadBalancer => "LoadBalancer",
            Self::NodePort => "NodePort",
        }
    }
}

/// A complete table: every front door and the backend sets they forward to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableSpec {
    /// Front doors; any order (the builder sorts them). (address, protocol, port) must be
    /// unique: the builder rejects duplicates.
    pub frontends: Vec<FrontendSpec>,
    /// Backend sets, referenced by index from [`FrontendSpec::service`].
    pub services: Vec<ServiceSpec>,
}

/// One front door: traffic to `addr:port` over `protocol`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontendSpec {
    /// The VIP (an IPv4 or IPv6 address).
    pub addr: IpAddr,
    /// Destination port, host order.
    pub port: u16,
    /// Transport protocol.
    pub protocol: Protocol,
    /// Which Service field this front door comes from.
    pub kind: FrontendKind,
    /// Index into [`TableSpec::services`].
    pub service: usize,
    /// The client address ranges admitted for new flows (the Service's
    /// `loadBalancerSourceRanges` of this front door's address family); empty admits every
    /// client. Any order, overlaps allowed: the builder merges them into sorted, disjoint
    /// ranges.
    pub source_ranges: Vec<IpCidr>,
}

/// A Service port with the endpoints chosen for it: one Maglev ring.
///
/// Several front doors of one Service port share a `ServiceSpec` when they forward to the
/// same endpoints (they differ when `externalTrafficPolicy: Local` narrows the external ones).
/// `Default` is an unnamed service without endpoints or affinity, for
/// `ServiceSpec { name, backends, ..Default::default() }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceSpec {
    /// `namespace/name:port-name` (port name may be empty), for logs and counters.
    pub name: String,
    /// Endpoints; any order (the Maglev ring depends only on their identities).
    /// Empty means the front doors reject (ICMP port unreachable, TCP RST).
    pub backends: Vec<BackendSpec>,
    /// Draining endpoints: serving endpoints of the Service port that are not in
    /// `backends` (terminating ones, or ones a traffic policy or topology leaves out).
    /// They take no new flows and are not on the ring, but flows already steered to them
    /// keep them across table changes (kube-proxy clears conntrack entries only of
    /// endpoints that stopped serving). Any order; an endpoint also in `backends` is
    /// ignored here.
    pub draining: Vec<BackendSpec>,
    /// `sessionAffinity: ClientIP` timeout in seconds, `None` without affinity.
    pub affinity_timeout_s: Option<u32>,
}

/// One endpoint: `addr:port` (the EndpointSlice address and the resolved target port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendSpec {
    /// Endpoint address.
    pub addr: IpAddr,
    /// Endpoint port, host order.
    pub port: u16,
}
