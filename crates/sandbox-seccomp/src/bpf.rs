//! Assembling the table into one classic-BPF program, checking its shape,
//! and disassembling it for review.
//!
//! Layout: the prologue (architecture check, x32 bit; both kill), then a
//! balanced binary search on the syscall number over runs of numbers that
//! share an answer, its constant answers shared `ret`s placed after it.
//! Only `jge` on `nr`, `ja` and `ret` lead to a constant
//! answer, so the kernel's action-cache emulator resolves every
//! unconditional allow, and attaching the filter costs the kernel about
//! log2(runs) emulated instructions per syscall number.
//!
//! The dispatch is written here by hand because seccompiler (0.5) only
//! emits a linear chain of `jeq` comparisons, one per syscall: about five
//! instructions per row that every call and every number at attach walk
//! through (1,650 instructions for the strictest policy, over a millisecond
//! of cache preparation per launch). seccompiler still compiles every
//! argument check: each checked row becomes a one-syscall seccompiler
//! filter whose head (its own architecture check and syscall comparison) is
//! cut off and whose mismatch answer, a sentinel, is rewritten to the row's
//! answer (seccompiler has no `SECCOMP_RET_USER_NOTIF`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use crate::arch::{AUDIT_ARCH, CHECK_X32_BIT, SECCOMPILER_ARCH, X32_SYSCALL_BIT};
use crate::spec::{Action, Cmp, Cond, Entry, Rule, Width, UNKNOWN};
use crate::{BpfInstruction, SeccompError};

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

fn stmt(code: u16, k: u32) -> BpfInstruction {
    BpfInstruction {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> BpfInstruction {
    BpfInstruction { code, jt, jf, k }
}

/// seccompiler's instruction as ours (the same four fields).
fn from_seccompiler(insn: &seccompiler::sock_filter) -> BpfInstruction {
    BpfInstruction::new(insn.code, insn.jt, insn.jf, insn.k)
}

fn internal(what: impl Into<String>) -> SeccompError {
    SeccompError::Internal(what.into())
}

/// Prologue: kill on a foreign architecture or the x32 ABI, leave `nr` in A.
fn prologue() -> Vec<BpfInstruction> {
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

/// What the dispatch answers for one run of syscall numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict<'a> {
    /// A constant answer (`SECCOMP_RET_*`): cacheable by the kernel.
    Ret(u32),
    /// An argument-checked row: its seccompiler-built block.
    Checked(&'a Entry),
}

impl<'a> Verdict<'a> {
    fn of(e: &'a Entry) -> Self {
        match &e.rule {
            Rule::Allow => Verdict::Ret(Action::Allow.ret()),
            Rule::Always(a) => Verdict::Ret(a.ret()),
            Rule::AllowIf { .. } | Rule::RefuseIf { .. } => Verdict::Checked(e),
        }
    }
}

/// Maximal runs of syscall numbers with the same verdict, as
/// `(first number, verdict)`; each run ends where the next begins, the last
/// one (numbers above the table: `ENOSYS`) never ends. `rows` is sorted by
/// number without duplicates. An argument-checked row is always its own run.
fn runs(rows: &[Entry]) -> Vec<(u32, Verdict<'_>)> {
    let unknown = Verdict::Ret(UNKNOWN.ret());
    let mut out = Vec::new();
    let mut push = |start: u32, v| {
        if out.last().map(|&(_, last)| last) != Some(v) {
            out.push((start, v));
        }
    };
    let mut next = 0u32;
    for e in rows {
        if e.nr > next {
            push(next, unknown);
        }
        push(e.nr, Verdict::of(e));
        next = e.nr.saturating_add(1);
    }
    push(next, unknown);
    out
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
        Cmp::Ge(v) => (SeccompCmpOp::Ge, v),
    };
    SeccompCondition::new(c.arg, len, op, value)
        .map_err(|e| internal(format!("condition {c:?}: {e}")))
}

/// The argument checks of one row, compiled by seccompiler as a one-syscall
/// filter whose head (architecture check, `ld nr`, `jeq nr`) is cut off: the
/// dispatch only enters the block for this row's number. A failed check
/// answers the row's `otherwise` (seccompiler's mismatch answer is a
/// sentinel rewritten here, since it cannot express every action, e.g.
/// `SECCOMP_RET_USER_NOTIF`).
fn checked_block(e: &Entry) -> Result<Vec<BpfInstruction>, SeccompError> {
    // seccompiler answers its match action when a rule holds and its
    // mismatch action otherwise; the one that is not Allow is the sentinel.
    let (any_of, answer, matched, mismatched) = match &e.rule {
        Rule::AllowIf { any_of, otherwise } => (
            any_of,
            otherwise,
            SeccompAction::Allow,
            SeccompAction::Errno(SENTINEL_ERRNO),
        ),
        Rule::RefuseIf { any_of, action } => (
            any_of,
            action,
            SeccompAction::Errno(SENTINEL_ERRNO),
            SeccompAction::Allow,
        ),
        _ => return Err(internal(format!("row {} has no argument checks", e.name))),
    };
    let mut chain = Vec::new();
    for group in any_of {
        let conds = group.iter().map(condition).collect::<Result<Vec<_>, _>>()?;
        chain.push(
            SeccompRule::new(conds)
                .map_err(|err| internal(format!("rule for {}: {err}", e.name)))?,
        );
    }
    let filter = SeccompFilter::new(
        BTreeMap::from([(i64::from(e.nr), chain)]),
        mismatched,
        matched,
        SECCOMPILER_ARCH,
    )
    .map_err(|err| internal(format!("seccompiler filter for {}: {err}", e.name)))?;
    let program: BpfProgram = filter.try_into().map_err(|err| match err {
        seccompiler::BackendError::FilterTooLarge(n) => SeccompError::TooLong(n),
        other => internal(format!("seccompiler: {other}")),
    })?;
    let expected_head = [
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, Action::KillProcess.ret()),
        stmt(LD_W_ABS, OFF_NR),
        jump(JEQ_K, e.nr, 0, 1),
    ];
    let program: Vec<BpfInstruction> = program.iter().map(from_seccompiler).collect();
    let sentinel = stmt(RET_K, libc::SECCOMP_RET_ERRNO | SENTINEL_ERRNO);
    match program.get(..expected_head.len()) {
        Some(head) if head == expected_head => Ok(program[expected_head.len()..]
            .iter()
            .map(|insn| {
                if *insn == sentinel {
                    stmt(RET_K, answer.ret())
                } else {
                    *insn
                }
            })
            .collect()),
        _ => Err(internal(format!(
            "seccompiler's block for {} does not start with the expected \
             arch check and syscall comparison",
            e.name
        ))),
    }
}

/// A balanced binary search over `runs` on the syscall number in A, with
/// `jge` only, so the kernel's constant emulator (which follows `ld nr`,
/// `jeq`/`jge`/`jgt`/`jset`, `ja`, `ret`) resolves every constant answer:
/// about log2(runs) comparisons per call and per number at attach, where a
/// linear chain costs up to one comparison per table row.
///
/// Layout: `jge first(right) ? right : left`. Conditional jumps reach at
/// most 255 instructions, so a subtree that fits is laid out with shared
/// answers ([`pooled`]); a larger one is split here, its left half inline
/// and jumped over with a `ja` (32-bit offset) when it is too long.
fn dispatch(runs: &[(u32, Verdict<'_>)]) -> Result<Vec<BpfInstruction>, SeccompError> {
    if let Some(program) = pooled(runs)? {
        return Ok(program);
    }
    if runs.len() < 2 {
        return Err(internal("one argument-check block exceeds a jump's reach"));
    }
    let (low, high) = runs.split_at(runs.len() / 2);
    let (left, right) = (dispatch(low)?, dispatch(high)?);
    let split = high[0].0;
    let mut out = Vec::with_capacity(left.len() + right.len() + 2);
    match u8::try_from(left.len()) {
        Ok(jt) => out.push(jump(JGE_K, split, jt, 0)),
        Err(_) => {
            let over =
                u32::try_from(left.len()).map_err(|_| internal("dispatch longer than 2^32"))?;
            out.push(jump(JGE_K, split, 0, 1));
            out.push(stmt(JA, over));
        }
    }
    out.extend(left);
    out.extend(right);
    Ok(out)
}

/// Where a jump of the search lands: an instruction of the subtree, or the
/// shared `ret` of a constant answer.
#[derive(Clone, Copy)]
enum Dest {
    At(usize),
    Ret(u32),
}

enum Slot {
    Fixed(BpfInstruction),
    Jge { k: u32, jt: Dest, jf: Dest },
}

/// Places the search over `runs` into `slots`; returns where it starts.
fn place(runs: &[(u32, Verdict<'_>)], slots: &mut Vec<Slot>) -> Result<Dest, SeccompError> {
    match runs {
        [] => Err(internal("empty dispatch")),
        [(_, Verdict::Ret(k))] => Ok(Dest::Ret(*k)),
        [(_, Verdict::Checked(e))] => {
            let at = slots.len();
            slots.extend(checked_block(e)?.into_iter().map(Slot::Fixed));
            Ok(Dest::At(at))
        }
        _ => {
            let (low, high) = runs.split_at(runs.len() / 2);
            let at = slots.len();
            slots.push(Slot::Fixed(stmt(JA, 0)));
            let jf = place(low, slots)?;
            let jt = place(high, slots)?;
            slots[at] = Slot::Jge {
                k: high[0].0,
                jt,
                jf,
            };
            Ok(Dest::At(at))
        }
    }
}

/// The search over `runs` with one shared `ret` per distinct constant
/// answer after it, so a constant leaf costs no instruction of its own.
/// `None` when a jump would not reach.
fn pooled(runs: &[(u32, Verdict<'_>)]) -> Result<Option<Vec<BpfInstruction>>, SeccompError> {
    let mut slots = Vec::new();
    if let Dest::Ret(k) = place(runs, &mut slots)? {
        return Ok(Some(vec![stmt(RET_K, k)]));
    }
    let mut pool: Vec<u32> = Vec::new();
    for slot in &slots {
        if let Slot::Jge { jt, jf, .. } = slot {
            for d in [jt, jf] {
                if let Dest::Ret(k) = *d {
                    if !pool.contains(&k) {
                        pool.push(k);
                    }
                }
            }
        }
    }
    let mut program = Vec::with_capacity(slots.len() + pool.len());
    for (i, slot) in slots.iter().enumerate() {
        let offset = |d: Dest| {
            let target = match d {
                Dest::At(t) => t,
                Dest::Ret(k) => slots.len() + pool.iter().position(|&p| p == k).unwrap_or(0),
            };
            u8::try_from(target - i - 1).ok()
        };
        program.push(match slot {
            Slot::Fixed(insn) => *insn,
            Slot::Jge { k, jt, jf } => match (offset(*jt), offset(*jf)) {
                (Some(jt), Some(jf)) => jump(JGE_K, *k, jt, jf),
                _ => return Ok(None),
            },
        });
    }
    program.extend(pool.into_iter().map(|k| stmt(RET_K, k)));
    Ok(Some(program))
}

/// Builds the whole program for `rows` and checks its shape.
pub fn assemble(rows: &[Entry]) -> Result<Vec<BpfInstruction>, SeccompError> {
    let sentinel = libc::SECCOMP_RET_ERRNO | SENTINEL_ERRNO;
    let mut sorted: Vec<&Entry> = rows.iter().collect();
    sorted.sort_by_key(|e| e.nr);
    if let Some(w) = sorted.windows(2).find(|w| w[0].nr == w[1].nr) {
        return Err(internal(format!(
            "syscall {} ({}) appears twice in the table",
            w[1].name, w[1].nr
        )));
    }
    for e in rows {
        let answers = match &e.rule {
            Rule::Allow => None,
            Rule::AllowIf { otherwise, .. } => Some(*otherwise),
            Rule::RefuseIf { action, .. } => Some(*action),
            Rule::Always(a) => Some(*a),
        };
        if answers.map(Action::ret) == Some(sentinel) || answers == Some(Action::Allow) {
            return Err(internal(format!(
                "row {} answers with a reserved action",
                e.name
            )));
        }
    }
    let sorted: Vec<Entry> = sorted.into_iter().cloned().collect();
    let mut program = prologue();
    program.extend(dispatch(&runs(&sorted))?);
    verify(&program)?;
    let program = compact(&program);
    verify(&program)?;
    Ok(program)
}

/// Where control may go after instruction `i`.
fn successors(program: &[BpfInstruction], i: usize) -> Vec<usize> {
    let insn = &program[i];
    match insn.code {
        RET_K => vec![],
        JA => vec![i + 1 + insn.k as usize],
        JEQ_K | JGT_K | JGE_K | JSET_K => {
            vec![i + 1 + usize::from(insn.jt), i + 1 + usize::from(insn.jf)]
        }
        _ => vec![i + 1],
    }
}

/// Drops what the kernel would convert and JIT-compile for nothing: the
/// instructions no path reaches (seccompiler pads its blocks with them) and
/// the `ja` that only skip over those. Jump offsets only shrink, so they
/// still fit. The program must already pass [`verify`].
fn compact(program: &[BpfInstruction]) -> Vec<BpfInstruction> {
    let mut reachable = vec![false; program.len()];
    let mut todo = vec![0];
    while let Some(i) = todo.pop() {
        if !std::mem::replace(&mut reachable[i], true) {
            todo.extend(successors(program, i));
        }
    }
    let skips_only_unreachable = |i: usize| {
        program[i].code == JA && (i + 1..i + 1 + program[i].k as usize).all(|j| !reachable[j])
    };
    let kept: Vec<bool> = (0..program.len())
        .map(|i| reachable[i] && !skips_only_unreachable(i))
        .collect();
    // new_index[i]: the position, in the compacted program, of the first kept
    // instruction at or after i (where a jump to i now lands).
    let mut new_index = vec![0usize; program.len() + 1];
    let mut next = kept.iter().filter(|&&k| k).count();
    new_index[program.len()] = next;
    for i in (0..program.len()).rev() {
        if kept[i] {
            next -= 1;
        }
        new_index[i] = next;
    }
    let offset = |from: usize, to: usize| new_index[to] - new_index[from] - 1;
    (0..program.len())
        .filter(|&i| kept[i])
        .map(|i| {
            let mut insn = program[i];
            match insn.code {
                JA => insn.k = offset(i, i + 1 + insn.k as usize) as u32,
                JEQ_K | JGT_K | JGE_K | JSET_K => {
                    // Offsets only shrink: they fit where the old ones did.
                    insn.jt = offset(i, i + 1 + usize::from(insn.jt)) as u8;
                    insn.jf = offset(i, i + 1 + usize::from(insn.jf)) as u8;
                }
                _ => {}
            }
            insn
        })
        .collect()
}

/// Structural checks: length, known opcodes, in-range jumps, ends in `ret`.
pub fn verify(program: &[BpfInstruction]) -> Result<(), SeccompError> {
    if program.len() > MAX_INSNS {
        return Err(SeccompError::TooLong(program.len()));
    }
    for (i, insn) in program.iter().enumerate() {
        match insn.code {
            LD_W_ABS if insn.k % 4 == 0 && insn.k < 64 => {}
            AND_K | RET_K | JA | JEQ_K | JGT_K | JGE_K | JSET_K => {}
            _ => return Err(internal(format!("instruction {i}: unexpected {insn:?}"))),
        }
        if let Some(t) = successors(program, i)
            .into_iter()
            .find(|&t| t >= program.len())
        {
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

/// What the accumulator may hold at an instruction.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Acc {
    Loaded(u32),
    Mixed,
}

/// What is known at an instruction: the accumulator, and the numbers the
/// syscall number may be on the paths reaching it (from the comparisons
/// made while A held `nr`). `None`: no path reaches it.
#[derive(Clone, PartialEq, Eq)]
struct Flow {
    acc: Acc,
    /// Sorted, disjoint, non-adjacent inclusive ranges.
    nr: Vec<(u32, u32)>,
}

/// The union of two range sets.
fn union(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut all: Vec<(u32, u32)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(all.len());
    for (lo, hi) in all {
        match out.last_mut() {
            Some(last) if u64::from(lo) <= u64::from(last.1) + 1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The part of a range set within `lo..=hi`.
fn clip(set: &[(u32, u32)], lo: u32, hi: u32) -> Vec<(u32, u32)> {
    set.iter()
        .map(|&(a, b)| (a.max(lo), b.min(hi)))
        .filter(|(a, b)| a <= b)
        .collect()
}

/// Forward flow analysis (jumps only go forward, so one pass suffices).
fn flow(program: &[BpfInstruction]) -> Vec<Option<Flow>> {
    let mut state: Vec<Option<Flow>> = vec![None; program.len() + 1];
    state[0] = Some(Flow {
        acc: Acc::Mixed,
        nr: vec![(0, u32::MAX)],
    });
    for (i, insn) in program.iter().enumerate() {
        let Some(here) = state[i].clone() else {
            continue;
        };
        let acc = match insn.code {
            LD_W_ABS => Acc::Loaded(insn.k),
            AND_K => Acc::Mixed,
            _ => here.acc,
        };
        let mut go = |t: usize, nr: Vec<(u32, u32)>| {
            if nr.is_empty() {
                return;
            }
            if let Some(slot) = state.get_mut(t) {
                *slot = Some(match slot.take() {
                    None => Flow { acc, nr },
                    Some(old) => Flow {
                        acc: if old.acc == acc { acc } else { Acc::Mixed },
                        nr: union(&old.nr, &nr),
                    },
                });
            }
        };
        let k = insn.k;
        let all = here.nr.clone();
        let on_nr = here.acc == Acc::Loaded(OFF_NR);
        let (jt, jf) = (i + 1 + usize::from(insn.jt), i + 1 + usize::from(insn.jf));
        match insn.code {
            RET_K => {}
            JA => go(i + 1 + k as usize, all),
            JGE_K if on_nr => {
                go(jt, clip(&all, k, u32::MAX));
                if let Some(below) = k.checked_sub(1) {
                    go(jf, clip(&all, 0, below));
                }
            }
            JGT_K if on_nr => {
                if let Some(above) = k.checked_add(1) {
                    go(jt, clip(&all, above, u32::MAX));
                }
                go(jf, clip(&all, 0, k));
            }
            JEQ_K if on_nr => {
                go(jt, clip(&all, k, k));
                go(jf, all);
            }
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                go(jt, all.clone());
                go(jf, all);
            }
            _ => go(i + 1, all),
        }
    }
    state
}

/// `nr 16 (ioctl)`, `nr 0..=15 (read ..= rt_sigreturn)`, or a list of
/// ranges; empty for every number.
fn nr_note(nr: &[(u32, u32)], name: &impl Fn(u32) -> Option<&'static str>) -> String {
    let num = |n: u32| {
        if n < 0x1_0000 {
            n.to_string()
        } else {
            format!("0x{n:x}")
        }
    };
    let range = |&(a, b): &(u32, u32)| {
        if a == b {
            num(a)
        } else {
            format!("{}..={}", num(a), num(b))
        }
    };
    match nr {
        [(0, u32::MAX)] | [] => String::new(),
        [(a, b)] => match (name(*a), name(*b)) {
            (Some(x), _) if a == b => format!("  ; nr {} ({x})", num(*a)),
            (Some(x), Some(y)) => format!("  ; nr {} ({x} ..= {y})", range(&(*a, *b))),
            _ => format!("  ; nr {}", range(&(*a, *b))),
        },
        many => {
            let list: Vec<String> = many.iter().map(range).collect();
            format!("  ; nr {}", list.join(", "))
        }
    }
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
pub fn disassemble(
    program: &[BpfInstruction],
    name: impl Fn(u32) -> Option<&'static str>,
) -> String {
    let flow = flow(program);
    let mut out = String::new();
    for (i, insn) in program.iter().enumerate() {
        let target = |off: u32| i + 1 + off as usize;
        let acc = flow[i].as_ref().map(|f| f.acc);
        let operand = |k: u32| match acc {
            Some(Acc::Loaded(OFF_NR)) if insn.code == JGE_K && k == X32_SYSCALL_BIT => {
                format!("#0x{k:x} (x32 bit)")
            }
            Some(Acc::Loaded(OFF_NR)) => match name(k) {
                Some(n) => format!("#{k} ({n})"),
                None => format!("#{k}"),
            },
            Some(Acc::Loaded(OFF_ARCH)) if k == AUDIT_ARCH => format!("#0x{k:08x} (native arch)"),
            _ => format!("#0x{k:x}"),
        };
        let text = match insn.code {
            // Each argument-check block keeps a few instructions of the
            // syscall comparison cut off its head that no path reaches.
            _ if acc.is_none() => "(unreachable)".to_string(),
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
            RET_K => format!(
                "ret  {}{}",
                action_name(insn.k),
                flow[i]
                    .as_ref()
                    .map(|f| nr_note(&f.nr, &name))
                    .unwrap_or_default()
            ),
            _ => format!(
                ".insn code=0x{:02x} jt={} jf={} k=0x{:x}",
                insn.code, insn.jt, insn.jf, insn.k
            ),
        };
        let _ = writeln!(out, "{i:4}: {text}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FilterSpec;

    /// Every instruction of every assembled program is on some path, and no
    /// `ja` merely falls through: nothing is left for the kernel to compile
    /// for nothing. (What the programs answer is proven by the oracle tests.)
    #[test]
    fn assembled_programs_carry_no_dead_instructions() {
        for spec in FilterSpec::all() {
            let program = assemble(&crate::table(&spec)).unwrap();
            let flow = flow(&program);
            for (i, insn) in program.iter().enumerate() {
                assert!(
                    flow[i].is_some(),
                    "{spec:?}: instruction {i} is unreachable"
                );
                assert!(
                    !(insn.code == JA && insn.k == 0),
                    "{spec:?}: instruction {i} jumps to the next one"
                );
            }
        }
    }
}
