//! A figure as the report shows it: the median of a set of runs with their
//! range.

/// Median with the range of a set of runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Number of values.
    pub n: usize,
}

impl Spread {
    /// The spread of the finite `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// `12.3 (11.9–12.8)` with `prec` decimals; a single value alone.
    pub fn show(&self, prec: usize) -> String {
        if self.n == 1 || self.min == self.max {
            format!("{:.*}", prec, self.median)
        } else {
            format!(
                "{:.*} ({:.*}–{:.*})",
                prec, self.median, prec, self.min, prec, self.max
            )
        }
    }
}

/// Cell text for an optional spread: [`Spread::show`], or `–` for none.
pub fn cell(s: Option<Spread>, prec: usize) -> String {
    s.map_or_else(|| "–".to_string(), |s| s.show(prec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_odd_even_and_empty() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[f64::NAN]).is_none());
        assert_eq!(s.show(1), "2.0 (1.0–3.0)");
        assert_eq!(Spread::of(&[5.0]).unwrap().show(2), "5.00");
    }

    #[test]
    fn cells_show_a_dash_for_nothing() {
        assert_eq!(cell(None, 1), "–");
        assert_eq!(cell(Spread::of(&[1.0, 3.0]), 0), "2 (1–3)");
    }
}
