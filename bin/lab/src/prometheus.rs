//! A strict reader of the Prometheus text exposition format (version
//! 0.0.4), for tests of what mpbridge serves at `/metrics`. It accepts
//! less than Prometheus does: every sample's family must have its `# HELP`
//! and `# TYPE` lines before the first sample, a family's lines must be one
//! group, a counter's name must end in `_total`, and no series may repeat.

use std::collections::{BTreeMap, BTreeSet};

/// One metric family: its `# HELP` text and `# TYPE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The HELP text, unescaped.
    pub help: String,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`.
    pub kind: String,
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// Its labels, values unescaped.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// A whole exposition, checked.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// Every family, by name.
    pub families: BTreeMap<String, Family>,
    /// Every sample, in order.
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The samples of metric `name`.
    pub fn series(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }

    /// The value of the one series of `name` whose labels include `labels`;
    /// `None` when there is none, a panic when there are several.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<&Sample> = self
            .series(name)
            .into_iter()
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert!(
            matching.len() <= 1,
            "{} series of {name} match {labels:?}",
            matching.len()
        );
        matching.first().map(|s| s.value)
    }
}

/// Whether `name` is a valid metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// Whether `name` is a valid label name: `[a-zA-Z_][a-zA-Z0-9_]*`, not
/// starting with `__` (reserved).
pub fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with("__")
}

const KINDS: [&str; 5] = ["counter", "gauge", "histogram", "summary", "untyped"];

/// Reads and checks `text`; the error names the line and what is wrong.
pub fn parse(text: &str) -> Result<Exposition, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the text does not end in a newline".to_owned());
    }
    let mut out = Exposition::default();
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    // Families whose group of lines has ended: seeing one again is an error.
    let mut closed: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut series: BTreeSet<(String, Vec<(String, String)>)> = BTreeSet::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let fail = |what: String| format!("line {number}: {what}: {line:?}");
        if line.trim().is_empty() {
            continue;
        }
        let family = if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim_start_matches([' ', '\t']);
            let (keyword, rest) = rest.split_once([' ', '\t']).unwrap_or((rest, ""));
            if keyword != "HELP" && keyword != "TYPE" {
                continue; // a comment
            }
            let rest = rest.trim_start_matches([' ', '\t']);
            let (name, body) = rest.split_once([' ', '\t']).unwrap_or((rest, ""));
            if !is_metric_name(name) {
                return Err(fail(format!("invalid metric name {name:?}")));
            }
            if out
                .samples
                .iter()
                .any(|s| family_of(&s.name, &types) == name)
            {
                return Err(fail(format!("{keyword} for {name} after its samples")));
            }
            if keyword == "HELP" {
                let help = unescape_help(body).map_err(&fail)?;
                if help.trim().is_empty() {
                    return Err(fail(format!("empty HELP for {name}")));
                }
                if helps.insert(name.to_owned(), help).is_some() {
                    return Err(fail(format!("a second HELP for {name}")));
                }
            } else {
                let kind = body.trim();
                if !KINDS.contains(&kind) {
                    return Err(fail(format!("unknown TYPE {kind:?}")));
                }
                if kind == "counter" && !name.ends_with("_total") {
                    return Err(fail(format!("counter {name} does not end in _total")));
                }
                if types.insert(name.to_owned(), kind.to_owned()).is_some() {
                    return Err(fail(format!("a second TYPE for {name}")));
                }
            }
            name.to_owned()
        } else {
            let sample = parse_sample(line).map_err(&fail)?;
            let family = family_of(&sample.name, &types);
            let (Some(kind), Some(_)) = (types.get(&family), helps.get(&family)) else {
                return Err(fail(format!("no HELP and TYPE before {}", sample.name)));
            };
            if kind == "counter" && (sample.value.is_nan() || sample.value < 0.0) {
                return Err(fail(format!("counter {} is negative or NaN", sample.name)));
            }
            let key = (
                sample.name.clone(),
                sample
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            if !series.insert(key) {
                return Err(fail("a duplicate series".to_owned()));
            }
            out.samples.push(sample);
            family
        };
        if current.as_deref() != Some(family.as_str()) {
            if closed.contains(&family) {
                return Err(fail(format!("{family}'s lines are not one group")));
            }
            if let Some(previous) = current.take() {
                closed.insert(previous);
            }
            current = Some(family);
        }
    }
    for (name, kind) in &types {
        let help = helps
            .remove(name)
            .ok_or_else(|| format!("TYPE for {name} without HELP"))?;
        out.families.insert(
            name.clone(),
            Family {
                help,
                kind: kind.clone(),
            },
        );
    }
    if let Some(name) = helps.keys().next() {
        return Err(format!("HELP for {name} without TYPE"));
    }
    Ok(out)
}

/// The family a sample named `name` belongs to: itself, or, for the
/// `_bucket`, `_sum` and `_count` series of a histogram or summary, that.
fn family_of(name: &str, types: &BTreeMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if matches!(
                types.get(base).map(String::as_str),
                Some("histogram" | "summary")
            ) {
                return base.to_owned();
            }
        }
    }
    name.to_owned()
}

/// HELP text: `\\` and `\n` are the only escapes.
fn unescape_help(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            other => return Err(format!("bad escape \\{other:?} in HELP")),
        }
    }
    Ok(out)
}

/// `name{label="value",...} value [timestamp]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
    let name = &line[..end];
    if !is_metric_name(name) {
        return Err(format!("invalid metric name {name:?}"));
    }
    let mut rest = &line[end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err("no blank between the series and its value".to_owned());
    }
    let mut fields = rest.split([' ', '\t']).filter(|f| !f.is_empty());
    let value = fields.next().ok_or("no value")?;
    let value = parse_value(value)?;
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("invalid timestamp {timestamp:?}"))?;
    }
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {extra:?} after the value"));
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The labels after `{`, up to and including `}`; returns them and the
/// text after the `}`.
fn parse_labels(mut text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = text.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = text.find('=').ok_or("a label without '='")?;
        let name = &text[..eq];
        if !is_label_name(name) {
            return Err(format!("invalid label name {name:?}"));
        }
        text = text[eq + 1..]
            .strip_prefix('"')
            .ok_or_else(|| format!("label {name}'s value is not quoted"))?;
        let mut value = String::new();
        let mut chars = text.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err(format!("label {name}'s value is not closed")),
                Some((at, '"')) => break at,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => {
                        return Err(format!(
                            "bad escape {:?} in label {name}",
                            other.map(|(_, c)| c)
                        ))
                    }
                },
                Some((_, '\n')) => return Err(format!("a raw newline in label {name}")),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        text = &text[close + 1..];
        if let Some(after) = text.strip_prefix(',') {
            text = after;
        } else if !text.starts_with('}') {
            return Err("labels not separated by ','".to_owned());
        }
    }
}

/// A sample value: a Go float, `NaN`, `+Inf` or `-Inf`.
fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => return Ok(f64::NAN),
        "+Inf" => return Ok(f64::INFINITY),
        "-Inf" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    // Rust also reads "inf", "infinity" and "nan", which Prometheus does not.
    let numeric = text
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    match text.parse::<f64>() {
        Ok(value) if numeric => Ok(value),
        _ => Err(format!("invalid value {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# HELP a_total Things.\n# TYPE a_total counter\n\
        a_total{x=\"1\",y=\"q\\\"\\\\\\n\"} 3\na_total{x=\"2\"} 4 1700000000000\n\
        # a comment\n# HELP g A gauge\\\\.\n# TYPE g gauge\ng -1.5e3\ng{z=\"\"} +Inf\n";

    #[test]
    fn reads_a_good_exposition() {
        let e = parse(GOOD).unwrap();
        assert_eq!(e.samples.len(), 4);
        assert_eq!(e.value("a_total", &[("x", "1")]), Some(3.0));
        assert_eq!(
            e.series("a_total")[0].labels["y"],
            "q\"\\\n",
            "escapes undone"
        );
        assert_eq!(e.families["g"].help, "A gauge\\.");
        assert_eq!(e.families["a_total"].kind, "counter");
        assert_eq!(e.value("g", &[("z", "")]), Some(f64::INFINITY));
    }

    #[test]
    fn refuses_what_the_format_or_our_rules_forbid() {
        let bad = [
            "a_total 1\n",                                              // no HELP/TYPE
            "# HELP a x\n# TYPE a counter\na 1\n",                      // counter without _total
            "# HELP a x\n# TYPE a gauge\na{b=\"1\"} 1\na{b=\"1\"} 2\n", // duplicate
            "# HELP a x\n# TYPE a gauge\na{b=1} 1\n",                   // unquoted
            "# HELP a x\n# TYPE a gauge\na{b=\"\\t\"} 1\n",             // bad escape
            "# HELP a x\n# TYPE a gauge\na{1b=\"\"} 1\n",               // label name
            "# HELP a x\n# TYPE a gauge\na one\n",                      // value
            "# HELP a x\n# TYPE a gauge\na inf\n",                      // Rust-only float
            "# HELP a x\n# TYPE a gauge\n1a 1\n",                       // metric name
            "# HELP a x\n# TYPE a gauge\na 1\n# HELP b y\n# TYPE b gauge\nb 1\na{c=\"\"} 2\n",
            "# HELP a x\n# TYPE a gauge\na 1", // no final newline
            "# HELP a x\n# TYPE a_total counter\na_total -1\n", // TYPE without HELP
        ];
        for text in bad {
            assert!(parse(text).is_err(), "accepted {text:?}");
        }
    }
}
