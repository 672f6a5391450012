# pshard-worker for GPU nodes (NCCL, CUDA kernels) on NVIDIA's CUDA runtime
# image. Build it with CUDA (the default where /usr/local/cuda exists), into
# its own output tree so that it does not replace the CPU build; see
# docs/deploy.md:
#   bazel build -c opt --platform_suffix=gpu --symlink_prefix=bazel-gpu- //worker:pshard-worker
#   docker build -f deploy/docker/worker-gpu.Dockerfile -t pshard/worker-gpu:0.1.0 bazel-gpu-bin/
#
# The CUDA image is Ubuntu, the worker is built on Debian 12: rather than
# trusting Ubuntu's builds of gRPC, protobuf, Abseil and Gloo to match
# Debian's ABI, a Debian stage installs the exact libraries the build linked
# against, and `ldd` of the binary itself picks the ones to carry over (all
# but the C/C++ runtime, which the newer Ubuntu provides, and CUDA/NCCL, which
# the CUDA image provides).
ARG BASE_IMAGE=debian:12.11-slim
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-runtime-ubuntu24.04

FROM ${BASE_IMAGE} AS libs
# The Debian packages of the libraries the binary links. A base image made
# by make_base_image.sh (hosts that reach no registry) has them all, and
# then apt is not run.
RUN packages="libabsl20220623 libatomic1 libc-ares2 libgflags2.2 libgloo0 \
      libgoogle-glog0v6 libgrpc++1.51 libgrpc29 libopenblas0-pthread \
      libprometheus-cpp-core1.0 libprotobuf32 libre2-9 libssl3" \
 && if [ "$(dpkg-query -W -f '${db:Status-Abbrev}\n' $packages 2>/dev/null | grep -c '^ii')" \
        != "$(echo $packages | wc -w)" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages \
      && rm -rf /var/lib/apt/lists/*; \
    fi
COPY worker/pshard-worker /usr/local/bin/pshard-worker
RUN mkdir -p /opt/pshard/lib \
 && ldd /usr/local/bin/pshard-worker \
    | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' \
    | grep -Ev '/(libc|libm|libdl|librt|libpthread|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' \
    | xargs -r -I{} cp -L {} /opt/pshard/lib/ \
 && ls /opt/pshard/lib

FROM ${CUDA_IMAGE}
# NCCL as the worker was built against (NCCL 2.28 for CUDA 13.0), from the
# CUDA apt repository the image is configured with.
ARG NCCL_PACKAGE_VERSION=2.28.9-1+cuda13.0
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      --allow-change-held-packages --allow-downgrades libnccl2=${NCCL_PACKAGE_VERSION} \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 pshard \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin pshard \
 && install -d -o 65532 -g 65532 /var/lib/pshard /var/lib/pshard/output

COPY --from=libs /opt/pshard/lib /opt/pshard/lib
COPY worker/pshard-worker /usr/local/bin/pshard-worker

ENV LD_LIBRARY_PATH=/opt/pshard/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64
ENV NVIDIA_VISIBLE_DEVICES=all
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 65532:65532
WORKDIR /var/lib/pshard
EXPOSE 7071 8081 9090
ENTRYPOINT ["/usr/local/bin/pshard-worker"]
