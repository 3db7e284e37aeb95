"""The syscall matrix of `tests/tests/it/fidelity.rs`.

`matrix.py setup ROOT` makes, for every (call, object) pair and every region
(`w`: inside the write path, `o`: outside it, `d`: under a deny path inside
it), a fresh fixture directory. `matrix.py run ROOT` makes each call on its
object once and prints a JSON object {"region/call/object": "ok" | errno name}.
"""
import errno
import json
import os
import stat
import sys

def fixture(base):
    os.makedirs(base)
    with open(os.path.join(base, "file"), "w") as f:
        f.write("x")
    os.mkdir(os.path.join(base, "dir"))
    with open(os.path.join(base, "dir", "inner"), "w") as f:
        f.write("x")
    os.mkdir(os.path.join(base, "empty"))
    os.symlink("nowhere", os.path.join(base, "dangling"))
    os.symlink("loop", os.path.join(base, "loop"))
    os.symlink("file", os.path.join(base, "symlink"))
    os.mkfifo(os.path.join(base, "fifo"))
    # A real name that ends as the kernel marks an unlinked object's path.
    os.mkdir(os.path.join(base, "d (deleted)"))
    with open(os.path.join(base, "readonly"), "w") as f:
        f.write("x")
    os.chmod(os.path.join(base, "readonly"), 0o444)
    # A dangling link whose target lies in the write path (for every region).
    os.symlink(in_w(base) + "/made_from_" + region_of(base), os.path.join(base, "dangling_to_w"))
    os.symlink("dir", os.path.join(base, "symdir"))
    # Beyond the write path and on another mount: the same place for every
    # region, one per fixture.
    os.makedirs(outside(base))
    with open(outside(base) + "/exists", "w") as f:
        f.write("x")
    os.makedirs(other_mount(base))
    with open(other_mount(base) + "/exists", "w") as f:
        f.write("x")


ROOT = None


def region_of(base):
    return base[len(ROOT):].split("/")[1]


def in_w(base):
    """The same fixture's place in the write path."""
    rest = base[len(ROOT):].split("/cases/", 1)[1]
    return f"{ROOT}/w/cases/{rest}"


def outside(base):
    """A directory of this fixture's own outside the write path."""
    return ROOT + "/o/beyond/" + base[len(ROOT) + 1:].replace("/", "_")


# Another mount than the fixtures' (/dev/shm is tmpfs), one per fixture root.
OTHER_MOUNT = "/dev/shm"


def other_mount(base):
    return f"{OTHER_MOUNT}/{os.path.basename(ROOT)}/" + base[len(ROOT) + 1:].replace("/", "_")


NAMES = {
    "file": "file",
    "dir": "dir",
    "empty": "empty",
    "missing": "missing",
    "missing_parent": "nope/x",
    "through_file": "file/x",
    "dangling": "dangling",
    "loop": "loop",
    "long_name": "n" * 256,
    "file_slash": "file/",
    "dir_slash": "dir/",
    "missing_slash": "missing/",
    "dot": "empty/.",
    "dotdot": "empty/..",
    "fifo": "fifo",
    "symlink": "symlink",
    "in_deleted_name": "d (deleted)/n",
    "readonly": "readonly",
    "dangling_to_w": "dangling_to_w",
    "via_symdir": "symdir/inner",
    "via_symdir_missing": "symdir/missing",
}


def path_of(base, obj):
    return base + "/" + NAMES[obj]


def calls(base):
    """Each call as (name, function of the object's path)."""
    other = base + "/new"
    return [
        ("mkdir", lambda p: os.mkdir(p)),
        ("rmdir", lambda p: os.rmdir(p)),
        ("unlink", lambda p: os.unlink(p)),
        ("symlink", lambda p: os.symlink("t", p)),
        ("mknod", lambda p: os.mknod(p, stat.S_IFREG | 0o600)),
        ("mkfifo", lambda p: os.mkfifo(p)),
        ("link_to", lambda p: os.link(base + "/file", p)),
        ("link_from", lambda p: os.link(p, other)),
        ("rename_from", lambda p: os.rename(p, other)),
        ("rename_to", lambda p: os.rename(base + "/file", p)),
        ("rename_noreplace", lambda p: renameat2(base + "/file", p, 1)),
        ("creat", lambda p: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o600))),
        ("creat_excl", lambda p: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NONBLOCK, 0o600))),
        ("creat_nofollow", lambda p: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600))),
        ("open_write", lambda p: os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))),
        ("open_trunc", lambda p: os.close(os.open(p, os.O_RDWR | os.O_TRUNC | os.O_NONBLOCK))),
        ("truncate", lambda p: os.truncate(p, 0)),
        ("chmod", lambda p: os.chmod(p, 0o640)),
        ("utime", lambda p: os.utime(p)),
        ("utime_omit", lambda p: utime_omit(p)),
        ("setxattr", lambda p: os.setxattr(p, "user.t", b"v")),
        ("acl_access", lambda p: os.setxattr(p, "system.posix_acl_access", MINIMAL_ACL)),
        ("getfl_creat", lambda p: getfl_creat(p)),
        ("fchmod_unlinked", lambda p: fchmod_unlinked(p)),
        ("mkdir_in_deleted_cwd", lambda p: mkdir_in_deleted_cwd(base)),
        ("chmod_nofollow", lambda p: fchmodat2(p, 0o640, AT_SYMLINK_NOFOLLOW)),
        # Red-team R6a F2: with every fd slot used, an open fails EMFILE and
        # changes nothing (the kernel takes the slot before the walk).
        ("creat_trunc_emfile", lambda p: emfile(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)),
        ("creat_excl_emfile", lambda p: emfile(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL)),
        ("trunc_emfile", lambda p: emfile(p, os.O_RDWR | os.O_TRUNC | os.O_NONBLOCK)),
        # O_TRUNC sets mtime and ctime even of an empty file.
        ("trunc_empty_mtime", lambda p: trunc_empty_mtime(p)),
        # Red-team R6a F7: the kernel's answers from an xattr's name and value.
        ("xattr_nonamespace", lambda p: os.setxattr(p, "foo", b"v")),
        ("caps_junk", lambda p: os.setxattr(p, "security.capability", b"v")),
        ("acl_junk", lambda p: os.setxattr(p, "system.posix_acl_access", b"v")),
        # futimesat(fd, NULL, NULL) acts on the fd; a bad fd is EBADF.
        ("futimesat_null", lambda p: futimesat_null(p)),
        ("futimesat_badfd", lambda p: futimesat(987, None)),
        # fchmod, fchown, futimens of an anonymous pipe: no path, the kernel's.
        ("pipe_meta", lambda p: pipe_meta()),
        # fchmodat(opath_fd, "", ...) without AT_EMPTY_PATH: ENOENT.
        ("fchmodat_empty", lambda p: fchmodat_empty(p)),
        # linkat of /proc/self/fd/N without AT_SYMLINK_FOLLOW (Python's
        # os.link): the source is procfs's magic link itself, EXDEV after
        # the new name's errors (workload sweep P7); its twins follow it.
        ("link_procfd", lambda p: link_procfd(p, base + "/new", 0)),
        ("link_procfd_follow", lambda p: link_procfd(p, base + "/new", AT_SYMLINK_FOLLOW)),
        ("link_procfd_existing", lambda p: link_procfd(p, base + "/file", 0)),
        ("link_procfd_tmpfile", lambda p: link_tmpfile(base, base + "/new", 0)),
        ("link_procfd_tmpfile_follow", lambda p: link_tmpfile(base, base + "/new", AT_SYMLINK_FOLLOW)),
        ("link_procfd_closed", lambda p: linkat("/proc/self/fd/987", base + "/new", 0)),
        ("link_procfd_other", lambda p: link_procfd_other(p, base + "/new")),
        # S_ISGID of a directory is no privilege: admitted, the kernel's
        # own rules then apply (the bit kept or silently dropped); mkdir
        # ignores set-id bits in its mode. S_ISUID stays refused (KNOWN).
        ("chmod_setgid", lambda p: chmod_then(p, lambda: os.chmod(p, 0o2775))),
        ("fchmod_setgid", lambda p: fchmod_setgid(p)),
        ("fchmodat2_setgid", lambda p: chmod_then(p, lambda: fchmodat2(p, 0o2775, 0))),
        ("chmod_setgid_foreign", lambda p: chmod_then(p, lambda: os.chmod(p, 0o2775))),
        ("chmod_setuid", lambda p: chmod_then(p, lambda: os.chmod(p, 0o4775))),
        ("mkdir_setgid", lambda p: chmod_then(p, lambda: os.mkdir(p, 0o2775))),
        # Beyond the write path (compared with -w in every region).
        ("link_from_beyond", lambda p: os.link(outside(base) + "/exists", p)),
        ("link_to_beyond", lambda p: os.link(p, outside(base) + "/exists")),
        ("rename_to_beyond", lambda p: os.rename(p, outside(base) + "/new")),
        ("rename_from_beyond", lambda p: renameat2(outside(base) + "/exists", p, 1)),
        ("link_xdev", lambda p: os.link(p, other_mount(base) + "/new")),
        ("link_xdev_existing", lambda p: os.link(p, other_mount(base) + "/exists")),
        ("rename_xdev", lambda p: os.rename(p, other_mount(base) + "/new")),
    ]


AT_SYMLINK_NOFOLLOW = 0x100
AT_SYMLINK_FOLLOW = 0x400


def linkat(src, dst, flags):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.linkat(-100, src.encode(), -100, dst.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def link_procfd(p, dst, flags):
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        linkat(f"/proc/self/fd/{fd}", dst, flags)
    finally:
        os.close(fd)


def link_tmpfile(base, dst, flags):
    """An O_TMPFILE file (no name: deleted) given one through /proc/self/fd."""
    fd = os.open(base, os.O_TMPFILE | os.O_WRONLY, 0o600)
    try:
        linkat(f"/proc/self/fd/{fd}", dst, flags)
    finally:
        os.close(fd)


def link_procfd_other(p, dst):
    """/proc/PID/fd/N of another process (a child holding the file open)."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    os.close(fd)
    try:
        linkat(f"/proc/{pid}/fd/{fd}", dst, 0)
    finally:
        os.close(w)
        os.waitpid(pid, 0)


def chmod_then(p, change):
    """The change, then the set-id and sticky bits it left."""
    change()
    return f"ok {oct(os.stat(p).st_mode & 0o7000)}"


def fchmod_setgid(p):
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.fchmod(fd, 0o2775)
    finally:
        os.close(fd)
    return f"ok {oct(os.stat(p).st_mode & 0o7000)}"
SYS_FUTIMESAT = 261
SYS_FCHMODAT = 268


def libc_call(*args):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def state(p):
    try:
        st = os.lstat(p)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    return f"size={st.st_size}" if stat.S_ISREG(st.st_mode) else "exists"


def emfile(p, flags):
    """The open with no fd slot free, and what it changed."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = state(p)
    held = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        while True:
            try:
                held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
        try:
            os.close(os.open(p, flags, 0o600))
            result = "opened"
        except OSError as e:
            result = errno.errorcode.get(e.errno, str(e.errno))
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    after = state(p)
    return f"{result} {'unchanged' if after == before else before + '->' + after}"


def trunc_empty_mtime(p):
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK))
    os.utime(p, (1, 1))
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK))
    return None if os.stat(p).st_mtime != 1 else "mtime kept"


def futimesat(fd, path):
    import ctypes
    libc_call(ctypes.c_long(SYS_FUTIMESAT), ctypes.c_int(fd), path, None)


def futimesat_null(p):
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        futimesat(fd, None)
    finally:
        os.close(fd)


def pipe_meta():
    r, w = os.pipe()
    try:
        os.fchmod(r, 0o600)
        os.fchown(r, -1, -1)
        os.utime(r)
    finally:
        os.close(r)
        os.close(w)


def fchmodat_empty(p):
    import ctypes
    fd = os.open(p, os.O_PATH)
    try:
        libc_call(ctypes.c_long(SYS_FCHMODAT), ctypes.c_int(fd), b"", 0o640)
    finally:
        os.close(fd)


def fchmodat2(p, mode, flags):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(452, -100, p.encode(), mode, flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def getfl_creat(p):
    """The status flags of a created or opened file: O_NOFOLLOW only if asked."""
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o600)
    try:
        import fcntl
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NOFOLLOW:
            return "O_NOFOLLOW shown"
    finally:
        os.close(fd)
    return None


def fchmod_unlinked(p):
    """fchmod and futimens on a file that no longer has a name."""
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o600)
    try:
        os.unlink(p)
        os.fchmod(fd, 0o640)
        os.utime(fd)
    finally:
        os.close(fd)


def mkdir_in_deleted_cwd(base):
    """mkdir relative to a working directory that was removed."""
    d = base + "/gone"
    os.mkdir(d)
    here = os.getcwd()
    os.chdir(d)
    try:
        os.rmdir(d)
        os.mkdir("x")
    finally:
        os.chdir(here)


# The minimal access ACL for mode 0640 (user::rw-, group::r--, other::---),
# as coreutils writes it: a header and three entries (tag, perm, id).
MINIMAL_ACL = (
    (2).to_bytes(4, "little")
    + (1).to_bytes(2, "little") + (6).to_bytes(2, "little") + (0xFFFFFFFF).to_bytes(4, "little")
    + (4).to_bytes(2, "little") + (4).to_bytes(2, "little") + (0xFFFFFFFF).to_bytes(4, "little")
    + (0x20).to_bytes(2, "little") + (0).to_bytes(2, "little") + (0xFFFFFFFF).to_bytes(4, "little")
)


def renameat2(src, dst, flags):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.renameat2(-100, src.encode(), -100, dst.encode(), flags)
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def utime_omit(p):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    class Timespec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    omit = (1 << 30) - 2
    times = (Timespec * 2)(Timespec(0, omit), Timespec(0, omit))
    if libc.utimensat(-100, p.encode(), times, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def regions(root):
    return {"w": root + "/w/cases", "o": root + "/o/cases", "d": root + "/w/deny/cases"}


def main():
    global ROOT
    action, root = sys.argv[1], sys.argv[2]
    ROOT = root
    names = [c for c, _ in calls("")]
    if action == "setup":
        for region, top in regions(root).items():
            for call in names:
                for obj in NAMES:
                    fixture(f"{top}/{call}/{obj}")
                    if call == "chmod_setgid_foreign" and os.geteuid() == 0:
                        # A group the caller (root without capabilities) is
                        # not in: chmod keeps S_ISGID only for a member.
                        for d in ("file", "dir", "empty"):
                            os.chown(f"{top}/{call}/{obj}/{d}", -1, 4242)
        return
    out = {}
    for region, top in regions(root).items():
        for call in names:
            for obj in NAMES:
                base = f"{top}/{call}/{obj}"
                fn = dict(calls(base))[call]
                try:
                    r = fn(path_of(base, obj))
                    out[f"{region}/{call}/{obj}"] = "ok" if r is None else r
                except OSError as e:
                    out[f"{region}/{call}/{obj}"] = errno.errorcode.get(e.errno, str(e.errno))
    json.dump(out, sys.stdout, sort_keys=True)


main()
