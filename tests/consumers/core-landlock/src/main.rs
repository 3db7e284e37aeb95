//! Confining one command with the Linux backend alone.

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use sandbox_core::{Backend, ExpandContext, SandboxPolicy};
    let policy = SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())?;
    let mut confinement =
        sandbox_landlock::LandlockBackend::new()?.prepare(&policy, &["/bin/true".into()])?;
    let supervisor = confinement.supervisor.take();
    let (mut cmd, _report) = confinement.into_command().ok_or("empty argv")?;
    let mut child = cmd.spawn()?;
    drop(cmd);
    let mut broker = supervisor.map(|s| s.start()).transpose()?;
    if let Some(b) = broker.as_mut() {
        b.confirm()?;
    }
    let status = child.wait()?;
    if let Some(b) = broker {
        b.finish();
    }
    std::process::exit(status.code().unwrap_or(1));
}

#[cfg(not(target_os = "linux"))]
fn main() {}
