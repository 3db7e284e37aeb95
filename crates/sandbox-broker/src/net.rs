//! Egress rules for IP connects: the types live in `sandbox-core` (the
//! proxy and the policy use them too); re-exported here so that
//! `sandbox_broker::NetRule` stays what it was.

pub use sandbox_core::net::{NetRule, NetRuleError};
