//! Disassembles the libseccomp program for the strict spec (feature `libseccomp`).
fn main() {
    #[cfg(feature = "libseccomp")]
    {
        let spec = sandbox_seccomp::FilterSpec::all()
            .next()
            .expect("eight specs");
        match sandbox_seccomp::libseccomp_backend::compile_spec(&spec) {
            Ok(f) => print!("{}", f.disassemble()),
            Err(e) => eprintln!("{e}"),
        }
    }
}
