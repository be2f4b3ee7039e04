//! The gateway host's configuration: the data plane's reading of the one TOML file shared by
//! torii-gateway and torii-control (`configs/gateway.toml` is the documented example and the
//! embedded default).
//!
//! [`Config::from_toml`] parses and validates; every error names the offending key
//! (`interfaces[1].addresses[0]: "10.0.0.1/33" is not an address/prefix`). Unknown keys are
//! errors too, so a typo never silently falls back to a default. The keys both binaries
//! read (`node_name`, `shm_dir`, `snat.addresses`) are parsed by
//! [`torii_table::config::Common`]; the `[control]` table is torii-control's to validate
//! (`torii_control::config`): the gateway only accepts that it is there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::scheduler::Scheduler;
use crate::wire::vlan::VID_MAX;

use torii_table::config::{invalid, Common};
pub use torii_table::config::{ConfigError, EMBEDDED_DEFAULT};
pub use torii_table::shm::MAX_WORKERS;

/// `neighbour_capacity` when absent: a flat pod network puts each pod on the gateway's links
/// behind one entry, so well above Linux's default `gc_thresh3` (1 024), which large
/// Kubernetes clusters raise; 1 MiB of table.
pub const DEFAULT_NEIGHBOUR_CAPACITY: usize = 16_384;
/// The largest `neighbour_capacity` (256 MiB of table).
pub const MAX_NEIGHBOUR_CAPACITY: usize = 1 << 22;
pub use torii_table::IpCidr;

/// An IPv4 address with its prefix length, as written `198.51.100.1/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    /// The address.
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub prefix_len: u8,
}

/// Splits `address/len` into an address of type `A` and a prefix length of at most `max`.
fn address_and_prefix<A: std::str::FromStr>(s: &str, max: u8) -> Option<(A, u8)> {
    let (a, l) = s.split_once('/')?;
    let addr: A = a.trim().parse().ok()?;
    let prefix_len: u8 = l.trim().parse().ok()?;
    (prefix_len <= max).then_some((addr, prefix_len))
}

impl Ipv4Cidr {
    /// Parses `a.b.c.d/len`.
    pub fn parse(s: &str) -> Option<Self> {
        address_and_prefix(s, 32).map(|(addr, prefix_len)| Self { addr, prefix_len })
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

/// An IPv6 address with its prefix length, as written `2001:db8:100::1/64`: an own address
/// and its connected subnet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Cidr {
    /// The address.
    pub addr: Ipv6Addr,
    /// Prefix length, 0..=128.
    pub prefix_len: u8,
}

impl Ipv6Cidr {
    /// Parses `address/len`.
    pub fn parse(s: &str) -> Option<Self> {
        address_and_prefix(s, 128).map(|(addr, prefix_len)| Self { addr, prefix_len })
    }

    /// The network mask.
    pub fn mask(&self) -> u128 {
        u128::MAX.checked_shl(128 - u32::from(self.prefix_len)).unwrap_or(0)
    }

    /// Whether `ip` is inside this prefix.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        (ip.to_bits() & self.mask()) == (self.addr.to_bits() & self.mask())
    }
}

/// Parses `interfaces[i].addresses`.
/// The IPv4 and the IPv6 prefixes of `interfaces[i].addresses`.
type Addresses = (Vec<Ipv4Cidr>, Vec<Ipv6Cidr>);

fn parse_addresses(i: usize, addresses: &[String]) -> Result<Addresses, ConfigError> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for (j, a) in addresses.iter().enumerate() {
        if let Some(c) = Ipv4Cidr::parse(a) {
            v4.push(c);
        } else if let Some(c) = Ipv6Cidr::parse(a) {
            v6.push(c);
        } else {
            return Err(invalid(
                format!("interfaces[{i}].addresses[{j}]"),
                format!(
                    "{a:?} is not an IPv4 or IPv6 address/prefix like \"198.51.100.1/24\" or \"2001:db8:100::1/64\""
                ),
            ));
        }
    }
    Ok((v4, v6))
}

/// Rejects addresses of `raw` that collide, naming both keys: an interface address listed
/// twice, connected subnets of two interfaces that overlap (a destination in both would
/// have two egress interfaces), and a static neighbour or router at one of the gateway's
/// own addresses. Malformed entries are left to the checks that name them.
fn check_address_collisions(raw: &RawConfig) -> Result<(), ConfigError> {
    let mut own: Vec<(String, usize, IpAddr, torii_table::cidr::IpCidr)> = Vec::new();
    for (i, ri) in raw.interfaces.iter().enumerate() {
        for (j, a) in ri.addresses.iter().enumerate() {
            let host = a.split_once('/').and_then(|(h, _)| h.trim().parse::<IpAddr>().ok());
            let (Some(host), Some(subnet)) = (host, torii_table::cidr::IpCidr::parse(a)) else { continue };
            let key = format!("interfaces[{i}].addresses[{j}]");
            for (other, k, addr, net) in &own {
                if *addr == host {
                    return Err(invalid(key, format!("{host} is also {other}: each address once")));
                }
                if *k != i && (net.contains(subnet.addr) || subnet.contains(net.addr)) {
                    return Err(invalid(
                        key,
                        format!(
                            "subnet {subnet} overlaps {net} of {other}, another interface: a destination in both \
                             would have two egress interfaces"
                        ),
                    ));
                }
            }
            own.push((key, i, host, subnet));
        }
    }
    let others = raw.neighbours.iter().enumerate().map(|(i, n)| (format!("neighbours[{i}].address"), &n.address));
    let routers = [("router.address", &raw.router), ("router6.address", &raw.router6)]
        .into_iter()
        .filter_map(|(key, r)| r.as_ref().map(|r| (key.to_owned(), &r.address)));
    for (key, text) in others.chain(routers) {
        let Ok(ip) = text.parse::<IpAddr>() else { continue };
        if let Some((own_key, ..)) = own.iter().find(|(_, _, a, _)| *a == ip) {
            return Err(invalid(key, format!("{ip} is the gateway's own address ({own_key}), not a neighbour")));
        }
    }
    Ok(())
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
    /// DPDK poll-mode drivers on the interfaces' `device`s (PCI NICs or virtual devices);
    /// see [`DpdkConfig`]. Needs a gateway built with the `dpdk` feature (the default).
    Dpdk,
}

impl Driver {
    /// The name used in the configuration (`"af_packet"`, `"dpdk"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::AfPacket => "af_packet",
            Self::Dpdk => "dpdk",
        }
    }
}

/// The DPDK device behind an interface (`interfaces[].device`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DpdkDevice {
    /// A PCI device, by its address in full form (`0000:01:00.0`): EAL is given `-a ADDR`.
    Pci(String),
    /// A virtual device, as EAL's `--vdev` takes it: a name unique in the process (the
    /// driver name and a number, `net_af_packet0`) and its arguments (`iface=eth1`).
    Vdev {
        /// The device (and ethdev port) name, e.g. `net_af_packet0`.
        name: String,
        /// The comma-separated arguments after the name (may be empty).
        args: String,
    },
}

impl DpdkDevice {
    /// Parses `0000:01:00.0` / `01:00.0` (PCI) or `NAME[,ARGS]` (a virtual device whose
    /// name starts with a letter and holds only letters, digits and `_`).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if let Some(pci) = parse_pci(s) {
            return Some(Self::Pci(pci));
        }
        let (name, args) = s.split_once(',').unwrap_or((s, ""));
        let ok_name = name.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let ok_args = args.bytes().all(|b| b.is_ascii_graphic()) && (s.contains(',') != args.is_empty());
        (ok_name && ok_args).then(|| Self::Vdev { name: name.to_owned(), args: args.to_owned() })
    }

    /// The ethdev port name DPDK gives the device (the PCI address, or the vdev name).
    pub fn port_name(&self) -> &str {
        match self {
            Self::Pci(addr) => addr,
            Self::Vdev { name, .. } => name,
        }
    }

    /// The EAL arguments that make the device appear: `-a ADDR` or `--vdev NAME,ARGS`.
    pub fn eal_args(&self) -> [String; 2] {
        match self {
            Self::Pci(addr) => ["-a".into(), addr.clone()],
            Self::Vdev { name, args } if args.is_empty() => ["--vdev".into(), name.clone()],
            Self::Vdev { name, args } => ["--vdev".into(), format!("{name},{args}")],
        }
    }
}

impl std::fmt::Display for DpdkDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pci(addr) => f.write_str(addr),
            Self::Vdev { name, args } if args.is_empty() => f.write_str(name),
            Self::Vdev { name, args } => write!(f, "{name},{args}"),
        }
    }
}

/// `DDDD:BB:DD.F` or `BB:DD.F` (hex), in full lower-case form.
fn parse_pci(s: &str) -> Option<String> {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [d, b, df] => (*d, *b, *df),
        [b, df] => ("0000", *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    let func_ok = func.len() == 1 && func.bytes().all(|b| (b'0'..=b'7').contains(&b));
    (hex(domain, 4) && hex(bus, 2) && hex(dev, 2) && func_ok)
        .then(|| format!("{domain}:{bus}:{dev}.{func}").to_ascii_lowercase())
}

/// The DPDK driver's settings (`[dpdk]`), used when `driver = "dpdk"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkConfig {
    /// Extra EAL arguments, after torii's own (`--file-prefix torii-<pid>`, the memory
    /// options, `-l`, the devices). Giving an option torii would add (`--file-prefix`,
    /// `-l`/`-c`/`--lcores`/`--main-lcore`, `--no-huge`/`--in-memory`/`-m`/`--socket-mem`,
    /// `--log-level`, `--no-telemetry`/`--telemetry`) replaces torii's choice for it.
    pub eal_args: Vec<String>,
    /// CPUs the workers are pinned to: worker `w` runs on `cpus[w % cpus.len()]`, and
    /// EAL's main lcore is `cpus[0]`. Empty: the CPUs the process may run on, in order.
    pub cpus: Vec<usize>,
    /// Receive descriptors per queue (clamped to what the device allows).
    pub rx_descriptors: u16,
    /// Transmit descriptors per queue (clamped to what the device allows).
    pub tx_descriptors: u16,
    /// When DPDK cannot start (EAL, a device, a port), run the AF_PACKET driver on the
    /// interfaces' kernel names instead of exiting, and say so in the startup log line.
    pub fallback_to_af_packet: bool,
    /// Let ports that offer it compute IPv4 header and TCP/UDP checksums on transmit.
    /// Off by default: the pipeline already keeps checksums right with incremental updates
    /// (RFC 1624), which is cheaper than preparing offload requests per frame.
    pub tx_checksum_offload: bool,
    /// Ask ports for receive checksum offload (the device's checksum-good flags then spare
    /// the pipeline verifying what the device verified). On by default. Off lets DPDK's
    /// virtio driver use its vectorised split-ring receive path, which it takes only without
    /// receive offloads (and without mergeable buffers and in-order rings: the
    /// `net_virtio_user` device arguments `mrg_rxbuf=0,in_order=0,vectorized=1`); its
    /// packed-ring vectorised paths keep the offload (docs/drivers.md).
    pub rx_checksum_offload: bool,
    /// How long an idle worker sleeps between polls once it has seen no frame for a
    /// while, microseconds (0: poll without sleeping, a full core per worker).
    pub idle_sleep_us: u32,
}

impl Default for DpdkConfig {
    fn default() -> Self {
        Self {
            eal_args: Vec::new(),
            cpus: Vec::new(),
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            fallback_to_af_packet: false,
            tx_checksum_offload: false,
            rx_checksum_offload: true,
            idle_sleep_us: 200,
        }
    }
}

/// A network interface the gateway owns: a link (layer 3) on a port, untagged or on one
/// 802.1Q VLAN of it. Several interfaces may share a port (`name`, `device`) when their
/// `vlan`s differ, as Linux VLAN sub-interfaces share their parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Kernel interface name of the port (AF_PACKET); a label in logs under DPDK.
    pub name: String,
    /// The gateway's own IPv4 addresses on this link, with their prefixes (the connected
    /// subnets used to choose the egress interface).
    pub addresses: Vec<Ipv4Cidr>,
    /// The gateway's own IPv6 addresses on this link, with their prefixes (TOML: the IPv6
    /// entries of `addresses`).
    pub addresses6: Vec<Ipv6Cidr>,
    /// The DPDK device of this interface (required with `driver = "dpdk"`, ignored by
    /// AF_PACKET).
    pub device: Option<DpdkDevice>,
    /// The 802.1Q VLAN identifier (1..=4094) of this link on its port: frames received
    /// with this tag belong to it, frames sent on it carry it. `None`: untagged (and
    /// priority-tagged, VID 0) frames.
    pub vlan: Option<u16>,
    /// Index into [`Config::ports`] of the port this interface is on.
    pub port: usize,
}

impl Interface {
    /// How the interface is named in keys (`router.interface`) and logs: the port's name,
    /// with `.VID` for a VLAN interface (`tg-front.100`), as Linux names VLAN devices.
    pub fn label(&self) -> String {
        match self.vlan {
            Some(v) => format!("{}.{v}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A port: one device (a kernel interface under AF_PACKET, an ethdev port under DPDK)
/// carrying one or more [`Interface`]s. Drivers open ports; the pipeline sees interfaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Kernel interface name (AF_PACKET); a label in logs under DPDK.
    pub name: String,
    /// The DPDK device (required with `driver = "dpdk"`).
    pub device: Option<DpdkDevice>,
}

/// The next hop for destinations outside every connected subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Router {
    /// The router's address.
    pub address: Ipv4Addr,
    /// Index into [`Config::interfaces`] of the link it is on.
    pub interface: usize,
}

/// The IPv6 next hop for IPv6 destinations outside every connected subnet (TOML `[router6]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Router6 {
    /// The router's address (a global or a link-local address).
    pub address: Ipv6Addr,
    /// Index into [`Config::interfaces`] of the link it is on.
    pub interface: usize,
}

/// A statically configured neighbour (an alternative to ARP / Neighbor Discovery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticNeighbour {
    /// Its address, IPv4 or IPv6.
    pub address: IpAddr,
    /// Its link-layer address.
    pub mac: [u8; 6],
}

/// Source NAT: the addresses flows to endpoints leave from, and the port range used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snat {
    /// IPv4 SNAT addresses; each must be one of the interfaces' addresses (so replies reach us).
    pub addresses: Vec<Ipv4Addr>,
    /// IPv6 SNAT addresses, for flows to IPv6 endpoints (TOML: the IPv6 entries of
    /// `snat.addresses`); each must be one of the interfaces' IPv6 addresses.
    pub addresses6: Vec<Ipv6Addr>,
    /// First SNAT port, inclusive.
    pub port_min: u16,
    /// Last SNAT port, inclusive.
    pub port_max: u16,
}

/// Connection tracking limits and timeouts (`[conntrack]`). Every timeout is an idle
/// timeout in seconds, 1..=[`MAX_CONNTRACK_TIMEOUT_S`]; the defaults are kube-proxy's and
/// Linux's (see [`crate::conntrack::Timeouts`], where each is sourced).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConntrackConfig {
    /// Flows per worker (both directions of a flow count once).
    pub capacity: usize,
    /// TCP SYN_SENT (default 120, Linux `nf_conntrack_tcp_timeout_syn_sent`).
    pub tcp_syn_sent_timeout_s: u32,
    /// TCP SYN_RECV (default 60, Linux `nf_conntrack_tcp_timeout_syn_recv`).
    pub tcp_syn_recv_timeout_s: u32,
    /// TCP ESTABLISHED (default 86400, kube-proxy `--conntrack-tcp-timeout-established`).
    pub tcp_established_timeout_s: u32,
    /// TCP FIN_WAIT (default 120, Linux `nf_conntrack_tcp_timeout_fin_wait`).
    pub tcp_fin_wait_timeout_s: u32,
    /// TCP CLOSE_WAIT (default 3600, kube-proxy `--conntrack-tcp-timeout-close-wait`).
    pub tcp_close_wait_timeout_s: u32,
    /// TCP LAST_ACK (default 30, Linux `nf_conntrack_tcp_timeout_last_ack`).
    pub tcp_last_ack_timeout_s: u32,
    /// TCP TIME_WAIT (default 120, Linux `nf_conntrack_tcp_timeout_time_wait`).
    pub tcp_time_wait_timeout_s: u32,
    /// TCP CLOSE, after a RST (default 10, Linux `nf_conntrack_tcp_timeout_close`).
    pub tcp_close_timeout_s: u32,
    /// TCP picked up mid-stream, until the endpoint answers (default 300, Linux
    /// `nf_conntrack_tcp_timeout_unacknowledged`).
    pub tcp_unacknowledged_timeout_s: u32,
    /// UDP until a reply (default 30, Linux `nf_conntrack_udp_timeout`).
    pub udp_timeout_s: u32,
    /// UDP once both directions were seen (default 120, Linux
    /// `nf_conntrack_udp_timeout_stream`).
    pub udp_stream_timeout_s: u32,
    /// New flows a second one source address may open through one worker
    /// ([`crate::limiter`]); 0 (the default) for no limit.
    pub new_flows_per_source_per_s: u32,
    /// Bursts of new flows one source may open at once under that limit (at least 1;
    /// default: one second's worth).
    pub new_flows_per_source_burst: u32,
    /// Accept TCP segments outside their connection's sequence windows (Linux's
    /// `nf_conntrack_tcp_be_liberal`, kube-proxy's `--conntrack-tcp-be-liberal`; default
    /// false): a RST must still carry the expected sequence number to close a flow.
    pub tcp_be_liberal: bool,
    /// Answer SYNs with SYN cookies under a SYN flood (default true;
    /// [`crate::pipeline`]'s SYN proxy).
    pub syn_cookies: bool,
    /// New TCP flows a second per worker (with a burst of one second's worth) above which
    /// SYNs are answered with cookies instead of creating flows (default 50 000; 0: every
    /// SYN gets a cookie).
    pub syn_cookies_above_per_s: u32,
    /// Drop TCP and UDP segments whose checksum is wrong (default true, as Linux's
    /// `nf_conntrack_checksum=1`); false counts them (`bad_l4_checksums_passed`) and
    /// forwards them, for links that deliver checksums left partial without saying so.
    pub drop_bad_l4_checksums: bool,
    /// Directory of the conntrack region files (`conntrack-w<worker>-v4`, `-v6`: the flow
    /// records a restarted gateway adopts; [`crate::conntrack::persist`]); `None` (the
    /// default) puts them in `shm_dir`. On a hugetlbfs mount the records sit in huge
    /// pages, as DPDK keeps its memory: a packet at a million flows misses the TLB less
    /// (BENCHMARKS.md, "The conntrack in huge pages"). The gateway takes the directory's
    /// lock and does not start when the regions cannot be created there (not enough free
    /// huge pages: about `capacity` × 180 bytes per worker, rounded up to pages).
    pub region_dir: Option<PathBuf>,
}

/// Longest conntrack timeout, seconds (about 23.8 days): flow deadlines are 32-bit
/// milliseconds ([`crate::conntrack::Deadline::MAX_TIMEOUT_NS`]).
pub const MAX_CONNTRACK_TIMEOUT_S: u32 = (crate::conntrack::Deadline::MAX_TIMEOUT_NS / 1_000_000_000) as u32;

impl ConntrackConfig {
    /// The timeouts in the form the data path uses.
    #[must_use]
    pub fn timeouts(&self) -> crate::conntrack::Timeouts {
        let ns = |s: u32| u64::from(s) * 1_000_000_000;
        crate::conntrack::Timeouts {
            tcp_syn_sent_ns: ns(self.tcp_syn_sent_timeout_s),
            tcp_syn_recv_ns: ns(self.tcp_syn_recv_timeout_s),
            tcp_established_ns: ns(self.tcp_established_timeout_s),
            tcp_fin_wait_ns: ns(self.tcp_fin_wait_timeout_s),
            tcp_close_wait_ns: ns(self.tcp_close_wait_timeout_s),
            tcp_last_ack_ns: ns(self.tcp_last_ack_timeout_s),
            tcp_time_wait_ns: ns(self.tcp_time_wait_timeout_s),
            tcp_close_ns: ns(self.tcp_close_timeout_s),
            tcp_unacknowledged_ns: ns(self.tcp_unacknowledged_timeout_s),
            udp_ns: ns(self.udp_timeout_s),
            udp_stream_ns: ns(self.udp_stream_timeout_s),
        }
    }
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
    /// The DPDK driver's settings.
    pub dpdk: DpdkConfig,
    /// Interfaces, in the order the pipeline indexes them.
    pub interfaces: Vec<Interface>,
    /// Ports (devices), in order of their first interface; drivers index them so.
    pub ports: Vec<Port>,
    /// Default next hop, if any.
    pub router: Option<Router>,
    /// Default IPv6 next hop, if any.
    pub router6: Option<Router6>,
    /// Static neighbours.
    pub neighbours: Vec<StaticNeighbour>,
    /// Neighbours (next hops, on-link endpoints and clients) the shared neighbour table
    /// holds ([`crate::neighbour::Neighbours::new`]; default [`DEFAULT_NEIGHBOUR_CAPACITY`],
    /// 1..=[`MAX_NEIGHBOUR_CAPACITY`], at least the static neighbours).
    pub neighbour_capacity: usize,
    /// Source NAT.
    pub snat: Snat,
    /// Connection tracking.
    pub conntrack: ConntrackConfig,
    /// How new flows' endpoints are chosen (`scheduler`, default `"maglev"`): IPVS's
    /// scheduler names, as kube-proxy's `--ipvs-scheduler` takes them.
    pub scheduler: Scheduler,
    /// The gateway's metrics endpoint.
    pub metrics: MetricsConfig,
    /// VIP announcement over BGP through BIRD, and graceful drain (`[bgp]`; off when
    /// absent): [`crate::announce`].
    pub bgp: Option<crate::announce::BgpConfig>,
    /// L2 mode (`[l2]`; off when absent; not with `[bgp]`): one gateway per VIP answers
    /// ARP/NDP for it, chosen by torii-control ([`crate::l2`]).
    pub l2: Option<crate::l2::L2Config>,
}

/// `[metrics]`: the gateway's Prometheus `/metrics` and `/healthz` endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsConfig {
    /// `listen`: the TCP address to serve on (`"127.0.0.1:9100"`, `"[::]:9100"`); `None`
    /// (the default, key absent) serves nothing.
    pub listen: Option<SocketAddr>,
}

// ---- raw serde shapes, validated into the types above ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    /// Read through [`Common`], as are `shm_dir` and `snat.addresses`.
    #[serde(rename = "node_name")]
    _node_name: toml::Value,
    #[serde(rename = "shm_dir")]
    _shm_dir: Option<toml::Value>,
    #[serde(default = "default_driver")]
    driver: Driver,
    #[serde(default = "default_workers")]
    workers: usize,
    #[serde(default)]
    dpdk: RawDpdk,
    interfaces: Vec<RawInterface>,
    router: Option<RawRouter>,
    router6: Option<RawRouter>,
    #[serde(default)]
    neighbours: Vec<RawNeighbour>,
    #[serde(default = "default_neighbour_capacity")]
    neighbour_capacity: usize,
    snat: RawSnat,
    #[serde(default)]
    conntrack: RawConntrack,
    #[serde(default)]
    scheduler: Scheduler,
    /// torii-control's section, validated by torii-control.
    #[serde(rename = "control")]
    _control: Option<toml::Value>,
    #[serde(default)]
    metrics: RawMetrics,
    bgp: Option<crate::announce::RawBgp>,
    l2: Option<crate::l2::RawL2>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<String>,
}

fn default_driver() -> Driver {
    Driver::AfPacket
}
fn default_neighbour_capacity() -> usize {
    DEFAULT_NEIGHBOUR_CAPACITY
}
fn default_workers() -> usize {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    name: String,
    addresses: Vec<String>,
    device: Option<String>,
    vlan: Option<u16>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDpdk {
    #[serde(default)]
    eal_args: Vec<String>,
    #[serde(default)]
    cpus: Vec<usize>,
    #[serde(default = "default_descriptors")]
    rx_descriptors: u16,
    #[serde(default = "default_descriptors")]
    tx_descriptors: u16,
    #[serde(default)]
    fallback_to_af_packet: bool,
    #[serde(default)]
    tx_checksum_offload: bool,
    #[serde(default = "default_true")]
    rx_checksum_offload: bool,
    #[serde(default = "default_idle_sleep_us")]
    idle_sleep_us: u32,
}

impl Default for RawDpdk {
    fn default() -> Self {
        let d = DpdkConfig::default();
        Self {
            eal_args: d.eal_args,
            cpus: d.cpus,
            rx_descriptors: d.rx_descriptors,
            tx_descriptors: d.tx_descriptors,
            fallback_to_af_packet: d.fallback_to_af_packet,
            tx_checksum_offload: d.tx_checksum_offload,
            rx_checksum_offload: d.rx_checksum_offload,
            idle_sleep_us: d.idle_sleep_us,
        }
    }
}

fn default_descriptors() -> u16 {
    1024
}
fn default_true() -> bool {
    true
}
fn default_idle_sleep_us() -> u32 {
    200
}

/// Most CPUs a `dpdk.cpus` entry may name (`CPU_SETSIZE`).
const MAX_CPU: usize = 1024;

impl RawDpdk {
    fn validate(self) -> Result<DpdkConfig, ConfigError> {
        for (i, a) in self.eal_args.iter().enumerate() {
            if a.is_empty() || a.contains('\0') {
                return Err(invalid(format!("dpdk.eal_args[{i}]"), format!("{a:?} is not an EAL argument")));
            }
        }
        for (i, &c) in self.cpus.iter().enumerate() {
            if c >= MAX_CPU {
                return Err(invalid(format!("dpdk.cpus[{i}]"), format!("CPU {c} is out of range 0..{MAX_CPU}")));
            }
        }
        for (key, v) in [("dpdk.rx_descriptors", self.rx_descriptors), ("dpdk.tx_descriptors", self.tx_descriptors)] {
            if !(32..=16384).contains(&v) {
                return Err(invalid(key, format!("{v} is out of range 32..=16384")));
            }
        }
        if self.idle_sleep_us > 100_000 {
            return Err(invalid(
                "dpdk.idle_sleep_us",
                format!("{} is out of range 0..=100000 (an idle worker would answer too late)", self.idle_sleep_us),
            ));
        }
        Ok(DpdkConfig {
            eal_args: self.eal_args,
            cpus: self.cpus,
            rx_descriptors: self.rx_descriptors,
            tx_descriptors: self.tx_descriptors,
            fallback_to_af_packet: self.fallback_to_af_packet,
            tx_checksum_offload: self.tx_checksum_offload,
            rx_checksum_offload: self.rx_checksum_offload,
            idle_sleep_us: self.idle_sleep_us,
        })
    }
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
    tcp_syn_sent_timeout_s: u32,
    tcp_syn_recv_timeout_s: u32,
    tcp_established_timeout_s: u32,
    tcp_fin_wait_timeout_s: u32,
    tcp_close_wait_timeout_s: u32,
    tcp_last_ack_timeout_s: u32,
    tcp_time_wait_timeout_s: u32,
    tcp_close_timeout_s: u32,
    tcp_unacknowledged_timeout_s: u32,
    udp_timeout_s: u32,
    udp_stream_timeout_s: u32,
    new_flows_per_source_per_s: u32,
    new_flows_per_source_burst: Option<u32>,
    tcp_be_liberal: bool,
    syn_cookies: bool,
    syn_cookies_above_per_s: u32,
    drop_bad_l4_checksums: bool,
    /// Replaced by the per-state TCP timeouts; accepted only to say so.
    tcp_transitory_timeout_s: Option<u32>,
    region_dir: Option<PathBuf>,
}

impl Default for RawConntrack {
    fn default() -> Self {
        let t = crate::conntrack::Timeouts::DEFAULT;
        let s = |ns: u64| (ns / 1_000_000_000) as u32;
        Self {
            capacity: 65536,
            tcp_syn_sent_timeout_s: s(t.tcp_syn_sent_ns),
            tcp_syn_recv_timeout_s: s(t.tcp_syn_recv_ns),
            tcp_established_timeout_s: s(t.tcp_established_ns),
            tcp_fin_wait_timeout_s: s(t.tcp_fin_wait_ns),
            tcp_close_wait_timeout_s: s(t.tcp_close_wait_ns),
            tcp_last_ack_timeout_s: s(t.tcp_last_ack_ns),
            tcp_time_wait_timeout_s: s(t.tcp_time_wait_ns),
            tcp_close_timeout_s: s(t.tcp_close_ns),
            tcp_unacknowledged_timeout_s: s(t.tcp_unacknowledged_ns),
            udp_timeout_s: s(t.udp_ns),
            udp_stream_timeout_s: s(t.udp_stream_ns),
            new_flows_per_source_per_s: 0,
            new_flows_per_source_burst: None,
            tcp_be_liberal: false,
            syn_cookies: true,
            syn_cookies_above_per_s: 50_000,
            drop_bad_l4_checksums: true,
            tcp_transitory_timeout_s: None,
            region_dir: None,
        }
    }
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

    /// Parses and validates TOML text.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] for TOML errors, unknown keys and wrong types (the message
    /// names the key and line); [`ConfigError::Invalid`] for values out of range.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let common = Common::from_toml(text)?;
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
        let mut ports: Vec<Port> = Vec::new();
        for (i, ri) in raw.interfaces.iter().enumerate() {
            if ri.name.is_empty() || ri.name.len() >= libc::IFNAMSIZ {
                return Err(invalid(
                    format!("interfaces[{i}].name"),
                    format!("{:?} is not an interface name", ri.name),
                ));
            }
            if let Some(v) = ri.vlan {
                if !(1..=VID_MAX).contains(&v) {
                    return Err(invalid(
                        format!("interfaces[{i}].vlan"),
                        format!("{v} is out of range 1..={VID_MAX} (0 marks priority-tagged frames and 4095 is reserved, IEEE 802.1Q)"),
                    ));
                }
            }
            // An earlier interface on the same port (kernel interface) fixes its device.
            let same_port = interfaces.iter().position(|x: &Interface| x.name == ri.name);
            if let Some(j) = same_port {
                if interfaces.iter().any(|x: &Interface| x.name == ri.name && x.vlan == ri.vlan) {
                    return Err(invalid(
                        format!("interfaces[{i}].name"),
                        format!(
                            "{:?} is listed twice{}: interfaces on one port need different vlans",
                            ri.name,
                            ri.vlan.map_or(" untagged".to_string(), |v| format!(" with vlan {v}"))
                        ),
                    ));
                }
                let known = &interfaces[j];
                if ri.device.as_deref().is_some_and(|d| DpdkDevice::parse(d).as_ref() != known.device.as_ref()) {
                    return Err(invalid(
                        format!("interfaces[{i}].device"),
                        format!(
                            "interfaces[{j}] puts port {:?} on another device: interfaces on one port share its \
                             device (omit it here or repeat it)",
                            ri.name
                        ),
                    ));
                }
                let (device, port) = (known.device.clone(), known.port);
                let (addresses, addresses6) = parse_addresses(i, &ri.addresses)?;
                interfaces.push(Interface {
                    name: ri.name.clone(),
                    addresses,
                    addresses6,
                    device,
                    vlan: ri.vlan,
                    port,
                });
                continue;
            }
            let (addresses, addresses6) = parse_addresses(i, &ri.addresses)?;
            let device = match &ri.device {
                None if raw.driver == Driver::Dpdk => {
                    return Err(invalid(
                        format!("interfaces[{i}].device"),
                        "required with driver = \"dpdk\": a PCI address like \"0000:01:00.0\" or a virtual \
                         device like \"net_af_packet0,iface=eth1\"",
                    ));
                }
                None => None,
                Some(d) => {
                    let dev = DpdkDevice::parse(d).ok_or_else(|| {
                        invalid(
                            format!("interfaces[{i}].device"),
                            format!(
                                "{d:?} is neither a PCI address like \"0000:01:00.0\" nor a virtual device like \
                                 \"net_af_packet0,iface=eth1\""
                            ),
                        )
                    })?;
                    if let Some(j) = interfaces
                        .iter()
                        .position(|x: &Interface| x.device.as_ref().is_some_and(|o| o.port_name() == dev.port_name()))
                    {
                        return Err(invalid(
                            format!("interfaces[{i}].device"),
                            format!(
                                "device name {:?} is already used by interfaces[{j}]: each interface needs its own \
                                 device (number virtual devices: net_af_packet0, net_af_packet1, …)",
                                dev.port_name()
                            ),
                        ));
                    }
                    Some(dev)
                }
            };
            ports.push(Port { name: ri.name.clone(), device: device.clone() });
            interfaces.push(Interface {
                name: ri.name.clone(),
                addresses,
                addresses6,
                device,
                vlan: ri.vlan,
                port: ports.len() - 1,
            });
        }
        let iface_index = |key: &str, name: &str| {
            interfaces
                .iter()
                .position(|x| x.label() == name)
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
        let router6 = match &raw.router6 {
            None => None,
            Some(r) => Some(Router6 {
                address: r
                    .address
                    .parse()
                    .map_err(|_| invalid("router6.address", format!("{:?} is not an IPv6 address", r.address)))?,
                interface: iface_index("router6.interface", &r.interface)?,
            }),
        };
        let mut neighbours = Vec::new();
        for (i, n) in raw.neighbours.iter().enumerate() {
            neighbours.push(StaticNeighbour {
                address: n.address.parse().map_err(|_| {
                    invalid(
                        format!("neighbours[{i}].address"),
                        format!("{:?} is not an IPv4 or IPv6 address", n.address),
                    )
                })?,
                mac: parse_mac(&n.mac).ok_or_else(|| {
                    invalid(
                        format!("neighbours[{i}].mac"),
                        format!("{:?} is not a MAC address like \"02:00:00:00:00:01\"", n.mac),
                    )
                })?,
            });
        }
        if raw.neighbour_capacity == 0 || raw.neighbour_capacity > MAX_NEIGHBOUR_CAPACITY {
            return Err(invalid(
                "neighbour_capacity",
                format!("{} is out of range 1..={MAX_NEIGHBOUR_CAPACITY}", raw.neighbour_capacity),
            ));
        }
        if neighbours.len() > raw.neighbour_capacity {
            return Err(invalid(
                "neighbour_capacity",
                format!("{} cannot hold the {} static neighbours", raw.neighbour_capacity, neighbours.len()),
            ));
        }
        check_address_collisions(&raw)?;
        if raw.snat.addresses.is_empty() {
            return Err(invalid("snat.addresses", "at least one SNAT address is required"));
        }
        if raw.snat.addresses.len() > crate::conntrack::MAX_SNAT_ADDRESSES {
            return Err(invalid(
                "snat.addresses",
                format!(
                    "{} addresses; at most {} (conntrack records keep the SNAT address as a one-byte index)",
                    raw.snat.addresses.len(),
                    crate::conntrack::MAX_SNAT_ADDRESSES
                ),
            ));
        }
        let (mut snat_addrs, mut snat_addrs6) = (Vec::new(), Vec::new());
        for (i, &ip) in common.snat_addresses.iter().enumerate() {
            let key = format!("snat.addresses[{i}]");
            if common.snat_addresses[..i].contains(&ip) {
                return Err(invalid(key, format!("{ip} is listed twice")));
            }
            let own = interfaces.iter().any(|x| match ip {
                IpAddr::V4(v4) => x.addresses.iter().any(|c| c.addr == v4),
                IpAddr::V6(v6) => x.addresses6.iter().any(|c| c.addr == v6),
            });
            if !own {
                return Err(invalid(
                    key,
                    format!(
                        "{ip} is not one of the interfaces' addresses, so replies to it would not reach the gateway"
                    ),
                ));
            }
            match ip {
                IpAddr::V4(v4) => snat_addrs.push(v4),
                IpAddr::V6(v6) => snat_addrs6.push(v6),
            }
        }
        if raw.snat.port_min == 0 || raw.snat.port_min > raw.snat.port_max {
            return Err(invalid(
                "snat.port_min",
                format!("range {}..={} is empty or starts at 0", raw.snat.port_min, raw.snat.port_max),
            ));
        }
        let snat_ports = usize::from(raw.snat.port_max - raw.snat.port_min) + 1;
        if snat_ports < raw.workers {
            return Err(invalid("snat.port_max", "the SNAT port range must give every worker at least one port"));
        }
        let ct = raw.conntrack;
        if ct.capacity == 0 || ct.capacity > (1 << 26) {
            return Err(invalid("conntrack.capacity", format!("{} is out of range 1..=67108864", ct.capacity)));
        }
        if ct.tcp_transitory_timeout_s.is_some() {
            return Err(invalid(
                "conntrack.tcp_transitory_timeout_s",
                "replaced by per-state timeouts (Linux's): set tcp_syn_sent_timeout_s, tcp_syn_recv_timeout_s, \
                 tcp_fin_wait_timeout_s, tcp_last_ack_timeout_s, tcp_time_wait_timeout_s and tcp_close_timeout_s \
                 instead, or remove the key for the defaults",
            ));
        }
        for (k, v) in [
            ("conntrack.tcp_syn_sent_timeout_s", ct.tcp_syn_sent_timeout_s),
            ("conntrack.tcp_syn_recv_timeout_s", ct.tcp_syn_recv_timeout_s),
            ("conntrack.tcp_established_timeout_s", ct.tcp_established_timeout_s),
            ("conntrack.tcp_fin_wait_timeout_s", ct.tcp_fin_wait_timeout_s),
            ("conntrack.tcp_close_wait_timeout_s", ct.tcp_close_wait_timeout_s),
            ("conntrack.tcp_last_ack_timeout_s", ct.tcp_last_ack_timeout_s),
            ("conntrack.tcp_time_wait_timeout_s", ct.tcp_time_wait_timeout_s),
            ("conntrack.tcp_close_timeout_s", ct.tcp_close_timeout_s),
            ("conntrack.tcp_unacknowledged_timeout_s", ct.tcp_unacknowledged_timeout_s),
            ("conntrack.udp_timeout_s", ct.udp_timeout_s),
            ("conntrack.udp_stream_timeout_s", ct.udp_stream_timeout_s),
        ] {
            if !(1..=MAX_CONNTRACK_TIMEOUT_S).contains(&v) {
                return Err(invalid(
                    k,
                    format!("{v} is out of range 1..={MAX_CONNTRACK_TIMEOUT_S} seconds (about 23.8 days)"),
                ));
            }
        }
        if ct.new_flows_per_source_per_s > 1_000_000_000 {
            return Err(invalid(
                "conntrack.new_flows_per_source_per_s",
                format!("{} is out of range 0..=1000000000 (0: no limit)", ct.new_flows_per_source_per_s),
            ));
        }
        let own: Vec<(IpAddr, u8)> = interfaces
            .iter()
            .flat_map(|x| {
                let v4 = x.addresses.iter().map(|c| (IpAddr::V4(c.addr), c.prefix_len));
                v4.chain(x.addresses6.iter().map(|c| (IpAddr::V6(c.addr), c.prefix_len)))
            })
            .collect();
        let bgp = raw.bgp.map(|b| b.validate(&own)).transpose()?;
        let l2 = raw.l2.map(crate::l2::RawL2::validate).transpose()?;
        if bgp.is_some() && l2.is_some() {
            return Err(invalid("l2", "[l2] and [bgp] exclude each other: a VIP is either routed or on the segment"));
        }
        if ct.region_dir.as_ref().is_some_and(|d| !d.is_absolute()) {
            return Err(invalid("conntrack.region_dir", "must be an absolute path (a directory, e.g. on hugetlbfs)"));
        }
        let new_flows_per_source_burst = match ct.new_flows_per_source_burst {
            Some(0) => return Err(invalid("conntrack.new_flows_per_source_burst", "must be at least 1")),
            Some(b) => b,
            None => ct.new_flows_per_source_per_s.max(1),
        };
        Ok(Self {
            node_name: common.node_name,
            shm_dir: common.shm_dir,
            driver: raw.driver,
            workers: raw.workers,
            dpdk: raw.dpdk.validate()?,
            interfaces,
            ports,
            router,
            router6,
            neighbours,
            neighbour_capacity: raw.neighbour_capacity,
            snat: Snat {
                addresses: snat_addrs,
                addresses6: snat_addrs6,
                port_min: raw.snat.port_min,
                port_max: raw.snat.port_max,
            },
            conntrack: ConntrackConfig {
                capacity: ct.capacity,
                tcp_syn_sent_timeout_s: ct.tcp_syn_sent_timeout_s,
                tcp_syn_recv_timeout_s: ct.tcp_syn_recv_timeout_s,
                tcp_established_timeout_s: ct.tcp_established_timeout_s,
                tcp_fin_wait_timeout_s: ct.tcp_fin_wait_timeout_s,
                tcp_close_wait_timeout_s: ct.tcp_close_wait_timeout_s,
                tcp_last_ack_timeout_s: ct.tcp_last_ack_timeout_s,
                tcp_time_wait_timeout_s: ct.tcp_time_wait_timeout_s,
                tcp_close_timeout_s: ct.tcp_close_timeout_s,
                tcp_unacknowledged_timeout_s: ct.tcp_unacknowledged_timeout_s,
                udp_timeout_s: ct.udp_timeout_s,
                udp_stream_timeout_s: ct.udp_stream_timeout_s,
                new_flows_per_source_per_s: ct.new_flows_per_source_per_s,
                new_flows_per_source_burst,
                tcp_be_liberal: ct.tcp_be_liberal,
                syn_cookies: ct.syn_cookies,
                syn_cookies_above_per_s: ct.syn_cookies_above_per_s,
                drop_bad_l4_checksums: ct.drop_bad_l4_checksums,
                region_dir: ct.region_dir.clone(),
            },
            scheduler: raw.scheduler,
            metrics: MetricsConfig {
                listen: match &raw.metrics.listen {
                    None => None,
                    Some(l) => Some(l.parse().map_err(|_| {
                        invalid(
                            "metrics.listen",
                            format!("{l:?} is not an address:port like \"127.0.0.1:9100\" or \"[::]:9100\""),
                        )
                    })?),
                },
            },
            bgp,
            l2,
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
        let bad = format!("bogus_key = 1\n{EMBEDDED_DEFAULT}");
        let e = Config::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("bogus_key"), "{e}");
        let bad = EMBEDDED_DEFAULT.replacen("[snat]\n", "[snat]\nbogus_key = 1\n", 1);
        let e = Config::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("bogus_key"), "{e}");
    }

    #[test]
    fn neighbour_capacity_is_checked() {
        assert_eq!(Config::embedded_default().neighbour_capacity, DEFAULT_NEIGHBOUR_CAPACITY);
        let without = EMBEDDED_DEFAULT.replacen("neighbour_capacity = 16384\n", "", 1);
        assert_eq!(Config::from_toml(&without).unwrap().neighbour_capacity, DEFAULT_NEIGHBOUR_CAPACITY);
        let with =
            |n: &str| EMBEDDED_DEFAULT.replacen("neighbour_capacity = 16384", &format!("neighbour_capacity = {n}"), 1);
        assert_eq!(Config::from_toml(&with("100000")).unwrap().neighbour_capacity, 100_000);
        for bad in ["0", "4194305"] {
            let e = Config::from_toml(&with(bad)).unwrap_err().to_string();
            assert!(e.contains("neighbour_capacity") && e.contains("out of range"), "{e}");
        }
        let two = "[[neighbours]]\naddress = \"10.70.0.11\"\nmac = \"02:00:00:00:00:11\"\n\
                   [[neighbours]]\naddress = \"10.70.0.12\"\nmac = \"02:00:00:00:00:12\"\n";
        let e = Config::from_toml(&format!("{}\n{two}", with("1"))).unwrap_err().to_string();
        assert!(e.contains("neighbour_capacity: 1 cannot hold the 2 static neighbours"), "{e}");
        assert_eq!(Config::from_toml(&format!("{}\n{two}", with("2"))).unwrap().neighbours.len(), 2);
    }

    #[test]
    fn colliding_addresses_are_rejected_naming_both_keys() {
        let err = |text: &str| Config::from_toml(text).unwrap_err().to_string();
        // Overlapping subnets of two interfaces (the default: 198.51.100.1/24 and 10.70.0.1/24).
        let e = err(&EMBEDDED_DEFAULT.replacen("10.70.0.1/24", "198.51.100.7/16", 1));
        assert_eq!(
            e,
            "interfaces[1].addresses[0]: subnet 198.51.0.0/16 overlaps 198.51.100.0/24 of \
             interfaces[0].addresses[0], another interface: a destination in both would have two egress interfaces"
        );
        // The same address twice, on one interface.
        let e = err(&EMBEDDED_DEFAULT.replacen("\"fd00:70::1/64\"", "\"fd00:70::1/64\", \"fd00:70::1/96\"", 1));
        assert!(e.starts_with("interfaces[1].addresses[2]: fd00:70::1 is also interfaces[1].addresses[1]"), "{e}");
        // A duplicate SNAT address (checked with the keys both binaries read).
        let e = err(&EMBEDDED_DEFAULT.replacen(
            "addresses = [\"10.70.0.1\",",
            "addresses = [\"10.70.0.1\", \"10.70.0.1\",",
            1,
        ));
        assert!(e.starts_with("snat.addresses[1]: 10.70.0.1 is listed twice (also snat.addresses[0])"), "{e}");
        // A static neighbour or a router at the gateway's own address.
        let e =
            err(&format!("{EMBEDDED_DEFAULT}\n[[neighbours]]\naddress = \"10.70.0.1\"\nmac = \"02:00:00:00:00:01\"\n"));
        assert_eq!(e, "neighbours[0].address: 10.70.0.1 is the gateway's own address (interfaces[1].addresses[0]), not a neighbour");
        // Adjacent subnets and the same subnet on one interface are fine.
        let fine = EMBEDDED_DEFAULT.replacen(
            "\"198.51.100.1/24\",",
            "\"198.51.100.1/24\", \"198.51.100.9/24\", \"10.70.1.1/24\",",
            1,
        );
        assert!(Config::from_toml(&fine).is_ok(), "{:?}", Config::from_toml(&fine).err());
    }

    #[test]
    fn the_control_section_is_torii_controls_to_validate() {
        let c = format!("{EMBEDDED_DEFAULT}\nproxy_name = \"-bad\"\nbogus_key = 1\n");
        assert_eq!(Config::from_toml(&c).unwrap(), Config::embedded_default());
    }

    /// The embedded default with its `[conntrack]` table replaced by `lines`.
    fn with_conntrack(lines: &str) -> String {
        let (head, rest) = EMBEDDED_DEFAULT.split_once("\n[conntrack]\n").unwrap();
        let tail = &rest[rest.find("\n[").unwrap()..];
        format!("{head}\n[conntrack]\n{lines}\n{tail}")
    }

    #[test]
    fn conntrack_timeouts_default_to_kube_proxy_and_linux_and_are_configurable() {
        let c = Config::from_toml(&with_conntrack("")).unwrap();
        assert_eq!(c.conntrack.timeouts(), crate::conntrack::Timeouts::DEFAULT);
        assert_eq!(Config::embedded_default().conntrack.timeouts(), crate::conntrack::Timeouts::DEFAULT);
        let c = Config::from_toml(&with_conntrack(
            "capacity = 10\ntcp_syn_sent_timeout_s = 1\ntcp_syn_recv_timeout_s = 2\n\
             tcp_established_timeout_s = 3\ntcp_fin_wait_timeout_s = 4\ntcp_close_wait_timeout_s = 5\n\
             tcp_last_ack_timeout_s = 6\ntcp_time_wait_timeout_s = 7\ntcp_close_timeout_s = 8\n\
             tcp_unacknowledged_timeout_s = 9\nudp_timeout_s = 10\nudp_stream_timeout_s = 11",
        ))
        .unwrap();
        let t = c.conntrack.timeouts();
        let got = [
            t.tcp_syn_sent_ns,
            t.tcp_syn_recv_ns,
            t.tcp_established_ns,
            t.tcp_fin_wait_ns,
            t.tcp_close_wait_ns,
            t.tcp_last_ack_ns,
            t.tcp_time_wait_ns,
            t.tcp_close_ns,
            t.tcp_unacknowledged_ns,
            t.udp_ns,
            t.udp_stream_ns,
        ];
        assert_eq!(got, std::array::from_fn(|i| (i as u64 + 1) * 1_000_000_000));
        assert_eq!(c.conntrack.capacity, 10);
    }

    #[test]
    fn scheduler_takes_the_ipvs_names() {
        assert_eq!(Config::embedded_default().scheduler, Scheduler::Maglev);
        let with =
            |name: &str| EMBEDDED_DEFAULT.replacen("scheduler = \"maglev\"", &format!("scheduler = {name:?}"), 1);
        for s in Scheduler::ALL {
            assert_eq!(Config::from_toml(&with(s.name())).unwrap().scheduler, s);
        }
        assert_eq!(Config::from_toml(&with("mh")).unwrap().scheduler, Scheduler::Maglev);
        let e = Config::from_toml(&with("lblc")).unwrap_err().to_string();
        assert!(e.contains("scheduler") && e.contains("unknown variant `lblc`"), "{e}");
        let absent = EMBEDDED_DEFAULT.replacen("scheduler = \"maglev\"", "", 1);
        assert_eq!(Config::from_toml(&absent).unwrap().scheduler, Scheduler::Maglev);
    }

    #[test]
    fn conntrack_key_errors_name_the_key() {
        for (lines, key) in [
            ("tcp_transitory_timeout_s = 120", "conntrack.tcp_transitory_timeout_s: replaced by per-state"),
            ("tcp_close_wait_timeout_s = 0", "conntrack.tcp_close_wait_timeout_s: 0 is out of range"),
            ("udp_stream_timeout_s = 2100000", "conntrack.udp_stream_timeout_s: 2100000 is out of range"),
            ("capacity = 0", "conntrack.capacity"),
            ("tcp_timeout_s = 5", "tcp_timeout_s"),
        ] {
            let e = Config::from_toml(&with_conntrack(lines)).unwrap_err().to_string();
            assert!(e.contains(key), "{lines}: {e}");
        }
    }

    /// The embedded default with `driver` and the `[dpdk]` lines replaced.
    fn with_driver(driver: &str, dpdk: &str) -> String {
        let mut out = String::new();
        let mut in_dpdk = false;
        for line in EMBEDDED_DEFAULT.lines() {
            if line.starts_with('[') {
                in_dpdk = line.trim() == "[dpdk]";
            }
            if line.starts_with("driver =") {
                out.push_str(&format!("driver = \"{driver}\"\n"));
            } else if !in_dpdk {
                out.push_str(line);
                out.push('\n');
            }
        }
        format!("{out}\n[dpdk]\n{dpdk}\n")
    }

    #[test]
    fn dpdk_keys() {
        let c = Config::from_toml(&with_driver(
            "dpdk",
            "eal_args = [\"--log-level=*:debug\"]\ncpus = [1, 0]\nrx_descriptors = 512\nidle_sleep_us = 0",
        ))
        .unwrap();
        assert_eq!(c.driver, Driver::Dpdk);
        assert_eq!(c.dpdk.cpus, [1, 0]);
        assert_eq!(c.dpdk.rx_descriptors, 512);
        assert_eq!(c.dpdk.tx_descriptors, 1024);
        assert_eq!(c.dpdk.idle_sleep_us, 0);
        assert!(!c.dpdk.fallback_to_af_packet, "fallback is opt-in");
        assert!(c.dpdk.rx_checksum_offload && !c.dpdk.tx_checksum_offload, "receive offload opt-out, transmit opt-in");
        let c = Config::from_toml(&with_driver("dpdk", "rx_checksum_offload = false")).unwrap();
        assert!(!c.dpdk.rx_checksum_offload);
        let dev = c.interfaces[0].device.as_ref().expect("the embedded default names devices");
        assert_eq!(dev.port_name(), "net_af_packet0");
        assert_eq!(dev.eal_args()[0], "--vdev");
        let c = Config::embedded_default();
        assert_eq!(c.driver, Driver::Dpdk, "the demo runs on DPDK");
        assert!(c.dpdk.fallback_to_af_packet, "and falls back to AF_PACKET");
    }

    #[test]
    fn dpdk_devices_parse() {
        assert_eq!(DpdkDevice::parse("01:00.1"), Some(DpdkDevice::Pci("0000:01:00.1".into())));
        assert_eq!(DpdkDevice::parse("0000:AF:00.0"), Some(DpdkDevice::Pci("0000:af:00.0".into())));
        let v = DpdkDevice::parse("net_virtio_user0,path=/tmp/vhost.sock,queues=1").unwrap();
        assert_eq!(v.port_name(), "net_virtio_user0");
        assert_eq!(v.eal_args(), ["--vdev".to_string(), "net_virtio_user0,path=/tmp/vhost.sock,queues=1".into()]);
        assert_eq!(v.to_string(), "net_virtio_user0,path=/tmp/vhost.sock,queues=1");
        assert_eq!(DpdkDevice::parse("net_null0").unwrap().eal_args()[1], "net_null0");
        for bad in ["", "0net", "net_x,", "net x", "01:00.8", "net_af_packet0,iface=a b", "-a"] {
            assert_eq!(DpdkDevice::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn dpdk_key_errors_name_the_key() {
        let err = |text: &str| Config::from_toml(text).unwrap_err().to_string();
        let no_device: String =
            with_driver("dpdk", "").lines().filter(|l| !l.starts_with("device")).collect::<Vec<_>>().join("\n");
        let e = err(&no_device);
        assert!(e.starts_with("interfaces[0].device: required with driver = \"dpdk\""), "{e}");
        let e = err(&with_driver("dpdk", "").replacen("net_af_packet1", "net_af_packet0", 1));
        assert!(e.starts_with("interfaces[1].device: device name \"net_af_packet0\" is already used"), "{e}");
        let e = err(&with_driver("dpdk", "").replacen("net_af_packet0,iface=tg-front", "net af_packet0", 1));
        assert!(e.starts_with("interfaces[0].device: \"net af_packet0\" is neither"), "{e}");
        let e = err(&with_driver("dpdk", "rx_descriptors = 8"));
        assert!(e.starts_with("dpdk.rx_descriptors: 8 is out of range"), "{e}");
        let e = err(&with_driver("dpdk", "cpus = [0, 4096]"));
        assert!(e.starts_with("dpdk.cpus[1]: CPU 4096"), "{e}");
        let e = err(&with_driver("dpdk", "eal_args = [\"\"]"));
        assert!(e.starts_with("dpdk.eal_args[0]: "), "{e}");
        let e = err(&with_driver("dpdk", "idle_sleep_us = 1000000"));
        assert!(e.starts_with("dpdk.idle_sleep_us: "), "{e}");
        let e = err(&with_driver("dpdk", "bogus = 1"));
        assert!(e.contains("bogus"), "{e}");
        // AF_PACKET ignores devices, and needs none.
        let c = Config::from_toml(&no_device.replace("driver = \"dpdk\"", "driver = \"af_packet\"")).unwrap();
        assert_eq!(c.driver, Driver::AfPacket);
        assert!(c.interfaces.iter().all(|i| i.device.is_none()));
    }

    /// The embedded default with `extra` interfaces (and tables) appended.
    fn with_vlans(extra: &str) -> Result<Config, String> {
        Config::from_toml(&format!("{EMBEDDED_DEFAULT}\n{extra}")).map_err(|e| e.to_string())
    }

    #[test]
    fn vlan_interfaces_share_their_port() {
        let c = with_vlans(
            "[[interfaces]]\nname = \"tg-front\"\nvlan = 100\naddresses = [\"192.0.2.1/24\"]\n\n\
             [[interfaces]]\nname = \"tg-back\"\nvlan = 200\naddresses = [\"10.80.0.1/24\"]\n\
             device = \"net_af_packet1,iface=tg-back\"\n\n\
             [router]\naddress = \"192.0.2.254\"\ninterface = \"tg-front.100\"\n",
        )
        .unwrap();
        assert_eq!(c.ports.len(), 2);
        assert_eq!(
            c.ports[0],
            Port { name: "tg-front".into(), device: DpdkDevice::parse("net_af_packet0,iface=tg-front") }
        );
        let summary: Vec<(String, Option<u16>, usize)> =
            c.interfaces.iter().map(|i| (i.label(), i.vlan, i.port)).collect();
        assert_eq!(
            summary,
            [
                ("tg-front".to_string(), None, 0),
                ("tg-back".to_string(), None, 1),
                ("tg-front.100".to_string(), Some(100), 0),
                ("tg-back.200".to_string(), Some(200), 1)
            ]
        );
        // The device is inherited from the port's first interface.
        assert_eq!(c.interfaces[2].device, c.interfaces[0].device);
        assert_eq!(c.router.as_ref().map(|r| r.interface), Some(2));
        // A port may carry only VLAN interfaces.
        let c = with_vlans("[[interfaces]]\nname = \"tg-trunk\"\nvlan = 7\naddresses = []\ndevice = \"net_tap0\"\n")
            .unwrap();
        assert_eq!((c.ports.len(), c.interfaces[2].port, c.interfaces[2].label()), (3, 2, "tg-trunk.7".to_string()));
    }

    #[test]
    fn vlan_errors_name_the_key() {
        for (extra, want) in [
            ("[[interfaces]]\nname = \"tg-front\"\nvlan = 0\naddresses = []\n", "interfaces[2].vlan: 0 is out of range 1..=4094"),
            ("[[interfaces]]\nname = \"tg-front\"\nvlan = 4095\naddresses = []\n", "interfaces[2].vlan: 4095 is out of range"),
            ("[[interfaces]]\nname = \"tg-front\"\naddresses = []\n", "interfaces[2].name: \"tg-front\" is listed twice untagged"),
            (
                "[[interfaces]]\nname = \"tg-front\"\nvlan = 5\naddresses = []\n[[interfaces]]\nname = \"tg-front\"\nvlan = 5\naddresses = []\n",
                "interfaces[3].name: \"tg-front\" is listed twice with vlan 5",
            ),
            (
                "[[interfaces]]\nname = \"tg-front\"\nvlan = 5\naddresses = []\ndevice = \"net_af_packet1,iface=tg-back\"\n",
                "interfaces[2].device: interfaces[0] puts port \"tg-front\" on another device",
            ),
            ("[router]\naddress = \"10.70.0.254\"\ninterface = \"tg-back.9\"\n", "router.interface: \"tg-back.9\" is not one of"),
        ] {
            let e = with_vlans(extra).unwrap_err();
            assert!(e.starts_with(want), "{extra}: {e}");
        }
    }

    #[test]
    fn ipv6_keys() {
        // The embedded default is dual-stack; add an IPv6 router and an IPv6 static neighbour.
        let text = format!(
            "{EMBEDDED_DEFAULT}\n[router6]\naddress = \"fe80::1\"\ninterface = \"tg-front\"\n\n\
             [[neighbours]]\naddress = \"fd00:70::11\"\nmac = \"02:00:00:00:00:11\"\n"
        );
        let c = Config::from_toml(&text).unwrap();
        let back = &c.interfaces[1];
        assert_eq!(back.addresses, [Ipv4Cidr::parse("10.70.0.1/24").unwrap()]);
        assert_eq!(back.addresses6, [Ipv6Cidr::parse("fd00:70::1/64").unwrap()]);
        assert_eq!(c.snat.addresses, [Ipv4Addr::new(10, 70, 0, 1)]);
        assert_eq!(c.snat.addresses6, ["fd00:70::1".parse::<Ipv6Addr>().unwrap()]);
        assert_eq!(c.router6, Some(Router6 { address: "fe80::1".parse().unwrap(), interface: 0 }));
        assert_eq!(c.neighbours.last().unwrap().address, "fd00:70::11".parse::<IpAddr>().unwrap());
        // An IPv6 SNAT address must be an interface address too.
        let bad = text.replacen("\"fd00:70::1\"", "\"fd00:70::2\"", 1);
        let e = Config::from_toml(&bad).unwrap_err().to_string();
        assert!(e.starts_with("snat.addresses[1]: fd00:70::2 is not one of the interfaces' addresses"), "{e}");
        let twice = text.replacen("\"fd00:70::1\"]", "\"fd00:70::1\", \"10.70.0.1\"]", 1);
        let e = Config::from_toml(&twice).unwrap_err().to_string();
        assert!(e.starts_with("snat.addresses[2]: 10.70.0.1 is listed twice"), "{e}");
        let e = Config::from_toml(&text.replace("fd00:70::1/64", "fd00:70::1/129")).unwrap_err().to_string();
        assert!(e.starts_with("interfaces[1].addresses[1]: \"fd00:70::1/129\" is not an IPv4 or IPv6"), "{e}");
        let e = Config::from_toml(&text.replace("address = \"fe80::1\"", "address = \"10.0.0.1\"")).unwrap_err();
        assert!(e.to_string().starts_with("router6.address: "), "{e}");
    }

    #[test]
    fn metrics_listen() {
        assert_eq!(Config::embedded_default().metrics.listen, None, "off unless configured");
        let c = Config::from_toml(&format!("{EMBEDDED_DEFAULT}\n[metrics]\nlisten = \"127.0.0.1:9100\"\n")).unwrap();
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9100".parse().unwrap()));
        let e = Config::from_toml(&format!("{EMBEDDED_DEFAULT}\n[metrics]\nlisten = \"localhost\"\n")).unwrap_err();
        assert!(e.to_string().starts_with("metrics.listen: \"localhost\" is not an address:port"), "{e}");
    }

    #[test]
    fn cidr_contains() {
        let c = Ipv6Cidr::parse("fd00:70::1/64").unwrap();
        assert!(c.contains("fd00:70::ffff:1".parse().unwrap()));
        assert!(!c.contains("fd00:71::1".parse().unwrap()));
        assert!(Ipv6Cidr::parse("::/0").unwrap().contains("2001:db8::1".parse().unwrap()));
        assert!(Ipv6Cidr::parse("fd00::1/128").unwrap().contains("fd00::1".parse().unwrap()));
        assert!(!Ipv6Cidr::parse("fd00::1/128").unwrap().contains("fd00::2".parse().unwrap()));
        let c = Ipv4Cidr::parse("10.70.0.1/24").unwrap();
        assert!(c.contains("10.70.0.200".parse().unwrap()));
        assert!(!c.contains("10.71.0.1".parse().unwrap()));
        assert!(Ipv4Cidr::parse("0.0.0.0/0").unwrap().contains("1.2.3.4".parse().unwrap()));
    }
}
