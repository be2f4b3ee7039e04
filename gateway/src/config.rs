//! The gateway host's configuration: one TOML file shared by torii-gateway and
//! torii-control (`configs/gateway.toml` is the documented example and the embedded default).
//!
//! [`Config::from_toml`] parses and validates; every error names the offending key
//! (`interfaces[1].addresses[0]: "10.0.0.1/33" is not an address/prefix`). Unknown keys are
//! errors too, so a typo never silently falls back to a default.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The default configuration compiled into both binaries: `configs/gateway.toml`,
/// which is also the demo's configuration.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../configs/gateway.toml");

/// Largest number of workers a gateway runs (the size of the acknowledgement array in
/// the shared state region).
pub const MAX_WORKERS: usize = 64;

/// A configuration error, naming the key and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key or a value of the wrong type.
    #[error("{0}")]
    Syntax(String),
    /// A value that parses but is not acceptable.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted path of the key, e.g. `interfaces[0].addresses[1]`.
        key: String,
        /// What is wrong and what would be right.
        message: String,
    },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), message: message.into() }
}

/// An IPv4 address with its prefix length, as written `198.51.100.1/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    /// The address.
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// Parses `a.b.c.d/len`.
    pub fn parse(s: &str) -> Option<Self> {
        let (a, l) = s.split_once('/')?;
        let addr: Ipv4Addr = a.trim().parse().ok()?;
        let prefix_len: u8 = l.trim().parse().ok()?;
        (prefix_len <= 32).then_some(Self { addr, prefix_len })
    }

    /// The network mask, host order.
    pub fn mask(&self) -> u32 {
        if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix_len))
        }
    }

    /// Whether `ip` is inside this prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(ip) & self.mask()) == (u32::from(self.addr) & self.mask())
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Which packet I/O driver runs the workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// Linux AF_PACKET sockets with TPACKET_V3 rings (any host).
    AfPacket,
}

/// A network interface the gateway owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Kernel interface name (AF_PACKET) .
    pub name: String,
    /// The gateway's own addresses on this link, with their prefixes (the connected
    /// subnets used to choose the egress interface).
    pub addresses: Vec<Ipv4Cidr>,
}

/// The next hop for destinations outside every connected subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Router {
    /// The router's address.
    pub address: Ipv4Addr,
    /// Index into [`Config::interfaces`] of the link it is on.
    pub interface: usize,
}

/// A statically configured neighbour (an alternative to ARP resolution).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticNeighbour {
    /// Its address.
    pub address: Ipv4Addr,
    /// Its link-layer address.
    pub mac: [u8; 6],
}

/// Source NAT: the addresses flows to endpoints leave from, and the port range used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snat {
    /// SNAT addresses; each must be one of the interfaces' addresses (so replies reach us).
    pub addresses: Vec<Ipv4Addr>,
    /// First SNAT port, inclusive.
    pub port_min: u16,
    /// Last SNAT port, inclusive.
    pub port_max: u16,
}

/// Connection tracking limits and timeouts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConntrackConfig {
    /// Flows per worker (both directions of a flow count once).
    pub capacity: usize,
    /// TCP established idle timeout, seconds (kube-proxy/Linux: 86400).
    pub tcp_established_timeout_s: u32,
    /// TCP timeout before the handshake completes or after FIN/RST, seconds.
    pub tcp_transitory_timeout_s: u32,
    /// UDP idle timeout, seconds (Linux `nf_conntrack_udp_timeout`: 30).
    pub udp_timeout_s: u32,
}

/// torii-control's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlConfig {
    /// Directory of Kubernetes manifests to serve (the files source).
    pub manifests: Option<PathBuf>,
    /// Serve ClusterIP front doors too.
    pub cluster_ips: bool,
}

/// A validated gateway host configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The Kubernetes Node this gateway is (for NodePorts and traffic policies).
    pub node_name: String,
    /// Directory holding the shared-memory table files and state region.
    pub shm_dir: PathBuf,
    /// Packet I/O driver.
    pub driver: Driver,
    /// Number of worker threads (1..=[`MAX_WORKERS`]).
    pub workers: usize,
    /// Interfaces, in the order workers index them.
    pub interfaces: Vec<Interface>,
    /// Default next hop, if any.
    pub router: Option<Router>,
    /// Static neighbours.
    pub neighbours: Vec<StaticNeighbour>,
    /// Source NAT.
    pub snat: Snat,
    /// Connection tracking.
    pub conntrack: ConntrackConfig,
    /// Control plane.
    pub control: ControlConfig,
}

// ---- raw serde shapes, validated into the types above ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    node_name: String,
    #[serde(default = "default_shm_dir")]
    shm_dir: PathBuf,
    #[serde(default = "default_driver")]
    driver: Driver,
    #[serde(default = "default_workers")]
    workers: usize,
    interfaces: Vec<RawInterface>,
    router: Option<RawRouter>,
    #[serde(default)]
    neighbours: Vec<RawNeighbour>,
    snat: RawSnat,
    #[serde(default)]
    conntrack: RawConntrack,
    #[serde(default)]
    control: RawControl,
}

fn default_shm_dir() -> PathBuf {
    PathBuf::from("/dev/shm/torii")
}
fn default_driver() -> Driver {
    Driver::AfPacket
}
fn default_workers() -> usize {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    name: String,
    addresses: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouter {
    address: String,
    interface: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbour {
    address: String,
    mac: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSnat {
    addresses: Vec<String>,
    #[serde(default = "default_port_min")]
    port_min: u16,
    #[serde(default = "default_port_max")]
    port_max: u16,
}
fn default_port_min() -> u16 {
    1024
}
fn default_port_max() -> u16 {
    65535
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawConntrack {
    capacity: usize,
    tcp_established_timeout_s: u32,
    tcp_transitory_timeout_s: u32,
    udp_timeout_s: u32,
}

impl Default for RawConntrack {
    fn default() -> Self {
        Self { capacity: 65536, tcp_established_timeout_s: 86400, tcp_transitory_timeout_s: 120, udp_timeout_s: 30 }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawControl {
    manifests: Option<PathBuf>,
    cluster_ips: bool,
}

impl Config {
    /// The embedded default ([`EMBEDDED_DEFAULT`]).
    ///
    /// # Panics
    /// Never in a released build: a unit test checks that the embedded file is valid.
    pub fn embedded_default() -> Self {
        Self::from_toml(EMBEDDED_DEFAULT).expect("embedded configs/gateway.toml is valid")
    }

    /// Reads and validates a file; `None` gives the embedded default.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file or the key.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        match path {
            None => Ok(Self::embedded_default()),
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|source| ConfigError::Read { path: p.to_owned(), source })?;
                Self::from_toml(&text)
            }
        }
    }

    /// Parses and validates TOML text.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] for TOML errors, unknown keys and wrong types (the message
    /// names the key and line); [`ConfigError::Invalid`] for values out of range.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        if raw.node_name.trim().is_empty() {
            return Err(invalid("node_name", "must not be empty"));
        }
        if raw.workers == 0 || raw.workers > MAX_WORKERS {
            return Err(invalid("workers", format!("{} is out of range 1..={MAX_WORKERS}", raw.workers)));
        }
        if raw.interfaces.is_empty() {
            return Err(invalid("interfaces", "at least one interface is required"));
        }
        if raw.interfaces.len() > 255 {
            return Err(invalid("interfaces", "at most 255 interfaces"));
        }
        let mut interfaces = Vec::with_capacity(raw.interfaces.len());
        for (i, ri) in raw.interfaces.iter().enumerate() {
            if ri.name.is_empty() || ri.name.len() >= libc::IFNAMSIZ {
                return Err(invalid(
                    format!("interfaces[{i}].name"),
                    format!("{:?} is not an interface name", ri.name),
                ));
            }
            if interfaces.iter().any(|x: &Interface| x.name == ri.name) {
                return Err(invalid(format!("interfaces[{i}].name"), format!("{:?} is listed twice", ri.name)));
            }
            let mut addresses = Vec::new();
            for (j, a) in ri.addresses.iter().enumerate() {
                let c = Ipv4Cidr::parse(a).ok_or_else(|| {
                    invalid(
                        format!("interfaces[{i}].addresses[{j}]"),
                        format!("{a:?} is not an IPv4 address/prefix like \"198.51.100.1/24\""),
                    )
                })?;
                addresses.push(c);
            }
            interfaces.push(Interface { name: ri.name.clone(), addresses });
        }
        let iface_index = |key: &str, name: &str| {
            interfaces
                .iter()
                .position(|x| x.name == name)
                .ok_or_else(|| invalid(key, format!("{name:?} is not one of the configured interfaces")))
        };
        let router = match &raw.router {
            None => None,
            Some(r) => Some(Router {
                address: r
                    .address
                    .parse()
                    .map_err(|_| invalid("router.address", format!("{:?} is not an IPv4 address", r.address)))?,
                interface: iface_index("router.interface", &r.interface)?,
            }),
        };
        let mut neighbours = Vec::new();
        for (i, n) in raw.neighbours.iter().enumerate() {
            neighbours.push(StaticNeighbour {
                address: n.address.parse().map_err(|_| {
                    invalid(format!("neighbours[{i}].address"), format!("{:?} is not an IPv4 address", n.address))
                })?,
                mac: parse_mac(&n.mac).ok_or_else(|| {
                    invalid(
                        format!("neighbours[{i}].mac"),
                        format!("{:?} is not a MAC address like \"02:00:00:00:00:01\"", n.mac),
                    )
                })?,
            });
        }
        if raw.snat.addresses.is_empty() {
            return Err(invalid("snat.addresses", "at least one SNAT address is required"));
        }
        let mut snat_addrs = Vec::new();
        for (i, a) in raw.snat.addresses.iter().enumerate() {
            let key = format!("snat.addresses[{i}]");
            let ip: Ipv4Addr = a.parse().map_err(|_| invalid(&key, format!("{a:?} is not an IPv4 address")))?;
            if !interfaces.iter().any(|x| x.addresses.iter().any(|c| c.addr == ip)) {
                return Err(invalid(
                    key,
                    format!(
                        "{ip} is not one of the interfaces' addresses, so replies to it would not reach the gateway"
                    ),
                ));
            }
            snat_addrs.push(ip);
        }
        if raw.snat.port_min == 0 || raw.snat.port_min > raw.snat.port_max {
            return Err(invalid(
                "snat.port_min",
                format!("range {}..={} is empty or starts at 0", raw.snat.port_min, raw.snat.port_max),
            ));
        }
        let ports = usize::from(raw.snat.port_max - raw.snat.port_min) + 1;
        if ports < raw.workers {
            return Err(invalid("snat.port_max", "the SNAT port range must give every worker at least one port"));
        }
        let ct = raw.conntrack;
        if ct.capacity == 0 || ct.capacity > (1 << 26) {
            return Err(invalid("conntrack.capacity", format!("{} is out of range 1..=67108864", ct.capacity)));
        }
        for (k, v) in [
            ("conntrack.tcp_established_timeout_s", ct.tcp_established_timeout_s),
            ("conntrack.tcp_transitory_timeout_s", ct.tcp_transitory_timeout_s),
            ("conntrack.udp_timeout_s", ct.udp_timeout_s),
        ] {
            if v == 0 {
                return Err(invalid(k, "must be at least 1 second"));
            }
        }
        Ok(Self {
            node_name: raw.node_name,
            shm_dir: raw.shm_dir,
            driver: raw.driver,
            workers: raw.workers,
            interfaces,
            router,
            neighbours,
            snat: Snat { addresses: snat_addrs, port_min: raw.snat.port_min, port_max: raw.snat.port_max },
            conntrack: ConntrackConfig {
                capacity: ct.capacity,
                tcp_established_timeout_s: ct.tcp_established_timeout_s,
                tcp_transitory_timeout_s: ct.tcp_transitory_timeout_s,
                udp_timeout_s: ct.udp_timeout_s,
            },
            control: ControlConfig { manifests: raw.control.manifests, cluster_ips: raw.control.cluster_ips },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid() {
        let c = Config::embedded_default();
        assert!(!c.interfaces.is_empty());
    }

    #[test]
    fn errors_name_the_key() {
        let bad = EMBEDDED_DEFAULT.replacen("10.70.0.1/24", "10.70.0.1/33", 1);
        let e = Config::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("interfaces[1].addresses[0]"), "{e}");
        let bad = format!("{EMBEDDED_DEFAULT}\nbogus_key = 1\n");
        let e = Config::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("bogus_key"), "{e}");
    }

    #[test]
    fn cidr_contains() {
        let c = Ipv4Cidr::parse("10.70.0.1/24").unwrap();
        assert!(c.contains("10.70.0.200".parse().unwrap()));
        assert!(!c.contains("10.71.0.1".parse().unwrap()));
        assert!(Ipv4Cidr::parse("0.0.0.0/0").unwrap().contains("1.2.3.4".parse().unwrap()));
    }
}
