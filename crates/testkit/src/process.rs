//! Spawning our own binaries in tests: [`ChildProcess`], [`workspace_bin`], the `parley`
//! CLI in a clean environment ([`parley_command`], [`run_parley`]), plus the small helpers every process
//! test needs ([`free_port`], [`send_signal`], [`wait_until`], [`wait_until_async`]).

use anyhow::Context as _;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How often the wait helpers poll.
const POLL: Duration = Duration::from_millis(20);

/// A free TCP port on 127.0.0.1: binds port 0, reads the port, releases it.
///
/// Another process may grab the port before you bind it; the server helpers retry with a
/// new port when that happens.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to find a free port: {e}"))
}

/// Polls `f` every 20 ms until it returns true (→ `true`) or `timeout` passes (→ `false`,
/// after one last check). Blocks the thread: inside a current-thread tokio runtime, use
/// [`wait_until_async`] when the condition depends on tasks of that runtime.
pub fn wait_until<F: FnMut() -> bool>(timeout: Duration, mut f: F) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Like [`wait_until`], sleeping with tokio so the runtime's other tasks keep running.
pub async fn wait_until_async<F: FnMut() -> bool>(timeout: Duration, mut f: F) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Sends `signal` (e.g. `INT`, `STOP`, `CONT`) to process `pid` with `kill`.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// The `parley` CLI (the binary at `bin`) to run in `dir` as in a clean environment: no
/// provider API keys or endpoints (`OPENAI_BASE_URL`, `OPENROUTER_BASE_URL`), no `PARLEY_NATS_*` settings and no local models (`PARLEY_MODEL_DIR`
/// is `dir/no-models`), whatever the environment of the test holds. Async (tokio), so a fake
/// LLM in the test's runtime keeps serving while it runs.
pub fn parley_command(
    bin: impl AsRef<OsStr>,
    dir: &Path,
    args: &[&str],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.current_dir(dir)
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("OPENAI_COMPATIBLE_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENROUTER_BASE_URL")
        .env_remove("PARLEY_NATS_URL")
        .env_remove("PARLEY_NATS_CREDS")
        .env("PARLEY_MODEL_DIR", dir.join("no-models"));
    cmd
}

/// Runs [`parley_command`] to its end with `env` added to its environment: its output.
pub async fn run_parley(
    bin: impl AsRef<OsStr>,
    dir: &Path,
    args: &[&str],
    env: &[(&str, String)],
) -> std::process::Output {
    let mut cmd = parley_command(bin, dir, args);
    cmd.envs(env.iter().cloned());
    cmd.output().await.expect("run parley")
}

/// Path of a binary of this workspace, built in the same target directory as the running
/// test (the test's own directory, or its parent when the test lives in `deps/`).
///
/// # Panics
/// When the binary does not exist: "binary NAME not built: run cargo build --workspace --bins".
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("cannot find the running test's executable");
    let mut dir = exe
        .parent()
        .expect("the test executable has no parent directory")
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        panic!(
            "binary {name} not built: run cargo build --workspace --bins (looked for {})",
            path.display()
        );
    }
    path
}

/// The last `lines` lines of a log file (empty when it cannot be read).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Opens (appending) the log file a child's stdout and stderr both go to.
pub(crate) fn log_stdio(path: &Path) -> anyhow::Result<(Stdio, Stdio)> {
    let out: File = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("while opening log file {}", path.display()))?;
    let err = out
        .try_clone()
        .with_context(|| format!("while opening log file {}", path.display()))?;
    Ok((Stdio::from(out), Stdio::from(err)))
}

/// Sends SIGKILL and reaps the child (no-op when it already exited).
pub(crate) fn kill_and_reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// A binary of ours, spawned for a test; SIGKILLed on drop.
///
/// Its stdout and stderr go (merged) to a log file in a private temporary directory —
/// any stdio set on the `Command` is replaced, and stdin is null. Read the log with
/// [`ChildProcess::log`] or wait for a line with [`ChildProcess::wait_for_log_line`]. When
/// the test is panicking, drop prints the log's tail to stderr (shown with the failure).
pub struct ChildProcess {
    /// Used in messages.
    name: String,
    child: Child,
    /// The log file's path.
    log_path: PathBuf,
    /// Holds the log; removed on drop.
    _dir: tempfile::TempDir,
}

impl ChildProcess {
    /// Spawns `cmd`, logging to a file; `name` labels messages.
    pub fn spawn(mut cmd: Command, name: &str) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("parley-{name}-"))
            .tempdir()
            .context("while creating a temporary directory for the process log")?;
        let log_path = dir.path().join(format!("{name}.log"));
        let (out, err) = log_stdio(&log_path)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("while spawning {name} ({:?})", cmd.get_program()))?;
        Ok(ChildProcess {
            name: name.to_string(),
            child,
            log_path,
            _dir: dir,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap. No-op when the process already exited.
    pub fn kill9(&mut self) {
        kill_and_reap(&mut self.child);
    }

    /// SIGTERM (via the `kill -TERM` command); does not wait — see
    /// [`ChildProcess::wait_exit`].
    pub fn terminate(&mut self) {
        if self.is_running() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.pid().to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Waits up to `timeout` for the process to exit; `None` when it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => return None,
            }
        }
    }

    /// Whether the process has not exited yet.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Where stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Everything the process wrote so far (stdout and stderr, merged).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Polls the log until a line containing `needle` appears; returns that line, or `None`
    /// on timeout. Blocks the thread, like [`wait_until`].
    pub fn wait_for_log_line(&self, needle: &str, timeout: Duration) -> Option<String> {
        let mut found = None;
        wait_until(timeout, || {
            found = self
                .log()
                .lines()
                .find(|l| l.contains(needle))
                .map(str::to_string);
            found.is_some()
        });
        found
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!(
                "--- last lines of {} ({}) ---\n{}",
                self.name,
                self.log_path.display(),
                log_tail(&self.log_path, 40)
            );
        }
    }
}

impl std::fmt::Debug for ChildProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildProcess")
            .field("name", &self.name)
            .field("pid", &self.child.id())
            .field("log_path", &self.log_path)
            .finish()
    }
}
