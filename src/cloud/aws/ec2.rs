//! The slice of the EC2 API the provider uses, as plain data: route tables, routes and
//! instances read from XML replies, instance IDs read from provider IDs, and what each
//! EC2 error means for the controller.
//!
//! Pure functions only (no IO), so every mapping is unit-tested with XML fixtures,
//! including what moto never produces (blackhole routes, paging, throttling).

use std::time::Duration;

use super::query::QueryError;
use super::xml::Element;
use crate::model::Cidr;
use crate::provider::{CloudError, CloudErrorKind};

pub const DESCRIBE_ROUTE_TABLES: &str = "DescribeRouteTables";
pub const DESCRIBE_INSTANCES: &str = "DescribeInstances";
pub const MODIFY_INSTANCE_ATTRIBUTE: &str = "ModifyInstanceAttribute";
pub const CREATE_ROUTE: &str = "CreateRoute";
pub const REPLACE_ROUTE: &str = "ReplaceRoute";
pub const DELETE_ROUTE: &str = "DeleteRoute";
/// Turns off the source/destination check of one interface of a multi-interface
/// instance, where `ModifyInstanceAttribute` is refused.
pub const MODIFY_NETWORK_INTERFACE_ATTRIBUTE: &str = "ModifyNetworkInterfaceAttribute";
/// Whether a node's subnet has an IPv6 CIDR, before its first IPv6 route.
pub const DESCRIBE_SUBNETS: &str = "DescribeSubnets";
/// The `MaxEntries` of prefix lists that route tables reference, for the table's usage.
pub const DESCRIBE_MANAGED_PREFIX_LISTS: &str = "DescribeManagedPrefixLists";

/// EC2's code for an instance ID it will not take, with the message "There are
/// multiple interfaces attached to instance …" when the instance has several network
/// interfaces: `CreateRoute` ("The operation fails if you specify an instance ID
/// unless exactly one network interface is attached", EC2 API Reference, CreateRoute,
/// `InstanceId`) and `ModifyInstanceAttribute` refuse such an instance.
pub const INVALID_INSTANCE_ID: &str = "InvalidInstanceID";

/// `NetworkUnavailable` reason: EC2 refused the instance as a route target because
/// it has several network interfaces (seen only when one was attached after the
/// controller described the instance: it routes such instances to an interface).
pub const INSTANCE_HAS_SEVERAL_INTERFACES: &str = "InstanceHasSeveralInterfaces";

/// The cluster tag of the current scheme (any value: `owned` or `shared`).
pub fn cluster_tag_key(cluster_name: &str) -> String {
    format!("kubernetes.io/cluster/{cluster_name}")
}

/// The legacy cluster tag: key `KubernetesCluster`, value the cluster name.
pub const LEGACY_CLUSTER_TAG: &str = "KubernetesCluster";

/// A route table as `DescribeRouteTables` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTable {
    pub id: String,
    pub vpc_id: String,
    pub routes: Vec<RouteEntry>,
    /// `(key, value)` of each tag.
    pub tags: Vec<(String, String)>,
}

impl RouteTable {
    /// Whether the table carries either cluster tag of `cluster_name`.
    pub fn is_tagged_for(&self, cluster_name: &str) -> bool {
        let key = cluster_tag_key(cluster_name);
        self.tags
            .iter()
            .any(|(k, v)| *k == key || (k == LEGACY_CLUSTER_TAG && v == cluster_name))
    }
}

/// One route of a table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteEntry {
    /// `destinationCidrBlock`; absent for IPv6 and prefix-list routes.
    pub destination: Option<String>,
    /// `destinationIpv6CidrBlock`.
    pub destination_ipv6: Option<String>,
    /// `destinationPrefixListId`.
    pub prefix_list: Option<String>,
    pub instance_id: Option<String>,
    /// `networkInterfaceId`: EC2 lists it beside `instanceId` for a route made to an
    /// instance, and beside nothing for a route made to a detached interface.
    pub network_interface_id: Option<String>,
    /// `CreateRouteTable` (the local routes), `CreateRoute`, or
    /// `EnableVgwRoutePropagation` (propagated: outside the route quota).
    pub origin: Option<String>,
    /// `gatewayId`, `natGatewayId`, `networkInterfaceId`, …: whatever else it targets,
    /// for messages.
    pub other_target: Option<String>,
    /// `active` or `blackhole`.
    pub state: String,
}

impl RouteEntry {
    pub fn is_blackhole(&self) -> bool {
        self.state == "blackhole"
    }

    /// The destination, of either family; `None` for a prefix-list route.
    pub fn cidr(&self) -> Option<Cidr> {
        let text = self
            .destination
            .as_deref()
            .or(self.destination_ipv6.as_deref())?;
        Cidr::parse(text).ok()
    }

    /// Propagated from a virtual private gateway: EC2 counts it in a quota of its own
    /// ("BGP advertised routes per route table"), not in "Routes per route table".
    pub fn is_propagated(&self) -> bool {
        self.origin.as_deref() == Some("EnableVgwRoutePropagation")
    }

    /// What the route points at, for messages.
    pub fn target(&self) -> &str {
        self.instance_id
            .as_deref()
            .or(self.other_target.as_deref())
            .unwrap_or("nothing")
    }
}

/// Reads a `DescribeRouteTablesResponse`: its tables and the `nextToken` if more
/// pages follow.
pub fn parse_route_tables(root: &Element) -> (Vec<RouteTable>, Option<String>) {
    let tables = root
        .items("routeTableSet")
        .map(|t| RouteTable {
            id: t.text_of("routeTableId").unwrap_or_default().to_string(),
            vpc_id: t.text_of("vpcId").unwrap_or_default().to_string(),
            routes: t.items("routeSet").map(parse_route).collect(),
            tags: t
                .items("tagSet")
                .filter_map(|tag| {
                    let key = tag.text_of("key")?.to_string();
                    Some((key, tag.text_of("value").unwrap_or_default().to_string()))
                })
                .collect(),
        })
        .filter(|t| !t.id.is_empty())
        .collect();
    (tables, next_token(root))
}

fn parse_route(item: &Element) -> RouteEntry {
    const OTHER_TARGETS: &[&str] = &[
        "gatewayId",
        "natGatewayId",
        "networkInterfaceId",
        "transitGatewayId",
        "vpcPeeringConnectionId",
        "egressOnlyInternetGatewayId",
        "localGatewayId",
        "carrierGatewayId",
        "coreNetworkArn",
    ];
    RouteEntry {
        destination: item.text_of("destinationCidrBlock").map(str::to_string),
        destination_ipv6: item.text_of("destinationIpv6CidrBlock").map(str::to_string),
        prefix_list: item.text_of("destinationPrefixListId").map(str::to_string),
        instance_id: item.text_of("instanceId").map(str::to_string),
        network_interface_id: item.text_of("networkInterfaceId").map(str::to_string),
        origin: item.text_of("origin").map(str::to_string),
        other_target: OTHER_TARGETS
            .iter()
            .find_map(|n| item.text_of(n))
            .map(str::to_string),
        state: item.text_of("state").unwrap_or("active").to_string(),
    }
}

pub fn next_token(root: &Element) -> Option<String> {
    root.text_of("nextToken").map(str::to_string)
}

/// What the provider needs to know about an instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub private_dns_name: Option<String>,
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping`, `stopped`.
    pub state: String,
    /// The VPC it is in (empty when EC2 does not say: EC2-Classic, a stub).
    pub vpc_id: String,
    /// Whether its source/destination check is on (EC2's default); `None` when the
    /// reply does not say.
    pub source_dest_check: Option<bool>,
    /// Its network interfaces (`networkInterfaceSet`), in the reply's order (EC2
    /// promises none); empty when the reply does not say.
    pub interfaces: Vec<Interface>,
}

/// One network interface of an instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interface {
    pub id: String,
    pub subnet_id: String,
    /// Its private IPv4 addresses, primary first.
    pub private_ips: Vec<String>,
    /// Its IPv6 addresses.
    pub ipv6_addresses: Vec<String>,
    /// Its own source/destination check (each interface has one).
    pub source_dest_check: Option<bool>,
}

impl Interface {
    /// Whether `ip` (a node address as the kubelet reports it) is one of its addresses.
    pub fn holds(&self, ip: &str) -> bool {
        let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
            return false;
        };
        self.private_ips
            .iter()
            .chain(&self.ipv6_addresses)
            .any(|a| a.parse::<std::net::IpAddr>().ok() == Some(ip))
    }
}

fn parse_interface(item: &Element) -> Option<Interface> {
    let mut private_ips: Vec<String> = item
        .items("privateIpAddressesSet")
        .filter_map(|a| a.text_of("privateIpAddress").map(str::to_string))
        .collect();
    if let Some(primary) = item.text_of("privateIpAddress")
        && !private_ips.iter().any(|a| a == primary)
    {
        private_ips.insert(0, primary.to_string());
    }
    Some(Interface {
        id: item.text_of("networkInterfaceId")?.to_string(),
        subnet_id: item.text_of("subnetId").unwrap_or_default().to_string(),
        private_ips,
        ipv6_addresses: item
            .items("ipv6AddressesSet")
            .filter_map(|a| a.text_of("ipv6Address").map(str::to_string))
            .collect(),
        source_dest_check: item.text_of("sourceDestCheck").map(|v| v == "true"),
    })
}

impl Instance {
    /// A terminated (or terminating) instance never comes back: routes to it are dead.
    pub fn is_gone(&self) -> bool {
        matches!(self.state.as_str(), "terminated" | "shutting-down")
    }
}

/// Reads a `DescribeInstancesResponse`.
pub fn parse_instances(root: &Element) -> (Vec<Instance>, Option<String>) {
    let instances = root
        .items("reservationSet")
        .flat_map(|r| r.items("instancesSet"))
        .filter_map(|i| {
            Some(Instance {
                id: i.text_of("instanceId")?.to_string(),
                private_dns_name: i.text_of("privateDnsName").map(str::to_string),
                state: i
                    .child("instanceState")
                    .and_then(|s| s.text_of("name"))
                    .unwrap_or_default()
                    .to_string(),
                vpc_id: i.text_of("vpcId").unwrap_or_default().to_string(),
                source_dest_check: i.text_of("sourceDestCheck").map(|v| v == "true"),
                interfaces: i
                    .items("networkInterfaceSet")
                    .filter_map(parse_interface)
                    .collect(),
            })
        })
        .collect();
    (instances, next_token(root))
}

/// The subnets of a `DescribeSubnetsResponse`, each with whether it has an IPv6 CIDR
/// block (`ipv6CidrBlockAssociationSet`, in no state of leaving or failing: moto
/// writes its `associated` state as a Python dict), and the `nextToken`.
pub fn parse_subnets_with_ipv6(root: &Element) -> (Vec<(String, bool)>, Option<String>) {
    let subnets = root
        .items("subnetSet")
        .filter_map(|s| {
            let id = s.text_of("subnetId")?.to_string();
            let ipv6 = s.items("ipv6CidrBlockAssociationSet").any(|a| {
                a.text_of("ipv6CidrBlock").is_some()
                    && a.child("ipv6CidrBlockState")
                        .and_then(|st| st.text_of("state"))
                        .is_none_or(|st| {
                            !matches!(
                                st,
                                "disassociating" | "disassociated" | "failing" | "failed"
                            )
                        })
            });
            Some((id, ipv6))
        })
        .collect();
    (subnets, next_token(root))
}

/// A managed prefix list as `DescribeManagedPrefixLists` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixList {
    pub id: String,
    /// `IPv4` or `IPv6`.
    pub address_family: String,
    /// What a route to it counts against the route quota: its `maxEntries`, or for
    /// an AWS-managed list (which may have none) its documented weight.
    pub weight: usize,
}

/// The weight of an AWS-managed prefix list, by the end of its name: what a reference
/// to it counts against a route table's quota (Amazon VPC User Guide, "AWS-managed
/// prefix lists", "AWS-managed prefix list weight"). Lists named there only; another
/// counts as one (EC2's `RouteLimitExceeded` stays the backstop).
fn aws_managed_weight(name: &str) -> Option<usize> {
    const WEIGHTS: &[(&str, usize)] = &[
        (".cloudfront.origin-facing", 55),
        (".route53-healthchecks", 25),
        (".vpc-lattice", 10),
        (".s3express", 6),
        (".groundstation", 5),
        (".ec2-instance-connect", 2),
        (".dynamodb", 1),
        (".s3", 1),
    ];
    if !name.starts_with("com.amazonaws.") {
        return None;
    }
    WEIGHTS
        .iter()
        .find(|(suffix, _)| name.ends_with(suffix))
        .map(|(_, weight)| *weight)
}

/// Reads a `DescribeManagedPrefixListsResponse`.
pub fn parse_prefix_lists(root: &Element) -> (Vec<PrefixList>, Option<String>) {
    let lists = root
        .items("prefixListSet")
        .filter_map(|l| {
            let weight = l
                .text_of("maxEntries")
                .and_then(|m| m.parse().ok())
                .or_else(|| l.text_of("prefixListName").and_then(aws_managed_weight))
                .unwrap_or(1);
            Some(PrefixList {
                id: l.text_of("prefixListId")?.to_string(),
                address_family: l.text_of("addressFamily").unwrap_or("IPv4").to_string(),
                weight: weight.max(1),
            })
        })
        .collect();
    (lists, next_token(root))
}

/// The EC2 instance ID in a node's `spec.providerID`: `aws:///us-east-1a/i-0abc`,
/// `aws:////i-0abc` or a bare `i-0abc`. `None` for anything else (another cloud,
/// Fargate's `aws:///zone/fargate-…`).
pub fn instance_id_from_provider_id(provider_id: &str) -> Option<&str> {
    let id = match provider_id.strip_prefix("aws://") {
        // The "host" part must be empty: aws:///zone/i-…
        Some(rest) if rest.starts_with('/') => rest.rsplit('/').next()?,
        Some(_) => return None,
        None => provider_id,
    };
    is_instance_id(id).then_some(id)
}

/// `i-` followed by 8 or 17 lower-case hex digits (older and newer formats); moto's
/// IDs have the same shape.
pub fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        !hex.is_empty() && hex.len() <= 17 && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// Whether a call changes anything: a failed mutation may be ambiguous, a failed
/// describe never is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    Describe,
    Mutation,
}

/// A failed EC2 call with what is needed to explain and classify it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError {
    pub action: &'static str,
    pub kind: CallKind,
    pub error: Box<QueryError>,
    /// Set when the call was throttled: how long the provider now holds back.
    pub backoff: Option<Duration>,
    /// The endpoint, for messages.
    pub endpoint: String,
    /// Where the signing credentials came from, for messages about rejected ones.
    pub credentials: String,
}

const THROTTLING: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
];

const CREDENTIAL_CODES: &[&str] = &[
    "AuthFailure",
    "SignatureDoesNotMatch",
    "InvalidClientTokenId",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
    "RequestExpired",
    "OptInRequired",
];

/// EC2 says `UnauthorizedOperation`; moto (like most other AWS services) says
/// `AccessDenied`.
const PERMISSION_CODES: &[&str] = &[
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
];

const BAD_INPUT_CODES: &[&str] = &[
    "InvalidParameterValue",
    "InvalidParameter",
    "InvalidParameterCombination",
    "MissingParameter",
    "InvalidInstanceID.Malformed",
    "InvalidRouteTableId.Malformed",
    "InvalidRouteTableID.Malformed",
    "InvalidAction",
];

const SERVER_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "Unavailable",
    "ServiceUnavailable",
];

/// Whether an error code is EC2 telling us to slow down.
pub fn is_throttling(code: &str) -> bool {
    THROTTLING.contains(&code)
}

impl CallError {
    /// The EC2 error code, empty if the failure was not an error reply.
    pub fn code(&self) -> &str {
        match self.error.as_ref() {
            QueryError::Service { code, .. } => code,
            _ => "",
        }
    }

    /// Whether EC2 refused an instance ID because the instance has several network
    /// interfaces. EC2 answers `InvalidInstanceID` for other reasons too (an instance
    /// in a state it cannot take, …), so the code alone is not enough: its message
    /// says "There are multiple interfaces attached to instance …".
    pub fn says_several_interfaces(&self) -> bool {
        match self.error.as_ref() {
            QueryError::Service { code, message, .. } => {
                code == INVALID_INSTANCE_ID
                    && message.to_ascii_lowercase().contains("multiple interfaces")
            }
            _ => false,
        }
    }

    /// What the failure means for the controller, with a message naming the action,
    /// the endpoint, the request ID and what to fix.
    pub fn into_cloud(self) -> CloudError {
        use CloudErrorKind as K;
        let mutation = self.kind == CallKind::Mutation;
        let uncertain = if mutation {
            K::Ambiguous
        } else {
            K::Retry { after: None }
        };
        let (kind, hint) = match self.error.as_ref() {
            QueryError::Credentials(e) => return e.clone(),
            QueryError::Fenced(e) => {
                let message = format!("EC2 {}: {}", self.action, e.message);
                return CloudError::new(e.kind, message);
            }
            QueryError::Transport { maybe_sent, .. } => {
                let kind = if *maybe_sent {
                    uncertain
                } else {
                    K::Retry { after: None }
                };
                (kind, String::new())
            }
            QueryError::Unreadable { .. } => (uncertain, String::new()),
            QueryError::Service { status, code, .. } => {
                let code = code.as_str();
                if is_throttling(code) {
                    let after = self.backoff.unwrap_or(Duration::from_secs(1));
                    (K::RateLimited { after }, String::new())
                } else if code == "InvalidRoute.NotFound" {
                    (K::NotFound, String::new())
                } else if code == "RouteAlreadyExists" {
                    (K::AlreadyExists, String::new())
                } else if code == "RouteLimitExceeded" {
                    let hint = "; the route table holds its maximum of routes (raise \
                                \"Routes per route table\" in Service Quotas; the controller \
                                reads it at start when allowed servicequotas:GetServiceQuota, \
                                else set RouteTableRouteLimit in --cloud-config)";
                    (K::TableFull, hint.to_string())
                } else if PERMISSION_CODES.contains(&code) {
                    let hint = format!(
                        "; the IAM identity may not call ec2:{}: allow it in the policy \
                         (see the README's AWS IAM policy)",
                        self.action
                    );
                    (K::Invalid, hint)
                } else if CREDENTIAL_CODES.contains(&code) {
                    let hint = format!(
                        "; AWS rejected the credentials from {}: check the access key and \
                         secret (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the profile, or the \
                         instance role), the session token's expiry, the region and the system \
                         clock",
                        self.credentials
                    );
                    (K::Invalid, hint)
                } else if BAD_INPUT_CODES.contains(&code) {
                    (K::Invalid, String::new())
                } else if self.says_several_interfaces() {
                    let hint = "; EC2 routes to an instance with several network interfaces \
                                only by interface: the controller describes the instance again \
                                and routes to the interface that holds the node's InternalIP \
                                at the next try (if this persists, check that the node's \
                                InternalIP is an address of one of its interfaces)";
                    let message = format!(
                        "EC2 {} at {} failed: {}{hint}",
                        self.action, self.endpoint, self.error
                    );
                    return CloudError::refused(INSTANCE_HAS_SEVERAL_INTERFACES, false, message);
                } else if code == INVALID_INSTANCE_ID {
                    // For another reason than several interfaces: EC2's message says
                    // which.
                    (K::Invalid, String::new())
                } else if code == "InvalidInstanceID.NotFound" {
                    // New instances take a moment to become visible to every EC2 API.
                    (K::Retry { after: None }, String::new())
                } else if code == "InvalidRouteTableID.NotFound" {
                    let hint = "; the route table is gone: fix the configured route table ID \
                                or the cluster tag";
                    (K::Invalid, hint.to_string())
                } else if SERVER_CODES.contains(&code) || *status >= 500 {
                    (uncertain, String::new())
                } else {
                    (K::Retry { after: None }, String::new())
                }
            }
        };
        let message = format!(
            "EC2 {} at {} failed: {}{hint}",
            self.action, self.endpoint, self.error
        );
        CloudError::new(kind, message)
    }
}

/// The provider-wide backoff after throttling: exponential in the number of throttled
/// replies in a row, reset by any success. Sans-IO: the caller supplies the jitter.
#[derive(Clone, Debug)]
pub struct ThrottleBackoff {
    consecutive: u32,
    base: Duration,
    max: Duration,
}

impl ThrottleBackoff {
    /// Starts at one second and caps at 20 s, like the AWS SDKs' standard retry mode.
    pub fn new() -> ThrottleBackoff {
        ThrottleBackoff {
            consecutive: 0,
            base: Duration::from_secs(1),
            max: Duration::from_secs(20),
        }
    }

    /// Another throttled reply: how long to hold back, given `jitter` in [0, 1).
    /// The delay lies in [½, 1] of `base × 2^(n-1)` capped at `max`.
    pub fn on_throttled(&mut self, jitter: f64) -> Duration {
        self.consecutive = self.consecutive.saturating_add(1);
        crate::backoff::delay(self.base, self.consecutive, self.max, (0.5, 1.0), jitter)
    }

    pub fn on_success(&mut self) {
        self.consecutive = 0;
    }
}

impl Default for ThrottleBackoff {
    fn default() -> ThrottleBackoff {
        ThrottleBackoff::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(xml: &str) -> Element {
        Element::parse(xml).expect("fixture parses")
    }

    #[test]
    fn route_tables_are_read_from_real_aws_xml() {
        // Shape of a real AWS reply: trailing-slash namespace, instanceOwnerId,
        // networkInterfaceId, a blackhole route, an IPv6 route and a NAT route.
        let root = parse(
            r#"<DescribeRouteTablesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
              <requestId>8f1c</requestId>
              <routeTableSet><item>
                <routeTableId>rtb-0a1</routeTableId><vpcId>vpc-9</vpcId>
                <routeSet>
                  <item><destinationCidrBlock>10.0.0.0/16</destinationCidrBlock>
                    <gatewayId>local</gatewayId><state>active</state><origin>CreateRouteTable</origin></item>
                  <item><destinationCidrBlock>10.244.1.0/24</destinationCidrBlock>
                    <instanceId>i-0123456789abcdef0</instanceId><instanceOwnerId>123</instanceOwnerId>
                    <networkInterfaceId>eni-1</networkInterfaceId><state>active</state></item>
                  <item><destinationCidrBlock>10.244.2.0/24</destinationCidrBlock>
                    <networkInterfaceId>eni-2</networkInterfaceId><state>blackhole</state></item>
                  <item><destinationIpv6CidrBlock>2001:db8::/64</destinationIpv6CidrBlock>
                    <instanceId>i-0123456789abcdef0</instanceId><state>active</state></item>
                  <item><destinationCidrBlock>0.0.0.0/0</destinationCidrBlock>
                    <natGatewayId>nat-1</natGatewayId><state>active</state></item>
                </routeSet>
                <tagSet><item><key>kubernetes.io/cluster/c</key><value>owned</value></item></tagSet>
              </item></routeTableSet>
              <nextToken>page-2</nextToken>
            </DescribeRouteTablesResponse>"#,
        );
        let (tables, next) = parse_route_tables(&root);
        assert_eq!(next.as_deref(), Some("page-2"));
        assert_eq!(tables.len(), 1);
        let t = &tables[0];
        assert_eq!((t.id.as_str(), t.vpc_id.as_str()), ("rtb-0a1", "vpc-9"));
        assert_eq!(t.routes.len(), 5);
        assert_eq!(
            t.routes[1].instance_id.as_deref(),
            Some("i-0123456789abcdef0")
        );
        assert!(t.routes[2].is_blackhole());
        assert_eq!(t.routes[2].target(), "eni-2");
        assert_eq!(t.routes[3].destination, None);
        assert_eq!(t.routes[4].target(), "nat-1");
        assert!(t.is_tagged_for("c"));
        assert!(!t.is_tagged_for("other"));
    }

    /// Guards what the IPv6, interface and usage rules read from real EC2 replies:
    /// IPv6 destinations, prefix-list destinations, interfaces, origins; an
    /// instance's interfaces with their subnets, addresses and own checks; subnets'
    /// IPv6 blocks; prefix lists' maximum entries.
    #[test]
    fn ipv6_interfaces_origins_subnets_and_prefix_lists_are_read() {
        let root = parse(
            r#"<DescribeRouteTablesResponse><routeTableSet><item>
              <routeTableId>rtb-1</routeTableId><vpcId>vpc-1</vpcId><routeSet>
                <item><destinationIpv6CidrBlock>fd00:10:244:1::/64</destinationIpv6CidrBlock>
                  <instanceId>i-0000000a</instanceId><networkInterfaceId>eni-b</networkInterfaceId>
                  <origin>CreateRoute</origin><state>active</state></item>
                <item><destinationPrefixListId>pl-63a5400a</destinationPrefixListId>
                  <gatewayId>vpce-1</gatewayId><origin>CreateRoute</origin><state>active</state></item>
                <item><destinationCidrBlock>192.168.0.0/16</destinationCidrBlock>
                  <gatewayId>vgw-1</gatewayId><origin>EnableVgwRoutePropagation</origin><state>active</state></item>
              </routeSet></item></routeTableSet></DescribeRouteTablesResponse>"#,
        );
        let (tables, _) = parse_route_tables(&root);
        let routes = &tables[0].routes;
        assert_eq!(
            routes[0].cidr().map(|c| c.to_string()).as_deref(),
            Some("fd00:10:244:1::/64")
        );
        assert_eq!(routes[0].network_interface_id.as_deref(), Some("eni-b"));
        assert_eq!(routes[1].prefix_list.as_deref(), Some("pl-63a5400a"));
        assert_eq!(routes[1].cidr(), None);
        assert!(!routes[1].is_propagated());
        assert!(routes[2].is_propagated());

        let root = parse(
            "<DescribeInstancesResponse><reservationSet><item><instancesSet><item>\
               <instanceId>i-0000000a</instanceId><vpcId>vpc-1</vpcId><sourceDestCheck>true</sourceDestCheck>\
               <networkInterfaceSet>\
                 <item><networkInterfaceId>eni-a</networkInterfaceId><subnetId>subnet-1</subnetId>\
                   <privateIpAddress>10.0.1.5</privateIpAddress><sourceDestCheck>true</sourceDestCheck>\
                   <privateIpAddressesSet><item><privateIpAddress>10.0.1.5</privateIpAddress></item>\
                     <item><privateIpAddress>10.0.1.6</privateIpAddress></item></privateIpAddressesSet></item>\
                 <item><networkInterfaceId>eni-b</networkInterfaceId><subnetId>subnet-2</subnetId>\
                   <privateIpAddress>10.0.2.7</privateIpAddress><sourceDestCheck>false</sourceDestCheck>\
                   <ipv6AddressesSet><item><ipv6Address>2600:1f18::7</ipv6Address></item></ipv6AddressesSet></item>\
               </networkInterfaceSet></item></instancesSet></item></reservationSet></DescribeInstancesResponse>",
        );
        let (instances, _) = parse_instances(&root);
        let interfaces = &instances[0].interfaces;
        assert_eq!(interfaces.len(), 2);
        assert_eq!(interfaces[0].private_ips, vec!["10.0.1.5", "10.0.1.6"]);
        assert!(interfaces[0].holds("10.0.1.6"));
        assert!(!interfaces[0].holds("10.0.2.7"));
        assert!(interfaces[1].holds("2600:1f18:0::7"));
        assert_eq!(interfaces[1].subnet_id, "subnet-2");
        assert_eq!(interfaces[1].source_dest_check, Some(false));

        let root = parse(
            "<DescribeSubnetsResponse><subnetSet>\
               <item><subnetId>subnet-1</subnetId><ipv6CidrBlockAssociationSet/></item>\
               <item><subnetId>subnet-2</subnetId><ipv6CidrBlockAssociationSet><item>\
                 <ipv6CidrBlock>2600:1f18::/64</ipv6CidrBlock>\
                 <ipv6CidrBlockState><state>associated</state></ipv6CidrBlockState></item>\
               </ipv6CidrBlockAssociationSet></item>\
               <item><subnetId>subnet-3</subnetId><ipv6CidrBlockAssociationSet><item>\
                 <ipv6CidrBlock>2600:1f18:1::/64</ipv6CidrBlock>\
                 <ipv6CidrBlockState><state>disassociated</state></ipv6CidrBlockState></item>\
               </ipv6CidrBlockAssociationSet></item>\
             </subnetSet></DescribeSubnetsResponse>",
        );
        let (subnets, _) = parse_subnets_with_ipv6(&root);
        assert_eq!(
            subnets,
            vec![
                ("subnet-1".to_string(), false),
                ("subnet-2".to_string(), true),
                ("subnet-3".to_string(), false)
            ]
        );

        let root = parse(
            "<DescribeManagedPrefixListsResponse><prefixListSet>\
               <item><prefixListId>pl-1</prefixListId><addressFamily>IPv6</addressFamily>\
                 <maxEntries>25</maxEntries></item>\
             </prefixListSet></DescribeManagedPrefixListsResponse>",
        );
        let (lists, _) = parse_prefix_lists(&root);
        assert_eq!(
            lists,
            vec![PrefixList {
                id: "pl-1".into(),
                address_family: "IPv6".into(),
                weight: 25
            }]
        );
    }

    /// Guards the mapping of EC2's answer to a route or source/destination check
    /// sent with the `InstanceId` of an instance with several interfaces: refused for
    /// the node with the fix, never retried blind.
    #[test]
    fn invalid_instance_id_of_a_multi_interface_instance_is_refused_with_the_fix() {
        let several = "There are multiple interfaces attached to instance 'i-0123456789abcdef0'. \
                       Please specify an interface ID for the operation instead.";
        let err = service_error_saying(
            CREATE_ROUTE,
            CallKind::Mutation,
            400,
            INVALID_INSTANCE_ID,
            several,
        );
        assert!(err.says_several_interfaces());
        let err = err.into_cloud();
        assert_eq!(
            err.kind,
            CloudErrorKind::Refused {
                reason: INSTANCE_HAS_SEVERAL_INTERFACES,
                lasting: false
            }
        );
        assert!(err.message.contains("InternalIP"), "{}", err.message);
        assert!(err.message.contains("req-7"), "{}", err.message);
        // Its cousins keep their meaning.
        let malformed = service_error(
            CREATE_ROUTE,
            CallKind::Mutation,
            400,
            "InvalidInstanceID.Malformed",
        );
        assert_eq!(malformed.into_cloud().kind, CloudErrorKind::Invalid);
        // The same code for another reason is no interface matter: invalid, with
        // EC2's own words.
        let other = service_error_saying(
            CREATE_ROUTE,
            CallKind::Mutation,
            400,
            INVALID_INSTANCE_ID,
            "The instance ID 'i-0123456789abcdef0' is not in a state from which it can be used",
        );
        assert!(!other.says_several_interfaces());
        let other = other.into_cloud();
        assert_eq!(other.kind, CloudErrorKind::Invalid, "{}", other.message);
        assert!(
            other.message.contains("not in a state"),
            "{}",
            other.message
        );
        assert!(!other.message.contains("InternalIP"), "{}", other.message);
    }

    /// Guards review finding 3 of aws6: a prefix list counts as its `maxEntries`; an
    /// AWS-managed one without it as its documented weight (CloudFront's 55, S3's 1);
    /// an unknown one without it as one. Seen failing with lists lacking
    /// `maxEntries` dropped, as before: one list read instead of four.
    #[test]
    fn prefix_lists_weigh_their_max_entries_or_the_documented_weight() {
        let root = parse(
            "<DescribeManagedPrefixListsResponse><prefixListSet>\
               <item><prefixListId>pl-own</prefixListId><addressFamily>IPv6</addressFamily>\
                 <maxEntries>20</maxEntries><prefixListName>offices</prefixListName></item>\
               <item><prefixListId>pl-cf</prefixListId><addressFamily>IPv4</addressFamily>\
                 <prefixListName>com.amazonaws.global.cloudfront.origin-facing</prefixListName></item>\
               <item><prefixListId>pl-s3</prefixListId><addressFamily>IPv4</addressFamily>\
                 <prefixListName>com.amazonaws.us-east-1.s3</prefixListName></item>\
               <item><prefixListId>pl-odd</prefixListId><prefixListName>odd</prefixListName></item>\
             </prefixListSet></DescribeManagedPrefixListsResponse>",
        );
        let (lists, next) = parse_prefix_lists(&root);
        assert_eq!(next, None);
        let weights: Vec<(&str, &str, usize)> = lists
            .iter()
            .map(|l| (l.id.as_str(), l.address_family.as_str(), l.weight))
            .collect();
        assert_eq!(
            weights,
            vec![
                ("pl-own", "IPv6", 20),
                ("pl-cf", "IPv4", 55),
                ("pl-s3", "IPv4", 1),
                ("pl-odd", "IPv4", 1)
            ]
        );
    }

    #[test]
    fn instances_are_read_across_reservations() {
        let root = parse(
            "<DescribeInstancesResponse><reservationSet>\
               <item><instancesSet><item><instanceId>i-1</instanceId>\
                 <privateDnsName>ip-10-0-1-4.ec2.internal</privateDnsName>\
                 <instanceState><code>16</code><name>running</name></instanceState></item></instancesSet></item>\
               <item><instancesSet><item><instanceId>i-2</instanceId><privateDnsName/>\
                 <instanceState><code>48</code><name>terminated</name></instanceState></item></instancesSet></item>\
             </reservationSet></DescribeInstancesResponse>",
        );
        let (instances, next) = parse_instances(&root);
        assert_eq!(next, None);
        assert_eq!(instances.len(), 2);
        assert_eq!(
            instances[0].private_dns_name.as_deref(),
            Some("ip-10-0-1-4.ec2.internal")
        );
        assert!(!instances[0].is_gone());
        assert_eq!(instances[1].private_dns_name, None);
        assert!(instances[1].is_gone());
    }

    #[test]
    fn provider_ids_of_every_spelling_yield_the_instance_id() {
        let id = "i-0123456789abcdef0";
        assert_eq!(
            instance_id_from_provider_id("aws:///us-east-1a/i-0123456789abcdef0"),
            Some(id)
        );
        assert_eq!(
            instance_id_from_provider_id("aws:////i-0123456789abcdef0"),
            Some(id)
        );
        assert_eq!(instance_id_from_provider_id(id), Some(id));
        assert_eq!(
            instance_id_from_provider_id("i-1234abcd"),
            Some("i-1234abcd")
        );
        assert_eq!(instance_id_from_provider_id("hcloud://42"), None);
        assert_eq!(
            instance_id_from_provider_id("aws:///us-east-1a/fargate-ip-10-0-1-4"),
            None
        );
        assert_eq!(instance_id_from_provider_id("aws://host/i-1234abcd"), None);
        assert_eq!(instance_id_from_provider_id("i-"), None);
        assert_eq!(instance_id_from_provider_id("i-zz"), None);
    }

    fn service_error(action: &'static str, kind: CallKind, status: u16, code: &str) -> CallError {
        service_error_saying(action, kind, status, code, "msg")
    }

    fn service_error_saying(
        action: &'static str,
        kind: CallKind,
        status: u16,
        code: &str,
        message: &str,
    ) -> CallError {
        CallError {
            action,
            kind,
            error: Box::new(QueryError::Service {
                status,
                code: code.into(),
                message: message.into(),
                request_id: Some("req-7".into()),
            }),
            backoff: if is_throttling(code) {
                Some(Duration::from_secs(3))
            } else {
                None
            },
            endpoint: "http://127.0.0.1:1/".into(),
            credentials: "profile \"dev\" in /home/x/.aws/credentials".into(),
        }
    }

    #[test]
    fn every_mapped_error_code_gets_its_kind() {
        use CallKind::*;
        use CloudErrorKind as K;
        let retry = K::Retry { after: None };
        let cases: &[(&'static str, CallKind, u16, &str, CloudErrorKind)] = &[
            (
                CREATE_ROUTE,
                Mutation,
                503,
                "RequestLimitExceeded",
                K::RateLimited {
                    after: Duration::from_secs(3),
                },
            ),
            (
                DESCRIBE_ROUTE_TABLES,
                Describe,
                400,
                "Throttling",
                K::RateLimited {
                    after: Duration::from_secs(3),
                },
            ),
            (
                DELETE_ROUTE,
                Mutation,
                400,
                "InvalidRoute.NotFound",
                K::NotFound,
            ),
            (
                CREATE_ROUTE,
                Mutation,
                400,
                "RouteAlreadyExists",
                K::AlreadyExists,
            ),
            (
                CREATE_ROUTE,
                Mutation,
                400,
                "InvalidParameterValue",
                K::Invalid,
            ),
            (
                CREATE_ROUTE,
                Mutation,
                403,
                "UnauthorizedOperation",
                K::Invalid,
            ),
            (
                DESCRIBE_ROUTE_TABLES,
                Describe,
                401,
                "AuthFailure",
                K::Invalid,
            ),
            (
                CREATE_ROUTE,
                Mutation,
                400,
                "InvalidInstanceID.Malformed",
                K::Invalid,
            ),
            (
                CREATE_ROUTE,
                Mutation,
                400,
                "InvalidInstanceID.NotFound",
                retry,
            ),
            (CREATE_ROUTE, Mutation, 500, "InternalError", K::Ambiguous),
            (DESCRIBE_ROUTE_TABLES, Describe, 500, "InternalError", retry),
            (DELETE_ROUTE, Mutation, 503, "Unavailable", K::Ambiguous),
            (DESCRIBE_INSTANCES, Describe, 503, "Unavailable", retry),
            (CREATE_ROUTE, Mutation, 500, "", K::Ambiguous),
            (CREATE_ROUTE, Mutation, 400, "SomethingNew", retry),
        ];
        for (action, kind, status, code, want) in cases {
            let err = service_error(action, *kind, *status, code).into_cloud();
            assert_eq!(err.kind, *want, "{action} {code}");
            assert!(err.message.contains(action), "{}", err.message);
            if !code.is_empty() {
                assert!(err.message.contains("req-7"), "{}", err.message);
            }
        }
    }

    #[test]
    fn permission_and_credential_errors_say_what_to_fix() {
        let err = service_error(
            CREATE_ROUTE,
            CallKind::Mutation,
            403,
            "UnauthorizedOperation",
        )
        .into_cloud();
        assert!(err.message.contains("ec2:CreateRoute"), "{}", err.message);
        let err = service_error(
            DESCRIBE_ROUTE_TABLES,
            CallKind::Describe,
            401,
            "AuthFailure",
        )
        .into_cloud();
        assert!(
            err.message.contains("AWS_SECRET_ACCESS_KEY"),
            "{}",
            err.message
        );
    }

    #[test]
    fn transport_failures_are_ambiguous_only_for_mutations_that_may_have_been_sent() {
        let failure = |kind, maybe_sent| CallError {
            action: CREATE_ROUTE,
            kind,
            error: Box::new(QueryError::Transport {
                maybe_sent,
                message: "timed out".into(),
            }),
            backoff: None,
            endpoint: "e".into(),
            credentials: "c".into(),
        };
        let retry = CloudErrorKind::Retry { after: None };
        assert_eq!(
            failure(CallKind::Mutation, true).into_cloud().kind,
            CloudErrorKind::Ambiguous
        );
        assert_eq!(failure(CallKind::Mutation, false).into_cloud().kind, retry);
        assert_eq!(failure(CallKind::Describe, true).into_cloud().kind, retry);
    }

    #[test]
    fn throttle_backoff_doubles_caps_and_resets() {
        let mut b = ThrottleBackoff::new();
        let secs = |s: f64| Duration::from_secs_f64(s);
        // Jitter 1.0 gives the full delay; 0.0 gives half of it.
        assert_eq!(b.on_throttled(1.0), secs(1.0));
        assert_eq!(b.on_throttled(1.0), secs(2.0));
        assert_eq!(b.on_throttled(0.0), secs(2.0));
        for _ in 0..10 {
            b.on_throttled(0.5);
        }
        assert_eq!(b.on_throttled(1.0), secs(20.0));
        b.on_success();
        assert_eq!(b.on_throttled(1.0), secs(1.0));
    }
}
