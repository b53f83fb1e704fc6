//! What `parley run` says when the local model took part: it is a small offline demo model
//! (its answers show how a debate flows, not advice), its judge's confidence is self-reported
//! rather than measured, and one line points Parley at a real model.

use std::fmt::Write as _;

use parley_llm::Registry;
use parley_protocol::DebateSpec;

/// The participants of a debate that run on the local model, and which model that is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoModel {
    /// The local model's selection name (`smollm2-135m`).
    pub model: String,
    /// How many agents run on it.
    pub agents: usize,
    /// Whether the judge runs on it (then its confidence is the demo model's own claim).
    pub judge: bool,
}

impl DemoModel {
    /// `None` when no participant of `spec` runs on the local model.
    pub fn of(spec: &DebateSpec, registry: &Registry) -> Option<Self> {
        let local =
            |a: &parley_protocol::AgentConfig| registry.resolve(a).is_ok_and(|r| r.kind == "local");
        let agents = spec.active_agents().filter(|a| local(a)).count();
        let judge = local(&spec.judge);
        if agents == 0 && !judge {
            return None;
        }
        let model = registry
            .local()
            .map(|l| l.model().spec().name.to_string())
            .unwrap_or_else(|_| "the local model".into());
        Some(Self {
            model,
            agents,
            judge,
        })
    }

    /// What follows the judge's confidence on the `Confidence:` line when the judge ran on
    /// the demo model.
    pub fn confidence_note(&self) -> Option<String> {
        self.judge.then(|| {
            format!(
                "self-reported by {}, a small demo model: not a measurement",
                self.model
            )
        })
    }

    /// The notice printed after the solution.
    pub fn notice(&self) -> String {
        let who = match (self.judge, self.agents) {
            (true, 0) => "the judge".to_string(),
            (true, n) => format!("the judge and {n} agent(s)"),
            (false, n) => format!("{n} agent(s)"),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Note: {who} ran on {}, the local offline demo model (a few hundred MB, on the CPU).",
            self.model
        );
        let _ = writeln!(
            out,
            "Its answers show how a debate flows; they are not advice to act on."
        );
        let _ = writeln!(out, "For real answers, point Parley at a real model:");
        let _ = writeln!(
            out,
            "  OPENAI_API_KEY=sk-... parley run \"...\"                  # OpenAI"
        );
        let _ = writeln!(
            out,
            "  OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_API_KEY=unused parley run \"...\""
        );
        let _ = writeln!(
            out,
            "      # a server on this machine (Ollama, llama.cpp's server, vLLM): name its models in debate-config.json"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo(agents: usize, judge: bool) -> DemoModel {
        DemoModel {
            model: "smollm2-135m".into(),
            agents,
            judge,
        }
    }

    #[test]
    fn the_notice_names_who_ran_on_the_demo_model_and_how_to_leave_it() {
        let n = demo(2, true).notice();
        assert!(
            n.contains("the judge and 2 agent(s) ran on smollm2-135m"),
            "{n}"
        );
        assert!(n.contains("not advice"), "{n}");
        assert!(n.contains("OPENAI_API_KEY=sk-..."), "{n}");
        assert!(
            n.contains("OPENAI_BASE_URL=http://localhost:11434/v1"),
            "{n}"
        );
        assert!(demo(0, true).notice().contains("Note: the judge ran on"));
        assert!(demo(3, false).notice().contains("Note: 3 agent(s) ran on"));
    }

    #[test]
    fn only_a_demo_judge_qualifies_the_confidence() {
        assert_eq!(
            demo(2, true).confidence_note().as_deref(),
            Some("self-reported by smollm2-135m, a small demo model: not a measurement")
        );
        assert_eq!(demo(2, false).confidence_note(), None);
    }
}
