//! The library sessions the relay's clients share (issue 49 item 4): at
//! most [`Limits::lanes`] of them, each a WebSocket over an in-process pipe
//! to the library ([`LocalRelay::take_connection`]), instead of one per
//! client. Why, and how answers find their client: [`super::routes`].
//!
//! A lane has two tasks, so neither direction waits on the other:
//!
//! - the **writer** sends the clients' frames to the library, in the order
//!   each client sent them (one channel, [`Member::outbox`]);
//! - the **reader** routes each library message to its client's queue
//!   ([`Member::inbox`], [`Limits::client_queue`] messages). A client whose
//!   queue stays full for [`Limits::slow_client`] is dropped from the lane
//!   (its queue closes, so its connection ends, and its subscriptions are
//!   closed in the library): one client that stops reading holds up the
//!   others on its lane for at most that long, where a client of its own
//!   library session would have held up only itself. The queue is bounded
//!   in messages; a message is bounded by the library's own answers (an
//!   event the front let in).
//!
//! Per-client bounds the library used to apply per session (subscriptions,
//! events per minute, a subscription id's length) are the front's now
//! ([`super::conn`]); the library's own are set past reach.
//!
//! A lane whose library session ends (the relay stops, or the library
//! fails on a message) closes every member's queue: each client's
//! connection ends, and it reconnects to a fresh lane. Negentropy, whose
//! library errors end the session (a malformed `NEG-MSG` fails its
//! reconciliation), is never multiplexed: a client's `NEG-*` go to a
//! library session of its own, opened at its first `NEG-OPEN`
//! ([`super::conn`]).

use super::limits::{Limits, WS_READ_BUFFER};
use super::routes::{ConnId, Routes};
use futures::{SinkExt, StreamExt};
use nostr_relay_builder::prelude::{EventId, Filter, LocalRelay, SubscriptionId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::SendTimeoutError;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// The pipe to a library session: what the library sends is read with a
/// small buffer ([`WS_READ_BUFFER`]).
pub(super) async fn open_pipe(
    relay: &LocalRelay,
    peer: SocketAddr,
) -> (WebSocketStream<DuplexStream>, LibraryTask) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let relay = relay.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = relay.take_connection(theirs, peer).await {
            tracing::debug!("a library session ended: {e}");
        }
    });
    let config = WebSocketConfig::default().read_buffer_size(WS_READ_BUFFER);
    let ws = WebSocketStream::from_raw_socket(ours, Role::Client, Some(config)).await;
    (ws, LibraryTask(task))
}

/// A library session's task, ended when this is dropped (and with it every
/// subscription the session held).
pub(super) struct LibraryTask(tokio::task::JoinHandle<()>);

impl Drop for LibraryTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a lane's two tasks share.
#[derive(Default)]
struct State {
    routes: Routes,
    inboxes: HashMap<ConnId, mpsc::Sender<String>>,
    dead: bool,
}

struct Lane {
    outbox: mpsc::Sender<String>,
    state: Mutex<State>,
    _library: LibraryTask,
}

impl Lane {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the table half
        // updated in a way that matters more than losing the lane.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops a client from the lane: its queue closes and its REQs are
    /// closed in the library.
    fn drop_member(&self, conn: ConnId) {
        let closes = {
            let mut s = self.state();
            s.inboxes.remove(&conn);
            s.routes.leave(conn)
        };
        send_later(&self.outbox, closes);
    }
}

/// Queues frames for the writer without waiting (from a reader or a drop).
fn send_later(outbox: &mpsc::Sender<String>, frames: Vec<String>) {
    if frames.is_empty() {
        return;
    }
    let outbox = outbox.clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            for f in frames {
                if outbox.send(f).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// The relay's lanes.
pub(super) struct Lanes {
    relay: LocalRelay,
    peer: SocketAddr,
    lanes: tokio::sync::Mutex<Vec<Arc<Lane>>>,
    next: AtomicU64,
    max: usize,
    queue: usize,
    slow: Duration,
}

impl Lanes {
    pub fn new(relay: LocalRelay, peer: SocketAddr, limits: &Limits) -> Lanes {
        Lanes {
            relay,
            peer,
            lanes: tokio::sync::Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
            max: limits.lanes.max(1),
            queue: limits.client_queue.max(1),
            slow: limits.slow_client,
        }
    }

    /// Joins a client to the lane with the fewest members, opening a lane
    /// while there are fewer than the bound.
    pub async fn join(&self) -> Member {
        let conn = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, inbox) = mpsc::channel(self.queue);
        let mut lanes = self.lanes.lock().await;
        lanes.retain(|l| !l.state().dead);
        let lane = if lanes.len() < self.max {
            let lane = self.open().await;
            lanes.push(lane.clone());
            lane
        } else {
            lanes
                .iter()
                .min_by_key(|l| l.state().inboxes.len())
                .cloned()
                .expect("at least one lane")
        };
        drop(lanes);
        lane.state().inboxes.insert(conn, tx);
        Member {
            conn,
            outbox: lane.outbox.clone(),
            lane,
            inbox,
        }
    }

    async fn open(&self) -> Arc<Lane> {
        let (ws, library) = open_pipe(&self.relay, self.peer).await;
        let (mut sink, mut stream) = ws.split();
        let (outbox, mut frames) = mpsc::channel::<String>(self.queue);
        let lane = Arc::new(Lane {
            outbox,
            state: Mutex::new(State::default()),
            _library: library,
        });
        tokio::spawn(async move {
            while let Some(f) = frames.recv().await {
                if sink.send(Message::text(f)).await.is_err() {
                    break;
                }
            }
        });
        let (weak, slow) = (Arc::downgrade(&lane), self.slow);
        tokio::spawn(async move {
            while let Some(Ok(m)) = stream.next().await {
                let Message::Text(raw) = m else { continue };
                let Some(lane) = weak.upgrade() else { return };
                let target = {
                    let mut s = lane.state();
                    s.routes
                        .inbound(&raw)
                        .and_then(|(conn, out)| Some((conn, s.inboxes.get(&conn)?.clone(), out)))
                };
                let Some((conn, tx, out)) = target else {
                    continue;
                };
                if let Err(SendTimeoutError::Timeout(_)) = tx.send_timeout(out, slow).await {
                    tracing::warn!(
                        "dropping a client that read nothing for {}s while its queue was full",
                        slow.as_secs_f32()
                    );
                    lane.drop_member(conn);
                }
            }
            if let Some(lane) = weak.upgrade() {
                let mut s = lane.state();
                s.dead = true;
                s.inboxes.clear();
            }
        });
        lane
    }
}

/// A client's place on a lane: it renames the client's frames
/// ([`super::routes`]) for [`Member::outbox`], and the lane's answers for it
/// arrive on [`Member::inbox`], which closes when the lane drops the client
/// or ends. Leaving (drop) closes its subscriptions in the library.
pub(super) struct Member {
    conn: ConnId,
    lane: Arc<Lane>,
    /// The lane's writer: frames in the client's order.
    pub outbox: mpsc::Sender<String>,
    /// The lane's answers for this client, renamed back.
    pub inbox: mpsc::Receiver<String>,
}

impl Member {
    pub fn req(&self, sid: SubscriptionId, filters: Vec<Filter>) -> String {
        self.lane.state().routes.req(self.conn, sid, filters)
    }

    pub fn count(&self, sid: SubscriptionId, filter: Filter) -> String {
        self.lane.state().routes.count(self.conn, sid, filter)
    }

    pub fn close(&self, sid: &SubscriptionId) -> Option<String> {
        self.lane.state().routes.close(self.conn, sid)
    }

    pub fn event(&self, id: EventId) {
        self.lane.state().routes.event(self.conn, id);
    }

    /// `CLOSE` frames for every open REQ (an agent cut off): the client
    /// stays on the lane, with nothing open.
    pub fn close_all(&self) -> Vec<String> {
        self.lane.state().routes.leave(self.conn)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.lane.drop_member(self.conn);
    }
}
