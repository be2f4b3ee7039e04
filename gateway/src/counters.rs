//! Per-worker counters: every drop under a named reason, plus what was forwarded and
//! answered ([`Counters`]), and per front door packets, bytes and new flows
//! ([`FrontendCounters`]). Plain integers owned by one worker (no atomics on the packet
//! path); the worker copies them out about once a second for reporting
//! ([`crate::metrics`]).

use crate::table::layout::{self, Frontend};
use crate::table::Table;

/// Why a frame was not forwarded. One counter each; `Copy`, no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than an Ethernet header.
    Truncated,
    /// Arrived on an interface index the host does not have (driver bug).
    UnknownInterface,
    /// Destination MAC is neither this interface's nor broadcast.
    NotOurMac,
    /// Neither ARP, IPv4 nor IPv6.
    UnsupportedEtherType,
    /// Tagged with a VLAN (or untagged) for which the receiving port has no interface.
    UnknownVlan,
    /// Stacked VLAN tags (802.1ad `0x88A8` outer tag, or a tag inside a tag): the gateway
    /// terminates single 802.1Q VLANs only.
    VlanStacked,
    /// ARP that is not a well-formed Ethernet/IPv4 ARP request or reply (an unknown opcode
    /// included: its sender is not learned).
    MalformedArp,
    /// ARP request for an address that is neither ours nor a VIP.
    ArpNotForUs,
    /// A Neighbor Solicitation or Advertisement that fails RFC 4861 § 7.1 validation (Hop
    /// Limit not 255, bad checksum, code not 0, bad options, DAD rules).
    MalformedNdp,
    /// Neighbor Solicitation for an address that is neither ours nor a VIP.
    NdpNotForUs,
    /// IPv4 header truncated or malformed (RFC 791 § 3.1).
    MalformedIpv4,
    /// IPv4 header checksum wrong.
    BadIpv4Checksum,
    /// IPv4 with a Loose or Strict Source and Record Route option (RFC 791 § 3.1): RFC 7126
    /// § 4.3 and § 4.4 advise routers to drop them; Linux does unless
    /// `accept_source_route` is set.
    SourceRouted,
    /// A new flow from a source no router forwards from (RFC 1812 § 5.3.7, RFC 6890 and
    /// RFC 4291): "this network" (0/8), loopback, limited broadcast, class E, multicast, or
    /// one of the gateway's own addresses (a SNAT address arriving from outside); IPv6
    /// unspecified or loopback.
    MartianSource,
    /// IPv6 header or extension-header chain truncated or malformed (RFC 8200 § 3, § 4), or
    /// a multicast source address.
    MalformedIpv6,
    /// An IPv4 fragment of a protocol torii does not follow through fragments: anything but
    /// TCP and UDP (SCTP's CRC32c covers the whole packet and cannot be fixed from its first
    /// fragment), or a fragmented ICMP message; and every IPv6 fragment (not followed yet).
    Fragment,
    /// A later IPv4 fragment whose first fragment was not forwarded by this worker (it never
    /// came, came later — out of order, not buffered — or its fragment-table entry expired
    /// after 30 s or was evicted).
    FragmentNoFirst,
    /// TTL (IPv6: Hop Limit) would reach zero when forwarded.
    TtlExceeded,
    /// TCP, UDP or SCTP header truncated or malformed (a first fragment too short for its
    /// transport header included, RFC 1858), or an ICMP error whose quote is not an IPv4
    /// header.
    MalformedL4,
    /// SCTP packet whose CRC32c is wrong (RFC 9260 § 6.8: discarded; Linux conntrack with
    /// `nf_conntrack_checksum` does the same).
    BadSctpChecksum,
    /// TCP or UDP segment whose checksum is wrong (RFC 9293 § 3.1, RFC 768; Linux conntrack
    /// with `nf_conntrack_checksum` marks it INVALID). Verified in software only where the
    /// device did not ([`crate::pipeline::Meta::l4_csum_good`]), the field is not partial,
    /// and the packet opens a flow or is a TCP SYN, FIN or RST (see `pipeline::flow`);
    /// counted and forwarded instead with `[conntrack] drop_bad_l4_checksums = false`.
    BadL4Checksum,
    /// ICMP error message whose checksum is wrong.
    BadIcmpChecksum,
    /// ICMP error (unreachable, time exceeded, parameter problem) quoting a datagram of no
    /// tracked flow, or not addressed to the quoted datagram's sender.
    IcmpErrorUntracked,
    /// Not TCP, UDP or ICMP.
    UnsupportedProtocol,
    /// ICMP or ICMPv6 that is not an echo request to a VIP or own address (nor, for ICMPv6,
    /// Neighbor Discovery).
    IcmpNotHandled,
    /// No front door for (destination address, protocol, destination port).
    NoFrontend,
    /// A new flow from a client outside the front door's source ranges
    /// (`loadBalancerSourceRanges`; kube-proxy drops such traffic in its firewall chain).
    SourceRangeDenied,
    /// A TCP segment of an unknown flow that cannot open one: only a SYN, or an ACK
    /// (picked up mid-stream), does (Linux `tcp_new` with `nf_conntrack_tcp_loose=1`).
    NoConntrack,
    /// A TCP segment whose flags do not fit its flow's state, or a combination no TCP sends
    /// (SYN+FIN, FIN without ACK, none of SYN, ACK, RST: Linux's `tcp_valid_flags` in
    /// `tcp_error`). Linux marks it INVALID; kube-proxy drops INVALID packets.
    TcpInvalid,
    /// A TCP segment outside its connection's sequence or acknowledgement window, or a RST
    /// before the data its receiver acknowledged (Linux `tcp_in_window` marks it INVALID;
    /// kube-proxy drops INVALID packets): what a blind injection or reset looks like.
    TcpOutOfWindow,
    /// A packet (or an ICMP error) of a tracked flow that arrived on another interface than
    /// the one its direction arrives on: a reply from the client side, or a client's packet
    /// from the endpoints' side — a forgery, as reverse-path filtering would judge it
    /// (RFC 3704 § 2.2).
    WrongLink,
    /// The chosen endpoint is of the other address family than the front door (an IPv4
    /// front door with an IPv6 endpoint or the reverse: full NAT does not translate families).
    UnsupportedFamily,
    /// A new flow from a source that opened more than `[conntrack]
    /// new_flows_per_source_per_s` (and its burst) through this worker.
    NewFlowRateLimited,
    /// No interface or router reaches the endpoint.
    NoRoute,
    /// Every SNAT port of this worker is in use.
    SnatExhausted,
    /// The conntrack table is full and no flow near the new one could be evicted early
    /// (all assured and live): the new flow is refused.
    ConntrackFull,
    /// The next hop's MAC address is not resolved yet (an ARP request or Neighbor
    /// Solicitation was queued).
    NeighbourUnresolved,
    /// A segment of a SYN-proxied flow before the endpoint's SYN-ACK completed the
    /// proxy's handshake with it (the sender retransmits).
    SynProxyPending,
    /// A valid SYN cookie's ACK found the SYN proxy's table of proxied flows full.
    SynProxyFull,
    /// The TX ring had no room (counted by the driver).
    TxRingFull,
    /// The frame did not fit the RX buffer (counted by the driver), or had no room left
    /// in it for the 802.1Q tag of its egress interface.
    Oversize,
    /// The frame belongs to another worker's flow and that worker's redirect ring was full
    /// (ports without usable RSS, [`crate::io::redirect`]; counted by the receiving worker).
    RedirectRingFull,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 42] = [
        Self::Truncated,
        Self::UnknownInterface,
        Self::NotOurMac,
        Self::UnsupportedEtherType,
        Self::UnknownVlan,
        Self::VlanStacked,
        Self::MalformedArp,
        Self::ArpNotForUs,
        Self::MalformedNdp,
        Self::NdpNotForUs,
        Self::MalformedIpv4,
        Self::BadIpv4Checksum,
        Self::SourceRouted,
        Self::MartianSource,
        Self::MalformedIpv6,
        Self::Fragment,
        Self::FragmentNoFirst,
        Self::TtlExceeded,
        Self::MalformedL4,
        Self::BadSctpChecksum,
        Self::BadL4Checksum,
        Self::BadIcmpChecksum,
        Self::IcmpErrorUntracked,
        Self::UnsupportedProtocol,
        Self::IcmpNotHandled,
        Self::NoFrontend,
        Self::SourceRangeDenied,
        Self::NoConntrack,
        Self::TcpInvalid,
        Self::TcpOutOfWindow,
        Self::WrongLink,
        Self::UnsupportedFamily,
        Self::NewFlowRateLimited,
        Self::NoRoute,
        Self::SnatExhausted,
        Self::ConntrackFull,
        Self::NeighbourUnresolved,
        Self::SynProxyPending,
        Self::SynProxyFull,
        Self::TxRingFull,
        Self::Oversize,
        Self::RedirectRingFull,
    ];

    /// snake_case name, for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::UnknownInterface => "unknown_interface",
            Self::NotOurMac => "not_our_mac",
            Self::UnsupportedEtherType => "unsupported_ethertype",
            Self::UnknownVlan => "unknown_vlan",
            Self::VlanStacked => "vlan_stacked",
            Self::MalformedArp => "malformed_arp",
            Self::ArpNotForUs => "arp_not_for_us",
            Self::MalformedNdp => "malformed_ndp",
            Self::NdpNotForUs => "ndp_not_for_us",
            Self::MalformedIpv4 => "malformed_ipv4",
            Self::BadIpv4Checksum => "bad_ipv4_checksum",
            Self::SourceRouted => "source_routed",
            Self::MartianSource => "martian_source",
            Self::MalformedIpv6 => "malformed_ipv6",
            Self::Fragment => "fragment",
            Self::FragmentNoFirst => "fragment_no_first",
            Self::TtlExceeded => "ttl_exceeded",
            Self::MalformedL4 => "malformed_l4",
            Self::BadSctpChecksum => "bad_sctp_checksum",
            Self::BadL4Checksum => "bad_l4_checksum",
            Self::BadIcmpChecksum => "bad_icmp_checksum",
            Self::IcmpErrorUntracked => "icmp_error_untracked",
            Self::UnsupportedProtocol => "unsupported_protocol",
            Self::IcmpNotHandled => "icmp_not_handled",
            Self::NoFrontend => "no_frontend",
            Self::SourceRangeDenied => "source_range_denied",
            Self::NoConntrack => "no_conntrack",
            Self::TcpInvalid => "tcp_invalid",
            Self::TcpOutOfWindow => "tcp_out_of_window",
            Self::WrongLink => "wrong_link",
            Self::UnsupportedFamily => "unsupported_family",
            Self::NewFlowRateLimited => "new_flow_rate_limited",
            Self::NoRoute => "no_route",
            Self::SnatExhausted => "snat_exhausted",
            Self::ConntrackFull => "conntrack_full",
            Self::NeighbourUnresolved => "neighbour_unresolved",
            Self::SynProxyPending => "syn_proxy_pending",
            Self::SynProxyFull => "syn_proxy_full",
            Self::TxRingFull => "tx_ring_full",
            Self::Oversize => "oversize",
            Self::RedirectRingFull => "redirect_ring_full",
        }
    }
}

const _: () = assert!(DropReason::ALL.len() == DropReason::RedirectRingFull as usize + 1);

/// One worker's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Frames handed to the pipeline.
    pub rx_frames: u64,
    /// Frames transmitted (forwarded or answered).
    pub tx_frames: u64,
    /// Frames forwarded client → endpoint.
    pub forwarded_original: u64,
    /// Frames forwarded endpoint → client.
    pub forwarded_reply: u64,
    /// Flows created.
    pub new_flows: u64,
    /// Flows removed by idle expiry.
    pub expired_flows: u64,
    /// Flows evicted to make room for a new one in a full conntrack table (Linux
    /// `early_drop`), or to free a SNAT port when every one is taken; the refusals are the
    /// `conntrack_full` and `snat_exhausted` drops.
    pub conntrack_evicted: u64,
    /// Flows ended because their endpoint left the Service (TCP: RST sent; UDP: re-steered).
    pub endpoint_gone: u64,
    /// TCP RSTs and ICMP port unreachables sent for front doors without endpoints.
    pub rejected: u64,
    /// ARP replies sent for own addresses and VIPs.
    pub arp_replies: u64,
    /// ARP requests sent to resolve next hops.
    pub arp_requests: u64,
    /// ICMP echo replies sent.
    pub echo_replies: u64,
    /// ARP replies and requests learned from.
    pub arp_learned: u64,
    /// Neighbor Advertisements sent for own addresses and VIPs (RFC 4861 § 7.2.4).
    pub nd_advertisements: u64,
    /// Neighbor Solicitations sent to resolve IPv6 next hops (RFC 4861 § 7.2.2).
    pub nd_solicitations: u64,
    /// Neighbor Solicitations and Advertisements learned from.
    pub nd_learned: u64,
    /// L2 mode: gratuitous ARPs and unsolicited Neighbor Advertisements sent for VIPs this
    /// gateway took over (RFC 5227 § 3, RFC 4861 § 7.2.6).
    pub l2_announcements: u64,
    /// ICMP errors about tracked flows translated and forwarded to the flow's peer.
    pub icmp_errors_translated: u64,
    /// Later IPv4 fragments forwarded along their first fragment's translation.
    pub fragments_followed: u64,
    /// Fragment-table entries evicted by a newer datagram (their later fragments are dropped).
    pub fragment_evictions: u64,
    /// SYNs answered with a SYN cookie (over `[conntrack] syn_cookies_above_per_s`).
    pub syn_cookies_sent: u64,
    /// ACKs that acknowledged a valid SYN cookie: flows created for them, proxied.
    pub syn_cookies_valid: u64,
    /// Endpoint handshakes the SYN proxy completed (endpoint SYN-ACKs answered).
    pub syn_proxy_handshakes: u64,
    /// Frames received here and handed to the worker that owns their flow (ports without
    /// usable RSS, [`crate::io::redirect`]).
    pub redirected: u64,
    /// TCP and UDP segments forwarded although their checksum is wrong (`[conntrack]
    /// drop_bad_l4_checksums = false`; else they are `bad_l4_checksum` drops).
    pub bad_l4_checksums_passed: u64,
    /// TCP flows restarted as a new connection on their tuple: the endpoint's SYN+ACK
    /// answered a client SYN the flow had ignored (`conntrack::resync`; copied from the
    /// conntrack tables when the worker reports).
    pub tcp_resyncs: u64,
    /// Ignored SYNs overwritten in the full side table before they aged out
    /// (`conntrack::resync`; copied from the conntrack tables when the worker reports).
    pub tcp_ignored_syns_overwritten: u64,
    /// Neighbours (ARP, Neighbor Discovery, on-link clients) not learned because the
    /// neighbour table was full (`neighbour_capacity`): their frames wait on resolution.
    pub neighbours_not_learned: u64,
    /// Drops, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::ALL.len()],
}

// Written out: `Default` is not derived for arrays longer than 32 (the drop counters).
impl Default for Counters {
    fn default() -> Self {
        Self {
            rx_frames: 0,
            tx_frames: 0,
            forwarded_original: 0,
            forwarded_reply: 0,
            new_flows: 0,
            expired_flows: 0,
            conntrack_evicted: 0,
            endpoint_gone: 0,
            rejected: 0,
            arp_replies: 0,
            arp_requests: 0,
            echo_replies: 0,
            arp_learned: 0,
            nd_advertisements: 0,
            nd_solicitations: 0,
            nd_learned: 0,
            l2_announcements: 0,
            icmp_errors_translated: 0,
            fragments_followed: 0,
            fragment_evictions: 0,
            syn_cookies_sent: 0,
            syn_cookies_valid: 0,
            syn_proxy_handshakes: 0,
            redirected: 0,
            bad_l4_checksums_passed: 0,
            tcp_resyncs: 0,
            tcp_ignored_syns_overwritten: 0,
            neighbours_not_learned: 0,
            drops: [0; DropReason::ALL.len()],
        }
    }
}

impl Counters {
    /// Counts a drop.
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    /// Counts `n` drops of one reason (what a driver refused, in bulk).
    #[inline]
    pub fn drop_n(&mut self, reason: DropReason, n: usize) {
        self.drops[reason as usize] += n as u64;
    }

    /// The count for `reason`.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// Calls `f(name, help, value)` for every counter but the drops (which
    /// [`DropReason::ALL`] enumerates), in declaration order: the one list reports use.
    pub fn for_each(&self, mut f: impl FnMut(&'static str, &'static str, u64)) {
        f("rx_frames", "Frames handed to the pipeline.", self.rx_frames);
        f("tx_frames", "Frames transmitted (forwarded or answered).", self.tx_frames);
        f("forwarded_original", "Frames forwarded client to endpoint.", self.forwarded_original);
        f("forwarded_reply", "Frames forwarded endpoint to client.", self.forwarded_reply);
        f("new_flows", "Flows created.", self.new_flows);
        f("expired_flows", "Flows removed by idle expiry.", self.expired_flows);
        f(
            "conntrack_evicted",
            "Flows evicted early to make room in a full conntrack table or free a SNAT port.",
            self.conntrack_evicted,
        );
        f("endpoint_gone", "Flows ended because their endpoint left the Service.", self.endpoint_gone);
        f("rejected", "TCP RSTs and ICMP port unreachables sent for front doors without endpoints.", self.rejected);
        f("arp_replies", "ARP replies sent for own addresses and VIPs.", self.arp_replies);
        f("arp_requests", "ARP requests sent to resolve next hops.", self.arp_requests);
        f("echo_replies", "ICMP echo replies sent.", self.echo_replies);
        f("arp_learned", "ARP packets learned from.", self.arp_learned);
        f("nd_advertisements", "Neighbor Advertisements sent for own addresses and VIPs.", self.nd_advertisements);
        f("nd_solicitations", "Neighbor Solicitations sent to resolve IPv6 next hops.", self.nd_solicitations);
        f("nd_learned", "Neighbor Solicitations and Advertisements learned from.", self.nd_learned);
        f(
            "icmp_errors_translated",
            "ICMP errors about tracked flows translated and forwarded to the peer.",
            self.icmp_errors_translated,
        );
        f(
            "fragments_followed",
            "Later IPv4 fragments forwarded along their first fragment's translation.",
            self.fragments_followed,
        );
        f("fragment_evictions", "Fragment-table entries evicted by newer datagrams.", self.fragment_evictions);
        f("syn_cookies_sent", "SYNs answered with a SYN cookie under a SYN flood.", self.syn_cookies_sent);
        f("syn_cookies_valid", "ACKs of valid SYN cookies: proxied flows created.", self.syn_cookies_valid);
        f("syn_proxy_handshakes", "Endpoint handshakes completed by the SYN proxy.", self.syn_proxy_handshakes);
        f("redirected", "Frames received and handed to the worker that owns their flow.", self.redirected);
        f(
            "bad_l4_checksums_passed",
            "TCP and UDP segments forwarded with a wrong checksum (drop_bad_l4_checksums = false).",
            self.bad_l4_checksums_passed,
        );
        f(
            "l2_announcements",
            "L2 mode: gratuitous ARPs and unsolicited Neighbor Advertisements sent for VIPs taken over.",
            self.l2_announcements,
        );
        f("tcp_resyncs", "TCP flows restarted by a SYN+ACK answering a SYN they had ignored.", self.tcp_resyncs);
        f(
            "tcp_ignored_syns_overwritten",
            "Ignored SYNs overwritten in the full side table before they aged out.",
            self.tcp_ignored_syns_overwritten,
        );
        f(
            "neighbours_not_learned",
            "Neighbours not learned because the neighbour table was full (raise neighbour_capacity).",
            self.neighbours_not_learned,
        );
    }

    /// Adds `other` into `self` (totals over workers).
    pub fn add(&mut self, other: &Counters) {
        self.rx_frames += other.rx_frames;
        self.tx_frames += other.tx_frames;
        self.forwarded_original += other.forwarded_original;
        self.forwarded_reply += other.forwarded_reply;
        self.new_flows += other.new_flows;
        self.expired_flows += other.expired_flows;
        self.conntrack_evicted += other.conntrack_evicted;
        self.endpoint_gone += other.endpoint_gone;
        self.rejected += other.rejected;
        self.arp_replies += other.arp_replies;
        self.arp_requests += other.arp_requests;
        self.echo_replies += other.echo_replies;
        self.arp_learned += other.arp_learned;
        self.nd_advertisements += other.nd_advertisements;
        self.nd_solicitations += other.nd_solicitations;
        self.nd_learned += other.nd_learned;
        self.l2_announcements += other.l2_announcements;
        self.icmp_errors_translated += other.icmp_errors_translated;
        self.fragments_followed += other.fragments_followed;
        self.fragment_evictions += other.fragment_evictions;
        self.syn_cookies_sent += other.syn_cookies_sent;
        self.syn_cookies_valid += other.syn_cookies_valid;
        self.syn_proxy_handshakes += other.syn_proxy_handshakes;
        self.redirected += other.redirected;
        self.bad_l4_checksums_passed += other.bad_l4_checksums_passed;
        self.tcp_resyncs += other.tcp_resyncs;
        self.tcp_ignored_syns_overwritten += other.tcp_ignored_syns_overwritten;
        self.neighbours_not_learned += other.neighbours_not_learned;
        for (a, b) in self.drops.iter_mut().zip(other.drops) {
            *a += b;
        }
    }
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rx={} tx={} fwd={} rev={} new_flows={} expired={} evicted={} endpoint_gone={} rejected={} arp_replies={} arp_requests={} nd_adverts={} nd_solicits={} echo={}",
            self.rx_frames,
            self.tx_frames,
            self.forwarded_original,
            self.forwarded_reply,
            self.new_flows,
            self.expired_flows,
            self.conntrack_evicted,
            self.endpoint_gone,
            self.rejected,
            self.arp_replies,
            self.arp_requests,
            self.nd_advertisements,
            self.nd_solicitations,
            self.echo_replies
        )?;
        if self.redirected > 0 {
            write!(f, " redirected={}", self.redirected)?;
        }
        for r in DropReason::ALL {
            let n = self.drops_of(r);
            if n > 0 {
                write!(f, " drop.{}={n}", r.name())?;
            }
        }
        Ok(())
    }
}

/// One front door's counts on one worker: one cache line (aligned to 64 bytes, so a packet's
/// count update touches one line, which the burst path prefetches).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct FrontendCount {
    /// Packets forwarded client → endpoint (the flow's original direction).
    pub packets_original: u64,
    /// IPv4 bytes (total length) of those packets.
    pub bytes_original: u64,
    /// Packets forwarded endpoint → client (the reply direction).
    pub packets_reply: u64,
    /// IPv4 bytes of those packets.
    pub bytes_reply: u64,
    /// Flows created through the front door.
    pub new_flows: u64,
}

impl FrontendCount {
    /// Whether nothing was counted.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &FrontendCount) {
        self.packets_original += other.packets_original;
        self.bytes_original += other.bytes_original;
        self.packets_reply += other.packets_reply;
        self.bytes_reply += other.bytes_reply;
        self.new_flows += other.new_flows;
    }
}

/// One worker's per-front-door counts, indexed like the front doors of the table the worker
/// uses ([`Table::frontends`], the index conntrack keeps per flow). Sized when the worker
/// adopts a table ([`Self::adopt`], which allocates); counting never allocates, and an index
/// outside the table is ignored rather than a panic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontendCounters {
    counts: Vec<FrontendCount>,
}

impl FrontendCounters {
    /// Re-indexes the counts from the front doors of `old` to those of `new`: a front door
    /// in both (same address, protocol and port) keeps its counts, one that left drops them
    /// (its series ends), a new one starts at zero. A merge of the two sorted front door
    /// lists, O(old + new). Allocates; called at the burst boundary where the worker
    /// switches tables, never on the packet path.
    pub fn adopt(&mut self, old: &Table, new: &Table) {
        let key = |f: &Frontend| layout::frontend_key(f.addr, f.protocol, f.port.get());
        let mut counts = vec![FrontendCount::default(); new.frontends().len()];
        let (olds, news) = (old.frontends(), new.frontends());
        let (mut i, mut j) = (0, 0);
        while i < olds.len().min(self.counts.len()) && j < news.len() {
            match key(&olds[i]).cmp(&key(&news[j])) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    counts[j] = self.counts[i];
                    i += 1;
                    j += 1;
                }
            }
        }
        self.counts = counts;
    }

    /// Counts a packet of `ip_bytes` forwarded through front door `index`, in the flow's
    /// original direction or not.
    #[inline]
    pub fn packet(&mut self, index: u32, original: bool, ip_bytes: usize) {
        if let Some(c) = self.counts.get_mut(index as usize) {
            if original {
                c.packets_original += 1;
                c.bytes_original += ip_bytes as u64;
            } else {
                c.packets_reply += 1;
                c.bytes_reply += ip_bytes as u64;
            }
        }
    }

    /// Counts a flow created through front door `index`.
    #[inline]
    pub fn new_flow(&mut self, index: u32) {
        if let Some(c) = self.counts.get_mut(index as usize) {
            c.new_flows += 1;
        }
    }

    /// Starts loading the counts of front door `index` into the cache (ahead of a burst);
    /// changes nothing. O(1).
    #[inline]
    pub fn prefetch(&self, index: u32) {
        if let Some(c) = self.counts.get(index as usize) {
            crate::prefetch::prefetch(c);
        }
    }

    /// The counts, indexed like the table's front doors.
    pub fn as_slice(&self) -> &[FrontendCount] {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field but the drops, each with its own value: a field added to [`Counters`]
    /// without a place here does not compile, and one missing from
    /// [`Counters::for_each`] fails.
    #[test]
    fn for_each_reports_every_counter_once() {
        let c = Counters {
            rx_frames: 1,
            tx_frames: 2,
            forwarded_original: 3,
            forwarded_reply: 4,
            new_flows: 5,
            expired_flows: 6,
            conntrack_evicted: 7,
            endpoint_gone: 8,
            rejected: 9,
            arp_replies: 10,
            arp_requests: 11,
            echo_replies: 12,
            arp_learned: 13,
            nd_advertisements: 14,
            nd_solicitations: 15,
            nd_learned: 16,
            icmp_errors_translated: 17,
            fragments_followed: 18,
            fragment_evictions: 19,
            syn_cookies_sent: 20,
            syn_cookies_valid: 21,
            syn_proxy_handshakes: 22,
            redirected: 23,
            bad_l4_checksums_passed: 24,
            l2_announcements: 25,
            tcp_resyncs: 26,
            tcp_ignored_syns_overwritten: 27,
            neighbours_not_learned: 28,
            drops: [0; DropReason::ALL.len()],
        };
        let mut seen = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        c.for_each(|name, help, v| {
            assert!(!help.is_empty() && names.insert(name), "{name}");
            seen.push(v);
        });
        assert_eq!(seen, (1..=28).collect::<Vec<u64>>());
        let mut total = Counters::default();
        total.add(&c);
        total.add(&c);
        let mut doubled = Vec::new();
        total.for_each(|_, _, v| doubled.push(v));
        assert_eq!(doubled, (1..=28).map(|v| 2 * v).collect::<Vec<u64>>(), "add sums every counter");
    }
}
