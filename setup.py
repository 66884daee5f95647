# cffi_modules is a setup() keyword, so this shim sits beside pyproject.toml.
from setuptools import setup

setup(cffi_modules=["simulator/_build.py:ffibuilder"])
