//! Budgets count a prompt as at most the task's texts plus its kind's template bound
//! (`parley_engine::budget::template_bytes`, at most `limits::MAX_PROMPT_TEMPLATE_BYTES`; a
//! token per byte): every prompt the agent and judge workers build stays within it, for
//! every role and task kind. For OpenAI-family models budgets count the texts with the
//! model's tokenizer and the template in tokens (`parley_engine::budget::template_tokens`):
//! every prompt, counted as OpenAI counts it, stays within that bound too.

use parley_protocol::{
    limits, AgentClarifications, AgentConfig, ClarificationItem, PeerText, Task, TaskInput,
    TaskKind, KNOWN_ROLES, SCHEMA_VERSION,
};

fn task(role: &str, kind: TaskKind) -> Task {
    let agent: AgentConfig = serde_json::from_value(serde_json::json!({
        "id": "a0", "name": "Agent", "role": role, "model": "m", "temperature": 0.2
    }))
    .unwrap();
    let peer = |i: usize| PeerText {
        agent_id: format!("agent-{i}"),
        agent_role: "security".into(),
        content: "a critique ".repeat(20),
    };
    Task {
        schema_version: SCHEMA_VERSION,
        id: "t".into(),
        debate_id: "deb-20000101-000000-aaaaaa".into(),
        round: 2,
        kind,
        attempt: 1,
        agent,
        target_agent_id: Some("agent-1".into()),
        problem: "Design a cache".into(),
        context: Some("Some context".into()),
        input: TaskInput {
            history: Some("history ".repeat(30)),
            proposal: Some(peer(1)),
            // The most critiques a refinement can get: one from every other agent.
            critiques: (0..limits::MAX_AGENTS - 1).map(peer).collect(),
            transcript: Some("transcript ".repeat(30)),
            max_length: Some(2500),
            clarifications: vec![AgentClarifications {
                agent_id: "a1".into(),
                agent_name: "A1".into(),
                role: "kiss".into(),
                items: vec![ClarificationItem {
                    id: "a1-q1".into(),
                    question: "Which clients?".into(),
                    answer: Some("Mobile".into()),
                }],
            }],
            max_questions: Some(5),
            // A vote's candidates: every other agent's final refinement.
            candidates: (1..limits::MAX_AGENTS).map(peer).collect(),
            open_issues: (0..limits::MAX_OPEN_ISSUES)
                .map(|i| format!("open issue {i}"))
                .collect(),
            vote_result: Some("The agents voted; a1 won.\n- a0 voted for a1: x\n".into()),
            // Only embedding tasks carry the previous round's refinements (no chat prompt).
            previous: Vec::new(),
            // The most guide notes a debate keeps (steering).
            guidance: (0..limits::MAX_GUIDE_NOTES)
                .map(|i| parley_protocol::GuideNote {
                    round: 20,
                    note: format!("guide note {i}"),
                })
                .collect(),
            single_ask: false,
        },
        timeout_ms: 1000,
        dispatch_token: None,
    }
}

/// The prompt's bytes, with 8 a message for the chat format.
fn bytes(messages: &[parley_llm::ChatMessage]) -> u64 {
    messages.iter().map(|m| m.content.len() as u64 + 8).sum()
}

fn bound(kind: TaskKind) -> u64 {
    let b = parley_engine::budget::template_bytes(kind);
    assert!(b <= limits::MAX_PROMPT_TEMPLATE_BYTES, "{kind:?}");
    b
}

#[test]
fn agent_and_judge_prompts_stay_within_the_template_bound() {
    for role in KNOWN_ROLES {
        for kind in [
            TaskKind::Clarify,
            TaskKind::Propose,
            TaskKind::Critique,
            TaskKind::Refine,
            TaskKind::Summarize,
            TaskKind::Vote,
        ] {
            let t = task(role, kind);
            let built = bytes(&parley_agent_worker::build_messages(&t).unwrap());
            println!(
                "{role} {kind:?}: template {} bytes",
                built as i64 - t.text_bytes() as i64
            );
            assert!(
                built <= t.text_bytes() + bound(kind),
                "{role} {kind:?}: {built} bytes for {} bytes of texts",
                t.text_bytes()
            );
        }
    }
    for kind in [
        TaskKind::Evaluate,
        TaskKind::Verdict,
        TaskKind::JudgeSummarize,
        TaskKind::Synthesize,
    ] {
        let t = task("generalist", kind);
        let mut messages = parley_judge_worker::build_messages(&t).unwrap();
        // The stricter second ask adds its instruction.
        messages.push(parley_llm::ChatMessage::user(
            parley_judge_worker::prompts::STRICT_JSON,
        ));
        let built = bytes(&messages);
        println!(
            "judge {kind:?}: template {} bytes",
            built as i64 - t.text_bytes() as i64
        );
        assert!(
            built <= t.text_bytes() + bound(kind),
            "judge {kind:?}: {built} bytes for {} bytes of texts",
            t.text_bytes()
        );
    }
}

/// With one-byte texts (as many items as a prompt can list), a prompt is all template:
/// within its kind's bound.
#[test]
fn bare_prompts_are_within_their_kind_template_bound() {
    let mut most = std::collections::BTreeMap::new();
    for role in KNOWN_ROLES {
        for kind in [
            TaskKind::Clarify,
            TaskKind::Propose,
            TaskKind::Critique,
            TaskKind::Refine,
            TaskKind::Summarize,
            TaskKind::Vote,
        ] {
            let mut t = task(role, kind);
            let small = PeerText {
                agent_id: "agent-1".into(),
                agent_role: "security".into(),
                content: "p".into(),
            };
            t.input = TaskInput {
                max_length: Some(2500),
                max_questions: Some(5),
                proposal: Some(small.clone()),
                // The most items a prompt lists, each with its formatting.
                critiques: vec![small.clone(); limits::MAX_AGENTS - 1],
                candidates: vec![small; limits::MAX_AGENTS - 1],
                history: Some("h".into()),
                transcript: Some("t".into()),
                ..Default::default()
            };
            t.context = None;
            let template = bytes(&parley_agent_worker::build_messages(&t).unwrap())
                .saturating_sub(t.text_bytes());
            let m = most.entry(format!("{kind:?}")).or_insert(0);
            *m = template.max(*m);
            assert!(template <= bound(kind), "{role} {kind:?}: {template}");
        }
    }
    for kind in [
        TaskKind::Evaluate,
        TaskKind::Verdict,
        TaskKind::JudgeSummarize,
        TaskKind::Synthesize,
    ] {
        let mut t = task("generalist", kind);
        t.input = TaskInput {
            max_length: Some(2500),
            transcript: Some(String::new()),
            open_issues: vec!["i".into(); limits::MAX_OPEN_ISSUES],
            vote_result: Some("v".into()),
            ..Default::default()
        };
        t.context = None;
        let mut messages = parley_judge_worker::build_messages(&t).unwrap();
        messages.push(parley_llm::ChatMessage::user(
            parley_judge_worker::prompts::STRICT_JSON,
        ));
        let template = bytes(&messages).saturating_sub(t.text_bytes());
        most.insert(format!("{kind:?}"), template);
        assert!(template <= bound(kind), "judge {kind:?}: {template}");
    }
    println!("{most:?}");
}

/// The prompt's tokens as OpenAI counts them: each message's tokens and 4 for its role and
/// separators, and 3 priming the reply.
fn openai_tokens(
    enc: parley_engine::tokens::Encoding,
    messages: &[parley_llm::ChatMessage],
) -> u64 {
    messages
        .iter()
        .map(|m| enc.bpe().encode_ordinary(&m.content).len() as u64 + 4)
        .sum::<u64>()
        + 3
}

#[test]
fn openai_prompts_stay_within_the_tokenized_bound() {
    let pricing = parley_engine::Pricing::default();
    let mut most = std::collections::BTreeMap::new();
    for model in ["gpt-4o-mini", "gpt-4", "o3", "openai/gpt-4.1"] {
        let enc = parley_engine::tokens::Encoding::of_model(model).unwrap();
        for bare in [false, true] {
            let mut tasks = Vec::new();
            for role in KNOWN_ROLES {
                for kind in [
                    TaskKind::Clarify,
                    TaskKind::Propose,
                    TaskKind::Critique,
                    TaskKind::Refine,
                    TaskKind::Summarize,
                    TaskKind::Vote,
                ] {
                    tasks.push((role.to_string(), task(role, kind)));
                }
            }
            for kind in [
                TaskKind::Evaluate,
                TaskKind::Verdict,
                TaskKind::JudgeSummarize,
                TaskKind::Synthesize,
            ] {
                tasks.push(("judge".to_string(), task("generalist", kind)));
            }
            for (who, mut t) in tasks {
                t.agent.model = model.into();
                if bare {
                    let small = PeerText {
                        agent_id: "agent-1".into(),
                        agent_role: "security".into(),
                        content: "p".into(),
                    };
                    t.input = TaskInput {
                        max_length: Some(2500),
                        max_questions: Some(5),
                        proposal: Some(small.clone()),
                        critiques: vec![small.clone(); limits::MAX_AGENTS - 1],
                        candidates: vec![small; limits::MAX_AGENTS - 1],
                        history: Some("h".into()),
                        transcript: Some("t".into()),
                        open_issues: vec!["i".into(); limits::MAX_OPEN_ISSUES],
                        vote_result: Some("v".into()),
                        ..Default::default()
                    };
                    t.context = None;
                }
                let mut messages = if who == "judge" {
                    parley_judge_worker::build_messages(&t).unwrap()
                } else {
                    parley_agent_worker::build_messages(&t).unwrap()
                };
                if who == "judge" {
                    messages.push(parley_llm::ChatMessage::user(
                        parley_judge_worker::prompts::STRICT_JSON,
                    ));
                }
                let real = openai_tokens(enc, &messages);
                let bound = pricing.prompt_bound(&t);
                let bytes = t.text_bytes() + parley_engine::budget::template_bytes(t.kind);
                assert!(
                    real <= bound,
                    "{model} {who} {:?} (bare: {bare}): {real} tokens, bound {bound}",
                    t.kind
                );
                assert!(
                    bound < bytes,
                    "{model} {who} {:?}: no tighter than bytes",
                    t.kind
                );
                let m = most.entry(format!("{:?}", t.kind)).or_insert((0, 0));
                *m = (m.0.max(real), m.1.max(bound));
            }
        }
    }
    println!("most tokens / bound per kind: {most:?}");
}
