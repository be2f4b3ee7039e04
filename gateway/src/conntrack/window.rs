//! TCP sequence-window tracking, after Linux's `tcp_in_window` and the RST rules of
//! `nf_conntrack_tcp_packet` (`net/netfilter/nf_conntrack_proto_tcp.c`): the gateway sees
//! both directions of every connection, so it knows which sequence and acknowledgement
//! numbers each end can accept, and forwards only segments that fit. A blind attacker who
//! knows a connection's addresses and ports but not its sequence numbers cannot inject a
//! segment, and cannot reset it: a RST is honoured only at the exact sequence number the
//! receiver expects (RFC 5961 § 3.2); one merely in the window is forwarded — the endpoint
//! answers it with a challenge ACK — but does not close the flow.
//!
//! # Contract
//!
//! - [`TcpWindows`] holds, per direction, what Linux's `struct ip_ct_tcp_state` holds:
//!   `end` (the highest SEG.SEQ + SEG.LEN sent), `maxend` (the highest SEG.ACK + SEG.WND
//!   the other end advertised: how far this end may send), `maxwin` (the largest window
//!   this end advertised, scaled), `maxack` (the highest SEG.ACK this end sent) — the
//!   [`WindowBounds`], 32 bytes — and the window scale it announced and flags — the
//!   [`WindowFlags`], one byte per direction. All zero for a new flow. The table keeps the
//!   two parts apart (the flags in the flow's record) and lends them as a
//!   [`TcpWindowsMut`].
//! - [`check`] is a pure function of (windows, direction, state, segment): it initialises a
//!   direction from its first segment (a SYN or SYN+ACK, or anything for a connection picked
//!   up mid-stream, which is then tracked liberally, as Linux does), applies Linux's four
//!   bounds, and on success moves the windows forward. It never changes the windows of a
//!   segment it refuses.
//! - Not modelled: SACK blocks (the acknowledgement bound uses SEG.ACK, which is never above
//!   the highest SACK edge, so only an acknowledgement more than a window behind could be
//!   refused where Linux accepts it), retransmission counting (`nf_conntrack_tcp_max_retrans`),
//!   and Linux's `last_index` bookkeeping: a RST right after its sender's own data ("part of
//!   a train") is recognised by its sequence number equalling the sender's `end`.

use super::tcp::{Segment, TcpState};
use super::Direction;
use crate::wire::TcpFlags;

/// The window-tracking fields of one TCP segment, as received: [RFC 9293 § 3.1] names.
///
/// [RFC 9293 § 3.1]: https://www.rfc-editor.org/rfc/rfc9293#section-3.1
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSeq {
    /// Control flags.
    pub flags: TcpFlags,
    /// SEG.SEQ.
    pub seq: u32,
    /// SEG.ACK (meaningful when ACK is set).
    pub ack: u32,
    /// SEG.WND as carried (unscaled).
    pub window: u16,
    /// SEG.LEN: data octets plus one for SYN and one for FIN ([RFC 9293 § 3.4]).
    ///
    /// [RFC 9293 § 3.4]: https://www.rfc-editor.org/rfc/rfc9293#section-3.4
    pub len: u32,
    /// The Window Scale option's shift count ([RFC 7323 § 2]), read from SYN segments only
    /// (it is ignored on others); capped at 14 as the RFC says.
    ///
    /// [RFC 7323 § 2]: https://www.rfc-editor.org/rfc/rfc7323#section-2
    pub wscale: Option<u8>,
}

impl TcpSeq {
    /// SEG.SEQ + SEG.LEN: the sequence number after the segment.
    #[inline]
    #[must_use]
    pub fn end(&self) -> u32 {
        self.seq.wrapping_add(self.len)
    }
}

/// The Window Scale option's shift count in the options of a TCP header (`options`: the
/// bytes after the fixed 20), or `None` when it is absent or the options are malformed
/// ([RFC 7323 § 2.2]; kind 3, length 3; shifts above 14 are used as 14, § 2.3).
///
/// [RFC 7323 § 2.2]: https://www.rfc-editor.org/rfc/rfc7323#section-2.2
#[must_use]
pub fn window_scale_option(options: &[u8]) -> Option<u8> {
    match crate::wire::tcp::option(options, 3)? {
        &[shift] => Some(shift.min(MAX_WSCALE)),
        _ => None,
    }
}

/// Largest Window Scale shift ([RFC 7323 § 2.3]).
///
/// [RFC 7323 § 2.3]: https://www.rfc-editor.org/rfc/rfc7323#section-2.3
const MAX_WSCALE: u8 = 14;

/// Bits 0–3 of a direction's [`WindowFlags`] byte: the Window Scale shift it announced
/// (0–14, Linux `td_scale`).
const SCALE: u8 = 0x0f;
/// The direction announced a Window Scale option in its SYN (Linux `IP_CT_TCP_FLAG_WINDOW_SCALE`).
const WSCALE: u8 = 1 << 4;
/// `maxack` holds an acknowledgement this direction sent (Linux `IP_CT_TCP_FLAG_MAXACK_SET`).
const MAXACK_SET: u8 = 1 << 5;
/// Out-of-window segments are accepted (Linux `IP_CT_TCP_FLAG_BE_LIBERAL`): set on both
/// directions of a connection picked up mid-stream, whose window scales are unknown.
const LIBERAL: u8 = 1 << 6;

/// Acknowledgements further behind than this are refused when the sender never advertised
/// a window (Linux `MAXACKWINDOW`'s fallback, 66 000 octets).
const MAX_ACK_WINDOW_DEFAULT: u32 = 66_000;

/// Both directions' window state of one TCP flow (index 0: original, 1: reply), by value:
/// see the module documentation. All zero for a new flow. The table stores it in two
/// parts — the sequence bounds ([`WindowBounds`], 32 bytes, in an array of their own that
/// UDP never touches) and the scales and flags ([`WindowFlags`], 2 bytes, in the flow's
/// record) — and lends them as a [`TcpWindowsMut`]; this whole is what tests and
/// diagnostics ([`super::Conntrack::tcp_windows`]) hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpWindows {
    /// The sequence bounds.
    pub bounds: WindowBounds,
    /// The window scales and flags.
    pub flags: WindowFlags,
}

/// The sequence bounds of both directions of a TCP flow (index 0: original, 1: reply), as
/// Linux's `struct ip_ct_tcp_state` holds them: `end` (the highest SEG.SEQ + SEG.LEN
/// sent), `maxend` (the highest SEG.ACK + SEG.WND the other end advertised), `maxwin` (the
/// largest window this end advertised, scaled), `maxack` (the highest SEG.ACK this end
/// sent). 32 bytes, the last part of the flow's conntrack record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct WindowBounds {
    end: [u32; 2],
    maxend: [u32; 2],
    maxwin: [u32; 2],
    maxack: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<WindowBounds>() == 32, "windows: 32 B per flow (conntrack Layout)");

impl WindowBounds {
    /// A new flow's: every bound 0 (nothing seen yet), as [`WindowBounds::default`].
    pub const NONE: Self = WindowBounds { end: [0; 2], maxend: [0; 2], maxwin: [0; 2], maxack: [0; 2] };
}

/// Per direction (index 0: original, 1: reply), one byte: the Window Scale shift the
/// direction announced in bits 0–3 (Linux `td_scale`, at most 14) and Linux's
/// `IP_CT_TCP_FLAG_*` flags it uses in bits 4–6 (window scale announced, `maxack` set, be
/// liberal). 2 bytes, kept in the flow's record; any byte value is a valid one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct WindowFlags([u8; 2]);

const _: () = assert!(std::mem::size_of::<WindowFlags>() == 2, "2 B of the conntrack record");

impl WindowFlags {
    /// A new flow's: no scale, no flag.
    pub const NONE: Self = WindowFlags([0; 2]);
}

/// A flow's [`TcpWindows`] where the table keeps them, borrowed: its [`WindowBounds`] and
/// [`WindowFlags`]. What [`check`] and [`check_ack`] read and move forward (two pointers,
/// passed by value).
#[derive(Debug)]
pub struct TcpWindowsMut<'a> {
    bounds: &'a mut WindowBounds,
    flags: &'a mut WindowFlags,
}

impl<'a> TcpWindowsMut<'a> {
    /// The window state made of `bounds` and `flags` (the table's two arrays, or a
    /// [`TcpWindows`]' two parts).
    #[inline(always)]
    #[must_use]
    pub fn new(bounds: &'a mut WindowBounds, flags: &'a mut WindowFlags) -> Self {
        Self { bounds, flags }
    }

    /// Makes both directions liberal from now on (out-of-window segments accepted; the RST
    /// rule still applies), keeping what is known.
    #[inline(always)]
    pub fn make_liberal(&mut self) {
        self.flags.0 = [self.flags.0[0] | LIBERAL, self.flags.0[1] | LIBERAL];
    }

    /// The Window Scale shift of direction `s` (0 when scaling is not in effect).
    #[inline(always)]
    fn scale(&self, s: usize) -> u8 {
        self.flags.0[s] & SCALE
    }

    /// Whether direction `s` has flag `flag`.
    #[inline(always)]
    fn has(&self, s: usize, flag: u8) -> bool {
        self.flags.0[s] & flag != 0
    }

    /// Initialises the original direction from the client's SYN `seg` that opens a flow
    /// (windows as inserted): what [`check`] does with such a segment
    /// ([`super::track::open_tcp`]).
    #[inline]
    pub fn open_original(&mut self, seg: &TcpSeq) {
        self.init_from_syn(0, seg);
    }

    /// Restarts the windows for a new connection whose client SYN `syn` was ignored
    /// ([`super::resync`]) and which the endpoint's SYN+ACK now answers: the client's
    /// direction from the recorded SYN (end, window at least 1, Window Scale; its flags
    /// cleared but for the scale's), the endpoint's emptied, to be initialised by the
    /// SYN+ACK ([`check`] in state SYN_SENT). Linux's `TCP_CONNTRACK_IGNORE` case of
    /// `nf_conntrack_tcp_packet`, which keeps the client's `td_maxack` (not in force: its
    /// flag is cleared).
    pub fn restart_from_ignored_syn(&mut self, syn: &super::resync::IgnoredSyn) {
        let (o, r) = (Direction::Original as usize, Direction::Reply as usize);
        self.bounds.end[o] = syn.end;
        self.bounds.maxend[o] = syn.end;
        self.bounds.maxwin[o] = u32::from(syn.window).max(1);
        self.flags.0[o] = match syn.wscale {
            Some(shift) => (shift.min(MAX_WSCALE) & SCALE) | WSCALE,
            None => 0,
        };
        (self.bounds.end[r], self.bounds.maxend[r], self.bounds.maxwin[r], self.bounds.maxack[r]) = (0, 0, 0, 0);
        self.flags.0[r] = 0;
    }

    /// Initialises direction `s` from its SYN or SYN+ACK `seg` (Linux `tcp_options` and the
    /// SYN branch of `tcp_in_window`).
    fn init_from_syn(&mut self, s: usize, seg: &TcpSeq) {
        let end = seg.end();
        self.bounds.end[s] = end;
        self.bounds.maxend[s] = end;
        self.bounds.maxwin[s] = u32::from(seg.window).max(1);
        let kept = self.flags.0[s] & !(SCALE | WSCALE);
        self.flags.0[s] = match seg.wscale {
            Some(shift) => kept | (shift.min(MAX_WSCALE) & SCALE) | WSCALE,
            None => kept,
        };
    }
}

impl TcpWindows {
    /// Windows with both directions liberal: what a flow whose history is unknown gets.
    #[must_use]
    pub fn liberal() -> Self {
        Self { flags: WindowFlags([LIBERAL; 2]), ..Self::default() }
    }

    /// These windows, borrowed as [`check`] takes them.
    #[inline]
    pub fn as_mut(&mut self) -> TcpWindowsMut<'_> {
        TcpWindowsMut::new(&mut self.bounds, &mut self.flags)
    }
}

/// What [`check`] says of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// In the window: forward it and apply it to the flow's state.
    Accept,
    /// A RST in the window but not at the receiver's expected sequence number: forward it
    /// (the endpoint answers with a challenge ACK, RFC 5961 § 3.2) but keep the flow's
    /// state (Linux keeps ESTABLISHED "to allow a possible challenge ACK").
    AcceptRstKeepState,
    /// An acknowledgement older than the sender's window allows (Linux: "ignored ACK under
    /// lower bound (possible overly delayed)"): forward it, change nothing.
    Ignore,
    /// Outside the window (or a RST before the receiver's acknowledged data): drop it,
    /// change nothing (Linux: INVALID, which kube-proxy drops).
    OutOfWindow,
}

#[inline]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// Whether established flow state `(state, assured)` is Linux's
/// `nf_conntrack_tcp_established`: ESTABLISHED and assured.
#[inline]
fn established(state: TcpState, assured: bool) -> bool {
    state == TcpState::Established && assured
}

/// Checks TCP segment `seg`, travelling in `direction` of a flow in state `state` (before
/// this segment; `assured` as [`super::FlowState::assured`]), whose flags move the flow to
/// `new_state`, against the flow's windows `w`, and on success moves them forward.
///
/// Linux's rules: the first segment of a direction initialises it (from a SYN or SYN+ACK;
/// anything else picks the connection up mid-stream and makes both directions liberal);
/// then SEG.SEQ must not be beyond what the receiver allowed (I), the segment's end must
/// not be more than the receiver's window behind (II), SEG.ACK must not acknowledge data
/// not yet sent (III) and should not be more than the sender's window behind (IV; else
/// [`Fit::Ignore`]). A RST that would close the flow must carry exactly the sequence number
/// the receiver acknowledged last (or follow its sender's own last segment); one before it
/// is refused, one merely in the window keeps the state (RFC 5961 § 3.2).
#[must_use]
pub fn check(mut w: TcpWindowsMut<'_>, direction: Direction, state: TcpState, assured: bool, seg: &TcpSeq) -> Fit {
    let (s, r) = match direction {
        Direction::Original => (0, 1),
        Direction::Reply => (1, 0),
    };
    let class = Segment::of(seg.flags);
    let syn = seg.flags.contains(TcpFlags::SYN);
    let has_ack = seg.flags.contains(TcpFlags::ACK);
    let mut seq = seg.seq;
    let mut end = seg.end();

    if state == TcpState::None && !syn {
        // The first segment of a flow is not a SYN: a connection picked up mid-stream
        // (Linux `tcp_new` with `nf_conntrack_tcp_loose`).
        *w.bounds = WindowBounds::default();
        *w.flags = WindowFlags([LIBERAL; 2]);
    }

    // The RST rules of Linux's TCP_CONNTRACK_CLOSE case, before the window check.
    let mut keep_state = false;
    if class == Segment::Rst && w.has(r, MAXACK_SET) {
        let expected = w.bounds.maxack[r];
        // A zero SEG.SEQ before the connection is established answers a SYN: not judged here.
        if seq != 0 || established(state, assured) {
            if before(seq, expected) {
                return Fit::OutOfWindow;
            }
            if established(state, assured) && seq != expected && seq != w.bounds.end[s] {
                keep_state = true;
            }
        }
    }

    if w.bounds.maxwin[s] == 0 {
        if syn {
            // A SYN+ACK answering a SYN (or a SYN of a simultaneous open).
            w.init_from_syn(s, seg);
            // RFC 7323 § 2.2: window scaling is in effect only if both ends sent the option,
            // which the answering end's SYN tells.
            if direction == Direction::Reply && !(w.has(s, WSCALE) && w.has(r, WSCALE)) {
                w.flags.0 = [w.flags.0[0] & !SCALE, w.flags.0[1] & !SCALE];
            }
            if !has_ack {
                return Fit::Accept;
            }
        } else {
            // This direction's history is unknown: take what the segment says.
            let swin = (u32::from(seg.window) << w.scale(s)).max(1);
            let b = &mut *w.bounds;
            b.end[s] = end;
            b.maxwin[s] = swin;
            b.maxend[s] = end.wrapping_add(swin);
            if b.maxwin[r] == 0 {
                // Nothing seen the other way yet: let III and IV pass until it is.
                let ack = if has_ack { seg.ack } else { 0 };
                b.end[r] = ack;
                b.maxend[r] = ack;
            } else if has_ack && seg.ack == b.end[r].wrapping_add(1) {
                // Likely the answer to a keepalive probe.
                b.end[r] = b.end[r].wrapping_add(1);
            }
        }
    } else if syn
        && after(end, w.bounds.end[s])
        && matches!(state, TcpState::SynSent | TcpState::SynRecv)
        && direction == Direction::Original
    {
        // A SYN retransmitted with a new initial sequence number (RFC 9293 § 3.4.1: a
        // reinitialised TCP "must only be sure to use sequence numbers larger than those
        // recently used").
        w.init_from_syn(s, seg);
    }

    let mut ack = seg.ack;
    if !has_ack || (seg.flags.contains(TcpFlags::RST) && ack == 0) {
        // No acknowledgement (or a broken stack's RST with ACK and a zero SEG.ACK):
        // pretend it acknowledges what the receiver sent.
        ack = w.bounds.end[r];
    }
    if seg.flags.contains(TcpFlags::RST) && seq == 0 && state == TcpState::SynSent {
        // A RST answering a SYN (RFC 9293 § 3.10.7.1 without ACK).
        seq = w.bounds.end[s];
        end = w.bounds.end[s];
    }

    let liberal = w.has(s, LIBERAL);
    let b = &*w.bounds;
    let max_ack_window = if b.maxwin[s] == 0 { MAX_ACK_WINDOW_DEFAULT } else { b.maxwin[s] };
    let in_recv_win = b.maxwin[r] == 0 || after(end, b.end[s].wrapping_sub(b.maxwin[r]).wrapping_sub(1));
    let seq_ok = before(seq, b.maxend[s].wrapping_add(1)) && in_recv_win; // I, II
    let ack_not_ahead = before(ack, b.end[r].wrapping_add(1)); // III
    let ack_not_stale = after(ack, b.end[r].wrapping_sub(max_ack_window).wrapping_sub(1)); // IV
    if !liberal {
        if !seq_ok || !ack_not_ahead {
            return Fit::OutOfWindow;
        }
        if !ack_not_stale {
            return Fit::Ignore;
        }
    } else if !(seq_ok && ack_not_ahead && ack_not_stale) {
        // Liberal: accepted, but such a segment teaches nothing (Linux updates the windows
        // only in its in-window branch).
        return Fit::Accept;
    }

    // In the window: move the sender's and receiver's state forward.
    let mut win = u32::from(seg.window);
    if !syn {
        win <<= w.scale(s);
    }
    advance(&mut w, (s, r), end, ack, win, has_ack);
    if keep_state {
        Fit::AcceptRstKeepState
    } else {
        Fit::Accept
    }
}

/// [`check`] for the lean established path: a segment `seg` travelling in `direction` of an
/// ESTABLISHED, assured flow whose flags are ACK without SYN, FIN or RST (PSH, URG, ECE, CWR
/// as they come). Returns `true` when [`check`] would return [`Fit::Accept`], having moved
/// the windows exactly as it would; `false`, with nothing changed, for everything else —
/// a direction (either) without a window yet, a segment outside the window or an overly
/// delayed acknowledgement — which the caller hands to the general path, where [`check`]
/// decides.
/// The same four bounds and updates as [`check`], without its SYN, RST and first-segment
/// branches, which such a segment never takes (the property test `check_ack_is_check`
/// compares the two). Always inlined: the lean path's only call, where a call's register
/// spills cost as much as a fifth of its body.
#[inline(always)]
#[must_use]
pub fn check_ack(w: TcpWindowsMut<'_>, direction: Direction, seg: &TcpSeq) -> bool {
    debug_assert!(
        seg.flags.contains(TcpFlags::ACK) && seg.flags.0 & (TcpFlags::SYN.0 | TcpFlags::FIN.0 | TcpFlags::RST.0) == 0
    );
    // One copy per direction: every index below a constant.
    match direction {
        Direction::Original => check_ack_of::<0, 1>(w, seg),
        Direction::Reply => check_ack_of::<1, 0>(w, seg),
    }
}

/// [`check_ack`] for a segment of sender `S` to receiver `R`.
#[inline(always)]
fn check_ack_of<const S: usize, const R: usize>(mut w: TcpWindowsMut<'_>, seg: &TcpSeq) -> bool {
    let (s, r) = (S, R);
    let b = &*w.bounds;
    // A direction without a window yet (not initialised, or the receiver's reset while a
    // SYN was ignored): the general path. Then II below is a plain bound, and `advance`
    // knows the receiver's window nonzero.
    if b.maxwin[s] == 0 || b.maxwin[r] == 0 {
        return false;
    }
    let (seq, ack, end) = (seg.seq, seg.ack, seg.end());
    let max_ack_window = b.maxwin[s];
    let in_recv_win = after(end, b.end[s].wrapping_sub(b.maxwin[r]).wrapping_sub(1));
    let seq_ok = before(seq, b.maxend[s].wrapping_add(1)) && in_recv_win; // I, II
    let ack_not_ahead = before(ack, b.end[r].wrapping_add(1)); // III
    let ack_not_stale = after(ack, b.end[r].wrapping_sub(max_ack_window).wrapping_sub(1)); // IV
    if !(seq_ok && ack_not_ahead && ack_not_stale) {
        // Liberal: accepted, teaching nothing; else refused or ignored, as `check` says.
        return w.has(s, LIBERAL);
    }
    let win = u32::from(seg.window) << w.scale(s);
    advance_inlined(&mut w, (s, r), end, ack, win, true);
    true
}

/// [`advance_inlined`], called.
#[inline]
fn advance(w: &mut TcpWindowsMut<'_>, s_r: (usize, usize), end: u32, ack: u32, win: u32, has_ack: bool) {
    advance_inlined(w, s_r, end, ack, win, has_ack);
}

/// Moves the windows forward for an in-window segment of sender `s` to receiver `r`
/// (Linux `tcp_in_window`'s update, shared by [`check`] and [`check_ack`]): the sender's
/// largest window (`win`, scaled) and end, its largest acknowledgement when the segment
/// carries one (`has_ack`), and the receiver's window and right edge.
#[inline(always)]
fn advance_inlined(w: &mut TcpWindowsMut<'_>, (s, r): (usize, usize), end: u32, ack: u32, win: u32, has_ack: bool) {
    // The first acknowledgement sets `maxack` and its flag; a later one moves it forward.
    if has_ack {
        if !w.has(s, MAXACK_SET) {
            w.flags.0[s] |= MAXACK_SET;
            w.bounds.maxack[s] = ack;
        } else if after(ack, w.bounds.maxack[s]) {
            w.bounds.maxack[s] = ack;
        }
    }
    let w = &mut *w.bounds;
    if w.maxwin[s] < win {
        w.maxwin[s] = win;
    }
    if after(end, w.end[s]) {
        w.end[s] = end;
    }
    if w.maxwin[r] != 0 && after(end, w.maxend[s]) {
        w.maxwin[r] = w.maxwin[r].wrapping_add(end.wrapping_sub(w.maxend[s]));
    }
    let right_edge = ack.wrapping_add(win);
    if after(right_edge, w.maxend[r].wrapping_sub(1)) {
        w.maxend[r] = if win == 0 { right_edge.wrapping_add(1) } else { right_edge };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{Original as O, Reply as R};

    const SYN: TcpFlags = TcpFlags::SYN;
    const SYN_ACK: TcpFlags = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    const ACK: TcpFlags = TcpFlags::ACK;
    const RST: TcpFlags = TcpFlags::RST;
    const RST_ACK: TcpFlags = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);

    fn seg(flags: TcpFlags, seq: u32, ack: u32, window: u16, data: u32) -> TcpSeq {
        let len = data + u32::from(flags.contains(TcpFlags::SYN)) + u32::from(flags.contains(TcpFlags::FIN));
        TcpSeq { flags, seq, ack, window, len, wscale: None }
    }

    /// Client ISN 1000, server ISN 5000, both windows 64 240, handshake done.
    fn established_windows() -> TcpWindows {
        let mut w = TcpWindows::default();
        assert_eq!(check(w.as_mut(), O, TcpState::None, false, &seg(SYN, 1000, 0, 64240, 0)), Fit::Accept);
        assert_eq!(check(w.as_mut(), R, TcpState::SynSent, false, &seg(SYN_ACK, 5000, 1001, 64240, 0)), Fit::Accept);
        assert_eq!(check(w.as_mut(), O, TcpState::SynRecv, false, &seg(ACK, 1001, 5001, 64240, 0)), Fit::Accept);
        w
    }

    #[test]
    fn a_handshake_and_data_fit() {
        let mut w = established_windows();
        let e = TcpState::Established;
        assert_eq!(check(w.as_mut(), O, e, true, &seg(ACK, 1001, 5001, 64240, 100)), Fit::Accept);
        assert_eq!(check(w.as_mut(), R, e, true, &seg(ACK, 5001, 1101, 64240, 1000)), Fit::Accept);
        assert_eq!(check(w.as_mut(), O, e, true, &seg(ACK, 1101, 6001, 64240, 0)), Fit::Accept);
        // A retransmission of data already acknowledged, within the window, still fits.
        assert_eq!(check(w.as_mut(), O, e, true, &seg(ACK, 1001, 6001, 64240, 100)), Fit::Accept);
    }

    #[test]
    fn a_segment_beyond_the_window_or_acknowledging_unsent_data_is_refused() {
        let mut w = established_windows();
        let e = TcpState::Established;
        let before = w;
        assert_eq!(check(w.as_mut(), O, e, true, &seg(ACK, 1001 + 200_000, 5001, 64240, 10)), Fit::OutOfWindow);
        assert_eq!(check(w.as_mut(), O, e, true, &seg(ACK, 1001, 5001 + 10, 64240, 0)), Fit::OutOfWindow);
        assert_eq!(
            check(w.as_mut(), O, e, true, &seg(ACK, 1001u32.wrapping_sub(300_000), 5001, 64240, 10)),
            Fit::OutOfWindow
        );
        assert_eq!(w, before, "a refused segment changes nothing");
    }

    #[test]
    fn a_blind_rst_is_refused_an_in_window_one_keeps_the_state_an_exact_one_closes() {
        let e = TcpState::Established;
        // From the client side, forging the server (reply direction).
        let mut w = established_windows();
        assert_eq!(check(w.as_mut(), R, e, true, &seg(RST, 123_456_789, 0, 0, 0)), Fit::OutOfWindow);
        assert_eq!(check(w.as_mut(), R, e, true, &seg(RST, 4000, 0, 0, 0)), Fit::OutOfWindow, "before the ack");
        assert_eq!(check(w.as_mut(), R, e, true, &seg(RST, 5001 + 100, 0, 0, 0)), Fit::AcceptRstKeepState);
        assert_eq!(check(w.as_mut(), R, e, true, &seg(RST, 5001, 0, 0, 0)), Fit::Accept, "RCV.NXT exactly");
        // The client's own RST, at its current sequence number.
        let mut w = established_windows();
        assert_eq!(check(w.as_mut(), O, e, true, &seg(RST_ACK, 1001, 5001, 0, 0)), Fit::Accept);
    }

    #[test]
    fn a_rst_answering_a_syn_fits() {
        let mut w = TcpWindows::default();
        assert_eq!(check(w.as_mut(), O, TcpState::None, false, &seg(SYN, 1000, 0, 64240, 0)), Fit::Accept);
        assert_eq!(check(w.as_mut(), R, TcpState::SynSent, false, &seg(RST_ACK, 0, 1001, 0, 0)), Fit::Accept);
    }

    #[test]
    fn window_scaling_counts_only_when_both_ends_offer_it() {
        let mut w = TcpWindows::default();
        let syn = TcpSeq { wscale: Some(7), ..seg(SYN, 1000, 0, 64240, 0) };
        let syn_ack = TcpSeq { wscale: Some(7), ..seg(SYN_ACK, 5000, 1001, 64240, 0) };
        assert_eq!(check(w.as_mut(), O, TcpState::None, false, &syn), Fit::Accept);
        assert_eq!(check(w.as_mut(), R, TcpState::SynSent, false, &syn_ack), Fit::Accept);
        assert_eq!(check(w.as_mut(), O, TcpState::SynRecv, false, &seg(ACK, 1001, 5001, 1000, 0)), Fit::Accept);
        // The client's window is 1000 << 7 = 128 000: the server may send 100 000 octets ahead.
        assert_eq!(
            check(w.as_mut(), R, TcpState::Established, true, &seg(ACK, 5001 + 100_000, 1001, 1000, 1)),
            Fit::Accept
        );

        let mut w = TcpWindows::default();
        assert_eq!(check(w.as_mut(), O, TcpState::None, false, &syn), Fit::Accept);
        assert_eq!(check(w.as_mut(), R, TcpState::SynSent, false, &seg(SYN_ACK, 5000, 1001, 64240, 0)), Fit::Accept);
        assert_eq!(check(w.as_mut(), O, TcpState::SynRecv, false, &seg(ACK, 1001, 5001, 1000, 0)), Fit::Accept);
        assert_eq!(
            check(w.as_mut(), R, TcpState::Established, true, &seg(ACK, 5001 + 100_000, 1001, 1000, 1)),
            Fit::OutOfWindow,
            "no scaling: the client allowed 1000 octets"
        );
    }

    #[test]
    fn a_connection_picked_up_mid_stream_is_liberal_but_refuses_a_rst_before_the_ack() {
        let mut w = TcpWindows::default();
        let e = TcpState::Established;
        assert_eq!(check(w.as_mut(), O, TcpState::None, false, &seg(ACK, 77_777, 99_999, 512, 10)), Fit::Accept);
        assert_eq!(check(w.as_mut(), R, e, false, &seg(ACK, 99_999, 77_787, 512, 10)), Fit::Accept);
        // Far outside what a 512-octet window allows, but the scales are unknown.
        assert_eq!(check(w.as_mut(), O, e, false, &seg(ACK, 77_787 + 400_000, 100_009, 512, 10)), Fit::Accept);
        assert_eq!(check(w.as_mut(), R, e, false, &seg(RST, 42, 0, 0, 0)), Fit::OutOfWindow);
        assert_eq!(check(w.as_mut(), R, e, false, &seg(RST, 100_009, 0, 0, 0)), Fit::Accept);
    }

    proptest::proptest! {
        /// `check_ack` accepts exactly the ACK segments of an established flow that `check`
        /// accepts, and leaves the windows as `check` does; otherwise it changes nothing.
        #[test]
        fn check_ack_is_check(
            windows in proptest::array::uniform8(proptest::prelude::any::<u32>()),
            near in proptest::array::uniform8(-70_000i64..70_000),
            use_near in proptest::prelude::any::<u8>(),
            scale in (0u8..15, 0u8..15), flags in (0u8..8, 0u8..8),
            reply in proptest::prelude::any::<bool>(),
            seq in proptest::prelude::any::<u32>(), seq_near in -70_000i64..70_000,
            ack in proptest::prelude::any::<u32>(), ack_near in -70_000i64..70_000,
            window in proptest::prelude::any::<u16>(), data in 0u32..3000, extra in 0u8..4,
        ) {
            // Windows near one another (and segments near them) so that every bound is
            // sometimes met and sometimes not; sometimes anything.
            let base = windows[0];
            let v = |i: usize| if use_near & (1 << i) != 0 { base.wrapping_add(near[i] as u32) } else { windows[i] };
            let mut w = TcpWindows {
                bounds: WindowBounds {
                    end: [v(0), v(1)],
                    maxend: [v(2), v(3)],
                    maxwin: [v(4) & 0x3fff_ffff, v(5) & 0x3fff_ffff],
                    maxack: [v(6), v(7)],
                },
                flags: WindowFlags([scale.0 | flags.0 << 4, scale.1 | flags.1 << 4]),
            };
            let seq = if use_near & 1 != 0 { base.wrapping_add(seq_near as u32) } else { seq };
            let ack = if use_near & 2 != 0 { base.wrapping_add(ack_near as u32) } else { ack };
            // ACK with PSH, URG, ECE or CWR as they come.
            let extra_flags = [0, TcpFlags::PSH.0, TcpFlags::URG.0, TcpFlags::ECE.0 | TcpFlags::CWR.0][usize::from(extra)];
            let seg = TcpSeq { flags: TcpFlags(TcpFlags::ACK.0 | extra_flags), seq, ack, window, len: data, wscale: None };
            let direction = if reply { R } else { O };
            let mut general = w;
            let fit = check(general.as_mut(), direction, TcpState::Established, true, &seg);
            let before = w;
            let lean = check_ack(w.as_mut(), direction, &seg);
            if lean {
                proptest::prop_assert_eq!(fit, Fit::Accept);
                proptest::prop_assert_eq!(w, general);
            } else {
                proptest::prop_assert_eq!(w, before, "a segment left to the general path changes nothing");
                // Refused only what `check` refuses, or a direction without a window yet.
                let maxwin = before.bounds.maxwin;
                proptest::prop_assert!(fit != Fit::Accept || maxwin[0] == 0 || maxwin[1] == 0);
            }
        }
    }

    proptest::proptest! {
        /// `advance` moves the windows as Linux's `tcp_in_window` writes its update (one
        /// test of `IP_CT_TCP_FLAG_MAXACK_SET` before the updates, `td_maxack` set when
        /// the segment carries an ACK and the flag was clear or the ACK is after it).
        #[test]
        fn advance_is_linux_update(
            bounds in proptest::array::uniform8(proptest::prelude::any::<u32>()),
            near in proptest::array::uniform8(-70_000i64..70_000),
            flags in (proptest::prelude::any::<u8>(), proptest::prelude::any::<u8>()),
            reply in proptest::prelude::any::<bool>(),
            end in -70_000i64..70_000, ack in -70_000i64..70_000,
            win in proptest::prelude::any::<u32>(), zero_win in proptest::prelude::any::<bool>(),
            has_ack in proptest::prelude::any::<bool>(),
        ) {
            let base = bounds[0];
            let v = |i: usize| if near[i] % 3 == 0 { bounds[i] } else { base.wrapping_add(near[i] as u32) };
            let mut w = TcpWindows {
                bounds: WindowBounds { end: [v(0), v(1)], maxend: [v(2), v(3)], maxwin: [v(4), v(5)], maxack: [v(6), v(7)] },
                flags: WindowFlags([flags.0, flags.1]),
            };
            let (s, r) = if reply { (1, 0) } else { (0, 1) };
            let (end, ack) = (base.wrapping_add(end as u32), base.wrapping_add(ack as u32));
            let win = if zero_win { 0 } else { win };
            let mut want = w;
            {
                let set_maxack = want.flags.0[s] & MAXACK_SET == 0;
                if has_ack && set_maxack {
                    want.flags.0[s] |= MAXACK_SET;
                }
                let b = &mut want.bounds;
                if b.maxwin[s] < win {
                    b.maxwin[s] = win;
                }
                if after(end, b.end[s]) {
                    b.end[s] = end;
                }
                if has_ack && (set_maxack || after(ack, b.maxack[s])) {
                    b.maxack[s] = ack;
                }
                if b.maxwin[r] != 0 && after(end, b.maxend[s]) {
                    b.maxwin[r] = b.maxwin[r].wrapping_add(end.wrapping_sub(b.maxend[s]));
                }
                let right_edge = ack.wrapping_add(win);
                if after(right_edge, b.maxend[r].wrapping_sub(1)) {
                    b.maxend[r] = if win == 0 { right_edge.wrapping_add(1) } else { right_edge };
                }
            }
            advance(&mut w.as_mut(), (s, r), end, ack, win, has_ack);
            proptest::prop_assert_eq!(w, want);
        }
    }

    #[test]
    fn the_window_scale_option_is_found_among_others() {
        // MSS, NOP, WS 7, NOP, NOP, SACK permitted, EOL.
        let opts = [2, 4, 5, 0xb4, 1, 3, 3, 7, 1, 1, 4, 2, 0];
        assert_eq!(window_scale_option(&opts), Some(7));
        assert_eq!(window_scale_option(&[3, 3, 20]), Some(14), "capped at 14");
        assert_eq!(window_scale_option(&[2, 4, 5, 0xb4]), None);
        assert_eq!(window_scale_option(&[3, 0, 7]), None, "malformed length");
        assert_eq!(window_scale_option(&[2, 40]), None, "overruns");
    }
}
