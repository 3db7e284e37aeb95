//! Entry calls one syscall at a time: the broker answers as the kernel would
//! (errno for errno), hands back fds with the caller's flags, applies the
//! caller's umask and credentials, and refuses what lies beneath a deny path.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::*;
use sandbox_broker::{BrokerDecision, BrokerLog, BrokerRules, Refusal};

const DENY: &[&str] = &[".git/hooks", ".git/config", ".bashrc"];

/// One call in the child: 0 on success (an fd is closed), else errno.
struct Case<'a> {
    name: &'static str,
    want: i32,
    call: Box<dyn Fn() -> i32 + 'a>,
}

fn case<'a>(name: &'static str, want: i32, call: impl Fn() -> i32 + 'a) -> Case<'a> {
    Case {
        name,
        want,
        call: Box::new(call),
    }
}

/// 0 for a non-negative return (an fd is closed), else errno.
fn fd_result(fd: libc::c_int) -> i32 {
    if fd < 0 {
        return errno();
    }
    // SAFETY: closing the fd the call returned.
    unsafe { libc::close(fd) };
    0
}

fn open(path: &CString, flags: i32, mode: u32) -> i32 {
    // SAFETY (child): one syscall with a live path.
    fd_result(unsafe { libc::open(path.as_ptr(), flags, mode) })
}

/// Runs `setup` then every case in order in one confined child; panics naming
/// the first case whose answer differs.
fn check(rules: BrokerRules, setup: impl Fn() -> i32, cases: &[Case<'_>]) -> BrokerLog {
    let (r, w) = pipe();
    let wfd = w.as_raw_fd();
    let run = confined_entries(rules, || {
        if setup() != 0 {
            return 2;
        }
        for (i, c) in cases.iter().enumerate() {
            let got = (c.call)();
            if got != c.want {
                let report = [i as i32, got];
                // SAFETY (child): write 8 bytes from a live buffer.
                unsafe { libc::write(wfd, report.as_ptr().cast(), 8) };
                return 1;
            }
        }
        0
    });
    drop(w);
    if run.code == 1 {
        let mut report = [0i32; 2];
        // SAFETY: read into a live 8-byte buffer.
        unsafe { libc::read(r.as_raw_fd(), report.as_mut_ptr().cast(), 8) };
        let c = &cases[report[0] as usize];
        panic!(
            "{}: want {} got {}\n{}",
            c.name,
            c.want,
            report[1],
            run.log.explain(30)
        );
    }
    assert_eq!(run.code, 0, "setup failed\n{}", run.log.explain(10));
    run.log
}

struct Tree {
    fx: Fixture,
}

impl Tree {
    /// W: d/ (empty), sub/ (not empty), f ("x"), link -> f, dangling -> missing,
    /// .git/config, .git/hooks/; O: f.
    fn new() -> Self {
        let fx = Fixture::new();
        let w = &fx.w;
        std::fs::create_dir(w.join("d")).unwrap();
        std::fs::create_dir(w.join("sub")).unwrap();
        std::fs::write(w.join("sub/in"), "").unwrap();
        std::fs::write(w.join("f"), "x").unwrap();
        std::os::unix::fs::symlink("f", w.join("link")).unwrap();
        std::os::unix::fs::symlink("missing", w.join("dangling")).unwrap();
        std::fs::create_dir_all(w.join(".git/hooks")).unwrap();
        std::fs::write(w.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(fx.o.join("f"), "o").unwrap();
        Self { fx }
    }
    fn w(&self, rel: &str) -> CString {
        cstr(&self.fx.w.join(rel))
    }
    fn o(&self, rel: &str) -> CString {
        cstr(&self.fx.o.join(rel))
    }
    fn rules(&self) -> BrokerRules {
        self.fx.rules(DENY)
    }
}

#[test]
fn opens_answer_as_the_kernel() {
    let t = Tree::new();
    let (new, f, link, d, dangling) =
        (t.w("new"), t.w("f"), t.w("link"), t.w("d"), t.w("dangling"));
    let (slash, f_slash, deep) = (t.w("x/"), t.w("f/"), t.w("missing/x"));
    let (suid, sgid, new2) = (t.w("suid"), t.w("sgid"), t.w("new2"));
    let (of, onew, empty) = (t.o("f"), t.o("new"), CString::default());
    let wr = libc::O_WRONLY;
    let cases = [
        case("create excl", 0, || {
            open(&new, wr | libc::O_CREAT | libc::O_EXCL, 0o644)
        }),
        case("create excl again", libc::EEXIST, || {
            open(&new, wr | libc::O_CREAT | libc::O_EXCL, 0o644)
        }),
        case("excl on a symlink", libc::EEXIST, || {
            open(&link, wr | libc::O_CREAT | libc::O_EXCL, 0o644)
        }),
        case("nofollow on a symlink", libc::ELOOP, || {
            open(&link, wr | libc::O_NOFOLLOW, 0)
        }),
        case("directory for writing", libc::EISDIR, || open(&d, wr, 0)),
        case("O_CREAT on a directory", libc::EISDIR, || {
            open(&d, libc::O_RDONLY | libc::O_CREAT, 0o644)
        }),
        case("O_CREAT with a trailing slash", libc::EISDIR, || {
            open(&slash, wr | libc::O_CREAT, 0o644)
        }),
        case("a file with a trailing slash", libc::ENOTDIR, || {
            open(&f_slash, wr, 0)
        }),
        case("missing directory", libc::ENOENT, || {
            open(&deep, wr | libc::O_CREAT, 0o644)
        }),
        case("O_DIRECTORY on a file", libc::ENOTDIR, || {
            open(&f, libc::O_RDWR | libc::O_DIRECTORY, 0)
        }),
        case("O_CREAT | O_DIRECTORY", libc::EINVAL, || {
            open(&new2, libc::O_CREAT | libc::O_DIRECTORY, 0o644)
        }),
        case("empty path", libc::ENOENT, || open(&empty, wr, 0)),
        case("access mode 3", libc::EPERM, || {
            open(&f, 3 /* O_ACCMODE: the kernel's, not musl's */, 0)
        }),
        case("O_RDONLY | O_TRUNC", libc::EPERM, || {
            open(&f, libc::O_RDONLY | libc::O_TRUNC, 0)
        }),
        case("set-user-ID mode", libc::EPERM, || {
            open(&suid, wr | libc::O_CREAT, 0o4755)
        }),
        case("set-group-ID mode", libc::EPERM, || {
            open(&sgid, wr | libc::O_CREAT, 0o2755)
        }),
        // The kernel creates the link's target (inside the write path).
        case("through a dangling symlink", 0, || {
            open(&dangling, wr | libc::O_CREAT, 0o644)
        }),
        case("read an existing file outside, with O_CREAT", 0, || {
            open(&of, libc::O_RDONLY | libc::O_CREAT, 0o644)
        }),
        case("create outside", libc::EACCES, || {
            open(&onew, libc::O_RDONLY | libc::O_CREAT, 0o644)
        }),
        case("write outside", libc::EACCES, || {
            open(&of, libc::O_WRONLY, 0)
        }),
        case("O_PATH with write bits", libc::EPERM, || {
            open(&f, libc::O_PATH | libc::O_WRONLY | libc::O_TRUNC, 0)
        }),
        case("read-write through a symlink", 0, || {
            open(&link, libc::O_RDWR, 0)
        }),
    ];
    check(t.rules(), nothing, &cases);
    assert!(!t.fx.w.join("suid").exists() && !t.fx.w.join("sgid").exists());
    assert!(!t.fx.o.join("new").exists());
    assert!(
        t.fx.w.join("missing").is_file(),
        "the dangling link's target was created"
    );
    assert_eq!(
        std::fs::read(t.fx.w.join("f")).unwrap(),
        b"x",
        "O_RDONLY|O_TRUNC truncated"
    );
    assert_eq!(std::fs::read(t.fx.o.join("f")).unwrap(), b"o");
    // Twin of the O_RDONLY | O_TRUNC refusal: with write access it truncates.
    check(
        t.rules(),
        nothing,
        &[case("O_WRONLY | O_TRUNC", 0, || {
            open(&f, libc::O_WRONLY | libc::O_TRUNC, 0)
        })],
    );
    assert_eq!(std::fs::read(t.fx.w.join("f")).unwrap(), b"");
}

fn mkdir(path: &CString, mode: u32) -> i32 {
    // SAFETY (child): one syscall with a live path.
    result(unsafe { libc::mkdir(path.as_ptr(), mode) })
}

fn unlinkat(path: &CString, flags: i32) -> i32 {
    // SAFETY (child): one syscall with a live path.
    result(unsafe { libc::unlinkat(libc::AT_FDCWD, path.as_ptr(), flags) })
}

fn renameat2(a: &CString, b: &CString, flags: u32) -> i32 {
    // SAFETY (child): one syscall with live paths.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    result(rc as i32)
}

fn linkat(a: &CString, b: &CString, flags: i32) -> i32 {
    // SAFETY (child): one syscall with live paths.
    result(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })
}

fn symlink(target: &CString, path: &CString) -> i32 {
    // SAFETY (child): one syscall with live paths.
    result(unsafe { libc::symlink(target.as_ptr(), path.as_ptr()) })
}

fn mknod(path: &CString, mode: u32, dev: libc::dev_t) -> i32 {
    // SAFETY (child): one syscall with a live path.
    result(unsafe { libc::mknod(path.as_ptr(), mode, dev) })
}

#[test]
fn entry_calls_answer_as_the_kernel() {
    let t = Tree::new();
    let (d, sub, f, link, missing) = (t.w("d"), t.w("sub"), t.w("f"), t.w("link"), t.w("missing"));
    let (dot, dotdot, nd, root) = (t.w("d/."), t.w("d/.."), t.w("nd/"), cstr(Path::new("/")));
    let (f_slash, d_slash, fifo, reg_suid, dir_node) =
        (t.w("f/"), t.w("d/"), t.w("fifo"), t.w("suid"), t.w("dnode"));
    let (f2, f3, empty, s, s_slash, tee) = (
        t.w("f2"),
        t.w("f3"),
        CString::default(),
        t.w("s"),
        t.w("s/"),
        c"t".to_owned(),
    );
    let cases = [
        case("mkdir existing", libc::EEXIST, || mkdir(&d, 0o755)),
        case("mkdir .", libc::EEXIST, || mkdir(&dot, 0o755)),
        case("mkdir /", libc::EEXIST, || mkdir(&root, 0o755)),
        case("mkdir with a trailing slash", 0, || mkdir(&nd, 0o755)),
        case("mkdir empty", libc::ENOENT, || mkdir(&empty, 0o755)),
        case("mknod fifo", 0, || mknod(&fifo, libc::S_IFIFO | 0o644, 0)),
        case("mknod set-user-ID", libc::EPERM, || {
            mknod(&reg_suid, libc::S_IFREG | 0o4755, 0)
        }),
        case("mknod S_IFDIR", libc::EPERM, || {
            mknod(&dir_node, libc::S_IFDIR | 0o755, 0)
        }),
        case("unlink missing", libc::ENOENT, || unlinkat(&missing, 0)),
        case("unlink a directory", libc::EISDIR, || unlinkat(&d, 0)),
        case("unlink a file with a slash", libc::ENOTDIR, || {
            unlinkat(&f_slash, 0)
        }),
        case("unlink .", libc::EISDIR, || unlinkat(&dot, 0)),
        case("rmdir not empty", libc::ENOTEMPTY, || {
            unlinkat(&sub, libc::AT_REMOVEDIR)
        }),
        case("rmdir .", libc::EINVAL, || {
            unlinkat(&dot, libc::AT_REMOVEDIR)
        }),
        case("rmdir ..", libc::ENOTEMPTY, || {
            unlinkat(&dotdot, libc::AT_REMOVEDIR)
        }),
        case("rmdir /", libc::EBUSY, || {
            unlinkat(&root, libc::AT_REMOVEDIR)
        }),
        case("unlinkat unknown flag", libc::EINVAL, || {
            unlinkat(&f, 0x100)
        }),
        case("rename missing", libc::ENOENT, || {
            renameat2(&missing, &f2, 0)
        }),
        case("rename noreplace", libc::EEXIST, || {
            renameat2(&f, &link, libc::RENAME_NOREPLACE)
        }),
        case("renameat2 unknown flag", libc::EINVAL, || {
            renameat2(&f, &f2, 8)
        }),
        case("exchange | noreplace", libc::EINVAL, || {
            renameat2(&f, &f2, libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE)
        }),
        case("rename .", libc::EBUSY, || renameat2(&dot, &f2, 0)),
        case("rename onto . with noreplace", libc::EEXIST, || {
            renameat2(&f, &dot, libc::RENAME_NOREPLACE)
        }),
        case("rename a file to a slash", libc::ENOTDIR, || {
            renameat2(&f, &d_slash, 0)
        }),
        case("link existing", libc::EEXIST, || linkat(&f, &link, 0)),
        case("linkat unknown flag", libc::EINVAL, || linkat(&f, &f3, 0x1)),
        case("link a directory", libc::EPERM, || linkat(&d, &f3, 0)),
        case("link missing", libc::ENOENT, || linkat(&missing, &f3, 0)),
        case("symlink empty target", libc::ENOENT, || symlink(&empty, &s)),
        case("symlink existing", libc::EEXIST, || symlink(&tee, &f)),
        case("symlink with a slash", libc::ENOENT, || {
            symlink(&tee, &s_slash)
        }),
        case("rmdir empty", 0, || unlinkat(&d, libc::AT_REMOVEDIR)),
        case("link follows the symlink", 0, || {
            linkat(&link, &f3, libc::AT_SYMLINK_FOLLOW)
        }),
        case("link the symlink itself", 0, || linkat(&link, &s, 0)),
        case("rename", 0, || renameat2(&f, &f2, 0)),
    ];
    let log = check(t.rules(), nothing, &cases);
    let w = &t.fx.w;
    assert!(w.join("nd").is_dir() && !w.join("d").exists() && w.join("f2").exists());
    assert!(!w.join("suid").exists() && !w.join("dnode").exists());
    let ino = |p: &str| std::fs::symlink_metadata(w.join(p)).unwrap().ino();
    assert_eq!(ino("f3"), ino("f2"), "AT_SYMLINK_FOLLOW links the target");
    assert_eq!(ino("s"), ino("link"), "without it, the symlink itself");
    let fifo_mode = std::fs::symlink_metadata(w.join("fifo")).unwrap().mode();
    assert_eq!(fifo_mode & libc::S_IFMT, libc::S_IFIFO);
    assert!(log.refusals().all(|r| matches!(
        r.decision,
        BrokerDecision::Refused {
            reason: Refusal::SetIdBits
        }
    )));
}

/// What the child sees of an fd the broker handed back: flags and descriptor flags.
fn fd_flags(path: &CString, flags: i32, want_fl: i32, want_cloexec: bool) -> i32 {
    // SAFETY (child): open, fcntl, close.
    unsafe {
        let fd = libc::open(path.as_ptr(), flags, 0o644);
        if fd < 0 {
            return errno();
        }
        let fl = libc::fcntl(fd, libc::F_GETFL);
        let cloexec = libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0;
        libc::close(fd);
        let keep = libc::O_APPEND | libc::O_NONBLOCK | 3 /* O_ACCMODE: the kernel's, not musl's */;
        if fl & keep != want_fl || cloexec != want_cloexec {
            return 200;
        }
    }
    0
}

#[test]
fn the_fd_handed_back_carries_the_callers_flags() {
    let t = Tree::new();
    let (a, b, c) = (t.w("a"), t.w("b"), t.w("c"));
    // Two FIFOs: the broker closes its copy of a handed-back fd just after
    // the caller has it, so a reader end from one case could still be open
    // when the next opens the same FIFO for writing.
    let (fifo, lonely) = (t.w("fifo"), t.w("lonely-fifo"));
    for f in [&fifo, &lonely] {
        // SAFETY: mkfifo with a live path (the test process itself, unbrokered).
        assert_eq!(unsafe { libc::mkfifo(f.as_ptr(), 0o644) }, 0);
    }
    let (wr, cr) = (libc::O_WRONLY, libc::O_CREAT);
    let cases = [
        case("plain", 0, || fd_flags(&a, wr | cr, wr, false)),
        case("cloexec", 0, || {
            fd_flags(&b, wr | cr | libc::O_CLOEXEC, wr, true)
        }),
        case("append", 0, || {
            fd_flags(
                &a,
                libc::O_RDWR | libc::O_APPEND,
                libc::O_RDWR | libc::O_APPEND,
                false,
            )
        }),
        case("nonblock asked", 0, || {
            fd_flags(&c, wr | cr | libc::O_NONBLOCK, wr | libc::O_NONBLOCK, false)
        }),
        // The broker never waits for a FIFO's reader: O_RDWR opens at once.
        case("fifo read-write", 0, || {
            fd_flags(&fifo, libc::O_RDWR, libc::O_RDWR, false)
        }),
        // Write-only without a reader: waits for one, as the kernel's open
        // (a process that opens the reading end 200 ms later), and hands back
        // a blocking fd.
        case("fifo waits for its reader", 0, || {
            // SAFETY (child): fork; the grandchild sleeps, opens, exits.
            unsafe {
                let pid = libc::fork();
                if pid == 0 {
                    libc::usleep(200_000);
                    libc::open(lonely.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK);
                    // A reader that stays a while, as `cat` does until EOF:
                    // the broker looks for one every few milliseconds.
                    libc::usleep(500_000);
                    libc::_exit(0);
                }
                let got = fd_flags(&lonely, wr, wr, false);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
                got
            }
        }),
        // Without a reader and with O_NONBLOCK: ENXIO at once (fifo(7)).
        case("fifo without a reader, non-blocking", libc::ENXIO, || {
            fd_flags(&lonely, wr | libc::O_NONBLOCK, wr | libc::O_NONBLOCK, false)
        }),
    ];
    check(t.rules(), nothing, &cases);
}

#[test]
fn the_callers_umask_applies_and_a_full_fd_table_is_emfile() {
    let t = Tree::new();
    let (file, dir) = (t.w("um-file"), t.w("um-dir"));
    let setup = || {
        // SAFETY (child): umask cannot fail.
        unsafe { libc::umask(0o077) };
        0
    };
    check(
        t.rules(),
        setup,
        &[
            case("file", 0, || {
                open(&file, libc::O_WRONLY | libc::O_CREAT, 0o666)
            }),
            case("dir", 0, || mkdir(&dir, 0o777)),
        ],
    );
    assert_eq!(mode(&t.fx.w.join("um-file")), 0o600);
    assert_eq!(mode(&t.fx.w.join("um-dir")), 0o700);
    // Twin: umask 022.
    let (file2, full) = (t.w("um-file2"), t.w("full"));
    let setup = || {
        // SAFETY (child): umask cannot fail.
        unsafe { libc::umask(0o022) };
        0
    };
    check(
        t.rules(),
        setup,
        &[case("file", 0, || {
            open(&file2, libc::O_WRONLY | libc::O_CREAT, 0o666)
        })],
    );
    assert_eq!(mode(&t.fx.w.join("um-file2")), 0o644);
    // No fd free in the caller: ADDFD fails and the call gets EMFILE.
    let limit = || {
        let lim = libc::rlimit {
            rlim_cur: 3,
            rlim_max: 1024,
        };
        // SAFETY (child): close fds above 2, then lower the own limit.
        unsafe {
            for fd in 3..64 {
                libc::close(fd);
            }
            result(libc::setrlimit(libc::RLIMIT_NOFILE, &lim))
        }
    };
    check(
        t.rules(),
        limit,
        &[case("emfile", libc::EMFILE, || {
            open(&full, libc::O_WRONLY | libc::O_CREAT, 0o644)
        })],
    );
}

#[test]
fn tmpfile_and_linking_an_fd_in() {
    let t = Tree::new();
    let (d, hooks, o, named, named2, flinked) = (
        t.w("d"),
        t.w(".git/hooks"),
        t.o(""),
        t.w("named"),
        t.w("named2"),
        t.w("flinked"),
    );
    let (fdlinked, cfg, f) = (t.w("fdlinked"), t.w(".git/config"), t.w("f"));
    let tmp = libc::O_TMPFILE | libc::O_RDWR;
    // O_TMPFILE, write, then give it a name by the /proc and the AT_EMPTY_PATH forms.
    let publish = |at: &CString, empty_path: bool| {
        // SAFETY (child): plain syscalls with live buffers.
        unsafe {
            let fd = libc::open(d.as_ptr(), tmp, 0o644);
            if fd < 0 {
                return errno();
            }
            if libc::write(fd, b"tmp".as_ptr().cast(), 3) != 3 {
                return 201;
            }
            let mut proc_path = *b"/proc/self/fd/\0\0\0\0";
            proc_path[14] = b'0' + (fd / 10) as u8;
            proc_path[15] = b'0' + (fd % 10) as u8;
            let rc = if empty_path {
                libc::linkat(
                    fd,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    at.as_ptr(),
                    libc::AT_EMPTY_PATH,
                )
            } else {
                libc::linkat(
                    libc::AT_FDCWD,
                    proc_path.as_ptr().cast(),
                    libc::AT_FDCWD,
                    at.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            };
            let e = result(rc);
            libc::close(fd);
            e
        }
    };
    // A read-only fd on a denied file: AT_EMPTY_PATH does not make it linkable.
    let link_fd = |src: &CString, at: &CString| {
        // SAFETY (child): plain syscalls with live buffers.
        unsafe {
            let fd = libc::open(src.as_ptr(), libc::O_RDONLY);
            if fd < 0 {
                return errno();
            }
            let e = result(libc::linkat(
                fd,
                c"".as_ptr(),
                libc::AT_FDCWD,
                at.as_ptr(),
                libc::AT_EMPTY_PATH,
            ));
            libc::close(fd);
            e
        }
    };
    let cases = [
        case("tmpfile in W", 0, || open(&d, tmp, 0o600)),
        case("tmpfile in a denied directory", libc::EACCES, || {
            open(&hooks, tmp, 0o600)
        }),
        case("tmpfile outside", libc::EACCES, || open(&o, tmp, 0o600)),
        case("tmpfile read-only", libc::EINVAL, || {
            open(&d, libc::O_TMPFILE | libc::O_RDONLY, 0o600)
        }),
        case("tmpfile set-user-ID", libc::EPERM, || open(&d, tmp, 0o4755)),
        case("link a tmpfile via /proc/self/fd", 0, || {
            publish(&named, false)
        }),
        case("link a tmpfile via AT_EMPTY_PATH", 0, || {
            publish(&named2, true)
        }),
        case("link a read-only fd of a denied file", libc::EACCES, || {
            link_fd(&cfg, &flinked)
        }),
        case("link a read-only fd of a file in W", 0, || {
            link_fd(&f, &fdlinked)
        }),
    ];
    check(t.rules(), nothing, &cases);
    assert_eq!(std::fs::read(t.fx.w.join("named")).unwrap(), b"tmp");
    assert_eq!(std::fs::read(t.fx.w.join("named2")).unwrap(), b"tmp");
    assert!(!t.fx.w.join("flinked").exists());
    assert!(t.fx.w.join("fdlinked").exists());
    assert_eq!(
        std::fs::read_dir(t.fx.w.join(".git/hooks"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn the_callers_own_fds_through_proc() {
    let t = Tree::new();
    // Inherited by the child: a writable fd outside W, read-only ones outside and inside.
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(t.fx.o.join("log"))
        .unwrap();
    let ro_out = std::fs::File::open(t.fx.o.join("f")).unwrap();
    // Writable, but on procfs, which checks the opener's credentials: a
    // reopen by the broker would act with the broker thread's euid.
    let comm = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/thread-self/comm")
        .unwrap();
    let ro_in = std::fs::File::open(t.fx.w.join("f")).unwrap();
    let path = |fd: &std::fs::File, prefix: &str| {
        CString::new(format!("{prefix}{}", fd.as_raw_fd())).unwrap()
    };
    // The harness opened them close-on-exec; the child does not exec.
    let (log_self, log_thread, log_dev) = (
        path(&log, "/proc/self/fd/"),
        path(&log, "/proc/thread-self/fd/"),
        path(&log, "/dev/fd/"),
    );
    let comm_self = path(&comm, "/proc/self/fd/");
    let (out_self, in_self) = (
        path(&ro_out, "/proc/self/fd/"),
        path(&ro_in, "/proc/self/fd/"),
    );
    let wr = libc::O_WRONLY;
    let write_through = |p: &CString| {
        // SAFETY (child): open, write, close.
        unsafe {
            let fd = libc::open(p.as_ptr(), wr | libc::O_APPEND);
            if fd < 0 {
                return errno();
            }
            let ok = libc::write(fd, b"l".as_ptr().cast(), 1) == 1;
            libc::close(fd);
            if ok {
                0
            } else {
                202
            }
        }
    };
    let cases = [
        case("writable fd via /proc/self", 0, || write_through(&log_self)),
        case("writable fd via /proc/thread-self", 0, || {
            write_through(&log_thread)
        }),
        case("writable fd via /dev/fd", 0, || write_through(&log_dev)),
        case("read-only fd outside", libc::EACCES, || {
            open(&out_self, wr, 0)
        }),
        // A final (magic) symlink not followed, as the kernel answers it.
        case("read-only fd outside, no follow", libc::ELOOP, || {
            open(&out_self, wr | libc::O_NOFOLLOW, 0)
        }),
        case("read-only fd inside", 0, || open(&in_self, wr, 0)),
        case("writable fd on procfs", libc::EACCES, || {
            open(&comm_self, wr, 0)
        }),
    ];
    let got = check(t.rules(), nothing, &cases);
    assert_eq!(std::fs::read(t.fx.o.join("log")).unwrap(), b"lll");
    assert_eq!(std::fs::read(t.fx.o.join("f")).unwrap(), b"o");
    assert!(got.refusals().any(|r| matches!(
        r.decision,
        BrokerDecision::Refused {
            reason: Refusal::OutsideWritePaths
        }
    )));
}

#[test]
fn read_deny_paths_beneath_the_write_path() {
    let t = Tree::new();
    let fx = &t.fx;
    std::fs::create_dir(fx.w.join("secret")).unwrap();
    std::fs::write(fx.w.join("secret/key"), "k").unwrap();
    std::fs::write(fx.w.join("public"), "p").unwrap();
    let rules = || fx.read_deny_rules(&[&fx.w.join("secret")]);
    let (key, new, public) = (t.w("secret/key"), t.w("secret/new"), t.w("public"));
    // A refusal by the paths answers as Landlock does (EACCES): an open
    // needing READ_FILE there is what Landlock itself refuses.
    let cases = [
        case("read-write", libc::EACCES, || open(&key, libc::O_RDWR, 0)),
        case("write-only", libc::EACCES, || open(&key, libc::O_WRONLY, 0)),
        case("read with O_CREAT", libc::EACCES, || {
            open(&key, libc::O_RDONLY | libc::O_CREAT, 0o644)
        }),
        case("create inside", libc::EACCES, || {
            open(&new, libc::O_WRONLY | libc::O_CREAT, 0o644)
        }),
        case("unlink inside", libc::EACCES, || unlinkat(&key, 0)),
        case("the sibling", 0, || open(&public, libc::O_RDWR, 0)),
    ];
    check(rules(), nothing, &cases);
    assert_eq!(std::fs::read(fx.w.join("secret/key")).unwrap(), b"k");
    assert!(!fx.w.join("secret/new").exists());
}

#[test]
fn calls_are_made_with_the_callers_credentials() {
    let t = Tree::new();
    let fx = &t.fx;
    std::fs::create_dir(fx.w.join("theirs")).unwrap();
    std::os::unix::fs::chown(fx.w.join("theirs"), Some(65534), Some(65534)).unwrap();
    set_mode(&fx.w.join("d"), 0o755);
    std::fs::write(fx.w.join("ro"), "r").unwrap();
    set_mode(&fx.w.join("ro"), 0o444);
    let (mine, roots, ro, gone) = (t.w("theirs/mine"), t.w("d/roots"), t.w("ro"), t.w("sub/in"));
    let cases = [
        case("create in its own directory", 0, || {
            open(&mine, libc::O_WRONLY | libc::O_CREAT, 0o644)
        }),
        case("create in root's directory", libc::EACCES, || {
            open(&roots, libc::O_WRONLY | libc::O_CREAT, 0o644)
        }),
        case("write root's read-only file", libc::EACCES, || {
            open(&ro, libc::O_WRONLY, 0)
        }),
        case("unlink in root's directory", libc::EACCES, || {
            unlinkat(&gone, 0)
        }),
    ];
    check(t.rules(), become_nobody, &cases);
    let m = std::fs::metadata(fx.w.join("theirs/mine")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534), "owned by the caller");
    assert!(!fx.w.join("d/roots").exists() && fx.w.join("sub/in").exists());
    // Root with every capability dropped: DAC applies (no CAP_DAC_OVERRIDE).
    check(
        t.rules(),
        drop_all_caps,
        &[case("read-only file", libc::EACCES, || {
            open(&ro, libc::O_WRONLY, 0)
        })],
    );
    // Twin: root with its capabilities writes it.
    check(
        t.rules(),
        nothing,
        &[case("read-only file", 0, || open(&ro, libc::O_WRONLY, 0))],
    );
}
