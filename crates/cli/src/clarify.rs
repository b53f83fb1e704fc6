//! Answering a debate's clarification questions from the command line: typed on the
//! terminal, or read from an answers file (`--answers F`).
//!
//! On a terminal the questions are printed on stderr, grouped by agent and numbered, and
//! each answer is one line read from stdin (Enter alone: `NA`). An answers file is a JSON
//! object mapping question ids to answers (`{"agent-architect-q1": "about 10k users"}`);
//! `[{"id", "answer"}]` and `{"answers": [{"id", "answer"}]}` are read too. A question the
//! file does not answer is answered `NA` (follow-up questions get new ids, so a file written
//! before the run cannot know them), with a note naming it.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use parley_protocol::{limits, AgentClarifications, Answer, NO_ANSWER};
use serde_json::Value;
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;

use crate::CliError;

/// Where answers come from.
#[derive(Debug, Clone)]
pub enum Answers {
    /// `--answers FILE`: question id → answer.
    File {
        path: PathBuf,
        answers: BTreeMap<String, String>,
    },
    /// Typed on the terminal (stdin is one).
    Terminal,
    /// Neither: asking is an error naming `--answers`.
    Missing,
}

impl Answers {
    /// `--answers FILE` when given (read and checked now), else the terminal when stdin is
    /// one, else [`Answers::Missing`].
    pub fn choose(file: Option<&Path>) -> Result<Self, CliError> {
        if let Some(path) = file {
            return Ok(Self::File {
                path: path.to_path_buf(),
                answers: load(path)?,
            });
        }
        Ok(if std::io::stdin().is_terminal() {
            Self::Terminal
        } else {
            Self::Missing
        })
    }

    /// An error when answers cannot be had (no file, no terminal).
    pub fn require(&self) -> Result<(), CliError> {
        match self {
            Self::Missing => Err(missing()),
            _ => Ok(()),
        }
    }

    /// One answer for every question in `pending`. Ctrl-C while typing ends with status 130
    /// and `on_interrupt`.
    pub async fn collect(
        &self,
        pending: &[AgentClarifications],
        iteration: u32,
        interrupt: &CancellationToken,
        on_interrupt: &str,
    ) -> Result<Vec<Answer>, CliError> {
        match self {
            Self::Missing => Err(missing()),
            Self::File { path, answers } => {
                let mut out = Vec::new();
                let mut unanswered = Vec::new();
                for item in pending.iter().flat_map(|g| &g.items) {
                    let answer = match answers.get(&item.id) {
                        Some(a) => a.clone(),
                        None => {
                            unanswered.push(item.id.clone());
                            String::new()
                        }
                    };
                    out.push(Answer {
                        id: item.id.clone(),
                        answer,
                    });
                }
                if !unanswered.is_empty() {
                    eprintln!(
                        "note: {} does not answer {}; answered {NO_ANSWER}",
                        path.display(),
                        unanswered.join(", ")
                    );
                }
                Ok(out)
            }
            Self::Terminal => {
                tokio::select! {
                    r = ask_on_terminal(pending, iteration) => r,
                    _ = interrupt.cancelled() => {
                        eprintln!();
                        Err(CliError::interrupted(on_interrupt))
                    }
                }
            }
        }
    }
}

fn missing() -> CliError {
    CliError::usage(
        "the agents will ask clarification questions, and there is no terminal to ask them on: \
         pass --answers FILE (a JSON object mapping question ids to answers; a question it \
         does not answer is answered NA)",
    )
}

/// Reads an answers file (see the module docs).
pub fn load(path: &Path) -> Result<BTreeMap<String, String>, CliError> {
    let bad = |why: String| CliError::usage(format!("--answers {}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let mut out = BTreeMap::new();
    let list = match &v {
        Value::Object(m) if m.get("answers").is_some_and(Value::is_array) => {
            m["answers"].as_array().cloned().unwrap_or_default()
        }
        Value::Object(m) => {
            for (id, answer) in m {
                let Some(a) = answer.as_str() else {
                    return Err(bad(format!("the answer to {id:?} is not a string")));
                };
                out.insert(id.clone(), a.to_string());
            }
            Vec::new()
        }
        Value::Array(items) => items.clone(),
        _ => {
            return Err(bad(
                "expected a JSON object mapping question ids to answers".into(),
            ))
        }
    };
    for (i, item) in list.iter().enumerate() {
        let id = item.get("id").and_then(Value::as_str);
        let answer = item.get("answer").and_then(Value::as_str).unwrap_or("");
        let Some(id) = id else {
            return Err(bad(format!("entry {i} has no \"id\"")));
        };
        out.insert(id.to_string(), answer.to_string());
    }
    for (id, a) in &out {
        if a.chars().count() > limits::MAX_ANSWER_CHARS {
            return Err(bad(format!(
                "the answer to {id:?} is longer than {} characters",
                limits::MAX_ANSWER_CHARS
            )));
        }
    }
    Ok(out)
}

/// The questions as the terminal shows them: by agent, numbered, each with its id.
pub fn questions_text(pending: &[AgentClarifications], iteration: u32) -> String {
    let mut out = format!(
        "\nThe agents ask clarification questions (iteration {iteration}). Answer each; Enter alone answers {NO_ANSWER}.\n"
    );
    let mut n = 0;
    for g in pending {
        out.push_str(&format!(
            "\n{} ({}, {}):\n",
            g.agent_name, g.agent_id, g.role
        ));
        for item in &g.items {
            n += 1;
            out.push_str(&format!("  {n}. {}  [{}]\n", item.question, item.id));
        }
    }
    out
}

/// Lines typed on stdin, read by one thread for the whole process (a question asked later
/// must not lose a line to a reader left over from an earlier one). `None` at end of input.
fn stdin_lines() -> &'static Mutex<mpsc::UnboundedReceiver<String>> {
    static LINES: OnceLock<Mutex<mpsc::UnboundedReceiver<String>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            let mut line = String::new();
            loop {
                line.clear();
                match stdin.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx
                            .send(line.trim_end_matches(['\n', '\r']).to_string())
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        });
        Mutex::new(rx)
    })
}

async fn ask_on_terminal(
    pending: &[AgentClarifications],
    iteration: u32,
) -> Result<Vec<Answer>, CliError> {
    eprint!("{}", questions_text(pending, iteration));
    let mut lines = stdin_lines().lock().await;
    let mut out = Vec::new();
    let mut n = 0;
    let mut ended = false;
    for g in pending {
        for item in &g.items {
            n += 1;
            let answer = if ended {
                String::new()
            } else {
                eprint!("{n}. {} > ", item.question);
                let _ = std::io::stderr().flush();
                match lines.recv().await {
                    Some(l) => l,
                    None => {
                        // End of input: the rest are NA.
                        ended = true;
                        eprintln!();
                        String::new()
                    }
                }
            };
            out.push(Answer {
                id: item.id.clone(),
                answer,
            });
        }
    }
    eprintln!();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("parley-answers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn answers_files_in_each_shape_are_read_and_bad_ones_named() {
        let map = load(&tmp("a.json", r#"{"a-q1": "yes", "b-q2": ""}"#)).unwrap();
        assert_eq!(map["a-q1"], "yes");
        assert_eq!(map["b-q2"], "");
        let list = load(&tmp("b.json", r#"[{"id": "a-q1", "answer": "yes"}]"#)).unwrap();
        assert_eq!(list["a-q1"], "yes");
        let wrapped = load(&tmp(
            "c.json",
            r#"{"answers": [{"id": "a-q1", "answer": "y"}]}"#,
        ))
        .unwrap();
        assert_eq!(wrapped["a-q1"], "y");
        for (name, text, expect) in [
            ("d.json", r#"{"a-q1": 3}"#, "a-q1"),
            ("e.json", "nope", "not JSON"),
            ("f.json", r#"[{"answer": "x"}]"#, "no \"id\""),
        ] {
            let e = load(&tmp(name, text)).unwrap_err();
            assert_eq!(e.code, 2);
            assert!(
                e.message.contains("--answers") && e.message.contains(expect),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn questions_are_grouped_by_agent_and_numbered() {
        let g = |id: &str, qs: &[&str]| AgentClarifications {
            agent_id: id.into(),
            agent_name: format!("Agent {id}"),
            role: "security".into(),
            items: qs
                .iter()
                .enumerate()
                .map(|(i, q)| parley_protocol::ClarificationItem {
                    id: format!("{id}-q{}", i + 1),
                    question: q.to_string(),
                    answer: None,
                })
                .collect(),
        };
        let text = questions_text(&[g("a", &["Scale?", "Budget?"]), g("b", &["Users?"])], 2);
        assert!(text.contains("iteration 2"));
        assert!(text.contains("Agent a (a, security):\n  1. Scale?  [a-q1]\n  2. Budget?  [a-q2]"));
        assert!(text.contains("Agent b (b, security):\n  3. Users?  [b-q1]"));
    }
}
