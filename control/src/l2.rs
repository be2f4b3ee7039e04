//! L2 mode's owner election: one `coordination.k8s.io/v1` Lease per VIP, so that of the
//! gateways on one segment exactly one answers ARP / Neighbor Discovery for a VIP and
//! sends the gratuitous ARP / unsolicited Neighbor Advertisement when it takes it over.
//!
//! torii-control holds the Leases (it has the API client; the gateway never talks to the
//! API), on behalf of its gateway and only while the gateway says it can serve the VIP:
//! the gateway's candidacy file ([`torii_table::l2::Candidacy`], rewritten every 200 ms
//! with its `/healthz` verdict and the VIPs that have a usable endpoint) must be fresh
//! ([`CANDIDACY_MAX_AGE`]) and healthy. What it holds goes back to the gateway in the
//! ownership file ([`torii_table::l2::Ownership`]), each VIP valid until its last renewal
//! plus the renew deadline.
//!
//! The election is client-go's `leaderelection` (`tryAcquireOrRenew`, per VIP): every
//! retry period the Lease is read; it is created if missing, renewed if ours, taken over
//! (`leaseTransitions` + 1) if its holder is empty or its record has not changed for the
//! holder's `leaseDurationSeconds` by our own clock (the observed time, never the other
//! host's `renewTime`), and left alone otherwise. Writes are replaces carrying the
//! `resourceVersion` read, so of two gateways taking a Lease at once one gets 409 Conflict
//! and backs off. A holder that cannot renew for the renew deadline stops claiming the VIP
//! (its gateway falls silent) before any peer may take it (the Lease duration). A VIP the
//! gateway no longer offers (drain, unhealthy, no endpoint, gateway dead) is released at
//! once, as client-go's `ReleaseOnCancel` does: `holderIdentity` empty,
//! `leaseDurationSeconds` 1, so the peer takes it on its next retry without waiting.
//!
//! VIPs spread over the gateways as MetalLB's L2 mode spreads Services: each torii-control
//! holds a member Lease (`torii-l2-member-<identity>`, label [`MEMBER_LABEL`]) while its
//! gateway is a live, healthy candidate, and lists the others' to know the live set; per
//! VIP the member of lowest [`rank`] takes a free Lease at once, any other only after it
//! was free for a Lease duration; a holder hands a VIP back (releases it) once its
//! preferred member has been live for a Lease duration, once per such stay — never a take
//! of a held Lease, so two gateways never answer for one VIP. The gateway counts as a
//! candidate only while its process holds its `shm_dir` lock
//! ([`torii_table::shm::holds_lock`]) and its candidacy is fresh and healthy.
//!
//! Defaults are client-go's and kube-vip's (15 s / 10 s / 2 s); configuration: the
//! `[l2.lease]` table ([`LeaseConfig`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde::Deserialize;
use tokio::time::Instant;
use torii_table::config::{invalid, ConfigError};
use torii_table::l2::{monotonic_ns, Candidacy, CandidateState, Ownership, OwnershipMode};

/// How old the gateway's candidacy file may be before the gateway counts as gone (it is
/// rewritten every 200 ms).
pub const CANDIDACY_MAX_AGE: Duration = Duration::from_secs(1);

/// How often the candidacy file is read (a VIP it drops is released at once).
pub const POLL: Duration = Duration::from_millis(100);

/// The validated `[l2.lease]` table (present when `[l2]` is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The Leases' namespace (`namespace`, default `torii`, the namespace
    /// `configs/kubernetes/rbac.yaml` creates and lets torii-control write Leases in).
    pub namespace: String,
    /// `holderIdentity` (`identity`, default the configuration's `node_name`): unique per
    /// gateway.
    pub identity: String,
    /// `leaseDurationSeconds` (`duration_s`, default 15): how long a peer waits after the
    /// holder's last renewal it saw before taking a VIP.
    pub duration: Duration,
    /// How long the holder keeps claiming a VIP without a successful renewal
    /// (`renew_deadline_ms`, default 10 000; below the duration).
    pub renew_deadline: Duration,
    /// How often each Lease is tried (`retry_period_ms`, default 2 000; client-go requires
    /// the renew deadline above 1.2 × this).
    pub retry_period: Duration,
}

/// `[l2]` as torii-control reads it: only `lease` (the other keys are the gateway's).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RawL2 {
    #[serde(default)]
    lease: RawLease,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLease {
    namespace: Option<String>,
    identity: Option<String>,
    duration_s: Option<u32>,
    renew_deadline_ms: Option<u64>,
    retry_period_ms: Option<u64>,
}

/// Whether `s` is a DNS label (RFC 1123: 1 to 63 lower-case letters, digits and '-',
/// starting and ending with a letter or digit), what a namespace name must be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl RawL2 {
    /// Validates `[l2.lease]`; `node_name` is the default identity.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key (`l2.lease.renew_deadline_ms: …`).
    pub fn validate(self, node_name: &str) -> Result<LeaseConfig, ConfigError> {
        let l = self.lease;
        let namespace = l.namespace.unwrap_or_else(|| "torii".into());
        if !is_dns_label(&namespace) {
            return Err(invalid("l2.lease.namespace", format!("{namespace:?} is not a namespace name (a DNS label)")));
        }
        let identity = l.identity.unwrap_or_else(|| node_name.to_owned());
        if !identity.split('.').all(is_dns_label) || identity.len() > 253 - MEMBER_PREFIX.len() {
            return Err(invalid(
                "l2.lease.identity",
                format!("{identity:?} must be a DNS subdomain name (a Node name; it names the member Lease)"),
            ));
        }
        let duration_s = l.duration_s.unwrap_or(15);
        if !(1..=3600).contains(&duration_s) {
            return Err(invalid("l2.lease.duration_s", format!("{duration_s} is out of range 1..=3600")));
        }
        let duration = Duration::from_secs(u64::from(duration_s));
        let renew_deadline = Duration::from_millis(l.renew_deadline_ms.unwrap_or(10_000));
        let retry_period = Duration::from_millis(l.retry_period_ms.unwrap_or(2_000));
        // client-go's NewLeaderElector checks.
        if renew_deadline >= duration {
            return Err(invalid(
                "l2.lease.renew_deadline_ms",
                format!("{} ms must be below duration_s ({duration_s} s)", renew_deadline.as_millis()),
            ));
        }
        if retry_period < Duration::from_millis(100) || renew_deadline.as_secs_f64() <= 1.2 * retry_period.as_secs_f64()
        {
            return Err(invalid(
                "l2.lease.retry_period_ms",
                format!(
                    "{} ms must be at least 100 and renew_deadline_ms ({}) above 1.2 × it (client-go's rule)",
                    retry_period.as_millis(),
                    renew_deadline.as_millis()
                ),
            ));
        }
        Ok(LeaseConfig { namespace, identity, duration, renew_deadline, retry_period })
    }
}

/// The Lease of `vip`: `torii-l2-` and the address with `:` as `-` (a DNS subdomain name;
/// the canonical text of an address is unique, and has no `-`).
pub fn lease_name(vip: IpAddr) -> String {
    format!("torii-l2-{}", vip.to_string().replace(':', "-"))
}

/// The member Leases' names: this and the identity.
pub const MEMBER_PREFIX: &str = "torii-l2-member-";
/// The label every member Lease carries (`true`), to list them.
pub const MEMBER_LABEL: &str = "torii.io/l2-member";

/// Where `identity` ranks for `vip`: lower is preferred. XXH3-64 of `"<identity>#<vip>"`
/// (a fixed, specified hash, so that gateways of different builds agree; MetalLB ranks its
/// speakers by SHA-256 of `"<node>#<service>"` the same way).
pub fn rank(identity: &str, vip: IpAddr) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("{identity}#{vip}").as_bytes())
}

/// The preferred owner of `vip` among `members` (identities): the lowest [`rank`], ties
/// by identity.
pub fn preferred<'a>(vip: IpAddr, members: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    members.into_iter().min_by_key(|m| (rank(m, vip), *m))
}

/// With the manifests source there is no Lease: the gateway answers for every VIP it can
/// serve (one gateway per segment, no failover). Writes that in the ownership file.
///
/// # Errors
/// I/O errors writing `shm_dir/l2-owners`.
pub fn own_all(shm_dir: &std::path::Path, identity: &str) -> std::io::Result<()> {
    Ownership {
        written_ns: monotonic_ns(),
        mode: OwnershipMode::All,
        holder: identity.to_owned(),
        vips: BTreeMap::new(),
    }
    .write(shm_dir)
}

/// What we last saw of a Lease someone else holds (client-go's observed record and time).
struct Observed {
    resource_version: String,
    at: Instant,
}

impl Observed {
    /// Records `rv` seen `now`; returns when the record last changed.
    fn see(seen: &mut HashMap<String, Observed>, name: &str, rv: &str, now: Instant) -> Instant {
        let o = seen.entry(name.to_owned()).or_insert_with(|| Observed { resource_version: rv.to_owned(), at: now });
        if o.resource_version != rv {
            *o = Observed { resource_version: rv.to_owned(), at: now };
        }
        o.at
    }
}

/// The elector of one torii-control.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    shm_dir: PathBuf,
    /// VIP → `CLOCK_MONOTONIC` ns when its last successful renewal was sent.
    held: BTreeMap<IpAddr, u64>,
    /// Lease name → what we last saw of it (VIP and member Leases).
    observed: HashMap<String, Observed>,
    /// Whether our member Lease is ours now.
    member: bool,
    /// The live members (identity → since when, by our clock), ourselves included.
    members: BTreeMap<String, Instant>,
    /// VIP → when we first saw its Lease free while another member was preferred: we take
    /// it once that is a Lease duration ago (the preferred did not).
    free_since: HashMap<IpAddr, Instant>,
    /// VIP → the member we handed it back to (once per member while it stays live).
    handed_back: HashMap<IpAddr, String>,
}

impl Elector {
    /// An elector for `client`'s cluster, writing into `shm_dir`.
    pub fn new(client: Client, config: LeaseConfig, shm_dir: PathBuf) -> Self {
        let api = Api::namespaced(client, &config.namespace);
        Self {
            api,
            config,
            shm_dir,
            held: BTreeMap::new(),
            observed: HashMap::new(),
            member: false,
            members: BTreeMap::new(),
            free_since: HashMap::new(),
            handed_back: HashMap::new(),
        }
    }

    /// Runs until `shutdown` completes, then releases every Lease it holds.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        tracing::info!(
            namespace = %self.config.namespace,
            identity = %self.config.identity,
            duration_s = self.config.duration.as_secs(),
            renew_deadline_ms = self.config.renew_deadline.as_millis() as u64,
            retry_period_ms = self.config.retry_period.as_millis() as u64,
            "L2 mode: electing one gateway per VIP through Leases"
        );
        self.write_ownership();
        let mut next_round = Instant::now();
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(POLL) => {}
            }
            let candidacy = self.candidacy();
            let offered = candidacy.clone().unwrap_or_default();
            if candidacy.is_none() && self.member {
                // Out of the live set first, so that a peer reading both sees the VIPs'
                // preferred owner gone when it sees them released.
                self.release_member().await;
            }
            let gone: Vec<IpAddr> = self.held.keys().filter(|v| !offered.contains(v)).copied().collect();
            for vip in gone {
                self.release(vip).await;
            }
            if Instant::now() >= next_round {
                next_round = Instant::now() + self.config.retry_period;
                if candidacy.is_some() {
                    self.renew_member().await;
                }
                self.read_members().await;
                for vip in &offered {
                    self.try_acquire_or_renew(*vip).await;
                }
            }
            let deadline = self.config.renew_deadline.as_nanos() as u64;
            let now = monotonic_ns();
            self.held.retain(|vip, renewed| {
                let keep = now < *renewed + deadline;
                if !keep {
                    tracing::warn!(%vip, "L2: Lease not renewed within the renew deadline: no longer answering for it");
                }
                keep
            });
            self.write_ownership();
        }
        let held: Vec<IpAddr> = self.held.keys().copied().collect();
        for vip in held {
            self.release(vip).await;
        }
        self.write_ownership();
        if self.member {
            self.release_member().await;
        }
    }

    /// The VIPs the gateway offers now, `None` when it is no candidate at all: its process
    /// must hold its lock on `shm_dir` (alive: [`torii_table::shm::holds_lock`], the moment
    /// it dies) and its candidacy must be fresh (written within [`CANDIDACY_MAX_AGE`]: it
    /// is not hung) and healthy (its `/healthz` verdict).
    fn candidacy(&self) -> Option<BTreeSet<IpAddr>> {
        match torii_table::shm::holds_lock(&self.shm_dir, torii_table::shm::Role::Gateway) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!("L2: testing the gateway's lock: {e}");
                return None;
            }
        }
        match Candidacy::read(&self.shm_dir) {
            Ok(Some(c))
                if c.state == CandidateState::Healthy
                    && c.fresh(monotonic_ns(), CANDIDACY_MAX_AGE.as_nanos() as u64) =>
            {
                Some(c.vips)
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!("L2: reading the gateway's candidacy: {e}");
                None
            }
        }
    }

    fn write_ownership(&self) {
        let deadline = self.config.renew_deadline.as_nanos() as u64;
        let o = Ownership {
            written_ns: monotonic_ns(),
            mode: OwnershipMode::Lease,
            holder: self.config.identity.clone(),
            vips: self.held.iter().map(|(v, renewed)| (*v, renewed + deadline)).collect(),
        };
        if let Err(e) = o.write(&self.shm_dir) {
            tracing::warn!("L2: writing {}: {e}", self.shm_dir.display());
        }
    }

    fn spec(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.duration.as_secs() as i32),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn member_name(&self) -> String {
        format!("{MEMBER_PREFIX}{}", self.config.identity)
    }

    /// Creates or renews our member Lease (`torii-l2-member-<identity>`, labelled
    /// [`MEMBER_LABEL`]): this gateway is a live candidate.
    async fn renew_member(&mut self) {
        let name = self.member_name();
        let result = match self.api.get_opt(&name).await {
            Ok(None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some([(MEMBER_LABEL.to_owned(), "true".to_owned())].into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(None, 0)),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Ok(Some(mut lease)) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let ours = spec.holder_identity.as_deref() == Some(self.config.identity.as_str());
                let transitions = spec.lease_transitions.unwrap_or(0);
                lease.spec = Some(if ours {
                    self.spec(spec.acquire_time, transitions)
                } else {
                    self.spec(None, transitions.saturating_add(1))
                });
                self.api.replace(&name, &PostParams::default(), &lease).await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(_) if !self.member => {
                tracing::info!(lease = %name, "L2: member of the live set");
                self.member = true;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(lease = %name, "L2: renewing the member Lease: {e}"),
        }
    }

    /// Leaves the live set at once: our member Lease's holder emptied.
    async fn release_member(&mut self) {
        self.member = false;
        let name = self.member_name();
        match self.api.get_opt(&name).await {
            Ok(Some(mut lease)) => {
                let spec = lease.spec.clone().unwrap_or_default();
                lease.spec =
                    Some(LeaseSpec { holder_identity: Some(String::new()), lease_duration_seconds: Some(1), ..spec });
                match self.api.replace(&name, &PostParams::default(), &lease).await {
                    Ok(_) => tracing::info!(lease = %name, "L2: left the live set"),
                    Err(e) => tracing::warn!(lease = %name, "L2: releasing the member Lease: {e}"),
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(lease = %name, "L2: reading the member Lease: {e}"),
        }
    }

    /// Lists the member Leases: live are those with a holder whose record changed within
    /// their duration by our clock (ours while we hold it).
    async fn read_members(&mut self) {
        let list = match self.api.list(&ListParams::default().labels(&format!("{MEMBER_LABEL}=true"))).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("L2: listing the member Leases: {e}");
                return;
            }
        };
        let now = Instant::now();
        let mut live = BTreeMap::new();
        for lease in list.items {
            let (Some(name), Some(spec)) = (lease.metadata.name.as_deref(), lease.spec.as_ref()) else { continue };
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let changed = Observed::see(&mut self.observed, name, &rv, now);
            let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
            let ours = holder == self.config.identity;
            if holder.is_empty() || (ours && !self.member) || (!ours && changed + duration <= now) {
                continue;
            }
            let since = self.members.get(&holder).copied().unwrap_or(now);
            live.insert(holder, since);
        }
        if live.keys().ne(self.members.keys()) {
            tracing::info!(members = ?live.keys().collect::<Vec<_>>(), "L2: the live set changed");
        }
        self.members = live;
        let members = &self.members;
        self.handed_back.retain(|_, to| members.contains_key(to));
    }

    /// The member preferred for `vip`, leaving `except` (a holder whose Lease expired) out.
    fn preferred(&self, vip: IpAddr, except: &str) -> Option<&str> {
        preferred(vip, self.members.keys().map(String::as_str).filter(|m| *m != except))
    }

    /// Whether we may take `vip`'s free Lease now: at once when we are its preferred live
    /// member (or the live set is unknown), else once it has been free for a Lease duration
    /// (the preferred one did not take it).
    fn may_take(&mut self, vip: IpAddr, expired_holder: &str) -> bool {
        let preferred = self.preferred(vip, expired_holder).map(str::to_owned);
        if preferred.as_deref().is_none_or(|p| p == self.config.identity) {
            return true;
        }
        let since = *self.free_since.entry(vip).or_insert_with(Instant::now);
        since.elapsed() >= self.config.duration
    }

    /// Whether to hand `vip`, which we hold, back to its preferred member: one that has been
    /// live for a Lease duration (not one passing through), once while it stays live.
    fn hand_back_to(&self, vip: IpAddr) -> Option<String> {
        let p = self.preferred(vip, "")?;
        let settled = self.members.get(p).is_some_and(|since| since.elapsed() >= self.config.duration);
        (p != self.config.identity && settled && self.handed_back.get(&vip).is_none_or(|h| h != p))
            .then(|| p.to_owned())
    }

    /// client-go's `tryAcquireOrRenew` for one VIP's Lease, with the preference above.
    async fn try_acquire_or_renew(&mut self, vip: IpAddr) {
        let name = lease_name(vip);
        let sent_ns = monotonic_ns();
        let current = match self.api.get_opt(&name).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%vip, lease = %name, "L2: reading the Lease: {e}");
                return;
            }
        };
        let Some(mut lease) = current else {
            if !self.may_take(vip, "") {
                return;
            }
            let lease = Lease {
                metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
                spec: Some(self.spec(None, 0)),
            };
            match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => self.took(vip, &name, sent_ns, "created"),
                Err(e) => tracing::info!(%vip, lease = %name, "L2: creating the Lease failed (another gateway?): {e}"),
            }
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let now = Instant::now();
        let changed = Observed::see(&mut self.observed, &name, &rv, now);
        let ours = holder == self.config.identity;
        let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
        if !ours && !holder.is_empty() && changed + duration > now {
            self.free_since.remove(&vip);
            if self.held.remove(&vip).is_some() {
                tracing::warn!(%vip, holder = %holder, "L2: the Lease is another gateway's: no longer answering for it");
            }
            return;
        }
        if ours {
            if let Some(to) = self.hand_back_to(vip) {
                tracing::info!(%vip, lease = %name, to = %to, "L2: handing the VIP back to its preferred gateway");
                self.handed_back.insert(vip, to);
                self.release(vip).await;
                return;
            }
        } else if !self.may_take(vip, &holder) {
            return;
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if ours {
            self.spec(spec.acquire_time, transitions)
        } else {
            self.spec(None, transitions.saturating_add(1))
        });
        match self.api.replace(&name, &PostParams::default(), &lease).await {
            Ok(_) if ours => {
                self.held.insert(vip, sent_ns);
            }
            Ok(_) => self.took(vip, &name, sent_ns, if holder.is_empty() { "released" } else { "expired" }),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::info!(%vip, lease = %name, "L2: another gateway wrote the Lease first (409 Conflict)");
            }
            Err(e) => tracing::warn!(%vip, lease = %name, "L2: writing the Lease: {e}"),
        }
    }

    fn took(&mut self, vip: IpAddr, name: &str, sent_ns: u64, how: &str) {
        tracing::info!(%vip, lease = %name, identity = %self.config.identity, "L2: took the Lease ({how})");
        self.held.insert(vip, sent_ns);
        self.observed.remove(name);
        self.free_since.remove(&vip);
    }

    /// Gives a Lease up at once (client-go's `ReleaseOnCancel`), if it is still ours.
    async fn release(&mut self, vip: IpAddr) {
        self.held.remove(&vip);
        let name = lease_name(vip);
        let mut lease = match self.api.get_opt(&name).await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(%vip, lease = %name, "L2: reading the Lease to release it: {e}");
                return;
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..spec
        });
        // Written before the API call: the gateway falls silent first.
        self.write_ownership();
        match self.api.replace(&name, &PostParams::default(), &lease).await {
            Ok(_) => tracing::info!(%vip, lease = %name, "L2: released the Lease"),
            Err(e) => tracing::warn!(%vip, lease = %name, "L2: releasing the Lease: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawL2 {
        #[derive(Deserialize)]
        struct File {
            l2: RawL2,
        }
        toml::from_str::<File>(text).unwrap().l2
    }

    #[test]
    fn defaults_are_client_go_s() {
        let c = raw("[l2]\ndrain_s = 3\n").validate("gw-a").unwrap();
        assert_eq!(c.namespace, "torii");
        assert_eq!(c.identity, "gw-a");
        assert_eq!(
            (c.duration, c.renew_deadline, c.retry_period),
            (Duration::from_secs(15), Duration::from_secs(10), Duration::from_secs(2))
        );
    }

    #[test]
    fn errors_name_the_key() {
        for (text, want) in [
            ("[l2.lease]\nnamespace = \"Kube\"\n", "l2.lease.namespace"),
            ("[l2.lease]\nidentity = \"a b\"\n", "l2.lease.identity"),
            ("[l2.lease]\nidentity = \"Gateway_1\"\n", "l2.lease.identity"),
            ("[l2.lease]\nduration_s = 0\n", "l2.lease.duration_s"),
            ("[l2.lease]\nduration_s = 3\n", "l2.lease.renew_deadline_ms"),
            (
                "[l2.lease]\nduration_s = 3\nrenew_deadline_ms = 2000\nretry_period_ms = 1700\n",
                "l2.lease.retry_period_ms",
            ),
        ] {
            let e = raw(&format!("[l2]\n{text}")).validate("gw").unwrap_err().to_string();
            assert!(e.starts_with(want), "{text}: {e}");
        }
        assert!(toml::from_str::<toml::Table>("[l2.lease]\nbogus = 1\n")
            .map(|t| RawL2::deserialize(t["l2"].clone()).is_err())
            .unwrap());
    }

    #[test]
    fn vips_spread_over_members_by_rank() {
        let vips: Vec<IpAddr> = (1..=64).map(|i| IpAddr::from([198, 51, 100, i])).collect();
        let firsts = vips.iter().filter(|v| preferred(**v, ["gateway-1", "gateway-2"]) == Some("gateway-1")).count();
        assert!((16..=48).contains(&firsts), "gateway-1 preferred for {firsts} of 64");
        let v = vips[0];
        assert_eq!(preferred(v, ["b", "a"]), preferred(v, ["a", "b"]), "the order of the live set does not matter");
        assert_eq!(preferred(v, []), None);
        let three = preferred(v, ["a", "b", "c"]).unwrap();
        let rest: Vec<&str> = ["a", "b", "c"].into_iter().filter(|m| *m != three).collect();
        assert!(rank(three, v) < rank(rest[0], v) && rank(three, v) < rank(rest[1], v));
    }

    #[test]
    fn lease_names_are_dns_subdomains() {
        assert_eq!(lease_name("203.0.113.10".parse().unwrap()), "torii-l2-203.0.113.10");
        assert_eq!(lease_name("2001:db8::10".parse().unwrap()), "torii-l2-2001-db8--10");
    }
}
