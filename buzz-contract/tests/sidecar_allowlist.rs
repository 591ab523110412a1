//! The image entrypoint's sidecar allowlist is the contract's
//! (`buzz_contract::sidecar::SIDECAR_ENV_ALLOWLIST`; review b30b1a0 #6, "rules
//! written in several places"): the `sidecar_env_allow=( … )` array of
//! `images/sprig/entrypoint.sh`, read from the source tree, must list exactly
//! the contract's names in the contract's order.

use buzz_contract::sidecar::SIDECAR_ENV_ALLOWLIST;

fn entrypoint_allowlist(script: &str) -> Option<Vec<String>> {
    let start = script.find("sidecar_env_allow=(")? + "sidecar_env_allow=(".len();
    let end = start + script[start..].find(')')?;
    Some(
        script[start..end]
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .flat_map(str::split_whitespace)
            .map(str::to_string)
            .collect(),
    )
}

#[test]
fn the_entrypoint_hands_sidecars_exactly_the_contracts_allowlist() {
    let path =
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("../images/sprig/entrypoint.sh");
    let script = std::fs::read_to_string(path).expect("the image entrypoint is in the tree");
    let names = entrypoint_allowlist(&script).expect("entrypoint.sh declares sidecar_env_allow=( … )");
    assert_eq!(names, SIDECAR_ENV_ALLOWLIST);
}

#[test]
fn the_parser_reads_a_multiline_array_and_ignores_comments() {
    let s = "x=1\nsidecar_env_allow=(\n  A B # not C\n  D\n)\nmore";
    assert_eq!(
        entrypoint_allowlist(s),
        Some(vec!["A".to_string(), "B".into(), "D".into()])
    );
    assert_eq!(entrypoint_allowlist("nothing"), None);
}
