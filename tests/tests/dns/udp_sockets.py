"""Makes IP datagram sockets in every form a program may ask for and prints
what the kernel says of each: the errno, or its type, family, protocol,
O_NONBLOCK and FD_CLOEXEC. The sandbox's answers must read the same."""
import errno, fcntl, os, socket

def show(name, domain, ty, proto=0):
    try:
        s = socket.socket(domain, ty, proto)
    except OSError as e:
        print(name, "error", errno.errorcode.get(e.errno, e.errno))
        return
    opt = lambda o: s.getsockopt(socket.SOL_SOCKET, o)
    nonblock = bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)
    cloexec = bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
    print(name, opt(socket.SO_TYPE), opt(socket.SO_DOMAIN), opt(socket.SO_PROTOCOL), nonblock, cloexec)
    s.bind(("::" if domain == socket.AF_INET6 else "0.0.0.0", 0))
    s.close()

def raw(name, domain, ty):
    """socket(2) itself (Python's own sockets are always close-on-exec)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(domain, ty, 0)
    if fd < 0:
        print(name, "error", errno.errorcode.get(ctypes.get_errno()))
        return
    print(name, bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC),
          bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK))
    os.close(fd)

D, N, C = socket.SOCK_DGRAM, socket.SOCK_NONBLOCK, socket.SOCK_CLOEXEC
raw("raw v4", socket.AF_INET, D)
raw("raw v4 cloexec", socket.AF_INET, D | C)
raw("raw v6 nonblock", socket.AF_INET6, D | N)
show("v4", socket.AF_INET, D)
show("v4 udp", socket.AF_INET, D, socket.IPPROTO_UDP)
show("v6", socket.AF_INET6, D)
show("v4 nonblock", socket.AF_INET, D | N)
show("v4 cloexec", socket.AF_INET, D | C)
show("v6 both", socket.AF_INET6, D | N | C)
show("v4 bad flag", socket.AF_INET, D | 0x100000)
show("v4 bad protocol", socket.AF_INET, D, 6)
show("v4 bad type", socket.AF_INET, 15)
