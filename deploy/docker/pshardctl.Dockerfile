# pshardctl, the command-line client, for Jobs and debugging pods in the
# cluster (it reads the coordinator address from $PSHARD_COORDINATOR).
#   bazel build -c opt --config=cpu_only --platform_suffix=cpu --symlink_prefix=bazel-cpu- //cli:pshardctl
#   docker build -f deploy/docker/pshardctl.Dockerfile -t pshard/pshardctl:0.1.0 bazel-cpu-bin/
# (deploy/docker/build_images.sh does both; the CPU-only build has its own
# output tree, so a CUDA build never replaces its binaries.)
ARG BASE_IMAGE=debian:12.11-slim
FROM ${BASE_IMAGE}

# The Debian packages of the libraries the binary links. A base image made
# by make_base_image.sh (hosts that reach no registry) has them all, and
# then apt is not run.
RUN packages="libabsl20220623 libatomic1 libc-ares2 libgrpc++1.51 libgrpc29 \
      libprotobuf32 libre2-9 libssl3" \
 && if [ "$(dpkg-query -W -f '${db:Status-Abbrev}\n' $packages 2>/dev/null | grep -c '^ii')" \
        != "$(echo $packages | wc -w)" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && groupadd --gid 65532 pshard \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin pshard

COPY cli/pshardctl /usr/local/bin/pshardctl

USER 65532:65532
ENV PSHARD_COORDINATOR=pshard-coordinator:7070
ENTRYPOINT ["/usr/local/bin/pshardctl"]
CMD ["--help"]
