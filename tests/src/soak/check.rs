//! The invariants, checked on the history after a run: from the driver's log, the fake
//! LLM's request log and answers, every debate's events and final state, and the specs in
//! Redis. Each violation carries the debate (when there is one) and the interval of the
//! history around it, printed with the seed.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use parley_protocol::EventKind;
use serde_json::Value;

use super::driver::{nonces, submission_of, Answer, Submission};
use super::nemesis::Happened;

/// One broken invariant.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which invariant.
    pub rule: &'static str,
    pub detail: String,
    /// The debate concerned, if one.
    pub debate: Option<String>,
    /// The interval of the history to print (since the start).
    pub from: Duration,
    pub to: Duration,
}

/// What a debate left behind, read after the run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub id: String,
    /// The final state (or the last status reply when it never ended).
    pub state: Value,
    /// When it was seen ending (since the start), if it did.
    pub ended: Option<Duration>,
    /// Its events as read from the stream, in stream order.
    pub events: Vec<StoredEvent>,
    pub last_event: Option<EventKind>,
}

/// One message of a debate's events as the stream delivered it: where it is in the stream
/// and which event it holds, so a broken sequence tells a reader that delivered one message
/// twice (the same stream sequence again) from a stream that holds an event twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub stream_seq: u64,
    /// The event's own (per-debate) sequence number.
    pub seq: u64,
    /// When JetStream stored it.
    pub published: String,
    /// Its `Nats-Msg-Id` header.
    pub msg_id: String,
    /// The event's kind, in a word.
    pub kind: String,
}

/// Words a failure's reason must contain to count as one that names a fault.
const FAULT_WORDS: [&str; 9] = [
    "rate limit",
    "429",
    "503",
    "overloaded",
    "timed out",
    "timeout",
    "unavailable",
    "server error",
    "connection",
];

/// Submissions: each accepted one ended within `bound` after the last fault healed,
/// completed or failed naming a fault; none refused or left without a reply.
pub fn ends(
    subs: &BTreeMap<usize, Submission>,
    outcomes: &HashMap<String, Outcome>,
    last_fault: Duration,
    bound: Duration,
    out: &mut Vec<Violation>,
) {
    for s in subs.values() {
        let Some(id) = &s.id else {
            out.push(Violation {
                rule: "every submission is answered",
                detail: match &s.refused {
                    Some(r) => format!("submission #{} refused: {r}", s.k),
                    None => format!("submission #{} never got a reply", s.k),
                },
                debate: None,
                from: Duration::ZERO,
                to: last_fault,
            });
            continue;
        };
        let Some(o) = outcomes.get(id) else {
            out.push(Violation {
                rule: "no debate lost",
                detail: format!("#{}: {id} has no state", s.k),
                debate: Some(id.clone()),
                from: Duration::ZERO,
                to: last_fault,
            });
            continue;
        };
        let status = o.state["status"].as_str().unwrap_or("?");
        match o.ended {
            None => out.push(Violation {
                rule: "every accepted submission ends",
                detail: format!(
                    "#{}: {id} still {status} {bound:?} after the last fault; engine: {}",
                    s.k,
                    o.state["engine"]
                        .to_string()
                        .chars()
                        .take(1500)
                        .collect::<String>()
                ),
                debate: Some(id.clone()),
                from: last_fault,
                to: last_fault + bound,
            }),
            Some(t) if t > last_fault + bound => out.push(Violation {
                rule: "every accepted submission ends in time",
                detail: format!(
                    "#{}: {id} ended {:?} after the last fault",
                    s.k,
                    t - last_fault
                ),
                debate: Some(id.clone()),
                from: last_fault,
                to: t,
            }),
            Some(_) => {}
        }
        if status == "failed" {
            let reason = o.state["error"].to_string().to_lowercase();
            if !FAULT_WORDS.iter().any(|w| reason.contains(w)) {
                out.push(Violation {
                    rule: "a failure names a fault",
                    detail: format!("#{}: {id} failed: {}", s.k, o.state["error"]),
                    debate: Some(id.clone()),
                    from: Duration::ZERO,
                    to: o.ended.unwrap_or(last_fault),
                });
            }
        } else if o.ended.is_some() && status != "completed" {
            out.push(Violation {
                rule: "every accepted submission ends",
                detail: format!("#{}: {id} ended {status}", s.k),
                debate: Some(id.clone()),
                from: Duration::ZERO,
                to: o.ended.unwrap_or(last_fault),
            });
        }
    }
}

/// Debates in Redis by submission: each submission is at most one debate, the one the
/// driver was told of.
pub fn no_duplicates(
    subs: &BTreeMap<usize, Submission>,
    stored: &[(String, String)],
    out: &mut Vec<Violation>,
) {
    let mut by_k: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (id, problem) in stored {
        match submission_of(problem) {
            Some(k) => by_k.entry(k).or_default().push(id.clone()),
            None => out.push(Violation {
                rule: "no debate duplicated",
                detail: format!("{id} is no submission's: {problem}"),
                debate: Some(id.clone()),
                from: Duration::ZERO,
                to: Duration::ZERO,
            }),
        }
    }
    for (k, ids) in by_k {
        let told = subs.get(&k).and_then(|s| s.id.clone());
        if ids.len() > 1 || told.as_ref() != ids.first() {
            out.push(Violation {
                rule: "no debate duplicated",
                detail: format!("submission #{k}: debates {ids:?} in Redis, accepted as {told:?}"),
                debate: ids.first().cloned(),
                from: Duration::ZERO,
                to: Duration::ZERO,
            });
        }
    }
    for s in subs.values() {
        if let Some(id) = &s.id {
            if !stored.iter().any(|(i, _)| i == id) {
                out.push(Violation {
                    rule: "no debate lost",
                    detail: format!("#{}: {id} has no spec in Redis", s.k),
                    debate: Some(id.clone()),
                    from: Duration::ZERO,
                    to: Duration::ZERO,
                });
            }
        }
    }
}

/// Each debate's events are numbered 1..=n and the last one is its final status.
pub fn events(outcomes: &HashMap<String, Outcome>, out: &mut Vec<Violation>) {
    for o in outcomes.values() {
        let seqs: Vec<u64> = o.events.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
        let at = o.ended.unwrap_or_default();
        if seqs != expected {
            out.push(Violation {
                rule: "events contiguous",
                detail: format!("{}: {}", o.id, sequence_break(&o.events)),
                debate: Some(o.id.clone()),
                from: at,
                to: at,
            });
        }
        let status = o.state["status"].as_str().unwrap_or("?");
        let fits = matches!(
            (&o.last_event, status),
            (Some(EventKind::DebateCompleted { .. }), "completed")
                | (Some(EventKind::DebateFailed { .. }), "failed")
                | (Some(EventKind::DebateCancelled), "cancelled")
        );
        if !fits {
            out.push(Violation {
                rule: "events end with the final status",
                detail: format!("{}: status {status}, last event {:?}", o.id, o.last_event),
                debate: Some(o.id.clone()),
                from: at,
                to: at,
            });
        }
    }
}

/// Where `events` first breaks the sequence 1..=n, and whether the reader delivered a
/// stream message twice or the stream holds two messages for one event: the messages
/// around the break, with their stream sequences, times and message ids.
pub fn sequence_break(events: &[StoredEvent]) -> String {
    let Some(i) = events
        .iter()
        .zip(1u64..)
        .position(|(e, want)| e.seq != want)
    else {
        return format!("{} events, numbered 1..={}", events.len(), events.len());
    };
    // (The events of one message share its stream sequence.)
    let redelivered = events.windows(2).any(|w| w[1].stream_seq < w[0].stream_seq);
    let cause = if redelivered {
        "the reader delivered stream messages again (stream sequences not increasing)"
    } else {
        "the stream holds these events under distinct stream sequences"
    };
    let show = |e: &StoredEvent| {
        format!(
            "stream #{} seq {} {} at {} id {}",
            e.stream_seq, e.seq, e.kind, e.published, e.msg_id
        )
    };
    let mut lines = vec![format!(
        "{} events, #{} is {}: {cause}",
        events.len(),
        i + 1,
        events[i].seq
    )];
    if let Some(first) = events[..i].iter().find(|e| e.seq == events[i].seq) {
        lines.push(format!("  first: {}", show(first)));
    }
    for e in &events[i.saturating_sub(2)..(i + 3).min(events.len())] {
        lines.push(format!("  {}", show(e)));
    }
    lines.join("\n")
}

/// A call answered 200 twice (same model, same prompt) is a repeat; each must overlap a
/// fault that could cause it (the first call started before the fault ended, the repeat
/// after it began). Returns the number of repeats.
pub fn repeats(
    calls: &[(Instant, String, String)],
    faults: &[Happened],
    since_start: impl Fn(Instant) -> Duration,
    out: &mut Vec<Violation>,
) -> usize {
    let mut by_call: HashMap<(&str, &str), Vec<Instant>> = HashMap::new();
    for (t, model, prompt) in calls {
        by_call
            .entry((model.as_str(), prompt.as_str()))
            .or_default()
            .push(*t);
    }
    let mut count = 0;
    for ((model, prompt), mut times) in by_call {
        if times.len() < 2 {
            continue;
        }
        times.sort();
        let first = since_start(times[0]);
        for t in &times[1..] {
            count += 1;
            let again = since_start(*t);
            let cause = faults.iter().any(|f| f.start <= again && f.end >= first);
            if !cause {
                out.push(Violation {
                    rule: "a call repeats only when a fault hit it",
                    detail: format!(
                        "{model} answered at {first:?} and again at {again:?} with no fault in \
                         between: {}",
                        &prompt.chars().take(160).collect::<String>()
                    ),
                    debate: None,
                    from: first,
                    to: again,
                });
            }
        }
    }
    count
}

/// No budget exceeded: spent within the limit, nothing left reserved at the end.
pub fn budgets(
    subs: &BTreeMap<usize, Submission>,
    outcomes: &HashMap<String, Outcome>,
    out: &mut Vec<Violation>,
) {
    for s in subs.values() {
        let (Some(limit), Some(id)) = (s.shape.budget, &s.id) else {
            continue;
        };
        let Some(o) = outcomes.get(id) else { continue };
        let b = &o.state["budget"];
        let spent = b["spent"]["tokens"].as_u64().unwrap_or(0);
        let reserved = b["reserved"]["tokens"].as_u64().unwrap_or(0);
        if spent > limit || (o.ended.is_some() && reserved != 0) {
            out.push(Violation {
                rule: "no budget exceeded",
                detail: format!(
                    "#{}: {id} spent {spent} of {limit}, {reserved} reserved: {b}",
                    s.k
                ),
                debate: Some(id.clone()),
                from: Duration::ZERO,
                to: o.ended.unwrap_or_default(),
            });
        }
    }
}

/// Every contribution, clarification question and solution in a final state carries the
/// nonce of an answer the provider gave for that submission, that task kind and that
/// agent's model. Returns how many texts were checked.
pub fn provenance(
    subs: &BTreeMap<usize, Submission>,
    outcomes: &HashMap<String, Outcome>,
    answers: &HashMap<u64, Answer>,
    out: &mut Vec<Violation>,
) -> usize {
    let mut checked = 0;
    for s in subs.values() {
        let Some(id) = &s.id else { continue };
        let Some(o) = outcomes.get(id) else { continue };
        let mut texts: Vec<(String, &[&str], String)> = Vec::new();
        for round in o.state["rounds"].as_array().into_iter().flatten() {
            let number = round["roundNumber"].as_u64().unwrap_or(1);
            for c in round["contributions"].as_array().into_iter().flatten() {
                let agent = c["agentId"].as_str().unwrap_or_default();
                let model = format!("model-{}", agent.trim_start_matches("agent-"));
                let kinds: &[&str] = match (c["type"].as_str().unwrap_or_default(), number) {
                    ("proposal", 1) => &["propose"],
                    ("proposal", _) => &["propose", "refine"],
                    ("critique", _) => &["critique"],
                    ("refinement", _) => &["refine"],
                    _ => &[],
                };
                texts.push((
                    c["content"].as_str().unwrap_or_default().to_string(),
                    kinds,
                    model,
                ));
            }
        }
        for g in o.state["clarifications"].as_array().into_iter().flatten() {
            let agent = g["agentId"].as_str().unwrap_or_default();
            let model = format!("model-{}", agent.trim_start_matches("agent-"));
            for i in g["items"].as_array().into_iter().flatten() {
                texts.push((
                    i["question"].as_str().unwrap_or_default().to_string(),
                    &["clarify"],
                    model.clone(),
                ));
            }
        }
        if o.state["status"] == "completed" && !s.shape.voting {
            if let Some(d) = o.state["finalSolution"]["description"].as_str() {
                texts.push((d.to_string(), &["synthesize"], "model-judge".into()));
            }
        }
        for (text, kinds, model) in texts {
            checked += 1;
            let found = nonces(&text);
            let ok = !found.is_empty()
                && found.iter().all(|n| {
                    answers.get(n).is_some_and(|a| {
                        a.submission == Some(s.k)
                            && a.model == model
                            && (kinds.is_empty() || kinds.contains(&a.kind))
                    })
                });
            if !ok {
                let given: Vec<String> = found
                    .iter()
                    .map(|n| format!("r{n}: {:?}", answers.get(n)))
                    .collect();
                out.push(Violation {
                    rule: "every contribution is an answer the provider gave for its task",
                    detail: format!(
                        "#{} {id}: {kinds:?} of {model}: {:?}; answers {given:?}",
                        s.k,
                        text.chars().take(120).collect::<String>()
                    ),
                    debate: Some(id.clone()),
                    from: Duration::ZERO,
                    to: o.ended.unwrap_or_default(),
                });
            }
        }
    }
    checked
}
