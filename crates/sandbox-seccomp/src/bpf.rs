//! Assembling the table into one classic-BPF program, checking its shape,
//! and disassembling it for review.
//!
//! seccompiler compiles the allow part (every allowed syscall, with its
//! argument checks). It has one "mismatch" action per filter and no
//! `SECCOMP_RET_USER_NOTIF`, and it checks neither the x32 bit nor anything
//! before the syscall number, so two small parts are written here by hand:
//!
//! * the prologue: architecture check and x32 bit, both killing the process;
//! * the tail: one `jeq nr; ret action` pair per non-allowed answer
//!   (explicit `EPERM`, [`crate::METADATA_WRITE`], clone3's `ENOSYS`), then `ENOSYS` for
//!   everything unknown.
//!
//! seccompiler's mismatch action is a sentinel `RET` rewritten into a jump to
//! the tail, so a failed argument check falls through to its row's answer.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule,
};

use crate::arch::{AUDIT_ARCH, CHECK_X32_BIT, SECCOMPILER_ARCH, X32_SYSCALL_BIT};
use crate::spec::{Action, Cmp, Cond, Entry, Rule, Width, UNKNOWN};
use crate::SeccompError;

/// `BPF_LD | BPF_W | BPF_ABS`.
pub const LD_W_ABS: u16 = 0x20;
/// `BPF_ALU | BPF_AND | BPF_K`.
pub const AND_K: u16 = 0x54;
/// `BPF_JMP | BPF_JA`.
pub const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub const JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGT | BPF_K`.
pub const JGT_K: u16 = 0x25;
/// `BPF_JMP | BPF_JGE | BPF_K`.
pub const JGE_K: u16 = 0x35;
/// `BPF_JMP | BPF_JSET | BPF_K`.
pub const JSET_K: u16 = 0x45;
/// `BPF_RET | BPF_K`.
pub const RET_K: u16 = 0x06;

/// Offset of `seccomp_data.nr`.
pub const OFF_NR: u32 = 0;
/// Offset of `seccomp_data.arch`.
pub const OFF_ARCH: u32 = 4;
/// Offset of `seccomp_data.args[0]`.
pub const OFF_ARGS: u32 = 16;

/// The kernel's limit on a filter's length (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

/// seccompiler's mismatch answer, replaced by a jump to the tail. No table
/// row answers with this errno (validated in [`assemble`]).
const SENTINEL_ERRNO: u32 = 0xffff;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn internal(what: impl Into<String>) -> SeccompError {
    SeccompError::Internal(what.into())
}

/// Prologue: kill on a foreign architecture or the x32 ABI, leave `nr` in A.
fn prologue() -> Vec<sock_filter> {
    let mut p = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, Action::KillProcess.ret()),
        stmt(LD_W_ABS, OFF_NR),
    ];
    if CHECK_X32_BIT {
        p.push(jump(JGE_K, X32_SYSCALL_BIT, 0, 1));
        p.push(stmt(RET_K, Action::KillProcess.ret()));
    }
    p
}

fn condition(c: &Cond) -> Result<SeccompCondition, SeccompError> {
    let len = match c.width {
        Width::Low32 => SeccompCmpArgLen::Dword,
        Width::Full64 => SeccompCmpArgLen::Qword,
    };
    let (op, value) = match c.cmp {
        Cmp::Eq(v) => (SeccompCmpOp::Eq, v),
        Cmp::Ne(v) => (SeccompCmpOp::Ne, v),
        Cmp::MaskedEq { mask, value } => (SeccompCmpOp::MaskedEq(mask), value),
    };
    SeccompCondition::new(c.arg, len, op, value)
        .map_err(|e| internal(format!("condition {c:?}: {e}")))
}

/// The allow part, compiled by seccompiler, without its architecture check.
fn allow_part(rows: &[Entry]) -> Result<Vec<sock_filter>, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for e in rows {
        match &e.rule {
            Rule::Allow => {
                rules.insert(i64::from(e.nr), Vec::new());
            }
            Rule::AllowIf { any_of, .. } => {
                let mut chain = Vec::new();
                for group in any_of {
                    let conds = group.iter().map(condition).collect::<Result<Vec<_>, _>>()?;
                    chain.push(
                        SeccompRule::new(conds)
                            .map_err(|err| internal(format!("rule for {}: {err}", e.name)))?,
                    );
                }
                rules.insert(i64::from(e.nr), chain);
            }
            Rule::Deny(_) => {}
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Errno(SENTINEL_ERRNO),
        SeccompAction::Allow,
        SECCOMPILER_ARCH,
    )
    .map_err(|e| internal(format!("seccompiler filter: {e}")))?;
    let program: BpfProgram = filter.try_into().map_err(|e| match e {
        seccompiler::BackendError::FilterTooLarge(n) => SeccompError::TooLong(n),
        other => internal(format!("seccompiler: {other}")),
    })?;
    // seccompiler begins with its own arch check (load, compare, kill);
    // ours replaces it.
    let expected_head = [
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, Action::KillProcess.ret()),
    ];
    match program.get(..3) {
        Some(head) if head == expected_head => Ok(program[3..].to_vec()),
        _ => Err(internal(
            "seccompiler's program does not start with the expected arch check",
        )),
    }
}

/// Tail: the answer of every row that is not a plain allow, then `ENOSYS`.
fn tail(rows: &[Entry]) -> Vec<sock_filter> {
    let mut t = vec![stmt(LD_W_ABS, OFF_NR)];
    for e in rows {
        let action = match &e.rule {
            Rule::Allow => continue,
            Rule::AllowIf { otherwise, .. } => *otherwise,
            Rule::Deny(a) => *a,
        };
        t.push(jump(JEQ_K, e.nr, 0, 1));
        t.push(stmt(RET_K, action.ret()));
    }
    t.push(stmt(RET_K, UNKNOWN.ret()));
    t
}

/// Builds the whole program for `rows` and checks its shape.
pub fn assemble(rows: &[Entry]) -> Result<Vec<sock_filter>, SeccompError> {
    let sentinel = libc::SECCOMP_RET_ERRNO | SENTINEL_ERRNO;
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = rows.iter().find(|e| !seen.insert(e.nr)) {
        return Err(internal(format!(
            "syscall {} ({}) appears twice in the table",
            dup.name, dup.nr
        )));
    }
    for e in rows {
        let answers = match &e.rule {
            Rule::Allow => None,
            Rule::AllowIf { otherwise, .. } => Some(*otherwise),
            Rule::Deny(a) => Some(*a),
        };
        if answers.map(Action::ret) == Some(sentinel) || answers == Some(Action::Allow) {
            return Err(internal(format!(
                "row {} answers with a reserved action",
                e.name
            )));
        }
    }
    let mut body = allow_part(rows)?;
    if body.last() == Some(&stmt(RET_K, sentinel)) {
        // The final "no syscall matched" answer: fall into the tail instead.
        body.pop();
    }
    let len = body.len();
    for (i, insn) in body.iter_mut().enumerate() {
        if *insn == stmt(RET_K, sentinel) {
            *insn = stmt(JA, (len - i - 1) as u32);
        }
    }
    let mut program = prologue();
    program.extend(body);
    program.extend(tail(rows));
    verify(&program)?;
    Ok(program)
}

/// Structural checks: length, known opcodes, in-range jumps, ends in `ret`.
pub fn verify(program: &[sock_filter]) -> Result<(), SeccompError> {
    if program.len() > MAX_INSNS {
        return Err(SeccompError::TooLong(program.len()));
    }
    for (i, insn) in program.iter().enumerate() {
        let targets: Vec<usize> = match insn.code {
            LD_W_ABS if insn.k % 4 == 0 && insn.k < 64 => vec![],
            AND_K | RET_K => vec![],
            JA => vec![i + 1 + insn.k as usize],
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                vec![i + 1 + usize::from(insn.jt), i + 1 + usize::from(insn.jf)]
            }
            _ => return Err(internal(format!("instruction {i}: unexpected {insn:?}"))),
        };
        if let Some(t) = targets.iter().find(|&&t| t >= program.len()) {
            return Err(internal(format!(
                "instruction {i} jumps out of the program to {t}"
            )));
        }
    }
    match program.last() {
        Some(last) if last.code == RET_K => Ok(()),
        _ => Err(internal("program does not end in ret")),
    }
}

/// What the accumulator may hold at each instruction (forward flow only).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Acc {
    Unreached,
    Loaded(u32),
    Mixed,
}

fn accumulator_states(program: &[sock_filter]) -> Vec<Acc> {
    fn merge(slot: &mut Acc, v: Acc) {
        *slot = match (*slot, v) {
            (Acc::Unreached, v) => v,
            (a, b) if a == b => a,
            _ => Acc::Mixed,
        };
    }
    let mut state = vec![Acc::Unreached; program.len() + 1];
    state[0] = Acc::Mixed;
    for (i, insn) in program.iter().enumerate() {
        let out = match insn.code {
            LD_W_ABS => Acc::Loaded(insn.k),
            AND_K => Acc::Mixed,
            _ => state[i],
        };
        if state[i] == Acc::Unreached {
            continue;
        }
        let mut go = |t: usize| {
            if t < state.len() {
                merge(&mut state[t], out)
            }
        };
        match insn.code {
            RET_K => {}
            JA => go(i + 1 + insn.k as usize),
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                go(i + 1 + usize::from(insn.jt));
                go(i + 1 + usize::from(insn.jf));
            }
            _ => go(i + 1),
        }
    }
    state
}

fn field(k: u32) -> String {
    match k {
        0 => "nr".into(),
        4 => "arch".into(),
        8 => "ip.lo".into(),
        12 => "ip.hi".into(),
        k if k >= OFF_ARGS => {
            let n = (k - OFF_ARGS) / 8;
            let half = if (k - OFF_ARGS) % 8 == 0 { "lo" } else { "hi" };
            format!("arg{n}.{half}")
        }
        k => format!("[{k}]"),
    }
}

/// Names a `SECCOMP_RET_*` value.
pub fn action_name(k: u32) -> String {
    let data = k & libc::SECCOMP_RET_DATA;
    match k & libc::SECCOMP_RET_ACTION_FULL {
        libc::SECCOMP_RET_ALLOW => "ALLOW".into(),
        libc::SECCOMP_RET_KILL_PROCESS => "KILL_PROCESS".into(),
        libc::SECCOMP_RET_USER_NOTIF => "USER_NOTIF".into(),
        libc::SECCOMP_RET_ERRNO => match data as i32 {
            libc::EPERM => "ERRNO(EPERM)".into(),
            libc::ENOSYS => "ERRNO(ENOSYS)".into(),
            e => format!("ERRNO({e})"),
        },
        _ => format!("0x{k:08x}"),
    }
}

/// One line per instruction; syscall numbers are annotated with `name`.
pub fn disassemble(program: &[sock_filter], name: impl Fn(u32) -> Option<&'static str>) -> String {
    let acc = accumulator_states(program);
    let mut out = String::new();
    for (i, insn) in program.iter().enumerate() {
        let target = |off: u32| i + 1 + off as usize;
        let operand = |k: u32| match acc[i] {
            Acc::Loaded(OFF_NR) if insn.code == JGE_K && k == X32_SYSCALL_BIT => {
                format!("#0x{k:x} (x32 bit)")
            }
            Acc::Loaded(OFF_NR) => match name(k) {
                Some(n) => format!("#{k} ({n})"),
                None => format!("#{k}"),
            },
            Acc::Loaded(OFF_ARCH) if k == AUDIT_ARCH => format!("#0x{k:08x} (native arch)"),
            _ => format!("#0x{k:x}"),
        };
        let text = match insn.code {
            // seccompiler leaves a mismatch answer after each unconditional
            // row that no path reaches; printing it as such keeps diffs small.
            _ if acc[i] == Acc::Unreached => "(unreachable)".to_string(),
            LD_W_ABS => format!("ld   {}", field(insn.k)),
            AND_K => format!("and  #0x{:x}", insn.k),
            JA => format!("ja   {}", target(insn.k)),
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                let op = match insn.code {
                    JEQ_K => "jeq ",
                    JGT_K => "jgt ",
                    JGE_K => "jge ",
                    _ => "jset",
                };
                format!(
                    "{op} {} ? {} : {}",
                    operand(insn.k),
                    target(u32::from(insn.jt)),
                    target(u32::from(insn.jf))
                )
            }
            RET_K => format!("ret  {}", action_name(insn.k)),
            _ => format!(
                ".insn code=0x{:02x} jt={} jf={} k=0x{:x}",
                insn.code, insn.jt, insn.jf, insn.k
            ),
        };
        let _ = writeln!(out, "{i:4}: {text}");
    }
    out
}
