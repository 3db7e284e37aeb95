//! The floor of a per-session zygote (issue #45): what one command costs
//! when a process confined once (Landlock domain, seccomp filter,
//! capabilities dropped, non-dumpable, child subreaper, in a cgroup of its
//! own when root) forks each command after one `landlock_restrict_self`
//! with a ruleset that only scopes signals, receiving the command's stdio
//! by `SCM_RIGHTS` and answering its wait status once it has ended
//! everything the command left: `kill(-1, SIGKILL)` from the zygote reaches
//! exactly the processes in domains nested beneath its own (its commands and
//! their descendants; Landlock ABI 6 signal scoping refuses every other,
//! Documentation/userspace-api/landlock.rst, "Scoped access"), and the
//! zygote, a child subreaper, reaps until it has no child. The runner then
//! checks that the cgroup holds the zygote alone (root). Against a plain
//! `std::process::Command` spawn and wait, pairs interleaved, medians. A
//! measurement, not the session: no broker (the filter has no listener), no
//! timeouts, no output pipes.
//!
//! `cargo run --release -p sandbox-landlock --example zygote_floor [N]`
//! (as root, and under `setpriv --reuid=65534 --regid=65534 --clear-groups`,
//! where the cgroup check is skipped). First, a check: a command leaves
//! `sleep 1000` in the background, which is gone when the zygote answers,
//! while a `sleep 1000` of the same user outside the zygote lives on.

#[cfg(target_os = "linux")]
fn main() {
    if let Err(e) = linux::main() {
        eprintln!("zygote_floor: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("zygote_floor: Linux only");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::process::{Command, Stdio};
    use std::time::Instant;

    type Res<T> = Result<T, Box<dyn std::error::Error>>;

    fn scope_ruleset() -> Res<OwnedFd> {
        use landlock::{Ruleset, RulesetAttr, Scope};
        let created = Ruleset::default().scope(Scope::Signal)?.create()?;
        let fd: Option<OwnedFd> = created.into();
        fd.ok_or_else(|| "no ruleset fd".into())
    }

    /// Sends one byte (which command) and `fds`.
    fn send_fds(sock: RawFd, fds: &[RawFd; 3], which: u8) -> std::io::Result<()> {
        let mut byte = [which];
        let mut cbuf = [0u64; 8];
        // SAFETY: msghdr is plain data; every pointer set below points into
        // locals that outlive the call, and the control buffer holds one
        // SCM_RIGHTS message of three fds (CMSG_SPACE(12) <= 64 bytes).
        unsafe {
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(12) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(12) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), 3);
            if libc::sendmsg(sock, &msg, 0) != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Receives one byte and three fds; `false` at EOF or on error.
    ///
    /// # Safety
    /// Raw recvmsg into locals (used in the zygote, single-threaded).
    unsafe fn recv_fds(sock: RawFd, out: &mut [RawFd; 3], which: &mut u8) -> bool {
        let mut byte = [0u8];
        let mut cbuf = [0u64; 8];
        // SAFETY: as in send_fds; the kernel writes at most msg_controllen.
        unsafe {
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
            if libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) != 1 {
                return false;
            }
            let c = libc::CMSG_FIRSTHDR(&msg);
            if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
                return false;
            }
            std::ptr::copy_nonoverlapping(libc::CMSG_DATA(c).cast::<RawFd>(), out.as_mut_ptr(), 3);
        }
        *which = byte[0];
        true
    }

    /// The zygote: confined once, then one fork per request. Only raw
    /// syscalls on data prepared before the fork that made it.
    ///
    /// # Safety
    /// Called in a freshly forked child of a single-threaded process.
    unsafe fn zygote(
        sock: RawFd,
        procs: Option<&[u8]>,
        prepared: &sandbox_landlock::PreparedLandlock,
        layer: RawFd,
    ) -> ! {
        // SAFETY: raw syscalls on valid pointers; see the function's contract.
        unsafe {
            if let Some(procs) = procs {
                let fd = libc::open(procs.as_ptr().cast(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    libc::_exit(97);
                }
                libc::close(fd);
            }
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            if prepared.apply_in_child().is_err() {
                libc::_exit(99);
            }
            let path = c"/bin/true";
            let argv = [path.as_ptr(), std::ptr::null()];
            let (sh, dash_c, script) = (c"/bin/sh", c"-c", c"sleep 1000 & echo $!");
            let leaver = [
                sh.as_ptr(),
                dash_c.as_ptr(),
                script.as_ptr(),
                std::ptr::null(),
            ];
            let envp = [std::ptr::null::<libc::c_char>()];
            let mut fds = [0; 3];
            let mut which = 0u8;
            while recv_fds(sock, &mut fds, &mut which) {
                let pid = libc::fork();
                if pid == 0 {
                    for (to, from) in fds.iter().enumerate() {
                        libc::dup2(*from, to as RawFd);
                    }
                    if libc::syscall(libc::SYS_landlock_restrict_self, layer, 0) != 0 {
                        libc::_exit(98);
                    }
                    if which == 2 {
                        libc::execve(sh.as_ptr(), leaver.as_ptr(), envp.as_ptr());
                    } else {
                        libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    }
                    libc::_exit(127);
                }
                for fd in fds {
                    libc::close(fd);
                }
                let mut status = -1;
                libc::waitpid(pid, &mut status, 0);
                // Everything the command left, atomically against fork
                // (a fork racing with the SIGKILL fails), then reaped.
                libc::kill(-1, libc::SIGKILL);
                let mut other = 0;
                while libc::waitpid(-1, &mut other, 0) > 0 {}
                libc::send(sock, (&status as *const i32).cast(), 4, 0);
            }
            libc::_exit(0)
        }
    }

    /// Whether `pid` is a live `sleep 1000` (a zombie or another program
    /// on a reused pid is not).
    fn live_sleep(pid: i32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        !state.is_empty() && !state.starts_with('Z') && cmdline.starts_with(b"sleep\x001000")
    }

    /// A command's background child is gone when the zygote answers; a
    /// process of the same user outside the zygote is not touched.
    fn check(sock: RawFd, null: RawFd) -> Res<()> {
        let mut outside = Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        let outside_pid = outside.id() as i32;
        let mut ends = [0; 2];
        // SAFETY: pipe2 writes two fds into `ends`.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: both fds were just made and are owned here only.
        let (mut read, write) = unsafe {
            (
                std::fs::File::from_raw_fd(ends[0]),
                OwnedFd::from_raw_fd(ends[1]),
            )
        };
        send_fds(sock, &[null, write.as_raw_fd(), null], 2)?;
        drop(write);
        let mut status = -1i32;
        // SAFETY: reads 4 bytes into `status`.
        let got = unsafe { libc::recv(sock, (&mut status as *mut i32).cast(), 4, 0) };
        let mut printed = String::new();
        read.read_to_string(&mut printed)?;
        let left: i32 = printed.trim().parse()?;
        let outside_lives = live_sleep(outside_pid);
        let left_lives = live_sleep(left);
        let _ = outside.kill();
        let _ = outside.wait();
        if got != 4 || status != 0 || left_lives || !outside_lives {
            return Err(format!(
                "check failed: status {status}, the command's sleep {left} alive: {left_lives}, the outside sleep alive: {outside_lives}"
            )
            .into());
        }
        println!("check: the command's background sleep ({left}) is gone, the same user's sleep outside ({outside_pid}) lives");
        Ok(())
    }

    pub(super) fn main() -> Res<()> {
        let n: usize = std::env::args()
            .nth(1)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(400)
            .max(1);
        // SAFETY: plain getter.
        let root = unsafe { libc::geteuid() } == 0;
        let policy = sandbox_core::SandboxPolicy::default()
            .resolve(&sandbox_core::ExpandContext::default())?;
        let prepared = sandbox_landlock::prepare(&policy)?;
        let layer = scope_ruleset()?;
        let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .find(|p| std::path::Path::new(p).join("cgroup.procs").exists())
            .ok_or("no cgroup v2 mount")?;
        let cgroup = format!("{unified}/zygote-floor-{}", std::process::id());
        if root {
            std::fs::create_dir(&cgroup)?;
        }
        let procs = format!("{cgroup}/cgroup.procs\0");
        let mut pair = [0; 2];
        // SAFETY: socketpair writes two fds into `pair`.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        } != 0
        {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: both fds were just made and are owned here only.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        // SAFETY: no thread has been started yet; the child only makes raw
        // syscalls (zygote's contract).
        let zygote_pid = unsafe { libc::fork() };
        if zygote_pid == 0 {
            // SAFETY: in the fresh child.
            unsafe {
                libc::close(ours.as_raw_fd());
                zygote(
                    theirs.as_raw_fd(),
                    root.then_some(procs.as_bytes()),
                    &prepared,
                    layer.as_raw_fd(),
                )
            }
        }
        drop(theirs);
        let null = std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        let stdio = [null.as_raw_fd(); 3];
        check(ours.as_raw_fd(), null.as_raw_fd())?;
        let (mut plain, mut zygoted) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut listed = String::new();
        for _ in 0..n {
            let t = Instant::now();
            let ok = Command::new("/bin/true")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?
                .success();
            plain.push(t.elapsed());
            if !ok {
                return Err("plain /bin/true failed".into());
            }
            let t = Instant::now();
            send_fds(ours.as_raw_fd(), &stdio, 1)?;
            let mut status = -1i32;
            // SAFETY: reads 4 bytes into `status`.
            let got =
                unsafe { libc::recv(ours.as_raw_fd(), (&mut status as *mut i32).cast(), 4, 0) };
            if root {
                listed.clear();
                std::fs::File::open(&procs[..procs.len() - 1])?.read_to_string(&mut listed)?;
            }
            zygoted.push(t.elapsed());
            if got != 4 || status != 0 {
                return Err(format!("the zygote's /bin/true failed: {got} {status}").into());
            }
            if root && listed.trim() != zygote_pid.to_string() {
                return Err(format!("the zygote's cgroup holds more: {listed}").into());
            }
        }
        drop(ours);
        let mut status = 0;
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(zygote_pid, &mut status, 0) };
        if root {
            std::fs::remove_dir(&cgroup)?;
        }
        plain.sort();
        zygoted.sort();
        let (p, z) = (
            plain[n / 2].as_secs_f64() * 1e3,
            zygoted[n / 2].as_secs_f64() * 1e3,
        );
        // SAFETY: plain getter.
        let uid = unsafe { libc::geteuid() };
        println!(
            "uid {uid}: plain Command {p:.3} ms, zygote {z:.3} ms (median of {n} pairs): {:.2}x",
            z / p
        );
        Ok(())
    }
}
