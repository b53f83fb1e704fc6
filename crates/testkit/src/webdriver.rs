//! A small W3C WebDriver client driving a real headless Chromium through `chromedriver`
//! (Debian packages `chromium` and `chromium-driver`), for the web page's browser tests.
//!
//! [`Browser::start`] starts `chromedriver` on an ephemeral loopback port and opens a
//! session with a fresh profile directory; dropping the [`Browser`] ends the session and
//! kills the driver (which ends Chromium).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};

/// The key under which WebDriver returns an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Chromium's flags for a headless run in a container.
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1000",
];

/// The first of `names` found on `PATH` or in `/usr/bin`, `/usr/lib/chromium`.
fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.push("/usr/bin".into());
    dirs.push("/usr/lib/chromium".into());
    for n in names {
        for d in &dirs {
            let p = d.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Whether `chromium` and `chromedriver` are installed.
pub fn browser_available() -> bool {
    find_program(&["chromedriver"]).is_some()
        && find_program(&["chromium", "chromium-browser"]).is_some()
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

/// A headless Chromium session.
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    /// The chromedriver process (killed on drop).
    driver: Child,
    /// Chromium's profile directory (removed on drop).
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> anyhow::Result<Browser> {
        let driver_bin = find_program(&["chromedriver"])
            .context("chromedriver not found: install the chromium-driver package")?;
        let chromium = find_program(&["chromium", "chromium-browser"])
            .context("chromium not found: install the chromium package")?;
        let port = crate::free_port();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("while starting {}", driver_bin.display()))?;
        let profile = tempfile::tempdir().context("while creating a Chromium profile dir")?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let base = format!("http://127.0.0.1:{port}");
        let mut browser = Browser {
            http,
            session: String::new(),
            driver,
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = browser
                .http
                .get(format!("{base}/status"))
                .send()
                .await
                .ok()
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ready {
                break;
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not start on port {port}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
        args.push(format!(
            "--user-data-dir={}",
            browser._profile.path().display()
        ));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium.display().to_string(), "args": args},
        }}});
        let v = browser
            .call("POST", &format!("{base}/session"), Some(caps))
            .await?;
        let id = v["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no session id in {v}"))?;
        browser.session = format!("{base}/session/{id}");
        Ok(browser)
    }

    async fn call(&self, method: &str, url: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
        };
        let res = req
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = res.status();
        let v: Value = res
            .json()
            .await
            .with_context(|| format!("{method} {url}: not JSON"))?;
        if !status.is_success() {
            bail!("{method} {url}: {status}: {}", v["value"]["message"]);
        }
        Ok(v["value"].clone())
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.call(method, &format!("{}{path}", self.session), body)
            .await
    }

    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.cmd("POST", "/url", Some(json!({ "url": url })))
            .await?;
        Ok(())
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// The elements matching a CSS selector now (maybe none).
    pub async fn find_all(&self, css: &str) -> anyhow::Result<Vec<Element>> {
        let v = self
            .cmd(
                "POST",
                "/elements",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT_KEY].as_str().map(|s| Element(s.to_string())))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Waits up to `timeout` for an element matching `css`.
    pub async fn wait_for(&self, css: &str, timeout: Duration) -> anyhow::Result<Element> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.find_all(css).await?.into_iter().next() {
                return Ok(e);
            }
            if Instant::now() > deadline {
                bail!("no element {css} after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits up to `timeout` for `script` (a function body) to return a truthy value;
    /// returns it.
    pub async fn wait_until(&self, script: &str, timeout: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.execute(script, vec![]).await?;
            let truthy = !(v.is_null() || v == json!(false) || v == json!(0) || v == json!(""));
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("condition not met after {timeout:?}: {script}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn click(&self, e: &Element) -> anyhow::Result<()> {
        self.cmd("POST", &format!("/element/{}/click", e.0), None)
            .await?;
        Ok(())
    }

    pub async fn clear(&self, e: &Element) -> anyhow::Result<()> {
        self.cmd("POST", &format!("/element/{}/clear", e.0), None)
            .await?;
        Ok(())
    }

    pub async fn type_text(&self, e: &Element, text: &str) -> anyhow::Result<()> {
        self.cmd(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        )
        .await?;
        Ok(())
    }

    /// The element's rendered text.
    pub async fn text(&self, e: &Element) -> anyhow::Result<String> {
        let v = self
            .cmd("GET", &format!("/element/{}/text", e.0), None)
            .await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// Saves a PNG screenshot of the whole window to `path`.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let v = self.cmd("GET", "/screenshot", None).await?;
        let data = v.as_str().ok_or_else(|| anyhow!("no screenshot data"))?;
        let bytes = decode_base64(data).context("screenshot is not base64")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, bytes).with_context(|| format!("while writing {}", path.display()))
    }

    /// Sets the window size (the screenshot's size).
    pub async fn set_window(&self, width: u32, height: u32) -> anyhow::Result<()> {
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        )
        .await?;
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Best effort: end the session (Chromium exits), then the driver.
        if !self.session.is_empty() {
            let url = self.session.clone();
            let _ = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(async {
                        let _ = reqwest::Client::new()
                            .delete(url)
                            .timeout(Duration::from_secs(5))
                            .send()
                            .await;
                    });
                }
            })
            .join();
        }
        crate::process::kill_and_reap(&mut self.driver);
    }
}

/// Standard base64 (with padding) to bytes.
fn decode_base64(s: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => bail!("invalid base64 byte {c}"),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGk=").unwrap(), b"hi");
        assert!(decode_base64("a$").is_err());
    }
}
