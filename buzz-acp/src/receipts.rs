//! Conversations that survive the process (issue 32 item 1): one receipt
//! per conversation, naming the ACP session that holds it, so the first
//! mention after a restart (an inactivity reap, a stop and start, a new
//! pod) goes on with the same conversation instead of a blank one.
//!
//! Pure: what a receipt is, whose it is, whether one may be used, and which
//! way a conversation is brought back. The files are [`store`].
//!
//! **A conversation** is a channel and an asker class ([`Conversation`]):
//! the owner's sessions and anyone else's are never shared (issue 30 item
//! 2), so neither are their receipts. Replies do not thread today; a thread
//! would be one more part of the key.
//!
//! **Scope** ([`Scope`]): a receipt is used only by the same relay, owner,
//! agent key, agent command and arguments, model, permission mode and
//! system prompt (by its SHA-256), the same gate for anyone else's
//! conversations (the respond-to mode, the others' policy and the
//! allowlist's digest), and in the same working directory, since
//! agents key their transcripts by cwd. A receipt whose scope differs is
//! never used: one context can never load another's. [`judge`] says which
//! parts differ, by name only (a log line names them; no value is logged).
//!
//! **Sealed** ([`MacKey`]; review afa2bf1 finding 1): a receipt is saved
//! with an HMAC-SHA256 over its bytes, keyed from the agent's secret key,
//! and a file whose MAC does not match is never used. A file a tool wrote
//! (a stranger's turn, a prompt-injected file) cannot name a session for
//! the owner's conversation, because no tool holds the key.
//!
//! **The way back** ([`first_step`]), the first that the agent offers:
//! `session/resume` (`sessionCapabilities.resume`: reconnects without a
//! replay), else `session/load` (`loadSession`: the agent replays the
//! history, which the harness does not publish), else a new session given
//! the channel's recent history as context. A preset whose load is known
//! broken upstream skips it ([`buzz_contract::agents::Continuity`]).

pub mod store;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The receipt format's version; any other is not read (1: before the MAC).
pub const VERSION: u32 = 2;

/// The key of a receipt's MAC, derived from the agent's secret key (its
/// bytes never leave this type; `Debug` shows none).
#[derive(Clone)]
pub struct MacKey([u8; 32]);

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(..)")
    }
}

type HmacSha256 = hmac::Hmac<Sha256>;

impl MacKey {
    /// The key for the agent whose secret key is `secret`: an HMAC of a
    /// fixed label under the secret, so the secret itself keys nothing else.
    pub fn of_agent(secret: &[u8; 32]) -> MacKey {
        MacKey(mac_of(secret, b"buzz-acp receipt mac v1"))
    }

    fn mac(&self, bytes: &[u8]) -> [u8; 32] {
        mac_of(&self.0, bytes)
    }
}

fn mac_of(key: &[u8], bytes: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut m =
        <HmacSha256 as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(bytes);
    m.finalize().into_bytes().into()
}

/// A receipt as it is on disk: the receipt and its MAC (hex).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sealed {
    receipt: Receipt,
    mac: String,
}

/// The bytes of `r` sealed with `key`.
pub fn seal(r: &Receipt, key: &MacKey) -> serde_json::Result<Vec<u8>> {
    let mac = hex(&key.mac(&serde_json::to_vec(r)?));
    serde_json::to_vec_pretty(&Sealed {
        receipt: r.clone(),
        mac,
    })
}

/// The receipt in sealed `bytes`, unverified (for a removal that only
/// compares its session).
pub fn unsealed(bytes: &[u8]) -> Option<Receipt> {
    serde_json::from_slice::<Sealed>(bytes).ok().map(|s| s.receipt)
}

/// What a receipt belongs to (see the module doc). Public keys in hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    pub relay: String,
    pub owner: String,
    pub agent: String,
    pub command: String,
    pub args: Vec<String>,
    pub model: Option<String>,
    pub permission_mode: Option<String>,
    pub system_prompt_sha256: Option<String>,
    /// For anyone else's conversation: who the gate admits and the others'
    /// policy ([`Scope::others_gate`]); a narrowed gate or policy never
    /// resumes what a wider one accumulated (review afa2bf1 finding 9).
    /// `None` for the owner's.
    pub gate: Option<String>,
}

impl Scope {
    /// The others' gate as a scope keeps it: the respond-to mode, the
    /// others' policy and a digest of the allowlist (never the keys).
    pub fn others_gate(respond_to: &str, policy: &str, allowlist: &[String]) -> String {
        let mut keys: Vec<&str> = allowlist.iter().map(String::as_str).collect();
        keys.sort_unstable();
        let digest = hex(&Sha256::digest(keys.join(",").as_bytes()));
        format!("{respond_to} {policy} {}", &digest[..16])
    }

    /// The digest a scope keeps of a system prompt (never the prompt).
    pub fn prompt_digest(prompt: Option<&str>) -> Option<String> {
        prompt.map(|p| hex(&Sha256::digest(p.as_bytes())))
    }

    /// The names of the parts in which `other` differs from `self`.
    pub fn differs(&self, other: &Scope) -> Vec<&'static str> {
        let parts = [
            ("relay", self.relay == other.relay),
            ("owner", self.owner == other.owner),
            ("agent", self.agent == other.agent),
            ("command", self.command == other.command),
            ("args", self.args == other.args),
            ("model", self.model == other.model),
            ("permission_mode", self.permission_mode == other.permission_mode),
            (
                "system_prompt",
                self.system_prompt_sha256 == other.system_prompt_sha256,
            ),
            ("gate", self.gate == other.gate),
        ];
        parts
            .into_iter()
            .filter(|(_, same)| !same)
            .map(|(n, _)| n)
            .collect()
    }
}

/// A channel and whose turns: the owner's (`owner`) or anyone else's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conversation {
    pub channel: String,
    pub owner: bool,
}

impl Conversation {
    /// The receipt's file name: a digest of the conversation, so that no
    /// channel id ever names a file.
    pub fn file_name(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"buzz-acp receipt\0");
        h.update(self.channel.as_bytes());
        h.update(if self.owner { b"\0owner" } else { b"\0other" });
        format!("{}.json", &hex(&h.finalize())[..32])
    }
}

/// One conversation's ACP session, as written after the session opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub version: u32,
    pub scope: Scope,
    pub channel: String,
    pub owner: bool,
    pub session_id: String,
    pub cwd: PathBuf,
    /// Unix seconds.
    pub saved_at: u64,
}

impl Receipt {
    pub fn new(
        scope: Scope,
        conv: &Conversation,
        session_id: String,
        cwd: PathBuf,
        saved_at: u64,
    ) -> Receipt {
        Receipt {
            version: VERSION,
            scope,
            channel: conv.channel.clone(),
            owner: conv.owner,
            session_id,
            cwd,
            saved_at,
        }
    }
}

/// What a receipt file says for a conversation under a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Ours: the session to bring back.
    Use(Box<Receipt>),
    /// Written under another scope or cwd: the parts that differ.
    Foreign(Vec<&'static str>),
    /// Not a receipt of this format, or of another conversation.
    Corrupt(String),
}

/// Judges a receipt file's bytes (see the module doc).
pub fn judge(bytes: &[u8], conv: &Conversation, scope: &Scope, cwd: &Path, key: &MacKey) -> Verdict {
    let sealed: Sealed = match serde_json::from_slice(bytes) {
        Ok(s) => s,
        Err(e) => return Verdict::Corrupt(format!("not a receipt of this format ({e})")),
    };
    let r = sealed.receipt;
    let Ok(plain) = serde_json::to_vec(&r) else {
        return Verdict::Corrupt("the receipt cannot be encoded again".into());
    };
    if !constant_time_eq(hex(&key.mac(&plain)).as_bytes(), sealed.mac.as_bytes()) {
        return Verdict::Corrupt("its MAC does not match: this agent's harness did not write it".into());
    }
    if r.version != VERSION {
        return Verdict::Corrupt(format!(
            "receipt version {} (this harness reads {VERSION})",
            r.version
        ));
    }
    if r.session_id.trim().is_empty() {
        return Verdict::Corrupt("the receipt names no session".into());
    }
    if r.channel != conv.channel || r.owner != conv.owner {
        return Verdict::Corrupt("the receipt is of another conversation".into());
    }
    let mut differs = scope.differs(&r.scope);
    if r.cwd != cwd {
        differs.push("cwd");
    }
    if differs.is_empty() {
        Verdict::Use(Box::new(r))
    } else {
        Verdict::Foreign(differs)
    }
}

/// A way to bring a conversation back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `session/resume` of the receipt's session.
    Resume,
    /// `session/load` of the receipt's session (the replay is not published).
    Load,
    /// `session/new`, with the channel's recent history as context.
    History,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Resume => "resume",
            Step::Load => "load",
            Step::History => "history",
        }
    }
}

/// What the agent's `initialize` offered for sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    /// `agentCapabilities.sessionCapabilities.resume`.
    pub resume: bool,
    /// `agentCapabilities.loadSession`.
    pub load: bool,
    /// `agentCapabilities.sessionCapabilities.close`.
    pub close: bool,
}

/// The first way back for a conversation with a usable receipt: resume,
/// else load (unless the preset's load is known broken), else history.
pub fn first_step(offers: Offers, load_works: bool) -> Step {
    match (offers.resume, offers.load && load_works) {
        (true, _) => Step::Resume,
        (false, true) => Step::Load,
        (false, false) => Step::History,
    }
}

/// Equal bytes, compared in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
