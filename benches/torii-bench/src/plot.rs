//! The plots of a result, as SVG files drawn with `plotters`:
//!
//! - `<stem>-throughput.svg`: NDR against flows (log scale), one line per test, protocol
//!   and device — requests/s for throughput, connections/s for the connection rate;
//! - `<stem>-latency.svg`: the latency percentiles (p50 … p99.99, max; log scale) of each
//!   run and device's latency trial (at a fraction of NDR, or the fixed-rate trial).
//!
//! Only measured values are drawn; a run without an NDR or percentiles adds no point.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::report::Report;

/// Colours of the devices, in the order they appear.
const COLOURS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plot: {e:?}")
}

/// One line: a label and its points.
type Series = (String, Vec<(f64, f64)>);

/// NDR against flows, per test, protocol and device (points sorted by flows).
pub fn throughput_series(report: &Report) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for run in &report.runs {
        for d in &run.duts {
            let Some(ndr) = d.ndr_offered_pps.filter(|v| *v > 0.0) else { continue };
            let label = format!(
                "{} {}{}",
                d.dut,
                run.protocol_label(),
                if run.test == "connections" { " connections/s" } else { " requests/s" }
            );
            let point = (f64::from(run.flows), ndr / 1e6);
            match series.iter_mut().find(|(l, _)| *l == label) {
                Some((_, points)) => points.push(point),
                None => series.push((label, vec![point])),
            }
        }
    }
    for (_, points) in &mut series {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// Latency percentiles (x: 0 = p50 … 4 = p99.99, 5 = max; y: µs), per run and device.
pub fn latency_series(report: &Report) -> Vec<Series> {
    let mut series = Vec::new();
    for run in &report.runs {
        for d in &run.duts {
            let Some(p) = d.latency.as_ref().and_then(|l| l.percentiles_ns) else { continue };
            let label = format!(
                "{} {}{} {} flows",
                d.dut,
                run.protocol_label(),
                if run.test == "connections" { " connections" } else { "" },
                run.flows
            );
            let values = [p.p50, p.p90, p.p99, p.p99_9, p.p99_99, p.max];
            series.push((label, values.iter().enumerate().map(|(k, &v)| (k as f64, v as f64 / 1e3)).collect()));
        }
    }
    series
}

/// Draws both plots next to `result` (the JSON file): returns their paths.
///
/// # Errors
/// When a file cannot be written.
pub fn draw(report: &Report, result: &Path) -> Result<Vec<PathBuf>> {
    let stem = result.with_extension("");
    let stem = stem.display();
    let mut written = Vec::new();
    let throughput = throughput_series(report);
    if !throughput.is_empty() {
        let path = PathBuf::from(format!("{stem}-throughput.svg"));
        chart(&path, "NDR against flows (64-byte frames unless stated)", "flows", "M/s", &throughput, true)?;
        written.push(path);
    }
    let latency = latency_series(report);
    if !latency.is_empty() {
        let path = PathBuf::from(format!("{stem}-latency.svg"));
        chart(&path, "Latency percentiles: p50, p90, p99, p99.9, p99.99, max", "percentile", "µs", &latency, false)?;
        written.push(path);
    }
    Ok(written)
}

/// A line chart of `series`: flows on a log x axis and a linear y axis (`log_x`), or a
/// linear x axis and a log y axis.
fn chart(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series], log_x: bool) -> Result<()> {
    let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let ys = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1));
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let y_max = ys.clone().fold(0.0, f64::max);
    let y_min = ys.fold(f64::MAX, f64::min);
    let mut builder = ChartBuilder::on(&root);
    builder.caption(title, ("sans-serif", 20)).margin(12).x_label_area_size(40).y_label_area_size(60);
    // The two shapes of axes are two chart types in plotters.
    macro_rules! draw_on {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw().map_err(err)?;
            for (k, (label, points)) in series.iter().enumerate() {
                let colour = COLOURS[k % COLOURS.len()];
                let style = if k < COLOURS.len() { colour.stroke_width(2) } else { colour.stroke_width(1) };
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), style))
                    .map_err(err)?
                    .label(label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }};
    }
    let x_range = if x_max > x_min { x_min..x_max } else { x_min * 0.5..x_max * 2.0 };
    let y_top = y_max * 1.15 + 1e-9;
    if log_x {
        draw_on!(builder.build_cartesian_2d(x_range.log_scale(), 0.0..y_top).map_err(err)?);
    } else {
        draw_on!(builder.build_cartesian_2d(x_range, (y_min.max(0.1) * 0.8..y_top).log_scale()).map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}
