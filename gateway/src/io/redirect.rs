//! Software redirect: every worker busy on ports without usable RSS (DPVS's redirect).
//!
//! Conntrack, SNAT ports and the fragment table are per worker, so every frame of a flow,
//! both directions, must be processed by the worker that owns the flow. A NIC with RSS
//! under torii's control delivers it there (the DPDK driver, `io::dpdk`, with `rte_thash`);
//! the kernel's `PACKET_FANOUT_CBPF` does for AF_PACKET ([`super::fanout`]). Ports that
//! cannot — `net_virtio_user` against a vhost-user switch without RSS, DPDK's
//! `net_af_packet` (whose fanout moves flows between queues), single-queue NICs — deliver a
//! frame to whichever RX queue they like. There the receiving worker computes the frame's
//! owner with the same pure rule the kernel program uses ([`fanout::owner_of_frame`]: the
//! original direction by a hash of the tuple, replies to a SNAT address by
//! [`fanout::owner_of_port`], ICMP errors by the flow they quote, anything without ports by
//! its source address, non-IP to worker 0) and hands frames it does not own to their owner
//! over a bounded lock-free ring, which the owner drains on its next receive from that
//! port. The owner processes the frame as if it had received it and transmits it on its own
//! TX queue; the buffer goes back to the pool it came from when the device is done with it.
//!
//! The rings form a [`Mesh`]: one per (port, sending worker, receiving worker), so each has
//! a single producer and a single consumer (`crossbeam_queue::ArrayQueue`, bounded,
//! lock-free), and a worker drains one port's rings when it receives from that port (the
//! worker's vector holds the frames of one port). A full ring drops the frame, counted
//! ([`crate::counters::DropReason::RedirectRingFull`]); redirected frames are counted by
//! the worker that sent them (`redirected`).
//!
//! Under RSS the device delivers every frame of a flow to its worker, but for ICMP errors
//! and fragments: a device hashes those by their addresses alone (an error's are a router's
//! and the gateway's; a fragment's ports are in the first fragment only), so a
//! "fragmentation needed" about a flow's packets, or an endpoint's fragmented reply,
//! reaches any worker. There the rule is [`Rule::Rss`]: the receiving worker keeps every
//! frame but an ICMP error quoting a TCP or UDP packet, which goes to the worker whose
//! queue the device gives the quoted flow's arriving direction ([`quoted_flow`]: the
//! quoted packet's tuple reversed, hashed as the device hashes it), and the fragments of a
//! TCP or UDP datagram, which go to the worker the device gives the first fragment's tuple
//! ([`Fragment`]); a datagram's fragments all reach one worker (the same addresses), which
//! remembers where each datagram's first fragment went ([`FragmentOwners`]) and sends the
//! later ones after it. A later fragment that arrives before its first stays, as one of an
//! unknown datagram: the general path drops it (`fragment_no_first`) wherever it is.
//!
//! The module is generic over what a ring carries (the DPDK driver sends the mbuf with its
//! [`crate::pipeline::Meta`]), so its tests need no DPDK.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use super::fanout::{self, SnatRange};

/// Frames one ring holds: a few vectors' worth, so a burst of another worker's flows
/// waits while the owner finishes its vector.
pub const RING_CAPACITY: usize = 1024;

/// The rings between `workers` workers on `ports` ports: one per (port, from, to) with
/// `from != to`.
#[derive(Debug)]
pub struct Mesh<T> {
    workers: usize,
    rings: Box<[ArrayQueue<T>]>,
}

impl<T> Mesh<T> {
    /// The rings, each of `capacity` items (at least 1).
    pub fn new(workers: usize, ports: usize, capacity: usize) -> Arc<Self> {
        let rings = (0..ports * workers * workers).map(|_| ArrayQueue::new(capacity.max(1))).collect();
        Arc::new(Self { workers, rings })
    }

    /// The ring `from` fills and `to` drains for `port`.
    fn ring(&self, port: usize, from: usize, to: usize) -> Option<&ArrayQueue<T>> {
        self.rings.get((port * self.workers + from) * self.workers + to)
    }
}

/// The worker of a flow under RSS: the RX queue (the worker polling it) the device gives a
/// packet with that tuple ([`Rule::Rss`]).
pub type QueueOf = Arc<dyn Fn(&FlowTuple) -> usize + Send + Sync>;

/// Which worker owns a frame.
#[derive(Clone)]
pub enum Rule {
    /// Ports without usable RSS: every frame by [`fanout::owner_of_frame`] under the
    /// gateway's SNAT addresses and port range.
    Fanout(SnatRange),
    /// Ports under RSS: the receiving worker, but for an ICMP error quoting a TCP or UDP
    /// packet ([`quoted_flow`]) and the fragments of a TCP or UDP datagram ([`Fragment`]),
    /// whose worker the function gives (taken modulo the workers).
    Rss(QueueOf),
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Fanout(snat) => f.debug_tuple("Fanout").field(snat).finish(),
            Rule::Rss(_) => f.write_str("Rss"),
        }
    }
}

/// A flow's tuple in the direction its packets arrive at the gateway: an ICMP error's
/// quoted packet's reversed (the error quotes a packet the gateway sent), a first
/// fragment's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowTuple {
    /// Source address of the flow's arriving packets (an error's quoted destination).
    pub src_addr: IpAddr,
    /// Their destination address (an error's quoted source).
    pub dst_addr: IpAddr,
    /// Their source port.
    pub src_port: u16,
    /// Their destination port.
    pub dst_port: u16,
}

/// The flow the ICMP error (ICMPv4 types 3, 11, 12; ICMPv6 types 1–4, RFC 4443 § 3) in
/// Ethernet frame `frame` (one 802.1Q tag skipped) quotes, when it quotes a TCP or UDP
/// packet whose ports are there (RFC 792 and RFC 4443 § 2.4(c): the quote holds at least
/// the invoking packet's first 8 transport bytes); `None` for every other frame, or one
/// too short. An IPv6 quote's ports are read right after its fixed header (a quote with
/// extension headers is `None`). O(1), no allocation: the receive loop asks it of every
/// frame under RSS.
#[inline]
pub fn quoted_flow(frame: &[u8]) -> Option<FlowTuple> {
    let (ethertype, p) = network(frame)?;
    match ethertype {
        [0x08, 0x00] => {
            let ihl = usize::from(p.first()? & 0x0f) * 4;
            // ICMP, not a fragment (flags MF and offset zero), an error type.
            if *p.get(9)? != 1 || be16(p, 6)? & 0x3fff != 0 || ihl < 20 || !matches!(*p.get(ihl)?, 3 | 11 | 12) {
                return None;
            }
            let q = p.get(ihl + 8..)?;
            let qihl = usize::from(q.first()? & 0x0f) * 4;
            if q.first()? >> 4 != 4 || qihl < 20 || !carries_ports(*q.get(9)?) {
                return None;
            }
            let (sport, dport) = ports_at(q, qihl)?;
            Some(FlowTuple { src_addr: addr4(q, 16)?, dst_addr: addr4(q, 12)?, src_port: dport, dst_port: sport })
        }
        [0x86, 0xdd] => {
            if *p.get(6)? != 58 || !matches!(*p.get(40)?, 1..=4) {
                return None;
            }
            let q = p.get(48..)?;
            if q.first()? >> 4 != 6 || !carries_ports(*q.get(6)?) {
                return None;
            }
            let (sport, dport) = ports_at(q, 40)?;
            Some(FlowTuple { src_addr: addr6(q, 24)?, dst_addr: addr6(q, 8)?, src_port: dport, dst_port: sport })
        }
        _ => None,
    }
}

/// A datagram: source, destination, protocol (IPv6: the Fragment header's Next Header) and
/// Identification (IPv4's 16 bits, IPv6's 32), RFC 791 § 3.2 and RFC 8200 § 4.5.
pub type Datagram = (IpAddr, IpAddr, u8, u32);

/// A fragment of an IPv4 or IPv6 datagram, as [`fragment`] finds it in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// The datagram it is part of.
    pub datagram: Datagram,
    /// The first fragment's TCP or UDP tuple (offset 0, its ports there); `None` for a
    /// later fragment, or a first one of another protocol or too short for its ports.
    pub first: Option<FlowTuple>,
}

/// The fragment in Ethernet frame `frame` (one 802.1Q tag skipped): an IPv4 packet with MF
/// set or a nonzero offset, or an IPv6 packet whose Fragment header follows its fixed
/// header (not an atomic fragment: RFC 6946's offset 0 without M is a whole datagram);
/// `None` for anything else. O(1), no allocation.
#[inline]
pub fn fragment(frame: &[u8]) -> Option<Fragment> {
    let (ethertype, p) = network(frame)?;
    match ethertype {
        [0x08, 0x00] => {
            let flags_offset = be16(p, 6)?;
            if flags_offset & 0x3fff == 0 {
                return None;
            }
            let (src, dst) = (addr4(p, 12)?, addr4(p, 16)?);
            let proto = *p.get(9)?;
            let ihl = usize::from(p.first()? & 0x0f) * 4;
            let first = (flags_offset & 0x1fff == 0 && carries_ports(proto) && ihl >= 20)
                .then(|| ports_at(p, ihl))
                .flatten()
                .map(|(src_port, dst_port)| FlowTuple { src_addr: src, dst_addr: dst, src_port, dst_port });
            Some(Fragment { datagram: (src, dst, proto, u32::from(be16(p, 4)?)), first })
        }
        [0x86, 0xdd] => {
            if *p.get(6)? != 44 {
                return None;
            }
            let (proto, offset_m) = (*p.get(40)?, be16(p, 42)?);
            if offset_m == 0 {
                return None;
            }
            let (src, dst) = (addr6(p, 8)?, addr6(p, 24)?);
            let id = u32::from_be_bytes(<[u8; 4]>::try_from(p.get(44..48)?).ok()?);
            let first = (offset_m & 0xfff8 == 0 && carries_ports(proto))
                .then(|| ports_at(p, 48))
                .flatten()
                .map(|(src_port, dst_port)| FlowTuple { src_addr: src, dst_addr: dst, src_port, dst_port });
            Some(Fragment { datagram: (src, dst, proto, id), first })
        }
        _ => None,
    }
}

/// Whether Ethernet frame `frame` may be one [`Rule::Rss`] hands on: an IPv4 fragment or
/// ICMP packet, an IPv6 packet whose first next header is a Fragment header or ICMPv6. The
/// test every other frame (nearly all: TCP and UDP) stops at, a few loads and compares at
/// fixed offsets (`benches/examples/redirect_owner.rs` counts it).
#[inline(always)]
fn rss_exception(frame: &[u8]) -> bool {
    let Some((ethertype, p)) = network(frame) else { return false };
    match (ethertype, p.get(..10)) {
        ([0x08, 0x00], Some(h)) => h[9] == 1 || (u16::from_be_bytes([h[6], h[7]]) & 0x3fff) != 0,
        ([0x86, 0xdd], Some(h)) => matches!(h[6], 44 | 58),
        _ => false,
    }
}

/// The EtherType of Ethernet frame `frame` and its network packet, after one 802.1Q tag if
/// there is one; `None` for a frame too short.
fn network(frame: &[u8]) -> Option<(&[u8], &[u8])> {
    let (ethertype, net) = match frame.get(12..14)? {
        [0x81, 0x00] => (frame.get(16..18)?, 18),
        t => (t, 14),
    };
    Some((ethertype, frame.get(net..)?))
}

/// Whether IP protocol `proto` is TCP or UDP: the transports whose ports the devices hash.
fn carries_ports(proto: u8) -> bool {
    proto == 6 || proto == 17
}

/// The big-endian 16-bit word at `at` of `p`.
fn be16(p: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*p.get(at)?, *p.get(at + 1)?]))
}

/// The source and destination ports of the transport header at `at` of `p`.
fn ports_at(p: &[u8], at: usize) -> Option<(u16, u16)> {
    Some((be16(p, at)?, be16(p, at + 2)?))
}

/// The IPv4 address at `at` of `p`.
fn addr4(p: &[u8], at: usize) -> Option<IpAddr> {
    Some(Ipv4Addr::from(<[u8; 4]>::try_from(p.get(at..at + 4)?).ok()?).into())
}

/// The IPv6 address at `at` of `p`.
fn addr6(p: &[u8], at: usize) -> Option<IpAddr> {
    Some(Ipv6Addr::from(<[u8; 16]>::try_from(p.get(at..at + 16)?).ok()?).into())
}

/// Datagrams whose first fragment a worker handed on under RSS, and to whom: a
/// direct-mapped table of [`FragmentOwners::SLOTS`] datagrams, a newer one taking an older
/// one's slot (a datagram's fragments arrive together; one whose slot was taken before its
/// last fragment came sends the rest nowhere but here, where the general path drops them
/// as fragments without a first).
#[derive(Debug)]
pub struct FragmentOwners {
    slots: Box<[Option<(Datagram, usize)>]>,
    /// A fixed seed: one worker's table, keyed by what senders choose, where a collision
    /// costs a datagram its later fragments, nothing else.
    hasher: ahash::RandomState,
}

impl FragmentOwners {
    /// Datagrams remembered.
    pub const SLOTS: usize = 256;

    fn new() -> Self {
        Self { slots: vec![None; Self::SLOTS].into_boxed_slice(), hasher: ahash::RandomState::with_seeds(1, 2, 3, 4) }
    }

    /// Where `f`'s datagram goes: for a first fragment with ports, `queue_of`'s worker
    /// (remembered); for a later one, its first's, if remembered; else `None`.
    fn owner(&mut self, f: &Fragment, queue_of: &QueueOf) -> Option<usize> {
        let slot = self.hasher.hash_one(f.datagram) as usize % Self::SLOTS;
        match &f.first {
            Some(t) => {
                let owner = queue_of(t);
                self.slots[slot] = Some((f.datagram, owner));
                Some(owner)
            }
            None => self.slots[slot].filter(|(d, _)| *d == f.datagram).map(|(_, owner)| owner),
        }
    }
}

/// One worker's end of the [`Mesh`], and the rule that says which frames are its own.
#[derive(Debug)]
pub struct Redirect<T> {
    mesh: Arc<Mesh<T>>,
    worker: usize,
    rule: Rule,
    /// Under [`Rule::Rss`], where the fragmented datagrams went.
    fragments: FragmentOwners,
    /// Where the next drain starts (round robin over the senders, so none starves).
    next_from: usize,
}

impl<T> Redirect<T> {
    /// Worker `worker`'s end of `mesh`, owning the frames `rule` gives it.
    pub fn new(mesh: Arc<Mesh<T>>, worker: usize, rule: Rule) -> Self {
        Self { mesh, worker, rule, fragments: FragmentOwners::new(), next_from: 0 }
    }

    /// This worker.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The worker that owns the Ethernet frame `frame`'s flow (see [`Rule`]); under
    /// [`Rule::Rss`] a first fragment's owner is remembered for its datagram's others.
    #[inline]
    pub fn owner(&mut self, frame: &[u8]) -> usize {
        let n = self.mesh.workers;
        match &self.rule {
            Rule::Fanout(snat) => fanout::owner_of_frame(frame, snat, n),
            Rule::Rss(queue_of) => {
                if !rss_exception(frame) {
                    return self.worker;
                }
                let owner = match fragment(frame) {
                    Some(f) => self.fragments.owner(&f, queue_of),
                    None => quoted_flow(frame).map(|q| queue_of(&q)),
                };
                owner.map_or(self.worker, |w| w % n)
            }
        }
    }

    /// Hands `item` (a frame received on `port`) to worker `to`; gives it back when the
    /// ring is full (the caller frees and counts it).
    ///
    /// # Errors
    /// The item, when the ring has no room or `to`/`port` is out of range.
    #[inline]
    pub fn send(&self, port: usize, to: usize, item: T) -> Result<(), T> {
        match self.mesh.ring(port, self.worker, to) {
            Some(r) if to != self.worker => r.push(item),
            _ => Err(item),
        }
    }

    /// Takes up to `max` items the other workers handed this one for `port`, in each
    /// sender's order, passing each to `f`. Returns how many.
    #[inline]
    pub fn recv(&mut self, port: usize, max: usize, mut f: impl FnMut(T)) -> usize {
        let n = self.mesh.workers;
        let mut got = 0;
        for k in 0..n {
            let from = (self.next_from + k) % n;
            if from == self.worker {
                continue;
            }
            let Some(ring) = self.mesh.ring(port, from, self.worker) else { continue };
            while got < max {
                let Some(item) = ring.pop() else { break };
                f(item);
                got += 1;
            }
        }
        self.next_from = (self.next_from + 1) % n;
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::{self, L2};
    use crate::io::fanout::owner_of_port;
    use crate::wire::{Icmpv4Type, MacAddr, TcpFlags};
    use std::net::Ipv4Addr;

    const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
    const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
    const SNAT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);
    const ENDPOINT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 11);
    const L: L2 = L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) };

    fn snat() -> SnatRange {
        SnatRange { addrs: vec![SNAT], addrs6: vec![], port_min: 1024, port_max: 65535 }
    }

    fn ends(workers: usize, ports: usize, capacity: usize) -> Vec<Redirect<(usize, Vec<u8>)>> {
        let mesh = Mesh::new(workers, ports, capacity);
        (0..workers).map(|w| Redirect::new(Arc::clone(&mesh), w, Rule::Fanout(snat()))).collect()
    }

    /// Both directions of a full-NAT flow have one owner: the original direction by its
    /// tuple, the reply by the SNAT port that owner allocates (port % n), ICMP errors about
    /// either by the flow they quote; and the owners spread over the workers.
    #[test]
    fn both_directions_of_a_flow_have_one_owner() {
        for workers in [2usize, 3, 4] {
            let mut r = ends(workers, 1, 4);
            let mut per = vec![0usize; workers];
            for cport in 40000..40400u16 {
                let syn = frames::tcp(L, (CLIENT, cport), (VIP, 80), TcpFlags::SYN, 1, 0, b"", 64);
                let owner = r[0].owner(&syn);
                per[owner] += 1;
                for rx in &mut r {
                    assert_eq!(rx.owner(&syn), owner, "every worker agrees");
                }
                // The owner's SNAT port: any port p with p % n == owner.
                let sport = 1024
                    + (owner as u16 + workers as u16 - 1024 % workers as u16) % workers as u16
                    + 2 * workers as u16;
                assert_eq!(owner_of_port(sport, workers), owner);
                let reply =
                    frames::tcp(L, (ENDPOINT, 8080), (SNAT, sport), TcpFlags::SYN | TcpFlags::ACK, 1, 2, b"", 64);
                assert_eq!(r[1].owner(&reply), owner, "reply to SNAT port {sport}");
                // Frag-needed from a router on the endpoint side about a translated packet.
                let sent = frames::tcp(L, (SNAT, sport), (ENDPOINT, 8080), TcpFlags::ACK, 1, 2, b"", 64);
                let err = frames::icmp_error(L, ENDPOINT, SNAT, Icmpv4Type::DstUnreachable, 4, 1400, &sent[14..], 64);
                assert_eq!(r[0].owner(&err), owner, "ICMP error quoting SNAT port {sport}");
                // An ICMP error from the client side about the reply VIP → client.
                let back = frames::tcp(L, (VIP, 80), (CLIENT, cport), TcpFlags::ACK, 1, 2, b"", 64);
                let err = frames::icmp_error(L, CLIENT, VIP, Icmpv4Type::DstUnreachable, 3, 0, &back[14..], 64);
                assert_eq!(r[0].owner(&err), owner, "ICMP error quoting the reply of {cport}");
            }
            assert!(per.iter().all(|&c| c > 400 / workers / 2), "{workers} workers: {per:?}");
        }
    }

    /// ICMP errors quoting TCP and UDP packets, IPv4 and IPv6, tagged or not, give the
    /// quoted flow reversed; everything else (the flows' own packets, an echo, an error
    /// quoting ICMP, a fragment, a truncated quote) gives none.
    #[test]
    fn quoted_flows_are_the_quoted_packets_reversed() {
        use crate::wire::Icmpv6Type;
        use std::net::Ipv6Addr;
        let sent = frames::tcp(L, (SNAT, 2001), (ENDPOINT, 8080), TcpFlags::ACK, 1, 2, b"", 64);
        let err = frames::icmp_error(L, ENDPOINT, SNAT, Icmpv4Type::DstUnreachable, 4, 1400, &sent[14..], 64);
        let want = FlowTuple { src_addr: ENDPOINT.into(), dst_addr: SNAT.into(), src_port: 8080, dst_port: 2001 };
        assert_eq!(quoted_flow(&err), Some(want));
        assert_eq!(quoted_flow(&frames::tagged(&err, 0x8100, 7)), Some(want), "802.1Q");
        let back = frames::udp(L, (VIP, 53), (CLIENT, 40000), b"x", 64);
        let err = frames::icmp_error(L, CLIENT, VIP, Icmpv4Type::TimeExceeded, 0, 0, &back[14..42], 64);
        let want = FlowTuple { src_addr: CLIENT.into(), dst_addr: VIP.into(), src_port: 40000, dst_port: 53 };
        assert_eq!(quoted_flow(&err), Some(want), "the quote's first 8 transport bytes suffice");
        assert_eq!(quoted_flow(&err[..err.len() - 5]), None, "ports cut off");
        assert_eq!(quoted_flow(&sent), None, "not ICMP");
        assert_eq!(quoted_flow(&frames::icmp_echo(L, CLIENT, VIP, 1, 1, b"x", false)), None, "not an error");
        let echo = frames::icmp_echo(L, VIP, CLIENT, 1, 1, b"x", true);
        let err = frames::icmp_error(L, CLIENT, VIP, Icmpv4Type::DstUnreachable, 3, 0, &echo[14..], 64);
        assert_eq!(quoted_flow(&err), None, "quotes ICMP: no ports");
        let big = frames::icmp_error(
            L,
            ENDPOINT,
            SNAT,
            Icmpv4Type::DstUnreachable,
            4,
            1400,
            &[sent[14..].to_vec(), vec![0; 64]].concat(),
            64,
        );
        let first = &frames::ipv4_fragments(&big, 9, 32)[0];
        assert_eq!(quoted_flow(first), None, "a fragment");

        let (client6, vip6): (Ipv6Addr, Ipv6Addr) =
            ("2001:db8:100::10".parse().unwrap(), "2001:db8:203::10".parse().unwrap());
        let back6 = frames::tcp6(L, (vip6, 443), (client6, 40001), TcpFlags::ACK, 1, 2, b"", 64);
        let err6 = frames::icmpv6_error(L, client6, vip6, Icmpv6Type::PacketTooBig, 0, 1280, &back6[14..], 64);
        let want6 = FlowTuple { src_addr: client6.into(), dst_addr: vip6.into(), src_port: 40001, dst_port: 443 };
        assert_eq!(quoted_flow(&err6), Some(want6));
        assert_eq!(quoted_flow(&back6), None);
    }

    proptest::proptest! {
        /// Any prefix of an ICMP error or a first fragment, and any byte written over it,
        /// give no panic; a prefix gives the whole answer or less (never a field read past
        /// the frame's end).
        #[test]
        fn quoted_flow_of_cut_and_mangled_frames(cut in 0usize..120, at in 0usize..120, byte in 0u8..=255) {
            let sent = frames::tcp(L, (SNAT, 2001), (ENDPOINT, 8080), TcpFlags::ACK, 1, 2, b"", 64);
            let err = frames::icmp_error(L, ENDPOINT, SNAT, Icmpv4Type::DstUnreachable, 4, 1400, &sent[14..], 64);
            let whole = quoted_flow(&err);
            let got = quoted_flow(&err[..cut.min(err.len())]);
            proptest::prop_assert!(got.is_none() || got == whole);
            let mut mangled = err.clone();
            if let Some(b) = mangled.get_mut(at) {
                *b = byte;
            }
            let _ = quoted_flow(&mangled);
            // The same of a first fragment: a prefix names the datagram, with or without the
            // first's tuple, or nothing.
            let first = &frames::ipv4_fragments(&frames::udp(L, (ENDPOINT, 53), (SNAT, 2001), &[7; 100], 64), 5, 48)[0];
            let whole = fragment(first).expect("a fragment");
            let got = fragment(&first[..cut.min(first.len())]);
            let later = Fragment { first: None, ..whole };
            proptest::prop_assert!(got.is_none_or(|f| f == whole || f == later), "{got:?}");
            let mut mangled = first.clone();
            if let Some(b) = mangled.get_mut(at) {
                *b = byte;
            }
            let _ = fragment(&mangled);
        }
    }

    /// Under RSS a worker keeps every frame but ICMP errors, which go to the worker the
    /// device gives the quoted flow (here a stand-in: the flow's destination port).
    #[test]
    fn under_rss_icmp_errors_go_to_their_flows_worker_and_the_rest_stays() {
        let mesh = Mesh::new(3, 1, 4);
        let queue_of: QueueOf = Arc::new(|q: &FlowTuple| usize::from(q.dst_port));
        let mut r: Vec<Redirect<()>> =
            (0..3).map(|w| Redirect::new(Arc::clone(&mesh), w, Rule::Rss(Arc::clone(&queue_of)))).collect();
        for sport in 2000..2006u16 {
            let reply = frames::tcp(L, (ENDPOINT, 8080), (SNAT, sport), TcpFlags::ACK, 1, 2, b"", 64);
            let sent = frames::tcp(L, (SNAT, sport), (ENDPOINT, 8080), TcpFlags::ACK, 1, 2, b"", 64);
            let err = frames::icmp_error(L, ENDPOINT, SNAT, Icmpv4Type::DstUnreachable, 4, 1400, &sent[14..], 64);
            for (w, rx) in r.iter_mut().enumerate() {
                assert_eq!(rx.owner(&reply), w, "the device's choice stands");
                assert_eq!(rx.owner(&err), usize::from(sport) % 3, "the quoted flow's worker");
            }
        }
        assert_eq!(format!("{:?}", r[0].rule), "Rss");
    }

    /// Fragments of IPv4 and IPv6 datagrams name their datagram, and the first its TCP or
    /// UDP tuple; whole datagrams (an IPv6 atomic fragment too) are no fragments.
    #[test]
    fn fragments_name_their_datagram_and_the_first_its_tuple() {
        use std::net::Ipv6Addr;
        let reply = frames::udp(L, (ENDPOINT, 53), (SNAT, 2001), &[7; 100], 64);
        let parts = frames::ipv4_fragments(&reply, 77, 48);
        assert_eq!(parts.len(), 3);
        let datagram = (ENDPOINT.into(), SNAT.into(), 17, 77);
        let tuple = FlowTuple { src_addr: ENDPOINT.into(), dst_addr: SNAT.into(), src_port: 53, dst_port: 2001 };
        assert_eq!(fragment(&parts[0]), Some(Fragment { datagram, first: Some(tuple) }));
        for later in &parts[1..] {
            assert_eq!(fragment(later), Some(Fragment { datagram, first: None }));
        }
        assert_eq!(fragment(&frames::tagged(&parts[1], 0x8100, 7)), Some(Fragment { datagram, first: None }));
        assert_eq!(fragment(&reply), None, "a whole datagram");
        assert_eq!(fragment(&parts[0][..36]), Some(Fragment { datagram, first: None }), "ports cut off");

        let (e6, s6): (Ipv6Addr, Ipv6Addr) = ("fd00:70::11".parse().unwrap(), "fd00:70::1".parse().unwrap());
        let reply6 = frames::udp6(L, (e6, 53), (s6, 2002), &[7; 100], 64);
        let parts6 = frames::ipv6_fragments(&reply6, 0x0102_0304, 48);
        let datagram6 = (e6.into(), s6.into(), 17, 0x0102_0304);
        let tuple6 = FlowTuple { src_addr: e6.into(), dst_addr: s6.into(), src_port: 53, dst_port: 2002 };
        assert_eq!(fragment(&parts6[0]), Some(Fragment { datagram: datagram6, first: Some(tuple6) }));
        assert_eq!(fragment(&parts6[2]), Some(Fragment { datagram: datagram6, first: None }));
        assert_eq!(fragment(&reply6), None);
        let atomic = &frames::ipv6_fragments(&reply6, 9, 200)[0];
        assert_eq!(fragment(atomic), None, "an atomic fragment is a whole datagram (RFC 6946)");
    }

    /// Under RSS a datagram's fragments follow its first to the worker of the first's
    /// tuple; a later fragment whose first was not seen stays.
    #[test]
    fn under_rss_fragments_follow_their_first() {
        let mesh = Mesh::new(3, 1, 4);
        let queue_of: QueueOf = Arc::new(|t: &FlowTuple| usize::from(t.dst_port));
        let mut r = Redirect::<()>::new(mesh, 0, Rule::Rss(queue_of));
        let a = frames::ipv4_fragments(&frames::udp(L, (ENDPOINT, 53), (SNAT, 2001), &[1; 100], 64), 1, 48);
        let b = frames::ipv4_fragments(&frames::udp(L, (ENDPOINT, 53), (SNAT, 2002), &[2; 100], 64), 2, 48);
        let c = frames::ipv4_fragments(&frames::udp(L, (ENDPOINT, 53), (SNAT, 2003), &[3; 100], 64), 3, 48);
        assert_eq!(r.owner(&c[1]), 0, "a later fragment before its first stays");
        // Two datagrams interleaved.
        assert_eq!(r.owner(&a[0]), 2001 % 3);
        assert_eq!(r.owner(&b[0]), 2002 % 3);
        assert_eq!(r.owner(&a[1]), 2001 % 3);
        assert_eq!(r.owner(&b[2]), 2002 % 3);
        assert_eq!(r.owner(&a[2]), 2001 % 3);
        assert_eq!(r.owner(&b[1]), 2002 % 3);
        // The same Identification between other addresses is another datagram.
        let other = frames::ipv4_fragments(&frames::udp(L, (CLIENT, 53), (SNAT, 2001), &[4; 100], 64), 1, 48);
        assert_eq!(r.owner(&other[1]), 0);
    }

    #[test]
    fn rings_carry_frames_to_their_owner_in_order_and_refuse_when_full() {
        let mut r = ends(3, 2, 4);
        for k in 0..4 {
            r[0].send(1, 2, (k, vec![k as u8])).expect("room");
        }
        assert_eq!(r[0].send(1, 2, (9, vec![])), Err((9, vec![])), "full after 4");
        assert!(r[0].send(1, 0, (0, vec![])).is_err(), "not to itself");
        assert!(r[0].send(5, 1, (0, vec![])).is_err(), "no such port");
        r[1].send(1, 2, (10, vec![])).expect("another sender's ring");
        r[0].send(0, 2, (20, vec![])).expect("another port's ring");
        let mut got = Vec::new();
        assert_eq!(r[2].recv(1, 3, |(k, _)| got.push(k)), 3);
        assert_eq!(r[2].recv(1, 10, |(k, _)| got.push(k)), 2);
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3, 10]);
        assert_eq!(r[2].recv(1, 10, |_| panic!("empty")), 0);
        assert_eq!(r[1].recv(1, 10, |_| panic!("nothing for worker 1")), 0);
        let mut port0 = Vec::new();
        assert_eq!(r[2].recv(0, 10, |(k, _)| port0.push(k)), 1);
        assert_eq!(port0, [20]);
    }

    /// Two threads: one sends a numbered stream, the other receives it whole and in order.
    #[test]
    fn one_producer_one_consumer_across_threads() {
        let mut r = ends(2, 1, 64);
        let mut consumer = r.pop().expect("worker 1");
        let producer = r.pop().expect("worker 0");
        let t = std::thread::spawn(move || {
            let mut k = 0usize;
            while k < 100_000 {
                if producer.send(0, 1, (k, Vec::new())).is_ok() {
                    k += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0usize;
        while next < 100_000 {
            consumer.recv(0, 32, |(k, _)| {
                assert_eq!(k, next);
                next += 1;
            });
        }
        t.join().expect("producer");
    }
}
