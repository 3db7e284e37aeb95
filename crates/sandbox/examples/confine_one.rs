//! Confine one command: `cargo run -p sandbox --example confine_one -- DIR CMD...`
//! writes only beneath DIR, without network, for at most 60 s.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let dir = args.next().ok_or("usage: confine_one DIR CMD [ARGS]...")?;
    let argv: Vec<_> = args.collect();
    let outcome = sandbox::Sandbox::new()
        .write(&dir)
        .deny_network()
        .timeout(60)
        .run(argv)?;
    println!("{:?} ({:?})", outcome.classification, outcome.termination);
    std::process::exit(outcome.exit_code());
}
