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
    let f = Frame { w: 980.0, h: 420.0, l: 70.0, r: 300.0, t: 40.0, b: 50.0 };
    let lo = series.iter().map(|s| s.sorted[0]).fold(f64::INFINITY, f64::min).max(1.0).log10().floor();
    let hi = series.iter().map(|s| *s.sorted.last().unwrap()).fold(1.0, f64::max).log10().ceil().max(lo + 1.0);
    let x = |ns: f64| f.l + (ns.max(1.0).log10() - lo) / (hi - lo) * (f.w - f.l - f.r);
    let y = |q: f64| f.t + (1.0 - q) * (f.h - f.t - f.b);
    let mut svg = f.open(title);
    for d in (lo as i32)..=(hi as i32) {
        f.v_grid(&mut svg, x(10f64.powi(d)), &fmt(10f64.powi(d), Unit::Nanos));
    }
    for q in [0.0, 0.5, 0.9, 0.99] {
        let label = match q {
            0.99 => "p99".to_string(),
            0.9 => "p90".to_string(),
            _ => format!("{q}"),
        };
        f.h_grid(&mut svg, y(q), &label);
    }
    f.x_label(&mut svg, "round-trip time (log scale)");
    for (i, s) in series.iter().enumerate() {
        let n = s.sorted.len();
        let step = (n / 400).max(1);
        let points: Vec<(f64, f64)> = (0..n)
            .step_by(step)
            .chain(std::iter::once(n - 1))
            .map(|k| (x(s.sorted[k]), y((k + 1) as f64 / n as f64)))
            .collect();
        f.line(&mut svg, i, &s.name, &points, false);
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
    let f = Frame { w: 760.0, h: 420.0, l: 80.0, r: 260.0, t: 40.0, b: 50.0 };
    let all = || series.iter().flat_map(|s| s.points.iter());
    let decades = |v: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = v.fold((f64::INFINITY, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let lo = lo.max(1.0).log10().floor();
        (lo, hi.log10().ceil().max(lo + 1.0))
    };
    let (x_lo, x_hi) = decades(&mut all().map(|p| p.0));
    let (y_lo, y_hi) = decades(&mut all().map(|p| p.1));
    let x = |v: f64| f.l + (v.max(1.0).log10() - x_lo) / (x_hi - x_lo) * (f.w - f.l - f.r);
    let y = |v: f64| f.h - f.b - (v.max(1.0).log10() - y_lo) / (y_hi - y_lo) * (f.h - f.t - f.b);
    let mut svg = f.open(title);
    for d in (x_lo as i32)..=(x_hi as i32) {
        f.v_grid(&mut svg, x(10f64.powi(d)), &10f64.powi(d).to_string());
    }
    for d in (y_lo as i32)..=(y_hi as i32) {
        f.h_grid(&mut svg, y(10f64.powi(d)), &fmt(10f64.powi(d), Unit::Nanos));
    }
    f.x_label(&mut svg, &format!("{x_label} (log scale)"));
    for (i, s) in series.iter().enumerate() {
        let points: Vec<(f64, f64)> = s.points.iter().map(|&(n, t)| (x(n), y(t))).collect();
        f.line(&mut svg, i, &s.name, &points, true);
    }
    svg.push_str("</svg>\n");
    svg
}

/// A plot's canvas: width and height, and the margins (left, right: the legend's room, top, bottom).
struct Frame {
    w: f64,
    h: f64,
    l: f64,
    r: f64,
    t: f64,
    b: f64,
}

impl Frame {
    /// The opening of the plot, with its title.
    fn open(&self, title: &str) -> String {
        let (w, h, l) = (self.w, self.h, self.l);
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{l}\" y=\"22\" font-size=\"14\">{title}</text>\n"
        )
    }

    /// A vertical grid line at `px`, labelled below the plot.
    fn v_grid(&self, svg: &mut String, px: f64, label: &str) {
        let _ = writeln!(
            svg,
            "<line x1=\"{px:.1}\" y1=\"{}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            self.t,
            self.h - self.b,
            self.h - self.b + 16.0,
        );
    }

    /// A horizontal grid line at `py`, labelled left of the plot.
    fn h_grid(&self, svg: &mut String, py: f64, label: &str) {
        let _ = writeln!(
            svg,
            "<line x1=\"{}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            self.l,
            self.w - self.r,
            self.l - 6.0,
            py + 4.0,
        );
    }

    /// The x axis's caption, under its labels.
    fn x_label(&self, svg: &mut String, text: &str) {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{text}</text>",
            (self.l + self.w - self.r) / 2.0,
            self.h - 12.0
        );
    }

    /// Line number `index` through `points` (in pixels), with a dot at each point when `markers`, and its
    /// legend entry right of the plot.
    fn line(&self, svg: &mut String, index: usize, name: &str, points: &[(f64, f64)], markers: bool) {
        const COLOURS: [&str; 6] = ["#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b"];
        let colour = COLOURS[index % COLOURS.len()];
        let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        if markers {
            for (x, y) in points {
                let _ = writeln!(svg, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\"/>");
            }
        }
        let legend_x = self.w - self.r;
        let ly = self.t + 10.0 + index as f64 * 18.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\">{name}</text>",
            legend_x + 10.0,
            legend_x + 30.0,
            legend_x + 36.0,
            ly + 4.0,
        );
    }
}
