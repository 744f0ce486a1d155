//! Results as people read them (tables) and as programs read them (CSV,
//! JSON), and line plots as SVG.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One row of results: named fields, each a number or a string.
#[derive(Debug, Clone)]
pub struct Record {
    pub fields: Vec<(&'static str, Field)>,
}

#[derive(Debug, Clone)]
pub enum Field {
    Text(String),
    Number(f64),
}

impl Field {
    fn csv(&self) -> String {
        match self {
            Field::Text(s) => s.clone(),
            Field::Number(n) => format_number(*n),
        }
    }

    fn json(&self) -> String {
        match self {
            Field::Text(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
            Field::Number(n) if n.is_finite() => format_number(*n),
            Field::Number(_) => "null".to_owned(),
        }
    }
}

fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n:.6}")
    }
}

/// Writes `records` as `name.csv` and `name.json` in `dir`; returns the paths.
pub fn write_records(dir: &Path, name: &str, records: &[Record]) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut csv = String::new();
    if let Some(first) = records.first() {
        let header: Vec<&str> = first.fields.iter().map(|(k, _)| *k).collect();
        csv.push_str(&header.join(","));
        csv.push('\n');
    }
    let mut json = String::from("[\n");
    for (i, record) in records.iter().enumerate() {
        let row: Vec<String> = record.fields.iter().map(|(_, v)| v.csv()).collect();
        csv.push_str(&row.join(","));
        csv.push('\n');
        let object: Vec<String> = record
            .fields
            .iter()
            .map(|(k, v)| format!("\"{k}\": {}", v.json()))
            .collect();
        let comma = if i + 1 < records.len() { "," } else { "" };
        let _ = writeln!(json, "  {{{}}}{comma}", object.join(", "));
    }
    json.push_str("]\n");
    let csv_path = dir.join(format!("{name}.csv"));
    let json_path = dir.join(format!("{name}.json"));
    fs::write(&csv_path, csv)?;
    fs::write(&json_path, json)?;
    Ok(vec![csv_path, json_path])
}

/// A line plot: one series per name, y against x.
pub struct Plot<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

const COLOURS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#7f7f7f",
    "#bcbd22", "#e377c2",
];

impl Plot<'_> {
    /// The plot as an SVG document.
    pub fn svg(&self) -> String {
        let (width, height) = (960.0, 420.0);
        let (left, right, top, bottom) = (70.0, 390.0, 40.0, 50.0);
        let points = self.series.iter().flat_map(|(_, p)| p.iter());
        let (mut x_max, mut y_max) = (0f64, 0f64);
        let mut x_min = f64::MAX;
        for &(x, y) in points {
            x_max = x_max.max(x);
            x_min = x_min.min(x);
            y_max = y_max.max(y);
        }
        if x_min == f64::MAX {
            x_min = 0.0;
        }
        let x_min = x_min.min(0.0);
        let y_max = nice_ceiling(y_max);
        let x_max = if x_max > x_min { x_max } else { x_min + 1.0 };
        let plot_w = width - left - right;
        let plot_h = height - top - bottom;
        let sx = |x: f64| left + (x - x_min) / (x_max - x_min) * plot_w;
        let sy = |y: f64| top + plot_h - y / y_max * plot_h;
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
            width / 2.0,
            escape(self.title)
        );
        for i in 0..=5 {
            let y = y_max * f64::from(i) / 5.0;
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left + plot_w,
                left - 6.0,
                sy(y) + 4.0,
                short(y),
                py = sy(y)
            );
        }
        let xs: Vec<f64> = {
            let mut xs: Vec<f64> = self
                .series
                .iter()
                .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
                .collect();
            xs.sort_by(f64::total_cmp);
            xs.dedup();
            // A tick per measured x (sizes, thread counts) while they are
            // few; evenly spaced ones when the xs are measurements too.
            if xs.len() > 12 {
                let step = nice_ceiling((x_max - x_min) / 5.0);
                (0..)
                    .map(|i| x_min + step * f64::from(i))
                    .take_while(|x| *x <= x_max)
                    .collect()
            } else {
                xs
            }
        };
        for x in &xs {
            let _ = writeln!(
                svg,
                "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#333\"/><text x=\"{px:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                top + plot_h,
                top + plot_h + 5.0,
                top + plot_h + 18.0,
                short(*x),
                px = sx(*x)
            );
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" x2=\"{left}\" y1=\"{top}\" y2=\"{}\" stroke=\"#333\"/><line x1=\"{left}\" x2=\"{}\" y1=\"{b}\" y2=\"{b}\" stroke=\"#333\"/>",
            top + plot_h,
            left + plot_w,
            b = top + plot_h
        );
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text><text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            left + plot_w / 2.0,
            height - 10.0,
            escape(self.x_label),
            top + plot_h / 2.0,
            escape(self.y_label)
        );
        for (i, (name, points)) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let path: Vec<String> = points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                .collect();
            // Series measured the fine-grained way are drawn dashed.
            let dash = if name.ends_with("-per-frame") {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            };
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
                path.join(" ")
            );
            for &(x, y) in points {
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>",
                    sx(x),
                    sy(y)
                );
            }
            let ly = top + 10.0 + 18.0 * i as f64;
            let lx = left + plot_w + 15.0;
            let _ = writeln!(
                svg,
                "<line x1=\"{lx}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>",
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                escape(name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// Writes the plot as `stem.svg` and `stem.png`; returns the paths.
pub fn write_plot(plot: &Plot<'_>, stem: &Path) -> Result<Vec<PathBuf>, String> {
    let svg = plot.svg();
    let svg_path = stem.with_extension("svg");
    fs::write(&svg_path, &svg).map_err(|e| format!("{}: {e}", svg_path.display()))?;
    let png_path = stem.with_extension("png");
    let mut options = resvg::usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    // "sans-serif" means Arial to the renderer; use a sans face that is
    // installed, or any face at all.
    let installed = |name: &str| {
        fonts
            .faces()
            .any(|f| f.families.iter().any(|(n, _)| n == name))
    };
    let family = ["DejaVu Sans", "Liberation Sans", "Noto Sans", "Arial"]
        .into_iter()
        .find(|name| installed(name))
        .map(str::to_owned)
        .or_else(|| {
            fonts
                .faces()
                .next()
                .and_then(|f| f.families.first())
                .map(|(n, _)| n.clone())
        });
    if let Some(family) = family {
        fonts.set_sans_serif_family(family);
    }
    let tree = resvg::usvg::Tree::from_str(&svg, &options).map_err(|e| format!("plot: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("plot: empty image")?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .save_png(&png_path)
        .map_err(|e| format!("{}: {e}", png_path.display()))?;
    Ok(vec![svg_path, png_path])
}

fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if step * magnitude >= value {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

fn short(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{}", value as i64)
    } else {
        format!("{value:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Tells the user which files were written.
pub fn print_written(files: &[PathBuf]) {
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    println!("written: {}", names.join(", "));
}

/// The median of `samples` (the upper one of an even count).
pub fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A progress bar on stderr for `total` steps, hidden when stderr is not a
/// terminal.
pub fn progress(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}
