//! Generation throughput of the local model, release build:
//! `cargo bench -p parley-local`.
//!
//! Reports single-stream throughput (greedy, 128 tokens, median of several runs), prompt
//! processing throughput, and the aggregate throughput of 3 concurrent requests on separate
//! threads. Needs the model at `default_model_path()` (run `scripts/fetch-model.sh`).
//!
//! By default each generation computes on its own thread (see
//! `parley_local::configure_cpu_threads`); to measure candle's shared thread pool instead,
//! run `CANDLE_NUM_THREADS=2 RAYON_NUM_THREADS=1 cargo bench -p parley-local`.

use std::sync::Arc;
use std::time::Instant;

use parley_local::{default_model_path, ChatMessage, GenerateRequest, LocalModel, FETCH_COMMAND};

const MAX_TOKENS: usize = 128;
const SINGLE_RUNS: usize = 5;
const CONCURRENT: usize = 3;
const CONCURRENT_RUNS: usize = 3;

fn request(seed: u64) -> GenerateRequest {
    GenerateRequest {
        messages: vec![
            ChatMessage::system("You are a software architect. Answer in detail."),
            ChatMessage::user(
                "Describe, step by step, how to design a reliable job queue for a web \
                 service, covering retries, idempotency, monitoring and scaling.",
            ),
        ],
        max_tokens: MAX_TOKENS,
        temperature: 0.0,
        top_p: 1.0,
        seed,
        ..Default::default()
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let path = default_model_path();
    let started = Instant::now();
    let model = match LocalModel::load(&path) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("cannot run the benchmark: {e}\n(run {FETCH_COMMAND} first)");
            std::process::exit(1);
        }
    };
    let env = |var| std::env::var(var).unwrap_or_else(|_| "unset".into());
    println!(
        "model {} loaded in {:.2}s (context {} tokens, {} cores, CANDLE_NUM_THREADS={}, RAYON_NUM_THREADS={})",
        model.model_name(),
        started.elapsed().as_secs_f64(),
        model.context_length(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        env("CANDLE_NUM_THREADS"),
        env("RAYON_NUM_THREADS"),
    );

    // Warm-up (thread pool start, first allocations).
    let warm = model.generate(&request(0)).expect("warm-up generation");
    println!(
        "prompt {} tokens; sample: {:?}",
        warm.prompt_tokens,
        warm.text.chars().take(120).collect::<String>()
    );

    let mut rates = Vec::new();
    let mut end_to_end = Vec::new();
    for _ in 0..SINGLE_RUNS {
        let t = Instant::now();
        let g = model.generate(&request(0)).expect("generation");
        let secs = t.elapsed().as_secs_f64();
        rates.push(g.completion_tokens as f64 / secs);
        end_to_end.push(secs);
    }
    println!(
        "single stream: {:.1} tokens/s median over {SINGLE_RUNS} runs ({} tokens in {:.2}s incl. prefill of {} tokens; runs: {})",
        median(rates.clone()),
        warm.completion_tokens,
        median(end_to_end),
        warm.prompt_tokens,
        rates.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(", "),
    );

    // Prompt processing: one long prompt, one generated token.
    let long: String = (0..150)
        .map(|i| format!("Point {i}: the queue must retry failed jobs with backoff. "))
        .collect();
    let mut prefill = Vec::new();
    let mut prefill_tokens = 0;
    for _ in 0..3 {
        let req = GenerateRequest {
            messages: vec![ChatMessage::user(long.clone())],
            max_tokens: 1,
            ..request(0)
        };
        let t = Instant::now();
        let g = model.generate(&req).expect("generation");
        prefill_tokens = g.prompt_tokens;
        prefill.push(g.prompt_tokens as f64 / t.elapsed().as_secs_f64());
    }
    println!(
        "prompt processing: {:.1} tokens/s median over 3 runs ({prefill_tokens}-token prompt)",
        median(prefill)
    );

    let mut aggregate = Vec::new();
    for run in 0..CONCURRENT_RUNS {
        let t = Instant::now();
        let handles: Vec<_> = (0..CONCURRENT)
            .map(|i| {
                let model = Arc::clone(&model);
                std::thread::spawn(move || {
                    let mut req = request(i as u64);
                    // Different prompts, as in a real debate.
                    req.messages[1]
                        .content
                        .push_str(&format!(" (variant {run}-{i})"));
                    model.generate(&req).expect("generation").completion_tokens
                })
            })
            .collect();
        let tokens: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
        aggregate.push(tokens as f64 / t.elapsed().as_secs_f64());
    }
    println!(
        "{CONCURRENT} concurrent streams: {:.1} tokens/s aggregate, median over {CONCURRENT_RUNS} runs (runs: {})",
        median(aggregate.clone()),
        aggregate.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(", "),
    );
}
