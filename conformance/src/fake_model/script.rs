//! The script: turns, failures, and which turn answers a request.

/// What an empty script answers to every turn.
pub const EMPTY_SCRIPT_TEXT: &str = "ok";

/// How a failing request is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// HTTP 500 with a JSON error body in the API's own error shape.
    Http500,
    /// HTTP 401 with a JSON error body in the API's own error shape.
    Http401,
    /// No answer at all: the connection stays open, without a byte sent,
    /// until the [`FakeModel`](super::FakeModel) is dropped.
    Hang,
}

/// One answer of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Text, one content block (Anthropic) / message item (OpenAI) / part
    /// (Gemini) per entry.
    Text(Vec<String>),
    /// A call of the agent's shell tool with this command line, after an
    /// optional text block.
    Shell {
        lead: Option<String>,
        command: String,
    },
    /// A read of the file at `path` with the agent's own read tool where
    /// it has one (Claude Code's `Read`), else its shell with `shell`
    /// (`cat <path>`).
    Read {
        path: String,
        shell: String,
    },
    Fail(Failure),
}

/// One scripted turn: the answer to the request that starts it, and the
/// answer to its follow-ups (the requests carrying a tool result).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    first: Step,
    follow_up: Step,
}

impl Turn {
    /// Answers with one text block.
    pub fn text(text: impl Into<String>) -> Turn {
        Turn::texts([text.into()])
    }

    /// Answers with several text blocks (Anthropic: content blocks; OpenAI:
    /// message items; Gemini: parts), to test how a client separates them.
    pub fn texts<I, S>(blocks: I) -> Turn
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let step = Step::Text(blocks.into_iter().map(Into::into).collect());
        Turn {
            first: step.clone(),
            follow_up: step,
        }
    }

    /// Calls the agent's shell tool with `command`, then answers `then` once
    /// the tool result comes back.
    pub fn shell(command: impl Into<String>, then: impl Into<String>) -> Turn {
        Turn {
            first: Step::Shell {
                lead: None,
                command: command.into(),
            },
            follow_up: Step::Text(vec![then.into()]),
        }
    }

    /// Says `lead` (one text block), calls the shell tool with `command`
    /// in the same answer, then answers `then` once the tool result comes
    /// back: two text blocks around a tool call.
    pub fn say_then_shell(
        lead: impl Into<String>,
        command: impl Into<String>,
        then: impl Into<String>,
    ) -> Turn {
        Turn {
            first: Step::Shell {
                lead: Some(lead.into()),
                command: command.into(),
            },
            follow_up: Step::Text(vec![then.into()]),
        }
    }

    /// Reads the file at `path` with the agent's read tool (its shell's
    /// `cat` where it has none), then answers `then` once the tool result
    /// comes back.
    pub fn read(path: impl Into<String>, then: impl Into<String>) -> Turn {
        let path = path.into();
        Turn {
            first: Step::Read {
                shell: format!("cat {path}"),
                path,
            },
            follow_up: Step::Text(vec![then.into()]),
        }
    }

    /// Fails the request that starts this turn (and any follow-up of it).
    pub fn fail(failure: Failure) -> Turn {
        Turn {
            first: Step::Fail(failure),
            follow_up: Step::Fail(failure),
        }
    }
}

/// The model's side of a conversation, turn by turn.
#[derive(Clone, Debug, Default)]
pub struct Script {
    turns: Vec<Turn>,
}

impl Script {
    /// An empty script (every turn answers [`EMPTY_SCRIPT_TEXT`]).
    pub fn new() -> Script {
        Script::default()
    }

    /// Appends a turn.
    pub fn turn(mut self, turn: Turn) -> Script {
        self.turns.push(turn);
        self
    }
}

pub(super) struct ScriptState {
    turns: Vec<Turn>,
    next: usize,
    current: Option<usize>,
}

impl ScriptState {
    /// Appends a turn to a running script.
    pub(super) fn push(&mut self, turn: Turn) {
        self.turns.push(turn);
    }

    pub(super) fn new(script: Script) -> ScriptState {
        ScriptState {
            turns: script.turns,
            next: 0,
            current: None,
        }
    }

    /// The step answering a request, and the turn it belongs to: a follow-up
    /// stays in the current turn, any other request starts the next one
    /// (the last turn repeats once the script runs out).
    pub(super) fn step(&mut self, follow_up: bool) -> (Step, Option<usize>) {
        if self.turns.is_empty() {
            return (Step::Text(vec![EMPTY_SCRIPT_TEXT.to_string()]), None);
        }
        let idx = match (follow_up, self.current) {
            (true, Some(cur)) => cur,
            _ => {
                let idx = self.next.min(self.turns.len() - 1);
                self.next += 1;
                self.current = Some(idx);
                idx
            }
        };
        let turn = &self.turns[idx];
        let step = if follow_up { &turn.follow_up } else { &turn.first };
        (step.clone(), Some(idx))
    }
}
