//! The judge's prompts.

pub const SYSTEM: &str = "You are the judge of a technical design debate. You weigh the \
arguments of every participant fairly, resolve their disagreements, and produce a single \
practical solution with its tradeoffs. You answer in the exact format requested.";

pub const STRICT_JSON: &str = "Your previous reply was not valid JSON. Reply again with ONLY \
the JSON object, no prose and no code fences, exactly in the requested JSON format.";

pub fn synthesize(problem: &str, context: Option<&str>, transcript: &str) -> String {
    let ctx = context
        .filter(|c| !c.trim().is_empty())
        .map(|c| format!("\nAdditional context:\n{c}\n"))
        .unwrap_or_default();
    format!(
        "Problem:\n{problem}\n{ctx}\nThe debate:\n{transcript}\n\nSynthesize the best final \
solution from the debate: combine the strongest ideas that address this problem and its \
constraints, and leave out generic advice the problem does not call for. Check the solution \
against every requirement the problem states. Reply with a JSON object with these keys: \
\"solutionMarkdown\" (the solution in Markdown, concrete and specific to the problem), \
\"tradeoffs\" (array of strings), \"recommendations\" (array of strings that apply to this \
problem), \"unfulfilledMajorRequirements\" (array: the major requirements the solution does \
not meet; empty if all are met), \"openQuestions\" (array: ambiguities the debate left open; \
empty if none), \"confidence\" (number 0-100: how confident you are in the solution; at most \
40 when a major requirement is unmet)."
    )
}

/// What the synthesis prompt adds for an adaptive debate: the last verdict's open issues
/// (each must be listed under `unresolvedDisagreements`) and the vote (the winner to write
/// from, or the tied leaders to choose among, with the ballots).
pub fn synthesis_extras(open_issues: &[String], vote_result: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(v) = vote_result {
        out.push_str(&format!(
            "\n\nThe agents' vote on the final refinements:\n{v}Also reply with \"basedOn\" \
(string: the agent id whose refinement the solution is written from)."
        ));
    }
    if !open_issues.is_empty() {
        let list: String = open_issues.iter().map(|i| format!("- {i}\n")).collect();
        out.push_str(&format!(
            "\n\nThe judge's last verdict left these issues open:\n{list}Also reply with \
\"unresolvedDisagreements\" (array of strings): every one of these issues, plus any other \
point the participants still disagree on."
        ));
    }
    out
}

/// The per-round verdict (`terminationCondition.type: "verdict"`, and the adaptive screen of
/// the proposals).
pub fn verdict(problem: &str, transcript: &str) -> String {
    format!(
        "Problem:\n{problem}\n\nThe latest answers of the debate's participants:\n{transcript}\n\n\
Give your verdict on the debate so far. \"done\" if the participants agree on a solution \
good enough to write up now, \"continue\" if another round of critique would improve it. List \
the points they still disagree on as open issues. Reply with a JSON object: \
{{\"reasoning\": string, \"verdict\": \"done\" or \"continue\", \"confidence\": integer \
0-100, \"openIssues\": array of strings}}."
    )
}

pub fn evaluate(problem: &str, transcript: &str) -> String {
    format!(
        "Problem:\n{problem}\n\nThe latest round of the debate:\n{transcript}\n\nHow confident \
are you that the proposals have converged on a good solution? Reply with a JSON object: \
{{\"reasoning\": string, \"confidence\": integer 0-100}}."
    )
}

pub fn summarize(problem: &str, transcript: &str, max_length: usize) -> String {
    format!(
        "Problem:\n{problem}\n\nSummarize this debate for the final synthesis: the competing \
proposals, the key critiques and where the participants agree. Keep it under {max_length} \
characters.\n\n{transcript}"
    )
}
