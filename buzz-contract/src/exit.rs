//! The harness's pinned exit-code contract (spec I5 "Restart policy follows
//! lifetime policy", §Conformance \[L1\] item 4, Known Defect 6; DESIGN.md
//! Decision 5), with what each code means to a person. One table: the
//! harness exits with [`Exit::code`], the launcher explains a code it saw
//! with [`meaning`] (issue 24 item 2).
//!
//! | code | meaning | restart? |
//! |---|---|---|
//! | 0 | intentional stop: owner `!shutdown`, SIGTERM/SIGINT, inactivity reaper | never |
//! | 1 | internal error (unexpected failure at the binary edge) | may |
//! | 2 | configuration error (bad value, bad combination; clap usage errors) | may (will fail again) |
//! | 3 | identity refusal: empty/malformed key, missing relay URL, no owner (I1) | may (will fail again) |
//! | 4 | terminal relay auth denial (`auth-required:`, `restricted:`, `blocked:` to our AUTH) | may |
//! | 5 | all agents dead: every pool slot kept dying | may |
//! | 6 | relay lost: unreachable longer than the configured bound, or the relay task ended | may |
//! | 101 | panic (Rust runtime default) | may |

/// Why the harness exits; [`Exit::code`] is the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Owner `!shutdown`, SIGTERM/SIGINT or the inactivity reaper: exit 0.
    Intentional,
    /// Unexpected internal failure.
    Internal,
    /// Invalid configuration.
    Config,
    /// Identity fails closed (I1).
    Identity,
    /// The relay refused our NIP-42 authentication terminally.
    AuthDenied,
    /// Every agent slot kept dying.
    AgentsDead,
    /// The relay stayed unreachable past the configured bound.
    RelayLost,
}

impl Exit {
    /// The process exit code of this reason.
    pub const fn code(self) -> i32 {
        match self {
            Exit::Intentional => 0,
            Exit::Internal => 1,
            Exit::Config => 2,
            Exit::Identity => 3,
            Exit::AuthDenied => 4,
            Exit::AgentsDead => 5,
            Exit::RelayLost => 6,
        }
    }
}

/// The Rust runtime's exit code after a panic.
pub const PANIC_CODE: i32 = 101;

impl Exit {
    /// Every reason, in code order.
    pub const ALL: [Exit; 7] = [
        Exit::Intentional,
        Exit::Internal,
        Exit::Config,
        Exit::Identity,
        Exit::AuthDenied,
        Exit::AgentsDead,
        Exit::RelayLost,
    ];

    /// The exits a supervisor must not restart (systemd's
    /// `RestartPreventExitStatus`): each fails the same way on every try.
    /// Exit 0 is not among them only because `Restart=on-failure` never
    /// restarts it.
    pub const FINAL: [Exit; 3] = [Exit::Config, Exit::Identity, Exit::AuthDenied];

    /// The reason behind a harness exit code, if it is one of the table's.
    pub fn from_code(code: i32) -> Option<Exit> {
        Exit::ALL.into_iter().find(|e| e.code() == code)
    }

    /// What the code means to the person reading it.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Intentional => {
                "an intentional stop: owner !shutdown, SIGTERM/SIGINT or the inactivity reaper"
            }
            Exit::Internal => "an internal error",
            Exit::Config => "a configuration error: a bad value or combination",
            Exit::Identity => "an identity refusal: a missing or malformed key, relay URL or owner",
            Exit::AuthDenied => "the relay refused the agent's login: NIP-42 auth denied",
            Exit::AgentsDead => "all agents dead: the agent command could not start or kept dying",
            Exit::RelayLost => "relay lost: the relay stayed unreachable",
        }
    }
}

/// What a harness exit code means (a panic and unknown codes included).
pub fn meaning(code: i32) -> &'static str {
    match Exit::from_code(code) {
        Some(e) => e.meaning(),
        None if code == PANIC_CODE => "a panic",
        None => "not one of the harness's exit codes",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_intentional_is_zero_and_codes_are_distinct() {
        let all = Exit::ALL;
        let codes: std::collections::BTreeSet<i32> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(all.iter().filter(|e| e.code() == 0).count(), 1);
        assert_eq!(Exit::Intentional.code(), 0);
    }

    #[test]
    fn every_code_maps_back_and_has_a_meaning() {
        for e in Exit::ALL {
            assert_eq!(Exit::from_code(e.code()), Some(e));
            assert_eq!(meaning(e.code()), e.meaning());
        }
        assert_eq!(meaning(101), "a panic");
        assert_eq!(meaning(7), "not one of the harness's exit codes");
    }

    #[test]
    fn the_table_is_pinned() {
        let table = [
            (Exit::Intentional, 0),
            (Exit::Internal, 1),
            (Exit::Config, 2),
            (Exit::Identity, 3),
            (Exit::AuthDenied, 4),
            (Exit::AgentsDead, 5),
            (Exit::RelayLost, 6),
        ];
        for (e, code) in table {
            assert_eq!(e.code(), code, "{e:?}");
        }
    }
}
