//! PNG line charts (plotters, bitmap backend). A run's plots
//! ([`SimResult::write`](crate::result::SimResult::write)), a sweep's and the
//! harness's are all drawn by [`line_chart`].
//!
//! Text is drawn with a TrueType font loaded at run time from the usual
//! system locations (DejaVu / Liberation); with no font found the plots are
//! drawn without text rather than failing, since headless hosts differ.

use crate::output::WriteError;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// True once a font is registered under "sans-serif".
fn have_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        for path in FONT_CANDIDATES {
            if let Ok(bytes) = std::fs::read(path) {
                // Fonts live for the whole process; leaking one copy is intended.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// One line of a plot.
#[derive(Debug)]
pub struct Series<'a> {
    /// Legend label.
    pub label: &'a str,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
}

/// Colour of series `i`.
fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

fn plot_err(path: &Path, e: impl std::fmt::Display) -> WriteError {
    WriteError::Plot {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Draw `series` as lines (with point marks when `marks`) into a 640×400 PNG.
/// `hline` draws a dashed-looking horizontal reference (e.g. the interrupt baseline).
/// A point whose y is not finite (NaN) is a gap: the line stops before it and
/// starts again after it.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    hline: Option<(&str, f64)>,
    marks: bool,
) -> Result<(), WriteError> {
    line_chart_marked(path, title, x_label, y_label, series, hline, marks, &[])
}

/// [`line_chart`] with vertical markers: at each `(x, label)` of `events` a
/// grey vertical line, labelled at its top (e.g. the moment a policy was
/// switched on).
#[allow(clippy::too_many_arguments)]
pub fn line_chart_marked(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    hline: Option<(&str, f64)>,
    marks: bool,
    events: &[(f64, &str)],
) -> Result<(), WriteError> {
    let text = have_font();
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    // A gap's x still belongs to the axis; its y does not.
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if y.is_finite() {
            y1 = y1.max(y);
        }
    }
    if let Some((_, y)) = hline {
        y1 = y1.max(y);
    }
    if x0 >= x1 {
        x0 = 0.0;
        x1 = x1.max(1.0);
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.08 };
    let root = BitMapBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let mut b = ChartBuilder::on(&root);
    b.margin(12);
    if text {
        b.caption(title, ("sans-serif", 18))
            .x_label_area_size(40)
            .y_label_area_size(56);
    } else {
        b.x_label_area_size(8).y_label_area_size(8);
    }
    let mut chart = b
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(|e| plot_err(path, e))?;
    let mut mesh = chart.configure_mesh();
    // No minor grid: it triples the PNG size for little reading value.
    mesh.light_line_style(WHITE);
    if text {
        mesh.x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 13));
    } else {
        mesh.disable_x_mesh()
            .disable_y_mesh()
            .x_labels(0)
            .y_labels(0);
    }
    mesh.draw().map_err(|e| plot_err(path, e))?;
    for (i, s) in series.iter().enumerate() {
        let c = colour(i);
        // One path per run of finite points: a NaN is a gap.
        let runs: Vec<Vec<(f64, f64)>> = s
            .points
            .split(|(_, y)| !y.is_finite())
            .filter(|run| !run.is_empty())
            .map(<[(f64, f64)]>::to_vec)
            .collect();
        let line = chart
            .draw_series(
                runs.into_iter()
                    .map(|run| PathElement::new(run, c.stroke_width(2))),
            )
            .map_err(|e| plot_err(path, e))?;
        if text {
            line.label(s.label).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
            });
        }
        if marks {
            chart
                .draw_series(
                    s.points
                        .iter()
                        .filter(|(_, y)| y.is_finite())
                        .map(|&(x, y)| Circle::new((x, y), 2, c.filled())),
                )
                .map_err(|e| plot_err(path, e))?;
        }
    }
    for &(x, label) in events {
        let grey = RGBColor(90, 90, 90);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, y1)],
                grey.stroke_width(1),
            )))
            .map_err(|e| plot_err(path, e))?;
        if text {
            chart
                .draw_series(std::iter::once(Text::new(
                    format!(" {label}"),
                    (x, y1 * 0.97),
                    ("sans-serif", 12).into_font().color(&grey),
                )))
                .map_err(|e| plot_err(path, e))?;
        }
    }
    if let Some((label, y)) = hline {
        let grey = RGBColor(90, 90, 90);
        let l = chart
            .draw_series(LineSeries::new(
                vec![(x0, y), (x1, y)],
                grey.stroke_width(1),
            ))
            .map_err(|e| plot_err(path, e))?;
        if text {
            l.label(label).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], grey.stroke_width(1))
            });
        }
    }
    if text && (series.len() > 1 || hline.is_some()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| plot_err(path, e))?;
    }
    root.present().map_err(|e| plot_err(path, e))
}
