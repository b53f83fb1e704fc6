//! Built-in role prompts and prompt builders.

use std::sync::LazyLock;

use parley_protocol::PeerText;

/// The prompts that make a role, read from its file in `prompts/<role>.md` (compiled in).
#[derive(Debug, Clone, Copy)]
pub struct RolePrompts {
    pub role: &'static str,
    pub system: &'static str,
    /// What this role looks at first, used in every task prompt.
    pub focus: &'static str,
    /// The section headings a proposal of this role uses.
    pub propose: &'static str,
    /// The section headings a critique of this role uses.
    pub critique: &'static str,
    /// The section headings a refinement of this role uses.
    pub refine: &'static str,
}

/// One file per role: `## system`, `## focus`, `## propose`, `## critique`, `## refine`
/// sections, in that order (the headings inside the outlines are `## ` lines too, so the
/// five section names are matched exactly).
const FILES: [(&str, &str); 7] = [
    ("architect", include_str!("../prompts/architect.md")),
    ("performance", include_str!("../prompts/performance.md")),
    ("security", include_str!("../prompts/security.md")),
    ("testing", include_str!("../prompts/testing.md")),
    ("kiss", include_str!("../prompts/kiss.md")),
    ("datamodeling", include_str!("../prompts/datamodeling.md")),
    ("generalist", include_str!("../prompts/generalist.md")),
];

const SECTIONS: [&str; 5] = ["system", "focus", "propose", "critique", "refine"];

/// Splits a role file into its five sections (missing ones are empty; a unit test checks
/// every shipped file has all five).
fn parse(role: &'static str, text: &'static str) -> RolePrompts {
    let mut found: [&'static str; 5] = [""; 5];
    let mut current: Option<(usize, usize)> = None; // (section, byte start of its body)
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let name = line.trim_end().strip_prefix("## ");
        if let Some(k) = name.and_then(|n| SECTIONS.iter().position(|s| *s == n)) {
            if let Some((prev, start)) = current {
                found[prev] = text[start..offset].trim();
            }
            current = Some((k, offset + line.len()));
        }
        offset += line.len();
    }
    if let Some((prev, start)) = current {
        found[prev] = text[start..].trim();
    }
    let [system, focus, propose, critique, refine] = found;
    RolePrompts {
        role,
        system,
        focus,
        propose,
        critique,
        refine,
    }
}

static ROLES: LazyLock<Vec<RolePrompts>> =
    LazyLock::new(|| FILES.iter().map(|(r, t)| parse(r, t)).collect());

/// The prompts for `role`; an unknown role gets the architect prompts (the coordinator
/// warns about it when the debate starts).
pub fn role_prompts(role: &str) -> &'static RolePrompts {
    ROLES.iter().find(|p| p.role == role).unwrap_or(&ROLES[0])
}

/// Asked of every proposal and refinement: the section `parley eval` and the judge read to
/// see which requirements a design claims to meet.
const REQUIREMENTS_COVERAGE: &str = "## Requirements Coverage\n(each major requirement or \
constraint of the problem, and the part of your design that meets it, or \"not met\" and why)";

/// Keeps every role's answer about this problem, not about software in general.
const GROUNDING: &str = "Tie every component, claim and trade-off to this problem and its \
constraints; leave out generic advice the problem does not need.";

fn problem_block(problem: &str, context: Option<&str>) -> String {
    match context.filter(|c| !c.trim().is_empty()) {
        Some(c) => format!("Problem:\n{problem}\n\nAdditional context:\n{c}\n"),
        None => format!("Problem:\n{problem}\n"),
    }
}

fn history_block(history: Option<&str>) -> String {
    match history.filter(|h| !h.trim().is_empty()) {
        Some(h) => format!("\nYour previous rounds:\n{h}\n"),
        None => String::new(),
    }
}

pub fn propose(
    p: &RolePrompts,
    problem: &str,
    context: Option<&str>,
    history: Option<&str>,
) -> String {
    format!(
        "{}{}\nPropose a solution from the perspective of {}. {GROUNDING} Use these sections, \
short paragraphs and bullet points:\n{}\n{REQUIREMENTS_COVERAGE}",
        problem_block(problem, context),
        history_block(history),
        p.focus,
        p.propose
    )
}

pub fn critique(
    p: &RolePrompts,
    problem: &str,
    proposal: &PeerText,
    history: Option<&str>,
) -> String {
    format!(
        "{}{}\nHere is the proposal of {} ({}):\n{}\n\nCritique it from the perspective of {}. \
Raise only what matters for this problem, each point tied to it. Use these sections:\n{}",
        problem_block(problem, None),
        history_block(history),
        proposal.agent_id,
        proposal.agent_role,
        proposal.content,
        p.focus,
        p.critique
    )
}

pub fn refine(
    p: &RolePrompts,
    problem: &str,
    own: &PeerText,
    critiques: &[PeerText],
    history: Option<&str>,
) -> String {
    let mut crit = String::new();
    for c in critiques {
        crit.push_str(&format!(
            "\nCritique from {} ({}):\n{}\n",
            c.agent_id, c.agent_role, c.content
        ));
    }
    if crit.is_empty() {
        crit.push_str("\n(No critiques were received.)\n");
    }
    format!(
        "{}{}\nYour proposal:\n{}\n{}\nRefine your proposal: address the valid points of the \
critiques, keep what was right, and stay focused on {}. Give the complete refined proposal \
in these sections:\n{}\n{REQUIREMENTS_COVERAGE}",
        problem_block(problem, None),
        history_block(history),
        own.content,
        crit,
        p.focus,
        p.refine
    )
}

pub fn summarize(p: &RolePrompts, history: &str, max_length: usize) -> String {
    format!(
        "Summarize the debate so far from your perspective ({}): the current state of your \
proposal, the critiques that mattered and the decisions made. Keep it under {max_length} \
characters.\n\n{history}",
        p.focus
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_role_has_its_own_prompts() {
        for role in parley_protocol::KNOWN_ROLES {
            assert_eq!(role_prompts(role).role, *role);
        }
        assert_eq!(role_prompts("astronaut").role, "architect");
    }

    #[test]
    fn every_role_file_has_all_five_sections_and_its_own_words() {
        let mut systems = std::collections::BTreeSet::new();
        for (role, _) in FILES {
            let p = role_prompts(role);
            for (name, text) in [
                ("system", p.system),
                ("focus", p.focus),
                ("propose", p.propose),
                ("critique", p.critique),
                ("refine", p.refine),
            ] {
                assert!(!text.is_empty(), "{role}: empty {name} section");
                assert!(
                    !text.contains("<!--"),
                    "{role}: {name} holds the file comment"
                );
            }
            assert!(!p.focus.contains('\n'), "{role}: focus is one line");
            for outline in [p.propose, p.critique, p.refine] {
                assert!(
                    outline.lines().all(|l| l.starts_with("## ")),
                    "{role}: {outline}"
                );
            }
            assert!(systems.insert(p.system), "{role} shares its system prompt");
        }
        assert!(parley_protocol::KNOWN_ROLES
            .iter()
            .all(|r| FILES.iter().any(|(f, _)| f == r)));
    }

    #[test]
    fn proposals_and_refinements_ask_for_requirements_coverage_critiques_do_not() {
        let p = role_prompts("security");
        let own = PeerText {
            agent_id: "a".into(),
            agent_role: "security".into(),
            content: "P".into(),
        };
        let prop = propose(p, "prob", None, None);
        assert!(prop.contains("## Threat model"), "{prop}");
        assert!(prop.ends_with(REQUIREMENTS_COVERAGE));
        assert!(refine(p, "prob", &own, &[], None).contains("## Requirements Coverage"));
        let crit = critique(p, "prob", &own, None);
        assert!(crit.contains("## Critical risks") && !crit.contains("Requirements Coverage"));
    }

    #[test]
    fn refine_lists_each_critique() {
        let own = PeerText {
            agent_id: "a".into(),
            agent_role: "architect".into(),
            content: "P".into(),
        };
        let cs = vec![
            PeerText {
                agent_id: "b".into(),
                agent_role: "security".into(),
                content: "C1".into(),
            },
            PeerText {
                agent_id: "c".into(),
                agent_role: "kiss".into(),
                content: "C2".into(),
            },
        ];
        let s = refine(role_prompts("architect"), "prob", &own, &cs, None);
        assert!(s.contains("Critique from b (security):\nC1"));
        assert!(s.contains("Critique from c (kiss):\nC2"));
        assert!(s.contains("prob"));
    }
}
