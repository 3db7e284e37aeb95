//! Test-only weakenings, one mechanism each, for the mutation check of the
//! conformance proof (`cargo xtask conformance --weaken AXIS`): a build with
//! one of the `weaken-*` features must fail that axis's rows. Never an
//! environment variable, never in a release build (see the crate root's
//! `compile_error!`); without the features every function here is the
//! identity.

use sandbox_seccomp::FilterSpec;

/// The features this build was compiled with.
#[cfg_attr(
    not(any(
        feature = "weaken-write",
        feature = "weaken-network",
        feature = "weaken-spawn",
        feature = "weaken-broker"
    )),
    allow(dead_code)
)]
pub(crate) const ENABLED: &[&str] = &[
    #[cfg(feature = "weaken-write")]
    "write",
    #[cfg(feature = "weaken-network")]
    "network",
    #[cfg(feature = "weaken-spawn")]
    "spawn",
    #[cfg(feature = "weaken-broker")]
    "broker",
];

/// `weaken-network` drops the network part of the filter (compiled as if
/// the policy allowed the network, and `connect` no longer handed to the
/// broker, which would refuse it by the policy); `weaken-spawn` drops the
/// spawn part (as if it allowed subprocesses).
pub(crate) fn spec(spec: FilterSpec) -> FilterSpec {
    #[cfg(feature = "weaken-network")]
    let spec = FilterSpec {
        network: true,
        egress: false,
        broker_connect: false,
        ..spec
    };
    #[cfg(feature = "weaken-spawn")]
    let spec = FilterSpec {
        deny_subprocess: false,
        ..spec
    };
    spec
}

/// `weaken-network` also drops Landlock's network part (no `CONNECT_TCP`,
/// no abstract-socket scope).
pub(crate) fn network_ruleset(no_net: bool) -> bool {
    no_net && !cfg!(feature = "weaken-network")
}

/// `weaken-write`: the ruleset grants every handled write right on `/`, so
/// Landlock refuses no write (read denials stay).
pub(crate) const WRITE_EVERYWHERE: bool = cfg!(feature = "weaken-write");

/// `weaken-broker`: every call the filter would hand to the broker
/// continues in the kernel unchecked (`SECCOMP_RET_USER_NOTIF` becomes
/// `SECCOMP_RET_ALLOW`); the broker listens and hears nothing.
pub(crate) fn brokered_program(mut program: Vec<libc::sock_filter>) -> Vec<libc::sock_filter> {
    if cfg!(feature = "weaken-broker") {
        let ret_k = (libc::BPF_RET | libc::BPF_K) as u16;
        for i in program.iter_mut() {
            if i.code == ret_k && i.k == libc::SECCOMP_RET_USER_NOTIF {
                i.k = libc::SECCOMP_RET_ALLOW;
            }
        }
    }
    program
}
