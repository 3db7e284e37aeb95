//! Measures what the filter costs: building it in the parent, attaching it
//! in a child, per-call overhead under it, and an end-to-end spawn of
//! `/bin/true`. Run with `cargo run --release -p sandbox-seccomp --example perf`.
//!
//! Every figure is a median over interleaved rounds (none / allow-all /
//! real filter in turn), so machine drift hits all variants alike.

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn main() {
    linux::main();
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn main() {
    eprintln!("perf: linux on x86_64 or aarch64 only");
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod linux {
    use std::os::unix::process::CommandExt;
    use std::time::Instant;

    use sandbox_seccomp::{bpf, compile_spec, table, BpfInstruction, FilterSpec};

    const ROUNDS: usize = 200;

    /// The strictest spec: most argument-checked rows.
    const STRICT: FilterSpec = FilterSpec {
        network: false,
        deny_subprocess: true,
        broker: true,
        read_deny: false,
        hold_group: false,
        broker_entries: false,
        broker_connect: false,
        egress: false,
        broker_reads: false,
        child_layer: None,
    };

    fn now_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn apply_raw(prog: &[BpfInstruction]) -> i32 {
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: fprog points at prog, which outlives the call.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            ) as i32
        }
    }

    #[derive(Clone, Copy)]
    enum Work {
        /// Report the time `seccomp(SET_MODE_FILTER)` took.
        Attach,
        /// Report ns per call of `n` syscalls of this kind after attaching.
        Getppid(u32),
        Openat(u32),
        Ioctl(u32),
    }

    /// Forks; the child attaches `prog` (if any), does `work` and writes one
    /// u64 of nanoseconds to a pipe. Only raw syscalls after fork.
    fn in_child(prog: Option<&[BpfInstruction]>, work: Work) -> u64 {
        let mut fds = [0; 2];
        // SAFETY: plain syscalls; the child only makes async-signal-safe calls.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                let t0 = now_ns();
                if let Some(p) = prog {
                    if apply_raw(p) != 0 {
                        libc::_exit(2);
                    }
                }
                let attach = now_ns() - t0;
                let path = c"/dev/null".as_ptr();
                let ns: u64 = match work {
                    Work::Attach => attach,
                    Work::Getppid(n) => {
                        let t = now_ns();
                        for _ in 0..n {
                            libc::syscall(libc::SYS_getppid);
                        }
                        (now_ns() - t) / u64::from(n)
                    }
                    Work::Openat(n) => {
                        let t = now_ns();
                        for _ in 0..n {
                            let fd = libc::syscall(
                                libc::SYS_openat,
                                libc::AT_FDCWD,
                                path,
                                libc::O_RDONLY | libc::O_CLOEXEC,
                            );
                            libc::syscall(libc::SYS_close, fd);
                        }
                        (now_ns() - t) / u64::from(n)
                    }
                    Work::Ioctl(n) => {
                        let fd = libc::open(path, libc::O_RDONLY);
                        let mut v: libc::c_int = 0;
                        let t = now_ns();
                        for _ in 0..n {
                            libc::syscall(libc::SYS_ioctl, fd, libc::FIONREAD, &mut v);
                        }
                        (now_ns() - t) / u64::from(n)
                    }
                };
                let b = ns.to_ne_bytes();
                libc::write(fds[1], b.as_ptr().cast(), 8);
                libc::_exit(0);
            }
            libc::close(fds[1]);
            let mut b = [0u8; 8];
            let got = libc::read(fds[0], b.as_mut_ptr().cast(), 8);
            libc::close(fds[0]);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            assert_eq!(got, 8, "child failed (status {status:#x})");
            u64::from_ne_bytes(b)
        }
    }

    fn spawn_true(prog: Option<&'static [BpfInstruction]>) -> u64 {
        let mut cmd = std::process::Command::new("/bin/true");
        if let Some(p) = prog {
            // SAFETY: the hook only makes raw syscalls.
            unsafe {
                cmd.pre_exec(move || {
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                    if apply_raw(p) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let t = now_ns();
        let st = cmd.status().expect("spawn /bin/true");
        assert!(st.success());
        now_ns() - t
    }

    fn median(mut v: Vec<u64>) -> (u64, u64, u64) {
        v.sort_unstable();
        (v[v.len() / 2], v[0], v[v.len() - 1])
    }

    fn report(what: &str, cols: &[(&str, Vec<u64>)], unit: &str, div: f64) {
        print!("{what:<28}");
        for (name, v) in cols {
            let (m, _, _) = median(v.clone());
            print!("  {name}: {:>9.2} {unit}", m as f64 / div);
        }
        println!();
    }

    /// Runs `f(variant)` for every variant in turn, `rounds` times.
    fn interleaved<const N: usize>(
        rounds: usize,
        mut f: impl FnMut(usize) -> u64,
    ) -> [Vec<u64>; N] {
        let mut out: [Vec<u64>; N] = std::array::from_fn(|_| Vec::with_capacity(rounds));
        for _ in 0..rounds {
            for (i, v) in out.iter_mut().enumerate() {
                v.push(f(i));
            }
        }
        out
    }

    pub fn main() {
        let rows = table(&STRICT);
        let t = Instant::now();
        let first = compile_spec(&STRICT).expect("compiles");
        let first_ns = t.elapsed().as_nanos() as u64;
        let real: &'static [BpfInstruction] = first.instructions().to_vec().leak();
        let allow_all: &'static [BpfInstruction] = vec![BpfInstruction {
            code: bpf::RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        }]
        .leak();
        println!("instructions: {} (strict spec)", real.len());
        for spec in FilterSpec::all() {
            print!("{} ", compile_spec(&spec).map(|f| f.len()).unwrap_or(0));
        }
        println!("(all eight specs)");

        let build: Vec<u64> = (0..ROUNDS)
            .map(|_| {
                let t = Instant::now();
                let p = bpf::assemble(&table(&STRICT)).expect("assembles");
                std::hint::black_box(p);
                t.elapsed().as_nanos() as u64
            })
            .collect();
        let api: Vec<u64> = (0..ROUNDS)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(compile_spec(&STRICT).expect("compiles"));
                t.elapsed().as_nanos() as u64
            })
            .collect();
        println!(
            "compile_spec, first call in process: {:.1} us",
            first_ns as f64 / 1e3
        );
        report(
            "table + assemble (uncached)",
            &[("median", build)],
            "us",
            1e3,
        );
        report("compile_spec (repeat)", &[("median", api)], "us", 1e3);
        drop(rows);

        let variants: [Option<&[BpfInstruction]>; 3] = [None, Some(allow_all), Some(real)];
        let names = ["none", "allow-all", "real"];
        let cols =
            |v: [Vec<u64>; 3]| -> Vec<(&str, Vec<u64>)> { names.iter().copied().zip(v).collect() };
        let attach = interleaved::<3>(ROUNDS, |i| in_child(variants[i], Work::Attach));
        report("attach (seccomp syscall)", &cols(attach), "us", 1e3);
        let g = interleaved::<3>(15, |i| in_child(variants[i], Work::Getppid(200_000)));
        report("getppid (cacheable)", &cols(g), "ns", 1.0);
        let o = interleaved::<3>(15, |i| in_child(variants[i], Work::Openat(50_000)));
        report("openat+close (cacheable)", &cols(o), "ns", 1.0);
        let io = interleaved::<3>(15, |i| in_child(variants[i], Work::Ioctl(200_000)));
        report("ioctl (argument-checked)", &cols(io), "ns", 1.0);
        let spawn_variants: [Option<&'static [BpfInstruction]>; 3] =
            [None, Some(allow_all), Some(real)];
        let s = interleaved::<3>(ROUNDS, |i| spawn_true(spawn_variants[i]));
        report("spawn /bin/true (+filter)", &cols(s), "us", 1e3);
    }
}
