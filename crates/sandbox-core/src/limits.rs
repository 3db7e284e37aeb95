//! Resource limits for a whole run: memory, processes and CPU time, across
//! every process the run starts.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The smallest memory limit accepted: below it a dynamic program cannot
/// even be loaded, and the run would fail in ways that read as a crash.
pub const MIN_MEMORY_BYTES: u64 = 1 << 20;

/// The largest CPU limit accepted, in CPUs.
pub const MAX_CPUS: u32 = 1024;

/// Limits on a whole run. `None` leaves that resource unlimited.
///
/// In the operator config (`[sandbox.limits]`) these are ceilings that a
/// request can only lower, as for the bounding policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceLimits {
    /// Memory for the run's processes together (swap included), in bytes.
    pub memory: Option<MemoryLimit>,
    /// Processes and threads alive at once.
    pub pids: Option<PidsLimit>,
    /// CPU time, in thousandths of one CPU (500 = half of one CPU).
    pub cpu: Option<CpuLimit>,
}

impl ResourceLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.pids.is_none() && self.cpu.is_none()
    }

    /// Each limit as the smaller of this one and `ceiling`'s.
    pub fn bounded_by(self, ceiling: &ResourceLimits) -> Self {
        fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Self {
            memory: min(self.memory, ceiling.memory),
            pids: min(self.pids, ceiling.pids),
            cpu: min(self.cpu, ceiling.cpu),
        }
    }
}

/// Why a limit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?}: {reason}")]
pub struct LimitError {
    what: &'static str,
    value: String,
    reason: &'static str,
}

impl LimitError {
    fn new(what: &'static str, value: &str, reason: &'static str) -> Self {
        Self {
            what,
            value: value.to_owned(),
            reason,
        }
    }
}

/// A memory limit in bytes, at least [`MIN_MEMORY_BYTES`]. Written as a
/// number of bytes or with a binary suffix: `64M`, `1.5G`, `512K`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemoryLimit(u64);

impl MemoryLimit {
    /// The limit, in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl std::str::FromStr for MemoryLimit {
    type Err = LimitError;

    fn from_str(s: &str) -> Result<Self, LimitError> {
        let bad = |reason| LimitError::new("memory limit", s, reason);
        let t = s.trim();
        let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
            Some((i, _)) => (&t[..i], &t[i..]),
            None => (t, ""),
        };
        let scale: u64 = match unit.to_ascii_uppercase().trim_end_matches("IB") {
            "" | "B" => 1,
            "K" => 1 << 10,
            "M" => 1 << 20,
            "G" => 1 << 30,
            "T" => 1 << 40,
            _ => {
                return Err(bad(
                    "the unit must be K, M, G or T (binary: 1K = 1024 bytes)",
                ))
            }
        };
        let value: f64 = number
            .trim()
            .parse()
            .map_err(|_| bad("expected a size such as 64M, 1.5G or a number of bytes"))?;
        let bytes = value * scale as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(bad("too large"));
        }
        if bytes < MIN_MEMORY_BYTES as f64 {
            return Err(bad("must be at least 1M (1048576 bytes)"));
        }
        Ok(Self(bytes as u64))
    }
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, scale) in [
            ("T", 1u64 << 40),
            ("G", 1 << 30),
            ("M", 1 << 20),
            ("K", 1 << 10),
        ] {
            if b % scale == 0 {
                return write!(f, "{}{unit}", b / scale);
            }
        }
        write!(f, "{b}")
    }
}

/// A limit on the processes (and threads) alive at once, at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PidsLimit(u64);

impl PidsLimit {
    /// The limit.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::str::FromStr for PidsLimit {
    type Err = LimitError;

    fn from_str(s: &str) -> Result<Self, LimitError> {
        match s.trim().parse::<u64>() {
            Ok(0) => Err(LimitError::new("process limit", s, "must be at least 1")),
            Ok(n) if n <= i32::MAX as u64 => Ok(Self(n)),
            _ => Err(LimitError::new(
                "process limit",
                s,
                "expected a whole number of processes, such as 50",
            )),
        }
    }
}

impl fmt::Display for PidsLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A limit on CPU time in thousandths of one CPU, between 0.001 and
/// [`MAX_CPUS`] CPUs. Written as a fraction of CPUs: `0.5`, `2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuLimit(u32);

impl CpuLimit {
    /// The limit in thousandths of one CPU.
    pub fn millis(self) -> u32 {
        self.0
    }

    fn from_cpus(cpus: f64, text: &str) -> Result<Self, LimitError> {
        let bad = |reason| LimitError::new("CPU limit", text, reason);
        if !cpus.is_finite() || cpus > MAX_CPUS as f64 {
            return Err(bad(
                "expected a number of CPUs up to 1024, such as 0.5 or 2",
            ));
        }
        let millis = (cpus * 1000.0).round();
        if millis < 1.0 {
            return Err(bad("must be at least 0.001 (a thousandth of one CPU)"));
        }
        Ok(Self(millis as u32))
    }
}

impl std::str::FromStr for CpuLimit {
    type Err = LimitError;

    fn from_str(s: &str) -> Result<Self, LimitError> {
        let cpus: f64 = s.trim().parse().map_err(|_| {
            LimitError::new(
                "CPU limit",
                s,
                "expected a number of CPUs, such as 0.5 or 2",
            )
        })?;
        Self::from_cpus(cpus, s)
    }
}

impl fmt::Display for CpuLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / 1000;
        let frac = self.0 % 1000;
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            let digits = format!("{frac:03}");
            write!(f, "{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

/// A value written as a string or a number (`memory = "64M"`, `pids = 50`,
/// `cpu = 0.5`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Text(String),
    Whole(u64),
    Real(f64),
}

impl Written {
    fn text(self) -> String {
        match self {
            Written::Text(s) => s,
            Written::Whole(n) => n.to_string(),
            Written::Real(x) => x.to_string(),
        }
    }
}

macro_rules! serde_as_text {
    ($ty:ty) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Written::deserialize(d)?
                    .text()
                    .parse()
                    .map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_as_text!(MemoryLimit);
serde_as_text!(CpuLimit);

impl Serialize for PidsLimit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for PidsLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Written::deserialize(d)?
            .text()
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_parse_with_binary_units() {
        let m = |s: &str| s.parse::<MemoryLimit>().map(MemoryLimit::bytes);
        assert_eq!(m("64M"), Ok(64 << 20));
        assert_eq!(m("64MiB"), Ok(64 << 20));
        assert_eq!(m("1.5G"), Ok(3 << 29));
        assert_eq!(m("2097152"), Ok(2 << 20));
        assert_eq!(m("1024k"), Ok(1 << 20));
        assert!(m("0").is_err());
        assert!(m("512K").is_err(), "below the floor");
        assert!(m("64Q").is_err());
        assert!(m("M").is_err());
        assert!(m("-5M").is_err());
        assert!(m("1e30T").is_err());
        assert_eq!("64M".parse::<MemoryLimit>().unwrap().to_string(), "64M");
        assert_eq!(
            m("1048577").map(|b| MemoryLimit(b).to_string()),
            Ok("1048577".into())
        );
    }

    #[test]
    fn pids_and_cpus_parse_within_bounds() {
        assert_eq!("50".parse::<PidsLimit>().map(PidsLimit::get), Ok(50));
        assert!("0".parse::<PidsLimit>().is_err());
        assert!("-1".parse::<PidsLimit>().is_err());
        assert!("1.5".parse::<PidsLimit>().is_err());
        let c = |s: &str| s.parse::<CpuLimit>().map(CpuLimit::millis);
        assert_eq!(c("0.5"), Ok(500));
        assert_eq!(c("2"), Ok(2000));
        assert_eq!(c("0.001"), Ok(1));
        assert!(c("0").is_err());
        assert!(c("0.0001").is_err());
        assert!(c("2000").is_err());
        assert!(c("nan").is_err());
        assert_eq!("0.25".parse::<CpuLimit>().unwrap().to_string(), "0.25");
        assert_eq!("3".parse::<CpuLimit>().unwrap().to_string(), "3");
    }

    #[test]
    fn config_values_take_strings_or_numbers_and_requests_only_lower_them() {
        let l: ResourceLimits =
            serde_json::from_str(r#"{"memory":"64M","pids":50,"cpu":0.5}"#).unwrap();
        assert_eq!(l.memory.map(MemoryLimit::bytes), Some(64 << 20));
        assert_eq!(l.pids.map(PidsLimit::get), Some(50));
        assert_eq!(l.cpu.map(CpuLimit::millis), Some(500));
        assert!(serde_json::from_str::<ResourceLimits>(r#"{"pids":0}"#).is_err());
        assert!(serde_json::from_str::<ResourceLimits>(r#"{"memroy":"1G"}"#).is_err());
        let asked = ResourceLimits {
            pids: Some(PidsLimit(500)),
            cpu: Some(CpuLimit(250)),
            ..Default::default()
        };
        let bounded = asked.bounded_by(&l);
        assert_eq!(bounded.pids, Some(PidsLimit(50)));
        assert_eq!(bounded.cpu, Some(CpuLimit(250)));
        assert_eq!(bounded.memory, l.memory);
        let json = serde_json::to_string(&bounded).unwrap();
        assert_eq!(json, r#"{"memory":"64M","pids":50,"cpu":"0.25"}"#);
    }
}
