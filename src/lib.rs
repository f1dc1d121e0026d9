//! route-controller: a Kubernetes route controller.
#![forbid(unsafe_code)]

pub mod actor;
pub mod cli;
pub mod cloud;
pub mod config;
pub mod controller;
pub mod duration;
pub mod metrics;
pub mod model;
pub mod plan;
