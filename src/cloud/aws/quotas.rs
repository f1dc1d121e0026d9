//! The route-table limit as the account has it: Service Quotas' "Routes per route
//! table" (`GetServiceQuota`, service `vpc`, quota `L-93826ACB`), read once per process
//! when no `RouteTableRouteLimit` is configured.
//!
//! AWS raised that quota's default from 50 to 500 in June 2025 (adjustable to 1000),
//! so a fixed default is wrong for one account or another; the applied value is what
//! EC2 enforces. Reading it needs `servicequotas:GetServiceQuota`, which a least-privilege
//! policy may lack: then, or when the call fails, the limit is AWS's default with one
//! log line that says why and how to grant the permission. EC2's own
//! `RouteLimitExceeded` stays the backstop either way.
//!
//! This module decodes and decides; it never retries and never logs credentials.

use super::query::QueryError;

/// Service Quotas' code of the VPC service.
pub const SERVICE_CODE: &str = "vpc";
/// The quota "Routes per route table" (the code in Service Quotas and in moto's
/// `servicequotas/resources/default_quotas/vpc.py`).
pub const ROUTES_PER_ROUTE_TABLE: &str = "L-93826ACB";
/// The JSON 1.1 target of the one call.
pub const GET_SERVICE_QUOTA_TARGET: &str = "ServiceQuotasV20190624.GetServiceQuota";
/// The action as counted in [`AwsProvider::api_calls`](super::AwsProvider::api_calls).
pub const GET_SERVICE_QUOTA: &str = "GetServiceQuota";
/// The SigV4 signing name of Service Quotas.
pub const SIGNING_NAME: &str = "servicequotas";
/// AWS's default of "Routes per route table" since June 2025.
pub const DEFAULT_ROUTE_TABLE_LIMIT: usize = 500;
/// The quota's hard maximum; a larger reply is not believed.
const MAX_ROUTE_TABLE_LIMIT: usize = 1000;

/// The body of `GetServiceQuota` for "Routes per route table".
pub fn request_body() -> String {
    serde_json::json!({
        "ServiceCode": SERVICE_CODE,
        "QuotaCode": ROUTES_PER_ROUTE_TABLE,
    })
    .to_string()
}

/// The applied value in a `GetServiceQuota` reply (`{"Quota": {"Value": 500.0, …}}`),
/// as a whole number of routes between 1 and 1000.
pub fn parse_reply(body: &str) -> Result<usize, String> {
    let value: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("the reply is not JSON ({e})"))?;
    let quota = value
        .get("Quota")
        .ok_or("the reply has no \"Quota\" object")?;
    if let Some(code) = quota.get("QuotaCode").and_then(|c| c.as_str())
        && code != ROUTES_PER_ROUTE_TABLE
    {
        return Err(format!(
            "the reply is for quota {code:?}, not {ROUTES_PER_ROUTE_TABLE}"
        ));
    }
    let number = quota
        .get("Value")
        .and_then(|v| v.as_f64())
        .ok_or("the reply's quota has no numeric \"Value\"")?;
    if !number.is_finite() || number < 1.0 || number > MAX_ROUTE_TABLE_LIMIT as f64 {
        return Err(format!(
            "the quota's value {number} is not between 1 and {MAX_ROUTE_TABLE_LIMIT} routes"
        ));
    }
    // A fractional value (never seen) cannot be exceeded by its floor.
    Ok(number.floor() as usize)
}

/// What the read gave, and the one log line to write about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The routes each table may hold.
    pub limit: usize,
    /// True when the account's value was read; false when the default is assumed.
    pub from_account: bool,
    /// The log line (info when read, warning when assumed).
    pub message: String,
}

/// The limit from the outcome of the one `GetServiceQuota` call (`reply` is its body
/// or why it failed) in `region`.
pub fn decide(reply: Result<String, QueryError>, region: &str) -> Decision {
    let quota = format!(
        "Service Quotas \"Routes per route table\" ({SERVICE_CODE}/{ROUTES_PER_ROUTE_TABLE}) in {region}"
    );
    let fallback = |why: String| Decision {
        limit: DEFAULT_ROUTE_TABLE_LIMIT,
        from_account: false,
        message: format!(
            "AWS: {why}; assuming AWS's default of {DEFAULT_ROUTE_TABLE_LIMIT} routes per route \
             table. To use the account's own value, allow servicequotas:GetServiceQuota in the \
             controller's IAM policy (optional, see the README's AWS IAM policy) or set \
             RouteTableRouteLimit in --cloud-config; EC2 still refuses a route beyond the real \
             quota (RouteLimitExceeded)"
        ),
    };
    let body = match reply {
        Ok(body) => body,
        Err(QueryError::Service { code, message, .. }) if is_access_denied(&code) => {
            return fallback(format!(
                "may not read {quota}: {code}: {message} (servicequotas:GetServiceQuota is not \
                 allowed)"
            ));
        }
        Err(QueryError::Service { code, message, .. }) if code == "NoSuchResourceException" => {
            return fallback(format!("{quota} was not found: {code}: {message}"));
        }
        Err(e) => return fallback(format!("reading {quota} failed: {e}")),
    };
    match parse_reply(&body) {
        Ok(limit) => Decision {
            limit,
            from_account: true,
            message: format!(
                "AWS: route tables hold at most {limit} routes, the account's {quota} \
                 (RouteTableRouteLimit in --cloud-config overrides it)"
            ),
        },
        Err(why) => fallback(format!("{quota} could not be read: {why}")),
    }
}

/// Service Quotas says `AccessDeniedException`; moto's IAM checks say `AccessDenied`.
fn is_access_denied(code: &str) -> bool {
    matches!(code, "AccessDeniedException" | "AccessDenied")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service_error(code: &str, message: &str) -> QueryError {
        QueryError::Service {
            status: 400,
            code: code.into(),
            message: message.into(),
            request_id: None,
        }
    }

    #[test]
    fn the_request_names_the_vpc_service_and_the_routes_per_table_quota() {
        let body: serde_json::Value = serde_json::from_str(&request_body()).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({"ServiceCode": "vpc", "QuotaCode": "L-93826ACB"})
        );
    }

    #[test]
    fn the_applied_value_is_read_from_the_reply() {
        // The shape of Service Quotas' reply (and moto's), trimmed.
        let reply = r#"{"Quota": {"ServiceCode": "vpc", "QuotaCode": "L-93826ACB",
            "QuotaName": "Routes per route table", "Value": 200.0, "Adjustable": true}}"#;
        assert_eq!(parse_reply(reply), Ok(200));
        assert_eq!(parse_reply(r#"{"Quota": {"Value": 1000}}"#), Ok(1000));
        let decision = decide(Ok(reply.into()), "eu-west-1");
        assert_eq!((decision.limit, decision.from_account), (200, true));
        assert!(
            decision.message.contains("200 routes"),
            "{}",
            decision.message
        );
    }

    #[test]
    fn a_reply_that_cannot_be_believed_is_an_error_naming_what_is_wrong() {
        for (reply, says) in [
            ("<html>", "not JSON"),
            ("{}", "no \"Quota\""),
            (r#"{"Quota": {"Value": "500"}}"#, "no numeric"),
            (r#"{"Quota": {"Value": 0}}"#, "not between 1 and 1000"),
            (r#"{"Quota": {"Value": 1e9}}"#, "not between 1 and 1000"),
            (
                r#"{"Quota": {"QuotaCode": "L-2AEEBF1A", "Value": 20}}"#,
                "not L-93826ACB",
            ),
        ] {
            let err = parse_reply(reply).expect_err(reply);
            assert!(err.contains(says), "{reply}: {err}");
            let decision = decide(Ok(reply.into()), "us-east-1");
            assert_eq!(decision.limit, 500, "{reply}");
            assert!(!decision.from_account);
            assert!(decision.message.contains(says), "{}", decision.message);
        }
    }

    #[test]
    fn without_the_permission_or_the_quota_or_an_answer_the_limit_is_the_default_and_says_how_to_grant_it()
     {
        for (reply, says) in [
            (
                Err(service_error("AccessDeniedException", "not authorized")),
                "is not allowed",
            ),
            (
                Err(service_error("AccessDenied", "moto says no")),
                "is not allowed",
            ),
            (
                Err(service_error("NoSuchResourceException", "no such quota")),
                "was not found",
            ),
            (
                Err(QueryError::Transport {
                    maybe_sent: false,
                    message: "connection refused".into(),
                }),
                "failed: connection refused",
            ),
            (Err(service_error("ServiceException", "boom")), "failed"),
        ] {
            let d = decide(reply, "us-east-1");
            assert_eq!((d.limit, d.from_account), (500, false), "{}", d.message);
            for part in [
                says,
                "servicequotas:GetServiceQuota",
                "RouteTableRouteLimit",
                "vpc/L-93826ACB",
                "in us-east-1",
                "default of 500",
            ] {
                assert!(d.message.contains(part), "{part:?} in {}", d.message);
            }
            assert!(!d.message.contains('\n'), "one line: {}", d.message);
        }
    }
}
