//! Benchmarks that print figures (never asserted in tests). Each prints one
//! JSON object with the keys its issue fixes; see the README for results.

pub mod agents;
pub mod collector;
pub mod harness;
pub mod image;
pub mod image_agents;
pub mod launcher;
pub mod provider;
pub mod real_node;
pub mod relay;
pub mod scale;
