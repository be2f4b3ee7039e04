//! The NDR/PDR search, as pure bookkeeping: which offered rate to try next, given the
//! trials so far. RFC 2544 § 26.1 defines throughput as the highest rate at which no
//! frame is lost; FD.io CSIT calls it NDR and adds PDR, the highest rate at which at most
//! a small fraction (0.5 %) is lost. One search finds both at once, PDR first (the figure
//! a noisy host can reproduce; NDR takes the trials left):
//!
//! - the first trial offers the maximum rate: if nothing is lost there, the maximum (what
//!   the generator managed to offer) is the answer for both;
//! - otherwise the next trial offers the rate the device *carried* in the lowest failing
//!   trial (CSIT's first guess: a device forwards about what it can);
//! - while a criterion has failed at every rate tried, each trial steps down from its
//!   lowest failing rate by a relative width that starts at `precision` and doubles with
//!   every failure (at most half the rate): the external search of CSIT's MLRsearch
//!   (draft-ietf-bmwg-mlrsearch). A device that loses a little more than allowed just
//!   below its capacity is then found just below it, where halving the whole interval
//!   from zero would report half its capacity after one unlucky trial;
//! - once a rate has passed, each trial halves the interval between the highest passing
//!   and the lowest failing rate;
//! - a search ends when both intervals are narrower than `precision` × their upper bound,
//!   or after `max_trials`.
//!
//! Rates are the rates actually offered (the generator may fall short of what it was
//! asked), in frames per second.

/// How a search proceeds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SearchConfig {
    /// The first (highest) rate tried, frames/s.
    pub max_pps: f64,
    /// The lowest rate worth trying, frames/s; below it the search stops.
    pub min_pps: f64,
    /// Relative width of the final intervals (0.02: 2 %), and of the first step down from
    /// a failure while nothing has passed.
    pub precision: f64,
    /// Loss ratio PDR allows (0.005: 0.5 %).
    pub pdr_loss: f64,
    /// Most trials in one search.
    pub max_trials: usize,
}

/// One trial's outcome, as the search sees it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Point {
    /// Rate offered, frames/s.
    pub offered_pps: f64,
    /// Rate received back, frames/s.
    pub received_pps: f64,
    /// Rate the device carried, frames/s (one-armed: half the frames it forwarded in
    /// both directions, so requests whose replies it refused count).
    pub forwarded_pps: f64,
    /// Lost frames / offered frames.
    pub loss_ratio: f64,
}

/// A search in progress.
#[derive(Debug, Clone)]
pub struct Search {
    config: SearchConfig,
    points: Vec<Point>,
}

/// Bounds found for one criterion: the highest passing rate and the lowest failing rate
/// above it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Bounds {
    /// Highest rate that met the criterion (0: none did).
    pub lower_pps: f64,
    /// Lowest rate above `lower_pps` that did not (`None`: none did not).
    pub upper_pps: Option<f64>,
}

impl Search {
    /// A search with no trial yet.
    pub fn new(config: SearchConfig) -> Self {
        Self { config, points: Vec::new() }
    }

    /// Records a trial.
    pub fn record(&mut self, point: Point) {
        self.points.push(point);
    }

    /// The trials so far.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// Bounds for the criterion "loss ratio ≤ `allowed`".
    pub fn bounds(&self, allowed: f64) -> Bounds {
        let lower = self.points.iter().filter(|p| p.loss_ratio <= allowed).map(|p| p.offered_pps).fold(0.0, f64::max);
        let upper = self
            .points
            .iter()
            .filter(|p| p.loss_ratio > allowed && p.offered_pps > lower)
            .map(|p| p.offered_pps)
            .reduce(f64::min);
        Bounds { lower_pps: lower, upper_pps: upper }
    }

    /// NDR bounds (no loss).
    pub fn ndr(&self) -> Bounds {
        self.bounds(0.0)
    }

    /// PDR bounds (loss ≤ `pdr_loss`).
    pub fn pdr(&self) -> Bounds {
        self.bounds(self.config.pdr_loss)
    }

    /// The next rate to try, or `None` when the search is done.
    pub fn next_rate(&self) -> Option<f64> {
        if self.points.is_empty() {
            return Some(self.config.max_pps);
        }
        if self.points.len() >= self.config.max_trials {
            return None;
        }
        for allowed in [self.config.pdr_loss, 0.0] {
            let b = self.bounds(allowed);
            let Some(upper) = b.upper_pps else { continue };
            if upper - b.lower_pps <= self.config.precision * upper {
                continue;
            }
            if upper <= self.config.min_pps {
                continue; // nothing passes even at the lowest rate worth trying
            }
            let rate = if b.lower_pps > 0.0 {
                (b.lower_pps + upper) / 2.0
            } else if self.points.len() == 1 {
                // First guess after the maximum: what the device carried there.
                let carried = self.points[0].forwarded_pps * (1.0 - allowed) * 0.99;
                if carried > 0.0 && carried < upper {
                    carried
                } else {
                    upper / 2.0
                }
            } else {
                // Nothing has passed yet: step down from the lowest failure, wider after
                // each one (the first trial, at the maximum, not counted).
                let failures = self.points[1..].iter().filter(|p| p.loss_ratio > allowed).count().max(1);
                let width = (self.config.precision * 2f64.powi(failures as i32 - 1)).min(0.5);
                upper * (1.0 - width)
            };
            return Some(rate.max(self.config.min_pps));
        }
        None
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SearchConfig {
        SearchConfig { max_pps: 10e6, min_pps: 10e3, precision: 0.02, pdr_loss: 0.005, max_trials: 30 }
    }

    /// A device that forwards up to `capacity` frames/s and drops the rest, with the
    /// given extra loss ratio below it.
    fn run(capacity: f64, floor_loss: f64) -> Search {
        let mut s = Search::new(config());
        while let Some(rate) = s.next_rate() {
            let received = rate.min(capacity) * (1.0 - floor_loss);
            s.record(Point {
                offered_pps: rate,
                received_pps: received,
                forwarded_pps: received,
                loss_ratio: 1.0 - received / rate,
            });
        }
        s
    }

    #[test]
    fn finds_a_cliff_within_precision() {
        let s = run(3e6, 0.0);
        let (ndr, pdr) = (s.ndr(), s.pdr());
        assert!(ndr.lower_pps <= 3e6 && ndr.lower_pps >= 3e6 * 0.97, "{ndr:?}");
        assert!(pdr.lower_pps >= ndr.lower_pps && pdr.lower_pps <= 3e6 / 0.995, "{pdr:?}");
        assert!(s.points().len() < 15, "{} trials", s.points().len());
        assert_eq!(s.points()[1].offered_pps, 3e6 * 0.995 * 0.99, "second trial at the received rate");
    }

    /// Loss rises from none at 90 % of `capacity` to 2 % at it (a device that falls
    /// behind now and then near its limit), everything above `capacity` lost.
    fn knee(rate: f64, capacity: f64) -> Point {
        let received = rate.min(capacity) * (1.0 - 0.02 * ((rate.min(capacity) / capacity - 0.9) / 0.1).max(0.0));
        Point { offered_pps: rate, received_pps: received, forwarded_pps: received, loss_ratio: 1.0 - received / rate }
    }

    #[test]
    fn a_soft_knee_is_found_below_capacity_not_at_half_of_it() {
        // PDR (0.5 % loss) is at 92.5 % of capacity; four trials, 5 % precision.
        let mut c = config();
        (c.max_trials, c.precision) = (4, 0.05);
        let mut s = Search::new(c);
        while let Some(rate) = s.next_rate() {
            s.record(knee(rate, 3e6));
        }
        let rates: Vec<f64> = s.points().iter().map(|p| p.offered_pps).collect();
        assert_eq!(rates.len(), 4);
        assert!(rates[2] < rates[1] && rates[2] > rates[1] * 0.9, "one step of 5 % below the guess: {rates:?}");
        let pdr = s.pdr().lower_pps;
        assert!(pdr > 3e6 * 0.85 && pdr <= 3e6 * 0.925, "{pdr} ({rates:?})");
    }

    #[test]
    fn steps_double_until_a_rate_passes() {
        // Loses 1 % at every rate above 1 M/s: 10 M, the guess, then 5, 10, 20, 40 % below.
        let mut s = Search::new(config());
        let mut rates = Vec::new();
        while let Some(rate) = s.next_rate() {
            rates.push(rate);
            let loss = if rate > 1e6 { 0.01 } else { 0.0 };
            let received = rate.min(8e6) * (1.0 - loss);
            s.record(Point {
                offered_pps: rate,
                received_pps: received,
                forwarded_pps: received,
                loss_ratio: 1.0 - received / rate,
            });
        }
        let guess = 8e6 * 0.99 * 0.995 * 0.99; // carried at the maximum: 8 M less 1 %
        for (i, width) in [0.02, 0.04, 0.08, 0.16].into_iter().enumerate() {
            let expected = rates[i + 1] * (1.0 - width);
            assert!((rates[i + 2] - expected).abs() < 1.0, "trial {}: {rates:?}", i + 2);
        }
        assert_eq!(rates[1], guess);
        let pdr = s.pdr();
        assert!(pdr.lower_pps <= 1e6 && pdr.lower_pps >= 0.98 * pdr.upper_pps.unwrap(), "{pdr:?} {rates:?}");
    }

    #[test]
    fn a_lossless_maximum_ends_the_search() {
        let s = run(20e6, 0.0);
        assert_eq!(s.points().len(), 1);
        assert_eq!(s.ndr(), Bounds { lower_pps: 10e6, upper_pps: None });
    }

    #[test]
    fn small_steady_loss_separates_ndr_from_pdr() {
        let s = run(5e6, 0.001); // loses 0.1 % at every rate: no NDR, PDR near capacity
        assert_eq!(s.ndr().lower_pps, 0.0);
        assert!(s.pdr().lower_pps > 4.8e6, "{:?}", s.pdr());
    }

    #[test]
    fn stops_at_the_trial_limit() {
        let mut c = config();
        c.max_trials = 3;
        let mut s = Search::new(c);
        while let Some(rate) = s.next_rate() {
            s.record(Point {
                offered_pps: rate,
                received_pps: rate / 3.0,
                forwarded_pps: rate / 3.0,
                loss_ratio: 2.0 / 3.0,
            });
        }
        assert_eq!(s.points().len(), 3);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
