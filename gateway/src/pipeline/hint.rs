//! What [`super::process_burst`] finds ahead of [`super::process`] for a frame, and where
//! it keeps it: the hints ([`FrameHints`]: flow key and hash, the flow or vacancy found
//! ahead, route, a new flow's front door and endpoint), which the flow path confirms or
//! ignores; the slots in `WorkerState::hints` that hold them (two chunks' worth);
//! and [`ports`], the transport header read both families' early flow-key parse
//! (`ipv4::flow_key`, `ipv6::flow_key`) shares. A leaf of the pipeline: the state, the
//! per-family parsers and the flow path use it without using [`super::burst`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::conntrack::tcp::Segment as TcpSegment;
use crate::conntrack::{window, Address, Candidate, Direction, FlowId, FlowKey, TcpSeq};
use crate::wire::{IpProtocol, SctpPacket, TcpFlags, TcpPacket, UdpPacket};

/// Frames [`super::process_burst`] has in flight at once (a chunk of its burst): from a
/// frame's stage 1 to its processing its hints take one of this many slots.
pub const PREFETCH_WINDOW: usize = 16;

/// Where [`super::process_burst`] found ahead (stage 3) that a frame's packet will go: for a
/// packet to `to`, the egress interface `out` and next hop `hop` of [`crate::host::Host::route`].
/// The general path uses it instead of routing again when its destination is `to`: for a
/// direction never routed before ([`super::flow::egress`]; one routed before reads the
/// egress its flow keeps) and for a new flow's endpoint (`flow::new_flow`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RouteHint {
    /// The destination routed.
    pub to: IpAddr,
    /// Its egress interface.
    pub out: u8,
    /// Its next hop.
    pub hop: IpAddr,
}

/// What [`super::process_burst`] found ahead for a frame opening a new flow, for
/// [`super::flow`]'s `new_flow` to use instead of looking it up again. Valid for the frame's
/// flow key and the burst's table only: a pure function of the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NewFlowHint {
    /// The front door's position in the table ([`crate::table::Table::frontend_at`]).
    pub frontend: u32,
    /// The position among its service's backends of the one the Maglev ring names for the
    /// key ([`super::backend::ring_hash`], [`crate::table::ServiceRing::ring_backend`]).
    pub ring_backend: u32,
    /// That backend's address (IPv4-mapped addresses as IPv4, [`crate::table::layout::addr_from16`]) and
    /// port when the scheduler is `maglev` and the service has no session affinity, so that the ring's choice is the
    /// endpoint ([`super::backend::choose`]) and `new_flow` need not view the service again; `None`
    /// with affinity, where a remembered endpoint may win.
    pub endpoint: Option<(IpAddr, u16)>,
    /// The front door has no source ranges (`loadBalancerSourceRanges`): it admits every
    /// client, so that with `endpoint` `new_flow` need not view the front door again.
    pub all_sources: bool,
}

/// What the stages found ahead for one frame, handed to [`super::process`] with it (in its slot of
/// [`HintRing`], in `WorkerState::hints`): hints all, which the flow path confirms or
/// ignores.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FrameHints {
    /// The frame's flow key and its conntrack hash (stage 1).
    pub flow: Option<FlowHint>,
    /// The flow whose tuple the key almost certainly is, and which tuple, or where the key's
    /// probe run ended when no flow has it (stage 2:
    /// [`crate::conntrack::Conntrack::prefetch_record`]), in the conntrack of the key's family.
    pub candidate: Option<Candidate>,
    /// Where the packet will go (stage 3, or a new flow's last visit).
    pub route: Option<RouteHint>,
    /// A new flow's front door and ring endpoint.
    pub new_flow: Option<NewFlowHint>,
    /// Stage 1 found the frame's IPv4 header checksum correct (or the device vouched for
    /// it): [`super::process`] need not sum the header again (the frame's bytes do not
    /// change between the two). False when not checked.
    pub l3_checked: bool,
}

impl FrameHints {
    /// No hints at all (a frame without a flow key, and the fields a stage 1 leaves empty).
    pub const NONE: Self = Self { flow: None, candidate: None, route: None, new_flow: None, l3_checked: false };

    /// The hints of a frame a [`LeanFrame`] held until the lean path turned it down: `flow`,
    /// its flow key and hash (the [`LeanFrame`]'s, of its family), and `candidate` (the flow
    /// found ahead, or where the key's probe run ended); no route or new-flow hint.
    #[inline]
    pub fn from_lean(flow: FlowHint, candidate: Option<Candidate>) -> Self {
        // A lean IPv4 frame's header checksum was verified: part of `LeanSegment`'s contract
        // (IPv6 has none, and its path does not read this).
        Self { flow: Some(flow), candidate, route: None, new_flow: None, l3_checked: true }
    }
}

/// The compact hints of a frame on the lean established path's stages of
/// [`super::process_burst`] (`super::lean`), kept instead of [`FrameHints`] while the frame
/// may take that path: the flow key of family `A` ([`Ipv4Addr`] or [`Ipv6Addr`]) and its
/// hash (stage 1), the flow found ahead (stage 2), and the [`LeanSegment`] stage 1 parsed.
/// A frame the lean path turns down at any stage has its [`FrameHints`] written from these
/// ([`FrameHints::from_lean`]) and goes on as any other. An IPv6 one is the larger (its
/// key alone is 40 bytes): its slots live in [`HintRing::lean6`].
#[derive(Clone, Copy, Debug)]
pub(super) struct LeanFrame<A: Address = Ipv4Addr> {
    /// The frame's flow key (a TCP or UDP one).
    pub key: FlowKey<A>,
    /// Its hash in the worker's conntrack of family `A`.
    pub hash: u64,
    /// The flow found ahead (stage 2): its id ...
    pub id: FlowId,
    /// ... and the direction of the key's tuple.
    pub direction: Direction,
    /// What stage 1's parse found ([`LeanSegment::NONE`]: not a lean frame; nor is a plain
    /// SYN's, which stage 1 hands on in [`FlowHint::V4`]).
    pub seg: LeanSegment,
}

impl<A: Address> LeanFrame<A> {
    /// A slot before any frame, its addresses `unspecified` (the family's `::`, `0.0.0.0`).
    pub const fn empty(unspecified: A) -> Self {
        Self {
            key: FlowKey { protocol: 0, src_addr: unspecified, src_port: 0, dst_addr: unspecified, dst_port: 0 },
            hash: 0,
            id: 0,
            direction: Direction::Original,
            seg: LeanSegment::NONE,
        }
    }
}

impl LeanFrame {
    /// A slot of IPv4 before any frame.
    pub const EMPTY: Self = Self::empty(Ipv4Addr::UNSPECIFIED);
}

/// A frame stage 1 of [`super::process_burst`] parsed in full for the lean established path
/// (`super::lean`): a TCP segment whose control flags pass [`lean_tcp_flags`] (ACK without
/// SYN, FIN or RST; a close's FIN or RST; an endpoint's SYN-ACK), or a UDP datagram, that passes every check
/// the general path makes of the headers —
/// link layer ([`super::link::receive`]); IPv4: header without options, checksum verified
/// (or vouched for by the device: `Meta::l3_csum_good`), not a fragment, TTL above 1;
/// IPv6 (`super::ipv6::flow_key`): no extension header, Hop Limit above 1, a source that
/// is not multicast, a UDP checksum other than 0; both: transport header whole, no partial
/// L4 checksum. The flow key is the frame's
/// [`FlowHint`]. Anything else is parsed again by the general path: its segment is
/// [`LeanSegment::NONE`] (a Total Length of 0, which no parsed packet has), so that a parse
/// writes the fields alone, with no `Option` around them. Stage 1's plain IPv4 parse writes
/// a plain SYN's (without ACK or RST: [`lean_or_syn_flags`]) too, which is no lean frame's:
/// it goes to the general path in [`FlowHint::V4`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct LeanSegment {
    /// The interface the frame arrived on ([`super::link::Rx::iface`]).
    pub iface: u8,
    /// Length of its link-layer header, bytes (14 or 18).
    pub l2_len: u8,
    /// Length of the IP packet (IPv4 Total Length; IPv6 40 + Payload Length), bytes; 0: not
    /// a lean frame.
    pub total: u16,
    /// The TCP segment's window-tracking fields ([`super::flow::tcp_seq`]) but for the SYN's
    /// and FIN's counts and the Window Scale option: `tcp.len` is the segment's data octets,
    /// SEG.LEN less the SYN's and FIN's one (what the lean path's ACK needs without a sum),
    /// `tcp.wscale` is `None` (`lean::forward_tracked` adds the counts and reads a SYN's
    /// option); zero for UDP. Every writer of a segment keeps `tcp.wscale` `None`, so that
    /// stage 1's parses of a TCP segment (`super::ipv4::flow_key_plain`,
    /// `super::ipv6::flow_key`) write the other fields alone (a store less per packet).
    pub tcp: TcpSeq,
}

/// SYN, FIN and RST: the TCP flags whose segments open, close or reopen a flow. The general
/// path sums their transport checksum (`flow`); the lean path takes them through the state
/// machine only ([`LeanSegment::moves_state`]).
pub(super) const STATE_FLAGS: u8 = TcpFlags::SYN.0 | TcpFlags::FIN.0 | TcpFlags::RST.0;

/// `tcp` ([`super::flow::tcp_seq`] of a segment) as a [`LeanSegment`] holds it: the SYN's
/// and FIN's counts out of `len`, no Window Scale option.
#[inline]
pub(super) fn as_lean(mut tcp: TcpSeq) -> TcpSeq {
    tcp.len -= u32::from(tcp.flags.contains(TcpFlags::SYN)) + u32::from(tcp.flags.contains(TcpFlags::FIN));
    tcp.wscale = None;
    tcp
}

/// Whether stage 1 may give a TCP segment with control flags `flags` a [`LeanSegment`]:
/// ACK without SYN (with FIN or RST too, a close's: `lean::forward_tracked`, which checks
/// the flags whole, [`crate::conntrack::tcp::valid_flags`]; without either, an established
/// flow's data and ACKs: `lean::forward`), RST without SYN, or SYN and ACK without RST (an
/// endpoint's SYN-ACK: `lean::forward_tracked`). The first compare is the one an
/// established packet's flags pass, as before closes took the lean path (a set of valid
/// combinations tested by one shift cost it 4 instructions more).
#[inline(always)]
pub(super) fn lean_tcp_flags(flags: TcpFlags) -> bool {
    let (syn, rst, ack) = (TcpFlags::SYN.0, TcpFlags::RST.0, TcpFlags::ACK.0);
    flags.0 & (syn | ack) == ack || flags.0 & (syn | rst) == rst || flags.0 & (syn | rst | ack) == syn | ack
}

/// Whether stage 1's plain parse writes the [`LeanSegment`] of a TCP segment with control
/// flags `flags`: [`lean_tcp_flags`], or a SYN without ACK or RST ([`FlowHint::V4`]): ACK
/// without SYN, RST without SYN, or SYN without RST. The first compare is the one an
/// established packet's flags pass, as in [`lean_tcp_flags`].
#[inline(always)]
pub(super) fn lean_or_syn_flags(flags: TcpFlags) -> bool {
    let (syn, rst, ack) = (TcpFlags::SYN.0, TcpFlags::RST.0, TcpFlags::ACK.0);
    flags.0 & (syn | ack) == ack || flags.0 & (syn | rst) == rst || flags.0 & (syn | rst) == syn
}

impl LeanSegment {
    /// No lean frame's: what the early parse leaves for a frame the lean path cannot take.
    pub const NONE: Self = Self {
        iface: 0,
        l2_len: 0,
        total: 0,
        tcp: TcpSeq { flags: crate::wire::TcpFlags(0), seq: 0, ack: 0, window: 0, len: 0, wscale: None },
    };

    /// Whether the segment moves its flow's state (one of [`STATE_FLAGS`], SYN, FIN or RST,
    /// set: an endpoint's SYN-ACK, a close's segment), which only the state machine may
    /// forward (`lean::forward_tracked`); false for UDP.
    #[inline(always)]
    pub fn moves_state(&self) -> bool {
        self.tcp.flags.0 & STATE_FLAGS != 0
    }

    /// Whether the early parse found a lean frame: a Total Length other than
    /// [`LeanSegment::NONE`]'s, whatever the other fields hold.
    #[inline(always)]
    pub fn is_lean(&self) -> bool {
        self.total != 0
    }

    /// The window-tracking fields of the segment as [`super::flow::tcp_seq`] reads them:
    /// SEG.LEN with the SYN's and FIN's counts (`tcp.len` has neither), and on a SYN whose
    /// TCP header has options (Total Length past `l4_offset`, the transport header's offset
    /// in the network packet, its 20 bytes and the data) the Window Scale option that
    /// `window_scale` reads from the frame; without options it pays no call (a SYN-ACK
    /// without any, 33 instructions).
    #[inline(always)]
    pub fn tcp_seq(&self, l4_offset: usize, window_scale: impl FnOnce() -> Option<u8>) -> TcpSeq {
        let tcp = self.tcp;
        let flags = tcp.flags;
        // SYN (bit 1) and FIN (bit 0) count one each.
        let len = tcp.len + u32::from((flags.0 >> 1) & 1) + u32::from(flags.0 & 1);
        let options = u32::from(self.total).wrapping_sub(l4_offset as u32 + tcp.len) > 20;
        let wscale = if flags.contains(TcpFlags::SYN) && options { window_scale() } else { None };
        TcpSeq { len, wscale, ..tcp }
    }

    /// The Window Scale option of the segment's SYN in `frame` (its transport header
    /// `l4_offset` bytes into the network packet), as [`window::window_scale_option`] finds
    /// it among the TCP header's options; `None` without one. Out of line: a SYN's with
    /// options only.
    #[inline(never)]
    pub fn syn_window_scale(&self, frame: &[u8], l4_offset: usize) -> Option<u8> {
        let l3 = usize::from(self.l2_len);
        let l4 = frame.get(l3 + l4_offset..l3 + usize::from(self.total))?;
        window::window_scale_option(TcpPacket::new_checked(l4).ok()?.options())
    }
}

/// The hints of the frames [`super::process_burst`] has in flight (two chunks: a chunk's
/// frame `j`'s in slot `j` or `PREFETCH_WINDOW + j`, alternating), and which slot belongs
/// to the frame [`super::process`] is processing: [`HintRing::NONE`], a slot that always
/// holds no hints, outside a burst. Kept in [`super::WorkerState`] so that
/// [`super::process`] reads its frame's hints where stage 1 wrote them, with no copy.
#[derive(Clone, Debug)]
pub(crate) struct HintRing {
    /// The slots; the last never holds hints (see [`HintRing::current`]).
    pub frames: [FrameHints; 2 * PREFETCH_WINDOW + 1],
    /// The compact hints of the IPv6 frames the lean path may take, in the frame's slot
    /// (as [`HintRing::frames`]; valid only while the burst's mask of IPv6 lean frames says
    /// so). Kept here rather than on [`super::process_burst`]'s stack, where its
    /// 2.5 KiB would be cleared every burst, IPv6 or not.
    pub lean6: [LeanFrame<Ipv6Addr>; 2 * PREFETCH_WINDOW],
    /// The compact hints of the IPv4 frames the lean path may take, a chunk's in each half
    /// (valid only while the chunk's mask of IPv4 lean frames says so). Boxed, and `None`
    /// only while [`super::process_burst`] holds it: the burst takes the box, so that
    /// [`super::lean::forward`] borrows the state whole while a frame's hints are read in
    /// place, and puts it back. On the burst's stack, its 1.8 KiB were cleared on every
    /// call (119 instructions, ~24 a packet in the ~5-frame vectors of a gateway below
    /// capacity: docs/optimisation-log.md, "Per poll pass").
    pub lean4: Option<Box<[[LeanFrame; PREFETCH_WINDOW]; 2]>>,
    /// The slot of the frame being processed.
    pub current: usize,
}

impl Default for HintRing {
    fn default() -> Self {
        Self {
            frames: [FrameHints::default(); 2 * PREFETCH_WINDOW + 1],
            lean6: [LeanFrame::empty(Ipv6Addr::UNSPECIFIED); 2 * PREFETCH_WINDOW],
            lean4: Some(Self::lean4()),
            current: Self::NONE,
        }
    }
}

impl HintRing {
    /// The slot that never holds hints: [`HintRing::current`] outside a burst.
    pub const NONE: usize = 2 * PREFETCH_WINDOW;

    /// Empty IPv4 lean hints for [`HintRing::lean4`].
    pub fn lean4() -> Box<[[LeanFrame; PREFETCH_WINDOW]; 2]> {
        Box::new([[LeanFrame::EMPTY; PREFETCH_WINDOW]; 2])
    }

    /// The hints of the frame being processed (none outside a burst), to take from.
    #[inline]
    pub fn current(&mut self) -> &mut FrameHints {
        &mut self.frames[self.current]
    }

    /// The hints of the frame being processed (none outside a burst).
    #[inline]
    pub fn current_ref(&self) -> &FrameHints {
        &self.frames[self.current]
    }
}

/// A frame's flow key and its conntrack hash (in the conntrack of the key's family),
/// computed ahead of [`super::process`].
#[derive(Clone, Copy, Debug)]
pub(super) enum FlowHint {
    /// An IPv4 flow key and its hash in the worker's IPv4 conntrack, and the segment of a
    /// TCP SYN (without ACK or RST) that stage 1's parse found plain and took whole, as it
    /// takes a lean frame's (`super::ipv4::flow_key_plain`: link layer as
    /// [`super::link::receive`] finds it, IPv4 header without options and its checksum
    /// verified, not a fragment, TTL above 1, the TCP header whole, no partial L4
    /// checksum; [`LeanSegment::NONE`], a Total Length of 0, for any other frame). The
    /// general path builds the frame's `Segment` from the key and this segment
    /// (`super::ipv4::hinted_syn`) instead of parsing the frame again: the same one
    /// `super::ipv4::segment_plain` finds (the frame's bytes do not change between the
    /// two). Here, not beside the hint in [`FrameHints`]: an IPv4 key and its segment take
    /// no more room than an IPv6 key, where 24 bytes more in every slot cost an
    /// established reply packet 3 instructions (the burst loop's registers).
    V4(FlowKey<Ipv4Addr>, u64, LeanSegment),
    /// An IPv6 flow key and its hash in the worker's IPv6 conntrack.
    V6(FlowKey<Ipv6Addr>, u64),
}

/// The (source, destination) ports of the TCP, UDP or SCTP header `l4` of `protocol`, read
/// with checked views, and whether it is a TCP SYN ([`TcpSegment::Syn`]: without ACK or
/// RST, a connection's first segment, RFC 9293 § 3.5); `None` for another protocol or a
/// header that does not fit.
#[inline]
pub(super) fn ports(protocol: IpProtocol, l4: &[u8]) -> Option<(u16, u16, bool)> {
    match protocol {
        IpProtocol::Tcp => TcpPacket::new_checked(l4)
            .map(|t| (t.src_port(), t.dst_port(), TcpSegment::of(t.flags()) == TcpSegment::Syn))
            .ok(),
        IpProtocol::Udp => UdpPacket::new_checked(l4).map(|u| (u.src_port(), u.dst_port(), false)).ok(),
        IpProtocol::Sctp => SctpPacket::new_checked(l4).map(|p| (p.src_port(), p.dst_port(), false)).ok(),
        _ => None,
    }
}
