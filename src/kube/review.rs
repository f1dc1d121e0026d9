//! Delegated authentication and authorization: a TokenReview asks the API server who
//! a bearer token belongs to, a SubjectAccessReview whether that user may `get` a
//! non-resource URL. These are the two calls the cloud-controller-manager's
//! `--authentication-kubeconfig`/`--authorization-kubeconfig` and controller-runtime's
//! `WithAuthenticationAndAuthorization` make for `/metrics`.
//!
//! Only the calls live here; caching and the decision of what to ask belong to the
//! metrics server (`serve`). Neither call stores anything, so they bypass the write
//! rate limiter (see [`Client::post_review`]).

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use super::client::Client;
use super::error::KubeError;
use crate::secret::Secret;

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Who a token belongs to, as the API server's authenticator says.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenIdentity {
    /// The token is valid for this user.
    User(UserInfo),
    /// The token is not valid (unknown, expired, revoked); the reason if the server
    /// gave one.
    Unauthenticated(String),
}

/// `POST tokenreviews`: who `token` belongs to. An error means the question could not
/// be answered (the API server is unreachable or refused the review itself), which is
/// not the same as a bad token.
pub fn review_token(client: &Client, token: &Secret) -> Result<TokenIdentity, KubeError> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.expose().to_string()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let answer: TokenReview = client.post_review(TOKEN_REVIEWS, &review)?;
    let status = answer.status.unwrap_or_default();
    match (status.authenticated, status.user) {
        (Some(true), Some(user)) => Ok(TokenIdentity::User(user)),
        _ => Ok(TokenIdentity::Unauthenticated(
            status
                .error
                .unwrap_or_else(|| "the token is not valid".to_string()),
        )),
    }
}

/// `POST subjectaccessreviews`: whether `user` may `verb` the non-resource URL `path`
/// (as RBAC's `nonResourceURLs` rules grant it). `Ok(Err(reason))` is a denial.
pub fn review_access(
    client: &Client,
    user: &UserInfo,
    verb: &str,
    path: &str,
) -> Result<Result<(), String>, KubeError> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some(verb.to_string()),
            }),
            resource_attributes: None,
        },
        ..SubjectAccessReview::default()
    };
    let answer: SubjectAccessReview = client.post_review(SUBJECT_ACCESS_REVIEWS, &review)?;
    let status = answer.status.unwrap_or_default();
    if status.allowed {
        return Ok(Ok(()));
    }
    let reason = status
        .reason
        .filter(|r| !r.is_empty())
        .or(status.evaluation_error)
        .unwrap_or_else(|| "no RBAC rule allows it".to_string());
    Ok(Err(reason))
}
