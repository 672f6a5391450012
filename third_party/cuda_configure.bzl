"""Repository rule that exposes CUDA + NCCL from a local install, or nothing.

Looks for nvcc under $PSHARD_CUDA_PATH, else /usr/local/cuda. When found, the
repository @local_cuda has targets :cuda_headers, :cudart, :nccl, :cublas and
:nvcc, and defs.bzl says HAS_CUDA = True. When not found, the same targets
exist but are empty and HAS_CUDA = False, so the build stays CPU-only.
"""

def _cuda_configure_impl(ctx):
    cuda_path = ctx.os.environ.get("PSHARD_CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(cuda_path + "/bin/nvcc")
    has_cuda = nvcc.exists and ctx.os.environ.get("PSHARD_DISABLE_CUDA", "") != "1"
    if has_cuda:
        for d in ["include", "lib", "bin"]:
            ctx.symlink(cuda_path + "/" + d, d)
        lib_dir = str(ctx.path(cuda_path + "/lib").realpath)
        ctx.file("BUILD.bazel", _BUILD_WITH_CUDA.format(lib_dir = lib_dir))
    else:
        ctx.file("BUILD.bazel", _BUILD_WITHOUT_CUDA)
    ctx.file("defs.bzl", "HAS_CUDA = {}\nNVCC = \"{}\"\n".format(
        "True" if has_cuda else "False",
        str(nvcc) if has_cuda else "",
    ))

_BUILD_WITH_CUDA = """
package(default_visibility = ["//visibility:public"])

exports_files(["defs.bzl"])

filegroup(
    name = "nvcc",
    srcs = glob(["bin/**"]),
)

filegroup(
    name = "all_headers",
    srcs = glob(["include/**"]),
)

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    linkopts = ["-L{lib_dir}", "-Wl,-rpath,{lib_dir}", "-lcudart"],
    deps = [":cuda_headers"],
)

cc_library(
    name = "cublas",
    linkopts = ["-L{lib_dir}", "-Wl,-rpath,{lib_dir}", "-lcublas"],
    deps = [":cudart"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{lib_dir}", "-Wl,-rpath,{lib_dir}", "-lnccl"],
    deps = [":cudart"],
)
"""

_BUILD_WITHOUT_CUDA = """
package(default_visibility = ["//visibility:public"])

exports_files(["defs.bzl"])

filegroup(name = "nvcc")

filegroup(name = "all_headers")

cc_library(name = "cuda_headers")

cc_library(name = "cudart")

cc_library(name = "cublas")

cc_library(name = "nccl")
"""

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["PSHARD_CUDA_PATH", "PSHARD_DISABLE_CUDA"],
    local = True,
)
