"""A stand-in for the host's DNS server, inside the test's own network
namespace: answers A queries for the NAME=IP pairs given, over UDP and TCP
on 127.0.0.1:53, NXDOMAIN for other names, no data for other types; prints
"query NAME" for each question it gets."""
import socket, struct, sys, threading

table = dict(arg.split("=", 1) for arg in sys.argv[1:])

def respond(q):
    i = 12
    labels = []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode().lower())
        i += 1 + q[i]
    end = i + 5
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    name = ".".join(labels)
    print("query", name, flush=True)
    ip = table.get(name)
    rcode = 0 if ip else 3
    answers = b""
    count = 0
    if ip and qtype == 1:
        answers = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton(ip)
        count = 1
    head = q[:2] + struct.pack(">HHHHH", 0x8180 | rcode, 1, count, 0, 0)
    return head + q[12:end] + answers

def udp(s):
    while True:
        q, peer = s.recvfrom(4096)
        s.sendto(respond(q), peer)

def tcp_conn(c):
    with c:
        while True:
            n = c.recv(2)
            if len(n) < 2:
                return
            q = b""
            want = struct.unpack(">H", n)[0]
            while len(q) < want:
                q += c.recv(want - len(q))
            r = respond(q)
            c.sendall(struct.pack(">H", len(r)) + r)

def tcp(s):
    while True:
        c, _ = s.accept()
        threading.Thread(target=tcp_conn, args=(c,), daemon=True).start()

# Both bound before "ready": no query may meet a closed port.
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", 53))
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", 53))
t.listen(16)
threading.Thread(target=udp, args=(u,), daemon=True).start()
print("ready", flush=True)
tcp(t)
