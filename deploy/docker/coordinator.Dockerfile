# pshard-coordinator on Debian 12, the distribution it is built on, with only
# the shared libraries it links. The build context is Bazel's output tree;
# see docs/deploy.md:
#   bazel build -c opt --config=cpu_only --platform_suffix=cpu --symlink_prefix=bazel-cpu- //server:pshard-coordinator
#   docker build -f deploy/docker/coordinator.Dockerfile -t pshard/coordinator:0.1.0 bazel-cpu-bin/
# (deploy/docker/build_images.sh does both; the CPU-only build has its own
# output tree, so a CUDA build never replaces its binaries.)
ARG BASE_IMAGE=debian:12.11-slim
FROM ${BASE_IMAGE}

# The Debian packages of the libraries the binary links. A base image made
# by make_base_image.sh (hosts that reach no registry) has them all, and
# then apt is not run.
RUN packages="libabsl20220623 libatomic1 libc-ares2 libgflags2.2 \
      libgoogle-glog0v6 libgrpc++1.51 libgrpc29 \
      libprometheus-cpp-core1.0 libprotobuf32 libre2-9 libsqlite3-0 \
      libssl3" \
 && if [ "$(dpkg-query -W -f '${db:Status-Abbrev}\n' $packages 2>/dev/null | grep -c '^ii')" \
        != "$(echo $packages | wc -w)" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && groupadd --gid 65532 pshard \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin pshard \
 && install -d -o 65532 -g 65532 /var/lib/pshard /var/lib/pshard/state

COPY server/pshard-coordinator /usr/local/bin/pshard-coordinator

USER 65532:65532
WORKDIR /var/lib/pshard
EXPOSE 7070 8081 9090
ENTRYPOINT ["/usr/local/bin/pshard-coordinator"]
CMD ["--listen=0.0.0.0:7070", "--state_path=/var/lib/pshard/state/pshard-coordinator.db"]
