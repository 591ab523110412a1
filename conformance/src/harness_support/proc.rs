//! The `buzz-acp` process under test: built by this crate as
//! `buzz-acp-under-test` (the identical entry point), run with a clean
//! environment, stderr captured line by line with arrival times.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;

/// A captured stderr line.
#[derive(Debug, Clone)]
pub struct Line {
    pub text: String,
    pub at: Instant,
}

impl Line {
    /// Seconds since midnight of the line's own tracing timestamp
    /// (`YYYY-MM-DDTHH:MM:SS.ffffffZ …`): the harness's clock at emission,
    /// immune to how late the test read the line.
    pub fn ts_secs(&self) -> Option<f64> {
        let t = self.text.get(11..)?.split('Z').next()?;
        let mut it = t.split(':');
        let (h, m, s) = (it.next()?, it.next()?, it.next()?);
        Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
    }

    /// Seconds from `earlier` to this line, by the harness's own timestamps.
    pub fn secs_since(&self, earlier: &Line) -> Option<f64> {
        let d = self.ts_secs()? - earlier.ts_secs()?;
        Some(if d < 0.0 { d + 86_400.0 } else { d })
    }
}

/// The running harness.
pub struct HarnessProc {
    pub child: tokio::process::Child,
    pub pid: i32,
    pub started: Instant,
    pub lines: Arc<Mutex<Vec<Line>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// A command for `bin` with only `env` (plus a minimal PATH) in its environment.
pub fn harness_command(bin: &str, env: &HashMap<String, String>) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(bin);
    c.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    c
}

impl HarnessProc {
    /// Spawns `cmd` and starts capturing its stderr.
    pub fn spawn(mut cmd: tokio::process::Command) -> HarnessProc {
        let started = Instant::now();
        let mut child = cmd.spawn().expect("harness spawns");
        let pid = child.id().expect("pid") as i32;
        let lines: Arc<Mutex<Vec<Line>>> = Arc::default();
        let stderr = child.stderr.take().expect("stderr piped");
        let sink = lines.clone();
        let reader = tokio::spawn(async move {
            let mut r = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(l)) = r.next_line().await {
                eprintln!("[buzz-acp {pid}] {l}");
                sink.lock().unwrap().push(Line {
                    text: l,
                    at: Instant::now(),
                });
            }
        });
        HarnessProc {
            child,
            pid,
            started,
            lines,
            reader: Some(reader),
        }
    }

    /// Waits for the exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let code = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(s)) => s.code(),
            _ => return None,
        };
        // Every line the process wrote is captured once its stderr reaches EOF.
        if let Some(r) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), r).await;
        }
        code
    }

    /// Sends a signal to the harness.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child pid.
        unsafe {
            libc::kill(self.pid, sig);
        }
    }

    /// The first log line containing `needle`, once it appears.
    pub async fn wait_line(&self, timeout: Duration, needle: &str) -> Option<Line> {
        super::wait_until(timeout, || {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.text.contains(needle))
                .cloned()
        })
        .await
    }

    /// How many captured lines contain `needle`.
    pub fn count_lines(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.text.contains(needle))
            .count()
    }

    /// Index of the first captured line containing `needle`.
    pub fn line_index(&self, needle: &str) -> Option<usize> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .position(|l| l.text.contains(needle))
    }

    /// All stderr text so far.
    pub fn stderr(&self) -> String {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A temp dir with a `buzz-acp` symlink to `bin`, for scripts that `exec buzz-acp`.
pub fn path_dir_with_buzz_acp(bin: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("buzz-acp");
    std::os::unix::fs::symlink(bin, &link).expect("symlink");
    let p = dir.path().to_path_buf();
    (dir, p)
}

/// The live processes whose parent is `pid` (a dozing harness has none:
/// issue 50), read from `/proc`.
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces, so read after the last ')'.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
        let mut fields = after.split_whitespace();
        let (state, ppid) = (fields.next(), fields.next().and_then(|p| p.parse::<i32>().ok()));
        if ppid == Some(pid) && state != Some("Z") {
            out.push(child);
        }
    }
    out
}
