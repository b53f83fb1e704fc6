//! Built-in role prompts and prompt builders.

use parley_protocol::PeerText;

/// The prompts that make a role.
#[derive(Debug, Clone, Copy)]
pub struct RolePrompts {
    pub role: &'static str,
    pub system: &'static str,
    /// What this role looks at first, used in every task prompt.
    pub focus: &'static str,
}

const ARCHITECT: RolePrompts = RolePrompts {
    role: "architect",
    system: "You are a senior software architect. You design systems that are modular, \
scalable and maintainable, and you explain component boundaries, data flow, interfaces and \
the reasons behind each choice. Be concrete and concise.",
    focus: "architecture: components, boundaries, data flow, scalability and maintainability",
};
const PERFORMANCE: RolePrompts = RolePrompts {
    role: "performance",
    system: "You are a performance engineer. You reason about latency, throughput, memory, \
contention and cost, you estimate the numbers, and you point out where a design will be \
slow and how to measure it. Be concrete and concise.",
    focus: "performance: latency, throughput, resource use, bottlenecks and how to measure them",
};
const SECURITY: RolePrompts = RolePrompts {
    role: "security",
    system: "You are a security engineer. You model threats, find weaknesses in \
authentication, authorization, data handling and dependencies, and propose practical \
mitigations. Be concrete and concise.",
    focus: "security: threats, trust boundaries, secrets, authentication and data protection",
};
const TESTING: RolePrompts = RolePrompts {
    role: "testing",
    system: "You are a test and reliability engineer. You ask how each part will be \
verified, which failures must be handled, and what tests, fault injection and observability \
the design needs. Be concrete and concise.",
    focus: "testability and reliability: test strategy, failure modes and observability",
};
const KISS: RolePrompts = RolePrompts {
    role: "kiss",
    system: "You are a pragmatic engineer who keeps things simple. You look for the \
smallest design that solves the real problem, remove needless parts, and push back on \
complexity that does not pay for itself. Be concrete and concise.",
    focus: "simplicity: the smallest design that works, and complexity that can be removed",
};
const DATAMODELING: RolePrompts = RolePrompts {
    role: "datamodeling",
    system: "You are a data modeling engineer. You work out the entities, their identities \
and relationships, the invariants the data must keep, and where each piece of data lives and \
who owns it. You choose storage and schemas for the access patterns the problem implies, \
and you plan for consistency, retention, migrations and schema evolution. Be concrete and \
concise.",
    focus: "data: entities and relationships, invariants, ownership, access patterns, \
storage choices, consistency and schema evolution",
};
const GENERALIST: RolePrompts = RolePrompts {
    role: "generalist",
    system: "You are an experienced generalist software engineer. You weigh architecture, \
performance, security, testing and simplicity together and look for a balanced, practical \
solution. Be concrete and concise.",
    focus: "the overall balance of the solution across all concerns",
};

/// The prompts for `role`; an unknown role gets the architect prompts (the coordinator
/// warns about it when the debate starts).
pub fn role_prompts(role: &str) -> &'static RolePrompts {
    match role {
        "performance" => &PERFORMANCE,
        "security" => &SECURITY,
        "testing" => &TESTING,
        "kiss" => &KISS,
        "generalist" => &GENERALIST,
        "datamodeling" => &DATAMODELING,
        _ => &ARCHITECT,
    }
}

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
        "{}{}\nPropose a solution from the perspective of {}. Give the key components, how they \
work together, and the main risks. Use short sections and bullet points.",
        problem_block(problem, context),
        history_block(history),
        p.focus
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
List its strengths, its weaknesses, and specific improvements.",
        problem_block(problem, None),
        history_block(history),
        proposal.agent_id,
        proposal.agent_role,
        proposal.content,
        p.focus
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
critiques, keep what was right, and stay focused on {}. Give the complete refined proposal.",
        problem_block(problem, None),
        history_block(history),
        own.content,
        crit,
        p.focus
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
        let s = refine(&ARCHITECT, "prob", &own, &cs, None);
        assert!(s.contains("Critique from b (security):\nC1"));
        assert!(s.contains("Critique from c (kiss):\nC2"));
        assert!(s.contains("prob"));
    }
}
