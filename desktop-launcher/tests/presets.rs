//! Agent presets on the command line (spec §Launch data: a deploy carries a
//! command *name*): `agent create --agent claude` with its key from
//! `--env-file`/`--env-stdin` (a canary that never reaches an output or the
//! record file), the refusals (`--agent nope`, `--agent` with `--command`,
//! a secret on argv, a bad env-file line), the permission knobs in the
//! environment the harness really gets and in the deploy request, and the
//! missing-binary refusal before a local harness is spawned.

mod common;

use common::BIN;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const CANARY: &str = "sk-ant-canary-7f3a9c2e1b5d4a60";
const INSTALL: &str =
    "claude-agent-acp not found on PATH; install it: npm install -g @zed-industries/claude-agent-acp@0.23.1";

/// A state dir with an owner, a `PATH` of one private bin dir (plus the
/// system's, for `/bin/sh`), and no ambient API key.
struct Env {
    tmp: tempfile::TempDir,
    home: PathBuf,
    bin: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("state");
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let e = Env { tmp, home, bin };
        let o = e.run(&["init"], None);
        assert!(o.status.success(), "{}", text(&o));
        e
    }

    fn path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.bin.display())
    }

    /// Runs the launcher, `stdin` piped in when given.
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.run_with(args, stdin, &[])
    }

    fn run_with(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &Path)]) -> Output {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("BUZZ_LAUNCHER_HOME", &self.home)
            .env("PATH", self.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("BUZZ_ACP_BIN")
            .envs(env.iter().copied())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("run buzz-launcher");
        if let Some(text) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.bin.join(name);
        common::executable(&p, &format!("#!/bin/sh\n{body}"));
        p
    }

    fn store(&self) -> desktop_launcher::store::Store {
        desktop_launcher::store::Store::open(&self.home).unwrap()
    }

    fn agent_names(&self) -> String {
        String::from_utf8_lossy(&self.run(&["agent", "list"], None).stdout).into_owned()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `agent create --agent claude --env-file`: the command name, no args of
/// its own, the knobs in the record; the key beside the agent's key; the
/// canary nowhere in stdout, stderr or the record file.
#[test]
fn create_with_a_preset_and_an_env_file_keeps_the_key_out_of_outputs_and_the_record() {
    let e = Env::new();
    let file = e.tmp.path().join("claude.env");
    std::fs::write(
        &file,
        format!("# the agent's key\nexport ANTHROPIC_API_KEY=\"{CANARY}\"\n\nANTHROPIC_BASE_URL=http://127.0.0.1:9\n"),
    )
    .unwrap();
    // An env file holds secrets: group and others must not read it.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut all = String::new();
    let o = e.run(
        &[
            "agent",
            "create",
            "c",
            "--relay",
            "ws://127.0.0.1:1",
            "--agent",
            "claude",
            "--env-file",
            file.to_str().unwrap(),
            "--model",
            "opus",
            "--permission-mode",
            "acceptEdits",
            "--permission-policy",
            "ask-owner",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    all.push_str(&text(&o));
    // The binary is not on this PATH: a warning with the install hint; the key is set, so no key warning.
    assert!(
        stderr(&o).contains(&format!("warning: {INSTALL}")),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("reads its API key"), "{}", stderr(&o));

    let store = e.store();
    let rec = store.agent("c").unwrap();
    assert_eq!(rec.agent_command.as_deref(), Some("claude-agent-acp"));
    assert!(rec.agent_args.is_empty());
    assert_eq!(rec.model.as_deref(), Some("opus"));
    assert_eq!(rec.permission_mode.as_deref(), Some("acceptEdits"));
    assert_eq!(rec.permission_policy.as_deref(), Some("ask-owner"));
    assert!(rec.env.is_empty(), "{:?}", rec.env.keys());
    let secret = store.secret_env("c").unwrap();
    assert_eq!(secret["ANTHROPIC_API_KEY"], CANARY);
    assert_eq!(secret["ANTHROPIC_BASE_URL"], "http://127.0.0.1:9");
    let key_file = e.home.join("keys/c.env");
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let show = e.run(&["agent", "show", "c"], None);
    assert!(show.status.success(), "{}", text(&show));
    all.push_str(&text(&show));
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["record"]["agent_preset"], "claude");
    assert_eq!(v["record"]["model"], "opus");
    assert_eq!(v["record"]["permission_mode"], "acceptEdits");
    assert_eq!(v["record"]["permission_policy"], "ask-owner");
    assert_eq!(
        v["secret_env"],
        serde_json::json!(["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"])
    );
    all.push_str(&e.agent_names());
    // A rotation through stdin is noticed by the record's digest, and stays secret.
    let before = store.agent("c").unwrap().launch_digest();
    let o = e.run(
        &["agent", "edit", "c", "--env-stdin"],
        Some(&format!("ANTHROPIC_API_KEY={CANARY}-2\n")),
    );
    assert!(o.status.success(), "{}", text(&o));
    all.push_str(&text(&o));
    assert_ne!(store.agent("c").unwrap().launch_digest(), before);
    assert_eq!(
        store.secret_env("c").unwrap()["ANTHROPIC_API_KEY"],
        format!("{CANARY}-2")
    );

    assert!(!all.contains(CANARY), "the key reached an output: {all}");
    let record = std::fs::read_to_string(e.home.join("agents/c.json")).unwrap();
    assert!(
        !record.contains(CANARY),
        "the key is in the record file: {record}"
    );
    assert!(
        std::fs::read_to_string(&key_file).unwrap().contains(CANARY),
        "positive control: the key is stored where the harness env comes from"
    );
}

/// Unknown presets, a preset with a custom command, a secret on argv and a
/// bad env-file line are refused as usage errors (exit 2, the flag named),
/// and leave no record behind.
#[test]
fn refusals_name_what_to_do_and_leave_nothing_behind() {
    let e = Env::new();
    let o = e.run(&["agent", "create", "x", "--agent", "nope"], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o)
            .contains("unknown agent preset `nope`; the presets are claude, codex, gemini, goose, echo"),
        "{}",
        stderr(&o)
    );

    let o = e.run(
        &["agent", "create", "x", "--agent", "claude", "--command", "my-acp"],
        None,
    );
    assert!(!o.status.success());
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "--command: choose the claude preset or a custom command, not both (the preset runs claude-agent-acp)"
        ),
        "{}",
        stderr(&o)
    );

    let o = e.run(
        &[
            "agent",
            "create",
            "x",
            "--agent",
            "claude",
            "--env",
            &format!("ANTHROPIC_API_KEY={CANARY}"),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("--env: ANTHROPIC_API_KEY=… would put a secret on the command line")
            && err.contains("--env-file FILE or --env-stdin"),
        "{err}"
    );
    assert!(!text(&o).contains(CANARY), "{err}");

    let o = e.run(
        &["agent", "create", "x", "--agent", "codex", "--env-stdin"],
        Some(&format!("# ok\nOPENAI_BASE_URL=http://x\n{CANARY}\n")),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("env file line 3 is not KEY=VALUE"),
        "{}",
        stderr(&o)
    );
    assert!(!text(&o).contains(CANARY));

    let o = e.run(
        &["agent", "create", "x", "--permission-policy", "sometimes"],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("must be one of allow, reject, ask-owner"),
        "{}",
        stderr(&o)
    );
    assert!(
        e.agent_names().trim().is_empty(),
        "a refused create left a record"
    );

    // Positive control: the same create without the refused part works, and
    // warns that no layer sets the preset's key.
    let o = e.run(
        &[
            "agent",
            "create",
            "x",
            "--relay",
            "ws://127.0.0.1:1",
            "--agent",
            "codex",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains(
            "warning: codex reads its API key from OPENAI_API_KEY, which agent `x` does not set; give it with --env-file FILE or --env-stdin"
        ),
        "{}",
        stderr(&o)
    );
    // `agent edit --agent` switches the preset: its command name, the table's args.
    let o = e.run(&["agent", "edit", "x", "--agent", "gemini"], None);
    assert!(o.status.success(), "{}", text(&o));
    let rec = e.store().agent("x").unwrap();
    assert_eq!(
        (rec.agent_command.as_deref(), rec.agent_args.len()),
        (Some("gemini"), 0)
    );
    let o = e.run(&["agent", "edit", "x", "--agent", "nope"], None);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        e.store().agent("x").unwrap().agent_command.as_deref(),
        Some("gemini")
    );
}

/// A local start of a preset whose binary is not on the harness's PATH is
/// refused before the harness is spawned; once the binary is there, the
/// harness gets the command name, the model, both permission knobs (tier 1)
/// and the secret key (tier 2), and no output shows the key.
#[test]
fn local_start_refuses_a_missing_binary_before_spawning_and_then_passes_the_policy_env() {
    let e = Env::new();
    let dump = e.tmp.path().join("harness.env");
    let harness = e.script("fake-harness", &format!("env > '{}'\n", dump.display()));
    let o = e.run(
        &[
            "agent",
            "create",
            "c",
            "--relay",
            "ws://127.0.0.1:1",
            "--agent",
            "claude",
            "--model",
            "opus",
            "--permission-mode",
            "acceptEdits",
            "--permission-policy",
            "reject",
            "--env-stdin",
        ],
        Some(&format!("ANTHROPIC_API_KEY={CANARY}\n")),
    );
    assert!(o.status.success(), "{}", text(&o));
    let start = || {
        e.run_with(
            &["start", "c", "--wait-online", "0"],
            None,
            &[("BUZZ_ACP_BIN", &harness)],
        )
    };

    let o = start();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(stderr(&o).trim(), format!("error: {INSTALL}"));
    assert!(!dump.exists(), "the harness was spawned");
    assert_eq!(e.store().deploy_state("c").unwrap().local_pid, None);

    e.script("claude-agent-acp", "exit 0\n");
    let o = start();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains(CANARY), "{}", text(&o));
    let mut env = String::new();
    for _ in 0..100 {
        env = std::fs::read_to_string(&dump).unwrap_or_default();
        if env.contains("BUZZ_MANAGED_AGENT=") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines: Vec<&str> = env.lines().collect();
    for want in [
        "BUZZ_ACP_AGENT_COMMAND=claude-agent-acp".to_string(),
        "BUZZ_ACP_AGENT_ARGS=".to_string(),
        "BUZZ_ACP_MODEL=opus".to_string(),
        "BUZZ_ACP_PERMISSION_MODE=acceptEdits".to_string(),
        "BUZZ_ACP_PERMISSION_POLICY=reject".to_string(),
        format!("ANTHROPIC_API_KEY={CANARY}"),
    ] {
        assert!(lines.contains(&want.as_str()), "{want} not in the harness env");
    }
}

/// A provider that records the deploy request in its cwd and refuses it.
const RECORDING_PROVIDER: &str = r#"req=$(cat)
case "$req" in
  *'"op":"info"'*) echo '{"ok":true,"name":"rec","version":"0","protocol_version":1,"config_schema":{}}'; exit 0;;
esac
printf '%s' "$req" > deploy-request.json
echo '{"ok":false,"error":"recorded"}'
"#;

/// A deploy carries the preset's command name and the permission knobs in
/// `policy_env` from the same resolver; a binary missing here does not stop
/// it (the image resolves the name), and the key travels only in the env.
#[test]
fn a_deploy_carries_the_command_name_and_the_policy_env_without_a_local_binary() {
    let e = Env::new();
    let providers = e.tmp.path().join("providers");
    common::provider(&providers, "rec", &format!("#!/bin/sh\n{RECORDING_PROVIDER}"));
    let work = e.tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let o = e.run(
        &[
            "agent",
            "create",
            "r",
            "--relay",
            "wss://relay.example.com",
            "--backend",
            "provider:rec",
            "--agent",
            "gemini",
            "--permission-mode",
            "yolo",
            "--permission-policy",
            "allow",
            "--permission-policy-others",
            "ask-owner",
            "--workdir",
            work.to_str().unwrap(),
            "--env-stdin",
        ],
        Some(&format!("GEMINI_API_KEY={CANARY}\n")),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !stderr(&o).contains("not found on PATH"),
        "no binary check for a deploy: {}",
        stderr(&o)
    );
    let o = e.run_with(&["start", "r"], None, &[("BUZZ_PROVIDER_PATH", &providers)]);
    assert!(!o.status.success());
    assert!(!text(&o).contains(CANARY), "{}", text(&o));
    let req: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("deploy-request.json")).unwrap()).unwrap();
    let launch = &req["agent"]["launch"];
    assert_eq!(launch["command"], "gemini");
    assert_eq!(launch["args"], serde_json::json!(["--acp"]));
    assert_eq!(launch["policy_env"]["BUZZ_ACP_PERMISSION_MODE"], "yolo");
    assert_eq!(launch["policy_env"]["BUZZ_ACP_PERMISSION_POLICY"], "allow");
    assert_eq!(
        launch["policy_env"]["BUZZ_ACP_PERMISSION_POLICY_OTHERS"],
        "ask-owner"
    );
    assert_eq!(launch["env"]["GEMINI_API_KEY"], CANARY);
    assert!(launch["policy_env"].get("GEMINI_API_KEY").is_none());
}
