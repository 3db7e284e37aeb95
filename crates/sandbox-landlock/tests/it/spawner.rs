//! The confined spawner: one thread confined once, every child it starts
//! confined like the Command form's, and the rest of the process untouched.
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

use crate::common::*;
use sandbox_core::SandboxPolicy;
use sandbox_landlock::{ConfinedSpawner, LandlockBackend};

fn spawner(policy: &sandbox_core::ResolvedPolicy) -> ConfinedSpawner {
    LandlockBackend::new()
        .expect("Landlock is available on this host")
        .spawner(policy)
        .expect("spawner starts")
}

fn sh(spawner: &ConfinedSpawner, script: &str) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawner.spawn(cmd).unwrap().wait_with_output().unwrap()
}

#[test]
fn children_are_confined_and_the_rest_of_the_process_is_not() {
    let (w, outside) = (temp(), temp());
    let policy = resolve(write_policy(&[&w.path], false));
    let spawner = spawner(&policy);
    for round in 0..20 {
        // Positive control: inside the write path, the child writes.
        let inside = w.path.join(format!("in{round}"));
        ok(&sh(&spawner, &format!("echo x > '{}'", inside.display())));
        assert!(inside.exists());
        // Outside it, the same write is refused and nothing appears.
        let target = outside.path.join(format!("out{round}"));
        refused(&sh(&spawner, &format!("echo x > '{}'", target.display())));
        assert!(!target.exists());
    }
    // This thread is not confined: it writes outside.
    std::fs::write(outside.path.join("main"), "x").unwrap();
    let status = ok(&sh(&spawner, "cat /proc/self/status"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            .unwrap()
    };
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2");
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(field("CapEff:"), "0000000000000000");
        assert_eq!(field("CapBnd:"), "0000000000000000");
    }
    assert!(spawner.report().backend.contains("landlock"));
}

#[test]
fn metadata_writes_go_to_the_spawners_broker() {
    let (w, outside) = (temp(), temp());
    let (inner, outer) = (w.path.join("f"), outside.path.join("f"));
    for f in [&inner, &outer] {
        std::fs::write(f, "x").unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let policy = resolve(write_policy(&[&w.path], false));
    let spawner = spawner(&policy);
    ok(&sh(&spawner, &format!("chmod 600 '{}'", inner.display())));
    refused(&sh(&spawner, &format!("chmod 600 '{}'", outer.display())));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&inner), 0o600, "the brokered chmod inside took effect");
    assert_eq!(mode(&outer), 0o644, "the chmod outside changed nothing");
    let mediation = spawner.finish().expect("the spawner ran a broker");
    assert!(mediation.performed >= 1, "{mediation:?}");
    assert!(!mediation.refused.is_empty(), "{mediation:?}");
}

#[test]
fn a_policy_denying_subprocesses_is_refused() {
    let w = temp();
    let policy = resolve(SandboxPolicy {
        deny_subprocess: true,
        ..write_policy(&[&w.path], false)
    });
    let err = LandlockBackend::new()
        .unwrap()
        .spawner(&policy)
        .unwrap_err();
    assert!(err.to_string().contains("deny_subprocess"), "{err}");
    // Positive control: the same policy without the switch gets a spawner.
    let policy = resolve(write_policy(&[&w.path], false));
    assert!(LandlockBackend::new().unwrap().spawner(&policy).is_ok());
}

/// What a child runs against the process hosting its spawner (pid in
/// `$ARGV[0]`): SIGSTOP and SIGKILL by `tgkill` to every thread, SIGKILL by
/// a thread pidfd (`PIDFD_THREAD`) to every thread, reads and a writing
/// open of each thread's `/proc/<pid>/task/<tid>/mem`, `kill` of the
/// process. Prints the thread names it saw (the targets existed), how many
/// attacks the kernel let through, and the same calls on itself (they work).
const ATTACK: &str = r#"
my $pid = $ARGV[0] + 0;
opendir(my $d, "/proc/$pid/task") or die "no task dir: $!";
my @tids = map { $_ + 0 } grep { /^\d+$/ } readdir $d;
my ($hits, @names) = (0);
for my $tid (@tids) {
    if (open(my $c, '<', "/proc/$pid/task/$tid/comm")) { my $n = <$c>; chomp $n; push @names, $n; }
    for my $sig (19, 9) { $hits++ if syscall(234, $pid, $tid, $sig) == 0; }
    my $fd = syscall(434, $tid, 0x80);
    $hits++ if $fd >= 0 && syscall(424, $fd, 9, 0, 0) == 0;
    if (open(my $m, '<', "/proc/$pid/task/$tid/maps")) {
        my ($start) = (<$m> // '') =~ /^([0-9a-f]+)-\S+ r/;
        if (defined $start && open(my $mem, '<', "/proc/$pid/task/$tid/mem")) {
            sysseek($mem, hex($start), 0);
            $hits++ if (sysread($mem, my $buf, 8) // 0) == 8;
        }
    }
    $hits++ if open(my $w, '+<', "/proc/$pid/task/$tid/mem");
}
# Control: the same reads of its own memory work.
open(my $m, '<', "/proc/self/maps") or die;
my ($start) = <$m> =~ /^([0-9a-f]+)-/;
open(my $mem, '<', "/proc/self/mem") or die;
sysseek($mem, hex($start), 0);
print "ownmem=", (sysread($mem, my $buf, 8) // 0), " ";
$hits++ if kill(9, $pid);
my $me = $$ + 0;
my $own = syscall(234, $me, $me, 0) == 0 ? "ok" : "err$!";
print "names=", join(",", sort @names), " hits=$hits own=$own\n";
"#;

/// The victim half of `children_cannot_signal_the_spawner`: runs only in
/// the process that test starts (`SPAWNER_VICTIM` set).
#[test]
fn spawner_victim() {
    if std::env::var_os("SPAWNER_VICTIM").is_none() {
        return;
    }
    let policy = resolve(SandboxPolicy::default());
    let spawner = spawner(&policy);
    let mut cmd = Command::new("/usr/bin/perl");
    cmd.args(["-e", ATTACK, &std::process::id().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawner.spawn(cmd).unwrap().wait_with_output().unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    println!("survived");
}

/// A child cannot stop or kill the process hosting its spawner, whose
/// spawner and broker threads share the run's domains: each child sits in a
/// Landlock domain nested beneath the spawner thread's (signal scoping,
/// ABI 6). As root and as nobody; the attacker names every thread it
/// attacks (they existed) and signals itself (the calls work).
#[test]
fn children_cannot_signal_the_spawner() {
    if std::env::var_os("SPAWNER_VICTIM").is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let victim_test = test_path(module_path!(), "spawner_victim");
    let victim = [
        victim_test.as_str(),
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ];
    let setpriv = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    for as_nobody in [false, true] {
        let mut cmd = if as_nobody {
            let mut c = Command::new(setpriv[0]);
            c.args(&setpriv[1..]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd
            .args(victim)
            .env("SPAWNER_VICTIM", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let who = if as_nobody { "nobody" } else { "root" };
        assert!(
            out.status.success() && text.contains("survived"),
            "{who}: the victim died ({:?}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("sandbox-spawner"), "{who}: {text}");
        assert!(text.contains("own=ok"), "{who}: {text}");
        assert!(text.contains("ownmem=8 "), "{who}: {text}");
        assert!(text.contains("hits=0 "), "{who}: {text}");
    }
}

/// Below Landlock ABI 6 there is no signal scoping and so no child layer:
/// the spawner still confines its children (write refused outside, allowed
/// inside).
#[test]
fn below_abi_6_the_spawner_still_confines() {
    let (w, outside) = (temp(), temp());
    let policy = resolve(write_policy(&[&w.path], false));
    let spawner = LandlockBackend::new()
        .unwrap()
        .with_abi_ceiling(5)
        .unwrap()
        .spawner(&policy)
        .expect("spawner starts at ABI 5");
    let inside = w.path.join("in");
    ok(&sh(&spawner, &format!("echo x > '{}'", inside.display())));
    assert!(inside.exists());
    let target = outside.path.join("out");
    refused(&sh(&spawner, &format!("echo x > '{}'", target.display())));
    assert!(!target.exists());
}
