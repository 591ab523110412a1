//! `bench scale`'s CPU accounting: kube-apiserver and etcd from
//! `/proc/<pid>/stat` (`utime + stime`, in clock ticks: 10 ms resolution at
//! the usual 100 Hz, so per-deploy figures are averaged over many deploys),
//! the provider processes from `RUSAGE_CHILDREN` (children this process has
//! waited for), this process (the proxy and the node stand-in) from
//! `RUSAGE_SELF`.

use super::round3;
use crate::testenv::TestEnv;
use serde_json::{Value, json};

pub(super) fn proc_cpu_s(pid: u32) -> anyhow::Result<f64> {
    crate::bench::cpu_s(pid)
}

fn rusage_s(who: libc::c_int) -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// CPU seconds so far of each party, for before/after deltas.
#[derive(Clone, Copy, Default)]
pub(super) struct Cpu {
    pub apiserver: f64,
    pub etcd: f64,
    pub providers: f64,
    pub bench: f64,
}

impl Cpu {
    pub(super) fn now(env: &TestEnv) -> anyhow::Result<Cpu> {
        Ok(Cpu {
            apiserver: proc_cpu_s(env.apiserver_pid())?,
            etcd: proc_cpu_s(env.etcd_pid())?,
            providers: rusage_s(libc::RUSAGE_CHILDREN),
            bench: rusage_s(libc::RUSAGE_SELF),
        })
    }
    pub(super) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            apiserver: self.apiserver - before.apiserver,
            etcd: self.etcd - before.etcd,
            providers: self.providers - before.providers,
            bench: self.bench - before.bench,
        }
    }
    pub(super) fn add(&mut self, o: Cpu) {
        self.apiserver += o.apiserver;
        self.etcd += o.etcd;
        self.providers += o.providers;
        self.bench += o.bench;
    }
    pub(super) fn per(self, n: usize) -> Value {
        let n = n as f64;
        json!({
            "apiserver": round3(self.apiserver / n),
            "etcd": round3(self.etcd / n),
            "providers": round3(self.providers / n),
            "bench_proxy_and_node": round3(self.bench / n),
        })
    }
}
