//! Samples, summaries, and the report: a markdown table, JSON, and an SVG of latency distributions.

use std::fmt::Write as _;

use serde::Serialize;

/// What a sample measures.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Nanoseconds per operation (lower is better).
    Nanos,
    /// Operations per second (higher is better).
    PerSecond,
    /// Bytes (lower is better).
    Bytes,
    /// A share, e.g. of one core (lower is better).
    Ratio,
}

/// Median, p99 and count of a set of samples.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// What was measured.
    pub name: String,
    /// Median.
    pub median: f64,
    /// 99th percentile (for throughput: the 1st percentile, the slow tail).
    pub p99: f64,
    /// Number of samples.
    pub samples: usize,
    /// Unit.
    pub unit: Unit,
    /// The sorted samples (kept for plots; not serialised).
    #[serde(skip)]
    pub sorted: Vec<f64>,
}

impl Summary {
    /// Summarises `samples`.
    pub fn of(name: &str, mut samples: Vec<f64>, unit: Unit) -> Self {
        assert!(!samples.is_empty(), "{name}: no samples");
        samples.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        let (median, p99) = match unit {
            Unit::PerSecond => (at(0.5), at(0.01)),
            _ => (at(0.5), at(0.99)),
        };
        Self { name: name.to_string(), median, p99, samples: samples.len(), unit, sorted: samples }
    }

    /// The median and tail in readable units.
    pub fn cell(&self) -> String {
        format!("{} (p99 {}, n={})", fmt(self.median, self.unit), fmt(self.p99, self.unit), self.samples)
    }
}

/// Formats a value with a readable unit.
pub fn fmt(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Nanos if v >= 1e9 => format!("{:.2} s", v / 1e9),
        Unit::Nanos if v >= 1e6 => format!("{:.2} ms", v / 1e6),
        Unit::Nanos if v >= 1e3 => format!("{:.2} µs", v / 1e3),
        Unit::Nanos => format!("{v:.0} ns"),
        Unit::PerSecond if v >= 1e6 => format!("{:.2} M/s", v / 1e6),
        Unit::PerSecond => format!("{:.0} k/s", v / 1e3),
        Unit::Bytes if v >= 1024.0 => format!("{:.1} KiB", v / 1024.0),
        Unit::Bytes => format!("{v:.0} B"),
        Unit::Ratio => format!("{:.2}%", v * 100.0),
    }
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The scenario.
    pub scenario: String,
    /// ringvisor's figure.
    pub ringvisor: Summary,
    /// The baseline, measured in the same run.
    pub baseline: Summary,
    /// ringvisor's median divided by the baseline's.
    pub ratio: f64,
    /// The target, in words.
    pub target: String,
    /// Whether the target is met.
    pub met: bool,
}

impl Row {
    /// A row whose target is checked by `check(ringvisor, baseline, ratio)`.
    pub fn new(
        scenario: &str,
        ringvisor: Summary,
        baseline: Summary,
        target: &str,
        check: impl Fn(&Summary, &Summary, f64) -> bool,
    ) -> Self {
        let ratio = ringvisor.median / baseline.median;
        let met = check(&ringvisor, &baseline, ratio);
        Self { scenario: scenario.to_string(), ringvisor, baseline, ratio, target: target.to_string(), met }
    }
}

/// The markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | ringvisor | baseline | ratio (ringvisor / baseline) | target | met? |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {}: {} | {}: {} | {:.3} | {} | {} |",
            r.scenario,
            r.ringvisor.name,
            r.ringvisor.cell(),
            r.baseline.name,
            r.baseline.cell(),
            r.ratio,
            r.target,
            if r.met { "yes" } else { "**no**" }
        );
    }
    out
}

/// An SVG with the cumulative distribution of each latency summary (log-scale time axis).
pub fn cdf_svg(title: &str, series: &[&Summary]) -> String {
    const W: f64 = 980.0;
    const H: f64 = 420.0;
    const L: f64 = 70.0;
    const R: f64 = 300.0;
    const T: f64 = 40.0;
    const B: f64 = 50.0;
    let lo = series.iter().map(|s| s.sorted[0]).fold(f64::INFINITY, f64::min).max(1.0).log10().floor();
    let hi = series.iter().map(|s| *s.sorted.last().unwrap()).fold(1.0, f64::max).log10().ceil().max(lo + 1.0);
    let x = |ns: f64| L + (ns.max(1.0).log10() - lo) / (hi - lo) * (W - L - R);
    let y = |q: f64| T + (1.0 - q) * (H - T - B);
    let mut svg = svg_open(W, H, L, title);
    for d in (lo as i32)..=(hi as i32) {
        let px = x(10f64.powi(d));
        let _ = writeln!(
            svg,
            "<line x1=\"{px:.1}\" y1=\"{T}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            H - B,
            H - B + 16.0,
            fmt(10f64.powi(d), Unit::Nanos)
        );
    }
    for q in [0.0, 0.5, 0.9, 0.99] {
        let py = y(q);
        let _ = writeln!(
            svg,
            "<line x1=\"{L}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - R,
            L - 6.0,
            py + 4.0,
            match q {
                0.99 => "p99".to_string(),
                0.9 => "p90".to_string(),
                _ => format!("{q}"),
            }
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">round-trip time (log scale)</text>",
        (L + W - R) / 2.0,
        H - 12.0
    );
    for (i, s) in series.iter().enumerate() {
        let n = s.sorted.len();
        let step = (n / 400).max(1);
        let points: Vec<String> = (0..n)
            .step_by(step)
            .chain(std::iter::once(n - 1))
            .map(|k| format!("{:.1},{:.1}", x(s.sorted[k]), y((k + 1) as f64 / n as f64)))
            .collect();
        svg_line(&mut svg, i, &s.name, &points, W - R, T);
    }
    svg.push_str("</svg>\n");
    svg
}

/// One line of [`scaling_svg`]: a name and its (size, median nanoseconds) points.
pub struct Series {
    /// What the line shows.
    pub name: String,
    /// (size, nanoseconds), in increasing size.
    pub points: Vec<(f64, f64)>,
}

/// An SVG of time against size, both on log scales (a straight line of slope 1 is linear growth).
pub fn scaling_svg(title: &str, x_label: &str, series: &[Series]) -> String {
    const W: f64 = 760.0;
    const H: f64 = 420.0;
    const L: f64 = 80.0;
    const R: f64 = 260.0;
    const T: f64 = 40.0;
    const B: f64 = 50.0;
    let all = || series.iter().flat_map(|s| s.points.iter());
    let decades = |v: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = v.fold((f64::INFINITY, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let lo = lo.max(1.0).log10().floor();
        (lo, hi.log10().ceil().max(lo + 1.0))
    };
    let (x_lo, x_hi) = decades(&mut all().map(|p| p.0));
    let (y_lo, y_hi) = decades(&mut all().map(|p| p.1));
    let x = |v: f64| L + (v.max(1.0).log10() - x_lo) / (x_hi - x_lo) * (W - L - R);
    let y = |v: f64| H - B - (v.max(1.0).log10() - y_lo) / (y_hi - y_lo) * (H - T - B);
    let mut svg = svg_open(W, H, L, title);
    for d in (x_lo as i32)..=(x_hi as i32) {
        let px = x(10f64.powi(d));
        let _ = writeln!(
            svg,
            "<line x1=\"{px:.1}\" y1=\"{T}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            H - B,
            H - B + 16.0,
            10f64.powi(d)
        );
    }
    for d in (y_lo as i32)..=(y_hi as i32) {
        let py = y(10f64.powi(d));
        let _ = writeln!(
            svg,
            "<line x1=\"{L}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - R,
            L - 6.0,
            py + 4.0,
            fmt(10f64.powi(d), Unit::Nanos)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{x_label} (log scale)</text>",
        (L + W - R) / 2.0,
        H - 12.0
    );
    for (i, s) in series.iter().enumerate() {
        let points: Vec<String> = s.points.iter().map(|&(n, t)| format!("{:.1},{:.1}", x(n), y(t))).collect();
        svg_line(&mut svg, i, &s.name, &points, W - R, T);
    }
    svg.push_str("</svg>\n");
    svg
}

/// The opening of a plot of `width` x `height` with `title` at `left`.
fn svg_open(width: f64, height: f64, left: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"22\" font-size=\"14\">{title}</text>\n"
    )
}

/// A polyline through `points` (already in pixels) and its legend entry, number `index`, at `legend_x`
/// (below `top`).
fn svg_line(svg: &mut String, index: usize, name: &str, points: &[String], legend_x: f64, top: f64) {
    const COLOURS: [&str; 6] = ["#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b"];
    let colour = COLOURS[index % COLOURS.len()];
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
        points.join(" ")
    );
    let ly = top + 10.0 + index as f64 * 18.0;
    let _ = writeln!(
        svg,
        "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\">{name}</text>",
        legend_x + 10.0,
        legend_x + 30.0,
        legend_x + 36.0,
        ly + 4.0,
    );
}
