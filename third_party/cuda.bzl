"""cuda_library: compiles .cu files with the local nvcc into a static archive.

Bazel 4.2.3 has no CUDA rules and nothing can be downloaded, so a genrule runs
nvcc (found by //third_party:cuda_configure.bzl) once per .cu file and packs
the objects with `ar`; the archive is wrapped by cc_import (alwayslink, so the
fatbinary registration constructors are never dropped) and a cc_library that
adds the CUDA runtime.

Where @local_cuda has no CUDA (a CPU-only machine, or --config=cpu_only) the
same target is a plain cc_library of `stub_srcs`, so everything that depends
on it still builds; stubs report absl::UnavailableError("pshard was built
without CUDA") at run time.

Keep .cu interfaces plain (raw pointers, cudaStream_t, cudaError_t): nvcc is
never handed Abseil or protobuf headers. Convert to absl::Status in a .cc.

Example:

    cuda_library(
        name = "kernels",
        srcs = ["kernels.cu"],
        hdrs = ["kernels.h"],
        stub_srcs = ["kernels_stub.cc"],
    )
"""

load("@local_cuda//:defs.bzl", "HAS_CUDA", "NVCC")

# Ampere (A100) and Hopper (H100/H200) machine code, plus Hopper PTX so newer
# GPUs can JIT-compile the kernels instead of failing to load them.
NVCC_FLAGS = [
    "-Xcompiler",
    "-fPIC",
    "-std=c++17",
    "-O3",
    "-gencode",
    "arch=compute_80,code=sm_80",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
]

def cuda_library(
        name,
        srcs,
        hdrs = [],
        textual_hdrs = [],
        deps = [],
        stub_srcs = [],
        stub_deps = [],
        nvcc_flags = [],
        visibility = None,
        testonly = False):
    """A C++ library from CUDA sources, or from CPU stubs without CUDA.

    Args:
      name: target name; `:name` is the cc_library to depend on.
      srcs: .cu files, each compiled separately by nvcc.
      hdrs: headers of the library (also visible to nvcc).
      textual_hdrs: extra headers the .cu files include.
      deps: cc deps of the CUDA build (their headers are NOT given to nvcc).
      stub_srcs: sources compiled instead of `srcs` when CUDA is absent.
      stub_deps: deps of the stub build.
      nvcc_flags: extra nvcc flags, appended to NVCC_FLAGS.
      visibility: as usual.
      testonly: as usual.
    """
    if not HAS_CUDA:
        native.cc_library(
            name = name,
            srcs = stub_srcs,
            hdrs = hdrs,
            textual_hdrs = textual_hdrs,
            deps = stub_deps,
            visibility = visibility,
            testonly = testonly,
        )
        return

    archive = "lib%s_cuda.a" % name
    compile_cmds = []
    for i, src in enumerate(srcs):
        compile_cmds.append(
            "\"%s\" %s -I. -I$(GENDIR) -c $(location %s) -o \"$$T/%d.o\"" % (
                NVCC,
                " ".join(NVCC_FLAGS + nvcc_flags),
                src,
                i,
            ),
        )
    native.genrule(
        name = name + "_nvcc",
        # nvcc finds the CUDA headers itself, in its own installation.
        srcs = srcs + hdrs + textual_hdrs,
        outs = [archive],
        cmd = " && ".join(
            ["T=$$(mktemp -d)"] + compile_cmds +
            ["ar rcs $@ $$T/*.o", "rm -rf \"$$T\""],
        ),
        message = "nvcc %s" % name,
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_import(
        name = name + "_archive",
        static_library = archive,
        alwayslink = True,
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        hdrs = hdrs,
        textual_hdrs = textual_hdrs,
        deps = [
            ":" + name + "_archive",
            "@local_cuda//:cuda_headers",
            "@local_cuda//:cudart",
        ] + deps,
        visibility = visibility,
        testonly = testonly,
    )
