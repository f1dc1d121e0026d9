//! The domain model: nodes as the route controller sees them, cloud routes, and
//! parsed CIDRs.
//!
//! A Kubernetes Node carries image lists, managed fields and dozens of fields the
//! controller never reads. [`Node`] keeps only what routing needs, and decoding a full
//! Node JSON into it skips everything else without allocating for it, so that a
//! cluster of 50 000 nodes stays small in memory.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

pub mod skim;

/// The condition type the route controller owns on every node.
pub const NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// A node as the route controller needs it: identity, pod CIDRs, addresses and the
/// `NetworkUnavailable` condition. Everything else in a Kubernetes Node is dropped at
/// decode time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`; the controller passes it to the cloud as the name hint.
    pub uid: String,
    /// `metadata.resourceVersion`; equal versions on an update mean "no change".
    pub resource_version: String,
    /// `spec.providerID`, e.g. `hcloud://4711` or `aws:///eu-west-1a/i-0abc`.
    pub provider_id: Option<String>,
    /// `spec.podCIDRs`, as written by the IPAM controller, unparsed. The planner
    /// parses them, so one invalid entry affects only its node.
    pub pod_cidrs: Vec<String>,
    /// `status.addresses`, in the order the kubelet reported them.
    pub addresses: Vec<NodeAddress>,
    /// `status.conditions[type=NetworkUnavailable]`, if present.
    pub network_unavailable: Option<Condition>,
}

/// A string that is usually one of a few well-known values (an address type, a
/// condition status or reason). The well-known values are stored without an allocation:
/// with 50 000 nodes in memory, that is several megabytes.
pub type Label = Cow<'static, str>;

/// The address types the kubelet reports; compact stores keep them as a byte.
pub(crate) const ADDRESS_TYPES: &[&str] = &[
    "InternalIP",
    "ExternalIP",
    "Hostname",
    "InternalDNS",
    "ExternalDNS",
];
/// The condition statuses, and the reasons the controller writes; compact stores keep
/// them as a byte.
pub(crate) const CONDITION_WORDS: &[&str] =
    &["True", "False", "Unknown", "RouteCreated", "NoRouteCreated"];

/// `value` as a [`Label`], borrowed when it is one of `known`.
pub fn label(value: &str, known: &[&'static str]) -> Label {
    match known.iter().find(|k| **k == value) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(value.to_string()),
    }
}

fn address_type<'de, D: Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
    let s = Cow::<'de, str>::deserialize(d)?;
    Ok(label(&s, ADDRESS_TYPES))
}

fn condition_word<'de, D: Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
    let s = Cow::<'de, str>::deserialize(d)?;
    Ok(label(&s, CONDITION_WORDS))
}

/// One entry of `status.addresses`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS` or `ExternalDNS`.
    #[serde(rename = "type", default, deserialize_with = "address_type")]
    pub kind: Label,
    /// The address, as the node reports it.
    #[serde(default)]
    pub address: String,
}

impl NodeAddress {
    /// An address of type `kind` (`InternalIP`, `ExternalIP`, `Hostname`, …).
    pub fn new(kind: &str, address: &str) -> NodeAddress {
        NodeAddress {
            kind: label(kind, ADDRESS_TYPES),
            address: address.to_string(),
        }
    }

    /// An `InternalIP` address.
    pub fn internal_ip(address: &str) -> NodeAddress {
        NodeAddress::new("InternalIP", address)
    }
}

/// The parts of a node condition the controller reads and writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// `True`, `False` or `Unknown`.
    #[serde(deserialize_with = "condition_word")]
    pub status: Label,
    /// The machine-readable reason, e.g. `RouteCreated`.
    #[serde(default, deserialize_with = "condition_word")]
    pub reason: Label,
    /// The human-readable message.
    #[serde(default)]
    pub message: Label,
}

impl Condition {
    /// A condition with this status, reason and message.
    pub fn new(status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            status: label(status, CONDITION_WORDS),
            reason: label(reason, CONDITION_WORDS),
            message: Cow::Owned(message.to_string()),
        }
    }
}

/// A route in the cloud, as upstream's `cloudprovider.Route`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Route {
    /// The provider's name for the route; ignored on create.
    pub name: String,
    /// The node the traffic goes to; empty when the route has no known target.
    pub target_node: String,
    /// The node addresses the route points at. On create the controller fills them
    /// from `status.addresses`; on list they count only if `enable_node_addresses`.
    pub target_node_addresses: Vec<NodeAddress>,
    /// The destination, as the provider reports it (compared as a parsed network).
    #[serde(rename = "destinationCIDR")]
    pub destination_cidr: String,
    /// The provider reports that the route's target is gone.
    pub blackhole: bool,
    /// Set by the provider: "my routes carry target addresses; compare them".
    pub enable_node_addresses: bool,
}

/// An IPv4 or IPv6 network, masked to its prefix: `10.244.1.7/24` is `10.244.1.0/24`.
///
/// Two CIDRs are equal when they denote the same network, whatever their spelling
/// (`a00:100:0::/24` and `a00:100::/24`; `10.120.000.000/24` and `10.120.0.0/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a string is not a CIDR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CidrError {
    /// The text that did not parse.
    pub input: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid CIDR {:?}: {}", self.input, self.problem)
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// Parses `ADDRESS/PREFIX` like Kubernetes' sloppy parser: IPv4 octets may carry
    /// leading zeros (read as decimal), and the address is masked to the prefix.
    pub fn parse(input: &str) -> Result<Cidr, CidrError> {
        let err = |problem| CidrError {
            input: input.to_string(),
            problem,
        };
        let (addr, prefix) = input
            .split_once('/')
            .ok_or_else(|| err("missing '/PREFIX'"))?;
        let prefix = match prefix.as_bytes() {
            digits @ ([_] | [_, _] | [_, _, _]) if digits.iter().all(u8::is_ascii_digit) => {
                // Every node's and route's CIDR goes through here, at every event and
                // pass: three digits by hand, not `str::parse`.
                let n = digits
                    .iter()
                    .fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
                u8::try_from(n).map_err(|_| err("the prefix length is not a number"))?
            }
            _ => return Err(err("the prefix length is not a number")),
        };
        let network = if addr.contains(':') {
            let v6 = Ipv6Addr::from_str(addr).map_err(|_| err("not an IPv6 address"))?;
            if prefix > 128 {
                return Err(err("an IPv6 prefix length is at most 128"));
            }
            IpAddr::V6(Ipv6Addr::from(mask_u128(u128::from(v6), prefix)))
        } else {
            let v4 = parse_ipv4_sloppy(addr).ok_or_else(|| err("not an IPv4 address"))?;
            if prefix > 32 {
                return Err(err("an IPv4 prefix length is at most 32"));
            }
            IpAddr::V4(Ipv4Addr::from(mask_u32(u32::from(v4), prefix)))
        };
        Ok(Cidr { network, prefix })
    }

    /// The network address (host bits zero).
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether this is an IPv4 network.
    pub fn is_ipv4(&self) -> bool {
        self.network.is_ipv4()
    }

    /// The last address of the network (the broadcast address for IPv4).
    pub fn last(&self) -> IpAddr {
        match self.network {
            IpAddr::V4(a) => {
                let host_bits = if self.prefix == 0 {
                    u32::MAX
                } else {
                    u32::MAX >> self.prefix
                };
                IpAddr::V4(Ipv4Addr::from(u32::from(a) | host_bits))
            }
            IpAddr::V6(a) => {
                let host_bits = if self.prefix == 0 {
                    u128::MAX
                } else {
                    u128::MAX >> self.prefix
                };
                IpAddr::V6(Ipv6Addr::from(u128::from(a) | host_bits))
            }
        }
    }

    /// Appends the network as bytes for a compact store: its 4 or 16 address bytes,
    /// then the prefix (5 or 17 bytes; their count tells the family).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self.network {
            IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
        }
        out.push(self.prefix);
    }

    /// A network [`Cidr::encode`] wrote, `None` for anything else.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Cidr> {
        let network = match bytes.len() {
            5 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&bytes[..4]).ok()?)),
            17 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&bytes[..16]).ok()?)),
            _ => return None,
        };
        let prefix = bytes[bytes.len() - 1];
        let max = if network.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Cidr { network, prefix })
    }

    /// Whether `ip` lies inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask_u32(u32::from(ip), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask_u128(u128::from(ip), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        Cidr::parse(s)
    }
}

fn mask_u32(v: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        v & (u32::MAX << (32 - u32::from(prefix)))
    }
}

fn mask_u128(v: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        v & (u128::MAX << (128 - u32::from(prefix)))
    }
}

/// Dotted-quad IPv4 with optional leading zeros in each octet, as Go's
/// `ParseIPSloppy` reads it: `010.001.0.0` is `10.1.0.0`.
fn parse_ipv4_sloppy(s: &str) -> Option<Ipv4Addr> {
    // One pass over the bytes (a split and a `str::parse` per octet cost ten times
    // as much, and every pod CIDR of every event and pass comes here): four groups of
    // one to three digits, each at most 255, joined by dots.
    let mut octets = [0u8; 4];
    let (mut octet, mut value, mut digits) = (0usize, 0u16, 0u8);
    for &b in s.as_bytes() {
        match b {
            b'0'..=b'9' if digits < 3 => {
                value = value * 10 + u16::from(b - b'0');
                digits += 1;
            }
            b'.' if digits > 0 && octet < 3 => {
                octets[octet] = u8::try_from(value).ok()?;
                (octet, value, digits) = (octet + 1, 0, 0);
            }
            _ => return None,
        }
    }
    if digits == 0 || octet != 3 {
        return None;
    }
    octets[3] = u8::try_from(value).ok()?;
    Some(Ipv4Addr::from(octets))
}

// ---------------------------------------------------------------------------------
// Decoding a Kubernetes Node. The wire structs mirror the JSON shape; unknown fields
// (images, managedFields, labels, ...) are skipped by serde without allocation.

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        let wire = WireNode::<WireMeta>::deserialize(deserializer)?;
        Ok(wire.into_node().0)
    }
}

/// A node with its labels, as the node filter needs it (`--node-selector`): the
/// labels are read to decide and dropped after, so a routed node keeps none in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabeledNode {
    /// The node.
    pub node: Node,
    /// `metadata.labels`.
    pub labels: crate::selector::Labels,
}

impl<'de> Deserialize<'de> for LabeledNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LabeledNode, D::Error> {
        let wire = WireNode::<WireLabeledMeta>::deserialize(deserializer)?;
        let (node, labels) = wire.into_node();
        Ok(LabeledNode { node, labels })
    }
}

impl<M: Meta> WireNode<M> {
    fn into_node(self) -> (Node, M::Extra) {
        let network_unavailable = self
            .status
            .conditions
            .into_iter()
            .flatten()
            .find(|c| c.kind == NETWORK_UNAVAILABLE)
            .map(|c| Condition {
                status: label(&c.status, CONDITION_WORDS),
                reason: label(&c.reason, CONDITION_WORDS),
                // The message is not kept: the skip rule reads status and reason only.
                message: Cow::Borrowed(""),
            });
        let (meta, extra) = self.metadata.split();
        let node = Node {
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            provider_id: self.spec.provider_id.filter(|p| !p.is_empty()),
            // serde grows vectors from four elements; nodes have one or two of each, and
            // 50 000 nodes stay in memory.
            pod_cidrs: shrunk(self.spec.pod_cidrs.unwrap_or_default()),
            addresses: shrunk(self.status.addresses.unwrap_or_default()),
            network_unavailable,
        };
        (node, extra)
    }
}

fn shrunk<T>(mut v: Vec<T>) -> Vec<T> {
    v.shrink_to_fit();
    v
}

#[derive(Deserialize)]
struct WireNode<M> {
    #[serde(default)]
    metadata: M,
    #[serde(default)]
    spec: WireSpec,
    #[serde(default)]
    status: WireStatus,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireMeta {
    name: String,
    uid: String,
    resource_version: String,
}

/// The metadata with labels, for [`LabeledNode`].
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireLabeledMeta {
    // The fields of WireMeta again: serde's flatten would buffer the whole metadata,
    // managed fields and all.
    name: String,
    uid: String,
    resource_version: String,
    labels: Option<crate::selector::Labels>,
}

/// What a metadata shape holds besides the fields every node keeps.
trait Meta {
    type Extra;
    fn split(self) -> (WireMeta, Self::Extra);
}

impl Meta for WireMeta {
    type Extra = ();
    fn split(self) -> (WireMeta, ()) {
        (self, ())
    }
}

impl Meta for WireLabeledMeta {
    type Extra = crate::selector::Labels;
    fn split(self) -> (WireMeta, crate::selector::Labels) {
        let meta = WireMeta {
            name: self.name,
            uid: self.uid,
            resource_version: self.resource_version,
        };
        (meta, self.labels.unwrap_or_default())
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WireSpec {
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
    #[serde(rename = "podCIDRs")]
    pod_cidrs: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WireStatus {
    addresses: Option<Vec<NodeAddress>>,
    conditions: Option<Vec<WireCondition>>,
}

#[derive(Deserialize)]
struct WireCondition {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    reason: String,
}

/// A `NodeList` as `kubectl get nodes -o json` prints it (or one page of a list), of
/// [`Node`]s or, for the node filter, of [`LabeledNode`]s.
#[derive(Deserialize, Debug, Default)]
#[serde(default, bound(deserialize = "N: Deserialize<'de> + Default"))]
pub struct NodeList<N = Node> {
    /// The nodes.
    pub items: Vec<N>,
    /// The list's metadata.
    pub metadata: ListMeta,
}

/// The list metadata that pagination and watching need.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct ListMeta {
    /// The resource version the list is consistent at.
    pub resource_version: String,
    /// The token for the next page; empty on the last.
    #[serde(rename = "continue")]
    pub continue_token: String,
}

/// Node addresses compared as sets: order and repeats do not matter. (Upstream checks
/// equal lengths and one-way containment, so `[A, A]` equals `[A, B]` there.)
pub fn same_addresses(a: &[NodeAddress], b: &[NodeAddress]) -> bool {
    fn pair(x: &NodeAddress) -> (&str, &str) {
        (&x.kind, &x.address)
    }
    same_address_set(a.iter().map(pair), b.iter().map(pair))
}

/// [`same_addresses`] for addresses given as (type, address) pairs.
pub fn same_address_set<'a, 'b>(
    a: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    b: impl Iterator<Item = (&'b str, &'b str)> + Clone,
) -> bool {
    a.clone().all(|x| b.clone().any(|y| x == y)) && b.clone().all(|y| a.clone().any(|x| x == y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parses_and_masks_ipv4() {
        let c = Cidr::parse("10.244.1.7/16").unwrap();
        assert_eq!(c.to_string(), "10.244.0.0/16");
        assert_eq!(c.last(), "10.244.255.255".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn cidr_accepts_leading_zeros_like_the_sloppy_parser() {
        assert_eq!(
            Cidr::parse("010.120.000.000/24").unwrap(),
            Cidr::parse("10.120.0.0/24").unwrap()
        );
    }

    #[test]
    fn cidr_masks_ipv6_like_upstream_cluster_cidrs() {
        assert_eq!(
            Cidr::parse("ace:cab:deca::/8").unwrap().to_string(),
            "a00::/8"
        );
        assert_eq!(
            Cidr::parse("a00:100:0::/24").unwrap(),
            Cidr::parse("a00:100::/24").unwrap()
        );
    }

    #[test]
    fn cidr_rejects_garbage_with_a_reason() {
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0/8",
            "10.0.0.256/8",
            "x::/8",
            "::/129",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
        ] {
            let e = Cidr::parse(bad).unwrap_err();
            assert_eq!(e.input, bad);
        }
    }

    /// Guards the hand-written IPv4 parser against the split-and-`str::parse` one it
    /// replaced (kept here as the reference): over every string of up to 9 bytes from
    /// digits, dots and the slash, and random longer ones, both accept the same and
    /// give the same network. A group of four digits, a fifth group or 256 accepted
    /// fails it.
    #[test]
    fn the_ipv4_parser_accepts_what_the_reference_accepts() {
        fn reference(input: &str) -> Option<(Ipv4Addr, u8)> {
            let (addr, prefix) = input.split_once('/')?;
            if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let prefix: u8 = prefix.parse().ok()?;
            let mut octets = [0u8; 4];
            let mut parts = addr.split('.');
            for octet in &mut octets {
                let part = parts.next()?;
                if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                *octet = part.parse().ok()?;
            }
            if parts.next().is_some() || prefix > 32 {
                return None;
            }
            Some((
                Ipv4Addr::from(mask_u32(u32::from(Ipv4Addr::from(octets)), prefix)),
                prefix,
            ))
        }
        let check = |input: &str| {
            let ours = Cidr::parse(input).ok().map(|c| (c.network(), c.prefix()));
            let want = reference(input).map(|(a, p)| (IpAddr::V4(a), p));
            assert_eq!(ours, want, "{input:?}");
        };
        let alphabet = [b'0', b'1', b'2', b'5', b'9', b'.', b'/'];
        let mut input = Vec::new();
        fn all(input: &mut Vec<u8>, alphabet: &[u8], left: usize, check: &dyn Fn(&str)) {
            check(std::str::from_utf8(input).expect("ascii"));
            if left == 0 {
                return;
            }
            for &b in alphabet {
                input.push(b);
                all(input, alphabet, left - 1, check);
                input.pop();
            }
        }
        all(&mut input, &alphabet, 7, &check);
        // Near-CIDRs: three to five groups of up to four digits, a slash and up to
        // four digits, now and then a stray byte; most are valid or nearly.
        let mut seed = 3u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut valid = 0;
        for _ in 0..200_000 {
            let mut s = String::new();
            let groups = [4, 4, 4, 4, 3, 5][next(6) as usize];
            for g in 0..groups {
                if g > 0 {
                    s.push('.');
                }
                for _ in 0..[1, 1, 2, 3, 3, 0, 4][next(7) as usize] {
                    s.push(char::from(b"0123456789"[next(10) as usize]));
                }
            }
            s.push('/');
            for _ in 0..[1, 2, 2, 3, 0, 4][next(6) as usize] {
                s.push(char::from(b"0123456789"[next(10) as usize]));
            }
            if next(10) == 0 {
                let at = next(s.len() as u64 + 1) as usize;
                s.insert(at, char::from(b" +-x:a"[next(6) as usize]));
            }
            valid += usize::from(Cidr::parse(&s).is_ok());
            check(&s);
        }
        assert!(valid > 1_000, "the generator made {valid} valid CIDRs");
        for fixed in [
            "255.255.255.255/32",
            "256.0.0.0/8",
            "1.2.3.4/033",
            "1.2.3.4/256",
            "001.02.3.0004/8",
        ] {
            check(fixed);
        }
    }

    #[test]
    fn cidr_zero_prefix_covers_everything_in_its_family() {
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        assert!(!all.contains("::1".parse().unwrap()));
        assert_eq!(all.last(), "255.255.255.255".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn node_decoding_keeps_only_routing_fields() {
        let json = r#"{
          "apiVersion": "v1", "kind": "Node",
          "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7",
                       "labels": {"a": "b"}, "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
          "spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24", "fd00::/64"], "providerID": "hcloud://42",
                   "taints": [{"key": "k", "effect": "NoSchedule"}]},
          "status": {"addresses": [{"type": "InternalIP", "address": "10.1.0.2"}, {"type": "Hostname", "address": "n1"}],
                     "conditions": [{"type": "Ready", "status": "True"},
                                    {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated", "message": "m",
                                     "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
                     "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 1}]}
        }"#;
        let node: Node = serde_json::from_str(json).unwrap();
        assert_eq!(node.name, "n1");
        assert_eq!(node.uid, "u1");
        assert_eq!(node.resource_version, "7");
        assert_eq!(node.provider_id.as_deref(), Some("hcloud://42"));
        assert_eq!(node.pod_cidrs, vec!["10.0.0.0/24", "fd00::/64"]);
        assert_eq!(
            node.addresses,
            vec![
                NodeAddress::internal_ip("10.1.0.2"),
                NodeAddress::new("Hostname", "n1")
            ]
        );
        let condition = node.network_unavailable.unwrap();
        assert_eq!(
            (condition.status.as_ref(), condition.reason.as_ref()),
            ("False", "RouteCreated")
        );
        assert!(
            matches!(condition.status, Cow::Borrowed(_)),
            "well-known words are not allocated"
        );
        assert!(matches!(node.addresses[0].kind, Cow::Borrowed(_)));
    }

    #[test]
    fn node_without_spec_or_status_decodes_to_empty_fields() {
        let node: Node = serde_json::from_str(r#"{"metadata":{"name":"bare"}}"#).unwrap();
        assert_eq!(node.name, "bare");
        assert!(node.pod_cidrs.is_empty() && node.addresses.is_empty());
        assert_eq!(node.provider_id, None);
        assert_eq!(node.network_unavailable, None);
    }

    #[test]
    fn addresses_compare_as_sets() {
        let a = NodeAddress::internal_ip("10.0.0.1");
        let b = NodeAddress::new("Hostname", "n");
        assert!(same_addresses(
            &[a.clone(), b.clone()],
            &[b.clone(), a.clone()]
        ));
        assert!(same_addresses(
            &[a.clone(), a.clone()],
            std::slice::from_ref(&a)
        ));
        // Upstream's check calls these equal; as sets they are not.
        assert!(!same_addresses(
            &[a.clone(), a.clone()],
            &[a.clone(), b.clone()]
        ));
    }
}
