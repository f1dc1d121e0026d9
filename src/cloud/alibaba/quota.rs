//! The route table's quota as the account has it: Quota Center's (`quotas`
//! 2020-05-10, RPC) `ListProductQuotas` for product `vpc` and the quota
//! `vpc_quota_route_entrys_num` ("custom route entries per route table", 200 by
//! default, raised on request), filtered to the region by the dimension `regionId`.
//!
//! A fixed default is wrong for every account whose quota was raised (clusters
//! beyond 200 nodes) or is still at an old, lower one: the controller would report
//! `RouteTableFull` too early, or try creates the VPC refuses. Reading it needs
//! `quotas:ListProductQuotas`, which a least-privilege policy may lack: then, or
//! when the call fails, the limit stays the value in use (the default at first) with
//! one warning that names the permission. `QuotaExceeded.*` from
//! `CreateRouteEntries` stays the backstop either way. When the filtered list has no
//! item for the region, the quota is asked for once more without dimensions.
//! `Global.routeEntryQuota`, when set, wins and no call is made: an operator who sets
//! it knows something Quota Center does not say (a quota raised for one table by a
//! ticket). Another writer's entries need no override: they are counted in the
//! table's usage.
//!
//! This module builds the requests and decides from the replies; the provider sends
//! them and decides when.

use serde_json::Value;

use super::config::DEFAULT_ROUTE_ENTRY_QUOTA;

/// Quota Center's API version.
pub const VERSION: &str = "2020-05-10";
/// The action, as counted and as the RAM policy names it (`quotas:ListProductQuotas`).
pub const ACTION: &str = "ListProductQuotas";
/// Quota Center's code of the VPC product.
pub const PRODUCT: &str = "vpc";
/// The quota: custom route entries per route table (the quota name of the VPC
/// quotas page and of Quota Center's console query).
pub const ROUTE_ENTRY_QUOTA: &str = "vpc_quota_route_entrys_num";
/// Quota Center's endpoint when `Global.quotasEndpoint` does not name one (the
/// service is central, not regional).
pub const DEFAULT_ENDPOINT: &str = "https://quotas.aliyuncs.com";
/// A larger value is not believed (the quota's adjustable range ends far below).
const MAX_QUOTA: f64 = 100_000.0;

/// The parameters of the one call for `region`.
pub fn request(region: &str) -> Vec<(String, String)> {
    vec![
        ("ProductCode".into(), PRODUCT.into()),
        ("QuotaActionCode".into(), ROUTE_ENTRY_QUOTA.into()),
        ("Dimensions.1.Key".into(), "regionId".into()),
        ("Dimensions.1.Value".into(), region.into()),
    ]
}

/// The parameters of the second ask, when the first listed nothing for the region
/// (the quota may have no `regionId` dimension): the same quota without
/// `Dimensions`, a page of [`PAGE`] from `next_token` (empty: the first page).
pub fn request_without_dimensions(next_token: &str) -> Vec<(String, String)> {
    let mut params = vec![
        ("ProductCode".into(), PRODUCT.into()),
        ("QuotaActionCode".into(), ROUTE_ENTRY_QUOTA.into()),
        ("MaxResults".into(), PAGE.to_string()),
    ];
    if !next_token.is_empty() {
        params.push(("NextToken".into(), next_token.into()));
    }
    params
}

/// Items a page of `ListProductQuotas` holds (the API's maximum).
pub const PAGE: usize = 100;

/// The `Quotas` items of a reply, and the token of the next page (`None`: the last).
pub fn page(reply: &Value) -> Result<(Vec<Value>, Option<String>), String> {
    let items = reply
        .get("Quotas")
        .and_then(Value::as_array)
        .ok_or("the reply has no Quotas list")?
        .clone();
    let next = reply
        .get("NextToken")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    Ok((items, next))
}

/// The quota in a `ListProductQuotas` reply (`{"Quotas": [{"QuotaActionCode",
/// "TotalQuota", "Dimensions": {"regionId"}}, …]}`): the items of our quota whose
/// `regionId` is `region` (or that have none); of several, the smallest, so that
/// no create is tried that one of them refuses. `Ok(None)`: no item of ours.
pub fn parse(reply: &Value, region: &str) -> Result<Option<usize>, String> {
    let quotas = reply
        .get("Quotas")
        .and_then(Value::as_array)
        .ok_or("the reply has no Quotas list")?;
    let mut values = Vec::new();
    for q in quotas {
        if q.get("QuotaActionCode").and_then(Value::as_str) != Some(ROUTE_ENTRY_QUOTA) {
            continue;
        }
        let in_region = match q.get("Dimensions").and_then(|d| d.get("regionId")) {
            None | Some(Value::Null) => true,
            Some(r) => r.as_str() == Some(region),
        };
        if !in_region {
            continue;
        }
        let value = q
            .get("TotalQuota")
            .and_then(Value::as_f64)
            .ok_or("its TotalQuota is not a number")?;
        if !value.is_finite() || !(1.0..=MAX_QUOTA).contains(&value) {
            return Err(format!(
                "its TotalQuota {value} is not between 1 and {MAX_QUOTA} entries"
            ));
        }
        // A fractional value (never seen) cannot be exceeded by its floor.
        values.push(value.floor() as usize);
    }
    Ok(values.into_iter().min())
}

/// What a reply without our quota is said to be.
pub fn none_listed(region: &str) -> String {
    format!(
        "neither the reply for the dimension regionId={region} nor the list without \
         dimensions has {ROUTE_ENTRY_QUOTA} for region {region}"
    )
}

/// What the read gave, and the one log line to write about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The custom entries each table may hold.
    pub limit: usize,
    /// True when the account's value was read; false when `fallback` is kept.
    pub from_account: bool,
    /// The log line (info when read, warning when not).
    pub message: String,
}

/// The limit from the outcome of the read (`read`: the value, or what failed),
/// keeping `fallback` (the value in use, the default at first) when it failed.
pub fn decide(read: Result<usize, String>, region: &str, fallback: usize) -> Decision {
    let quota = format!("Quota Center's {PRODUCT}/{ROUTE_ENTRY_QUOTA} in {region}");
    match read {
        Ok(limit) => Decision {
            limit,
            from_account: true,
            message: format!(
                "alibaba: route tables hold at most {limit} custom entries, the account's \
                 {quota} (Global.routeEntryQuota overrides it)"
            ),
        },
        Err(why) => Decision {
            limit: fallback,
            from_account: false,
            message: format!(
                "alibaba: reading {quota} failed: {why}; assuming {fallback} custom entries a \
                 route table{}. To use the account's own value, allow quotas:ListProductQuotas \
                 in the controller's RAM policy (optional, see the README's Alibaba Cloud \
                 section) or set Global.routeEntryQuota; the VPC still refuses an entry beyond \
                 the real quota (QuotaExceeded)",
                if fallback == DEFAULT_ROUTE_ENTRY_QUOTA {
                    " (the VPC's default)"
                } else {
                    ""
                }
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(code: &str, region: Option<&str>, value: Value) -> Value {
        let mut q = json!({"QuotaActionCode": code, "TotalQuota": value, "ProductCode": "vpc"});
        if let Some(r) = region {
            q["Dimensions"] = json!({ "regionId": r });
        }
        q
    }

    /// Guards the choice among the reply's items: our quota alone, in our region
    /// (or without a region), the smallest of several; anything else is no value.
    #[test]
    fn the_quota_is_our_codes_in_our_region() {
        let reply = |items: Vec<Value>| json!({ "Quotas": items });
        let r = reply(vec![
            item(
                "vpc_quota_route_tables_num",
                Some("cn-hangzhou"),
                json!(9.0),
            ),
            item(ROUTE_ENTRY_QUOTA, Some("cn-beijing"), json!(50.0)),
            item(ROUTE_ENTRY_QUOTA, Some("cn-hangzhou"), json!(400.0)),
        ]);
        assert_eq!(parse(&r, "cn-hangzhou"), Ok(Some(400)));
        let r = reply(vec![
            item(ROUTE_ENTRY_QUOTA, None, json!(300.0)),
            item(ROUTE_ENTRY_QUOTA, Some("cn-hangzhou"), json!(250.5)),
        ]);
        assert_eq!(parse(&r, "cn-hangzhou"), Ok(Some(250)));
        for none in [
            reply(vec![]),
            reply(vec![item(ROUTE_ENTRY_QUOTA, Some("cn-beijing"), json!(50))]),
        ] {
            assert_eq!(parse(&none, "cn-hangzhou"), Ok(None), "{none}");
        }
        for odd in [
            json!({}),
            reply(vec![item(ROUTE_ENTRY_QUOTA, None, json!("many"))]),
            reply(vec![item(ROUTE_ENTRY_QUOTA, None, json!(0))]),
            reply(vec![item(ROUTE_ENTRY_QUOTA, None, json!(1e9))]),
        ] {
            assert!(parse(&odd, "cn-hangzhou").is_err(), "{odd}");
        }
    }

    /// Guards the fallback: a failed read keeps the value in use and says which
    /// permission to grant; a good one says where the value came from.
    #[test]
    fn a_failed_read_keeps_the_value_and_names_the_permission() {
        let d = decide(Err("HTTP 403 NoPermission".into()), "cn-hangzhou", 200);
        assert_eq!((d.limit, d.from_account), (200, false));
        assert!(
            d.message.contains("quotas:ListProductQuotas"),
            "{}",
            d.message
        );
        assert!(d.message.contains("NoPermission"), "{}", d.message);
        let d = decide(Err(none_listed("cn-hangzhou")), "cn-hangzhou", 7);
        assert_eq!((d.limit, d.from_account), (7, false));
        let d = decide(Ok(7), "cn-hangzhou", 200);
        assert_eq!((d.limit, d.from_account), (7, true));
        assert!(d.message.contains(ROUTE_ENTRY_QUOTA), "{}", d.message);
    }
}
