//! How long a worker's busy poll passes take: one pass of [`crate::worker::Worker::run`]
//! (receive a vector from every port, process and transmit it, then the bounded
//! housekeeping) that carried at least one frame, timed from its start to the next pass's
//! start. Idle passes are not recorded.
//!
//! What it is for: a worker that polls without pause still loses frames when its pass
//! takes longer than its receive ring holds (a 4096-descriptor ring is 1.3 ms of 3.2 M
//! frames/s). The histogram tells a pipeline that got slower (every pass longer) from a
//! CPU taken away now and then (a few passes of milliseconds: another task on the
//! worker's core, or the hypervisor descheduling the vCPU), which the device's
//! `imissed` alone cannot. VPP's `show runtime` (vectors per call, clocks per vector) and
//! DPDK's lcore busy-cycle telemetry answer the same question.
//!
//! Recorded in an HDR histogram (`hdrhistogram`, 2 significant digits, 1 ns to 60 s; a
//! longer pass counts as 60 s). A pass during which the process was stopped (SIGSTOP,
//! as torii-bench freezes the device it is not measuring) counts the stopped time. The
//! worker copies the histogram into its report about once a second; the metrics endpoint
//! renders it as the Prometheus histogram `torii_gateway_worker_poll_seconds` with the
//! buckets [`BUCKETS_NS`].

use hdrhistogram::Histogram;

/// Upper bounds of the exported buckets, ns: 1 µs × 4^k, up to 16.4 ms (the `+Inf` bucket
/// holds the rest).
pub const BUCKETS_NS: [u64; 8] = [1_000, 4_000, 16_000, 64_000, 256_000, 1_024_000, 4_096_000, 16_384_000];

/// Longest pass the histogram tells apart, ns.
const HIGHEST_NS: u64 = 60_000_000_000;

/// Durations of one worker's busy poll passes (see the module documentation).
#[derive(Clone, Debug)]
pub struct PollTimes {
    hist: Histogram<u64>,
    /// Their exact sum, ns.
    busy_ns: u64,
}

impl Default for PollTimes {
    fn default() -> Self {
        Self::new()
    }
}

impl PollTimes {
    /// No pass recorded. Allocates the histogram's counts (about 30 KiB), once.
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(1, HIGHEST_NS, 2).expect("constant bounds are valid");
        Self { hist, busy_ns: 0 }
    }

    /// Records a busy pass of `ns` nanoseconds. O(1), no allocation.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.busy_ns = self.busy_ns.wrapping_add(ns);
        self.hist.saturating_record(ns.max(1));
    }

    /// Makes `self` a copy of `other` without allocating.
    pub fn copy_from(&mut self, other: &Self) {
        self.hist.reset();
        // Both have the same bounds, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.busy_ns = other.busy_ns;
    }

    /// Busy passes recorded.
    pub fn passes(&self) -> u64 {
        self.hist.len()
    }

    /// Time spent in them, ns.
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    /// Passes of at most `ns` nanoseconds (within the histogram's 2 significant digits:
    /// a pass in the same 1 % bucket as `ns` counts).
    pub fn at_most(&self, ns: u64) -> u64 {
        self.hist.count_between(0, ns)
    }

    /// The duration (ns) that a fraction `q` (0–1) of the passes took at most; 0 when none
    /// was recorded.
    pub fn quantile(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q)
    }

    /// The longest pass, ns (to 2 significant digits); 0 when none was recorded.
    pub fn max(&self) -> u64 {
        self.hist.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_sum_exact() {
        let mut t = PollTimes::new();
        for ns in [300, 900, 2_500, 2_500, 70_000, 3_000_000, 90_000_000_000] {
            t.record(ns);
        }
        assert_eq!(t.passes(), 7);
        assert_eq!(t.busy_ns(), 300 + 900 + 5_000 + 70_000 + 3_000_000 + 90_000_000_000);
        let counts: Vec<u64> = BUCKETS_NS.iter().map(|&b| t.at_most(b)).collect();
        assert_eq!(counts, [2, 4, 4, 4, 5, 5, 6, 6]);
        assert!(t.max() >= HIGHEST_NS * 99 / 100, "a 90 s pass counts as the highest: {}", t.max());
        let p50 = t.quantile(0.5);
        assert!((2_470..=2_530).contains(&p50), "{p50}");

        let mut copy = PollTimes::new();
        copy.record(5);
        copy.copy_from(&t);
        assert_eq!((copy.passes(), copy.busy_ns(), copy.at_most(1_000)), (7, t.busy_ns(), 2));
    }

    #[test]
    fn empty() {
        let t = PollTimes::default();
        assert_eq!((t.passes(), t.busy_ns(), t.quantile(0.99), t.max(), t.at_most(1_000)), (0, 0, 0, 0, 0));
    }
}
