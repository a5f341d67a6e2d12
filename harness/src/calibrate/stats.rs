//! Small statistics of measurements: quantiles and a least-squares fit.

/// The median of `v` (sorts `v`); NaN when empty.
pub(super) fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

/// The `q`-quantile of `v` (sorts `v`); NaN when empty.
pub(super) fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Least squares: `rows` of (x, y); returns the coefficients or `None` when singular.
pub(super) fn least_squares<const K: usize>(rows: &[([f64; K], f64)]) -> Option<[f64; K]> {
    let mut m = [[0.0f64; K]; K];
    let mut v = [0.0f64; K];
    for (x, y) in rows {
        for i in 0..K {
            v[i] += x[i] * y;
            for j in 0..K {
                m[i][j] += x[i] * x[j];
            }
        }
    }
    // Gauss-Jordan elimination with partial pivoting on the normal equations.
    for c in 0..K {
        let p = (c..K).max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()))?;
        if m[p][c].abs() < 1e-12 {
            return None;
        }
        m.swap(c, p);
        v.swap(c, p);
        let (pivot, vc) = (m[c], v[c]);
        for (r, (row, vr)) in m.iter_mut().zip(v.iter_mut()).enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, px) in row.iter_mut().zip(pivot.iter()).skip(c) {
                    *x -= f * px;
                }
                *vr -= f * vc;
            }
        }
    }
    let mut out = [0.0; K];
    for (i, o) in out.iter_mut().enumerate() {
        *o = v[i] / m[i][i];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_plane() {
        let rows: Vec<([f64; 3], f64)> = [
            (4.0, 312.0),
            (16.0, 1248.0),
            (64.0, 4992.0),
            (64.0, 89600.0),
        ]
        .iter()
        .map(|&(n, b)| ([n, b, 1.0], 30.0 * n + 0.5 * b + 200.0))
        .collect();
        let c = least_squares(&rows).unwrap();
        assert!((c[0] - 30.0).abs() < 1e-6, "{c:?}");
        assert!((c[1] - 0.5).abs() < 1e-9, "{c:?}");
        assert!((c[2] - 200.0).abs() < 1e-6, "{c:?}");
        // Two identical rows cannot give three coefficients.
        assert!(least_squares(&rows[..1]).is_none());
    }

    #[test]
    fn quantiles() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&mut v), 3.0);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        assert!(median(&mut []).is_nan());
    }
}
