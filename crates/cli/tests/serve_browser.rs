//! The web page in a real headless Chromium (Debian packages `chromium` and
//! `chromium-driver`; `scripts/test.sh` installs them), driven over WebDriver: a debate
//! started from the form shows its contributions while it runs and its final solution when
//! it ends, a model's reply holding HTML is shown as text, never run, and replies built to
//! make a backtracking Markdown renderer take quadratic time render at once.
//!
//! Screenshots of the live view and of the finished debate are saved under
//! `target/test-artifacts/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use parley_testkit::{browser_available, free_port, Browser, ChildProcess, FakeLlm, Latency};
use serde_json::json;

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// `target/test-artifacts` (the test runs from `target/<profile>/deps`).
fn artifacts() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("test-artifacts")
}

fn need_browser() {
    assert!(
        browser_available(),
        "chromium and chromedriver are needed (scripts/test.sh installs them: apt-get install chromium chromium-driver)"
    );
}

/// Opens the page at `url`, types `problem` into the form and starts the debate.
async fn start_from_the_form(b: &Browser, url: &str, problem: &str) {
    b.goto(url).await.unwrap();
    let field = b
        .wait_for("#problem", Duration::from_secs(15))
        .await
        .unwrap();
    b.type_text(&field, problem).await.unwrap();
    let start = b.wait_for("#start", Duration::from_secs(5)).await.unwrap();
    b.click(&start).await.unwrap();
}

/// Serves `cfg` (as the server's debate config) from a fresh directory, opens the page
/// signed in with the generated token, starts a debate on `problem` from the form and waits
/// for its solution. The directory and the server live as long as the returned values.
async fn debate_to_its_solution(
    cfg: &serde_json::Value,
    problem: &str,
) -> (tempfile::TempDir, ChildProcess, Browser) {
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(dir.path().join("debate-config.json"), cfg);
    let port = free_port();
    let serve = serve_with(dir.path(), port, &[]);
    let token = generated_token(&serve);
    let b = Browser::start().await.unwrap();
    b.set_window(1440, 1000).await.unwrap();
    start_from_the_form(
        &b,
        &format!("http://127.0.0.1:{port}/#token={token}"),
        problem,
    )
    .await;
    b.wait_for("#solution", Duration::from_secs(60))
        .await
        .unwrap();
    (dir, serve, b)
}

/// What the model replies: HTML and script in the simplicity advocate's texts, Markdown in
/// the judge's solution.
const HOSTILE: &str = "Keep it simple: one process first. <script>window.__pwned = 1</script> \
<img src=x onerror=\"window.__pwned = 2\"> <b>not bold</b> and **really bold**.";

fn reply(model: &str, prompt: &str) -> String {
    match model {
        "model-judge" => json!({
            "description": "## Plan\n\nPut a **token bucket** per API key in Redis, refilled by a Lua script.\n\n\
                            1. Check the bucket on every request.\n2. Return `429` with `Retry-After` when empty.\n\n\
                            See [the RFC](https://www.rfc-editor.org/rfc/rfc6585) and [not this](javascript:alert(1)).\n\n\
                            ```\nlocal tokens = redis.call('GET', KEYS[1])\n```",
            "tradeoffs": ["Redis becomes a dependency of every request."],
            "recommendations": ["Shadow-mode the limits for a week before enforcing them."],
            "unfulfilledMajorRequirements": [],
            "openQuestions": ["Which endpoints are exempt?"],
            "confidence": 78
        })
        .to_string(),
        "model-kiss" => HOSTILE.to_string(),
        _ if prompt.contains("critique") || prompt.contains("Critique") => format!(
            "{model}: the proposal is sound, but it should say how the limits are configured per tenant \
             and what happens when Redis is unreachable."
        ),
        _ => format!(
            "{model}: use a **token bucket** per client.\n\n- Refill continuously\n- Keep the state in Redis\n- \
             Answer `429` with `Retry-After`"
        ),
    }
}

/// The token of the restart test: given, so it stays the same across the restart.
const RESTART_TOKEN: &str = "restart-token-0123456789abcdef";

/// `parley serve` on `port` in `dir` with [`RESTART_TOKEN`] (no API keys in its
/// environment).
fn serve(dir: &Path, port: u16) -> ChildProcess {
    serve_with(dir, port, &["--auth-token", RESTART_TOKEN])
}

/// The token `serve` generated and printed in its start line (`.../#token=<token>`).
fn generated_token(serve: &ChildProcess) -> String {
    let line = serve
        .wait_for_log_line("Parley is serving", Duration::from_secs(1))
        .unwrap_or_default();
    let rest = line.split_once("#token=").map(|(_, r)| r).unwrap_or("");
    let token = rest.split_whitespace().next().unwrap_or("").to_string();
    assert!(!token.is_empty(), "no generated token in {line:?}");
    token
}

fn serve_with(dir: &Path, port: u16, extra: &[&str]) -> ChildProcess {
    let mut cmd = Command::new(PARLEY);
    cmd.current_dir(dir)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_SERVE_TOKEN")
        .env("PARLEY_MODEL_DIR", dir.join("no-models"));
    let serve = ChildProcess::spawn(cmd, "serve").unwrap();
    assert!(
        serve
            .wait_for_log_line("Parley is serving", Duration::from_secs(30))
            .is_some(),
        "{}",
        serve.log()
    );
    serve
}

/// `parley serve` (with `extra` arguments) on a free port in a new directory whose config
/// calls `fake`: (the directory, the server, its address `http://127.0.0.1:PORT`).
fn serve_fake(fake: &FakeLlm, extra: &[&str]) -> (tempfile::TempDir, ChildProcess, String) {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let port = free_port();
    let serve = serve_with(dir.path(), port, extra);
    (dir, serve, format!("http://127.0.0.1:{port}"))
}

/// The three-agent, two-round config calling `base_url`.
fn write_config(dir: &Path, base_url: &str) {
    parley_tests::write_json(
        dir.join("debate-config.json"),
        &parley_tests::spec_config(Some(base_url)),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_keeps_following_a_debate_across_a_server_restart() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(700)));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let port = free_port();
    let mut first = serve(dir.path(), port);
    let base = format!("http://127.0.0.1:{port}");
    let id: String = reqwest::Client::new()
        .post(format!("{base}/v1/debates"))
        .bearer_auth(RESTART_TOKEN)
        .json(&json!({"problem": "Design a job scheduler that survives restarts"}))
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["debateId"]
        .as_str()
        .unwrap()
        .to_string();

    let b = Browser::start().await.unwrap();
    b.goto(&format!("{base}/?d={id}#token={RESTART_TOKEN}"))
        .await
        .unwrap();
    b.wait_until(
        "return document.querySelectorAll('#rounds .contrib .md.body').length >= 3;",
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    // Marks this page load: a reload would lose it.
    b.execute("window.__sameLoad = 'yes';", vec![])
        .await
        .unwrap();

    first.terminate();
    assert!(first.wait_exit(Duration::from_secs(20)).is_some());
    b.wait_until(
        "const c = document.getElementById('conn'); return c && c.classList.contains('retrying');",
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    let _second = serve(dir.path(), port);

    b.wait_for("#solution", Duration::from_secs(90))
        .await
        .unwrap();
    // The status can read "completed" (from a state refresh) while the event stream is
    // still waiting out its reconnect back-off (up to 8 s): wait for both.
    let page = b
        .wait_until(
            "const s = document.getElementById('status');
             const conn = document.getElementById('conn').className;
             if (!s || s.textContent !== 'completed' || !conn.includes('live')) return null;
             return { same: window.__sameLoad || null, bars: document.querySelectorAll('#timeline .bar').length,
                      conn };",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(page["same"], "yes", "the page was reloaded: {page}");
    assert_eq!(page["bars"], 22, "one bar per LLM call: {page}");
    assert!(page["conn"].as_str().unwrap().contains("live"), "{page}");
    parley_tests::assert_no_completed_call_repeated(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debate_started_from_the_form_is_watched_live_to_its_solution() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(900)));
    fake.set_responder(|r| reply(&r.model, &r.prompt_text()));
    // The operator's prices (LiteLLM's format): the page shows what the debate costs.
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let price = json!({"input_cost_per_token": 0.000002, "output_cost_per_token": 0.000008});
    parley_tests::write_json(
        dir.path().join("prices.json"),
        &json!({"model-arch": price, "model-sec": price, "model-kiss": price, "model-judge": price}),
    );
    let port = free_port();
    let serve = serve_with(dir.path(), port, &["--prices", "prices.json"]);
    let base = format!("http://127.0.0.1:{port}/");
    let token = generated_token(&serve);

    let b = Browser::start().await.unwrap();
    b.set_window(1440, 1000).await.unwrap();
    start_from_the_form(
        &b,
        &format!("{base}#token={token}"),
        "Design a rate limiter for a public REST API: per-key quotas, bursts, and clear errors.",
    )
    .await;

    // Contributions appear while the debate runs, and the cost so far with them.
    let live = b
        .wait_until(
            "const s = document.getElementById('status');
             const n = document.querySelectorAll('#rounds .contrib .md.body').length;
             const c = document.getElementById('cost');
             return s && s.textContent === 'running' && n >= 3 && c && c.textContent.startsWith('$') && document.querySelectorAll('#timeline .bar').length >= 3 ? n : 0;",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert!(live.as_u64().unwrap_or(0) >= 3);
    let running_cost = b
        .execute(
            "return document.getElementById('cost').textContent;",
            vec![],
        )
        .await
        .unwrap();
    // Wait for critiques to be underway so the live view shows the dataflow.
    let _ = b
        .wait_until(
            "return document.querySelectorAll('#rounds details.crit').length >= 2 && document.getElementById('status').textContent === 'running';",
            Duration::from_secs(30),
        )
        .await;
    b.screenshot(&artifacts().join("serve-live.png"))
        .await
        .unwrap();

    // The final solution, rendered from Markdown.
    b.wait_for("#solution", Duration::from_secs(90))
        .await
        .unwrap();
    let status = b
        .wait_until(
            "const s = document.getElementById('status'); return s && s.textContent === 'completed' ? s.textContent : '';",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(status, "completed");
    // The final cost: the state's total, more than what was shown while it ran.
    let usd = |v: &serde_json::Value| -> f64 {
        v.as_str().unwrap().trim_start_matches('$').parse().unwrap()
    };
    let final_cost = b
        .execute(
            "return document.getElementById('cost').textContent;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        usd(&final_cost) > usd(&running_cost) && usd(&running_cost) > 0.0,
        "{running_cost} then {final_cost}"
    );
    let solution = b
        .wait_for("#solution", Duration::from_secs(5))
        .await
        .unwrap();
    let text = b.text(&solution).await.unwrap();
    assert!(text.contains("token bucket"), "{text}");
    assert!(text.contains("Shadow-mode the limits"), "{text}");
    assert!(text.contains("Which endpoints are exempt?"), "{text}");
    assert!(text.contains("78"), "{text}");
    // The decision record: its digest and that it is unsigned (no key given), and its
    // download button.
    let record = b
        .wait_for("#record", Duration::from_secs(10))
        .await
        .unwrap();
    let line = b.text(&record).await.unwrap();
    assert!(line.starts_with("Decision record "), "{line}");
    assert!(line.ends_with(" · unsigned"), "{line}");
    let digest = line
        .trim_start_matches("Decision record ")
        .trim_end_matches(" · unsigned");
    assert!(
        digest.len() == 64 && digest.bytes().all(|c| c.is_ascii_hexdigit()),
        "{line}"
    );
    assert!(b
        .find_all("#download-record")
        .await
        .is_ok_and(|v| !v.is_empty()));
    let md = b
        .execute(
            "const s = document.getElementById('solution');
             return {
               heading: !!s.querySelector('.md h4, .md h3'),
               strong: (s.querySelector('.md strong') || {}).textContent || '',
               items: s.querySelectorAll('.md ol li').length,
               code: (s.querySelector('.md pre code') || {}).textContent || '',
               links: [...s.querySelectorAll('a')].map(a => a.getAttribute('href')),
             };",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(md["heading"], true, "{md}");
    assert_eq!(md["strong"], "token bucket", "{md}");
    assert_eq!(md["items"], 2, "{md}");
    assert!(md["code"].as_str().unwrap().contains("redis.call"), "{md}");
    assert_eq!(
        md["links"],
        json!(["https://www.rfc-editor.org/rfc/rfc6585"]),
        "only http(s) links: {md}"
    );

    // The hostile reply is text: nothing ran, no element was made from it.
    let safety = b
        .execute(
            "const kiss = [...document.querySelectorAll('#rounds .agent-col[data-agent=\"agent-kiss\"] .contrib.proposal .body')];
             return {
               pwned: window.__pwned === undefined ? null : window.__pwned,
               scripts: document.querySelectorAll('#view script').length,
               imgs: document.querySelectorAll('#view img').length,
               bolds: document.querySelectorAll('#view .md b').length,
               strong: [...document.querySelectorAll('#rounds .agent-col[data-agent=\"agent-kiss\"] .md strong')].map(s => s.textContent),
               text: kiss.map(k => k.textContent).join('\\n'),
             };",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(safety["pwned"], serde_json::Value::Null, "{safety}");
    assert_eq!(safety["scripts"], 0, "{safety}");
    assert_eq!(safety["imgs"], 0, "{safety}");
    assert_eq!(safety["bolds"], 0, "{safety}");
    // Its Markdown is rendered (the page's own renderer makes the <strong>).
    assert!(
        safety["strong"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "really bold"),
        "{safety}"
    );
    let shown = safety["text"].as_str().unwrap();
    assert!(
        shown.contains("<script>window.__pwned = 1</script>") && shown.contains("<img src=x"),
        "the reply is not shown as text: {shown}"
    );

    // The list on the left has it, completed.
    let list = b
        .wait_for("#debate-list a.current", Duration::from_secs(10))
        .await
        .unwrap();
    let entry = b.text(&list).await.unwrap();
    assert!(
        entry.contains("Design a rate limiter") && entry.to_lowercase().contains("completed"),
        "{entry}"
    );

    b.execute("window.scrollTo(0, 0);", vec![]).await.unwrap();
    b.set_window(1440, 1800).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.screenshot(&artifacts().join("serve-finished.png"))
        .await
        .unwrap();
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_page_signs_in_by_field_or_by_url_fragment() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    let token = "page-token-0123456789abcdef";
    let (_dir, _serve, base) = serve_fake(&fake, &["--auth-token", token]);
    let base = format!("{base}/");

    let b = Browser::start().await.unwrap();
    b.goto(&base).await.unwrap();
    let field = b
        .wait_for("#token-input", Duration::from_secs(15))
        .await
        .unwrap();
    b.wait_until(
        "return !document.getElementById('login').hidden && !document.getElementById('problem');",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    // A wrong token is refused, the right one opens the form.
    b.type_text(&field, "not-the-token-at-all").await.unwrap();
    b.click(
        &b.wait_for("#login-form button", Duration::from_secs(5))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_until(
        "const e = document.getElementById('login-error'); return e && !e.hidden && e.textContent;",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    b.screenshot(&artifacts().join("serve-sign-in.png"))
        .await
        .unwrap();
    let field = b
        .wait_for("#token-input", Duration::from_secs(5))
        .await
        .unwrap();
    b.clear(&field).await.unwrap();
    b.type_text(&field, token).await.unwrap();
    b.click(
        &b.wait_for("#login-form button", Duration::from_secs(5))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for("#problem", Duration::from_secs(10))
        .await
        .unwrap();

    // A fresh browser with the token in the URL fragment: signed in, and the fragment is
    // gone from the address bar.
    drop(b);
    let b = Browser::start().await.unwrap();
    b.goto(&format!("{base}#token={token}")).await.unwrap();
    b.wait_for("#problem", Duration::from_secs(15))
        .await
        .unwrap();
    let href = b.execute("return location.href;", vec![]).await.unwrap();
    assert_eq!(href, base.as_str(), "the token stays in the address bar");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancel_button_cancels_a_running_debate() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_secs(3)));
    let (_dir, serve, base) = serve_fake(&fake, &[]);
    let token = generated_token(&serve);
    let b = Browser::start().await.unwrap();
    start_from_the_form(
        &b,
        &format!("{base}/#token={token}"),
        "Design something slow",
    )
    .await;
    let cancel = b
        .wait_for("#cancel", Duration::from_secs(15))
        .await
        .unwrap();
    b.wait_until(
        "return document.querySelectorAll('#timeline .bar.running').length >= 3;",
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    b.click(&cancel).await.unwrap();
    b.wait_until(
        "const s = document.getElementById('status');
         return s && s.textContent === 'cancelled' && !document.getElementById('cancel');",
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    let id = b
        .execute(
            "return new URLSearchParams(location.search).get('d');",
            vec![],
        )
        .await
        .unwrap();
    let state: serde_json::Value = reqwest::Client::new()
        .get(format!("{base}/v1/debates/{}", id.as_str().unwrap()))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_debate_shows_why_and_its_retry_button_finishes_it() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.add_fault(parley_testkit::Fault::Status {
        status: 401,
        body: r#"{"error":{"message":"the judge's key was revoked"}}"#.into(),
        matching: parley_testkit::Match::Model("model-judge".into()),
        times: None,
    });
    let (_dir, serve, base) = serve_fake(&fake, &[]);
    let token = generated_token(&serve);
    let b = Browser::start().await.unwrap();
    start_from_the_form(
        &b,
        &format!("{base}/#token={token}"),
        "Design a feature flag service",
    )
    .await;
    let failure = b
        .wait_for("#failure", Duration::from_secs(30))
        .await
        .unwrap();
    let text = b.text(&failure).await.unwrap();
    assert!(
        text.contains("synthesis") && text.contains("revoked"),
        "{text}"
    );
    b.screenshot(&artifacts().join("serve-failed.png"))
        .await
        .unwrap();
    fake.clear_faults();
    b.click(&b.wait_for("#retry", Duration::from_secs(5)).await.unwrap())
        .await
        .unwrap();
    b.wait_for("#solution", Duration::from_secs(30))
        .await
        .unwrap();
    b.wait_until(
        "const s = document.getElementById('status');
         return s && s.textContent === 'completed' && !document.getElementById('failure') && !document.getElementById('retry');",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    parley_tests::assert_no_completed_call_repeated(&fake);
}

/// Replies built against backtracking Markdown renderers, `N` characters of the pattern
/// each: the finding's heading (`# a` + spaces + `x`, which never finished rendering
/// before), and the other shapes that took quadratic time in the old patterns (a table
/// separator or rule followed by spaces, unclosed `[`, `http://` runs, backtick runs,
/// unclosed emphasis).
const N: usize = 20_000;

fn pathological(model: &str) -> String {
    let heading = format!("# a{}x", " ".repeat(N));
    match model {
        "model-judge" => json!({
            "description": format!("{heading}\n\n| a | b |\n|--|--{}x\n\n{}x", " ".repeat(N), "- ".repeat(N)),
            "tradeoffs": ["none"],
            "recommendations": ["none"],
            "unfulfilledMajorRequirements": [],
            "openQuestions": [],
            "confidence": 70
        })
        .to_string(),
        "model-arch" => format!("{heading}\n\n{}](x\n\n{}", "[".repeat(N), "http://".repeat(N / 7)),
        "model-sec" => format!("intro\n\n{}\n\n{}", "``a`".repeat(N / 4), "*a **b _c ".repeat(N / 10)),
        _ => format!("{heading}\n\n{}x", "> ".repeat(N / 2)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pathological_markdown_from_a_model_renders_at_once() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|r| pathological(&r.model));
    let (_dir, serve, base) = serve_fake(&fake, &[]);
    let token = generated_token(&serve);
    let api = reqwest::Client::new();
    let id = api
        .post(format!("{base}/v1/debates"))
        .bearer_auth(&token)
        .json(&json!({"problem": "Render this"}))
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["debateId"]
        .as_str()
        .unwrap()
        .to_string();
    // The debate completes first (over the API), so what the page then does is render.
    let mut status = String::new();
    for _ in 0..600 {
        let state: serde_json::Value = api
            .get(format!("{base}/v1/debates/{id}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        status = state["status"].as_str().unwrap_or_default().to_string();
        if status == "completed" || status == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, "completed");

    let b = Browser::start().await.unwrap();
    b.goto(&format!("{base}/?d={id}#token={token}"))
        .await
        .unwrap();
    // Every contribution and the solution are rendered while a 10 s wait is under way (a
    // renderer that backtracks on these replies keeps the tab busy far longer: the wait's
    // script cannot even run).
    let page = b
        .wait_until(
            "const sol = document.getElementById('solution');
             const bodies = document.querySelectorAll('#rounds .contrib .md.body');
             if (!sol || bodies.length < 12) return null;
             const h = [...document.querySelectorAll('#view .md h3')].map(e => e.textContent);
             return {
               bodies: bodies.length,
               headings: h.length,
               headingOk: h.every(t => t.startsWith('a ') && t.endsWith('x')),
               solutionHeading: !!sol.querySelector('.md h3'),
               hr: document.querySelectorAll('#view .md hr').length,
               code: document.querySelectorAll('#view .md code').length,
             };",
            Duration::from_secs(10),
        )
        .await
        .expect("the pathological replies rendered within the 10 s wait");
    assert!(page["bodies"].as_u64().unwrap() >= 12, "{page}");
    assert!(page["headings"].as_u64().unwrap() >= 2, "{page}");
    assert_eq!(page["headingOk"], true, "{page}");
    assert_eq!(page["solutionHeading"], true, "{page}");
    // The page still answers (not frozen) after the render.
    let v = b.execute("return 1 + 1;", vec![]).await.unwrap();
    assert_eq!(v, 2);
    b.screenshot(&artifacts().join("serve-pathological.png"))
        .await
        .unwrap();
}

/// Clicks the first element matching `css` once it exists, scrolled to the middle of the
/// window first (the page's sticky top bar covers what is scrolled to the very top).
async fn click_css(b: &Browser, css: &str) {
    let e = b.wait_for(css, Duration::from_secs(10)).await.unwrap();
    b.execute(
        "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
        vec![json!(css)],
    )
    .await
    .unwrap();
    b.click(&e).await.unwrap();
}

/// The number of rows of the agent editor.
const AGENT_ROWS: &str = "return document.querySelectorAll('#agents .agent-row').length;";

/// The agent editor: rows are added up to the server's limit (`--max-agents`) and removed
/// down to one; a submission the server refuses shows its error, naming the fields, and
/// marks them; two agents of one role run side by side once fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_editor_adds_removes_and_shows_the_servers_validation_error() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|r| reply(&r.model, &r.prompt_text()));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["providers"] = json!({"openai-compatible": {"allowedModels":
        ["model-arch", "model-sec", "model-kiss", "model-judge"]}});
    parley_tests::write_json(dir.path().join("debate-config.json"), &cfg);
    let port = free_port();
    let serve = serve_with(dir.path(), port, &["--max-agents", "4"]);
    let token = generated_token(&serve);
    let b = Browser::start().await.unwrap();
    b.set_window(1440, 1000).await.unwrap();
    b.goto(&format!("http://127.0.0.1:{port}/#token={token}"))
        .await
        .unwrap();
    b.wait_for("#agents .agent-row", Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(b.execute(AGENT_ROWS, vec![]).await.unwrap(), 3);
    let add = b
        .wait_for("#add-agent", Duration::from_secs(5))
        .await
        .unwrap();
    b.click(&add).await.unwrap();
    assert_eq!(b.execute(AGENT_ROWS, vec![]).await.unwrap(), 4);
    let limits = b
        .execute(
            "return [document.getElementById('add-agent').disabled, document.getElementById('agent-count').textContent];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(limits, json!([true, "4 of at most 4"]));
    // Remove two, then the remove button of the last one left is disabled.
    for _ in 0..3 {
        let remove = b.find_all("#agents .remove-agent").await.unwrap();
        b.click(&remove[0]).await.unwrap();
    }
    assert_eq!(b.execute(AGENT_ROWS, vec![]).await.unwrap(), 1);
    assert_eq!(
        b.execute(
            "return document.querySelector('#agents .remove-agent').disabled;",
            vec![]
        )
        .await
        .unwrap(),
        true
    );
    b.click(&add).await.unwrap();
    b.click(&add).await.unwrap();
    assert_eq!(b.execute(AGENT_ROWS, vec![]).await.unwrap(), 3);
    // The rows: a model outside the allow-list (no provider named, free text) and a
    // temperature out of range; the server names both.
    b.execute(
        "const rows = document.querySelectorAll('#agents .agent-row');
         const set = (row, cls, v) => { const e = row.querySelector(cls); e.value = v; e.dispatchEvent(new Event('change')); };
         set(rows[0], '.agent-name', 'First security');
         set(rows[0], '.agent-role', 'security');
         set(rows[1], '.agent-name', 'Second security');
         set(rows[1], '.agent-role', 'security');
         set(rows[1], '.agent-provider', '');
         set(rows[1], '.agent-model', 'model-forbidden');
         set(rows[2], '.agent-name', 'Simple');
         set(rows[2], '.agent-role', 'kiss');
         set(rows[2], '.agent-temperature', '7');",
        vec![],
    )
    .await
    .unwrap();
    let problem = b
        .wait_for("#problem", Duration::from_secs(5))
        .await
        .unwrap();
    b.type_text(&problem, "Design a password reset flow")
        .await
        .unwrap();
    b.click(&b.wait_for("#start", Duration::from_secs(5)).await.unwrap())
        .await
        .unwrap();
    let shown = b
        .wait_until(
            "const e = document.getElementById('form-error');
             if (!e || e.hidden) return null;
             return { text: e.textContent,
               marked: [...document.querySelectorAll('#agents .invalid')].map((x) => `${x.closest('.agent-row').dataset.index}:${x.className}`) };",
            Duration::from_secs(15),
        )
        .await
        .unwrap();
    let text = shown["text"].as_str().unwrap();
    assert!(
        text.contains("agents[1].model")
            && text.contains("model-forbidden")
            && text.contains("agents[2].temperature"),
        "{shown}"
    );
    let marked: Vec<&str> = shown["marked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        marked
            .iter()
            .any(|m| m.starts_with("1:") && m.contains("agent-model"))
            && marked
                .iter()
                .any(|m| m.starts_with("2:") && m.contains("agent-temperature")),
        "{marked:?}"
    );
    b.screenshot(&artifacts().join("serve-agent-editor-error.png"))
        .await
        .unwrap();
    assert!(
        std::fs::read_dir(dir.path().join("debates")).map_or(true, |d| d.count() == 0),
        "a refused submission starts nothing"
    );

    // Fixed: the second one takes an allowed model of the provider, the third a sane
    // temperature; both security engineers debate.
    b.execute(
        "const rows = document.querySelectorAll('#agents .agent-row');
         const set = (row, cls, v) => { const e = row.querySelector(cls); e.value = v; e.dispatchEvent(new Event('change')); };
         set(rows[1], '.agent-provider', 'openai-compatible');
         set(rows[1], '.agent-model', 'model-kiss');
         set(rows[2], '.agent-temperature', '0.7');",
        vec![],
    )
    .await
    .unwrap();
    b.click(&b.wait_for("#start", Duration::from_secs(5)).await.unwrap())
        .await
        .unwrap();
    b.wait_for("#solution", Duration::from_secs(60))
        .await
        .unwrap();
    let columns = b
        .wait_until(
            "const cols = [...document.querySelectorAll('#rounds .agent-col[data-round=\"1\"]')].map((c) => c.dataset.agent);
             return cols.length === 3 ? cols : null;",
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(
        columns,
        json!(["agent-security", "agent-security-2", "agent-kiss"])
    );
    let debates: Vec<_> = std::fs::read_dir(dir.path().join("debates"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".record.json"))
        .collect();
    assert_eq!(debates.len(), 1);
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(debates[0].path()).unwrap()).unwrap();
    let agents = &file["spec"]["agents"];
    assert_eq!(agents[0]["name"], "First security");
    assert_eq!(agents[1]["model"], "model-kiss");
    assert_eq!(agents[1]["provider"], "openai-compatible");
    assert_eq!(agents[2]["temperature"], 0.7);
}

/// A completed debate takes thumbs up/down: the choice is stored in the state file and
/// shown again after a reload. The copy buttons hand the contribution's and the solution's
/// text to the Clipboard API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_survives_a_reload_and_copy_buttons_copy_the_text() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|r| reply(&r.model, &r.prompt_text()));
    let (dir, serve, base) = serve_fake(&fake, &[]);
    let token = generated_token(&serve);
    let b = Browser::start().await.unwrap();
    b.set_window(1440, 1000).await.unwrap();
    start_from_the_form(
        &b,
        &format!("{base}/#token={token}"),
        "Design a URL shortener",
    )
    .await;
    b.wait_for("#solution #feedback-up", Duration::from_secs(60))
        .await
        .unwrap();
    let id = b
        .execute(
            "return new URLSearchParams(location.search).get('d');",
            vec![],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();

    // Copy: the Clipboard API is recorded (and still called), so the text is checked
    // whatever the headless browser's clipboard permissions.
    b.execute(
        "window.__copied = [];
         const real = navigator.clipboard.writeText.bind(navigator.clipboard);
         navigator.clipboard.writeText = (t) => { window.__copied.push(t); return real(t).catch(() => {}); };",
        vec![],
    )
    .await
    .unwrap();
    click_css(
        &b,
        "#rounds .agent-col[data-agent=\"agent-architect\"][data-round=\"1\"] .contrib.proposal .copy",
    )
    .await;
    click_css(&b, "#copy-solution").await;
    let copied = b
        .wait_until(
            "return window.__copied.length === 2 ? window.__copied : null;",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let state: serde_json::Value = reqwest::Client::new()
        .get(format!("{base}/v1/debates/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let proposal = state["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "proposal" && c["agentId"] == "agent-architect")
        .unwrap()["content"]
        .clone();
    assert_eq!(
        copied[0], proposal,
        "the proposal's text as the model wrote it"
    );
    let solution = copied[1].as_str().unwrap();
    assert!(
        solution.starts_with(state["finalSolution"]["description"].as_str().unwrap())
            && solution.contains("- Shadow-mode the limits for a week"),
        "{solution}"
    );
    b.wait_until(
        "return document.getElementById('copy-solution').textContent === 'Copied';",
        Duration::from_secs(5),
    )
    .await
    .unwrap();

    // Feedback: thumbs up, stored, shown after a reload; then changed to thumbs down.
    let pressed = "const u = document.getElementById('feedback-up'), d = document.getElementById('feedback-down');
                   return u && d ? [u.getAttribute('aria-pressed'), d.getAttribute('aria-pressed')] : null;";
    assert_eq!(
        b.execute(pressed, vec![]).await.unwrap(),
        json!(["false", "false"])
    );
    click_css(&b, "#feedback-up").await;
    b.wait_until(
        "return document.getElementById('feedback-up').getAttribute('aria-pressed') === 'true';",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let file = || -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(dir.path().join("debates").join(format!("{id}.json"))).unwrap(),
        )
        .unwrap()
    };
    assert_eq!(file()["userFeedback"], 1);
    b.goto(&format!("{base}/?d={id}")).await.unwrap();
    b.wait_for("#solution #feedback-up", Duration::from_secs(15))
        .await
        .unwrap();
    let after = b
        .wait_until(
            "const u = document.getElementById('feedback-up'), d = document.getElementById('feedback-down');
             return u && d ? [u.getAttribute('aria-pressed'), d.getAttribute('aria-pressed')] : null;",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(after, json!(["true", "false"]), "shown after the reload");
    click_css(&b, "#feedback-down").await;
    b.wait_until(
        "return document.getElementById('feedback-down').getAttribute('aria-pressed') === 'true'
            && document.getElementById('feedback-up').getAttribute('aria-pressed') === 'false';",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(file()["userFeedback"], -1);
    b.screenshot(&artifacts().join("serve-feedback.png"))
        .await
        .unwrap();
}

/// Warnings, dropped critiques and a failure are shown where they happened: the critiques
/// of the architect's proposal fail (so both are dropped and listed in the architect's
/// critiques, round by round), an agent of a role with no built-in prompts makes a debate
/// warning, and a judge that fails marks the round it failed in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_dropped_critiques_and_failures_show_where_they_happened() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|r| reply(&r.model, &r.prompt_text()));
    fake.add_fault(parley_testkit::Fault::Status {
        status: 400,
        body: r#"{"error":{"message":"the critic's request was refused"}}"#.into(),
        matching: parley_testkit::Match::PromptContains(
            "Here is the proposal of agent-architect".into(),
        ),
        times: None,
    });
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["agents"][2]["role"] = json!("skeptic");
    cfg["debate"]["retry"] = json!({"default": {"attempts": 1}});
    let (_dir, _serve, b) = debate_to_its_solution(&cfg, "Design an audit log").await;
    let notes = b
        .wait_until(
            "const at = (round, agent, box) => [...document.querySelectorAll(
                 `#rounds ul.notes[data-round=\"${round}\"][data-agent=\"${agent}\"][data-box=\"${box}\"] li`)].map((li) => [li.dataset.kind, li.textContent]);
             const r1 = at(1, 'agent-architect', 'critiques');
             const debate = [...document.querySelectorAll('#warnings li')].map((li) => li.textContent);
             if (r1.length < 2 || !debate.length) return null;
             return { r1, r2: at(2, 'agent-architect', 'critiques'), debate,
                      others: document.querySelectorAll('#rounds ul.notes[data-agent=\"agent-security\"] li.dropped').length };",
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    let r1 = notes["r1"].as_array().unwrap();
    assert_eq!(r1.len(), 2, "{notes}");
    for n in r1 {
        assert_eq!(n[0], "dropped", "{notes}");
        assert!(
            n[1].as_str().unwrap().contains("refused"),
            "the provider's error is shown: {notes}"
        );
    }
    assert_eq!(notes["r2"].as_array().unwrap().len(), 2, "{notes}");
    assert_eq!(
        notes["others"], 0,
        "only the architect's critiques were dropped: {notes}"
    );
    let debate = notes["debate"].to_string();
    assert!(debate.contains("skeptic"), "{debate}");
    assert!(
        !debate.contains("dropped"),
        "dropped critiques are not repeated as debate warnings: {debate}"
    );
    b.execute(
        "document.querySelector('#rounds ul.notes li.dropped').scrollIntoView({block: 'center'});",
        vec![],
    )
    .await
    .unwrap();
    b.screenshot(&artifacts().join("serve-warnings.png"))
        .await
        .unwrap();

    // A failure: the judge's key is refused at the synthesis; the round shows it.
    fake.clear_faults();
    fake.add_fault(parley_testkit::Fault::Status {
        status: 401,
        body: r#"{"error":{"message":"the judge's key was revoked"}}"#.into(),
        matching: parley_testkit::Match::Model("model-judge".into()),
        times: None,
    });
    b.click(
        &b.wait_for("#new-debate", Duration::from_secs(5))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let field = b
        .wait_for("#problem", Duration::from_secs(10))
        .await
        .unwrap();
    b.type_text(&field, "Design a billing export")
        .await
        .unwrap();
    b.click(&b.wait_for("#start", Duration::from_secs(5)).await.unwrap())
        .await
        .unwrap();
    b.wait_for("#failure", Duration::from_secs(60))
        .await
        .unwrap();
    let failure = b
        .wait_until(
            "const li = document.querySelector('#rounds ul.notes li.failure');
             return li ? [li.closest('ul').dataset.round, li.closest('ul').dataset.box || '', li.textContent] : null;",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(
        failure[2].as_str().unwrap().contains("revoked"),
        "{failure}"
    );
    assert_eq!(
        failure[1], "round",
        "a judge failure belongs to its round: {failure}"
    );
}

/// A similarity debate with a ring of critics: each round's header says how similar the
/// refinements were to the round before and whether the debate stopped there, and each
/// agent shows the one critique the ring gave it (not "1/2").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_headers_show_similarity_and_a_ring_shows_its_critiques() {
    need_browser();
    let fake = FakeLlm::start().await.unwrap();
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["debate"]["rounds"] = json!(3);
    cfg["debate"]["critique"] = json!({"topology": "ring"});
    cfg["debate"]["terminationCondition"] = json!({"type": "similarity", "threshold": 0.5});
    cfg["debate"]["embeddings"] = json!({"provider": "openai-compatible", "model": "embed-small"});
    let (_dir, _serve, b) =
        debate_to_its_solution(&cfg, "Design a cache in front of a slow inventory service").await;
    let seen = b
        .wait_until(
            "const lines = [...document.querySelectorAll('#rounds .round-title .similarity')].map((s) => s.textContent);
             const kinds = [...document.querySelectorAll('#rounds .contrib.critiques .kind')].map((k) => k.textContent);
             return lines.length ? { lines, kinds } : null;",
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    let lines: Vec<String> = seen["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    // Newest round first; the fake's replies repeat, so round 2 converges at 0.5.
    assert_eq!(lines.len(), 2, "{seen}");
    assert!(
        lines[0].contains("threshold 0.50): converged, stopped"),
        "{seen}"
    );
    assert!(
        lines[1].starts_with("similarity to the previous round: least –")
            && lines[1].ends_with("go on"),
        "{seen}"
    );
    for kind in seen["kinds"].as_array().unwrap() {
        assert!(
            kind.as_str().unwrap().starts_with("Critiques received · 1"),
            "{seen}"
        );
    }
    b.screenshot(&artifacts().join("serve-similarity.png"))
        .await
        .unwrap();
}
