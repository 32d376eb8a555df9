//! Charts as inline SVG: lines, points and cumulative steps on linear axes,
//! with ticks, grid, legend and shaded bands. The HTML report and the
//! comparison page draw every chart with it; nothing is loaded from
//! anywhere.
//!
//! Every `<svg>` it writes has the class `chart` and a `data-points`
//! attribute counting the points drawn, which the browser check reads.
//! Text (titles, labels, legend) is escaped here, since the page template
//! inserts the SVG as is.

use std::fmt::Write as _;

use super::count_as_f64;

/// One colour per series (Tableau 10): distinct, and readable by most
/// colour-blind readers when paired with the legend.
pub(crate) const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// The most points a series draws: more are thinned evenly, so a run of a
/// million requests still makes a page a browser opens.
pub(crate) const MAX_POINTS: usize = 2_000;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Straight segments with a dot at each point (and a tooltip).
    LinePoints,
    /// Horizontal then vertical segments: a step function (a CDF, a count).
    Step,
    /// Dots only.
    Points,
}

/// One series of a chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Its name in the legend.
    pub label: String,
    /// Index into [`PALETTE`] (wraps).
    pub colour: usize,
    /// Drawn dashed (a second statistic of the same run, say p95 beside p50).
    pub dashed: bool,
    /// How it is drawn.
    pub mark: Mark,
    /// `(x, y)` points; non-finite ones are skipped.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series named `label` in colour `colour`, drawn as `mark`.
    pub(crate) fn new(label: impl Into<String>, colour: usize, mark: Mark) -> Self {
        Series {
            label: label.into(),
            colour,
            dashed: false,
            mark,
            points: Vec::new(),
        }
    }

    /// The same series drawn dashed.
    pub(crate) fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }

    /// The same series with `points`.
    pub(crate) fn with_points(mut self, points: Vec<(f64, f64)>) -> Self {
        self.points = points;
        self
    }

    fn finite(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    }
}

/// A shaded stretch of the x axis (a warm-up, a cool-down).
#[derive(Debug, Clone)]
pub(crate) struct Band {
    /// Where it starts.
    pub from: f64,
    /// Where it ends.
    pub to: f64,
    /// What it is, written inside it.
    pub label: &'static str,
}

/// A dashed reference line across the plot: an objective, say.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// `true` for a vertical line at x = `at`, `false` for a horizontal
    /// one at y = `at`.
    pub vertical: bool,
    /// Where it is drawn.
    pub at: f64,
    /// What it is, written beside it.
    pub label: String,
}

/// A chart: a title, two axes and its series.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    /// The title, above the plot.
    pub title: String,
    /// The x axis's name and unit.
    pub x_label: String,
    /// The y axis's name and unit.
    pub y_label: String,
    /// The series, drawn in order.
    pub series: Vec<Series>,
    /// Shaded stretches of the x axis.
    pub bands: Vec<Band>,
    /// Reference lines (always within the axes' ranges).
    pub rules: Vec<Rule>,
}

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 58.0;
const RIGHT: f64 = 14.0;
const BOTTOM: f64 = 40.0;
/// The height of the title line.
const TITLE_H: f64 = 22.0;
/// The height of one legend row.
const LEGEND_ROW: f64 = 16.0;
/// The average width of a legend character at the legend's font size.
const CHAR_W: f64 = 6.2;

impl Chart {
    /// An empty chart.
    pub(crate) fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            bands: Vec::new(),
            rules: Vec::new(),
        }
    }

    /// The points that will be drawn, over every series.
    pub(crate) fn point_count(&self) -> usize {
        self.series
            .iter()
            .map(|s| s.finite().count().min(MAX_POINTS))
            .sum()
    }

    /// Whether the chart has anything to draw.
    pub(crate) fn has_data(&self) -> bool {
        self.point_count() > 0
    }

    /// The bounds of every point and band: `(x0, x1, y0, y1)`, `y0` at most
    /// 0 and `x0` at most 0 when every x is positive and the chart has a
    /// line (rates, times from the start).
    fn bounds(&self) -> (f64, f64, f64, f64) {
        let mut b = (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64, f64::NEG_INFINITY);
        for (x, y) in self.series.iter().flat_map(Series::finite) {
            b = (b.0.min(x), b.1.max(x), b.2.min(y), b.3.max(y));
        }
        for band in &self.bands {
            b = (b.0.min(band.from), b.1.max(band.to), b.2, b.3);
        }
        if !b.0.is_finite() {
            return (0.0, 1.0, 0.0, 1.0);
        }
        for rule in self.rules.iter().filter(|r| r.at.is_finite()) {
            if rule.vertical {
                b = (b.0.min(rule.at), b.1.max(rule.at), b.2, b.3);
            } else {
                b = (b.0, b.1, b.2.min(rule.at), b.3.max(rule.at));
            }
        }
        if b.0 > 0.0 && b.0 < b.1 * 0.5 {
            b.0 = 0.0;
        }
        if b.1 - b.0 <= f64::EPSILON * b.1.abs().max(1.0) {
            let pad = b.0.abs().max(1.0) * 0.1;
            b = (b.0 - pad, b.1 + pad, b.2, b.3);
        }
        if !b.3.is_finite() || b.3 - b.2 <= f64::EPSILON * b.3.abs().max(1.0) {
            b.3 = b.2 + b.3.abs().max(1.0);
        }
        b
    }

    /// Legend rows: each a list of series indices, laid out left to right
    /// within the plot's width.
    fn legend_rows(&self) -> Vec<Vec<usize>> {
        let mut rows: Vec<Vec<usize>> = Vec::new();
        let mut used = f64::INFINITY;
        for (i, s) in self.series.iter().enumerate() {
            if s.label.is_empty() {
                continue;
            }
            let w = legend_width(&s.label);
            if used + w > WIDTH - LEFT - RIGHT {
                rows.push(Vec::new());
                used = 0.0;
            }
            used += w;
            if let Some(row) = rows.last_mut() {
                row.push(i);
            }
        }
        rows
    }

    /// The chart as one `<svg class="chart">` element, scaled to its
    /// container's width.
    pub(crate) fn to_svg(&self) -> String {
        let legend = self.legend_rows();
        let top = TITLE_H + LEGEND_ROW * count_as_f64(legend.len()) + 8.0;
        let height = HEIGHT + LEGEND_ROW * count_as_f64(legend.len());
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = height - top - BOTTOM;
        let (x0, x1, y0, y1) = self.bounds();
        let xt = ticks(x0, x1, 6);
        let yt = ticks(y0, y1, 5);
        let (x0, x1) = (x0.min(xt[0]), x1.max(xt[xt.len() - 1]));
        let (y0, y1) = (y0.min(yt[0]), y1.max(yt[yt.len() - 1]));
        let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * plot_w;
        let sy = |y: f64| top + plot_h - (y - y0) / (y1 - y0) * plot_h;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH:.0} \
             {height:.0}\" role=\"img\" aria-label=\"{title}\" data-points=\"{points}\">\n\
             <text class=\"title\" x=\"{LEFT:.0}\" y=\"15\">{title}</text>",
            title = escape(&self.title),
            points = self.point_count(),
        );
        for band in &self.bands {
            let (a, b) = (sx(band.from), sx(band.to));
            let _ = writeln!(
                out,
                "<rect class=\"band\" x=\"{a:.1}\" y=\"{top:.1}\" width=\"{:.1}\" \
                 height=\"{plot_h:.1}\"/><text class=\"band-label\" x=\"{:.1}\" y=\"{:.1}\" \
                 text-anchor=\"middle\">{}</text>",
                (b - a).max(0.0),
                (a + b) / 2.0,
                top + 12.0,
                escape(band.label)
            );
        }
        for rule in self.rules.iter().filter(|r| r.at.is_finite()) {
            let (x1, x2, y1, y2, tx, ty, anchor) = if rule.vertical {
                let x = sx(rule.at);
                (x, x, top, top + plot_h, x - 4.0, top + 24.0, "end")
            } else {
                let y = sy(rule.at);
                (
                    LEFT,
                    LEFT + plot_w,
                    y,
                    y,
                    LEFT + plot_w - 4.0,
                    y - 4.0,
                    "end",
                )
            };
            let _ = writeln!(
                out,
                "<line class=\"rule\" x1=\"{x1:.1}\" x2=\"{x2:.1}\" y1=\"{y1:.1}\" \
                 y2=\"{y2:.1}\"/><text class=\"rule-label\" x=\"{tx:.1}\" y=\"{ty:.1}\" \
                 text-anchor=\"{anchor}\">{}</text>",
                escape(&rule.label)
            );
        }
        // Grid and ticks.
        for &t in &yt {
            let y = sy(t);
            let _ = writeln!(
                out,
                "<line class=\"grid\" x1=\"{LEFT:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
                 <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                LEFT + plot_w,
                LEFT - 5.0,
                y + 4.0,
                tick_label(t, &yt)
            );
        }
        for &t in &xt {
            let x = sx(t);
            let _ = writeln!(
                out,
                "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top:.1}\" y2=\"{:.1}\"/>\
                 <text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                top + plot_h,
                top + plot_h + 15.0,
                tick_label(t, &xt)
            );
        }
        let _ = writeln!(
            out,
            "<rect class=\"frame\" x=\"{LEFT:.1}\" y=\"{top:.1}\" width=\"{plot_w:.1}\" \
             height=\"{plot_h:.1}\"/>\n<text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" \
             text-anchor=\"middle\">{}</text>\n<text class=\"axis\" transform=\"translate(14 \
             {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            LEFT + plot_w / 2.0,
            height - 6.0,
            escape(&self.x_label),
            top + plot_h / 2.0,
            escape(&self.y_label)
        );
        for s in &self.series {
            let colour = PALETTE[s.colour % PALETTE.len()];
            let points: Vec<(f64, f64)> = thin(s.finite().collect(), MAX_POINTS)
                .into_iter()
                .map(|(x, y)| (sx(x), sy(y)))
                .collect();
            if points.is_empty() {
                continue;
            }
            let dash = if s.dashed {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            };
            if s.mark != Mark::Points {
                let mut d = String::new();
                for (i, (x, y)) in points.iter().enumerate() {
                    let _ = match (i, s.mark) {
                        (0, _) => write!(d, "M{x:.1} {y:.1}"),
                        (_, Mark::Step) => write!(d, "H{x:.1}V{y:.1}"),
                        _ => write!(d, "L{x:.1} {y:.1}"),
                    };
                }
                let _ = writeln!(
                    out,
                    "<path class=\"series\" d=\"{d}\" stroke=\"{colour}\"{dash}/>"
                );
            }
            if matches!(s.mark, Mark::Points | Mark::LinePoints) {
                let class = if s.mark == Mark::Points {
                    "dot"
                } else {
                    "marker"
                };
                let mut g = format!("<g class=\"{class}\" fill=\"{colour}\">");
                let raw = thin(s.finite().collect(), MAX_POINTS);
                for ((x, y), (rx, ry)) in points.iter().zip(raw) {
                    if s.mark == Mark::LinePoints {
                        let _ = write!(
                            g,
                            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\"><title>{}: {}, {}</title>\
                             </circle>",
                            escape(&s.label),
                            short(rx),
                            short(ry)
                        );
                    } else {
                        let _ = write!(g, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\"/>");
                    }
                }
                g.push_str("</g>");
                out.push_str(&g);
                out.push('\n');
            }
        }
        // Legend.
        for (row, indices) in legend.iter().enumerate() {
            let y = TITLE_H + LEGEND_ROW * count_as_f64(row) + 10.0;
            let mut x = LEFT;
            for &i in indices {
                let s = &self.series[i];
                let colour = PALETTE[s.colour % PALETTE.len()];
                let dash = if s.dashed {
                    " stroke-dasharray=\"6 4\""
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "<line class=\"swatch\" x1=\"{x:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" \
                     stroke=\"{colour}\"{dash}/><text class=\"legend\" x=\"{:.1}\" y=\"{y:.1}\">{}\
                     </text>",
                    x + 18.0,
                    y - 4.0,
                    y - 4.0,
                    x + 22.0,
                    escape(&s.label)
                );
                x += legend_width(&s.label);
            }
        }
        out.push_str("</svg>\n");
        out
    }
}

/// The room a legend entry takes: swatch, label, gap.
fn legend_width(label: &str) -> f64 {
    30.0 + CHAR_W * count_as_f64(label.chars().count())
}

/// At most `max` of `points`, evenly spaced, the first and last kept.
pub(crate) fn thin<T: Copy>(points: Vec<T>, max: usize) -> Vec<T> {
    let n = points.len();
    if n <= max || max < 2 {
        return points;
    }
    (0..max).map(|i| points[i * (n - 1) / (max - 1)]).collect()
}

/// About `n` round tick values (1, 2 or 5 times a power of ten apart)
/// covering `lo..=hi`.
pub(crate) fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return vec![lo];
    }
    let raw = span / count_as_f64(n.max(1));
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).floor() * step;
    let mut out = Vec::new();
    let mut k = 0.0;
    loop {
        let t = first + k * step;
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        if t >= hi - step * 1e-9 || out.len() > 50 {
            break;
        }
        k += 1.0;
    }
    out
}

/// A tick's label, with as many decimals as the step between ticks needs.
fn tick_label(t: f64, all: &[f64]) -> String {
    let step = if all.len() > 1 {
        (all[1] - all[0]).abs()
    } else {
        1.0
    };
    if step >= 1.0 || step == 0.0 {
        return format!("{t:.0}");
    }
    // step < 1: a handful of decimals at most.
    let decimals = (-step.log10()).ceil().clamp(0.0, 9.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0..=9 by the clamp.
    let decimals = decimals as usize;
    format!("{t:.decimals$}")
}

/// A value with three significant figures or so, for tooltips.
fn short(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, safe in element content
/// and in quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The empirical CDF of `values` as step points `(value, share ≤ value)`,
/// starting at `(min, 0)`; at most [`MAX_POINTS`] steps, taken at evenly
/// spaced ranks. NaNs are dropped.
pub(crate) fn cdf_points(mut values: Vec<f64>) -> Vec<(f64, f64)> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return Vec::new();
    }
    let steps = n.min(MAX_POINTS - 1);
    let mut points = Vec::with_capacity(steps + 1);
    points.push((values[0], 0.0));
    for k in 1..=steps {
        // The k-th of `steps` evenly spaced ranks, 1-based; the last is n.
        let rank = k * n / steps;
        points.push((values[rank - 1], count_as_f64(rank) / count_as_f64(n)));
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart_with(points: Vec<(f64, f64)>, mark: Mark) -> Chart {
        let mut chart = Chart::new("t", "x", "y");
        chart
            .series
            .push(Series::new("run", 0, mark).with_points(points));
        chart
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            ticks(0.0, 0.9, 5),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        let t = ticks(3.3, 47.0, 6);
        assert!(t[0] <= 3.3 && *t.last().expect("ticks") >= 47.0, "{t:?}");
        assert_eq!(tick_label(0.05, &[0.0, 0.05]), "0.05");
        assert_eq!(tick_label(0.4, &[0.2, 0.4]), "0.4");
        assert_eq!(tick_label(2000.0, &[0.0, 1000.0]), "2000");
    }

    #[test]
    fn a_cdf_rises_from_zero_to_one_through_the_sorted_values() {
        let points = cdf_points(vec![3.0, 1.0, 2.0, f64::NAN]);
        assert_eq!(
            points,
            vec![(1.0, 0.0), (1.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 1.0)]
        );
        let many = cdf_points((0..100_000).map(f64::from).collect());
        assert!(many.len() <= MAX_POINTS);
        assert_eq!(many.last(), Some(&(99_999.0, 1.0)));
    }

    #[test]
    fn a_chart_counts_and_draws_its_points() {
        let svg = chart_with(
            vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN)],
            Mark::LinePoints,
        )
        .to_svg();
        assert!(svg.contains("data-points=\"2\""), "{svg}");
        assert!(svg.contains("<path class=\"series\" d=\"M"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 2);
        let empty = chart_with(Vec::new(), Mark::LinePoints);
        assert!(!empty.has_data());
        assert!(empty.to_svg().contains("data-points=\"0\""));
    }

    #[test]
    fn a_rule_is_drawn_within_the_axes_even_beyond_the_data() {
        let mut chart = chart_with(vec![(0.0, 1.0), (1.0, 2.0)], Mark::LinePoints);
        chart.rules.push(Rule {
            vertical: false,
            at: 50.0,
            label: "objective".into(),
        });
        let svg = chart.to_svg();
        assert!(svg.contains("class=\"rule\""), "{svg}");
        // The y axis reaches the rule: a tick at 50 or above.
        assert!(
            svg.contains(">50</text>") || svg.contains(">60</text>"),
            "{svg}"
        );
    }

    #[test]
    fn a_huge_series_is_thinned_to_the_cap() {
        let points: Vec<(f64, f64)> = (0..50_000).map(|i| (f64::from(i), 1.0)).collect();
        let svg = chart_with(points, Mark::Points).to_svg();
        assert_eq!(svg.matches("<circle").count(), MAX_POINTS);
    }

    #[test]
    fn labels_in_a_chart_are_escaped() {
        let mut chart = Chart::new("<b>t</b>", "x & y", "\"y\"");
        chart.series.push(
            Series::new("<script>x</script>", 1, Mark::LinePoints).with_points(vec![(0.0, 0.0)]),
        );
        let svg = chart.to_svg();
        assert!(!svg.contains("<script") && !svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(svg.contains("x &amp; y") && svg.contains("&quot;y&quot;"));
    }

    #[test]
    fn escaping_covers_every_special_character() {
        assert_eq!(escape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
    }
}
