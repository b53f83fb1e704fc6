//! The inference engine: one thread per loaded model that owns llama.cpp's context and
//! serves every generation of the process, batched.
//!
//! # Runtime semantics
//!
//! - Callers send a [`Job`] over a channel and block on its reply channel. Up to
//!   [`SLOTS`] jobs run at once, each in its own sequence of one shared KV cache (with
//!   [`SLOT_CONTEXT`] tokens per sequence); later jobs wait in arrival order.
//! - Each step builds one batch: the next token of every generating job, then prompt
//!   tokens of jobs still prefilling (up to [`BATCH`] tokens in all), and runs one forward
//!   pass over it. So concurrent generations share each pass over the weights (a step with
//!   three tokens costs little more than one with one token), and a long prompt is
//!   processed [`BATCH`] tokens per pass.
//! - A finished job's sequence keeps its KV cache: a later job whose prompt begins with the
//!   same tokens (the same agent's system prompt and problem statement, in a debate) is
//!   given that slot, and only the rest of its prompt is processed. A slot is chosen by the
//!   longest shared prefix, then least recently used.
//! - The forward pass uses one thread per core that other processes leave free
//!   ([`default_threads`]): with all concurrent generations batched into one pass, there is
//!   one compute pool per process and it never competes with itself.
//! - Sampling (and the JSON constraint) runs on the engine thread between passes, per job,
//!   with the job's own seed.
//! - A job whose deadline passes is answered with [`LocalError::DeadlineExceeded`] at the next
//!   step and its sequence is freed. When the model is dropped the channel closes and the
//!   thread ends once the running jobs are answered.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::constrain::{JsonMatcher, MatchScratch};
use crate::sample::Sampler;
use crate::LocalError;

/// Generations that run at once (sequences in the KV cache). Measured on 2 cores with a
/// 3-agent, 2-round debate: 4 slots finished in 2:20-2:50 (four runs), 6 slots in 2:48
/// with 190 MB more memory (more streams share each pass, so every one of them is
/// slower): no gain for the memory.
pub const SLOTS: usize = 4;
/// Tokens of context per generation (prompt + completion).
pub const SLOT_CONTEXT: usize = 4096;
/// Most tokens in one forward pass.
pub const BATCH: usize = 512;
/// A cached prefix shorter than this is not worth keeping a slot for (every ChatML prompt
/// begins with the same few tokens): such a job takes the least recently used free slot.
pub const MIN_REUSE: usize = 32;
/// How many recent tokens the repeat penalty looks at.
pub const REPEAT_WINDOW: usize = 64;

/// Threads for the forward pass: one per core that other processes leave free, at least
/// one.
///
/// The threads of one forward pass meet at a barrier after every operation (hundreds per
/// token); when another process keeps a core busy, each barrier waits for the thread the
/// scheduler set aside there, and a pass on more threads than free cores becomes many
/// times slower than one on the free cores (seen here: 2 threads at ~14 tokens/s against
/// ~50 for 1 thread on a 2-core machine kept busy by a build). So the engine counts the
/// runnable tasks of the machine when the model loads (Linux `/proc/stat`
/// `procs_running`, sampled for ~100 ms and averaged, not counting the sampling thread
/// itself) and leaves that many cores to them. The 1-minute load average is not used: it
/// lags by a minute, and right after a build it made an idle machine look busy.
/// Concurrent generations never add threads: they share the passes (see the module docs).
pub fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(busy) = runnable_elsewhere() else {
        return cores;
    };
    let threads = free_cores(cores, busy);
    if threads < cores {
        tracing::info!(
            cores,
            busy,
            threads,
            "local model: other processes keep cores busy; using fewer threads"
        );
    }
    threads
}

/// Cores left when `busy` other tasks are runnable on average (rounded to the nearest).
fn free_cores(cores: usize, busy: f64) -> usize {
    let busy = busy.max(0.0).round() as usize;
    cores.saturating_sub(busy).max(1)
}

/// Average number of runnable tasks other than the caller over ~100 ms, where the
/// system reports it.
fn runnable_elsewhere() -> Option<f64> {
    const SAMPLES: u32 = 10;
    let mut total = 0.0;
    for i in 0..SAMPLES {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let running = procs_running(&std::fs::read_to_string("/proc/stat").ok()?)?;
        // The sampling thread itself is running while it reads.
        total += f64::from(running.saturating_sub(1));
    }
    Some(total / f64::from(SAMPLES))
}

/// The `procs_running` count of a `/proc/stat` text; `None` when it is missing or not a
/// count.
fn procs_running(stat: &str) -> Option<u32> {
    stat.lines()
        .find_map(|l| l.strip_prefix("procs_running "))?
        .trim()
        .parse()
        .ok()
}

/// Per token id: its bytes and whether it ends a generation.
#[derive(Debug)]
pub(crate) struct TokenTable {
    pub bytes: Vec<Vec<u8>>,
    pub stop: Vec<bool>,
}

/// One generation request to the engine.
pub(crate) struct Job {
    pub prompt: Vec<u32>,
    /// > 0.
    pub max_new: usize,
    pub sampler: Sampler,
    pub matcher: Option<JsonMatcher>,
    pub deadline: Option<Instant>,
    pub reply: mpsc::SyncSender<Result<Output, LocalError>>,
}

/// What the engine sends back.
#[derive(Debug)]
pub(crate) struct Output {
    pub tokens: Vec<u32>,
    /// Text appended after the tokens: the shortest close of a constrained JSON text whose
    /// token budget ran out.
    pub suffix: Vec<u8>,
    /// Time from the job's admission to its first sampled token.
    pub prefill: Duration,
    /// Time from the first sampled token to the end.
    pub decode: Duration,
    /// Prompt tokens whose KV cache an earlier job had left (not processed again).
    pub cached: usize,
}

/// Handle to the engine thread.
#[derive(Debug)]
pub(crate) struct Engine {
    jobs: mpsc::Sender<Job>,
}

/// llama.cpp's backend, initialised once per process (also for benchmarks that drive
/// llama.cpp directly).
pub fn backend() -> Result<&'static LlamaBackend, LocalError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp's own log lines (model metadata, buffer sizes) stay out of the output.
            llama_cpp_2::send_logs_to_tracing(
                llama_cpp_2::LogOptions::default().with_logs_enabled(false),
            );
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LocalError::Gguf(format!("cannot start llama.cpp: {e}")))
}

impl Engine {
    /// Loads the model from `path` on a new thread and waits until it is ready.
    pub fn start(path: &Path, threads: usize, table: Arc<TokenTable>) -> Result<Self, LocalError> {
        let backend = backend()?;
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), LocalError>>(1);
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("parley-local-engine".into())
            .spawn(move || {
                let model = match load(backend, &path, &table) {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let params = LlamaContextParams::default()
                    .with_n_ctx(NonZeroU32::new((SLOTS * SLOT_CONTEXT) as u32))
                    .with_n_batch(BATCH as u32)
                    .with_n_ubatch(BATCH as u32)
                    .with_n_seq_max(SLOTS as u32)
                    .with_n_threads(threads as i32)
                    .with_n_threads_batch(threads as i32)
                    // Sliding-window layers (Gemma 3) keep every cell, not only the last
                    // window: the prefix cache cuts a sequence back to any length and
                    // continues from there, which needs the cells before the cut.
                    .with_swa_full(true);
                let ctx = match model.new_context(backend, params) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(LocalError::Gguf(format!(
                            "cannot create the llama.cpp context: {e}"
                        ))));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                Scheduler::new(ctx, table).run(rx);
            })
            .map_err(|e| LocalError::Inference(format!("cannot start the engine thread: {e}")))?;
        ready_rx.recv().map_err(|_| {
            LocalError::Inference("the engine thread stopped while loading".into())
        })??;
        Ok(Self { jobs })
    }

    /// Runs `job` and waits for its result.
    pub fn run(
        &self,
        job: Job,
        reply: mpsc::Receiver<Result<Output, LocalError>>,
    ) -> Result<Output, LocalError> {
        self.jobs
            .send(job)
            .map_err(|_| LocalError::Inference("the local model engine has stopped".into()))?;
        reply
            .recv()
            .map_err(|_| LocalError::Inference("the local model engine has stopped".into()))?
    }
}

fn load(backend: &LlamaBackend, path: &Path, table: &TokenTable) -> Result<LlamaModel, LocalError> {
    let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
        .map_err(|e| LocalError::Gguf(format!("llama.cpp cannot load {}: {e}", path.display())))?;
    let n_vocab = usize::try_from(model.n_vocab()).unwrap_or(0);
    if n_vocab != table.bytes.len() {
        return Err(LocalError::Gguf(format!(
            "the model has {n_vocab} tokens but its tokenizer {}",
            table.bytes.len()
        )));
    }
    Ok(model)
}

/// One sequence of the KV cache.
#[derive(Default)]
struct Slot {
    active: Option<Active>,
    /// The tokens whose keys and values the sequence holds, position by position.
    cached: Vec<u32>,
    /// Step at which the slot was last given a job (least recently used goes first).
    used_at: u64,
}

/// One running job.
struct Active {
    job: Job,
    /// Prompt tokens fed so far (or found in the cache).
    fed: usize,
    /// Prompt tokens found in the cache.
    cached: usize,
    generated: Vec<u32>,
    /// The last sampled token, to feed in the next step.
    pending: Option<u32>,
    admitted: Instant,
    first_token: Option<Instant>,
    scratch: MatchScratch,
}

struct Scheduler<'m> {
    ctx: LlamaContext<'m>,
    table: Arc<TokenTable>,
    slots: Vec<Slot>,
    queue: VecDeque<Job>,
    batch: LlamaBatch<'static>,
    /// Admissions so far (the clock of `Slot::used_at`).
    admissions: u64,
}

impl<'m> Scheduler<'m> {
    fn new(ctx: LlamaContext<'m>, table: Arc<TokenTable>) -> Self {
        Self {
            ctx,
            table,
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            queue: VecDeque::new(),
            batch: LlamaBatch::new(BATCH, 1),
            admissions: 0,
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Job>) {
        let mut open = true;
        loop {
            let idle = self.slots.iter().all(|s| s.active.is_none()) && self.queue.is_empty();
            if idle {
                if !open {
                    return;
                }
                match rx.recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            self.admit();
            self.expire();
            self.step();
        }
    }

    /// Gives waiting jobs free slots, in arrival order: each the free slot whose cache
    /// shares the longest prefix with its prompt (then the least recently used), whose
    /// cache is cut back to that prefix.
    fn admit(&mut self) {
        while !self.queue.is_empty() {
            let Some((i, shared)) = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.active.is_none())
                .map(|(i, s)| (i, shared_prefix(&s.cached, &self.queue[0].prompt)))
                .max_by_key(|&(i, shared)| {
                    let worth = if shared >= MIN_REUSE { shared } else { 0 };
                    (worth, std::cmp::Reverse(self.slots[i].used_at))
                })
            else {
                break;
            };
            let Some(job) = self.queue.pop_front() else {
                break;
            };
            // The last prompt token is always fed: its logits give the first new token.
            let mut keep = shared.min(job.prompt.len().saturating_sub(1));
            let seq = i as u32;
            // Everything from `keep` on goes (also any cells a failed pass left).
            if !matches!(
                self.ctx
                    .clear_kv_cache_seq(Some(seq), Some(keep as u32), None),
                Ok(true)
            ) {
                // A partial removal refused: start the sequence afresh.
                keep = 0;
                let _ = self.ctx.clear_kv_cache_seq(Some(seq), None, None);
            }
            tracing::debug!(
                slot = i,
                shared,
                kept = keep,
                prompt = job.prompt.len(),
                slots = ?self.slots.iter().map(|s| (s.active.is_some(), s.cached.len())).collect::<Vec<_>>(),
                "local engine: admitted"
            );
            self.admissions += 1;
            let slot = &mut self.slots[i];
            slot.cached.truncate(keep);
            slot.used_at = self.admissions;
            slot.active = Some(Active {
                job,
                fed: keep,
                cached: keep,
                generated: Vec::new(),
                pending: None,
                admitted: Instant::now(),
                first_token: None,
                scratch: MatchScratch::default(),
            });
        }
    }

    /// Answers jobs whose deadline passed (running or waiting).
    fn expire(&mut self) {
        let now = Instant::now();
        let late = |job: &Job| job.deadline.is_some_and(|d| now >= d);
        for i in 0..self.slots.len() {
            if self.slots[i].active.as_ref().is_some_and(|a| late(&a.job)) {
                self.finish(i, Err(LocalError::DeadlineExceeded));
            }
        }
        self.queue.retain(|job| {
            if late(job) {
                let _ = job.reply.send(Err(LocalError::DeadlineExceeded));
                false
            } else {
                true
            }
        });
    }

    /// Frees slot `i`, answering its job with `result` (the tokens and timings are filled
    /// in here for a success). The sequence keeps its cache after a success; after a
    /// failure it is emptied (its cells may not match `cached`).
    fn finish(&mut self, i: usize, result: Result<Vec<u8>, LocalError>) {
        let Some(a) = self.slots[i].active.take() else {
            return;
        };
        if result.is_err() {
            self.slots[i].cached.clear();
            // Removing a whole sequence cannot fail for a valid id.
            let _ = self.ctx.clear_kv_cache_seq(Some(i as u32), None, None);
        }
        let now = Instant::now();
        let first = a.first_token.unwrap_or(now);
        let out = result.map(|suffix| Output {
            tokens: a.generated,
            suffix,
            prefill: first - a.admitted,
            decode: now - first,
            cached: a.cached,
        });
        let _ = a.job.reply.send(out);
    }

    fn step(&mut self) {
        self.batch.clear();
        // (slot, batch index) of every token whose logits are sampled after this pass.
        let mut sample_at: Vec<(usize, i32)> = Vec::new();
        let mut n: usize = 0;
        let mut failed: Vec<(usize, String)> = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(a) = &slot.active else { continue };
            if let Some(tok) = a.pending {
                let pos = slot.cached.len();
                match self
                    .batch
                    .add(LlamaToken(tok as i32), pos as i32, &[i as i32], true)
                {
                    Ok(()) => {
                        sample_at.push((i, n as i32));
                        slot.cached.push(tok);
                        n += 1;
                    }
                    Err(e) => failed.push((i, e.to_string())),
                }
            }
        }
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(a) = &mut slot.active else { continue };
            if a.fed >= a.job.prompt.len() || n >= BATCH {
                continue;
            }
            let take = (a.job.prompt.len() - a.fed).min(BATCH - n);
            for p in a.fed..a.fed + take {
                let last = p + 1 == a.job.prompt.len();
                let tok = a.job.prompt[p];
                if let Err(e) = self
                    .batch
                    .add(LlamaToken(tok as i32), p as i32, &[i as i32], last)
                {
                    failed.push((i, e.to_string()));
                    break;
                }
                slot.cached.push(tok);
                if last {
                    sample_at.push((i, n as i32));
                }
                n += 1;
            }
            a.fed += take;
        }
        for (i, e) in failed {
            self.finish(i, Err(LocalError::Inference(format!("batch: {e}"))));
        }
        if n == 0 {
            return;
        }
        if let Err(e) = self.ctx.decode(&mut self.batch) {
            // The pass failed for every job in it: answer them all, free their sequences.
            let in_batch: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].active.is_some())
                .collect();
            for i in in_batch {
                self.finish(i, Err(LocalError::Inference(format!("forward pass: {e}"))));
            }
            return;
        }
        for (i, at) in sample_at {
            if let Some(done) = self.sample(i, at) {
                self.finish(i, Ok(done));
            }
        }
    }

    /// Samples the next token of slot `i` from the logits at batch index `at`; returns the
    /// suffix to append when the job is done.
    fn sample(&mut self, i: usize, at: i32) -> Option<Vec<u8>> {
        let table = &self.table;
        let a = self.slots[i].active.as_mut()?;
        let logits = self.ctx.get_logits_ith(at);
        if a.first_token.is_none() {
            a.first_token = Some(Instant::now());
        }
        let recent = &a.generated[a.generated.len().saturating_sub(REPEAT_WINDOW)..];
        let next = match &a.job.matcher {
            None => a.job.sampler.sample(logits, recent, |_| true),
            Some(m) => {
                let complete = m.is_complete();
                let scratch = &mut a.scratch;
                a.job.sampler.sample(logits, recent, |id| {
                    let id = id as usize;
                    if table.stop.get(id).copied().unwrap_or(true) {
                        return complete;
                    }
                    let bytes = &table.bytes[id];
                    !bytes.is_empty() && m.accepts(bytes, scratch)
                })
            }
        };
        let close =
            |m: &Option<JsonMatcher>| m.as_ref().map(JsonMatcher::completion).unwrap_or_default();
        let Some(tok) = next else {
            // Nothing may follow (cannot happen with a well-formed schema): close the JSON.
            return Some(close(&a.job.matcher));
        };
        if table.stop.get(tok as usize).copied().unwrap_or(true) {
            return Some(Vec::new());
        }
        a.generated.push(tok);
        if let Some(m) = a.job.matcher.as_mut() {
            if !m.advance(&table.bytes[tok as usize]) {
                a.generated.pop();
                return Some(m.completion());
            }
            if m.is_finished() {
                return Some(Vec::new());
            }
        }
        let prompt = a.job.prompt.len();
        if a.generated.len() >= a.job.max_new || prompt + a.generated.len() >= SLOT_CONTEXT {
            return Some(close(&a.job.matcher));
        }
        a.pending = Some(tok);
        None
    }
}

/// How many leading tokens `a` and `b` share.
fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_cores_are_left_to_their_processes() {
        assert_eq!(free_cores(2, 0.0), 2);
        assert_eq!(free_cores(2, 0.4), 2);
        assert_eq!(free_cores(2, 0.6), 1);
        assert_eq!(free_cores(2, 3.7), 1);
        assert_eq!(free_cores(8, 2.2), 6);
        assert_eq!(free_cores(1, 0.0), 1);
    }

    #[test]
    fn procs_running_is_read_or_refused() {
        assert_eq!(
            procs_running("cpu 1 2 3\nprocs_running 3\nprocs_blocked 0\n"),
            Some(3)
        );
        for bad in [
            "",
            "procs_running\n",
            "procs_running -1\n",
            "procs_running NaN\n",
            "procs_running 99999999999999999999\n",
            "procs_running 2\u{0}\n",
        ] {
            assert_eq!(procs_running(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn shared_prefix_counts_leading_equal_tokens() {
        assert_eq!(shared_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(shared_prefix(&[], &[1]), 0);
        assert_eq!(shared_prefix(&[1, 2], &[1, 2]), 2);
    }
}
