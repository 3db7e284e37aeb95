//! Handing metadata writes to the `sandbox-broker` instead of refusing them.
//!
//! Before fork: a socket pair and the broker's rules, then
//! [`BrokerSupervisor`] starts the broker's thread, which waits for the
//! listener. In the child (after Landlock): the filter is installed with a
//! listener, which goes to that thread over the pair. Once the process tree
//! has ended, the broker's log becomes the run's [`Mediation`].

use std::os::fd::{OwnedFd, RawFd};
use std::time::Duration;

use sandbox_broker::{
    Broker, BrokerDecision, BrokerLog, BrokerRules, FixedCredentials, PendingBroker, RunBudget,
};
use sandbox_core::{
    MediatedCall, Mediation, ResolvedPolicy, RunningSupervisor, SandboxUnavailable, Supervisor,
};
use sandbox_seccomp::Filter;

use crate::LandlockError;

/// The report line when a broker mediates metadata writes.
pub(crate) const REPORT_LINE: &str =
    "metadata writes (chmod, chown, xattr, utimes, truncate by path) are brokered: performed by the runner with the caller's credentials, only beneath a write path and outside every deny path; under read denials xattr reads are brokered too and refused on denied paths";

/// How long the runner waits for the broker to have the child's listener
/// once the child is spawned (it sent it before exec, so it is normally
/// already there).
const LISTENER_WAIT: Duration = Duration::from_secs(5);

/// Both ends of the listener channel plus the broker's rules.
pub(crate) struct Channel {
    child: OwnedFd,
    supervisor: BrokerSupervisor,
}

/// Opens the channel and the rules for `policy`, in the parent; the broker
/// spends on the run no more than `limits` allow (see [`RunBudget`]).
pub(crate) fn channel(
    policy: &ResolvedPolicy,
    dns: Option<sandbox_core::DnsRoute>,
    limits: &sandbox_core::ResourceLimits,
) -> Result<Channel, LandlockError> {
    let err = LandlockError::Broker;
    let mut rules = BrokerRules::new(policy).map_err(err)?;
    if let Some(dns) = dns {
        rules = rules.with_dns(dns);
    }
    let (runner, child) = sandbox_broker::listener_channel().map_err(err)?;
    Ok(Channel {
        child,
        supervisor: BrokerSupervisor {
            runner,
            rules,
            names: None,
            fixed: None,
            budget: RunBudget::from_limits(limits),
        },
    })
}

impl Channel {
    /// The broker makes and keeps the run's own shared memory in `dir`
    /// (see [`BrokerRules::with_private_shm`]).
    pub(crate) fn with_private_shm(
        mut self,
        dir: &std::path::Path,
        continue_others: bool,
    ) -> Result<Self, LandlockError> {
        self.supervisor.rules = self
            .supervisor
            .rules
            .with_private_shm(dir, continue_others)
            .map_err(LandlockError::Broker)?;
        Ok(self)
    }

    /// The broker finds the reads Landlock refuses from the objects whose
    /// rules grant reading (see [`BrokerRules::with_read_grants`]).
    pub(crate) fn with_read_grants(mut self, grants: Vec<(u64, u64)>) -> Self {
        self.supervisor.rules = self.supervisor.rules.with_read_grants(grants);
        self
    }

    /// The child's end and the supervisor, which names refused calls after
    /// `filter`'s table.
    ///
    /// `fixed`: the credentials the child is expected to run with, all ids
    /// equal and no capability (see [`FixedCredentials`]); the broker takes
    /// them as every caller's only when the child vouches for them.
    /// `umask_routed`: `filter` routes `umask` to the broker.
    pub(crate) fn split(
        self,
        filter: &Filter,
        fixed: Option<FixedCredentials>,
        umask_routed: bool,
    ) -> (OwnedFd, BrokerSupervisor) {
        let mut supervisor = self.supervisor;
        if umask_routed {
            supervisor.rules = supervisor.rules.with_umask_routed();
        }
        supervisor.names = Some(filter.clone());
        supervisor.fixed = fixed;
        (self.child, supervisor)
    }
}

/// Installs the filter with a listener and sends the listener to the runner.
///
/// Async-signal-safe. When nobody holds the runner's end (a caller used the
/// plain `Command` form and dropped the supervisor), the filter stays
/// installed and brokered calls fail with `ENOSYS`: fail closed.
///
/// With `fixed`, the child first checks that it has exactly those ids and
/// no capability, and tells the runner so along with the listener. Call it
/// after `NO_NEW_PRIVS` and the capability drop: from then on the process
/// tree cannot gain a capability or change its ids (see [`FixedCredentials`];
/// the filter refuses `unshare`, `setns` and `clone` with `CLONE_NEWUSER`,
/// and `clone3`).
pub(crate) fn install_in_child(
    program: &[libc::sock_filter],
    sock: RawFd,
    fixed: Option<&FixedCredentials>,
) -> Result<(), i32> {
    let verified = matches!(fixed.map(FixedCredentials::verify_in_child), Some(Ok(())));
    match sandbox_seccomp::listener::install_filter_with_listener_checked(program, sock, verified) {
        Err(libc::EPIPE | libc::ECONNREFUSED | libc::ECONNRESET | libc::ENOTCONN) => Ok(()),
        other => other,
    }
}

/// How long closing one command of a shared launch waits for the broker.
const BETWEEN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts the broker once the confined child is spawned.
#[derive(Debug)]
pub(crate) struct BrokerSupervisor {
    runner: OwnedFd,
    rules: BrokerRules,
    /// The filter, to name the calls it refused through the broker.
    names: Option<Filter>,
    /// The credentials the child was prepared with, when fixed.
    fixed: Option<FixedCredentials>,
    /// What the broker may spend on the run (its limits).
    budget: RunBudget,
}

impl Supervisor for BrokerSupervisor {
    /// Starts the broker's thread, which takes the child's listener itself
    /// (the child sends it before exec, so the thread gets ready while the
    /// child execs).
    fn start(self: Box<Self>) -> Result<Box<dyn RunningSupervisor>, SandboxUnavailable> {
        let BrokerSupervisor {
            runner,
            rules,
            names,
            fixed,
            budget,
        } = *self;
        let pending = Broker::start_receiving(runner, rules, fixed, budget)
            .map_err(|e| fail(e.to_string()))?;
        Ok(Box::new(RunningBroker {
            broker: BrokerState::Pending(pending),
            names,
        }))
    }
}

fn fail(what: String) -> SandboxUnavailable {
    SandboxUnavailable::new("landlock", format!("metadata broker: {what}"))
}

#[derive(Debug)]
struct RunningBroker {
    broker: BrokerState,
    names: Option<Filter>,
}

#[derive(Debug)]
enum BrokerState {
    Pending(PendingBroker),
    Serving(Broker),
    Failed(String),
}

impl RunningSupervisor for RunningBroker {
    fn confirm(&mut self) -> Result<(), SandboxUnavailable> {
        let state = std::mem::replace(&mut self.broker, BrokerState::Failed(String::new()));
        self.broker = match state {
            BrokerState::Pending(pending) => match pending.ready(LISTENER_WAIT) {
                Ok(broker) => BrokerState::Serving(broker),
                Err(e) => BrokerState::Failed(e.to_string()),
            },
            other => other,
        };
        match &self.broker {
            BrokerState::Failed(why) => Err(fail(why.clone())),
            _ => Ok(()),
        }
    }

    fn tap(&self) -> Option<sandbox_core::MediationTap> {
        let BrokerState::Serving(broker) = &self.broker else {
            return None;
        };
        let between = broker.between();
        let names = self.names.clone();
        let (live, live_names, made) = (between.clone(), names.clone(), between.clone());
        Some(
            sandbox_core::MediationTap::new(move || {
                between
                    .take(BETWEEN_WAIT)
                    .map(|log| mediation(log, names.as_ref()))
            })
            .with_live(move || {
                let (records, count) = live.live();
                let refused = records
                    .iter()
                    .map(|r| refusal(r, live_names.as_ref()))
                    .collect();
                (refused, count)
            })
            .with_git_dirs_made(move || made.git_dirs_made()),
        )
    }

    fn finish(mut self: Box<Self>) -> Mediation {
        let _ = self.confirm();
        match self.broker {
            BrokerState::Serving(broker) => mediation(broker.finish(), self.names.as_ref()),
            BrokerState::Failed(why) => Mediation {
                error: Some(fail(why).reason),
                ..Mediation::default()
            },
            BrokerState::Pending(_) => Mediation::default(),
        }
    }
}

fn mediation(log: BrokerLog, names: Option<&Filter>) -> Mediation {
    let refused = log.refusals().map(|r| refusal(r, names)).collect();
    Mediation {
        performed: usize::try_from(log.performed_count()).unwrap_or(usize::MAX),
        refused,
        // The refusals only counted (past the log's cap for refusals); the
        // other answers past their cap are counted in `performed` or are
        // failures the kernel would give too.
        omitted: usize::try_from(log.refusals_omitted).unwrap_or(usize::MAX),
        error: log.stopped_by_error,
        git_dirs_made: log.git_dirs_made,
        git_dirs_unnamed: log.git_dirs_unnamed,
        runner_out_of_fds: usize::try_from(log.runner_out_of_fds).unwrap_or(usize::MAX),
        ..Mediation::default()
    }
}

/// A refused record as the run's [`Mediation`] lists it (also for the live
/// view, [`sandbox_core::MediationTap::live`]).
fn refusal(r: &sandbox_broker::BrokerRecord, names: Option<&Filter>) -> MediatedCall {
    match &r.decision {
        // A call the filter refused and sent here only to be recorded.
        BrokerDecision::Refused {
            reason: sandbox_broker::Refusal::UnknownSyscall { nr },
        } => MediatedCall {
            syscall: u32::try_from(*nr)
                .ok()
                .and_then(|n| names.and_then(|f| f.syscall_name(n)))
                .map_or_else(|| format!("syscall {nr}"), str::to_owned),
            target: String::new(),
            reason: "refused by the seccomp filter".into(),
            outside_write_paths: false,
        },
        _ => MediatedCall {
            syscall: r.syscall.clone(),
            target: r
                .target
                .resolved
                .as_ref()
                .map(|p| p.display().to_string())
                .or_else(|| r.target.path.clone())
                .or_else(|| r.target.fd.map(|fd| format!("fd {fd}")))
                .unwrap_or_else(|| "?".into()),
            outside_write_paths: matches!(
                r.decision,
                BrokerDecision::Refused {
                    reason: sandbox_broker::Refusal::OutsideWritePaths
                }
            ),
            reason: match &r.decision {
                BrokerDecision::Refused { reason } => reason.to_string(),
                other => format!("{other:?}"),
            },
        },
    }
}
