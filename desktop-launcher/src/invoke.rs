//! Bounded provider invocation (spec §Invocation; wire-facts §7 limits, §8 item 5).
//!
//! One process per operation, cwd = the agent workdir, exactly one JSON object
//! on stdin, then stdin is closed. Stdout is capped (1 MiB: more is an error
//! and the process group is killed); stderr is capped (64 KiB kept, the rest
//! drained and dropped). Readers never `read_to_end`: they send bounded chunks,
//! and the caller polls `try_wait` against a deadline. On timeout the whole
//! process group is killed. If the provider exits but something it left
//! behind holds the pipes open, the group is killed after a short grace and
//! the call fails instead of hanging.
//!
//! The request is written on its own thread with `SIGPIPE` blocked in that
//! thread, so a provider that exits without reading stdin yields `EPIPE` (an
//! ordinary provider failure, [`Output::stdin_unread`]) whatever the
//! process-wide `SIGPIPE` disposition is: it can never kill the launcher.

use crate::limits::{PIPE_DRAIN_GRACE, POLL_INTERVAL, STDERR_CAP, STDOUT_CAP};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Limits of one invocation.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub stdout_cap: usize,
    pub stderr_cap: usize,
    /// How long the pipes may stay open after the provider exited.
    pub drain_grace: Duration,
}

impl Limits {
    /// The spec limits with `deadline`.
    pub fn with_deadline(deadline: Duration) -> Limits {
        Limits {
            deadline,
            stdout_cap: STDOUT_CAP,
            stderr_cap: STDERR_CAP,
            drain_grace: PIPE_DRAIN_GRACE,
        }
    }
}

/// What a finished provider produced (bounded).
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// At most `stderr_cap` bytes.
    pub stderr: Vec<u8>,
    /// Writing the request failed (typically `EPIPE`: the provider closed
    /// its stdin or exited before reading the whole request).
    pub stdin_unread: Option<std::io::ErrorKind>,
}

/// Why an invocation produced no trustworthy output. Carries no provider text.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("could not start it: {0}")]
    Spawn(std::io::Error),
    #[error("it did not finish within {0:?}; its process group was killed")]
    Timeout(Duration),
    #[error("it wrote more than {0} bytes to stdout; its process group was killed")]
    StdoutTooLarge(usize),
    #[error(
        "it exited but a process it left behind kept its output pipes open; that process group was killed"
    )]
    PipesHeld,
    #[error("waiting for it failed: {0}")]
    Wait(std::io::Error),
}

enum Msg {
    Out(Vec<u8>),
    OutOverflow,
    OutEof,
    Err(Vec<u8>),
    /// Complete stderr lines, in order ([`crate::status_lines`]).
    Lines(Vec<String>),
    /// Stderr closed.
    ErrEof,
    /// The request writer finished: `Err` when writing failed.
    InDone(Result<(), std::io::ErrorKind>),
}

/// Blocks `SIGPIPE` for the calling thread only. A write to a closed pipe
/// then fails with `EPIPE` instead of raising a signal whose default action
/// would end the whole process. The pending signal is discarded when the
/// thread exits.
fn block_sigpipe_in_this_thread() {
    // SAFETY: plain signal-mask manipulation of the current thread on a
    // zero-initialised, then sigemptyset-initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn kill_group(pgid: u32) {
    // SAFETY: killpg only sends a signal; a stale or empty group yields ESRCH.
    unsafe {
        libc::killpg(pgid as libc::pid_t, libc::SIGKILL);
    }
}

fn spawn_with_retry(cmd: &mut Command) -> Result<Child, InvokeError> {
    // A freshly written staged file can be briefly "text file busy" when another
    // thread forked while its write descriptor was open; retry a few times.
    let mut attempt = 0;
    loop {
        match cmd.spawn() {
            Ok(c) => return Ok(c),
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 50 => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(InvokeError::Spawn(e)),
        }
    }
}

/// Runs `cmd` in its own process group with `stdin` as its only input.
///
/// `on_status` receives each of the provider's stderr lines as it completes,
/// in order, a repeat of the previous one skipped ([`crate::status_lines`];
/// the caller redacts before showing it).
pub fn run_command(
    mut cmd: Command,
    cwd: &Path,
    stdin: &[u8],
    limits: Limits,
    on_status: &mut dyn FnMut(&str),
) -> Result<Output, InvokeError> {
    cmd.current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = spawn_with_retry(&mut cmd)?;
    let pgid = child.id();
    let started = Instant::now();

    let (tx, rx) = mpsc::channel::<Msg>();
    let writing = child.stdin.is_some();
    if let Some(mut sin) = child.stdin.take() {
        let data = stdin.to_vec();
        let tx = tx.clone();
        std::thread::spawn(move || {
            // A provider that does not read its stdin must neither block nor kill us.
            block_sigpipe_in_this_thread();
            let r = sin.write_all(&data).map_err(|e| e.kind());
            // Close stdin before reporting, so the provider sees EOF.
            drop(sin);
            let _ = tx.send(Msg::InDone(r));
        });
    }
    if let Some(mut out) = child.stdout.take() {
        let tx = tx.clone();
        let cap = limits.stdout_cap;
        std::thread::spawn(move || {
            let mut total = 0usize;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match out.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Msg::OutEof);
                        return;
                    }
                    Ok(n) => {
                        total += n;
                        if total > cap {
                            let _ = tx.send(Msg::OutOverflow);
                            return;
                        }
                        if tx.send(Msg::Out(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    if let Some(mut err) = child.stderr.take() {
        let tx = tx.clone();
        let cap = limits.stderr_cap;
        std::thread::spawn(move || {
            let mut lines = crate::status_lines::StatusLines::default();
            let mut kept = 0usize;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match err.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Msg::Lines(lines.finish()));
                        let _ = tx.send(Msg::ErrEof);
                        return;
                    }
                    Ok(n) => {
                        let take = n.min(cap.saturating_sub(kept));
                        kept += take;
                        // Status lines come from the kept bytes only: the
                        // stderr cap bounds them too.
                        let done = lines.feed(&buf[..take]);
                        if !done.is_empty() && tx.send(Msg::Lines(done)).is_err() {
                            return;
                        }
                        if take > 0 && tx.send(Msg::Err(buf[..take].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(tx);

    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut stdin_unread = None;
    let mut in_done = !writing;
    let (mut out_eof, mut err_eof) = (false, false);
    let mut status: Option<ExitStatus> = None;
    let mut exited_at: Option<Instant> = None;
    loop {
        match rx.recv_timeout(POLL_INTERVAL) {
            Ok(Msg::Out(b)) => stdout.extend_from_slice(&b),
            Ok(Msg::OutOverflow) => {
                kill_group(pgid);
                let _ = child.wait();
                return Err(InvokeError::StdoutTooLarge(limits.stdout_cap));
            }
            Ok(Msg::OutEof) => out_eof = true,
            Ok(Msg::Err(b)) => stderr.extend_from_slice(&b),
            Ok(Msg::Lines(lines)) => {
                for l in &lines {
                    on_status(l);
                }
            }
            Ok(Msg::ErrEof) => err_eof = true,
            Ok(Msg::InDone(r)) => {
                in_done = true;
                stdin_unread = r.err();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                out_eof = true;
                err_eof = true;
                in_done = true;
            }
        }
        if status.is_none() {
            match child.try_wait() {
                Ok(Some(s)) => {
                    status = Some(s);
                    exited_at = Some(Instant::now());
                }
                Ok(None) => {}
                Err(e) => {
                    kill_group(pgid);
                    return Err(InvokeError::Wait(e));
                }
            }
        }
        if let Some(s) = status {
            if out_eof && err_eof && in_done {
                // Nothing of the provider may outlive the operation.
                kill_group(pgid);
                return Ok(Output {
                    status: s,
                    stdout,
                    stderr,
                    stdin_unread,
                });
            }
            if exited_at.is_some_and(|t| t.elapsed() > limits.drain_grace) {
                kill_group(pgid);
                return Err(InvokeError::PipesHeld);
            }
        }
        if started.elapsed() > limits.deadline {
            kill_group(pgid);
            let _ = child.wait();
            return Err(InvokeError::Timeout(limits.deadline));
        }
    }
}
