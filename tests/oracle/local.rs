//! numa-shim's side of a case: the case text loaded as a `simulate` scenario and played by the
//! same decision core `numa-shim simulate` and the proxy use (`Scenario::run_steps`).

use std::path::Path;

use numa_shim::scenario::{Scenario, ScenarioError, StepsReport};
use serde_json::Value;

use super::gen::Case;

/// numa-shim's answer for the case.
pub fn answer(case: &Value) -> Result<StepsReport, String> {
    answer_with(case, false)
}

/// numa-shim's answer with kubelet 1.37.2's free core/socket test reproduced (it can grant a CPU
/// twice): agreeing with the oracle this way shows a disagreement is that divergence only.
pub fn answer_reproducing_double_grants(case: &Value) -> Result<StepsReport, String> {
    answer_with(case, true)
}

fn answer_with(case: &Value, quirk: bool) -> Result<StepsReport, String> {
    let text = serde_json::to_string(case).map_err(|e| e.to_string())?;
    Scenario::from_str_keeping_refusals(&text, Path::new("/"))
        .and_then(|s| s.run_steps_with(&|c| c.reproduce_kubelet_double_grants = quirk))
        .map_err(|e| e.to_string())
}

/// The index of the step a scenario error names (`steps[3].start`), if it names one.
fn failing_step(e: &ScenarioError) -> Option<usize> {
    let at = match e {
        ScenarioError::UnknownPod { at, .. }
        | ScenarioError::UnknownContainer { at, .. }
        | ScenarioError::NotStarted { at, .. }
        | ScenarioError::DuplicatePod { at, .. } => at,
        _ => return None,
    };
    at.strip_prefix("steps[")?.split(']').next()?.parse().ok()
}

/// The case without the steps numa-shim cannot play: starts and removals of pods it did not
/// admit (the generator cannot know which pods the node refuses). Deterministic, so both sides
/// get the same repaired case.
pub fn repair(case: &Case) -> Case {
    let mut case = case.clone();
    for _ in 0..64 {
        let Ok(text) = serde_json::to_string(&case.json) else {
            return case;
        };
        let failed = Scenario::from_str_keeping_refusals(&text, Path::new("/"))
            .and_then(|s| s.run_steps())
            .err();
        let Some(i) = failed.as_ref().and_then(failing_step) else {
            return case;
        };
        let mut steps = case.steps().to_vec();
        if i >= steps.len() {
            return case;
        }
        steps.remove(i);
        case = case.with_steps(steps);
    }
    case
}
