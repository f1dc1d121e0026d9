//! End to end with the AWS provider and a route-table limit (issue 14, item 2):
//! `route-controller run --cloud-provider=aws` against moto's EC2 and a real
//! kube-apiserver, with two zone tables whose limit (`RouteTableRouteLimit` in
//! `--cloud-config`) leaves room for two nodes. A third node waits with
//! `NetworkUnavailable=True` (reason `RouteTableFull`) and gets its routes, in both
//! tables, once a node goes. No cloud call fails and none is sent that cannot fit.
//!
//! And on AWS's defaults (no `RouteTableRouteLimit`, the README's IAM policy without
//! its optional `servicequotas:GetServiceQuota`): 60 nodes, more than the old default
//! of 50 routes a table, all get their routes.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/moto.rs"]
mod moto;

use std::time::Duration;

use controller_process::{Spawn, sum};
use e2e_cluster::{Identity, create_node, delete_node, wait_for_network_unavailable};
use kube_apiserver::KubeApiserver;
use moto::Moto;

const PATIENCE: Duration = Duration::from_secs(30);
const CLUSTER_NAME: &str = "e2e-aws-limits";

/// Guards the hold with several tables: without it the third node's CreateRoute goes
/// out (moto accepts it: the table would then hold more than its limit, which real
/// EC2 refuses), so the third node's route shows while the other two are there.
#[test]
fn aws_tables_at_their_limit_hold_the_third_node_until_a_node_goes() {
    let (moto, api) = std::thread::scope(|s| {
        let moto = s.spawn(Moto::start);
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let ec2 = moto.ec2();
    let network = moto::network(&ec2);
    let tag = format!("kubernetes.io/cluster/{CLUSTER_NAME}");
    let tables = [
        ec2.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]),
        ec2.create_route_table(&network.vpc, &[(tag.as_str(), "shared")]),
    ];
    let local = ec2.routes(&tables[0]).len();
    let limit = local + 2;
    let instances: Vec<_> = (0..3)
        .map(|_| ec2.run_instance(&network.ami, &network.subnet))
        .collect();
    let identity = Identity::provision(&api, "e2e-aws-limits");
    let config = std::env::temp_dir().join(format!("e2e-aws-limits-{}.conf", std::process::id()));
    std::fs::write(
        &config,
        format!("[Global]\nRouteTableRouteLimit = {limit}\n"),
    )
    .expect("write the cloud config");

    let mut ctl = Spawn::new()
        .arg("--cloud-provider=aws")
        .arg(format!("--cloud-config={}", config.display()))
        .arg(format!("--cluster-name={CLUSTER_NAME}"))
        .arg("--cluster-cidr=10.244.0.0/16")
        .arg("--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true")
        .args(identity.flags())
        .env("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
        .env("AWS_REGION", moto::REGION)
        .env("AWS_ENDPOINT_URL_EC2", moto.url())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .spawn("aws-limits");
    ctl.wait_ready(PATIENCE);

    let names: Vec<String> = instances
        .iter()
        .map(|i| i.private_dns_name.clone())
        .collect();
    let cidr = |i: usize| format!("10.244.{}.0/24", 20 + i);
    let routed = |i: usize| {
        tables.iter().all(|t| {
            ec2.routes(t).iter().any(|(d, target, _)| {
                *d == cidr(i) && target.as_deref() == Some(instances[i].id.as_str())
            })
        })
    };
    let wait =
        |ctl: &mut controller_process::ControllerProcess, i: usize, status: &str, reason: &str| {
            if let Err(e) = wait_for_network_unavailable(
                &api,
                std::slice::from_ref(&names[i]),
                status,
                reason,
                PATIENCE,
            ) {
                ctl.fail(&e);
            }
        };
    for i in 0..2 {
        create_node(
            &api,
            &names[i],
            &[&cidr(i)],
            "10.0.1.10",
            &instances[i].provider_id(),
        );
        wait(&mut ctl, i, "False", "RouteCreated");
    }
    create_node(
        &api,
        &names[2],
        &[&cidr(2)],
        "10.0.1.10",
        &instances[2].provider_id(),
    );
    wait(&mut ctl, 2, "True", "RouteTableFull");
    assert!(!routed(2) && routed(0) && routed(1));
    for t in &tables {
        assert_eq!(ec2.routes(t).len(), limit, "{:?}", ec2.routes(t));
    }
    let m = ctl.scrape();
    assert_eq!(
        m.value(
            "route_controller_route_table_limit",
            &[("table", tables[1].as_str())]
        ),
        limit as f64
    );
    assert_eq!(
        m.value(
            "route_controller_route_table_routes",
            &[("table", tables[1].as_str())]
        ),
        limit as f64
    );

    delete_node(&api, &names[0]);
    wait(&mut ctl, 2, "False", "RouteCreated");
    assert!(routed(2) && !routed(0));
    let m = ctl.scrape();
    let all = sum(&m, "route_controller_cloud_requests_total", &[]);
    let ok = sum(
        &m,
        "route_controller_cloud_requests_total",
        &[("outcome", "success")],
    );
    assert_eq!(all, ok, "no cloud call failed");
    assert_eq!(
        m.value(
            "route_controller_cloud_requests_total",
            &[
                ("provider", "aws"),
                ("operation", "create"),
                ("outcome", "success")
            ]
        ),
        3.0,
        "one create per node, none refused"
    );
    ctl.terminate();
    let _ = std::fs::remove_file(&config);
}

/// Guards the default of 500 routes a table (AWS's since June 2025; it was 50): with
/// no `RouteTableRouteLimit` the controller asks Service Quotas once, moto's IAM
/// checks deny it under the README's required policy, and the limit is 500 with one
/// warning that names the permission. With the old fixed default of 50 the table (its
/// local route included) would hold 49 of these nodes and refuse 11.
#[test]
fn aws_defaults_route_sixty_nodes_when_the_quota_may_not_be_read() {
    const NODES: usize = 60;
    // Three IAM actions per user run before moto starts checking.
    let (moto, api) = std::thread::scope(|s| {
        let moto = s.spawn(|| Moto::start_with_auth(6));
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let admin = moto::create_iam_user(&moto, "admin", &moto::allow_policy(&["ec2:*"]));
    let controller = moto::create_iam_user(
        &moto,
        "route-controller",
        &moto::allow_policy(&[
            "ec2:DescribeRouteTables",
            "ec2:DescribeInstances",
            "ec2:CreateRoute",
            "ec2:ReplaceRoute",
            "ec2:DeleteRoute",
            "ec2:ModifyInstanceAttribute",
        ]),
    );
    let ec2 = moto.ec2_as(&admin.0, &admin.1, moto::REGION);
    let network = moto::network(&ec2);
    let cluster = "e2e-aws-defaults";
    let tag = format!("kubernetes.io/cluster/{cluster}");
    let table = ec2.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]);
    let instances: Vec<_> = (0..NODES)
        .map(|_| ec2.run_instance(&network.ami, &network.subnet))
        .collect();
    let identity = Identity::provision(&api, "e2e-aws-defaults");

    let mut ctl = Spawn::new()
        .arg("--cloud-provider=aws")
        .arg(format!("--cluster-name={cluster}"))
        .arg("--cluster-cidr=10.244.0.0/16")
        .arg("--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true")
        .args(identity.flags())
        .env("AWS_ACCESS_KEY_ID", &controller.0)
        .env("AWS_SECRET_ACCESS_KEY", &controller.1)
        .env("AWS_REGION", moto::REGION)
        // The generic variable: EC2 and Service Quotas both at moto.
        .env("AWS_ENDPOINT_URL", moto.url())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .spawn("aws-defaults");
    ctl.wait_ready(PATIENCE);

    let names: Vec<String> = instances
        .iter()
        .map(|i| i.private_dns_name.clone())
        .collect();
    let cidr = |i: usize| format!("10.244.{}.0/24", 100 + i);
    for (i, instance) in instances.iter().enumerate() {
        create_node(
            &api,
            &names[i],
            &[&cidr(i)],
            "10.0.1.10",
            &instance.provider_id(),
        );
    }
    // Three EC2 calls a node (describe, source/dest check, create), each action in a
    // bucket of its own (80 and 160 at once): about one burst.
    if let Err(e) =
        wait_for_network_unavailable(&api, &names, "False", "RouteCreated", PATIENCE * 4)
    {
        ctl.fail(&e);
    }
    let routes = ec2.routes(&table);
    for (i, instance) in instances.iter().enumerate() {
        assert!(
            routes
                .iter()
                .any(|(d, target, _)| *d == cidr(i) && target.as_deref() == Some(&instance.id)),
            "no route for node {i} in {routes:?}"
        );
    }
    assert_eq!(routes.len(), NODES + 1, "the nodes' and the local route");
    let m = ctl.scrape();
    assert_eq!(
        m.value(
            "route_controller_route_table_limit",
            &[("table", table.as_str())]
        ),
        500.0
    );
    // No call was refused for the limit (RouteTableFull is an `invalid` outcome) or
    // throttled. moto itself may drop a request of the 60 creates at once now and
    // then (a `retry` or `ambiguous` outcome, retried: every route is there, above).
    for outcome in ["invalid", "rate_limited"] {
        let refused = sum(
            &m,
            "route_controller_cloud_requests_total",
            &[("outcome", outcome)],
        );
        assert_eq!(refused, 0.0, "cloud calls with outcome {outcome}");
    }
    let log = ctl.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Routes per route table"))
        .collect();
    assert_eq!(warnings.len(), 1, "one line about the quota: {warnings:?}");
    assert!(
        warnings[0].contains("assuming AWS's default of 500")
            && warnings[0].contains("allow servicequotas:GetServiceQuota"),
        "{}",
        warnings[0]
    );
    ctl.terminate();
}
