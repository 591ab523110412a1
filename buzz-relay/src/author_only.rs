//! Kinds the relay serves only to their author (issue 52 item 2): the
//! owner's private agent records, kind 30179
//! ([`buzz_contract::managed_record`]), as upstream's relay serves them
//! (its `AUTHOR_ONLY_KINDS`). Their content is sealed to the owner, but
//! their existence, their coordinates and how many there are say which
//! agents the owner has and when they changed: an agent's session (the
//! only other kind of session this relay admits) learns none of it.
//!
//! - **REQ**, stored and live: an EVENT of such a kind by another author
//!   is not delivered ([`withheld`]); the rest of the subscription is.
//! - **COUNT** and **NEG-OPEN**: a filter that could match such an event
//!   of another author is refused ([`may_reveal`]), since a count or a set
//!   of ids would tell what a REQ withholds.
//!
//! Pure: the library's message or the client's filter in, the decision out.

use buzz_contract::managed_record;
use nostr_relay_builder::prelude::{Filter, JsonUtil, Kind, PublicKey, RelayMessage};

/// The kinds served only to their author.
pub const KINDS: &[u16] = &[managed_record::KIND];

/// The refusal of a COUNT or NEG-OPEN that could reveal one.
pub const REFUSED: &str = "restricted: kind 30179 (the owner's private agent records) is served only to its author: name kinds without it, or authors with only your key";

/// Whether the library's message `raw`, bound for the session of `key`
/// (hex), is an EVENT of an author-only kind by someone else.
pub fn withheld(raw: &str, key: &str) -> bool {
    if !raw.starts_with("[\"EVENT\"") || !KINDS.iter().any(|k| raw.contains(&k.to_string())) {
        return false;
    }
    match RelayMessage::from_json(raw) {
        Ok(RelayMessage::Event { event, .. }) => {
            KINDS.contains(&event.kind.as_u16()) && event.pubkey.to_hex() != key
        }
        // Not an event we can read: never ours to deliver blind.
        _ => true,
    }
}

/// Whether `filter`, of the session of `key`, could match an author-only
/// event of another author: it names such a kind or no kind, and does not
/// limit the authors to `key`.
pub fn may_reveal(filter: &Filter, key: &PublicKey) -> bool {
    let kind_may = match &filter.kinds {
        None => true,
        Some(kinds) => KINDS.iter().any(|k| kinds.contains(&Kind::from(*k))),
    };
    let only_own = filter
        .authors
        .as_ref()
        .is_some_and(|a| !a.is_empty() && a.iter().all(|p| p == key));
    kind_may && !only_own
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_relay_builder::prelude::{EventBuilder, Keys, SubscriptionId};
    use std::borrow::Cow;

    fn event_msg(by: &Keys, kind: u16) -> String {
        let e = EventBuilder::new(Kind::from(kind), "sealed")
            .sign_with_keys(by)
            .unwrap();
        RelayMessage::Event {
            subscription_id: Cow::Owned(SubscriptionId::new("s")),
            event: Cow::Owned(e),
        }
        .as_json()
    }

    #[test]
    fn another_authors_record_is_withheld_and_the_authors_own_is_not() {
        let (owner, agent) = (Keys::generate(), Keys::generate());
        let record = event_msg(&owner, 30179);
        assert!(withheld(&record, &agent.public_key().to_hex()));
        assert!(!withheld(&record, &owner.public_key().to_hex()));
        assert!(!withheld(&event_msg(&owner, 9), &agent.public_key().to_hex()));
        assert!(!withheld("[\"EOSE\",\"s\"]", &agent.public_key().to_hex()));
    }

    #[test]
    fn a_count_or_negentropy_that_could_see_anothers_record_is_refused() {
        let (me, other) = (Keys::generate(), Keys::generate());
        let me_pk = me.public_key();
        let cases = [
            (Filter::new(), true),
            (Filter::new().kind(Kind::from(30179)), true),
            (Filter::new().kinds([Kind::from(9), Kind::from(30179)]), true),
            (
                Filter::new().kind(Kind::from(30179)).author(other.public_key()),
                true,
            ),
            (
                Filter::new()
                    .kind(Kind::from(30179))
                    .authors([me_pk, other.public_key()]),
                true,
            ),
            (Filter::new().kind(Kind::from(30179)).author(me_pk), false),
            (Filter::new().author(me_pk), false),
            (Filter::new().kind(Kind::from(9)), false),
            (Filter::new().kinds([Kind::from(9), Kind::from(30178)]), false),
        ];
        for (f, want) in cases {
            assert_eq!(may_reveal(&f, &me_pk), want, "{f:?}");
        }
    }
}
