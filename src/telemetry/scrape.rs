//! Test-only reader of the Prometheus text format, written against the format description rather
//! than against our renderer, so tests check what a scraper would see.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

/// A parsed exposition: `# TYPE` per family and every sample.
#[derive(Debug, Default)]
pub(crate) struct Exposition {
    pub(crate) types: BTreeMap<String, String>,
    pub(crate) samples: Vec<Sample>,
}

impl Exposition {
    /// Parses `text`, panicking with the offending line on anything malformed.
    pub(crate) fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect(line);
                out.types.insert(name.to_owned(), kind.to_owned());
            } else if line.starts_with('#') || line.trim().is_empty() {
                continue;
            } else {
                out.samples.push(parse_sample(line));
            }
        }
        out
    }

    /// The value of the one sample named `name` whose labels include all of `labels`.
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = self.samples.iter().filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        });
        let first = found.next()?;
        assert!(found.next().is_none(), "{name} {labels:?} is ambiguous");
        Some(first.value)
    }

    /// The sorted label names used by samples named `name`.
    pub(crate) fn label_names(&self, name: &str) -> Vec<Vec<String>> {
        let mut names: Vec<Vec<String>> = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.labels.keys().cloned().collect())
            .collect();
        names.dedup();
        names
    }
}

fn parse_sample(line: &str) -> Sample {
    let (head, value) = line.rsplit_once(' ').expect(line);
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().expect(line),
    };
    let (name, labels) = match head.split_once('{') {
        None => (head, BTreeMap::new()),
        Some((name, rest)) => (
            name,
            parse_labels(rest.strip_suffix('}').expect(line), line),
        ),
    };
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "bad metric name in {line}"
    );
    Sample {
        name: name.to_owned(),
        labels,
        value,
    }
}

fn parse_labels(mut rest: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect(line);
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect(line) {
                (i, '"') => break i,
                (_, '\\') => match chars.next().expect(line).1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        assert!(labels.insert(key.to_owned(), value).is_none(), "{line}");
        rest = after[end + 1..]
            .strip_prefix(',')
            .unwrap_or(&after[end + 1..]);
    }
    labels
}
