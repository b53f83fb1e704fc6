//! The debate-config JSON Schema, `docs/src/reference/debate-config.schema.json`, is
//! generated from the config types (`parley_protocol::debate_config_schema`) and committed;
//! this test fails when the committed file differs from what the types say now. Regenerate
//! it with
//!
//! ```sh
//! PARLEY_BLESS=1 cargo test -p parley-protocol --test config_schema
//! ```
//!
//! The shipped example configs (the deployment's, the book's, the dialectic-shaped
//! fixtures) are checked against the schema with a small validator of the draft-7 keywords
//! the schema uses; it refuses a keyword it does not know, so a schema it cannot check
//! fails the test instead of passing it.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

const BLESS: &str = "PARLEY_BLESS";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schema_path() -> PathBuf {
    root().join("docs/src/reference/debate-config.schema.json")
}

fn schema() -> Value {
    serde_json::to_value(parley_protocol::debate_config_schema()).unwrap()
}

#[test]
fn the_committed_schema_is_current() {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap();
    text.push('\n');
    let path = schema_path();
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} is stale: regenerate it with \
         `PARLEY_BLESS=1 cargo test -p parley-protocol --test config_schema`",
        path.display()
    );
}

/// The debate configs the project ships: every one follows the schema.
fn shipped_configs() -> Vec<PathBuf> {
    let r = root();
    let mut files = vec![
        r.join("deploy/config.json"),
        r.join("docs/src/guide/compare-sample/debate-config.json"),
        r.join("docs/src/design/model-choice/debate-smollm2.json"),
        r.join("docs/src/design/model-choice/debate-gemma3.json"),
    ];
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                walk(&p, out);
            } else if name.ends_with(".json") && !name.starts_with("eval_config") {
                out.push(p);
            }
        }
    }
    walk(
        &r.join("crates/cli/tests/fixtures/dialectic-configs"),
        &mut files,
    );
    files.sort();
    files
}

#[test]
fn the_shipped_configs_follow_the_schema() {
    let schema = schema();
    let files = shipped_configs();
    assert!(files.len() >= 20, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let value: Value = serde_json::from_str(&text).unwrap();
        let problems = validate(&schema, &value);
        assert!(problems.is_empty(), "{}: {problems:#?}", f.display());
    }
}

/// The schema is not a rubber stamp: a typo, a wrong type, an unknown enum value and a
/// missing required key are each refused, with their place.
#[test]
fn the_schema_refuses_what_the_loader_refuses() {
    let schema = schema();
    let agent = json!({"id": "a", "name": "A", "role": "architect", "model": "m"});
    let ok = json!({"$schema": "./debate-config.schema.json", "agents": [agent]});
    assert_eq!(validate(&schema, &ok), Vec::<String>::new());
    let cases = [
        (
            json!({"agents": [{"id": "a", "name": "A", "role": "r", "model": "m", "temprature": 1}]}),
            "/agents/0: unknown key \"temprature\"",
        ),
        (json!({"debate": {"rounds": "three"}}), "/debate/rounds"),
        (json!({"debate": {"mode": "fast"}}), "/debate/mode"),
        (
            json!({"debate": {"terminationCondition": {"type": "forever"}}}),
            "/debate/terminationCondition/type",
        ),
        // `model` may be left out (a human participant has none; the spec's validation
        // requires it of every other participant): `role` may not.
        (
            json!({"judge": {"id": "j", "name": "J", "model": "m"}}),
            "/judge: missing \"role\"",
        ),
        (
            json!({"providers": {"openai": {"requestsPerMinute": -1}}}),
            "/providers/openai/requestsPerMinute",
        ),
    ];
    for (config, at) in cases {
        let problems = validate(&schema, &config);
        assert!(
            problems.iter().any(|p| p.starts_with(at)),
            "{config}: expected a problem at {at}, got {problems:?}"
        );
        let loaded = serde_json::from_value::<parley_protocol::DebateConfigFile>(config.clone());
        assert!(loaded.is_err(), "the loader took {config}");
    }
    // `synthesisMethod` is a string the spec's validation checks against
    // `SYNTHESIS_METHODS`; the schema offers the same values.
    let config = json!({"debate": {"synthesisMethod": "vote"}});
    let problems = validate(&schema, &config);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("/debate/synthesisMethod")),
        "{problems:?}"
    );
    let offered = &schema["definitions"]["DebateSettings"]["properties"]["synthesisMethod"]["enum"];
    assert_eq!(offered, &json!(parley_protocol::SYNTHESIS_METHODS));
}

/// A config may name its schema (`"$schema"`, for editors): the loader takes it.
#[test]
fn a_config_may_carry_its_schema() {
    let text = r#"{"$schema": "https://example.org/debate-config.schema.json",
                   "debate": {"rounds": 2}}"#;
    let file: parley_protocol::DebateConfigFile = serde_json::from_str(text).unwrap();
    assert_eq!(file.debate.unwrap().rounds, 2);
    assert_eq!(
        file.schema.as_deref(),
        Some("https://example.org/debate-config.schema.json")
    );
}

/// The draft-7 keywords this validator checks, and those it reads as documentation.
const CHECKED: &[&str] = &[
    "$ref",
    "type",
    "properties",
    "additionalProperties",
    "required",
    "items",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "minimum",
    "maximum",
];
const NOTES: &[&str] = &[
    "$schema",
    "title",
    "description",
    "default",
    "format",
    "definitions",
    "examples",
];

/// The problems of `value` under `schema` (a root with `definitions`), each starting with
/// its JSON pointer.
fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    check(schema, schema, value, "", &mut problems);
    problems
}

fn check(root: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let s = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => return out.push(format!("{at}: nothing is allowed here")),
        Value::Object(s) => s,
        other => panic!("not a schema at {at}: {other}"),
    };
    for key in s.keys() {
        assert!(
            CHECKED.contains(&key.as_str()) || NOTES.contains(&key.as_str()),
            "the validator does not know the keyword {key:?} (at {at})"
        );
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/definitions/").expect("a local $ref");
        check(root, &root["definitions"][name], value, at, out);
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => panic!("type {other} at {at}"),
        };
        if !types.iter().any(|t| has_type(value, t)) {
            return out.push(format!("{at}: {value} is not of type {types:?}"));
        }
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        if !values.contains(value) {
            out.push(format!("{at}: {value} is not one of {values:?}"));
        }
    }
    if let Some(c) = s.get("const") {
        if c != value {
            out.push(format!("{at}: {value} is not {c}"));
        }
    }
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), value.as_f64()) {
        if n < min {
            out.push(format!("{at}: {n} is below {min}"));
        }
    }
    if let (Some(max), Some(n)) = (s.get("maximum").and_then(Value::as_f64), value.as_f64()) {
        if n > max {
            out.push(format!("{at}: {n} is above {max}"));
        }
    }
    for all in s
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        check(root, all, value, at, out);
    }
    for (key, exactly_one) in [("anyOf", false), ("oneOf", true)] {
        if let Some(options) = s.get(key).and_then(Value::as_array) {
            let results: Vec<Vec<String>> = options
                .iter()
                .map(|o| {
                    let mut p = Vec::new();
                    check(root, o, value, at, &mut p);
                    p
                })
                .collect();
            let fits = results.iter().filter(|p| p.is_empty()).count();
            // An option whose problems all lie inside the value (or name its keys) is the
            // one the value meant: its problems say more than "fits none".
            let inside = |p: &String| {
                p.starts_with(&format!("{at}/"))
                    || p.starts_with(&format!("{at}: missing"))
                    || p.starts_with(&format!("{at}: unknown key"))
            };
            match results
                .iter()
                .find(|p| !p.is_empty() && p.iter().all(inside))
            {
                Some(meant) if fits == 0 => out.extend(meant.iter().cloned()),
                _ if fits == 0 || (exactly_one && fits > 1) => {
                    out.push(format!("{at}: {value} fits {fits} of the {key} options"))
                }
                _ => {}
            }
        }
    }
    if let Value::Object(map) = value {
        let props = s.get("properties").and_then(Value::as_object);
        for req in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let req = req.as_str().unwrap();
            if !map.contains_key(req) {
                out.push(format!("{at}: missing {req:?}"));
            }
        }
        for (k, v) in map {
            let here = format!("{at}/{k}");
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(p), _) => check(root, p, v, &here, out),
                (None, Some(Value::Bool(false))) => out.push(format!("{at}: unknown key {k:?}")),
                (None, Some(extra)) => check(root, extra, v, &here, out),
                (None, None) => {}
            }
        }
    }
    if let (Value::Array(items), Some(item)) = (value, s.get("items")) {
        for (i, v) in items.iter().enumerate() {
            check(root, item, v, &format!("{at}/{i}"), out);
        }
    }
}

fn has_type(value: &Value, t: &str) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        other => panic!("unknown type {other}"),
    }
}
