//! `buzz-backend-kubernetes`: the Kubernetes binding of the Buzz provider
//! protocol (spec §The Kubernetes Binding; conformance [L2], [L3]).
//!
//! Pure core (no I/O, clock or randomness inside): [`config`], [`image`],
//! [`quantity`], [`placement`], [`envtiers`], [`podspec`] (shape and fingerprint),
//! [`classify`] (the state-machine rows), [`gc`] (the GC plan), [`workspace`]
//! (the workspace claim and its judgement), [`egress`] (the agent's
//! NetworkPolicy and its judgement), [`undeploy`]
//! (the undeploy plan; its loop is [`undeploy::run`]).
//! Shell: [`cluster`] (the one narrow trait over the API and its kube
//! implementation), [`reconcile`] (the loop), [`protocol`] (the process contract).

pub mod classify;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod consts;
pub mod diag;
pub mod egress;
pub mod envtiers;
pub mod error;
pub mod events;
pub mod gc;
pub mod image;
pub mod info;
pub mod kubeconfig;
pub mod ownership;
pub mod placement;
pub mod podspec;
pub mod protocol;
pub mod quantity;
pub mod reconcile;
pub mod telemetry;
pub mod timing;
pub mod undeploy;
pub mod workspace;
