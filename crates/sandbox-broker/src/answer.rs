//! Answering a request and recording it: the pieces every handler
//! (the broker thread, the connect and entry handlers, the worker pool)
//! ends with.

use crate::log::{BrokerRecord, Decision, Target};
use crate::notif::Listener;
use crate::resolve::Unresolved;

/// The decision for a request the rules could not admit.
pub(crate) fn unresolved_decision(unresolved: Unresolved, target: &mut Target) -> Decision {
    match unresolved {
        Unresolved::Errno(errno) => Decision::Failed { errno },
        Unresolved::Refused(reason, path) => {
            target.resolved = path;
            Decision::Refused { reason }
        }
    }
}

/// Answers `decision` (a refusal with `refused`, the errno it carries).
pub(crate) fn answer_with(
    listener: &Listener,
    id: u64,
    tid: i32,
    name: &str,
    target: Target,
    decision: Decision,
    refused: i32,
) -> BrokerRecord {
    let reply = match &decision {
        Decision::Performed => Some((0, 0)),
        Decision::Read { len } => Some((*len as i64, 0)),
        Decision::Failed { errno } => Some((0, *errno)),
        Decision::Refused { .. } => Some((0, refused)),
        // Already answered with the fd.
        Decision::Opened { .. } | Decision::CallerGone => None,
    };
    let decision = match reply.map(|(val, errno)| listener.send(id, val, errno)) {
        Some(Ok(true)) | None => decision,
        Some(Ok(false)) => Decision::CallerGone,
        Some(Err(err)) => {
            tracing::warn!(%err, syscall = name, "answering a seccomp notification failed");
            Decision::CallerGone
        }
    };
    record(name, tid, target, decision)
}

/// The record of an answered request.
pub(crate) fn record(name: &str, tid: i32, target: Target, decision: Decision) -> BrokerRecord {
    tracing::debug!(syscall = name, tid, ?target, ?decision, "brokered request");
    BrokerRecord {
        syscall: name.to_owned(),
        pid: tid,
        target,
        decision,
    }
}
