//! ICMP errors about tracked flows ([RFC 792]: destination unreachable — fragmentation
//! needed included —, time exceeded, parameter problem; ICMPv6, [RFC 4443] § 3: destination
//! unreachable, packet too big, time exceeded, parameter problem): translated and forwarded
//! to the flow's other end, so that path-MTU discovery ([RFC 1191], [RFC 8201]) and
//! traceroute work through the gateway, as Linux NAT does (`nf_nat_icmp_reply_translation`,
//! `nf_nat_icmpv6_reply_translation`) and [RFC 5508] § 4.2 asks of NATs. One path for both
//! families, generic over [`ErrorFamily`].
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
//! ICMP checksum is verified on arrival and recomputed over the rewritten message (ICMPv6's
//! with the new outer addresses in its pseudo-header, [RFC 4443] § 2.3); the quoted IPv4
//! header checksum and the quoted TCP/UDP checksum (as far as the quote holds it) are
//! updated incrementally ([`QuotedIpv4::translate`], [`QuotedIpv6::translate`], which walks
//! the quoted extension headers); the outer header is rewritten with its TTL / Hop Limit
//! decremented (IPv4's header checksum incrementally). A "fragmentation needed" error's
//! next-hop MTU (RFC 1191 § 4) and a "packet too big" error's MTU (RFC 4443 § 3.2) are
//! passed on unchanged: full NAT rewrites addresses and ports in place and changes no
//! header's size, so the MTU the path allows is the same on both sides.
//!
//! Errors are not answered and do not refresh the flow's idle timeout (they are "related"
//! traffic, not the flow's own). An error quoting no tracked flow, a quote without ports
//! (a later fragment), or an error not addressed to the quoted datagram's sender is dropped
//! as [`DropReason::IcmpErrorUntracked`].
//!
//! [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
//! [RFC 1191]: https://www.rfc-editor.org/rfc/rfc1191
//! [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443
//! [RFC 8201]: https://www.rfc-editor.org/rfc/rfc8201
//! [RFC 5508]: https://www.rfc-editor.org/rfc/rfc5508#section-4.2

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use super::family::Family;
use super::link::{self, Rx};
use super::{flow, Verdict, WorkerState};
use crate::conntrack::{Direction, FlowKey};
use crate::counters::DropReason;
use crate::wire::icmpv4::QuotedIpv4;
use crate::wire::icmpv6::QuotedIpv6;
use crate::wire::{Icmpv4Packet, Icmpv6Packet, Ipv4Packet, Ipv6Packet};

/// What differs between ICMP and ICMPv6 errors: the checksum (ICMPv6's covers a
/// pseudo-header), the quote's view ([`QuotedIpv4`], [`QuotedIpv6`]) and where the TTL / Hop
/// Limit is.
pub(super) trait ErrorFamily: Family {
    /// Checks the checksum of the ICMP error message `icmp` carried `src` → `dst` and reads
    /// the tuple of the datagram it quotes, in the quote's direction.
    ///
    /// # Errors
    /// [`DropReason::BadIcmpChecksum`]; [`DropReason::MalformedL4`] for a quote without a
    /// whole IP header; [`DropReason::IcmpErrorUntracked`] for a quote without ports.
    fn quoted_key(icmp: &[u8], src: Self, dst: Self) -> Result<FlowKey<Self>, DropReason>;

    /// Rewrites the quote of the error message `icmp` to the tuple `q` and refills the
    /// message's checksum for its new outer addresses `src` → `dst`.
    fn translate(icmp: &mut [u8], q: &FlowKey<Self>, src: Self, dst: Self);

    /// The TTL / Hop Limit of the IP packet `ip`.
    fn hop_limit(ip: &[u8]) -> u8;
}

impl ErrorFamily for Ipv4Addr {
    fn quoted_key(icmp: &[u8], _src: Self, _dst: Self) -> Result<FlowKey<Self>, DropReason> {
        let icmp = Icmpv4Packet::new_unchecked(icmp);
        if !icmp.verify_checksum() {
            return Err(DropReason::BadIcmpChecksum);
        }
        let quote = QuotedIpv4::new_checked(icmp.data()).map_err(|_| DropReason::MalformedL4)?;
        let (sport, dport) = quote.ports().ok_or(DropReason::IcmpErrorUntracked)?;
        Ok(FlowKey {
            protocol: u8::from(quote.next_header()),
            src_addr: quote.src_addr(),
            src_port: sport,
            dst_addr: quote.dst_addr(),
            dst_port: dport,
        })
    }

    fn translate(icmp: &mut [u8], q: &FlowKey<Self>, _src: Self, _dst: Self) {
        QuotedIpv4::new_unchecked(&mut icmp[Icmpv4Packet::<&[u8]>::HEADER_LEN..])
            .translate(q.src_addr, q.src_port, q.dst_addr, q.dst_port);
        Icmpv4Packet::new_unchecked(icmp).fill_checksum();
    }

    fn hop_limit(ip: &[u8]) -> u8 {
        Ipv4Packet::new_unchecked(ip).hop_limit()
    }
}

impl ErrorFamily for Ipv6Addr {
    fn quoted_key(icmp: &[u8], src: Self, dst: Self) -> Result<FlowKey<Self>, DropReason> {
        let icmp = Icmpv6Packet::new_unchecked(icmp);
        if !icmp.verify_checksum(src, dst) {
            return Err(DropReason::BadIcmpChecksum);
        }
        let quote = QuotedIpv6::new_checked(icmp.data()).map_err(|_| DropReason::MalformedL4)?;
        let (protocol, sport, dport) = quote.ports().ok_or(DropReason::IcmpErrorUntracked)?;
        Ok(FlowKey {
            protocol: u8::from(protocol),
            src_addr: quote.src_addr(),
            src_port: sport,
            dst_addr: quote.dst_addr(),
            dst_port: dport,
        })
    }

    fn translate(icmp: &mut [u8], q: &FlowKey<Self>, src: Self, dst: Self) {
        QuotedIpv6::new_unchecked(&mut icmp[Icmpv6Packet::<&[u8]>::HEADER_LEN..])
            .translate(q.src_addr, q.src_port, q.dst_addr, q.dst_port);
        Icmpv6Packet::new_unchecked(icmp).fill_checksum(src, dst);
    }

    fn hop_limit(ip: &[u8]) -> u8 {
        Ipv6Packet::new_unchecked(ip).hop_limit()
    }
}

/// Translates and forwards the ICMP error at `l4` (the whole message, already checked to hold
/// the ICMP header) of the IP packet `src` → `dst` in `frame`, or drops it.
pub(super) fn handle<A: ErrorFamily>(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    st: &mut WorkerState,
    (src, dst): (A, A),
    l4: Range<usize>,
) -> Verdict {
    let l3 = rx.l2_len;
    let quoted_key = match A::quoted_key(&frame[l4.clone()], src, dst) {
        Ok(key) => key,
        Err(reason) => return Verdict::Drop(reason),
    };
    if quoted_key.src_addr != dst {
        return Verdict::Drop(DropReason::IcmpErrorUntracked);
    }
    let Some((id, dir)) = A::conntrack(st).lookup(&quoted_key.reversed()) else {
        return Verdict::Drop(DropReason::IcmpErrorUntracked);
    };
    if A::conntrack(st).state(id).deadline.is_due(now) {
        return Verdict::Drop(DropReason::IcmpErrorUntracked);
    }
    let flow = A::conntrack(st).get(id);
    // The error comes from where the flow's packets in direction `dir` come from.
    if rx.iface != flow.state.links.of(dir) {
        return Verdict::Drop(DropReason::WrongLink);
    }
    if A::hop_limit(&frame[l3..l4.end]) <= 1 {
        return Verdict::Drop(DropReason::TtlExceeded);
    }
    // The error travels like the flow's packets in the direction opposite to the quote's.
    let (rw, out_iface, dst_mac, _) = match flow::egress(now, st, &flow, dir) {
        Ok(e) => e,
        Err(reason) => return Verdict::Drop(reason),
    };
    // The quote becomes the datagram the peer sent: the flow's tuple in the quote's direction.
    let q = if dir == Direction::Reply { flow.original } else { flow.reply };
    A::translate(&mut frame[l4.clone()], &q, rw.src_addr, rw.dst_addr);
    A::rewrite_header(&mut frame[l3..l4.end], rw.src_addr, rw.dst_addr);
    let verdict = link::transmit(frame, rx, l4.end - l3, out_iface, dst_mac, &st.host);
    if let Verdict::Transmit { .. } = verdict {
        st.counters.icmp_errors_translated += 1;
    }
    verdict
}
