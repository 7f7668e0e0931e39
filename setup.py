"""Builds the optional C accelerator for bulk ingest (specwatch/logs/_fastscan.c).

Everything else is configured in pyproject.toml. If the extension cannot be compiled, specwatch
still works: ingest falls back to the pure-Python parser (slower on big files).
"""
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler: the pure-Python path is used
            print(f"warning: specwatch.logs._fastscan not built ({exc}); ingest uses the Python parser")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"warning: specwatch.logs._fastscan not built ({exc}); ingest uses the Python parser")


setup(ext_modules=[Extension("specwatch.logs._fastscan", ["specwatch/logs/_fastscan.c"],
                             extra_compile_args=["-O3", "-std=c11", "-D_GNU_SOURCE"])],
      cmdclass={"build_ext": OptionalBuildExt})
