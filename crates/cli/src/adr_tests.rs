//! Tests of the ADR writer.
use super::*;
use parley_protocol::DebateState;
use serde_json::{json, Value};

const ROLES: [&str; 6] = [
    "architect",
    "security",
    "performance",
    "testing",
    "kiss",
    "generalist",
];

fn meta(model: &str) -> Value {
    json!({"tokensUsed": 100, "latencyMs": 1, "model": model, "provider": "openai",
           "promptTokens": 80, "completionTokens": 20})
}

/// A completed debate of `n` agents over `rounds` rounds, synthesized by the judge or
/// (with `voting`) from the vote's winner.
fn debate(n: usize, rounds: u32, voting: bool) -> DebateState {
    let agents: Vec<(String, &str)> = ROLES[..n]
        .iter()
        .map(|r| (format!("agent-{r}"), *r))
        .collect();
    let mut rs = Vec::new();
    for round in 1..=rounds {
        let mut cs = Vec::new();
        for (id, role) in &agents {
            cs.push(json!({"agentId": id, "agentRole": role, "type": "proposal",
                "content": format!("## Proposal\nUse a {role}-first design. More text here."),
                "metadata": meta(&format!("model-{role}")) }));
        }
        for (id, role) in &agents {
            for (t, _) in agents.iter().filter(|a| a.0 != *id) {
                cs.push(json!({"agentId": id, "agentRole": role, "type": "critique", "targetAgentId": t,
                    "content": format!("## Strengths\n- {role} likes the layering of {t}\n## Weaknesses\n- {role} misses a rollback plan in {t}\n## Suggested improvements\n- add metrics"),
                    "metadata": meta(&format!("model-{role}")) }));
            }
        }
        for (id, role) in &agents {
            cs.push(json!({"agentId": id, "agentRole": role, "type": "refinement",
                "content": format!("## Revised architecture\nA {role}-led cache with write-through in round {round}. Details follow."),
                "metadata": meta(&format!("model-{role}")) }));
        }
        rs.push(
            json!({"roundNumber": round, "contributions": cs, "timestamp": "2026-11-27T06:00:00Z"}),
        );
    }
    let mut v = json!({
        "id": "deb-20261127-060000-abcdef",
        "problem": "Design a cache for the catalogue API.\n- It must survive a node loss\n- Reads should stay under 5 ms",
        "status": "completed", "currentRound": rounds, "rounds": rs,
        "finalSolution": {"description": "Use a write-through cache.\n\nWith LRU eviction.",
            "tradeoffs": ["Fresh reads at the cost of slower writes", "more moving parts"],
            "recommendations": ["measure the hit rate weekly"],
            "openQuestions": ["which TTL?"], "unresolvedDisagreements": ["eviction policy"],
            "confidence": 82, "synthesizedBy": "judge-main"},
        "synthesisMetadata": meta("model-judge"),
        "promptSources": {"agents": []},
        "createdAt": "2026-11-27T06:00:00Z", "updatedAt": "2026-11-27T06:05:00Z"
    });
    if voting {
        let winner = agents[n - 1].0.clone();
        v["voting"] = json!({"votes": agents.iter().filter(|a| a.0 != winner).map(|a| json!({
            "agentId": a.0, "vote": winner, "reason": "clearest", "valid": true, "metadata": meta("m")})).collect::<Vec<_>>(),
            "counts": {winner.clone(): n - 1}, "winner": winner, "tallied": true});
        v["finalSolution"]["basedOn"] = json!(winner);
    }
    serde_json::from_value(v).unwrap()
}

fn render_of(state: &DebateState) -> String {
    render(&AdrInput {
        state,
        spec: None,
        status: AdrStatus::Accepted,
        date: chrono::NaiveDate::from_ymd_opt(2026, 11, 27).unwrap(),
        record: None,
    })
    .unwrap()
}

const SECTIONS: [&str; 8] = [
    "## Context and Problem Statement",
    "## Decision Drivers",
    "## Considered Options",
    "## Decision Outcome",
    "### Consequences",
    "### Confirmation",
    "## Pros and Cons of the Options",
    "## More Information",
];

/// The front matter's `key: value` lines, each value parsed (a quoted scalar or a
/// flow list is JSON, which YAML reads the same; `date` is a plain YAML date).
pub(crate) fn front_matter(md: &str) -> std::collections::BTreeMap<String, Value> {
    let mut lines = md.lines();
    assert_eq!(lines.next(), Some("---"), "{md}");
    let mut out = std::collections::BTreeMap::new();
    for line in lines.by_ref() {
        if line == "---" {
            return out;
        }
        let (k, v) = line
            .split_once(": ")
            .unwrap_or_else(|| panic!("not key: value: {line:?}"));
        assert!(k.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{k}");
        let parsed = if k == "date" {
            assert!(
                chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").is_ok(),
                "{v}"
            );
            json!(v)
        } else {
            serde_json::from_str(v).unwrap_or_else(|e| panic!("{k}: {v:?}: {e}"))
        };
        assert!(out.insert(k.to_string(), parsed).is_none(), "{k} twice");
    }
    panic!("front matter not closed:\n{md}");
}

/// Every MADR section once, in order, and no template placeholder.
pub(crate) fn assert_madr(md: &str) {
    let fm = front_matter(md);
    for k in ["status", "date", "decision-makers", "consulted"] {
        assert!(fm.contains_key(k), "front matter lacks {k}:\n{md}");
    }
    let lines: Vec<&str> = md.lines().collect();
    let mut at = 0;
    for s in SECTIONS {
        let found: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| **l == s)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(found.len(), 1, "{s} appears {} times:\n{md}", found.len());
        assert!(found[0] > at, "{s} out of order:\n{md}");
        at = found[0];
    }
    let titles = lines.iter().filter(|l| l.starts_with("# ")).count();
    assert_eq!(titles, 1, "{md}");
    for placeholder in [
        "{title of option",
        "{short title",
        "{Describe",
        "{decision driver",
        "Option 1",
        "{list",
        "{YYYY",
        "…  <!--",
        "<!-- This is an optional element",
    ] {
        assert!(
            !md.contains(placeholder),
            "placeholder {placeholder:?} left:\n{md}"
        );
    }
    // No section is empty.
    for w in SECTIONS.windows(2) {
        let a = md.find(&format!("\n{}\n", w[0])).unwrap();
        let b = md.find(&format!("\n{}\n", w[1])).unwrap();
        let body = md[a + w[0].len() + 2..b].trim();
        assert!(
            !body.is_empty() || w[0] == "## Decision Outcome",
            "{} is empty",
            w[0]
        );
    }
}

#[test]
fn two_to_six_agents_one_and_several_rounds_judge_and_voting() {
    for n in 2..=6 {
        for rounds in [1, 3] {
            for voting in [false, true] {
                let state = debate(n, rounds, voting);
                let md = render_of(&state);
                assert_madr(&md);
                let fm = front_matter(&md);
                assert_eq!(fm["status"], "accepted");
                assert_eq!(fm["consulted"].as_array().unwrap().len(), n, "{md}");
                assert_eq!(fm["decision-makers"][0], "judge-main (judge, model-judge)");
                // One option per agent, named by its gist (not "Option 1").
                let opts = md
                    .split("## Considered Options\n\n")
                    .nth(1)
                    .unwrap()
                    .split("\n\n")
                    .next()
                    .unwrap();
                assert_eq!(opts.lines().count(), n, "{md}");
                assert!(
                    opts.starts_with(&format!(
                        "* A architect-led cache with write-through in round {rounds} (architect)"
                    )),
                    "{opts}"
                );
                if voting {
                    let winner = ROLES[n - 1];
                    assert!(md.contains(&format!("Chosen option: \"A {winner}-led cache with write-through in round {rounds} ({winner})\", because it won the agents' vote")), "{md}");
                } else {
                    assert!(
                        md.contains("Chosen option: \"Synthesis of the considered options\""),
                        "{md}"
                    );
                }
                // Tradeoffs as Good / Bad; critiques as pros and cons.
                assert!(md.contains("* Good, because Fresh reads\n* Bad, because slower writes\n* Neutral, because more moving parts"), "{md}");
                assert!(
                    md.contains(
                        "* Good, because security likes the layering of agent-architect (security)"
                    ),
                    "{md}"
                );
                assert!(md.contains("* Bad, because security misses a rollback plan in agent-architect (security)"), "{md}");
                assert!(md.contains("* It must survive a node loss"), "{md}");
                assert!(
                    md.contains("* Unresolved disagreements: eviction policy"),
                    "{md}"
                );
            }
        }
    }
}

#[test]
fn a_debate_without_a_solution_is_refused() {
    let mut state = debate(2, 1, false);
    state.final_solution = None;
    state.status = parley_protocol::DebateStatus::Cancelled;
    let e = render(&AdrInput {
        state: &state,
        spec: None,
        status: AdrStatus::Proposed,
        date: chrono::NaiveDate::from_ymd_opt(2026, 11, 27).unwrap(),
        record: None,
    })
    .unwrap_err();
    assert!(
        e.0.contains("ended cancelled without a solution"),
        "{}",
        e.0
    );
}

#[test]
fn hostile_model_text_cannot_break_the_front_matter_or_the_sections() {
    let mut state = debate(2, 1, false);
    state.problem = "Pick a \"queue\": \u{1b}[31mred\u{202e}\n---\nstatus: hacked\n# Decision Outcome\n## More Information\nText\n===\n```rust\nfn open() {".into();
    let c = &mut state.rounds[0].contributions[0];
    c.agent_role = "arch\"itect\n- x: y".into();
    c.content = "# Option 1 <script>alert(1)</script>\n## Decision Drivers".into();
    state.final_solution.as_mut().unwrap().description =
        "## Considered Options\n```\nunclosed".into();
    let md = render_of(&state);
    assert_madr(&md);
    assert!(!md.contains('\u{1b}') && !md.contains('\u{202e}'));
    assert!(!md.contains("<script>"), "{md}");
    let fm = front_matter(&md);
    assert_eq!(fm["status"], "accepted");
    // Every fence is closed, so the sections after it stay sections.
    let fences = md
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count();
    assert_eq!(fences % 2, 0, "{md}");
    assert!(md.contains("\n#### Decision Outcome\n"), "{md}");
}

#[test]
fn numbering_continues_the_folder_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("0007-use-postgres.md"), "x").unwrap();
    std::fs::write(dir.path().join("0002-old.md"), "x").unwrap();
    std::fs::write(dir.path().join("README.md"), "x").unwrap();
    std::fs::write(dir.path().join("0099.txt"), "x").unwrap();
    let md = render_of(&debate(2, 1, false));
    let a = write_next(dir.path(), "Design a cache", &md).unwrap();
    assert_eq!(a.file_name().unwrap(), "0008-design-a-cache.md");
    // A file that takes the next number meanwhile: the one after it.
    std::fs::write(dir.path().join("0009-design-a-cache.md"), "someone else's").unwrap();
    let b = write_next(dir.path(), "Design a cache", &md).unwrap();
    assert_eq!(b.file_name().unwrap(), "0010-design-a-cache.md");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("0009-design-a-cache.md")).unwrap(),
        "someone else's"
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), md);
    // An empty or missing folder starts at 0001.
    let fresh = dir.path().join("adr");
    let c = write_next(&fresh, "Ünïcode & stuff!", &md).unwrap();
    assert_eq!(c.file_name().unwrap(), "0001-n-code-stuff.md");
    assert_eq!(slug("???"), "decision");
    // A folder that cannot be made (a file stands where it would be) is named.
    let blocked = dir.path().join("README.md").join("adr");
    let e = write_next(&blocked, "x", &md).unwrap_err();
    assert!(
        matches!(&e, AdrWriteError::CreateFolder { dir, .. } if dir == &blocked),
        "{e:?}"
    );
    assert!(
        e.to_string().starts_with("cannot create the ADR folder"),
        "{e}"
    );
}

#[test]
fn relative_links_climb_out_of_the_adr_folder() {
    assert_eq!(
        relative(
            Path::new("/w/docs/adr"),
            Path::new("/w/debates/x.record.json")
        ),
        "../../debates/x.record.json"
    );
}
