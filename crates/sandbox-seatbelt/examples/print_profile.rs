//! Print the Seatbelt profile a policy becomes (on any OS):
//! `cargo run -p sandbox-seatbelt --example print_profile -- WRITE_DIR`.

use sandbox_core::{ExpandContext, SandboxPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let write = std::env::args().nth(1).unwrap_or_else(|| "/tmp".into());
    let policy = SandboxPolicy {
        network: false,
        write_paths: vec![write],
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())?;
    let profile = sandbox_seatbelt::profile(&policy)?;
    print!("{}", profile.text);
    for (name, value) in &profile.params {
        println!(";; -D {name}={value}");
    }
    Ok(())
}
