//! Choosing the backend for a [`SandboxConfig`].

use std::sync::Arc;

use sandbox_core::{
    Backend, BackendChoice, NoopBackend, OnUnsupported, ResolvedPolicy, SandboxConfig,
    SandboxUnavailable, UnavailableKind,
};

/// The backend a config resolved to.
#[derive(Debug, Clone)]
pub struct ResolvedBackend {
    /// The backend to use.
    pub backend: Arc<dyn Backend>,
    /// Why the preferred backend was not used, when `on_unsupported` let resolution fall back.
    pub fallback: Option<SandboxUnavailable>,
}

/// Picks the backend `config` asks for, and checks it really enforces here.
///
/// A real backend is handed out only after it passes the enforcement
/// self-test on this host. A missing backend (its mechanism absent here,
/// known before any probe) and one whose self-test saw a forbidden action
/// get through ([`UnavailableKind::SelfTestFailed`]) are treated alike:
/// `on_unsupported` decides between an error, a warning plus the noop
/// backend, or the noop backend silently. Any other self-test failure says
/// nothing of the host and is always an error: one that was interfered with
/// ([`UnavailableKind::SelfTestInterfered`]) or was inconclusive
/// ([`UnavailableKind::SelfTestInconclusive`]: a control not seen, a probe
/// launch that could not start, as under a full `RLIMIT_NPROC`).
pub fn resolve_backend(config: &SandboxConfig) -> Result<ResolvedBackend, SandboxUnavailable> {
    resolve(config, None)
}

/// [`resolve_backend`] for a run under `policy`.
///
/// A passing self-test verdict cached earlier in this boot (by the same
/// binary) may stand in for the probes, unless the cache lies beneath one of
/// the policy's write paths.
pub fn resolve_backend_for(
    config: &SandboxConfig,
    policy: &ResolvedPolicy,
) -> Result<ResolvedBackend, SandboxUnavailable> {
    resolve(config, Some(policy.write_paths()))
}

fn resolve(
    config: &SandboxConfig,
    writable: Option<&[std::path::PathBuf]>,
) -> Result<ResolvedBackend, SandboxUnavailable> {
    if config.backend == BackendChoice::Noop {
        return Ok(ResolvedBackend {
            backend: Arc::new(NoopBackend),
            fallback: None,
        });
    }
    resolve_with(config, writable, || match config.backend {
        BackendChoice::Auto => platform_backend(),
        BackendChoice::Landlock => landlock_backend(),
        BackendChoice::Seatbelt => seatbelt_backend(),
        _ => Err(SandboxUnavailable::new(
            "unknown",
            "this backend choice is not supported by this build",
        )
        .with_kind(UnavailableKind::NoBackend)),
    })
}

/// The self-test and `on_unsupported` applied to the backend `make` gives.
fn resolve_with(
    config: &SandboxConfig,
    writable: Option<&[std::path::PathBuf]>,
    make: impl FnOnce() -> Result<Arc<dyn Backend>, SandboxUnavailable>,
) -> Result<ResolvedBackend, SandboxUnavailable> {
    let attempt = make().and_then(|backend| {
        crate::verdict::check(backend.as_ref(), writable)?;
        Ok(backend)
    });
    match attempt {
        Ok(backend) => Ok(ResolvedBackend {
            backend,
            fallback: None,
        }),
        // A self-test another process interfered with, or one that was
        // inconclusive (a control not seen, a launch that could not start:
        // red team R7 F2), says nothing of the host: never a reason to run
        // unconfined, whatever on_unsupported says.
        Err(err) if refused_whatever_on_unsupported(err.kind()) => Err(err),
        Err(err) => match config.on_unsupported {
            OnUnsupported::Error => Err(err),
            OnUnsupported::Warn => {
                tracing::warn!(
                    "sandbox: {err}; falling back to the noop backend (on_unsupported = warn)"
                );
                Ok(ResolvedBackend {
                    backend: Arc::new(NoopBackend),
                    fallback: Some(err),
                })
            }
            _ => Ok(ResolvedBackend {
                backend: Arc::new(NoopBackend),
                fallback: Some(err),
            }),
        },
    }
}

/// The kinds `on_unsupported` never turns into the noop backend: the
/// self-test said nothing of the host.
fn refused_whatever_on_unsupported(kind: UnavailableKind) -> bool {
    matches!(
        kind,
        UnavailableKind::SelfTestInterfered | UnavailableKind::SelfTestInconclusive
    )
}

fn platform_backend() -> Result<Arc<dyn Backend>, SandboxUnavailable> {
    if cfg!(target_os = "linux") {
        landlock_backend()
    } else if cfg!(target_os = "macos") {
        seatbelt_backend()
    } else {
        Err(SandboxUnavailable::new(
            "auto",
            format!("no sandbox backend exists for {}", std::env::consts::OS),
        )
        .with_kind(UnavailableKind::NoBackend))
    }
}

fn landlock_backend() -> Result<Arc<dyn Backend>, SandboxUnavailable> {
    #[cfg(target_os = "linux")]
    {
        Ok(Arc::new(sandbox_landlock::LandlockBackend::new()?))
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(
            SandboxUnavailable::new("landlock", "Landlock exists only on Linux")
                .with_kind(UnavailableKind::NoBackend),
        )
    }
}

fn seatbelt_backend() -> Result<Arc<dyn Backend>, SandboxUnavailable> {
    #[cfg(target_os = "macos")]
    {
        sandbox_seatbelt::SeatbeltBackend::check_available()?;
        Ok(Arc::new(sandbox_seatbelt::SeatbeltBackend::new()))
    }
    #[cfg(not(target_os = "macos"))]
    {
        Err(
            SandboxUnavailable::new("seatbelt", "the Seatbelt backend runs only on macOS")
                .with_kind(UnavailableKind::NoBackend),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{Axis, Confinement, ResolvedPolicy, WrappedArgv};
    use std::ffi::OsString;

    /// A backend that claims to enforce but confines nothing: the self-test
    /// must catch it.
    #[derive(Debug)]
    struct Pretender;

    impl Backend for Pretender {
        fn name(&self) -> &'static str {
            "pretender-for-resolve-tests"
        }
        fn axes(&self) -> &'static [Axis] {
            &[Axis::Write, Axis::Spawn]
        }
        fn prepare(
            &self,
            _policy: &ResolvedPolicy,
            argv: &[OsString],
        ) -> Result<Confinement, SandboxUnavailable> {
            Ok(Confinement::new(
                argv.to_vec(),
                None,
                NoopBackend.prepare(_policy, argv)?.report,
            ))
        }
        fn wrap_argv(
            &self,
            policy: &ResolvedPolicy,
            argv: &[OsString],
        ) -> Result<WrappedArgv, SandboxUnavailable> {
            NoopBackend.wrap_argv(policy, argv)
        }
    }

    /// A backend whose launches cannot start: each fails `EAGAIN`, as a
    /// fork does under a full `RLIMIT_NPROC` (red team R7 F2).
    #[derive(Debug)]
    struct Starved;

    impl Backend for Starved {
        fn name(&self) -> &'static str {
            "starved-for-resolve-tests"
        }
        fn axes(&self) -> &'static [Axis] {
            &[Axis::Write, Axis::Spawn]
        }
        fn prepare(
            &self,
            policy: &ResolvedPolicy,
            argv: &[OsString],
        ) -> Result<Confinement, SandboxUnavailable> {
            // SAFETY: the closure builds an error from a raw code; no allocation.
            let hook = unsafe {
                sandbox_core::PreExecHook::new(|| {
                    Err(sandbox_core::encode_pre_exec_error(libc::EAGAIN))
                })
            };
            Ok(Confinement::new(
                argv.to_vec(),
                Some(hook),
                NoopBackend.prepare(policy, argv)?.report,
            ))
        }
        fn wrap_argv(
            &self,
            _policy: &ResolvedPolicy,
            _argv: &[OsString],
        ) -> Result<WrappedArgv, SandboxUnavailable> {
            Err(SandboxUnavailable::new(self.name(), "no argv form"))
        }
    }

    /// A self-test whose launches could not start is inconclusive: refused
    /// under every `on_unsupported`, never the noop backend, and run again
    /// on the next resolution (not cached). Twin: the pretender, whose
    /// self-test sees a forbidden write, falls back under `warn` (above).
    #[test]
    fn a_self_test_starved_of_processes_never_falls_back_to_noop() {
        let make = || Ok(Arc::new(Starved) as Arc<dyn Backend>);
        let mut config = SandboxConfig::default();
        for choice in [
            OnUnsupported::Error,
            OnUnsupported::Warn,
            OnUnsupported::Ignore,
        ] {
            config.on_unsupported = choice;
            let err = resolve_with(&config, None, make).unwrap_err();
            assert_eq!(
                err.kind(),
                UnavailableKind::SelfTestInconclusive,
                "{choice:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains("inconclusive")
                    && text.contains("not run unconfined whatever on_unsupported says")
                    && text.contains("Resource temporarily unavailable"),
                "{text}"
            );
        }
        assert!(crate::gate::report("starved-for-resolve-tests").is_none());
    }

    #[test]
    fn a_backend_failing_its_self_test_is_demoted_as_on_unsupported_says() {
        let make = || Ok(Arc::new(Pretender) as Arc<dyn Backend>);
        let mut config = SandboxConfig::default();
        let err = resolve_with(&config, None, make).unwrap_err();
        assert!(err.to_string().contains("self-test"), "{err}");
        for choice in [OnUnsupported::Warn, OnUnsupported::Ignore] {
            config.on_unsupported = choice;
            let r = resolve_with(&config, None, make).unwrap();
            assert_eq!(r.backend.name(), "noop", "{choice:?}");
            assert!(r
                .fallback
                .is_some_and(|e| e.to_string().contains("self-test")));
        }
        // Twin: a backend that does confine passes (the host's, on Linux).
        #[cfg(target_os = "linux")]
        {
            config.on_unsupported = OnUnsupported::Error;
            let r = resolve_with(&config, None, landlock_backend).unwrap();
            assert_eq!(r.backend.name(), "landlock");
            assert!(r.fallback.is_none());
        }
    }

    /// A self-test another process interfered with is an error under every
    /// `on_unsupported`: never the noop backend (red team R6b F2). Twin: an
    /// ordinary self-test failure under `warn` falls back (above).
    #[test]
    fn an_interfered_self_test_never_falls_back_to_noop() {
        let make = || {
            Err(
                SandboxUnavailable::new("landlock", "enforcement self-test interfered with")
                    .with_kind(UnavailableKind::SelfTestInterfered),
            )
        };
        let mut config = SandboxConfig::default();
        for choice in [
            OnUnsupported::Error,
            OnUnsupported::Warn,
            OnUnsupported::Ignore,
        ] {
            config.on_unsupported = choice;
            let err = resolve_with(&config, None, make).unwrap_err();
            assert_eq!(
                err.kind(),
                UnavailableKind::SelfTestInterfered,
                "{choice:?}"
            );
        }
        let inconclusive = || {
            Err(
                SandboxUnavailable::new("landlock", "enforcement self-test inconclusive")
                    .with_kind(UnavailableKind::SelfTestInconclusive),
            )
        };
        for choice in [
            OnUnsupported::Error,
            OnUnsupported::Warn,
            OnUnsupported::Ignore,
        ] {
            config.on_unsupported = choice;
            let err = resolve_with(&config, None, inconclusive).unwrap_err();
            assert_eq!(
                err.kind(),
                UnavailableKind::SelfTestInconclusive,
                "{choice:?}"
            );
        }
        let failed = || {
            Err(SandboxUnavailable::new("landlock", "self-test failed")
                .with_kind(UnavailableKind::SelfTestFailed))
        };
        config.on_unsupported = OnUnsupported::Warn;
        assert_eq!(
            resolve_with(&config, None, failed).unwrap().backend.name(),
            "noop"
        );
    }
}
