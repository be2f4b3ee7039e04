//! SYN cookies: an initial sequence number that carries, in itself, what the gateway would
//! otherwise keep per half-open connection, so a SYN under pressure is answered without
//! creating state and only a client that completes the handshake gets a flow.
//!
//! # Contract
//!
//! - The encoding follows Linux's (`net/ipv4/syncookies.c`, `secure_tcp_syn_cookie`) and
//!   RFC 4987 § 3.6: with `H1`, `H2` keyed hashes of the connection's tuple and `count` the
//!   minute the cookie was issued (8 bits),
//!   `cookie = H1(tuple) + client_isn + (count << 24) + ((H2(tuple, count) + mss_index) mod 2^24)`.
//!   A cookie is accepted for [`MAX_AGE_MINUTES`] minutes after the one it was issued in
//!   (Linux's `MAX_SYNCOOKIE_AGE`), and only for the tuple it was issued for and with a
//!   valid MSS index. As in Linux, the client's ISN is added, not hashed: it places the
//!   cookie in the sequence space of the SYN that asked for it.
//! - The only connection parameter a cookie carries is the MSS, as one of four values
//!   ([`MSS_V4`], [`MSS_V6`]): the largest not above what the client offered. Window
//!   scaling, SACK and timestamps are not offered in a cookie's SYN-ACK (Linux keeps them
//!   only when timestamps carry them), so neither end uses them on such a connection.
//! - Pure: no clock (time is the caller's monotonic `now_ns`), no allocation, no I/O. The
//!   keys come from [`SynCookies::new`]; a cookie issued by one process is not valid in
//!   another.

use super::{Address, FlowKey};

/// Minutes after the minute of issue during which a cookie is still accepted: a client has
/// between one and two minutes to complete its handshake (Linux `MAX_SYNCOOKIE_AGE`).
pub const MAX_AGE_MINUTES: u32 = 2;

/// The MSS values an IPv4 cookie can carry (Linux's `msstab`): 536 (RFC 9293's default),
/// 1300, 1440 (PPPoE and tunnels), 1460 (Ethernet).
pub const MSS_V4: [u16; 4] = [536, 1300, 1440, 1460];

/// The MSS values an IPv6 cookie can carry (Linux's `msstab` of `syncookies.c` for IPv6):
/// 1220 (the IPv6 minimum MTU less 60), 1420, 1440 (Ethernet), 8940 (jumbo frames).
pub const MSS_V6: [u16; 4] = [1220, 1420, 1440, 8940];

/// Bits of the cookie below the minute counter.
const COOKIE_BITS: u32 = 24;
const COOKIE_MASK: u32 = (1 << COOKIE_BITS) - 1;
/// Nanoseconds in a cookie minute.
const MINUTE_NS: u64 = 60_000_000_000;

/// The keys of one worker's cookies.
#[derive(Clone, Debug)]
pub struct SynCookies {
    h1: ahash::RandomState,
    h2: ahash::RandomState,
}

impl SynCookies {
    /// Cookies keyed by `seeds` (eight random words: draw them from the process's random
    /// state at start; anyone who knows them can forge cookies).
    #[must_use]
    pub fn new(seeds: [u64; 8]) -> Self {
        Self {
            h1: ahash::RandomState::with_seeds(seeds[0], seeds[1], seeds[2], seeds[3]),
            h2: ahash::RandomState::with_seeds(seeds[4], seeds[5], seeds[6], seeds[7]),
        }
    }

    /// The initial sequence number of the SYN-ACK answering a SYN of `key` (as received:
    /// client → front door) whose sequence number is `client_isn` and whose MSS option is
    /// `client_mss` (`None` when absent), at `now_ns`; and the MSS it encodes, from `table`
    /// ([`MSS_V4`] or [`MSS_V6`]): the largest entry not above the client's (the smallest
    /// entry when the client offered less or nothing, as RFC 9293 § 3.7.1's default
    /// applies).
    #[must_use]
    pub fn issue<A: Address>(
        &self,
        key: &FlowKey<A>,
        client_isn: u32,
        client_mss: Option<u16>,
        table: &[u16; 4],
        now_ns: u64,
    ) -> (u32, u16) {
        let offered = client_mss.unwrap_or(table[0]);
        let index = table.iter().rposition(|&m| m <= offered).unwrap_or(0);
        let count = minute(now_ns);
        let cookie = self
            .first(key)
            .wrapping_add(client_isn)
            .wrapping_add(count << COOKIE_BITS)
            .wrapping_add(self.second(key, count).wrapping_add(index as u32) & COOKIE_MASK);
        (cookie, table[index])
    }

    /// Checks the acknowledgement of a cookie: `key` is the tuple of the client's ACK (as
    /// received), `client_isn` its sequence number less one, `cookie` its acknowledgement
    /// number less one. The MSS the cookie carries, or `None` when it is not a cookie of
    /// this worker's for that tuple and ISN issued within [`MAX_AGE_MINUTES`] of `now_ns`.
    #[must_use]
    pub fn check<A: Address>(
        &self,
        key: &FlowKey<A>,
        client_isn: u32,
        cookie: u32,
        table: &[u16; 4],
        now_ns: u64,
    ) -> Option<u16> {
        let rest = cookie.wrapping_sub(self.first(key)).wrapping_sub(client_isn);
        let issued = rest >> COOKIE_BITS;
        let age = minute(now_ns).wrapping_sub(issued) & (u32::MAX >> COOKIE_BITS);
        if age > MAX_AGE_MINUTES {
            return None;
        }
        let index = rest.wrapping_sub(self.second(key, issued)) & COOKIE_MASK;
        table.get(index as usize).copied()
    }

    fn first<A: Address>(&self, key: &FlowKey<A>) -> u32 {
        self.h1.hash_one(key) as u32
    }

    fn second<A: Address>(&self, key: &FlowKey<A>, count: u32) -> u32 {
        self.h2.hash_one((key, count)) as u32
    }
}

/// The cookie minute of `now_ns`, 8 bits.
fn minute(now_ns: u64) -> u32 {
    ((now_ns / MINUTE_NS) & 0xff) as u32
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::*;

    fn key(src: [u8; 4], sport: u16) -> FlowKey {
        FlowKey {
            protocol: 6,
            src_addr: Ipv4Addr::from(src),
            src_port: sport,
            dst_addr: Ipv4Addr::new(203, 0, 113, 10),
            dst_port: 80,
        }
    }

    const MIN: u64 = MINUTE_NS;

    #[test]
    fn a_cookie_carries_the_largest_mss_not_above_the_clients() {
        let c = SynCookies::new([1, 2, 3, 4, 5, 6, 7, 8]);
        let k = key([198, 51, 100, 7], 40000);
        for (offered, want) in
            [(Some(1460), 1460), (Some(9000), 1460), (Some(1400), 1300), (Some(100), 536), (None, 536)]
        {
            let (cookie, mss) = c.issue(&k, 77, offered, &MSS_V4, 5 * MIN);
            assert_eq!(mss, want);
            assert_eq!(c.check(&k, 77, cookie, &MSS_V4, 5 * MIN + 1), Some(want));
        }
        let k6 = FlowKey {
            protocol: 6,
            src_addr: Ipv6Addr::LOCALHOST,
            src_port: 1,
            dst_addr: Ipv6Addr::UNSPECIFIED,
            dst_port: 2,
        };
        let (cookie, mss) = c.issue(&k6, 0, Some(1440), &MSS_V6, 0);
        assert_eq!((mss, c.check(&k6, 0, cookie, &MSS_V6, 0)), (1440, Some(1440)));
    }

    #[test]
    fn a_cookie_expires_after_two_minutes_past_its_own() {
        let c = SynCookies::new([9; 8]);
        let k = key([198, 51, 100, 7], 40000);
        let (cookie, _) = c.issue(&k, 1, Some(1460), &MSS_V4, 10 * MIN + MIN / 2);
        for (at, ok) in [(10 * MIN, true), (12 * MIN + MIN - 1, true), (13 * MIN, false), (9 * MIN, false)] {
            assert_eq!(c.check(&k, 1, cookie, &MSS_V4, at).is_some(), ok, "at minute {}", at as f64 / MIN as f64);
        }
        // The 8-bit minute wraps: a cookie of minute 255 is good in minute 256 (0).
        let (cookie, _) = c.issue(&k, 1, Some(1460), &MSS_V4, 255 * MIN);
        assert!(c.check(&k, 1, cookie, &MSS_V4, 256 * MIN).is_some());
    }

    #[test]
    fn another_key_does_not_accept_the_cookie() {
        let (a, b) = (SynCookies::new([1; 8]), SynCookies::new([2; 8]));
        let k = key([198, 51, 100, 7], 40000);
        let (cookie, _) = a.issue(&k, 5, Some(1460), &MSS_V4, 0);
        assert_eq!(b.check(&k, 5, cookie, &MSS_V4, 0), None);
    }

    proptest! {
        /// A cookie is valid for the tuple it was issued for: another source port or
        /// address fails (except by the chance of a valid MSS index in 24 hashed bits: 4 in
        /// 2^24), and so does a cookie changed in its hashed bits. (As in Linux, the ISN is
        /// added, not hashed: it binds the cookie to the SYN's sequence space only.)
        #[test]
        fn cookies_bind_the_tuple(src in any::<[u8; 4]>(), sport in 1u16.., isn in any::<u32>(), seeds in any::<[u64; 8]>(), bit in 2u32..24) {
            let c = SynCookies::new(seeds);
            let k = key(src, sport);
            let (cookie, mss) = c.issue(&k, isn, Some(1460), &MSS_V4, 3 * MIN);
            prop_assert_eq!(c.check(&k, isn, cookie, &MSS_V4, 3 * MIN), Some(mss));
            for fk in [key(src, sport.wrapping_add(1).max(1)), key([src[0] ^ 1, src[1], src[2], src[3]], sport)] {
                prop_assume!(fk != k);
                prop_assert_eq!(c.check(&fk, isn, cookie, &MSS_V4, 3 * MIN), None);
            }
            prop_assert_eq!(c.check(&k, isn, cookie ^ (1 << bit), &MSS_V4, 3 * MIN), None);
        }
    }
}
