//! The agent's secret env, `keys/<name>.env` (0600; spec §Launch data
//! "layered env", DESIGN.md Decision 4). Values from `--env-file`,
//! `--env-stdin` and the Start page's API key field are kept beside the
//! agent's key, never in its record: the record is printed by `agent show`
//! and read by the page, a key file never is. [`Store::set_secret_env`]
//! keeps a key in one of the two places only, and bumps the record's
//! `secret_env_revision` so a rotated key is noticed. The values join the
//! resolver as the last user layer ([`crate::record::Identity::secret_env`])
//! and the state dir's secret set ([`crate::store::Store::secrets`]).

use super::{Store, StoreError, io};
use crate::envfile::EnvChanges;
use crate::record::AgentRecord;
use std::collections::BTreeMap;
use std::fs;

impl Store {
    /// The agent's secret env (`keys/<name>.env`; empty when absent). A file
    /// that exists and does not parse is an error (fail closed), and the
    /// error names the path, never a value.
    pub fn secret_env(&self, name: &str) -> Result<BTreeMap<String, String>, StoreError> {
        Self::check_name(name)?;
        let path = self.key_path(name, "env");
        match fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|_| StoreError::Corrupt {
                path,
                message: "not a JSON object of strings (its content is not shown)".into(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(io("read", &path)(e)),
        }
    }

    /// Applies `changes` to the secret env of `rec` (`Some` sets, `None`
    /// removes) and writes it `0600` (an empty one removes the file). A key
    /// set here leaves the record's plain env, so it lives in one place;
    /// when anything changed, `rec.secret_env_revision` is bumped. The
    /// caller saves `rec` afterwards. Returns whether anything changed.
    pub fn set_secret_env(&self, rec: &mut AgentRecord, changes: &EnvChanges) -> Result<bool, StoreError> {
        Self::check_name(&rec.name)?;
        let mut env = self.secret_env(&rec.name)?;
        let before = env.clone();
        for (k, v) in changes {
            match v {
                Some(v) => {
                    env.insert(k.clone(), v.clone());
                    rec.env.remove(k);
                }
                None => {
                    env.remove(k);
                }
            }
        }
        if env == before {
            return Ok(false);
        }
        let path = self.key_path(&rec.name, "env");
        if env.is_empty() {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &path)(e)),
            }
        } else {
            self.write_json(&path, &env, 0o600)?;
        }
        rec.secret_env_revision = rec.secret_env_revision.wrapping_add(1);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secret_env_lives_beside_the_key_never_in_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.init_owner(None).unwrap();
        let mut rec = store.create_agent("a", "ws://r").unwrap();
        let canary = "sk-ant-canary-0123456789";
        rec.env.insert("ANTHROPIC_API_KEY".into(), "old-plain".into());
        let set: EnvChanges = [("ANTHROPIC_API_KEY".to_string(), Some(canary.to_string()))].into();
        assert!(store.set_secret_env(&mut rec, &set).unwrap());
        assert!(
            !store.set_secret_env(&mut rec, &set).unwrap(),
            "no change, no bump"
        );
        store.save_agent(&rec).unwrap();
        assert_eq!(rec.secret_env_revision, 1);
        assert!(!rec.env.contains_key("ANTHROPIC_API_KEY"), "one place per key");
        let record_text = fs::read_to_string(dir.path().join("agents/a.json")).unwrap();
        assert!(!record_text.contains(canary), "{record_text}");
        let file = dir.path().join("keys/a.env");
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(
            store.identity("a").unwrap().secret_env["ANTHROPIC_API_KEY"],
            canary
        );
        assert!(store.secrets().unwrap().values.iter().any(|v| v == canary));
        // A corrupt file fails closed without showing its content.
        fs::write(&file, canary).unwrap();
        let e = store.identity("a").unwrap_err().to_string();
        assert!(e.contains("keys/a.env") && !e.contains(canary), "{e}");
        assert!(store.secrets().is_err());
        fs::write(&file, "{}").unwrap();
        // Removing the last key removes the file; delete removes it too.
        let unset: EnvChanges = [("ANTHROPIC_API_KEY".to_string(), None)].into();
        store.set_secret_env(&mut rec, &set).unwrap();
        store.set_secret_env(&mut rec, &unset).unwrap();
        assert!(!file.exists());
        store.set_secret_env(&mut rec, &set).unwrap();
        store.delete_agent("a").unwrap();
        assert!(!file.exists());
    }
}
