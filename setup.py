"""Only the native line scanner; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "preemptscope.ingest._scan",
            sources=["ingest/_scan.c"],
            extra_compile_args=["-O3"],
            # Without a C compiler the package still installs; logs.py then routes every
            # line with the Polars cascade (slower, same results).
            optional=True,
        )
    ]
)
