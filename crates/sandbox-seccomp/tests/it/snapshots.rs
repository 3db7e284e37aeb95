//! The disassembly of a small policy matrix, so every change to the filter
//! shows up in review (`cargo insta review`).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use sandbox_seccomp::{compile_spec, FilterSpec};

fn disassembly(network: bool, deny_subprocess: bool) -> String {
    brokered(network, deny_subprocess, false)
}

fn brokered(network: bool, deny_subprocess: bool, broker: bool) -> String {
    let spec = FilterSpec {
        network,
        deny_subprocess,
        broker,
        read_deny: false,
        hold_group: false,
        broker_entries: false,
        broker_connect: false,
        egress: false,
        broker_reads: false,
        child_layer: None,
    };
    compile_spec(&spec).unwrap().disassemble()
}

/// With read denials and the broker: extended-attribute reads go to the broker too.
#[test]
fn default_backend_with_read_denials() {
    let spec = FilterSpec {
        network: true,
        deny_subprocess: false,
        broker: true,
        read_deny: true,
        hold_group: false,
        broker_entries: false,
        broker_connect: false,
        egress: false,
        broker_reads: false,
        child_layer: None,
    };
    insta::assert_snapshot!(compile_spec(&spec).unwrap().disassemble());
}

/// Refused reads recorded (an observed run under read denials): read-only
/// opens but `O_PATH` and `O_DIRECTORY` ones go to the broker too.
#[test]
fn observed_reads_with_read_denials() {
    let spec = FilterSpec {
        network: true,
        deny_subprocess: false,
        broker: true,
        read_deny: true,
        hold_group: false,
        broker_entries: true,
        broker_connect: true,
        egress: false,
        broker_reads: true,
        child_layer: None,
    };
    insta::assert_snapshot!(compile_spec(&spec).unwrap().disassemble());
}

#[test]
fn permissive_policy() {
    insta::assert_snapshot!(disassembly(true, false));
}

#[test]
fn no_network() {
    insta::assert_snapshot!(disassembly(false, false));
}

#[test]
fn no_subprocess() {
    insta::assert_snapshot!(disassembly(true, true));
}

/// What the Landlock backend installs by default: metadata writes go to the broker.
#[test]
fn default_backend_no_network_with_broker() {
    insta::assert_snapshot!(brokered(false, false, true));
}
