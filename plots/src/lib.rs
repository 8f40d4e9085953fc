//! Plots of runs side by side — the workspace's one plotting crate.
//!
//! A [`Figure`] is a grid of [`Panel`]s, each with labelled axes (units in the labels), a
//! legend naming its series, and either lines (CDFs, time series) or points (a paired scatter,
//! optionally with the y = x line). [`render`] draws it as PNG, SVG or PDF ([`Format`], chosen
//! by a file's extension). Drawing is plotters'; text is set in DejaVu Sans, embedded in the
//! binary (`fonts/`), so a machine without any system font renders the same labels. PNG is
//! plotters' bitmap backend encoded by the `png` crate; SVG is plotters' SVG backend; PDF is
//! that SVG converted by `svg2pdf` (vector PDF, the embedded font subset into it).

use std::fmt;
use std::sync::{Arc, OnceLock};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// DejaVu Sans (Bitstream Vera license, `fonts/LICENSE-DejaVu.txt`).
const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// The family name the drawing code asks for, and under which the embedded font is registered.
const FAMILY: &str = "sans-serif";

/// One panel's size, px (the PDF page takes the same size in points).
const PANEL: (u32, u32) = (560, 400);

/// The colours of series, in order (Okabe–Ito, readable for colour-blind eyes).
const PALETTE: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
];

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A PNG image.
    Png,
    /// An SVG document.
    Svg,
    /// A one-page PDF.
    Pdf,
}

impl Format {
    /// The format a file name's extension names (`.png`, `.svg`, `.pdf`, any case).
    pub fn from_path(path: &std::path::Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "png" => Some(Format::Png),
            "svg" => Some(Format::Svg),
            "pdf" => Some(Format::Pdf),
            _ => None,
        }
    }
}

/// How a panel draws its series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Each series a line through its points, in order.
    Lines,
    /// Each series as points, with the y = x line when `diagonal`.
    Points {
        /// Draw the y = x line.
        diagonal: bool,
    },
}

/// One named series of points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// Its points, (x, y).
    pub points: Vec<(f64, f64)>,
}

/// One panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    /// Its title.
    pub title: String,
    /// The x axis' label, with its unit.
    pub x_label: String,
    /// The y axis' label, with its unit.
    pub y_label: String,
    /// How the series are drawn.
    pub style: Style,
    /// The series.
    pub series: Vec<Series>,
}

/// A grid of panels.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// The panels, row by row.
    pub panels: Vec<Panel>,
}

/// Why a figure could not be drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotError(pub String);

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot draw the figure: {}", self.0)
    }
}

impl std::error::Error for PlotError {}

/// The grid's columns for `n` panels: up to two side by side.
fn columns(n: usize) -> usize {
    n.clamp(1, 2)
}

/// The whole figure's size, px.
pub fn size(figure: &Figure) -> (u32, u32) {
    let n = figure.panels.len().max(1);
    let cols = columns(n);
    let rows = n.div_ceil(cols);
    (PANEL.0 * cols as u32, PANEL.1 * rows as u32)
}

/// `figure` drawn in `format`: the file's bytes.
pub fn render(figure: &Figure, format: Format) -> Result<Vec<u8>, PlotError> {
    register_font()?;
    match format {
        Format::Png => png(figure),
        Format::Svg => svg(figure).map(String::into_bytes),
        Format::Pdf => pdf(&svg(figure)?),
    }
}

/// The embedded font, registered once for plotters' text.
fn register_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
                .map_err(|_| "the embedded font does not load".to_owned())
        })
        .clone()
        .map_err(PlotError)
}

fn png(figure: &Figure) -> Result<Vec<u8>, PlotError> {
    let (width, height) = size(figure);
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        draw(&root, figure)?;
        root.present().map_err(|e| PlotError(e.to_string()))?;
    }
    let mut bytes = Vec::new();
    let mut encoder = ::png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    encoder.set_compression(::png::Compression::Best);
    encoder.set_adaptive_filter(::png::AdaptiveFilterType::Adaptive);
    let mut writer = encoder.write_header().map_err(|e| PlotError(e.to_string()))?;
    writer.write_image_data(&pixels).map_err(|e| PlotError(e.to_string()))?;
    writer.finish().map_err(|e| PlotError(e.to_string()))?;
    Ok(bytes)
}

fn svg(figure: &Figure) -> Result<String, PlotError> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size(figure)).into_drawing_area();
        draw(&root, figure)?;
        root.present().map_err(|e| PlotError(e.to_string()))?;
    }
    Ok(text)
}

/// The SVG as a vector PDF, its text set in the embedded font.
fn pdf(svg: &str) -> Result<Vec<u8>, PlotError> {
    let mut options = svg2pdf::usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_font_data(FONT.to_vec());
    fonts.set_sans_serif_family("DejaVu Sans");
    options.font_family = "DejaVu Sans".to_owned();
    let tree = svg2pdf::usvg::Tree::from_str(svg, &options).map_err(|e| PlotError(e.to_string()))?;
    svg2pdf::to_pdf(&tree, svg2pdf::ConversionOptions::default(), svg2pdf::PageOptions::default())
        .map_err(|e| PlotError(e.to_string()))
}

/// A font database holding only the embedded font, for reading back an SVG this crate wrote.
pub fn font_database() -> Arc<svg2pdf::usvg::fontdb::Database> {
    let mut fonts = svg2pdf::usvg::fontdb::Database::new();
    fonts.load_font_data(FONT.to_vec());
    fonts.set_sans_serif_family("DejaVu Sans");
    Arc::new(fonts)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, figure: &Figure) -> Result<(), PlotError> {
    let error = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError(e.to_string());
    root.fill(&WHITE).map_err(error)?;
    let cols = columns(figure.panels.len());
    let rows = figure.panels.len().max(1).div_ceil(cols);
    let areas = root.split_evenly((rows, cols));
    for (panel, area) in figure.panels.iter().zip(&areas) {
        draw_panel(area, panel)?;
    }
    Ok(())
}

/// The range `values` span, widened a little (and around a lone value) so no point sits on the
/// frame.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
    if !low.is_finite() {
        return (0.0, 1.0);
    }
    let pad = if high > low { (high - low) * 0.03 } else { low.abs().max(1.0) * 0.05 };
    (low - pad, high + pad)
}

/// Decimals a tick label needs on an axis spanning `range`: enough to tell ticks a fifth of the
/// span apart, no more.
fn decimals(range: (f64, f64)) -> usize {
    let step = (range.1 - range.0) / 5.0;
    if step > 0.0 { (-libm::floor(libm::log10(step))).clamp(0.0, 6.0) as usize } else { 0 }
}

/// The corner whose box (the outer 40 % of each axis) holds the fewest points, so the legend
/// hides the least data; ties go to the lower right, then the upper right.
fn legend_corner(panel: &Panel, x: (f64, f64), y: (f64, f64)) -> SeriesLabelPosition {
    let (x_cut, y_cut) = ((x.1 - x.0) * 0.4, (y.1 - y.0) * 0.4);
    let count = |right: bool, upper: bool| {
        let points = panel.series.iter().flat_map(|s| s.points.iter());
        points
            .filter(|(px, py)| {
                let in_x = if right { *px >= x.1 - x_cut } else { *px <= x.0 + x_cut };
                let in_y = if upper { *py >= y.1 - y_cut } else { *py <= y.0 + y_cut };
                in_x && in_y
            })
            .count()
    };
    let corners = [
        (SeriesLabelPosition::LowerRight, count(true, false)),
        (SeriesLabelPosition::UpperRight, count(true, true)),
        (SeriesLabelPosition::UpperLeft, count(false, true)),
        (SeriesLabelPosition::LowerLeft, count(false, false)),
    ];
    let fewest = corners.iter().map(|c| c.1).min().unwrap_or(0);
    corners.into_iter().find(|c| c.1 == fewest).map_or(SeriesLabelPosition::LowerRight, |c| c.0)
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panel: &Panel) -> Result<(), PlotError> {
    let error = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError(e.to_string());
    let points = || panel.series.iter().flat_map(|s| s.points.iter());
    let (mut x_range, mut y_range) = (span(points().map(|p| p.0)), span(points().map(|p| p.1)));
    if let Style::Points { diagonal: true } = panel.style {
        // One square range on both axes, so y = x is the diagonal.
        let both = (x_range.0.min(y_range.0), x_range.1.max(y_range.1));
        (x_range, y_range) = (both, both);
    }
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range.0..x_range.1, y_range.0..y_range.1)
        .map_err(error)?;
    let (x_digits, y_digits) = (decimals(x_range), decimals(y_range));
    chart
        .configure_mesh()
        .x_labels(7)
        .y_labels(8)
        .x_label_formatter(&|v| format!("{v:.x_digits$}"))
        .y_label_formatter(&|v| format!("{v:.y_digits$}"))
        .max_light_lines(1)
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(error)?;
    if let Style::Points { diagonal: true } = panel.style {
        chart
            .draw_series(LineSeries::new([(x_range.0, x_range.0), (x_range.1, x_range.1)], BLACK.mix(0.5)))
            .map_err(error)?
            .label("y = x")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.mix(0.5)));
    }
    for (k, series) in panel.series.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let drawn = match panel.style {
            Style::Lines => chart
                .draw_series(LineSeries::new(series.points.iter().copied(), colour.stroke_width(2)))
                .map_err(error)?,
            Style::Points { .. } => chart
                .draw_series(series.points.iter().map(|&p| Circle::new(p, 2, colour.mix(0.6).filled())))
                .map_err(error)?,
        };
        drawn
            .label(&series.name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .position(legend_corner(panel, x_range, y_range))
        .draw()
        .map_err(error)?;
    Ok(())
}

#[cfg(test)]
mod tests;
