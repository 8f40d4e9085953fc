//! Every style in every format, read back: the PNG decodes at the figure's size, the SVG parses
//! (its text in the embedded font), the PDF is a PDF with that font embedded; and the text
//! really is drawn.

use super::*;

fn figure(title: &str) -> Figure {
    let cdf = |name: &str, scale: f64| Series {
        name: name.to_owned(),
        points: (1..=20).map(|k| (f64::from(k) * scale, f64::from(k) / 20.0)).collect(),
    };
    Figure {
        panels: vec![
            Panel {
                title: title.to_owned(),
                x_label: "TTFT (ms)".into(),
                y_label: "fraction of calls".into(),
                style: Style::Lines,
                series: vec![cdf("real", 10.0), cdf("sim", 11.0)],
            },
            Panel {
                title: "E2E, paired".into(),
                x_label: "real E2E (ms)".into(),
                y_label: "E2E (ms)".into(),
                style: Style::Points { diagonal: true },
                series: vec![Series { name: "sim".into(), points: vec![(1.0, 1.2), (2.0, 1.9), (3.0, 3.3)] }],
            },
            Panel {
                title: "empty".into(),
                x_label: "time (s)".into(),
                y_label: "tokens/s".into(),
                style: Style::Lines,
                series: Vec::new(),
            },
        ],
    }
}

fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = ::png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    (info.width, info.height, pixels)
}

#[test]
fn a_figure_renders_to_png_svg_and_pdf_that_read_back() {
    let f = figure("TTFT");
    assert_eq!(size(&f), (1120, 800), "three panels: two columns, two rows");
    let (width, height, pixels) = decode_png(&render(&f, Format::Png).unwrap());
    assert_eq!((width, height), size(&f));
    assert!(pixels.iter().any(|&v| v < 100), "something is drawn");

    let svg = String::from_utf8(render(&f, Format::Svg).unwrap()).unwrap();
    let options = svg2pdf::usvg::Options { fontdb: font_database(), ..Default::default() };
    let tree = svg2pdf::usvg::Tree::from_str(&svg, &options).unwrap();
    assert_eq!((tree.size().width(), tree.size().height()), (1120.0, 800.0));
    for label in ["TTFT (ms)", "fraction of calls", "real", "sim", "y = x"] {
        assert!(svg.contains(&format!(">{label}<")) || svg.contains(label), "the SVG names {label}");
    }

    let pdf = render(&f, Format::Pdf).unwrap();
    assert!(pdf.starts_with(b"%PDF-"), "a PDF header");
    assert!(pdf.windows(5).any(|w| w == b"%%EOF"), "a PDF trailer");
    assert!(pdf.windows(10).any(|w| w == b"DejaVuSans"), "the embedded font is in the PDF");
}

#[test]
fn text_is_drawn_with_the_embedded_font() {
    // The same figure with and without a title differs in pixels only where the title is set.
    let (_, _, titled) = decode_png(&render(&figure("A title in the embedded font"), Format::Png).unwrap());
    let (_, _, untitled) = decode_png(&render(&figure(""), Format::Png).unwrap());
    let differing = titled.iter().zip(&untitled).filter(|(a, b)| a != b).count();
    assert!(differing > 200, "only {differing} bytes differ: the title was not drawn");
}

#[test]
fn formats_come_from_extensions() {
    use std::path::Path;
    assert_eq!(Format::from_path(Path::new("a/b.PNG")), Some(Format::Png));
    assert_eq!(Format::from_path(Path::new("b.svg")), Some(Format::Svg));
    assert_eq!(Format::from_path(Path::new("b.pdf")), Some(Format::Pdf));
    assert_eq!(Format::from_path(Path::new("b.jpg")), None);
    assert_eq!(Format::from_path(Path::new("b")), None);
}
