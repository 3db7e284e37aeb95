//! The egress flags of issue #44: per-request rules (intercepted hosts) and
//! how the proxy verifies the origins it forwards them to.

use std::path::PathBuf;

use clap::Args;

// Flattened into `PolicyFlags` (no doc comment here: a flattened struct's
// would replace the subcommand's description).
#[derive(Args, Clone, Default)]
pub(crate) struct EgressFlags {
    /// Allow only requests of these METHODS to URLs matching URL-PATTERN
    /// (repeatable), e.g. `'GET,HEAD https://pkgs.example.com/simple/**'`:
    /// the host it names is intercepted (the proxy terminates TLS with a
    /// per-run CA the run trusts, checks each request's method and
    /// normalised path, refuses the others with 403). `*` in the pattern is
    /// one path segment, `**` any number. Linux only.
    #[arg(long = "allow-request", value_name = "METHODS URL-PATTERN", conflicts_with_all = ["policy_json", "no_network"])]
    pub(crate) allow_request: Vec<sandbox::policy::RequestRule>,
    /// Verify the origins of intercepted hosts against the certificates of
    /// this PEM file instead of the system roots.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub(crate) upstream_ca: Option<PathBuf>,
    /// Give the run a placeholder for this credential (repeatable):
    /// `NAME@HOST[,HOST...]` reads `$NAME` from the sandbox's own
    /// environment, `NAME=file:PATH@HOST` a file. The command's `$NAME` is a
    /// random placeholder; the proxy writes the real value in its place into
    /// the request headers (`Authorization` bearer or basic, any other) of
    /// requests to those hosts only, each of which an `--allow-request` rule
    /// must name. A request carrying the placeholder anywhere else is
    /// refused and recorded. Linux only.
    #[arg(
        long = "secret",
        value_name = "NAME@HOST",
        conflicts_with = "policy_json"
    )]
    pub(crate) secret: Vec<sandbox::policy::SecretSpec>,
}

impl EgressFlags {
    /// What the run's egress needs beyond the policy: the flags, and the
    /// operator's `[sandbox.egress]` (its secrets, then the flags'; its
    /// upstream CA unless `--upstream-ca` names one).
    pub(crate) fn options(
        &self,
        config: &sandbox::policy::EgressConfig,
    ) -> sandbox::runner::EgressOptions {
        let mut secrets = config.secrets.clone();
        secrets.extend(self.secret.iter().cloned());
        sandbox::runner::EgressOptions::default()
            .with_upstream_ca(
                self.upstream_ca
                    .clone()
                    .or_else(|| config.upstream_ca.clone()),
            )
            .with_secrets(secrets)
    }
}
