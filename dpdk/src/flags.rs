//! Bit-flag newtypes over DPDK's `u64` flag words: RSS hash types and RX/TX offloads.
//! Values come from DPDK's headers through the bindings (`TORII_ETH_*` in
//! `csrc/torii_dpdk.h`), so they cannot drift from the library built against.

use crate::ffi;

macro_rules! flags {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $flag:ident = $value:expr;)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u64);

        impl $name {
            $($(#[$fmeta])* pub const $flag: Self = Self($value);)*
            /// (name, flag) of every named flag, for display.
            const NAMED: &'static [(&'static str, u64)] = &[$((stringify!($flag), $value)),*];

            /// No flag.
            pub const fn empty() -> Self {
                Self(0)
            }
            /// The raw bits.
            pub const fn bits(self) -> u64 {
                self.0
            }
            /// Whether no flag is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
            /// Whether every flag of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// The flags set in both.
            pub const fn intersection(self, other: Self) -> Self {
                Self(self.0 & other.0)
            }
            /// The flags of `self` not in `other`.
            pub const fn difference(self, other: Self) -> Self {
                Self(self.0 & !other.0)
            }
        }

        impl std::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }

        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }

        impl std::ops::BitAnd for $name {
            type Output = Self;
            fn bitand(self, rhs: Self) -> Self {
                Self(self.0 & rhs.0)
            }
        }

        impl std::fmt::Debug for $name {
            /// Single-bit names only (`IPV4 | NONFRAG_IPV4_TCP`), then any unnamed bits in hex.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut rest = self.0;
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                for &(name, bit) in Self::NAMED {
                    if bit.is_power_of_two() && rest & bit != 0 {
                        write!(f, "{}{name}", if first { "" } else { " | " })?;
                        rest &= !bit;
                        first = false;
                    }
                }
                if rest != 0 || first {
                    write!(f, "{}{rest:#x}", if first { "" } else { " | " })?;
                }
                write!(f, ")")
            }
        }
    };
}

flags! {
    /// RSS hash types (`RTE_ETH_RSS_*`): which packet types the NIC hashes, and over which
    /// fields. `NONFRAG_IPV4_TCP` hashes (src addr, dst addr, src port, dst port) of
    /// unfragmented IPv4 TCP; `IPV4` hashes the addresses of other IPv4 packets.
    RssHf {
        /// IPv4 packets not otherwise classified: addresses only.
        IPV4 = ffi::TORII_ETH_RSS_IPV4;
        /// Fragmented IPv4: addresses only.
        FRAG_IPV4 = ffi::TORII_ETH_RSS_FRAG_IPV4;
        /// Unfragmented IPv4 TCP: addresses and ports.
        NONFRAG_IPV4_TCP = ffi::TORII_ETH_RSS_NONFRAG_IPV4_TCP;
        /// Unfragmented IPv4 UDP: addresses and ports.
        NONFRAG_IPV4_UDP = ffi::TORII_ETH_RSS_NONFRAG_IPV4_UDP;
        /// Unfragmented IPv4 SCTP.
        NONFRAG_IPV4_SCTP = ffi::TORII_ETH_RSS_NONFRAG_IPV4_SCTP;
        /// Other unfragmented IPv4: addresses only.
        NONFRAG_IPV4_OTHER = ffi::TORII_ETH_RSS_NONFRAG_IPV4_OTHER;
        /// IPv6 not otherwise classified.
        IPV6 = ffi::TORII_ETH_RSS_IPV6;
        /// Fragmented IPv6.
        FRAG_IPV6 = ffi::TORII_ETH_RSS_FRAG_IPV6;
        /// Unfragmented IPv6 TCP.
        NONFRAG_IPV6_TCP = ffi::TORII_ETH_RSS_NONFRAG_IPV6_TCP;
        /// Unfragmented IPv6 UDP.
        NONFRAG_IPV6_UDP = ffi::TORII_ETH_RSS_NONFRAG_IPV6_UDP;
        /// Unfragmented IPv6 SCTP.
        NONFRAG_IPV6_SCTP = ffi::TORII_ETH_RSS_NONFRAG_IPV6_SCTP;
        /// Other unfragmented IPv6.
        NONFRAG_IPV6_OTHER = ffi::TORII_ETH_RSS_NONFRAG_IPV6_OTHER;
        /// Every IP type (`RTE_ETH_RSS_IP`).
        IP = ffi::TORII_ETH_RSS_IP;
        /// Every TCP type (`RTE_ETH_RSS_TCP`).
        TCP = ffi::TORII_ETH_RSS_TCP;
        /// Every UDP type (`RTE_ETH_RSS_UDP`).
        UDP = ffi::TORII_ETH_RSS_UDP;
        /// Every SCTP type (`RTE_ETH_RSS_SCTP`).
        SCTP = ffi::TORII_ETH_RSS_SCTP;
    }
}

flags! {
    /// Receive offloads (`RTE_ETH_RX_OFFLOAD_*`).
    RxOffloads {
        /// Strip VLAN tags.
        VLAN_STRIP = ffi::TORII_ETH_RX_OFFLOAD_VLAN_STRIP;
        /// Verify IPv4 header checksums (`Mbuf::rx_ip_cksum`).
        IPV4_CKSUM = ffi::TORII_ETH_RX_OFFLOAD_IPV4_CKSUM;
        /// Verify UDP checksums (`Mbuf::rx_l4_cksum`).
        UDP_CKSUM = ffi::TORII_ETH_RX_OFFLOAD_UDP_CKSUM;
        /// Verify TCP checksums (`Mbuf::rx_l4_cksum`).
        TCP_CKSUM = ffi::TORII_ETH_RX_OFFLOAD_TCP_CKSUM;
        /// Verify SCTP checksums.
        SCTP_CKSUM = ffi::TORII_ETH_RX_OFFLOAD_SCTP_CKSUM;
        /// IPv4, UDP and TCP checksums.
        CHECKSUM = ffi::TORII_ETH_RX_OFFLOAD_CHECKSUM;
        /// Frames larger than one buffer arrive chained.
        SCATTER = ffi::TORII_ETH_RX_OFFLOAD_SCATTER;
        /// Deliver the RSS hash in the mbuf (`Mbuf::rss_hash`).
        RSS_HASH = ffi::TORII_ETH_RX_OFFLOAD_RSS_HASH;
    }
}

flags! {
    /// Transmit offloads (`RTE_ETH_TX_OFFLOAD_*`).
    TxOffloads {
        /// Insert VLAN tags.
        VLAN_INSERT = ffi::TORII_ETH_TX_OFFLOAD_VLAN_INSERT;
        /// Compute IPv4 header checksums (`Mbuf::request_tx_cksum`).
        IPV4_CKSUM = ffi::TORII_ETH_TX_OFFLOAD_IPV4_CKSUM;
        /// Compute UDP checksums.
        UDP_CKSUM = ffi::TORII_ETH_TX_OFFLOAD_UDP_CKSUM;
        /// Compute TCP checksums.
        TCP_CKSUM = ffi::TORII_ETH_TX_OFFLOAD_TCP_CKSUM;
        /// Compute SCTP checksums.
        SCTP_CKSUM = ffi::TORII_ETH_TX_OFFLOAD_SCTP_CKSUM;
        /// Transmit chained mbufs.
        MULTI_SEGS = ffi::TORII_ETH_TX_OFFLOAD_MULTI_SEGS;
        /// All mbufs of a TX queue come from one pool and have refcnt 1: the driver may
        /// free them in bulk.
        MBUF_FAST_FREE = ffi::TORII_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
    }
}
