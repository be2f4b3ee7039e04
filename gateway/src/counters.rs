//! Per-worker counters: every drop under a named reason, plus what was forwarded and
//! answered. Plain integers owned by one worker (no atomics on the packet path); the
//! worker copies them out periodically for reporting.

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
    /// Neither ARP nor IPv4 (IPv6 and others arrive with later work).
    UnsupportedEtherType,
    /// Tagged with a VLAN (or untagged) for which the receiving port has no interface.
    UnknownVlan,
    /// Stacked VLAN tags (802.1ad `0x88A8` outer tag, or a tag inside a tag): the gateway
    /// terminates single 802.1Q VLANs only.
    VlanStacked,
    /// ARP that is not a well-formed Ethernet/IPv4 ARP packet.
    MalformedArp,
    /// ARP request for an address that is neither ours nor a VIP.
    ArpNotForUs,
    /// IPv4 header truncated or malformed (RFC 791 § 3.1).
    MalformedIpv4,
    /// IPv4 header checksum wrong.
    BadIpv4Checksum,
    /// An IPv4 fragment (fragment tracking arrives with later work).
    Fragment,
    /// TTL would reach zero when forwarded.
    TtlExceeded,
    /// TCP or UDP header truncated or malformed.
    MalformedL4,
    /// Not TCP, UDP or ICMP.
    UnsupportedProtocol,
    /// ICMP that is not an echo request to a VIP or own address.
    IcmpNotHandled,
    /// No front door for (destination address, protocol, destination port).
    NoFrontend,
    /// A new flow from a client outside the front door's source ranges
    /// (`loadBalancerSourceRanges`; kube-proxy drops such traffic in its firewall chain).
    SourceRangeDenied,
    /// A non-SYN-able segment (RST) of an unknown flow.
    NoConntrack,
    /// The chosen endpoint is not IPv4 (IPv6 arrives with later work).
    UnsupportedFamily,
    /// No interface or router reaches the endpoint.
    NoRoute,
    /// Every SNAT port of this worker is in use.
    SnatExhausted,
    /// The conntrack table is full.
    ConntrackFull,
    /// The next hop's MAC address is not resolved yet (an ARP request was queued).
    NeighbourUnresolved,
    /// The TX ring had no room (counted by the driver).
    TxRingFull,
    /// The frame did not fit the RX buffer (counted by the driver), or had no room left
    /// in it for the 802.1Q tag of its egress interface.
    Oversize,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 25] = [
        Self::Truncated,
        Self::UnknownInterface,
        Self::NotOurMac,
        Self::UnsupportedEtherType,
        Self::UnknownVlan,
        Self::VlanStacked,
        Self::MalformedArp,
        Self::ArpNotForUs,
        Self::MalformedIpv4,
        Self::BadIpv4Checksum,
        Self::Fragment,
        Self::TtlExceeded,
        Self::MalformedL4,
        Self::UnsupportedProtocol,
        Self::IcmpNotHandled,
        Self::NoFrontend,
        Self::SourceRangeDenied,
        Self::NoConntrack,
        Self::UnsupportedFamily,
        Self::NoRoute,
        Self::SnatExhausted,
        Self::ConntrackFull,
        Self::NeighbourUnresolved,
        Self::TxRingFull,
        Self::Oversize,
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
            Self::MalformedIpv4 => "malformed_ipv4",
            Self::BadIpv4Checksum => "bad_ipv4_checksum",
            Self::Fragment => "fragment",
            Self::TtlExceeded => "ttl_exceeded",
            Self::MalformedL4 => "malformed_l4",
            Self::UnsupportedProtocol => "unsupported_protocol",
            Self::IcmpNotHandled => "icmp_not_handled",
            Self::NoFrontend => "no_frontend",
            Self::SourceRangeDenied => "source_range_denied",
            Self::NoConntrack => "no_conntrack",
            Self::UnsupportedFamily => "unsupported_family",
            Self::NoRoute => "no_route",
            Self::SnatExhausted => "snat_exhausted",
            Self::ConntrackFull => "conntrack_full",
            Self::NeighbourUnresolved => "neighbour_unresolved",
            Self::TxRingFull => "tx_ring_full",
            Self::Oversize => "oversize",
        }
    }
}

const _: () = assert!(DropReason::ALL.len() == DropReason::Oversize as usize + 1);

/// One worker's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// Drops, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::ALL.len()],
}

impl Counters {
    /// Counts a drop.
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    /// The count for `reason`.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// Adds `other` into `self` (totals over workers).
    pub fn add(&mut self, other: &Counters) {
        self.rx_frames += other.rx_frames;
        self.tx_frames += other.tx_frames;
        self.forwarded_original += other.forwarded_original;
        self.forwarded_reply += other.forwarded_reply;
        self.new_flows += other.new_flows;
        self.expired_flows += other.expired_flows;
        self.endpoint_gone += other.endpoint_gone;
        self.rejected += other.rejected;
        self.arp_replies += other.arp_replies;
        self.arp_requests += other.arp_requests;
        self.echo_replies += other.echo_replies;
        self.arp_learned += other.arp_learned;
        for (a, b) in self.drops.iter_mut().zip(other.drops) {
            *a += b;
        }
    }
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rx={} tx={} fwd={} rev={} new_flows={} expired={} endpoint_gone={} rejected={} arp_replies={} arp_requests={} echo={}",
            self.rx_frames,
            self.tx_frames,
            self.forwarded_original,
            self.forwarded_reply,
            self.new_flows,
            self.expired_flows,
            self.endpoint_gone,
            self.rejected,
            self.arp_replies,
            self.arp_requests,
            self.echo_replies
        )?;
        for r in DropReason::ALL {
            let n = self.drops_of(r);
            if n > 0 {
                write!(f, " drop.{}={n}", r.name())?;
            }
        }
        Ok(())
    }
}
