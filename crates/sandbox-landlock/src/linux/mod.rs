//! The Linux implementation.

pub(crate) mod abi;
pub(crate) mod backend;
pub(crate) mod broker;
mod child;
mod report;
mod rules;
pub(crate) mod ruleset;
pub(crate) mod spawner;
mod weaken;

use std::os::fd::{AsRawFd, OwnedFd};

use sandbox_core::{EnforcementReport, LaunchOptions, ResolvedPolicy};
use sandbox_seccomp::{Filter, FilterSpec};

use crate::LandlockError;
use abi::KernelAbi;

/// The report line of a run whose refused reads are recorded
/// ([`FilterSpec::broker_reads`]); the CLI's `--explain` looks for its start.
pub(crate) const READS_RECORDED: &str = "refused reads are recorded: read-only opens (but O_PATH and O_DIRECTORY ones, which Landlock never refuses) go to the broker, which answers EACCES and records each that Landlock would refuse beneath a read-deny path, after the errors the kernel gives first, and lets every other continue in the kernel";

/// Confinement prepared in the parent, ready to apply in a forked child.
#[derive(Debug)]
pub struct PreparedLandlock {
    ruleset: OwnedFd,
    /// The launch domain's ruleset when it differs from the command's: the
    /// broker makes the run's own shared memory in `/dev/shm`, where the
    /// command has no write right of its own.
    launch_ruleset: Option<OwnedFd>,
    filter: Filter,
    /// The child's end of the listener channel and the filter in libc's
    /// layout, when metadata writes go to a broker.
    broker_child: Option<(OwnedFd, Vec<libc::sock_filter>)>,
    /// The ids the child is expected to have, for the broker (see
    /// [`sandbox_broker::FixedCredentials`]).
    fixed_credentials: Option<sandbox_broker::FixedCredentials>,
    drop_capabilities: bool,
    /// Whether the child may not dump core (see [`PreparedLandlock::apply_in_child`]).
    no_core_dumps: bool,
    abi: KernelAbi,
    report: EnforcementReport,
}

/// Prepares confinement for `policy`: detects the ABI, opens every path,
/// builds the Landlock ruleset, compiles the seccomp filter and writes the report.
///
/// Metadata writes (chmod, chown, xattr, utimes, truncate by path) are refused
/// with `EPERM`; [`LandlockBackend`](crate::LandlockBackend) brokers them instead.
pub fn prepare(policy: &ResolvedPolicy) -> Result<PreparedLandlock, LandlockError> {
    let abi = abi::detect_abi()?;
    prepare_with(policy, abi, None, LaunchOptions::default(), None).map(|(prepared, _)| prepared)
}

pub(crate) fn prepare_with(
    policy: &ResolvedPolicy,
    abi: KernelAbi,
    channel: Option<broker::Channel>,
    options: LaunchOptions,
    child_layer: Option<u32>,
) -> Result<(PreparedLandlock, Option<broker::BrokerSupervisor>), LandlockError> {
    let observe = options.observe_writes && !policy.write_paths().is_empty();
    // Git directories are protected as their entries are made and changed.
    let git = policy.protects_git_dirs() && !policy.write_paths().is_empty();
    let mediation = if channel.is_some() && (rules::deny_beneath_write(policy) || observe || git) {
        rules::Mediation::Entries
    } else {
        rules::Mediation::Split
    };
    let mut plan = rules::plan(policy, abi.effective, mediation)?;
    plan.rules.extend(rules::stdio_rules(
        options.stdio,
        plan.handled,
        abi.effective,
    ));
    let extras = ruleset::Extras::for_policy(policy, abi.effective);
    let ruleset = ruleset::build(&plan, extras)?;
    // The run's own shared memory: the broker makes it (its domain grants
    // /dev/shm, the command's does not) and, without deny paths beneath
    // the write paths, the filter routes writing opens and entry calls to
    // it for that alone (the rest continue in the kernel).
    // Only where writing opens and entry calls go to the broker anyway: a
    // plain write path with nothing to protect keeps every write in the
    // kernel (and pays nothing), so `/dev/shm` stays unwritable there.
    let shm_dir = channel
        .as_ref()
        .filter(|_| mediation == rules::Mediation::Entries)
        .and_then(|_| rules::private_shm_dir(policy));
    let launch_ruleset = match &shm_dir {
        Some(dir) => {
            let mut launch = rules::plan_with(policy, abi.effective, mediation, Some(dir))?;
            launch.rules.extend(rules::stdio_rules(
                options.stdio,
                launch.handled,
                abi.effective,
            ));
            Some(ruleset::build(&launch, extras)?)
        }
        None => None,
    };
    let channel = match (channel, &shm_dir) {
        (Some(channel), Some(dir)) => {
            Some(channel.with_private_shm(dir, mediation == rules::Mediation::Split)?)
        }
        (channel, _) => channel,
    };
    // Observed runs under read denials (`with_broker_reads` below): the
    // broker finds exactly the reads Landlock refuses, from the objects the
    // command's rules grant reading.
    let channel = match channel {
        Some(channel) if options.observe_writes && !policy.read_deny_paths().is_empty() => {
            Some(channel.with_read_grants(rules::read_grants(&plan)))
        }
        other => other,
    };
    // Landlock never handles TRUNCATE (see `rules::plan`): seccomp covers truncate(2).
    // Test builds only: the `weaken-*` features drop one mechanism (weaken.rs).
    // Weakened last, so no builder step below puts a dropped part back.
    let spec = weaken::spec(
        FilterSpec::new(policy)
            .with_broker(channel.is_some())
            .with_group_held(options.hold_process_group)
            .with_broker_entries(mediation == rules::Mediation::Entries || shm_dir.is_some())
            // Observed runs under read denials: the reads Landlock refuses
            // are recorded too (read-only opens go to the broker).
            .with_broker_reads(options.observe_writes)
            // Host UNIX sockets are confined with the network on: the broker
            // admits those beneath the write paths and the allowed ones.
            .with_broker_connect(true)
            // A spawner's children nest their own domain beneath its thread's.
            .with_child_layer(child_layer),
    );
    let filter = sandbox_seccomp::compile_spec(&spec)?;
    let drop_capabilities = child::holds_capabilities().map_err(LandlockError::Capabilities)?;
    let facts = report::RulesetFacts {
        rules: plan.rules.len(),
        handled: format!("{:?}", plan.handled.iter().collect::<Vec<_>>()),
        skipped: plan.skipped,
        drops_capabilities: drop_capabilities,
        seccomp_instructions: filter.len(),
        seccomp_fingerprint: fingerprint(&filter),
        brokered_denials: mediation == rules::Mediation::Entries,
    };
    let mut report = report::report(policy, abi, Some(&facts));
    if observe && mediation == rules::Mediation::Entries {
        report.details.push(
            "writes are observed: writing opens and directory-entry calls go to the broker, which records each it refuses (outside the write paths) and answers as the kernel would".into(),
        );
    }
    if spec.routes_reads() {
        report.details.push(READS_RECORDED.into());
    }
    if mediation == rules::Mediation::Entries && rules::deny_beneath_write(policy) {
        report.details.push(
            "deny paths beneath write paths are kept by the broker: writing opens and directory-entry calls go to it; the rest of each write path stays fully writable".into(),
        );
    }
    if mediation == rules::Mediation::Entries {
        report.details.push(
            "no core dumps (hard RLIMIT_CORE 0): the kernel writes a core file without a syscall the broker could check, and Landlock grants the write paths whole".into(),
        );
    }
    if let Some(dir) = &shm_dir {
        report.details.push(format!(
            "POSIX shared memory and semaphores of the run's own: the broker makes new entries in {} and performs writes, links, renames, unlinks and truncates there only of the inodes it made (removed at the end if left); every other entry there stays unwritable",
            dir.display()
        ));
    }
    if !weaken::ENABLED.is_empty() {
        report.details.push(format!(
            "TEST BUILD, WEAKENED: {} (a weaken-* feature); this build must fail conformance",
            weaken::ENABLED.join(", ")
        ));
    }
    if options.hold_process_group {
        report.details.push(
            "setsid and setpgid refused: the runner ends the run by its process group".into(),
        );
    }
    // The child runs with NO_NEW_PRIVS, no capability (dropped above when
    // held) and a filter that refuses new user namespaces: when this thread's
    // ids are all one uid and one gid, the child's stay those for the whole
    // run. The child checks that before it vouches for them.
    let fixed_credentials = channel
        .as_ref()
        .and_then(|_| sandbox_broker::FixedCredentials::of_this_thread());
    let (broker_child, supervisor) = match channel {
        Some(channel) => {
            report.details.push(broker::REPORT_LINE.into());
            let (child, supervisor) =
                channel.split(&filter, fixed_credentials.clone(), spec.routes_entries());
            let program = weaken::brokered_program(filter.libc_program());
            (Some((child, program)), Some(supervisor))
        }
        None => (None, None),
    };
    // The path fds in `plan` close here: the kernel keeps the rules.
    Ok((
        PreparedLandlock {
            ruleset,
            launch_ruleset,
            filter,
            broker_child,
            fixed_credentials,
            drop_capabilities,
            no_core_dumps: mediation == rules::Mediation::Entries,
            abi,
            report,
        },
        supervisor,
    ))
}

/// The report for `policy` on this kernel without building a ruleset.
pub(crate) fn report_only(policy: &ResolvedPolicy, abi: KernelAbi) -> EnforcementReport {
    report::report(policy, abi, None)
}

impl PreparedLandlock {
    /// Confines the calling process: `no_new_privs`, capability drop (when
    /// the parent held any), no core dumps when a deny path lies beneath a
    /// write path, `landlock_restrict_self`, then the seccomp filter.
    ///
    /// Async-signal-safe and allocation-free, for use between `fork` and
    /// `exec`. Returns the raw errno of the first step that failed; the
    /// process is then partially confined and must not run the command.
    ///
    /// A core file is written by the kernel itself (fs/coredump.c opens it
    /// with the dumping task's credentials, so Landlock applies but no
    /// syscall reaches the filter): with the write paths granted whole and
    /// the deny paths kept by the broker, a core would land in a denied
    /// directory or replace a denied file named like the core pattern.
    pub fn apply_in_child(&self) -> Result<(), i32> {
        child::set_no_new_privs()?;
        if self.drop_capabilities {
            child::drop_capabilities()?;
        }
        if self.no_core_dumps {
            child::forbid_core_dumps()?;
        }
        child::restrict_self(self.ruleset.as_raw_fd())?;
        match &self.broker_child {
            Some((sock, program)) => {
                broker::install_in_child(program, sock.as_raw_fd(), self.fixed_credentials.as_ref())
            }
            None => self.filter.apply(),
        }
    }

    /// Confines the calling thread to the run's own Landlock domain:
    /// `no_new_privs` (this thread's only) and `landlock_restrict_self` with
    /// the child's ruleset, nothing else (no filter, capabilities kept).
    ///
    /// The broker's threads are started from a thread so confined and the
    /// child is spawned from it, so the child's own domain is nested beneath
    /// the broker's: the broker can reach the child (Landlock allows
    /// ptrace-class access, which `process_vm_readv` and `pidfd_getfd` need,
    /// only into the same or a nested domain: Documentation/userspace-api/
    /// landlock.rst, "Ptrace restrictions"), while the child cannot signal
    /// the broker (signal scoping, ABI 6) and nothing the broker does can
    /// write, link, rename or open with rights the sandbox's Landlock layer
    /// refuses the command.
    pub(crate) fn enter_domain(&self) -> Result<(), i32> {
        child::set_no_new_privs()?;
        child::restrict_self(self.launch_ruleset().as_raw_fd())
    }

    /// The launch domain's ruleset: the command's, or with `/dev/shm` for
    /// the run's own shared memory.
    fn launch_ruleset(&self) -> &OwnedFd {
        self.launch_ruleset.as_ref().unwrap_or(&self.ruleset)
    }

    /// [`PreparedLandlock::enter_domain`] as a launch domain that owns a
    /// duplicate of the ruleset.
    pub(crate) fn launch_domain(&self) -> Result<sandbox_core::LaunchDomain, LandlockError> {
        let ruleset = self
            .launch_ruleset()
            .try_clone()
            .map_err(LandlockError::Domain)?;
        Ok(sandbox_core::LaunchDomain::new(move || {
            child::set_no_new_privs()
                .and_then(|()| child::restrict_self(ruleset.as_raw_fd()))
                .map_err(std::io::Error::from_raw_os_error)
        }))
    }

    /// What is enforced for this policy on this kernel.
    pub fn report(&self) -> &EnforcementReport {
        &self.report
    }

    /// The kernel's Landlock ABI and the one in use.
    pub fn abi(&self) -> KernelAbi {
        self.abi
    }

    /// The compiled seccomp filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }
}

/// FNV-1a (64-bit) over the filter's instructions, in order: two launches
/// with the same fingerprint install the same program. (A fingerprint for
/// comparing reports, not a defence: nothing trusts it.)
fn fingerprint(filter: &sandbox_seccomp::Filter) -> u64 {
    let step = |h: u64, b: u8| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    filter
        .instructions()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, i| {
            let h = i.code.to_le_bytes().into_iter().fold(h, step);
            let h = step(step(h, i.jt), i.jf);
            i.k.to_le_bytes().into_iter().fold(h, step)
        })
}
