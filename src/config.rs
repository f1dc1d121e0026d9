//! Validation of the configuration operators give on the command line, shared by every
//! subcommand. Errors name the flag and say how to fix it.

use crate::model::Cidr;

/// Parses `--cluster-cidr`: one CIDR, or two of different IP families (dual stack),
/// separated by a comma. Each CIDR is masked to its network, as upstream does.
///
/// Upstream trims only the whole string, so `10.0.0.0/16, fd00::/48` fails there; here
/// each part is trimmed.
pub fn parse_cluster_cidrs(value: &str) -> Result<Vec<Cidr>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("--cluster-cidr is required: give the pod network range, e.g. --cluster-cidr=10.244.0.0/16".into());
    }
    let mut cidrs = Vec::new();
    for part in value.split(',') {
        let part = part.trim();
        if has_leading_zero(part) {
            return Err(format!(
                "--cluster-cidr: {part:?} has an octet with a leading zero, which some tools read \
                 as octal; write it without (e.g. 10.244.0.0/16)"
            ));
        }
        let cidr = Cidr::parse(part).map_err(|e| format!("--cluster-cidr: {e}"))?;
        cidrs.push(cidr);
    }
    match cidrs.as_slice() {
        [_] => Ok(cidrs),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(cidrs),
        [_, _] => Err(format!(
            "--cluster-cidr: {value:?} has two CIDRs of one IP family; dual stack needs one IPv4 and one IPv6 CIDR"
        )),
        _ => Err(format!(
            "--cluster-cidr: {value:?} has {} CIDRs; give one, or two for dual stack",
            cidrs.len()
        )),
    }
}

/// Whether an IPv4 CIDR has an octet such as `010`: Kubernetes reads it as decimal,
/// other tools (and people) as octal, so the flag refuses it.
fn has_leading_zero(cidr: &str) -> bool {
    let address = cidr.split('/').next().unwrap_or("");
    !address.contains(':')
        && address
            .split('.')
            .any(|octet| octet.len() > 1 && octet.starts_with('0'))
}

/// Checks a namespace name (an RFC 1123 label), as the API server would at the first
/// write; `flag` names the setting in the error.
pub fn validate_namespace(flag: &str, name: &str) -> Result<(), String> {
    if is_dns_label(name) {
        return Ok(());
    }
    Err(format!(
        "{flag}: {name:?} is not a namespace name (lower-case letters, digits and '-', at most 63)"
    ))
}

/// Checks an object name such as a Lease's (an RFC 1123 subdomain).
pub fn validate_lease_name(flag: &str, name: &str) -> Result<(), String> {
    if is_dns_subdomain(name) {
        return Ok(());
    }
    Err(format!(
        "{flag}: {name:?} is not a Lease name (lower-case letters, digits, '-' and '.', at most 253)"
    ))
}

/// RFC 1123 label: what namespace names must be.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what most object names, leases included, must be.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_or_a_dual_stack_pair_is_accepted_and_masked() {
        let v = parse_cluster_cidrs(" 10.244.1.0/16 , fd00::1/48 ").unwrap();
        assert_eq!(
            v.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.244.0.0/16", "fd00::/48"]
        );
    }

    #[test]
    fn bad_cluster_cidrs_name_the_flag_and_the_problem() {
        for (input, needle) in [
            ("", "required"),
            ("10.0.0.0/8,10.1.0.0/16", "one IP family"),
            ("10.0.0.0/8,fd00::/8,10.1.0.0/16", "has 3 CIDRs"),
            ("10.0.0.0/33", "at most 32"),
            ("10.0.0.0/8,", "invalid CIDR"),
            ("010.244.0.0/16", "leading zero"),
        ] {
            let err = parse_cluster_cidrs(input).unwrap_err();
            assert!(err.starts_with("--cluster-cidr"), "{err}");
            assert!(err.contains(needle), "{input:?}: {err}");
        }
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn names_are_checked_as_the_api_server_checks_them() {
        assert!(validate_namespace("--ns", "kube-system").is_ok());
        for bad in ["", "Kube", "-a", "a_b", &"x".repeat(64)] {
            let err = validate_namespace("--ns", bad).unwrap_err();
            assert!(err.starts_with("--ns: "), "{err}");
        }
        assert!(validate_lease_name("--l", "route-controller.v1").is_ok());
        assert!(validate_lease_name("--l", "").is_err());
        assert!(validate_lease_name("--l", "a..b").is_err());
    }
}
