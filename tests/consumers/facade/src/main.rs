//! The README's library example, as a user would write it, and the proof
//! that it confined something: it prints the backend that confined the run
//! (Landlock on Linux, Seatbelt on macOS) and checks that a write into the
//! granted directory happened while one beside it was refused.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::temp_dir().join(format!("consumer-facade-{}", std::process::id()));
    let out = base.join("granted");
    std::fs::create_dir_all(&out)?;
    let (allowed, denied) = (out.join("allowed"), base.join("denied"));
    let script = format!(
        "echo ok > '{}'; echo no > '{}'; exit 0",
        allowed.display(),
        denied.display()
    );
    let outcome = sandbox::Sandbox::new()
        .write(&out)
        .deny_network()
        .timeout(30)
        .run(["/bin/sh", "-c", &script])?;
    let result = (allowed.exists(), denied.exists());
    let _ = std::fs::remove_dir_all(&base);
    println!(
        "consumer-facade: backend {}, exit {}, allowed write made: {}, denied write made: {}",
        outcome.backend,
        outcome.exit_code(),
        result.0,
        result.1
    );
    let expected = if cfg!(target_os = "macos") {
        "seatbelt"
    } else {
        "landlock"
    };
    if outcome.backend != expected {
        return Err(format!("confined by {:?}, not {expected}", outcome.backend).into());
    }
    if outcome.exit_code() != 0 || result != (true, false) {
        return Err("the write beside the granted directory was not refused".into());
    }
    Ok(())
}
