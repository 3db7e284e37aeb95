//! The outcome record of one run.

use serde::{Deserialize, Serialize};

use sandbox_core::{EnforcementReport, Mediation, ResolvedPolicy};

use crate::runner::EXIT_TIMEOUT;

/// How the main process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Termination {
    /// Exited with a status code.
    Exited {
        /// The code.
        code: i32,
    },
    /// Killed by a signal.
    Signaled {
        /// The signal number.
        signal: i32,
    },
}

/// What kind of result a run had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Classification {
    /// Exit status 0.
    Ok,
    /// The command failed on its own terms.
    TaskFailure,
    /// The command failed and the sandbox refused something it tried: a
    /// policy refusal the sandbox recorded itself (`mediation.refused`), or
    /// the filter's SIGSYS. An answer the kernel itself would give (`ENXIO`
    /// for `/dev/tty` without a terminal, `EEXIST`, `ENOENT`, `ENOTEMPTY`)
    /// is never recorded as a refusal, and the command's output is never
    /// evidence.
    SandboxDenial {
        /// The lines or signal that show it.
        evidence: Vec<String>,
    },
    /// The runner itself failed.
    RunnerFailure {
        /// What went wrong.
        reason: String,
    },
    /// The timeout ended the command.
    Timeout,
    /// The run was ended before its command exited by whoever started it
    /// ([`RunRequest::cancel`](crate::runner::RunRequest::cancel)): for a
    /// nested run, its requester (the inner `sandbox run`) or the outer run
    /// ended.
    Cancelled {
        /// Who ended it.
        reason: String,
    },
    /// A resource limit of the run ended processes of it or refused them
    /// (`--memory`, `--pids`), and the command failed.
    LimitExceeded {
        /// The limit it met.
        limit: crate::runner::LimitKind,
        /// What the limit did, in words.
        detail: String,
    },
}

impl Classification {
    /// Classifies a finished run from what the runner itself saw: the
    /// timeout, the exit, a SIGSYS from the filter. The command's output is
    /// never evidence (it could forge it); refusals the sandbox recorded are
    /// added by [`Classification::with_refusals`].
    pub fn of(termination: &Termination, timed_out: bool, confined: bool) -> Self {
        if timed_out {
            return Self::Timeout;
        }
        match termination {
            Termination::Exited { code: 0 } => Self::Ok,
            Termination::Signaled { signal } if confined && *signal == libc::SIGSYS => {
                Self::SandboxDenial {
                    // Not witnessed: the filter's kill (a foreign-architecture
                    // call) and a SIGSYS the process sent itself end alike.
                    evidence: vec![
                        "killed by SIGSYS: the seccomp filter ends a process this way for a \
                         foreign-architecture (i386, x32) system call; a process can also \
                         send itself SIGSYS"
                            .into(),
                    ],
                }
            }
            _ => Self::TaskFailure,
        }
    }
}

impl Classification {
    /// A failed run whose broker refused requests is a sandbox denial, with
    /// the refusals as evidence (after any stderr evidence): those the
    /// record lists, and a line with how many more it only counted
    /// (`mediation.omitted`; red-team R6b F4: refusals only counted are
    /// refusals all the same).
    pub fn with_refusals(self, mediation: &Mediation) -> Self {
        let mut evidence = match self {
            _ if mediation.refused.is_empty() && mediation.omitted == 0 => return self,
            Self::SandboxDenial { evidence } => evidence,
            Self::TaskFailure => Vec::new(),
            other => return other,
        };
        // Each distinct refusal once (a tool retrying a lock is one).
        for line in mediation.refused.iter().map(|c| {
            if c.target.is_empty() {
                format!("the sandbox refused {}: {}", c.syscall, c.reason)
            } else {
                format!("broker refused {} of {}: {}", c.syscall, c.target, c.reason)
            }
        }) {
            if evidence.len() >= 10 {
                break;
            }
            if !evidence.contains(&line) {
                evidence.push(line);
            }
        }
        if mediation.omitted > 0 {
            evidence.push(format!(
                "the sandbox refused {} more call(s) the record does not list (only counted)",
                mediation.omitted
            ));
        }
        Self::SandboxDenial { evidence }
    }
}

impl Classification {
    /// A failed run (not one the timeout ended) that met a limit which ends
    /// or refuses processes is classified by that limit.
    pub fn with_limits(self, limits: &[crate::runner::LimitRecord]) -> Self {
        if matches!(self, Self::Ok | Self::Timeout | Self::RunnerFailure { .. }) {
            return self;
        }
        let Some(hit) = limits.iter().find(|l| l.stopped_something()) else {
            return self;
        };
        let detail = match hit.kind {
            crate::runner::LimitKind::Memory => format!(
                "the memory limit {} ended {} process(es) for lack of memory",
                hit.requested, hit.hits
            ),
            _ => format!(
                "the process limit {} refused {} fork(s)",
                hit.requested, hit.hits
            ),
        };
        Self::LimitExceeded {
            limit: hit.kind,
            detail,
        }
    }
}

/// The schema version of every JSON document the sandbox writes (outcome
/// records, `check --json`, `policy`, `profile --json`).
pub const SCHEMA_VERSION: u32 = 1;

fn schema_version() -> u32 {
    SCHEMA_VERSION
}

/// Everything known about one run, serialisable as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// [`SCHEMA_VERSION`].
    #[serde(default = "schema_version")]
    pub schema: u32,
    /// The command as requested.
    pub argv: Vec<String>,
    /// The effective policy; `None` when the run was unconfined (danger-full-access).
    pub policy: Option<ResolvedPolicy>,
    /// The backend that ran it.
    pub backend: String,
    /// What the backend enforced; `None` when unconfined.
    pub report: Option<EnforcementReport>,
    /// How the main process ended.
    pub termination: Termination,
    /// Whether the timeout ended it.
    pub timed_out: bool,
    /// Descendants still alive after the main process ended, which the runner ended.
    pub leftover_processes_ended: usize,
    /// How the run's processes were held together (`None` in records from
    /// before this field existed).
    #[serde(default)]
    pub containment: Option<crate::runner::ContainmentKind>,
    /// What the backend's supervisor (the metadata broker) performed and refused.
    #[serde(default)]
    pub mediation: Option<Mediation>,
    /// The limits asked for, what held each and how often the run met it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<crate::runner::LimitRecord>,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: f64,
    /// The classification.
    pub classification: Classification,
    /// The records of the runs nested in this one (`sandbox run` inside
    /// it, [`crate::nest`]), their refusals included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nested: Vec<Outcome>,
    /// What this record leaves out to stay bounded (a nested run's record
    /// as its outer runner keeps it and answers it, [`crate::nest`]);
    /// absent when nothing was left out. Refusals left out are counted in
    /// `mediation.omitted`, git directories in `mediation.git_dirs_unnamed`.
    #[serde(default, skip_serializing_if = "Omitted::is_empty")]
    pub omitted: Omitted,
}

/// What a record leaves out ([`Outcome::omitted`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Omitted {
    /// Arguments of `argv` left out whole (after the ones kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub argv_args: usize,
    /// Bytes of `argv` left out (of the arguments cut short and of those
    /// left out whole).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub argv_bytes: usize,
    /// Records of nested runs left out of `nested`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nested: usize,
}

impl Omitted {
    /// Nothing was left out.
    pub fn is_empty(&self) -> bool {
        *self == Omitted::default()
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Outcome {
    /// The record of a run the sandbox could not start (bad input already
    /// refused; this is what comes after: no backend, a failed self-test,
    /// partial enforcement under `require_full`, a command not found).
    pub fn runner_failure(
        req: &crate::runner::RunRequest,
        backend: &str,
        reason: &str,
        exit_code: i32,
    ) -> Self {
        Outcome {
            schema: SCHEMA_VERSION,
            argv: req
                .argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            policy: req.policy.clone(),
            backend: backend.to_owned(),
            report: None,
            termination: Termination::Exited { code: exit_code },
            timed_out: false,
            leftover_processes_ended: 0,
            containment: None,
            mediation: None,
            limits: Vec::new(),
            duration_ms: 0.0,
            classification: Classification::RunnerFailure {
                reason: reason.to_owned(),
            },
            nested: Vec::new(),
            omitted: Omitted::default(),
        }
    }

    /// The shell-style exit code: the command's, 128+N for signal N, 124 on timeout.
    pub fn exit_code(&self) -> i32 {
        if self.timed_out {
            return EXIT_TIMEOUT;
        }
        match self.termination {
            Termination::Exited { code } => code,
            Termination::Signaled { signal } => 128 + signal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_round_trips_through_json() {
        let dir = std::env::temp_dir();
        let policy = sandbox_core::SandboxPolicy {
            write_paths: vec![dir.to_string_lossy().into_owned()],
            ..Default::default()
        }
        .resolve(&sandbox_core::ExpandContext::default())
        .unwrap();
        let outcome = Outcome {
            schema: SCHEMA_VERSION,
            argv: vec!["/bin/false".into()],
            policy: Some(policy),
            backend: "noop".into(),
            report: None,
            termination: Termination::Signaled { signal: 9 },
            timed_out: false,
            leftover_processes_ended: 2,
            containment: Some(crate::runner::ContainmentKind::ProcessGroup),
            mediation: None,
            limits: Vec::new(),
            duration_ms: 1.5,
            classification: Classification::SandboxDenial {
                evidence: vec!["x: Permission denied".into()],
            },
            nested: Vec::new(),
            omitted: Omitted::default(),
        };
        let back: Outcome =
            serde_json::from_str(&serde_json::to_string(&outcome).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&outcome).unwrap()
        );
        assert_eq!(back.exit_code(), 137);
    }

    #[test]
    fn broker_refusals_turn_a_failure_into_a_denial() {
        let refused = Mediation {
            refused: vec![sandbox_core::MediatedCall {
                syscall: "fchmodat".into(),
                target: "/etc/x".into(),
                reason: "outside the write paths".into(),
                outside_write_paths: true,
            }],
            ..Default::default()
        };
        let mut twice = refused.clone();
        twice.refused.push(twice.refused[0].clone());
        assert_eq!(
            Classification::TaskFailure.with_refusals(&twice),
            Classification::TaskFailure.with_refusals(&refused),
            "the same refusal twice is one line of evidence"
        );
        let got = Classification::TaskFailure.with_refusals(&refused);
        assert_eq!(
            got,
            Classification::SandboxDenial {
                evidence: vec!["broker refused fchmodat of /etc/x: outside the write paths".into()]
            }
        );
        assert_eq!(
            Classification::Ok.with_refusals(&refused),
            Classification::Ok
        );
        assert_eq!(
            Classification::TaskFailure.with_refusals(&Mediation::default()),
            Classification::TaskFailure
        );
    }

    /// R6b F4: refusals only counted (past the record's cap, or cut from a
    /// nested run's record) make a failed run a denial too, and the
    /// evidence says how many the record does not list.
    #[test]
    fn refusals_only_counted_are_evidence_too() {
        let counted = Mediation {
            performed: 4200,
            omitted: 3,
            ..Default::default()
        };
        assert_eq!(
            Classification::TaskFailure.with_refusals(&counted),
            Classification::SandboxDenial {
                evidence: vec![
                    "the sandbox refused 3 more call(s) the record does not list (only counted)"
                        .into()
                ]
            }
        );
        // With listed ones: those first, then the count.
        let both = Mediation {
            refused: vec![sandbox_core::MediatedCall {
                syscall: "openat".into(),
                target: "/etc/x".into(),
                reason: "outside the write paths".into(),
                outside_write_paths: true,
            }],
            omitted: 1,
            ..Default::default()
        };
        let Classification::SandboxDenial { evidence } =
            Classification::TaskFailure.with_refusals(&both)
        else {
            panic!("not a denial");
        };
        assert_eq!(evidence.len(), 2);
        assert!(evidence[0].contains("/etc/x"));
        assert!(evidence[1].contains("1 more call(s)"));
        // Controls: a run that succeeded stays ok; a failure with many
        // performed calls and no refusal at all stays the command's own.
        assert_eq!(
            Classification::Ok.with_refusals(&counted),
            Classification::Ok
        );
        let performed_only = Mediation {
            performed: 10_000,
            ..Default::default()
        };
        assert_eq!(
            Classification::TaskFailure.with_refusals(&performed_only),
            Classification::TaskFailure
        );
    }

    #[test]
    fn the_commands_own_output_is_never_evidence() {
        let failed = Termination::Exited { code: 1 };
        // A "Permission denied" the command printed itself is a task failure.
        assert_eq!(
            Classification::of(&failed, false, true),
            Classification::TaskFailure
        );
        let sigsys = Termination::Signaled {
            signal: libc::SIGSYS,
        };
        assert!(matches!(
            Classification::of(&sigsys, false, true),
            Classification::SandboxDenial { .. }
        ));
        assert_eq!(
            Classification::of(&sigsys, false, false),
            Classification::TaskFailure
        );
        assert_eq!(
            Classification::of(&failed, true, true),
            Classification::Timeout
        );
        assert_eq!(
            Classification::of(&Termination::Exited { code: 0 }, false, true),
            Classification::Ok
        );
    }
}
