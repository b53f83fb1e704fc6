//! Histories and transcripts: each agent's perspective history, when its summary is due,
//! the round and final transcripts the judge reads.

use parley_protocol::{task_id, ContributionType, SummarizationConfig, TaskKind};

use super::Machine;

impl Machine {
    /// The judge summarizes the final transcript before the synthesis.
    pub(super) fn judge_summary_due(&self) -> bool {
        let cfg = self.summarization_for(None);
        let last = self.state.rounds.len() as u32;
        let id = task_id(
            &self.state.id,
            last,
            TaskKind::JudgeSummarize,
            &self.spec.judge.id,
            None,
        );
        cfg.enabled
            && self.state.judge_summary.is_none()
            && !self.budget_skipped(&id)
            && self.final_transcript().chars().count() > cfg.threshold
    }

    pub(super) fn summarization_for(&self, agent: Option<usize>) -> &SummarizationConfig {
        let own = match agent {
            Some(i) => self.agents[i].summarization.as_ref(),
            None => self.spec.judge.summarization.as_ref(),
        };
        own.unwrap_or(&self.spec.debate.summarization)
    }

    /// Whether agent i's summary for round r is settled: not due, or present.
    /// `None` while that cannot be known yet (previous refinement missing).
    pub(super) fn summary_settled(&self, i: usize, r: u32) -> Option<bool> {
        // A person's history is never summarized.
        if r < 2 || !self.summarization_for(Some(i)).enabled || self.agents[i].is_human() {
            return Some(true);
        }
        let id = &self.agents[i].id;
        self.round(r - 1)?
            .find(ContributionType::Refinement, id, None)?;
        if self.round(r)?.summaries.contains_key(id) {
            return Some(true);
        }
        if self.history_chars(i, r) <= self.summarization_for(Some(i)).threshold {
            return Some(true);
        }
        Some(self.budget_skipped(&task_id(&self.state.id, r, TaskKind::Summarize, id, None)))
    }

    /// Agent i's perspective history before round r: its proposals, the critiques it
    /// received and its refinements, starting from its newest summary.
    pub(super) fn history(&self, i: usize, r: u32) -> String {
        let mut out = String::new();
        self.write_history(i, r, &mut out);
        out
    }

    /// The length of [`Machine::history`] in chars, counted without building it, and
    /// remembered (the plan asks on every transition whether an agent's history needs a
    /// summary): see [`HistoryLengths`].
    pub(super) fn history_chars(&self, i: usize, r: u32) -> usize {
        let mark = self.history_mark(r);
        if let Some(n) = self.history_lengths.get(i, r, mark) {
            return n;
        }
        let n = self.count_history_chars(i, r);
        self.history_lengths.put(i, r, mark, n);
        n
    }

    /// What a history before round r is made of, counted: the contributions of rounds 1
    /// to r - 1 and the summaries of rounds 1 to r. Within one machine both only grow
    /// (a contribution or summary is inserted, never edited or removed), so an equal
    /// count is an equal history.
    fn history_mark(&self, r: u32) -> usize {
        (1..=r)
            .filter_map(|k| self.round(k))
            .map(|rd| {
                rd.summaries.len()
                    + if rd.round_number < r {
                        rd.contributions.len()
                    } else {
                        0
                    }
            })
            .sum()
    }

    pub(super) fn count_history_chars(&self, i: usize, r: u32) -> usize {
        /// Counts the chars written to it.
        struct Chars(usize);
        impl std::fmt::Write for Chars {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0 += s.chars().count();
                Ok(())
            }
        }
        let mut n = Chars(0);
        self.write_history(i, r, &mut n);
        n.0
    }

    fn write_history(&self, i: usize, r: u32, out: &mut impl std::fmt::Write) {
        let id = &self.agents[i].id;
        let mut from = 1;
        for k in (1..=r).rev() {
            if let Some(s) = self.round(k).and_then(|rd| rd.summaries.get(id)) {
                let _ = write!(out, "Summary of your earlier rounds:\n{}\n\n", s.summary);
                from = k;
                break;
            }
        }
        for k in from..r {
            let Some(rd) = self.round(k) else { continue };
            if let Some(p) = rd.find(ContributionType::Proposal, id, None) {
                let _ = write!(out, "Round {k} - your proposal:\n{}\n\n", p.content);
            }
            for c in rd.contributions.iter().filter(|c| {
                c.kind == ContributionType::Critique && c.target_agent_id.as_deref() == Some(id)
            }) {
                let _ = write!(
                    out,
                    "Round {k} - critique from {} ({}):\n{}\n\n",
                    c.agent_id, c.agent_role, c.content
                );
            }
            if let Some(p) = rd.find(ContributionType::Refinement, id, None) {
                let _ = write!(out, "Round {k} - your refinement:\n{}\n\n", p.content);
            }
        }
    }

    pub(super) fn history_input(&self, i: usize, r: u32) -> Option<String> {
        if !self.spec.debate.include_full_history {
            let id = &self.agents[i].id;
            return (1..=r)
                .rev()
                .find_map(|k| self.round(k).and_then(|rd| rd.summaries.get(id)))
                .map(|s| s.summary.clone());
        }
        let h = self.history(i, r);
        (!h.is_empty()).then_some(h)
    }

    pub(super) fn round_transcript(&self, r: u32) -> String {
        let mut out = String::new();
        let Some(rd) = self.round(r) else { return out };
        for a in &self.agents {
            if let Some(c) = rd
                .find(ContributionType::Refinement, &a.id, None)
                .or_else(|| rd.find(ContributionType::Proposal, &a.id, None))
            {
                out.push_str(&format!(
                    "### {} ({}) — round {r}\n{}\n\n",
                    a.id, a.role, c.content
                ));
            }
        }
        out
    }

    /// What the judge synthesizes from: the whole debate or just the final round.
    pub(super) fn final_transcript(&self) -> String {
        let mut last = self.state.rounds.len() as u32;
        // Stopped just after a round opened: its newest complete text is the round before.
        if self.state.steering.stopped && last > 1 && self.round_transcript(last).is_empty() {
            last -= 1;
        }
        if self.spec.debate.include_full_history {
            (1..=last).map(|r| self.round_transcript(r)).collect()
        } else {
            self.round_transcript(last)
        }
    }
}

/// Lengths of agents' histories already counted, by (agent, round), each with the
/// [`Machine::history_mark`] it was counted at. Not checkpointed: a machine rebuilt from a
/// checkpoint counts again.
#[derive(Debug, Default)]
pub(super) struct HistoryLengths(
    std::sync::Mutex<std::collections::BTreeMap<(usize, u32), (usize, usize)>>,
);

impl HistoryLengths {
    fn get(&self, i: usize, r: u32, mark: usize) -> Option<usize> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        memo.get(&(i, r))
            .filter(|(m, _)| *m == mark)
            .map(|(_, n)| *n)
    }

    fn put(&self, i: usize, r: u32, mark: usize, n: usize) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Only the open rounds are asked about: older entries are never read again.
        memo.retain(|(_, round), _| *round + 2 >= r);
        memo.insert((i, r), (mark, n));
    }
}

impl Clone for HistoryLengths {
    fn clone(&self) -> Self {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Self(std::sync::Mutex::new(memo.clone()))
    }
}
