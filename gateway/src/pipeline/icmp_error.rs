//! ICMP errors about tracked flows ([RFC 792]: destination unreachable — fragmentation
//! needed included —, time exceeded, parameter problem): translated and forwarded to the
//! flow's other end, so that path-MTU discovery ([RFC 1191]) and traceroute work through the
//! gateway, as Linux NAT does (`nf_nat_icmp_reply_translation`) and [RFC 5508] § 4.2 asks of
//! NATs.
//!
//! An error quotes a datagram the gateway sent. Looked up reversed, the quote is a tuple
//! conntrack indexes:
//!
//! - from the endpoint's side (the endpoint itself or a router towards it), the quote is
//!   `SNAT:port → endpoint:port`; reversed it is the flow's reply tuple. The quote is
//!   rewritten to what the client sent (`client → VIP`, the flow's original tuple) and the
//!   outer header to `VIP → client`; the error goes where the flow's replies go.
//! - from the client's side, the quote is `VIP → client` (a reply the gateway forwarded);
//!   reversed it is the original tuple. The quote becomes what the endpoint sent
//!   (`endpoint → SNAT:port`) and the outer header `SNAT → endpoint`; the error goes where
//!   the flow's original packets go.
//!
//! The outer source becomes the VIP (or SNAT address) whoever sent the error, as in Linux's
//! full NAT: the client learns nothing of the network behind the gateway. Checksums: the
//! ICMP checksum is verified on arrival and recomputed over the rewritten message; the
//! quoted IPv4 header checksum and the quoted TCP/UDP checksum (as far as the quote holds
//! it) are updated incrementally ([`QuotedIpv4::translate`]); the outer IPv4 header is
//! updated incrementally with its TTL decremented. A "fragmentation needed" error's
//! next-hop MTU (RFC 1191 § 4) is passed on unchanged: full NAT rewrites addresses and ports
//! in place and changes no header's size, so the MTU the path allows is the same on both
//! sides.
//!
//! Errors are not answered and do not refresh the flow's idle timeout (they are "related"
//! traffic, not the flow's own). An error quoting no tracked flow, a quote without ports
//! (a later fragment), or an error not addressed to the quoted datagram's sender is dropped
//! as [`DropReason::IcmpErrorUntracked`].
//!
//! [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
//! [RFC 1191]: https://www.rfc-editor.org/rfc/rfc1191
//! [RFC 5508]: https://www.rfc-editor.org/rfc/rfc5508#section-4.2

use std::net::Ipv4Addr;
use std::ops::Range;

use super::link::{self, Rx};
use super::{flow, Verdict, WorkerState};
use crate::conntrack::{Direction, FlowKey};
use crate::counters::DropReason;
use crate::nat;
use crate::wire::icmpv4::QuotedIpv4;
use crate::wire::{Icmpv4Packet, Ipv4Packet};

/// Translates and forwards the ICMP error at `l4` of the IPv4 packet addressed to `dst` in
/// `frame`, or drops it.
pub(super) fn handle(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    dst: Ipv4Addr,
    l4: Range<usize>,
) -> Verdict {
    let l3 = rx.l2_len;
    let quoted_key = {
        let icmp = Icmpv4Packet::new_unchecked(&frame[l4.clone()]);
        if !icmp.verify_checksum() {
            return Verdict::Drop(DropReason::BadIcmpChecksum);
        }
        let Ok(quote) = QuotedIpv4::new_checked(icmp.data()) else {
            return Verdict::Drop(DropReason::MalformedL4);
        };
        let Some((sport, dport)) = quote.ports() else {
            return Verdict::Drop(DropReason::IcmpErrorUntracked);
        };
        if quote.src_addr() != dst {
            return Verdict::Drop(DropReason::IcmpErrorUntracked);
        }
        FlowKey {
            protocol: u8::from(quote.next_header()),
            src_addr: quote.src_addr(),
            src_port: sport,
            dst_addr: quote.dst_addr(),
            dst_port: dport,
        }
    };
    let Some((id, dir)) = st.conntrack.lookup(&quoted_key.reversed()) else {
        return Verdict::Drop(DropReason::IcmpErrorUntracked);
    };
    if st.conntrack.state(id).deadline.is_due(now) {
        return Verdict::Drop(DropReason::IcmpErrorUntracked);
    }
    let flow = st.conntrack.get(id);
    if Ipv4Packet::new_unchecked(&frame[l3..l4.end]).hop_limit() <= 1 {
        return Verdict::Drop(DropReason::TtlExceeded);
    }
    // The error travels like the flow's packets in the direction opposite to the quote's.
    let (rw, out_iface, dst_mac) = match flow::egress(now, st, &flow, dir) {
        Ok(e) => e,
        Err(reason) => return Verdict::Drop(reason),
    };
    // The quote becomes the datagram the peer sent: the flow's tuple in the quote's direction.
    let q = if dir == Direction::Reply { flow.original } else { flow.reply };
    let icmp_buf = &mut frame[l4.clone()];
    QuotedIpv4::new_unchecked(&mut icmp_buf[Icmpv4Packet::<&[u8]>::HEADER_LEN..])
        .translate(q.src_addr, q.src_port, q.dst_addr, q.dst_port);
    Icmpv4Packet::new_unchecked(icmp_buf).fill_checksum();
    nat::rewrite_ipv4_header(&mut frame[l3..l4.end], rw.src_addr, rw.dst_addr);
    let verdict = link::transmit(frame, rx, l4.end - l3, out_iface, dst_mac, &st.host);
    if let Verdict::Transmit { .. } = verdict {
        st.counters.icmp_errors_translated += 1;
    }
    verdict
}
