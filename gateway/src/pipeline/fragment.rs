//! IP fragments through the gateway (IPv4: [RFC 791] § 3.2; IPv6: [RFC 8200] § 4.5), one
//! path for both families ([`Family`]): the first fragment (offset 0, MF / M set) carries the
//! transport header (IPv6: right after the Fragment header) and goes through the conntrack
//! path like any packet of its flow; what the pipeline did to its IP header is then recorded
//! in the worker's [`crate::fragments`] table of its family under the datagram's identity
//! (source, destination, protocol, Identification — 16 bits in IPv4, 32 in IPv6), and each
//! later fragment is rewritten the same way at the IP layer only — addresses, TTL / Hop Limit,
//! IPv4's header checksum ([`Family::rewrite_header`]) — and sent to the same next hop.
//!
//! The transport checksum needs no work in later fragments: it sits in the first fragment
//! and covers the whole datagram, and NAT changes only the pseudo-header addresses and the
//! ports, which the first fragment's incremental update (RFC 1624) accounted for. Only TCP
//! and UDP are followed; SCTP's CRC32c covers the whole packet and cannot be recomputed from
//! one fragment (see [`crate::wire::sctp`]), and fragmented ICMP is not answered: both are
//! dropped as [`DropReason::Fragment`].
//!
//! A later fragment without a recorded first one — it arrived before the first (no
//! buffering: see [`crate::fragments`]), the first never came, the entry expired (30 s,
//! Linux `ipfrag_time`) or was evicted — is dropped as [`DropReason::FragmentNoFirst`]. With
//! several workers, every fragment of a datagram reaches the same worker: the AF_PACKET
//! steering program and NIC RSS both hash fragments by their addresses only (see
//! [`crate::io::fanout::steering_program`] for what that means for flows).
//!
//! [RFC 791]: https://www.rfc-editor.org/rfc/rfc791#section-3.2
//! [RFC 8200]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5

use std::net::Ipv4Addr;

use super::family::Family;
use super::link::{self, Rx};
use super::state::FragmentTarget;
use super::{Verdict, WorkerState};
use crate::counters::DropReason;
use crate::fragments::{FragmentKey, Insert};
use crate::table::Table;

/// A received fragment's place in its datagram.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fragment<A = Ipv4Addr> {
    /// The datagram's identity.
    pub key: FragmentKey<A>,
    /// Offset of this fragment's payload in the datagram, bytes.
    pub offset: u16,
    /// Payload bytes of this fragment.
    pub payload_len: u16,
    /// The MF flag.
    pub more: bool,
}

/// The source port, destination port and checksum of the UDP header at the start of a first
/// fragment's transport bytes `l4`, read without [`crate::wire::UdpPacket`]'s length check: a
/// first fragment holds the UDP header but not the Length bytes the header claims. `None`
/// when the fragment is shorter than the header.
pub(super) fn first_udp_header(l4: &[u8]) -> Option<(u16, u16, u16)> {
    match l4 {
        [a, b, c, d, _, _, e, f, ..] => {
            Some((u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]), u16::from_be_bytes([*e, *f])))
        }
        _ => None,
    }
}

/// Records that the first fragment `first` was forwarded with `target`, in the fragment table
/// of its family.
pub(super) fn record<A: Family>(now: u64, st: &mut WorkerState, first: &Fragment<A>, target: FragmentTarget<A>) {
    if A::fragments_mut(st).insert(now, first.key, target, u32::from(first.payload_len)) == Insert::Evicted {
        st.counters.fragment_evictions += 1;
    }
}

/// Forwards the later fragment `frag` (IP packet of `total` bytes with TTL / Hop Limit `ttl`) along
/// its datagram's first fragment, or drops it; counts it on the flow's front door while
/// `table` is the one the first fragment was counted under.
#[allow(clippy::too_many_arguments)]
pub(super) fn follow<A: Family>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    frag: &Fragment<A>,
    ttl: u8,
    total: usize,
) -> Verdict {
    if ttl <= 1 {
        return Verdict::Drop(DropReason::TtlExceeded);
    }
    let Some(t) =
        A::fragments_mut(st).follow(now, &frag.key, u32::from(frag.offset), u32::from(frag.payload_len), frag.more)
    else {
        return Verdict::Drop(DropReason::FragmentNoFirst);
    };
    let l3 = rx.l2_len;
    A::rewrite_header(&mut frame[l3..l3 + total], t.src, t.dst);
    let verdict = link::transmit(frame, rx, total, t.iface, t.mac, &st.host);
    if let Verdict::Transmit { .. } = verdict {
        st.counters.fragments_followed += 1;
        if let Some((index, generation)) = t.frontend {
            if generation == table.generation() as u32 {
                st.frontends.packet(index, t.original, total);
            }
        }
    }
    verdict
}
