//! The ACP observer mirror (issue 34 item 1; `BUZZ_ACP_RELAY_OBSERVER`,
//! off by default): every JSON-RPC message on an agent's pipes, in both
//! directions, as a kind-24200 frame sealed to the owner
//! ([`buzz_contract::observer`]). The owner's launcher reads them for live
//! activity ("running Bash: `cargo test` for 12 s").
//!
//! The pipes are tapped, not re-encoded: [`TeeRead`] and [`TeeWrite`] sit
//! between the agent's stdio and the ACP connection and hand each complete
//! line to the publisher without ever blocking the agent. Everything is
//! bounded, and nothing is lost silently:
//! - **a line** is buffered up to [`LINE_MAX`]; a longer one (a 10 MB tool
//!   output) is only counted, and published as an elided frame with its
//!   size ([`GapReasons::oversized`]);
//! - **the queue** holds at most [`QUEUE_BYTES`] of lines; past it a line is
//!   counted, not queued;
//! - **strings** in a frame are cut to [`LEAF_MAX`] (head and tail kept), the
//!   cut bytes counted in [`Frame::cut_bytes`], and a frame still over
//!   [`FRAME_MAX`] becomes an elided frame with its size;
//! - **the rate**: at most [`RATE`] frames a second after a burst of
//!   [`BURST`] ([`Pacer`]). What matters for activity (tool calls, questions,
//!   prompts, results) goes first; streamed text chunks wait behind it and
//!   are the first counted when the chatter queue is full ([`Queues`]);
//! - every skip is published in a `observer_telemetry_gap` frame ([`Gap`])
//!   as soon as the rate allows.
//!
//! Each frame passes the harness's one scrub before it is sealed
//! ([`crate::scrub::Scrub::publish_value`]), so a key whole in one frame (a
//! tool's output, a tool call's title, a thought) is withheld as in an
//! answer. Each frame is scrubbed alone: a key the agent streams across
//! several chunks can pass in pieces, one fragment per frame (review
//! afa2bf1 finding 9). The frames are sealed to the owner alone, who holds
//! the key anyway; an answer, published to the channel, is scrubbed whole
//! ([`crate::events::TurnText`]). Frames go to the relay only while it is
//! live ([`crate::relay::RelayCmd::Mirror`]): an ephemeral frame nobody can
//! receive never queues ahead of an answer.

use crate::scrub::Scrub;
use buzz_contract::observer::{self as wire, Frame, Gap, GapReasons};
use serde_json::Value;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

/// The longest line buffered whole.
pub const LINE_MAX: usize = 256 * 1024;
/// The most line bytes waiting for the publisher.
pub const QUEUE_BYTES: usize = 4 * 1024 * 1024;
/// The longest string kept whole in a frame.
pub const LEAF_MAX: usize = 4096;
/// The largest frame plaintext (inside NIP-44's bound, with room for the scrub).
pub const FRAME_MAX: usize = 60_000;
/// Frames a second, sustained, and the burst allowed above it.
pub const RATE: f64 = 10.0;
pub const BURST: f64 = 20.0;
/// The most frames of each class waiting for the rate.
pub const QUEUE_FRAMES: usize = 256;

/// What the running turn of a slot is, when a line is seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnCtx {
    pub channel: Option<String>,
    pub turn_id: Option<String>,
}

/// A line the publisher gets.
#[derive(Debug)]
pub struct Seen {
    slot: usize,
    kind: &'static str,
    at: SystemTime,
    ctx: TurnCtx,
    line: Result<Vec<u8>, usize>,
}

#[derive(Debug, Default)]
struct Counts {
    queued_bytes: AtomicUsize,
    rate_limited: AtomicU64,
    oversized: AtomicU64,
}

/// The harness's observer: cloned into each slot, which taps its pipes.
#[derive(Clone)]
pub struct Observer {
    tx: mpsc::UnboundedSender<Seen>,
    counts: Arc<Counts>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// The slot's view of its running turn.
pub type CtxFn = Arc<dyn Fn() -> TurnCtx + Send + Sync>;

impl Observer {
    /// The observer and the receiving end its publisher drains.
    pub fn new() -> (Observer, mpsc::UnboundedReceiver<Seen>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let counts = Arc::default();
        (Observer { tx, counts }, rx)
    }

    fn tap(&self, slot: usize, kind: &'static str, ctx: CtxFn) -> Tap {
        Tap {
            slot,
            kind,
            ctx,
            buf: Vec::new(),
            over: None,
            obs: self.clone(),
        }
    }

    /// Skips counted since the last call, reset.
    fn take_gap(&self) -> Option<Gap> {
        let rate_limited = self.counts.rate_limited.swap(0, Ordering::Relaxed);
        let oversized = self.counts.oversized.swap(0, Ordering::Relaxed);
        (rate_limited + oversized > 0).then_some(Gap {
            dropped_events: rate_limited + oversized,
            reason_counts: GapReasons {
                rate_limited,
                oversized,
            },
        })
    }
}

/// One direction of one slot's pipe, split into lines.
struct Tap {
    slot: usize,
    kind: &'static str,
    ctx: CtxFn,
    buf: Vec<u8>,
    /// The length so far of a line over [`LINE_MAX`] (not buffered).
    over: Option<usize>,
    obs: Observer,
}

impl Tap {
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (part, rest, ends) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            match &mut self.over {
                Some(n) => *n += part.len(),
                None if self.buf.len() + part.len() > LINE_MAX => {
                    self.over = Some(self.buf.len() + part.len());
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(part),
            }
            if ends {
                self.line_done();
            }
            bytes = rest;
        }
    }

    fn line_done(&mut self) {
        let line = match self.over.take() {
            Some(n) => {
                self.obs.counts.oversized.fetch_add(1, Ordering::Relaxed);
                Err(n)
            }
            None if self.buf.iter().all(u8::is_ascii_whitespace) => return,
            None => Ok(std::mem::take(&mut self.buf)),
        };
        let size = line.as_ref().map_or(0, Vec::len);
        let c = &self.obs.counts;
        if c.queued_bytes.load(Ordering::Relaxed) + size > QUEUE_BYTES {
            c.rate_limited.fetch_add(1, Ordering::Relaxed);
            return;
        }
        c.queued_bytes.fetch_add(size, Ordering::Relaxed);
        let seen = Seen {
            slot: self.slot,
            kind: self.kind,
            at: SystemTime::now(),
            ctx: (self.ctx)(),
            line,
        };
        if self.obs.tx.send(seen).is_err() {
            c.queued_bytes.fetch_sub(size, Ordering::Relaxed);
        }
    }
}

/// The agent's stdout, each line also handed to the observer if there is
/// one.
pub fn tee_read<R>(obs: Option<&Observer>, slot: usize, inner: R, ctx: &CtxFn) -> TeeRead<R> {
    TeeRead {
        inner,
        tap: obs.map(|o| o.tap(slot, wire::READ, ctx.clone())),
    }
}

/// The agent's stdin, each line also handed to the observer if there is
/// one.
pub fn tee_write<W>(obs: Option<&Observer>, slot: usize, inner: W, ctx: &CtxFn) -> TeeWrite<W> {
    TeeWrite {
        inner,
        tap: obs.map(|o| o.tap(slot, wire::WRITE, ctx.clone())),
    }
}

/// The agent's stdout with each line also handed to the observer.
pub struct TeeRead<R> {
    inner: R,
    tap: Option<Tap>,
}

impl<R: AsyncRead + Unpin> AsyncRead for TeeRead<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(tap)) = (&r, &mut this.tap) {
            tap.feed(&buf.filled()[before..]);
        }
        r
    }
}

/// The agent's stdin with each line also handed to the observer.
pub struct TeeWrite<W> {
    inner: W,
    tap: Option<Tap>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for TeeWrite<W> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let (Poll::Ready(Ok(n)), Some(tap)) = (&r, &mut this.tap) {
            tap.feed(&buf[..*n]);
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A token bucket: [`RATE`] a second, [`BURST`] at most.
#[derive(Debug)]
pub struct Pacer {
    tokens: f64,
    at: Instant,
}

impl Pacer {
    pub fn new(now: Instant) -> Pacer {
        Pacer {
            tokens: BURST,
            at: now,
        }
    }

    /// Takes a token if there is one; else how long until there is.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let filled = self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * RATE;
        self.tokens = filled.min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / RATE))
        }
    }
}

/// True for a streamed chunk of text: chatter, not activity.
fn chatter(v: &Value) -> bool {
    let kind = v.pointer("/params/update/sessionUpdate").and_then(Value::as_str);
    matches!(
        kind,
        Some("agent_message_chunk" | "agent_thought_chunk" | "user_message_chunk")
    )
}

/// Frames waiting for the rate: activity first, chatter after it.
#[derive(Debug, Default)]
pub struct Queues {
    marks: VecDeque<Frame>,
    chatter: VecDeque<Frame>,
}

impl Queues {
    /// Queues `f`; false when its queue was full (the caller counts it).
    pub fn push(&mut self, f: Frame) -> bool {
        let q = if chatter(&f.payload) {
            &mut self.chatter
        } else {
            &mut self.marks
        };
        if q.len() >= QUEUE_FRAMES {
            return false;
        }
        q.push_back(f);
        true
    }

    pub fn pop(&mut self) -> Option<Frame> {
        self.marks.pop_front().or_else(|| self.chatter.pop_front())
    }

    pub fn is_empty(&self) -> bool {
        self.marks.is_empty() && self.chatter.is_empty()
    }
}

/// Cuts every string of `v` longer than [`LEAF_MAX`] to its head and tail;
/// returns the bytes cut.
pub fn cut_strings(v: &mut Value) -> u64 {
    match v {
        Value::String(s) if s.len() > LEAF_MAX => {
            let head = floor(s, LEAF_MAX / 2);
            let tail = ceil(s, s.len() - LEAF_MAX / 4);
            let cut = (tail - head) as u64;
            *s = format!("{}…[cut {cut} bytes]…{}", &s[..head], &s[tail..]);
            cut
        }
        Value::Array(a) => a.iter_mut().map(cut_strings).sum(),
        Value::Object(o) => o.values_mut().map(cut_strings).sum(),
        _ => 0,
    }
}

fn floor(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The frame of one seen line (`seq` set when it is published): the
/// message scrubbed, its strings cut, and elided when still too big.
pub fn frame(seen: Seen, scrub: &Scrub, began: SystemTime) -> Frame {
    let mut withheld = false;
    let (payload, cut_bytes) = match seen.line {
        Err(len) => (elided(seen.kind, len), len as u64),
        Ok(bytes) => {
            let len = bytes.len();
            let mut v = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            withheld = scrub.scrub_value(&mut v);
            let cut = cut_strings(&mut v);
            if serde_json::to_vec(&v).map_or(usize::MAX, |b| b.len()) > FRAME_MAX {
                (elided(seen.kind, len), len as u64)
            } else {
                (v, cut)
            }
        }
    };
    let session_id = payload
        .pointer("/params/sessionId")
        .or_else(|| payload.pointer("/result/sessionId"))
        .and_then(Value::as_str)
        .map(str::to_string);
    Frame {
        seq: 0,
        monotonic_ms: seen.at.duration_since(began).unwrap_or_default().as_millis() as u64,
        timestamp: crate::metrics::rfc3339(seen.at),
        kind: seen.kind.into(),
        agent_index: Some(seen.slot),
        channel_id: seen.ctx.channel,
        session_id,
        turn_id: seen.ctx.turn_id,
        payload,
        cut_bytes,
        withheld,
    }
}

fn elided(kind: &str, len: usize) -> Value {
    serde_json::json!({"elided": format!("{kind} message too large to mirror"), "originalBytes": len})
}

/// The gap frame for `gap`.
pub fn gap_frame(gap: Gap, began: SystemTime) -> Frame {
    let now = SystemTime::now();
    Frame {
        seq: 0,
        monotonic_ms: now.duration_since(began).unwrap_or_default().as_millis() as u64,
        timestamp: crate::metrics::rfc3339(now),
        kind: wire::GAP.into(),
        agent_index: None,
        channel_id: None,
        session_id: None,
        turn_id: None,
        payload: serde_json::to_value(gap).unwrap_or(Value::Null),
        cut_bytes: 0,
        withheld: false,
    }
}

impl Observer {
    /// Frames `seen` into `queues`, counting it when its queue is full.
    fn admit(&self, queues: &mut Queues, seen: Seen, scrub: &Scrub, began: SystemTime) {
        let size = seen.line.as_ref().map_or(0, Vec::len);
        self.counts.queued_bytes.fetch_sub(size, Ordering::Relaxed);
        if !queues.push(frame(seen, scrub, began)) {
            self.counts.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Drains the observer: frames the lines seen, paces them (gaps first,
/// then activity, then chatter) and hands each to `send` with its `seq`.
/// Ends when every tap is gone and the queues are empty.
pub async fn publish(
    obs: Observer,
    mut rx: mpsc::UnboundedReceiver<Seen>,
    scrub: Scrub,
    send: impl Fn(&Frame),
) {
    let began = SystemTime::now();
    let mut pacer = Pacer::new(Instant::now());
    let mut queues = Queues::default();
    let mut seq = 0u64;
    let mut open = true;
    loop {
        while open {
            match rx.try_recv() {
                Ok(seen) => obs.admit(&mut queues, seen, &scrub, began),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        let Some(mut f) = obs
            .take_gap()
            .map(|g| gap_frame(g, began))
            .or_else(|| queues.pop())
        else {
            match rx.recv().await {
                Some(seen) if open => obs.admit(&mut queues, seen, &scrub, began),
                _ => return,
            }
            continue;
        };
        if let Err(wait) = pacer.take(Instant::now()) {
            tokio::time::sleep(wait).await;
            let _ = pacer.take(Instant::now());
        }
        seq += 1;
        f.seq = seq;
        send(&f);
    }
}

/// The observer of this run: its publisher seals each frame to `owner`
/// and hands it to the relay while live.
pub fn spawn(
    scrub: Scrub,
    keys: nostr_sdk::prelude::Keys,
    (owner, agent): (nostr_sdk::prelude::PublicKey, nostr_sdk::prelude::PublicKey),
    relay: mpsc::UnboundedSender<crate::relay::RelayCmd>,
) -> Observer {
    let (obs, rx) = Observer::new();
    let tags = wire::tags(&owner.to_hex(), &agent.to_hex());
    let seal = scrub.clone();
    let send = move |f: &Frame| {
        let text = seal.publish_value(f);
        match crate::events::sealed(&keys, wire::KIND, &text, &owner, tags.clone()) {
            Some(e) => {
                let _ = relay.send(crate::relay::RelayCmd::Mirror(Box::new(e)));
            }
            None => tracing::warn!(seq = f.seq, "an observer frame could not be sealed"),
        }
    };
    tokio::spawn(publish(obs.clone(), rx, scrub, send));
    tracing::info!("relay observer on: ACP frames are mirrored to the owner (kind 24200)");
    obs
}
