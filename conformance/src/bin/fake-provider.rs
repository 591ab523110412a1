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
//! It also logs `proc_exe`, what `/proc/self/exe` names (the sealed staged
//! copy shows as `/memfd:…`).
//!
//! Behaviours: `ok`, `noversion`, `v2`, `bigout`, `daemon`, `nonutf8`,
//! `twoobjects`, `nook`, `exit1ok`, `stderrflood`, `hang`, `echo`, `echoexit`,
//! `swapself` (during `info`, tries to replace its own staged copy with the
//! file named by `evil` in `fake-config.json`, and logs what happened),
//! `cut` (during `deploy`, places every secret across every cut the launcher
//! makes in provider output, at offset `cut_offset`, then exits 1),
//! `slow` (during `deploy`, answers in band only after `deploy_budget_secs`
//! from its own start plus half a second, like a provider reporting
//! `Unschedulable` at the end of its budget), `ctl` (answers with terminal
//! escapes in its progress line, its error and its `agent_id`), `edit`
//! (during `deploy`, edits the agent record file named by `edit_record`),
//! `schema` (its `info` carries a `config_schema` with defaults, a required
//! integer, a number, a boolean and an I2-tripping `ssh_key_path`, for the
//! Start page's form).
//!
//! `undeploy` (issue 21) is a knob of every behaviour: `"undeploy"` in
//! `fake-config.json`. Absent, `info` advertises nothing and an `undeploy`
//! call is answered as the behaviour answers an unknown op (`ok`, `schema`:
//! `unknown op`), so a launcher that calls it anyway fails loudly, and the
//! log shows the call. Otherwise `info` lists
//! `"operations": ["deploy", "undeploy"]` and the value picks the answer:
//! `counts` (1 pod and 1 Secret while a `deploy` marker, `fake-deployed`,
//! exists — the call removes it — else 0/0, like a real idempotent
//! undeploy), `garbage` (not JSON), `badcounts` (`pods` negative, `secrets`
//! a string), `noremoved` (`ok:true` without `removed`), `error` (in band,
//! echoing `fake-agent-hex` if the test planted one), `exit1` (counts, then
//! exit 1). With `provider_config.workspace_size` set, `counts` also
//! removes one workspace volume, or keeps `buzz-workspace-fake` and names
//! it under `kept` when the request says `keep_workspace`.
//! `"undeploy_delay_ms": N` makes every `undeploy` wait N ms before it
//! answers (logged at its start, as every call is).
//! `"deploy": "unconfirmed"` makes a `deploy` that would succeed
//! create the marker and then answer `ok:false` (startup not confirmed): a
//! Start that left a pod but no `agent_id` (review 9b395e0 finding 6);
//! `"deploy": "fail"` answers every `deploy` `ok:false` with a quota error
//! (a wake whose deploy fails). Each call logs the request's `agent.wake`.
//! `"stale": N` makes the first N successful deploys report the fixed
//! generation and later ones a fresh one (a node that reports a stopped run
//! for a while). Each call logs `exe_ino`, the inode of the file it runs.
//! Every `undeploy` request is appended verbatim to
//! `fake-undeploy-stdin.jsonl`, so a test can prove no secret was on its stdin.

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

/// The generation a successful `deploy` reports. `"stale": N` in
/// `fake-config.json` answers the first N deploys with the fixed generation
/// (a node still reporting a stopped run) and later ones with a fresh one;
/// `fake-deploy-count` counts the deploys.
fn deploy_generation() -> &'static str {
    const FIXED: &str = "0123456789abcdef0123456789abcdef";
    let Some(stale) = config()["stale"].as_u64() else {
        return FIXED;
    };
    let n: u64 = std::fs::read_to_string("fake-deploy-count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let _ = std::fs::write("fake-deploy-count", (n + 1).to_string());
    if n < stale {
        FIXED
    } else {
        "fedcba9876543210fedcba9876543210"
    }
}

fn config() -> Value {
    std::fs::read_to_string("fake-config.json")
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// Tries to replace the running staged copy with `evil`: in place through
/// `/proc/self/exe` and every descriptor naming the same file, and by
/// renaming over the path `/proc/self/exe` names. Returns what each attempt gave.
fn swap_self(evil: &str) -> Value {
    let bytes = std::fs::read(evil).unwrap_or_default();
    let mut results = serde_json::Map::new();
    let exe_link = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut targets = vec!["/proc/self/exe".to_string()];
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        for fd in fds.flatten() {
            let link = std::fs::read_link(fd.path()).map(|p| p.display().to_string());
            if link.is_ok_and(|l| l == exe_link) {
                targets.push(fd.path().display().to_string());
            }
        }
    }
    for t in targets {
        let r = std::fs::OpenOptions::new()
            .write(true)
            .open(&t)
            .and_then(|mut f| f.write_all(&bytes));
        results.insert(format!("write {t}"), json!(r.map_err(|e| e.to_string()).is_ok()));
    }
    // A path on disk: rename a new file over it (the directory is the user's).
    // A sealed in-memory copy has no such path.
    if std::fs::symlink_metadata(&exe_link).is_ok_and(|m| m.is_file()) {
        let tmp = format!("{exe_link}.swap");
        let renamed = std::fs::write(&tmp, &bytes)
            .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)))
            .and_then(|()| std::fs::rename(&tmp, &exe_link));
        results.insert("rename".into(), json!(renamed.is_ok()));
    }
    Value::Object(results)
}

/// Writes every secret across every cut the launcher applies to stderr: the
/// 200-character status line, the 1 KiB status window, and the 64 KiB cap.
fn cut_secrets(secrets: &[String], k: usize) {
    let mut err = std::io::stderr();
    let mut written = 0usize;
    let mut put = |b: &[u8], written: &mut usize| {
        let _ = err.write_all(b);
        let _ = err.flush();
        *written += b.len();
    };
    for s in secrets {
        // Status line: the first 200 characters end k characters into the secret.
        let line = format!("{}{s}\n", "x".repeat(200usize.saturating_sub(k)));
        put(line.as_bytes(), &mut written);
        std::thread::sleep(std::time::Duration::from_millis(150));
        // Status window: the last 1 KiB starts k characters before the secret ends.
        let line = format!(
            "{}{s}{}\n",
            "a".repeat(1500),
            "b".repeat(1023usize.saturating_sub(k))
        );
        put(line.as_bytes(), &mut written);
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    // The 64 KiB cap falls k bytes into a secret.
    let s = &secrets[k % secrets.len()];
    let cap: usize = 64 * 1024;
    let mut pad = cap.saturating_sub(written + k);
    while pad > 0 {
        let n = pad.min(1000);
        let mut chunk = vec![b'p'; n];
        if n > 1 {
            chunk[n - 1] = b'\n';
        }
        put(&chunk, &mut written);
        pad -= n;
    }
    put(format!("{s} after the cap\n").as_bytes(), &mut written);
    std::process::exit(1);
}

/// The `info` answer of `behaviour`.
fn info_for(behaviour: &str) -> Value {
    let mut v = info_ok();
    match behaviour {
        "noversion" => {
            v.as_object_mut().map(|o| o.remove("protocol_version"));
        }
        "v2" => v["protocol_version"] = json!(2),
        "schema" => {
            v["config_schema"] = json!({
                "properties": {
                    "replicas": {"type": "integer", "default": 1, "title": "Replicas",
                                 "description": "How many copies to run"},
                    "timeout_seconds": {"type": "number", "default": 30},
                    "debug": {"type": "boolean", "default": false},
                    "namespace": {"type": "string", "default": "buzz-agents"},
                    "ssh_key_path": {"type": "string",
                                     "description": "<b>not bold</b><img src=x onerror=alert(1)>"}},
                "required": ["replicas"]});
        }
        _ => {}
    }
    v
}

/// Answers an `undeploy` as the `undeploy` knob says (see the module doc).
fn undeploy(knob: &str, req: &Value) {
    // `"undeploy_delay_ms"`: an undeploy that takes its time, as a real one
    // waiting for a pod's graceful end does.
    if let Some(ms) = config()["undeploy_delay_ms"].as_u64() {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let deployed = std::fs::remove_file("fake-deployed").is_ok();
    let n = u64::from(deployed);
    // A workspace volume while `provider_config.workspace_size` is set:
    // removed with the pod, or kept and named with `keep_workspace`.
    let workspace = req["provider_config"]["workspace_size"]
        .as_str()
        .is_some_and(|s| !s.is_empty());
    let keep = req["keep_workspace"] == true;
    let workspaces = u64::from(workspace && !keep);
    eprintln!("deleting the pods and Secrets of the agent");
    match knob {
        "garbage" => print!("removed everything, trust me"),
        "badcounts" => respond(json!({"ok": true, "removed": {"pods": -1, "secrets": "1"}})),
        "noremoved" => respond(json!({"ok": true})),
        "error" => {
            let hex_key = std::fs::read_to_string("fake-agent-hex").unwrap_or_default();
            respond(json!({"ok": false, "error": format!(
                "pods is forbidden: cannot delete pods in namespace ns (key {}); run: kubectl auth can-i delete pods -n ns",
                hex_key.trim())}));
        }
        "exit1" => {
            respond(json!({"ok": true, "removed": {"pods": n, "secrets": n}}));
            std::process::exit(1);
        }
        _ if workspace && keep => respond(json!({"ok": true,
            "removed": {"pods": n, "secrets": n, "workspaces": 0},
            "kept": {"workspaces": ["buzz-workspace-fake"]}})),
        _ => respond(json!({"ok": true, "removed": {"pods": n, "secrets": n, "workspaces": workspaces}})),
    }
}

fn main() {
    let started = std::time::Instant::now();
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
    let proc_exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    // The inode of the file this process runs: one value across calls means
    // one staged copy served them all.
    let exe_ino = std::fs::metadata("/proc/self/exe").map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m));
    log(
        json!({"op": op, "behaviour": behaviour, "pid": std::process::id(), "had_nsec": !nsec.is_empty(),
               "exe": exe, "proc_exe": proc_exe, "exe_ino": exe_ino, "provider_config": req.get("provider_config"),
               "wake": req["agent"].get("wake")}),
    );

    let undeploy_knob = config()["undeploy"].as_str().map(str::to_string);
    if op == "undeploy"
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("fake-undeploy-stdin.jsonl")
    {
        let _ = writeln!(f, "{}", input.trim());
    }
    if op == "info" {
        config_actions();
        if behaviour == "swapself"
            && let Some(evil) = config()["evil"].as_str()
        {
            log(json!({"tamper": swap_self(evil)}));
        }
    }
    if op == "undeploy"
        && let Some(knob) = &undeploy_knob
    {
        undeploy(knob, &req);
        return;
    }
    match (behaviour.as_str(), op.as_str()) {
        (_, "info") if behaviour != "hang" => {
            let mut v = info_for(&behaviour);
            if undeploy_knob.is_some() {
                v["operations"] = json!(["deploy", "undeploy"]);
            }
            respond(v);
        }
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
        ("cut", "deploy") => {
            let a = &req["agent"];
            let mut secrets = vec![nsec.clone()];
            secrets.extend(
                a["env_vars"]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.values())
                    .filter_map(|v| v.as_str().map(str::to_string)),
            );
            secrets.extend(a["auth_tag"].as_str().map(str::to_string));
            let hex_key = std::fs::read_to_string("fake-agent-hex").unwrap_or_default();
            if !hex_key.trim().is_empty() {
                secrets.push(hex_key.trim().to_string());
            }
            let k = config()["cut_offset"].as_u64().unwrap_or(20) as usize;
            cut_secrets(&secrets, k);
        }
        ("slow", "deploy") => {
            let budget = config()["deploy_budget_secs"].as_f64().unwrap_or(1.0);
            let answer_at = std::time::Duration::from_secs_f64(budget + 0.5);
            eprintln!("waiting for the pod to be scheduled");
            std::thread::sleep(answer_at.saturating_sub(started.elapsed()));
            respond(
                json!({"ok": false, "error": "pod buzz-agent-0123456789ab is Unschedulable: 0/1 nodes are available: 1 Insufficient cpu"}),
            );
        }
        ("ctl", "deploy") => {
            eprintln!("pulling \u{1b}[2J\u{1b}]0;pwned\u{7} image");
            std::thread::sleep(std::time::Duration::from_millis(200));
            let id = format!("pod\u{1b}[31m-{}", "x".repeat(400));
            respond(json!({"ok": true, "agent_id": id}));
        }
        ("ctlerr", "deploy") => {
            respond(json!({"ok": false, "error": "bad\u{1b}[2J\r\nerror: forged line\u{9b}31m"}));
        }
        ("edit", "deploy") => {
            if let Some(path) = config()["edit_record"].as_str()
                && let Ok(text) = std::fs::read_to_string(path)
                && let Ok(mut rec) = serde_json::from_str::<Value>(&text)
            {
                rec["model"] = json!("edited-during-deploy");
                let _ = std::fs::write(path, rec.to_string());
            }
            respond(json!({"ok": true, "agent_id": "fake-edit"}));
        }
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
        (_, "deploy") if config()["deploy"] == "fail" => {
            respond(json!({"ok": false, "error": "the cluster refused the pod (fake): quota exceeded"}));
        }
        (_, "deploy") if config()["deploy"] == "unconfirmed" => {
            let _ = std::fs::write("fake-deployed", "1");
            eprintln!("creating pod");
            respond(
                json!({"ok": false, "error": "startup not confirmed: pod buzz-agent-0123456789ab is Pending (pulling image) after 120s"}),
            );
        }
        (_, "deploy") => {
            let _ = std::fs::write("fake-deployed", "1");
            let pk = req["agent"]["name"].as_str().unwrap_or("agent");
            eprintln!("creating pod for {pk}");
            eprintln!("waiting for the container to start");
            respond(json!({"ok": true, "agent_id": format!("fake-{pk}"), "generation": deploy_generation()}));
        }
        _ => respond(json!({"ok": false, "error": format!("unknown op {op}")})),
    }
}
