//! The long nemesis soak: the suite's soak (`tests/tests/soak.rs`) at any size.
//!
//! ```sh
//! cargo build --workspace --bins
//! cargo bench -p parley-tests --bench soak --profile dev -- --seed 7 --minutes 30 --rate 10 --faults-per-minute 15
//! ```
//!
//! (`--profile dev`: the soak starts the dev build's binaries, next to its own.) Prints the
//! history as it happens, then the figures; exits 1 when an invariant broke
//! (the violations, with the seed and the history around each, are printed first).

use std::time::Duration;

use parley_tests::soak::{self, Config};

fn main() {
    let mut config = Config {
        seed: 1,
        duration: Duration::from_secs(30 * 60),
        rate: 12.0,
        faults: 0,
        bound: Duration::from_secs(300),
        echo: true,
    };
    let mut per_minute = 15.0;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        let number = || -> f64 {
            value.parse().unwrap_or_else(|_| {
                eprintln!("{} takes a number, not {value:?}", args[i]);
                std::process::exit(2)
            })
        };
        match args[i].as_str() {
            "--seed" => config.seed = number() as u64,
            "--minutes" => config.duration = Duration::from_secs_f64(number() * 60.0),
            "--rate" => config.rate = number(),
            "--faults-per-minute" => per_minute = number(),
            "--bound-secs" => config.bound = Duration::from_secs_f64(number()),
            "--quiet" => {
                config.echo = false;
                i += 1;
                continue;
            }
            // `cargo bench` passes `--bench`.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    config.faults = ((config.duration.as_secs_f64() / 60.0) * per_minute).ceil() as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let report = match runtime.block_on(soak::run(config)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("the soak did not start: {e:#}");
            std::process::exit(1);
        }
    };
    print!("{}", report.violations_text());
    for loss in &report.deadline_losses {
        println!("task attempt lost, dispatched again at its deadline: {loss}");
    }
    println!("{}", report.figures());
    if !report.violations.is_empty() {
        std::process::exit(1);
    }
}
