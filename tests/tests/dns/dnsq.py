"""A resolver of the program's own: DNS over TCP to the first resolv.conf
nameserver, printing the rcode and the addresses of each name."""
import socket, struct, sys
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
def ask(name, qtype=1):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    q += struct.pack(">HH", qtype, 1)
    s = socket.create_connection((ns, 53), timeout=5)
    s.sendall(struct.pack(">H", len(q)) + q)
    n = struct.unpack(">H", s.recv(2))[0]
    r = b""
    while len(r) < n: r += s.recv(n - len(r))
    rcode = r[3] & 15; an = struct.unpack(">H", r[6:8])[0]
    i = len(q); ips = []
    for _ in range(an):
        rtype, _, _, rdlen = struct.unpack(">HHIH", r[i+2:i+12])
        data = r[i+12:i+12+rdlen]
        ips.append(socket.inet_ntop(socket.AF_INET if rtype == 1 else socket.AF_INET6, data))
        i += 12 + rdlen
    return rcode, ips
for name in sys.argv[1:]:
    try:
        print(name, *ask(name))
    except Exception as e:
        print(name, "failed", type(e).__name__, e)
