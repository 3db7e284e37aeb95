//! network = false: TCP connect to a loopback listener fails (v4 and v6),
//! socketpair + NULL-address send works; Landlock's signal scope keeps the
//! command from signalling the process that launched it.
#![cfg(target_os = "linux")]

use crate::common::*;
use std::net::TcpListener;

fn connect_script(host: &str, port: u16) -> String {
    format!(
        "{PYTHON} -c 'import socket; s=socket.create_connection((\"{host}\", {port}), timeout=30); print(\"connected\")'"
    )
}

fn check_connect(listener: &TcpListener, host: &str) {
    let t = temp();
    let port = listener.local_addr().unwrap().port();
    let open = resolve(write_policy(&[&t.path], true));
    let closed = resolve(write_policy(&[&t.path], false));
    assert!(ok(&sh(&open, &connect_script(host, port))).contains("connected"));
    let err = denied(&sh(&closed, &connect_script(host, port)));
    assert!(
        err.contains("PermissionError") || err.contains("Operation not permitted"),
        "{err}"
    );
}

#[test]
fn tcp_connect_v4_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    check_connect(&listener, "127.0.0.1");
}

#[test]
fn tcp_connect_v6_is_refused() {
    let listener = TcpListener::bind("[::1]:0").unwrap();
    check_connect(&listener, "::1");
}

#[test]
fn socketpair_and_null_address_send_work() {
    let t = temp();
    let closed = resolve(write_policy(&[&t.path], false));
    let out = ok(&sh(&closed, &format!(
        "{PYTHON} -c 'import socket; a,b=socket.socketpair(); a.send(b\"hi\"); print(b.recv(2).decode())'"
    )));
    assert_eq!(out.trim(), "hi");
}

#[test]
fn signalling_the_parent_fails_own_child_works() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], false));
    // Signal 0 only checks permission: harmless if it were allowed.
    ok(&sh_plain("kill -0 $PPID"));
    refused(&sh(&policy, "kill -0 $PPID"));
    let out = ok(&sh(
        &policy,
        "sleep 1000 & pid=$!; kill -TERM $pid; wait $pid; echo status=$?",
    ));
    assert!(out.contains("status=143"), "{out}");
}
