//! How a conversation reads (issue 34 item 2, `buzz-launcher log`): the
//! messages of an agent's channel as the launcher holds them ([`Said`]),
//! grouped by turn ([`turns`]) and written as a person reads them
//! ([`lines`]). Pure.
//!
//! A turn is a mention and every message of the agent that answers it
//! (its reply `e`-tags the mention: the answer, an error reply, an owner
//! question). A message of the agent that answers nothing in view (a note,
//! or a reply to a mention older than the look) stands alone. Turns are in
//! the order their mentions were sent, replies in the order they were.
//! Nostr times are whole seconds: two mentions of one second are in event
//! id order, so every look agrees, but that may not be the order they were
//! sent in. The owner's commands (`!shutdown`, `!cancel`, `!allow …`) are
//! shown as sent: they are part of what happened.

/// Who said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Owner,
    Agent,
    /// Anyone else: their pubkey, hex.
    Other(String),
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub id: String,
    pub who: Who,
    /// `created_at`, unix seconds.
    pub at: u64,
    /// The text, made safe for a terminal.
    pub text: String,
    /// The mention this message answers (its first `e` tag).
    pub reply_to: Option<String>,
}

/// A mention and its answers, or a message on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Turn { mention: Said, replies: Vec<Said> },
    Alone(Said),
}

impl Entry {
    fn first(&self) -> &Said {
        match self {
            Entry::Turn { mention, .. } => mention,
            Entry::Alone(s) => s,
        }
    }
}

/// The conversation in `said` (any order, duplicates allowed), by turn.
pub fn turns(mut said: Vec<Said>) -> Vec<Entry> {
    said.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
    said.dedup_by(|a, b| a.id == b.id);
    let (theirs, ours): (Vec<Said>, Vec<Said>) = said.into_iter().partition(|s| s.who != Who::Agent);
    let mut at = std::collections::HashMap::new();
    let mut out: Vec<Entry> = Vec::new();
    for mention in theirs {
        at.insert(mention.id.clone(), out.len());
        out.push(Entry::Turn {
            mention,
            replies: Vec::new(),
        });
    }
    for s in ours {
        match s.reply_to.as_ref().and_then(|m| at.get(m)).map(|i| &mut out[*i]) {
            Some(Entry::Turn { replies, .. }) => replies.push(s),
            _ => out.push(Entry::Alone(s)),
        }
    }
    out.sort_by(|a, b| (a.first().at, &a.first().id).cmp(&(b.first().at, &b.first().id)));
    out
}

/// `name` for the agent; "you" for the owner; a short key for anyone else.
pub fn speaker(who: &Who, agent: &str) -> String {
    match who {
        Who::Owner => "you".into(),
        Who::Agent => agent.into(),
        Who::Other(hex) => format!("{}…", &hex[..hex.len().min(12)]),
    }
}

/// One message as a line: `2026-12-03 10:00:01  you: text`, later lines
/// of the text indented under the first.
pub fn line(s: &Said, agent: &str, indent: &str) -> String {
    let when = nostr_sdk::prelude::Timestamp::from_secs(s.at)
        .to_human_datetime()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string();
    let head = format!("{indent}{when}  {}: ", speaker(&s.who, agent));
    let pad = " ".repeat(indent.len() + when.len() + 2);
    let mut text = s.text.trim_end().lines();
    let mut out = format!("{head}{}", text.next().unwrap_or(""));
    for l in text {
        out.push('\n');
        out.push_str(&pad);
        out.push_str(l);
    }
    out
}

/// The conversation as lines: each turn's mention, its replies indented
/// under it.
pub fn lines(entries: &[Entry], agent: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in entries {
        match e {
            Entry::Turn { mention, replies } => {
                out.push(line(mention, agent, ""));
                out.extend(replies.iter().map(|r| line(r, agent, "  ")));
            }
            Entry::Alone(s) => out.push(line(s, agent, "  ")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(id: &str, who: Who, at: u64, reply_to: Option<&str>) -> Said {
        Said {
            id: id.into(),
            who,
            at,
            text: format!("text {id}"),
            reply_to: reply_to.map(str::to_string),
        }
    }

    #[test]
    fn replies_go_under_their_mention_and_turns_keep_the_mentions_order() {
        let all = vec![
            said("r2", Who::Agent, 12, Some("m2")),
            said("m1", Who::Owner, 10, None),
            said("m2", Who::Owner, 11, None),
            said("r1", Who::Agent, 13, Some("m1")),
            said("n", Who::Agent, 14, Some("gone")),
            said("m1", Who::Owner, 10, None),
        ];
        let t = turns(all);
        assert_eq!(t.len(), 3, "{t:?}");
        let Entry::Turn { mention, replies } = &t[0] else {
            panic!()
        };
        assert_eq!((mention.id.as_str(), replies[0].id.as_str()), ("m1", "r1"));
        let Entry::Turn { mention, replies } = &t[1] else {
            panic!()
        };
        assert_eq!((mention.id.as_str(), replies[0].id.as_str()), ("m2", "r2"));
        assert!(matches!(&t[2], Entry::Alone(s) if s.id == "n"));
    }

    #[test]
    fn lines_name_the_speakers_and_indent_replies_and_their_later_lines() {
        let mut r = said("r", Who::Agent, 86_401, Some("m"));
        r.text = "first\nsecond".into();
        let l = lines(
            &turns(vec![said("m", Who::Other("ab".repeat(32)), 86_400, None), r]),
            "helper",
        );
        assert_eq!(
            l,
            vec![
                "1970-01-02 00:00:00  abababababab…: text m".to_string(),
                "  1970-01-02 00:00:01  helper: first\n                       second".to_string(),
            ]
        );
    }
}
