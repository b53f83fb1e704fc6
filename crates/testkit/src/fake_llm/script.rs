//! Per-kind scripting of the fake LLM for debate tests: [`kind_of`] tells which debate task a
//! request is (from the prompt texts of the agent and judge workers), and [`DebateScript`]
//! is a responder that answers each kind in its shape — verdicts that agree from a given
//! verdict call on (or never, or not in JSON), votes by a rule, syntheses that leave out open
//! issues — with the fake's usual texts for everything else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;

use super::RecordedRequest;

/// The debate task a prompt belongs to: `vote`, `verdict`, `evaluate`, `synthesize`,
/// `judgeSummarize`, `summarize`, `refine`, `critique`, `propose`, `clarify`, or `other`.
/// Checked in an order where no prompt of one kind holds the marker of a later one.
pub fn kind_of(prompt: &str) -> &'static str {
    const MARKERS: &[(&str, &str)] = &[
        ("Vote for the best final solution", "vote"),
        ("Give your verdict on the debate so far", "verdict"),
        ("How confident are you that the proposals", "evaluate"),
        ("Synthesize the best final solution", "synthesize"),
        (
            "Summarize this debate for the final synthesis",
            "judgeSummarize",
        ),
        (
            "Summarize the debate so far from your perspective",
            "summarize",
        ),
        ("Refine your proposal:", "refine"),
        ("Critique it from the perspective", "critique"),
        ("Propose a solution from the perspective", "propose"),
        (
            "{\"questions\": [{\"text\": \"your question\"}]}",
            "clarify",
        ),
    ];
    MARKERS
        .iter()
        .find(|(m, _)| prompt.contains(m))
        .map_or("other", |(_, k)| k)
}

/// How agents vote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoteRule {
    /// For this agent id when it is a candidate, else the first candidate listed.
    For(String),
    /// For the candidate after the voter's own id in the sorted list of every agent (with
    /// three agents each gets one vote: a three-way tie).
    Next,
    /// For the voter itself (an invalid vote).
    Itself,
    /// A reply that is not the JSON asked for.
    Garbage,
}

/// A scripted debate: see the module docs. Cheap to clone (counters are shared).
#[derive(Debug, Clone)]
pub struct DebateScript {
    /// The judge says `done` (confidence 90) from this verdict call on (1-based, counting
    /// every verdict call, the adaptive screen included); `None`: always `continue`
    /// (confidence 40).
    pub agree_from_verdict: Option<usize>,
    /// Open issues every verdict lists.
    pub open_issues: Vec<String>,
    /// Verdict replies that are not JSON.
    pub garbage_verdicts: bool,
    pub votes: VoteRule,
    /// The synthesis lists this many of the open issues under `unresolvedDisagreements`
    /// (the rest must be added by the coordinator).
    pub issues_in_synthesis: usize,
    verdict_calls: Arc<AtomicUsize>,
}

impl Default for DebateScript {
    fn default() -> Self {
        Self {
            agree_from_verdict: None,
            open_issues: Vec::new(),
            garbage_verdicts: false,
            votes: VoteRule::Next,
            issues_in_synthesis: 0,
            verdict_calls: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl DebateScript {
    /// The judge agrees from the first verdict on.
    pub fn agreeing() -> Self {
        Self {
            agree_from_verdict: Some(1),
            ..Self::default()
        }
    }

    /// The judge never agrees.
    pub fn never_agreeing() -> Self {
        Self::default()
    }

    /// Verdict calls answered so far.
    pub fn verdict_calls(&self) -> usize {
        self.verdict_calls.load(Ordering::SeqCst)
    }

    /// The reply to `r`.
    pub fn reply(&self, r: &RecordedRequest) -> String {
        let prompt = r.prompt_text();
        match kind_of(&prompt) {
            "verdict" => {
                let n = self.verdict_calls.fetch_add(1, Ordering::SeqCst) + 1;
                if self.garbage_verdicts {
                    return "I think they mostly agree, more or less.".into();
                }
                let done = self.agree_from_verdict.is_some_and(|k| n >= k);
                json!({
                    "reasoning": format!("verdict #{n}"),
                    "verdict": if done { "done" } else { "continue" },
                    "confidence": if done { 90 } else { 40 },
                    "openIssues": self.open_issues,
                })
                .to_string()
            }
            "vote" => self.vote(&prompt),
            "synthesize" => json!({
                "solutionMarkdown": format!("Scripted synthesis from {}", r.model),
                "tradeoffs": ["one more component"],
                "recommendations": ["measure first"],
                "unfulfilledMajorRequirements": [],
                "openQuestions": [],
                "unresolvedDisagreements": self.open_issues.iter().take(self.issues_in_synthesis).collect::<Vec<_>>(),
                "basedOn": tie_pick(&prompt),
                "confidence": 80
            })
            .to_string(),
            "evaluate" => json!({"reasoning": "ok", "confidence": 50}).to_string(),
            kind => format!("A {kind} from {}: bound the queue and retry with backoff.", r.model),
        }
    }

    fn vote(&self, prompt: &str) -> String {
        // "The vote must be one of: a, b." names the candidates, "Your agent id is x." the
        // voter.
        let candidates: Vec<String> = prompt
            .rsplit_once("The vote must be one of: ")
            .map(|(_, rest)| rest.trim_end().trim_end_matches('.'))
            .unwrap_or_default()
            .split(", ")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let voter = prompt
            .split("Your agent id is ")
            .nth(1)
            .and_then(|s| s.split(". ").next())
            .map(str::trim)
            .unwrap_or_default()
            .to_string();
        let choice = match &self.votes {
            VoteRule::Garbage => return "I like them all.".into(),
            VoteRule::Itself => voter.clone(),
            VoteRule::For(id) if candidates.contains(id) => id.clone(),
            VoteRule::For(_) => candidates.first().cloned().unwrap_or_default(),
            VoteRule::Next => {
                let mut all = candidates.clone();
                all.push(voter.clone());
                all.sort();
                let at = all.iter().position(|a| *a == voter).unwrap_or(0);
                all[(at + 1) % all.len()].clone()
            }
        };
        json!({"vote": choice, "reason": format!("{choice} is the clearest")}).to_string()
    }
}

/// On a tie, the first tied agent the synthesis prompt names (the judge's pick); else none.
fn tie_pick(prompt: &str) -> Option<String> {
    let rest = prompt.split("vote is tied between ").nth(1)?;
    rest.split([',', '.']).next().map(|s| s.trim().to_string())
}
