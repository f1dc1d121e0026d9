# The route-controller image: the static musl binary and nothing else. It needs no libc
# and brings its own TLS roots (it trusts the CAs an operator names through the
# providers' options and SSL_CERT_FILE), so the image has no shell, no package manager
# and no trust store to patch.
#
# From a binary built already (what CI and the tests do; nothing is pulled):
#   cargo build --release --target x86_64-unknown-linux-musl
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse --short HEAD) \
#     -t route-controller:0.1.0 .
# BINARY names another build of it (CI's: target/musl/x86_64-unknown-linux-musl/release/
# route-controller). Building from source in a Rust image instead (the build stage below;
# pulls docker.io/library/rust):
#   docker build --target from-source -t route-controller:0.1.0 .
# Either works with `buildah build` (or podman) as well.

# --- what every image has: labels, the user of the manifests and the chart ----------
FROM scratch AS base
ARG VERSION=0.1.0
ARG REVISION=unknown
# The repository's URL: none is published yet, so it is given at build time.
ARG SOURCE=""
LABEL org.opencontainers.image.title="route-controller" \
      org.opencontainers.image.description="A Kubernetes route controller: keeps a cloud's route table in step with the cluster's nodes (poll and watch-based reconciliation, KEP-5237)." \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# Numeric, as scratch has no /etc/passwd; the same as the manifests' runAsUser.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/route-controller"]

# --- the binary built from source: `--target from-source` -----------------------------
FROM docker.io/library/rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
ARG REVISION
# No .git in the context: the commit for `--version` comes from REVISION (build.rs).
RUN ROUTE_CONTROLLER_COMMIT="${REVISION}" cargo build --release --locked \
      --target x86_64-unknown-linux-musl --bin route-controller

FROM base AS from-source
COPY --from=build --chmod=0555 /src/target/x86_64-unknown-linux-musl/release/route-controller /usr/local/bin/route-controller

# --- the default: a binary built already ------------------------------------------------
FROM base
ARG BINARY=target/x86_64-unknown-linux-musl/release/route-controller
COPY --chmod=0555 ${BINARY} /usr/local/bin/route-controller
