//! Confining one command with the Linux backend alone, and the proof that
//! it confined something: it prints the backend and its report, and checks
//! that a write into the write path happened while one beside it was
//! refused.

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use sandbox_core::{Backend, ExpandContext, SandboxPolicy};
    let base = std::env::temp_dir().join(format!("consumer-core-landlock-{}", std::process::id()));
    let granted = base.join("granted");
    std::fs::create_dir_all(&granted)?;
    let (allowed, denied) = (granted.join("allowed"), base.join("denied"));
    let script = format!(
        "echo ok > '{}'; echo no > '{}'; exit 0",
        allowed.display(),
        denied.display()
    );
    let policy = SandboxPolicy {
        network: false,
        write_paths: vec![granted.to_string_lossy().into_owned()],
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())?;
    let backend = sandbox_landlock::LandlockBackend::new()?;
    let argv: Vec<std::ffi::OsString> = ["/bin/sh", "-c", &script]
        .into_iter()
        .map(Into::into)
        .collect();
    let mut confinement = backend.prepare(&policy, &argv)?;
    let supervisor = confinement.supervisor.take();
    let (mut cmd, report) = confinement.into_command().ok_or("empty argv")?;
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
    let result = (allowed.exists(), denied.exists());
    let _ = std::fs::remove_dir_all(&base);
    println!(
        "consumer-core-landlock: backend {} (report: {}, {:?}), {status}, allowed write made: {}, denied write made: {}",
        backend.name(),
        report.backend,
        report.enforcement(),
        result.0,
        result.1
    );
    if backend.name() != "landlock" || report.backend != "landlock" {
        return Err("not confined by landlock".into());
    }
    if !status.success() || result != (true, false) {
        return Err("the write beside the write path was not refused".into());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {}
