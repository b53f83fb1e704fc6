//! A process on a pseudo-terminal: its stdin, stdout and stderr are the terminal, so it sees
//! a terminal (`isatty`) the way a user's shell would give it one. The test types lines into
//! the terminal and reads everything the process wrote.

use std::io::{Read as _, Write as _};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A child process whose standard streams are a pseudo-terminal; killed when dropped.
pub struct OnPty {
    pub child: tokio::process::Child,
    /// The terminal's controlling side: what is written here is typed.
    master: std::fs::File,
    /// Everything the process wrote (stdout and stderr, with the terminal's echo of what
    /// was typed).
    output: Arc<Mutex<String>>,
}

impl OnPty {
    /// Spawns `cmd` with a new pseudo-terminal as stdin, stdout and stderr.
    pub fn spawn(mut cmd: tokio::process::Command) -> anyhow::Result<OnPty> {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY)?;
        grantpt(&master)?;
        unlockpt(&master)?;
        let name = ptsname(&master, Vec::new())?;
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str()?)?;
        let child = cmd
            .stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave))
            .kill_on_drop(true)
            .spawn()?;
        let master = std::fs::File::from(master);
        let output = Arc::new(Mutex::new(String::new()));
        let mut reader = master.try_clone()?;
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with an error (EIO) once the child has exited and closed the terminal.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut out) = sink.lock() {
                    out.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        Ok(OnPty {
            child,
            master,
            output,
        })
    }

    /// Everything written so far.
    pub fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Waits until the output holds `text`; an error with the output after `timeout`.
    pub async fn wait_for(&self, text: &str, timeout: Duration) -> anyhow::Result<()> {
        let start = std::time::Instant::now();
        while start.elapsed() < timeout {
            if self.output().contains(text) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("no {text:?} within {timeout:?} in:\n{}", self.output())
    }

    /// Types `lines`, each followed by Enter.
    pub fn type_lines(&mut self, lines: &[&str]) -> anyhow::Result<()> {
        for l in lines {
            self.master.write_all(l.as_bytes())?;
            self.master.write_all(b"\n")?;
        }
        self.master.flush()?;
        Ok(())
    }

    /// Waits for the process to exit (at most `timeout`) and for its last output; its exit
    /// code (`None` when a signal ended it).
    pub async fn exit_code(&mut self, timeout: Duration) -> anyhow::Result<Option<i32>> {
        let status = tokio::time::timeout(timeout, self.child.wait()).await??;
        // Let the reader take the last bytes.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(status.code())
    }
}
