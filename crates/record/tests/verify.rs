//! `verify` on records built from a constructed debate: it passes on an untouched record
//! and state, and names the first thing that differs when one thing is changed.

use chrono::Utc;
use parley_protocol::DebateState;
use parley_record::{
    build, verify, Evidence, Mismatch, PublicKey, Record, SignatureCheck, SigningKey,
};
use serde_json::{json, Value};

const AGENTS: [(&str, &str, &str); 3] = [
    ("agent-architect", "architect", "model-arch"),
    ("agent-security", "security", "model-sec"),
    ("agent-kiss", "kiss", "model-kiss"),
];

fn meta(model: &str, tokens: u64) -> Value {
    json!({"tokensUsed": tokens, "latencyMs": 5, "model": model, "provider": "openai",
           "promptTokens": tokens - 10, "completionTokens": 10, "costUsd": 0.001})
}

/// A completed 3-agent, 2-round debate: proposals, critiques (all pairs), refinements per
/// round (round 2's proposals carried over), a verdict per round, the synthesis and the
/// spend the engine tallies.
fn state_value() -> Value {
    let mut rounds = Vec::new();
    for n in 1..=2u32 {
        let mut cs = Vec::new();
        for (id, role, model) in AGENTS {
            let mut m = meta(model, 100 + n as u64);
            if n > 1 {
                m = json!({"tokensUsed": 0, "latencyMs": 0, "model": model, "provider": "openai", "carriedOver": true});
            }
            cs.push(json!({"agentId": id, "agentRole": role, "type": "proposal",
                           "content": format!("## Plan of {role}\nUse a write-through cache (round {n})."), "metadata": m}));
        }
        for (id, role, model) in AGENTS {
            for (target, _, _) in AGENTS.iter().filter(|a| a.0 != id) {
                cs.push(json!({"agentId": id, "agentRole": role, "type": "critique", "targetAgentId": target,
                               "content": format!("## Strengths\n- clear\n## Weaknesses\n- {role} sees no eviction in {target}'s plan"),
                               "metadata": meta(model, 50)}));
            }
        }
        for (id, role, model) in AGENTS {
            cs.push(json!({"agentId": id, "agentRole": role, "type": "refinement",
                           "content": format!("Refined by {role} in round {n}"), "metadata": meta(model, 70)}));
        }
        rounds.push(json!({"roundNumber": n, "contributions": cs, "timestamp": "2026-11-27T06:00:00Z",
            "verdict": {"verdict": "continue", "confidence": 40, "reasoning": "r", "openIssues": ["eviction"],
                        "metadata": meta("model-judge", 30)}}));
    }
    let mut v = json!({
        "id": "deb-20261127-060000-abcdef",
        "problem": "Design a cache",
        "status": "completed",
        "currentRound": 2,
        "rounds": rounds,
        "finalSolution": {"description": "Use a write-through cache with LRU eviction.",
                          "tradeoffs": ["Fresh reads at the cost of slower writes"],
                          "recommendations": ["measure the hit rate"], "confidence": 80,
                          "synthesizedBy": "judge-main"},
        "synthesisMetadata": meta("model-judge", 200),
        "promptSources": {"agents": [], "judge": {"agentId": "judge-main", "role": "generalist", "source": "built-in"}},
        "createdAt": "2026-11-27T06:00:00.123Z",
        "updatedAt": "2026-11-27T06:05:00Z"
    });
    let state: DebateState = serde_json::from_value(v.clone()).unwrap();
    v["spend"] = serde_json::to_value(parley_protocol::Spend::of(&state, "judge-main")).unwrap();
    v
}

fn state_of(v: &Value) -> DebateState {
    serde_json::from_value(v.clone()).unwrap()
}

fn record() -> Record {
    build(&state_of(&state_value()), None, Utc::now()).unwrap()
}

/// The error of verifying `record` against the state `v` (unsigned, no key).
fn mismatch(record: &Record, v: &Value) -> String {
    let state = state_of(v);
    let err = verify(
        record,
        None,
        Some(Evidence {
            state: &state,
            spec: None,
        }),
    )
    .expect_err("verification passed");
    err.to_string()
}

/// The index (0-based, within round 1) of the contribution `kind` by `agent` (of `target`).
fn at(v: &Value, kind: &str, agent: &str, target: Option<&str>) -> usize {
    v["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| {
            c["type"] == kind && c["agentId"] == agent && c["targetAgentId"].as_str() == target
        })
        .unwrap()
}

#[test]
fn an_untouched_record_verifies_against_its_state() {
    let v = state_value();
    let state = state_of(&v);
    let r = build(&state, None, Utc::now()).unwrap();
    // 2 rounds × (3 proposals + 6 critiques + 3 refinements + a verdict) + the synthesis.
    assert_eq!(r.entries.len(), 2 * 13 + 1);
    let ok = verify(
        &r,
        None,
        Some(Evidence {
            state: &state,
            spec: None,
        }),
    )
    .unwrap();
    assert_eq!(ok.signature, SignatureCheck::Unsigned);
    assert_eq!(ok.entries, 27);
    // Reproducible: the same state gives the same entries and digest (but for recordedAt).
    let mut again = build(&state, None, Utc::now()).unwrap();
    again.recorded_at = r.recorded_at.clone();
    assert_eq!(again.digest(), r.digest());
    // And a record survives its JSON file.
    let back = parley_record::parse(r.to_json().as_bytes()).unwrap();
    assert_eq!(back, r);
    verify(
        &back,
        None,
        Some(Evidence {
            state: &state,
            spec: None,
        }),
    )
    .unwrap();
}

#[test]
fn critiques_answer_their_target_and_refinements_their_critiques() {
    let r = record();
    let proposal = r
        .entries
        .iter()
        .find(|e| e.kind == parley_record::EntryKind::Proposal && e.author == "agent-kiss")
        .unwrap();
    let critique = r
        .entries
        .iter()
        .find(|e| {
            e.kind == parley_record::EntryKind::Critique
                && e.target.as_deref() == Some("agent-kiss")
        })
        .unwrap();
    assert_eq!(critique.answers, vec![proposal.digest.clone()]);
    let refinement = r
        .entries
        .iter()
        .find(|e| e.kind == parley_record::EntryKind::Refinement && e.author == "agent-kiss")
        .unwrap();
    // Its own proposal and the two critiques it received.
    assert_eq!(refinement.answers.len(), 3);
    assert_eq!(refinement.answers[0], proposal.digest);
}

#[test]
fn a_changed_contribution_text_is_named() {
    let mut v = state_value();
    let i = at(&v, "critique", "agent-security", Some("agent-architect"));
    v["rounds"][0]["contributions"][i]["content"] = json!("Everything is fine.");
    assert_eq!(
        mismatch(&record(), &v),
        format!("contribution {} (critique by agent-security of agent-architect, round 1): text digest does not match the state", i + 1)
    );
}

#[test]
fn a_changed_solution_is_named() {
    let mut v = state_value();
    v["finalSolution"]["description"] = json!("Use no cache at all.");
    let e = mismatch(&record(), &v);
    assert!(
        e.starts_with(
            "the solution does not match its digest (contribution 27 (synthesis by judge-main"
        ),
        "{e}"
    );
}

#[test]
fn two_contributions_swapped_are_named() {
    let mut v = state_value();
    let a = at(&v, "critique", "agent-architect", Some("agent-security"));
    let b = at(&v, "critique", "agent-kiss", Some("agent-security"));
    v["rounds"][0]["contributions"]
        .as_array_mut()
        .unwrap()
        .swap(a, b);
    assert_eq!(
        mismatch(&record(), &v),
        format!("contribution {} (critique by agent-architect of agent-security, round 1): the state has critique by agent-kiss of agent-security, round 1 in its place: the order of the contributions differs", a + 1)
    );
}

#[test]
fn a_changed_model_name_is_named() {
    let mut v = state_value();
    let i = at(&v, "refinement", "agent-kiss", None);
    v["rounds"][0]["contributions"][i]["metadata"]["model"] = json!("model-cheap");
    assert_eq!(
        mismatch(&record(), &v),
        format!("model of contribution {} (refinement by agent-kiss, round 1) differs: record \"model-kiss\", state \"model-cheap\"", i + 1)
    );
}

#[test]
fn changed_token_totals_are_named() {
    let mut v = state_value();
    let real = v["spend"]["totalTokens"].as_u64().unwrap();
    v["spend"]["totalTokens"] = json!(real + 16);
    assert_eq!(
        mismatch(&record(), &v),
        format!("token totals differ: record {real}, state {}", real + 16)
    );
}

#[test]
fn a_contribution_missing_from_the_state_is_named() {
    let mut v = state_value();
    v["rounds"][1]["contributions"]
        .as_array_mut()
        .unwrap()
        .pop();
    let e = mismatch(&record(), &v);
    assert!(
        e.contains("refinement by agent-kiss, round 2") && e.contains("in its place"),
        "{e}"
    );
}

#[test]
fn edits_to_the_record_itself_break_its_chain() {
    // A field changed without its digest.
    let mut r = record();
    r.entries[6].model = "model-x".into();
    let e = verify(&r, None, None).unwrap_err();
    assert!(matches!(e, Mismatch::Chain(_)));
    assert!(e.to_string().starts_with("contribution 7 ("), "{e}");
    assert!(
        e.to_string()
            .ends_with("its digest does not match its fields"),
        "{e}"
    );
    // The digest recomputed too: the link after it no longer follows.
    r.entries[6].digest = r.entries[6].computed_digest();
    assert_eq!(
        verify(&r, None, None).unwrap_err().to_string(),
        "chain broken at link 7"
    );
    // Two entries swapped.
    let mut r = record();
    r.entries.swap(3, 4);
    r.entries[3].index = 4;
    r.entries[4].index = 5;
    for i in [3, 4] {
        r.entries[i].digest = r.entries[i].computed_digest();
    }
    assert_eq!(
        verify(&r, None, None).unwrap_err().to_string(),
        "chain broken at link 4"
    );
}

#[test]
fn a_signed_record_verifies_with_its_key_only() {
    let key = SigningKey::generate();
    let mut r = record();
    key.sign(&mut r);
    let state = state_of(&state_value());
    let ev = Some(Evidence {
        state: &state,
        spec: None,
    });
    let ok = verify(&r, Some(&key.public()), ev).unwrap();
    assert_eq!(
        ok.signature,
        SignatureCheck::Verified {
            key_id: key.public().key_id()
        }
    );
    // Without a key: not checked, and said so.
    let ok = verify(&r, None, ev).unwrap();
    assert!(matches!(ok.signature, SignatureCheck::NotChecked { .. }));

    // Another key: refused by id.
    let other = SigningKey::generate();
    let e = verify(&r, Some(&other.public()), ev)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "signed with key {}, not with the public key given ({})",
            key.public().key_id(),
            other.public().key_id()
        )
    );

    // Signed with another key under this key's id: the signature does not verify.
    let mut forged = record();
    other.sign(&mut forged);
    forged.signature.as_mut().unwrap().key_id = key.public().key_id();
    let e = verify(&forged, Some(&key.public()), ev)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "signature does not verify with key {}",
            key.public().key_id()
        )
    );

    // A signed field changed (totals are not in the chain): the signature catches it.
    let mut changed = r.clone();
    changed.totals.tokens += 1;
    let e = verify(&changed, Some(&key.public()), None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "signature does not verify with key {}",
            key.public().key_id()
        )
    );

    // The signature value changed.
    let mut changed = r.clone();
    let sig = changed.signature.as_mut().unwrap();
    sig.value = format!("A{}", &sig.value[1..]);
    let e = verify(&changed, Some(&key.public()), None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "signature does not verify with key {}",
            key.public().key_id()
        )
    );

    // An unsigned record given a key fails.
    let e = verify(&record(), Some(&key.public()), None)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("the record is unsigned"), "{e}");
}

#[test]
fn key_files_round_trip_and_the_key_is_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::generate();
    let path = dir.path().join("signing.key");
    key.write_new(&path).unwrap();
    // Never overwritten.
    assert!(key.write_new(&path).is_err());
    let back = SigningKey::from_file(&path).unwrap();
    assert_eq!(back.public(), key.public());
    assert_eq!(format!("{back:?}"), "[redacted]");
    let seed_line = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_string();
    let pubfile = dir.path().join("k.pub");
    key.public().write_new(&pubfile).unwrap();
    assert_eq!(PublicKey::from_file(&pubfile).unwrap(), key.public());
    // A signed record holds no part of the private key.
    let mut r = record();
    key.sign(&mut r);
    assert!(!r.to_json().contains(&seed_line));
    // Errors name the file, never its content.
    std::fs::write(&path, "not base64 at all\n").unwrap();
    let e = SigningKey::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("not base64") && !e.contains("at all"), "{e}");
    std::fs::write(&path, "x".repeat(5000)).unwrap();
    assert!(SigningKey::from_file(&path)
        .unwrap_err()
        .to_string()
        .contains("larger than"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let p = dir.path().join("new.key");
        SigningKey::generate().write_new(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}

#[test]
fn an_unfinished_debate_has_no_record() {
    let mut v = state_value();
    v["status"] = json!("running");
    let e = build(&state_of(&v), None, Utc::now())
        .unwrap_err()
        .to_string();
    assert!(e.contains("has not finished"), "{e}");
}

#[test]
fn unknown_fields_are_refused() {
    let mut v: Value = serde_json::from_str(&record().to_json()).unwrap();
    v["extra"] = json!("unsigned claim");
    assert!(parley_record::parse(v.to_string().as_bytes()).is_err());
}
