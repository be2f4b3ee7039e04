//! The L2 thread (`torii-l2`): every [`PERIOD`] it writes the gateway's candidacy
//! (`shm_dir/l2-candidacy`: healthy, draining or unhealthy — the `/healthz` verdict, as BGP
//! mode's announcer uses it — and the VIPs with a usable endpoint of an `l2.announce` kind,
//! [`crate::announce::announced`]), reads torii-control's ownership (`shm_dir/l2-owners`),
//! and publishes to the workers the VIPs that are both offered and owned now, each with
//! its deadline, confirming the set every round ([`super::Owners::publish`]); worker 0
//! announces the ones that joined. It never touches a worker otherwise.
//!
//! On SIGTERM ([`Speaker`] as [`Withdraw`]) the candidacy says `draining` and the workers
//! stop answering at once; torii-control releases the Leases on its next look (100 ms),
//! and [`Withdraw::withdrawn`] turns true when the ownership file no longer gives this
//! gateway any VIP. A gateway killed outright writes nothing more: torii-control sees its
//! candidacy go stale and releases too; if both processes die, the peer waits out the
//! Lease.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{L2Config, Owners, ANNOUNCE_INTERVAL_NS, ANNOUNCE_NUM};
use crate::announce::{announced, Withdraw};
use crate::metrics::{health, Source};
use crate::table::l2::{monotonic_ns, Candidacy, CandidateState, Ownership, OwnershipMode};

/// How often the candidacy is written and the ownership read.
pub const PERIOD: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct Shared {
    draining: AtomicBool,
    withdrawn: AtomicBool,
}

/// The running L2 thread.
#[derive(Debug)]
pub struct Speaker {
    shared: Arc<Shared>,
    thread: JoinHandle<()>,
}

impl Speaker {
    /// Starts the thread; it runs until `stop` is set, then says `draining` one last time
    /// and ends.
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub fn start(
        config: L2Config,
        shm_dir: PathBuf,
        source: Arc<Source>,
        owners: Arc<Owners>,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("torii-l2".into())
            .spawn(move || run(&config, &shm_dir, &source, &owners, &s, &stop))?;
        Ok(Self { shared, thread })
    }

    /// Waits for the thread to end (after `stop` was set).
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

impl Withdraw for Speaker {
    fn drain(&self) {
        self.shared.draining.store(true, Ordering::Relaxed);
    }

    fn withdrawn(&self) -> bool {
        self.shared.withdrawn.load(Ordering::Relaxed)
    }
}

fn run(
    config: &L2Config,
    shm_dir: &std::path::Path,
    source: &Source,
    owners: &Owners,
    shared: &Shared,
    stop: &AtomicBool,
) {
    let mut said = None::<(CandidateState, BTreeSet<IpAddr>)>;
    // The VIPs answered for, with the time each joined (what is announced).
    let mut joined_at = BTreeMap::<IpAddr, u64>::new();
    let mut last_error = None::<(String, Instant)>;
    let mut warn = |text: String| {
        let repeat = last_error.as_ref().is_some_and(|(t, at)| *t == text && at.elapsed().as_secs() < 30);
        if !repeat {
            tracing::warn!("L2: {text}");
            last_error = Some((text, Instant::now()));
        }
    };
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let draining = shared.draining.load(Ordering::Relaxed) || stopping;
        let snapshot = source.snapshot();
        let (state, vips) = if draining {
            (CandidateState::Draining, BTreeSet::new())
        } else {
            match health(&snapshot) {
                Ok(_) => (CandidateState::Healthy, announced(&snapshot.table, &config.kinds, true)),
                Err(_) => (CandidateState::Unhealthy, BTreeSet::new()),
            }
        };
        let now = monotonic_ns();
        let candidacy = Candidacy { written_ns: now, state, vips };
        if let Err(e) = candidacy.write(shm_dir) {
            warn(format!("writing the candidacy into {}: {e}", shm_dir.display()));
        }
        if said.as_ref() != Some(&(state, candidacy.vips.clone())) {
            let list: Vec<String> = candidacy.vips.iter().map(ToString::to_string).collect();
            tracing::info!(state = ?state, vips = ?list, "L2: candidate for {} VIP(s)", list.len());
            said = Some((state, candidacy.vips.clone()));
        }
        let ownership = match Ownership::read(shm_dir) {
            Ok(o) => o,
            Err(e) => {
                warn(format!("reading torii-control's ownership: {e}"));
                None
            }
        };
        let answered: Vec<(IpAddr, u64)> = candidacy
            .vips
            .iter()
            .filter_map(|v| ownership.as_ref().filter(|o| o.owns(*v, now)).map(|o| (*v, o.until(*v))))
            .collect();
        joined_at.retain(|v, _| answered.binary_search_by_key(v, |(a, _)| *a).is_ok());
        let joined: Vec<IpAddr> = answered.iter().map(|(v, _)| *v).filter(|v| !joined_at.contains_key(v)).collect();
        let window = u64::from(ANNOUNCE_NUM) * ANNOUNCE_INTERVAL_NS;
        for v in &joined {
            joined_at.insert(*v, now);
        }
        let changed = answered.iter().map(|(v, _)| v).ne(owners.current().vips.iter().map(|(v, _)| v));
        if joined.is_empty() {
            owners.publish(answered.clone(), None);
        } else {
            let announce = joined_at.iter().filter(|(_, at)| now - **at < window).map(|(v, _)| *v).collect();
            owners.publish(answered.clone(), Some(announce));
        }
        if changed {
            let list: Vec<String> = answered.iter().map(|(v, _)| v.to_string()).collect();
            let joined: Vec<String> = joined.iter().map(ToString::to_string).collect();
            tracing::info!(vips = ?list, announcing = ?joined, "L2: answering ARP/NDP for {} VIP(s)", list.len());
        }
        if draining {
            let released = ownership
                .as_ref()
                .is_none_or(|o| o.mode == OwnershipMode::All || o.vips.keys().all(|v| !o.owns(*v, now)));
            shared.withdrawn.store(released, Ordering::Relaxed);
        }
        if stopping {
            return;
        }
        std::thread::sleep(PERIOD);
    }
}
