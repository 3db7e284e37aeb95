//! What `cargo xtask ci` needs on this machine before it starts: the rustup
//! targets and components it adds itself, and the system packages it only
//! names (one line with the command that installs them, then it fails).

use std::process::{Command, Stdio};

/// Adds the rustup targets and components `ci` uses when they are missing,
/// and fails with one line naming the system packages the tests need that
/// this machine lacks.
pub(crate) fn ensure_ci_prerequisites() -> Result<(), String> {
    let mut targets: Vec<String> = crate::MACOS_TARGETS.iter().map(|t| t.to_string()).collect();
    // `dist` links the CLI against musl when its target is there.
    if let Some(arch) = crate::host_triple()?.strip_suffix("-unknown-linux-gnu") {
        targets.push(format!("{arch}-unknown-linux-musl"));
    }
    ensure_rustup(&targets)?;
    if cfg!(target_os = "linux") {
        ensure_system_packages()?;
    }
    Ok(())
}

fn rustup_installed_list(what: &str) -> Option<Vec<String>> {
    let out = Command::new("rustup")
        .args([what, "list", "--installed"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_owned())
            .collect()
    })
}

pub(crate) fn ensure_rustup(targets: &[String]) -> Result<(), String> {
    let Some(installed) = rustup_installed_list("target") else {
        // No rustup: the toolchain must already have every target.
        let missing: Vec<&String> = targets
            .iter()
            .filter(|t| !crate::target_installed(t).unwrap_or(false))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        return Err(format!(
            "rustup is not installed and the toolchain lacks the target(s) {}: install rustup \
             (https://rustup.rs: `curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh`), \
             then run `cargo xtask ci` again",
            join(&missing)
        ));
    };
    let missing: Vec<&String> = targets.iter().filter(|t| !installed.contains(t)).collect();
    if !missing.is_empty() {
        let mut args = vec!["target", "add"];
        args.extend(missing.iter().map(|t| t.as_str()));
        rustup(&args)?;
    }
    if let Some(components) = rustup_installed_list("component") {
        let missing: Vec<&str> = ["rustfmt", "clippy"]
            .into_iter()
            .filter(|c| !components.iter().any(|i| i.starts_with(&format!("{c}-"))))
            .collect();
        if !missing.is_empty() {
            let mut args = vec!["component", "add"];
            args.extend(missing);
            rustup(&args)?;
        }
    }
    Ok(())
}

fn rustup(args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: rustup {}", args.join(" "));
    let status = Command::new("rustup")
        .args(args)
        .status()
        .map_err(|e| format!("cannot run rustup: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`rustup {}` failed ({status})", args.join(" ")))
    }
}

fn join<T: AsRef<str>>(items: &[T]) -> String {
    items
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `program args...` runs and exits 0.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `program` is an executable file on `$PATH`.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// What the tests run, and the package that provides it: (Debian/Ubuntu,
/// Fedora).
fn ensure_system_packages() -> Result<(), String> {
    let mut missing: Vec<(&str, &str)> = Vec::new();
    for (tool, apt, dnf) in [
        ("git", "git", "git"),
        ("make", "make", "make"),
        ("cc", "gcc", "gcc"),
        ("tar", "tar", "tar"),
        ("curl", "curl", "curl"),
        ("python3", "python3", "python3"),
        // Real-tool workloads (tests/tests/it/real_tools.rs) run npm.
        ("npm", "npm", "npm"),
        // setpriv and unshare: util-linux.
        ("setpriv", "util-linux", "util-linux"),
        ("unshare", "util-linux", "util-linux"),
        // The libseccomp differential build finds libseccomp with pkg-config.
        ("pkg-config", "pkg-config", "pkgconf-pkg-config"),
    ] {
        if !on_path(tool) && !missing.contains(&(apt, dnf)) {
            missing.push((apt, dnf));
        }
    }
    if on_path("python3") && !runs("python3", &["-c", "import venv"]) {
        missing.push(("python3-venv", "python3-libs"));
    }
    // A pytest suite with a fixture server (tests/tests/it/own_listeners.rs).
    if on_path("python3")
        && !["python3", "/usr/bin/python3"]
            .iter()
            .any(|p| runs(p, &["-c", "import pytest"]))
    {
        missing.push(("python3-pytest", "python3-pytest"));
    }
    // `cargo test -p sandbox-seccomp --features libseccomp` links libseccomp.
    if on_path("pkg-config") && !runs("pkg-config", &["--exists", "libseccomp"]) {
        missing.push(("libseccomp-dev", "libseccomp-devel"));
    }
    if missing.is_empty() {
        return Ok(());
    }
    let sudo = if is_root() { "" } else { "sudo " };
    let (manager, names): (&str, Vec<&str>) = if on_path("apt-get") {
        ("apt-get install -y", missing.iter().map(|m| m.0).collect())
    } else if on_path("dnf") {
        ("dnf install -y", missing.iter().map(|m| m.1).collect())
    } else {
        (
            "<your package manager> install",
            missing.iter().map(|m| m.0).collect(),
        )
    };
    Err(format!(
        "the tests need system packages this machine lacks: {}; install them with `{sudo}{manager} {}`, \
         then run `cargo xtask ci` again",
        names.join(" "),
        names.join(" ")
    ))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
