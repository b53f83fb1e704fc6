//! Judging rounds: per-round verdicts and similarities, and the adaptive screen that picks
//! the short path (synthesize from the proposals) or the full debate.

use chrono::{DateTime, Utc};
use parley_protocol::{
    limits, AdaptivePath, AdaptiveRecord, ContributionMetadata, ContributionType, DebateMode,
    EventKind, RoundSimilarity, RoundVerdict, TaskKind, TaskOutput, TerminationType, Verdict,
};

use super::{Effect, Machine};

impl Machine {
    pub(super) fn adaptive(&self) -> bool {
        self.spec.debate.mode == DebateMode::Adaptive
    }

    /// The adaptive screen's node: an embedding of the proposals with `similarity`
    /// termination, else the judge's verdict; none without `debate.mode: "adaptive"`.
    pub(super) fn screen(&self) -> Option<TaskKind> {
        match (self.adaptive(), self.termination()) {
            (false, _) => None,
            (true, TerminationType::Similarity) => Some(TaskKind::Embed),
            (true, _) => Some(TaskKind::Verdict),
        }
    }

    /// Every agent's round-1 proposal is in: the screen can compare them.
    pub(super) fn screen_due(&self) -> bool {
        self.round(1).is_some_and(|rd| {
            self.agents
                .iter()
                .all(|a| rd.find(ContributionType::Proposal, &a.id, None).is_some())
        })
    }

    /// Adaptive and the proposals already agreed: synthesize from round 1's proposals.
    pub(super) fn short_path(&self) -> bool {
        self.state
            .adaptive
            .as_ref()
            .is_some_and(|a| a.path == AdaptivePath::Short)
    }

    /// Round 1's critiques wait for the adaptive screen (and never run on the short path).
    pub(super) fn critiques_open(&self, r: u32) -> bool {
        r > 1
            || !self.adaptive()
            || self
                .state
                .adaptive
                .as_ref()
                .is_some_and(|a| a.path == AdaptivePath::Full)
    }

    /// The newest verdict: of the last round that has one, else the adaptive screen's.
    pub(super) fn last_verdict(&self) -> Option<&Verdict> {
        self.state
            .rounds
            .iter()
            .rev()
            .find_map(|rd| rd.verdict.as_ref())
            .or(self
                .state
                .adaptive
                .as_ref()
                .and_then(|a| a.verdict.as_ref()))
            .map(|v| &v.verdict)
    }

    /// Stores the judge's verdict on round r (or, r = 0, the adaptive screen): an unreadable
    /// reply counts as continue with a warning; open issues are bounded.
    pub(super) fn record_verdict(
        &mut self,
        r: u32,
        out: TaskOutput,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let mut verdict = out
            .verdict
            .unwrap_or_else(|| Verdict::unreadable(parley_protocol::preview(&out.content, 2_000)));
        if !verdict.valid {
            self.warn(
                fx,
                now,
                format!("round {r}: the judge's verdict was not the JSON asked for; counted as continue"),
            );
        }
        verdict.confidence = if verdict.confidence.is_finite() {
            verdict.confidence.clamp(0.0, 100.0)
        } else {
            0.0
        };
        verdict.open_issues.truncate(limits::MAX_OPEN_ISSUES);
        for issue in &mut verdict.open_issues {
            *issue = parley_protocol::preview(issue.trim(), limits::MAX_OPEN_ISSUE_CHARS);
        }
        self.emit(
            fx,
            now,
            EventKind::VerdictGiven {
                round: r,
                verdict: verdict.verdict,
                confidence: verdict.confidence,
                open_issues: verdict.open_issues.len(),
                valid: verdict.valid,
            },
        );
        if r == 0 {
            self.choose_path(verdict, out.metadata, now, fx);
        } else if let Some(rd) = self.round_mut(r) {
            rd.verdict = Some(RoundVerdict {
                verdict,
                metadata: out.metadata,
            });
        }
    }

    /// Keeps round r's similarities (values outside -1..=1 or not numbers are not kept: a
    /// worker's reply is outside input) and whether the debate stops on them.
    pub(super) fn record_similarity(
        &mut self,
        r: u32,
        out: TaskOutput,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let valid = |x: &f64| x.is_finite() && (-1.0..=1.0).contains(x);
        let mut similarity = out.similarity.unwrap_or_default();
        similarity
            .per_agent
            .retain(|id, s| valid(s) && self.agents.iter().any(|a| &a.id == id));
        similarity.across_agents = similarity.across_agents.filter(valid);
        if r == 0 {
            // The adaptive screen: the proposals against each other, no round before.
            let screen = RoundSimilarity {
                similarity,
                threshold: self.threshold(),
                converged: false,
                metadata: out.metadata,
            };
            return self.choose_path_by_similarity(screen, now, fx);
        }
        if similarity.per_agent.is_empty() && r >= 2 {
            self.warn(
                fx,
                now,
                format!("round {r}: no similarity could be measured; the debate goes on"),
            );
        }
        let threshold = self.threshold();
        let ids: Vec<&str> = self.agents.iter().map(|a| a.id.as_str()).collect();
        let converged = similarity.converged(&ids, threshold);
        self.emit(
            fx,
            now,
            EventKind::SimilarityMeasured {
                round: r,
                min_per_agent: similarity.min_per_agent(),
                across_agents: similarity.across_agents,
                threshold,
                converged,
            },
        );
        if let Some(rd) = self.round_mut(r) {
            rd.similarity = Some(RoundSimilarity {
                similarity,
                threshold,
                converged,
                metadata: out.metadata,
            });
        }
    }

    /// Adaptive: the short path when the screen's verdict is done at the threshold, else
    /// the full debate; recorded with the reason and announced.
    pub(super) fn choose_path(
        &mut self,
        verdict: Verdict,
        metadata: ContributionMetadata,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let threshold = self.threshold();
        let (path, reason) = if verdict.is_done_at(threshold) {
            (
                AdaptivePath::Short,
                format!(
                    "the judge found the proposals in agreement (done, confidence {} ≥ threshold {threshold}): synthesized at once",
                    verdict.confidence
                ),
            )
        } else if !verdict.valid {
            (
                AdaptivePath::Full,
                format!(
                    "no usable verdict on the proposals ({}): debating as configured",
                    parley_protocol::preview(&verdict.reasoning, 200)
                ),
            )
        } else {
            (
                AdaptivePath::Full,
                format!(
                    "the judge's verdict on the proposals was {} at confidence {} (threshold {threshold}): debating as configured",
                    match verdict.verdict {
                        parley_protocol::VerdictDecision::Done => "done",
                        parley_protocol::VerdictDecision::Continue => "continue",
                    },
                    verdict.confidence
                ),
            )
        };
        self.state.adaptive = Some(AdaptiveRecord {
            path,
            reason: reason.clone(),
            verdict: Some(RoundVerdict { verdict, metadata }),
            similarity: None,
        });
        self.emit(fx, now, EventKind::AdaptivePathChosen { path, reason });
    }

    /// Adaptive with `terminationCondition.type: "similarity"`: the short path when the
    /// round-1 proposals' mean similarity across agents reaches the threshold, else the
    /// full debate; recorded with the reason and announced.
    pub(super) fn choose_path_by_similarity(
        &mut self,
        mut screen: RoundSimilarity,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let threshold = screen.threshold;
        let (path, reason) = match screen.similarity.across_agents {
            Some(s) if s >= threshold => (
                AdaptivePath::Short,
                format!(
                    "the proposals agree (mean similarity across agents {s:.3} ≥ threshold {threshold}): synthesized at once"
                ),
            ),
            Some(s) => (
                AdaptivePath::Full,
                format!(
                    "the proposals differ (mean similarity across agents {s:.3} < threshold {threshold}): debating as configured"
                ),
            ),
            None => (
                AdaptivePath::Full,
                "no similarity of the proposals could be measured: debating as configured"
                    .to_string(),
            ),
        };
        screen.converged = path == AdaptivePath::Short;
        self.state.adaptive = Some(AdaptiveRecord {
            path,
            reason: reason.clone(),
            verdict: None,
            similarity: Some(screen),
        });
        self.emit(fx, now, EventKind::AdaptivePathChosen { path, reason });
    }
}
