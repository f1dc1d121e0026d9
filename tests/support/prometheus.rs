#![allow(dead_code)]
//! A strict parser of the Prometheus text exposition format (version 0.0.4), so that
//! tests read `/metrics` the way Prometheus does instead of searching for substrings.
//! Each test binary uses only part of the support modules.
//!
//! Checked: `# HELP` and `# TYPE` lines, one `# TYPE` per family and before its
//! samples, samples of a family kept together, metric and label names, label value
//! escapes, values (including `+Inf`, `-Inf`, `NaN`), no duplicate series, and for
//! histograms: cumulative buckets in increasing `le` ending in `+Inf` equal to
//! `_count`, with `_sum` present.

use std::collections::{BTreeMap, BTreeSet};

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A metric family: its `# TYPE`, `# HELP` and samples in order.
#[derive(Clone, Debug, Default)]
pub struct Family {
    pub kind: String,
    pub help: Option<String>,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

impl Exposition {
    pub fn family(&self, name: &str) -> &Family {
        self.families
            .get(name)
            .unwrap_or_else(|| panic!("no metric family {name} in the exposition"))
    }

    /// The value of the sample `name` whose labels include `labels`; panics unless
    /// exactly one matches.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let matching: Vec<&Sample> = self
            .families
            .values()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        match matching.as_slice() {
            [one] => one.value,
            [] => panic!("no sample {name} with labels {labels:?}"),
            many => panic!("{} samples {name} match {labels:?}: {many:?}", many.len()),
        }
    }

    /// The distinct values of label `label` among the samples of `family`.
    pub fn label_values(&self, family: &str, label: &str) -> BTreeSet<String> {
        self.family(family)
            .samples
            .iter()
            .filter_map(|s| s.labels.get(label).cloned())
            .collect()
    }
}

/// Parses an exposition; the error names the line and what is wrong with it.
pub fn parse(text: &str) -> Result<Exposition, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the exposition does not end with a newline".into());
    }
    let mut out = Exposition::default();
    let mut finished: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut series: BTreeSet<(String, Vec<(String, String)>)> = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", i + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            let (keyword, name, tail) = (words.next(), words.next(), words.next());
            match (keyword, name) {
                (Some("HELP"), Some(name)) => {
                    check_metric_name(name).map_err(at)?;
                    let family = out.families.entry(name.to_string()).or_default();
                    if family.help.is_some() {
                        return Err(at("a second HELP".into()));
                    }
                    family.help = Some(unescape_help(tail.unwrap_or("")).map_err(at)?);
                }
                (Some("TYPE"), Some(name)) => {
                    check_metric_name(name).map_err(at)?;
                    let kind = tail.unwrap_or("");
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(at(format!("unknown type {kind:?}")));
                    }
                    let family = out.families.entry(name.to_string()).or_default();
                    if !family.kind.is_empty() {
                        return Err(at("a second TYPE".into()));
                    }
                    if !family.samples.is_empty() {
                        return Err(at("TYPE after the family's samples".into()));
                    }
                    family.kind = kind.to_string();
                }
                _ => {} // other comments are allowed and ignored
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let sample = parse_sample(line).map_err(at)?;
        let family_name = family_of(&out, &sample.name)
            .ok_or_else(|| at(format!("sample {} has no TYPE line", sample.name)))?;
        if current.as_deref() != Some(family_name.as_str()) {
            if finished.contains(&family_name) {
                return Err(at(format!("samples of {family_name} are not together")));
            }
            if let Some(previous) = current.replace(family_name.clone()) {
                finished.insert(previous);
            }
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
            return Err(at("a duplicate series".into()));
        }
        out.families
            .get_mut(&family_name)
            .ok_or_else(|| at("family vanished".into()))?
            .samples
            .push(sample);
    }
    for (name, family) in &out.families {
        if family.kind.is_empty() {
            return Err(format!("family {name} has HELP but no TYPE"));
        }
        if family.kind == "histogram" {
            check_histogram(name, family)?;
        }
    }
    Ok(out)
}

/// The family a sample belongs to: its own name, or for histograms and summaries
/// the name without `_bucket`, `_sum` or `_count`.
fn family_of(out: &Exposition, sample: &str) -> Option<String> {
    if out.families.get(sample).is_some_and(|f| !f.kind.is_empty()) {
        return Some(sample.to_string());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix)
            && let Some(f) = out.families.get(base)
            && (f.kind == "histogram" || (f.kind == "summary" && suffix != "_bucket"))
        {
            return Some(base.to_string());
        }
    }
    None
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if ok {
        Ok(())
    } else {
        Err(format!("invalid metric name {name:?}"))
    }
}

fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("invalid label name {name:?}"))
    }
}

fn unescape_help(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            other => return Err(format!("invalid escape \\{other:?} in HELP")),
        }
    }
    Ok(out)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("a sample without a value")?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after_brace)?;
        labels = parsed;
        rest = after;
    }
    let rest = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let mut fields = rest.split(' ');
    let value = fields.next().ok_or("no value")?;
    let value = parse_value(value)?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("invalid timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("text after the timestamp".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `name="value",...}` and returns the labels and the text after the brace.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s.find('=').ok_or("a label without '='")?;
        let name = &s[..eq];
        check_label_name(name)?;
        s = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("a label value without quotes")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let close = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("invalid escape in a label value: {other:?}")),
                },
                Some((_, c)) => value.push(c),
                None => return Err("an unterminated label value".into()),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} given twice"));
        }
        s = &s[close + 1..];
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err("labels not separated by ','".into());
        }
    }
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse::<f64>().map_err(|_| format!("invalid value {s:?}")),
    }
}

/// Per label set (without `le`): buckets in increasing `le`, cumulative, ending in
/// `+Inf` equal to `_count`, and a `_sum`.
fn check_histogram(name: &str, family: &Family) -> Result<(), String> {
    let mut sets: BTreeMap<Vec<(String, String)>, Vec<&Sample>> = BTreeMap::new();
    for s in &family.samples {
        let key = s
            .labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        sets.entry(key).or_default().push(s);
    }
    if sets.is_empty() {
        return Err(format!("histogram {name} has no samples"));
    }
    for (labels, samples) in sets {
        let what = format!("histogram {name}{labels:?}");
        let buckets: Vec<&&Sample> = samples
            .iter()
            .filter(|s| s.name == format!("{name}_bucket"))
            .collect();
        let mut previous_le = f64::NEG_INFINITY;
        let mut previous_count = 0.0;
        for b in &buckets {
            let le = b
                .labels
                .get("le")
                .ok_or_else(|| format!("{what}: a bucket without le"))?;
            let le = parse_value(le)?;
            if le <= previous_le {
                return Err(format!("{what}: le {le} does not increase"));
            }
            if b.value < previous_count {
                return Err(format!("{what}: bucket le={le} is not cumulative"));
            }
            previous_le = le;
            previous_count = b.value;
        }
        if previous_le != f64::INFINITY {
            return Err(format!("{what}: the last bucket is not le=\"+Inf\""));
        }
        let count = samples
            .iter()
            .find(|s| s.name == format!("{name}_count"))
            .ok_or_else(|| format!("{what}: no _count"))?;
        if count.value != previous_count {
            return Err(format!(
                "{what}: +Inf bucket {previous_count} differs from _count {}",
                count.value
            ));
        }
        if !samples.iter().any(|s| s.name == format!("{name}_sum")) {
            return Err(format!("{what}: no _sum"));
        }
    }
    Ok(())
}
