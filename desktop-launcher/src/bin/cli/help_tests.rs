//! Every flag and argument of `buzz-launcher` has a description (issue 24
//! item 5 "every CLI flag has a description, its unit and its allowed
//! values"): checked on clap's own model of the commands, so a flag added
//! without one fails here.

use clap::CommandFactory;

fn undescribed(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        if matches!(id, "help" | "version") || a.is_hide_set() {
            continue;
        }
        if a.get_help().is_none() && a.get_long_help().is_none() {
            out.push(format!("{path} {id}"));
        }
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        if sub.get_about().is_none() {
            out.push(format!("{path} {} (no about)", sub.get_name()));
        }
        undescribed(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

#[test]
fn every_flag_and_argument_has_a_description() {
    let mut missing = Vec::new();
    undescribed(&super::Cli::command(), "buzz-launcher", &mut missing);
    assert!(missing.is_empty(), "without a description: {missing:#?}");
}
