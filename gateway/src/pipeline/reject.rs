//! Answers for packets that cannot be served, as kube-proxy's REJECT rule gives them for a
//! Service without endpoints: a TCP RST (RFC 9293 § 3.10.7.1), else ICMP destination port
//! unreachable (RFC 792, RFC 1812 § 4.3.2.3). Built in place over the received frame and
//! sent back out the ingress interface to the frame's source MAC, from the address the
//! client sent to (the VIP).

use super::link::{self, Rx};
use super::{Verdict, WorkerState, ORIGINATED_TTL};
use crate::counters::DropReason;
use crate::wire::icmpv4::DST_UNREACHABLE_PORT;
use crate::wire::{Icmpv4Packet, Icmpv4Type, IpProtocol, Ipv4Packet, TcpFlags, TcpPacket};

/// Rejects the IPv4 packet in `frame`. A RST is never answered with a RST (RFC 9293
/// § 3.10.7.1); such a segment is dropped as [`DropReason::NoConntrack`].
pub(super) fn reject(frame: &mut [u8], rx: &Rx, st: &mut WorkerState) -> Verdict {
    let Some(l3_len) = build(frame, rx.len, rx.l2_len) else {
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
        // RFC 9293 § 3.10.7.1: "If the incoming segment has an ACK field, the reset takes its
        // sequence number from the ACK field of the segment, otherwise the reset has
        // sequence number zero and the ACK field is set to the sum of the sequence number
        // and segment length of the incoming segment."
        let (sport, dport, seq, ack, flags, seg_len) = {
            let t = TcpPacket::new_checked(&frame[eth + ihl..eth + total]).ok()?;
            (t.src_port(), t.dst_port(), t.seq_number(), t.ack_number(), t.flags(), t.segment_len())
        };
        if flags.contains(TcpFlags::RST) {
            return None;
        }
        let (rst_seq, rst_ack, rst_flags) = if flags.contains(TcpFlags::ACK) {
            (ack, 0, TcpFlags::RST)
        } else {
            (0, seq.wrapping_add(seg_len), TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0))
        };
        let out = &mut frame[eth..eth + 40];
        Ipv4Packet::new_unchecked(&mut out[..]).fill_header(dst, src, IpProtocol::Tcp, 20, ORIGINATED_TTL);
        let mut t = TcpPacket::new_unchecked(&mut out[20..40]);
        t.set_src_port(dport);
        t.set_dst_port(sport);
        t.set_seq_number(rst_seq);
        t.set_ack_number(rst_ack);
        t.set_header_len(20);
        t.set_flags(rst_flags);
        t.set_window_len(0);
        t.set_urgent_at(0);
        t.fill_checksum(dst, src);
        Some(40)
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
