//! systemd's service notification, sd_notify(3), for a harness run as a
//! `Type=notify` unit (the SSH provider, issue 51): `READY=1` once the
//! startup checks passed (identity, configuration, the agent command; the
//! moment a pod's probe listener is bound), so `systemctl start` returns
//! only then, and fails with the harness's own exit when a check refuses;
//! `STOPPING=1` when the graceful stop begins.
//!
//! The protocol: one datagram of `KEY=VALUE` lines to the Unix socket
//! `$NOTIFY_SOCKET` names (a path, or an abstract name written `@name`).
//! Without the variable (a pod, a laptop, a container's PID 1) nothing is
//! sent. A send that fails is logged and changes nothing: the unit's start
//! timeout then says it.
//!
//! The unit sets `NotifyAccess=main`, so an agent process that inherited
//! the variable cannot speak for the harness.

/// The variable systemd sets for a `Type=notify` service.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Says the startup checks passed.
pub fn ready() {
    send("READY=1\n");
}

/// Says the graceful stop began.
pub fn stopping() {
    send("STOPPING=1\n");
}

fn send(message: &str) {
    let Some(at) = std::env::var_os(NOTIFY_SOCKET) else {
        return;
    };
    if let Err(e) = send_to(&at, message) {
        tracing::warn!(error = %e, "the readiness notification to systemd failed");
    }
}

fn send_to(at: &std::ffi::OsStr, message: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = at.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(at))?,
    };
    UnixDatagram::unbound()?.send_to_addr(message.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_reaches_a_path_socket_and_an_abstract_one() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        send_to(path.as_os_str(), "READY=1\n").unwrap();
        let mut buf = [0u8; 64];
        let n = sock.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");

        let name = format!("buzz-acp-notify-test-{}", std::process::id());
        let abs = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        send_to(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1\n").unwrap();
        let n = abs.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1\n");
    }

    #[test]
    fn a_missing_socket_is_an_error_the_caller_logs() {
        assert!(send_to(std::ffi::OsStr::new("/nonexistent/notify"), "READY=1\n").is_err());
    }
}
