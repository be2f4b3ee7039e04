//! IPv4 arriving at the gateway (RFC 791): the header is checked (length, checksum), the
//! transport ports are read, and the packet goes to the conntrack path ([`super::flow`]: TCP,
//! UDP, SCTP — [`super::sctp`]), the ICMP path ([`super::icmp`]: echo, and errors about
//! flows, [`super::icmp_error`]), or, for a later fragment, along its first
//! ([`super::fragment`]).

use std::net::Ipv4Addr;
use std::ops::Range;

use super::flow::{self, Segment};
use super::fragment::{self, Fragment};
use super::hint::{self, LeanSegment};
use super::link::Rx;
use super::sctp::{self, Chunks};
use super::{icmp, Verdict, WorkerState};
use crate::conntrack::tcp::Segment as TcpSegment;
use crate::conntrack::{FlowKey, TcpSeq};
use crate::counters::DropReason;
use crate::fragments::FragmentKey;
use crate::table::Table;
use crate::wire::{checksum, IpProtocol, Ipv4Packet, TcpFlags, TcpPacket, UdpPacket};

/// The flow key of the TCP, UDP or SCTP packet after the link-layer header of `frame`, read with
/// checked views but without [`handle`]'s checks (header checksum, TTL): a hint for
/// [`super::process_burst`], which `handle` confirms; with it, whether the packet is a TCP
/// SYN without ACK (a connection opening: its key is almost certainly not tracked yet); and
/// into `lean` (in place: the hint slot, no copy through the return value) the
/// [`LeanSegment`] of a frame the lean established path may take (see there for what that
/// needs: this is the one parse such a frame gets), or of a plain SYN (the same checks;
/// for the general path, [`hint::FlowHint::V4`]: the caller tells the two apart by the
/// flag), left as it was for anything else (the caller sets [`LeanSegment::NONE`] first).
/// `None` for anything but TCP, UDP and SCTP, fragments included (`lean` then unchanged).
/// `l3_checked` is set when the header checksum was found correct (or vouched for by the
/// device) on the way ([`super::hint::FrameHints::l3_checked`]), left as it was otherwise.
///
/// The common case — a 20-byte header, TCP or UDP, the first 40 bytes of the packet in the
/// frame — is read at fixed offsets after one bounds check ([`flow_key_plain`]); anything
/// else, or anything that case does not accept, is read with the checked views.
#[inline]
pub(super) fn flow_key(
    frame: &[u8],
    rx: &Rx,
    lean: &mut LeanSegment,
    l3_checked: &mut bool,
) -> Option<(FlowKey, bool)> {
    if let Some(found) = flow_key_plain(frame, rx, lean, l3_checked) {
        return Some(found);
    }
    flow_key_checked(frame, *rx, lean)
}

/// Bytes of an IPv4 packet [`flow_key_plain`] reads: a 20-byte header and the first 20 bytes
/// of its transport header.
const PLAIN_LEN: usize = 40;

/// Length of an IPv4 header without options, bytes.
const IP: u16 = Ipv4Packet::<&[u8]>::HEADER_LEN as u16;

/// The IPv4 packet after the link-layer header of `frame` (to the frame's end), its first
/// [`PLAIN_LEN`] bytes, its Total Length and the transport part's length (Total Length less
/// the header), when the packet is plain as far as its IPv4 header goes: the
/// [`PLAIN_LEN`] bytes in the frame, version 4, IHL 5, Total Length within the frame and
/// at least the header (`Ipv4Packet::new_checked`), no MF flag, offset 0. `None` otherwise.
#[inline(always)]
fn plain_header<'f>(frame: &'f [u8], rx: &Rx) -> Option<(&'f [u8; PLAIN_LEN], &'f [u8], u16, u16)> {
    let packet = frame.get(rx.l2_len..rx.len)?;
    let h: &[u8; PLAIN_LEN] = packet.first_chunk()?;
    let total = be16(h, 2);
    if h[0] != 0x45 || usize::from(total) > packet.len() || be16(h, 6) & 0x3fff != 0 {
        return None;
    }
    Some((h, packet, total, total.checked_sub(IP)?))
}

/// [`flow_key`] of a packet whose first [`PLAIN_LEN`] bytes are in the frame, with a
/// 20-byte header (IHL 5), not a fragment, carrying TCP or UDP with a well-formed header:
/// the same key, flag and [`LeanSegment`] as [`flow_key_checked`], whose checks it makes
/// ([`Ipv4Packet::new_checked`], [`TcpPacket::new_checked`], [`UdpPacket::new_checked`],
/// [`Ipv4Packet::verify_checksum`]) on a fixed-size array, so that no read needs its own
/// bounds check; and for a plain SYN (SYN without ACK or RST) also the SYN's segment,
/// which the general path takes from the hint ([`hinted_syn`]) and [`flow_key_checked`]
/// does not write (its SYNs go to [`segment`]). `None` (and `lean` unchanged) for any
/// other packet: the checked parse
/// decides those. Always inlined (stage 1's one call of it): as a plain `#[inline]` it was
/// called out of line once the crate also instantiated `process_burst` elsewhere (the fuzz
/// module), +60 instructions per established packet (callgrind, 2026-11-28).
#[inline(always)]
pub(super) fn flow_key_plain(
    frame: &[u8],
    rx: &Rx,
    lean: &mut LeanSegment,
    l3_checked: &mut bool,
) -> Option<(FlowKey, bool)> {
    let (h, _, total, l4_len) = plain_header(frame, rx)?;
    let checked = rx.l3_csum_good || h.first_chunk().is_some_and(checksum::ipv4_header_ok);
    let plain = h[8] > 1 && !rx.l4_csum_partial && checked;
    let protocol = h[9];
    // Both ports as one word: the key's hash takes them as one.
    let ports = be32(h, 20);
    let (src_port, dst_port) = ((ports >> 16) as u16, ports as u16);
    let opens = match IpProtocol::from(protocol) {
        IpProtocol::Tcp => {
            // `TcpPacket::new_checked`: the 20-byte header whole, Data Offset 5 or more and
            // within the segment.
            let doff = u16::from(h[32] >> 4) * 4;
            if l4_len < 20 || doff < 20 || doff > l4_len {
                return None;
            }
            let flags = TcpFlags(h[33]);
            // A lean frame's segment, or a SYN's (for the general path, `FlowHint::V4`): the
            // caller tells them apart by `opens`.
            if plain && hint::lean_or_syn_flags(flags) {
                tcp_segment(h, rx, total, u32::from(l4_len - doff), lean);
            }
            // `TcpSegment::of(flags) == TcpSegment::Syn` in one compare: SYN without ACK or RST.
            flags.0 & (TcpFlags::SYN.0 | TcpFlags::ACK.0 | TcpFlags::RST.0) == TcpFlags::SYN.0
        }
        IpProtocol::Udp => {
            // `UdpPacket::new_checked`: the 8-byte header whole, Length 8 or more and within
            // the datagram.
            let length = be16(h, 24);
            if l4_len < 8 || length < 8 || length > l4_len {
                return None;
            }
            if plain {
                *lean = LeanSegment { iface: rx.iface, l2_len: rx.l2_len as u8, total, tcp: TcpSeq::default() };
            }
            false
        }
        _ => return None,
    };
    let key = FlowKey {
        protocol,
        src_addr: Ipv4Addr::from_bits(be32(h, 12)),
        src_port,
        dst_addr: Ipv4Addr::from_bits(be32(h, 16)),
        dst_port,
    };
    *l3_checked = checked;
    Some((key, opens))
}

/// The big-endian 16-bit field at octet `at` of a plain packet's first [`PLAIN_LEN`] bytes
/// (`at` a constant at every call: no bounds check is left).
#[inline(always)]
fn be16(h: &[u8; PLAIN_LEN], at: usize) -> u16 {
    u16::from_be_bytes([h[at], h[at + 1]])
}

/// The big-endian 32-bit field at octet `at` of a plain packet's first [`PLAIN_LEN`] bytes.
#[inline(always)]
fn be32(h: &[u8; PLAIN_LEN], at: usize) -> u32 {
    u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
}

/// Writes into `lean` the [`LeanSegment`] of the plain TCP segment whose first [`PLAIN_LEN`]
/// bytes are `h` (the frame's link layer `rx`, Total Length `total`, `data` octets of data):
/// `hint::as_lean(flow::tcp_seq(..))` of it, the SYN's and FIN's counts out, no option read
/// (`LeanSegment::tcp`). Field by field, `tcp.wscale` left as it is: `None` in every
/// `LeanSegment` (`LeanSegment::tcp`), so no store for it.
#[inline(always)]
fn tcp_segment(h: &[u8; PLAIN_LEN], rx: &Rx, total: u16, data: u32, lean: &mut LeanSegment) {
    debug_assert_eq!(lean.tcp.wscale, None);
    (lean.iface, lean.l2_len, lean.total) = (rx.iface, rx.l2_len as u8, total);
    (lean.tcp.flags, lean.tcp.seq, lean.tcp.ack) = (TcpFlags(h[33]), be32(h, 24), be32(h, 28));
    (lean.tcp.window, lean.tcp.len) = (be16(h, 34), data);
}

/// [`flow_key`] read with checked views: every packet [`flow_key_plain`] does not take.
/// Cold: the uncommon headers' path, so that the compiler keeps stage 1's registers for
/// the plain one.
#[cold]
#[inline(never)]
pub(super) fn flow_key_checked(frame: &[u8], rx: Rx, lean: &mut LeanSegment) -> Option<(FlowKey, bool)> {
    let l3 = rx.l2_len;
    let ip = Ipv4Packet::new_checked(&frame[l3..rx.len]).ok()?;
    if ip.is_fragment() {
        return None;
    }
    let total = ip.total_len();
    let l4 = &frame[l3 + ip.header_len()..l3 + usize::from(total)];
    let protocol = ip.next_header();
    let plain = ip.header_len() == Ipv4Packet::<&[u8]>::HEADER_LEN
        && ip.hop_limit() > 1
        && !rx.l4_csum_partial
        && (rx.l3_csum_good || ip.verify_checksum());
    let segment = |tcp| LeanSegment { iface: rx.iface, l2_len: rx.l2_len as u8, total, tcp };
    let (src_port, dst_port, opens) = match protocol {
        IpProtocol::Tcp => {
            let t = TcpPacket::new_checked(l4).ok()?;
            let tcp = flow::tcp_seq(&t);
            if plain && hint::lean_tcp_flags(tcp.flags) {
                *lean = segment(hint::as_lean(tcp));
            }
            (t.src_port(), t.dst_port(), TcpSegment::of(tcp.flags) == TcpSegment::Syn)
        }
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(l4).ok()?;
            if plain {
                *lean = segment(TcpSeq::default());
            }
            (u.src_port(), u.dst_port(), false)
        }
        _ => hint::ports(protocol, l4)?,
    };
    let key =
        FlowKey { protocol: u8::from(protocol), src_addr: ip.src_addr(), src_port, dst_addr: ip.dst_addr(), dst_port };
    Some((key, opens))
}

/// Whether IPv4 `options` hold a Loose (131) or Strict (137) Source and Record Route option
/// ([RFC 791 § 3.1]). Malformed options end the walk (the packet is then not source-routed
/// as far as this check goes; nothing else reads options).
///
/// [RFC 791 § 3.1]: https://www.rfc-editor.org/rfc/rfc791#section-3.1
fn source_routed(options: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&kind) = options.get(i) {
        match kind {
            0 => return false,
            1 => i += 1,
            131 | 137 => return true,
            _ => match options.get(i + 1) {
                Some(&len) if len >= 2 => i += usize::from(len),
                _ => return false,
            },
        }
    }
    false
}

/// Handles the IPv4 packet after the link-layer header of `frame`: a SYN whose segment
/// stage 1 of a burst took whole from its hints ([`hinted_syn`]), any other plain TCP or
/// UDP packet read at fixed offsets ([`segment_plain`]), anything else with checked views
/// ([`segment`]), then its flow ([`flow::handle`]).
pub(super) fn handle(now: u64, frame: &mut [u8], rx: &Rx, table: &Table, st: &mut WorkerState) -> Verdict {
    let hints = st.hints.current_ref();
    let seg = match hinted_syn(frame, rx, hints).or_else(|| segment_plain(frame, rx, hints.l3_checked)) {
        Some(seg) => seg,
        None => match segment(now, frame, rx, table, st) {
            Ok(seg) => seg,
            Err(v) => return v,
        },
    };
    flow::handle(now, frame, rx, table, st, &seg)
}

/// The [`Segment`] of the SYN after the link-layer header `rx` of `frame` whose segment stage
/// 1 of a burst took whole ([`hint::FlowHint::V4`], the frame's hints `hints`), built from
/// the hint's key and segment: the one [`segment_plain`] finds (a property test compares
/// them: `pipeline/tests/stage1.rs`), the TTL and a Window Scale option read from the
/// frame. `None` for any other frame.
#[inline(always)]
pub(super) fn hinted_syn(frame: &[u8], rx: &Rx, hints: &hint::FrameHints) -> Option<Segment<Ipv4Addr>> {
    let Some(hint::FlowHint::V4(key, _, syn)) = &hints.flow else { return None };
    if !syn.is_lean() {
        return None;
    }
    Some(Segment {
        src: key.src_addr,
        dst: key.dst_addr,
        proto: IpProtocol::Tcp,
        ttl: *frame.get(rx.l2_len + 8)?,
        l4_offset: usize::from(IP),
        total: usize::from(syn.total),
        sport: key.src_port,
        dport: key.dst_port,
        tcp: syn.tcp_seq(usize::from(IP), || syn.syn_window_scale(frame, usize::from(IP))),
        sctp: Chunks::default(),
        first_fragment: None,
    })
}

/// What [`segment`] finds for a packet whose first [`PLAIN_LEN`] bytes are in the frame,
/// with a 20-byte header (IHL 5), not a fragment, carrying TCP or UDP with a well-formed
/// header and a correct header checksum (or one the device vouched for, `rx.l3_csum_good`,
/// or stage 1 of a burst found correct, `l3_checked`): the same [`Segment`], read at fixed
/// offsets after one bounds check, as [`flow_key_plain`] reads the key (a property test
/// compares the two). `None` for any other packet: [`segment`] decides those (and the drops).
#[inline]
pub(super) fn segment_plain(frame: &[u8], rx: &Rx, l3_checked: bool) -> Option<Segment<Ipv4Addr>> {
    let (h, packet, total, l4_len) = plain_header(frame, rx)?;
    if !(rx.l3_csum_good || l3_checked || h.first_chunk().is_some_and(checksum::ipv4_header_ok)) {
        return None;
    }
    let (proto, tcp) = match IpProtocol::from(h[9]) {
        IpProtocol::Tcp => {
            // `TcpPacket::new_checked`: the 20-byte header whole, Data Offset 5 or more and
            // within the segment; then `flow::tcp_seq`.
            let doff = u16::from(h[32] >> 4) * 4;
            if l4_len < 20 || doff < 20 || doff > l4_len {
                return None;
            }
            let flags = TcpFlags(h[33]);
            let wscale = if flags.contains(TcpFlags::SYN) {
                let options = packet.get(40..usize::from(IP + doff))?;
                crate::conntrack::window::window_scale_option(options)
            } else {
                None
            };
            let len = u32::from(l4_len - doff)
                .wrapping_add(u32::from(flags.contains(TcpFlags::SYN)))
                .wrapping_add(u32::from(flags.contains(TcpFlags::FIN)));
            (IpProtocol::Tcp, TcpSeq { flags, seq: be32(h, 24), ack: be32(h, 28), window: be16(h, 34), len, wscale })
        }
        IpProtocol::Udp => {
            // `UdpPacket::new_checked`: the 8-byte header whole, Length 8 or more and within
            // the datagram.
            let length = be16(h, 24);
            if l4_len < 8 || length < 8 || length > l4_len {
                return None;
            }
            (IpProtocol::Udp, TcpSeq::default())
        }
        _ => return None,
    };
    Some(Segment {
        src: Ipv4Addr::from_bits(be32(h, 12)),
        dst: Ipv4Addr::from_bits(be32(h, 16)),
        proto,
        ttl: h[8],
        l4_offset: usize::from(IP),
        total: usize::from(total),
        sport: be16(h, 20),
        dport: be16(h, 22),
        tcp,
        sctp: Chunks::default(),
        first_fragment: None,
    })
}

/// The [`Segment`] of the IPv4 packet after the link-layer header of `frame`, read with
/// checked views, or what becomes of a packet that is not one: a drop (malformed, bad
/// header checksum, source-routed, …), an ICMP packet handled ([`icmp::handle`]), a later
/// fragment sent along its first ([`fragment::follow`]). Cold and out of line: what
/// [`segment_plain`] does not take, kept out of [`handle`]'s registers.
#[cold]
#[inline(never)]
pub(super) fn segment(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
) -> Result<Segment<Ipv4Addr>, Verdict> {
    let l3 = rx.l2_len;
    let (src, dst, proto, ttl, ihl, total, frag) = {
        let Ok(ip) = Ipv4Packet::new_checked(&frame[l3..rx.len]) else {
            return Err(Verdict::Drop(DropReason::MalformedIpv4));
        };
        // Stage 1 of a burst may have summed the header already (`FrameHints::l3_checked`).
        if !rx.l3_csum_good && !st.hints.current_ref().l3_checked && !ip.verify_checksum() {
            return Err(Verdict::Drop(DropReason::BadIpv4Checksum));
        }
        if ip.header_len() > Ipv4Packet::<&[u8]>::HEADER_LEN && source_routed(ip.options()) {
            return Err(Verdict::Drop(DropReason::SourceRouted));
        }
        let frag = ip.is_fragment().then(|| (ip.ident(), ip.frag_offset(), ip.more_frags()));
        let (ihl, total) = (ip.header_len(), usize::from(ip.total_len()));
        (ip.src_addr(), ip.dst_addr(), ip.next_header(), ip.hop_limit(), ihl, total, frag)
    };
    let l4: Range<usize> = l3 + ihl..l3 + total;
    let mut first_fragment = None;
    if let Some((ident, offset, more)) = frag {
        if !matches!(proto, IpProtocol::Tcp | IpProtocol::Udp) {
            return Err(Verdict::Drop(DropReason::Fragment));
        }
        let fragment = Fragment {
            key: FragmentKey { src, dst, protocol: u8::from(proto), ident: u32::from(ident) },
            offset,
            payload_len: (total - ihl) as u16,
            more,
        };
        if offset != 0 {
            return Err(fragment::follow(now, frame, rx, table, st, &fragment, ttl, total));
        }
        first_fragment = Some(fragment);
    }
    let (sport, dport, tcp, chunks) = match proto {
        IpProtocol::Tcp => match TcpPacket::new_checked(&frame[l4.clone()]) {
            Ok(t) => (t.src_port(), t.dst_port(), flow::tcp_seq(&t), Chunks::default()),
            Err(_) => return Err(Verdict::Drop(DropReason::MalformedL4)),
        },
        IpProtocol::Udp if first_fragment.is_some() => match fragment::first_udp_header(&frame[l4.clone()]) {
            Some((sport, dport, _)) => (sport, dport, TcpSeq::default(), Chunks::default()),
            None => return Err(Verdict::Drop(DropReason::MalformedL4)),
        },
        IpProtocol::Udp => match UdpPacket::new_checked(&frame[l4.clone()]) {
            Ok(u) => (u.src_port(), u.dst_port(), TcpSeq::default(), Chunks::default()),
            Err(_) => return Err(Verdict::Drop(DropReason::MalformedL4)),
        },
        IpProtocol::Sctp => match sctp::parse(&frame[l4.clone()], rx.l4_csum_partial || rx.l4_csum_good) {
            Ok((sport, dport, chunks)) => (sport, dport, TcpSeq::default(), chunks),
            Err(sctp::Refused::Malformed) => return Err(Verdict::Drop(DropReason::MalformedL4)),
            Err(sctp::Refused::Checksum) => return Err(Verdict::Drop(DropReason::BadSctpChecksum)),
        },
        IpProtocol::Icmp => return Err(icmp::handle(now, frame, rx, table, st, src, dst, l4)),
        _ => return Err(Verdict::Drop(DropReason::UnsupportedProtocol)),
    };
    Ok(Segment { src, dst, proto, ttl, l4_offset: ihl, total, sport, dport, tcp, sctp: chunks, first_fragment })
}
