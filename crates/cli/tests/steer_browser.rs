//! The page's steering controls in a real headless Chromium (Debian packages `chromium` and
//! `chromium-driver`), driven over WebDriver against `parley serve` and the fake LLM: Pause
//! stops dispatch and Resume continues it, a Guide note is shown under the controls and
//! reaches the next prompts on the wire, "One more round" adds exactly one round, and
//! "Synthesize now" ends the debate with a synthesized solution.

use std::time::Duration;

use parley_testkit::{browser_available, Browser, FakeLlm, Latency};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

async fn state(base: &str, token: &str, id: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{base}/v1/debates/{id}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn click(b: &Browser, css: &str) {
    let e = b.wait_for(css, Duration::from_secs(15)).await.unwrap();
    b.execute(
        "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
        vec![json!(css)],
    )
    .await
    .unwrap();
    b.click(&e).await.unwrap();
}

/// Waits (up to 60 s) until `f` holds for the debate's state; returns that state.
async fn until(base: &str, token: &str, id: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = state(base, token, id).await;
        if f(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the state never got there: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_steering_buttons_pause_resume_guide_extend_and_stop_a_debate() {
    assert!(
        browser_available(),
        "chromium and chromedriver are needed (scripts/test.sh installs them)"
    );
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(700)));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["debate"]["rounds"] = json!(3);
    parley_tests::write_json(dir.path().join("debate-config.json"), &cfg);
    let (_serve, base, token) = parley_tests::serve_page(PARLEY, dir.path());

    let b = Browser::start().await.unwrap();
    b.set_window(1440, 1000).await.unwrap();
    let id = parley_tests::start_from_page(&b, &base, &token, "Design a job queue").await;

    // Pause: the page says so and offers Resume; the state records who paused it.
    click(&b, "#steer-pause").await;
    b.wait_until(
        "return !!document.getElementById('paused') && !!document.getElementById('steer-resume');",
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    let paused = until(&base, &token, &id, |s| s["steering"]["paused"] == true).await;
    assert_eq!(paused["status"], "running", "{paused}");
    // Once the calls in flight are back, no new one starts while paused.
    let settled = {
        let mut last = fake.request_count();
        loop {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let now = fake.request_count();
            if now == last {
                break now;
            }
            last = now;
        }
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(fake.request_count(), settled, "a call started while paused");

    // Guide: the note is listed under the controls, then carried by the next prompts.
    let note = b
        .wait_for("#steer-note", Duration::from_secs(10))
        .await
        .unwrap();
    b.type_text(&note, "Mind the compliance constraint")
        .await
        .unwrap();
    click(&b, "#steer-guide button[type=submit]").await;
    b.wait_until(
        "const l = document.getElementById('steer-notes');
         return !!l && l.textContent.includes('Mind the compliance constraint');",
        Duration::from_secs(15),
    )
    .await
    .unwrap();

    // Resume: dispatch continues, and the prompts after it carry the note.
    click(&b, "#steer-resume").await;
    b.wait_for("#steer-pause", Duration::from_secs(15))
        .await
        .unwrap();
    until(&base, &token, &id, |s| s["steering"]["paused"] != true).await;

    // One more round: three configured, four run.
    click(&b, "#steer-extend").await;
    until(&base, &token, &id, |s| s["steering"]["extraRounds"] == 1).await;

    fake.set_latency(Latency::Fixed(Duration::ZERO));
    let done = until(&base, &token, &id, |s| {
        s["status"] == "completed" || s["status"] == "failed"
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["rounds"].as_array().unwrap().len(), 4, "{done}");
    b.wait_for("#solution", Duration::from_secs(30))
        .await
        .unwrap();

    let requests = fake.requests();
    let after: Vec<_> = requests[settled..].iter().collect();
    assert!(!after.is_empty());
    assert!(
        after
            .iter()
            .all(|r| r.prompt_text().contains("Mind the compliance constraint")),
        "a prompt after the guide note lacks it"
    );
    assert!(
        requests[..settled]
            .iter()
            .all(|r| !r.prompt_text().contains("Mind the compliance constraint")),
        "a prompt before the guide note has it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesize_now_ends_a_running_debate_with_a_solution() {
    assert!(
        browser_available(),
        "chromium and chromedriver are needed (scripts/test.sh installs them)"
    );
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(700)));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["debate"]["rounds"] = json!(5);
    parley_tests::write_json(dir.path().join("debate-config.json"), &cfg);
    let (_serve, base, token) = parley_tests::serve_page(PARLEY, dir.path());

    let b = Browser::start().await.unwrap();
    let id = parley_tests::start_from_page(&b, &base, &token, "Design a cache").await;
    b.wait_until(
        "return document.querySelectorAll('#timeline .bar.running').length >= 1;",
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    click(&b, "#steer-stop").await;
    b.wait_for("#solution", Duration::from_secs(60))
        .await
        .unwrap();
    let done = until(&base, &token, &id, |s| s["status"] == "completed").await;
    assert_eq!(done["steering"]["stopped"], true, "{done}");
    assert!(
        done["rounds"].as_array().unwrap().len() < 5,
        "stop ran every round: {done}"
    );
    assert!(done["finalSolution"]["description"].is_string(), "{done}");
}
