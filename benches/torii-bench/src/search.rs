//! The NDR/PDR search, as pure bookkeeping: which offered rate to try next, given the
//! trials so far. RFC 2544 § 26.1 defines throughput as the highest rate at which no
//! frame is lost; FD.io CSIT calls it NDR and adds PDR, the highest rate at which at most
//! a small fraction (0.5 %) is lost. One search finds both at once:
//!
//! - the first trial offers the maximum rate: if nothing is lost there, the maximum (what
//!   the generator managed to offer) is the answer for both;
//! - otherwise the next trial offers the rate the device *carried* in the lowest failing
//!   trial (CSIT's first guess: a device forwards about what it can), then each trial
//!   halves the interval between the highest passing and the lowest failing rate, for NDR
//!   first, then PDR;
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
    /// Relative width of the final intervals (0.02: 2 %).
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
        for allowed in [0.0, self.config.pdr_loss] {
            let b = self.bounds(allowed);
            let Some(upper) = b.upper_pps else { continue };
            if upper - b.lower_pps <= self.config.precision * upper {
                continue;
            }
            if upper <= self.config.min_pps {
                continue; // nothing passes even at the lowest rate worth trying
            }
            // First guess after the maximum: what the device carried in the lowest failing trial.
            let guess = self
                .points
                .iter()
                .filter(|p| p.offered_pps == upper)
                .map(|p| p.forwarded_pps * (1.0 - allowed) * 0.99)
                .next()
                .filter(|&g| b.lower_pps == 0.0 && g > b.lower_pps && g < upper && self.points.len() == 1);
            let rate = guess.unwrap_or((b.lower_pps + upper) / 2.0).max(self.config.min_pps);
            return Some(rate);
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
        assert_eq!(s.points()[1].offered_pps, 3e6 * 0.99, "second trial at the received rate");
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
