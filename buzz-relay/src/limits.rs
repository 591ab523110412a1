//! The embedded relay's bounds and timeouts, each with the rule it serves
//! (DESIGN.md decision 7: one place for a component's constants).

use std::time::Duration;

/// Authenticated sessions at once (README "The embedded relay": 256).
pub const MAX_CONNECTIONS: usize = 256;
/// Sockets between accept and a successful AUTH at once: counted apart from
/// the sessions, so silent or slow sockets never take an authenticated
/// client's slot (review b30b1a0 finding 4). Over it, a socket is closed at
/// once, before any handshake.
pub const MAX_PENDING: usize = 64;
/// Open subscriptions per connection (`CLOSED rate-limited:`).
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// Longest subscription id a client may use (`CLOSED invalid:`; the
/// relay library's own bound, kept when the bound moved to the front).
pub const MAX_SUBSCRIPTION_ID: usize = 250;
/// Library sessions the clients share ([`crate::lanes`], issue 49 item 4).
pub const LANES: usize = 4;
/// A client's queue of library answers, in messages ([`crate::lanes`]).
pub const CLIENT_QUEUE: usize = 256;
/// How long a client's full queue may stay full before the client is
/// dropped from its lane ([`crate::lanes`]).
pub const SLOW_CLIENT: Duration = Duration::from_secs(5);
/// Largest client message: a kind 9's content is at most 64 KiB
/// (wire-facts §4); JSON escaping and tags need room beyond that.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// Events per minute per connection.
pub const EVENTS_PER_MINUTE: u32 = 60_000;
/// Time a socket has to authenticate once it got its challenge (the Buzz
/// relay's 5 s, wire-facts §2).
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a TCP connection has to complete its WebSocket handshake (finding 4).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the agent records' change token is polled, and the records
/// re-read when it moved, so a live session of a deleted agent ends
/// (finding 11; an AUTH always reads them afresh; issue 49 item 4: at rest
/// only the token is read, [`crate::agents::Version`]).
pub const RECORDS_RECHECK: Duration = Duration::from_secs(2);
/// The transport's own frame/message cap sits this far above
/// [`MAX_MESSAGE_BYTES`]-style policy bounds, so most oversized messages are
/// read whole and refused by the policy check; larger ones are refused from
/// their frame header, with the same `NOTICE`.
pub const TRANSPORT_SLACK: usize = 64 * 1024;
/// The initial read buffer of each WebSocket the relay opens: a client's
/// socket and the relay's end of each pipe to a library session
/// ([`crate::lanes`]). tungstenite's default, 128 KiB, is allocated and
/// zero-filled at the first read, so it stays resident for the session's
/// life: two of them were 256 KiB of the ≈ 400 KB a session cost (issue 49
/// item 4, `bench presence`). A message larger than this grows the buffer
/// once its frame header is read; a session's messages (AUTH, REQ, a
/// presence) are mostly under 2 KiB.
pub const WS_READ_BUFFER: usize = 4 * 1024;
/// How long a refused socket is drained after its `NOTICE`, so the peer
/// still reading gets the notice instead of a TCP reset.
pub const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// How far ahead of the relay's clock a presence's `created_at` may be
/// (review afa2bf1 finding 9). A presence is kept until [`PRESENCE_TTL`]
/// after its date and masks every older-dated one, so one dated an hour
/// ahead, by a node with a fast clock, would hide the author's honest
/// presence for that hour. The same tolerance as an AUTH event's
/// (wire-facts §2: ±60 s, [`crate::policy::AUTH_MAX_SKEW_SECS`]); further
/// ahead it is refused `OK false invalid:` and neither kept nor broadcast.
///
/// [`PRESENCE_TTL`]: buzz_contract::presence::PRESENCE_TTL
pub const PRESENCE_MAX_AHEAD: Duration = Duration::from_secs(60);

/// The relay's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent authenticated sessions ([`MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Concurrent sockets not yet authenticated ([`MAX_PENDING`]).
    pub max_pending: usize,
    /// Open subscriptions per connection.
    pub max_subscriptions: usize,
    /// Largest client message.
    pub max_message_bytes: usize,
    /// Events per minute per connection.
    pub events_per_minute: u32,
    /// Time a socket has to authenticate.
    pub auth_timeout: Duration,
    /// Time a socket has to complete the WebSocket handshake.
    pub handshake_timeout: Duration,
    /// How often live agent sessions are checked against the agent records
    /// (a poll of their change token; a read when it moved).
    pub records_recheck: Duration,
    /// Library sessions the clients share ([`LANES`]).
    pub lanes: usize,
    /// A client's queue of library answers ([`CLIENT_QUEUE`]).
    pub client_queue: usize,
    /// How long a full queue may stay full ([`SLOW_CLIENT`]).
    pub slow_client: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: MAX_CONNECTIONS,
            max_pending: MAX_PENDING,
            max_subscriptions: MAX_SUBSCRIPTIONS,
            max_message_bytes: MAX_MESSAGE_BYTES,
            events_per_minute: EVENTS_PER_MINUTE,
            auth_timeout: AUTH_TIMEOUT,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            records_recheck: RECORDS_RECHECK,
            lanes: LANES,
            client_queue: CLIENT_QUEUE,
            slow_client: SLOW_CLIENT,
        }
    }
}
