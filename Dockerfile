# syntax=docker/dockerfile:1
#
# The Hangar controller image: the `hangar` binary on distroless, nothing else.
#
#   docker build -t <registry>/hangar:0.1.0 .
#
# Stage 1 builds only the `hangar` binary (its own crates and their dependencies; the test,
# simulator and xtask crates are workspace members cargo must see, but are not compiled).
# TLS is rustls with ring, so nothing links OpenSSL; the binary needs only glibc and libgcc_s,
# which distroless/cc provides.
ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build directory between builds; the binary is copied out
# of the (mounted, hence not layered) target directory.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --package hangar --bin hangar \
    && install -D -m 0755 target/release/hangar /out/hangar

# Stage 2: no shell, no package manager; uid/gid 65532 (distroless "nonroot"), which the Helm
# chart's podSecurityContext also sets.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/hangar /hangar
USER 65532:65532
# Metrics, probes, GitHub webhooks, admission webhooks (the chart's defaults).
EXPOSE 8080 8081 8000 9443
ENTRYPOINT ["/hangar"]
CMD ["run"]
