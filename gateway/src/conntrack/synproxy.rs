//! The state of one worker's SYN proxy ([`crate::pipeline`] answers SYNs with cookies
//! under a flood and opens proxied connections itself; see its `synproxy` step): the cookie
//! keys, the pressure meter that decides when SYNs get cookies, and the sequence
//! translation of each proxied flow.
//!
//! # Contract
//!
//! - Pressure: [`SynProxy::over_rate`] admits `above_per_s` SYNs a second (a burst of one
//!   second's worth) by the generic cell rate algorithm ([`crate::limiter::conforms`]); the
//!   rest are over.
//! - Translations: a fixed-capacity map per family keyed by the flow's original tuple,
//!   allocated by [`SynProxy::new`] and never grown (the caller keeps it within
//!   [`SynProxy::capacity`]).
//! - Pure: no clock, no I/O.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::syncookie::SynCookies;
use super::FlowKey;
use crate::limiter::conforms;

/// How long after the last cookie it sent a worker still checks ACKs as cookies' (ns): a
/// cookie's lifetime ([`super::syncookie::MAX_AGE_MINUTES`] + 1 minutes).
pub const RECENT_NS: u64 = 3 * 60_000_000_000;

/// The sequence translation of one proxied flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adjust {
    /// The client's ISN.
    pub client_isn: u32,
    /// The cookie: the ISN the client believes the server chose.
    pub cookie: u32,
    /// The window the client announced in its ACK (unscaled).
    pub client_window: u16,
    /// Endpoint ISN − cookie, once the endpoint's SYN-ACK came.
    pub delta: Option<u32>,
}

/// Translations by the flow's original tuple.
pub type Map<A> = HashMap<FlowKey<A>, Adjust, ahash::RandomState>;

/// An address family with its own map of translations in a [`SynProxy`].
pub trait Keyed: super::Address {
    /// The map of this family.
    fn map(proxy: &mut SynProxy) -> &mut Map<Self>;
}

impl Keyed for Ipv4Addr {
    fn map(proxy: &mut SynProxy) -> &mut Map<Self> {
        &mut proxy.adjust
    }
}

impl Keyed for Ipv6Addr {
    fn map(proxy: &mut SynProxy) -> &mut Map<Self> {
        &mut proxy.adjust6
    }
}

/// One worker's SYN-proxy state: the cookie keys, the pressure meter, and the translations
/// of proxied flows.
pub struct SynProxy {
    /// The cookie keys.
    pub cookies: SynCookies,
    /// Whether cookies are ever used (`[conntrack] syn_cookies`).
    enabled: bool,
    /// ns between SYNs admitted as ordinary flows; 0: every SYN gets a cookie.
    interval_ns: u64,
    /// `(burst − 1) · interval`, the GCRA's tolerance.
    tolerance_ns: u64,
    /// The GCRA's theoretical arrival time.
    tat_ns: u64,
    /// When this worker last sent a cookie.
    pub last_sent_ns: Option<u64>,
    /// IPv4 proxied flows.
    pub adjust: Map<Ipv4Addr>,
    /// IPv6 proxied flows.
    pub adjust6: Map<Ipv6Addr>,
    /// Entries each map may hold.
    pub capacity: usize,
}

impl std::fmt::Debug for SynProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SynProxy")
            .field("enabled", &self.enabled)
            .field("proxied", &(self.adjust.len() + self.adjust6.len()))
            .finish()
    }
}

impl SynProxy {
    /// A SYN proxy that admits `above_per_s` SYNs a second as ordinary flows (0: none) when
    /// `enabled`, keeping up to `capacity` proxied flows per family, with cookie keys drawn
    /// from `seed`.
    #[must_use]
    pub fn new(enabled: bool, above_per_s: u32, capacity: usize, seed: u64) -> Self {
        let interval_ns = if above_per_s == 0 { 0 } else { 1_000_000_000 / u64::from(above_per_s) };
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5c00_c1e5);
        let seeds = std::array::from_fn(|_| rng.u64(..));
        let capacity = if enabled { capacity.max(1) } else { 0 };
        let hasher = ahash::RandomState::with_seeds(rng.u64(..), rng.u64(..), rng.u64(..), rng.u64(..));
        Self {
            cookies: SynCookies::new(seeds),
            enabled,
            interval_ns,
            tolerance_ns: u64::from(above_per_s.max(1) - 1) * interval_ns,
            tat_ns: 0,
            last_sent_ns: None,
            adjust: HashMap::with_capacity_and_hasher(capacity, hasher.clone()),
            adjust6: HashMap::with_capacity_and_hasher(capacity, hasher),
            capacity,
        }
    }

    /// Whether a SYN at `now` is over the rate and must be answered with a cookie (when not,
    /// it is counted against the rate).
    #[inline]
    pub fn over_rate(&mut self, now: u64) -> bool {
        self.enabled && (self.interval_ns == 0 || !conforms(&mut self.tat_ns, now, self.interval_ns, self.tolerance_ns))
    }

    /// Forgets the translation of the flow whose original tuple is `key` (it ended, or a new
    /// flow replaces it); nothing when there is none.
    #[inline]
    pub fn forget<A: Keyed>(&mut self, key: &FlowKey<A>) {
        let map = A::map(self);
        if !map.is_empty() {
            map.remove(key);
        }
    }

    /// Whether this worker sent a cookie within [`RECENT_NS`] of `now`.
    #[must_use]
    pub fn recent(&self, now: u64) -> bool {
        self.last_sent_ns.is_some_and(|t| now.saturating_sub(t) < RECENT_NS)
    }
}
