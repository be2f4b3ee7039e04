//! SCTP through the conntrack path ([RFC 9260]): the common header puts the ports where TCP
//! and UDP have them, so SCTP flows are tracked, steered and translated like theirs. What
//! differs is read here: the CRC32c is checked on arrival (a packet with a wrong one is
//! discarded, [RFC 9260] § 6.8, as Linux conntrack does with `nf_conntrack_checksum`) and
//! recomputed after the rewrite (`crate::nat`); the chunks say when an association ends.
//!
//! Idle timeouts follow Linux's SCTP conntrack (`nf_conntrack_proto_sctp.c` since 6.2): until
//! the endpoint has answered — its first answer (the INIT ACK) included, as Linux stays in
//! COOKIE-WAIT then — [`COOKIE_WAIT_NS`] (3 s, `timeout_cookie_wait`); from the next packet
//! on, [`ESTABLISHED_NS`] (210 s = heartbeat interval × path retransmissions + RTO.max,
//! `timeout_established`); after an ABORT or SHUTDOWN COMPLETE chunk in either direction,
//! [`CLOSED_NS`] (10 s, `timeout_closed`), so a torn-down association frees its SNAT port
//! soon instead of lingering. A later INIT on the same ports starts a new association and
//! lifts the closed state. The intermediate shutdown states Linux also tracks (3 s each) are
//! not distinguished: a graceful close ends with SHUTDOWN COMPLETE, which is what matters.
//!
//! The closed state is kept in the flow's [`FlowState::tcp_state`] as [`TcpState::Close`]
//! (unused otherwise by SCTP flows, which stay [`TcpState::None`]): no byte more per flow.
//! A flow becomes assured (kept under conntrack pressure) once the endpoint has answered and
//! while the association is open, as Linux's SCTP tracker assures ESTABLISHED entries.
//!
//! A packet of an unknown association creates a flow unless it carries ABORT or SHUTDOWN
//! COMPLETE (like a stray TCP RST, it must not): an association survives a gateway restart
//! on the same Maglev choice, as TCP does with `nf_conntrack_tcp_loose`.
//!
//! [RFC 9260]: https://www.rfc-editor.org/rfc/rfc9260

use crate::conntrack::tcp::TcpState;
use crate::conntrack::{Deadline, Direction, FlowState};
use crate::wire::{ParseError, SctpChunkType, SctpPacket};

/// Idle timeout until the endpoint's first answer, ns (Linux `timeout_cookie_wait`).
pub(super) const COOKIE_WAIT_NS: u64 = 3_000_000_000;
/// Idle timeout of an answered association, ns (Linux `timeout_established`).
pub(super) const ESTABLISHED_NS: u64 = 210_000_000_000;
/// Idle timeout after ABORT or SHUTDOWN COMPLETE, ns (Linux `timeout_closed`).
pub(super) const CLOSED_NS: u64 = 10_000_000_000;

/// What the tracker needs from one SCTP packet's chunks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Chunks {
    /// An INIT chunk: a new association on these ports.
    pub init: bool,
    /// An ABORT or SHUTDOWN COMPLETE chunk: the association is over.
    pub close: bool,
}

/// Why an SCTP packet is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Shorter than the common header.
    Malformed,
    /// Wrong CRC32c.
    Checksum,
}

/// Reads the ports and chunk summary of the SCTP packet `l4` (the whole IP payload), after
/// checking its CRC32c unless `csum_partial` (the sender left the CRC to an offload that a
/// veth never performed: the rewrite computes it anyway).
pub(super) fn parse(l4: &[u8], csum_partial: bool) -> Result<(u16, u16, Chunks), Refused> {
    let p = SctpPacket::new_checked(l4).map_err(|_: ParseError| Refused::Malformed)?;
    if !csum_partial && !p.verify_checksum() {
        return Err(Refused::Checksum);
    }
    let mut chunks = Chunks::default();
    for c in p.chunks() {
        match c.chunk_type {
            SctpChunkType::Init => chunks.init = true,
            SctpChunkType::Abort | SctpChunkType::ShutdownComplete => chunks.close = true,
            _ => {}
        }
    }
    Ok((p.src_port(), p.dst_port(), chunks))
}

/// Applies an SCTP packet travelling in direction `dir` with `chunks` to a tracked flow at
/// `now`: closed state, idle deadline, `seen_reply`, `assured`.
pub(super) fn track(state: &mut FlowState, dir: Direction, chunks: Chunks, now: u64) {
    let was_closed = state.tcp_state() == TcpState::Close;
    let (timeout, closed) = timeout_ns(was_closed, state.seen_reply(), chunks);
    state.set_tcp_state(if closed { TcpState::Close } else { TcpState::None });
    state.deadline = Deadline::after(now, timeout);
    state.set_assured(state.seen_reply() && !closed);
    // Like Linux's IPS_SEEN_REPLY: set after the tracker ran, so the first answer still
    // counts as unanswered for its own timeout.
    if dir == Direction::Reply {
        state.set_seen_reply(true);
    }
}

/// The idle timeout after a packet, given whether the association was already closed,
/// whether the endpoint has answered, and the packet's chunks; and the new closed state.
pub(super) fn timeout_ns(closed: bool, seen_reply: bool, chunks: Chunks) -> (u64, bool) {
    let closed = chunks.close || (closed && !chunks.init);
    let t = if closed {
        CLOSED_NS
    } else if seen_reply {
        ESTABLISHED_NS
    } else {
        COOKIE_WAIT_NS
    };
    (t, closed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_follow_the_association() {
        let none = Chunks::default();
        let init = Chunks { init: true, close: false };
        let abort = Chunks { init: false, close: true };
        assert_eq!(timeout_ns(false, false, init), (COOKIE_WAIT_NS, false));
        assert_eq!(timeout_ns(false, true, none), (ESTABLISHED_NS, false));
        assert_eq!(timeout_ns(false, true, abort), (CLOSED_NS, true));
        assert_eq!(timeout_ns(true, true, none), (CLOSED_NS, true), "stays closed");
        assert_eq!(timeout_ns(true, true, init), (ESTABLISHED_NS, false), "a new INIT reopens");
    }

    #[test]
    fn parse_checks_the_crc_unless_partial() {
        let mut b = vec![0u8; 12 + 4 + 4];
        b[12..16].copy_from_slice(&[0, 0, 0, 4]); // an empty DATA chunk
        b[16..20].copy_from_slice(&[6, 0, 0, 4]); // ABORT
        {
            let mut p = SctpPacket::new_unchecked(&mut b[..]);
            p.set_src_port(1);
            p.set_dst_port(2);
            p.fill_checksum();
        }
        assert_eq!(parse(&b, false), Ok((1, 2, Chunks { init: false, close: true })));
        b[8] ^= 0xff;
        assert_eq!(parse(&b, false), Err(Refused::Checksum));
        assert!(parse(&b, true).is_ok());
        assert_eq!(parse(&b[..11], true), Err(Refused::Malformed));
    }
}
