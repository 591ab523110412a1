//! The front's decision for one client frame, before the library sees it
//! (pure apart from parsing: the session and the clock come in): NIP-42
//! first, then the session's checks ([`super::policy`]) on EVENT, REQ,
//! COUNT and `NEG-*`, and the parsed message for the library ([`Out`]).

use super::author_only;
use super::policy::{self, Session};
use super::presence_keep::{asks_for_presence, may_match_presence};
use buzz_contract::presence::KIND_PRESENCE;
use nostr_relay_builder::prelude::{
    ClientMessage, Event, Filter, JsonUtil, Kind, RelayMessage, SubscriptionId,
};
use std::borrow::Cow;
use tokio_tungstenite::tungstenite::Message;

/// A relay message as a text frame.
pub(super) fn text(msg: RelayMessage<'_>) -> Message {
    Message::text(msg.as_json())
}

/// A `NOTICE`.
pub(super) fn notice(s: String) -> Message {
    text(RelayMessage::Notice(Cow::Owned(s)))
}

/// An `OK` for `event`.
pub(super) fn ok(event: &Event, status: bool, message: String) -> Message {
    text(RelayMessage::Ok {
        event_id: event.id,
        status,
        message: Cow::Owned(message),
    })
}

const AUTH_FIRST: &str = "auth-required: authenticate first (NIP-42)";

/// A client message for the library, parsed: what [`super::conn`] needs to
/// rename it onto a shared library session ([`super::routes`]), to bound
/// it, and to answer each open subscription when the session is cut off.
pub(super) enum Out {
    /// An EVENT (not a presence): its `OK` comes back by this id.
    Event(nostr_relay_builder::prelude::EventId),
    /// A REQ: its filters; those that ask for kept presence
    /// ([`super::presence_keep::asks_for_presence`]), replayed before its
    /// EOSE; and those a live presence can match
    /// ([`super::presence_keep::may_match_presence`]), which the front
    /// serves live.
    Req {
        id: SubscriptionId,
        filters: Vec<Filter>,
        replay: Vec<Filter>,
        live: Vec<Filter>,
    },
    /// A COUNT.
    Count { id: SubscriptionId, filter: Filter },
    /// A CLOSE.
    Close(SubscriptionId),
    /// A NEG-OPEN opens this negentropy session.
    NegOpen(SubscriptionId),
    /// A NEG-MSG.
    NegMsg,
    /// A NEG-CLOSE ends it.
    NegClose(SubscriptionId),
}

/// What the front does with one client message.
pub(super) enum Step {
    /// Pass it to the library ([`super::conn`] renames it).
    Forward(Out),
    /// Answer the client directly.
    Reply(Message),
    /// An AUTH event, decided by the connection (it may read the agent records).
    Auth(Box<Event>),
    /// A presence the session may publish: the front verifies, keeps and
    /// delivers it; the library never sees it ([`super::conn`]).
    Presence(Box<Event>),
    /// Nothing to do.
    Ignore,
}

/// The front's decision for one text frame, given the connection's session.
pub(super) fn decide(raw: &str, session: Option<&Session>, now: u64) -> Step {
    let msg = match ClientMessage::from_json(raw) {
        Ok(m) => m,
        Err(e) => return Step::Reply(notice(format!("invalid: cannot parse the message: {e}"))),
    };
    let refused = |sid: Cow<'_, SubscriptionId>, m: String| {
        Step::Reply(text(RelayMessage::Closed {
            subscription_id: sid,
            message: Cow::Owned(m),
        }))
    };
    let neg_refused = |sid: Cow<'_, SubscriptionId>, m: String| {
        Step::Reply(text(RelayMessage::NegErr {
            subscription_id: sid,
            message: Cow::Owned(m),
        }))
    };
    let Some(s) = session else {
        return match msg {
            ClientMessage::Auth(event) => Step::Auth(Box::new(event.into_owned())),
            ClientMessage::Event(event) => Step::Reply(ok(&event, false, AUTH_FIRST.into())),
            ClientMessage::Req { subscription_id, .. } | ClientMessage::Count { subscription_id, .. } => {
                refused(subscription_id, AUTH_FIRST.into())
            }
            ClientMessage::Close(_) | ClientMessage::NegClose { .. } => Step::Ignore,
            _ => Step::Reply(notice(AUTH_FIRST.to_string())),
        };
    };
    match msg {
        ClientMessage::Auth(event) => Step::Auth(Box::new(event.into_owned())),
        ClientMessage::Event(event) => match policy::check_publish(&event, s, now) {
            Ok(()) if event.kind == Kind::from(KIND_PRESENCE) => Step::Presence(Box::new(event.into_owned())),
            Ok(()) => Step::Forward(Out::Event(event.id)),
            Err(r) => Step::Reply(ok(&event, false, r.to_string())),
        },
        ClientMessage::Req {
            subscription_id,
            filters,
        } => match s.check(now) {
            Ok(()) => {
                let filters: Vec<Filter> = filters.into_iter().map(Cow::into_owned).collect();
                Step::Forward(Out::Req {
                    id: subscription_id.into_owned(),
                    replay: filters.iter().filter(|f| asks_for_presence(f)).cloned().collect(),
                    live: filters
                        .iter()
                        .filter(|f| may_match_presence(f))
                        .cloned()
                        .collect(),
                    filters,
                })
            }
            Err(r) => refused(subscription_id, r.to_string()),
        },
        ClientMessage::Count {
            subscription_id,
            filter,
        } => match s.check(now) {
            Ok(()) if author_only::may_reveal(&filter, &s.public_key()) => {
                refused(subscription_id, author_only::REFUSED.into())
            }
            Ok(()) => Step::Forward(Out::Count {
                id: subscription_id.into_owned(),
                filter: filter.into_owned(),
            }),
            Err(r) => refused(subscription_id, r.to_string()),
        },
        ClientMessage::NegOpen {
            subscription_id,
            filter,
            ..
        } => match s.check(now) {
            Ok(()) if author_only::may_reveal(&filter, &s.public_key()) => {
                neg_refused(subscription_id, author_only::REFUSED.into())
            }
            Ok(()) => Step::Forward(Out::NegOpen(subscription_id.into_owned())),
            Err(r) => neg_refused(subscription_id, r.to_string()),
        },
        ClientMessage::NegMsg { subscription_id, .. } => match s.check(now) {
            Ok(()) => Step::Forward(Out::NegMsg),
            Err(r) => neg_refused(subscription_id, r.to_string()),
        },
        ClientMessage::Close(id) => Step::Forward(Out::Close(id.into_owned())),
        ClientMessage::NegClose { subscription_id } => {
            Step::Forward(Out::NegClose(subscription_id.into_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Admitted;
    use buzz_contract::nip_oa::AuthTag;
    use nostr_sdk::prelude::Keys;
    use serde_json::{Value, json};

    fn reply(step: Step) -> Value {
        match step {
            Step::Reply(Message::Text(t)) => serde_json::from_str(&t).unwrap(),
            _ => panic!("not a reply"),
        }
    }

    #[test]
    fn an_expired_agent_is_refused_every_read_including_negentropy() {
        let owner = Keys::generate();
        let agent = Keys::generate();
        let tag = AuthTag::mint(&owner, &agent.public_key().to_hex(), "created_at<100").unwrap();
        let s = Session::new(agent.public_key().to_hex(), Admitted::Agent(tag));
        let frames = [
            (json!(["REQ", "r", {}]), "CLOSED"),
            (json!(["COUNT", "c", {}]), "CLOSED"),
            (json!(["NEG-OPEN", "n", {}, "61"]), "NEG-ERR"),
            (json!(["NEG-MSG", "n", "61"]), "NEG-ERR"),
        ];
        for (frame, answer) in frames {
            let m = reply(decide(&frame.to_string(), Some(&s), 100));
            assert_eq!(m[0], answer, "{frame}: {m}");
            assert!(m[2].as_str().unwrap().starts_with("restricted:"), "{m}");
        }
        // In time, the same frames pass, and the subscriptions are tracked.
        assert!(matches!(
            decide(&json!(["REQ", "r", {}]).to_string(), Some(&s), 99),
            Step::Forward(Out::Req { .. })
        ));
        assert!(matches!(
            // (A filter that cannot see another's kind 30179: author_only.)
            decide(
                &json!(["NEG-OPEN", "n", {"kinds": [9]}, "61"]).to_string(),
                Some(&s),
                99
            ),
            Step::Forward(Out::NegOpen(_))
        ));
        assert!(matches!(
            decide(&json!(["CLOSE", "r"]).to_string(), Some(&s), 100),
            Step::Forward(Out::Close(_))
        ));
    }

    #[test]
    fn a_future_dated_presence_is_answered_ok_false_and_a_current_one_is_the_fronts() {
        use nostr_relay_builder::prelude::{EventBuilder, Timestamp};
        let owner = Keys::generate();
        let s = Session::new(owner.public_key().to_hex(), Admitted::Owner);
        let now = 1_800_000_000;
        let presence = |at: u64| {
            let e = EventBuilder::new(Kind::from(KIND_PRESENCE), "online")
                .custom_created_at(Timestamp::from(at))
                .sign_with_keys(&owner)
                .unwrap();
            json!(["EVENT", e]).to_string()
        };
        let m = reply(decide(&presence(now + 3600), Some(&s), now));
        assert_eq!((m[0].as_str(), m[2].as_bool()), (Some("OK"), Some(false)), "{m}");
        assert!(m[3].as_str().unwrap().starts_with("invalid:"), "{m}");
        assert!(matches!(decide(&presence(now), Some(&s), now), Step::Presence(_)));
    }

    #[test]
    fn before_auth_only_auth_gets_through() {
        let m = reply(decide(&json!(["NEG-OPEN", "n", {}, "61"]).to_string(), None, 0));
        assert_eq!(m[0], "NOTICE");
        assert!(m[1].as_str().unwrap().starts_with("auth-required:"));
        let m = reply(decide(&json!(["REQ", "r", {}]).to_string(), None, 0));
        assert_eq!((m[0].as_str(), m[1].as_str()), (Some("CLOSED"), Some("r")));
        assert!(matches!(
            decide(&json!(["CLOSE", "r"]).to_string(), None, 0),
            Step::Ignore
        ));
        let m = reply(decide("not json", None, 0));
        assert!(m[1].as_str().unwrap().starts_with("invalid:"), "{m}");
    }
}
