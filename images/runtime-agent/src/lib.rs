//! `runtime-agent`: the in-container collector (collector-design.md, bound by
//! runtime-agent-backend-contract.md and host-agent-digest-gate.md).
//!
//! It measures its own container — its cgroup and its PID namespace's `/proc` — rolls
//! the readings up on the frozen grid into UTC hour windows, applies the digest gate,
//! and spools the contract's payload kinds one file per natural key. Shipping the
//! spool is [`ship`] (the decision core) over [`http`] (the transport).
//!
//! The decision core is pure (clocks and readings are passed in); I/O lives in
//! [`cgroup`], [`procfs`], [`spool`] and the binary.
//!
//! - [`grid`]: the frozen log-histogram grid and histogram merge (design §3 "Grid").
//! - [`rollup`]: hour windows, pro-rata counter splits, rebaselining (design §3).
//! - [`cgroup`]: cgroup v2 / hybrid / v1 detection and readers (design §2).
//! - [`procfs`]: per-process peaks from `/proc` (design §2 "Per process").
//! - [`payload`]: the payload kinds as serde types, pod identity (design §4, contract §4).
//! - [`gate`]: the digest gate and deterministic event ids (design §7, gate doc).
//! - [`spool`]: one file per natural key, atomic replace, bounds, recovery (design §5).
//! - [`collector`]: one poll in, spool operations out (design §3–§9).
//! - [`config`]: settings from the allowlisted environment (design §1).
//! - [`ship`]: shipping rounds, status classes, backoff (design §6, §9).
//! - [`http`]: the gzip HTTP/1.1 transport (contract §3).
//! - [`proxy`]: the egress proxy settings and the route to the ingest (contract §3).
//! - [`connect`]: dialling directly, through a `CONNECT` tunnel or a forward proxy.
//! - [`time`]: clock readings and RFC 3339 instants.

pub mod cgroup;
pub mod collector;
pub mod config;
pub mod connect;
pub mod gate;
pub mod grid;
pub mod http;
pub mod payload;
pub mod procfs;
pub mod proxy;
pub mod rollup;
pub mod ship;
pub mod spool;
pub mod time;
