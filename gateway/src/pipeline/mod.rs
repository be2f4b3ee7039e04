//! The data-plane core: [`process`] takes one received frame and decides what becomes of
//! it — forwarded with NAT, answered in place, or dropped under a named reason.
//!
//! # Contract
//!
//! `process(now, frame, meta, table, state)` is a pure function of its arguments: no I/O,
//! no clock (time is `now`, monotonic nanoseconds), no allocation, no locks. The same code
//! runs under every driver, the tests and the benchmarks. No input makes it panic: every
//! header is parsed with a checked view and anything malformed is a counted drop.
//!
//! The frame is rewritten in place inside `frame` (its buffer); the output may be longer
//! than the input (an ICMP error quoting the packet), up to `frame.len()`, which drivers
//! make at least [`MIN_BUFFER`] bytes.
//!
//! # What happens to a frame
//!
//! - The link-layer header is parsed once (`link`); every later offset counts from the
//!   length it found.
//! - ARP (RFC 826, `arp`): requests for the gateway's own addresses and for VIPs are
//!   answered in place; the sender's mapping is learned when it is on a connected subnet.
//! - IPv4 (RFC 791, `ipv4`) with TCP, UDP or SCTP (`flow`, `sctp`): the 5-tuple is looked up in this
//!   worker's conntrack, which indexes both directions of every flow. A hit in the original
//!   direction (client → VIP) is rewritten to SNAT address:port → endpoint:port and sent to
//!   the endpoint's next hop; a hit in the reply direction is rewritten back to VIP → client
//!   and routed to the client's next hop (the client itself on a connected subnet, whose MAC
//!   a new flow's first frame teaches when ARP has not). A miss looks up the front door
//!   (destination, protocol, port), picks the endpoint with the gateway's scheduler (by
//!   default on the Maglev ring of its service by the flow's 5-tuple hash; `backend`,
//!   [`crate::scheduler`]), allocates a SNAT port this worker owns, and
//!   records the flow. A front door without endpoints answers like kube-proxy's REJECT rule
//!   (`reject`): TCP RST (RFC 9293 § 3.10.7.1), else ICMP port unreachable (RFC 792,
//!   RFC 1812 § 4.3.2.3).
//! - IPv6 (RFC 8200, `ipv6`): the extension headers are walked to the upper layer, and TCP
//!   and UDP take the same conntrack path as IPv4 (`flow` is generic over the family, with
//!   a second conntrack per worker); a front door without endpoints answers TCP with a RST
//!   and anything else with ICMPv6 port unreachable (RFC 4443 § 3.1, code 4).
//! - Neighbor Discovery (RFC 4861, `ndp`): solicitations for the gateway's own IPv6
//!   addresses and for IPv6 VIPs are answered with a solicited advertisement (Override set;
//!   to all-nodes for Duplicate Address Detection); on-link senders and advertised targets
//!   are learned.
//! - ICMP echo requests (RFC 792, RFC 4443 § 4.1, `icmp`) to a VIP or own address are
//!   answered in place. ICMP and ICMPv6 errors quoting a packet of a tracked flow
//!   (`icmp_error`, one path for both families) are translated — outer and quoted headers —
//!   and forwarded to the flow's other end, so path-MTU discovery works through the gateway.
//! - IPv4 and IPv6 fragments (`fragment`): the first fragment of a TCP or UDP datagram goes
//!   through its flow; the later ones follow it through a per-worker fragment table per
//!   family.
//! - Under a SYN flood (`synproxy`), SYNs beyond a rate per worker are answered with SYN
//!   cookies and create nothing; a cookie's ACK opens the connection to the endpoint, whose
//!   SYN-ACK the gateway answers, and the connection's sequence numbers are translated.
//! - Next hops are resolved by ARP requests and Neighbor Solicitations the worker emits
//!   through [`poll_transmit`] (`resolve`), which also sends L2 mode's gratuitous ARPs and
//!   unsolicited Neighbor Advertisements for VIPs this gateway took over (`gratuitous`);
//!   in L2 mode ARP and NDP answer only for the VIPs this gateway owns.
//! - Flows time out after idle periods following Linux conntrack's defaults; expiry runs
//!   in bounded steps through [`poll_expire`], the whole table once a second
//!   ([`ExpiryPace`]) (`expire`).
//!
//! # Modules
//!
//! Besides `frame`, `hint`, `state` and `family`, which the steps share, each module holds
//! one step of the path above. The modules form layers, each using only the ones before it
//! in this list (`gateway/tests/module_cycles.rs` checks that there is no cycle):
//!
//! - leaves: `frame` (what every step shares: [`Meta`], [`Verdict`], [`MIN_BUFFER`], the
//!   TTL of originated packets), `hint` (what [`process_burst`] finds ahead for a frame,
//!   and the transport-port read both families' early parse shares), `sctp`;
//! - `state`: the per-worker and shared state, with the entries of the worker's fragment
//!   tables and resolution queue;
//! - `link`, `family` (the per-family accessors), and the steps that use only these: `arp`,
//!   `ndp` (which asks `arp` what is answered for), `reject`, `gratuitous` and `resolve` (both
//!   send `arp`'s requests; `resolve` polls `gratuitous` first), `synproxy`, then `backend`,
//!   `expire`, `fragment`;
//! - `flow`, then `icmp_error`, then `icmp`, then the per-family parsers `ipv4`, `ipv6`;
//! - this module, which holds only [`process`] and its dispatch by EtherType;
//! - `lean`, the lean established path: a frame of an established TCP or UDP flow (IPv4
//!   or IPv6) that `burst` parsed once and found the flow of is forwarded there, with
//!   exactly the result [`process`] would give it, or handed to [`process`] unchanged;
//! - `burst`, which runs [`process`] over a burst with its lookups' memory latency
//!   overlapped, using the per-family parsers for its early parse, and `lean` for the
//!   frames it may take.
//!
//! Only [`process`], [`process_burst`], [`poll_transmit`], [`poll_expire`] and its
//! [`ExpiryPace`], the state types and
//! the driver-facing [`Meta`] / [`Verdict`] are public.

mod arp;
mod backend;
mod bits;
mod burst;
mod expire;
mod family;
mod flow;
mod fragment;
mod frame;
mod gratuitous;
mod hint;
mod icmp;
mod icmp_error;
mod ipv4;
mod ipv6;
mod lean;
mod link;
mod ndp;
mod reject;
mod resolve;
mod sctp;
mod state;
mod synproxy;

pub use burst::process_burst;
pub use expire::{poll_expire, ExpiryPace};
pub use frame::{Meta, Verdict, MIN_BUFFER};
pub use hint::PREFETCH_WINDOW;
pub use resolve::{poll_transmit, POLL_TRANSMIT_LEN};
pub use state::{Shared, WorkerState};

use crate::counters::DropReason;
use crate::table::Table;
use crate::wire::EtherType;

/// Processes one received frame. See the module documentation.
#[inline]
pub fn process(now: u64, frame: &mut [u8], meta: &Meta, table: &Table, state: &mut WorkerState) -> Verdict {
    state.counters.rx_frames += 1;
    let verdict = handle_frame(now, frame, meta, table, state);
    match verdict {
        Verdict::Transmit { .. } => state.counters.tx_frames += 1,
        Verdict::Drop(reason) => state.counters.drop(reason),
        Verdict::Consumed => {}
    }
    verdict
}

fn handle_frame(now: u64, frame: &mut [u8], meta: &Meta, table: &Table, st: &mut WorkerState) -> Verdict {
    let (rx, ethertype) = match link::receive(frame, meta, &st.host) {
        Ok(r) => r,
        Err(reason) => return Verdict::Drop(reason),
    };
    match ethertype {
        EtherType::Arp => arp::handle(now, frame, &rx, table, st),
        EtherType::Ipv4 => ipv4::handle(now, frame, &rx, table, st),
        EtherType::Ipv6 => ipv6::handle(now, frame, &rx, table, st),
        _ => Verdict::Drop(DropReason::UnsupportedEtherType),
    }
}

#[cfg(test)]
mod tests;
