//! Egress rules: text round trips (property tests) and serde as strings.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use sandbox_core::net::{EgressRule, EgressRules, NetRule};

/// A label of 1 to 63 letters, digits and hyphens, maybe upper case.
fn label() -> impl Strategy<Value = String> {
    "[A-Za-z0-9-]{1,63}"
}

/// A last label that is not numeric (starts with a letter).
fn last_label() -> impl Strategy<Value = String> {
    "[A-Za-z][A-Za-z0-9-]{0,20}"
}

fn name() -> impl Strategy<Value = String> {
    (proptest::collection::vec(label(), 0..3), last_label()).prop_map(|(mut labels, last)| {
        labels.push(last);
        labels.join(".")
    })
}

fn net_rule() -> impl Strategy<Value = NetRule> {
    let v4 = (any::<u32>(), 0u8..=32).prop_map(|(a, p)| (IpAddr::V4(Ipv4Addr::from(a)), p));
    let v6 = (any::<u128>(), 0u8..=128).prop_map(|(a, p)| (IpAddr::V6(Ipv6Addr::from(a)), p));
    (prop_oneof![v4, v6], proptest::option::of(any::<u16>()))
        .prop_map(|((addr, prefix), port)| NetRule::new(addr, prefix, port).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn name_rules_round_trip(
        name in name(),
        wildcard in any::<bool>(),
        dot in any::<bool>(),
        port in proptest::option::of(any::<u16>()),
    ) {
        prop_assume!(name.len() <= 253);
        let mut text = String::new();
        if wildcard {
            text.push_str("*.");
        }
        text.push_str(&name);
        if dot {
            text.push('.');
        }
        if let Some(p) = port {
            text.push_str(&format!(":{p}"));
        }
        let rule: EgressRule = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert!(matches!(rule, EgressRule::Name(_)));
        let shown = rule.to_string();
        // The printed form is the canonical one: lower case, no trailing dot.
        let canonical = text.to_ascii_lowercase().replacen(".:", ":", 1);
        let canonical = canonical.strip_suffix('.').unwrap_or(&canonical);
        prop_assert_eq!(&shown, canonical);
        prop_assert_eq!(shown.parse::<EgressRule>().unwrap(), rule.clone());
        // An exact rule admits its own name in any case; a wildcard only
        // sub-domains.
        let port = port.unwrap_or(1);
        prop_assert_eq!(rule.admits_name(&name.to_ascii_uppercase(), port), !wildcard);
        prop_assert_eq!(rule.admits_name(&format!("x.{name}"), port), wildcard);
    }

    #[test]
    fn net_rules_round_trip(rule in net_rule()) {
        let shown = rule.to_string();
        prop_assert_eq!(shown.parse::<NetRule>().unwrap(), rule);
        let egress: EgressRule = shown.parse().map_err(|e| TestCaseError::fail(format!("{shown}: {e}")))?;
        prop_assert_eq!(&egress, &EgressRule::Ip(rule));
        prop_assert_eq!(egress.to_string(), shown);
    }

    #[test]
    fn parsing_never_panics(text in "\\PC{0,40}") {
        let _ = text.parse::<EgressRule>();
    }
}

#[test]
fn policy_toml_lists_rules_as_strings() {
    #[derive(serde::Deserialize, serde::Serialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        allow_net: EgressRules,
    }
    let doc: Doc =
        toml::from_str(r#"allow_net = ["example.com:443", "10.0.0.0/8", "*.Example.org"]"#)
            .unwrap();
    let shown: Vec<String> = doc
        .allow_net
        .as_slice()
        .iter()
        .map(|r| r.to_string())
        .collect();
    assert_eq!(shown, ["example.com:443", "10.0.0.0/8", "*.example.org"]);
    assert_eq!(
        toml::to_string(&doc).unwrap().trim(),
        r#"allow_net = ["example.com:443", "10.0.0.0/8", "*.example.org"]"#
    );
    let err = toml::from_str::<Doc>(r#"allow_net = ["foo.*.com"]"#)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("foo.*.com") && err.contains("*.example.com"),
        "{err}"
    );
    let json: NetRule = serde_json::from_str(r#""[2001:db8::/32]:443""#).unwrap();
    assert_eq!(
        serde_json::to_string(&json).unwrap(),
        r#""[2001:db8::/32]:443""#
    );
}
