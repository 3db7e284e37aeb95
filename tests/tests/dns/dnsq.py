"""A resolver of the program's own, printing the rcode and the addresses of
each name. --tcp: DNS over TCP to the first resolv.conf nameserver. --udp:
addressed datagrams to it, the answer taken only from that address (as
musl does). --connected: a connected UDP socket (as Go's resolver).
--server ADDR: another resolver address than resolv.conf's."""
import socket, struct, sys

args = sys.argv[1:]
mode = args.pop(0)
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
if args[:1] == ["--server"]:
    ns = args[1]
    args = args[2:]

def query(name, qtype=1):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return q + struct.pack(">HH", qtype, 1)

def exchange(q):
    if mode == "--tcp":
        s = socket.create_connection((ns, 53), timeout=5)
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", s.recv(2))[0]
        r = b""
        while len(r) < n:
            r += s.recv(n - len(r))
        return r
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    if mode == "--connected":
        s.connect((ns, 53))
        s.send(q)
        return s.recv(512)
    s.sendto(q, (ns, 53))
    while True:
        r, src = s.recvfrom(512)
        if src == (ns, 53):
            return r
        print("ignored an answer from", src)

def ask(name):
    q = query(name)
    r = exchange(q)
    rcode = r[3] & 15
    an = struct.unpack(">H", r[6:8])[0]
    i = len(q)
    ips = []
    for _ in range(an):
        rtype, _, _, rdlen = struct.unpack(">HHIH", r[i + 2:i + 12])
        data = r[i + 12:i + 12 + rdlen]
        ips.append(socket.inet_ntop(socket.AF_INET if rtype == 1 else socket.AF_INET6, data))
        i += 12 + rdlen
    return rcode, ips

for name in args:
    try:
        print(name, *ask(name))
    except Exception as e:
        print(name, "failed", type(e).__name__, e)
