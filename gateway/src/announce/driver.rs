//! The announcer thread (`torii-announce`): every [`PERIOD`] it computes what to announce
//! from the gateway's adopted table and health ([`super::announced`] of a
//! [`crate::metrics::Source`] snapshot) and, when that changed or the last push failed,
//! rewrites the BIRD configuration file and tells BIRD to `configure`
//! ([`super::bird`]). Failures are logged and retried every period; nothing here touches a
//! worker. [`Announcer::drain`] withdraws every route for good (graceful drain), and the
//! thread withdraws them on its way out too, so a gateway that stops leaves nothing
//! announced behind it — as long as it stops: a gateway killed with SIGKILL cannot, which
//! is what `torii-gateway --withdraw` (a systemd unit's `ExecStopPost=`) is for.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{announced, bird, BgpConfig};
use crate::metrics::{health, Source};
use crate::table::shm::write_atomically;

/// How often the announcer looks at the table and health.
pub const PERIOD: Duration = Duration::from_millis(200);

/// How long BIRD may take to answer one control command.
const BIRD_TIMEOUT: Duration = Duration::from_secs(5);

/// What the thread and its owner share.
#[derive(Debug, Default)]
struct Shared {
    /// Set by [`Announcer::drain`]: announce nothing from now on.
    draining: AtomicBool,
    /// Whether BIRD took a configuration with no route after `draining` was set.
    withdrawn: AtomicBool,
}

/// The running announcer.
#[derive(Debug)]
pub struct Announcer {
    shared: Arc<Shared>,
    thread: JoinHandle<()>,
}

/// Renders `vips` for `config`, writes the file and has BIRD take it.
///
/// # Errors
/// What went wrong, naming the file or BIRD's answer.
pub fn push(config: &BgpConfig, vips: &BTreeSet<IpAddr>, state: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    write_atomically(&config.bird_config, &bird::render(config, vips, state))
        .with_context(|| format!("bgp.bird_config: writing {}", config.bird_config.display()))?;
    Ok(bird::configure(&config.bird_socket, BIRD_TIMEOUT)?)
}

impl Announcer {
    /// Starts the thread. It announces what `source` says until `stop` is set, then
    /// withdraws everything (one last push) and ends.
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub fn start(config: BgpConfig, source: Arc<Source>, stop: Arc<AtomicBool>) -> io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("torii-announce".into())
            .spawn(move || run(&config, &source, &s, &stop))?;
        Ok(Self { shared, thread })
    }

    /// Withdraws every route without a running gateway: writes the file without routes and
    /// has BIRD take it (`torii-gateway --withdraw`, for a service manager's
    /// `ExecStopPost=` after a gateway died).
    ///
    /// # Errors
    /// As `push`: the file cannot be written, or BIRD does not take it.
    pub fn withdraw(config: &BgpConfig) -> anyhow::Result<String> {
        push(config, &BTreeSet::new(), "withdrawn by torii-gateway --withdraw (the gateway is not running)")
    }

    /// Withdraws every route from now on (graceful drain); the thread pushes at once.
    pub fn drain(&self) {
        self.shared.draining.store(true, Ordering::Relaxed);
    }

    /// Whether BIRD has taken the configuration without routes since [`Announcer::drain`].
    pub fn withdrawn(&self) -> bool {
        self.shared.withdrawn.load(Ordering::Relaxed)
    }

    /// Waits for the thread to end (after `stop` was set; it withdraws first).
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

fn run(config: &BgpConfig, source: &Source, shared: &Shared, stop: &AtomicBool) {
    let mut pushed: Option<BTreeSet<IpAddr>> = None;
    let mut last_error = None::<(String, Instant)>;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let draining = shared.draining.load(Ordering::Relaxed);
        let snapshot = source.snapshot();
        let verdict = health(&snapshot);
        let (vips, state) = if stopping {
            (BTreeSet::new(), "the gateway is stopping".to_string())
        } else if draining {
            (BTreeSet::new(), "the gateway is draining".to_string())
        } else {
            match &verdict {
                Ok(_) => (
                    announced(&snapshot.table, &config.kinds, true),
                    format!("healthy, table generation {}", snapshot.table.generation()),
                ),
                Err(why) => (BTreeSet::new(), format!("unhealthy: {}", why.trim())),
            }
        };
        if pushed.as_ref() != Some(&vips) {
            match push(config, &vips, &state) {
                Ok(answer) => {
                    let list: Vec<String> = vips.iter().map(ToString::to_string).collect();
                    tracing::info!(vips = ?list, bird = %answer, "announcing {} VIP(s): {state}", vips.len());
                    pushed = Some(vips);
                    last_error = None;
                }
                Err(e) => {
                    // Logged when it changes, and every 30 s while it lasts.
                    let text = format!("{e:#}");
                    let repeat = last_error.as_ref().is_some_and(|(t, at)| *t == text && at.elapsed().as_secs() < 30);
                    if !repeat {
                        tracing::warn!("announcing {} VIP(s) ({state}) failed, retrying: {text}", vips.len());
                        last_error = Some((text, Instant::now()));
                    }
                }
            }
        }
        if (draining || stopping) && pushed.as_ref().is_some_and(BTreeSet::is_empty) {
            shared.withdrawn.store(true, Ordering::Relaxed);
        }
        if stopping {
            return;
        }
        std::thread::sleep(PERIOD);
    }
}
