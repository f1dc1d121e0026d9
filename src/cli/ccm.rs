//! The cloud-controller-manager's flags and feature gates that route-controller accepts
//! without giving them a meaning, as upstream's command (`k8s.io/cloud-provider/app`
//! v0.37.2) declares them: name, type and default. `tests/ccm_flags.rs` compares both
//! tables with the real command's flag set, built by
//! `tests/kube-apiserver/ccm-flags`, so they cannot drift from upstream.
//!
//! To give one of these flags its meaning, change its `Flag::ignored(...)` to
//! `Flag::ignored(...).applies("what it does")` and read it where it applies; it then
//! shows in full in `run --help` and no longer warns.

use super::flags::{Flag, Kind};

/// The CCM's flags that `run` accepts and ignores with a warning, in upstream's order.
/// The flags that apply are declared in [`super::run`].
pub const FLAGS: &[Flag] = &[
    Flag::ignored("allocate-node-cidrs", Kind::Bool, "false"),
    Flag::ignored("allow-untagged-cloud", Kind::Bool, "false"),
    Flag::ignored("authentication-kubeconfig", Kind::String, "").applies(
        "kubeconfig of the API server that checks tokens (TokenReview) on the secure port (default: the --kubeconfig connection)",
    ),
    Flag::ignored("authentication-skip-lookup", Kind::Bool, "false"),
    Flag::ignored(
        "authentication-token-webhook-cache-ttl",
        Kind::Duration,
        "10s",
    ),
    Flag::ignored(
        "authentication-tolerate-lookup-failure",
        Kind::Bool,
        "false",
    ),
    Flag::ignored("authorization-always-allow-paths", Kind::List, "[/healthz,/readyz,/livez]").applies(
        "paths served on the secure port without a token, comma-separated; a trailing * is a prefix",
    ),
    Flag::ignored("authorization-kubeconfig", Kind::String, "").applies(
        "kubeconfig of the API server that authorizes requests (SubjectAccessReview) on the secure port (default: the --kubeconfig connection)",
    ),
    Flag::ignored(
        "authorization-webhook-cache-authorized-ttl",
        Kind::Duration,
        "10s",
    ),
    Flag::ignored(
        "authorization-webhook-cache-unauthorized-ttl",
        Kind::Duration,
        "10s",
    ),
    Flag::ignored("bind-address", Kind::String, "0.0.0.0").applies(
        "the address the secure port listens on",
    ),
    Flag::ignored("cert-dir", Kind::String, "").applies(
        "where the self-signed certificate is kept and reused; ignored with --tls-cert-file (default: in memory)",
    ),
    Flag::ignored("cidr-allocator-type", Kind::String, "RangeAllocator"),
    Flag::ignored("client-ca-file", Kind::String, ""),
    Flag::ignored("concurrent-node-lifecycle-syncs", Kind::Int, "1"),
    Flag::ignored("concurrent-node-status-updates", Kind::Int, "0"),
    Flag::ignored("concurrent-node-syncs", Kind::Int, "1"),
    Flag::ignored("concurrent-service-syncs", Kind::Int, "1"),
    Flag::ignored("contention-profiling", Kind::Bool, "false"),
    Flag::ignored("controller-start-interval", Kind::Duration, "0s"),
    Flag::ignored("controllers", Kind::List, "[*]"),
    Flag::ignored("disable-http2-serving", Kind::Bool, "false"),
    Flag::ignored("enable-leader-migration", Kind::Bool, "false"),
    Flag::ignored("external-cloud-volume-plugin", Kind::String, ""),
    Flag::ignored("http2-max-streams-per-connection", Kind::Int, "0"),
    Flag::ignored(
        "kube-api-content-type",
        Kind::String,
        "application/vnd.kubernetes.protobuf",
    )
    .applies(
        "the node watch's encoding: protobuf (about four times cheaper for the API server to send) or application/json; other requests are JSON",
    ),
    Flag::ignored("leader-migration-config", Kind::String, ""),
    Flag::ignored("log-flush-frequency", Kind::Duration, "5s"),
    Flag::ignored("log-text-info-buffer-size", Kind::String, "0"),
    Flag::ignored("log-text-split-stream", Kind::Bool, "false"),
    Flag::ignored("node-monitor-period", Kind::Duration, "5s"),
    Flag::ignored("node-status-update-frequency", Kind::Duration, "5m0s"),
    Flag::ignored("node-sync-period", Kind::Duration, "0s"),
    Flag::ignored("permit-address-sharing", Kind::Bool, "false"),
    Flag::ignored("permit-port-sharing", Kind::Bool, "false"),
    Flag::ignored("profiling", Kind::Bool, "true"),
    Flag::ignored("requestheader-allowed-names", Kind::List, "[]"),
    Flag::ignored("requestheader-client-ca-file", Kind::String, ""),
    Flag::ignored(
        "requestheader-extra-headers-prefix",
        Kind::List,
        "[x-remote-extra-]",
    ),
    Flag::ignored(
        "requestheader-group-headers",
        Kind::List,
        "[x-remote-group]",
    ),
    Flag::ignored("requestheader-uid-headers", Kind::List, "[]"),
    Flag::ignored(
        "requestheader-username-headers",
        Kind::List,
        "[x-remote-user]",
    ),
    Flag::ignored("secure-port", Kind::Int, "10270").applies(
        "the HTTPS port of /metrics (authorized), /healthz, /readyz and /livez; 0 turns it \
         off. Not the CCM's 10258, which a CCM on the same host network holds",
    ),
    Flag::ignored("tls-cert-file", Kind::String, "").applies(
        "the serving certificate (PEM, leaf first) of the secure port; without it a self-signed one is made at start",
    ),
    Flag::ignored("tls-cipher-suites", Kind::List, "[]"),
    Flag::ignored("tls-curve-preferences", Kind::List, "[]"),
    Flag::ignored("tls-min-version", Kind::String, ""),
    Flag::ignored("tls-private-key-file", Kind::String, "").applies(
        "the key of --tls-cert-file",
    ),
    Flag::ignored("tls-sni-cert-key", Kind::List, "[]"),
    Flag::ignored("use-service-account-credentials", Kind::Bool, "false"),
    Flag::ignored("vmodule", Kind::Map, ""),
    Flag::ignored("webhook-bind-address", Kind::String, "0.0.0.0"),
    Flag::ignored("webhook-cert-dir", Kind::String, ""),
    Flag::ignored("webhook-disable-http2-serving", Kind::Bool, "false"),
    Flag::ignored("webhook-secure-port", Kind::Int, "10260"),
    Flag::ignored("webhook-tls-cert-file", Kind::String, ""),
    Flag::ignored("webhook-tls-cipher-suites", Kind::List, "[]"),
    Flag::ignored("webhook-tls-curve-preferences", Kind::List, "[]"),
    Flag::ignored("webhook-tls-min-version", Kind::String, ""),
    Flag::ignored("webhook-tls-private-key-file", Kind::String, ""),
    Flag::ignored("webhook-tls-sni-cert-key", Kind::List, "[]"),
    Flag::ignored("webhooks", Kind::List, "[]"),
];

/// Flags that CCM templates in use pass although upstream's CCM at v0.37 does not
/// declare them (the kube-controller-manager's node IPAM flags, in kops's and
/// kube-hetzner's templates; cloud-provider-azure's dynamic reloading of its config
/// from a Secret, `cmd/cloud-controller-manager/app/options/dynamic.go`): accepted
/// with a warning, so those templates work.
pub const EXTRA_FLAGS: &[Flag] = &[
    Flag::ignored("node-cidr-mask-size", Kind::Int, "24"),
    Flag::ignored("node-cidr-mask-size-ipv4", Kind::Int, "24"),
    Flag::ignored("node-cidr-mask-size-ipv6", Kind::Int, "64"),
    Flag::ignored("service-cluster-ip-range", Kind::String, ""),
    Flag::ignored("enable-dynamic-reloading", Kind::Bool, "false"),
    Flag::ignored("cloud-config-secret-name", Kind::String, ""),
    Flag::ignored("cloud-config-secret-namespace", Kind::String, "kube-system"),
    Flag::ignored("cloud-config-key", Kind::String, "cloud-config"),
];

/// A feature gate's stage, as component-base names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

/// A feature gate the CCM knows.
#[derive(Clone, Copy, Debug)]
pub struct Gate {
    pub name: &'static str,
    pub stage: Stage,
    pub default: bool,
    /// Locked to its default: setting it to the other value is an error upstream.
    pub locked: bool,
}

const fn gate(name: &'static str, stage: Stage, default: bool, locked: bool) -> Gate {
    Gate {
        name,
        stage,
        default,
        locked,
    }
}

/// Every gate of the CCM's `--feature-gates`, `AllAlpha` and `AllBeta` included.
pub const GATES: &[Gate] = &[
    gate("APIResponseCompression", Stage::Beta, true, false),
    gate("APIServerIdentity", Stage::Beta, true, false),
    gate(
        "APIServerWebhookAuthenticationToken",
        Stage::Alpha,
        false,
        false,
    ),
    gate("APIServingWithRoutine", Stage::Alpha, false, false),
    gate(
        "AggregatedDiscoveryRemoveBetaType",
        Stage::Deprecated,
        true,
        true,
    ),
    gate("AllAlpha", Stage::Alpha, false, false),
    gate("AllBeta", Stage::Beta, false, false),
    gate("AllowParsingUserUIDFromCertAuth", Stage::Beta, true, false),
    gate(
        "AllowUnsafeMalformedObjectDeletion",
        Stage::Beta,
        true,
        false,
    ),
    gate("CBORServingAndStorage", Stage::Alpha, false, false),
    gate(
        "CloudControllerManagerWatchBasedRoutesReconciliation",
        Stage::Alpha,
        false,
        false,
    ),
    gate("CloudControllerManagerWebhook", Stage::Alpha, false, false),
    gate("ComponentFlagz", Stage::Beta, true, false),
    gate("ComponentStatusz", Stage::Beta, true, false),
    gate("ConcurrentWatchObjectDecode", Stage::Beta, true, false),
    gate(
        "ConsistentListFromCacheSkipTimeoutFallback",
        Stage::Alpha,
        false,
        false,
    ),
    gate("ConstrainedImpersonation", Stage::Beta, true, false),
    gate("ContextualLogging", Stage::Beta, true, false),
    gate(
        "ControllerManagerReleaseLeaderElectionLockOnExit",
        Stage::Alpha,
        false,
        false,
    ),
    gate("CoordinatedLeaderElection", Stage::Beta, false, false),
    gate("DeclarativeValidation", Stage::Ga, true, true),
    gate("DeclarativeValidationBeta", Stage::Beta, true, false),
    gate(
        "DeclarativeValidationTakeover",
        Stage::Deprecated,
        false,
        true,
    ),
    gate("DetectCacheInconsistency", Stage::Beta, true, false),
    gate("EtcdRangeStream", Stage::Beta, true, false),
    gate(
        "ExcludeAdmissionWebhookVirtualResources",
        Stage::Beta,
        true,
        false,
    ),
    gate("KMSv1", Stage::Deprecated, false, false),
    gate("ListFromCacheSnapshot", Stage::Beta, true, false),
    gate("LoggingAlphaOptions", Stage::Alpha, false, false),
    gate("LoggingBetaOptions", Stage::Beta, true, false),
    gate(
        "ManifestBasedAdmissionControlConfig",
        Stage::Beta,
        true,
        false,
    ),
    gate("MutatingAdmissionPolicy", Stage::Ga, true, false),
    gate("NativeHistograms", Stage::Beta, true, false),
    gate("OpenAPIEnums", Stage::Beta, true, false),
    gate("RemoteRequestHeaderUID", Stage::Beta, true, false),
    gate("SeparateCacheWatchRPC", Stage::Deprecated, false, true),
    gate("ShardedListAndWatch", Stage::Alpha, false, false),
    gate("SizeBasedListCostEstimate", Stage::Beta, true, false),
    gate("StorageVersionAPI", Stage::Alpha, false, false),
    gate("StorageVersionHash", Stage::Beta, true, false),
    gate(
        "StructuredAuthenticationConfigurationEgressSelector",
        Stage::Beta,
        true,
        false,
    ),
    gate(
        "StructuredAuthenticationConfigurationJWKSMetrics",
        Stage::Beta,
        true,
        false,
    ),
    gate(
        "TokenRequestServiceAccountUIDValidation",
        Stage::Beta,
        true,
        false,
    ),
    gate(
        "UnauthenticatedHTTP2DOSMitigation",
        Stage::Beta,
        true,
        false,
    ),
    gate(
        "UnknownVersionInteroperabilityProxy",
        Stage::Beta,
        true,
        false,
    ),
    gate(
        "WatchCacheInitializationPostStartHook",
        Stage::Ga,
        true,
        true,
    ),
    gate("WatchList", Stage::Beta, true, false),
    gate("WatchListCompression", Stage::Beta, true, false),
    gate("WebhookRoundTripLoadBalancing", Stage::Beta, true, false),
];
