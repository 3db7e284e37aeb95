//! The three-layer permission model: defaults, approved declarations, operator pre-approvals.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::chain::Approvals;
use crate::config::PermissionsConfig;
use crate::grant::{GrantKey, GrantKeyError, GrantRequest, Op, SkillName, Target};
use crate::outcome::ApprovalOutcome;
use crate::request::ApprovalRequest;
use crate::store::{ApprovalStore, StoreError};

/// A permission check or request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PermissionError {
    /// A non-interactive run needs grants nobody gave.
    #[error("skill {skill} needs {} which neither the config nor an earlier approval grants, and this run is not interactive; pre-approve them in the config ([permissions.pre_approved] \"<key>\" = \"allow\") or approve them in an interactive run", join(keys))]
    NotGranted {
        /// The skill.
        skill: SkillName,
        /// The missing keys.
        keys: Vec<GrantKey>,
    },
    /// The approval request did not end in `allowed-once`.
    #[error("skill {skill} was not granted {} (approval {outcome})", join(keys))]
    Refused {
        /// The skill.
        skill: SkillName,
        /// The keys asked for.
        keys: Vec<GrantKey>,
        /// How the request ended.
        outcome: ApprovalOutcome,
    },
    /// A path given to the model is not usable as a grant target.
    #[error(transparent)]
    Key(#[from] GrantKeyError),
    /// Approved grants could not be persisted, so they are not held.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn join(keys: &[GrantKey]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which layer allows an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "layer", content = "key")]
#[non_exhaustive]
pub enum Layer {
    /// The conservative defaults.
    Default,
    /// An earlier interactive approval stored in the approvals file.
    Approved(GrantKey),
    /// The operator's config.
    PreApproved(GrantKey),
}

/// The defaults every skill has: read under the project root, write under
/// the project's state folders, no shell, no network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    project_root: Target,
    state_dirs: Vec<Target>,
}

impl Defaults {
    /// Defaults for a project. Paths must be absolute and normal (canonicalise them first).
    pub fn new(project_root: &Path, state_dirs: &[PathBuf]) -> Result<Self, GrantKeyError> {
        Ok(Self {
            project_root: Target::path(project_root)?,
            state_dirs: state_dirs
                .iter()
                .map(Target::path)
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether the defaults allow `op` on `target`.
    pub fn allows(&self, op: Op, target: &Target) -> bool {
        match op {
            Op::FileRead => {
                self.project_root.covers(target) || self.state_dirs.iter().any(|d| d.covers(target))
            }
            Op::FileWrite => self.state_dirs.iter().any(|d| d.covers(target)),
            Op::Shell | Op::Network => false,
        }
    }
}

/// A skill invocation: the skill and the chain of skills that called it.
///
/// Checks use only [`SkillCall::skill`]: what a caller holds is never inherited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillCall {
    stack: Vec<SkillName>,
}

impl SkillCall {
    /// A top-level invocation of `skill`.
    pub fn root(skill: SkillName) -> Self {
        Self { stack: vec![skill] }
    }

    /// `child` invoked by this skill.
    pub fn call(&self, child: SkillName) -> Self {
        let mut stack = self.stack.clone();
        stack.push(child);
        Self { stack }
    }

    /// The skill running now.
    pub fn skill(&self) -> &SkillName {
        // `stack` is never empty: both constructors push.
        &self.stack[self.stack.len() - 1]
    }

    /// The callers, outermost first (for display and audit only).
    pub fn callers(&self) -> &[SkillName] {
        &self.stack[..self.stack.len() - 1]
    }
}

/// What a phase declares it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// The phase name, shown in the prompt.
    pub phase: Option<String>,
    /// The operations and targets needed.
    pub needs: Vec<(Op, Target)>,
}

/// Defaults, stored approvals and config pre-approvals for one project.
#[derive(Debug, Clone)]
pub struct PermissionModel {
    defaults: Defaults,
    pre_approved: BTreeSet<GrantKey>,
    store: ApprovalStore,
}

impl PermissionModel {
    /// A model from its three layers.
    pub fn new(defaults: Defaults, config: &PermissionsConfig, store: ApprovalStore) -> Self {
        Self {
            defaults,
            pre_approved: config.pre_approved_keys().cloned().collect(),
            store,
        }
    }

    /// Which layer lets the current skill of `call` do `op` on `target`, if any.
    pub fn check(&self, call: &SkillCall, op: Op, target: &Target) -> Option<Layer> {
        let skill = call.skill();
        if self.defaults.allows(op, target) {
            return Some(Layer::Default);
        }
        if let Some(k) = self
            .pre_approved
            .iter()
            .find(|k| k.covers(skill, op, target))
        {
            return Some(Layer::PreApproved(k.clone()));
        }
        self.store
            .covering(skill, op, target)
            .map(|k| Layer::Approved(k.clone()))
    }

    /// The keys in `declaration` that the current skill does not hold yet.
    pub fn missing(&self, call: &SkillCall, declaration: &Declaration) -> Vec<GrantKey> {
        let mut keys: Vec<GrantKey> = declaration
            .needs
            .iter()
            .filter(|(op, target)| self.check(call, *op, target).is_none())
            .map(|(op, target)| GrantKey {
                skill: call.skill().clone(),
                op: *op,
                target: target.clone(),
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Makes sure the current skill holds everything `declaration` needs.
    ///
    /// Missing grants are asked for in one request; approved ones are stored
    /// for later runs. A non-interactive run never asks: missing grants are an error.
    pub fn ensure(
        &mut self,
        call: &SkillCall,
        declaration: &Declaration,
        approvals: &Approvals<'_>,
    ) -> Result<(), PermissionError> {
        let keys = self.missing(call, declaration);
        if keys.is_empty() {
            return Ok(());
        }
        let skill = call.skill().clone();
        if !approvals.interactive() {
            return Err(PermissionError::NotGranted { skill, keys });
        }
        let request = ApprovalRequest::Grants(GrantRequest {
            skill: skill.clone(),
            phase: declaration.phase.clone(),
            keys: keys.clone(),
        });
        match approvals.request(&request) {
            ApprovalOutcome::AllowedOnce => Ok(self.store.add(&keys)?),
            outcome => Err(PermissionError::Refused {
                skill,
                keys,
                outcome,
            }),
        }
    }
}
