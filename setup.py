"""The package list of the `dsdoctor` distribution (everything else is in pyproject.toml).

pyproject.toml maps ``dsdoctor.api``, ``dsdoctor.kb`` and ``dsdoctor.rules`` onto the top-level
folders; setuptools' own discovery cannot prefix the packages it finds there, so they are listed
here, found afresh at every build so that a new subpackage is never left out of the wheel. Data
folders (``kb/data/...``, templates) count as namespace packages, as with pyproject's ``find``.
"""

from setuptools import find_namespace_packages, setup

LAYERS = ("api", "kb", "rules")

setup(packages=["dsdoctor", *(f"dsdoctor.{name}" for layer in LAYERS
                              for name in find_namespace_packages(include=[layer, f"{layer}.*"],
                                                                  exclude=["*__pycache__*"]))])
