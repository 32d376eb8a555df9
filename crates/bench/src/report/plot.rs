//! The report's main charts as one PNG image (`--output kind=plot`), as
//! GuideLLM draws them: latency, TTFT and ITL against the achieved rate;
//! output tokens/s against concurrency; latency against throughput; the
//! requests of each benchmark by status. One colour per run (backend
//! label), as on the HTML page.
//!
//! Drawn with plotters into a pixel buffer and encoded with png; text uses
//! a font compiled into the binary (a Latin subset of DejaVu Sans), so the
//! image looks the same on a machine without any font installed. Held by
//! `the_plot_is_a_png_of_the_stated_size_with_text_and_every_series`.

use std::io::BufWriter;
use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use super::chart::PALETTE;
use super::html::{Run, runs_of};
use super::model::{BenchmarkReport, Report};
use super::{count_as_f64, ms_at};
use crate::{Error, Result};

/// The image's size in pixels.
pub const PLOT_SIZE: (u32, u32) = (1800, 1100);

/// The family name the embedded font is registered under.
const FONT: &str = "guidebench-sans";

/// DejaVu Sans reduced to Latin-1 and a few symbols (see
/// `assets/DejaVuSans-LICENSE.txt`).
const FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");

/// Registers the embedded font once; `false` if it could not be read.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok())
}

fn colour(i: usize) -> RGBColor {
    let hex = PALETTE[i % PALETTE.len()].trim_start_matches('#');
    let byte =
        |at: usize| u8::from_str_radix(hex.get(at..at + 2).unwrap_or("80"), 16).unwrap_or(128);
    RGBColor(byte(0), byte(2), byte(4))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A run's line in a panel: its label, colour and points `(x, y)`.
type Line = (String, RGBColor, Vec<(f64, f64)>);

/// One panel: a title, axes and a line per run.
struct Panel {
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    series: Vec<Line>,
}

fn panel(
    runs: &[Run<'_>],
    title: &'static str,
    stat: &str,
    (x_label, x): (&'static str, fn(&BenchmarkReport) -> f64),
    (y_label, y): (&'static str, fn(&BenchmarkReport) -> Option<f64>),
) -> Panel {
    let series = runs
        .iter()
        .map(|run| {
            let mut points: Vec<(f64, f64)> = run
                .benchmarks
                .iter()
                .filter_map(|b| Some((x(b), y(b)?)))
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let label = [run.label.as_str(), stat]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            (label, colour(run.colour), points)
        })
        .collect();
    Panel {
        title,
        x_label,
        y_label,
        series,
    }
}

/// A tick label: whole numbers without decimals, small ones with two.
fn tick(v: f64) -> String {
    if v.abs() >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// `0..max` with a little room above, never empty.
fn range_of<'a>(values: impl Iterator<Item = &'a f64>) -> std::ops::Range<f64> {
    let max = values
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    0.0..if max > 0.0 { max * 1.08 } else { 1.0 }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    p: &Panel,
) -> std::result::Result<(), BoxError>
where
    DB::ErrorType: 'static,
{
    let points = || p.series.iter().flat_map(|(_, _, pts)| pts);
    let x_range = range_of(points().map(|(x, _)| x));
    let y_range = range_of(points().map(|(_, y)| y));
    let mut chart = ChartBuilder::on(area)
        .caption(p.title, (FONT, 22))
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, y_range)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(p.x_label)
        .y_desc(p.y_label)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()
        .map_err(|e| e.to_string())?;
    for (label, colour, pts) in &p.series {
        let colour = *colour;
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
        chart
            .draw_series(pts.iter().map(|&at| Circle::new(at, 4, colour.filled())))
            .map_err(|e| e.to_string())?;
    }
    if p.series.iter().any(|(l, _, _)| !l.is_empty()) {
        chart
            .configure_series_labels()
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Requests by status, one group of bars per benchmark (of every run).
fn draw_status<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    runs: &[Run<'_>],
) -> std::result::Result<(), BoxError>
where
    DB::ErrorType: 'static,
{
    let bars: Vec<(String, [usize; 3])> = runs
        .iter()
        .flat_map(|run| {
            run.benchmarks.iter().map(move |b| {
                let m = &b.metrics;
                let name = if run.label.is_empty() {
                    b.name.clone()
                } else {
                    format!("{} {}", run.label, b.name)
                };
                (
                    name,
                    [m.successful.count, m.errored.count, m.incomplete.count],
                )
            })
        })
        .collect();
    let n = count_as_f64(bars.len().max(1));
    let top = bars
        .iter()
        .flat_map(|(_, c)| c.iter())
        .map(|&c| count_as_f64(c))
        .fold(1.0, f64::max);
    let names: Vec<String> = bars
        .iter()
        .map(|(name, _)| name.chars().take(18).collect())
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption("Requests by status", (FONT, 22))
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..top * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len().clamp(1, 12))
        .x_label_formatter(&|x| {
            let rounded = x.round();
            if (x - rounded).abs() > 0.01 || rounded < 0.0 {
                return String::new();
            }
            format!("{rounded:.0}")
                .parse::<usize>()
                .ok()
                .and_then(|i| names.get(i).cloned())
                .unwrap_or_default()
        })
        .y_desc("requests")
        .y_label_formatter(&|v| tick(*v))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 16))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()
        .map_err(|e| e.to_string())?;
    let statuses = [
        ("successful", RGBColor(89, 161, 79)),
        ("errored", RGBColor(225, 87, 89)),
        ("incomplete", RGBColor(186, 176, 172)),
    ];
    for (k, (status, colour)) in statuses.into_iter().enumerate() {
        let offset = (count_as_f64(k) - 1.0) * 0.27;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, counts))| {
                let x = count_as_f64(i) + offset;
                Rectangle::new(
                    [(x - 0.13, 0.0), (x + 0.13, count_as_f64(counts[k]))],
                    colour.filled(),
                )
            }))
            .map_err(|e| e.to_string())?
            .label(status)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The panels of `report` drawn into an RGB buffer of [`PLOT_SIZE`].
fn draw(report: &Report) -> std::result::Result<Vec<u8>, BoxError> {
    if !font_ready() {
        return Err("the embedded font could not be read".into());
    }
    let (w, h) = PLOT_SIZE;
    let mut pixels = vec![255_u8; usize::try_from(u64::from(w) * u64::from(h) * 3)?];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, PLOT_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (head, body) = root.split_vertically(56);
        let runs = runs_of(report, "", 0);
        let title = format!(
            "guidebench: {} benchmark{}{}",
            report.benchmarks.len(),
            if report.benchmarks.len() == 1 {
                ""
            } else {
                "s"
            },
            if report.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        );
        head.draw_text(&title, &(FONT, 28).into_text_style(&head), (24, 14))
            .map_err(|e| e.to_string())?;
        let areas = body.split_evenly((2, 3));
        let rate = (
            "achieved requests/s",
            (|b| b.metrics.requests_per_s) as fn(&BenchmarkReport) -> f64,
        );
        let panels = [
            panel(
                &runs,
                "Latency p50 against rate",
                "p50",
                rate,
                ("latency ms", |b| ms_at(&b.metrics.successful.latency, 50.0)),
            ),
            panel(
                &runs,
                "TTFT p50 against rate",
                "p50",
                rate,
                ("TTFT ms", |b| ms_at(&b.metrics.successful.ttft, 50.0)),
            ),
            panel(
                &runs,
                "ITL p50 against rate",
                "p50",
                rate,
                ("ITL ms", |b| ms_at(&b.metrics.successful.itl, 50.0)),
            ),
            panel(
                &runs,
                "Output tokens/s against concurrency",
                "",
                ("mean requests in flight", |b| b.metrics.mean_concurrency),
                ("output tokens/s", |b| Some(b.metrics.output_tokens_per_s)),
            ),
            panel(
                &runs,
                "Latency p50 against throughput",
                "p50",
                ("output tokens/s", |b| b.metrics.output_tokens_per_s),
                ("latency ms", |b| ms_at(&b.metrics.successful.latency, 50.0)),
            ),
        ];
        for (area, p) in areas.iter().zip(&panels) {
            draw_panel(area, p)?;
        }
        if let Some(area) = areas.get(5) {
            draw_status(area, &runs)?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(pixels)
}

/// Writes the report's charts to `path` as a PNG of [`PLOT_SIZE`].
pub fn write_plot(report: &Report, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let fail = |source: BoxError| Error::Plot {
        path: path.to_owned(),
        source,
    };
    let pixels = draw(report).map_err(fail)?;
    let file = std::fs::File::create(path).map_err(|e| guidebench_core::Error::io(path, e))?;
    let mut encoder = png::Encoder::new(BufWriter::new(file), PLOT_SIZE.0, PLOT_SIZE.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Best);
    encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(&pixels))
        .map_err(|e| fail(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn a_report_without_benchmarks_still_plots_its_axes() {
        let report = Report::new(serde_json::Value::Null);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.png");
        write_plot(&report, &path).expect("plot");
        let decoder = png::Decoder::new(std::fs::File::open(&path).expect("open"));
        let info = decoder.read_info().expect("a PNG").info().clone();
        assert_eq!((info.width, info.height), PLOT_SIZE);
    }

    #[test]
    fn the_plot_is_a_png_of_the_stated_size_with_text_and_every_series() {
        let mut report = sample_report();
        let mut other = report.benchmarks[0].clone();
        other.backend = Some("second".into());
        report.benchmarks.push(other);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plot.png");
        write_plot(&report, &path).expect("plot");
        let decoder = png::Decoder::new(std::fs::File::open(&path).expect("open"));
        let mut reader = decoder.read_info().expect("a PNG");
        let mut pixels = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut pixels).expect("one frame");
        assert_eq!((info.width, info.height), PLOT_SIZE);
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let rgb: Vec<[u8; 3]> = pixels.chunks_exact(3).map(|p| [p[0], p[1], p[2]]).collect();
        // The title is text drawn with the embedded font: dark pixels in
        // the title band.
        let width = usize::try_from(PLOT_SIZE.0).expect("small");
        let dark_in_title = rgb[..width * 50]
            .iter()
            .filter(|p| p.iter().all(|&c| c < 100))
            .count();
        assert!(
            dark_in_title > 200,
            "no title text: {dark_in_title} dark pixels"
        );
        // Both runs' colours, and the errored bar.
        for (i, hex) in PALETTE.iter().enumerate().take(2) {
            let c = colour(i);
            assert!(rgb.contains(&[c.0, c.1, c.2]), "no pixel of {hex}");
        }
        assert!(rgb.contains(&[225, 87, 89]), "no errored bar");
    }
}
