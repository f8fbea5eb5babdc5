//! Counting outcomes: per feature of the cases (policy, scope, option, classic vs pod-level,
//! starts and removals, fixture vs synthetic), how many agree with the kubelet, how many fall in
//! the documented divergence, how many disagree; and the disagreements by field.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::compare::Verdict;
use super::gen::Features;

#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub cases: usize,
    pub agree: usize,
    pub granted_twice: usize,
    pub disagree: usize,
}

impl Counts {
    fn add(&mut self, v: &Verdict) {
        self.cases += 1;
        match v {
            Verdict::Agree => self.agree += 1,
            Verdict::GrantedTwice { .. } => self.granted_twice += 1,
            Verdict::Disagree(_) => self.disagree += 1,
        }
    }
}

#[derive(Debug, Default)]
pub struct Tally {
    pub all: Counts,
    pub by_feature: BTreeMap<String, Counts>,
    /// Disagreements by field, with pod and container names left out.
    pub by_field: BTreeMap<String, usize>,
}

impl Tally {
    pub fn add(&mut self, features: &Features, v: &Verdict) {
        self.all.add(v);
        for f in &features.0 {
            self.by_feature.entry(f.clone()).or_default().add(v);
        }
        if let Verdict::Disagree(d) = v {
            *self.by_field.entry(field_class(&d.path)).or_default() += 1;
        }
    }

    /// The agreement table (markdown).
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| feature | cases | agree | granted twice by the kubelet | disagree |\n|---|---:|---:|---:|---:|\n",
        );
        let row = |out: &mut String, name: &str, c: &Counts| {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} |",
                c.cases, c.agree, c.granted_twice, c.disagree
            );
        };
        row(&mut out, "**all cases**", &self.all);
        for (name, c) in &self.by_feature {
            row(&mut out, name, c);
        }
        out
    }
}

/// `pods[default/p1].containers[app-1].cpus` → `pods[].containers[].cpus`.
pub fn field_class(path: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for ch in path.chars() {
        match ch {
            '[' => {
                depth += 1;
                if depth == 1 {
                    out.push('[');
                }
            }
            ']' => {
                depth -= 1;
                if depth == 0 {
                    out.push(']');
                }
            }
            _ if depth > 0 => {}
            c => out.push(c),
        }
    }
    out
}
