//! What every step of the pipeline shares about a frame: the driver's [`Meta`], the
//! [`Verdict`] each step returns, the buffer size [`MIN_BUFFER`] a step may write up to,
//! and the TTL of the packets the steps originate ([`ORIGINATED_TTL`]). A leaf: it uses no
//! other step, so every step, [`super::process`] and [`super::process_burst`] can use it.

use crate::counters::DropReason;

/// Smallest frame buffer a driver may hand to [`super::process`]: room for the largest ICMP error
/// it builds (Ethernet 14, 802.1Q tag 4, IPv4 20, ICMP 8, the quoted IPv4 header up to 60
/// and 8 bytes of its payload). Frames may grow by a tag (4 bytes) when forwarded onto a
/// VLAN: a driver that wants every frame forwarded leaves 4 bytes beyond the largest frame
/// it receives.
pub const MIN_BUFFER: usize = 14 + 4 + 20 + 8 + 60 + 8;

/// TTL (IPv6: Hop Limit) of packets the gateway originates (RST, ICMP, echo replies);
/// Linux's default.
pub(super) const ORIGINATED_TTL: u8 = 64;

/// Per-frame metadata from the driver.
#[derive(Clone, Copy, Debug, Default)]
pub struct Meta {
    /// Index of the port the frame arrived on ([`crate::host::Host::ports`], as
    /// [`crate::config::Config::ports`]; equal to the interface index when every
    /// interface has its own port). The frame holds its 802.1Q tag, if it had one: a
    /// driver whose device stripped it puts it back.
    pub iface: u8,
    /// Length of the received frame in the buffer, bytes.
    pub len: usize,
    /// The L4 checksum holds only the pseudo-header sum (the sender offloaded it to a NIC
    /// that does not exist on a veth): recompute it in full when rewriting.
    pub l4_csum_partial: bool,
    /// The device verified the IPv4 header checksum (DPDK `RTE_MBUF_F_RX_IP_CKSUM_GOOD`):
    /// the pipeline does not verify it again.
    pub l3_csum_good: bool,
    /// The device verified the TCP, UDP or SCTP checksum (DPDK `RTE_MBUF_F_RX_L4_CKSUM_GOOD`,
    /// virtio's `VIRTIO_NET_HDR_F_DATA_VALID`): the pipeline does not verify it again.
    pub l4_csum_good: bool,
}

/// What the driver does with the frame after [`super::process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send the first `len` bytes of the buffer on port `iface`.
    Transmit {
        /// Egress port index (as [`Meta::iface`]); the frame carries the egress
        /// interface's VLAN tag, if it has one.
        iface: u8,
        /// Frame length, bytes.
        len: usize,
    },
    /// Nothing to send: the frame was consumed (e.g. an ARP reply that was learned from).
    Consumed,
    /// Dropped; already counted under the reason.
    Drop(DropReason),
}
