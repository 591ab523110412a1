//! The static entrypoint rule (spec §Entrypoint and launch ABI): the script
//! a pod's container starts must end in `exec buzz-acp`, so the harness
//! replaces the shell as PID 1 and receives SIGTERM itself. A PID-1 bash
//! without a trap never forwards the signal: the pod would ride out its grace
//! period and be SIGKILLed with presence still `online`.

/// Why an entrypoint script breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntrypointError {
    /// Nothing in the script starts the harness.
    #[error("the entrypoint never starts buzz-acp")]
    NoHarness,
    /// The harness is started as a child (`buzz-acp`, `bash -c "… && buzz-acp"`):
    /// the shell stays PID 1 and the harness never sees the pod's SIGTERM.
    #[error("line {line}: buzz-acp is started without exec, so the shell stays PID 1: {text}")]
    NotExec { line: usize, text: String },
    /// Commands follow the `exec` (dead code that suggests a misunderstanding)
    /// or the last command is something else.
    #[error("line {line}: the last command must be `exec buzz-acp`, found: {text}")]
    NotLast { line: usize, text: String },
}

/// Drops a trailing ` # comment` (good enough for entrypoint scripts: a `#`
/// after whitespace starts a comment in bash outside quotes).
fn code_of(line: &str) -> &str {
    let mut prev_ws = true;
    for (i, ch) in line.char_indices() {
        if ch == '#' && prev_ws {
            return line[..i].trim_end();
        }
        prev_ws = ch.is_whitespace();
    }
    line.trim_end()
}

fn names_harness(word: &str) -> bool {
    let word = word.trim_matches(|c| c == '"' || c == '\'');
    word == "buzz-acp" || word.ends_with("/buzz-acp")
}

/// Checks `script` against the rule; `Ok` when its last command is
/// `exec buzz-acp` (by name or absolute path, with or without arguments).
pub fn check(script: &str) -> Result<(), EntrypointError> {
    let commands: Vec<(usize, &str)> = script
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, code_of(l).trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let Some(&(last_line, last)) = commands.last() else {
        return Err(EntrypointError::NoHarness);
    };
    let words: Vec<&str> = last.split_whitespace().collect();
    if words.first() == Some(&"exec") && words.get(1).is_some_and(|w| names_harness(w)) {
        return Ok(());
    }
    let mentions = |l: &str| {
        l.split(|c: char| c.is_whitespace() || "&;|()\"'".contains(c))
            .any(names_harness)
    };
    if !commands.iter().any(|(_, l)| mentions(l)) {
        return Err(EntrypointError::NoHarness);
    }
    if mentions(last) {
        return Err(EntrypointError::NotExec {
            line: last_line,
            text: last.to_string(),
        });
    }
    Err(EntrypointError::NotLast {
        line: last_line,
        text: last.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_entrypoint_ends_in_exec_buzz_acp() {
        let script = include_str!("../../../images/sprig/entrypoint.sh");
        assert_eq!(check(script), Ok(()));
    }

    #[test]
    fn exec_by_absolute_path_with_a_trailing_comment_passes() {
        assert_eq!(
            check("#!/bin/bash\nset -e\nexec /usr/local/bin/buzz-acp --x # pid 1\n"),
            Ok(())
        );
    }

    #[test]
    fn a_call_without_exec_is_named() {
        let err = check("#!/bin/bash\nset -e\nbuzz-acp\n").unwrap_err();
        assert_eq!(
            err,
            EntrypointError::NotExec {
                line: 3,
                text: "buzz-acp".into()
            }
        );
        let err = check("#!/bin/sh\nbash -c \"setup && buzz-acp\"\n").unwrap_err();
        assert!(matches!(err, EntrypointError::NotExec { line: 2, .. }), "{err:?}");
    }

    #[test]
    fn a_script_without_the_harness_is_named() {
        assert_eq!(
            check("#!/bin/bash\nexec goose acp\n"),
            Err(EntrypointError::NoHarness)
        );
        assert_eq!(check("# only a comment\n\n"), Err(EntrypointError::NoHarness));
    }

    #[test]
    fn commands_after_the_exec_are_named() {
        let err = check("#!/bin/bash\nexec buzz-acp\necho unreachable\n").unwrap_err();
        assert_eq!(
            err,
            EntrypointError::NotLast {
                line: 3,
                text: "echo unreachable".into()
            }
        );
    }
}
