//! Presets: named (sandbox mode, approval policy) bundles, and which one is current.

use sandbox_core::SandboxMode;

use crate::config::PresetConfig;
use crate::outcome::ApprovalPolicy;

/// The name reserved for a state that matches no preset.
pub const CUSTOM: &str = "custom";

/// A preset could not be defined or chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PresetError {
    /// `custom` names a derived state and cannot be defined or chosen.
    #[error("the preset name `custom` is reserved for a state that matches no preset; pick another name")]
    Reserved,
    /// The name has characters outside `[A-Za-z0-9._-]` or is empty.
    #[error("invalid preset name {0:?}: use 1-64 characters from A-Z a-z 0-9 . _ -")]
    BadName(String),
    /// The config defines the same name twice.
    #[error("preset {0:?} is defined twice in the config")]
    Duplicate(String),
    /// No preset has this name.
    #[error("unknown preset {name:?}; known presets: {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names in the table.
        known: String,
    },
}

/// A named bundle of the two knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    name: String,
    /// The sandbox mode it selects.
    pub mode: SandboxMode,
    /// The approval policy it selects.
    pub approval: ApprovalPolicy,
}

impl Preset {
    /// A preset; `custom` and malformed names are refused.
    pub fn new(
        name: &str,
        mode: SandboxMode,
        approval: ApprovalPolicy,
    ) -> Result<Self, PresetError> {
        if name == CUSTOM {
            return Err(PresetError::Reserved);
        }
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(PresetError::BadName(name.to_owned()));
        }
        Ok(Self {
            name: name.to_owned(),
            mode,
            approval,
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn matches(&self, mode: SandboxMode, approval: ApprovalPolicy) -> bool {
        self.mode == mode && self.approval == approval
    }
}

/// The presets a session can choose from, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresetTable {
    presets: Vec<Preset>,
}

impl Default for PresetTable {
    /// `workspace-write` (workspace-write + ask) and `danger-full-access`
    /// (danger-full-access + never).
    fn default() -> Self {
        Self {
            presets: vec![
                Preset {
                    name: "workspace-write".to_owned(),
                    mode: SandboxMode::WorkspaceWrite,
                    approval: ApprovalPolicy::Ask,
                },
                Preset {
                    name: "danger-full-access".to_owned(),
                    mode: SandboxMode::DangerFullAccess,
                    approval: ApprovalPolicy::Never,
                },
            ],
        }
    }
}

impl PresetTable {
    /// The defaults, then the config's presets in order; a config preset with a
    /// default's name replaces it in place.
    pub fn from_config(config: &[PresetConfig]) -> Result<Self, PresetError> {
        let mut table = Self::default();
        let mut seen = Vec::new();
        for c in config {
            if seen.contains(&c.name.as_str()) {
                return Err(PresetError::Duplicate(c.name.clone()));
            }
            seen.push(&c.name);
            let p = Preset::new(&c.name, c.sandbox_mode, c.approval)?;
            match table.presets.iter_mut().find(|q| q.name == p.name) {
                Some(slot) => *slot = p,
                None => table.presets.push(p),
            }
        }
        Ok(table)
    }

    /// The preset called `name`.
    pub fn get(&self, name: &str) -> Result<&Preset, PresetError> {
        if name == CUSTOM {
            return Err(PresetError::Reserved);
        }
        self.presets
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| PresetError::Unknown {
                name: name.to_owned(),
                known: self
                    .presets
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// All presets, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Preset> {
        self.presets.iter()
    }
}

/// A change to a session's permission knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermissionEvent {
    /// The sandbox mode was set.
    Mode(SandboxMode),
    /// The approval policy was set.
    Approval(ApprovalPolicy),
    /// A preset was chosen explicitly (sets both knobs).
    Preset(String),
}

/// The preset a session is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurrentPreset<'t> {
    /// The knobs match this preset.
    Named(&'t Preset),
    /// The knobs match no preset.
    Custom,
}

impl CurrentPreset<'_> {
    /// The preset's name, or `custom`.
    pub fn name(&self) -> &str {
        match self {
            Self::Named(p) => p.name(),
            Self::Custom => CUSTOM,
        }
    }
}

/// A session's two knobs and its last explicit preset choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionState {
    /// The sandbox mode.
    pub mode: SandboxMode,
    /// The approval policy.
    pub approval: ApprovalPolicy,
    last_choice: Option<String>,
}

impl PermissionState {
    /// A state with no explicit preset choice.
    pub fn new(mode: SandboxMode, approval: ApprovalPolicy) -> Self {
        Self {
            mode,
            approval,
            last_choice: None,
        }
    }

    /// Replays `events` on `initial`.
    pub fn fold<'e>(
        table: &PresetTable,
        initial: Self,
        events: impl IntoIterator<Item = &'e PermissionEvent>,
    ) -> Result<Self, PresetError> {
        let mut state = initial;
        for e in events {
            state.apply(table, e)?;
        }
        Ok(state)
    }

    /// Applies one event; choosing an unknown preset or `custom` is an error and changes nothing.
    pub fn apply(
        &mut self,
        table: &PresetTable,
        event: &PermissionEvent,
    ) -> Result<(), PresetError> {
        match event {
            PermissionEvent::Mode(m) => self.mode = *m,
            PermissionEvent::Approval(a) => self.approval = *a,
            PermissionEvent::Preset(name) => {
                let p = table.get(name)?;
                self.mode = p.mode;
                self.approval = p.approval;
                self.last_choice = Some(p.name.clone());
            }
        }
        Ok(())
    }

    /// The preset derived from the two knobs: the last explicitly chosen preset if
    /// it still matches, else the first matching preset in table order, else `custom`.
    pub fn current<'t>(&self, table: &'t PresetTable) -> CurrentPreset<'t> {
        let chosen = self
            .last_choice
            .as_deref()
            .and_then(|n| table.iter().find(|p| p.name == n))
            .filter(|p| p.matches(self.mode, self.approval));
        chosen
            .or_else(|| table.iter().find(|p| p.matches(self.mode, self.approval)))
            .map_or(CurrentPreset::Custom, CurrentPreset::Named)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PermissionEvent as E;
    use SandboxMode::*;

    fn table_with_twin() -> PresetTable {
        PresetTable::from_config(&[PresetConfig {
            name: "dev".into(),
            sandbox_mode: WorkspaceWrite,
            approval: ApprovalPolicy::Ask,
        }])
        .unwrap()
    }

    fn current(table: &PresetTable, events: &[E]) -> String {
        let s = PermissionState::fold(
            table,
            PermissionState::new(ReadOnly, ApprovalPolicy::Ask),
            events,
        )
        .unwrap();
        s.current(table).name().to_owned()
    }

    #[test]
    fn defaults_have_the_two_presets() {
        let t = PresetTable::default();
        let ww = t.get("workspace-write").unwrap();
        assert_eq!(
            (ww.mode, ww.approval),
            (WorkspaceWrite, ApprovalPolicy::Ask)
        );
        let d = t.get("danger-full-access").unwrap();
        assert_eq!(
            (d.mode, d.approval),
            (DangerFullAccess, ApprovalPolicy::Never)
        );
    }

    #[test]
    fn current_is_derived_from_the_knobs() {
        let t = PresetTable::default();
        assert_eq!(current(&t, &[]), "custom");
        assert_eq!(current(&t, &[E::Mode(WorkspaceWrite)]), "workspace-write");
        assert_eq!(
            current(
                &t,
                &[
                    E::Preset("danger-full-access".into()),
                    E::Approval(ApprovalPolicy::Ask)
                ]
            ),
            "custom"
        );
        assert_eq!(
            current(
                &t,
                &[
                    E::Mode(DangerFullAccess),
                    E::Approval(ApprovalPolicy::Never)
                ]
            ),
            "danger-full-access"
        );
    }

    #[test]
    fn last_explicit_choice_tells_twins_apart() {
        let t = table_with_twin();
        assert_eq!(current(&t, &[E::Mode(WorkspaceWrite)]), "workspace-write");
        assert_eq!(current(&t, &[E::Preset("dev".into())]), "dev");
        assert_eq!(
            current(
                &t,
                &[E::Preset("dev".into()), E::Preset("workspace-write".into())]
            ),
            "workspace-write"
        );
        // Knobs moved away and back: the explicit choice still tells.
        assert_eq!(
            current(
                &t,
                &[
                    E::Preset("dev".into()),
                    E::Approval(ApprovalPolicy::Never),
                    E::Approval(ApprovalPolicy::Ask)
                ]
            ),
            "dev"
        );
    }

    #[test]
    fn custom_is_reserved_and_unknown_names_are_listed() {
        let t = PresetTable::default();
        assert_eq!(t.get("custom").unwrap_err(), PresetError::Reserved);
        let cfg = |name: &str| PresetConfig {
            name: name.into(),
            sandbox_mode: ReadOnly,
            approval: ApprovalPolicy::Ask,
        };
        assert_eq!(
            PresetTable::from_config(&[cfg("custom")]).unwrap_err(),
            PresetError::Reserved
        );
        assert_eq!(
            PresetTable::from_config(&[cfg("a"), cfg("a")]).unwrap_err(),
            PresetError::Duplicate("a".into())
        );
        let mut s = PermissionState::new(ReadOnly, ApprovalPolicy::Ask);
        let err = s
            .apply(&t, &E::Preset("nope".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nope") && err.contains("danger-full-access"),
            "{err}"
        );
        assert_eq!(s, PermissionState::new(ReadOnly, ApprovalPolicy::Ask));
        // A config preset with a default's name replaces it.
        let t = PresetTable::from_config(&[PresetConfig {
            name: "workspace-write".into(),
            sandbox_mode: WorkspaceWrite,
            approval: ApprovalPolicy::Never,
        }])
        .unwrap();
        assert_eq!(
            t.get("workspace-write").unwrap().approval,
            ApprovalPolicy::Never
        );
        assert_eq!(t.iter().count(), 2);
    }
}
