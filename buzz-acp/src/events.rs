//! Outbound event shapes (wire-facts §2 NIP-42, §3 presence, §4 replies,
//! typing and the queued reaction). Tag construction is pure; signing uses
//! the agent keys only.
//!
//! Every content the harness signs is a [`Published`]: scrubbed by the one
//! scrub ([`crate::scrub`], issue 30 item 1), or a constant of this crate.
//!
//! [`TurnText`] holds a turn's streamed answer within the reply bound from
//! the first chunk on (review b30b1a0 #15): a chatty or hostile agent cannot
//! grow the harness's memory through a turn, and a cut answer says so.

use crate::inbound::InboundEvent;
use crate::scrub::Published;
use buzz_contract::nip_oa::AuthTag;
use buzz_contract::presence::{
    KIND_AUTH, KIND_CHANNEL_MESSAGE, KIND_PRESENCE, KIND_REACTION, KIND_TYPING, QUEUED_REACTION, TAG_RUN,
    TAG_SEQ,
};
use nostr_sdk::prelude::{Event, EventBuilder, Keys, Kind, PublicKey, RelayUrl, Tag, Timestamp, nip44};

/// Most bytes of a message's content (wire-facts §4: 64 KiB).
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Truncates to at most 64 KiB on a character boundary.
pub fn clamp_content(s: &str) -> &str {
    if s.len() <= MAX_CONTENT_BYTES {
        return s;
    }
    let mut end = MAX_CONTENT_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What a reply cut at [`MAX_CONTENT_BYTES`] ends with.
pub const CUT_MARKER: &str = "\n\n[the answer was longer than 64 KiB and was cut here]";

/// What separates two text blocks of one answer: a blank line, the way a
/// person writes paragraphs (issue "text blocks are run together").
pub const BLOCK_SEPARATOR: &str = "\n\n";

/// The text of one turn, never longer than [`MAX_CONTENT_BYTES`]: chunks are
/// appended until the next one would not fit, then the text is cut on a
/// character boundary, ends in [`CUT_MARKER`] and takes nothing more.
///
/// Chunks of one text block are joined as they come; a new block (a new
/// message id, or text after a tool call) begins after [`BLOCK_SEPARATOR`],
/// written only once the next block brings text, and never twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnText {
    text: String,
    cut: bool,
    block_ended: bool,
}

impl TurnText {
    /// Ends the current text block: the next text starts a new paragraph.
    pub fn end_block(&mut self) {
        self.block_ended = true;
    }

    /// Appends a streamed chunk within the bound.
    pub fn push(&mut self, chunk: &str) {
        if self.cut || chunk.is_empty() {
            return;
        }
        if std::mem::take(&mut self.block_ended) && !self.text.trim().is_empty() {
            let have = self.text.len() - self.text.trim_end_matches('\n').len();
            let sep = BLOCK_SEPARATOR
                .len()
                .saturating_sub(have + (chunk.len() - chunk.trim_start_matches('\n').len()));
            let sep = &BLOCK_SEPARATOR[..sep];
            self.push_bounded(sep);
            if self.cut {
                return;
            }
        }
        self.push_bounded(chunk);
    }

    fn push_bounded(&mut self, chunk: &str) {
        if self.text.len() + chunk.len() <= MAX_CONTENT_BYTES {
            self.text.push_str(chunk);
            return;
        }
        let room = MAX_CONTENT_BYTES - CUT_MARKER.len();
        // Keep what fits before the marker: first of the text so far, then of the chunk.
        if self.text.len() > room {
            let end = floor_char_boundary(&self.text, room);
            self.text.truncate(end);
        } else {
            let end = floor_char_boundary(chunk, room - self.text.len());
            self.text.push_str(&chunk[..end]);
        }
        self.text.push_str(CUT_MARKER);
        self.cut = true;
    }

    /// True once the text was cut.
    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// The text (with the marker when cut).
    pub fn into_string(self) -> String {
        self.text
    }
}

fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut end = at.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// Reply tags: `h`, NIP-10 marked `e` tags and the asker's `p` tag.
/// A direct reply is `["e", parent, "", "reply"]`; a reply inside a thread
/// carries `["e", root, "", "root"]` and `["e", parent, "", "reply"]`.
pub fn reply_tags(mention: &InboundEvent, channel: &str, p_tag_asker: bool) -> Vec<Vec<String>> {
    let mut tags = Vec::new();
    if !channel.is_empty() {
        tags.push(vec!["h".to_string(), channel.to_string()]);
    }
    if let Some(root) = mention.thread_root().filter(|r| *r != mention.id) {
        tags.push(vec!["e".into(), root.to_string(), String::new(), "root".into()]);
    }
    tags.push(vec![
        "e".into(),
        mention.id.clone(),
        String::new(),
        "reply".into(),
    ]);
    if p_tag_asker {
        tags.push(vec!["p".into(), mention.author.clone()]);
    }
    tags
}

/// Presence tags: exactly `run` and `seq` (wire-facts §3).
pub fn presence_tags(run: &str, seq: u64) -> Vec<Vec<String>> {
    vec![
        vec![TAG_RUN.into(), run.into()],
        vec![TAG_SEQ.into(), seq.to_string()],
    ]
}

/// Typing tags: channel `h` and the thread `e` (wire-facts §4).
pub fn typing_tags(mention: &InboundEvent, channel: &str) -> Vec<Vec<String>> {
    let mut tags = Vec::new();
    if !channel.is_empty() {
        tags.push(vec!["h".to_string(), channel.to_string()]);
    }
    let thread = mention.thread_root().unwrap_or(&mention.id).to_string();
    tags.push(vec!["e".into(), thread]);
    tags
}

/// Tags of the reaction to a queued mention (NIP-25): the channel's `h`
/// (so a channel-scoped relay routes it), then `e` and `p` of the reacted
/// event and its kind in `k`.
pub fn reaction_tags(mention: &InboundEvent, channel: &str) -> Vec<Vec<String>> {
    let mut tags = Vec::new();
    if !channel.is_empty() {
        tags.push(vec!["h".to_string(), channel.to_string()]);
    }
    tags.push(vec!["e".into(), mention.id.clone()]);
    tags.push(vec!["p".into(), mention.author.clone()]);
    tags.push(vec!["k".into(), mention.kind.to_string()]);
    tags
}

fn to_tags(tags: Vec<Vec<String>>) -> Vec<Tag> {
    tags.into_iter().filter_map(|t| Tag::parse(t).ok()).collect()
}

/// Signs an event of `kind` with `content` and `tags`, created now.
pub fn sign(keys: &Keys, kind: u16, content: &Published, tags: Vec<Vec<String>>) -> Event {
    EventBuilder::new(Kind::from(kind), clamp_content(content.as_str()))
        .tags(to_tags(tags))
        .custom_created_at(Timestamp::now())
        .sign_with_keys(keys)
        .expect("signing with in-memory keys cannot fail")
}

/// An event of `kind` whose content only `to` can read (issue 34: usage
/// and observer frames): `content` NIP-44 v2 encrypted from the agent's
/// key to `to`, signed by the agent. `None` when the plaintext is over
/// NIP-44's bound (the callers bound it first).
pub fn sealed(
    keys: &Keys,
    kind: u16,
    content: &Published,
    to: &PublicKey,
    tags: Vec<Vec<String>>,
) -> Option<Event> {
    let sealed = nip44::encrypt(keys.secret_key(), to, content.as_str(), nip44::Version::V2).ok()?;
    EventBuilder::new(Kind::from(kind), sealed)
        .tags(to_tags(tags))
        .custom_created_at(Timestamp::now())
        .sign_with_keys(keys)
        .ok()
}

/// A presence event (kind 20001, bare content, run/seq tags).
/// A presence event; `stop` (the last `offline` of a run) adds the
/// `["stop", reason]` tag a waker reads (issue 33), `sleeps_at` (a dozing
/// harness's `away`) the `["sleeps_at", unix seconds]` a launcher shows
/// (issue 50).
pub fn presence(
    keys: &Keys,
    state: &'static str,
    run: &str,
    seq: u64,
    stop: Option<buzz_contract::wake::StopReason>,
    sleeps_at: Option<u64>,
) -> Event {
    let mut tags = presence_tags(run, seq);
    if let Some(r) = stop {
        tags.push(vec![buzz_contract::wake::TAG_STOP.into(), r.as_str().into()]);
    }
    if let Some(at) = sleeps_at {
        tags.push(vec![
            buzz_contract::presence::TAG_SLEEPS_AT.into(),
            at.to_string(),
        ]);
    }
    sign(keys, KIND_PRESENCE, &Published::fixed(state), tags)
}

/// A kind 9 reply to `mention`.
pub fn reply(keys: &Keys, mention: &InboundEvent, channel: &str, text: &Published, p_tag: bool) -> Event {
    sign(
        keys,
        KIND_CHANNEL_MESSAGE,
        text,
        reply_tags(mention, channel, p_tag),
    )
}

/// A kind 9 question to the owner under `mention` (`ask-owner`): a reply
/// that p-tags the owner, whoever asked.
pub fn question(keys: &Keys, mention: &InboundEvent, channel: &str, text: &Published, owner: &str) -> Event {
    let mut tags = reply_tags(mention, channel, false);
    tags.push(vec!["p".into(), owner.to_string()]);
    sign(keys, KIND_CHANNEL_MESSAGE, text, tags)
}

/// The `👀` reaction (kind 7) to a mention that was accepted into the queue.
pub fn queued_reaction(keys: &Keys, mention: &InboundEvent, channel: &str) -> Event {
    sign(
        keys,
        KIND_REACTION,
        &Published::fixed(QUEUED_REACTION),
        reaction_tags(mention, channel),
    )
}

/// A typing indicator (kind 20002).
pub fn typing(keys: &Keys, mention: &InboundEvent, channel: &str) -> Event {
    sign(
        keys,
        KIND_TYPING,
        &Published::fixed(""),
        typing_tags(mention, channel),
    )
}

/// The NIP-42 answer: kind 22242 with exactly one `relay` and one
/// `challenge` tag, plus the NIP-OA `auth` tag when one is configured.
pub fn auth(keys: &Keys, relay: &RelayUrl, challenge: &str, auth_tag: Option<&AuthTag>) -> Event {
    let mut tags = vec![
        Tag::parse(["relay", relay.as_str()]).expect("2-element tag"),
        Tag::parse(["challenge", challenge]).expect("2-element tag"),
    ];
    if let Some(t) = auth_tag {
        tags.push(t.to_tag());
    }
    EventBuilder::new(Kind::from(KIND_AUTH), "")
        .tags(tags)
        .sign_with_keys(keys)
        .expect("signing with in-memory keys cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mention(tags: Vec<Vec<String>>) -> InboundEvent {
        InboundEvent {
            id: "m".repeat(64),
            author: "b".repeat(64),
            kind: 9,
            content: "hi".into(),
            tags,
            created_at: 0,
        }
    }

    #[test]
    fn direct_reply_tags() {
        let t = reply_tags(&mention(vec![]), "c1", true);
        assert_eq!(
            t,
            vec![
                vec!["h".to_string(), "c1".into()],
                vec!["e".into(), "m".repeat(64), "".into(), "reply".into()],
                vec!["p".into(), "b".repeat(64)],
            ]
        );
        assert_eq!(reply_tags(&mention(vec![]), "c1", false).len(), 2);
    }

    #[test]
    fn nested_reply_tags() {
        let m = mention(vec![vec!["e".into(), "r".repeat(64), "".into(), "root".into()]]);
        let t = reply_tags(&m, "c1", true);
        assert_eq!(
            t[1],
            vec!["e".to_string(), "r".repeat(64), "".into(), "root".into()]
        );
        assert_eq!(
            t[2],
            vec!["e".to_string(), "m".repeat(64), "".into(), "reply".into()]
        );
    }

    #[test]
    fn queued_reaction_shape() {
        let k = Keys::generate();
        let e = queued_reaction(&k, &mention(vec![]), "c1");
        assert_eq!(e.kind, Kind::from(7));
        assert_eq!(e.content, "👀");
        let tags: Vec<Vec<String>> = e.tags.iter().map(|t| t.as_slice().to_vec()).collect();
        assert_eq!(
            tags,
            vec![
                vec!["h".to_string(), "c1".into()],
                vec!["e".into(), "m".repeat(64)],
                vec!["p".into(), "b".repeat(64)],
                vec!["k".into(), "9".into()],
            ]
        );
        assert!(e.verify().is_ok());
        assert_eq!(
            reaction_tags(&mention(vec![]), "").len(),
            3,
            "no h without a channel"
        );
    }

    use buzz_contract::wake::StopReason;

    #[test]
    fn presence_and_auth_shapes() {
        let k = Keys::generate();
        let e = presence(&k, "online", &"ab".repeat(16), 3, None, None);
        assert_eq!(e.kind, Kind::from(20001));
        assert_eq!(e.content, "online");
        assert_eq!(e.tags.len(), 2);
        let last = presence(&k, "offline", &"ab".repeat(16), 4, Some(StopReason::Idle), None);
        assert_eq!(last.tags.len(), 3);
        assert_eq!(last.tags.iter().last().unwrap().as_slice(), ["stop", "idle"]);
        let away = presence(&k, "away", &"ab".repeat(16), 5, None, Some(1_800_000_000));
        assert_eq!(
            away.tags.iter().last().unwrap().as_slice(),
            ["sleeps_at", "1800000000"]
        );
        let owner = Keys::generate();
        let tag = AuthTag::mint(&owner, &k.public_key().to_hex(), "").unwrap();
        let url = RelayUrl::parse("ws://127.0.0.1:1").unwrap();
        let a = auth(&k, &url, "chal", Some(&tag));
        assert_eq!(a.kind, Kind::from(22242));
        let names: Vec<&str> = a.tags.iter().map(|t| t.as_slice()[0].as_str()).collect();
        assert_eq!(names, vec!["relay", "challenge", "auth"]);
        assert_eq!(
            a.tags.iter().last().unwrap().as_slice()[1],
            owner.public_key().to_hex()
        );
        assert!(a.verify().is_ok());
        assert_eq!(auth(&k, &url, "chal", None).tags.len(), 2);
    }

    #[test]
    fn content_clamps_on_char_boundary() {
        let s = "é".repeat(40_000);
        let c = clamp_content(&s);
        assert!(c.len() <= MAX_CONTENT_BYTES && c.is_char_boundary(c.len()));
    }

    #[test]
    fn turn_text_stays_within_the_reply_bound_and_says_it_was_cut() {
        let mut t = TurnText::default();
        t.push("hello ");
        t.push("world");
        assert!(!t.is_cut());
        assert_eq!(t.clone().into_string(), "hello world");
        // A chatty agent: 10 000 chunks of 100 bytes with multi-byte characters.
        let chunk = "é".repeat(50);
        for _ in 0..10_000 {
            t.push(&chunk);
        }
        assert!(t.is_cut());
        let s = t.into_string();
        assert!(s.len() <= MAX_CONTENT_BYTES, "{}", s.len());
        assert!(s.starts_with("hello world"));
        assert!(s.ends_with(CUT_MARKER));
        assert_eq!(clamp_content(&s), s, "publishing never cuts the marker off");
        // One oversized chunk at once is cut the same way.
        let mut t = TurnText::default();
        t.push(&"x".repeat(3 * MAX_CONTENT_BYTES));
        let s = t.into_string();
        assert_eq!(s.len(), MAX_CONTENT_BYTES);
        assert!(s.ends_with(CUT_MARKER));
        // Exactly the bound fits uncut.
        let mut t = TurnText::default();
        t.push(&"y".repeat(MAX_CONTENT_BYTES));
        assert!(!t.is_cut());
    }

    #[test]
    fn text_blocks_are_separated_by_one_blank_line() {
        let text = |steps: &[Option<&str>]| {
            let mut t = TurnText::default();
            for s in steps {
                match s {
                    Some(c) => t.push(c),
                    None => t.end_block(),
                }
            }
            t.into_string()
        };
        // The issue's reply: two blocks around a tool call.
        assert_eq!(
            text(&[
                Some("I'll create "),
                Some("the file."),
                None,
                Some("Done: proof.txt written.")
            ]),
            "I'll create the file.\n\nDone: proof.txt written."
        );
        // Never doubled: the agent's own newlines count toward the blank line.
        assert_eq!(text(&[Some("a\n"), None, Some("b")]), "a\n\nb");
        assert_eq!(text(&[Some("a\n\n"), None, Some("b")]), "a\n\nb");
        assert_eq!(text(&[Some("a"), None, Some("\nb")]), "a\n\nb");
        assert_eq!(
            text(&[Some("a"), None, None, Some(""), None, Some("b")]),
            "a\n\nb"
        );
        // Nothing before the first block, nothing after the last.
        assert_eq!(text(&[None, Some("a"), None]), "a");
        // A separator never breaks the bound.
        let mut t = TurnText::default();
        t.push(&"z".repeat(MAX_CONTENT_BYTES - 1));
        t.end_block();
        t.push("w");
        assert!(t.is_cut());
        assert!(t.into_string().len() <= MAX_CONTENT_BYTES);
    }
}
