//! Per-request rules (`--allow-request`, #44): the host a rule names is
//! intercepted (the runner's proxy terminates TLS with a per-run CA the run
//! trusts, checks each request's method and normalised path, forwards the
//! admitted ones to the origin over its own TLS, verified against
//! `--upstream-ca`); refused requests get 403 naming the rule that would
//! admit them, and are recorded. Each in a private network and mount
//! namespace the test makes (root), with `pkgs.example.com` in a private
//! `/etc/hosts` pointing at a TLS origin on its loopback, whose certificate
//! a test CA (rcgen) signed: nothing leaves the machine.
#![cfg(target_os = "linux")]

use std::process::Output;

use crate::private_net::{certificates, has, lines, scratch_dir, unshare_output, LOOPBACK_UP};

/// The origin: answers every request with what it saw (method, target,
/// Host, body), one line.
const ORIGIN: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self):
        if self.path.startswith("/git/"):
            return self.static()
        if self.path.startswith("/smart/"):
            return self.smart()
        if self.path.startswith("/v1/reflect"):
            return self.reflect()
        if self.path.startswith("/v1/store"):
            # Keeps the request's headers (an audit log, a request bin).
            H.stored = "".join("%s: %s\n" % (k, v) for k, v in self.headers.items())
            open(sys.argv[1] + "/stored", "w").write(H.stored)
            print("origin stored %r" % H.stored, flush=True)
            return self.text(200, "OK", [], b"stored\n")
        if self.path.startswith("/v1/fetch"):
            # Serves what was stored, to any later request.
            out = getattr(H, "stored", "").encode()
            auth = [l for l in out.decode().split("\n") if l.startswith("Authorization")]
            return self.text(200, "OK", [("X-Stored", auth[0] if auth else "-")], out)
        if self.path.startswith("/v1/enc/"):
            return self.encoded()
        if self.path.startswith("/v1/partial"):
            # A 206 whatever was asked: the first bytes of the Authorization.
            auth = (self.headers.get("Authorization") or "-").encode()
            print("origin partial range=%s" % self.headers.get("Range"), flush=True)
            return self.text(206, "Partial Content", [("Content-Range", "bytes 0-9/%d" % len(auth))], auth[:10])
        if self.path.startswith("/v1/quote"):
            # The token urllib-quoted (safe '/'), quote_plus'ed, and escaped
            # as Go's html/template writes an attribute.
            import urllib.parse
            tok = (self.headers.get("Authorization") or "- -").split(" ", 1)[1]
            go = "".join({"&": "&amp;", "+": "&#43;", "=": "&#61;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;", " ": "&#32;"}.get(c, c) for c in tok)
            out = "quote=%s\nplus=%s\ngo=%s\n" % (urllib.parse.quote(tok), urllib.parse.quote_plus(tok), go)
            return self.text(200, "OK", [], out.encode())
        if self.path.startswith("/v1/reason"):
            # Reflects headers in the reason phrase and a header name.
            print("origin reason %s" % self.headers.get("Authorization"), flush=True)
            return self.text(401, "bad credentials: %s" % self.headers.get("Authorization"),
                             [("X-" + self.headers.get("X-Api-Key", "none"), "1")], b"no\n")
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if len(body) < n:
            return
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        out = ("origin saw %s %s host=%s auth=%s body=%r\n" % (self.command, self.path, self.headers.get("Host"), self.headers.get("Authorization"), body)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        print(out.decode().strip(), flush=True)
    def text(self, code, reason, headers, out):
        self.send_response(code, reason)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def encoded(self):
        # /v1/enc/<coding>/<chunk size>/<what>: the Authorization header
        # (or, for "unrelated", a fixed text) in the coding given, whatever
        # the client accepts, chunked in pieces of that size (0: one
        # Content-Length body); the Accept-Encoding the origin got logged.
        import gzip, zlib
        _, _, _, coding, size, what = self.path.split("/")[:6]
        print("origin accept-encoding %s" % self.headers.get("Accept-Encoding"), flush=True)
        if what == "unrelated":
            out = b"the-unrelated-body-0123456789\n" * 40
        else:
            out = ("auth=%s\n" % self.headers.get("Authorization")).encode()
        if coding == "gzip":
            out = gzip.compress(out)
        elif coding == "deflate":
            out = zlib.compress(out)
        elif coding == "br":
            out = b"\x0b\x02\x80" + out + b"\x03"
        self.send_response(200)
        if coding != "identity":
            self.send_header("Content-Encoding", coding)
        size = int(size)
        if size == 0:
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(out), size):
            piece = out[i:i + size]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
    def reflect(self):
        # Every request header back, in response headers and the body (as
        # echo endpoints, CORS and error pages do), the body split in two
        # writes in the middle of each value.
        self.send_response(200)
        out = "".join("%s: %s\n" % (k, v) for k, v in self.headers.items()).encode()
        for k, v in self.headers.items():
            self.send_header("X-Reflect-" + k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        cut = out.find(b"real-") + 7 if b"real-" in out else len(out) // 2
        self.wfile.write(out[:cut])
        self.wfile.flush()
        import time; time.sleep(0.1)
        self.wfile.write(out[cut:])
        print("origin reflect %r" % out, flush=True)
    def smart(self):
        # git http-backend (CGI): the smart protocol, clone and push.
        import os, subprocess
        path, _, query = self.path[len("/smart"):].partition("?")
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        env = dict(os.environ, GIT_PROJECT_ROOT=sys.argv[1] + "/www", GIT_HTTP_EXPORT_ALL="1",
                   PATH_INFO=path, QUERY_STRING=query, REQUEST_METHOD=self.command,
                   CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)),
                   REMOTE_USER="tester", REMOTE_ADDR="127.0.0.1")
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, data = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.split(b"\r\n"):
            k, _, v = line.decode().partition(": ")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        print("origin smart %s %s %d" % (self.command, self.path, status), flush=True)
    def static(self):
        import os
        path = os.path.join(sys.argv[1], "www", self.path[len("/git/"):].split("?")[0])
        try:
            data = open(path, "rb").read()
            self.send_response(200)
        except OSError:
            data = b"missing\n"
            self.send_response(404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        print("origin static %s %s" % (self.command, self.path), flush=True)
    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = reply
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 8443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1] + "/leaf.pem", sys.argv[1] + "/leaf.key")
s.socket = ctx.wrap_socket(s.socket, server_side=True)
open(sys.argv[1] + "/ready", "w").close()
s.serve_forever()
"#;

/// A raw client inside the run: CONNECT through the proxy, TLS trusting
/// `SSL_CERT_FILE`, then the request bytes given (escapes as Python reads
/// them); prints the status line it got.
const RAW: &str = r#"
import os, socket, ssl, sys
proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1]
host, port = proxy.rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(b"CONNECT pkgs.example.com:8443 HTTP/1.1\r\nHost: pkgs.example.com:8443\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
t = ctx.wrap_socket(s, server_hostname="pkgs.example.com")
t.sendall(sys.argv[1].encode().decode("unicode_escape").encode("latin-1"))
out = b""
while b"\r\n" not in out:
    try:
        b = t.recv(4096)
    except (ssl.SSLError, OSError):
        break
    if not b:
        break
    out += b
print(sys.argv[2], out.split(b"\r\n", 1)[0].decode())
"#;

/// A raw HTTP/2 client inside the run (no library: frames written by
/// hand, field values as Python's escapes read them, so a CR or NUL goes
/// as it is): CONNECT through the proxy, TLS with ALPN `h2` trusting
/// `SSL_CERT_FILE`, one request on stream 1 from its arguments (`label`,
/// then `name=value` fields in order, `DATA=...` frames, `TRAILER=name=value`
/// trailers, `SLEEP=seconds` pauses, `AWAIT` a wait for an informational
/// response, `BOMB` an HPACK list bomb: one 4000-byte field in the dynamic
/// table, then referenced 10000 times; the last frame ends the stream unless `OPEN` is given); prints the label and the first line of the response
/// body, or the stream's reset code, or `closed` after `$WAIT` (10) s.
const RAW_H2: &str = r#"
import os, socket, ssl, struct, sys
proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1]
host, port = proxy.rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(b"CONNECT pkgs.example.com:8443 HTTP/1.1\r\nHost: pkgs.example.com:8443\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
ctx.set_alpn_protocols(["h2"])
t = ctx.wrap_socket(s, server_hostname="pkgs.example.com")
label = sys.argv[1]
if t.selected_alpn_protocol() != "h2":
    print(label, "alpn", t.selected_alpn_protocol())
    sys.exit()
def frame(kind, flags, payload, stream=1):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload
def field(arg):
    name, _, value = arg.partition("=")
    if name.startswith("=:"):
        name, _, value = arg[1:].partition("=")
    name, value = [x.encode().decode("unicode_escape").encode("latin-1") for x in (name, value)]
    if value.startswith(b"REPEAT:"):
        count, _, text = value[7:].partition(b":")
        value = text * int(count)
    return b"\x10" + length(name) + name + length(value) + value
def length(s):
    n = len(s)
    if n < 127:
        return bytes([n])
    out, n = [127], n - 127
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes(out + [n])
args = sys.argv[2:]
block, frames, open_stream = b"", [], "OPEN" in args
for a in args:
    if a == "OPEN":
        continue
    if a == "AWAIT":
        frames.append(["await", 0, b""])
    elif a == "BOMB":
        block += b"\x40" + length(b"x-big") + b"x-big" + length(b"v" * 4000) + b"v" * 4000 + b"\xbe" * 10000
    elif a.startswith("SLEEP="):
        frames.append([None, 0, float(a[6:])])
    elif a.startswith("DATA="):
        frames.append([0, 0, a[5:].encode()])
    elif a.startswith("TRAILER="):
        frames.append([1, 4, field(a[8:])])
    else:
        block += field(a)
pieces = [block[i:i + 16384] for i in range(0, len(block), 16384)] or [b""]
frames[:0] = [[1 if i == 0 else 9, 4 if i == len(pieces) - 1 else 0, p] for i, p in enumerate(pieces)]
last = [f for f in frames if f[0] not in (None, "await")][-1]
if not open_stream:
    last[1] |= 1 if last[0] != 9 else 0
    if last[0] == 9:
        frames[0][1] |= 1
buf, body, headers = b"", b"", False
t.settimeout(float(os.environ.get("WAIT", "10")))
def next_frame():
    # The next frame for stream 1; SETTINGS and PING answered on the way.
    global buf
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            try:
                more = t.recv(65536)
            except (OSError, ssl.SSLError):
                more = b""
            if not more:
                print(label, "closed", "headers" if headers else "", body.split(b"\n")[0].decode(errors="replace"))
                sys.exit()
            buf += more
        n = int.from_bytes(buf[:3], "big")
        kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff
        payload, buf = buf[9:9 + n], buf[9 + n:]
        if kind == 4 and not flags & 1:
            t.sendall(frame(4, 1, b"", 0))
        elif kind == 6 and not flags & 1:
            t.sendall(frame(6, 1, payload, 0))
        elif kind == 7:
            print(label, "goaway", int.from_bytes(payload[4:8], "big"))
            sys.exit()
        elif stream == 1 and kind == 3:
            print(label, "reset", int.from_bytes(payload[:4], "big"))
            sys.exit()
        elif stream == 1:
            return kind, flags, payload
def status(block):
    # The :status a first HEADERS block begins with: a static entry, or a
    # literal with the static name (HPACK), its value plain or Huffman
    # coded (digits: 0-2 in 5 bits, 3-9 in 6, RFC 7541 Appendix B).
    first = block[0]
    if first & 0x80:
        return {8: "200", 9: "204", 10: "206", 11: "304", 12: "400", 13: "404", 14: "500"}.get(first & 0x7f, "?")
    size, value = block[1] & 0x7f, block[2:2 + (block[1] & 0x7f)]
    if not block[1] & 0x80:
        return value.decode()
    bits = "".join(format(b, "08b") for b in value)
    codes = {format(d, "05b"): str(d) for d in range(3)}
    codes.update({format(0x19 + d - 3, "06b"): str(d) for d in range(3, 10)})
    out, at = "", 0
    while at + 5 <= len(bits):
        if bits[at:at + 5] in codes:
            out, at = out + codes[bits[at:at + 5]], at + 5
        elif bits[at:at + 6] in codes:
            out, at = out + codes[bits[at:at + 6]], at + 6
        else:
            break
    return out
out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, b"", 0)
for kind, flags, payload in frames:
    if kind == "await":
        # Waits for an informational response (HEADERS without END_STREAM).
        t.sendall(out)
        out = b""
        kind, flags, payload = next_frame()
        if kind == 1 and status(payload).startswith("1"):
            print(label, "informational", status(payload))
        elif kind == 1:
            headers = True
        continue
    if kind is None:
        t.sendall(out)
        out = b""
        import time; time.sleep(payload)
        continue
    out += frame(kind, flags, payload)
t.sendall(out)
while True:
    kind, flags, payload = next_frame()
    if kind == 1:
        headers = True
    elif kind == 0:
        body += payload
    if kind in (0, 1) and flags & 1:
        print(label, body.split(b"\n")[0].decode(errors="replace"))
        sys.exit()
"#;

/// Runs `script` in a new network and mount namespace with loopback up,
/// `/etc/hosts` naming `pkgs.example.com` and `other.example.com` at
/// 127.0.0.1, and the origin on 127.0.0.1:8443. `$SANDBOX`, `$D` (scratch,
/// with `ca.pem`, readable by all), `$RAW` (the raw client) and `$NOBODY`
/// are set.
fn in_private_net(script: &str) -> (Output, tempfile::TempDir) {
    let (dir, d) = scratch_dir();
    certificates(&d, &["pkgs.example.com", "api.example.com"], None);
    std::fs::write(
        d.join("hosts"),
        "127.0.0.1 localhost\n127.0.0.1 pkgs.example.com api.example.com other.example.com\n",
    )
    .unwrap();
    std::fs::write(d.join("origin.py"), ORIGIN).unwrap();
    std::fs::write(d.join("raw.py"), RAW).unwrap();
    std::fs::write(d.join("path_client.py"), PATH_CLIENT).unwrap();
    std::fs::write(d.join("raw_h2.py"), RAW_H2).unwrap();
    let setup = format!(
        r#"set -e
mount --bind "$D/hosts" /etc/hosts
{LOOPBACK_UP}
python3 "$D/origin.py" "$D" > "$D/origin.log" 2>&1 < /dev/null &
origin=$!
for i in $(seq 100); do [ -e "$D/ready" ] && break; sleep 0.05; done
set +e
{script}
kill $origin 2>/dev/null
"#
    );
    let (raw, path_client) = (d.join("raw.py"), d.join("path_client.py"));
    let raw_h2 = d.join("raw_h2.py");
    let out = unshare_output(
        &setup,
        &d,
        &[
            ("RAW", raw.as_os_str()),
            ("RAW_H2", raw_h2.as_os_str()),
            ("PATH_CLIENT", path_client.as_os_str()),
        ],
        "unshare (util-linux) makes the namespaces",
    );
    (out, dir)
}

const RULE: &str = "--allow-request 'GET,HEAD https://pkgs.example.com:8443/simple/**'";

/// curl and Python reach an admitted URL; the refused method, the refused
/// path (plain, with dot segments, percent-encoded) and an unlisted host
/// beside it are refused with the 403 explanation and recorded; the summary
/// line says what; root and nobody.
#[test]
fn admitted_requests_pass_and_their_refused_twins_get_403() {
    let (out, _d) = in_private_net(&format!(
        r#"
R() {{ "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} "$@"; }}
U=https://pkgs.example.com:8443
R -- curl --http1.1 -sS $U/simple/pkg/?v=1 | sed 's/^/curl get /'
R -- curl --http1.1 -sS -v $U/simple/k1 $U/simple/k2 $U/private 2>&1 | grep -E "^origin saw|Re-using|^sandbox egress" | sed 's/^/keepalive /'
R -- curl --http1.1 -sS -I $U/simple/pkg/ | grep -E '^HTTP/1.1 [0-9]' | tail -1 | sed 's/^/curl head /'
R -- curl --http1.1 -sS -i -X POST -d abc $U/simple/pkg/ | grep -E '^(HTTP/1.1 [0-9]|Sandbox-Admit-With)' | sed 's/^/curl post /'
head -c 3000000 /dev/zero > "$D/big"
R -- curl --http1.1 -sS -i -H 'Expect:' -X POST --data-binary @"$D/big" $U/simple/pkg/ | grep -E '^HTTP/1.1 [0-9]' | tail -1 | sed 's/^/curl big post /'
R -- curl --http1.1 -sS -i $U/private | grep -E '^(HTTP/1.1 [0-9]|Sandbox-Admit-With)' | sed 's/^/curl private /'
R -- curl --http1.1 -sS -i --path-as-is $U/simple/../private | grep -E '^HTTP/1.1 [0-9]' | tail -1 | sed 's/^/curl dots /'
R -- curl --http1.1 -sS -i --path-as-is $U/simple/%2e%2e/private | grep -E '^HTTP/1.1 [0-9]' | tail -1 | sed 's/^/curl encoded dots /'
R -- curl --http1.1 -sS -i --path-as-is $U/simple%2f..%2fprivate | grep -E '^HTTP/1.1 [0-9]' | tail -1 | sed 's/^/curl encoded slash /'
R -- sh -c 'curl --http1.1 -sS --proxy "$ALL_PROXY" '$U'/simple/socks' | sed 's/^/socks get /'
R -- sh -c 'curl --http1.1 -sS -i -X POST --proxy "$ALL_PROXY" '$U'/simple/socks' | grep -E '^HTTP/1.1 [0-9]' | tail -1 | sed 's/^/socks post /'
R -- curl --http1.1 -sS --cacert "$D/ca.pem" $U/simple/pinned 2>&1 | sed 's/^/pinned /'
"$SANDBOX" run --upstream-ca "$D/ca.pem" {RULE} -- curl --http1.1 -sS --cacert "$D/ca.pem" $U/simple/pinned 2>&1 | grep '^sandbox:' | sed 's/^/pinned summary /'
R -- curl --http1.1 -sS -i https://other.example.com:8443/simple/ 2>&1 | grep -E '^HTTP/1.1 [0-9]|origin' | head -1 | sed 's/^/curl other host /'
R -- /usr/bin/python3 -c 'import urllib.request; print("python", urllib.request.urlopen("'$U'/simple/py").read().decode().strip())'
R -- /usr/bin/python3 -c 'import urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request("'$U'/simple/py", data=b"x"))
except urllib.error.HTTPError as e:
    print("python post", e.code, e.headers["Sandbox-Admit-With"])'
$SANDBOX run --report "$D/r.json" --upstream-ca $D/ca.pem {RULE} -- curl --http1.1 -sS -f -X DELETE $U/simple/pkg/ 2>"$D/err" >/dev/null
echo "delete exit $?"
cat "$D/err" | sed 's/^/stderr /'
cd "$D" && $NOBODY "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} -- curl --http1.1 -sS $U/simple/nobody | sed 's/^/nobody get /'
cd "$D" && $NOBODY "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} -- curl --http1.1 -sS -i -X PUT $U/simple/nobody | grep -E '^HTTP/1.1 [0-9]' | tail -1 | sed 's/^/nobody put /'
"#
    ));
    let l = lines(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    has(
        &l,
        "curl get origin saw GET /simple/pkg/?v=1 host=pkgs.example.com:8443",
    );
    has(&l, "curl head HTTP/1.1 200");
    // One connection carries several requests, each checked: the third,
    // on the same connection, is refused.
    has(&l, "keepalive origin saw GET /simple/k1");
    has(&l, "keepalive origin saw GET /simple/k2");
    has(&l, "keepalive * Re-using existing connection");
    has(
        &l,
        "keepalive sandbox egress proxy: refused GET https://pkgs.example.com:8443/private",
    );
    has(&l, "curl post HTTP/1.1 403 Forbidden");
    has(
        &l,
        "curl post Sandbox-Admit-With: --allow-request 'POST https://pkgs.example.com:8443/simple/pkg/'",
    );
    has(&l, "curl private HTTP/1.1 403 Forbidden");
    // A refused request's body does not cost the client its answer.
    has(&l, "curl big post HTTP/1.1 403 Forbidden");
    has(
        &l,
        "curl private Sandbox-Admit-With: --allow-request 'GET https://pkgs.example.com:8443/private'",
    );
    has(&l, "curl dots HTTP/1.1 403");
    // A client that trusts only its own CA file (as a pinning one) fails
    // closed, and the run says why.
    has(&l, "pinned curl: (60)");
    has(
        &l,
        "pinned summary sandbox: refused 1 request (pkgs.example.com:8443 whose client does not trust the run's CA)",
    );
    // SOCKS5 (`ALL_PROXY`) to an intercepted host is intercepted the same.
    has(
        &l,
        "socks get origin saw GET /simple/socks host=pkgs.example.com:8443",
    );
    has(&l, "socks post HTTP/1.1 403");
    has(&l, "curl encoded dots HTTP/1.1 403");
    has(&l, "curl encoded slash HTTP/1.1 403");
    // An unlisted host is no tunnel either: the proxy refuses its CONNECT.
    has(&l, "curl other host HTTP/1.1 403 Forbidden");
    assert!(
        !l.iter()
            .any(|x| x.starts_with("curl other host") && x.contains("origin saw")),
        "{l:#?}"
    );
    has(
        &l,
        "python origin saw GET /simple/py host=pkgs.example.com:8443",
    );
    has(
        &l,
        "python post 403 --allow-request 'POST https://pkgs.example.com:8443/simple/py'",
    );
    has(&l, "delete exit 22");
    has(
        &l,
        "stderr sandbox: refused 1 request (DELETE https://pkgs.example.com:8443/simple/pkg/ not admitted by --allow-request)",
    );
    has(&l, "nobody get origin saw GET /simple/nobody");
    has(&l, "nobody put HTTP/1.1 403");
    let log = std::fs::read_to_string(_d.path().join("origin.log")).unwrap_or_default();
    assert!(
        !log.contains("private"),
        "a refused request reached the origin: {log}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(_d.path().join("r.json")).unwrap()).unwrap();
    let refused = &record["mediation"]["refused"];
    assert_eq!(refused[0]["syscall"], "request", "{record:#}");
    assert_eq!(
        refused[0]["target"], "DELETE https://pkgs.example.com:8443/simple/pkg/",
        "{record:#}"
    );
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("--allow-request 'DELETE https://pkgs.example.com:8443/simple/pkg/'"),
        "{record:#}"
    );
}

/// Request shapes a parser could read two ways are refused (400/501), each
/// beside its plain twin, which passes; bytes after a framed body never
/// reach the origin.
#[test]
fn smuggling_shapes_are_refused_beside_their_twins() {
    let (out, d) = in_private_net(
        r#"
R() { "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --allow-request 'GET,POST https://pkgs.example.com:8443/simple/**' -- /usr/bin/python3 "$RAW" "$@"; }
H='Host: pkgs.example.com:8443\r\n'
R "POST /simple/a HTTP/1.1\r\n$H""Content-Length: 3\r\n\r\nabc" "twin length"
R "POST /simple/a HTTP/1.1\r\n$H""Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc" "duplicate length"
R "POST /simple/a HTTP/1.1\r\n$H""Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" "twin chunked"
R "POST /simple/a HTTP/1.1\r\n$H""Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n" "chunked with length"
R "GET /simple/a HTTP/1.1\r\n$H""X-A: 1\r\n\r\n" "twin header"
R "GET /simple/a HTTP/1.1\r\n$H""X-A: 1\r\n 2\r\n\r\n" "obs-fold"
R "GET /simple/a HTTP/1.1\r\n$H""X-A: 1\x002\r\n\r\n" "nul"
R "GET /simple/a HTTP/1.1\r\n$H""X-A: 1\r2\r\n\r\n" "bare cr"
R "GET /simple/a HTTP/1.1\n$H\r\n" "bare lf"
R "POST /simple/a HTTP/1.1\r\n$H""Content-Length: 0\r\n\r\nGET /private HTTP/1.1\r\n$H\r\n" "pipelined"
R "GET /simple/..;/private HTTP/1.1\r\n$H\r\n" "dot parameters"
R "GET /simple/...;x/a HTTP/1.1\r\n$H\r\n" "twin parameters"
R "GET /simple/%252e%252e/private HTTP/1.1\r\n$H\r\n" "double escape"
R "GET /simple/%c0%ae%c0%ae/private HTTP/1.1\r\n$H\r\n" "overlong"
"#,
    );
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    has(&l, "twin length HTTP/1.1 200");
    has(&l, "duplicate length HTTP/1.1 400");
    has(&l, "twin chunked HTTP/1.1 200");
    has(&l, "chunked with length HTTP/1.1 400");
    has(&l, "twin header HTTP/1.1 200");
    for shape in ["obs-fold", "nul", "bare cr", "bare lf"] {
        assert!(
            l.iter()
                .any(|x| x.starts_with(shape) && x.contains("HTTP/1.1 400")),
            "{shape}: {l:#?}"
        );
    }
    has(&l, "pipelined HTTP/1.1 200");
    // Segments origins read as others (Tomcat's `..;`, a second decoding,
    // overlong UTF-8) beside an ordinary `...;x`.
    has(&l, "dot parameters HTTP/1.1 403");
    has(&l, "twin parameters HTTP/1.1 200");
    has(&l, "double escape HTTP/1.1 403");
    has(&l, "overlong HTTP/1.1 403");
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(!log.contains("private"), "{log}");
}

/// The run trusts the run CA through the usual variables, as a bundle in a
/// directory of the runner's, gone after the run; no private key is in the
/// run's environment or in those files.
#[test]
fn the_run_ca_key_never_reaches_the_run() {
    let (out, _d) = in_private_net(&format!(
        r#"
inner=$($SANDBOX run -q --upstream-ca $D/ca.pem {RULE} -- sh -c '
for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS CURL_CA_BUNDLE GIT_SSL_CAINFO PIP_CERT CARGO_HTTP_CAINFO; do
  eval "f=\$$v"; echo "var $v $f"
done
env | grep -c "PRIVATE KEY" | sed "s/^/env keys /"
cat "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS" | grep -c "PRIVATE KEY" | sed "s/^/file keys /"
grep -c "BEGIN CERTIFICATE" "$NODE_EXTRA_CA_CERTS" | sed "s/^/ca certs /"
ls "$(dirname "$SSL_CERT_FILE")" | tr "\n" " " | sed "s/^/dir /"; echo
')
echo "$inner"
f=$(echo "$inner" | sed -n "s/^var SSL_CERT_FILE //p")
[ -n "$f" ] && [ ! -e "$f" ] && [ ! -e "$(dirname "$f")" ] && echo "after: gone" || echo "after: still there ($f)"
"#
    ));
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for v in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "CARGO_HTTP_CAINFO",
    ] {
        has(&l, &format!("var {v} /"));
        assert!(
            l.iter()
                .any(|x| x.starts_with(&format!("var {v} ")) && x.ends_with("/bundle.pem")),
            "{v}: {l:#?}"
        );
    }
    has(&l, "var NODE_EXTRA_CA_CERTS /");
    has(&l, "env keys 0");
    has(&l, "file keys 0");
    has(&l, "ca certs 1");
    has(&l, "dir bundle.pem ca.pem");
    has(&l, "after: gone");
}

/// A secret reaches the origin only in the headers of requests to its host
/// (bearer and basic); the command sees only the placeholder, the real
/// value is in no environment the run can read (its own, the runner's
/// `/proc/PID/environ`, any process's), and the placeholder sent to another
/// listed host, or in a request's target, is refused and recorded as an
/// attempted exfiltration; root and nobody.
#[test]
fn secrets_reach_only_their_host_and_never_the_run() {
    let script = r#"
# Only the sandbox's own environment holds it (see SECURITY.md: a shell
# that exports it keeps it in its own, which the command can read).
# (Spelt so that no command line holds it, nor the pattern's own.)
T="real-secret-valu""e-42"
RULES="--allow-request 'GET https://pkgs.example.com:8443/simple/**' --allow-request 'GET https://api.example.com:8443/**'"
INNER='echo "sees $TOKEN"
curl -sS -H "Authorization: Bearer $TOKEN" https://api.example.com:8443/v1/me | sed "s/^/bearer /"
curl -sS -u "me:$TOKEN" https://api.example.com:8443/v1/basic | sed "s/^/basic /"
curl -sS -H "Authorization: Bearer $TOKEN" https://pkgs.example.com:8443/simple/x | sed "s/^/other host /"
curl -sS "https://api.example.com:8443/v1/q?t=$TOKEN" | sed "s/^/in target /"
env | grep -c "real-secret-valu[e]" | sed "s/^/env has /"
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -ac "real-secret-valu[e]" | sed "s/^/proc has /"
cat /proc/$$/environ | grep -ac SANDBOX_SECRET_ | sed "s/^/control environ /"
cat /proc/$PPID/cmdline | grep -aq -- --secret && echo "control runner cmdline 1"'
eval "TOKEN=$T \"$SANDBOX\" run -q --report \"$D/r.json\" --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- sh -c \"\$INNER\"" | sed 's/^/root /'
cd "$D" && eval "TOKEN=$T $NOBODY \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- sh -c \"\$INNER\"" | sed 's/^/nobody /'
TOKEN=$T "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://pkgs.example.com:8443/**' -- true 2>&1 | sed 's/^/unlisted /'
printf '[sandbox.egress]\nupstream_ca = "%s/ca.pem"\n[[sandbox.egress.secrets]]\nname = "TOKEN"\nhosts = ["api.example.com"]\n[[sandbox.policy.requests]]\nmethods = ["GET"]\nurl = "https://api.example.com:8443/**"\n' "$D" > "$D/cfg.toml"
TOKEN=$T "$SANDBOX" run -q --config "$D/cfg.toml" -- sh -c 'curl -sS -H "Authorization: Bearer $TOKEN" https://api.example.com:8443/v1/config' | sed 's/^/config /'
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for who in ["root", "nobody"] {
        has(&l, &format!("{who} sees SANDBOX_SECRET_"));
        // The origin got the value; its reflection of it reaches the
        // command masked (the value's length in `*`).
        has(
            &l,
            &format!(
                "{who} bearer origin saw GET /v1/me host=api.example.com:8443 auth=Bearer {}",
                "*".repeat(20)
            ),
        );
        has(
            &l,
            &format!(
                "{who} basic origin saw GET /v1/basic host=api.example.com:8443 auth=Basic {}",
                "*".repeat(32)
            ),
        );
        has(&l, &format!("{who} other host sandbox egress proxy: refused GET https://pkgs.example.com:8443/simple/x: the request carries the placeholder of the secret TOKEN, which goes only to api.example.com (attempted exfiltration)"));
        has(&l, &format!("{who} in target sandbox egress proxy: refused GET https://api.example.com:8443/v1/q"));
        has(&l, &format!("{who} env has 0"));
        has(&l, &format!("{who} proc has 0"));
        // The twins: what the search reads is readable, and holds the
        // placeholder where the value would be.
        has(&l, &format!("{who} control environ 1"));
        has(&l, &format!("{who} control runner cmdline 1"));
    }
    has(&l, "unlisted sandbox: ");
    // The same from the operator's config ([sandbox.egress], requests).
    has(
        &l,
        "config origin saw GET /v1/config host=api.example.com:8443 auth=Bearer ****",
    );
    has(&l, "which no request rule names");
    assert!(!l.iter().any(|x| x.contains("real-secret-value")), "{l:#?}");
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(!log.contains("/simple/x"), "{log}");
    for want in [
        "origin saw GET /v1/me host=api.example.com:8443 auth=Bearer real-secret-value-42",
        // me:real-secret-value-42
        "origin saw GET /v1/basic host=api.example.com:8443 auth=Basic bWU6cmVhbC1zZWNyZXQtdmFsdWUtNDI=",
        "origin saw GET /v1/config host=api.example.com:8443 auth=Bearer real-secret-value-42",
    ] {
        assert!(log.contains(want), "{want}: {log}");
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("r.json")).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].as_array().unwrap();
    assert!(
        refused.iter().any(|r| r["syscall"] == "request"
            && r["target"] == "GET https://pkgs.example.com:8443/simple/x"
            && r["reason"]
                .as_str()
                .unwrap()
                .contains("attempted exfiltration")),
        "{record:#}"
    );
    assert!(
        !record.to_string().contains("real-secret-value"),
        "{record:#}"
    );
}

/// A run that may write where the runner makes the CA's directory (its
/// `TMPDIR`), and owns that directory (the same uid), renames it and plants
/// a symlink in its place: the runner's cleanup removes its own files
/// through the directory it made, never `bundle.pem` and `ca.pem` where the
/// link points; the twin: a plain run leaves nothing behind.
#[test]
fn the_ca_files_cleanup_follows_no_planted_link() {
    let script = r#"
mkdir "$D/tmpd" "$D/victim"
echo precious > "$D/victim/ca.pem"
echo precious > "$D/victim/bundle.pem"
TMPDIR="$D/tmpd" "$SANDBOX" run -q -w "$D/tmpd" --upstream-ca "$D/ca.pem" --allow-request 'GET https://pkgs.example.com:8443/**' -- sh -c '
d=$(dirname "$SSL_CERT_FILE")
mv "$d" "$d.moved" && ln -s "$D/victim" "$d" && echo planted'
cat "$D/victim/ca.pem" "$D/victim/bundle.pem" | sed "s/^/victim /"
ls "$D/tmpd"/*.moved | wc -l | sed "s/^/moved holds /"
rm -rf "$D/tmpd"/*
TMPDIR="$D/tmpd" "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --allow-request 'GET https://pkgs.example.com:8443/**' -- sh -c 'ls "$(dirname "$SSL_CERT_FILE")" | wc -l | sed "s/^/control files /"'
ls -A "$D/tmpd" | wc -l | sed "s/^/control left /"
"#;
    let (out, _d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    has(&l, "planted");
    assert_eq!(
        l.iter().filter(|x| *x == "victim precious").count(),
        2,
        "{l:#?}"
    );
    has(&l, "moved holds 0");
    has(&l, "control files 2");
    has(&l, "control left 0");
}

/// A secret read from a file (`NAME=file:PATH@HOST`) is kept from the run:
/// reads are broad, so the runner read-denies that path (the command
/// cannot read, rename or link it, also when a write path holds it), and a
/// file with another name (a hard link the path's denial would miss) is
/// refused; the twins: the origin gets the value, and a file beside it
/// stays readable.
#[test]
fn a_secret_file_is_out_of_the_runs_reach() {
    let script = r#"
mkdir "$D/keys"
printf 'file-secret-valu''e-7\n' > "$D/keys/token"
echo beside > "$D/keys/other"
chmod 600 "$D/keys/token"
RULES="--allow-request 'GET https://api.example.com:8443/**'"
INNER='echo "sees $TOKEN"
cat "$D/keys/token" 2>&1 | sed "s/^/read /"
mv "$D/keys/token" "$D/keys/moved" 2>&1 | sed "s/^/rename /"
ln "$D/keys/token" "$D/keys/linked" 2>&1 | sed "s/^/link /"
cat "$D/keys/moved" "$D/keys/linked" 2>/dev/null | sed "s/^/read alias /"
cat "$D/keys/other" | sed "s/^/control read /"
curl -sS -H "Authorization: Bearer $TOKEN" https://api.example.com:8443/v1/f | sed "s/^/control origin /"'
eval "\"$SANDBOX\" run -q -w \"$D/keys\" --upstream-ca \"$D/ca.pem\" --secret \"TOKEN=file:$D/keys/token@api.example.com\" $RULES -- sh -c \"\$INNER\""
ln "$D/keys/token" "$D/keys/second"
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret "TOKEN=file:$D/keys/token@api.example.com" --allow-request 'GET https://api.example.com:8443/**' -- true 2>&1 | sed 's/^/hard linked /'
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    has(&l, "sees SANDBOX_SECRET_");
    has(&l, "read cat: ");
    has(&l, "rename mv: ");
    has(&l, "link ln: ");
    assert!(!l.iter().any(|x| x.contains("file-secret-value")), "{l:#?}");
    has(&l, "control read beside");
    has(
        &l,
        "control origin origin saw GET /v1/f host=api.example.com:8443 auth=Bearer ****",
    );
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(
        log.contains(
            "origin saw GET /v1/f host=api.example.com:8443 auth=Bearer file-secret-value-7"
        ),
        "{log}"
    );
    has(&l, "hard linked sandbox: the secret file ");
    has(&l, "has 2 names (hard links)");
}

/// An admitted request to the secret's host whose origin reflects request
/// headers (in its response headers, as CORS does, and in its body, split
/// across writes in the middle of the value) does not hand the command the
/// value: the head gets back what the command sent, the body the value's
/// length in `*`, a `Basic` credential the proxy re-encoded too, also on a
/// kept-alive connection; the twin: the origin got the real value.
#[test]
fn an_origin_reflecting_the_injected_value_returns_it_masked() {
    let script = r#"
T="real-secret-valu""e-42"
INNER='curl --http1.1 -sS -i -H "Authorization: Bearer $TOKEN" -H "Origin: https://$TOKEN.example" -H "X-Api-Key: $TOKEN" https://api.example.com:8443/v1/reflect | sed "s/^/bearer /"
curl --http1.1 -sS -i -u "me:$TOKEN" https://api.example.com:8443/v1/reflect https://api.example.com:8443/v1/reflect | sed "s/^/basic /"'
TOKEN=$T "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://api.example.com:8443/**' -- sh -c "$INNER"
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let stars = "*".repeat(20);
    has(&l, "bearer X-Reflect-Authorization: Bearer SANDBOX_SECRET_");
    has(&l, "bearer X-Reflect-Origin: https://SANDBOX_SECRET_");
    has(&l, "bearer X-Reflect-X-Api-Key: SANDBOX_SECRET_");
    has(&l, &format!("bearer Authorization: Bearer {stars}"));
    has(&l, &format!("bearer Origin: https://{stars}.example"));
    has(&l, &format!("bearer X-Api-Key: {stars}"));
    // me:SANDBOX_SECRET_..., as curl sent it.
    has(
        &l,
        "basic X-Reflect-Authorization: Basic bWU6U0FOREJPWF9TRUNSRVRf",
    );
    has(
        &l,
        &format!("basic Authorization: Basic {}", "*".repeat(32)),
    );
    assert_eq!(
        l.iter()
            .filter(|x| x.starts_with("basic Authorization: Basic ***"))
            .count(),
        2,
        "{l:#?}"
    );
    assert!(
        !l.iter()
            .any(|x| x.contains("real-secret-value")
                || x.contains("bWU6cmVhbC1zZWNyZXQtdmFsdWUtNDI")),
        "{l:#?}"
    );
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(
        log.contains("Authorization: Bearer real-secret-value-42"),
        "{log}"
    );
    assert!(log.contains("X-Api-Key: real-secret-value-42"), "{log}");
    assert!(
        log.contains("Authorization: Basic bWU6cmVhbC1zZWNyZXQtdmFsdWUtNDI="),
        "{log}"
    );
}

/// Red-team findings 2, 4, 5, 6 and the INFO item, root and nobody, each
/// beside its twin: with a secret, `Range` never reaches the origin and a
/// 206 is answered 502 (without secrets both pass); the value quoted by
/// Python's `quote` and `quote_plus` and escaped as Go's html/template
/// writes it comes back masked; a method `*` is refused 400 with no rule
/// proposed where `GET` passes; an override header naming a method the
/// rules do not admit is refused 403 where one naming an admitted method
/// passes; forwarding headers are dropped, and `SCRIPT_NAME` (a name with
/// `_`), another header (`Script-Name`) kept; the
/// placeholder as the method is refused as exfiltration, intercepted and on
/// the plain relay.
#[test]
fn ranges_overrides_methods_and_encodings_are_checked_beside_their_twins() {
    let script = r#"
T="real/secret+valu""e=42&x y"
RULES="--allow-request 'GET,HEAD https://api.example.com:8443/v1/**' --allow-request 'GET https://pkgs.example.com:8443/simple/**' --allow-net other.example.com:8080"
INNER='A=https://api.example.com:8443
curl --http1.1 -sS -i -r 0-9 -H "Authorization: Bearer $TOKEN" $A/v1/reflect | grep -a "^Authorization\|^Range\|^HTTP" | sed "s/^/$W range /"
curl --http1.1 -sS -i -H "Authorization: Bearer $TOKEN" $A/v1/partial | sed "s/^/$W partial /"
curl --http1.1 -sS -H "Authorization: Bearer $TOKEN" $A/v1/quote | sed "s/^/$W quote /"
python3 "$RAW" "* /simple/a HTTP/1.1\r\nHost: pkgs.example.com:8443\r\n\r\n" "$W star"
python3 "$RAW" "GET /simple/a HTTP/1.1\r\nHost: pkgs.example.com:8443\r\n\r\n" "$W star twin"
python3 "$RAW" "GET /simple/a HTTP/1.1\r\nHost: pkgs.example.com:8443\r\nX-HTTP-Method-Override: DELETE\r\n\r\n" "$W override"
python3 "$RAW" "GET /simple/a HTTP/1.1\r\nHost: pkgs.example.com:8443\r\nX-Original-URL: /private\r\n\r\n" "$W original url"
curl --http1.1 -sS -H "X-HTTP-Method-Override: HEAD" -H "X-Original-URL: /v1/b" -H "X-Forwarded-Host: evil.example.com" -H "Forwarded: host=evil.example.com" -H "X-Host: evil.example.com" -H "X-Keep: kept" -H "SCRIPT_NAME: /v1" -H "Script-Name: kept" $A/v1/reflect | sed "s/^/$W headers /"
curl --http1.1 -sS -X "$TOKEN" $A/v1/method | sed "s/^/$W method /"
curl --http1.1 -sS -X "$TOKEN" http://other.example.com:8080/p | sed "s/^/$W plain method /"
curl --http1.1 -sS http://other.example.com:8080/p | sed "s/^/$W plain twin /"'
eval "TOKEN=\"\$T\" W=root \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- sh -c \"\$INNER\""
cd "$D" && eval "TOKEN=\"\$T\" W=nobody $NOBODY \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- sh -c \"\$INNER\""
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" --allow-request 'GET https://api.example.com:8443/v1/**' -- sh -c 'curl --http1.1 -sS -i -r 0-9 https://api.example.com:8443/v1/reflect | grep -a "^Range\|^HTTP" | sed "s/^/no secrets range /"; curl --http1.1 -sS -i https://api.example.com:8443/v1/partial | sed "s/^/no secrets partial /"'
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    for who in ["root", "nobody"] {
        // Finding 2: no Range reached the origin; its 206 is refused.
        has(&l, &format!("{who} range HTTP/1.1 200 OK"));
        has(&l, &format!("{who} range Authorization: Bearer *****"));
        assert!(
            !l.iter()
                .any(|x| x.starts_with(&format!("{who} range Range"))),
            "{l:#?}"
        );
        has(&l, &format!("{who} partial HTTP/1.1 502 Bad Gateway"));
        has(&l, &format!("{who} partial sandbox egress proxy: refused the response to GET https://api.example.com:8443/v1/partial: the origin answered 206 Partial Content while the run has secrets"));
        // Finding 6: every line masked whole.
        for form in ["quote", "plus", "go"] {
            let line = l
                .iter()
                .find(|x| x.starts_with(&format!("{who} quote {form}=")))
                .unwrap_or_else(|| panic!("{form}: {l:#?}"));
            assert!(
                line.trim_start_matches(&format!("{who} quote {form}="))
                    .bytes()
                    .all(|b| b == b'*'),
                "{line}"
            );
        }
        // Finding 4.
        has(&l, &format!("{who} star HTTP/1.1 400 Bad Request"));
        has(&l, &format!("{who} star twin HTTP/1.1 200 OK"));
        // Finding 5.
        has(&l, &format!("{who} override HTTP/1.1 403 Forbidden"));
        has(&l, &format!("{who} original url HTTP/1.1 403 Forbidden"));
        has(&l, &format!("{who} headers X-Keep: kept"));
        // G2: a name with `_` (SCRIPT_NAME) is dropped, its `-` twin kept.
        has(&l, &format!("{who} headers Script-Name: kept"));
        assert!(
            !l.iter()
                .any(|x| x.starts_with(&format!("{who} headers")) && x.contains('_')),
            "{l:#?}"
        );
        has(&l, &format!("{who} headers X-HTTP-Method-Override: HEAD"));
        assert!(
            !l.iter().any(|x| x.starts_with(&format!("{who} headers"))
                && (x.contains("evil") || x.contains("Forwarded"))),
            "{l:#?}"
        );
        // INFO: the placeholder as the method.
        has(
            &l,
            &format!("{who} method sandbox egress proxy: refused SANDBOX_SECRET_"),
        );
        has(
            &l,
            &format!("{who} plain method sandbox egress proxy: refused"),
        );
        assert!(
            l.iter()
                .any(|x| x.starts_with(&format!("{who} plain method"))
                    && x.contains("attempted exfiltration")),
            "{l:#?}"
        );
        // Its twin goes on to the origin (nothing listens there).
        has(
            &l,
            &format!(
                "{who} plain twin sandbox egress proxy: cannot connect to other.example.com:8080"
            ),
        );
    }
    assert!(
        !l.iter().any(
            |x| ["real/", "real%2", "real&#", "secret+", "secret%2", "42&x", "42%26"]
                .iter()
                .any(|v| x.contains(v))
        ),
        "{l:#?}"
    );
    assert!(!log.contains("origin partial range=bytes"), "{log}");
    // Only the run without secrets asked for a range.
    assert_eq!(log.matches("Range: bytes").count(), 1, "{log}");
    assert!(
        !log.contains("/private") && !log.contains("SANDBOX_SECRET_"),
        "{log}"
    );
    // The twins without secrets: the range reaches the origin, its 206 the client.
    has(&l, "no secrets range Range: bytes=0-9");
    has(&l, "no secrets partial HTTP/1.1 206 Partial Content");
}

/// Whether `text` holds `value` once read as base64 (either alphabet,
/// `*` read as `A`, trailing bits ignored) at any offset of any token.
fn decodes_to(text: &str, value: &[u8]) -> bool {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'*' => 0,
            _ => return None,
        }))
    }
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "+/-_*".contains(c)))
        .any(|token| {
            (0..4).any(|skip| {
                let mut out = Vec::new();
                let (mut acc, mut bits) = (0u32, 0);
                for &c in token.as_bytes().iter().skip(skip) {
                    let Some(v) = sextet(c) else { break };
                    acc = (acc << 6) | v;
                    bits += 6;
                    if bits >= 8 {
                        bits -= 8;
                        out.push((acc >> bits) as u8);
                        acc &= (1 << bits) - 1;
                    }
                }
                out.windows(value.len()).any(|w| w == value)
            })
        })
}

/// F4: an origin that stores a request's headers and serves them to a
/// later request (of the same run, or of another run, or over plain
/// `http://` through the proxy) does not hand the command the value:
/// neither raw (Bearer) nor in the `Basic` credential the proxy
/// re-encoded, nor in another alignment (`ab:`); the twin: the origin
/// stored the real value.
#[test]
fn a_stored_credential_served_to_a_later_request_is_masked() {
    let script = r#"
cat > "$D/plainfetch.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        out = open(sys.argv[1] + "/stored", "rb").read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8080), H).serve_forever()
PY
python3 "$D/plainfetch.py" "$D" > /dev/null 2>&1 < /dev/null &
plain=$!
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8080))' 2>/dev/null && break; sleep 0.05; done
T="real-secret-valu""e-42"
INNER='curl --http1.1 -sS -u "me:$TOKEN" https://api.example.com:8443/v1/store >/dev/null
curl --http1.1 -sS -i https://api.example.com:8443/v1/fetch | sed "s/^/fetch basic /"
curl --http1.1 -sS -u "ab:$TOKEN" https://api.example.com:8443/v1/store >/dev/null
curl --http1.1 -sS -i https://api.example.com:8443/v1/fetch | sed "s/^/fetch ab /"
curl --http1.1 -sS -H "Authorization: Bearer $TOKEN" https://api.example.com:8443/v1/store >/dev/null
curl --http1.1 -sS -i https://api.example.com:8443/v1/fetch | sed "s/^/fetch bearer /"
curl --http1.1 -sS -u "me:$TOKEN" https://api.example.com:8443/v1/store >/dev/null
curl --http1.1 -sS -i http://other.example.com:8080/fetch | sed "s/^/plain /"'
TOKEN=$T "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://api.example.com:8443/**' --allow-net other.example.com:8080 -- sh -c "$INNER"
TOKEN=$T "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://api.example.com:8443/**' -- curl --http1.1 -sS -i https://api.example.com:8443/v1/fetch | sed "s/^/later /"
kill $plain 2>/dev/null
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let value = b"real-secret-value-42";
    // The twin: the origin stored the real value, each form.
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(
        log.contains("Basic bWU6cmVhbC1zZWNyZXQtdmFsdWUtNDI="),
        "{log}"
    );
    assert!(
        log.contains("Authorization: Bearer real-secret-value-42"),
        "{log}"
    );
    assert!(decodes_to(&log, b"ab:real-secret-value-42"), "{log}");
    // Served back, in the head and the body: masked.
    has(
        &l,
        "fetch basic Authorization: Basic ********************************",
    );
    has(
        &l,
        "fetch basic X-Stored: Authorization: Basic bWU6U0FOREJPWF9TRUNSRVRf",
    );
    has(&l, "fetch ab Authorization: Basic ");
    has(
        &l,
        &format!("fetch bearer Authorization: Bearer {}", "*".repeat(20)),
    );
    has(
        &l,
        "fetch bearer X-Stored: Authorization: Bearer SANDBOX_SECRET_",
    );
    // Over plain HTTP through the proxy: masked too (the twin: the file
    // the plain origin serves holds the real credential).
    let stored = std::fs::read_to_string(d.path().join("stored")).unwrap_or_default();
    assert!(
        stored.contains("Basic bWU6cmVhbC1zZWNyZXQtdmFsdWUtNDI="),
        "{stored}"
    );
    has(&l, "plain HTTP/1.1 200 OK");
    has(
        &l,
        "plain Authorization: Basic ********************************",
    );
    // A later run, which sent no credential: its value still masked.
    has(&l, "later Authorization: Basic bWU6*");
    has(&l, "later X-Stored: Authorization: Basic bWU6*");
    for line in &l {
        assert!(
            !line.contains("real-secret-value") && !decodes_to(line, value),
            "the value reached the command: {line}"
        );
    }
}

/// F5: an origin reflecting the injected header in its status line's
/// reason phrase and in a header's name: both reach the command with the
/// placeholder; the twin: the origin got the real value.
#[test]
fn a_value_reflected_in_the_reason_phrase_or_a_header_name_is_replaced() {
    let script = r#"
T="real-secret-valu""e-42"
INNER='curl --http1.1 -sS -i -H "Authorization: Bearer $TOKEN" -H "X-Api-Key: $TOKEN" https://api.example.com:8443/v1/reason | sed "s/^/reason /"'
TOKEN=$T "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://api.example.com:8443/**' -- sh -c "$INNER"
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(
        log.contains("origin reason Bearer real-secret-value-42"),
        "{log}"
    );
    has(
        &l,
        "reason HTTP/1.1 401 bad credentials: Bearer SANDBOX_SECRET_",
    );
    has(&l, "reason X-SANDBOX_SECRET_");
    assert!(!l.iter().any(|x| x.contains("real-secret-value")), "{l:#?}");
}

/// A client inside the run that sends `GET PATH` to pkgs.example.com:8443
/// through `CONNECT`, the path's bytes as given; prints the status, the
/// `Sandbox-Admit-With` header and the body.
const PATH_CLIENT: &str = r#"
import http.client, os, ssl, sys
p = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1]
c = http.client.HTTPSConnection(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1]),
    context=ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"]))
c.set_tunnel("pkgs.example.com", 8443)
c.request("GET", sys.argv[1])
r = c.getresponse()
print("status", r.status)
print("admit", r.getheader("Sandbox-Admit-With"))
print("body", r.read().decode().strip())
sys.exit(0 if r.status < 400 else 1)
"#;

/// F1 and F2, through the real proxy and CLI: the rule proposed for a
/// refused request whose path holds `'`, `;` and `$(...)` (in the 403's
/// header, `--explain`'s proposal, `--approval ask`'s no-terminal line) is
/// one shell word: pasted, it is the flag and the rule, and runs nothing.
/// The rule proposed for a literal `/v1/**`, pasted, admits that path and
/// not `/v1/admin/delete`; the twin: the wildcard rule admits it.
#[test]
fn a_proposed_rule_pastes_as_one_word_and_admits_only_what_was_refused() {
    let (out, d) = in_private_net(
        r#"
export XDG_STATE_HOME="$D/state"
cp "$PATH_CLIENT" "$D/path.py"
R() { "$SANDBOX" run --upstream-ca "$D/ca.pem" --allow-request 'GET,HEAD https://pkgs.example.com:8443/simple/**' "$@"; }
words() { tag=$1; eval "set -- $2"; echo "$tag words $#"; for w in "$@"; do echo "$tag word $w"; done; }
BAD="/v1/x';touch\$IFS$D/PWNED;'',\$(touch\$IFS$D/PWNED2)"
R --explain -- python3 "$D/path.py" "$BAD" 2>"$D/explain" > "$D/out"
cat "$D/out" | sed 's/^/client /'
words header "$(sed -n 's/^admit //p' "$D/out")"
words explain "$(grep -m1 '^      to admit it: ' "$D/explain" | sed 's/^      to admit it: //')"
R --approval ask -- python3 "$D/path.py" "$BAD" 2>"$D/ask" </dev/null >/dev/null
words ask "$(grep -m1 'to allow it: ' "$D/ask" | sed 's/.*(to allow it: //; s/)$//')"
if [ -e "$D/PWNED" ] || [ -e "$D/PWNED2" ]; then echo PWNED; fi
R -- python3 "$D/path.py" '/v1/**' > "$D/star"
STAR="$(sed -n 's/^admit //p' "$D/star")"
echo "star proposal $STAR"
eval "set -- $STAR"
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" "$@" -- python3 "$D/path.py" '/v1/**' | sed 's/^/pasted star /'
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" "$@" -- python3 "$D/path.py" /v1/admin/delete | sed 's/^/pasted other /'
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" --allow-request 'GET https://pkgs.example.com:8443/v1/**' -- python3 "$D/path.py" /v1/admin/delete | sed 's/^/glob other /'
"#,
    );
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for f in ["explain", "ask"] {
        eprintln!(
            "{f}: {}",
            std::fs::read_to_string(d.path().join(f)).unwrap_or_default()
        );
    }
    let rule = format!(
        "GET https://pkgs.example.com:8443/v1/x';touch$IFS{0}/PWNED;'',$(touch$IFS{0}/PWNED2)",
        std::fs::canonicalize(d.path()).unwrap().display()
    );
    has(&l, "client status 403");
    for place in ["header", "explain", "ask"] {
        has(&l, &format!("{place} words 2"));
        has(&l, &format!("{place} word --allow-request"));
        assert!(
            l.iter().any(|x| *x == format!("{place} word {rule}")),
            "{place}: {l:#?}"
        );
    }
    assert!(!l.iter().any(|x| x == "PWNED"), "{l:#?}");
    has(
        &l,
        "star proposal --allow-request 'GET https://pkgs.example.com:8443/v1/%2A%2A'",
    );
    has(&l, "pasted star status 200");
    has(&l, "pasted star body origin saw GET /v1/**");
    has(&l, "pasted other status 403");
    has(&l, "glob other status 200");
}

/// Node (a CONNECT of its own, trusting `NODE_EXTRA_CA_CERTS`), `git
/// clone` (dumb and smart HTTP, through `https_proxy`, trusting
/// `GIT_SSL_CAINFO`) and `git push` reach admitted URLs; git's twins outside
/// the rule (another path; a push without POST) are refused and change
/// nothing.
#[test]
fn node_git_clone_and_push_reach_admitted_urls() {
    let script = r#"
mkdir -p "$D/www" "$D/out" && cd "$D/www"
git init -q --bare repo.git
git -C repo.git config http.receivepack false
tmp=$(mktemp -d) && git -C "$tmp" init -q && echo hello > "$tmp/f" && git -C "$tmp" add f
git -C "$tmp" -c user.name=t -c user.email=t@example.com commit -qm one && git -C "$tmp" push -q "$D/www/repo.git" HEAD:refs/heads/main
git -C repo.git symbolic-ref HEAD refs/heads/main && git -C repo.git update-server-info
git -C repo.git config http.receivepack true
cd "$D"
cat > "$D/node.js" <<'JS'
const http = require("http"), tls = require("tls");
const p = new URL(process.env.HTTPS_PROXY);
http.request({ host: p.hostname, port: p.port, method: "CONNECT", path: "pkgs.example.com:8443" })
  .on("connect", (res, sock) => {
    const t = tls.connect({ socket: sock, servername: "pkgs.example.com" }, () =>
      t.write("GET /simple/node HTTP/1.1\r\nHost: pkgs.example.com:8443\r\nConnection: close\r\n\r\n"));
    let d = "";
    t.on("data", (c) => (d += c));
    t.on("end", () => console.log("node", d.split("\r\n\r\n")[1].trim()));
    t.on("error", (e) => console.log("node error", e.message));
  })
  .end();
JS
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" --allow-request 'GET https://pkgs.example.com:8443/simple/**' -- node "$D/node.js"
"$SANDBOX" run -q -w "$D/out" --upstream-ca "$D/ca.pem" --allow-request 'GET https://pkgs.example.com:8443/git/**' -- git clone -q https://pkgs.example.com:8443/git/repo.git "$D/out/c" 2>&1 | sed 's/^/git says /'
cat "$D/out/c/f" | sed 's/^/cloned /'
"$SANDBOX" run -q -w "$D/out" --upstream-ca "$D/ca.pem" --allow-request 'GET https://pkgs.example.com:8443/git/other/**' -- git clone -q https://pkgs.example.com:8443/git/repo.git "$D/out/d" 2>&1 | sed 's/^/twin /'
# The smart protocol: clone, commit, push; the push's twin without POST.
SMART="https://pkgs.example.com:8443/smart/repo.git"
"$SANDBOX" run -q -w "$D/out" --upstream-ca "$D/ca.pem" --allow-request "GET,POST $SMART/**" -- git clone -q "$SMART" "$D/out/s" 2>&1 | sed 's/^/smart clone /'
echo two > "$D/out/s/g" && git -C "$D/out/s" add g && git -C "$D/out/s" -c user.name=t -c user.email=t@example.com commit -qm two
"$SANDBOX" run -q -w "$D/out" --upstream-ca "$D/ca.pem" --allow-request "GET $SMART/**" -- git -C "$D/out/s" push -q origin HEAD:main 2>&1 | sed 's/^/push twin /'
git -C "$D/www/repo.git" log --format=%s main | tr '\n' ' ' | sed 's/^/after twin /'; echo
"$SANDBOX" run -q -w "$D/out" --upstream-ca "$D/ca.pem" --allow-request "GET,POST $SMART/**" -- git -C "$D/out/s" push -q origin HEAD:main 2>&1 | sed 's/^/push /'
git -C "$D/www/repo.git" log --format=%s main | tr '\n' ' ' | sed 's/^/after push /'; echo
"#;
    let (out, _d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    has(
        &l,
        "node origin saw GET /simple/node host=pkgs.example.com:8443",
    );
    has(&l, "cloned hello");
    has(&l, "twin ");
    assert!(
        l.iter().any(|x| x.starts_with("twin") && x.contains("403")),
        "{l:#?}"
    );
    // git push over HTTPS needs POST: refused without it, made with it.
    assert!(!l.iter().any(|x| x.starts_with("smart clone")), "{l:#?}");
    assert!(
        l.iter()
            .any(|x| x.starts_with("push twin") && x.contains("403")),
        "{l:#?}"
    );
    has(&l, "after twin one");
    assert!(!l.iter().any(|x| x.starts_with("after twin two")), "{l:#?}");
    has(&l, "after push two one");
}

/// `--approval ask` (on a pty, `script`) after a refused request offers
/// exactly the rule that admits it; yes re-runs once with it and the
/// request reaches the origin, no (the twin) keeps the refusal.
#[test]
fn approval_admits_the_refused_request_once() {
    let script = r#"
export XDG_STATE_HOME="$D/state"
CMD="$SANDBOX run --approval ask --upstream-ca $D/ca.pem --allow-request 'GET https://pkgs.example.com:8443/simple/**' -- curl -sSf -X POST -d x https://pkgs.example.com:8443/upload"
(sleep 2; printf 'y\n') | script -qec "$CMD" /dev/null | tr -d '\r' | sed 's/^/yes /'
(sleep 2; printf 'n\n') | script -qec "$CMD" /dev/null | tr -d '\r' | sed 's/^/no /'
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    has(
        &l,
        "yes Proposed one-shot escalation: admit the requests POST https://pkgs.example.com:8443/upload (--allow-request 'POST https://pkgs.example.com:8443/upload')",
    );
    has(&l, "yes origin saw POST /upload host=pkgs.example.com:8443");
    has(
        &l,
        "no Proposed one-shot escalation: admit the requests POST",
    );
    assert!(!l.iter().any(|x| x.starts_with("no origin saw")), "{l:#?}");
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert_eq!(log.matches("POST /upload").count(), 1, "{log}");
}

/// A client inside the run that sends a POST whose body carries `$TOKEN`
/// split across two writes (and so across reads, and across chunks when
/// chunked), after 100 kB of filler: `tls HOST:PORT` through `CONNECT`, or
/// `plain HOST:PORT` as an absolute-form request to the proxy. `twin` sends
/// the token with its last character changed. Prints the tag, the status
/// line and the body's first line.
const BODY: &str = r#"
import os, socket, ssl, sys, time
mode, authority, framing, path, tag = sys.argv[1:6]
tok = os.environ["TOKEN"].encode()
if "twin" in tag:
    tok = tok[:-1] + (b"0" if tok[-1:] != b"0" else b"1")
parts = [b"a" * 100000 + b"&x=" + tok[:20], tok[20:] + b"&y=1"]
proxy = os.environ["HTTP_PROXY"].rsplit("/", 1)[1]
host, port = proxy.rsplit(":", 1)
s = socket.create_connection((host, int(port)))
if mode == "tls":
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    s = ctx.wrap_socket(s, server_hostname=authority.split(":")[0])
    target = path
else:
    target = "http://%s%s" % (authority, path)
if framing == "cl":
    s.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % (target, authority, sum(map(len, parts)))).encode())
else:
    s.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" % (target, authority)).encode())
try:
    for p in parts:
        s.sendall(("%x\r\n" % len(p)).encode() + p + b"\r\n" if framing == "chunked" else p)
        time.sleep(0.3)
    if framing == "chunked":
        s.sendall(b"0\r\n\r\n")
except OSError:
    pass
out = b""
while True:
    try:
        b = s.recv(65536)
    except (ssl.SSLError, OSError):
        break
    if not b:
        break
    out += b
lines = out.split(b"\r\n")
print(tag, lines[0].decode(), "|", out.split(b"\r\n\r\n", 1)[-1].split(b"\n")[0].decode()[:300])
"#;

/// A plain HTTP origin on 127.0.0.1:8080: logs each POST it got whole.
const PLAIN_ORIGIN: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if len(body) < n:
            return
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        out = ("plain origin saw POST %s len=%d\n" % (self.path, len(body))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        print(out.decode().strip(), "tail=%r" % body[-60:], flush=True)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8080), H).serve_forever()
"#;

/// A secret's placeholder in the BODY of a request to a host the secret is
/// not for (an intercepted one, Content-Length and chunked; a plain HTTP
/// one), split across reads and chunks after 100 kB, is refused (403 to the
/// command), recorded as an attempted exfiltration, and the origin never
/// gets the request whole; the twins (the token one character off; the
/// placeholder to the secret's own host) reach the origin; root and nobody.
#[test]
fn a_placeholder_in_a_body_is_refused_beside_its_twins() {
    std::fs::write(std::env::temp_dir().join("sandbox-body-client.py"), BODY).unwrap();
    let script = r#"
cp "$TMPDIR_BODY/sandbox-body-client.py" "$D/body.py"
printf '%s' "$PLAIN_ORIGIN" > "$D/plain.py"
python3 "$D/plain.py" > "$D/plain.log" 2>&1 < /dev/null &
plain=$!
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8080))' 2>/dev/null && break; sleep 0.05; done
T="real-secret-valu""e-42"
RULES="--allow-request 'POST https://pkgs.example.com:8443/simple/**' --allow-request 'POST https://api.example.com:8443/**' --allow-net other.example.com:8080"
INNER='for f in cl chunked; do
python3 "$D/body.py" tls pkgs.example.com:8443 $f /simple/$f-$W "$W $f refused"
python3 "$D/body.py" tls pkgs.example.com:8443 $f /simple/$f-twin-$W "$W $f twin"
python3 "$D/body.py" tls api.example.com:8443 $f /v1/$f-own-$W "$W $f own host"
python3 "$D/body.py" plain other.example.com:8080 $f /p/$f-$W "$W $f plain refused"
python3 "$D/body.py" plain other.example.com:8080 $f /p/$f-twin-$W "$W $f plain twin"
done'
eval "TOKEN=$T W=root \"$SANDBOX\" run -q --report \"$D/r.json\" --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- sh -c \"\$INNER\""
cd "$D" && eval "TOKEN=$T W=nobody $NOBODY \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- sh -c \"\$INNER\""
kill $plain 2>/dev/null
"#;
    let script = script
        .replace("$TMPDIR_BODY", &std::env::temp_dir().display().to_string())
        .replace("\"$PLAIN_ORIGIN\"", &format!("'{PLAIN_ORIGIN}'"));
    let (out, d) = in_private_net(&script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    let plain = std::fs::read_to_string(d.path().join("plain.log")).unwrap_or_default();
    for who in ["root", "nobody"] {
        for f in ["cl", "chunked"] {
            has(&l, &format!("{who} {f} refused HTTP/1.1 403 Forbidden | sandbox egress proxy: refused POST https://pkgs.example.com:8443/simple/{f}-{who}: the request body carries the placeholder of the secret TOKEN, which goes only to api.example.com (attempted exfiltration"));
            has(&l, &format!("{who} {f} plain refused HTTP/1.1 403 Forbidden | sandbox egress proxy: refused POST http://other.example.com:8080/p/{f}-{who}: the request body carries the placeholder of the secret TOKEN"));
            // The twins reach their origins whole.
            has(
                &l,
                &format!("{who} {f} twin HTTP/1.1 200 OK | origin saw POST /simple/{f}-twin-{who}"),
            );
            has(
                &l,
                &format!("{who} {f} own host HTTP/1.1 200 OK | origin saw POST /v1/{f}-own-{who}"),
            );
            has(&l, &format!("{who} {f} plain twin HTTP/1.1 200 OK | plain origin saw POST /p/{f}-twin-{who} len=100054"));
            assert!(!log.contains(&format!("/simple/{f}-{who} ")), "{log}");
            assert!(!plain.contains(&format!("/p/{f}-{who} ")), "{plain}");
        }
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("r.json")).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].as_array().unwrap();
    for target in [
        "POST https://pkgs.example.com:8443/simple/cl-root",
        "POST https://pkgs.example.com:8443/simple/chunked-root",
    ] {
        assert!(
            refused.iter().any(|r| r["target"] == target
                && r["reason"]
                    .as_str()
                    .unwrap()
                    .contains("attempted exfiltration")),
            "{target}: {record:#}"
        );
    }
    assert!(
        refused
            .iter()
            .filter(|r| r["target"]
                .as_str()
                .unwrap_or("")
                .contains("other.example.com")
                && r["reason"].as_str().unwrap().contains("request body"))
            .count()
            == 2,
        "{record:#}"
    );
}

/// A secret given with a port goes only to that port of its host: the
/// value reaches the origin on 8443, the placeholder sent to the same host
/// on another intercepted port (9443) is refused and recorded before any
/// connection; a secret bound to a port no rule intercepts refuses the run;
/// root and nobody.
#[test]
fn a_secret_given_with_a_port_goes_to_that_port_only() {
    let script = r#"
T="real-secret-valu""e-42"
RULES="--allow-request 'GET https://api.example.com:8443/**' --allow-request 'GET https://api.example.com:9443/**'"
INNER='curl -sS -H "Authorization: Bearer $TOKEN" https://api.example.com:8443/v1/port | sed "s/^/$W bound port /"
curl -sS -H "Authorization: Bearer $TOKEN" https://api.example.com:9443/v1/port | sed "s/^/$W other port /"'
eval "TOKEN=$T W=root \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com:8443 $RULES -- sh -c \"\$INNER\""
cd "$D" && eval "TOKEN=$T W=nobody $NOBODY \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com:8443 $RULES -- sh -c \"\$INNER\""
TOKEN=$T "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com:9443 --allow-request 'GET https://api.example.com:8443/**' -- true 2>&1 | sed 's/^/unbound /'
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for who in ["root", "nobody"] {
        has(
            &l,
            &format!(
                "{who} bound port origin saw GET /v1/port host=api.example.com:8443 auth=Bearer {}",
                "*".repeat(20)
            ),
        );
        has(&l, &format!("{who} other port sandbox egress proxy: refused GET https://api.example.com:9443/v1/port: the request carries the placeholder of the secret TOKEN, which goes only to api.example.com:8443 (attempted exfiltration)"));
    }
    has(&l, "unbound sandbox: ");
    has(
        &l,
        "is for api.example.com:9443, which no request rule names",
    );
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert_eq!(
        log.matches(
            "origin saw GET /v1/port host=api.example.com:8443 auth=Bearer real-secret-value-42"
        )
        .count(),
        2,
        "{log}"
    );
}

/// G1, G2 (red team round 2), through the real CLI and proxy: an origin
/// reflecting the injected value in a chunked response (chunks of 20, 3,
/// 1 bytes: the value split across them), gzipped or deflated whatever the
/// client accepts (read by `curl --compressed`, or raw bytes gunzipped by
/// the command), chunked and gzipped at once, gives the command the value
/// masked; a `br` response is answered 502 saying why, and recorded; the
/// origin is asked only for `gzip, deflate`. The twins: one chunk is
/// masked as before; an unrelated chunked, gzipped body arrives byte for
/// byte, with and without secrets; without secrets the client's own
/// `Accept-Encoding` goes to the origin and the gzip is relayed as it is.
#[test]
fn a_value_in_chunks_or_compressed_is_masked_and_other_codings_refused() {
    let script = r#"
cat > "$D/plainenc.py" <<'PY'
import gzip, http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        # /<coding>/<chunk size>: a value it stored, as the TLS origin does.
        _, coding, size = self.path.split("/")[:3]
        out = b"stored=Bearer real-secret-valu" + b"e-42\n"
        if coding == "gzip":
            out = gzip.compress(out)
        elif coding == "br":
            out = b"\x0b\x02\x80" + out + b"\x03"
        self.send_response(200)
        if coding != "identity":
            self.send_header("Content-Encoding", coding)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        size = int(size)
        for i in range(0, len(out), size):
            self.wfile.write(b"%x\r\n%s\r\n" % (size if i + size <= len(out) else len(out) - i, out[i:i + size]))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8080), H).serve_forever()
PY
python3 "$D/plainenc.py" > /dev/null 2>&1 < /dev/null &
plain=$!
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8080))' 2>/dev/null && break; sleep 0.05; done
T="real-secret-valu""e-42"
A='https://api.example.com:8443/v1/enc'
INNER='for n in 1000 20 3 1; do curl -sS --compressed -H "Authorization: Bearer $TOKEN" '$A'/identity/$n/auth | sed "s/^/chunks $n /"; done
for c in gzip deflate; do for n in 0 7; do curl -sS --compressed -H "Authorization: Bearer $TOKEN" '$A'/$c/$n/auth | sed "s/^/$c $n /"; done; done
curl -sS -H "Authorization: Bearer $TOKEN" '$A'/gzip/5/auth | gzip -dcf | sed "s/^/raw gzip /"
curl -sS --compressed '$A'/gzip/9/unrelated | sha256sum | sed "s/^/unrelated /"
curl -sS -w " %{http_code}\n" -H "Authorization: Bearer $TOKEN" '$A'/br/0/auth | sed "s/^/br /"
for n in 1000 3; do curl -sS http://other.example.com:8080/identity/$n | sed "s/^/plain chunks $n /"; done
curl -sS --compressed http://other.example.com:8080/gzip/4 | sed "s/^/plain gzip /"
curl -sS -w " %{http_code}\n" http://other.example.com:8080/br/1000 | sed "s/^/plain br /"'
TOKEN=$T "$SANDBOX" run -q --report "$D/r.json" --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://api.example.com:8443/**' --allow-net other.example.com:8080 -- sh -c "$INNER"
grep -o "Content-Encoding (br)[^\"]*" "$D/r.json" | head -1 | sed "s/^/recorded /"
cd "$D" && TOKEN=$T $NOBODY "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://api.example.com:8443/**' -- sh -c "curl -sS --compressed -H \"Authorization: Bearer \$TOKEN\" $A/gzip/3/auth | sed 's/^/nobody gzip chunked /'"
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" --allow-request 'GET https://api.example.com:8443/**' -- sh -c "curl -sS --compressed $A/gzip/9/unrelated | sha256sum | sed 's/^/no secrets unrelated /'; curl -sS $A/gzip/9/unrelated | gzip -t && echo no secrets still gzip"
printf 'the-unrelated-body-0123456789\n%.0s' $(seq 40) | sha256sum | sed "s/^/expected /"
kill $plain 2>/dev/null
"#;
    let (out, d) = in_private_net(script);
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let stars = "*".repeat(20);
    for n in [1000, 20, 3, 1] {
        has(&l, &format!("chunks {n} auth=Bearer {stars}"));
    }
    for c in ["gzip 0", "gzip 7", "deflate 0", "deflate 7", "raw gzip"] {
        has(&l, &format!("{c} auth=Bearer {stars}"));
    }
    has(
        &l,
        "br sandbox egress proxy: refused the response to GET https://api.example.com:8443/v1/enc/br/0/auth: the response's Content-Encoding (br) is not one the proxy decodes",
    );
    has(&l, "br  502");
    has(&l, "recorded Content-Encoding (br)");
    has(&l, &format!("nobody gzip chunked auth=Bearer {stars}"));
    // The plain http:// relay alike.
    for c in ["chunks 1000", "chunks 3", "gzip"] {
        has(&l, &format!("plain {c} stored=Bearer {stars}"));
    }
    has(
        &l,
        "plain br sandbox egress proxy: refused the response to GET http://other.example.com:8080/br/1000: the response's Content-Encoding (br)",
    );
    has(&l, "plain br  502");
    assert!(!l.iter().any(|x| x.contains("real-secret-value")), "{l:#?}");
    let sum = |prefix: &str| {
        l.iter()
            .find_map(|x| x.strip_prefix(prefix))
            .map(|x| x.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_else(|| panic!("no {prefix:?} in {l:#?}"))
    };
    let expected = sum("expected ");
    assert_eq!(sum("unrelated "), expected, "{l:#?}");
    assert_eq!(sum("no secrets unrelated "), expected, "{l:#?}");
    has(&l, "no secrets still gzip");
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(
        log.contains("origin accept-encoding gzip, deflate"),
        "{log}"
    );
    // Without secrets, what curl asked for (it lists more than these).
    assert!(
        log.lines().any(|x| x.starts_with("origin accept-encoding ")
            && x != "origin accept-encoding gzip, deflate"
            && x.contains("gzip")),
        "{log}"
    );
}

/// HTTP/2 (#44): a client that negotiates `h2` with the proxy (curl
/// `--http2`, which says it spoke HTTP/2) has each stream checked as an
/// HTTP/1.1 request: the admitted ones reach the origin (over HTTP/1.1),
/// several on one connection; the refused method, path (plain, with dot
/// segments, percent-encoded) get the 403 and its explanation over
/// HTTP/2 and are recorded; a secret is injected for its host only, its
/// placeholder to another listed host refused and recorded; bodies past
/// the flow-control window pass whole; twenty streams at once; Node's
/// `http2` client too; root and nobody.
#[test]
fn http2_clients_are_checked_as_http1_requests_are() {
    let (out, d) = in_private_net(
        r#"
T="real-secret-valu""e-42"
RULES="--allow-request 'GET,HEAD https://pkgs.example.com:8443/simple/**' --allow-request 'POST https://pkgs.example.com:8443/simple/up' --allow-request 'GET https://api.example.com:8443/**'"
R() { eval "TOKEN=$T \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- \"\$@\""; }
U=https://pkgs.example.com:8443
C="curl -sS --http2"
R $C -w '\nversion %{http_version}\n' $U/simple/pkg/?v=1 | sed 's/^/h2 get /'
R $C -v $U/simple/k1 $U/simple/k2 $U/private 2>&1 | grep -E "^origin saw|Re-using|^sandbox egress|^< HTTP/" | sed 's/^/h2 several /'
R $C -I $U/simple/pkg/ | grep -E '^HTTP/' | sed 's/^/h2 head /'
R $C -Z --parallel-max 20 -w '%{http_version} %{http_code} %{num_connects}\n' $(for i in $(seq 20); do echo $U/simple/par-$i; done) $U/private-par | grep -cE '^(origin saw GET /simple/par-|2 200 [01]$)' | sed 's/^/h2 parallel /'
R $C -Z -w '%{http_code}\n' $U/simple/par-a $U/private-par | grep -E '^[0-9]+$' | sort | tr '\n' ' ' | sed 's/^/h2 parallel codes /'
R $C -i -X POST -d abc $U/simple/pkg/ | grep -iE '^(HTTP/|sandbox-admit-with)' | sed 's/^/h2 post /'
R $C -i $U/private | grep -iE '^(HTTP/|sandbox-admit-with|sandbox egress)' | sed 's/^/h2 private /'
R $C -i --path-as-is $U/simple/../private | grep -E '^HTTP/' | sed 's/^/h2 dots /'
R $C -i --path-as-is $U/simple/%2e%2e/private | grep -E '^HTTP/' | sed 's/^/h2 encoded dots /'
R $C -i --path-as-is $U/simple%2f..%2fprivate | grep -E '^HTTP/' | sed 's/^/h2 encoded slash /'
head -c 300000 /dev/zero | tr '\0' a > "$D/up"
R $C --data-binary @"$D/up" $U/simple/up?length | cut -c1-100 | sed 's/^/h2 upload /'
R sh -c "$C -T - -X POST $U/simple/up?stream < $D/up" | cut -c1-100 | sed 's/^/h2 stream upload /'
R $C -i --data-binary @"$D/up" $U/simple/pkg/ 2>&1 | grep -E '^HTTP/|curl' | sed 's/^/h2 refused upload /'
R sh -c 'curl -sS --http2 -H "Authorization: Bearer $TOKEN" https://api.example.com:8443/v1/me' | sed 's/^/h2 bearer /'
R sh -c 'curl -sS --http2 -H "Authorization: Bearer $TOKEN" '$U'/simple/x -w "\n%{http_code} %{http_version}\n"' | sed 's/^/h2 other host /'
R sh -c 'curl -sS --http2 https://api.example.com:8443/v1/reflect -H "X-Api-Key: $TOKEN"' | grep -i x-api-key | sed 's/^/h2 reflect /'
cat > "$D/node_h2.js" <<'JS'
const http = require("http"), tls = require("tls"), http2 = require("http2");
const p = new URL(process.env.HTTPS_PROXY);
http.request({ host: p.hostname, port: p.port, method: "CONNECT", path: "pkgs.example.com:8443" })
  .on("connect", (res, sock) => {
    const t = tls.connect({ socket: sock, servername: "pkgs.example.com", ALPNProtocols: ["h2"] }, () => {
      const client = http2.connect("https://pkgs.example.com:8443", { createConnection: () => t });
      let left = 2;
      for (const path of ["/simple/node-h2", "/private-node"]) {
        const r = client.request({ ":path": path });
        let status = 0, body = "";
        r.on("response", (h) => (status = h[":status"]));
        r.setEncoding("utf8");
        r.on("data", (c) => (body += c));
        r.on("end", () => {
          console.log("node", t.alpnProtocol, status, body.split("\n")[0]);
          if (--left === 0) client.close();
        });
      }
    });
  })
  .end();
JS
R node "$D/node_h2.js"
R /usr/bin/python3 "$RAW_H2" raw-twin :method=GET :scheme=https :authority=pkgs.example.com:8443 :path=/simple/raw
TOKEN=$T "$SANDBOX" run --report "$D/r.json" --upstream-ca "$D/ca.pem" --secret TOKEN@api.example.com --allow-request 'GET https://pkgs.example.com:8443/simple/**' --allow-request 'GET https://api.example.com:8443/**' -- sh -c 'curl -sS -f --http2 -H "X-Key: $TOKEN" '$U'/simple/leak' > /dev/null 2>"$D/err"
sed 's/^/h2 stderr /' "$D/err"
cd "$D" && eval "TOKEN=$T $NOBODY \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- $C -w '\nversion %{http_version}\n' $U/simple/nobody" | sed 's/^/nobody h2 get /'
cd "$D" && eval "TOKEN=$T $NOBODY \"$SANDBOX\" run -q --upstream-ca \"$D/ca.pem\" --secret TOKEN@api.example.com $RULES -- $C -i -X PUT $U/simple/nobody" | grep -E '^HTTP/' | sed 's/^/nobody h2 put /'
"#,
    );
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    has(
        &l,
        "h2 get origin saw GET /simple/pkg/?v=1 host=pkgs.example.com:8443",
    );
    has(&l, "h2 get version 2");
    // One connection, several streams, each checked.
    has(&l, "h2 several origin saw GET /simple/k1");
    has(&l, "h2 several origin saw GET /simple/k2");
    has(&l, "h2 several * Re-using existing connection");
    has(&l, "h2 several < HTTP/2 403");
    has(
        &l,
        "h2 several sandbox egress proxy: refused GET https://pkgs.example.com:8443/private",
    );
    has(&l, "h2 head HTTP/2 200");
    // Twenty streams at once on one connection: each reached the origin
    // and each answer came over HTTP/2; the refused one beside them.
    has(&l, "h2 parallel 40");
    has(&l, "h2 parallel codes 200 403");
    has(&l, "h2 post HTTP/2 403");
    has(
        &l,
        "h2 post sandbox-admit-with: --allow-request 'POST https://pkgs.example.com:8443/simple/pkg/'",
    );
    has(&l, "h2 private HTTP/2 403");
    has(
        &l,
        "h2 private sandbox-admit-with: --allow-request 'GET https://pkgs.example.com:8443/private'",
    );
    has(&l, "h2 dots HTTP/2 403");
    has(&l, "h2 encoded dots HTTP/2 403");
    has(&l, "h2 encoded slash HTTP/2 403");
    // Past the stream's window (64 KiB): the whole body, in order.
    has(
        &l,
        "h2 upload origin saw POST /simple/up?length host=pkgs.example.com:8443 auth=None body=b'aaaa",
    );
    // A refused request's body does not cost the client its answer.
    has(&l, "h2 refused upload HTTP/2 403");
    // Without a content-length: chunked to the origin.
    has(
        &l,
        "h2 stream upload origin saw POST /simple/up?stream host=pkgs.example.com:8443 auth=None body=b'aaaa",
    );
    has(
        &l,
        &format!(
            "h2 bearer origin saw GET /v1/me host=api.example.com:8443 auth=Bearer {}",
            "*".repeat(20)
        ),
    );
    has(&l, "h2 other host sandbox egress proxy: refused GET https://pkgs.example.com:8443/simple/x: the request carries the placeholder of the secret TOKEN, which goes only to api.example.com (attempted exfiltration)");
    has(&l, "h2 other host 403 2");
    has(&l, "h2 reflect x-api-key: ********************");
    has(
        &l,
        "raw-twin origin saw GET /simple/raw host=pkgs.example.com:8443",
    );
    // Node's http2 client: two streams on one connection, one admitted,
    // one refused with the explanation.
    has(
        &l,
        "node h2 200 origin saw GET /simple/node-h2 host=pkgs.example.com:8443",
    );
    has(
        &l,
        "node h2 403 sandbox egress proxy: refused GET https://pkgs.example.com:8443/private-node",
    );
    has(&l, "h2 stderr sandbox: refused 1 request");
    has(&l, "nobody h2 get origin saw GET /simple/nobody");
    has(&l, "nobody h2 get version 2");
    has(&l, "nobody h2 put HTTP/2 403");
    assert!(!l.iter().any(|x| x.contains("real-secret-value")), "{l:#?}");
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    for refused in ["private", "/simple/x", "/simple/leak"] {
        assert!(!log.contains(refused), "{refused}: {log}");
    }
    assert!(
        log.contains(
            "origin saw GET /v1/me host=api.example.com:8443 auth=Bearer real-secret-value-42"
        ),
        "{log}"
    );
    let whole = format!("body=b'{}'", "a".repeat(300_000));
    for query in ["length", "stream"] {
        assert!(
            log.contains(&format!("origin saw POST /simple/up?{query} ")) && log.contains(&whole),
            "{query}"
        );
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("r.json")).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].as_array().unwrap();
    assert!(
        refused.iter().any(|r| r["syscall"] == "request"
            && r["target"] == "GET https://pkgs.example.com:8443/simple/leak"
            && r["reason"]
                .as_str()
                .unwrap()
                .contains("attempted exfiltration")),
        "{record:#}"
    );
}

/// HTTP/2 request shapes a gateway could pass on two ways are refused,
/// each beside its plain twin (which reaches the origin): duplicate or
/// mismatched content-length, a transfer-encoding field, a CR or NUL in a
/// value, an `:authority` naming another host or disagreeing with `Host`,
/// CONNECT, request trailers, a header list past the bound. None of the
/// refused reaches the origin; the ones the proxy sees are recorded.
#[test]
fn http2_smuggling_shapes_are_refused_beside_their_twins() {
    let (out, d) = in_private_net(
        r#"
R() { "$SANDBOX" run --report "$D/r-$1.json" --upstream-ca "$D/ca.pem" --allow-request 'GET,POST https://pkgs.example.com:8443/simple/**' -- /usr/bin/python3 "$RAW_H2" "$@" 2>&1; }
A=":method=POST :scheme=https :authority=pkgs.example.com:8443"
G=":method=GET :scheme=https :authority=pkgs.example.com:8443"
R twin-length $A :path=/simple/twin-length content-length=3 DATA=abc
R dup-length $A :path=/simple/bad-dup content-length=3 content-length=3 DATA=abc
R long-length $A :path=/simple/bad-long content-length=5 DATA=abc
R short-length $A :path=/simple/bad-short content-length=2 DATA=abc
R twin-chunked $A :path=/simple/twin-chunked DATA=ab DATA=c
R te-chunked $A :path=/simple/bad-te transfer-encoding=chunked DATA=abc
R te-gzip $G :path=/simple/bad-tegzip te=gzip
R twin-header $G :path=/simple/twin-header x-a=12
R cr-value $G :path=/simple/bad-cr 'x-a=1\r2'
R lf-value $G :path=/simple/bad-lf 'x-a=1\n2'
R nul-value $G :path=/simple/bad-nul 'x-a=1\x002'
R upper-name $G :path=/simple/bad-upper X-A=1
R other-authority :method=GET :scheme=https :authority=other.example.com:8443 :path=/simple/bad-authority
R twin-host $G :path=/simple/twin-host host=pkgs.example.com:8443
R host-disagrees $G :path=/simple/bad-host host=other.example.com:8443
R connect :method=CONNECT :authority=pkgs.example.com:8443
R trailers $A :path=/simple/bad-trailers DATA=abc TRAILER=x-t=1
R expect-continue $A :path=/simple/expect expect=100-continue AWAIT DATA=abc
R expect-refused :method=PUT :scheme=https :authority=pkgs.example.com:8443 :path=/simple/bad-expect expect=100-continue AWAIT DATA=abc
WAIT=2 R length-open $A :path=/simple/bad-open content-length=3 DATA=abc OPEN
R trailers-streamed $A :path=/simple/bad-trailers-streamed DATA=abc SLEEP=0.3 TRAILER=x-t=1
R long-streamed $A :path=/simple/bad-long-streamed content-length=5 DATA=abc SLEEP=0.3 DATA=def
R twin-streamed $A :path=/simple/twin-streamed content-length=6 DATA=abc SLEEP=0.3 DATA=def
R http-scheme :method=GET :scheme=http :authority=pkgs.example.com:8443 :path=/simple/bad-scheme
R private $G :path=/private
R twin-big-field $G :path=/simple/twin-big x-big=REPEAT:12000:a
R big-field $G :path=/simple/bad-big x-big=REPEAT:20000:a
R bomb $G :path=/simple/bad-bomb BOMB
R noauth-host :method=GET :scheme=https :path=/simple/bad-noauth host=pkgs.example.com:8443
R dup-path $G :path=/simple/bad-dup-path :path=/simple/bad-dup-path2
R late-pseudo :method=GET :scheme=https x-a=1 :authority=pkgs.example.com:8443 :path=/simple/bad-late
R connection-field $G :path=/simple/bad-connection connection=close
R upgrade-field $G :path=/simple/bad-upgrade upgrade=websocket
cd "$D"
N() { $NOBODY "$SANDBOX" run -q --upstream-ca "$D/ca.pem" --allow-request 'GET,POST https://pkgs.example.com:8443/simple/**' -- /usr/bin/python3 "$RAW_H2" "$@" 2>&1; }
N nobody-twin $A :path=/simple/nobody-twin content-length=3 DATA=abc
N nobody-dup-length $A :path=/simple/bad-nobody-dup content-length=3 content-length=3 DATA=abc
N nobody-trailers $A :path=/simple/bad-nobody-trailers DATA=abc TRAILER=x-t=1
N nobody-cr-value $G :path=/simple/bad-nobody-cr 'x-a=1\r2'
S() { $NOBODY "$SANDBOX" run --explain --upstream-ca "$D/ca.pem" --allow-request 'GET,POST https://pkgs.example.com:8443/simple/**' -- /bin/sh -c '/usr/bin/python3 "$0" "$@"; exit 3' "$RAW_H2" "$@" 2>&1 | sed "s/^/$1 said /"; }
S nobody-summary-cr $G :path=/simple/bad-nobody-summary-cr 'x-a=1\r2'
S nobody-summary-te $G :path=/simple/bad-nobody-summary-te te=gzip
S nobody-summary-twin $G :path=/simple/nobody-summary-twin
"#,
    );
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{l:#?}");
    for twin in ["twin-length", "twin-chunked", "twin-header", "twin-host"] {
        has(&l, &format!("{twin} origin saw"));
    }
    has(&l, "twin-length origin saw POST /simple/twin-length host=pkgs.example.com:8443 auth=None body=b'abc'");
    has(&l, "twin-chunked origin saw POST /simple/twin-chunked host=pkgs.example.com:8443 auth=None body=b'abc'");
    // Refused by the proxy: the explanation, recorded.
    for (label, why) in [
        ("dup-length", "more than one content-length"),
        (
            "other-authority",
            "the Host header names \"other.example.com:8443\"",
        ),
        ("host-disagrees", "disagree"),
        ("connect", "CONNECT"),
        ("trailers", "request trailers"),
        ("trailers-streamed", "request trailers"),
        ("http-scheme", "the :scheme \"http\""),
        ("private", "no request rule admits it"),
        // R9 F3: not a false `:scheme ""`.
        ("noauth-host", "no :authority (HTTP/2)"),
    ] {
        assert!(
            l.iter().any(
                |x| x.starts_with(&format!("{label} sandbox egress proxy: refused"))
                    && x.contains(why)
            ),
            "{label}: {l:#?}"
        );
        let report = std::fs::read_to_string(d.path().join(format!("r-{label}.json"))).unwrap();
        let report: serde_json::Value = serde_json::from_str(&report).unwrap();
        let refused = report["mediation"]["refused"].as_array().unwrap();
        assert!(
            refused
                .iter()
                .any(|r| r["reason"].as_str().unwrap().contains(why)),
            "{label}: {report:#}"
        );
    }
    // Refused by the h2 crate before the proxy reads the request: a
    // connection-specific field resets the stream (RST_STREAM
    // PROTOCOL_ERROR, 1), a field the HPACK decoder cannot read as one
    // ends the connection (GOAWAY PROTOCOL_ERROR).
    for label in ["te-chunked", "te-gzip"] {
        has(&l, &format!("{label} reset 1"));
    }
    for label in ["cr-value", "lf-value", "nul-value", "upper-name"] {
        has(&l, &format!("{label} goaway 1"));
    }
    for label in [
        "connection-field",
        "upgrade-field",
        "dup-path",
        "late-pseudo",
    ] {
        assert!(
            l.iter()
                .any(|x| x == &format!("{label} reset 1") || x == &format!("{label} goaway 1")),
            "{label}: {l:#?}"
        );
    }
    // An HPACK list bomb: the crate ends the connection (GOAWAY
    // ENHANCE_YOUR_CALM, 11).
    has(&l, "bomb goaway 11");
    // R9 F2: each of them recorded as malformed HTTP/2 (the proxy writes
    // the crate's RST_STREAM or GOAWAY); none of the twins is refused.
    let report = |label: &str| -> serde_json::Value {
        let report = std::fs::read_to_string(d.path().join(format!("r-{label}.json"))).unwrap();
        serde_json::from_str(&report).unwrap()
    };
    for label in [
        "te-chunked",
        "te-gzip",
        "cr-value",
        "lf-value",
        "nul-value",
        "upper-name",
        "connection-field",
        "upgrade-field",
        "dup-path",
        "late-pseudo",
        "big-field",
        "bomb",
    ] {
        let report = report(label);
        let refused = report["mediation"]["refused"].as_array().unwrap();
        assert!(
            refused.len() == 1
                && refused[0]["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("malformed HTTP/2 from the command: "),
            "{label}: {report:#}"
        );
    }
    assert!(report("bomb").to_string().contains("ENHANCE_YOUR_CALM"));
    assert!(report("big-field").to_string().contains("431"));
    for twin in [
        "twin-length",
        "twin-chunked",
        "twin-header",
        "twin-host",
        "twin-big-field",
    ] {
        let report = report(twin);
        let refused = report["mediation"]["refused"].as_array().unwrap();
        assert!(refused.is_empty(), "{twin}: {report:#}");
    }
    // DATA that does not add up to the content-length: the h2 crate
    // resets the stream, the proxy records it.
    for label in ["long-length", "short-length"] {
        has(&l, &format!("{label} reset 1"));
        let report = std::fs::read_to_string(d.path().join(format!("r-{label}.json"))).unwrap();
        assert!(
            report.contains("do not add up to the content-length"),
            "{label}: {report}"
        );
    }
    // A header list past the bound (16 KiB, a head's): the h2 crate
    // answers 431 itself (a response without body), nothing reaches the
    // checker; the twin, 12 KB, passes.
    has(&l, "twin-big-field origin saw GET /simple/twin-big");
    assert!(l.iter().any(|x| x == "big-field "), "{l:#?}");
    // A client that waits for `100 Continue` before its body gets it once
    // the request is admitted, then its answer; the twin, refused, gets
    // no 100, only the refusal.
    has(&l, "expect-continue informational 100");
    has(
        &l,
        "expect-continue origin saw POST /simple/expect host=pkgs.example.com:8443 auth=None body=b'abc'",
    );
    assert!(
        !l.iter()
            .any(|x| x.starts_with("expect-refused informational")),
        "{l:#?}"
    );
    has(&l, "expect-refused sandbox egress proxy: refused PUT");
    // All of the content-length sent, the stream left open: nothing
    // reaches the origin before its end. A body streamed past the early
    // bytes: trailers, or DATA past the content-length, and the request
    // never completes there; the twin, streamed whole, does.
    has(&l, "length-open closed");
    has(&l, "long-streamed reset 1");
    has(
        &l,
        "twin-streamed origin saw POST /simple/twin-streamed host=pkgs.example.com:8443 auth=None body=b'abcdef'",
    );
    // As nobody, the same.
    has(&l, "nobody-twin origin saw POST /simple/nobody-twin");
    has(&l, "nobody-dup-length sandbox egress proxy: refused POST https://pkgs.example.com:8443/simple/bad-nobody-dup: more than one content-length");
    has(&l, "nobody-trailers sandbox egress proxy: refused POST https://pkgs.example.com:8443/simple/bad-nobody-trailers: request trailers");
    has(&l, "nobody-cr-value goaway 1");
    // As nobody, the run's explanation (its command failed) says so; the
    // twin's refused nothing.
    for label in ["nobody-summary-cr", "nobody-summary-te"] {
        assert!(
            l.iter().any(|x| x.starts_with(&format!("{label} said "))
                && x.contains("malformed HTTP/2 from the command")),
            "{label}: {l:#?}"
        );
    }
    has(
        &l,
        "nobody-summary-twin said nobody-summary-twin origin saw GET /simple/nobody-summary-twin",
    );
    assert!(
        l.iter()
            .any(|x| x.starts_with("nobody-summary-twin said sandbox: explain")),
        "{l:#?}"
    );
    assert!(
        !l.iter().any(|x| x.starts_with("nobody-summary-twin said")
            && (x.contains("refused request") || x.contains("malformed"))),
        "{l:#?}"
    );
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(!log.contains("bad-") && !log.contains("private"), "{log}");
}
