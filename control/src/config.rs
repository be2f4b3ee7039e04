//! torii-control's reading of the one configuration file it shares with torii-gateway
//! (`configs/gateway.toml`, the embedded default): the keys both binaries read, parsed by
//! [`torii_table::config::Common`] (`node_name`, `shm_dir`, `snat.addresses`), and the
//! `[control]` table, which only torii-control uses and therefore validates here, with
//! Kubernetes' label syntax for `proxy_name` and `load_balancer_class`.
//!
//! The gateway's own sections (interfaces, drivers, conntrack, metrics) are the gateway's
//! to validate; torii-control ignores them. Every error names the key
//! (`control.proxy_name: "-bad" is not a label value …`), and unknown keys under
//! `[control]` are errors, so a typo never silently falls back to a default.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use torii_table::config::{invalid, Common};
pub use torii_table::config::{ConfigError, EMBEDDED_DEFAULT};
use torii_table::IpCidr;

/// torii-control's view of the configuration file, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `node_name`: the Kubernetes Node the gateway is (NodePorts, traffic policies).
    pub node_name: String,
    /// `shm_dir`: where tables are published.
    pub shm_dir: PathBuf,
    /// `snat.addresses`: the gateway's SNAT addresses, which no front door may use.
    pub snat_addresses: Vec<IpAddr>,
    /// `[control]`.
    pub control: ControlConfig,
    /// `[l2.lease]` when `[l2]` is present (L2 mode): the Leases' settings.
    pub l2: Option<crate::l2::LeaseConfig>,
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
        Self::from_toml(&torii_table::config::read(path)?)
    }

    /// Parses and validates TOML text: the shared keys and `[control]`.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] for TOML errors, unknown keys under `[control]` and wrong
    /// types; [`ConfigError::Invalid`] for values out of range.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let common = Common::from_toml(text)?;
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        Ok(Self {
            node_name: common.node_name.clone(),
            shm_dir: common.shm_dir,
            snat_addresses: common.snat_addresses,
            control: raw.control.validate()?,
            l2: raw.l2.map(|l2| l2.validate(&common.node_name)).transpose()?,
        })
    }
}

/// torii-control's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlConfig {
    /// Directory of Kubernetes manifests to serve (the files source).
    pub manifests: Option<PathBuf>,
    /// Serve ClusterIP front doors too.
    pub cluster_ips: bool,
    /// `proxy_name`: serve only the Services whose label
    /// `service.kubernetes.io/service-proxy-name` equals it. `None`: serve only the
    /// Services without that label (what kube-proxy does: a labelled Service belongs to
    /// another proxy).
    pub proxy_name: Option<String>,
    /// `load_balancer_class`: only Services whose `spec.loadBalancerClass` equals it get
    /// load-balancer front doors (`status.loadBalancer.ingress[].ip`). `None`: every
    /// Service's (kube-proxy ignores the class).
    pub load_balancer_class: Option<String>,
    /// `node_port_addresses`: which of the gateway Node's addresses serve NodePorts.
    pub node_port_addresses: NodePortAddresses,
    /// `min_interval_ms`: shortest time between two publications under churn, in
    /// milliseconds (kube-proxy's `--min-sync-period`; at most 60 000). `None`:
    /// torii-control's default.
    pub min_interval_ms: Option<u64>,
}

/// Which of the gateway Node's addresses NodePort front doors are served on: kube-proxy's
/// `--nodeport-addresses` (`pkg/proxy/util/nodeport_addresses.go`), applied to the
/// InternalIP and ExternalIP addresses of the gateway's Node object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodePortAddresses {
    /// No restriction (the key is absent or empty): every InternalIP and ExternalIP.
    #[default]
    All,
    /// `["primary"]`: the Node's primary address of each family, as kube-proxy picks it
    /// (`GetNodeHostIPs`: the first InternalIP, else the first ExternalIP, of each family).
    Primary,
    /// Addresses inside these prefixes. Per address family: a family none of the prefixes
    /// belongs to is not restricted (kube-proxy adds `0.0.0.0/0` or `::/0` for it).
    Cidrs(Vec<IpCidr>),
}

impl NodePortAddresses {
    /// The addresses of `internal` (InternalIPs, in order) and `external` (ExternalIPs, in
    /// order) that NodePorts are served on, without duplicates, in that order.
    pub fn select(&self, internal: &[IpAddr], external: &[IpAddr]) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = Vec::new();
        let all = internal.iter().chain(external).copied();
        match self {
            Self::All => all.for_each(|ip| push_unique(&mut out, ip)),
            Self::Primary => {
                for v4 in [true, false] {
                    if let Some(ip) = internal.iter().chain(external).find(|ip| ip.is_ipv4() == v4) {
                        push_unique(&mut out, *ip);
                    }
                }
            }
            Self::Cidrs(cidrs) => {
                for ip in all {
                    let mut same_family = cidrs.iter().filter(|c| c.addr.is_ipv4() == ip.is_ipv4()).peekable();
                    if same_family.peek().is_none() || same_family.any(|c| c.contains(ip)) {
                        push_unique(&mut out, ip);
                    }
                }
            }
        }
        out
    }
}

fn push_unique(out: &mut Vec<IpAddr>, ip: IpAddr) {
    if !out.contains(&ip) {
        out.push(ip);
    }
}

/// The value of [`NodePortAddresses::Primary`] in the configuration (kube-proxy's
/// `NodePortAddressesPrimary`).
pub const NODE_PORT_ADDRESSES_PRIMARY: &str = "primary";

// ---- raw serde shapes, validated into the types above ----

/// The file as torii-control reads it: `[control]` and `[l2.lease]`; the other sections
/// are [`Common`]'s or the gateway's.
#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    control: RawControl,
    l2: Option<crate::l2::RawL2>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawControl {
    manifests: Option<PathBuf>,
    cluster_ips: bool,
    proxy_name: Option<String>,
    load_balancer_class: Option<String>,
    node_port_addresses: Vec<String>,
    min_interval_ms: Option<u64>,
}

impl RawControl {
    fn validate(self) -> Result<ControlConfig, ConfigError> {
        if let Some(ms) = self.min_interval_ms.filter(|&ms| ms > 60_000) {
            return Err(invalid("control.min_interval_ms", format!("{ms} is over 60000 (one minute)")));
        }
        if let Some(name) = &self.proxy_name {
            if !is_label_value(name) || name.is_empty() {
                return Err(invalid(
                    "control.proxy_name",
                    format!(
                        "{name:?} is not a label value (1 to 63 letters, digits, '-', '_' or '.', starting and \
                         ending with a letter or digit), as label service.kubernetes.io/service-proxy-name needs"
                    ),
                ));
            }
        }
        if let Some(class) = &self.load_balancer_class {
            if !is_qualified_name(class) {
                return Err(invalid(
                    "control.load_balancer_class",
                    format!(
                        "{class:?} is not a label-style name like \"example.com/internal-vip\" (what \
                         spec.loadBalancerClass accepts)"
                    ),
                ));
            }
        }
        let node_port_addresses = if self.node_port_addresses.is_empty() {
            NodePortAddresses::All
        } else if self.node_port_addresses.iter().any(|s| s == NODE_PORT_ADDRESSES_PRIMARY) {
            if self.node_port_addresses.len() > 1 {
                return Err(invalid(
                    "control.node_port_addresses",
                    "\"primary\" must be the only entry (as kube-proxy's --nodeport-addresses requires)",
                ));
            }
            NodePortAddresses::Primary
        } else {
            let mut cidrs = Vec::with_capacity(self.node_port_addresses.len());
            for (i, s) in self.node_port_addresses.iter().enumerate() {
                let c = IpCidr::parse(s).ok_or_else(|| {
                    invalid(
                        format!("control.node_port_addresses[{i}]"),
                        format!("{s:?} is not a CIDR like \"192.0.2.0/24\" or \"2001:db8::/64\", nor \"primary\""),
                    )
                })?;
                cidrs.push(c);
            }
            NodePortAddresses::Cidrs(cidrs)
        };
        Ok(ControlConfig {
            manifests: self.manifests,
            cluster_ips: self.cluster_ips,
            proxy_name: self.proxy_name,
            load_balancer_class: self.load_balancer_class,
            node_port_addresses,
            min_interval_ms: self.min_interval_ms,
        })
    }
}

/// A Kubernetes label value: at most 63 characters of `[A-Za-z0-9_.-]`, starting and
/// ending with a letter or digit (empty is a valid label value).
fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// A non-empty label name part: `[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?`.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A Kubernetes qualified name (`spec.loadBalancerClass`, label keys): an optional DNS
/// subdomain prefix (at most 253 characters, lowercase) and `/`, then a label name.
fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        None => is_label_name(s),
        Some((prefix, name)) => {
            let subdomain_ok = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|part| {
                    let b = part.as_bytes();
                    !b.is_empty()
                        && b.len() <= 63
                        && b[0].is_ascii_alphanumeric()
                        && b[b.len() - 1].is_ascii_alphanumeric()
                        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                });
            subdomain_ok && is_label_name(name)
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid() {
        let c = Config::embedded_default();
        assert!(!c.snat_addresses.is_empty());
    }

    #[test]
    fn unknown_control_keys_are_errors_and_the_gateway_sections_are_not_read() {
        let e = Config::from_toml(&with_control("bogus_key = 1")).unwrap_err().to_string();
        assert!(e.contains("bogus_key"), "{e}");
        let c = format!("{EMBEDDED_DEFAULT}\n[metrics]\nnot_checked_here = 1\n");
        assert_eq!(Config::from_toml(&c).unwrap(), Config::embedded_default());
    }

    fn with_control(lines: &str) -> String {
        let base = EMBEDDED_DEFAULT.split("\n[control]").next().unwrap().to_owned();
        format!("{base}\n[control]\n{lines}\n")
    }

    #[test]
    fn control_keys() {
        let c = Config::from_toml(&with_control(
            "proxy_name = \"torii\"\nload_balancer_class = \"example.com/torii\"\n\
             node_port_addresses = [\"192.0.2.1/24\", \"2001:db8::/64\"]",
        ))
        .unwrap();
        assert_eq!(c.control.proxy_name.as_deref(), Some("torii"));
        assert_eq!(c.control.load_balancer_class.as_deref(), Some("example.com/torii"));
        let NodePortAddresses::Cidrs(cidrs) = &c.control.node_port_addresses else { panic!() };
        assert_eq!(cidrs[0].to_string(), "192.0.2.0/24", "host bits are cleared");
        assert_eq!(cidrs[1].to_string(), "2001:db8::/64");
        let c = Config::from_toml(&with_control("node_port_addresses = [\"primary\"]")).unwrap();
        assert_eq!(c.control.node_port_addresses, NodePortAddresses::Primary);
        let c = Config::embedded_default();
        assert_eq!(c.control.node_port_addresses, NodePortAddresses::All);
        assert_eq!(c.control.proxy_name, None);
        assert_eq!(c.control.load_balancer_class, None);
        assert_eq!(c.control.min_interval_ms, None);
        let c = Config::from_toml(&with_control("min_interval_ms = 0")).unwrap();
        assert_eq!(c.control.min_interval_ms, Some(0));
        let e = Config::from_toml(&with_control("min_interval_ms = 60001")).unwrap_err().to_string();
        assert!(e.starts_with("control.min_interval_ms: 60001 is over 60000"), "{e}");
    }

    #[test]
    fn control_key_errors_name_the_key() {
        let err = |lines: &str| Config::from_toml(&with_control(lines)).unwrap_err().to_string();
        let e = err("proxy_name = \"-bad\"");
        assert!(e.starts_with("control.proxy_name: \"-bad\" is not a label value"), "{e}");
        let e = err("proxy_name = \"\"");
        assert!(e.starts_with("control.proxy_name: "), "{e}");
        let e = err("load_balancer_class = \"Example.com/x\"");
        assert!(e.starts_with("control.load_balancer_class: "), "{e}");
        let e = err("node_port_addresses = [\"192.0.2.0/24\", \"192.0.2.0/33\"]");
        assert!(e.starts_with("control.node_port_addresses[1]: \"192.0.2.0/33\" is not a CIDR"), "{e}");
        let e = err("node_port_addresses = [\"primary\", \"192.0.2.0/24\"]");
        assert!(e.starts_with("control.node_port_addresses: \"primary\" must be the only entry"), "{e}");
        let e = err("node_port_addresses = [\"10.0.0.1\"]");
        assert!(e.starts_with("control.node_port_addresses[0]: "), "{e}");
    }

    #[test]
    fn node_port_addresses_select_like_kube_proxy() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let internal = [ip("10.0.0.5"), ip("192.0.2.5"), ip("fd00::5")];
        let external = [ip("203.0.113.5"), ip("10.0.0.5"), ip("2001:db8::5")];
        let all = NodePortAddresses::All.select(&internal, &external);
        assert_eq!(all.len(), 5, "duplicates are served once: {all:?}");
        assert_eq!(
            NodePortAddresses::Primary.select(&internal, &external),
            [ip("10.0.0.5"), ip("fd00::5")],
            "the first address of each family, InternalIPs first"
        );
        let v4_only = NodePortAddresses::Cidrs(vec![IpCidr::parse("192.0.2.0/24").unwrap()]);
        assert_eq!(
            v4_only.select(&internal, &external),
            [ip("192.0.2.5"), ip("fd00::5"), ip("2001:db8::5")],
            "a family without prefixes is not restricted"
        );
        let both = NodePortAddresses::Cidrs(vec![
            IpCidr::parse("10.0.0.0/8").unwrap(),
            IpCidr::parse("2001:db8::/32").unwrap(),
        ]);
        assert_eq!(both.select(&internal, &external), [ip("10.0.0.5"), ip("2001:db8::5")]);
        let none = NodePortAddresses::Cidrs(vec![IpCidr::parse("198.51.100.0/24").unwrap()]);
        assert_eq!(none.select(&internal[..2], &[]), Vec::<IpAddr>::new());
    }
}
