//! Grant keys: `<skill>/<op>/<path>`.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A key that could not be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrantKeyError {
    /// The skill name is empty or has characters outside `[A-Za-z0-9._-]`.
    #[error(
        "invalid skill name {0:?}: use 1-128 characters from A-Z a-z 0-9 . _ - (not `.` or `..`)"
    )]
    Skill(String),
    /// The operation is not one of the known names.
    #[error("unknown operation {0:?}: expected file.read, file.write, shell or network")]
    Op(String),
    /// The path is not absolute, not normalised, or not UTF-8.
    #[error("invalid grant path {0:?}: it must be absolute, UTF-8, without `.` or `..` components, and not `/*`")]
    Path(String),
    /// The text is not `<skill>/<op>/<path>`.
    #[error("malformed grant key {0:?}: expected <skill>/<op>/<path>, e.g. build/file.write/tmp/out or build/network/*")]
    Malformed(String),
}

/// The name of a skill: grants are keyed by skill, never by user.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SkillName(String);

impl SkillName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, GrantKeyError> {
        let ok = !name.is_empty()
            && name.len() <= 128
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(GrantKeyError::Skill(name.to_owned()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SkillName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for SkillName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// An operation a skill may be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Read files (`file.read`).
    FileRead,
    /// Write files (`file.write`).
    FileWrite,
    /// Run a shell (`shell`).
    Shell,
    /// Use the network (`network`).
    Network,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 4] = [Op::FileRead, Op::FileWrite, Op::Shell, Op::Network];

    /// Stable name used in keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FileRead => "file.read",
            Self::FileWrite => "file.write",
            Self::Shell => "shell",
            Self::Network => "network",
        }
    }
}

impl FromStr for Op {
    type Err = GrantKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| GrantKeyError::Op(s.to_owned()))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a grant covers: a path and everything beneath it, or anything (`*`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Any target (written `*`).
    Any,
    /// This absolute, lexically normal path and its subtree.
    Path(PathBuf),
}

impl Target {
    /// A path target; rejects relative, non-UTF-8 and non-normal paths.
    pub fn path(p: impl Into<PathBuf>) -> Result<Self, GrantKeyError> {
        let p: PathBuf = p.into();
        let normal = p.is_absolute()
            && p.to_str().is_some()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
            && p != Path::new("/*");
        if normal {
            // Rebuild from components so `/a//b/` and `/a/b` are the same key.
            Ok(Self::Path(p.components().collect()))
        } else {
            Err(GrantKeyError::Path(p.to_string_lossy().into_owned()))
        }
    }

    /// Whether this target covers `other` (`Any` covers everything; a path covers its subtree).
    pub fn covers(&self, other: &Target) -> bool {
        match (self, other) {
            (Self::Any, _) => true,
            (Self::Path(_), Self::Any) => false,
            (Self::Path(mine), Self::Path(theirs)) => theirs.starts_with(mine),
        }
    }
}

/// `<skill>/<op>/<path>`: one permission held by one skill.
///
/// Text form: the path without its leading `/` (`build/file.write/tmp/out`),
/// or `*` for any target (`build/network/*`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GrantKey {
    /// The skill holding the grant.
    pub skill: SkillName,
    /// The operation granted.
    pub op: Op,
    /// What the grant covers.
    pub target: Target,
}

impl GrantKey {
    /// Whether this grant lets `skill` perform `op` on `target`.
    pub fn covers(&self, skill: &SkillName, op: Op, target: &Target) -> bool {
        &self.skill == skill && self.op == op && self.target.covers(target)
    }
}

impl fmt::Display for GrantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/", self.skill, self.op)?;
        match &self.target {
            Target::Any => f.write_str("*"),
            Target::Path(p) => {
                let s = p.to_str().unwrap_or_default();
                f.write_str(s.strip_prefix('/').unwrap_or(s))
            }
        }
    }
}

impl FromStr for GrantKey {
    type Err = GrantKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let malformed = || GrantKeyError::Malformed(s.to_owned());
        let (skill, rest) = s.split_once('/').ok_or_else(malformed)?;
        let (op, target) = rest.split_once('/').ok_or_else(malformed)?;
        let target = if target == "*" {
            Target::Any
        } else {
            Target::path(format!("/{target}"))?
        };
        Ok(Self {
            skill: SkillName::new(skill)?,
            op: op.parse()?,
            target,
        })
    }
}

impl Serialize for GrantKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GrantKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A phase's declared needs, to be approved for one skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantRequest {
    /// The skill that would hold the grants.
    pub skill: SkillName,
    /// The phase that declared them, if any.
    pub phase: Option<String>,
    /// The keys still missing (already-held ones are not asked again).
    pub keys: Vec<GrantKey>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_text_round_trips() {
        for text in [
            "build/file.write/tmp/out",
            "build/network/*",
            "a.b-c_d/shell/",
            "x/file.read/home/u/p",
        ] {
            let k: GrantKey = text.parse().unwrap();
            assert_eq!(k.to_string(), text);
        }
        let k: GrantKey = "build/file.write/tmp/out".parse().unwrap();
        assert_eq!(k.target, Target::Path("/tmp/out".into()));
        let k: GrantKey = "build/file.write/tmp//out/".parse().unwrap();
        assert_eq!(k.to_string(), "build/file.write/tmp/out");
    }

    #[test]
    fn bad_keys_say_what_is_wrong() {
        let e = |s: &str| s.parse::<GrantKey>().unwrap_err();
        assert!(matches!(e("build"), GrantKeyError::Malformed(_)));
        assert!(matches!(e("build/file.write"), GrantKeyError::Malformed(_)));
        assert!(matches!(e("bu ild/shell/*"), GrantKeyError::Skill(_)));
        assert!(matches!(e("../shell/*"), GrantKeyError::Skill(_)));
        assert!(matches!(e("b/file.exec/tmp"), GrantKeyError::Op(_)));
        assert!(matches!(
            e("b/file.write/tmp/../etc"),
            GrantKeyError::Path(_)
        ));
        // `.` components are dropped by lexical normalisation, `..` is refused.
        let k: GrantKey = "b/file.write/./tmp".parse().unwrap();
        assert_eq!(k.to_string(), "b/file.write/tmp");
        assert!(e("b/file.exec/tmp").to_string().contains("file.exec"));
    }

    #[test]
    fn path_target_covers_its_subtree_only() {
        let t = Target::path("/tmp/out").unwrap();
        assert!(t.covers(&Target::path("/tmp/out").unwrap()));
        assert!(t.covers(&Target::path("/tmp/out/a/b").unwrap()));
        assert!(!t.covers(&Target::path("/tmp/outside").unwrap()));
        assert!(!t.covers(&Target::path("/tmp").unwrap()));
        assert!(!t.covers(&Target::Any));
        assert!(Target::Any.covers(&t));
        assert!(Target::path("relative").is_err());
    }
}
