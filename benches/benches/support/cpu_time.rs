//! A criterion [`Measurement`] of the benchmark thread's CPU time
//! ([`torii_benches::thread_cpu_time`]) instead of wall-clock time.
//!
//! The benchmarks run on a 2-core machine shared with other builds (load averages of 8–12
//! are usual): wall-clock time then counts the time the scheduler gives the other
//! processes, several times the benchmark's own. The thread's CPU time leaves that out; it
//! still includes what sharing costs while the thread runs (caches and TLBs refilled after
//! a context switch). Reported in nanoseconds, formatted like criterion's wall time.

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::Throughput;
pub use torii_benches::thread_cpu_time as now;

/// The calling thread's CPU time.
pub struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        now()
    }
    fn end(&self, start: Duration) -> Duration {
        now().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuTimeFormatter
    }
}

struct CpuTimeFormatter;

impl ValueFormatter for CpuTimeFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = match typical_ns {
            t if t < 1e3 => (1.0, "ns"),
            t if t < 1e6 => (1e-3, "µs"),
            t if t < 1e9 => (1e-6, "ms"),
            _ => (1e-9, "s"),
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(&self, typical_ns: f64, throughput: &Throughput, values: &mut [f64]) -> &'static str {
        let per_iteration = match *throughput {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) | Throughput::Elements(n) => n as f64,
        };
        let unit_name = if matches!(throughput, Throughput::Elements(_)) { "elem/s" } else { "B/s" };
        let rate = per_iteration * 1e9 / typical_ns;
        let (denominator, unit) = match rate {
            r if r < 1e3 => (1.0, unit_name),
            r if r < 1e6 => (1e3, if unit_name == "B/s" { "KB/s" } else { "Kelem/s" }),
            r if r < 1e9 => (1e6, if unit_name == "B/s" { "MB/s" } else { "Melem/s" }),
            _ => (1e9, if unit_name == "B/s" { "GB/s" } else { "Gelem/s" }),
        };
        values.iter_mut().for_each(|v| *v = per_iteration * 1e9 / *v / denominator);
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
