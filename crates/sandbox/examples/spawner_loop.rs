//! Launch many commands under one policy at close to a plain spawn's cost:
//! `cargo run -p sandbox --example spawner_loop -- DIR` writes DIR/0 .. DIR/9.

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .ok_or("usage: spawner_loop DIR")?;
    let spawner = sandbox::Sandbox::new()
        .write(&dir)
        .deny_network()
        .spawner()?;
    for i in 0..10 {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", "echo $1 > \"$0/$1\""])
            .arg(&dir)
            .arg(i.to_string());
        let status = spawner.spawn(cmd)?.wait()?;
        assert!(status.success());
    }
    println!("10 confined commands spawned from one confined thread");
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the confined spawner is Linux-only");
}
