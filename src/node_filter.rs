//! Which nodes this controller routes: the nodes `--node-selector` selects whose
//! `spec.providerID` belongs to this controller's cloud (or is not set yet).
//!
//! Hetzner clusters mix cloud servers with dedicated Robot servers (providerID
//! `hrobot://<id>`, or `hcloud://bm-<id>` from older Hetzner CCMs), and hybrid
//! clusters carry nodes of other clouds. Routing such a node can only fail ("invalid
//! gateway") and mark it `NetworkUnavailable`; skipping it costs nothing. A node with
//! no providerID yet is routed: it may be a cloud node the cloud-controller-manager has
//! not initialised, and its route follows once it is.
//!
//! The node watch applies the filter as it decodes each node, so an unselected node
//! reaches the controller as its name and providerID alone. It is applied on our side rather than as
//! a server-side `labelSelector`, for which the API server reports a node whose labels
//! stop matching as deleted: the controller would delete its routes.

use std::fmt;

use crate::model::Node;
use crate::selector::{Labels, Selector};

/// Why a node is not routed by this controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unselected {
    /// Its labels do not match `--node-selector`.
    ByLabels,
    /// Its `spec.providerID` belongs to another provider (a Hetzner Robot server, a
    /// node of another cloud).
    OtherProvider,
}

impl Unselected {
    /// Why, in the words of a log line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Unselected::ByLabels => "its labels do not match --node-selector",
            Unselected::OtherProvider => "its providerID belongs to another provider",
        }
    }
}

impl fmt::Display for Unselected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The nodes this controller's cloud can route, by the scheme of their providerID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnProvider {
    /// Hetzner Cloud servers, `hcloud://<server id>`; Robot servers are another
    /// provider's (`hrobot://<id>`, and `hcloud://bm-<id>` of older Hetzner CCMs).
    Hcloud,
    /// EC2 instances, `aws:///<zone>/<instance id>`.
    Aws,
    /// Azure VMs and scale-set VMs, `azure:///subscriptions/…`.
    Azure,
    /// Compute Engine instances, `gce://<project>/<zone>/<instance>`.
    Gce,
    /// OpenStack Nova instances, `openstack:///<instance id>`.
    OpenStack,
    /// Alibaba Cloud ECS instances, `<region>.<instance id>` or
    /// `alicloud://<region>.<instance id>`, as cloud-provider-alibaba-cloud writes them.
    Alibaba,
}

impl OwnProvider {
    /// The provider of `--cloud-provider NAME`; `None` for providers whose nodes carry
    /// no scheme of their own (`fake`).
    pub fn of(provider_name: &str) -> Option<OwnProvider> {
        match provider_name {
            "hcloud" => Some(OwnProvider::Hcloud),
            "aws" => Some(OwnProvider::Aws),
            "azure" => Some(OwnProvider::Azure),
            "gce" => Some(OwnProvider::Gce),
            "openstack" => Some(OwnProvider::OpenStack),
            "alibaba" => Some(OwnProvider::Alibaba),
            _ => None,
        }
    }

    /// Whether a node with this providerID is one of this provider's.
    pub fn owns(&self, provider_id: &str) -> bool {
        match self {
            OwnProvider::Hcloud => {
                provider_id.starts_with("hcloud://") && !provider_id.starts_with("hcloud://bm-")
            }
            OwnProvider::Aws => provider_id.starts_with("aws://"),
            OwnProvider::Azure => provider_id.starts_with("azure://"),
            OwnProvider::Gce => provider_id.starts_with("gce://"),
            OwnProvider::OpenStack => provider_id.starts_with("openstack://"),
            OwnProvider::Alibaba => alibaba_instance(provider_id).is_some(),
        }
    }
}

/// The ECS instance of a providerID as cloud-provider-alibaba-cloud writes it:
/// `<region>.<instance>`, with or without `alicloud://`. The one parser of both the
/// node filter and the provider, so that a node the filter routes names an instance.
pub fn alibaba_instance(provider_id: &str) -> Option<&str> {
    let id = provider_id
        .strip_prefix("alicloud://")
        .unwrap_or(provider_id);
    let (region, instance) = id.split_once('.')?;
    let plain = |s: &str| !s.is_empty() && !s.contains('/') && !s.contains(':');
    (plain(region) && plain(instance)).then_some(instance)
}

/// The filter. The default routes every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFilter {
    /// `--node-selector` (default: every node).
    pub selector: Selector,
    /// Skip nodes of other providers (`--skip-nodes-of-other-providers`, on by default
    /// for hcloud, aws and azure); `None` routes whatever the providerID.
    pub own_provider: Option<OwnProvider>,
}

impl NodeFilter {
    /// A filter that routes every node.
    pub fn everything() -> NodeFilter {
        NodeFilter::default()
    }

    /// Whether it routes every node whatever its labels and providerID.
    pub fn is_everything(&self) -> bool {
        self.selector.is_everything() && self.own_provider.is_none()
    }

    /// Whether [`NodeFilter::check`] looks at a node's labels (a `--node-selector`
    /// is set); if not, the watch does not decode them.
    pub fn reads_labels(&self) -> bool {
        !self.selector.is_everything()
    }

    /// Whether this controller routes `node`, whose labels are `labels`; if not, why.
    pub fn check(&self, node: &Node, labels: &Labels) -> Result<(), Unselected> {
        if let (Some(own), Some(id)) = (self.own_provider, node.provider_id.as_deref())
            && !own.owns(id)
        {
            return Err(Unselected::OtherProvider);
        }
        if !self.selector.matches(labels) {
            return Err(Unselected::ByLabels);
        }
        Ok(())
    }
}

impl fmt::Display for NodeFilter {
    /// What is routed, for the start-up log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_everything() {
            return f.write_str("every node");
        }
        f.write_str("the nodes")?;
        if !self.selector.is_everything() {
            write!(
                f,
                " that --node-selector {:?} selects",
                self.selector.to_string()
            )?;
        }
        match self.own_provider {
            Some(OwnProvider::Hcloud) => {
                f.write_str(" with providerID hcloud://<server> or none (not Robot's)")
            }
            Some(OwnProvider::Aws) => f.write_str(" with providerID aws://... or none"),
            Some(OwnProvider::Azure) => f.write_str(" with providerID azure://... or none"),
            Some(OwnProvider::Gce) => f.write_str(" with providerID gce://... or none"),
            Some(OwnProvider::OpenStack) => f.write_str(" with providerID openstack://... or none"),
            Some(OwnProvider::Alibaba) => {
                f.write_str(" with providerID <region>.<instance> (or alicloud://...) or none")
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(provider_id: Option<&str>) -> Node {
        Node {
            name: "n".into(),
            provider_id: provider_id.map(String::from),
            ..Node::default()
        }
    }

    #[test]
    fn hetzner_routes_cloud_servers_and_skips_robot_servers_and_other_clouds() {
        let filter = NodeFilter {
            own_provider: OwnProvider::of("hcloud"),
            ..NodeFilter::default()
        };
        let none = Labels::new();
        for (id, routed) in [
            (Some("hcloud://4711"), true),
            (None, true), // not initialised yet: may be a cloud server
            (Some("hrobot://1234"), false),
            (Some("hcloud://bm-1234"), false),
            (Some("aws:///eu-west-1a/i-0abc"), false),
            (Some("kind://docker/kind/node"), false),
        ] {
            let verdict = filter.check(&node(id), &none);
            assert_eq!(verdict.is_ok(), routed, "{id:?}");
            if !routed {
                assert_eq!(verdict, Err(Unselected::OtherProvider));
            }
        }
    }

    #[test]
    fn aws_routes_instances_only_and_other_providers_route_everything() {
        let azure = OwnProvider::of("azure").unwrap();
        assert!(azure.owns(
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-0"
        ));
        assert!(!azure.owns("aws:///eu-west-1a/i-0abc"));
        let aws = OwnProvider::of("aws").unwrap();
        assert!(aws.owns("aws:///eu-west-1a/i-0abc"));
        assert!(aws.owns("aws://eu-west-1a/i-0abc"));
        assert!(!aws.owns("hcloud://1"));
        let gce = OwnProvider::of("gce").unwrap();
        assert!(gce.owns("gce://p/europe-west1-b/node-1"));
        assert!(!gce.owns("aws:///eu-west-1a/i-0abc"));
        // Alibaba's has no scheme of its own: `<region>.<instance>`, as the peer sets
        // it, or the same behind `alicloud://`.
        let alibaba = OwnProvider::of("alibaba").unwrap();
        assert!(alibaba.owns("cn-hangzhou.i-bp16uimj7fl6ze8q5rf3"));
        assert!(alibaba.owns("alicloud://cn-hangzhou.i-bp16uimj7fl6ze8q5rf3"));
        assert!(!alibaba.owns("aws:///eu-west-1a/i-0abc"));
        assert!(!alibaba.owns("kind://docker/kind/node"));
        assert!(!alibaba.owns("azure://rg.vm-1"));
        assert!(!alibaba.owns("i-bp16uimj7fl6ze8q5rf3"));
        // What the provider cannot use, the filter does not route.
        assert!(!alibaba.owns("cn.a/b"));
        assert!(!alibaba.owns("alicloud://cn:x.i-1"));
        assert_eq!(OwnProvider::of("fake"), None);
        let off = NodeFilter::everything();
        assert!(off.is_everything());
        assert!(off.check(&node(Some("hrobot://1")), &Labels::new()).is_ok());
    }

    #[test]
    fn the_selector_decides_after_the_provider() {
        let filter = NodeFilter {
            selector: Selector::parse("role=worker").unwrap(),
            own_provider: Some(OwnProvider::Hcloud),
        };
        let worker: Labels = [("role".to_string(), "worker".to_string())].into();
        assert!(filter.check(&node(Some("hcloud://1")), &worker).is_ok());
        assert_eq!(
            filter.check(&node(Some("hcloud://1")), &Labels::new()),
            Err(Unselected::ByLabels)
        );
        assert_eq!(
            filter.check(&node(Some("hrobot://1")), &worker),
            Err(Unselected::OtherProvider)
        );
    }
}
