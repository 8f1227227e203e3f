"""Build configuration beyond pyproject.toml: the repository's top-level folders of shipped
YAML files (accelerators/, workloads/, dataflows/, search/) go into the package as
`tileflow/_data/<folder>/`, where `tileflow.shipped` finds them in an installed copy."""

from setuptools import find_packages, setup

DATA = ("accelerators", "workloads", "dataflows", "search")
PATTERNS = ["*.yaml", "*.yml", "*.md", "*/*.yaml", "*/*.yml"]  # search/<study>/*.yaml too
# the search-quality suite is the project's evidence, run from a checkout, not a study
NOT_SHIPPED = {"tileflow._data.search": ["quality/*.yaml", "quality/*.yml"]}

setup(
    packages=find_packages(include=["tileflow", "tileflow.*"])
    + [f"tileflow._data.{name}" for name in DATA],
    package_dir={f"tileflow._data.{name}": name for name in DATA},
    package_data={f"tileflow._data.{name}": PATTERNS for name in DATA},
    exclude_package_data=NOT_SHIPPED,
)
