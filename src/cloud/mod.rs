//! The providers behind the [`Routes`] interface: Hetzner Cloud ([`hcloud`]), AWS EC2
//! ([`aws`]), Azure route tables ([`azure`]), Google Compute Engine ([`gce`]), OpenStack
//! Neutron routers ([`openstack`]), Alibaba Cloud VPC route tables ([`alibaba`]), any
//! router through a plugin ([`exec`]) and an in-memory cloud ([`fake`]) for tests, simulations and trying things out.
//!
//! The interface itself lives in the core (`crate::provider`, re-exported at the crate
//! root and here); providers depend on it and on the model, never on the controller.

pub use crate::provider::{CloudError, CloudErrorKind, NodeDirectory, RouteTarget, Routes};

pub mod alibaba;
pub mod aws;
pub mod azure;
pub mod exec;
pub mod fake;
pub mod gce;
pub mod hcloud;
pub mod openstack;
