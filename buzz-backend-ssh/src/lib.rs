//! `buzz-backend-ssh`: the Buzz provider that runs an agent on the user's
//! own server (issue 51; spec §Launchers: an SSH/systemd deployer conforms
//! to layers 1 and 2 and writes its own layer 3, this one; §Provider
//! Protocol; I1–I5). The Start button for a VPS.
//!
//! The binding: one `systemd --user` unit per agent key, installed and
//! driven through the system's OpenSSH client, the harness's secrets
//! carried on ssh's stdin into a 0600 env file. docs/ssh.md is the guide.
//!
//! Pure core: [`config`] (`provider_config`), [`unit`] (the instance name,
//! the template unit, the env file), [`script`] (the scripts run on the
//! host), [`outcome`] (what a script's answer means), [`harness`]'s ELF
//! reading, [`ssh::argv`] and [`ssh::classify`]. Imperative shell:
//! [`ssh::run`], [`deploy`], [`undeploy`], [`cli`]. What every provider
//! shares (the process, the request, the payload's checks, redaction, the
//! env tiers) is `buzz_provider`'s.

pub mod cli;
pub mod config;
pub mod deploy;
pub mod error;
pub mod harness;
pub mod info;
pub mod outcome;
pub mod script;
pub mod ssh;
pub mod undeploy;
pub mod unit;
