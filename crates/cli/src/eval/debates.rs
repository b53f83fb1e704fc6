//! The saved debates evaluated: Parley's or dialectic's, their problem, clarifications and requirements.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::DebateInput;
use crate::CliError;

/// Expands `-d` arguments: files as given (each must be a debate with a final solution),
/// directories into their `*.json` files by name (those that are not such a debate are
/// skipped with a warning).
pub(super) fn load_debates(
    paths: &[PathBuf],
    warn: &mut impl FnMut(String),
) -> Result<Vec<DebateInput>, CliError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| {
                CliError::usage(format!("cannot list debate directory {}: {e}", p.display()))
            })?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "json"))
                // Decision records sit beside the debates they record.
                .filter(|f| !f.to_string_lossy().ends_with(".record.json"))
                .collect();
            files.sort();
            let before = out.len();
            for f in files {
                match load_debate(&f) {
                    Ok(d) => out.push(d),
                    Err(e) => warn(format!("skipping {}: {}", f.display(), e.message)),
                }
            }
            if out.len() == before {
                return Err(CliError::usage(format!(
                    "debate directory {} holds no saved debate with a final solution",
                    p.display()
                )));
            }
        } else {
            out.push(load_debate(p)?);
        }
    }
    Ok(out)
}

/// Reads one saved debate (Parley's DebateState or dialectic's).
pub fn load_debate(path: &Path) -> Result<DebateInput, CliError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read debate file {shown}: {e}")))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("debate file {shown} is not valid JSON: {e}")))?;
    let problem = v["problem"].as_str().unwrap_or("").trim().to_string();
    if problem.is_empty() {
        return Err(CliError::usage(format!(
            "invalid debate JSON {shown}: missing non-empty problem"
        )));
    }
    let solution = v["finalSolution"]["description"]
        .as_str()
        .unwrap_or("")
        .trim()
        .to_string();
    if solution.is_empty() {
        return Err(CliError::usage(format!(
            "invalid debate JSON {shown}: missing non-empty finalSolution.description"
        )));
    }
    let mut name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.to_ascii_lowercase().ends_with(".json") {
        name.truncate(name.len() - 5);
    }
    let info = requirements_info(&v, &problem);
    Ok(DebateInput {
        name,
        clarifications: clarifications_markdown(&v),
        requirements_info: serde_json::to_string_pretty(&info).unwrap_or_default(),
        problem,
        final_solution: solution,
    })
}

/// The debate's clarifications (dialectic's `clarifications[]: {agentName, role, items[]:
/// {id, question, answer}}`) as Markdown; `None.` when there are none.
pub(super) fn clarifications_markdown(v: &Value) -> String {
    let mut out = String::new();
    for group in v["clarifications"].as_array().into_iter().flatten() {
        let items: Vec<&Value> = group["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["question"].is_string())
            .collect();
        if items.is_empty() {
            continue;
        }
        let who = group["agentName"]
            .as_str()
            .or(group["agentId"].as_str())
            .unwrap_or("agent");
        let role = group["role"].as_str().unwrap_or("");
        out.push_str(&format!("### Asked by {who} ({role})\n"));
        for i in items {
            let answer = match &i["answer"] {
                Value::String(s) if !s.trim().is_empty() => s.as_str(),
                _ => "NA",
            };
            out.push_str(&format!(
                "Question {}:\n```text\n{}\n```\nAnswer:\n```text\n{}\n```\n\n",
                i["id"].as_str().unwrap_or(""),
                i["question"].as_str().unwrap_or(""),
                answer
            ));
        }
    }
    if out.trim().is_empty() {
        "None.".into()
    } else {
        out.trim_end().to_string()
    }
}

/// What the debate recorded about requirements, as the evaluators' `{requirements_info}`:
/// the problem's lines that read as major requirements (by keyword), the judge's unmet
/// requirements, and each agent's latest "Requirements Coverage" section.
pub(super) fn requirements_info(v: &Value, problem: &str) -> Value {
    const KEYWORDS: &[&str] = &[
        "must",
        "shall",
        "required",
        "needs to",
        "critical",
        "essential",
    ];
    let major: Vec<String> = problem
        .lines()
        .map(|l| l.trim().trim_start_matches(['-', '*', '•', ' ']).trim())
        .filter(|l| l.chars().count() >= 10)
        .filter(|l| {
            let lower = l.to_lowercase();
            KEYWORDS.iter().any(|k| lower.contains(k))
        })
        .map(str::to_string)
        .collect();
    let unmet: Vec<Value> = v["finalSolution"]["unfulfilledMajorRequirements"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // agent id -> (round, is refinement, role, section)
    let mut coverage: BTreeMap<String, (u64, bool, String, String)> = BTreeMap::new();
    for (idx, round) in v["rounds"].as_array().into_iter().flatten().enumerate() {
        let n = round["roundNumber"].as_u64().unwrap_or(idx as u64 + 1);
        for c in round["contributions"].as_array().into_iter().flatten() {
            let kind = c["type"].as_str().unwrap_or("");
            if kind != "proposal" && kind != "refinement" {
                continue;
            }
            // A carried-over proposal repeats the previous refinement.
            if c["metadata"]["carriedOver"] == Value::Bool(true) {
                continue;
            }
            let (Some(agent), Some(content)) = (c["agentId"].as_str(), c["content"].as_str())
            else {
                continue;
            };
            let Some(section) = coverage_section(content) else {
                continue;
            };
            let refinement = kind == "refinement";
            let newer = match coverage.get(agent) {
                None => true,
                Some((r, was_ref, _, _)) => n > *r || (n == *r && (refinement || !was_ref)),
            };
            if newer {
                let role = c["agentRole"].as_str().unwrap_or("").to_string();
                coverage.insert(agent.to_string(), (n, refinement, role, section));
            }
        }
    }
    let coverage: Vec<Value> = coverage
        .into_iter()
        .map(|(id, (_, _, role, text))| {
            json!({"agentId": id, "agentRole": role, "requirementsCoverage": text})
        })
        .collect();
    json!({
        "majorRequirements": major,
        "judgeUnfulfilledRequirements": unmet,
        "agentRequirementsCoverage": coverage,
    })
}

/// The text under a "Requirements Coverage" heading, up to the next `##` heading or `---`.
pub(super) fn coverage_section(content: &str) -> Option<String> {
    let mut lines = content.lines();
    lines.by_ref().find(|l| {
        let t = l.trim_start();
        t.starts_with('#')
            && t.trim_start_matches('#')
                .split_whitespace()
                .collect::<String>()
                .eq_ignore_ascii_case("requirementscoverage")
    })?;
    let body: Vec<&str> = lines
        .take_while(|l| !l.starts_with("##") && !l.starts_with("---"))
        .collect();
    let text = body.join("\n").trim().to_string();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_info_reads_problem_judge_and_coverage() {
        let v = json!({
            "problem": "Build a queue.\n- It must survive a node loss\n- nice to have: UI",
            "finalSolution": {"description": "x", "unfulfilledMajorRequirements": ["HA"]},
            "rounds": [
                {"roundNumber": 1, "contributions": [
                    {"agentId": "a", "agentRole": "architect", "type": "proposal",
                     "content": "Plan\n## Requirements Coverage\n- HA: replicas\n## Next\nmore"},
                    {"agentId": "a", "agentRole": "architect", "type": "refinement",
                     "content": "### Requirements coverage\n- HA: raft\n---\nend"}
                ]}
            ]
        });
        let info = requirements_info(&v, v["problem"].as_str().unwrap());
        assert_eq!(
            info["majorRequirements"],
            json!(["It must survive a node loss"])
        );
        assert_eq!(info["judgeUnfulfilledRequirements"], json!(["HA"]));
        assert_eq!(
            info["agentRequirementsCoverage"][0]["requirementsCoverage"],
            "- HA: raft"
        );
    }
}
