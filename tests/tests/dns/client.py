"""Resolves HOST with getaddrinfo (glibc, no proxy variables read) and
connects to it at PORT, as ssh or a database client would."""
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    ip = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
except OSError as e:
    print("unresolved", host, e.strerror or e)
    sys.exit(2)
try:
    with socket.create_connection((ip, port), timeout=5) as s:
        print("reached", host, ip, s.recv(16).decode())
except OSError as e:
    print("refused", host, ip, e.strerror or e)
    sys.exit(3)
