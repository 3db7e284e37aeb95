//! Answering a request and recording it: the pieces every handler
//! (the broker thread, the connect and entry handlers, the worker pool)
//! ends with.

use crate::log::{BrokerDecision, BrokerRecord, BrokerTarget, Refusal};
use crate::notif::Listener;
use crate::resolve::Unresolved;

/// The decision for a request the rules could not admit.
pub(crate) fn unresolved_decision(
    unresolved: Unresolved,
    target: &mut BrokerTarget,
) -> BrokerDecision {
    match unresolved {
        Unresolved::Errno(errno) => BrokerDecision::Failed { errno },
        // The runner out of descriptors for the O_PATH opens of the walk
        // (its own): its failure, not the policy's.
        Unresolved::Refused(
            Refusal::Unresolvable {
                errno: errno @ (libc::EMFILE | libc::ENFILE),
            },
            _,
        ) => BrokerDecision::RunnerOutOfFds { errno },
        Unresolved::Refused(reason, path) => {
            target.resolved = path;
            BrokerDecision::Refused { reason }
        }
    }
}

/// Answers `decision` (a refusal with `refused`, the errno it carries).
pub(crate) fn answer_with(
    listener: &Listener,
    id: u64,
    tid: i32,
    name: &str,
    target: BrokerTarget,
    decision: BrokerDecision,
    refused: i32,
) -> BrokerRecord {
    let reply = match &decision {
        BrokerDecision::Performed => Some((0, 0)),
        BrokerDecision::Read { len } => Some((*len as i64, 0)),
        BrokerDecision::Failed { errno } | BrokerDecision::RunnerOutOfFds { errno } => {
            Some((0, *errno))
        }
        BrokerDecision::Refused { .. } => Some((0, refused)),
        // Already answered with the fd.
        BrokerDecision::Opened { .. } | BrokerDecision::CallerGone => None,
    };
    let decision = match reply.map(|(val, errno)| listener.send(id, val, errno)) {
        Some(Ok(true)) | None => decision,
        Some(Ok(false)) => BrokerDecision::CallerGone,
        Some(Err(err)) => {
            tracing::warn!(%err, syscall = name, "answering a seccomp notification failed");
            BrokerDecision::CallerGone
        }
    };
    record(name, tid, target, decision)
}

/// The record of an answered request.
pub(crate) fn record(
    name: &str,
    tid: i32,
    target: BrokerTarget,
    decision: BrokerDecision,
) -> BrokerRecord {
    tracing::debug!(syscall = name, tid, ?target, ?decision, "brokered request");
    BrokerRecord {
        syscall: name.to_owned(),
        pid: tid,
        target,
        decision,
    }
}
