//! The README's library example, as a user would write it.

fn main() -> Result<(), sandbox::Error> {
    let out = std::env::temp_dir();
    let outcome = sandbox::Sandbox::new()
        .write(&out)
        .deny_network()
        .timeout(30)
        .run(["/bin/echo", "confined"])?;
    std::process::exit(outcome.exit_code());
}
