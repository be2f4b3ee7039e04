//! L2 mode: for a single segment without BGP, one gateway per VIP answers ARP and Neighbor
//! Solicitations for it and, when it takes a VIP over, announces it with a gratuitous ARP
//! (RFC 5227 § 3's ARP announcement) and an unsolicited Neighbor Advertisement
//! (RFC 4861 § 7.2.6, Override set), so that the segment's hosts move their neighbour
//! entries without asking — what MetalLB's and kube-vip's L2 modes do.
//!
//! Who owns a VIP is decided outside the data plane: torii-control holds one Kubernetes
//! Lease per VIP for its gateway (the API source), or owns every VIP (the manifests source:
//! no Lease, no failover), and writes what it holds into `shm_dir` (`l2-owners`,
//! [`crate::table::l2::Ownership`]); the gateway tells torii-control what it can serve
//! (`l2-candidacy`: its `/healthz` verdict and the VIPs with a usable endpoint). The thread
//! that trades these files ([`driver::Speaker`]) publishes the VIPs the workers answer for
//! into [`Owners`], read lock-free (one `arc-swap` load) by `pipeline::arp` and
//! `pipeline::ndp` before they answer for a VIP, and by worker 0, which sends the
//! announcements (`pipeline::gratuitous`).
//!
//! A gateway that does not own a VIP stays silent for its ARP/NDP but still forwards what
//! reaches it for the VIP (a client whose cache still points at it, during a handover).
//!
//! Configuration: the `[l2]` table ([`RawL2`] → [`L2Config`]); its `[l2.lease]` part is
//! torii-control's.

pub mod driver;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Deserialize;

use crate::table::config::{invalid, ConfigError};
use crate::table::l2::monotonic_ns;
use crate::table::FrontendKind;

/// The validated `[l2]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L2Config {
    /// The front-door kinds whose addresses are answered for and announced (`announce`:
    /// `"ExternalIP"`, `"LoadBalancer"`, `"ClusterIP"`; default the first two, as
    /// `bgp.announce`). VIPs of other kinds are not answered for in L2 mode.
    pub kinds: Vec<FrontendKind>,
    /// How long, seconds, a gateway told to stop (SIGTERM) keeps forwarding after it gave
    /// its VIPs up (`drain_s`, default 30, at most 3600).
    pub drain_s: u32,
}

/// The `[l2]` table as written; [`RawL2::validate`] checks it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawL2 {
    announce: Option<Vec<String>>,
    drain_s: Option<u32>,
    /// torii-control's part (`[l2.lease]`), validated there.
    #[serde(rename = "lease")]
    _lease: Option<toml::Value>,
}

impl RawL2 {
    /// Validates the table.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key (`l2.announce[0]: …`).
    pub fn validate(self) -> Result<L2Config, ConfigError> {
        let kinds = crate::announce::kinds("l2.announce", self.announce.as_deref())?;
        let drain_s = self.drain_s.unwrap_or(30);
        if drain_s > 3600 {
            return Err(invalid("l2.drain_s", format!("{drain_s} is out of range 0..=3600 seconds")));
        }
        Ok(L2Config { kinds, drain_s })
    }
}

/// Announcements of each VIP taken (RFC 5227 § 1.1 `ANNOUNCE_NUM`).
pub const ANNOUNCE_NUM: u8 = 2;
/// Between two rounds of announcements, ns (RFC 5227 § 1.1 `ANNOUNCE_INTERVAL`, 2 s).
pub const ANNOUNCE_INTERVAL_NS: u64 = 2_000_000_000;

/// How long the workers trust the published set without the L2 thread confirming it, ns
/// ([`Owners::confirm`]; it confirms every [`driver::PERIOD`], 100 ms): a gateway whose L2
/// thread stalls (the process stopped, starved) falls silent within this time, before
/// torii-control sees its candidacy go stale (1 s) and gives its VIPs to a peer; and after
/// a stop the workers answer nothing until the L2 thread has read the ownership again.
pub const CONFIRMATION_MAX_AGE_NS: u64 = 500_000_000;

/// The VIPs this gateway answers for now, as the workers see them.
#[derive(Debug, Default)]
pub struct Answered {
    /// Sorted by address, each once, with the `CLOCK_MONOTONIC` ns until which it is owned
    /// (the deadline in `l2-owners`; `u64::MAX` when torii-control owns every VIP).
    pub vips: Vec<(IpAddr, u64)>,
    /// The VIPs worker 0 announces: those that joined the set in the last
    /// [`ANNOUNCE_NUM`] rounds' time (only what changed: a VIP held all along is not
    /// announced again).
    pub announce: Vec<IpAddr>,
    /// Advanced whenever a VIP joined the set: worker 0 starts the announcements of
    /// [`Answered::announce`] over.
    pub seq: u64,
}

/// What the workers consult before answering ARP/NDP for a VIP: everything when L2 mode is
/// off ([`Owners::everyone`]), else the published set, each VIP until its deadline and only
/// while the L2 thread keeps confirming it ([`CONFIRMATION_MAX_AGE_NS`]).
#[derive(Debug)]
pub struct Owners {
    enabled: bool,
    answered: ArcSwap<Answered>,
    /// `CLOCK_MONOTONIC` ns of the L2 thread's last [`Owners::confirm`].
    confirmed_ns: AtomicU64,
}

impl Default for Owners {
    fn default() -> Self {
        Self::everyone()
    }
}

impl Owners {
    /// L2 mode off: every VIP of the table is answered for, nothing is announced.
    pub fn everyone() -> Self {
        Self { enabled: false, answered: ArcSwap::from_pointee(Answered::default()), confirmed_ns: AtomicU64::new(0) }
    }

    /// L2 mode on: nothing is answered for until [`Owners::publish`].
    pub fn l2() -> Self {
        Self { enabled: true, ..Self::everyone() }
    }

    /// Whether L2 mode is on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether ARP/NDP for `vip` (a VIP of the table) is answered now: L2 mode off, or `vip`
    /// published, its deadline ahead and the set confirmed within
    /// [`CONFIRMATION_MAX_AGE_NS`]. Reads `CLOCK_MONOTONIC` (ARP and NDP only, not the
    /// forwarding path).
    #[inline]
    pub fn answers(&self, vip: IpAddr) -> bool {
        if !self.enabled {
            return true;
        }
        let now = monotonic_ns();
        if now >= self.confirmed_ns.load(Ordering::Acquire).saturating_add(CONFIRMATION_MAX_AGE_NS) {
            return false;
        }
        let a = self.answered.load();
        a.vips.binary_search_by_key(&vip, |(v, _)| *v).is_ok_and(|i| now < a.vips[i].1)
    }

    /// The current set.
    pub fn current(&self) -> arc_swap::Guard<Arc<Answered>> {
        self.answered.load()
    }

    /// Publishes `vips` (sorted by address, each once, with deadlines) and confirms it.
    /// `announce`: the VIPs to announce when some joined (a new round of announcements);
    /// `None` lets the announcements under way go on.
    pub fn publish(&self, vips: Vec<(IpAddr, u64)>, announce: Option<Vec<IpAddr>>) {
        let old = self.answered.load_full();
        let next = match announce {
            Some(announce) => Answered { vips, announce, seq: old.seq + 1 },
            None => Answered { vips, announce: old.announce.clone(), seq: old.seq },
        };
        self.answered.store(Arc::new(next));
        self.confirm();
    }

    /// Says the published set is still torii-control's word (the L2 thread, every round).
    pub fn confirm(&self) {
        self.confirmed_ns.store(monotonic_ns(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_answer_what_was_published_until_its_deadline_while_confirmed() {
        let vip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (a, b) = (vip("203.0.113.10"), vip("2001:db8::10"));
        assert!(Owners::everyone().answers(a));
        let o = Owners::l2();
        assert!(!o.answers(a), "nothing before the first publication");
        o.publish(vec![(a, u64::MAX), (b, u64::MAX)], Some(vec![a, b]));
        assert!(o.answers(a) && o.answers(b));
        assert_eq!((o.current().seq, o.current().announce.len()), (1, 2));
        o.publish(vec![(a, u64::MAX)], None);
        assert_eq!(o.current().seq, 1, "a VIP leaving starts no announcement");
        assert!(!o.answers(b));
        o.publish(vec![(a, monotonic_ns()), (b, u64::MAX)], Some(vec![b]));
        assert!(!o.answers(a), "past its deadline (torii-control stopped renewing)");
        assert!(o.answers(b));
        assert_eq!((o.current().seq, o.current().announce.clone()), (2, vec![b]), "only the VIP that joined");
        o.confirmed_ns.store(monotonic_ns() - CONFIRMATION_MAX_AGE_NS, Ordering::Release);
        assert!(!o.answers(b), "not confirmed lately: the L2 thread stalled");
        o.confirm();
        assert!(o.answers(b));
    }

    #[test]
    fn config_defaults_and_errors() {
        let raw = |t: &str| toml::from_str::<toml::Table>(t).unwrap()["l2"].clone().try_into::<RawL2>();
        let c = raw("[l2]\n[l2.lease]\nduration_s = 3\n").unwrap().validate().unwrap();
        assert_eq!(c.kinds, [FrontendKind::ExternalIp, FrontendKind::LoadBalancer]);
        assert_eq!(c.drain_s, 30);
        let e = raw("[l2]\nannounce = [\"NodePort\"]\n").unwrap().validate().unwrap_err().to_string();
        assert!(e.starts_with("l2.announce[0]: \"NodePort\""), "{e}");
        let e = raw("[l2]\ndrain_s = 4000\n").unwrap().validate().unwrap_err().to_string();
        assert!(e.starts_with("l2.drain_s: 4000"), "{e}");
        assert!(raw("[l2]\nbogus = 1\n").is_err());
    }
}
