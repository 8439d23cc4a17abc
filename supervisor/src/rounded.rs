//! Durations for people: `1.25 s`, `312 ms`, `4.7 ms`, `45 µs`, not `1.249604805s`.

use std::fmt;
use std::time::Duration;

/// Shows a duration with two or three significant figures and a unit: `format!("{}", Rounded(d))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rounded(pub Duration);

impl fmt::Display for Rounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        let (value, unit) = if d >= Duration::from_secs(1) {
            (d.as_secs_f64(), "s")
        } else if d >= Duration::from_millis(1) {
            (d.as_secs_f64() * 1e3, "ms")
        } else if d >= Duration::from_micros(1) {
            (d.as_secs_f64() * 1e6, "µs")
        } else {
            return write!(f, "{} ns", d.as_nanos());
        };
        match value {
            v if v >= 100.0 || (unit != "s" && v >= 10.0) => write!(f, "{v:.0} {unit}"),
            v if v >= 10.0 => write!(f, "{v:.1} {unit}"),
            v if unit == "s" => write!(f, "{v:.2} {unit}"),
            v => write!(f, "{v:.1} {unit}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_rounded_with_a_unit() {
        let show = |d: Duration| Rounded(d).to_string();
        assert_eq!(show(Duration::from_nanos(1_249_604_805)), "1.25 s");
        assert_eq!(show(Duration::from_secs(42)), "42.0 s");
        assert_eq!(show(Duration::from_secs(3600)), "3600 s");
        assert_eq!(show(Duration::from_micros(312_400)), "312 ms");
        assert_eq!(show(Duration::from_micros(4_740)), "4.7 ms");
        assert_eq!(show(Duration::from_nanos(45_300)), "45 µs");
        assert_eq!(show(Duration::from_nanos(2_500)), "2.5 µs");
        assert_eq!(show(Duration::from_nanos(800)), "800 ns");
        assert_eq!(show(Duration::ZERO), "0 ns");
    }
}
