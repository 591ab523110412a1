//! `POST /v1/ingest/{kind}` (collector-design.md §10 "Request", "Decode",
//! "Durable before 2xx"; issue 19: bounded memory, reason codes).
//!
//! In order: take the next fault; wait for a body slot; read the body within the body
//! timeout and the compressed cap; check `Content-Encoding: gzip` and `Content-Type:
//! application/json`; decode; validate; then either answer the fault, or refuse with
//! the [`Reject`] (JSON body, one log line, counted by code), or upsert and answer
//! 204 — 503 `storage.unavailable` when the store fails. The body slot is held until
//! the answer, so at most `bodies_in_flight` bodies and their decoded payloads are in
//! memory at once. The request goes into the `received` log with its decoded body
//! only when the payload validated.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::Incoming;
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};

use super::{Dropped, Reply, State, clip, close_after, empty, json, lock};
use crate::faults::Fault;
use crate::limits;
use crate::received::Received;
use crate::reject::{ErrorBody, Reject, STORAGE_UNAVAILABLE};
use crate::{decode, validate};

fn header(req: &Request<Incoming>, name: hyper::header::HeaderName) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| clip(v, limits::HEADER_KEPT))
}

/// Read the body: at most `cap` bytes kept; past it, up to [`limits::DISCARD_LIMIT`]
/// more read and dropped, then [`Reject::BodyTooLarge`].
async fn read_body(mut body: Incoming, cap: usize) -> Result<Vec<u8>, Reject> {
    let mut kept = Vec::new();
    let mut over = false;
    let mut discarded = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| Reject::BodyUnreadable)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if over {
            discarded = discarded.saturating_add(data.len());
            if discarded > limits::DISCARD_LIMIT {
                break;
            }
        } else if kept.len() + data.len() > cap {
            over = true;
            kept = Vec::new();
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if over {
        Err(Reject::BodyTooLarge { cap })
    } else {
        Ok(kept)
    }
}

fn is_gzip(encoding: Option<&str>) -> bool {
    encoding.is_some_and(|e| e.trim().eq_ignore_ascii_case("gzip"))
}

fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    })
}

fn refuse(state: &State, seen: &mut Received, reject: &Reject) -> Reply {
    *lock(&state.rejected).entry(reject.code()).or_default() += 1;
    eprintln!(
        "runtime-ingest: {} {} {}: {reject}",
        reject.status(),
        reject.code(),
        seen.path
    );
    seen.status = reject.status();
    seen.error = Some(reject.code());
    let r = json(reject.status(), &reject.body());
    Ok(match reject {
        // The body was not read to its end: the connection cannot carry another.
        Reject::BodyTooLarge { .. } | Reject::BodyTimeout { .. } | Reject::BodyUnreadable => close_after(r),
        _ => r,
    })
}

fn storage_unavailable(state: &State, seen: &mut Received, why: &dyn std::fmt::Display) -> Reply {
    *lock(&state.storage_failures) += 1;
    eprintln!("runtime-ingest: 503 {STORAGE_UNAVAILABLE} {}: {why}", seen.path);
    seen.status = 503;
    seen.error = Some(STORAGE_UNAVAILABLE);
    Ok(json(
        503,
        &ErrorBody {
            error: STORAGE_UNAVAILABLE,
            detail: "the payload could not be stored durably; send it again later".into(),
        },
    ))
}

/// Handle one ingest request.
pub(super) async fn ingest(state: &State, kind: String, req: Request<Incoming>) -> Reply {
    let mut seen = Received {
        path: clip(req.uri().path(), limits::PATH_KEPT),
        user_agent: header(&req, USER_AGENT),
        content_type: header(&req, CONTENT_TYPE),
        content_encoding: header(&req, CONTENT_ENCODING),
        status: 0,
        error: None,
        body_bytes: 0,
        body: String::new(),
    };
    let fault = lock(&state.script).take_next();
    let Ok(_slot) = std::sync::Arc::clone(&state.bodies).acquire_owned().await else {
        return Err(Dropped);
    };
    let opts = &state.options;
    let timeout = opts.body_timeout;
    let raw = match tokio::time::timeout(
        timeout,
        read_body(req.into_body(), limits::compressed_cap(opts.decoded_cap)),
    )
    .await
    {
        Ok(read) => read,
        Err(_) => Err(Reject::BodyTimeout {
            ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }),
    };
    let decoded = raw.and_then(|raw| {
        seen.body_bytes = raw.len() as u64;
        if !is_gzip(seen.content_encoding.as_deref()) {
            Err(Reject::NotGzipEncoded)
        } else if !is_json(seen.content_type.as_deref()) {
            Err(Reject::NotJsonContentType)
        } else {
            decode(&raw, opts.decoded_cap)
        }
    });
    if let Ok(d) = &decoded {
        seen.body_bytes = d.len() as u64;
    }
    let validated = match &decoded {
        Ok(d) => validate(&kind, d),
        Err(e) => Err(e.clone()),
    };
    if let (Ok(_), Ok(d)) = (&validated, &decoded) {
        seen.body = String::from_utf8_lossy(d).into_owned();
    }
    let reply = match fault {
        // An ingest crash: the process ends at once, nothing stored, no reply (137 as
        // for SIGKILL; no core file, unlike abort).
        Some(Fault::Kill) => std::process::exit(137),
        Some(Fault::Status {
            status, retry_after, ..
        }) => {
            seen.status = status;
            let mut r = empty(status);
            if let Some(secs) = retry_after {
                r.headers_mut()
                    .insert(RETRY_AFTER, secs.to_string().parse().map_err(|_| Dropped)?);
            }
            Ok(r)
        }
        Some(Fault::Hang { ms, .. }) => {
            lock(&state.received).push(seen);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            return Err(Dropped);
        }
        Some(Fault::Close { .. }) => Err(Dropped),
        Some(Fault::StorageError { .. }) => storage_unavailable(state, &mut seen, &"injected fault"),
        Some(Fault::DropAfterCommit { .. }) | Some(Fault::Pass { .. }) | None => match validated {
            Err(reject) => refuse(state, &mut seen, &reject),
            Ok(v) => match lock(&state.store).upsert(&opts.source_id, &v) {
                Err(e) => storage_unavailable(state, &mut seen, &e),
                Ok(()) if matches!(fault, Some(Fault::DropAfterCommit { .. })) => Err(Dropped),
                Ok(()) => {
                    seen.status = 204;
                    Ok(empty(204))
                }
            },
        },
    };
    lock(&state.received).push(seen);
    reply
}
