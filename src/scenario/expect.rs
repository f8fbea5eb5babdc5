//! The `expect` block of a scenario checked against a report: every key the block gives must be
//! in the report with the same value. Lists of named objects (pods, containers) are matched by
//! `name` (and `namespace` when given), so the block lists only what it cares about; other lists
//! must match element by element.

use std::fmt;

use serde_json::Value;

/// One difference between the `expect` block and the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Where, e.g. `pods[p1].containers[c].cpus`.
    pub path: String,
    pub expected: Value,
    /// `None` when the report has no such key or element.
    pub actual: Option<Value>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.actual {
            Some(a) => write!(f, "{}: expected {}, got {a}", self.path, self.expected),
            None => write!(f, "{}: expected {}, missing", self.path, self.expected),
        }
    }
}

/// All differences (object keys sorted, list entries in the block's order); empty when the report satisfies the block.
pub fn check(expect: &Value, report: &Value) -> Vec<Mismatch> {
    let mut out = Vec::new();
    compare("", expect, report, &mut out);
    out
}

fn compare(path: &str, expected: &Value, actual: &Value, out: &mut Vec<Mismatch>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match a.get(k) {
                    Some(av) => compare(&at, ev, av, out),
                    None => out.push(Mismatch {
                        path: at,
                        expected: ev.clone(),
                        actual: None,
                    }),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.iter().all(named) => {
            for ev in e {
                let name = ev.get("name").and_then(Value::as_str).unwrap_or_default();
                let at = format!("{path}[{name}]");
                match a.iter().find(|av| same_object(ev, av)) {
                    Some(av) => compare(&at, ev, av, out),
                    None => out.push(Mismatch {
                        path: at,
                        expected: ev.clone(),
                        actual: None,
                    }),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                compare(&format!("{path}[{i}]"), ev, av, out);
            }
        }
        _ if expected == actual => {}
        _ => out.push(Mismatch {
            path: path.to_string(),
            expected: expected.clone(),
            actual: Some(actual.clone()),
        }),
    }
}

fn named(v: &Value) -> bool {
    v.get("name").is_some_and(Value::is_string)
}

fn same_object(expected: &Value, actual: &Value) -> bool {
    ["name", "namespace"]
        .iter()
        .all(|k| expected.get(k).is_none_or(|e| actual.get(k) == Some(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report() -> Value {
        json!({"pods": [
            {"namespace": "default", "name": "a", "admitted": true, "containers": [
                {"name": "c1", "cpus": "2", "exclusive": true},
                {"name": "c2", "cpus": "0-1", "exclusive": false}]},
            {"namespace": "default", "name": "b", "admitted": false, "reason": "TopologyAffinityError", "containers": []}
        ], "node": {"reservedCPUs": "0", "sharedCPUs": "0-1"}})
    }

    #[test]
    fn a_block_that_matches_has_no_mismatch() {
        let expect = json!({"pods": [
            {"name": "b", "admitted": false},
            {"name": "a", "containers": [{"name": "c2", "exclusive": false}]}
        ], "node": {"reservedCPUs": "0"}});
        assert_eq!(check(&expect, &report()), []);
    }

    #[test]
    fn every_difference_is_reported_with_its_path() {
        let expect = json!({"pods": [
            {"name": "a", "containers": [{"name": "c1", "cpus": "3"}, {"name": "c9"}]},
            {"name": "b", "reason": "SMTAlignmentError", "message": "x"},
            {"name": "zz", "admitted": true}
        ], "node": {"sharedCPUs": [1]}});
        let got: Vec<String> = check(&expect, &report())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            // Object keys come in sorted order (serde_json maps), list entries in block order.
            [
                "node.sharedCPUs: expected [1], got \"0-1\"",
                "pods[a].containers[c1].cpus: expected \"3\", got \"2\"",
                "pods[a].containers[c9]: expected {\"name\":\"c9\"}, missing",
                "pods[b].message: expected \"x\", missing",
                "pods[b].reason: expected \"SMTAlignmentError\", got \"TopologyAffinityError\"",
                "pods[zz]: expected {\"admitted\":true,\"name\":\"zz\"}, missing",
            ]
        );
    }

    #[test]
    fn namespace_narrows_the_match_when_given() {
        let expect = json!({"pods": [{"name": "a", "namespace": "other"}]});
        assert_eq!(check(&expect, &report()).len(), 1);
    }
}
