"""Checks the Dockerfiles against the real Bazel outputs.

The binaries are this test's data dependencies, so Bazel has built them and
placed them in the runfiles at their output paths: a COPY source such as
server/pshard-coordinator (a path in bazel-bin, the images' build context)
must be such a file, made by a non-testonly cc_binary of that package, and be
executable. Then each image's `apt-get install` list must be exactly the
Debian packages that own the shared libraries the binary links (its ELF
NEEDED entries, resolved by ldd and `dpkg -S` on this Debian 12 build
machine), less those every Debian base image has (BASE_PACKAGES): a missing
package would make the binary fail to start in the image, an extra one only
makes the image bigger. For the GPU image, libraries of the CUDA toolkit
(outside dpkg, under /usr/local/cuda) come from the CUDA base image."""

import os
import subprocess
import unittest

import dockerfiles as d

# In every debian:12-slim image (priority required, or needed by apt).
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def needed_libraries(binary):
    """NEEDED sonames of an ELF file -> the path ldd resolves each to."""
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines()
              if "(NEEDED)" in line]
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    resolved = {}
    for line in ldd.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>":
            resolved[parts[0]] = parts[2]
        elif parts and parts[0].startswith("/"):
            # The dynamic loader, which ldd prints by path alone; a binary
            # that calls into it (__tls_get_addr) has it as NEEDED.
            resolved[os.path.basename(parts[0])] = parts[0]
    return {soname: resolved.get(soname) for soname in needed}


def _spellings(path):
    """`path`, its resolved form, and their /lib <-> /usr/lib spellings (a
    merged /usr registers files under either)."""
    out = []
    for p in (path, os.path.realpath(path)):
        out.append(p)
        if p.startswith("/usr/lib/"):
            out.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            out.append("/usr" + p)
    return out


def owning_packages(paths):
    """path -> the Debian package that installed it (None if none did), with
    one dpkg-query for all of them (each call reads every file list)."""
    candidates = sorted({c for p in paths for c in _spellings(p)})
    r = subprocess.run(["dpkg-query", "-S", *candidates], capture_output=True, text=True)
    owner = {}
    for line in r.stdout.splitlines():
        pkgs, sep, file = line.partition(": ")
        if sep and "," not in pkgs:
            owner[file.strip()] = pkgs.split(":")[0].strip()
    return {p: next((owner[c] for c in _spellings(p) if c in owner), None) for p in paths}


class OutputsTest(unittest.TestCase):

    def test_copied_files_are_bazel_outputs(self):
        for name, df in d.load_all().items():
            with self.subTest(dockerfile=name):
                for stage in df.stages:
                    for flags, sources, _ in df.copies(stage):
                        if "--from" in flags:
                            continue
                        for src in sources:
                            path = os.path.join(d.workspace_dir(), src)
                            self.assertTrue(os.path.isfile(path), f"{src} is not a build output")
                            self.assertTrue(os.access(path, os.X_OK), f"{src} is not executable")
                            package, target = os.path.split(src)
                            binaries = d.cc_binaries(package)
                            self.assertIsNotNone(binaries, f"//{package} has no BUILD file")
                            self.assertIn(target, binaries, f"//{package}:{target} is not a cc_binary")
                            self.assertFalse(binaries[target], f"//{package}:{target} is testonly")

    def test_apt_packages_are_exactly_the_linked_libraries(self):
        for name, df in d.load_all().items():
            with self.subTest(dockerfile=name):
                binary = os.path.join(d.workspace_dir(), df.binary_source())
                needed = needed_libraries(binary)
                packages = set()
                unresolved = [so for so, path in needed.items() if path is None or path == "not"]
                self.assertEqual(unresolved, [], f"{df.binary_source()}: do not resolve here")
                owners = owning_packages(list(needed.values()))
                for soname, path in needed.items():
                    pkg = owners[path]
                    if pkg is None:
                        # CUDA's libraries come from no Debian package: the GPU
                        # image's base provides them, and the CPU images are
                        # built with --config=cpu_only (build_images.sh), which
                        # links none of them, while this test sees the default
                        # build.
                        self.assertIn("/cuda", os.path.realpath(path),
                                      f"{soname} ({path}) belongs to no Debian package")
                        continue
                    packages.add(pkg)
                debian_stage = next(s for s in df.stages if s.image.startswith("debian:"))
                installed = set(df.apt_packages(debian_stage))
                self.assertEqual(sorted(installed), sorted(packages - BASE_PACKAGES))


if __name__ == "__main__":
    unittest.main()
