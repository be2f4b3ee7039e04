//! Workloads of the data-plane benchmarks (`benches/pipeline.rs`): a gateway with
//! [`FRONT_DOORS`] front doors of one address family and a worker whose conntrack already
//! holds a given number of active flows, all created by `pipeline::process` itself, and
//! streams of frames to push through it. Everything is written once for both families,
//! generic over [`Family`] ([`Ipv4Addr`] or [`Ipv6Addr`]); the two gateways have the same
//! shape and differ only in their addresses and frame sizes.
//!
//! # The gateway
//!
//! - [`VIPS`] VIPs, each with two front doors: TCP 80 → 8080 and UDP 53 → 5353, each its
//!   own service (a Kubernetes Service port) with [`ENDPOINTS`] endpoints, so
//!   [`FRONT_DOORS`] front doors and as many Maglev rings (1021 slots each:
//!   `maglev::ring_size_for`), laid out by the gateway's table builder
//!   ([`torii_gateway::table::build`]) and validated by [`Table::new`]. IPv4 VIP `v` is
//!   `198.18.0.0 + v` (the benchmarking range of RFC 2544), IPv6 VIP `v` is
//!   `2001:2:0:1::` + `v` (the benchmarking range of RFC 5180). An IPv6 gateway is
//!   IPv6-only: its table holds the [`FRONT_DOORS`] IPv6 front doors and nothing else, so
//!   each family is measured with 10 000 front doors of its own.
//! - The endpoints of VIP `v` are the pods `10 v .. 10 v + 9`; pod `p` is host
//!   `p / BACK_LINKS + 2` on back link `p % BACK_LINKS` (IPv4 subnet `10.(64 + link).0.0/16`,
//!   IPv6 subnet `fd00:10:0:(64 + link)::/64`), so [`VIPS`] × [`ENDPOINTS`] pods. Every
//!   pod's MAC address is pre-resolved in the shared neighbour table (as static entries,
//!   like the `[[neighbours]]` of the configuration), so no packet waits for ARP or
//!   Neighbor Discovery.
//! - Interface 0 faces the clients, who are behind a router (`[router]` 198.51.100.254 on
//!   198.51.100.0/24, or `[router6]` 2001:db8:100::fe on 2001:db8:100::/64; its MAC
//!   pre-resolved too: replies go to it); interfaces 1..=[`BACK_LINKS`] are the back links,
//!   each with its own SNAT address (host 1 of the link's subnet: `10.(64 + link).0.1`,
//!   `fd00:10:0:(64 + link)::1`) and the full SNAT port range 1024–65535. Why
//!   [`BACK_LINKS`] links: a SNAT port used to be unique per (address, protocol), so one
//!   worker held at most 64 512 TCP flows per back link and 1 M flows needed at least 16.
//!   It is unique per reply tuple now (`torii_gateway::snat`: about 64 512 flows per
//!   endpoint and address), so one link would do (`gateway/tests/snat_scale.rs` runs a
//!   million flows through one SNAT address); the 20 links stay until the figures in
//!   BENCHMARKS.md are measured again on one (the route lookup scans fewer subnets then).
//!
//! # The flows
//!
//! Flow `i` (0-based) is client host `i / 64`, port `1024 + i % 64` (IPv4: `100.64.0.0 +
//! i / 64`, RFC 6598 space; IPv6: `2001:db8:c::` + `i / 64`, RFC 3849 space; nothing is
//! sent anywhere) to a pseudo-randomly chosen VIP. A [`Fixture`] creates `flows` flows of
//! one protocol through `pipeline::process`: for TCP the whole handshake (SYN, the
//! endpoint's SYN-ACK to the SNAT address and port the SYN was given, the client's ACK),
//! for UDP a datagram each way, so every flow is in its established state with its long
//! timeout, as the flows of a busy gateway are.
//!
//! # Streams
//!
//! A [`Stream`] is a ring of receive slots, each one minimum-size frame plus the interface
//! it arrives on: a driver's receive buffers. IPv4 frames are 60 bytes ([`FRAME_LEN`]: 64
//! on the wire, TCP segments padded to it, UDP datagrams carry 18 bytes), in 64-byte
//! slots; IPv6 frames are 74 bytes ([`FRAME_LEN6`]: Ethernet 14 + IPv6 40 + TCP 20, no
//! padding needed; UDP datagrams carry 12 bytes to be as long), in 128-byte slots (two
//! cache lines, as a frame of that size takes in a driver's buffer). The established
//! streams pick a pseudo-random active flow for every slot, so the conntrack is hit at
//! random as real traffic hits it, not the same cache-hot flow; with 1 M flows the ring
//! is 1 Mi slots (64 MiB for IPv4, 128 MiB for IPv6, read sequentially like descriptor
//! rings), long enough that the flows it touches do not stay in the caches. The SYN
//! stream carries a fresh tuple in every slot. `pipeline::process` rewrites a frame in
//! place, so every measured packet is first copied from its slot into the working buffer
//! ([`Stream::load`]); `frame_copy` (`frame6_copy`) in the benchmarks measures that copy
//! alone.

use std::fmt::Display;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::sync::Arc;

use torii_gateway::config::Config;
use torii_gateway::conntrack::{Address, Conntrack, FlowKey};
use torii_gateway::frames::{self, L2};
use torii_gateway::host::{Host, HostAddr};
use torii_gateway::neighbour::NeighbourAddr;
use torii_gateway::pipeline::{self, Meta, Shared, Verdict, WorkerState};
use torii_gateway::table::{self, BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec, Table, TableSpec};
use torii_gateway::wire::{Ipv4Packet, Ipv6Packet, MacAddr, TcpFlags, TcpPacket, UdpPacket};

/// Front doors in the table (the 10 K), per gateway (one family each).
pub const FRONT_DOORS: usize = 10_000;
/// VIPs: each has a TCP and a UDP front door.
pub const VIPS: usize = FRONT_DOORS / 2;
/// Endpoints per service.
pub const ENDPOINTS: usize = 10;
/// Back links (egress interfaces towards the pods), each with its own SNAT address.
pub const BACK_LINKS: usize = 20;
/// The clock of every benchmark packet, ns (flows are created at this time too).
pub const NOW_NS: u64 = 1_000_000_000;
/// Bytes of a minimum-size IPv4 frame without its FCS (a 64-byte frame on the wire).
pub const FRAME_LEN: usize = 60;
/// Bytes of a minimum-size IPv6 TCP frame without its FCS: Ethernet 14 + IPv6 40 + TCP 20.
pub const FRAME_LEN6: usize = 74;
/// Size of the buffer frames are processed in (a driver's mbuf data room).
pub const BUFFER_LEN: usize = 2048;

const FRONT_IFACE: u8 = 0;
const TCP_PORT: u16 = 80;
const TCP_TARGET_PORT: u16 = 8080;
const UDP_PORT: u16 = 53;
const UDP_TARGET_PORT: u16 = 5353;
/// The router's MAC: the source of every client frame.
const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xc0, 0x01]);
/// TTL / Hop Limit of every frame.
const TTL: u8 = 64;
/// Where the flow numbers of SYN streams start: far above any fixture's active flows.
const FRESH_BASE: u64 = 1 << 24;
/// Ethernet, UDP header.
const ETHERNET_LEN: usize = 14;
const UDP_HEADER_LEN: usize = 8;
/// What UDP datagrams carry (a prefix of it: see [`Family::FRAME_LEN`]).
const UDP_PAYLOAD: [u8; 32] = [0x5a; 32];

/// An address family the benchmarks run: its addresses, frames and conntrack table.
/// Implemented by [`Ipv4Addr`] and [`Ipv6Addr`].
pub trait Family: Address + HostAddr + NeighbourAddr + Into<IpAddr> + Display {
    /// A receive slot's frame: `[u8; Self::FRAME_LEN]`.
    type Frame: Copy + AsRef<[u8]> + AsMut<[u8]>;
    /// An all-zeros [`Self::Frame`].
    const BLANK: Self::Frame;
    /// Bytes of every frame of this family, without FCS: the minimum-size TCP frame
    /// (IPv4: padded to Ethernet's 60; IPv6: 74). UDP datagrams carry as many bytes as make
    /// their frame this long.
    const FRAME_LEN: usize;
    /// Bytes of the IP header the frames carry (no options or extension headers).
    const IP_HEADER_LEN: usize;
    /// What the family adds to benchmark names: `""` (IPv4, the names from before IPv6)
    /// or `"6"` (`tcp6_…`).
    const SUFFIX: &'static str;
    /// The configuration table of the default router: `router` or `router6`.
    const ROUTER_KEY: &'static str;
    /// The router on the client-facing link, which the clients' packets come through.
    const ROUTER: Self;
    /// The gateway's address on the client-facing link, with its prefix.
    const FRONT_ADDRESS: &'static str;
    /// Prefix length of the back links' subnets.
    const BACK_PREFIX_LEN: u8;

    /// VIP `v`.
    fn vip(v: usize) -> Self;
    /// Client host `n`.
    fn client(n: u64) -> Self;
    /// Host `host` of back link `link`'s subnet (host 1 is the gateway).
    fn back_host(link: usize, host: u16) -> Self;
    /// The three bytes of a back-link address that tell pods apart: the link's subnet
    /// byte (`64 + link`) and the host number.
    fn pod_bytes(self) -> [u8; 3];
    /// A TCP segment without payload ([`frames::tcp`], [`frames::tcp6`]).
    fn tcp(l2: L2, src: (Self, u16), dst: (Self, u16), flags: TcpFlags, seq: u32, ack: u32) -> Vec<u8>;
    /// A UDP datagram ([`frames::udp`], [`frames::udp6`]).
    fn udp(l2: L2, src: (Self, u16), dst: (Self, u16), payload: &[u8]) -> Vec<u8>;
    /// The source and destination of the IP packet `ip` (from its network header on) and
    /// where its transport header and payload are in it.
    ///
    /// # Panics
    /// If `ip` is not a packet of this family.
    fn forwarded(ip: &[u8]) -> (Self, Self, Range<usize>);
    /// This family's conntrack table in `st`.
    fn conntrack(st: &WorkerState) -> &Conntrack<Self>;
    /// This family's conntrack table in `st`, mutable.
    fn conntrack_mut(st: &mut WorkerState) -> &mut Conntrack<Self>;
}

impl Family for Ipv4Addr {
    type Frame = [u8; FRAME_LEN];
    const BLANK: Self::Frame = [0; FRAME_LEN];
    const FRAME_LEN: usize = FRAME_LEN;
    const IP_HEADER_LEN: usize = 20;
    const SUFFIX: &'static str = "";
    const ROUTER_KEY: &'static str = "router";
    const ROUTER: Self = Ipv4Addr::new(198, 51, 100, 254);
    const FRONT_ADDRESS: &'static str = "198.51.100.1/24";
    const BACK_PREFIX_LEN: u8 = 16;

    fn vip(v: usize) -> Self {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + v as u32)
    }
    fn client(n: u64) -> Self {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)).wrapping_add(n as u32))
    }
    fn back_host(link: usize, host: u16) -> Self {
        let [hi, lo] = host.to_be_bytes();
        Ipv4Addr::new(10, 64 + link as u8, hi, lo)
    }
    fn pod_bytes(self) -> [u8; 3] {
        let o = self.octets();
        [o[1], o[2], o[3]]
    }
    fn tcp(l2: L2, src: (Self, u16), dst: (Self, u16), flags: TcpFlags, seq: u32, ack: u32) -> Vec<u8> {
        frames::tcp(l2, src, dst, flags, seq, ack, &[], TTL)
    }
    fn udp(l2: L2, src: (Self, u16), dst: (Self, u16), payload: &[u8]) -> Vec<u8> {
        frames::udp(l2, src, dst, payload, TTL)
    }
    fn forwarded(ip: &[u8]) -> (Self, Self, Range<usize>) {
        let p = Ipv4Packet::new_checked(ip).expect("forwarded IPv4");
        (p.src_addr(), p.dst_addr(), p.header_len()..usize::from(p.total_len()))
    }
    fn conntrack(st: &WorkerState) -> &Conntrack<Self> {
        &st.conntrack
    }
    fn conntrack_mut(st: &mut WorkerState) -> &mut Conntrack<Self> {
        &mut st.conntrack
    }
}

impl Family for Ipv6Addr {
    type Frame = [u8; FRAME_LEN6];
    const BLANK: Self::Frame = [0; FRAME_LEN6];
    const FRAME_LEN: usize = FRAME_LEN6;
    const IP_HEADER_LEN: usize = 40;
    const SUFFIX: &'static str = "6";
    const ROUTER_KEY: &'static str = "router6";
    const ROUTER: Self = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0xfe);
    const FRONT_ADDRESS: &'static str = "2001:db8:100::1/64";
    const BACK_PREFIX_LEN: u8 = 64;

    fn vip(v: usize) -> Self {
        Ipv6Addr::from(u128::from(Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, 0, 0)) + v as u128)
    }
    fn client(n: u64) -> Self {
        Ipv6Addr::from(u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 0)) + u128::from(n))
    }
    fn back_host(link: usize, host: u16) -> Self {
        Ipv6Addr::new(0xfd00, 0x10, 0, 64 + link as u16, 0, 0, 0, host)
    }
    fn pod_bytes(self) -> [u8; 3] {
        let o = self.octets();
        [o[7], o[14], o[15]]
    }
    fn tcp(l2: L2, src: (Self, u16), dst: (Self, u16), flags: TcpFlags, seq: u32, ack: u32) -> Vec<u8> {
        frames::tcp6(l2, src, dst, flags, seq, ack, &[], TTL)
    }
    fn udp(l2: L2, src: (Self, u16), dst: (Self, u16), payload: &[u8]) -> Vec<u8> {
        frames::udp6(l2, src, dst, payload, TTL)
    }
    fn forwarded(ip: &[u8]) -> (Self, Self, Range<usize>) {
        let p = Ipv6Packet::new_checked(ip).expect("forwarded IPv6");
        (p.src_addr(), p.dst_addr(), Ipv6Packet::<&[u8]>::HEADER_LEN..p.total_len())
    }
    fn conntrack(st: &WorkerState) -> &Conntrack<Self> {
        &st.conntrack6
    }
    fn conntrack_mut(st: &mut WorkerState) -> &mut Conntrack<Self> {
        &mut st.conntrack6
    }
}

/// splitmix64: a cheap, well-mixed pseudo-random function of `x`.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Pod `p`: (back link, address, MAC).
fn pod<A: Family>(p: usize) -> (usize, A, MacAddr) {
    let link = p % BACK_LINKS;
    let addr = A::back_host(link, (p / BACK_LINKS + 2) as u16); // host 0 is the network, 1 the gateway
    (link, addr, pod_mac(addr))
}

/// A pod's MAC address: `02:0a`, its [`Family::pod_bytes`], `01`.
fn pod_mac<A: Family>(addr: A) -> MacAddr {
    let [a, b, c] = addr.pod_bytes();
    MacAddr([0x02, 0x0a, a, b, c, 0x01])
}

const fn iface_mac(iface: usize) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0xf0, iface as u8])
}

/// The client address and port of flow `i`, and the VIP it goes to.
fn client<A: Family>(i: u64) -> ((A, u16), usize) {
    ((A::client(i / 64), 1024 + (i % 64) as u16), (mix(i) % VIPS as u64) as usize)
}

/// Client `i`'s SYN to its VIP's TCP port (the first segment of flow or connection `i`), and
/// its tuple.
fn syn_frame<A: Family>(i: u64) -> (Vec<u8>, FlowKey<A>) {
    let (src, v) = client::<A>(i);
    let dst = (A::vip(v), TCP_PORT);
    let key = FlowKey { protocol: 6, src_addr: src.0, src_port: src.1, dst_addr: dst.0, dst_port: dst.1 };
    (A::tcp(TO_GATEWAY, src, dst, TcpFlags::SYN, tcp_isn(i).0, 0), key)
}

/// Where the gateway sent a flow's first packet (`out`, a `transport` frame transmitted on
/// back link `link`): the endpoint and the SNAT address and port it chose.
///
/// # Panics
/// If `out` is not a forwarded packet of `transport` and family `A`.
fn forwarded_to<A: Family>(transport: Transport, link: u8, out: &[u8]) -> Active<A> {
    let (snat_addr, endpoint_addr, l4) = A::forwarded(&out[ETHERNET_LEN..]);
    let l4 = &out[ETHERNET_LEN..][l4];
    let (snat_port, endpoint_port) = match transport {
        Transport::Tcp => {
            let t = TcpPacket::new_checked(l4).expect("forwarded TCP");
            (t.src_port(), t.dst_port())
        }
        Transport::Udp => {
            let u = UdpPacket::new_checked(l4).expect("forwarded UDP");
            (u.src_port(), u.dst_port())
        }
    };
    Active { link, endpoint: (endpoint_addr, endpoint_port), snat: (snat_addr, snat_port) }
}

/// What the UDP datagrams of family `A` carry: as many bytes as make the frame
/// [`Family::FRAME_LEN`] long.
fn udp_payload<A: Family>() -> &'static [u8] {
    &UDP_PAYLOAD[..A::FRAME_LEN - ETHERNET_LEN - A::IP_HEADER_LEN - UDP_HEADER_LEN]
}

/// The gateway's configuration for family `A`: one client-facing link and [`BACK_LINKS`]
/// back links, one SNAT address each, default conntrack timeouts, SYN cookies off (the
/// fixture opens all its flows at one instant, which the default
/// `conntrack.syn_cookies_above_per_s` of 50 000 would take for a flood from the 50 001st
/// SYN on, answering it with a cookie instead of opening the flow; and the new-flow
/// benchmarks measure flows created, not cookies).
pub fn config<A: Family>() -> Config {
    let mut toml = String::from("node_name = \"bench-gw\"\nworkers = 1\n");
    toml.push_str(&format!("[[interfaces]]\nname = \"front\"\naddresses = [\"{}\"]\n", A::FRONT_ADDRESS));
    toml.push_str(&format!("[{}]\naddress = \"{}\"\ninterface = \"front\"\n", A::ROUTER_KEY, A::ROUTER));
    let mut snat = Vec::new();
    for link in 0..BACK_LINKS {
        let gw = A::back_host(link, 1);
        let prefix = A::BACK_PREFIX_LEN;
        toml.push_str(&format!("[[interfaces]]\nname = \"back{link:02}\"\naddresses = [\"{gw}/{prefix}\"]\n"));
        snat.push(format!("\"{gw}\""));
    }
    toml.push_str(&format!("[snat]\naddresses = [{}]\nport_min = 1024\nport_max = 65535\n", snat.join(", ")));
    toml.push_str("[conntrack]\nsyn_cookies = false\n");
    Config::from_toml(&toml).expect("the benchmark configuration is valid")
}

/// The table of family `A`: [`VIPS`] VIPs × (TCP 80, UDP 53), [`ENDPOINTS`] endpoints per
/// service.
pub fn table_spec<A: Family>() -> TableSpec {
    let mut spec = TableSpec::default();
    for v in 0..VIPS {
        let backends =
            |port| (0..ENDPOINTS).map(move |j| BackendSpec { addr: pod::<A>(v * ENDPOINTS + j).1.into(), port });
        for (protocol, port, target, name) in
            [(Protocol::Tcp, TCP_PORT, TCP_TARGET_PORT, "http"), (Protocol::Udp, UDP_PORT, UDP_TARGET_PORT, "dns")]
        {
            spec.frontends.push(FrontendSpec {
                addr: A::vip(v).into(),
                port,
                protocol,
                kind: FrontendKind::LoadBalancer,
                service: spec.services.len(),
                source_ranges: vec![],
            });
            spec.services.push(ServiceSpec {
                name: format!("bench/svc-{v:05}:{name}"),
                backends: backends(target).collect(),
                ..Default::default()
            });
        }
    }
    spec
}

/// What every fixture of family `A` shares: the host, the table and the neighbour table.
pub struct Gateway<A: Family> {
    /// The host view of [`config`].
    pub host: Arc<Host>,
    /// The validated table of [`table_spec`].
    pub table: Table,
    /// Neighbours (every pod and the router, static) and the affinity table.
    pub shared: Shared,
    family: PhantomData<A>,
}

impl<A: Family> Gateway<A> {
    /// Builds the table and resolves every pod.
    ///
    /// # Panics
    /// If the table does not build or validate (a bug).
    pub fn new() -> Self {
        let config = config::<A>();
        let macs: Vec<MacAddr> = (0..config.interfaces.len()).map(iface_mac).collect();
        let host = Arc::new(Host::new(&config, &macs));
        let bytes = table::build(&table_spec::<A>(), 1).expect("the benchmark table builds");
        let table = Table::new(table::Storage::Owned(bytes)).expect("the benchmark table validates");
        let pods = VIPS * ENDPOINTS;
        let shared = Shared::new(pods + 1, 1024);
        assert!(shared.neighbours.learn(A::ROUTER, CLIENT_MAC, u64::MAX), "neighbour table full");
        for p in 0..pods {
            let (_, addr, mac) = pod::<A>(p);
            assert!(shared.neighbours.learn(addr, mac, u64::MAX), "neighbour table full");
        }
        Self { host, table, shared, family: PhantomData }
    }
}

impl<A: Family> Default for Gateway<A> {
    fn default() -> Self {
        Self::new()
    }
}

/// The transport protocol of a fixture's flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// TCP to port 80, established by a full handshake.
    Tcp,
    /// UDP to port 53, a datagram each way.
    Udp,
}

/// Which packets a [`Stream`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Client → VIP on active flows (TCP: ACK segments; UDP: datagrams).
    Original,
    /// Endpoint → SNAT address on active flows (TCP: ACK segments; UDP: datagrams).
    Reply,
    /// TCP SYNs, each with a tuple no flow has (a new flow per packet).
    Syn,
}

/// The four segments of one TCP connection of torii-bench's connection-rate test (RFC 8219
/// § 7; docs/benchmarking.md): the client's SYN, the endpoint's SYN-ACK, the client's ACK,
/// and the endpoint's RST at the number the client acknowledged, which closes the flow
/// (CLOSE). The next SYN on the tuple reopens it (RFC 1122 § 4.2.2.13, as Linux does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// Client → VIP: SYN (a new flow, or the reopen of the tuple's closed one).
    Syn,
    /// Endpoint → SNAT address: SYN-ACK.
    SynAck,
    /// Client → VIP: the ACK that completes the handshake.
    Ack,
    /// Endpoint → SNAT address: RST, closing the flow.
    Rst,
}

impl Handshake {
    /// The four, in the order a connection sends them.
    pub const ALL: [Handshake; 4] = [Handshake::Syn, Handshake::SynAck, Handshake::Ack, Handshake::Rst];
}

/// One flow as the pipeline set it up: its back link and the reply tuple (what the
/// endpoint's packets are addressed with). Opaque: [`Fixture::replies`] reads it off the
/// forwarded frames.
#[derive(Clone, Copy, Debug)]
pub struct Active<A> {
    link: u8,
    endpoint: (A, u16),
    snat: (A, u16),
}

/// A worker with `flows` active flows of one transport and family.
pub struct Fixture<A: Family> {
    /// The shared gateway.
    pub gateway: Arc<Gateway<A>>,
    /// The worker's state.
    pub state: WorkerState,
    transport: Transport,
    active: Vec<Active<A>>,
    buf: Box<[u8]>,
}

/// One receive slot: a frame and the interface it arrives on, on a cache line boundary
/// (64 bytes for IPv4 frames, 128 for IPv6).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Slot<F> {
    frame: F,
    iface: u8,
}

const _: () = assert!(std::mem::size_of::<Slot<<Ipv4Addr as Family>::Frame>>() == 64);
const _: () = assert!(std::mem::size_of::<Slot<<Ipv6Addr as Family>::Frame>>() == 128);

impl<F: Copy + AsMut<[u8]>> Slot<F> {
    /// `frame` (zero-padded to the slot's frame) arriving on `iface`.
    fn new(blank: F, frame: &[u8], iface: u8) -> Self {
        let mut s = Slot { frame: blank, iface };
        s.frame.as_mut()[..frame.len()].copy_from_slice(frame);
        s
    }
}

/// A ring of receive slots of family `A` (see the module documentation).
pub struct Stream<A: Family> {
    slots: Vec<Slot<A::Frame>>,
    /// The original tuple of each slot's packet (SYN streams only: to forget the flows).
    keys: Vec<FlowKey<A>>,
    next: usize,
}

impl<A: Family> Stream<A> {
    /// Slots in the ring.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the ring is empty (never, for streams a [`Fixture`] makes).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Copies the next slot's frame into `buf` (at least [`Family::FRAME_LEN`] bytes) and
    /// returns its metadata and the slot's index; the ring wraps around.
    #[inline]
    pub fn load(&mut self, buf: &mut [u8]) -> (Meta, usize) {
        let i = self.next;
        self.next = if i + 1 == self.slots.len() { 0 } else { i + 1 };
        let slot = &self.slots[i];
        buf[..A::FRAME_LEN].copy_from_slice(slot.frame.as_ref());
        (Meta { iface: slot.iface, len: A::FRAME_LEN, ..Meta::default() }, i)
    }

    /// The index of the slot [`load`](Self::load) copies next.
    pub fn position(&self) -> usize {
        self.next
    }

    /// The original tuple of slot `i`'s packet (SYN streams; `None` otherwise).
    pub fn key(&self, i: usize) -> Option<&FlowKey<A>> {
        self.keys.get(i)
    }
}

/// Packets per burst in the `_burst32` benchmarks (a DPDK receive burst).
pub const BURST: usize = 32;

/// Packets per burst in the `_burst256` benchmarks: the worker's vector
/// (`torii_gateway::worker::VECTOR`), what it hands `process_burst` from a loaded port.
pub const VECTOR: usize = torii_gateway::worker::VECTOR;

/// The buffers, metadata and verdicts of one burst of received frames.
pub struct Burst {
    bufs: Vec<Vec<u8>>,
    metas: Vec<Meta>,
    /// What became of each frame of the last burst.
    pub verdicts: Vec<Verdict>,
}

impl Burst {
    /// `len` buffers of [`BUFFER_LEN`] bytes.
    pub fn new(len: usize) -> Self {
        Self {
            bufs: vec![vec![0; BUFFER_LEN]; len],
            metas: vec![Meta::default(); len],
            verdicts: vec![Verdict::Consumed; len],
        }
    }

    /// Frames per burst.
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// Whether the burst holds no frames.
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }
}

fn tcp_isn(i: u64) -> (u32, u32) {
    let h = mix(i ^ 0x7463_7000);
    (h as u32, (h >> 32) as u32)
}

/// Client frames enter on the front link, from the router.
const TO_GATEWAY: L2 = L2 { src: CLIENT_MAC, dst: iface_mac(FRONT_IFACE as usize) };

impl<A: Family> Fixture<A> {
    /// A worker (index 0 of 1) whose conntrack has room for `flows` plus a quarter (a
    /// gateway at 80 % of its configured flows, and room for the SYN benchmark's batches),
    /// with `flows` active flows of `transport` created through `pipeline::process`.
    ///
    /// # Panics
    /// If the pipeline does not forward a setup packet (a bug, or too many flows for the
    /// SNAT ports of [`BACK_LINKS`] links).
    pub fn new(gateway: Arc<Gateway<A>>, transport: Transport, flows: usize) -> Self {
        Self::new_in(gateway, transport, flows, None)
    }

    /// As [`Fixture::new`], with the conntrack tables in region files of `dir` (as the
    /// gateway's `shm_dir`: `WorkerState::persistent`, files `conntrack-w0-v4` and `-v6`,
    /// replaced if present) when given, on the heap otherwise.
    ///
    /// # Panics
    /// As [`Fixture::new`], and when the files cannot be created.
    pub fn new_in(gateway: Arc<Gateway<A>>, transport: Transport, flows: usize, dir: Option<&std::path::Path>) -> Self {
        let capacity = flows + flows / 4 + 4096;
        let state = match dir {
            None => WorkerState::new(0, 1, Arc::clone(&gateway.host), &gateway.shared, capacity, 0x5eed),
            Some(dir) => {
                for family in ["v4", "v6"] {
                    let _ = std::fs::remove_file(dir.join(format!("conntrack-w0-{family}")));
                }
                WorkerState::persistent(0, 1, Arc::clone(&gateway.host), &gateway.shared, capacity, 0x5eed, dir, 0)
                    .unwrap_or_else(|e| panic!("conntrack regions in {}: {e}", dir.display()))
                    .0
            }
        };
        let mut fx =
            Self { gateway, state, transport, active: Vec::with_capacity(flows), buf: vec![0; BUFFER_LEN].into() };
        for i in 0..flows as u64 {
            let a = fx.open(i);
            fx.active.push(a);
        }
        fx
    }

    /// Active flows.
    pub fn flows(&self) -> usize {
        self.active.len()
    }

    /// The transport of the active flows.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The worker's conntrack table of family `A`, where the fixture's flows are.
    pub fn conntrack(&self) -> &Conntrack<A> {
        A::conntrack(&self.state)
    }

    /// Runs `pipeline::process` on `frame` (padded to [`Family::FRAME_LEN`]) arriving on
    /// `iface` and returns the egress interface and the transmitted frame.
    fn run(&mut self, frame: &[u8], iface: u8) -> (u8, &[u8]) {
        self.buf[..A::FRAME_LEN].fill(0);
        self.buf[..frame.len()].copy_from_slice(frame);
        let meta = Meta { iface, len: frame.len().max(A::FRAME_LEN), ..Meta::default() };
        match pipeline::process(NOW_NS, &mut self.buf, &meta, &self.gateway.table, &mut self.state) {
            Verdict::Transmit { iface, len } => (iface, &self.buf[..len]),
            v => panic!("setup packet not forwarded: {v:?}"),
        }
    }

    /// Opens flow `i`: TCP handshake or a UDP datagram each way. Returns its reply side.
    fn open(&mut self, i: u64) -> Active<A> {
        let transport = self.transport;
        let first = match transport {
            Transport::Tcp => syn_frame::<A>(i).0,
            Transport::Udp => {
                let (c, v) = client::<A>(i);
                A::udp(TO_GATEWAY, c, (A::vip(v), UDP_PORT), udp_payload::<A>())
            }
        };
        let (link, out) = self.run(&first, FRONT_IFACE);
        let active = forwarded_to::<A>(transport, link, out);
        let reply = self.reply_frame(i, &active, true);
        self.run(&reply, active.link);
        if transport == Transport::Tcp {
            let ack = self.original_frame(i);
            self.run(&ack, FRONT_IFACE);
        }
        active
    }

    /// The client's packet of established flow `i`: a TCP ACK (handshake done) or a datagram.
    fn original_frame(&self, i: u64) -> Vec<u8> {
        let (c, v) = client::<A>(i);
        match self.transport {
            Transport::Tcp => {
                let (isn, isn_b) = tcp_isn(i);
                let (seq, ack) = (isn.wrapping_add(1), isn_b.wrapping_add(1));
                A::tcp(TO_GATEWAY, c, (A::vip(v), TCP_PORT), TcpFlags::ACK, seq, ack)
            }
            Transport::Udp => A::udp(TO_GATEWAY, c, (A::vip(v), UDP_PORT), udp_payload::<A>()),
        }
    }

    /// The endpoint's packet of flow `i`: for TCP the SYN-ACK (`first`) or an ACK after the
    /// handshake; for UDP a datagram.
    fn reply_frame(&self, i: u64, a: &Active<A>, first: bool) -> Vec<u8> {
        let l2 = L2 { src: pod_mac(a.endpoint.0), dst: iface_mac(a.link.into()) };
        match self.transport {
            Transport::Tcp => {
                let (isn, isn_b) = tcp_isn(i);
                let (flags, seq) = if first {
                    (TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0), isn_b)
                } else {
                    (TcpFlags::ACK, isn_b.wrapping_add(1))
                };
                A::tcp(l2, a.endpoint, a.snat, flags, seq, isn.wrapping_add(1))
            }
            Transport::Udp => A::udp(l2, a.endpoint, a.snat, udp_payload::<A>()),
        }
    }

    /// A stream of `len` slots of `kind` (see the module documentation); established kinds
    /// pick a flow pseudo-randomly (seeded by `seed`) for each slot.
    ///
    /// # Panics
    /// If `kind` is [`Kind::Syn`] on a UDP fixture, or the fixture has no flows.
    pub fn stream(&self, kind: Kind, len: usize, seed: u64) -> Stream<A> {
        let mut slots = Vec::with_capacity(len);
        let mut keys = Vec::new();
        let n = self.active.len() as u64;
        let slot = |frame: &[u8], iface| Slot::new(A::BLANK, frame, iface);
        for j in 0..len as u64 {
            let pick = || mix(seed ^ mix(j)) % n;
            match kind {
                Kind::Original => slots.push(slot(&self.original_frame(pick()), FRONT_IFACE)),
                Kind::Reply => {
                    let i = pick();
                    let a = &self.active[i as usize];
                    slots.push(slot(&self.reply_frame(i, a, false), a.link));
                }
                Kind::Syn => {
                    assert_eq!(self.transport, Transport::Tcp, "SYN streams are TCP");
                    let (frame, key) = syn_frame::<A>(FRESH_BASE + j);
                    slots.push(slot(&frame, FRONT_IFACE));
                    keys.push(key);
                }
            }
        }
        Stream { slots, keys, next: 0 }
    }

    /// Segment `segment` of TCP connections `first..first + n` (client `i`'s, as
    /// [`Kind::Syn`]'s; their tuples distinct from the active flows' when `first` is at or
    /// above 2^24) as a stream of `n` slots in order: one burst of torii-bench's
    /// connection-rate test ([`Handshake`]). The endpoint's segments need `replies`, where
    /// each connection's SYN went ([`Fixture::replies`]: `n` of them; ignored for the
    /// client's).
    ///
    /// # Panics
    /// If the fixture's flows are not TCP, or `replies` is short for an endpoint's segment.
    pub fn connection_stream(&self, segment: Handshake, first: u64, n: usize, replies: &[Active<A>]) -> Stream<A> {
        assert_eq!(self.transport, Transport::Tcp, "connections are TCP");
        let slots = (first..first + n as u64)
            .enumerate()
            .map(|(k, i)| {
                let (isn, isn_b) = tcp_isn(i);
                let (frame, iface) = match segment {
                    Handshake::Syn => (syn_frame::<A>(i).0, FRONT_IFACE),
                    Handshake::SynAck => (self.reply_frame(i, &replies[k], true), replies[k].link),
                    Handshake::Ack => (self.original_frame(i), FRONT_IFACE),
                    Handshake::Rst => {
                        let a = &replies[k];
                        let l2 = L2 { src: pod_mac(a.endpoint.0), dst: iface_mac(a.link.into()) };
                        let rst =
                            A::tcp(l2, a.endpoint, a.snat, TcpFlags::RST, isn_b.wrapping_add(1), isn.wrapping_add(1));
                        (rst, a.link)
                    }
                };
                Slot::new(A::BLANK, &frame, iface)
            })
            .collect();
        Stream { slots, keys: Vec::new(), next: 0 }
    }

    /// Where the gateway sent each SYN of the last burst of a [`Handshake::Syn`] stream of
    /// [`Fixture::connection_stream`] (the endpoint, SNAT address and port it chose), in
    /// order: what the endpoint's segments of those connections are addressed with.
    ///
    /// # Panics
    /// If a frame of the burst was not forwarded.
    pub fn replies(&self, burst: &Burst) -> Vec<Active<A>> {
        burst
            .verdicts
            .iter()
            .zip(&burst.bufs)
            .map(|(v, buf)| match *v {
                Verdict::Transmit { iface, len } => forwarded_to::<A>(self.transport, iface, &buf[..len]),
                other => panic!("SYN not forwarded: {other:?}"),
            })
            .collect()
    }

    /// Processes the next packet of `stream` in `buf` (a [`BUFFER_LEN`]-byte buffer), as a
    /// driver would hand it to the worker: what the benchmarks time.
    #[inline]
    pub fn process(&mut self, stream: &mut Stream<A>, buf: &mut [u8]) -> Verdict {
        let (meta, _) = stream.load(buf);
        pipeline::process(NOW_NS, buf, &meta, &self.gateway.table, &mut self.state)
    }

    /// Processes the next [`Burst::len`] packets of `stream` with `pipeline::process_burst`
    /// (hash and prefetch the whole burst, then process), as a DPDK worker hands over one
    /// receive burst; the verdicts are left in `burst`.
    #[inline]
    pub fn process_burst(&mut self, stream: &mut Stream<A>, burst: &mut Burst) {
        Self::load_burst(stream, burst);
        self.process_loaded(burst);
    }

    /// Copies the next [`Burst::len`] frames of `stream` into `burst`'s buffers with their
    /// metadata, as a device's DMA and its driver would leave them: the first half of
    /// [`process_burst`](Self::process_burst).
    #[inline]
    pub fn load_burst(stream: &mut Stream<A>, burst: &mut Burst) {
        for (buf, meta) in burst.bufs.iter_mut().zip(burst.metas.iter_mut()) {
            *meta = stream.load(buf).0;
        }
    }

    /// Processes the frames [`load_burst`](Self::load_burst) left in `burst` with
    /// `pipeline::process_burst`; the verdicts are left in `burst`.
    #[inline]
    pub fn process_loaded(&mut self, burst: &mut Burst) {
        pipeline::process_burst(
            NOW_NS,
            &mut burst.bufs,
            &burst.metas,
            &self.gateway.table,
            &mut self.state,
            &mut burst.verdicts,
        );
    }

    /// Removes the flow a SYN of `stream` created (slot `slot`), which frees its reply tuple, as
    /// expiry would (`pipeline::poll_expire`): keeps the active flows constant while new
    /// flows are measured. Returns false when there was no such flow.
    pub fn forget(&mut self, stream: &Stream<A>, slot: usize) -> bool {
        let Some(key) = stream.key(slot) else { return false };
        let conntrack = A::conntrack_mut(&mut self.state);
        let Some((id, _)) = conntrack.lookup(key) else { return false };
        conntrack.remove(id);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torii_gateway::counters::DropReason;

    fn forwarded<A: Family>(fx: &mut Fixture<A>, kind: Kind, packets: usize) -> (u64, u64) {
        let mut stream = fx.stream(kind, packets, 1);
        let mut buf = vec![0u8; BUFFER_LEN];
        let before = fx.state.counters.clone();
        for _ in 0..packets {
            let v = fx.process(&mut stream, &mut buf);
            assert!(matches!(v, Verdict::Transmit { .. }), "{kind:?}: {v:?}");
        }
        let c = &fx.state.counters;
        assert!(DropReason::ALL.iter().all(|&r| c.drops_of(r) == before.drops_of(r)));
        (
            c.new_flows - before.new_flows,
            c.forwarded_original + c.forwarded_reply - before.forwarded_original - before.forwarded_reply,
        )
    }

    fn established_streams_hit_active_flows_only<A: Family>() {
        let gw = Arc::new(Gateway::<A>::new());
        for transport in [Transport::Tcp, Transport::Udp] {
            let mut fx = Fixture::new(Arc::clone(&gw), transport, 300);
            assert_eq!(fx.conntrack().len(), 300);
            for kind in [Kind::Original, Kind::Reply] {
                assert_eq!(forwarded(&mut fx, kind, 1000), (0, 1000), "{transport:?} {kind:?}");
            }
            assert_eq!(fx.conntrack().len(), 300);
        }
    }

    #[test]
    fn established_streams_hit_active_flows_only_v4() {
        established_streams_hit_active_flows_only::<Ipv4Addr>();
    }

    #[test]
    fn established_streams_hit_active_flows_only_v6() {
        established_streams_hit_active_flows_only::<Ipv6Addr>();
    }

    fn bursts_forward_like_single_packets<A: Family>() {
        let gw = Arc::new(Gateway::<A>::new());
        let mut fx = Fixture::new(gw, Transport::Tcp, 200);
        let mut stream = fx.stream(Kind::Original, 256, 9);
        let mut burst = Burst::new(BURST);
        let before = fx.state.counters.clone();
        for _ in 0..8 {
            fx.process_burst(&mut stream, &mut burst);
            assert!(burst.verdicts.iter().all(|v| matches!(v, Verdict::Transmit { .. })), "{:?}", burst.verdicts);
        }
        assert_eq!(fx.state.counters.new_flows, before.new_flows);
        assert_eq!(fx.state.counters.forwarded_original, before.forwarded_original + 256);
    }

    #[test]
    fn bursts_forward_like_single_packets_v4() {
        bursts_forward_like_single_packets::<Ipv4Addr>();
    }

    #[test]
    fn bursts_forward_like_single_packets_v6() {
        bursts_forward_like_single_packets::<Ipv6Addr>();
    }

    fn syn_stream_opens_flows_that_forget_removes<A: Family>() {
        let gw = Arc::new(Gateway::<A>::new());
        let mut fx = Fixture::new(gw, Transport::Tcp, 100);
        let mut stream = fx.stream(Kind::Syn, 64, 0);
        // Twice round the ring: forgotten flows are new again.
        for _ in 0..2 {
            let mut buf = vec![0u8; BUFFER_LEN];
            for _ in 0..stream.len() {
                assert!(matches!(fx.process(&mut stream, &mut buf), Verdict::Transmit { .. }));
            }
            assert_eq!(fx.conntrack().len(), 164);
            for slot in 0..stream.len() {
                assert!(fx.forget(&stream, slot));
            }
            assert_eq!(fx.conntrack().len(), 100);
        }
        assert_eq!(fx.state.counters.new_flows, 100 + 128);
    }

    #[test]
    fn syn_stream_opens_flows_that_forget_removes_v4() {
        syn_stream_opens_flows_that_forget_removes::<Ipv4Addr>();
    }

    #[test]
    fn syn_stream_opens_flows_that_forget_removes_v6() {
        syn_stream_opens_flows_that_forget_removes::<Ipv6Addr>();
    }

    fn table_has_the_front_doors_and_pods_spread_over_links<A: Family>() {
        let spec = table_spec::<A>();
        assert_eq!(spec.frontends.len(), FRONT_DOORS);
        let vip: IpAddr = A::vip(0).into();
        let family = std::mem::discriminant(&vip);
        assert!(spec.frontends.iter().all(|f| std::mem::discriminant(&f.addr) == family), "one family only");
        let mut per_link = [0usize; BACK_LINKS];
        for p in 0..VIPS * ENDPOINTS {
            per_link[pod::<A>(p).0] += 1;
        }
        assert!(per_link.iter().all(|&n| n == VIPS * ENDPOINTS / BACK_LINKS));
    }

    #[test]
    fn table_has_the_front_doors_and_pods_spread_over_links_v4() {
        table_has_the_front_doors_and_pods_spread_over_links::<Ipv4Addr>();
    }

    #[test]
    fn table_has_the_front_doors_and_pods_spread_over_links_v6() {
        table_has_the_front_doors_and_pods_spread_over_links::<Ipv6Addr>();
    }

    /// Every frame is as long as its headers say and fits its slot: IPv6 frames are all
    /// [`FRAME_LEN6`]; IPv4 UDP datagrams fill [`FRAME_LEN`] and TCP segments (54 bytes)
    /// are padded to it in their slots.
    #[test]
    fn frames_have_the_family_length() {
        fn lens<A: Family>(transport: Transport) -> [usize; 2] {
            let fx = Fixture::new(Arc::new(Gateway::<A>::new()), transport, 1);
            [fx.original_frame(0).len(), fx.reply_frame(0, &fx.active[0], false).len()]
        }
        assert_eq!(lens::<Ipv6Addr>(Transport::Tcp), [FRAME_LEN6; 2]);
        assert_eq!(lens::<Ipv6Addr>(Transport::Udp), [FRAME_LEN6; 2]);
        assert_eq!(lens::<Ipv4Addr>(Transport::Tcp), [54; 2]);
        assert_eq!(lens::<Ipv4Addr>(Transport::Udp), [FRAME_LEN; 2]);
    }
}
