//! Dispatch-time permissions and approvals: the permission model of the
//! original specification (seed 002) and the approval service of the
//! sandbox/approval model (seed 004).
//!
//! The sandbox bounds what a running process can do; this crate decides,
//! before anything runs, whether an operation may run at all. Everything
//! fails closed: no answer is a "no", a non-interactive run never prompts,
//! and a grant to one skill is not inherited by the skills it calls.
//!
//! * [`PermissionModel`]: three layers (defaults, operator pre-approvals
//!   from [`PermissionsConfig`], grants stored in an [`ApprovalStore`]),
//!   keyed `<skill>/<op>/<path>` ([`GrantKey`]). `sandbox exec-op` checks an
//!   op envelope's declared scope with it before the sandbox runs.
//! * [`Approvals`]: the approval service. [`ApprovalPolicy::Never`] rejects
//!   before any [`Answerer`] is asked; otherwise the first answerer that takes
//!   the request decides. The result is the closed [`ApprovalOutcome`];
//!   [`TerminalAnswerer`] asks a human on the terminal.
//! * [`AuditSink`] / [`JsonLinesAudit`]: `asked` and `decided` events as JSON lines.
//! * [`replay`]: a session log's approval policy (`--session FILE`; the
//!   `session_log` example writes one).
//! * [`EscalationRequest`] and [`decide_escalation_on_tty`]: the one-shot
//!   re-run after a sandbox denial (`sandbox run --approval ask`).
//!
//! A dispatcher checking what an op declares, as `sandbox exec-op` does:
//!
//! ```no_run
//! use std::path::Path;
//! use sandbox_permissions::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (workspace, state) = (Path::new("/srv/project"), Path::new("/srv/state"));
//! let config = PermissionsConfig::from_toml_str(
//!     "[permissions.pre_approved]\n\"build/network/*\" = \"allow\"\n",
//!     Path::new("config.toml"),
//! )?;
//! let defaults = Defaults::new(workspace, &[workspace.to_path_buf()])?;
//! let mut model = PermissionModel::new(defaults, &config, ApprovalStore::load(state)?);
//! let call = SkillCall::root(SkillName::new("build")?);
//! let declaration = Declaration {
//!     phase: None,
//!     needs: vec![
//!         (Op::Network, Target::Any),
//!         (Op::FileWrite, Target::path("/srv/out")?),
//!     ],
//! };
//! // Not interactive: nothing is asked, a missing grant is an error naming it.
//! let approvals = Approvals::new(ApprovalPolicy::Ask, false, JsonLinesAudit::new(std::io::sink()));
//! match model.ensure(&call, &declaration, &approvals) {
//!     Ok(()) => { /* run the op */ }
//!     Err(e) => eprintln!("refused before it ran: {e}"),
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
mod request;
mod session;
mod store;
mod terminal;

pub use answerer::{Answer, Answerer};
pub use audit::{AuditError, AuditEvent, AuditSink, JsonLinesAudit};
pub use chain::Approvals;
pub use config::{PermissionsConfig, PermissionsConfigError, PreApproval};
pub use escalation::{Escalation, EscalationRequest};
pub use grant::{GrantKey, GrantKeyError, GrantRequest, Op, SkillName, Target};
pub use outcome::{ApprovalOutcome, ApprovalPolicy};
pub use permission::{Declaration, Defaults, Layer, PermissionError, PermissionModel, SkillCall};
pub use request::ApprovalRequest;
pub use session::{replay, SessionEvent, SessionLogError, SessionState};
pub use store::{ApprovalStore, StoreError};
pub use terminal::{decide_escalation_on_tty, session_is_interactive, TerminalAnswerer};
