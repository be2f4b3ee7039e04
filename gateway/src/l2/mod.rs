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
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Deserialize;

use crate::table::config::{invalid, ConfigError};
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

/// The VIPs this gateway answers for now, as the workers see them.
#[derive(Debug, Default)]
pub struct Answered {
    /// Sorted, each once.
    pub vips: Vec<IpAddr>,
    /// Advanced whenever a VIP joined the set: worker 0 announces them all again.
    pub seq: u64,
}

/// What the workers consult before answering ARP/NDP for a VIP: everything when L2 mode is
/// off ([`Owners::everyone`]), else the published set.
#[derive(Debug)]
pub struct Owners {
    enabled: bool,
    answered: ArcSwap<Answered>,
}

impl Default for Owners {
    fn default() -> Self {
        Self::everyone()
    }
}

impl Owners {
    /// L2 mode off: every VIP of the table is answered for, nothing is announced.
    pub fn everyone() -> Self {
        Self { enabled: false, answered: ArcSwap::from_pointee(Answered::default()) }
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

    /// Whether ARP/NDP for `vip` (a VIP of the table) is answered.
    #[inline]
    pub fn answers(&self, vip: IpAddr) -> bool {
        !self.enabled || self.answered.load().vips.binary_search(&vip).is_ok()
    }

    /// The current set.
    pub fn current(&self) -> arc_swap::Guard<Arc<Answered>> {
        self.answered.load()
    }

    /// Publishes `vips` (sorted, each once); returns the VIPs that joined.
    pub fn publish(&self, vips: Vec<IpAddr>) -> Vec<IpAddr> {
        let old = self.answered.load_full();
        let joined: Vec<IpAddr> = vips.iter().filter(|v| old.vips.binary_search(v).is_err()).copied().collect();
        let seq = old.seq + u64::from(!joined.is_empty());
        self.answered.store(Arc::new(Answered { vips, seq }));
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_answer_what_was_published_and_count_joins() {
        let vip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(Owners::everyone().answers(vip("203.0.113.10")));
        let o = Owners::l2();
        assert!(!o.answers(vip("203.0.113.10")), "nothing before the first publication");
        assert_eq!(o.publish(vec![vip("203.0.113.10"), vip("2001:db8::10")]).len(), 2);
        assert!(o.answers(vip("203.0.113.10")) && o.answers(vip("2001:db8::10")));
        assert_eq!(o.current().seq, 1);
        assert!(o.publish(vec![vip("203.0.113.10")]).is_empty(), "a VIP leaving announces nothing");
        assert_eq!(o.current().seq, 1);
        assert!(!o.answers(vip("2001:db8::10")));
        assert_eq!(o.publish(vec![vip("203.0.113.10"), vip("2001:db8::10")]), [vip("2001:db8::10")]);
        assert_eq!(o.current().seq, 2);
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
