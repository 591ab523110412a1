//! Which agent keys the relay still admits (review b30b1a0 finding 11:
//! revocation). The relay admits an attested agent only while its directory
//! lists the agent's pubkey; the launcher's directory is its agent records
//! (`desktop_launcher::enrolled`), so deleting an agent refuses its key at
//! the next AUTH, and a session it holds ends within
//! [`super::Limits::records_recheck`].
//!
//! The relay never reads anyone's state: it asks this trait. A directory that
//! cannot be read is an error, so the caller fails closed.

use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

/// The enrolled agents could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the enrolled agents: {0}")]
pub struct DirectoryError(pub Box<dyn std::error::Error + Send + Sync>);

/// A source of enrolled agent pubkeys. Reads are blocking (the relay calls
/// them on a blocking thread).
pub trait AgentDirectory: Send + Sync + std::fmt::Debug {
    /// Every enrolled agent's pubkey (64 lowercase hex), read now.
    fn enrolled(&self) -> Result<HashSet<String>, DirectoryError>;
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
/// - **Live sessions** are checked against one relay-wide read every
///   [`super::Limits::records_recheck`] ([`Shared::roster`]), so a removed
///   agent's session still ends within that bound plus one read.
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

    /// Reads the directory every `every` into [`Shared::roster`] until `stop` is set.
    pub async fn recheck_every(&self, every: std::time::Duration, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => match self.fresh().await {
                    Ok(keys) => {
                        self.roster.send_replace(Some(keys));
                    }
                    Err(e) => tracing::warn!("cannot re-read the enrolled agents: {e}"),
                },
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
}
