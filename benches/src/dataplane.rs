//! Workloads of the data-plane benchmarks (`benches/pipeline.rs`): a gateway with
//! [`FRONT_DOORS`] front doors and a worker whose conntrack already holds a given number
//! of active flows, all created by `pipeline::process` itself, and streams of frames to
//! push through it.
//!
//! # The gateway
//!
//! - [`VIPS`] VIPs `198.18.0.0 + v` (the benchmarking range of RFC 2544), each with two
//!   front doors: TCP 80 → 8080 and UDP 53 → 5353, each its own service (a Kubernetes
//!   Service port) with [`ENDPOINTS`] endpoints, so [`FRONT_DOORS`] front doors and as many
//!   Maglev rings (1021 slots each: `maglev::ring_size_for`), laid out by the gateway's
//!   table builder ([`torii_gateway::table::build`]) and validated by [`Table::new`].
//! - The endpoints of VIP `v` are the pods `10 v .. 10 v + 9`; pod `p` is on back link
//!   `p % BACK_LINKS` (subnet `10.(64 + link).0.0/16`), so [`VIPS`] × [`ENDPOINTS`] pods.
//!   Every pod's MAC address is pre-resolved in the shared neighbour table (as static
//!   entries, like the `[[neighbours]]` of the configuration), so no packet waits for ARP.
//! - Interface 0 faces the clients, who are behind a router (198.51.100.254, its MAC
//!   pre-resolved too: replies go to it); interfaces 1..=[`BACK_LINKS`] are the back links, each
//!   with its own SNAT address (`10.(64 + link).0.1`) and the full SNAT port range
//!   1024–65535. Why [`BACK_LINKS`] links: the gateway gives each egress interface one
//!   SNAT address and a SNAT port is unique per (address, protocol) whatever the endpoint
//!   (`torii_gateway::snat`), so one worker holds at most 64 512 TCP flows per back link;
//!   1 M flows need at least 16 links, and 20 keep each at about 50 000.
//!
//! # The flows
//!
//! Flow `i` (0-based) is client `100.64.0.0 + i / 64`, port `1024 + i % 64`
//! (RFC 6598 space; nothing is sent anywhere) to a pseudo-randomly chosen VIP. A
//! [`Fixture`] creates `flows` flows of one protocol through `pipeline::process`: for TCP
//! the whole handshake (SYN, the endpoint's SYN-ACK to the SNAT address and port the SYN
//! was given, the client's ACK), for UDP a datagram each way, so every flow is in its
//! established state with its long timeout, as the flows of a busy gateway are.
//!
//! # Streams
//!
//! A [`Stream`] is a ring of 64-byte slots, each one minimum-size frame (60 bytes plus the
//! interface it arrives on): a driver's receive buffers. The established streams pick a
//! pseudo-random active flow for every slot, so the conntrack is hit at random as real
//! traffic hits it, not the same cache-hot flow; with 1 M flows the ring is 1 Mi slots
//! (64 MiB, read sequentially like descriptor rings), long enough that the flows it touches
//! do not stay in the caches. The SYN stream carries a fresh tuple in every slot.
//! `pipeline::process` rewrites a frame in place, so every measured packet is first
//! copied from its slot into the working buffer ([`Stream::load`]); `frame_copy` in the
//! benchmarks measures that copy alone.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use torii_gateway::config::Config;
use torii_gateway::conntrack::FlowKey;
use torii_gateway::frames::{self, L2};
use torii_gateway::host::Host;
use torii_gateway::pipeline::{self, Meta, Shared, Verdict, WorkerState};
use torii_gateway::table::{self, BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec, Table, TableSpec};
use torii_gateway::wire::{Ipv4Packet, MacAddr, TcpFlags, TcpPacket, UdpPacket};

/// Front doors in the table (the 10 K).
pub const FRONT_DOORS: usize = 10_000;
/// VIPs: each has a TCP and a UDP front door.
pub const VIPS: usize = FRONT_DOORS / 2;
/// Endpoints per service.
pub const ENDPOINTS: usize = 10;
/// Back links (egress interfaces towards the pods), each with its own SNAT address.
pub const BACK_LINKS: usize = 20;
/// The clock of every benchmark packet, ns (flows are created at this time too).
pub const NOW_NS: u64 = 1_000_000_000;
/// Bytes of a minimum-size Ethernet frame without its FCS (a 64-byte frame on the wire).
pub const FRAME_LEN: usize = 60;
/// Size of the buffer frames are processed in (a driver's mbuf data room).
pub const BUFFER_LEN: usize = 2048;

const FRONT_IFACE: u8 = 0;
const TCP_PORT: u16 = 80;
const TCP_TARGET_PORT: u16 = 8080;
const UDP_PORT: u16 = 53;
const UDP_TARGET_PORT: u16 = 5353;
/// The router on the client-facing link, which the clients' packets come through.
const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 254);
/// The router's MAC: the source of every client frame.
const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0xc0, 0x01]);
const TTL: u8 = 64;
/// Where the flow numbers of SYN streams start: far above any fixture's active flows.
const FRESH_BASE: u64 = 1 << 24;

/// splitmix64: a cheap, well-mixed pseudo-random function of `x`.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn vip(v: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + v as u32)
}

/// Pod `p`: (back link, address, MAC).
fn pod(p: usize) -> (usize, Ipv4Addr, MacAddr) {
    let link = p % BACK_LINKS;
    let host = (p / BACK_LINKS + 2) as u16; // .0.0 is the network, .0.1 the gateway
    let [hi, lo] = host.to_be_bytes();
    let addr = Ipv4Addr::new(10, 64 + link as u8, hi, lo);
    (link, addr, pod_mac(addr))
}

/// A pod's MAC address: `02:0a` and the last three bytes of its address.
fn pod_mac(addr: Ipv4Addr) -> MacAddr {
    let o = addr.octets();
    MacAddr([0x02, 0x0a, o[1], o[2], o[3], 0x01])
}

fn iface_mac(iface: usize) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0xf0, iface as u8])
}

/// The client address and port of flow `i`, and the VIP it goes to.
fn client(i: u64) -> (SocketAddrV4, usize) {
    let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)).wrapping_add((i / 64) as u32));
    (SocketAddrV4::new(addr, 1024 + (i % 64) as u16), (mix(i) % VIPS as u64) as usize)
}

/// The gateway's configuration: one client-facing link and [`BACK_LINKS`] back links,
/// one SNAT address each, default conntrack timeouts.
pub fn config() -> Config {
    let mut toml = String::from("node_name = \"bench-gw\"\nworkers = 1\n");
    toml.push_str("[[interfaces]]\nname = \"front\"\naddresses = [\"198.51.100.1/24\"]\n");
    toml.push_str(&format!("[router]\naddress = \"{ROUTER}\"\ninterface = \"front\"\n"));
    let mut snat = Vec::new();
    for link in 0..BACK_LINKS {
        let gw = Ipv4Addr::new(10, 64 + link as u8, 0, 1);
        toml.push_str(&format!("[[interfaces]]\nname = \"back{link:02}\"\naddresses = [\"{gw}/16\"]\n"));
        snat.push(format!("\"{gw}\""));
    }
    toml.push_str(&format!("[snat]\naddresses = [{}]\nport_min = 1024\nport_max = 65535\n", snat.join(", ")));
    Config::from_toml(&toml).expect("the benchmark configuration is valid")
}

/// The table: [`VIPS`] VIPs × (TCP 80, UDP 53), [`ENDPOINTS`] endpoints per service.
pub fn table_spec() -> TableSpec {
    let mut spec = TableSpec::default();
    for v in 0..VIPS {
        let backends = |port| (0..ENDPOINTS).map(move |j| BackendSpec { addr: pod(v * ENDPOINTS + j).1.into(), port });
        for (protocol, port, target, name) in
            [(Protocol::Tcp, TCP_PORT, TCP_TARGET_PORT, "http"), (Protocol::Udp, UDP_PORT, UDP_TARGET_PORT, "dns")]
        {
            spec.frontends.push(FrontendSpec {
                addr: vip(v).into(),
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

/// What every fixture shares: the host, the table and the neighbour table.
pub struct Gateway {
    /// The host view of [`config`].
    pub host: Arc<Host>,
    /// The validated table of [`table_spec`].
    pub table: Table,
    /// Neighbours (every pod, static) and the affinity table.
    pub shared: Shared,
}

impl Gateway {
    /// Builds the table and resolves every pod.
    ///
    /// # Panics
    /// If the table does not build or validate (a bug).
    pub fn new() -> Self {
        let config = config();
        let macs: Vec<MacAddr> = (0..config.interfaces.len()).map(iface_mac).collect();
        let host = Arc::new(Host::new(&config, &macs));
        let bytes = table::build(&table_spec(), 1).expect("the benchmark table builds");
        let table = Table::new(table::Storage::Owned(bytes)).expect("the benchmark table validates");
        let pods = VIPS * ENDPOINTS;
        let shared = Shared::new(pods + 1, 1024);
        assert!(shared.neighbours.learn(ROUTER, CLIENT_MAC, u64::MAX), "neighbour table full");
        for p in 0..pods {
            let (_, addr, mac) = pod(p);
            assert!(shared.neighbours.learn(addr, mac, u64::MAX), "neighbour table full");
        }
        Self { host, table, shared }
    }
}

impl Default for Gateway {
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

/// One active flow as the pipeline set it up: its back link and the reply tuple.
#[derive(Clone, Copy, Debug)]
struct Active {
    link: u8,
    endpoint: SocketAddrV4,
    snat: SocketAddrV4,
}

/// A worker with `flows` active flows of one transport.
pub struct Fixture {
    /// The shared gateway.
    pub gateway: Arc<Gateway>,
    /// The worker's state.
    pub state: WorkerState,
    transport: Transport,
    active: Vec<Active>,
    buf: Box<[u8]>,
}

/// One 64-byte receive slot: a frame and the interface it arrives on.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Slot {
    frame: [u8; FRAME_LEN],
    iface: u8,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

impl Slot {
    fn new(frame: &[u8], iface: u8) -> Self {
        let mut s = Slot { frame: [0; FRAME_LEN], iface };
        s.frame[..frame.len()].copy_from_slice(frame);
        s
    }
}

/// A ring of receive slots (see the module documentation).
pub struct Stream {
    slots: Vec<Slot>,
    /// The original tuple of each slot's packet (SYN streams only: to forget the flows).
    keys: Vec<FlowKey>,
    next: usize,
}

impl Stream {
    /// Slots in the ring.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the ring is empty (never, for streams a [`Fixture`] makes).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Copies the next slot's frame into `buf` (at least [`FRAME_LEN`] bytes) and returns
    /// its metadata and the slot's index; the ring wraps around.
    #[inline]
    pub fn load(&mut self, buf: &mut [u8]) -> (Meta, usize) {
        let i = self.next;
        self.next = if i + 1 == self.slots.len() { 0 } else { i + 1 };
        let slot = &self.slots[i];
        buf[..FRAME_LEN].copy_from_slice(&slot.frame);
        (Meta { iface: slot.iface, len: FRAME_LEN, ..Meta::default() }, i)
    }

    /// The index of the slot [`load`](Self::load) copies next.
    pub fn position(&self) -> usize {
        self.next
    }

    /// The original tuple of slot `i`'s packet (SYN streams; `None` otherwise).
    pub fn key(&self, i: usize) -> Option<&FlowKey> {
        self.keys.get(i)
    }
}

/// Packets per burst in the burst benchmarks (a DPDK receive burst).
pub const BURST: usize = 32;

/// The buffers, metadata and verdicts of one receive burst.
pub struct Burst {
    bufs: Vec<Vec<u8>>,
    metas: [Meta; BURST],
    /// What became of each frame of the last burst.
    pub verdicts: [Verdict; BURST],
}

impl Burst {
    /// [`BURST`] buffers of [`BUFFER_LEN`] bytes.
    pub fn new() -> Self {
        Self {
            bufs: vec![vec![0; BUFFER_LEN]; BURST],
            metas: [Meta::default(); BURST],
            verdicts: [Verdict::Consumed; BURST],
        }
    }
}

impl Default for Burst {
    fn default() -> Self {
        Self::new()
    }
}

fn tcp_isn(i: u64) -> (u32, u32) {
    let h = mix(i ^ 0x7463_7000);
    (h as u32, (h >> 32) as u32)
}

fn udp_payload() -> [u8; FRAME_LEN - 42] {
    [0x5a; FRAME_LEN - 42]
}

impl Fixture {
    /// A worker (index 0 of 1) whose conntrack has room for `flows` plus a quarter (a
    /// gateway at 80 % of its configured flows, and room for the SYN benchmark's batches),
    /// with `flows` active flows of `transport` created through `pipeline::process`.
    ///
    /// # Panics
    /// If the pipeline does not forward a setup packet (a bug, or too many flows for the
    /// SNAT ports of [`BACK_LINKS`] links).
    pub fn new(gateway: Arc<Gateway>, transport: Transport, flows: usize) -> Self {
        let capacity = flows + flows / 4 + 4096;
        let state = WorkerState::new(0, 1, Arc::clone(&gateway.host), &gateway.shared, capacity, 0x5eed);
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

    /// Runs `pipeline::process` on `frame` (padded to [`FRAME_LEN`]) arriving on `iface`
    /// and returns the egress interface and the transmitted frame.
    fn run(&mut self, frame: &[u8], iface: u8) -> (u8, &[u8]) {
        self.buf[..FRAME_LEN].fill(0);
        self.buf[..frame.len()].copy_from_slice(frame);
        let meta = Meta { iface, len: frame.len().max(FRAME_LEN), ..Meta::default() };
        match pipeline::process(NOW_NS, &mut self.buf, &meta, &self.gateway.table, &mut self.state) {
            Verdict::Transmit { iface, len } => (iface, &self.buf[..len]),
            v => panic!("setup packet not forwarded: {v:?}"),
        }
    }

    /// Opens flow `i`: TCP handshake or a UDP datagram each way. Returns its reply side.
    fn open(&mut self, i: u64) -> Active {
        let transport = self.transport;
        let (c, v) = client(i);
        let to_gw = L2 { src: CLIENT_MAC, dst: iface_mac(FRONT_IFACE.into()) };
        let first = match transport {
            Transport::Tcp => {
                let (isn, _) = tcp_isn(i);
                frames::tcp(to_gw, (*c.ip(), c.port()), (vip(v), TCP_PORT), TcpFlags::SYN, isn, 0, &[], TTL)
            }
            Transport::Udp => frames::udp(to_gw, (*c.ip(), c.port()), (vip(v), UDP_PORT), &udp_payload(), TTL),
        };
        let (link, out) = self.run(&first, FRONT_IFACE);
        let ip = Ipv4Packet::new_checked(&out[14..]).expect("forwarded IPv4");
        let (snat_addr, endpoint_addr) = (ip.src_addr(), ip.dst_addr());
        let l4 = ip.payload();
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
        let active = Active {
            link,
            endpoint: SocketAddrV4::new(endpoint_addr, endpoint_port),
            snat: SocketAddrV4::new(snat_addr, snat_port),
        };
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
        let (c, v) = client(i);
        let to_gw = L2 { src: CLIENT_MAC, dst: iface_mac(FRONT_IFACE.into()) };
        match self.transport {
            Transport::Tcp => {
                let (isn, isn_b) = tcp_isn(i);
                let (seq, ack) = (isn.wrapping_add(1), isn_b.wrapping_add(1));
                frames::tcp(to_gw, (*c.ip(), c.port()), (vip(v), TCP_PORT), TcpFlags::ACK, seq, ack, &[], TTL)
            }
            Transport::Udp => frames::udp(to_gw, (*c.ip(), c.port()), (vip(v), UDP_PORT), &udp_payload(), TTL),
        }
    }

    /// The endpoint's packet of flow `i`: for TCP the SYN-ACK (`first`) or an ACK after the
    /// handshake; for UDP a datagram.
    fn reply_frame(&self, i: u64, a: &Active, first: bool) -> Vec<u8> {
        let l2 = L2 { src: pod_mac(*a.endpoint.ip()), dst: iface_mac(a.link.into()) };
        let (src, dst) = ((*a.endpoint.ip(), a.endpoint.port()), (*a.snat.ip(), a.snat.port()));
        match self.transport {
            Transport::Tcp => {
                let (isn, isn_b) = tcp_isn(i);
                let (flags, seq) = if first {
                    (TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0), isn_b)
                } else {
                    (TcpFlags::ACK, isn_b.wrapping_add(1))
                };
                frames::tcp(l2, src, dst, flags, seq, isn.wrapping_add(1), &[], TTL)
            }
            Transport::Udp => frames::udp(l2, src, dst, &udp_payload(), TTL),
        }
    }

    /// A stream of `len` slots of `kind` (see the module documentation); established kinds
    /// pick a flow pseudo-randomly (seeded by `seed`) for each slot.
    ///
    /// # Panics
    /// If `kind` is [`Kind::Syn`] on a UDP fixture, or the fixture has no flows.
    pub fn stream(&self, kind: Kind, len: usize, seed: u64) -> Stream {
        let mut slots = Vec::with_capacity(len);
        let mut keys = Vec::new();
        let n = self.active.len() as u64;
        for j in 0..len as u64 {
            let pick = || mix(seed ^ mix(j)) % n;
            match kind {
                Kind::Original => slots.push(Slot::new(&self.original_frame(pick()), FRONT_IFACE)),
                Kind::Reply => {
                    let i = pick();
                    let a = &self.active[i as usize];
                    slots.push(Slot::new(&self.reply_frame(i, a, false), a.link));
                }
                Kind::Syn => {
                    assert_eq!(self.transport, Transport::Tcp, "SYN streams are TCP");
                    let i = FRESH_BASE + j;
                    let (c, v) = client(i);
                    let to_gw = L2 { src: CLIENT_MAC, dst: iface_mac(FRONT_IFACE.into()) };
                    let (isn, _) = tcp_isn(i);
                    let (src, dst) = ((*c.ip(), c.port()), (vip(v), TCP_PORT));
                    slots.push(Slot::new(&frames::tcp(to_gw, src, dst, TcpFlags::SYN, isn, 0, &[], TTL), FRONT_IFACE));
                    keys.push(FlowKey {
                        protocol: 6,
                        src_addr: src.0,
                        src_port: src.1,
                        dst_addr: dst.0,
                        dst_port: dst.1,
                    });
                }
            }
        }
        Stream { slots, keys, next: 0 }
    }

    /// Processes the next packet of `stream` in `buf` (a [`BUFFER_LEN`]-byte buffer), as a
    /// driver would hand it to the worker: what the benchmarks time.
    #[inline]
    pub fn process(&mut self, stream: &mut Stream, buf: &mut [u8]) -> Verdict {
        let (meta, _) = stream.load(buf);
        pipeline::process(NOW_NS, buf, &meta, &self.gateway.table, &mut self.state)
    }

    /// Processes the next [`BURST`] packets of `stream` with `pipeline::process_burst`
    /// (hash and prefetch the whole burst, then process), as a DPDK worker hands over one
    /// receive burst; the verdicts are left in `burst`.
    #[inline]
    pub fn process_burst(&mut self, stream: &mut Stream, burst: &mut Burst) {
        for (buf, meta) in burst.bufs.iter_mut().zip(burst.metas.iter_mut()) {
            *meta = stream.load(buf).0;
        }
        pipeline::process_burst(
            NOW_NS,
            &mut burst.bufs,
            &burst.metas,
            &self.gateway.table,
            &mut self.state,
            &mut burst.verdicts,
        );
    }

    /// Removes the flow a SYN of `stream` created (slot `slot`) and frees its SNAT port, as
    /// expiry would (`pipeline::poll_expire`): keeps the active flows constant while new
    /// flows are measured. Returns false when there was no such flow.
    pub fn forget(&mut self, stream: &Stream, slot: usize) -> bool {
        let Some(key) = stream.key(slot) else { return false };
        let Some((id, _)) = self.state.conntrack.lookup(key) else { return false };
        let flow = self.state.conntrack.remove(id);
        let host = &self.state.host;
        let Some(address) = host.snat_addresses.iter().position(|a| *a == flow.reply.dst_addr) else { return false };
        self.state.snat.free(address, flow.reply.protocol, flow.reply.dst_port);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torii_gateway::counters::DropReason;

    fn forwarded(fx: &mut Fixture, kind: Kind, packets: usize) -> (u64, u64) {
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

    #[test]
    fn established_streams_hit_active_flows_only() {
        let gw = Arc::new(Gateway::new());
        for transport in [Transport::Tcp, Transport::Udp] {
            let mut fx = Fixture::new(Arc::clone(&gw), transport, 300);
            assert_eq!(fx.state.conntrack.len(), 300);
            for kind in [Kind::Original, Kind::Reply] {
                assert_eq!(forwarded(&mut fx, kind, 1000), (0, 1000), "{transport:?} {kind:?}");
            }
            assert_eq!(fx.state.conntrack.len(), 300);
        }
    }

    #[test]
    fn bursts_forward_like_single_packets() {
        let gw = Arc::new(Gateway::new());
        let mut fx = Fixture::new(gw, Transport::Tcp, 200);
        let mut stream = fx.stream(Kind::Original, 256, 9);
        let mut burst = Burst::new();
        let before = fx.state.counters.clone();
        for _ in 0..8 {
            fx.process_burst(&mut stream, &mut burst);
            assert!(burst.verdicts.iter().all(|v| matches!(v, Verdict::Transmit { .. })), "{:?}", burst.verdicts);
        }
        assert_eq!(fx.state.counters.new_flows, before.new_flows);
        assert_eq!(fx.state.counters.forwarded_original, before.forwarded_original + 256);
    }

    #[test]
    fn syn_stream_opens_flows_that_forget_removes() {
        let gw = Arc::new(Gateway::new());
        let mut fx = Fixture::new(gw, Transport::Tcp, 100);
        let mut stream = fx.stream(Kind::Syn, 64, 0);
        // Twice round the ring: forgotten flows are new again.
        for _ in 0..2 {
            let mut buf = vec![0u8; BUFFER_LEN];
            for _ in 0..stream.len() {
                assert!(matches!(fx.process(&mut stream, &mut buf), Verdict::Transmit { .. }));
            }
            assert_eq!(fx.state.conntrack.len(), 164);
            for slot in 0..stream.len() {
                assert!(fx.forget(&stream, slot));
            }
            assert_eq!(fx.state.conntrack.len(), 100);
        }
        assert_eq!(fx.state.counters.new_flows, 100 + 128);
    }

    #[test]
    fn table_has_the_front_doors_and_pods_spread_over_links() {
        let spec = table_spec();
        assert_eq!(spec.frontends.len(), FRONT_DOORS);
        let mut per_link = [0usize; BACK_LINKS];
        for p in 0..VIPS * ENDPOINTS {
            per_link[pod(p).0] += 1;
        }
        assert!(per_link.iter().all(|&n| n == VIPS * ENDPOINTS / BACK_LINKS));
    }
}
