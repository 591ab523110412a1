//! Which client each message of a shared library session belongs to (issue
//! 49 item 4; pure: no I/O, no clock).
//!
//! The relay's clients share a few library sessions ([`super::lanes`])
//! instead of one each, because the library opens every session's
//! WebSocket with a 128 KiB read buffer that it zero-fills at the first
//! read, and 1 000 agents' sessions were 131 MB of the relay's 163 MB.
//! Two clients may both call their subscription `"s"`, so on a shared
//! session a client's subscription ids are renamed to ids of the lane's
//! own (a counter), and every answer is renamed back:
//!
//! | client → library | what the table does |
//! |---|---|
//! | `REQ id …` | the client's id keeps its lane id while open (a REQ with an open id replaces it, as NIP-01 says) |
//! | `CLOSE id` | forgets the id; the library's late events for it are dropped |
//! | `COUNT id …` | a lane id for this one answer |
//! | `EVENT e` | passed unchanged; the client waits for `OK e.id` |
//! | the client leaves | `CLOSE` for each of its open REQs; its pending answers are dropped |
//!
//! | library → client | routed by |
//! |---|---|
//! | `EVENT`, `EOSE` | the REQ's lane id |
//! | `CLOSED` | the REQ's lane id, then forgotten |
//! | `COUNT` | the COUNT's lane id, then forgotten |
//! | `OK` | the event id, to the clients that sent it, in order |
//! | anything else (`NOTICE`, `AUTH`) | nobody: the front already answered the client's own mistakes |
//!
//! The rename splices the message's second element and keeps every other
//! byte: the library writes its messages without spaces and our lane ids
//! and event ids need no escaping ([`split_head`]).

use nostr_relay_builder::prelude::{ClientMessage, EventId, Filter, JsonUtil, SubscriptionId};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

/// A client of the relay, numbered by [`super::lanes`].
pub(super) type ConnId = u64;

/// Where a lane id's answers go.
struct Route {
    conn: ConnId,
    sid: SubscriptionId,
}

/// One shared library session's renames.
#[derive(Default)]
pub(super) struct Routes {
    next: u64,
    /// Lane id → the client and its own id.
    routes: HashMap<u64, Route>,
    /// Each client's open REQs: its id → the lane id.
    open: HashMap<ConnId, HashMap<SubscriptionId, u64>>,
    /// Events waiting for their `OK`, by the clients that sent them.
    oks: HashMap<EventId, VecDeque<ConnId>>,
}

fn lane_sid(n: u64) -> SubscriptionId {
    SubscriptionId::new(n.to_string())
}

/// A message's type, its second element when that is a string, and the
/// bytes after it: `["EOSE","7"]` is `("EOSE", "7", "]")`. `None` for a
/// message not in that shape.
fn split_head(raw: &str) -> Option<(&str, &str, &str)> {
    let rest = raw.strip_prefix("[\"")?;
    let (kind, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(",\"")?;
    let (id, rest) = rest.split_once('"')?;
    Some((kind, id, rest))
}

impl Routes {
    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// A client's REQ, as the library gets it.
    pub fn req(&mut self, conn: ConnId, sid: SubscriptionId, filters: Vec<Filter>) -> String {
        let n = match self.open.get(&conn).and_then(|o| o.get(&sid)) {
            Some(n) => *n,
            None => {
                let n = self.fresh();
                self.open.entry(conn).or_default().insert(sid.clone(), n);
                self.routes.insert(n, Route { conn, sid });
                n
            }
        };
        ClientMessage::Req {
            subscription_id: Cow::Owned(lane_sid(n)),
            filters: filters.into_iter().map(Cow::Owned).collect(),
        }
        .as_json()
    }

    /// A client's COUNT, as the library gets it.
    pub fn count(&mut self, conn: ConnId, sid: SubscriptionId, filter: Filter) -> String {
        let n = self.fresh();
        self.routes.insert(n, Route { conn, sid });
        ClientMessage::Count {
            subscription_id: Cow::Owned(lane_sid(n)),
            filter: Cow::Owned(filter),
        }
        .as_json()
    }

    /// A client's CLOSE, as the library gets it; `None` for an id the
    /// client has not open.
    pub fn close(&mut self, conn: ConnId, sid: &SubscriptionId) -> Option<String> {
        let n = self.open.get_mut(&conn)?.remove(sid)?;
        self.routes.remove(&n);
        Some(ClientMessage::Close(Cow::Owned(lane_sid(n))).as_json())
    }

    /// A client's EVENT is passed unchanged; this notes who waits for its `OK`.
    pub fn event(&mut self, conn: ConnId, id: EventId) {
        self.oks.entry(id).or_default().push_back(conn);
    }

    #[cfg(test)]
    fn open_of(&self, conn: ConnId) -> usize {
        self.open.get(&conn).map_or(0, HashMap::len)
    }

    /// The client is gone or cut off: a `CLOSE` for each of its open REQs,
    /// and nothing more is routed to it.
    pub fn leave(&mut self, conn: ConnId) -> Vec<String> {
        let open = self.open.remove(&conn).unwrap_or_default();
        self.routes.retain(|_, r| r.conn != conn);
        self.oks.retain(|_, waiting| {
            waiting.retain(|c| *c != conn);
            !waiting.is_empty()
        });
        open.into_values()
            .map(|n| ClientMessage::Close(Cow::Owned(lane_sid(n))).as_json())
            .collect()
    }

    /// A library message: the client it belongs to and the message as that
    /// client gets it; `None` for a message nobody gets.
    pub fn inbound(&mut self, raw: &str) -> Option<(ConnId, String)> {
        let (kind, id, rest) = split_head(raw)?;
        let (conn, sid) = match kind {
            "OK" => {
                let event = EventId::from_hex(id).ok()?;
                let waiting = self.oks.get_mut(&event)?;
                let conn = waiting.pop_front()?;
                if waiting.is_empty() {
                    self.oks.remove(&event);
                }
                return Some((conn, raw.to_string()));
            }
            "EVENT" | "EOSE" => {
                let r = self.routes.get(&id.parse().ok()?)?;
                (r.conn, r.sid.clone())
            }
            "CLOSED" | "COUNT" => {
                let n: u64 = id.parse().ok()?;
                let r = self.routes.remove(&n)?;
                if let Some(open) = self.open.get_mut(&r.conn) {
                    open.remove(&r.sid);
                }
                (r.conn, r.sid)
            }
            _ => return None,
        };
        let sid = serde_json::to_string(sid.as_str()).ok()?;
        Some((conn, format!("[\"{kind}\",{sid}{rest}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_relay_builder::prelude::{EventBuilder, Keys, Kind, RelayMessage};
    use serde_json::{Value, json};

    fn v(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    fn sid(s: &str) -> SubscriptionId {
        SubscriptionId::new(s)
    }

    /// The library's own serialization of an answer for lane id `n`.
    fn eose(n: &str) -> String {
        RelayMessage::EndOfStoredEvents(Cow::Owned(sid(n))).as_json()
    }

    #[test]
    fn two_clients_with_one_subscription_id_get_only_their_own_answers() {
        let mut t = Routes::default();
        let a = v(&t.req(1, sid("s"), vec![Filter::new().kind(Kind::from(9u16))]));
        let b = v(&t.req(2, sid("s"), vec![Filter::new()]));
        assert_eq!(a[0], "REQ");
        assert_ne!(a[1], b[1], "each client's \"s\" is a different lane id");
        assert_eq!(a[2], json!({"kinds": [9]}), "the filters are passed on");

        let event = EventBuilder::text_note("hi")
            .sign_with_keys(&Keys::generate())
            .unwrap();
        let to_a = RelayMessage::Event {
            subscription_id: Cow::Owned(sid(a[1].as_str().unwrap())),
            event: Cow::Borrowed(&event),
        }
        .as_json();
        let (conn, out) = t.inbound(&to_a).unwrap();
        assert_eq!(conn, 1);
        let expected = RelayMessage::Event {
            subscription_id: Cow::Owned(sid("s")),
            event: Cow::Borrowed(&event),
        }
        .as_json();
        assert_eq!(out, expected, "byte for byte what the client would get alone");
        assert_eq!(t.inbound(&eose(b[1].as_str().unwrap())).unwrap(), (2, eose("s")));
    }

    #[test]
    fn a_req_with_an_open_id_replaces_it_and_a_close_forgets_it() {
        let mut t = Routes::default();
        let first = v(&t.req(1, sid("s"), vec![Filter::new()]));
        let again = v(&t.req(1, sid("s"), vec![Filter::new()]));
        assert_eq!(first[1], again[1], "the library replaces the subscription too");
        let lane = first[1].as_str().unwrap().to_string();
        let close = v(&t.close(1, &sid("s")).unwrap());
        assert_eq!(close, json!(["CLOSE", lane]));
        assert!(t.inbound(&eose(&lane)).is_none(), "a late answer goes nowhere");
        assert!(t.close(1, &sid("s")).is_none());
        assert_eq!(t.open_of(1), 0);
    }

    #[test]
    fn closed_and_count_are_routed_once() {
        let mut t = Routes::default();
        let req = v(&t.req(1, sid("r"), vec![Filter::new()]));
        let count = v(&t.count(1, sid("c"), Filter::new()));
        let closed = RelayMessage::Closed {
            subscription_id: Cow::Owned(sid(req[1].as_str().unwrap())),
            message: Cow::Borrowed("rate-limited: \"x\""),
        }
        .as_json();
        let (_, out) = t.inbound(&closed).unwrap();
        assert_eq!(v(&out), json!(["CLOSED", "r", "rate-limited: \"x\""]));
        assert!(t.inbound(&closed).is_none());
        assert_eq!(t.open_of(1), 0, "a closed REQ is no longer the client's");
        let answer = RelayMessage::Count {
            subscription_id: Cow::Owned(sid(count[1].as_str().unwrap())),
            count: 3,
        }
        .as_json();
        assert_eq!(
            v(&t.inbound(&answer).unwrap().1),
            json!(["COUNT", "c", {"count": 3}])
        );
        assert!(t.inbound(&answer).is_none());
    }

    #[test]
    fn an_ok_goes_to_each_client_that_sent_the_event_in_order() {
        let mut t = Routes::default();
        let id = EventBuilder::text_note("x")
            .sign_with_keys(&Keys::generate())
            .unwrap()
            .id;
        t.event(2, id);
        t.event(1, id);
        let ok = RelayMessage::Ok {
            event_id: id,
            status: true,
            message: Cow::Borrowed(""),
        }
        .as_json();
        assert_eq!(t.inbound(&ok).unwrap(), (2, ok.clone()));
        assert_eq!(t.inbound(&ok).unwrap(), (1, ok.clone()));
        assert!(t.inbound(&ok).is_none());
    }

    #[test]
    fn a_client_that_leaves_closes_its_subscriptions_and_gets_nothing_more() {
        let mut t = Routes::default();
        let a = v(&t.req(1, sid("a"), vec![Filter::new()]));
        let b = v(&t.req(2, sid("a"), vec![Filter::new()]));
        let c = v(&t.count(1, sid("c"), Filter::new()));
        let id = EventBuilder::text_note("x")
            .sign_with_keys(&Keys::generate())
            .unwrap()
            .id;
        t.event(1, id);
        let closes: Vec<Value> = t.leave(1).iter().map(|s| v(s)).collect();
        assert_eq!(closes, vec![json!(["CLOSE", a[1]])]);
        assert!(t.inbound(&eose(a[1].as_str().unwrap())).is_none());
        let count = RelayMessage::Count {
            subscription_id: Cow::Owned(sid(c[1].as_str().unwrap())),
            count: 0,
        }
        .as_json();
        assert!(t.inbound(&count).is_none());
        let ok = RelayMessage::Ok {
            event_id: id,
            status: true,
            message: Cow::Borrowed(""),
        }
        .as_json();
        assert!(t.inbound(&ok).is_none());
        assert_eq!(
            t.inbound(&eose(b[1].as_str().unwrap())).unwrap().0,
            2,
            "others are untouched"
        );
    }

    #[test]
    fn messages_for_nobody_are_dropped() {
        let mut t = Routes::default();
        for raw in [
            r#"["NOTICE","binary messages are not processed"]"#,
            r#"["AUTH","challenge"]"#,
            r#"["EOSE","not-a-lane-id"]"#,
            r#"["OK","zz",true,""]"#,
            "not json",
        ] {
            assert!(t.inbound(raw).is_none(), "{raw}");
        }
    }
}
