"""Build configuration beyond pyproject.toml: the repository's top-level folders of shipped
YAML files (accelerators/, workloads/, dataflows/, search/) go into the package as
`tileflow/_data/<folder>/`, where `tileflow.shipped` finds them in an installed copy."""

from setuptools import find_packages, setup

DATA = ("accelerators", "workloads", "dataflows", "search")
PATTERNS = ["*.yaml", "*.yml", "*.md", "*/*.yaml", "*/*.yml",  # search/<study>/*.yaml too
            "*/*/*.yaml", "*/*/*/*.yaml"]  # search/quality/{chips,trees/hand}/

setup(
    packages=find_packages(include=["tileflow", "tileflow.*"])
    + [f"tileflow._data.{name}" for name in DATA],
    package_dir={f"tileflow._data.{name}": name for name in DATA},
    package_data={f"tileflow._data.{name}": PATTERNS for name in DATA},
)
