//! ICMP addressed to the gateway (RFC 792) and ICMPv6 echo (RFC 4443 § 4): errors
//! (unreachable, time exceeded, parameter problem) about tracked IPv4 flows are translated
//! and forwarded ([`super::icmp_error`]); echo requests to a VIP or an own address are
//! answered in place with an echo reply; any other ICMP is a counted drop.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use super::frame::ORIGINATED_TTL;
use super::link::{self, Rx};
use super::{icmp_error, Verdict, WorkerState};
use crate::counters::DropReason;
use crate::table::Table;
use crate::wire::checksum;
use crate::wire::icmpv6::NEXT_HEADER_ICMPV6;
use crate::wire::{Icmpv4Packet, Icmpv4Type, Icmpv6Packet, Icmpv6Type, IpProtocol, Ipv4Packet, Ipv6Packet};

/// Handles the ICMP message at `l4` of the IPv4 packet `src` → `dst` in `frame`.
#[allow(clippy::too_many_arguments)]
pub(super) fn handle(
    now: u64,
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    l4: Range<usize>,
) -> Verdict {
    let Ok(msg_type) = Icmpv4Packet::new_checked(&frame[l4.clone()]).map(|p| p.msg_type()) else {
        return Verdict::Drop(DropReason::IcmpNotHandled);
    };
    if msg_type.is_error() {
        return icmp_error::handle(now, frame, rx, st, (src, dst), l4);
    }
    let for_us = st.host.is_own(dst) || table.is_vip(IpAddr::V4(dst));
    let is_echo = msg_type == Icmpv4Type::EchoRequest;
    if !for_us {
        return Verdict::Drop(DropReason::NoFrontend);
    }
    if !is_echo {
        return Verdict::Drop(DropReason::IcmpNotHandled);
    }
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[rx.l2_len..l4.end]);
        let proto = u8::from(IpProtocol::Icmp);
        let c = checksum::update16(
            ip.checksum(),
            u16::from_be_bytes([ip.hop_limit(), proto]),
            u16::from_be_bytes([ORIGINATED_TTL, proto]),
        );
        // Swapping source and destination leaves the header sum unchanged.
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_hop_limit(ORIGINATED_TTL);
        ip.set_checksum(c);
    }
    let mut icmp = Icmpv4Packet::new_unchecked(&mut frame[l4.clone()]);
    let c = checksum::update16(
        icmp.checksum(),
        u16::from_be_bytes([u8::from(Icmpv4Type::EchoRequest), 0]),
        u16::from_be_bytes([u8::from(Icmpv4Type::EchoReply), 0]),
    );
    icmp.set_msg_type(Icmpv4Type::EchoReply);
    icmp.set_msg_code(0);
    icmp.set_checksum(c);
    st.counters.echo_replies += 1;
    link::answer(frame, rx, l4.end - rx.l2_len, &st.host)
}

/// Answers the ICMPv6 Echo Request at `l4` of the IPv6 packet `src` → `dst` in `frame` with
/// an Echo Reply (RFC 4443 § 4.2: the identifier, sequence number and data of the request),
/// from `dst`, when `dst` is a VIP or an own address. Extension headers of the request are
/// not repeated: the reply is an IPv6 header (Hop Limit [`ORIGINATED_TTL`]) and the ICMPv6
/// message. The checksum is updated incrementally: the pseudo-header is unchanged by the
/// swap of the addresses, only the type changes.
pub(super) fn echo_v6(
    frame: &mut [u8],
    rx: &Rx,
    table: &Table,
    st: &mut WorkerState,
    (src, dst): (Ipv6Addr, Ipv6Addr),
    l4: Range<usize>,
) -> Verdict {
    if !(st.host.is_own(dst) || table.is_vip(IpAddr::V6(dst))) {
        return Verdict::Drop(DropReason::NoFrontend);
    }
    let l3 = rx.l2_len;
    let icmp_at = l3 + Ipv6Packet::<&[u8]>::HEADER_LEN;
    let icmp_len = l4.len();
    frame.copy_within(l4, icmp_at);
    Ipv6Packet::new_unchecked(&mut frame[l3..icmp_at]).fill_header(
        dst,
        src,
        NEXT_HEADER_ICMPV6,
        icmp_len as u16,
        ORIGINATED_TTL,
    );
    let mut icmp = Icmpv6Packet::new_unchecked(&mut frame[icmp_at..icmp_at + icmp_len]);
    let c = checksum::update16(
        icmp.checksum(),
        u16::from_be_bytes([u8::from(Icmpv6Type::EchoRequest), icmp.msg_code()]),
        u16::from_be_bytes([u8::from(Icmpv6Type::EchoReply), 0]),
    );
    icmp.set_msg_type(Icmpv6Type::EchoReply);
    icmp.set_msg_code(0);
    icmp.set_checksum(c);
    st.counters.echo_replies += 1;
    link::answer(frame, rx, Ipv6Packet::<&[u8]>::HEADER_LEN + icmp_len, &st.host)
}
