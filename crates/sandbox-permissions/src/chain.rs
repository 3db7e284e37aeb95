//! The approval service: policy gate, answerer chain, audit.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::answerer::{Answer, Answerer};
use crate::audit::{now_unix_ms, AuditEvent, AuditSink};
use crate::escalation::EscalationRequest;
use crate::outcome::{ApprovalOutcome, ApprovalPolicy};
use crate::request::ApprovalRequest;

/// Dispatches approval requests for one session and audits each one.
///
/// `never` is checked before the chain, so no answerer (however it was
/// added) can turn it into `allowed-once`. In a non-interactive run,
/// interactive answerers are skipped. A failure to write the audit log makes
/// the outcome `unavailable`.
pub struct Approvals<'a> {
    policy: ApprovalPolicy,
    interactive: bool,
    answerers: Vec<Box<dyn Answerer + 'a>>,
    audit: Box<dyn AuditSink + 'a>,
}

/// An outcome with who decided and why, as audited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// The outcome.
    pub(crate) outcome: ApprovalOutcome,
    /// The answerer that took the request, if any.
    pub(crate) answerer: Option<String>,
    /// Why (for operators; not for a model).
    pub(crate) reason: String,
}

impl<'a> Approvals<'a> {
    /// A service with no answerers yet.
    pub fn new(policy: ApprovalPolicy, interactive: bool, audit: impl AuditSink + 'a) -> Self {
        Self {
            policy,
            interactive,
            answerers: Vec::new(),
            audit: Box::new(audit),
        }
    }

    /// Whether the run may prompt a human.
    pub fn interactive(&self) -> bool {
        self.interactive
    }

    /// Adds an answerer at the end of the chain.
    pub fn push(&mut self, answerer: impl Answerer + 'a) -> &mut Self {
        self.answerers.push(Box::new(answerer));
        self
    }

    /// Decides `request`. Only [`ApprovalOutcome::AllowedOnce`] permits the operation.
    pub fn request(&self, request: &ApprovalRequest) -> ApprovalOutcome {
        self.request_detailed(request).outcome
    }

    /// Like [`Approvals::request`], with the answerer and reason.
    pub(crate) fn request_detailed(&self, request: &ApprovalRequest) -> Decision {
        let request_id = next_request_id();
        let asked = AuditEvent::Asked {
            request_id: request_id.clone(),
            at_unix_ms: now_unix_ms(),
            policy: self.policy,
            interactive: self.interactive,
            summary: request.summary(),
            request: request.clone(),
        };
        if let Err(e) = self.audit.record(&asked) {
            return Decision {
                outcome: ApprovalOutcome::Unavailable,
                answerer: None,
                reason: format!("not asked: {e}"),
            };
        }
        let decision = self.dispatch(request);
        let decided = AuditEvent::Decided {
            request_id,
            at_unix_ms: now_unix_ms(),
            outcome: decision.outcome,
            answerer: decision.answerer.clone(),
            reason: decision.reason.clone(),
        };
        match self.audit.record(&decided) {
            Ok(()) => decision,
            Err(e) => Decision {
                outcome: ApprovalOutcome::Unavailable,
                answerer: decision.answerer,
                reason: format!("decision not recorded, so not honoured: {e}"),
            },
        }
    }

    fn dispatch(&self, request: &ApprovalRequest) -> Decision {
        if self.policy == ApprovalPolicy::Never {
            return Decision {
                outcome: ApprovalOutcome::Rejected,
                answerer: None,
                reason: "approval policy is never: rejected without asking".to_owned(),
            };
        }
        let mut skipped = 0usize;
        for answerer in &self.answerers {
            if answerer.interactive() && !self.interactive {
                skipped += 1;
                continue;
            }
            let name = answerer.name().to_owned();
            let taken = |outcome, reason: String| Decision {
                outcome,
                answerer: Some(name.clone()),
                reason,
            };
            match catch_unwind(AssertUnwindSafe(|| answerer.answer(request))) {
                Ok(Answer::Delegate) => continue,
                Ok(Answer::Decide(outcome)) => return taken(outcome, "answered".to_owned()),
                Ok(Answer::Malformed(what)) => {
                    return taken(
                        ApprovalOutcome::Unavailable,
                        format!("malformed answer: {what}"),
                    )
                }
                Err(payload) => {
                    return taken(
                        ApprovalOutcome::Unavailable,
                        format!("answerer panicked: {}", panic_message(&*payload)),
                    )
                }
            }
        }
        let reason = if skipped > 0 {
            format!(
                "no answerer took the request ({skipped} interactive answerer(s) skipped: the run is not interactive)"
            )
        } else {
            "no answerer took the request".to_owned()
        };
        Decision {
            outcome: ApprovalOutcome::Unavailable,
            answerer: None,
            reason,
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

fn next_request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{}-{n}", std::process::id(), now_unix_ms())
}

/// Decides whether a command denied by the sandbox may be re-run once with
/// `request.escalation`. `never` and non-interactive runs never prompt; every
/// outcome but `allowed-once` means "do not re-run".
pub(crate) fn decide_escalation(
    policy: ApprovalPolicy,
    interactive: bool,
    request: &EscalationRequest,
    answerers: &[&dyn Answerer],
    audit: &dyn AuditSink,
) -> ApprovalOutcome {
    let mut approvals = Approvals::new(policy, interactive, audit);
    for a in answerers {
        approvals.push(*a);
    }
    approvals.request(&ApprovalRequest::Escalation(request.clone()))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::io;

    use super::*;
    use crate::answerer::FnAnswerer;
    use crate::audit::{AuditError, JsonLinesAudit};
    use crate::escalation::Escalation;

    fn req() -> ApprovalRequest {
        ApprovalRequest::Escalation(EscalationRequest {
            argv: vec!["touch".into(), "/etc/x".into()],
            evidence: vec!["touch: cannot touch '/etc/x': Permission denied".into()],
            escalation: Escalation::AddWritePath("/etc".into()),
        })
    }

    fn decide(o: ApprovalOutcome) -> impl Answerer {
        FnAnswerer::new(format!("decides-{o}"), move |_| Answer::Decide(o))
    }

    fn delegate() -> impl Answerer {
        FnAnswerer::new("delegates", |_| Answer::Delegate)
    }

    /// Interactive answerer that counts how often it was asked.
    struct Human<'c>(&'c Cell<u32>, ApprovalOutcome);
    impl Answerer for Human<'_> {
        fn name(&self) -> &str {
            "human"
        }
        fn interactive(&self) -> bool {
            true
        }
        fn answer(&self, _: &ApprovalRequest) -> Answer {
            self.0.set(self.0.get() + 1);
            Answer::Decide(self.1)
        }
    }

    /// Runs `request` and returns the decision and the parsed audit lines.
    fn run(
        approvals: impl FnOnce(&JsonLinesAudit<Vec<u8>>) -> Decision,
    ) -> (Decision, Vec<serde_json::Value>) {
        let sink = JsonLinesAudit::new(Vec::new());
        let d = approvals(&sink);
        let lines = String::from_utf8(sink.into_inner())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (d, lines)
    }

    fn chain(
        policy: ApprovalPolicy,
        interactive: bool,
        links: Vec<Box<dyn Answerer + '_>>,
    ) -> (Decision, Vec<serde_json::Value>) {
        run(|sink| {
            let mut a = Approvals::new(policy, interactive, sink);
            for l in links {
                a.push(l);
            }
            a.request_detailed(&req())
        })
    }

    #[test]
    fn first_taker_decides_each_outcome() {
        for o in [
            ApprovalOutcome::AllowedOnce,
            ApprovalOutcome::Rejected,
            ApprovalOutcome::Cancelled,
            ApprovalOutcome::Unavailable,
        ] {
            let (d, audit) = chain(
                ApprovalPolicy::Ask,
                true,
                vec![
                    Box::new(delegate()),
                    Box::new(decide(o)),
                    Box::new(decide(ApprovalOutcome::Rejected)),
                ],
            );
            assert_eq!(d.outcome, o);
            assert_eq!(d.answerer.as_deref(), Some(format!("decides-{o}").as_str()));
            assert_eq!(audit.len(), 2);
            assert_eq!(audit[0]["event"], "asked");
            assert_eq!(audit[1]["event"], "decided");
            assert_eq!(audit[1]["outcome"], o.as_str());
            assert_eq!(audit[0]["request_id"], audit[1]["request_id"]);
        }
    }

    #[test]
    fn no_answerer_is_unavailable() {
        let (d, audit) = chain(ApprovalPolicy::Ask, true, vec![]);
        assert_eq!(d.outcome, ApprovalOutcome::Unavailable);
        assert_eq!(d.answerer, None);
        assert_eq!(audit[1]["outcome"], "unavailable");
    }

    #[test]
    fn all_delegating_is_unavailable() {
        let (d, _) = chain(
            ApprovalPolicy::Ask,
            true,
            vec![Box::new(delegate()), Box::new(delegate())],
        );
        assert_eq!(d.outcome, ApprovalOutcome::Unavailable);
    }

    #[test]
    fn panicking_answerer_is_unavailable_and_stops_the_chain() {
        let later = Cell::new(0);
        let (d, audit) = chain(
            ApprovalPolicy::Ask,
            true,
            vec![
                Box::new(FnAnswerer::new("boom", |_| panic!("answerer exploded"))),
                Box::new(Human(&later, ApprovalOutcome::AllowedOnce)),
            ],
        );
        assert_eq!(d.outcome, ApprovalOutcome::Unavailable);
        assert_eq!(d.answerer.as_deref(), Some("boom"));
        assert!(d.reason.contains("answerer exploded"), "{}", d.reason);
        assert_eq!(later.get(), 0);
        assert_eq!(audit[1]["outcome"], "unavailable");
    }

    #[test]
    fn garbage_answer_is_unavailable() {
        let (d, _) = chain(
            ApprovalPolicy::Ask,
            true,
            vec![Box::new(FnAnswerer::new("hook", |_| {
                Answer::Malformed("unknown decision \"sure\"".into())
            }))],
        );
        assert_eq!(d.outcome, ApprovalOutcome::Unavailable);
        assert!(d.reason.contains("sure"), "{}", d.reason);
    }

    #[test]
    fn never_rejects_without_asking_any_answerer() {
        let asked = Cell::new(0);
        let (d, audit) = run(|sink| {
            let mut a = Approvals::new(ApprovalPolicy::Never, true, sink);
            a.push(decide(ApprovalOutcome::AllowedOnce));
            a.push(Human(&asked, ApprovalOutcome::AllowedOnce));
            a.request_detailed(&req())
        });
        assert_eq!(d.outcome, ApprovalOutcome::Rejected);
        assert_eq!(d.answerer, None);
        assert_eq!(asked.get(), 0);
        assert_eq!(audit[0]["policy"], "never");
        assert_eq!(audit[1]["outcome"], "rejected");
        // Positive control: the same chain under `ask` asks and allows.
        let (d, _) = run(|sink| {
            let mut a = Approvals::new(ApprovalPolicy::Ask, true, sink);
            a.push(Human(&asked, ApprovalOutcome::AllowedOnce));
            a.request_detailed(&req())
        });
        assert_eq!(d.outcome, ApprovalOutcome::AllowedOnce);
        assert_eq!(asked.get(), 1);
    }

    #[test]
    fn non_interactive_never_prompts() {
        let asked = Cell::new(0);
        let (d, _) = chain(
            ApprovalPolicy::Ask,
            false,
            vec![Box::new(Human(&asked, ApprovalOutcome::AllowedOnce))],
        );
        assert_eq!(d.outcome, ApprovalOutcome::Unavailable);
        assert!(d.reason.contains("not interactive"), "{}", d.reason);
        assert_eq!(asked.get(), 0);
        // A non-interactive answerer (e.g. a policy hook) is still asked.
        let (d, _) = chain(
            ApprovalPolicy::Ask,
            false,
            vec![
                Box::new(Human(&asked, ApprovalOutcome::AllowedOnce)),
                Box::new(decide(ApprovalOutcome::Rejected)),
            ],
        );
        assert_eq!(d.outcome, ApprovalOutcome::Rejected);
        assert_eq!(asked.get(), 0);
    }

    struct BrokenSink;
    impl AuditSink for BrokenSink {
        fn record(&self, _: &AuditEvent) -> Result<(), AuditError> {
            Err(AuditError::Write {
                target: "broken".into(),
                source: io::Error::other("disk full"),
            })
        }
    }

    #[test]
    fn unauditable_request_is_unavailable_and_not_dispatched() {
        let asked = Cell::new(0);
        let mut a = Approvals::new(ApprovalPolicy::Ask, true, BrokenSink);
        a.push(Human(&asked, ApprovalOutcome::AllowedOnce));
        let d = a.request_detailed(&req());
        assert_eq!(d.outcome, ApprovalOutcome::Unavailable);
        assert!(d.reason.contains("disk full"), "{}", d.reason);
        assert_eq!(asked.get(), 0);
    }

    #[test]
    fn decide_escalation_uses_the_chain() {
        let ApprovalRequest::Escalation(esc) = req() else {
            unreachable!()
        };
        let sink = JsonLinesAudit::new(Vec::new());
        let yes = decide(ApprovalOutcome::AllowedOnce);
        let o = decide_escalation(ApprovalPolicy::Ask, true, &esc, &[&delegate(), &yes], &sink);
        assert_eq!(o, ApprovalOutcome::AllowedOnce);
        let o = decide_escalation(ApprovalPolicy::Never, true, &esc, &[&yes], &sink);
        assert_eq!(o, ApprovalOutcome::Rejected);
        let o = decide_escalation(ApprovalPolicy::Ask, true, &esc, &[], &sink);
        assert_eq!(o, ApprovalOutcome::Unavailable);
        let text = String::from_utf8(sink.into_inner()).unwrap();
        assert_eq!(text.lines().count(), 6);
        assert!(text.contains("\"kind\":\"escalation\""), "{text}");
    }
}
