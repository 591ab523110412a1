//! A fake provider for the launcher conformance suite (`tests/launcher.rs`).
//!
//! Installed under the name `buzz-backend-<behaviour>`; the behaviour is
//! derived from its own file name, so the staged copy the launcher runs
//! behaves like the discovered one. It appends one JSON line per call to
//! `fake-log.jsonl` in its working directory (the agent workdir), recording
//! the op, its pid and whether the request carried a non-empty nsec.
//! `fake-config.json` in the same directory can ask it, during `info`, to
//! rewrite another file in place (same inode) or to swap a path (new inode).
//!
//! Behaviours: `ok`, `noversion`, `v2`, `bigout`, `daemon`, `nonutf8`,
//! `twoobjects`, `nook`, `exit1ok`, `stderrflood`, `hang`, `echo`, `echoexit`.

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn log(line: Value) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("fake-log.jsonl")
    {
        let _ = writeln!(f, "{line}");
    }
}

fn respond(v: Value) {
    print!("{v}");
    let _ = std::io::stdout().flush();
}

fn info_ok() -> Value {
    json!({"ok": true, "name": "fake", "version": "0.0.1", "protocol_version": 1,
           "description": "fake provider", "config_schema": {"properties": {
               "inactivity_seconds": {"type": "integer"}, "namespace": {"type": "string"}}}})
}

fn config_actions() {
    let Ok(text) = std::fs::read_to_string("fake-config.json") else {
        return;
    };
    let Ok(cfg) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    let pair = |k: &str| -> Option<(String, String)> {
        let a = cfg.get(k)?.as_array()?;
        Some((a.first()?.as_str()?.to_string(), a.get(1)?.as_str()?.to_string()))
    };
    if let Some((target, source)) = pair("rewrite_in_place") {
        // Same inode: truncate and write new bytes.
        if let Ok(bytes) = std::fs::read(&source)
            && let Ok(mut f) = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&target)
        {
            let _ = f.write_all(&bytes);
        }
    }
    if let Some((target, source)) = pair("swap_path") {
        // New inode renamed over the discovered path.
        let tmp = format!("{target}.swap");
        if std::fs::copy(&source, &tmp).is_ok() {
            let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755));
            let _ = std::fs::rename(&tmp, &target);
        }
    }
}

fn main() {
    let exe = std::env::args().next().unwrap_or_default();
    let name = Path::new(&exe)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let behaviour = name.strip_prefix("buzz-backend-").unwrap_or("ok").to_string();
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let req: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
    let op = req["op"].as_str().unwrap_or("").to_string();
    let nsec = req["agent"]["private_key_nsec"]
        .as_str()
        .unwrap_or("")
        .to_string();
    log(
        json!({"op": op, "behaviour": behaviour, "pid": std::process::id(), "had_nsec": !nsec.is_empty(),
               "exe": exe, "provider_config": req.get("provider_config")}),
    );

    if op == "info" {
        config_actions();
    }
    match (behaviour.as_str(), op.as_str()) {
        ("noversion", "info") => {
            let mut v = info_ok();
            v.as_object_mut().map(|o| o.remove("protocol_version"));
            respond(v);
        }
        ("v2", "info") => {
            let mut v = info_ok();
            v["protocol_version"] = json!(2);
            respond(v);
        }
        (_, "info") if behaviour != "hang" => respond(info_ok()),
        ("bigout", _) => {
            let chunk = vec![b' '; 64 * 1024];
            let mut out = std::io::stdout();
            for _ in 0..40 {
                if out.write_all(&chunk).is_err() {
                    break;
                }
            }
            respond(json!({"ok": true, "agent_id": "big"}));
        }
        ("daemon", _) => {
            // A grandchild in our process group that inherits and holds the pipes.
            let child = std::process::Command::new("sleep").arg("300").spawn();
            if let Ok(c) = child {
                log(json!({"grandchild": c.id()}));
            }
            respond(json!({"ok": true, "agent_id": "daemon"}));
        }
        ("nonutf8", _) => {
            let _ = std::io::stdout().write_all(b"{\"ok\":true,\"agent_id\":\"\xff\xfe\"}");
        }
        ("twoobjects", _) => print!("{{\"ok\":true,\"agent_id\":\"a\"}}{{\"ok\":true,\"agent_id\":\"b\"}}"),
        ("nook", _) => respond(json!({"agent_id": "no-ok"})),
        ("exit1ok", _) => {
            respond(json!({"ok": true, "agent_id": "liar"}));
            std::process::exit(1);
        }
        ("stderrflood", _) => {
            let line = vec![b'x'; 1023];
            let mut err = std::io::stderr();
            for _ in 0..10 * 1024 {
                let _ = err.write_all(&line);
                let _ = err.write_all(b"\n");
            }
            std::process::exit(1);
        }
        ("hang", _) => std::thread::sleep(std::time::Duration::from_secs(3600)),
        ("echo" | "echoexit", "deploy") => {
            let a = &req["agent"];
            let env_val = a["env_vars"]
                .as_object()
                .and_then(|m| m.values().next().cloned())
                .unwrap_or_default();
            let launch_val = a["launch"]["env"]["GOOSE_PROVIDER"].clone();
            let hex_key = std::fs::read_to_string("fake-agent-hex").unwrap_or_default();
            let text = format!(
                "failed: nsec={nsec} env={} launch={} hex={} token=sprt_tok_abc123",
                env_val.as_str().unwrap_or(""),
                launch_val.as_str().unwrap_or(""),
                hex_key.trim()
            );
            eprintln!("status: {text}");
            if behaviour == "echoexit" {
                std::process::exit(1);
            }
            respond(json!({"ok": false, "error": text}));
        }
        (_, "deploy") => {
            let pk = req["agent"]["name"].as_str().unwrap_or("agent");
            eprintln!("creating pod for {pk}");
            eprintln!("waiting for the container to start");
            respond(
                json!({"ok": true, "agent_id": format!("fake-{pk}"), "generation": "0123456789abcdef0123456789abcdef"}),
            );
        }
        _ => respond(json!({"ok": false, "error": format!("unknown op {op}")})),
    }
}
