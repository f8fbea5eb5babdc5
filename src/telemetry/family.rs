//! Metric families and their Prometheus text exposition (format 0.0.4, the one the kubelet's
//! `/metrics` serves): counters, gauges and histograms keyed by label values.
//!
//! Owns only in-memory values and their rendering. Must never know metric names beyond the ones it
//! is handed, and never block on anything but its own short mutex.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Label values of one series, in the order of the family's label names.
type Key = Vec<String>;

/// What a family renders as in its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// A counter or gauge family: one `f64` per label-value combination.
#[derive(Debug)]
pub(crate) struct ScalarFamily {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    kind: Kind,
    series: Mutex<BTreeMap<Key, f64>>,
}

/// Buckets, sum and count of one histogram series.
#[derive(Debug, Clone)]
struct HistogramSeries {
    /// Non-cumulative count per bucket; cumulated when rendered.
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

/// A histogram family with fixed upper bounds (the `+Inf` bucket is implied).
#[derive(Debug)]
pub(crate) struct HistogramFamily {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    bounds: &'static [f64],
    series: Mutex<BTreeMap<Key, HistogramSeries>>,
}

impl ScalarFamily {
    /// A counter; `name` must already end in `_total` where the kubelet's does.
    pub(crate) fn counter(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Self {
        Self::new(name, help, labels, Kind::Counter)
    }

    /// A gauge.
    pub(crate) fn gauge(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Self {
        Self::new(name, help, labels, Kind::Gauge)
    }

    fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        kind: Kind,
    ) -> Self {
        Self {
            name,
            help,
            labels,
            kind,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Adds `by` to the series (created at zero when new). Counters only ever get `by >= 0`.
    pub(crate) fn add(&self, values: &[&str], by: f64) {
        debug_assert_eq!(values.len(), self.labels.len(), "{}", self.name);
        let mut series = lock(&self.series);
        *series.entry(key(values)).or_insert(0.0) += by;
    }

    /// Sets the series to `value`.
    pub(crate) fn set(&self, values: &[&str], value: f64) {
        debug_assert_eq!(values.len(), self.labels.len(), "{}", self.name);
        lock(&self.series).insert(key(values), value);
    }

    /// Replaces every series at once: a scrape sees the old set or the new one, never a mix.
    pub(crate) fn replace(&self, series: impl IntoIterator<Item = (Key, f64)>) {
        let next: BTreeMap<Key, f64> = series.into_iter().collect();
        *lock(&self.series) = next;
    }

    /// Drops every series (a gauge whose label set is rebuilt from scratch).
    pub(crate) fn clear(&self) {
        lock(&self.series).clear();
    }

    /// The current value of one series, if it exists.
    pub(crate) fn get(&self, values: &[&str]) -> Option<f64> {
        lock(&self.series).get(&key(values)).copied()
    }

    /// Appends the family's `# HELP`, `# TYPE` and sample lines to `out`.
    pub(crate) fn render(&self, out: &mut String) {
        let kind = match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        header(out, self.name, self.help, kind);
        for (values, value) in lock(&self.series).iter() {
            sample(out, self.name, self.labels, values, None, *value);
        }
    }
}

impl HistogramFamily {
    /// A histogram with these upper bounds, ascending.
    pub(crate) fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        bounds: &'static [f64],
    ) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{name}");
        Self {
            name,
            help,
            labels,
            bounds,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records one observation.
    pub(crate) fn observe(&self, values: &[&str], value: f64) {
        debug_assert_eq!(values.len(), self.labels.len(), "{}", self.name);
        let mut series = lock(&self.series);
        let entry = series
            .entry(key(values))
            .or_insert_with(|| HistogramSeries {
                buckets: vec![0; self.bounds.len()],
                sum: 0.0,
                count: 0,
            });
        if let Some(slot) = self.bounds.iter().position(|bound| value <= *bound) {
            entry.buckets[slot] += 1;
        }
        entry.sum += value;
        entry.count += 1;
    }

    /// Observation count of one series (0 when it does not exist).
    pub(crate) fn count(&self, values: &[&str]) -> u64 {
        lock(&self.series).get(&key(values)).map_or(0, |s| s.count)
    }

    /// Appends the family's header, cumulative `_bucket` lines, `_sum` and `_count` to `out`.
    pub(crate) fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "histogram");
        let bucket_name = format!("{}_bucket", self.name);
        let sum_name = format!("{}_sum", self.name);
        let count_name = format!("{}_count", self.name);
        for (values, series) in lock(&self.series).iter() {
            let mut cumulative = 0u64;
            for (bound, in_bucket) in self.bounds.iter().zip(&series.buckets) {
                cumulative += in_bucket;
                let le = format_value(*bound);
                let extra = Some(("le", le.as_str()));
                sample(
                    out,
                    &bucket_name,
                    self.labels,
                    values,
                    extra,
                    cumulative as f64,
                );
            }
            let inf = Some(("le", "+Inf"));
            sample(
                out,
                &bucket_name,
                self.labels,
                values,
                inf,
                series.count as f64,
            );
            sample(out, &sum_name, self.labels, values, None, series.sum);
            sample(
                out,
                &count_name,
                self.labels,
                values,
                None,
                series.count as f64,
            );
        }
    }
}

/// Locks a family; a panic elsewhere while holding it leaves plain numbers, still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key(values: &[&str]) -> Key {
    values.iter().map(|v| (*v).to_owned()).collect()
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(
    out: &mut String,
    name: &str,
    labels: &[&str],
    values: &[String],
    extra: Option<(&str, &str)>,
    value: f64,
) {
    out.push_str(name);
    let pairs = labels
        .iter()
        .copied()
        .zip(values.iter().map(String::as_str))
        .chain(extra);
    let mut first = true;
    for (label, label_value) in pairs {
        out.push(if first { '{' } else { ',' });
        first = false;
        let _ = write!(out, "{label}=\"{}\"", escape_label_value(label_value));
    }
    if !first {
        out.push('}');
    }
    let _ = writeln!(out, " {}", format_value(value));
}

/// Formats a sample value the way Prometheus parses it (`+Inf`, `-Inf`, `NaN`, plain decimals).
pub(crate) fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{value}")
    }
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_renders_header_and_sorted_series() {
        let family = ScalarFamily::counter("demo_total", "A demo.", &["a", "b"]);
        family.add(&["y", "2"], 1.0);
        family.add(&["x", "1"], 2.0);
        family.add(&["y", "2"], 1.0);
        let mut out = String::new();
        family.render(&mut out);
        assert_eq!(
            out,
            "# HELP demo_total A demo.\n# TYPE demo_total counter\n\
             demo_total{a=\"x\",b=\"1\"} 2\ndemo_total{a=\"y\",b=\"2\"} 2\n"
        );
    }

    #[test]
    fn gauge_without_labels_and_escaping() {
        let plain = ScalarFamily::gauge("up", "Up.\nline", &[]);
        plain.set(&[], 1.0);
        let mut out = String::new();
        plain.render(&mut out);
        assert_eq!(out, "# HELP up Up.\\nline\n# TYPE up gauge\nup 1\n");

        let quoted = ScalarFamily::gauge("q", "Q.", &["m"]);
        quoted.set(&["a\"b\\c\nd"], 0.5);
        let mut out = String::new();
        quoted.render(&mut out);
        assert!(out.ends_with("q{m=\"a\\\"b\\\\c\\nd\"} 0.5\n"), "{out}");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        static BOUNDS: [f64; 3] = [0.125, 1.0, 10.0];
        let family = HistogramFamily::new("lat_seconds", "Latency.", &["method"], &BOUNDS);
        for v in [0.0625, 0.125, 0.5, 20.0] {
            family.observe(&["Version"], v);
        }
        let mut out = String::new();
        family.render(&mut out);
        let expected = "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n\
            lat_seconds_bucket{method=\"Version\",le=\"0.125\"} 2\n\
            lat_seconds_bucket{method=\"Version\",le=\"1\"} 3\n\
            lat_seconds_bucket{method=\"Version\",le=\"10\"} 3\n\
            lat_seconds_bucket{method=\"Version\",le=\"+Inf\"} 4\n\
            lat_seconds_sum{method=\"Version\"} 20.6875\n\
            lat_seconds_count{method=\"Version\"} 4\n";
        assert_eq!(out, expected);
        assert_eq!(family.count(&["Version"]), 4);
        assert_eq!(family.count(&["Other"]), 0);
    }

    #[test]
    fn special_values() {
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(0.0001), "0.0001");
        assert_eq!(format_value(3.0), "3");
    }
}
