//! Answers for packets that cannot be served, as kube-proxy's REJECT rule gives them for a
//! Service without endpoints: a TCP RST (RFC 9293 § 3.10.7.1), else ICMP destination port
//! unreachable (RFC 792, RFC 1812 § 4.3.2.3) or, over IPv6, ICMPv6 destination unreachable
//! code 4, port unreachable (RFC 4443 § 3.1; Linux's `icmp6-port-unreachable`). Built in
//! place over the received frame and sent back out the ingress interface to the frame's
//! source MAC, from the address the client sent to (the VIP).

use std::net::Ipv6Addr;

use super::frame::ORIGINATED_TTL;
use super::link::{self, Rx};
use super::{Verdict, WorkerState};
use crate::counters::DropReason;
use crate::wire::checksum::PseudoHeaderAddr;
use crate::wire::icmpv4::DST_UNREACHABLE_PORT;
use crate::wire::icmpv6::{self, NEXT_HEADER_ICMPV6};
use crate::wire::{
    Icmpv4Packet, Icmpv4Type, Icmpv6Packet, Icmpv6Type, IpProtocol, Ipv4Packet, Ipv6Packet, TcpFlags, TcpPacket,
};

/// Length of the RST the gateway sends: a TCP header without options.
const RST_LEN: usize = 20;

/// Rejects the IPv4 or IPv6 packet in `frame` (the version field says which). A RST is
/// never answered with a RST (RFC 9293 § 3.10.7.1); such a segment is dropped as
/// [`DropReason::NoConntrack`].
pub(super) fn reject(frame: &mut [u8], rx: &Rx, st: &mut WorkerState) -> Verdict {
    let built = match frame.get(rx.l2_len).map(|b| b >> 4) {
        Some(6) => build_v6(frame, rx.len, rx.l2_len),
        _ => build(frame, rx.len, rx.l2_len),
    };
    let Some(l3_len) = built else {
        return Verdict::Drop(DropReason::NoConntrack);
    };
    st.counters.rejected += 1;
    link::answer(frame, rx, l3_len, &st.host)
}

/// Builds the answer over the packet at `eth..len` of `frame`, in place at `eth`; returns
/// the answer's length from `eth`, or `None` when none is due (a RST, a malformed packet,
/// a buffer too small).
fn build(frame: &mut [u8], len: usize, eth: usize) -> Option<usize> {
    let (src, dst, proto, ihl, total) = {
        let ip = Ipv4Packet::new_checked(&frame[eth..len]).ok()?;
        (ip.src_addr(), ip.dst_addr(), ip.next_header(), ip.header_len(), usize::from(ip.total_len()))
    };
    if proto == IpProtocol::Tcp {
        let rst = Rst::answering(&frame[eth + ihl..eth + total])?;
        let out = &mut frame[eth..eth + 20 + RST_LEN];
        Ipv4Packet::new_unchecked(&mut out[..]).fill_header(dst, src, IpProtocol::Tcp, RST_LEN as u16, ORIGINATED_TTL);
        rst.write(&mut out[20..], dst, src);
        Some(20 + RST_LEN)
    } else {
        // RFC 792 / RFC 1812 § 4.3.2.3: quote the IP header and the first 8 data bytes.
        let quoted = (ihl + 8).min(total);
        let need = eth + 20 + 8 + quoted;
        if frame.len() < need {
            return None;
        }
        frame.copy_within(eth..eth + quoted, eth + 28);
        let icmp_len = 8 + quoted;
        Ipv4Packet::new_unchecked(&mut frame[eth..eth + 20]).fill_header(
            dst,
            src,
            IpProtocol::Icmp,
            icmp_len as u16,
            ORIGINATED_TTL,
        );
        let mut icmp = Icmpv4Packet::new_unchecked(&mut frame[eth + 20..need]);
        icmp.set_msg_type(Icmpv4Type::DstUnreachable);
        icmp.set_msg_code(DST_UNREACHABLE_PORT);
        icmp.set_echo_ident(0); // the "unused" word
        icmp.set_echo_seq_no(0);
        icmp.fill_checksum();
        Some(need - eth)
    }
}

/// The RST answering a TCP segment (RFC 9293 § 3.10.7.1): "If the incoming segment has an
/// ACK field, the reset takes its sequence number from the ACK field of the segment,
/// otherwise the reset has sequence number zero and the ACK field is set to the sum of the
/// sequence number and segment length of the incoming segment."
struct Rst {
    /// The incoming segment's source port (the RST's destination port).
    sport: u16,
    /// The incoming segment's destination port (the RST's source port).
    dport: u16,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
}

impl Rst {
    /// The RST for the segment `segment`; `None` for a malformed segment or a RST.
    fn answering(segment: &[u8]) -> Option<Rst> {
        let t = TcpPacket::new_checked(segment).ok()?;
        let flags = t.flags();
        if flags.contains(TcpFlags::RST) {
            return None;
        }
        let (sport, dport) = (t.src_port(), t.dst_port());
        Some(if flags.contains(TcpFlags::ACK) {
            Rst { sport, dport, seq: t.ack_number(), ack: 0, flags: TcpFlags::RST }
        } else {
            let ack = t.seq_number().wrapping_add(t.segment_len());
            Rst { sport, dport, seq: 0, ack, flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0) }
        })
    }

    /// Writes the RST from `src` to `dst` (either family) into `out[..RST_LEN]`.
    fn write<A: PseudoHeaderAddr>(&self, out: &mut [u8], src: A, dst: A) {
        let mut t = TcpPacket::new_unchecked(&mut out[..RST_LEN]);
        t.set_src_port(self.dport);
        t.set_dst_port(self.sport);
        t.set_seq_number(self.seq);
        t.set_ack_number(self.ack);
        t.set_header_len(RST_LEN);
        t.set_flags(self.flags);
        t.set_window_len(0);
        t.set_urgent_at(0);
        t.fill_checksum(src, dst);
    }
}

/// [`build`] for IPv6: a RST, or ICMPv6 port unreachable quoting "as much of invoking packet
/// as possible without the ICMPv6 packet exceeding the minimum IPv6 MTU" (RFC 4443 § 2.4 (c))
/// and the buffer.
fn build_v6(frame: &mut [u8], len: usize, eth: usize) -> Option<usize> {
    const IP6: usize = Ipv6Packet::<&[u8]>::HEADER_LEN;
    let (src, dst, upper, total): (Ipv6Addr, Ipv6Addr, _, usize) = {
        let ip = Ipv6Packet::new_checked(&frame[eth..len]).ok()?;
        (ip.src_addr(), ip.dst_addr(), ip.upper_layer().ok()?, ip.total_len())
    };
    if upper.protocol == IpProtocol::Tcp {
        let rst = Rst::answering(&frame[eth + upper.offset..eth + total])?;
        let out = &mut frame[eth..eth + IP6 + RST_LEN];
        Ipv6Packet::new_unchecked(&mut out[..]).fill_header(
            dst,
            src,
            u8::from(IpProtocol::Tcp),
            RST_LEN as u16,
            ORIGINATED_TTL,
        );
        rst.write(&mut out[IP6..], dst, src);
        Some(IP6 + RST_LEN)
    } else {
        let head = IP6 + Icmpv6Packet::<&[u8]>::HEADER_LEN;
        let quoted = total
            .min(icmpv6::MAX_ERROR_LEN - Icmpv6Packet::<&[u8]>::HEADER_LEN)
            .min(frame.len().checked_sub(eth + head)?);
        frame.copy_within(eth..eth + quoted, eth + head);
        let icmp_len = head - IP6 + quoted;
        Ipv6Packet::new_unchecked(&mut frame[eth..eth + IP6]).fill_header(
            dst,
            src,
            NEXT_HEADER_ICMPV6,
            icmp_len as u16,
            ORIGINATED_TTL,
        );
        let mut icmp = Icmpv6Packet::new_unchecked(&mut frame[eth + IP6..eth + IP6 + icmp_len]);
        icmp.set_msg_type(Icmpv6Type::DstUnreachable);
        icmp.set_msg_code(icmpv6::DST_UNREACHABLE_PORT);
        icmp.set_word(0);
        icmp.fill_checksum(dst, src);
        Some(IP6 + icmp_len)
    }
}
