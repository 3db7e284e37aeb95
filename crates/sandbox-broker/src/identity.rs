//! Who the broker acts as: its own thread's identity, which it returns to
//! after every request, and the caller's, which it takes on to perform one.

use std::io;
use std::os::unix::fs::MetadataExt;

use crate::caller::{Caller, Identity};
use crate::creds::{self, AssumeError, Credentials, FixedCredentials};
use crate::log::{BrokerDecision, Refusal};
use crate::samecpu::SameCpu;
use crate::umasks::Umasks;

/// The broker thread's own identity, which it returns to after every request.
pub(crate) struct Own {
    pub(crate) creds: Credentials,
    /// Device and inode of its user namespace.
    pub(crate) user_ns: (u64, u64),
    /// Every caller's credentials, when the spawner vouched for them and
    /// they are this thread's own fs ids and groups.
    pub(crate) fixed: Option<FixedCredentials>,
    /// The umask the thread has now (its own: `unshare(CLONE_FS)`).
    pub(crate) umask: std::cell::Cell<u32>,
    /// Its CPU mask, for fd hand-backs on one CPU.
    pub(crate) cpu: SameCpu,
    /// The callers' umasks, kept under fixed credentials when the filter
    /// routes `umask` (`None`: read for each create).
    pub(crate) umasks: Option<std::cell::RefCell<Umasks>>,
}

impl Own {
    pub(crate) fn current(
        fixed: Option<&FixedCredentials>,
        umask_routed: bool,
    ) -> io::Result<Self> {
        let st = std::fs::metadata("/proc/thread-self/ns/user")?;
        let creds = Credentials::current()?;
        let fixed = fixed.filter(|f| {
            let same = f.matches(&creds);
            if !same {
                tracing::warn!(
                    ?f,
                    ?creds,
                    "fixed caller credentials differ from the broker thread's own; reading each caller's instead"
                );
            }
            same
        });
        // SAFETY: umask cannot fail; set straight back.
        let umask = unsafe {
            let old = libc::umask(0o077);
            libc::umask(old);
            old
        };
        Ok(Self {
            creds,
            user_ns: (st.dev(), st.ino()),
            fixed: fixed.cloned(),
            umask: std::cell::Cell::new(umask as u32),
            cpu: SameCpu::current(),
            umasks: (fixed.is_some() && umask_routed).then(Default::default),
        })
    }

    /// Gives the thread the umask `mask` (one syscall only when it differs).
    pub(crate) fn set_umask(&self, mask: u32) {
        if self.umask.get() != mask {
            // SAFETY: umask cannot fail; it changes this thread's (unshared) mask only.
            unsafe { libc::umask(mask as libc::mode_t) };
            self.umask.set(mask);
        }
    }
}

/// Which umask a request applies: none, one kept, or one to read now.
#[derive(Debug, Clone, Copy)]
pub(crate) enum UmaskUse {
    None,
    Kept(u32),
    Read,
}

/// The caller's credentials; capabilities held in another user namespace
/// count for nothing (they are not capabilities over the broker's objects).
///
/// With fixed credentials they are those (no capability), with the umask
/// `umask` says (`0o077` when the call applies none).
pub(crate) fn caller_identity(caller: &Caller, own: &Own, umask: UmaskUse) -> io::Result<Identity> {
    if let Some(fixed) = &own.fixed {
        let supplementary = fixed.groups.clone();
        let mut groups = supplementary.clone();
        groups.push(fixed.gid);
        return Ok(Identity {
            euid: fixed.uid,
            fsuid: fixed.uid,
            fsgid: fixed.gid,
            groups,
            supplementary,
            cap_eff: 0,
            umask: match umask {
                UmaskUse::None => 0o077,
                UmaskUse::Kept(mask) => mask,
                UmaskUse::Read => {
                    let mask = caller.umask()?;
                    if let Some(umasks) = &own.umasks {
                        umasks.borrow_mut().keep(caller.tid(), caller.pidfd(), mask);
                    }
                    mask
                }
            },
        });
    }
    let mut identity = caller.identity()?;
    if caller.user_ns()? != own.user_ns {
        identity.cap_eff = 0;
    }
    Ok(identity)
}

/// Runs `f` with the caller's credentials on the broker thread, then restores
/// the thread's own (a failed restore is recorded in `fatal`); `Err` with the
/// refusal when they could not be taken on.
pub(crate) fn with_credentials<T>(
    own: &Own,
    identity: &Identity,
    fatal: &mut Option<String>,
    f: impl FnOnce() -> T,
) -> Result<T, BrokerDecision> {
    let assumed = match creds::assume(&own.creds, identity) {
        Ok(assumed) => assumed,
        Err(AssumeError::Refused(change)) => {
            return Err(BrokerDecision::Refused {
                reason: Refusal::CallerCredentials { change },
            })
        }
        Err(AssumeError::Restore(change, e)) => {
            *fatal = Some(e);
            return Err(BrokerDecision::Refused {
                reason: Refusal::CallerCredentials { change },
            });
        }
    };
    let out = f();
    if let Err(e) = assumed.restore() {
        *fatal = Some(e);
    }
    Ok(out)
}
