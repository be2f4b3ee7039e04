//! The test network torii-bench plays, as pure data: who the clients, the VIPs and the
//! endpoints are, the manifests and the gateway configuration that make torii serve
//! them, the frames the clients send, and how a frame coming back is recognised and
//! checked. Nothing here does I/O; `traffic` puts it on a DPDK port, `dut` starts the
//! processes.
//!
//! # Addresses (one-armed: one link carries both sides)
//!
//! - The gateway: MAC [`GATEWAY_MAC`] (set on its `net_virtio_user` device), addresses
//!   198.18.0.1/15 (the clients' subnet, RFC 2544's benchmarking range) and 10.70.0.1/16 (the endpoints' subnet, also
//!   the SNAT address, ports 1024–65535).
//! - Client flow `i`: host 198.18.0.0 + 10 + i / 50 000 (336 hosts for 16 M flows), source
//!   port 10 000 + i % 50 000,
//!   MAC [`CLIENT_MAC`], to Service `i % services`.
//! - Service `s`: VIP 203.0.113.(10 + s), UDP port 7 → `targetPort` 7007 and TCP port
//!   80 → 8080, `endpoints` ready endpoints; endpoint `k = s × endpoints + j` is 10.70.(1 + k / 250).(2 + k %
//!   250), MAC 02:00:0a:46 followed by its last two address bytes.
//!
//! IPv6 ([`Family::Ipv6`]) mirrors this: the clients' subnet 2001:2::/48 (the IPv6
//! benchmarking prefix of RFC 5180, as its erratum 1752 corrects it; the gateway 2001:2::1,
//! client host `h` 2001:2::`h`), VIP
//! 2001:db8:203::(10 + s) (the documentation prefix, as the demo's), endpoint `k`
//! fd00:70::(1 + k / 250):(2 + k % 250) with the same MAC as its IPv4 twin, the gateway and
//! SNAT address fd00:70::1/64. The Services are then dual-stack (both families' ClusterIPs,
//! externalIPs and EndpointSlices), and torii-bench answers the gateway's Neighbor
//! Solicitations for the addresses it plays as it answers ARP.
//!
//! Two-armed ([`Plan::two_armed`]): the clients' subnets are on the gateway's front link
//! (MAC [`GATEWAY_MAC`]), the endpoints' on its back link (MAC [`GATEWAY_BACK_MAC`]), each a
//! `net_virtio_user` device of its own facing a `net_vhost` port of torii-bench's.
//!
//! Every address is in a documentation, benchmarking or private range and exists only on
//! the kernel-free vhost-user link.
//!
//! # Probes
//!
//! UDP (18 bytes of payload at 64-byte frames):
//!
//! | bytes of the payload | field |
//! |-------|-------|
//! | 0..4  | [`MAGIC`] |
//! | 4..8  | flow index, big-endian |
//! | 8..10 | trial number, big-endian |
//! | 10..18 | transmit time, ns since the generator started, big-endian |
//!
//! TCP (a 20-byte header and 6 bytes of payload at 64-byte frames): the payload is
//! [`MAGIC`] and the trial number; the sequence number carries the flow index and the
//! acknowledgment number the low 32 bits of the transmit time. The numbers are not a real
//! byte stream, so the gateway runs with `[conntrack] tcp_be_liberal = true` (Linux's
//! `nf_conntrack_tcp_be_liberal`): it tracks states by flags and does not drop segments
//! outside the sequence windows (it still tracks them), and the endpoints torii-bench
//! plays never check them.
//! Every flow is opened with a real handshake through the gateway first (SYN; SYN-ACK
//! from the endpoint; ACK), then carries `ACK|PSH` data segments both ways.
//!
//! Over IPv6 the same fields follow a 40-byte header, so the smallest IPv6 probe is an
//! 84-byte frame ([`MIN_FRAME_SIZE_IPV6`]); a smaller `frame_size` is raised to it for
//! IPv6 (the result names the size that ran).
//!
//! Each flow's template carries zero in the trial and time fields, so stamping a
//! frame updates the UDP or TCP checksum incrementally ([RFC 1624 § 3], eqn. 3) with the
//! sum of the stamped words.
//!
//! [RFC 1624 § 3]: https://www.rfc-editor.org/rfc/rfc1624#section-3

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use torii_gateway::frames::{self, L2};
use torii_gateway::wire::{EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, MacAddr, TcpFlags, TcpPacket, UdpPacket};

/// The gateway's MAC address (given to its `net_virtio_user` device; two-armed: to its
/// front device, facing the clients).
pub const GATEWAY_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
/// Two-armed: the MAC address of the gateway's back device, facing the endpoints.
pub const GATEWAY_BACK_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);
/// The gateway's address on the clients' subnet (198.18.0.0/15, RFC 2544's benchmarking
/// range, which holds the 336 client hosts of 16 M flows).
pub const GATEWAY_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The clients' subnet as the gateway's interface address: [`GATEWAY_CLIENT_IP`]/15.
pub const GATEWAY_CLIENT_PREFIX: &str = "198.18.0.1/15";
/// First address of the clients' subnet.
const CLIENT_NET: u32 = u32::from_be_bytes([198, 18, 0, 0]);
/// The gateway's address on the endpoints' subnet, and its SNAT address.
pub const SNAT_IP: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);
/// The gateway's IPv6 address on the endpoints' subnet fd00:70::/64, and its IPv6 SNAT
/// address.
pub const SNAT_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, 1);
/// The IPv6 clients' subnet as the gateway's interface address (2001:2::/48, the IPv6
/// benchmarking prefix of RFC 5180 as its erratum 1752 corrects it).
pub const GATEWAY_CLIENT_PREFIX6: &str = "2001:2::1/48";
/// First address of the IPv6 clients' subnet.
const CLIENT_NET6: u128 = 0x2001_0002_0000_0000_0000_0000_0000_0000;
/// Lowest SNAT port the gateway may choose.
pub const SNAT_PORT_MIN: u16 = 1024;
/// Every client's MAC address.
pub const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
/// The Services' UDP port.
pub const VIP_PORT: u16 = 7;
/// The endpoints' UDP port (`targetPort`).
pub const ENDPOINT_PORT: u16 = 7007;
/// The Services' TCP port.
pub const VIP_TCP_PORT: u16 = 80;
/// The endpoints' TCP port (`targetPort`).
pub const ENDPOINT_TCP_PORT: u16 = 8080;
/// First bytes of every probe payload: "tRB1".
pub const MAGIC: [u8; 4] = *b"tRB1";
/// Client flows per client host.
pub const FLOWS_PER_HOST: u32 = 50_000;
/// First client source port.
pub const FIRST_CLIENT_PORT: u16 = 10_000;
/// Most flows torii-bench drives (its templates take `flows` × frame bytes).
pub const MAX_FLOWS: u32 = 16 << 20;
/// Simple IMIX (the 7:4:1 mix of 64-, 594- and 1518-byte frames; RFC 6985 § 4 names IMIX
/// profiles): flow `i`'s frames are `IMIX[i % 12]` bytes on the wire, FCS included.
pub const IMIX: [usize; 12] = [64, 64, 64, 64, 64, 64, 64, 594, 594, 594, 594, 1518];

/// Most memory the generator's frame templates (one per flow) may take: 16 M flows of
/// 64-byte frames.
pub const MAX_TEMPLATE_BYTES: u64 = 1 << 30;
/// Most flows through one SNAT address when the gateway's SNAT port is unique per flow:
/// it has 64 512 ports (1024–65535), and some are left free.
pub const FLOWS_PER_SNAT_ADDRESS: u32 = 64_000;
/// Descriptors of each virtio ring by default (`net_virtio_user`'s `queue_size`, and the
/// devices' receive and transmit descriptors; `--queue-size`). Its default, 256, turns
/// every short preemption of either side's core into loss: the ring holds what arrives
/// while the other side is not polling (4096 descriptors: 2 ms of 2 M frames/s; DPDK
/// 22.11's `net_virtio_user` and `net_vhost` take it, and on a loaded 2-core machine it cut
/// the loss of both devices at a fixed low rate compared with 1024 — docs/benchmarking.md).
pub const VIRTIO_QUEUE_SIZE: u16 = 4096;
/// Which of DPDK's virtio paths the devices under test (torii's and testpmd's
/// `net_virtio_user`) take — named for the receive side, which decides it, though the
/// packed rings change the transmit path too: the same for both devices, so that io-fwd
/// stays torii's ceiling (`--virtio-rx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
pub enum VirtioRx {
    /// Receive checksum offload asked for (`VIRTIO_NET_F_GUEST_CSUM` negotiated), with
    /// mergeable buffers and in-order rings (DPDK 22.11's defaults): the in-order receive
    /// path.
    Offload,
    /// No receive offload, no mergeable buffers, no in-order rings and `vectorized=1`:
    /// DPDK's vectorised (SSE) split-ring receive path, which the three others rule out.
    Vectorized,
    /// Packed rings (`packed_vq=1`), in order, without mergeable buffers, `vectorized=1`
    /// and AVX-512 allowed (`--force-max-simd-bitwidth=512`): DPDK's vectorised packed-ring
    /// receive and transmit paths, which keep receive checksum offload (an x86 CPU
    /// without AVX-512F, or a DPDK built without it, falls back to the scalar packed path).
    Packed,
}

impl VirtioRx {
    /// What to append to a `net_virtio_user` device's arguments.
    pub fn devargs(self) -> &'static str {
        match self {
            VirtioRx::Offload => "",
            VirtioRx::Vectorized => ",mrg_rxbuf=0,in_order=0,vectorized=1",
            VirtioRx::Packed => ",packed_vq=1,in_order=1,mrg_rxbuf=0,vectorized=1",
        }
    }

    /// EAL arguments the device's process needs besides its own.
    pub fn eal_args(self) -> &'static [&'static str] {
        match self {
            VirtioRx::Packed => &["--force-max-simd-bitwidth=512"],
            VirtioRx::Offload | VirtioRx::Vectorized => &[],
        }
    }

    /// Whether the device asks for receive checksum offload (torii-gateway's
    /// `dpdk.rx_checksum_offload`; testpmd's `--rx-offloads`, UDP and TCP: `0xc`).
    pub fn checksum_offload(self) -> bool {
        self != VirtioRx::Vectorized
    }
}

/// Most Services (VIPs 203.0.113.10–.249).
pub const MAX_SERVICES: u32 = 240;

/// Offset of the UDP payload in an untagged IPv4 frame with a 20-byte header.
pub const PAYLOAD_OFFSET: usize = 14 + 20 + 8;
/// Bytes of the UDP probe payload.
pub const PROBE_LEN: usize = 18;
/// Offset of the TCP payload (20-byte IPv4 and TCP headers).
pub const TCP_PAYLOAD_OFFSET: usize = 14 + 20 + 20;
/// Bytes of the TCP probe payload.
pub const TCP_PROBE_LEN: usize = 6;
// Offsets in the TCP header ([`l4_offset`] gives where it starts).
const TCP_SEQ: usize = 4;
const TCP_ACK: usize = 8;
const TCP_FLAGS_WORD: usize = 12;
const TCP_CSUM: usize = 16;
const TCP_PAYLOAD: usize = 20;
// Offsets in the UDP header.
const UDP_CSUM: usize = 6;
const UDP_PAYLOAD: usize = 8;
/// Smallest frame on the wire, FCS included (RFC 2544 § 9.1).
pub const MIN_FRAME_SIZE: usize = 64;
/// Smallest IPv6 probe on the wire, FCS included: 14 + 40 (IPv6) + 8 (UDP) + the 18-byte
/// probe + 4, or 14 + 40 + 20 (TCP) + 6 + 4. A 64-byte frame cannot hold an IPv6 header,
/// a UDP header and the probe.
pub const MIN_FRAME_SIZE_IPV6: usize = 84;
/// Largest frame size accepted (a standard Ethernet frame, FCS included).
pub const MAX_FRAME_SIZE: usize = 1518;

/// What is being tested, which decides what a frame coming back should look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dut {
    /// torii-gateway: requests come back translated (SNAT → endpoint), replies translated
    /// back (VIP → client).
    Torii,
    /// testpmd's io forwarding: every frame comes back unchanged.
    IoFwd,
    /// The Linux kernel with kube-proxy's nftables rules ([`crate::kernel`]): translated
    /// like torii (DNAT, masquerade to the SNAT address).
    Kernel,
    /// torii-gateway on its own AF_PACKET driver, on a veth pair like the kernel's.
    ToriiAfPacket,
}

impl Dut {
    /// The name used in results.
    pub fn name(self) -> &'static str {
        match self {
            Dut::Torii => "torii",
            Dut::IoFwd => "io-fwd",
            Dut::Kernel => "nftables",
            Dut::ToriiAfPacket => "torii-af-packet",
        }
    }
}

/// The IP family of a workload's flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// IPv4 clients, VIPs and endpoints.
    Ipv4,
    /// IPv6 clients, VIPs and endpoints (dual-stack Services).
    Ipv6,
}

impl Family {
    /// The name used in results.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        }
    }
}

/// Offset of the L4 header in a frame torii-bench sends or receives: after the Ethernet
/// header and a 20-byte IPv4 or a 40-byte IPv6 header (no options, no extension headers).
#[inline]
pub fn l4_offset(frame: &[u8]) -> usize {
    if frame[12] == 0x86 {
        14 + 40
    } else {
        14 + 20
    }
}

/// The transport protocol of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// UDP datagrams (a flow exists from its first datagram).
    Udp,
    /// TCP: a handshake per flow, then data segments.
    Tcp,
}

impl Protocol {
    /// The name used in results.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Udp => "udp",
            Protocol::Tcp => "tcp",
        }
    }
}

/// What a TCP segment of the benchmark is, by its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Not TCP (a UDP probe).
    Datagram,
    /// A SYN (handshake, client → endpoint).
    Syn,
    /// A SYN-ACK (handshake, endpoint → client).
    SynAck,
    /// A bare ACK (the handshake's last segment).
    Ack,
    /// A data segment (`ACK|PSH`).
    Data,
    /// A RST (the endpoint closing the connection, [`to_rst`]).
    Rst,
    /// Any other combination of flags.
    Other,
}

impl Segment {
    fn of_flags(flags: u8) -> Self {
        match flags & 0x1f {
            0x02 => Segment::Syn,
            0x12 => Segment::SynAck,
            0x10 => Segment::Ack,
            0x18 => Segment::Data,
            0x04 => Segment::Rst,
            _ => Segment::Other,
        }
    }

    /// The flags byte of this kind of segment.
    pub fn flags(self) -> u8 {
        match self {
            Segment::Syn => 0x02,
            Segment::SynAck => 0x12,
            Segment::Ack => 0x10,
            Segment::Rst => 0x04,
            Segment::Data | Segment::Datagram | Segment::Other => 0x18,
        }
    }
}

/// The shape of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    /// Transport protocol.
    pub protocol: Protocol,
    /// Client flows (distinct 5-tuples).
    pub flows: u32,
    /// Services (VIPs).
    pub services: u32,
    /// Ready endpoints per Service.
    pub endpoints: u32,
    /// Frame size on the wire in bytes, FCS included (the frame handed to the port is 4
    /// bytes shorter); with `imix`, the largest of [`IMIX`].
    pub frame_size: usize,
    /// Whether flows' frames follow [`IMIX`] instead of one size.
    pub imix: bool,
    /// Whether the gateway's SNAT ports need only be unique per endpoint (address and
    /// port; RFC 4787's endpoint-dependent mapping, as Linux's NAT), which lets flows
    /// exceed [`FLOWS_PER_SNAT_ADDRESS`] across many endpoints.
    pub snat_per_endpoint: bool,
    /// IP family of the flows ([`Plan::with_family`]).
    pub family: Family,
    /// Whether the clients and the endpoints are on two links (the gateway's front and
    /// back devices) instead of one.
    pub two_armed: bool,
}

/// A [`Plan`] that cannot be run, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// Too many or no flows.
    #[error(
        "--flows {0}: must be 1..={1}: one SNAT address gives the gateway 64 512 ports, per endpoint with \
         --snat-per-endpoint (then at most {FLOWS_PER_SNAT_ADDRESS}/2 flows per endpoint, the choice being random), \
         and at most {MAX_FLOWS}"
    )]
    Flows(u32, u32),
    /// Too many or no Services.
    #[error("--services {0}: must be 1..={MAX_SERVICES} (one VIP each in 203.0.113.0/24)")]
    Services(u32),
    /// Too many or no endpoints.
    #[error("--endpoints {0}: must be 1..=1000 per Service, and services × endpoints at most 60 000")]
    Endpoints(u32),
    /// Frame size out of range.
    #[error("--frame-size {0}: must be {MIN_FRAME_SIZE}..={MAX_FRAME_SIZE} bytes (FCS included)")]
    FrameSize(usize),
    /// The flows' frame templates would not fit in [`MAX_TEMPLATE_BYTES`].
    #[error("--flows × --frame-size: the frame templates would take {0} bytes, more than {MAX_TEMPLATE_BYTES}")]
    Templates(u64),
}

impl Plan {
    /// Checks the plan's ranges.
    ///
    /// # Errors
    /// The first knob out of range.
    pub fn new(
        protocol: Protocol,
        flows: u32,
        services: u32,
        endpoints: u32,
        frame_size: Option<usize>,
        snat_per_endpoint: bool,
    ) -> Result<Self, PlanError> {
        // None: IMIX, laid out at its largest size.
        let (frame_size, imix) = match frame_size {
            Some(size) => (size, false),
            None => (MAX_FRAME_SIZE, true),
        };
        let most = if snat_per_endpoint {
            (FLOWS_PER_SNAT_ADDRESS / 2).saturating_mul(services.saturating_mul(endpoints)).min(MAX_FLOWS)
        } else {
            FLOWS_PER_SNAT_ADDRESS
        };
        if flows == 0 || flows > most {
            return Err(PlanError::Flows(flows, most));
        }
        if services == 0 || services > MAX_SERVICES {
            return Err(PlanError::Services(services));
        }
        if endpoints == 0 || endpoints > 1000 || services * endpoints > 60_000 {
            return Err(PlanError::Endpoints(endpoints));
        }
        if !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&frame_size) {
            return Err(PlanError::FrameSize(frame_size));
        }
        let templates = u64::from(flows) * (frame_size as u64 - 4);
        if templates > MAX_TEMPLATE_BYTES {
            return Err(PlanError::Templates(templates));
        }
        Ok(Self {
            protocol,
            flows,
            services,
            endpoints,
            frame_size,
            imix,
            snat_per_endpoint,
            family: Family::Ipv4,
            two_armed: false,
        })
    }

    /// The same plan over `family`: IPv6 frames smaller than [`MIN_FRAME_SIZE_IPV6`] (and
    /// IMIX's 64-byte ones) are raised to it.
    ///
    /// # Errors
    /// When the raised templates would not fit in [`MAX_TEMPLATE_BYTES`].
    pub fn with_family(mut self, family: Family) -> Result<Self, PlanError> {
        self.family = family;
        self.frame_size = self.frame_size.max(self.min_frame_size());
        let templates = u64::from(self.flows) * (self.frame_size as u64 - 4);
        if templates > MAX_TEMPLATE_BYTES {
            return Err(PlanError::Templates(templates));
        }
        Ok(self)
    }

    /// The same plan on two links (clients on one, endpoints on the other).
    pub fn with_two_armed(mut self, two_armed: bool) -> Self {
        self.two_armed = two_armed;
        self
    }

    /// The smallest frame of this family that holds a probe.
    fn min_frame_size(&self) -> usize {
        match self.family {
            Family::Ipv4 => MIN_FRAME_SIZE,
            Family::Ipv6 => MIN_FRAME_SIZE_IPV6,
        }
    }

    /// The gateway's MAC address as the endpoints see it.
    pub fn gateway_mac_to_endpoints(&self) -> MacAddr {
        if self.two_armed {
            GATEWAY_BACK_MAC
        } else {
            GATEWAY_MAC
        }
    }

    /// A short name for logs: "udp, 1000 flows" ("udp/ipv6, 1000 flows").
    pub fn tag(&self) -> String {
        match self.family {
            Family::Ipv4 => format!("{}, {} flows", self.protocol.name(), self.flows),
            Family::Ipv6 => format!("{}/ipv6, {} flows", self.protocol.name(), self.flows),
        }
    }

    /// Bytes of the largest frame as handed to the port (no FCS): the templates' stride.
    pub fn frame_len(&self) -> usize {
        self.frame_size - 4
    }

    /// Bytes of flow `i`'s frames as handed to the port (no FCS).
    pub fn frame_len_of(&self, i: u32) -> usize {
        if self.imix {
            IMIX[i as usize % IMIX.len()].max(self.min_frame_size()) - 4
        } else {
            self.frame_size - 4
        }
    }

    /// The frame size for results: "64" … "1518", or "imix".
    pub fn frame_name(&self) -> String {
        if self.imix {
            "imix".into()
        } else {
            self.frame_size.to_string()
        }
    }

    /// Client address and source port of flow `i`.
    pub fn client(&self, i: u32) -> (IpAddr, u16) {
        let host = 10 + i / FLOWS_PER_HOST;
        let ip = match self.family {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::from(CLIENT_NET + host)),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(CLIENT_NET6 + u128::from(host))),
        };
        (ip, FIRST_CLIENT_PORT + (i % FLOWS_PER_HOST) as u16)
    }

    /// The Services' port for this protocol.
    pub fn vip_port(&self) -> u16 {
        match self.protocol {
            Protocol::Udp => VIP_PORT,
            Protocol::Tcp => VIP_TCP_PORT,
        }
    }

    /// The endpoints' port for this protocol.
    pub fn endpoint_port(&self) -> u16 {
        match self.protocol {
            Protocol::Udp => ENDPOINT_PORT,
            Protocol::Tcp => ENDPOINT_TCP_PORT,
        }
    }

    /// The Service flow `i` goes to.
    pub fn service_of(&self, i: u32) -> u32 {
        i % self.services
    }

    /// IPv4 VIP of Service `s`.
    pub fn vip(s: u32) -> Ipv4Addr {
        Ipv4Addr::new(203, 0, 113, 10 + s as u8)
    }

    /// IPv6 VIP of Service `s`.
    pub fn vip6(s: u32) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 10 + s as u16)
    }

    /// VIP of Service `s` in the plan's family.
    pub fn vip_of(&self, s: u32) -> IpAddr {
        match self.family {
            Family::Ipv4 => Self::vip(s).into(),
            Family::Ipv6 => Self::vip6(s).into(),
        }
    }

    /// The gateway's SNAT address in the plan's family.
    pub fn snat_ip(&self) -> IpAddr {
        match self.family {
            Family::Ipv4 => SNAT_IP.into(),
            Family::Ipv6 => SNAT_IP6.into(),
        }
    }

    /// IPv4 address of endpoint `j` of Service `s`.
    pub fn endpoint(&self, s: u32, j: u32) -> Ipv4Addr {
        let k = s * self.endpoints + j;
        Ipv4Addr::new(10, 70, (1 + k / 250) as u8, (2 + k % 250) as u8)
    }

    /// IPv6 address of endpoint `j` of Service `s` (the IPv4 address's last two bytes as
    /// the last two groups).
    pub fn endpoint6(&self, s: u32, j: u32) -> Ipv6Addr {
        let o = self.endpoint(s, j).octets();
        Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, u16::from(o[2]), u16::from(o[3]))
    }

    /// The Service an endpoint address (either family) belongs to, if it is one of the
    /// plan's.
    pub fn service_of_endpoint(&self, ip: IpAddr) -> Option<u32> {
        let (o2, o3) = endpoint_bytes(ip)?;
        if o2 == 0 || !(2..252).contains(&o3) {
            return None;
        }
        let k = u32::from(o2 - 1) * 250 + u32::from(o3 - 2);
        (k < self.services * self.endpoints).then_some(k / self.endpoints)
    }

    /// The MAC address torii-bench answers ARP or Neighbor Solicitations with for an
    /// address of the link, if it plays that address (a client host or an endpoint; an
    /// endpoint's IPv6 address has its IPv4 twin's MAC).
    pub fn mac_of(&self, ip: IpAddr) -> Option<MacAddr> {
        let host = match ip {
            IpAddr::V4(v4) => u128::from(u32::from(v4).wrapping_sub(CLIENT_NET)),
            IpAddr::V6(v6) => u128::from(v6).wrapping_sub(CLIENT_NET6),
        };
        if (10..10 + u128::from(self.flows.div_ceil(FLOWS_PER_HOST))).contains(&host) {
            return Some(CLIENT_MAC);
        }
        self.service_of_endpoint(ip)?;
        let (o2, o3) = endpoint_bytes(ip)?;
        Some(MacAddr([0x02, 0, 0x0a, 0x46, o2, o3]))
    }

    /// The frame flow `i`'s client sends (TCP: a data segment), with the trial and time
    /// fields zero.
    pub fn template(&self, i: u32) -> Vec<u8> {
        let l2 = L2 { src: CLIENT_MAC, dst: GATEWAY_MAC };
        let (client, sport) = self.client(i);
        let (vip, dport) = (self.vip_of(self.service_of(i)), self.vip_port());
        // 20 more bytes of IPv6 header leave 20 fewer for the payload.
        let l3_extra = if self.family == Family::Ipv6 { 20 } else { 0 };
        let mut payload = match self.protocol {
            Protocol::Udp => {
                let mut p = vec![0u8; self.frame_len_of(i) - PAYLOAD_OFFSET - l3_extra];
                p[4..8].copy_from_slice(&i.to_be_bytes());
                p
            }
            Protocol::Tcp => vec![0u8; self.frame_len_of(i) - TCP_PAYLOAD_OFFSET - l3_extra],
        };
        payload[..4].copy_from_slice(&MAGIC);
        let data = TcpFlags::ACK | TcpFlags::PSH;
        match (self.protocol, client, vip) {
            (Protocol::Udp, IpAddr::V4(c), IpAddr::V4(v)) => frames::udp(l2, (c, sport), (v, dport), &payload, 64),
            (Protocol::Tcp, IpAddr::V4(c), IpAddr::V4(v)) => {
                frames::tcp(l2, (c, sport), (v, dport), data, i, 0, &payload, 64)
            }
            (Protocol::Udp, IpAddr::V6(c), IpAddr::V6(v)) => frames::udp6(l2, (c, sport), (v, dport), &payload, 64),
            (Protocol::Tcp, IpAddr::V6(c), IpAddr::V6(v)) => {
                frames::tcp6(l2, (c, sport), (v, dport), data, i, 0, &payload, 64)
            }
            _ => unreachable!("client and VIP are of the plan's family"),
        }
    }

    /// The Kubernetes objects torii-control serves: a Node for the gateway, and per
    /// Service a `Service` with the VIP as an `externalIPs` address and one EndpointSlice;
    /// with `dual_stack`, IPv6 too: dual-stack Services (`ipFamilies: [IPv4, IPv6]`, a
    /// ClusterIP and an externalIP of each family) and a second, IPv6 EndpointSlice.
    pub fn manifests(&self, dual_stack: bool) -> String {
        let mut y = String::from(
            "# Written by torii-bench: the Services it sends traffic to.\napiVersion: v1\nkind: Node\n\
             metadata:\n  name: gateway-1\nstatus:\n  addresses:\n  - {type: InternalIP, address: 198.18.0.1}\n",
        );
        for s in 0..self.services {
            let _ = write!(
                y,
                "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: bench-{s}\n  namespace: bench\n\
                 spec:\n  type: ClusterIP\n{}  ports:\n\
                 \x20 - {{name: echo, protocol: UDP, port: {VIP_PORT}, targetPort: {ENDPOINT_PORT}}}\n\
                 \x20 - {{name: web, protocol: TCP, port: {VIP_TCP_PORT}, targetPort: {ENDPOINT_TCP_PORT}}}\n\
                 ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: bench-{s}-a\n\
                 \x20 namespace: bench\n  labels:\n    kubernetes.io/service-name: bench-{s}\n\
                 addressType: IPv4\nports:\n- {{name: echo, protocol: UDP, port: {ENDPOINT_PORT}}}\n\
                 - {{name: web, protocol: TCP, port: {ENDPOINT_TCP_PORT}}}\nendpoints:\n",
                if dual_stack {
                    format!(
                        "  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n  clusterIP: 10.96.{a}.{b}\n\
                         \x20 clusterIPs: [10.96.{a}.{b}, \"fd00:96::{a}:{b}\"]\n  externalIPs: [{}, \"{}\"]\n",
                        Self::vip(s),
                        Self::vip6(s),
                        a = 1 + s / 250,
                        b = 2 + s % 250,
                    )
                } else {
                    format!("  clusterIP: 10.96.{}.{}\n  externalIPs: [{}]\n", 1 + s / 250, 2 + s % 250, Self::vip(s))
                },
            );
            let address = |j: u32| self.endpoint(s, j).to_string();
            let address6 = |j: u32| format!("\"{}\"", self.endpoint6(s, j));
            let slices: &[(&str, &dyn Fn(u32) -> String)] =
                if dual_stack { &[("IPv4", &address), ("IPv6", &address6)] } else { &[("IPv4", &address)] };
            for (n, (family, address)) in slices.iter().enumerate() {
                if n > 0 {
                    let _ = write!(
                        y,
                        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: bench-{s}-b\n\
                         \x20 namespace: bench\n  labels:\n    kubernetes.io/service-name: bench-{s}\n\
                         addressType: {family}\nports:\n- {{name: echo, protocol: UDP, port: {ENDPOINT_PORT}}}\n\
                         - {{name: web, protocol: TCP, port: {ENDPOINT_TCP_PORT}}}\nendpoints:\n",
                    );
                }
                for j in 0..self.endpoints {
                    let _ = writeln!(
                        y,
                        "- addresses: [{}]\n  conditions: {{ready: true, serving: true, terminating: false}}",
                        address(j)
                    );
                }
            }
        }
        y
    }

    /// torii-gateway's configuration: one worker, one interface carrying both subnets
    /// (DPDK: `net_virtio_user` on the first of `sockets`, the worker on `cpu`; AF_PACKET:
    /// the kernel interface `iface`) or, two-armed, a front interface carrying the clients'
    /// subnets and a back one the endpoints' (DPDK: one `net_virtio_user` device on each of
    /// two sockets), conntrack sized for the flows of both protocols; with `dual_stack`,
    /// the IPv6 subnets and SNAT address too.
    /// The gateway's `conntrack.capacity` for this plan: flows of both protocols may be
    /// tracked at once (runs share the gateway), with room; above 1 M flows only twice the
    /// flows (memory).
    pub fn conntrack_capacity(&self) -> u64 {
        let per_flow = if self.flows > 1 << 20 { 2 } else { 4 };
        (u64::from(self.flows) * per_flow).next_power_of_two().max(65_536)
    }

    /// Bytes of the gateway's conntrack regions (one worker, IPv4 and IPv6, rounded up to
    /// 2 MiB pages): what `conntrack.region_dir` on hugetlbfs takes of the huge pages.
    pub fn conntrack_region_bytes(&self) -> u64 {
        let page = 2u64 << 20;
        [72u64, 108].iter().map(|record| (4096 + self.conntrack_capacity() * (record + 1)).next_multiple_of(page)).sum()
    }

    /// As its arguments say, with the conntrack regions in `region_dir` when given
    /// (hugetlbfs), else in `shm_dir`.
    pub fn gateway_config(
        &self,
        shm_dir: &str,
        region_dir: Option<&str>,
        manifests_dir: &str,
        driver: &GatewayDriver,
        dual_stack: bool,
    ) -> String {
        // No SYN proxy: above `syn_cookies_above_per_s` (50 000 by default) the gateway
        // would answer SYNs with cookies itself, which the connection test's clients do not
        // complete; it measures connection tracking, as the kernel baseline (kube-proxy has
        // no SYNPROXY rule) does.
        let capacity = self.conntrack_capacity();
        let region_dir = region_dir.map_or(String::new(), |d| format!("region_dir = {d:?}\n"));
        let quote = |v: &[&str]| v.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
        let mut front = vec![GATEWAY_CLIENT_PREFIX];
        let mut back = vec!["10.70.0.1/16"];
        let mut snat = vec!["10.70.0.1"];
        if dual_stack {
            front.push(GATEWAY_CLIENT_PREFIX6);
            back.push("fd00:70::1/64");
            snat.push("fd00:70::1");
        }
        let links: Vec<Vec<&str>> = if self.two_armed { vec![front, back] } else { vec![[front, back].concat()] };
        let mut head = match driver {
            GatewayDriver::Dpdk { cpu, eal, queue_size, virtio_rx, .. } => {
                let eal: Vec<String> = eal.iter().map(|a| format!("{a:?}")).collect();
                // The worker busy-polls, as testpmd's forwarding lcore does: with a sleep
                // after its idle polls, a worker that found nothing while the generator was
                // descheduled would wake up late and meet a full ring.
                format!(
                    "driver = \"dpdk\"\nworkers = 1\n\n[dpdk]\neal_args = [{eal}]\ncpus = [{cpu}]\n\
                     fallback_to_af_packet = false\nidle_sleep_us = 0\n\
                     rx_descriptors = {queue_size}\ntx_descriptors = {queue_size}\n\
                     rx_checksum_offload = {rx_csum}\n",
                    eal = eal.join(", "),
                    rx_csum = virtio_rx.checksum_offload(),
                )
            }
            GatewayDriver::AfPacket { .. } => "driver = \"af_packet\"\nworkers = 1\n".to_string(),
        };
        for (k, addresses) in links.iter().enumerate() {
            match driver {
                GatewayDriver::Dpdk { sockets, queue_size, virtio_rx, .. } => {
                    let (name, mac) = if k == 0 { ("virtio0", GATEWAY_MAC) } else { ("virtio1", GATEWAY_BACK_MAC) };
                    let socket = sockets.get(k).map_or("", String::as_str);
                    let _ = write!(
                        head,
                        "\n[[interfaces]]\nname = \"{name}\"\n\
                         device = \"net_virtio_user{k},path={socket},queues=1,queue_size={queue_size},mac={mac}{}\"\n",
                        virtio_rx.devargs(),
                    );
                }
                GatewayDriver::AfPacket { iface } => {
                    let _ = write!(head, "\n[[interfaces]]\nname = {iface:?}\n");
                }
            }
            let _ = writeln!(head, "addresses = [{}]", quote(addresses));
        }
        format!(
            "# Written by torii-bench.\nnode_name = \"gateway-1\"\nshm_dir = {shm_dir:?}\n{head}\n\
             [snat]\naddresses = [{}]\nport_min = {SNAT_PORT_MIN}\nport_max = 65535\n\n\
             [conntrack]\ncapacity = {capacity}\ntcp_be_liberal = true\nsyn_cookies = false\n{region_dir}\n\
             [control]\nmanifests = {manifests_dir:?}\n",
            quote(&snat),
        )
    }
}

/// How a torii-gateway under test reaches torii-bench.
#[derive(Debug, Clone)]
pub enum GatewayDriver {
    /// DPDK `net_virtio_user` on the vhost-user sockets `sockets` (one, or two-armed the
    /// front's and the back's), the worker on CPU `cpu`, extra EAL arguments `eal`.
    Dpdk {
        /// The vhost-user sockets torii-bench serves.
        sockets: Vec<String>,
        /// The worker's CPU.
        cpu: usize,
        /// Extra EAL arguments (memory).
        eal: Vec<String>,
        /// Descriptors of the virtio rings and of the port's receive and transmit queues.
        queue_size: u16,
        /// How the device receives from its rings.
        virtio_rx: VirtioRx,
    },
    /// torii's own AF_PACKET driver on the kernel interface `iface` (a veth).
    AfPacket {
        /// The interface.
        iface: String,
    },
}

/// Writes the trial number and transmit time into a frame copied from a template, and
/// updates its UDP or TCP checksum for them (the template has zeros there).
pub fn stamp(protocol: Protocol, frame: &mut [u8], trial: u16, tx_ns: u64) {
    Stamp::new(protocol, trial, tx_ns).apply(frame);
}

/// A trial number and transmit time to write into frames copied from templates, with
/// the sum of the words they add to the UDP or TCP checksum (RFC 1624 § 3), computed once
/// for a whole burst.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    protocol: Protocol,
    trial: u16,
    tx_ns: u64,
    flags: Option<u8>,
    sum: u32,
}

impl Stamp {
    /// The stamp of trial `trial` at `tx_ns` (TCP: its low 32 bits).
    pub fn new(protocol: Protocol, trial: u16, tx_ns: u64) -> Self {
        let sum = match protocol {
            Protocol::Udp => u32::from(trial) + (0..4).map(|k| ((tx_ns >> (16 * k)) & 0xffff) as u32).sum::<u32>(),
            Protocol::Tcp => {
                let ts = tx_ns as u32;
                u32::from(trial) + (ts >> 16) + (ts & 0xffff)
            }
        };
        Self { protocol, trial, tx_ns, flags: None, sum }
    }

    /// The same stamp, also making the TCP data segment a `segment` (its flags byte).
    pub fn with_segment(mut self, segment: Segment) -> Self {
        let w = |flags: u8| u32::from(u16::from_be_bytes([0x50, flags]));
        // RFC 1624 eqn. 3: ~m + m' for the flags word (data offset 5, no options).
        self.sum += (!w(Segment::Data.flags()) & 0xffff) + w(segment.flags());
        self.flags = Some(segment.flags());
        self
    }

    /// Writes the stamp into `frame` (a copy of a template: zeros there) and updates its
    /// checksum.
    #[inline]
    pub fn apply(&self, frame: &mut [u8]) {
        let l4 = l4_offset(frame);
        match self.protocol {
            Protocol::Udp => {
                let p = l4 + UDP_PAYLOAD;
                frame[p + 8..p + 10].copy_from_slice(&self.trial.to_be_bytes());
                frame[p + 10..p + 18].copy_from_slice(&self.tx_ns.to_be_bytes());
                add_to_checksum(frame, l4 + UDP_CSUM, self.sum, true);
            }
            Protocol::Tcp => {
                if let Some(flags) = self.flags {
                    frame[l4 + TCP_FLAGS_WORD + 1] = flags;
                }
                let p = l4 + TCP_PAYLOAD;
                frame[p + 4..p + 6].copy_from_slice(&self.trial.to_be_bytes());
                frame[l4 + TCP_ACK..l4 + TCP_ACK + 4].copy_from_slice(&(self.tx_ns as u32).to_be_bytes());
                add_to_checksum(frame, l4 + TCP_CSUM, self.sum, false);
            }
        }
    }
}

/// Rewrites a TCP segment's flags (a copy of a data template, or a received SYN turned
/// into the SYN-ACK), updating its checksum.
pub fn set_tcp_flags(frame: &mut [u8], segment: Segment) {
    let l4 = l4_offset(frame);
    let w = l4 + TCP_FLAGS_WORD;
    let old = u16::from_be_bytes([frame[w], frame[w + 1]]);
    frame[w + 1] = segment.flags();
    let new = u16::from_be_bytes([frame[w], frame[w + 1]]);
    // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
    add_to_checksum(frame, l4 + TCP_CSUM, u32::from(!old) + u32::from(new), false);
}

/// Turns a TCP segment that reached its endpoint (a data segment or the handshake's ACK)
/// into the endpoint's RST closing the connection, in place (addresses not yet swapped:
/// call [`reflect`] after). The RST's sequence number is the acknowledgment number of the
/// client's segment — what the client acknowledged, so exactly the sequence number the
/// client expects next, as a real endpoint's RST carries (RFC 9293 § 3.10.7.4): a gateway
/// that honours only a RST at the receiver's expected number (RFC 5961 § 3.2; Linux
/// refuses one before the receiver's highest acknowledgment, `nf_conntrack_proto_tcp.c`)
/// closes the flow with it, however the flow's windows were learnt (a flow picked up
/// mid-stream learns the endpoint's position from the client's ACK). The RST carries no
/// ACK flag, so its acknowledgment field is free: it takes the flow index (the segment's
/// sequence number). The two 32-bit words are swapped, which leaves the checksum as it
/// was; only the flags change it.
pub fn to_rst(frame: &mut [u8]) {
    set_tcp_flags(frame, Segment::Rst);
    let l4 = l4_offset(frame);
    for k in 0..4 {
        frame.swap(l4 + TCP_SEQ + k, l4 + TCP_ACK + k);
    }
}

/// Adds `sum` (of 16-bit words) to the one's complement checksum at `at`.
#[inline]
fn add_to_checksum(frame: &mut [u8], at: usize, sum: u32, udp: bool) {
    let old = u16::from_be_bytes([frame[at], frame[at + 1]]);
    let mut acc = u32::from(!old) + sum;
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    let mut new = !(acc as u16);
    if udp && new == 0 {
        new = 0xffff; // RFC 768: a computed zero is sent as all ones
    }
    frame[at..at + 2].copy_from_slice(&new.to_be_bytes());
}

/// What a frame the generator received is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// An ARP packet (answered by the caller if it asks for an address torii-bench plays).
    Arp,
    /// An ICMPv6 Neighbor Solicitation (answered by the caller likewise).
    NeighborSolicit,
    /// A probe on its way to an endpoint (torii: translated to SNAT → endpoint; io-fwd:
    /// the client's own frame): to be reflected as the endpoint's reply.
    ToEndpoint {
        /// Flow index from the payload (TCP: the sequence number).
        flow: u32,
        /// What kind of TCP segment it is.
        segment: Segment,
    },
    /// A probe's reply arriving at its client: the end of the round trip.
    ToClient {
        /// Flow index from the payload (TCP: the sequence number).
        flow: u32,
        /// Trial number from the payload.
        trial: u16,
        /// Transmit time from the payload (TCP: its low 32 bits).
        tx_ns: u64,
        /// What kind of TCP segment it is.
        segment: Segment,
    },
    /// Anything else (not IPv4 with a 20-byte header or IPv6 without extension headers
    /// carrying UDP or TCP, not a probe).
    Other,
}

/// Classifies a received frame by its destination address (fast: fixed offsets, no
/// checksum). Frames to the clients' subnet are replies; other probes go to endpoints.
pub fn classify(frame: &[u8]) -> Received {
    if frame.len() < 14 + 40 {
        return if frame.len() >= 14 && frame[12..14] == [0x08, 0x06] { Received::Arp } else { Received::Other };
    }
    let (l4, protocol, to_client) = match frame[12..14] {
        // 198.18.0.0/15
        [0x08, 0x00] if frame[14] == 0x45 => (34, frame[23], frame[30] == 198 && frame[31] & 0xfe == 18),
        // 2001:2::/48
        [0x86, 0xdd] if frame[14] >> 4 == 6 => (54, frame[20], frame[38..44] == [0x20, 0x01, 0, 0x02, 0, 0]),
        [0x08, 0x06] => return Received::Arp,
        _ => return Received::Other,
    };
    if protocol == 58 && frame[l4] == 135 {
        return Received::NeighborSolicit;
    }
    if frame.len() < l4 + TCP_PAYLOAD + TCP_PROBE_LEN {
        return Received::Other;
    }
    let (flow, trial, tx_ns, segment) = match protocol {
        17 if frame.len() >= l4 + UDP_PAYLOAD + PROBE_LEN => {
            let p = l4 + UDP_PAYLOAD;
            if frame[p..p + 4] != MAGIC {
                return Received::Other;
            }
            (
                u32::from_be_bytes([frame[p + 4], frame[p + 5], frame[p + 6], frame[p + 7]]),
                u16::from_be_bytes([frame[p + 8], frame[p + 9]]),
                u64::from_be_bytes(frame[p + 10..p + 18].try_into().unwrap_or_default()),
                Segment::Datagram,
            )
        }
        6 if frame[l4 + TCP_FLAGS_WORD] == 0x50 => {
            let p = l4 + TCP_PAYLOAD;
            if frame[p..p + 4] != MAGIC {
                return Received::Other;
            }
            let word = |at: usize| u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
            let segment = Segment::of_flags(frame[l4 + TCP_FLAGS_WORD + 1]);
            // A RST carries the flow index and the time the other way round ([`to_rst`]).
            let (flow_at, time_at) =
                if segment == Segment::Rst { (l4 + TCP_ACK, l4 + TCP_SEQ) } else { (l4 + TCP_SEQ, l4 + TCP_ACK) };
            (word(flow_at), u16::from_be_bytes([frame[p + 4], frame[p + 5]]), u64::from(word(time_at)), segment)
        }
        _ => return Received::Other,
    };
    if to_client {
        Received::ToClient { flow, trial, tx_ns, segment }
    } else {
        Received::ToEndpoint { flow, segment }
    }
}

/// Turns a request that reached its endpoint into the endpoint's reply, in place: MAC,
/// address and port pairs swapped (no checksum changes: the sums are the same).
pub fn reflect(frame: &mut [u8]) {
    for k in 0..6 {
        frame.swap(k, 6 + k);
    }
    // Source and destination addresses: IPv4 at 26 and 30, IPv6 at 22 and 38.
    let (src, len) = if frame[12] == 0x86 { (22, 16) } else { (26, 4) };
    for k in 0..len {
        frame.swap(src + k, src + len + k);
    }
    let l4 = src + 2 * len;
    for k in 0..2 {
        frame.swap(l4 + k, l4 + 2 + k);
    }
}

/// Checks a request as the endpoint receives it. For torii: from the gateway's MAC and
/// the SNAT address, a port in the SNAT range, to an endpoint of the flow's Service on
/// the endpoints' port at that endpoint's MAC. For io-fwd: the client's frame unchanged.
/// With `checksums`, the IPv4 and UDP/TCP checksums too. Returns the SNAT port (torii).
/// Two-armed, the gateway's MAC on the endpoints' side is [`GATEWAY_BACK_MAC`].
///
/// # Errors
/// What is wrong, naming the flow.
pub fn check_to_endpoint(plan: &Plan, dut: Dut, frame: &[u8], flow: u32, checksums: bool) -> Result<u16, String> {
    let h = headers(plan, frame, checksums)?;
    let what = || format!("flow {flow}: request {}:{} -> {}:{}", h.src, h.sport, h.dst, h.dport);
    if flow >= plan.flows {
        return Err(format!("{}: flow index out of range", what()));
    }
    let service = plan.service_of(flow);
    if checksums {
        h.sums.map_err(|e| format!("{}: {e}", what()))?;
    }
    match dut {
        Dut::Torii | Dut::Kernel | Dut::ToriiAfPacket => {
            if h.eth_src != plan.gateway_mac_to_endpoints() {
                return Err(format!("{}: source MAC {} is not the gateway's", what(), h.eth_src));
            }
            if h.src != plan.snat_ip() || h.sport < SNAT_PORT_MIN {
                return Err(format!("{}: not from the SNAT address and range", what()));
            }
            if plan.service_of_endpoint(h.dst) != Some(service) || h.dport != plan.endpoint_port() {
                return Err(format!("{}: not an endpoint of Service bench-{service}", what()));
            }
            if Some(h.eth_dst) != plan.mac_of(h.dst) {
                return Err(format!("{}: destination MAC {} is not the endpoint's", what(), h.eth_dst));
            }
            Ok(h.sport)
        }
        Dut::IoFwd => {
            if (h.src, h.sport) != plan.client(flow) || (h.dst, h.dport) != (plan.vip_of(service), plan.vip_port()) {
                return Err(format!("{}: io-fwd changed the frame", what()));
            }
            Ok(0)
        }
    }
}

/// Checks a reply as its client receives it: from the flow's VIP and Service port, to
/// the flow's client address and port at [`CLIENT_MAC`] (and, with `checksums`, valid
/// checksums). The same for both devices.
///
/// # Errors
/// What is wrong, naming the flow.
pub fn check_to_client(plan: &Plan, frame: &[u8], flow: u32, checksums: bool) -> Result<(), String> {
    let h = headers(plan, frame, checksums)?;
    let what = || format!("flow {flow}: reply {}:{} -> {}:{}", h.src, h.sport, h.dst, h.dport);
    if flow >= plan.flows {
        return Err(format!("{}: flow index out of range", what()));
    }
    if checksums {
        h.sums.map_err(|e| format!("{}: {e}", what()))?;
    }
    if (h.src, h.sport) != (plan.vip_of(plan.service_of(flow)), plan.vip_port())
        || (h.dst, h.dport) != plan.client(flow)
    {
        return Err(format!("{}: not the flow's VIP and client", what()));
    }
    if h.eth_dst != CLIENT_MAC {
        return Err(format!("{}: destination MAC {} is not the client's", what(), h.eth_dst));
    }
    Ok(())
}

/// The fields the checks read, parsed with the gateway's checked views.
struct Headers {
    eth_src: MacAddr,
    eth_dst: MacAddr,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    /// Whether the IPv4 and L4 checksums are valid (not computed: `Ok`).
    sums: Result<(), String>,
}

/// Parses a frame of `plan`'s family and protocol; with `checksums`, verifies the IPv4
/// header's and the L4 checksum (UDP's must not be zero: RFC 8200 § 8.1 forbids it over
/// IPv6, and torii-bench's clients always send one over IPv4).
fn headers(plan: &Plan, frame: &[u8], checksums: bool) -> Result<Headers, String> {
    let eth = EthernetFrame::new_checked(frame).map_err(|e| format!("bad Ethernet frame: {e:?}"))?;
    let (eth_src, eth_dst) = (eth.src_addr(), eth.dst_addr());
    match (plan.family, eth.ethertype()) {
        (Family::Ipv4, EtherType::Ipv4) => {
            let ip = Ipv4Packet::new_checked(eth.payload()).map_err(|e| format!("bad IPv4 packet: {e:?}"))?;
            let ip_sum = if !checksums || ip.verify_checksum() {
                Ok(())
            } else {
                Err(format!("bad IPv4 header checksum {:#06x}", ip.checksum()))
            };
            let (sport, dport, l4_sum) =
                l4_headers(plan.protocol, ip.payload(), checksums, ip.src_addr(), ip.dst_addr())?;
            let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
            Ok(Headers { eth_src, eth_dst, src, dst, sport, dport, sums: ip_sum.and(l4_sum) })
        }
        (Family::Ipv6, EtherType::Ipv6) => {
            let ip = Ipv6Packet::new_checked(eth.payload()).map_err(|e| format!("bad IPv6 packet: {e:?}"))?;
            let (sport, dport, sums) =
                l4_headers(plan.protocol, ip.payload(), checksums, ip.src_addr(), ip.dst_addr())?;
            let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
            Ok(Headers { eth_src, eth_dst, src, dst, sport, dport, sums })
        }
        (family, ethertype) => Err(format!("a {ethertype:?} frame in an {} run", family.name())),
    }
}

/// Ports and the checksum verdict of a UDP datagram or TCP segment between `src` and `dst`.
fn l4_headers<A: torii_gateway::wire::checksum::PseudoHeaderAddr>(
    protocol: Protocol,
    l4: &[u8],
    checksums: bool,
    src: A,
    dst: A,
) -> Result<(u16, u16, Result<(), String>), String> {
    Ok(match protocol {
        Protocol::Udp => {
            let u = UdpPacket::new_checked(l4).map_err(|e| format!("bad UDP datagram: {e:?}"))?;
            let ok = !checksums || (u.checksum() != 0 && u.verify_checksum(src, dst));
            (
                u.src_port(),
                u.dst_port(),
                if ok { Ok(()) } else { Err(format!("bad UDP checksum {:#06x}", u.checksum())) },
            )
        }
        Protocol::Tcp => {
            let t = TcpPacket::new_checked(l4).map_err(|e| format!("bad TCP segment: {e:?}"))?;
            let ok = !checksums || t.verify_checksum(src, dst);
            (
                t.src_port(),
                t.dst_port(),
                if ok { Ok(()) } else { Err(format!("bad TCP checksum {:#06x}", t.checksum())) },
            )
        }
    })
}

/// The last two bytes of an endpoint's address, if it is in the endpoints' subnet
/// (10.70.0.0/16, fd00:70::/64 with the last groups below 256).
fn endpoint_bytes(ip: IpAddr) -> Option<(u8, u8)> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            (o[0] == 10 && o[1] == 70).then_some((o[2], o[3]))
        }
        IpAddr::V6(v6) => {
            let g = v6.segments();
            let ok = g[..6] == [0xfd00, 0x70, 0, 0, 0, 0] && g[6] < 256 && g[7] < 256;
            ok.then_some((g[6] as u8, g[7] as u8))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(protocol: Protocol) -> Plan {
        Plan::new(protocol, 60_000, 3, 4, Some(64), false).unwrap()
    }

    #[test]
    fn addresses_round_trip() {
        let p = plan(Protocol::Udp);
        assert_eq!(p.client(0), (Ipv4Addr::new(198, 18, 0, 10).into(), 10_000));
        assert_eq!(p.client(50_001), (Ipv4Addr::new(198, 18, 0, 11).into(), 10_001));
        let big = Plan::new(Protocol::Udp, MAX_FLOWS, 240, 250, Some(64), true).unwrap();
        assert_eq!(big.client(MAX_FLOWS - 1), (Ipv4Addr::new(198, 18, 1, 89).into(), 10_000 + 27_215));
        assert_eq!(big.mac_of(Ipv4Addr::new(198, 18, 1, 89).into()), Some(CLIENT_MAC));
        assert_eq!(big.mac_of(Ipv4Addr::new(198, 18, 1, 90).into()), None);
        for s in 0..3 {
            for j in 0..4 {
                assert_eq!(p.service_of_endpoint(p.endpoint(s, j).into()), Some(s));
                assert_eq!(p.service_of_endpoint(p.endpoint6(s, j).into()), Some(s));
                assert_eq!(p.mac_of(p.endpoint6(s, j).into()), p.mac_of(p.endpoint(s, j).into()));
            }
        }
        assert_eq!(p.service_of_endpoint(SNAT_IP.into()), None);
        assert_eq!(p.service_of_endpoint(SNAT_IP6.into()), None);
        assert_eq!(p.service_of_endpoint(Ipv4Addr::new(10, 70, 1, 14).into()), None, "k = 12 is past 3 × 4");
        assert_eq!(p.mac_of(Ipv4Addr::new(198, 18, 0, 11).into()), Some(CLIENT_MAC));
        assert_eq!(p.mac_of(Ipv4Addr::new(198, 18, 0, 12).into()), None);
        assert_eq!(p.mac_of(GATEWAY_CLIENT_IP.into()), None);
        assert_eq!(p.mac_of(p.endpoint(0, 1).into()), Some(MacAddr([2, 0, 0x0a, 0x46, 1, 3])));
        assert_eq!(p.endpoint6(0, 1), "fd00:70::1:3".parse::<Ipv6Addr>().unwrap());
        let p6 = p.with_family(Family::Ipv6).unwrap();
        assert_eq!(p6.client(50_001), ("2001:2::b".parse::<IpAddr>().unwrap(), 10_001));
        assert_eq!(p6.mac_of("2001:2::b".parse().unwrap()), Some(CLIENT_MAC));
        assert_eq!(p6.mac_of("2001:2::1".parse().unwrap()), None, "the gateway's own address");
        assert_eq!(p6.vip_of(2), "2001:db8:203::c".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn plan_rejects_out_of_range() {
        let udp = Protocol::Udp;
        assert_eq!(Plan::new(udp, 0, 1, 1, Some(64), false), Err(PlanError::Flows(0, 64_000)));
        assert_eq!(Plan::new(udp, 64_001, 1, 1, Some(64), false), Err(PlanError::Flows(64_001, 64_000)));
        assert_eq!(Plan::new(udp, 1 << 20, 10, 3, Some(64), true), Err(PlanError::Flows(1 << 20, 960_000)));
        assert!(Plan::new(udp, 1 << 20, 10, 4, Some(64), true).is_ok());
        assert_eq!(Plan::new(udp, 1, 241, 1, Some(64), false), Err(PlanError::Services(241)));
        assert_eq!(Plan::new(udp, 1, 1, 1, Some(63), false), Err(PlanError::FrameSize(63)));
        assert!(Plan::new(udp, 1, 1, 1, Some(1518), false).is_ok());
    }

    #[test]
    fn templates_are_64_byte_probes_with_valid_checksums() {
        for protocol in [Protocol::Udp, Protocol::Tcp] {
            let p = plan(protocol);
            let f = p.template(7);
            assert_eq!(f.len(), 60, "{protocol:?}");
            let segment = if protocol == Protocol::Tcp { Segment::Data } else { Segment::Datagram };
            assert_eq!(classify(&f), Received::ToEndpoint { flow: 7, segment });
            check_to_endpoint(&p, Dut::IoFwd, &f, 7, true).unwrap();
            assert_eq!(Plan::new(protocol, 1, 1, 1, Some(1518), false).unwrap().template(0).len(), 1514);
        }
    }

    #[test]
    fn stamp_keeps_the_checksum_valid() {
        for protocol in [Protocol::Udp, Protocol::Tcp] {
            let p = plan(protocol);
            for (trial, ts) in [(1, 0), (65535, u64::MAX), (3, 0x0123_4567_89ab_cdef), (0, 1)] {
                let mut f = p.template(59_999);
                stamp(protocol, &mut f, trial, ts);
                check_to_endpoint(&p, Dut::IoFwd, &f, 59_999, true).unwrap();
                reflect(&mut f);
                let (tx_ns, segment) = match protocol {
                    Protocol::Udp => (ts, Segment::Datagram),
                    Protocol::Tcp => (ts & 0xffff_ffff, Segment::Data),
                };
                assert_eq!(classify(&f), Received::ToClient { flow: 59_999, trial, tx_ns, segment });
                // As io-fwd returns it: the reflected frame is what the client receives.
                check_to_client(&p, &f, 59_999, true).unwrap();
                let mut bad = f.clone();
                bad[50] ^= 1; // in the UDP payload, or the TCP checksum
                let err = check_to_client(&p, &bad, 59_999, true).unwrap_err();
                assert!(err.contains("checksum"), "{err}");
            }
        }
    }

    #[test]
    fn a_stamp_with_a_segment_keeps_the_checksum_valid() {
        let p = plan(Protocol::Tcp);
        for segment in [Segment::Syn, Segment::Ack, Segment::Data] {
            let mut f = p.template(40_000);
            Stamp::new(Protocol::Tcp, 7, 0xdead_beef_0123).with_segment(segment).apply(&mut f);
            let want = Received::ToEndpoint { flow: 40_000, segment };
            assert_eq!(classify(&f), want);
            check_to_endpoint(&p, Dut::IoFwd, &f, 40_000, true).unwrap();
        }
    }

    #[test]
    fn handshake_flags_keep_the_checksum_valid() {
        let p = plan(Protocol::Tcp);
        let mut f = p.template(12);
        for segment in [Segment::Syn, Segment::SynAck, Segment::Ack, Segment::Data] {
            set_tcp_flags(&mut f, segment);
            stamp(Protocol::Tcp, &mut f, 0, 0);
            assert_eq!(classify(&f), Received::ToEndpoint { flow: 12, segment });
            check_to_endpoint(&p, Dut::IoFwd, &f, 12, true).unwrap();
        }
    }

    #[test]
    fn imix_frames_are_7_4_1_of_64_594_1518() {
        let p = Plan::new(Protocol::Udp, 24, 1, 1, None, false).unwrap();
        let sizes: Vec<usize> = (0..24).map(|i| p.template(i).len() + 4).collect();
        assert_eq!(sizes.iter().filter(|&&s| s == 64).count(), 14);
        assert_eq!(sizes.iter().filter(|&&s| s == 594).count(), 8);
        assert_eq!(sizes.iter().filter(|&&s| s == 1518).count(), 2);
        assert_eq!((p.frame_len(), p.frame_name()), (1514, "imix".to_string()));
        for i in 0..24 {
            check_to_endpoint(&p, Dut::IoFwd, &p.template(i), i, true).unwrap();
        }
    }

    #[test]
    fn a_rst_carries_what_the_client_acknowledged() {
        for size in [64, 1518] {
            let p = Plan::new(Protocol::Tcp, 60_000, 3, 4, Some(size), false).unwrap();
            let mut f = p.template(59_998);
            stamp(Protocol::Tcp, &mut f, 9, 1234);
            to_rst(&mut f);
            let word = |at: usize| u32::from_be_bytes(f[at..at + 4].try_into().unwrap());
            assert_eq!((word(34 + TCP_SEQ), word(34 + TCP_ACK)), (1234, 59_998), "the client's ACK as SEG.SEQ");
            check_to_endpoint(&p, Dut::IoFwd, &f, 59_998, true).unwrap();
            reflect(&mut f);
            let want = Received::ToClient { flow: 59_998, trial: 9, tx_ns: 1234, segment: Segment::Rst };
            assert_eq!(classify(&f), want);
            check_to_client(&p, &f, 59_998, true).unwrap();
        }
    }

    #[test]
    fn translated_request_is_checked() {
        let p = plan(Protocol::Udp);
        let ep = p.endpoint(1, 2);
        let mut payload = vec![0u8; PROBE_LEN];
        payload[..4].copy_from_slice(&MAGIC);
        payload[4..8].copy_from_slice(&4u32.to_be_bytes()); // flow 4 → service 1
        let l2 = L2 { src: GATEWAY_MAC, dst: p.mac_of(ep.into()).unwrap() };
        let f = frames::udp(l2, (SNAT_IP, 2000), (ep, ENDPOINT_PORT), &payload, 63);
        assert_eq!(check_to_endpoint(&p, Dut::Torii, &f, 4, true), Ok(2000));
        let err = check_to_endpoint(&p, Dut::Torii, &f, 5, true).unwrap_err();
        assert!(err.contains("not an endpoint of Service bench-2"), "{err}");
        let to_client = L2 { src: GATEWAY_MAC, dst: CLIENT_MAC };
        let wrong_mac = frames::udp(to_client, (SNAT_IP, 2000), (ep, ENDPOINT_PORT), &payload, 63);
        assert!(check_to_endpoint(&p, Dut::Torii, &wrong_mac, 4, false).unwrap_err().contains("destination MAC"));
        let tcp = plan(Protocol::Tcp);
        let seg = frames::tcp(l2, (SNAT_IP, 2000), (ep, ENDPOINT_TCP_PORT), TcpFlags::SYN, 4, 0, &MAGIC, 63);
        assert_eq!(check_to_endpoint(&tcp, Dut::Torii, &seg, 4, true), Ok(2000));
    }

    #[test]
    fn manifests_and_config_name_every_service() {
        let p = plan(Protocol::Udp);
        let m = p.manifests(false);
        assert_eq!(m.matches("kind: Service\n").count(), 3);
        assert_eq!(m.matches("- addresses: [10.70.").count(), 12);
        assert_eq!(m.matches("protocol: TCP, port: 8080").count(), 3);
        assert!(m.contains("externalIPs: [203.0.113.12]"));
        let dpdk = GatewayDriver::Dpdk {
            sockets: vec!["/tmp/s.sock".into()],
            cpu: 1,
            eal: vec!["--no-huge".into()],
            queue_size: 1024,
            virtio_rx: VirtioRx::Offload,
        };
        let c = p.gateway_config("/dev/shm/x", None, "/tmp/m", &dpdk, false);
        assert!(c.contains("capacity = 262144\ntcp_be_liberal = true\nsyn_cookies = false\n\n"), "{c}");
        let huge = p.gateway_config("/dev/shm/x", Some("/dev/hugepages/x"), "/tmp/m", &dpdk, false);
        assert!(huge.contains("syn_cookies = false\nregion_dir = \"/dev/hugepages/x\"\n\n[control]"), "{huge}");
        // 262 144 flows: 18 MiB of IPv4 records and 27 MiB of IPv6 ones, whole pages.
        assert_eq!(p.conntrack_region_bytes(), (20 + 28) << 20);
        assert!(c.contains("queue_size=1024,mac=02:00:00:00:00:01"), "{c}");
        assert!(c.contains("idle_sleep_us = 0\nrx_descriptors = 1024\ntx_descriptors = 1024\n"), "{c}");
        assert!(c.contains("eal_args = [\"--no-huge\"]"), "{c}");
        let afp =
            p.gateway_config("/dev/shm/x", None, "/tmp/m", &GatewayDriver::AfPacket { iface: "tba1d".into() }, false);
        assert!(
            afp.contains("driver = \"af_packet\"\nworkers = 1\n\n[[interfaces]]\nname = \"tba1d\"\naddresses"),
            "{afp}"
        );
    }

    #[test]
    fn ipv6_templates_are_84_byte_probes_that_round_trip() {
        for protocol in [Protocol::Udp, Protocol::Tcp] {
            let p = plan(protocol).with_family(Family::Ipv6).unwrap();
            assert_eq!(
                (p.frame_size, p.frame_name()),
                (84, "84".to_string()),
                "64 is raised to the smallest IPv6 probe"
            );
            let mut f = p.template(59_999);
            assert_eq!(f.len(), 80, "{protocol:?}");
            let segment = if protocol == Protocol::Tcp { Segment::Data } else { Segment::Datagram };
            assert_eq!(classify(&f), Received::ToEndpoint { flow: 59_999, segment });
            check_to_endpoint(&p, Dut::IoFwd, &f, 59_999, true).unwrap();
            stamp(protocol, &mut f, 7, 0x0123_4567_89ab_cdef);
            check_to_endpoint(&p, Dut::IoFwd, &f, 59_999, true).unwrap();
            let v4 = plan(protocol);
            assert!(check_to_endpoint(&v4, Dut::IoFwd, &f, 59_999, false)
                .unwrap_err()
                .contains("Ipv6 frame in an ipv4 run"));
            reflect(&mut f);
            let tx_ns = if protocol == Protocol::Udp { 0x0123_4567_89ab_cdef } else { 0x89ab_cdef };
            assert_eq!(classify(&f), Received::ToClient { flow: 59_999, trial: 7, tx_ns, segment });
            check_to_client(&p, &f, 59_999, true).unwrap();
            if protocol == Protocol::Tcp {
                to_rst(&mut f);
                check_to_client(&p, &f, 59_999, true).unwrap();
            }
            let imix = Plan::new(protocol, 12, 1, 1, None, false).unwrap().with_family(Family::Ipv6).unwrap();
            assert_eq!(imix.template(0).len() + 4, 84, "IMIX's 64-byte frames are raised too");
            assert_eq!(imix.template(11).len() + 4, 1518);
        }
    }

    #[test]
    fn translated_ipv6_request_is_checked() {
        let p = plan(Protocol::Udp).with_family(Family::Ipv6).unwrap();
        let ep = p.endpoint6(1, 2);
        let mut payload = vec![0u8; PROBE_LEN];
        payload[..4].copy_from_slice(&MAGIC);
        payload[4..8].copy_from_slice(&4u32.to_be_bytes()); // flow 4 → service 1
        let l2 = L2 { src: GATEWAY_MAC, dst: p.mac_of(ep.into()).unwrap() };
        let f = frames::udp6(l2, (SNAT_IP6, 2000), (ep, ENDPOINT_PORT), &payload, 63);
        assert_eq!(classify(&f), Received::ToEndpoint { flow: 4, segment: Segment::Datagram });
        assert_eq!(check_to_endpoint(&p, Dut::Torii, &f, 4, true), Ok(2000));
        let v4_snat = frames::udp6(l2, ("::ffff:10.70.0.1".parse().unwrap(), 2000), (ep, ENDPOINT_PORT), &payload, 63);
        assert!(check_to_endpoint(&p, Dut::Torii, &v4_snat, 4, true).unwrap_err().contains("SNAT"));
        let two = p.with_two_armed(true);
        assert!(check_to_endpoint(&two, Dut::Torii, &f, 4, true).unwrap_err().contains("source MAC"));
        let back =
            frames::udp6(L2 { src: GATEWAY_BACK_MAC, ..l2 }, (SNAT_IP6, 2000), (ep, ENDPOINT_PORT), &payload, 63);
        assert_eq!(check_to_endpoint(&two, Dut::Torii, &back, 4, true), Ok(2000));
    }

    #[test]
    fn dual_stack_manifests_and_two_armed_config() {
        let p = plan(Protocol::Udp).with_two_armed(true);
        let m = p.manifests(true);
        assert_eq!(m.matches("ipFamilies: [IPv4, IPv6]").count(), 3);
        assert!(m.contains("externalIPs: [203.0.113.12, \"2001:db8:203::c\"]"), "{m}");
        assert!(m.contains("clusterIPs: [10.96.1.4, \"fd00:96::1:4\"]"), "{m}");
        assert_eq!(m.matches("addressType: IPv6").count(), 3);
        assert_eq!(m.matches("- addresses: [\"fd00:70::").count(), 12);
        assert_eq!(p.manifests(false), plan(Protocol::Udp).manifests(false), "IPv4 only: unchanged by the topology");
        let dpdk = GatewayDriver::Dpdk {
            sockets: vec!["/tmp/f.sock".into(), "/tmp/b.sock".into()],
            cpu: 1,
            eal: vec![],
            queue_size: 4096,
            virtio_rx: VirtioRx::Vectorized,
        };
        let c = p.gateway_config("/dev/shm/x", None, "/tmp/m", &dpdk, true);
        assert!(
            c.contains(
                "name = \"virtio0\"\ndevice = \"net_virtio_user0,path=/tmp/f.sock,queues=1,queue_size=4096,mac=02:00:00:00:00:01,\
                 mrg_rxbuf=0,in_order=0,vectorized=1\"\n\
                 addresses = [\"198.18.0.1/15\", \"2001:2::1/48\"]\n"
            ),
            "{c}"
        );
        assert!(
            c.contains(
                "name = \"virtio1\"\ndevice = \"net_virtio_user1,path=/tmp/b.sock,queues=1,queue_size=4096,mac=02:00:00:00:00:02,\
                 mrg_rxbuf=0,in_order=0,vectorized=1\"\n\
                 addresses = [\"10.70.0.1/16\", \"fd00:70::1/64\"]\n"
            ),
            "{c}"
        );
        assert!(c.contains("[snat]\naddresses = [\"10.70.0.1\", \"fd00:70::1\"]\n"), "{c}");
        assert!(c.contains("rx_checksum_offload = false\n"), "{c}");
    }
}
