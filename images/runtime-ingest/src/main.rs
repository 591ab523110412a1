//! `runtime-ingest`: the reference ingest backend (collector-design.md §10).
//!
//! `runtime-ingest serve --db <path> [--listen 127.0.0.1:8470] [--source-id default]
//! [--admin] [--read-api --read-token-file <path>] [--faults <json>] [--decoded-cap <bytes>]
//! [--max-connections <n>] [--body-timeout-ms <ms>] [--received-budget <bytes>]` prints
//! `listening on http://<addr>` on stdout once it accepts connections. Every refusal
//! is logged on stderr as one line, `runtime-ingest: <status> <code> <path>: <detail>`.
//! `--admin` enables the unauthenticated `/debug/*` and `/admin/faults` routes (tests
//! and local inspection only); without it they answer 404. `--read-api` enables
//! `GET /v1/read/usage`, the Buzz launcher's read ([`runtime_ingest::read`]), for the
//! bearer of the token in `--read-token-file` (or the file
//! `RUNTIME_INGEST_READ_TOKEN_FILE` names) only ([`runtime_ingest::auth`]; review
//! afa2bf1 finding 5): without a usable token file it does not start.
//!
//! `runtime-ingest report --db <path> --out <chart.svg>` draws the stored usage per
//! agent (average cores and largest working set per hour window).
//!
//! Exit codes: 1 when the database or the listener cannot be opened (or the chart
//! cannot be drawn); 2 for bad arguments (a missing or unusable read token included).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use std::time::Duration;

use runtime_ingest::auth::ReadToken;
use runtime_ingest::faults::{Fault, Script};
use runtime_ingest::limits;
use runtime_ingest::server::{Options, State, serve};
use runtime_ingest::store::Store;

#[derive(Parser)]
#[command(
    name = "runtime-ingest",
    version,
    about = "Reference ingest backend for runtime-agent"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the ingest API.
    Serve {
        /// SQLite database file (created if missing).
        #[arg(long)]
        db: PathBuf,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8470")]
        listen: String,
        /// The one configured source everything that arrives is attributed to.
        #[arg(long, default_value = "default")]
        source_id: String,
        /// Enable the unauthenticated `/debug/*` read-back and `POST /admin/faults`
        /// (tests and local inspection only; without it they answer 404).
        #[arg(long)]
        admin: bool,
        /// Enable `GET /v1/read/usage?namespace=&pod=`: one agent's CPU, memory and
        /// OOM kills, for the Buzz launcher's usage panel; only for the bearer of
        /// the token in `--read-token-file` (required with it).
        #[arg(long)]
        read_api: bool,
        /// A file only its owner may read (mode 0600 or 0400) holding the bearer
        /// token `--read-api` requires: at least 32 visible ASCII characters, e.g.
        /// `umask 077; openssl rand -hex 32 > FILE`. The launcher reads the same
        /// file through `BUZZ_TELEMETRY_READ_TOKEN_FILE`.
        #[arg(long, env = "RUNTIME_INGEST_READ_TOKEN_FILE", value_name = "PATH")]
        read_token_file: Option<PathBuf>,
        /// An initial fault script (JSON array; implies nothing without `--admin`
        /// except these faults).
        #[arg(long)]
        faults: Option<String>,
        /// Decoded-size cap in bytes.
        #[arg(long, default_value_t = runtime_ingest::DECODED_CAP)]
        decoded_cap: usize,
        /// Connections served at once (the next wait in the listen backlog).
        #[arg(long, default_value_t = limits::MAX_CONNECTIONS, value_parser = clap::value_parser!(usize))]
        max_connections: usize,
        /// How long a request body may take to arrive, in milliseconds (408 after).
        #[arg(long, default_value_t = limits::BODY_TIMEOUT.as_millis() as u64)]
        body_timeout_ms: u64,
        /// Bytes the `/debug/received` log keeps (oldest evicted first).
        #[arg(long, default_value_t = limits::RECEIVED_BUDGET)]
        received_budget: usize,
    },
    /// Draw the stored usage per agent as an SVG chart.
    Report {
        /// SQLite database file written by `serve`.
        #[arg(long)]
        db: PathBuf,
        /// Where to write the SVG.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli.command {
        Command::Report { db, out } => {
            let rows = Store::open(&db).and_then(|s| s.records(None, None));
            match rows {
                Ok(rows) => {
                    match runtime_ingest::report::render(&runtime_ingest::report::series(&rows), &out) {
                        Ok(()) => {
                            println!("{}", out.display());
                            ExitCode::SUCCESS
                        }
                        Err(e) => {
                            eprintln!("runtime-ingest: report: {e}");
                            ExitCode::from(1)
                        }
                    }
                }
                Err(e) => {
                    eprintln!("runtime-ingest: cannot read {}: {e}", db.display());
                    ExitCode::from(1)
                }
            }
        }
        Command::Serve {
            db,
            listen,
            source_id,
            admin,
            read_api,
            read_token_file,
            faults,
            decoded_cap,
            max_connections,
            body_timeout_ms,
            received_budget,
        } => {
            let read_token = match read_token(read_api, read_token_file.as_deref()) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("runtime-ingest: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut script = Script::default();
            if let Some(json) = faults {
                match serde_json::from_str::<Vec<Fault>>(&json) {
                    Ok(f) => script.set(f),
                    Err(e) => {
                        eprintln!("runtime-ingest: --faults: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            let store = match Store::open(&db) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("runtime-ingest: cannot open {}: {e}", db.display());
                    return ExitCode::from(1);
                }
            };
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("runtime-ingest: {e}");
                    return ExitCode::from(1);
                }
            };
            let state = State::new(
                store,
                Options {
                    source_id,
                    admin,
                    read_api,
                    read_token,
                    decoded_cap,
                    body_timeout: Duration::from_millis(body_timeout_ms),
                    max_connections,
                    bodies_in_flight: limits::BODIES_IN_FLIGHT,
                    received_budget,
                },
            );
            *state
                .script
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = script;
            let state = Arc::new(state);
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::bind(&listen).await {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("runtime-ingest: cannot listen on {listen}: {e}");
                        return ExitCode::from(1);
                    }
                };
                match listener.local_addr() {
                    Ok(addr) => println!("listening on http://{addr}"),
                    Err(e) => {
                        eprintln!("runtime-ingest: {e}");
                        return ExitCode::from(1);
                    }
                }
                match serve(listener, state).await {}
            })
        }
    }
}

/// The read API's token: required with `--read-api`, refused without it.
fn read_token(read_api: bool, file: Option<&Path>) -> Result<Option<ReadToken>, String> {
    match (read_api, file) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(
            "--read-token-file (or RUNTIME_INGEST_READ_TOKEN_FILE) is the read API's token: \
             add --read-api to serve it, or drop the token file"
                .into(),
        ),
        (true, None) => Err(
            "--read-api needs --read-token-file PATH (or RUNTIME_INGEST_READ_TOKEN_FILE=PATH): \
             a file only its owner may read holding the bearer token every read must carry \
             (make one with `umask 077; openssl rand -hex 32 > PATH`, and give the launcher \
             the same file as BUZZ_TELEMETRY_READ_TOKEN_FILE)"
                .into(),
        ),
        (true, Some(path)) => ReadToken::from_file(path).map(Some).map_err(|e| e.to_string()),
    }
}
