//! `info` of the SSH binding (spec §info): the shared answer
//! ([`buzz_provider::info`]) with this binding's `provider_config` schema,
//! one property per field of [`crate::config::FIELDS`]. Answered without
//! contacting any host.

use crate::config::{DEFAULT_CONNECT_TIMEOUT_SECONDS, DEFAULT_DOZE_SECONDS, DEFAULT_INACTIVITY_SECONDS};
use buzz_provider::info::{response as answer, schema, seconds, string};
use serde_json::{Map, Value};

/// The provider's name in `info`.
pub const PROVIDER_NAME: &str = "ssh";

/// The `config_schema`.
pub fn config_schema() -> Value {
    let mut p = Map::new();
    let mut add = |k: &str, v: Value| {
        p.insert(k.to_string(), v);
    };
    add(
        "host",
        string(
            "SSH host",
            "The server to run the agent on: [user@]host[:port] or an alias of your ssh config. The login user runs the agent as its own systemd --user unit and needs lingering (sudo loginctl enable-linger <user>). Your ssh config, agent and known hosts are used; no password is ever asked, and an unknown or changed host key is refused.",
        ),
    );
    add(
        "identity_file",
        string(
            "Identity file",
            "The private key file ssh logs in with (ssh -i). Empty means your ssh config and agent decide. Only its path is stored here.",
        ),
    );
    add(
        "ssh_config",
        string(
            "SSH config file",
            "An ssh config file to use instead of ~/.ssh/config (ssh -F). Empty means your own.",
        ),
    );
    add(
        "known_hosts_file",
        string(
            "Known hosts file",
            "Where the server's host key is recorded (UserKnownHostsFile). Empty means your ssh config's.",
        ),
    );
    add(
        "workdir",
        string(
            "Working directory",
            "The agent's working directory on the server, under ~/ or /. Empty means ~/buzz-agents/<first 12 hex of the agent key>, kept across a rename. Undeploy removes it unless asked to keep it.",
        ),
    );
    add(
        "harness_path",
        string(
            "Harness binary",
            "The buzz-acp binary installed on the server (into ~/.local/bin) when it has none or another build. Empty means the one beside this provider, then the one on PATH.",
        ),
    );
    add(
        "inactivity_seconds",
        seconds(
            "Stop after inactivity (seconds)",
            "The agent stops itself after this long without work, and a mention wakes it while your desktop runs. 0 means no bound: it runs until stopped, and systemd restarts it after a crash.",
            DEFAULT_INACTIVITY_SECONDS,
        ),
    );
    add(
        "doze_seconds",
        seconds(
            "Doze after idle (seconds)",
            "With no turn for this long, the agent's processes end and the harness stays on the relay, presence away, answering the next mention by itself in its old conversation. 0 means no doze.",
            DEFAULT_DOZE_SECONDS,
        ),
    );
    add(
        "connect_timeout_seconds",
        seconds(
            "Connect timeout (seconds)",
            "How long ssh waits to connect (ConnectTimeout).",
            DEFAULT_CONNECT_TIMEOUT_SECONDS,
        ),
    );
    schema("SSH", &["host"], p)
}

/// The full `info` response.
pub fn response() -> Value {
    answer(
        PROVIDER_NAME,
        env!("CARGO_PKG_VERSION"),
        "Runs a Buzz agent on your own server over SSH, as a systemd --user unit of your login.",
        config_schema(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FIELDS;

    #[test]
    fn the_schema_lists_every_field_with_a_title_and_a_type() {
        let s = config_schema();
        let props = s["properties"].as_object().unwrap();
        assert_eq!(
            props.keys().map(String::as_str).collect::<Vec<_>>().len(),
            FIELDS.len()
        );
        for f in FIELDS {
            let p = &props[*f];
            assert!(
                p["title"].is_string() && p["description"].is_string() && p["type"].is_string(),
                "{f}"
            );
        }
        assert_eq!(s["required"], serde_json::json!(["host"]));
        assert_eq!(props["doze_seconds"]["default"], DEFAULT_DOZE_SECONDS);
    }
}
