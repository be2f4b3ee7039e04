//! TCP connection tracking states and the pure transition function between them, after
//! Linux's `nf_conntrack_proto_tcp.c` (`tcp_conntracks`, `get_conntrack_index`,
//! `nf_conntrack_tcp_packet`).
//!
//! The gateway is a man in the middle that sees both directions of every flow (full NAT
//! keeps them on one worker). Like Linux it guesses each connection's state from the
//! control flags of the segments it forwards, and like Linux it also tracks each
//! direction's sequence window (`super::window`, after `tcp_in_window`): a segment moves
//! the state only if it fits the windows (`super::track_tcp` applies both; with
//! `[conntrack] tcp_be_liberal`, as with Linux's `nf_conntrack_tcp_be_liberal=1`, segments
//! outside them are let through but teach nothing). This module is the flags half: the
//! states and Linux's table of transitions between them.
//!
//! [`transition`] is Linux's table verbatim, indexed by direction, segment class and state;
//! its two special results are [`Transition::Ignore`] (`sIG`: forward, change nothing, do
//! not refresh the timeout — the peers may know better than the gateway) and
//! [`Transition::Invalid`] (`sIV`: the segment does not fit the connection; Linux marks it
//! INVALID and kube-proxy's `-m conntrack --ctstate INVALID -j DROP` rule drops it).

use crate::wire::TcpFlags;

/// A tracked TCP connection's state, numbered as Linux's `enum tcp_conntrack`
/// (`include/uapi/linux/netfilter/nf_conntrack_tcp.h`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TcpState {
    /// No segment seen (not TCP, or not tracked yet).
    #[default]
    None = 0,
    /// SYN seen from the client.
    SynSent = 1,
    /// SYN+ACK seen from the endpoint.
    SynRecv = 2,
    /// The handshake's ACK seen (or a connection picked up mid-stream).
    Established = 3,
    /// A FIN seen from one side.
    FinWait = 4,
    /// The first FIN acknowledged by the other side.
    CloseWait = 5,
    /// FINs seen from both sides, waiting for the last ACK.
    LastAck = 6,
    /// The last ACK seen: closed, lingering 2·MSL (RFC 9293 § 3.6.1).
    TimeWait = 7,
    /// Reset (RST seen).
    Close = 8,
    /// SYN seen from the endpoint after the client's: simultaneous open.
    SynSent2 = 9,
}

impl TcpState {
    /// Every state, in Linux's order.
    pub const ALL: [TcpState; 10] = [
        TcpState::None,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::SynSent2,
    ];

    /// Linux's name (`tcp_conntrack_names`), as `conntrack -L` prints it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            TcpState::None => "NONE",
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::SynSent2 => "SYN_SENT2",
        }
    }
}

/// Whether a TCP stack can send a segment with `flags`: Linux's `tcp_valid_flags` table
/// (`tcp_error` in `nf_conntrack_proto_tcp.c`), with PSH, ECE and CWR ignored — SYN,
/// SYN+ACK, RST, RST+ACK, FIN+ACK and ACK, and URG with SYN, FIN+ACK or ACK. Anything else (SYN+FIN, a FIN without ACK, no flag, "Xmas") is
/// INVALID and dropped, as kube-proxy drops INVALID packets.
#[inline]
#[must_use]
pub fn valid_flags(flags: TcpFlags) -> bool {
    const FIN: u8 = TcpFlags::FIN.0;
    const SYN: u8 = TcpFlags::SYN.0;
    const RST: u8 = TcpFlags::RST.0;
    const ACK: u8 = TcpFlags::ACK.0;
    const URG: u8 = TcpFlags::URG.0;
    /// The valid combinations as a set of bits: the flags left (FIN, SYN, RST, ACK, URG)
    /// are below 64, so one shift and mask tests one (a search of the list was a `memchr`
    /// call of up to 47 instructions a segment).
    const VALID: u64 = {
        let valid = [SYN, SYN | URG, SYN | ACK, RST, RST | ACK, FIN | ACK, FIN | ACK | URG, ACK, ACK | URG];
        let mut set = 0u64;
        let mut i = 0;
        while i < valid.len() {
            set |= 1 << valid[i];
            i += 1;
        }
        set
    };
    let f = flags.0 & !(TcpFlags::PSH.0 | TcpFlags::ECE.0 | TcpFlags::CWR.0);
    debug_assert!(f < 64);
    // A SYN first: a new flow's segment (the set's test moved `flow::handle`'s registers so
    // that a SYN cost 19 instructions more).
    f == SYN || VALID >> f & 1 != 0
}

/// Which control flags a segment carries, as Linux's `get_conntrack_index` ranks them:
/// RST over SYN over FIN over ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Segment {
    /// SYN without ACK (`TCP_SYN_SET`).
    Syn = 0,
    /// SYN with ACK (`TCP_SYNACK_SET`).
    SynAck = 1,
    /// FIN, with or without ACK (`TCP_FIN_SET`).
    Fin = 2,
    /// ACK without SYN, FIN or RST (`TCP_ACK_SET`).
    Ack = 3,
    /// RST, whatever else is set (`TCP_RST_SET`).
    Rst = 4,
    /// None of SYN, FIN, ACK, RST (`TCP_NONE_SET`).
    None = 5,
}

impl Segment {
    /// The class of a segment with `flags`.
    #[inline]
    #[must_use]
    pub fn of(flags: TcpFlags) -> Segment {
        if flags.contains(TcpFlags::RST) {
            Segment::Rst
        } else if flags.contains(TcpFlags::SYN) {
            if flags.contains(TcpFlags::ACK) {
                Segment::SynAck
            } else {
                Segment::Syn
            }
        } else if flags.contains(TcpFlags::FIN) {
            Segment::Fin
        } else if flags.contains(TcpFlags::ACK) {
            Segment::Ack
        } else {
            Segment::None
        }
    }
}

/// What a segment does to a connection: see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The connection is now in this state (possibly the same one).
    To(TcpState),
    /// Forward the segment, keep the state and the deadline (`sIG`).
    Ignore,
    /// The segment does not fit the connection (`sIV`).
    Invalid,
}

use super::Direction;

use TcpState::{
    Close as CL_, CloseWait as CW_, Established as ES_, FinWait as FW_, LastAck as LA_, SynRecv as SR_, SynSent as SS_,
    SynSent2 as S2_, TimeWait as TW_,
};
use Transition::{Ignore as IG, Invalid as IV};
const SS: Transition = Transition::To(SS_);
const SR: Transition = Transition::To(SR_);
const ES: Transition = Transition::To(ES_);
const FW: Transition = Transition::To(FW_);
const CW: Transition = Transition::To(CW_);
const LA: Transition = Transition::To(LA_);
const TW: Transition = Transition::To(TW_);
const CL: Transition = Transition::To(CL_);
const S2: Transition = Transition::To(S2_);

/// Linux's `tcp_conntracks[direction][segment][state]` (Linux 6.1), with the comments
/// that justify each cell kept in the Linux source. Columns: NONE, SYN_SENT, SYN_RECV,
/// ESTABLISHED, FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE, SYN_SENT2.
#[rustfmt::skip]
const TCP_CONNTRACKS: [[[Transition; 10]; 6]; 2] = [
    // Original direction (client → VIP).
    [
        /* syn    */ [SS, SS, IG, IG, IG, IG, IG, SS, SS, S2],
        /* synack */ [IV, IV, SR, IV, IV, IV, IV, IV, IV, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [ES, IV, ES, ES, CW, CW, TW, TW, CL, IV],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
    // Reply direction (endpoint → SNAT address).
    [
        /* syn    */ [IV, S2, IV, IV, IV, IV, IV, SS, IV, S2],
        /* synack */ [IV, SR, IG, IG, IG, IG, IG, IG, IG, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [IV, IG, SR, ES, CW, CW, TW, TW, CL, IG],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
];

/// The state a `segment` travelling in `direction` (the client's, `IP_CT_DIR_ORIGINAL`, or
/// the endpoint's, `IP_CT_DIR_REPLY`) moves a connection in `state` to:
/// Linux's `tcp_conntracks` table lookup, nothing else. The rules Linux applies around
/// the lookup (reopening from TIME_WAIT, timeouts, RST before any reply) are in
/// [`super::track_tcp`]. Pure; O(1).
#[inline]
#[must_use]
pub fn transition(state: TcpState, direction: Direction, segment: Segment) -> Transition {
    TCP_CONNTRACKS[direction as usize][segment as usize][state as usize]
}

/// Whether `transition`, from a connection in `old`, opens a new connection on the tuple of
/// a closed one: SYN_SENT from TIME_WAIT or CLOSE (Linux `tcp_packet`: a SYN_SENT reached
/// from either destroys the old connection and creates a new one). A client's segment reopens ([`super::Tracked::Reopen`]); an
/// endpoint's does not ([`super::track_tcp`]). Pure; O(1).
#[inline(always)]
#[must_use]
pub fn reopens(old: TcpState, transition: Transition) -> bool {
    transition == Transition::To(TcpState::SynSent) && matches!(old, TcpState::TimeWait | TcpState::Close)
}

/// The state of a connection the gateway has not seen yet, from its first segment (from
/// the client): SYN opens it in SYN_SENT, a bare ACK picks it up mid-stream in ESTABLISHED
/// (Linux `tcp_new` with `nf_conntrack_tcp_loose=1`, the default, so a restarted gateway
/// keeps most connections); anything else (SYN+ACK, FIN, RST, no flags) creates nothing:
/// `None`.
#[inline]
#[must_use]
pub fn initial(segment: Segment) -> Option<TcpState> {
    match transition(TcpState::None, Direction::Original, segment) {
        Transition::To(state) => Some(state),
        Transition::Ignore | Transition::Invalid => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{Original as O, Reply as R};
    use Segment::{Ack, Fin, None as NoFlags, Rst, Syn, SynAck};
    use TcpState::*;

    fn to(s: TcpState) -> Transition {
        Transition::To(s)
    }

    #[test]
    fn segment_classes_rank_rst_syn_fin_ack() {
        let f = |bits: &[TcpFlags]| Segment::of(TcpFlags(bits.iter().fold(0, |a, b| a | b.0)));
        assert_eq!(f(&[TcpFlags::SYN]), Syn);
        assert_eq!(f(&[TcpFlags::SYN, TcpFlags::ACK]), SynAck);
        assert_eq!(f(&[TcpFlags::SYN, TcpFlags::ACK, TcpFlags::ECE]), SynAck);
        assert_eq!(f(&[TcpFlags::FIN, TcpFlags::ACK]), Fin);
        assert_eq!(f(&[TcpFlags::FIN]), Fin);
        assert_eq!(f(&[TcpFlags::ACK, TcpFlags::PSH]), Ack);
        assert_eq!(f(&[TcpFlags::RST, TcpFlags::ACK]), Rst);
        assert_eq!(f(&[TcpFlags::RST, TcpFlags::SYN, TcpFlags::FIN]), Rst);
        assert_eq!(f(&[TcpFlags::SYN, TcpFlags::FIN]), Syn);
        assert_eq!(f(&[]), NoFlags);
        assert_eq!(f(&[TcpFlags::PSH, TcpFlags::URG]), NoFlags);
    }

    /// One row per transition a normal connection takes, then the closing variants.
    #[test]
    fn handshake_and_close_transitions() {
        let cases = [
            // Three-way handshake (RFC 9293 § 3.5).
            (SynSent, O, Syn, to(SynSent)), // retransmitted SYN
            (SynSent, R, SynAck, to(SynRecv)),
            (SynRecv, O, Ack, to(Established)),
            (SynRecv, R, SynAck, Transition::Ignore), // retransmitted SYN+ACK
            (SynRecv, R, Ack, to(SynRecv)),           // might answer a late resent SYN
            (Established, O, Ack, to(Established)),
            (Established, R, Ack, to(Established)),
            // Client closes first.
            (Established, O, Fin, to(FinWait)),
            (FinWait, R, Ack, to(CloseWait)),
            (CloseWait, R, Fin, to(LastAck)),
            (LastAck, O, Ack, to(TimeWait)),
            (TimeWait, O, Ack, to(TimeWait)), // retransmitted last ACK
            // Endpoint closes first; FINs cross.
            (Established, R, Fin, to(FinWait)),
            (FinWait, O, Fin, to(LastAck)),
            (LastAck, R, Ack, to(TimeWait)),
            (LastAck, O, Fin, to(LastAck)), // retransmitted FIN
            (SynRecv, O, Fin, to(FinWait)),
            (TimeWait, R, Fin, to(TimeWait)),
            // RST from either side closes whatever was open.
            (SynSent, R, Rst, to(Close)),
            (SynRecv, O, Rst, to(Close)),
            (Established, O, Rst, to(Close)),
            (Established, R, Rst, to(Close)),
            (CloseWait, R, Rst, to(Close)),
            (TimeWait, O, Rst, to(Close)),
            (Close, O, Ack, to(Close)),
            (Close, R, Fin, to(Close)),
            // A new SYN from the client on a closed connection reopens it (RFC 1122
            // § 4.2.2.13); from the endpoint, only after TIME_WAIT.
            (TimeWait, O, Syn, to(SynSent)),
            (Close, O, Syn, to(SynSent)),
            (TimeWait, R, Syn, to(SynSent)),
            (Close, R, Syn, Transition::Invalid),
            // SYNs inside a live connection: the receiver answers with a RST or a
            // challenge ACK, which the gateway then sees.
            (SynRecv, O, Syn, Transition::Ignore),
            (Established, O, Syn, Transition::Ignore),
            (Established, R, SynAck, Transition::Ignore),
            (SynSent, R, Ack, Transition::Ignore), // half-open connection, maybe
            // Simultaneous open.
            (SynSent, R, Syn, to(SynSent2)),
            (SynSent2, O, SynAck, to(SynRecv)),
            (SynSent2, R, SynAck, to(SynRecv)),
            (SynSent2, O, Syn, to(SynSent2)),
            // Invalid: no reply yet, or flags that do not fit.
            (SynSent, O, Ack, Transition::Invalid),
            (SynSent, O, Fin, Transition::Invalid),
            (SynSent, O, SynAck, Transition::Invalid),
            (Established, O, SynAck, Transition::Invalid),
            (Established, R, Syn, Transition::Invalid),
            (None, R, Ack, Transition::Invalid),
            (None, O, Rst, Transition::Invalid),
        ];
        for (state, direction, segment, want) in cases {
            assert_eq!(transition(state, direction, segment), want, "{} {direction:?} {segment:?}", state.name());
        }
    }

    #[test]
    fn segments_without_flags_are_always_invalid() {
        for state in TcpState::ALL {
            for direction in [O, R] {
                assert_eq!(transition(state, direction, NoFlags), Transition::Invalid);
            }
        }
    }

    #[test]
    fn rst_closes_every_state_but_none() {
        for state in TcpState::ALL {
            for direction in [O, R] {
                let want = if state == None { Transition::Invalid } else { to(Close) };
                assert_eq!(transition(state, direction, Rst), want, "{}", state.name());
            }
        }
    }

    #[test]
    fn only_syn_and_ack_open_a_connection() {
        assert_eq!(initial(Syn), Some(SynSent));
        assert_eq!(initial(Ack), Some(Established));
        for segment in [SynAck, Fin, Rst, NoFlags] {
            assert_eq!(initial(segment), Option::None, "{segment:?}");
        }
    }

    #[test]
    fn states_are_numbered_as_in_linux() {
        for (i, state) in TcpState::ALL.iter().enumerate() {
            assert_eq!(*state as usize, i);
        }
        assert_eq!(TimeWait.name(), "TIME_WAIT");
    }

    #[test]
    fn flag_combinations_no_stack_sends_are_invalid() {
        let f = |bits: u8| valid_flags(TcpFlags(bits));
        for ok in [0x02, 0x12, 0x04, 0x14, 0x11, 0x10, 0x18, 0x19, 0x30, 0x22, 0xc2, 0x52] {
            assert!(f(ok), "{ok:#04x}");
        }
        // SYN+FIN, FIN alone, none, Xmas (FIN+PSH+URG), SYN+RST, SYN+ACK+URG.
        for bad in [0x03, 0x01, 0x00, 0x29, 0x06, 0x32, 0x08] {
            assert!(!f(bad), "{bad:#04x}");
        }
    }

    #[test]
    fn valid_flags_is_linux_list_for_every_flag_byte() {
        // Linux's `tcp_valid_flags`, PSH, ECE and CWR ignored: FIN 0x01, SYN 0x02, RST 0x04,
        // ACK 0x10, URG 0x20.
        let linux = [0x02, 0x22, 0x12, 0x04, 0x14, 0x11, 0x31, 0x10, 0x30];
        for bits in 0..=u8::MAX {
            assert_eq!(valid_flags(TcpFlags(bits)), linux.contains(&(bits & 0x37)), "{bits:#04x}");
        }
    }
}
