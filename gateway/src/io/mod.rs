//! Packet I/O drivers: they move Ethernet frames between the NICs and the pure pipeline.
//!
//! The contract every driver keeps:
//! - drivers own **all** system calls of the data plane; the pipeline never touches a file
//!   descriptor, a clock or an allocator;
//! - one driver instance belongs to one worker and is used from that worker's thread only
//!   (`Send`, not `Sync`); nothing in it is shared or locked;
//! - receiving never blocks (idle workers block explicitly, with a timeout), transmitting
//!   never blocks either: a full ring is a counted drop at the caller, not a wait;
//! - both directions of a full-NAT flow must reach the worker that owns the flow. For
//!   AF_PACKET, [`fanout`] builds the kernel-side steering program that guarantees it, and
//!   [`fanout::owner_of_port`] is the rule the SNAT port allocator shares with it.
//!
//! Drivers:
//! - [`af_packet`]: Linux `AF_PACKET` sockets with memory-mapped `TPACKET_V3` rings, one
//!   socket per (worker, port), joined into a `PACKET_FANOUT` group per port;
//!   [`af_packet_io`] adapts one worker's sockets to the worker loop.
//! - `dpdk` (feature `dpdk`, on by default): DPDK poll-mode drivers through `torii-dpdk`,
//!   one RX and one TX queue per (worker, port); replies are kept on their flow's worker
//!   by RSS with an `rte_thash`-shaped key ([`crate::snat::SnatPorts::steered`]); on ports
//!   without usable RSS the receiving worker hands frames of flows it does not own to their
//!   owner ([`redirect`], the same ownership rule as [`fanout`]).

pub mod af_packet;
pub mod af_packet_io;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod fanout;
pub mod redirect;
