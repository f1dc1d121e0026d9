//! route-controller: a Kubernetes route controller.
#![forbid(unsafe_code)]

pub mod cloud;
pub mod controller;
pub mod duration;
pub mod kube;
pub mod metrics;
pub mod model;
pub mod plan;
