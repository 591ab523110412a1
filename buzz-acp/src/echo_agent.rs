//! The built-in echo agent: a minimal, real ACP agent over stdio (wire-facts
//! §6) on the agent side of the official `agent-client-protocol` crate.
//!
//! **A smoke test, never the default**: it answers each prompt with the
//! prompt's text, so a user can check the relay, the keys, presence and the
//! Kubernetes path before wiring a paid model. Selected with
//! `BUZZ_ACP_AGENT_COMMAND=builtin:echo`
//! ([`buzz_contract::env::BUILTIN_ECHO_AGENT`]): the harness then spawns its
//! own executable with the hidden first argument
//! [`buzz_contract::env::BUILTIN_ECHO_ARG`] ([`program_for`]), so the image
//! needs no extra binary.
//!
//! Requests served: `initialize`, `session/new`, `session/prompt` (one
//! `agent_message_chunk` with the text, then `end_turn`) and the
//! `session/cancel` notification, which is accepted and changes nothing:
//! each prompt is answered at once, so no turn is ever in flight to stop,
//! and a late cancel must not affect the next prompt.

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, InitializeRequest, InitializeResponse,
    NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, SessionNotification, SessionUpdate,
    StopReason, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams};
use buzz_contract::env::{BUILTIN_ECHO_AGENT, BUILTIN_ECHO_ARG};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// The program and arguments the harness runs for the agent command
/// `command`: its own executable with [`BUILTIN_ECHO_ARG`] for
/// [`BUILTIN_ECHO_AGENT`], else `command` with `args` unchanged.
pub fn program_for(
    command: &str,
    args: &[String],
    own_exe: impl FnOnce() -> Option<PathBuf>,
) -> (PathBuf, Vec<String>) {
    if command == BUILTIN_ECHO_AGENT
        && let Some(exe) = own_exe()
    {
        return (exe, vec![BUILTIN_ECHO_ARG.to_string()]);
    }
    (PathBuf::from(command), args.to_vec())
}

/// The text of a prompt's text blocks, joined by newlines.
pub fn prompt_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Serves ACP on `reader`/`writer` until the client closes the stream.
pub async fn serve(
    reader: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    writer: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
) -> agent_client_protocol::Result<()> {
    let sessions = Arc::new(AtomicU64::new(0));
    let transport = ByteStreams::new(writer.compat_write(), reader.compat());
    Agent
        .v1()
        .name("buzz-echo")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx| {
                responder.respond(
                    InitializeResponse::new(req.protocol_version)
                        .agent_capabilities(AgentCapabilities::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: NewSessionRequest, responder, _cx| {
                let n = sessions.fetch_add(1, Ordering::SeqCst);
                responder.respond(NewSessionResponse::new(format!(
                    "echo-{}-{n}",
                    std::process::id()
                )))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |_n: CancelNotification, _cx| Ok(()),
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, cx| {
                let session = req.session_id.clone();
                let text = prompt_text(&req.prompt);
                cx.send_notification(SessionNotification::new(
                    session,
                    SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(
                        TextContent::new(text),
                    ))),
                ))?;
                responder.respond(PromptResponse::new(StopReason::EndTurn))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(transport)
        .await
}

/// Runs the echo agent on this process's stdin/stdout and exits.
pub fn main() -> ! {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("buzz-echo: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(serve(tokio::io::stdin(), tokio::io::stdout())) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("buzz-echo: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_builtin_name_selects_the_own_executable() {
        let exe = || Some(PathBuf::from("/x/buzz-acp"));
        assert_eq!(
            program_for("builtin:echo", &["ignored".into()], exe),
            (PathBuf::from("/x/buzz-acp"), vec![BUILTIN_ECHO_ARG.to_string()])
        );
        assert_eq!(
            program_for("goose", &["acp".into()], exe),
            (PathBuf::from("goose"), vec!["acp".to_string()])
        );
        assert_eq!(
            program_for("builtin:echo", &[], || None),
            (PathBuf::from("builtin:echo"), vec![])
        );
    }
}
