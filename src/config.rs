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
        let cidr = Cidr::parse(part.trim()).map_err(|e| format!("--cluster-cidr: {e}"))?;
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
        ] {
            let err = parse_cluster_cidrs(input).unwrap_err();
            assert!(err.starts_with("--cluster-cidr"), "{err}");
            assert!(err.contains(needle), "{input:?}: {err}");
        }
    }
}
