//! Lenient parsing of the judge's JSON replies: code fences and prose around the object are
//! tolerated; numbers may come as strings; list items may be objects.

use parley_protocol::{Solution, Verdict, VerdictDecision};
use serde_json::Value;

/// The first JSON object in `text` (bare, fenced, or surrounded by prose).
pub fn extract_json(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(t) {
        return Some(v);
    }
    // Try every '{' as a start, longest candidate first.
    let end = t.rfind('}')?;
    for (start, _) in t.match_indices('{') {
        if start >= end {
            break;
        }
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&t[start..=end]) {
            return Some(v);
        }
    }
    None
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().trim_end_matches('%').trim().parse().ok(),
        _ => None,
    }
}

/// `confidence`, clamped to 0–100.
pub fn confidence(v: &Value) -> Option<f64> {
    let c = number(v.get("confidence")?)?;
    c.is_finite().then(|| c.clamp(0.0, 100.0))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// A [`Solution`] from the judge's JSON, in Parley's shape (`description`) or dialectic's
/// (`solutionMarkdown`, `unfulfilledMajorRequirements`, `openQuestions`); `None` without a
/// non-empty solution text. The confidence of a solution that leaves a major requirement
/// unmet is capped at [`Solution::CONFIDENCE_CAP_WHEN_UNMET`], whatever the judge said.
pub fn solution(v: &Value, judge_id: &str) -> Option<Solution> {
    let description = ["description", "solutionMarkdown"]
        .iter()
        .filter_map(|k| v.get(*k)?.as_str())
        .map(str::trim)
        .find(|s| !s.is_empty())?
        .to_string();
    let unfulfilled: Vec<String> = strings(v.get("unfulfilledMajorRequirements"))
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect();
    let mut confidence = confidence(v).unwrap_or(0.0);
    if !unfulfilled.is_empty() {
        confidence = confidence.min(Solution::CONFIDENCE_CAP_WHEN_UNMET);
    }
    Some(Solution {
        description,
        tradeoffs: strings(v.get("tradeoffs")),
        recommendations: strings(v.get("recommendations")),
        unfulfilled_major_requirements: unfulfilled,
        open_questions: strings(v.get("openQuestions")),
        unresolved_disagreements: strings(v.get("unresolvedDisagreements"))
            .into_iter()
            .filter(|s| !s.trim().is_empty())
            .collect(),
        based_on: v
            .get("basedOn")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        confidence,
        synthesized_by: judge_id.to_string(),
    })
}

/// A [`Verdict`] from the judge's JSON: `verdict` must be `done` or `continue` (any case)
/// and `confidence` a number; `None` otherwise (the caller counts that as continue).
pub fn verdict(v: &Value) -> Option<Verdict> {
    let decision = match v
        .get("verdict")?
        .as_str()?
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "done" => VerdictDecision::Done,
        "continue" => VerdictDecision::Continue,
        _ => return None,
    };
    Some(Verdict {
        verdict: decision,
        confidence: confidence(v)?,
        reasoning: v
            .get("reasoning")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        open_issues: strings(v.get("openIssues"))
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        valid: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_parse_leniently_and_refuse_what_is_not_one() {
        let v = verdict(&serde_json::json!({
            "verdict": "Done", "confidence": "90", "reasoning": "agreed",
            "openIssues": ["cache size", " ", {"x": 1}]
        }))
        .unwrap();
        assert_eq!(v.verdict, VerdictDecision::Done);
        assert_eq!(v.confidence, 90.0);
        assert_eq!(
            v.open_issues,
            vec!["cache size".to_string(), "{\"x\":1}".to_string()]
        );
        assert!(verdict(&serde_json::json!({"verdict": "maybe", "confidence": 90})).is_none());
        assert!(verdict(&serde_json::json!({"verdict": "done"})).is_none());
    }
}

#[cfg(test)]
mod solution_tests {
    use super::*;

    #[test]
    fn bare_fenced_and_embedded_json() {
        assert!(extract_json(r#"{"confidence": 90}"#).is_some());
        assert!(extract_json("```json\n{\"confidence\": 90}\n```").is_some());
        assert!(extract_json(
            "Sure! Here it is: {\"confidence\": 90, \"x\": {\"y\": 1}} Hope it helps."
        )
        .is_some());
        assert!(extract_json("no json here").is_none());
        assert!(extract_json("[1,2,3]").is_none());
        assert!(extract_json("{not json}").is_none());
    }

    #[test]
    fn confidence_forms() {
        let c = |s: &str| confidence(&extract_json(s).unwrap());
        assert_eq!(c(r#"{"confidence": 85}"#), Some(85.0));
        assert_eq!(c(r#"{"confidence": "70%"}"#), Some(70.0));
        assert_eq!(c(r#"{"confidence": 150}"#), Some(100.0));
        assert_eq!(c(r#"{"confidence": -3}"#), Some(0.0));
        assert_eq!(c(r#"{"confidence": "high"}"#), None);
        assert_eq!(c(r#"{"reasoning": "x"}"#), None);
    }

    #[test]
    fn solution_fields() {
        let v = extract_json(r#"{"description":"D","tradeoffs":["a",{"k":1}],"recommendations":"r","confidence":"88"}"#).unwrap();
        let s = solution(&v, "judge").unwrap();
        assert_eq!(s.description, "D");
        assert_eq!(s.tradeoffs, vec!["a".to_string(), r#"{"k":1}"#.to_string()]);
        assert_eq!(s.recommendations, vec!["r".to_string()]);
        assert_eq!(s.confidence, 88.0);
        assert_eq!(s.synthesized_by, "judge");
        assert!(solution(&extract_json(r#"{"description":"  "}"#).unwrap(), "j").is_none());
        assert!(s.unfulfilled_major_requirements.is_empty() && s.open_questions.is_empty());
    }

    #[test]
    fn dialectic_shape_is_accepted_and_unmet_requirements_cap_confidence() {
        let v = extract_json(
            r###"{"solutionMarkdown":"## Plan\nShard by tenant.","tradeoffs":["cost"],
               "recommendations":["load test"],"unfulfilledMajorRequirements":["GDPR erasure"],
               "openQuestions":["peak QPS?"],"confidence":85}"###,
        )
        .unwrap();
        let s = solution(&v, "judge").unwrap();
        assert_eq!(s.description, "## Plan\nShard by tenant.");
        assert_eq!(
            s.unfulfilled_major_requirements,
            vec!["GDPR erasure".to_string()]
        );
        assert_eq!(s.open_questions, vec!["peak QPS?".to_string()]);
        assert_eq!(s.confidence, Solution::CONFIDENCE_CAP_WHEN_UNMET);
        // Nothing unmet (empty strings do not count): the judge's own confidence stands.
        let v = extract_json(
            r#"{"solutionMarkdown":"x","unfulfilledMajorRequirements":[""],"confidence":85}"#,
        )
        .unwrap();
        assert_eq!(solution(&v, "judge").unwrap().confidence, 85.0);
        // `description` wins when both are there; an empty one falls back to the other.
        let v = extract_json(r#"{"description":" ","solutionMarkdown":"md"}"#).unwrap();
        assert_eq!(solution(&v, "judge").unwrap().description, "md");
    }
}
