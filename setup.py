"""The one compiled part: pipeline/load/_btree.c, the loader's fast path for integer columns (optional:
without a C compiler the package installs without it and reads every table through SQLite)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("pipeline.load._btree", ["pipeline/load/_btree.c"], optional=True,
                             extra_compile_args=["-O2"])])
