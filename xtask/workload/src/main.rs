//! Workloads for `cargo xtask bench`. Each prints one JSON object on stdout.
//!
//! * `stat N DIR`: N `stat` calls over the entries of DIR; prints the loop's nanoseconds.
//! * `open N FILE`: N open+close of FILE; prints the loop's nanoseconds.
//! * `launch N WRITE_DIR`: N interleaved rounds of a plain `Command` spawn of
//!   `/bin/true`, the same spawn through the resolved backend's `Command`
//!   form, a run through the facade's runner (`sandbox::runner::run`), and (Linux) a
//!   spawn from a `ConfinedSpawner` made once; prints the sample lists in
//!   nanoseconds.
//! * `runner N WRITE_DIR`: N runs of `/bin/true` through the runner alone;
//!   prints the samples.
//! * `floor N WRITE_DIR` (Linux): the kernel work every confined launch
//!   pays, each part measured alone N times (attaching the run's seccomp
//!   program, dropping the capability bounding set, a cgroup made and
//!   removed, a thread started and joined) beside a bare launch of
//!   `/bin/true`; prints the medians in nanoseconds.
//! * `prepare N WIDE_DIR`: N prepares of a policy with 50 write paths and a read
//!   denial deep under WIDE_DIR; prints the samples.
//!
//! * `gate N`: N uncached runs of the enforcement self-test; prints the samples.
//! * `chmod N DIR`: N chmod calls on a file in DIR (brokered when confined);
//!   prints the loop's nanoseconds.
//!
//! Loops are timed inside the process, so launch cost never enters them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use sandbox::{
    backend::{resolve_backend, BackendChoice, OnUnsupported},
    policy::{ExpandContext, SandboxConfig, SandboxPolicy},
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |i: usize| {
        args.get(i)
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(1000)
    };
    let path = |i: usize| PathBuf::from(args.get(i).map(String::as_str).unwrap_or("/usr"));
    let result = match args.first().map(String::as_str) {
        Some("stat") => stat_loop(n(1), &path(2)),
        Some("open") => open_loop(n(1), &path(2)),
        Some("launch") => launch_pairs(n(1), &path(2)),
        Some("runner") => runner_loop(n(1), &path(2)),
        #[cfg(target_os = "linux")]
        Some("floor") => floor::parts(n(1), &path(2)),
        Some("prepare") => prepare_loop(n(1), &path(2)),
        Some("gate") => gate_loop(n(1)),
        Some("chmod") => chmod_loop(n(1), &path(2)),
        Some("connect") => connect_loop(n(1), args.get(2).map(String::as_str).unwrap_or("")),
        Some("dns") => dns_loop(n(1), args.get(2).map(String::as_str).unwrap_or("localhost")),
        Some("dns-udp") => {
            dns_udp_loop(n(1), args.get(2).map(String::as_str).unwrap_or("localhost"))
        }
        _ => Err("usage: bench-workload stat|open|launch|runner|prepare N PATH".into()),
    };
    match result {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-workload: {e}");
            ExitCode::FAILURE
        }
    }
}

fn stat_loop(n: usize, dir: &Path) -> Result<serde_json::Value, String> {
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    if entries.is_empty() {
        return Err(format!("{} is empty", dir.display()));
    }
    let start = Instant::now();
    for i in 0..n {
        let _ = std::fs::symlink_metadata(&entries[i % entries.len()]);
    }
    Ok(serde_json::json!({ "ns": start.elapsed().as_nanos() as u64 }))
}

fn open_loop(n: usize, file: &Path) -> Result<serde_json::Value, String> {
    let start = Instant::now();
    for _ in 0..n {
        drop(std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?);
    }
    Ok(serde_json::json!({ "ns": start.elapsed().as_nanos() as u64 }))
}

fn real_backend() -> Result<std::sync::Arc<dyn sandbox::backend::Backend>, String> {
    let config = SandboxConfig {
        backend: BackendChoice::Auto,
        on_unsupported: OnUnsupported::Error,
        ..SandboxConfig::default()
    };
    resolve_backend(&config)
        .map(|r| r.backend)
        .map_err(|e| e.to_string())
}

/// The policy the launch rows confine `/bin/true` with: no network, one
/// write path.
fn launch_policy(write_dir: &Path) -> Result<sandbox::policy::ResolvedPolicy, String> {
    SandboxPolicy {
        network: false,
        write_paths: vec![write_dir.to_string_lossy().into_owned()],
        ..Default::default()
    }
    .resolve(&ExpandContext::default())
    .map_err(|e| e.to_string())
}

fn launch_pairs(n: usize, write_dir: &Path) -> Result<serde_json::Value, String> {
    let backend = real_backend()?;
    let policy = launch_policy(write_dir)?;
    let argv = [OsString::from("/bin/true")];
    let (mut plain, mut confined, mut runner) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut spawned = Vec::with_capacity(n);
    let spawner = spawner(&policy)?;
    let mut req = sandbox::runner::RunRequest::new(argv.to_vec(), Some(policy.clone()));
    req.echo_stderr = false;
    for _ in 0..n {
        let t = Instant::now();
        let status = Command::new("/bin/true")
            .status()
            .map_err(|e| e.to_string())?;
        plain.push(t.elapsed().as_nanos() as u64);
        if !status.success() {
            return Err("plain /bin/true failed".into());
        }
        let t = Instant::now();
        let confinement = backend.prepare(&policy, &argv).map_err(|e| e.to_string())?;
        let (mut cmd, _) = confinement.into_command().ok_or("empty argv")?;
        let status = cmd.status().map_err(|e| e.to_string())?;
        confined.push(t.elapsed().as_nanos() as u64);
        if !status.success() {
            return Err(format!("confined /bin/true failed: {status}"));
        }
        let t = Instant::now();
        let outcome = sandbox::runner::run(backend.as_ref(), &req).map_err(|e| e.to_string())?;
        runner.push(t.elapsed().as_nanos() as u64);
        if outcome.exit_code() != 0 {
            return Err(format!("/bin/true through the runner failed: {outcome:?}"));
        }
        if let Some(spawner) = &spawner {
            spawned.push(spawn_true(spawner)?);
        }
    }
    Ok(serde_json::json!({
        "backend": backend.name(),
        "plain": plain,
        "confined": confined,
        "runner": runner,
        "spawner": spawned,
    }))
}

/// N runs of `/bin/true` through the runner alone, for profiling it
/// without the other launch forms in between.
fn runner_loop(n: usize, write_dir: &Path) -> Result<serde_json::Value, String> {
    let backend = real_backend()?;
    let policy = launch_policy(write_dir)?;
    let mut req = sandbox::runner::RunRequest::new(vec![OsString::from("/bin/true")], Some(policy));
    req.echo_stderr = false;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let outcome = sandbox::runner::run(backend.as_ref(), &req).map_err(|e| e.to_string())?;
        samples.push(t.elapsed().as_nanos() as u64);
        if outcome.exit_code() != 0 {
            return Err(format!("/bin/true through the runner failed: {outcome:?}"));
        }
    }
    Ok(serde_json::json!({ "backend": backend.name(), "samples": samples }))
}

#[cfg(target_os = "linux")]
use sandbox::backend::ConfinedSpawner as Spawner;

/// No spawner exists off Linux: its samples stay empty and the bench omits the row.
#[cfg(not(target_os = "linux"))]
enum Spawner {}

/// A confined spawner for `policy`, created outside the timed loop.
fn spawner(policy: &sandbox::policy::ResolvedPolicy) -> Result<Option<Spawner>, String> {
    #[cfg(target_os = "linux")]
    {
        let backend = sandbox::backend::LandlockBackend::new().map_err(|e| e.to_string())?;
        backend.spawner(policy).map(Some).map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = policy;
        Ok(None)
    }
}

/// One timed spawn-and-wait of `/bin/true` from `spawner`, in nanoseconds.
fn spawn_true(spawner: &Spawner) -> Result<u64, String> {
    #[cfg(target_os = "linux")]
    {
        let t = Instant::now();
        let status = spawner
            .spawn(Command::new("/bin/true"))
            .and_then(|mut child| child.wait())
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("/bin/true from the spawner failed: {status}"));
        }
        Ok(t.elapsed().as_nanos() as u64)
    }
    #[cfg(not(target_os = "linux"))]
    match *spawner {}
}

fn prepare_loop(n: usize, wide: &Path) -> Result<serde_json::Value, String> {
    let backend = real_backend()?;
    let scratch = std::env::temp_dir().join(format!("bench-prepare-{}", std::process::id()));
    let mut write_paths = Vec::new();
    for i in 0..50 {
        let p = scratch.join(format!("w{i}"));
        std::fs::create_dir_all(&p).map_err(|e| e.to_string())?;
        write_paths.push(p.to_string_lossy().into_owned());
    }
    let deep = deepest_dir(wide, 6);
    let policy = SandboxPolicy {
        write_paths,
        read_deny_paths: vec![deep.to_string_lossy().into_owned()],
        ..Default::default()
    }
    .resolve(&ExpandContext::default())
    .map_err(|e| e.to_string())?;
    let argv = [OsString::from("/bin/true")];
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let c = backend.prepare(&policy, &argv).map_err(|e| e.to_string())?;
        samples.push(t.elapsed().as_nanos() as u64);
        drop(c);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(serde_json::json!({ "backend": backend.name(), "deny": deep, "samples": samples }))
}

/// A directory up to `depth` levels below `root`, always taking the first subdirectory.
fn deepest_dir(root: &Path, depth: usize) -> PathBuf {
    let mut cur = root.to_path_buf();
    for _ in 0..depth {
        let next = std::fs::read_dir(&cur).ok().and_then(|rd| {
            let mut dirs: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect();
            dirs.sort();
            dirs.into_iter().next()
        });
        match next {
            Some(d) => cur = d,
            None => break,
        }
    }
    cur
}

fn gate_loop(n: usize) -> Result<serde_json::Value, String> {
    let backend = real_backend()?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let report = sandbox_probe::enforcement_self_test(backend.as_ref());
        samples.push(t.elapsed().as_nanos() as u64);
        if !report.passed {
            return Err(format!(
                "the self-test failed: {}",
                report.problems().join("; ")
            ));
        }
    }
    Ok(serde_json::json!({ "backend": backend.name(), "samples": samples }))
}

fn chmod_loop(n: usize, dir: &Path) -> Result<serde_json::Value, String> {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join(format!("chmod-{}", std::process::id()));
    std::fs::write(&file, "").map_err(|e| format!("{}: {e}", file.display()))?;
    let start = Instant::now();
    for i in 0..n {
        let mode = if i % 2 == 0 { 0o600 } else { 0o644 };
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", file.display()))?;
    }
    let ns = start.elapsed().as_nanos() as u64;
    let _ = std::fs::remove_file(&file);
    Ok(serde_json::json!({ "ns": ns }))
}

/// `n` TCP connects to `addr`, a listener that accepts and closes each at
/// once: each waits for that close (EOF), so the connects never outrun the
/// listener's backlog, and the listener side, closing first, keeps the
/// TIME_WAIT entries (not this side's ephemeral ports).
/// `n` DNS queries for `name` over TCP, one connection each, to the first
/// `/etc/resolv.conf` nameserver (confined under an allowlist: to the
/// runner's resolver, where the broker sends port 53).
/// The first resolv.conf nameserver and an A query for `name`.
fn resolver_and_query(name: &str) -> (String, Vec<u8>) {
    let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let ns = conf
        .lines()
        .find_map(|l| l.strip_prefix("nameserver"))
        .map_or("127.0.0.1", str::trim)
        .to_owned();
    let mut query = vec![0x42, 0x42, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    (ns, query)
}

/// `n` UDP queries, each on a new socket (as glibc's resolver makes one
/// per lookup).
fn dns_udp_loop(n: usize, name: &str) -> Result<serde_json::Value, String> {
    let (ns, query) = resolver_and_query(name);
    let start = Instant::now();
    for _ in 0..n {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("socket: {e}"))?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        s.send_to(&query, (ns.as_str(), 53))
            .map_err(|e| format!("send to {ns}:53: {e}"))?;
        let mut answer = [0u8; 512];
        let got = s.recv(&mut answer).map_err(|e| format!("answer: {e}"))?;
        if answer[..got].get(3).map(|b| b & 0xf) != Some(0) {
            return Err(format!(
                "{name}: the resolver answered {:?}",
                &answer[..got]
            ));
        }
    }
    let ns = start.elapsed().as_nanos() as u64;
    Ok(serde_json::json!({ "ns": ns }))
}

fn dns_loop(n: usize, name: &str) -> Result<serde_json::Value, String> {
    use std::io::{Read, Write};
    let (ns, query) = resolver_and_query(name);
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&query);
    let start = Instant::now();
    for _ in 0..n {
        let mut s = std::net::TcpStream::connect((ns.as_str(), 53))
            .map_err(|e| format!("connect {ns}:53: {e}"))?;
        s.write_all(&framed).map_err(|e| e.to_string())?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).map_err(|e| e.to_string())?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut answer).map_err(|e| e.to_string())?;
        if answer.get(3).map(|b| b & 0xf) != Some(0) {
            return Err(format!("{name}: the resolver answered {answer:?}"));
        }
    }
    let ns = start.elapsed().as_nanos() as u64;
    Ok(serde_json::json!({ "ns": ns }))
}

fn connect_loop(n: usize, addr: &str) -> Result<serde_json::Value, String> {
    use std::io::Read;
    let start = Instant::now();
    for _ in 0..n {
        let mut s =
            std::net::TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        let mut byte = [0u8; 1];
        let _ = s.read(&mut byte);
    }
    let ns = start.elapsed().as_nanos() as u64;
    Ok(serde_json::json!({ "ns": ns }))
}

/// The per-launch kernel work, each part alone (see `floor` in the module
/// docs): what no change to the runner's own code can remove while each run
/// gets a filter, a domain and a cgroup of its own.
#[cfg(target_os = "linux")]
mod floor {
    use std::path::Path;
    use std::process::Command;
    use std::time::Instant;

    use sandbox_seccomp::FilterSpec;

    pub(super) fn parts(n: usize, write_dir: &Path) -> Result<serde_json::Value, String> {
        let policy = super::launch_policy(write_dir)?;
        // The runner's spec for this policy (a broker, brokered connects).
        let spec = FilterSpec::new(&policy)
            .with_broker(true)
            .with_broker_connect(true);
        let filter = sandbox_seccomp::compile_spec(&spec).map_err(|e| e.to_string())?;
        let program = filter.libc_program();
        let one = [libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        }];
        let cgroup = own_cgroup();
        let mut out = serde_json::Map::new();
        out.insert("seccomp_instructions".into(), program.len().into());
        let bare: Vec<u64> = (0..n)
            .map(|_| {
                let t = Instant::now();
                let _ = Command::new("/bin/true").status();
                t.elapsed().as_nanos() as u64
            })
            .collect();
        out.insert("bare_true".into(), median(bare).into());
        out.insert(
            "seccomp_attach".into(),
            in_child(n, || attach(&program))?.into(),
        );
        out.insert(
            "seccomp_attach_one_instruction".into(),
            in_child(n, || attach(&one))?.into(),
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            out.insert(
                "capability_bounding_set".into(),
                in_child(n, drop_bounding_set)?.into(),
            );
        }
        if let Some(dir) = cgroup {
            let samples: Vec<u64> = (0..n)
                .map(|i| {
                    let path = dir.join(format!("sandbox-floor-{}-{i}", std::process::id()));
                    let t = Instant::now();
                    let made = std::fs::create_dir(&path).is_ok();
                    let _ = std::fs::remove_dir(&path);
                    let took = t.elapsed().as_nanos() as u64;
                    if made {
                        took
                    } else {
                        0
                    }
                })
                .filter(|&t| t > 0)
                .collect();
            if !samples.is_empty() {
                out.insert("cgroup_mkdir_rmdir".into(), median(samples).into());
            }
        }
        let threads: Vec<u64> = (0..n)
            .map(|_| {
                let t = Instant::now();
                let _ = std::thread::spawn(|| ()).join();
                t.elapsed().as_nanos() as u64
            })
            .collect();
        out.insert("thread_start_join".into(), median(threads).into());
        Ok(serde_json::Value::Object(out))
    }

    fn median(mut v: Vec<u64>) -> u64 {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }

    /// The median time of `step` in a forked child, N times (each in a fresh
    /// child: the parts cannot be undone). `step` returns its own time, or
    /// `None` when it failed.
    fn in_child(n: usize, step: impl Fn() -> Option<u64>) -> Result<u64, String> {
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let mut fds = [0; 2];
            // SAFETY: pipe fills two fds.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
                return Err(std::io::Error::last_os_error().to_string());
            }
            // SAFETY: the child only makes syscalls, writes to the pipe and exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let took = step().unwrap_or(u64::MAX);
                // SAFETY: a write from the stack, then _exit.
                unsafe {
                    libc::write(fds[1], (&took as *const u64).cast(), 8);
                    libc::_exit(0);
                }
            }
            let mut took = u64::MAX;
            // SAFETY: a read into the stack, a wait for our child, closing our fds.
            unsafe {
                libc::read(fds[0], (&mut took as *mut u64).cast(), 8);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            if took == u64::MAX {
                return Err("a part failed in its child".into());
            }
            samples.push(took);
        }
        Ok(median(samples))
    }

    /// The run's install (with a listener), timed alone.
    fn attach(program: &[libc::sock_filter]) -> Option<u64> {
        // SAFETY: prctl with integer arguments, in a child.
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
        let t = Instant::now();
        sandbox_seccomp::install_with_listener(program)
            .ok()
            .map(|_| t.elapsed().as_nanos() as u64)
    }

    fn drop_bounding_set() -> Option<u64> {
        let t = Instant::now();
        for cap in 0..64 {
            // SAFETY: prctl with integer arguments, in a child.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
                break;
            }
        }
        Some(t.elapsed().as_nanos() as u64)
    }

    /// This process's cgroup v2 directory, where it is mounted at the usual places.
    fn own_cgroup() -> Option<std::path::PathBuf> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
        ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(|m| Path::new(m).join(rel.trim_start_matches('/')))
            .find(|d| d.join("cgroup.procs").exists())
    }
}
