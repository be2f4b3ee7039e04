//! Steering both directions of a full-NAT flow to the worker that owns it (AF_PACKET).
//!
//! The gateway does full NAT: a flow `client:cport → VIP:vport` leaves as
//! `SNAT_ADDR:sport → endpoint:eport`, and its replies arrive as
//! `endpoint:eport → SNAT_ADDR:sport`. The two tuples share nothing a generic flow hash
//! could use, so the SNAT port carries the owner instead: worker `w` of `n` allocates only
//! ports `p` with [`owner_of_port`]`(p, n) == w`, and the kernel-side program built by
//! [`steering_program`] sends every packet addressed to a SNAT address and port back to
//! `port % n`. Packets of the original direction go by a hash of their tuple, which is the
//! same for every packet of the flow, so conntrack and SNAT state never leave their worker.
//!
//! The program is a classic BPF program for `PACKET_FANOUT_CBPF` (see `packet(7)`): the
//! kernel runs it on every received frame and delivers the frame to socket
//! `return value % group size` of the fanout group, sockets numbered in the order they
//! joined. Workers therefore join in worker order ([`super::af_packet::AfPacketSocket::join_fanout`]),
//! and the group must be complete before traffic matters.
//!
//! Offsets: on receive, the kernel runs fanout programs with `skb->data` at the
//! **network** header (the Ethernet header has been pulled by `eth_type_trans`), while on
//! the transmit tap `skb->data` is at the link-layer header. The program therefore never
//! uses plain offsets: every packet load is relative to `SKF_NET_OFF` (the network header,
//! wherever `skb->data` is), and the L4 ports are read with `BPF_IND` loads whose negative
//! base is `SKF_NET_OFF` and whose index register holds the IPv4 header length. The tests
//! below verify both facts against the running kernel.
//!
//! IPv6 is steered the same way ([`steering_program_dual`]) for packets whose upper-layer
//! header follows the fixed IPv6 header directly: replies to an IPv6 SNAT address and port go
//! to the port's owner, ICMPv6 errors by the flow they quote, the original direction by a
//! hash of the tuple (each address folded to 32 bits by XOR of its four words). A packet
//! with extension headers before its transport header (rare for TCP and UDP; fragments are
//! the common case) is steered by its folded source address instead: a classic BPF program
//! cannot walk a chain of unbounded length, and such a reply may then reach a worker other
//! than its flow's owner, which drops it (the client retransmits; counted as
//! `no_frontend`).
//!
//! This module is pure: it builds instructions and performs no system call.

use std::net::{Ipv4Addr, Ipv6Addr};

use libc::sock_filter;

/// The worker that owns SNAT port `port` when there are `workers` workers: `port % workers`.
///
/// This is the contract between the SNAT port allocator (worker `w` allocates only ports
/// whose owner is `w`) and [`steering_program`] (the kernel delivers a reply to SNAT port
/// `p` to socket `p % n` of the fanout group, socket `i` being worker `i`).
///
/// # Panics
/// If `workers` is 0.
pub fn owner_of_port(port: u16, workers: usize) -> usize {
    usize::from(port) % workers
}

/// EtherType of IPv4 as `SKF_AD_PROTOCOL` yields it (host order).
const ETH_P_IP: u32 = 0x0800;
/// EtherType of IPv6.
const ETH_P_IPV6: u32 = 0x86dd;
/// IPv6 Next Header of ICMPv6.
const IPPROTO_ICMPV6: u32 = 58;
/// ICMPv6 error types whose payload quotes the invoking packet ([RFC 4443] § 3):
/// destination unreachable, packet too big, time exceeded, parameter problem.
///
/// [RFC 4443]: https://www.rfc-editor.org/rfc/rfc4443#section-3
const ICMPV6_ERROR_TYPES: [u32; 4] = [1, 2, 3, 4];
/// IP protocol numbers ([IANA protocol numbers](https://www.iana.org/assignments/protocol-numbers/)).
const IPPROTO_ICMP: u32 = 1;
const IPPROTO_TCP: u32 = 6;
const IPPROTO_UDP: u32 = 17;
const IPPROTO_SCTP: u32 = 132;
/// ICMP error types whose payload quotes the offending datagram ([RFC 792]):
/// destination unreachable, time exceeded, parameter problem.
///
/// [RFC 792]: https://www.rfc-editor.org/rfc/rfc792
const ICMP_ERROR_TYPES: [u32; 3] = [3, 11, 12];
/// Length of the ICMP header before the quoted datagram.
const ICMP_HEADER_LEN: u32 = 8;

/// IPv4 header field offsets ([RFC 791 § 3.1](https://www.rfc-editor.org/rfc/rfc791#section-3.1)).
mod ipv4 {
    pub const VER_IHL: u32 = 0;
    pub const FLAGS_FRAG_OFF: u32 = 6;
    pub const PROTOCOL: u32 = 9;
    pub const SRC_ADDR: u32 = 12;
    pub const DST_ADDR: u32 = 16;
    /// The fragment offset bits of the flags/fragment-offset half-word.
    pub const FRAG_OFF_MASK: u32 = 0x1fff;
    /// The MF ("more fragments") flag of the same half-word.
    pub const MF: u32 = 0x2000;
}

/// IPv6 fixed header offsets ([RFC 8200 § 3](https://www.rfc-editor.org/rfc/rfc8200#section-3)).
mod ipv6 {
    pub const NEXT_HEADER: u32 = 6;
    pub const SRC_ADDR: u32 = 8;
    pub const DST_ADDR: u32 = 24;
    /// The fixed header's length: where the upper layer starts without extension headers.
    pub const HEADER_LEN: u32 = 40;
}

/// Transport header offsets shared by TCP, UDP and SCTP: source port then destination port.
mod l4 {
    pub const SRC_PORT: u32 = 0;
    pub const DST_PORT: u32 = 2;
}

// Classic BPF opcodes (<linux/bpf_common.h>, <linux/filter.h>), combined once.
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const LD_H_ABS: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
const LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
const LD_W_IND: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_IND) as u16;
const LD_H_IND: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_IND) as u16;
const LD_B_IND: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_IND) as u16;
const LD_MEM: u16 = (libc::BPF_LD | libc::BPF_MEM) as u16;
const LD_IMM: u16 = (libc::BPF_LD | libc::BPF_IMM) as u16;
const LDX_B_MSH: u16 = (libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH) as u16;
const LDX_MEM: u16 = (libc::BPF_LDX | libc::BPF_MEM) as u16;
const ST: u16 = libc::BPF_ST as u16;
const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const ALU_LSH_K: u16 = (libc::BPF_ALU | libc::BPF_LSH | libc::BPF_K) as u16;
const ALU_RSH_K: u16 = (libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K) as u16;
const ALU_MUL_K: u16 = (libc::BPF_ALU | libc::BPF_MUL | libc::BPF_K) as u16;
const ALU_ADD_X: u16 = (libc::BPF_ALU | libc::BPF_ADD | libc::BPF_X) as u16;
const ALU_OR_X: u16 = (libc::BPF_ALU | libc::BPF_OR | libc::BPF_X) as u16;
const ALU_XOR_X: u16 = (libc::BPF_ALU | libc::BPF_XOR | libc::BPF_X) as u16;
const JMP_JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JMP_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JMP_JGT_K: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
const JMP_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JMP_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const RET_A: u16 = (libc::BPF_RET | libc::BPF_A) as u16;
const MISC_TAX: u16 = (libc::BPF_MISC | libc::BPF_TAX) as u16;
const MISC_TXA: u16 = (libc::BPF_MISC | libc::BPF_TXA) as u16;

/// `k` of a load relative to the network header: `SKF_NET_OFF + offset`, as the kernel's
/// 32-bit immediate (two's complement).
const fn net(offset: u32) -> u32 {
    (libc::SKF_NET_OFF as u32).wrapping_add(offset)
}

/// `k` of the ancillary load of `skb->protocol` (host order).
const AD_PROTOCOL: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL) as u32;

// Scratch memory words (M[0..16]) the program uses.
/// The client-side address of the flow (the source of the original direction).
const M_CLIENT_ADDR: u32 = 0;
/// The service-side address of the flow (the destination of the original direction).
const M_SERVICE_ADDR: u32 = 1;
/// `client_port << 16 | service_port`.
const M_PORTS: u32 = 2;
/// Temporary.
const M_TMP: u32 = 3;

/// Multipliers of the flow hash (golden ratio, then MurmurHash3's `fmix32`).
const HASH_K1: u32 = 0x9e37_79b1;
const HASH_K2: u32 = 0x85eb_ca77;
const FMIX_K1: u32 = 0x85eb_ca6b;
const FMIX_K2: u32 = 0xc2b2_ae35;

/// Builds the classic BPF steering program for a `PACKET_FANOUT_CBPF` group.
///
/// Returned value, for a frame whose `skb->protocol` is IPv4 (the kernel takes it modulo
/// the number of sockets in the group):
/// - any fragment (MF set or a non-zero offset), first included, of any protocol: a hash of
///   (source address, destination address) — the same for every fragment of a datagram, so
///   they all reach one worker and its fragment table (`crate::fragments`) lets the later
///   ones follow the first. NIC RSS cannot read ports in fragments either: DPDK's
///   `RTE_ETH_RSS_IPV4` (which torii asks for beside the TCP/UDP port hashes) hashes
///   fragmented IPv4 by its addresses, or — on NICs that classify fragments apart, without
///   `RTE_ETH_RSS_FRAG_IPV4` — not at all (queue 0); either way a datagram's fragments stay
///   together, as here. The flow a fragmented datagram belongs to may then live on another worker (its
///   unfragmented packets are steered by the 4-tuple or the SNAT port): in the original
///   direction the first fragment then creates a flow of its own on this worker (same
///   endpoint, as the Maglev choice is a pure function of the tuple; another SNAT port), and
///   the datagram is still translated consistently; fragmented *replies* to a SNAT port reach
///   the flow's owner only by chance (1 in n workers) and are otherwise dropped as untracked —
///   no stateless classifier can find the SNAT port's owner from a fragment without ports.
///   Endpoints behind the gateway normally do path-MTU discovery (DF set), which the gateway
///   keeps working by translating ICMP "fragmentation needed" errors, so replies are rarely
///   fragmented; with one worker everything works;
/// - TCP, UDP or SCTP, not a fragment, destination address in `snat_addrs` and
///   destination port in `port_min..=port_max` (a reply to a SNAT port): **the destination
///   port**, so the reply reaches worker [`owner_of_port`]`(port, n)`;
/// - any other TCP, UDP or SCTP packet that is not a fragment (the original
///   direction, and everything else with ports): a hash of
///   (source address, destination address, source port, destination port), the same for
///   every packet of a flow;
/// - ICMP destination-unreachable, time-exceeded and parameter-problem errors quoting a
///   TCP, UDP or SCTP datagram: the value the quoted flow's own packets get, so the error
///   reaches the worker that can translate it (DESIGN.md: "ICMP errors … about a tracked
///   flow"): sent to a SNAT address and quoting a SNAT source port in range → that port;
///   otherwise the hash of the quoted datagram's reverse (client, service) tuple, which
///   equals the hash of the original-direction flow it answers;
/// - any other IPv4 packet (other ICMP, other protocols): the source address.
///
/// Every frame that is neither IPv4 nor IPv6 (ARP, …) returns 0: it goes to worker 0, so
/// neighbour state learnt there must reach the others (it does: the neighbour table is
/// shared). IPv6 frames are steered as [`steering_program_dual`] says, without IPv6 SNAT
/// addresses here. A load past the end of a truncated packet makes the kernel return 0 as
/// well.
///
/// With an empty `snat_addrs`, or `port_min > port_max`, nothing is steered by port.
///
/// All packet loads are relative to `SKF_NET_OFF`, so the program does not depend on where
/// the kernel's data pointer is (see the module documentation); 802.1Q tags are stripped
/// by the kernel before fanout and `skb->protocol` is then the inner EtherType.
pub fn steering_program(snat_addrs: &[Ipv4Addr], port_min: u16, port_max: u16) -> Vec<sock_filter> {
    steering_program_dual(snat_addrs, &[], port_min, port_max)
}

/// [`steering_program`] for IPv4 and IPv6 SNAT addresses. An IPv6 frame
/// (`skb->protocol` `0x86DD`) whose Next Header is the upper layer itself (no extension
/// headers) returns:
/// - TCP, UDP or SCTP to an address of `snat_addrs6` and a port in `port_min..=port_max`:
///   **the destination port**, as for IPv4;
/// - any other TCP, UDP or SCTP packet: the flow hash of (source, destination, ports), each
///   address folded to 32 bits (XOR of its four words);
/// - ICMPv6 destination-unreachable, packet-too-big, time-exceeded and parameter-problem
///   errors quoting a TCP, UDP or SCTP packet (again without extension headers): the quoted
///   SNAT source port when sent to a SNAT address and in range, else the quoted flow's hash;
/// - anything else (Neighbor Discovery, echo, extension headers, fragments): the folded
///   source address.
pub fn steering_program_dual(
    snat_addrs: &[Ipv4Addr],
    snat_addrs6: &[Ipv6Addr],
    port_min: u16,
    port_max: u16,
) -> Vec<sock_filter> {
    use Label::*;
    use Target::{Next, Skip1, To};

    let port_min = u32::from(port_min);
    let port_max = u32::from(port_max);
    let mut a = Asm::default();

    // IPv4 on; IPv6 to its part; anything else → 0.
    a.stmt(LD_W_ABS, AD_PROTOCOL);
    a.cond(JMP_JEQ_K, ETH_P_IP, To(V4), Next);
    a.cond(JMP_JEQ_K, ETH_P_IPV6, Next, Skip1);
    a.ja(V6);
    a.stmt(RET_K, 0);
    a.label(V4);
    // Fragments, first included → hash of the addresses (see above).
    a.stmt(LD_H_ABS, net(ipv4::FLAGS_FRAG_OFF));
    a.cond(JMP_JSET_K, ipv4::MF | ipv4::FRAG_OFF_MASK, To(Fragment), Next);
    a.stmt(LD_B_ABS, net(ipv4::PROTOCOL));
    a.cond(JMP_JEQ_K, IPPROTO_TCP, To(Ports), Next);
    a.cond(JMP_JEQ_K, IPPROTO_UDP, To(Ports), Next);
    a.cond(JMP_JEQ_K, IPPROTO_SCTP, To(Ports), Next);
    a.cond(JMP_JEQ_K, IPPROTO_ICMP, Next, To(ReturnSrc));
    a.ja(Icmp);
    a.label(ReturnSrc);
    a.return_src();

    // Fragment: (client, service, ports) = (source, destination, 0).
    a.label(Fragment);
    a.stmt(LD_W_ABS, net(ipv4::SRC_ADDR));
    a.stmt(ST, M_CLIENT_ADDR);
    a.stmt(LD_W_ABS, net(ipv4::DST_ADDR));
    a.stmt(ST, M_SERVICE_ADDR);
    a.stmt(LD_IMM, 0);
    a.stmt(ST, M_PORTS);
    a.ja(Hash);

    // TCP/UDP/SCTP: X = IHL * 4.
    a.label(Ports);
    a.stmt(LDX_B_MSH, net(ipv4::VER_IHL));
    a.stmt(LD_W_ABS, net(ipv4::DST_ADDR));
    a.address_list(snat_addrs, SnatAddr);
    a.ja(Flow);
    a.label(SnatAddr);
    a.stmt(LD_H_IND, net(l4::DST_PORT));
    a.cond(JMP_JGE_K, port_min, Next, To(Flow));
    a.cond(JMP_JGT_K, port_max, To(Flow), Next);
    a.stmt(RET_A, 0);
    // Original direction: (client, service) = (source, destination).
    a.label(Flow);
    a.stmt(LD_W_ABS, net(ipv4::SRC_ADDR));
    a.stmt(ST, M_CLIENT_ADDR);
    a.stmt(LD_W_ABS, net(ipv4::DST_ADDR));
    a.stmt(ST, M_SERVICE_ADDR);
    a.stmt(LD_W_IND, net(l4::SRC_PORT)); // source port << 16 | destination port
    a.stmt(ST, M_PORTS);
    a.ja(Hash);

    // ICMP: only errors quoting a datagram with ports are steered by what they quote.
    a.label(Icmp);
    a.stmt(LDX_B_MSH, net(ipv4::VER_IHL));
    a.stmt(LD_B_IND, net(0)); // ICMP type
    for ty in ICMP_ERROR_TYPES {
        a.cond(JMP_JEQ_K, ty, To(IcmpError), Next);
    }
    a.return_src();
    a.label(IcmpError);
    let quoted = ICMP_HEADER_LEN; // the quoted IPv4 header, relative to X
    a.stmt(LD_B_IND, net(quoted + ipv4::PROTOCOL));
    a.cond(JMP_JEQ_K, IPPROTO_TCP, To(IcmpPorts), Next);
    a.cond(JMP_JEQ_K, IPPROTO_UDP, To(IcmpPorts), Next);
    a.cond(JMP_JEQ_K, IPPROTO_SCTP, To(IcmpPorts), Next);
    a.return_src();
    // The quoted datagram went service → client (or SNAT address → endpoint).
    a.label(IcmpPorts);
    a.stmt(LD_W_IND, net(quoted + ipv4::SRC_ADDR));
    a.stmt(ST, M_SERVICE_ADDR);
    a.stmt(LD_W_IND, net(quoted + ipv4::DST_ADDR));
    a.stmt(ST, M_CLIENT_ADDR);
    // X += quoted IHL * 4: X now points at the quoted transport header, minus `quoted`.
    a.stmt(LD_B_IND, net(quoted + ipv4::VER_IHL));
    a.stmt(ALU_AND_K, 0x0f);
    a.stmt(ALU_LSH_K, 2);
    a.stmt(ALU_ADD_X, 0);
    a.stmt(MISC_TAX, 0);
    a.stmt(LD_W_ABS, net(ipv4::DST_ADDR));
    a.address_list(snat_addrs, IcmpSnatAddr);
    a.ja(IcmpFlow);
    a.label(IcmpSnatAddr);
    a.stmt(LD_H_IND, net(quoted + l4::SRC_PORT));
    a.cond(JMP_JGE_K, port_min, Next, To(IcmpFlow));
    a.cond(JMP_JGT_K, port_max, To(IcmpFlow), Next);
    a.stmt(RET_A, 0);
    // Swap the quoted ports: (service port << 16 | client port) → (client << 16 | service).
    a.label(IcmpFlow);
    a.stmt(LD_W_IND, net(quoted + l4::SRC_PORT));
    a.swap_ports();
    a.stmt(ST, M_PORTS);
    a.ja(Hash);

    // IPv6, upper layer directly after the fixed header.
    a.label(V6);
    a.stmt(LD_B_ABS, net(ipv6::NEXT_HEADER));
    a.cond(JMP_JEQ_K, IPPROTO_TCP, To(V6Ports), Next);
    a.cond(JMP_JEQ_K, IPPROTO_UDP, To(V6Ports), Next);
    a.cond(JMP_JEQ_K, IPPROTO_SCTP, To(V6Ports), Next);
    a.cond(JMP_JEQ_K, IPPROTO_ICMPV6, Next, Skip1);
    a.ja(V6Icmp);
    a.fold6(net(ipv6::SRC_ADDR));
    a.stmt(RET_A, 0);
    a.label(V6Ports);
    a.address6_list(snat_addrs6, net(ipv6::DST_ADDR), V6SnatAddr);
    a.ja(V6Flow);
    a.label(V6SnatAddr);
    a.stmt(LD_H_ABS, net(ipv6::HEADER_LEN + l4::DST_PORT));
    a.cond(JMP_JGE_K, port_min, Next, To(V6Flow));
    a.cond(JMP_JGT_K, port_max, To(V6Flow), Next);
    a.stmt(RET_A, 0);
    a.label(V6Flow);
    a.fold6(net(ipv6::SRC_ADDR));
    a.stmt(ST, M_CLIENT_ADDR);
    a.fold6(net(ipv6::DST_ADDR));
    a.stmt(ST, M_SERVICE_ADDR);
    a.stmt(LD_W_ABS, net(ipv6::HEADER_LEN + l4::SRC_PORT));
    a.stmt(ST, M_PORTS);
    a.ja(Hash);

    // ICMPv6: errors quoting a packet with ports are steered by what they quote.
    a.label(V6Icmp);
    a.stmt(LD_B_ABS, net(ipv6::HEADER_LEN)); // ICMPv6 type
    for ty in ICMPV6_ERROR_TYPES {
        a.cond(JMP_JEQ_K, ty, To(V6IcmpError), Next);
    }
    a.fold6(net(ipv6::SRC_ADDR));
    a.stmt(RET_A, 0);
    a.label(V6IcmpError);
    let quoted6 = ipv6::HEADER_LEN + ICMP_HEADER_LEN; // the quoted IPv6 header
    a.stmt(LD_B_ABS, net(quoted6 + ipv6::NEXT_HEADER));
    a.cond(JMP_JEQ_K, IPPROTO_TCP, To(V6IcmpPorts), Next);
    a.cond(JMP_JEQ_K, IPPROTO_UDP, To(V6IcmpPorts), Next);
    a.cond(JMP_JEQ_K, IPPROTO_SCTP, To(V6IcmpPorts), Next);
    a.fold6(net(ipv6::SRC_ADDR));
    a.stmt(RET_A, 0);
    // The quoted packet went service → client (or SNAT address → endpoint).
    a.label(V6IcmpPorts);
    a.fold6(net(quoted6 + ipv6::SRC_ADDR));
    a.stmt(ST, M_SERVICE_ADDR);
    a.fold6(net(quoted6 + ipv6::DST_ADDR));
    a.stmt(ST, M_CLIENT_ADDR);
    a.address6_list(snat_addrs6, net(ipv6::DST_ADDR), V6IcmpSnatAddr);
    a.ja(V6IcmpFlow);
    a.label(V6IcmpSnatAddr);
    a.stmt(LD_H_ABS, net(quoted6 + ipv6::HEADER_LEN + l4::SRC_PORT));
    a.cond(JMP_JGE_K, port_min, Next, To(V6IcmpFlow));
    a.cond(JMP_JGT_K, port_max, To(V6IcmpFlow), Next);
    a.stmt(RET_A, 0);
    a.label(V6IcmpFlow);
    a.stmt(LD_W_ABS, net(quoted6 + ipv6::HEADER_LEN + l4::SRC_PORT));
    a.swap_ports();
    a.stmt(ST, M_PORTS);

    // hash(client, service, ports), then MurmurHash3's fmix32 so that `% n` sees all bits.
    a.label(Hash);
    a.stmt(LD_MEM, M_CLIENT_ADDR);
    a.stmt(ALU_MUL_K, HASH_K1);
    a.stmt(MISC_TAX, 0);
    a.stmt(LD_MEM, M_SERVICE_ADDR);
    a.stmt(ALU_XOR_X, 0);
    a.stmt(ALU_MUL_K, HASH_K2);
    a.stmt(MISC_TAX, 0);
    a.stmt(LD_MEM, M_PORTS);
    a.stmt(ALU_XOR_X, 0);
    for (shift, mul) in [(16, Some(FMIX_K1)), (13, Some(FMIX_K2)), (16, None)] {
        a.stmt(MISC_TAX, 0);
        a.stmt(ALU_RSH_K, shift);
        a.stmt(ALU_XOR_X, 0);
        if let Some(k) = mul {
            a.stmt(ALU_MUL_K, k);
        }
    }
    a.stmt(RET_A, 0);

    a.assemble()
}

/// The SNAT side of the steering rule: the addresses and port range whose replies go to
/// the port's owner ([`owner_of_port`]), as [`steering_program_dual`] takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnatRange {
    /// IPv4 SNAT addresses.
    pub addrs: Vec<Ipv4Addr>,
    /// IPv6 SNAT addresses.
    pub addrs6: Vec<Ipv6Addr>,
    /// Lowest SNAT port.
    pub port_min: u16,
    /// Highest SNAT port.
    pub port_max: u16,
}

impl SnatRange {
    fn port(&self, port: u16) -> Option<u32> {
        (self.port_min..=self.port_max).contains(&port).then_some(u32::from(port))
    }
}

/// What [`steering_program_dual`] returns for the Ethernet frame `frame`, computed in
/// software: the same value for every frame (a property test runs both on the same
/// frames), so the DPDK driver's software redirect ([`super::redirect`]) and the kernel's
/// `PACKET_FANOUT_CBPF` steering agree on which worker owns a flow. The worker is
/// [`owner_of_frame`]. One 802.1Q tag is skipped, as the kernel strips it before fanout;
/// a frame too short for a field the program reads gives 0, as a failed load does there.
pub fn steering_value(frame: &[u8], snat: &SnatRange) -> u32 {
    let (ethertype, net) = match frame.get(12..14) {
        Some([0x81, 0x00]) => (frame.get(16..18), 18),
        t => (t, 14),
    };
    let Some(l3) = frame.get(net..) else { return 0 };
    match ethertype {
        Some([0x08, 0x00]) => steer_ipv4(l3, snat),
        Some([0x86, 0xdd]) => steer_ipv6(l3, snat),
        _ => None,
    }
    .unwrap_or(0)
}

/// The worker of `workers` that owns `frame`'s flow: [`steering_value`] modulo
/// `workers`, as the kernel takes a fanout program's value modulo the group's size.
///
/// # Panics
/// If `workers` is 0.
#[inline]
pub fn owner_of_frame(frame: &[u8], snat: &SnatRange, workers: usize) -> usize {
    steering_value(frame, snat) as usize % workers
}

/// Big-endian loads from the network header on, `None` past the end (a failed load).
fn be32(p: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(p.get(at..at + 4)?.try_into().ok()?))
}
fn be16(p: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(p.get(at..at + 2)?.try_into().ok()?))
}
fn fold6_at(p: &[u8], at: usize) -> Option<u32> {
    Some(be32(p, at)? ^ be32(p, at + 4)? ^ be32(p, at + 8)? ^ be32(p, at + 12)?)
}
fn is_ports_protocol(protocol: u8) -> bool {
    matches!(u32::from(protocol), IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP)
}
/// `(service port << 16 | client port)` → `(client << 16 | service)`.
fn swapped(ports: u32) -> u32 {
    ports.rotate_left(16)
}

/// The program's hash of (client, service, ports): golden ratio, then `fmix32`.
fn flow_hash(client: u32, service: u32, ports: u32) -> u32 {
    let a = (client.wrapping_mul(HASH_K1) ^ service).wrapping_mul(HASH_K2) ^ ports;
    let a = (a ^ (a >> 16)).wrapping_mul(FMIX_K1);
    let a = (a ^ (a >> 13)).wrapping_mul(FMIX_K2);
    a ^ (a >> 16)
}

fn steer_ipv4(p: &[u8], snat: &SnatRange) -> Option<u32> {
    let frag = u32::from(be16(p, ipv4::FLAGS_FRAG_OFF as usize)?);
    if frag & (ipv4::MF | ipv4::FRAG_OFF_MASK) != 0 {
        return Some(flow_hash(be32(p, ipv4::SRC_ADDR as usize)?, be32(p, ipv4::DST_ADDR as usize)?, 0));
    }
    let protocol = *p.get(ipv4::PROTOCOL as usize)?;
    let x = usize::from(p.first()? & 0x0f) * 4;
    let to_snat = |dst: u32| snat.addrs.iter().any(|a| u32::from(*a) == dst);
    if is_ports_protocol(protocol) {
        let dst = be32(p, ipv4::DST_ADDR as usize)?;
        if to_snat(dst) {
            if let Some(port) = snat.port(be16(p, x + l4::DST_PORT as usize)?) {
                return Some(port);
            }
        }
        return Some(flow_hash(be32(p, ipv4::SRC_ADDR as usize)?, dst, be32(p, x + l4::SRC_PORT as usize)?));
    }
    let src = be32(p, ipv4::SRC_ADDR as usize)?;
    if u32::from(protocol) != IPPROTO_ICMP || !ICMP_ERROR_TYPES.contains(&u32::from(*p.get(x)?)) {
        return Some(src);
    }
    let q = x + ICMP_HEADER_LEN as usize;
    if !is_ports_protocol(*p.get(q + ipv4::PROTOCOL as usize)?) {
        return Some(src);
    }
    let service = be32(p, q + ipv4::SRC_ADDR as usize)?;
    let client = be32(p, q + ipv4::DST_ADDR as usize)?;
    let ql4 = q + usize::from(p.get(q)? & 0x0f) * 4;
    if to_snat(be32(p, ipv4::DST_ADDR as usize)?) {
        if let Some(port) = snat.port(be16(p, ql4 + l4::SRC_PORT as usize)?) {
            return Some(port);
        }
    }
    Some(flow_hash(client, service, swapped(be32(p, ql4 + l4::SRC_PORT as usize)?)))
}

fn steer_ipv6(p: &[u8], snat: &SnatRange) -> Option<u32> {
    let (src, dst, l4) = (ipv6::SRC_ADDR as usize, ipv6::DST_ADDR as usize, ipv6::HEADER_LEN as usize);
    let next = *p.get(ipv6::NEXT_HEADER as usize)?;
    let to_snat = |p: &[u8]| -> Option<bool> {
        let d = p.get(dst..dst + 16)?;
        Some(snat.addrs6.iter().any(|a| a.octets() == d))
    };
    if is_ports_protocol(next) {
        if to_snat(p)? {
            if let Some(port) = snat.port(be16(p, l4 + l4::DST_PORT as usize)?) {
                return Some(port);
            }
        }
        return Some(flow_hash(fold6_at(p, src)?, fold6_at(p, dst)?, be32(p, l4 + l4::SRC_PORT as usize)?));
    }
    if u32::from(next) != IPPROTO_ICMPV6 || !ICMPV6_ERROR_TYPES.contains(&u32::from(*p.get(l4)?)) {
        return fold6_at(p, src);
    }
    let q = l4 + ICMP_HEADER_LEN as usize;
    if !is_ports_protocol(*p.get(q + ipv6::NEXT_HEADER as usize)?) {
        return fold6_at(p, src);
    }
    let service = fold6_at(p, q + src)?;
    let client = fold6_at(p, q + dst)?;
    let ql4 = q + l4;
    if to_snat(p)? {
        if let Some(port) = snat.port(be16(p, ql4 + l4::SRC_PORT as usize)?) {
            return Some(port);
        }
    }
    Some(flow_hash(client, service, swapped(be32(p, ql4 + l4::SRC_PORT as usize)?)))
}

/// Jump targets inside [`steering_program`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    V4,
    V6,
    V6Ports,
    V6SnatAddr,
    V6Flow,
    V6Icmp,
    V6IcmpError,
    V6IcmpPorts,
    V6IcmpSnatAddr,
    V6IcmpFlow,
    ReturnSrc,
    Fragment,
    Ports,
    SnatAddr,
    Flow,
    Icmp,
    IcmpError,
    IcmpPorts,
    IcmpSnatAddr,
    IcmpFlow,
    Hash,
}

/// Where a conditional jump goes.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// The next instruction.
    Next,
    /// Skip one instruction.
    Skip1,
    /// Skip this many instructions.
    Skip(u8),
    /// A label (must be within 255 instructions: conditional offsets are 8 bits).
    To(Label),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Stmt { code: u16, k: u32 },
    Cond { code: u16, k: u32, jt: Target, jf: Target },
    Ja(Label),
    Label(Label),
}

/// A tiny two-pass assembler: labels instead of hand-counted offsets.
#[derive(Default)]
struct Asm {
    ops: Vec<Op>,
}

impl Asm {
    fn stmt(&mut self, code: u16, k: u32) {
        self.ops.push(Op::Stmt { code, k });
    }

    fn cond(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.ops.push(Op::Cond { code, k, jt, jf });
    }

    /// Unconditional jump (32-bit offset: any distance).
    fn ja(&mut self, to: Label) {
        self.ops.push(Op::Ja(to));
    }

    fn label(&mut self, l: Label) {
        self.ops.push(Op::Label(l));
    }

    /// `return source address` (classic BPF jumps only forward, so this is repeated where needed).
    fn return_src(&mut self) {
        self.stmt(LD_W_ABS, net(ipv4::SRC_ADDR));
        self.stmt(RET_A, 0);
    }

    /// If A equals one of `addrs`, jump to `hit`; otherwise fall through. Each address is a
    /// `jeq` over one `ja`, so the list may be of any length.
    fn address_list(&mut self, addrs: &[Ipv4Addr], hit: Label) {
        for addr in addrs {
            self.cond(JMP_JEQ_K, u32::from(*addr), Target::Next, Target::Skip1);
            self.ja(hit);
        }
    }

    /// If the 16 bytes at `k` (an absolute load offset) equal one of `addrs`, jump to `hit`;
    /// otherwise fall through. Nine instructions per address: four word compares, then a
    /// `ja`; a mismatch skips to the next address.
    fn address6_list(&mut self, addrs: &[Ipv6Addr], k: u32, hit: Label) {
        for addr in addrs {
            let o = addr.octets();
            for w in 0..4u8 {
                let word = u32::from_be_bytes([
                    o[4 * usize::from(w)],
                    o[4 * usize::from(w) + 1],
                    o[4 * usize::from(w) + 2],
                    o[4 * usize::from(w) + 3],
                ]);
                self.stmt(LD_W_ABS, k + 4 * u32::from(w));
                // Remaining after this jump: (3 - w) load/compare pairs and the `ja`.
                self.cond(JMP_JEQ_K, word, Target::Next, Target::Skip(2 * (3 - w) + 1));
            }
            self.ja(hit);
        }
    }

    /// A = the XOR of the four 32-bit words of the IPv6 address at absolute offset `k` (X is
    /// clobbered): a 32-bit stand-in for the address in the flow hash.
    fn fold6(&mut self, k: u32) {
        self.stmt(LD_W_ABS, k);
        for w in 1..4 {
            self.stmt(MISC_TAX, 0);
            self.stmt(LD_W_ABS, k + 4 * w);
            self.stmt(ALU_XOR_X, 0);
        }
    }

    /// A = `(service port << 16 | client port)` swapped to `(client << 16 | service)`, from
    /// the quoted ports word in A (X and `M_TMP` are clobbered).
    fn swap_ports(&mut self) {
        self.stmt(MISC_TAX, 0);
        self.stmt(ALU_LSH_K, 16);
        self.stmt(ST, M_TMP);
        self.stmt(MISC_TXA, 0);
        self.stmt(ALU_RSH_K, 16);
        self.stmt(LDX_MEM, M_TMP);
        self.stmt(ALU_OR_X, 0);
    }

    fn assemble(self) -> Vec<sock_filter> {
        let mut positions: Vec<(Label, usize)> = Vec::new();
        let mut pc = 0usize;
        for op in &self.ops {
            match op {
                Op::Label(l) => {
                    assert!(positions.iter().all(|(m, _)| m != l), "BPF label {l:?} defined twice");
                    positions.push((*l, pc));
                }
                _ => pc += 1,
            }
        }
        let at = |l: Label| -> usize {
            positions
                .iter()
                .find(|(m, _)| *m == l)
                .map(|(_, p)| *p)
                .unwrap_or_else(|| panic!("BPF label {l:?} used but not defined"))
        };
        let mut out = Vec::with_capacity(pc);
        for op in &self.ops {
            let here = out.len();
            let forward = |to: usize| -> usize {
                assert!(to > here, "BPF jumps go forward only");
                to - here - 1
            };
            let insn = match *op {
                Op::Label(_) => continue,
                Op::Stmt { code, k } => sock_filter { code, jt: 0, jf: 0, k },
                Op::Ja(l) => sock_filter { code: JMP_JA, jt: 0, jf: 0, k: forward(at(l)) as u32 },
                Op::Cond { code, k, jt, jf } => {
                    let off = |t: Target| -> u8 {
                        let d = match t {
                            Target::Next => 0,
                            Target::Skip1 => 1,
                            Target::Skip(n) => usize::from(n),
                            Target::To(l) => forward(at(l)),
                        };
                        u8::try_from(d).expect("BPF conditional jump longer than 255: layout bug")
                    };
                    sock_filter { code, jt: off(jt), jf: off(jf), k }
                }
            };
            out.push(insn);
        }
        assert!(out.len() <= libc::BPF_MAXINSNS as usize, "BPF program too long ({} instructions)", out.len());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data a fanout program sees: where the network header starts in `frame`,
    /// `skb->protocol`, and where `skb->data` points (network header on receive).
    struct Skb<'a> {
        frame: &'a [u8],
        net_off: usize,
        protocol: u16,
    }

    /// A classic BPF interpreter covering the instructions [`steering_program`] emits, with
    /// the kernel's semantics: big-endian loads, a failed load returns 0 from the program,
    /// `SKF_NET_OFF`/`SKF_LL_OFF`-relative loads, `SKF_AD_PROTOCOL`.
    fn run(prog: &[sock_filter], skb: &Skb<'_>) -> u32 {
        let load = |off: i64, size: usize| -> Option<u32> {
            let start = if off >= 0 {
                // skb->data is at the network header on receive.
                skb.net_off as i64 + off
            } else if off >= i64::from(libc::SKF_NET_OFF) {
                skb.net_off as i64 + (off - i64::from(libc::SKF_NET_OFF))
            } else if off >= i64::from(libc::SKF_LL_OFF) {
                off - i64::from(libc::SKF_LL_OFF)
            } else {
                return None;
            };
            let start = usize::try_from(start).ok()?;
            let bytes = skb.frame.get(start..start.checked_add(size)?)?;
            Some(bytes.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)))
        };
        let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
        let mut pc = 0usize;
        loop {
            let i = prog[pc];
            pc += 1;
            let k = i.k;
            let ks = i64::from(k as i32);
            match i.code {
                LD_W_ABS if k == AD_PROTOCOL => a = u32::from(skb.protocol),
                LD_W_ABS | LD_H_ABS | LD_B_ABS | LD_W_IND | LD_H_IND | LD_B_IND => {
                    let size = match i.code & 0x18 {
                        0x00 => 4,
                        0x08 => 2,
                        _ => 1,
                    };
                    let off = if i.code & 0xe0 == libc::BPF_IND as u16 { i64::from(x) + ks } else { ks };
                    match load(off, size) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                LDX_B_MSH => match load(ks, 1) {
                    Some(v) => x = (v & 0xf) * 4,
                    None => return 0,
                },
                LD_MEM => a = mem[k as usize],
                LD_IMM => a = k,
                LDX_MEM => x = mem[k as usize],
                ST => mem[k as usize] = a,
                ALU_AND_K => a &= k,
                ALU_LSH_K => a <<= k,
                ALU_RSH_K => a >>= k,
                ALU_MUL_K => a = a.wrapping_mul(k),
                ALU_ADD_X => a = a.wrapping_add(x),
                ALU_OR_X => a |= x,
                ALU_XOR_X => a ^= x,
                MISC_TAX => x = a,
                MISC_TXA => a = x,
                JMP_JA => pc += k as usize,
                JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K | JMP_JSET_K => {
                    let taken = match i.code {
                        JMP_JEQ_K => a == k,
                        JMP_JGT_K => a > k,
                        JMP_JGE_K => a >= k,
                        _ => a & k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                RET_K => return k,
                RET_A => return a,
                other => panic!("interpreter: unexpected opcode {other:#x} at {}", pc - 1),
            }
        }
    }

    const SNAT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);
    const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
    const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    const ENDPOINT: Ipv4Addr = Ipv4Addr::new(10, 80, 0, 5);

    /// An IPv4 header (IHL from `options` words) + 8 transport bytes with the ports.
    fn ipv4(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, frag: u16, options: usize) -> Vec<u8> {
        let ihl = 5 + options;
        let mut p = vec![0u8; ihl * 4];
        p[0] = 0x40 | ihl as u8;
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&src.octets());
        p[16..20].copy_from_slice(&dst.octets());
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0xa5; 4]);
        let total = p.len() as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p
    }

    /// ICMP error (`ty`) from `src` to `dst` quoting `quoted`.
    fn icmp_error(ty: u8, src: Ipv4Addr, dst: Ipv4Addr, quoted: &[u8]) -> Vec<u8> {
        let mut p = ipv4(1, src, dst, 0, 0, 0, 0);
        p.truncate(20);
        p.extend_from_slice(&[ty, 4, 0, 0, 0, 0, 0x05, 0xdc]);
        p.extend_from_slice(quoted);
        p
    }

    fn eth(l3: &[u8], ethertype: u16) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    fn verdict(prog: &[sock_filter], l3: &[u8]) -> u32 {
        let frame = eth(l3, 0x0800);
        run(prog, &Skb { frame: &frame, net_off: 14, protocol: 0x0800 })
    }

    fn prog() -> Vec<sock_filter> {
        steering_program(&[SNAT], 1024, 65535)
    }

    #[test]
    fn owner_of_port_is_port_mod_workers() {
        assert_eq!(owner_of_port(1024, 1), 0);
        assert_eq!(owner_of_port(1025, 2), 1);
        assert_eq!(owner_of_port(65535, 3), 65535 % 3);
        for w in 1..8 {
            for p in [0u16, 1, 1023, 1024, 40000, 65535] {
                assert!(owner_of_port(p, w) < w);
            }
        }
    }

    #[test]
    fn replies_to_snat_ports_return_the_port() {
        let p = prog();
        for proto in [6u8, 17, 132] {
            for port in [1024u16, 1025, 4242, 40000, 65535] {
                let pkt = ipv4(proto, ENDPOINT, SNAT, 8080, port, 0, 0);
                assert_eq!(verdict(&p, &pkt), u32::from(port), "proto {proto} port {port}");
            }
        }
        // IP options move the transport header.
        assert_eq!(verdict(&p, &ipv4(17, ENDPOINT, SNAT, 53, 5000, 0, 3)), 5000);
    }

    #[test]
    fn ports_outside_the_range_or_other_addresses_hash_the_flow() {
        let p = steering_program(&[SNAT], 2000, 3000);
        let below = ipv4(6, ENDPOINT, SNAT, 8080, 1999, 0, 0);
        let above = ipv4(6, ENDPOINT, SNAT, 8080, 3001, 0, 0);
        let other_dst = ipv4(6, ENDPOINT, VIP, 8080, 2500, 0, 0);
        assert_eq!(verdict(&p, &ipv4(6, ENDPOINT, SNAT, 8080, 2000, 0, 0)), 2000);
        assert_eq!(verdict(&p, &ipv4(6, ENDPOINT, SNAT, 8080, 3000, 0, 0)), 3000);
        for pkt in [&below, &above, &other_dst] {
            let v = verdict(&p, pkt);
            // Same answer for the same tuple, whatever the rest of the packet.
            let mut again = pkt.clone();
            again[8] = 1; // TTL
            again.extend_from_slice(b"payload");
            assert_eq!(verdict(&p, &again), v);
        }
        // No SNAT addresses: nothing is steered by port.
        let none = steering_program(&[], 1024, 65535);
        assert_ne!(verdict(&none, &ipv4(17, ENDPOINT, SNAT, 53, 5000, 0, 0)), 5000);
    }

    #[test]
    fn original_direction_hash_is_per_flow_and_spreads() {
        let p = prog();
        let mut seen = [0usize; 4];
        for cport in 40000..40256u16 {
            let pkt = ipv4(6, CLIENT, VIP, cport, 80, 0, 0);
            let v = verdict(&p, &pkt);
            let mut opt = ipv4(6, CLIENT, VIP, cport, 80, 0, 2);
            opt[8] = 3;
            assert_eq!(verdict(&p, &opt), v, "IP options must not change the flow hash");
            seen[(v % 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 32), "poor spread over 4 workers: {seen:?}");
    }

    #[test]
    fn icmp_errors_follow_the_flow_they_quote() {
        let p = prog();
        // Reply direction: an endpoint-side router says the SNAT'd packet needs fragmenting.
        let sent = ipv4(17, SNAT, ENDPOINT, 4242, 8080, 0, 0);
        for ty in [3u8, 11, 12] {
            assert_eq!(verdict(&p, &icmp_error(ty, ENDPOINT, SNAT, &sent)), 4242);
        }
        // Quoted header with options.
        let sent_opt = ipv4(6, SNAT, ENDPOINT, 5555, 443, 0, 1);
        assert_eq!(verdict(&p, &icmp_error(3, ENDPOINT, SNAT, &sent_opt)), 5555);
        // Original direction: a client-side router complains about our reply VIP → client.
        let flow = verdict(&p, &ipv4(6, CLIENT, VIP, 40001, 80, 0, 0));
        let reply = ipv4(6, VIP, CLIENT, 80, 40001, 0, 0);
        let router = Ipv4Addr::new(203, 0, 113, 1);
        assert_eq!(verdict(&p, &icmp_error(3, router, VIP, &reply)), flow);
        assert_eq!(verdict(&p, &icmp_error(11, router, VIP, &reply)), flow);
        // Not an error (echo request) → source address.
        let mut echo = icmp_error(8, CLIENT, VIP, &[]);
        echo[20] = 8;
        assert_eq!(verdict(&p, &echo), u32::from(CLIENT));
        // An error quoting ICMP → source address.
        let quoted_icmp = icmp_error(8, VIP, CLIENT, &[]);
        assert_eq!(verdict(&p, &icmp_error(3, router, VIP, &quoted_icmp)), u32::from(router));
        // Truncated quote: the kernel returns 0 when a load fails.
        let mut short = icmp_error(3, ENDPOINT, SNAT, &sent);
        short.truncate(20 + 8 + 20 + 1);
        assert_eq!(verdict(&p, &short), 0);
    }

    #[test]
    fn fragments_other_protocols_and_non_ipv4() {
        let p = prog();
        // Every fragment of a datagram, first (MF, offset 0) or later, whatever its ports and
        // protocol, gets the hash of its addresses; other address pairs spread.
        let first = verdict(&p, &ipv4(17, CLIENT, VIP, 40000, 53, 0x2000, 0));
        for (proto, sport, dport, frag) in
            [(17u8, 1, 2, 0x0010u16), (17, 7, 7, 0x00b9), (6, 40000, 80, 0x2000), (1, 0, 0, 0x20b9)]
        {
            assert_eq!(verdict(&p, &ipv4(proto, CLIENT, VIP, sport, dport, frag, 0)), first);
        }
        let unfragmented = verdict(&p, &ipv4(17, CLIENT, VIP, 40000, 53, 0, 0));
        assert_ne!(first, unfragmented, "fragments ignore the ports");
        let mut spread = [0usize; 4];
        for i in 0..256u32 {
            spread[(verdict(&p, &ipv4(17, Ipv4Addr::from(0xc633_6400 + i), VIP, 1, 2, 0x0010, 0)) % 4) as usize] += 1;
        }
        assert!(spread.iter().all(|&c| c > 32), "poor spread of fragments over 4 workers: {spread:?}");
        // A fragmented reply to a SNAT port has no port to steer by: addresses as well.
        let reply_first = verdict(&p, &ipv4(17, ENDPOINT, SNAT, 53, 5001, 0x2000, 0));
        assert_ne!(reply_first, 5001);
        assert_eq!(verdict(&p, &ipv4(17, ENDPOINT, SNAT, 1, 5000, 0x0010, 0)), reply_first);
        assert_eq!(verdict(&p, &ipv4(47, CLIENT, VIP, 0, 0, 0, 0)), u32::from(CLIENT)); // GRE
        let arp = eth(&[0u8; 28], 0x0806);
        assert_eq!(run(&p, &Skb { frame: &arp, net_off: 14, protocol: 0x0806 }), 0);
        // IPv6 with an unknown Next Header: the folded source address (here 0x60606060 ^ … = 0).
        let v6 = eth(&[0x60; 48], 0x86dd);
        assert_eq!(run(&p, &Skb { frame: &v6, net_off: 14, protocol: 0x86dd }), 0);
        // Truncated IPv4 → 0.
        assert_eq!(verdict(&p, &[0x45, 0, 0]), 0);
    }

    const SNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, 1);
    const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10);
    const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x10);
    const ENDPOINT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x70, 0, 0, 0, 0, 0, 0x11);

    /// An IPv6 header (Next Header `next`) + 8 transport bytes with the ports.
    fn ipv6(next: u8, src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&8u16.to_be_bytes());
        p[6] = next;
        p[7] = 64;
        p[8..24].copy_from_slice(&src.octets());
        p[24..40].copy_from_slice(&dst.octets());
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0xa5; 4]);
        p
    }

    /// ICMPv6 error (`ty`) from `src` to `dst` quoting `quoted`.
    fn icmpv6_error(ty: u8, src: Ipv6Addr, dst: Ipv6Addr, quoted: &[u8]) -> Vec<u8> {
        let mut p = ipv6(58, src, dst, 0, 0);
        p.truncate(40);
        p.extend_from_slice(&[ty, 0, 0, 0, 0, 0, 0x05, 0x00]);
        p.extend_from_slice(quoted);
        let len = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&len.to_be_bytes());
        p
    }

    fn verdict6(prog: &[sock_filter], l3: &[u8]) -> u32 {
        let frame = eth(l3, 0x86dd);
        run(prog, &Skb { frame: &frame, net_off: 14, protocol: 0x86dd })
    }

    fn fold(a: Ipv6Addr) -> u32 {
        let o = a.octets();
        (0..4).fold(0, |acc, w| acc ^ u32::from_be_bytes([o[4 * w], o[4 * w + 1], o[4 * w + 2], o[4 * w + 3]]))
    }

    #[test]
    fn ipv6_replies_to_snat_ports_return_the_port_and_flows_hash() {
        let p = steering_program_dual(&[SNAT], &[SNAT6], 1024, 65535);
        for proto in [6u8, 17, 132] {
            for port in [1024u16, 4242, 65535] {
                assert_eq!(verdict6(&p, &ipv6(proto, ENDPOINT6, SNAT6, 8080, port)), u32::from(port));
            }
        }
        // IPv4 still works beside it.
        assert_eq!(verdict(&p, &ipv4(17, ENDPOINT, SNAT, 53, 5000, 0, 0)), 5000);
        // An address differing in any one word is not a SNAT address.
        for w in 0..8 {
            let mut seg = SNAT6.segments();
            seg[w] ^= 1;
            let other = Ipv6Addr::from(seg);
            let v = verdict6(&p, &ipv6(17, ENDPOINT6, other, 8080, 4242));
            assert_ne!(v, 4242, "word {w}");
        }
        // Original direction: per flow, spread.
        let mut seen = [0usize; 4];
        for cport in 40000..40256u16 {
            let v = verdict6(&p, &ipv6(6, CLIENT6, VIP6, cport, 80));
            let mut again = ipv6(6, CLIENT6, VIP6, cport, 80);
            again[7] = 3;
            again.extend_from_slice(b"data");
            assert_eq!(verdict6(&p, &again), v);
            seen[(v % 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 32), "poor spread over 4 workers: {seen:?}");
        // Ports below the range hash like any flow.
        assert_ne!(verdict6(&p, &ipv6(6, ENDPOINT6, SNAT6, 8080, 80)), 80);
    }

    #[test]
    fn ipv6_icmp_errors_and_others() {
        let p = steering_program_dual(&[SNAT], &[SNAT6], 1024, 65535);
        // Packet too big about a SNAT'd packet: the quoted source port.
        let sent = ipv6(6, SNAT6, ENDPOINT6, 4242, 8080);
        for ty in [1u8, 2, 3, 4] {
            assert_eq!(verdict6(&p, &icmpv6_error(ty, ENDPOINT6, SNAT6, &sent)), 4242, "type {ty}");
        }
        // About our reply VIP → client: the flow's own hash.
        let flow = verdict6(&p, &ipv6(17, CLIENT6, VIP6, 40001, 80));
        let reply = ipv6(17, VIP6, CLIENT6, 80, 40001);
        let router: Ipv6Addr = "2001:db8:100::fe".parse().unwrap();
        assert_eq!(verdict6(&p, &icmpv6_error(2, router, VIP6, &reply)), flow);
        // Echo, Neighbor Discovery, quoted ICMPv6, extension headers: folded source address.
        assert_eq!(verdict6(&p, &icmpv6_error(128, CLIENT6, VIP6, &[])), fold(CLIENT6));
        assert_eq!(verdict6(&p, &icmpv6_error(135, CLIENT6, VIP6, &[0; 16])), fold(CLIENT6));
        let quoted_icmp = icmpv6_error(128, VIP6, CLIENT6, &[]);
        assert_eq!(verdict6(&p, &icmpv6_error(1, router, VIP6, &quoted_icmp)), fold(router));
        let mut ext = ipv6(60, ENDPOINT6, SNAT6, 0, 0);
        ext.extend_from_slice(&ipv6(17, ENDPOINT6, SNAT6, 8080, 4242)[40..]);
        assert_eq!(verdict6(&p, &ext), fold(ENDPOINT6));
        // Truncated → 0.
        assert_eq!(verdict6(&p, &ipv6(17, ENDPOINT6, SNAT6, 8080, 4242)[..41]), 0);
        // Without IPv6 SNAT addresses nothing IPv6 is steered by port.
        let v4_only = steering_program(&[SNAT], 1024, 65535);
        assert_ne!(verdict6(&v4_only, &ipv6(17, ENDPOINT6, SNAT6, 8080, 4242)), 4242);
    }

    #[test]
    fn program_is_well_formed_for_any_number_of_addresses() {
        for n in [0usize, 1, 2, 200, 900] {
            let addrs: Vec<Ipv4Addr> = (0..n as u32).map(|i| Ipv4Addr::from(0x0a46_0000 + i)).collect();
            let addrs6: Vec<Ipv6Addr> =
                (0..if n <= 200 { 100 } else { 0 }).map(|i| Ipv6Addr::from(0xfd00_u128 << 112 | i)).collect();
            let p = steering_program_dual(&addrs, &addrs6, 1024, 65535);
            assert!(p.len() <= libc::BPF_MAXINSNS as usize);
            if let Some(last) = addrs6.last() {
                assert_eq!(verdict6(&p, &ipv6(6, ENDPOINT6, *last, 80, 7777)), 7777, "{n} IPv6 addresses");
            }
            assert!(matches!(p.last().map(|i| i.code), Some(RET_A | RET_K)));
            for (pc, i) in p.iter().enumerate() {
                if i.code & 0x07 == libc::BPF_JMP as u16 {
                    let targets = if i.code == JMP_JA {
                        vec![pc + 1 + i.k as usize]
                    } else {
                        vec![pc + 1 + usize::from(i.jt), pc + 1 + usize::from(i.jf)]
                    };
                    assert!(targets.iter().all(|&t| t < p.len()), "jump out of program at {pc}");
                }
            }
            if let Some(last) = addrs.last() {
                let pkt = ipv4(17, ENDPOINT, *last, 53, 7777, 0, 0);
                assert_eq!(verdict(&p, &pkt), 7777, "{n} addresses");
            }
        }
    }

    /// The software twin gives what the program gives, on frames of every shape the
    /// program distinguishes (addresses drawn from a small set holding the SNAT addresses,
    /// ports around the range's edges, every protocol, fragments, IP options, ICMP errors
    /// quoting every shape, truncation anywhere) and on random bytes; an 802.1Q tag
    /// changes nothing.
    mod twin {
        use super::super::{owner_of_frame, steering_program_dual, steering_value, SnatRange};
        use super::{
            eth, icmp_error, icmpv6_error, ipv4, ipv6, run, Skb, CLIENT, CLIENT6, ENDPOINT, ENDPOINT6, SNAT, SNAT6,
        };
        use proptest::prelude::*;
        use std::net::{Ipv4Addr, Ipv6Addr};

        fn snat() -> SnatRange {
            SnatRange {
                addrs: vec![Ipv4Addr::new(10, 70, 0, 9), SNAT],
                addrs6: vec![SNAT6],
                port_min: 2000,
                port_max: 60000,
            }
        }

        fn addr4() -> impl Strategy<Value = Ipv4Addr> {
            prop_oneof![
                Just(SNAT),
                Just(CLIENT),
                Just(ENDPOINT),
                Just(Ipv4Addr::new(10, 70, 0, 9)),
                any::<u32>().prop_map(Ipv4Addr::from)
            ]
        }
        fn addr6() -> impl Strategy<Value = Ipv6Addr> {
            prop_oneof![Just(SNAT6), Just(CLIENT6), Just(ENDPOINT6), any::<u128>().prop_map(Ipv6Addr::from)]
        }
        fn port() -> impl Strategy<Value = u16> {
            prop_oneof![Just(1999u16), Just(2000), Just(60000), Just(60001), any::<u16>()]
        }
        fn protocol() -> impl Strategy<Value = u8> {
            prop_oneof![Just(6u8), Just(17), Just(132), Just(1), Just(58), any::<u8>()]
        }
        fn frag() -> impl Strategy<Value = u16> {
            prop_oneof![Just(0u16), Just(0x4000), Just(0x2000), Just(0x0010), any::<u16>()]
        }

        fn v4() -> impl Strategy<Value = Vec<u8>> {
            (protocol(), addr4(), addr4(), port(), port(), frag(), 0..3usize)
                .prop_map(|(pr, s, d, sp, dp, f, o)| ipv4(pr, s, d, sp, dp, f, o))
        }
        fn v6() -> impl Strategy<Value = Vec<u8>> {
            (protocol(), addr6(), addr6(), port(), port()).prop_map(|(pr, s, d, sp, dp)| ipv6(pr, s, d, sp, dp))
        }

        /// An IPv4 or IPv6 packet, possibly an ICMP error quoting another one.
        fn l3() -> impl Strategy<Value = (Vec<u8>, u16)> {
            prop_oneof![
                v4().prop_map(|p| (p, 0x0800)),
                v6().prop_map(|p| (p, 0x86dd)),
                (prop_oneof![Just(3u8), Just(11), Just(12), Just(8), any::<u8>()], addr4(), addr4(), v4())
                    .prop_map(|(t, s, d, q)| (icmp_error(t, s, d, &q), 0x0800)),
                (prop_oneof![Just(1u8), Just(2), Just(4), Just(128), any::<u8>()], addr6(), addr6(), v6())
                    .prop_map(|(t, s, d, q)| (icmpv6_error(t, s, d, &q), 0x86dd)),
                (
                    proptest::collection::vec(any::<u8>(), 0..80),
                    prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x0806)]
                ),
            ]
        }

        proptest! {
            #[test]
            fn software_steering_equals_the_program((pkt, ethertype) in l3(), cut in any::<prop::sample::Index>()) {
                let s = snat();
                let prog = steering_program_dual(&s.addrs, &s.addrs6, s.port_min, s.port_max);
                let whole = eth(&pkt, ethertype);
                // Any length from the bare Ethernet header to the whole frame.
                let frame = &whole[..14 + cut.index(pkt.len() + 1)];
                let kernel = run(&prog, &Skb { frame, net_off: 14, protocol: ethertype });
                prop_assert_eq!(steering_value(frame, &s), kernel);
                let mut tagged = frame[..12].to_vec();
                tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
                tagged.extend_from_slice(&frame[12..]);
                prop_assert_eq!(steering_value(&tagged, &s), kernel);
                prop_assert_eq!(owner_of_frame(frame, &s, 3), kernel as usize % 3);
            }
        }
    }

    /// Kernel tests: the program and the offset facts it relies on, on a veth pair.
    mod kernel {
        use super::super::steering_program_dual;
        use super::{
            icmp_error, icmpv6_error, ipv4, ipv6, CLIENT, CLIENT6, ENDPOINT, ENDPOINT6, SNAT, SNAT6, VIP, VIP6,
        };
        use crate::io::af_packet::test_net::{self, Frame, VethNs};
        use crate::io::af_packet::{AfPacketSocket, RingConfig};
        use libc::sock_filter;
        use std::net::Ipv4Addr;
        use std::time::{Duration, Instant};

        fn small_rings() -> RingConfig {
            RingConfig {
                block_size: 64 * 1024,
                block_count: 4,
                frame_size: 2048,
                retire_timeout_ms: 1,
                tx_frame_count: 64,
            }
        }

        /// Opens `n` sockets on `a` joined to one group with `program`, and a sender on `b`.
        fn group(n: usize, group_id: u16, program: &[sock_filter]) -> (Vec<AfPacketSocket>, AfPacketSocket) {
            let cfg = small_rings();
            let rx: Vec<AfPacketSocket> = (0..n)
                .map(|_| {
                    let s = AfPacketSocket::open("a", &cfg).expect("open a");
                    s.join_fanout(group_id, program).expect("join fanout");
                    s
                })
                .collect();
            let tx = AfPacketSocket::open("b", &cfg).expect("open b");
            (rx, tx)
        }

        /// Sends `frames` from `tx` and returns, for each tagged frame index, the sockets
        /// it arrived on (frames without our tag are ignored).
        fn deliver(rx: &mut [AfPacketSocket], tx: &mut AfPacketSocket, frames: &[Vec<u8>]) -> Vec<Vec<usize>> {
            let mut arrived = vec![Vec::new(); frames.len()];
            let mut got = 0usize;
            test_net::send_all(tx, frames);
            let deadline = Instant::now() + Duration::from_secs(2);
            while got < frames.len() && Instant::now() < deadline {
                let mut any = false;
                for (i, s) in rx.iter_mut().enumerate() {
                    s.rx_burst(64, |f, _| {
                        if let Some(idx) = Frame::tag_of(f) {
                            if let Some(slot) = arrived.get_mut(idx as usize) {
                                slot.push(i);
                                got += 1;
                                any = true;
                            }
                        }
                    });
                }
                if !any {
                    rx[0].wait_readable(1).expect("poll");
                }
            }
            // Late duplicates would show here.
            std::thread::sleep(Duration::from_millis(20));
            for (i, s) in rx.iter_mut().enumerate() {
                s.rx_burst(usize::MAX, |f, _| {
                    if let Some(idx) = Frame::tag_of(f) {
                        if let Some(slot) = arrived.get_mut(idx as usize) {
                            slot.push(i);
                        }
                    }
                });
            }
            arrived
        }

        fn steering(n: usize) {
            let ns = match VethNs::create("fanout") {
                Ok(ns) => ns,
                Err(reason) => return test_net::skip(&reason),
            };
            ns.run(move || {
                let program = steering_program_dual(&[SNAT], &[SNAT6], 1024, 65535);
                let (mut rx, mut tx) = group(n, 7, &program);
                let dst_mac = rx[0].mac_addr();
                let src_mac = tx.mac_addr();
                let mut frames = Vec::new();
                let mut expect: Vec<Option<usize>> = Vec::new();
                // Replies to SNAT ports, TCP and UDP: socket port % n.
                let ports: Vec<u16> = (1024..1024 + 97).chain([4242, 30000, 40001, 50000, 65534, 65535]).collect();
                for (i, &port) in ports.iter().enumerate() {
                    let proto = if i % 2 == 0 { 17 } else { 6 };
                    let l3 = ipv4(proto, ENDPOINT, SNAT, 8080, port, 0, 0);
                    frames.push(Frame::ipv4(dst_mac, src_mac, &l3, frames.len() as u32));
                    expect.push(Some(usize::from(port) % n));
                }
                // ICMP frag-needed about a SNAT'd packet: the quoted source port's owner.
                let quoted = ipv4(17, SNAT, ENDPOINT, 4243, 8080, 0, 0);
                frames.push(Frame::ipv4(
                    dst_mac,
                    src_mac,
                    &icmp_error(3, ENDPOINT, SNAT, &quoted),
                    frames.len() as u32,
                ));
                expect.push(Some(4243 % n));
                // ARP → socket 0.
                for _ in 0..3 {
                    frames.push(Frame::arp(src_mac, frames.len() as u32));
                    expect.push(Some(0));
                }
                // IPv6 replies to SNAT ports and a Packet Too Big about one: the port's owner.
                for port in [1024u16, 1025, 1026, 4242, 50001] {
                    let l3 = ipv6(if port % 2 == 0 { 6 } else { 17 }, ENDPOINT6, SNAT6, 8080, port);
                    frames.push(Frame::ipv6(dst_mac, src_mac, &l3, frames.len() as u32));
                    expect.push(Some(usize::from(port) % n));
                }
                let quoted6 = ipv6(6, SNAT6, ENDPOINT6, 4243, 8080);
                let ptb = icmpv6_error(2, ENDPOINT6, SNAT6, &quoted6);
                frames.push(Frame::ipv6(dst_mac, src_mac, &ptb, frames.len() as u32));
                expect.push(Some(4243 % n));
                let arrived = deliver(&mut rx, &mut tx, &frames);
                for (i, (got, want)) in arrived.iter().zip(&expect).enumerate() {
                    assert_eq!(got.len(), 1, "frame {i} arrived {} times", got.len());
                    if let Some(w) = want {
                        assert_eq!(got[0], *w, "frame {i} on socket {} instead of {w}", got[0]);
                    }
                }

                // Original-direction flows: every packet of a flow on one socket, and the
                // ICMP error about the flow's reply on that socket too; flows spread.
                let mut frames = Vec::new();
                let mut flow_of = Vec::new();
                let flows: Vec<(Ipv4Addr, u16, u16)> = (0..24u16)
                    .map(|i| {
                        (
                            Ipv4Addr::new(198, 51, 100, 1 + (i % 5) as u8),
                            40000 + i * 7,
                            if i % 3 == 0 { 443 } else { 80 },
                        )
                    })
                    .chain([(CLIENT, 50000, 53)])
                    .collect();
                // IPv6 flows: every packet of a flow on one socket.
                for _ in 0..2 {
                    for cport in 41000..41008u16 {
                        let l3 = ipv6(6, CLIENT6, VIP6, cport, 80);
                        frames.push(Frame::ipv6(dst_mac, src_mac, &l3, frames.len() as u32));
                        flow_of.push(flows.len() + usize::from(cport - 41000));
                    }
                }
                for round in 0..4 {
                    for (f, &(client, cport, vport)) in flows.iter().enumerate() {
                        let proto = if f % 2 == 0 { 6 } else { 17 };
                        let l3 = ipv4(proto, client, VIP, cport, vport, 0, 0);
                        frames.push(Frame::ipv4(dst_mac, src_mac, &l3, frames.len() as u32));
                        flow_of.push(f);
                        if round == 3 {
                            let reply = ipv4(proto, VIP, client, vport, cport, 0, 0);
                            let err = icmp_error(3, Ipv4Addr::new(203, 0, 113, 1), VIP, &reply);
                            frames.push(Frame::ipv4(dst_mac, src_mac, &err, frames.len() as u32));
                            flow_of.push(f);
                        }
                    }
                }
                let arrived = deliver(&mut rx, &mut tx, &frames);
                let mut socket_of_flow = vec![None; flows.len() + 8];
                for (i, got) in arrived.iter().enumerate() {
                    assert_eq!(got.len(), 1, "flow frame {i} arrived {} times", got.len());
                    let s = socket_of_flow[flow_of[i]].get_or_insert(got[0]);
                    assert_eq!(*s, got[0], "flow {} split across sockets", flow_of[i]);
                }
                let used: std::collections::BTreeSet<_> = socket_of_flow.iter().flatten().collect();
                assert_eq!(used.len(), n, "25 flows should use all {n} sockets: {socket_of_flow:?}");

                // Fragmented datagrams: the first fragment (with ports) and the later ones
                // (without) of one datagram on one socket, in either direction.
                let mut frames = Vec::new();
                let mut datagram_of = Vec::new();
                for d in 0..16u16 {
                    let (src, dst, sport, dport) = if d % 4 == 3 {
                        (ENDPOINT, SNAT, 8080, 1024 + d)
                    } else {
                        (Ipv4Addr::new(198, 51, 100, 1 + d as u8), VIP, 40000 + d, 53)
                    };
                    for frag in [0x2000u16, 0x20b9, 0x0172] {
                        let l3 = ipv4(17, src, dst, sport, dport, frag, 0);
                        frames.push(Frame::ipv4(dst_mac, src_mac, &l3, frames.len() as u32));
                        datagram_of.push(usize::from(d));
                    }
                }
                let arrived = deliver(&mut rx, &mut tx, &frames);
                let mut socket_of_datagram = vec![None; 16];
                for (i, got) in arrived.iter().enumerate() {
                    assert_eq!(got.len(), 1, "fragment {i} arrived {} times", got.len());
                    let s = socket_of_datagram[datagram_of[i]].get_or_insert(got[0]);
                    assert_eq!(*s, got[0], "datagram {} split across sockets", datagram_of[i]);
                }

                // Members of the group do not read back what a member transmits, nor what
                // anyone else sends on the interface (PACKET_FANOUT_FLAG_IGNORE_OUTGOING).
                test_net::send_through_qdisc("a", &Frame::arp(dst_mac, 99));
                assert_eq!(test_net::recv_tagged(&mut tx, 1, 64, Duration::from_secs(2)).len(), 1);
                for (i, s) in rx.iter_mut().enumerate() {
                    let echoed = test_net::recv_tagged(s, 1, 64, Duration::from_millis(50));
                    assert!(echoed.is_empty(), "group socket {i} read back an outgoing frame");
                }
                let own: Vec<Vec<u8>> = (0..5)
                    .map(|i| Frame::ipv4(src_mac, dst_mac, &ipv4(17, SNAT, ENDPOINT, 1024 + i, 53, 0, 0), i.into()))
                    .collect();
                test_net::send_all(&mut rx[0], &own);
                assert_eq!(test_net::recv_tagged(&mut tx, own.len(), 64, Duration::from_secs(2)).len(), own.len());
                for (i, s) in rx.iter_mut().enumerate() {
                    let echoed = test_net::recv_tagged(s, 1, 64, Duration::from_millis(50));
                    assert!(echoed.is_empty(), "group socket {i} read back a transmission of socket 0");
                }
                for s in &mut rx {
                    let (_, drops) = s.stats().expect("stats");
                    assert_eq!(drops, 0);
                }
            });
        }

        #[test]
        fn steering_two_workers() {
            steering(2);
        }

        #[test]
        fn steering_three_workers() {
            steering(3);
        }

        /// Empirical check of where offset 0 points when the kernel runs a fanout program,
        /// and that `SKF_NET_OFF`/`SKF_LL_OFF` loads work there. With two sockets the
        /// program's return value picks socket `value % 2`: the first byte of the IPv4
        /// header (0x45) is odd, the first byte of our destination MAC (locally administered
        /// unicast, 0x?2/0x?6/0x?a/0x?e) is even.
        #[test]
        fn fanout_program_offsets() {
            let ns = match VethNs::create("offsets") {
                Ok(ns) => ns,
                Err(reason) => return test_net::skip(&reason),
            };
            ns.run(|| {
                let cases: [(&str, u32, usize); 3] = [
                    ("ldb [0]", 0, 1),
                    ("ldb [SKF_NET_OFF]", libc::SKF_NET_OFF as u32, 1),
                    ("ldb [SKF_LL_OFF]", libc::SKF_LL_OFF as u32, 0),
                ];
                for (gid, (name, k, want)) in cases.into_iter().enumerate() {
                    let program = [
                        sock_filter { code: (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16, jt: 0, jf: 0, k },
                        sock_filter { code: (libc::BPF_RET | libc::BPF_A) as u16, jt: 0, jf: 0, k: 0 },
                    ];
                    let (mut rx, mut tx) = group(2, 100 + gid as u16, &program);
                    let dst_mac = rx[0].mac_addr();
                    assert_eq!(dst_mac[0] & 1, 0, "unicast MAC expected");
                    let l3 = ipv4(17, CLIENT, VIP, 1, 2, 0, 0);
                    let frames = [Frame::ipv4(dst_mac, tx.mac_addr(), &l3, 0)];
                    let arrived = deliver(&mut rx, &mut tx, &frames);
                    assert_eq!(arrived[0], vec![want], "{name}: arrived on {:?}", arrived[0]);
                    eprintln!("fanout cBPF: {name} → socket {} (expected {want})", arrived[0][0]);
                }
            });
        }
    }
}
