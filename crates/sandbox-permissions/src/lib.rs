//! Dispatch-time permissions, approvals and presets.
//!
//! The sandbox bounds what a running process can do; this crate decides,
//! before anything runs, whether an operation may run at all and under which
//! sandbox mode. Everything fails closed: no answer is a "no", a
//! non-interactive run never prompts, and a grant to one skill is not
//! inherited by the skills it calls.
//!
//! * [`Approvals`]: the approval service. [`ApprovalPolicy::Never`] rejects
//!   before any [`Answerer`] is asked; otherwise the first answerer that takes
//!   the request decides. The result is the closed [`ApprovalOutcome`].
//! * [`AuditSink`] / [`JsonLinesAudit`]: `asked` and `decided` events as JSON lines.
//! * [`PermissionModel`]: defaults, approved per-skill declarations and
//!   operator pre-approvals, with grants keyed `<skill>/<op>/<path>` ([`GrantKey`])
//!   and persisted in an [`ApprovalStore`].
//! * [`PresetTable`] / [`PermissionState`]: named (sandbox mode, approval policy) bundles.
//! * [`EscalationRequest`], [`effective_mode`], [`decide_escalation`] and
//!   [`TerminalAnswerer`]: the one-shot re-run after a sandbox denial.
//!
//! A CLI offering a one-shot re-run after a sandbox denial:
//!
//! ```no_run
//! use std::time::Duration;
//! use sandbox_core::{SandboxMode, SandboxPolicy};
//! use sandbox_permissions::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let (policy, state_dir) = (SandboxPolicy::default(), std::path::Path::new("/tmp"));
//! let request = EscalationRequest {
//!     argv: vec!["touch".into(), "/srv/out.txt".into()],
//!     evidence: vec!["touch: cannot touch '/srv/out.txt': Permission denied".into()],
//!     escalation: Escalation::write_path_for("/srv/out.txt".as_ref()),
//! };
//! let audit = JsonLinesAudit::open(&JsonLinesAudit::default_path(state_dir))?;
//! let outcome =
//!     decide_escalation_on_tty(ApprovalPolicy::Ask, &request, &audit, Duration::from_secs(60));
//! if outcome.permits() {
//!     let plan = request.retry_plan(&policy);
//!     let (mode, _source) = plan.mode(Some(SandboxMode::WorkspaceWrite), SandboxMode::ReadOnly);
//!     // run once with `plan.policy` under `mode`
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod answerer;
mod audit;
mod chain;
mod config;
mod escalation;
mod grant;
mod outcome;
mod permission;
mod preset;
mod request;
mod session;
mod store;
mod terminal;

pub use answerer::{Answer, Answerer, FnAnswerer};
pub use audit::{AuditError, AuditEvent, AuditSink, JsonLinesAudit};
pub use chain::{decide_escalation, Approvals, Decision};
pub use config::{PermissionsConfig, PermissionsConfigError, PreApproval, PresetConfig};
pub use escalation::{effective_mode, Escalation, EscalationRequest, ModeSource, RetryPlan};
pub use grant::{GrantKey, GrantKeyError, GrantRequest, Op, SkillName, Target};
pub use outcome::{ApprovalOutcome, ApprovalPolicy};
pub use permission::{Declaration, Defaults, Layer, PermissionError, PermissionModel, SkillCall};
pub use preset::{
    CurrentPreset, PermissionEvent, PermissionState, Preset, PresetError, PresetTable, CUSTOM,
};
pub use request::ApprovalRequest;
pub use session::{
    replay, SessionEvent, SessionLog, SessionLogError, SessionState, SESSION_SCHEMA,
};
pub use store::{ApprovalStore, StoreError};
pub use terminal::{decide_escalation_on_tty, session_is_interactive, TerminalAnswerer};
