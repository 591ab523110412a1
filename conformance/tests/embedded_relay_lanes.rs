//! The embedded relay's clients share a few library sessions (issue 49
//! item 4, `buzz_relay`'s `lanes` and `routes`), seen from independent
//! clients over raw WebSocket frames: with every client on one lane, two
//! clients' subscriptions of one name stay apart, a CLOSE or a client's
//! leaving ends only its own, a client that stops reading is dropped
//! without holding up the others, and the bounds the library applied per
//! session (events per minute, subscription ids) are still per client.

mod embedded_relay_client;

use buzz_relay::Limits;
use embedded_relay_client::*;
use nostr::{EventBuilder, Keys, Kind, Tag};
use serde_json::{Value, json};
use std::time::Duration;

/// Every client on one library session.
fn one_lane() -> Limits {
    Limits {
        lanes: 1,
        ..Limits::default()
    }
}

fn tagged(keys: &Keys, t: &str, content: &str) -> nostr::Event {
    EventBuilder::new(Kind::from(1u16), content)
        .tags([Tag::parse(["t", t]).unwrap()])
        .sign_with_keys(keys)
        .unwrap()
}

/// The next `EVENT` for subscription `sub`, with what came before it.
async fn next_event(ws: &mut Ws, sub: &str) -> (Value, Vec<Value>) {
    until(ws, "an EVENT", |m| m[0] == "EVENT" && m[1] == sub).await
}

#[tokio::test]
async fn clients_on_one_library_session_keep_their_subscriptions_apart() {
    let owner = Keys::generate();
    let r = relay_with(&owner, one_lane(), None).await;
    let (mut a, _) = authed(&r, &owner, None).await;
    let (mut b, _) = authed(&r, &owner, None).await;
    let (mut c, _) = authed(&r, &owner, None).await;
    assert!(
        req(&mut a, "s", json!({"kinds": [1], "#t": ["a"]}))
            .await
            .1
            .is_none()
    );
    assert!(
        req(&mut b, "s", json!({"kinds": [1], "#t": ["b"]}))
            .await
            .1
            .is_none()
    );

    let (ea, eb) = (tagged(&owner, "a", "for a"), tagged(&owner, "b", "for b"));
    assert_eq!(publish(&mut c, &ea).await[2], true);
    assert_eq!(publish(&mut c, &eb).await[2], true);
    let (m, _) = next_event(&mut a, "s").await;
    assert_eq!(m[2]["id"], ea.id.to_hex(), "a's \"s\" gets a's event first");
    let (m, _) = next_event(&mut b, "s").await;
    assert_eq!(m[2]["id"], eb.id.to_hex(), "b's \"s\" never gets a's event");

    // A COUNT comes back to its own client under its own id.
    send(&mut b, json!(["COUNT", "s", {"kinds": [1], "#t": ["a"]}])).await;
    let (m, _) = until(&mut b, "the COUNT", |m| m[0] == "COUNT").await;
    assert_eq!(m, json!(["COUNT", "s", {"count": 1}]));

    // a closes its "s": the next event for it reaches nobody, b's goes on.
    send(&mut a, json!(["CLOSE", "s"])).await;
    assert!(req(&mut a, "sync", json!({"kinds": [7]})).await.1.is_none());
    let (ea2, eb2) = (
        tagged(&owner, "a", "late for a"),
        tagged(&owner, "b", "late for b"),
    );
    assert_eq!(publish(&mut c, &ea2).await[2], true);
    assert_eq!(publish(&mut c, &eb2).await[2], true);
    let (m, _) = next_event(&mut b, "s").await;
    assert_eq!(m[2]["id"], eb2.id.to_hex());
    let (seen, _) = req(&mut a, "after", json!({"ids": [ea2.id.to_hex()]})).await;
    assert_eq!(seen.len(), 1, "the event is stored");
    let stray = tokio::time::timeout(Duration::from_millis(300), next(&mut a)).await;
    assert!(
        !matches!(stray, Ok(Some(ref m)) if m[1] == "s"),
        "a closed subscription gets nothing: {stray:?}"
    );

    // b leaves; a's new "s" on the same session still works.
    drop(b);
    assert!(
        req(&mut a, "s", json!({"kinds": [1], "#t": ["b"]}))
            .await
            .1
            .is_none()
    );
    let eb3 = tagged(&owner, "b", "after b left");
    assert_eq!(publish(&mut c, &eb3).await[2], true);
    let (m, _) = next_event(&mut a, "s").await;
    assert_eq!(m[2]["id"], eb3.id.to_hex());
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_and_the_others_on_its_session_go_on() {
    let owner = Keys::generate();
    let limits = Limits {
        client_queue: 2,
        slow_client: Duration::from_millis(300),
        ..one_lane()
    };
    let r = relay_with(&owner, limits, None).await;
    let (mut slow, _) = authed(&r, &owner, None).await;
    assert!(req(&mut slow, "all", json!({"kinds": [1]})).await.1.is_none());
    // `slow` reads nothing from here on; each event below is sent to it.
    let (mut fast, _) = authed(&r, &owner, None).await;
    let body = "x".repeat(200_000);
    let all = async {
        for i in 0..200 {
            let e = tagged(&owner, "bulk", &format!("{i} {body}"));
            assert_eq!(publish(&mut fast, &e).await[2], true, "event {i}");
        }
    };
    // Far more than the loopback socket buffers hold: without the drop,
    // the shared session would wait on `slow` for good.
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("the other client's events are all answered while one client reads nothing");

    let drained = async {
        let mut last = None;
        while let Some(m) = next(&mut slow).await {
            last = Some(m);
        }
        last
    };
    let last = tokio::time::timeout(Duration::from_secs(30), drained)
        .await
        .expect("the dropped client's socket ends")
        .expect("it got frames");
    assert_eq!(
        last[0],
        "NOTICE",
        "{}",
        &last.to_string()[..120.min(last.to_string().len())]
    );
    assert!(
        text_of(&last).starts_with("error: this connection fell behind"),
        "{last}"
    );
}

#[tokio::test]
async fn events_per_minute_and_subscription_ids_are_bounded_per_client() {
    let owner = Keys::generate();
    let limits = Limits {
        events_per_minute: 2,
        ..one_lane()
    };
    let r = relay_with(&owner, limits, None).await;
    let (mut a, _) = authed(&r, &owner, None).await;
    let (mut b, _) = authed(&r, &owner, None).await;
    for i in 0..2 {
        assert_eq!(publish(&mut a, &note(&owner, 1, &format!("a{i}"))).await[2], true);
    }
    let ok = publish(&mut a, &note(&owner, 1, "a2")).await;
    assert_eq!(ok[2], false, "{ok}");
    assert!(text_of(&ok).starts_with("rate-limited:"), "{ok}");
    let ok = publish(&mut b, &note(&owner, 1, "b0")).await;
    assert_eq!(
        ok[2], true,
        "another client on the same session has its own budget: {ok}"
    );

    let long = "s".repeat(251);
    let (_, closed) = req(&mut b, &long, json!({"kinds": [1]})).await;
    let closed = closed.expect("a subscription id over 250 characters is refused");
    assert!(text_of(&closed).starts_with("invalid:"), "{closed}");
    let (_, closed) = req(&mut b, &long[..250], json!({"kinds": [1]})).await;
    assert!(closed.is_none(), "250 characters are fine: {closed:?}");
}
