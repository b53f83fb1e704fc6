//! The tools' arguments: their types (whose JSON Schemas the tools advertise), their
//! parsing (a wrong type or an unknown key is named by its path) and their validation
//! (sizes and ranges, every problem named by its argument).

use std::time::Duration;

use parley_web::submit_options::FieldNames;
use parley_web::{
    AgentChoice, Answer, AnswersRequest, BudgetRequest, ModeChoice, SubmitRequest,
    TerminationChoice,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

/// How long `debate_result` waits when the call does not say.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(25);
/// The longest `debate_result` waits: MCP clients give up on a call after about 60 s.
pub const MAX_WAIT_SECONDS: u64 = 50;
/// Debates `list_debates` returns at most.
pub const MAX_LIST: usize = 100;

/// A bad argument: what the MCP error says (each problem starts with the argument's name).
#[derive(Debug, Clone, PartialEq)]
pub struct ArgError(pub String);

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses a tool's arguments into `T`, naming the argument at fault: `rounds: invalid
/// type: string "3", expected u32`, `problem: required`, `colour: unknown argument`.
pub fn parse<T: DeserializeOwned>(args: Option<Map<String, Value>>) -> Result<T, ArgError> {
    let value = Value::Object(args.unwrap_or_default());
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde's messages name a missing or unknown field in backquotes, at the parent's
        // path; say it as `name: ...`.
        let named = |prefix: &str, what: &str| -> Option<String> {
            let rest = inner.strip_prefix(prefix)?;
            let name = rest.split('`').next()?;
            // (An unknown field's path already ends with it; a missing one's is its
            // parent's.)
            let full = if path == "." {
                name.to_string()
            } else if path == name || path.ends_with(&format!(".{name}")) {
                path.clone()
            } else {
                format!("{path}.{name}")
            };
            Some(format!("{full}: {what}"))
        };
        let msg = named("missing field `", "required")
            .or_else(|| named("unknown field `", "unknown argument"))
            .unwrap_or_else(|| {
                if path == "." {
                    inner.clone()
                } else {
                    format!("{path}: {inner}")
                }
            });
        ArgError(msg)
    })
}

/// One agent of a debate (instead of `roles`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentArg {
    /// Display name.
    pub name: String,
    /// Its role (architect, performance, security, testing, kiss, datamodeling,
    /// generalist, or one of the server's configured roles): its prompts come from it.
    pub role: String,
    /// The model it calls.
    pub model: String,
    /// One of the server's providers; none: the server's default for the model.
    #[serde(default)]
    pub provider: Option<String>,
    /// 0-2; none: the role's temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
}

/// How a debate decides to stop before its last round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Termination {
    /// Run every round.
    Fixed,
    /// Stop when the judge's confidence reaches `threshold` (default 80).
    Convergence,
    /// Stop when the judge rates the quality at `threshold` or more.
    Quality,
}

/// `debate` runs its rounds; `adaptive` asks the judge after the proposals and stops at
/// once when they already agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Debate,
    Adaptive,
}

/// `start_debate` and `estimate_debate`: the debate to run. Unset settings come from the
/// server's debate configuration.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DebateArgs {
    /// The design problem to debate (1-100,000 characters).
    pub problem: String,
    /// Keep only the agents of these roles (a known role the configuration lacks gets a
    /// built-in agent). Give either `roles` or `agents`.
    #[serde(default)]
    pub roles: Option<Vec<String>>,
    /// The agents, each with its role, model and provider. Give either `roles` or `agents`.
    #[serde(default)]
    pub agents: Option<Vec<AgentArg>>,
    /// Rounds of propose / critique / refine, 1-20.
    #[serde(default)]
    pub rounds: Option<u32>,
    /// When to stop before the last round.
    #[serde(default)]
    pub termination: Option<Termination>,
    /// The judge's confidence (0-100) at which `convergence` or `quality` stops early.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// `debate` (default) or `adaptive`.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// The most the debate may spend, in dollars; the debate degrades (fewer critiques,
    /// no new round) to stay under it and still ends with a solution.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// The most tokens the debate may spend.
    #[serde(default)]
    pub budget_tokens: Option<u64>,
    /// Background for every agent (the code, constraints, prior decisions); at most
    /// 200,000 characters.
    #[serde(default)]
    pub context: Option<String>,
    /// Let the agents ask clarification questions first: the debate then waits for
    /// `answer_questions` (see `debate_status` / `debate_result`).
    #[serde(default)]
    pub clarify: Option<bool>,
}

impl DebateArgs {
    /// The submission (the HTTP API's request, with the termination, mode, budget and
    /// context), or every problem at once, each named by its argument.
    pub fn into_request(self) -> Result<SubmitRequest, ArgError> {
        let request = SubmitRequest {
            problem: self.problem,
            roles: self.roles,
            agents: self.agents.map(|agents| {
                agents
                    .into_iter()
                    .map(|a| AgentChoice {
                        name: a.name,
                        role: a.role,
                        model: a.model,
                        provider: a.provider,
                        temperature: a.temperature,
                    })
                    .collect()
            }),
            rounds: self.rounds,
            clarify: self.clarify.unwrap_or(false),
            termination: self.termination.map(|t| match t {
                Termination::Fixed => TerminationChoice::Fixed,
                Termination::Convergence => TerminationChoice::Convergence,
                Termination::Quality => TerminationChoice::Quality,
            }),
            threshold: self.threshold,
            mode: self.mode.map(|m| match m {
                Mode::Debate => ModeChoice::Debate,
                Mode::Adaptive => ModeChoice::Adaptive,
            }),
            budget: (self.budget_usd.is_some() || self.budget_tokens.is_some()).then_some(
                BudgetRequest {
                    usd: self.budget_usd,
                    tokens: self.budget_tokens,
                },
            ),
            context: self.context,
            ..Default::default()
        };
        // The request's own checks, naming this tool's arguments.
        request
            .validate_named(TOOL_NAMES)
            .map_err(|e| ArgError(e.message))?;
        Ok(request)
    }
}

/// The budget's arguments as this tool names them.
const TOOL_NAMES: FieldNames = FieldNames {
    budget_usd: "budget_usd",
    budget_tokens: "budget_tokens",
};

/// A debate, by id.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DebateIdArgs {
    /// The id `start_debate` returned (deb-YYYYMMDD-HHMMSS-RAND).
    pub debate_id: String,
}

/// `debate_result`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultArgs {
    /// The id `start_debate` returned.
    pub debate_id: String,
    /// How long to wait for the debate to finish, 0-50 seconds (default 25); then the
    /// call returns where the debate is, and you call again.
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

impl ResultArgs {
    pub fn wait(&self) -> Result<Duration, ArgError> {
        match self.wait_seconds {
            None => Ok(DEFAULT_WAIT),
            Some(s) if s <= MAX_WAIT_SECONDS => Ok(Duration::from_secs(s)),
            Some(s) => Err(ArgError(format!(
                "wait_seconds: {s} is out of range 0-{MAX_WAIT_SECONDS}"
            ))),
        }
    }
}

/// One answer to a clarification question.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerArg {
    /// The question's id, as `debate_status` lists it.
    pub id: String,
    /// The answer; empty: not applicable.
    pub answer: String,
}

/// `answer_questions`' arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswersArgs {
    /// The id `start_debate` returned.
    pub debate_id: String,
    /// Answers to some or all of the questions waiting.
    pub answers: Vec<AnswerArg>,
}

impl AnswersArgs {
    pub fn request(&self) -> Result<AnswersRequest, ArgError> {
        let r = AnswersRequest {
            answers: self
                .answers
                .iter()
                .map(|a| Answer {
                    id: a.id.clone(),
                    answer: a.answer.clone(),
                })
                .collect(),
        };
        r.validate().map_err(|e| ArgError(e.message))?;
        Ok(r)
    }
}

/// `steer_debate`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SteerArgs {
    /// The id `start_debate` returned.
    pub debate_id: String,
    /// `pause` (no new task; the calls in flight finish), `resume`, `guide` (a note every
    /// later prompt carries), `stop` (synthesize now from what exists), `extend` (one more
    /// round).
    pub command: String,
    /// The note of `guide` (at most 4000 characters).
    #[serde(default)]
    pub note: Option<String>,
}

impl SteerArgs {
    pub fn command(&self) -> Result<parley_protocol::SteerCommand, ArgError> {
        parley_protocol::SteerCommand::parse(&self.command, self.note.clone())
            .map_err(|e| ArgError(e.to_string()))
    }
}

/// `contribute`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContributeArgs {
    /// The id `start_debate` returned.
    pub debate_id: String,
    /// The contribution: a proposal, critique or refinement; a vote starts with the id of
    /// the agent voted for, then why (at most 20000 characters).
    pub text: String,
    /// The human agent answering (default: the only human agent with an open task).
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The open task answered (from the state's `human.open`; default: the agent's oldest).
    #[serde(default)]
    pub task_id: Option<String>,
}

/// `list_debates`' arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// At most this many debates, most recently updated first (1-100, default 20).
    #[serde(default)]
    pub limit: Option<usize>,
}

impl ListArgs {
    pub fn limit(&self) -> Result<usize, ArgError> {
        match self.limit {
            None => Ok(20),
            Some(n) if (1..=MAX_LIST).contains(&n) => Ok(n),
            Some(n) => Err(ArgError(format!("limit: {n} is out of range 1-{MAX_LIST}"))),
        }
    }
}

/// A debate id, checked before it names a file or a subject.
pub fn debate_id(id: &str) -> Result<&str, ArgError> {
    if parley_protocol::is_valid_debate_id(id) {
        Ok(id)
    } else {
        Err(ArgError(format!(
            "debate_id: {:?} is not a debate id (deb-YYYYMMDD-HHMMSS-RAND)",
            parley_protocol::preview(id, 40)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_protocol::limits;
    use serde_json::json;

    fn args(v: Value) -> Option<Map<String, Value>> {
        v.as_object().cloned()
    }

    #[test]
    fn parse_errors_name_the_argument() {
        let e = parse::<DebateArgs>(args(json!({"rounds": 2}))).unwrap_err();
        assert_eq!(e.0, "problem: required");
        let e = parse::<DebateArgs>(args(json!({"problem": "P", "rounds": "two"}))).unwrap_err();
        assert!(e.0.starts_with("rounds: invalid type"), "{e}");
        let e = parse::<DebateArgs>(args(json!({"problem": "P", "colour": 1}))).unwrap_err();
        assert_eq!(e.0, "colour: unknown argument");
        let e = parse::<DebateArgs>(args(json!({"problem": "P", "termination": "forever"})))
            .unwrap_err();
        assert!(e.0.starts_with("termination: unknown variant"), "{e}");
        let e = parse::<DebateArgs>(args(json!({"problem": "P", "agents": [{"name": "A"}]})))
            .unwrap_err();
        assert_eq!(e.0, "agents[0].role: required");
        let e = parse::<DebateArgs>(None).unwrap_err();
        assert_eq!(e.0, "problem: required");
        let e =
            parse::<ResultArgs>(args(json!({"debate_id": "x", "wait_seconds": -1}))).unwrap_err();
        assert!(e.0.starts_with("wait_seconds:"), "{e}");
    }

    #[test]
    fn ranges_are_checked_and_every_problem_named() {
        for (rounds, ok) in [
            (0, false),
            (1, true),
            (20, true),
            (21, false),
            (1000, false),
        ] {
            let a: DebateArgs =
                parse(args(json!({"problem": "Design a cache", "rounds": rounds}))).unwrap();
            let r = a.into_request();
            assert_eq!(r.is_ok(), ok, "rounds {rounds}: {r:?}");
            if let Err(e) = r {
                assert!(e.0.starts_with("rounds: "), "{e}");
            }
        }
        let a: DebateArgs = parse(args(json!({
            "problem": " ",
            "threshold": 120,
            "budget_usd": -1,
            "budget_tokens": 0,
            "context": "x".repeat(limits::MAX_CONTEXT_CHARS + 1),
        })))
        .unwrap();
        let e = a.into_request().unwrap_err();
        for name in [
            "problem:",
            "threshold:",
            "budget_usd:",
            "budget_tokens:",
            "context:",
        ] {
            assert!(e.0.contains(name), "{e} lacks {name}");
        }
        let too_long: DebateArgs = parse(args(
            json!({"problem": "p".repeat(limits::MAX_PROBLEM_CHARS + 1)}),
        ))
        .unwrap();
        assert!(too_long.into_request().unwrap_err().0.contains("problem: "));
    }

    #[test]
    fn good_arguments_become_a_request_with_its_options() {
        let a: DebateArgs = parse(args(json!({
            "problem": "Design a cache",
            "roles": ["architect", "security"],
            "rounds": 2,
            "termination": "convergence",
            "threshold": 75,
            "mode": "adaptive",
            "budget_usd": 0.25,
            "context": "Runs on one node",
            "clarify": true,
        })))
        .unwrap();
        let req = a.into_request().unwrap();
        assert_eq!(req.problem, "Design a cache");
        assert_eq!(req.rounds, Some(2));
        assert!(req.clarify);
        assert_eq!(req.idempotency_key, None);
        assert_eq!(req.termination, Some(TerminationChoice::Convergence));
        assert_eq!(req.threshold, Some(75.0));
        assert_eq!(req.mode, Some(ModeChoice::Adaptive));
        assert_eq!(req.budget.unwrap().usd, Some(0.25));
        assert_eq!(req.context.as_deref(), Some("Runs on one node"));
    }

    #[test]
    fn waits_ids_answers_and_limits_are_bounded() {
        let w = |s: Option<u64>| {
            ResultArgs {
                debate_id: String::new(),
                wait_seconds: s,
            }
            .wait()
        };
        assert_eq!(w(None).unwrap(), DEFAULT_WAIT);
        assert_eq!(w(Some(0)).unwrap(), Duration::ZERO);
        assert_eq!(w(Some(50)).unwrap(), Duration::from_secs(50));
        assert!(w(Some(51)).unwrap_err().0.starts_with("wait_seconds:"));
        assert!(debate_id("../etc/passwd")
            .unwrap_err()
            .0
            .starts_with("debate_id:"));
        assert!(debate_id("deb-20260101-000000-abc123").is_ok());
        let bad = AnswersArgs {
            debate_id: String::new(),
            answers: vec![AnswerArg {
                id: "q 1".into(),
                answer: "x".into(),
            }],
        };
        assert!(bad.request().unwrap_err().0.contains("answers[0].id"));
        assert_eq!(ListArgs::default().limit().unwrap(), 20);
        assert!(ListArgs { limit: Some(0) }
            .limit()
            .unwrap_err()
            .0
            .starts_with("limit:"));
    }
}
