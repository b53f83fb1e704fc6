//! A human participant answering from the web page, in a real headless Chromium (Debian
//! packages `chromium` and `chromium-driver`) against `parley serve` and the fake LLM: the
//! person's proposal, critiques and refinement are typed into the forms in their agent's
//! card, the debate runs on to its solution, the state records each text as the person's
//! (no tokens, no cost), and the page marks them "by a person".

use std::time::Duration;

use parley_testkit::{browser_available, Browser, FakeLlm, Latency};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// How many open forms of `kind` the page shows.
fn forms_of(kind: &str) -> String {
    format!("return document.querySelectorAll(\"form.human-task[data-kind='{kind}']\").length;")
}

/// What the page shows (its text and the timeline's bars), for a failure message.
fn page_text(b: &Browser) -> String {
    let rt = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        rt.block_on(async {
            b.execute(
                "return location.href + '\\n' + document.body.innerText.slice(0, 4000) + '\\n' + [...document.querySelectorAll('#timeline .bar')].map(e => e.className + ' ' + (e.title||'')).join('\\n');",
                vec![],
            )
            .await
            .map(|v| v.as_str().unwrap_or("").to_string())
            .unwrap_or_default()
        })
    })
}

/// Waits until a form of `kind` is shown and every call in flight is a person's turn, then
/// types `text` into the first one and sends it (again if the page re-rendered the form
/// meanwhile); waits until the page shows one form of `kind` fewer.
async fn answer(b: &Browser, kind: &str, text: &str) {
    let count = forms_of(kind);
    b.wait_until(
        &format!(
            "const forms = document.querySelectorAll('form.human-task').length; \
             return (function() {{ {count} }})() > 0 \
             && document.querySelectorAll('#timeline .bar.running').length <= forms;"
        ),
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| {
        let page = page_text(b);
        panic!("no {kind} form: {e}\n{page}")
    });
    let before = b.execute(&count, vec![]).await.unwrap().as_u64().unwrap();
    let css = format!("form.human-task[data-kind='{kind}']");
    let mut sent = false;
    for _ in 0..5 {
        let attempt = async {
            let area = b
                .wait_for(&format!("{css} textarea"), Duration::from_secs(10))
                .await?;
            b.execute(
                "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
                vec![json!(format!("{css} textarea"))],
            )
            .await?;
            b.clear(&area).await?;
            b.type_text(&area, text).await?;
            let send = b
                .wait_for(
                    &format!("{css} button[type=submit]"),
                    Duration::from_secs(10),
                )
                .await?;
            b.click(&send).await
        };
        if attempt.await.is_ok() {
            sent = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(sent, "could not send the {kind} form");
    b.wait_until(
        &format!("return (function() {{ {count} }})() < {before};"),
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| panic!("the {kind} form stayed: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_their_turns_from_the_page() {
    assert!(
        browser_available(),
        "chromium and chromedriver are needed (scripts/test.sh installs them)"
    );
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::ZERO));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["agents"][0] =
        json!({"id": "agent-human", "name": "Human", "role": "architect", "provider": "human"});
    cfg["debate"]["rounds"] = json!(1);
    parley_tests::write_json(dir.path().join("debate-config.json"), &cfg);
    let (_serve, base, token) = parley_tests::serve_page(PARLEY, dir.path());

    let b = Browser::start().await.unwrap();
    b.set_window(1440, 1000).await.unwrap();
    let id =
        parley_tests::start_from_page(&b, &base, &token, "Design a feature-flag service").await;

    answer(
        &b,
        "propose",
        "Flags in Postgres, cached in each service for 30 s.",
    )
    .await;
    answer(&b, "critique", "Person's first critique: no audit trail.").await;
    answer(
        &b,
        "critique",
        "Person's second critique: too many moving parts.",
    )
    .await;
    answer(
        &b,
        "refine",
        "Refined: Postgres plus an audit table and a 30 s cache.",
    )
    .await;
    b.wait_for("#solution", Duration::from_secs(60))
        .await
        .unwrap();
    b.wait_until(
        "return document.body.textContent.includes('by a person');",
        Duration::from_secs(15),
    )
    .await
    .unwrap();

    let state: Value = reqwest::Client::new()
        .get(format!("{base}/v1/debates/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["status"], "completed", "{state}");
    let mine: Vec<&Value> = state["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["agentId"] == "agent-human")
        .collect();
    let kinds: Vec<&str> = mine.iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "critique").count(),
        2,
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&"proposal") && kinds.contains(&"refinement"),
        "{kinds:?}"
    );
    for c in &mine {
        assert_eq!(c["metadata"]["human"], true, "{c}");
        assert!(
            c["metadata"]["tokensUsed"].as_u64().unwrap_or(0) == 0,
            "a person's text costs no tokens: {c}"
        );
    }
    let proposal = mine.iter().find(|c| c["type"] == "proposal").unwrap();
    assert_eq!(
        proposal["content"],
        "Flags in Postgres, cached in each service for 30 s."
    );
    // Only the two model agents' turns reached the model, never the person's.
    let kinds_called: Vec<&str> = fake
        .requests()
        .iter()
        .map(|r| parley_testkit::fake_llm::script::kind_of(&r.prompt_text()))
        .collect();
    for (kind, n) in [("propose", 2), ("critique", 4), ("refine", 2)] {
        assert_eq!(
            kinds_called.iter().filter(|k| **k == kind).count(),
            n,
            "{kind} calls: {kinds_called:?}"
        );
    }
}
