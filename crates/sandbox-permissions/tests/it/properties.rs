//! Properties: grants are never inherited; `never` never allows; the chain
//! follows its first taker.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sandbox_permissions::{
    Answer, Answerer, ApprovalOutcome, ApprovalPolicy, ApprovalRequest, ApprovalStore, Approvals,
    Declaration, Defaults, Escalation, EscalationRequest, JsonLinesAudit, Op, PermissionModel,
    PermissionsConfig, SkillCall, SkillName, Target,
};

const SKILLS: [&str; 4] = ["a", "b", "c", "d"];
const PATHS: [&str; 5] = ["/w/x", "/w/x/y", "/w/z", "/v", "/"];

fn skill(i: usize) -> SkillName {
    SkillName::new(SKILLS[i]).unwrap()
}

fn target(i: usize) -> Target {
    if i == PATHS.len() {
        Target::Any
    } else {
        Target::path(PATHS[i]).unwrap()
    }
}

fn op(i: usize) -> Op {
    Op::ALL[i]
}

#[derive(Debug, Clone)]
enum Step {
    /// The skill at the top of stack `s` is granted (op, target) interactively.
    Grant { s: usize, op: usize, t: usize },
    /// The skill at the top of stack `s` calls skill `child`; the new call replaces stack `s`.
    Call { s: usize, child: usize },
    /// Stack `s` returns to its root.
    Return { s: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize, 0..4usize, 0..=PATHS.len()).prop_map(|(s, op, t)| Step::Grant { s, op, t }),
        (0..3usize, 0..SKILLS.len()).prop_map(|(s, child)| Step::Call { s, child }),
        (0..3usize).prop_map(|s| Step::Return { s }),
    ]
}

/// Says yes to everything, interactively.
struct Yes;
impl Answerer for Yes {
    fn name(&self) -> &str {
        "yes"
    }
    fn interactive(&self) -> bool {
        true
    }
    fn answer(&self, _: &ApprovalRequest) -> Answer {
        Answer::Decide(ApprovalOutcome::AllowedOnce)
    }
}

fn pre_approved(pre: &[(usize, usize, usize)]) -> PermissionsConfig {
    let mut text = String::from("[permissions.pre_approved]\n");
    let unique: BTreeSet<_> = pre.iter().copied().collect();
    for (s, o, t) in unique {
        let key = sandbox_permissions::GrantKey {
            skill: skill(s),
            op: op(o),
            target: target(t),
        };
        text.push_str(&format!("\"{key}\" = \"allow\"\n"));
    }
    PermissionsConfig::from_toml_str(&text, Path::new("p.toml")).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Whatever was granted to whom and whoever called whom, a skill holds an
    /// operation only through the defaults or a grant it received itself.
    #[test]
    fn sub_skills_hold_only_their_own_grants(
        roots in proptest::collection::vec(0..SKILLS.len(), 3),
        pre in proptest::collection::vec((0..SKILLS.len(), 0..4usize, 0..=PATHS.len()), 0..3),
        steps in proptest::collection::vec(step(), 1..24),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().canonicalize().unwrap();
        let defaults = Defaults::new(Path::new("/w"), &[PathBuf::from("/w/z")]).unwrap();
        let config = pre_approved(&pre);
        let mut model = PermissionModel::new(defaults.clone(), &config, ApprovalStore::load(&state).unwrap());
        let audit = JsonLinesAudit::new(std::io::sink());
        let mut approvals = Approvals::new(ApprovalPolicy::Ask, true, &audit);
        approvals.push(Yes);

        // Reference: what each skill received itself (config + its own approvals).
        let mut received: BTreeSet<(usize, Op, Target)> =
            pre.iter().map(|&(s, o, t)| (s, op(o), target(t))).collect();
        let mut stacks: Vec<(Vec<usize>, SkillCall)> = roots
            .iter()
            .map(|&r| (vec![r], SkillCall::root(skill(r))))
            .collect();
        for st in steps {
            match st {
                Step::Grant { s, op: o, t } => {
                    let (ids, call) = &stacks[s];
                    let decl = Declaration { phase: None, needs: vec![(op(o), target(t))] };
                    model.ensure(call, &decl, &approvals).unwrap();
                    received.insert((*ids.last().unwrap(), op(o), target(t)));
                }
                Step::Call { s, child } => {
                    let (ids, call) = &mut stacks[s];
                    ids.push(child);
                    *call = call.call(skill(child));
                }
                Step::Return { s } => {
                    let (ids, call) = &mut stacks[s];
                    ids.truncate(1);
                    *call = SkillCall::root(skill(ids[0]));
                }
            }
            // After every step, check every live call against every (op, target).
            for (ids, call) in &stacks {
                let me = *ids.last().unwrap();
                prop_assert_eq!(call.skill(), &skill(me));
                for o in Op::ALL {
                    for t in 0..=PATHS.len() {
                        let want = target(t);
                        let own = defaults.allows(o, &want)
                            || received.iter().any(|(s, ro, rt)| *s == me && *ro == o && rt.covers(&want));
                        prop_assert_eq!(
                            model.check(call, o, &want).is_some(),
                            own,
                            "skill {} (callers {:?}) op {} target {:?}", SKILLS[me], call.callers(), o, want
                        );
                    }
                }
            }
        }
        // The persisted file agrees with the in-memory model.
        let reloaded = PermissionModel::new(defaults, &config, ApprovalStore::load(&state).unwrap());
        for (ids, call) in &stacks {
            for o in Op::ALL {
                for t in 0..=PATHS.len() {
                    prop_assert_eq!(
                        reloaded.check(call, o, &target(t)).is_some(),
                        model.check(call, o, &target(t)).is_some(),
                        "skill {}", SKILLS[*ids.last().unwrap()]
                    );
                }
            }
        }
    }
}

/// A scripted link of the chain.
#[derive(Debug, Clone)]
enum Link {
    Decide(ApprovalOutcome, bool),
    Delegate(bool),
    Garbage,
    Panic,
}

fn outcome() -> impl Strategy<Value = ApprovalOutcome> {
    prop_oneof![
        Just(ApprovalOutcome::AllowedOnce),
        Just(ApprovalOutcome::Rejected),
        Just(ApprovalOutcome::Cancelled),
        Just(ApprovalOutcome::Unavailable),
    ]
}

fn link() -> impl Strategy<Value = Link> {
    prop_oneof![
        4 => (outcome(), any::<bool>()).prop_map(|(o, i)| Link::Decide(o, i)),
        3 => any::<bool>().prop_map(Link::Delegate),
        1 => Just(Link::Garbage),
        1 => Just(Link::Panic),
    ]
}

impl Answerer for Link {
    fn name(&self) -> &str {
        "scripted"
    }
    fn interactive(&self) -> bool {
        matches!(self, Link::Decide(_, true) | Link::Delegate(true))
    }
    fn answer(&self, _: &ApprovalRequest) -> Answer {
        match self {
            Link::Decide(o, _) => Answer::Decide(*o),
            Link::Delegate(_) => Answer::Delegate,
            Link::Garbage => Answer::Malformed("decision 42".into()),
            Link::Panic => panic!("scripted answerer panic"),
        }
    }
}

/// What the chain must answer, computed independently.
fn expected(policy: ApprovalPolicy, interactive: bool, links: &[Link]) -> ApprovalOutcome {
    if policy == ApprovalPolicy::Never {
        return ApprovalOutcome::Rejected;
    }
    for l in links {
        if l.interactive() && !interactive {
            continue;
        }
        match l {
            Link::Decide(o, _) => return *o,
            Link::Delegate(_) => continue,
            Link::Garbage | Link::Panic => return ApprovalOutcome::Unavailable,
        }
    }
    ApprovalOutcome::Unavailable
}

fn request() -> ApprovalRequest {
    ApprovalRequest::Escalation(EscalationRequest {
        argv: vec!["true".into()],
        evidence: vec![],
        escalation: Escalation::AddWritePath("/srv/out".into()),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// `never` never yields `allowed-once`, whatever the chain.
    #[test]
    fn never_never_allows(
        links in proptest::collection::vec(link(), 0..10),
        interactive in any::<bool>(),
    ) {
        let audit = JsonLinesAudit::new(Vec::new());
        let mut approvals = Approvals::new(ApprovalPolicy::Never, interactive, &audit);
        for l in links { approvals.push(l); }
        let outcome = approvals.request(&request());
        drop(approvals);
        prop_assert_ne!(outcome, ApprovalOutcome::AllowedOnce);
        prop_assert_eq!(outcome, ApprovalOutcome::Rejected);
        let log = String::from_utf8(audit.into_inner()).unwrap();
        prop_assert_eq!(log.lines().count(), 2);
    }

    /// Under `ask` the first answerer that takes the request decides; failures are `unavailable`.
    #[test]
    fn ask_follows_the_first_taker(
        links in proptest::collection::vec(link(), 0..6),
        interactive in any::<bool>(),
    ) {
        let audit = JsonLinesAudit::new(std::io::sink());
        let mut approvals = Approvals::new(ApprovalPolicy::Ask, interactive, &audit);
        for l in links.iter().cloned() { approvals.push(l); }
        prop_assert_eq!(approvals.request(&request()), expected(ApprovalPolicy::Ask, interactive, &links));
    }
}
