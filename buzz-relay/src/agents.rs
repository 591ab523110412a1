//! Which agent keys the relay still admits (review b30b1a0 finding 11:
//! revocation). The relay admits an attested agent only while its directory
//! lists the agent's pubkey; the launcher's directory is its agent records
//! (`desktop_launcher::enrolled`), so deleting an agent refuses its key at
//! the next AUTH, and a session it holds ends within
//! [`super::Limits::records_recheck`].
//!
//! The relay never reads anyone's state: it asks this trait. A directory that
//! cannot be read is an error, so the caller fails closed.
//!
//! Reading the directory means reading every record: at a fleet of 1 000
//! agents, a re-read every 2 s was most of the relay's CPU at rest (issue 49
//! item 4). So a directory may also say cheaply whether it changed
//! ([`AgentDirectory::version`]), and live sessions are re-checked only
//! when it did: at rest the relay polls one token and reads no record.

use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

/// The enrolled agents could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the enrolled agents: {0}")]
pub struct DirectoryError(pub Box<dyn std::error::Error + Send + Sync>);

/// What a directory says, cheaply, about its changes ([`AgentDirectory::version`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// It cannot tell: every recheck reads the whole directory.
    Unknown,
    /// An opaque token that differs after every change to the directory,
    /// read before the change is visible to [`AgentDirectory::enrolled`]
    /// never after it: equal tokens mean nothing changed in between.
    Token(Vec<u8>),
}

/// A source of enrolled agent pubkeys. Reads are blocking (the relay calls
/// them on a blocking thread).
pub trait AgentDirectory: Send + Sync + std::fmt::Debug {
    /// Every enrolled agent's pubkey (64 lowercase hex), read now.
    fn enrolled(&self) -> Result<HashSet<String>, DirectoryError>;

    /// The directory's change token, read now; much cheaper than
    /// [`AgentDirectory::enrolled`]. The default cannot tell.
    fn version(&self) -> Result<Version, DirectoryError> {
        Ok(Version::Unknown)
    }
}

/// The directory as every connection shares it (issue 35: a fleet of 1 000
/// agents). Reading it means reading every agent record, so a read per
/// connection and per recheck grows with the square of the fleet:
///
/// - **At AUTH**, [`Shared::fresh`] answers with a read that *began after
///   the call did*, so a record deleted before the AUTH is never in it;
///   reads are serialised, and every AUTH waiting while one runs that began
///   after it arrived takes that one's answer. A burst of AUTHs costs a few
///   reads, not one each.
/// - **Live sessions** are checked against one relay-wide read
///   ([`Shared::roster`]), made when the directory's [`Version`], polled
///   every [`super::Limits::records_recheck`], differs from the one read
///   before the last successful read (or every time, for
///   [`Version::Unknown`]), so a removed agent's session still ends within
///   that bound plus one read, and a fleet at rest reads no record.
pub struct Shared {
    dir: Arc<dyn AgentDirectory>,
    last: tokio::sync::Mutex<Option<(Instant, Read)>>,
    roster: watch::Sender<Option<Arc<HashSet<String>>>>,
}

/// One read of the directory: the enrolled keys, or why it failed.
pub type Read = Result<Arc<HashSet<String>>, String>;

impl Shared {
    /// Shares `dir`.
    pub fn new(dir: Arc<dyn AgentDirectory>) -> Shared {
        Shared {
            dir,
            last: tokio::sync::Mutex::new(None),
            roster: watch::channel(None).0,
        }
    }

    /// The enrolled keys, from a read that began after this call.
    pub async fn fresh(&self) -> Read {
        let arrived = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((began, read)) = last.as_ref()
            && *began >= arrived
        {
            return read.clone();
        }
        let began = Instant::now();
        let dir = self.dir.clone();
        let read = match tokio::task::spawn_blocking(move || dir.enrolled()).await {
            Ok(Ok(keys)) => Ok(Arc::new(keys)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("the directory read panicked: {e}")),
        };
        *last = Some((began, read.clone()));
        read
    }

    /// The latest relay-wide read, for live sessions: it changes after
    /// each successful read of [`Shared::recheck_every`].
    pub fn roster(&self) -> watch::Receiver<Option<Arc<HashSet<String>>>> {
        self.roster.subscribe()
    }

    /// The directory's version, read now on a blocking thread; an error
    /// or a panic is [`Version::Unknown`] (the caller then reads the
    /// directory, which says what is wrong).
    async fn version(&self) -> Version {
        let dir = self.dir.clone();
        match tokio::task::spawn_blocking(move || dir.version()).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::debug!("cannot read the enrolled agents' version: {e}");
                Version::Unknown
            }
            Err(_) => Version::Unknown,
        }
    }

    /// Every `every`, reads the directory into [`Shared::roster`] if its
    /// [`Version`] changed since the last successful read, until `stop` is set.
    pub async fn recheck_every(&self, every: std::time::Duration, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The version read before the last successful read; none yet.
        let mut seen: Option<Vec<u8>> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    // The version first, then the read: a change after the
                    // version was read shows in the next version.
                    let token = match self.version().await {
                        Version::Token(t) if seen.as_ref() == Some(&t) => continue,
                        Version::Token(t) => Some(t),
                        Version::Unknown => None,
                    };
                    match self.fresh().await {
                        Ok(keys) => {
                            self.roster.send_replace(Some(keys));
                            seen = token;
                        }
                        Err(e) => tracing::warn!("cannot re-read the enrolled agents: {e}"),
                    }
                }
                () = crate::conn::stopped(&mut stop) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A directory that takes 20 ms a read and counts its reads.
    #[derive(Debug, Default)]
    struct Slow {
        keys: Mutex<HashSet<String>>,
        reads: AtomicUsize,
    }

    impl AgentDirectory for Slow {
        fn enrolled(&self) -> Result<HashSet<String>, DirectoryError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(20));
            Ok(self.keys.lock().unwrap().clone())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_auths_shares_reads_and_none_sees_a_record_deleted_before_it() {
        let dir = Arc::new(Slow::default());
        dir.keys.lock().unwrap().insert("a".into());
        let shared = Arc::new(Shared::new(dir.clone()));
        let burst: Vec<_> = (0..200)
            .map(|_| {
                let s = shared.clone();
                tokio::spawn(async move { s.fresh().await })
            })
            .collect();
        for b in burst {
            assert!(b.await.unwrap().unwrap().contains("a"));
        }
        let reads = dir.reads.load(Ordering::SeqCst);
        assert!(reads <= 3, "200 AUTHs at once took {reads} reads");
        // A deletion is seen by the next call, whatever was read before it.
        dir.keys.lock().unwrap().clear();
        assert!(!shared.fresh().await.unwrap().contains("a"));
    }

    #[tokio::test]
    async fn the_roster_follows_the_directory_and_stops_with_the_relay() {
        let dir = Arc::new(Slow::default());
        dir.keys.lock().unwrap().insert("a".into());
        let shared = Arc::new(Shared::new(dir.clone()));
        let mut roster = shared.roster();
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn({
            let s = shared.clone();
            async move {
                s.recheck_every(std::time::Duration::from_millis(30), stopped)
                    .await
            }
        });
        roster.changed().await.unwrap();
        assert!(roster.borrow_and_update().as_ref().unwrap().contains("a"));
        dir.keys.lock().unwrap().clear();
        roster.changed().await.unwrap();
        assert!(roster.borrow_and_update().as_ref().unwrap().is_empty());
        stop.send_replace(true);
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    /// A directory with a change token, bumped by [`Versioned::change`].
    #[derive(Debug, Default)]
    struct Versioned {
        inner: Slow,
        token: AtomicUsize,
        version_reads: AtomicUsize,
    }

    impl Versioned {
        fn change(&self, f: impl FnOnce(&mut HashSet<String>)) {
            f(&mut self.inner.keys.lock().unwrap());
            self.token.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl AgentDirectory for Versioned {
        fn enrolled(&self) -> Result<HashSet<String>, DirectoryError> {
            self.inner.enrolled()
        }
        fn version(&self) -> Result<Version, DirectoryError> {
            self.version_reads.fetch_add(1, Ordering::SeqCst);
            Ok(Version::Token(
                self.token.load(Ordering::SeqCst).to_le_bytes().to_vec(),
            ))
        }
    }

    /// Issue 49 item 4: at rest the records are not read, and a change is
    /// still seen at the next recheck.
    #[tokio::test]
    async fn at_rest_only_the_version_is_read_and_a_change_is_seen_at_the_next_recheck() {
        let dir = Arc::new(Versioned::default());
        dir.change(|k| {
            k.insert("a".into());
        });
        let shared = Arc::new(Shared::new(dir.clone()));
        let mut roster = shared.roster();
        let (stop, stopped) = watch::channel(false);
        let every = std::time::Duration::from_millis(20);
        let task = tokio::spawn({
            let s = shared.clone();
            async move { s.recheck_every(every, stopped).await }
        });
        roster.changed().await.unwrap();
        assert!(roster.borrow_and_update().as_ref().unwrap().contains("a"));
        let reads = dir.inner.reads.load(Ordering::SeqCst);
        let polls = dir.version_reads.load(Ordering::SeqCst);
        tokio::time::sleep(every * 10).await;
        assert_eq!(
            dir.inner.reads.load(Ordering::SeqCst),
            reads,
            "nothing changed, yet the records were read"
        );
        assert!(dir.version_reads.load(Ordering::SeqCst) > polls + 3);
        dir.change(HashSet::clear);
        let seen = tokio::time::timeout(every * 20, roster.changed()).await;
        assert!(seen.is_ok(), "a changed directory was not re-read");
        assert!(roster.borrow_and_update().as_ref().unwrap().is_empty());
        stop.send_replace(true);
        task.await.unwrap();
    }
}
