# pshardctl, the command-line client, for Jobs and debugging pods in the
# cluster (it reads the coordinator address from $PSHARD_COORDINATOR).
#   bazel build -c opt --config=cpu_only //cli:pshardctl
#   docker build -f deploy/docker/pshardctl.Dockerfile -t pshard/pshardctl:0.1.0 bazel-bin/
ARG BASE_IMAGE=debian:12.11-slim
FROM ${BASE_IMAGE}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libabsl20220623 libatomic1 libc-ares2 libgrpc++1.51 libgrpc29 \
      libprotobuf32 libre2-9 libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 pshard \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin pshard

COPY cli/pshardctl /usr/local/bin/pshardctl

USER 65532:65532
ENV PSHARD_COORDINATOR=pshard-coordinator:7070
ENTRYPOINT ["/usr/local/bin/pshardctl"]
CMD ["--help"]
