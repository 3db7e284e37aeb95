//! Project tasks: `cargo xtask ci | conformance | bench | stress | dist | codegen`.

mod bench;
mod conformance;
mod setup;
mod stress;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("conformance") => conformance::main(&args[1..]),
        Some("bench") => bench::main(&args[1..]),
        Some(bench::AS_NOBODY) => bench::pairs_main(&args[1..]),
        Some("stress") => stress::main(&args[1..]),
        Some("dist") => dist().map(|bin| println!("{}", bin.display())),
        Some("codegen") => codegen(),
        _ => {
            eprintln!("usage: cargo xtask <ci | conformance [--require BACKEND] [--json FILE] [--against noop] [--weaken AXIS] | bench [--quick] [--write] [--only SUBSTR] | stress [--quick] | dist | codegen>");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn cargo(args: &[&str]) -> Result<(), String> {
    cargo_env(args, &[])
}

fn cargo_env(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

/// Writes the generated sources: the prebuilt seccomp programs
/// (`crates/sandbox-seccomp/generated/x86_64.rs`, what the compiler makes of
/// the table). `cargo test` fails while the file is stale, so CI checks it.
fn codegen() -> Result<(), String> {
    use sandbox_seccomp::codegen;
    let source = codegen::prebuilt_source().ok_or(
        "codegen runs on x86_64 Linux only: the prebuilt programs are x86_64's, \
         compiled by this build of sandbox-seccomp",
    )?;
    let path = workspace_root()
        .join("crates/sandbox-seccomp")
        .join(codegen::PREBUILT_PATH);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == source) {
        eprintln!("xtask codegen: {} is up to date", path.display());
        return Ok(());
    }
    std::fs::write(&path, source).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("xtask codegen: wrote {}", path.display());
    Ok(())
}

/// The macOS targets checked from Linux (`rustup target add` installs them).
const MACOS_TARGETS: &[&str] = &["x86_64-apple-darwin", "aarch64-apple-darwin"];

/// Format check, clippy with warnings denied, rustdoc without warnings, every
/// test, and the seccomp compiler's libseccomp differential (needs libseccomp-dev).
/// Each step's wall time is printed when it ends, and all of them (the
/// failing one last) in a table at the end.
fn ci() -> Result<(), String> {
    let mut timings = Timings::default();
    let result = ci_steps(&mut timings);
    eprint!("{}", timings.table());
    result
}

fn ci_steps(t: &mut Timings) -> Result<(), String> {
    // The rustup targets it adds itself; missing system packages it names.
    t.step("prerequisites", setup::ensure_ci_prerequisites)?;
    t.step("fmt --check", || cargo(&["fmt", "--all", "--check"]))?;
    t.step("clippy", || {
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
    })?;
    t.step("rustdoc", || {
        cargo_env(
            &["doc", "--workspace", "--no-deps"],
            &[("RUSTDOCFLAGS", "-D warnings")],
        )
    })?;
    // macOS-only code compiles and is lint-clean in every run on Linux
    // (clippy type-checks every target, so no separate `cargo check`).
    for target in MACOS_TARGETS {
        t.step(&format!("clippy {target}"), || {
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--target",
                target,
                "--",
                "-D",
                "warnings",
            ])
        })?;
    }
    t.step("test --workspace", || cargo(&["test", "--workspace"]))?;
    // The mutation check of the proof: with no sandbox at all every deny,
    // boundary, exception and load-method row must fail.
    t.step("conformance --against noop", || {
        conformance::main(&["--against".to_owned(), "noop".to_owned()])
    })?;
    // Each weakened build (their own target directory; after the first,
    // each rebuilds only the backend and what links it): without one
    // mechanism, that axis's legs must fail.
    for axis in ["write", "network", "spawn", "broker"] {
        t.step(&format!("conformance --weaken {axis}"), || {
            conformance::main(&["--weaken".to_owned(), axis.to_owned()])
        })?;
    }
    // The libseccomp differential, the one test the feature adds (the rest
    // of the crate's tests ran in `test --workspace`).
    t.step("seccomp differential (libseccomp)", || {
        cargo(&[
            "test",
            "-p",
            "sandbox-seccomp",
            "--features",
            "libseccomp",
            "--test",
            "it",
            "--",
            "differential::",
        ])
    })?;
    // The end-to-end tests again, against the binary `dist` ships (static,
    // musl: it has found bugs the debug build did not).
    let bin = t.step("dist", dist)?;
    let bin_str = bin.to_str().ok_or("the dist path is not UTF-8")?;
    t.step("test -p sandbox-tests (dist binary)", || {
        cargo_env(
            &["test", "-p", "sandbox-tests"],
            &[("SANDBOX_BIN", bin_str)],
        )
    })?;
    // Crates outside the workspace, as users write them: one on the facade
    // alone, one on sandbox-core + sandbox-landlock alone.
    let root = workspace_root();
    for consumer in ["tests/consumers/facade", "tests/consumers/core-landlock"] {
        let manifest = root.join(consumer).join("Cargo.toml");
        let manifest = manifest.to_str().ok_or("the consumer path is not UTF-8")?;
        let target = root.join("target/consumers");
        let target = target.to_str().ok_or("the target path is not UTF-8")?;
        t.step(consumer, || {
            cargo_env(
                &["run", "--quiet", "--manifest-path", manifest],
                &[("CARGO_TARGET_DIR", target)],
            )
        })?;
    }
    // The short stress run: nothing a run starts outlives it.
    t.step("stress --quick", || stress::main(&["--quick".to_owned()]))?;
    // Nothing the tests ran replaced a device of the host (a `git config`
    // whose file was /dev/null once renamed a regular file over it).
    t.step("host devices intact", host_devices_intact)
}

/// Whether `/dev/null`, `/dev/zero` and `/dev/urandom` are still the
/// character devices they were.
fn host_devices_intact() -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    for dev in ["/dev/null", "/dev/zero", "/dev/urandom"] {
        let meta = std::fs::symlink_metadata(dev).map_err(|e| format!("{dev}: {e}"))?;
        if !meta.file_type().is_char_device() {
            return Err(format!(
                "{dev} is no longer a character device after the tests: something they ran replaced it"
            ));
        }
    }
    Ok(())
}

/// The wall time of each step `cargo xtask ci` ran.
#[derive(Default)]
struct Timings {
    steps: Vec<(String, Duration, bool)>,
}

impl Timings {
    /// Runs one step, printing its wall time when it ends (failed or not).
    fn step<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        let start = Instant::now();
        let result = f();
        let took = start.elapsed();
        eprintln!(
            "xtask ci: {name}: {} in {:.1} s",
            if result.is_ok() { "ok" } else { "FAILED" },
            took.as_secs_f64()
        );
        self.steps.push((name.to_owned(), took, result.is_ok()));
        result
    }

    /// Every step's wall time and the total, one line each.
    fn table(&self) -> String {
        let width = self.steps.iter().map(|(n, ..)| n.len()).max().unwrap_or(0);
        let mut s = String::from("xtask ci: wall time per step\n");
        for (name, took, ok) in &self.steps {
            s.push_str(&format!(
                "  {name:<width$}  {:>8.1} s{}\n",
                took.as_secs_f64(),
                if *ok { "" } else { "  FAILED" }
            ));
        }
        let total: Duration = self.steps.iter().map(|(_, d, _)| *d).sum();
        s.push_str(&format!(
            "  {:<width$}  {:>8.1} s\n",
            "total",
            total.as_secs_f64()
        ));
        s
    }
}

/// Builds the release `sandbox` CLI into `target/dist/sandbox` and returns
/// its path. On Linux it is linked statically against musl when the musl
/// target is installed (added with rustup when it is missing), else
/// statically against glibc: no dynamic loader run and no relocation of shared libraries at
/// every launch. musl also skips glibc's start-up probe of the CPU's caches
/// (`init_cacheinfo`: a series of `cpuid` instructions, each a VM exit on a
/// virtual machine), about 0.4 ms of every launch here (BENCHMARKS.md).
pub(crate) fn dist() -> Result<PathBuf, String> {
    let root = workspace_root();
    let host = host_triple()?;
    let built = if let Some(arch) = host.strip_suffix("-unknown-linux-gnu") {
        let musl = format!("{arch}-unknown-linux-musl");
        // With rustup, the musl target is added when it is missing.
        if !target_installed(&musl)? {
            let _ = setup::ensure_rustup(std::slice::from_ref(&musl));
        }
        let target = if target_installed(&musl)? {
            musl
        } else {
            eprintln!(
                "xtask dist: the {musl} target is not installed (`rustup target add {musl}`); \
                 linking against glibc statically, which starts slower"
            );
            host.clone()
        };
        // With an explicit --target, RUSTFLAGS reach only the target's crates,
        // not build scripts and proc-macros (which cannot be static).
        let mut env = vec![(
            "RUSTFLAGS".to_string(),
            "-C target-feature=+crt-static".to_string(),
        )];
        // ring (the proxy's TLS) compiles C and assembly for the target:
        // cc-rs looks for `<arch>-linux-musl-gcc`, which hosts without
        // musl-tools lack; the host's gcc makes objects that link
        // statically with musl as well (ring needs no libc headers).
        let cc_var = format!("CC_{}", target.replace('-', "_"));
        if target.ends_with("-musl")
            && std::env::var_os(&cc_var).is_none()
            && !on_path(&format!("{arch}-linux-musl-gcc"))
        {
            env.push((cc_var, "gcc".to_string()));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        cargo_env(
            &[
                "build",
                "--release",
                "--quiet",
                "-p",
                "sandbox-cli",
                "--target",
                &target,
            ],
            &env,
        )?;
        root.join("target").join(&target).join("release/sandbox")
    } else {
        cargo(&["build", "--release", "--quiet", "-p", "sandbox-cli"])?;
        root.join("target/release/sandbox")
    };
    let dist = root.join("target/dist");
    std::fs::create_dir_all(&dist).map_err(|e| format!("{}: {e}", dist.display()))?;
    let bin = dist.join("sandbox");
    // Copy to a new file, then rename: a running copy is never overwritten.
    let tmp = dist.join(".sandbox.tmp");
    std::fs::copy(&built, &tmp)
        .and_then(|_| std::fs::rename(&tmp, &bin))
        .map_err(|e| format!("copying {} to {}: {e}", built.display(), bin.display()))?;
    Ok(bin)
}

/// Whether `program` is found in a directory of `$PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Whether rustc has the standard library for `target`.
fn target_installed(target: &str) -> Result<bool, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("cannot run {rustc}: {e}"))?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Ok(Path::new(&sysroot)
        .join("lib/rustlib")
        .join(target)
        .join("lib")
        .is_dir())
}

fn host_triple() -> Result<String, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run {rustc}: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .ok_or_else(|| format!("`{rustc} -vV` printed no host triple"))
}

/// The workspace root (the parent of this crate's directory).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

#[cfg(test)]
mod tests {
    use super::Timings;

    /// The devices check passes on an intact host (it fails only when a
    /// device was replaced, which no test may do to this host).
    #[test]
    fn the_devices_of_an_intact_host_pass() {
        assert_eq!(super::host_devices_intact(), Ok(()));
    }

    /// Every step is timed, a failed one is marked and ends the run, and the
    /// table lists each with the total.
    #[test]
    fn ci_steps_are_timed_and_listed() {
        let mut t = Timings::default();
        assert_eq!(t.step("first", || Ok::<_, String>(7)), Ok(7));
        assert!(t
            .step("second step", || Err::<(), _>("no".to_owned()))
            .is_err());
        let table = t.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[1].trim_start().starts_with("first") && lines[1].ends_with(" s"));
        assert!(lines[2].contains("second step") && lines[2].ends_with("FAILED"));
        assert!(lines[3].trim_start().starts_with("total"));
    }
}
