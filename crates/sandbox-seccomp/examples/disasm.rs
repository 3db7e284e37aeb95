//! Prints the filter for every policy combination, or the disassembly of one.
use sandbox_seccomp::{compile_spec, FilterSpec};

fn main() {
    for spec in FilterSpec::all() {
        match compile_spec(&spec) {
            Ok(f) => println!("{spec:?}: {} instructions", f.len()),
            Err(e) => println!("{spec:?}: {e}"),
        }
    }
    if std::env::args().any(|a| a == "--disassemble") {
        let spec = FilterSpec::all().next().expect("eight specs");
        if let Ok(f) = compile_spec(&spec) {
            print!("{}", f.disassemble());
        }
    }
}
