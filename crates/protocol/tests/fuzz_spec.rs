//! Property tests of spec decoding and validation at the edge ([`decode_submission`]):
//! whatever the bytes, decoding never panics and always answers Ok or a rejection with a
//! small message; valid specs decode and round-trip unchanged. Bounded case counts, so
//! this runs inside `cargo test`.

use parley_protocol::subjects::ErrorCode;
use parley_protocol::{
    decode_debate_ref, decode_submission, limits, DebateSpec, SubmissionPolicy, KNOWN_PROVIDERS,
    KNOWN_ROLES,
};
use proptest::prelude::*;
use serde_json::{json, Value};

fn agent(
    id: String,
    name: String,
    role: String,
    model: String,
    provider: Option<&'static str>,
    t: u32,
    enabled: bool,
) -> Value {
    let mut a = json!({
        "id": id, "name": name, "role": role, "model": model,
        "temperature": f64::from(t) / 100.0, "enabled": enabled,
    });
    if let Some(p) = provider {
        a["provider"] = json!(p);
    }
    a
}

fn valid_agent(i: usize) -> impl Strategy<Value = Value> {
    (
        "[A-Za-z0-9_-]{1,40}",
        "[ -~]{0,40}",
        prop_oneof![
            proptest::sample::select(KNOWN_ROLES).prop_map(String::from),
            "[a-z]{1,12}"
        ],
        "[a-z0-9.:/-]{1,40}",
        proptest::option::of(proptest::sample::select(KNOWN_PROVIDERS)),
        0u32..=200,
        any::<bool>(),
    )
        .prop_map(move |(id, name, role, model, provider, t, enabled)| {
            // Distinct ids: the index is part of each.
            let id = format!("{}{i}", &id[..id.len().min(60)]);
            agent(id, name, role, model, provider, t, enabled || i == 0)
        })
}

/// Specs within every limit.
fn valid_spec() -> impl Strategy<Value = Value> {
    (1usize..=6)
        .prop_flat_map(|n| {
            (
                (0..n).map(valid_agent).collect::<Vec<_>>(),
                valid_agent(99),
                "[ -~\n\u{e9}\u{4e2d}]{1,200}",
                proptest::option::of("[A-Za-z0-9:_-]{1,128}"),
                1u32..=20,
                (1u32..=10, 100u64..=60_000, 1_000u64..=1_800_000),
                proptest::option::of(1u32..=16_384),
            )
        })
        .prop_filter("a problem with text", |t| !t.2.trim().is_empty())
        .prop_map(
            |(agents, judge, problem, key, rounds, (attempts, backoff, timeout), max_tokens)| {
                let mut judge = judge;
                judge["id"] = json!("judge-main");
                if let Some(m) = max_tokens {
                    judge["maxTokens"] = json!(m);
                }
                let mut s = json!({
                    "problem": problem,
                    "agents": agents,
                    "judge": judge,
                    "debate": {"rounds": rounds, "retry": {"default": {
                        "attempts": attempts, "initialBackoffMs": backoff,
                        "maxBackoffMs": backoff * 2, "timeoutMs": timeout,
                    }}},
                });
                if let Some(k) = key {
                    s["idempotencyKey"] = json!(k);
                }
                s
            },
        )
}

/// A hostile replacement value: huge numbers, deep nesting, control and odd characters,
/// oversize strings, wrong types.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(1e308)),
        Just(json!(-1e308)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(null)),
        Just(json!([])),
        Just(json!({})),
        Just(json!("x".repeat(300_000))),
        (0usize..200).prop_map(|d| {
            let mut v = json!(1);
            for _ in 0..d {
                v = json!([v]);
            }
            v
        }),
        "[\u{0}-\u{1f}\u{7f}\u{202e}\u{fffd}]{0,20}".prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ]
}

/// Replaces the value at a random path (or adds a field) in `v`.
fn mutate(v: &mut Value, choice: &[usize], key: &str, with: Value) {
    let Some((&c, rest)) = choice.split_first() else {
        match v {
            Value::Object(m) => {
                m.insert(key.to_string(), with);
            }
            other => *other = with,
        }
        return;
    };
    match v {
        Value::Object(m) if !m.is_empty() => {
            let k = m.keys().nth(c % m.len()).cloned().unwrap_or_default();
            if let Some(child) = m.get_mut(&k) {
                mutate(child, rest, key, with);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let n = a.len();
            mutate(&mut a[c % n], rest, key, with);
        }
        other => *other = with,
    }
}

fn check(bytes: &[u8]) -> Result<DebateSpec, ErrorCode> {
    match decode_submission(bytes, &SubmissionPolicy::default()) {
        Ok(s) => {
            // What was accepted passes validation again.
            s.validate().expect("an accepted spec is valid");
            Ok(s)
        }
        Err(r) => {
            assert!(r.message.len() <= limits::MAX_REPLY_MESSAGE_BYTES);
            assert!(!r.message.is_empty());
            Err(r.code)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = check(&bytes);
        let _ = decode_debate_ref(&bytes);
    }

    #[test]
    fn valid_specs_decode_and_round_trip(spec in valid_spec()) {
        let bytes = serde_json::to_vec(&spec).unwrap();
        let decoded = check(&bytes).map_err(|c| TestCaseError::fail(format!("{c:?} for {spec}")))?;
        let again = serde_json::to_vec(&decoded).unwrap();
        let twice = check(&again).map_err(|c| TestCaseError::fail(format!("{c:?}")))?;
        prop_assert_eq!(decoded, twice);
    }

    #[test]
    fn truncated_specs_are_refused_without_panic(spec in valid_spec(), cut in any::<prop::sample::Index>()) {
        let bytes = serde_json::to_vec(&spec).unwrap();
        let at = cut.index(bytes.len());
        prop_assert!(check(&bytes[..at]).is_err());
    }

    #[test]
    fn mutated_specs_never_panic(
        spec in valid_spec(),
        path in proptest::collection::vec(any::<usize>(), 0..5),
        key in prop_oneof![Just("id".to_string()), Just("maxTokens".to_string()), "[a-zA-Z]{1,12}"],
        with in hostile_value(),
        flip in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut v = spec;
        mutate(&mut v, &path, &key, with);
        let mut bytes = serde_json::to_vec(&v).unwrap();
        let _ = check(&bytes);
        // Raw byte flips: invalid UTF-8, broken structure.
        for (i, b) in flip {
            if !bytes.is_empty() {
                let at = i.index(bytes.len());
                bytes[at] = b;
            }
        }
        let _ = check(&bytes);
    }
}
