//! End-to-end: `parley run` writes a decision record (signed with a key) and an ADR;
//! `parley verify`, `parley record` and `parley adr` on the saved debate, against the fake
//! OpenAI-compatible server.

use std::path::{Path, PathBuf};
use std::process::Output;

use parley_testkit::fake_llm::script::{DebateScript, VoteRule};
use parley_testkit::{run_parley, FakeLlm};
use parley_tests::{read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

async fn parley(dir: &Path, args: &[&str]) -> Output {
    run_parley(PARLEY, dir, args, &[("PARLEY_LOG", "debug".to_string())]).await
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The debate config of the distributed tests (3 agents, 2 rounds) with `debate` merged in.
fn write_config(dir: &Path, base_url: &str, debate: Value) {
    let mut cfg = parley_tests::spec_config(Some(base_url));
    for (k, v) in debate.as_object().unwrap() {
        cfg["debate"][k] = v.clone();
    }
    write_json(dir.join("debate-config.json"), &cfg);
}

/// The one file of `dir` whose name ends in `suffix`.
fn only(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().unwrap()
}

/// Every file under `dir`, recursively, as text.
fn all_text(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            all_text(&p, out);
        } else {
            out.push((
                p.clone(),
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned(),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_run_leaves_a_record_that_verifies_and_names_what_was_changed() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, &fake.base_url(), json!({}));
    std::fs::create_dir_all(d.join("docs/adr")).unwrap();
    std::fs::write(d.join("docs/adr/0006-use-postgres.md"), "kept").unwrap();

    let keygen = parley(d, &["record", "--generate-key", "keys"]).await;
    assert_eq!(keygen.status.code(), Some(0), "{}", text(&keygen));
    let key_text = std::fs::read_to_string(d.join("keys/record-signing.key")).unwrap();
    let seed_b64 = key_text.lines().last().unwrap().to_string();
    assert_eq!(seed_b64.len(), 44, "{key_text}");

    let run = parley(
        d,
        &[
            "run",
            "Design a cache",
            "--output",
            "state.json",
            "--report",
            "r.md",
            "--adr",
            "docs/adr",
            "--adr-status",
            "accepted",
            "--record-signing-key",
            "keys/record-signing.key",
        ],
    )
    .await;
    let run_out = text(&run);
    assert_eq!(run.status.code(), Some(0), "{run_out}");
    assert!(
        run_out.contains("Wrote decision record to ./debates/"),
        "{run_out}"
    );
    let record = only(&d.join("debates"), ".record.json");
    let checkpoint = PathBuf::from(record.to_string_lossy().replace(".record.json", ".json"));
    let pubfile = only(&d.join("debates"), ".pub");
    assert_eq!(
        std::fs::read_to_string(&pubfile).unwrap(),
        std::fs::read_to_string(d.join("keys/record-signing.pub")).unwrap()
    );
    let rec: Value = read_json(&record);
    // 2 rounds × (3 proposals + 6 critiques + 3 refinements) + the synthesis.
    assert_eq!(rec["entries"].as_array().unwrap().len(), 25, "{rec}");
    assert!(rec["specDigest"].is_string());

    // The ADR continues the folder's numbering and links the record.
    let adr = std::fs::read_to_string(d.join("docs/adr/0007-design-a-cache.md")).unwrap();
    assert!(adr.starts_with("---\nstatus: \"accepted\"\n"), "{adr}");
    let link = format!(
        "(../../debates/{})",
        record.file_name().unwrap().to_string_lossy()
    );
    assert!(adr.contains(&link), "{adr}");
    assert_eq!(
        std::fs::read_to_string(d.join("docs/adr/0006-use-postgres.md")).unwrap(),
        "kept"
    );

    // The report shows the record's digest and signature.
    let report = std::fs::read_to_string(d.join("r.md")).unwrap();
    assert!(report.contains("## Decision Record"), "{report}");
    assert!(report.contains("signed (Ed25519, key `"), "{report}");
    // `parley report <id>` reads ./debates/<id>.json and the record beside it.
    let by_id = parley(
        d,
        &[
            "report",
            rec["debateId"].as_str().unwrap(),
            "-o",
            "by-id.md",
        ],
    )
    .await;
    assert_eq!(by_id.status.code(), Some(0), "{}", text(&by_id));
    let by_id_md = std::fs::read_to_string(d.join("by-id.md")).unwrap();
    assert!(by_id_md.contains("## Decision Record"), "{by_id_md}");
    let rec_path = record.to_string_lossy().into_owned();
    let ok = parley(d, &["verify", &rec_path, "--report", "by-id.md"]).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let unknown = parley(d, &["report", "deb-20200101-000000-zzzz"]).await;
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    assert!(
        text(&unknown).contains("no saved debate deb-20200101-000000-zzzz in ./debates"),
        "{}",
        text(&unknown)
    );

    // verify: everything matches.
    let rec_s = record.to_string_lossy().into_owned();
    let cp_s = checkpoint.to_string_lossy().into_owned();
    let ok = parley(
        d,
        &[
            "verify",
            &rec_s,
            "--state",
            &cp_s,
            "--public-key",
            "keys/record-signing.pub",
        ],
    )
    .await;
    let ok_out = text(&ok);
    assert_eq!(ok.status.code(), Some(0), "{ok_out}");
    assert!(ok_out.contains("signature: verified with key "), "{ok_out}");
    assert!(ok_out.contains("and the spec"), "{ok_out}");
    // `--output state.json` (no spec) verifies too.
    let ok = parley(d, &["verify", &rec_s, "--state", "state.json"]).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(
        text(&ok).contains("not checked (give --public-key"),
        "{}",
        text(&ok)
    );

    // A contribution's text changed in the state: named, exit 5.
    let mut state: Value = read_json(&checkpoint);
    state["rounds"][1]["contributions"][4]["content"] = json!("edited afterwards");
    write_json(d.join("edited.json"), &state);
    let bad = parley(
        d,
        &[
            "verify",
            &rec_s,
            "--state",
            "edited.json",
            "--public-key",
            "keys/record-signing.pub",
        ],
    )
    .await;
    assert_eq!(bad.status.code(), Some(5), "{}", text(&bad));
    assert!(
        text(&bad).contains("contribution 17 (critique by "),
        "{}",
        text(&bad)
    );
    assert!(
        text(&bad).contains("round 2): text digest does not match the state"),
        "{}",
        text(&bad)
    );

    // Another key: refused.
    let other = parley(d, &["record", "--generate-key", "other"]).await;
    assert_eq!(other.status.code(), Some(0));
    let bad = parley(
        d,
        &["verify", &rec_s, "--public-key", "other/record-signing.pub"],
    )
    .await;
    assert_eq!(bad.status.code(), Some(5));
    assert!(
        text(&bad).contains("not with the public key given"),
        "{}",
        text(&bad)
    );

    // The record's signature changed: refused.
    let mut r: Value = read_json(&record);
    let sig = r["signature"]["value"].as_str().unwrap().to_string();
    let flipped = match sig.strip_prefix('A') {
        Some(rest) => format!("B{rest}"),
        None => format!("A{}", &sig[1..]),
    };
    r["signature"]["value"] = json!(flipped);
    write_json(d.join("forged.record.json"), &r);
    let bad = parley(
        d,
        &[
            "verify",
            "forged.record.json",
            "--public-key",
            "keys/record-signing.pub",
        ],
    )
    .await;
    assert_eq!(bad.status.code(), Some(5));
    assert!(
        text(&bad).contains("signature does not verify with key"),
        "{}",
        text(&bad)
    );

    // verify --report: the untouched report matches; each edit is named.
    let ok = parley(
        d,
        &[
            "verify",
            &rec_s,
            "--report",
            "r.md",
            "--public-key",
            "keys/record-signing.pub",
        ],
    )
    .await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(
        text(&ok).contains(
            "report: r.md matches: 24 texts with their tokens and models, the solution, the totals"
        ),
        "{}",
        text(&ok)
    );
    let tampered = |what: &str, edit: &dyn Fn(&str) -> String| {
        let edited = edit(&report);
        assert_ne!(edited, report, "{what}: the edit changed nothing");
        std::fs::write(d.join("tampered.md"), edited).unwrap();
    };
    let first_text = |md: &str| {
        let at = md.find("<!-- parley:entry 1 bytes=").unwrap();
        at + md[at..].find("-->\n").unwrap() + 4
    };
    type Edit<'a> = Box<dyn Fn(&str) -> String + 'a>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "a contribution's text",
            Box::new(|md: &str| {
                let b = first_text(md);
                let mut s = md.to_string();
                let c = if &s[b..b + 1] == "X" { "Y" } else { "X" };
                s.replace_range(b..b + 1, c);
                s
            }),
            "the text of proposal by ",
        ),
        (
            "a model name",
            Box::new(|md: &str| md.replacen(" ms · model-arch", " ms · model-evil", 1)),
            "model of proposal by ",
        ),
        (
            "a token count",
            Box::new(|md: &str| {
                let b = first_text(md);
                let meta = b + md[b..].find("\n_").unwrap() + 2;
                let mut s = md.to_string();
                s.insert(meta, '9');
                s
            }),
            "tokens of proposal by ",
        ),
        (
            "the solution",
            Box::new(|md: &str| {
                let at = md.find("<!-- parley:solution ").unwrap();
                let body = at + md[at..].find("-->\n").unwrap() + 4;
                let mut s = md.to_string();
                s.insert_str(body, "Also: ");
                s
            }),
            "the solution's text",
        ),
        (
            "the token totals",
            Box::new(|md: &str| md.replace("\n- Tokens: ", "\n- Tokens: 1")),
            "token totals differ",
        ),
        (
            "a text dropped",
            Box::new(|md: &str| {
                md.replacen(
                    "<!-- parley:entry 2 bytes=",
                    "<!-- parley:entry 1 bytes=",
                    1,
                )
            }),
            "appears twice",
        ),
    ];
    for (what, edit, named) in &cases {
        tampered(what, edit.as_ref());
        let bad = parley(d, &["verify", &rec_s, "--report", "tampered.md"]).await;
        assert_eq!(bad.status.code(), Some(5), "{what}: {}", text(&bad));
        assert!(text(&bad).contains(named), "{what}: {}", text(&bad));
    }
    // A report without markers, and a report of another debate: clear errors.
    std::fs::write(
        d.join("old.md"),
        format!(
            "# Debate {}\n\nno markers\n",
            rec["debateId"].as_str().unwrap()
        ),
    )
    .unwrap();
    let bad = parley(d, &["verify", &rec_s, "--report", "old.md"]).await;
    assert_eq!(bad.status.code(), Some(5), "{}", text(&bad));
    assert!(
        text(&bad).contains("carries no text markers"),
        "{}",
        text(&bad)
    );
    std::fs::write(
        d.join("other.md"),
        report.replacen("# Debate ", "# Debate x", 1),
    )
    .unwrap();
    let bad = parley(d, &["verify", &rec_s, "--report", "other.md"]).await;
    assert!(
        text(&bad).contains("the report is of debate x"),
        "{}",
        text(&bad)
    );

    // A second ADR of the same debate never overwrites the first.
    let id = rec["debateId"].as_str().unwrap();
    let again = parley(d, &["adr", id, "--dir", "docs/adr"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(
        text(&again).contains("0008-design-a-cache.md"),
        "{}",
        text(&again)
    );
    assert_eq!(
        std::fs::read_to_string(d.join("docs/adr/0007-design-a-cache.md")).unwrap(),
        adr
    );

    // `parley record` of the saved debate writes one that verifies (unsigned here).
    let rec2 = parley(d, &["record", "state.json", "-o", "again.record.json"]).await;
    assert_eq!(rec2.status.code(), Some(0), "{}", text(&rec2));
    let ok = parley(d, &["verify", "again.record.json", "--state", "state.json"]).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(text(&ok).contains("signature: unsigned"), "{}", text(&ok));

    // The signing key is in no output, state, record, report or ADR (nor its raw bytes).
    let mut files = Vec::new();
    all_text(d, &mut files);
    let seed = base64_decode(&seed_b64);
    for (p, t) in &files {
        if p.starts_with(d.join("keys")) {
            continue;
        }
        assert!(
            !t.contains(&seed_b64),
            "the signing key is in {}",
            p.display()
        );
        assert!(
            !std::fs::read(p)
                .unwrap()
                .windows(32)
                .any(|w| w == seed.as_slice()),
            "raw key bytes in {}",
            p.display()
        );
    }
    for out in [&run_out, &ok_out] {
        assert!(!out.contains(&seed_b64), "the signing key is in the output");
    }
}

/// Standard base64 (the key file's line) decoded, for the raw-bytes check.
fn base64_decode(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = A.iter().position(|a| *a == c).unwrap() as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voting_debate_gives_an_adr_chosen_by_the_vote_and_a_failed_one_none() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(
        d,
        &fake.base_url(),
        json!({"rounds": 1, "synthesisMethod": "voting"}),
    );
    // Everyone votes for kiss (kiss for the first other candidate): kiss wins.
    let script = DebateScript {
        votes: VoteRule::For("agent-kiss".into()),
        ..DebateScript::default()
    };
    fake.set_responder(move |r| script.reply(r));
    let run = parley(
        d,
        &[
            "run",
            "Design a rate limiter",
            "--output",
            "state.json",
            "--adr",
            "adr",
        ],
    )
    .await;
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let adr = std::fs::read_to_string(d.join("adr/0001-design-a-rate-limiter.md")).unwrap();
    assert!(
        adr.contains("(kiss)\", because it won the agents' vote ("),
        "{adr}"
    );
    assert!(adr.contains("## Pros and Cons of the Options"), "{adr}");
    let record = only(&d.join("debates"), ".record.json");
    let rec: Value = read_json(&record);
    assert!(
        rec["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "vote"),
        "{rec}"
    );
    let ok = parley(
        d,
        &["verify", &record.to_string_lossy(), "--state", "state.json"],
    )
    .await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));

    // A debate that ended without a solution: a clear error, no file.
    let mut state: Value = read_json(d.join("state.json"));
    state["status"] = json!("cancelled");
    state.as_object_mut().unwrap().remove("finalSolution");
    write_json(d.join("cancelled.json"), &state);
    let none = parley(d, &["adr", "cancelled.json", "--dir", "adr"]).await;
    assert_eq!(none.status.code(), Some(2), "{}", text(&none));
    assert!(
        text(&none).contains("ended cancelled without a solution"),
        "{}",
        text(&none)
    );
    assert_eq!(std::fs::read_dir(d.join("adr")).unwrap().count(), 1);
}
