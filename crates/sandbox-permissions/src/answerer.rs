//! Answerers: the links of the approval chain.

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

/// A non-interactive answerer built from a name and a closure (tests).
#[cfg(test)]
pub(crate) struct FnAnswerer<F> {
    name: String,
    f: F,
}

#[cfg(test)]
impl<F: Fn(&ApprovalRequest) -> Answer> FnAnswerer<F> {
    /// An answerer called `name` that answers with `f`.
    pub(crate) fn new(name: impl Into<String>, f: F) -> Self {
        Self {
            name: name.into(),
            f,
        }
    }
}

#[cfg(test)]
impl<F: Fn(&ApprovalRequest) -> Answer> Answerer for FnAnswerer<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn answer(&self, request: &ApprovalRequest) -> Answer {
        (self.f)(request)
    }
}
