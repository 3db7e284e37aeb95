//! A small classic-BPF interpreter for seccomp programs, written from the
//! kernel's `seccomp_data` layout and the cBPF opcode table, independent of
//! the compiler under test.
#![allow(dead_code)]

use sandbox_seccomp::BpfInstruction;

pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const RET_EPERM: u32 = 0x0005_0000 | 1;
pub const RET_ENOSYS: u32 = 0x0005_0000 | 38;
pub const RET_USER_NOTIF: u32 = 0x7fc0_0000;
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;
pub const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;

/// `struct seccomp_data`.
#[derive(Debug, Clone, Copy)]
pub struct SeccompData {
    pub nr: u32,
    pub arch: u32,
    pub ip: u64,
    pub args: [u64; 6],
}

impl SeccompData {
    fn bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&self.nr.to_le_bytes());
        b[4..8].copy_from_slice(&self.arch.to_le_bytes());
        b[8..16].copy_from_slice(&self.ip.to_le_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        b
    }
}

/// Runs `prog` on `data` and returns the `SECCOMP_RET_*` value. Panics on
/// anything the kernel's checker would reject (unknown opcode, jump out of
/// range, misaligned load, falling off the end).
pub fn run(prog: &[BpfInstruction], data: &SeccompData) -> u32 {
    let mem = data.bytes();
    let mut a: u32 = 0;
    let mut pc = 0usize;
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps <= prog.len(), "no forward progress");
        let i = prog
            .get(pc)
            .unwrap_or_else(|| panic!("pc {pc} out of program"));
        let (jt, jf) = (usize::from(i.jt), usize::from(i.jf));
        match i.code {
            // BPF_LD | BPF_W | BPF_ABS
            0x20 => {
                let k = i.k as usize;
                assert!(k % 4 == 0 && k + 4 <= 64, "bad load offset {k}");
                a = u32::from_le_bytes(mem[k..k + 4].try_into().unwrap());
                pc += 1;
            }
            // BPF_ALU | BPF_AND | BPF_K
            0x54 => {
                a &= i.k;
                pc += 1;
            }
            // BPF_JMP | BPF_JA
            0x05 => pc += 1 + i.k as usize,
            // BPF_JMP | BPF_JEQ / JGT / JGE / JSET | BPF_K
            0x15 => pc += 1 + if a == i.k { jt } else { jf },
            0x25 => pc += 1 + if a > i.k { jt } else { jf },
            0x35 => pc += 1 + if a >= i.k { jt } else { jf },
            0x45 => pc += 1 + if a & i.k != 0 { jt } else { jf },
            // BPF_RET | BPF_K
            0x06 => return i.k,
            c => panic!("unsupported opcode {c:#x} at {pc}"),
        }
    }
}

/// Names a return value for assertion messages.
pub fn ret_name(r: u32) -> String {
    match r {
        RET_ALLOW => "ALLOW".into(),
        RET_KILL_PROCESS => "KILL_PROCESS".into(),
        RET_EPERM => "EPERM".into(),
        RET_ENOSYS => "ENOSYS".into(),
        r => format!("{r:#x}"),
    }
}

/// The kernel's action-cache emulator (`seccomp_is_const_allow` in
/// kernel/seccomp.c), restated: run `prog` knowing only `nr` and `arch`.
/// Returns whether the verdict is a constant `ALLOW` (the kernel then skips
/// the filter for this number) and how many instructions it emulated (the
/// work the kernel does per number when the filter is attached).
pub fn const_allow(prog: &[BpfInstruction], nr: u32, arch: u32) -> (bool, usize) {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    let mut steps = 0;
    while let Some(i) = prog.get(pc) {
        steps += 1;
        let (jt, jf) = (usize::from(i.jt), usize::from(i.jf));
        match i.code {
            0x20 => match i.k {
                0 => a = nr,
                4 => a = arch,
                // Any other load: not constant.
                _ => return (false, steps),
            },
            0x54 => a &= i.k,
            0x05 => pc += i.k as usize,
            0x15 => pc += if a == i.k { jt } else { jf },
            0x25 => pc += if a > i.k { jt } else { jf },
            0x35 => pc += if a >= i.k { jt } else { jf },
            0x45 => pc += if a & i.k != 0 { jt } else { jf },
            0x06 => return (i.k == RET_ALLOW, steps),
            _ => return (false, steps),
        }
        pc += 1;
    }
    panic!("ran off the end of the program at {pc}");
}
