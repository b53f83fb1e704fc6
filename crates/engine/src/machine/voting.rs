//! Voting as a synthesis method: ballots, the tally (a tie goes to the judge), the vote in the
//! synthesis prompt, and completing the judge's solution.

use chrono::{DateTime, Utc};
use parley_protocol::{limits, AgentConfig, EventKind, Solution, TaskOutput, Vote, VotingRecord};
use std::collections::BTreeMap;

use super::{Effect, Machine};

impl Machine {
    /// Voting debates vote after the final round (not on the adaptive short path).
    pub(super) fn votes_due(&self) -> bool {
        self.spec.debate.voting() && self.agents.len() >= 2 && !self.short_path()
    }

    /// Every agent has voted and the votes are counted.
    pub(super) fn votes_tallied(&self) -> bool {
        self.state.voting.as_ref().is_some_and(|v| v.tallied)
    }

    /// No vote is due, or every vote is counted.
    pub(super) fn votes_settled(&self) -> bool {
        !self.votes_due() || self.votes_tallied()
    }

    /// Stores an agent's vote: one for itself, for an unknown id, or none readable is
    /// recorded invalid with a warning. Once every agent has voted, the tally.
    pub(super) fn record_vote(
        &mut self,
        exec: &AgentConfig,
        out: TaskOutput,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let (vote, reason) = match out.vote {
            Some(b) => (
                parley_protocol::preview(b.vote.trim(), 200),
                parley_protocol::preview(b.reason.trim(), limits::MAX_VOTE_REASON_CHARS),
            ),
            None => (String::new(), String::new()),
        };
        let invalid = if vote.is_empty() && out.metadata.human {
            Some("no vote given within the deadline".to_string())
        } else if vote.is_empty() {
            Some("no readable vote in the reply".to_string())
        } else if vote == exec.id {
            Some("a vote for itself".to_string())
        } else if !self.agents.iter().any(|a| a.id == vote) {
            Some(format!("{vote:?} is not an agent of this debate"))
        } else {
            None
        };
        if let Some(why) = &invalid {
            self.warn(
                fx,
                now,
                format!("agent {}: invalid vote ({why}); not counted", exec.id),
            );
        }
        self.emit(
            fx,
            now,
            EventKind::VoteCast {
                agent_id: exec.id.clone(),
                vote: vote.clone(),
                valid: invalid.is_none(),
            },
        );
        let order: BTreeMap<&str, usize> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id.as_str(), i))
            .collect();
        let record = self.state.voting.get_or_insert_with(VotingRecord::default);
        record.votes.push(Vote {
            agent_id: exec.id.clone(),
            vote,
            reason,
            valid: invalid.is_none(),
            invalid_reason: invalid,
            metadata: out.metadata,
        });
        record.votes.sort_by_key(|v| {
            order
                .get(v.agent_id.as_str())
                .copied()
                .unwrap_or(usize::MAX)
        });
        if record.votes.len() < self.agents.len() {
            return;
        }
        // Plurality of the valid votes; a tie (or no valid vote) goes to the judge.
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for v in record.votes.iter().filter(|v| v.valid) {
            *counts.entry(v.vote.clone()).or_default() += 1;
        }
        let most = counts.values().copied().max().unwrap_or(0);
        let mut leaders: Vec<String> = if most == 0 {
            self.agents.iter().map(|a| a.id.clone()).collect()
        } else {
            counts
                .iter()
                .filter(|(_, c)| **c == most)
                .map(|(a, _)| a.clone())
                .collect()
        };
        leaders.sort_by_key(|a| order.get(a.as_str()).copied().unwrap_or(usize::MAX));
        let tie = leaders.len() > 1;
        let winner = (!tie).then(|| leaders[0].clone());
        record.counts = counts.clone();
        record.leaders = leaders.clone();
        record.tie = tie;
        record.winner = winner.clone();
        record.tallied = true;
        self.emit(
            fx,
            now,
            EventKind::VotesTallied {
                winner,
                tie,
                leaders,
                counts,
            },
        );
    }

    /// What the judge's synthesis prompt says about the vote: the winner (or the tied
    /// leaders to choose from) and every ballot with its reason.
    pub(super) fn vote_result_text(&self) -> Option<String> {
        let v = self.state.voting.as_ref().filter(|v| v.tallied)?;
        let mut out = match &v.winner {
            Some(w) => format!(
                "The agents voted; the winner is {w} with {} vote(s). Write the solution from {w}'s final refinement and keep the minority's points.\n",
                v.counts.get(w).copied().unwrap_or(0)
            ),
            None => format!(
                "The agents' vote is tied between {}. Pick the best of their final refinements, name it in basedOn, write the solution from it and keep the others' points.\n",
                v.leaders.join(", ")
            ),
        };
        for b in &v.votes {
            if b.valid {
                out.push_str(&format!(
                    "- {} voted for {}: {}\n",
                    b.agent_id, b.vote, b.reason
                ));
            } else {
                out.push_str(&format!(
                    "- {}'s vote was invalid ({}); not counted\n",
                    b.agent_id,
                    b.invalid_reason.as_deref().unwrap_or("invalid")
                ));
            }
        }
        Some(out)
    }

    /// Completes the judge's solution: every open issue of the last verdict the judge left
    /// out is added to the unresolved disagreements (with a warning), and a voting debate
    /// records which refinement it was written from.
    pub(super) fn complete_solution(
        &mut self,
        solution: &mut Solution,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let norm = |s: &str| {
            s.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        };
        let issues = self
            .last_verdict()
            .map(|v| v.open_issues.clone())
            .unwrap_or_default();
        let mut added = 0;
        for issue in issues {
            let n = norm(&issue);
            if !solution
                .unresolved_disagreements
                .iter()
                .any(|d| norm(d).contains(&n))
            {
                solution.unresolved_disagreements.push(issue);
                added += 1;
            }
        }
        if added > 0 {
            self.warn(
                fx,
                now,
                format!("the synthesis left out {added} open issue(s) of the judge's last verdict; added to its unresolved disagreements"),
            );
        }
        if let Some(v) = self.state.voting.as_ref().filter(|v| v.tallied) {
            let judge_pick = solution.based_on.clone().filter(|b| v.leaders.contains(b));
            solution.based_on = v.winner.clone().or(judge_pick);
        }
    }
}
