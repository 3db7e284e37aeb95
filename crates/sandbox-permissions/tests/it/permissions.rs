//! The three-layer permission model end to end: defaults, config, approvals file.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use sandbox_permissions::{
    Answer, Answerer, ApprovalOutcome, ApprovalPolicy, ApprovalRequest, ApprovalStore, Approvals,
    Declaration, Defaults, JsonLinesAudit, Layer, Op, PermissionError, PermissionModel,
    PermissionsConfig, SkillCall, SkillName, Target,
};

/// An interactive answerer with a fixed reply that counts how often it was asked.
struct Human<'c> {
    asked: &'c Cell<u32>,
    reply: ApprovalOutcome,
}

impl Answerer for Human<'_> {
    fn name(&self) -> &str {
        "human"
    }
    fn interactive(&self) -> bool {
        true
    }
    fn answer(&self, request: &ApprovalRequest) -> Answer {
        assert!(matches!(request, ApprovalRequest::Grants(_)));
        self.asked.set(self.asked.get() + 1);
        Answer::Decide(self.reply)
    }
}

fn skill(s: &str) -> SkillName {
    SkillName::new(s).unwrap()
}

fn t(p: &str) -> Target {
    Target::path(p).unwrap()
}

struct Project {
    _dir: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
}

fn project() -> Project {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let state = root.join(".sandbox");
    std::fs::create_dir(&state).unwrap();
    Project {
        _dir: dir,
        root,
        state,
    }
}

fn model(p: &Project, config: &str) -> PermissionModel {
    let config = PermissionsConfig::from_toml_str(config, Path::new("test.toml")).unwrap();
    PermissionModel::new(
        Defaults::new(&p.root, std::slice::from_ref(&p.state)).unwrap(),
        &config,
        ApprovalStore::load(&p.state).unwrap(),
    )
}

fn write_out() -> Declaration {
    Declaration {
        phase: Some("emit".into()),
        needs: vec![(Op::FileWrite, t("/tmp/out"))],
    }
}

#[test]
fn defaults_read_the_project_write_the_state_and_nothing_else() {
    let p = project();
    let m = model(&p, "");
    let call = SkillCall::root(skill("build"));
    let inside = Target::path(p.root.join("src/main.rs")).unwrap();
    let state_file = Target::path(p.state.join("cache")).unwrap();
    assert_eq!(m.check(&call, Op::FileRead, &inside), Some(Layer::Default));
    assert_eq!(
        m.check(&call, Op::FileWrite, &state_file),
        Some(Layer::Default)
    );
    assert_eq!(m.check(&call, Op::FileWrite, &inside), None);
    assert_eq!(m.check(&call, Op::FileRead, &t("/etc/passwd")), None);
    assert_eq!(m.check(&call, Op::Shell, &Target::Any), None);
    assert_eq!(m.check(&call, Op::Network, &Target::Any), None);
}

#[test]
fn config_pre_approval_holds_for_its_skill_only() {
    let p = project();
    let m = model(
        &p,
        "[permissions.pre_approved]\n\"build/file.write/tmp/out\" = \"allow\"\n",
    );
    let build = SkillCall::root(skill("build"));
    let key = "build/file.write/tmp/out".parse().unwrap();
    assert_eq!(
        m.check(&build, Op::FileWrite, &t("/tmp/out/a")),
        Some(Layer::PreApproved(key))
    );
    assert_eq!(m.check(&build, Op::FileWrite, &t("/tmp/other")), None);
    let sub = build.call(skill("helper"));
    assert_eq!(m.check(&sub, Op::FileWrite, &t("/tmp/out/a")), None);
}

#[test]
fn interactive_approval_is_stored_and_not_inherited_by_a_sub_skill() {
    let p = project();
    let asked = Cell::new(0);
    let audit = JsonLinesAudit::new(Vec::new());
    let mut approvals = Approvals::new(ApprovalPolicy::Ask, true, &audit);
    approvals.push(Human {
        asked: &asked,
        reply: ApprovalOutcome::AllowedOnce,
    });
    let mut m = model(&p, "");
    let build = SkillCall::root(skill("build"));
    m.ensure(&build, &write_out(), &approvals).unwrap();
    assert_eq!(asked.get(), 1);
    // Held now, and not asked again.
    m.ensure(&build, &write_out(), &approvals).unwrap();
    assert_eq!(asked.get(), 1);

    // A later run (new model from disk) holds it through the approvals file.
    let m2 = model(&p, "");
    assert!(matches!(
        m2.check(&build, Op::FileWrite, &t("/tmp/out")),
        Some(Layer::Approved(_))
    ));
    let text = std::fs::read_to_string(p.state.join("approvals.json")).unwrap();
    assert!(text.contains("\"build/file.write/tmp/out\""), "{text}");

    // The sub-skill build calls does not inherit it: it must ask itself.
    let sub = build.call(skill("helper"));
    assert_eq!(m2.check(&sub, Op::FileWrite, &t("/tmp/out")), None);
    let mut m3 = model(&p, "");
    m3.ensure(&sub, &write_out(), &approvals).unwrap();
    assert_eq!(asked.get(), 2);
}

#[test]
fn non_interactive_run_never_asks_and_uses_only_earlier_decisions() {
    let p = project();
    let asked = Cell::new(0);
    let audit = JsonLinesAudit::new(Vec::new());
    let mut headless = Approvals::new(ApprovalPolicy::Ask, false, &audit);
    headless.push(Human {
        asked: &asked,
        reply: ApprovalOutcome::AllowedOnce,
    });
    let build = SkillCall::root(skill("build"));
    let err = model(&p, "")
        .ensure(&build, &write_out(), &headless)
        .unwrap_err();
    assert!(matches!(err, PermissionError::NotGranted { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("build/file.write/tmp/out") && msg.contains("pre_approved"),
        "{msg}"
    );
    assert_eq!(asked.get(), 0);
    assert!(!p.state.join("approvals.json").exists());

    // Positive control: an earlier interactive approval carries over to the headless run.
    let mut interactive = Approvals::new(ApprovalPolicy::Ask, true, &audit);
    interactive.push(Human {
        asked: &asked,
        reply: ApprovalOutcome::AllowedOnce,
    });
    model(&p, "")
        .ensure(&build, &write_out(), &interactive)
        .unwrap();
    model(&p, "")
        .ensure(&build, &write_out(), &headless)
        .unwrap();
    assert_eq!(asked.get(), 1);
}

#[test]
fn refusals_store_nothing() {
    for (policy, reply, expected, asks) in [
        (
            ApprovalPolicy::Ask,
            ApprovalOutcome::Rejected,
            ApprovalOutcome::Rejected,
            1,
        ),
        (
            ApprovalPolicy::Ask,
            ApprovalOutcome::Cancelled,
            ApprovalOutcome::Cancelled,
            1,
        ),
        (
            ApprovalPolicy::Never,
            ApprovalOutcome::AllowedOnce,
            ApprovalOutcome::Rejected,
            0,
        ),
    ] {
        let p = project();
        let asked = Cell::new(0);
        let audit = JsonLinesAudit::new(Vec::new());
        let mut approvals = Approvals::new(policy, true, &audit);
        approvals.push(Human {
            asked: &asked,
            reply,
        });
        let err = model(&p, "")
            .ensure(&SkillCall::root(skill("build")), &write_out(), &approvals)
            .unwrap_err();
        assert!(
            matches!(err, PermissionError::Refused { outcome, .. } if outcome == expected),
            "{err}"
        );
        assert_eq!(asked.get(), asks);
        assert!(!p.state.join("approvals.json").exists());
    }
}
