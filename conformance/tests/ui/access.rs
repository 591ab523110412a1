//! Who may call the Start page (issue 11 "Tests"): the token on every call,
//! `Host`/`Origin` checks against DNS rebinding and CSRF, the private opener
//! page, loopback-only listening.

use super::*;

#[test]
fn ui_every_api_call_needs_the_token() {
    let s = setup();
    s.cli(&["agent", "create", "a", "--relay", "ws://127.0.0.1:1"]);
    let ui = s.ui();
    let limit = Duration::from_secs(10);
    let wrong = format!("Bearer {}", "0".repeat(64));
    let right = format!("Bearer {}", ui.token);
    for (method, path, body) in ROUTES {
        let before = agent_names(&ui);
        for auth in [
            None,
            Some(wrong.as_str()),
            Some("Bearer "),
            Some(ui.token.as_str()),
        ] {
            let mut h = vec![("Host", ui.addr.as_str())];
            if let Some(a) = auth {
                h.push(("Authorization", a));
            }
            let r = raw_request(&ui.addr, method, path, &h, *body, limit);
            assert_eq!(r.status, 401, "{method} {path} with {auth:?}: {}", r.body);
            assert_eq!(
                r.json()["error"],
                "missing or wrong token: open the URL printed by `buzz-launcher ui`"
            );
        }
        // Nor does the token work as a query parameter.
        let q = if path.contains('?') { "&" } else { "?" };
        let with_query = format!("{path}{q}token={}", ui.token);
        let r = raw_request(&ui.addr, method, &with_query, &[("Host", &ui.addr)], *body, limit);
        assert_eq!(r.status, 401, "{method} {with_query}");
        // Nothing was changed by the refused calls.
        assert_eq!(
            agent_names(&ui),
            before,
            "{method} {path} acted without the token"
        );
        // Positive control: the same call with the token gets past the guard
        // (the event stream never ends: read it briefly).
        let h = [("Host", ui.addr.as_str()), ("Authorization", right.as_str())];
        let wait = if *path == "/api/events" {
            Duration::from_secs(1)
        } else {
            limit
        };
        let r = raw_request(&ui.addr, method, path, &h, *body, wait);
        assert!(
            r.status != 401 && r.status != 0,
            "{method} {path} with the token: {} {}",
            r.status,
            r.body
        );
    }
    // The page itself needs no token, never contains it, and is served with the CSP.
    for path in ["/", "/app.js", "/style.css"] {
        let r = raw_request(&ui.addr, "GET", path, &[("Host", &ui.addr)], None, limit);
        assert_eq!(r.status, 200, "{path}");
        assert!(!r.all_text().contains(&ui.token), "{path} carries the token");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.starts_with("default-src 'none'; script-src 'self';"),
            "{path}: {csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
}

#[test]
fn ui_refuses_a_foreign_host_or_origin() {
    let s = setup();
    let ui = s.ui();
    let limit = Duration::from_secs(10);
    let auth = format!("Bearer {}", ui.token);
    let port: u16 = ui.addr.rsplit(':').next().unwrap().parse().unwrap();
    let other_port = format!("127.0.0.1:{}", port.wrapping_add(1));
    let localhost = format!("localhost:{port}");
    let rebound = format!("evil.example:{port}");
    for host in [
        "evil.example",
        rebound.as_str(),
        localhost.as_str(),
        other_port.as_str(),
        "",
    ] {
        for path in ["/api/agents", "/", "/app.js"] {
            let mut h = vec![("Authorization", auth.as_str())];
            if !host.is_empty() {
                h.push(("Host", host));
            }
            let r = raw_request(&ui.addr, "GET", path, &h, None, limit);
            assert_eq!(r.status, 421, "Host {host:?} {path}: {}", r.body);
            assert_eq!(
                r.json()["error"],
                "this page answers only to its own loopback address"
            );
        }
    }
    let own = format!("http://{}", ui.addr);
    let other_origin = format!("http://{other_port}");
    for origin in [
        "http://evil.example",
        other_origin.as_str(),
        "null",
        "https://127.0.0.1",
    ] {
        let h = [
            ("Host", ui.addr.as_str()),
            ("Authorization", auth.as_str()),
            ("Origin", origin),
        ];
        for (method, path, body) in ROUTES {
            let r = raw_request(&ui.addr, method, path, &h, *body, limit);
            assert_eq!(r.status, 403, "Origin {origin} {method} {path}: {}", r.body);
            assert_eq!(r.json()["error"], "cross-origin requests are refused");
        }
    }
    for site in ["cross-site", "same-site"] {
        let h = [
            ("Host", ui.addr.as_str()),
            ("Authorization", auth.as_str()),
            ("Sec-Fetch-Site", site),
        ];
        let r = raw_request(&ui.addr, "GET", "/api/agents", &h, None, limit);
        assert_eq!(r.status, 403, "Sec-Fetch-Site {site}");
    }
    let h = [
        ("Host", ui.addr.as_str()),
        ("Authorization", auth.as_str()),
        ("Origin", own.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
    ];
    let r = raw_request(&ui.addr, "GET", "/api/agents", &h, None, limit);
    assert_eq!(r.status, 200, "own origin: {}", r.body);
}

/// `--open` hands the desktop's opener a private redirect page, never the
/// URL: argv is readable by every local user (`ps`, `/proc/*/cmdline`).
#[test]
fn ui_open_hands_the_opener_a_private_page_never_the_token() {
    let s = setup();
    let bin_dir = s.home.with_extension("bin");
    std::fs::create_dir_all(&bin_dir).expect("bin dir");
    let argv_log = s.home.with_extension("xdg-open.argv");
    let opener = bin_dir.join("xdg-open");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n", argv_log.display()),
    )
    .expect("write opener");
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut envs = s.envs.clone();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    envs.push(("PATH".to_string(), path));
    let ui = UiProc::start_with(Path::new(BIN), &s.home, &["--open"], &envs);

    let mut argv = String::new();
    for _ in 0..100 {
        argv = std::fs::read_to_string(&argv_log).unwrap_or_default();
        if !argv.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let page = PathBuf::from(argv.trim());
    assert!(page.is_absolute(), "the opener got one path: {argv:?}");
    assert!(!argv.contains(&ui.token), "the token reached the opener's argv");
    let mode = std::fs::metadata(&page)
        .expect("the page exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the page is private to the user: {mode:o}");
    let html = std::fs::read_to_string(&page).expect("read the page");
    assert!(
        html.contains(&format!("http-equiv=\"refresh\" content=\"0;url={}\"", ui.url)),
        "the page redirects to the printed URL: {html}"
    );
}

#[test]
fn ui_listens_on_loopback_only() {
    let s = setup();
    // An agent on the embedded relay: a refused page must not start that relay either.
    s.cli(&["agent", "create", "emb", "--agent", "echo"]);
    let store = Store::open(&s.home).unwrap();
    let port = desktop_launcher::embedded::port(&store).unwrap();
    for listen in ["0.0.0.0:0", "[::]:0", "192.0.2.1:0"] {
        let out = launcher(Path::new(BIN), &s.home, &["ui", "--listen", listen], &s.envs);
        assert_eq!(out.status.code(), Some(1), "{listen}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "refusing to listen on {listen}: the Start page binds loopback addresses only"
            )),
            "{listen}: {err}"
        );
        assert!(out.stdout.is_empty(), "{listen}: a URL was printed");
        // No side effect: no relay was started, none is recorded.
        assert_eq!(
            desktop_launcher::embedded::load(&store).unwrap().pid,
            None,
            "{listen}"
        );
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "{listen}: something serves the embedded relay's port"
        );
    }
}
