//! A local egress proxy for confined commands: HTTP `CONNECT`, plain HTTP
//! forwarding and SOCKS5 on one loopback port, admitting only the
//! destinations the [`EgressRules`] list (host names or IP networks, see
//! [`EgressRule`]).
//!
//! ```no_run
//! use sandbox_proxy::{Proxy, ProxyOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rules = vec!["example.com:443".parse()?, "*.example.org:443".parse()?];
//! let mut proxy = Proxy::start(rules, ProxyOptions::default())?;
//! // Give the command proxy.env() and let its connect broker admit exactly
//! // proxy.net_rule(); run it; then:
//! proxy.shutdown();
//! for refused in proxy.refusals() {
//!     eprintln!("refused {refused}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What it does
//! [`Proxy::start`] binds `127.0.0.1:0` and serves each connection on its own
//! thread (std threads, blocking sockets). The first byte tells the protocol:
//! `0x05` is SOCKS5, anything else HTTP.
//! * **HTTP `CONNECT host:port`**: checked, connected, answered
//!   `200 Connection established`, then bytes are relayed both ways.
//! * **HTTP forward** (`GET http://host:port/path HTTP/1.1`): checked,
//!   connected, the request line rewritten to origin form, `Host` set to the
//!   URI's authority, hop-by-hop headers dropped (`Connection`, `Keep-Alive`,
//!   `Proxy-Connection`, `Proxy-Authorization`, `Upgrade` and those
//!   `Connection` names), `Connection: close` added; the body and the
//!   response are relayed as bytes. One request per client connection: the
//!   origin closes after its response, and so does the proxy. Only `http://`
//!   URIs are forwarded (HTTPS goes through `CONNECT`).
//! * **SOCKS5** (RFC 1928): the no-authentication method only (others get
//!   `0xFF`), the `CONNECT` command only (`BIND` and `UDP ASSOCIATE` get
//!   `0x07`), IPv4, IPv6 and domain-name addresses; the proxy resolves names
//!   (`socks5h` semantics). A refusal is `0x02` (not allowed by ruleset); an
//!   unreachable destination `0x03`, `0x04` or `0x05`. Success carries the
//!   proxy's bound address towards the destination.
//!
//! * **Intercepted hosts** (Linux; [`ProxyOptions::interception`]): a
//!   `CONNECT` to a host and port a per-request rule names
//!   ([`sandbox_core::RequestRule`]) is answered `200` by the proxy itself,
//!   whatever the egress rules say. It terminates the command's TLS with a
//!   leaf certificate for that host from the run's CA (made per host on
//!   demand; the CA's key lives only in this process's memory, its
//!   certificate is name-constrained to the intercepted hosts), reads one
//!   HTTP/1.1 request (`httparse`), refuses shapes a parser could read two
//!   ways (below), normalises the path
//!   ([`sandbox_core::request::normalize_path`]) and checks method and path
//!   against the rules. An admitted request goes to the origin over the
//!   proxy's own TLS connection (`rustls`, verified against the system roots
//!   or the operator's `--upstream-ca` file), its path normalised, hop-by-hop
//!   headers dropped, `Host` the authority `CONNECT` named, the body framed
//!   by the proxy (exactly `Content-Length` bytes, or the chunks re-encoded;
//!   a body with trailers refused), `Connection: close` (a new origin connection per
//!   request); the response is relayed, and the client's connection carries
//!   its next request (checked as the first) only when that response was
//!   framed for it (no body, or one `Content-Length` relayed whole), else
//!   it ends. A refused request gets `403` with
//!   a `Sandbox-Admit-With: --allow-request '...'` header and a body naming
//!   the rule that would admit it (its value one shell word,
//!   [`sandbox_core::request::flag`]), and is kept in [`Proxy::refusals`]
//!   ([`RefusalReason::Request`]). Refused shapes (`400`, `501`): a NUL, a CR
//!   without LF or LF without CR in the head, a folded header line, two
//!   `Content-Length`s, `Transfer-Encoding` with `Content-Length` or other
//!   than exactly `chunked`, two `Host`s or one naming another authority, a
//!   target not in origin form, HTTP/1.0. A client that pins certificates
//!   fails its handshake (closed, nothing sent upstream; a certificate
//!   alert it sends is recorded, [`RefusalReason::Request`] with no
//!   method). A SOCKS5
//!   `CONNECT` to such a host is intercepted the same (after the success
//!   reply); plain `http://` requests to it are not: the egress rules decide
//!   them as any other.
//!
//! A refusal answers `403 Forbidden` (HTTP) with a one-line body naming
//! `host:port` and why, and is kept in [`Proxy::refusals`]; a malformed
//! request gets `400`, a request head over the size limit `431`, a head not
//! complete in time `408`, a destination that cannot be resolved or reached
//! `502`.
//!
//! # How a destination is admitted
//! A host that is neither an IP literal nor a host name (a byte other than
//! a letter, digit, `-`, `_` or `.`, an empty label, a label past 63 bytes)
//! is refused first ([`RefusalReason::NotAHostName`]): no rule, question,
//! lookup or proposal is made of it.
//! As [`EgressRule`] describes: an IP literal by IP rules only; a name only
//! by a name rule (a name no rule lists is refused before it is resolved);
//! the addresses a listed name resolves to (system resolver, `getaddrinfo`)
//! are all admitted for an exact rule, and for a wildcard rule only those
//! outside the special ranges ([`sandbox_core::net::is_special`]: the IANA
//! special-purpose registries, loopback, private, link-local, documentation,
//! NAT64 and 6to4 forms of those, ...) and other than this host's own
//! addresses, unless an IP rule admits them too. The host's own addresses
//! ([`sandbox_core::net::HostAddrs`]) are every address configured on one of
//! its interfaces, read with `getifaddrs(3)` once, when the proxy starts
//! with a wildcard rule or a [`Decider`] (an address configured later is not known; a proxy
//! that cannot read them does not start, [`ProxyError::Interfaces`]); so a
//! name under a wildcard that resolves to the host's public address does not
//! reach a service bound to `0.0.0.0` or `[::]`. Each admitted address is
//! tried in turn. The proxy's own address is never a destination.
//!
//! # Asking while the connection waits
//! With a [`Decider`] ([`ProxyOptions::decider`], or
//! [`EgressOptions::decider`]), a destination no egress rule lists (a name
//! or an IP literal) and an intercepted request no request rule admits are
//! held on their connection's thread while the decider is asked
//! ([`Pending`]); it answers a [`Reply`] with a [`Decision`] (once,
//! session, deny) within [`Decider::hold_limit`], else the refusal stands.
//! Nothing is looked up before the decider admits it: a name is asked
//! about by name alone ([`Pending::Connect::addresses`] `None`), so a name
//! it refuses (or one refused unasked because [`ProxyOptions::max_held`]
//! questions wait) never reaches a resolver, whatever the name encodes. Once admitted the name is
//! resolved, once: when every address is non-local the connection goes to
//! those; when one is local (special-range or this host's own) the decider
//! is asked again, with the addresses (`resolution`), and the connection
//! goes to them only on a second yes. A name that resolves elsewhere by
//! then (DNS rebinding) reaches nothing new. An IP literal is asked about
//! once, naming itself and whether it is local.
//!
//! # Limits
//! Request heads are bounded ([`ProxyOptions::max_head_bytes`], 16 KiB) and
//! must arrive within [`ProxyOptions::head_timeout`] (30 s), so a stuck
//! client cannot pin a thread; at most [`ProxyOptions::max_connections`]
//! (256) connections are served at once, further ones are closed at once.
//! All the egresses of one process ([`Egress::start`]: a runner hosts a
//! session's shared run's, each kept command's, each nested run's) also
//! share one budget, sized once from the process's soft descriptor limit:
//! 8 descriptors a connection, 256 and a quarter of the limit (at most
//! half) kept for the rest of the runner (broker, resolvers, launches),
//! which no proxy takes. Each proxy sets aside an eighth of the budget
//! (at most 16) for its own connections when it starts, so one that
//! fills the rest (a kept command's) leaves an earlier one (a session's
//! shared run's) its own; a connection over the budget is closed at once
//! too. An established tunnel has no idle
//! timeout while its client's side is open (long downloads are
//! legitimate); once the client has ended its side (end of stream, a
//! half-close, its exit) the upstream may stay silent 30 s at most, then
//! the tunnel is ended; the same holds for a plain `http://` request's
//! relay and an intercepted request's response (whose origin is otherwise
//! cut after 300 s of silence). Neither is a refusal: the run's record
//! counts both (`Mediation::egress_closed_at_limit`,
//! `Mediation::egress_cut_silent`), and the CLI says them in one line. [`Proxy::shutdown`] ends every tunnel, and a
//! session's [`EgressTap::take`] those of the command that ended.
//!
//! # Who is served
//! Any local process may connect to `127.0.0.1`: a run with full network,
//! an unconfined process of any user, a run whose IP rules admit loopback.
//! A run's proxy ([`ProxyOptions::peers`], which [`Egress::start`] always
//! sets) serves only that run's processes: on accept, before a byte is
//! read or a slot taken, the kernel is asked who made the client's socket
//! (`SOCK_DIAG_BY_FAMILY` lookup of its exact TCP 4-tuple, sock_diag(7),
//! which needs no privilege): made in the run's cgroup or one beneath it
//! (`INET_DIAG_CGROUP_ID`, the cgroup v2 directory's inode), or, for a run
//! held by its process group (no cgroup: unprivileged without delegation)
//! or on a kernel before 5.9, owned by the uid the command runs as. Any
//! other client, and one that cannot be looked up, is closed at once:
//! never served, asked about ([`Decider`]) or recorded as a refusal, only
//! counted (`Mediation::egress_foreign_closed`). Held by its process group,
//! a run cannot tell its own processes from the same user's others (no
//! per-run kernel identity of a socket is readable unprivileged), so those
//! are served as the run's. The run's resolver does the same over TCP
//! ([`dns::DnsServer::serve_only`]); over UDP it answers in the run's own
//! network namespace ([`island`]), unchecked per sender: a process that
//! can enter that namespace (root; the runner's user for an unprivileged
//! run's) is answered, and its refused names recorded, as the run's. The
//! check costs about 3 µs a connection
//! (debug build, `peer::tests::the_check_costs_microseconds`). Not on
//! macOS: there any local process is served.
//!
//! # Wiring it into a run
//! The proxy runs in the unconfined runner. The confined command must reach
//! the network only through it:
//! 1. [`Proxy::start`] before spawning.
//! 2. Network on, and the connect broker (`sandbox_broker::BrokerRules::with_allow_net`)
//!    admitting exactly [`Proxy::net_rule`] (`127.0.0.1:PORT`), nothing else:
//!    the proxy then is the only destination the command reaches directly,
//!    and every other connect is refused by the broker. Without that broker
//!    rule the proxy constrains nothing: a command may ignore proxy variables.
//! 3. The command's environment gets [`Proxy::env`]; once the run's
//!    containment is made, [`RunPeers::set`] says whose clients to serve.
//! 4. After the process tree ended, [`Proxy::shutdown`]; [`Proxy::refusals`]
//!    are denial evidence for the outcome record.
//!
//! [`Egress`] is that wiring for one run, from its policy: steps 1, 3 and
//! 4, and the resolver below, whose route the broker gets
//! ([`Egress::dns_route`]).
//!
//! Tools that ignore proxy variables fail closed (their direct connects are
//! refused by the broker). Go's `net/http` never proxies `localhost` and
//! loopback addresses (its documented special case), so such a request is
//! a direct connect, refused the same way. UDP (QUIC, DNS) is not proxied.
//!
//! # The run's resolver
//! [`dns::DnsServer`] answers DNS over TCP on another loopback port for the
//! programs that resolve names themselves; the broker makes every TCP
//! connect to port 53 to it ([`sandbox_core::DnsRoute`]), and admits
//! connects by IP to the addresses it pinned ([`sandbox_core::Pins`]). On
//! Linux it also answers over UDP in the run's datagram namespace
//! ([`island`]), where the broker makes the command's IP datagram sockets.
//!
//! # Threat table
//! The confined command is hostile; both servers run unconfined in the
//! runner, so each input is the command's.
//!
//! | Entry point | What the caller controls | Kept safe by | Attacked by |
//! |---|---|---|---|
//! | proxy request head (HTTP, SOCKS5) | host, port, head bytes, timing | a name no rule lists is refused before it is resolved; heads bounded in size and time; at most 256 connections a proxy, and all of a process's egresses (a runner's shared, kept and nested runs) share one budget from its descriptor limit less 256 and a quarter of it kept for the broker, resolvers and launches (8 a connection), so a run's connections cannot take the runner's descriptors, and each proxy keeps an eighth of the budget (at most 16) of its own, so a kept command filling the rest leaves the session's shared proxy its places | `tests/proxy.rs` (refusals, limits, slow heads), `state::tests::two_proxies_share_the_process_budget`, `tests/tests/it/fd_limit.rs` |
//! | who connects (any local process may reach `127.0.0.1:PORT`: a run with full network, an unconfined one of any user) | the client socket: its creator's cgroup and uid, its 4-tuple, when it connects (before the run starts, while it runs) | a run's proxy and resolver (TCP) serve only its processes: on accept, before a byte, slot, question or record, the socket is looked up by its exact 4-tuple (sock_diag) and must have been made in the run's cgroup or beneath it (its id the directory's inode; ids never reused), or without a cgroup (process-group containment, kernel before 5.9) owned by the command's uid; any other, a socket not found, a listener's or time-wait answer, or no identity yet (before the launch) is closed unread and only counted (`egress_foreign_closed`); same-user processes are served as the run's in process-group mode (documented) | `peer::tests`, `tests/tests/it/egress_peers.rs` (this process, a full-network run as root and as nobody; session twin with `--approval channel`) |
//! | proxy destination resolution | the name's DNS answers (rebinding) | wildcard names never reach special or own addresses; each address checked before connect | `tests/proxy.rs` wildcard and host-address tests |
//! | tunnel first flight (`sni.rs`): a `CONNECT` or SOCKS tunnel to a port a request rule intercepts on some host | every byte of the ClientHello, how it is split over records and reads, when it comes, whether the server speaks first | a TLS ClientHello must ask (SNI) for the tunnel's own host (an IP-literal tunnel: for no intercepted one) and not hide it (ECH, ESNI); a strict hand parser reading each record once as the flight grows: whole within 32 KiB over any record split, only handshake records, no repeated extension, one `host_name` that is a host name; a handshake record that does not parse, grow whole within 192 KiB or arrive by the head timeout refused (TLS alert, recorded); an SSLv2-format hello counts as one without a name; a first record of another TLS type (alert, change_cipher_spec, application data, heartbeat, version 3.x: rustls and Go skip a warning alert before the hello) refused; not TLS, or a server speaking first, passes; what TLS carries (`Host`) is not seen (documented) | `sni::tests` (split at every byte and over records, an alert or other record before the hello beside non-TLS bytes starting 0x14-0x18, a 1-byte-record 32 KiB hello in linear steps, each malformed shape beside its twin, real sockets: pieces, half a hello, server first, silence), `tests/tests/it/intercept_routes.rs` |
//! | intercepted names and the addresses they share (`sandbox_core::Pins`) | any `--allow-net` rule covering an intercepted host (exact, wildcard, the operator's), the names it asks the resolver for, another name at the intercepted host's address | an intercepted name is never answered or pinned, on any port (`NXDOMAIN`, recorded); an exact rule for the same host and port refused at policy resolution; an address where the resolver found an intercepted host (`/etc/hosts`, its lookup at most a minute old) admits no direct connect at that host's intercepted ports (best effort: another resolver's answer is not seen), and a direct connect refused at such an address (any port) names that host so `--explain` proposes no IP rule for it, and the proxy asks no [`Decider`] about an IP literal there ([`RefusalReason::InterceptedAddress`]); through the proxy, an intercepted host at a port no request rule names is reached only where an exact `--allow-net HOST:PORT` lists it (a wildcard, every-port or operator rule does not count: [`RefusalReason::InterceptedElsewhere`]) | `sandbox_core` `pins` and `policy` tests, `dns::tests`, `tests/tests/it/intercept_routes.rs` |
//! | resolver query (`dns.rs`) | every byte of the message, how many connections, idling | one question, labels bounded, no compression followed; unlisted names `NXDOMAIN` before any lookup; 32 connections, 10 s idle | `dns::tests`, `tests/tests/it/dns.rs` |
//! | pinned answers | which listed names it asks for, when | pins only addresses [`sandbox_core::Pins::answerable`] admits; expire after 60 s (at most 300 s); at most 4096; admitted only at the ports the name's rules list | `sandbox_core` `pins` tests, `tests/tests/it/dns.rs` |
//! | the redirect of port 53 | the destination address, the socket | the broker reads the address once and connects the caller's socket itself; TCP only (UDP goes to the datagram namespace) | `tests/tests/it/dns.rs` |
//! | resolver datagram (`dns.rs`, UDP) | every byte, the source address and port, the rate | as a TCP query; answers at most 512 bytes (else truncated, TC set); one thread per socket, no state kept per sender | `dns::tests::datagrams_are_answered_from_the_address_asked_and_truncated_past_512_bytes`, `tests/tests/it/dns.rs` |
//! | the datagram namespace (`island.rs`) | every datagram of its sockets, any address, port, option or sending call; how many sockets it asks for | the kernel routes a socket's datagrams in the namespace it was made in (no check to race); only loopback there, every address local; the helper reads fixed 12-byte requests from the runner alone (a socket pair), holds no other fd, dies with the runner; at most [`island::socket_bound`] of the run's sockets exist at once (their buffers are not charged to the run's cgroup: the bound keeps their queues within [`island::SOCKET_MEMORY`]), counted by the namespace's own `sockets: used` | `island::tests`, `tests/tests/it/dns.rs` (`no_datagram_reaches_anything_but_the_runners_resolver`, `a_run_holds_a_bounded_number_of_datagram_sockets`) |
//! | intercepted TLS (`rustls` server side) | the ClientHello and every TLS record, SNI, ALPN, timing | rustls (memory-safe, no renegotiation); the leaf is chosen by the `CONNECT` host, never by SNI; ALPN offers `h2` then `http/1.1` (no ALPN: HTTP/1.1); a handshake bounded by the head timeout | `tests/tests/it/intercept.rs` (clients trusting the run CA; a pinning client fails closed; `http2_clients_are_checked_as_http1_requests_are`) |
//! | intercepted request head (`intercept/exchange.rs`, `httparse`) | every byte of the head, pipelined bytes, the body and its framing | heads bounded in size and time; the raw head must be plain CRLF lines (no NUL, bare CR or LF, obs-fold) before httparse reads it; one `Content-Length`, no `Transfer-Encoding` beside it, only `chunked`, one `Host` naming the `CONNECT` authority, origin form only; hop-by-hop and forwarding headers dropped, and every header whose name holds a `_` (`SCRIPT_NAME`: gunicorn <= 21.2 strips it from `PATH_INFO`; nginx's `underscores_in_headers off`), a placeholder in one never written; the body framed by the proxy; every request on a connection checked, the connection kept only after a response framed by `Content-Length` (relayed whole) or without body | `intercept::exchange::tests`, `tests/tests/it/intercept.rs` (`smuggling_shapes_are_refused_beside_their_twins`) |
//! | intercepted HTTP/2 (`intercept/h2.rs`, the `h2` crate on a tokio current-thread runtime made per h2 connection) | every frame: HEADERS/CONTINUATION and HPACK, pseudo-headers, DATA and their sizes, trailers, SETTINGS, window updates, resets, how many streams at once | the `h2` crate parses frames and HPACK and refuses malformed ones itself, before the proxy sees a request (a CR, LF or NUL in a field, an upper-case name: the connection ends, GOAWAY PROTOCOL_ERROR; a connection-specific field, a `te` other than `trailers`, pseudo-headers missing, repeated or misplaced: the stream is reset, PROTOCOL_ERROR; a header list past 16 KiB: its 431; an HPACK list bomb or a flood: GOAWAY ENHANCE_YOUR_CALM; extended CONNECT not enabled): nothing of it reaches the checker, and the proxy records it from the frames it writes, once a connection ("malformed HTTP/2 from the command", no method or path); each stream becomes one canonical HTTP/1.1 request (`Host` from `:authority`, `cookie` fields joined, the body framed with the client's `content-length` or chunked) fed through a socket pair to the one checker (`exchange`), which reads it as it reads any client's, so every rule, normalisation, override, placeholder, injection, mask, record and approval applies unchanged; refused before it, recorded and answered with the explanation as an h2 response: `CONNECT`, no `:authority`, a `:scheme` other than `https`, user information in `:authority`, `:authority` and `Host` disagreeing, more than one `Host` or `content-length`, connection-specific fields (a second line: the crate resets them first), request trailers, DATA not adding up to `content-length` (reset, recorded): what would complete the request at the origin (the last chunk, or the DATA reaching `content-length`) is held back until the stream's end shows neither, so such a request never completes there, and a body that ends within its first 64 KiB is checked whole before the checker sees the head; `expect: 100-continue` answered 100 only once the checker admitted the request; at most 100 streams a connection, each taking one of the proxy's connection slots (`max_connections` and the process budget; over them `REFUSED_STREAM`); header list bounded as a head (16 KiB; past it the h2 crate answers 431, recorded as above); a stream whose whole `content-length` came but which stays open is answered 408 and recorded after the head timeout; windows of 64 KiB a stream and 1 MiB a connection, 64 KiB queued a stream; no stream for the head timeout closes it; responses: the checker's HTTP/1.1 head read back (64 KiB at most, 1xx dropped, connection-specific fields dropped, a field h2 cannot carry dropped, a transfer coding other than `chunked` reset), the body cut short by the origin reset (never ended as whole); upstream stays HTTP/1.1 | `intercept::h2::tests`, `tests/tests/it/intercept.rs` (`http2_clients_are_checked_as_http1_requests_are`, `http2_smuggling_shapes_are_refused_beside_their_twins`, each shape beside its twin; the origin's log shows none of the refused) |
//! | chunked bodies (`chunked.rs`, the one decoder): intercepted request bodies, response bodies masked while a run has secrets, plain `http://` request bodies watched for a placeholder | every byte of the framing, where reads split it, sizes, extensions, trailers | fed as bytes arrive, split anywhere; strict: a size is 1 to 16 hex digits and nothing else (no sign, space or `0x`; no overflow), an extension `;` after optional spaces, at most 1 KiB of visible ASCII, read and dropped; every line CRLF (a bare LF or stray CR refused), CRLF after each chunk's data; trailers at most 8 KiB of plain field lines (no fold, no control byte); anything else refused (an intercepted request: the connection ends, nothing more reaches the origin; a masked response: cut off, the client sees it unended). Trailers: a request's refused; a masked response's relayed to an HTTP/1.1 client masked as a head (framing and hop-by-hop fields dropped); a watched plain `http://` body (while a run has secrets) whose framing it refuses is cut off there and answered `400` (a lenient origin could join what the proxy saw apart), the bytes read with the head watched before any of it goes | `chunked::tests` (split at every byte against a whole-body reference, proptest on any bodies and any bytes, each malformed shape beside a valid twin, limits), `intercept::body::tests::trailers_are_relayed_masked`, `http::tests::chunked_bodies_are_joined_as_the_origin_reads_them`, `tests/proxy.rs` (`a_chunked_body_sent_with_its_head_is_watched_before_it_goes`), `tests/tests/it/intercept.rs` (`smuggling_shapes_are_refused_beside_their_twins`, `a_value_in_chunks_or_compressed_is_masked_and_other_codings_refused`) |
//! | intercepted request path (`sandbox_core::request`) | the path's bytes, escapes, dot segments | normalised once, the origin gets the normalised form; ambiguous paths (an encoded slash or backslash, encoded dots in a dot segment, a dot segment with parameters `..;`, an escaped `%` before a dot or separator, overlong UTF-8 decoded once or twice, a NUL, climbing above `/`) refused whatever the rules, checked on the raw segment and on the normalised one that is sent (`%25%32%65` normalises to `%252e`: refused), normalising idempotent; matching linear in segments | `sandbox_core::request` tests and properties, `tests/tests/it/intercept.rs` |
//! | origin response head (`httparse`) | the origin's status line and headers (the origin is named by the operator, not the command) | head bounded (64 KiB); 1xx passed on, `Connection` replaced by `close`; the body relayed as bytes | `tests/tests/it/intercept.rs` |
//! | the run CA | the certificate files (readable by the command; in a directory of the runner's) | the key is never written anywhere (memory only); the files hold certificates only, are removed when the run ends, written and removed through a descriptor of the directory made (a run that renames it and plants a symlink in its place makes the runner delete nothing elsewhere; the name removed only while it is that directory); the CA is name-constrained to the intercepted hosts and valid a day | `tests/tests/it/intercept.rs` (`the_run_ca_key_never_reaches_the_run`, `the_ca_files_cleanup_follows_no_planted_link`) |
//! | secrets (`--secret`) | where the placeholder goes: any header, target, host, `CONNECT` or plain request | the value only in this process (non-dumpable while secrets exist; Landlock scopes ptrace-mode access to the runner anyway); a secret's file (`NAME=file:PATH`) read-denied to the run and refused when it has another name (hard link); written only into header values of requests to the secret's own intercepted hosts (`Basic` decoded and re-encoded); a secret named with a port goes to that port only; the placeholder in a target, in a header or body to another host or port (across reads and chunks: the last bytes that could begin it held back until the next read; a plain `http://` chunked body joined by the one chunked decoder, `chunked.rs`, which only watches there, never forwards; a framing it refuses cuts the request off, `400`; the bytes read with the head watched before any of them go), or in a head the proxy does not intercept is refused and recorded (a body's origin connection cut before the placeholder); values with CR, LF or NUL refused; every value kept out of every intercepted response of the run (and masked with `*` in every plain `http://` response relayed while secrets exist), an origin reflecting a header or storing it for a later request (replaced by the placeholder in the status line, header names and values, masked with `*` in bodies, across reads), in every form the proxy knows: raw, percent-encoded, JSON-escaped (`\uXXXX` escapes as Go, Gson, PHP, Python write them, and of every non-alphanumeric character), HTML-escaped, base64 of both alphabets at each of the three alignments, and each `Basic` credential re-encoded in the run (the first 256) whole, in the body as the command reads it (de-chunked; `gzip`/`deflate` decoded, at most 256 MiB, relayed without `Content-Encoding`; the origin asked only for those; any other content or transfer coding answered `502` and recorded); best-effort defence in depth (other encodings not seen: docs/enforcement.md, Known gaps) | `intercept::body::tests`, `intercept::exchange::tests`, `tests/tests/it/intercept.rs` (`secrets_reach_only_their_host_and_never_the_run`, `a_secret_file_is_out_of_the_runs_reach`, `an_origin_reflecting_the_injected_value_returns_it_masked`, `a_stored_credential_served_to_a_later_request_is_masked`, `a_value_reflected_in_the_reason_phrase_or_a_header_name_is_replaced`, `a_placeholder_in_a_body_is_refused_beside_its_twins`, `a_value_in_chunks_or_compressed_is_masked_and_other_codings_refused`), `intercept::tests` (`every_encoding_of_the_value_is_kept_out`, `json_unicode_escapes_and_html_entities_of_the_value_are_kept_out`), `http::tests` |
//! | the proposed rule (`403`'s `Sandbox-Admit-With` and body, the refusal's reason) | the request's method and path, so the proposal's text | the rule's value one shell word ([`sandbox_core::request::flag`], the one quoting of proposals: pasted, it runs nothing), none proposed when it cannot be one; a literal `*` written `%2A`, so the rule parses back to itself (never a wildcard) | `sandbox_core::request` tests and properties, `tests/tests/it/intercept.rs` (`a_proposed_rule_pastes_as_one_word_and_admits_only_what_was_refused`) |
//! | held destinations and requests ([`Decider`], `--approval channel`) | which unlisted hosts, ports and requests are asked about, how many at once, how long it lets them wait; the DNS answers of the names it asks about (rebinding to loopback or the host) | asked from the connection's thread, never the accepting one; a name asked about by name alone and looked up only once admitted (a refused name, or one beyond the held limit, reaches no resolver: no DNS leak under `--no-network`), resolved once, and asked about again with its addresses when one is local (special-range or the host's own), an admitted connection reaching only the addresses resolved then (a later resolution widens nothing; a session grant covers only local addresses shown); at most [`ProxyOptions::max_held`] (16) held at once, counted before any lookup, more refused unasked and recorded ([`RefusalReason::HeldLimit`]); each bounded by [`Decider::hold_limit`], denied on silence, on shutdown and (session) when the command ends; only names or literals no rule lists are asked about (never the proxy itself, a wildcard's special or own addresses, a request shape refused whatever the rules); the answer comes only from the decider (the session's channel, which no command holds) | `hold::tests`, `tests/proxy.rs` (`an_admitted_name_reaches_only_the_addresses_asked_about`, `a_name_is_looked_up_only_once_admitted`), `tests/tests/it/session_approvals.rs` (`an_approved_name_reaches_only_the_addresses_shown`, `a_denied_name_is_never_queried`, `the_held_limit_comes_before_any_lookup`, `the_command_cannot_answer_its_own_question` beside its answered twin, silence, deny) |
//! | capabilities over that namespace | unprivileged, the command's uid owns its user namespace, so the command holds CAP_NET_ADMIN there | the egress filter refuses the socket ioctls and options that use it (`sandbox_seccomp::SOCKET_IOCTLS_REFUSED`, `SOCKET_OPTIONS_REFUSED`), and `setns`; the command makes no other socket there | `tests/tests/it/dns.rs` (`the_datagram_namespace_cannot_be_administered_by_the_command`) |
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

#[cfg(target_os = "linux")]
mod chunked;
mod deadline;
pub mod dns;
mod egress;
mod hold;
mod http;
#[cfg(target_os = "linux")]
mod intercept;
#[cfg(target_os = "linux")]
pub mod island;
mod peer;
#[cfg(target_os = "linux")]
mod pipes;
mod relay;
mod serve;
#[cfg(target_os = "linux")]
mod sni;
mod socks;
mod state;
mod target;

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use egress::{Egress, EgressError, EgressOptions, EgressTap};
pub use hold::{Decider, Decision, Pending, Reply, Settled, DEFAULT_HOLD_LIMIT, DEFAULT_MAX_HELD};
pub use peer::RunPeers;
pub use sandbox_core::net::{EgressRule, EgressRules, NetRule};

/// This host's own addresses (every address on one of its interfaces), which
/// wildcard name rules do not reach.
pub fn host_addrs() -> std::io::Result<sandbox_core::HostAddrs> {
    target::host_addrs()
}

use sandbox_core::net::HostAddrs;

use state::Shared;

/// How many refusals [`Proxy::refusals`] keeps (the first ones);
/// [`Proxy::refusal_count`] counts them all.
pub const MAX_REFUSALS_KEPT: usize = 64;

/// The bypass list [`Proxy::env`] sets (`NO_PROXY`, `no_proxy`): loopback by
/// name and address, and `[::1]` as Python's `urllib` compares a bracketed
/// host. Requests there are made directly and decided by the connect broker.
pub const LOOPBACK_BYPASS: &str = "localhost,127.0.0.1,::1,[::1]";

/// How long [`Proxy::shutdown`] waits for open connections to end after
/// closing their sockets, before it leaves their threads to end on their own.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Resolves a host name and port to socket addresses.
pub type Resolver = Arc<dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync>;

/// Limits and settings of a [`Proxy`].
#[derive(Clone)]
pub struct ProxyOptions {
    max_connections: usize,
    head_timeout: Duration,
    connect_timeout: Duration,
    max_head_bytes: usize,
    resolver: Option<Resolver>,
    interception: Option<Interception>,
    decider: Option<Arc<dyn Decider>>,
    max_held: usize,
    shadows: Option<sandbox_core::Pins>,
    /// The connections this proxy shares with the process's others (a
    /// run's egress: [`Egress::start`]); none for a proxy of its own.
    budget: Option<Arc<state::Budget>>,
    /// The processes it serves ([`ProxyOptions::peers`]); none: any.
    peers: Option<RunPeers>,
}

/// The interception of the hosts per-request rules name
/// ([`sandbox_core::RequestRule`]): a per-run certificate authority (its
/// key only in this process's memory; leaf certificates made per host on
/// demand), the rules each request is checked against, and how the origins
/// are verified. Linux only: elsewhere [`Interception::new`] fails.
#[derive(Clone, Debug)]
pub struct Interception {
    #[cfg(target_os = "linux")]
    inner: Arc<intercept::Interceptor>,
}

/// A credential the proxy writes into the request headers of its hosts
/// (intercepted ones): the command holds only [`Secret::placeholder`], a
/// random token; the real value stays in this process. Its `Debug` shows
/// neither.
#[derive(Clone)]
pub struct Secret {
    name: String,
    hosts: Vec<String>,
    placeholder: String,
    value: Vec<u8>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl Secret {
    /// The secret `spec` names, of value `value` (read by the caller), with
    /// a new random placeholder (`SANDBOX_SECRET_` and 32 hex digits from
    /// `/dev/urandom`).
    pub fn new(spec: &sandbox_core::SecretSpec, value: Vec<u8>) -> io::Result<Secret> {
        use std::io::Read;
        let mut random = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
        let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Secret {
            name: spec.name().to_string(),
            hosts: spec.hosts().to_vec(),
            placeholder: format!("SANDBOX_SECRET_{hex}"),
            value,
        })
    }

    /// The environment variable the command finds the placeholder in.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the command holds instead of the value.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// The hosts whose requests get the value.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The value.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn value(&self) -> &[u8] {
        &self.value
    }
}

/// Whether the rule `r` names the secret's host `h` (`HOST`, or
/// `HOST:PORT` and then that port too).
fn secret_host_named(h: &str, r: &sandbox_core::RequestRule) -> bool {
    match h.rsplit_once(':') {
        Some((name, port)) => r.host() == name && port.parse::<u16>().ok() == Some(r.port()),
        None => r.host() == h,
    }
}

impl Interception {
    /// A new run CA for the hosts `rules` name; the origins are verified
    /// against the certificates of the PEM file `upstream_ca`, or else the
    /// system roots. `secrets` are written into the request headers of
    /// their hosts, each of which a rule must name; a request carrying a
    /// placeholder anywhere else is refused.
    pub fn new(
        rules: Vec<sandbox_core::RequestRule>,
        upstream_ca: Option<&std::path::Path>,
        secrets: Vec<Secret>,
    ) -> Result<Interception, ProxyError> {
        for secret in &secrets {
            if let Some(host) = secret
                .hosts
                .iter()
                .find(|h| !rules.iter().any(|r| secret_host_named(h, r)))
            {
                return Err(ProxyError::Interception(format!(
                    "the secret {} is for {host}, which no request rule names: only intercepted \
                     hosts get secrets (add --allow-request 'METHODS https://{host}/PATH')",
                    secret.name
                )));
            }
        }
        #[cfg(target_os = "linux")]
        {
            Ok(Interception {
                inner: Arc::new(intercept::Interceptor::new(rules, upstream_ca, secrets)?),
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (rules, upstream_ca, secrets);
            Err(ProxyError::Interception(
                "per-request rules need the proxy to intercept TLS, which it does on Linux only"
                    .into(),
            ))
        }
    }

    /// The run CA's certificate (PEM): what the command must trust.
    pub fn ca_pem(&self) -> String {
        #[cfg(target_os = "linux")]
        {
            self.inner.ca_pem()
        }
        #[cfg(not(target_os = "linux"))]
        {
            String::new()
        }
    }
}

impl Default for ProxyOptions {
    /// 256 connections, 30 s for a request head, 10 s per connect attempt,
    /// 16 KiB request heads, the system resolver.
    fn default() -> Self {
        Self {
            max_connections: 256,
            head_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_head_bytes: 16 * 1024,
            resolver: None,
            interception: None,
            decider: None,
            max_held: DEFAULT_MAX_HELD,
            shadows: None,
            budget: None,
            peers: None,
        }
    }
}

impl fmt::Debug for ProxyOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyOptions")
            .field("max_connections", &self.max_connections)
            .field("head_timeout", &self.head_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_head_bytes", &self.max_head_bytes)
            .field("resolver", &self.resolver.as_ref().map(|_| "custom"))
            .field("interception", &self.interception.is_some())
            .field("decider", &self.decider)
            .field("max_held", &self.max_held)
            .field("shadows", &self.shadows.is_some())
            .field("peers", &self.peers)
            .finish()
    }
}

impl ProxyOptions {
    /// Connections served at once (at least 1); more are closed on accept.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// A budget of connections shared with the process's other proxies: a
    /// connection is served only with a place in it too; one without is
    /// closed on accept, as one over [`ProxyOptions::max_connections`].
    pub(crate) fn budget(mut self, budget: Arc<state::Budget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The time a client has to send its whole request head (HTTP) or
    /// negotiation and request (SOCKS5); at least 1 ms.
    pub fn head_timeout(mut self, t: Duration) -> Self {
        self.head_timeout = t.max(Duration::from_millis(1));
        self
    }

    /// The time each connect attempt to a destination address may take; at
    /// least 1 ms.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t.max(Duration::from_millis(1));
        self
    }

    /// The largest HTTP request head accepted (at least 256 bytes); a larger
    /// one gets `431`.
    pub fn max_head_bytes(mut self, n: usize) -> Self {
        self.max_head_bytes = n.max(256);
        self
    }

    /// Resolves names with `resolver` instead of the system resolver
    /// (`getaddrinfo` through [`std::net::ToSocketAddrs`]), e.g. to pin names
    /// or to test without DNS. Only names a rule lists, or that a
    /// [`Decider`] admitted, are passed to it.
    pub fn resolver(mut self, resolver: Resolver) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Intercepts the hosts `interception`'s rules name: a `CONNECT` to one
    /// is answered by the proxy itself, which terminates TLS and forwards
    /// only the requests a rule admits (before any egress rule is
    /// consulted for that host and port).
    pub fn interception(mut self, interception: Interception) -> Self {
        self.interception = Some(interception);
        self
    }

    /// Where the run's resolver found the intercepted hosts
    /// ([`sandbox_core::Pins::intercepted_at`]): an IP literal at such an
    /// address that no rule admits is refused without asking a [`Decider`]
    /// ([`RefusalReason::InterceptedAddress`]), as an approval of the
    /// address would reach the intercepted host around its request rules.
    pub fn shadows(mut self, pins: sandbox_core::Pins) -> Self {
        self.shadows = Some(pins);
        self
    }

    /// Holds a connection to a destination no egress rule admits (a name
    /// not listed, an IP literal no rule admits), and an intercepted
    /// request no request rule admits, while `decider` is asked
    /// ([`Decider`]); without one they are refused at once.
    pub fn decider(mut self, decider: Arc<dyn Decider>) -> Self {
        self.decider = Some(decider);
        self
    }

    /// Serves only the processes of one run ([`RunPeers`]): on accept,
    /// before a byte is read, the kernel is asked who made the client's
    /// socket (sock_diag(7)); another process's connection, or one that
    /// cannot be looked up, is closed at once, unserved and unrecorded
    /// (counted: `Mediation::egress_foreign_closed`). Until the run's
    /// identity is set ([`RunPeers::set`]) no one is served. Without this
    /// option any local process is served (Linux; elsewhere nothing is
    /// checked). [`Egress::start`] always sets it ([`Egress::peers`]).
    pub fn peers(mut self, peers: RunPeers) -> Self {
        self.peers = Some(peers);
        self
    }

    /// Connections held for a [`Decider`] at once (at least 1, default
    /// [`DEFAULT_MAX_HELD`]); a refusal beyond them is not asked about
    /// ([`RefusalReason::HeldLimit`]).
    pub fn max_held(mut self, n: usize) -> Self {
        self.max_held = n.max(1);
        self
    }
}

/// A destination the proxy refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refused {
    /// The host as requested: a name, or an IP address.
    pub host: String,
    /// The port requested.
    pub port: u16,
    /// Why.
    pub reason: RefusalReason,
}

/// Why a destination was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// No name rule lists the host name at this port (IP rules admit no
    /// names).
    NameNotListed,
    /// A request rule names the host, at another port: there it is reached
    /// only where an exact `--allow-net HOST:PORT` lists it (that host, that
    /// port), and no such rule does (a wildcard or every-port rule, the
    /// operator's too, does not reach an intercepted host).
    InterceptedElsewhere,
    /// A plain `http://` request to a host and port a request rule
    /// intercepts: reached only as HTTPS through the interception, so no
    /// rule admits it (nothing is proposed).
    InterceptedPlain,
    /// No IP rule admits the IP literal at this port, and it is an address
    /// where the run's resolver found an intercepted host
    /// ([`ProxyOptions::shadows`]): refused without asking a [`Decider`],
    /// whose admission would reach that host around its request rules.
    InterceptedAddress {
        /// The intercepted host found there.
        host: String,
    },
    /// The host asked for is neither an IP literal nor a host name (a
    /// byte other than a letter, digit, `-`, `_` or `.`, an empty label,
    /// too long): refused before any rule, question or lookup.
    NotAHostName,
    /// No IP rule admits the IP literal at this port (name rules admit no IP
    /// literals).
    AddressNotAllowed,
    /// Only a wildcard rule lists the name, and every address it resolves to
    /// lies in a special range that no IP rule admits.
    WildcardToSpecial {
        /// The addresses the name resolved to.
        resolved: Vec<IpAddr>,
    },
    /// Only a wildcard rule lists the name, and every address it resolves to
    /// is one of this host's own addresses (configured on one of its
    /// interfaces) or lies in a special range, and no IP rule admits it; at
    /// least one is the host's own.
    WildcardToHost {
        /// The addresses the name resolved to.
        resolved: Vec<IpAddr>,
        /// Those of them that are this host's own (and not special).
        own: Vec<IpAddr>,
    },
    /// The destination is the proxy itself.
    ProxyItself,
    /// A [`Decider`] would have been asked, but the proxy already held
    /// [`ProxyOptions::max_held`] connections for it: refused unasked.
    HeldLimit {
        /// How many were held.
        held: usize,
    },
    /// A tunnel (`CONNECT`, SOCKS) to a port a request rule intercepts on
    /// some host, whose TLS ClientHello asks for another host than the
    /// tunnel's (SNI), or for an intercepted one, or hides the name, or
    /// cannot be read one way (Linux).
    TunnelServerName {
        /// Why.
        why: String,
    },
    /// An intercepted request that no request rule admits, or whose shape
    /// the proxy refuses (one a parser could read two ways, a path that
    /// climbs or is ambiguous).
    Request {
        /// The method (empty when the head could not be read).
        method: String,
        /// The path as sent, without the query (empty when the head could
        /// not be read).
        path: String,
        /// Why.
        why: String,
        /// The request rule that would admit it (`METHODS URL`), when one
        /// would.
        admit_with: Option<String>,
    },
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::NameNotListed => f.write_str(
                "no egress rule lists this host name and port (IP rules do not admit names)",
            ),
            RefusalReason::InterceptedElsewhere => f.write_str(
                "no egress rule lists this host name and port exactly: a request rule \
                 intercepts this host at another port, so it is reached here only where an \
                 exact --allow-net HOST:PORT lists it (a wildcard or every-port rule does not \
                 reach an intercepted host)",
            ),
            RefusalReason::InterceptedAddress { host } => write!(
                f,
                "no IP egress rule admits this address and port, and the intercepted host \
                 {host} was found at it: an approval of the address would reach that host \
                 around the proxy's checks, so none was asked for (send its requests by name \
                 through the proxy)"
            ),
            RefusalReason::InterceptedPlain => f.write_str(
                "a request rule intercepts this host and port: it is reached only over HTTPS \
                 through the proxy's interception, never as a plain http:// request",
            ),
            RefusalReason::NotAHostName => f.write_str(
                "not a host name (only letters, digits, '-', '_' and '.', labels of 1 to 63 \
                 bytes): refused before any rule or lookup",
            ),
            RefusalReason::AddressNotAllowed => f.write_str(
                "no IP egress rule admits this address and port (name rules do not admit IP \
                 literals; special-range addresses, such as loopback, private, link-local and \
                 documentation ones, need a rule within their range)",
            ),
            RefusalReason::WildcardToSpecial { resolved } => {
                f.write_str("only a wildcard rule lists this name, and it resolves only to special-range addresses (")?;
                write_list(f, resolved.iter())?;
                f.write_str("), which need an exact name rule or an IP rule")
            }
            RefusalReason::WildcardToHost { resolved, own } => {
                f.write_str("only a wildcard rule lists this name, and it resolves only to this host's own addresses (")?;
                write_list(f, own.iter())?;
                f.write_str(", configured on its interfaces")?;
                let mut special = resolved.iter().filter(|ip| !own.contains(ip)).peekable();
                if special.peek().is_some() {
                    f.write_str(") and special-range addresses (")?;
                    write_list(f, special)?;
                }
                f.write_str("), which need an exact name rule or an IP rule")
            }
            RefusalReason::ProxyItself => f.write_str("it is the proxy itself"),
            RefusalReason::TunnelServerName { why } => f.write_str(why),
            RefusalReason::HeldLimit { held } => write!(
                f,
                "{held} connections already waited for an approval, so this one was refused \
                 without asking"
            ),
            RefusalReason::Request {
                why, admit_with, ..
            } => {
                f.write_str(why)?;
                // One shell word (`sandbox_core::request::flag`): pasted,
                // the proposal runs nothing the command chose.
                match admit_with
                    .as_deref()
                    .map(|rule| sandbox_core::request::flag("--allow-request", rule))
                {
                    Some(Ok(flag)) => write!(f, " (to admit it: {flag})")?,
                    Some(Err(why)) => write!(f, " (no flag proposed: {why})")?,
                    None => {}
                }
                Ok(())
            }
        }
    }
}

/// `hay` with every `needle` replaced by `with`.
pub(crate) fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if !needle.is_empty() && hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// `a, b, c`.
fn write_list<'a>(
    f: &mut fmt::Formatter<'_>,
    ips: impl Iterator<Item = &'a IpAddr>,
) -> fmt::Result {
    for (i, ip) in ips.enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{ip}")?;
    }
    Ok(())
}

impl Refused {
    /// What was refused as the user wrote it: for a request, `METHOD
    /// https://host[:port]/path`; otherwise [`Refused::target`].
    pub fn what(&self) -> String {
        match &self.reason {
            RefusalReason::Request { method, path, .. } if !method.is_empty() => {
                let port = if self.port == 443 {
                    String::new()
                } else {
                    format!(":{}", self.port)
                };
                format!("{method} https://{}{port}{path}", self.host)
            }
            _ => self.target(),
        }
    }

    /// The destination as `host:port`, an IPv6 literal in brackets
    /// (`example.com:443`, `127.0.0.1:80`, `[::1]:8080`).
    pub fn target(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Refused {
    /// `host:port: reason` ([`Refused::target`], then the reason).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.target(), self.reason)
    }
}

/// Why a [`Proxy`] could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// Binding or setting up the listening socket on `127.0.0.1` failed.
    #[error("egress proxy: cannot listen on 127.0.0.1: {0}")]
    Listen(#[source] io::Error),
    /// Creating the shutdown wake-up socket pair failed.
    #[error("egress proxy: cannot create its wake-up socket pair: {0}")]
    Waker(#[source] io::Error),
    /// Starting the accepting thread failed.
    #[error("egress proxy: cannot start its accepting thread: {0}")]
    Thread(#[source] io::Error),
    /// Reading this host's interface addresses (`getifaddrs`), which a
    /// wildcard rule must not reach, failed: the proxy does not start rather
    /// than let wildcard names reach the host itself.
    #[error("egress proxy: cannot read this host's interface addresses (getifaddrs), which wildcard rules must not reach: {0}")]
    Interfaces(#[source] io::Error),
    /// Interception (the run CA, the origins' roots) could not be set up.
    #[error("egress proxy: cannot intercept the hosts request rules name: {0}")]
    Interception(String),
}

/// A running egress proxy on `127.0.0.1`; [`Proxy::shutdown`] or drop stops it.
pub struct Proxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// Dropping it wakes the accepting thread.
    waker: Option<UnixStream>,
    acceptor: Option<JoinHandle<()>>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("running", &self.acceptor.is_some())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Starts a proxy admitting the destinations `rules` admit, listening on
    /// `127.0.0.1` at a port the system picks. With a wildcard rule it first
    /// reads this host's own addresses, which that rule does not reach.
    pub fn start(rules: impl Into<EgressRules>, opts: ProxyOptions) -> Result<Proxy, ProxyError> {
        let rules = rules.into();
        let own = if rules.has_wildcard() || opts.decider.is_some() {
            target::host_addrs().map_err(ProxyError::Interfaces)?
        } else {
            // Only wildcard rules and a decider's questions (`local`)
            // consult them: spare the call.
            HostAddrs::new([])
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ProxyError::Listen)?;
        listener.set_nonblocking(true).map_err(ProxyError::Listen)?;
        let addr = listener.local_addr().map_err(ProxyError::Listen)?;
        let (waker, woken) = UnixStream::pair().map_err(ProxyError::Waker)?;
        let shared = Arc::new(Shared::new(rules, own, opts, addr));
        let acceptor = std::thread::Builder::new()
            .name("sandbox-proxy-accept".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || serve::accept_loop(&shared, &listener, &woken)
            })
            .map_err(ProxyError::Thread)?;
        Ok(Proxy {
            shared,
            addr,
            waker: Some(waker),
            acceptor: Some(acceptor),
        })
    }

    /// The listening address (`127.0.0.1:PORT`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The rule the connect broker needs so that the confined command reaches
    /// the proxy, and nothing else: exactly [`Proxy::addr`].
    pub fn net_rule(&self) -> NetRule {
        NetRule::exact(self.addr)
    }

    /// The environment that points common clients at the proxy:
    /// `HTTP_PROXY`, `HTTPS_PROXY` (`http://127.0.0.1:PORT`, so HTTPS goes
    /// through `CONNECT`), `ALL_PROXY` (`socks5h://127.0.0.1:PORT`: the
    /// proxy resolves names), each also in lower case (curl reads only
    /// `http_proxy` in lower case), and `NO_PROXY`/`no_proxy` set to
    /// [`LOOPBACK_BYPASS`] (replacing a list inherited from the runner's
    /// environment, whose other names would go around the proxy, where the
    /// broker would refuse them): a request to loopback is made directly,
    /// and the broker admits it to a port one of the run's own processes
    /// listens on, to a listed address, or to an address `localhost` was
    /// pinned to; anything else there it refuses as the proxy would.
    pub fn env(&self) -> Vec<(String, String)> {
        let http = format!("http://{}", self.addr);
        let socks = format!("socks5h://{}", self.addr);
        [
            ("HTTP_PROXY", &http),
            ("http_proxy", &http),
            ("HTTPS_PROXY", &http),
            ("https_proxy", &http),
            ("ALL_PROXY", &socks),
            ("all_proxy", &socks),
            ("NO_PROXY", &LOOPBACK_BYPASS.to_owned()),
            ("no_proxy", &LOOPBACK_BYPASS.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
    }

    /// The first [`MAX_REFUSALS_KEPT`] refused destinations, in order.
    pub fn refusals(&self) -> Vec<Refused> {
        self.shared.refusals()
    }

    /// How many destinations were refused in all.
    pub fn refusal_count(&self) -> u64 {
        self.shared.refusal_count()
    }

    /// Stops accepting, closes the listening socket and every open
    /// connection, and waits up to [`SHUTDOWN_GRACE`] for their threads to
    /// end (those still running are left to end on their own; they hold no
    /// listening socket). Calling it again does nothing; drop calls it.
    pub fn shutdown(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Closing our end makes the other readable: the accepting thread
        // wakes, returns, and drops the listener.
        drop(self.waker.take());
        if let Some(acceptor) = self.acceptor.take() {
            // A panicked acceptor has dropped the listener as well.
            let _ = acceptor.join();
        }
        self.shared.close_all();
        self.shared.wait_idle(SHUTDOWN_GRACE);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(host: &str, port: u16, reason: RefusalReason) -> Refused {
        Refused {
            host: host.into(),
            port,
            reason,
        }
    }

    #[test]
    fn targets_bracket_ipv6_literals() {
        let r = |host: &str| refused(host, 8080, RefusalReason::AddressNotAllowed).target();
        assert_eq!(r("::1"), "[::1]:8080");
        assert_eq!(r("2001:db8::1"), "[2001:db8::1]:8080");
        assert_eq!(r("127.0.0.1"), "127.0.0.1:8080");
        assert_eq!(r("example.com"), "example.com:8080");
        let shown = refused("::1", 80, RefusalReason::ProxyItself).to_string();
        assert_eq!(shown, "[::1]:80: it is the proxy itself");
    }

    #[test]
    fn host_address_refusals_say_so() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let only_own = RefusalReason::WildcardToHost {
            resolved: vec![ip("1.2.3.4"), ip("2a00::1")],
            own: vec![ip("1.2.3.4"), ip("2a00::1")],
        }
        .to_string();
        assert_eq!(
            only_own,
            "only a wildcard rule lists this name, and it resolves only to this host's own \
             addresses (1.2.3.4, 2a00::1, configured on its interfaces), which need an exact \
             name rule or an IP rule"
        );
        let mixed = RefusalReason::WildcardToHost {
            resolved: vec![ip("127.0.0.1"), ip("1.2.3.4")],
            own: vec![ip("1.2.3.4")],
        }
        .to_string();
        assert!(
            mixed.contains("this host's own addresses (1.2.3.4, configured on its interfaces) and special-range addresses (127.0.0.1)"),
            "{mixed}"
        );
    }

    #[test]
    fn the_host_addresses_are_read() {
        // getifaddrs answers, and the set is kept sorted and without
        // duplicates (what `contains` relies on).
        let own = target::host_addrs().unwrap();
        let mut sorted = own.as_slice().to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(own.as_slice(), sorted);
    }
}
