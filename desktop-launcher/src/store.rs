//! The state directory (issue 5 "Records and identity"): `$BUZZ_LAUNCHER_HOME`,
//! default `$XDG_DATA_HOME/buzz-launcher` (else `~/.local/share/buzz-launcher`).
//!
//! ```text
//! owner.key            owner nsec            0600
//! settings.json        launcher settings
//! agents/<name>.json   agent records (no key material)
//! agents/.changed      a fresh random token after every record write or delete
//! keys/<name>.nsec     agent private key     0600
//! keys/<name>.auth     NIP-OA auth tag       0600
//! keys/<name>.env      secret env (JSON object KEY → value: API keys)  0600
//! deploy/<name>.json   deploy bookkeeping (agent_id, generation, last error — redacted)
//! providers.lock.json  approved provider digests (strict mode)
//! staging/             only leftovers of older launchers (collected); the gate now stages in memory
//! logs/<name>.log      local harness output
//! work/<name>/         default workdir (provider and harness cwd) when the record names none
//! locks/               advisory locks (see [`crate::lock`])
//! relay.json           the embedded relay's port and identity (see [`crate::embedded`])
//! ```
//!
//! Secret env values (API keys) are kept in `keys/<name>.env`, beside the
//! agent's key and never in its record: [`Store::secret_env`],
//! [`Store::set_secret_env`].
//!
//! A deploy state's `last_error` is redacted where it is written, whoever
//! wrote it (issue 24 item 4 "never stores an unredacted `last_error`"): with
//! every secret of the state dir and every secret shape
//! ([`Store::save_deploy_state`]); and again where it is read, by shape, for
//! files written by older launchers ([`Store::deploy_state`]).
//!
//! Writes are atomic (a temp file unique to the call, then a rename), and a
//! read-modify-write of `deploy/<name>.json` holds that agent's deploy lock
//! ([`Store::update_deploy_state`]), so two threads of the Start page or two
//! launcher processes never lose each other's update (review b30b1a0,
//! code-quality "Concurrent `write_private` calls collide").

use crate::limits::HOME_ENV;
use crate::record::Identity;
use crate::record::{AgentRecord, DeployState, Settings, valid_agent_name};
use crate::secrets::SecretSet;
use buzz_contract::keys;
use buzz_contract::nip_oa::AuthTag;
use nostr_sdk::{Keys, ToBech32};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A state-directory failure. Paths are named; key material never is.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON for this launcher version: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("no owner identity yet; run `buzz-launcher init` first")]
    NoOwner,
    #[error("the owner key in {0} is not a valid nsec or hex key; re-run `buzz-launcher init --import`")]
    BadOwnerKey(PathBuf),
    #[error("an owner identity already exists in {0}; remove it first to replace it")]
    OwnerExists(PathBuf),
    #[error("agent `{0}` does not exist; list agents with `buzz-launcher agent list`")]
    NoAgent(String),
    #[error("agent `{0}` already exists")]
    AgentExists(String),
    #[error("`{0}` is not a valid agent name (use letters, digits, - and _, at most 64)")]
    BadName(String),
    #[error("cannot mint the auth tag: {0}")]
    Mint(String),
    #[error("the HOME environment variable is not set; set BUZZ_LAUNCHER_HOME")]
    NoHome,
    #[error(
        "the {field} looks like a secret (a key of this state dir, an nsec or 64 hex digits); it would be stored in file names or printed, so it is refused (the value is not shown)"
    )]
    SecretShaped { field: &'static str },
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
}

#[path = "record_heads.rs"]
mod record_heads;
#[path = "secret_store.rs"]
mod secret_store;

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { action, path, source }
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// Default state dir from an env lookup (pure over its inputs).
pub fn default_root(get: impl Fn(&str) -> Option<String>) -> Result<PathBuf, StoreError> {
    if let Some(h) = get(HOME_ENV).filter(|s| !s.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    if let Some(x) = get("XDG_DATA_HOME").filter(|s| !s.is_empty()) {
        return Ok(PathBuf::from(x).join("buzz-launcher"));
    }
    let home = get("HOME").filter(|s| !s.is_empty()).ok_or(StoreError::NoHome)?;
    Ok(PathBuf::from(home).join(".local/share/buzz-launcher"))
}

/// A temp name no other call uses: pid, a per-process counter and a random
/// suffix (threads of one process share the pid; the counter separates them).
fn temp_name(file: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        ".{file}.tmp{}-{n}-{}",
        std::process::id(),
        hex::encode(rand::random::<[u8; 4]>())
    )
}

/// Writes `bytes` atomically with `mode` (a temp file unique to this call,
/// then a rename over `path`).
pub fn write_private(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io("create", dir))?;
    let tmp = dir.join(temp_name(
        path.file_name().and_then(|n| n.to_str()).unwrap_or("f"),
    ));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    let written = f
        .write_all(bytes)
        .map_err(io("write", &tmp))
        .and_then(|()| f.sync_all().map_err(io("sync", &tmp)))
        .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(io("chmod", &tmp)))
        .and_then(|()| fs::rename(&tmp, path).map_err(io("rename", path)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

impl Store {
    /// Opens (and creates) the state dir at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store, StoreError> {
        let root = root.into();
        for sub in ["", "agents", "keys", "deploy", "logs", "locks", "heads"] {
            let d = root.join(sub);
            fs::create_dir_all(&d).map_err(io("create", &d))?;
        }
        // Everything under the root is private: records carry the user's env layer.
        for private in ["", "agents", "keys", "deploy", "logs", "locks", "heads"] {
            let d = root.join(private);
            fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).map_err(io("chmod", &d))?;
        }
        Ok(Store { root })
    }

    /// Opens the default state dir.
    pub fn open_default() -> Result<Store, StoreError> {
        Store::open(default_root(|k| std::env::var(k).ok())?)
    }

    /// The root path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn owner_path(&self) -> PathBuf {
        self.root.join("owner.key")
    }

    /// Creates the owner identity (fresh, or imported from `import`).
    pub fn init_owner(&self, import: Option<&str>) -> Result<Keys, StoreError> {
        let path = self.owner_path();
        if path.exists() {
            return Err(StoreError::OwnerExists(path));
        }
        let keys = match import {
            Some(raw) => keys::parse_private_key(raw).map_err(|_| StoreError::BadOwnerKey(path.clone()))?,
            None => Keys::generate(),
        };
        let nsec = keys
            .secret_key()
            .to_bech32()
            .map_err(|_| StoreError::BadOwnerKey(path.clone()))?;
        write_private(&path, nsec.as_bytes(), 0o600)?;
        Ok(keys)
    }

    /// The owner's keys.
    pub fn owner(&self) -> Result<Keys, StoreError> {
        let path = self.owner_path();
        let raw = match fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StoreError::NoOwner),
            Err(e) => return Err(io("read", &path)(e)),
        };
        keys::parse_private_key(&raw).map_err(|_| StoreError::BadOwnerKey(path))
    }

    fn read_json<T: serde::de::DeserializeOwned>(&self, path: &Path) -> Result<Option<T>, StoreError> {
        match fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", path)(e)),
        }
    }

    fn write_json<T: serde::Serialize>(&self, path: &Path, v: &T, mode: u32) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(v).map_err(|e| StoreError::Corrupt {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        write_private(path, &bytes, mode)
    }

    /// Launcher settings (defaults when absent).
    pub fn settings(&self) -> Result<Settings, StoreError> {
        Ok(self
            .read_json(&self.root.join("settings.json"))?
            .unwrap_or_default())
    }

    /// Saves settings.
    pub fn save_settings(&self, s: &Settings) -> Result<(), StoreError> {
        self.write_json(&self.root.join("settings.json"), s, 0o600)
    }

    fn check_name(name: &str) -> Result<(), StoreError> {
        if valid_agent_name(name) {
            Ok(())
        } else {
            Err(StoreError::BadName(name.to_string()))
        }
    }

    fn agent_path(&self, name: &str) -> PathBuf {
        self.root.join("agents").join(format!("{name}.json"))
    }

    /// The records' change marker (issue 49 item 4): rewritten with a fresh
    /// random token after every record write or delete, so the embedded
    /// relay re-reads the records only when it changed ([`crate::enrolled`]).
    pub fn records_marker(&self) -> PathBuf {
        self.root.join("agents").join(".changed")
    }

    /// Bumps [`Store::records_marker`]; called after the record changed, so
    /// a reader that sees the new token reads the change too.
    fn records_changed(&self) -> Result<(), StoreError> {
        let token = hex::encode(rand::random::<[u8; 16]>());
        write_private(&self.records_marker(), token.as_bytes(), 0o600)
    }

    /// Creates an agent: generates its key, mints its NIP-OA tag with the owner key.
    pub fn create_agent(&self, name: &str, relay_url: &str) -> Result<AgentRecord, StoreError> {
        Self::check_name(name)?;
        self.refuse_secret("name", name)?;
        self.refuse_secret("relay URL", relay_url)?;
        let owner = self.owner()?;
        if self.agent_path(name).exists() {
            return Err(StoreError::AgentExists(name.to_string()));
        }
        let keys = Keys::generate();
        let pubkey = keys::pubkey_hex(&keys);
        let tag = AuthTag::mint(&owner, &pubkey, "").map_err(|e| StoreError::Mint(e.to_string()))?;
        let nsec = keys
            .secret_key()
            .to_bech32()
            .map_err(|e| StoreError::Mint(e.to_string()))?;
        write_private(&self.key_path(name, "nsec"), nsec.as_bytes(), 0o600)?;
        write_private(&self.key_path(name, "auth"), tag.to_json().as_bytes(), 0o600)?;
        let rec = AgentRecord::new(name, &pubkey, relay_url);
        self.save_agent(&rec)?;
        Ok(rec)
    }

    /// Re-mints the agent's NIP-OA auth tag with the current owner key (after
    /// `init --import` of another owner).
    pub fn retag(&self, name: &str) -> Result<(), StoreError> {
        let rec = self.agent(name)?;
        let owner = self.owner()?;
        if keys::pubkey_hex(&owner) == rec.pubkey {
            return Err(StoreError::Mint("the owner key is the agent's own key".into()));
        }
        let tag = AuthTag::mint(&owner, &rec.pubkey, "").map_err(|e| StoreError::Mint(e.to_string()))?;
        write_private(&self.key_path(name, "auth"), tag.to_json().as_bytes(), 0o600)
    }

    fn key_path(&self, name: &str, ext: &str) -> PathBuf {
        self.root.join("keys").join(format!("{name}.{ext}"))
    }

    /// Loads an agent record.
    pub fn agent(&self, name: &str) -> Result<AgentRecord, StoreError> {
        Self::check_name(name)?;
        self.read_json(&self.agent_path(name))?
            .ok_or_else(|| StoreError::NoAgent(name.to_string()))
    }

    /// Saves an agent record. The fields that are shown or name files
    /// (name, display name, relay URL, provider id) must not look like a
    /// secret ([`Store::refuse_secret`]).
    pub fn save_agent(&self, rec: &AgentRecord) -> Result<(), StoreError> {
        Self::check_name(&rec.name)?;
        for f in crate::shown::shown_fields(rec) {
            self.refuse_secret(f.label, f.value)?;
        }
        self.write_json(&self.agent_path(&rec.name), rec, 0o600)?;
        self.records_changed()
    }

    /// Refuses `value` for `field` when it contains key material of this
    /// state dir or is shaped like a key (an `nsec1…` or 64 hex digits): such a field is
    /// stored in a file name or printed by `agent list`, where a secret
    /// typed by mistake must never land. Fails closed: a key file that
    /// cannot be read is an error, not a pass.
    pub fn refuse_secret(&self, field: &'static str, value: &str) -> Result<(), StoreError> {
        if crate::shown::secret_shaped(value) {
            return Err(StoreError::SecretShaped { field });
        }
        if self.secrets()?.holds_key(value) {
            return Err(StoreError::SecretShaped { field });
        }
        Ok(())
    }

    /// Every secret of this state dir (the one builder, [`crate::secrets`]): the owner key, every agent's key and
    /// auth tag, and the env values of agents, personas and the global
    /// layer. Fails closed (see the module doc).
    pub fn secrets(&self) -> Result<SecretSet, StoreError> {
        let mut set = SecretSet::default();
        match self.owner() {
            Ok(k) => set.key(&k),
            Err(StoreError::NoOwner) => {}
            Err(e) => return Err(e),
        }
        let settings = self.settings()?;
        set.env(settings.global_env.values());
        set.env(settings.personas.values().flat_map(|p| p.env.values()));
        for rec in self.agents()? {
            set.env(rec.env.values());
            let id = self.identity(&rec.name)?;
            set.env(id.secret_env.values());
            if !id.nsec.is_empty() {
                set.key_text(&id.nsec);
            }
            if let Some(t) = &id.auth_tag {
                set.auth_tag(t);
            }
        }
        Ok(set)
    }

    /// All agents, by name.
    pub fn agents(&self) -> Result<Vec<AgentRecord>, StoreError> {
        let dir = self.root.join("agents");
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map_err(io("list", &dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
            .filter(|n| valid_agent_name(n))
            .collect();
        names.sort();
        names.iter().map(|n| self.agent(n)).collect()
    }

    /// The pubkey of every agent record (what the embedded relay admits,
    /// [`crate::enrolled`]). Tolerant where [`Store::agents`] is strict: a
    /// record that cannot be read or parsed, or whose pubkey is not 64
    /// lowercase hex, enrols nobody; a record directory that cannot be
    /// listed is an error, so the relay fails closed.
    pub fn agent_pubkeys(&self) -> Result<std::collections::HashSet<String>, StoreError> {
        #[derive(serde::Deserialize)]
        struct PubkeyOnly {
            pubkey: String,
        }
        let dir = self.root.join("agents");
        let mut keys = std::collections::HashSet::new();
        for entry in fs::read_dir(&dir).map_err(io("list", &dir))? {
            let path = entry.map_err(io("list", &dir))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            // A record removed between the listing and the read is simply gone.
            let Ok(text) = fs::read_to_string(&path) else {
                continue;
            };
            if let Ok(r) = serde_json::from_str::<PubkeyOnly>(&text)
                && buzz_contract::keys::is_hex64_lower(&r.pubkey)
            {
                keys.insert(r.pubkey);
            }
        }
        Ok(keys)
    }

    /// Hydrates the agent's secrets (empty strings when a file is missing: the
    /// resolver's I1 check refuses them before anything is invoked).
    pub fn identity(&self, name: &str) -> Result<Identity, StoreError> {
        Self::check_name(name)?;
        let read = |ext: &str| -> Result<Option<String>, StoreError> {
            let p = self.key_path(name, ext);
            match fs::read_to_string(&p) {
                Ok(s) => Ok(Some(s.trim().to_string())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io("read", &p)(e)),
            }
        };
        let owner_pubkey = match self.owner() {
            Ok(k) => Some(keys::pubkey_hex(&k)),
            Err(StoreError::NoOwner) => None,
            Err(e) => return Err(e),
        };
        Ok(Identity {
            nsec: read("nsec")?.unwrap_or_default(),
            auth_tag: read("auth")?.filter(|s| !s.is_empty()),
            owner_pubkey,
            secret_env: self.secret_env(name)?,
        })
    }

    /// The agent's keys for signing as the agent (tests and tools).
    pub fn agent_keys(&self, name: &str) -> Result<Keys, StoreError> {
        let id = self.identity(name)?;
        keys::parse_private_key(&id.nsec).map_err(|_| StoreError::BadOwnerKey(self.key_path(name, "nsec")))
    }

    /// Deletes an agent's record, keys and bookkeeping.
    pub fn delete_agent(&self, name: &str) -> Result<(), StoreError> {
        Self::check_name(name)?;
        if !self.agent_path(name).exists() {
            return Err(StoreError::NoAgent(name.to_string()));
        }
        for p in [
            self.key_path(name, "nsec"),
            self.key_path(name, "auth"),
            self.key_path(name, "env"),
            self.deploy_path(name),
            self.head_path(name),
            self.theirs_path(name),
            self.agent_path(name),
        ] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &p)(e)),
            }
        }
        self.records_changed()
    }

    fn deploy_path(&self, name: &str) -> PathBuf {
        self.root.join("deploy").join(format!("{name}.json"))
    }

    /// Deploy bookkeeping (default when absent); `last_error` scrubbed of
    /// every secret shape (a file an older launcher wrote may hold one).
    pub fn deploy_state(&self, name: &str) -> Result<DeployState, StoreError> {
        Self::check_name(name)?;
        let mut st: DeployState = self.read_json(&self.deploy_path(name))?.unwrap_or_default();
        if let Some(e) = &mut st.last_error {
            *e = buzz_contract::redact::scrub_tokens(e);
        }
        Ok(st)
    }

    /// Saves deploy bookkeeping (a whole replacement; prefer
    /// [`Store::update_deploy_state`] for a change to some fields). The
    /// `last_error` is stored redacted ([`Store::redact_error`]).
    pub fn save_deploy_state(&self, name: &str, s: &DeployState) -> Result<(), StoreError> {
        Self::check_name(name)?;
        match &s.last_error {
            Some(e) => {
                let mut clean = s.clone();
                clean.last_error = Some(self.redact_error(e));
                self.write_json(&self.deploy_path(name), &clean, 0o600)
            }
            None => self.write_json(&self.deploy_path(name), s, 0o600),
        }
    }

    /// `text` with every secret of this state dir (keys, auth tags, env
    /// values, by fragment too) and every secret shape replaced. Fails
    /// closed: when the secrets cannot be read, the text is not kept.
    pub fn redact_error(&self, text: &str) -> String {
        match self.secrets() {
            Ok(set) => crate::redact::Redactor::from_set(&set).scrub(text),
            Err(_) => {
                "the error is not kept: this state dir's secrets could not be read to redact it".to_string()
            }
        }
    }

    /// Read-modify-write of `deploy/<name>.json` under that agent's deploy
    /// lock; returns the state written.
    pub fn update_deploy_state(
        &self,
        name: &str,
        change: impl FnOnce(&mut DeployState),
    ) -> Result<DeployState, StoreError> {
        Self::check_name(name)?;
        let _held = crate::lock::lock(&self.lock_path(&format!("deploy-{name}")))?;
        let mut st = self.deploy_state(name)?;
        change(&mut st);
        self.save_deploy_state(name, &st)?;
        Ok(st)
    }

    /// The path of lock `what` (`locks/<what>.lock`).
    pub fn lock_path(&self, what: &str) -> PathBuf {
        self.root.join("locks").join(format!("{what}.lock"))
    }

    /// Approved provider digests (id → sha256 hex).
    pub fn approvals(&self) -> Result<BTreeMap<String, String>, StoreError> {
        Ok(self
            .read_json(&self.root.join("providers.lock.json"))?
            .unwrap_or_default())
    }

    /// Records an approval.
    pub fn approve(&self, id: &str, digest: &str) -> Result<(), StoreError> {
        let mut a = self.approvals()?;
        a.insert(id.to_string(), digest.to_string());
        self.write_json(&self.root.join("providers.lock.json"), &a, 0o600)
    }

    /// Where older launchers staged providers on disk; only swept now.
    pub fn staging_root(&self) -> PathBuf {
        self.root.join("staging")
    }

    /// The default workdir of agent `name` (`work/<name>`, created `0700`).
    pub fn default_workdir(&self, name: &str) -> Result<PathBuf, StoreError> {
        Self::check_name(name)?;
        let dir = self.root.join("work").join(name);
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        for d in [self.root.join("work"), dir.clone()] {
            fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).map_err(io("chmod", &d))?;
        }
        Ok(dir)
    }

    /// Log file of a local harness.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.root.join("logs").join(format!("{name}.log"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_root_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(
            default_root(env(&[("BUZZ_LAUNCHER_HOME", "/s"), ("HOME", "/h")])).unwrap(),
            PathBuf::from("/s")
        );
        assert_eq!(
            default_root(env(&[("XDG_DATA_HOME", "/x"), ("HOME", "/h")])).unwrap(),
            PathBuf::from("/x/buzz-launcher")
        );
        assert_eq!(
            default_root(env(&[("HOME", "/h")])).unwrap(),
            PathBuf::from("/h/.local/share/buzz-launcher")
        );
        assert!(matches!(default_root(env(&[])), Err(StoreError::NoHome)));
    }

    #[test]
    fn agent_create_generates_key_mints_tag_and_keeps_secrets_out_of_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(matches!(
            store.create_agent("a", "ws://r"),
            Err(StoreError::NoOwner)
        ));
        let owner = store.init_owner(None).unwrap();
        let rec = store.create_agent("a", "ws://r").unwrap();
        let id = store.identity("a").unwrap();
        let agent_keys = keys::parse_private_key(&id.nsec).unwrap();
        assert_eq!(keys::pubkey_hex(&agent_keys), rec.pubkey);
        let tag = id.auth_tag.clone().unwrap();
        assert_eq!(
            AuthTag::verified_owner(&tag, &rec.pubkey).unwrap(),
            keys::pubkey_hex(&owner)
        );
        let record_text = fs::read_to_string(dir.path().join("agents/a.json")).unwrap();
        assert!(!record_text.contains(&id.nsec) && !record_text.contains(&tag));
        for f in ["keys/a.nsec", "keys/a.auth", "owner.key"] {
            let mode = fs::metadata(dir.path().join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
        assert!(matches!(
            store.create_agent("a", "ws://r"),
            Err(StoreError::AgentExists(_))
        ));
        store.delete_agent("a").unwrap();
        assert!(!dir.path().join("keys/a.nsec").exists());
    }

    #[test]
    fn concurrent_writes_of_one_file_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.json");
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let path = &path;
                    scope.spawn(move || {
                        for i in 0..50 {
                            write_private(path, format!("{t}-{i}").as_bytes(), 0o600).unwrap();
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
        assert!(fs::read_to_string(&path).unwrap().contains('-'));
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temp files left behind");
    }

    #[test]
    fn concurrent_deploy_state_updates_are_never_lost() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let store = &store;
                scope.spawn(move || {
                    for _ in 0..25 {
                        store
                            .update_deploy_state("a", |st| {
                                st.started_at = Some(st.started_at.unwrap_or(0) + 1);
                            })
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(store.deploy_state("a").unwrap().started_at, Some(100));
    }

    #[test]
    fn init_imports_a_trimmed_key_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let k = Keys::generate();
        let hex = k.secret_key().to_secret_hex();
        let got = store.init_owner(Some(&format!(" {hex}\n"))).unwrap();
        assert_eq!(got.public_key(), k.public_key());
        assert!(matches!(store.init_owner(None), Err(StoreError::OwnerExists(_))));
        assert_eq!(store.owner().unwrap().public_key(), k.public_key());
    }

    #[test]
    fn a_last_error_is_stored_redacted_whoever_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.init_owner(None).unwrap();
        store.create_agent("a", "ws://r").unwrap();
        let nsec = store.identity("a").unwrap().nsec;
        let raw = format!(
            "deploy failed for {nsec}: kubeconfig line 9: token: kube-canary-0123456789 (expected nsec1… or 64 hex)"
        );
        store
            .update_deploy_state("a", |st| st.last_error = Some(raw.clone()))
            .unwrap();
        let file = fs::read_to_string(dir.path().join("deploy/a.json")).unwrap();
        assert!(!file.contains(&nsec) && !file.contains("kube-canary"), "{file}");
        assert!(
            file.contains("expected nsec1… or 64 hex"),
            "a hint is kept: {file}"
        );
        // A file an older launcher wrote is scrubbed on reading.
        let old = serde_json::json!({"last_error": "GET https://u:pw-canary@k8s: Bearer abcdEFGH12345678"});
        fs::write(dir.path().join("deploy/a.json"), old.to_string()).unwrap();
        let e = store.deploy_state("a").unwrap().last_error.unwrap();
        assert_eq!(e, "GET https://[REDACTED]@k8s: Bearer [REDACTED]");
    }
}
