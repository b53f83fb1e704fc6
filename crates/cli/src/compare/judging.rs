//! The judges: the self-consistency pick, the rubric and the pairwise verdicts.

use parley_llm::{Registry, ResponseFormat};
use serde_json::json;

use super::file::CompareFile;
use super::problems::Problem;
use super::records::{digest, EvalSpend, PairRecord, RubricRecord, RunRecord};
use super::recused;
use super::stats::Verdict;
use super::strategies::{call, request, Call};
use crate::eval::{self, DebateInput, Evaluator};
use crate::CliError;

pub(super) const PAIR_SYSTEM_PROMPT: &str =
    "You are an impartial judge of software designs. You are \
given a problem, its requirements and two answers, A and B. Decide which answer is better \
on requirement coverage, soundness and concreteness; answer \"tie\" only if neither is \
better. The order of the answers is arbitrary and must not influence you. Reply with JSON \
only: {\"winner\": \"A\" | \"B\" | \"tie\", \"reason\": \"<one sentence>\"}.";

/// The rubric of `parley eval` on one run's answer, by the evaluators not recused.
pub(super) async fn rubric_of(
    registry: &Registry,
    evaluators: &[Evaluator],
    file: &CompareFile,
    problem: &Problem,
    run: &RunRecord,
    spend: &mut EvalSpend,
) -> RubricRecord {
    let (recused, judging): (Vec<&Evaluator>, Vec<&Evaluator>) =
        evaluators.iter().partition(|e| recused(file, e, run));
    let judging: Vec<Evaluator> = judging.into_iter().cloned().collect();
    let input = DebateInput {
        name: format!("{}__{}", problem.id, run.strategy),
        problem: problem.text.clone(),
        final_solution: run.answer.clone(),
        clarifications: "None.".into(),
        requirements_info: serde_json::to_string_pretty(&json!({
            "majorRequirements": problem.requirements,
        }))
        .unwrap_or_default(),
    };
    let replies = eval::call_locally(registry, &judging, &input).await;
    for r in replies.iter().flatten() {
        spend.calls += 1;
        spend.prompt_tokens += r.prompt_tokens;
        spend.completion_tokens += r.completion_tokens;
    }
    let scored = eval::score(&judging, &input, replies, false);
    RubricRecord {
        answer_digest: digest(&[&run.answer]),
        averages: scored.averages,
        recused: recused.iter().map(|e| e.agent.id.clone()).collect(),
        skipped: scored
            .skipped
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
            .collect(),
    }
}

pub(super) fn pair_format() -> ResponseFormat {
    ResponseFormat::strict(
        "pairwise_verdict",
        json!({
            "type": "object",
            "properties": {
                "winner": {"type": "string", "enum": ["A", "B", "tie"]},
                "reason": {"type": "string"}
            },
            "required": ["winner", "reason"],
            "additionalProperties": false
        }),
    )
}

/// The pairwise prompt: the problem, its requirements, `first` as answer A and `second`
/// as answer B.
pub fn pair_prompt(problem: &Problem, first: &str, second: &str) -> String {
    let mut reqs = String::new();
    for r in &problem.requirements {
        reqs.push_str(&format!("- {r}\n"));
    }
    format!(
        "# Problem\n\n{}\n\n# Requirements\n\n{reqs}\n# Answer A\n\n{}\n\n# Answer B\n\n{}\n\n\
         Which answer is better? Reply with the JSON object only.",
        problem.text,
        first.trim(),
        second.trim()
    )
}

/// `{"winner": "A" | "B" | "tie"}` (any case) as a verdict.
pub fn parse_verdict(text: &str) -> Option<Verdict> {
    let reply = eval::parse_reply(text)?;
    match reply
        .get("winner")?
        .as_str()?
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "a" => Some(Verdict::First),
        "b" => Some(Verdict::Second),
        "tie" => Some(Verdict::Tie),
        _ => None,
    }
}

/// Asks evaluator `e` about `a` and `b` in both orders (the two calls at once).
pub(super) async fn judge_pair(
    registry: &Registry,
    e: &Evaluator,
    problem: &Problem,
    a: &RunRecord,
    b: &RunRecord,
    spend: &mut EvalSpend,
) -> PairRecord {
    let ask = |first: &RunRecord, second: &RunRecord| {
        let req = request(
            &e.agent,
            PAIR_SYSTEM_PROMPT,
            pair_prompt(problem, &first.answer, &second.answer),
            e.timeout,
            None,
            Some(pair_format()),
        );
        call(registry, &e.agent, req)
    };
    let (ab, ba) = futures::join!(ask(a, b), ask(b, a));
    let mut verdict = |r: Result<Call, CliError>, order: &str| match r {
        Ok(c) => {
            spend.calls += 1;
            spend.prompt_tokens += c.prompt_tokens;
            spend.completion_tokens += c.completion_tokens;
            let v = parse_verdict(&c.text);
            if v.is_none() {
                eprintln!(
                    "[{}] {} {order}: the reply names no winner; not counted",
                    e.agent.id, problem.id
                );
            }
            v
        }
        Err(err) => {
            eprintln!("[{}] {} {order}: {}", e.agent.id, problem.id, err.message);
            None
        }
    };
    PairRecord {
        problem: problem.id.clone(),
        a: a.strategy.clone(),
        b: b.strategy.clone(),
        evaluator: e.agent.id.clone(),
        answers_digest: digest(&[&a.answer, &b.answer]),
        a_first: verdict(ab, &format!("{} first", a.strategy)),
        b_first: verdict(ba, &format!("{} first", b.strategy)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::strategies::parse_selection;

    #[test]
    fn verdicts_and_selections_parse() {
        assert_eq!(
            parse_verdict(r#"{"winner": "A", "reason": "x"}"#),
            Some(Verdict::First)
        );
        assert_eq!(
            parse_verdict(r#"ok ```{"winner":"b"}```"#),
            Some(Verdict::Second)
        );
        assert_eq!(parse_verdict(r#"{"winner": "Tie"}"#), Some(Verdict::Tie));
        assert_eq!(parse_verdict(r#"{"winner": "both"}"#), None);
        assert_eq!(parse_verdict("A is better"), None);
        assert_eq!(parse_selection(r#"{"best": 2}"#, 3), Some(1));
        assert_eq!(parse_selection(r#"{"best": "3"}"#, 3), Some(2));
        assert_eq!(parse_selection(r#"{"best": 4}"#, 3), None);
        assert_eq!(parse_selection(r#"{"best": 0}"#, 3), None);
    }
}
