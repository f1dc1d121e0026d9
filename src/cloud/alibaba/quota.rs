//! The route table's quota as the account has it: Quota Center's (`quotas`
//! 2020-05-10, RPC) `ListProductQuotas` for product `vpc` and the quota
//! `vpc_quota_route_entrys_num` ("custom route entries per route table", 200 by
//! default, raised on request), filtered to the region by the dimension `regionId`.
//!
//! A fixed default is wrong for every account whose quota was raised (clusters
//! beyond 200 nodes) or is still at an old, lower one: the controller would report
//! `RouteTableFull` too early, or try creates the VPC refuses. Reading it needs
//! `quotas:ListProductQuotas`, which a least-privilege policy may lack: then, or
//! when the call fails, the limit stays the default with one warning that names the
//! permission. `QuotaExceeded.*` from `CreateRouteEntries` stays the backstop either
//! way. `Global.routeEntryQuota`, when set, wins and no call is made: an operator who
//! sets it knows something Quota Center does not say (a table shared with other
//! writers, a quota applied per table by a ticket).
//!
//! This module builds the request and decides from the reply; the provider sends it.

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

/// The quota in a `ListProductQuotas` reply (`{"Quotas": [{"QuotaActionCode",
/// "TotalQuota", "Dimensions": {"regionId"}}, …]}`): the items of our quota whose
/// `regionId` is `region` (or that have none); of several, the smallest, so that
/// no create is tried that one of them refuses.
pub fn parse(reply: &Value, region: &str) -> Result<usize, String> {
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
    values
        .into_iter()
        .min()
        .ok_or_else(|| format!("the reply lists no {ROUTE_ENTRY_QUOTA} for region {region}"))
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

/// The limit from the outcome of the call (`reply`: the reply, or what failed),
/// keeping `fallback` (the value in use, the default at first) when it failed.
pub fn decide(reply: Result<Value, String>, region: &str, fallback: usize) -> Decision {
    let quota = format!("Quota Center's {PRODUCT}/{ROUTE_ENTRY_QUOTA} in {region}");
    let read = reply.and_then(|r| parse(&r, region).map_err(|e| format!("{quota}: {e}")));
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
        assert_eq!(parse(&r, "cn-hangzhou"), Ok(400));
        let r = reply(vec![
            item(ROUTE_ENTRY_QUOTA, None, json!(300.0)),
            item(ROUTE_ENTRY_QUOTA, Some("cn-hangzhou"), json!(250.5)),
        ]);
        assert_eq!(parse(&r, "cn-hangzhou"), Ok(250));
        for odd in [
            json!({}),
            reply(vec![]),
            reply(vec![item(ROUTE_ENTRY_QUOTA, Some("cn-beijing"), json!(50))]),
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
        let d = decide(Ok(json!({"Quotas": []})), "cn-hangzhou", 7);
        assert_eq!((d.limit, d.from_account), (7, false));
        let good = json!({"Quotas": [item(ROUTE_ENTRY_QUOTA, Some("cn-hangzhou"), json!(7))]});
        let d = decide(Ok(good), "cn-hangzhou", 200);
        assert_eq!((d.limit, d.from_account), (7, true));
        assert!(d.message.contains(ROUTE_ENTRY_QUOTA), "{}", d.message);
    }
}
