//! The load-method witness: the write-outside and loopback-connect denials
//! fire however the program is started. Both denials are kernel-side
//! (Landlock, seccomp), so a program the ELF interpreter starts directly
//! (`ld.so /bin/sh ...`, no execve of the program itself) and machine code
//! the command maps executable and jumps to (no exec at all) are confined
//! the same; this proves it on the host, each beside its positive control.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sandbox_core::{Backend, SandboxPolicy};
use serde::Serialize;

use super::exceptions::{accepted, loopback_listener as listener};
use super::harness::{resolve, s, unwitnessed, Ctx, Outcome, Tree};
use super::LegResult;
use crate::launch::minimal_env;
use crate::probe::read;

/// One load method × one denial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadMethodRecord {
    /// `interpreter` or `mapped-code`.
    pub method: &'static str,
    /// `write-outside` or `loopback-connect`.
    pub claim: &'static str,
    /// The backend it ran against.
    pub backend: String,
    /// The result.
    #[serde(flatten)]
    pub result: LegResult,
    /// What was attempted and seen.
    pub evidence: String,
}

/// One row's check.
type Leg = fn(&Ctx<'_>) -> Result<Outcome, Outcome>;

/// Runs the four rows against `backend`.
pub fn load_method_witness(backend: &dyn Backend) -> Vec<LoadMethodRecord> {
    rows(&Ctx::new(backend))
}

/// The four rows in `ctx`.
pub(crate) fn rows(ctx: &Ctx<'_>) -> Vec<LoadMethodRecord> {
    let rows: [(&'static str, &'static str, Leg); 4] = [
        ("interpreter", "write-outside", interpreter_write),
        ("interpreter", "loopback-connect", interpreter_connect),
        ("mapped-code", "write-outside", mapped_write),
        ("mapped-code", "loopback-connect", mapped_connect),
    ];
    rows.into_iter()
        .map(|(method, claim, leg)| {
            let (result, evidence) = leg(ctx).unwrap_or_else(|o| o);
            LoadMethodRecord {
                method,
                claim,
                backend: ctx.backend.name().to_owned(),
                result,
                evidence,
            }
        })
        .collect()
}

/// The ELF interpreter of this architecture, if present.
fn interpreter() -> Result<PathBuf, Outcome> {
    [
        "/lib64/ld-linux-x86-64.so.2",
        "/lib/ld-linux-aarch64.so.1",
        "/lib/ld-linux-x86-64.so.2",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .ok_or_else(|| unwitnessed("no ELF interpreter found (ld-linux)"))
}

fn passed(pass: bool, evidence: String) -> Outcome {
    (
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        evidence,
    )
}

fn write_policy(grant: &Path, network: bool) -> Result<sandbox_core::ResolvedPolicy, Outcome> {
    resolve(SandboxPolicy {
        network,
        write_paths: vec![s(grant)],
        ..SandboxPolicy::default()
    })
}

fn interpreter_write(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let ld = interpreter()?;
    let tree = Tree::new()?;
    let (grant, outside) = (tree.dir("grant")?, tree.dir("outside")?);
    let policy = write_policy(&grant, true)?;
    let write = |target: &Path| {
        let argv: Vec<OsString> = vec![
            ld.clone().into(),
            "/bin/sh".into(),
            "-c".into(),
            "echo x > \"$1\"".into(),
            "sh".into(),
            target.into(),
        ];
        ctx.run(&policy, &argv, &minimal_env())
    };
    write(&grant.join("control"))?;
    if read(&grant.join("control")).as_deref() != Some("x\n") {
        return Err(unwitnessed(format!(
            "positive control not seen: {} /bin/sh did not write inside the write path",
            ld.display()
        )));
    }
    let run = write(&outside.join("f"))?;
    let written = outside.join("f").exists();
    Ok(passed(
        !written && !run.exited_ok() && run.stderr.contains("Permission denied"),
        format!(
            "{} /bin/sh: control written inside; outside file {} (the child {})",
            ld.display(),
            if written { "WRITTEN" } else { "absent" },
            run.describe()
        ),
    ))
}

const CONNECT: &str = r#"
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    print("connect=ok")
except OSError as e:
    print("connect=err:%d" % e.errno)
"#;

fn interpreter_connect(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let ld = interpreter()?;
    let python = ctx
        .python
        .clone()
        .ok_or_else(|| unwitnessed("python3 not found"))?;
    let tree = Tree::new()?;
    let grant = tree.dir("grant")?;
    let (l, port) = listener()?;
    let connect = |network: bool| -> Result<(String, usize), Outcome> {
        let argv: Vec<OsString> = vec![
            ld.clone().into(),
            python.clone().into(),
            "-I".into(),
            "-c".into(),
            CONNECT.into(),
            port.clone().into(),
        ];
        let run = ctx.run(&write_policy(&grant, network)?, &argv, &minimal_env())?;
        std::thread::sleep(std::time::Duration::from_millis(50));
        Ok((run.stdout.trim().to_owned(), accepted(&l)))
    };
    let (open_out, open_n) = connect(true)?;
    if open_n == 0 {
        return Err(unwitnessed(format!(
            "positive control not seen: with network = true the interpreter-started python got {open_out:?} and the listener accepted nothing"
        )));
    }
    let (out, n) = connect(false)?;
    Ok(passed(
        n == 0 && out == format!("connect=err:{}", libc::EPERM),
        format!(
            "{} python3, network=false: {out}, listener accepted {n} (network=true control: {open_out}, accepted {open_n})",
            ld.display()
        ),
    ))
}

/// x86_64 machine code: `f(path)` = openat(AT_FDCWD, path, O_WRONLY|O_CREAT, 0644), raw.
const OPEN_CODE: &[u8] = &[
    0x48, 0x89, 0xfe, // mov rsi, rdi
    0x48, 0xc7, 0xc7, 0x9c, 0xff, 0xff, 0xff, // mov rdi, -100
    0xba, 0x41, 0x00, 0x00, 0x00, // mov edx, 0x41
    0x41, 0xba, 0xa4, 0x01, 0x00, 0x00, // mov r10d, 0644
    0xb8, 0x01, 0x01, 0x00, 0x00, // mov eax, 257 (openat)
    0x0f, 0x05, // syscall
    0xc3, // ret
];

/// x86_64 machine code: `f(addr, len)` = connect(socket(AF_INET, SOCK_STREAM, 0), addr, len), raw.
const CONNECT_CODE: &[u8] = &[
    0x57, // push rdi
    0x56, // push rsi
    0xbf, 0x02, 0x00, 0x00, 0x00, // mov edi, 2
    0xbe, 0x01, 0x00, 0x00, 0x00, // mov esi, 1
    0x31, 0xd2, // xor edx, edx
    0xb8, 0x29, 0x00, 0x00, 0x00, // mov eax, 41 (socket)
    0x0f, 0x05, // syscall
    0x48, 0x89, 0xc7, // mov rdi, rax
    0x5a, // pop rdx (len)
    0x5e, // pop rsi (addr)
    0xb8, 0x2a, 0x00, 0x00, 0x00, // mov eax, 42 (connect)
    0x0f, 0x05, // syscall
    0xc3, // ret
];

/// Python that maps `code` executable, jumps to it with the given
/// arguments and prints the raw syscall result (`-errno` on failure).
fn mapped_script(code: &[u8], call: &str) -> String {
    let bytes: Vec<String> = code.iter().map(|b| b.to_string()).collect();
    format!(
        r#"
import ctypes, mmap, socket, struct, sys
mm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
mm.write(bytes([{}]))
addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
{call}
"#,
        bytes.join(", ")
    )
}

fn mapped_ready() -> Result<(), Outcome> {
    if cfg!(target_arch = "x86_64") {
        Ok(())
    } else {
        Err(unwitnessed(format!(
            "no machine-code payload for {} (x86_64 only)",
            std::env::consts::ARCH
        )))
    }
}

fn mapped_write(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    mapped_ready()?;
    let tree = Tree::new()?;
    let (grant, outside) = (tree.dir("grant")?, tree.dir("outside")?);
    let policy = write_policy(&grant, true)?;
    let script = mapped_script(
        OPEN_CODE,
        "f = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_char_p)(addr)\nprint(f(sys.argv[1].encode()))",
    );
    let control = ctx.python(&policy, &script, &[&grant.join("control")])?;
    if !grant.join("control").exists() {
        return Err(unwitnessed(format!(
            "positive control not seen: mapped code did not create a file inside the write path (printed {:?}; the child {})",
            control.stdout.trim(),
            control.describe()
        )));
    }
    let run = ctx.python(&policy, &script, &[&outside.join("f")])?;
    let rc: Option<i64> = run.stdout.trim().parse().ok();
    let created = outside.join("f").exists();
    Ok(passed(
        rc == Some(-i64::from(libc::EACCES)) && !created,
        format!(
            "mmap'd openat(O_CREAT) with no exec: inside returned {}, outside returned {} and the file is {}",
            control.stdout.trim(),
            run.stdout.trim(),
            if created { "CREATED" } else { "absent" }
        ),
    ))
}

fn mapped_connect(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    mapped_ready()?;
    let tree = Tree::new()?;
    let grant = tree.dir("grant")?;
    let (l, port) = listener()?;
    let script = mapped_script(
        CONNECT_CODE,
        "f = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_char_p, ctypes.c_long)(addr)\n\
         sa = struct.pack('!HH4s8x', socket.AF_INET, int(sys.argv[1]), socket.inet_aton('127.0.0.1'))\n\
         sa = struct.pack('=H', socket.AF_INET) + sa[2:]\n\
         print(f(sa, len(sa)))",
    );
    let run = |network: bool| -> Result<(String, usize), Outcome> {
        let r = ctx.python(&write_policy(&grant, network)?, &script, &[&port])?;
        std::thread::sleep(std::time::Duration::from_millis(50));
        Ok((r.stdout.trim().to_owned(), accepted(&l)))
    };
    let (open_out, open_n) = run(true)?;
    if open_n == 0 || open_out != "0" {
        return Err(unwitnessed(format!(
            "positive control not seen: with network = true the mapped connect returned {open_out:?} and the listener accepted {open_n}"
        )));
    }
    let (out, n) = run(false)?;
    Ok(passed(
        n == 0 && out.parse::<i64>().ok() == Some(-i64::from(libc::EPERM)),
        format!(
            "mmap'd socket+connect with no exec, network=false: returned {out}, listener accepted {n} (network=true control: returned {open_out}, accepted {open_n})"
        ),
    ))
}
