"""Tries, on an IP datagram socket, the socket ioctls and options that
configure its network namespace (CAP_NET_ADMIN there), and their read-only
twins; prints "NAME ok" or "NAME refused ERRNO" for each."""
import socket, fcntl, struct, errno
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "refused", errno.errorcode.get(e.errno, e.errno))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
lo = struct.pack("16sH14s", b"lo", 0, b"")
attempt("SIOCGIFINDEX", lambda: fcntl.ioctl(s, 0x8933, lo))
attempt("SIOCGIFFLAGS", lambda: fcntl.ioctl(s, 0x8913, lo))
attempt("SIOCGIFMETRIC", lambda: fcntl.ioctl(s, 0x891d, lo))
attempt("SIOCSIFFLAGS", lambda: fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", 0, b"")))
attempt("SIOCBRADDBR", lambda: fcntl.ioctl(s, 0x89a0, b"br9\0"))
attempt("SIOCGSKNS", lambda: fcntl.ioctl(s, 0x894c, 0))
attempt("IP_TOS", lambda: s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x10))
attempt("SO_MARK", lambda: s.setsockopt(socket.SOL_SOCKET, 36, 7))
attempt("IP_TRANSPARENT", lambda: s.setsockopt(socket.IPPROTO_IP, 19, 1))
# An option type only CAP_NET_RAW may send (0x9e, unassigned), padded.
attempt("IP_OPTIONS", lambda: s.setsockopt(socket.IPPROTO_IP, 4, bytes([0x9e, 4, 0, 0])))
six = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
# A hop-by-hop header with a router alert (option 5).
attempt("IPV6_HOPOPTS", lambda: six.setsockopt(41, 54, bytes([0, 0, 5, 2, 0, 0, 1, 0])))
attempt("IPT_SO_GET_INFO", lambda: s.getsockopt(socket.IPPROTO_IP, 64, 84))
attempt("IPT_SO_SET_REPLACE", lambda: s.setsockopt(socket.IPPROTO_IP, 64, b"\0" * 96))
