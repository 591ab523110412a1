//! The agent variants of the sprig image (`scripts/image-build.sh --agent
//! claude|codex|gemini`), in real containers run by podman as a pod's
//! container runs: uid 10001, every capability dropped, no-new-privileges,
//! HOME on a fresh volume, and no network at all.
//!
//! Per variant: the script builds it on top of the sprig image and names it
//! in `image-NAME.env` (digest-pinned, with its sizes); the preset's command
//! *name* (agents.rs `PRESETS`, the only thing a deploy carries) resolves on
//! the image's PATH to the npm package at its pin; and a real ACP
//! `initialize` against the agent inside the container gets a well-formed
//! answer with `agentCapabilities`, from the pinned version. And building a
//! variant leaves the sprig image, its digest and `image.env` as they were.

use buzz_conformance::container::agent_images::{
    self, AGENT_UID, AgentImage, build_agent, build_base, initialize, layers, shell,
};
use buzz_conformance::container::{Podman, image_cache};
use buzz_contract::agents::{Preset, preset};
use serde_json::Value;
use std::time::Duration;

/// gemini's `initialize` took up to 4.2 s on a busy machine (real-agents.md).
const INIT_TIMEOUT: Duration = Duration::from_secs(90);

fn preset_of(agent: &str) -> &'static Preset {
    preset(agent).unwrap_or_else(|| panic!("no preset {agent}"))
}

fn pin_of(p: &Preset) -> (&'static str, &'static str) {
    p.npm.unwrap_or_else(|| panic!("{}: no npm pin", p.name))
}

/// What the env file says agrees with the preset, the storage and the archive.
fn check_env_file(podman: &Podman, img: &AgentImage, p: &Preset) {
    let (pkg, version) = pin_of(p);
    assert_eq!(img.command, p.command, "the preset's command name");
    assert_eq!(img.npm, format!("{pkg}@{version}"), "the preset's pin");
    assert!(
        img.reference
            .starts_with(&format!("localhost/buzz-sprig-{}:", p.name)),
        "{}",
        img.reference
    );
    assert!(
        img.digest.len() == 71 && img.digest.starts_with("sha256:"),
        "not a digest: {}",
        img.digest
    );
    assert!(img.node.starts_with("nodejs="), "{}", img.node);
    // Pinned by digest: podman resolves the pinned reference to the same image.
    let id = podman
        .inspect(&img.pinned(), "{{.Id}}")
        .unwrap_or_else(|e| panic!("{} does not resolve: {e}", img.pinned()));
    assert_eq!(id, img.id, "{} names another image", img.pinned());
    let archive =
        std::fs::metadata(&img.archive).unwrap_or_else(|e| panic!("{}: {e}", img.archive.display()));
    assert_eq!(
        archive.len(),
        img.archive_size,
        "the archive's size in the env file"
    );
    let stored: u64 = podman
        .inspect(&img.reference, "{{.Size}}")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(stored, img.size, "the image's size in the env file");
    // The image still starts the harness as PID 1, as the pod's user.
    assert_eq!(
        podman
            .inspect(&img.reference, "{{json .Config.Entrypoint}}")
            .unwrap(),
        r#"["/usr/local/bin/buzz-entrypoint"]"#
    );
    assert_eq!(
        podman.inspect(&img.reference, "{{.Config.User}}").unwrap(),
        format!("{AGENT_UID}:{AGENT_UID}")
    );
    assert_eq!(
        podman
            .inspect(&img.reference, "{{index .Labels \"dev.buzz.agent.npm\"}}")
            .unwrap(),
        img.npm
    );
    assert_eq!(
        podman
            .inspect(
                &img.reference,
                "{{index .Labels \"org.opencontainers.image.base.digest\"}}"
            )
            .unwrap(),
        img.base_digest
    );
}

/// The command name resolves on the image's PATH, as the pod's user, to the
/// npm package at its pin.
fn check_path(podman: &Podman, img: &AgentImage, p: &Preset) {
    let (pkg, version) = pin_of(p);
    let out = shell(
        podman,
        &img.reference,
        &format!(
            "id -u; command -v {cmd}; readlink -f \"$(command -v {cmd})\"; \
             node -p 'require(\"/usr/local/lib/node_modules/{pkg}/package.json\").version'; \
             node --version",
            cmd = p.command
        ),
    )
    .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(AGENT_UID.to_string().as_str()),
        "{out}"
    );
    assert_eq!(
        lines.get(1).copied(),
        Some(format!("/usr/local/bin/{}", p.command).as_str()),
        "{out}"
    );
    assert!(
        lines
            .get(2)
            .is_some_and(|t| t.starts_with(&format!("/usr/local/lib/node_modules/{pkg}/"))),
        "the command is not the npm package's: {out}"
    );
    assert_eq!(lines.get(3).copied(), Some(version), "{out}");
    assert!(lines.get(4).is_some_and(|v| v.starts_with('v')), "{out}");
}

/// A real `initialize` against the agent in its image, started by name.
fn check_initialize(podman: &Podman, img: &AgentImage, p: &Preset) {
    let (_, version) = pin_of(p);
    let mut argv = vec![p.command];
    argv.extend_from_slice(p.args);
    let got = initialize(podman, &img.reference, &argv, INIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{}: initialize in {}: {e}", p.name, img.reference));
    let r = &got.response;
    assert_eq!(r["jsonrpc"], "2.0", "{r}");
    assert!(r.get("error").is_none(), "{}: initialize failed: {r}", p.name);
    let result = &r["result"];
    assert_eq!(result["protocolVersion"], 1, "{r}");
    let caps = result["agentCapabilities"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: no agentCapabilities: {r}", p.name));
    assert!(
        caps.get("promptCapabilities").is_some_and(Value::is_object),
        "{r}"
    );
    assert!(result["authMethods"].is_array(), "{r}");
    // The agent reports the version the image pinned.
    assert_eq!(result["agentInfo"]["version"], version, "{r}");
    eprintln!(
        "{}: initialize answered in {} ms (podman run included); {} other stdout line(s)",
        p.name,
        got.elapsed.as_millis(),
        got.other_lines.len()
    );
}

fn variant_works(agent: &str) {
    let p = preset_of(agent);
    let podman = Podman::from_env();
    let img = build_agent(agent).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{agent}: {} ({}), {:.1} MB uncompressed, archive {:.1} MB, {}",
        img.pinned(),
        img.npm,
        img.size as f64 / 1_048_576.0,
        img.archive_size as f64 / 1_048_576.0,
        img.node
    );
    check_env_file(&podman, &img, p);
    check_path(&podman, &img, p);
    check_initialize(&podman, &img, p);
}

#[test]
fn claude_agent_acp_answers_initialize_in_buzz_sprig_claude() {
    variant_works("claude");
}

#[test]
fn codex_acp_answers_initialize_in_buzz_sprig_codex() {
    variant_works("codex");
}

#[test]
fn gemini_acp_answers_initialize_in_buzz_sprig_gemini() {
    variant_works("gemini");
}

#[test]
fn building_a_variant_leaves_the_sprig_image_and_its_digest_unchanged() {
    let podman = Podman::from_env();
    let before = build_base().unwrap_or_else(|e| panic!("{e}"));
    let before_env = std::fs::read(image_cache().join("image.env")).unwrap();
    let img = build_agent("claude").unwrap_or_else(|e| panic!("{e}"));
    // The variant names the base it was built on, and image.env is as it was.
    assert_eq!(img.base_digest, before.digest);
    assert_eq!(
        std::fs::read(image_cache().join("image.env")).unwrap(),
        before_env,
        "image.env changed when a variant was built"
    );
    let after = build_base().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(after, before, "the sprig image changed when a variant was built");
    assert_eq!(
        podman.inspect(&before.pinned(), "{{.Id}}").unwrap(),
        before.id,
        "{} no longer resolves to the sprig image",
        before.pinned()
    );
    // On top of the base: its layers, unchanged, then exactly one more.
    let base_layers = layers(&podman, &before.reference).unwrap();
    let variant_layers = layers(&podman, &img.reference).unwrap();
    assert!(
        variant_layers.starts_with(&base_layers) && variant_layers.len() == base_layers.len() + 1,
        "the variant is not the base plus one layer:\nbase    {base_layers:?}\nvariant {variant_layers:?}"
    );
    // No agent, no Node in the base.
    let base_out = agent_images::shell(
        &podman,
        &before.reference,
        "command -v node claude-agent-acp codex-acp gemini || true",
    )
    .unwrap();
    assert_eq!(base_out.trim(), "", "the sprig image carries agent bits");
}
