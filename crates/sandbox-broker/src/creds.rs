//! Taking on the caller's credentials on the broker thread, and giving them back.
//!
//! Linux credentials belong to a thread when they are changed with the raw
//! syscalls (`setfsuid`, `setfsgid`, `setgroups`, `capset` with pid 0): each
//! commits new credentials for the calling thread only. glibc's `setgroups`
//! and `set*id` wrappers broadcast the change to every thread of the process
//! (the runner has others), so they are never used here.
//!
//! Order (credentials(7), capabilities(7)): the groups change first, while
//! `CAP_SETGID` is still effective, then the fsgid and the fsuid, then the
//! effective set is lowered (the permitted set stays, so it can be raised
//! again). Leaving fsuid 0 drops the filesystem capabilities from the effective
//! set and returning to 0 raises them from the permitted set ("Effect of user
//! ID changes on capabilities"), so the effective set is written last on the
//! way in and again last on the way out. Every change is read back: `setfsuid`
//! and `setfsgid` report no error, only the previous value.

use std::io;

use crate::caller::{cvt, Identity};
use crate::log::CredentialChange;

pub(crate) use sandbox_seccomp::caps::Caps;

/// The calling thread's capability sets.
fn capget() -> io::Result<Caps> {
    sandbox_seccomp::caps::get().map_err(io::Error::from_raw_os_error)
}

/// Sets the calling thread's capability sets (pid 0: this thread only).
fn capset(caps: Caps) -> io::Result<()> {
    sandbox_seccomp::caps::set(caps).map_err(io::Error::from_raw_os_error)
}

/// `setfsuid`/`setfsgid` on the calling thread; returns the previous value.
/// `u32::MAX` (-1) is never a valid id, so it only reads the current one.
fn set_fs_id(nr: libc::c_long, id: u32) -> u32 {
    // SAFETY: setfsuid/setfsgid take one id by value and cannot fail.
    unsafe { libc::syscall(nr, id) as u32 }
}

fn fsuid() -> u32 {
    set_fs_id(libc::SYS_setfsuid, u32::MAX)
}

fn fsgid() -> u32 {
    set_fs_id(libc::SYS_setfsgid, u32::MAX)
}

/// Sets the fs id and reads it back; `false` when the kernel kept the old one.
fn change_fs_id(nr: libc::c_long, id: u32) -> bool {
    set_fs_id(nr, id);
    set_fs_id(nr, u32::MAX) == id
}

fn getgroups() -> io::Result<Vec<u32>> {
    loop {
        // SAFETY: getgroups(0, NULL) returns the count.
        let n = cvt(unsafe { libc::syscall(libc::SYS_getgroups, 0, std::ptr::null_mut::<u32>()) })?;
        let mut groups = vec![0u32; n as usize];
        // SAFETY: the buffer holds `n` gids.
        match cvt(unsafe { libc::syscall(libc::SYS_getgroups, n, groups.as_mut_ptr()) }) {
            Ok(got) => {
                groups.truncate(got as usize);
                groups.sort_unstable();
                groups.dedup();
                return Ok(groups);
            }
            // The list grew in between (another thread's broadcast): ask again.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `setgroups` on the calling thread only (the raw syscall, not glibc's).
fn setgroups(groups: &[u32]) -> io::Result<()> {
    // SAFETY: setgroups(n, list) with a live list of n gids.
    cvt(unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) }).map(|_| ())
}

/// The credentials of the broker thread that the kernel checks on file
/// operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) fsuid: u32,
    pub(crate) fsgid: u32,
    /// Supplementary groups, sorted and deduplicated.
    pub(crate) groups: Vec<u32>,
    pub(crate) caps: Caps,
}

impl Credentials {
    /// The calling thread's credentials.
    pub(crate) fn current() -> io::Result<Self> {
        Ok(Self {
            fsuid: fsuid(),
            fsgid: fsgid(),
            groups: getgroups()?,
            caps: capget()?,
        })
    }
}

/// Why the caller's credentials were not taken on.
#[derive(Debug)]
pub(crate) enum AssumeError {
    /// A needed change failed; the thread's own credentials are back.
    Refused(CredentialChange),
    /// A needed change failed and the thread's own credentials could not be
    /// restored either.
    Restore(CredentialChange, String),
}

/// The broker thread acting with a caller's credentials; [`Assumed::restore`]
/// gives the thread its own back (dropping does too, best effort).
#[must_use = "the thread keeps the caller's credentials until restore"]
pub(crate) struct Assumed<'a> {
    own: &'a Credentials,
    groups: bool,
    fsgid: bool,
    fsuid: bool,
    caps: bool,
    restored: bool,
}

/// Makes the calling thread act as `caller` for file operations: its fsuid,
/// fsgid and supplementary groups, and effective capabilities `own ∩ caller`.
/// Only what differs from `own` (the thread's current credentials) is changed.
pub(crate) fn assume<'a>(
    own: &'a Credentials,
    caller: &Identity,
) -> Result<Assumed<'a>, AssumeError> {
    let mut this = Assumed {
        own,
        groups: false,
        fsgid: false,
        fsuid: false,
        caps: false,
        restored: false,
    };
    let mut wanted_groups = caller.supplementary.clone();
    wanted_groups.sort_unstable();
    wanted_groups.dedup();
    // Each change is atomic: a flag is set once its change took effect, so
    // undoing touches only what changed.
    if wanted_groups != own.groups {
        if setgroups(&wanted_groups).is_err() {
            return Err(this.fail(CredentialChange::Groups));
        }
        this.groups = true;
    }
    if caller.fsgid != own.fsgid {
        if !change_fs_id(libc::SYS_setfsgid, caller.fsgid) {
            return Err(this.fail(CredentialChange::Fsgid));
        }
        this.fsgid = true;
    }
    if caller.fsuid != own.fsuid {
        if !change_fs_id(libc::SYS_setfsuid, caller.fsuid) {
            return Err(this.fail(CredentialChange::Fsuid));
        }
        this.fsuid = true;
    }
    let effective = own.caps.effective & caller.cap_eff;
    // After an fsuid change the kernel has already adjusted the effective set:
    // write the intended one in every such case.
    if effective != own.caps.effective || this.fsuid {
        let wanted = Caps {
            effective,
            ..own.caps
        };
        // capset on the calling thread commits the three sets exactly as
        // given or fails (kernel/capability.c: security_capset() builds the
        // new credentials from them, then commit_creds()): no read-back.
        if capset(wanted).is_err() {
            return Err(this.fail(CredentialChange::Capabilities));
        }
        this.caps = true;
    }
    Ok(this)
}

impl Assumed<'_> {
    fn fail(mut self, change: CredentialChange) -> AssumeError {
        match self.undo() {
            Ok(()) => AssumeError::Refused(change),
            Err(e) => AssumeError::Restore(change, e),
        }
    }

    /// Gives the thread its own credentials back and checks that it has them.
    pub(crate) fn restore(mut self) -> Result<(), String> {
        self.undo()
    }

    fn undo(&mut self) -> Result<(), String> {
        self.restored = true;
        if !(self.groups || self.fsgid || self.fsuid || self.caps) {
            return Ok(());
        }
        let own = self.own;
        let caps = |what: &str| {
            capset(own.caps)
                .map_err(|e| format!("capset back to the broker's own sets {what}: {e}"))
        };
        // Raise CAP_SETUID/CAP_SETGID again first.
        if self.caps {
            caps("before the ids")?;
        }
        if self.fsuid && !change_fs_id(libc::SYS_setfsuid, own.fsuid) {
            return Err(format!("setfsuid back to {} failed", own.fsuid));
        }
        if self.fsgid && !change_fs_id(libc::SYS_setfsgid, own.fsgid) {
            return Err(format!("setfsgid back to {} failed", own.fsgid));
        }
        if self.groups {
            setgroups(&own.groups).map_err(|e| format!("setgroups back failed: {e}"))?;
        }
        // Returning to fsuid 0 raised every permitted filesystem capability.
        if self.fsuid {
            caps("after the fsuid")?;
        }
        if !(self.groups || self.fsgid || self.fsuid) {
            // Only the capability sets were changed, and put back exactly by
            // the capset above (see `assume`); the ids were never touched.
            return Ok(());
        }
        let now = Credentials::current()
            .map_err(|e| format!("reading the broker thread's credentials back: {e}"))?;
        if now != *own {
            return Err(format!(
                "the broker thread's credentials are {now:?} after restoring, not {own:?}"
            ));
        }
        Ok(())
    }
}

impl Drop for Assumed<'_> {
    fn drop(&mut self) {
        if !self.restored {
            // Only reached when unwinding; the thread ends with its broker.
            let _ = self.undo();
        }
    }
}

/// Callers whose credentials are known for the whole run: uid `uid` and gid
/// `gid` in every slot (real, effective, saved, filesystem), supplementary
/// groups `groups`, and no capability, now or ever.
///
/// The broker then takes these as every caller's credentials instead of
/// reading `/proc/TID/status` for each request (it still reads the umask from
/// there for calls that create with a mode), and acts with the broker
/// thread's own ids and an empty effective capability set. Give it to
/// [`BrokerRules::with_fixed_credentials`](crate::BrokerRules::with_fixed_credentials)
/// only when all of these hold for the confined process tree:
///
/// * the process is started with exactly these ids
///   ([`FixedCredentials::verify_in_child`] checks it before exec);
/// * it holds no capability and can never gain one: `NO_NEW_PRIVS` is set
///   (execve then never grants capabilities or set-id ids beyond what the
///   process had, Documentation/userspace-api/no_new_privs.rst) and its
///   permitted set is empty (capset(2): a thread can only lower its permitted
///   set; ambient capabilities must be permitted and inheritable, capabilities(7));
/// * it cannot enter another user namespace (`unshare`, `setns`, `clone` with
///   `CLONE_NEWUSER` refused, `clone3` unavailable): there it would hold
///   capabilities.
///
/// Without `CAP_SETUID`/`CAP_SETGID` a process can only set its uids and gids
/// to one of its current real, effective or saved ids (setresuid(2),
/// setfsuid(2)) and cannot change its supplementary groups (setgroups(2)):
/// with all slots equal, nothing changes. The broker checks at start that its
/// own thread has these fs ids and groups, and otherwise reads each caller's
/// credentials as without this setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedCredentials {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Sorted as the kernel keeps them (getgroups(2) order).
    pub(crate) groups: Vec<u32>,
}

/// At most this many supplementary groups for fixed credentials (the child's
/// check reads them into a stack buffer).
const FIXED_MAX_GROUPS: usize = 64;

impl FixedCredentials {
    /// Credentials with `uid` and `gid` in every slot and the supplementary
    /// `groups` (at most 64; more are never vouched for).
    pub fn new(uid: u32, gid: u32, mut groups: Vec<u32>) -> Self {
        groups.sort_unstable();
        Self { uid, gid, groups }
    }

    /// The calling thread's credentials, when its real, effective, saved and
    /// filesystem uids are one uid and its gids one gid (and it has at most 64
    /// supplementary groups); `None` otherwise. Says nothing about
    /// capabilities: the caller of [`BrokerRules::with_fixed_credentials`](crate::BrokerRules::with_fixed_credentials)
    /// vouches for those.
    pub fn of_this_thread() -> Option<Self> {
        let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
        // SAFETY: getresuid/getresgid write three ids into live locals.
        if unsafe { libc::syscall(libc::SYS_getresuid, &mut r, &mut e, &mut s) } != 0 {
            return None;
        }
        if !(r == e && e == s && fsuid() == r) {
            return None;
        }
        let uid = r;
        // SAFETY: as above.
        if unsafe { libc::syscall(libc::SYS_getresgid, &mut r, &mut e, &mut s) } != 0 {
            return None;
        }
        if !(r == e && e == s && fsgid() == r) {
            return None;
        }
        let groups = raw_groups()?;
        (groups.len() <= FIXED_MAX_GROUPS).then_some(Self {
            uid,
            gid: r,
            groups,
        })
    }

    /// Checks, in a forked child before exec, that the process has exactly
    /// these ids (all slots) and groups and an empty effective, permitted and
    /// inheritable capability set; `Err(EPERM)` when not, the raw errno of a
    /// failed read otherwise. Async-signal-safe: raw syscalls on the stack only.
    pub fn verify_in_child(&self) -> Result<(), i32> {
        let errno = || {
            // SAFETY: __errno_location returns this thread's errno slot.
            unsafe { *libc::__errno_location() }
        };
        for (nr, want) in [
            (libc::SYS_getresuid, self.uid),
            (libc::SYS_getresgid, self.gid),
        ] {
            let mut ids = [0u32; 3];
            let p = ids.as_mut_ptr();
            // SAFETY: three live u32 slots.
            let rc = unsafe { libc::syscall(nr, p, p.add(1), p.add(2)) };
            if rc != 0 {
                return Err(errno());
            }
            if ids != [want; 3] {
                return Err(libc::EPERM);
            }
        }
        if fsuid() != self.uid || fsgid() != self.gid {
            return Err(libc::EPERM);
        }
        let mut buf = [0u32; FIXED_MAX_GROUPS];
        // SAFETY: getgroups writes at most FIXED_MAX_GROUPS gids into buf.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getgroups,
                FIXED_MAX_GROUPS as libc::c_int,
                buf.as_mut_ptr(),
            )
        };
        if n < 0 {
            // EINVAL: more groups than the buffer, so more than expected.
            return Err(libc::EPERM);
        }
        if buf.get(..n as usize) != Some(&self.groups[..]) {
            return Err(libc::EPERM);
        }
        if !sandbox_seccomp::caps::get()?.is_empty() {
            return Err(libc::EPERM);
        }
        Ok(())
    }

    /// Whether the broker thread `own` acts as these credentials do for file
    /// access: same fs ids and groups.
    pub(crate) fn matches(&self, own: &Credentials) -> bool {
        let mut groups = self.groups.clone();
        groups.sort_unstable();
        groups.dedup();
        own.fsuid == self.uid && own.fsgid == self.gid && own.groups == groups
    }
}

/// The calling thread's supplementary groups as the kernel returns them.
fn raw_groups() -> Option<Vec<u32>> {
    // SAFETY: getgroups(0, NULL) returns the count.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, 0, std::ptr::null_mut::<u32>()) };
    let n = usize::try_from(n).ok()?;
    let mut groups = vec![0u32; n];
    // SAFETY: the buffer holds `n` gids.
    let got = unsafe { libc::syscall(libc::SYS_getgroups, n, groups.as_mut_ptr()) };
    (usize::try_from(got).ok()? == n).then_some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP_SETGID: u32 = 6;
    const CAP_SETUID: u32 = 7;

    fn identity(fsuid: u32, fsgid: u32, supplementary: Vec<u32>, cap_eff: u64) -> Identity {
        let mut groups = supplementary.clone();
        groups.push(fsgid);
        Identity {
            euid: fsuid,
            fsuid,
            fsgid,
            groups,
            supplementary,
            cap_eff,
            umask: 0o022,
        }
    }

    /// Runs `f` on a fresh thread, so credential changes stay there.
    fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("thread")
    }

    #[test]
    fn same_identity_changes_nothing() {
        on_thread(|| {
            let own = Credentials::current().expect("own");
            let me = identity(own.fsuid, own.fsgid, own.groups.clone(), own.caps.effective);
            let assumed = assume(&own, &me).expect("assume");
            assert!(!(assumed.groups || assumed.fsgid || assumed.fsuid || assumed.caps));
            assumed.restore().expect("restore");
        });
    }

    #[test]
    fn another_identity_is_taken_on_and_given_back() {
        on_thread(|| {
            let own = Credentials::current().expect("own");
            if own.caps.effective & (1 << CAP_SETUID) == 0 {
                // Unprivileged test run: the refusal test below covers it.
                return;
            }
            let other = identity(65534, 65533, vec![4242], 1 << 3);
            let assumed = assume(&own, &other).expect("assume");
            let now = Credentials::current().expect("now");
            assert_eq!(
                (now.fsuid, now.fsgid, now.groups.clone()),
                (65534, 65533, vec![4242])
            );
            assert_eq!(now.caps.effective, own.caps.effective & (1 << 3));
            assert_eq!(now.caps.permitted, own.caps.permitted);
            // The thread group leader (the test harness's main thread) kept its own.
            let fsuid_of = |status: &str| {
                let line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid");
                line.split_whitespace().nth(4).expect("fsuid").to_owned()
            };
            let leader = std::fs::read_to_string("/proc/self/status").expect("status");
            let this = std::fs::read_to_string("/proc/thread-self/status").expect("status");
            assert_eq!(fsuid_of(&leader), own.fsuid.to_string());
            assert_eq!(fsuid_of(&this), "65534");
            assumed.restore().expect("restore");
            assert_eq!(Credentials::current().expect("back"), own);
        });
    }

    #[test]
    fn a_change_that_fails_is_refused_and_undone() {
        on_thread(|| {
            let mut own = Credentials::current().expect("own");
            // Drop CAP_SETGID and CAP_SETUID from this thread for good.
            let setid = (1u64 << CAP_SETGID) | (1u64 << CAP_SETUID);
            let lowered = Caps {
                effective: own.caps.effective & !setid,
                permitted: own.caps.permitted & !setid,
                inheritable: own.caps.inheritable & !setid,
            };
            capset(lowered).expect("lower");
            own = Credentials::current().expect("own again");
            let other_groups = identity(own.fsuid, own.fsgid, vec![4242], 0);
            let got = assume(&own, &other_groups).map(|_| ());
            assert!(
                matches!(got, Err(AssumeError::Refused(CredentialChange::Groups))),
                "{got:?} {own:?}"
            );
            assert_eq!(Credentials::current().expect("unchanged"), own);
            let other_uid = identity(65534, own.fsgid, own.groups.clone(), 0);
            assert!(matches!(
                assume(&own, &other_uid),
                Err(AssumeError::Refused(CredentialChange::Fsuid))
            ));
            assert_eq!(Credentials::current().expect("unchanged"), own);
            // Twin: an identity needing only a lower effective set works.
            let fewer_caps = identity(own.fsuid, own.fsgid, own.groups.clone(), 0);
            let assumed = assume(&own, &fewer_caps).expect("lower caps");
            assert_eq!(capget().expect("caps").effective, 0);
            assumed.restore().expect("restore");
            assert_eq!(Credentials::current().expect("back"), own);
        });
    }
}
