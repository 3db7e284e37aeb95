//! Proof that a backend enforces, on the host that claims it.
//!
//! * [`gate`] / [`enforcement_self_test`]: the production gate. Before a
//!   backend is handed out, short commands are launched through its own wrap:
//!   the write probe (positive control, then writes outside `write_paths` must
//!   not happen) and the spawn probe (positive control, non-forking control,
//!   then a child under `deny_subprocess` must never run). Only two witnessed
//!   probes pass; the result is cached per backend name per process. The
//!   probes judge what their launches report (each call's errno), and a
//!   scratch another process changed is *interfered with*, never
//!   "unsupported" ([`ProbeResult::Interfered`]); [`gate_in`] puts the
//!   scratch in a trusted directory no confined run can write.
//! * `conformance` (cargo feature, CI only, never used by the gate): every
//!   axis of [`sandbox_core::axis::REGISTRY`] × deny/boundary/workload leg,
//!   run against a real backend, with evidence.
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "conformance")]
pub mod conformance;
mod gate;
mod launch;
mod probe;

pub use gate::{
    cached, enforcement_self_test, enforcement_self_test_in, gate, gate_in, GateFailure, GateReport,
};
pub use launch::LaunchFacts;
pub use probe::{
    spawn_probe, write_probe, Check, CheckRole, ProbeKind, ProbeReport, ProbeResult,
    LAUNCH_DEADLINE,
};
