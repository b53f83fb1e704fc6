//! Malformed and mutated input against the running cluster (roles configuration, real
//! NATS and Redis, the service binaries): at least 1,000 bad payloads to each request
//! subject — random bytes, truncated JSON, deep nesting, huge numbers, control and
//! non-UTF-8 characters, oversize strings, semantic mutations of a valid spec — plus
//! garbage result notices and garbage task messages. Every bad request gets an error
//! reply, then a good debate completes, and no service restarted or logged a panic.
//!
//! The payloads come from a seeded generator ([`SEED`]), so a failure reproduces. The
//! counts per subject and error code are printed (`--nocapture`).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use parley_testkit::free_port;
use parley_tests::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const SEED: u64 = 0x005e_ed11;
/// Bad payloads per request subject.
const PER_SUBJECT: usize = 1_000;

/// Numbers no field accepts.
const HUGE: &[&str] = &[
    "1e999999",
    "-1e400",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "1.7976931348623157e309",
    "4294967296",
    "-1",
    "99999999999999999999999999999999999999999",
];

fn random_bytes(rng: &mut StdRng) -> Vec<u8> {
    let n = rng.gen_range(0..2048);
    (0..n).map(|_| rng.gen()).collect()
}

fn deep(rng: &mut StdRng) -> Vec<u8> {
    let depth = [129usize, 200, 1_000, 10_000, 100_000][rng.gen_range(0..5)];
    let (open, close) = if rng.gen_bool(0.5) {
        ("[", "]")
    } else {
        ("{\"a\":", "}")
    };
    let mut s = open.repeat(depth);
    s.push('1');
    if rng.gen_bool(0.5) {
        s.push_str(&close.repeat(depth));
    }
    s.into_bytes()
}

fn truncated(rng: &mut StdRng, valid: &[u8]) -> Vec<u8> {
    let at = rng.gen_range(0..valid.len());
    valid[..at].to_vec()
}

fn non_object(rng: &mut StdRng) -> Vec<u8> {
    let v = [
        "null",
        "true",
        "false",
        "\"spec\"",
        "123",
        "[]",
        "[{}]",
        "-0.0",
        "\"\\u0000\"",
    ];
    v[rng.gen_range(0..v.len())].as_bytes().to_vec()
}

/// A string with control characters, odd Unicode, or a raw non-UTF-8 byte (which makes the
/// JSON invalid).
fn nasty_text(rng: &mut StdRng) -> (String, bool) {
    let pieces = [
        "\u{0}",
        "\n",
        "\r\n",
        "\u{1b}[31m",
        "\u{7f}",
        "\u{202e}",
        "\u{feff}",
        "#",
        "/",
        "*",
        ">",
        " ",
        "..",
        "\u{1F600}",
        "\t",
    ];
    let mut s = String::from("id");
    for _ in 0..rng.gen_range(1..4) {
        s.push_str(pieces[rng.gen_range(0..pieces.len())]);
    }
    (s, rng.gen_bool(0.25))
}

/// Serialises `v`, then (when `raw_byte`) puts an invalid UTF-8 byte inside a string.
fn with_raw_byte(v: &Value, raw_byte: bool) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(v).unwrap();
    if raw_byte {
        if let Some(i) = bytes.windows(4).position(|w| w == b"\"id\"") {
            bytes.insert(i + 1, 0xff);
        }
    }
    bytes
}

/// A valid spec with one change that must make it invalid.
fn mutated_spec(rng: &mut StdRng) -> Vec<u8> {
    let mut s = spec("Design a rate limiter");
    let i = rng.gen_range(0..3);
    match rng.gen_range(0..24) {
        0 => s["agents"][i]["baseUrl"] = json!("http://attacker.example/v1"),
        1 => s["baseUrl"] = json!("http://attacker.example/v1"),
        2 => s["judge"]["apiKey"] = json!("sk-x"),
        3 => s["agents"][i]["provider"] = json!("evil-provider"),
        4 => {
            s["agents"] = json!((0..33)
                .map(|k| json!({"id": format!("a{k}"), "name": "A", "role": "kiss", "model": "m", "enabled": k < 2}))
                .collect::<Vec<_>>())
        }
        5 => {
            s["agents"] = json!((0..13)
                .map(|k| json!({"id": format!("a{k}"), "name": "A", "role": "kiss", "model": "m"}))
                .collect::<Vec<_>>())
        }
        6 => s["agents"][1]["id"] = s["agents"][0]["id"].clone(),
        7 => {
            let (t, raw) = nasty_text(rng);
            s["agents"][i]["id"] = json!(t);
            return with_raw_byte(&s, raw);
        }
        8 => s["debate"]["retry"] = json!({"nodes": {"bogus": {}}}),
        9 => s["debate"]["retry"] = json!({"default": {"initialBackoffMs": rng.gen_range(0..100)}}),
        10 => s["debate"]["retry"] = json!({"default": {"attempts": rng.gen_range(11..1000)}}),
        11 => s["debate"]["retry"] = json!({"default": {"timeoutMs": rng.gen_range(1_800_001..u64::MAX)}}),
        12 => s["debate"]["rounds"] = json!(["one"]),
        13 => s["problem"] = json!([1, 2, 3]),
        14 => s["agents"] = json!(null),
        15 => s["schemaVersion"] = json!(rng.gen_range(2..100)),
        16 => s["problem"] = json!(" \n\t "),
        17 => {
            s.as_object_mut().unwrap().remove("judge");
        }
        18 => s["agents"][i]["maxTokens"] = json!(rng.gen_range(16_385..u32::MAX)),
        19 => s["agents"][i]["temperature"] = json!(rng.gen_range(2.01..1e300)),
        20 => s["idempotencyKey"] = json!("k".repeat(rng.gen_range(129..2000))),
        21 => s[["token", "password", "secret", "authorization"][rng.gen_range(0..4)]] = json!("x"),
        22 => s["agents"][i]["name"] = json!(format!("bad\u{0}name{}", "\u{7}")),
        _ => s["agents"][i]["model"] = json!("m".repeat(rng.gen_range(257..5000))),
    }
    serde_json::to_vec(&s).unwrap()
}

/// A valid spec with one numeric field replaced by a number nothing accepts.
fn huge_number(rng: &mut StdRng) -> Vec<u8> {
    let n = HUGE[rng.gen_range(0..HUGE.len())];
    let fields = [
        "\"rounds\": 2",
        "\"temperature\": 0.1",
        "\"temperature\": 0.4",
    ];
    let text = spec("p").to_string().replace(": ", ":");
    let field = fields[rng.gen_range(0..fields.len())].replace(": ", ":");
    let name = field.split(':').next().unwrap_or_default();
    let replaced = text.replacen(&field, &format!("{name}:{n}"), 1);
    assert_ne!(replaced, text, "{field} not in the spec");
    replaced.into_bytes()
}

fn oversize(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..4) {
        // Over the submission limit (but under NATS's max_payload).
        0 => serde_json::to_vec(&spec(&"x".repeat(rng.gen_range(1_000_001..1_040_000)))).unwrap(),
        // Over the problem limit.
        1 => serde_json::to_vec(&spec(&"y".repeat(rng.gen_range(100_001..200_000)))).unwrap(),
        2 => {
            let mut s = spec("p");
            s["agents"][0]["systemPrompt"] = json!("z".repeat(rng.gen_range(50_001..120_000)));
            serde_json::to_vec(&s).unwrap()
        }
        _ => {
            let mut s = spec("p");
            s["judge"]["id"] = json!("j".repeat(rng.gen_range(65..10_000)));
            serde_json::to_vec(&s).unwrap()
        }
    }
}

/// Bad submissions.
fn submissions(rng: &mut StdRng, n: usize) -> Vec<Vec<u8>> {
    let valid = serde_json::to_vec(&spec("Design a rate limiter")).unwrap();
    (0..n)
        .map(|k| match k % 10 {
            0 => random_bytes(rng),
            1 => truncated(rng, &valid),
            2 => deep(rng),
            3 => huge_number(rng),
            4..=6 => mutated_spec(rng),
            7 => non_object(rng),
            8 => {
                let (t, raw) = nasty_text(rng);
                let mut s = spec("p");
                s["judge"]["id"] = json!(t);
                with_raw_byte(&s, raw)
            }
            _ if k % 100 == 9 => oversize(rng),
            _ => mutated_spec(rng),
        })
        .collect()
}

/// Bad `{"debateId": ...}` requests (status, retry, cancel).
fn debate_refs(rng: &mut StdRng, n: usize) -> Vec<Vec<u8>> {
    let valid = br#"{"debateId": "deb-20200101-000000-abcdef"}"#.to_vec();
    (0..n)
        .map(|k| match k % 10 {
            0 => random_bytes(rng),
            1 => truncated(rng, &valid),
            2 => deep(rng),
            3 => format!("{{\"debateId\": {}}}", HUGE[rng.gen_range(0..HUGE.len())]).into_bytes(),
            4 => {
                let (t, raw) = nasty_text(rng);
                with_raw_byte(&json!({"debateId": format!("deb-{t}")}), raw)
            }
            5 => json!({"debateId": "x".repeat(rng.gen_range(100..1_000_000))})
                .to_string()
                .into_bytes(),
            6 => {
                let odd = [
                    "../../etc/passwd",
                    "deb-*",
                    "deb->",
                    "parley.tasks.agent",
                    "",
                ];
                json!({"debateId": odd[rng.gen_range(0..odd.len())]})
                    .to_string()
                    .into_bytes()
            }
            7 => non_object(rng),
            // Well-formed ids of debates that do not exist: `not_found`.
            8 => {
                json!({"debateId": format!("deb-20200101-000000-{:06}", rng.gen_range(0..999_999))})
                    .to_string()
                    .into_bytes()
            }
            _ => json!({"debateId": "deb-20200101-000000-abcdef", "extra": {"baseUrl": "x"}})
                .to_string()
                .into_bytes(),
        })
        .collect()
}

/// Bad answer requests (`parley.debates.answer`): the bad `{"debateId"}` shapes (no
/// `answers`), and answers that are too many, too long, twice the same, or for a debate
/// that does not exist.
fn answer_requests(rng: &mut StdRng, n: usize) -> Vec<Vec<u8>> {
    let id = "deb-20200101-000000-abcdef";
    debate_refs(rng, n)
        .into_iter()
        .enumerate()
        .map(|(k, bad_ref)| match k % 20 {
            8 => json!({"debateId": format!("deb-20200101-000000-{:06}", rng.gen_range(0..999_999)),
                        "answers": [{"id": "agent-a-q1", "answer": "x"}]})
            .to_string()
            .into_bytes(),
            9 => json!({"debateId": id, "answers": (0..241).map(|i| json!({"id": format!("a-q{i}")})).collect::<Vec<_>>()})
                .to_string()
                .into_bytes(),
            18 => json!({"debateId": id, "answers": [{"id": "a-q1", "answer": "x".repeat(4_001)}]})
                .to_string()
                .into_bytes(),
            19 => json!({"debateId": id, "answers": [{"id": "a-q1"}, {"id": "a-q1"}]})
                .to_string()
                .into_bytes(),
            _ => bad_ref,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_bad_payloads_per_subject_then_a_good_debate() {
    let c = Cluster::start_with_roles(json!({})).await;
    let (coord_port, agent_port, judge_port) = (free_port(), free_port(), free_port());
    let mut coord =
        c.coordinator_with(&[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{coord_port}"))]);
    let mut agent = c.worker_with(
        "agent",
        &[],
        &[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{agent_port}"))],
    );
    let mut judge = c.worker_with(
        "judge",
        &[],
        &[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{judge_port}"))],
    );
    let pids = [coord.pid(), agent.pid(), judge.pid()];
    let mut rng = StdRng::seed_from_u64(SEED);

    let mut counts: BTreeMap<(&str, String), usize> = BTreeMap::new();
    let subjects: [(&'static str, Vec<Vec<u8>>); 5] = [
        ("parley.debates.submit", submissions(&mut rng, PER_SUBJECT)),
        ("parley.debates.status", debate_refs(&mut rng, PER_SUBJECT)),
        ("parley.debates.retry", debate_refs(&mut rng, PER_SUBJECT)),
        ("parley.debates.cancel", debate_refs(&mut rng, PER_SUBJECT)),
        (
            "parley.debates.answer",
            answer_requests(&mut rng, PER_SUBJECT),
        ),
    ];
    for (subject, payloads) in subjects {
        let sent = payloads.len();
        let replies: Vec<_> = futures::stream::iter(payloads.into_iter().map(|p| {
            let c = &c;
            async move { (c.try_request(subject, p.clone()).await, p) }
        }))
        .buffer_unordered(16)
        .collect()
        .await;
        assert_eq!(replies.len(), sent);
        for (reply, payload) in replies {
            let reply = reply.unwrap_or_else(|e| {
                panic!(
                    "{subject}: no reply ({e}) to {:?}",
                    String::from_utf8_lossy(&payload[..payload.len().min(200)])
                )
            });
            let code = reply["error"]["code"].as_str().unwrap_or_else(|| {
                panic!(
                    "{subject}: not an error reply: {reply} to {:?}",
                    String::from_utf8_lossy(&payload[..payload.len().min(300)])
                )
            });
            assert!(
                matches!(
                    code,
                    "invalid_json"
                        | "invalid_request"
                        | "unsupported_schema_version"
                        | "payload_too_large"
                        | "not_found"
                ),
                "{subject}: unexpected code {code}: {reply}"
            );
            *counts.entry((subject, code.to_string())).or_default() += 1;
        }
    }

    // Garbage notices (worker role) and garbage tasks (with the coordinator's credentials).
    let (worker, _) = connect_watching(&c.nats_url_for("worker")).await;
    for k in 0..1_000 {
        let body = match k % 4 {
            0 => random_bytes(&mut rng),
            1 => deep(&mut rng),
            2 => json!({"debateId": "deb-20200101-000000-abcdef", "taskId": "x", "attempt": HUGE.len()})
                .to_string()
                .into_bytes(),
            _ => mutated_spec(&mut rng),
        };
        let subject = format!("parley.results.deb-20200101-000000-{:06}", k);
        worker.publish(subject, body.into()).await.unwrap();
    }
    worker.flush().await.unwrap();
    let (coordinator, _) = connect_watching(&c.nats_url_for("coordinator")).await;
    let js = async_nats::jetstream::new(coordinator);
    // The tasks stream takes messages of at most 64 KiB (task messages are references):
    // a larger garbage task is refused by JetStream itself and never reaches a worker.
    let sent_tasks = 200;
    let (mut garbage_tasks, mut too_large) = (0u32, 0u32);
    for k in 0..sent_tasks {
        let body = match k % 3 {
            0 => random_bytes(&mut rng),
            1 => deep(&mut rng),
            _ => mutated_spec(&mut rng),
        };
        let subject = if k % 2 == 0 {
            "parley.tasks.agent"
        } else {
            "parley.tasks.judge"
        };
        let len = body.len();
        match js.publish(subject, body.into()).await.unwrap().await {
            Ok(_) => garbage_tasks += 1,
            Err(e) => {
                assert!(
                    len > 64 * 1024 && e.to_string().contains("message size exceeds"),
                    "a garbage task of {len} bytes was refused by the stream: {e}"
                );
                too_large += 1;
            }
        }
    }
    assert_eq!(garbage_tasks + too_large, sent_tasks);

    // A good debate still completes. (`unavailable` means "try again": on a loaded
    // machine Redis may miss its 500 ms response timeout; a client retries.)
    let body = serde_json::to_vec(&spec("Design a fuzz-proof API gateway")).unwrap();
    let mut id = None;
    for _ in 0..5 {
        let r = c.request("parley.debates.submit", body.clone()).await;
        if let Some(i) = r["debateId"].as_str() {
            id = Some(i.to_string());
            break;
        }
        assert_eq!(r["error"]["code"], "unavailable", "{r}");
        eprintln!("good submission answered {r}; retrying");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let id = id.expect("the good submission was accepted");
    let state = c.wait_done(&id, Duration::from_secs(90)).await;
    assert_complete(&state);
    assert_no_completed_call_repeated(&c.fake);

    // Every garbage task was refused by a worker (terminated, never run).
    let rejected = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("parley_tasks_rejected_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let scrape = |port: u16| async move {
        reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let mut refused_tasks = 0.0;
    for _ in 0..100 {
        refused_tasks = rejected(&scrape(agent_port).await) + rejected(&scrape(judge_port).await);
        if refused_tasks >= f64::from(garbage_tasks) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(refused_tasks, f64::from(garbage_tasks));
    // The coordinator counted its error replies as the clients saw them.
    let m = scrape(coord_port).await;
    for ((subject, code), n) in &counts {
        let short = subject.rsplit('.').next().unwrap_or_default();
        let prefix = format!("parley_request_errors_total{{subject=\"{short}\",code=\"{code}\"}}");
        let got: f64 = m
            .lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{m}"));
        assert_eq!(got as usize, *n, "{prefix}");
    }

    // No service restarted or panicked.
    for (p, pid) in [&mut coord, &mut agent, &mut judge].into_iter().zip(pids) {
        assert!(p.is_running(), "a service exited:\n{}", p.log());
        assert_eq!(p.pid(), pid);
        assert!(!p.log().contains("panicked"), "{}", p.log());
    }

    let mut table = String::from("fuzz: replies per subject and code\n");
    for ((subject, code), n) in &counts {
        table.push_str(&format!("  {subject:<24} {code:<28} {n:>5}\n"));
    }
    let total: usize = counts.values().sum();
    table.push_str(&format!(
        "  total bad requests {total}, all answered with an error; 1000 garbage notices and {garbage_tasks} garbage tasks refused by workers ({too_large} larger than 64 KiB refused by the tasks stream); good debate completed\n"
    ));
    eprintln!("{table}");
    assert_eq!(total, 5 * PER_SUBJECT);
}
