//! `torii-control run`: take changes from a source, compile them, publish the table,
//! and measure how long it took the gateway to adopt it.
//!
//! One loop serves both sources ([`Source`]), with one incremental
//! [`Compiler`]: the Kubernetes API source hands over batches of
//! changed objects, fed to [`Compiler::apply`](crate::compile::Compiler::apply) (work in
//! proportion to the change: one changed EndpointSlice recompiles one Service); the
//! manifests directory hands over whole snapshots, fed to
//! [`Compiler::update`](crate::compile::Compiler::update) (which validates and compiles
//! only the objects that changed, but looks at every object). When the table differs
//! from the last one published, it is published ([`Publisher`]). While a batch is
//! compiled and published the source keeps collecting, so bursts are coalesced into the
//! next batch (and the API source waits `--min-interval-ms` between batches). A failed
//! publication is logged and retried on the next batch and with backoff ([`RETRY_MIN`]
//! doubling to [`RETRY_MAX`]); the gateway keeps the last table it adopted meanwhile.
//! Snapshot files every gateway worker has moved past are released every [`GC_INTERVAL`]
//! (and, mostly, reused by the publisher).
//!
//! For every publication it logs, once the last gateway worker acknowledged the new
//! generation in the shared state region (polled every [`ACK_POLL`], then every
//! [`ACK_POLL_COARSE`]), one line:
//!
//! ```text
//! INFO torii_control::daemon: table adopted by every gateway worker generation=7 workers=2 compile_ms=0.412
//!   publish_ms=0.187 ack_ms=1.093 network_programming_latency_ms=63.8 changes=1
//! ```
//!
//! - `compile_ms`: validating and compiling the changes, and converting them to the table;
//! - `publish_ms`: laying out, writing and publishing the snapshot file;
//! - `ack_ms`: from the publication to the last worker's acknowledgement;
//! - `network_programming_latency_ms` (Kubernetes API source only, when the batch
//!   changed an object carrying `endpoints.kubernetes.io/last-change-trigger-time`):
//!   from the newest such trigger time to the last worker's acknowledgement, wall clock
//!   (the annotation has the API server's clock and, in v1.28, whole seconds);
//!   `oldest_change_latency_ms` is the same from the oldest, when the batch had several.
//!
//! Without a gateway (no worker registered) the line says `gateway="none"` and has no
//! acknowledgement times; a generation not acknowledged within [`ACK_TIMEOUT`] is
//! logged as a warning.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::compile::{CompileOptions, Compiled, Compiler};
use crate::publish::Publisher;
use crate::source::files::DirWatch;
use crate::source::kube::{KubeChanges, KubeWatch};
use crate::source::{SourceError, TriggerTimes, Update};

/// How often snapshots that every gateway worker has moved past are released.
pub const GC_INTERVAL: Duration = Duration::from_secs(5);

/// Shortest wait before retrying a failed publication.
pub const RETRY_MIN: Duration = Duration::from_secs(1);

/// Longest wait before retrying a failed publication.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// How often the gateway workers' acknowledgements are checked while a publication
/// waits for them.
pub const ACK_POLL: Duration = Duration::from_millis(1);

/// How long [`ACK_POLL`] applies after a publication; then [`ACK_POLL_COARSE`].
pub const ACK_POLL_FINE_FOR: Duration = Duration::from_millis(100);

/// How often acknowledgements are checked once [`ACK_POLL_FINE_FOR`] has passed.
pub const ACK_POLL_COARSE: Duration = Duration::from_millis(10);

/// How long a publication waits for every worker's acknowledgement before a warning.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// Changed objects in one batch from which the daemon hands the heap it freed back to the
/// kernel once the batch is published ([`release_freed_heap`]): an initial list or a
/// relist, not the everyday change.
pub const TRIM_AFTER_OBJECTS: usize = 1000;

/// Returns the heap pages that are free back to the kernel (glibc's `malloc_trim(0)`,
/// which since glibc 2.8 releases free pages inside every arena, not only at the top).
/// An initial list of 10 000 Services passes through the heap several times over (the
/// list body, kube-rs's typed objects, the source's batch, the compiler's inputs); glibc
/// keeps what is freed for reuse, so without this the daemon's resident memory stays at
/// the peak of the initial sync. A no-op on other C libraries. Costs about a
/// millisecond per 100 MB of heap, so it runs only after large batches.
pub fn release_freed_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and trims glibc's own arenas, under their locks; it
    // takes no pointer and invalidates no allocation.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Blocks of at least this size get their own mapping, returned to the kernel when freed
/// ([`keep_large_blocks_apart`]); glibc's initial (and minimum) threshold.
pub const MMAP_THRESHOLD: usize = 128 << 10;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] (`mallopt(M_MMAP_THRESHOLD)`).
/// By default glibc raises the threshold to the size of every mapped block freed (up to
/// 32 MiB), so after the initial list's first large buffers (response bodies, the list's
/// vectors, a 14.8 MB snapshot at 10 000 Services) are freed, the later ones come from the
/// heap, between long-lived objects, and the pages they leave free stay resident: at
/// 10 000 Services the daemon held 7 MB more (BENCHMARKS.md, daemon memory). A no-op on
/// other C libraries.
pub fn keep_large_blocks_apart() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of glibc's allocator, under its lock.
    #[allow(unsafe_code)]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

/// Where snapshots come from.
#[derive(Debug)]
pub enum Source {
    /// A manifests directory, watched.
    Files(DirWatch),
    /// The Kubernetes API, watched.
    Kube(Box<KubeWatch>),
}

/// What a source hands over.
#[derive(Debug)]
pub enum Input {
    /// A whole snapshot (the manifests directory).
    Snapshot(Update),
    /// The objects that changed (the Kubernetes API).
    Changes(KubeChanges),
}

impl Input {
    /// Feeds it to `compiler`; returns how many objects it carried.
    pub fn compile(&self, compiler: &mut Compiler) -> usize {
        match self {
            Self::Snapshot(u) => {
                compiler.update(&u.loaded);
                u.loaded.objects.len()
            }
            Self::Changes(c) => {
                if let Some(errors) = &c.errors {
                    compiler.set_source_errors(errors.iter().map(ToString::to_string).collect());
                }
                compiler.apply(c.changes());
                c.objects.len()
            }
        }
    }

    /// When its changes were made.
    pub fn triggers(&self) -> Option<TriggerTimes> {
        match self {
            Self::Snapshot(u) => u.triggers,
            Self::Changes(c) => c.triggers,
        }
    }
}

impl Source {
    /// The next snapshot or batch of changes; `None` when the source stopped.
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        match self {
            Self::Files(w) => {
                w.next().await.map(|r| r.map(|loaded| Input::Snapshot(Update { loaded, triggers: None })))
            }
            Self::Kube(w) => Some(Ok(Input::Changes(w.next().await))),
        }
    }

    /// The batch last handed over changed nothing to publish
    /// ([`KubeWatch::unchanged`]: it does not count toward the API source's rate limit).
    fn unchanged(&mut self) {
        if let Self::Kube(w) = self {
            w.unchanged();
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Self::Files(_) => "manifests",
            Self::Kube(_) => "API objects",
        }
    }
}

/// Why `run` stopped, other than by a signal.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The source ended (it never does unless something is badly wrong).
    #[error("the {0} source stopped unexpectedly")]
    SourceStopped(&'static str),
}

/// A table waiting to be published (the compiler's current one).
struct Pending {
    version: u64,
    frontends: usize,
    backend_sets: usize,
    compile: Duration,
    triggers: Option<TriggerTimes>,
}

/// A published generation waiting for every gateway worker's acknowledgement.
struct Awaiting {
    generation: u64,
    compile: Duration,
    publish: Duration,
    published_at: Instant,
    triggers: Option<TriggerTimes>,
}

/// Milliseconds with microsecond resolution, for log fields.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// `to - from` in milliseconds, negative when `from` is later (clock skew).
fn signed_ms(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    }
}

/// The publication side of the loop: the table waiting to be published, the last one
/// that was, the retry schedule, and the generations awaiting acknowledgement.
struct Publishing {
    shm_dir: PathBuf,
    publisher: Option<Publisher>,
    pending: Option<Pending>,
    /// [`Compiler::table_version`] of the table last published.
    published: Option<u64>,
    retry_delay: Duration,
    retry_at: Option<Instant>,
    awaiting: Vec<Awaiting>,
    /// When the last "not acknowledged" warning was logged (at most one per
    /// [`ACK_TIMEOUT`], however many generations a stuck gateway leaves waiting).
    last_ack_warning: Option<Instant>,
}

impl Publishing {
    fn new(shm_dir: PathBuf) -> Self {
        Self {
            shm_dir,
            publisher: None,
            pending: None,
            published: None,
            retry_delay: RETRY_MIN,
            retry_at: None,
            awaiting: Vec::new(),
            last_ack_warning: None,
        }
    }

    /// Publishes `compiler`'s table spec (the table of `compiled`, [`Compiler::table_version`] `version`)
    /// unless it is the table already published; `compile` is how long compiling took,
    /// `triggers` when the changes were made.
    fn offer(
        &mut self,
        compiled: &Compiled,
        compiler: &Compiler,
        version: u64,
        compile: Duration,
        triggers: Option<TriggerTimes>,
    ) {
        if self.published == Some(version) {
            tracing::debug!("table unchanged; not republished");
            self.pending = None;
            self.retry_at = None;
            return;
        }
        // Changes of a snapshot that never got published are part of this one.
        let triggers = match (self.pending.take().and_then(|p| p.triggers), triggers) {
            (Some(a), Some(b)) => Some(a.merge(b)),
            (a, b) => a.or(b),
        };
        self.pending = Some(Pending {
            version,
            frontends: compiled.frontends.len(),
            backend_sets: compiler.table_spec().services.len(),
            compile,
            triggers,
        });
        self.retry_delay = RETRY_MIN;
        self.try_publish(compiler);
    }

    /// Publishes the pending table, `compiler`'s.
    fn try_publish(&mut self, compiler: &Compiler) {
        if self.pending.is_none() {
            self.retry_at = None;
            return;
        }
        let start = Instant::now();
        let result = match &mut self.publisher {
            Some(p) => p.publish_from(compiler).map_err(|e| format!("publishing the table failed: {e}")),
            None => match Publisher::open(&self.shm_dir) {
                Ok(mut p) => {
                    let r = p.publish_from(compiler).map_err(|e| format!("publishing the table failed: {e}"));
                    self.publisher = Some(p);
                    r
                }
                Err(e) => Err(format!("cannot open the shared-memory directory {}: {e}", self.shm_dir.display())),
            },
        };
        let publish = start.elapsed();
        match result {
            Ok(generation) => {
                let Some(p) = self.pending.take() else { return };
                tracing::info!(generation, frontends = p.frontends, backend_sets = p.backend_sets, "published table");
                self.awaiting.push(Awaiting {
                    generation,
                    compile: p.compile,
                    publish,
                    published_at: Instant::now(),
                    triggers: p.triggers,
                });
                self.published = Some(p.version);
                self.retry_at = None;
                self.retry_delay = RETRY_MIN;
                self.poll_acks();
            }
            Err(message) => {
                tracing::error!(
                    retry_in_s = self.retry_delay.as_secs(),
                    "{message}; the gateway keeps the last table it adopted; retrying on the next change or after the delay"
                );
                self.retry_at = Some(Instant::now() + self.retry_delay);
                self.retry_delay = (self.retry_delay * 2).min(RETRY_MAX);
            }
        }
    }

    /// Logs the publications every gateway worker has acknowledged (or that no gateway
    /// will, or that timed out).
    fn poll_acks(&mut self) {
        let Some(p) = &self.publisher else {
            self.awaiting.clear();
            return;
        };
        let region = p.region();
        let min_acked = region.min_acked();
        let workers = region.workers();
        let now = Instant::now();
        let wall = SystemTime::now();
        let last_warning = &mut self.last_ack_warning;
        self.awaiting.retain(|a| {
            match min_acked {
                None => {
                    tracing::info!(
                        generation = a.generation,
                        gateway = "none",
                        compile_ms = ms(a.compile),
                        publish_ms = ms(a.publish),
                        "table published; no gateway is registered, so no acknowledgement or network-programming latency"
                    );
                }
                Some(m) if m >= a.generation => log_adopted(a, workers, now - a.published_at, wall),
                Some(m) => {
                    if now < a.published_at + ACK_TIMEOUT {
                        return true;
                    }
                    if last_warning.is_some_and(|w| now < w + ACK_TIMEOUT) {
                        return false;
                    }
                    *last_warning = Some(now);
                    let rejected = region.rejected_generation();
                    tracing::warn!(
                        generation = a.generation,
                        oldest_acknowledged = m,
                        rejected_generation = rejected,
                        "not every gateway worker acknowledged the table within {} s{} (said at most once per {0} s)",
                        ACK_TIMEOUT.as_secs(),
                        if rejected >= a.generation { "; the gateway rejected it (see its log)" } else { "" }
                    );
                }
            }
            false
        });
    }
}

fn log_adopted(a: &Awaiting, workers: usize, ack: Duration, wall: SystemTime) {
    let (compile_ms, publish_ms, ack_ms) = (ms(a.compile), ms(a.publish), ms(ack));
    let generation = a.generation;
    match a.triggers {
        Some(t) if t.count > 1 => tracing::info!(
            generation,
            workers,
            compile_ms,
            publish_ms,
            ack_ms,
            network_programming_latency_ms = signed_ms(t.newest, wall),
            oldest_change_latency_ms = signed_ms(t.oldest, wall),
            changes = t.count,
            "table adopted by every gateway worker"
        ),
        Some(t) => tracing::info!(
            generation,
            workers,
            compile_ms,
            publish_ms,
            ack_ms,
            network_programming_latency_ms = signed_ms(t.newest, wall),
            changes = t.count,
            "table adopted by every gateway worker"
        ),
        None => {
            tracing::info!(generation, workers, compile_ms, publish_ms, ack_ms, "table adopted by every gateway worker")
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs the loop until `shutdown` completes: compile every snapshot of `source` for
/// `options`, publish to `shm_dir`, measure (see the module documentation).
///
/// # Errors
/// [`DaemonError::SourceStopped`] when the source ends.
pub async fn serve(
    mut source: Source,
    options: &CompileOptions,
    shm_dir: PathBuf,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    keep_large_blocks_apart();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut publishing = Publishing::new(shm_dir);
    // The API source repeats its errors and warnings in every batch: log each once
    // while it lasts (a reload of the manifests directory logs them all again).
    let dedupe = matches!(source, Source::Kube(_));
    let mut logged: BTreeSet<String> = BTreeSet::new();
    let mut warned: BTreeSet<String> = BTreeSet::new();
    // Incremental: unchanged objects are not validated again, unchanged Services not
    // compiled again (the result equals `compile_loaded` of the same objects).
    let mut compiler = Compiler::new(options.clone());
    let mut gc = tokio::time::interval(GC_INTERVAL);
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let retry_at = publishing.retry_at;
        // Acknowledgements usually come within milliseconds: poll finely at first.
        let ack_poll = match publishing.awaiting.first() {
            Some(a) if a.published_at.elapsed() < ACK_POLL_FINE_FOR => Some(ACK_POLL),
            Some(_) => Some(ACK_POLL_COARSE),
            None => None,
        };
        tokio::select! {
            next = source.next() => match next {
                None => return Err(DaemonError::SourceStopped(source.what())),
                Some(Err(e)) => tracing::error!("{e}; the last table stays published"),
                Some(Ok(input)) => {
                    let started = Instant::now();
                    let objects = input.compile(&mut compiler);
                    let compiled = compiler.compiled();
                    let compile = started.elapsed();
                    if !dedupe || compiled.errors.len() != logged.len()
                        || compiled.errors.iter().any(|e| !logged.contains(e))
                    {
                        for e in &compiled.errors {
                            if !dedupe || !logged.contains(e) {
                                tracing::error!("{e}");
                            }
                        }
                        logged = compiled.errors.iter().cloned().collect();
                    }
                    for w in &compiled.warnings {
                        if !dedupe || !warned.contains(w) {
                            tracing::warn!("{w}");
                        }
                    }
                    if dedupe && (compiled.warnings.len() != warned.len()
                        || compiled.warnings.iter().any(|w| !warned.contains(w)))
                    {
                        warned = compiled.warnings.iter().cloned().collect();
                    }
                    tracing::info!(
                        objects,
                        skipped = compiled.errors.len(),
                        frontends = compiled.frontends.len(),
                        // Not `Compiled::backend_count`: it visits every backend.
                        backend_sets = compiler.table_spec().services.len(),
                        "compiled {}",
                        source.what()
                    );
                    let version = compiler.table_version();
                    if publishing.published == Some(version) {
                        source.unchanged();
                    }
                    publishing.offer(compiled, &compiler, version, compile, input.triggers());
                    // The batch's objects are freed first, so that their pages go too.
                    drop(input);
                    if objects >= TRIM_AFTER_OBJECTS {
                        release_freed_heap();
                    }
                }
            },
            () = sleep_until_opt(retry_at), if retry_at.is_some() => publishing.try_publish(&compiler),
            () = tokio::time::sleep(ack_poll.unwrap_or(ACK_POLL)), if ack_poll.is_some() => publishing.poll_acks(),
            _ = gc.tick() => {
                if let Some(p) = &publishing.publisher {
                    let removed = p.collect_garbage();
                    if removed > 0 {
                        tracing::debug!(removed, "released table snapshots every gateway worker has moved past");
                    }
                }
            }
            () = &mut shutdown => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millisecond_fields() {
        assert!((ms(Duration::from_micros(1234)) - 1.234).abs() < 1e-9);
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        assert!((signed_ms(t, t + Duration::from_millis(5)) - 5.0).abs() < 1e-9);
        assert!((signed_ms(t + Duration::from_millis(5), t) + 5.0).abs() < 1e-9);
    }
}
