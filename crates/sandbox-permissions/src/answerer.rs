//! Answerers: the links of the approval chain.

use serde::Deserialize;

use crate::outcome::ApprovalOutcome;
use crate::request::ApprovalRequest;

/// What one answerer does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// Take the request and decide it; no later answerer is asked.
    Decide(ApprovalOutcome),
    /// Not this answerer's request: pass it to the next one.
    Delegate,
    /// The answerer produced something that is not an answer (the text says what).
    /// The chain stops and the outcome is `unavailable`.
    Malformed(String),
}

impl Answer {
    /// Parses an answer from an external answerer's JSON:
    /// `{"decision": "allowed-once" | "rejected" | "cancelled" | "unavailable" | "delegate"}`.
    /// Anything else is [`Answer::Malformed`].
    pub fn from_json(text: &str) -> Self {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            decision: String,
        }
        match serde_json::from_str::<Wire>(text) {
            Ok(w) if w.decision == "delegate" => Self::Delegate,
            Ok(w) => match serde_json::from_value(serde_json::Value::String(w.decision.clone())) {
                Ok(outcome) => Self::Decide(outcome),
                Err(_) => Self::Malformed(format!("unknown decision {:?}", w.decision)),
            },
            Err(e) => Self::Malformed(format!("not an answer ({e})")),
        }
    }
}

/// One link of the approval chain.
pub trait Answerer {
    /// A short name for the audit log.
    fn name(&self) -> &str;

    /// Whether answering involves prompting a human. Interactive answerers are
    /// never asked in a non-interactive run.
    fn interactive(&self) -> bool {
        false
    }

    /// Decides the request or delegates it. A panic here counts as `unavailable`.
    fn answer(&self, request: &ApprovalRequest) -> Answer;
}

impl<A: Answerer + ?Sized> Answerer for &A {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn interactive(&self) -> bool {
        (**self).interactive()
    }
    fn answer(&self, request: &ApprovalRequest) -> Answer {
        (**self).answer(request)
    }
}

impl<A: Answerer + ?Sized> Answerer for Box<A> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn interactive(&self) -> bool {
        (**self).interactive()
    }
    fn answer(&self, request: &ApprovalRequest) -> Answer {
        (**self).answer(request)
    }
}

/// A non-interactive answerer built from a name and a closure.
pub struct FnAnswerer<F> {
    name: String,
    f: F,
}

impl<F: Fn(&ApprovalRequest) -> Answer> FnAnswerer<F> {
    /// An answerer called `name` that answers with `f`.
    pub fn new(name: impl Into<String>, f: F) -> Self {
        Self {
            name: name.into(),
            f,
        }
    }
}

impl<F: Fn(&ApprovalRequest) -> Answer> Answerer for FnAnswerer<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn answer(&self, request: &ApprovalRequest) -> Answer {
        (self.f)(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_answers_parse_and_garbage_is_malformed() {
        assert_eq!(
            Answer::from_json(r#"{"decision":"allowed-once"}"#),
            Answer::Decide(ApprovalOutcome::AllowedOnce)
        );
        assert_eq!(
            Answer::from_json(r#"{"decision":"rejected"}"#),
            Answer::Decide(ApprovalOutcome::Rejected)
        );
        assert_eq!(
            Answer::from_json(r#"{"decision":"delegate"}"#),
            Answer::Delegate
        );
        for garbage in [
            "",
            "yes",
            r#"{"decision":"allow"}"#,
            r#"{"decision":"allowed-once","remember":true}"#,
            r#"{"decision":true}"#,
        ] {
            assert!(
                matches!(Answer::from_json(garbage), Answer::Malformed(_)),
                "{garbage}"
            );
        }
    }
}
